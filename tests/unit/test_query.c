/*
 * Unit tests for query/: the rules above the data sources (opcode, class,
 * zone transfers, CHAOS, EDNS version, UDP size), the hand-off of cache
 * misses to the upstream, and the hot-path promise: answering (local data,
 * cache hits, misses) allocates nothing and takes no mutex. This binary is linked
 * with --wrap for the allocator and pthread_mutex_lock (see the Makefile),
 * so every call from the library is counted.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <urcu/urcu-memb.h>

#include "cache/cache.h"
#include "config/config.h"
#include "dns/dns.h"
#include "query/query.h"

#include "address.h"
#include "alloc_count.h"
#include "msg_view.h"

static const char config_yaml[] =
	"kubernetes: {enabled: false}\n"
	"listen: {addresses: [127.0.0.1], port: 5353, udp_max_payload: 1232}\n"
	"chaos: {enabled: true, version: \"test-version\", id: \"node-a\"}\n"
	"dns64: {prefix: \"64:ff9b::/96\"}\n"
	"static:\n"
	"  records:\n"
	"    - {name: db.prod.svc.cluster.local, a: [10.0.0.5], aaaa: [\"fd00::5\"]}\n"
	"    - {name: big.prod.svc.cluster.local, a: [10.0.1.1, 10.0.1.2, 10.0.1.3,\n"
	"       10.0.1.4, 10.0.1.5, 10.0.1.6, 10.0.1.7, 10.0.1.8, 10.0.1.9, 10.0.1.10,\n"
	"       10.0.1.11, 10.0.1.12, 10.0.1.13, 10.0.1.14, 10.0.1.15, 10.0.1.16,\n"
	"       10.0.1.17, 10.0.1.18, 10.0.1.19, 10.0.1.20, 10.0.1.21, 10.0.1.22,\n"
	"       10.0.1.23, 10.0.1.24, 10.0.1.25, 10.0.1.26, 10.0.1.27, 10.0.1.28,\n"
	"       10.0.1.29, 10.0.1.30, 10.0.1.31, 10.0.1.32]}\n";

static struct cache *test_cache;

static int setup(void **state)
{
	struct config *cfg;
	char err[CONFIG_ERR_MAX];
	(void)state;

	urcu_memb_register_thread();
	if (config_load_string("test.yaml", config_yaml, sizeof config_yaml - 1, &cfg, err,
			       sizeof err) < 0) {
		print_error("%s\n", err);
		return -1;
	}
	struct cache_config cc = {.max_bytes = 1 << 20, .max_ttl = 86400,
				  .negative_max_ttl = 3600, .servfail_ttl = 5};
	test_cache = cache_new(&cc);
	assert_non_null(test_cache);
	struct query_sources *s = query_sources_build(cfg, NULL, test_cache, err, sizeof err);
	config_free(cfg);
	if (!s) {
		print_error("%s\n", err);
		return -1;
	}
	query_sources_publish(s);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	query_sources_retire();
	cache_free(test_cache);
	urcu_memb_unregister_thread();
	return 0;
}

struct msg {
	uint8_t buf[512];
	size_t len;
};

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* A query with one question; edns_version < 0 means no OPT record. */
static void build_query(struct msg *m, const char *name, uint16_t qtype, uint16_t qclass,
			uint16_t flags, int edns_version, uint16_t edns_size)
{
	memset(m, 0, sizeof *m);
	put16(m->buf, 0xbeef);
	put16(m->buf + 2, flags);
	put16(m->buf + 4, 1);
	int n = dns_name_from_text(name, m->buf + DNS_HEADER_LEN);
	assert_true(n > 0);
	m->len = DNS_HEADER_LEN + (size_t)n;
	put16(m->buf + m->len, qtype);
	put16(m->buf + m->len + 2, qclass);
	m->len += 4;
	if (edns_version >= 0) {
		uint8_t *p = m->buf + m->len;
		p[0] = 0;
		put16(p + 1, DNS_T_OPT);
		put16(p + 3, edns_size);
		p[5] = 0;
		p[6] = (uint8_t)edns_version;
		put16(p + 7, 0);
		put16(p + 9, 0);
		m->len += 11;
		put16(m->buf + 10, 1);
	}
}

