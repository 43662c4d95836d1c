/*
 * dns64/dns64.c — see dns64.h.
 *
 * Messages are read record by record with names expanded (dns_rr_read) and
 * written again through the caller's dns_writer, which compresses them its
 * own way: an A record's 4 bytes of rdata become 16, so the original
 * message's compression pointers would not survive a copy.
 */
#include "dns64/dns64.h"

#include "dns/wire.h"

#include <netinet/in.h>
#include <string.h>

#define U_OCTET 8 /* RFC 6052: bits 64-71 of the address are always zero */

/* The byte positions of the four IPv4 bytes under a prefix of len bits. */
static void v4_positions(unsigned len, unsigned pos[4])
{
	unsigned at = len / 8;

	for (int i = 0; i < 4; i++, at++) {
		if (at == U_OCTET)
			at++;
		pos[i] = at;
	}
}

void dns64_embed(const struct dns64_prefix *p, const uint8_t v4[4], uint8_t out[16])
{
	unsigned pos[4];

	memset(out, 0, 16);
	memcpy(out, p->addr, p->len / 8);
	v4_positions(p->len, pos);
	for (int i = 0; i < 4; i++)
		out[pos[i]] = v4[i];
}

bool dns64_extract(const struct dns64_prefix *p, const uint8_t v6[16], uint8_t v4[4])
{
	unsigned pos[4];

	if (p->len == 0 || memcmp(v6, p->addr, p->len / 8) != 0 ||
	    (p->len <= 64 && v6[U_OCTET] != 0))
		return false;
	v4_positions(p->len, pos);
	for (int i = 0; i < 4; i++)
		v4[i] = v6[pos[i]];
	return true;
}

bool dns64_applies(const struct dns64_prefix *p, const struct dns_query *q,
		   const struct sockaddr_storage *peer)
{
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)peer;

	if (p->len == 0 || q->qtype != DNS_T_AAAA || q->qclass != DNS_C_IN || !peer ||
	    peer->ss_family != AF_INET6 || IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
		return false;
	return !(q->edns_do && (q->flags & DNS_F_CD));
}

/* pos just past msg's question (one, or none); false when malformed. */
static bool skip_question(const uint8_t *msg, size_t len, size_t *pos)
{
	uint8_t name[DNS_MAX_NAME];

	*pos = DNS_HEADER_LEN;
	if (len < DNS_HEADER_LEN || dns_get16(msg + 4) > 1)
		return false;
	if (dns_get16(msg + 4) == 0)
		return true;
	if (dns_name_read(msg, len, pos, name, false) < 0 || len - *pos < 4)
		return false;
	*pos += 4;
	return true;
}

/* Move pos past one record, giving its type and TTL; false when malformed. */
static bool skip_rr(const uint8_t *msg, size_t len, size_t *pos, uint16_t *type, uint32_t *ttl)
{
	uint8_t name[DNS_MAX_NAME];

	if (dns_name_read(msg, len, pos, name, false) < 0 || len - *pos < 10)
		return false;
	*type = dns_get16(msg + *pos);
	*ttl = dns_get32(msg + *pos + 4);
	size_t rdlen = dns_get16(msg + *pos + 8);
	if (len - *pos - 10 < rdlen)
		return false;
	*pos += 10 + rdlen;
	return true;
}

bool dns64_wanted(const uint8_t *reply, size_t len)
{
	size_t pos;
	uint16_t type;
	uint32_t ttl;

	if (!skip_question(reply, len, &pos) || (reply[3] & 0xf) == DNS_R_NXDOMAIN)
		return false;
	for (uint16_t i = dns_get16(reply + 6); i > 0; i--) {
		if (!skip_rr(reply, len, &pos, &type, &ttl))
			return false;
		if (type == DNS_T_AAAA)
			return false;
	}
	return true;
}

