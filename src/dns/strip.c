/*
 * dns/strip.c — removing DNSSEC records from a reply for a client that did
 * not ask for them (DO=0, RFC 4035 section 3.2.1).
 *
 * Records cannot simply be cut out of a compressed message: a later name
 * may point into the bytes removed. So the message is written out again
 * without compression: every owner name, and every name inside the rdata
 * of the types whose names RFC 1035 and RFC 3597 section 4 allow to be
 * compressed (plus SRV, which some servers compress anyway), is expanded.
 * Other rdata is copied as it is: those types never hold compressed names.
 * The result is larger than the input by the pointers expanded, never
 * more than DNS_MAX_MESSAGE (0 is returned then).
 */
#include "dns/dns.h"

#include <string.h>

#define T_MD 3
#define T_MF 4
#define T_MB 7
#define T_MG 8
#define T_MR 9
#define T_MINFO 14
#define T_RP 17
#define T_AFSDB 18
#define T_RT 21
#define T_DNAME 39
#define T_RRSIG 46
#define T_NSEC 47
#define T_NSEC3 50
#define RR_FIXED 10
#define SOA_FIXED 20

struct out {
	uint8_t *buf;
	size_t cap;
	size_t len;
	bool full;
};

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

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

/* How an rdata is laid out: fixed bytes before, names, fixed bytes after. */
struct rdata_shape {
	uint8_t before;
	uint8_t names;
	uint8_t after;
};

static bool rdata_shape(uint16_t type, struct rdata_shape *s)
{
	switch (type) {
	case DNS_T_NS: case DNS_T_CNAME: case DNS_T_PTR: case T_DNAME:
	case T_MD: case T_MF: case T_MB: case T_MG: case T_MR:
		*s = (struct rdata_shape){0, 1, 0};
		return true;
	case DNS_T_MX: case T_AFSDB: case T_RT:
		*s = (struct rdata_shape){2, 1, 0};
		return true;
	case DNS_T_SRV:
		*s = (struct rdata_shape){6, 1, 0};
		return true;
	case T_MINFO: case T_RP:
		*s = (struct rdata_shape){0, 2, 0};
		return true;
	case DNS_T_SOA:
		*s = (struct rdata_shape){0, 2, SOA_FIXED};
		return true;
	default:
		return false;
	}
}

/* Copy rdata msg[rd..rd+rdlen) with its names expanded (they may point
 * anywhere before their end); fixes the rdlength written at
 * o->buf[rdlen_at]. */
static bool copy_rdata(const uint8_t *msg, uint16_t type, size_t rd, uint16_t rdlen,
		       struct out *o, size_t rdlen_at)
{
	struct rdata_shape shape;
	size_t start = o->len, pos = rd, end = rd + rdlen;

	if (!rdata_shape(type, &shape)) {
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
	if (o->full)
		return true;
	size_t written = o->len - start;
	o->buf[rdlen_at] = (uint8_t)(written >> 8);
	o->buf[rdlen_at + 1] = (uint8_t)written;
	return written <= UINT16_MAX;
}

static bool is_dnssec_type(uint16_t type)
{
	return type == T_RRSIG || type == T_NSEC || type == T_NSEC3;
}

size_t dns_strip_dnssec(const uint8_t *msg, size_t len, uint8_t *out, size_t cap)
{
	struct out o = {.buf = out, .cap = cap < DNS_MAX_MESSAGE ? cap : DNS_MAX_MESSAGE};
	size_t pos = DNS_HEADER_LEN;
	uint16_t qtype, counts[3];

	if (len < DNS_HEADER_LEN || get16(msg + 4) != 1)
		return 0;
	put(&o, msg, DNS_HEADER_LEN);
	if (!copy_name(msg, len, &pos, &o) || len - pos < 4)
		return 0;
	qtype = get16(msg + pos);
	put(&o, msg + pos, 4);
	pos += 4;
	for (int sec = 0; sec < 3; sec++) {
		counts[sec] = 0;
		for (uint16_t i = get16(msg + 6 + 2 * sec); i > 0; i--) {
			size_t rr_out = o.len;
			if (!copy_name(msg, len, &pos, &o) || len - pos < RR_FIXED)
				return 0;
			uint16_t type = get16(msg + pos), rdlen = get16(msg + pos + 8);
			size_t rd = pos + RR_FIXED;
			if (len - rd < rdlen)
				return 0;
			bool keep = !is_dnssec_type(type) || type == qtype || qtype == DNS_T_ANY;
			put(&o, msg + pos, RR_FIXED);
			if (!copy_rdata(msg, type, rd, rdlen, &o, o.len - 2))
				return 0;
			pos = rd + rdlen;
			if (keep)
				counts[sec]++;
			else if (!o.full)
				o.len = rr_out; /* written, then taken back */
		}
	}
	if (o.full)
		return 0;
	for (int sec = 0; sec < 3; sec++) {
		out[6 + 2 * sec] = (uint8_t)(counts[sec] >> 8);
		out[7 + 2 * sec] = (uint8_t)counts[sec];
	}
	return o.len;
}
