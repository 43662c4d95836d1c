/*
 * packet.h — assembling DNS messages byte by byte in tests, so the codec
 * and the cache are checked against hand-built input, never against
 * themselves. Every put is bounds-checked with a cmocka assertion.
 * Include after <cmocka.h>.
 */
#ifndef LOCALDNS_TEST_PACKET_H
#define LOCALDNS_TEST_PACKET_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dns/dns.h"
#include "msg_view.h"

struct pkt {
	uint8_t b[DNS_MAX_MESSAGE];
	size_t len;
};

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

/* Dotted text to wire form, letter case kept ("." or "" is the root). */
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

#endif
