/*
 * query/internal.h — shared by the files of src/query/: query.c (the
 * pipeline) calls down to autopath.c (the search-list walk), dns64.c and
 * allow.c, and all of them to answer.c (the cache, the mesh, a chase).
 * Nothing outside src/query/ includes this.
 */
#ifndef LOCALDNS_QUERY_INTERNAL_H
#define LOCALDNS_QUERY_INTERNAL_H

#include "query/query.h"

/*
 * answer.c: the steps query.c, autopath.c and dns64.c share.
 *
 * Serve w->q from the cache (under key when not NULL: the one computed
 * while prefetching, else w->q's), or mark it for the upstream
 * (ctx->upstream).
 */
void query_answer_from_cache(const struct query_sources *s, struct dns_writer *w,
			     struct query_ctx *ctx, const struct cache_key *key);

/*
 * A CNAME chain leaving local data (an ExternalName): the joined answer
 * from the cache, else from the resolver; without an upstream path, or
 * when the names do not fit the ask, the CNAMEs in w are the answer.
 * first, when not NULL, is a CNAME target before the chain's own
 * (autopath's candidate).
 */
void query_answer_chase(const struct query_sources *s, struct dns_writer *w,
			struct query_ctx *ctx, const uint8_t *first,
			const struct cluster_chase *chase);

/* How the mesh is asked about a name (query_answer_mesh). */
enum query_mesh_ask {
	MESH_ASK_NAME,      /* no cluster zone's name: a host? */
	MESH_ASK_NXDOMAIN,  /* a cluster zone's NXDOMAIN: a host, or Istio's alias of one? */
	MESH_ASK_CANDIDATE, /* an autopath candidate (w holds the CNAME to it): a host? */
};

/* q as a mesh host (mesh.istio) for the client of ctx; true when the mesh
 * answered it into w (ctx->source set). */
bool query_answer_mesh(const struct dns_query *q, const struct query_sources *s,
		       struct dns_writer *w, struct query_ctx *ctx, enum query_mesh_ask ask);

/* Append a name to the ask's chain; false when it does not fit. */
bool query_chain_append(struct query_ask *r, const uint8_t *name);

/*
 * w holds q's NXDOMAIN from the cluster table. When q is the first search
 * suffix of a pod of this node asking from its own namespace, walk the rest
 * of its search list and answer for the first name that exists
 * (cluster.autopath); otherwise leave w alone.
 */
void query_autopath(const struct dns_query *q, const struct query_sources *s,
		    struct dns_writer *w, struct query_ctx *ctx);

/*
 * dns64.c (dns64.prefix). query_dns64_local: out[0..len) is the finished
 * answer to q, an AAAA question; when local data gave it and DNS64 applies
 * (dns64/dns64.h), out is rewritten with the AAAA records made from q's
 * name's A records (within limit, with the client's cookie when not NULL).
 * The new length, or len. query_dns64_ptr: a PTR question for an address
 * under the prefix gets a CNAME to its in-addr.arpa name, answered from
 * local data or chased like an ExternalName; false when q is no such
 * question (w untouched).
 */
size_t query_dns64_local(const struct query_sources *s, const struct dns_query *q,
			 const struct query_ctx *ctx, uint8_t *out, size_t len, size_t limit,
			 const uint8_t *cookie);
bool query_dns64_ptr(const struct query_sources *s, const struct dns_query *q,
		     struct dns_writer *w, struct query_ctx *ctx);
/*
 * query_dns64_cached: the same for an answer the cache gave (live or
 * stale), with the cache's A answer for the last name of its CNAME chain;
 * when the cache has none, the query goes to the resolver instead
 * (ctx->upstream set to QUERY_UPSTREAM_ASK, 0 returned), which asks it.
 */
size_t query_dns64_cached(const struct query_sources *s, const struct dns_query *q,
			  struct query_ctx *ctx, uint8_t *out, size_t len, size_t limit,
			  const uint8_t *cookie);

/* allow.c: listen.allow into s (the default ranges when the config names none). */
int query_allow_build(struct query_sources *s, const struct config *cfg, char *err,
		      size_t errlen);
/* May peer query? (NULL: a local caller, always.) */
bool query_client_allowed(const struct query_sources *s, const struct sockaddr_storage *peer);

#endif
