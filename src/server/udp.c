/*
 * server/udp.c — UDP in batches: one recvmmsg fills up to UDP_BATCH slots,
 * each query is answered into the output buffer right after the previous
 * reply, and one sendmmsg sends every reply (sendto for a batch of one: util/datagram.h).
 * Replies leave from the bound address (we never bind a wildcard), so no per-packet source
 * address handling is needed.
 */
#include "server/internal.h"

#include <errno.h>
#include <string.h>
#include <urcu/urcu-memb.h>

#include "log/log.h"
#include "rrl/rrl.h"
#include "util/datagram.h"

void server_udp_batch_init(struct udp_batch *b)
{
	for (int i = 0; i < UDP_BATCH; i++) {
		b->rx_iov[i][0] = (struct iovec){.iov_base = b->in_head[i], .iov_len = UDP_IN_HEAD};
		b->rx_iov[i][1] = (struct iovec){.iov_base = b->in_tail[i],
						 .iov_len = UDP_IN_MAX - UDP_IN_HEAD};
		b->rx[i].msg_hdr = (struct msghdr){
			.msg_name = &b->peer[i],
			.msg_namelen = sizeof b->peer[i],
			.msg_iov = b->rx_iov[i],
			.msg_iovlen = 2,
		};
	}
}

/* Query i in one piece: its head slot, or head and tail joined when it is longer. */
static const uint8_t *query_bytes(struct udp_batch *b, int i)
{
	size_t len = b->rx[i].msg_len;

	if (len <= UDP_IN_HEAD)
		return b->in_head[i];
	memcpy(b->in_joined, b->in_head[i], UDP_IN_HEAD);
	memcpy(b->in_joined + UDP_IN_HEAD, b->in_tail[i], len - UDP_IN_HEAD);
	return b->in_joined;
}

/* recvmmsg rewrites only msg_namelen (and msg_len, msg_flags) of the slots it filled. */
static void reset_used_slots(struct udp_batch *b, int n)
{
	for (int i = 0; i < n; i++)
		b->rx[i].msg_hdr.msg_namelen = sizeof b->peer[i];
}

/* Queue a query the resolver answers later, straight from its own thread. */
static void defer(struct worker *w, const struct query_ctx *ctx, int fd, int i)
{
	struct upstream_request *r = w->request;

	if (ctx->upstream == QUERY_UPSTREAM_NONE)
		return;
	r->transport = UPSTREAM_UDP;
	r->fd = fd;
	r->peer = w->udp.peer[i];
	r->peer_len = w->udp.rx[i].msg_hdr.msg_namelen;
	server_worker_submit(w, ctx->upstream);
}

/* rrl.*: the reply as it may go out (whole, or cut to a TC slip), or 0 when dropped. */
static size_t rate_limited(struct worker *w, const struct sockaddr_storage *peer,
			   uint8_t *reply, size_t len)
{
	switch (rrl_apply(peer, reply, &len, w->now_ms / 1000)) {
	case RRL_PASS:
		break;
	case RRL_SLIP:
		w->stats.rrl_slipped++;
		break;
	case RRL_DROP:
		w->stats.rrl_dropped++;
		break;
	}
	return len;
}

