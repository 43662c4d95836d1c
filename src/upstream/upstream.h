/*
 * upstream — external names: one libunbound context, driven asynchronously
 * by one resolver thread, with the answer cache in front of it.
 *
 * Owns: the libunbound context (forwarding to upstream.servers or the
 * node's resolv.conf nameservers, or full recursion; forward_zones; DNSSEC
 * validation); the resolver thread (or, with upstream.resolver, the turns
 * the first worker runs) and its event loop, on which libunbound runs (its
 * sockets and timers, loop.c); the
 * questions in flight, so identical misses share one libunbound query;
 * each waiting client's deadline (upstream.timeout), after which it gets a
 * stale answer or SERVFAIL; storing answers in the cache; sending the
 * deferred replies (UDP straight from the resolver thread on the socket the
 * query came in on, TCP through a per-worker completion queue because a
 * connection's byte stream belongs to its worker).
 *
 * Must never: block or lock a worker (workers only copy a request into
 * their own single-producer ring; the wake-up is one eventfd write per
 * batch; the worker that runs the resolver hands its own over directly,
 * upstream_host_ask); call into the cache's insert path under the RCU
 * read lock; leave a client without an answer past its deadline while
 * running (shutdown waits a moment for them, upstream_settle, then drops
 * the rest, so their retries reach the next instance).
 *
 * Threads: upstream_submit, upstream_wake, upstream_retire_socket and
 * upstream_take_completion are called by worker `worker` only (one
 * producer and one consumer per ring); upstream_host_* by the worker that
 * runs the resolver (upstream.resolver), which is then "the resolver
 * thread" wherever this folder says so; upstream_failing, upstream_stats
 * and upstream_heartbeat_ms by any thread; upstream_prepare,
 * upstream_switch and upstream_discard by the reloading thread (one at a
 * time; not while upstream_stop runs); everything else by the thread that
 * owns the upstream (main).
 *
 * Names: what the rest of the daemon calls starts with upstream_ (this
 * header, request.h, stats.h; context.c's too). The other files below
 * upstream.c (docs/ARCHITECTURE.md, "The upstream folder") are the
 * folder's own, and each names its global functions after itself, as
 * Unbound's mesh_ and outnet_ do: flight_/flights_ (flight.c), loop_,
 * deliver_, result_/results_, pace_, ring_ (ring_request_,
 * ring_completion_, ring_socket_); the rest is static. So `nm` on a
 * file's object shows whose each name is.
 */
#ifndef LOCALDNS_UPSTREAM_H
#define LOCALDNS_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "cache/cache.h"
#include "config/config.h"
#include "dns/dns.h"
#include "upstream/request.h"
#include "upstream/stats.h"

struct upstream;

/*
 * What the process must be like for libunbound, set before any thread
 * starts (main's first step): one malloc arena for every thread.
 * Debian 12's libunbound (1.17) finds an open TCP connection to a server by
 * looking its address up in a tree ordered by address, then by the
 * records' own pointers, with a key on the stack of the thread it runs
 * on; a record only matches when it lies below that key (fixed upstream in
 * 1.18.0, unbound commit 52581f86). With a malloc arena per thread, mapped
 * wherever the kernel put it, whether any was ever found depended on where
 * the allocating thread's arena and that stack landed (libunbound's own
 * thread's once, the resolver thread's since libunbound runs on it): where
 * the arena lay above, every
 * truncated answer opened a TCP connection of its own, hundreds a second,
 * and against a forwarder that refuses or resets them every such question
 * failed in milliseconds. The main arena grows with brk, below every
 * thread's stack. The cost: threads that allocate at once (the resolver,
 * the Kubernetes client) take turns at one lock; the workers allocate
 * nothing on the query path.
 */
void upstream_prepare_process(void);

/* The answer cache settings for cfg (cache.* plus our fixed SERVFAIL and
 * negative caps). */
void upstream_cache_config(const struct config *cfg, struct cache_config *out);

/*
 * Check what upstream_start would build (files it needs, resolv.conf)
 * without starting anything: for --check-config. 0, or -1 with err set.
 */
int upstream_check(const struct config *cfg, char *err, size_t errlen);

/*
 * Build the libunbound context from cfg (resolving resolv.conf when
 * upstream.servers is empty; every choice is logged) and start the
 * resolver thread with a request ring for each of n_workers; on_worker:
 * no thread, a worker turns it (upstream_host_turn). The cache is
 * borrowed and must outlive the upstream. NULL with a message in err.
 */
struct upstream *upstream_start(const struct config *cfg, struct cache *cache,
				unsigned n_workers, bool on_worker, char *err, size_t errlen);

/*
 * upstream.resolver: does the resolver run on the first worker rather than
 * a thread of its own, for a server with `workers` workers? (auto: when
 * there is one worker.) On a worker a miss costs no wake-up and no switch
 * between threads (the two share a core anyway when there is one worker),
 * Unbound's shape; its own thread keeps every miss's work off the workers,
 * so misses never delay a worker's cache hits.
 */
bool upstream_on_worker(const struct config *cfg, unsigned workers);

