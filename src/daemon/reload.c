/*
 * daemon/reload.c — applying a new configuration to the running daemon.
 *
 * What changed is decided per key (config_diff against the running
 * config), and what to redo by how the schema says each key is applied
 * (enum config_reload, declared beside the key in config/config.c). A
 * restart-only key only takes effect at a restart: the log names it and
 * the new config gets the running value back (config_copy_key), so the
 * applied config always describes what really runs and the next reload
 * warns again.
 *
 * Order, so that no query is dropped and a failure changes nothing:
 *  1. build what can fail without touching anything running: the answer
 *     sources (static files), the libunbound context (resolv.conf);
 *  2. new listen addresses: on the link (node), bound by every worker, then
 *     the node (nftables table) described by the new config; a failure
 *     here closes what was just bound, takes the new addresses off the
 *     link, drops what step 1 built, and the reload fails;
 *  3. what cannot fail: upstream switched, answer sources published, the
 *     Kubernetes client told whether to watch this node's Pods (autopath),
 *     cache reconfigured, listener settings, log settings;
 *  4. addresses no longer served: each worker stops reading them and closes
 *     them, then they leave the link.
 * Queries on addresses that stay are never touched: their sockets stay
 * open throughout, and every swap in step 3 is atomic for the workers (RCU
 * for the sources, a hand-over for the resolver, per-shard locking in the
 * cache that readers never take).
 */
#include "daemon/internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "cluster/cluster.h"
#include "dnstap/dnstap.h"
#include "kube/kube.h"
#include "log/log.h"
#include "node/node.h"
#include "query/query.h"
#include "querylog/querylog.h"
#include "server/server.h"
#include "privs/privs.h"
#include "upstream/upstream.h"
#include "util/clock.h"

#define MAX_KEYS 64
#define KEY_LEN 48
#define LIST_LEN (MAX_KEYS * KEY_LEN)

struct changes {
	unsigned parts;          /* the CONFIG_APPLY_* steps the changed keys need */
	char live[LIST_LEN];     /* "a,b,c" */
	char restart[LIST_LEN];
	char keep[MAX_KEYS][KEY_LEN]; /* restart-only keys: the running value stays */
	size_t n_keep;
};

static void append(char *list, const char *key)
{
	size_t used = strlen(list);

	snprintf(list + used, LIST_LEN - used, "%s%s", used ? "," : "", key);
}

static void note_change(const char *key, unsigned reload, void *arg)
{
	struct changes *c = arg;
	unsigned parts = reload & ~(unsigned)CONFIG_RESTART_ONLY;

	if (parts) {
		c->parts |= parts;
		append(c->live, key);
		return;
	}
	append(c->restart, key);
	if (c->n_keep < MAX_KEYS)
		snprintf(c->keep[c->n_keep++], KEY_LEN, "%s", key);
}

/* The running values of restart-only keys, in next; -1 with err if one cannot be kept. */
static int keep_running_values(struct config *next, const struct config *running,
			       const struct changes *c, char *err, size_t errlen)
{
	for (size_t i = 0; i < c->n_keep; i++)
		if (config_copy_key(next, running, c->keep[i]) < 0) {
			snprintf(err, errlen, "%s: cannot keep the running value (out of memory)",
				 c->keep[i]);
			return -1;
		}
	return 0;
}

/* ---- logging what a step did ------------------------------------------------------- */

static bool serves(const struct config *cfg, const struct config_ip *ip, uint16_t port)
{
	if (cfg->listen.port != port)
		return false;
	for (size_t i = 0; i < config_served_count(cfg); i++) {
		const struct config_ip *mine = config_served_address(cfg, i);
		if (mine->family == ip->family && strcmp(mine->text, ip->text) == 0)
			return true;
	}
	return false;
}

/* One line per address of `from` that `to` does not serve. */
static void log_addresses(const char *msg, const struct config *from, const struct config *to)
{
	char port[8];

	snprintf(port, sizeof port, "%u", from->listen.port);
	for (size_t i = 0; i < config_served_count(from); i++) {
		const struct config_ip *ip = config_served_address(from, i);
		if (!serves(to, ip, from->listen.port))
			log_info(msg, "address", ip->text, "port", port, "protocols", "udp,tcp");
	}
}

/* libunbound reads these on the resolver thread, which may read only what it could at start. */
static void warn_unreadable(const char *key, const char *path)
{
	if (!privs_resolver_may_read(path))
		log_warn("the resolver thread may not read this file until localdns restarts (it may "
			 "read only the directories the files were in at start)", "key", key,
			 "path", path);
}

