/*
 * dns/cookie.c — DNS server cookies (RFC 7873) in the interoperable format
 * of RFC 9018, the SipHash-2-4 they are built on, and SipHash-1-3 for the
 * hash tables (dns.h).
 *
 * A server cookie is Version (1) | Reserved (3 zero bytes) | Timestamp (4,
 * seconds) | Hash (8), where Hash = SipHash-2-4 keyed by the server secret
 * over Client Cookie | Version | Reserved | Timestamp | Client IP. Pure
 * computation: the caller brings the secret, the time and the address.
 */
#include "dns/dns.h"

#include <endian.h>
#include <string.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

/* Little-endian 8 bytes: one load where the host is little-endian. */
static inline uint64_t load64_le(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof v);
	return le64toh(v);
}

/* One SipRound on four locals the compiler keeps in registers. */
#define SIPROUND                                                                      \
	do {                                                                          \
		v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);             \
		v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                \
		v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                \
		v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);             \
	} while (0)

/*
 * The last block: the 0-7 bytes after the full ones, the message length in
 * the top byte. Read byte by byte: a memcpy of a variable length is a call.
 */
static inline uint64_t last_block(const uint8_t *tail, size_t len)
{
	uint64_t b = (uint64_t)len << 56;

	switch (len & 7) {
	case 7: b |= (uint64_t)tail[6] << 48; /* fall through */
	case 6: b |= (uint64_t)tail[5] << 40; /* fall through */
	case 5: b |= (uint64_t)tail[4] << 32; /* fall through */
	case 4: b |= (uint64_t)tail[3] << 24; /* fall through */
	case 3: b |= (uint64_t)tail[2] << 16; /* fall through */
	case 2: b |= (uint64_t)tail[1] << 8;  /* fall through */
	case 1: b |= (uint64_t)tail[0];       /* fall through */
	case 0: break;
	}
	return b;
}

/*
 * SipHash-c-d: c rounds per message block, d to finish. Both callers pass
 * constants, so each is compiled with its rounds unrolled, for registers.
 */
static inline __attribute__((always_inline)) uint64_t siphash(const uint8_t key[16],
							      const uint8_t *msg, size_t len,
							      int c, int d)
{
	uint64_t k0 = load64_le(key), k1 = load64_le(key + 8);
	uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
	uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
	size_t full = len & ~(size_t)7;

	for (size_t i = 0; i <= full; i += 8) {
		uint64_t m = i < full ? load64_le(msg + i) : last_block(msg + full, len);
		v3 ^= m;
		for (int r = 0; r < c; r++)
			SIPROUND;
		v0 ^= m;
	}
	v2 ^= 0xff;
	for (int r = 0; r < d; r++)
		SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t dns_siphash24(const uint8_t key[16], const uint8_t *msg, size_t len)
{
	return siphash(key, msg, len, 2, 4);
}

uint64_t dns_siphash13(const uint8_t key[16], const uint8_t *msg, size_t len)
{
	return siphash(key, msg, len, 1, 3);
}

void dns_server_cookie(uint8_t out[DNS_SERVER_COOKIE_LEN],
		       const uint8_t client_cookie[DNS_CLIENT_COOKIE_LEN],
		       const uint8_t secret[16], uint32_t now,
		       const uint8_t *client_ip, size_t ip_len)
{
	uint8_t msg[DNS_CLIENT_COOKIE_LEN + 8 + 16];
	size_t n = 0;

	memcpy(msg, client_cookie, DNS_CLIENT_COOKIE_LEN);
	n += DNS_CLIENT_COOKIE_LEN;
	out[0] = 1; /* version */
	out[1] = out[2] = out[3] = 0;
	out[4] = (uint8_t)(now >> 24);
	out[5] = (uint8_t)(now >> 16);
	out[6] = (uint8_t)(now >> 8);
	out[7] = (uint8_t)now;
	memcpy(msg + n, out, 8);
	n += 8;
	if (ip_len > 16)
		ip_len = 16;
	memcpy(msg + n, client_ip, ip_len);
	n += ip_len;
	uint64_t hash = dns_siphash24(secret, msg, n);
	/* RFC 9018 4.4: the 64-bit result is written in SipHash's byte order. */
	for (int i = 0; i < 8; i++)
		out[8 + i] = (uint8_t)(hash >> (8 * i));
}
