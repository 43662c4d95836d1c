/*
 * cache — a byte-bounded, sharded, RCU-read answer cache for upstream replies.
 *
 * Layout. The cache is split into up to 64 shards (fewer when cache.size is
 * small, so each shard keeps at least 64 KiB). A key's shard comes from the
 * hash of its name alone, so every type of one name lives in one shard and
 * cache_flush(name) visits one shard. Each shard has an array of bucket
 * heads that doubles whenever its entries outnumber its buckets, up to a
 * cap of one bucket per 128 budget bytes: a one-record answer is charged
 * about 160, so a full cache's chains average under one entry, and a
 * name not in the cache (every name of a flood) passes about 0.7 cold
 * entries where a cap of one per 256 bytes passed 1.4 (docs/performance.md,
 * "Cold misses"). The arrays at their cap are charged against cache.size
 * up front. Growing, not allocating the cap at once, is about resident
 * memory: a 64 MiB cache has 4 MiB of bucket heads at its cap, written
 * all over by the first few thousand inserts, while 10,000 names need
 * 128 KiB. A doubling relinks one shard's entries (O(entries in the
 * shard), at most 10 times per shard from the initial 8 buckets to the
 * cap of a 64 MiB cache) under the shard lock, then waits
 * for one grace period before freeing the old array: amortised O(1) per
 * insert, and the resolver thread that inserts pays it, never a reader.
 *
 * Entries. One allocation per entry (a slot of the cache's own slabs, or a
 * spare: see Recycling and Memory) holds the key (lower-cased qname,
 * qtype, qclass, DO/CD bits), the cached reply's header flags and
 * section counts, the answer/authority/additional bytes exactly as the
 * upstream sent them (minus OPT and anything after it), and the offset
 * of every record's TTL field. Entries are immutable once published,
 * apart from two one-byte flags readers set atomically:
 * the CLOCK referenced bit and the prefetch claim. Compression pointers in
 * the stored bytes point into the upstream message; the question sits at
 * offset 12 and the client's qname has the same wire length as the key's,
 * so a reply rebuilt as header + client's question + stored bytes keeps
 * every pointer valid. cache_insert checks that the upstream question
 * matches, that every owner name's pointers point backwards and past the
 * header, and that what they lead to lies before the name's first pointer
 * and outside every TTL field, and walks the names inside NS, CNAME, PTR,
 * DNAME, MX, SRV and SOA rdata the same way, so no name we store reads
 * bytes we rewrite (header, TTLs) or drop (OPT and after).
 *
 * Concurrency: readers (workers) never lock. They find a shard's array
 * through the cache's directory (one word: address and size), never the
 * shard itself, whose line writers keep writing; walk a bucket chain under
 * the liburcu memb read lock (a thread-local counter), compare keys, and
 * copy the entry out while it cannot be freed. Writers (the resolver thread
 * inserting, the control thread flushing) take the shard's mutex, publish a
 * new entry with a release store of the bucket head, unlink old ones with a
 * release store of their predecessor's next pointer (each entry keeps where
 * that pointer is: pprev), and, once the shard's mutex is let go, put them on
 * the cache's limbo list. When limbo holds 1/64 of cache.size (or at the end
 * of a flush) the writer, outside every lock, waits for one grace period
 * (urcu_memb_synchronize_rcu) and frees the whole batch: no reader that could
 * have seen those entries is still inside its read-side section. A reader
 * therefore never waits, and a copy never sees freed memory. We chose RCU
 * over per-shard spinlocks or mutexes because the hot path already runs under
 * the memb read lock once per batch, so a hit costs no atomic
 * read-modify-write on a shared line (except the rarely taken prefetch claim,
 * and a plain store of the referenced bit only when it was clear; hit/miss
 * counters are per-thread stripes); a seqlock would have needed deferred
 * frees anyway. We free in batches on the writer rather than with call_rcu so
 * there is no extra thread, and so memory waiting for a grace period is
 * counted.
 *
 * Recycling. An entry back from limbo is not given back to its slab when
 * it is small (at most SPARE_MAX_BYTES): it waits on a spare list for its
 * size (16-byte classes) and the next insert of that size takes it. A
 * full cache in a flood of new names evicts one entry per insert, and
 * giving each back and taking a slot again (a write into each freed
 * entry, long out of the CPU's caches, and the pool's lock) costs more
 * than taking one from a list. Each reclaim keeps what
 * it frees as the new spares (up to the limbo trigger's worth) and gives
 * the spares left from the batch before back to their slabs: a size nobody
 * asked for within one batch is not the flood's, so memory never waits
 * for a size that stopped coming. Limbo is kept in the same classes
 * (each entry sorted as it is removed, still in the CPU's cache), so a
 * reclaim passes whole lists on and reads only the entries it frees.
 *
 * Memory. Each entry is charged round_up(header + TTL offsets + qname +
 * sections, 16) + 16 bytes (ENTRY_OVERHEAD: for a typical entry of 150-400
 * bytes, more than its share of its slab's header and unused end; a slab
 * of 2 KiB slots leaves up to 3 % unused, and free slots of partly used
 * slabs are not charged, as malloc's fragmentation was not; for an entry
 * over SPARE_MAX_BYTES, malloc's chunk header). cache.size is split into
 * the bucket arrays at their cap (1/16), a limbo reserve (1/32) and the
 * shards' budgets (the rest, evenly). Dead, expired and stale entries
 * count like live ones; entries in limbo count until they are freed. The
 * reserve holds limbo, which an insert that fills it to half reclaims
 * before it returns, and the spares, kept to the other half. The header is
 * 80 bytes, so a one-record A answer for a 27-byte name is charged 160
 * bytes (plus about 11 bytes of bucket share): 8 MiB holds about 47,500 of
 * them. Entries of up to SPARE_MAX_BYTES live in slots of 64 KiB slabs
 * the cache maps for itself (cache/slab.h), not in malloc's heap, where
 * a large cache's long-lived entries scattered the resolver's short-lived
 * chunks over all of its memory (docs/performance.md, "Cold misses",
 * item 20); cache_stats' slab_bytes is what those slabs hold, at most
 * slab_limit (past it, an entry that finds no slot is malloc's, charged as
 * a large one: slot_or_overflow).
 *
 * Eviction: CLOCK per shard. Entries sit on a circular list; new ones go
 * just behind the hand (so they get one full revolution), a hit sets the
 * entry's referenced bit, and when a shard needs room the hand sweeps:
 * an expired entry (stale or dead) goes at once whatever its bit, a live
 * referenced entry loses its bit and survives, a live unreferenced one
 * goes. Why a hot name survives a flood of random names: each flood name is
 * inserted once and never hit again, so it is unreferenced when the hand
 * reaches it and is evicted; the hot name is hit at least once per
 * revolution (one revolution = a shard's worth of inserts, hundreds at
 * least), so its bit is always set when the hand arrives and it stays.
 * Expired entries past the stale window are misses to readers and are
 * freed lazily, the next time the hand passes them. The sweep is bounded
 * (two revolutions; then it evicts regardless of bits) so readers setting
 * bits cannot keep a writer spinning.
 *
 * Resizing (cache_configure, a live reload of cache.size): the shard count
 * chosen by cache_new stays; each shard in turn, under its lock, gets its
 * new budget and bucket cap, evicts down to the budget with the CLOCK
 * hand, and, when its array is larger than the new cap, has its entries
 * relinked into a new array that is then published (the old one is freed
 * after a grace period). Readers never wait; a reader racing the
 * relinking of its chain may miss (see rehash; growing relinks the same
 * way), and the resolver's insert into that shard waits for one shard's work:
 * O(its entries), well under a millisecond for a 1 MiB shard. Until the
 * last shard is done the total may still exceed a smaller cap; after, the
 * accounting holds again. The TTL bounds, serve-stale and prefetch apply
 * to what is stored and served from then on: entries keep the lifetime
 * they were stored with.
 *
 * Walking (cache_walk, for `localdns ctl dump-cache`): bucket by bucket,
 * under the RCU read lock like a reader, copying entries into a batch; the
 * lock is dropped before the caller sees the copies, so a caller that
 * blocks (a slow socket) holds no lock and delays no grace period. A
 * batch stops between buckets, so an entry that stays is seen once. We
 * walk buckets rather than the CLOCK ring because the ring is writers'
 * state (under the shard mutex) and the walk must not stall inserts.
 * The arrays change size under a walk, so it walks a shard's buckets as
 * they were numbered when it reached the shard: bucket b under mask m
 * holds the entries whose hash & m == b, wherever they sit now. A shard's
 * relinking count (odd while relinking) tells the walk to take a bucket
 * again when entries moved while it read them.
 *
 * Costs: a hit is one hash over the name, one chain walk (about one entry),
 * one memcpy of the stored sections and one 4-byte store per record TTL.
 * Insert is O(message) plus eviction, which is amortised O(1) per insert.
 * Flushing one name is O(entries in its shard); flushing all is O(entries).
 * A walk is O(buckets + entry bytes).
 */
#include "cache/cache.h"

#include "dns/wire.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sanitizer/asan_interface.h> /* spares are poisoned; no-ops without ASan */
#include <urcu/urcu-memb.h>

#include "cache/slab.h"
#include "util/tsan.h" /* readers release, frees after a grace period acquire */

#define MAX_SHARDS 64
#define SHARD_MIN_BYTES (64 * 1024)
#define BUDGET_BYTES_PER_BUCKET 128
#define MIN_BUCKETS 8          /* a new shard's array, and the smallest cap */
#define BUCKETS_ALIGN 64       /* a directory word's low bits hold log2 of the size */
#define ENTRY_HEADER_BYTES 80 /* sizeof(struct entry), checked below */
#define ENTRY_OVERHEAD 16     /* charged for an entry's share of its slab (see Memory) */
#define SPARE_MAX_BYTES SLAB_MAX_SLOT /* larger entries are malloc's */
#define SPARE_CLASSES (SPARE_MAX_BYTES / 16 + 1)
#define RR_FIXED_LEN 10
#define MAX_RRS (DNS_MAX_MESSAGE / (1 + RR_FIXED_LEN) + 1)
#define FLAGS_OPCODE_MASK 0x7800
#define FLAGS_RCODE_MASK 0x000F

