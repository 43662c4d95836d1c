/*
 * query — the per-query pipeline: parse, pick the source, write the reply.
 *
 * Owns: the rules that are not about any one data source (opcode, class,
 * zone transfers, CHAOS identity, the UDP size limit, EDNS errors) and the
 * current set of answer sources, published with RCU so a reload swaps it
 * while workers keep answering.
 *
 * Must never: allocate, lock, or make a syscall in query_handle; block a
 * worker; free sources a worker may still be reading (query_sources_publish
 * waits for a grace period first).
 *
 * Order of sources: static records, then the cluster table (Kubernetes),
 * then the clusterset table (Multi-Cluster Services), then the mesh
 * (Istio's ServiceEntry hosts), then the answer cache, then the upstream: a
 * miss is not answered here but handed back to the caller as a query_ask
 * (ask.h), which the resolver answers later. A name the cluster
 * tables answer NXDOMAIN may still be a mesh host (a ServiceEntry for a
 * name no Service has: a Service wins), or Istio's search-path alias of
 * one (<host>.<ns>.svc.<zone> from a pod of <ns>). With cluster.autopath,
 * a pod's first search-list query that is NXDOMAIN walks the rest of its
 * search list here (autopath.c), the mesh among the local sources. Cluster names before the first sync go the upstream way
 * when cluster.fallback_servers are set (the resolver forwards the cluster
 * zone to them), else get SERVFAIL: never a false NXDOMAIN. Without a cache
 * (sources built with none, as in unit tests) names outside local data get
 * REFUSED.
 */
#ifndef LOCALDNS_QUERY_H
#define LOCALDNS_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "cache/cache.h"
#include "cluster/cluster.h"
#include "config/config.h"
#include "dns/dns.h"
#include "dns64/dns64.h"
#include "query/ask.h"
#include "query/kinds.h"
#include "zone/zone.h"

/* The query types counted one by one; everything else is OTHER. */
enum query_qtype {
	QUERY_QTYPE_A, QUERY_QTYPE_AAAA, QUERY_QTYPE_CNAME, QUERY_QTYPE_PTR, QUERY_QTYPE_SRV,
	QUERY_QTYPE_TXT, QUERY_QTYPE_MX, QUERY_QTYPE_NS, QUERY_QTYPE_SOA, QUERY_QTYPE_ANY,
	QUERY_QTYPE_HTTPS, QUERY_QTYPE_SVCB, QUERY_QTYPE_OTHER,
	QUERY_QTYPE_COUNT
};

/* "A", "AAAA", ... "SVCB", "other". */
extern const char *const query_qtype_names[QUERY_QTYPE_COUNT];

/* What a worker counts; one instance per worker, so no atomics are needed. */
struct query_stats {
	uint64_t received;
	uint64_t transport[2];     /* received, by enum query_transport (UDP, TCP) */
	uint64_t qtype[QUERY_QTYPE_COUNT]; /* queries whose question parsed, by type */
	uint64_t dropped;          /* no reply sent (QR=1, runt packets) */
	uint64_t rcode[DNS_RCODE_SLOTS]; /* replies by dns_reply_rcode_slot */
	uint64_t truncated;
	uint64_t source[QUERY_SOURCE_COUNT]; /* where answers came from */
	uint64_t autopath;         /* answered for another search candidate (CNAME) */
	uint64_t not_allowed;      /* REFUSED: the client is outside listen.allow */
	uint64_t rrl_slipped;      /* rrl: sent truncated instead (server/udp.c) */
	uint64_t rrl_dropped;      /* rrl: not sent (server/udp.c) */
	uint64_t udp_busy_wakeups; /* a wake-up's first read filled a batch (server/udp.c) */
	uint64_t dns64_synthesized; /* AAAA answers made from A records (dns64.prefix) */
};

/* Bytes of the node's search domains autopath keeps (wire names). */
#define QUERY_SEARCH_MAX 512

/*
 * The client networks of listen.allow, as masks in the order addresses are
 * compared: a client is in one when (address & mask) == net. Checked for
 * every query, so one family's list holds only that family's networks.
 */
#define QUERY_ALLOW_MAX 64
struct query_net4 {
	uint32_t net, mask;        /* host byte order */
};
struct query_net6 {
	uint64_t net[2], mask[2];  /* the address's two halves, host byte order */
};

/* The tables the Kubernetes client keeps (each borrowed; NULL: none). */
struct mesh;
struct query_names {
	const struct cluster *cluster;    /* cluster.domain */
	const struct cluster *clusterset; /* multicluster.domain */
	const struct mesh *mesh;          /* mesh.istio */
};

