/*
 * cache/slab — see slab.h for what it owns and why it exists.
 *
 * Layout. Slabs are SLAB_BYTES long and aligned to SLAB_BYTES, so a slot's
 * slab is its address with the low bits cleared. A slab's first 64 bytes
 * are its header; its slots follow, all of one size. A slab hands out
 * slots from its free list (slots given back, newest first: likeliest
 * still in the CPU's cache) and then from its untouched end, so a new
 * slab's pages become resident one by one as the cache grows, not when
 * the slab is made.
 *
 * Each size has a list of its slabs that have a free slot; a slot is taken
 * from the first, and a slab that gets a slot back goes first. A slab
 * whose last slot comes back leaves its list, its pages are given to the
 * kernel (MADV_DONTNEED: a flushed cache's memory leaves the process) and
 * it waits on the empty stack for a slot of any size. Chunks of
 * CHUNK_SLABS slabs are mapped as they are needed and unmapped only by
 * slab_pool_free; the empty stack has room for every slab ever mapped, so
 * giving back never allocates.
 */
#include "cache/slab.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sanitizer/asan_interface.h> /* free slots are poisoned; no-ops without ASan */

#define CHUNK_SLABS 16
#define HEADER_BYTES 64
#define SIZES (SLAB_MAX_SLOT / 16 + 1) /* indexed by slot bytes / 16 */
#define LINK_OFFSET 8                  /* a free slot's link: its second word */

struct slab {
	struct slab *prev, *next;      /* its size's list of slabs with a free slot */
	uint8_t *free;                 /* slots given back, chained at LINK_OFFSET */
	uint32_t slot_bytes;
	uint32_t capacity;             /* slots it has room for */
	uint32_t carved;               /* slots handed out from its untouched end */
	uint32_t live;                 /* slots handed out and not given back */
	bool listed;                   /* on its size's list */
};

_Static_assert(sizeof(struct slab) <= HEADER_BYTES, "slots start after the header");

struct slab_pool {
	pthread_mutex_t lock;
	struct slab *with_room[SIZES];
	struct slab **empty;           /* room for every slab mapped */
	size_t n_empty;
	uint8_t **chunks;
	size_t n_chunks;
	size_t carve_next;             /* slabs of the newest chunk handed out */
	uint64_t limit;                /* on `bytes` for a new slab; 0: none */
	_Atomic uint64_t bytes;        /* slabs holding a slot, times SLAB_BYTES */
};

static struct slab *slab_of(const void *slot)
{
	return (struct slab *)((uintptr_t)slot & ~(uintptr_t)(SLAB_BYTES - 1));
}

static uint8_t *slot_at(struct slab *s, uint32_t i)
{
	return (uint8_t *)s + HEADER_BYTES + (size_t)i * s->slot_bytes;
}

static uint8_t **link_of(uint8_t *slot)
{
	return (uint8_t **)(slot + LINK_OFFSET);
}

struct slab_pool *slab_pool_new(uint64_t max_bytes)
{
	struct slab_pool *p = calloc(1, sizeof *p);

	if (!p)
		return NULL;
	if (pthread_mutex_init(&p->lock, NULL) != 0) {
		free(p);
		return NULL;
	}
	p->limit = max_bytes;
	return p;
}

void slab_pool_free(struct slab_pool *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_chunks; i++)
		munmap(p->chunks[i], SLAB_BYTES * CHUNK_SLABS);
	free(p->chunks);
	free(p->empty);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* CHUNK_SLABS slabs' worth of address space, aligned to SLAB_BYTES: mapped
 * one slab longer, then trimmed. */
