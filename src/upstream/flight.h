/*
 * upstream/flight.h — the flight table: the questions on their way
 * upstream (flights), the clients waiting for them (waiters), the queue in
 * front of the upstream, its pace, each client's share, the cool-down
 * after a failure and the failing mark (flight.c).
 *
 * Pure logic, as Knot Resolver's library is: it does no I/O, reads no
 * clock and starts no thread. Every entry point takes the time (now_ms, a
 * monotonic clock in milliseconds), and it reaches the world through two
 * callbacks the caller gives it: ask (send a question upstream) and reply
 * (answer one waiting client). The caller brings libunbound's results in
 * (flights_result) and calls flights_expire and flights_start_queued as
 * time passes (flights_wait_ms says when). It reads and writes the answer
 * cache, which is data: it looks there for a stale answer when it sets a
 * waiter's deadline, and remembers a failure there as a SERVFAIL.
 *
 * Owns: the flights, the waiters (each holds its client's request,
 * packed) and everything listed above. Borrows the cache and the
 * counters.
 *
 * Must never: call ask or reply for a flight or waiter it has freed; leave
 * a waiter past its deadline once flights_expire has run at that time; be
 * used from two threads (the resolver thread owns it; only the failing
 * mark and the counters are read elsewhere); be copied or moved once
 * flights_init ran: its lists (liburcu's urcu/list.h, circular, each head
 * its own empty list) point at the heads inside it.
 */
#ifndef LOCALDNS_UPSTREAM_FLIGHT_H
#define LOCALDNS_UPSTREAM_FLIGHT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <urcu/list.h>

#include "cache/cache.h"
#include "dns/dns.h"
#include "upstream/pace.h"
#include "upstream/request.h"
#include "upstream/stats.h"

#define MAX_QUEUED 2048          /* questions waiting for room or pace */
#define MAX_FLIGHTS 8192         /* questions known at once: running, queued, cooling */
#define MAX_WAITERS 16384        /* clients waiting at once, all workers */
/* Queries one client may add to questions already asked: a sixteenth of
 * the places (a burst of 1,000 identical misses from one pod still joins
 * one question), so that it takes 16 sources to fill them. */
#define MAX_WAITERS_PER_CLIENT (MAX_WAITERS / 16)
#define FAILURE_HOLD_MS 5000     /* cool-down after a failed resolution */
#define CLIENT_SLOTS 4096        /* per-client counts (a power of two) */
#define NO_CLIENT UINT16_MAX     /* a question nobody in particular asked (a refresh) */
/* The retry budget, in tenths of a retry: each first ask earns one, a
 * retry costs RETRY_COST, so retries stay under a tenth of the questions
 * (and a quiet resolver may retry a burst of RETRY_TOKENS_MAX / RETRY_COST). */
#define RETRY_COST 10
#define RETRY_TOKENS_MAX 1000

struct waiter;
struct flights;

/* The cache's key for a's question, as the worker's look-up made it: false when it did not. */
static inline bool flight_ask_key(const struct query_ask *a, struct cache_key *k)
{
	*k = (struct cache_key){a->cache_name_hash, a->cache_hash, NULL};
	return a->cache_keyed;
}

/* One question on its way upstream: queued, being asked, or cooling down after a failure. */
struct flight {
	struct flights *table;       /* the table it is in */
	struct flight *hnext;
	struct dns_query q;          /* the question (key: name, type, class, DO, CD) */
	struct cache_key cache_key;  /* q's in the cache; its hash places f in the table */
	uint16_t chain_len;
	uint32_t chain_ttl;
	bool search;                 /* chain holds autopath's candidates ... */
	uint16_t candidate;          /* ... and the one asked now starts here */
	struct cds_list_head waiters; /* its clients' (struct waiter), newest first */
	bool asked;                  /* the upstream has it and owes a result ... */
	uint32_t upstream;           /* ... the upstream it was asked on (flights_new_upstream) */
	bool queued;                 /* waiting for room on the upstream or for pace ... */
	struct cds_list_head in_queue; /* ... in flights.queue ... */
	uint64_t queued_until_ms;    /* ... and worth asking until then even unwaited */
	uint64_t failed_until_ms;    /* cool-down after a failure */
	bool retried;                /* a failure was asked again once already */
	bool refresh;                /* started by a refresh (counted in flights.refreshes) */
	uint16_t owner;              /* the client slot it counts against, or NO_CLIENT */
	uint64_t asked_ns;           /* the asker's own: when it asked (for its latency figures) */
	uint8_t chain[];             /* chain_len bytes: a local CNAME chain to chase (see request.h) */
};

