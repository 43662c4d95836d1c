/*
 * keeper/keeper.c — the keeper process (`localdns keeper`): see keeper.h.
 *
 * One thread, one poll loop over: the unix listener (keeper.socket), the
 * link of each serving process (at most MAX_SERVED: the one of this pod,
 * and a dead one whose queues are still being answered beside the one
 * that replaced it), the relay's sockets, the copies being rescued, the
 * TCP connections taken from rescued listeners and ours to the cluster DNS
 * (stream.c), and a signalfd. Every KEEPER_LOOK_MS it looks at each
 * worker's heartbeat (util/stall.h) and writes what it did into each
 * served process's shared page (its report: localdns's keeper counters).
 *
 * The states of a serving process here:
 *
 *   SERVING  the link is up; its copies are read only while their worker
 *            is judged stuck (KEEPER_RESCUE_MS over on-time looks) and
 *            there is a fallback endpoint to send what they hold to;
 *   DEAD     the link hung up without LEAVING: its heartbeat is taken out
 *            at once (nft_leave_for), every copy is read until it has been
 *            quiet for DEAD_QUIET_MS (the heartbeat is gone, so nothing new
 *            comes unless another localdns keeps it), then closed; with no
 *            fallback endpoint, closed at once (clients are refused);
 *   (gone)   LEAVING said, or a dead one's copies closed: forgotten.
 *
 * Everything it is allowed to do is set up on the main thread first: the
 * relay's sockets are made and bound, the netlink socket opened, the unix
 * socket bound. The loop then runs on a thread restricted as PRIVS_KEEPER
 * (CAP_NET_ADMIN, its seccomp list, reading /proc only), which only
 * accepts, reads, writes, maps what it is sent, asks nftables and connects
 * to the cluster DNS over TCP (its one kind of new socket); the main
 * thread only waits for it, under the deny-list privs_drop gave it (as the
 * daemon's main thread: an allow-list would kill a sanitizer's leak check,
 * which runs at exit from the thread that exits).
 */
#include "keeper/keeper.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "keeper/internal.h"
#include "log/log.h"
#include "nft/nft.h"
#include "privs/privs.h"
#include "util/clock.h"
#include "util/stall.h"
#include "util/task.h"

#define MAX_SERVED 4
#define MAX_COPIES 4096           /* as the link sends at most */
#define MAX_WORKERS 4096
#define LOOK_ON_TIME_MS (KEEPER_LOOK_MS + 50)
#define DEAD_QUIET_MS 200         /* a dead process's copies, quiet this long: closed */
#define DEAD_MAX_MS 5000          /* and closed by then whatever comes */
#define ENDPOINTS_MAX_AGE_MS 1000 /* the fallback maps read again during a rescue */
#define READS_PER_COPY 512        /* datagrams or connections taken per wake-up */

struct copy {
	unsigned worker;
	int type;                     /* SOCK_DGRAM or SOCK_STREAM */
	int fd;
	struct sockaddr_storage addr;
};

enum served_state { SERVING, DEAD };

struct served {
	bool used;
	enum served_state state;
	int fd;                       /* the link; -1 once it hung up */
	bool hello;
	int32_t pid;                  /* as the process says (its PID namespace) */
	pid_t visible_pid;            /* as the kernel shows it to us; 0: not in our namespace */
	uint32_t token;
	struct keeper_beats *beats;   /* its heartbeats; we write our report there */
	size_t beats_len;
	unsigned n_workers;
	struct stall_judge *judges;   /* per worker */
	bool *rescuing;               /* per worker: its copies are read */
	uint64_t *changed_ms;         /* per worker: when a look last saw its heartbeat move */
	struct copy *copies;
	size_t n_copies;
	struct copy *incoming;        /* a set being received */
	size_t n_incoming;
	uint64_t incoming_generation;
	uint64_t dead_ms;
	uint64_t last_read_ms;        /* a dead one's copies gave something then */
	uint64_t rescued;             /* queries taken from its copies */
};

