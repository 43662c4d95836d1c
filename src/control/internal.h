/* control — private to src/control/. */
#ifndef LOCALDNS_CONTROL_INTERNAL_H
#define LOCALDNS_CONTROL_INTERNAL_H

#include <json-c/json.h>
#include <ldns/ldns.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "control/control.h"
#include "dns/dns.h"
#include "query/query.h"
#include "talkers/talkers.h"
#include "upstream/request.h"

/* A command, "--json" and five arguments (top's). */
#define CONTROL_MAX_ARGS 7
#define TOP_SHOWN_MAX 100 /* ctl top -n, at most */

struct control;

/*
 * One of the control threads (CONTROL_THREADS): each serves one connection
 * at a time, so a slow `lookup` holds up only its own client. Its working
 * space is its own, like a worker's.
 */
struct control_thread {
	struct control *ctl;
	pthread_t thread;
	bool started;
	unsigned producer;               /* its request ring to the resolver */
	int reply_fd[2];                 /* a datagram socket pair: the resolver sends
					    a lookup's answer into [0], we read [1] */
	struct query_stats lookup_stats; /* its query_handle calls, apart from the workers'
					  * (this thread's own: stats reads lookups) */
	_Atomic uint64_t lookups;        /* its lookups, for every control thread's stats */
	struct talkers_item top_items[TOP_SHOWN_MAX]; /* its `top` reply, while it writes it */
	struct upstream_request request;
	uint8_t answer[DNS_MAX_MESSAGE];
};

struct control {
	int listen_fd;
	int stop_fd;                  /* eventfd: readable once control_stop is called */
	char path[108];
	dev_t dev;                    /* the socket file we made: removed only if */
	ino_t ino;                    /* it is still this one */
	struct daemon *d;
	struct control_thread threads[CONTROL_THREADS];
};

/* One client connection: a non-blocking socket and the reply's buffer. */
struct conn {
	int fd;
	int stop_fd;
	bool failed;                  /* the client went away or stalled: write no more */
	bool json;                    /* the request asked for --json */
	size_t len;
	char buf[16384];
};

/*
 * Wait until fd is ready for events (POLLIN/POLLOUT) or timeout_ms pass;
 * false on timeout, error, or a stop request (stop_fd readable).
 */
bool control_wait(int fd, short events, int stop_fd, int timeout_ms);

/* Reply output: buffered, sent as the buffer fills; a failure sets c->failed. */
void control_conn_write(struct conn *c, const void *data, size_t len);
void control_conn_printf(struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The status line (before any body). */
void control_reply_ok(struct conn *c);
void control_reply_error(struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void control_reply_usage(struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Run the request in argv[0..argc) (argc >= 1) and write the whole reply but the last line. */
void control_run(struct control_thread *t, struct conn *c, int argc, char **argv);

/* `lookup NAME [TYPE]` (lookup.c). */
void control_lookup(struct control_thread *t, struct conn *c, const char *name, const char *type);

/* `node` (node.c). */
void control_node(struct control_thread *t, struct conn *c);

/* ---- --json replies (json.c) --------------------------------------------- */

/* One JSON document being built; failed once json-c ran out of memory. */
struct jdoc {
	json_object *root;
	bool failed;
};

/* A new object or array; NULL (and d failed) when out of memory. */
json_object *control_jdoc_object(struct jdoc *d);
json_object *control_jdoc_array(struct jdoc *d);
/* Add value (owned by the call) to object o under key / to array; a NULL o
 * or value marks d failed and adds nothing. */
void control_jdoc_put(struct jdoc *d, json_object *o, const char *key, json_object *value);
void control_jdoc_push(struct jdoc *d, json_object *array, json_object *value);
/* A string ldns allocated (NULL: out of memory) as a JSON string; frees it. */
json_object *control_jdoc_ldns_string(char *text);
/* The records of list as objects {name, ttl, class, type, data}; only
 * {name, class, type} for a question section. */
json_object *control_jdoc_records(struct jdoc *d, const ldns_rr_list *list, bool question);
/* o's "answer", "authority" and "additional": pkt's records. */
void control_jdoc_sections(struct jdoc *d, json_object *o, const ldns_pkt *pkt);
/* Write d's root as one line and free it (d is empty after); false, and
 * nothing written, when d failed. */
bool control_jdoc_write(struct conn *c, struct jdoc *d);
/* A one-document reply: "ok" and d, or "error out of memory" when d failed.
 * Frees d. */
void control_reply_json(struct conn *c, struct jdoc *d);

#endif
