/*
 * dns/compact.c — rewriting an upstream reply before it is cached: with the
 * DNSSEC records a DO=0 client must not get taken out (RFC 4035 section
 * 3.2.1), and with every name compressed our way.
 *
 * Records cannot simply be cut out of a compressed message: a later name
 * may point into the bytes removed. So every record is read with its
 * names expanded (the owner, and the names inside the rdata of the types
 * RFC 1035 and RFC 3597 section 4 allow to be compressed, plus SRV, which
 * some servers compress anyway) and written again with dns_response_add_rr,
 * which compresses owners and the RFC 1035 rdata names. As a side effect an
 * owner equal to the question (libunbound writes it out in full) becomes a
 * pointer to the question: 20 bytes less per answer, and the client sees
 * its own letter case there too.
 */
#include "dns/dns.h"
#include "dns/wire.h"

#include <string.h>

#define T_RRSIG 46
#define T_NSEC 47
#define T_NSEC3 50
#define RR_FIXED 10

struct out {
	uint8_t *buf;
	size_t cap;
	size_t len;
	bool full;
};

static void put(struct out *o, const void *data, size_t n)
{
	if (o->full || n > o->cap - o->len) {
		o->full = true;
		return;
	}
	memcpy(o->buf + o->len, data, n);
	o->len += n;
}

/* Read a (possibly compressed) name at msg[*pos] and write it expanded. */
static bool copy_name(const uint8_t *msg, size_t len, size_t *pos, struct out *o)
{
	uint8_t name[DNS_MAX_NAME];
	int n = dns_name_read(msg, len, pos, name, false);

	if (n < 0)
		return false;
	put(o, name, (size_t)n);
	return true;
}

/* Expand rdata msg[rd..rd+rdlen) into o: its names (which may point
 * anywhere before their end) written out in full. */
static bool expand_rdata(const uint8_t *msg, uint16_t type, size_t rd, uint16_t rdlen,
			 struct out *o)
{
	struct dns_rdata_names shape;
	size_t pos = rd, end = rd + rdlen;

	if (!dns_rdata_names(type, &shape)) {
		put(o, msg + rd, rdlen);
		return true;
	}
	if (rdlen < shape.before)
		return false;
	put(o, msg + pos, shape.before);
	pos += shape.before;
	for (int i = 0; i < shape.names; i++)
		if (pos >= end || !copy_name(msg, end, &pos, o))
			return false;
	if (end - pos != shape.after)
		return false;
	put(o, msg + pos, shape.after);
	return !o->full;
}

static bool is_dnssec_type(uint16_t type)
{
	return type == T_RRSIG || type == T_NSEC || type == T_NSEC3;
}

bool dns_rr_read(const uint8_t *msg, size_t len, size_t *pos, struct dns_rr *rr)
{
	struct out o = {.buf = rr->rdata, .cap = sizeof rr->rdata};

	if (dns_name_read(msg, len, pos, rr->owner, false) < 0 || len - *pos < RR_FIXED)
		return false;
	const uint8_t *fixed = msg + *pos;
	uint16_t rdlen = dns_get16(fixed + 8);
	rr->type = dns_get16(fixed);
	rr->rclass = dns_get16(fixed + 2);
	rr->ttl = (uint32_t)dns_get16(fixed + 4) << 16 | dns_get16(fixed + 6);
	size_t rd = *pos + RR_FIXED;
	if (len - rd < rdlen || !expand_rdata(msg, rr->type, rd, rdlen, &o) || o.len > UINT16_MAX)
		return false;
	rr->rdlen = (uint16_t)o.len;
	*pos = rd + rdlen;
	return true;
}

/* Is msg[pos..] the name (lower case, as the cache keys it) written out in full, in any case? */
static bool spelled_out(const uint8_t *msg, size_t len, size_t pos, const uint8_t *name,
			size_t name_len)
{
	if (len - pos < name_len)
		return false;
	if (memcmp(msg + pos, name, name_len) == 0) /* libunbound writes what it was asked */
		return true;
	for (size_t i = 0; i < name_len; i++) /* a length byte (< 64) is not a letter */
		if (dns_ascii_lower(msg[pos + i]) != name[i])
			return false;
	return true;
}

