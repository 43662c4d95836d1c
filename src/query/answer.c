/*
 * query/answer.c — answering one question from the cache, from the mesh,
 * or by chasing a CNAME chain out of local data: the steps the pipeline
 * (query.c), autopath's walk (autopath.c) and DNS64 (dns64.c) all take.
 * Below all three and calling none of them, so the pipeline calls down to
 * autopath.c and dns64.c and they call down here: no circle.
 *
 * Hot path, as the rest of the pipeline: no allocation, no lock, no
 * syscall.
 */
#include "query/internal.h"

#include <string.h>

#include "mesh/mesh.h"

/* What a cache lookup's result means for ctx (source, upstream, cache_absent). */
static void note_cache_result(enum cache_result r, bool absent, struct query_ctx *ctx)
{
	switch (r) {
	case CACHE_HIT:
		ctx->source = QUERY_SOURCE_CACHE;
		break;
	case CACHE_HIT_REFRESH:
		ctx->source = QUERY_SOURCE_CACHE;
		ctx->upstream = QUERY_UPSTREAM_REFRESH;
		break;
	case CACHE_STALE:
		ctx->source = QUERY_SOURCE_STALE;
		ctx->upstream = QUERY_UPSTREAM_REFRESH;
		break;
	case CACHE_MISS:
		ctx->source = QUERY_SOURCE_UPSTREAM;
		ctx->upstream = QUERY_UPSTREAM_ASK;
		ctx->cache_absent = absent;
		break;
	}
}

void query_answer_from_cache(const struct query_sources *s, struct dns_writer *w,
			     struct query_ctx *ctx, const struct cache_key *key)
{
	enum cache_result r;
	bool absent = false;

	if (key)
		r = cache_write_answer_keyed(s->cache, w, key, ctx->now, ctx->serve_stale, &absent);
	else
		r = cache_write_answer(s->cache, w, ctx->now, ctx->serve_stale);
	note_cache_result(r, absent, ctx);
}

bool query_chain_append(struct query_ask *r, const uint8_t *name)
{
	size_t n = dns_name_len(name);

	if (r->chain_len + n > sizeof r->chain)
		return false;
	memcpy(r->chain + r->chain_len, name, n);
	r->chain_len = (uint16_t)(r->chain_len + n);
	return true;
}

/* The chain's targets (after first, if any) into the ask; false when they do not fit. */
static bool copy_chain(struct query_ask *r, const uint8_t *first,
		       const struct cluster_chase *chase)
{
	r->chain_len = 0;
	r->chain_ttl = chase->ttl;
	if (first && !query_chain_append(r, first))
		return false;
	for (unsigned i = 0; i < chase->n; i++)
		if (!query_chain_append(r, chase->targets[i]))
			return false;
	return true;
}

/*
 * An ExternalName: the chain and the target's records come from the cache
 * (where the resolver keeps them under this question), else from the
 * resolver. Without an upstream path the CNAMEs alone are the answer.
 */
void query_answer_chase(const struct query_sources *s, struct dns_writer *w,
			struct query_ctx *ctx, const uint8_t *first,
			const struct cluster_chase *chase)
{
	if (!s->cache || !copy_chain(ctx->ask, first, chase)) {
		ctx->source = QUERY_SOURCE_CLUSTER;
		return;
	}
	dns_response_rewind(w);
	query_answer_from_cache(s, w, ctx, NULL);
}

struct client_of {
	const struct query_sources *s;
	const struct query_ctx *ctx;
};

static const uint8_t *client_namespace(const void *arg)
{
	const struct client_of *c = arg;

	return cluster_client_namespace(c->s->cluster, c->ctx->peer);
}

/*
 * A name no cluster table holds may be a mesh host (after a cluster zone's
 * NXDOMAIN: a ServiceEntry for a name no Service has), or Istio's
 * search-path alias of one.
 */
bool query_answer_mesh(const struct dns_query *q, const struct query_sources *s,
		       struct dns_writer *w, struct query_ctx *ctx, enum query_mesh_ask ask)
{
	struct client_of who = {s, ctx};
	struct mesh_client client = {.namespace_of = client_namespace, .ctx = &who};
	size_t base;

	if (mesh_answer(s->mesh, q, &client, ask != MESH_ASK_CANDIDATE, w) == MESH_ANSWERED ||
	    (ask == MESH_ASK_NXDOMAIN && (base = cluster_autopath_base(s->cluster, q, ctx->peer)) &&
	     mesh_answer_alias(s->mesh, q, base, &client, w) == MESH_ANSWERED)) {
		ctx->source = QUERY_SOURCE_MESH;
		return true;
	}
	return false;
}
