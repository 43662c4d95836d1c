/*
 * upstream/loop.h — the resolver thread's event loop (loop.c): one epoll
 * set and a timer heap, with libunbound's pluggable event API
 * (unbound-event.h) on top of them, so that libunbound runs inside the
 * resolver thread, on its sockets and timers, instead of in a thread of
 * its own behind a pipe.
 *
 * Owns: the epoll descriptor, the events libunbound makes through a
 * struct loop_base (their memory, their epoll registrations, their
 * timers). Borrows: the descriptors it watches (libunbound's and the
 * caller's; it closes none).
 *
 * Must never: run libunbound's callback for an event libunbound deleted or
 * freed (not even one whose readiness came in the same epoll_wait); free an
 * event while a dispatch may still reach it; be used from two threads (the
 * resolver thread owns it; contexts are made elsewhere, but attached here
 * before they ask anything).
 */
#ifndef LOCALDNS_UPSTREAM_LOOP_H
#define LOCALDNS_UPSTREAM_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <unbound-event.h>

struct loop_event;

struct loop {
	int epfd;
	int sock_epfd;               /* where libunbound's descriptors are watched: epfd, or the host's */
	uint64_t host_tag;           /* hosted: the host's data word for them (| the descriptor) */
	struct loop_event **timers;  /* a binary heap by deadline */
	size_t n_timers, timers_cap;
	struct loop_event **by_fd;   /* the event registered in epoll for each descriptor */
	size_t by_fd_len;
	struct loop_event *run_head, *run_tail; /* the turn's events with something to run */
	struct loop_event *dead;     /* freed while dispatching, released after it */
	struct loop_event *spare;    /* released events, made again before malloc is asked */
	size_t n_spare;
	bool dispatching;
	bool skipped_poll;           /* the last turn ran a due timer without epoll_wait */
	size_t live;                 /* events made and not freed */
	uint64_t now_ns;             /* the turn's clock (CLOCK_MONOTONIC), see loop_read_clock */
};

/*
 * The event base a libunbound context is made with (ub_ctx_create_ub_event).
 * libunbound only keeps the pointer until the context first asks, so a
 * context can be made on another thread with an unattached base, and
 * attached to the resolver's loop when the resolver takes it.
 */
struct loop_base {
	struct ub_event_base super;
	struct loop *loop;
};

/* The caller's own descriptors are told apart from libunbound's events by
 * their tag: a small number, below LOOP_MAX_TAG (no event's address is). */
#define LOOP_MAX_TAG 4096

/* 0, or -1 with errno. */
int loop_init(struct loop *l);
/* Close the epoll set; every libunbound event must have been freed (its contexts deleted). */
void loop_free(struct loop *l);

/*
 * Watch fd (readable) for the caller: loop_wait reports tag. Level-
 * triggered, or with edge once per change (an eventfd written again and
 * again, never read: each write is reported once). -1 with errno.
 */
int loop_watch(struct loop *l, int fd, unsigned tag, bool edge);

/*
 * Sleep until something is ready, at most timeout_ms (less when a timer of
 * libunbound's is due sooner), run libunbound's events that are ready and
 * its timers that are due, and give back the tags of the caller's
 * descriptors that are readable (at most max). When a timer is already
 * due, a turn runs it without asking epoll first, and the next one asks
 * (libunbound starts each query from a timer of no delay: one epoll_wait
 * less per question). The count, or -1 with errno (EINTR).
 */
int loop_wait(struct loop *l, int timeout_ms, unsigned *tags, int max);

/*
 * The same turn without sleeping, for a loop whose epoll descriptor
 * (loop_fd) sits in another thread's epoll set (the worker that hosts the
 * resolver, upstream.h): ask epoll only when ready (that set said the
 * descriptor is readable), run the timers due by the turn's clock (the
 * caller reads it first: loop_read_clock), what is ready and what
 * loop_ready passed on, give back the caller's tags. The count, or -1
 * with errno.
 */
int loop_poll(struct loop *l, bool ready, unsigned *tags, int max);
static inline int loop_fd(const struct loop *l) { return l->epfd; }
/*
 * Hosted: libunbound's descriptors go into the host's own epoll set epfd
 * from now on (those watched already move there), reported with the data
 * word tag | descriptor (tag's low half 0), which the host hands back with
 * loop_ready. Only the caller's descriptors stay in loop_fd's set. Why:
 * a set nested in another costs every reply a second wake-up callback and
 * a second epoll_wait, and every new socket's registration the kernel's
 * check for nested sets (docs/performance.md, "Cold misses"). 0, or -1
 * with errno (nothing moved then).
 */
int loop_host(struct loop *l, int epfd, uint64_t tag);
/* Back into the loop's own set, before the host's set is closed (the host leaves). */
void loop_unhost(struct loop *l);
/* The host's epoll_wait found descriptor fd ready (events): its event runs at the next loop_poll. */
void loop_ready(struct loop *l, int fd, uint32_t events);
/*
 * Called from a callback the loop runs: no event that epoll found ready is
 * left to run in this turn's dispatch; timers due may still follow (a
 * dispatch runs what was ready first, then the timers due).
 */
bool loop_running_last_ready(const struct loop *l);
/* A timer of libunbound's is due by now_ns (monotonic): a loop_poll runs it. */
bool loop_timer_due(const struct loop *l, uint64_t now_ns);
/* timeout_ms, or less when a timer is due sooner (0: due now); reads the clock. */
int loop_timeout_ms(struct loop *l, int timeout_ms);

/*
 * The turn's clock: every timeout libunbound adds counts from it, and
 * loop_poll runs the timers due by it. loop_wait reads it when it wakes;
 * the caller of loop_poll reads it when its turn starts, and before it
 * asks libunbound anything outside a turn (a timeout added by a clock
 * read long ago would fire early). loop_clock_ns is the last reading.
 */
uint64_t loop_read_clock(struct loop *l);
static inline uint64_t loop_clock_ns(const struct loop *l) { return l->now_ns; }

/* A base for a context that is not attached to a loop yet. */
void loop_base_init(struct loop_base *b);
/* From now on the context of b makes its events in l. */
void loop_base_attach(struct loop_base *b, struct loop *l);

/* Events libunbound has made and not freed (tests, and a leak check). */
size_t loop_events(const struct loop *l);

#endif
