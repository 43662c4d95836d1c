/*
 * upstream/flight.c — the questions on their way upstream (flights), the
 * clients waiting for them (waiters), and the queue in front of the
 * upstream. Pure logic (flight.h): the time comes in as an argument, the
 * questions go out through io.ask and the answers through io.reply.
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
 * answers. A question that cannot be asked now, because the upstream has
 * max_asked questions already or because upstream.max_rate is reached
 * (pace.c), waits in the queue instead of being refused. Questions start
 * newest first: under overload the newest question's client has the most
 * time left, while the oldest ones' clients are about to be answered from
 * their deadline anyway. A full queue makes room by giving up its
 * longest-waiting question (Unbound's jostling): its clients get stale data
 * or SERVFAIL at once, and nothing about it is remembered as an upstream
 * failure. A queued question nobody waits for any more (a refresh, or one
 * whose clients all reached their deadline) leaves the queue.
 *
 * Failures. A failure on the upstream asked now marks it failing (workers
 * then serve expired entries at once and ask for a background refresh).
 * When the cache has nothing for the question, the SERVFAIL itself is
 * cached for the cache's SERVFAIL time, so workers answer it without
 * coming here and the flight goes at once: a flood of new names at a
 * failing upstream does not pile up flights. When a stale entry exists,
 * the flight stays for a cool-down of FAILURE_HOLD_MS instead, during
 * which refreshes of it are not sent, so a dead upstream is not hammered.
 * A failure is asked once more while clients still wait for it, within a
 * budget of a tenth of the questions asked (retried_once). Any answer
 * clears the failing mark.
 *
 * Upstreams. Questions are asked on the upstream of the moment; a reload
 * (or a fresh one for a full, silent one) brings another
 * (flights_new_upstream). A question still running on the one before is
 * not joined by new clients, does not count against the new one's room,
 * and its result answers its own waiters only: the cache, the failing
 * mark and the cool-downs are about the new upstream.
 *
 * Shares. Outside input decides how much of the table one client takes, so
 * each client (an IPv4 address, an IPv6 address cut to listen.ipv6_client_prefix_length; UDP sources can be forged)
 * has a share: of questions started (upstream.max_pending_per_client, a
 * quarter of it while places are scarce), its hits' background refreshes
 * counting as its own; and of queries joining questions already asked
 * (MAX_WAITERS_PER_CLIENT, a sixteenth of the waiters' places). Past a
 * share a request is answered at once (stale or SERVFAIL) and a refresh
 * is not sent. Refreshes together hold at most a quarter of the upstream's
 * places. Should the waiters' table fill all the same (sixteen sources),
 * a newcomer is never the one turned away: a client holding the most
 * waiters gives up its oldest, which is answered now.
 *
 * Costs: O(1) per request but for the table's doubling (O(flights), once
 * per doubling) and the once-a-second cool-down sweep (O(buckets)).
 */
#include "upstream/flight.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dns64/dns64.h"
#include "log/log.h"
#include "util/client.h"

#define FIRST_BUCKETS 256        /* a power of two; doubles up to MAX_FLIGHTS */
#define QUEUE_LOG_MS 60000
#define SWEEP_MS 1000

/* A client waiting for a flight's answer, until its deadline. */
struct waiter {
	struct cds_list_head of_flight;       /* in its flight's waiters */
	struct cds_list_head by_deadline;     /* in flights.by_timeout or stale_soon */
	struct cds_list_head of_client;       /* in its client slot's */
	struct flight *flight;
	uint64_t deadline_ms;
	unsigned worker;
	uint16_t client;                      /* its slot in flights.clients */
	uint8_t req[];                        /* the client's request, packed (request.c) */
};

/* ---- the lists (liburcu's urcu/list.h) ------------------------------------------ */

/* cds_list_empty, for a list only read (it takes no const). */
static bool list_none(const struct cds_list_head *list)
{
	return cds_list_empty((struct cds_list_head *)list);
}

/* The first and last waiter of a list by deadline; NULL when it is empty. */
static struct waiter *first_due(const struct cds_list_head *list)
{
	return list_none(list) ? NULL : cds_list_entry(list->next, struct waiter, by_deadline);
}

static struct waiter *last_due(const struct cds_list_head *list)
{
	return list_none(list) ? NULL : cds_list_entry(list->prev, struct waiter, by_deadline);
}

/* The oldest and newest question in the queue; NULL when it is empty. */
static struct flight *oldest_queued(const struct flights *t)
{
	return list_none(&t->queue) ? NULL : cds_list_entry(t->queue.next, struct flight, in_queue);
}

static struct flight *newest_queued(const struct flights *t)
{
	return list_none(&t->queue) ? NULL : cds_list_entry(t->queue.prev, struct flight, in_queue);
}

/* ---- the table -------------------------------------------------------------- */

