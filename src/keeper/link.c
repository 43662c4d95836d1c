/*
 * keeper/link.c — the serving process's side of keeper.socket: see
 * keeper.h and internal.h.
 *
 * The node monitor thread drives it (keeper_link_turn each turn): it
 * connects when it is not connected (at most once a second, so a keeper
 * that is not there yet, or restarts, costs nothing), says HELLO with the
 * shared heartbeats, and sends the server's listening sockets whenever
 * their generation changed. Every send is non-blocking: a keeper that is
 * stopped or slow never holds the monitor up; the connection is dropped
 * and made again instead. The main thread only says LEAVING at SIGTERM.
 */
#include "keeper/keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "keeper/internal.h"
#include "log/log.h"
#include "server/server.h"

#define RETRY_MS 1000
/* Listening sockets sent at most (a worker's UDP and TCP per served address). */
#define MAX_SOCKETS 4096

struct keeper_link {
	pthread_mutex_t lock;       /* the monitor's turns and the main thread's LEAVING */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int beats_fd;               /* memfd of struct keeper_beats */
	struct keeper_beats *beats;
	size_t beats_len;
	unsigned n_workers;
	struct server *server;      /* keeper_link_serve */
	uint32_t token;
	int fd;                     /* the connection; -1: none */
	bool left;                  /* LEAVING said: never again */
	bool said_missing;          /* the keeper's absence is logged once per absence */
	uint64_t next_try_ms;
	uint64_t sent_generation;   /* of the sockets the keeper has; 0: none sent */
	atomic_bool holding;        /* the keeper has the current set (keeper_link_stats) */
	struct server_socket *sockets; /* MAX_SOCKETS, for server_dup_sockets */
};

struct keeper_link *keeper_link_new(const struct config *cfg, unsigned n_workers, char *err,
				    size_t errlen)
{
	struct keeper_link *l;

	if (!cfg->keeper.socket[0])
		return NULL;
	if (!(l = calloc(1, sizeof *l)) || !(l->sockets = calloc(MAX_SOCKETS, sizeof *l->sockets))) {
		free(l);
		snprintf(err, errlen, "keeper: out of memory");
		return NULL;
	}
	pthread_mutex_init(&l->lock, NULL);
	snprintf(l->path, sizeof l->path, "%s", cfg->keeper.socket);
	l->fd = -1;
	l->n_workers = n_workers;
	l->beats_len = keeper_beats_size(n_workers);
	l->beats_fd = memfd_create("localdns-heartbeats", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (l->beats_fd < 0 || ftruncate(l->beats_fd, (off_t)l->beats_len) < 0 ||
	    (l->beats = mmap(NULL, l->beats_len, PROT_READ | PROT_WRITE, MAP_SHARED, l->beats_fd,
			     0)) == MAP_FAILED) {
		snprintf(err, errlen, "keeper: cannot share the workers' heartbeats: %s",
			 strerror(errno));
		l->beats = NULL;
		keeper_link_free(l);
		return NULL;
	}
	/* The keeper maps it as it is: it cannot grow or shrink under it. */
	fcntl(l->beats_fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
	l->beats->magic = KEEPER_MAGIC;
	l->beats->n_workers = n_workers;
	return l;
}

void keeper_link_free(struct keeper_link *l)
{
	if (!l)
		return;
	if (l->fd >= 0)
		close(l->fd);
	if (l->beats)
		munmap(l->beats, l->beats_len);
	if (l->beats_fd >= 0)
		close(l->beats_fd);
	pthread_mutex_destroy(&l->lock);
	free(l->sockets);
	free(l);
}

struct server_beat *keeper_link_beats(struct keeper_link *l)
{
	return l ? l->beats->worker : NULL;
}

void keeper_link_serve(struct keeper_link *l, struct server *server, uint32_t token)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	l->server = server;
	l->token = token;
	pthread_mutex_unlock(&l->lock);
}

/* One message, with fd (-1: none); false when the keeper did not take it whole. */
static bool say(struct keeper_link *l, const struct keeper_msg *m, int fd)
{
	char control[CMSG_SPACE(sizeof(int))] = {0};
	struct iovec iov = {.iov_base = (void *)m, .iov_len = sizeof *m};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};

	if (fd >= 0) {
		msg.msg_control = control;
		msg.msg_controllen = sizeof control;
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof fd);
	}
	return sendmsg(l->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof *m;
}

static void hang_up(struct keeper_link *l, uint64_t now_ms, const char *why)
{
	close(l->fd);
	l->fd = -1;
	l->sent_generation = 0;
	atomic_store_explicit(&l->holding, false, memory_order_relaxed);
	l->next_try_ms = now_ms + RETRY_MS;
	log_warn("lost the keeper; queries queued when this process dies or hangs are lost "
		 "until it is back", "socket", l->path, "reason", why);
}