struct keeper {
	const struct config *cfg;
	struct nft *nft;
	struct relay *relay;
	int listen_fd;
	int sig_fd;
	bool stopping;
	struct served served[MAX_SERVED];
	struct streams *streams;      /* TCP connections taken from rescued listeners */
	uint64_t next_look_ms;
	uint64_t endpoints_ms;        /* when the fallback maps were read; 0: never */
	uint64_t max_still_ms;        /* the longest a worker stood still (counted), for the exit line */
	uint64_t max_gap_ms;          /* the longest between two turns a look saw, counted or not */
	uint64_t rescues[KEEPER_REASONS];  /* processes seen to die, workers judged stuck */
	uint64_t relayed[KEEPER_REASONS];  /* queries taken and asked of the cluster DNS */
};

/* ---- the serving processes ------------------------------------------------------ */

static const char *pid_text(const struct served *s, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRId32, s->pid);
	return buf;
}

static void close_copies(struct keeper *k, struct copy *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		keeper_relay_forget(k->relay, c[i].fd);
		close(c[i].fd);
	}
}

static void forget_served(struct keeper *k, struct served *s)
{
	if (s->fd >= 0)
		close(s->fd);
	close_copies(k, s->copies, s->n_copies);
	close_copies(k, s->incoming, s->n_incoming);
	if (s->beats)
		munmap((void *)s->beats, s->beats_len);
	free(s->copies);
	free(s->incoming);
	free(s->judges);
	free(s->rescuing);
	free(s->changed_ms);
	*s = (struct served){.fd = -1};
}

/* The table's fallback endpoints (what the kernel DNATs to), less what we serve. */
static void read_endpoints(struct keeper *k, uint64_t now)
{
	struct config_ip ips[64], keep[64];
	size_t n_keep = 0;
	char count[24];

	if (k->endpoints_ms && now - k->endpoints_ms < ENDPOINTS_MAX_AGE_MS)
		return;
	k->endpoints_ms = now;
	int n = nft_keep_endpoints(k->nft, ips, sizeof ips / sizeof ips[0]);
	if (n < 0) {
		log_warn("keeper: cannot read the fallback endpoints; keeping the last ones", "error",
			 strerror(errno));
		return;
	}
	for (int i = 0; i < n && i < 64; i++) {
		bool ours = false;
		for (size_t j = 0; j < config_served_count(k->cfg); j++)
			ours = ours || (config_served_address(k->cfg, j)->family == ips[i].family &&
					strcmp(config_served_address(k->cfg, j)->text, ips[i].text) == 0);
		if (!ours) /* asked there, it would come back to us */
			keep[n_keep++] = ips[i];
	}
	keeper_relay_use_endpoints(k->relay, keep, n_keep, k->cfg->listen.port);
	if (n_keep == 0) {
		log_warn("keeper: the fallback maps have no endpoint; queued queries are left to a "
			 "stuck localdns, and a dead one's refused (nftables.fallback_service, "
			 "nftables.fallback_endpoints)");
		return;
	}
	snprintf(count, sizeof count, "%zu", n_keep);
	log_debug("keeper: relaying to the fallback endpoints", "endpoints", count);
}

static enum keeper_reason reason_of(const struct served *s)
{
	return s->state == DEAD ? KEEPER_DEATH : KEEPER_HANG;
}

/* Datagrams queued in a UDP copy, each asked of the cluster DNS. */
static unsigned drain_udp(struct keeper *k, enum keeper_reason why, const struct copy *c,
			  uint64_t now)
{
	uint8_t buf[4096];
	unsigned n = 0;

	for (; n < READS_PER_COPY; n++) {
		struct sockaddr_storage from;
		socklen_t flen = sizeof from;
		ssize_t len = recvfrom(c->fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&from,
				       &flen);
		if (len < 0)
			break;
		if (keeper_relay_ask(k->relay, c->fd, &from, buf, (size_t)len, now))
			k->relayed[why]++;
	}
	return n;
}

