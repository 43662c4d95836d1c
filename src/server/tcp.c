/*
 * server/tcp.c — DNS over TCP (RFC 7766): 2-byte length framing, several
 * queries per connection, answered in order when local and as they come
 * back when they need the upstream; an idle timeout; caps on everything a
 * client controls.
 *
 * Replies to every complete query in one read are gathered in the worker's
 * scratch buffer and sent with one send(). When the socket takes less, the
 * rest is kept in the connection's list of unsent chunks (the bytes copied
 * once; an upstream reply's buffer is adopted as it is), and the connection
 * stops reading until the list drains.
 *
 * What one client can cost (docs/security.md):
 * - connections: none from outside listen.allow (checked at accept, so an
 *   outsider cannot hold a place an allowed client needs);
 *   listen.tcp_max_connections in all, and
 *   listen.tcp_max_connections_per_client from one client (util/client.h);
 *   past either, a new connection is closed at accept;
 * - queries waiting for the upstream on one connection: at most
 *   listen.tcp_max_pending_queries; at the cap the connection is not read
 *   until a reply comes back (a reply the resolver lost leaves it idle, and
 *   the idle timeout closes it);
 * - unsent reply bytes: one budget for all connections of all workers
 *   (listen.tcp_output_budget, as Unbound's stream-wait-size), counting
 *   what waits in localdns and what the kernel holds in the connection's
 *   send queue (SIOCOUTQ, asked when a send was not taken whole, then at
 *   every drain and sweep until it is empty: a queue never full holds at
 *   most the small fixed SO_SNDBUF every connection gets, as its receive
 *   queue holds at most SO_RCVBUF); when an addition takes the total past
 *   it, the connection that holds the most, on whichever worker, is closed
 *   until the total is back under it: each worker publishes what its
 *   heaviest holds, and one that is not the heaviest asks the worker that
 *   is (shed_fd) instead of closing a lighter one of its own;
 * - time: a query must be complete within listen.tcp_query_timeout of its
 *   first byte (a byte-at-a-time client is closed), the first one within
 *   that of the connection (a silent one is closed), and a connection with
 *   nothing to do is closed after listen.tcp_idle_timeout.
 */
#include "server/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "util/client.h"
#include "util/wake.h"

/* ---- connections ------------------------------------------------------------ */

/* Reading stops while replies wait to be sent, or too many wait for the upstream. */
static bool may_read(const struct worker *w, const struct tcp_conn *c)
{
	return !c->out_head &&
	       c->waiting < atomic_load_explicit(&w->server->tcp_max_waiting, memory_order_relaxed);
}

/* Ask epoll for what the connection can use now: output to drain, or input. */
static void update_interest(struct worker *w, uint32_t index)
{
	struct tcp_conn *c = &w->conns[index];
	uint32_t events = c->out_head ? EPOLLOUT : may_read(w, c) && !c->ready ? EPOLLIN : 0;

	if (events == c->interest)
		return;
	struct epoll_event ev = {.events = events, .data.u64 = EV_DATA(EV_CONN, index)};
	epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	c->interest = events;
}

static void free_output(struct server *s, struct tcp_conn *c)
{
	while (c->out_head) {
		struct out_chunk *k = c->out_head;
		c->out_head = k->next;
		if (k->data != k->bytes)
			free(k->data);
		free(k);
	}
	c->out_tail = NULL;
	atomic_fetch_sub_explicit(&s->tcp_output_bytes, c->out_bytes, memory_order_relaxed);
	c->out_bytes = 0;
}

static void close_conn(struct worker *w, uint32_t index)
{
	struct server *s = w->server;
	struct tcp_conn *c = &w->conns[index];

	close(c->fd); /* also leaves the epoll set */
	free_output(s, c);
	atomic_fetch_sub_explicit(&s->tcp_output_bytes, c->kernel_bytes, memory_order_relaxed);
	c->kernel_bytes = 0;
	c->open = false;
	c->ready = false; /* its entry in worker.ready is skipped */
	uint32_t last = w->active[--w->n_active];
	w->active[c->active_pos] = last;
	w->conns[last].active_pos = c->active_pos;
	w->free_slots[w->n_free++] = index;
	atomic_fetch_sub(&s->tcp_per_source[c->source_slot], 1);
	atomic_fetch_sub(&s->tcp_conns, 1);
}