/* The same query with a client cookie in its OPT record. */
static void add_client_cookie(struct msg *m)
{
	static const uint8_t option[12] = {0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8};

	memcpy(m->buf + m->len, option, sizeof option);
	put16(m->buf + m->len - 2, sizeof option); /* the OPT rdlength */
	m->len += sizeof option;
}

struct answer {
	uint8_t buf[DNS_MAX_MESSAGE];
	size_t len;
};

/* A client address, so replies to cookies get a server cookie. */
static const struct sockaddr_storage *test_peer(void)
{
	static struct sockaddr_storage peer;
	struct sockaddr_in *sin = (struct sockaddr_in *)&peer;

	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(0x7f000001);
	return &peer;
}

#define NOW 1000 /* the cache's clock, in seconds */

static struct query_ask last_request;

/* Answer m; returns what query_handle asked of the upstream. */
static enum query_upstream handle(const struct msg *m, enum query_transport tr,
				  struct answer *a)
{
	struct query_stats st = {0};
	struct query_ctx ctx = {.transport = tr, .peer = test_peer(), .stats = &st,
				.now = NOW, .ask = &last_request};

	urcu_memb_read_lock();
	a->len = query_handle(m->buf, m->len, a->buf, sizeof a->buf, &ctx);
	urcu_memb_read_unlock();
	assert_int_equal(st.received, 1);
	assert_int_equal(st.source[ctx.source], 1);
	return ctx.upstream;
}

/* An upstream's reply to m: one A record (TTL 300) for the question name. */
static void cache_upstream_answer(const struct msg *m)
{
	struct dns_query q;
	uint8_t reply[512];
	static const uint8_t rr[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 192, 0, 2, 1};
	size_t question_end = m->len - (rd16(m->buf + 10) ? 11 : 0);

	assert_int_equal(dns_parse_query(m->buf, m->len, &q), DNS_PARSE_OK);
	memcpy(reply, m->buf, question_end);
	put16(reply + 2, DNS_F_QR | DNS_F_RD | DNS_F_RA);
	put16(reply + 6, 1);
	put16(reply + 10, 0);
	memcpy(reply + question_end, rr, sizeof rr);
	assert_int_equal(cache_insert(test_cache, &q, reply, question_end + sizeof rr, NOW), 0);
}

static int rcode_of(const struct answer *a)
{
	return a->buf[3] & 0xf;
}

static void test_static_answer(void **state)
{
	struct msg m;
	struct answer a;
	(void)state;

	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, DNS_F_RD, 0, 4096);
	handle(&m, QUERY_UDP, &a);
	assert_true(a.len > DNS_HEADER_LEN);
	assert_int_equal(rd16(a.buf), 0xbeef);
	assert_int_equal(rcode_of(&a), DNS_R_NOERROR);
	assert_int_equal(rd16(a.buf + 6), 1);
	assert_int_equal(rd16(a.buf + 10), 1); /* the OPT record */
}

static void test_cache_miss_is_handed_to_the_upstream(void **state)
{
	struct msg m;
	struct answer a;
	(void)state;

	build_query(&m, "miss.example.org", DNS_T_AAAA, DNS_C_IN, DNS_F_RD, 0, 4096);
	m.buf[DNS_HEADER_LEN + 1] = 'M';
	m.buf[DNS_HEADER_LEN + 6] = 'E';
	add_client_cookie(&m);
	memset(&last_request, 0, sizeof last_request);
	assert_int_equal(handle(&m, QUERY_UDP, &a), QUERY_UPSTREAM_ASK);
	assert_int_equal(a.len, 0); /* the resolver replies later */
	assert_int_equal(last_request.q.id, 0xbeef);
	assert_int_equal(last_request.q.qtype, DNS_T_AAAA);
	assert_memory_equal(last_request.q.qname, "\4miss\7example\3org", 18);
	assert_memory_equal(last_request.q.qname_orig, "\4Miss\7Example\3org", 18);
	assert_int_equal(last_request.reply_limit, 1232); /* min(4096, our cap) */
	assert_int_equal(last_request.udp_payload, 1232);
	assert_true(last_request.has_cookie);

	build_query(&m, "miss.example.org", DNS_T_AAAA, DNS_C_IN, DNS_F_RD, -1, 0);
	assert_int_equal(handle(&m, QUERY_TCP, &a), QUERY_UPSTREAM_ASK);
	assert_int_equal(last_request.reply_limit, DNS_MAX_MESSAGE);
	assert_false(last_request.has_cookie);
}

