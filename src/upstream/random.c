/*
 * upstream/random.c — libunbound's random numbers from a pool per thread
 * (random.h says why).
 */
#include "upstream/random.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>

#include "log/log.h"

/* 256 bytes: getrandom never returns fewer, nor is interrupted, below that. */
#define POOL_WORDS 64

static _Thread_local struct {
	uint32_t word[POOL_WORDS];
	unsigned left; /* word[0..left) are not drawn yet */
} pool;

static void fill_pool(void)
{
	ssize_t n;

	do
		n = getrandom(pool.word, sizeof pool.word, 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof pool.word) {
		/* arc4random cannot fail; a query ID we made up would be guessable */
		log_error("getrandom failed: no random query IDs or ports", "error",
			  n < 0 ? "system call failed" : "short read");
		abort();
	}
	pool.left = POOL_WORDS;
}

uint32_t upstream_arc4random(void)
{
	if (pool.left == 0)
		fill_pool();
	uint32_t v = pool.word[--pool.left];
	pool.word[pool.left] = 0;
	return v;
}

uint32_t upstream_arc4random_uniform(uint32_t upper)
{
	if (upper < 2)
		return 0;
	/* 2^32 mod upper: the draws below it would make the low values likelier */
	uint32_t min = -upper % upper, r;
	do
		r = upstream_arc4random();
	while (r < min);
	return r % upper;
}

/* The child runs on the forking thread alone: its pool is the parent's, so it is emptied. */
static void empty_pool_in_child(void)
{
	pool.left = 0;
}

__attribute__((constructor)) static void watch_forks(void)
{
	pthread_atfork(NULL, NULL, empty_pool_in_child);
}
