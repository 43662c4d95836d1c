/*
 * upstream/result.c — what the upstream answered, into the cache and on
 * to the flight table, which answers the clients that waited. Pure: it
 * rewrites messages and writes the cache, and nothing else; upstream.c
 * brings libunbound's results here (from its callbacks, on the resolver
 * thread) and flight.c's flights_result does the rest.
 *
 * A result from the upstream asked now goes into the cache ("remember");
 * a replaced upstream's results answer their own waiters only (they
 * describe the old upstream settings). What a failure leaves behind (the
 * failing mark, a cached SERVFAIL or a cool-down, a retry) is the flight
 * table's to decide (flight.c, "Failures").
 *
 * Chains. A flight may answer its question for another name: an
 * ExternalName's local CNAME chain (the upstream is asked for its last
 * target), or autopath's candidates (search), which one flight asks in
 * turn while its waiters keep their one deadline: an NXDOMAIN is cached
 * under the candidate's own question and moves to the next; the first
 * other answer is joined to a CNAME from the question; after the last
 * NXDOMAIN the waiters get the question's own local NXDOMAIN, which the
 * request carries. Either joined answer is cached under the question.
 */
#include "upstream/result.h"

#include "log/log.h"

void results_init(struct results *rs, struct flights *t, struct cache *cache)
{
	rs->flights = t;
	rs->cache = cache;
}

/* Autopath: the candidate asked does not exist. That goes into the cache
 * under its own question (workers skip it next time). */
static void remember_missing_candidate(struct results *rs, const struct flight *f,
				       const uint8_t *msg, size_t len, uint64_t now_ms)
{
	struct dns_query candidate = f->q;
	size_t n;

	dns_query_set_name(&candidate, f->chain + f->candidate);
	n = dns_message_compact(msg, len, &candidate, !candidate.edns_do, rs->compacted,
				sizeof rs->compacted);
	if (n > 0)
		cache_insert(rs->cache, &candidate, rs->compacted, n, now_ms / 1000);
}

/* An answer (not a failure): into the cache when remember, then what the table needs. */
static void answered(struct results *rs, const struct flight *f, struct upstream_answer *a,
		     bool remember, uint64_t now_ms, struct flight_result *res)
{
	/* what q's answer starts with: the local CNAME chain, or autopath's one CNAME */
	const uint8_t *chain = f->search ? f->chain + f->candidate : f->chain;
	size_t chain_len = f->search ? dns_name_len(chain) : f->chain_len;
	uint8_t *msg = a->msg;
	size_t len = a->len;

	/* Our AD is the validator's verdict, not whatever the forwarder said. */
	if (len > 3) {
		msg[3] &= (uint8_t)~DNS_F_AD;
		if (a->secure)
			msg[3] |= (uint8_t)DNS_F_AD;
	}
	if (f->search && (msg[3] & 0xf) == DNS_R_NXDOMAIN) {
		if (remember)
			remember_missing_candidate(rs, f, msg, len, now_ms);
		res->outcome = FLIGHT_NO_CANDIDATE;
		return;
	}
	/* libunbound always asks with DO, so a DO=0 client's copy loses the
	 * DNSSEC records; and libunbound writes owner names out in full. A
	 * message we cannot rewrite is stored as it came (or refused by the
	 * cache). */
	size_t n = chain_len
		? dns_message_chase(msg, len, &f->q, chain, chain_len, f->chain_ttl,
				    !f->q.edns_do, rs->compacted, sizeof rs->compacted)
		: dns_message_compact(msg, len, &f->q, !f->q.edns_do, rs->compacted,
				      sizeof rs->compacted);
	if (chain_len && n == 0) {
		res->outcome = FLIGHT_UNUSABLE; /* the chain's end cannot be joined to it */
		return;
	}
	if (n > 0) {
		msg = rs->compacted;
		len = n;
	}
	res->outcome = FLIGHT_ANSWERED;
	res->msg = msg;
	res->len = len;
	res->cached = remember && cache_insert_keyed(rs->cache, &f->q, &f->cache_key, msg, len,
						     now_ms / 1000) == 0;
}

static void log_bogus(const struct flight *f, const char *why)
{
	char name[1024];

	if (log_enabled(LOG_DEBUG) && dns_name_to_text(f->q.qname, name, sizeof name) > 0)
		log_debug("DNSSEC validation failed", "name", name, "why", why ? why : "");
}

void result_take(struct results *rs, struct flight *f, struct upstream_answer *a,
		 uint64_t now_ms)
{
	struct flight_result res = {.outcome = FLIGHT_FAILED};

	switch (a->kind) {
	case UPSTREAM_RESULT_ERROR:
	case UPSTREAM_RESULT_SERVFAIL:
		break;
	case UPSTREAM_RESULT_BOGUS:
		log_bogus(f, a->why_bogus);
		res.outcome = FLIGHT_BOGUS;
		break;
	default:
		answered(rs, f, a, flight_current(rs->flights, f), now_ms, &res);
		break;
	}
	flights_result(rs->flights, f, &res, now_ms);
}
