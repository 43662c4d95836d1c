/*
 * upstream/loop.c — the resolver thread's event loop, and libunbound's
 * pluggable event API (unbound-event.h) on top of it.
 *
 * Why. libunbound can run in a thread of its own (ub_ctx_async), taking
 * each question through a pipe and handing each result back through
 * another, serialized, then parsed again into a struct ub_result for
 * ub_process. On one core that is two more thread wake-ups per miss
 * (resolver -> libunbound's thread -> resolver), the writes and reads of
 * both pipes, the serialization and the parse: measured, a third of a
 * miss's CPU (docs/performance.md, "Cold misses"). With an event base of
 * its own (ub_ctx_create_ub_event) libunbound instead asks this loop to
 * watch its sockets and run its timers, and its callbacks run on the
 * resolver thread, which gets each answer as the wire message libunbound
 * built (ub_resolve_event). So the resolver thread's one epoll set holds
 * the caller's descriptors (tagged with small numbers) and libunbound's
 * (an event's own address), and one heap holds libunbound's timers. A
 * loop a worker hosts (loop_host) puts libunbound's descriptors in the
 * worker's own set instead, tagged with the worker's tag and the
 * descriptor, and the worker hands their readiness back (loop_ready): no
 * set nested in another, whose every reply costs a second wake-up
 * callback and a second epoll_wait.
 *
 * The events keep libevent's meaning, which is what libunbound was written
 * against: an event has a descriptor (or -1 for a timer), the bits it
 * waits for (read, write), whether it persists, and optionally a timeout.
 * add() makes it pending; an event that does not persist is deleted as
 * it fires; a persistent one with a timeout has its timeout started again
 * each time it fires. add() with no timeout leaves a pending timeout as
 * it was; del() forgets it. Readiness is level-triggered, as libevent's
 * epoll backend is, and an error or hang-up is reported as both read and
 * write, as there.
 *
 * Deleting during a dispatch. One epoll_wait may report several of
 * libunbound's events, and the callback of the first may delete or free
 * the next (a reply that completes a query closes the query's other
 * sockets). So a dispatch first notes on each event what is to be run
 * (run bits, and a place in the turn's run list); del() clears that note,
 * so a deleted event is never run, and free() during a dispatch parks the
 * event on a dead list that is released once the dispatch is over. The
 * descriptor table (by_fd) makes sure an event only ever removes its own
 * epoll registration: a descriptor closed without its event being deleted
 * first, and reused, belongs to the new event.
 *
 * Costs: libunbound makes two events per question (its socket and its
 * timer) and frees them with the answer, so released events are kept
 * (up to MAX_SPARE) and made again, instead of a calloc and a free each;
 * add/del of a socket is an epoll_ctl; a timer is O(log n) in the heap.
 *
 * The clock. A turn reads CLOCK_MONOTONIC once for its wait and once when
 * it wakes (loop_wait; loop_timeout_ms and loop_read_clock for a hosted
 * loop), and everything the turn does counts from that reading: the
 * timers it runs and the timeouts libunbound adds, as libevent's cached
 * time does. A miss reads the clock twice per turn instead of at every
 * timer libunbound adds and every check for a due one (about nine reads a
 * miss; a read is a vDSO call of some 40 ns on a virtual machine).
 */
#include "upstream/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/time.h>
#include <unistd.h>

#include "util/clock.h"

#define NO_TIMER SIZE_MAX
#define EVENTS_PER_WAIT 64
#define MAX_SPARE 4096       /* released events kept: a context's queries' worth, twice */

