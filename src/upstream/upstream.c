/*
 * upstream/upstream.c — the resolver thread: requests in, libunbound
 * queries out, answers into the cache and back to the clients. This file
 * has the loop, the contexts, the life cycle and every call to libunbound.
 * The rest is below it and never calls back up: the questions and their
 * waiters are flight.c's, pure logic that takes the time from here, asks
 * through ask_libunbound and answers through deliver.c (the only file that
 * sends); libunbound's results go through result.c into the cache and on
 * to flight.c; the rings to and from the workers are ring.c's.
 *
 * Flow. A worker that cannot answer from local data or the cache packs an
 * upstream_request into its ring (single producer, single consumer, see
 * ring.c: no allocation, no lock) and, once per batch, writes the shared
 * request eventfd. The resolver thread sleeps in its loop (loop.c) on
 * that eventfd, the stop and control eventfds and libunbound's own sockets
 * and timers (libunbound runs on this thread, on the loop's event base:
 * no thread or pipe of its own), with a timeout set by the earliest client
 * deadline (and by upstream.max_rate while questions wait for it). For each request it first looks at the cache again (a query for
 * the same name may have been answered since the worker missed), then at
 * the flights: at most one libunbound query per (qname, qtype, qclass, DO,
 * CD) is in flight, and later identical requests wait on it. When
 * libunbound answers, the reply goes into the cache and every waiter gets
 * it with its own ID, question case, EDNS and cookie.
 *
 * Reload. A new libunbound context is built on the reloading thread (it
 * may be slow: resolv.conf's loopback stubs are probed) and handed over
 * with a mutex-and-condition handshake: from then on every new query
 * starts on it, with the new timeout and rate, and a new client never
 * joins a query still running on the old one. The old context's sockets
 * stay in the loop until its queries have come back, answering the clients
 * that waited on them, or until its timeout has passed once more since the
 * switch: by then each of those clients has had its answer at its
 * deadline, and the old context is deleted with whatever it still runs.
 * The failing mark and the cool-downs belonged to the old upstream and are
 * cleared at the switch.
 *
 * Retired sockets. When a listen address is removed, each worker stops
 * reading its UDP socket and hands it here through its socket ring
 * (ring.c). Every request carrying that socket was put in the worker's
 * request ring before, so the resolver takes the sockets first and then
 * the requests: once the last waiter then known has reached its deadline
 * (the list's tail), nobody can be answered on the socket any more, and
 * the resolver closes it. Closing it in the worker would let a late sendto
 * reach a reused descriptor number.
 *
 * Capacity. A context runs at most MAX_RESOLVING queries (Unbound's
 * num-queries-per-thread); more wait in flight.c's queue, so a slow or
 * rate-limiting upstream costs latency, not answers, and the context keeps
 * what libunbound has learned about the servers (round-trip times, which
 * need TCP, EDNS). One case needs more: libunbound keeps a query to a
 * forwarder that has stopped answering for minutes (about 12 KB each; 60,000
 * names were 700 MiB) and ub_cancel frees nothing (it only drops the
 * result), so a
 * full context from which nothing has come back for its whole timeout,
 * while questions wait for room (flights_stalled), is renewed: a fresh one
 * built from the same unbound.conf text takes the new queries and the
 * silent one is retired as after a switch. Silence means
 * there was nothing worth keeping; at most one renewal per timeout, so at
 * most about two contexts' worth of queries are ever held.
 */
#include "upstream/upstream.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include <unbound.h>
#include <unbound-event.h>

#include "dnstap/dnstap.h"
#include "log/log.h"
#include "privs/privs.h"
#include "upstream/context.h"
#include "upstream/deliver.h"
#include "upstream/flight.h"
#include "upstream/loop.h"
#include "upstream/result.h"
#include "upstream/ring.h"
#include "util/clock.h"

#define NEGATIVE_MAX_TTL 3600    /* RFC 2308 section 5: cap negative answers */
#define SERVFAIL_TTL 5           /* seconds the cache keeps a SERVFAIL */
#define MAX_RESOLVING 1024       /* libunbound queries on one context (Unbound's
				    num-queries-per-thread default) */
#define TURN_MS 500              /* the longest sleep: idle, it still turns twice a second */
#define HELD_TURN_MS 1           /* the longest while TCP replies wait for a completion ring */
#define RENEWAL_LOG_MS 60000

/* Our own descriptors in the loop (loop.c's tags); libunbound's are its own. */
enum source { SRC_REQUESTS = 1, SRC_STOP, SRC_CONTROL };

/* A libunbound context and the queries still running on it. */
struct upstream_context {
	struct loop_base base;       /* its event base: the resolver's loop once it asks */
	struct ub_ctx *ub;
	char *conf;                  /* its unbound.conf text, to build a fresh one */
	uint64_t timeout_ms;         /* upstream.timeout of the config it came from */
	uint64_t max_rate;           /* upstream.max_rate of that config */
	unsigned max_per_client;     /* upstream.max_pending_per_client of that config */
	uint32_t number;             /* the flight table's number for it (flights_upstream) */
	unsigned outstanding;        /* queries running on it */
	uint64_t delete_by_ms;       /* retired: at the latest then */
	struct upstream_context *next; /* retired list */
};

/* A UDP socket no worker reads any more, closed once nobody can be answered on it. */
struct retired_socket {
	int fd;
	uint64_t close_at_ms;
	struct retired_socket *next;
};

struct upstream {
	struct upstream_context *ctx; /* where new queries start */
	struct cache *cache;
	unsigned n_workers;
	struct request_ring **requests;
	struct completion_ring **completions;
	struct socket_ring **sockets;
	_Atomic uint32_t sockets_handed; /* bumped after each socket put in a socket ring */
	_Atomic bool idle;           /* the resolver may be asleep: upstream_wake writes request_efd */
	int request_efd;
	int stop_efd;
	int control_efd;             /* upstream_switch has a context waiting */
	struct loop loop;            /* our descriptors and libunbound's sockets and timers */
	bool loop_made;
	bool hosted;                 /* a worker runs the turns (upstream_host_turn), no thread */
	unsigned host_worker;        /* hosted: which (upstream_host_attach), its ring's index */
	pthread_t thread;
	bool running;

