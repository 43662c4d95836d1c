/*
 * upstream/deliver.c — the resolver thread's replies to waiting clients.
 *
 * UDP replies go out on the socket the query came in on, from this thread
 * (the worker keeps reading it), within rrl.* as the workers' own
 * (src/rrl/), a turn's replies for one socket together: one sendmmsg at
 * the end of the loop's turn (deliver_flush) or when 32 are waiting
 * (sendto when there is one: util/datagram.h). A
 * sendto per reply cost a syscall each, and woke the client once per
 * reply: a load generator (or a busy stub) that answers each reply with
 * its next query then woke the worker, which shares the resolver's core,
 * as often, each time taking the core from the resolver and giving it back
 * (docs/performance.md, "Cold misses"). A TCP connection's byte
 * stream belongs to its worker, so a TCP reply is framed into a malloc'd
 * buffer and put on that worker's completion ring (ring.c; single
 * producer: this thread; single consumer: the worker), whose eventfd is
 * written once per loop turn (deliver_flush). A full ring does not drop
 * the reply: the worker counts every TCP query it handed over until its
 * reply comes back, and at its cap stops reading the connection, so a
 * lost reply would leave the connection unread until its idle timeout.
 * The reply is held in a list per worker and moved to the ring as the
 * worker makes room. At most one reply is held per TCP query a worker has
 * waiting (listen.tcp_max_pending_queries per connection); only a reply
 * with no memory to frame it is lost (counted as dropped).
 *
 * Every reply is built in d->buf with the client's own ID, question case,
 * EDNS and cookie, from the cache (TTLs aged to now) or from the message
 * libunbound gave when the cache would not keep it.
 */
#include "upstream/deliver.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dnstap/dnstap.h"
#include "querylog/querylog.h"
#include "rrl/rrl.h"
#include "util/datagram.h"

/* The workers count the replies they send; these are the resolver's,
 * counted before the client can see the reply (a scrape after it includes it). */
static void count_reply(struct deliver *d)
{
	upstream_bump(&d->n->rcode[dns_reply_rcode_slot(d->buf, false)]);
	if (dns_reply_truncated(d->buf))
		upstream_bump(&d->n->truncated);
}

/* c for worker goes behind what is held for it already; false without memory. */
static bool hold(struct deliver *d, unsigned worker, const struct upstream_completion *c)
{
	struct held_replies *list = &d->held[worker];
	struct held_reply *h = malloc(sizeof *h);

	if (!h)
		return false;
	h->c = *c;
	h->next = NULL;
	if (list->tail)
		list->tail->next = h;
	else
		list->head = h;
	list->tail = h;
	d->n_held++;
	return true;
}

static void deliver_tcp(struct deliver *d, unsigned worker, const struct upstream_request *r,
			size_t len)
{
	struct completion_ring *ring = d->completions[worker];
	struct upstream_completion c = {.conn = r->conn, .conn_gen = r->conn_gen, .len = len + 2};

	if (!(c.framed = malloc(len + 2))) {
		upstream_bump(&d->n->dropped);
		return;
	}
	c.framed[0] = (uint8_t)(len >> 8);
	c.framed[1] = (uint8_t)len;
	memcpy(c.framed + 2, d->buf, len);
	count_reply(d);
	if (!d->held[worker].head && ring_completion_has_room(ring)) {
		ring_completion_put(ring, &c);
		d->signal_owed = true;
	} else if (!hold(d, worker, &c)) {
		free(c.framed);
		upstream_bump(&d->n->dropped);
	}
}

/* rrl.*: the UDP reply[0..len) to r's client as it may go out (whole, or
 * cut to a TC slip), or 0 when dropped. */
static size_t rate_limited(struct deliver *d, const struct upstream_request *r, uint8_t *reply,
			   size_t len, uint64_t now_ms)
{
	switch (rrl_apply(&r->peer, reply, &len, now_ms / 1000)) {
	case RRL_PASS:
		break;
	case RRL_SLIP:
		upstream_bump(&d->n->rrl_slipped);
		break;
	case RRL_DROP:
		upstream_bump(&d->n->rrl_dropped);
		break;
	}
	return len;
}

