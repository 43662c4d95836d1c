/*
 * Unit tests for cache/slab: slots are distinct, aligned and whole; a slot
 * given back is the next one taken of its size; a slab takes one size
 * until it is full; the pool's bytes follow the slabs that hold a slot; a
 * slab whose last slot comes back leaves the process's memory (mincore)
 * and is reused for another size; no new slab is made past the pool's
 * limit; chains are given back through the caller's own link; sizes a
 * slab does not hold are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "cache/slab.h"

#define SLAB ((uintptr_t)SLAB_BYTES)
#define SLOTS_OF(bytes) ((SLAB - 64) / (bytes))

/* A chain of slots linked through their first word, as a caller keeps one. */
struct node {
	struct node *next;
};

static uintptr_t slab_of(const void *slot)
{
	return (uintptr_t)slot & ~(SLAB - 1);
}

/* How many of the slab's pages are resident. */
static size_t resident_pages(uintptr_t slab)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = SLAB / page, count = 0;
	unsigned char vec[SLAB / 4096];

	assert_int_equal(mincore((void *)slab, SLAB, vec), 0);
	for (size_t i = 0; i < n; i++)
		count += vec[i] & 1;
	return count;
}

static void test_slots_are_distinct_aligned_and_whole(void **state)
{
	(void)state;
	struct slab_pool *p = slab_pool_new(0);
	enum { N = 100 };
	uint8_t *slot[N];

	for (int i = 0; i < N; i++) {
		slot[i] = slab_take(p, 160);
		assert_non_null(slot[i]);
		assert_int_equal((uintptr_t)slot[i] % 16, 0);
		memset(slot[i], i, 160);
	}
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < 160; j++)
			assert_int_equal(slot[i][j], i); /* no slot overlaps another */
		assert_int_equal(slab_of(slot[i]), slab_of(slot[0])); /* one slab so far */
	}
	assert_int_equal(slab_pool_bytes(p), SLAB);
	slab_pool_free(p);
}

static void test_a_slot_given_back_is_the_next_taken(void **state)
{
	(void)state;
	struct slab_pool *p = slab_pool_new(0);
	struct node *a = slab_take(p, 64), *b = slab_take(p, 64), *c = slab_take(p, 64);

	assert_non_null(c);
	b->next = NULL;
	slab_give_chain(p, b, offsetof(struct node, next));
	assert_ptr_equal(slab_take(p, 64), b);
	/* another size never gets it */
	b->next = NULL;
	slab_give_chain(p, b, offsetof(struct node, next));
	uint8_t *other = slab_take(p, 96);
	assert_true(slab_of(other) != slab_of(a));
	assert_ptr_equal(slab_take(p, 64), b);
	slab_pool_free(p);
}

static void test_a_full_slab_is_followed_by_a_new_one(void **state)
{
	(void)state;
	struct slab_pool *p = slab_pool_new(0);
	size_t n = SLOTS_OF(2048);
	uint8_t *first = slab_take(p, 2048), *last = first;

	for (size_t i = 1; i < n; i++)
		last = slab_take(p, 2048);
	assert_int_equal(slab_of(last), slab_of(first));
	assert_true(last + 2048 <= (uint8_t *)slab_of(first) + SLAB); /* inside it */
	assert_int_equal(slab_pool_bytes(p), SLAB);
	uint8_t *next = slab_take(p, 2048);
	assert_true(slab_of(next) != slab_of(first));
	assert_int_equal(slab_pool_bytes(p), 2 * SLAB);
	slab_pool_free(p);
}

/* Fills whole slabs (more than one mapped chunk of 16), gives every slot
 * back as one chain, and checks the memory left the process. */
