/*
 * util/pow2 — the smallest power of two at least n, for the rings whose
 * index is masked (querylog's, dnstap's).
 *
 * Owns: nothing; an inline helper.
 *
 * Must never: be given n above 2^31 (the result would not fit); the
 * config's bounds keep ring sizes far below.
 */
#ifndef LOCALDNS_UTIL_POW2_H
#define LOCALDNS_UTIL_POW2_H

#include <stdint.h>

static inline uint32_t pow2_at_least(uint64_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

#endif
