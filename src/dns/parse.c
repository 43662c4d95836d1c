/*
 * dns/parse — dns_parse_query: header checks, the one question, a bounds-
 * checked walk over every record that follows, and the EDNS0 OPT record
 * (payload size, version, DO, COOKIE). Deciding what to do with the query
 * (AXFR, classes, ...) is the query layer's job, not this file's.
 */
#include "dns/dns.h"
#include "dns/wire.h"

#include <string.h>

#define RR_FIXED_LEN 10 /* type, class, TTL, rdlength */

/* Only the fields the rest of the parser relies on being zero; the name
 * buffers are left alone because clearing 510 bytes per query is waste. */
static void reset_query(struct dns_query *q, const uint8_t *pkt)
{
	q->id = dns_get16(pkt);
	q->flags = dns_get16(pkt + 2);
	q->question_ok = false;
	q->qtype = 0;
	q->qclass = 0;
	q->qname_len = 0;
	q->qname_labels = 0;
	q->has_edns = false;
	q->edns_version = 0;
	q->edns_do = false;
	q->edns_udp_size = 0;
	q->cookie_len = 0;
}

static uint8_t count_labels(const uint8_t *name)
{
	uint8_t labels = 0;

	for (size_t pos = 0; name[pos] != 0; pos += 1 + name[pos])
		labels++;
	return labels;
}

/*
 * The question's name into q->qname_orig as the client wrote it, counting
 * its labels; its wire length, or -1. The walk touches only the length
 * bytes and the name is then copied whole: this runs for every query, and
 * dns_name_read's byte-by-byte copy was a sixth of a query's instructions.
 * A compressed question (legal, but its pointer can only lead back into the
 * header, and no resolver sends one) takes dns_name_read, which follows it.
 */
static int read_question_name(const uint8_t *pkt, size_t len, size_t *pos,
			      struct dns_query *q)
{
	size_t start = *pos, cur = start;
	unsigned labels = 0;

	for (;;) {
		if (cur >= len)
			return -1;
		uint8_t b = pkt[cur];
		if (b == 0)
			break;
		if (b > DNS_MAX_LABEL) {
			if ((b & 0xC0) != 0xC0)
				return -1; /* 0x40 extended and 0x80 reserved label types */
			int n = dns_name_read(pkt, len, pos, q->qname_orig, false);
			if (n > 0)
				q->qname_labels = count_labels(q->qname_orig);
			return n;
		}
		cur += 1u + b;
		labels++;
		/* the root label still to come must fit too */
		if (cur - start + 1 > DNS_MAX_NAME)
			return -1;
	}
	size_t n = cur + 1 - start;
	memcpy(q->qname_orig, pkt + start, n);
	q->qname_labels = (uint8_t)labels;
	*pos = cur + 1;
	return (int)n;
}

static bool parse_question(const uint8_t *pkt, size_t len, size_t *pos,
			   struct dns_query *q)
{
	int name_len = read_question_name(pkt, len, pos, q);

	if (name_len < 0 || *pos + 4 > len)
		return false;
	dns_name_copy_lower(q->qname, q->qname_orig, (size_t)name_len);
	q->qname_len = (uint16_t)name_len;
	q->qtype = dns_get16(pkt + *pos);
	q->qclass = dns_get16(pkt + *pos + 2);
	*pos += 4;
	q->question_ok = true;
	return true;
}

/* RFC 7873 5.2.2: a client cookie alone is 8 bytes, with a server cookie
 * 16..40; anything else is malformed and earns FORMERR. */
static bool cookie_length_ok(uint16_t len)
{
	return len == 8 || (len >= 16 && len <= DNS_COOKIE_MAX);
}

static bool parse_edns_options(const uint8_t *opt, size_t optlen,
			       struct dns_query *q)
{
	size_t pos = 0;

	while (pos < optlen) {
		if (optlen - pos < 4)
			return false;
		uint16_t code = dns_get16(opt + pos);
		uint16_t len = dns_get16(opt + pos + 2);
		pos += 4;
		if (len > optlen - pos)
			return false;
		if (code == DNS_EDNS_OPT_COOKIE) {
			if (!cookie_length_ok(len))
				return false;
			memcpy(q->cookie, opt + pos, len);
			q->cookie_len = (uint8_t)len;
		}
		pos += len;
	}
	return true;
}

