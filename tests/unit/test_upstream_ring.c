/*
 * Unit tests for upstream/ring.c, the packed request rings from workers to
 * the resolver thread: every field survives packing (including the longest
 * name, chain, autopath NXDOMAIN, cookies and an IPv6 client), requests
 * come out in order across many wraps of the ring, a full ring refuses
 * rather than overwrites, the burst a coalescing test sends (1,000 misses)
 * fits, and a worker and a resolver thread running at once agree on every
 * byte; and the ring of sockets a worker hands over.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <netinet/in.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "upstream/deliver.h"
#include "upstream/ring.h"

/* A request whose variable parts have the given lengths, every byte derived from seq. */
static void make_request(struct upstream_request *r, uint32_t seq, size_t qname_len,
			 size_t chain_len, size_t nxdomain_len, size_t cookie_len, bool v6)
{
	memset(r, 0, sizeof *r);
	r->ask.q.id = (uint16_t)seq;
	r->ask.q.flags = 0x0100;
	r->ask.q.question_ok = true;
	r->ask.q.qtype = (uint16_t)(1 + seq % 50);
	r->ask.q.qclass = 1;
	r->ask.q.qname_len = (uint16_t)qname_len;
	r->ask.q.qname_labels = (uint8_t)(seq % 100);
	for (size_t i = 0; i < qname_len; i++) {
		r->ask.q.qname[i] = (uint8_t)('a' + (seq + i) % 26);
		r->ask.q.qname_orig[i] = (uint8_t)('A' + (seq + i) % 26);
	}
	r->ask.q.has_edns = seq & 1;
	r->ask.q.edns_version = 0;
	r->ask.q.edns_do = seq & 2;
	r->ask.q.edns_udp_size = (uint16_t)(512 + seq % 4000);
	r->ask.q.cookie_len = (uint8_t)cookie_len;
	for (size_t i = 0; i < cookie_len; i++)
		r->ask.q.cookie[i] = (uint8_t)(seq * 7 + i);
	r->ask.chain_len = (uint16_t)chain_len;
	for (size_t i = 0; i < chain_len; i++)
		r->ask.chain[i] = (uint8_t)(seq * 3 + i);
	r->ask.chain_ttl = seq * 11;
	r->ask.search = seq & 4;
	r->ask.nxdomain_len = (uint8_t)nxdomain_len;
	for (size_t i = 0; i < nxdomain_len; i++)
		r->ask.nxdomain[i] = (uint8_t)(seq + 5 * i);
	r->ask.reply_limit = 512 + seq % 65000;
	r->ask.udp_payload = 1232;
	r->ask.has_cookie = seq & 8;
	for (size_t i = 0; i < sizeof r->ask.cookie; i++)
		r->ask.cookie[i] = (uint8_t)(seq ^ i);
	r->transport = (enum upstream_transport)(seq % 3);
	r->fd = (int)(seq % 1000);
	if (v6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&r->peer;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = (uint16_t)seq;
		memset(&in6->sin6_addr, (int)(seq & 0xff), sizeof in6->sin6_addr);
		r->peer_len = sizeof *in6;
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&r->peer;
		in->sin_family = AF_INET;
		in->sin_port = (uint16_t)seq;
		in->sin_addr.s_addr = seq;
		r->peer_len = sizeof *in;
	}
	r->conn = seq;
	r->conn_gen = ~seq;
	r->log_reply = seq & 16;
	r->ask.cache_absent = seq & 32;
	r->ask.cache_keyed = seq & 64;
	r->ask.cache_name_hash = r->ask.cache_keyed ? seq * 0x9e3779b97f4a7c15ull : 0;
	r->ask.cache_hash = r->ask.cache_keyed ? ~r->ask.cache_name_hash : 0;
}

