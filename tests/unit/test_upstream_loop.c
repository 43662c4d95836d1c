/*
 * Unit tests for upstream/loop.c, the resolver thread's event loop and
 * libunbound's pluggable event API on top of it, driven the way libunbound
 * drives it (through the vmt of the base and of each event): a persistent
 * read event runs on each wake-up while its descriptor is readable, one
 * that does not persist runs once; timers run in deadline order and not
 * once deleted; a persistent event's timeout starts again when it runs and
 * fires when its descriptor stays quiet; an event freed or deleted by the
 * callback of another event reported in the same epoll_wait is not run, and
 * one made in a freed one's place does not cut the turn short; a
 * descriptor closed without its event being deleted, then reused, serves
 * the new event; hosted, libunbound's descriptors are in the host's epoll
 * set with its tag and run when the host passes them on, and back in the
 * loop's own set when it leaves (one closed meanwhile, its number reused,
 * left out); the caller's own descriptors come back as tags (an edge-
 * triggered one once per write); a timer that is due at every turn never
 * keeps a ready descriptor waiting more than one turn; a callback knows
 * when no ready descriptor's event follows it in the dispatch, only timers
 * (the resolver sends its replies then); a timeout counts
 * from the turn's clock, read once for the turn, not from a read of its
 * own; every event made is freed; a base not attached to a loop makes none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/time.h>
#include <unistd.h>
#include <cmocka.h>

#include "upstream/loop.h"

/* What a callback saw; the slots are the tests'. */
struct seen {
	int runs;
	short bits;
	int order;
	struct ub_event *victim;      /* freed by this callback when set */
	bool victim_del_only;         /* ... or only deleted */
	bool last_ready;              /* loop_running_last_ready when it ran */
};

static int order_counter;
static const struct loop *running; /* the fixture's loop */

static void note(int fd, short bits, void *arg)
{
	struct seen *s = arg;

	(void)fd;
	s->runs++;
	s->bits = bits;
	s->order = ++order_counter;
	s->last_ready = loop_running_last_ready(running);
	if (s->victim) {
		if (s->victim_del_only)
			s->victim->vmt->del(s->victim);
		else
			s->victim->vmt->free(s->victim);
		s->victim = NULL;
	}
}

struct fixture {
	struct loop loop;
	struct loop_base base;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	assert_non_null(f);
	assert_int_equal(loop_init(&f->loop), 0);
	loop_base_init(&f->base);
	loop_base_attach(&f->base, &f->loop);
	order_counter = 0;
	running = &f->loop;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(loop_events(&f->loop), 0); /* every event made was freed */
	loop_free(&f->loop);
	free(f);
	return 0;
}

static struct ub_event *new_event(struct fixture *f, int fd, short bits, struct seen *s)
{
	struct ub_event *ev = f->base.super.vmt->new_event(&f->base.super, fd, bits, note, s);

	assert_non_null(ev);
	assert_int_equal(ev->magic, UB_EVENT_MAGIC);
	return ev;
}

static int ready_fd(void)
{
	int fd = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC); /* readable until read */

	assert_true(fd >= 0);
	return fd;
}

static int turn(struct fixture *f, int timeout_ms)
{
	unsigned tags[4];

	return loop_wait(&f->loop, timeout_ms, tags, 4);
}

static struct timeval ms(long n)
{
	return (struct timeval){.tv_sec = n / 1000, .tv_usec = (n % 1000) * 1000};
}

static void test_a_persistent_read_event_runs_while_readable(void **state)
{
	struct fixture *f = *state;
	struct seen s = {0};
	int fd = ready_fd();
	struct ub_event *ev = new_event(f, fd, UB_EV_READ | UB_EV_PERSIST, &s);

	assert_int_equal(ev->vmt->add(ev, NULL), 0);
	turn(f, 100);
	turn(f, 100);
	assert_int_equal(s.runs, 2); /* level-triggered: still readable */
	assert_int_equal(s.bits, UB_EV_READ);
	ev->vmt->del(ev);
	turn(f, 0);
	assert_int_equal(s.runs, 2);
	ev->vmt->free(ev);
	close(fd);
}