#define KEY_DO 1
#define KEY_CD 2

enum entry_kind { KIND_POSITIVE, KIND_NEGATIVE, KIND_SERVFAIL };

struct entry {
	_Atomic(struct entry *) next;  /* bucket chain; read by RCU readers */
	/* What points at this entry: its bucket head or the next field of the
	 * entry before it (writers only). Unlinking then reads nothing of the
	 * chain: an evicted entry is the oldest, at the end of its chain, and
	 * walking there from the head was a cache miss per entry passed. */
	_Atomic(struct entry *) *pprev;
	struct entry *clock_prev;      /* CLOCK ring; writers only */
	struct entry *clock_next;
	uint64_t hash;                 /* full key hash */
	uint64_t inserted;             /* now at insert; it expires at inserted + ttl */
	uint32_t ttl;
	uint32_t charge;               /* bytes counted against the shard */
	uint16_t flags;                /* the upstream header's flags word */
	uint16_t counts[3];            /* records per section, OPT excluded */
	uint16_t sec_len;              /* stored section bytes */
	uint16_t add_off;              /* where the additional section starts */
	uint16_t nttl;                 /* TTL offsets, ascending */
	uint16_t qtype;
	uint16_t qclass;
	uint8_t keyflags;              /* KEY_DO | KEY_CD */
	uint8_t kind;                  /* enum entry_kind */
	uint8_t qname_len;
	atomic_uchar referenced;       /* CLOCK bit, set by readers */
	atomic_uchar refresh_claimed;  /* prefetch handed to one reader */
	uint8_t gen;                   /* the cache's generation at insert (cache_make_all_stale) */
	/* ttl_off[nttl], then qname[qname_len], then sections[sec_len] */
	uint16_t ttl_off[];
};

_Static_assert(sizeof(struct entry) == ENTRY_HEADER_BYTES,
	       "update the memory notes at the top of this file");

/* A shard's bucket heads; replaced whole (and freed after a grace period) on resize. */
struct buckets {
	uint64_t mask;
	_Atomic(struct entry *) head[];
};

struct shard {
	pthread_mutex_t lock;          /* writers only; readers never take it */
	struct cache *cache;           /* for the limbo list */
	_Atomic(struct buckets *) table; /* read by RCU readers */
	_Atomic uint32_t relinking;    /* odd while entries move between arrays (walks) */
	_Atomic uint64_t nbuckets;     /* the array's size, for cache_stats; under lock */
	uint64_t max_buckets;          /* the array's cap; under lock */
	struct entry *hand;            /* CLOCK hand; NULL when the shard is empty */
	struct entry *removed;         /* unlinked under this lock, for limbo once it is let go, */
	uint64_t removed_bytes;        /* ... and their charge */
	_Atomic uint64_t budget;       /* written under lock; insert peeks before locking */
	/* written under lock, read by cache_stats */
	_Atomic uint64_t bytes, entries, inserts, evictions;
} __attribute__((aligned(64)));

/* Reader-side counters, one cache line per stripe; each reader thread
 * sticks to one stripe, so with up to STRIPES workers no two share a line
 * and counting a hit never bounces a line between cores. */
#define STRIPES 64
struct stripe {
	_Atomic uint64_t hits, misses, stale_hits, prefetches;
} __attribute__((aligned(64)));

static atomic_uint next_stripe;
static _Thread_local unsigned my_stripe = UINT32_MAX;

/* cache_config, each field changeable while the cache runs (cache_configure).
 * A reader may see one field old and another new for one lookup: harmless. */
struct live_config {
	_Atomic uint64_t max_bytes;
	_Atomic uint32_t min_ttl, max_ttl, negative_max_ttl, servfail_ttl, stale_max_age,
		stale_answer_ms;
	atomic_bool serve_stale, prefetch;
};

struct cache {
	struct live_config cfg;
	unsigned nshards;              /* fixed at cache_new, whatever later resizes do */
	unsigned shard_shift;          /* 64 - log2(nshards); 64 means one shard */
	_Atomic uint64_t fixed_bytes;  /* bucket arrays */
	_Atomic uint64_t rejected;
	_Atomic uint64_t slab_overflows;
	/* Unlinked entries waiting for a grace period, chained by clock_next
	 * in one list per spare class (limbo[0]: too large to be a spare),
	 * counted per class (for limbo[0], their charge in limbo_large_bytes:
	 * a batch knows its own bytes without reading an entry, whatever a
	 * concurrent reclaim takes); charged in `limbo_bytes` until freed. Taken with
	 * no shard lock held (unlock_shard moves a shard's removed entries in,
	 * sorted while they are still in the CPU's cache, so that reclaim
	 * hands whole lists over to the spares without reading an entry). */
	pthread_mutex_t limbo_lock;
	struct entry *limbo[SPARE_CLASSES];
	uint64_t limbo_count[SPARE_CLASSES];
	uint64_t limbo_large_bytes;
	_Atomic uint64_t limbo_bytes;
	_Atomic uint64_t limbo_trigger; /* reclaim once limbo holds this much */
	/* Entries back from limbo for reuse, by allocated size / 16, chained
	 * by clock_next and poisoned for ASan but for that field; charged in
	 * `spare_bytes`, at most limbo_trigger. Under limbo_lock. */
	struct entry *spare[SPARE_CLASSES];
	_Atomic uint64_t spare_bytes;
	struct slab_pool *slabs;       /* entries of up to SPARE_MAX_BYTES (slab.h) */
	/* cache_make_all_stale: an entry inserted before the second stale_upto,
	 * or in it under another generation, counts as expired. */
	_Atomic uint64_t stale_upto;
	atomic_uchar gen;
	struct shard *shards;
	/* Names are hashed with SipHash under this key, drawn at cache_new:
	 * clients choose the names, and must not be able to choose ones that
	 * share a chain. */
	uint8_t hash_key[16];
	/* The readers' copy of each shard's bucket array: its address, with
	 * log2 of its size in the low bits (arrays are BUCKETS_ALIGN-aligned).
	 * A look-up reads this one word, not the shard (whose line every
	 * insert writes) and then the array's header for its mask: two misses
	 * in a row less when a flood leaves both cold. Published with the
	 * shard's own pointer (publish_table). */
	_Atomic uintptr_t directory[MAX_SHARDS];
	struct stripe stripes[STRIPES];
};

/* ---- small helpers ------------------------------------------------------ */

static uint64_t name_hash(const struct cache *c, const uint8_t *name, size_t len)
{
	return dns_siphash13(c->hash_key, name, len);
}

static uint64_t mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static uint64_t key_hash(uint64_t nh, uint16_t qtype, uint16_t qclass,
			 uint8_t keyflags)
{
	return mix64(nh ^ ((uint64_t)qtype << 24 | (uint64_t)qclass << 8 | keyflags));
}

static unsigned shard_index(const struct cache *c, uint64_t nh)
{
	return c->shard_shift >= 64 ? 0 : (unsigned)(mix64(nh) >> c->shard_shift);
}

static struct shard *shard_of(const struct cache *c, uint64_t nh)
{
	return &c->shards[shard_index(c, nh)];
}

static uint8_t query_keyflags(const struct dns_query *q)
{
	return (uint8_t)((q->edns_do ? KEY_DO : 0) |
			 ((q->flags & DNS_F_CD) ? KEY_CD : 0));
}

static uint64_t entry_expire(const struct entry *e)
{
	return e->inserted + e->ttl;
}

static uint8_t *entry_qname(struct entry *e)
{
	return (uint8_t *)(e->ttl_off + e->nttl);
}

static uint8_t *entry_sections(struct entry *e)
{
	return entry_qname(e) + e->qname_len;
}

static uint32_t clamp32(uint32_t v, uint32_t lo, uint32_t hi)
{
	if (v < lo)
		v = lo;
	return v > hi ? hi : v;
}

static uint32_t min32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* ---- lifecycle ---------------------------------------------------------- */

static uint64_t floor_pow2(uint64_t v)
{
	uint64_t p = 1;

	while (p <= v / 2)
		p *= 2;
	return p;
}

/* How max_bytes is split for nshards shards (see "Memory" above). */
struct layout {
	uint64_t nbuckets;             /* per shard, at the cap */
	uint64_t fixed_bytes;          /* every shard's bucket array at its cap */
	uint64_t limbo_trigger;
	uint64_t budget;               /* per shard, for entries */
};

static struct layout plan_layout(uint64_t max_bytes, unsigned nshards)
{
	struct layout l;
	uint64_t nbuckets = floor_pow2(max_bytes / nshards / BUDGET_BYTES_PER_BUCKET);

	l.nbuckets = nbuckets < MIN_BUCKETS ? MIN_BUCKETS : nbuckets;
	l.fixed_bytes = l.nbuckets * sizeof(struct entry *) * nshards;
	/* Room kept for the limbo list: 1/32 of the cap, reclaimed at half. */
	uint64_t limbo_reserve = max_bytes / 32;
	l.limbo_trigger = limbo_reserve / 2;
	uint64_t usable = max_bytes > l.fixed_bytes + limbo_reserve ?
				  max_bytes - l.fixed_bytes - limbo_reserve : 0;
	l.budget = usable / nshards;
	return l;
}

static struct buckets *new_buckets(uint64_t n)
{
	size_t bytes = (sizeof(struct buckets) + n * sizeof(_Atomic(struct entry *)) +
			BUCKETS_ALIGN - 1) & ~(size_t)(BUCKETS_ALIGN - 1);
	struct buckets *b = aligned_alloc(BUCKETS_ALIGN, bytes);

