/*
 * upstream/upstream.c — the resolver thread: requests in, libunbound
 * queries out, answers into the cache and back to the clients. This file
 * has the loop, the contexts and the life cycle; the questions and their
 * waiters are flight.c, libunbound's results result.c, the replies
 * deliver.c, the request rings ring.c.
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
 * reading its UDP socket and hands it here through its ring: every request
 * carrying that socket came before, so once the last waiter now queued has
 * reached its deadline (the list's tail), nobody can be answered on it any
 * more, and the resolver closes it. Closing it in the worker would let a
 * late sendto reach a reused descriptor number.
 *
 * Capacity. A context runs at most MAX_RESOLVING queries (Unbound's
 * num-queries-per-thread); more wait in flight.c's queue, so a slow or
 * rate-limiting upstream costs latency, not answers, and the context keeps
 * what libunbound has learned about the servers (round-trip times, which
 * need TCP, EDNS). One case needs more: libunbound keeps a query to a
 * forwarder that has stopped answering for minutes (about 12 KB each; 60,000
 * names were 700 MiB) and ub_cancel frees nothing in threaded mode, so a
 * full context from which nothing has come back for its whole timeout is
 * renewed: a fresh one built from the same unbound.conf text takes the new
 * queries and the silent one is retired as after a switch. Silence means
 * there was nothing worth keeping; at most one renewal per timeout, so at
 * most about two contexts' worth of queries are ever held.
 */
#include "upstream/upstream.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "log/log.h"
#include "privs/privs.h"
#include "upstream/internal.h"
#include "util/clock.h"

#define NEGATIVE_MAX_TTL 3600    /* RFC 2308 section 5: cap negative answers */
#define SWEEP_MS 1000
#define TURN_MS 500              /* the longest sleep: idle, it still turns twice a second */
#define RENEWAL_LOG_MS 60000

const char *const upstream_shed_names[UPSTREAM_SHEDS] = {"queue_full", "table_full"};

static const enum source requests_source = SRC_REQUESTS;
static const enum source stop_source = SRC_STOP;
static const enum source control_source = SRC_CONTROL;

/* Prometheus's default buckets and two below them: a forwarder on the node
 * or in the cluster answers in well under 5 ms. */
const double upstream_latency_bounds[UPSTREAM_LATENCY_BUCKETS] = {
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

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
	struct upstream_request r = {.transport = UPSTREAM_RETIRED_SOCKET, .fd = fd};

	if (!upstream_submit(u, worker, &r))
		return false;
	upstream_wake(u);
	return true;
}

int upstream_completion_fd(struct upstream *u, unsigned worker)
{
	return u->completions[worker]->efd;
}

bool upstream_take_completion(struct upstream *u, unsigned worker,
			      struct upstream_completion *out)
{
	struct completion_ring *ring = u->completions[worker];
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);

	if (head == tail) {
		drain_fd(ring->efd);
		/* a completion may have landed between the check and the read */
		tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
		if (head == tail)
			return false;
	}
	*out = ring->slots[head & (COMPLETION_SLOTS - 1)];
	atomic_store_explicit(&ring->head, head + 1, memory_order_release);
	return true;
}

bool upstream_failing(const struct upstream *u)
{
	return atomic_load_explicit(&u->failing, memory_order_relaxed);
}

/* Cumulative counts from the per-bucket ones; the total is their sum, so
 * the +Inf bucket always equals the count. */
static void latency_stats(const struct counters *n, struct upstream_stats *out)
{
	uint64_t below = 0;

	for (size_t i = 0; i < UPSTREAM_LATENCY_BUCKETS; i++) {
		below += atomic_load_explicit(&n->latency[i], memory_order_relaxed);
		out->latency_le[i] = below;
	}
	out->latency_count =
		below + atomic_load_explicit(&n->latency[UPSTREAM_LATENCY_BUCKETS], memory_order_relaxed);
	out->latency_sum = (double)atomic_load_explicit(&n->latency_ns, memory_order_relaxed) / 1e9;
}

