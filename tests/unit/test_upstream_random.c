/*
 * Unit tests for upstream/random.c: libunbound's random numbers from a
 * pool per thread. getrandom is wrapped (-Wl,--wrap=getrandom, Makefile):
 * it counts the fills and keeps a copy of the last one, or hands out
 * scripted words; glibc's own arc4random would not come through it (it
 * calls the kernel inside libc), so the last test also shows that our
 * libunbound draws from the pool.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unbound.h>
#include <unistd.h>

#include "upstream/random.h"

#define POOL_WORDS 64

static _Atomic unsigned fills;
static uint32_t last_fill[POOL_WORDS];
static const uint32_t *script; /* non-NULL: the next fill's words */

ssize_t __real_getrandom(void *buf, size_t len, unsigned flags);
ssize_t __wrap_getrandom(void *buf, size_t len, unsigned flags)
{
	ssize_t n;

	if (script && len == sizeof last_fill) {
		memcpy(buf, script, len);
		script = NULL;
		n = (ssize_t)len;
	} else {
		n = __real_getrandom(buf, len, flags);
	}
	if (n == (ssize_t)sizeof last_fill)
		memcpy(last_fill, buf, sizeof last_fill);
	fills++;
	return n;
}

/*
 * What a thread whose pool starts empty drew (cmocka's checks stay on the
 * test's own thread): n draws of upstream_arc4random_uniform(upper), or of
 * upstream_arc4random when upper is 0, and how many fills they took.
 */
struct draws {
	uint32_t upper;
	unsigned n;
	uint32_t v[10 * POOL_WORDS];
	unsigned fills;
};

static void *draw(void *arg)
{
	struct draws *d = arg;
	unsigned before = fills;

	for (unsigned i = 0; i < d->n; i++)
		d->v[i] = d->upper ? upstream_arc4random_uniform(d->upper) : upstream_arc4random();
	d->fills = fills - before;
	return NULL;
}

static void draw_on_a_new_thread(struct draws *d)
{
	pthread_t t;

	assert_true(d->n <= sizeof d->v / sizeof d->v[0]);
	assert_int_equal(pthread_create(&t, NULL, draw, d), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
}

/* The point of the pool: one system call for 64 numbers, not one each. */
static void test_one_getrandom_serves_64_draws(void **state)
{
	(void)state;
	static struct draws d = {.n = 10 * POOL_WORDS};

	draw_on_a_new_thread(&d);
	assert_int_equal(d.fills, 10);
}

static void test_the_draws_are_the_kernels_words_each_once(void **state)
{
	(void)state;
	static struct draws d = {.n = POOL_WORDS};

	draw_on_a_new_thread(&d);
	assert_int_equal(d.fills, 1);
	/* each of the kernel's words once, none twice, none made up */
	for (int i = 0; i < POOL_WORDS; i++)
		assert_int_equal(d.v[i], last_fill[POOL_WORDS - 1 - i]);
}

static void test_uniform_draws_again_below_the_biased_range(void **state)
{
	(void)state;
	static uint32_t words[POOL_WORDS];
	/* upper = 2^31 + 1: 2^32 mod upper = 2^31 - 1, so a word below that is
	 * drawn again (it would make the low results likelier). Draws come from
	 * the end of the pool. */
	static struct draws d = {.upper = 0x80000001u, .n = 2};
	words[POOL_WORDS - 1] = 5;
	words[POOL_WORDS - 2] = 0x90000000u;
	words[POOL_WORDS - 3] = 0x7fffffffu; /* the least word kept */
	script = words;
	draw_on_a_new_thread(&d);
	assert_int_equal(d.v[0], 0x90000000u - d.upper);
	assert_int_equal(d.v[1], 0x7fffffffu);

	unsigned before = fills;
	assert_int_equal(upstream_arc4random_uniform(1), 0);
	assert_int_equal(upstream_arc4random_uniform(0), 0);
	assert_int_equal(fills, before); /* nothing drawn for them */
}

static void test_uniform_stays_in_range_and_reaches_every_value(void **state)
{
	(void)state;
	static struct draws d = {.upper = 7, .n = 7 * 90};
	unsigned seen[7] = {0};

	draw_on_a_new_thread(&d);
	for (unsigned i = 0; i < d.n; i++) {
		assert_true(d.v[i] < 7);
		seen[d.v[i]]++;
	}
	/* 90 expected each, sd ~8.8: below 30 or above 150 is far beyond chance */
	for (int i = 0; i < 7; i++)
		assert_in_range(seen[i], 30, 150);
}

/* A child of fork must not draw the numbers its parent draws next. */
static void test_a_forked_child_draws_its_own_numbers(void **state)
{
	(void)state;
	uint32_t parent[4], child[4];
	int fds[2];

	upstream_arc4random(); /* the pool is full now, 63 left */
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (int i = 0; i < 4; i++)
			child[i] = upstream_arc4random();
		_exit(write(fds[1], child, sizeof child) == (ssize_t)sizeof child ? 0 : 1);
	}
	for (int i = 0; i < 4; i++)
		parent[i] = upstream_arc4random();
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(read(fds[0], child, sizeof child), (ssize_t)sizeof child);
	close(fds[0]);
	close(fds[1]);
	assert_memory_not_equal(parent, child, sizeof parent);
}

