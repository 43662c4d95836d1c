/*
 * upstream/flight.c — the questions on their way upstream (flights), the
 * clients waiting for them (waiters), and the queue in front of libunbound.
 * Resolver thread only.
 *
 * Flights. One per (qname, qtype, qclass, DO, CD) at a time: identical
 * requests join it as waiters. The table is keyed with SipHash and a random
 * key per start, so names chosen to collide cannot pile up in one chain,
 * and its bucket array doubles with the flights (load at most 1) up to
 * MAX_FLIGHTS; past that a new question is answered at once (stale or
 * SERVFAIL) and counted as shed, never queued without bound.
 *
 * Waiters. Every waiter has upstream.timeout from its arrival, or, when the
 * cache holds a stale answer for it, cache.stale_answer_timeout (RFC 8767's
 * client response timer: a refresh that does not come back quickly must not
 * stall the client). Each kind sits in a list sorted by deadline; as each
 * timeout is the same for everyone, a new waiter goes at the tail in O(1)
 * (only after a reload shortened a timeout does it walk back past longer
 * deadlines). A waiter whose deadline passes gets a stale answer if the
 * cache has one, else SERVFAIL; its question goes on, so the answer still
 * lands in the cache.
 *
 * The queue. A slow or rate-limiting upstream must cost latency, not
 * answers. A question that cannot start on libunbound now, because the
 * context runs MAX_RESOLVING queries or because upstream.max_rate is
 * reached (pace.c), waits in the queue instead of being refused. Questions
 * start newest first: under overload the newest question's client has the
 * most time left, while the oldest ones' clients are about to be answered
 * from their deadline anyway. A full queue makes room by giving up its
 * longest-waiting question (Unbound's jostling): its clients get stale data
 * or SERVFAIL at once, and nothing about it is remembered as an upstream
 * failure. A queued question nobody waits for any more (a refresh, or one
 * whose clients all reached their deadline) leaves the queue.
 *
 * Costs: O(1) per request but for the table's doubling (O(flights), once
 * per doubling) and the once-a-second cool-down sweep (O(buckets)).
 */
#include "upstream/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dnstap/dnstap.h"
#include "log/log.h"
#include "util/client.h"
#include "util/clock.h"

#define FIRST_BUCKETS 256        /* a power of two; doubles up to MAX_FLIGHTS */
#define QUEUE_LOG_MS 60000

/* ---- the table -------------------------------------------------------------- */

int flight_table_init(struct flight_table *t)
{
	t->buckets = calloc(FIRST_BUCKETS, sizeof *t->buckets);
	t->mask = FIRST_BUCKETS - 1;
	t->count = 0;
	if (!t->buckets || getrandom(t->key, sizeof t->key, 0) != (ssize_t)sizeof t->key)
		return -1;
	return 0;
}

void flight_table_free(struct flight_table *t)
{
	free(t->buckets);
	t->buckets = NULL;
}

size_t flight_table_longest_chain(const struct flight_table *t)
{
	size_t longest = 0;

	for (size_t i = 0; t->buckets && i <= t->mask; i++) {
		size_t n = 0;
		for (const struct flight *f = t->buckets[i]; f; f = f->hnext)
			n++;
		longest = n > longest ? n : longest;
	}
	return longest;
}

uint64_t question_hash(const struct flight_table *t, const struct dns_query *q)
{
	uint8_t key[DNS_MAX_NAME + 6];
	size_t n = q->qname_len;

	memcpy(key, q->qname, n);
	key[n++] = (uint8_t)(q->qtype >> 8);
	key[n++] = (uint8_t)q->qtype;
	key[n++] = (uint8_t)(q->qclass >> 8);
	key[n++] = (uint8_t)q->qclass;
	key[n++] = q->edns_do;
	key[n++] = (q->flags & DNS_F_CD) != 0;
	return dns_siphash13(t->key, key, n);
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
	for (struct flight *f = u->flights.buckets[h & u->flights.mask]; f; f = f->hnext)
		if (f->hash == h && same_question(&f->q, q) && (!f->resolving || f->ctx == u->ctx))
			return f;
	return NULL;
}

