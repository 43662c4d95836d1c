/*
 * server/worker.c — one worker's event loop.
 *
 * Each worker owns its sockets, connections and counters outright, so the
 * loop shares nothing with other workers but the stop eventfd, the TCP
 * connection count (touched on accept and close only), the RCU-published
 * answer sources and the query log's rate (read-mostly; records go into the
 * worker's own ring). The RCU read lock is held across one batch of work, never
 * across epoll_wait.
 *
 * A reload adds listeners by putting them straight into the epoll set
 * (events carry the descriptor, so the worker needs no table to serve
 * them). Removing one takes two steps: the reloading thread takes it out of
 * the epoll set, then the worker closes it when the retire eventfd fires,
 * after the rest of that batch: an event already in hand may still name
 * the socket, and only the worker knows when it is no longer reading it.
 */
#include "server/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "log/log.h"
#include "talkers/talkers.h"
#include "util/wake.h"

#define MAX_EVENTS 64
#define SHUTDOWN_FLUSH_MS 1000

static int sweep_interval_ms(const struct worker *w)
{
	uint64_t half = atomic_load_explicit(&w->server->tcp_idle_timeout_ms,
					     memory_order_relaxed) / 2;

	return half < 50 ? 50 : half > 500 ? 500 : (int)half;
}

/* How often a UDP socket epoll refused to take back is offered again. */
#define REWATCH_RETRY_MS 10

/* The longest sleep: an idle worker still turns every SERVER_IDLE_TURN_MS. */
static int wait_ms(const struct worker *w)
{
	int sweep = sweep_interval_ms(w);

	if (w->n_ready)
		return 0; /* connections with queries left over: look, but do not sleep */
	if (w->rewatch_failed)
		return REWATCH_RETRY_MS;
	return sweep < SERVER_IDLE_TURN_MS ? sweep : SERVER_IDLE_TURN_MS;
}

bool server_worker_unwatch_udp(struct worker *w, int fd)
{
	bool out = false;

	pthread_mutex_lock(&w->epoll_lock);
	if (w->detached_udp < 0 && epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL) == 0) {
		w->detached_udp = fd;
		out = true;
	}
	pthread_mutex_unlock(&w->epoll_lock);
	return out;
}

bool server_worker_rewatch_udp(struct worker *w)
{
	bool back = true;

	pthread_mutex_lock(&w->epoll_lock);
	int fd = w->detached_udp;
	if (fd >= 0) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_DATA(EV_UDP, fd)};
		/* EEXIST: a reload reopened the socket under this fd and watched it itself */
		back = epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 || errno == EEXIST;
		if (back)
			w->detached_udp = -1;
	}
	pthread_mutex_unlock(&w->epoll_lock);
	return back;
}

void server_worker_unwatch_udp_locked(struct worker *w, int fd)
{
	epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL);
	if (w->detached_udp == fd)
		w->detached_udp = -1; /* retired or reopened: not the worker's to put back */
}

void server_worker_read_clock(struct worker *w)
{
	w->now_ms = server_now_ms();
}

void server_worker_query_ctx(struct worker *w, struct query_ctx *ctx,
			     enum query_transport transport, const struct sockaddr_storage *peer)
{
	*ctx = (struct query_ctx){
		.transport = transport,
		.peer = peer,
		.stats = &w->stats,
		.now = w->now_ms / 1000,
		.serve_stale = upstream_failing(w->server->upstream),
		.ask = &w->request->ask,
	};
}

/* The next query's request goes into slot i of w->own, fresh (nothing sampled yet). */
static void fill_slot(struct worker *w, size_t i)
{
	w->request = &w->own[i];
	w->request->log_reply = false;
	w->request->tap_reply = false;
}

bool server_worker_submit(struct worker *w, enum query_upstream what)
{
	bool queued;

	if (what == QUERY_UPSTREAM_NONE)
		return false;
	if (what == QUERY_UPSTREAM_REFRESH)
		w->request->transport = UPSTREAM_NO_REPLY;
	if (w->hosts_resolver && w->n_own + 1 < w->own_cap) {
		/* kept where it is, for upstream_host_ask after the batch */
		fill_slot(w, ++w->n_own);
		return true;
	}
	queued = upstream_submit(w->server->upstream, w->id, w->request);
	if (queued)
		w->wake_upstream = true;
	else
		w->stats.dropped++; /* the resolver is too far behind */
	fill_slot(w, w->n_own);
	return queued;
}

