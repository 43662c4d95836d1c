/*
 * upstream/internal.h — shared by the files of src/upstream/ only.
 */
#ifndef LOCALDNS_UPSTREAM_INTERNAL_H
#define LOCALDNS_UPSTREAM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <unbound.h>

#include "cache/cache.h"
#include "top/top.h"

#include "config/config.h"
#include "resolvconf/resolvconf.h"
#include "upstream/upstream.h"

/*
 * The libunbound configuration for cfg (context.c) as unbound.conf text,
 * malloc'd: forwarders or recursion, forward zones, DNSSEC. Every decision
 * an operator would want to know about (which resolv.conf servers were used
 * or skipped, and why) is logged. It may probe resolv.conf servers (up to a
 * few hundred ms), so it never runs on the resolver thread. NULL with err set.
 */
char *upstream_conf_text(const struct config *cfg, char *err, size_t errlen);

/* A libunbound context (threads, not a forked process) configured by text;
 * reads no file but those text names. NULL with err set. */
struct ub_ctx *upstream_context_from_text(const char *text, char *err, size_t errlen);

/* Largest text form of a forwarder ("ip@port"): resolv.conf's nameservers come in it too. */
#define UPSTREAM_ADDR_TEXT RESOLVCONF_ADDR_TEXT

/*
 * A request packed (ring.c): its fields, each variable part only as long
 * as its length says; about 150 bytes for a typical miss instead of
 * sizeof (1.4 KB). unpack leaves the unused ends of the arrays as they were.
 */
size_t upstream_request_packed_size(const struct upstream_request *r);
void upstream_request_pack(const struct upstream_request *r, uint8_t *out);
void upstream_request_unpack(const uint8_t *in, struct upstream_request *r);

/*
 * A worker's request ring (ring.c): single producer (the worker), single
 * consumer (the resolver thread), requests packed into 256 KiB. put is
 * false when the ring has no room (the request is not queued); take is
 * false when it is empty, else *out holds the oldest request. Neither
 * allocates, locks or makes a syscall.
 */
struct request_ring;
struct request_ring *request_ring_new(void);
void request_ring_free(struct request_ring *ring);
bool request_ring_put(struct request_ring *ring, const struct upstream_request *r);
bool request_ring_take(struct request_ring *ring, struct upstream_request *out);

/* ---- pacing (pace.c) ------------------------------------------------------- */

/*
 * A token bucket: at most rate questions a second, in bursts of at most a
 * tenth of a second's worth (at least one). rate 0 means no limit. Pure:
 * the caller passes the clock; no allocation, no lock.
 */
struct pace {
	uint64_t rate;         /* questions per second; 0 = unlimited */
	uint64_t burst_milli;  /* bucket size, in thousandths of a question */
	uint64_t tokens_milli;
	uint64_t at_ms;        /* when tokens_milli was last brought up to date */
};

void pace_init(struct pace *p, uint64_t rate, uint64_t now_ms);
/* Take one token: true when a question may go now. */
bool pace_take(struct pace *p, uint64_t now_ms);
/* Milliseconds until pace_take can succeed (0: now). */
uint64_t pace_wait_ms(const struct pace *p, uint64_t now_ms);

/* ---- the resolver thread's state (upstream.c, flight.c, result.c, deliver.c) ---- */

#define MAX_RESOLVING 1024       /* libunbound queries on one context (Unbound's
				    num-queries-per-thread default) */
