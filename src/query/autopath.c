/*
 * query/autopath.c — server-side search-path completion (cluster.autopath),
 * as CoreDNS's autopath plugin does it.
 *
 * A pod with ndots:5 asking for www.example.com sends
 * www.example.com.<ns>.svc.<zone> first and moves down its search list
 * (svc.<zone>, <zone>, the node's search domains, the bare name) only after
 * each NXDOMAIN: up to five round trips per address type. When such a first
 * query comes from a pod of this node in namespace <ns>
 * (cluster_autopath_base) and is NXDOMAIN in the cluster table, we walk
 * the rest of that list for it and answer with a CNAME from the asked name
 * to the first candidate that exists, then that candidate's answer (its
 * records, or NODATA with its zone's SOA), in one round trip. The list is
 * the one kubelet gave the pod (its namespace and the node's resolv.conf),
 * so the client would have reached the same name. CoreDNS leaves the CNAME
 * out of a NODATA answer; we keep it, so the reply says what it answers.
 *
 * Each candidate is first asked of local data (static records, the cluster
 * table, the mesh's hosts). One that local data does not hold is external: a live NXDOMAIN in
 * the cache skips it; otherwise it and the external candidates after it go
 * to the resolver in one request (query_ask.search), which asks them
 * in turn, caches each NXDOMAIN under the candidate's own name and the
 * joined answer under the asked one, so the next identical query is a cache
 * hit. A candidate local data answers after unresolved external ones ends
 * that list, since the resolver cannot reach local data: if those all turn
 * out NXDOMAIN the client gets the original NXDOMAIN and searches on by
 * itself (always correct), and the next time their cached NXDOMAINs let the
 * walk reach the local candidate here. When every candidate is NXDOMAIN the
 * answer is the original one. Only NXDOMAIN moves the walk on, as in
 * CoreDNS; an upstream failure answers as failures do (stale, or SERVFAIL).
 *
 * Hot path: candidate names and questions live on the stack; each costs a
 * lookup in the static table and one in the cluster table (and the mesh's,
 * with mesh.istio) and, when external, a cache probe. No allocation, no lock.
 */
#include "query/internal.h"

#include <string.h>

/* What local data says about one candidate. */
enum candidate_result {
	CANDIDATE_MISSING,   /* NXDOMAIN: on to the next */
	CANDIDATE_ANSWERED,  /* w holds the CNAME to it and its answer */
	CANDIDATE_CHASE,     /* the same, ending in a CNAME chain out of the zone */
	CANDIDATE_ELSEWHERE, /* not local data: the cache's or the resolver's */
};

/* <base>.<suffix> asked like q; false when the name would be too long. */
static bool make_candidate(struct dns_query *cand, const struct dns_query *q, size_t base_len,
			   const uint8_t *suffix)
{
	uint8_t name[DNS_MAX_NAME];
	size_t suffix_len = dns_name_len(suffix);

	if (base_len + suffix_len > DNS_MAX_NAME)
		return false;
	memcpy(name, q->qname, base_len);
	memcpy(name + base_len, suffix, suffix_len);
	*cand = *q;
	dns_query_set_name(cand, name);
	return true;
}

/*
 * After suffix, the next one of the list: svc.<zone> (inside q's name), then
 * <zone>, the node's domains, the root, then NULL. node_pos walks s->search.
 */
static const uint8_t *next_suffix(const struct query_sources *s, const uint8_t *svc_zone,
				  const uint8_t *suffix, size_t *node_pos)
{
	static const uint8_t root[1];
	const uint8_t *domain;

	if (suffix == svc_zone)
		return svc_zone + 4; /* past "\3svc" */
	if (suffix == root)
		return NULL;
	if (*node_pos >= s->search_len)
		return root;
	domain = s->search + *node_pos;
	*node_pos += dns_name_len(domain);
	return domain;
}

