/*
 * packet.h — the unit tests' one builder of DNS messages, so the codec and
 * the cache are checked against hand-built input, never against
 * themselves (msg_view.h reads what they write). Two ways in:
 *
 *   - a query as data, struct pkt_query: what a row of a test table says
 *     (test_dns.c's parse cases), written by pkt_build_query;
 *   - byte by byte, put_*: headers, questions, records, OPTs, and the
 *     malformed bytes no description covers.
 *
 * Every put is bounds-checked with a cmocka assertion. Include after
 * <cmocka.h>.
 */
#ifndef LOCALDNS_TEST_PACKET_H
#define LOCALDNS_TEST_PACKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dns/dns.h"
#include "msg_view.h"

struct pkt {
	uint8_t b[DNS_MAX_MESSAGE];
	size_t len;
};

/* ---- byte by byte ------------------------------------------------------------- */

static inline void put_u8(struct pkt *p, uint8_t v)
{
	assert_true(p->len < sizeof(p->b));
	p->b[p->len++] = v;
}

static inline void put_u16(struct pkt *p, uint16_t v)
{
	put_u8(p, (uint8_t)(v >> 8));
	put_u8(p, (uint8_t)v);
}

static inline void put_u32(struct pkt *p, uint32_t v)
{
	put_u16(p, (uint16_t)(v >> 16));
	put_u16(p, (uint16_t)v);
}

static inline void put_raw(struct pkt *p, const void *data, size_t n)
{
	assert_true(p->len + n <= sizeof(p->b));
	if (n) /* data may be NULL for an empty OPT */
		memcpy(p->b + p->len, data, n);
	p->len += n;
}

/* Dotted text to wire form, letter case kept ("." or "" is the root). Not
 * checked: a label of 64 bytes or a name of 256 is written as asked. */
static inline size_t text_to_wire(const char *text, uint8_t *out)
{
	size_t n = 0;

	while (*text) {
		size_t label = strcspn(text, ".");
		out[n++] = (uint8_t)label;
		memcpy(out + n, text, label);
		n += label;
		text += label;
		if (*text == '.')
			text++;
	}
	out[n++] = 0;
	return n;
}

static inline void put_name(struct pkt *p, const char *text)
{
	uint8_t wire[1024];
	put_raw(p, wire, text_to_wire(text, wire));
}

/* Starts the message over with this header. */
static inline void put_header(struct pkt *p, uint16_t id, uint16_t flags, uint16_t qd,
			      uint16_t an, uint16_t ns, uint16_t ar)
{
	p->len = 0;
	put_u16(p, id);
	put_u16(p, flags);
	put_u16(p, qd);
	put_u16(p, an);
	put_u16(p, ns);
	put_u16(p, ar);
}

/* The count of section index: 0 question, 1 answer, 2 authority, 3 additional. */
static inline void set_count(struct pkt *p, int index, uint16_t v)
{
	p->b[4 + 2 * index] = (uint8_t)(v >> 8);
	p->b[5 + 2 * index] = (uint8_t)v;
}

static inline void bump_count(struct pkt *p, int index)
{
	set_count(p, index, (uint16_t)(rd16(p->b + 4 + 2 * index) + 1));
}

/* A question's name, type and class (the header's QDCOUNT is the caller's). */
static inline void put_question(struct pkt *p, const char *name, uint16_t qtype, uint16_t qclass)
{
	put_name(p, name);
	put_u16(p, qtype);
	put_u16(p, qclass);
}

/* What follows a record's owner: type, class IN, TTL, rdata; counted in
 * section (enum dns_section). */
static inline void put_rr_body(struct pkt *p, enum dns_section section, uint16_t type,
			       uint32_t ttl, const void *rdata, uint16_t rdlen)
{
	put_u16(p, type);
	put_u16(p, DNS_C_IN);
	put_u32(p, ttl);
	put_u16(p, rdlen);
	put_raw(p, rdata, rdlen);
	bump_count(p, 1 + section);
}

/* A record whose owner is a pointer to offset at. */
static inline void put_rr_at(struct pkt *p, enum dns_section section, size_t at, uint16_t type,
			     uint32_t ttl, const void *rdata, uint16_t rdlen)
{
	put_u16(p, (uint16_t)(0xC000 | at));
	put_rr_body(p, section, type, ttl, rdata, rdlen);
}

/* A record with its owner written out; NULL: a pointer to the question's name. */
static inline void put_rr(struct pkt *p, enum dns_section section, const char *owner,
			  uint16_t type, uint32_t ttl, const void *rdata, uint16_t rdlen)
{
	if (!owner) {
		put_rr_at(p, section, DNS_HEADER_LEN, type, ttl, rdata, rdlen);
		return;
	}
	put_name(p, owner);
	put_rr_body(p, section, type, ttl, rdata, rdlen);
}

