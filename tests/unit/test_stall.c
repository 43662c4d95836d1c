/*
 * Unit tests for util/stall.h: a stopped loop is judged over the watcher's
 * on-time looks; a loop starved together with its watcher is not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/stall.h"

#define LOOK 50     /* the keeper's pace */
#define ON_TIME 100 /* a look up to 50 ms late still counts */

static void test_a_turning_loop_never_stands_still(void **state)
{
	(void)state;
	struct stall_judge j = {0};

	for (uint64_t t = 0; t < 10000; t += LOOK)
		assert_int_equal(stall_judge_look(&j, t / 100, t, ON_TIME, NULL), t % 100 ? LOOK : 0);
}

static void test_a_stopped_loop_is_judged_over_on_time_looks(void **state)
{
	(void)state;
	struct stall_judge j = {0};
	uint64_t t = 0;

	assert_int_equal(stall_judge_look(&j, 7, t, ON_TIME, NULL), 0);
	for (int i = 1; i <= 6; i++) {
		t += LOOK;
		assert_int_equal(stall_judge_look(&j, 7, t, ON_TIME, NULL), (uint64_t)i * LOOK);
	}
	/* It turns again: cleared at once. */
	assert_int_equal(stall_judge_look(&j, 8, t + LOOK, ON_TIME, NULL), 0);
}

static void test_late_looks_do_not_count(void **state)
{
	(void)state;
	struct stall_judge j = {0};
	uint64_t t = 1000;

	stall_judge_look(&j, 1, t, ON_TIME, NULL);
	/* The watcher itself ran 900 ms late: the loop shared that shortage. */
	t += 900;
	assert_int_equal(stall_judge_look(&j, 1, t, ON_TIME, NULL), 0);
	t += LOOK;
	assert_int_equal(stall_judge_look(&j, 1, t, ON_TIME, NULL), LOOK);
	/* A late look neither counts nor clears what on-time ones counted. */
	t += 300;
	assert_int_equal(stall_judge_look(&j, 1, t, ON_TIME, NULL), LOOK);
	t += ON_TIME; /* exactly on the limit still counts */
	assert_int_equal(stall_judge_look(&j, 1, t, ON_TIME, NULL), LOOK + ON_TIME);
}

static void test_a_clock_that_does_not_move_counts_nothing(void **state)
{
	(void)state;
	struct stall_judge j = {0};

	stall_judge_look(&j, 3, 500, ON_TIME, NULL);
	assert_int_equal(stall_judge_look(&j, 3, 500, ON_TIME, NULL), 0);
	assert_int_equal(stall_judge_look(&j, 3, 400, ON_TIME, NULL), 0); /* never backwards */
}

/* What the kernel says of the thread at each look. */
static struct stall_task task(char state, uint64_t cpu_ms)
{
	return (struct stall_task){.known = true, .state = state, .cpu_ns = cpu_ms * 1000000u};
}

static void test_a_thread_waiting_for_a_cpu_is_not_stuck(void **state)
{
	(void)state;
	struct stall_judge j = {0};
	struct stall_task t = task('R', 100);
	uint64_t now = 0;

	stall_judge_look(&j, 1, now, ON_TIME, &t);
	/* Runnable and a millisecond of CPU in each look: throttled, or queued behind others. */
	for (int i = 1; i <= 20; i++) {
		t = task('R', 100 + (uint64_t)i);
		assert_int_equal(stall_judge_look(&j, 1, now += LOOK, ON_TIME, &t), 0);
	}
	/* Asleep outside its loop (a deadlock): counted from here. */
	t = task('S', 120);
	assert_int_equal(stall_judge_look(&j, 1, now += LOOK, ON_TIME, &t), LOOK);
	t = task('S', 120);
	assert_int_equal(stall_judge_look(&j, 1, now += LOOK, ON_TIME, &t), 2 * LOOK);
}

static void test_stopped_or_spinning_is_stuck(void **state)
{
	(void)state;
	struct stall_judge j = {0};
	struct stall_task t = task('T', 50);
	uint64_t now = 0;

	stall_judge_look(&j, 9, now, ON_TIME, &t);
	for (int i = 1; i <= 6; i++)
		assert_int_equal(stall_judge_look(&j, 9, now += LOOK, ON_TIME, &t), (uint64_t)i * LOOK);
	/* Spinning: runnable and getting the CPU the whole time, loop not turning. */
	struct stall_judge s = {0};
	uint64_t cpu = 0;
	t = task('R', cpu);
	stall_judge_look(&s, 9, now = 0, ON_TIME, &t);
	/* The first runnable look has nothing to compare with: given the benefit of the doubt. */
	for (int i = 1; i <= 6; i++) {
		t = task('R', cpu += LOOK);
		assert_int_equal(stall_judge_look(&s, 9, now += LOOK, ON_TIME, &t), (uint64_t)i * LOOK);
	}
	/* Half the gap's CPU is the line: less is waiting. */
	t = task('R', cpu + LOOK / 2 - 1);
	assert_int_equal(stall_judge_look(&s, 9, now += LOOK, ON_TIME, &t), 6 * LOOK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_turning_loop_never_stands_still),
		cmocka_unit_test(test_a_stopped_loop_is_judged_over_on_time_looks),
		cmocka_unit_test(test_late_looks_do_not_count),
		cmocka_unit_test(test_a_clock_that_does_not_move_counts_nothing),
		cmocka_unit_test(test_a_thread_waiting_for_a_cpu_is_not_stuck),
		cmocka_unit_test(test_stopped_or_spinning_is_stuck),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
