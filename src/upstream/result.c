/*
 * upstream/result.c — what libunbound answered, into the cache and back to
 * the clients that waited. Resolver thread only (on_result runs inside
 * ub_process).
 *
 * A result from the current context also goes into the cache, the failing
 * mark and the cool-down ("remember"); a replaced context's results answer
 * their own waiters only (they describe the old upstream settings).
 *
 * Failures. A SERVFAIL or error from libunbound marks the upstream as
 * failing (workers then serve expired entries at once and ask for a
 * background refresh). When the cache has nothing for the question, the
 * SERVFAIL itself is cached for SERVFAIL_TTL, so workers answer it without
 * coming here and the flight goes at once: a flood of new names at a
 * failing upstream does not pile up flights. When a stale entry exists, the
 * flight stays for a cool-down of FAILURE_HOLD_MS instead, during which
 * refreshes of it are not sent, so a dead upstream is not hammered. Any
 * answer clears the failing mark.
 *
 * Chains. A flight may answer its question for another name: an
 * ExternalName's local CNAME chain (libunbound is asked for its last
 * target), or autopath's candidates (search), which one flight asks in
 * turn while its waiters keep their one deadline: an NXDOMAIN is cached
 * under the candidate's own question and moves to the next; the first
 * other answer is joined to a CNAME from the question; after the last
 * NXDOMAIN the waiters get the question's own local NXDOMAIN, which the
 * request carries. Either joined answer is cached under the question.
 */
#include "upstream/internal.h"

#include <stdio.h>

#include "dnstap/dnstap.h"
#include "log/log.h"
#include "util/clock.h"

const char *const upstream_result_names[UPSTREAM_RESULTS] = {
	"NOERROR", "NXDOMAIN", "SERVFAIL", "other", "error", "bogus"};

/* A SERVFAIL reply to f's question, for the cache (header + question only). */
static size_t servfail_message(const struct flight *f, uint8_t *out, size_t cap)
{
	struct dns_query q = f->q;
	struct dns_writer w;

	q.has_edns = false; /* no OPT: the cache keeps none */
	q.cookie_len = 0;
	dns_response_begin(&w, out, cap, &q, DNS_R_SERVFAIL);
	return dns_response_finish(&w, 0);
}

/* Is there any entry, live or stale, for f's question? */
static bool cache_has_entry(struct upstream *u, const struct flight *f)
{
	struct dns_writer w;

	dns_response_begin(&w, u->buf, DNS_MAX_MESSAGE, &f->q, DNS_R_NOERROR);
	return cache_replay(u->cache, &w, u->now_ms / 1000, true) != CACHE_MISS;
}

void resolution_failed(struct upstream *u, struct flight *f, bool remember)
{
	uint8_t msg[DNS_HEADER_LEN + DNS_MAX_NAME + 4];

	upstream_bump(&u->n.failures);
	if (remember) {
		atomic_store_explicit(&u->failing, true, memory_order_relaxed);
		if (cache_has_entry(u, f) ||
		    cache_insert(u->cache, &f->q, msg, servfail_message(f, msg, sizeof msg),
				 u->now_ms / 1000) != 0)
			f->failed_until_ms = u->now_ms + FAILURE_HOLD_MS;
	}
	while (f->waiters) {
		struct waiter *w = f->waiters;
		answer_failed(u, w->worker, waiter_request(u, w));
		remove_waiter(u, w);
	}
}

/*
 * Autopath: the candidate asked does not exist. That goes into the cache
 * under its own question (workers skip it next time), and the next one is
 * asked; after the last, every waiter gets q's local NXDOMAIN.
 */
static void candidate_missing(struct upstream *u, struct flight *f, const uint8_t *msg,
			      size_t len, bool remember)
{
	const uint8_t *name = f->chain + f->candidate;
	struct dns_query candidate = f->q;
	size_t n;

	dns_query_set_name(&candidate, name);
	n = dns_message_compact(msg, len, &candidate, !candidate.edns_do, u->compacted,
				sizeof u->compacted);
	if (n > 0 && remember)
		cache_insert(u->cache, &candidate, u->compacted, n, u->now_ms / 1000);
	f->candidate += (uint16_t)dns_name_len(name);
	if (f->candidate < f->chain_len) {
		/* the next candidate is asked on the current context */
		if (!ask_or_queue(u, f))
			resolution_failed(u, f, true);
		return;
	}
	while (f->waiters) {
		struct waiter *w = f->waiters;
		const struct upstream_request *r = waiter_request(u, w);
		deliver(u, w->worker, r, reply_nxdomain(u, r));
		remove_waiter(u, w);
	}
}