static void log_upstream(const struct config *cfg)
{
	char servers[512] = "";

	if (cfg->upstream.dnssec)
		warn_unreadable("upstream.trust_anchor", cfg->upstream.trust_anchor);
	if (cfg->upstream.recursive)
		warn_unreadable("upstream.root_hints", cfg->upstream.root_hints);
	if (cfg->upstream.tls)
		warn_unreadable("upstream.tls_ca_file", cfg->upstream.tls_ca_file);

	for (size_t i = 0; i < cfg->upstream.n_servers; i++)
		append(servers, cfg->upstream.servers[i].text);
	log_info("upstream switched: new queries use the new settings",
		 "servers", cfg->upstream.recursive ? "recursion" : *servers ? servers : "resolv.conf",
		 "forward_zones", cfg->upstream.n_forward_zones ? "yes" : "none",
		 "fallback_servers", cfg->cluster.n_fallback_servers ? "yes" : "none");
}

static void apply_cache(struct cache *cache, const struct config *cfg)
{
	struct cache_config cc;
	struct cache_stats before, after;
	char size[24], was[24], entries[24], evicted[24];

	upstream_cache_config(cfg, &cc);
	cache_stats(cache, &before);
	cache_configure(cache, &cc, cache_clock_seconds());
	cache_stats(cache, &after);
	snprintf(size, sizeof size, "%llu", (unsigned long long)after.max_bytes);
	snprintf(was, sizeof was, "%llu", (unsigned long long)before.max_bytes);
	snprintf(entries, sizeof entries, "%llu", (unsigned long long)after.entries);
	snprintf(evicted, sizeof evicted, "%llu",
		 (unsigned long long)(after.evictions - before.evictions));
	log_info("cache reconfigured", "size", size, "was", was, "entries", entries,
		 "evicted", evicted);
}

static void apply_listener_settings(struct server *server, const struct config *cfg)
{
	char idle[24], rcvbuf[24];

	server_tune(server, cfg);
	snprintf(idle, sizeof idle, "%llums", (unsigned long long)cfg->listen.tcp_idle_timeout_ms);
	snprintf(rcvbuf, sizeof rcvbuf, "%llu", (unsigned long long)cfg->listen.udp_rcvbuf);
	log_info("listener settings changed", "tcp_idle_timeout", idle, "udp_rcvbuf", rcvbuf);
}

static void apply_log_settings(const struct config *cfg)
{
	static const char *const levels[] = {"debug", "info", "warn", "error"};

	char queries[24];

	log_setup((enum log_level)cfg->log.level, (enum log_format)cfg->log.format);
	querylog_set_every(cfg->log.queries);
	snprintf(queries, sizeof queries, "%u", (unsigned)cfg->log.queries);
	/* Not "level": that key is the line's own. */
	log_info("log settings changed", "log_level", levels[cfg->log.level], "log_format",
		 cfg->log.format == CONFIG_LOG_JSON ? "json" : "logfmt", "log_queries", queries);
}

/* ---- applying ----------------------------------------------------------------------- */

/* Step 2: new addresses served, node switched to next; on failure nothing changed. */
static int add_addresses(struct daemon *d, const struct config *next, bool listen,
			 char *err, size_t errlen)
{
	if (listen && d->node && node_add_addresses(d->node, next, err, errlen) < 0)
		return -1;
	if (listen && server_listen(d->server, next, err, errlen) < 0)
		goto undo_link;
	/* Always: the node keeps its config by reference, and `running` is about to go. */
	if (d->node && node_use(d->node, next, err, errlen) < 0)
		goto undo_sockets;
	return 0;
undo_sockets:
	server_unlisten_others(d->server, d->running);
undo_link:
	if (listen && d->node)
		node_undo_addresses(d->node);
	return -1;
}

/*
 * Unsynced cluster names go upstream only while the resolver forwards the
 * cluster zone: with fallback servers gone the sources change first, with
 * new ones the upstream does.
 */
static void switch_upstream_and_sources(struct daemon *d, const struct config *next,
					struct upstream_context *ctx,
					struct query_sources *sources)
{
	bool sources_first = next->cluster.n_fallback_servers == 0;

	if (sources && sources_first)
		query_sources_publish(sources);
	if (ctx) {
		upstream_switch(d->upstream, ctx, next);
		log_upstream(next);
	}
	if (sources && !sources_first)
		query_sources_publish(sources);
	if (sources)
		log_info("answer sources rebuilt (static records, chaos, udp_max_payload)");
	atomic_store(&d->cluster_fallback, next->cluster.n_fallback_servers > 0);
}