	if (b) {
		memset(b, 0, bytes);
		b->mask = n - 1;
	}
	return b;
}

/* Make b s's array, for writers (s->table) and readers (the directory);
 * s locked, or not yet shared. */
static void publish_table(struct shard *s, struct buckets *b)
{
	struct cache *c = s->cache;
	uintptr_t word = (uintptr_t)b | (uintptr_t)__builtin_ctzll(b->mask + 1);

	atomic_store_explicit(&s->table, b, memory_order_release);
	atomic_store_explicit(&c->directory[s - c->shards], word, memory_order_release);
}

static void store_config(struct live_config *to, const struct cache_config *cfg)
{
	atomic_store_explicit(&to->max_bytes, cfg->max_bytes, memory_order_relaxed);
	atomic_store_explicit(&to->min_ttl, cfg->min_ttl, memory_order_relaxed);
	atomic_store_explicit(&to->max_ttl, cfg->max_ttl, memory_order_relaxed);
	atomic_store_explicit(&to->negative_max_ttl, cfg->negative_max_ttl, memory_order_relaxed);
	atomic_store_explicit(&to->servfail_ttl, cfg->servfail_ttl, memory_order_relaxed);
	atomic_store_explicit(&to->stale_max_age, cfg->stale_max_age, memory_order_relaxed);
	atomic_store_explicit(&to->stale_answer_ms, cfg->stale_answer_ms, memory_order_relaxed);
	atomic_store_explicit(&to->serve_stale, cfg->serve_stale, memory_order_relaxed);
	atomic_store_explicit(&to->prefetch, cfg->prefetch, memory_order_relaxed);
}

static void load_config(const struct live_config *from, struct cache_config *cfg)
{
	*cfg = (struct cache_config){
		.max_bytes = atomic_load_explicit(&from->max_bytes, memory_order_relaxed),
		.min_ttl = atomic_load_explicit(&from->min_ttl, memory_order_relaxed),
		.max_ttl = atomic_load_explicit(&from->max_ttl, memory_order_relaxed),
		.negative_max_ttl = atomic_load_explicit(&from->negative_max_ttl,
							 memory_order_relaxed),
		.servfail_ttl = atomic_load_explicit(&from->servfail_ttl, memory_order_relaxed),
		.serve_stale = atomic_load_explicit(&from->serve_stale, memory_order_relaxed),
		.stale_max_age = atomic_load_explicit(&from->stale_max_age, memory_order_relaxed),
		.stale_answer_ms = atomic_load_explicit(&from->stale_answer_ms, memory_order_relaxed),
		.prefetch = atomic_load_explicit(&from->prefetch, memory_order_relaxed),
	};
}

/* The slabs' limit for a cache of max_bytes: its entries' charge with a
 * quarter more for partly used slabs, and a slab each for 32 sizes.
 * Normal traffic stays far below it (the charge already counts 16 bytes
 * an entry); what it stops is a client pinning slabs (cache/slab.h). */
static uint64_t slab_limit(uint64_t max_bytes)
{
	return max_bytes + max_bytes / 4 + 32 * SLAB_BYTES;
}

static void free_shards(struct cache *c, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		pthread_mutex_destroy(&c->shards[i].lock);
		free(atomic_load(&c->shards[i].table));
	}
	free(c->shards);
}

struct cache *cache_new(const struct cache_config *cfg)
{
	if (!cfg)
		return NULL;
	struct cache *c = aligned_alloc(64, (sizeof(*c) + 63) & ~(size_t)63);
	if (!c)
		return NULL;
	memset(c, 0, sizeof(*c));
	store_config(&c->cfg, cfg);
	if (getrandom(c->hash_key, sizeof c->hash_key, 0) != (ssize_t)sizeof c->hash_key) {
		free(c);
		return NULL;
	}

	unsigned n = MAX_SHARDS, bits = 6;
	while (n > 1 && cfg->max_bytes / n < SHARD_MIN_BYTES) {
		n /= 2;
		bits--;
	}
	c->nshards = n;
	c->shard_shift = 64 - bits;

	c->shards = aligned_alloc(64, sizeof(struct shard) * n);
	if (!c->shards) {
		free(c);
		return NULL;
	}
	memset(c->shards, 0, sizeof(struct shard) * n);
	c->slabs = slab_pool_new(slab_limit(cfg->max_bytes));
	if (!c->slabs || pthread_mutex_init(&c->limbo_lock, NULL) != 0) {
		slab_pool_free(c->slabs);
		free(c->shards);
		free(c);
		return NULL;
	}

	struct layout l = plan_layout(cfg->max_bytes, n);
	atomic_init(&c->fixed_bytes, l.fixed_bytes);
	atomic_init(&c->limbo_trigger, l.limbo_trigger);
	for (unsigned i = 0; i < n; i++) {
		struct shard *s = &c->shards[i];
		struct buckets *b = new_buckets(MIN_BUCKETS);
		if (!b || pthread_mutex_init(&s->lock, NULL) != 0) {
			free(b);
			free_shards(c, i);
			pthread_mutex_destroy(&c->limbo_lock);
			slab_pool_free(c->slabs);
			free(c);
			return NULL;
		}
		s->cache = c;
		publish_table(s, b);
		atomic_init(&s->nbuckets, MIN_BUCKETS);
		s->max_buckets = l.nbuckets;
		atomic_init(&s->budget, l.budget);
	}
	return c;
}

/* ---- entry memory: slabs, limbo, spares -------------------------------- */

/* What an entry's allocation holds: a multiple of 16, its charge less the overhead allowed. */
static size_t entry_alloc_bytes(const struct entry *e)
{
	return e->charge - ENTRY_OVERHEAD;
}

/* The spare list for allocations of that many bytes, or 0 when none is kept. */
static size_t spare_class(size_t alloc_bytes)
{
	return alloc_bytes <= SPARE_MAX_BYTES ? alloc_bytes / 16 : 0;
}

/* A spare is nobody's until an insert takes it: ASan reports any access
 * to it but to the link that chains it. Only a sanitized build walks the
 * list to say so: not reading the entries is what reclaim is for. */
static void poison_spares(struct entry *list, size_t alloc_bytes)
{
#if defined(__SANITIZE_ADDRESS__)
	size_t link = offsetof(struct entry, clock_next), after = link + sizeof list->clock_next;

	for (; list; list = list->clock_next) {
		ASAN_POISON_MEMORY_REGION(list, link);
		ASAN_POISON_MEMORY_REGION((uint8_t *)list + after, alloc_bytes - after);
	}
#else
	(void)list;
	(void)alloc_bytes;
#endif
}

/* Entries too large for a slab, chained by clock_next, back to malloc. */
static void free_large(struct entry *list)
{
	for (struct entry *next; list; list = next) {
		next = list->clock_next;
		free(list);
	}
}

/* Entries of slab sizes, chained by clock_next, back to their slabs. */
static void free_slotted(struct cache *c, struct entry *list)
{
	slab_give_chain(c->slabs, list, offsetof(struct entry, clock_next));
}

static void free_spares(struct cache *c, struct entry *spare[SPARE_CLASSES])
{
	for (size_t k = 1; k < SPARE_CLASSES; k++)
		free_slotted(c, spare[k]);
}

/*
 * Install `spare` (holding `kept` bytes) as the cache's spares, and take
 * back the `freed` bytes of limbo it came from, at once, so the accounted
 * total never counts an entry twice. `spare` gets the spares it replaced.
 */
static void swap_spares(struct cache *c, struct entry *spare[SPARE_CLASSES], uint64_t kept,
			uint64_t freed)
{
	pthread_mutex_lock(&c->limbo_lock);
	for (size_t k = 0; k < SPARE_CLASSES; k++) {
		struct entry *old = c->spare[k];
		c->spare[k] = spare[k];
		spare[k] = old;
	}
	atomic_store_explicit(&c->spare_bytes, kept, memory_order_relaxed);
	atomic_fetch_sub_explicit(&c->limbo_bytes, freed, memory_order_relaxed);
	pthread_mutex_unlock(&c->limbo_lock);
}

/*
 * Past the slabs' limit, an entry that finds no slot is malloc's at this
 * size, so it is charged, kept in limbo and freed as an entry over
 * SPARE_MAX_BYTES is. Charged more than its bytes, it counts against
 * cache.size like any entry: the heap it takes is bounded by that, and a
 * client that pins slabs (a hot entry in each) costs the cache room, not
 * the node memory or the caching of the sizes without a slab.
 */
#define OVERFLOW_ALLOC_BYTES (SPARE_MAX_BYTES + 16)

/* A slot in the slabs, or past their limit the heap at OVERFLOW_ALLOC_BYTES
 * (*alloc_bytes raised to it). */
static struct entry *slot_or_overflow(struct cache *c, size_t *alloc_bytes)
{
	struct entry *e = slab_take(c->slabs, *alloc_bytes);

	if (e)
		return e;
	if ((e = malloc(OVERFLOW_ALLOC_BYTES))) {
		*alloc_bytes = OVERFLOW_ALLOC_BYTES;
		atomic_fetch_add_explicit(&c->slab_overflows, 1, memory_order_relaxed);
	}
	return e;
}

/* An entry's memory: a spare of its size when there is one, else a new
 * slot (slot_or_overflow); malloc's when it is too large for either.
 * *alloc_bytes is what the entry holds and is charged for. */
static struct entry *entry_alloc(struct cache *c, size_t *alloc_bytes)
{
	size_t k = spare_class(*alloc_bytes);
	struct entry *e = NULL;

	/* a cache not yet full has no spares: no lock then */
	if (k && atomic_load_explicit(&c->spare_bytes, memory_order_relaxed) > 0) {
		pthread_mutex_lock(&c->limbo_lock);
		e = c->spare[k];
		if (e) {
			c->spare[k] = e->clock_next;
			atomic_fetch_sub_explicit(&c->spare_bytes, *alloc_bytes + ENTRY_OVERHEAD,
						  memory_order_relaxed);
		}
		pthread_mutex_unlock(&c->limbo_lock);
	}
	if (!e)
		return k ? slot_or_overflow(c, alloc_bytes) : malloc(*alloc_bytes);
	ASAN_UNPOISON_MEMORY_REGION(e, *alloc_bytes);
	return e;
}

