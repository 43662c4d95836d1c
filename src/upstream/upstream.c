/*
 * upstream/upstream.c — the resolver thread: requests in, libunbound
 * queries out, answers into the cache and back to the clients.
 *
 * Flow. A worker that cannot answer from local data or the cache packs an
 * upstream_request into its ring (single producer, single consumer, see
 * ring.c: no allocation, no lock) and, once per batch, writes the shared
 * request eventfd. The resolver thread sleeps in epoll on that eventfd,
 * libunbound's ub_fd and the stop eventfd, with a timeout set by the
 * earliest client deadline. For each request it first looks at the cache
 * again (a query for the same name may have been answered since the worker
 * missed), then at the flights: at most one libunbound query per
 * (qname, qtype, qclass, DO, CD) is in flight, and later identical requests
 * wait on it. When libunbound answers, the reply goes into the cache and
 * every waiter gets it with its own ID, question case, EDNS and cookie.
 *
 * Deadlines. Every waiter has upstream.timeout from arrival. A waiter whose
 * deadline passes gets a stale answer if the cache has one (RFC 8767), else
 * SERVFAIL; the libunbound query keeps running so its answer still lands in
 * the cache. Waiters sit in one list sorted by deadline; as the timeout is
 * the same for everyone, a new waiter goes at the tail in O(1) (only after
 * a reload shortened the timeout does it walk back past longer deadlines).
 *
 * Reload. A new libunbound context is built on the reloading thread (it
 * may be slow: resolv.conf's loopback stubs are probed) and handed over
 * with a mutex-and-condition handshake: from then on every new query
 * starts on it, with the new timeout, and a new client never joins a query
 * still running on the old one. The old context stays in the epoll set
 * until its queries have come back, answering the clients that waited on
 * them (their results describe the old settings, so they stay out of the
 * cache, the failing mark and the cool-downs), or until its timeout has
 * passed once more since the switch: by then each of those clients has had
 * its answer at its deadline, and the old context is deleted with whatever
 * it still runs. The failing mark and the cool-downs belonged to the old
 * upstream and are cleared at the switch.
 *
 * Retired sockets. When a listen address is removed, each worker stops
 * reading its UDP socket and hands it here through its ring: every request
 * carrying that socket came before, so once the last waiter now queued has
 * reached its deadline (the list's tail), nobody can be answered on it any
 * more, and the resolver closes it. Closing it in the worker would let a
 * late sendto reach a reused descriptor number.
 *
 * Failures. A SERVFAIL or error from libunbound marks the upstream as
 * failing (workers then serve expired entries at once and ask for a
 * background refresh) and starts a short cool-down for that question: for
 * FAILURE_HOLD_MS, requests for it are answered from the cache's stale
 * entry or with SERVFAIL without asking again, so a dead upstream is not
 * hammered. When no entry exists at all, the SERVFAIL itself is cached for
 * the same time, so workers answer it without coming here. Any answer
 * clears the failing mark.
 *
 * Capacity. libunbound keeps every query it is given until that query
 * ends, and with a forwarder that has stopped answering that takes minutes:
 * a flood of new names then holds about 12 KB each (60,000 names were 700
 * MiB), and ub_cancel frees nothing in threaded mode. So a context runs at
 * most MAX_RESOLVING queries. A new one past that renews the context: a
 * fresh one built from the same unbound.conf text takes the new queries and
 * the clogged one is retired as after a switch (deleted with what it still
 * runs once its timeout has passed). A context is renewed at most once per
 * upstream.timeout, so at most about two contexts' worth of queries are
 * ever held; a query that finds no room even then is shed: answered like a
 * failed resolution (stale or SERVFAIL, the cool-down), at once.
 *
 * Chains. A flight may answer its question for another name: an
 * ExternalName's local CNAME chain (libunbound is asked for its last
 * target), or autopath's candidates (search), which one flight asks in
 * turn while its waiters keep their one deadline: an NXDOMAIN is cached
 * under the candidate's own question and moves to the next; the first
 * other answer is joined to a CNAME from the question; after the last
 * NXDOMAIN the waiters get the question's own local NXDOMAIN, which the
 * request carries. Either joined answer is cached under the question.
 *
 * Costs: all bookkeeping is O(1) per request (hash lookup, list links) but
 * the once-a-second cool-down sweep, which walks the flight table.
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
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "log/log.h"
#include "querylog/querylog.h"
#include "upstream/internal.h"
#include "util/clock.h"
#include "util/hash.h"

/* A burst of TCP replies must fit while the worker is busy; ring slots
 * cost memory only once used. (Request rings: ring.c.) */