/* Connections queued on a TCP copy, taken to be read. */
static unsigned drain_tcp(struct keeper *k, enum keeper_reason why, const struct copy *c,
			  uint64_t now)
{
	unsigned n = 0;

	for (; n < READS_PER_COPY; n++) {
		int fd = accept4(c->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			break;
		keeper_streams_add(k->streams, k->relay, fd, why, now); /* carried over TCP */
	}
	return n;
}

static unsigned drain(struct keeper *k, struct served *s, const struct copy *c, uint64_t now)
{
	unsigned n = c->type == SOCK_DGRAM ? drain_udp(k, reason_of(s), c, now)
					   : drain_tcp(k, reason_of(s), c, now);

	s->rescued += n;
	if (n)
		s->last_read_ms = now;
	return n;
}

static bool rescued(const struct served *s, const struct copy *c)
{
	return s->state == DEAD || (c->worker < s->n_workers && s->rescuing[c->worker]);
}

/*
 * Is copy c read now? Only when there is somewhere to send what it holds:
 * with no fallback endpoint a stuck worker's queries are left in its
 * sockets, for it to answer when it turns again, rather than dropped.
 */
static bool reading(const struct keeper *k, const struct served *s, const struct copy *c)
{
	return rescued(s, c) && keeper_relay_endpoints(k->relay) > 0;
}

/* The link hung up without LEAVING: the process is gone (kill -9, OOM, a crash). */
static void died(struct keeper *k, struct served *s, uint64_t now)
{
	char err[CONFIG_ERR_MAX], pid[16], copies[16];

	close(s->fd);
	s->fd = -1;
	s->state = DEAD;
	s->dead_ms = s->last_read_ms = now;
	if (s->hello) /* a process that never said HELLO served nothing */
		k->rescues[KEEPER_DEATH]++;
	/* First: new DNS flows fail open at once, host-network ones included. */
	int rc = s->hello ? nft_leave_for(k->nft, s->token, err, sizeof err) : 1;
	if (rc < 0)
		log_error("keeper: cannot take the dead process's heartbeat out; DNS fails open when "
			  "it expires", "error", err);
	k->endpoints_ms = 0;
	read_endpoints(k, now);
	snprintf(copies, sizeof copies, "%zu", s->n_copies);
	if (keeper_relay_endpoints(k->relay) == 0) {
		/* Nowhere to send them (a VM without fallback endpoints): closed
		 * now, a client is refused at once and asks elsewhere, as without a
		 * keeper, instead of waiting for an answer that cannot come. */
		log_warn("keeper: the serving process is gone; its heartbeat is out, and with no "
			 "fallback endpoint its sockets are closed at once", "pid",
			 pid_text(s, pid, sizeof pid), "sockets", copies);
		forget_served(k, s);
		return;
	}
	log_warn("keeper: the serving process is gone; its heartbeat is out, and what its sockets "
		 "had queued goes to the cluster DNS", "pid", pid_text(s, pid, sizeof pid),
		 "sockets", copies, "heartbeat", rc == 1 ? "kept by another localdns" : "out");
	for (size_t i = 0; i < s->n_copies; i++)
		drain(k, s, &s->copies[i], now);
}

static void finish_dead(struct keeper *k, struct served *s, uint64_t now)
{
	char pid[24], count[24];

	if (now - s->dead_ms < DEAD_MAX_MS) {
		if (now - s->last_read_ms < DEAD_QUIET_MS)
			return;
		for (size_t i = 0; i < s->n_copies; i++)
			if (keeper_relay_pending(k->relay, s->copies[i].fd))
				return; /* the answer goes out of that very socket */
	}
	snprintf(count, sizeof count, "%" PRIu64, s->rescued);
	log_info("keeper: closed the dead process's sockets", "pid", pid_text(s, pid, sizeof pid),
		 "queries_relayed", count);
	forget_served(k, s);
}

/* ---- what the keeper did, for localdns's counters ---------------------------------- */

/*
 * Our totals into the report of the page s shares with us (relaxed stores:
 * each count stands on its own). Every process we serve gets them, so the
 * localdns that replaces a dead one reads what we did meanwhile.
 */
/* The totals: UDP queries (relay.c) and TCP connections' (stream.c, once closed). */
static void totals(const struct keeper *k, struct keeper_stats *t)
{
	struct keeper_relay_stats rs;
	struct stream_stats ss;

	keeper_relay_stats(k->relay, &rs);
	keeper_streams_stats(k->streams, &ss);
	for (int i = 0; i < KEEPER_REASONS; i++) {
		t->rescues[i] = k->rescues[i];
		t->relayed[i] = k->relayed[i] + ss.relayed[i];
	}
	t->failed[KEEPER_NOT_SENT] = rs.dropped + ss.not_sent;
	t->failed[KEEPER_NO_ANSWER] = rs.expired + rs.forgotten + ss.no_answer;
}

static void publish_to(const struct keeper *k, struct served *s)
{
	struct keeper_report *r = &s->beats->report;
	struct keeper_stats t;

	totals(k, &t);
	for (int i = 0; i < KEEPER_REASONS; i++) {
		atomic_store_explicit(&r->rescues[i], t.rescues[i], memory_order_relaxed);
		atomic_store_explicit(&r->relayed[i], t.relayed[i], memory_order_relaxed);
	}
	for (int i = 0; i < KEEPER_FAILURES; i++)
		atomic_store_explicit(&r->failed[i], t.failed[i], memory_order_relaxed);
}

static void publish(struct keeper *k)
{
	for (size_t i = 0; i < MAX_SERVED; i++)
		if (k->served[i].used && k->served[i].beats)
			publish_to(k, &k->served[i]);
}

/* ---- messages from a serving process --------------------------------------------- */

static bool is_socket(int fd, int type, int family)
{
	int t = 0, d = 0;
	socklen_t tl = sizeof t, dl = sizeof d;

	return getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &tl) == 0 && t == type &&
	       getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &d, &dl) == 0 && d == family;
}