static void close_for(struct worker *w, uint32_t index, enum tcp_event why)
{
	w->tcp_events[why]++;
	close_conn(w, index);
}

/* Claim a place under a shared cap; false when every place is taken. */
static bool reserve(_Atomic unsigned *count, unsigned cap)
{
	unsigned n = atomic_load(count);

	do {
		if (n >= cap)
			return false;
	} while (!atomic_compare_exchange_weak(count, &n, n + 1));
	return true;
}

static bool reserve_source(_Atomic uint16_t *count, unsigned cap)
{
	uint16_t n = atomic_load(count);

	do {
		if (n >= cap || n == UINT16_MAX)
			return false;
	} while (!atomic_compare_exchange_weak(count, &n, (uint16_t)(n + 1)));
	return true;
}

/* The client's slot: who it is (util/client.h), through the server's key. */
static uint16_t source_slot(const struct server *s, const struct sockaddr_storage *peer)
{
	uint8_t prefix[CLIENT_PREFIX_MAX];
	size_t n = client_prefix(peer, s->client_ipv6_bits, prefix);

	return (uint16_t)(dns_siphash13(s->source_key, prefix, n) & (TCP_SOURCE_SLOTS - 1));
}

static bool allowed(const struct sockaddr_storage *peer)
{
	urcu_memb_read_lock();
	bool ok = query_client_may_ask(peer);
	urcu_memb_read_unlock();
	return ok;
}

/* May this client open one more connection? Counts it when so. */
static bool admit(struct worker *w, const struct sockaddr_storage *peer, uint16_t *slot)
{
	struct server *s = w->server;

	if (!allowed(peer)) {
		w->tcp_events[TCP_REFUSED_NOT_ALLOWED]++;
		return false;
	}
	if (w->n_free == 0 || !reserve(&s->tcp_conns, s->tcp_max_conns)) {
		w->tcp_events[TCP_REFUSED_MAX_CONNECTIONS]++;
		return false;
	}
	*slot = source_slot(s, peer);
	if (!reserve_source(&s->tcp_per_source[*slot],
			    atomic_load_explicit(&s->tcp_max_per_source, memory_order_relaxed))) {
		atomic_fetch_sub(&s->tcp_conns, 1);
		w->tcp_events[TCP_REFUSED_PER_CLIENT]++;
		return false;
	}
	return true;
}

void server_tcp_accept(struct worker *w, int listen_fd)
{
	/* Bounded so a connect flood cannot keep this worker from its UDP. */
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage peer;
		socklen_t peer_len = sizeof peer;
		uint16_t slot;
		int fd = accept4(listen_fd, (struct sockaddr *)&peer, &peer_len,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (!admit(w, &peer, &slot)) {
			close(fd); /* over a cap: UDP and open connections are unaffected */
			continue;
		}
		/* Its kernel buffers are the listener's: small and fixed (server.c). */
		uint32_t index = w->free_slots[--w->n_free];
		struct tcp_conn *c = &w->conns[index];
		/* its first query is due within tcp_query_timeout, as a query's last byte is */
		*c = (struct tcp_conn){.open = true, .fd = fd, .last_active_ms = w->now_ms,
				       .partial_since_ms = w->now_ms, .active_pos = w->n_active,
				       .peer = peer, .source_slot = slot, .interest = EPOLLIN,
				       .gen = ++w->next_gen};
		w->active[w->n_active++] = index;
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_DATA(EV_CONN, index)};
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			close_conn(w, index);
			continue;
		}
		/* dnstap's response_address: one syscall per connection, only while it is on */
		socklen_t local_len = sizeof c->local;
		if (dnstap_client_on() &&
		    getsockname(fd, (struct sockaddr *)&c->local, &local_len) < 0)
			c->local.ss_family = AF_UNSPEC;
	}
}

/* ---- the output budget ------------------------------------------------------------- */

/* What a connection holds of listen.tcp_output_budget. */
static uint64_t weight(const struct tcp_conn *c)
{
	return c->out_bytes + c->kernel_bytes;
}