#define COMPLETION_SLOTS 1024    /* per worker; a power of two */
#define MAX_WAITERS 16384        /* clients waiting at once, all workers */
#define FLIGHT_BUCKETS 4096      /* a power of two */
#define FAILURE_HOLD_MS 5000     /* cool-down after a failed resolution */
#define SERVFAIL_TTL 5           /* seconds the cache keeps a SERVFAIL */
#define NEGATIVE_MAX_TTL 3600    /* RFC 2308 section 5: cap negative answers */
#define SWEEP_MS 1000
#define RENEWAL_LOG_MS 60000
#define MAX_RESOLVING 1024       /* libunbound queries on one context (Unbound's
				    num-queries-per-thread default) */

/*
 * What an epoll event is about: its data.ptr points at one of these, the
 * first member of a struct context for libunbound's descriptors.
 */
enum source { SRC_REQUESTS, SRC_STOP, SRC_CONTROL, SRC_UNBOUND };
static const enum source requests_source = SRC_REQUESTS;
static const enum source stop_source = SRC_STOP;
static const enum source control_source = SRC_CONTROL;

struct completion_ring {
	_Alignas(64) _Atomic uint32_t head; /* next slot the worker reads */
	_Alignas(64) _Atomic uint32_t tail; /* next slot the resolver writes */
	int efd;
	bool signal_pending;                 /* resolver only: efd write owed */
	struct upstream_completion slots[COMPLETION_SLOTS];
};

/* A libunbound context and the queries still running on it. */
struct upstream_context {
	enum source source;          /* SRC_UNBOUND: epoll data points here */
	struct ub_ctx *ub;
	char *conf;                  /* its unbound.conf text, to build a fresh one */
	uint64_t timeout_ms;         /* upstream.timeout of the config it came from */
	uint64_t installed_ms;       /* when new queries started going to it */
	unsigned outstanding;        /* resolver thread only */
	uint64_t delete_by_ms;       /* retired: at the latest then */
	struct upstream_context *next; /* retired list */
};

/* A UDP socket no worker reads any more, closed once nobody can be answered on it. */
struct retired_socket {
	int fd;
	uint64_t close_at_ms;
	struct retired_socket *next;
};

struct flight;

struct waiter {
	struct waiter *prev, *next;           /* the flight's waiters */
	struct waiter *fifo_prev, *fifo_next; /* all waiters, by deadline */
	struct flight *flight;
	uint64_t deadline_ms;
	unsigned worker;
	uint8_t req[];                        /* the client's request, packed (ring.c) */
};

struct flight {
	struct flight *hnext;
	uint64_t hash;
	struct dns_query q;          /* the question (key: name, type, class, DO, CD) */
	uint16_t chain_len;
	uint32_t chain_ttl;
	bool search;                 /* chain holds autopath's candidates ... */
	uint16_t candidate;          /* ... and the one asked now starts here */
	struct waiter *waiters;
	bool resolving;              /* a libunbound query is outstanding ... */
	struct upstream_context *ctx; /* ... on this context */
	uint64_t asked_ns;           /* when it was asked (CLOCK_MONOTONIC) */
	uint64_t failed_until_ms;    /* cool-down after a failure */
	struct upstream *u;
	uint8_t chain[];             /* chain_len bytes: a local CNAME chain to chase (see upstream.h) */
};

struct counters {
	_Atomic uint64_t queries, coalesced, answers, failures, timeouts, stale,
		servfail, dropped, bogus, shed, renewals;
	_Atomic uint64_t resolving;  /* gauge: libunbound queries running, all contexts */
	_Atomic uint64_t rcode[6], rcode_other, truncated;
	_Atomic uint64_t latency[UPSTREAM_LATENCY_BUCKETS + 1]; /* per bucket, last: above all */
	_Atomic uint64_t latency_ns;
};

/* Prometheus's default buckets and two below them: a forwarder on the node
 * or in the cluster answers in well under 5 ms. */