void server_worker_log_query(struct worker *w, const struct query_ctx *ctx,
			     const struct sockaddr_storage *peer, const uint8_t *reply, size_t len)
{
	if (ctx->upstream == QUERY_UPSTREAM_ASK) {
		/* the resolver writes this reply later: it logs it, with its rcode */
		w->request->log_reply = true;
		w->request->peer = *peer;
	} else if (len > 0) {
		querylog_add(w->id, peer, ctx->transport, ctx->source, reply, len);
	}
}

void server_worker_tap(struct worker *w, const struct query_ctx *ctx,
		       const struct sockaddr_storage *peer, const struct sockaddr_storage *local,
		       const uint8_t *query, size_t query_len, const uint8_t *reply, size_t len)
{
	bool deferred = ctx->upstream == QUERY_UPSTREAM_ASK;

	if (deferred) {
		/* the resolver writes this reply later: it records it */
		w->request->tap_reply = true;
		w->request->peer = *peer;
		if (local)
			w->request->local = *local;
		else
			w->request->local.ss_family = AF_UNSPEC;
		len = 0;
	}
	dnstap_client(w->id, peer, local, ctx->transport, query, query_len, reply, len);
}

const struct sockaddr_storage *server_worker_udp_local(struct worker *w, int fd)
{
	socklen_t len = sizeof w->tap_local;

	if (fd != w->tap_local_fd) {
		/* once per socket, not per query: the worker's sockets are few */
		if (getsockname(fd, (struct sockaddr *)&w->tap_local, &len) < 0)
			return NULL;
		w->tap_local_fd = fd;
	}
	return &w->tap_local;
}

void server_worker_note_talkers(struct worker *w, const struct query_ctx *ctx,
				const struct sockaddr_storage *peer, const uint8_t *reply,
				size_t len)
{
	if (!talkers_sample(&w->talkers_sampler))
		return;
	if (ctx->upstream == QUERY_UPSTREAM_ASK) /* its rcode comes with the resolver's reply */
		talkers_note(w->id, peer, w->request->ask.q.qname, w->request->ask.q.qname_len, -1);
	else
		talkers_note_reply(w->id, peer, reply, len);
}

/* The requests kept in w->own (server_worker_submit) to the resolver this worker runs. */
static void hand_over_own(struct worker *w)
{
	if (w->n_own == 0)
		return;
	upstream_host_ask(w->server->upstream, w->own, w->n_own);
	w->n_own = 0;
	fill_slot(w, 0);
}

void server_worker_wake_upstream(struct worker *w)
{
	hand_over_own(w);
	if (w->wake_upstream) {
		w->wake_upstream = false;
		if (!w->hosts_resolver) /* else the resolver's turn follows this one (serve) */
			upstream_wake(w->server->upstream);
	}
}

/* Upstream replies for our TCP connections. */
static void take_completions(struct worker *w)
{
	struct upstream_completion c;

	while (upstream_take_completion(w->server->upstream, w->id, &c))
		server_tcp_deliver(w, c.conn, c.conn_gen, c.framed, c.len);
}

static void handle_event(struct worker *w, const struct epoll_event *ev)
{
	uint32_t index = EV_INDEX(ev->data.u64);

	switch (EV_KIND(ev->data.u64)) {
	case EV_UDP:
		server_udp_drain_polled(w, (int)index);
		break;
	case EV_LISTEN:
		server_tcp_accept(w, (int)index);
		break;
	case EV_CONN:
		server_tcp_conn_event(w, index, ev->events);
		break;
	case EV_UPSTREAM:
		take_completions(w);
		break;
	case EV_SHED:
		server_tcp_shed(w);
		break;
	case EV_STOP:
	case EV_RETIRE:
	case EV_RESOLVER:
	case EV_UNBOUND:
		break; /* handled before or after the batch (serve) */
	}
}

/* Retired UDP sockets go to the resolver; a full ring means try again next turn. */
static void hand_over_unhanded(struct worker *w)
{
	size_t kept = 0;

	for (size_t i = 0; i < w->n_unhanded; i++)
		if (!upstream_retire_socket(w->server->upstream, w->id, w->unhanded[i]))
			w->unhanded[kept++] = w->unhanded[i];
	w->n_unhanded = kept;
}

