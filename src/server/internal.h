/*
 * server/internal.h — worker and connection layout shared by the files of
 * src/server/. Nothing outside src/server/ includes this.
 */
#ifndef LOCALDNS_SERVER_INTERNAL_H
#define LOCALDNS_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dns/dns.h"
#include "dnstap/dnstap.h"
#include "querylog/querylog.h"
#include "server/server.h"
#include "talkers/talkers.h"
#include "upstream/upstream.h"

#define UDP_BATCH 64          /* datagrams per recvmmsg/sendmmsg */
#define UDP_ROUNDS 8          /* batches per wake-up before others get a turn */
#define UDP_IN_MAX 4096       /* larger queries are dropped (MSG_TRUNC) */
#define UDP_IN_HEAD 512       /* a query's first bytes, in its slot of udp_batch.in_head */
#define UDP_OUT_MAX 4096      /* >= the largest listen.udp_max_payload */
#define TCP_QUERY_MAX 4096    /* larger TCP queries close the connection */
#define TCP_OUT_SCRATCH (4 * (DNS_MAX_MESSAGE + 2))
#define TCP_SOURCE_SLOTS 4096 /* a power of two */
#define TCP_SNDBUF 16384      /* SO_SNDBUF of a client connection (the kernel doubles it) */
#define TCP_RCVBUF 8192       /* SO_RCVBUF of one: a few queries (the kernel doubles it) */
#define TCP_TURN_QUERIES 128  /* TCP queries a worker answers per loop turn, all connections */
#define TCP_CONN_QUERIES 16   /* of those, from one connection before the others' turn */
/* The hosting worker's request slots: a whole UDP batch of misses (more than a
 * TCP connection's share), and the one being filled. */
#define OWN_REQUESTS (UDP_BATCH + 1)

/*
 * What an epoll event is about: kind in the high half, in the low half the
 * socket (EV_UDP, EV_LISTEN: listeners come and go at reloads, so events
 * name the descriptor, not a slot) or the connection slot (EV_CONN).
 */
enum event_kind { EV_STOP = 1, EV_UDP, EV_LISTEN, EV_CONN, EV_UPSTREAM, EV_RETIRE, EV_SHED,
		  EV_RESOLVER, EV_UNBOUND };
#define EV_DATA(kind, index) (((uint64_t)(kind) << 32) | (uint32_t)(index))
#define EV_KIND(data) ((enum event_kind)((data) >> 32))
#define EV_INDEX(data) ((uint32_t)(data))

/* Reply bytes a connection's socket has not taken yet: a list, never copied as it grows. */
struct out_chunk {
	struct out_chunk *next;
	uint8_t *data;          /* bytes[] below, or an adopted buffer (an upstream reply) */
	size_t len;
	size_t off;             /* sent so far */
	uint8_t bytes[];
};

struct tcp_conn {
	bool open;              /* false (calloc's zero) when the slot is free */
	int fd;
	uint32_t gen;           /* which connection holds the slot (upstream replies) */
	uint32_t active_pos;    /* where this slot sits in worker.active */
	uint32_t interest;      /* the epoll events asked for now */
	uint16_t source_slot;   /* its client's place in server.tcp_per_source */
	uint16_t waiting;       /* queries sent to the resolver, reply not yet here */
	bool ready;             /* in worker.ready: complete queries left for a later turn */
	struct sockaddr_storage peer; /* keys the client's DNS cookies */
	struct sockaddr_storage local; /* the address it connected to (dnstap) */
	uint64_t last_active_ms;
	uint64_t partial_since_ms; /* an incomplete query's first bytes came then (the
				    * first query's clock starts at accept); 0: none */
	bool asked;             /* a whole query has come on it (else, with nothing in
				 * in[], it has been silent since accept) */
	size_t in_len;
	struct out_chunk *out_head, *out_tail;
	size_t out_bytes;       /* unsent bytes in the list */
	size_t kernel_bytes;    /* in the kernel's send queue, when last asked (SIOCOUTQ) */
	uint8_t in[2 + TCP_QUERY_MAX];
};

