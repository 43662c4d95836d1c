/*
 * top — the top talkers: which clients, names, NXDOMAIN names and SERVFAIL
 * names the node's queries come from, for `localdns ctl top` ("which pod is
 * doing this?"), in bounded memory.
 *
 * Owns: one set of space-saving sketches per producer (each worker, and the
 * resolver thread for the replies it sends), in slots of a minute for the
 * last ten; the merge of them on read. A sketch keeps TOP_ENTRIES keys and
 * their counts: a key that is not there replaces the one with the least
 * count and takes over its count plus one, so any key asked more than a
 * 1/TOP_ENTRIES share of the sampled queries is in, and every count is at
 * most the true count plus the least count (Metwally et al.'s guarantee).
 *
 * Must never: allocate, lock or make a syscall on the producer side; cost a
 * producer more than a counter decrement on the queries it does not sample
 * (one in TOP_SAMPLE on average is sampled: counts are estimates, the
 * sampled count times TOP_SAMPLE); make a producer wait for a reader (readers copy a
 * slot under its sequence count and retry when it changed).
 *
 * Lifetimes: top_start before any producer starts, top_stop after every
 * one has stopped; top_read from any thread in between.
 */
#ifndef LOCALDNS_TOP_H
#define LOCALDNS_TOP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define TOP_SAMPLE 16         /* one query in this many is counted */
#define TOP_ENTRIES 32        /* keys a sketch keeps */
#define TOP_KEY_MAX 96        /* an address, or a wire name's first bytes */
#define TOP_SLOTS 10          /* minutes kept */
#define TOP_SLOT_SECONDS 60
#define TOP_RESOLVER UINT_MAX /* the resolver thread's producer id; workers use theirs */

enum top_kind { TOP_CLIENTS, TOP_NAMES, TOP_NXDOMAIN, TOP_SERVFAIL, TOP_KINDS };

/*
 * A producer's sampler: one query in TOP_SAMPLE on average, at random gaps
 * (1 .. 2 x TOP_SAMPLE - 1): a fixed 1-in-N would alias with a client that
 * asks in a cycle (two names in turn, every 16th always the same name).
 */
struct top_sampler {
	uint32_t left;  /* queries until the next sample */
	uint32_t state; /* xorshift32; any value but 0 (0 is fixed at the first call) */
};

static inline bool top_sample(struct top_sampler *s)
{
	if (s->left > 1) {
		s->left--;
		return false;
	}
	uint32_t x = s->state ? s->state : 0x9e3779b9u;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	s->state = x;
	s->left = 1 + x % (2 * TOP_SAMPLE - 1);
	return true;
}

/*
 * A sampled query of client for qname (a wire name) with this rcode (-1:
 * not known yet: the resolver will tell). client NULL: a reply the resolver
 * sent, which counts only towards the NXDOMAIN and SERVFAIL lists (its query
 * was counted by the worker that took it). Only `producer` calls this for
 * its sketches. Nothing happens before top_start or after top_stop.
 */
void top_note(unsigned producer, const struct sockaddr_storage *client, const uint8_t *qname,
	      size_t qname_len, int rcode);

/* The same, reading the question name and rcode from a reply we wrote (question uncompressed). */
void top_note_reply(unsigned producer, const struct sockaddr_storage *client,
		    const uint8_t *reply, size_t len);

struct top_item {
	uint64_t count;        /* an estimate: sampled count times TOP_SAMPLE */
	size_t key_len;
	bool cut;              /* a name longer than TOP_KEY_MAX: only its start is here */
	uint8_t key[TOP_KEY_MAX]; /* TOP_CLIENTS: family byte, then 4 or 16 address bytes;
				     else a wire name (whole unless cut) */
};

/*
 * The largest counts of kind over the last `seconds` (rounded up to whole
 * minutes, at most TOP_SLOTS of them), all producers merged, most first.
 * Returns how many were written (at most max). Any thread.
 */
size_t top_read(enum top_kind kind, uint64_t seconds, struct top_item *out, size_t max);

/* Sketches for n_workers workers and the resolver (pages touched only when used). -1: no memory. */
int top_start(unsigned n_workers);
void top_stop(void);

#endif
