/*
 * upstream/context.c — turning the upstream and cache sections of our
 * config into the unbound.conf text of a libunbound context.
 *
 * A context is configured through such a text (upstream.c writes it to a
 * memfd and reads it back with ub_ctx_config): forward-zone clauses have
 * no ub_ctx_set_option form, and one text is easy to log and reason
 * about. Nothing is written to disk. This file never calls libunbound.
 *
 * Choices that are not the operator's to make, and why (and, in
 * upstream.c and loop.c, libunbound on the resolver thread's own event
 * loop, neither a thread nor a forked process of its own):
 * - do-not-query-localhost: no, since a node's resolver (or a test's) may
 *   live on a loopback address;
 * - no message cache to speak of (one slab of size 0 keeps only the last
 *   message: unbound's hash tables always keep one entry): ours sits in
 *   front, and a second message cache would hand our prefetches and
 *   refreshes the same nearly expired answer back instead of asking. (A
 *   cache-max-ttl of 0 would do more, but it also zeroes the TTLs in the
 *   answers.) The RRset cache stays: it holds the delegations recursion
 *   needs (4 MiB) and the DS/DNSKEY sets validation fetches (1 MiB when
 *   forwarding with DNSSEC); unbound only builds CNAME, DNAME, DS and
 *   DNSKEY answers from it, never the A/AAAA/... answers we cache, so
 *   when forwarding without DNSSEC it gets 256 KiB: every answer passes
 *   through it, and at 1 MiB it held a second copy of 10,000 cached names
 *   (1.1 MiB of RSS, measured with tests/bench/memory.py);
 * - forwarded answers are cached in libunbound all the same (no
 *   forward-no-cache, though skipping its look-up and store would save
 *   about 7,000 instructions a miss): it restarts a question at each CNAME
 *   of an answer and takes the chain's next names from its RRset cache
 *   once it holds them, so without it every question about a chained name
 *   (another type, a refresh) asked the upstream for every link again:
 *   four times for c1 -> c2 -> c3 -> www instead of once;
 * - harden-below-nxdomain off unless DNSSEC is on: for every question
 *   it looks each parent name up in the message cache for an NXDOMAIN
 *   (RFC 8020), uses one only when the validator proved it, and its other
 *   uses need the validator too; without DNSSEC it was about 1,550
 *   instructions of each miss (callgrind) that could never change an
 *   answer;
 * - outgoing sockets only for the address families the forwarders use
 *   (do-ip4/do-ip6), unless recursing: libunbound keeps a table of the
 *   ~60,000 ports it may pick from for each family (240 KB each);
 * - the daemon's outgoing capacity, not the library's: libunbound's own
 *   defaults (16 outgoing UDP ports, 2 TCP connections, "reasonable for
 *   library use") let at most 16 questions be on the wire at once. Behind
 *   an upstream that rate-limits, a dropped packet holds its port for a
 *   retransmission timeout and a truncated answer waits for one of the two
 *   TCP connections, so 2,000 new names a second got a third answered
 *   (each waited 1.5 s on average) where Unbound answered all of them. A
 *   port per query a context may run (MAX_RESOLVING in upstream.c, 1,024;
 *   about 0.9 MiB of pre-made socket slots) and the daemon's 10 TCP
 *   connections, which libunbound keeps open and pipelines queries over
 *   (tcp-reuse-timeout, max-reuse-tcp-queries at their defaults);
 * - infra-keep-probing, so a forwarder that was down is tried again
 *   promptly once it is back instead of staying blocked;
 * - with DNSSEC, forward zones are marked domain-insecure: they are
 *   usually private names the public chain of trust says do not exist;
 * - the private-address reverse zones (unbound blocks them by default) are
 *   resolved like any other name: a node's resolver often serves them,
 *   and every peer we replace forwards them. The other special-use names
 *   (localhost., test., invalid., onion., home.arpa., ...) keep unbound's
 *   answers, except in a zone the operator forwards (upstream.forward_zones,
 *   and the fallback zones): there the listed servers answer;
 * - upstream.tls (DNS-over-TLS, RFC 7858) is per forward zone
 *   (forward-tls-upstream), not unbound's global tls-upstream: the
 *   cluster.fallback_servers zones go to kube-dns, which serves no TLS.
 *   Each forward-addr carries "#name", which libunbound checks the
 *   certificate against (set_auth_name); the CA bundle is tls_ca_file or
 *   the system's (tls-system-cert). libunbound never falls back to plain
 *   DNS for a TLS zone: a handshake or certificate failure is a failed
 *   query. Debian 12's libunbound8 is built with nettle, without
 *   OpenSSL, and cannot do TLS at all (its worker fails to start, so every
 *   query would fail): localdns links its own build of libunbound with
 *   OpenSSL (deploy/libunbound/build.sh), and upstream.c refuses
 *   upstream.tls on a libunbound without TLS all the same, with a message
 *   that says so (tls_supported, a probe that answers a local name and
 *   sends nothing).
 */
