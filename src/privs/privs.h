/*
 * privs — what the daemon may still do once it runs: CAP_NET_ADMIN and
 * CAP_NET_BIND_SERVICE, nothing else, and no way to gain more; and what
 * each of its threads may do, which is less (see "Per thread" below).
 *
 * Owns: dropping every other capability from the effective, permitted,
 * inheritable and bounding sets (the inheritable set ends up empty: we
 * never exec), clearing the ambient set, and setting no_new_privs; the
 * main thread's seccomp deny-list of what localdns never does (deny.c),
 * which every thread started after it inherits; starting every other
 * thread restricted to its kind's capabilities and seccomp allow-list
 * (thread.c).
 *
 * Must never: let a thread run its function before it is restricted; drop
 * process-wide (privs_drop) once a second thread exists (it checks and
 * refuses);
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

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"

/*
 * Keep CAP_NET_ADMIN and CAP_NET_BIND_SERVICE (those of them the process
 * has), drop the rest, set no_new_privs, install the deny-list on the
 * calling (main) thread when cfg->security.seccomp, and log what was
 * kept. Without
 * CAP_SETPCAP the bounding set stays as it is (logged; no_new_privs still
 * stops execve from granting anything). -1 with err set when the drop
 * fails, when a thread already runs, or when cfg needs CAP_NET_ADMIN
 * (interface.manage, nftables.enabled) and the process does not have it.
 */
int privs_drop(const struct config *cfg, char *err, size_t errlen);

/*
 * Per thread. What the process keeps is what the main thread needs: it
 * binds new listen sockets and changes the node on reload. Every other
 * thread starts through privs_thread_create and gives up what its kind
 * does not need before its function runs:
 *
 *   kind         capabilities    seccomp allow-list
 *   node         CAP_NET_ADMIN   netlink, unix (the keeper) sockets, reading /proc
 *   worker       none            its sockets and epoll; no socket(), no files
 *   resolver     none            + IPv4/IPv6 sockets, reading files, threads
 *   control      none            + IPv4/IPv6 sockets (lookup asks the daemon)
 *   http         none            + reading files (/proc), threads
 *   kubernetes   none            + IPv4/IPv6 sockets, reading files, threads
 *   querylog     none            writing its lines
 *   keeper       CAP_NET_ADMIN   its sockets, the link's messages, nftables,
 *                                TCP to the cluster DNS (IPv4/IPv6 sockets)
 *                                (the keeper process's working thread)
 *   dnstap       none            + unix and IPv4/IPv6 sockets to its collector
 *   worker that  none            the worker's and the resolver's together
 *   hosts the resolver
 *
 * Anything outside the list kills the process (SECCOMP_RET_KILL_PROCESS).
 * No list allows execve, a new process, netlink or packet sockets, opening
 * a file for writing, or making memory executable. Threads a library starts
 * inherit the list and capabilities of the thread that starts them. Beneath
 * each list, every thread also has the main thread's deny-list (privs_drop).
 * And no thread started here can be cancelled (pthread_cancel is never
 * called): cancellation is disabled, which lets glibc's wrapper around each
 * blocking call skip its two atomic operations (thread.c, never_cancelled).
 */
enum privs_thread {
	PRIVS_WORKER,
	PRIVS_RESOLVER,
	PRIVS_CONTROL,
	PRIVS_HTTP,
	PRIVS_KUBERNETES,
	PRIVS_QUERYLOG,
	PRIVS_NODE,
	PRIVS_KEEPER,      /* the keeper process's working thread (src/keeper/) */
	PRIVS_DNSTAP,
	/* A worker that also runs the resolver (upstream.resolver: the first
	 * worker): both lists, the resolver's files. */
	PRIVS_WORKER_RESOLVER,
};

/*
 * Whether threads started from now on install their seccomp filter
 * (security.seccomp; on until told otherwise). Capabilities are dropped
 * either way.
 */
void privs_use_seccomp(bool on);

/*
 * The files each kind of thread may read at all (Landlock, per thread like
 * seccomp; with security.seccomp): workers and the query log nothing, the
 * resolver /etc, /usr, /proc/self, /dev/urandom and the directories of
 * upstream.resolv_conf, trust_anchor, root_hints and tls_ca_file (so not
 * the service-account token), control and HTTP /proc and /sys/fs/cgroup, the
 * node monitor /proc/self and /etc, the keeper /proc; main and Kubernetes
 * are not limited. privs_read_for takes the configured files (privs_drop
 * calls it); privs_files_limited says whether the kernel can (Landlock).
 */
void privs_read_for(const struct config *cfg);
bool privs_files_limited(void);

/*
 * May the resolver thread, limited since start, read path? (A reload that
 * points upstream.trust_anchor or root_hints to another directory needs a
 * restart: libunbound reads them on the resolver thread.) true when files
 * are not limited.
 */
bool privs_resolver_may_read(const char *path);

/*
 * pthread_create for fn(arg) in a thread named name (at most 15 bytes
 * shown) that first drops to what kind keeps. Returns once that is done:
 * 0, or -1 with err when the thread could not start or restrict itself
 * (it has then ended without running fn).
 */
int privs_thread_create(pthread_t *thread, enum privs_thread kind, const char *name,
			void *(*fn)(void *), void *arg, char *err, size_t errlen);

/*
 * Run fn(arg) on a short-lived thread restricted as kind and named name,
 * and wait for it: for a library call that starts the library's own thread,
 * which then inherits the restrictions and the name. 0, or -1 with err
 * when the thread could not be made (fn did not run).
 */
int privs_run_as(enum privs_thread kind, const char *name, void (*fn)(void *), void *arg,
		 char *err, size_t errlen);

#endif
