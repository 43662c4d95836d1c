/*
 * upstream/alloc.h — libunbound's zeroed allocations, through the thread's
 * malloc cache.
 *
 * Why. glibc 2.36's calloc never takes a chunk from the thread's cache
 * (tcache): every calloc goes to the arena's bins, and the free that
 * follows fills the cache of that size, so the frees of calloc'd chunks
 * find it full and take the slow path too. libunbound callocs several
 * times a question (its context's record of the question and of the
 * result, its outgoing query's state). Our libunbound is built with
 * calloc bound to upstream_calloc (deploy/libunbound/build.sh), which
 * takes a small block from malloc, whose cache the frees refill, and
 * zeroes it: 1,094 fewer instructions a miss (docs/performance.md, "Cold
 * misses", item 12).
 *
 * Owns: nothing (no state). Must never: return memory that is not zeroed,
 * or a block free() cannot take, or wrap n * size around.
 */
#ifndef LOCALDNS_UPSTREAM_ALLOC_H
#define LOCALDNS_UPSTREAM_ALLOC_H

#include <stddef.h>

/* calloc's contract: n * size zeroed bytes for free(), NULL with errno ENOMEM when
 * the product overflows or memory is short. */
void *upstream_calloc(size_t n, size_t size);

#endif