#include "upstream/context.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log/log.h"
#include "resolvconf/resolvconf.h"

#define MAX_FORWARDERS 16

/* ---- the unbound.conf text ------------------------------------------------ */

/* "ip:port" / "[ip6]:port" (normalised by the config loader) to "ip@port",
 * and "ip@port#name" for a server with a TLS name. */
static void forward_addr(const struct config_hostport *hp, char out[UPSTREAM_ADDR_TEXT])
{
	char ip[INET6_ADDRSTRLEN] = "";
	uint16_t port;

	if (hp->addr.ss_family == AF_INET) {
		const struct sockaddr_in *v4 = (const struct sockaddr_in *)&hp->addr;
		inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip);
		port = ntohs(v4->sin_port);
	} else {
		const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&hp->addr;
		inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip);
		port = ntohs(v6->sin6_port);
	}
	snprintf(out, UPSTREAM_ADDR_TEXT, hp->tls_name[0] ? "%s@%u#%s" : "%s@%u", ip, port,
		 hp->tls_name);
}

/* The zones cluster.fallback_servers answer: the cluster domain, then the reverse zones. */
static const char *fallback_zone(const struct config *cfg, size_t i)
{
	static const char *const reverse[] = {"in-addr.arpa", "ip6.arpa"};

	return i == 0 ? cfg->cluster.domain : reverse[i - 1];
}

/* Which address families forwarders use: bits of FAMILY_V4 and FAMILY_V6. */
enum { FAMILY_V4 = 1, FAMILY_V6 = 2 };

static unsigned hostport_families(const struct config_hostport *hp, size_t n)
{
	unsigned families = 0;

	for (size_t i = 0; i < n; i++)
		families |= hp[i].addr.ss_family == AF_INET6 ? FAMILY_V6 : FAMILY_V4;
	return families;
}

/* root: the "ip@port" forwarders for "." (only IPv6 addresses have colons). */
static unsigned forwarder_families(const struct config *cfg, char root[][UPSTREAM_ADDR_TEXT],
				   size_t n_root)
{
	unsigned families = hostport_families(cfg->cluster.fallback_servers,
					      cfg->cluster.n_fallback_servers);

	for (size_t i = 0; i < n_root; i++)
		families |= strchr(root[i], ':') ? FAMILY_V6 : FAMILY_V4;
	for (size_t i = 0; i < cfg->upstream.n_forward_zones; i++)
		families |= hostport_families(cfg->upstream.forward_zones[i].servers,
					      cfg->upstream.forward_zones[i].n_servers);
	return families;
}

static const char *rrset_cache_size(const struct config *cfg)
{
	if (cfg->upstream.recursive)
		return "4m";
	return cfg->upstream.dnssec ? "1m" : "256k";
}

static bool is_forward_zone(const struct config *cfg, const char *zone)
{
	for (size_t i = 0; i < cfg->upstream.n_forward_zones; i++)
		if (strcmp(cfg->upstream.forward_zones[i].zone, zone) == 0)
			return true;
	return false;
}

