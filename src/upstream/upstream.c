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
 * request eventfd. The resolver thread sleeps in epoll on that eventfd,
 * libunbound's ub_fd and the stop eventfd, with a timeout set by the
 * earliest client deadline (and by upstream.max_rate while questions wait
 * for it). For each request it first looks at the cache again (a query for
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
 * joins a query still running on the old one. The old context stays in
 * the epoll set until its queries have come back, answering the clients
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
 * names were 700 MiB) and ub_cancel frees nothing in threaded mode, so a
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
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include <unbound.h>

#include "dnstap/dnstap.h"
#include "log/log.h"
#include "privs/privs.h"
#include "upstream/context.h"
#include "upstream/deliver.h"
#include "upstream/flight.h"
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

/*
 * What an epoll event is about: its data.ptr points at one of these, the
 * first member of a struct upstream_context for libunbound's descriptors.
 */
enum source { SRC_REQUESTS, SRC_STOP, SRC_CONTROL, SRC_UNBOUND };

/* A libunbound context and the queries still running on it. */
struct upstream_context {
	enum source source;          /* SRC_UNBOUND: epoll data points here */
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
	int request_efd;
	int stop_efd;
	int control_efd;             /* upstream_switch has a context waiting */
	int epfd;
	pthread_t thread;
	bool running;

	/* The hand-over of a new context (upstream_switch). */
	pthread_mutex_t control_lock;
	pthread_cond_t control_done;
	struct upstream_context *incoming; /* control_lock */
	bool accepting;              /* control_lock: the resolver thread takes them */
	atomic_bool settle_asked;    /* upstream_settle waits for settled */
	bool settled;                /* control_lock: no client was waiting after that */
	bool settle_taken;           /* resolver thread: requests taken since settle_asked */

	/* resolver thread only */
	struct upstream_context *retired; /* contexts whose queries are finishing */
	struct retired_socket *retired_sockets;
	uint64_t now_ms;
	uint64_t renewal_logged_ms;
	unsigned client_ipv6_bits;   /* listen.ipv6_client_prefix_length (restart-only) */
	_Atomic uint64_t heartbeat_ms; /* now_ms once per loop turn, for /health */
	uint32_t sockets_seen;       /* sockets_handed when the socket rings were last read */
	struct upstream_request taken; /* the request take_requests unpacked last */
	struct upstream_counters n;
	struct flights flights;      /* the questions and their clients (flight.c) */
	struct results results;      /* libunbound's results into the cache (result.c) */
	struct deliver deliver;      /* the replies (deliver.c) */
};

static const enum source requests_source = SRC_REQUESTS;
static const enum source stop_source = SRC_STOP;
static const enum source control_source = SRC_CONTROL;

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
	if (request_ring_put(u->requests[worker], r))
		return true;
	upstream_bump(&u->n.dropped);
	return false;
}

void upstream_wake(struct upstream *u)
{
	signal_fd(u->request_efd);
}

bool upstream_retire_socket(struct upstream *u, unsigned worker, int fd)
{
	if (!socket_ring_put(u->sockets[worker], fd))
		return false;
	atomic_fetch_add_explicit(&u->sockets_handed, 1, memory_order_release);
	upstream_wake(u);
	return true;
}

int upstream_completion_fd(struct upstream *u, unsigned worker)
{
	return completion_ring_fd(u->completions[worker]);
}

