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
		assert_int_equal(stall_judge_look(&j, t / 100, t, ON_TIME), t % 100 ? LOOK : 0);
}

static void test_a_stopped_loop_is_judged_over_on_time_looks(void **state)
{
	(void)state;
	struct stall_judge j = {0};
	uint64_t t = 0;

	assert_int_equal(stall_judge_look(&j, 7, t, ON_TIME), 0);
	for (int i = 1; i <= 6; i++) {
		t += LOOK;
		assert_int_equal(stall_judge_look(&j, 7, t, ON_TIME), (uint64_t)i * LOOK);
	}
	/* It turns again: cleared at once. */
	assert_int_equal(stall_judge_look(&j, 8, t + LOOK, ON_TIME), 0);
}

static void test_late_looks_do_not_count(void **state)
{
	(void)state;
	struct stall_judge j = {0};
	uint64_t t = 1000;

	stall_judge_look(&j, 1, t, ON_TIME);
	/* The watcher itself ran 900 ms late: the loop shared that shortage. */
	t += 900;
	assert_int_equal(stall_judge_look(&j, 1, t, ON_TIME), 0);
	t += LOOK;
	assert_int_equal(stall_judge_look(&j, 1, t, ON_TIME), LOOK);
	/* A late look neither counts nor clears what on-time ones counted. */
	t += 300;
	assert_int_equal(stall_judge_look(&j, 1, t, ON_TIME), LOOK);
	t += ON_TIME; /* exactly on the limit still counts */
	assert_int_equal(stall_judge_look(&j, 1, t, ON_TIME), LOOK + ON_TIME);
}

static void test_a_clock_that_does_not_move_counts_nothing(void **state)
{
	(void)state;
	struct stall_judge j = {0};

	stall_judge_look(&j, 3, 500, ON_TIME);
	assert_int_equal(stall_judge_look(&j, 3, 500, ON_TIME), 0);
	assert_int_equal(stall_judge_look(&j, 3, 400, ON_TIME), 0); /* never backwards */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_turning_loop_never_stands_still),
		cmocka_unit_test(test_a_stopped_loop_is_judged_over_on_time_looks),
		cmocka_unit_test(test_late_looks_do_not_count),
		cmocka_unit_test(test_a_clock_that_does_not_move_counts_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