/* Appends an OPT record (root owner) and counts it in the additional section. */
static inline void put_opt(struct pkt *p, uint16_t udp, uint32_t ttl,
			   const uint8_t *rdata, uint16_t rdlen)
{
	put_u8(p, 0);
	put_u16(p, DNS_T_OPT);
	put_u16(p, udp);
	put_u32(p, ttl);
	put_u16(p, rdlen);
	put_raw(p, rdata, rdlen);
	bump_count(p, 3);
}

/* A COOKIE option of n bytes (0xA0, 0xA1, ...) into out; its length. */
static inline uint16_t cookie_option(uint8_t *out, uint16_t n)
{
	out[0] = 0;
	out[1] = DNS_EDNS_OPT_COOKIE;
	out[2] = (uint8_t)(n >> 8);
	out[3] = (uint8_t)n;
	for (uint16_t i = 0; i < n; i++)
		out[4 + i] = (uint8_t)(0xA0 + i);
	return (uint16_t)(4 + n);
}

/* ---- a query as data ---------------------------------------------------------- */

/* Bytes written as they are: PKT_BYTES("\xC0\x0C") (mind that a hex escape
 * runs on through hex digits: "\x01" "a", or octal "\1a"). */
struct pkt_bytes {
	const char *b;
	size_t len;
};
#define PKT_BYTES(s) {s, sizeof(s) - 1}

/*
 * A query message as a table row writes it, in this order: the header, the
 * question (qname, or name_bytes for a name no text can say; neither: no
 * question), opts OPT records, then tail. A field left out is zero, which
 * is a plain query's value (class 0 is IN).
 */
struct pkt_query {
	uint16_t id, flags;
	uint16_t counts[4];         /* QD, AN, NS, AR as the header says them; all
				     * zero: those of what is written (the
				     * question, the OPTs) */
	const char *qname;          /* dotted text, letter case kept ("" the root) */
	struct pkt_bytes name_bytes;
	uint16_t qtype, qclass;
	unsigned opts;              /* OPT records in the additional section */
	uint16_t udp;               /* each OPT's UDP payload size */
	uint32_t ttl;               /* its extended rcode, version and DO */
	struct pkt_bytes options;   /* its options, then: */
	bool cookie;                /* a COOKIE option of cookie_len bytes (cookie_option) */
	uint16_t cookie_len;
	uint16_t options_sent;      /* 0: the whole option list; else only its first
				     * options_sent bytes (the rdata length says so) */
	struct pkt_bytes tail;      /* after all that: records, junk */
	int send;                   /* 0: the whole message; n > 0: its first n
				     * bytes; n < 0: all but its last -n */
};

static inline void put_query_opt(struct pkt *p, const struct pkt_query *s)
{
	uint8_t rdata[512];
	size_t n = s->options.len;

	assert_true(n + 4 + s->cookie_len <= sizeof rdata);
	if (n) /* options.b is NULL when there are none: memcpy may not take it */
		memcpy(rdata, s->options.b, n);
	if (s->cookie)
		n += cookie_option(rdata + n, s->cookie_len);
	if (s->options_sent)
		n = s->options_sent;
	put_opt(p, s->udp, s->ttl, rdata, (uint16_t)n);
}

/* Writes s into p. */
static inline void pkt_build_query(struct pkt *p, const struct pkt_query *s)
{
	bool question = s->qname || s->name_bytes.b;

	put_header(p, s->id, s->flags, question, 0, 0, 0);
	if (s->qname)
		put_name(p, s->qname);
	else
		put_raw(p, s->name_bytes.b, s->name_bytes.len);
	if (question) {
		put_u16(p, s->qtype);
		put_u16(p, s->qclass ? s->qclass : DNS_C_IN);
	}
	for (unsigned i = 0; i < s->opts; i++)
		put_query_opt(p, s);
	put_raw(p, s->tail.b, s->tail.len);
	if (s->counts[0] || s->counts[1] || s->counts[2] || s->counts[3])
		for (int i = 0; i < 4; i++)
			set_count(p, i, s->counts[i]);
	size_t cut = s->send < 0 ? (size_t)-s->send : 0;
	assert_true((size_t)(s->send > 0 ? s->send : 0) <= p->len && cut <= p->len);
	if (s->send > 0)
		p->len = (size_t)s->send;
	p->len -= cut;
}

/* s built and parsed into q, which must parse. */
static inline void pkt_parse_query(const struct pkt_query *s, struct dns_query *q)
{
	struct pkt p;

	pkt_build_query(&p, s);
	assert_int_equal(dns_parse_query(p.b, p.len, q), DNS_PARSE_OK);
}

#endif