	/* The hand-over of a new context (upstream_switch). */
	pthread_mutex_t control_lock;
	pthread_cond_t control_done;
	struct upstream_context *incoming; /* control_lock */
	bool accepting;              /* control_lock: the resolver thread takes them */
	bool host_present;           /* control_lock: a worker turns it (attached, not left) */
	atomic_bool settle_asked;    /* upstream_settle waits for settled */
	bool settled;                /* control_lock: no client was waiting after that */
	bool settle_taken;           /* resolver thread: requests taken since settle_asked */

	/* resolver thread only */
	struct upstream_context *retired; /* contexts whose queries are finishing */
	struct retired_socket *retired_sockets;
	uint64_t now_ms;
	uint64_t next_turn_ms;       /* hosted: a turn is owed by then even with nothing ready */
	bool turn_owed;              /* hosted: requests waiting, or a socket found ready by the host */
	uint64_t renewal_logged_ms;
	unsigned client_ipv6_bits;   /* listen.ipv6_client_prefix_length (restart-only) */
	_Atomic uint64_t heartbeat_ms; /* now_ms once per loop turn, for /health */
	uint32_t sockets_seen;       /* sockets_handed when the socket rings were last read */
	struct upstream_request taken; /* the request take_requests unpacked last */
	/* Keeping libunbound and the flight table out of each other's way
	 * (see "Inside libunbound's callbacks" below). */
	bool asking;                 /* inside ub_resolve_event */
	bool in_result;              /* inside libunbound's callback with a result */
	struct flight **deferred;    /* asked from inside a result, asked after it */
	size_t n_deferred, deferred_cap;
	struct early_result *early, *early_tail; /* results given inside ub_resolve_event */
	struct upstream_counters n;
	struct flights flights;      /* the questions and their clients (flight.c) */
	struct results results;      /* libunbound's results into the cache (result.c) */
	struct deliver deliver;      /* the replies (deliver.c) */
};

static void signal_fd(int fd)
{
	uint64_t one = 1;
	ssize_t ignored = write(fd, &one, sizeof one);

	(void)ignored; /* EAGAIN means the counter is already non-zero: awake */
}

static void drain_fd(int fd)
{
	uint64_t value;
	ssize_t ignored = read(fd, &value, sizeof value);

	(void)ignored;
}

/* ---- worker side ------------------------------------------------------------ */

bool upstream_submit(struct upstream *u, unsigned worker, const struct upstream_request *r)
{
	if (ring_request_put(u->requests[worker], r))
		return true;
	upstream_bump(&u->n.dropped);
	return false;
}

/*
 * The wake-up is owed only while the resolver may be asleep: it sets idle,
 * then looks at the rings before it sleeps; a worker puts its requests,
 * then looks at idle. With a full fence between each side's store and
 * load, at least one of them sees the other's: the resolver does not
 * sleep, or the worker writes the eventfd. A resolver that is awake takes
 * every ring at every turn, so a busy one costs its workers no syscall.
 */
void upstream_wake(struct upstream *u)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&u->idle, memory_order_relaxed))
		signal_fd(u->request_efd);
}

/* Resolver side, idle set: is there anything a worker put that a turn should take now? */
static bool requests_waiting(struct upstream *u)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&u->sockets_handed, memory_order_acquire) != u->sockets_seen)
		return true;
	for (unsigned i = 0; i < u->n_workers; i++)
		if (!ring_request_empty(u->requests[i]))
			return true;
	return false;
}

bool upstream_retire_socket(struct upstream *u, unsigned worker, int fd)
{
	if (!ring_socket_put(u->sockets[worker], fd))
		return false;
	atomic_fetch_add_explicit(&u->sockets_handed, 1, memory_order_release);
	upstream_wake(u);
	return true;
}

int upstream_completion_fd(struct upstream *u, unsigned worker)
{
	return ring_completion_fd(u->completions[worker]);
}

bool upstream_take_completion(struct upstream *u, unsigned worker,
			      struct upstream_completion *out)
{
	return ring_completion_take(u->completions[worker], out);
}

bool upstream_failing(const struct upstream *u)
{
	return flights_failing(&u->flights);
}

void upstream_stats(const struct upstream *u, struct upstream_stats *out)
{
	upstream_counters_read(&u->n, out);
}

uint64_t upstream_heartbeat_ms(const struct upstream *u)
{
	return atomic_load_explicit(&u->heartbeat_ms, memory_order_relaxed);
}

/*
 * The sockets the workers handed over, not yet closable: taken before the
 * requests (see "Retired sockets" above), their closing time set after.
 * The rings are read only when sockets_handed says one came (a socket put
 * before the count went up is read then or at the next call).
 */
static struct retired_socket *take_sockets(struct upstream *u)
{
	uint32_t handed = atomic_load_explicit(&u->sockets_handed, memory_order_acquire);
	struct retired_socket *taken = NULL;
	int fd;

	if (handed == u->sockets_seen)
		return NULL;
	u->sockets_seen = handed;
	for (unsigned i = 0; i < u->n_workers; i++) {
		while (ring_socket_take(u->sockets[i], &fd)) {
			struct retired_socket *rs = malloc(sizeof *rs);
			if (!rs) {
				/* Waiting on is then impossible: better a reply lost than the descriptor leaked. */
				close(fd);
				continue;
			}
			rs->fd = fd;
			rs->next = taken;
			taken = rs;
		}
	}
	return taken;
}

/* The requests that carried them are in: close them once their waiters are gone. */
static void retire_sockets(struct upstream *u, struct retired_socket *taken)
{
	while (taken) {
		struct retired_socket *rs = taken;
		taken = rs->next;
		rs->close_at_ms = flights_last_deadline_ms(&u->flights, u->now_ms);
		rs->next = u->retired_sockets;
		u->retired_sockets = rs;
	}
}

