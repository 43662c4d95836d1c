/*
 * server/server.c — binding sockets, starting and stopping workers.
 *
 * Sockets are created here, on the calling thread, before any worker runs,
 * so that a bad address fails start-up with a clear message instead of
 * killing a thread later.
 */
#include "server/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "log/log.h"
#include "privs/privs.h"
#include "rrl/rrl.h"
#include "util/clock.h"
#include "util/wake.h"

#define TCP_BACKLOG 1024

uint64_t server_now_ms(void)
{
	return (uint64_t)coarse_ms();
}

/* Bursts must not be dropped: ask for a big buffer, forcing past rmem_max if allowed. */
static void set_receive_buffer(int fd, uint64_t bytes)
{
	int size = bytes > (uint64_t)(1u << 30) ? (1 << 30) : (int)bytes;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

/* A held socket is bound (the address is checked and taken) but steered
 * away; connecting it to AF_UNSPEC (server_open) opens it again. */
int server_udp_steer_away(int fd, const struct sockaddr_storage *addr)
{
	socklen_t len = addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						    : sizeof(struct sockaddr_in);

	return connect(fd, (const struct sockaddr *)addr, len);
}

static int open_socket(const struct sockaddr_storage *ss, int type, const struct config *cfg,
		       bool held, char *err, size_t errlen)
{
	const char *proto = type == SOCK_DGRAM ? "udp" : "tcp";
	socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in);
	int one = 1;
	int fd = socket(ss->ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	char text[INET6_ADDRSTRLEN + 8];

	if (fd < 0)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
		goto fail;
	if (ss->ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	if (type == SOCK_DGRAM)
		set_receive_buffer(fd, cfg->listen.udp_rcvbuf);
	/* Accepted connections inherit these: fixed, small kernel buffers for
	 * clients that do not read (or stop being read), instead of ones that
	 * grow to megabytes of node memory. tcp.c counts the send queue. */
	if (type == SOCK_STREAM &&
	    (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &(int){TCP_SNDBUF}, sizeof(int)) < 0 ||
	     setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &(int){TCP_RCVBUF}, sizeof(int)) < 0))
		goto fail;
	if (bind(fd, (const struct sockaddr *)ss, len) < 0)
		goto fail;
	if (held && type == SOCK_DGRAM && server_udp_steer_away(fd, ss) < 0)
		goto fail;
	if (!held && type == SOCK_STREAM && listen(fd, TCP_BACKLOG) < 0)
		goto fail;
	return fd;
fail:
	snprintf(err, errlen, "cannot listen on %s/%s: %s", server_address_text(ss, text, sizeof text),
		 proto, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

const char *server_address_text(const struct sockaddr_storage *ss, char *out, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "";
	bool v6 = ss->ss_family == AF_INET6;
	const void *addr = v6 ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
			      : (const void *)&((const struct sockaddr_in *)ss)->sin_addr;
	uint16_t port = ntohs(v6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
				 : ((const struct sockaddr_in *)ss)->sin_port);

	inet_ntop(ss->ss_family, addr, ip, sizeof ip);
	snprintf(out, len, v6 ? "[%s]:%u" : "%s:%u", ip, port);
	return out;
}

unsigned server_worker_count(const struct config *cfg)
{
	cpu_set_t set;

	if (cfg->listen.workers > 0)
		return cfg->listen.workers;
	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	return 1;
}

static int watch(int epfd, int fd, uint64_t data)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data};

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void close_listeners(struct listener *l, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (l[i].udp_fd >= 0)
			close(l[i].udp_fd);
		if (l[i].tcp_fd >= 0)
			close(l[i].tcp_fd);
	}
}

static void free_worker(struct worker *w)
{
	if (!w)
		return;
	if (w->hosts_resolver) /* it never ran, or left without seeing the stop */
		upstream_host_leave(w->server->upstream);
	close_listeners(w->listeners, w->n_listeners);
	close_listeners(w->retiring, w->n_retiring);
	for (size_t i = 0; i < w->n_unhanded; i++)
		close(w->unhanded[i]);
	if (w->epfd >= 0)
		close(w->epfd);
	if (w->retire_fd >= 0)
		close(w->retire_fd);
	if (w->shed_fd >= 0)
		close(w->shed_fd);
	pthread_mutex_destroy(&w->epoll_lock);
	free(w->listeners);
	free(w->retiring);
	free(w->unhanded);
	free(w->conns);
	free(w->free_slots);
	free(w->active);
	free(w->ready);
	free(w->own);
	free(w);
}