/* Double the bucket array when flights outnumber buckets; without memory the chains grow. */
static void grow_if_crowded(struct flight_table *t)
{
	size_t n = t->mask + 1;
	struct flight **bigger;

	if (t->count <= n || n >= MAX_FLIGHTS || !(bigger = calloc(2 * n, sizeof *bigger)))
		return;
	for (size_t i = 0; i < n; i++) {
		while (t->buckets[i]) {
			struct flight *f = t->buckets[i];
			t->buckets[i] = f->hnext;
			f->hnext = bigger[f->hash & (2 * n - 1)];
			bigger[f->hash & (2 * n - 1)] = f;
		}
	}
	free(t->buckets);
	t->buckets = bigger;
	t->mask = 2 * n - 1;
}

/* NULL when the table is full or memory is short. owner: the client it counts against. */
static struct flight *new_flight(struct upstream *u, const struct upstream_request *r, uint64_t h,
				 uint16_t owner)
{
	struct flight_table *t = &u->flights;
	struct flight *f;

	if (t->count >= MAX_FLIGHTS || !(f = calloc(1, sizeof *f + r->chain_len)))
		return NULL;
	f->hash = h;
	f->q = r->q;
	memcpy(f->chain, r->chain, r->chain_len);
	f->chain_len = r->chain_len;
	f->chain_ttl = r->chain_ttl;
	f->search = r->search;
	f->u = u;
	f->owner = owner;
	if (owner != NO_CLIENT)
		u->clients[owner].flights++;
	f->hnext = t->buckets[h & t->mask];
	t->buckets[h & t->mask] = f;
	t->count++;
	atomic_store_explicit(&u->n.flights, t->count, memory_order_relaxed);
	grow_if_crowded(t);
	return f;
}

static void free_flight(struct upstream *u, struct flight *f)
{
	struct flight_table *t = &u->flights;
	struct flight **p = &t->buckets[f->hash & t->mask];

	while (*p != f)
		p = &(*p)->hnext;
	*p = f->hnext;
	if (f->owner != NO_CLIENT)
		u->clients[f->owner].flights--;
	t->count--;
	atomic_store_explicit(&u->n.flights, t->count, memory_order_relaxed);
	free(f);
}

void maybe_free_flight(struct upstream *u, struct flight *f)
{
	if (!f->waiters && !f->resolving && !f->queued && f->failed_until_ms <= u->now_ms)
		free_flight(u, f);
}

/* ---- waiters ------------------------------------------------------------------ */

/* The client slot of r's sender; NO_CLIENT for a refresh nobody waits for. */
static uint16_t client_of(const struct upstream *u, const struct upstream_request *r)
{
	uint8_t prefix[CLIENT_PREFIX_MAX];
	size_t n;

	if (r->transport == UPSTREAM_NO_REPLY || r->peer_len == 0)
		return NO_CLIENT;
	n = client_prefix(&r->peer, prefix);
	return (uint16_t)(dns_siphash13(u->client_key, prefix, n) & (CLIENT_SLOTS - 1));
}

/* Are the resolver's places getting scarce (libunbound half full, or questions waiting)? */
static bool contended(const struct upstream *u)
{
	return u->queue_head || u->ctx->outstanding >= MAX_RESOLVING / 2;
}

/*
 * Has client as many questions started, or waiting queries, as it may?
 * Questions: upstream.max_pending_per_client, and while places are scarce
 * a quarter of that (by default 250, about a quarter of a context): a
 * client may use what others leave, not take what they need. Waiters: a
 * quarter of all there may be; joining a question already asked costs only
 * a waiter, so it is limited only so that one client cannot take every
 * waiter's place.
 */
static bool client_full(const struct upstream *u, uint16_t client, bool questions)
{
	if (client == NO_CLIENT)
		return false;
	if (!questions)
		return u->clients[client].waiters >= MAX_WAITERS_PER_CLIENT;
	unsigned n = u->clients[client].flights;
	return n >= u->max_per_client || (n >= u->max_per_client / 4 + 1 && contended(u));
}

/* The client asked more than its share: an answer at once (stale or SERVFAIL), counted. */
static void limit_client(struct upstream *u, unsigned worker, const struct upstream_request *r)
{
	upstream_bump(&u->n.client_limited);
	answer_failed(u, worker, r);
}

/* Into list, after the last waiter whose deadline is no later than w's. */
static void list_insert(struct waiter_list *list, struct waiter *w)
{
	struct waiter *before = list->tail;

	while (before && before->deadline_ms > w->deadline_ms)
		before = before->fifo_prev;
	w->list = list;
	w->fifo_prev = before;
	w->fifo_next = before ? before->fifo_next : list->head;
	if (w->fifo_next)
		w->fifo_next->fifo_prev = w;
	else
		list->tail = w;
	if (before)
		before->fifo_next = w;
	else
		list->head = w;
}

