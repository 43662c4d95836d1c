/*
 * cache/slab — the answer cache's entry memory: fixed-size slots in 64 KiB
 * slabs mapped for the cache alone, not malloc's heap.
 *
 * Why: a cache entry lives for minutes to days, libunbound's allocations
 * for a miss for milliseconds. In one heap the long-lived entries end up
 * interleaved with the short-lived holes, so a large cache spreads the
 * resolver's small free chunks across the whole cache's memory, and glibc
 * hands out the oldest of them first: each of its allocations then reads
 * and writes lines the CPU has long evicted. At the max miss rate with a
 * 64 MiB cache that was 10-13 % of the CPU a miss (docs/performance.md,
 * "Cold misses", item 20); in slabs of their own the entries leave
 * malloc's heap as small as the resolver's working set.
 *
 * Owns: the slabs (mapped 1 MiB at a time, unmapped by slab_pool_free) and
 * their bookkeeping. A slot is a multiple of 16 bytes up to SLAB_MAX_SLOT,
 * 16-byte aligned; a slab holds slots of one size. A slab whose last slot
 * comes back gives its pages to the kernel at once and is reused for any
 * size.
 *
 * Bound: a slab holds one size and stays while one of its slots is taken,
 * so a client that keeps one entry of each slab hot and moves on to names
 * of another size would pin slab after slab (a 1 MiB cache's slabs grew to
 * 10 MiB in test_cache's attack). The pool therefore has a limit: a slot
 * that needs a new slab past it is refused, and the cache puts that entry
 * in malloc's heap, charged as a large one (cache.c, slot_or_overflow).
 *
 * Must never: be used for a request larger than SLAB_MAX_SLOT (the cache
 * mallocs those); read a slot it hands out (a slot given back is written
 * in its second word only: its first is what a reader walking a chain
 * reads, and ASan should catch that after the slot is given back).
 *
 * Thread-safety: every call takes the pool's mutex; slab_pool_bytes reads
 * one counter without it.
 */
#ifndef LOCALDNS_CACHE_SLAB_H
#define LOCALDNS_CACHE_SLAB_H

#include <stddef.h>
#include <stdint.h>

#define SLAB_MAX_SLOT 2048
#define SLAB_BYTES ((uint64_t)64 * 1024)

struct slab_pool;

/* A pool whose slabs stay within max_bytes (see slab_pool_limit). */
struct slab_pool *slab_pool_new(uint64_t max_bytes);

/* Every slab unmapped, whatever was not given back. NULL is fine. */
void slab_pool_free(struct slab_pool *p);

/* New slabs only while the slabs in use stay within max_bytes (0: no
 * limit); slabs already in use stay. */
void slab_pool_limit(struct slab_pool *p, uint64_t max_bytes);

/* A slot of `bytes` (a multiple of 16, 16..SLAB_MAX_SLOT), or NULL when
 * it needs a new slab past the limit or no memory could be mapped. Its
 * contents are undefined. */
void *slab_take(struct slab_pool *p, size_t bytes);

/* Give back every slot of a chain: the next slot's address is the pointer
 * at `link_offset` in each (read before the slot is reused), NULL ends. */
void slab_give_chain(struct slab_pool *p, void *first, size_t link_offset);

/* Bytes of the slabs holding at least one slot: the cache's entries'
 * memory, their slabs' unused slots included. */
uint64_t slab_pool_bytes(const struct slab_pool *p);

#endif
