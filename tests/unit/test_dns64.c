/*
 * Unit tests for dns64/: RFC 6052's embedding for every prefix length (the
 * RFC's own table, section 2.4), extraction back, which queries and which
 * replies DNS64 applies to (RFC 6147 5.1.1, 5.1.2, 5.5), the synthesized
 * answer (CNAMEs kept, A made AAAA, TTL capped by the SOA or 600, the A
 * answer's rcode, AA and authority), and the in-addr.arpa name behind an
 * ip6.arpa name under the prefix. Replies are read back with msg_view.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <cmocka.h>

#include "address.h"
#include "dns/dns.h"
#include "dns64/dns64.h"
#include "reply.h"

static struct dns64_prefix prefix(const char *text, unsigned len)
{
	struct dns64_prefix p = {.len = (uint8_t)len};

	assert_int_equal(inet_pton(AF_INET6, text, p.addr), 1);
	return p;
}

static void embeds_as_rfc_6052_table(void **state)
{
	static const struct {
		const char *prefix;
		unsigned len;
		const char *want;
	} rows[] = { /* RFC 6052 section 2.4, 192.0.2.33 */
		{"2001:db8::", 32, "2001:db8:c000:221::"},
		{"2001:db8:100::", 40, "2001:db8:1c0:2:21::"},
		{"2001:db8:122::", 48, "2001:db8:122:c000:2:2100::"},
		{"2001:db8:122:300::", 56, "2001:db8:122:3c0:0:221::"},
		{"2001:db8:122:344::", 64, "2001:db8:122:344:c0:2:2100:0"},
		{"2001:db8:122:344::", 96, "2001:db8:122:344::192.0.2.33"},
		{"64:ff9b::", 96, "64:ff9b::192.0.2.33"},
	};
	const uint8_t v4[4] = {192, 0, 2, 33};

	(void)state;
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct dns64_prefix p = prefix(rows[i].prefix, rows[i].len);
		uint8_t got[16], want[16], back[4];
		dns64_embed(&p, v4, got);
		assert_int_equal(inet_pton(AF_INET6, rows[i].want, want), 1);
		assert_memory_equal(got, want, 16);
		assert_true(dns64_extract(&p, got, back));
		assert_memory_equal(back, v4, 4);
		got[0] ^= 1; /* another prefix */
		assert_false(dns64_extract(&p, got, back));
	}
	struct dns64_prefix p = prefix("2001:db8::", 64), off = {.len = 0};
	uint8_t v6[16];
	assert_int_equal(inet_pton(AF_INET6, "2001:db8::ff00:0:0:0", v6), 1);
	assert_false(dns64_extract(&p, v6, (uint8_t[4]){0})); /* the u octet is not zero */
	assert_false(dns64_extract(&off, v6, (uint8_t[4]){0}));
}

static void applies_to_aaaa_over_ipv6_unless_the_client_validates(void **state)
{
	struct dns64_prefix p = prefix("64:ff9b::", 96), off = {.len = 0};
	struct sockaddr_storage v6 = address_of("fd00::7"), v4 = address_of("10.0.0.7"),
				mapped = address_of("::ffff:10.0.0.7");
	struct dns_query q;

	(void)state;
	make_query(&q, "www.example.com", DNS_T_AAAA);
	assert_true(dns64_applies(&p, &q, &v6));
	assert_false(dns64_applies(&off, &q, &v6));
	assert_false(dns64_applies(&p, &q, &v4));      /* CoreDNS: IPv6 clients only */
	assert_false(dns64_applies(&p, &q, &mapped));
	assert_false(dns64_applies(&p, &q, NULL));
	q.edns_do = true;
	assert_true(dns64_applies(&p, &q, &v6));       /* DO alone: synthesized, no AD */
	q.flags |= DNS_F_CD;
	assert_false(dns64_applies(&p, &q, &v6));      /* RFC 6147 5.5: it validates */
	make_query(&q, "www.example.com", DNS_T_A);
	assert_false(dns64_applies(&p, &q, &v6));
	make_query(&q, "www.example.com", DNS_T_AAAA);
	q.qclass = DNS_C_CH;
	assert_false(dns64_applies(&p, &q, &v6));
}

/* A reply to q with rcode, then records: type, owner, ttl, rdata given as text. */
struct rec {
	enum dns_section sec;
	const char *owner;
	uint16_t type;
	uint32_t ttl;
	const char *data; /* an address, or a name for CNAME; SOA: its mname */
};