/* How much of c's output the kernel still holds (SIOCOUTQ), counted in the total. */
static void count_kernel_bytes(struct worker *w, struct tcp_conn *c)
{
	_Atomic uint64_t *total = &w->server->tcp_output_bytes;
	int queued = 0;
	size_t now = ioctl(c->fd, SIOCOUTQ, &queued) == 0 && queued > 0 ? (size_t)queued : 0;

	if (now >= c->kernel_bytes)
		atomic_fetch_add_explicit(total, now - c->kernel_bytes, memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(total, c->kernel_bytes - now, memory_order_relaxed);
	c->kernel_bytes = now;
}

/* This worker's heaviest connection (*worst, UINT32_MAX: none holds
 * anything): what it holds, published for the other workers. */
static uint64_t find_heaviest(struct worker *w, uint32_t *worst)
{
	uint64_t most = 0;

	*worst = UINT32_MAX;
	for (uint32_t i = 0; i < w->n_active; i++) {
		uint64_t held = weight(&w->conns[w->active[i]]);
		if (held > most) {
			most = held;
			*worst = w->active[i];
		}
	}
	atomic_store_explicit(&w->heaviest, most, memory_order_relaxed);
	return most;
}

/* The worker whose heaviest connection holds more than most (as each last
 * said), or NULL. */
static struct worker *heavier_elsewhere(const struct worker *w, uint64_t most)
{
	const struct server *s = w->server;
	struct worker *heavier = NULL;

	for (unsigned i = 0; i < s->n_workers; i++) {
		struct worker *o = s->workers[i];
		uint64_t held = atomic_load_explicit(&o->heaviest, memory_order_relaxed);
		if (o != w && held > most) {
			most = held;
			heavier = o;
		}
	}
	return heavier;
}

static void ask_to_shed(struct worker *o)
{
	if (!atomic_exchange(&o->shed_asked, true) && !wake_send(o->shed_fd))
		atomic_store(&o->shed_asked, false); /* cannot fail: a counter far from full */
}

/*
 * Past the budget: close the connection that holds the most, while the
 * total is over it. When another worker's holds more, that worker is asked
 * to close it (it then does this itself, with fresh figures), so a light
 * connection is never closed for a heavy one elsewhere.
 */
static void keep_to_output_budget(struct worker *w)
{
	struct server *s = w->server;
	uint64_t budget = atomic_load_explicit(&s->tcp_output_budget, memory_order_relaxed);
	bool closed = false;
	uint32_t worst;

	while (atomic_load_explicit(&s->tcp_output_bytes, memory_order_relaxed) > budget) {
		struct worker *other = heavier_elsewhere(w, find_heaviest(w, &worst));
		if (other) {
			ask_to_shed(other);
			break;
		}
		if (worst == UINT32_MAX)
			break;
		close_for(w, worst, TCP_CLOSED_OUTPUT_BUDGET);
		closed = true;
	}
	if (closed)
		find_heaviest(w, &worst); /* what the others see: after the closes */
}

void server_tcp_shed(struct worker *w)
{
	if (wake_take(w->shed_fd) < 0)
		return;
	atomic_store(&w->shed_asked, false);
	keep_to_output_budget(w);
}

/* ---- output ------------------------------------------------------------------ */

/*
 * Put data[off..len) at the end of the connection's unsent list: adopted
 * (taken over and freed later) when adopt, else copied. false when the
 * connection was closed (out of memory, or it held the most past the
 * output budget); an adopted buffer is freed then.
 */
static bool queue_output(struct worker *w, uint32_t index, uint8_t *data, size_t len, size_t off,
			 bool adopt)
{
	struct tcp_conn *c = &w->conns[index];
	size_t copy = adopt ? 0 : len - off;
	struct out_chunk *k = malloc(sizeof *k + copy);

	if (!k) {
		if (adopt)
			free(data);
		close_conn(w, index);
		return false;
	}
	k->next = NULL;
	if (adopt) {
		*k = (struct out_chunk){.data = data, .len = len, .off = off};
	} else {
		memcpy(k->bytes, data + off, copy);
		*k = (struct out_chunk){.data = k->bytes, .len = copy};
	}
	if (c->out_tail)
		c->out_tail->next = k;
	else
		c->out_head = k;
	c->out_tail = k;
	c->out_bytes += k->len - k->off;
	atomic_fetch_add_explicit(&w->server->tcp_output_bytes, k->len - k->off,
				  memory_order_relaxed);
	count_kernel_bytes(w, c); /* the socket took less than we had: its queue is full */
	update_interest(w, index);
	keep_to_output_budget(w);
	return c->open && c->out_tail == k;
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
		return queue_output(w, index, w->tcp_out, len, done, false);
	case SEND_FAILED:
		break;
	}
	close_conn(w, index);
	return false;
}

