/*
 * query/dns64.c — DNS64 (dns64.prefix) for the answers local data gives:
 * static records and the cluster table. The rules and the synthesis are
 * src/dns64/'s; this file asks local data the A question and the PTR
 * question behind an ip6.arpa name under the prefix.
 *
 * External names: an answer from the cache is synthesized here, from the
 * cache's A answer for the end of its CNAME chain; without one the query
 * goes to the resolver, which asks that A question (upstream/flight.c,
 * follow_to_a) and synthesizes as it replies (upstream/deliver.c). The
 * cache only ever holds answers under their own questions: synthesis is
 * decided per client when it is served (docs/operations.md, "DNS64").
 *
 * Like the rest of the pipeline: no allocation, no lock, no syscall. The
 * two messages it reads are on the stack, and only for an AAAA question
 * that local data answered without AAAA.
 */
#include "query/internal.h"

#include <string.h>

#include "dns64/dns64.h"

/* The CNAME a ip6.arpa name under the prefix gets: the mapping is the operator's, not data's. */
#define PTR_CNAME_TTL DNS64_TTL_WITHOUT_SOA

/* q's A question answered from local data into buf; its length, or 0 when not local. */
static size_t local_a_answer(const struct query_sources *s, const struct dns_query *q,
			     uint8_t *buf, size_t cap)
{
	struct dns_query qa = *q;
	struct dns_writer w;
	struct cluster_chase chase;

	qa.qtype = DNS_T_A;
	qa.has_edns = false; /* its OPT would not be the client's anyway */
	qa.cookie_len = 0;
	dns_response_begin(&w, buf, cap, &qa, DNS_R_NOERROR);
	if (zone_answer(s->zone, &qa, &w) != ZONE_ANSWERED &&
	    (!s->cluster || cluster_answer(s->cluster, &qa, &w, &chase) != CLUSTER_ANSWERED))
		return 0; /* an ExternalName's A records are the resolver's */
	return dns_response_finish(&w, 0);
}

size_t query_dns64_local(const struct query_sources *s, const struct dns_query *q,
			 const struct query_ctx *ctx, uint8_t *out, size_t len, size_t limit,
			 const uint8_t *cookie)
{
	uint8_t aaaa[DNS_MAX_MESSAGE], a[DNS_MAX_MESSAGE];
	struct dns_writer w;
	size_t a_len;

	if ((ctx->source != QUERY_SOURCE_STATIC && ctx->source != QUERY_SOURCE_CLUSTER) ||
	    !dns64_applies(&s->dns64, q, ctx->peer) || !dns64_wanted(out, len) ||
	    !(a_len = local_a_answer(s, q, a, sizeof a)))
		return len;
	memcpy(aaaa, out, len);
	dns_response_begin(&w, out, limit, q, DNS_R_NOERROR);
	if (cookie)
		dns_response_set_server_cookie(&w, cookie);
	if (!dns64_synthesize(&s->dns64, aaaa, len, a, a_len, &w)) {
		memcpy(out, aaaa, len); /* nothing to make AAAA from: the answer as it was */
		return len;
	}
	ctx->stats->dns64_synthesized++;
	return dns_response_finish(&w, s->udp_max_payload);
}

size_t query_dns64_cached(const struct query_sources *s, const struct dns_query *q,
			  struct query_ctx *ctx, uint8_t *out, size_t len, size_t limit,
			  const uint8_t *cookie)
{
	uint8_t aaaa[DNS_MAX_MESSAGE], a[DNS_MAX_MESSAGE], end[DNS_MAX_NAME];
	struct dns_query qa;
	struct dns_writer w;
	size_t a_len;

	if ((ctx->source != QUERY_SOURCE_CACHE && ctx->source != QUERY_SOURCE_STALE) ||
	    !dns64_applies(&s->dns64, q, ctx->peer) || !dns64_wanted(out, len) ||
	    !dns64_chain_end(out, len, q->qname, end))
		return len;
	qa = *q;
	dns_query_set_name(&qa, end);
	qa.qtype = DNS_T_A;
	qa.has_edns = false;
	qa.cookie_len = 0;
	dns_response_begin(&w, a, sizeof a, &qa, DNS_R_NOERROR);
	if (cache_write_answer(s->cache, &w, ctx->now, ctx->serve_stale) == CACHE_MISS) {
		ctx->source = QUERY_SOURCE_UPSTREAM; /* the resolver asks it */
		ctx->upstream = QUERY_UPSTREAM_ASK;
		return 0;
	}
	a_len = dns_response_finish(&w, 0);
	memcpy(aaaa, out, len);
	dns_response_begin(&w, out, limit, q, DNS_R_NOERROR);
	if (cookie)
		dns_response_set_server_cookie(&w, cookie);
	if (!dns64_synthesize_chain(&s->dns64, aaaa, len, a, a_len, &w)) {
		memcpy(out, aaaa, len); /* no A records either: the answer as it was */
		return len;
	}
	ctx->stats->dns64_synthesized++;
	return dns_response_finish(&w, s->udp_max_payload);
}

bool query_dns64_ptr(const struct query_sources *s, const struct dns_query *q,
		     struct dns_writer *w, struct query_ctx *ctx)
{
	uint8_t target[DNS_MAX_NAME];
	struct dns_query qt;
	struct cluster_chase chase = {.n = 0, .ttl = PTR_CNAME_TTL};
	size_t n;

	if (q->qtype != DNS_T_PTR || !(n = dns64_ptr_target(&s->dns64, q->qname, target)))
		return false;
	dns_response_add_rr(w, DNS_SEC_ANSWER, NULL, DNS_T_CNAME, DNS_C_IN, PTR_CNAME_TTL, target,
			    (uint16_t)n);
	qt = *q;
	dns_query_set_name(&qt, target);
	if (zone_answer(s->zone, &qt, w) == ZONE_ANSWERED) {
		ctx->source = QUERY_SOURCE_STATIC;
		return true;
	}
	if (s->cluster) {
		struct cluster_chase unused;
		if (cluster_answer(s->cluster, &qt, w, &unused) == CLUSTER_ANSWERED) {
			ctx->source = QUERY_SOURCE_CLUSTER;
			return true;
		}
	}
	/* the cache or the resolver: the CNAME, then the target's records (an ExternalName's way) */
	query_answer_chase(s, w, ctx, target, &chase);
	return true;
}