static void resolution_answered(struct upstream *u, struct flight *f, uint8_t *msg,
				size_t len, bool secure, bool remember)
{
	/* what q's answer starts with: the local CNAME chain, or autopath's one CNAME */
	const uint8_t *chain = f->search ? f->chain + f->candidate : f->chain;
	size_t chain_len = f->search ? dns_name_len(chain) : f->chain_len;
	bool cached = false;

	upstream_bump(&u->n.answers);
	if (remember) {
		atomic_store_explicit(&u->failing, false, memory_order_relaxed);
		f->failed_until_ms = 0;
	}
	/* Our AD is libunbound's verdict, not whatever the forwarder said. */
	if (len > 3) {
		msg[3] &= (uint8_t)~DNS_F_AD;
		if (secure)
			msg[3] |= (uint8_t)DNS_F_AD;
	}
	if (f->search && (msg[3] & 0xf) == DNS_R_NXDOMAIN) {
		candidate_missing(u, f, msg, len, remember);
		return;
	}
	/* libunbound always asks with DO, so a DO=0 client's copy loses the
	 * DNSSEC records; and libunbound writes owner names out in full. A
	 * message we cannot rewrite is stored as it came (or refused by the
	 * cache). */
	size_t n = chain_len
		? dns_message_chase(msg, len, &f->q, chain, chain_len, f->chain_ttl,
				    !f->q.edns_do, u->compacted, sizeof u->compacted)
		: dns_message_compact(msg, len, &f->q, !f->q.edns_do, u->compacted,
				      sizeof u->compacted);
	if (chain_len && n == 0) {
		resolution_failed(u, f, remember); /* the chain's end cannot be joined to it */
		return;
	}
	if (n > 0) {
		msg = u->compacted;
		len = n;
	}
	if (remember)
		cached = cache_insert(u->cache, &f->q, msg, len, u->now_ms / 1000) == 0;
	while (f->waiters) {
		struct waiter *w = f->waiters;
		answer_with(u, w->worker, waiter_request(u, w), msg, len, cached);
		remove_waiter(u, w);
	}
}

static void resolution_bogus(struct upstream *u, struct flight *f, const char *why,
			     bool remember)
{
	uint8_t msg[DNS_HEADER_LEN + DNS_MAX_NAME + 4];
	char name[1024];

	upstream_bump(&u->n.bogus);
	if (log_enabled(LOG_DEBUG) && dns_name_to_text(f->q.qname, name, sizeof name) > 0)
		log_debug("DNSSEC validation failed", "name", name, "why", why ? why : "");
	/* RFC 4035 5.5: bogus data is not given out; remember the verdict briefly. */
	if (remember)
		cache_insert(u->cache, &f->q, msg, servfail_message(f, msg, sizeof msg),
			     u->now_ms / 1000);
	while (f->waiters) {
		struct waiter *w = f->waiters;
		const struct upstream_request *r = waiter_request(u, w);
		deliver(u, w->worker, r, reply_servfail(u, r));
		upstream_bump(&u->n.servfail);
		remove_waiter(u, w);
	}
}

static void observe_latency(struct upstream *u, uint64_t took_ns)
{
	double seconds = (double)took_ns / 1e9;
	size_t i = 0;

	while (i < UPSTREAM_LATENCY_BUCKETS && seconds > upstream_latency_bounds[i])
		i++;
	upstream_bump(&u->n.latency[i]);
	atomic_fetch_add_explicit(&u->n.latency_ns, took_ns, memory_order_relaxed);
}

void stop_counting(struct upstream *u, struct flight *f)
{
	f->resolving = false;
	f->ctx->outstanding--;
	f->ctx = NULL;
	atomic_fetch_sub_explicit(&u->n.resolving, 1, memory_order_relaxed);
}

/*
 * A failure is asked once more while clients still wait for it: behind an
 * upstream that rate-limits, libunbound gives up on a question whose
 * packets were dropped a few times in a row (its server's retransmission
 * timeout has grown), and the same question asked again a moment later is
 * usually answered. A dead upstream costs one more quick failure per new
 * question at most. The clients keep their deadlines either way. Retries
 * stay within a budget of a tenth of the questions asked: when most
 * questions fail, asking each twice would only add to what the upstream
 * is already refusing.
 */
static bool retried_once(struct upstream *u, struct flight *f, bool current)
{
	if (!current || f->retried || !f->waiters || u->retry_tokens < RETRY_COST)
		return false;
	u->retry_tokens -= RETRY_COST;
	f->retried = true;
	if (!ask_or_queue(u, f))
		return false;
	upstream_bump(&u->n.retries);
	return true;
}

static enum upstream_result result_kind(int err, const struct ub_result *result)
{
	if (err != 0 || !result || !result->answer_packet || result->answer_len < DNS_HEADER_LEN)
		return UPSTREAM_RESULT_ERROR;
	if (result->bogus)
		return UPSTREAM_RESULT_BOGUS;
	switch (result->rcode) {
	case DNS_R_NOERROR: return UPSTREAM_RESULT_NOERROR;
	case DNS_R_NXDOMAIN: return UPSTREAM_RESULT_NXDOMAIN;
	case DNS_R_SERVFAIL: return UPSTREAM_RESULT_SERVFAIL;
	default: return UPSTREAM_RESULT_OTHER;
	}
}

void on_result(void *arg, int err, struct ub_result *result)
{
	struct flight *f = arg;
	struct upstream *u = f->u;
	bool current = f->ctx == u->ctx;
	enum upstream_result kind = result_kind(err, result);

	observe_latency(u, monotonic_ns() - f->asked_ns);
	upstream_bump(&u->n.results[kind]);
	u->now_ms = (uint64_t)coarse_ms();
	f->ctx->last_result_ms = u->now_ms;
	stop_counting(u, f);
	if (result && dnstap_resolver_on()) /* dnstap: resolver_response */
		dnstap_resolver_response(result->answer_packet, (size_t)result->answer_len);
	if (kind == UPSTREAM_RESULT_ERROR || kind == UPSTREAM_RESULT_SERVFAIL) {
		if (!retried_once(u, f, current))
			resolution_failed(u, f, current);
	} else if (kind == UPSTREAM_RESULT_BOGUS)
		resolution_bogus(u, f, result->why_bogus, current);
	else
		resolution_answered(u, f, result->answer_packet, (size_t)result->answer_len,
				    result->secure, current);
	if (result)
		ub_resolve_free(result);
	maybe_free_flight(u, f);
}
