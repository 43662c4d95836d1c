/*
 * dns/cookie.c — DNS server cookies (RFC 7873) in the interoperable format
 * of RFC 9018, and the SipHash-2-4 they are built on.
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
 * SipHash-2-4. Also the keyed hash of the tables that outside input fills
 * (the answer cache, the resolver's questions, the cluster table, the
 * per-client counts), so it is on the hot path: written for registers.
 */
uint64_t dns_siphash24(const uint8_t key[16], const uint8_t *msg, size_t len)
{
	uint64_t k0 = load64_le(key), k1 = load64_le(key + 8);
	uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
	uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
	uint8_t tail[8] = {0};
	size_t full = len & ~(size_t)7;

	for (size_t i = 0; i < full; i += 8) {
		uint64_t m = load64_le(msg + i);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	memcpy(tail, msg + full, len - full);
	uint64_t m = load64_le(tail) | (uint64_t)len << 56;
	v3 ^= m;
	SIPROUND;
	SIPROUND;
	v0 ^= m;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
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