static void close_retired_sockets(struct upstream *u, bool all)
{
	for (struct retired_socket **p = &u->retired_sockets; *p;) {
		struct retired_socket *rs = *p;
		if (!all && rs->close_at_ms > u->now_ms) {
			p = &rs->next;
			continue;
		}
		close(rs->fd);
		*p = rs->next;
		free(rs);
	}
}

/* Worker `worker`'s request r into the flight table (the host's own misses: not looked up again). */
static void take_request(struct upstream *u, unsigned worker, const struct upstream_request *r)
{
	/* read after the request arrived: TTLs aged by an older clock
	 * could go up between two replies (see worker_read_clock) */
	u->now_ms = (uint64_t)coarse_ms();
	if (r->transport == UPSTREAM_NO_REPLY)
		flights_refresh(&u->flights, r, u->now_ms);
	else if (u->hosted && worker == u->host_worker)
		flights_client_missed(&u->flights, worker, r, u->now_ms);
	else
		flights_client(&u->flights, worker, r, u->now_ms);
}

static void take_requests(struct upstream *u)
{
	struct upstream_request *r = &u->taken;
	struct retired_socket *sockets = take_sockets(u);

	for (unsigned i = 0; i < u->n_workers; i++)
		while (ring_request_take(u->requests[i], r))
			take_request(u, i, r);
	retire_sockets(u, sockets);
}

static int wait_ms(const struct upstream *u)
{
	/* TCP replies held for a full completion ring: back as its worker takes replies out */
	return (int)flights_wait_ms(&u->flights, u->now_ms,
				    deliver_holding(&u->deliver) ? HELD_TURN_MS : TURN_MS);
}

/* ---- contexts ------------------------------------------------------------------------ */

/* What the flight table is to do with the upstream c. */
static struct flight_settings settings_of(const struct upstream *u,
					       const struct upstream_context *c)
{
	return (struct flight_settings){.timeout_ms = c->timeout_ms, .max_rate = c->max_rate,
					.max_per_client = c->max_per_client,
					.max_asked = MAX_RESOLVING,
					.client_ipv6_bits = u->client_ipv6_bits};
}

/* The context the flight table numbers so: the current one, or a retired one. */
static struct upstream_context *context_numbered(struct upstream *u, uint32_t number)
{
	if (u->ctx->number == number)
		return u->ctx;
	for (struct upstream_context *c = u->retired; c; c = c->next)
		if (c->number == number)
			return c;
	return NULL;
}

static void delete_context(struct upstream *u, struct upstream_context *c)
{
	(void)u;
	upstream_discard(c); /* its sockets and timers leave the loop; no result follows */
}

/* Retired contexts go once their queries are back, or at their deadline. */
static void delete_finished_contexts(struct upstream *u)
{
	for (struct upstream_context **p = &u->retired; *p;) {
		struct upstream_context *c = *p;
		if (c->outstanding > 0 && c->delete_by_ms > u->now_ms) {
			p = &c->next;
			continue;
		}
		if (c->outstanding > 0)
			flights_drop_upstream(&u->flights, c->number);
		*p = c->next;
		delete_context(u, c);
	}
}

/* New queries start on c from now on; the current one finishes what it runs.
 * forget: the failing mark and the cool-downs were about the old one. */
static void replace_context(struct upstream *u, struct upstream_context *c, bool forget)
{
	struct upstream_context *old = u->ctx;
	struct flight_settings s = settings_of(u, c);

	flights_new_upstream(&u->flights, &s, forget, u->now_ms);
	c->number = flights_upstream(&u->flights);
	loop_base_attach(&c->base, &u->loop);
	u->ctx = c;
	old->delete_by_ms = u->now_ms + old->timeout_ms;
	old->next = u->retired;
	u->retired = old;
}

/*
 * New upstream settings (upstream_switch). When they resolve differently
 * (the unbound.conf text changed, not just upstream.timeout), answers from
 * the old ones are kept only as stale data: the next query for each asks
 * the new upstream, and an outage of it is still covered.
 */
static void install_context(struct upstream *u, struct upstream_context *c)
{
	bool resolves_differently = strcmp(u->ctx->conf, c->conf) != 0;

	replace_context(u, c, true);
	if (resolves_differently)
		cache_make_all_stale(u->cache, u->now_ms / 1000);
}

static struct upstream_context *context_like(const struct upstream_context *model,
					     char *err, size_t errlen);

/* The same settings, a fresh context: see "Capacity" above. */
static void renew_context(struct upstream *u)
{
	struct upstream_context *clogged = u->ctx, *fresh;
	char err[CONFIG_ERR_MAX], running[16];

	fresh = context_like(clogged, err, sizeof err);
	if (!fresh) {
		log_error("cannot renew the libunbound context", "error", err);
		return;
	}
	replace_context(u, fresh, false);
	upstream_bump(&u->n.renewals);
	if (u->now_ms >= u->renewal_logged_ms + RENEWAL_LOG_MS) {
		u->renewal_logged_ms = u->now_ms;
		snprintf(running, sizeof running, "%u", clogged->outstanding);
		log_warn("libunbound has too many queries running and none came back for "
			 "upstream.timeout (is the upstream answering?): new ones go to a fresh "
			 "context, the old one is dropped after upstream.timeout (said at most "
			 "once a minute)", "running", running);
	}
}

/* ---- asking libunbound ------------------------------------------------------------------ */

/*
 * Inside libunbound's callbacks. libunbound runs on this thread, inside
 * calls we make: loop_wait (its sockets and timers), ub_resolve_event and
 * ub_ctx_delete. Two of the ways these nest are kept apart:
 * - A result given from inside ub_resolve_event (libunbound answers some
 *   questions at once: its local zones, its own caches) would reach the
 *   flight table from inside flight_io.ask, which promises never to do
 *   that. It is copied and taken up after the call (early results).
 * - A question asked from inside a result (a retry, autopath's next
 *   candidate) would go to libunbound from inside its own callback, where
 *   the question's own query state is still being finished: a retry would
 *   join the very query that just failed and fail with it. It is asked once
 *   the callback has returned (deferred asks, right after the loop's turn).
 * Contexts deleted with queries still running (a retired context past its
 * deadline, shutdown) call back with SERVFAIL for each from inside
 * ub_ctx_delete; by then their flights are gone (flights_drop_upstream,
 * flights_free), so those results are dropped (discarding).
 */