/* Answer rx[0..n) into tx; returns how many replies there are to send. */
static int answer_batch(struct worker *w, int fd, int n)
{
	struct udp_batch *b = &w->udp;
	struct query_ctx ctx;
	size_t used = 0; /* bytes of out taken by this batch's replies */
	int out = 0;

	urcu_memb_read_lock();
	for (int i = 0; i < n; i++)
		if (b->rx[i].msg_hdr.msg_flags & MSG_TRUNC) /* dropped below: nothing to fetch */
			b->prepared[i].zone_hashed = b->prepared[i].cache_keyed = false;
		else
			query_prepare(query_bytes(b, i), b->rx[i].msg_len, &b->prepared[i]);
	query_prefetch(b->prepared, (size_t)n);
	bool tap = dnstap_client_on();
	if (tap)
		dnstap_batch_begin(w->id); /* one clock read for the batch's records */
	for (int i = 0; i < n; i++) {
		if (b->rx[i].msg_hdr.msg_flags & MSG_TRUNC) {
			w->stats.received++;
			w->stats.dropped++; /* larger than any query we accept */
			continue;
		}
		server_worker_query_ctx(w, &ctx, QUERY_UDP, &b->peer[i]);
		uint8_t *reply = b->out + used; /* room for UDP_OUT_MAX: at most UDP_BATCH replies */
		/* query_bytes again: a longer query's joined bytes may be another's by now */
		size_t len = query_handle_prepared(&b->prepared[i], query_bytes(b, i),
						   b->rx[i].msg_len, reply, UDP_OUT_MAX, &ctx);
		if (querylog_sample(&w->querylog_count))
			server_worker_log_query(w, &ctx, &b->peer[i], reply, len);
		if (dnstap_client_on())
			server_worker_tap(w, &ctx, &b->peer[i], server_worker_udp_local(w, fd),
					  query_bytes(b, i), b->rx[i].msg_len, reply, len);
		server_worker_note_talkers(w, &ctx, &b->peer[i], reply, len);
		defer(w, &ctx, fd, i);
		if (len == 0 || (len = rate_limited(w, &b->peer[i], reply, len)) == 0)
			continue;
		used += len;
		b->tx_iov[out] = (struct iovec){.iov_base = reply, .iov_len = len};
		b->tx[out].msg_hdr = (struct msghdr){
			.msg_name = &b->peer[i],
			.msg_namelen = b->rx[i].msg_hdr.msg_namelen,
			.msg_iov = &b->tx_iov[out],
			.msg_iovlen = 1,
		};
		out++;
	}
	if (tap)
		dnstap_batch_end(w->id);
	urcu_memb_read_unlock();
	return out;
}

/* Up to size datagrams into the batch's slots: how many, or -1 (errno set). */
static int receive(struct worker *w, int fd, unsigned size)
{
	if (size > 1)
		return recvmmsg(fd, w->udp.rx, size, MSG_DONTWAIT, NULL);
	/* one: recvmsg, 50 ns cheaper than recvmmsg of one */
	ssize_t len = recvmsg(fd, &w->udp.rx[0].msg_hdr, MSG_DONTWAIT);
	if (len < 0)
		return -1;
	w->udp.rx[0].msg_len = (unsigned)len;
	return 1;
}

/*
 * How many datagrams a polled read asks for. Asked for more than the
 * socket holds, recvmmsg tries once more inside the kernel and finds
 * nothing: a lone query's read took 970 ns asking for 64 against 750 with
 * recvmsg (docs/performance.md, "Cold misses", item 19). So once LONE_READS reads
 * in a row have each found one datagram, the worker asks for one, but for
 * a whole batch every LONE_READS-th read: a read of more than one ends
 * the run, so queries that stop coming alone are read one at a time for
 * LONE_READS - 1 reads at most.
 */
#define LONE_READS 8

static unsigned polled_read_size(const struct worker *w)
{
	return w->udp_alone >= LONE_READS && w->udp_alone % LONE_READS ? 1 : UDP_BATCH;
}

/* n received queries answered and sent; true when the batch was full (more may wait). */
static bool answer_received(struct worker *w, int fd, int n)
{
	server_worker_read_clock(w);
	datagram_send_all(fd, w->udp.tx, (unsigned)answer_batch(w, fd, n), 0);
	server_worker_wake_upstream(w);
	reset_used_slots(&w->udp, n);
	return n == UDP_BATCH;
}

/* The n queries read first, then more while batches come full, UDP_ROUNDS batches at most. */
static void drain_from(struct worker *w, int fd, int n)
{
	for (int round = 1; answer_received(w, fd, n) && round < UDP_ROUNDS; round++)
		if ((n = receive(w, fd, UDP_BATCH)) <= 0)
			return;
}

void server_udp_drain(struct worker *w, int fd)
{
	int n = receive(w, fd, UDP_BATCH);

	if (n > 0)
		drain_from(w, fd, n);
}

void server_udp_drain_polled(struct worker *w, int fd)
{
	int n = receive(w, fd, polled_read_size(w));
	bool unwatched = false;

	if (n <= 0)
		return;
	w->udp_alone = n == 1 ? w->udp_alone + 1 : 0;
	if (n == UDP_BATCH) {
		w->stats.udp_busy_wakeups++;
		unwatched = server_worker_unwatch_udp(w, fd);
	}
	drain_from(w, fd, n);
	/* back in the set, which reports it at once if more came meanwhile */
	if (unwatched && !server_worker_rewatch_udp(w) && !w->rewatch_failed) {
		w->rewatch_failed = true;
		log_warn("a UDP socket could not go back into the worker's epoll set; trying again",
			 "error", strerror(errno));
	}
}