void upstream_stats(const struct upstream *u, struct upstream_stats *out)
{
	const struct counters *n = &u->n;

	*out = (struct upstream_stats){
		.queries = atomic_load(&n->queries),
		.coalesced = atomic_load(&n->coalesced),
		.answers = atomic_load(&n->answers),
		.failures = atomic_load(&n->failures),
		.timeouts = atomic_load(&n->timeouts),
		.stale = atomic_load(&n->stale),
		.servfail = atomic_load(&n->servfail),
		.dropped = atomic_load(&n->dropped),
		.bogus = atomic_load(&n->bogus),
		.renewals = atomic_load(&n->renewals),
		.paced = atomic_load(&n->paced),
		.retries = atomic_load(&n->retries),
		.client_limited = atomic_load(&n->client_limited),
		.rrl_slipped = atomic_load(&n->rrl_slipped),
		.rrl_dropped = atomic_load(&n->rrl_dropped),
		.resolving = atomic_load(&n->resolving),
		.queued = atomic_load(&n->queued),
		.flights = atomic_load(&n->flights),
		.truncated = atomic_load(&n->truncated),
	};
	for (size_t r = 0; r < DNS_RCODE_SLOTS; r++)
		out->rcode[r] = atomic_load(&n->rcode[r]);
	for (size_t i = 0; i < UPSTREAM_SHEDS; i++)
		out->shed[i] = atomic_load(&n->shed[i]);
	for (size_t i = 0; i < UPSTREAM_RESULTS; i++)
		out->results[i] = atomic_load(&n->results[i]);
	latency_stats(n, out);
}

uint64_t upstream_heartbeat_ms(const struct upstream *u)
{
	return atomic_load_explicit(&u->heartbeat_ms, memory_order_relaxed);
}

/* Every request carrying fd came before this one: close it once their waiters are gone. */
static void retire_socket(struct upstream *u, int fd)
{
	struct retired_socket *rs = malloc(sizeof *rs);

	if (!rs) {
		/* Waiting on is then impossible: better a reply lost than the descriptor leaked. */
		close(fd);
		return;
	}
	rs->fd = fd;
	rs->close_at_ms = last_deadline_ms(u);
	rs->next = u->retired_sockets;
	u->retired_sockets = rs;
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

	drain_fd(u->request_efd);
	for (unsigned i = 0; i < u->n_workers; i++) {
		while (request_ring_take(u->requests[i], r)) {
			/* read after the request arrived: TTLs aged by an older
			 * clock could go up between two replies (see worker_read_clock) */
			u->now_ms = (uint64_t)coarse_ms();
			if (r->transport == UPSTREAM_RETIRED_SOCKET)
				retire_socket(u, r->fd);
			else if (r->transport == UPSTREAM_NO_REPLY)
				handle_refresh(u, r);
			else
				handle_client(u, i, r);
		}
	}
}

static int wait_ms(const struct upstream *u)
{
	uint64_t wait = queue_wait_ms(u, TURN_MS);

	uint64_t first;

	if (first_deadline_ms(u, &first)) {
		uint64_t deadline = first > u->now_ms ? first - u->now_ms : 0;
		wait = deadline < wait ? deadline : wait;
	}
	return (int)wait;
}

/* ---- contexts ------------------------------------------------------------------------ */

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
			drop_flights_on(u, c);
		*p = c->next;
		delete_context(u, c);
	}
}

/* New queries start on c from now on; the current one finishes what it runs. */
static void replace_context(struct upstream *u, struct upstream_context *c)
{
	struct upstream_context *old = u->ctx;

	u->ctx = c;
	c->installed_ms = c->last_result_ms = u->now_ms;
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

	if (c->max_rate != u->ctx->max_rate)
		pace_init(&u->pace, c->max_rate, u->now_ms);
	u->max_per_client = c->max_per_client;
	replace_context(u, c);
	forget_failures(u);
	if (resolves_differently)
		cache_make_all_stale(u->cache, u->now_ms / 1000);
}

static int watch(int epfd, int fd, const enum source *source);
static struct upstream_context *context_like(const struct upstream_context *model,
					     char *err, size_t errlen);

/* Full, and nothing has come back from it for its whole timeout. */
static bool silent(const struct upstream_context *c, uint64_t now_ms)
{
	return now_ms >= c->last_result_ms + c->timeout_ms;
}