static void test_an_event_that_does_not_persist_runs_once(void **state)
{
	struct fixture *f = *state;
	struct seen s = {0};
	int fd = ready_fd();
	struct ub_event *ev = new_event(f, fd, UB_EV_READ, &s);

	assert_int_equal(ev->vmt->add(ev, NULL), 0);
	turn(f, 100);
	turn(f, 0);
	assert_int_equal(s.runs, 1);
	assert_int_equal(ev->vmt->add(ev, NULL), 0); /* added again, it runs again */
	turn(f, 100);
	assert_int_equal(s.runs, 2);
	ev->vmt->free(ev);
	close(fd);
}

static void test_timers_run_in_deadline_order_and_not_once_deleted(void **state)
{
	struct fixture *f = *state;
	struct seen a = {0}, b = {0}, c = {0}, gone = {0};
	struct ub_event *ta = new_event(f, -1, 0, &a), *tb = new_event(f, -1, 0, &b);
	struct ub_event *tc = new_event(f, -1, 0, &c), *tg = new_event(f, -1, 0, &gone);
	struct timeval t30 = ms(30), t10 = ms(10), t20 = ms(20), t15 = ms(15);

	assert_int_equal(ta->vmt->add_timer(ta, &f->base.super, note, &a, &t30), 0);
	assert_int_equal(tb->vmt->add_timer(tb, &f->base.super, note, &b, &t10), 0);
	assert_int_equal(tc->vmt->add_timer(tc, &f->base.super, note, &c, &t20), 0);
	assert_int_equal(tg->vmt->add_timer(tg, &f->base.super, note, &gone, &t15), 0);
	tg->vmt->del_timer(tg);
	for (int i = 0; i < 50 && (!a.runs || !b.runs || !c.runs); i++)
		turn(f, 100); /* the loop sleeps until the next timer, not the 100 ms */
	assert_int_equal(a.runs + b.runs + c.runs, 3);
	assert_int_equal(b.order, 1);
	assert_int_equal(c.order, 2);
	assert_int_equal(a.order, 3);
	assert_int_equal(a.bits, UB_EV_TIMEOUT);
	assert_int_equal(gone.runs, 0);
	turn(f, 0);
	assert_int_equal(a.runs + b.runs + c.runs, 3); /* timers do not persist */
	ta->vmt->free(ta);
	tb->vmt->free(tb);
	tc->vmt->free(tc);
	tg->vmt->free(tg);
}

static void test_a_quiet_persistent_event_times_out_again_and_again(void **state)
{
	struct fixture *f = *state;
	struct seen s = {0};
	int fds[2];
	struct timeval t = ms(5);

	assert_int_equal(pipe(fds), 0);
	struct ub_event *ev = new_event(f, fds[0], UB_EV_READ | UB_EV_PERSIST | UB_EV_TIMEOUT, &s);
	assert_int_equal(ev->vmt->add(ev, &t), 0);
	for (int i = 0; i < 50 && s.runs < 3; i++)
		turn(f, 100);
	assert_int_equal(s.runs, 3);
	assert_int_equal(s.bits, UB_EV_TIMEOUT);
	assert_int_equal(write(fds[1], "x", 1), 1);
	turn(f, 100);
	assert_int_equal(s.bits, UB_EV_READ); /* readable now: run for that */
	ev->vmt->free(ev);
	close(fds[0]);
	close(fds[1]);
}

/* Two events ready in the same turn; the first one's callback does something to the second. */
static void second_of_two(struct fixture *f, bool del_only)
{
	struct seen first = {0}, second = {0};
	int fd1 = ready_fd(), fd2 = ready_fd();
	struct ub_event *e1 = new_event(f, fd1, UB_EV_READ | UB_EV_PERSIST, &first);
	struct ub_event *e2 = new_event(f, fd2, UB_EV_READ | UB_EV_PERSIST, &second);
	struct seen *runs_first;

	assert_int_equal(e1->vmt->add(e1, NULL), 0);
	assert_int_equal(e2->vmt->add(e2, NULL), 0);
	/* whichever epoll reports first acts on the other */
	first.victim = e2;
	second.victim = e1;
	first.victim_del_only = second.victim_del_only = del_only;
	turn(f, 100);
	assert_int_equal(first.runs + second.runs, 1);
	runs_first = first.runs ? &first : &second;
	assert_null(runs_first->victim);
	turn(f, 0);
	assert_int_equal(first.runs + second.runs, 2); /* the survivor runs again, alone */
	assert_int_equal(runs_first->runs, 2);
	struct ub_event *survivor = runs_first == &first ? e1 : e2;
	if (del_only) /* the deleted one is still to be freed */
		(survivor == e1 ? e2 : e1)->vmt->free(survivor == e1 ? e2 : e1);
	survivor->vmt->free(survivor);
	close(fd1);
	close(fd2);
}

