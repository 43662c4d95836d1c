/*
 * Unit tests for zone/: building the local table and answering from it
 * (exact matches, NXDOMAIN vs NODATA, empty non-terminals, CNAME chains,
 * SRV additionals, minimal ANY, conflicts), read back through the codec.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "dns/dns.h"
#include "zone/zone.h"
#include "zone/internal.h"
#include "reply.h"

static void add(struct zone_builder *b, const char *owner, uint16_t type,
		const void *rdata, size_t len)
{
	const char *why = NULL;

	assert_int_equal(zone_builder_add_rr(b, wire(owner), type, 30, rdata,
					     (uint16_t)len, &why), 0);
}

static void add_name_rr(struct zone_builder *b, const char *owner, uint16_t type,
			const char *target)
{
	const uint8_t *t = wire(target);
	add(b, owner, type, t, dns_name_len(t));
}

static struct zone_table *demo_table(void)
{
	struct zone_builder *b = zone_builder_new();
	const char *why = NULL;
	uint8_t srv[6 + DNS_MAX_NAME] = {0, 1, 0, 100, 0x0c, 0xea};
	const uint8_t *target = wire("db.prod.svc.cluster.local");
	size_t srv_len = 6 + dns_name_len(target);

	memcpy(srv + 6, target, dns_name_len(target)); /* before wire() reuses it */
	assert_non_null(b);
	assert_int_equal(zone_builder_add_authority(b, wire("cluster.local"), 5, 1, &why), 0);
	add(b, "db.prod.svc.cluster.local", DNS_T_A, "\x0a\x00\x00\x05", 4);
	add(b, "db.prod.svc.cluster.local", DNS_T_A, "\x0a\x00\x00\x06", 4);
	add(b, "db.prod.svc.cluster.local", DNS_T_A, "\x0a\x00\x00\x05", 4); /* duplicate */
	add(b, "db.prod.svc.cluster.local", DNS_T_AAAA,
	    "\xfd\x00\0\0\0\0\0\0\0\0\0\0\0\0\0\x05", 16);
	add_name_rr(b, "www.prod.svc.cluster.local", DNS_T_CNAME, "db.prod.svc.cluster.local");
	add_name_rr(b, "gone.prod.svc.cluster.local", DNS_T_CNAME, "nothing.prod.svc.cluster.local");
	add_name_rr(b, "legacy.corp.internal", DNS_T_CNAME, "db.prod.svc.cluster.local");
	add_name_rr(b, "out.prod.svc.cluster.local", DNS_T_CNAME, "example.org");
	add(b, "_mysql._tcp.db.prod.svc.cluster.local", DNS_T_SRV, srv, srv_len);
	add(b, "host.corp.internal", DNS_T_A, "\xc0\x00\x02\x01", 4);
	struct zone_table *t = zone_builder_finish(b);
	assert_non_null(t);
	return t;
}

static enum zone_result ask(const struct zone_table *t, const char *name,
			    uint16_t qtype, struct reply *r)
{
	struct dns_query q;
	struct dns_writer w;

	make_query(&q, name, qtype);
	dns_response_begin(&w, r->buf, sizeof r->buf, &q, DNS_R_NOERROR);
	enum zone_result res = zone_answer(t, &q, &w);
	r->len = dns_response_finish(&w, 1232);
	read_reply(r);
	return res;
}

static int rcode(const struct reply *r)
{
	return r->v->flags & 0xf;
}