/* The same settings, a fresh context: see "Capacity" above. */
static bool renew_context(struct upstream *u)
{
	struct upstream_context *clogged = u->ctx, *fresh;
	char err[CONFIG_ERR_MAX], running[16];

	fresh = context_like(clogged, err, sizeof err);
	if (!fresh || watch(u->epfd, ub_fd(fresh->ub), &fresh->source) < 0) {
		log_error("cannot renew the libunbound context", "error",
			  fresh ? strerror(errno) : err);
		upstream_discard(fresh);
		return false;
	}
	replace_context(u, fresh);
	upstream_bump(&u->n.renewals);
	if (u->now_ms >= u->renewal_logged_ms + RENEWAL_LOG_MS) {
		u->renewal_logged_ms = u->now_ms;
		snprintf(running, sizeof running, "%u", clogged->outstanding);
		log_warn("libunbound has too many queries running and none came back for "
			 "upstream.timeout (is the upstream answering?): new ones go to a fresh "
			 "context, the old one is dropped after upstream.timeout (said at most "
			 "once a minute)", "running", running);
	}
	return true;
}

bool room_to_resolve(struct upstream *u)
{
	return u->ctx->outstanding < MAX_RESOLVING ||
	       (silent(u->ctx, u->now_ms) && renew_context(u));
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
	if (!u->settle_taken || u->n_waiters > 0)
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
	uint64_t last_sweep = (uint64_t)coarse_ms();
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
		expire_waiters(u);
		start_queued(u);
		close_retired_sockets(u, false);
		delete_finished_contexts(u);
		if (u->now_ms - last_sweep >= SWEEP_MS) {
			sweep_cooled_flights(u);
			last_sweep = u->now_ms;
		}
		signal_completions(u);
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
	if (!u->requests || !u->completions)
		return -1;
	for (unsigned i = 0; i < u->n_workers; i++) {
		struct request_ring *requests = request_ring_new();
		struct completion_ring *completions = aligned_alloc(64, sizeof *completions);
		if (completions) {
			/* slots are written before they are read: not cleared, so a
			 * worker that never sees a TCP miss never touches them */
			atomic_init(&completions->head, 0);
			atomic_init(&completions->tail, 0);
			completions->signal_pending = false;
			completions->efd = -1;
		}
		u->requests[i] = requests;
		u->completions[i] = completions;
		if (!requests || !completions)
			return -1;
		completions->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (completions->efd < 0)
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
	c->ub = upstream_context_from_text(conf, err, errlen);
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

struct upstream_context *upstream_prepare(const struct config *cfg, char *err, size_t errlen)
{
	char *conf = upstream_conf_text(cfg, err, errlen);
	struct upstream_context *c;

	if (!conf)
		return NULL;
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
	u->now_ms = u->ctx->installed_ms = u->ctx->last_result_ms = (uint64_t)coarse_ms();
	pace_init(&u->pace, u->ctx->max_rate, u->now_ms);
	u->max_per_client = u->ctx->max_per_client;
	u->client_ipv6_bits = cfg->listen.ipv6_client_prefix_length;
	u->retry_tokens = RETRY_TOKENS_MAX;
	if (flight_table_init(&u->flights) < 0 ||
	    getrandom(u->client_key, sizeof u->client_key, 0) != (ssize_t)sizeof u->client_key) {
		snprintf(err, errlen, "cannot set up the resolver: out of memory or randomness");
		goto fail;
	}
	if (make_rings(u) < 0 || make_loop(u) < 0) {
		snprintf(err, errlen, "cannot set up the resolver: %s", strerror(errno));
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
	drop_everything(u);
}

static void free_completions(struct completion_ring *ring)
{
	uint32_t head = atomic_load(&ring->head), tail = atomic_load(&ring->tail);

	for (; head != tail; head++)
		free(ring->slots[head & (COMPLETION_SLOTS - 1)].framed);
	if (ring->efd >= 0)
		close(ring->efd);
	free(ring);
}

/* Sockets handed over after the resolver stopped are closed here. */
static void free_requests(struct upstream *u, struct request_ring *ring)
{
	while (request_ring_take(ring, &u->taken))
		if (u->taken.transport == UPSTREAM_RETIRED_SOCKET)
			close(u->taken.fd);
	request_ring_free(ring);
}

void upstream_free(struct upstream *u)
{
	if (!u)
		return;
	upstream_stop(u);
	upstream_discard(u->ctx);
	for (unsigned i = 0; u->requests && i < u->n_workers; i++)
		if (u->requests[i])
			free_requests(u, u->requests[i]);
	for (unsigned i = 0; u->completions && i < u->n_workers; i++)
		if (u->completions[i])
			free_completions(u->completions[i]);
	free(u->requests);
	free(u->completions);
	flight_table_free(&u->flights);
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