/* The first n entries of *list (n >= 1, at most its length), as a chain of
 * their own; *list keeps the rest. */
static struct entry *cut_front(struct entry **list, uint64_t n)
{
	struct entry *first = *list, *last = first;

	while (--n)
		last = last->clock_next;
	*list = last->clock_next;
	last->clock_next = NULL;
	return first;
}

/*
 * Take what is in limbo once no reader can still see it: each class's
 * list, up to the limbo trigger's worth in all, becomes that class's
 * spares; the rest and the spares these replace go back to their slabs,
 * the entries too large to be spares to malloc. Whole lists change
 * hands, so the only entries read are the ones freed: in a flood, a batch is thousands of
 * entries evicted long ago, out of the CPU's caches, and reading each
 * (one cache miss apiece) stalled the inserting thread for about a
 * millisecond a batch of a 64 MiB cache (docs/performance.md, "Cold
 * misses"). Writers call this after dropping their shard lock, never
 * inside an RCU read-side section. One grace period
 * (urcu_memb_synchronize_rcu: a membarrier, microseconds) covers the
 * whole batch.
 */
static void reclaim(struct cache *c)
{
	struct entry *batch[SPARE_CLASSES], *spare[SPARE_CLASSES] = {0};
	uint64_t count[SPARE_CLASSES], kept = 0, freed;
	uint64_t cap = atomic_load_explicit(&c->limbo_trigger, memory_order_relaxed);

	pthread_mutex_lock(&c->limbo_lock);
	memcpy(batch, c->limbo, sizeof batch);
	memcpy(count, c->limbo_count, sizeof count);
	freed = c->limbo_large_bytes;
	memset(c->limbo, 0, sizeof c->limbo);
	memset(c->limbo_count, 0, sizeof c->limbo_count);
	c->limbo_large_bytes = 0;
	pthread_mutex_unlock(&c->limbo_lock);
	for (size_t k = 1; k < SPARE_CLASSES; k++)
		freed += count[k] * (k * 16 + ENTRY_OVERHEAD);
	if (freed) {
		urcu_memb_synchronize_rcu();
		TSAN_GRACE_ACQUIRE();
	}
	free_large(batch[0]);
	for (size_t k = 1; k < SPARE_CLASSES; k++) {
		uint64_t charge = k * 16 + ENTRY_OVERHEAD;
		uint64_t room = (cap - kept) / charge;

		/* over the cap: the most recently removed go, still in the CPU's cache */
		if (count[k] > room)
			free_slotted(c, cut_front(&batch[k], count[k] - room));
		count[k] = count[k] < room ? count[k] : room;
		kept += count[k] * charge;
		poison_spares(batch[k], k * 16);
		spare[k] = batch[k];
	}
	swap_spares(c, spare, kept, freed);
	free_spares(c, spare);
}

static void maybe_reclaim(struct cache *c)
{
	if (atomic_load_explicit(&c->limbo_bytes, memory_order_relaxed) >=
	    atomic_load_explicit(&c->limbo_trigger, memory_order_relaxed))
		reclaim(c);
}

/*
 * A shard's counter moved by delta, s locked: its one writer at a time, so
 * a plain read and store (readers of the counters only read them). Not a
 * locked read-modify-write: that waits until every store before it is in
 * memory, and an eviction has just stored into entries nobody touched for
 * a while (their cache lines still on their way).
 */
static void shard_count(_Atomic uint64_t *counter, int64_t delta)
{
	atomic_store_explicit(counter,
			      atomic_load_explicit(counter, memory_order_relaxed) + (uint64_t)delta,
			      memory_order_relaxed);
}

/* e at the front of the chain at head (s locked), not yet visible there:
 * the caller's store of head publishes it. */
static void chain_push(_Atomic(struct entry *) *head, struct entry *e, memory_order next_order)
{
	struct entry *first = atomic_load_explicit(head, memory_order_relaxed);

	atomic_store_explicit(&e->next, first, next_order);
	e->pprev = head;
	if (first)
		first->pprev = &e->next;
}

/* Unlink e from its bucket chain and the CLOCK ring; it goes to limbo, to
 * be freed after a grace period, when s is unlocked (unlock_shard). Caller
 * holds s->lock. */
static void remove_entry(struct shard *s, struct entry *e)
{
	struct entry *next = atomic_load_explicit(&e->next, memory_order_relaxed);

	atomic_store_explicit(e->pprev, next, memory_order_release);
	if (next)
		next->pprev = e->pprev;

	if (e->clock_next == e) {
		s->hand = NULL;
	} else {
		e->clock_prev->clock_next = e->clock_next;
		e->clock_next->clock_prev = e->clock_prev;
		if (s->hand == e)
			s->hand = e->clock_next;
	}
	shard_count(&s->bytes, -(int64_t)e->charge);
	shard_count(&s->entries, -1);
	s->removed_bytes += e->charge;
	e->clock_next = s->removed;
	s->removed = e;
}

/*
 * Let s go, then put what it removed meanwhile in limbo, each entry on its
 * class's list while removing it has left it in the CPU's cache, under
 * the limbo lock once for them all (taken inside the shard lock, right
 * after an eviction, it waited for the evicted entry's stores to reach
 * memory).
 */
static void unlock_shard(struct shard *s)
{
	struct entry *removed = s->removed;
	uint64_t bytes = s->removed_bytes;

	s->removed = NULL;
	s->removed_bytes = 0;
	pthread_mutex_unlock(&s->lock);
	if (!removed)
		return;
	struct cache *c = s->cache;
	pthread_mutex_lock(&c->limbo_lock);
	for (struct entry *next; removed; removed = next) {
		size_t k = spare_class(entry_alloc_bytes(removed));

		next = removed->clock_next;
		removed->clock_next = c->limbo[k];
		c->limbo[k] = removed;
		if (k == 0)
			c->limbo_large_bytes += removed->charge;
		else
			c->limbo_count[k]++;
	}
	atomic_fetch_add_explicit(&c->limbo_bytes, bytes, memory_order_relaxed);
	pthread_mutex_unlock(&c->limbo_lock);
}

static void flush_shard(struct shard *s, const uint8_t *name, size_t name_len)
{
	pthread_mutex_lock(&s->lock);
	if (!name) {
		while (s->hand)
			remove_entry(s, s->hand);
	} else if (s->hand) {
		uint64_t n = atomic_load_explicit(&s->entries, memory_order_relaxed);
		struct entry *e = s->hand;
		for (uint64_t i = 0; i < n && s->hand; i++) {
			struct entry *next = e->clock_next;
			if (e->qname_len == name_len &&
			    memcmp(entry_qname(e), name, name_len) == 0)
				remove_entry(s, e);
			e = next;
		}
	}
	unlock_shard(s);
}

void cache_make_all_stale(struct cache *c, uint64_t now)
{
	atomic_store_explicit(&c->stale_upto, now, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->gen, 1, memory_order_relaxed);
}

void cache_flush(struct cache *c, const uint8_t *name_or_null)
{
	if (!name_or_null) {
		for (unsigned i = 0; i < c->nshards; i++)
			flush_shard(&c->shards[i], NULL, 0);
		reclaim(c);
		return;
	}
	uint8_t name[DNS_MAX_NAME];
	size_t len = 0;

	/* a plain wire name, bounded: anything else matches nothing */
	while (len < DNS_MAX_NAME && name_or_null[len] != 0) {
		if (name_or_null[len] > DNS_MAX_LABEL ||
		    len + 1 + name_or_null[len] >= DNS_MAX_NAME)
			return;
		len += 1 + name_or_null[len];
	}
	if (len >= DNS_MAX_NAME)
		return;
	len++;
	dns_name_copy_lower(name, name_or_null, len);
	flush_shard(shard_of(c, name_hash(c, name, len)), name, len);
	reclaim(c);
}

void cache_free(struct cache *c)
{
	if (!c)
		return;
	struct entry *spare[SPARE_CLASSES] = {0};

	cache_flush(c, NULL); /* every entry to the spares or freed, after a grace period */
	swap_spares(c, spare, 0, 0);
	free_spares(c, spare);
	slab_pool_free(c->slabs);
	pthread_mutex_destroy(&c->limbo_lock);
	free_shards(c, c->nshards);
	free(c);
}

/* ---- insert: checking and measuring the upstream reply ------------------ */

/*
 * The TTL fields of the records read so far (at base + off[i], 4 bytes
 * each, ascending). The cache rewrites them (clamping, ageing), so no name
 * may be read through them: it would read differently once served.
 */
struct ttl_fields {
	size_t base;
	const uint16_t *off;
	uint16_t n;
};

/* Whether msg[from, to) overlaps one of t's fields. */
static bool overlaps_ttl(const struct ttl_fields *t, size_t from, size_t to)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) { /* the first field that ends after from */
		size_t mid = lo + (hi - lo) / 2;
		if (t->base + t->off[mid] + 4 <= from)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->n && t->base + t->off[lo] < to;
}

/*
 * Step over the name at msg[*pos], whose in-place bytes must end by `end`.
 * Pointers must point backwards (below the pointer itself) and past the
 * header (we rewrite the header); total length <= 255. What a pointer
 * leads to must lie before the name's first pointer (so a name never runs
 * on into bytes we do not store, such as a dropped OPT record) and outside
 * the TTL fields in t. Termination: every pointer hop goes strictly
 * backwards or, after walking forward over labels, adds their length to
 * the 255-byte budget.
 */
