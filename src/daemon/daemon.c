/* daemon — see daemon.h. Reloading is in reload.c, the file watcher in watch.c. */
#include "daemon/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kube/kube.h"
#include "log/log.h"
#include "node/node.h"
#include "query/query.h"
#include "querylog/querylog.h"
#include "server/server.h"
#include "upstream/upstream.h"
#include "util/clock.h"
#include "util/file.h"
#include "util/hash.h"
#include "util/stall.h"
#include "util/task.h"
#include "util/wake.h"

#define LOOP_STUCK_MS 5000   /* workers and the resolver: idle, they turn every second */
#define KUBE_STUCK_MS 30000  /* the Kubernetes thread may parse and apply a big page in one turn */

int daemon_init(struct daemon *d, const char *config_path, struct config *cfg, char *err,
		size_t errlen)
{
	memset(d, 0, sizeof *d);
	d->config_path = config_path;
	d->cfg = cfg;
	d->running = cfg;
	d->files_hash = cfg->files_hash; /* what was parsed: a later change is a change */
	atomic_init(&d->cluster_fallback, cfg->cluster.n_fallback_servers > 0);
	pthread_mutex_init(&d->reload_lock, NULL);
	pthread_mutex_init(&d->ask_lock, NULL);
	pthread_cond_init(&d->ask_done, NULL);
	d->ask_fd = wake_open();
	if (d->ask_fd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		daemon_destroy(d);
		return -1;
	}
	return 0;
}

void daemon_destroy(struct daemon *d)
{
	if (d->running != d->cfg)
		config_free(d->running);
	d->running = NULL;
	if (d->ask_fd >= 0)
		close(d->ask_fd);
	d->ask_fd = -1;
	pthread_cond_destroy(&d->ask_done);
	pthread_mutex_destroy(&d->ask_lock);
	pthread_mutex_destroy(&d->reload_lock);
	free(d->capture_judges);
	d->capture_judges = NULL;
}

size_t daemon_served_addresses(struct daemon *d, struct config_ip *out, size_t cap,
			       size_t *n_listen)
{
	pthread_mutex_lock(&d->reload_lock);
	const struct config *cfg = d->running;
	size_t n = config_served_count(cfg);
	for (size_t i = 0; i < n && i < cap; i++)
		out[i] = *config_served_address(cfg, i);
	*n_listen = cfg->listen.n_addresses;
	pthread_mutex_unlock(&d->reload_lock);
	return n;
}

/* ---- what other threads ask the main thread to do ------------------------------- */

/* Wake the main thread: it looks at every kind of request (daemon_serve_asks). */
static void wake_main(struct daemon *d)
{
	wake_send(d->ask_fd);
}

int daemon_ask_reload(struct daemon *d, char *err, size_t errlen)
{
	int rc = -1;

	pthread_mutex_lock(&d->ask_lock);
	uint64_t mine = ++d->asked;
	if (!d->refusing)
		wake_main(d);
	while (!d->refusing && d->answered < mine)
		pthread_cond_wait(&d->ask_done, &d->ask_lock);
	if (d->answered >= mine) {
		rc = d->ask_rc;
		snprintf(err, errlen, "%s", d->ask_err);
	} else {
		snprintf(err, errlen, "localdns is shutting down");
	}
	pthread_mutex_unlock(&d->ask_lock);
	return rc;
}

int daemon_ask_fd(const struct daemon *d)
{
	return d->ask_fd;
}

/* One reload for every request made so far, when there is one. */
static void serve_asked_reload(struct daemon *d)
{
	char err[CONFIG_ERR_MAX] = "";

	pthread_mutex_lock(&d->ask_lock);
	uint64_t covered = d->asked;
	bool asked = covered > d->answered;
	pthread_mutex_unlock(&d->ask_lock);
	if (!asked)
		return;
	/* Outside ask_lock: an asker arriving meanwhile waits for the next round. */
	int rc = daemon_reload(d, err, sizeof err);
	pthread_mutex_lock(&d->ask_lock);
	d->answered = covered;
	d->ask_rc = rc;
	snprintf(d->ask_err, sizeof d->ask_err, "%s", err);
	pthread_cond_broadcast(&d->ask_done);
	pthread_mutex_unlock(&d->ask_lock);
}