struct early_result {
	struct flight *f;
	struct upstream_answer a;    /* its msg and why_bogus point into data */
	bool counted;                /* its context counts it as running */
	struct early_result *next;
	uint8_t data[];
};

static _Thread_local bool discarding; /* inside upstream_discard's ub_ctx_delete */

/* What libunbound's event callback says, as our kind of result. */
static enum upstream_result result_kind(int rcode, const uint8_t *msg, int len, int sec)
{
	if (rcode != 0) /* no answer was made: the message is not one */
		return rcode == DNS_R_SERVFAIL ? UPSTREAM_RESULT_SERVFAIL : UPSTREAM_RESULT_ERROR;
	if (!msg || len < DNS_HEADER_LEN)
		return UPSTREAM_RESULT_ERROR;
	if (sec == 1)
		return UPSTREAM_RESULT_BOGUS;
	switch (msg[3] & 0xf) {
	case DNS_R_NOERROR: return UPSTREAM_RESULT_NOERROR;
	case DNS_R_NXDOMAIN: return UPSTREAM_RESULT_NXDOMAIN;
	case DNS_R_SERVFAIL: return UPSTREAM_RESULT_SERVFAIL;
	default: return UPSTREAM_RESULT_OTHER;
	}
}

static struct upstream *upstream_of(const struct flight *f)
{
	return (struct upstream *)((char *)f->table - offsetof(struct upstream, flights));
}

/* f's result, into the cache and to its waiters. counted: its context counts it as running. */
static void take_result(struct upstream *u, struct flight *f, struct upstream_answer *a,
			bool counted)
{
	struct upstream_context *c = context_numbered(u, f->upstream);

	/* from the turn that asked to the turn that took the answer */
	upstream_observe_latency(&u->n, loop_clock_ns(&u->loop) - f->asked_ns);
	upstream_bump(&u->n.results[a->kind]);
	u->now_ms = (uint64_t)coarse_ms();
	if (c && counted)
		c->outstanding--;
	if (a->msg && dnstap_resolver_on()) /* dnstap: resolver_response */
		dnstap_resolver_response(a->msg, a->len);
	result_take(&u->results, f, a, u->now_ms);
}

/* A result to take up after the call it came from: a copy (its message is libunbound's). */
static bool keep_early(struct upstream *u, struct flight *f, const struct upstream_answer *a,
		       bool counted)
{
	size_t why = a->why_bogus ? strlen(a->why_bogus) + 1 : 0;
	struct early_result *e = malloc(sizeof *e + a->len + why);

	if (!e)
		return false;
	e->f = f;
	e->a = *a;
	e->counted = counted;
	e->next = NULL;
	if (a->msg) {
		memcpy(e->data, a->msg, a->len);
		e->a.msg = e->data;
	}
	if (why) {
		memcpy(e->data + a->len, a->why_bogus, why);
		e->a.why_bogus = (const char *)e->data + a->len;
	}
	if (u->early_tail)
		u->early_tail->next = e;
	else
		u->early = e;
	u->early_tail = e;
	return true;
}

/* libunbound's callback (ub_resolve_event's): a flight's result, as the wire message it built. */
static void on_result(void *arg, int rcode, void *packet, int len, int sec, char *why_bogus,
		      int was_ratelimited)
{
	struct flight *f = arg;
	struct upstream *u;
	struct upstream_answer a = {.kind = result_kind(rcode, packet, len, sec)};

	(void)was_ratelimited;
	if (discarding)
		return;
	u = upstream_of(f);
	if (a.kind != UPSTREAM_RESULT_ERROR && rcode == 0) {
		a.msg = packet;
		a.len = (size_t)len;
		a.secure = sec == 2;
		a.why_bogus = why_bogus;
	}
	if (u->asking) {
		if (!keep_early(u, f, &a, true)) {
			/* no memory for a copy: as a failure, which needs none */
			a = (struct upstream_answer){.kind = UPSTREAM_RESULT_ERROR};
			keep_early(u, f, &a, true);
		}
		return;
	}
	u->in_result = true;
	take_result(u, f, &a, true);
	u->in_result = false;
	/* The last answer of this dispatch: its replies (and those of the answers
	 * before it) leave now, before the questions whose timers run after the
	 * answers in the same dispatch go out (a socket, bind, connect and send
	 * each: a batch of them held every reply of the turn back), and before
	 * libunbound cleans up behind the question (its socket closed, its
	 * state freed): Unbound's daemon too answers its client first. */
	if (loop_running_last_ready(&u->loop))
		deliver_flush(&u->deliver);
}

/* Early results for f kept after `after` (NULL: all) go: f was not asked after all. */
static void forget_early(struct upstream *u, struct early_result *after, const struct flight *f)
{
	struct early_result **p = after ? &after->next : &u->early;

	while (*p) {
		struct early_result *e = *p;
		if (e->f != f) {
			p = &e->next;
			continue;
		}
		*p = e->next;
		free(e);
	}
	u->early_tail = NULL;
	for (struct early_result *e = u->early; e; e = e->next)
		u->early_tail = e;
}

/* f's question to the current context, now. */
static bool ask_now(struct upstream *u, struct flight *f)
{
	struct early_result *before = u->early_tail;
	char name[1024];
	int id, rc;

	if (dns_name_to_text(flight_name(f), name, sizeof name) < 0)
		return false;
	f->asked_ns = loop_clock_ns(&u->loop);
	u->asking = true;
	rc = ub_resolve_event(u->ctx->ub, name, f->q.qtype, f->q.qclass, f, on_result, &id);
	u->asking = false;
	if (rc != 0) {
		forget_early(u, before, f);
		return false;
	}
	if (dnstap_resolver_on()) /* dnstap: resolver_query */
		dnstap_resolver_query(flight_name(f), f->q.qtype, f->q.qclass);
	u->ctx->outstanding++;
	return true;
}