/* families: those the forwarders use; 0 (recursion, or no forwarder) keeps both. */
static void write_server_clause(FILE *f, const struct config *cfg, unsigned families)
{
	const char *modules = cfg->upstream.dnssec ? "validator iterator" : "iterator";

	fprintf(f, "server:\n"
		   "  verbosity: 0\n"
		   "  do-not-query-localhost: no\n"
		   "  module-config: \"%s\"\n"
		   "  msg-cache-size: 0\n"
		   "  msg-cache-slabs: 1\n"
		   "  rrset-cache-size: %s\n"
		   "  key-cache-size: 1m\n"
		   "  infra-keep-probing: yes\n"
		   "  outgoing-range: 1024\n"
		   "  outgoing-num-tcp: 10\n"
		   "  unblock-lan-zones: yes\n"
		   "  insecure-lan-zones: yes\n",
		modules, rrset_cache_size(cfg));
	if (families == FAMILY_V4)
		fputs("  do-ip6: no\n", f);
	else if (families == FAMILY_V6)
		fputs("  do-ip4: no\n", f);
	if (!cfg->upstream.dnssec)
		fputs("  harden-below-nxdomain: no\n", f);
	if (cfg->upstream.recursive && *cfg->upstream.root_hints)
		fprintf(f, "  root-hints: \"%s\"\n", cfg->upstream.root_hints);
	if (cfg->upstream.tls && *cfg->upstream.tls_ca_file)
		fprintf(f, "  tls-cert-bundle: \"%s\"\n", cfg->upstream.tls_ca_file);
	else if (cfg->upstream.tls)
		fputs("  tls-system-cert: yes\n", f);
	if (cfg->upstream.dnssec) {
		fprintf(f, "  trust-anchor-file: \"%s\"\n", cfg->upstream.trust_anchor);
		for (size_t i = 0; i < cfg->upstream.n_forward_zones; i++)
			fprintf(f, "  domain-insecure: \"%s\"\n",
				cfg->upstream.forward_zones[i].zone);
		for (size_t i = 0; cfg->cluster.n_fallback_servers && i < 3; i++)
			fprintf(f, "  domain-insecure: \"%s\"\n", fallback_zone(cfg, i));
	}
	/*
	 * A zone we forward wins over unbound's local answers for the
	 * special-use names (test., home.arpa., invalid., ...): a transparent
	 * local zone of its own turns off a default of that name and, being
	 * closer, shadows one above it (corp.test under test.). Defaults inside
	 * a forwarded zone (127.in-addr.arpa under in-addr.arpa) stay local.
	 */
	for (size_t i = 0; i < cfg->upstream.n_forward_zones; i++)
		fprintf(f, "  local-zone: \"%s.\" transparent\n", cfg->upstream.forward_zones[i].zone);
	for (size_t i = 0; cfg->cluster.n_fallback_servers && i < 3; i++)
		if (!is_forward_zone(cfg, fallback_zone(cfg, i)))
			fprintf(f, "  local-zone: \"%s.\" transparent\n", fallback_zone(cfg, i));
}

enum zone_transport { ZONE_UDP, ZONE_TCP, ZONE_TLS };

static void write_forward_zone(FILE *f, const char *zone,
			       char addrs[][UPSTREAM_ADDR_TEXT], size_t n, enum zone_transport how)
{
	fprintf(f, "forward-zone:\n  name: \"%s\"\n", zone);
	if (how == ZONE_TCP)
		fprintf(f, "  forward-tcp-upstream: yes\n");
	else if (how == ZONE_TLS)
		fprintf(f, "  forward-tls-upstream: yes\n");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "  forward-addr: %s\n", addrs[i]);
}


/*
 * cluster.fallback_servers (kube-dns) answer the cluster zone and the
 * reverse zones whenever the cluster table does not: before the first sync,
 * or always with kubernetes.enabled false. Over TCP, as NodeLocal DNSCache
 * does: one connection carries many queries and large answers are whole.
 * An operator's own forward zone for one of them wins.
 */
static void write_fallback_zones(FILE *f, const struct config *cfg)
{
	char addrs[MAX_FORWARDERS][UPSTREAM_ADDR_TEXT];
	size_t n = cfg->cluster.n_fallback_servers;

	if (n > MAX_FORWARDERS)
		n = MAX_FORWARDERS;
	for (size_t i = 0; i < n; i++)
		forward_addr(&cfg->cluster.fallback_servers[i], addrs[i]);
	for (size_t i = 0; n && i < 3; i++)
		if (!is_forward_zone(cfg, fallback_zone(cfg, i)))
			write_forward_zone(f, fallback_zone(cfg, i), addrs, n, ZONE_TCP);
}