const double upstream_latency_bounds[UPSTREAM_LATENCY_BUCKETS] = {
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

struct upstream {
	struct upstream_context *ctx; /* where new queries start */
	struct cache *cache;
	unsigned n_workers;
	struct request_ring **requests;
	struct completion_ring **completions;
	int request_efd;
	int stop_efd;
	int control_efd;             /* upstream_switch has a context waiting */
	int epfd;
	pthread_t thread;
	bool running;
	atomic_bool failing;

	/* The hand-over of a new context (upstream_switch). */
	pthread_mutex_t control_lock;
	pthread_cond_t control_done;
	struct upstream_context *incoming; /* control_lock */
	bool accepting;              /* control_lock: the resolver thread takes them */

	/* resolver thread only */
	struct upstream_context *retired; /* contexts whose queries are finishing */
	struct retired_socket *retired_sockets;
	struct flight *flights[FLIGHT_BUCKETS];
	struct waiter *fifo_head, *fifo_tail;
	unsigned n_waiters;
	uint64_t now_ms;
	uint64_t renewal_logged_ms;
	_Atomic uint64_t heartbeat_ms; /* now_ms once per loop turn, for /health */
	uint8_t buf[DNS_MAX_MESSAGE + 2];
	uint8_t compacted[DNS_MAX_MESSAGE];
	struct upstream_request taken; /* the request take_requests unpacked last */
	struct upstream_request waiting; /* the waiter's request waiter_request unpacked last */

	struct counters n;
};

static uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void bump(_Atomic uint64_t *counter)
{
	atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

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
	bump(&u->n.dropped);
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
		.shed = atomic_load(&n->shed),
		.renewals = atomic_load(&n->renewals),
		.resolving = atomic_load(&n->resolving),
		.rcode_other = atomic_load(&n->rcode_other),
		.truncated = atomic_load(&n->truncated),
	};
	for (size_t r = 0; r < 6; r++)
		out->rcode[r] = atomic_load(&n->rcode[r]);
	latency_stats(n, out);
}

uint64_t upstream_heartbeat_ms(const struct upstream *u)
{
	return atomic_load_explicit(&u->heartbeat_ms, memory_order_relaxed);
}

/* ---- replies ------------------------------------------------------------------ */

/* The workers count the replies they send; these are the resolver's,
 * counted before the client can see the reply (a scrape after it includes it). */
static void count_reply(struct upstream *u, size_t len)
{
	unsigned rcode = u->buf[3] & 0xf;

	bump(rcode < 6 ? &u->n.rcode[rcode] : &u->n.rcode_other);
	if (len > 2 && (u->buf[2] & (DNS_F_TC >> 8)))
		bump(&u->n.truncated);
}

static void deliver_tcp(struct upstream *u, unsigned worker, const struct upstream_request *r,
			size_t len)
{
	struct completion_ring *ring = u->completions[worker];
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
	uint8_t *framed;

	if (tail - head == COMPLETION_SLOTS || !(framed = malloc(len + 2))) {
		bump(&u->n.dropped);
		return;
	}
	framed[0] = (uint8_t)(len >> 8);
	framed[1] = (uint8_t)len;
	memcpy(framed + 2, u->buf, len);
	ring->slots[tail & (COMPLETION_SLOTS - 1)] = (struct upstream_completion){
		.conn = r->conn, .conn_gen = r->conn_gen, .framed = framed, .len = len + 2};
	count_reply(u, len);
	atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
	ring->signal_pending = true;
}

/* Send u->buf[0..len) to the client of r. */
static void deliver(struct upstream *u, unsigned worker, const struct upstream_request *r,
		    size_t len)
{
	if (len == 0)
		return;
	if (r->transport == UPSTREAM_UDP) {
		count_reply(u, len);
		sendto(r->fd, u->buf, len, MSG_DONTWAIT | MSG_NOSIGNAL,
		       (const struct sockaddr *)&r->peer, r->peer_len);
	} else if (r->transport == UPSTREAM_TCP) {
		deliver_tcp(u, worker, r, len);
	}
	if (r->log_reply)
		querylog_add(QUERYLOG_RESOLVER, &r->peer,
			     r->transport == UPSTREAM_TCP ? QUERY_TCP : QUERY_UDP,
			     QUERY_SOURCE_UPSTREAM, u->buf, len);
}

/* Wake each worker that got TCP completions this turn, once. */
static void signal_completions(struct upstream *u)
{
	for (unsigned i = 0; i < u->n_workers; i++) {
		struct completion_ring *ring = u->completions[i];
		if (ring->signal_pending) {
			ring->signal_pending = false;
			signal_fd(ring->efd);
		}
	}
}

static void begin_reply(struct dns_writer *w, struct upstream *u, const struct upstream_request *r)
{
	dns_response_begin(w, u->buf, r->reply_limit, &r->q, DNS_R_NOERROR);
	if (r->has_cookie)
		dns_response_set_server_cookie(w, r->cookie);
}

/*
 * Answer r from the cache into u->buf; the reply length, or 0 when the
 * cache has nothing usable (nothing is sent then).
 */
static size_t reply_from_cache(struct upstream *u, const struct upstream_request *r,
			       bool allow_stale, enum cache_result *how)
{
	struct dns_writer w;

	begin_reply(&w, u, r);
	*how = cache_replay(u->cache, &w, u->now_ms / 1000, allow_stale);
	if (*how == CACHE_MISS)
		return 0;
	return dns_response_finish(&w, r->udp_payload);
}

static size_t reply_servfail(struct upstream *u, const struct upstream_request *r)
{
	struct dns_writer w;

	begin_reply(&w, u, r);
	dns_response_set_rcode(&w, DNS_R_SERVFAIL);
	return dns_response_finish(&w, r->udp_payload);
}