static int apply(struct daemon *d, struct config *next, unsigned parts, char *err, size_t errlen)
{
	struct config *prev = d->running;
	struct query_sources *sources = NULL;
	struct upstream_context *ctx = NULL;
	bool listen = parts & CONFIG_APPLY_LISTEN;

	if ((parts & CONFIG_APPLY_SOURCES) &&
	    !(sources = query_sources_build(next, &(struct query_names){d->cluster, d->clusterset,
									 d->mesh},
					    d->cache, err, errlen)))
		return -1;
	if ((parts & CONFIG_APPLY_UPSTREAM) && !(ctx = upstream_prepare(next, err, errlen))) {
		query_sources_free(sources);
		return -1;
	}
	if (add_addresses(d, next, listen, err, errlen) < 0) {
		upstream_discard(ctx);
		query_sources_free(sources);
		return -1;
	}
	if (listen)
		log_addresses("listening", next, prev);
	switch_upstream_and_sources(d, next, ctx, sources);
	if ((parts & CONFIG_APPLY_PODS) && d->kube)
		kube_watch_pods(d->kube, cluster_needs_pods(next));
	if (parts & CONFIG_APPLY_CACHE)
		apply_cache(d->cache, next);
	if (parts & CONFIG_APPLY_SERVER)
		apply_listener_settings(d->server, next);
	if (parts & CONFIG_APPLY_LOG)
		apply_log_settings(next);
	if (parts & CONFIG_APPLY_DNSTAP)
		dnstap_configure(next);
	if (listen) {
		server_unlisten_others(d->server, next);
		if (d->node)
			node_drop_addresses(d->node, prev);
		log_addresses("stopped listening", prev, next);
	}
	d->running = next;
	if (prev != d->cfg)
		config_free(prev);
	return 0;
}

/* Listen changes may turn a resolv.conf nameserver into ourselves: check them again. */
static unsigned also_needed(const struct config *next, unsigned parts)
{
	if ((parts & CONFIG_APPLY_LISTEN) && next->upstream.n_servers == 0 && !next->upstream.recursive)
		parts |= CONFIG_APPLY_UPSTREAM;
	return parts;
}

/* Caller holds reload_lock. 0 applied (or nothing to apply), -1 with err. */
static int reload_locked(struct daemon *d, char *err, size_t errlen)
{
	struct config *next;
	struct changes c = {0};

	d->files_hash = daemon_files_hash(d->running); /* a broken file is read once */
	if (config_load(d->config_path, &next, err, errlen) < 0)
		return -1;
	/* What was parsed: a change after the read, even before it is applied, is a change. */
	d->files_hash = next->files_hash;
	config_diff(d->running, next, note_change, &c);
	if (*c.restart)
		log_warn("changed keys only apply at a restart; ignored until then", "keys",
			 c.restart);
	if (keep_running_values(next, d->running, &c, err, errlen) < 0) {
		config_free(next);
		return -1;
	}
	if (!c.parts) {
		config_free(next);
		log_info("configuration unchanged: nothing to apply", "config", d->config_path);
		return 0;
	}
	log_info("configuration changed", "keys", c.live);
	if (apply(d, next, also_needed(next, c.parts), err, errlen) < 0) {
		config_free(next);
		return -1;
	}
	log_info("reloaded", "config", d->config_path, "changed", c.live);
	return 0;
}

/* A reload's outcome into the reload counters; a failure is logged with its reason. */
static void count_outcome(struct daemon *d, bool ok, const char *err)
{
	if (!ok) {
		atomic_fetch_add(&d->reloads_failed, 1);
		log_error("reload failed; keeping the running configuration", "error", err);
		return;
	}
	atomic_fetch_add(&d->reloads_ok, 1);
	atomic_store(&d->last_reload_ok_ms, wall_ms());
}

int daemon_reload(struct daemon *d, char *err, size_t errlen)
{
	log_info("reloading configuration", "config", d->config_path);
	pthread_mutex_lock(&d->reload_lock);
	int rc = reload_locked(d, err, errlen);
	pthread_mutex_unlock(&d->reload_lock);
	count_outcome(d, rc >= 0, err);
	return rc;
}

int daemon_reload_if_changed(struct daemon *d, char *err, size_t errlen)
{
	pthread_mutex_lock(&d->reload_lock);
	if (daemon_files_hash(d->running) == d->files_hash) {
		pthread_mutex_unlock(&d->reload_lock);
		return 0;
	}
	log_info("configuration files changed; reloading", "config", d->config_path);
	int rc = reload_locked(d, err, errlen);
	pthread_mutex_unlock(&d->reload_lock);
	count_outcome(d, rc >= 0, err);
	return rc < 0 ? -1 : 1;
}
