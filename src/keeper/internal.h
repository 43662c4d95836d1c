/*
 * keeper/internal.h — what the two sides of keeper.socket say to each
 * other, and the keeper's relay (relay.c). Private to src/keeper/.
 *
 * The link is a unix SOCK_SEQPACKET connection from the serving process to
 * the keeper: every message is one struct keeper_msg, with exactly one
 * descriptor (SCM_RIGHTS) for HELLO and SOCKET, none for LEAVING. Both ends
 * run the same binary on the same host: host byte order, fixed sizes.
 *
 *   HELLO    pid, nftables token, number of workers; the fd is a memfd of
 *            struct keeper_beats (the keeper maps it, and writes only its
 *            report there).
 *   SOCKET   one listening socket of one worker: its address, UDP or TCP.
 *            A set is sent whole: index 0..total-1 of one generation; the
 *            keeper swaps its copies for a set once the last one is in.
 *   LEAVING  SIGTERM: the process hands its traffic over itself.
 *
 * The keeper answers nothing: it needs no word from the server but its
 * hang-up (death) and its heartbeats (hangs). What it did, it writes into
 * the shared page (struct keeper_report), not on the link.
 */
#ifndef LOCALDNS_KEEPER_INTERNAL_H
#define LOCALDNS_KEEPER_INTERNAL_H

#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config/config.h"
#include "keeper/keeper.h"
#include "server/server.h"

#define KEEPER_MAGIC 0x6b656571u /* "keep" + 1: the protocol's version (1: the report) */

/*
 * What the keeper did since it started (struct keeper_stats' counts): one
 * writer, the keeper, with relaxed stores of its running totals into the
 * page of every process it serves; read by that process with relaxed
 * loads. Each count is a counter on its own; no snapshot of them all.
 */
struct keeper_report {
	_Atomic uint64_t rescues[KEEPER_REASONS];
	_Atomic uint64_t relayed[KEEPER_REASONS];
	_Atomic uint64_t failed[KEEPER_FAILURES];
};

/* The shared page: the workers' heartbeats (read by the keeper) and the
 * keeper's report (read by localdns), each on cache lines of its own. */
struct keeper_beats {
	uint32_t magic;
	uint32_t n_workers;
	_Alignas(64) struct keeper_report report;
	_Alignas(64) struct server_beat worker[]; /* each worker's loop turn and thread id */
};

static inline size_t keeper_beats_size(unsigned n_workers)
{
	return sizeof(struct keeper_beats) + (size_t)n_workers * sizeof(struct server_beat);
}

enum keeper_msg_type { KEEPER_HELLO = 1, KEEPER_SOCKET, KEEPER_LEAVING };

struct keeper_msg {
	uint32_t magic;
	uint32_t type;
	union {
		struct {
			int32_t pid;
			uint32_t token;
			uint32_t n_workers;
		} hello;
		struct {
			uint64_t generation;
			uint32_t index, total;
			uint32_t worker;
			int32_t type;          /* SOCK_DGRAM or SOCK_STREAM */
			struct sockaddr_storage addr;
		} socket;
	};
};

/* ---- relay.c: answering rescued UDP queries through the cluster DNS --------- */

struct relay;

/* Relay sockets (a few per family, random ports) made now: none later. */
struct relay *keeper_relay_new(char *err, size_t errlen);
void keeper_relay_free(struct relay *r);

/*
 * Where queries go from now on: the table's fallback endpoints, on port
 * (listen.port: the fallback DNAT keeps the port); copied.
 */
void keeper_relay_use_endpoints(struct relay *r, const struct config_ip *ips, size_t n,
				uint16_t port);
size_t keeper_relay_endpoints(const struct relay *r);

/* The endpoint the next rescued query goes to (in turn); NULL: none. */
const struct sockaddr_storage *keeper_relay_next_endpoint(struct relay *r);

/*
 * Ask the cluster DNS the query q (len bytes) that came on reply_fd (a
 * rescued UDP socket) from client: the answer goes back to client with
 * sendto on reply_fd. false when it cannot be asked (no endpoint, no room,
 * not a query): the client gets nothing.
 */
bool keeper_relay_ask(struct relay *r, int reply_fd, const struct sockaddr_storage *client,
		      const uint8_t *q, size_t len, uint64_t now_ms);

/* Queries asked and not answered yet for reply_fd. */
unsigned keeper_relay_pending(const struct relay *r, int reply_fd);

/* reply_fd is about to close: its pending queries are forgotten. */
void keeper_relay_forget(struct relay *r, int reply_fd);

/* Descriptors to poll for answers (into fds, at most max); how many. */
size_t keeper_relay_fds(const struct relay *r, int *fds, size_t max);

/* Answers on fd handed back; queries past their deadline forgotten. */
void keeper_relay_read(struct relay *r, int fd);
void keeper_relay_expire(struct relay *r, uint64_t now_ms);

/* asked: sent to an endpoint; dropped: not sent; expired: no answer in
 * time; forgotten: no answer before its socket closed. */
struct keeper_relay_stats {
	uint64_t asked, answered, dropped, expired, forgotten;
};
void keeper_relay_stats(const struct relay *r, struct keeper_relay_stats *out);

/* ---- stream.c: rescued TCP connections, carried to the cluster DNS over TCP --- */

#define STREAMS_MAX 256 /* connections carried at once */

struct streams;

struct streams *keeper_streams_new(void);
void keeper_streams_free(struct streams *st); /* closes what is open, counted */

/*
 * fd, a connection accepted from a rescued listener (non-blocking), is
 * carried to the next endpoint of r (keeper_relay_next_endpoint) over TCP. false
 * when there is no room: fd is closed (the client sees a reset).
 */
bool keeper_streams_add(struct streams *st, struct relay *r, int fd, enum keeper_reason why,
			uint64_t now_ms);
size_t keeper_streams_count(const struct streams *st);

/* The descriptors to poll, with what each waits for (into fds, at most max); how many. */
size_t keeper_streams_poll_set(const struct streams *st, struct pollfd *fds, size_t max);

/* fd, one of those, is ready (revents): bytes moved; nothing closed here. */
void keeper_streams_ready(struct streams *st, int fd, short revents);

/* The connections that are over, or past their life, closed and counted. */
void keeper_streams_sweep(struct streams *st, uint64_t now_ms);

/* Of the connections closed: queries relayed (by why), not sent, left without answer. */
struct stream_stats {
	uint64_t relayed[KEEPER_REASONS];
	uint64_t not_sent, no_answer;
};
void keeper_streams_stats(const struct streams *st, struct stream_stats *out);

#endif