/* What a waiting client is to be answered with. */
enum flight_reply_kind {
	FLIGHT_REPLY_CACHED,   /* the cache's live answer: it came in since the worker looked */
	FLIGHT_REPLY_FAILED,   /* the upstream could not help: a stale answer, else SERVFAIL */
	FLIGHT_REPLY_ANSWER,   /* the upstream's answer: msg, or the cache's copy when cached */
	FLIGHT_REPLY_SERVFAIL, /* SERVFAIL whatever the cache holds (DNSSEC said bogus) */
	FLIGHT_REPLY_NXDOMAIN, /* autopath found no candidate: the request's own local NXDOMAIN */
};

struct flight_reply {
	enum flight_reply_kind kind;
	const uint8_t *msg;    /* FLIGHT_REPLY_ANSWER: the message ... */
	size_t len;
	bool cached;           /* ... and whether the cache took it */
};

/* How the table reaches the world: two callbacks, each with its own env. */
struct flight_io {
	/*
	 * Send f's question upstream: flight_name(f), f->q.qtype, f->q.qclass.
	 * Its result comes back later through flights_result(f), never from
	 * inside ask. false when it cannot be asked at all.
	 */
	bool (*ask)(void *env, struct flight *f);
	void *ask_env;
	/* Answer the client that sent r (through worker) as a says. */
	void (*reply)(void *env, unsigned worker, const struct upstream_request *r,
		      const struct flight_reply *a, uint64_t now_ms);
	void *reply_env;
};

/* The settings an upstream comes with (flights_init, flights_new_upstream). */
struct flight_settings {
	uint64_t timeout_ms;     /* upstream.timeout: how long a client waits */
	uint64_t max_rate;       /* upstream.max_rate: questions a second, 0 = no limit */
	unsigned max_per_client; /* upstream.max_pending_per_client */
	unsigned max_asked;      /* questions one upstream may have at once */
	unsigned client_ipv6_bits; /* listen.ipv6_client_prefix_length: who a client is */
};

/*
 * What one client (an IPv4 address, an IPv6 address cut to listen.ipv6_client_prefix_length) has pending upstream: the
 * clients waiting and the questions it started (or its hits' refreshes
 * started) that are not over. Slots are picked by a keyed hash, so two
 * clients may share one (and its limits), but nobody can aim at another's.
 * A slot with waiters is in the list of slots with as many (flights.
 * by_waiters), so the heaviest is found in O(1) when the waiters' table is
 * full, and its waiters are in a list of their own, oldest first.
 */
struct client_slot {
	uint16_t waiters;
	uint16_t flights;
	uint16_t bprev, bnext;       /* the slots with as many waiters (NO_CLIENT: none) */
	struct cds_list_head waiting; /* its waiters, oldest first */
};

/* The flights by question: keyed hash (SipHash, a random key per table), growing buckets. */
struct flight_table {
	struct flight **buckets;
	size_t mask;                 /* buckets - 1 */
	size_t count;
};

struct flights {
	struct flight_io io;
	struct cache *cache;
	struct upstream_counters *n;
	struct flight_settings set;
	/* the upstream asked now */
	uint32_t upstream;           /* its number: a new one for each flights_new_upstream */
	unsigned asked;              /* questions it has */
	uint64_t last_result_ms;     /* when it last gave a result (or came) */
	atomic_bool failing;         /* any thread may read it (flights_failing) */
	/* the questions */
	struct flight_table table;
	struct cds_list_head queue;  /* the queued flights, oldest first */
	unsigned n_queued;
	struct pace pace;
	unsigned retry_tokens;       /* the retry budget (RETRY_COST) */
	/* the clients */
	/* the waiters by deadline, earliest first (see flight.c) */
	struct cds_list_head by_timeout; /* until upstream.timeout */
	struct cds_list_head stale_soon; /* with a stale entry: until cache.stale_answer_timeout */
	unsigned n_waiters;
	struct client_slot clients[CLIENT_SLOTS];
	uint16_t by_waiters[MAX_WAITERS + 1]; /* the first slot with that many waiters */
	unsigned heaviest;           /* the most waiters any slot has */
	unsigned refreshes;          /* flights started by refreshes, in the table */
	uint8_t client_key[16];
	/* time */
	uint64_t now_ms;             /* the clock of the entry point running */
	uint64_t swept_ms;
	uint64_t full_logged_ms;
	struct upstream_request waiting; /* a waiter's request, unpacked */
	uint8_t probe[DNS_MAX_MESSAGE]; /* what a look at the cache writes ... */
	size_t probe_len;                /* ... and its length (0: a miss) */
	/* DNS64: a waiter going on to the A question, its request and the question's */
	struct upstream_request following, dns64_wait, dns64_key;
};

/* 0, or -1 without memory or randomness. The table keeps io, cache and n. */
int flights_init(struct flights *t, const struct flight_io *io, struct cache *cache,
		 struct upstream_counters *n, const struct flight_settings *s, uint64_t now_ms);