/* The request slots query_handle fills (w->own): n, the first ready to fill. */
static int alloc_requests(struct worker *w, size_t n)
{
	struct upstream_request *own = calloc(n, sizeof *own);

	if (!own)
		return -1;
	free(w->own);
	w->own = w->request = own;
	w->own_cap = n;
	w->n_own = 0;
	return 0;
}

static int alloc_connections(struct worker *w, uint32_t max_conns)
{
	w->max_conns = max_conns;
	w->conns = calloc(max_conns, sizeof *w->conns);
	w->free_slots = calloc(max_conns, sizeof *w->free_slots);
	w->active = calloc(max_conns, sizeof *w->active);
	w->ready = calloc(max_conns, sizeof *w->ready);
	if (!w->conns || !w->free_slots || !w->active || !w->ready)
		return -1;
	/* Only the free-slot stack is touched now; a conn's pages on first use. */
	for (uint32_t i = 0; i < max_conns; i++)
		w->free_slots[i] = max_conns - 1 - i;
	w->n_free = max_conns;
	return 0;
}

/* The per-client limits a reload may change (tcp.c, rrl/). */
static void tune_limits(struct server *s, const struct config *cfg)
{
	atomic_store(&s->tcp_idle_timeout_ms, cfg->listen.tcp_idle_timeout_ms);
	atomic_store(&s->tcp_query_timeout_ms, cfg->listen.tcp_query_timeout_ms);
	atomic_store(&s->tcp_output_budget, cfg->listen.tcp_output_budget);
	atomic_store(&s->tcp_max_waiting, cfg->listen.tcp_max_pending_queries);
	atomic_store(&s->tcp_max_per_source, cfg->listen.tcp_max_connections_per_client);
	rrl_configure(cfg);
}

static struct worker *new_worker(struct server *s, unsigned id, char *err, size_t errlen)
{
	struct worker *w = calloc(1, sizeof *w);