static void test_an_event_freed_by_another_in_the_same_turn_is_not_run(void **state)
{
	second_of_two(*state, false);
}

static void test_an_event_deleted_by_another_in_the_same_turn_is_not_run(void **state)
{
	second_of_two(*state, true);
}

/* The first of three: frees the second and makes a new event in its place. */
struct replacer {
	struct fixture *f;
	struct ub_event *victim, *made;
	int made_fd;
	struct seen made_seen;
	int runs;
};

static void replace_victim(int fd, short bits, void *arg)
{
	struct replacer *r = arg;

	(void)fd;
	(void)bits;
	if (r->runs++)
		return;
	r->victim->vmt->free(r->victim);
	r->made_fd = ready_fd();
	r->made = new_event(r->f, r->made_fd, UB_EV_READ | UB_EV_PERSIST, &r->made_seen);
	assert_int_equal(r->made->vmt->add(r->made, NULL), 0);
}

static void test_an_event_made_in_a_freed_ones_place_keeps_the_turn_going(void **state)
{
	struct fixture *f = *state;
	struct replacer r = {.f = f};
	struct seen second = {0}, third = {0};
	int fd1 = ready_fd(), fd2 = ready_fd(), fd3 = ready_fd();
	struct ub_event *e1 = f->base.super.vmt->new_event(&f->base.super, fd1,
							    UB_EV_READ | UB_EV_PERSIST,
							    replace_victim, &r);
	struct ub_event *e2 = new_event(f, fd2, UB_EV_READ | UB_EV_PERSIST, &second);
	struct ub_event *e3 = new_event(f, fd3, UB_EV_READ | UB_EV_PERSIST, &third);

	r.victim = e2;
	/* ready before they are added: epoll reports them in this order */
	assert_int_equal(e1->vmt->add(e1, NULL), 0);
	assert_int_equal(e2->vmt->add(e2, NULL), 0);
	assert_int_equal(e3->vmt->add(e3, NULL), 0);
	turn(f, 100);
	assert_int_equal(r.runs, 1);
	assert_int_equal(second.runs, 0);
	assert_int_equal(third.runs, 1); /* reached although the second's memory was asked again */
	turn(f, 100);
	assert_int_equal(third.runs, 2);
	assert_true(r.made_seen.runs >= 1);
	e1->vmt->free(e1);
	e3->vmt->free(e3);
	r.made->vmt->free(r.made);
	close(fd1);
	close(fd2);
	close(fd3);
	close(r.made_fd);
}

static void test_a_descriptor_closed_before_its_event_serves_the_next(void **state)
{
	struct fixture *f = *state;
	struct seen old = {0}, new = {0};
	int fd = ready_fd();
	struct ub_event *e_old = new_event(f, fd, UB_EV_READ | UB_EV_PERSIST, &old);

	assert_int_equal(e_old->vmt->add(e_old, NULL), 0);
	close(fd); /* the kernel drops the registration with the file */
	int again = ready_fd();
	assert_int_equal(again, fd); /* the lowest number: the same one */
	struct ub_event *e_new = new_event(f, again, UB_EV_READ | UB_EV_PERSIST, &new);
	assert_int_equal(e_new->vmt->add(e_new, NULL), 0);
	e_old->vmt->free(e_old); /* late: must not take the new one's registration */
	turn(f, 100);
	assert_int_equal(new.runs, 1);
	assert_int_equal(old.runs, 0);
	e_new->vmt->free(e_new);
	close(again);
}

/* The host's set: what it reports for fd, or 0 when it reports nothing. */
static uint64_t reported(int epfd)
{
	struct epoll_event e[4];
	int n = epoll_wait(epfd, e, 4, 0);

	assert_true(n <= 1);
	return n == 1 ? e[0].data.u64 : 0;
}