static void test_cached_answer_is_served_with_the_clients_id_and_case(void **state)
{
	struct msg m;
	struct answer a;
	(void)state;

	build_query(&m, "hit.example.org", DNS_T_A, DNS_C_IN, DNS_F_RD, -1, 0);
	cache_upstream_answer(&m);
	build_query(&m, "hit.example.org", DNS_T_A, DNS_C_IN, DNS_F_RD, -1, 0);
	memcpy(m.buf + DNS_HEADER_LEN + 1, "HIT", 3);
	put16(m.buf, 0x1234);
	assert_int_equal(handle(&m, QUERY_UDP, &a), QUERY_UPSTREAM_NONE);
	assert_int_equal(rd16(a.buf), 0x1234);
	assert_int_equal(rcode_of(&a), DNS_R_NOERROR);
	assert_int_equal(rd16(a.buf + 6), 1);
	assert_memory_equal(a.buf + DNS_HEADER_LEN, "\3HIT", 4);
	assert_memory_equal(a.buf + a.len - 4, "\xc0\x00\x02\x01", 4);
}

static void test_without_a_cache_non_local_names_are_refused(void **state)
{
	struct config *cfg;
	struct msg m;
	struct answer a;
	char err[CONFIG_ERR_MAX];
	(void)state;

	assert_int_equal(config_load_string("t.yaml", config_yaml, sizeof config_yaml - 1, &cfg,
					    err, sizeof err), 0);
	query_sources_publish(query_sources_build(cfg, NULL, NULL, err, sizeof err));
	config_free(cfg);
	build_query(&m, "example.org", DNS_T_A, DNS_C_IN, DNS_F_RD, -1, 0);
	assert_int_equal(handle(&m, QUERY_UDP, &a), QUERY_UPSTREAM_NONE);
	assert_int_equal(rcode_of(&a), DNS_R_REFUSED);
	teardown(state);
	setup(state);
}

/* The rcode a client at addr (IPv4 or IPv6 text) gets for a static name. */
static int rcode_from(const char *addr)
{
	struct sockaddr_storage peer = address_of(addr);
	struct query_stats st = {0};
	struct query_ctx ctx = {.transport = QUERY_UDP, .peer = &peer, .stats = &st, .now = NOW,
				.ask = &last_request};
	struct msg m;
	struct answer a;

	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, DNS_F_RD, -1, 0);
	urcu_memb_read_lock();
	a.len = query_handle(m.buf, m.len, a.buf, sizeof a.buf, &ctx);
	urcu_memb_read_unlock();
	assert_true(a.len > DNS_HEADER_LEN);
	return rcode_of(&a);
}

/* listen.allow's prefixes at their edges, for both families (prefixes on
 * and off byte and 64-bit boundaries). */
