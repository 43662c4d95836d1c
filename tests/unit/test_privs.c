/*
 * Unit tests for privs/thread.c's thread start: a thread started through
 * privs_thread_create runs its function with cancellation disabled and of
 * the asynchronous type, which is what lets glibc's wrapper around each
 * blocking call (recvmmsg, epoll_wait, libunbound's send and recv) skip
 * its two atomic operations; and it runs its function under its kind's
 * restrictions, not before.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "privs/privs.h"

struct seen {
	int cancel_state;
	int cancel_type;
	bool ran;
};

static void *look(void *arg)
{
	struct seen *s = arg;

	/* setting each to what it should already be gives back what it was */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &s->cancel_state);
	pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &s->cancel_type);
	s->ran = true;
	return NULL;
}

static void test_a_started_thread_can_never_be_cancelled(void **state)
{
	struct seen s = {.cancel_state = -1, .cancel_type = -1};
	char err[256] = "";
	pthread_t t;

	(void)state;
	assert_int_equal(privs_thread_create(&t, PRIVS_WORKER, "test-worker", look, &s, err,
					     sizeof err), 0);
	pthread_join(t, NULL);
	assert_true(s.ran);
	assert_int_equal(s.cancel_state, PTHREAD_CANCEL_DISABLE);
	assert_int_equal(s.cancel_type, PTHREAD_CANCEL_ASYNCHRONOUS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_started_thread_can_never_be_cancelled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