static void list_remove(struct waiter *w)
{
	struct waiter_list *list = w->list;

	if (w->fifo_prev)
		w->fifo_prev->fifo_next = w->fifo_next;
	else
		list->head = w->fifo_next;
	if (w->fifo_next)
		w->fifo_next->fifo_prev = w->fifo_prev;
	else
		list->tail = w->fifo_prev;
}

/*
 * How long r's client waits: upstream.timeout, or, when the cache holds a
 * stale answer for it, RFC 8767's client response timer (the refresh goes
 * on; the stale answer goes out at the timer).
 */
static bool stale_soon(struct upstream *u, const struct upstream_request *r, uint64_t *ms)
{
	enum cache_result how;
	uint32_t timer = cache_stale_answer_ms(u->cache);

	if (timer == 0 || timer >= u->ctx->timeout_ms || !reply_from_cache(u, r, true, &how) ||
	    how != CACHE_STALE)
		return false;
	*ms = timer;
	return true;
}

/* false when the waiter cap or memory says no (the request is then dropped). */
static bool add_waiter(struct upstream *u, struct flight *f, unsigned worker,
		       const struct upstream_request *r, uint16_t client)
{
	struct waiter *w;
	uint64_t wait = u->ctx->timeout_ms;
	bool soon = stale_soon(u, r, &wait);

	if (u->n_waiters >= MAX_WAITERS ||
	    !(w = malloc(sizeof *w + upstream_request_packed_size(r)))) {
		upstream_bump(&u->n.dropped);
		return false;
	}
	upstream_request_pack(r, w->req);
	w->client = client;
	if (client != NO_CLIENT)
		u->clients[client].waiters++;
	w->worker = worker;
	w->flight = f;
	w->deadline_ms = u->now_ms + wait;
	w->prev = NULL;
	w->next = f->waiters;
	if (f->waiters)
		f->waiters->prev = w;
	f->waiters = w;
	list_insert(soon ? &u->stale_soon : &u->by_timeout, w);
	u->n_waiters++;
	return true;
}

void remove_waiter(struct upstream *u, struct waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		w->flight->waiters = w->next;
	if (w->next)
		w->next->prev = w->prev;
	list_remove(w);
	if (w->client != NO_CLIENT)
		u->clients[w->client].waiters--;
	u->n_waiters--;
	free(w);
}

const struct upstream_request *waiter_request(struct upstream *u, const struct waiter *w)
{
	upstream_request_unpack(w->req, &u->waiting);
	return &u->waiting;
}

/* ---- the queue ------------------------------------------------------------------ */

static void enqueue(struct upstream *u, struct flight *f)
{
	f->queued = true;
	f->queued_until_ms = u->now_ms + u->ctx->timeout_ms;
	f->qnext = NULL;
	f->qprev = u->queue_tail;
	if (u->queue_tail)
		u->queue_tail->qnext = f;
	else
		u->queue_head = f;
	u->queue_tail = f;
	u->n_queued++;
	atomic_store_explicit(&u->n.queued, u->n_queued, memory_order_relaxed);
}

static void dequeue(struct upstream *u, struct flight *f)
{
	if (f->qprev)
		f->qprev->qnext = f->qnext;
	else
		u->queue_head = f->qnext;
	if (f->qnext)
		f->qnext->qprev = f->qprev;
	else
		u->queue_tail = f->qprev;
	f->queued = false;
	f->qprev = f->qnext = NULL;
	u->n_queued--;
	atomic_store_explicit(&u->n.queued, u->n_queued, memory_order_relaxed);
}

/* Anyone still waiting for it, or a refresh still within its time? */
static bool worth_asking(const struct upstream *u, const struct flight *f)
{
	return f->waiters || f->queued_until_ms > u->now_ms;
}

/* Given up without asking: its clients get stale data or SERVFAIL now. */
static void shed(struct upstream *u, struct flight *f, enum upstream_shed why)
{
	upstream_bump(&u->n.shed[why]);
	while (f->waiters) {
		struct waiter *w = f->waiters;
		answer_failed(u, w->worker, waiter_request(u, w));
		remove_waiter(u, w);
	}
}

static bool start_resolving(struct upstream *u, struct flight *f);