/* The upstream could not help: a stale answer (RFC 8767) or SERVFAIL. */
static void answer_failed(struct upstream *u, unsigned worker, const struct upstream_request *r)
{
	enum cache_result how;
	size_t len = reply_from_cache(u, r, true, &how);

	if (len) {
		bump(how == CACHE_STALE ? &u->n.stale : &u->n.answers);
	} else {
		len = reply_servfail(u, r);
		bump(&u->n.servfail);
	}
	deliver(u, worker, r, len);
}

/* libunbound's reply for this waiter: from the cache, or as it came. */
static void answer_with(struct upstream *u, unsigned worker, const struct upstream_request *r,
			const uint8_t *msg, size_t msg_len, bool cached)
{
	struct dns_writer w;
	enum cache_result how;
	size_t len = cached ? reply_from_cache(u, r, false, &how) : 0;

	if (len == 0) {
		begin_reply(&w, u, r);
		if (!cache_write_message(&w, msg, msg_len))
			dns_response_set_rcode(&w, DNS_R_SERVFAIL);
		len = dns_response_finish(&w, r->udp_payload);
	}
	deliver(u, worker, r, len);
}

/* ---- flights and waiters -------------------------------------------------------- */

static uint64_t question_hash(const struct dns_query *q)
{
	uint64_t h = fnv1a(FNV1A_SEED, q->qname, q->qname_len);

	h = fnv1a(h, &q->qtype, sizeof q->qtype);
	h = fnv1a(h, &q->qclass, sizeof q->qclass);
	h = fnv1a_byte(h, q->edns_do);
	return fnv1a_byte(h, (q->flags & DNS_F_CD) != 0);
}

static bool same_question(const struct dns_query *a, const struct dns_query *b)
{
	return a->qtype == b->qtype && a->qclass == b->qclass && a->edns_do == b->edns_do &&
	       (a->flags & DNS_F_CD) == (b->flags & DNS_F_CD) &&
	       a->qname_len == b->qname_len && memcmp(a->qname, b->qname, a->qname_len) == 0;
}

/* The flight for q; one still running on a replaced context is not joined any more. */
static struct flight *find_flight(struct upstream *u, const struct dns_query *q, uint64_t h)
{
	for (struct flight *f = u->flights[h & (FLIGHT_BUCKETS - 1)]; f; f = f->hnext)
		if (f->hash == h && same_question(&f->q, q) && (!f->resolving || f->ctx == u->ctx))
			return f;
	return NULL;
}

static struct flight *new_flight(struct upstream *u, const struct upstream_request *r, uint64_t h)
{
	struct flight *f = calloc(1, sizeof *f + r->chain_len);

	if (!f)
		return NULL;
	f->hash = h;
	f->q = r->q;
	memcpy(f->chain, r->chain, r->chain_len);
	f->chain_len = r->chain_len;
	f->chain_ttl = r->chain_ttl;
	f->search = r->search;
	f->u = u;
	f->hnext = u->flights[h & (FLIGHT_BUCKETS - 1)];
	u->flights[h & (FLIGHT_BUCKETS - 1)] = f;
	return f;
}

static void free_flight(struct upstream *u, struct flight *f)
{
	struct flight **p = &u->flights[f->hash & (FLIGHT_BUCKETS - 1)];

	while (*p != f)
		p = &(*p)->hnext;
	*p = f->hnext;
	free(f);
}

static void add_waiter(struct upstream *u, struct flight *f, unsigned worker,
		       const struct upstream_request *r)
{
	struct waiter *w;

	if (u->n_waiters >= MAX_WAITERS ||
	    !(w = malloc(sizeof *w + upstream_request_packed_size(r)))) {
		bump(&u->n.dropped);
		return;
	}
	upstream_request_pack(r, w->req);
	w->worker = worker;
	w->flight = f;
	w->deadline_ms = u->now_ms + u->ctx->timeout_ms;
	w->prev = NULL;
	w->next = f->waiters;
	if (f->waiters)
		f->waiters->prev = w;
	f->waiters = w;
	/* After the last one with a deadline no later than ours: the tail,
	 * unless a reload has just shortened the timeout. */
	struct waiter *before = u->fifo_tail;
	while (before && before->deadline_ms > w->deadline_ms)
		before = before->fifo_prev;
	w->fifo_prev = before;
	w->fifo_next = before ? before->fifo_next : u->fifo_head;
	if (w->fifo_next)
		w->fifo_next->fifo_prev = w;
	else
		u->fifo_tail = w;
	if (before)
		before->fifo_next = w;
	else
		u->fifo_head = w;
	u->n_waiters++;
}