static bool skip_name(const uint8_t *msg, size_t end, size_t *pos, const struct ttl_fields *t)
{
	size_t p = *pos, total = 0;
	bool jumped = false;

	for (;;) {
		if (p >= end)
			return false;
		uint8_t b = msg[p];
		if ((b & 0xC0) == 0xC0) {
			if (p + 1 >= end || (jumped && overlaps_ttl(t, p, p + 2)))
				return false;
			size_t target = ((size_t)(b & 0x3F) << 8) | msg[p + 1];
			if (target < DNS_HEADER_LEN || target >= p)
				return false;
			if (!jumped) {
				*pos = p + 2;
				end = p;
			}
			jumped = true;
			p = target;
			continue;
		}
		if (b & 0xC0)
			return false; /* 0x40 / 0x80 label types */
		total += 1 + (size_t)b;
		if (total > DNS_MAX_NAME || (jumped && overlaps_ttl(t, p, p + 1 + b)))
			return false;
		if (b == 0) {
			if (!jumped)
				*pos = p + 1;
			return true;
		}
		p += 1 + (size_t)b;
	}
}

/* Names inside rdata (dns_rdata_names' types) must be sound too: the
 * client will decode them against our rebuilt header. */
static bool rdata_names_ok(const uint8_t *msg, uint16_t type, size_t rd,
			   size_t rdlen, const struct ttl_fields *t)
{
	struct dns_rdata_names shape;
	size_t end = rd + rdlen, pos = rd;

	if (!dns_rdata_names(type, &shape))
		return true;
	if (rdlen < (size_t)shape.before + shape.after)
		return false;
	pos += shape.before;
	for (int i = 0; i < shape.names; i++)
		if (!skip_name(msg, end - shape.after, &pos, t))
			return false;
	return pos + shape.after == end;
}

/* What cache_insert learns from one pass over the reply. */
struct reply_scan {
	size_t sec_start, sec_end, add_off;
	uint16_t counts[3];
	uint16_t nttl;
	bool answer_ttl_seen, any_ttl_seen, have_soa;
	uint32_t min_answer_ttl;   /* over answer records */
	uint32_t min_ttl;          /* over answer + authority records */
	uint32_t soa_ttl;          /* min(SOA TTL, SOA MINIMUM) */
};

static bool question_matches(const uint8_t *msg, size_t len,
			     const struct dns_query *q)
{
	size_t n = q->qname_len;

	if (n == 0 || n > DNS_MAX_NAME || len < DNS_HEADER_LEN + n + 4)
		return false;
	/* Byte-for-byte after lower-casing: q->qname is a valid uncompressed
	 * name, and label lengths (< 64) are never changed by lower-casing,
	 * so this also proves the upstream's name is uncompressed. */
	for (size_t i = 0; i < n; i++)
		if (dns_ascii_lower(msg[DNS_HEADER_LEN + i]) != q->qname[i])
			return false;
	return dns_get16(msg + DNS_HEADER_LEN + n) == q->qtype &&
	       dns_get16(msg + DNS_HEADER_LEN + n + 2) == q->qclass;
}

static bool scan_reply(const uint8_t *msg, size_t len, const struct dns_query *q,
		       struct reply_scan *r, uint16_t *ttl_off)
{
	memset(r, 0, sizeof(*r));
	if (len < DNS_HEADER_LEN || len > DNS_MAX_MESSAGE)
		return false;
	uint16_t flags = dns_get16(msg + 2);
	if (!(flags & DNS_F_QR) || (flags & DNS_F_TC) ||
	    DNS_OPCODE(flags) != DNS_OP_QUERY || dns_get16(msg + 4) != 1 ||
	    !question_matches(msg, len, q))
		return false;

	size_t pos = DNS_HEADER_LEN + q->qname_len + 4;
	r->sec_start = pos;
	r->min_answer_ttl = r->min_ttl = UINT32_MAX;
	struct ttl_fields seen = {.base = pos, .off = ttl_off};
	for (int sec = DNS_SEC_ANSWER; sec <= DNS_SEC_ADDITIONAL; sec++) {
		if (sec == DNS_SEC_ADDITIONAL)
			r->add_off = pos - r->sec_start;
		uint16_t count = dns_get16(msg + 6 + 2 * sec);
		for (uint16_t i = 0; i < count; i++) {
			size_t rr_start = pos;
			seen.n = r->nttl;
			if (!skip_name(msg, len, &pos, &seen) || len - pos < RR_FIXED_LEN)
				return false;
			const uint8_t *fixed = msg + pos;
			uint16_t type = dns_get16(fixed);
			uint32_t ttl = dns_get32(fixed + 4);
			size_t rd = pos + RR_FIXED_LEN, rdlen = dns_get16(fixed + 8);
			if (len - rd < rdlen)
				return false;
			if (type == DNS_T_OPT) {
				/* ours to write; an extended rcode (BADCOOKIE
				 * and friends) is about this exchange only */
				if (sec != DNS_SEC_ADDITIONAL || (ttl >> 24) != 0)
					return false;
				r->sec_end = rr_start;
				return true;
			}
			/* this record's own TTL is one its rdata names must avoid */
			ttl_off[r->nttl++] = (uint16_t)(pos + 4 - r->sec_start);
			seen.n = r->nttl;
			if (!rdata_names_ok(msg, type, rd, rdlen, &seen))
				return false;
			if (ttl > INT32_MAX)
				ttl = 0; /* RFC 2181 section 8 */
			if (sec == DNS_SEC_ANSWER)
				r->min_answer_ttl = min32(r->min_answer_ttl, ttl);
			if (sec != DNS_SEC_ADDITIONAL)
				r->min_ttl = min32(r->min_ttl, ttl);
			if (sec == DNS_SEC_AUTHORITY && type == DNS_T_SOA &&
			    !r->have_soa) {
				r->have_soa = true;
				r->soa_ttl = min32(ttl, dns_get32(msg + rd + rdlen - 4));
			}
			r->counts[sec]++;
			pos = rd + rdlen;
		}
	}
	r->sec_end = pos; /* trailing bytes, if any, are not ours */
	return true;
}

/* The entry's lifetime and kind, or false when it must not be cached. */
static bool entry_lifetime(const struct cache_config *cfg, uint16_t rcode,
			   const struct reply_scan *r, uint32_t *ttl,
			   uint8_t *kind)
{
	if (rcode == DNS_R_SERVFAIL) {
		*kind = KIND_SERVFAIL;
		*ttl = cfg->servfail_ttl;
	} else if (rcode == DNS_R_NXDOMAIN ||
		   (rcode == DNS_R_NOERROR && r->counts[DNS_SEC_ANSWER] == 0)) {
		if (!r->have_soa)
			return false; /* referral, or RFC 2308 "do not cache" */
		*kind = KIND_NEGATIVE;
		*ttl = min32(r->soa_ttl, cfg->negative_max_ttl);
		if (r->counts[DNS_SEC_ANSWER] > 0) /* CNAME chain to nowhere */
			*ttl = min32(*ttl, r->min_answer_ttl);
	} else if (rcode == DNS_R_NOERROR) {
		*kind = KIND_POSITIVE;
		*ttl = clamp32(r->min_ttl, cfg->min_ttl, cfg->max_ttl);
	} else {
		return false;
	}
	return *ttl > 0;
}

/* ---- insert: storing ---------------------------------------------------- */

static void clock_link(struct shard *s, struct entry *e)
{
	if (!s->hand) {
		e->clock_prev = e->clock_next = e;
		s->hand = e;
		return;
	}
	/* just behind the hand: the last place it will look */
	e->clock_next = s->hand;
	e->clock_prev = s->hand->clock_prev;
	s->hand->clock_prev->clock_next = e;
	s->hand->clock_prev = e;
}

/* Within its TTL, and inserted since the last cache_make_all_stale. */
static bool live(const struct cache *c, const struct entry *e, uint64_t now)
{
	uint64_t upto = atomic_load_explicit(&c->stale_upto, memory_order_relaxed);

	return now < entry_expire(e) &&
	       (e->inserted > upto ||
		(e->inserted == upto && e->gen == atomic_load_explicit(&c->gen, memory_order_relaxed)));
}

/* Seconds since e stopped being live (0 when made stale before its TTL ran out). */
static uint64_t expired_for(const struct entry *e, uint64_t now)
{
	return now > entry_expire(e) ? now - entry_expire(e) : 0;
}

static void make_room(struct shard *s, uint64_t need, uint64_t now)
{
	uint64_t steps = 0;
	uint64_t max_steps = 2 * atomic_load_explicit(&s->entries, memory_order_relaxed) + 2;

	while (s->hand &&
	       atomic_load_explicit(&s->bytes, memory_order_relaxed) + need >
		       atomic_load_explicit(&s->budget, memory_order_relaxed)) {
		struct entry *e = s->hand;
		if (steps++ < max_steps && live(s->cache, e, now) &&
		    atomic_load_explicit(&e->referenced, memory_order_relaxed)) {
			atomic_store_explicit(&e->referenced, 0, memory_order_relaxed);
			s->hand = e->clock_next;
			continue;
		}
		remove_entry(s, e);
		shard_count(&s->evictions, 1);
	}
}

/* The entry of this key on the chain at head, or NULL. */
static struct entry *find_in_chain(_Atomic(struct entry *) const *head, uint64_t h,
				   const uint8_t *qname, size_t qname_len,
				   uint16_t qtype, uint16_t qclass, uint8_t keyflags)
{
	struct entry *e = atomic_load_explicit(head, memory_order_acquire);

	for (; e; e = atomic_load_explicit(&e->next, memory_order_acquire))
		if (e->hash == h && e->qtype == qtype && e->qclass == qclass &&
		    e->keyflags == keyflags && e->qname_len == qname_len &&
		    memcmp(entry_qname(e), qname, qname_len) == 0)
			return e;
	return NULL;
}