/* The same request, comparing only the bytes the lengths say are used. */
static void assert_same(const struct upstream_request *a, const struct upstream_request *b)
{
	assert_int_equal(a->ask.q.id, b->ask.q.id);
	assert_int_equal(a->ask.q.flags, b->ask.q.flags);
	assert_int_equal(a->ask.q.question_ok, b->ask.q.question_ok);
	assert_int_equal(a->ask.q.qtype, b->ask.q.qtype);
	assert_int_equal(a->ask.q.qclass, b->ask.q.qclass);
	assert_int_equal(a->ask.q.qname_len, b->ask.q.qname_len);
	assert_int_equal(a->ask.q.qname_labels, b->ask.q.qname_labels);
	assert_memory_equal(a->ask.q.qname, b->ask.q.qname, a->ask.q.qname_len);
	assert_memory_equal(a->ask.q.qname_orig, b->ask.q.qname_orig, a->ask.q.qname_len);
	assert_int_equal(a->ask.q.has_edns, b->ask.q.has_edns);
	assert_int_equal(a->ask.q.edns_version, b->ask.q.edns_version);
	assert_int_equal(a->ask.q.edns_do, b->ask.q.edns_do);
	assert_int_equal(a->ask.q.edns_udp_size, b->ask.q.edns_udp_size);
	assert_int_equal(a->ask.q.cookie_len, b->ask.q.cookie_len);
	if (a->ask.q.cookie_len)
		assert_memory_equal(a->ask.q.cookie, b->ask.q.cookie, a->ask.q.cookie_len);
	assert_int_equal(a->ask.chain_len, b->ask.chain_len);
	if (a->ask.chain_len)
		assert_memory_equal(a->ask.chain, b->ask.chain, a->ask.chain_len);
	assert_int_equal(a->ask.chain_ttl, b->ask.chain_ttl);
	assert_int_equal(a->ask.search, b->ask.search);
	assert_int_equal(a->ask.nxdomain_len, b->ask.nxdomain_len);
	if (a->ask.nxdomain_len)
		assert_memory_equal(a->ask.nxdomain, b->ask.nxdomain, a->ask.nxdomain_len);
	assert_int_equal(a->ask.reply_limit, b->ask.reply_limit);
	assert_int_equal(a->ask.udp_payload, b->ask.udp_payload);
	assert_int_equal(a->ask.has_cookie, b->ask.has_cookie);
	assert_memory_equal(a->ask.cookie, b->ask.cookie, sizeof a->ask.cookie);
	assert_int_equal(a->transport, b->transport);
	assert_int_equal(a->fd, b->fd);
	assert_int_equal(a->peer_len, b->peer_len);
	assert_memory_equal(&a->peer, &b->peer, a->peer_len);
	assert_int_equal(a->conn, b->conn);
	assert_int_equal(a->conn_gen, b->conn_gen);
	assert_int_equal(a->log_reply, b->log_reply);
	assert_int_equal(a->ask.cache_absent, b->ask.cache_absent);
	assert_int_equal(a->ask.cache_keyed, b->ask.cache_keyed);
	if (a->ask.cache_keyed) {
		assert_int_equal(a->ask.cache_name_hash, b->ask.cache_name_hash);
		assert_int_equal(a->ask.cache_hash, b->ask.cache_hash);
	}
}

/* Sizes that vary from request to request, sometimes the largest there are. */
static void varied_request(struct upstream_request *r, uint32_t seq)
{
	bool largest = seq % 97 == 0;

	make_request(r, seq, largest ? DNS_MAX_NAME : 2 + seq % 60,
		     largest ? QUERY_CHAIN_MAX : (seq % 5 == 0 ? seq % 300 : 0),
		     largest ? QUERY_NXDOMAIN_MAX : (seq % 7 == 0 ? 54 : 0),
		     largest ? DNS_COOKIE_MAX : (seq % 3 == 0 ? 24 : 0), largest || seq % 2);
}

static struct upstream_request in, out; /* too large for cmocka's small test stacks */

static void test_every_field_survives_the_ring(void **state)
{
	(void)state;
	struct request_ring *ring = ring_request_new();

	assert_non_null(ring);
	assert_false(ring_request_take(ring, &out));
	make_request(&in, 42, DNS_MAX_NAME, QUERY_CHAIN_MAX, QUERY_NXDOMAIN_MAX,
		     DNS_COOKIE_MAX, true);
	assert_true(ring_request_put(ring, &in));
	memset(&out, 0xee, sizeof out);
	assert_true(ring_request_take(ring, &out));
	assert_same(&in, &out);
	make_request(&in, 64 + 7, 1, 0, 0, 0, false); /* the root, keyed, nothing else */
	assert_true(ring_request_put(ring, &in));
	assert_true(ring_request_take(ring, &out));
	assert_same(&in, &out);
	assert_false(ring_request_take(ring, &out));
	ring_request_free(ring);
}

static void test_a_burst_of_misses_fits_and_a_full_ring_refuses(void **state)
{
	(void)state;
	struct request_ring *ring = ring_request_new();
	uint32_t typical = 0, largest = 0;

	/* "www.site.example" A from an IPv4 client with a cookie, as the coalescing test sends */
	do
		make_request(&in, typical, 18, 0, 0, 24, false);
	while (ring_request_put(ring, &in) && ++typical < 100000);
	print_message("%u typical requests fit\n", typical);
	assert_true(typical >= 1000);
	for (uint32_t i = 0; i < typical; i++) {
		assert_true(ring_request_take(ring, &out));
		assert_int_equal(out.ask.q.id, (uint16_t)i);
	}
	assert_false(ring_request_take(ring, &out));

	do
		make_request(&in, largest, DNS_MAX_NAME, QUERY_CHAIN_MAX, QUERY_NXDOMAIN_MAX,
			     DNS_COOKIE_MAX, true);
	while (ring_request_put(ring, &in) && ++largest < 100000);
	print_message("%u of the largest requests fit\n", largest);
	assert_true(largest >= 150);
	/* the one refused was not half written: the ring still holds exactly the others */
	for (uint32_t i = 0; i < largest; i++) {
		assert_true(ring_request_take(ring, &out));
		make_request(&in, i, DNS_MAX_NAME, QUERY_CHAIN_MAX, QUERY_NXDOMAIN_MAX,
			     DNS_COOKIE_MAX, true);
		assert_same(&in, &out);
	}
	assert_false(ring_request_take(ring, &out));
	ring_request_free(ring);
}

