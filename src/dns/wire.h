/*
 * dns/wire.h — the byte-level helpers every reader and writer of DNS
 * messages shares: 16- and 32-bit integers in network byte order at any
 * alignment, and ASCII lower-casing (names compare without case, RFC 4343,
 * and only ASCII letters fold).
 *
 * Owns: nothing; inline, so the hot path pays no call. The caller checks
 * the bounds first: these read and write exactly 1, 2 or 4 bytes at p.
 *
 * Must never: allocate, lock, log or keep state.
 */
#ifndef LOCALDNS_DNS_WIRE_H
#define LOCALDNS_DNS_WIRE_H

#include <stdint.h>

static inline uint16_t dns_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t dns_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void dns_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void dns_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline uint8_t dns_ascii_lower(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? (uint8_t)(c + ('a' - 'A')) : c;
}

#endif