void daemon_refuse_reloads(struct daemon *d)
{
	pthread_mutex_lock(&d->ask_lock);
	d->refusing = true;
	pthread_cond_broadcast(&d->ask_done);
	pthread_mutex_unlock(&d->ask_lock);
}

void daemon_reload_stats(const struct daemon *d, struct daemon_reload_stats *out)
{
	out->ok = atomic_load(&d->reloads_ok);
	out->failed = atomic_load(&d->reloads_failed);
	out->last_ok_ms = atomic_load(&d->last_reload_ok_ms);
}

void daemon_serving(struct daemon *d, struct config_ip *ip, uint16_t *port,
		    uint64_t *upstream_timeout_ms)
{
	pthread_mutex_lock(&d->reload_lock);
	*ip = *config_served_address(d->running, 0);
	*port = d->running->listen.port;
	*upstream_timeout_ms = d->running->upstream.timeout_ms;
	pthread_mutex_unlock(&d->reload_lock);
}

bool daemon_ready(const struct daemon *d, char *why, size_t whylen)
{
	struct kube_status ks;

	if (!d->server) {
		snprintf(why, whylen, "sockets not bound yet");
		return false;
	}
	if (d->node == NULL && (d->cfg->interface.manage || d->cfg->nftables.enabled)) {
		snprintf(why, whylen, "node integration not applied yet");
		return false;
	}
	if (d->kube && !atomic_load(&d->cluster_fallback)) {
		kube_status(d->kube, &ks);
		if (!ks.synced) {
			snprintf(why, whylen, "waiting for the first Kubernetes sync");
			return false;
		}
	}
	snprintf(why, whylen, "ready");
	return true;
}

/* Has a loop whose last turn was at beat (ms) been silent for over limit? */
static bool stuck(const char *loop, uint64_t beat, uint64_t limit, char *why, size_t whylen)
{
	uint64_t now = monotonic_ms();

	if (now <= beat || now - beat <= limit)
		return false;
	snprintf(why, whylen, "%s has not gone round its loop for %.1fs", loop,
		 (double)(now - beat) / 1000);
	return true;
}

bool daemon_alive(const struct daemon *d, char *why, size_t whylen)
{
	struct kube_status ks;
	char name[32];

	for (unsigned i = 0; i < server_workers(d->server); i++) {
		snprintf(name, sizeof name, "worker %u", i);
		if (stuck(name, server_heartbeat_ms(d->server, i), LOOP_STUCK_MS, why, whylen))
			return false;
	}
	if (stuck("the resolver", upstream_heartbeat_ms(d->upstream), LOOP_STUCK_MS, why,
		  whylen))
		return false;
	uint64_t node_beat = node_heartbeat_ms(d->node);

	if (node_beat && stuck("the node monitor", node_beat, LOOP_STUCK_MS, why, whylen))
		return false;
	if (d->kube) {
		kube_status(d->kube, &ks);
		if (stuck("the kubernetes thread", (uint64_t)ks.heartbeat_ms, KUBE_STUCK_MS, why,
			  whylen))
			return false;
	}
	snprintf(why, whylen, "ok");
	return true;
}

/*
 * Every worker turning, as the monitor sees it at its looks (every
 * NFT_LIVE_REFRESH_MS): a worker counts as stuck once its heartbeat stood
 * still for DAEMON_WORKER_STALL_MS over looks that came on time
 * (util/stall.h), so a process starved of CPU, its monitor with it, keeps
 * DNS. Only the monitor thread calls this.
 */