/* Everything a query may be answered from; immutable once published. */
struct query_sources {
	struct zone_table *zone;   /* static records */
	const struct cluster *cluster; /* borrowed; NULL: no Kubernetes table */
	const struct cluster *clusterset; /* borrowed; NULL: multicluster off */
	const struct mesh *mesh;   /* borrowed; NULL: mesh.istio off */
	bool cluster_fallback;     /* unsynced cluster names go upstream (to kube-dns) */
	bool autopath;             /* cluster.autopath (and a cluster table) */
	uint32_t autopath_ttl;     /* cluster.ttl: autopath's CNAMEs */
	uint8_t search[QUERY_SEARCH_MAX]; /* the node's search domains (resolv.conf), */
	uint16_t search_len;              /* concatenated wire names */
	struct cache *cache;       /* borrowed; NULL: no upstream path */
	uint16_t udp_max_payload;
	bool chaos_enabled;
	uint8_t chaos_version[256]; /* TXT rdata: one character-string */
	uint16_t chaos_version_len;
	uint8_t chaos_id[256];
	uint16_t chaos_id_len;
	uint8_t cookie_secret[16]; /* keys our DNS server cookies (RFC 9018) */
	struct query_net4 allow4[QUERY_ALLOW_MAX]; /* listen.allow: who may query */
	struct query_net6 allow6[QUERY_ALLOW_MAX];
	unsigned n_allow4, n_allow6;
	struct dns64_prefix dns64; /* dns64.prefix; len 0: off */
};

/*
 * Build sources from a loaded config, answering cluster, clusterset and
 * mesh names from names' tables and external names from cache (borrowed:
 * they must outlive the sources; NULL names or cache for none). NULL with
 * "FILE:LINE:COL: message" in err when the static data cannot be built.
 */
struct query_sources *query_sources_build(const struct config *cfg, const struct query_names *names,
					  struct cache *cache, char *err, size_t errlen);

/* Free a set that was never published (a reload that failed later on). */
void query_sources_free(struct query_sources *s);

/* Make s current; the previous set is freed once no worker can see it. */
void query_sources_publish(struct query_sources *s);

/* Free the current set at shutdown, after every worker has stopped. */
void query_sources_retire(void);

/*
 * May peer query at all (listen.allow of the current sources)? For a
 * connection, before it costs anything. The caller holds the RCU read lock.
 */
bool query_client_may_ask(const struct sockaddr_storage *peer);

/* What the upstream should do after query_handle. */
enum query_upstream {
	QUERY_UPSTREAM_NONE,    /* nothing */
	QUERY_UPSTREAM_ASK,     /* no reply was written: ask, and reply later */
	QUERY_UPSTREAM_REFRESH, /* replied (prefetch or stale): refresh in the background */
};

/* What query_handle needs besides the packet, and what it hands back. */
struct query_ctx {
	enum query_transport transport;
	const struct sockaddr_storage *peer; /* keys the DNS server cookie and tells
					      * autopath who asks; NULL: none */
	struct query_stats *stats;
	uint64_t now;          /* monotonic seconds: the cache's clock */
	bool serve_stale;      /* the upstream is failing: serve expired entries now */

	/* Out: when upstream is not NONE, *ask (what to answer: q,
	 * reply_limit, udp_payload, cookie ...) is filled in; the caller adds
	 * where the reply goes and submits it. */
	enum query_upstream upstream;
	struct query_ask *ask;
	enum query_source source;
	bool cache_absent;     /* the cache had no entry for q at all (ask->cache_absent) */
};

/*
 * Answer the message in[0..inlen) into out (outcap >= DNS_MAX_MESSAGE for
 * TCP, >= udp_max_payload for UDP). Returns the reply length, or 0 when no
 * reply should be sent now (check ctx->upstream). The caller holds the RCU
 * read lock.
 */
size_t query_handle(const uint8_t *in, size_t inlen, uint8_t *out, size_t outcap,
		    struct query_ctx *ctx);

/*
 * The same in steps, for a batch: a table probe that waits on memory costs
 * more than everything else a local or cached answer does
 * (docs/performance.md, "Where a UDP query's CPU goes"), so a worker first
 * reads every query of a batch (query_prepare, which also starts fetching
 * its static table slot), then has the memory its answers will read
 * fetched for all of them together (query_prefetch), then answers each
 * (query_handle_prepared: exactly what query_handle writes, with the same
 * sources, which the caller's one RCU read-side section keeps alive from
 * the first step to the last).
 */
struct query_prepared {
	const struct query_sources *sources; /* current when prepared; NULL: none */
	enum dns_parse_result parsed;
	bool zone_hashed;        /* zone_hash is q's name's */
	bool zone_absent;        /* the static table neither holds nor covers q's name */
	bool cache_keyed;        /* cache_key is q's */
	uint32_t zone_hash;
	struct cache_key cache_key;
	struct dns_query q;
};

void query_prepare(const uint8_t *in, size_t inlen, struct query_prepared *p);
void query_prefetch(struct query_prepared *p, size_t n);
size_t query_handle_prepared(const struct query_prepared *p, const uint8_t *in, size_t inlen,
			     uint8_t *out, size_t outcap, struct query_ctx *ctx);

#endif