/* RFC 6147 5.1.7: the TTL of the SOA record in aaaa's authority section, else 600. */
static uint32_t ttl_cap(const uint8_t *aaaa, size_t len)
{
	size_t pos;
	uint16_t type;
	uint32_t ttl;
	uint16_t records = (uint16_t)(dns_get16(aaaa + 6) + dns_get16(aaaa + 8));

	if (!skip_question(aaaa, len, &pos))
		return DNS64_TTL_WITHOUT_SOA;
	for (uint16_t i = 0; i < records; i++) {
		if (!skip_rr(aaaa, len, &pos, &type, &ttl))
			break;
		if (i >= dns_get16(aaaa + 6) && type == DNS_T_SOA)
			return ttl;
	}
	return DNS64_TTL_WITHOUT_SOA;
}

/* Whether a's answer section holds an A record (and a is well formed up to it). */
static bool has_a_record(const uint8_t *a, size_t len)
{
	size_t pos;
	uint16_t type;
	uint32_t ttl;

	if (!skip_question(a, len, &pos))
		return false;
	for (uint16_t i = dns_get16(a + 6); i > 0; i--) {
		if (!skip_rr(a, len, &pos, &type, &ttl))
			return false;
		if (type == DNS_T_A)
			return true;
	}
	return false;
}

/* One record of a, rewritten for w: A records made AAAA under p, OPT left out. */
static bool add_record(const struct dns64_prefix *p, struct dns_rr *rr, enum dns_section sec,
		       uint32_t cap, struct dns_writer *w)
{
	uint8_t owner[DNS_MAX_NAME], v6[16];

	if (rr->type == DNS_T_OPT)
		return true; /* per exchange: w writes the client's own */
	dns_name_copy_lower(owner, rr->owner, dns_name_len(rr->owner));
	if (sec == DNS_SEC_ANSWER && rr->type == DNS_T_A && rr->rdlen == 4) {
		dns64_embed(p, rr->rdata, v6);
		return dns_response_add_rr(w, sec, owner, DNS_T_AAAA, rr->rclass,
					   rr->ttl < cap ? rr->ttl : cap, v6, sizeof v6);
	}
	dns_response_add_rr(w, sec, owner, rr->type, rr->rclass, rr->ttl, rr->rdata, rr->rdlen);
	return true; /* an additional record that does not fit is just left out */
}

/* aaaa's answer section (its CNAMEs: it has no AAAA) into w as it is; false when malformed. */
static bool copy_answer(const uint8_t *aaaa, size_t len, struct dns_writer *w)
{
	struct dns_rr rr;
	size_t pos;

	if (!skip_question(aaaa, len, &pos))
		return false;
	for (uint16_t i = dns_get16(aaaa + 6); i > 0; i--) {
		if (!dns_rr_read(aaaa, len, &pos, &rr))
			return false;
		dns_name_copy_lower(rr.owner, rr.owner, dns_name_len(rr.owner));
		dns_response_add_rr(w, DNS_SEC_ANSWER, rr.owner, rr.type, rr.rclass, rr.ttl,
				    rr.rdata, rr.rdlen);
	}
	return true;
}

static bool synthesize(const struct dns64_prefix *p, const uint8_t *aaaa, size_t aaaa_len,
		       const uint8_t *a, size_t a_len, bool chain, struct dns_writer *w)
{
	struct dns_rr rr;
	size_t pos;
	uint32_t cap;

	if (p->len == 0 || aaaa_len < DNS_HEADER_LEN || !has_a_record(a, a_len) ||
	    !skip_question(a, a_len, &pos))
		return false;
	cap = ttl_cap(aaaa, aaaa_len);
	dns_response_set_rcode(w, (enum dns_rcode)(a[3] & 0xf));
	dns_response_set_aa(w, (dns_get16(a + 2) & DNS_F_AA) != 0);
	if (chain && !copy_answer(aaaa, aaaa_len, w))
		return true; /* what fit is written; w marks a cut as truncated */
	for (int sec = DNS_SEC_ANSWER; sec <= DNS_SEC_ADDITIONAL; sec++)
		for (uint16_t i = dns_get16(a + 6 + 2 * sec); i > 0; i--)
			if (!dns_rr_read(a, a_len, &pos, &rr) ||
			    !add_record(p, &rr, (enum dns_section)sec, cap, w))
				return true;
	return true;
}