/* A writer's find: s locked, so its array is s->table. */
static struct entry *find_locked(struct shard *s, uint64_t h,
				 const uint8_t *qname, size_t qname_len,
				 uint16_t qtype, uint16_t qclass, uint8_t keyflags)
{
	struct buckets *b = atomic_load_explicit(&s->table, memory_order_relaxed);

	return find_in_chain(&b->head[h & b->mask], h, qname, qname_len, qtype, qclass,
			     keyflags);
}

/*
 * Move every entry of s into b (s locked; b not yet visible) and publish b;
 * returns the array b replaces, to free after a grace period. Each entry
 * is pushed onto its new chain, so its next pointer then points at an
 * entry moved before it, or NULL: a reader still walking an old chain may
 * jump into a new one and miss its entry (a miss is always allowed: the
 * query goes upstream), but every path it can take ends at NULL. Walks,
 * which must not miss, watch the relinking count (a seqcount: odd from
 * the first move to the publication) and take the bucket again.
 *
 * The entries are taken bucket by bucket from the old array, whose heads
 * lie side by side: the first entry of the bucket RELINK_AHEAD places on
 * is fetched while this bucket's entries move, so the cache misses of a
 * shard's entries (thousands, evicted from the CPU's caches long ago)
 * overlap instead of following each other as a walk of the CLOCK ring's
 * links made them, holding the inserting worker for a millisecond.
 */
#define RELINK_AHEAD 8

static struct buckets *relink(struct shard *s, struct buckets *b)
{
	struct buckets *old = atomic_load_explicit(&s->table, memory_order_relaxed);
	uint64_t n = old->mask + 1;

	atomic_fetch_add_explicit(&s->relinking, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	for (uint64_t i = 0; i < n; i++) {
		if (i + RELINK_AHEAD < n)
			__builtin_prefetch(atomic_load_explicit(&old->head[i + RELINK_AHEAD],
								memory_order_relaxed), 1);
		struct entry *e = atomic_load_explicit(&old->head[i], memory_order_relaxed);
		while (e) {
			struct entry *next = atomic_load_explicit(&e->next, memory_order_relaxed);
			_Atomic(struct entry *) *head = &b->head[e->hash & b->mask];
			chain_push(head, e, memory_order_release);
			atomic_store_explicit(head, e, memory_order_relaxed);
			e = next;
		}
	}
	publish_table(s, b);
	atomic_store_explicit(&s->nbuckets, b->mask + 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->relinking, 1, memory_order_release);
	return old;
}

/*
 * Double s's array when its entries outnumber its buckets, up to its cap
 * (s locked). Returns the array it replaced, or NULL. Without memory for
 * a new array the chains just get longer: slower, still correct.
 */
static struct buckets *grow_if_crowded(struct shard *s)
{
	uint64_t n = atomic_load_explicit(&s->nbuckets, memory_order_relaxed);
	struct buckets *bigger;