#define MAX_QUEUED 2048          /* questions waiting for room or pace */
#define MAX_FLIGHTS 8192         /* questions known at once: running, queued, cooling */
#define MAX_WAITERS 16384        /* clients waiting at once, all workers */
#define MAX_WAITERS_PER_CLIENT (MAX_WAITERS / 4)
#define COMPLETION_SLOTS 1024    /* TCP replies per worker ring; a power of two */
#define FAILURE_HOLD_MS 5000     /* cool-down after a failed resolution */
#define CLIENT_SLOTS 4096        /* per-client counts (a power of two) */
#define NO_CLIENT UINT16_MAX     /* a question nobody in particular asked (a refresh) */
#define SERVFAIL_TTL 5           /* seconds the cache keeps a SERVFAIL */
/* The retry budget, in tenths of a retry: each first ask earns one, a
 * retry costs RETRY_COST, so retries stay under a tenth of the questions
 * (and a quiet resolver may retry a burst of RETRY_TOKENS_MAX / RETRY_COST). */
#define RETRY_COST 10
#define RETRY_TOKENS_MAX 1000

/*
 * What an epoll event is about: its data.ptr points at one of these, the
 * first member of a struct upstream_context for libunbound's descriptors.
 */
enum source { SRC_REQUESTS, SRC_STOP, SRC_CONTROL, SRC_UNBOUND };

/* TCP replies for one worker: single producer (resolver), single consumer. */
struct completion_ring {
	_Alignas(64) _Atomic uint32_t head; /* next slot the worker reads */
	_Alignas(64) _Atomic uint32_t tail; /* next slot the resolver writes */
	int efd;
	bool signal_pending;                 /* resolver only: efd write owed */
	struct upstream_completion slots[COMPLETION_SLOTS];
};

/* A libunbound context and the queries still running on it. */
struct upstream_context {
	enum source source;          /* SRC_UNBOUND: epoll data points here */
	struct ub_ctx *ub;
	char *conf;                  /* its unbound.conf text, to build a fresh one */
	uint64_t timeout_ms;         /* upstream.timeout of the config it came from */
	uint64_t max_rate;           /* upstream.max_rate of that config */
	unsigned max_per_client;     /* upstream.max_pending_per_client of that config */
	uint64_t installed_ms;       /* when new queries started going to it */
	uint64_t last_result_ms;     /* when it last gave a result (or was installed) */
	unsigned outstanding;        /* resolver thread only */
	uint64_t delete_by_ms;       /* retired: at the latest then */
	struct upstream_context *next; /* retired list */
};

/* A UDP socket no worker reads any more, closed once nobody can be answered on it. */
struct retired_socket {
	int fd;
	uint64_t close_at_ms;
	struct retired_socket *next;
};

struct flight;
struct waiter;

/*
 * Waiters by deadline. Each list holds waiters with the same timeout, so a
 * new one goes at the tail (only after a reload shortened a timeout does it
 * walk back past longer deadlines): the clients waiting for upstream.timeout,
 * and those with a stale entry waiting for cache.stale_answer_timeout.
 */
struct waiter_list {
	struct waiter *head, *tail;
};

/* A client waiting for a flight's answer, until its deadline. */
struct waiter {
	struct waiter *prev, *next;           /* the flight's waiters */
	struct waiter *fifo_prev, *fifo_next; /* its list, by deadline */
	struct waiter_list *list;
	struct flight *flight;
	uint64_t deadline_ms;
	unsigned worker;
	uint16_t client;                      /* its slot in upstream.clients */
	uint8_t req[];                        /* the client's request, packed (ring.c) */
};

/* One question on its way upstream: queued, resolving, or cooling down after a failure. */
struct flight {
	struct flight *hnext;
	uint64_t hash;
	struct dns_query q;          /* the question (key: name, type, class, DO, CD) */
	uint16_t chain_len;
	uint32_t chain_ttl;
	bool search;                 /* chain holds autopath's candidates ... */
	uint16_t candidate;          /* ... and the one asked now starts here */
	struct waiter *waiters;
	bool resolving;              /* a libunbound query is outstanding ... */
	struct upstream_context *ctx; /* ... on this context */
	bool queued;                 /* waiting for room on libunbound or for pace ... */
	struct flight *qprev, *qnext; /* ... in the queue, oldest first ... */
	uint64_t queued_until_ms;    /* ... and worth asking until then even unwaited */
	uint64_t asked_ns;           /* when it was asked (CLOCK_MONOTONIC) */
	uint64_t failed_until_ms;    /* cool-down after a failure */
	bool retried;                /* a failure was asked again once already */
	uint16_t owner;              /* the client slot it counts against, or NO_CLIENT */
	struct upstream *u;
	uint8_t chain[];             /* chain_len bytes: a local CNAME chain to chase (see upstream.h) */
};

