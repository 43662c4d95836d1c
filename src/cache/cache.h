/*
 * cache — the answer cache in front of the upstream resolver.
 *
 * Owns: wire-format copies of upstream replies keyed by (lower-cased qname,
 * qtype, qclass, DO, CD); their lifetimes (positive TTL clamped to
 * [min_ttl, max_ttl], RFC 2308 negative TTLs, a short SERVFAIL TTL); TTL
 * ageing on serve; serve-stale (RFC 8767) windows; the prefetch claim; the
 * byte budget and eviction (CLOCK per shard); its own counters.
 *
 * Must never: allocate, lock a mutex or spin in cache_write_answer /
 * cache_replay (the worker hot path); block a reader on a writer;
 * free an entry a reader may still be copying (frees wait for an RCU grace
 * period); hold more than max_bytes of accounted memory (entries waiting
 * for their grace period included); talk to the
 * network or decide when to ask upstream (it only reports, via
 * CACHE_MISS / CACHE_HIT_REFRESH, that someone should).
 *
 * Threads: readers (cache_write_answer, cache_replay) must be registered
 * with liburcu's memb flavour (urcu_memb_register_thread); they take the RCU
 * read lock themselves (it nests, so a worker already inside one is fine).
 * Writers (cache_insert, cache_flush, cache_free) may run on any thread,
 * registered or not, but never inside an RCU read-side section: they may
 * wait for a grace period (urcu_memb_synchronize_rcu) before freeing what
 * they evicted. They serialise per shard on a mutex readers never touch.
 * cache_walk reads like a reader, in short read-side sections of its own.
 *
 * Times are whole seconds on a monotonic clock, supplied by the caller, so
 * tests control them and the hot path makes no clock syscall of its own.
 */
#ifndef LOCALDNS_CACHE_H
#define LOCALDNS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dns/dns.h"

#define CACHE_STALE_TTL 30 /* RFC 8767 section 4: TTL of a stale answer */

struct cache_config {
	uint64_t max_bytes;        /* cache.size; everything accounted fits here */
	uint32_t min_ttl;          /* cache.min_ttl: floor for positive answers */
	uint32_t max_ttl;          /* cache.max_ttl: ceiling for positive answers */
	uint32_t negative_max_ttl; /* cap for NXDOMAIN/NODATA (3600 is usual) */
	uint32_t servfail_ttl;     /* SERVFAIL kept this long; 0 = not cached */
	bool serve_stale;          /* cache.serve_stale */
	uint32_t stale_max_age;    /* seconds past expiry an entry may serve stale */
	uint32_t stale_answer_ms;  /* cache.stale_answer_timeout: a client waiting for a
				      refresh gets the stale entry this soon; 0 = not before
				      upstream.timeout */
	bool prefetch;             /* cache.prefetch */
};

struct cache;

/*
 * Make an empty cache. Its bucket arrays start small and grow with the
 * entries; what they may grow to is charged against max_bytes from the
 * start, as is a 1/32 reserve for entries waiting to be freed or reused.
 * Returns NULL on ENOMEM (or a NULL cfg).
 */
struct cache *cache_new(const struct cache_config *cfg);

/*
 * Apply cfg to a running cache (live reload); any thread but not inside an
 * RCU read-side section, one call at a time. The TTL bounds, serve-stale
 * and prefetch settings apply to what is stored and served from now on;
 * a new max_bytes resizes the cache in place, shard by shard, evicting
 * (CLOCK order) down to the new budget. Readers are never blocked; a
 * concurrent insert waits at most for one shard's share of the work. The
 * shard count chosen by cache_new stays. now: as for cache_insert.
 */
void cache_configure(struct cache *c, const struct cache_config *cfg, uint64_t now);

/*
 * Free the cache and every entry (after one grace period). No other thread
 * may use c any more; must not be called inside an RCU read-side section.
 */
void cache_free(struct cache *c);

/*
 * Store the upstream reply msg[0..len) (a complete DNS message, such as
 * libunbound's answer_packet) as the answer to q's (qname, qtype, qclass,
 * DO, CD). The message must be a QR=1, opcode QUERY, TC=0 reply whose one
 * question matches q (same name ignoring case, written uncompressed at
 * offset 12, same type and class); its records must be well-formed, with
 * compression pointers pointing backwards and past the header, to bytes
 * before the name's first pointer that are no record's TTL field.
 *
 * Lifetime: NOERROR with answers = min TTL over answer + authority records,
 * clamped to [min_ttl, max_ttl]; NXDOMAIN, or NOERROR without answers
 * (NODATA) = min(SOA TTL, SOA MINIMUM) of the authority SOA (and of any
 * answer records, e.g. a CNAME chain), capped by negative_max_ttl; no SOA
 * means not cacheable (a referral, or a negative answer RFC 2308 says not
 * to keep); SERVFAIL = servfail_ttl; other rcodes, extended rcodes, and a
 * lifetime of 0 are not cached. Each stored record's TTL is rewritten to
 * its clamped value, never above the entry's lifetime, so ageing on serve
 * never outlives the entry. The OPT record (and anything after it, such as
 * a TSIG) is dropped. Replaces an existing entry for the same key, and
 * evicts others as needed to stay within max_bytes. When the entry makes
 * its shard's bucket array too crowded, the array is doubled and the old
 * one freed after a grace period (which this call waits for).
 *
 * now: seconds on a monotonic clock. Returns 0, or -1 when the message is
 * not cacheable, malformed, larger than a shard's budget, or on ENOMEM.
 */