struct loop_event {
	struct ub_event super;      /* what libunbound holds: magic and vmt */
	struct loop *loop;
	int fd;                     /* -1 for a timer */
	short bits;                 /* UB_EV_READ, _WRITE, _PERSIST, _TIMEOUT */
	void (*cb)(int, short, void *);
	void *arg;
	uint32_t registered;        /* EPOLLIN/EPOLLOUT registered for fd, 0 when none */
	bool timed;                 /* has a timeout (tv), started again when it persists */
	struct timeval tv;
	uint64_t deadline_ns;
	size_t heap_index;          /* NO_TIMER when its timeout is not pending */
	short run_bits;             /* what the dispatch is to run it for (0: nothing) */
	bool in_run;                /* in the run list of this turn */
	struct loop_event *run_next;
	bool freed;                 /* freed during a dispatch: on the dead list */
	struct loop_event *dead_next;
};

static struct ub_event_vmt event_vmt;
static struct ub_event_base_vmt base_vmt;

/* ev is not libunbound's any more, nor in the epoll set, the heap or a run list. */
static void release(struct loop *l, struct loop_event *ev)
{
	if (l->n_spare >= MAX_SPARE) {
		free(ev);
		return;
	}
	ev->dead_next = l->spare;
	l->spare = ev;
	l->n_spare++;
}

/* ---- the timer heap ---------------------------------------------------------------- */

static bool earlier(const struct loop_event *a, const struct loop_event *b)
{
	return a->deadline_ns < b->deadline_ns;
}

static void heap_set(struct loop *l, size_t i, struct loop_event *ev)
{
	l->timers[i] = ev;
	ev->heap_index = i;
}

static void heap_up(struct loop *l, size_t i)
{
	struct loop_event *ev = l->timers[i];

	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!earlier(ev, l->timers[parent]))
			break;
		heap_set(l, i, l->timers[parent]);
		i = parent;
	}
	heap_set(l, i, ev);
}

static void heap_down(struct loop *l, size_t i)
{
	struct loop_event *ev = l->timers[i];

	for (;;) {
		size_t child = 2 * i + 1;
		if (child >= l->n_timers)
			break;
		if (child + 1 < l->n_timers && earlier(l->timers[child + 1], l->timers[child]))
			child++;
		if (!earlier(l->timers[child], ev))
			break;
		heap_set(l, i, l->timers[child]);
		i = child;
	}
	heap_set(l, i, ev);
}

static void timer_stop(struct loop *l, struct loop_event *ev)
{
	size_t i = ev->heap_index;

	if (i == NO_TIMER)
		return;
	ev->heap_index = NO_TIMER;
	l->n_timers--;
	if (i == l->n_timers)
		return;
	struct loop_event *moved = l->timers[l->n_timers];
	heap_set(l, i, moved);
	heap_up(l, i);
	heap_down(l, moved->heap_index);
}

static int timer_start(struct loop *l, struct loop_event *ev, uint64_t now_ns)
{
	ev->deadline_ns = now_ns + (uint64_t)ev->tv.tv_sec * 1000000000u +
			  (uint64_t)ev->tv.tv_usec * 1000u;
	if (ev->heap_index != NO_TIMER) {
		heap_up(l, ev->heap_index);
		heap_down(l, ev->heap_index);
		return 0;
	}
	if (l->n_timers == l->timers_cap) {
		size_t cap = l->timers_cap ? 2 * l->timers_cap : 64;
		struct loop_event **t = realloc(l->timers, cap * sizeof *t);
		if (!t)
			return -1;
		l->timers = t;
		l->timers_cap = cap;
	}
	heap_set(l, l->n_timers++, ev);
	heap_up(l, ev->heap_index);
	return 0;
}

/* ---- epoll registrations ---------------------------------------------------------- */

static uint32_t wanted(const struct loop_event *ev)
{
	uint32_t want = 0;

	if (ev->fd < 0)
		return 0;
	if (ev->bits & UB_EV_READ)
		want |= EPOLLIN;
	if (ev->bits & UB_EV_WRITE)
		want |= EPOLLOUT;
	return want;
}

static int track_fd(struct loop *l, int fd)
{
	size_t len = l->by_fd_len;

	if ((size_t)fd < len)
		return 0;
	while (len <= (size_t)fd)
		len = len ? 2 * len : 256;
	struct loop_event **t = realloc(l->by_fd, len * sizeof *t);
	if (!t)
		return -1;
	memset(t + l->by_fd_len, 0, (len - l->by_fd_len) * sizeof *t);
	l->by_fd = t;
	l->by_fd_len = len;
	return 0;
}

