/*
 * util/clock — the clocks every subsystem reads, in the units they keep.
 *
 * Owns: nothing; these are inline readers of clock_gettime (a vDSO call, no
 * syscall), so the hot path may use them.
 *
 * Must never: allocate, lock, log or keep state.
 *
 * Which clock: timeouts, deadlines and ages use CLOCK_MONOTONIC; times shown to
 * operators (log lines, metrics timestamps) use CLOCK_REALTIME; the workers and
 * the cache count in CLOCK_MONOTONIC_COARSE, one read per batch being enough.
 */
#ifndef LOCALDNS_UTIL_CLOCK_H
#define LOCALDNS_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* For durations finer than a millisecond (the upstream latency histogram). */
static inline uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int64_t monotonic_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

static inline int64_t wall_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}

/* The workers' and the resolver's clock: monotonic_ms's epoch, up to a tick behind. */
static inline int64_t coarse_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC_COARSE);
}

/* The cache's clock: whole seconds, as the workers, the resolver and ctl count. */
static inline uint64_t cache_clock_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec;
}

#endif