bool upstream_take_completion(struct upstream *u, unsigned worker,
			      struct upstream_completion *out)
{
	return completion_ring_take(u->completions[worker], out);
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
		while (socket_ring_take(u->sockets[i], &fd)) {
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

static void take_requests(struct upstream *u)
{
	struct upstream_request *r = &u->taken;
	struct retired_socket *sockets = take_sockets(u);

	drain_fd(u->request_efd);
	for (unsigned i = 0; i < u->n_workers; i++) {
		while (request_ring_take(u->requests[i], r)) {
			/* read after the request arrived: TTLs aged by an older
			 * clock could go up between two replies (see worker_read_clock) */
			u->now_ms = (uint64_t)coarse_ms();
			if (r->transport == UPSTREAM_NO_REPLY)
				flights_refresh(&u->flights, r, u->now_ms);
			else
				flights_client(&u->flights, i, r, u->now_ms);
		}
	}
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
	epoll_ctl(u->epfd, EPOLL_CTL_DEL, ub_fd(c->ub), NULL);
	upstream_discard(c); /* cancels what is outstanding; no callbacks follow */
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

static int watch(int epfd, int fd, const enum source *source);
static struct upstream_context *context_like(const struct upstream_context *model,
					     char *err, size_t errlen);

/* The same settings, a fresh context: see "Capacity" above. */
static void renew_context(struct upstream *u)
{
	struct upstream_context *clogged = u->ctx, *fresh;
	char err[CONFIG_ERR_MAX], running[16];

	fresh = context_like(clogged, err, sizeof err);
	if (!fresh || watch(u->epfd, ub_fd(fresh->ub), &fresh->source) < 0) {
		log_error("cannot renew the libunbound context", "error",
			  fresh ? strerror(errno) : err);
		upstream_discard(fresh);
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

static enum upstream_result result_kind(int err, const struct ub_result *result)
{
	if (err != 0 || !result || !result->answer_packet || result->answer_len < DNS_HEADER_LEN)
		return UPSTREAM_RESULT_ERROR;
	if (result->bogus)
		return UPSTREAM_RESULT_BOGUS;
	switch (result->rcode) {
	case DNS_R_NOERROR: return UPSTREAM_RESULT_NOERROR;
	case DNS_R_NXDOMAIN: return UPSTREAM_RESULT_NXDOMAIN;
	case DNS_R_SERVFAIL: return UPSTREAM_RESULT_SERVFAIL;
	default: return UPSTREAM_RESULT_OTHER;
	}
}

/* libunbound's callback (inside ub_process, on this thread): a flight's result. */
static void on_result(void *arg, int err, struct ub_result *result)
{
	struct flight *f = arg;
	struct upstream *u = (struct upstream *)((char *)f->table - offsetof(struct upstream, flights));
	struct upstream_context *c = context_numbered(u, f->upstream);
	struct upstream_answer a = {.kind = result_kind(err, result)};

	upstream_observe_latency(&u->n, monotonic_ns() - f->asked_ns);
	upstream_bump(&u->n.results[a.kind]);
	u->now_ms = (uint64_t)coarse_ms();
	if (c)
		c->outstanding--;
	if (result && dnstap_resolver_on()) /* dnstap: resolver_response */
		dnstap_resolver_response(result->answer_packet, (size_t)result->answer_len);
	if (a.kind != UPSTREAM_RESULT_ERROR) {
		a.msg = result->answer_packet;
		a.len = (size_t)result->answer_len;
		a.secure = result->secure;
		a.why_bogus = result->why_bogus;
	}
	result_take(&u->results, f, &a, u->now_ms);
	if (result)
		ub_resolve_free(result);
}

/* flight_io.ask: f's question to the current context. */
static bool ask_libunbound(void *env, struct flight *f)
{
	struct upstream *u = env;
	char name[1024];
	int id;

	if (dns_name_to_text(flight_name(f), name, sizeof name) < 0)
		return false;
	f->asked_ns = monotonic_ns();
	if (ub_resolve_async(u->ctx->ub, name, f->q.qtype, f->q.qclass, f, on_result, &id) != 0)
		return false;
	if (dnstap_resolver_on()) /* dnstap: resolver_query */
		dnstap_resolver_query(flight_name(f), f->q.qtype, f->q.qclass);
	u->ctx->outstanding++;
	return true;
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
 * taken after the settle was asked (the ask wakes the request eventfd, so
 * everything queued before it is in), and no client waits any more.
 */
static void report_settled(struct upstream *u, bool took_requests)
{
	if (!atomic_load_explicit(&u->settle_asked, memory_order_acquire))
		return;
	u->settle_taken = u->settle_taken || took_requests;
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

static void *resolver_main(void *arg)
{
	struct upstream *u = arg;
	struct epoll_event events[8];
	bool stop = false;

	urcu_memb_register_thread();
	while (!stop) {
		bool took_requests = false;
		int n = epoll_wait(u->epfd, events, 8, wait_ms(u));
		u->now_ms = (uint64_t)coarse_ms();
		atomic_store_explicit(&u->heartbeat_ms, u->now_ms, memory_order_relaxed);
		for (int i = 0; i < n; i++) {
			const enum source *src = events[i].data.ptr;
			switch (*src) {
			case SRC_UNBOUND:
				ub_process(((struct upstream_context *)events[i].data.ptr)->ub);
				break;
			case SRC_REQUESTS:
				take_requests(u);
				took_requests = true;
				break;
			case SRC_CONTROL:
				take_incoming(u);
				break;
			case SRC_STOP:
				stop = true;
				break;
			}
		}
		if (stop)
			break;
		u->now_ms = (uint64_t)coarse_ms();
		flights_expire(&u->flights, u->now_ms);
		if (flights_stalled(&u->flights, u->now_ms))
			renew_context(u);
		flights_start_queued(&u->flights, u->now_ms);
		close_retired_sockets(u, false);
		delete_finished_contexts(u);
		deliver_flush(&u->deliver);
		report_settled(u, took_requests);
	}
	stop_accepting(u);
	urcu_memb_unregister_thread();
	return NULL;
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

static int watch(int epfd, int fd, const enum source *source)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = (void *)source};

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

static int make_rings(struct upstream *u)
{
	u->requests = calloc(u->n_workers, sizeof *u->requests);
	u->completions = calloc(u->n_workers, sizeof *u->completions);
	u->sockets = calloc(u->n_workers, sizeof *u->sockets);
	if (!u->requests || !u->completions || !u->sockets)
		return -1;
	for (unsigned i = 0; i < u->n_workers; i++) {
		u->requests[i] = request_ring_new();
		u->completions[i] = completion_ring_new();
		u->sockets[i] = socket_ring_new();
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
	u->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (u->request_efd < 0 || u->stop_efd < 0 || u->control_efd < 0 || u->epfd < 0)
		return -1;
	if (watch(u->epfd, u->request_efd, &requests_source) < 0 ||
	    watch(u->epfd, u->stop_efd, &stop_source) < 0 ||
	    watch(u->epfd, u->control_efd, &control_source) < 0 ||
	    watch(u->epfd, ub_fd(u->ctx->ub), &u->ctx->source) < 0)
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

/* A libunbound context (threads, not a forked process, so results come back
 * through ub_fd into this thread) configured by text; it reads no file but
 * those text names. NULL with err set. */
static struct ub_ctx *ub_from_text(const char *text, char *err, size_t errlen)
{
	struct ub_ctx *ctx = ub_ctx_create();
	int rc;

	if (!ctx) {
		snprintf(err, errlen, "cannot create the libunbound context");
		return NULL;
	}
	rc = ub_ctx_async(ctx, 1);
	if (rc != 0) {
		snprintf(err, errlen, "libunbound: %s", ub_strerror(rc));
		ub_ctx_delete(ctx);
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
	c->source = SRC_UNBOUND;
	c->timeout_ms = timeout_ms;
	c->max_rate = max_rate;
	c->max_per_client = max_per_client;
	c->ub = ub_from_text(conf, err, errlen);
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
	ub_ctx_delete(c->ub);
	free(c->conf);
	free(c);
}

static void log_resolving(const struct config *cfg)
{
	log_info(cfg->upstream.recursive ? "resolving external names by recursion"
					 : "resolving external names by forwarding",
		 "dnssec", cfg->upstream.dnssec ? "validate" : "off");
}

void upstream_switch(struct upstream *u, struct upstream_context *c, const struct config *cfg)
{
	pthread_mutex_lock(&u->control_lock);
	if (!u->accepting ||
	    watch(u->epfd, ub_fd(c->ub), &c->source) < 0) {
		pthread_mutex_unlock(&u->control_lock);
		log_error("the resolver is stopping: the new upstream settings are not used");
		upstream_discard(c);
		return;
	}
	u->incoming = c;
	signal_fd(u->control_efd);
	while (u->incoming == c && u->accepting)
		pthread_cond_wait(&u->control_done, &u->control_lock);
	bool taken = u->incoming != c;
	u->incoming = NULL;
	pthread_mutex_unlock(&u->control_lock);
	if (!taken) {
		epoll_ctl(u->epfd, EPOLL_CTL_DEL, ub_fd(c->ub), NULL);
		upstream_discard(c);
		return;
	}
	log_resolving(cfg);
}

struct upstream *upstream_start(const struct config *cfg, struct cache *cache,
				unsigned n_workers, char *err, size_t errlen)
{
	struct upstream *u = calloc(1, sizeof *u);

	if (!u) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	u->cache = cache;
	u->n_workers = n_workers;
	u->request_efd = u->stop_efd = u->control_efd = u->epfd = -1;
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
	u->accepting = true;
	/* libunbound's own thread starts from this one, at its first query: same limits. */
	if (privs_thread_create(&u->thread, PRIVS_RESOLVER, "resolver", resolver_main, u, err,
				errlen) < 0) {
		u->accepting = false;
		goto fail;
	}
	u->running = true;
	log_resolving(cfg);
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
	while (!u->settled && u->accepting &&
	       pthread_cond_clockwait(&u->control_done, &u->control_lock, CLOCK_MONOTONIC,
				      &until) == 0)
		;
	pthread_mutex_unlock(&u->control_lock);
}

void upstream_stop(struct upstream *u)
{
	if (!u || !u->running)
		return;
	signal_fd(u->stop_efd);
	pthread_join(u->thread, NULL);
	u->running = false;
	upstream_discard(u->ctx); /* cancels what is outstanding; no callbacks follow */
	u->ctx = NULL;
	while (u->retired) {
		struct upstream_context *c = u->retired;
		u->retired = c->next;
		delete_context(u, c);
	}
	close_retired_sockets(u, true);
	flights_free(&u->flights); /* the clients still waiting get no reply */
}

/* Sockets handed over after the resolver stopped are closed here. */
static void free_sockets(struct socket_ring *ring)
{
	int fd;

	while (socket_ring_take(ring, &fd))
		close(fd);
	socket_ring_free(ring);
}

void upstream_free(struct upstream *u)
{
	if (!u)
		return;
	upstream_stop(u);
	upstream_discard(u->ctx);
	for (unsigned i = 0; u->requests && i < u->n_workers; i++)
		request_ring_free(u->requests[i]);
	for (unsigned i = 0; u->sockets && i < u->n_workers; i++)
		if (u->sockets[i])
			free_sockets(u->sockets[i]);
	for (unsigned i = 0; u->completions && i < u->n_workers; i++)
		completion_ring_free(u->completions[i]);
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
	if (u->epfd >= 0)
		close(u->epfd);
	pthread_cond_destroy(&u->control_done);
	pthread_mutex_destroy(&u->control_lock);
	free(u);
}
