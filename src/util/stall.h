/*
 * util/stall — is a loop stuck, or only starved of CPU?
 *
 * A watcher looks at a loop's heartbeat (any value that changes each time
 * the loop turns) at a steady pace, and asks how long it has stood still.
 * Time counts only between two looks that came on time: a watcher that was
 * itself late was short of CPU, as the loop it watches most likely was (the
 * same node, often the same process or cgroup), so that interval proves
 * nothing about the loop. A loop that is stopped, deadlocked or spinning
 * elsewhere is judged within its limit plus one look; one that waits for a
 * CPU it shares with its watcher is not judged at all while it waits.
 *
 * Used by the node monitor (src/daemon: should this process keep taking
 * DNS) and by the keeper (src/keeper: should it answer what is queued in a
 * worker's sockets). Pure: the caller passes the clock, so
 * tests/unit/test_stall.c replays schedules.
 *
 * Must never: read a clock, allocate, lock or log.
 */
#ifndef LOCALDNS_UTIL_STALL_H
#define LOCALDNS_UTIL_STALL_H

#include <stdbool.h>
#include <stdint.h>

struct stall_judge {
	bool seen;          /* false until the first look */
	uint64_t beat;      /* the heartbeat at the last look */
	uint64_t look_ms;   /* when that look was (the watcher's clock) */
	uint64_t still_ms;  /* how long the heartbeat has stood still, on-time looks only */
};

/*
 * One look at the heartbeat beat at now_ms (the watcher's monotonic clock).
 * A look more than on_time_ms after the previous one was late: its interval
 * is not counted (nor is the loop cleared). Returns how long the heartbeat
 * has stood still over on-time looks; the first look returns 0.
 */
static inline uint64_t stall_judge_look(struct stall_judge *j, uint64_t beat, uint64_t now_ms,
					uint64_t on_time_ms)
{
	uint64_t gap = j->seen && now_ms > j->look_ms ? now_ms - j->look_ms : 0;

	if (!j->seen || beat != j->beat) {
		j->beat = beat;
		j->still_ms = 0;
	} else if (gap <= on_time_ms) {
		j->still_ms += gap;
	}
	j->look_ms = now_ms;
	j->seen = true;
	return j->still_ms;
}

#endif
