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
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "log/log.h"

#define TCP_BACKLOG 1024

uint64_t server_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Bursts must not be dropped: ask for a big buffer, forcing past rmem_max if allowed. */
static void set_receive_buffer(int fd, uint64_t bytes)
{
	int size = bytes > (uint64_t)(1u << 30) ? (1 << 30) : (int)bytes;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

static int open_socket(const struct config_ip *ip, uint16_t port, int type,
		       const struct config *cfg, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len = config_ip_sockaddr(ip, port, &ss);
	const char *proto = type == SOCK_DGRAM ? "udp" : "tcp";
	int one = 1;
	int fd = socket(ip->family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
		goto fail;
	if (ip->family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	if (type == SOCK_DGRAM)
		set_receive_buffer(fd, cfg->listen.udp_rcvbuf);
	if (bind(fd, (struct sockaddr *)&ss, len) < 0)
		goto fail;
	if (type == SOCK_STREAM && listen(fd, TCP_BACKLOG) < 0)
		goto fail;
	return fd;
fail:
	snprintf(err, errlen, "cannot listen on %s%s%s:%u/%s: %s",
		 ip->family == AF_INET6 ? "[" : "", ip->text,
		 ip->family == AF_INET6 ? "]" : "", port, proto, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
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

static void free_worker(struct worker *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n_fds; i++) {
		if (w->udp_fds[i] >= 0)
			close(w->udp_fds[i]);
		if (w->tcp_fds[i] >= 0)
			close(w->tcp_fds[i]);
	}
	if (w->epfd >= 0)
		close(w->epfd);
	free(w->udp_fds);
	free(w->tcp_fds);
	free(w->conns);
	free(w->free_slots);
	free(w->active);
	free(w);
}

static int alloc_connections(struct worker *w, uint32_t max_conns)
{
	w->max_conns = max_conns;
	w->conns = calloc(max_conns, sizeof *w->conns);
	w->free_slots = calloc(max_conns, sizeof *w->free_slots);
	w->active = calloc(max_conns, sizeof *w->active);
	if (!w->conns || !w->free_slots || !w->active)
		return -1;
	/* Only the free-slot stack is touched now; a conn's pages on first use. */
	for (uint32_t i = 0; i < max_conns; i++)
		w->free_slots[i] = max_conns - 1 - i;
	w->n_free = max_conns;
	return 0;
}

static struct worker *new_worker(struct server *s, unsigned id, const struct config *cfg,
				 char *err, size_t errlen)
{
	size_t n = config_served_count(cfg);
	struct worker *w = calloc(1, sizeof *w);

	if (!w)
		goto nomem;
	w->server = s;
	w->id = id;
	w->epfd = -1;
	udp_batch_init(&w->udp);
	w->udp_fds = malloc(n * sizeof *w->udp_fds);
	w->tcp_fds = malloc(n * sizeof *w->tcp_fds);
	if (!w->udp_fds || !w->tcp_fds)
		goto nomem;
	for (size_t i = 0; i < n; i++)
		w->udp_fds[i] = w->tcp_fds[i] = -1;
	w->n_fds = n;
	/* Any one worker may hold every connection: the cap is shared (server.c). */
	if (alloc_connections(w, s->tcp_max_conns) < 0)
		goto nomem;
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->epfd < 0 || watch(w->epfd, s->stop_fd, EV_DATA(EV_STOP, 0)) < 0 ||
	    watch(w->epfd, upstream_completion_fd(s->upstream, id), EV_DATA(EV_UPSTREAM, 0)) < 0) {
		snprintf(err, errlen, "epoll: %s", strerror(errno));
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		const struct config_ip *ip = config_served_address(cfg, i);
		w->udp_fds[i] = open_socket(ip, cfg->listen.port, SOCK_DGRAM, cfg, err, errlen);
		if (w->udp_fds[i] < 0)
			goto fail;
		w->tcp_fds[i] = open_socket(ip, cfg->listen.port, SOCK_STREAM, cfg, err, errlen);
		if (w->tcp_fds[i] < 0)
			goto fail;
		if (watch(w->epfd, w->udp_fds[i], EV_DATA(EV_UDP, i)) < 0 ||
		    watch(w->epfd, w->tcp_fds[i], EV_DATA(EV_LISTEN, i)) < 0) {
			snprintf(err, errlen, "epoll: %s", strerror(errno));
			goto fail;
		}
	}
	return w;
nomem:
	snprintf(err, errlen, "out of memory");
fail:
	free_worker(w);
	return NULL;
}

static void stop_and_join(struct server *s, unsigned started)
{
	uint64_t one = 1;
	ssize_t ignored = write(s->stop_fd, &one, sizeof one);

	(void)ignored;
	for (unsigned i = 0; i < started; i++)
		pthread_join(s->workers[i]->thread, NULL);
}

static void free_server(struct server *s)
{
	for (unsigned i = 0; i < s->n_workers; i++)
		free_worker(s->workers[i]);
	free(s->workers);
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	free(s);
}

struct server *server_start(const struct config *cfg, struct upstream *upstream,
			    char *err, size_t errlen)
{
	struct server *s = calloc(1, sizeof *s);
	unsigned started = 0;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->upstream = upstream;
	s->n_workers = server_worker_count(cfg);
	s->tcp_max_conns = cfg->listen.tcp_max_connections;
	s->tcp_idle_timeout_ms = cfg->listen.tcp_idle_timeout_ms;
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->workers = calloc(s->n_workers, sizeof *s->workers);
	if (s->stop_fd < 0 || !s->workers) {
		snprintf(err, errlen, "cannot set up workers: %s", strerror(errno));
		goto fail;
	}
	for (unsigned i = 0; i < s->n_workers; i++) {
		s->workers[i] = new_worker(s, i, cfg, err, errlen);
		if (!s->workers[i])
			goto fail;
	}
	for (; started < s->n_workers; started++) {
		/* alive from the start: a thread not yet scheduled is not stuck */
		atomic_init(&s->workers[started]->heartbeat_ms, server_now_ms());
		int rc = pthread_create(&s->workers[started]->thread, NULL, worker_main,
					s->workers[started]);
		if (rc != 0) {
			snprintf(err, errlen, "cannot start worker: %s", strerror(rc));
			goto fail;
		}
	}
	return s;
fail:
	stop_and_join(s, started);
	free_server(s);
	return NULL;
}

void server_stop(struct server *s)
{
	stop_and_join(s, s->n_workers);
	free_server(s);
}

void server_stats(const struct server *s, struct query_stats *sum)
{
	memset(sum, 0, sizeof *sum);
	for (unsigned i = 0; i < s->n_workers; i++) {
		const struct query_stats *st = &s->workers[i]->stats;
		sum->received += st->received;
		sum->dropped += st->dropped;
		sum->truncated += st->truncated;
		sum->rcode_other += st->rcode_other;
		sum->autopath += st->autopath;
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
	return atomic_load_explicit(&s->workers[worker]->heartbeat_ms, memory_order_relaxed);
}