/* flight_io.ask: f's question to the current context (after the callback, from inside one). */
static bool ask_libunbound(void *env, struct flight *f)
{
	struct upstream *u = env;

	if (!u->in_result)
		return ask_now(u, f);
	if (u->n_deferred == u->deferred_cap) {
		size_t cap = u->deferred_cap ? 2 * u->deferred_cap : 64;
		struct flight **d = realloc(u->deferred, cap * sizeof *d);
		if (!d)
			return false;
		u->deferred = d;
		u->deferred_cap = cap;
	}
	u->deferred[u->n_deferred++] = f;
	return true;
}

/*
 * The questions asked from inside results, then the results given inside
 * ub_resolve_event, until neither is left (taking a result may ask again).
 * A deferred question libunbound refuses fails as a result: the table was
 * told it was asked.
 */
static void run_deferred(struct upstream *u)
{
	static const struct upstream_answer refused = {.kind = UPSTREAM_RESULT_ERROR};

	while (u->n_deferred || u->early) {
		for (size_t i = 0; i < u->n_deferred; i++) {
			struct flight *f = u->deferred[i];
			if (!ask_now(u, f) && !keep_early(u, f, &refused, false)) {
				/* no memory even for that: at once, outside libunbound all the same */
				struct upstream_answer a = refused;
				take_result(u, f, &a, false);
			}
		}
		u->n_deferred = 0;
		while (u->early) {
			struct early_result *e = u->early;
			u->early = e->next;
			if (!u->early)
				u->early_tail = NULL;
			take_result(u, e->f, &e->a, e->counted);
			free(e);
		}
	}
}

/* upstream_switch's hand-over, on the resolver thread. */
static void take_incoming(struct upstream *u)
{
	drain_fd(u->control_efd);
	pthread_mutex_lock(&u->control_lock);
	if (u->incoming) {
		install_context(u, u->incoming);
		u->incoming = NULL;
		pthread_cond_broadcast(&u->control_done);
	}
	pthread_mutex_unlock(&u->control_lock);
}

/*
 * upstream_settle's answer, at the end of a turn: once requests have been
 * taken after the settle was seen (so everything queued before the ask is
 * in), and no client waits any more.
 */
static void report_settled(struct upstream *u, bool asked_before_take)
{
	if (!asked_before_take)
		return;
	u->settle_taken = true;
	if (!u->settle_taken || flights_waiting(&u->flights) > 0)
		return;
	pthread_mutex_lock(&u->control_lock);
	if (!u->settled) {
		u->settled = true;
		pthread_cond_broadcast(&u->control_done);
	}
	pthread_mutex_unlock(&u->control_lock);
}

static void stop_accepting(struct upstream *u)
{
	pthread_mutex_lock(&u->control_lock);
	u->accepting = false;
	pthread_cond_broadcast(&u->control_done);
	pthread_mutex_unlock(&u->control_lock);
}

/* ---- the loop ---------------------------------------------------------------------------- */

/*
 * One turn, once the loop has run libunbound's events and timers: our own
 * descriptors that were ready (tags), then the workers' requests, the
 * flights' deadlines and queue, the replies out. true: stop.
 */
static bool turn(struct upstream *u, const unsigned *ready, int n)
{
	run_deferred(u);
	u->now_ms = (uint64_t)coarse_ms();
	atomic_store_explicit(&u->heartbeat_ms, u->now_ms, memory_order_relaxed);
	for (int i = 0; i < n; i++) {
		switch ((enum source)ready[i]) {
		case SRC_REQUESTS: /* taken below, at every turn */
			break;
		case SRC_CONTROL:
			take_incoming(u);
			break;
		case SRC_STOP:
			return true;
		}
	}
	bool settle_asked = atomic_load_explicit(&u->settle_asked, memory_order_acquire);
	take_requests(u);
	u->now_ms = (uint64_t)coarse_ms();
	flights_expire(&u->flights, u->now_ms);
	if (flights_stalled(&u->flights, u->now_ms))
		renew_context(u);
	flights_start_queued(&u->flights, u->now_ms);
	run_deferred(u);
	deliver_flush(&u->deliver); /* the UDP replies out before a socket of theirs is closed */
	close_retired_sockets(u, false);
	delete_finished_contexts(u);
	deliver_flush(&u->deliver);
	report_settled(u, settle_asked);
	return false;
}

/* After the last turn: its replies out, then nobody waits for a turn any more. */
static void finish(struct upstream *u)
{
	deliver_flush(&u->deliver);
	stop_accepting(u);
}

static void *resolver_main(void *arg)
{
	struct upstream *u = arg;
	unsigned ready[4];

	urcu_memb_register_thread();
	for (;;) {
		/* asleep as far as the workers know (upstream_wake), unless they left work */
		atomic_store_explicit(&u->idle, true, memory_order_relaxed);
		int timeout = requests_waiting(u) ? 0 : wait_ms(u);
		/* libunbound's sockets and timers are served inside */
		int n = loop_wait(&u->loop, timeout, ready, 4);
		atomic_store_explicit(&u->idle, false, memory_order_relaxed);
		if (turn(u, ready, n))
			break;
	}
	finish(u);
	urcu_memb_unregister_thread();
	return NULL;
}

/* ---- on a worker ------------------------------------------------------------------------- */

bool upstream_on_worker(const struct config *cfg, unsigned workers)
{
	switch (cfg->upstream.resolver) {
	case CONFIG_RESOLVER_OWN_THREAD:
		return false;
	case CONFIG_RESOLVER_FIRST_WORKER:
		return true;
	case CONFIG_RESOLVER_AUTO:
		break;
	}
	return workers == 1;
}

int upstream_host_fd(const struct upstream *u)
{
	return u->hosted ? loop_fd(&u->loop) : -1;
}

