/*
 * server/tcp.c — DNS over TCP (RFC 7766): 2-byte length framing, several
 * queries per connection answered in order, idle timeout, a connection cap.
 *
 * Replies to every complete query in one read are gathered in the worker's
 * scratch buffer and sent with one send(). When the socket takes less, the
 * rest is copied to a per-connection heap buffer and the connection stops
 * reading until it drains: a client that does not read its replies costs
 * memory for one batch, never more, and never blocks the worker.
 */
#include "server/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

static void set_interest(struct worker *w, uint32_t index, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.u64 = EV_DATA(EV_CONN, index)};

	epoll_ctl(w->epfd, EPOLL_CTL_MOD, w->conns[index].fd, &ev);
}

static void close_conn(struct worker *w, uint32_t index)
{
	struct tcp_conn *c = &w->conns[index];

	close(c->fd); /* also leaves the epoll set */
	free(c->pending);
	c->pending = NULL;
	c->open = false;
	uint32_t last = w->active[--w->n_active];
	w->active[c->active_pos] = last;
	w->conns[last].active_pos = c->active_pos;
	w->free_slots[w->n_free++] = index;
	atomic_fetch_sub(&w->server->tcp_conns, 1);
}

/* Claim a place under the shared cap; false when every place is taken. */
static bool reserve_conn(struct server *s)
{
	unsigned n = atomic_load(&s->tcp_conns);

	do {
		if (n >= s->tcp_max_conns)
			return false;
	} while (!atomic_compare_exchange_weak(&s->tcp_conns, &n, n + 1));
	return true;
}

void tcp_accept(struct worker *w, int listen_fd)
{
	/* Bounded so a connect flood cannot keep this worker from its UDP. */
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage peer;
		socklen_t peer_len = sizeof peer;
		int fd = accept4(listen_fd, (struct sockaddr *)&peer, &peer_len,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (w->n_free == 0 || !reserve_conn(w->server)) {
			close(fd); /* over the cap: UDP and open connections are unaffected */
			continue;
		}
		uint32_t index = w->free_slots[--w->n_free];
		struct tcp_conn *c = &w->conns[index];
		*c = (struct tcp_conn){.open = true, .fd = fd, .last_active_ms = w->now_ms,
				       .active_pos = w->n_active, .peer = peer,
				       .gen = ++w->next_gen};
		w->active[w->n_active++] = index;
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_DATA(EV_CONN, index)};
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			close_conn(w, index);
	}
}

/* Keep what the socket did not take. false on ENOMEM (caller closes). */
static bool keep_pending(struct tcp_conn *c, const uint8_t *data, size_t len)
{
	c->pending = malloc(len);
	if (!c->pending)
		return false;
	memcpy(c->pending, data, len);
	c->pending_len = len;
	c->pending_off = 0;
	return true;
}

enum send_result { SENT_ALL, SENT_PART, SEND_FAILED };

static enum send_result send_some(int fd, const uint8_t *data, size_t len, size_t *done)
{
	*done = 0;
	while (*done < len) {
		ssize_t n = send(fd, data + *done, len - *done, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0)
			*done += (size_t)n;
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return SENT_PART;
		else
			return SEND_FAILED;
	}
	return SENT_ALL;
}

/* Send scratch[0..len); false when the connection was closed. */
static bool send_replies(struct worker *w, uint32_t index, size_t len)
{
	struct tcp_conn *c = &w->conns[index];
	size_t done;

	switch (send_some(c->fd, w->tcp_out, len, &done)) {
	case SENT_ALL:
		return true;
	case SENT_PART:
		if (!keep_pending(c, w->tcp_out + done, len - done))
			break;
		set_interest(w, index, EPOLLOUT);
		return true;
	case SEND_FAILED:
		break;
	}
	close_conn(w, index);
	return false;
}

/* Queue a query the resolver answers later, through our completion queue. */
static void defer(struct worker *w, const struct query_ctx *ctx, uint32_t index)
{
	if (ctx->upstream == QUERY_UPSTREAM_NONE)
		return;
	w->request.transport = UPSTREAM_TCP;
	w->request.conn = index;
	w->request.conn_gen = w->conns[index].gen;
	worker_submit(w, ctx->upstream);
}

