/*
 * keeper — no query lost when the serving process dies or hangs.
 *
 * The keeper is a second, small process (`localdns keeper --config FILE`,
 * a second container of the pod) that holds a copy of every listening
 * socket of the serving process (passed with SCM_RIGHTS over a unix socket,
 * keeper.socket). A socket lives as long as any process holds it, so what
 * the kernel queued in it survives the serving process:
 *
 *   - the serving process dies (kill -9, OOM kill of its container, a
 *     crash): the keeper learns it at once (the unix socket hangs up),
 *     takes the process's nftables heartbeat out in one transaction (new
 *     DNS flows fail open at once, host-network clients are never refused:
 *     the sockets are still there), and answers what was queued by relaying
 *     it to the cluster DNS endpoints of the table's fallback maps;
 *   - a worker stops turning (SIGSTOP, a deadlock): the keeper reads the
 *     workers' heartbeats from memory the process shares with it, and once
 *     one stands still for KEEPER_RESCUE_MS over the keeper's on-time looks
 *     (util/stall.h: starved together is not stuck), relays what queues in
 *     that worker's sockets until it turns again. Capture itself moves as
 *     before (the node monitor's own judge, the heartbeat's expiry).
 *
 * Owns: the server side of the link (keeper_link: the shared heartbeats,
 * connecting and reconnecting, sending the sockets whenever the set
 * changes, "leaving" at SIGTERM, reading back what the keeper reports in
 * the shared page) and the keeper process (keeper_main).
 *
 * Must never: read a queued query while the worker that owns the socket
 * turns, keep a TCP listener listening that the serving process closed
 * (the server shuts its listeners down, which acts on the socket, not the
 * descriptor), or relay to an address localdns serves (it would come back).
 *
 * Threads: keeper_link_new/free and keeper_link_leave on the main thread,
 * keeper_link_turn on the node monitor thread (a mutex
 * serialises the two sides); the keeper process works on one thread, its
 * main thread waiting for it.
 */
#ifndef LOCALDNS_KEEPER_KEEPER_H
#define LOCALDNS_KEEPER_KEEPER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

struct server;
struct keeper_link;

/* The keeper looks at the workers' heartbeats this often (ms). */
#define KEEPER_LOOK_MS 50
/* A worker whose heartbeat stood still this long (on-time looks) is rescued. */
#define KEEPER_RESCUE_MS 300

/*
 * The server's side, when cfg->keeper.socket is set (else NULL, no error):
 * shared memory for n_workers heartbeats, not connected yet. NULL with err
 * when the memory cannot be made.
 */
struct keeper_link *keeper_link_new(const struct config *cfg, unsigned n_workers, char *err,
				    size_t errlen);
void keeper_link_free(struct keeper_link *l);

/* Where worker i stores its heartbeat (n_workers slots the keeper reads); NULL link: NULL. */
struct server_beat *keeper_link_beats(struct keeper_link *l);

/*
 * What the link tells the keeper: the server whose sockets it copies and
 * the nftables token of this process's heartbeat. Before the first turn.
 */
void keeper_link_serve(struct keeper_link *l, struct server *server, uint32_t token);

/*
 * Node monitor thread, every turn (it turns every NFT_LIVE_REFRESH_MS): a
 * hang-up noticed, a connection tried (at most once a second while there
 * is none), the sockets sent again when the server's set changed since,
 * so the keeper has the sockets before the heartbeat that opens them to
 * traffic. Logged when the link comes and goes.
 */
void keeper_link_turn(struct keeper_link *l, uint64_t now_ms);

/*
 * SIGTERM (main thread, before the heartbeat is taken out): this process
 * hands its traffic over itself; the keeper drops its copies and rescues
 * nothing. No reconnection after this. NULL is fine.
 */
void keeper_link_leave(struct keeper_link *l);

/* Why the keeper took a serving process's queries. */
enum keeper_reason {
	KEEPER_DEATH, /* the process died: the link hung up without LEAVING */
	KEEPER_HANG,  /* a worker stood still KEEPER_RESCUE_MS */
	KEEPER_REASONS
};

/* Why a query the keeper took got no answer through it. */
enum keeper_failure {
	KEEPER_NOT_SENT,  /* no fallback endpoint, no room, or a send or connect failed */
	KEEPER_NO_ANSWER, /* the endpoint did not answer in time, or its connection ended first */
	KEEPER_FAILURES
};

/*
 * What localdns can tell of its keeper (ctl stats, /metrics). The counts
 * are the keeper's, since the keeper started: it writes them into the page
 * it shares with each localdns that connects, so the localdns started after
 * a crash reads what the keeper did while it was down.
 */
struct keeper_stats {
	uint64_t connected;                 /* 1: the keeper holds the current sockets */
	uint64_t rescues[KEEPER_REASONS];   /* deaths seen, workers judged stuck */
	uint64_t relayed[KEEPER_REASONS];   /* queries taken and asked of the cluster DNS */
	uint64_t failed[KEEPER_FAILURES];   /* queries taken and not answered */
};

/* Any thread; lock-free (atomics). A NULL link: all zeros. */
void keeper_link_stats(const struct keeper_link *l, struct keeper_stats *out);

/* `localdns keeper --config FILE`: runs until SIGTERM/SIGINT; the exit status. */
int keeper_main(const char *config_path);

#endif