int upstream_host_attach(struct upstream *u, unsigned worker, int epfd, uint64_t tag)
{
	if (!u->hosted)
		return -1;
	/* before the host's thread starts, and no other turns the loop yet */
	if (loop_host(&u->loop, epfd, tag) < 0)
		return -2;
	pthread_mutex_lock(&u->control_lock);
	u->host_worker = worker;
	u->host_present = true;
	pthread_mutex_unlock(&u->control_lock);
	return loop_fd(&u->loop);
}

void upstream_host_ready(struct upstream *u, int fd, uint32_t events)
{
	loop_ready(&u->loop, fd, events);
	u->turn_owed = true;
}

/* Does anyone turn the resolver (control_lock held)? Otherwise nobody waits for a turn. */
static bool turning(const struct upstream *u)
{
	return u->accepting && (!u->hosted || u->host_present);
}

int upstream_host_wait_ms(struct upstream *u, int timeout_ms)
{
	atomic_store_explicit(&u->idle, true, memory_order_relaxed);
	if (requests_waiting(u)) {
		u->turn_owed = true; /* left while it was awake: no wake-up came for them */
		return 0;
	}
	uint64_t now = (uint64_t)coarse_ms();
	uint64_t owed = u->next_turn_ms > now ? u->next_turn_ms - now : 0;
	if (owed < (uint64_t)timeout_ms)
		timeout_ms = (int)owed;
	return loop_timeout_ms(&u->loop, timeout_ms);
}

/*
 * A turn is owed when the loop's descriptor was ready (another worker's
 * wake-up among others), the host found one of libunbound's sockets ready
 * (upstream_host_ready), the host left a request, upstream_host_wait_ms
 * found requests another worker left while the host was awake (they wrote
 * no wake-up), a timer of libunbound's is due, or the resolver's own wait
 * (a deadline, the pace, the half-second turn) is over; otherwise the
 * host's turn costs a look at its own ring and the clock, no fence.
 * A question asked in a turn starts from a timer of no delay: it is run
 * at once, so the question leaves before the worker sleeps.
 */
bool upstream_host_turn(struct upstream *u, bool ready)
{
	unsigned tags[4];

	atomic_store_explicit(&u->idle, false, memory_order_relaxed);
	uint64_t now_ns = loop_read_clock(&u->loop);
	if (!ready && !u->turn_owed && ring_request_empty(u->requests[u->host_worker]) &&
	    !loop_timer_due(&u->loop, now_ns) && (uint64_t)coarse_ms() < u->next_turn_ms)
		return true;
	u->turn_owed = false;
	for (int turns = 0; turns < 2; turns++) {
		int n = loop_poll(&u->loop, ready && turns == 0, tags, 4);
		if (turn(u, tags, n < 0 ? 0 : n)) {
			finish(u);
			return false;
		}
		/* a question asked in this turn starts from a timer of no delay */
		if (!loop_timer_due(&u->loop, loop_clock_ns(&u->loop)))
			break;
	}
	u->next_turn_ms = u->now_ms + (uint64_t)wait_ms(u);
	return true;
}

/*
 * The host's own requests need no ring: they are taken here, on the thread
 * that turns the resolver, as they are (no packing). Not inside the batch
 * that made them: that holds the RCU read lock, and taking a request can
 * reach the cache's insert path (a question libunbound refuses is a
 * SERVFAIL stored). The questions leave at the turn that follows.
 */
void upstream_host_ask(struct upstream *u, const struct upstream_request *rs, size_t n)
{
	loop_read_clock(&u->loop); /* outside the resolver's turn: what it asks counts from now */
	for (size_t i = 0; i < n; i++)
		take_request(u, u->host_worker, &rs[i]);
	u->turn_owed = true;
}

void upstream_host_leave(struct upstream *u)
{
	/* whoever turns the loop next (upstream_stop) waits on its own set */
	loop_unhost(&u->loop);
	pthread_mutex_lock(&u->control_lock);
	u->host_present = false;
	pthread_cond_broadcast(&u->control_done);
	pthread_mutex_unlock(&u->control_lock);
}

/*
 * Stop the turns: the thread's, joined; the hosting worker's, once it has
 * seen the stop eventfd and finished, or has left (then, or when it never
 * came, the last replies go out here: nobody else turns any more).
 */
static void stop_turning(struct upstream *u)
{
	signal_fd(u->stop_efd);
	if (!u->hosted) {
		pthread_join(u->thread, NULL);
		return;
	}
	pthread_mutex_lock(&u->control_lock);
	while (turning(u))
		pthread_cond_wait(&u->control_done, &u->control_lock);
	bool unfinished = u->accepting;
	pthread_mutex_unlock(&u->control_lock);
	if (unfinished)
		finish(u);
}

/* ---- life cycle ----------------------------------------------------------------------- */

void upstream_cache_config(const struct config *cfg, struct cache_config *out)
{
	*out = (struct cache_config){
		.max_bytes = cfg->cache.size,
		.min_ttl = cfg->cache.min_ttl,
		.max_ttl = cfg->cache.max_ttl,
		.negative_max_ttl = cfg->cache.max_ttl < NEGATIVE_MAX_TTL ? cfg->cache.max_ttl
									  : NEGATIVE_MAX_TTL,
		.servfail_ttl = SERVFAIL_TTL,
		.serve_stale = cfg->cache.serve_stale,
		.stale_max_age = cfg->cache.stale_max_age,
		.stale_answer_ms = (uint32_t)cfg->cache.stale_answer_timeout_ms,
		.prefetch = cfg->cache.prefetch,
	};
}

int upstream_check(const struct config *cfg, char *err, size_t errlen)
{
	struct upstream_context *c = upstream_prepare(cfg, err, errlen);

	if (!c)
		return -1;
	upstream_discard(c);
	return 0;
}

