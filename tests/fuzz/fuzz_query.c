/*
 * libFuzzer target for the DNS codec: parse the input as a query, then
 * answer it the way the server would (records with and without
 * compression, several size limits, error replies), and read names out of
 * the input at assorted offsets, and compact it as if it were an upstream
 * reply. ASan/UBSan catch memory errors; the
 * checks below catch the codec contradicting itself, e.g. writing a reply
 * its own parser cannot walk.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dns/dns.h"

#define CHECK(cond) \
	do { \
		if (!(cond)) \
			abort(); \
	} while (0)

static uint8_t reply[DNS_MAX_MESSAGE];
static uint8_t reparse_buf[DNS_MAX_MESSAGE];

/* "\3cdn" + name, or name itself when that would be too long. */
static size_t prefixed_name(const uint8_t *name, size_t name_len, uint8_t *out)
{
	if (name_len + 4 > DNS_MAX_NAME) {
		memcpy(out, name, name_len);
		return name_len;
	}
	memcpy(out, "\3cdn", 4);
	memcpy(out + 4, name, name_len);
	return name_len + 4;
}

/* A reply we wrote must be a message our own parser accepts once QR is
 * cleared, with the same question. */
static void check_reply_parses(size_t len, const struct dns_query *q)
{
	struct dns_query back;

	memcpy(reparse_buf, reply, len);
	reparse_buf[2] &= 0x7F;
	CHECK(dns_parse_query(reparse_buf, len, &back) == DNS_PARSE_OK);
	CHECK(back.qname_len == q->qname_len);
	CHECK(memcmp(back.qname, q->qname, q->qname_len) == 0);
	CHECK(back.has_edns == q->has_edns);
}

static void answer(const struct dns_query *q, size_t limit,
		   const uint8_t *data, size_t size)
{
	static const uint8_t addr[4] = {192, 0, 2, 1};
	uint8_t target[DNS_MAX_NAME];
	uint8_t srv[6 + DNS_MAX_NAME] = {0, 1, 0, 2, 0, 53};
	uint8_t soa[2 * DNS_MAX_NAME + 20] = {0};
	size_t target_len = prefixed_name(q->qname, q->qname_len, target);
	struct dns_writer w;

	memcpy(srv + 6, target, target_len);
	memcpy(soa, target, target_len);
	memcpy(soa + target_len, q->qname, q->qname_len);
	size_t soa_len = target_len + q->qname_len + 20;
	/* fuzzer-chosen rdata, fed to types whose names we compress */
	uint16_t raw_len = (uint16_t)(size > 300 ? 300 : size);

	dns_response_begin(&w, reply, limit, q, DNS_R_NOERROR);
	dns_response_set_aa(&w, size & 1);
	if (q->cookie_len && (size & 2)) {
		static const uint8_t secret[16] = {7};
		uint8_t cookie[DNS_SERVER_COOKIE_LEN];
		dns_server_cookie(cookie, q->cookie, secret, (uint32_t)size, data,
				  size < 16 ? size : 16);
		dns_response_set_server_cookie(&w, cookie);
	}
	dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_CNAME, DNS_C_IN, 60,
			    target, (uint16_t)target_len);
	dns_response_add_rr(&w, DNS_SEC_ANSWER, target, DNS_T_A, DNS_C_IN, 60, addr, 4);
	dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_SRV, DNS_C_IN, 60,
			    srv, (uint16_t)(6 + target_len));
	dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_MX, DNS_C_IN, 60,
			    data, raw_len);
	dns_response_add_rr(&w, DNS_SEC_AUTHORITY, q->qname, DNS_T_SOA, DNS_C_IN,
			    60, soa, (uint16_t)soa_len);
	dns_response_add_rr(&w, DNS_SEC_AUTHORITY, q->qname, DNS_T_NS, DNS_C_IN,
			    60, data, raw_len);
	dns_response_add_rr(&w, DNS_SEC_ADDITIONAL, target, DNS_T_A, DNS_C_IN, 60,
			    addr, 4);
	dns_response_add_rr(&w, DNS_SEC_ADDITIONAL, q->qname, DNS_T_TXT, DNS_C_IN,
			    60, data, (uint16_t)size);
	if (size % 3 == 0)
		dns_response_set_rcode(&w, DNS_R_NXDOMAIN);
	bool truncated = w.truncated;

	size_t len = dns_response_finish(&w, q->edns_udp_size);
	CHECK(len > DNS_HEADER_LEN && len <= limit);
	CHECK(((reply[2] & 0x02) != 0) == truncated);
	check_reply_parses(len, q);
}