/* What epoll reports ev's descriptor with: the event, or in the host's set the host's tag. */
static struct epoll_event watched_as(const struct loop *l, const struct loop_event *ev,
				     uint32_t want)
{
	struct epoll_event ee = {.events = want};

	if (l->host_tag)
		ee.data.u64 = l->host_tag | (uint32_t)ev->fd;
	else
		ee.data.ptr = (void *)ev;
	return ee;
}

static void unregister(struct loop *l, struct loop_event *ev)
{
	if (!ev->registered)
		return;
	ev->registered = 0;
	if ((size_t)ev->fd < l->by_fd_len && l->by_fd[ev->fd] == ev) {
		l->by_fd[ev->fd] = NULL;
		epoll_ctl(l->sock_epfd, EPOLL_CTL_DEL, ev->fd, NULL);
	}
}

/* ev's descriptor watched for what its bits say. */
static int reregister(struct loop *l, struct loop_event *ev)
{
	uint32_t want = wanted(ev);
	struct epoll_event ee = watched_as(l, ev, want);

	if (want == ev->registered)
		return 0;
	if (!want) {
		unregister(l, ev);
		return 0;
	}
	if (ev->registered) {
		if (epoll_ctl(l->sock_epfd, EPOLL_CTL_MOD, ev->fd, &ee) < 0)
			return -1;
		ev->registered = want;
		return 0;
	}
	if (track_fd(l, ev->fd) < 0)
		return -1;
	struct loop_event *old = l->by_fd[ev->fd];
	if (old) /* closed without a del: the kernel dropped it with its file */
		old->registered = 0;
	if (epoll_ctl(l->sock_epfd, EPOLL_CTL_ADD, ev->fd, &ee) < 0 &&
	    (errno != EEXIST || epoll_ctl(l->sock_epfd, EPOLL_CTL_MOD, ev->fd, &ee) < 0))
		return -1;
	l->by_fd[ev->fd] = ev;
	ev->registered = want;
	return 0;
}

/* ---- libunbound's event methods ----------------------------------------------------- */

static struct loop_event *as_event(struct ub_event *ev)
{
	return (struct loop_event *)ev;
}

static void event_add_bits(struct ub_event *ev, short bits)
{
	as_event(ev)->bits |= bits;
}

static void event_del_bits(struct ub_event *ev, short bits)
{
	as_event(ev)->bits &= (short)~bits;
}

static void event_set_fd(struct ub_event *ev, int fd)
{
	as_event(ev)->fd = fd;
}

/* Not pending any more: no descriptor watched, no timeout, nothing to run. */
static int event_del(struct ub_event *uev)
{
	struct loop_event *ev = as_event(uev);

	unregister(ev->loop, ev);
	timer_stop(ev->loop, ev);
	ev->timed = false;
	ev->run_bits = 0;
	return 0;
}

static void event_free(struct ub_event *uev)
{
	struct loop_event *ev = as_event(uev);
	struct loop *l;

	if (!ev)
		return;
	l = ev->loop;
	event_del(uev);
	l->live--;
	if (l->dispatching) {
		ev->freed = true;
		ev->dead_next = l->dead;
		l->dead = ev;
		return;
	}
	release(l, ev);
}

static int event_add(struct ub_event *uev, struct timeval *tv)
{
	struct loop_event *ev = as_event(uev);

	if (reregister(ev->loop, ev) < 0)
		return -1;
	if (tv) {
		ev->timed = true;
		ev->tv = *tv;
		if (timer_start(ev->loop, ev, ev->loop->now_ns) < 0)
			return -1;
	}
	return 0;
}