/* The UDP replies waiting go out; a full socket buffer drops the rest, as the network would. */
static void send_udp(struct deliver *d)
{
	struct udp_out *o = &d->udp;

	datagram_send_all(o->fd, o->msgs, o->n, MSG_NOSIGNAL);
	o->n = 0;
	o->used = 0;
}

/*
 * The reply built in d->buf (len bytes) joins the UDP replies waiting for
 * r's socket, as rrl.* lets it go: rrl_apply cuts or drops the copy, so
 * d->buf stays the reply as built for the query log and dnstap (what a
 * worker records too: the reply before rrl).
 */
static void queue_udp(struct deliver *d, const struct upstream_request *r, size_t len,
		      uint64_t now_ms)
{
	struct udp_out *o = &d->udp;

	if (o->n && (o->fd != r->fd || o->n == UDP_OUT_REPLIES || o->used + len > UDP_OUT_BYTES))
		send_udp(d);
	uint8_t *reply = o->bytes + o->used;
	memcpy(reply, d->buf, len);
	if ((len = rate_limited(d, r, reply, len, now_ms)) == 0)
		return;
	unsigned i = o->n++;
	o->fd = r->fd;
	memcpy(&o->peers[i], &r->peer, r->peer_len);
	o->iov[i] = (struct iovec){.iov_base = reply, .iov_len = len};
	o->msgs[i].msg_hdr = (struct msghdr){.msg_name = &o->peers[i], .msg_namelen = r->peer_len,
					     .msg_iov = &o->iov[i], .msg_iovlen = 1};
	o->used += len;
}

/* The reply built in d->buf (len bytes; none when 0) goes to r's client. */
static void send_reply(struct deliver *d, unsigned worker, const struct upstream_request *r,
		       size_t len, uint64_t now_ms)
{
	if (len == 0)
		return;
	if (r->transport == UPSTREAM_UDP) {
		count_reply(d);
		queue_udp(d, r, len, now_ms);
	} else if (r->transport == UPSTREAM_TCP) {
		deliver_tcp(d, worker, r, len);
	}
	if (talkers_sample(&d->top_sampler)) /* its NXDOMAIN or SERVFAIL: the worker counted the query */
		talkers_note_reply(TALKERS_RESOLVER, NULL, d->buf, len);
	enum query_transport how = r->transport == UPSTREAM_TCP ? QUERY_TCP : QUERY_UDP;
	if (r->log_reply)
		querylog_add(QUERYLOG_RESOLVER, &r->peer, how, QUERY_SOURCE_UPSTREAM, d->buf, len);
	if (r->tap_reply) /* dnstap: the worker recorded the query; this is its reply */
		dnstap_client(DNSTAP_PRODUCER_RESOLVER, &r->peer, &r->local, how, NULL, 0, d->buf,
			      len);
}

/* Held replies for worker into its ring, as far as it has room. */
static void put_held(struct deliver *d, unsigned worker)
{
	struct held_replies *list = &d->held[worker];
	struct completion_ring *ring = d->completions[worker];

	while (list->head && ring_completion_has_room(ring)) {
		struct held_reply *h = list->head;
		list->head = h->next;
		if (!list->head)
			list->tail = NULL;
		ring_completion_put(ring, &h->c);
		free(h);
		d->n_held--;
		d->signal_owed = true;
	}
}

void deliver_flush(struct deliver *d)
{
	if (d->udp.n)
		send_udp(d);
	for (unsigned i = 0; d->n_held && i < d->n_workers; i++)
		put_held(d, i);
	if (!d->signal_owed)
		return;
	d->signal_owed = false;
	for (unsigned i = 0; i < d->n_workers; i++)
		ring_completion_signal(d->completions[i]);
}

bool deliver_holding(const struct deliver *d)
{
	return d->n_held > 0;
}

