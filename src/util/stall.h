/*
 * util/stall — is a loop stuck, or only starved of CPU?
 *
 * A watcher looks at a loop's heartbeat (any value that changes each time
 * the loop turns) at a steady pace, and asks how long it has stood still.
 * Time counts only between two looks that came on time, and only while the
 * loop's thread was not waiting for a CPU:
 *
 *   - a watcher that was itself late was short of CPU, as the loop it
 *     watches most likely was (the same node, often the same process or
 *     cgroup): that interval proves nothing about the loop;
 *   - a thread the kernel shows runnable ('R') that got less than half of
 *     the interval's CPU waited for one (other work, or its cgroup's CPU
 *     limit): starved, not stuck. Stopped ('T'), asleep outside its loop
 *     (a deadlock) or spinning (runnable, and getting the CPU) is stuck.
 *
 * So a loop that is stopped, deadlocked or spinning is judged within its
 * limit plus one look, and one that waits for a CPU is not judged at all
 * while it waits. The thread's state comes from the kernel (util/task.h);
 * without it (another PID namespace) only the watcher's lateness counts.
 *
 * Used by the node monitor (src/daemon: should this process keep taking
 * DNS) and by the keeper (src/keeper: should it answer what is queued in a
 * worker's sockets). Pure: the caller passes the clock and the thread's
 * state, so tests/unit/test_stall.c replays schedules.
 *
 * Must never: read a clock or a file, allocate, lock or log.
 */
#ifndef LOCALDNS_UTIL_STALL_H
#define LOCALDNS_UTIL_STALL_H

#include <stdbool.h>
#include <stdint.h>

struct stall_judge {
	bool seen;          /* false until the first look */
	uint64_t beat;      /* the heartbeat at the last look */
	uint64_t look_ms;   /* when that look was (the watcher's clock) */
	uint64_t still_ms;  /* how long the heartbeat has stood still, counted time only */
	bool cpu_known;     /* cpu_ns is the thread's CPU time at the last look */
	uint64_t cpu_ns;
};

/* What the kernel says of the loop's thread at a look; known false: nothing. */
struct stall_task {
	bool known;
	char state;         /* 'R', 'S', 'D', 'T', ... (proc(5)) */
	uint64_t cpu_ns;    /* CPU time so far */
};

/* Runnable, and got less than half of the gap's CPU (or cannot tell yet): waited for one. */
static inline bool stall_waited_for_cpu(const struct stall_judge *j, const struct stall_task *t,
					uint64_t gap_ms)
{
	if (!t || !t->known || t->state != 'R')
		return false;
	if (!j->cpu_known || t->cpu_ns < j->cpu_ns)
		return true;
	return t->cpu_ns - j->cpu_ns < gap_ms * 1000000u / 2;
}

/*
 * One look at the heartbeat beat at now_ms (the watcher's monotonic clock),
 * with the thread's state t (NULL: unknown). A look more than on_time_ms
 * after the previous one was late: its interval is not counted (nor is the
 * loop cleared); nor is one in which the thread waited for a CPU. Returns
 * how long the heartbeat has stood still over counted time; the first
 * look returns 0.
 */
static inline uint64_t stall_judge_look(struct stall_judge *j, uint64_t beat, uint64_t now_ms,
					uint64_t on_time_ms, const struct stall_task *t)
{
	uint64_t gap = j->seen && now_ms > j->look_ms ? now_ms - j->look_ms : 0;

	if (!j->seen || beat != j->beat) {
		j->beat = beat;
		j->still_ms = 0;
	} else if (gap <= on_time_ms && !stall_waited_for_cpu(j, t, gap)) {
		j->still_ms += gap;
	}
	j->cpu_known = t && t->known;
	j->cpu_ns = j->cpu_known ? t->cpu_ns : 0;
	j->look_ms = now_ms;
	j->seen = true;
	return j->still_ms;
}

#endif