static int timer_add(struct ub_event *uev, struct ub_event_base *base,
		     void (*cb)(int, short, void *), void *arg, struct timeval *tv)
{
	struct loop_event *ev = as_event(uev);

	(void)base;
	event_del(uev);
	ev->fd = -1;
	ev->bits = UB_EV_TIMEOUT;
	ev->cb = cb;
	ev->arg = arg;
	return event_add(uev, tv);
}

static int timer_del(struct ub_event *uev)
{
	return event_del(uev);
}

/* libunbound makes no signal events and runs on no Windows here. */
static int signal_add(struct ub_event *ev, struct timeval *tv)
{
	(void)ev;
	(void)tv;
	return -1;
}

static int signal_del(struct ub_event *ev)
{
	(void)ev;
	return -1;
}

static void winsock_unregister(struct ub_event *ev)
{
	(void)ev;
}

static void winsock_wouldblock(struct ub_event *ev, int bits)
{
	(void)ev;
	(void)bits;
}

static struct ub_event_vmt event_vmt = {
	.add_bits = event_add_bits,
	.del_bits = event_del_bits,
	.set_fd = event_set_fd,
	.free = event_free,
	.add = event_add,
	.del = event_del,
	.add_timer = timer_add,
	.del_timer = timer_del,
	.add_signal = signal_add,
	.del_signal = signal_del,
	.winsock_unregister_wsaevent = winsock_unregister,
	.winsock_tcp_wouldblock = winsock_wouldblock,
};

/* ---- libunbound's base methods -------------------------------------------------------- */

static struct loop_base *as_base(struct ub_event_base *b)
{
	return (struct loop_base *)b;
}

static void base_free(struct ub_event_base *b)
{
	(void)b; /* the context's owner frees it (libunbound never calls this) */
}

static int base_dispatch(struct ub_event_base *b)
{
	(void)b;
	return -1; /* the resolver thread runs the loop (libunbound never calls this) */
}

static int base_loopexit(struct ub_event_base *b, struct timeval *tv)
{
	(void)b;
	(void)tv;
	return 0;
}

static struct ub_event *base_new_event(struct ub_event_base *b, int fd, short bits,
				       void (*cb)(int, short, void *), void *arg)
{
	struct loop *l = as_base(b)->loop;
	struct loop_event *ev;

	if (!l)
		return NULL;
	if (l->spare) {
		ev = l->spare;
		l->spare = ev->dead_next;
		l->n_spare--;
	} else if (!(ev = malloc(sizeof *ev))) {
		return NULL;
	}
	*ev = (struct loop_event){0};
	ev->super.magic = UB_EVENT_MAGIC;
	ev->super.vmt = &event_vmt;
	ev->loop = l;
	ev->fd = fd;
	ev->bits = bits;
	ev->cb = cb;
	ev->arg = arg;
	ev->heap_index = NO_TIMER;
	l->live++;
	return &ev->super;
}

static struct ub_event *base_new_signal(struct ub_event_base *b, int fd,
					void (*cb)(int, short, void *), void *arg)
{
	(void)b;
	(void)fd;
	(void)cb;
	(void)arg;
	return NULL;
}

static struct ub_event *base_wsaevent(struct ub_event_base *b, void *wsaevent,
				      void (*cb)(int, short, void *), void *arg)
{
	(void)b;
	(void)wsaevent;
	(void)cb;
	(void)arg;
	return NULL;
}

static struct ub_event_base_vmt base_vmt = {
	.free = base_free,
	.dispatch = base_dispatch,
	.loopexit = base_loopexit,
	.new_event = base_new_event,
	.new_signal = base_new_signal,
	.winsock_register_wsaevent = base_wsaevent,
};

void loop_base_init(struct loop_base *b)
{
	b->super.magic = UB_EVENT_MAGIC;
	b->super.vmt = &base_vmt;
	b->loop = NULL;
}

void loop_base_attach(struct loop_base *b, struct loop *l)
{
	b->loop = l;
}

/* ---- the loop ------------------------------------------------------------------------- */

