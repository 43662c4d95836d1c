/*
 * privs — what the daemon may still do once it runs: CAP_NET_ADMIN and
 * CAP_NET_BIND_SERVICE, nothing else, and no way to gain more.
 *
 * Owns: dropping every other capability from the effective, permitted,
 * inheritable and bounding sets (the inheritable set ends up empty: we
 * never exec), clearing the ambient set, and setting no_new_privs.
 *
 * Must never: run once a second thread exists (it checks and refuses);
 * change uid or gid (we stay uid 0 in a pod, so nothing depends on
 * PR_SET_KEEPCAPS, and files owned by root stay readable as their owner);
 * fail because a capability to drop was already missing.
 *
 * Why before the first thread and not at the end of start-up: Linux keeps
 * capabilities, the bounding set and no_new_privs per thread; capset(2)
 * and prctl(2) change the calling thread only, and a new thread copies its
 * creator's. Dropping before any thread starts therefore covers them all,
 * including the ones libunbound, liburcu and libcurl start themselves
 * (libcap's libpsx reaches only threads made through our own
 * pthread_create). Start-up loses nothing by it: binding port 53,
 * SO_RCVBUFFORCE, rtnetlink and nftables need exactly the two capabilities
 * kept, which is all the DaemonSet grants anyway, and what a reload does
 * later (bind new addresses, add them to the link, update nftables) needs
 * the same two.
 */
#ifndef LOCALDNS_PRIVS_H
#define LOCALDNS_PRIVS_H

#include <stddef.h>

#include "config/config.h"

/*
 * Keep CAP_NET_ADMIN and CAP_NET_BIND_SERVICE (those of them the process
 * has), drop the rest, set no_new_privs, and log what was kept. Without
 * CAP_SETPCAP the bounding set stays as it is (logged; no_new_privs still
 * stops execve from granting anything). -1 with err set when the drop
 * fails, when a thread already runs, or when cfg needs CAP_NET_ADMIN
 * (interface.manage, nftables.enabled) and the process does not have it.
 */
int privs_drop(const struct config *cfg, char *err, size_t errlen);

#endif
