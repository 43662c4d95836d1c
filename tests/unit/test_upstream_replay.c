/*
 * The flight table (upstream/flight.c) and the results it is given
 * (upstream/result.c) replayed without a network, a thread or a real
 * clock, as Unbound's replay tests run its resolver over
 * testcode/fake_event.c: a fake clock the test moves, a fake upstream
 * that records what it is asked (io.ask) and answers when the test says,
 * and a fake client side that records every reply (io.reply). The cache
 * is the real one. Each test is an exchange: clients ask, time passes,
 * the upstream answers or fails, and the test checks who was asked what,
 * who got which reply and when, and the counters.
 *
 * Covered: coalescing, deadlines, stale answers at the client response
 * timer, retries and their budget, the cool-down, shedding (queue and
 * table full), the queue (newest first, pace, leaving it), the per-client
 * shares, a new upstream, a stalled one, autopath's candidates, and
 * DNS64's A question after an AAAA answer without AAAA records.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <cmocka.h>
#include <urcu/urcu-memb.h>

#include "cache/cache.h"
#include "dns/dns.h"
#include "log/log.h"
#include "reply.h"
#include "upstream/flight.h"
#include "upstream/result.h"

#define ASKED_MAX 20000
#define REPLIES_MAX 40000
#define TIMEOUT_MS 2000

struct seen {
	unsigned worker;
	uint16_t id;
	uint32_t client;               /* the client's IPv4 address, host order */
	enum flight_reply_kind kind;
	bool cached;
	uint64_t at_ms;
	bool dns64_a;                  /* DNS64: it waited for the A answer of ... */
	char a_name[64];               /* ... this name (r->ask.chain) */
};

/* The world the table sees (static: far too large for cmocka's stacks). */
static struct fake {
	struct flights t;
	struct results rs;
	struct upstream_counters n;
	struct cache *cache;
	uint64_t now;                  /* the fake clock, ms */
	struct flight *asked[ASKED_MAX]; /* every question asked, in order */
	char asked_name[ASKED_MAX][64];
	unsigned n_asked;
	bool refuse;                   /* the upstream will not take a question */
	struct seen replies[REPLIES_MAX];
	unsigned n_replies;
	struct upstream_request r;
} fk;

/* ---- the fake upstream and clients ----------------------------------------- */

static bool fake_ask(void *env, struct flight *f)
{
	assert_ptr_equal(env, &fk);
	if (fk.refuse)
		return false;
	assert_true(fk.n_asked < ASKED_MAX);
	assert_true(dns_name_to_text(flight_name(f), fk.asked_name[fk.n_asked], 64) > 0);
	fk.asked[fk.n_asked++] = f;
	return true;
}

static void fake_reply(void *env, unsigned worker, const struct upstream_request *r,
		       const struct flight_reply *a, uint64_t now_ms)
{
	const struct sockaddr_in *in = (const struct sockaddr_in *)&r->peer;

	assert_ptr_equal(env, &fk);
	assert_int_equal(now_ms, fk.now);
	assert_true(fk.n_replies < REPLIES_MAX);
	fk.replies[fk.n_replies] = (struct seen){
		.worker = worker, .id = r->ask.q.id, .client = ntohl(in->sin_addr.s_addr),
		.kind = a->kind, .cached = a->cached, .at_ms = now_ms, .dns64_a = r->ask.dns64_a};
	if (r->ask.dns64_a)
		assert_true(dns_name_to_text(r->ask.chain, fk.replies[fk.n_replies].a_name, 64) > 0);
	fk.n_replies++;
}

static void start(const struct flight_settings *s, bool serve_stale)
{
	struct cache_config cc = {.max_bytes = 8 << 20, .max_ttl = 86400,
				  .negative_max_ttl = 3600, .servfail_ttl = 5,
				  .serve_stale = serve_stale, .stale_max_age = 86400,
				  .stale_answer_ms = serve_stale ? 400 : 0};
	const struct flight_io io = {.ask = fake_ask, .ask_env = &fk,
				     .reply = fake_reply, .reply_env = &fk};

	memset(&fk.n, 0, sizeof fk.n);
	fk.now = 1000000; /* far from 0: nothing may take 0 for "never" */
	fk.n_asked = fk.n_replies = 0;
	fk.refuse = false;
	fk.cache = cache_new(&cc);
	assert_non_null(fk.cache);
	assert_int_equal(flights_init(&fk.t, &io, fk.cache, &fk.n, s, fk.now), 0);
	/* a fixed key for the client slots: which clients share one (and its
	 * limits) is then the same in every run */
	memcpy(fk.t.client_key, "replay-test-key!", sizeof fk.t.client_key);
	results_init(&fk.rs, &fk.t, fk.cache);
}

static const struct flight_settings defaults = {
	.timeout_ms = TIMEOUT_MS, .max_rate = 0, .max_per_client = 1000, .max_asked = 1024,
	.client_ipv6_bits = 128};

static int setup(void **state)
{
	(void)state;
	start(&defaults, true);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	flights_free(&fk.t);
	cache_free(fk.cache);
	return 0;
}

/* A request from client 10.0.x.y (its number) for name/type, UDP, with this ID. */
static const struct upstream_request *request(uint32_t client, const char *name, uint16_t qtype,
					      uint16_t id)
{
	struct upstream_request *r = &fk.r;
	struct sockaddr_in *in = (struct sockaddr_in *)&r->peer;

	memset(r, 0, sizeof *r);
	make_query(&r->ask.q, name, qtype);
	r->ask.q.id = id;
	r->ask.reply_limit = 1232;
	r->ask.udp_payload = 1232;
	r->transport = UPSTREAM_UDP;
	r->fd = -1;
	in->sin_family = AF_INET;
	in->sin_addr.s_addr = htonl(0x0a000000u + client);
	r->peer_len = sizeof *in;
	return r;
}

static void ask(uint32_t client, const char *name, uint16_t id)
{
	flights_client(&fk.t, client % 4, request(client, name, DNS_T_A, id), fk.now);
}

/* A background refresh, from a hit of client's (0: nobody in particular, as ctl's). */
static void refresh_from(uint32_t client, const char *name)
{
	struct upstream_request *r = (struct upstream_request *)request(client, name, DNS_T_A, 0);

	r->transport = UPSTREAM_NO_REPLY;
	if (!client)
		r->peer_len = 0;
	flights_refresh(&fk.t, r, fk.now);
}

static void refresh(const char *name)
{
	refresh_from(0, name);
}

/* Time passes: the loop's turn at now + ms. */
static void pass(uint64_t ms)
{
	fk.now += ms;
	flights_expire(&fk.t, fk.now);
	flights_start_queued(&fk.t, fk.now);
}

