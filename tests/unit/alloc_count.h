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
#include <stdbool.h>
#include <stddef.h>

static volatile bool counting; /* volatile: GCC knows malloc reads no globals */
static volatile unsigned long forbidden_calls;

#define WEAK __attribute__((weak))
WEAK void *__real_malloc(size_t size);
WEAK void *__real_calloc(size_t n, size_t size);
WEAK void *__real_realloc(void *p, size_t size);
WEAK void __real_free(void *p);
WEAK int __real_pthread_mutex_lock(pthread_mutex_t *m);
#undef WEAK

void *__wrap_malloc(size_t size)
{
	forbidden_calls += counting;
	return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
	forbidden_calls += counting;
	return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
	forbidden_calls += counting;
	return __real_realloc(p, size);
}

void __wrap_free(void *p)
{
	forbidden_calls += counting && p;
	__real_free(p);
}

int __wrap_pthread_mutex_lock(pthread_mutex_t *m)
{
	forbidden_calls += counting;
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
