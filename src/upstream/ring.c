/*
 * upstream/ring.c — the request rings from each worker to the resolver
 * thread: single producer, single consumer, a byte ring of packed
 * requests. The packing also keeps the copy of each waiting client's
 * request small (upstream.c).
 *
 * Why packed: a struct upstream_request is about 1.4 KB, nearly all of it
 * room for the largest name, CNAME chain, autopath candidates and client
 * address, while a typical miss uses 150 bytes of it. A ring of whole
 * structs touches every one of its pages as it goes round, so after the
 * first thousand misses it was 1.4 MB resident per worker; packed, the
 * same burst fits in 256 KiB, which is all the ring ever touches. (A burst
 * of 1,000 identical misses must fit while the resolver thread waits for
 * a core: test_identical_misses_share_one_upstream_query. That is about
 * 1,700 typical requests; of the largest possible ones, about 210.)
 *
 * A record is a 4-byte size, then the request's fields in the order
 * transfer() lists them, each variable part only as long as its length
 * field says, padded to 8 bytes. Records never straddle the ring's end: a
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

/*
 * Move one request between r and the record body at p: into p when pack,
 * out of it otherwise; with p NULL (pack only) just count. Every field of
 * struct upstream_request is listed here once, lengths before the parts
 * they measure, so packing and unpacking cannot disagree. Returns the
 * body's size.
 */
static size_t transfer(struct upstream_request *r, uint8_t *p, bool pack)
{
	size_t n = 0;

#define MOVE(field, len)                                                  \
	do {                                                              \
		if (p && pack)                                            \
			memcpy(p + n, &r->field, len);                    \
		else if (p)                                               \
			memcpy(&r->field, p + n, len);                    \
		n += len;                                                 \
	} while (0)
#define FIELD(field) MOVE(field, sizeof r->field)
	FIELD(q.id);
	FIELD(q.flags);
	FIELD(q.question_ok);
	FIELD(q.qtype);
	FIELD(q.qclass);
	FIELD(q.qname_len);
	FIELD(q.qname_labels);
	FIELD(q.has_edns);
	FIELD(q.edns_version);
	FIELD(q.edns_do);
	FIELD(q.edns_udp_size);
	FIELD(q.cookie_len);
	FIELD(chain_len);
	FIELD(chain_ttl);
	FIELD(search);
	FIELD(nxdomain_len);
	FIELD(reply_limit);
	FIELD(udp_payload);
	FIELD(has_cookie);
	FIELD(cookie);
	FIELD(transport);
	FIELD(fd);
	FIELD(peer_len);
	FIELD(conn);
	FIELD(conn_gen);
	FIELD(log_reply);
	FIELD(tap_reply);
	MOVE(q.qname, r->q.qname_len);
	MOVE(q.qname_orig, r->q.qname_len);
	MOVE(q.cookie, r->q.cookie_len);
	MOVE(chain, r->chain_len);
	MOVE(nxdomain, r->nxdomain_len);
	MOVE(peer, r->peer_len);
#undef FIELD
#undef MOVE
	return n;
}

size_t upstream_request_packed_size(const struct upstream_request *r)
{
	return transfer((struct upstream_request *)r, NULL, true); /* only reads it */
}

void upstream_request_pack(const struct upstream_request *r, uint8_t *out)
{
	transfer((struct upstream_request *)r, out, true); /* only reads it */
}

void upstream_request_unpack(const uint8_t *in, struct upstream_request *r)
{
	transfer(r, (uint8_t *)in, false); /* only reads in */
}

/* The lengths index fixed arrays on the reader's side: a writer's bug must not overrun them. */
static bool lengths_fit(const struct upstream_request *r)
{
	return r->q.qname_len <= sizeof r->q.qname && r->q.cookie_len <= sizeof r->q.cookie &&
	       r->chain_len <= sizeof r->chain && r->nxdomain_len <= sizeof r->nxdomain &&
	       r->peer_len <= sizeof r->peer;
}

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

	if (!lengths_fit(r) || RING_BYTES - (tail - head) < skip + size)
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