static bool take_hello(struct served *s, const struct keeper_msg *m, int fd)
{
	struct stat st;
	unsigned n = m->hello.n_workers;
	size_t len = keeper_beats_size(n);

	if (s->hello || n == 0 || n > MAX_WORKERS || fd < 0 || fstat(fd, &st) < 0 ||
	    !S_ISREG(st.st_mode) || (size_t)st.st_size < len)
		return false;
	/* Read-write: our report goes there (the rest we only read). */
	void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return false;
	s->beats = map;
	s->beats_len = len;
	s->judges = calloc(n, sizeof *s->judges);
	s->rescuing = calloc(n, sizeof *s->rescuing);
	s->changed_ms = calloc(n, sizeof *s->changed_ms);
	if (s->beats->magic != KEEPER_MAGIC || s->beats->n_workers != n || !s->judges ||
	    !s->rescuing || !s->changed_ms)
		return false;
	s->n_workers = n;
	s->pid = m->hello.pid;
	if (s->visible_pid != s->pid)
		s->visible_pid = 0; /* its thread ids are not ours to look up */
	s->token = m->hello.token;
	s->hello = true;
	return true;
}

/* One socket of a set; the set replaces the copies once it is whole. */
static bool take_socket(struct keeper *k, struct served *s, const struct keeper_msg *m, int fd)
{
	uint32_t total = m->socket.total, index = m->socket.index;

	if (!s->hello || fd < 0 || total == 0 || total > MAX_COPIES || index >= total ||
	    m->socket.worker >= s->n_workers ||
	    (m->socket.type != SOCK_DGRAM && m->socket.type != SOCK_STREAM) ||
	    !is_socket(fd, m->socket.type, m->socket.addr.ss_family))
		return false;
	if (index == 0) { /* a new set: a cut one before it is dropped */
		close_copies(k, s->incoming, s->n_incoming);
		free(s->incoming);
		s->n_incoming = 0;
		s->incoming_generation = m->socket.generation;
		if (!(s->incoming = calloc(total, sizeof *s->incoming)))
			return false;
	}
	if (!s->incoming || m->socket.generation != s->incoming_generation ||
	    index != s->n_incoming)
		return false;
	s->incoming[s->n_incoming++] = (struct copy){.worker = m->socket.worker,
						      .type = m->socket.type, .fd = fd,
						      .addr = m->socket.addr};
	if (s->n_incoming < total)
		return true;
	close_copies(k, s->copies, s->n_copies);
	free(s->copies);
	s->copies = s->incoming;
	s->n_copies = s->n_incoming;
	s->incoming = NULL;
	s->n_incoming = 0;
	char pid[24], count[16];
	snprintf(count, sizeof count, "%zu", s->n_copies);
	log_info("keeper: holding the serving process's sockets", "pid",
		 pid_text(s, pid, sizeof pid), "sockets", count);
	return true;
}