/* An answer message from the upstream for f's question asked: rcode, one A record when NOERROR. */
static size_t upstream_message(const struct flight *f, uint8_t rcode, uint8_t *out, size_t cap)
{
	static const uint8_t addr[4] = {192, 0, 2, 1};
	struct dns_query q = f->q;
	struct dns_writer w;

	q.has_edns = false;
	q.cookie_len = 0;
	dns_query_set_name(&q, flight_name(f));
	dns_response_begin(&w, out, cap, &q, rcode);
	if (rcode == DNS_R_NOERROR)
		assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_A, DNS_C_IN, 300,
						addr, sizeof addr));
	return dns_response_finish(&w, 0);
}

/* The upstream answers the i-th question it was asked (which may free it). */
static void upstream_answers(unsigned i, uint8_t rcode)
{
	static uint8_t msg[512];
	assert_true(i < fk.n_asked && fk.asked[i]);
	struct flight *f = fk.asked[i];
	struct upstream_answer a = {
		.kind = rcode == DNS_R_NOERROR ? UPSTREAM_RESULT_NOERROR : UPSTREAM_RESULT_NXDOMAIN,
		.msg = msg, .len = upstream_message(f, rcode, msg, sizeof msg)};

	fk.asked[i] = NULL; /* it may be gone: never touched again */
	result_take(&fk.rs, f, &a, fk.now);
}

static void upstream_fails(unsigned i)
{
	assert_true(i < fk.n_asked && fk.asked[i]);
	struct flight *f = fk.asked[i];
	struct upstream_answer a = {.kind = UPSTREAM_RESULT_ERROR};

	fk.asked[i] = NULL;
	result_take(&fk.rs, f, &a, fk.now);
}

static uint64_t count(_Atomic uint64_t *c)
{
	return atomic_load(c);
}

/* How many replies of this kind went to client (any client when 0). */
static unsigned replies_of(enum flight_reply_kind kind, uint32_t client)
{
	unsigned n = 0;

	for (unsigned i = 0; i < fk.n_replies; i++)
		n += fk.replies[i].kind == kind && (!client || fk.replies[i].client == client);
	return n;
}

/* A cache entry for name A, TTL ttl seconds, stored at the fake clock. */
static void cached(const char *name, uint32_t ttl)
{
	static const uint8_t addr[4] = {192, 0, 2, 9};
	uint8_t msg[512];
	struct dns_query q;
	struct dns_writer w;

	make_query(&q, name, DNS_T_A);
	dns_response_begin(&w, msg, sizeof msg, &q, DNS_R_NOERROR);
	assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_A, DNS_C_IN, ttl, addr, 4));
	assert_int_equal(cache_insert(fk.cache, &q, msg, dns_response_finish(&w, 0), fk.now / 1000),
			 0);
}

/* ---- DNS64 ---------------------------------------------------------------------- */

static const struct dns64_prefix nat64 = {.addr = {0, 0x64, 0xff, 0x9b}, .len = 96};

/* An AAAA request from client, as a worker sends it for an IPv6 client when dns64.prefix is set. */
static void ask_aaaa64(uint32_t client, const char *name, uint16_t id)
{
	struct upstream_request *r = (struct upstream_request *)request(client, name, DNS_T_AAAA,
								      id);
	r->ask.dns64 = nat64;
	flights_client(&fk.t, client % 4, r, fk.now);
}

static void ask_type(uint32_t client, const char *name, uint16_t qtype, uint16_t id)
{
	flights_client(&fk.t, client % 4, request(client, name, qtype, id), fk.now);
}

/*
 * An answer to q: rcode, a CNAME to cname (when not NULL), then one AAAA
 * record when aaaa, one A record when a; an SOA in the authority section
 * when the answer has no record of q's type.
 */
static size_t answer_message(const struct dns_query *question, uint8_t rcode, const char *cname,
			     bool aaaa, bool a, uint8_t *out, size_t cap)
{
	static const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1}, v4[4] = {192, 0, 2, 7};
	uint8_t soa[2 * DNS_MAX_NAME + 20] = {0};
	struct dns_query q = *question;
	struct dns_writer w;
	const uint8_t *owner = NULL;
	size_t n = 0;

	q.has_edns = false;
	q.cookie_len = 0;
	dns_response_begin(&w, out, cap, &q, rcode);
	if (cname) {
		assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_CNAME, DNS_C_IN, 300,
						wire(cname), (uint16_t)dns_name_len(wire(cname))));
		owner = wire(cname);
	}
	if (aaaa)
		assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, owner, DNS_T_AAAA, DNS_C_IN, 300,
						v6, sizeof v6));
	if (a)
		assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, owner, DNS_T_A, DNS_C_IN, 300,
						v4, sizeof v4));
	if (!aaaa && !a) {
		n = dns_name_len(wire("ns.example.com"));
		memcpy(soa, wire("ns.example.com"), n);
		memcpy(soa + n, wire("host.example.com"), dns_name_len(wire("host.example.com")));
		n += dns_name_len(wire("host.example.com")) + 20;
		soa[n - 1] = 60; /* minimum */
		assert_true(dns_response_add_rr(&w, DNS_SEC_AUTHORITY, wire("example.com"), DNS_T_SOA,
						DNS_C_IN, 60, soa, (uint16_t)n));
	}
	return dns_response_finish(&w, 0);
}

/* The upstream answers the i-th question it was asked with that answer. */
static void upstream_answers_with(unsigned i, uint8_t rcode, const char *cname, bool aaaa, bool a)
{
	static uint8_t msg[1024];
	assert_true(i < fk.n_asked && fk.asked[i]);
	struct flight *f = fk.asked[i];
	struct upstream_answer ans = {
		.kind = rcode == DNS_R_NOERROR ? UPSTREAM_RESULT_NOERROR : UPSTREAM_RESULT_NXDOMAIN,
		.msg = msg, .len = answer_message(&f->q, rcode, cname, aaaa, a, msg, sizeof msg)};

	fk.asked[i] = NULL;
	result_take(&fk.rs, f, &ans, fk.now);
}

