/*
 * upstream/ring.c — the request rings from each worker to the resolver
 * thread: single producer, single consumer, a byte ring of packed
 * requests (request.c).
 *
 * Why packed: a ring of whole structs (1.4 KB each) touches every one of
 * its pages as it goes round, so after the first thousand misses it was
 * 1.4 MB resident per worker; packed, the same burst fits in 256 KiB,
 * which is all the ring ever touches. (A burst of 1,000 identical misses
 * must fit while the resolver thread waits for a core:
 * test_identical_misses_share_one_upstream_query. That is about 1,700
 * typical requests; of the largest possible ones, about 210.)
 *
 * A record is a 4-byte size, then the packed request, padded to 8 bytes. Records never straddle the ring's end: a
 * record that would is put at the start, and a size of 0 where it would
 * have been tells the reader to go there. head and tail are free-running
 * byte counts on cache lines of their own: the worker publishes a record
 * with a release store of tail, the resolver gives its bytes back with a
 * release store of head as soon as it has unpacked it.
 */
#include "upstream/internal.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define RING_BYTES (256u * 1024) /* a power of two */
#define RECORD_ALIGN 8u
#define WRAP 0u                  /* record size meaning "continue at the start" */

struct request_ring {
	_Alignas(64) _Atomic uint32_t head; /* next byte the resolver reads */
	_Alignas(64) _Atomic uint32_t tail; /* next byte the worker writes */
	_Alignas(64) uint8_t bytes[RING_BYTES];
};

static uint32_t record_size(size_t body)
{
	return (uint32_t)((sizeof(uint32_t) + body + RECORD_ALIGN - 1) & ~(size_t)(RECORD_ALIGN - 1));
}

struct request_ring *request_ring_new(void)
{
	/* not cleared: a page of bytes[] costs memory only once a record reaches it */
	struct request_ring *ring = aligned_alloc(64, sizeof *ring);

	if (ring) {
		atomic_init(&ring->head, 0);
		atomic_init(&ring->tail, 0);
	}
	return ring;
}

void request_ring_free(struct request_ring *ring)
{
	free(ring);
}

bool request_ring_put(struct request_ring *ring, const struct upstream_request *r)
{
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
	uint32_t at = tail & (RING_BYTES - 1);
	uint32_t size = record_size(upstream_request_packed_size(r));
	uint32_t skip = size > RING_BYTES - at ? RING_BYTES - at : 0;

	if (!upstream_request_fits(r) || RING_BYTES - (tail - head) < skip + size)
		return false;
	if (skip) {
		uint32_t wrap = WRAP;
		memcpy(ring->bytes + at, &wrap, sizeof wrap);
		at = 0;
	}
	memcpy(ring->bytes + at, &size, sizeof size);
	upstream_request_pack(r, ring->bytes + at + sizeof size);
	atomic_store_explicit(&ring->tail, tail + skip + size, memory_order_release);
	return true;
}

bool request_ring_take(struct request_ring *ring, struct upstream_request *out)
{
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
	uint32_t size;

	if (head == tail)
		return false;
	memcpy(&size, ring->bytes + (head & (RING_BYTES - 1)), sizeof size);
	if (size == WRAP) {
		head += RING_BYTES - (head & (RING_BYTES - 1));
		memcpy(&size, ring->bytes, sizeof size);
	}
	upstream_request_unpack(ring->bytes + (head & (RING_BYTES - 1)) + sizeof size, out);
	/* given back at once: the worker may fill these bytes while we handle the request */
	atomic_store_explicit(&ring->head, head + size, memory_order_release);
	return true;
}