	if (atomic_load_explicit(&s->entries, memory_order_relaxed) <= n || n >= s->max_buckets ||
	    !(bigger = new_buckets(2 * n)))
		return NULL;
	return relink(s, bigger);
}

static int reject(struct cache *c)
{
	atomic_fetch_add_explicit(&c->rejected, 1, memory_order_relaxed);
	return -1;
}

int cache_insert_keyed(struct cache *c, const struct dns_query *q, const struct cache_key *k,
		       const uint8_t *msg, size_t len, uint64_t now)
{
	uint16_t ttl_off[MAX_RRS];
	struct cache_config cfg;
	struct reply_scan r;
	uint32_t ttl;
	uint8_t kind;

	load_config(&c->cfg, &cfg);
	if (!q->question_ok || !scan_reply(msg, len, q, &r, ttl_off) ||
	    !entry_lifetime(&cfg, dns_get16(msg + 2) & FLAGS_RCODE_MASK, &r, &ttl, &kind))
		return reject(c);

	size_t sec_len = r.sec_end - r.sec_start;
	size_t size = sizeof(struct entry) + r.nttl * sizeof(uint16_t) +
		      q->qname_len + sec_len;
	size_t alloc_bytes = (size + 15) & ~(size_t)15;
	struct shard *s = shard_of(c, k->name_hash);
	uint64_t budget = atomic_load_explicit(&s->budget, memory_order_relaxed);
	if (alloc_bytes + ENTRY_OVERHEAD > budget)
		return reject(c);

	struct entry *e = entry_alloc(c, &alloc_bytes);
	if (!e)
		return reject(c);
	uint64_t charge = alloc_bytes + ENTRY_OVERHEAD;
	if (charge > budget) { /* an overflow too large for a tiny cache's shard */
		free(e);
		return reject(c);
	}
	memset(e, 0, sizeof(*e));
	e->keyflags = query_keyflags(q);
	e->hash = k->hash;
	e->inserted = now;
	e->gen = atomic_load_explicit(&c->gen, memory_order_relaxed);
	e->ttl = ttl;
	e->charge = (uint32_t)charge;
	e->flags = dns_get16(msg + 2);
	memcpy(e->counts, r.counts, sizeof(e->counts));
	e->sec_len = (uint16_t)sec_len;
	e->add_off = (uint16_t)(r.add_off < sec_len ? r.add_off : sec_len);
	e->nttl = r.nttl;
	e->qtype = q->qtype;
	e->qclass = q->qclass;
	e->kind = kind;
	e->qname_len = (uint8_t)q->qname_len;
	memcpy(e->ttl_off, ttl_off, r.nttl * sizeof(uint16_t));
	memcpy(entry_qname(e), q->qname, q->qname_len);
	uint8_t *sec = entry_sections(e);
	memcpy(sec, msg + r.sec_start, sec_len);

	/* Every stored TTL is what a client may see at age 0: clamped for
	 * positive answers, never beyond the entry's own lifetime. */
	for (uint16_t i = 0; i < r.nttl; i++) {
		uint32_t t = dns_get32(sec + e->ttl_off[i]);
		if (t > INT32_MAX)
			t = 0;
		if (kind == KIND_POSITIVE)
			t = clamp32(t, cfg.min_ttl, cfg.max_ttl);
		dns_put32(sec + e->ttl_off[i], min32(t, ttl));
	}

	pthread_mutex_lock(&s->lock);
	struct entry *old = find_locked(s, e->hash, entry_qname(e),
					e->qname_len, e->qtype, e->qclass, e->keyflags);
	if (old) {
		atomic_store_explicit(&e->referenced,
				      atomic_load_explicit(&old->referenced, memory_order_relaxed),
				      memory_order_relaxed);
		remove_entry(s, old);
	}
	make_room(s, charge, now);
	struct buckets *b = atomic_load_explicit(&s->table, memory_order_relaxed);
	_Atomic(struct entry *) *head = &b->head[e->hash & b->mask];
	chain_push(head, e, memory_order_relaxed);
	clock_link(s, e);
	shard_count(&s->bytes, (int64_t)charge);
	shard_count(&s->entries, 1);
	shard_count(&s->inserts, 1);
	atomic_store_explicit(head, e, memory_order_release); /* publish */
	struct buckets *outgrown = grow_if_crowded(s);
	unlock_shard(s);
	if (outgrown) {
		urcu_memb_synchronize_rcu(); /* no reader holds the old array any more */
		TSAN_GRACE_ACQUIRE();
		free(outgrown);
	}
	maybe_reclaim(c);
	return 0;
}

int cache_insert(struct cache *c, const struct dns_query *q, const uint8_t *msg,
		 size_t len, uint64_t now)
{
	struct cache_key k;

	cache_key_of(c, q, &k);
	return cache_insert_keyed(c, q, &k, msg, len, now);
}

/* ---- reconfiguring ------------------------------------------------------- */

/*
 * One shard to a new budget (evicting down to it) and bucket cap (its
 * array relinked into a smaller one when over it). Returns the array it
 * replaced (to free after a grace period), or NULL.
 */
static struct buckets *resize_shard(struct shard *s, uint64_t budget, uint64_t max_buckets,
				    uint64_t now)
{
	struct buckets *old = NULL, *smaller;

	pthread_mutex_lock(&s->lock);
	atomic_store_explicit(&s->budget, budget, memory_order_relaxed);
	s->max_buckets = max_buckets;
	make_room(s, 0, now);
	/* Without memory for a new array the old one serves on: emptier chains, still correct. */
	if (atomic_load_explicit(&s->nbuckets, memory_order_relaxed) > max_buckets &&
	    (smaller = new_buckets(max_buckets)))
		old = relink(s, smaller);
	unlock_shard(s);
	return old;
}

void cache_configure(struct cache *c, const struct cache_config *cfg, uint64_t now)
{
	struct buckets *retired[MAX_SHARDS] = {0};
	uint64_t was = atomic_load_explicit(&c->cfg.max_bytes, memory_order_relaxed);

	store_config(&c->cfg, cfg);
	if (cfg->max_bytes == was)
		return;
	slab_pool_limit(c->slabs, slab_limit(cfg->max_bytes));
	struct layout l = plan_layout(cfg->max_bytes, c->nshards);
	uint64_t fixed = 0;
	for (unsigned i = 0; i < c->nshards; i++) {
		struct shard *s = &c->shards[i];
		retired[i] = resize_shard(s, l.budget, l.nbuckets, now);
		/* the cap is charged; an array left over it (no memory to shrink) is, too */
		uint64_t n = atomic_load_explicit(&s->nbuckets, memory_order_relaxed);
		fixed += (n > l.nbuckets ? n : l.nbuckets) * sizeof(struct entry *);
	}
	atomic_store_explicit(&c->fixed_bytes, fixed, memory_order_relaxed);
	atomic_store_explicit(&c->limbo_trigger, l.limbo_trigger, memory_order_relaxed);
	urcu_memb_synchronize_rcu(); /* no reader holds an old array any more */
	TSAN_GRACE_ACQUIRE();
	for (unsigned i = 0; i < c->nshards; i++)
		free(retired[i]);
	reclaim(c);
}

/* ---- answering ---------------------------------------------------------- */

/*
 * Append stored sections; when they do not all fit, the additional section
 * is left out if that is enough (RFC 2181 section 9: no TC for that), else
 * the writer is marked truncated. Returns the bytes appended.
 */
static size_t append_sections(struct dns_writer *w, const uint8_t *sec, size_t len,
			      const uint16_t stored_counts[3], size_t add_off)
{
	uint16_t counts[3] = {stored_counts[0], stored_counts[1], stored_counts[2]};
	size_t room = w->limit - w->reserve - w->len;

	if (len > room && counts[DNS_SEC_ADDITIONAL] > 0 && add_off <= room) {
		len = add_off;
		counts[DNS_SEC_ADDITIONAL] = 0;
	}
	if (!dns_response_append_raw(w, sec, len, counts))
		return 0; /* marked truncated: finish sends TC */
	return len;
}

static void write_entry(struct dns_writer *w, struct entry *e, bool stale,
			uint64_t age)
{
	const struct dns_query *q = w->q;
	const uint8_t *sec = entry_sections(e);

	dns_response_set_rcode(w, (enum dns_rcode)(e->flags & FLAGS_RCODE_MASK));
	if ((e->flags & DNS_F_AD) && (q->edns_do || (q->flags & DNS_F_AD)))
		w->buf[3] |= (uint8_t)DNS_F_AD; /* RFC 6840 5.8 */
	size_t n = append_sections(w, sec, e->sec_len, e->counts, e->add_off);

	uint8_t *base = w->buf + w->question_end;
	for (uint16_t i = 0; i < e->nttl && e->ttl_off[i] + 4u <= n; i++) {
		uint32_t t = dns_get32(sec + e->ttl_off[i]);
		if (stale)
			t = CACHE_STALE_TTL;
		else
			t = t > age ? (uint32_t)(t - age) : 0;
		dns_put32(base + e->ttl_off[i], t);
	}
}

/* An expired entry may still answer (RFC 8767) while the upstream fails. */
static bool stale_servable(const struct cache *c, const struct entry *e, uint64_t now)
{
	return atomic_load_explicit(&c->cfg.serve_stale, memory_order_relaxed) &&
	       e->kind != KIND_SERVFAIL &&
	       expired_for(e, now) < atomic_load_explicit(&c->cfg.stale_max_age, memory_order_relaxed);
}

static void count(_Atomic uint64_t *counter)
{
	atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

/* A reader's bucket for k: through the directory, never the shard. */
static _Atomic(struct entry *) *bucket_of(const struct cache *c, const struct cache_key *k)
{
	uintptr_t word = atomic_load_explicit(&c->directory[shard_index(c, k->name_hash)],
					      memory_order_acquire);
	struct buckets *b = (struct buckets *)(word & ~(uintptr_t)(BUCKETS_ALIGN - 1));
	uint64_t mask = ((uint64_t)1 << (word & (BUCKETS_ALIGN - 1))) - 1;

	return &b->head[k->hash & mask];
}

/*
 * The lookup behind cache_write_answer and cache_replay, the caller in an
 * RCU read-side section. client: a worker
 * answering a client, which may take the prefetch claim (CACHE_HIT_REFRESH)
 * and marks the entry used for CLOCK. The resolver's replay of an answer it
 * has just stored is not a second use: marking it would make a flood of
 * new names look as hot as the names clients really ask for again.
 */
static enum cache_result lookup_and_write(struct cache *c, struct dns_writer *w,
					  const struct cache_key *k, uint64_t now,
					  bool allow_stale, bool client, bool *absent)
{
	const struct dns_query *q = w->q;

	if (w->len == 0 || w->truncated || w->len != w->question_end ||
	    w->section != DNS_SEC_ANSWER || w->count[0] || w->count[1] ||
	    w->count[2] || !q || q->qname_len == 0 || q->qname_len > DNS_MAX_NAME)
		return CACHE_MISS;

	enum cache_result result = CACHE_MISS;
	/* a batch's prefetch found the bucket already, in this read-side
	 * section: an array replaced since is still there, and its chains end
	 * at NULL like any a reader races (a miss at worst) */
	_Atomic(struct entry *) const *head = k->bucket ? k->bucket : bucket_of(c, k);
	struct entry *e = find_in_chain(head, k->hash, q->qname, q->qname_len, q->qtype,
					q->qclass, query_keyflags(q));
	if (!e && absent)
		*absent = true;
	if (e && live(c, e, now)) {
		result = CACHE_HIT;
		write_entry(w, e, false, now > e->inserted ? now - e->inserted : 0);
		if (client && atomic_load_explicit(&c->cfg.prefetch, memory_order_relaxed) &&
		    e->kind != KIND_SERVFAIL &&
		    (entry_expire(e) - now) * 10 <= e->ttl &&
		    !atomic_load_explicit(&e->refresh_claimed, memory_order_relaxed) &&
		    !atomic_exchange_explicit(&e->refresh_claimed, 1, memory_order_relaxed))
			result = CACHE_HIT_REFRESH;
	} else if (e && allow_stale && stale_servable(c, e, now)) {
		result = CACHE_STALE;
		write_entry(w, e, true, 0);
	}
	if (client && result != CACHE_MISS &&
	    !atomic_load_explicit(&e->referenced, memory_order_relaxed))
		atomic_store_explicit(&e->referenced, 1, memory_order_relaxed);
	TSAN_GRACE_RELEASE();
	return result;
}

/* lookup_and_write in a read-side section of its own. */
static enum cache_result lookup_and_write_alone(struct cache *c, struct dns_writer *w,
						const struct cache_key *k, uint64_t now,
						bool allow_stale, bool client)
{
	urcu_memb_read_lock();
	enum cache_result result = lookup_and_write(c, w, k, now, allow_stale, client, NULL);
	urcu_memb_read_unlock();
	return result;
}

void cache_key_of(const struct cache *c, const struct dns_query *q, struct cache_key *k)
{
	k->name_hash = name_hash(c, q->qname, q->qname_len);
	k->hash = key_hash(k->name_hash, q->qtype, q->qclass, query_keyflags(q));
	k->bucket = NULL;
}

void cache_prefetch_bucket(const struct cache *c, struct cache_key *k)
{
	k->bucket = bucket_of(c, k);
	__builtin_prefetch(k->bucket);
}

/*
 * An entry's header, name and the start of its sections: what a hit reads
 * first. Slots are aligned to 16 bytes, not to cache lines, so every
 * line the span touches is fetched.
 */
#define ENTRY_PREFETCH_BYTES 192
#define CACHE_LINE 64

void cache_prefetch_entry(const struct cache_key *k)
{
	/* the bucket as it was a moment ago: an array replaced since (a resize)
	 * is still there until our read-side section ends, and a prefetch of
	 * the wrong entry costs nothing but the fetch */
	_Atomic(struct entry *) const *bucket = k->bucket;
	const struct entry *e = atomic_load_explicit(bucket, memory_order_acquire);

	uintptr_t line = (uintptr_t)e & ~(uintptr_t)(CACHE_LINE - 1);

	if (e)
		for (; line < (uintptr_t)e + ENTRY_PREFETCH_BYTES; line += CACHE_LINE)
			__builtin_prefetch((const void *)line);
}

enum cache_result cache_replay(struct cache *c, struct dns_writer *w, uint64_t now,
			       bool allow_stale)
{
	struct cache_key k = {0, 0, NULL};

	if (w->q)
		cache_key_of(c, w->q, &k);
	return lookup_and_write_alone(c, w, &k, now, allow_stale, false);
}

enum cache_result cache_replay_keyed(struct cache *c, struct dns_writer *w,
				     const struct cache_key *k, uint64_t now, bool allow_stale)
{
	/* the bucket was found in another read-side section, if at all */
	struct cache_key unbucketed = {k->name_hash, k->hash, NULL};

	return lookup_and_write_alone(c, w, &unbucketed, now, allow_stale, false);
}

/* A client's lookup, counted in this thread's stripe. */
static enum cache_result counted(struct cache *c, enum cache_result result)
{
	if (my_stripe == UINT32_MAX)
		my_stripe = atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) %
			    STRIPES;
	struct stripe *st = &c->stripes[my_stripe];
	switch (result) {
	case CACHE_MISS:
		count(&st->misses);
		break;
	case CACHE_HIT_REFRESH:
		count(&st->prefetches);
		/* fall through */
	case CACHE_HIT:
		count(&st->hits);
		break;
	case CACHE_STALE:
		count(&st->stale_hits);
		break;
	}
	return result;
}

/* The batch's read-side section covers this one: no nested lock (a TLS call in liburcu). */
enum cache_result cache_write_answer_keyed(struct cache *c, struct dns_writer *w,
					   const struct cache_key *k, uint64_t now,
					   bool allow_stale, bool *absent)
{
	return counted(c, lookup_and_write(c, w, k, now, allow_stale, true, absent));
}

enum cache_result cache_write_answer(struct cache *c, struct dns_writer *w,
				     uint64_t now, bool allow_stale)
{
	struct cache_key k = {0, 0, NULL};

	if (w->q)
		cache_key_of(c, w->q, &k);
	return counted(c, lookup_and_write_alone(c, w, &k, now, allow_stale, true));
}

uint32_t cache_stale_answer_ms(const struct cache *c)
{
	if (!atomic_load_explicit(&c->cfg.serve_stale, memory_order_relaxed))
		return 0;
	return atomic_load_explicit(&c->cfg.stale_answer_ms, memory_order_relaxed);
}

bool cache_has_nxdomain(struct cache *c, const struct dns_query *q, uint64_t now)
{
	struct cache_key k;
	struct entry *e;
	bool nxdomain;

	cache_key_of(c, q, &k);
	urcu_memb_read_lock();
	e = find_in_chain(bucket_of(c, &k), k.hash, q->qname, q->qname_len, q->qtype, q->qclass,
			  query_keyflags(q));
	nxdomain = e && live(c, e, now) && (e->flags & FLAGS_RCODE_MASK) == DNS_R_NXDOMAIN;
	TSAN_GRACE_RELEASE();
	urcu_memb_read_unlock();
	return nxdomain;
}

bool cache_write_message(struct dns_writer *w, const uint8_t *msg, size_t len)
{
	uint16_t ttl_off[MAX_RRS];
	struct reply_scan r;
	const struct dns_query *q = w->q;

	if (w->len == 0 || !q || !q->question_ok || !scan_reply(msg, len, q, &r, ttl_off))
		return false;
	dns_response_set_rcode(w, (enum dns_rcode)(dns_get16(msg + 2) & FLAGS_RCODE_MASK));
	if ((dns_get16(msg + 2) & DNS_F_AD) && (q->edns_do || (q->flags & DNS_F_AD)))
		w->buf[3] |= (uint8_t)DNS_F_AD;
	append_sections(w, msg + r.sec_start, r.sec_end - r.sec_start, r.counts, r.add_off);
	return true;
}

/* ---- walking ------------------------------------------------------------ */

#define WALK_BATCH_BYTES (256 * 1024)  /* holds at least three of the largest entries */
#define WALK_BATCH_ITEMS 2048
#define WALK_BUCKETS_PER_PASS 1024     /* bounds one read-side section on empty buckets */

/* Entries copied under one read-side section, handed out after it. */
struct walk_batch {
	size_t n, used;
	struct cache_entry_info items[WALK_BATCH_ITEMS];
	uint8_t bytes[WALK_BATCH_BYTES];
};

/* Where the next batch starts: a bucket, numbered by the shard's mask
 * when the walk reached the shard (0: not yet), and how many of its
 * entries an earlier batch took (only for a bucket larger than a batch). */
struct walk_cursor {
	unsigned shard;
	uint64_t bucket;
	uint64_t mask;
	size_t skip;
};

static size_t entry_message_len(const struct entry *e)
{
	return DNS_HEADER_LEN + e->qname_len + 4u + e->sec_len;
}

/* The entry as a reply message, TTLs aged as a hit at now would see them. */
static void write_entry_message(uint8_t *m, struct entry *e, uint64_t now)
{
	const uint16_t header[6] = {0, e->flags, 1, e->counts[0], e->counts[1], e->counts[2]};
	uint64_t age = now > e->inserted ? now - e->inserted : 0;

	for (int i = 0; i < 6; i++) {
		m[2 * i] = (uint8_t)(header[i] >> 8);
		m[2 * i + 1] = (uint8_t)header[i];
	}
	uint8_t *p = m + DNS_HEADER_LEN;
	memcpy(p, entry_qname(e), e->qname_len);
	p += e->qname_len;
	const uint16_t question[2] = {e->qtype, e->qclass};
	for (int i = 0; i < 2; i++) {
		*p++ = (uint8_t)(question[i] >> 8);
		*p++ = (uint8_t)question[i];
	}
	memcpy(p, entry_sections(e), e->sec_len);
	for (uint16_t i = 0; i < e->nttl; i++) {
		uint32_t t = dns_get32(p + e->ttl_off[i]);
		dns_put32(p + e->ttl_off[i], t > age ? (uint32_t)(t - age) : 0);
	}
}

static void entry_state(const struct cache *c, const struct entry *e, uint64_t now,
			struct cache_entry_info *info)
{
	if (live(c, e, now)) {
		info->state = CACHE_ENTRY_LIVE;
		info->seconds = (uint32_t)min64(entry_expire(e) - now, UINT32_MAX);
		return;
	}
	info->state = stale_servable(c, e, now) ? CACHE_ENTRY_STALE : CACHE_ENTRY_EXPIRED;
	info->seconds = (uint32_t)min64(expired_for(e, now), UINT32_MAX);
}

/* Copy e into the batch; false (nothing copied) when it does not fit. */
static bool batch_add(struct walk_batch *b, const struct cache *c, struct entry *e,
		      uint64_t now)
{
	size_t len = entry_message_len(e);

	if (b->n == WALK_BATCH_ITEMS || WALK_BATCH_BYTES - b->used < len)
		return false;
	uint8_t *m = b->bytes + b->used;
	write_entry_message(m, e, now);
	struct cache_entry_info *info = &b->items[b->n++];
	*info = (struct cache_entry_info){
		.name = m + DNS_HEADER_LEN,
		.name_len = e->qname_len,
		.qtype = e->qtype,
		.qclass = e->qclass,
		.dnssec_ok = e->keyflags & KEY_DO,
		.checking_disabled = e->keyflags & KEY_CD,
		.rcode = (uint8_t)(e->flags & FLAGS_RCODE_MASK),
		.bytes = e->charge,
		.msg = m,
		.msg_len = len,
	};
	entry_state(c, e, now, info);
	b->used += len;
	return true;
}

/*
 * Copy bucket cur->bucket (numbered by cur->mask), from cur->skip on: the
 * entries whose hash & cur->mask is that bucket, wherever the array t has
 * them now (one chain if it is no larger than then, every chain
 * cur->mask + 1 apart if it grew). A bucket that does not fit what is
 * left of the batch is taken back whole and left for the next batch, so a
 * batch ends between buckets; only a bucket larger than an empty batch is
 * split, remembered in cur->skip. True when the bucket is done.
 */
static bool batch_bucket(struct walk_batch *b, const struct cache *c, const struct buckets *t,
			 struct walk_cursor *cur, uint64_t now)
{
	size_t n0 = b->n, used0 = b->used, index = 0;
	uint64_t step = (t->mask < cur->mask ? t->mask : cur->mask) + 1;