static void test_dns64_asks_a_after_an_aaaa_answer_without_aaaa(void **state)
{
	(void)state;
	ask_aaaa64(1, "v4only.example.com", 1);
	ask_type(2, "v4only.example.com", DNS_T_AAAA, 2); /* an IPv4 client: no DNS64 */
	assert_int_equal(fk.n_asked, 1);
	assert_int_equal(fk.asked[0]->q.qtype, DNS_T_AAAA);

	pass(20);
	upstream_answers_with(0, DNS_R_NOERROR, NULL, false, false); /* NODATA */
	/* the plain client has its NODATA; the DNS64 one waits for the A question */
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].client, 0x0a000002u);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_ANSWER);
	assert_int_equal(fk.n_asked, 2);
	assert_string_equal(fk.asked_name[1], "v4only.example.com.");
	assert_int_equal(fk.asked[1]->q.qtype, DNS_T_A);
	assert_int_equal(flights_waiting(&fk.t), 1);

	/* the A question is one like any other: a client asking it joins */
	ask_type(3, "v4only.example.com", DNS_T_A, 3);
	assert_int_equal(fk.n_asked, 2);
	pass(20);
	upstream_answers_with(1, DNS_R_NOERROR, NULL, false, true);
	assert_int_equal(fk.n_replies, 3);
	for (unsigned i = 1; i < 3; i++) {
		assert_int_equal(fk.replies[i].kind, FLIGHT_REPLY_ANSWER);
		assert_true(fk.replies[i].cached);
		assert_int_equal(fk.replies[i].dns64_a, fk.replies[i].client == 0x0a000001u);
	}
	assert_string_equal(fk.replies[1].dns64_a ? fk.replies[1].a_name : fk.replies[2].a_name,
			    "v4only.example.com.");
	/* both answers are in the cache under their own questions, nothing else */
	struct dns_query q;
	make_query(&q, "v4only.example.com", DNS_T_AAAA);
	uint8_t buf[512];
	struct dns_writer w;
	dns_response_begin(&w, buf, sizeof buf, &q, DNS_R_NOERROR);
	assert_int_equal(cache_replay(fk.cache, &w, fk.now / 1000, false), CACHE_HIT);
	assert_int_equal(dns_response_finish(&w, 0) > 0 && buf[7] == 0, true); /* no answer */
	assert_int_equal(count(&fk.n.flights), 0);
	assert_int_equal(flights_waiting(&fk.t), 0);

	/* later: both in the cache, a DNS64 client is answered at once from it */
	ask_aaaa64(4, "v4only.example.com", 4);
	assert_int_equal(fk.n_asked, 2);
	assert_int_equal(fk.replies[3].kind, FLIGHT_REPLY_CACHED);
	assert_true(fk.replies[3].dns64_a);
	/* from the worker hosting the resolver, which looked already: DNS64 still looks */
	struct upstream_request *r = (struct upstream_request *)request(5, "v4only.example.com",
								      DNS_T_AAAA, 5);
	r->ask.dns64 = nat64;
	flights_client_missed(&fk.t, 0, r, fk.now);
	assert_int_equal(fk.n_asked, 2);
	assert_int_equal(fk.replies[4].kind, FLIGHT_REPLY_CACHED);
	assert_true(fk.replies[4].dns64_a);
}

static void test_dns64_asks_a_for_the_end_of_the_cname_chain(void **state)
{
	(void)state;
	ask_aaaa64(1, "www.example.com", 1);
	upstream_answers_with(0, DNS_R_NOERROR, "edge.cdn.example.net", false, false);
	assert_int_equal(fk.n_asked, 2);
	assert_string_equal(fk.asked_name[1], "edge.cdn.example.net.");
	assert_int_equal(fk.asked[1]->q.qtype, DNS_T_A);
	upstream_answers_with(1, DNS_R_NOERROR, NULL, false, true);
	assert_int_equal(fk.n_replies, 1);
	assert_true(fk.replies[0].dns64_a);
	assert_string_equal(fk.replies[0].a_name, "edge.cdn.example.net.");
}

static void test_dns64_keeps_aaaa_answers_and_nxdomain(void **state)
{
	(void)state;
	ask_aaaa64(1, "dual.example.com", 1);
	upstream_answers_with(0, DNS_R_NOERROR, "dual.cdn.example.net", true, false);
	ask_aaaa64(2, "gone.example.com", 2);
	upstream_answers_with(1, DNS_R_NXDOMAIN, NULL, false, false);
	assert_int_equal(fk.n_asked, 2); /* no A question for either */
	assert_int_equal(fk.n_replies, 2);
	for (unsigned i = 0; i < 2; i++) {
		assert_int_equal(fk.replies[i].kind, FLIGHT_REPLY_ANSWER);
		assert_false(fk.replies[i].dns64_a);
	}
}

static void test_dns64_a_question_keeps_the_clients_deadline(void **state)
{
	(void)state;
	ask_aaaa64(1, "slow-a.example.com", 1);
	pass(1500);
	upstream_answers_with(0, DNS_R_NOERROR, NULL, false, false);
	assert_int_equal(fk.n_asked, 2);
	/* the A question is slow: the client's deadline is the one it came with */
	pass(TIMEOUT_MS - 1500 - 1);
	assert_int_equal(fk.n_replies, 0);
	pass(1);
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_FAILED); /* deliver: the NODATA, cached */
	assert_true(fk.replies[0].dns64_a);
	assert_int_equal(fk.replies[0].at_ms, fk.now);
	/* the A answer still fills the cache when it comes */
	upstream_answers_with(1, DNS_R_NOERROR, NULL, false, true);
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(count(&fk.n.flights), 0);
}

/* ---- coalescing ----------------------------------------------------------------- */

static void test_identical_requests_share_one_question(void **state)
{
	(void)state;
	ask(1, "www.example.com", 11);
	ask(2, "www.example.com", 12);
	ask(3, "WWW.Example.COM", 13); /* the same question in another case */
	ask(4, "mail.example.com", 14);
	assert_int_equal(fk.n_asked, 2);
	assert_string_equal(fk.asked_name[0], "www.example.com.");
	assert_int_equal(count(&fk.n.coalesced), 2);
	assert_int_equal(count(&fk.n.queries), 2);
	assert_int_equal(count(&fk.n.flights), 2);
	assert_int_equal(fk.n_replies, 0);

	pass(30);
	upstream_answers(0, DNS_R_NOERROR);
	/* each of the three with its own ID, from the cache's copy */
	assert_int_equal(fk.n_replies, 3);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(fk.replies[i].kind, FLIGHT_REPLY_ANSWER);
		assert_true(fk.replies[i].cached);
	}
	assert_int_equal(fk.replies[0].id + fk.replies[1].id + fk.replies[2].id, 11 + 12 + 13);
	assert_int_equal(count(&fk.n.flights), 1);
	assert_int_equal(flights_waiting(&fk.t), 1);

	/* the next client finds it in the cache (it came since its worker looked) */
	ask(5, "www.example.com", 15);
	assert_int_equal(fk.n_asked, 2);
	assert_int_equal(fk.replies[3].kind, FLIGHT_REPLY_CACHED);
	upstream_answers(1, DNS_R_NOERROR);
	assert_int_equal(count(&fk.n.flights), 0);
	assert_int_equal(count(&fk.n.resolving), 0);
	assert_int_equal(flights_waiting(&fk.t), 0);
}