/*
 * What one client (util/client.h) has pending upstream: the
 * clients waiting and the questions it started that are not over. Slots are
 * picked by a keyed hash, so two clients may share one (and its limits),
 * but nobody can aim at another's.
 */
struct client_slot {
	uint16_t waiters;
	uint16_t flights;
};

/* The flight table: keyed hash (SipHash, a random key per start), growing buckets. */
struct flight_table {
	struct flight **buckets;
	size_t mask;                 /* buckets - 1 */
	size_t count;
	uint8_t key[16];
};

struct counters {
	_Atomic uint64_t queries, coalesced, answers, failures, timeouts, stale,
		servfail, dropped, bogus, renewals, paced, retries, client_limited;
	_Atomic uint64_t shed[UPSTREAM_SHEDS];
	_Atomic uint64_t results[UPSTREAM_RESULTS];
	_Atomic uint64_t resolving;  /* gauge: libunbound queries running, all contexts */
	_Atomic uint64_t queued;     /* gauge: questions in the queue */
	_Atomic uint64_t flights;    /* gauge: questions in the flight table */
	_Atomic uint64_t rcode[DNS_RCODE_SLOTS], truncated;
	_Atomic uint64_t rrl_slipped, rrl_dropped; /* UDP replies past rrl.* (deliver.c) */
	_Atomic uint64_t latency[UPSTREAM_LATENCY_BUCKETS + 1]; /* per bucket, last: above all */
	_Atomic uint64_t latency_ns;
};

struct upstream {
	struct upstream_context *ctx; /* where new queries start */
	struct cache *cache;
	unsigned n_workers;
	struct request_ring **requests;
	struct completion_ring **completions;
	int request_efd;
	int stop_efd;
	int control_efd;             /* upstream_switch has a context waiting */
	int epfd;
	pthread_t thread;
	bool running;
	atomic_bool failing;

	/* The hand-over of a new context (upstream_switch). */
	pthread_mutex_t control_lock;
	pthread_cond_t control_done;
	struct upstream_context *incoming; /* control_lock */
	bool accepting;              /* control_lock: the resolver thread takes them */
	atomic_bool settle_asked;    /* upstream_settle waits for settled */
	bool settled;                /* control_lock: no client was waiting after that */
	bool settle_taken;           /* resolver thread: requests taken since settle_asked */

	/* resolver thread only */
	struct upstream_context *retired; /* contexts whose queries are finishing */
	struct retired_socket *retired_sockets;
	struct flight_table flights;
	struct flight *queue_head, *queue_tail; /* oldest, newest */
	unsigned n_queued;
	struct pace pace;
	unsigned max_per_client;     /* upstream.max_pending_per_client */
	unsigned client_ipv6_bits;   /* listen.ipv6_client_prefix_length (restart-only) */
	unsigned retry_tokens;       /* the retry budget (RETRY_COST) */
	struct client_slot clients[CLIENT_SLOTS];
	uint8_t client_key[16];
	struct waiter_list by_timeout; /* until upstream.timeout */
	struct waiter_list stale_soon; /* with a stale entry: until cache.stale_answer_timeout */
	unsigned n_waiters;
	uint64_t now_ms;
	struct top_sampler top_sampler; /* the top talkers' (top_sample) */
	uint64_t renewal_logged_ms;
	uint64_t full_logged_ms;
	_Atomic uint64_t heartbeat_ms; /* now_ms once per loop turn, for /health */
	uint8_t buf[DNS_MAX_MESSAGE + 2];
	uint8_t compacted[DNS_MAX_MESSAGE];
	struct upstream_request taken; /* the request take_requests unpacked last */
	struct upstream_request waiting; /* the waiter's request waiter_request unpacked last */