/* Why new questions wait, said at most once a minute. */
static void log_waiting(struct upstream *u, bool for_pace)
{
	char n[24];

	if (u->now_ms < u->full_logged_ms + QUEUE_LOG_MS && u->full_logged_ms)
		return;
	u->full_logged_ms = u->now_ms;
	if (for_pace) {
		snprintf(n, sizeof n, "%llu", (unsigned long long)u->pace.rate);
		log_warn("upstream.max_rate reached: new questions wait their turn "
			 "(said at most once a minute)", "max_rate", n);
	} else {
		snprintf(n, sizeof n, "%u", u->ctx->outstanding);
		log_warn("libunbound is running all the queries it may: new questions wait "
			 "their turn (said at most once a minute)", "running", n);
	}
}

bool ask_or_queue(struct upstream *u, struct flight *f)
{
	if (!u->queue_head) {
		bool room = room_to_resolve(u);
		if (room && pace_take(&u->pace, u->now_ms))
			return start_resolving(u, f);
		if (room)
			upstream_bump(&u->n.paced);
		log_waiting(u, room);
	} else if (pace_wait_ms(&u->pace, u->now_ms) > 0) {
		upstream_bump(&u->n.paced);
	}
	if (u->n_queued >= MAX_QUEUED) {
		struct flight *oldest = u->queue_head;
		dequeue(u, oldest);
		shed(u, oldest, UPSTREAM_SHED_QUEUE_FULL);
		maybe_free_flight(u, oldest);
	}
	enqueue(u, f);
	return true;
}

void start_queued(struct upstream *u)
{
	while (u->queue_head && !worth_asking(u, u->queue_head)) {
		struct flight *f = u->queue_head;
		dequeue(u, f);
		maybe_free_flight(u, f);
	}
	while (u->queue_tail) {
		struct flight *f = u->queue_tail;
		if (!worth_asking(u, f)) {
			dequeue(u, f);
			maybe_free_flight(u, f);
			continue;
		}
		if (!room_to_resolve(u) || !pace_take(&u->pace, u->now_ms))
			return;
		dequeue(u, f);
		if (!start_resolving(u, f))
			resolution_failed(u, f, true);
		maybe_free_flight(u, f);
	}
}

uint64_t queue_wait_ms(const struct upstream *u, uint64_t cap)
{
	uint64_t wait;

	if (!u->queue_head || u->ctx->outstanding >= MAX_RESOLVING)
		return cap; /* nothing queued, or it waits for a result (ub_fd wakes us) */
	wait = pace_wait_ms(&u->pace, u->now_ms);
	return wait < cap ? wait : cap;
}

/* ---- asking libunbound -------------------------------------------------------------- */

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

static bool start_resolving(struct upstream *u, struct flight *f)
{
	char name[1024];
	int id;

	if (dns_name_to_text(name_to_resolve(f), name, sizeof name) < 0)
		return false;
	f->asked_ns = monotonic_ns();
	if (ub_resolve_async(u->ctx->ub, name, f->q.qtype, f->q.qclass, f, on_result, &id) != 0)
		return false;
	if (dnstap_resolver_on()) /* dnstap: resolver_query */
		dnstap_resolver_query(name_to_resolve(f), f->q.qtype, f->q.qclass);
	f->resolving = true;
	f->ctx = u->ctx;
	if (!f->retried && u->retry_tokens < RETRY_TOKENS_MAX)
		u->retry_tokens++;
	u->ctx->outstanding++;
	atomic_fetch_add_explicit(&u->n.resolving, 1, memory_order_relaxed);
	upstream_bump(&u->n.queries);
	return true;
}

/* A new resolution of f's question (from the first candidate, for autopath). */
static bool start_flight(struct upstream *u, struct flight *f)
{
	f->candidate = 0;
	f->retried = false;
	return ask_or_queue(u, f);
}

/* ---- requests ------------------------------------------------------------------------ */

void handle_refresh(struct upstream *u, const struct upstream_request *r)
{
	uint64_t h = question_hash(&u->flights, &r->q);
	struct flight *f = find_flight(u, &r->q, h);

	if (f && (f->resolving || f->queued || f->failed_until_ms > u->now_ms))
		return;
	if (!f && !(f = new_flight(u, r, h, NO_CLIENT))) {
		upstream_bump(&u->n.shed[UPSTREAM_SHED_TABLE_FULL]);
		return;
	}
	if (!start_flight(u, f))
		resolution_failed(u, f, true);
	maybe_free_flight(u, f);
}

