/*
 * control — the control socket behind `localdns ctl`: a unix stream socket
 * (control.socket), its line protocol, and the thread that serves it.
 *
 * Owns: creating the socket file (parent directories 0755, the socket 0660;
 * a stale file from a crashed run is replaced, a live one means another
 * localdns runs and is an error) and removing it at exit; the control
 * threads (CONTROL_THREADS), each of which polls the socket and a stop
 * eventfd and serves one connection at a time, so several operators are
 * served at once and one slow lookup holds up only its own client; the
 * commands (stats, lookup, flush, dump-cache, reload, top); the client side
 * of the protocol for `localdns ctl`.
 *
 * Must never: run on a worker or block the query path (lookups take the
 * RCU read lock for one query_handle; dump-cache walks the cache in short
 * read-side sections; a flush waits for the grace period, not workers);
 * hold a whole reply in memory (replies stream through a 16 KiB buffer);
 * wait on a client for more than CONTROL_IO_TIMEOUT_MS without progress.
 *
 * Protocol (text, one request per connection):
 *   request:  one line, at most CONTROL_REQUEST_MAX bytes: a command and
 *             its arguments separated by single spaces; "--json" right
 *             after the command asks for a JSON body (stats, lookup,
 *             dump-cache, top: docs/ctl.md)
 *   reply:    a status line, "ok", "error MESSAGE" or "usage MESSAGE";
 *             after "ok" the body; then a line holding only "." (no body
 *             line is ever "."), then the daemon closes. A reply without
 *             the last line was cut short.
 *
 * Threads: control_open, control_start and control_stop on the main thread;
 * control_call anywhere (it is the client).
 */
#ifndef LOCALDNS_CONTROL_H
#define LOCALDNS_CONTROL_H

#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "daemon/daemon.h"

#define CONTROL_DEFAULT_SOCKET "/run/localdns/control.sock"
#define CONTROL_REQUEST_MAX 1024
#define CONTROL_IO_TIMEOUT_MS 5000   /* a client that neither sends nor reads */
/* Connections served at once; each thread has its own request ring to the
 * resolver (producers after the workers': upstream_start gets
 * workers + CONTROL_THREADS) and about 100 KiB of working space. */
#define CONTROL_THREADS 4

struct control;

/*
 * Create and bind control.socket (before anything else starts, so a second
 * localdns on the same path stops before it touches the node). *out is
 * NULL when control.socket is "" (off). 0, or -1 with err set.
 */
int control_open(const struct config *cfg, struct control **out, char *err, size_t errlen);

/*
 * Start serving d's subsystems, which must stay allocated until
 * control_stop; clients that connected since control_open are served now.
 * The resolver's request rings from producer first_producer on are the
 * control threads' (the server's worker count).
 * ctl may be NULL (off). 0, or -1 with err set: the socket is then closed
 * (clients are refused) and control_stop still removes the file.
 */
int control_start(struct control *ctl, struct daemon *d, unsigned first_producer, char *err,
		  size_t errlen);

/* Stop the thread (it finishes within a poll round), close and remove the
 * socket file if it is still ours, free. NULL: nothing. */
void control_stop(struct control *ctl);

enum control_status {
	CONTROL_OK,          /* the body was written to out */
	CONTROL_FAILED,      /* the daemon said "error": msg */
	CONTROL_USAGE,       /* the daemon said "usage": msg */
	CONTROL_UNREACHABLE, /* no connection, no reply, or a reply cut short: msg */
};

/*
 * Client: send request (one line, no newline) to the daemon at path and
 * copy the body to out as it arrives. A reply that stays silent for
 * CONTROL_CALL_TIMEOUT_MS is given up.
 */
#define CONTROL_CALL_TIMEOUT_MS 60000
enum control_status control_call(const char *path, const char *request, FILE *out,
				 char *msg, size_t msglen);

#endif
