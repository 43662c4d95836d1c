/* daemon — see daemon.h. */
#include "daemon/daemon.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kube/kube.h"
#include "log/log.h"
#include "query/query.h"
#include "querylog/querylog.h"
#include "server/server.h"
#include "upstream/upstream.h"

#define LOOP_STUCK_MS 5000   /* workers and the resolver: idle, they turn every second */
#define KUBE_STUCK_MS 30000  /* the Kubernetes thread may parse and apply a big page in one turn */

void daemon_init(struct daemon *d, const char *config_path, struct config *cfg)
{
	memset(d, 0, sizeof *d);
	d->config_path = config_path;
	d->cfg = cfg;
	pthread_mutex_init(&d->reload_lock, NULL);
}

void daemon_destroy(struct daemon *d)
{
	pthread_mutex_destroy(&d->reload_lock);
}

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* log.level, log.format and log.queries take effect at once (log.query_buffer at restart). */
static void apply_log_settings(const struct config *cfg)
{
	log_setup((enum log_level)cfg->log.level, (enum log_format)cfg->log.format);
	querylog_set_every(cfg->log.queries);
}

/* The answer sources from a new config; the running set stays on failure. */
static int apply(struct daemon *d, char *err, size_t errlen)
{
	struct config *cfg;
	struct query_sources *sources;

	if (config_load(d->config_path, &cfg, err, errlen) < 0)
		return -1;
	sources = query_sources_build(cfg, d->cluster, d->cache, err, errlen);
	if (sources)
		apply_log_settings(cfg);
	config_free(cfg);
	if (!sources)
		return -1;
	query_sources_publish(sources);
	return 0;
}

int daemon_reload(struct daemon *d, char *err, size_t errlen)
{
	pthread_mutex_lock(&d->reload_lock);
	int rc = apply(d, err, errlen);
	pthread_mutex_unlock(&d->reload_lock);
	if (rc < 0) {
		atomic_fetch_add(&d->reloads_failed, 1);
		log_error("reload failed; keeping the running configuration", "error", err);
		return -1;
	}
	atomic_fetch_add(&d->reloads_ok, 1);
	atomic_store(&d->last_reload_ok_ms, wall_ms());
	log_info("reloaded answer sources (listen, worker, upstream, cache, cluster and "
		 "kubernetes changes need a restart)",
		 "config", d->config_path);
	return 0;
}

void daemon_reload_stats(const struct daemon *d, struct daemon_reload_stats *out)
{
	out->ok = atomic_load(&d->reloads_ok);
	out->failed = atomic_load(&d->reloads_failed);
	out->last_ok_ms = atomic_load(&d->last_reload_ok_ms);
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
	if (d->kube && d->cfg->cluster.n_fallback_servers == 0) {
		kube_status(d->kube, &ks);
		if (!ks.synced) {
			snprintf(why, whylen, "waiting for the first Kubernetes sync");
			return false;
		}
	}
	snprintf(why, whylen, "ready");
	return true;
}

static uint64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
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
	if (stuck("the resolver thread", upstream_heartbeat_ms(d->upstream), LOOP_STUCK_MS, why,
		  whylen))
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
