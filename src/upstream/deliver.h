/*
 * upstream/deliver.h — the resolver thread's replies to waiting clients
 * (deliver.c): the flight table's reply callback, which builds each reply
 * and sends it, the only place of the resolver that sends anything.
 */
#ifndef LOCALDNS_UPSTREAM_DELIVER_H
#define LOCALDNS_UPSTREAM_DELIVER_H

#include <stdint.h>

#include "cache/cache.h"
#include "dns/dns.h"
#include "top/top.h"
#include "upstream/flight.h"
#include "upstream/request.h"
#include "upstream/ring.h"
#include "upstream/stats.h"

struct deliver {
	struct cache *cache;
	struct upstream_counters *n;
	struct completion_ring **completions; /* the workers' (borrowed), one each */
	unsigned n_workers;
	bool signal_owed;                     /* a TCP reply was put since deliver_signal */
	struct top_sampler top_sampler;       /* the top talkers' (top_sample) */
	uint8_t buf[DNS_MAX_MESSAGE];         /* the reply being built */
};

/* d replies for these workers, through their completion rings for TCP. */
void deliver_init(struct deliver *d, struct cache *cache, struct upstream_counters *n,
		  struct completion_ring **completions, unsigned n_workers);

/*
 * flight_io.reply, env a struct deliver: answer the client that sent r as
 * a says, with its own ID, question case, EDNS and cookie; UDP with sendto
 * on the socket r came in on, TCP through worker's completion ring (a
 * full ring drops the reply, counted). Counts the reply by rcode, and
 * whether a failure was answered stale or with SERVFAIL.
 */
void deliver_reply(void *env, unsigned worker, const struct upstream_request *r,
		   const struct flight_reply *a, uint64_t now_ms);

/* Wake the workers that have TCP replies waiting: once per loop turn. */
void deliver_signal(struct deliver *d);

#endif