/* One message; false: the link is broken (hung up, or nonsense said). */
static bool take_message(struct keeper *k, struct served *s, uint64_t now)
{
	struct keeper_msg m;
	char control[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = {.iov_base = &m, .iov_len = sizeof m};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
			     .msg_controllen = sizeof control};
	int fd = -1, extra = 0;
	ssize_t r = recvmsg(s->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return true;
	if (r < 0) { /* ECONNRESET: gone as surely as by a hang-up */
		died(k, s, now);
		return true;
	}
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); r >= 0 && c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int got;
			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
			if (fd < 0)
				fd = got;
			else
				close(got), extra++;
		}
	}
	bool ok = r == (ssize_t)sizeof m && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
		  !extra && m.magic == KEEPER_MAGIC;
	if (ok && m.type == KEEPER_HELLO) {
		ok = take_hello(s, &m, fd);
		if (fd >= 0)
			close(fd); /* mapped: the mapping keeps it */
		if (ok)
			publish_to(k, s);
		return ok;
	}
	if (ok && m.type == KEEPER_SOCKET) {
		if (!take_socket(k, s, &m, fd) && fd >= 0)
			ok = (close(fd), false);
		return ok;
	}
	if (fd >= 0)
		close(fd);
	if (ok && m.type == KEEPER_LEAVING) {
		char pid[24];
		log_info("keeper: the serving process hands its traffic over itself; dropped its "
			 "sockets", "pid", pid_text(s, pid, sizeof pid));
		forget_served(k, s);
		return true;
	}
	if (r == 0) {
		died(k, s, now);
		return true;
	}
	return false;
}

static void read_link(struct keeper *k, struct served *s, uint64_t now)
{
	/* A set of sockets is many messages: take what is there, a bounded lot. */
	for (int i = 0; i < 2 * MAX_COPIES && s->used && s->fd >= 0 && s->state == SERVING; i++) {
		int before = s->fd;
		if (!take_message(k, s, now)) {
			char pid[24];
			log_warn("keeper: nonsense on the link; treating the process as gone", "pid",
				 pid_text(s, pid, sizeof pid));
			died(k, s, now);
			return;
		}
		struct pollfd p = {.fd = before, .events = POLLIN};
		if (!s->used || s->fd < 0 || poll(&p, 1, 0) <= 0)
			return;
	}
}

static void accept_link(struct keeper *k)
{
	int fd = accept4(k->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct ucred cred;
	socklen_t len = sizeof cred;

	if (fd < 0)
		return;
	/* Only our own user (the pod's uid 0) may hand us sockets. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != getuid()) {
		close(fd);
		return;
	}
	for (size_t i = 0; i < MAX_SERVED; i++) {
		struct served *s = &k->served[i];
		if (s->used)
			continue;
		/* The kernel translates the pid into our namespace (0: not in it). */
		*s = (struct served){.used = true, .state = SERVING, .fd = fd,
				     .visible_pid = cred.pid};
		return;
	}
	log_warn("keeper: too many serving processes at once; refusing one");
	close(fd);
}

/* ---- looking at the workers ------------------------------------------------------- */

/*
 * What the kernel says of worker w's thread, when its heartbeat stood still
 * since the last look (the only time it matters) and the process is in our
 * PID namespace (the pod shares one: shareProcessNamespace).
 */
