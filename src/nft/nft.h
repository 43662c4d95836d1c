/*
 * nft — our nftables table (nftables.table, family inet), through libnftnl
 * and libmnl. What the table holds and why: src/nft/plan.h.
 *
 * Owns: installing the table as one transaction (a batch that adds the
 * table, deletes it and adds it again with everything in it, so an old
 * table of ours is replaced with no moment without rules and a failure
 * leaves the old state untouched), keeping what changes at run time (every
 * process's heartbeat, the TCP flows) across it; this process's heartbeat
 * (its token and the live elements) and taking it out; checking the table
 * against the plan; the fallback endpoints, and keeping those of a table
 * left before us; removing the table; telling foreign changes to it apart
 * from our own (event descriptor).
 *
 * Ownership: the table we make carries the comment "managed by localdns".
 * A table of our name that exists is adopted when it carries that comment
 * (or, without any comment, holds nothing but our chains and rules: made
 * by an older localdns, or on a kernel before 5.13), so a table left by a
 * killed localdns is taken over, not duplicated; any other table of that
 * name is someone else's and is never replaced or removed: installing it
 * fails with a message that says so. Replacing and removing delete the
 * table by the handle just found to be ours, so a table swapped in
 * meanwhile makes the batch fail rather than go.
 *
 * Must never: touch another table, or flush the ruleset.
 *
 * Threads: every function taking a struct nft may be called from any
 * thread; a mutex serialises them (one netlink socket, one plan).
 *
 * How the folder's files share this (the pure message building and
 * judging apart from the socket): src/nft/internal.h.
 */
#ifndef LOCALDNS_NFT_NFT_H
#define LOCALDNS_NFT_NFT_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"

struct nft;

/*
 * Open the netlink sockets for cfg (kept by reference) with the static
 * fallback endpoints of nftables.fallback_endpoints; changes nothing.
 */
struct nft *nft_open(const struct config *cfg, char *err, size_t errlen);
void nft_close(struct nft *n);

enum nft_table_owner { NFT_TABLE_ABSENT, NFT_TABLE_OURS, NFT_TABLE_FOREIGN };

/*
 * Whose is the table named nftables.table (see "Ownership"): an enum
 * nft_table_owner (FOREIGN with err saying why and what to do), or -1 when
 * the kernel could not be asked (err).
 */
int nft_table_owner(struct nft *n, char *err, size_t errlen);

/*
 * Replace our table with the planned one in one transaction; refused with
 * err when the table of that name is someone else's. On failure
 * err has what the kernel refused and why ("nftables refused rule 2 of
 * chain prerouting: Operation not supported"), and nothing changed.
 */
int nft_apply(struct nft *n, char *err, size_t errlen);

/*
 * Replace the cluster DNS endpoints that DNS to the link-local addresses
 * goes to while localdns is down (DNAT, port unchanged; each family uses
 * its own endpoints; none: no fallback for that family). The Kubernetes
 * watch calls this with the ready kube-dns endpoints; ips is copied. The
 * table is rebuilt in one transaction. 0, or -1 with err.
 */
int nft_set_fallback_endpoints(struct nft *n, const struct config_ip *ips, size_t n_ips,
			       char *err, size_t errlen);

/* The endpoints installed now, the first max copied to out; how many there are. */
size_t nft_fallback_endpoints(struct nft *n, struct config_ip *out, size_t max);

/*
 * Forget the UDP flows to the link-local addresses (listen.addresses, on
 * listen.port) that the fallback DNAT sent to one of gone, endpoints just
 * taken out of the maps (conntrack.c): a new query that reuses such a flow's
 * source port would go to the old endpoint, which may no longer be there
 * ("port unreachable"). kube-proxy does the same for a Service's removed UDP
 * endpoints. How many were deleted, or -1 with err.
 */
int nft_forget_flows(const struct config *cfg, const struct config_ip *gone, size_t n_gone,
		     char *err, size_t errlen);

/*
 * Start-up, with our table in the kernel (left by a localdns before us, or
 * one still running beside us): the endpoints its fallback maps hold become
 * ours, so the link-local addresses keep their fallback until the
 * Kubernetes watch reports (nftables.fallback_endpoints is only the guess
 * before any report). The number kept (the first max copied to out), 0
 * when the maps are empty, -1 when they could not be read (errno).
 */
int nft_keep_endpoints(struct nft *n, struct config_ip *out, size_t max);

/*
 * Live reload: plan the table for cfg (kept by reference from then on, as
 * nft_open's) with the current fallback endpoints, and when it differs
 * from the installed one (served addresses, port) replace it in one
 * transaction. On failure err says why, and the old table and config stay.
 */
int nft_use(struct nft *n, const struct config *cfg, char *err, size_t errlen);

/*
 * Renew the heartbeat: this process's token in set instances and the live
 * elements (call every NFT_LIVE_REFRESH_MS while DNS should come here).
 * From the first call on, rebuilds of the table put them back at once.
 */
int nft_heartbeat(struct nft *n, char *err, size_t errlen);

/*
 * Stop renewing, and in one transaction take out this process's token and,
 * unless another process's token is there (a localdns beside it in an
 * upgrade), the live elements: new DNS flows fail open at once. 0: the
 * heartbeat is gone, 1: another process keeps it, -1: err.
 */
int nft_leave(struct nft *n, char *err, size_t errlen);

/*
 * How long this process's heartbeat outlives its last renewal (set before
 * the first nft_heartbeat): NFT_LIVE_TIMEOUT_MS, or NFT_LIVE_TIMEOUT_KEPT_MS
 * when a keeper takes it out at once on death and hang (src/keeper/).
 */
void nft_live_timeout(struct nft *n, uint64_t ms);
uint64_t nft_live_timeout_ms(struct nft *n);

/* This process's token in set instances (nft_open draws it). */
uint32_t nft_token(struct nft *n);

/*
 * nft_leave on behalf of the process whose token this is (the keeper,
 * src/keeper/, for a serving process that died or stopped): same outcome.
 */
int nft_leave_for(struct nft *n, uint32_t token, char *err, size_t errlen);

/* No events wanted (the keeper): the event socket is closed; nft_event_fd is -1 after. */
void nft_mute(struct nft *n);

/*
 * Compare the kernel's table with the plan (table, sets, element counts,
 * every rule carrying the current fingerprint). 1: as planned, 0: drifted
 * (err says how), -1: could not ask (err).
 */
int nft_check(struct nft *n, char *err, size_t errlen);

/* Delete our table if it exists (teardown, uninstall); someone else's: -1, err. */
int nft_remove(struct nft *n, char *err, size_t errlen);

/*
 * A non-blocking descriptor readable on nftables changes; nft_drain_events
 * reads what is pending and says whether anyone else touched our table.
 */
int nft_event_fd(const struct nft *n);
bool nft_drain_events(struct nft *n);

#endif