static void test_order_and_bytes_hold_across_many_wraps(void **state)
{
	(void)state;
	struct request_ring *ring = ring_request_new();
	uint32_t put = 0, taken = 0;

	/* 200,000 requests through 256 KiB, the ring between empty and nearly full */
	while (taken < 200000) {
		uint32_t burst = 1 + (put * 2654435761u) % 800;
		for (uint32_t i = 0; i < burst; i++) {
			varied_request(&in, put);
			if (!ring_request_put(ring, &in))
				break;
			put++;
		}
		uint32_t drain = 1 + (taken * 40503u) % 900;
		for (uint32_t i = 0; i < drain && ring_request_take(ring, &out); i++) {
			varied_request(&in, taken++);
			assert_same(&in, &out);
		}
	}
	while (ring_request_take(ring, &out)) {
		varied_request(&in, taken++);
		assert_same(&in, &out);
	}
	assert_int_equal(taken, put);
	ring_request_free(ring);
}

#define THREADED_REQUESTS 300000

static void *producer_main(void *arg)
{
	struct request_ring *ring = arg;
	static struct upstream_request r;

	for (uint32_t seq = 0; seq < THREADED_REQUESTS;) {
		varied_request(&r, seq);
		if (ring_request_put(ring, &r))
			seq++;
	}
	return NULL;
}

static void test_a_worker_and_the_resolver_at_once(void **state)
{
	(void)state;
	struct request_ring *ring = ring_request_new();
	pthread_t producer;
	uint32_t seq = 0;

	assert_int_equal(pthread_create(&producer, NULL, producer_main, ring), 0);
	while (seq < THREADED_REQUESTS) {
		if (!ring_request_take(ring, &out))
			continue;
		varied_request(&in, seq++);
		assert_same(&in, &out);
	}
	pthread_join(producer, NULL);
	assert_false(ring_request_take(ring, &out));
	ring_request_free(ring);
}

/* The sockets a worker hands over: in order, a full ring refuses, and room comes back. */
static void test_sockets_handed_over_in_order_and_a_full_ring_refuses(void **state)
{
	(void)state;
	struct socket_ring *ring = ring_socket_new();
	int fd, put = 0, taken = 0;

	assert_non_null(ring);
	assert_false(ring_socket_take(ring, &fd));
	while (ring_socket_put(ring, 100 + put))
		put++;
	assert_int_equal(put, 64);
	assert_true(ring_socket_take(ring, &fd));
	assert_int_equal(fd, 100 + taken++);
	assert_true(ring_socket_put(ring, 100 + put++));
	assert_false(ring_socket_put(ring, 0));
	while (ring_socket_take(ring, &fd))
		assert_int_equal(fd, 100 + taken++);
	assert_int_equal(taken, put);
	ring_socket_free(ring);
}

/*
 * TCP replies for one worker that does not take them while the resolver
 * makes more than its completion ring holds (thousands of TCP clients
 * waiting on one name): none is lost, so no connection's count of queries
 * waiting for the upstream is left too high.
 */
static void test_no_tcp_reply_is_lost_to_a_full_completion_ring(void **state)
{
	(void)state;
	enum { REPLIES = 3000 };
	static struct deliver d;
	static struct upstream_counters n;
	struct cache_config cc = {.max_bytes = 1 << 20};
	struct cache *cache = cache_new(&cc);
	struct completion_ring *rings[1] = {ring_completion_new()};
	const struct flight_reply servfail = {.kind = FLIGHT_REPLY_SERVFAIL};
	struct upstream_completion c;
	uint32_t taken = 0;

	assert_non_null(cache);
	assert_non_null(rings[0]);
	assert_int_equal(deliver_init(&d, cache, &n, rings, 1), 0);
	for (uint32_t i = 0; i < REPLIES; i++) {
		make_request(&in, i, 12, 0, 0, 0, false);
		in.transport = UPSTREAM_TCP;
		in.conn = i;
		deliver_reply(&d, 0, &in, &servfail, 1000);
	}
	deliver_flush(&d);
	/* the worker takes what is there; the resolver's next turns bring the rest */
	for (int turn = 0; turn < 10 && taken < REPLIES; turn++) {
		while (ring_completion_take(rings[0], &c)) {
			assert_int_equal(c.conn, taken);
			assert_true(c.len > 2 + DNS_HEADER_LEN);
			free(c.framed);
			taken++;
		}
		deliver_flush(&d);
	}
	assert_int_equal(taken, REPLIES);
	assert_int_equal(atomic_load(&n.dropped), 0);
	assert_false(deliver_holding(&d));
	deliver_free(&d);
	ring_completion_free(rings[0]);
	cache_free(cache);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_field_survives_the_ring),
		cmocka_unit_test(test_a_burst_of_misses_fits_and_a_full_ring_refuses),
		cmocka_unit_test(test_order_and_bytes_hold_across_many_wraps),
		cmocka_unit_test(test_a_worker_and_the_resolver_at_once),
		cmocka_unit_test(test_sockets_handed_over_in_order_and_a_full_ring_refuses),
		cmocka_unit_test(test_no_tcp_reply_is_lost_to_a_full_completion_ring),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
