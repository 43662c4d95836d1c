/*
 * upstream/pace.h — a token bucket: at most rate questions a second, in
 * bursts of at most a tenth of a second's worth (at least one). rate 0
 * means no limit. Pure: the caller passes the clock; no allocation, no
 * lock, no state beyond the struct.
 */
#ifndef LOCALDNS_UPSTREAM_PACE_H
#define LOCALDNS_UPSTREAM_PACE_H

#include <stdbool.h>
#include <stdint.h>

struct pace {
	uint64_t rate;         /* questions per second; 0 = unlimited */
	uint64_t burst_milli;  /* bucket size, in thousandths of a question */
	uint64_t tokens_milli;
	uint64_t at_ms;        /* when tokens_milli was last brought up to date */
};

void pace_init(struct pace *p, uint64_t rate, uint64_t now_ms);
/* Take one token: true when a question may go now. */
bool pace_take(struct pace *p, uint64_t now_ms);
/* Milliseconds until pace_take can succeed (0: now). */
uint64_t pace_wait_ms(const struct pace *p, uint64_t now_ms);

#endif
