/*
 * talkers — the top talkers: which clients, names, NXDOMAIN names and SERVFAIL
 * names the node's queries come from, for `localdns ctl top` ("which pod is
 * doing this?"), in bounded memory.
 *
 * Owns: one set of space-saving sketches per producer (each worker, and the
 * resolver thread for the replies it sends), in slots of a minute for the
 * last ten; the merge of them on read. A sketch keeps TALKERS_ENTRIES keys
 * and their counts: a key that is not there replaces the one with the least
 * count and takes over its count plus one, so any key asked more than a
 * 1/TALKERS_ENTRIES share of the sampled queries is in, and every count is at
 * most the true count plus the least count (Metwally et al.'s guarantee).
 *
 * Must never: allocate, lock or make a syscall on the producer side; cost a
 * producer more than a counter decrement on the queries it does not sample
 * (one in TALKERS_SAMPLE on average is sampled: counts are estimates, the
 * sampled count times TALKERS_SAMPLE); make a producer wait for a reader
 * (readers copy a slot under its sequence count and retry when it changed).
 *
 * Lifetimes: talkers_start before any producer starts, talkers_stop after
 * every one has stopped; talkers_read from any thread in between.
 */
#ifndef LOCALDNS_TALKERS_H
#define LOCALDNS_TALKERS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define TALKERS_SAMPLE 16         /* one query in this many is counted */
#define TALKERS_ENTRIES 32        /* keys a sketch keeps */
#define TALKERS_KEY_MAX 96        /* an address, or a wire name's first bytes */
#define TALKERS_SLOTS 10          /* minutes kept */
#define TALKERS_SLOT_SECONDS 60
#define TALKERS_RESOLVER UINT_MAX /* the resolver thread's producer id; workers use theirs */

enum talkers_kind {
	TALKERS_CLIENTS, TALKERS_NAMES, TALKERS_NXDOMAIN, TALKERS_SERVFAIL,
	TALKERS_KINDS
};

/*
 * A producer's sampler: one query in TALKERS_SAMPLE on average, at random gaps
 * (1 .. 2 x TALKERS_SAMPLE - 1): a fixed 1-in-N would alias with a client that
 * asks in a cycle (two names in turn, every 16th always the same name).
 */
struct talkers_sampler {
	uint32_t left;  /* queries until the next sample */
	uint32_t state; /* xorshift32; any value but 0 (0 is fixed at the first call) */
};

static inline bool talkers_sample(struct talkers_sampler *s)
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
	s->left = 1 + x % (2 * TALKERS_SAMPLE - 1);
	return true;
}

/*
 * A sampled query of client for qname (a wire name) with this rcode (-1:
 * not known yet: the resolver will tell). client NULL: a reply the resolver
 * sent, which counts only towards the NXDOMAIN and SERVFAIL lists (its query
 * was counted by the worker that took it). Only `producer` calls this for
 * its sketches. Nothing happens before talkers_start or after talkers_stop.
 */
void talkers_note(unsigned producer, const struct sockaddr_storage *client, const uint8_t *qname,
		  size_t qname_len, int rcode);

/* The same, reading the question name and rcode from a reply we wrote (question uncompressed). */
void talkers_note_reply(unsigned producer, const struct sockaddr_storage *client,
			const uint8_t *reply, size_t len);

struct talkers_item {
	uint64_t count;        /* an estimate: sampled count times TALKERS_SAMPLE */
	size_t key_len;
	bool cut;              /* a name longer than TALKERS_KEY_MAX: only its start is here */
	uint8_t key[TALKERS_KEY_MAX]; /* TALKERS_CLIENTS: family byte, then 4 or 16 address
				       * bytes; else a wire name (whole unless cut) */
};

/*
 * The largest counts of kind over the last `seconds` (rounded up to whole
 * minutes, at most TALKERS_SLOTS of them), all producers merged, most first.
 * Returns how many were written (at most max). Any thread.
 */
size_t talkers_read(enum talkers_kind kind, uint64_t seconds, struct talkers_item *out,
		    size_t max);

/* Sketches for n_workers workers and the resolver (pages touched only when used). -1: no memory. */
int talkers_start(unsigned n_workers);
void talkers_stop(void);

#endif