static void badvers(const struct dns_query *q)
{
	struct dns_writer w;

	dns_response_begin(&w, reply, DNS_MAX_UDP_PLAIN, q, DNS_R_BADVERS);
	size_t len = dns_response_finish(&w, 1232);
	CHECK(len > DNS_HEADER_LEN && len <= DNS_MAX_UDP_PLAIN);
}

static void error_replies(const uint8_t *data, size_t size,
			  const struct dns_query *q)
{
	static const enum dns_rcode rcodes[] = {DNS_R_FORMERR, DNS_R_NOTIMP};

	for (size_t i = 0; i < 2; i++) {
		size_t len = dns_error_reply(data, size, q, rcodes[i], reply,
					     sizeof(reply));
		CHECK(len == 0 || len >= DNS_HEADER_LEN);
		len = dns_error_reply(data, size, q, rcodes[i], reply, 20);
		CHECK(len <= 20);
	}
}

static void names_at_offsets(const uint8_t *data, size_t size)
{
	const size_t offsets[] = {DNS_HEADER_LEN, size / 2, size > 2 ? size - 2 : 0,
				  size > 40 ? 40 : 0};
	uint8_t name[DNS_MAX_NAME], again[DNS_MAX_NAME];
	char text[1024];

	for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
		size_t pos = offsets[i];
		int n = dns_name_read(data, size, &pos, name, true);
		if (n < 0)
			continue;
		CHECK(pos <= size && (size_t)n == dns_name_len(name));
		int tlen = dns_name_to_text(name, text, sizeof(text));
		CHECK(tlen > 0);
		/* without escapes, text goes back to the very same wire name */
		if (!strchr(text, '\\')) {
			CHECK(dns_name_from_text(text, again) == n);
			CHECK(memcmp(again, name, (size_t)n) == 0);
		}
		CHECK(dns_name_is_subdomain(name, name + name[0] + (n > 1 ? 1 : 0)));
	}
}

static void text_to_name(const uint8_t *data, size_t size)
{
	char text[300];
	uint8_t name[DNS_MAX_NAME];
	size_t n = size < sizeof(text) - 1 ? size : sizeof(text) - 1;

	memcpy(text, data, n);
	text[n] = '\0';
	int len = dns_name_from_text(text, name);
	if (len > 0)
		CHECK((size_t)len == dns_name_len(name));
}

/* Compacting any message as if it were the upstream's reply to q stays in
 * bounds, and its output compacts again to the same length (the names
 * are already ours; only letter case inside pointers may differ). */
static void compact_twice(const uint8_t *data, size_t size, const struct dns_query *q)
{
	for (int drop = 0; drop <= 1; drop++) {
		size_t n = dns_message_compact(data, size, q, drop, reply, sizeof(reply));
		if (n == 0)
			continue;
		CHECK(n >= DNS_HEADER_LEN + q->qname_len + 4 && n <= sizeof(reply));
		CHECK(dns_message_compact(reply, n, q, drop, reparse_buf,
					  sizeof(reparse_buf)) == n);
	}
}

/* What RRL keys a message by, read as if it were one of our replies: any
 * name it copies is a whole name, and errors carry none. */
static void reply_key(const uint8_t *data, size_t size)
{
	struct dns_reply_key k;

	dns_reply_key(data, size, &k);
	CHECK(k.name_len <= DNS_MAX_NAME);
	CHECK(k.kind != DNS_REPLY_ERROR || (k.name_len == 0 && k.type == 0));
	CHECK(k.name_len == 0 || dns_name_len(k.name) == k.name_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dns_query q;
	enum dns_parse_result r = dns_parse_query(data, size, &q);

	switch (r) {
	case DNS_PARSE_OK:
		compact_twice(data, size, &q);
		answer(&q, DNS_MAX_UDP_PLAIN, data, size);
		answer(&q, 1232, data, size);
		answer(&q, DNS_MAX_MESSAGE, data, size);
		break;
	case DNS_PARSE_BADVERS:
		badvers(&q);
		break;
	case DNS_PARSE_FORMERR:
	case DNS_PARSE_NOTIMP:
		error_replies(data, size, &q);
		break;
	case DNS_PARSE_DROP:
		CHECK(dns_error_reply(data, size, NULL, DNS_R_FORMERR, reply,
				      sizeof(reply)) == 0);
		break;
	}
	names_at_offsets(data, size);
	text_to_name(data, size);
	reply_key(data, size);
	return 0;
}
