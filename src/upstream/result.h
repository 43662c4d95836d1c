/*
 * upstream/result.h — what the upstream answered, into the cache and on to
 * the flight table (result.c). Pure: no I/O, no clock; upstream.c hands it
 * libunbound's result without libunbound's types.
 */
#ifndef LOCALDNS_UPSTREAM_RESULT_H
#define LOCALDNS_UPSTREAM_RESULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "dns/dns.h"
#include "upstream/flight.h"
#include "upstream/stats.h"

/* One result for a flight, as the upstream gave it. */
struct upstream_answer {
	enum upstream_result kind;
	uint8_t *msg;          /* the reply (not with UPSTREAM_RESULT_ERROR); its AD bit is rewritten */
	size_t len;
	bool secure;           /* DNSSEC validated it */
	const char *why_bogus; /* UPSTREAM_RESULT_BOGUS: the validator's reason, or NULL */
};

struct results {
	struct flights *flights;
	struct cache *cache;
	uint8_t compacted[DNS_MAX_MESSAGE]; /* an answer rewritten for the cache */
};

void results_init(struct results *rs, struct flights *t, struct cache *cache);

/*
 * The upstream's result a for f: stored in the cache when f ran on the
 * upstream asked now (rewritten: names compressed, DNSSEC records dropped
 * for DO=0, AD from the validator's verdict; a local CNAME chain or
 * autopath's CNAME joined in front), then given to the flight table
 * (flights_result), which answers f's waiters. f may be freed.
 */
void result_take(struct results *rs, struct flight *f, struct upstream_answer *a,
		 uint64_t now_ms);

#endif