	if (!w) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	w->server = s;
	w->id = id;
	w->epfd = w->retire_fd = w->shed_fd = w->tap_local_fd = -1;
	w->detached_udp = -1;
	pthread_mutex_init(&w->epoll_lock, NULL);
	server_udp_batch_init(&w->udp);
	if (alloc_requests(w, 1) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	/* Any one worker may hold every connection: the cap is shared (server.c). */
	if (alloc_connections(w, s->tcp_max_conns) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->retire_fd = wake_open();
	w->shed_fd = wake_open();
	if (w->epfd < 0 || w->retire_fd < 0 || w->shed_fd < 0 ||
	    watch(w->epfd, s->stop_fd, EV_DATA(EV_STOP, 0)) < 0 ||
	    watch(w->epfd, w->retire_fd, EV_DATA(EV_RETIRE, 0)) < 0 ||
	    watch(w->epfd, w->shed_fd, EV_DATA(EV_SHED, 0)) < 0 ||
	    watch(w->epfd, upstream_completion_fd(s->upstream, id), EV_DATA(EV_UPSTREAM, 0)) < 0) {
		snprintf(err, errlen, "epoll: %s", strerror(errno));
		goto fail;
	}
	/* the first worker: upstream.resolver's first_worker, worker/0 in the logs */
	int resolver_fd = id == 0 ? upstream_host_attach(s->upstream, id, w->epfd,
							 EV_DATA(EV_UNBOUND, 0)) : -1;
	if (resolver_fd == -2) {
		snprintf(err, errlen, "epoll: %s", strerror(errno));
		goto fail;
	}
	if (resolver_fd >= 0) {
		w->hosts_resolver = true; /* from here on it must leave (free_worker) */
		if (alloc_requests(w, OWN_REQUESTS) < 0) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		if (watch(w->epfd, resolver_fd, EV_DATA(EV_RESOLVER, 0)) < 0) {
			snprintf(err, errlen, "epoll: %s", strerror(errno));
			goto fail;
		}
	}
	return w;
fail:
	free_worker(w);
	return NULL;
}

/* ---- listeners ------------------------------------------------------------------- */

/* Does the worker serve ss already? (Every worker serves the same addresses.) */
static bool serves(const struct worker *w, const struct sockaddr_storage *ss)
{
	for (size_t i = 0; i < w->n_listeners; i++)
		if (memcmp(&w->listeners[i].addr, ss, sizeof *ss) == 0)
			return true;
	return false;
}

/* The served addresses of cfg (on its port) that the workers do not serve yet. */
static size_t missing_addresses(const struct server *s, const struct config *cfg,
				struct sockaddr_storage *out)
{
	size_t n = 0;

	for (size_t i = 0; i < config_served_count(cfg); i++) {
		config_ip_sockaddr(config_served_address(cfg, i), cfg->listen.port, &out[n]);
		if (!serves(s->workers[0], &out[n]))
			n++;
	}
	return n;
}

/* Room for n more listeners in every worker's list (the lists only grow here). */
static int reserve_listeners(struct server *s, size_t n)
{
	for (unsigned i = 0; i < s->n_workers; i++) {
		struct worker *w = s->workers[i];
		struct listener *grown = realloc(w->listeners,
						 (w->n_listeners + n) * sizeof *grown);
		if (n && !grown)
			return -1;
		w->listeners = grown;
	}
	return 0;
}

/* Bind addr for every worker into fresh[worker]; -1 with err, nothing left open. */
static int open_listeners(struct server *s, const struct sockaddr_storage *addr,
			  const struct config *cfg, struct listener *fresh, char *err,
			  size_t errlen)
{
	for (unsigned i = 0; i < s->n_workers; i++) {
		fresh[i] = (struct listener){.addr = *addr, .udp_fd = -1, .tcp_fd = -1};
		fresh[i].udp_fd = open_socket(addr, SOCK_DGRAM, cfg, s->held, err, errlen);
		if (fresh[i].udp_fd >= 0)
			fresh[i].tcp_fd = open_socket(addr, SOCK_STREAM, cfg, s->held, err, errlen);
		if (fresh[i].tcp_fd < 0) {
			close_listeners(fresh, i + 1);
			return -1;
		}
	}
	return 0;
}

/*
 * Take the listeners that `retire` picks out of every worker's epoll set
 * and have each worker close them (worker.c's retire_listeners); returns once all
 * have. Caller holds reconf_lock.
 */
static void retire_where(struct server *s, bool (*retire)(const struct listener *, size_t index,
							   const void *arg),
			 const void *arg)
{
	for (unsigned i = 0; i < s->n_workers; i++) {
		struct worker *w = s->workers[i];
		size_t kept = 0, n = 0;
		struct listener *out = malloc(w->n_listeners * sizeof *out + 1);
		if (!out)
			continue; /* keeps serving them: better than closing under the worker */
		for (size_t k = 0; k < w->n_listeners; k++) {
			struct listener *l = &w->listeners[k];
			if (!retire(l, k, arg)) {
				w->listeners[kept++] = *l;
				continue;
			}
			pthread_mutex_lock(&w->epoll_lock);
			server_worker_unwatch_udp_locked(w, l->udp_fd);
			pthread_mutex_unlock(&w->epoll_lock);
			epoll_ctl(w->epfd, EPOLL_CTL_DEL, l->tcp_fd, NULL);
			out[n++] = *l;
		}
		w->n_listeners = kept;
		w->retiring = out;
		w->n_retiring = n;
		if (n)
			wake_send(w->retire_fd);
	}
	for (unsigned i = 0; i < s->n_workers; i++) {
		struct worker *w = s->workers[i];
		while (w->n_retiring > 0)
			pthread_cond_wait(&s->retired, &s->reconf_lock);
		free(w->retiring);
		w->retiring = NULL;
	}
	atomic_fetch_add(&s->sockets_generation, 1);
}

static bool index_at_least(const struct listener *l, size_t index, const void *first)
{
	(void)l;
	return index >= *(const size_t *)first;
}

/* Put fresh[worker] in every worker's list and epoll set; caller holds reconf_lock. */
static int register_listeners(struct server *s, struct listener *fresh, char *err, size_t errlen)
{
	for (unsigned i = 0; i < s->n_workers; i++) {
		struct worker *w = s->workers[i];
		struct listener *l = &fresh[i];
		w->listeners[w->n_listeners++] = *l;
		/* A socket that is not listening polls as hung up: epoll at server_open. */
		if (watch(w->epfd, l->udp_fd, EV_DATA(EV_UDP, l->udp_fd)) < 0 ||
		    (!s->held && watch(w->epfd, l->tcp_fd, EV_DATA(EV_LISTEN, l->tcp_fd)) < 0)) {
			snprintf(err, errlen, "epoll: %s", strerror(errno));
			/* The rest of fresh was never seen by a worker. */
			close_listeners(fresh + i + 1, s->n_workers - i - 1);
			return -1;
		}
	}
	return 0;
}

/*
 * Serve every address of cfg. live: the workers run (caller holds
 * reconf_lock); otherwise a failure leaves what was registered in the lists
 * for free_worker.
 */
static int add_listeners(struct server *s, const struct config *cfg, bool live, char *err,
			 size_t errlen)
{
	struct sockaddr_storage *addrs = calloc(config_served_count(cfg) + 1, sizeof *addrs);
	struct listener *fresh = NULL; /* [address][worker] */
	size_t before = s->workers[0]->n_listeners, n = 0, opened = 0;
	int rc = -1;

	if (addrs) {
		n = missing_addresses(s, cfg, addrs);
		fresh = calloc(n * s->n_workers + 1, sizeof *fresh);
	}
	if (!fresh || reserve_listeners(s, n) < 0) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	/* Every socket is bound before any worker sees one: a bad address changes nothing. */
	while (opened < n && open_listeners(s, &addrs[opened], cfg, fresh + opened * s->n_workers,
					    err, errlen) == 0)
		opened++;
	if (opened < n) {
		close_listeners(fresh, opened * s->n_workers);
		goto out;
	}
	/* Registering fails only for lack of memory; what a worker may have
	 * seen by then is retired the safe way. */
	for (size_t k = 0; k < n; k++) {
		if (register_listeners(s, fresh + k * s->n_workers, err, errlen) == 0)
			continue;
		close_listeners(fresh + (k + 1) * s->n_workers, (n - k - 1) * s->n_workers);
		if (live)
			retire_where(s, index_at_least, &before);
		goto out;
	}
	atomic_fetch_add(&s->sockets_generation, 1);
	rc = 0;
out:
	free(addrs);
	free(fresh);
	return rc;
}

static void stop_and_join(struct server *s, unsigned started)
{
	wake_send(s->stop_fd);
	for (unsigned i = 0; i < started; i++)
		pthread_join(s->workers[i]->thread, NULL);
}

static void free_server(struct server *s)
{
	for (unsigned i = 0; i < s->n_workers; i++)
		free_worker(s->workers[i]);
	free(s->workers);
	rrl_free(); /* the resolver thread, which also sends UDP replies, has stopped */
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	pthread_cond_destroy(&s->retired);
	pthread_mutex_destroy(&s->reconf_lock);
	free(s);
}

struct server *server_start(const struct config *cfg, struct upstream *upstream, bool held,
			    struct server_beat *beats, char *err, size_t errlen)
{
	struct server *s = calloc(1, sizeof *s);
	unsigned started = 0;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->upstream = upstream;
	s->held = held;
	s->n_workers = server_worker_count(cfg);
	s->tcp_max_conns = cfg->listen.tcp_max_connections;
	s->client_ipv6_bits = cfg->listen.ipv6_client_prefix_length;
	tune_limits(s, cfg);
	pthread_mutex_init(&s->reconf_lock, NULL);
	pthread_cond_init(&s->retired, NULL);
	s->stop_fd = wake_open();
	s->workers = calloc(s->n_workers, sizeof *s->workers);
	if (getrandom(s->source_key, sizeof s->source_key, 0) != (ssize_t)sizeof s->source_key) {
		snprintf(err, errlen, "cannot key the per-client tables: %s", strerror(errno));
		goto fail;
	}
	if (s->stop_fd < 0 || !s->workers) {
		snprintf(err, errlen, "cannot set up workers: %s", strerror(errno));
		goto fail;
	}
	for (unsigned i = 0; i < s->n_workers; i++) {
		s->workers[i] = new_worker(s, i, err, errlen);
		if (!s->workers[i])
			goto fail;
	}
	if (add_listeners(s, cfg, false, err, errlen) < 0)
		goto fail;
	for (; started < s->n_workers; started++) {
		/* alive from the start: a thread not yet scheduled is not stuck */
		struct worker *w = s->workers[started];
		w->beat = beats ? &beats[started] : &w->own_beat;
		atomic_store(&w->beat->ms, server_now_ms());
		/* "worker/N" in ps, top -H and /proc/PID/task/TID/comm. */
		char name[24];
		snprintf(name, sizeof name, "worker/%u", started);
		enum privs_thread kind = w->hosts_resolver ? PRIVS_WORKER_RESOLVER : PRIVS_WORKER;
		if (privs_thread_create(&w->thread, kind, name, server_worker_main, w, err,
					errlen) < 0)
			goto fail;
	}
	return s;
fail:
	stop_and_join(s, started);
	free_server(s);
	return NULL;
}

void server_stop(struct server *s)
{
	if (!s)
		return;
	stop_and_join(s, s->n_workers);
	free_server(s);
}

/*
 * A held UDP socket gives way to a freshly bound one: disconnecting it
 * (connect to AF_UNSPEC) reopens an IPv4 socket, but an IPv6 one keeps
 * its peer address in the kernel and would then take only its own
 * datagrams. The fd number stays, so the worker's listener needs no
 * change; the socket bound meanwhile shares the queue from its bind on.
 */
static int reopen_udp(struct worker *w, const struct listener *l, const struct config *cfg,
		      char *err, size_t errlen)
{
	int fresh = open_socket(&l->addr, SOCK_DGRAM, cfg, false, err, errlen);

	if (fresh < 0)
		return -1;
	pthread_mutex_lock(&w->epoll_lock);
	server_worker_unwatch_udp_locked(w, l->udp_fd);
	int rc = dup3(fresh, l->udp_fd, O_CLOEXEC); /* the fd number, or -1 */
	close(fresh);
	if (rc >= 0)
		rc = watch(w->epfd, l->udp_fd, EV_DATA(EV_UDP, l->udp_fd));
	pthread_mutex_unlock(&w->epoll_lock);
	if (rc < 0) {
		snprintf(err, errlen, "cannot watch the reopened socket: %s", strerror(errno));
		return -1;
	}
	return 0;
}

void server_open(struct server *s, const struct config *cfg)
{
	pthread_mutex_lock(&s->reconf_lock);
	for (unsigned i = 0; s->held && i < s->n_workers; i++) {
		struct worker *w = s->workers[i];
		for (size_t k = 0; k < w->n_listeners; k++) {
			const struct listener *l = &w->listeners[k];
			char text[INET6_ADDRSTRLEN + 8], err[CONFIG_ERR_MAX];
			/* Bound at start: only memory can fail here, and then that
			 * socket stays out while the others serve. */
			if (listen(l->tcp_fd, TCP_BACKLOG) < 0 ||
			    watch(w->epfd, l->tcp_fd, EV_DATA(EV_LISTEN, l->tcp_fd)) < 0)
				log_error("cannot open a TCP listener", "address",
					  server_address_text(&l->addr, text, sizeof text), "error",
					  strerror(errno));
			if (reopen_udp(w, l, cfg, err, sizeof err) < 0)
				log_error("cannot open a UDP listener", "address",
					  server_address_text(&l->addr, text, sizeof text), "error",
					  err);
		}
	}
	s->held = false;
	atomic_fetch_add(&s->sockets_generation, 1); /* each UDP socket is a new one */
	pthread_mutex_unlock(&s->reconf_lock);
}

bool server_is_open(struct server *s)
{
	pthread_mutex_lock(&s->reconf_lock);
	bool open = !s->held;
	pthread_mutex_unlock(&s->reconf_lock);
	return open;
}

void server_release(struct server *s)
{
	pthread_mutex_lock(&s->reconf_lock);
	for (unsigned i = 0; i < s->n_workers; i++) {
		s->workers[i]->release_pending = true;
		wake_send(s->workers[i]->retire_fd);
	}
	for (unsigned i = 0; i < s->n_workers; i++)
		while (s->workers[i]->release_pending)
			pthread_cond_wait(&s->retired, &s->reconf_lock);
	s->held = true; /* steered away: no socket takes traffic any more */
	atomic_fetch_add(&s->sockets_generation, 1);
	pthread_mutex_unlock(&s->reconf_lock);
}

uint64_t server_sockets_generation(struct server *s)
{
	return atomic_load(&s->sockets_generation);
}

static size_t dup_socket(unsigned worker, int type, int fd, const struct sockaddr_storage *addr,
			 struct server_socket *out, size_t n, size_t max)
{
	if (fd < 0)
		return n;
	if (n < max) {
		out[n] = (struct server_socket){.worker = worker, .type = type, .addr = *addr};
		out[n].fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	}
	return n + 1;
}

size_t server_dup_sockets(struct server *s, struct server_socket *out, size_t max,
			  uint64_t *generation)
{
	size_t n = 0;

	pthread_mutex_lock(&s->reconf_lock);
	*generation = atomic_load(&s->sockets_generation);
	for (unsigned i = 0; !s->held && i < s->n_workers; i++) {
		const struct worker *w = s->workers[i];
		for (size_t k = 0; k < w->n_listeners; k++) {
			const struct listener *l = &w->listeners[k];
			n = dup_socket(i, SOCK_DGRAM, l->udp_fd, &l->addr, out, n, max);
			n = dup_socket(i, SOCK_STREAM, l->tcp_fd, &l->addr, out, n, max);
		}
	}
	pthread_mutex_unlock(&s->reconf_lock);
	return n;
}

bool server_turning(const struct server *s, uint64_t max_age_ms, char *why, size_t whylen)
{
	uint64_t now = server_now_ms();

	for (unsigned i = 0; i < s->n_workers; i++) {
		uint64_t beat = server_heartbeat_ms(s, i);
		if (now > beat && now - beat > max_age_ms) {
			snprintf(why, whylen, "worker %u has not gone round its loop for %llu ms", i,
				 (unsigned long long)(now - beat));
			return false;
		}
	}
	return true;
}

int server_listen(struct server *s, const struct config *cfg, char *err, size_t errlen)
{
	pthread_mutex_lock(&s->reconf_lock);
	int rc = add_listeners(s, cfg, true, err, errlen);
	pthread_mutex_unlock(&s->reconf_lock);
	return rc;
}

static bool not_served_by(const struct listener *l, size_t index, const void *cfgp)
{
	const struct config *cfg = cfgp;
	struct sockaddr_storage ss;

	(void)index;
	for (size_t i = 0; i < config_served_count(cfg); i++) {
		config_ip_sockaddr(config_served_address(cfg, i), cfg->listen.port, &ss);
		if (memcmp(&ss, &l->addr, sizeof ss) == 0)
			return false;
	}
	return true;
}

void server_unlisten_others(struct server *s, const struct config *cfg)
{
	pthread_mutex_lock(&s->reconf_lock);
	retire_where(s, not_served_by, cfg);
	pthread_mutex_unlock(&s->reconf_lock);
}

void server_tune(struct server *s, const struct config *cfg)
{
	tune_limits(s, cfg);
	pthread_mutex_lock(&s->reconf_lock);
	for (unsigned i = 0; i < s->n_workers; i++)
		for (size_t k = 0; k < s->workers[i]->n_listeners; k++)
			set_receive_buffer(s->workers[i]->listeners[k].udp_fd, cfg->listen.udp_rcvbuf);
	pthread_mutex_unlock(&s->reconf_lock);
}

void server_tcp_stats(const struct server *s, struct server_tcp_stats *out)
{
	memset(out, 0, sizeof *out);
	out->connections = atomic_load(&s->tcp_conns);
	out->output_bytes = atomic_load(&s->tcp_output_bytes);
	for (unsigned i = 0; i < s->n_workers; i++)
		for (int e = 0; e < TCP_EVENTS; e++)
			out->events[e] += s->workers[i]->tcp_events[e];
}

void server_stats(const struct server *s, struct query_stats *sum)
{
	memset(sum, 0, sizeof *sum);
	for (unsigned i = 0; i < s->n_workers; i++) {
		const struct query_stats *st = &s->workers[i]->stats;
		sum->received += st->received;
		sum->dropped += st->dropped;
		sum->truncated += st->truncated;
		sum->autopath += st->autopath;
		sum->dns64_synthesized += st->dns64_synthesized;
		sum->not_allowed += st->not_allowed;
		sum->rrl_slipped += st->rrl_slipped;
		sum->rrl_dropped += st->rrl_dropped;
		sum->udp_busy_wakeups += st->udp_busy_wakeups;
		for (size_t k = 0; k < QUERY_SOURCE_COUNT; k++)
			sum->source[k] += st->source[k];
		for (size_t t = 0; t < QUERY_QTYPE_COUNT; t++)
			sum->qtype[t] += st->qtype[t];
		for (size_t p = 0; p < 2; p++)
			sum->transport[p] += st->transport[p];
		for (size_t r = 0; r < sizeof sum->rcode / sizeof sum->rcode[0]; r++)
			sum->rcode[r] += st->rcode[r];
	}
}

unsigned server_workers(const struct server *s)
{
	return s->n_workers;
}

uint64_t server_heartbeat_ms(const struct server *s, unsigned worker)
{
	return atomic_load_explicit(&s->workers[worker]->beat->ms, memory_order_relaxed);
}

int server_worker_tid(const struct server *s, unsigned worker)
{
	return atomic_load_explicit(&s->workers[worker]->beat->tid, memory_order_relaxed);
}