/*
 * The flight table finds a question by its cache key's hash: a request
 * carrying the key its worker's look-up made and one without (a TCP
 * request, a control lookup: the table makes the key itself) must land
 * on the same flight.
 */
static void test_requests_with_and_without_the_workers_key_share_one_question(void **state)
{
	(void)state;
	struct upstream_request *r = (struct upstream_request *)request(1, "www.example.com",
									DNS_T_A, 21);
	struct cache_key k;

	cache_key_of(fk.cache, &r->ask.q, &k);
	r->ask.cache_keyed = true;
	r->ask.cache_name_hash = k.name_hash;
	r->ask.cache_hash = k.hash;
	flights_client(&fk.t, 0, r, fk.now);
	ask(2, "WWW.example.com", 22);
	r = (struct upstream_request *)request(3, "www.example.com", DNS_T_A, 23);
	r->transport = UPSTREAM_TCP;
	flights_client(&fk.t, 1, r, fk.now);
	assert_int_equal(fk.n_asked, 1);
	assert_int_equal(count(&fk.n.coalesced), 2);

	pass(30);
	upstream_answers(0, DNS_R_NOERROR);
	assert_int_equal(fk.n_replies, 3);
	for (unsigned i = 0; i < 3; i++)
		assert_true(fk.replies[i].kind == FLIGHT_REPLY_ANSWER && fk.replies[i].cached);
	/* stored under the same key the worker's look-up will use */
	ask(4, "www.example.com", 24);
	assert_int_equal(fk.n_asked, 1);
	assert_int_equal(fk.replies[3].kind, FLIGHT_REPLY_CACHED);
}

/* ---- deadlines ------------------------------------------------------------------- */

static void test_a_waiter_gets_its_failure_at_its_deadline_and_the_question_goes_on(void **state)
{
	(void)state;
	ask(1, "slow.example.com", 1);
	pass(500);
	ask(2, "slow.example.com", 2);
	assert_int_equal(flights_wait_ms(&fk.t, fk.now, 10000), TIMEOUT_MS - 500);
	assert_int_equal(flights_last_deadline_ms(&fk.t, fk.now), fk.now + TIMEOUT_MS);

	pass(TIMEOUT_MS - 501);
	assert_int_equal(fk.n_replies, 0);
	assert_false(flights_failing(&fk.t));
	pass(1); /* the first client's deadline */
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].client, 0x0a000001);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_FAILED);
	assert_int_equal(count(&fk.n.timeouts), 1);
	/* a question the upstream has and does not answer in time says it is slow */
	assert_true(flights_failing(&fk.t));
	pass(500);
	assert_int_equal(fk.n_replies, 2);
	assert_int_equal(fk.replies[1].at_ms, fk.now);

	/* nobody waits any more; the answer still fills the cache and clears the mark */
	upstream_answers(0, DNS_R_NOERROR);
	assert_int_equal(fk.n_replies, 2);
	assert_false(flights_failing(&fk.t));
	ask(3, "slow.example.com", 3);
	assert_int_equal(fk.replies[2].kind, FLIGHT_REPLY_CACHED);
	assert_int_equal(fk.n_asked, 1);
}

/* ---- stale answers ----------------------------------------------------------------- */

static void test_a_client_with_a_stale_entry_gets_it_at_the_client_response_timer(void **state)
{
	(void)state;
	cached("old.example.com", 10);
	fk.now += 60 * 1000; /* expired a minute ago: stale */
	ask(1, "old.example.com", 1);
	ask(2, "new.example.com", 2);
	assert_int_equal(fk.n_asked, 2);
	assert_int_equal(flights_wait_ms(&fk.t, fk.now, 10000), 400);
	pass(399);
	assert_int_equal(fk.n_replies, 0);
	pass(1);
	/* RFC 8767: the stale answer (FAILED: stale if any) at 400 ms, not at the timeout */
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].client, 0x0a000001);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_FAILED);
	/* a slow refresh is no timeout and says nothing of a failing upstream */
	assert_int_equal(count(&fk.n.timeouts), 0);
	assert_false(flights_failing(&fk.t));
	/* the refresh goes on and lands in the cache */
	upstream_answers(0, DNS_R_NOERROR);
	assert_int_equal(fk.n_replies, 1);
	ask(3, "old.example.com", 3);
	assert_int_equal(fk.replies[1].kind, FLIGHT_REPLY_CACHED);
	/* the one without a stale entry waits for the whole timeout */
	pass(TIMEOUT_MS - 400);
	assert_int_equal(fk.replies[2].client, 0x0a000002);
	assert_int_equal(count(&fk.n.timeouts), 1);
}

/*
 * The worker hosting the resolver looked after the last insert: no second
 * look (the answer cached here stands for one that cannot have come in
 * between), except for DNS64's AAAA, whose live answer means the A question.
 */
static void test_a_request_missed_after_the_last_insert_is_not_looked_up_again(void **state)
{
	(void)state;
	cached("here.example.com", 300);
	flights_client_missed(&fk.t, 0, request(1, "here.example.com", DNS_T_A, 1), fk.now);
	assert_int_equal(fk.n_asked, 1);
	assert_int_equal(fk.n_replies, 0);
	upstream_answers(0, DNS_R_NOERROR);
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_ANSWER);
	/* the same request from a thread that does not take turns with the resolver */
	flights_client(&fk.t, 1, request(2, "here.example.com", DNS_T_A, 2), fk.now);
	assert_int_equal(fk.n_asked, 1);
	assert_int_equal(fk.replies[1].kind, FLIGHT_REPLY_CACHED);
}

/* ---- retries and the cool-down ---------------------------------------------------------- */

static void test_a_failure_is_asked_once_more_then_remembered_as_servfail(void **state)
{
	(void)state;
	ask(1, "flaky.example.com", 1);
	upstream_fails(0);
	/* asked again for the client still waiting, within its deadline */
	assert_int_equal(fk.n_asked, 2);
	assert_int_equal(count(&fk.n.retries), 1);
	assert_int_equal(fk.n_replies, 0);
	upstream_fails(1);
	assert_int_equal(fk.n_asked, 2);
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_FAILED);
	assert_int_equal(count(&fk.n.failures), 1);
	assert_true(flights_failing(&fk.t));
	/* nothing was cached for it, so the SERVFAIL is, and the question goes at once */
	assert_int_equal(count(&fk.n.flights), 0);
	ask(2, "flaky.example.com", 2);
	assert_int_equal(fk.replies[1].kind, FLIGHT_REPLY_CACHED);
	assert_int_equal(fk.n_asked, 2);
	/* a refresh nobody waits for is not retried */
	refresh("gone.example.com");
	upstream_fails(2);
	assert_int_equal(fk.n_asked, 3);
}