static void test_emptied_slabs_leave_memory_and_serve_any_size(void **state)
{
	(void)state;
	struct slab_pool *p = slab_pool_new(0);
	size_t per_slab = SLOTS_OF(512), slabs = 40, n = per_slab * slabs;
	struct node *chain = NULL;
	uintptr_t some_slab = 0;

	for (size_t i = 0; i < n; i++) {
		struct node *s = slab_take(p, 512);
		assert_non_null(s);
		memset(s, 0xab, 512); /* every page resident */
		s->next = chain;
		chain = s;
		some_slab = slab_of(s);
	}
	assert_int_equal(slab_pool_bytes(p), slabs * SLAB);
	assert_int_equal(resident_pages(some_slab), SLAB / (size_t)sysconf(_SC_PAGESIZE));

	slab_give_chain(p, chain, offsetof(struct node, next));
	assert_int_equal(slab_pool_bytes(p), 0);
	assert_int_equal(resident_pages(some_slab), 0);

	/* the empty slabs serve another size before anything new is mapped */
	for (size_t i = 0; i < SLOTS_OF(1024) * slabs; i++)
		assert_non_null(slab_take(p, 1024));
	assert_int_equal(slab_pool_bytes(p), slabs * SLAB);
	slab_pool_free(p);
}

/* A slab with a slot still taken keeps its other slots for its size. */
static void test_a_slab_keeps_its_pages_while_one_slot_is_taken(void **state)
{
	(void)state;
	struct slab_pool *p = slab_pool_new(0);
	struct node *kept = slab_take(p, 256), *chain = NULL;

	for (int i = 0; i < 100; i++) {
		struct node *s = slab_take(p, 256);
		s->next = chain;
		chain = s;
	}
	slab_give_chain(p, chain, offsetof(struct node, next));
	assert_int_equal(slab_pool_bytes(p), SLAB);
	assert_true(resident_pages(slab_of(kept)) > 0);
	kept->next = NULL;
	slab_give_chain(p, kept, offsetof(struct node, next));
	assert_int_equal(slab_pool_bytes(p), 0);
	slab_pool_free(p);
}

/* Past its limit the pool makes no new slab, but a slab with room still
 * serves its size, and a slab given back makes room again. */
static void test_no_new_slab_past_the_limit(void **state)
{
	(void)state;
	struct slab_pool *p = slab_pool_new(0);
	struct node *a = slab_take(p, 64);

	slab_pool_limit(p, 2 * SLAB);
	assert_non_null(slab_take(p, 128)); /* a second slab: at the limit */
	assert_null(slab_take(p, 256));     /* a third would pass it */
	assert_non_null(slab_take(p, 64));  /* the first slab has room */
	assert_int_equal(slab_pool_bytes(p), 2 * SLAB);
	a->next = NULL;
	slab_give_chain(p, a, offsetof(struct node, next)); /* not the last of its slab */
	assert_null(slab_take(p, 256));
	slab_pool_limit(p, 0); /* no limit */
	assert_non_null(slab_take(p, 256));
	slab_pool_free(p);
}

static void test_sizes_a_slab_does_not_hold_are_refused(void **state)
{
	(void)state;
	struct slab_pool *p = slab_pool_new(0);

	assert_null(slab_take(p, 0));
	assert_null(slab_take(p, 8));
	assert_null(slab_take(p, 24));
	assert_null(slab_take(p, SLAB_MAX_SLOT + 16));
	assert_non_null(slab_take(p, 16));
	assert_non_null(slab_take(p, SLAB_MAX_SLOT));
	slab_give_chain(p, NULL, 0); /* an empty chain */
	slab_pool_free(p);
	slab_pool_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_are_distinct_aligned_and_whole),
		cmocka_unit_test(test_a_slot_given_back_is_the_next_taken),
		cmocka_unit_test(test_a_full_slab_is_followed_by_a_new_one),
		cmocka_unit_test(test_emptied_slabs_leave_memory_and_serve_any_size),
		cmocka_unit_test(test_a_slab_keeps_its_pages_while_one_slot_is_taken),
		cmocka_unit_test(test_no_new_slab_past_the_limit),
		cmocka_unit_test(test_sizes_a_slab_does_not_hold_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