static void begin_reply(struct dns_writer *w, struct deliver *d, const struct upstream_request *r)
{
	dns_response_begin(w, d->buf, r->ask.reply_limit, &r->ask.q, DNS_R_NOERROR);
	if (r->ask.has_cookie)
		dns_response_set_server_cookie(w, r->ask.cookie);
}

/* r answered from the cache: the length, 0 when the cache has nothing usable. */
static size_t reply_from_cache(struct deliver *d, const struct upstream_request *r,
			       uint64_t now_ms, bool allow_stale, enum cache_result *how)
{
	struct dns_writer w;
	struct cache_key k;

	begin_reply(&w, d, r);
	*how = flight_ask_key(&r->ask, &k)
		       ? cache_replay_keyed(d->cache, &w, &k, now_ms / 1000, allow_stale)
		       : cache_replay(d->cache, &w, now_ms / 1000, allow_stale);
	if (*how == CACHE_MISS)
		return 0;
	return dns_response_finish(&w, r->ask.udp_payload);
}

static size_t reply_servfail(struct deliver *d, const struct upstream_request *r)
{
	struct dns_writer w;

	begin_reply(&w, d, r);
	dns_response_set_rcode(&w, DNS_R_SERVFAIL);
	return dns_response_finish(&w, r->ask.udp_payload);
}

/* Autopath found no candidate: q's own local answer, NXDOMAIN with the zone's SOA. */
static size_t reply_nxdomain(struct deliver *d, const struct upstream_request *r)
{
	const uint16_t counts[3] = {0, r->ask.nxdomain_len ? 1 : 0, 0};
	struct dns_writer w;

	begin_reply(&w, d, r);
	if (r->ask.nxdomain_len)
		dns_response_append_raw(&w, r->ask.nxdomain, r->ask.nxdomain_len, counts);
	dns_response_set_rcode(&w, DNS_R_NXDOMAIN);
	dns_response_set_aa(&w, true);
	return dns_response_finish(&w, r->ask.udp_payload);
}

/* The upstream could not help: a stale answer (RFC 8767) or SERVFAIL. */
static size_t reply_failed(struct deliver *d, const struct upstream_request *r, uint64_t now_ms)
{
	enum cache_result how;
	size_t len = reply_from_cache(d, r, now_ms, true, &how);

	if (len) {
		upstream_bump(how == CACHE_STALE ? &d->n->stale : &d->n->answers);
		return len;
	}
	upstream_bump(&d->n->servfail);
	return reply_servfail(d, r);
}

/* The upstream's answer: from the cache (when cached), or as it came. */
static size_t reply_answer(struct deliver *d, const struct upstream_request *r,
			   const struct flight_reply *a, uint64_t now_ms)
{
	struct dns_writer w;
	enum cache_result how;
	size_t len = a->cached ? reply_from_cache(d, r, now_ms, false, &how) : 0;

	if (len == 0) {
		begin_reply(&w, d, r);
		if (!cache_write_message(&w, a->msg, a->len))
			dns_response_set_rcode(&w, DNS_R_SERVFAIL);
		len = dns_response_finish(&w, r->ask.udp_payload);
	}
	return len;
}

/* q's answer in the cache (stale too), whole, into out: its length, or 0. */
static size_t cached_message(struct deliver *d, const struct dns_query *q, uint8_t *out,
			     uint64_t now_ms)
{
	struct dns_writer w;

	dns_response_begin(&w, out, DNS_MAX_MESSAGE, q, DNS_R_NOERROR);
	if (cache_replay(d->cache, &w, now_ms / 1000, true) == CACHE_MISS)
		return 0;
	return dns_response_finish(&w, 0);
}

/*
 * DNS64: r waited for the A answer (a) of its AAAA answer's chain end: the
 * AAAA answer (the cache's: the resolver put it there, or a worker found
 * it) with AAAA records made from a's A records; without any, the AAAA
 * answer as it is. Neither is ever cached as synthesized: the cache keeps
 * each answer under its own question (docs/operations.md, "DNS64").
 */
