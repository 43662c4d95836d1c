/*
 * Unit tests for the resolver's bookkeeping that outside input drives:
 * upstream/pace.c (the token bucket behind upstream.max_rate) and the flight
 * table's hash (upstream/flight.c), which must not let names chosen to
 * collide pile up in one chain.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "upstream/flight.h"
#include "upstream/pace.h"
#include "util/hash.h"

/* ---- pace ------------------------------------------------------------------ */

/* How many of `tries` evenly spread over ms milliseconds pace lets through. */
static unsigned taken_over(struct pace *p, uint64_t start, uint64_t ms, unsigned tries)
{
	unsigned taken = 0;

	for (unsigned i = 0; i < tries; i++)
		taken += pace_take(p, start + ms * i / tries);
	return taken;
}

static void test_pace_holds_the_rate_over_a_second(void **state)
{
	(void)state;
	struct pace p;

	pace_init(&p, 1000, 0);
	/* 5,000 attempts in one second: the burst (100) plus 1,000 earned */
	unsigned taken = taken_over(&p, 0, 1000, 5000);
	assert_in_range(taken, 1000, 1101);
	/* the next second at the rate: all of them go */
	assert_int_equal(taken_over(&p, 1000, 1000, 1000), 1000);
}

static void test_pace_burst_is_a_tenth_of_a_second(void **state)
{
	(void)state;
	struct pace p;

	pace_init(&p, 5000, 0);
	assert_int_equal(taken_over(&p, 0, 0, 10000), 500);
	assert_false(pace_take(&p, 0));
	assert_int_equal(pace_wait_ms(&p, 0), 1);
	assert_true(pace_take(&p, 1));
	/* a long idle time refills the bucket, never beyond it */
	assert_int_equal(taken_over(&p, 100000, 0, 10000), 500);
}

static void test_pace_slow_rates_wait_whole_intervals(void **state)
{
	(void)state;
	struct pace p;

	pace_init(&p, 2, 0); /* burst: one question */
	assert_true(pace_take(&p, 0));
	assert_false(pace_take(&p, 0));
	assert_int_equal(pace_wait_ms(&p, 0), 500);
	assert_int_equal(pace_wait_ms(&p, 300), 200);
	assert_false(pace_take(&p, 499));
	assert_true(pace_take(&p, 500));
}

static void test_pace_zero_means_no_limit(void **state)
{
	(void)state;
	struct pace p;

	pace_init(&p, 0, 0);
	assert_int_equal(taken_over(&p, 0, 0, 100000), 100000);
	assert_int_equal(pace_wait_ms(&p, 0), 0);
}

/* ---- the flight table's hash ------------------------------------------------ */

static void query_for(struct dns_query *q, const char *text)
{
	memset(q, 0, sizeof *q);
	q->qname_len = (uint16_t)dns_name_from_text(text, q->qname);
	assert_true(q->qname_len > 1);
	q->qtype = DNS_T_A;
	q->qclass = DNS_C_IN;
}

/* The resolver's hash before it was keyed: FNV-1a over the key's fields. */
static uint64_t unkeyed(const struct dns_query *q)
{
	uint64_t h = fnv1a(FNV1A_SEED, q->qname, q->qname_len);

	h = fnv1a(h, &q->qtype, sizeof q->qtype);
	h = fnv1a(h, &q->qclass, sizeof q->qclass);
	h = fnv1a_byte(h, q->edns_do);
	return fnv1a_byte(h, (q->flags & DNS_F_CD) != 0);
}

/* A cache to key questions with: the flight table uses the cache's key. */
static struct cache *keying_cache(void)
{
	const struct cache_config cc = {.max_bytes = 1 << 20, .max_ttl = 86400,
					.negative_max_ttl = 3600, .servfail_ttl = 5};
	struct cache *c = cache_new(&cc);

	assert_non_null(c);
	return c;
}

static uint64_t table_hash(const struct cache *c, const struct dns_query *q)
{
	struct cache_key k;

	cache_key_of(c, q, &k);
	return k.hash;
}

/*
 * The flight table's buckets come from the cache key's hash (flight.c,
 * question_key). An attacker who knows the hash picks names that share a
 * bucket: with the unkeyed hash and 4,096 buckets, finding 1,000 takes a
 * fraction of a second (this test does it), and they made one chain of
 * 1,000 that every lookup walked. Keyed with a random SipHash key, the
 * same names spread like any others.
 */
static void test_names_chosen_to_collide_spread_over_the_buckets(void **state)
{
	(void)state;
	enum { NAMES = 1000, BUCKETS = 4096 };
	struct cache *c = keying_cache();
	struct dns_query q;
	char name[64];
	unsigned found = 0, chain[BUCKETS] = {0}, longest = 0;
	uint64_t target = 0;

	for (uint64_t i = 0; found < NAMES; i++) {
		snprintf(name, sizeof name, "c%llu.attack.example", (unsigned long long)i);
		query_for(&q, name);
		uint64_t bucket = unkeyed(&q) & (BUCKETS - 1);
		if (i == 0)
			target = bucket;
		if (bucket != target)
			continue;
		found++;
		unsigned *n = &chain[table_hash(c, &q) & (BUCKETS - 1)];
		if (++*n > longest)
			longest = *n;
	}
	/* 1,000 random keys in 4,096 buckets: the longest chain is about 4 */
	assert_in_range(longest, 1, 8);
	cache_free(c);
}

static void test_two_starts_key_the_table_differently(void **state)
{
	(void)state;
	struct cache *a = keying_cache(), *b = keying_cache();
	struct dns_query q;

	query_for(&q, "www.example.com");
	assert_true(table_hash(a, &q) != table_hash(b, &q));
	/* the key covers type, class, DO and CD too */
	uint64_t h = table_hash(a, &q);
	q.qtype = DNS_T_AAAA;
	assert_true(table_hash(a, &q) != h);
	q.qtype = DNS_T_A;
	q.edns_do = true;
	assert_true(table_hash(a, &q) != h);
	q.edns_do = false;
	q.flags = DNS_F_CD;
	assert_true(table_hash(a, &q) != h);
	cache_free(a);
	cache_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pace_holds_the_rate_over_a_second),
		cmocka_unit_test(test_pace_burst_is_a_tenth_of_a_second),
		cmocka_unit_test(test_pace_slow_rates_wait_whole_intervals),
		cmocka_unit_test(test_pace_zero_means_no_limit),
		cmocka_unit_test(test_names_chosen_to_collide_spread_over_the_buckets),
		cmocka_unit_test(test_two_starts_key_the_table_differently),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