int cache_insert(struct cache *c, const struct dns_query *q, const uint8_t *msg,
		 size_t len, uint64_t now);

enum cache_result {
	CACHE_MISS,        /* nothing usable: ask upstream; out/writer untouched */
	CACHE_HIT,         /* answered from a live entry */
	CACHE_HIT_REFRESH, /* answered, and this caller (only this one, per
			    * inserted entry) should refresh it in the
			    * background: the entry is in its last 10% of TTL
			    * and prefetch is on */
	CACHE_STALE,       /* expired entry served with TTL 30 (only when
			    * allow_stale, serve_stale is on and it expired
			    * less than stale_max_age ago) */
};

/*
 * Append the cached answer to q = w->q into the writer w, which must be
 * fresh from dns_response_begin (any rcode; this one sets the cached
 * rcode). Sets AD when the cached reply had it and the query had DO or AD;
 * copies the cached sections in (they sit right after the question, where
 * their compression pointers expect them) and ages every TTL by the time
 * spent in cache (stale: CACHE_STALE_TTL). When the whole answer does not
 * fit w's limit, the additional section is left out if that is enough
 * (no TC, RFC 2181 section 9), else the writer is marked truncated so
 * dns_response_finish sends header + question (+ OPT) with TC. The caller
 * may still set a server cookie and must call dns_response_finish.
 *
 * SERVFAIL entries are never served stale. An expired entry past the stale
 * window is a miss and is freed later, when its shard needs room.
 * Lock-free and allocation-free; safe on many threads alongside writers.
 */
enum cache_result cache_write_answer(struct cache *c, struct dns_writer *w,
				     uint64_t now, bool allow_stale);

/*
 * The same in steps, for a batch of queries whose lookups should wait on
 * memory together rather than one after the other: cache_key_of once per
 * query, cache_prefetch_bucket for every query, then cache_prefetch_entry
 * for every query (it reads the bucket the first step fetched), then
 * cache_write_answer_keyed. The prefetches only warm the CPU's caches:
 * skipping them changes nothing but speed. Same threads and rules as
 * cache_write_answer (the caller holds the RCU read lock across the steps).
 */
struct cache_key {
	uint64_t name_hash; /* the name's, under the cache's secret key */
	uint64_t hash;      /* name, type, class, DO and CD */
	const void *bucket; /* cache_prefetch_bucket's: prefetched, then walked (NULL: not yet) */
};
void cache_key_of(const struct cache *c, const struct dns_query *q, struct cache_key *k);
void cache_prefetch_bucket(const struct cache *c, struct cache_key *k);
void cache_prefetch_entry(const struct cache_key *k);
/* absent (may be NULL): set to true when no entry at all was found, live or
 * expired (so none could be served stale either); left as it was otherwise. */
enum cache_result cache_write_answer_keyed(struct cache *c, struct dns_writer *w,
					   const struct cache_key *k, uint64_t now,
					   bool allow_stale, bool *absent);

/*
 * As cache_write_answer, for a client that waited while the resolver asked
 * upstream: not counted as a client hit or miss (the resolver's own
 * counters say what happened), never hands out the prefetch claim, and
 * does not mark the entry used for eviction (the resolver replays every
 * answer it has just stored; a flood of new names must not look hot).
 */
enum cache_result cache_replay(struct cache *c, struct dns_writer *w, uint64_t now,
			       bool allow_stale);

/*
 * cache_insert and cache_replay with the question's key already made
 * (cache_key_of for q in this cache: the worker's look-up, carried with
 * the request to the resolver), so that a miss hashes its name once. The
 * key's bucket is not used. A key that is not q's never gives a wrong
 * answer (every look-up compares the whole question), but an entry
 * inserted under it would be filed where no look-up finds it.
 */
int cache_insert_keyed(struct cache *c, const struct dns_query *q, const struct cache_key *k,
		       const uint8_t *msg, size_t len, uint64_t now);
enum cache_result cache_replay_keyed(struct cache *c, struct dns_writer *w,
				     const struct cache_key *k, uint64_t now, bool allow_stale);

/*
 * How long a client that has a stale entry waits for its refresh before it
 * gets the stale entry (RFC 8767's client response timer), in ms; 0 when
 * serve-stale is off or the timer is. Any thread.
 */
uint32_t cache_stale_answer_ms(const struct cache *c);