int loop_init(struct loop *l)
{
	memset(l, 0, sizeof *l);
	l->now_ns = monotonic_ns();
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	l->sock_epfd = l->epfd;
	return l->epfd < 0 ? -1 : 0;
}

void loop_free(struct loop *l)
{
	if (l->epfd >= 0)
		close(l->epfd);
	l->epfd = -1;
	while (l->spare) {
		struct loop_event *ev = l->spare;
		l->spare = ev->dead_next;
		free(ev);
	}
	l->n_spare = 0;
	free(l->timers);
	free(l->by_fd);
	l->timers = NULL;
	l->by_fd = NULL;
	l->n_timers = l->timers_cap = l->by_fd_len = 0;
}

int loop_watch(struct loop *l, int fd, unsigned tag, bool edge)
{
	struct epoll_event ee = {.events = EPOLLIN | (edge ? EPOLLET : 0), .data.u64 = tag};

	return epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ee);
}

size_t loop_events(const struct loop *l)
{
	return l->live;
}

/* ev is to run for bits in this turn. */
static void to_run(struct loop *l, struct loop_event *ev, short bits)
{
	ev->run_bits |= bits;
	if (ev->in_run)
		return;
	ev->in_run = true;
	ev->run_next = NULL;
	if (l->run_tail)
		l->run_tail->run_next = ev;
	else
		l->run_head = ev;
	l->run_tail = ev;
}

static short ready_bits(const struct loop_event *ev, uint32_t what)
{
	short bits = 0;

	if (what & (EPOLLERR | EPOLLHUP))
		bits = UB_EV_READ | UB_EV_WRITE;
	if (what & EPOLLIN)
		bits |= UB_EV_READ;
	if (what & EPOLLOUT)
		bits |= UB_EV_WRITE;
	return bits & ev->bits;
}

/*
 * Every registered descriptor from the set it is in to epfd, reported as
 * tag says (0: by its event). One the old set no longer holds was closed
 * without a del (its number may be another file's now): it is forgotten,
 * never added. 0, or the errno of one that could not be added for want of
 * memory: it is left unregistered (libunbound's next add of it tries again).
 */
static int move_registrations(struct loop *l, int epfd, uint64_t tag)
{
	int from = l->sock_epfd, err = 0;

	l->sock_epfd = epfd;
	l->host_tag = tag;
	for (size_t fd = 0; fd < l->by_fd_len; fd++) {
		struct loop_event *ev = l->by_fd[fd];
		if (!ev)
			continue;
		struct epoll_event ee = watched_as(l, ev, ev->registered);
		if (epoll_ctl(from, EPOLL_CTL_DEL, (int)fd, NULL) < 0 ||
		    epoll_ctl(epfd, EPOLL_CTL_ADD, (int)fd, &ee) < 0) {
			if (errno == ENOMEM || errno == ENOSPC)
				err = errno;
			ev->registered = 0;
			l->by_fd[fd] = NULL;
		}
	}
	return err;
}

int loop_host(struct loop *l, int epfd, uint64_t tag)
{
	int from = l->sock_epfd;
	uint64_t from_tag = l->host_tag;
	int err = move_registrations(l, epfd, tag);

	if (!err)
		return 0;
	move_registrations(l, from, from_tag);
	errno = err;
	return -1;
}

void loop_unhost(struct loop *l)
{
	move_registrations(l, l->epfd, 0);
}

void loop_ready(struct loop *l, int fd, uint32_t events)
{
	struct loop_event *ev = fd >= 0 && (size_t)fd < l->by_fd_len ? l->by_fd[fd] : NULL;
	short bits = ev ? ready_bits(ev, events) : 0;

	if (bits)
		to_run(l, ev, bits);
}