/*
 * The hosting worker's side (upstream_start with on_worker), its thread
 * only. upstream_host_fd: the descriptor to watch (readable: the loop has
 * something), -1 when the resolver has its own thread.
 * upstream_host_wait_ms: just before the worker sleeps, at most timeout_ms:
 * the longest it may (0 when a request is waiting). upstream_host_turn:
 * after every wake-up and batch of the worker's own, outside the RCU read
 * lock, ready when the descriptor was reported readable; it runs a turn
 * when one is owed and costs a look otherwise. false once the resolver
 * has stopped (upstream_stop): take the descriptor out and turn no more.
 * upstream_host_leave: the worker is leaving and will turn no more.
 */
int upstream_host_fd(const struct upstream *u);
int upstream_host_wait_ms(struct upstream *u, int timeout_ms);
/*
 * The worker that will turn it (its number, as for upstream_submit) says
 * so before its thread starts: until then, and once it has left
 * (upstream_host_leave, also for a worker whose thread never started),
 * nobody waits for a turn (upstream_stop, upstream_switch,
 * upstream_settle) and upstream_stop sends the last replies itself.
 * libunbound's sockets are watched in the worker's own epoll set epfd
 * from then until it leaves, reported with the data word tag | the
 * descriptor (tag's low half 0): the worker passes each such event to
 * upstream_host_ready before the turn that follows. The descriptor to
 * watch as well (the resolver's own wake-ups), -1 when the resolver has
 * its own thread, -2 with errno when the sockets could not move.
 */
int upstream_host_attach(struct upstream *u, unsigned worker, int epfd, uint64_t tag);
void upstream_host_ready(struct upstream *u, int fd, uint32_t events);
bool upstream_host_turn(struct upstream *u, bool ready);
/*
 * The hosting worker's own requests (n of them, read only), outside the
 * RCU read lock, instead of upstream_submit: into the flight table now,
 * without the ring's copy in and out; its next upstream_host_turn sends
 * them.
 */
void upstream_host_ask(struct upstream *u, const struct upstream_request *rs, size_t n);
void upstream_host_leave(struct upstream *u);

/*
 * Live reload of upstream.* and cluster.fallback_servers. upstream_prepare
 * builds a libunbound context for cfg on the calling thread (it may take a
 * while: resolv.conf's loopback nameservers are probed), changing nothing;
 * NULL with err. upstream_switch hands it to the resolver thread and
 * returns once it is in use: every query started from then on runs there,
 * waiters get cfg's upstream.timeout, the failing mark and cool-downs are
 * forgotten; queries running on the old context finish there (their
 * clients are answered, at the latest at their deadline), then it is
 * deleted. upstream_discard frees a context that was not switched to.
 */
struct upstream_context;
struct upstream_context *upstream_prepare(const struct config *cfg, char *err, size_t errlen);
void upstream_switch(struct upstream *u, struct upstream_context *ctx, const struct config *cfg);
void upstream_discard(struct upstream_context *ctx);

/*
 * Before upstream_stop, once the workers have handed over their sockets
 * (server_release): wait until no client is waiting for an answer, or
 * max_ms. The clients still waiting then get no reply.
 */
void upstream_settle(struct upstream *u, uint64_t max_ms);

/*
 * Stop the resolver thread and delete the libunbound context; clients
 * still waiting get no reply. Workers may still submit (nothing happens);
 * free with upstream_free once they have stopped.
 */
void upstream_stop(struct upstream *u);
void upstream_free(struct upstream *u);

/*
 * Worker side. Queue r (copied) for the resolver; false when the ring is
 * full (the query is dropped and counted). upstream_wake must follow, once
 * per batch, for the resolver to notice: it writes the resolver's eventfd
 * only while the resolver may be asleep (an awake one looks at every ring
 * at every turn).
 */
bool upstream_submit(struct upstream *u, unsigned worker,
		     const struct upstream_request *r);
void upstream_wake(struct upstream *u);

/*
 * Worker side: the UDP socket fd (the worker's own, which it no longer
 * reads) is handed over; the resolver closes it once no client waiting for
 * an upstream answer can still be answered on it. false when the ring is
 * full: try again later.
 */
bool upstream_retire_socket(struct upstream *u, unsigned worker, int fd);

/* The eventfd that becomes readable when worker has TCP completions. */
int upstream_completion_fd(struct upstream *u, unsigned worker);

/* Take one completion for worker; false when there are none. */
bool upstream_take_completion(struct upstream *u, unsigned worker,
			      struct upstream_completion *out);

/*
 * True while the upstream looks down (the last resolution failed or timed
 * out): workers then serve expired entries at once, instead of making the
 * client wait for a refresh that will probably fail too.
 */
bool upstream_failing(const struct upstream *u);

/* Counters; any thread (each is exact on its own, the set is not a snapshot). */
void upstream_stats(const struct upstream *u, struct upstream_stats *out);

/*
 * When the resolver thread last went round its loop, in CLOCK_MONOTONIC
 * milliseconds; it turns at least once a second, so an old value means it
 * is stuck. Any thread.
 */
uint64_t upstream_heartbeat_ms(const struct upstream *u);

#endif