/* The CNAME from the asked name to cand, then cand's answer from local data. */
static enum candidate_result answer_locally(const struct dns_query *cand,
					    const struct query_sources *s, struct dns_writer *w,
					    struct query_ctx *ctx, struct cluster_chase *chase)
{
	dns_response_rewind(w);
	dns_response_add_rr(w, DNS_SEC_ANSWER, NULL, DNS_T_CNAME, DNS_C_IN, s->autopath_ttl,
			    cand->qname, cand->qname_len);
	if (zone_answer(s->zone, cand, w) == ZONE_ANSWERED) {
		ctx->source = QUERY_SOURCE_STATIC;
		return w->rcode == DNS_R_NXDOMAIN ? CANDIDATE_MISSING : CANDIDATE_ANSWERED;
	}
	ctx->source = QUERY_SOURCE_CLUSTER;
	switch (cluster_answer(s->cluster, cand, w, chase)) {
	case CLUSTER_ANSWERED:
		return w->rcode == DNS_R_NXDOMAIN ? CANDIDATE_MISSING : CANDIDATE_ANSWERED;
	case CLUSTER_CHASE:
		return CANDIDATE_CHASE;
	default: /* not local (never unsynced: q itself was answered from the table) */
		if (s->mesh && query_answer_mesh(cand, s, w, ctx, MESH_ASK_CANDIDATE))
			return CANDIDATE_ANSWERED;
		return CANDIDATE_ELSEWHERE;
	}
}

/* The authority section of q's own NXDOMAIN, to give back when no candidate exists. */
struct original {
	uint8_t authority[QUERY_NXDOMAIN_MAX];
	size_t len;
};

static bool keep_original(const struct dns_writer *w, struct original *o)
{
	o->len = w->len - w->question_end;
	if (w->rcode != DNS_R_NXDOMAIN || w->truncated || w->count[DNS_SEC_ANSWER] ||
	    w->count[DNS_SEC_AUTHORITY] != 1 || w->count[DNS_SEC_ADDITIONAL] ||
	    o->len > sizeof o->authority)
		return false;
	memcpy(o->authority, w->buf + w->question_end, o->len);
	return true;
}

static void answer_original(const struct original *o, struct dns_writer *w,
			    struct query_ctx *ctx)
{
	static const uint16_t counts[3] = {0, 1, 0};

	dns_response_rewind(w);
	dns_response_append_raw(w, o->authority, o->len, counts);
	dns_response_set_rcode(w, DNS_R_NXDOMAIN);
	dns_response_set_aa(w, true);
	ctx->source = QUERY_SOURCE_CLUSTER;
}

/* The external candidates in r->chain go to the cache, else the resolver. */
static void ask_elsewhere(const struct query_sources *s, const struct original *o,
			  struct dns_writer *w, struct query_ctx *ctx)
{
	struct query_ask *r = ctx->ask;

	r->search = true;
	r->chain_ttl = s->autopath_ttl;
	memcpy(r->nxdomain, o->authority, o->len);
	r->nxdomain_len = (uint8_t)o->len;
	dns_response_rewind(w);
	query_answer_from_cache(s, w, ctx, NULL);
	ctx->stats->autopath++;
}

void query_autopath(const struct dns_query *q, const struct query_sources *s,
		    struct dns_writer *w, struct query_ctx *ctx)
{
	/* external candidates need the upstream path; their list is built in r */
	struct query_ask *r = s->cache ? ctx->ask : NULL;
	struct original original;
	size_t base_len, node_pos = 0;
	const uint8_t *svc_zone;

	if (!keep_original(w, &original) ||
	    !(base_len = cluster_autopath_base(s->cluster, q, ctx->peer)))
		return;
	svc_zone = q->qname + base_len + 1 + q->qname[base_len]; /* past <base>.<ns> */
	for (const uint8_t *suffix = svc_zone; suffix;
	     suffix = next_suffix(s, svc_zone, suffix, &node_pos)) {
		struct dns_query cand;
		struct cluster_chase chase;
		if (!make_candidate(&cand, q, base_len, suffix))
			continue; /* too long to exist */
		switch (answer_locally(&cand, s, w, ctx, &chase)) {
		case CANDIDATE_MISSING:
			continue;
		case CANDIDATE_ANSWERED:
			if (r && r->chain_len)
				break; /* external ones come first: the resolver asks them */
			ctx->stats->autopath++;
			return;
		case CANDIDATE_CHASE:
			if (r && r->chain_len)
				break;
			ctx->stats->autopath++;
			query_answer_chase(s, w, ctx, cand.qname, &chase);
			return;
		case CANDIDATE_ELSEWHERE:
			if (!r)
				break; /* nobody to ask whether it exists */
			if (cache_has_nxdomain(s->cache, &cand, ctx->now))
				continue;
			if (query_chain_append(r, cand.qname))
				continue;
			break; /* the list is full: it ends here */
		}
		break;
	}
	if (r && r->chain_len)
		ask_elsewhere(s, &original, w, ctx);
	else
		answer_original(&original, w, ctx);
}
