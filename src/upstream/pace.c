/*
 * upstream/pace.c — the token bucket behind upstream.max_rate: how many new
 * questions a second localdns sends its upstream, so that a burst of new
 * names waits its turn here instead of tripping the upstream's own limit
 * (cloud resolvers drop packets past about a thousand a second per
 * interface; corporate ones rate-limit answers).
 *
 * Tokens are kept in thousandths so that any rate refills smoothly at
 * millisecond resolution. The bucket holds a tenth of a second's worth
 * (at least one question): a burst never exceeds the rate by more than
 * that in any second.
 */
#include "upstream/pace.h"

#define MILLI 1000u

void pace_init(struct pace *p, uint64_t rate, uint64_t now_ms)
{
	uint64_t burst = rate / 10;

	p->rate = rate;
	p->burst_milli = (burst ? burst : 1) * MILLI;
	p->tokens_milli = p->burst_milli;
	p->at_ms = now_ms;
}

/* Tokens earned since at_ms, up to the bucket's size. */
static uint64_t tokens_now(const struct pace *p, uint64_t now_ms)
{
	uint64_t elapsed = now_ms > p->at_ms ? now_ms - p->at_ms : 0;

	/* rate tokens a second are rate thousandths a millisecond; with rate
	 * at least 1, burst_milli milliseconds fill any bucket (and keep the
	 * product below from overflowing) */
	if (elapsed >= p->burst_milli)
		return p->burst_milli;
	uint64_t tokens = p->tokens_milli + elapsed * p->rate;
	return tokens > p->burst_milli ? p->burst_milli : tokens;
}

bool pace_take(struct pace *p, uint64_t now_ms)
{
	if (p->rate == 0)
		return true;
	p->tokens_milli = tokens_now(p, now_ms);
	p->at_ms = now_ms > p->at_ms ? now_ms : p->at_ms;
	if (p->tokens_milli < MILLI)
		return false;
	p->tokens_milli -= MILLI;
	return true;
}

uint64_t pace_wait_ms(const struct pace *p, uint64_t now_ms)
{
	uint64_t tokens;

	if (p->rate == 0 || (tokens = tokens_now(p, now_ms)) >= MILLI)
		return 0;
	return (MILLI - tokens + p->rate - 1) / p->rate;
}