static const struct stall_task *worker_task(const struct served *s, unsigned w, uint64_t beat,
					    uint64_t now, struct stall_task *t)
{
	struct server_beat *b = &s->beats->worker[w];

	/* An idle worker turns every SERVER_IDLE_TURN_MS: only a longer stand-still is worth a look. */
	if (s->visible_pid <= 0 || !s->judges[w].seen || beat != s->judges[w].beat ||
	    now - s->changed_ms[w] < SERVER_IDLE_TURN_MS)
		return NULL;
	task_sched(s->visible_pid, atomic_load_explicit(&b->tid, memory_order_relaxed), t);
	return t;
}

static void judge_workers(struct keeper *k, struct served *s, uint64_t now)
{
	char pid[24], worker[24], still_text[24], count[24];
	struct stall_task task;

	for (unsigned w = 0; w < s->n_workers; w++) {
		uint64_t beat = atomic_load_explicit(&s->beats->worker[w].ms,
						     memory_order_relaxed);
		bool moved = !s->judges[w].seen || beat != s->judges[w].beat;
		uint64_t still = stall_judge_look(&s->judges[w], beat, now, LOOK_ON_TIME_MS,
						  worker_task(s, w, beat, now, &task));
		if (moved)
			s->changed_ms[w] = now;
		else if (now - s->changed_ms[w] > k->max_gap_ms)
			k->max_gap_ms = now - s->changed_ms[w];
		bool stuck = still >= KEEPER_RESCUE_MS;
		if (still > k->max_still_ms)
			k->max_still_ms = still;
		if (stuck == s->rescuing[w])
			continue;
		s->rescuing[w] = stuck;
		snprintf(worker, sizeof worker, "%u", w);
		snprintf(still_text, sizeof still_text, "%" PRIu64 "ms", still);
		snprintf(count, sizeof count, "%" PRIu64, s->rescued);
		if (stuck) {
			char err[CONFIG_ERR_MAX];
			k->rescues[KEEPER_HANG]++;
			read_endpoints(k, now);
			/* New flows fail open now; its monitor renews once all turn again. */
			int rc = nft_leave_for(k->nft, s->token, err, sizeof err);
			log_warn("keeper: a worker stands still; its heartbeat is out and what queues in "
				 "its sockets goes to the cluster DNS", "pid", pid_text(s, pid, sizeof pid),
				 "worker", worker, "still_for", still_text, "heartbeat",
				 rc < 0 ? err : rc == 1 ? "kept by another localdns" : "out");
		} else {
			log_info("keeper: the worker turns again and answers its own queries", "pid",
				 pid_text(s, pid, sizeof pid), "worker", worker, "queries_relayed",
				 count);
		}
	}
}

static void look(struct keeper *k, uint64_t now)
{
	for (size_t i = 0; i < MAX_SERVED; i++) {
		struct served *s = &k->served[i];
		if (!s->used)
			continue;
		if (s->state == SERVING && s->hello)
			judge_workers(k, s, now);
		bool any = false;
		for (size_t c = 0; c < s->n_copies; c++)
			any = any || rescued(s, &s->copies[c]);
		if (any)
			read_endpoints(k, now); /* at most once a second */
		for (size_t c = 0; c < s->n_copies; c++)
			if (reading(k, s, &s->copies[c]))
				drain(k, s, &s->copies[c], now);
		if (s->state == DEAD)
			finish_dead(k, s, now);
	}
	keeper_relay_expire(k->relay, now);
	publish(k);
}

/* ---- the loop ------------------------------------------------------------------------- */

enum { SLOT_SIGNAL, SLOT_LISTEN, SLOT_LINK, SLOT_RELAY, SLOT_COPY, SLOT_STREAM };

struct slot_of {
	int kind;
	size_t a, b;
};

#define MAX_POLL (2 + MAX_SERVED + 16 + 2 * STREAMS_MAX + 256)

static size_t watch(struct pollfd *fds, struct slot_of *of, size_t n, int fd, int kind, size_t a,
		    size_t b)
{
	if (fd < 0 || n == MAX_POLL)
		return n;
	fds[n] = (struct pollfd){.fd = fd, .events = POLLIN};
	of[n] = (struct slot_of){.kind = kind, .a = a, .b = b};
	return n + 1;
}