static void remove_waiter(struct upstream *u, struct waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		w->flight->waiters = w->next;
	if (w->next)
		w->next->prev = w->prev;
	if (w->fifo_prev)
		w->fifo_prev->fifo_next = w->fifo_next;
	else
		u->fifo_head = w->fifo_next;
	if (w->fifo_next)
		w->fifo_next->fifo_prev = w->fifo_prev;
	else
		u->fifo_tail = w->fifo_prev;
	u->n_waiters--;
	free(w);
}

/* w's request, unpacked; valid until the next call. */
static const struct upstream_request *waiter_request(struct upstream *u, const struct waiter *w)
{
	upstream_request_unpack(w->req, &u->waiting);
	return &u->waiting;
}

/* A flight with nobody waiting, nothing outstanding and no cool-down goes. */
static void maybe_free_flight(struct upstream *u, struct flight *f)
{
	if (!f->waiters && !f->resolving && f->failed_until_ms <= u->now_ms)
		free_flight(u, f);
}

/* ---- results ------------------------------------------------------------------------ */

/* A SERVFAIL reply to f's question, for the cache (header + question only). */
static size_t servfail_message(const struct flight *f, uint8_t *out, size_t cap)
{
	struct dns_query q = f->q;
	struct dns_writer w;

	q.has_edns = false; /* no OPT: the cache keeps none */
	q.cookie_len = 0;
	dns_response_begin(&w, out, cap, &q, DNS_R_SERVFAIL);
	return dns_response_finish(&w, 0);
}

/* Is there any entry, live or stale, for f's question? */
static bool cache_has_entry(struct upstream *u, const struct flight *f)
{
	struct dns_writer w;

	dns_response_begin(&w, u->buf, DNS_MAX_MESSAGE, &f->q, DNS_R_NOERROR);
	return cache_replay(u->cache, &w, u->now_ms / 1000, true) != CACHE_MISS;
}

/*
 * The resolution_* functions answer f's waiters. remember: the result came
 * from the current context, so it also goes into the cache, the failing
 * mark and the cool-down; a replaced context's results answer their own
 * waiters only (they describe the old upstream settings).
 */
static void resolution_failed(struct upstream *u, struct flight *f, bool remember)
{
	uint8_t msg[DNS_HEADER_LEN + DNS_MAX_NAME + 4];

	bump(&u->n.failures);
	if (remember) {
		atomic_store_explicit(&u->failing, true, memory_order_relaxed);
		f->failed_until_ms = u->now_ms + FAILURE_HOLD_MS;
		if (!cache_has_entry(u, f))
			cache_insert(u->cache, &f->q, msg, servfail_message(f, msg, sizeof msg),
				     u->now_ms / 1000);
	}
	while (f->waiters) {
		struct waiter *w = f->waiters;
		answer_failed(u, w->worker, waiter_request(u, w));
		remove_waiter(u, w);
	}
}

static bool start_resolving(struct upstream *u, struct flight *f);

/* Autopath found no candidate: q's own local answer, NXDOMAIN with the zone's SOA. */
static size_t reply_nxdomain(struct upstream *u, const struct upstream_request *r)
{
	const uint16_t counts[3] = {0, r->nxdomain_len ? 1 : 0, 0};
	struct dns_writer w;

	begin_reply(&w, u, r);
	if (r->nxdomain_len)
		dns_response_append_raw(&w, r->nxdomain, r->nxdomain_len, counts);
	dns_response_set_rcode(&w, DNS_R_NXDOMAIN);
	dns_response_set_aa(&w, true);
	return dns_response_finish(&w, r->udp_payload);
}

/*
 * Autopath: the candidate asked does not exist. That goes into the cache
 * under its own question (workers skip it next time), and the next one is
 * asked; after the last, every waiter gets q's local NXDOMAIN.
 */
static void candidate_missing(struct upstream *u, struct flight *f, const uint8_t *msg,
			      size_t len, bool remember)
{
	const uint8_t *name = f->chain + f->candidate;
	struct dns_query candidate = f->q;
	size_t n;

	dns_query_set_name(&candidate, name);
	n = dns_message_compact(msg, len, &candidate, !candidate.edns_do, u->compacted,
				sizeof u->compacted);
	if (n > 0 && remember)
		cache_insert(u->cache, &candidate, u->compacted, n, u->now_ms / 1000);
	f->candidate += (uint16_t)dns_name_len(name);
	if (f->candidate < f->chain_len) {
		/* the next candidate is asked on the current context */
		if (!start_resolving(u, f))
			resolution_failed(u, f, true);
		return;
	}
	while (f->waiters) {
		struct waiter *w = f->waiters;
		const struct upstream_request *r = waiter_request(u, w);
		deliver(u, w->worker, r, reply_nxdomain(u, r));
		remove_waiter(u, w);
	}
}