static size_t build(uint8_t *buf, size_t cap, const struct dns_query *q, enum dns_rcode rcode,
		    bool aa, const struct rec *recs, size_t n)
{
	struct dns_writer w;
	uint8_t rdata[512];

	dns_response_begin(&w, buf, cap, q, rcode);
	dns_response_set_aa(&w, aa);
	for (size_t i = 0; i < n; i++) {
		uint16_t len = 0;
		if (recs[i].type == DNS_T_A) {
			assert_int_equal(inet_pton(AF_INET, recs[i].data, rdata), 1);
			len = 4;
		} else if (recs[i].type == DNS_T_AAAA) {
			assert_int_equal(inet_pton(AF_INET6, recs[i].data, rdata), 1);
			len = 16;
		} else if (recs[i].type == DNS_T_CNAME) {
			len = (uint16_t)dns_name_from_text(recs[i].data, rdata);
		} else if (recs[i].type == DNS_T_SOA) {
			len = (uint16_t)dns_name_from_text(recs[i].data, rdata);
			len = (uint16_t)(len + dns_name_from_text("hostmaster.example.com",
								  rdata + len));
			memset(rdata + len, 0, 20);
			rdata[len + 19] = 60; /* minimum 60 */
			len = (uint16_t)(len + 20);
		}
		assert_true(dns_response_add_rr(&w, recs[i].sec, wire(recs[i].owner), recs[i].type,
						DNS_C_IN, recs[i].ttl, rdata, len));
	}
	size_t out = dns_response_finish(&w, 1232);
	assert_true(out > 0);
	return out;
}

static void wanted_unless_nxdomain_or_own_aaaa(void **state)
{
	struct dns_query q;
	uint8_t buf[1024];
	const struct rec soa[] = {{DNS_SEC_AUTHORITY, "example.com", DNS_T_SOA, 300,
				   "ns.example.com"}};
	const struct rec own[] = {{DNS_SEC_ANSWER, "www.example.com", DNS_T_AAAA, 60, "2001:db8::1"}};
	const struct rec chain[] = {{DNS_SEC_ANSWER, "www.example.com", DNS_T_CNAME, 60,
				     "web.example.net"}};
	const struct rec chain_aaaa[] = {
		{DNS_SEC_ANSWER, "www.example.com", DNS_T_CNAME, 60, "web.example.net"},
		{DNS_SEC_ANSWER, "web.example.net", DNS_T_AAAA, 60, "2001:db8::2"}};

	(void)state;
	make_query(&q, "www.example.com", DNS_T_AAAA);
	assert_true(dns64_wanted(buf, build(buf, sizeof buf, &q, DNS_R_NOERROR, false, soa, 1)));
	assert_false(dns64_wanted(buf, build(buf, sizeof buf, &q, DNS_R_NXDOMAIN, false, soa, 1)));
	assert_true(dns64_wanted(buf, build(buf, sizeof buf, &q, DNS_R_SERVFAIL, false, NULL, 0)));
	assert_false(dns64_wanted(buf, build(buf, sizeof buf, &q, DNS_R_NOERROR, false, own, 1)));
	assert_true(dns64_wanted(buf, build(buf, sizeof buf, &q, DNS_R_NOERROR, false, chain, 1)));
	assert_false(dns64_wanted(buf, build(buf, sizeof buf, &q, DNS_R_NOERROR, false,
					     chain_aaaa, 2)));
	assert_false(dns64_wanted(buf, 5)); /* a runt */
}

