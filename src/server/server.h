/*
 * server — the sockets and worker threads that carry DNS over UDP and TCP.
 *
 * Owns: one worker thread per CPU (listen.workers), each with its own epoll
 * loop and its own SO_REUSEPORT UDP socket and TCP listener per listen
 * address; UDP in recvmmsg/sendmmsg batches; TCP with 2-byte framing,
 * pipelining, partial reads and writes, an idle timeout and a connection cap
 * shared by all workers; orderly shutdown.
 *
 * Must never: bind a wildcard address; take a lock or allocate per query
 * (a connection that cannot take its reply at once is the only place that
 * allocates: it buffers the rest); let one connection or socket starve the
 * others (each wake-up handles a bounded amount of work).
 */
#ifndef LOCALDNS_SERVER_H
#define LOCALDNS_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config/config.h"
#include "query/query.h"
#include "upstream/upstream.h"

struct server;

/* How many workers server_start will run for cfg (listen.workers, or one per CPU). */
unsigned server_worker_count(const struct config *cfg);

/* An idle worker still goes round its loop this often (ms). */
#define SERVER_IDLE_TURN_MS 100

/*
 * Bind every socket (so an unusable address fails here, with the address in
 * err) and start the workers, which hand cache misses to upstream (built
 * for server_worker_count(cfg) workers; borrowed, and must stay allocated
 * until server_stop returns). Sources must already be published.
 *
 * beats: where worker i stores its loop's heartbeat and its thread id (an
 * array of server_worker_count(cfg), which the keeper reads from another
 * process); NULL: in the server's own memory.
 *
 * held: take no traffic until server_open. Each UDP socket is connected to
 * its own address (SO_REUSEPORT never picks a connected socket, and the
 * nftables socket test does not find it), each TCP socket is bound but not
 * listening: a localdns that is not ready yet neither shares the traffic of
 * one already serving beside it nor captures DNS from the node's fallback.
 */
/* A worker's loop heartbeat and its thread, for watchers (below). */
struct server_beat {
	_Atomic uint64_t ms;          /* CLOCK_MONOTONIC_COARSE ms of its last loop turn */
	_Atomic int32_t tid;          /* the worker's thread id, once it runs */
	int32_t unused;
};

struct server *server_start(const struct config *cfg, struct upstream *upstream, bool held,
			    struct server_beat *beats, char *err, size_t errlen);

/*
 * Take traffic on every socket from now on (the main thread: each UDP
 * socket is bound again, which port 53 allows only with the main thread's
 * CAP_NET_BIND_SERVICE; once is enough). cfg: the running config.
 */
void server_open(struct server *s, const struct config *cfg);
bool server_is_open(struct server *s);

/*
 * Hand the traffic over (SIGTERM; the main thread, no reload running):
 * every worker steers each listener away, as a reload does with a removed
 * address: TCP listeners are closed after the connections already queued
 * are accepted, each UDP socket is drained, connected to its own address
 * (from then on the kernel gives its datagrams to another localdns's
 * socket, or, without one, the node's fallback applies) and drained again.
 * Returns when every worker has; open connections stay until server_stop,
 * and the UDP sockets stay open for the resolver's replies.
 */
void server_release(struct server *s);

/*
 * Stop accepting, answer what has already arrived, flush replies (at most
 * about one second), join the workers and free everything.
 */
void server_stop(struct server *s);

/*
 * Live reload (the reloading thread; one call at a time, never while
 * server_stop runs). server_listen serves every address of cfg on cfg's
 * port: the sockets it lacks are opened and bound here for every worker
 * (so a bad address fails with the address in err and nothing changed),
 * then put in each worker's epoll set; the new addresses are served by
 * every worker when it returns. server_unlisten_others stops serving every
 * address cfg does not list: each worker stops reading it at once and,
 * between two event batches, closes its TCP listener (after accepting what
 * was queued; open connections stay) and answers what its UDP socket had
 * queued, then hands the socket to the resolver to close; it returns when
 * every worker has done so. server_tune applies listen.udp_rcvbuf and the
 * TCP limits (listen.tcp_idle_timeout, tcp_query_timeout, tcp_output_budget,
 * tcp_max_pending_queries, tcp_max_connections_per_client).
 */
int server_listen(struct server *s, const struct config *cfg, char *err, size_t errlen);
void server_unlisten_others(struct server *s, const struct config *cfg);
void server_tune(struct server *s, const struct config *cfg);

/* "ip:port" or "[ip6]:port" for a served address, into out. */
const char *server_address_text(const struct sockaddr_storage *ss, char *out, size_t len);

/* Sum of every worker's counters (read racily; fine for reporting). */
void server_stats(const struct server *s, struct query_stats *sum);

/* TCP: connections open now, unsent reply bytes, refusals and closes by reason. */
enum server_tcp_event {
	SERVER_TCP_REFUSED_MAX_CONNECTIONS, SERVER_TCP_REFUSED_PER_CLIENT,
	SERVER_TCP_REFUSED_NOT_ALLOWED,
	SERVER_TCP_CLOSED_IDLE, SERVER_TCP_CLOSED_SLOW_QUERY, SERVER_TCP_CLOSED_OUTPUT_BUDGET,
	SERVER_TCP_CLOSED_SILENT,
	SERVER_TCP_EVENTS
};
struct server_tcp_stats {
	uint64_t connections;
	uint64_t output_bytes;
	uint64_t events[SERVER_TCP_EVENTS];
};
void server_tcp_stats(const struct server *s, struct server_tcp_stats *out);

/* Number of worker threads. */
unsigned server_workers(const struct server *s);

/*
 * When worker (< server_workers) last went round its loop, in
 * CLOCK_MONOTONIC milliseconds. An idle worker still turns every
 * SERVER_IDLE_TURN_MS (its epoll_wait timeout), so an old value means a
 * stuck worker. Any thread.
 */
uint64_t server_heartbeat_ms(const struct server *s, unsigned worker);

/* The worker's thread id (gettid), 0 until it runs. Any thread. */
int server_worker_tid(const struct server *s, unsigned worker);

/*
 * The listening sockets that take traffic, for the keeper (src/keeper/),
 * which holds a copy of each. The generation changes whenever the set
 * does (server_open, a reload adding or retiring an address,
 * server_release). server_dup_sockets fills out with duplicates (the
 * caller closes each fd; -1 where dup failed) of the first max and returns
 * how many there are, with the generation they belong to; none while the
 * sockets are held or released. Any thread.
 */
struct server_socket {
	unsigned worker;
	int type;                     /* SOCK_DGRAM or SOCK_STREAM */
	int fd;
	struct sockaddr_storage addr;
};
uint64_t server_sockets_generation(struct server *s);
size_t server_dup_sockets(struct server *s, struct server_socket *out, size_t max,
			  uint64_t *generation);

/* Has every worker gone round its loop within max_age_ms? If not, why says which. */
bool server_turning(const struct server *s, uint64_t max_age_ms, char *why, size_t whylen);

#endif