static void connect_keeper(struct keeper_link *l, uint64_t now_ms)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	struct keeper_msg hello = {.magic = KEEPER_MAGIC, .type = KEEPER_HELLO};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	l->next_try_ms = now_ms + RETRY_MS;
	memcpy(sun.sun_path, l->path, sizeof sun.sun_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
		if (!l->said_missing)
			log_warn("no keeper yet; trying every second", "socket", l->path, "error",
				 strerror(errno));
		l->said_missing = true;
		if (fd >= 0)
			close(fd);
		return;
	}
	l->fd = fd;
	hello.hello.pid = (int32_t)getpid();
	hello.hello.token = l->token;
	hello.hello.n_workers = l->n_workers;
	if (!say(l, &hello, l->beats_fd)) {
		hang_up(l, now_ms, strerror(errno));
		return;
	}
	l->said_missing = false;
	log_info("keeper connected: it holds a copy of every listening socket", "socket", l->path);
}

/* The whole set, or nothing: a set cut short is sent again at the next turn. */
static void send_sockets(struct keeper_link *l, uint64_t now_ms)
{
	uint64_t generation;
	size_t n = server_dup_sockets(l->server, l->sockets, MAX_SOCKETS, &generation);
	size_t kept = n < MAX_SOCKETS ? n : MAX_SOCKETS;
	bool ok = true;

	for (size_t i = 0; i < kept; i++) {
		struct keeper_msg m = {.magic = KEEPER_MAGIC, .type = KEEPER_SOCKET};
		m.socket.generation = generation;
		m.socket.index = (uint32_t)i;
		m.socket.total = (uint32_t)kept;
		m.socket.worker = l->sockets[i].worker;
		m.socket.type = l->sockets[i].type;
		m.socket.addr = l->sockets[i].addr;
		ok = ok && l->sockets[i].fd >= 0 && say(l, &m, l->sockets[i].fd);
	}
	for (size_t i = 0; i < kept; i++)
		if (l->sockets[i].fd >= 0)
			close(l->sockets[i].fd);
	if (!ok) {
		hang_up(l, now_ms, errno == EAGAIN ? "the keeper does not read" : strerror(errno));
		return;
	}
	if (n > kept)
		log_warn("the keeper holds only some of the listening sockets", "sent", "4096");
	l->sent_generation = generation;
	atomic_store_explicit(&l->holding, true, memory_order_relaxed);
}

/* The keeper never speaks: anything readable is its hang-up. */
static bool keeper_gone(struct keeper_link *l)
{
	char byte;
	ssize_t r = recv(l->fd, &byte, sizeof byte, MSG_DONTWAIT);

	return r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) || r > 0;
}

void keeper_link_turn(struct keeper_link *l, uint64_t now_ms)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	if (l->fd >= 0 && keeper_gone(l))
		hang_up(l, now_ms, "the keeper hung up");
	if (!l->left && l->server && l->fd < 0 && now_ms >= l->next_try_ms)
		connect_keeper(l, now_ms);
	if (l->fd >= 0 && server_sockets_generation(l->server) != l->sent_generation)
		send_sockets(l, now_ms);
	pthread_mutex_unlock(&l->lock);
}

void keeper_link_leave(struct keeper_link *l)
{
	struct keeper_msg bye = {.magic = KEEPER_MAGIC, .type = KEEPER_LEAVING};

	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	l->left = true;
	atomic_store_explicit(&l->holding, false, memory_order_relaxed);
	if (l->fd >= 0) {
		if (!say(l, &bye, -1))
			log_warn("cannot tell the keeper we are leaving; it will answer what is "
				 "queued when we are gone", "error", strerror(errno));
		close(l->fd);
		l->fd = -1;
	}
	pthread_mutex_unlock(&l->lock);
}

void keeper_link_stats(const struct keeper_link *l, struct keeper_stats *out)
{
	memset(out, 0, sizeof *out);
	if (!l)
		return;
	const struct keeper_report *r = &l->beats->report;
	out->connected = atomic_load_explicit(&l->holding, memory_order_relaxed);
	for (int i = 0; i < KEEPER_REASONS; i++) {
		out->rescues[i] = atomic_load_explicit(&r->rescues[i], memory_order_relaxed);
		out->relayed[i] = atomic_load_explicit(&r->relayed[i], memory_order_relaxed);
	}
	for (int i = 0; i < KEEPER_FAILURES; i++)
		out->failed[i] = atomic_load_explicit(&r->failed[i], memory_order_relaxed);
}