static void test_listen_allow_edges(void **state)
{
	static const char yaml[] =
		"kubernetes: {enabled: false}\n"
		"listen: {addresses: [127.0.0.1], port: 5353, allow: [10.0.0.0/8, 172.16.0.0/12,\n"
		"  192.0.2.7, \"fd00::/8\", \"2001:db8:8000::/33\", \"2001:db8::ab00/120\", \"::1\"]}\n"
		"static:\n"
		"  records:\n"
		"    - {name: db.prod.svc.cluster.local, a: [10.0.0.5]}\n";
	static const struct {
		const char *addr;
		bool allowed;
	} cases[] = {
		{"10.0.0.0", true}, {"10.255.255.255", true}, {"11.0.0.0", false},
		{"9.255.255.255", false}, {"172.16.0.1", true}, {"172.31.255.255", true},
		{"172.32.0.0", false}, {"172.15.255.255", false}, {"192.0.2.7", true},
		{"192.0.2.6", false}, {"192.0.2.8", false}, {"127.0.0.1", false},
		{"fd00::1", true}, {"fdff:ffff::1", true}, {"fe00::", false}, {"fc00::1", false},
		{"2001:db8:8000::1", true}, {"2001:db8:ffff:ffff::", true},
		{"2001:db8:7fff:ffff:ffff:ffff:ffff:ffff", false}, {"2001:db9:8000::", false},
		{"2001:db8::ab00", true}, {"2001:db8::abff", true}, {"2001:db8::ac00", false},
		{"2001:db8::aaff", false}, {"::1", true}, {"::2", false}, {"::", false},
		{"::ffff:10.0.0.1", false}, /* a mapped IPv4 client is an IPv6 one */
	};
	struct config *cfg;
	char err[CONFIG_ERR_MAX];
	(void)state;

	assert_int_equal(config_load_string("t.yaml", yaml, sizeof yaml - 1, &cfg, err, sizeof err), 0);
	query_sources_publish(query_sources_build(cfg, NULL, NULL, err, sizeof err));
	config_free(cfg);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rcode = rcode_from(cases[i].addr);
		if (rcode != (cases[i].allowed ? DNS_R_NOERROR : DNS_R_REFUSED))
			fail_msg("%s: rcode %d, want %s", cases[i].addr, rcode,
				 cases[i].allowed ? "NOERROR" : "REFUSED");
	}
	teardown(state);
	setup(state);
}

static void test_zone_transfers_are_refused(void **state)
{
	struct msg m;
	struct answer a;
	(void)state;

	build_query(&m, "cluster.local", DNS_T_AXFR, DNS_C_IN, 0, -1, 0);
	handle(&m, QUERY_TCP, &a);
	assert_int_equal(rcode_of(&a), DNS_R_REFUSED);
	build_query(&m, "cluster.local", DNS_T_IXFR, DNS_C_IN, 0, -1, 0);
	handle(&m, QUERY_UDP, &a);
	assert_int_equal(rcode_of(&a), DNS_R_REFUSED);
}

static void test_chaos_identity_when_enabled(void **state)
{
	struct msg m;
	struct answer a;
	(void)state;

	build_query(&m, "version.bind", DNS_T_TXT, DNS_C_CH, 0, -1, 0);
	handle(&m, QUERY_UDP, &a);
	assert_int_equal(rcode_of(&a), DNS_R_NOERROR);
	assert_int_equal(rd16(a.buf + 6), 1);
	assert_non_null(memmem(a.buf, a.len, "\014test-version", 13));
	build_query(&m, "ID.Server", DNS_T_TXT, DNS_C_CH, 0, -1, 0);
	handle(&m, QUERY_UDP, &a);
	assert_non_null(memmem(a.buf, a.len, "\006node-a", 7));
	build_query(&m, "hostname.bind", DNS_T_TXT, DNS_C_CH, 0, -1, 0);
	handle(&m, QUERY_UDP, &a);
	assert_int_equal(rcode_of(&a), DNS_R_REFUSED);
	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, 4 /* HS */, 0, -1, 0);
	handle(&m, QUERY_UDP, &a);
	assert_int_equal(rcode_of(&a), DNS_R_REFUSED);
}

static void test_bad_edns_version_gets_badvers(void **state)
{
	struct msg m;
	struct answer a;
	(void)state;

	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, 1, 1232);
	handle(&m, QUERY_UDP, &a);
	assert_int_equal(rcode_of(&a), 0);        /* BADVERS = 16: low bits 0 ... */
	assert_int_equal(rd16(a.buf + 6), 0);
	assert_int_equal(rd16(a.buf + 10), 1);
	assert_int_equal(a.buf[a.len - 11 + 5], 1); /* ... and extended rcode 1 in OPT */
}