static void synthesizes_from_the_a_answer(void **state)
{
	struct dns64_prefix p = prefix("64:ff9b::", 96);
	struct dns_query qa, q6;
	static uint8_t a[1024], aaaa[1024], out[1024];
	const struct rec nodata[] = {{DNS_SEC_AUTHORITY, "example.net", DNS_T_SOA, 120,
				      "ns.example.net"}};
	const struct rec answer[] = {
		{DNS_SEC_ANSWER, "www.example.com", DNS_T_CNAME, 300, "web.example.net"},
		{DNS_SEC_ANSWER, "web.example.net", DNS_T_A, 60, "192.0.2.33"},
		{DNS_SEC_ANSWER, "web.example.net", DNS_T_A, 900, "198.51.100.7"},
		{DNS_SEC_AUTHORITY, "example.net", DNS_T_SOA, 300, "ns.example.net"},
	};
	struct dns_writer w;
	struct reply r;

	(void)state;
	make_query(&qa, "www.example.com", DNS_T_A);
	make_query(&q6, "www.example.com", DNS_T_AAAA);
	size_t a_len = build(a, sizeof a, &qa, DNS_R_NOERROR, true, answer, 4);
	size_t aaaa_len = build(aaaa, sizeof aaaa, &q6, DNS_R_NOERROR, true, nodata, 1);
	dns_response_begin(&w, out, sizeof out, &q6, DNS_R_NOERROR);
	assert_true(dns64_synthesize(&p, aaaa, aaaa_len, a, a_len, &w));
	r.len = dns_response_finish(&w, 1232);
	memcpy(r.buf, out, r.len);
	read_reply(&r);
	assert_int_equal(r.v->qtype, DNS_T_AAAA);
	assert_int_equal(r.v->flags & 0xf, DNS_R_NOERROR);
	assert_true(r.v->flags & DNS_F_AA);
	assert_false(r.v->flags & DNS_F_AD);
	assert_int_equal(r.v->an, 3);
	assert_int_equal(r.v->ns, 1);
	assert_string_equal(r.v->rr[0].owner, "www.example.com.");
	assert_int_equal(r.v->rr[0].type, DNS_T_CNAME);       /* kept, TTL and all */
	assert_int_equal(r.v->rr[0].ttl, 300);
	assert_string_equal(r.v->rr[0].target, "web.example.net.");
	uint8_t want[16];
	assert_int_equal(r.v->rr[1].type, DNS_T_AAAA);
	assert_string_equal(r.v->rr[1].owner, "web.example.net.");
	assert_int_equal(inet_pton(AF_INET6, "64:ff9b::192.0.2.33", want), 1);
	assert_memory_equal(reply_rdata(&r, 1), want, 16);
	assert_int_equal(r.v->rr[1].ttl, 60);                  /* the A record's, under the SOA's */
	assert_int_equal(inet_pton(AF_INET6, "64:ff9b::198.51.100.7", want), 1);
	assert_memory_equal(reply_rdata(&r, 2), want, 16);
	assert_int_equal(r.v->rr[2].ttl, 120);                 /* the AAAA answer's SOA TTL */
	assert_int_equal(r.v->rr[3].type, DNS_T_SOA);          /* the A answer's authority */

	/* without an SOA in the AAAA answer: 600 at most (RFC 6147 5.1.7) */
	aaaa_len = build(aaaa, sizeof aaaa, &q6, DNS_R_SERVFAIL, false, NULL, 0);
	dns_response_begin(&w, out, sizeof out, &q6, DNS_R_NOERROR);
	assert_true(dns64_synthesize(&p, aaaa, aaaa_len, a, a_len, &w));
	r.len = dns_response_finish(&w, 1232);
	memcpy(r.buf, out, r.len);
	read_reply(&r);
	assert_int_equal(r.v->rr[1].ttl, 60);
	assert_int_equal(r.v->rr[2].ttl, 600);
	assert_int_equal(r.v->flags & 0xf, DNS_R_NOERROR);    /* the A answer's rcode */

	/* nothing to synthesize from: the writer is left alone */
	a_len = build(a, sizeof a, &qa, DNS_R_NOERROR, false, nodata, 1);
	dns_response_begin(&w, out, sizeof out, &q6, DNS_R_NOERROR);
	assert_false(dns64_synthesize(&p, aaaa, aaaa_len, a, a_len, &w));
	assert_int_equal(w.count[DNS_SEC_ANSWER] + w.count[DNS_SEC_AUTHORITY], 0);

	/* a client's limit that the answer does not fit: truncated, as any reply */
	a_len = build(a, sizeof a, &qa, DNS_R_NOERROR, true, answer, 4);
	dns_response_begin(&w, out, 80, &q6, DNS_R_NOERROR);
	assert_true(dns64_synthesize(&p, aaaa, aaaa_len, a, a_len, &w));
	r.len = dns_response_finish(&w, 1232);
	memcpy(r.buf, out, r.len);
	read_reply(&r);
	assert_true(r.v->flags & 0x0200); /* TC */
	assert_int_equal(r.v->an, 0);
}

static void ptr_names_under_the_prefix_map_to_in_addr_arpa(void **state)
{
	struct dns64_prefix p96 = prefix("64:ff9b::", 96), p64 = prefix("2001:db8:122:344::", 64);
	uint8_t out[DNS_MAX_NAME];
	char text[1024];
	size_t n;

	(void)state;
	/* 64:ff9b::c000:221 */
	n = dns64_ptr_target(&p96, wire("1.2.2.0.0.0.0.c.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0."
					 "b.9.f.f.4.6.0.0.ip6.arpa"), out);
	assert_true(n > 0);
	assert_int_equal(dns_name_to_text(out, text, sizeof text) > 0, 1);
	assert_string_equal(text, "33.2.0.192.in-addr.arpa.");
	/* 2001:db8:122:344:c0:2:2100:0 under the /64 */
	n = dns64_ptr_target(&p64, wire("0.0.0.0.0.0.1.2.2.0.0.0.0.c.0.0.4.4.3.0.2.2.1.0."
					 "8.b.d.0.1.0.0.2.ip6.arpa"), out);
	assert_true(n > 0);
	dns_name_to_text(out, text, sizeof text);
	assert_string_equal(text, "33.2.0.192.in-addr.arpa.");
	/* outside the prefix, too short, not ip6.arpa */
	assert_int_equal(dns64_ptr_target(&p96, wire("1.2.2.0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0."
						    "0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa"), out), 0);
	assert_int_equal(dns64_ptr_target(&p96, wire("b.9.f.f.4.6.0.0.ip6.arpa"), out), 0);
	assert_int_equal(dns64_ptr_target(&p96, wire("33.2.0.192.in-addr.arpa"), out), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(embeds_as_rfc_6052_table),
		cmocka_unit_test(applies_to_aaaa_over_ipv6_unless_the_client_validates),
		cmocka_unit_test(wanted_unless_nxdomain_or_own_aaaa),
		cmocka_unit_test(synthesizes_from_the_a_answer),
		cmocka_unit_test(ptr_names_under_the_prefix_map_to_in_addr_arpa),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
