/*
 * upstream/stats.h — what the resolver counts: how libunbound's results
 * came out, why questions were given up, how long libunbound took, and
 * the replies the resolver sent.
 *
 * Owns: the counters (struct upstream_counters), written by the resolver
 * thread only, as relaxed atomics, so that any thread may read them
 * (upstream_stats) without a lock; each is exact on its own, the set is
 * not a snapshot. The public side (the enums, struct upstream_stats)
 * reaches the rest of the daemon through upstream.h.
 *
 * Must never: be written from two threads; be read as a consistent set.
 */
#ifndef LOCALDNS_UPSTREAM_STATS_H
#define LOCALDNS_UPSTREAM_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "dns/dns.h"

/* Upper bounds (seconds) of the libunbound latency histogram's buckets. */
#define UPSTREAM_LATENCY_BUCKETS 14
extern const double upstream_latency_bounds[UPSTREAM_LATENCY_BUCKETS];

/* What libunbound's results said. */
enum upstream_result {
	UPSTREAM_RESULT_NOERROR, UPSTREAM_RESULT_NXDOMAIN, UPSTREAM_RESULT_SERVFAIL,
	UPSTREAM_RESULT_OTHER,   /* another rcode */
	UPSTREAM_RESULT_ERROR,   /* no answer at all (libunbound's error) */
	UPSTREAM_RESULT_BOGUS,   /* DNSSEC validation failed */
	UPSTREAM_RESULTS
};
extern const char *const upstream_result_names[UPSTREAM_RESULTS];

/* Why a question was given up without asking libunbound. */
enum upstream_shed {
	UPSTREAM_SHED_QUEUE_FULL, /* the queue was full: its longest-waiting question made room */
	UPSTREAM_SHED_TABLE_FULL, /* MAX_FLIGHTS questions were known already */
	UPSTREAM_SHED_REFRESH_LIMIT, /* a refresh, when refreshes held their share of places */
	UPSTREAM_SHEDS
};
extern const char *const upstream_shed_names[UPSTREAM_SHEDS];

struct upstream_stats {
	uint64_t queries;      /* libunbound queries started */
	uint64_t coalesced;    /* requests that joined a query in flight */
	uint64_t answers;      /* libunbound results that were not failures */
	uint64_t failures;     /* SERVFAIL or error results */
	uint64_t timeouts;     /* clients answered at their deadline */
	uint64_t stale;        /* clients given a stale answer by the resolver */
	uint64_t servfail;     /* clients given SERVFAIL by the resolver */
	uint64_t dropped;      /* requests lost to a full ring or waiter cap */
	uint64_t bogus;        /* DNSSEC validation failures */
	uint64_t shed[UPSTREAM_SHEDS]; /* questions given up without asking */
	uint64_t renewals;     /* fresh libunbound contexts for a full, silent one */
	uint64_t paced;        /* questions that waited for upstream.max_rate */
	uint64_t retries;      /* failed questions asked once more for waiting clients */
	uint64_t client_limited; /* requests answered at once (refreshes not sent): their
				    client had too many pending */
	uint64_t evicted;      /* waiting clients answered early to make room for another's */
	uint64_t dns64_synthesized; /* replies the resolver made AAAA from A records (DNS64) */
	uint64_t results[UPSTREAM_RESULTS]; /* libunbound's results */
	uint64_t resolving;    /* gauge: libunbound queries running now */
	uint64_t queued;       /* gauge: questions waiting for room or pace */
	uint64_t flights;      /* gauge: questions known (running, queued, cooling down) */
	uint64_t rcode[DNS_RCODE_SLOTS]; /* replies the resolver sent (dns_reply_rcode_slot) */
	uint64_t truncated;    /* of those, with TC=1 */
	uint64_t rrl_slipped, rrl_dropped; /* of the UDP ones, past rrl.*: truncated / not sent */
	/* From asking libunbound to its result (any result): how many took at
	 * most each bound (cumulative), all of them, and their total time. */
	uint64_t latency_le[UPSTREAM_LATENCY_BUCKETS];
	uint64_t latency_count;
	double latency_sum;    /* seconds */
};

/* The resolver's counters: the same figures, as the resolver thread keeps them. */
struct upstream_counters {
	_Atomic uint64_t queries, coalesced, answers, failures, timeouts, stale,
		servfail, dropped, bogus, renewals, paced, retries, client_limited, evicted,
		rrl_slipped, rrl_dropped, /* UDP replies past rrl.* (deliver.c) */
		dns64_synthesized;
	_Atomic uint64_t shed[UPSTREAM_SHEDS];
	_Atomic uint64_t results[UPSTREAM_RESULTS];
	_Atomic uint64_t resolving;  /* gauge: libunbound queries running, all contexts */
	_Atomic uint64_t queued;     /* gauge: questions in the queue */
	_Atomic uint64_t flights;    /* gauge: questions in the flight table */
	_Atomic uint64_t rcode[DNS_RCODE_SLOTS], truncated;
	_Atomic uint64_t latency[UPSTREAM_LATENCY_BUCKETS + 1]; /* per bucket, last: above all */
	_Atomic uint64_t latency_ns;
};

static inline void upstream_bump(_Atomic uint64_t *counter)
{
	atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

static inline void upstream_gauge(_Atomic uint64_t *gauge, uint64_t value)
{
	atomic_store_explicit(gauge, value, memory_order_relaxed);
}

/* One libunbound query took took_ns from asking to its result. */
void upstream_observe_latency(struct upstream_counters *n, uint64_t took_ns);

/* The counters as figures (the histogram made cumulative). Any thread. */
void upstream_counters_read(const struct upstream_counters *n, struct upstream_stats *out);

#endif