/* Forget every waiter (no reply), queued question and flight; free the table. */
void flights_free(struct flights *t);

/*
 * A new upstream (a reload's, or a fresh one for a full, silent one) takes
 * the questions asked from now on, with settings s. Questions still
 * running on the one before are not joined any more, and their results
 * are not remembered (flight_current). forget: the failing mark and the
 * cool-downs were about the old one (a reload).
 */
void flights_new_upstream(struct flights *t, const struct flight_settings *s, bool forget,
			  uint64_t now_ms);
/* Does f run on the upstream asked now (its result may be remembered)? */
bool flight_current(const struct flights *t, const struct flight *f);
/*
 * Is the upstream asked now full, with questions waiting for room, and has
 * nothing come back from it for a whole timeout? Then it is stuck (see
 * upstream.c, "Capacity") and the caller may give the table a fresh one.
 */
bool flights_stalled(const struct flights *t, uint64_t now_ms);
/* The number of the upstream asked now (flights_init's is 1; flight->upstream). */
uint32_t flights_upstream(const struct flights *t);
/* An upstream given up with questions still running: they go, with no result. */
void flights_drop_upstream(struct flights *t, uint32_t upstream);

/*
 * A client's request, and a background refresh (nobody waits:
 * r->transport UPSTREAM_NO_REPLY; r->peer is the client whose hit
 * triggered it, whose share it is charged to). Every client request is
 * answered, at once or at its deadline at the latest: when the waiters'
 * table is full, a client holding the most waiters gives up its oldest
 * (answered now) for a client holding fewer; a client holding the most is
 * itself answered at once.
 */
void flights_client(struct flights *t, unsigned worker, const struct upstream_request *r,
		    uint64_t now_ms);
/*
 * The same for a request whose worker looked at the cache after the last
 * answer went in (a worker hosting the resolver: its batches and the
 * resolver's turns take turns on one thread, and only a turn inserts), so
 * the cache is not looked at again (about 1,100 instructions a miss),
 * except for DNS64, where a live AAAA answer means the A question.
 */
void flights_client_missed(struct flights *t, unsigned worker, const struct upstream_request *r,
			   uint64_t now_ms);
void flights_refresh(struct flights *t, const struct upstream_request *r, uint64_t now_ms);

/* What came of asking f (flights_result). */
enum flight_outcome {
	FLIGHT_ANSWERED,     /* an answer, for every waiter: msg, len, cached */
	FLIGHT_FAILED,       /* SERVFAIL or no answer: asked once more, or failed */
	FLIGHT_UNUSABLE,     /* an answer that cannot be used (a chain it does not join) */
	FLIGHT_BOGUS,        /* DNSSEC validation failed */
	FLIGHT_NO_CANDIDATE, /* autopath: the candidate asked does not exist */
};

struct flight_result {
	enum flight_outcome outcome;
	const uint8_t *msg;
	size_t len;
	bool cached;
};

/*
 * f's question came back from the upstream (ask's promise kept). The
 * answer is already in the cache where it belongs (result.c); this
 * answers f's waiters, asks again (a retry, autopath's next candidate),
 * marks or clears the failing mark and the cool-down, and lets f go once
 * nothing needs it. f may be freed: do not use it after.
 */
void flights_result(struct flights *t, struct flight *f, const struct flight_result *res,
		    uint64_t now_ms);

/* Time: answer the waiters whose deadline has come; once a second, drop cooled-down flights. */
void flights_expire(struct flights *t, uint64_t now_ms);
/* Ask queued questions while there is room and pace allows. */
void flights_start_queued(struct flights *t, uint64_t now_ms);
/* Milliseconds until flights_expire or flights_start_queued has work (at most cap). */
uint64_t flights_wait_ms(const struct flights *t, uint64_t now_ms, uint64_t cap);
/* The latest deadline of any waiter (now when none waits). */
uint64_t flights_last_deadline_ms(const struct flights *t, uint64_t now_ms);
/* Clients waiting. */
unsigned flights_waiting(const struct flights *t);
/* True while the upstream looks down (its last resolution failed or timed out). Any thread. */
bool flights_failing(const struct flights *t);

/* What to ask for f: its question, the end of its local CNAME chain, or autopath's candidate. */
const uint8_t *flight_name(const struct flight *f);

/*
 * The table by question alone (flights_init sets one up), its buckets
 * chosen by the cache key's hash: init is -1 without memory,
 * longest_chain the longest bucket (tests and hash-flooding checks).
 */
int flight_table_init(struct flight_table *t);
void flight_table_free(struct flight_table *t);
size_t flight_table_longest_chain(const struct flight_table *t);

#endif