static uint16_t frame_length(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/*
 * Answer every complete query in the input buffer, stopping early if the
 * socket stops taking replies. false when the connection was closed.
 */
static bool answer_buffered(struct worker *w, uint32_t index)
{
	struct tcp_conn *c = &w->conns[index];
	struct query_ctx ctx;
	size_t off = 0, out = 0;

	urcu_memb_read_lock();
	while (c->in_len - off >= 2 && !c->pending) {
		uint16_t mlen = frame_length(c->in + off);
		if (mlen == 0 || mlen > TCP_QUERY_MAX) {
			urcu_memb_read_unlock();
			close_conn(w, index); /* not DNS framing we can follow */
			return false;
		}
		if (c->in_len - off - 2 < mlen)
			break;
		if (TCP_OUT_SCRATCH - out < DNS_MAX_MESSAGE + 2) {
			if (!send_replies(w, index, out)) {
				urcu_memb_read_unlock();
				return false;
			}
			out = 0;
			continue; /* re-check pending before answering more */
		}
		worker_query_ctx(w, &ctx, QUERY_TCP, &c->peer);
		size_t len = query_handle(c->in + off + 2, mlen, w->tcp_out + out + 2,
					  DNS_MAX_MESSAGE, &ctx);
		if (querylog_sample(&w->querylog_count))
			worker_log_query(w, &ctx, &c->peer, w->tcp_out + out + 2, len);
		defer(w, &ctx, index);
		if (len) {
			w->tcp_out[out] = (uint8_t)(len >> 8);
			w->tcp_out[out + 1] = (uint8_t)len;
			out += 2 + len;
		}
		off += 2u + mlen;
	}
	urcu_memb_read_unlock();
	worker_wake_upstream(w);
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
	return out == 0 || send_replies(w, index, out);
}

static void read_queries(struct worker *w, uint32_t index)
{
	struct tcp_conn *c = &w->conns[index];
	ssize_t n = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, 0);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
		close_conn(w, index);
		return;
	}
	if (n < 0)
		return;
	c->in_len += (size_t)n;
	worker_read_clock(w);
	c->last_active_ms = w->now_ms;
	answer_buffered(w, index);
}

/* The socket can take more: send pending bytes, then resume reading. */
static void drain_pending(struct worker *w, uint32_t index)
{
	struct tcp_conn *c = &w->conns[index];
	size_t done;

	switch (send_some(c->fd, c->pending + c->pending_off,
			  c->pending_len - c->pending_off, &done)) {
	case SEND_FAILED:
		close_conn(w, index);
		return;
	case SENT_PART:
		c->pending_off += done;
		c->last_active_ms = w->now_ms;
		return;
	case SENT_ALL:
		break;
	}
	free(c->pending);
	c->pending = NULL;
	c->last_active_ms = w->now_ms;
	set_interest(w, index, EPOLLIN);
	answer_buffered(w, index);
}

void tcp_conn_event(struct worker *w, uint32_t index, uint32_t events)
{
	struct tcp_conn *c = &w->conns[index];

	if (!c->open)
		return;
	if (events & (EPOLLERR | EPOLLHUP)) {
		close_conn(w, index);
		return;
	}
	if ((events & EPOLLOUT) && c->pending)
		drain_pending(w, index);
	else if (events & EPOLLIN)
		read_queries(w, index);
}

/* Walk backwards: closing moves the last active entry into the hole. */
void tcp_sweep_idle(struct worker *w)
{
	uint64_t timeout = atomic_load_explicit(&w->server->tcp_idle_timeout_ms,
						memory_order_relaxed);

	for (uint32_t i = w->n_active; i-- > 0;) {
		uint32_t index = w->active[i];
		if (w->now_ms - w->conns[index].last_active_ms >= timeout)
			close_conn(w, index);
	}
}

bool tcp_flush_all(struct worker *w)
{
	for (uint32_t i = 0; i < w->n_active; i++)
		if (w->conns[w->active[i]].pending)
			return false;
	return true;
}

void tcp_close_all(struct worker *w)
{
	while (w->n_active > 0)
		close_conn(w, w->active[w->n_active - 1]);
}

/* Queue behind bytes the socket has not taken yet; false on ENOMEM. */
static bool append_pending(struct tcp_conn *c, const uint8_t *data, size_t len)
{
	size_t left = c->pending_len - c->pending_off;
	uint8_t *grown = malloc(left + len);

	if (!grown)
		return false;
	memcpy(grown, c->pending + c->pending_off, left);
	memcpy(grown + left, data, len);
	free(c->pending);
	c->pending = grown;
	c->pending_len = left + len;
	c->pending_off = 0;
	return true;
}

/*
 * An upstream reply, possibly out of order with the connection's other
 * replies (RFC 7766 section 7 allows it: clients match on the ID). A slot
 * whose connection closed, or now holds another one, drops it.
 */
void tcp_deliver(struct worker *w, uint32_t index, uint32_t gen, uint8_t *framed, size_t len)
{
	struct tcp_conn *c = index < w->max_conns ? &w->conns[index] : NULL;
	size_t done;

	if (!c || !c->open || c->gen != gen) {
		free(framed);
		return;
	}
	c->last_active_ms = w->now_ms;
	if (c->pending) {
		if (!append_pending(c, framed, len))
			close_conn(w, index);
		free(framed);
		return;
	}
	switch (send_some(c->fd, framed, len, &done)) {
	case SENT_ALL:
		break;
	case SENT_PART:
		if (!keep_pending(c, framed + done, len - done)) {
			close_conn(w, index);
			break;
		}
		set_interest(w, index, EPOLLOUT);
		break;
	case SEND_FAILED:
		close_conn(w, index);
		break;
	}
	free(framed);
}