/*
 * Whether a live entry says q's name does not exist (NXDOMAIN, for q's type,
 * class, DO and CD): autopath skips search candidates known to be missing.
 * Lock-free and allocation-free like cache_write_answer; not counted as a
 * hit or a miss, and no CLOCK bit is set (a probe is not a use).
 */
bool cache_has_nxdomain(struct cache *c, const struct dns_query *q, uint64_t now);

/*
 * Write an upstream reply the cache did not keep (a TTL of 0, an rcode it
 * does not store, too big for a shard) into the fresh writer w, exactly as
 * cache_write_answer would have served it at age 0 but with the upstream's
 * TTLs. msg must meet cache_insert's rules; false (w untouched) if not.
 */
bool cache_write_message(struct dns_writer *w, const uint8_t *msg, size_t len);

struct cache_stats {
	uint64_t entries;     /* entries held (live, stale or dead-not-yet-freed) */
	uint64_t bytes;       /* accounted bytes: entries + bucket arrays at their cap */
	uint64_t buckets;     /* bucket heads allocated now (they grow with the entries) */
	uint64_t max_bytes;   /* the configured cap */
	uint64_t hits;        /* CACHE_HIT and CACHE_HIT_REFRESH */
	uint64_t misses;
	uint64_t stale_hits;  /* CACHE_STALE */
	uint64_t prefetches;  /* CACHE_HIT_REFRESH handed out */
	uint64_t inserts;     /* entries stored (replacements included) */
	uint64_t rejected;    /* cache_insert calls that returned -1 */
	uint64_t evictions;   /* entries dropped to make room */
	uint64_t slab_bytes;  /* memory of the slabs holding entries (all but those over 2 KiB) */
	uint64_t slab_overflows; /* entries put in the heap, the slabs being at their limit */
};

/*
 * Counters for metrics and the control CLI. Read without stopping anyone:
 * each field is exact on its own, the set is not one atomic snapshot.
 */
void cache_stats(const struct cache *c, struct cache_stats *out);

/*
 * Drop every entry (name NULL) or every entry for one name, all types,
 * classes and flags (name: a wire name, any letter case). Readers in
 * flight finish with what they found; the memory is freed after them.
 */
void cache_flush(struct cache *c, const uint8_t *name_or_null);

/*
 * Every entry inserted up to the second now (the cache clock) stops being
 * live: it answers only as stale data (cache.serve_stale, while the upstream
 * fails) until a fresh answer replaces it. For a new upstream: its answers
 * replace the old ones at the next query, while the old ones still cover an
 * outage of the new one. Entries inserted after the call, even within the
 * same second, are live. O(1); the same thread as cache_insert.
 */
void cache_make_all_stale(struct cache *c, uint64_t now);

enum cache_entry_state {
	CACHE_ENTRY_LIVE,    /* within its TTL */
	CACHE_ENTRY_STALE,   /* expired; served while the upstream fails */
	CACHE_ENTRY_EXPIRED, /* of no more use; freed when its shard needs room */
};

/* One entry as cache_walk shows it: a copy, valid during the callback. */
struct cache_entry_info {
	const uint8_t *name;       /* the key's lower-cased wire name */
	size_t name_len;
	uint16_t qtype;
	uint16_t qclass;
	bool dnssec_ok;            /* the key's DO bit */
	bool checking_disabled;    /* the key's CD bit */
	uint8_t rcode;
	enum cache_entry_state state;
	uint32_t seconds;          /* LIVE: TTL left; else: seconds since expiry */
	uint32_t bytes;            /* what it is charged against max_bytes */
	/* The entry as a reply (ID 0, the upstream's flags, the question in
	 * the key's case, every record with its TTL aged to now, 0 once
	 * expired): a complete DNS message. */
	const uint8_t *msg;
	size_t msg_len;
};

/* Called for each entry; nonzero stops the walk. */
typedef int (*cache_walk_fn)(const struct cache_entry_info *e, void *arg);

/*
 * Call fn for every entry, shard by shard. fn runs outside any lock and
 * outside the RCU read-side section, so it may block (write to a slow
 * socket): the walk copies a batch of entries (up to a thousand buckets or
 * 256 KiB, whichever comes first) under one short RCU read-side section,
 * then hands the copies out. Workers never wait for it, and writers wait
 * at most for one batch's copy. Entries present for the whole walk are
 * seen exactly once (unless a reload resizes the cache meanwhile: entries
 * then move between buckets and may be missed or seen twice); ones
 * inserted or removed meanwhile may or may not be.
 * (The exception: a bucket chain larger than a whole batch, which no real
 * load builds, is copied in parts and may then show an entry twice.)
 *
 * The calling thread must be registered with RCU (memb) and not inside a
 * read-side section. Allocates one batch buffer (~320 KiB) per walk.
 * Returns 0 when every entry was seen, fn's nonzero value when it stopped
 * the walk, -1 on ENOMEM.
 */
int cache_walk(struct cache *c, uint64_t now, cache_walk_fn fn, void *arg);

#endif