bool dns64_synthesize(const struct dns64_prefix *p, const uint8_t *aaaa, size_t aaaa_len,
		      const uint8_t *a, size_t a_len, struct dns_writer *w)
{
	return synthesize(p, aaaa, aaaa_len, a, a_len, false, w);
}

bool dns64_synthesize_chain(const struct dns64_prefix *p, const uint8_t *aaaa,
			    size_t aaaa_len, const uint8_t *a, size_t a_len,
			    struct dns_writer *w)
{
	return synthesize(p, aaaa, aaaa_len, a, a_len, true, w);
}

size_t dns64_chain_end(const uint8_t *reply, size_t len, const uint8_t *qname,
		       uint8_t out[DNS_MAX_NAME])
{
	uint8_t owner[DNS_MAX_NAME];
	size_t start, n = dns_name_len(qname);
	bool moved = true;

	dns_name_copy_lower(out, qname, n);
	if (!skip_question(reply, len, &start))
		return 0;
	/* at most one step per record: a CNAME loop cannot keep it going */
	for (uint16_t steps = dns_get16(reply + 6); moved && steps > 0; steps--) {
		size_t pos = start;
		moved = false;
		for (uint16_t i = dns_get16(reply + 6); i > 0 && !moved; i--) {
			size_t rdata;
			if (dns_name_read(reply, len, &pos, owner, true) < 0 || len - pos < 10)
				return 0;
			rdata = pos + 10;
			pos = rdata + dns_get16(reply + pos + 8);
			if (pos > len)
				return 0;
			if (dns_get16(reply + rdata - 10) != DNS_T_CNAME || dns_name_len(owner) != n ||
			    memcmp(owner, out, n) != 0)
				continue;
			int m = dns_name_read(reply, len, &rdata, out, true);
			if (m < 0)
				return 0;
			n = (size_t)m;
			moved = true;
		}
	}
	return n;
}

/* The hex digit of one ip6.arpa label (one character), or -1. */
static int nibble(const uint8_t *label)
{
	uint8_t c = label[1];

	if (label[0] != 1)
		return -1;
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static size_t put_decimal_label(uint8_t *out, uint8_t v)
{
	char text[4];
	size_t n = 0;

	if (v >= 100)
		text[n++] = (char)('0' + v / 100);
	if (v >= 10)
		text[n++] = (char)('0' + v / 10 % 10);
	text[n++] = (char)('0' + v % 10);
	out[0] = (uint8_t)n;
	memcpy(out + 1, text, n);
	return n + 1;
}

size_t dns64_ptr_target(const struct dns64_prefix *p, const uint8_t *qname,
			uint8_t out[DNS_MAX_NAME])
{
	static const uint8_t ip6_arpa[] = "\3ip6\4arpa";
	static const uint8_t in_addr_arpa[] = "\7in-addr\4arpa";
	uint8_t v6[16] = {0}, v4[4];
	size_t pos = 0, n = 0;

	if (p->len == 0)
		return 0;
	for (int i = 31; i >= 0; i--, pos += 2) { /* the last nibble comes first */
		int d = nibble(qname + pos);
		if (d < 0)
			return 0;
		v6[i / 2] |= (uint8_t)(i % 2 ? d : d << 4);
	}
	if (memcmp(qname + pos, ip6_arpa, sizeof ip6_arpa) != 0 || !dns64_extract(p, v6, v4))
		return 0;
	for (int i = 3; i >= 0; i--)
		n += put_decimal_label(out + n, v4[i]);
	memcpy(out + n, in_addr_arpa, sizeof in_addr_arpa);
	return n + sizeof in_addr_arpa;
}