static void resolution_answered(struct upstream *u, struct flight *f, uint8_t *msg,
				size_t len, bool secure, bool remember)
{
	/* what q's answer starts with: the local CNAME chain, or autopath's one CNAME */
	const uint8_t *chain = f->search ? f->chain + f->candidate : f->chain;
	size_t chain_len = f->search ? dns_name_len(chain) : f->chain_len;
	bool cached = false;

	bump(&u->n.answers);
	if (remember) {
		atomic_store_explicit(&u->failing, false, memory_order_relaxed);
		f->failed_until_ms = 0;
	}
	/* Our AD is libunbound's verdict, not whatever the forwarder said. */
	if (len > 3) {
		msg[3] &= (uint8_t)~DNS_F_AD;
		if (secure)
			msg[3] |= (uint8_t)DNS_F_AD;
	}
	if (f->search && (msg[3] & 0xf) == DNS_R_NXDOMAIN) {
		candidate_missing(u, f, msg, len, remember);
		return;
	}
	/* libunbound always asks with DO, so a DO=0 client's copy loses the
	 * DNSSEC records; and libunbound writes owner names out in full. A
	 * message we cannot rewrite is stored as it came (or refused by the
	 * cache). */
	size_t n = chain_len
		? dns_message_chase(msg, len, &f->q, chain, chain_len, f->chain_ttl,
				    !f->q.edns_do, u->compacted, sizeof u->compacted)
		: dns_message_compact(msg, len, &f->q, !f->q.edns_do, u->compacted,
				      sizeof u->compacted);
	if (chain_len && n == 0) {
		resolution_failed(u, f, remember); /* the chain's end cannot be joined to it */
		return;
	}
	if (n > 0) {
		msg = u->compacted;
		len = n;
	}
	if (remember)
		cached = cache_insert(u->cache, &f->q, msg, len, u->now_ms / 1000) == 0;
	while (f->waiters) {
		struct waiter *w = f->waiters;
		answer_with(u, w->worker, waiter_request(u, w), msg, len, cached);
		remove_waiter(u, w);
	}
}

static void resolution_bogus(struct upstream *u, struct flight *f, const char *why,
			     bool remember)
{
	uint8_t msg[DNS_HEADER_LEN + DNS_MAX_NAME + 4];
	char name[1024];

	bump(&u->n.bogus);
	if (log_enabled(LOG_DEBUG) && dns_name_to_text(f->q.qname, name, sizeof name) > 0)
		log_debug("DNSSEC validation failed", "name", name, "why", why ? why : "");
	/* RFC 4035 5.5: bogus data is not given out; remember the verdict briefly. */
	if (remember)
		cache_insert(u->cache, &f->q, msg, servfail_message(f, msg, sizeof msg),
			     u->now_ms / 1000);
	while (f->waiters) {
		struct waiter *w = f->waiters;
		const struct upstream_request *r = waiter_request(u, w);
		deliver(u, w->worker, r, reply_servfail(u, r));
		bump(&u->n.servfail);
		remove_waiter(u, w);
	}
}

static void observe_latency(struct upstream *u, uint64_t took_ns)
{
	double seconds = (double)took_ns / 1e9;
	size_t i = 0;

	while (i < UPSTREAM_LATENCY_BUCKETS && seconds > upstream_latency_bounds[i])
		i++;
	bump(&u->n.latency[i]);
	atomic_fetch_add_explicit(&u->n.latency_ns, took_ns, memory_order_relaxed);
}

/* f's libunbound query is over: answered, or dropped with its context. */
static void stop_counting(struct upstream *u, struct flight *f)
{
	f->resolving = false;
	f->ctx->outstanding--;
	f->ctx = NULL;
	atomic_fetch_sub_explicit(&u->n.resolving, 1, memory_order_relaxed);
}

static void on_result(void *arg, int err, struct ub_result *result)
{
	struct flight *f = arg;
	struct upstream *u = f->u;
	bool current = f->ctx == u->ctx;

	observe_latency(u, monotonic_ns() - f->asked_ns);
	stop_counting(u, f);
	u->now_ms = (uint64_t)coarse_ms();
	if (err != 0 || !result || !result->answer_packet || result->answer_len < DNS_HEADER_LEN)
		resolution_failed(u, f, current);
	else if (result->bogus)
		resolution_bogus(u, f, result->why_bogus, current);
	else if (result->rcode == DNS_R_SERVFAIL)
		resolution_failed(u, f, current);
	else
		resolution_answered(u, f, result->answer_packet, (size_t)result->answer_len,
				    result->secure, current);
	if (result)
		ub_resolve_free(result);
	maybe_free_flight(u, f);
}

/* What libunbound is asked: the question, the end of its local CNAME chain,
 * or autopath's current candidate. */