void handle_client(struct upstream *u, unsigned worker, const struct upstream_request *r)
{
	uint64_t h = question_hash(&u->flights, &r->q);
	struct flight *f = find_flight(u, &r->q, h);
	uint16_t client = client_of(u, r);
	enum cache_result how;
	size_t len;

	if (f && (f->resolving || f->queued)) {
		if (client_full(u, client, false)) {
			limit_client(u, worker, r);
			return;
		}
		upstream_bump(&u->n.coalesced);
		add_waiter(u, f, worker, r, client);
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
	if (client_full(u, client, !f)) {
		limit_client(u, worker, r);
		return;
	}
	if (!f && !(f = new_flight(u, r, h, client))) {
		upstream_bump(&u->n.shed[UPSTREAM_SHED_TABLE_FULL]);
		answer_failed(u, worker, r);
		return;
	}
	if (!add_waiter(u, f, worker, r, client)) {
		maybe_free_flight(u, f);
		return;
	}
	if (!start_flight(u, f))
		resolution_failed(u, f, true);
	maybe_free_flight(u, f);
}

/* ---- time ------------------------------------------------------------------------------ */

/* w's wait is over, its answer given: it goes, and its question if nobody needs it. */
static void waiter_done(struct upstream *u, struct waiter *w)
{
	struct flight *f = w->flight;

	remove_waiter(u, w);
	if (f->queued && !worth_asking(u, f)) {
		dequeue(u, f);
		maybe_free_flight(u, f);
	}
}

void expire_waiters(struct upstream *u)
{
	/* RFC 8767's client response timer: the stale answer now, the refresh goes on.
	 * (A slow refresh says nothing of a failing upstream: no mark.) */
	while (u->stale_soon.head && u->stale_soon.head->deadline_ms <= u->now_ms) {
		struct waiter *w = u->stale_soon.head;
		answer_failed(u, w->worker, waiter_request(u, w));
		waiter_done(u, w);
	}
	while (u->by_timeout.head && u->by_timeout.head->deadline_ms <= u->now_ms) {
		struct waiter *w = u->by_timeout.head;
		struct flight *f = w->flight;
		upstream_bump(&u->n.timeouts);
		/* Only a query running on the current context says the upstream
		 * is slow; one still queued says we are. */
		if (f->resolving && f->ctx == u->ctx)
			atomic_store_explicit(&u->failing, true, memory_order_relaxed);
		answer_failed(u, w->worker, waiter_request(u, w));
		waiter_done(u, w);
	}
}

uint64_t last_deadline_ms(const struct upstream *u)
{
	uint64_t last = u->now_ms;

	if (u->by_timeout.tail && u->by_timeout.tail->deadline_ms > last)
		last = u->by_timeout.tail->deadline_ms;
	if (u->stale_soon.tail && u->stale_soon.tail->deadline_ms > last)
		last = u->stale_soon.tail->deadline_ms;
	return last;
}

bool first_deadline_ms(const struct upstream *u, uint64_t *out)
{
	const struct waiter *a = u->by_timeout.head, *b = u->stale_soon.head;

	if (!a && !b)
		return false;
	*out = !a ? b->deadline_ms : !b ? a->deadline_ms
		: a->deadline_ms < b->deadline_ms ? a->deadline_ms : b->deadline_ms;
	return true;
}

void sweep_cooled_flights(struct upstream *u)
{
	for (size_t i = 0; i <= u->flights.mask; i++) {
		struct flight *f = u->flights.buckets[i];
		while (f) {
			struct flight *next = f->hnext;
			maybe_free_flight(u, f);
			f = next;
		}
	}
}

void drop_flights_on(struct upstream *u, struct upstream_context *c)
{
	for (size_t i = 0; i <= u->flights.mask; i++) {
		struct flight *f = u->flights.buckets[i];
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

void forget_failures(struct upstream *u)
{
	atomic_store_explicit(&u->failing, false, memory_order_relaxed);
	for (size_t i = 0; i <= u->flights.mask; i++) {
		struct flight *f = u->flights.buckets[i];
		while (f) {
			struct flight *next = f->hnext;
			f->failed_until_ms = 0;
			maybe_free_flight(u, f);
			f = next;
		}
	}
}

void drop_everything(struct upstream *u)
{
	while (u->by_timeout.head)
		remove_waiter(u, u->by_timeout.head);
	while (u->stale_soon.head)
		remove_waiter(u, u->stale_soon.head);
	while (u->queue_head)
		dequeue(u, u->queue_head);
	for (size_t i = 0; u->flights.buckets && i <= u->flights.mask; i++)
		while (u->flights.buckets[i])
			free_flight(u, u->flights.buckets[i]);
}