static bool workers_turning(struct daemon *d, char *why, size_t whylen)
{
	unsigned n = server_workers(d->server);
	uint64_t now = (uint64_t)monotonic_ms();

	if (!d->capture_judges && !(d->capture_judges = calloc(n, sizeof *d->capture_judges)))
		return server_turning(d->server, DAEMON_WORKER_STALL_MS, why, whylen);
	for (unsigned i = 0; i < n; i++) {
		struct stall_judge *j = &d->capture_judges[i];
		uint64_t beat = server_heartbeat_ms(d->server, i);
		struct stall_task task, *t = NULL;
		/* Standing still: is it waiting for a CPU (util/stall.h)? */
		if (j->seen && beat == j->beat) {
			task_sched(getpid(), server_worker_tid(d->server, i), &task);
			t = &task;
		}
		uint64_t still = stall_judge_look(j, beat, now, DAEMON_LOOK_ON_TIME_MS, t);
		if (still >= DAEMON_WORKER_STALL_MS) {
			snprintf(why, whylen, "worker %u has not gone round its loop for %llu ms", i,
				 (unsigned long long)still);
			return false;
		}
	}
	return true;
}

bool daemon_may_capture(void *daemon, char *why, size_t whylen)
{
	struct daemon *d = daemon;

	if (!server_is_open(d->server)) {
		if (!daemon_ready(d, why, whylen))
			return false;
		atomic_store(&d->open_asked, true);
		wake_main(d);
		snprintf(why, whylen, "opening the sockets");
		return false;
	}
	/* An idle worker turns every SERVER_IDLE_TURN_MS: 250 ms is two
	 * missed turns, so a stuck worker fails open within about
	 * DAEMON_WORKER_STALL_MS + one look + NFT_LIVE_TIMEOUT_MS (a stopped
	 * process, whose monitor stops too, within NFT_LIVE_TIMEOUT_MS). */
	return workers_turning(d, why, whylen);
}

static void open_sockets(struct daemon *d)
{
	pthread_mutex_lock(&d->reload_lock);
	server_open(d->server, d->running);
	pthread_mutex_unlock(&d->reload_lock);
}

void daemon_serve_asks(struct daemon *d)
{
	if (wake_take(d->ask_fd) <= 0)
		return;
	if (atomic_exchange(&d->open_asked, false))
		open_sockets(d);
	serve_asked_reload(d);
}

/* ---- the files behind the running config ---------------------------------------- */

/* As config_file_hash over the file's bytes (FNV-1a runs byte by byte: chunks agree). */
static uint64_t hash_file(uint64_t h, const char *path)
{
	char buf[8192];
	ssize_t n;
	struct stat st;
	const char *why;
	int fd = file_open_regular(path, &st, &why); /* a FIFO would block the main thread */

	h = config_file_hash(h, path, "", 0);
	if (fd < 0)
		return fnv1a(h, why, strlen(why));
	while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0)
			h = fnv1a(h, buf, (size_t)n);
	if (n < 0)
		h = fnv1a(h, &errno, sizeof errno);
	close(fd);
	return h;
}

uint64_t daemon_files_hash(const struct config *cfg)
{
	uint64_t h = FNV1A_SEED;

	for (size_t i = 0; i < cfg->n_files; i++)
		h = hash_file(h, cfg->files[i]);
	return h;
}

char **daemon_files(struct daemon *d, size_t *n)
{
	pthread_mutex_lock(&d->reload_lock);
	const struct config *cfg = d->running;
	char **out = calloc(cfg->n_files + 1, sizeof *out);
	size_t i = 0;

	for (; out && i < cfg->n_files; i++)
		if (!(out[i] = strdup(cfg->files[i])))
			break;
	if (out && i < cfg->n_files) {
		while (i > 0)
			free(out[--i]);
		free(out);
		out = NULL;
	}
	*n = out ? cfg->n_files : 0;
	pthread_mutex_unlock(&d->reload_lock);
	return out;
}
