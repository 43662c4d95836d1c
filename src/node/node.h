/*
 * node — localdns on a Kubernetes node: the link and addresses
 * (iface/) and the nftables table (nft/), set up before the server
 * binds and kept in place by a monitor thread.
 *
 * Owns: the start-up order (addresses, then the table; a table the kernel
 * refuses removes the addresses this start added, so nothing is left half
 * applied), the monitor thread (netlink and nftables events, the heartbeat
 * every NFT_LIVE_REFRESH_MS while the daemon's capture test passes, the
 * full check every nftables.reassert_interval), the repair counters, and
 * what stays or goes at exit and on uninstall.
 *
 * Must never: serve queries, or touch links, addresses or tables other than
 * the configured ones.
 *
 * Threads: node_start, node_stop and node_cleanup on the main thread;
 * the reload functions on the reloading thread (the main thread: both
 * keep CAP_NET_ADMIN). The monitor thread keeps CAP_NET_ADMIN and nothing
 * else, and installs the fallback endpoints other threads hand it.
 */
#ifndef LOCALDNS_NODE_NODE_H
#define LOCALDNS_NODE_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "nft/nft.h"

struct node;

struct node_stats {
	uint64_t link_repairs;  /* the link or an address put back */
	uint64_t table_repairs; /* the nftables table rebuilt after a change */
};

/*
 * Apply interface.* and nftables.* (each only when enabled) and start the
 * monitor thread. cfg must outlive the node (or the first node_use). NULL
 * with err on failure, and then nothing this call added remains.
 */
struct node *node_start(const struct config *cfg, char *err, size_t errlen);

/*
 * Stop the monitor; with nftables.teardown remove the table and the
 * link/addresses, else leave them (they fail open without us). NULL is fine.
 */
void node_stop(struct node *node);

/* The table; NULL when nftables is off. */
struct nft *node_nft(struct node *node);

/*
 * The ready endpoints of nftables.fallback_service, from the Kubernetes
 * watch (any thread; ips is copied): where DNS to the link-local addresses
 * goes while localdns is down. None ready: back to
 * nftables.fallback_endpoints. The monitor thread installs them soon after
 * (the caller may have no capability); logged, and a failure keeps the
 * previous endpoints. NULL node is fine.
 */
void node_use_cluster_dns_endpoints(struct node *node, const struct config_ip *ips, size_t n);

/*
 * Live reload (any one thread at a time; serialised with the monitor and
 * the kube watch), around the server's own steps:
 *   node_add_addresses  puts next's served addresses on the link before the
 *                       server binds them (nothing else changes);
 *   node_undo_addresses takes back what node_add_addresses added, when a
 *                       later step fails;
 *   node_use            makes the node describe next: the nftables table is
 *                       replaced in one transaction when its addresses or
 *                       port differ, and from then on the monitor repairs
 *                       next's addresses. next must outlive the node or the
 *                       next node_use. On failure (err) nothing changed;
 *   node_drop_addresses once the server has closed them, deletes the
 *                       addresses prev served and next does not (errors are
 *                       logged).
 * Without interface.manage the address steps do nothing.
 */
int node_add_addresses(struct node *node, const struct config *next, char *err, size_t errlen);
void node_undo_addresses(struct node *node);
int node_use(struct node *node, const struct config *next, char *err, size_t errlen);
void node_drop_addresses(struct node *node, const struct config *prev);

void node_stats(struct node *node, struct node_stats *out);

#define NODE_STATUS_ENDPOINTS 16 /* fallback endpoints a status shows */

/*
 * What localdns last found and did on the node, for `localdns ctl node`:
 * each check as the monitor thread last made it (monotonic ms; 0: never),
 * and "" or what went wrong. A caller without CAP_NET_ADMIN cannot ask
 * the kernel itself, so this is the monitor's word, with its age.
 */
struct node_status {
	bool link_managed;            /* interface.manage */
	char link[32];                /* interface.name, or "lo" */
	bool loopback;                /* interface.kind: loopback */
	uint64_t link_checked_ms;
	char link_problem[CONFIG_ERR_MAX];
	bool table_managed;           /* nftables.enabled */
	char table[64];
	bool teardown;                /* nftables.teardown: removed at a clean exit */
	uint64_t table_checked_ms;
	char table_problem[CONFIG_ERR_MAX];
	uint64_t heartbeat_renewed_ms; /* capture lives until + heartbeat_timeout_ms */
	uint64_t heartbeat_timeout_ms; /* nft_live_timeout_ms */
	char heartbeat_problem[CONFIG_ERR_MAX];
	bool capturing;               /* the daemon says DNS should come here (node_capture) */
	char not_capturing[CONFIG_ERR_MAX]; /* why not, when it does not */
	char fallback_source[64];     /* "kubernetes", "nftables.fallback_endpoints" or "" */
	char fallback_service[128];   /* nftables.fallback_service */
	struct config_ip fallback[NODE_STATUS_ENDPOINTS];
	size_t n_fallback;            /* installed; only the first NODE_STATUS_ENDPOINTS shown */
	uint64_t monitor_turned_ms;
	struct node_stats repairs;
};

/* Any thread; a NULL node (no interface or nftables work) reports nothing managed. */
void node_status(struct node *node, struct node_status *out);

/*
 * Capture. fn says whether DNS should come to this process now (why, when
 * not); the monitor asks it before every heartbeat, on its own thread,
 * and renews the heartbeat only on yes, so the node's DNS fails open within
 * NFT_LIVE_TIMEOUT_MS of the first no. Until node_capture is called there
 * is no heartbeat from this process. fn may do what yes needs first (open
 * the server's sockets); arg must outlive the node or node_release.
 */
typedef bool node_capture_fn(void *arg, char *why, size_t whylen);
void node_capture(struct node *node, node_capture_fn *fn, void *arg);

/*
 * The monitor drives the link to the keeper (src/keeper/) from now on,
 * each turn before the heartbeat, so the keeper holds every socket before
 * the heartbeat opens it to traffic. link must outlive node_stop. NULL
 * node or link: nothing.
 */
struct keeper_link;
void node_keep(struct node *node, struct keeper_link *link);

/*
 * SIGTERM, before the server's sockets stop: no more renewals, and this
 * process's heartbeat taken out in one transaction (nft_leave), so new DNS
 * flows fail open at once unless another localdns on the node keeps taking
 * them. Logged. NULL is fine.
 *
 * Returns whether another localdns may take new DNS flows on this node from
 * now on: its token keeps the heartbeat, or nothing tells (no nftables
 * table, or the leave failed). false: the heartbeat is gone, new flows fail
 * open, and only queries already on their way still reach our sockets.
 */
bool node_release(struct node *node);

/* The monotonic ms of the monitor loop's last turn (it turns at least once a
 * second); 0 when there is no monitor thread. Any thread. */
uint64_t node_heartbeat_ms(struct node *node);

/*
 * `localdns cleanup`: remove the table and, with interface.manage, the link
 * (or our addresses on lo) that cfg describes, whatever their state.
 * 0, or -1 with err.
 */
int node_cleanup(const struct config *cfg, char *err, size_t errlen);

#endif