/*
 * Answer what is queued, then connect the socket to its own address, so the
 * kernel no longer picks it for anyone's datagrams (connected sockets are
 * skipped by SO_REUSEPORT's choice; alone on its address, a client gets
 * "port unreachable" at once), and answer what came in meanwhile.
 */
static void steer_udp_away(struct worker *w, const struct listener *l)
{
	server_udp_drain(w, l->udp_fd);
	server_udp_steer_away(l->udp_fd, &l->addr);
	server_udp_drain(w, l->udp_fd);
}

/* The last of one UDP socket; it stays open for the resolver's late replies. */
static void retire_udp(struct worker *w, const struct listener *l)
{
	int *grown = realloc(w->unhanded, (w->n_unhanded + 1) * sizeof *grown);

	steer_udp_away(w, l);
	if (!grown) {
		close(l->udp_fd); /* no room to wait for the resolver: a late reply is lost */
		return;
	}
	w->unhanded = grown;
	w->unhanded[w->n_unhanded++] = l->udp_fd;
}

/*
 * New connections go elsewhere; the ones already queued are taken first.
 * Shut down, not only closed: the keeper holds a copy of the descriptor
 * (src/keeper/), and a listener stops listening only when the socket does.
 */
static void close_listener(struct worker *w, int fd)
{
	epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL);
	server_tcp_accept(w, fd);
	shutdown(fd, SHUT_RDWR);
	close(fd);
}

/*
 * server_release: every listener of this worker steered away, what was
 * queued answered (misses go to the resolver). The UDP sockets stay in the
 * epoll set and the list: a datagram the kernel was delivering as we
 * connected is still answered, and shut_down drains them once more.
 */
static void release_listeners(struct worker *w)
{
	for (size_t i = 0; i < w->n_listeners; i++) {
		struct listener *l = &w->listeners[i];
		if (l->tcp_fd >= 0)
			close_listener(w, l->tcp_fd);
		l->tcp_fd = -1;
		steer_udp_away(w, l);
	}
}

/*
 * Close the listeners the reloading thread took out of this worker's epoll
 * set (worker thread, between event batches, so no event in hand still
 * names them): accept the connections already queued, close the TCP
 * listener, answer the datagrams already queued and hand the UDP socket to
 * the resolver, which closes it (upstream_retire_socket).
 */
static void retire_listeners(struct worker *w)
{
	struct server *s = w->server;

	if (wake_take(w->retire_fd) < 0)
		return;
	/* The reloading (or stopping) thread waits until we are done and
	 * changes nothing meanwhile. */
	pthread_mutex_lock(&s->reconf_lock);
	const struct listener *list = w->retiring;
	size_t n = w->n_retiring;
	bool release = w->release_pending;
	pthread_mutex_unlock(&s->reconf_lock);
	for (size_t i = 0; i < n; i++) {
		close_listener(w, list[i].tcp_fd);
		retire_udp(w, &list[i]);
	}
	w->tap_local_fd = -1; /* a socket number may come back with another address */
	if (release)
		release_listeners(w);
	server_worker_wake_upstream(w);
	hand_over_unhanded(w);
	pthread_mutex_lock(&s->reconf_lock);
	w->n_retiring = 0;
	w->release_pending = false;
	pthread_cond_broadcast(&s->retired);
	pthread_mutex_unlock(&s->reconf_lock);
}

/* The longest sleep, the resolver's turns included when it runs here. */
static int sleep_ms(struct worker *w)
{
	int ms = wait_ms(w);

	return w->hosts_resolver ? upstream_host_wait_ms(w->server->upstream, ms) : ms;
}

/*
 * The resolver's turn after ours (upstream.resolver), outside the RCU read
 * lock: the requests of this turn leave now, without a wake-up. Once the
 * resolver has stopped, its descriptor goes.
 */
static void turn_resolver(struct worker *w, bool ready)
{
	hand_over_own(w); /* any a batch left behind (a TCP connection closed mid-way) */
	if (!w->hosts_resolver || upstream_host_turn(w->server->upstream, ready))
		return;
	epoll_ctl(w->epfd, EPOLL_CTL_DEL, upstream_host_fd(w->server->upstream), NULL);
	w->hosts_resolver = false;
}

/*
 * The events of the resolver this worker hosts: libunbound's sockets are
 * passed on to its loop (their callbacks run at its next turn). How many
 * there were; *own_ready when the loop's own descriptor was among them.
 */