static size_t reply_dns64(struct deliver *d, const struct upstream_request *r,
			  const uint8_t *a, size_t a_len, uint64_t now_ms)
{
	size_t aaaa_len = cached_message(d, &r->ask.q, d->aaaa, now_ms);
	struct dns_writer w;

	if (aaaa_len == 0)
		return reply_failed(d, r, now_ms);
	begin_reply(&w, d, r);
	if (!dns64_synthesize_chain(&r->ask.dns64, d->aaaa, aaaa_len, a, a_len, &w))
		return reply_failed(d, r, now_ms); /* the AAAA answer, from the cache */
	upstream_bump(&d->n->dns64_synthesized);
	return dns_response_finish(&w, r->ask.udp_payload);
}

/* DNS64: r->ask.chain is the name whose A answer r waited for (a, or the cache's). */
static size_t build_dns64_reply(struct deliver *d, const struct upstream_request *r,
				const struct flight_reply *a, uint64_t now_ms)
{
	struct dns_query qa = r->ask.q;
	size_t len;

	dns_query_set_name(&qa, r->ask.chain);
	qa.qtype = DNS_T_A;
	switch (a->kind) {
	case FLIGHT_REPLY_ANSWER:
		if (!a->cached)
			return reply_dns64(d, r, a->msg, a->len, now_ms);
		__attribute__((fallthrough)); /* the cache's copy */
	case FLIGHT_REPLY_CACHED:
		len = cached_message(d, &qa, d->a, now_ms);
		return len ? reply_dns64(d, r, d->a, len, now_ms) : reply_failed(d, r, now_ms);
	case FLIGHT_REPLY_SERVFAIL:
		upstream_bump(&d->n->servfail);
		return reply_servfail(d, r);
	case FLIGHT_REPLY_FAILED:
	case FLIGHT_REPLY_NXDOMAIN:
		break;
	}
	return reply_failed(d, r, now_ms); /* the AAAA answer (or stale, or SERVFAIL) */
}

static size_t build_reply(struct deliver *d, const struct upstream_request *r,
			  const struct flight_reply *a, uint64_t now_ms)
{
	enum cache_result how;
	size_t len;

	if (r->ask.dns64_a)
		return build_dns64_reply(d, r, a, now_ms);

	switch (a->kind) {
	case FLIGHT_REPLY_CACHED:
		/* the table saw it in the cache a moment ago; should it be gone, as a failure */
		len = reply_from_cache(d, r, now_ms, false, &how);
		return len ? len : reply_failed(d, r, now_ms);
	case FLIGHT_REPLY_FAILED:
		return reply_failed(d, r, now_ms);
	case FLIGHT_REPLY_ANSWER:
		return reply_answer(d, r, a, now_ms);
	case FLIGHT_REPLY_SERVFAIL:
		upstream_bump(&d->n->servfail);
		return reply_servfail(d, r);
	case FLIGHT_REPLY_NXDOMAIN:
		return reply_nxdomain(d, r);
	}
	return 0;
}

void deliver_reply(void *env, unsigned worker, const struct upstream_request *r,
		   const struct flight_reply *a, uint64_t now_ms)
{
	struct deliver *d = env;

	send_reply(d, worker, r, build_reply(d, r, a, now_ms), now_ms);
}

int deliver_init(struct deliver *d, struct cache *cache, struct upstream_counters *n,
		 struct completion_ring **completions, unsigned n_workers)
{
	d->cache = cache;
	d->n = n;
	d->completions = completions;
	d->n_workers = n_workers;
	d->n_held = 0;
	d->signal_owed = false;
	d->top_sampler = (struct talkers_sampler){0, 0};
	d->udp.n = 0;
	d->udp.used = 0;
	d->held = calloc(n_workers, sizeof *d->held);
	return d->held ? 0 : -1;
}

void deliver_free(struct deliver *d)
{
	for (unsigned i = 0; d->held && i < d->n_workers; i++) {
		while (d->held[i].head) {
			struct held_reply *h = d->held[i].head;
			d->held[i].head = h->next;
			free(h->c.framed);
			free(h);
		}
	}
	free(d->held);
	d->held = NULL;
	d->n_held = 0;
}
