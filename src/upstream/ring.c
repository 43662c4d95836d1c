/*
 * upstream/ring.c — the rings between the workers and the resolver
 * thread, each with one producer and one consumer: a worker's requests
 * to the resolver, the resolver's TCP replies back to that worker, and
 * the UDP sockets a worker no longer reads, handed to the resolver.
 * Neither side allocates, locks or waits; the only syscalls are the
 * eventfd writes and reads that wake the other side.
 *
 * Requests: a byte ring of packed requests (request.c).
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
#include "upstream/ring.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define RING_BYTES (256u * 1024) /* a power of two */
#define COMPLETION_SLOTS 1024    /* TCP replies per worker ring; a power of two */
#define SOCKET_SLOTS 64          /* sockets handed over per worker; a power of two */
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

struct request_ring *ring_request_new(void)
{
	/* not cleared: a page of bytes[] costs memory only once a record reaches it */
	struct request_ring *ring = aligned_alloc(64, sizeof *ring);

	if (ring) {
		atomic_init(&ring->head, 0);
		atomic_init(&ring->tail, 0);
	}
	return ring;
}

void ring_request_free(struct request_ring *ring)
{
	free(ring);
}

bool ring_request_put(struct request_ring *ring, const struct upstream_request *r)
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

bool ring_request_take(struct request_ring *ring, struct upstream_request *out)
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

bool ring_request_empty(struct request_ring *ring)
{
	return atomic_load_explicit(&ring->head, memory_order_relaxed) ==
	       atomic_load_explicit(&ring->tail, memory_order_acquire);
}

/* ---- completions ------------------------------------------------------------ */

/*
 * Replies: a ring of COMPLETION_SLOTS slots, head and tail free-running
 * slot counts on cache lines of their own. The resolver writes a slot and
 * publishes it with a release store of tail; the worker copies it out and
 * gives it back with a release store of head. The eventfd is written once
 * per resolver loop turn for all the replies of that turn (signal), not
 * once per reply.
 */
struct completion_ring {
	_Alignas(64) _Atomic uint32_t head; /* next slot the worker reads */
	_Alignas(64) _Atomic uint32_t tail; /* next slot the resolver writes */
	int efd;
	bool signal_pending;                 /* resolver only: an efd write is owed */
	struct upstream_completion slots[COMPLETION_SLOTS];
};

struct completion_ring *ring_completion_new(void)
{
	struct completion_ring *ring = aligned_alloc(64, sizeof *ring);

	if (!ring)
		return NULL;
	/* slots are written before they are read: not cleared, so a worker
	 * that never sees a TCP miss never touches them */
	atomic_init(&ring->head, 0);
	atomic_init(&ring->tail, 0);
	ring->signal_pending = false;
	ring->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ring->efd < 0) {
		free(ring);
		return NULL;
	}
	return ring;
}

void ring_completion_free(struct completion_ring *ring)
{
	if (!ring)
		return;
	uint32_t head = atomic_load(&ring->head), tail = atomic_load(&ring->tail);

	for (; head != tail; head++)
		free(ring->slots[head & (COMPLETION_SLOTS - 1)].framed);
	close(ring->efd);
	free(ring);
}

int ring_completion_fd(const struct completion_ring *ring)
{
	return ring->efd;
}

bool ring_completion_has_room(const struct completion_ring *ring)
{
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_acquire);

	return tail - head < COMPLETION_SLOTS;
}

void ring_completion_put(struct completion_ring *ring, const struct upstream_completion *c)
{
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);

	ring->slots[tail & (COMPLETION_SLOTS - 1)] = *c;
	atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
	ring->signal_pending = true;
}

void ring_completion_signal(struct completion_ring *ring)
{
	uint64_t one = 1;

	if (!ring->signal_pending)
		return;
	ring->signal_pending = false;
	ssize_t ignored = write(ring->efd, &one, sizeof one);
	(void)ignored; /* EAGAIN: the counter is already non-zero */
}

bool ring_completion_take(struct completion_ring *ring, struct upstream_completion *out)
{
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);

	if (head == tail) {
		uint64_t value;
		ssize_t ignored = read(ring->efd, &value, sizeof value);
		(void)ignored;
		/* a completion may have landed between the check and the read */
		tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
		if (head == tail)
			return false;
	}
	*out = ring->slots[head & (COMPLETION_SLOTS - 1)];
	atomic_store_explicit(&ring->head, head + 1, memory_order_release);
	return true;
}

/* ---- sockets handed over ------------------------------------------------------ */

/*
 * A worker hands a socket over only when a listen address goes (a reload),
 * and keeps the ones a full ring refuses for its next turn: a few slots do.
 * The release store of tail that publishes a socket comes after the worker
 * put every request carrying it into its request ring, so a resolver that
 * has seen the socket (acquire) then sees those requests too.
 */
struct socket_ring {
	_Alignas(64) _Atomic uint32_t head; /* next slot the resolver reads */
	_Alignas(64) _Atomic uint32_t tail; /* next slot the worker writes */
	int fds[SOCKET_SLOTS];
};

struct socket_ring *ring_socket_new(void)
{
	struct socket_ring *ring = aligned_alloc(64, sizeof *ring);

	if (ring) {
		atomic_init(&ring->head, 0);
		atomic_init(&ring->tail, 0);
	}
	return ring;
}

void ring_socket_free(struct socket_ring *ring)
{
	free(ring);
}

bool ring_socket_put(struct socket_ring *ring, int fd)
{
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_acquire);

	if (tail - head == SOCKET_SLOTS)
		return false;
	ring->fds[tail & (SOCKET_SLOTS - 1)] = fd;
	atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
	return true;
}

bool ring_socket_take(struct socket_ring *ring, int *fd)
{
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);

	if (head == tail)
		return false;
	*fd = ring->fds[head & (SOCKET_SLOTS - 1)];
	atomic_store_explicit(&ring->head, head + 1, memory_order_release);
	return true;
}
