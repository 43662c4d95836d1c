/*
 * alloc_count.h — counts every malloc, calloc, realloc, free (of a non-NULL
 * pointer) and pthread_mutex_lock the code under test makes while
 * `counting` is true, for the hot-path promise "no allocation, no lock".
 *
 * Include it in exactly one file of a test binary linked with
 *   -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=pthread_mutex_lock
 * (a target-specific LDFLAGS line in the Makefile). The __real_ symbols are
 * weak, so the binary still links without that line; the wrappers then lie
 * idle, and a test should check alloc_counting_works() before it trusts a
 * zero.
 */
#ifndef LOCALDNS_TEST_ALLOC_COUNT_H
#define LOCALDNS_TEST_ALLOC_COUNT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* volatile: GCC knows malloc reads no globals; _Atomic: other threads of a
 * test (cache writers, walkers) allocate while the main thread counts */
static volatile _Atomic bool counting;
static volatile _Atomic unsigned long forbidden_calls;
/* Of those, the heap's (malloc, calloc, realloc and free), apart: for a
 * test of where memory comes from off the hot path. */
static volatile _Atomic unsigned long heap_calls;

/* With count_one_thread set, only calls made by count_thread count (a test
 * whose code under test has a thread of its own that may run meanwhile). */
static volatile _Atomic bool count_one_thread;
static pthread_t count_thread;

/* One more forbidden call, if we are counting; `heap` for the heap's. */
static void count_call(bool heap)
{
	if (atomic_load_explicit(&count_one_thread, memory_order_relaxed) &&
	    !pthread_equal(pthread_self(), count_thread))
		return;
	if (!atomic_load_explicit(&counting, memory_order_relaxed))
		return;
	atomic_fetch_add_explicit(&forbidden_calls, 1, memory_order_relaxed);
	if (heap)
		atomic_fetch_add_explicit(&heap_calls, 1, memory_order_relaxed);
}

#define WEAK __attribute__((weak))
WEAK void *__real_malloc(size_t size);
WEAK void *__real_calloc(size_t n, size_t size);
WEAK void *__real_realloc(void *p, size_t size);
WEAK void __real_free(void *p);
WEAK int __real_pthread_mutex_lock(pthread_mutex_t *m);
#undef WEAK

void *__wrap_malloc(size_t size)
{
	count_call(true);
	return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
	count_call(true);
	return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
	count_call(true);
	return __real_realloc(p, size);
}

void __wrap_free(void *p)
{
	if (p)
		count_call(true);
	__real_free(p);
}

int __wrap_pthread_mutex_lock(pthread_mutex_t *m)
{
	count_call(false);
	return __real_pthread_mutex_lock(m);
}

static void *volatile alloc_probe;

/* Whether this binary is linked with the wrappers: our own malloc call tells.
 * Leaves forbidden_calls at 0. */
static bool alloc_counting_works(void)
{
	bool works;

	forbidden_calls = 0;
	counting = true;
	alloc_probe = malloc(16);
	counting = false;
	free(alloc_probe);
	works = forbidden_calls > 0;
	forbidden_calls = 0;
	return works;
}

#endif