/* Run what this turn found, oldest first; callbacks may add, delete and free events. */
static void dispatch(struct loop *l, uint64_t now_ns)
{
	l->dispatching = true;
	while (l->run_head) {
		struct loop_event *ev = l->run_head;
		l->run_head = ev->run_next;
		if (!l->run_head)
			l->run_tail = NULL;
		ev->in_run = false;
		short bits = ev->run_bits;
		ev->run_bits = 0;
		if (!bits || ev->freed)
			continue;
		if (!(ev->bits & UB_EV_PERSIST))
			event_del(&ev->super);
		else if (ev->timed)
			timer_start(l, ev, now_ns); /* a failure leaves it without: nothing better */
		ev->cb(ev->fd, bits, ev->arg);
	}
	l->dispatching = false;
	while (l->dead) {
		struct loop_event *ev = l->dead;
		l->dead = ev->dead_next;
		release(l, ev);
	}
}

static int wait_timeout(const struct loop *l, int timeout_ms, uint64_t now_ns)
{
	if (!l->n_timers)
		return timeout_ms;
	uint64_t due = l->timers[0]->deadline_ns;
	if (due <= now_ns)
		return 0;
	uint64_t ms = (due - now_ns + 999999) / 1000000;
	return timeout_ms >= 0 && ms > (uint64_t)timeout_ms ? timeout_ms : (int)ms;
}

bool loop_timer_due(const struct loop *l, uint64_t now_ns)
{
	return l->n_timers && l->timers[0]->deadline_ns <= now_ns;
}

/* What one epoll_wait found: libunbound's events to run, the caller's tags (at most max). */
static int collect(struct loop *l, const struct epoll_event *events, int n, unsigned *tags,
		   int max)
{
	int ours = 0;

	for (int i = 0; i < n; i++) {
		if (events[i].data.u64 < LOOP_MAX_TAG) {
			if (ours < max)
				tags[ours++] = (unsigned)events[i].data.u64;
			continue;
		}
		struct loop_event *ev = events[i].data.ptr;
		short bits = ready_bits(ev, events[i].events);
		if (bits)
			to_run(l, ev, bits);
	}
	return ours;
}

bool loop_running_last_ready(const struct loop *l)
{
	/* the run list is what collect found, then the timers run_due added */
	return l->dispatching && (!l->run_head || l->run_head->run_bits == UB_EV_TIMEOUT);
}

/* The timers due by now, then everything collected, run. */
static void run_due(struct loop *l, uint64_t now_ns)
{
	while (loop_timer_due(l, now_ns)) {
		struct loop_event *ev = l->timers[0];
		timer_stop(l, ev);
		to_run(l, ev, UB_EV_TIMEOUT);
	}
	dispatch(l, now_ns);
}

int loop_wait(struct loop *l, int timeout_ms, unsigned *tags, int max)
{
	struct epoll_event events[EVENTS_PER_WAIT];
	int n = 0;

	loop_read_clock(l);
	if (loop_timer_due(l, l->now_ns) && !l->skipped_poll) {
		l->skipped_poll = true; /* the next turn polls, whatever is due then */
	} else {
		l->skipped_poll = false;
		n = epoll_wait(l->epfd, events, EVENTS_PER_WAIT, wait_timeout(l, timeout_ms, l->now_ns));
		if (n < 0)
			return -1;
		loop_read_clock(l);
	}
	int ours = collect(l, events, n, tags, max);
	run_due(l, l->now_ns);
	return ours;
}

int loop_poll(struct loop *l, bool ready, unsigned *tags, int max)
{
	struct epoll_event events[EVENTS_PER_WAIT];
	int n = 0;

	if (ready) {
		n = epoll_wait(l->epfd, events, EVENTS_PER_WAIT, 0);
		if (n < 0)
			return -1;
	}
	int ours = collect(l, events, n, tags, max);
	run_due(l, l->now_ns);
	return ours;
}

int loop_timeout_ms(struct loop *l, int timeout_ms)
{
	return wait_timeout(l, timeout_ms, loop_read_clock(l));
}

uint64_t loop_read_clock(struct loop *l)
{
	l->now_ns = monotonic_ns();
	return l->now_ns;
}