int flight_table_init(struct flight_table *t)
{
	t->buckets = calloc(FIRST_BUCKETS, sizeof *t->buckets);
	t->mask = FIRST_BUCKETS - 1;
	t->count = 0;
	return t->buckets ? 0 : -1;
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

/*
 * The cache's key for a's question: the worker's, carried in the ask, or
 * made now (TCP, control lookups, refreshes, DNS64's A question). Its
 * hash is the flight table's too, so a miss hashes its name once: it is
 * SipHash under the cache's secret key, no easier to aim at one chain.
 */
static struct cache_key question_key(const struct flights *t, const struct query_ask *a)
{
	struct cache_key k;

	if (!flight_ask_key(a, &k))
		cache_key_of(t->cache, &a->q, &k);
	return k;
}

static bool same_question(const struct dns_query *a, const struct dns_query *b)
{
	return a->qtype == b->qtype && a->qclass == b->qclass && a->edns_do == b->edns_do &&
	       (a->flags & DNS_F_CD) == (b->flags & DNS_F_CD) &&
	       a->qname_len == b->qname_len && memcmp(a->qname, b->qname, a->qname_len) == 0;
}

bool flight_current(const struct flights *t, const struct flight *f)
{
	return f->asked && f->upstream == t->upstream;
}

/* The flight for q; one still running on a replaced upstream is not joined any more. */
static struct flight *find_flight(struct flights *t, const struct dns_query *q, uint64_t h)
{
	for (struct flight *f = t->table.buckets[h & t->table.mask]; f; f = f->hnext)
		if (f->cache_key.hash == h && same_question(&f->q, q) && (!f->asked || flight_current(t, f)))
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
			f->hnext = bigger[f->cache_key.hash & (2 * n - 1)];
			bigger[f->cache_key.hash & (2 * n - 1)] = f;
		}
	}
	free(t->buckets);
	t->buckets = bigger;
	t->mask = 2 * n - 1;
}

/* NULL when the table is full or memory is short. owner: the client it counts against. */
static struct flight *new_flight(struct flights *t, const struct upstream_request *r,
				 const struct cache_key *k, uint16_t owner)
{
	struct flight_table *table = &t->table;
	struct flight *f;

	/* malloc, not calloc: glibc 2.36's calloc skips the thread's cache and
	 * takes the arena's lock, one more atomic a miss */
	if (table->count >= MAX_FLIGHTS || !(f = malloc(sizeof *f + r->ask.chain_len)))
		return NULL;
	*f = (struct flight){.table = t, .cache_key = *k,
			     .chain_len = r->ask.chain_len,
			     .chain_ttl = r->ask.chain_ttl, .search = r->ask.search,
			     .owner = owner};
	CDS_INIT_LIST_HEAD(&f->waiters);
	f->q = r->ask.q;
	memcpy(f->chain, r->ask.chain, r->ask.chain_len);
	if (owner != NO_CLIENT)
		t->clients[owner].flights++;
	f->hnext = table->buckets[k->hash & table->mask];
	table->buckets[k->hash & table->mask] = f;
	table->count++;
	upstream_gauge(&t->n->flights, table->count);
	grow_if_crowded(table);
	return f;
}

static void free_flight(struct flights *t, struct flight *f)
{
	struct flight_table *table = &t->table;
	struct flight **p = &table->buckets[f->cache_key.hash & table->mask];

	while (*p != f)
		p = &(*p)->hnext;
	*p = f->hnext;
	if (f->owner != NO_CLIENT)
		t->clients[f->owner].flights--;
	if (f->refresh)
		t->refreshes--;
	table->count--;
	upstream_gauge(&t->n->flights, table->count);
	free(f);
}

/* Nobody waiting, nothing asked or queued, no cool-down: it goes. */
static void maybe_free_flight(struct flights *t, struct flight *f)
{
	if (list_none(&f->waiters) && !f->asked && !f->queued && f->failed_until_ms <= t->now_ms)
		free_flight(t, f);
}

/* Every flight in turn; fn may free the one it is given. */
static void each_flight(struct flights *t, void (*fn)(struct flights *t, struct flight *f))
{
	for (size_t i = 0; t->table.buckets && i <= t->table.mask; i++) {
		struct flight *f = t->table.buckets[i];
		while (f) {
			struct flight *next = f->hnext;
			fn(t, f);
			f = next;
		}
	}
}

/* ---- the cache, as data ----------------------------------------------------------- */

/* What the cache holds for q now: a miss, a live entry, or a stale one (when allow_stale). */
static enum cache_result cache_probe(struct flights *t, const struct dns_query *q,
				     const struct cache_key *k, bool allow_stale)
{
	struct dns_writer w;
	enum cache_result r;

	dns_response_begin(&w, t->probe, sizeof t->probe, q, DNS_R_NOERROR);
	r = cache_replay_keyed(t->cache, &w, k, t->now_ms / 1000, allow_stale);
	t->probe_len = r == CACHE_MISS ? 0 : dns_response_finish(&w, 0);
	return r;
}

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

/* Remember that f's question failed: a SERVFAIL in the cache; false when it would not take it. */
static bool cache_servfail(struct flights *t, const struct flight *f)
{
	uint8_t msg[DNS_HEADER_LEN + DNS_MAX_NAME + 4];

	return cache_insert_keyed(t->cache, &f->q, &f->cache_key, msg,
				  servfail_message(f, msg, sizeof msg), t->now_ms / 1000) == 0;
}

/* ---- waiters ------------------------------------------------------------------ */

/* The client slot of r's sender (for a refresh, the client whose hit
 * triggered it); NO_CLIENT when r names none (a control lookup). */