static size_t poll_set(struct keeper *k, struct pollfd *fds, struct slot_of *of)
{
	int relayed[16];
	size_t n = 0, nr = keeper_relay_fds(k->relay, relayed, 16);

	n = watch(fds, of, n, k->sig_fd, SLOT_SIGNAL, 0, 0);
	n = watch(fds, of, n, k->listen_fd, SLOT_LISTEN, 0, 0);
	for (size_t i = 0; i < nr; i++)
		n = watch(fds, of, n, relayed[i], SLOT_RELAY, 0, 0);
	for (size_t i = 0; i < MAX_SERVED; i++) {
		struct served *s = &k->served[i];
		if (!s->used)
			continue;
		n = watch(fds, of, n, s->fd, SLOT_LINK, i, 0);
		for (size_t c = 0; c < s->n_copies; c++)
			if (reading(k, s, &s->copies[c]))
				n = watch(fds, of, n, s->copies[c].fd, SLOT_COPY, i, c);
	}
	size_t ns = keeper_streams_poll_set(k->streams, fds + n, MAX_POLL - n);
	for (size_t i = n; i < n + ns; i++)
		of[i] = (struct slot_of){.kind = SLOT_STREAM};
	return n + ns;
}

static bool anyone(const struct keeper *k)
{
	for (size_t i = 0; i < MAX_SERVED; i++)
		if (k->served[i].used)
			return true;
	return keeper_streams_count(k->streams) > 0;
}

static void handle(struct keeper *k, const struct pollfd *p, const struct slot_of *of,
		   uint64_t now)
{
	struct signalfd_siginfo si;
	struct served *s = of->kind == SLOT_LINK || of->kind == SLOT_COPY ? &k->served[of->a]
									    : NULL;

	if (!(p->revents & (POLLIN | POLLOUT | POLLHUP | POLLERR)))
		return;
	switch (of->kind) {
	case SLOT_SIGNAL:
		if (read(k->sig_fd, &si, sizeof si) == sizeof si)
			k->stopping = true;
		break;
	case SLOT_LISTEN:
		accept_link(k);
		break;
	case SLOT_LINK:
		if (s->used && s->fd == p->fd && s->state == SERVING)
			read_link(k, s, now);
		break;
	case SLOT_RELAY:
		keeper_relay_read(k->relay, p->fd);
		break;
	case SLOT_COPY:
		if (s->used && of->b < s->n_copies && s->copies[of->b].fd == p->fd &&
		    reading(k, s, &s->copies[of->b]))
			drain(k, s, &s->copies[of->b], now);
		break;
	case SLOT_STREAM:
		keeper_streams_ready(k->streams, p->fd, p->revents);
		break;
	}
}

static void run(struct keeper *k)
{
	static struct pollfd fds[MAX_POLL];
	static struct slot_of of[MAX_POLL];

	k->next_look_ms = (uint64_t)monotonic_ms();
	while (!k->stopping || anyone(k)) {
		size_t n = poll_set(k, fds, of);
		uint64_t now = (uint64_t)monotonic_ms();
		int timeout = anyone(k) ? (k->next_look_ms > now ? (int)(k->next_look_ms - now) : 0)
					: -1;
		if (poll(fds, n, timeout) < 0 && errno != EINTR) {
			log_error("keeper: poll failed; stopping", "error", strerror(errno));
			return;
		}
		now = (uint64_t)monotonic_ms();
		/* Looks first: a link read below may free what fds still names. */
		if (now >= k->next_look_ms) {
			look(k, now);
			keeper_streams_sweep(k->streams, now);
			k->next_look_ms = now + KEEPER_LOOK_MS;
		}
		for (size_t i = 0; i < n; i++)
			handle(k, &fds[i], &of[i], now);
		keeper_streams_sweep(k->streams, now);
	}
}

/* ---- set-up ----------------------------------------------------------------------------- */