#define HOST_TAG ((uint64_t)9 << 32)

static void test_a_hosted_loops_descriptors_are_in_the_hosts_set_until_it_leaves(void **state)
{
	struct fixture *f = *state;
	struct seen before = {0}, during = {0};
	int fd1 = ready_fd(), fd2 = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	int host_ep = epoll_create1(EPOLL_CLOEXEC);
	unsigned tags[4];
	struct ub_event *e1 = new_event(f, fd1, UB_EV_READ | UB_EV_PERSIST, &before);
	struct ub_event *e2 = new_event(f, fd2, UB_EV_READ | UB_EV_PERSIST, &during);

	assert_true(fd2 >= 0 && host_ep >= 0);
	assert_int_equal(e1->vmt->add(e1, NULL), 0);
	assert_int_equal(loop_host(&f->loop, host_ep, HOST_TAG), 0);
	/* moved: the host reports it with its tag, the loop's own set no more */
	assert_true(reported(host_ep) == (HOST_TAG | (uint32_t)fd1));
	assert_true(reported(loop_fd(&f->loop)) == 0);
	assert_int_equal(e2->vmt->add(e2, NULL), 0); /* added while hosted: the host's too */
	assert_int_equal(eventfd_write(fd2, 1), 0);
	loop_read_clock(&f->loop);
	assert_int_equal(loop_poll(&f->loop, true, tags, 4), 0);
	assert_int_equal(before.runs + during.runs, 0); /* nothing until the host passes it on */
	loop_ready(&f->loop, fd1, EPOLLIN);
	loop_ready(&f->loop, fd2, EPOLLOUT); /* not what it waits for */
	loop_poll(&f->loop, false, tags, 4);
	assert_int_equal(before.runs, 1);
	assert_int_equal(during.runs, 0);
	/* fd2 closed without a del, its number taken by a file not libunbound's:
	 * leaving must not put that file in the loop's set */
	close(fd2);
	int other = ready_fd();
	assert_int_equal(other, fd2);
	loop_unhost(&f->loop);
	assert_true(reported(host_ep) == 0);
	turn(f, 100);
	assert_int_equal(before.runs, 2); /* back in the loop's own set */
	assert_int_equal(during.runs, 0);
	e1->vmt->free(e1);
	e2->vmt->free(e2);
	assert_true(reported(loop_fd(&f->loop)) == 0);
	close(other);
	close(fd1);
	close(host_ep);
}

static void test_the_callers_descriptors_come_back_as_tags(void **state)
{
	struct fixture *f = *state;
	int a = ready_fd(), b = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	unsigned tags[4];

	assert_int_equal(loop_watch(&f->loop, a, 7, false), 0);
	assert_int_equal(loop_watch(&f->loop, b, 9, true), 0);
	assert_int_equal(loop_wait(&f->loop, 100, tags, 4), 1);
	assert_int_equal(tags[0], 7);
	uint64_t one = 1;
	assert_int_equal(write(b, &one, sizeof one), sizeof one);
	assert_int_equal(loop_wait(&f->loop, 100, tags, 4), 2);
	assert_int_equal(tags[0] + tags[1], 16);
	/* b, never read, is not reported again until written again; a, level-triggered, is */
	assert_int_equal(loop_wait(&f->loop, 0, tags, 4), 1);
	assert_int_equal(tags[0], 7);
	assert_int_equal(write(b, &one, sizeof one), sizeof one);
	assert_int_equal(loop_wait(&f->loop, 100, tags, 4), 2);
	close(a);
	close(b);
}

/* A zero-delay timer that adds itself again each time it runs. */
static void again(int fd, short bits, void *arg)
{
	struct ub_event *ev = arg;
	struct timeval zero = {0, 0};

	(void)fd;
	(void)bits;
	order_counter++;
	ev->vmt->add(ev, &zero);
}

