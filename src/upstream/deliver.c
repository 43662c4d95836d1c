/*
 * upstream/deliver.c — the resolver thread's replies to waiting clients.
 *
 * UDP replies go straight out on the socket the query came in on (sendto
 * from this thread; the worker keeps reading it). A TCP connection's byte
 * stream belongs to its worker, so a TCP reply is framed into a malloc'd
 * buffer and put on that worker's completion ring (single producer: this
 * thread; single consumer: the worker), whose eventfd is written once per
 * loop turn (signal_completions). A full ring drops the reply, counted.
 *
 * Every reply is built in u->buf with the client's own ID, question case,
 * EDNS and cookie, from the cache (TTLs aged to now) or from the message
 * libunbound gave when the cache would not keep it.
 */
#include "upstream/internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnstap/dnstap.h"
#include "querylog/querylog.h"
#include "top/top.h"

/* The workers count the replies they send; these are the resolver's,
 * counted before the client can see the reply (a scrape after it includes it). */
static void count_reply(struct upstream *u)
{
	upstream_bump(&u->n.rcode[dns_reply_rcode_slot(u->buf, false)]);
	if (dns_reply_truncated(u->buf))
		upstream_bump(&u->n.truncated);
}

static void deliver_tcp(struct upstream *u, unsigned worker, const struct upstream_request *r,
			size_t len)
{
	struct completion_ring *ring = u->completions[worker];
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
	uint8_t *framed;

	if (tail - head == COMPLETION_SLOTS || !(framed = malloc(len + 2))) {
		upstream_bump(&u->n.dropped);
		return;
	}
	framed[0] = (uint8_t)(len >> 8);
	framed[1] = (uint8_t)len;
	memcpy(framed + 2, u->buf, len);
	ring->slots[tail & (COMPLETION_SLOTS - 1)] = (struct upstream_completion){
		.conn = r->conn, .conn_gen = r->conn_gen, .framed = framed, .len = len + 2};
	count_reply(u);
	atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
	ring->signal_pending = true;
}

void deliver(struct upstream *u, unsigned worker, const struct upstream_request *r, size_t len)
{
	if (len == 0)
		return;
	if (r->transport == UPSTREAM_UDP) {
		count_reply(u);
		sendto(r->fd, u->buf, len, MSG_DONTWAIT | MSG_NOSIGNAL,
		       (const struct sockaddr *)&r->peer, r->peer_len);
	} else if (r->transport == UPSTREAM_TCP) {
		deliver_tcp(u, worker, r, len);
	}
	if (top_sample(&u->top_sampler)) /* its NXDOMAIN or SERVFAIL: the worker counted the query */
		top_note_reply(TOP_RESOLVER, NULL, u->buf, len);
	if (r->log_reply)
		querylog_add(QUERYLOG_RESOLVER, &r->peer,
			     r->transport == UPSTREAM_TCP ? QUERY_TCP : QUERY_UDP,
			     QUERY_SOURCE_UPSTREAM, u->buf, len);
	if (r->tap_reply) /* dnstap: the worker recorded the query; this is its reply */
		dnstap_client(DNSTAP_PRODUCER_RESOLVER, &r->peer,
			      r->transport == UPSTREAM_TCP ? QUERY_TCP : QUERY_UDP, NULL, 0,
			      u->buf, len);
}

void signal_completions(struct upstream *u)
{
	uint64_t one = 1;

	for (unsigned i = 0; i < u->n_workers; i++) {
		struct completion_ring *ring = u->completions[i];
		if (ring->signal_pending) {
			ring->signal_pending = false;
			ssize_t ignored = write(ring->efd, &one, sizeof one);
			(void)ignored; /* EAGAIN: the counter is already non-zero */
		}
	}
}

static void begin_reply(struct dns_writer *w, struct upstream *u, const struct upstream_request *r)
{
	dns_response_begin(w, u->buf, r->reply_limit, &r->q, DNS_R_NOERROR);
	if (r->has_cookie)
		dns_response_set_server_cookie(w, r->cookie);
}

size_t reply_from_cache(struct upstream *u, const struct upstream_request *r,
			bool allow_stale, enum cache_result *how)
{
	struct dns_writer w;

	begin_reply(&w, u, r);
	*how = cache_replay(u->cache, &w, u->now_ms / 1000, allow_stale);
	if (*how == CACHE_MISS)
		return 0;
	return dns_response_finish(&w, r->udp_payload);
}

size_t reply_servfail(struct upstream *u, const struct upstream_request *r)
{
	struct dns_writer w;

	begin_reply(&w, u, r);
	dns_response_set_rcode(&w, DNS_R_SERVFAIL);
	return dns_response_finish(&w, r->udp_payload);
}

/* Autopath found no candidate: q's own local answer, NXDOMAIN with the zone's SOA. */
size_t reply_nxdomain(struct upstream *u, const struct upstream_request *r)
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

void answer_failed(struct upstream *u, unsigned worker, const struct upstream_request *r)
{
	enum cache_result how;
	size_t len = reply_from_cache(u, r, true, &how);

	if (len) {
		upstream_bump(how == CACHE_STALE ? &u->n.stale : &u->n.answers);
	} else {
		len = reply_servfail(u, r);
		upstream_bump(&u->n.servfail);
	}
	deliver(u, worker, r, len);
}

void answer_with(struct upstream *u, unsigned worker, const struct upstream_request *r,
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
