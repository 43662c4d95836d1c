/*
 * readers.h — reader threads beside a writer, for the race tests of the
 * tables the query path reads under RCU (test_cluster.c, test_mesh.c):
 * READERS threads, each registered with RCU, ask one round of questions
 * after another until told to stop, counting the rounds and the answers no
 * whole state of the table gives; the test's thread writes meanwhile.
 * Include after <cmocka.h>.
 *
 * Must never: call cmocka's asserts on a reader thread (the round returns
 * its count of wrong answers instead; readers_stop checks them).
 */
#ifndef LOCALDNS_TEST_READERS_H
#define LOCALDNS_TEST_READERS_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include <urcu/urcu-memb.h>

#define READERS 2

struct readers;

struct reader {
	pthread_t thread;
	struct readers *all;
	atomic_ulong reads; /* rounds of questions asked */
	unsigned long bad;  /* answers no state of the table gives */
};

struct readers {
	struct reader r[READERS];
	atomic_bool stop;
	unsigned (*ask_round)(void *ctx); /* one round: how many answers were wrong */
	void *ctx;
};

static inline void *readers_main(void *arg)
{
	struct reader *rd = arg;

	urcu_memb_register_thread();
	while (!atomic_load(&rd->all->stop)) {
		rd->bad += rd->all->ask_round(rd->all->ctx);
		atomic_fetch_add(&rd->reads, 1);
	}
	urcu_memb_unregister_thread();
	return NULL;
}

/* Starts the readers, each asking ask_round(ctx) round after round. */
static inline void readers_start(struct readers *rs, unsigned (*ask_round)(void *), void *ctx)
{
	rs->ask_round = ask_round;
	rs->ctx = ctx;
	atomic_init(&rs->stop, false);
	for (int i = 0; i < READERS; i++) {
		rs->r[i].all = rs;
		rs->r[i].bad = 0;
		atomic_init(&rs->r[i].reads, 0);
		assert_int_equal(pthread_create(&rs->r[i].thread, NULL, readers_main, &rs->r[i]), 0);
	}
}

/* Returns once every reader has asked a round (before anything changes). */
static inline void readers_wait_reading(struct readers *rs)
{
	for (int i = 0; i < READERS; i++)
		while (atomic_load(&rs->r[i].reads) == 0)
			sched_yield();
}

/* Stops the readers: each asked, and every answer was one of a whole state. */
static inline void readers_stop(struct readers *rs)
{
	atomic_store(&rs->stop, true);
	for (int i = 0; i < READERS; i++) {
		pthread_join(rs->r[i].thread, NULL);
		assert_true(atomic_load(&rs->r[i].reads) > 0);
		assert_int_equal(rs->r[i].bad, 0);
	}
}

#endif