static void test_a_failure_with_a_stale_entry_cools_down_for_five_seconds(void **state)
{
	(void)state;
	cached("down.example.com", 10);
	fk.now += 60 * 1000;
	ask(1, "down.example.com", 1);
	upstream_fails(0);
	upstream_fails(1); /* the retry */
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_FAILED);
	/* the stale entry stays (a SERVFAIL never replaces it): the question cools down */
	assert_int_equal(count(&fk.n.flights), 1);
	pass(FAILURE_HOLD_MS - 1);
	ask(2, "down.example.com", 2);
	refresh("down.example.com");
	assert_int_equal(fk.n_asked, 2); /* neither asked the dead upstream */
	assert_int_equal(fk.replies[1].kind, FLIGHT_REPLY_FAILED);
	pass(1000); /* the sweep after the cool-down */
	assert_int_equal(count(&fk.n.flights), 0);
	ask(3, "down.example.com", 3);
	assert_int_equal(fk.n_asked, 3);
}

static void test_retries_stay_within_their_budget(void **state)
{
	(void)state;
	char name[64];

	/* 150 questions, all failing: a quiet table may retry a burst of 100 */
	for (unsigned i = 0; i < 150; i++) {
		snprintf(name, sizeof name, "f%u.example.com", i);
		ask(1000 + i, name, (uint16_t)i);
	}
	for (unsigned i = 0; i < 150; i++)
		upstream_fails(i);
	assert_int_equal(count(&fk.n.retries), RETRY_TOKENS_MAX / RETRY_COST);
	assert_int_equal(fk.n_asked, 150 + RETRY_TOKENS_MAX / RETRY_COST);
	assert_int_equal(replies_of(FLIGHT_REPLY_FAILED, 0), 150 - RETRY_TOKENS_MAX / RETRY_COST);
	/* ten first asks earn one retry back */
	for (unsigned i = 0; i < 10; i++) {
		snprintf(name, sizeof name, "g%u.example.com", i);
		ask(2000 + i, name, (uint16_t)i);
	}
	unsigned first = fk.n_asked - 10;
	upstream_fails(first);
	assert_int_equal(count(&fk.n.retries), RETRY_TOKENS_MAX / RETRY_COST + 1);
	upstream_fails(first + 1);
	assert_int_equal(count(&fk.n.retries), RETRY_TOKENS_MAX / RETRY_COST + 1);
}

/* ---- the queue and shedding ---------------------------------------------------------------- */

static void test_the_queue_starts_newest_first_and_drops_the_unwaited(void **state)
{
	(void)state;
	const struct flight_settings two = {.timeout_ms = TIMEOUT_MS, .max_per_client = 1000,
					    .max_asked = 2, .client_ipv6_bits = 128};

	teardown(state);
	start(&two, false);
	ask(1, "a.example.com", 1);
	ask(2, "b.example.com", 2);
	ask(3, "c.example.com", 3);
	ask(4, "d.example.com", 4);
	ask(5, "e.example.com", 5);
	assert_int_equal(fk.n_asked, 2);
	assert_int_equal(count(&fk.n.queued), 3);
	/* with no room, the loop waits for a result, not for time */
	assert_int_equal(flights_wait_ms(&fk.t, fk.now, 500), 500);
	upstream_answers(0, DNS_R_NOERROR);
	pass(0);
	assert_int_equal(fk.n_asked, 3);
	assert_string_equal(fk.asked_name[2], "e.example.com."); /* the newest: most time left */
	/* b's to e's clients reach their deadline: c and d leave the queue unasked */
	pass(TIMEOUT_MS);
	assert_int_equal(count(&fk.n.queued), 0);
	assert_int_equal(replies_of(FLIGHT_REPLY_FAILED, 0), 4);
	upstream_answers(1, DNS_R_NOERROR);
	pass(0);
	assert_int_equal(fk.n_asked, 3);
}

static void test_a_question_that_waited_in_the_queue_says_nothing_of_the_upstream(void **state)
{
	(void)state;
	const struct flight_settings one = {.timeout_ms = TIMEOUT_MS, .max_per_client = 1000,
					    .max_asked = 1, .client_ipv6_bits = 128};

	teardown(state);
	start(&one, false);
	ask(1, "a.example.com", 1);
	upstream_answers(0, DNS_R_NOERROR);
	ask(2, "b.example.com", 2);
	ask(3, "c.example.com", 3); /* queued behind b */
	pass(100);
	upstream_answers(1, DNS_R_NOERROR);
	ask(4, "d.example.com", 4); /* queued: the queue is not empty */
	pass(TIMEOUT_MS - 100);
	/* c waited in the queue until its deadline: that says nothing about the upstream */
	assert_int_equal(count(&fk.n.timeouts), 1);
	assert_false(flights_failing(&fk.t));
	/* d, asked once c left the queue, does when its deadline passes unanswered */
	assert_int_equal(fk.n_asked, 3);
	assert_string_equal(fk.asked_name[2], "d.example.com.");
	pass(100);
	assert_int_equal(count(&fk.n.timeouts), 2);
	assert_true(flights_failing(&fk.t));
}

static void test_a_full_queue_gives_up_its_oldest_question(void **state)
{
	(void)state;
	const struct flight_settings one = {.timeout_ms = TIMEOUT_MS, .max_per_client = 65535,
					    .max_asked = 1, .client_ipv6_bits = 128};
	char name[64];

	teardown(state);
	start(&one, false);
	for (unsigned i = 0; i <= MAX_QUEUED; i++) {
		snprintf(name, sizeof name, "q%u.example.com", i);
		ask(1, name, (uint16_t)i);
	}
	assert_int_equal(count(&fk.n.queued), MAX_QUEUED);
	assert_int_equal(fk.n_replies, 0);
	ask(2, "one-more.example.com", 7);
	/* q1, the longest waiting, made room: its client answered at once */
	assert_int_equal(count(&fk.n.shed[UPSTREAM_SHED_QUEUE_FULL]), 1);
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].id, 1);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_FAILED);
	/* given up here, not by the upstream */
	assert_int_equal(count(&fk.n.failures), 0);
	assert_false(flights_failing(&fk.t));
}