static int make_rings(struct upstream *u)
{
	u->requests = calloc(u->n_workers, sizeof *u->requests);
	u->completions = calloc(u->n_workers, sizeof *u->completions);
	u->sockets = calloc(u->n_workers, sizeof *u->sockets);
	if (!u->requests || !u->completions || !u->sockets)
		return -1;
	for (unsigned i = 0; i < u->n_workers; i++) {
		u->requests[i] = ring_request_new();
		u->completions[i] = ring_completion_new();
		u->sockets[i] = ring_socket_new();
		if (!u->requests[i] || !u->completions[i] || !u->sockets[i])
			return -1;
	}
	return 0;
}

static int make_loop(struct upstream *u)
{
	u->request_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	u->stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	u->control_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (u->request_efd < 0 || u->stop_efd < 0 || u->control_efd < 0 ||
	    loop_init(&u->loop) < 0)
		return -1;
	u->loop_made = true;
	/* edge-triggered: each write wakes the loop once, and it is never read */
	if (loop_watch(&u->loop, u->request_efd, SRC_REQUESTS, true) < 0 ||
	    loop_watch(&u->loop, u->stop_efd, SRC_STOP, false) < 0 ||
	    loop_watch(&u->loop, u->control_efd, SRC_CONTROL, false) < 0)
		return -1;
	return 0;
}

void upstream_prepare_process(void)
{
	mallopt(M_ARENA_MAX, 1);
}