/*
 * Does msg[pos..] start with qname, the question's name, written out or as
 * a pointer to the question (offset 12)? The length of that owner, or 0.
 */
static size_t owner_is_question(const uint8_t *msg, size_t len, size_t pos, const uint8_t *qname,
				size_t qname_len)
{
	if (len - pos >= 2 && msg[pos] == 0xc0 && msg[pos + 1] == DNS_HEADER_LEN)
		return 2;
	return spelled_out(msg, len, pos, qname, qname_len) ? qname_len : 0;
}

/*
 * Most answers a miss brings are A or AAAA records of the question's own
 * name: written as a pointer to the question, their data copied, without
 * reading the owner name out or looking for it among the names written.
 * The output is the same as rewrite_rr's. NOT_SIMPLE (nothing done, *pos
 * unmoved) for any other record; qname NULL when the message's question is
 * not the one written (a chased chain's end). Not for the root: one byte
 * written out, shorter than a pointer, so rewrite_rr never points to it.
 */
enum simple_rr { NOT_SIMPLE, SIMPLE_ADDED, SIMPLE_NO_ROOM };

static enum simple_rr add_simple_rr(const uint8_t *msg, size_t len, size_t *pos,
				    enum dns_section sec, const uint8_t *qname, size_t qname_len,
				    struct dns_writer *w)
{
	size_t owner = qname && qname_len > 1 ? owner_is_question(msg, len, *pos, qname, qname_len)
					       : 0;

	if (owner == 0 || len - *pos - owner < RR_FIXED)
		return NOT_SIMPLE;
	const uint8_t *fixed = msg + *pos + owner;
	uint16_t type = dns_get16(fixed), rdlen = dns_get16(fixed + 8);
	if (!((type == DNS_T_A && rdlen == 4) || (type == DNS_T_AAAA && rdlen == 16)) ||
	    len - *pos - owner - RR_FIXED < rdlen)
		return NOT_SIMPLE;
	uint32_t ttl = (uint32_t)dns_get16(fixed + 4) << 16 | dns_get16(fixed + 6);
	size_t before = w->count[sec];
	dns_response_add_rr(w, sec, NULL, type, dns_get16(fixed + 2), ttl, fixed + RR_FIXED, rdlen);
	*pos += owner + RR_FIXED + rdlen;
	return w->count[sec] == before + 1 ? SIMPLE_ADDED : SIMPLE_NO_ROOM;
}

/* Read one record at msg[*pos] and add it to w unless it is dropped. */
static bool rewrite_rr(const uint8_t *msg, size_t len, size_t *pos, enum dns_section sec,
		       bool drop_dnssec, uint16_t qtype, struct dns_writer *w)
{
	struct dns_rr rr;

	if (!dns_rr_read(msg, len, pos, &rr))
		return false;
	if (rr.type == DNS_T_OPT || (drop_dnssec && is_dnssec_type(rr.type) && rr.type != qtype &&
				     qtype != DNS_T_ANY))
		return true; /* OPT is per exchange; the other is not for this client */
	size_t before = w->count[sec];
	dns_response_add_rr(w, sec, rr.owner, rr.type, rr.rclass, rr.ttl, rr.rdata, rr.rdlen);
	return w->count[sec] == before + 1; /* nothing may be left out here */
}

/* The CNAMEs we answered ourselves, first in the answer section. */
static void add_chain(struct dns_writer *w, const uint8_t *chain, size_t chain_len, uint32_t ttl)
{
	const uint8_t *owner = NULL; /* the question name */

	for (size_t pos = 0; pos < chain_len; pos += dns_name_len(chain + pos)) {
		const uint8_t *target = chain + pos;
		dns_response_add_rr(w, DNS_SEC_ANSWER, owner, DNS_T_CNAME, DNS_C_IN, ttl, target,
				    (uint16_t)dns_name_len(target));
		owner = target;
	}
}