/* rr points at the fixed part (type..rdlength) of an OPT record. */
static enum dns_parse_result parse_opt(const uint8_t *rr, struct dns_query *q)
{
	uint32_t ttl = dns_get32(rr + 4);
	uint16_t rdlen = dns_get16(rr + 8);

	if (q->has_edns)
		return DNS_PARSE_FORMERR; /* RFC 6891 6.1.1: at most one OPT */
	q->has_edns = true;
	q->edns_udp_size = dns_get16(rr + 2);
	q->edns_version = (uint8_t)(ttl >> 16);
	q->edns_do = (ttl & DNS_EDNS_DO) != 0;
	/* Option syntax belongs to the EDNS version; we only know version 0. */
	if (q->edns_version > 0)
		return DNS_PARSE_BADVERS;
	if (!parse_edns_options(rr + RR_FIXED_LEN, rdlen, q))
		return DNS_PARSE_FORMERR;
	return DNS_PARSE_OK;
}

/*
 * Walk one record at *pos. Returns OK, FORMERR, or BADVERS for an OPT of a
 * version we do not speak (the caller keeps walking so a structurally broken
 * packet still gets FORMERR).
 */
static enum dns_parse_result parse_record(const uint8_t *pkt, size_t len,
					  size_t *pos, enum dns_section section,
					  struct dns_query *q)
{
	uint8_t owner[DNS_MAX_NAME];
	int owner_len = dns_name_read(pkt, len, pos, owner, false);

	if (owner_len < 0 || len - *pos < RR_FIXED_LEN)
		return DNS_PARSE_FORMERR;
	const uint8_t *rr = pkt + *pos;
	uint16_t rdlen = dns_get16(rr + 8);
	if (len - *pos - RR_FIXED_LEN < rdlen)
		return DNS_PARSE_FORMERR;
	*pos += RR_FIXED_LEN + rdlen;

	if (dns_get16(rr) != DNS_T_OPT)
		return DNS_PARSE_OK;
	if (section != DNS_SEC_ADDITIONAL || owner_len != 1)
		return DNS_PARSE_FORMERR; /* RFC 6891 6.1.1: root-owned, additional only */
	return parse_opt(rr, q);
}

static enum dns_parse_result parse_records(const uint8_t *pkt, size_t len,
					   size_t pos, struct dns_query *q)
{
	enum dns_parse_result verdict = DNS_PARSE_OK;

	for (int section = DNS_SEC_ANSWER; section <= DNS_SEC_ADDITIONAL; section++) {
		uint16_t count = dns_get16(pkt + 6 + 2 * section);
		for (uint16_t i = 0; i < count; i++) {
			enum dns_parse_result r =
				parse_record(pkt, len, &pos, (enum dns_section)section, q);
			if (r == DNS_PARSE_FORMERR)
				return r;
			if (r != DNS_PARSE_OK)
				verdict = r;
		}
	}
	/* Bytes after the last record are ignored rather than refused: some
	 * middleboxes pad datagrams, and nothing we answer depends on them. */
	return verdict;
}

enum dns_parse_result dns_parse_query(const uint8_t *pkt, size_t len,
				      struct dns_query *q)
{
	if (len < DNS_HEADER_LEN)
		return DNS_PARSE_DROP;
	reset_query(q, pkt);
	if (q->flags & DNS_F_QR)
		return DNS_PARSE_DROP; /* answering responses invites reflection loops */

	uint16_t qdcount = dns_get16(pkt + 4);
	size_t pos = DNS_HEADER_LEN;

	if (DNS_OPCODE(q->flags) != DNS_OP_QUERY) {
		/* Best effort, only so the NOTIMP reply can echo the question. */
		if (qdcount == 1)
			parse_question(pkt, len, &pos, q);
		return DNS_PARSE_NOTIMP;
	}
	if (qdcount != 1 || !parse_question(pkt, len, &pos, q))
		return DNS_PARSE_FORMERR;
	return parse_records(pkt, len, pos, q);
}