static int pass_resolver_events(struct worker *w, const struct epoll_event *events, int n,
				bool *own_ready)
{
	int count = 0;
	bool own = false;

	for (int i = 0; i < n; i++) {
		enum event_kind kind = EV_KIND(events[i].data.u64);
		if (kind == EV_UNBOUND && w->hosts_resolver)
			upstream_host_ready(w->server->upstream, (int)EV_INDEX(events[i].data.u64),
					    events[i].events);
		own = own || kind == EV_RESOLVER;
		count += kind == EV_RESOLVER || kind == EV_UNBOUND;
	}
	*own_ready = own;
	return count;
}

/* Returns when the stop eventfd fires. */
static void serve(struct worker *w)
{
	struct epoll_event events[MAX_EVENTS];
	uint64_t last_sweep = server_now_ms();
	bool stopping = false;

	while (!stopping) {
		bool retire = false;
		urcu_memb_thread_offline();
		int n = epoll_wait(w->epfd, events, MAX_EVENTS, sleep_ms(w));
		urcu_memb_thread_online();
		w->now_ms = server_now_ms();
		atomic_store_explicit(&w->beat->ms, w->now_ms, memory_order_relaxed);
		if (n < 0 && errno != EINTR)
			break;
		server_tcp_new_turn(w);
		if (w->rewatch_failed && server_worker_rewatch_udp(w)) {
			w->rewatch_failed = false;
			log_info("the UDP socket is back in the worker's epoll set");
		}
		bool resolver_ready;
		int resolvers = pass_resolver_events(w, events, n, &resolver_ready);
		/* The resolver's replies first: they finish queries that already
		 * waited a round trip, which after the batch would wait for its
		 * look-ups, answers and hand-over too. */
		if (resolvers)
			turn_resolver(w, resolver_ready);
		for (int i = 0; i < n; i++) {
			enum event_kind kind = EV_KIND(events[i].data.u64);
			stopping = stopping || kind == EV_STOP;
			retire = retire || kind == EV_RETIRE;
			handle_event(w, &events[i]);
		}
		if (retire)
			retire_listeners(w);
		if (w->n_unhanded)
			hand_over_unhanded(w);
		if (!resolvers || n > resolvers) /* else its turn above was all of this one */
			turn_resolver(w, false); /* this batch's questions leave */
		if (w->now_ms - last_sweep >= (uint64_t)sweep_interval_ms(w)) {
			server_tcp_sweep_idle(w);
			last_sweep = w->now_ms;
		}
	}
}

/*
 * Stop accepting, answer the datagrams the kernel already queued for us,
 * then give pending TCP replies a bounded time to drain.
 */
static void shut_down(struct worker *w)
{
	struct epoll_event events[MAX_EVENTS];
	uint64_t deadline = server_now_ms() + SHUTDOWN_FLUSH_MS;

	/* No reload runs now: the lists hold still. */
	for (size_t i = 0; i < w->n_listeners; i++)
		if (w->listeners[i].tcp_fd >= 0)
			epoll_ctl(w->epfd, EPOLL_CTL_DEL, w->listeners[i].tcp_fd, NULL);
	for (size_t i = 0; i < w->n_listeners; i++)
		server_udp_drain(w, w->listeners[i].udp_fd);
	while (!server_tcp_flush_all(w) && (w->now_ms = server_now_ms()) < deadline) {
		urcu_memb_thread_offline();
		int n = epoll_wait(w->epfd, events, MAX_EVENTS, 50);
		urcu_memb_thread_online();
		for (int i = 0; i < n; i++)
			if (EV_KIND(events[i].data.u64) == EV_CONN)
				server_tcp_conn_event(w, EV_INDEX(events[i].data.u64),
						      events[i].events & ~(uint32_t)EPOLLIN);
	}
	server_tcp_close_all(w);
}

void *server_worker_main(void *arg)
{
	struct worker *w = arg;

	urcu_memb_register_thread();
	w->now_ms = server_now_ms();
	atomic_store(&w->beat->tid, (int32_t)gettid());
	serve(w);
	if (w->hosts_resolver) {
		upstream_host_leave(w->server->upstream);
		w->hosts_resolver = false;
	}
	shut_down(w);
	urcu_memb_unregister_thread();
	return NULL;
}
