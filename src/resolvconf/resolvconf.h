/*
 * resolvconf — reading the node's resolv.conf (upstream.resolv_conf) the way
 * glibc does: its nameservers, for forwarding when upstream.servers is
 * empty, and its search domains, for autopath.
 *
 * Owns: the parsing, and the choice of which nameservers can be used (a
 * malformed line, localdns itself, or a loopback stub that does not answer
 * are skipped, each with a log line saying why).
 *
 * Must never: run on a worker or the resolver thread (it may probe a
 * loopback nameserver for up to half a second); keep state.
 */
#ifndef LOCALDNS_RESOLVCONF_H
#define LOCALDNS_RESOLVCONF_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

/* Largest text form of a forwarder ("ip@port", or upstream.tls's "ip@port#name"). */
#define RESOLVCONF_ADDR_TEXT 320

/*
 * The usable nameservers of the resolv.conf at path, as "ip@53" strings
 * (libunbound's forward-addr form), at most max. Returns how many, or -1
 * with err set when the file cannot be read.
 */
int resolvconf_nameservers(const char *path, const struct config *cfg,
			   char out[][RESOLVCONF_ADDR_TEXT], size_t max, char *err, size_t errlen);

/*
 * The node's search domains: the last `search` or `domain` line, as
 * lower-cased wire names concatenated into out. Entries that are not DNS
 * names, the root, and those past cap bytes are left out with a log line.
 * Returns the bytes used (0: none), or -1 when the file cannot be read.
 */
int resolvconf_search_domains(const char *path, uint8_t *out, size_t cap);

#endif
