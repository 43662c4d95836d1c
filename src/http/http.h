/*
 * http — the health, readiness and metrics endpoints, over libmicrohttpd.
 *
 * Owns: one libmicrohttpd daemon, with its own polling thread, per distinct
 * address among health.listen and metrics.listen (when both name the same
 * ip:port, one daemon serves every path); the listening sockets; the routes:
 *
 *   GET /health   200 "ok", or 503 and which loop is stuck (daemon_alive)
 *   GET /ready    200 "ready", or 503 and why not (daemon_ready)
 *   GET /metrics  Prometheus text, format 0.0.4 (metrics_collect)
 *
 * HEAD is answered like GET without the body; other methods get 405, other
 * paths 404. /health and /ready are served on health.listen, /metrics on
 * metrics.listen. Each daemon runs on a thread of ours ("http"), which
 * also holds its limits: 64 connections, 8 per client address, and 5 s for
 * a request from its connection (or the previous reply) to its reply sent,
 * whether or not the client keeps sending (docs/security.md).
 *
 * Must never: change the daemon (every route only reads), serve on a
 * thread of another subsystem, or keep a request's memory after its reply.
 * Sockets carry SO_REUSEPORT like the DNS sockets, so the next version can
 * start on the same ports before this one exits (docs/ARCHITECTURE.md,
 * "Overlapping instances").
 */
#ifndef LOCALDNS_HTTP_H
#define LOCALDNS_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct daemon;
struct http;

/* Since start, every endpoint together (any thread may read them). */
struct http_stats {
	uint64_t refused;         /* connections closed at accept: per-address or total limit */
	uint64_t closed_deadline; /* connections shut down with a request past its deadline */
};

void http_stats(struct http_stats *out);

/*
 * Listen on health.listen and metrics.listen of d->cfg ("" = that one off)
 * and start serving; d must be filled in and outlive http_stop. NULL with
 * the message in err (naming the key: "metrics.listen: cannot listen on
 * 127.0.0.1:9253: Address already in use") and nothing left running.
 */
struct http *http_start(const struct daemon *d, char *err, size_t errlen);

/* Stop serving (waits for a request being answered), close the sockets, free. */
void http_stop(struct http *h);

#endif