static uint16_t client_of(const struct flights *t, const struct upstream_request *r)
{
	uint8_t prefix[CLIENT_PREFIX_MAX];
	size_t n;

	if (r->peer_len == 0)
		return NO_CLIENT;
	n = client_prefix(&r->peer, t->set.client_ipv6_bits, prefix);
	return (uint16_t)(dns_siphash13(t->client_key, prefix, n) & (CLIENT_SLOTS - 1));
}

/* Are the upstream's places getting scarce (half taken, or questions waiting)? */
static bool contended(const struct flights *t)
{
	return !list_none(&t->queue) || t->asked >= t->set.max_asked / 2;
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
static bool client_full(const struct flights *t, uint16_t client, bool questions)
{
	if (client == NO_CLIENT)
		return false;
	if (!questions)
		return t->clients[client].waiters >= MAX_WAITERS_PER_CLIENT;
	unsigned n = t->clients[client].flights;
	return n >= t->set.max_per_client || (n >= t->set.max_per_client / 4 + 1 && contended(t));
}

/* ---- each slot's waiters, and the heaviest --------------------------------------- */

static void bucket_unlink(struct flights *t, uint16_t slot)
{
	struct client_slot *c = &t->clients[slot];

	if (c->bprev != NO_CLIENT)
		t->clients[c->bprev].bnext = c->bnext;
	else
		t->by_waiters[c->waiters] = c->bnext;
	if (c->bnext != NO_CLIENT)
		t->clients[c->bnext].bprev = c->bprev;
}

static void bucket_link(struct flights *t, uint16_t slot)
{
	struct client_slot *c = &t->clients[slot];

	c->bprev = NO_CLIENT;
	c->bnext = t->by_waiters[c->waiters];
	if (c->bnext != NO_CLIENT)
		t->clients[c->bnext].bprev = slot;
	t->by_waiters[c->waiters] = slot;
}

/* w (new) joins its slot's waiters, as the newest. */
static void slot_add(struct flights *t, struct waiter *w)
{
	struct client_slot *c = &t->clients[w->client];

	cds_list_add_tail(&w->of_client, &c->waiting);
	if (c->waiters)
		bucket_unlink(t, w->client);
	c->waiters++;
	bucket_link(t, w->client);
	if (c->waiters > t->heaviest)
		t->heaviest = c->waiters;
}

static void slot_remove(struct flights *t, struct waiter *w)
{
	struct client_slot *c = &t->clients[w->client];

	cds_list_del(&w->of_client);
	bucket_unlink(t, w->client);
	c->waiters--;
	if (c->waiters)
		bucket_link(t, w->client);
	/* counts move by one: if the heaviest list emptied, the next holds this slot */
	if (t->heaviest && t->by_waiters[t->heaviest] == NO_CLIENT)
		t->heaviest--;
}

static void reply(struct flights *t, unsigned worker, const struct upstream_request *r,
		  enum flight_reply_kind kind)
{
	const struct flight_reply a = {.kind = kind};

	t->io.reply(t->io.reply_env, worker, r, &a, t->now_ms);
}

/* The client asked more than its share: an answer at once (stale or SERVFAIL), counted. */
static void limit_client(struct flights *t, unsigned worker, const struct upstream_request *r)
{
	upstream_bump(&t->n->client_limited);
	reply(t, worker, r, FLIGHT_REPLY_FAILED);
}

/* Into list, after the last waiter whose deadline is no later than w's. */
static void list_insert(struct cds_list_head *list, struct waiter *w)
{
	struct cds_list_head *before = list->prev;

	while (before != list &&
	       cds_list_entry(before, struct waiter, by_deadline)->deadline_ms > w->deadline_ms)
		before = before->prev;
	cds_list_add(&w->by_deadline, before);
}

/* The client response timer in ms, 0 when it does not apply (serve-stale or the
 * timer off, or the timer no shorter than upstream.timeout). */
static uint32_t stale_timer_ms(struct flights *t)
{
	uint32_t timer = cache_stale_answer_ms(t->cache);

	return timer < t->set.timeout_ms ? timer : 0;
}

/* What a look at the cache already said of a stale answer for r's question. */
enum stale { STALE_UNKNOWN, STALE_NONE, STALE_HELD };

/*
 * How long r's client waits: upstream.timeout, or, when the cache holds a
 * stale answer for it, RFC 8767's client response timer (the refresh goes
 * on; the stale answer goes out at the timer).
 */
static bool stale_soon(struct flights *t, const struct upstream_request *r, enum stale known,
		       uint64_t *ms)
{
	uint32_t timer = stale_timer_ms(t);

	if (timer == 0)
		return false;
	if (known == STALE_UNKNOWN) {
		struct cache_key k = question_key(t, &r->ask);
		known = cache_probe(t, &r->ask.q, &k, true) == CACHE_STALE ? STALE_HELD
									  : STALE_NONE;
	}
	if (known != STALE_HELD)
		return false;
	*ms = timer;
	return true;
}

/*
 * false when the table or memory has no room (the caller answers r at
 * once). deadline_ms: a wait that began on another flight (DNS64), or 0.
 */
static bool add_waiter(struct flights *t, struct flight *f, unsigned worker,
		       const struct upstream_request *r, uint16_t client, uint64_t deadline_ms,
		       enum stale stale)
{
	struct waiter *w;
	uint64_t wait = t->set.timeout_ms;
	bool soon = !deadline_ms && stale_soon(t, r, stale, &wait);

	if (t->n_waiters >= MAX_WAITERS ||
	    !(w = malloc(sizeof *w + upstream_request_packed_size(r))))
		return false;
	upstream_request_pack(r, w->req);
	w->client = client;
	if (client != NO_CLIENT)
		slot_add(t, w);
	w->worker = worker;
	w->flight = f;
	w->deadline_ms = deadline_ms ? deadline_ms : t->now_ms + wait;
	cds_list_add(&w->of_flight, &f->waiters);
	list_insert(soon ? &t->stale_soon : &t->by_timeout, w);
	t->n_waiters++;
	return true;
}

static void remove_waiter(struct flights *t, struct waiter *w)
{
	cds_list_del(&w->of_flight);
	cds_list_del(&w->by_deadline);
	if (w->client != NO_CLIENT)
		slot_remove(t, w);
	t->n_waiters--;
	free(w);
}

/* Answer w as a says; it stays a waiter (the caller removes it). */
static void reply_waiter(struct flights *t, const struct waiter *w, const struct flight_reply *a)
{
	upstream_request_unpack(w->req, &t->waiting);
	t->io.reply(t->io.reply_env, w->worker, &t->waiting, a, t->now_ms);
}

/* Every waiter of f answered as a says, and gone. */
static void answer_waiters(struct flights *t, struct flight *f, const struct flight_reply *a)
{
	while (!list_none(&f->waiters)) {
		struct waiter *w = cds_list_first_entry(&f->waiters, struct waiter, of_flight);
		reply_waiter(t, w, a);
		remove_waiter(t, w);
	}
}

static const struct flight_reply failed_reply = {.kind = FLIGHT_REPLY_FAILED};

static bool follow_to_a(struct flights *t, unsigned worker, const struct upstream_request *r,
			const uint8_t *aaaa, size_t len, uint64_t deadline_ms);

/*
 * f's answer a for every waiter; a DNS64 waiter (its request's dns64 set)
 * whose AAAA answer has no AAAA record goes on to wait for the A answer of
 * the chain's end instead (follow_to_a), within its own deadline.
 */
static void answer_or_follow(struct flights *t, struct flight *f, const struct flight_reply *a)
{
	bool wanted = f->q.qtype == DNS_T_AAAA && dns64_wanted(a->msg, a->len);

	while (!list_none(&f->waiters)) {
		struct waiter *w = cds_list_first_entry(&f->waiters, struct waiter, of_flight);
		unsigned worker = w->worker;
		uint64_t deadline_ms = w->deadline_ms;

		upstream_request_unpack(w->req, &t->waiting);
		if (!wanted || !t->waiting.ask.dns64.len || t->waiting.ask.dns64_a) {
			t->io.reply(t->io.reply_env, worker, &t->waiting, a, t->now_ms);
			remove_waiter(t, w);
			continue;
		}
		t->following = t->waiting; /* t->waiting is reused by what follows */
		remove_waiter(t, w);
		if (!follow_to_a(t, worker, &t->following, a->msg, a->len, deadline_ms))
			t->io.reply(t->io.reply_env, worker, &t->following, a, t->now_ms);
	}
}

/* ---- the queue ------------------------------------------------------------------ */

static void enqueue(struct flights *t, struct flight *f)
{
	f->queued = true;
	f->queued_until_ms = t->now_ms + t->set.timeout_ms;
	cds_list_add_tail(&f->in_queue, &t->queue);
	t->n_queued++;
	upstream_gauge(&t->n->queued, t->n_queued);
}

static void dequeue(struct flights *t, struct flight *f)
{
	cds_list_del(&f->in_queue);
	f->queued = false;
	t->n_queued--;
	upstream_gauge(&t->n->queued, t->n_queued);
}

/* Anyone still waiting for it, or a refresh still within its time? */
static bool worth_asking(const struct flights *t, const struct flight *f)
{
	return !list_none(&f->waiters) || f->queued_until_ms > t->now_ms;
}

/* Given up without asking: its clients get stale data or SERVFAIL now. */
static void shed(struct flights *t, struct flight *f, enum upstream_shed why)
{
	upstream_bump(&t->n->shed[why]);
	answer_waiters(t, f, &failed_reply);
}

/* Why new questions wait, said at most once a minute. */
static void log_waiting(struct flights *t, bool for_pace)
{
	char n[24];

	if (t->now_ms < t->full_logged_ms + QUEUE_LOG_MS && t->full_logged_ms)
		return;
	t->full_logged_ms = t->now_ms;
	if (for_pace) {
		snprintf(n, sizeof n, "%llu", (unsigned long long)t->pace.rate);
		log_warn("upstream.max_rate reached: new questions wait their turn "
			 "(said at most once a minute)", "max_rate", n);
	} else {
		snprintf(n, sizeof n, "%u", t->asked);
		log_warn("libunbound is running all the queries it may: new questions wait "
			 "their turn (said at most once a minute)", "running", n);
	}
}

/* Does the upstream take another question? */
static bool room_to_ask(const struct flights *t)
{
	return t->asked < t->set.max_asked;
}

static bool start_asking(struct flights *t, struct flight *f)
{
	if (!t->io.ask(t->io.ask_env, f))
		return false;
	f->asked = true;
	f->upstream = t->upstream;
	if (!f->retried && t->retry_tokens < RETRY_TOKENS_MAX)
		t->retry_tokens++;
	t->asked++;
	atomic_fetch_add_explicit(&t->n->resolving, 1, memory_order_relaxed);
	upstream_bump(&t->n->queries);
	return true;
}

/* Ask f now, or queue it; false when the upstream refused it. */
static bool ask_or_queue(struct flights *t, struct flight *f)
{
	if (list_none(&t->queue)) {
		bool room = room_to_ask(t);
		if (room && pace_take(&t->pace, t->now_ms))
			return start_asking(t, f);
		if (room)
			upstream_bump(&t->n->paced);
		log_waiting(t, room);
	} else if (pace_wait_ms(&t->pace, t->now_ms) > 0) {
		upstream_bump(&t->n->paced);
	}
	if (t->n_queued >= MAX_QUEUED) {
		struct flight *oldest = oldest_queued(t);
		dequeue(t, oldest);
		shed(t, oldest, UPSTREAM_SHED_QUEUE_FULL);
		maybe_free_flight(t, oldest);
	}
	enqueue(t, f);
	return true;
}

/* ---- failures and answers ------------------------------------------------------------ */

/*
 * Answer f's waiters with stale data or SERVFAIL; remember: the upstream
 * asked now failed (the failing mark, and a SERVFAIL in the cache or a
 * cool-down).
 */
static void resolution_failed(struct flights *t, struct flight *f, bool remember)
{
	upstream_bump(&t->n->failures);
	if (remember) {
		atomic_store_explicit(&t->failing, true, memory_order_relaxed);
		if (cache_probe(t, &f->q, &f->cache_key, true) != CACHE_MISS ||
		    !cache_servfail(t, f))
			f->failed_until_ms = t->now_ms + FAILURE_HOLD_MS;
	}
	answer_waiters(t, f, &failed_reply);
}

/* A new resolution of f's question (from the first candidate, for autopath). */
static void start_flight(struct flights *t, struct flight *f)
{
	f->candidate = 0;
	f->retried = false;
	if (!ask_or_queue(t, f))
		resolution_failed(t, f, true);
}

/*
 * A failure is asked once more while clients still wait for it: behind an
 * upstream that rate-limits, libunbound gives up on a question whose
 * packets were dropped a few times in a row (its server's retransmission
 * timeout has grown), and the same question asked again a moment later is
 * usually answered. A dead upstream costs one more quick failure per new
 * question at most. The clients keep their deadlines either way. Retries
 * stay within a budget of a tenth of the questions asked: when most
 * questions fail, asking each twice would only add to what the upstream
 * is already refusing.
 */
static bool retried_once(struct flights *t, struct flight *f, bool current)
{
	if (!current || f->retried || list_none(&f->waiters) || t->retry_tokens < RETRY_COST)
		return false;
	t->retry_tokens -= RETRY_COST;
	f->retried = true;
	if (!ask_or_queue(t, f))
		return false;
	upstream_bump(&t->n->retries);
	return true;
}

/* Any answer says the upstream works. */
static void answer_came(struct flights *t, struct flight *f, bool remember)
{
	upstream_bump(&t->n->answers);
	if (remember) {
		atomic_store_explicit(&t->failing, false, memory_order_relaxed);
		f->failed_until_ms = 0;
	}
}

/* Autopath: the candidate asked does not exist: the next is asked; after the
 * last, every waiter gets its question's local NXDOMAIN. */
static void candidate_missing(struct flights *t, struct flight *f)
{
	static const struct flight_reply nxdomain = {.kind = FLIGHT_REPLY_NXDOMAIN};

	f->candidate += (uint16_t)dns_name_len(f->chain + f->candidate);
	if (f->candidate < f->chain_len) {
		/* the next candidate is asked on the current upstream */
		if (!ask_or_queue(t, f))
			resolution_failed(t, f, true);
		return;
	}
	answer_waiters(t, f, &nxdomain);
}

/* RFC 4035 5.5: bogus data is not given out; the verdict is remembered briefly. */
static void resolution_bogus(struct flights *t, struct flight *f, bool remember)
{
	static const struct flight_reply servfail = {.kind = FLIGHT_REPLY_SERVFAIL};

	upstream_bump(&t->n->bogus);
	if (remember)
		cache_servfail(t, f);
	answer_waiters(t, f, &servfail);
}

/* f's question is no longer with the upstream. */
static void stop_asking(struct flights *t, struct flight *f)
{
	if (flight_current(t, f))
		t->asked--;
	f->asked = false;
	atomic_fetch_sub_explicit(&t->n->resolving, 1, memory_order_relaxed);
}

void flights_result(struct flights *t, struct flight *f, const struct flight_result *res,
		    uint64_t now_ms)
{
	bool current = flight_current(t, f);
	struct flight_reply answer = {.kind = FLIGHT_REPLY_ANSWER, .msg = res->msg,
				      .len = res->len, .cached = res->cached};

	t->now_ms = now_ms;
	if (current)
		t->last_result_ms = now_ms;
	stop_asking(t, f);
	switch (res->outcome) {
	case FLIGHT_FAILED:
		if (!retried_once(t, f, current))
			resolution_failed(t, f, current);
		break;
	case FLIGHT_BOGUS:
		resolution_bogus(t, f, current);
		break;
	case FLIGHT_UNUSABLE:
		answer_came(t, f, current);
		resolution_failed(t, f, current);
		break;
	case FLIGHT_NO_CANDIDATE:
		answer_came(t, f, current);
		candidate_missing(t, f);
		break;
	case FLIGHT_ANSWERED:
		answer_came(t, f, current);
		answer_or_follow(t, f, &answer);
		break;
	}
	maybe_free_flight(t, f);
}

const uint8_t *flight_name(const struct flight *f)
{
	const uint8_t *name = f->q.qname;

	if (f->search)
		return f->chain + f->candidate;
	for (size_t pos = 0; pos < f->chain_len; pos += dns_name_len(f->chain + pos))
		name = f->chain + pos;
	return name;
}

/* ---- requests ------------------------------------------------------------------------ */

static void waiter_done(struct flights *t, struct waiter *w);

/* How many refreshes may be in the table at once: a quarter of the upstream's places. */
static unsigned refresh_limit(const struct flights *t)
{
	return t->set.max_asked / 4 ? t->set.max_asked / 4 : 1;
}

void flights_refresh(struct flights *t, const struct upstream_request *r, uint64_t now_ms)
{
	struct cache_key k = question_key(t, &r->ask);
	uint16_t client = client_of(t, r);
	struct flight *f;

	t->now_ms = now_ms;
	f = find_flight(t, &r->ask.q, k.hash);
	if (f && (f->asked || f->queued || f->failed_until_ms > t->now_ms))
		return;
	if (client_full(t, client, true)) {
		upstream_bump(&t->n->client_limited);
		return;
	}
	if (t->refreshes >= refresh_limit(t)) {
		upstream_bump(&t->n->shed[UPSTREAM_SHED_REFRESH_LIMIT]);
		return;
	}
	if (!f && !(f = new_flight(t, r, &k, client))) {
		upstream_bump(&t->n->shed[UPSTREAM_SHED_TABLE_FULL]);
		return;
	}
	if (!f->refresh) {
		f->refresh = true;
		t->refreshes++;
	}
	start_flight(t, f);
	maybe_free_flight(t, f);
}

/*
 * The waiters' table is full: a client holding the most waiters gives up
 * its oldest, answered now, unless client holds as many itself. false
 * when client is to be refused.
 */
static bool make_room(struct flights *t, uint16_t client)
{
	unsigned mine = client == NO_CLIENT ? 0 : t->clients[client].waiters;
	struct waiter *w;

	if (t->heaviest == 0 || mine >= t->heaviest)
		return false;
	w = cds_list_first_entry(&t->clients[t->by_waiters[t->heaviest]].waiting, struct waiter,
				 of_client);
	upstream_bump(&t->n->evicted);
	reply_waiter(t, w, &failed_reply);
	waiter_done(t, w);
	return true;
}

/* Whether the cache is looked at before a question is asked (flights_client_missed). */
enum look { LOOK_AGAIN, LOOKED };

/*
 * r waits for the flight of key's question (r's own, or for DNS64 the A
 * question of its chain's end), asked now unless it is asked already or
 * the cache answers it; deadline_ms as add_waiter's.
 */
static void join_or_ask(struct flights *t, unsigned worker, const struct upstream_request *key,
			const struct upstream_request *r, uint64_t deadline_ms, enum look look)
{
	struct cache_key k = question_key(t, &key->ask);
	uint16_t client = client_of(t, r);
	struct flight *f;

	/* before any flight is looked up: making room may let one go */
	if (t->n_waiters >= MAX_WAITERS && !make_room(t, client)) {
		limit_client(t, worker, r);
		return;
	}
	f = find_flight(t, &key->ask.q, k.hash);
	if (f && (f->asked || f->queued)) {
		if (client_full(t, client, false)) {
			limit_client(t, worker, r);
			return;
		}
		upstream_bump(&t->n->coalesced);
		if (!add_waiter(t, f, worker, r, client, deadline_ms, STALE_UNKNOWN))
			reply(t, worker, r, FLIGHT_REPLY_FAILED);
		return;
	}
	/* Answered since the worker looked? (For DNS64, a live AAAA answer
	 * without AAAA records means the A question.) The same look says, for
	 * r's own question, whether a stale answer waits (add_waiter). */
	enum stale stale = STALE_UNKNOWN;
	if (look == LOOK_AGAIN || r->ask.dns64.len) {
		bool own = key == r;
		enum cache_result seen = cache_probe(t, &key->ask.q, &k, own && stale_timer_ms(t));
		if (seen != CACHE_MISS && seen != CACHE_STALE) {
			if (r->ask.dns64_a || !r->ask.dns64.len ||
			    !dns64_wanted(t->probe, t->probe_len) ||
			    !follow_to_a(t, worker, r, t->probe, t->probe_len, deadline_ms))
				reply(t, worker, r, FLIGHT_REPLY_CACHED);
			return;
		}
		if (own)
			stale = seen == CACHE_STALE ? STALE_HELD : STALE_NONE;
	} else if (key == r && r->ask.cache_absent) {
		stale = STALE_NONE; /* the worker's own look, just now, found nothing */
	}
	if (f && f->failed_until_ms > t->now_ms) {
		reply(t, worker, r, FLIGHT_REPLY_FAILED);
		return;
	}
	if (client_full(t, client, !f)) {
		limit_client(t, worker, r);
		return;
	}
	if (!f && !(f = new_flight(t, key, &k, client))) {
		upstream_bump(&t->n->shed[UPSTREAM_SHED_TABLE_FULL]);
		reply(t, worker, r, FLIGHT_REPLY_FAILED);
		return;
	}
	if (!add_waiter(t, f, worker, r, client, deadline_ms, stale)) {
		maybe_free_flight(t, f);
		reply(t, worker, r, FLIGHT_REPLY_FAILED);
		return;
	}
	start_flight(t, f);
	maybe_free_flight(t, f);
}

void flights_client(struct flights *t, unsigned worker, const struct upstream_request *r,
		    uint64_t now_ms)
{
	t->now_ms = now_ms;
	join_or_ask(t, worker, r, r, 0, LOOK_AGAIN);
}

void flights_client_missed(struct flights *t, unsigned worker, const struct upstream_request *r,
			   uint64_t now_ms)
{
	t->now_ms = now_ms;
	join_or_ask(t, worker, r, r, 0, LOOKED);
}

/*
 * DNS64 (RFC 6147 5.1.6): aaaa, the answer to r's AAAA question, has no
 * AAAA record, so r waits for the A answer of the last name of its CNAME
 * chain: a question like any other, keyed as one (a client asking A for
 * that name joins it, and the cache keeps its answer under it), never the
 * synthesized answer, which deliver.c makes for r from the two answers.
 * false when aaaa is unreadable (r is answered with it as it is).
 */
static bool follow_to_a(struct flights *t, unsigned worker, const struct upstream_request *r,
			const uint8_t *aaaa, size_t len, uint64_t deadline_ms)
{
	struct upstream_request *wait = &t->dns64_wait, *key = &t->dns64_key;
	uint8_t end[DNS_MAX_NAME];
	size_t n = dns64_chain_end(aaaa, len, r->ask.q.qname, end);

	if (n == 0)
		return false;
	*wait = *r;
	memcpy(wait->ask.chain, end, n);
	wait->ask.chain_len = (uint16_t)n;
	wait->ask.search = false;
	wait->ask.dns64_a = true;
	*key = *wait;
	dns_query_set_name(&key->ask.q, end);
	key->ask.q.qtype = DNS_T_A;
	key->ask.cache_keyed = false; /* the worker's key was for r's question */
	key->ask.chain_len = 0;
	key->ask.dns64.len = 0;
	key->ask.dns64_a = false;
	join_or_ask(t, worker, key, wait, deadline_ms, LOOK_AGAIN);
	return true;
}

/* ---- time ------------------------------------------------------------------------------ */

/* w's wait is over, its answer given: it goes, and its question if nobody needs it. */
static void waiter_done(struct flights *t, struct waiter *w)
{
	struct flight *f = w->flight;

	remove_waiter(t, w);
	if (f->queued && !worth_asking(t, f)) {
		dequeue(t, f);
		maybe_free_flight(t, f);
	}
}

static void expire_waiters(struct flights *t)
{
	struct waiter *w;

	/* RFC 8767's client response timer: the stale answer now, the refresh goes on.
	 * (A slow refresh says nothing of a failing upstream: no mark.) */
	while ((w = first_due(&t->stale_soon)) && w->deadline_ms <= t->now_ms) {
		reply_waiter(t, w, &failed_reply);
		waiter_done(t, w);
	}
	while ((w = first_due(&t->by_timeout)) && w->deadline_ms <= t->now_ms) {
		upstream_bump(&t->n->timeouts);
		/* Only a question running on the current upstream says it is
		 * slow; one still queued says we are. */
		if (flight_current(t, w->flight))
			atomic_store_explicit(&t->failing, true, memory_order_relaxed);
		reply_waiter(t, w, &failed_reply);
		waiter_done(t, w);
	}
}

void flights_expire(struct flights *t, uint64_t now_ms)
{
	t->now_ms = now_ms;
	expire_waiters(t);
	if (now_ms - t->swept_ms >= SWEEP_MS) {
		each_flight(t, maybe_free_flight); /* the cooled-down ones */
		t->swept_ms = now_ms;
	}
}

void flights_start_queued(struct flights *t, uint64_t now_ms)
{
	struct flight *f;

	t->now_ms = now_ms;
	while ((f = oldest_queued(t)) && !worth_asking(t, f)) {
		dequeue(t, f);
		maybe_free_flight(t, f);
	}
	while ((f = newest_queued(t))) {
		if (!worth_asking(t, f)) {
			dequeue(t, f);
			maybe_free_flight(t, f);
			continue;
		}
		if (!room_to_ask(t) || !pace_take(&t->pace, t->now_ms))
			return;
		dequeue(t, f);
		if (!start_asking(t, f))
			resolution_failed(t, f, true);
		maybe_free_flight(t, f);
	}
}

static bool first_deadline_ms(const struct flights *t, uint64_t *out)
{
	const struct waiter *a = first_due(&t->by_timeout), *b = first_due(&t->stale_soon);

	if (!a && !b)
		return false;
	*out = !a ? b->deadline_ms : !b ? a->deadline_ms
		: a->deadline_ms < b->deadline_ms ? a->deadline_ms : b->deadline_ms;
	return true;
}

uint64_t flights_wait_ms(const struct flights *t, uint64_t now_ms, uint64_t cap)
{
	uint64_t wait = cap, first;

	/* a queued question waits for pace; with no room, for a result (which wakes the caller) */
	if (!list_none(&t->queue) && room_to_ask(t)) {
		uint64_t pace = pace_wait_ms(&t->pace, now_ms);
		wait = pace < wait ? pace : wait;
	}
	if (first_deadline_ms(t, &first)) {
		uint64_t deadline = first > now_ms ? first - now_ms : 0;
		wait = deadline < wait ? deadline : wait;
	}
	return wait;
}

uint64_t flights_last_deadline_ms(const struct flights *t, uint64_t now_ms)
{
	const struct waiter *a = last_due(&t->by_timeout), *b = last_due(&t->stale_soon);
	uint64_t last = now_ms;

	if (a && a->deadline_ms > last)
		last = a->deadline_ms;
	if (b && b->deadline_ms > last)
		last = b->deadline_ms;
	return last;
}

unsigned flights_waiting(const struct flights *t)
{
	return t->n_waiters;
}

bool flights_failing(const struct flights *t)
{
	return atomic_load_explicit(&t->failing, memory_order_relaxed);
}

/* ---- upstreams ------------------------------------------------------------------------- */

static void forget_failure(struct flights *t, struct flight *f)
{
	f->failed_until_ms = 0;
	maybe_free_flight(t, f);
}

void flights_new_upstream(struct flights *t, const struct flight_settings *s, bool forget,
			  uint64_t now_ms)
{
	t->now_ms = now_ms;
	if (s->max_rate != t->set.max_rate)
		pace_init(&t->pace, s->max_rate, now_ms);
	t->set = *s;
	t->upstream++;
	t->asked = 0;
	t->last_result_ms = now_ms;
	if (forget) {
		atomic_store_explicit(&t->failing, false, memory_order_relaxed);
		each_flight(t, forget_failure);
	}
}

uint32_t flights_upstream(const struct flights *t)
{
	return t->upstream;
}

bool flights_stalled(const struct flights *t, uint64_t now_ms)
{
	return !list_none(&t->queue) && !room_to_ask(t) &&
	       now_ms >= t->last_result_ms + t->set.timeout_ms;
}

void flights_drop_upstream(struct flights *t, uint32_t upstream)
{
	for (size_t i = 0; i <= t->table.mask; i++) {
		struct flight *f = t->table.buckets[i];
		while (f) {
			struct flight *next = f->hnext;
			if (f->asked && f->upstream == upstream) {
				stop_asking(t, f);
				maybe_free_flight(t, f);
			}
			f = next;
		}
	}
}

/* ---- life cycle ------------------------------------------------------------------------- */

int flights_init(struct flights *t, const struct flight_io *io, struct cache *cache,
		 struct upstream_counters *n, const struct flight_settings *s, uint64_t now_ms)
{
	memset(t, 0, offsetof(struct flights, probe));
	memset(t->by_waiters, 0xff, sizeof t->by_waiters); /* NO_CLIENT: no slot */
	CDS_INIT_LIST_HEAD(&t->queue);
	CDS_INIT_LIST_HEAD(&t->by_timeout);
	CDS_INIT_LIST_HEAD(&t->stale_soon);
	for (size_t i = 0; i < CLIENT_SLOTS; i++)
		CDS_INIT_LIST_HEAD(&t->clients[i].waiting);
	t->io = *io;
	t->cache = cache;
	t->n = n;
	t->set = *s;
	t->upstream = 1;
	t->last_result_ms = t->now_ms = t->swept_ms = now_ms;
	atomic_init(&t->failing, false);
	pace_init(&t->pace, s->max_rate, now_ms);
	t->retry_tokens = RETRY_TOKENS_MAX;
	if (flight_table_init(&t->table) < 0 ||
	    getrandom(t->client_key, sizeof t->client_key, 0) != (ssize_t)sizeof t->client_key) {
		flight_table_free(&t->table);
		return -1;
	}
	return 0;
}

void flights_free(struct flights *t)
{
	struct waiter *w;
	struct flight *f;

	if (!t->table.buckets)
		return; /* never set up, or freed already: no flight, so no waiter */
	while ((w = first_due(&t->by_timeout)))
		remove_waiter(t, w);
	while ((w = first_due(&t->stale_soon)))
		remove_waiter(t, w);
	while ((f = oldest_queued(t)))
		dequeue(t, f);
	for (size_t i = 0; t->table.buckets && i <= t->table.mask; i++)
		while (t->table.buckets[i])
			free_flight(t, t->table.buckets[i]);
	flight_table_free(&t->table);
}