static void test_a_full_table_answers_new_questions_at_once(void **state)
{
	(void)state;
	const struct flight_settings wide = {.timeout_ms = TIMEOUT_MS, .max_per_client = 65535,
					     .max_asked = MAX_FLIGHTS};
	char name[64];

	teardown(state);
	start(&wide, false);
	for (unsigned i = 0; i < MAX_FLIGHTS; i++) {
		snprintf(name, sizeof name, "t%u.example.com", i);
		ask(1 + i % 1000, name, (uint16_t)i);
	}
	assert_int_equal(count(&fk.n.flights), MAX_FLIGHTS);
	assert_int_equal(fk.n_asked, MAX_FLIGHTS);
	ask(5000, "past.example.com", 1);
	assert_int_equal(fk.n_asked, MAX_FLIGHTS);
	assert_int_equal(count(&fk.n.shed[UPSTREAM_SHED_TABLE_FULL]), 1);
	assert_int_equal(replies_of(FLIGHT_REPLY_FAILED, 5000 + 0x0a000000), 1);
	/* names chosen by nobody in particular still spread: the table grew with them */
	assert_true(flight_table_longest_chain(&fk.t.table) < 16);
	/* a joining client costs no place */
	ask(5001, "t0.example.com", 2);
	assert_int_equal(count(&fk.n.coalesced), 1);
}

static void test_max_rate_paces_new_questions(void **state)
{
	(void)state;
	const struct flight_settings paced = {.timeout_ms = TIMEOUT_MS, .max_rate = 10,
					      .max_per_client = 1000, .max_asked = 1024,
	.client_ipv6_bits = 128};

	teardown(state);
	start(&paced, false);
	ask(1, "p1.example.com", 1); /* the burst: one question */
	ask(2, "p2.example.com", 2);
	ask(3, "p3.example.com", 3);
	assert_int_equal(fk.n_asked, 1);
	assert_int_equal(count(&fk.n.paced), 2);
	assert_int_equal(flights_wait_ms(&fk.t, fk.now, 500), 100);
	pass(99);
	assert_int_equal(fk.n_asked, 1);
	pass(1);
	assert_int_equal(fk.n_asked, 2);
	assert_string_equal(fk.asked_name[1], "p3.example.com.");
	pass(100);
	assert_int_equal(fk.n_asked, 3);
	assert_int_equal(fk.n_replies, 0);
}

/* ---- the per-client shares ------------------------------------------------------------------- */

static void test_a_client_may_start_only_its_share_of_questions(void **state)
{
	(void)state;
	const struct flight_settings four = {.timeout_ms = TIMEOUT_MS, .max_per_client = 4,
					     .max_asked = 1024};
	char name[64];

	teardown(state);
	start(&four, false);
	for (unsigned i = 0; i < 6; i++) {
		snprintf(name, sizeof name, "m%u.example.com", i);
		ask(1, name, (uint16_t)i);
	}
	assert_int_equal(fk.n_asked, 4);
	assert_int_equal(count(&fk.n.client_limited), 2);
	assert_int_equal(replies_of(FLIGHT_REPLY_FAILED, 0x0a000001), 2);
	/* another client is not held back by it */
	ask(2, "other.example.com", 9);
	assert_int_equal(fk.n_asked, 5);
	/* joining a question already asked is not starting one */
	ask(1, "other.example.com", 10);
	assert_int_equal(count(&fk.n.coalesced), 1);
	/* a question counts until its answer comes back, even past the deadline */
	pass(TIMEOUT_MS);
	ask(1, "m9.example.com", 11);
	assert_int_equal(fk.n_asked, 5);
	upstream_answers(0, DNS_R_NOERROR);
	ask(1, "m9.example.com", 12);
	assert_int_equal(fk.n_asked, 6);
}

static void test_while_places_are_scarce_a_client_gets_a_quarter(void **state)
{
	(void)state;
	const struct flight_settings small = {.timeout_ms = TIMEOUT_MS, .max_per_client = 8,
					      .max_asked = 8};
	char name[64];

	teardown(state);
	start(&small, false);
	/* others take half the places: contended */
	for (unsigned i = 0; i < 4; i++) {
		snprintf(name, sizeof name, "o%u.example.com", i);
		ask(100 + i, name, (uint16_t)i);
	}
	for (unsigned i = 0; i < 5; i++) {
		snprintf(name, sizeof name, "s%u.example.com", i);
		ask(1, name, (uint16_t)i);
	}
	/* a quarter of 8, plus one */
	assert_int_equal(count(&fk.n.client_limited), 2);
	assert_int_equal(fk.n_asked, 4 + 3);
}

static void test_a_client_may_hold_only_its_share_of_waiters(void **state)
{
	(void)state;
	ask(1, "hot.example.com", 0);
	for (unsigned i = 1; i < MAX_WAITERS_PER_CLIENT; i++)
		ask(1, "hot.example.com", (uint16_t)i);
	assert_int_equal(flights_waiting(&fk.t), MAX_WAITERS_PER_CLIENT);
	assert_int_equal(count(&fk.n.client_limited), 0);
	ask(1, "hot.example.com", 7);
	assert_int_equal(count(&fk.n.client_limited), 1);
	assert_int_equal(replies_of(FLIGHT_REPLY_FAILED, 0x0a000001), 1);
	ask(2, "hot.example.com", 8);
	assert_int_equal(flights_waiting(&fk.t), MAX_WAITERS_PER_CLIENT + 1);
	upstream_answers(0, DNS_R_NOERROR);
	assert_int_equal(replies_of(FLIGHT_REPLY_ANSWER, 0), MAX_WAITERS_PER_CLIENT + 1);
	assert_int_equal(flights_waiting(&fk.t), 0);
}

/* ---- upstreams -------------------------------------------------------------------------------- */