/* The forwarders for ".": upstream.servers, else resolv.conf's nameservers. */
static int root_forwarders(const struct config *cfg, char addrs[][UPSTREAM_ADDR_TEXT],
			   char *err, size_t errlen)
{
	size_t n = cfg->upstream.n_servers;

	if (n > MAX_FORWARDERS)
		n = MAX_FORWARDERS;
	for (size_t i = 0; i < n; i++)
		forward_addr(&cfg->upstream.servers[i], addrs[i]);
	if (n > 0)
		return (int)n;
	return resolvconf_nameservers(cfg->upstream.resolv_conf, cfg, addrs, MAX_FORWARDERS,
				      err, errlen);
}

static int write_conf(FILE *f, const struct config *cfg, char *err, size_t errlen)
{
	char addrs[MAX_FORWARDERS][UPSTREAM_ADDR_TEXT];
	int n_root = 0;

	if (!cfg->upstream.recursive) {
		n_root = root_forwarders(cfg, addrs, err, errlen);
		if (n_root < 0)
			return -1;
		if (n_root == 0)
			log_error("no usable upstream servers: external names will get SERVFAIL",
				  "resolv_conf", cfg->upstream.resolv_conf);
	}
	write_server_clause(f, cfg, cfg->upstream.recursive ? 0 :
				    forwarder_families(cfg, addrs, (size_t)n_root));
	enum zone_transport how = cfg->upstream.tls ? ZONE_TLS : ZONE_UDP;

	if (n_root > 0)
		write_forward_zone(f, ".", addrs, (size_t)n_root, how);
	for (size_t i = 0; i < cfg->upstream.n_forward_zones; i++) {
		const struct config_forward_zone *z = &cfg->upstream.forward_zones[i];
		size_t n = z->n_servers < MAX_FORWARDERS ? z->n_servers : MAX_FORWARDERS;
		for (size_t j = 0; j < n; j++)
			forward_addr(&z->servers[j], addrs[j]);
		write_forward_zone(f, z->zone, addrs, n, how);
	}
	write_fallback_zones(f, cfg);
	return 0;
}

/* ---- the context ----------------------------------------------------------- */

/*
 * libunbound reads these files only when the first query starts; check them
 * now so a typo fails start-up with the path in the message. A quote or a
 * line break would end the path early in the unbound.conf text.
 */
static int check_file(const char *key, const char *path, char *err, size_t errlen)
{
	if (strpbrk(path, "\"\n")) {
		snprintf(err, errlen, "%s: \"%s\" may not contain a quote or a line break",
			 key, path);
		return -1;
	}
	if (access(path, R_OK) != 0) {
		snprintf(err, errlen, "%s: cannot read %s: %s", key, path, strerror(errno));
		return -1;
	}
	return 0;
}

static int check_files(const struct config *cfg, char *err, size_t errlen)
{
	if (cfg->upstream.dnssec &&
	    check_file("upstream.trust_anchor", cfg->upstream.trust_anchor, err, errlen) < 0)
		return -1;
	if (cfg->upstream.recursive && *cfg->upstream.root_hints &&
	    check_file("upstream.root_hints", cfg->upstream.root_hints, err, errlen) < 0)
		return -1;
	if (cfg->upstream.tls && *cfg->upstream.tls_ca_file &&
	    check_file("upstream.tls_ca_file", cfg->upstream.tls_ca_file, err, errlen) < 0)
		return -1;
	return 0;
}

char *upstream_conf_text(const struct config *cfg, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	if (check_files(cfg, err, errlen) < 0)
		return NULL;
	if (!(f = open_memstream(&text, &len))) {
		snprintf(err, errlen, "cannot make the resolver configuration: %s",
			 strerror(errno));
		return NULL;
	}
	int rc = write_conf(f, cfg, err, errlen);
	if (fclose(f) != 0 && rc == 0) {
		snprintf(err, errlen, "cannot make the resolver configuration: out of memory");
		rc = -1;
	}
	if (rc < 0) {
		free(text);
		return NULL;
	}
	return text;
}
