/*
 * querylog — the sampled query log: with log.queries = N > 0, one log line
 * (msg=query) for one query in every N each worker answers; 0 = off.
 *
 * Owns: the sampling rule, one single-producer/single-consumer ring of
 * fixed-size records per producer (each worker, and the resolver thread
 * for the replies it sends), the log thread that turns records into lines
 * every 100 ms, and the count of records dropped because a ring was full.
 *
 * Must never: allocate, lock, format or make a syscall on the producer
 * side (a record is copied into the producer's own ring; the clock is read
 * through the vDSO); make a producer wait (a full ring drops the record
 * and counts it); cost a worker more than one predictable branch per query
 * while off (querylog_sample).
 *
 * Which queries: every query that gets a reply counts; a worker answers
 * most itself and records them at once. A query handed to the resolver is
 * recorded by the resolver thread when it sends the reply, so its line has
 * the rcode the client got (source=upstream, whether the answer came from
 * libunbound, from the cache filled meanwhile, from a stale entry at the
 * deadline, or is a SERVFAIL). Queries that get no reply (QR=1, runts,
 * requests lost to a full resolver ring) are not logged.
 *
 * Lifetimes: querylog_start before any producer starts; querylog_stop after
 * every producer has stopped: it writes what is left and the drop count.
 */
#ifndef LOCALDNS_QUERYLOG_H
#define LOCALDNS_QUERYLOG_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config/config.h"
#include "query/kinds.h"

/* The producer id of the resolver thread; workers use their worker id. */
#define QUERYLOG_RESOLVER UINT_MAX

/* log.queries as currently applied; 0 while off or not started. */
extern _Atomic uint32_t querylog_every;

/*
 * Whether this query is the one in N to log. count is the producer's own
 * counter (starts at 0). While off this is one load and one branch the
 * CPU predicts right every time.
 */
static inline bool querylog_sample(uint32_t *count)
{
	uint32_t every = atomic_load_explicit(&querylog_every, memory_order_relaxed);

	if (__builtin_expect(every == 0, 1))
		return false;
	if (++*count < every)
		return false;
	*count = 0;
	return true;
}

/*
 * Record one reply (reply[0..len), len > 0) sent to client over transport:
 * the question and rcode are read from the reply, the time is now. Only
 * `producer` may call this for its ring. Nothing happens before
 * querylog_start or after querylog_stop.
 */
void querylog_add(unsigned producer, const struct sockaddr_storage *client,
		  enum query_transport transport, enum query_source source,
		  const uint8_t *reply, size_t len);

/*
 * Rings for n_workers workers and the resolver (log.query_buffer records
 * each, rounded up to a power of two; pages are touched only when used),
 * and the log thread; sampling as cfg's log.queries. -1 with err set.
 */
int querylog_start(const struct config *cfg, unsigned n_workers, char *err, size_t errlen);

/* Apply a new log.queries (reload); any thread. */
void querylog_set_every(uint32_t every);

/* Records dropped so far because a ring was full (for metrics). */
uint64_t querylog_dropped(void);

/* Stop the log thread after writing every record left; free the rings. */
void querylog_stop(void);

#endif
