/*
 * daemon — the running subsystems as the operations interfaces see them:
 * the control socket, the health and metrics endpoints and live reload.
 *
 * Owns: reloading (serialised: SIGHUP, the config file watcher and
 * `localdns ctl reload` may ask at once): reading the new file, deciding
 * per key what changed, applying it subsystem by subsystem in an order that
 * drops no query, rolling back when a step fails; the config file watcher;
 * the reload counters; the readiness rule and the liveness rule.
 *
 * Must never: start or stop a subsystem (cmd/localdns does, in its order),
 * or let a failed reload change anything that is running.
 *
 * Lifetimes: main fills the pointers before it starts any thread that reads
 * them and stops those threads before it frees what they point at. The
 * pointers do not change while the daemon runs: a reload changes what the
 * objects do, never which objects there are. cfg is the configuration
 * started with and never changes either; what a reload applied is
 * `running`, which only the reloading thread may read (under reload_lock).
 * Every thread that may call daemon_reload must have stopped before main
 * stops the subsystems.
 *
 * Reloads run on the main thread: it is the one thread that keeps the
 * capabilities a reload needs (binding new listen addresses, changing the
 * node), see privs.h. Other threads ask it, through one eventfd it polls
 * (daemon_ask_fd): to reload (daemon_ask_reload) and to open the held
 * sockets (daemon_may_capture).
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
struct keeper_link;
struct stall_judge;
struct kube_client;
struct mesh;
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
	struct cluster *clusterset;  /* NULL: multicluster.enabled is false */
	struct mesh *mesh;           /* NULL: mesh.istio is false */
	struct kube_client *kube;    /* NULL: kubernetes.enabled is false */
	struct node *node;           /* NULL: no interface or nftables work */
	struct keeper_link *keeper;  /* NULL: no keeper.socket */

	pthread_mutex_t reload_lock;
	struct config *running;      /* reload_lock: applied now (cfg until a reload) */
	uint64_t files_hash;         /* reload_lock: the files' bytes at the last attempt */
	atomic_bool cluster_fallback; /* the running config has cluster.fallback_servers */
	atomic_uint_fast64_t reloads_ok;
	atomic_uint_fast64_t reloads_failed;
	atomic_int_fast64_t last_reload_ok_ms; /* wall clock; 0: never */

	/* Reloads asked by other threads (daemon_ask_reload) and their outcome. */
	pthread_mutex_t ask_lock;
	pthread_cond_t ask_done;
	int ask_fd;                  /* eventfd: readable when something was asked */
	uint64_t asked;              /* ask_lock: requests so far */
	uint64_t answered;           /* ask_lock: requests the last outcome covers */
	int ask_rc;                  /* ask_lock: the last outcome */
	char ask_err[CONFIG_ERR_MAX];
	bool refusing;               /* ask_lock: the main thread serves no more */
	atomic_bool open_asked;      /* daemon_may_capture: open the held sockets */
	struct stall_judge *capture_judges; /* daemon_may_capture's, one per worker */
};

struct daemon_reload_stats {
	uint64_t ok;
	uint64_t failed;
	int64_t last_ok_ms;          /* wall clock milliseconds; 0: never */
};

/*
 * The running config's served addresses (listen.addresses, then
 * nftables.intercept), the first cap of them copied to out; *n_listen: how
 * many of those are listen.addresses. Returns how many there are. Any
 * thread (waits for a reload in progress).
 */
size_t daemon_served_addresses(struct daemon *d, struct config_ip *out, size_t cap,
			       size_t *n_listen);

/* Zero d and set up its locks; main then fills the pointers. 0, or -1 with err. */
int daemon_init(struct daemon *d, const char *config_path, struct config *cfg, char *err,
		size_t errlen);
/* After every subsystem has stopped: frees what reloads applied (not cfg). */
void daemon_destroy(struct daemon *d);

/*
 * Read the config file again and apply what changed. Any thread; one
 * reload at a time. 0, or -1 with "FILE:LINE:COL: message" (or why it could
 * not be applied) in err, and the running configuration untouched. Keys
 * that only a restart applies keep their running values; a config that
 * changes some of them still counts as a success (the log names them).
 * Everything is logged: what changed, what each subsystem did, the outcome.
 */
int daemon_reload(struct daemon *d, char *err, size_t errlen);

/*
 * daemon_reload run by the main thread for another thread (`localdns ctl
 * reload`), whose capabilities and seccomp list allow none of it: asks,
 * waits, and returns the outcome as daemon_reload does. Once the main
 * thread has stopped serving (daemon_refuse_reloads), -1 at once.
 */
int daemon_ask_reload(struct daemon *d, char *err, size_t errlen);

/*
 * The main thread's side: poll daemon_ask_fd, and when it is readable call
 * daemon_serve_asks, which does what was asked: opens the held sockets
 * (server_open with the running config) when daemon_may_capture asked,
 * and reloads once for every reload asked so far. daemon_refuse_reloads
 * (before stopping the threads that ask) answers the waiting and later
 * reload requests with an error.
 */
int daemon_ask_fd(const struct daemon *d);
void daemon_serve_asks(struct daemon *d);
void daemon_refuse_reloads(struct daemon *d);

/*
 * daemon_reload, but only when the bytes of the running config's files (the
 * main file and static.files) differ from those read at the last attempt:
 * 1 reloaded, 0 nothing changed, -1 failed (err).
 */
int daemon_reload_if_changed(struct daemon *d, char *err, size_t errlen);

void daemon_reload_stats(const struct daemon *d, struct daemon_reload_stats *out);

/*
 * Where the daemon serves now, as reloads left it (any thread): its first
 * served address and its port, and upstream.timeout. Copies.
 */
void daemon_serving(struct daemon *d, struct config_ip *ip, uint16_t *port,
		    uint64_t *upstream_timeout_ms);

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

/*
 * Should the node's DNS come to this process now (node_capture's test, on
 * the node monitor's thread)? Once ready (daemon_ready) it asks the main
 * thread to open the held sockets (daemon_serve_asks); once they are open,
 * until a worker's heartbeat stood still for DAEMON_WORKER_STALL_MS over the
 * monitor's on-time looks (util/stall.h: a process starved of CPU together
 * with its monitor is not stuck). The monitor thread only. false with why.
 */
#define DAEMON_WORKER_STALL_MS 250
#define DAEMON_LOOK_ON_TIME_MS 150 /* the monitor looks every 100 ms: 50 ms late still counts */
bool daemon_may_capture(void *daemon, char *why, size_t whylen);

/*
 * The config file watcher (main thread): inotify on the directories of the
 * config file and of static.files, both as named and as resolved through
 * symlinks, so kubelet's swap of a ConfigMap's `..data` symlink, an editor's
 * rename over the file and a write in place are all seen. Events are
 * debounced (WATCH_QUIET_MS of quiet), then daemon_reload_if_changed runs,
 * so the several events of one update make one reload and events that
 * change no byte make none. daemon_watch_fd is one descriptor to poll;
 * daemon_watch_process handles what it reported (never blocks; call it at
 * every wake-up, so the watches follow reloads made elsewhere too).
 */
#define WATCH_QUIET_MS 200
struct daemon_watch;
struct daemon_watch *daemon_watch_new(struct daemon *d, char *err, size_t errlen);
int daemon_watch_fd(const struct daemon_watch *w);
void daemon_watch_process(struct daemon_watch *w);
void daemon_watch_free(struct daemon_watch *w);

#endif