static void test_a_new_upstream_is_asked_afresh_and_the_old_one_forgotten(void **state)
{
	(void)state;
	uint32_t old;

	ask(1, "moved.example.com", 1);
	ask(2, "dead.example.com", 2);
	ask(3, "down.example.com", 3);
	upstream_fails(2);
	upstream_fails(3); /* the retry */
	assert_true(flights_failing(&fk.t));
	old = flights_upstream(&fk.t);
	flights_new_upstream(&fk.t, &defaults, true, fk.now);
	assert_int_equal(flights_upstream(&fk.t), old + 1);
	/* the mark was about the old upstream */
	assert_false(flights_failing(&fk.t));
	/* a new client does not join the question still running on the old upstream */
	ask(4, "moved.example.com", 4);
	assert_int_equal(fk.n_asked, 5);
	/* the old upstream's answer is its own waiter's, and not cached */
	upstream_answers(0, DNS_R_NOERROR);
	assert_int_equal(fk.replies[1].client, 0x0a000001);
	assert_false(fk.replies[1].cached);
	upstream_answers(4, DNS_R_NOERROR);
	assert_int_equal(fk.replies[2].client, 0x0a000004);
	assert_true(fk.replies[2].cached);
	/* the old upstream's failure: answered, not retried, not remembered */
	upstream_fails(1);
	assert_int_equal(fk.replies[3].client, 0x0a000002);
	assert_int_equal(fk.replies[3].kind, FLIGHT_REPLY_FAILED);
	assert_false(flights_failing(&fk.t));
	ask(5, "dead.example.com", 5);
	assert_int_equal(fk.n_asked, 6);
}

static void test_a_full_silent_upstream_is_stalled_and_its_questions_can_be_dropped(void **state)
{
	(void)state;
	const struct flight_settings two = {.timeout_ms = TIMEOUT_MS, .max_per_client = 1000,
					    .max_asked = 2, .client_ipv6_bits = 128};

	teardown(state);
	start(&two, false);
	ask(1, "x1.example.com", 1);
	ask(2, "x2.example.com", 2);
	/* full, but nothing waits for room */
	assert_false(flights_stalled(&fk.t, fk.now + TIMEOUT_MS));
	pass(TIMEOUT_MS - 100);
	ask(3, "x3.example.com", 3); /* waits for room */
	assert_false(flights_stalled(&fk.t, fk.now + 99));
	/* the loop's turn: waiters, then a fresh upstream for a stalled one, then the queue */
	fk.now += 100;
	flights_expire(&fk.t, fk.now);
	assert_true(flights_stalled(&fk.t, fk.now));
	uint32_t silent = flights_upstream(&fk.t);
	flights_new_upstream(&fk.t, &two, false, fk.now);
	flights_start_queued(&fk.t, fk.now);
	assert_int_equal(fk.n_asked, 3);
	assert_false(flights_stalled(&fk.t, fk.now));
	assert_int_equal(count(&fk.n.resolving), 3);
	/* the silent one is deleted: its questions go without a result */
	flights_drop_upstream(&fk.t, silent);
	assert_int_equal(count(&fk.n.resolving), 1);
	assert_int_equal(count(&fk.n.flights), 1);
	upstream_answers(2, DNS_R_NOERROR);
	assert_int_equal(count(&fk.n.flights), 0);
}

/* ---- autopath -------------------------------------------------------------------------------------- */

static void test_autopath_asks_each_candidate_in_turn(void **state)
{
	(void)state;
	struct upstream_request *r = (struct upstream_request *)request(1, "db", DNS_T_A, 1);
	const char *candidates[] = {"db.ns.svc.cluster.local", "db.corp.example", "db.example"};
	struct query_ask *a = &r->ask;

	a->search = true;
	for (size_t i = 0; i < 3; i++)
		a->chain_len = (uint16_t)(a->chain_len +
					  dns_name_from_text(candidates[i], a->chain + a->chain_len));
	a->chain_ttl = 5;
	flights_client(&fk.t, 0, r, fk.now);
	assert_string_equal(fk.asked_name[0], "db.ns.svc.cluster.local.");
	upstream_answers(0, DNS_R_NXDOMAIN);
	assert_string_equal(fk.asked_name[1], "db.corp.example.");
	upstream_answers(1, DNS_R_NOERROR);
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_ANSWER);

	/* none exists: the question's own NXDOMAIN, after the last */
	r = (struct upstream_request *)request(2, "nothing", DNS_T_A, 2);
	r->ask.search = true;
	r->ask.chain_len = (uint16_t)dns_name_from_text("nothing.example", r->ask.chain);
	flights_client(&fk.t, 0, r, fk.now);
	upstream_answers(2, DNS_R_NXDOMAIN);
	assert_int_equal(fk.n_replies, 2);
	assert_int_equal(fk.replies[1].kind, FLIGHT_REPLY_NXDOMAIN);
	assert_int_equal(fk.n_asked, 3);
}

static void test_a_question_the_upstream_refuses_fails_at_once(void **state)
{
	(void)state;
	fk.refuse = true;
	ask(1, "refused.example.com", 1);
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_FAILED);
	assert_int_equal(count(&fk.n.failures), 1);
	assert_int_equal(count(&fk.n.flights), 0);
}

/* ---- a full waiter table (issue 22, item 2) -------------------------------------------------- */

static void test_a_handful_of_sources_cannot_fill_the_waiter_table(void **state)
{
	(void)state;
	unsigned sent = 0;

	/* five sources (UDP ones may be forged), each joining one slow question all it can */
	for (uint32_t source = 1; source <= 5; source++)
		for (unsigned i = 0; i < 5000; i++, sent++)
			ask(source, "slow.example.com", (uint16_t)i);
	/* every request waits or was answered at once: none is dropped */
	assert_int_equal(flights_waiting(&fk.t) + fk.n_replies, sent);
	assert_true(flights_waiting(&fk.t) <= MAX_WAITERS / 2);
	/* so a sixth client's new name goes upstream, and comes back to it */
	ask(6, "new.example.com", 1);
	assert_int_equal(fk.n_asked, 2);
	upstream_answers(1, DNS_R_NOERROR);
	assert_int_equal(replies_of(FLIGHT_REPLY_ANSWER, 0x0a000006), 1);
	upstream_answers(0, DNS_R_NOERROR);
	assert_int_equal(fk.n_replies, sent + 1);
	assert_int_equal(flights_waiting(&fk.t), 0);
}

/* source holds as many waiters as it may (or as there is room for) on a name of its own. */
static void hold_share(uint32_t source)
{
	char name[64];

	snprintf(name, sizeof name, "held%u.example.com", source);
	for (unsigned i = 0; i < MAX_WAITERS && flights_waiting(&fk.t) < MAX_WAITERS; i++) {
		unsigned before = fk.n_replies;
		ask(source, name, (uint16_t)i);
		if (fk.n_replies > before)
			return; /* its share is full */
	}
}

/* Sources after `after` each hold their share until the table is full; the last one. */
static uint32_t fill_the_waiter_table(uint32_t after)
{
	uint32_t source = after;

	while (flights_waiting(&fk.t) < MAX_WAITERS)
		hold_share(++source);
	fk.n_replies = 0;
	return source;
}