/* ---- input ------------------------------------------------------------------- */

/* Queue a query the resolver answers later, through our completion queue. */
static void defer(struct worker *w, const struct query_ctx *ctx, uint32_t index)
{
	if (ctx->upstream == QUERY_UPSTREAM_NONE)
		return;
	w->request->transport = UPSTREAM_TCP;
	w->request->conn = index;
	w->request->conn_gen = w->conns[index].gen;
	w->request->peer = w->conns[index].peer;
	w->request->peer_len = w->conns[index].peer.ss_family == AF_INET6
		? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	if (server_worker_submit(w, ctx->upstream) && ctx->upstream == QUERY_UPSTREAM_ASK)
		w->conns[index].waiting++;
}

static uint16_t frame_length(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* Is what is left in the input buffer the start of a query still coming? */
static bool incomplete_query(const struct tcp_conn *c)
{
	return c->in_len > 0 && (c->in_len < 2 || c->in_len - 2 < frame_length(c->in));
}

/* Leave the rest of c's complete queries for a later turn (server_tcp_new_turn). */
static void defer_rest(struct worker *w, uint32_t index)
{
	struct tcp_conn *c = &w->conns[index];

	if (!c->ready) {
		c->ready = true;
		w->ready[w->n_ready++] = index;
	}
}

/*
 * Answer the complete queries in the input buffer, stopping early if the
 * socket stops taking replies, too many wait for the upstream, or this
 * connection or this turn has answered its share (the rest waits for the
 * next turn, so one client's pipelined burst cannot hold up the worker's
 * other sockets). false when the connection was closed.
 */
static bool answer_buffered(struct worker *w, uint32_t index)
{
	struct tcp_conn *c = &w->conns[index];
	struct query_ctx ctx;
	size_t off = 0, out = 0;
	unsigned answered = 0;

	urcu_memb_read_lock();
	while (c->in_len - off >= 2 && may_read(w, c)) {
		if (answered == TCP_CONN_QUERIES || w->tcp_turn_left == 0) {
			defer_rest(w, index);
			break;
		}
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
			continue; /* re-check the output list before answering more */
		}
		server_worker_query_ctx(w, &ctx, QUERY_TCP, &c->peer);
		size_t len = query_handle(c->in + off + 2, mlen, w->tcp_out + out + 2,
					  DNS_MAX_MESSAGE, &ctx);
		if (querylog_sample(&w->querylog_count))
			server_worker_log_query(w, &ctx, &c->peer, w->tcp_out + out + 2, len);
		if (dnstap_client_on())
			server_worker_tap(w, &ctx, &c->peer, &c->local, c->in + off + 2, mlen,
					  w->tcp_out + out + 2, len);
		server_worker_note_talkers(w, &ctx, &c->peer, w->tcp_out + out + 2, len);
		defer(w, &ctx, index);
		answered++;
		c->asked = true;
		w->tcp_turn_left--;
		if (len) {
			w->tcp_out[out] = (uint8_t)(len >> 8);
			w->tcp_out[out + 1] = (uint8_t)len;
			out += 2 + len;
		}
		off += 2u + mlen;
	}
	urcu_memb_read_unlock();
	server_worker_wake_upstream(w);
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
	if (!incomplete_query(c))
		c->partial_since_ms = 0;
	else if (!c->partial_since_ms)
		c->partial_since_ms = w->now_ms;
	if (out && !send_replies(w, index, out))
		return false;
	update_interest(w, index);
	return true;
}

static void read_queries(struct worker *w, uint32_t index)
{
	struct tcp_conn *c = &w->conns[index];

	if (!may_read(w, c) || c->ready || c->in_len == sizeof c->in)
		return; /* an event from before reading stopped; or its queries wait their turn */
	ssize_t n = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, 0);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
		close_conn(w, index);
		return;
	}
	if (n < 0)
		return;
	c->in_len += (size_t)n;
	server_worker_read_clock(w);
	c->last_active_ms = w->now_ms;
	answer_buffered(w, index);
}