static const uint8_t *name_to_resolve(const struct flight *f)
{
	const uint8_t *name = f->q.qname;

	if (f->search)
		return f->chain + f->candidate;
	for (size_t pos = 0; pos < f->chain_len; pos += dns_name_len(f->chain + pos))
		name = f->chain + pos;
	return name;
}

static bool renew_context(struct upstream *u);

static bool room_to_resolve(struct upstream *u)
{
	if (u->ctx->outstanding < MAX_RESOLVING || renew_context(u))
		return true;
	bump(&u->n.shed);
	return false;
}

static bool start_resolving(struct upstream *u, struct flight *f)
{
	char name[1024];
	int id;

	if (dns_name_to_text(name_to_resolve(f), name, sizeof name) < 0 || !room_to_resolve(u))
		return false;
	f->asked_ns = monotonic_ns();
	if (ub_resolve_async(u->ctx->ub, name, f->q.qtype, f->q.qclass, f, on_result, &id) != 0)
		return false;
	f->resolving = true;
	f->ctx = u->ctx;
	u->ctx->outstanding++;
	atomic_fetch_add_explicit(&u->n.resolving, 1, memory_order_relaxed);
	bump(&u->n.queries);
	return true;
}

/* A new resolution of f's question (from the first candidate, for autopath). */
static bool start_flight(struct upstream *u, struct flight *f)
{
	f->candidate = 0;
	return start_resolving(u, f);
}

/* A background refresh: one query if none is running or cooling down. */
static void handle_refresh(struct upstream *u, const struct upstream_request *r, uint64_t h)
{
	struct flight *f = find_flight(u, &r->q, h);

	if (f && (f->resolving || f->failed_until_ms > u->now_ms))
		return;
	if (!f && !(f = new_flight(u, r, h)))
		return;
	if (!start_flight(u, f))
		resolution_failed(u, f, true);
	maybe_free_flight(u, f);
}

static void handle_client(struct upstream *u, unsigned worker, const struct upstream_request *r,
			  uint64_t h)
{
	struct flight *f = find_flight(u, &r->q, h);
	enum cache_result how;
	size_t len;

	if (f && f->resolving) {
		bump(&u->n.coalesced);
		add_waiter(u, f, worker, r);
		return;
	}
	/* Answered since the worker looked? */
	if ((len = reply_from_cache(u, r, false, &how)) > 0) {
		deliver(u, worker, r, len);
		return;
	}
	if (f && f->failed_until_ms > u->now_ms) {
		answer_failed(u, worker, r);
		return;
	}
	if (!f && !(f = new_flight(u, r, h))) {
		bump(&u->n.dropped);
		return;
	}
	add_waiter(u, f, worker, r);
	if (!start_flight(u, f))
		resolution_failed(u, f, true);
	maybe_free_flight(u, f);
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
	rs->close_at_ms = u->fifo_tail ? u->fifo_tail->deadline_ms : u->now_ms;
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
				handle_refresh(u, r, question_hash(&r->q));
			else
				handle_client(u, i, r, question_hash(&r->q));
		}
	}
}

/* Clients whose deadline passed get stale or SERVFAIL now. */
static void expire_waiters(struct upstream *u)
{
	while (u->fifo_head && u->fifo_head->deadline_ms <= u->now_ms) {
		struct waiter *w = u->fifo_head;
		bump(&u->n.timeouts);
		/* A query still running on a replaced context says nothing of the current one. */
		if (!w->flight->resolving || w->flight->ctx == u->ctx)
			atomic_store_explicit(&u->failing, true, memory_order_relaxed);
		answer_failed(u, w->worker, waiter_request(u, w));
		remove_waiter(u, w);
	}
}

static void sweep_cooled_flights(struct upstream *u)
{
	for (size_t i = 0; i < FLIGHT_BUCKETS; i++) {
		struct flight *f = u->flights[i];
		while (f) {
			struct flight *next = f->hnext;
			maybe_free_flight(u, f);
			f = next;
		}
	}
}

static int wait_ms(const struct upstream *u)
{
	uint64_t wait = SWEEP_MS;

	if (u->fifo_head)
		wait = u->fifo_head->deadline_ms > u->now_ms ? u->fifo_head->deadline_ms - u->now_ms : 0;
	return wait > SWEEP_MS ? SWEEP_MS : (int)wait;
}

/* ---- contexts ------------------------------------------------------------------------ */

static void delete_context(struct upstream *u, struct upstream_context *c)
{
	epoll_ctl(u->epfd, EPOLL_CTL_DEL, ub_fd(c->ub), NULL);
	upstream_discard(c); /* cancels what is outstanding; no callbacks follow */
}