static uint8_t *map_aligned_chunk(void)
{
	size_t len = SLAB_BYTES * CHUNK_SLABS;
	uint8_t *m = mmap(NULL, len + SLAB_BYTES, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	uintptr_t start = ((uintptr_t)m + SLAB_BYTES - 1) & ~(uintptr_t)(SLAB_BYTES - 1);
	size_t head = start - (uintptr_t)m;
	if (head)
		munmap(m, head);
	munmap((uint8_t *)start + len, SLAB_BYTES - head);
	return (uint8_t *)start;
}

/* A new chunk, with room on the empty stack for all its slabs. */
static bool add_chunk(struct slab_pool *p)
{
	size_t slabs = (p->n_chunks + 1) * CHUNK_SLABS;
	uint8_t **chunks = realloc(p->chunks, (p->n_chunks + 1) * sizeof *chunks);
	if (!chunks)
		return false;
	p->chunks = chunks;
	struct slab **empty = realloc(p->empty, slabs * sizeof *empty);
	if (!empty)
		return false;
	p->empty = empty;
	uint8_t *chunk = map_aligned_chunk();
	if (!chunk)
		return false;
	p->chunks[p->n_chunks++] = chunk;
	p->carve_next = 0;
	return true;
}

/* An unused slab: the last one emptied, else the next of the newest chunk. */
static struct slab *unused_slab(struct slab_pool *p)
{
	if (p->n_empty)
		return p->empty[--p->n_empty];
	if (p->n_chunks == 0 || p->carve_next == CHUNK_SLABS)
		if (!add_chunk(p))
			return NULL;
	return (struct slab *)(p->chunks[p->n_chunks - 1] + SLAB_BYTES * p->carve_next++);
}

static void list_first(struct slab_pool *p, struct slab *s)
{
	size_t size = s->slot_bytes / 16;

	s->prev = NULL;
	s->next = p->with_room[size];
	if (s->next)
		s->next->prev = s;
	p->with_room[size] = s;
	s->listed = true;
}

static void unlist(struct slab_pool *p, struct slab *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		p->with_room[s->slot_bytes / 16] = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->listed = false;
}

static struct slab *new_slab(struct slab_pool *p, size_t bytes)
{
	uint64_t in_use = atomic_load_explicit(&p->bytes, memory_order_relaxed);

	if (p->limit && in_use + SLAB_BYTES > p->limit)
		return NULL;
	struct slab *s = unused_slab(p);
	if (!s)
		return NULL;
	*s = (struct slab){
		.slot_bytes = (uint32_t)bytes,
		.capacity = (uint32_t)((SLAB_BYTES - HEADER_BYTES) / bytes),
	};
	ASAN_POISON_MEMORY_REGION(slot_at(s, 0), SLAB_BYTES - HEADER_BYTES);
	list_first(p, s);
	atomic_fetch_add_explicit(&p->bytes, SLAB_BYTES, memory_order_relaxed);
	return s;
}

/* A slot of s (which has room): one given back, else the next untouched. */
static uint8_t *take_slot(struct slab_pool *p, struct slab *s)
{
	uint8_t *slot = s->free;

	if (slot)
		s->free = *link_of(slot); /* the link word is never poisoned */
	else
		slot = slot_at(s, s->carved++);
	ASAN_UNPOISON_MEMORY_REGION(slot, s->slot_bytes);
	s->live++;
	if (!s->free && s->carved == s->capacity)
		unlist(p, s);
	return slot;
}

void slab_pool_limit(struct slab_pool *p, uint64_t max_bytes)
{
	pthread_mutex_lock(&p->lock);
	p->limit = max_bytes;
	pthread_mutex_unlock(&p->lock);
}

void *slab_take(struct slab_pool *p, size_t bytes)
{
	if (bytes == 0 || bytes % 16 || bytes > SLAB_MAX_SLOT)
		return NULL;
	pthread_mutex_lock(&p->lock);
	struct slab *s = p->with_room[bytes / 16];
	if (!s)
		s = new_slab(p, bytes);
	uint8_t *slot = s ? take_slot(p, s) : NULL;
	pthread_mutex_unlock(&p->lock);
	return slot;
}

/* The slab's pages go back to the kernel; the slab waits for any size. */
static void release_slab(struct slab_pool *p, struct slab *s)
{
	if (s->listed)
		unlist(p, s);
	madvise(s, SLAB_BYTES, MADV_DONTNEED);
	p->empty[p->n_empty++] = s;
	atomic_fetch_sub_explicit(&p->bytes, SLAB_BYTES, memory_order_relaxed);
}

static void give(struct slab_pool *p, uint8_t *slot)
{
	struct slab *s = slab_of(slot);

	ASAN_UNPOISON_MEMORY_REGION(link_of(slot), sizeof(uint8_t *));
	*link_of(slot) = s->free;
	s->free = slot;
	ASAN_POISON_MEMORY_REGION(slot, LINK_OFFSET);
	ASAN_POISON_MEMORY_REGION(slot + LINK_OFFSET + sizeof(uint8_t *),
				  s->slot_bytes - LINK_OFFSET - sizeof(uint8_t *));
	if (--s->live == 0)
		release_slab(p, s);
	else if (!s->listed)
		list_first(p, s);
}

void slab_give_chain(struct slab_pool *p, void *first, size_t link_offset)
{
	if (!first)
		return;
	pthread_mutex_lock(&p->lock);
	for (uint8_t *slot = first, *next; slot; slot = next) {
		ASAN_UNPOISON_MEMORY_REGION(slot + link_offset, sizeof(void *));
		next = *(uint8_t **)(slot + link_offset);
		give(p, slot);
	}
	pthread_mutex_unlock(&p->lock);
}

uint64_t slab_pool_bytes(const struct slab_pool *p)
{
	return atomic_load_explicit(&p->bytes, memory_order_relaxed);
}