/* Why a TCP connection was refused or closed (counted per worker; server.h's order). */
enum tcp_event {
	TCP_REFUSED_MAX_CONNECTIONS = SERVER_TCP_REFUSED_MAX_CONNECTIONS,
	TCP_REFUSED_PER_CLIENT = SERVER_TCP_REFUSED_PER_CLIENT,
	TCP_REFUSED_NOT_ALLOWED = SERVER_TCP_REFUSED_NOT_ALLOWED,
	TCP_CLOSED_IDLE = SERVER_TCP_CLOSED_IDLE,
	TCP_CLOSED_SLOW_QUERY = SERVER_TCP_CLOSED_SLOW_QUERY,
	TCP_CLOSED_OUTPUT_BUDGET = SERVER_TCP_CLOSED_OUTPUT_BUDGET,
	TCP_CLOSED_SILENT = SERVER_TCP_CLOSED_SILENT,
	TCP_EVENTS = SERVER_TCP_EVENTS
};

/*
 * Laid out so that a batch touches the pages its bytes need, not one page
 * per datagram (64 slots of 4 KiB each way were 512 KiB resident once
 * batches filled): recvmmsg writes each query's first UDP_IN_HEAD bytes
 * into in_head, packed, and only the rest of a longer one (rare) into
 * in_tail; replies are written one after the other into out, which has
 * room for UDP_BATCH of the largest. Each query is read into prepared
 * before any is answered (query_prepare, query_prefetch: see query.h).
 */
struct udp_batch {
	struct mmsghdr rx[UDP_BATCH];
	struct mmsghdr tx[UDP_BATCH];
	struct iovec rx_iov[UDP_BATCH][2];
	struct iovec tx_iov[UDP_BATCH];
	struct sockaddr_storage peer[UDP_BATCH];
	uint8_t in_head[UDP_BATCH][UDP_IN_HEAD];
	uint8_t in_tail[UDP_BATCH][UDP_IN_MAX - UDP_IN_HEAD];
	uint8_t in_joined[UDP_IN_MAX];   /* a query longer than UDP_IN_HEAD, made whole */
	struct query_prepared prepared[UDP_BATCH];
	uint8_t out[UDP_BATCH * UDP_OUT_MAX];
};

/* One served address (ip and port) in one worker. */
struct listener {
	struct sockaddr_storage addr;
	int udp_fd;
	int tcp_fd;
};

struct worker {
	struct server *server;
	unsigned id;
	pthread_t thread;
	int epfd;
	int tap_local_fd;        /* dnstap: the UDP socket whose address tap_local holds (-1) */
	struct sockaddr_storage tap_local;
	/* Under server.reconf_lock: what is in epfd (the reloading thread adds
	 * and takes out), and what was taken out for this worker to close. */
	struct listener *listeners;
	size_t n_listeners;
	struct listener *retiring;
	size_t n_retiring;
	int retire_fd;           /* eventfd: retiring has entries, or release_pending */
	/* The output budget across workers (tcp.c): what this worker's heaviest
	 * connection holds, as last counted, and another worker's request that
	 * it close that one (shed_fd, an eventfd, wakes it). */
	_Atomic uint64_t heaviest;
	atomic_bool shed_asked;
	int shed_fd;
	bool release_pending;    /* server_release: steer every listener away */
	int *unhanded;           /* retired UDP sockets the resolver had no room for yet */
	size_t n_unhanded;
	/*
	 * A UDP socket out of epfd while the worker drains it under load
	 * (server_udp_drain_polled), -1 when none. Under epoll_lock, which the
	 * reloading thread also takes to take a UDP socket out of epfd: it then
	 * clears this, so the worker never puts a retired socket back.
	 */
	pthread_mutex_t epoll_lock;
	int detached_udp;
	bool rewatch_failed;     /* worker only: put detached_udp back at the next turn */
	uint64_t now_ms;         /* CLOCK_MONOTONIC_COARSE: per loop turn and per receive */
	/* now_ms again, for /health on another thread and for the keeper in
	 * another process, with the thread id: a slot of server_start's beats,
	 * or own_beat */
	struct server_beat *beat;
	struct server_beat own_beat;
	struct query_stats stats;
	uint64_t tcp_events[TCP_EVENTS];
	uint32_t next_gen;       /* for tcp_conn.gen */
	bool wake_upstream;      /* requests were queued this batch */
	uint32_t udp_alone;      /* polled UDP reads in a row that found one datagram (udp.c) */
	/* The resolver runs on this worker (upstream.resolver): its loop's
	 * descriptor (EV_RESOLVER) and libunbound's sockets (EV_UNBOUND) are
	 * in epfd; its turns come before and after our batch (serve). */
	bool hosts_resolver;
	uint32_t querylog_count; /* the query log's sampler (querylog_sample) */
	struct talkers_sampler talkers_sampler; /* the top talkers' (talkers_sample) */
	/* The request query_handle fills: a slot of own. The worker that runs
	 * the resolver keeps a batch's requests there, in own[0..n_own), and
	 * hands them over after the batch (upstream_host_ask: no ring, no copy);
	 * the others, and the host when own is full, copy it into their ring. */
	struct upstream_request *request;
	struct upstream_request *own; /* own_cap slots: OWN_REQUESTS for the host, else 1 */
	size_t n_own, own_cap;

