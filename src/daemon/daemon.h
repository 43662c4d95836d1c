/*
 * daemon — the running subsystems as the operations interfaces see them:
 * the control socket, the health and metrics endpoints and live reload.
 *
 * Owns: reloading (serialised: SIGHUP, the config file watcher and
 * `localdns ctl reload` may ask at once), the reload counters, the
 * readiness rule and the liveness rule.
 *
 * Must never: start or stop a subsystem (cmd/localdns does, in its order),
 * or let a failed reload change anything that is running.
 *
 * Lifetimes: main fills the pointers before it starts any thread that reads
 * them and stops those threads before it frees what they point at. The
 * pointers do not change while the daemon runs: a reload changes what the
 * objects do, never which objects there are.
 */
#ifndef LOCALDNS_DAEMON_H
#define LOCALDNS_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

struct cache;
struct cluster;
struct kube_client;
struct node;
struct server;
struct upstream;

struct daemon {
	const char *config_path;
	struct config *cfg;          /* the configuration started with */
	struct server *server;
	struct upstream *upstream;
	struct cache *cache;
	struct cluster *cluster;     /* NULL: kubernetes.enabled is false */
	struct kube_client *kube;    /* NULL: kubernetes.enabled is false */
	struct node *node;           /* NULL: no interface or nftables work */

	pthread_mutex_t reload_lock;
	atomic_uint_fast64_t reloads_ok;
	atomic_uint_fast64_t reloads_failed;
	atomic_int_fast64_t last_reload_ok_ms; /* wall clock; 0: never */
};

struct daemon_reload_stats {
	uint64_t ok;
	uint64_t failed;
	int64_t last_ok_ms;          /* wall clock milliseconds; 0: never */
};

/* Zero d and set up its lock; main then fills the pointers. */
void daemon_init(struct daemon *d, const char *config_path, struct config *cfg);
void daemon_destroy(struct daemon *d);

/*
 * Read the config file again and apply it. Any thread; one reload at a time.
 * 0, or -1 with "FILE:LINE:COL: message" (or why it could not be applied)
 * in err, and the running configuration untouched.
 */
int daemon_reload(struct daemon *d, char *err, size_t errlen);

void daemon_reload_stats(const struct daemon *d, struct daemon_reload_stats *out);

/*
 * Ready to take traffic: sockets bound, cluster names answerable (the first
 * sync done, or cluster.fallback_servers set, or no Kubernetes at all) and
 * the node integration applied. false with the reason in why.
 */
bool daemon_ready(const struct daemon *d, char *why, size_t whylen);

/*
 * Alive: every worker and the resolver thread went round its loop in the
 * last 5 seconds, and the Kubernetes thread in the last 30 (one turn may
 * apply a whole LIST page). Each wakes at least once a second when idle,
 * so an old heartbeat means a stuck thread. false with which one and for
 * how long in why. Needs d->server and d->upstream.
 */
bool daemon_alive(const struct daemon *d, char *why, size_t whylen);

#endif
