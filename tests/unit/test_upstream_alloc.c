/*
 * Unit tests for upstream/alloc.c: libunbound's calloc through malloc's
 * thread cache. malloc, calloc and upstream_calloc are wrapped
 * (-Wl,--wrap=..., Makefile) to count which one each allocation went
 * through: a small block must come from malloc (glibc's calloc skips the
 * thread cache), a large one from calloc, and our libunbound must call
 * upstream_calloc, not libc's calloc.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unbound.h>

#include "upstream/alloc.h"

static unsigned mallocs, callocs, upstream_callocs;

void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size)
{
	mallocs++;
	return __real_malloc(size);
}

void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size)
{
	callocs++;
	return __real_calloc(n, size);
}

void *__real_upstream_calloc(size_t n, size_t size);
void *__wrap_upstream_calloc(size_t n, size_t size)
{
	upstream_callocs++;
	return __real_upstream_calloc(n, size);
}

static void assert_zeroed(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		assert_int_equal(p[i], 0);
}

static void reset_counts(void)
{
	mallocs = callocs = upstream_callocs = 0;
}

static void test_a_small_block_comes_from_malloc_and_is_zeroed(void **state)
{
	(void)state;
	/* A block of the same size written and freed just before: the thread
	 * cache gives it back as it was, so only the zeroing can clear it. */
	for (int round = 0; round < 8; round++) {
		uint8_t *dirty = __real_malloc(200);
		assert_non_null(dirty);
		memset(dirty, 0xa5, 200);
		free(dirty);
		reset_counts();
		uint8_t *p = upstream_calloc(25, 8);
		assert_non_null(p);
		assert_int_equal(mallocs, 1);
		assert_int_equal(callocs, 0);
		assert_zeroed(p, 200);
		free(p);
	}
}

static void test_a_large_block_comes_from_calloc_and_is_zeroed(void **state)
{
	(void)state;
	reset_counts();
	uint8_t *p = upstream_calloc(16, 4096);
	assert_non_null(p);
	assert_int_equal(callocs, 1);
	assert_int_equal(mallocs, 0);
	assert_zeroed(p, 16 * 4096);
	free(p);

	/* the boundary: 1,024 bytes is still the thread cache's, 1,025 is not */
	reset_counts();
	p = upstream_calloc(1, 1024);
	assert_non_null(p);
	assert_int_equal(mallocs, 1);
	free(p);
	reset_counts();
	p = upstream_calloc(1, 1025);
	assert_non_null(p);
	assert_int_equal(callocs, 1);
	free(p);
}

static void test_a_size_that_wraps_around_is_refused(void **state)
{
	(void)state;
	reset_counts();
	errno = 0;
	assert_null(upstream_calloc(SIZE_MAX / 2, 3));
	assert_int_equal(errno, ENOMEM);
	errno = 0;
	assert_null(upstream_calloc(3, SIZE_MAX / 2));
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(mallocs + callocs, 0); /* not a small block of what is left */
}

static void test_nothing_asked_for_is_still_a_block_free_takes(void **state)
{
	(void)state;
	/* as glibc's calloc(0, ...): a minimal block of malloc's, not NULL (which a
	 * caller would take for no memory) */
	reset_counts();
	void *p = upstream_calloc(0, 8);
	assert_non_null(p);
	assert_int_equal(mallocs, 1);
	free(p);
	p = upstream_calloc(8, 0);
	assert_non_null(p);
	assert_int_equal(mallocs, 2);
	assert_int_equal(callocs, 0);
	free(p);
}

static void test_libunbound_allocates_through_it(void **state)
{
	(void)state;
	reset_counts();
	struct ub_ctx *ctx = ub_ctx_create();
	assert_non_null(ctx);
	assert_int_equal(ub_ctx_set_option(ctx, "do-ip6:", "no"), 0);
	ub_ctx_delete(ctx);
	assert_true(upstream_callocs > 0);
	/* every calloc of libunbound's came through upstream_calloc: the only
	 * callocs left are the large blocks it passed on */
	assert_true(callocs <= upstream_callocs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_small_block_comes_from_malloc_and_is_zeroed),
		cmocka_unit_test(test_a_large_block_comes_from_calloc_and_is_zeroed),
		cmocka_unit_test(test_a_size_that_wraps_around_is_refused),
		cmocka_unit_test(test_nothing_asked_for_is_still_a_block_free_takes),
		cmocka_unit_test(test_libunbound_allocates_through_it),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