	struct counters n;
};

static inline void upstream_bump(_Atomic uint64_t *counter)
{
	atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

/* deliver.c: replies to the clients. */
void deliver(struct upstream *u, unsigned worker, const struct upstream_request *r, size_t len);
void signal_completions(struct upstream *u);
/* r answered from the cache into u->buf: the length, 0 when the cache has nothing usable. */
size_t reply_from_cache(struct upstream *u, const struct upstream_request *r,
			bool allow_stale, enum cache_result *how);
size_t reply_servfail(struct upstream *u, const struct upstream_request *r);
size_t reply_nxdomain(struct upstream *u, const struct upstream_request *r);
/* The upstream could not help: a stale answer (RFC 8767) or SERVFAIL. */
void answer_failed(struct upstream *u, unsigned worker, const struct upstream_request *r);
/* libunbound's reply for this waiter: from the cache (when cached), or as it came. */
void answer_with(struct upstream *u, unsigned worker, const struct upstream_request *r,
		 const uint8_t *msg, size_t msg_len, bool cached);

/* flight.c: the questions, their waiters, the queue. */
int flight_table_init(struct flight_table *t);
void flight_table_free(struct flight_table *t);
/* The longest chain in the table (tests and hash-flooding checks). */
size_t flight_table_longest_chain(const struct flight_table *t);
uint64_t question_hash(const struct flight_table *t, const struct dns_query *q);
const struct upstream_request *waiter_request(struct upstream *u, const struct waiter *w);
void remove_waiter(struct upstream *u, struct waiter *w);
/* Nobody waiting, nothing outstanding or queued, no cool-down: it goes. */
void maybe_free_flight(struct upstream *u, struct flight *f);
/* Start f on libunbound now, or queue it; false when libunbound refused it. */
bool ask_or_queue(struct upstream *u, struct flight *f);
/* Start queued questions while there is room and pace allows. */
void start_queued(struct upstream *u);
/* Milliseconds until a queued question may start for pace (SWEEP when none waits for pace). */
uint64_t queue_wait_ms(const struct upstream *u, uint64_t cap);
void handle_client(struct upstream *u, unsigned worker, const struct upstream_request *r);
void handle_refresh(struct upstream *u, const struct upstream_request *r);
void expire_waiters(struct upstream *u);
void sweep_cooled_flights(struct upstream *u);
/* c is about to be deleted with queries still running: their flights go
 * (nobody waits on them: expire_waiters ran first). */
void drop_flights_on(struct upstream *u, struct upstream_context *c);
/* The failing mark and the cool-downs were about the old upstream. */
void forget_failures(struct upstream *u);
/* The latest deadline of any waiter (now when none waits). */
uint64_t last_deadline_ms(const struct upstream *u);
/* The earliest deadline of any waiter; false when none waits. */
bool first_deadline_ms(const struct upstream *u, uint64_t *out);
/* Forget every waiter (no reply), queued question and flight (shutdown). */
void drop_everything(struct upstream *u);

/* result.c: libunbound's answers. */
void on_result(void *arg, int err, struct ub_result *result);
/* Answer f's waiters with stale data or SERVFAIL; remember: mark the upstream failing. */
void resolution_failed(struct upstream *u, struct flight *f, bool remember);
/* f's libunbound query is over: answered, or dropped with its context. */
void stop_counting(struct upstream *u, struct flight *f);

/* upstream.c: does the current context take another query? A full one that
 * has been silent for its timeout is renewed (see "Capacity" there). */
bool room_to_resolve(struct upstream *u);

#endif