/* keeper.socket: a stale one replaced; 0600, ours alone. */
static int listen_on(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
	if (fd >= 0) {
		unlink(path);
		mode_t old = umask(0177);
		int rc = bind(fd, (struct sockaddr *)&sun, sizeof sun);
		umask(old);
		if (rc == 0 && listen(fd, MAX_SERVED) == 0)
			return fd;
	}
	snprintf(err, errlen, "keeper.socket %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

static int signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

static int set_up(struct keeper *k, char *err, size_t errlen)
{
	if (!k->cfg->keeper.socket[0] || !k->cfg->nftables.enabled) {
		snprintf(err, errlen, "the keeper needs keeper.socket and nftables.enabled");
		return -1;
	}
	if (privs_drop(k->cfg, err, errlen) < 0)
		return -1;
	if ((k->sig_fd = signals()) < 0) {
		snprintf(err, errlen, "cannot receive signals: %s", strerror(errno));
		return -1;
	}
	if (!(k->nft = nft_open(k->cfg, err, errlen)) ||
	    !(k->relay = keeper_relay_new(err, errlen)) ||
	    (k->listen_fd = listen_on(k->cfg->keeper.socket, err, errlen)) < 0)
		return -1;
	if (!(k->streams = keeper_streams_new())) {
		snprintf(err, errlen, "keeper: out of memory");
		return -1;
	}
	nft_mute(k->nft);
	/* Not dumpable: the localdns beside it (same uid, and with the pod's
	 * shared PID namespace in sight) cannot ptrace it or read its memory. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	return 0;
}

static void *keep(void *arg)
{
	run(arg);
	return NULL;
}

int keeper_main(const char *config_path)
{
	struct config *cfg;
	struct keeper k = {.listen_fd = -1, .sig_fd = -1};
	char err[CONFIG_ERR_MAX];
	int rc = 1;

	if (config_load(config_path, &cfg, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	log_setup((enum log_level)cfg->log.level, (enum log_format)cfg->log.format);
	k.cfg = cfg;
	for (size_t i = 0; i < MAX_SERVED; i++)
		k.served[i].fd = -1;
	pthread_t thread;
	if (set_up(&k, err, sizeof err) < 0 ||
	    privs_thread_create(&thread, PRIVS_KEEPER, "keeper", keep, &k, err, sizeof err) < 0) {
		log_error("keeper: cannot start", "error", err);
	} else {
		log_info("keeper: waiting for localdns", "socket", cfg->keeper.socket);
		pthread_join(thread, NULL);
		struct keeper_stats t;
		char asked[24], unanswered[24], dropped[24], rescues[24], still[24], gap[24];
		keeper_streams_sweep(k.streams, UINT64_MAX); /* counted before the totals */
		totals(&k, &t);
		snprintf(asked, sizeof asked, "%" PRIu64, t.relayed[KEEPER_DEATH] + t.relayed[KEEPER_HANG]);
		snprintf(unanswered, sizeof unanswered, "%" PRIu64, t.failed[KEEPER_NO_ANSWER]);
		snprintf(dropped, sizeof dropped, "%" PRIu64, t.failed[KEEPER_NOT_SENT]);
		snprintf(rescues, sizeof rescues, "%" PRIu64,
			 t.rescues[KEEPER_DEATH] + t.rescues[KEEPER_HANG]);
		snprintf(still, sizeof still, "%" PRIu64 "ms", k.max_still_ms);
		snprintf(gap, sizeof gap, "%" PRIu64 "ms", k.max_gap_ms);
		log_info("keeper: stopped", "rescues", rescues, "relayed", asked, "unanswered",
			 unanswered, "dropped", dropped, "longest_stand_still", still,
			 "longest_between_turns", gap);
		rc = 0;
	}
	for (size_t i = 0; i < MAX_SERVED; i++)
		if (k.served[i].used)
			forget_served(&k, &k.served[i]);
	keeper_streams_free(k.streams);
	/* The socket file stays (the filter allows no unlink): the next keeper replaces it. */
	if (k.listen_fd >= 0)
		close(k.listen_fd);
	if (k.sig_fd >= 0)
		close(k.sig_fd);
	keeper_relay_free(k.relay);
	nft_close(k.nft);
	config_free(cfg);
	return rc;
}