	struct tcp_conn *conns;  /* max_conns slots; untouched pages cost nothing */
	uint32_t *free_slots;    /* stack of free conn indexes, lowest on top */
	uint32_t n_free;
	uint32_t *active;        /* open conn indexes, so sweeps touch only those */
	uint32_t n_active;
	uint32_t max_conns;
	uint32_t *ready;         /* conns with complete queries read but not answered yet */
	uint32_t n_ready;
	unsigned tcp_turn_left;  /* TCP queries this turn may still answer */

	struct udp_batch udp;
	uint8_t tcp_out[TCP_OUT_SCRATCH];
};

struct server {
	struct upstream *upstream;    /* borrowed */
	struct worker **workers;
	unsigned n_workers;
	int stop_fd;                  /* eventfd: readable once stop begins */
	atomic_uint tcp_conns;        /* open connections across workers */
	unsigned tcp_max_conns;
	_Atomic uint64_t tcp_idle_timeout_ms;
	_Atomic uint64_t tcp_query_timeout_ms;
	_Atomic uint64_t tcp_output_budget;
	_Atomic uint64_t tcp_output_bytes; /* unsent TCP reply bytes, all connections: ours
					    * and the kernel's send queues (tcp_conn.kernel_bytes) */
	_Atomic unsigned tcp_max_waiting;  /* listen.tcp_max_pending_queries */
	_Atomic unsigned tcp_max_per_source;
	/* Open connections per client (util/client.h), counted in
	 * slots picked by a keyed hash: two clients may share a slot (and a
	 * limit), but nobody can aim at another's. */
	_Atomic uint16_t tcp_per_source[TCP_SOURCE_SLOTS];
	uint8_t source_key[16];      /* keys every per-client table of the server */
	unsigned client_ipv6_bits;   /* listen.ipv6_client_prefix_length (restart-only) */
	pthread_mutex_t reconf_lock;  /* the listener lists (see struct worker), held */
	bool held;                    /* bound, taking no traffic: not yet (server_open),
					 * or no more (server_release) */
	atomic_uint_fast64_t sockets_generation; /* the listening sockets changed (keeper) */
	pthread_cond_t retired;       /* a worker emptied its retiring list */
};

void *server_worker_main(void *arg);

/*
 * Connect a bound UDP socket to its own address (server.c): SO_REUSEPORT
 * never picks a connected socket and the nftables socket test never finds
 * it, so no client's datagram comes to it any more; what is queued stays.
 */
int server_udp_steer_away(int fd, const struct sockaddr_storage *addr);

/* Query handling shared by UDP and TCP (worker.c). */
void server_worker_query_ctx(struct worker *w, struct query_ctx *ctx,
			     enum query_transport transport, const struct sockaddr_storage *peer);