static void test_a_full_waiter_table_makes_room_from_its_heaviest_client(void **state)
{
	(void)state;
	const struct flight_settings wide = {.timeout_ms = TIMEOUT_MS, .max_per_client = 65535,
					     .max_asked = 65535};

	teardown(state);
	start(&wide, false);
	uint32_t sources = fill_the_waiter_table(0);
	unsigned asked = fk.n_asked;

	assert_true(sources >= 16);
	/* a newcomer is never the one refused: the oldest waiter of a heaviest client goes */
	ask(10000, "victim.example.com", 1);
	assert_int_equal(fk.n_asked, asked + 1);
	assert_int_equal(flights_waiting(&fk.t), MAX_WAITERS);
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].kind, FLIGHT_REPLY_FAILED);
	assert_true(fk.replies[0].client != 0x0a000000u + 10000);
	assert_int_equal(fk.replies[0].id, 0);
	/* the newcomer gets its answer */
	upstream_answers(asked, DNS_R_NOERROR);
	assert_int_equal(replies_of(FLIGHT_REPLY_ANSWER, 0x0a000000u + 10000), 1);
}

static void test_a_full_waiter_table_refuses_its_heaviest_client(void **state)
{
	(void)state;
	const struct flight_settings wide = {.timeout_ms = TIMEOUT_MS, .max_per_client = 65535,
					     .max_asked = 65535};

	teardown(state);
	start(&wide, false);
	/* source 1 holds its share of joins and 100 questions of its own: the most */
	hold_share(1);
	for (unsigned i = 0; i < 100; i++) {
		char name[64];
		snprintf(name, sizeof name, "own%u.example.com", i);
		ask(1, name, (uint16_t)(2000 + i));
	}
	fill_the_waiter_table(1);
	/* its own next query is answered at once */
	uint64_t limited = count(&fk.n.client_limited);
	ask(1, "more.example.com", 9);
	assert_int_equal(fk.n_replies, 1);
	assert_int_equal(fk.replies[0].client, 0x0a000001);
	assert_int_equal(fk.replies[0].id, 9);
	assert_int_equal(count(&fk.n.client_limited), limited + 1);
	assert_int_equal(flights_waiting(&fk.t), MAX_WAITERS);
}

/* ---- refreshes (issue 22, item 3) ----------------------------------------------------------------- */

static void test_a_refresh_counts_against_the_client_whose_hit_triggered_it(void **state)
{
	(void)state;
	const struct flight_settings ten = {.timeout_ms = TIMEOUT_MS, .max_per_client = 10,
					    .max_asked = 1024};
	char name[64];

	teardown(state);
	start(&ten, false);
	/* 300 names hit near expiry by one client: its share of questions, no more */
	for (unsigned i = 0; i < 300; i++) {
		snprintf(name, sizeof name, "r%u.example.com", i);
		refresh_from(1, name);
	}
	assert_int_equal(fk.n_asked, 10);
	assert_int_equal(count(&fk.n.client_limited), 290);
	assert_int_equal(fk.n_replies, 0);
	/* they are its questions: its own new name waits for one to come back */
	ask(1, "mine.example.com", 1);
	assert_int_equal(fk.n_asked, 10);
	assert_int_equal(replies_of(FLIGHT_REPLY_FAILED, 0x0a000001), 1);
	/* another client's refresh is not held back */
	refresh_from(2, "theirs.example.com");
	assert_int_equal(fk.n_asked, 11);
	upstream_answers(0, DNS_R_NOERROR);
	ask(1, "mine.example.com", 2);
	assert_int_equal(fk.n_asked, 12);
}

static void test_refreshes_are_bounded_globally(void **state)
{
	(void)state;
	char name[64];

	/* many clients (forged sources, say), each triggering one refresh */
	for (unsigned i = 0; i < 400; i++) {
		snprintf(name, sizeof name, "g%u.example.com", i);
		refresh_from(100 + i, name);
	}
	/* refreshes take at most a quarter of the upstream's places */
	assert_int_equal(fk.n_asked, defaults.max_asked / 4);
	/* a client's own question still goes */
	ask(1, "wanted.example.com", 1);
	assert_int_equal(fk.n_asked, defaults.max_asked / 4 + 1);
	/* and as refreshes come back, others may go */
	upstream_answers(0, DNS_R_NOERROR);
	refresh_from(99, "later.example.com");
	assert_int_equal(fk.n_asked, defaults.max_asked / 4 + 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(test_identical_requests_share_one_question),
		T(test_requests_with_and_without_the_workers_key_share_one_question),
		T(test_a_waiter_gets_its_failure_at_its_deadline_and_the_question_goes_on),
		T(test_a_client_with_a_stale_entry_gets_it_at_the_client_response_timer),
		T(test_a_request_missed_after_the_last_insert_is_not_looked_up_again),
		T(test_a_failure_is_asked_once_more_then_remembered_as_servfail),
		T(test_a_failure_with_a_stale_entry_cools_down_for_five_seconds),
		T(test_retries_stay_within_their_budget),
		T(test_the_queue_starts_newest_first_and_drops_the_unwaited),
		T(test_a_question_that_waited_in_the_queue_says_nothing_of_the_upstream),
		T(test_a_full_queue_gives_up_its_oldest_question),
		T(test_a_full_table_answers_new_questions_at_once),
		T(test_max_rate_paces_new_questions),
		T(test_a_client_may_start_only_its_share_of_questions),
		T(test_while_places_are_scarce_a_client_gets_a_quarter),
		T(test_a_client_may_hold_only_its_share_of_waiters),
		T(test_a_new_upstream_is_asked_afresh_and_the_old_one_forgotten),
		T(test_a_full_silent_upstream_is_stalled_and_its_questions_can_be_dropped),
		T(test_autopath_asks_each_candidate_in_turn),
		T(test_a_question_the_upstream_refuses_fails_at_once),
		T(test_a_handful_of_sources_cannot_fill_the_waiter_table),
		T(test_a_full_waiter_table_makes_room_from_its_heaviest_client),
		T(test_a_full_waiter_table_refuses_its_heaviest_client),
		T(test_a_refresh_counts_against_the_client_whose_hit_triggered_it),
		T(test_refreshes_are_bounded_globally),
		T(test_dns64_asks_a_after_an_aaaa_answer_without_aaaa),
		T(test_dns64_asks_a_for_the_end_of_the_cname_chain),
		T(test_dns64_keeps_aaaa_answers_and_nxdomain),
		T(test_dns64_a_question_keeps_the_clients_deadline),
#undef T
	};
	int failed;

	log_setup(LOG_ERROR, LOG_FORMAT_LOGFMT); /* the queue's warnings are expected here */
	urcu_memb_register_thread();
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	urcu_memb_unregister_thread();
	return failed;
}