static void test_due_timers_never_keep_a_ready_descriptor_waiting(void **state)
{
	struct fixture *f = *state;
	struct seen s = {0};
	int fd = ready_fd();
	struct ub_event *io = new_event(f, fd, UB_EV_READ | UB_EV_PERSIST, &s);
	struct ub_event *t = f->base.super.vmt->new_event(&f->base.super, -1, 0, again, NULL);
	struct timeval zero = {0, 0};

	assert_int_equal(io->vmt->add(io, NULL), 0);
	assert_int_equal(t->vmt->add_timer(t, &f->base.super, again, t, &zero), 0);
	/* the first turn runs the due timer without polling, the next polls */
	turn(f, 100);
	assert_int_equal(order_counter, 1);
	assert_int_equal(s.runs, 0);
	turn(f, 100);
	assert_true(s.runs == 1);
	for (int i = 0; i < 10; i++)
		turn(f, 100);
	assert_true(s.runs >= 5); /* a timer due at every turn does not starve it */
	t->vmt->free(t);
	io->vmt->free(io);
	close(fd);
}

static void test_the_last_ready_event_is_known_before_the_timers_run(void **state)
{
	struct fixture *f = *state;
	struct seen first = {0}, second = {0}, timer = {0};
	int a = ready_fd(), b = ready_fd();
	struct ub_event *ea = new_event(f, a, UB_EV_READ, &first);
	struct ub_event *eb = new_event(f, b, UB_EV_READ, &second);
	struct ub_event *t = new_event(f, -1, 0, &timer);
	struct timeval zero = {0, 0};
	unsigned tags[4];

	assert_int_equal(ea->vmt->add(ea, NULL), 0);
	assert_int_equal(eb->vmt->add(eb, NULL), 0);
	loop_read_clock(&f->loop);
	assert_int_equal(t->vmt->add_timer(t, &f->base.super, note, &timer, &zero), 0);
	/* as the hosting worker turns it: both descriptors ready, a question's timer due */
	assert_int_equal(loop_poll(&f->loop, true, tags, 4), 0);
	assert_int_equal(first.runs + second.runs + timer.runs, 3);
	struct seen *ran_first = first.order == 1 ? &first : &second;
	struct seen *ran_second = first.order == 1 ? &second : &first;
	assert_int_equal(ran_second->order, 2);
	assert_false(ran_first->last_ready); /* another answer follows it */
	assert_true(ran_second->last_ready); /* only the timer follows: the replies may leave */
	assert_int_equal(timer.order, 3);
	assert_true(timer.last_ready);
	assert_false(loop_running_last_ready(&f->loop)); /* outside a dispatch */
	ea->vmt->free(ea);
	eb->vmt->free(eb);
	t->vmt->free(t);
	close(a);
	close(b);
}

static void test_a_timeout_counts_from_the_turns_clock(void **state)
{
	struct fixture *f = *state;
	struct seen s = {0};
	struct ub_event *t = new_event(f, -1, 0, &s);
	struct timeval t100 = ms(100);
	uint64_t turn_ns = loop_read_clock(&f->loop);

	assert_int_equal(loop_clock_ns(&f->loop), turn_ns);
	assert_int_equal(t->vmt->add_timer(t, &f->base.super, note, &s, &t100), 0);
	/* due exactly 100 ms after the reading: a clock read of the timer's own
	 * would put it a little later */
	assert_false(loop_timer_due(&f->loop, turn_ns + 99999999));
	assert_true(loop_timer_due(&f->loop, turn_ns + 100000000));
	t->vmt->free(t);
}

static void test_an_unattached_base_makes_no_event(void **state)
{
	struct loop_base b;

	(void)state;
	loop_base_init(&b);
	assert_null(b.super.vmt->new_event(&b.super, -1, 0, note, NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_persistent_read_event_runs_while_readable,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_event_that_does_not_persist_runs_once,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_timers_run_in_deadline_order_and_not_once_deleted,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_quiet_persistent_event_times_out_again_and_again,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_event_freed_by_another_in_the_same_turn_is_not_run,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_event_deleted_by_another_in_the_same_turn_is_not_run,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_event_made_in_a_freed_ones_place_keeps_the_turn_going,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_descriptor_closed_before_its_event_serves_the_next,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_a_hosted_loops_descriptors_are_in_the_hosts_set_until_it_leaves, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_the_callers_descriptors_come_back_as_tags,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_due_timers_never_keep_a_ready_descriptor_waiting,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_the_last_ready_event_is_known_before_the_timers_run,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_timeout_counts_from_the_turns_clock, setup,
						teardown),
		cmocka_unit_test(test_an_unattached_base_makes_no_event),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