	for (uint64_t i = cur->bucket & t->mask; i <= t->mask; i += step) {
		struct entry *e = atomic_load_explicit(&t->head[i], memory_order_acquire);
		for (; e; e = atomic_load_explicit(&e->next, memory_order_acquire)) {
			if ((e->hash & cur->mask) != cur->bucket)
				continue;
			size_t at = index++;
			if (at < cur->skip || batch_add(b, c, e, now))
				continue;
			if (n0 > 0) {
				b->n = n0;
				b->used = used0;
			} else {
				cur->skip = at;
			}
			return false;
		}
	}
	cur->skip = 0;
	return true;
}

/*
 * One batch from cur on, under one short read-side section. False when it
 * stopped because a shard was relinking its entries (try again shortly).
 */
static bool batch_fill(struct walk_batch *b, const struct cache *c, struct walk_cursor *cur,
		       uint64_t now)
{
	bool relinking = false;

	b->n = b->used = 0;
	urcu_memb_read_lock();
	for (unsigned i = 0; i < WALK_BUCKETS_PER_PASS && cur->shard < c->nshards; i++) {
		struct shard *s = &c->shards[cur->shard];
		size_t n0 = b->n, used0 = b->used, skip0 = cur->skip;
		uint32_t seq = atomic_load_explicit(&s->relinking, memory_order_acquire);
		const struct buckets *t = atomic_load_explicit(&s->table, memory_order_acquire);
		if (cur->mask == 0)
			cur->mask = t->mask;
		if (seq & 1) {
			relinking = true;
			break;
		}
		bool done = batch_bucket(b, c, t, cur, now);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->relinking, memory_order_relaxed) != seq) {
			/* entries moved while we read them: this bucket again, later */
			b->n = n0;
			b->used = used0;
			cur->skip = skip0;
			relinking = true;
			break;
		}
		if (!done)
			break;
		if (++cur->bucket > cur->mask) {
			cur->bucket = cur->mask = 0;
			cur->shard++;
		}
	}
	TSAN_GRACE_RELEASE();
	urcu_memb_read_unlock();
	return !relinking;
}

int cache_walk(struct cache *c, uint64_t now, cache_walk_fn fn, void *arg)
{
	struct walk_batch *b = malloc(sizeof *b);
	struct walk_cursor cur = {0};
	int rc = 0;

	if (!b)
		return -1;
	while (rc == 0 && cur.shard < c->nshards) {
		if (!batch_fill(b, c, &cur, now) && b->n == 0)
			sched_yield(); /* a relinking takes microseconds: let it finish */
		for (size_t i = 0; i < b->n && rc == 0; i++)
			rc = fn(&b->items[i], arg);
	}
	free(b);
	return rc;
}

void cache_stats(const struct cache *c, struct cache_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->max_bytes = atomic_load_explicit(&c->cfg.max_bytes, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&c->fixed_bytes, memory_order_relaxed) +
		     atomic_load_explicit(&c->limbo_bytes, memory_order_relaxed) +
		     atomic_load_explicit(&c->spare_bytes, memory_order_relaxed);
	out->rejected = atomic_load_explicit(&c->rejected, memory_order_relaxed);
	out->slab_overflows = atomic_load_explicit(&c->slab_overflows, memory_order_relaxed);
	out->slab_bytes = slab_pool_bytes(c->slabs);
	for (unsigned i = 0; i < c->nshards; i++) {
		struct shard *s = &c->shards[i];
		out->buckets += atomic_load_explicit(&s->nbuckets, memory_order_relaxed);
		out->entries += atomic_load_explicit(&s->entries, memory_order_relaxed);
		out->bytes += atomic_load_explicit(&s->bytes, memory_order_relaxed);
		out->inserts += atomic_load_explicit(&s->inserts, memory_order_relaxed);
		out->evictions += atomic_load_explicit(&s->evictions, memory_order_relaxed);
	}
	for (unsigned i = 0; i < STRIPES; i++) {
		const struct stripe *st = &c->stripes[i];
		out->hits += atomic_load_explicit(&st->hits, memory_order_relaxed);
		out->misses += atomic_load_explicit(&st->misses, memory_order_relaxed);
		out->stale_hits += atomic_load_explicit(&st->stale_hits, memory_order_relaxed);
		out->prefetches += atomic_load_explicit(&st->prefetches, memory_order_relaxed);
	}
}