static void test_exact_match_answers_every_record_once(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	assert_int_equal(ask(t, "db.prod.svc.cluster.local", DNS_T_A, &r), ZONE_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_true(r.v->flags & DNS_F_AA);
	assert_int_equal(r.v->an, 2); /* the duplicate was dropped */
	assert_int_equal(r.v->rr[0].type, DNS_T_A);
	assert_int_equal(r.v->rr[0].ttl, 30);
	assert_memory_equal(reply_rdata(&r, 0), "\x0a\x00\x00\x05", 4);
	assert_memory_equal(reply_rdata(&r, 1), "\x0a\x00\x00\x06", 4);
	zone_table_free(t);
}

static void test_unknown_name_in_zone_is_nxdomain_with_soa(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	assert_int_equal(ask(t, "nope.prod.svc.cluster.local", DNS_T_A, &r), ZONE_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	assert_int_equal(r.v->an, 0);
	assert_int_equal(r.v->ns, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_SOA);
	assert_name_equal(r.v->rr[0].owner, "cluster.local.");
	zone_table_free(t);
}

static void test_existing_name_other_type_is_nodata(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	ask(t, "db.prod.svc.cluster.local", DNS_T_TXT, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 0);
	assert_int_equal(r.v->ns, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_SOA);
	zone_table_free(t);
}

static void test_empty_non_terminal_is_nodata_not_nxdomain(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	ask(t, "svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->ns, 1);
	ask(t, "prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	ask(t, "_tcp.db.prod.svc.cluster.local", DNS_T_SRV, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(zone_table_size(t), 8); /* apex + 7 owners, ENTs not counted */
	zone_table_free(t);
}

static void test_apex_has_soa_and_ns(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	ask(t, "cluster.local", DNS_T_SOA, &r);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_SOA);
	/* mname ns.dns.cluster.local, rname hostmaster.cluster.local, minimum = ttl */
	char name[MSG_TEXT_MAX];
	size_t pos = r.v->rr[0].rdoff;
	read_name(r.buf, r.len, &pos, name, NULL);
	assert_name_equal(name, "ns.dns.cluster.local.");
	read_name(r.buf, r.len, &pos, name, NULL);
	assert_name_equal(name, "hostmaster.cluster.local.");
	assert_int_equal(rd16(r.buf + pos + 18), 5);
	ask(t, "cluster.local", DNS_T_NS, &r);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_NS);
	zone_table_free(t);
}

static void test_cname_chain_is_followed_locally(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	ask(t, "www.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 3);
	assert_int_equal(r.v->rr[0].type, DNS_T_CNAME);
	assert_int_equal(r.v->rr[1].type, DNS_T_A);
	assert_name_equal(r.v->rr[1].owner, "db.prod.svc.cluster.local.");
	/* Asking for the CNAME itself gives just the CNAME. */
	ask(t, "www.prod.svc.cluster.local", DNS_T_CNAME, &r);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_CNAME);
	zone_table_free(t);
}

static void test_cname_to_missing_local_name_is_nxdomain(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	ask(t, "gone.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN); /* RFC 6604 */
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_CNAME);
	assert_int_equal(r.v->ns, 1);
	zone_table_free(t);
}

static void test_cname_leaving_local_data_stops_at_the_cname(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	ask(t, "out.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->ns, 0);
	zone_table_free(t);
}

static void test_names_outside_zones_answer_exact_matches_only(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	ask(t, "legacy.corp.internal", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 3); /* CNAME into the cluster zone, then 2 A */
	ask(t, "host.corp.internal", DNS_T_AAAA, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR); /* NODATA, no SOA to give */
	assert_int_equal(r.v->an + r.v->ns, 0);
	assert_int_equal(ask(t, "other.corp.internal", DNS_T_A, &r), ZONE_NOT_LOCAL);
	assert_int_equal(ask(t, "corp.internal", DNS_T_A, &r), ZONE_NOT_LOCAL);
	assert_int_equal(ask(t, "example.org", DNS_T_A, &r), ZONE_NOT_LOCAL);
	assert_int_equal(ask(t, "xcluster.local", DNS_T_A, &r), ZONE_NOT_LOCAL);
	zone_table_free(t);
}

/* A name whose last bytes spell the apex from inside a label ("a\7cluster"
 * then "local") is not under it: not ours, not NXDOMAIN. */
static void test_apex_bytes_inside_a_label_are_not_the_zone(void **state)
{
	static const uint8_t name[] = "\x09" "a\x07" "cluster\x05" "local";
	struct zone_table *t = demo_table();
	struct dns_query q;
	struct dns_writer w;
	struct reply r;
	(void)state;

	make_query(&q, "x.cluster.local", DNS_T_A);
	dns_query_set_name(&q, name);
	assert_int_equal(q.qname_len, 17);
	dns_response_begin(&w, r.buf, sizeof r.buf, &q, DNS_R_NOERROR);
	assert_int_equal(zone_answer(t, &q, &w), ZONE_NOT_LOCAL);
	zone_table_free(t);
}

static void test_srv_adds_target_addresses(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	ask(t, "_mysql._tcp.db.prod.svc.cluster.local", DNS_T_SRV, &r);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_SRV);
	assert_int_equal(rd16(reply_rdata(&r, 0) + 4), 3306);
	assert_int_equal(r.v->ar, 3); /* two A and one AAAA */
	assert_int_equal(r.v->rr[1].type, DNS_T_A);
	assert_int_equal(r.v->rr[3].type, DNS_T_AAAA);
	zone_table_free(t);
}

static void test_any_is_answered_with_one_rrset(void **state)
{
	struct zone_table *t = demo_table();
	struct reply r;
	(void)state;

	ask(t, "db.prod.svc.cluster.local", DNS_T_ANY, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 2);
	assert_int_equal(r.v->rr[0].type, r.v->rr[1].type);
	zone_table_free(t);
}

static void test_cname_conflicts_are_rejected(void **state)
{
	struct zone_builder *b = zone_builder_new();
	const uint8_t *target = wire("x.example");
	const char *why = NULL;
	(void)state;

	add(b, "a.example", DNS_T_A, "\x01\x02\x03\x04", 4);
	assert_int_equal(zone_builder_add_rr(b, wire("a.example"), DNS_T_CNAME, 5, target,
					     (uint16_t)dns_name_len(target), &why), -1);
	assert_non_null(strstr(why, "CNAME"));
	add_name_rr(b, "c.example", DNS_T_CNAME, "x.example");
	assert_int_equal(zone_builder_add_rr(b, wire("c.example"), DNS_T_A, 5,
					     (const uint8_t *)"\1\2\3\4", 4, &why), -1);
	assert_int_equal(zone_builder_add_rr(b, wire("c.example"), DNS_T_CNAME, 5,
					     wire("y.example"), 11, &why), -1);
	zone_builder_free(b);
}

static void test_malformed_rdata_is_rejected(void **state)
{
	struct zone_builder *b = zone_builder_new();
	const char *why = NULL;
	(void)state;

	assert_int_equal(zone_builder_add_rr(b, wire("a.example"), DNS_T_A, 5,
					     (const uint8_t *)"\1\2\3", 3, &why), -1);
	assert_int_equal(zone_builder_add_rr(b, wire("a.example"), DNS_T_CNAME, 5,
					     (const uint8_t *)"\3abc", 4, &why), -1);
	assert_int_equal(zone_builder_add_rr(b, wire("a.example"), DNS_T_TXT, 5,
					     (const uint8_t *)"\5ab", 3, &why), -1);
	assert_int_equal(zone_builder_add_rr(b, wire("a.example"), DNS_T_ANY, 5,
					     (const uint8_t *)"", 0, &why), -1);
	zone_builder_free(b);
}

static void test_many_names_survive_table_growth(void **state)
{
	struct zone_builder *b = zone_builder_new();
	const char *why = NULL;
	char name[64];
	struct reply r;
	(void)state;

	assert_int_equal(zone_builder_add_authority(b, wire("cluster.local"), 5, 1, &why), 0);
	for (int i = 0; i < 5000; i++) {
		uint8_t ip[4] = {10, (uint8_t)(i >> 16), (uint8_t)(i >> 8), (uint8_t)i};
		snprintf(name, sizeof name, "s%d.ns%d.svc.cluster.local", i, i % 7);
		add(b, name, DNS_T_A, ip, 4);
	}
	struct zone_table *t = zone_builder_finish(b);
	assert_non_null(t);
	assert_int_equal(zone_table_size(t), 5001);
	ask(t, "s4321.ns2.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(r.v->an, 1);
	assert_memory_equal(reply_rdata(&r, 0), "\x0a\x00\x10\xe1", 4);
	ask(t, "ns3.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	ask(t, "ns9.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	zone_table_free(t);
}

/* ---- precompiled replies ------------------------------------------------- */

/* name with every other letter upper-cased, as a client using DNS 0x20 asks. */
static void mixed_case(struct dns_query *q)
{
	for (size_t i = 0; i < q->qname_len; i++)
		if (i % 2 && q->qname_orig[i] >= 'a' && q->qname_orig[i] <= 'z')
			q->qname_orig[i] = (uint8_t)(q->qname_orig[i] - 32);
}

/* The finished reply to q from zone_answer and from the rules alone must be the same bytes. */
static void assert_precompiled_matches_rules(const struct zone_table *t, const char *name,
					     uint16_t qtype, bool edns, size_t limit)
{
	static struct reply a, b;
	struct dns_query q;
	struct dns_writer wa, wb;

	make_query(&q, name, qtype);
	mixed_case(&q);
	q.has_edns = edns;
	q.edns_udp_size = 1232;
	dns_response_begin(&wa, a.buf, limit, &q, DNS_R_NOERROR);
	dns_response_begin(&wb, b.buf, limit, &q, DNS_R_NOERROR);
	assert_int_equal(zone_answer(t, &q, &wa), zone_answer_by_rules(t, &q, &wb));
	a.len = dns_response_finish(&wa, 1232);
	b.len = dns_response_finish(&wb, 1232);
	if (a.len != b.len || memcmp(a.buf, b.buf, a.len) != 0)
		fail_msg("%s type %u limit %zu: precompiled reply differs from the rules' "
			 "(%zu vs %zu bytes)", name, qtype, limit, a.len, b.len);
}

/* Is a reply precompiled for (name, qtype)? */
static bool has_precompiled(const struct zone_table *t, const char *name, uint16_t qtype)
{
	const uint8_t *n = wire(name);
	const struct zone_node *node = zone_find(t, n, dns_name_len(n));

	if (!node || !node->replies)
		return false;
	for (const struct zone_reply *r = node->replies; r->qtype;
	     r = (const void *)((const uint8_t *)r + sizeof *r + ((r->len + 1u) & ~1u)))
		if (r->qtype == qtype)
			return true;
	return false;
}

static void test_precompiled_replies_are_what_the_rules_write(void **state)
{
	static const char *const names[] = {
		"db.prod.svc.cluster.local", "www.prod.svc.cluster.local",
		"gone.prod.svc.cluster.local", "legacy.corp.internal", "out.prod.svc.cluster.local",
		"_mysql._tcp.db.prod.svc.cluster.local", "host.corp.internal", "cluster.local",
		"svc.cluster.local", "prod.svc.cluster.local", "nothing.prod.svc.cluster.local",
		"dns.cluster.local", "x.dns.cluster.local", "hostmaster.cluster.local",
		"example.org",
	};
	static const uint16_t qtypes[] = {DNS_T_A,   DNS_T_AAAA, DNS_T_SRV, DNS_T_CNAME,
					  DNS_T_TXT, DNS_T_MX,   DNS_T_SOA, DNS_T_NS,
					  DNS_T_PTR, DNS_T_ANY,  99};
	struct zone_table *t = demo_table();
	(void)state;

	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		for (size_t k = 0; k < sizeof qtypes / sizeof *qtypes; k++)
			for (int edns = 0; edns < 2; edns++)
				for (size_t limit = 40; limit <= 512; limit += 8)
					assert_precompiled_matches_rules(t, names[i], qtypes[k],
									 edns, limit);
	/* the replies the comparison above went through (a few of them) */
	assert_true(has_precompiled(t, "db.prod.svc.cluster.local", DNS_T_A));
	assert_true(has_precompiled(t, "db.prod.svc.cluster.local", DNS_T_AAAA));
	assert_true(has_precompiled(t, "_mysql._tcp.db.prod.svc.cluster.local", DNS_T_SRV));
	assert_true(has_precompiled(t, "_mysql._tcp.db.prod.svc.cluster.local", DNS_T_A));
	assert_true(has_precompiled(t, "www.prod.svc.cluster.local", DNS_T_A));
	assert_true(has_precompiled(t, "gone.prod.svc.cluster.local", DNS_T_AAAA));
	assert_true(has_precompiled(t, "svc.cluster.local", DNS_T_A)); /* empty non-terminal */
	assert_true(has_precompiled(t, "cluster.local", DNS_T_SOA));
	assert_false(has_precompiled(t, "db.prod.svc.cluster.local", DNS_T_TXT));
	zone_table_free(t);
}

/*
 * A short name's answer between ZONE_REPLY_MAX bytes and that plus the
 * room a longer name would take: too long to precompile, so it is written
 * as asked and never past the precompiler's buffers (the fuzzer found the
 * overflow with 80 A records under a 17-byte name).
 */
static void test_reply_too_long_to_precompile_is_answered_by_the_rules(void **state)
{
	struct zone_builder *b = zone_builder_new();
	const char *name = "many.corp.internal";
	(void)state;

	assert_non_null(b);
	for (unsigned i = 0; i < 80; i++) {
		uint8_t a[4] = {10, 1, 0, (uint8_t)i};
		add(b, name, DNS_T_A, a, sizeof a);
	}
	struct zone_table *t = zone_builder_finish(b);
	assert_non_null(t);
	assert_false(has_precompiled(t, name, DNS_T_A)); /* 80 x 16 bytes > ZONE_REPLY_MAX */
	assert_true(has_precompiled(t, name, DNS_T_AAAA));
	assert_precompiled_matches_rules(t, name, DNS_T_A, true, 1232 + 512);
	zone_table_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exact_match_answers_every_record_once),
		cmocka_unit_test(test_unknown_name_in_zone_is_nxdomain_with_soa),
		cmocka_unit_test(test_existing_name_other_type_is_nodata),
		cmocka_unit_test(test_empty_non_terminal_is_nodata_not_nxdomain),
		cmocka_unit_test(test_apex_has_soa_and_ns),
		cmocka_unit_test(test_cname_chain_is_followed_locally),
		cmocka_unit_test(test_cname_to_missing_local_name_is_nxdomain),
		cmocka_unit_test(test_cname_leaving_local_data_stops_at_the_cname),
		cmocka_unit_test(test_names_outside_zones_answer_exact_matches_only),
		cmocka_unit_test(test_apex_bytes_inside_a_label_are_not_the_zone),
		cmocka_unit_test(test_srv_adds_target_addresses),
		cmocka_unit_test(test_any_is_answered_with_one_rrset),
		cmocka_unit_test(test_cname_conflicts_are_rejected),
		cmocka_unit_test(test_malformed_rdata_is_rejected),
		cmocka_unit_test(test_many_names_survive_table_growth),
		cmocka_unit_test(test_precompiled_replies_are_what_the_rules_write),
		cmocka_unit_test(test_reply_too_long_to_precompile_is_answered_by_the_rules),
	};
	return cmocka_run_group_tests_name("zone", tests, NULL, NULL);
}