/* msg's one question is (name, q's type and class); pos is left past it. */
static bool question_is(const uint8_t *msg, size_t len, const uint8_t *name,
			const struct dns_query *q, size_t *pos)
{
	uint8_t qname[DNS_MAX_NAME];
	size_t name_len = dns_name_len(name);

	*pos = DNS_HEADER_LEN;
	if (len < DNS_HEADER_LEN || dns_get16(msg + 4) != 1)
		return false;
	if (spelled_out(msg, len, *pos, name, name_len)) /* as every upstream writes it */
		*pos += name_len;
	else if (dns_name_read(msg, len, pos, qname, true) != (int)name_len ||
		 memcmp(qname, name, name_len) != 0)
		return false;
	if (len - *pos < 4 ||
	    dns_get16(msg + *pos) != q->qtype || dns_get16(msg + *pos + 2) != q->qclass)
		return false;
	*pos += 4;
	return true;
}

static size_t rewrite(const uint8_t *msg, size_t len, size_t pos, const struct dns_query *q,
		      const uint8_t *chain, size_t chain_len, uint32_t chain_ttl,
		      bool drop_dnssec, uint8_t *out, size_t cap)
{
	struct dns_query plain = *q;
	struct dns_writer w;

	/* The stored question is the lower-cased one, with no OPT or cookie. */
	memcpy(plain.qname_orig, plain.qname, plain.qname_len);
	plain.has_edns = false;
	plain.cookie_len = 0;
	dns_response_begin(&w, out, cap < DNS_MAX_MESSAGE ? cap : DNS_MAX_MESSAGE, &plain,
			   (enum dns_rcode)(msg[3] & 0xf));
	add_chain(&w, chain, chain_len, chain_ttl);
	/* without a chain, msg's question is q's: its own name's records take the short way */
	const uint8_t *qname = chain_len ? NULL : q->qname;
	for (int sec = DNS_SEC_ANSWER; sec <= DNS_SEC_ADDITIONAL; sec++)
		for (uint16_t i = dns_get16(msg + 6 + 2 * sec); i > 0; i--) {
			enum simple_rr simple = add_simple_rr(msg, len, &pos, (enum dns_section)sec,
							      qname, q->qname_len, &w);
			if (simple == SIMPLE_NO_ROOM)
				return 0;
			if (simple == NOT_SIMPLE &&
			    !rewrite_rr(msg, len, &pos, (enum dns_section)sec, drop_dnssec,
					q->qtype, &w))
				return 0;
		}
	if (w.truncated)
		return 0;
	size_t n = dns_response_finish(&w, 0);
	if (n == 0)
		return 0;
	out[2] = msg[2]; /* the upstream's flags and rcode, as they came */
	out[3] = msg[3];
	return n;
}

size_t dns_message_compact(const uint8_t *msg, size_t len, const struct dns_query *q,
			   bool drop_dnssec, uint8_t *out, size_t cap)
{
	size_t pos;

	if (!question_is(msg, len, q->qname, q, &pos))
		return 0;
	return rewrite(msg, len, pos, q, NULL, 0, 0, drop_dnssec, out, cap);
}

size_t dns_message_chase(const uint8_t *msg, size_t len, const struct dns_query *q,
			 const uint8_t *chain, size_t chain_len, uint32_t chain_ttl,
			 bool drop_dnssec, uint8_t *out, size_t cap)
{
	const uint8_t *target = chain;
	size_t pos;

	if (chain_len == 0)
		return 0;
	for (size_t p = 0; p < chain_len; p += dns_name_len(chain + p))
		target = chain + p;
	if (!question_is(msg, len, target, q, &pos))
		return 0;
	size_t n = rewrite(msg, len, pos, q, chain, chain_len, chain_ttl, drop_dnssec, out, cap);
	if (n)
		out[2] &= (uint8_t)~(DNS_F_AA >> 8); /* the first answers are ours, the rest not */
	return n;
}