/*
 * c is about to be deleted with queries still running: their flights go.
 * Nobody waits on them any more: only clients from before the switch
 * joined them (find_flight), and their deadlines, at most c's timeout
 * after the switch, have passed (expire_waiters runs first).
 */
static void drop_flights_on(struct upstream *u, struct upstream_context *c)
{
	for (size_t i = 0; i < FLIGHT_BUCKETS; i++) {
		struct flight *f = u->flights[i];
		while (f) {
			struct flight *next = f->hnext;
			if (f->resolving && f->ctx == c) {
				stop_counting(u, f);
				maybe_free_flight(u, f);
			}
			f = next;
		}
	}
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

/* The failing mark and the cool-downs were about the old upstream. */
static void forget_failures(struct upstream *u)
{
	atomic_store_explicit(&u->failing, false, memory_order_relaxed);
	for (size_t i = 0; i < FLIGHT_BUCKETS; i++) {
		struct flight *f = u->flights[i];
		while (f) {
			struct flight *next = f->hnext;
			f->failed_until_ms = 0;
			maybe_free_flight(u, f);
			f = next;
		}
	}
}

/* New queries start on c from now on; the current one finishes what it runs. */
static void replace_context(struct upstream *u, struct upstream_context *c)
{
	struct upstream_context *old = u->ctx;

	u->ctx = c;
	c->installed_ms = u->now_ms;
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

	replace_context(u, c);
	forget_failures(u);
	if (resolves_differently)
		cache_make_all_stale(u->cache, u->now_ms / 1000);
}

static int watch(int epfd, int fd, const enum source *source);
static struct upstream_context *context_from_text(const char *conf, uint64_t timeout_ms,
						  char *err, size_t errlen);

/* The same settings, a fresh context: see "Capacity" above. */
static bool renew_context(struct upstream *u)
{
	struct upstream_context *clogged = u->ctx, *fresh;
	char err[CONFIG_ERR_MAX], running[16];

	if (u->now_ms < clogged->installed_ms + clogged->timeout_ms)
		return false;
	fresh = context_from_text(clogged->conf, clogged->timeout_ms, err, sizeof err);
	if (!fresh || watch(u->epfd, ub_fd(fresh->ub), &fresh->source) < 0) {
		log_error("cannot renew the libunbound context", "error",
			  fresh ? strerror(errno) : err);
		upstream_discard(fresh);
		return false;
	}
	replace_context(u, fresh);
	bump(&u->n.renewals);
	if (u->now_ms >= u->renewal_logged_ms + RENEWAL_LOG_MS) {
		u->renewal_logged_ms = u->now_ms;
		snprintf(running, sizeof running, "%u", clogged->outstanding);
		log_warn("libunbound has too many queries running (is the upstream answering?): "
			 "new ones go to a fresh context, the old one is dropped after "
			 "upstream.timeout (said at most once a minute)", "running", running);
	}
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
		close_retired_sockets(u, false);
		delete_finished_contexts(u);
		if (u->now_ms - last_sweep >= SWEEP_MS) {
			sweep_cooled_flights(u);
			last_sweep = u->now_ms;
		}
		signal_completions(u);
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

/* A context of conf (copied). NULL with err set. */
static struct upstream_context *context_from_text(const char *conf, uint64_t timeout_ms,
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
	c->ub = upstream_context_from_text(conf, err, errlen);
	if (!c->ub) {
		free(c->conf);
		free(c);
		return NULL;
	}
	return c;
}

struct upstream_context *upstream_prepare(const struct config *cfg, char *err, size_t errlen)
{
	char *conf = upstream_conf_text(cfg, err, errlen);
	struct upstream_context *c;

	if (!conf)
		return NULL;
	c = context_from_text(conf, cfg->upstream.timeout_ms, err, errlen);
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
	int rc;

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
	u->ctx->installed_ms = (uint64_t)coarse_ms();
	if (make_rings(u) < 0 || make_loop(u) < 0) {
		snprintf(err, errlen, "cannot set up the resolver: %s", strerror(errno));
		goto fail;
	}
	atomic_init(&u->heartbeat_ms, (uint64_t)coarse_ms()); /* alive before it is scheduled */
	u->accepting = true;
	rc = pthread_create(&u->thread, NULL, resolver_main, u);
	if (rc != 0) {
		u->accepting = false;
		snprintf(err, errlen, "cannot start the resolver thread: %s", strerror(rc));
		goto fail;
	}
	pthread_setname_np(u->thread, "resolver");
	u->running = true;
	log_resolving(cfg);
	return u;
fail:
	upstream_free(u);
	return NULL;
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
	while (u->fifo_head)
		remove_waiter(u, u->fifo_head);
	for (size_t i = 0; i < FLIGHT_BUCKETS; i++)
		while (u->flights[i])
			free_flight(u, u->flights[i]);
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