/*
 * After query_handle said ASK or REFRESH and the caller filled in where
 * the reply goes (w->request.transport and fd/peer or conn): queue it.
 * The resolver is woken once per batch, by server_worker_wake_upstream. false
 * when nothing was queued (no upstream work, or the ring is full).
 */
bool server_worker_submit(struct worker *w, enum query_upstream what);
/*
 * A query the query log sampled, after query_handle: recorded now, or
 * marked in w->request so the resolver records the reply it sends.
 */
void server_worker_log_query(struct worker *w, const struct query_ctx *ctx,
			     const struct sockaddr_storage *peer, const uint8_t *reply, size_t len);
/*
 * With dnstap's client messages on (dnstap_client_on), after query_handle:
 * the query and its reply recorded now, or the query now and the reply by
 * the resolver when it sends it (w->request marked).
 */
void server_worker_tap(struct worker *w, const struct query_ctx *ctx,
		       const struct sockaddr_storage *peer, const struct sockaddr_storage *local,
		       const uint8_t *query, size_t query_len, const uint8_t *reply, size_t len);
/* dnstap's response_address for a UDP socket: its bound address (getsockname once per socket). */
const struct sockaddr_storage *server_worker_udp_local(struct worker *w, int fd);
void server_worker_wake_upstream(struct worker *w);
/* The top talkers (src/talkers/): one query in TALKERS_SAMPLE, after query_handle. */
void server_worker_note_talkers(struct worker *w, const struct query_ctx *ctx,
				const struct sockaddr_storage *peer, const uint8_t *reply,
				size_t len);

/* UDP (udp.c). */
void server_udp_batch_init(struct udp_batch *b);
void server_udp_drain(struct worker *w, int fd);

/*
 * server_udp_drain for a wake-up by epoll: under load (a full first batch) the
 * socket is out of the epoll set while it is drained, then put back
 * (server_worker_rewatch_udp). Every reply's send otherwise runs epoll's wake-up
 * callback on the socket's wait queue, about 4% of a cached answer's CPU
 * (docs/performance.md); two epoll_ctl calls per wake-up of up to
 * UDP_ROUNDS batches cost far less.
 */
void server_udp_drain_polled(struct worker *w, int fd);

/* worker.c: fd out of the epoll set for server_udp_drain_polled; false when it
 * was not in it (a reload took it out) or another socket is out already. */
bool server_worker_unwatch_udp(struct worker *w, int fd);

/* worker.c: the socket server_worker_unwatch_udp took out, back in the epoll set
 * unless a reload retired it meanwhile; false when epoll refused (the
 * worker tries again every turn, w->rewatch_failed). */
bool server_worker_rewatch_udp(struct worker *w);

/* The reloading thread takes fd out of w's epoll set (w->epoll_lock held). */
void server_worker_unwatch_udp_locked(struct worker *w, int fd);

/* TCP (tcp.c). */
void server_tcp_accept(struct worker *w, int listen_fd);
void server_tcp_conn_event(struct worker *w, uint32_t index, uint32_t events);
void server_tcp_sweep_idle(struct worker *w);
bool server_tcp_flush_all(struct worker *w);
/* A new loop turn: answer what connections had left over, within the turn's budget. */
void server_tcp_new_turn(struct worker *w);
void server_tcp_close_all(struct worker *w);
/* An upstream reply (framed, malloc'd) for connection slot index, gen. */
void server_tcp_deliver(struct worker *w, uint32_t index, uint32_t gen, uint8_t *framed,
			size_t len);
/* Another worker asked this one (shed_fd) to keep to the output budget. */
void server_tcp_shed(struct worker *w);

uint64_t server_now_ms(void);
/*
 * Reads the clock into w->now_ms right after queries were received. A reply's
 * TTLs are aged by the clock read after its query arrived, so a client that
 * asks again after a reply is answered by a clock no older than the one that
 * aged that reply, on whichever worker: its TTLs never go up. (A clock read at
 * the top of a long loop turn could be a second older than another worker's.)
 */
void server_worker_read_clock(struct worker *w);

#endif