/* A loopback "upstream" that answers every question REFUSED until stopped. */
struct refuser {
	int fd;
	uint16_t port;
	_Atomic bool stop;
	unsigned questions;
};

static void *refuse(void *arg)
{
	struct refuser *r = arg;
	uint8_t buf[512];
	struct sockaddr_in from;

	while (!r->stop) {
		socklen_t len = sizeof from;
		ssize_t n = recvfrom(r->fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
		if (n < 12)
			continue; /* the receive timeout: look at stop again */
		r->questions++;
		buf[2] |= 0x80;                          /* QR */
		buf[3] = (uint8_t)((buf[3] & 0xf0) | 5); /* REFUSED */
		sendto(r->fd, buf, (size_t)n, 0, (struct sockaddr *)&from, len);
	}
	return NULL;
}

/* One question through libunbound, forwarded to 127.0.0.1 at port, on a
 * thread whose pool starts empty: ub_resolve works on the caller's thread. */
struct resolution {
	uint16_t port;
	int rc;
	unsigned fills;
};

static void *resolve(void *arg)
{
	struct resolution *res = arg;
	struct ub_result *result = NULL;
	char fwd[32];
	struct ub_ctx *ctx = ub_ctx_create();

	res->rc = -1;
	if (!ctx)
		return NULL;
	snprintf(fwd, sizeof fwd, "127.0.0.1@%u", res->port);
	unsigned before = fills;
	if (ub_ctx_set_option(ctx, "do-not-query-localhost:", "no") == 0 &&
	    ub_ctx_set_option(ctx, "do-ip6:", "no") == 0 && ub_ctx_set_fwd(ctx, fwd) == 0)
		res->rc = ub_resolve(ctx, "random.example.", 1, 1, &result);
	res->fills = fills - before;
	ub_resolve_free(result);
	ub_ctx_delete(ctx);
	return NULL;
}

/* Without build.sh's renaming, glibc's arc4random would make these draws, unseen by the wrap. */
static void test_libunbound_draws_its_ids_and_ports_from_the_pool(void **state)
{
	(void)state;
	struct refuser r = {.fd = socket(AF_INET, SOCK_DGRAM, 0)};
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tick = {.tv_usec = 100000};
	socklen_t len = sizeof a;
	pthread_t t;

	assert_true(r.fd >= 0);
	assert_int_equal(setsockopt(r.fd, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof tick), 0);
	assert_int_equal(bind(r.fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(getsockname(r.fd, (struct sockaddr *)&a, &len), 0);
	r.port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&t, NULL, refuse, &r), 0);

	struct resolution res = {.port = r.port};
	pthread_t asker;
	assert_int_equal(pthread_create(&asker, NULL, resolve, &res), 0);
	assert_int_equal(pthread_join(asker, NULL), 0);
	r.stop = true;
	assert_int_equal(pthread_join(t, NULL), 0);
	close(r.fd);
	assert_int_equal(res.rc, 0);
	assert_true(r.questions > 0);
	assert_true(res.fills > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_getrandom_serves_64_draws),
		cmocka_unit_test(test_the_draws_are_the_kernels_words_each_once),
		cmocka_unit_test(test_uniform_draws_again_below_the_biased_range),
		cmocka_unit_test(test_uniform_stays_in_range_and_reaches_every_value),
		cmocka_unit_test(test_a_forked_child_draws_its_own_numbers),
		cmocka_unit_test(test_libunbound_draws_its_ids_and_ports_from_the_pool),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