/* ub_ctx_config reads a file: the text goes through a memfd, never to disk. */
static int apply_conf_text(struct ub_ctx *ctx, const char *text, char *err, size_t errlen)
{
	char path[64];
	size_t len = strlen(text);
	int fd = memfd_create("localdns-unbound.conf", MFD_CLOEXEC);

	if (fd < 0 || write(fd, text, len) != (ssize_t)len) {
		snprintf(err, errlen, "cannot make the resolver configuration: %s",
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	int ub = ub_ctx_config(ctx, path);
	close(fd);
	if (ub != 0) {
		snprintf(err, errlen, "resolver configuration rejected: %s", ub_strerror(ub));
		return -1;
	}
	return 0;
}

/* A libunbound context on the event base b (no thread, no pipe: its sockets
 * and timers go into the loop b is attached to, see loop.c) configured by
 * text; it reads no file but those text names. NULL with err set. */
static struct ub_ctx *ub_from_text(struct loop_base *b, const char *text, char *err,
				   size_t errlen)
{
	struct ub_ctx *ctx = ub_ctx_create_ub_event(&b->super);

	if (!ctx) {
		snprintf(err, errlen, "cannot create the libunbound context");
		return NULL;
	}
	if (apply_conf_text(ctx, text, err, errlen) < 0) {
		ub_ctx_delete(ctx);
		return NULL;
	}
	return ctx;
}

/* A context of conf (copied) with these settings. NULL with err set. */
static struct upstream_context *context_from_text(const char *conf, uint64_t timeout_ms,
						  uint64_t max_rate, unsigned max_per_client,
						  char *err, size_t errlen)
{
	struct upstream_context *c = calloc(1, sizeof *c);

	if (!c || !(c->conf = strdup(conf))) {
		snprintf(err, errlen, "out of memory");
		free(c);
		return NULL;
	}
	loop_base_init(&c->base);
	c->timeout_ms = timeout_ms;
	c->max_rate = max_rate;
	c->max_per_client = max_per_client;
	c->ub = ub_from_text(&c->base, conf, err, errlen);
	if (!c->ub) {
		free(c->conf);
		free(c);
		return NULL;
	}
	return c;
}

static struct upstream_context *context_like(const struct upstream_context *model,
					     char *err, size_t errlen)
{
	return context_from_text(model->conf, model->timeout_ms, model->max_rate,
				 model->max_per_client, err, errlen);
}

#define TLS_PROBE_NAME "localdns-tls-probe.invalid"

/*
 * Whether this libunbound can make TLS connections: a context with
 * tls-upstream that answers one local name. A libunbound without TLS
 * cannot start its worker ("initialization failure"); one with TLS
 * answers from the local zone without sending anything. Asked once.
 */
static bool tls_supported(void)
{
	static int known = -1; /* main thread only: start, reloads, --check-config */
	struct ub_ctx *ctx;
	struct ub_result *res = NULL;

	if (known >= 0)
		return known;
	ctx = ub_ctx_create();
	known = ctx && ub_ctx_set_option(ctx, "tls-upstream:", "yes") == 0 &&
		ub_ctx_set_option(ctx, "local-zone:", TLS_PROBE_NAME ". static") == 0 &&
		ub_ctx_set_option(ctx, "local-data:", TLS_PROBE_NAME ". A 127.0.0.1") == 0 &&
		ub_resolve(ctx, TLS_PROBE_NAME, 1, 1, &res) == 0;
	if (res)
		ub_resolve_free(res);
	if (ctx)
		ub_ctx_delete(ctx);
	return known;
}

struct upstream_context *upstream_prepare(const struct config *cfg, char *err, size_t errlen)
{
	struct upstream_context *c;
	char *conf;

	if (!(conf = upstream_conf_text(cfg, err, errlen)))
		return NULL;
	if (cfg->upstream.tls && !tls_supported()) {
		snprintf(err, errlen, "upstream.tls: this libunbound (%s) was built without TLS "
			 "support (Debian 12's libunbound8 uses nettle, not OpenSSL): DNS-over-TLS "
			 "upstreams need a libunbound built with OpenSSL", ub_version());
		free(conf);
		return NULL;
	}
	c = context_from_text(conf, cfg->upstream.timeout_ms, cfg->upstream.max_rate,
			      cfg->upstream.max_pending_per_client, err, errlen);
	free(conf);
	return c;
}

void upstream_discard(struct upstream_context *c)
{
	if (!c)
		return;
	discarding = true; /* the SERVFAILs for what it still runs are nobody's */
	ub_ctx_delete(c->ub);
	discarding = false;
	free(c->conf);
	free(c);
}

/* How, and on which thread (its name in /proc/PID/task/TID/comm): upstream.resolver. */
static void log_resolving(const struct config *cfg, bool hosted)
{
	log_info(cfg->upstream.recursive ? "resolving external names by recursion"
					 : "resolving external names by forwarding",
		 "dnssec", cfg->upstream.dnssec ? "validate" : "off",
		 "runs_on", hosted ? "worker/0" : "resolver");
}

void upstream_switch(struct upstream *u, struct upstream_context *c, const struct config *cfg)
{
	pthread_mutex_lock(&u->control_lock);
	if (!turning(u)) {
		pthread_mutex_unlock(&u->control_lock);
		log_error("the resolver is stopping: the new upstream settings are not used");
		upstream_discard(c);
		return;
	}
	u->incoming = c;
	signal_fd(u->control_efd);
	while (u->incoming == c && turning(u))
		pthread_cond_wait(&u->control_done, &u->control_lock);
	bool taken = u->incoming != c;
	u->incoming = NULL;
	pthread_mutex_unlock(&u->control_lock);
	if (!taken) {
		upstream_discard(c);
		return;
	}
	log_resolving(cfg, u->hosted);
}

struct upstream *upstream_start(const struct config *cfg, struct cache *cache,
				unsigned n_workers, bool on_worker, char *err, size_t errlen)
{
	struct upstream *u = calloc(1, sizeof *u);

	if (!u) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	u->cache = cache;
	u->n_workers = n_workers;
	u->request_efd = u->stop_efd = u->control_efd = -1;
	pthread_mutex_init(&u->control_lock, NULL);
	pthread_cond_init(&u->control_done, NULL);
	u->ctx = upstream_prepare(cfg, err, errlen);
	if (!u->ctx)
		goto fail;
	u->now_ms = (uint64_t)coarse_ms();
	u->client_ipv6_bits = cfg->listen.ipv6_client_prefix_length;
	if (make_rings(u) < 0 || make_loop(u) < 0) {
		snprintf(err, errlen, "cannot set up the resolver: %s", strerror(errno));
		goto fail;
	}
	loop_base_attach(&u->ctx->base, &u->loop);
	struct flight_settings s = settings_of(u, u->ctx);
	const struct flight_io io = {.ask = ask_libunbound, .ask_env = u,
				     .reply = deliver_reply, .reply_env = &u->deliver};
	if (flights_init(&u->flights, &io, cache, &u->n, &s, u->now_ms) < 0) {
		snprintf(err, errlen, "cannot set up the resolver: out of memory or randomness");
		goto fail;
	}
	u->ctx->number = flights_upstream(&u->flights);
	results_init(&u->results, &u->flights, cache);
	if (deliver_init(&u->deliver, cache, &u->n, u->completions, n_workers) < 0) {
		snprintf(err, errlen, "cannot set up the resolver: out of memory");
		goto fail;
	}
	atomic_init(&u->heartbeat_ms, (uint64_t)coarse_ms()); /* alive before it is scheduled */
	atomic_init(&u->idle, true);
	u->accepting = true;
	u->hosted = on_worker;
	/* libunbound runs on this thread, or on the worker (loop.c): it starts none of its own */
	if (!u->hosted && privs_thread_create(&u->thread, PRIVS_RESOLVER, "resolver", resolver_main,
					      u, err, errlen) < 0) {
		u->accepting = false;
		goto fail;
	}
	u->running = true;
	log_resolving(cfg, u->hosted);
	return u;
fail:
	upstream_free(u);
	return NULL;
}

void upstream_settle(struct upstream *u, uint64_t max_ms)
{
	struct timespec until;

	if (!u || !u->running)
		return;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(max_ms / 1000);
	until.tv_nsec += (long)(max_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&u->control_lock);
	atomic_store_explicit(&u->settle_asked, true, memory_order_release);
	signal_fd(u->request_efd);
	while (!u->settled && turning(u) &&
	       pthread_cond_clockwait(&u->control_done, &u->control_lock, CLOCK_MONOTONIC,
				      &until) == 0)
		;
	pthread_mutex_unlock(&u->control_lock);
}

void upstream_stop(struct upstream *u)
{
	if (!u || !u->running)
		return;
	stop_turning(u);
	u->running = false;
	upstream_discard(u->ctx); /* cancels what is outstanding; no result follows */
	u->ctx = NULL;
	while (u->retired) {
		struct upstream_context *c = u->retired;
		u->retired = c->next;
		delete_context(u, c);
	}
	close_retired_sockets(u, true);
	while (u->early) { /* results nobody takes up now */
		struct early_result *e = u->early;
		u->early = e->next;
		free(e);
	}
	u->early_tail = NULL;
	u->n_deferred = 0;
	flights_free(&u->flights); /* the clients still waiting get no reply */
}

/* Sockets handed over after the resolver stopped are closed here. */
static void free_sockets(struct socket_ring *ring)
{
	int fd;

	while (ring_socket_take(ring, &fd))
		close(fd);
	ring_socket_free(ring);
}

void upstream_free(struct upstream *u)
{
	if (!u)
		return;
	upstream_stop(u);
	upstream_discard(u->ctx);
	for (unsigned i = 0; u->requests && i < u->n_workers; i++)
		ring_request_free(u->requests[i]);
	for (unsigned i = 0; u->sockets && i < u->n_workers; i++)
		if (u->sockets[i])
			free_sockets(u->sockets[i]);
	for (unsigned i = 0; u->completions && i < u->n_workers; i++)
		ring_completion_free(u->completions[i]);
	free(u->requests);
	free(u->completions);
	free(u->sockets);
	flights_free(&u->flights);
	deliver_free(&u->deliver);
	if (u->request_efd >= 0)
		close(u->request_efd);
	if (u->stop_efd >= 0)
		close(u->stop_efd);
	if (u->control_efd >= 0)
		close(u->control_efd);
	free(u->deferred);
	if (u->loop_made) /* after every context: their events were the loop's */
		loop_free(&u->loop);
	pthread_cond_destroy(&u->control_done);
	pthread_mutex_destroy(&u->control_lock);
	free(u);
}