/* The socket can take more: send unsent chunks, then resume reading. */
static void drain_output(struct worker *w, uint32_t index)
{
	struct tcp_conn *c = &w->conns[index];

	while (c->out_head) {
		struct out_chunk *k = c->out_head;
		size_t done;
		enum send_result r = send_some(c->fd, k->data + k->off, k->len - k->off, &done);
		k->off += done;
		c->out_bytes -= done;
		atomic_fetch_sub_explicit(&w->server->tcp_output_bytes, done, memory_order_relaxed);
		if (r == SEND_FAILED) {
			close_conn(w, index);
			return;
		}
		c->last_active_ms = w->now_ms;
		if (r == SENT_PART) {
			count_kernel_bytes(w, c);
			return;
		}
		c->out_head = k->next;
		if (k->data != k->bytes)
			free(k->data);
		free(k);
	}
	c->out_tail = NULL;
	count_kernel_bytes(w, c); /* the sweep follows it until the client has read it all */
	answer_buffered(w, index);
}

void server_tcp_conn_event(struct worker *w, uint32_t index, uint32_t events)
{
	struct tcp_conn *c = &w->conns[index];

	if (!c->open)
		return;
	if (events & (EPOLLERR | EPOLLHUP)) {
		close_conn(w, index);
		return;
	}
	if ((events & EPOLLOUT) && c->out_head)
		drain_output(w, index);
	else if (events & EPOLLIN)
		read_queries(w, index);
}

void server_tcp_new_turn(struct worker *w)
{
	uint32_t n = w->n_ready;

	w->tcp_turn_left = TCP_TURN_QUERIES;
	w->n_ready = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t index = w->ready[i];
		struct tcp_conn *c = &w->conns[index];
		if (!c->open || !c->ready)
			continue;
		c->ready = false;
		if (answer_buffered(w, index) && !c->ready)
			update_interest(w, index); /* all answered: read again */
	}
}

/* ---- time -------------------------------------------------------------------- */

/* Walk backwards: closing moves the last active entry into the hole. Also
 * follows the kernel's send queues still counted (the client reads them
 * without an event of ours), and publishes the heaviest connection. */
void server_tcp_sweep_idle(struct worker *w)
{
	struct server *s = w->server;
	uint64_t idle = atomic_load_explicit(&s->tcp_idle_timeout_ms, memory_order_relaxed);
	uint64_t query = atomic_load_explicit(&s->tcp_query_timeout_ms, memory_order_relaxed);
	uint32_t worst;

	for (uint32_t i = w->n_active; i-- > 0;) {
		uint32_t index = w->active[i];
		struct tcp_conn *c = &w->conns[index];
		if (c->kernel_bytes)
			count_kernel_bytes(w, c);
		if (c->partial_since_ms && w->now_ms - c->partial_since_ms >= query)
			close_for(w, index, c->asked || c->in_len ? TCP_CLOSED_SLOW_QUERY
								   : TCP_CLOSED_SILENT);
		else if (w->now_ms - c->last_active_ms >= idle)
			close_for(w, index, TCP_CLOSED_IDLE);
	}
	find_heaviest(w, &worst);
}

bool server_tcp_flush_all(struct worker *w)
{
	for (uint32_t i = 0; i < w->n_active; i++)
		if (w->conns[w->active[i]].out_head)
			return false;
	return true;
}

void server_tcp_close_all(struct worker *w)
{
	while (w->n_active > 0)
		close_conn(w, w->active[w->n_active - 1]);
}

/* ---- upstream replies ----------------------------------------------------------- */

/*
 * An upstream reply, possibly out of order with the connection's other
 * replies (RFC 7766 section 7 allows it: clients match on the ID). A slot
 * whose connection closed, or now holds another one, drops it.
 */
void server_tcp_deliver(struct worker *w, uint32_t index, uint32_t gen, uint8_t *framed, size_t len)
{
	struct tcp_conn *c = index < w->max_conns ? &w->conns[index] : NULL;
	size_t done = 0;

	if (!c || !c->open || c->gen != gen) {
		free(framed);
		return;
	}
	c->last_active_ms = w->now_ms;
	if (c->waiting > 0)
		c->waiting--;
	if (!c->out_head) {
		switch (send_some(c->fd, framed, len, &done)) {
		case SENT_ALL:
			free(framed);
			/* below the cap again: the queries read meanwhile */
			answer_buffered(w, index);
			return;
		case SENT_PART:
			break;
		case SEND_FAILED:
			free(framed);
			close_conn(w, index);
			return;
		}
	}
	queue_output(w, index, framed, len, done, true);
}