static void test_other_opcodes_get_notimp_and_responses_are_dropped(void **state)
{
	struct msg m;
	struct answer a;
	(void)state;

	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 2 << 11, -1, 0);
	handle(&m, QUERY_UDP, &a);
	assert_int_equal(rcode_of(&a), DNS_R_NOTIMP);
	assert_int_equal(rd16(a.buf), 0xbeef);
	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, DNS_F_QR, -1, 0);
	handle(&m, QUERY_UDP, &a);
	assert_int_equal(a.len, 0);
}

static void test_udp_limit_follows_edns_size_and_our_cap(void **state)
{
	struct msg m;
	struct answer a;
	(void)state;

	/* 32 A records: ~540 bytes, over 512 but under 1232. */
	build_query(&m, "big.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, -1, 0);
	handle(&m, QUERY_UDP, &a);
	assert_true(a.buf[2] & (DNS_F_TC >> 8));
	assert_int_equal(rd16(a.buf + 6), 0);
	assert_true(a.len <= 512);
	build_query(&m, "big.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, 0, 100);
	handle(&m, QUERY_UDP, &a); /* sizes below 512 count as 512 */
	assert_true(a.buf[2] & (DNS_F_TC >> 8));
	build_query(&m, "big.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, 0, 4096);
	handle(&m, QUERY_UDP, &a);
	assert_false(a.buf[2] & (DNS_F_TC >> 8));
	assert_int_equal(rd16(a.buf + 6), 32);
	build_query(&m, "big.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, -1, 0);
	handle(&m, QUERY_TCP, &a);
	assert_false(a.buf[2] & (DNS_F_TC >> 8));
	assert_int_equal(rd16(a.buf + 6), 32);
}

static void count(const struct msg *m, struct query_stats *st)
{
	struct answer a;
	struct query_ctx ctx = {.transport = QUERY_UDP, .stats = st, .now = NOW,
				.ask = &last_request};

	urcu_memb_read_lock();
	query_handle(m->buf, m->len, a.buf, sizeof a.buf, &ctx);
	urcu_memb_read_unlock();
}

static void test_counters_follow_the_reply(void **state)
{
	struct query_stats st = {0};
	struct msg m;
	(void)state;

	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, 0, 1232);
	count(&m, &st);
	build_query(&m, "nope.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, -1, 0);
	count(&m, &st);
	build_query(&m, "counted.example.org", DNS_T_A, DNS_C_IN, 0, -1, 0);
	count(&m, &st); /* a miss: no reply yet, so no rcode */
	cache_upstream_answer(&m);
	count(&m, &st); /* now a hit */
	build_query(&m, "big.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, -1, 0);
	count(&m, &st); /* NOERROR, truncated */
	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, 1, 1232);
	count(&m, &st); /* BADVERS: 0 in the header, 16 in OPT */
	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, DNS_F_QR, -1, 0);
	count(&m, &st);
	assert_int_equal(st.received, 7);
	assert_int_equal(st.rcode[DNS_R_NOERROR], 3);
	assert_int_equal(st.rcode[DNS_R_NXDOMAIN], 1);
	assert_int_equal(st.rcode[DNS_R_REFUSED], 0);
	assert_int_equal(st.rcode[DNS_RCODE_SLOT_OTHER], 1);
	assert_int_equal(st.truncated, 1);
	assert_int_equal(st.dropped, 1);
	assert_int_equal(st.source[QUERY_SOURCE_UPSTREAM], 1);
	assert_int_equal(st.source[QUERY_SOURCE_CACHE], 1);
	assert_int_equal(st.source[QUERY_SOURCE_STATIC], 3);
	assert_int_equal(st.source[QUERY_SOURCE_CLUSTER], 0);
	/* BADVERS is answered before any source; the QR=1 packet is dropped */
	assert_int_equal(st.source[QUERY_SOURCE_NONE], 2);
}

static void test_cookie_gets_a_server_cookie(void **state)
{
	struct msg m;
	struct answer a;
	(void)state;

	build_query(&m, "db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0, 0, 1232);
	add_client_cookie(&m);
	handle(&m, QUERY_UDP, &a);
	assert_int_equal(rcode_of(&a), DNS_R_NOERROR);
	/* OPT is last: ... rdlength 28 | code 10 | length 24 | client 8 | server 16 */
	const uint8_t *opt_data = a.buf + a.len - 28;
	assert_int_equal(rd16(opt_data - 2), 28);
	assert_int_equal(rd16(opt_data), 10);
	assert_int_equal(rd16(opt_data + 2), 24);
	assert_memory_equal(opt_data + 4, "\1\2\3\4\5\6\7\x08", 8);
	assert_int_equal(opt_data[12], 1); /* RFC 9018 version */
}

static void test_answering_allocates_nothing_and_takes_no_mutex(void **state)
{
	static const struct { const char *name; uint16_t type; uint16_t cls; int edns; } cases[] = {
		{"db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0},
		{"db.prod.svc.cluster.local", DNS_T_AAAA, DNS_C_IN, -1},
		{"nope.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 0},
		{"svc.cluster.local", DNS_T_TXT, DNS_C_IN, 0},
		{"big.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, -1},
		{"cached.example.org", DNS_T_A, DNS_C_IN, 0},
		{"uncached.example.org", DNS_T_A, DNS_C_IN, 0},
		{"version.bind", DNS_T_TXT, DNS_C_CH, -1},
		{"db.prod.svc.cluster.local", DNS_T_A, DNS_C_IN, 1},
	};
	struct msg m;
	struct answer a;
	(void)state;

	if (!alloc_counting_works()) {
		print_message("not linked with -Wl,--wrap=malloc,...: see the Makefile\n");
		skip();
	}
	for (int edns = -1; edns <= 0; edns++) {
		build_query(&m, "cached.example.org", DNS_T_A, DNS_C_IN, 0, edns, 1232);
		cache_upstream_answer(&m);
	}
	forbidden_calls = 0;
	for (int round = 0; round < 100; round++) {
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			build_query(&m, cases[i].name, cases[i].type, cases[i].cls, 0,
				    cases[i].edns, 1232);
			if (cases[i].edns == 0 && i % 2)
				add_client_cookie(&m);
			counting = true;
			enum query_upstream up = handle(&m, round % 2 ? QUERY_TCP : QUERY_UDP, &a);
			counting = false;
			if (strcmp(cases[i].name, "uncached.example.org") == 0)
				assert_int_equal(up, QUERY_UPSTREAM_ASK);
			else
				assert_true(a.len > 0);
		}
	}
	assert_int_equal(forbidden_calls, 0);
	/* The wrap reaches library code: a builder allocates and frees. */
	counting = true;
	zone_builder_free(zone_builder_new());
	counting = false;
	assert_true(forbidden_calls >= 2);
}

/*
 * DNS64 on local data (dns64.prefix; the synthesis is test_dns64's): an
 * IPv6 client's AAAA question for a name with A records only gets them
 * made AAAA, over UDP and TCP, with no allocation and no mutex; the same
 * question from an IPv4 client, and a name with AAAA of its own, are
 * answered as they are; a PTR under the prefix is chased to its
 * in-addr.arpa name.
 */
static void test_dns64_on_local_data_allocates_nothing(void **state)
{
	static struct sockaddr_storage v6;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&v6;
	struct query_stats st = {0};
	struct query_ctx ctx = {.peer = &v6, .stats = &st, .now = NOW, .ask = &last_request};
	struct msg m;
	struct answer a;
	(void)state;

	sin6->sin6_family = AF_INET6;
	sin6->sin6_addr.s6_addr[15] = 1; /* ::1 */
	assert_true(alloc_counting_works());
	forbidden_calls = 0;
	for (int round = 0; round < 20; round++) {
		build_query(&m, "big.prod.svc.cluster.local", DNS_T_AAAA, DNS_C_IN, 0, 0, 4096);
		ctx.transport = round % 2 ? QUERY_TCP : QUERY_UDP;
		counting = true;
		urcu_memb_read_lock();
		a.len = query_handle(m.buf, m.len, a.buf, sizeof a.buf, &ctx);
		urcu_memb_read_unlock();
		counting = false;
		struct msg_view *v = read_msg(a.buf, a.len);
		assert_int_equal(v->an, 32);
		assert_int_equal(v->rr[0].type, DNS_T_AAAA);
		static const uint8_t first[16] = {0, 0x64, 0xff, 0x9b, [12] = 10, 0, 1, 1};
		assert_memory_equal(a.buf + v->rr[0].rdoff, first, 16);
	}
	assert_int_equal(forbidden_calls, 0);
	assert_int_equal(st.dns64_synthesized, 20);
	build_query(&m, "db.prod.svc.cluster.local", DNS_T_AAAA, DNS_C_IN, 0, 0, 1232);
	urcu_memb_read_lock();
	a.len = query_handle(m.buf, m.len, a.buf, sizeof a.buf, &ctx);
	urcu_memb_read_unlock();
	struct msg_view *v = read_msg(a.buf, a.len);
	assert_int_equal(v->an, 1);
	assert_string_equal(v->rr[0].owner, "db.prod.svc.cluster.local.");
	static const uint8_t own[16] = {0xfd, 0, [15] = 5};
	assert_memory_equal(a.buf + v->rr[0].rdoff, own, 16); /* its own AAAA */
	build_query(&m, "big.prod.svc.cluster.local", DNS_T_AAAA, DNS_C_IN, 0, 0, 4096);
	ctx.peer = test_peer(); /* IPv4: CoreDNS's rule */
	urcu_memb_read_lock();
	a.len = query_handle(m.buf, m.len, a.buf, sizeof a.buf, &ctx);
	urcu_memb_read_unlock();
	assert_int_equal(read_msg(a.buf, a.len)->an, 0);
	assert_int_equal(st.dns64_synthesized, 20);
	build_query(&m, "5.0.0.0.0.0.a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.b.9.f.f.4.6.0.0.ip6.arpa",
		    DNS_T_PTR, DNS_C_IN, 0, 0, 1232);
	urcu_memb_read_lock();
	a.len = query_handle(m.buf, m.len, a.buf, sizeof a.buf, &ctx);
	urcu_memb_read_unlock();
	/* not local here: chased like an ExternalName, the CNAME's target in the chain */
	assert_int_equal(ctx.upstream, QUERY_UPSTREAM_ASK);
	uint8_t target[DNS_MAX_NAME];
	int n = dns_name_from_text("5.0.0.10.in-addr.arpa", target);
	assert_int_equal(last_request.chain_len, n);
	assert_memory_equal(last_request.chain, target, (size_t)n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_static_answer),
		cmocka_unit_test(test_dns64_on_local_data_allocates_nothing),
		cmocka_unit_test(test_cache_miss_is_handed_to_the_upstream),
		cmocka_unit_test(test_cached_answer_is_served_with_the_clients_id_and_case),
		cmocka_unit_test(test_without_a_cache_non_local_names_are_refused),
		cmocka_unit_test(test_listen_allow_edges),
		cmocka_unit_test(test_zone_transfers_are_refused),
		cmocka_unit_test(test_chaos_identity_when_enabled),
		cmocka_unit_test(test_bad_edns_version_gets_badvers),
		cmocka_unit_test(test_other_opcodes_get_notimp_and_responses_are_dropped),
		cmocka_unit_test(test_udp_limit_follows_edns_size_and_our_cap),
		cmocka_unit_test(test_counters_follow_the_reply),
		cmocka_unit_test(test_cookie_gets_a_server_cookie),
		cmocka_unit_test(test_answering_allocates_nothing_and_takes_no_mutex),
	};
	return cmocka_run_group_tests_name("query", tests, setup, teardown);
}
