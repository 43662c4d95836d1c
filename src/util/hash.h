/*
 * util/hash — FNV-1a, the one byte hash of the project: name tables, the
 * resolver's in-flight questions, the config files' content and the nft rule
 * fingerprint all use it. Short keys, a good spread, no tables.
 *
 * Must never: allocate, lock, log or keep state (the hot path uses it).
 */
#ifndef LOCALDNS_UTIL_HASH_H
#define LOCALDNS_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define FNV1A_SEED 0xcbf29ce484222325ull

/* Continue hash h over len bytes; start from FNV1A_SEED. */
static inline uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static inline uint64_t fnv1a_byte(uint64_t h, uint8_t byte)
{
	return fnv1a(h, &byte, 1);
}

#endif
