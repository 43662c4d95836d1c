/*
 * nft/plan — what our nftables table must contain, as plain data.
 *
 * Owns: turning the configuration (served addresses, port, table name) and
 * the current fallback endpoints into the list of sets, chains and rules of
 * the table, and a fingerprint of it all. Pure: no netlink, no allocation
 * beyond the plan itself, so it is unit-tested (tests/unit/test_nft_plan.c)
 * and src/nft/rule.c and batch.c only translate it into libnftnl objects.
 *
 * The table (family inet), and why each part is there:
 *
 *   set local4/local6    every served address (listen.addresses + intercept)
 *   set link4/link6      listen.addresses only (the link-local ones)
 *   set live4/live6      the served addresses with a NFT_LIVE_TIMEOUT_MS
 *                        timeout, renewed every NFT_LIVE_REFRESH_MS while a
 *                        localdns on the node takes traffic and its workers
 *                        turn (the heartbeat; src/node/node.c decides)
 *   set instances        one element per localdns renewing the heartbeat
 *                        (a random token, same timeout): on SIGTERM a
 *                        process removes its own and, when no other is
 *                        left, the heartbeat too. No rule reads it.
 *   set flows4/flows6    client address . port . our address of every TCP
 *                        connection whose SYN was not tracked, filled by
 *                        the rules; an entry lives while its packets flow
 *                        (listen.tcp_idle_timeout + NFT_FLOW_MARGIN_MS)
 *   map fallback4/6      numgen index -> cluster DNS endpoint
 *
 *   chain prerouting  filter, prerouting, raw priority (-300):
 *       UDP: daddr @live, dport <port>, a socket bound to it -> notrack
 *       TCP SYN: the same                    -> into @flows, notrack
 *       TCP past the SYN: daddr @local, dport <port>, the
 *       connection in @flows                 -> refresh it, notrack
 *   chain output      filter, output, raw priority:
 *       UDP: daddr @live, dport <port>                      -> notrack
 *       TCP SYN: the same                    -> into @flows, notrack
 *       TCP past the SYN: as in prerouting
 *       saddr @local, sport <port>                          -> notrack
 *   chain fallback-prerouting / fallback-output  nat, dstnat priority (-100),
 *   only for a family with endpoints:
 *       daddr @link, dport <port> -> dnat to numgen random mod N map @fallback
 *
 * A new flow (a datagram, a SYN) is untracked, so served here, only while
 * the heartbeat lives and, for pods, a socket is bound to its destination:
 * a process that is alive but stuck keeps its sockets, and only the
 * heartbeat, which stops when its workers stop turning, lets its traffic
 * fail open. (The output hook cannot test for our socket: there the socket
 * expression sees the client's.)
 *
 * A TCP connection stays with whoever took its SYN, whichever way capture
 * switches meanwhile: its later packets are untracked exactly when its SYN
 * was (the flow sets), so a connection we took is not handed to conntrack
 * mid-stream, where kube-proxy's DNAT would send the rest to CoreDNS, and
 * one CoreDNS took keeps being translated to CoreDNS. A full flow set makes
 * a SYN fail open (the update fails, so the rule does not match).
 *
 * Every rule is there for UDP and for TCP and for IPv4 and IPv6, and carries
 * the comment "localdns <fingerprint>" so a check can tell our current
 * rules from anything else.
 */
#ifndef LOCALDNS_NFT_PLAN_H
#define LOCALDNS_NFT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

/*
 * How long a heartbeat element lives, and how often it is renewed: after
 * kill -9 or SIGSTOP, DNS fails open within NFT_LIVE_TIMEOUT_MS; three
 * renewals fit in it, so one late turn of a busy monitor thread does not
 * drop capture. docs/node-integration.md has the measured cost.
 */
#define NFT_LIVE_TIMEOUT_MS 300
#define NFT_LIVE_REFRESH_MS 100

/*
 * With a keeper (src/keeper/), which takes the heartbeat out within
 * milliseconds of a death or a judged hang, the timeout is the last resort
 * for the case where both processes are gone: long enough that a node
 * monitor starved of CPU for most of a second does not drop capture.
 */
#define NFT_LIVE_TIMEOUT_KEPT_MS 1000

/* A flow entry outlives the connection's idle timeout by this much. */
#define NFT_FLOW_MARGIN_MS 5000
#define NFT_FLOW_SET_SIZE 65536

enum nft_set_role {
	NFT_SET_LOCAL, NFT_SET_LINK, NFT_SET_LIVE, NFT_SET_FALLBACK, NFT_SET_FLOWS,
	NFT_SET_INSTANCES          /* one set for both families (family 0) */
};
enum nft_chain_id {
	NFT_CHAIN_PREROUTING,
	NFT_CHAIN_OUTPUT,
	NFT_CHAIN_FALLBACK_PREROUTING,
	NFT_CHAIN_FALLBACK_OUTPUT,
	NFT_CHAINS
};
enum nft_match { NFT_MATCH_DADDR, NFT_MATCH_SADDR };
enum nft_action { NFT_NOTRACK, NFT_DNAT };
/* TCP: what the rule does with the connection (flows set of its family). */
enum nft_flow {
	NFT_FLOW_NONE,
	NFT_FLOW_START,            /* a SYN: remember the connection */
	NFT_FLOW_KNOWN             /* past the SYN: only a remembered one; refresh it */
};
/* TCP only: which packets the rule is for. */
enum nft_tcp_syn { NFT_SYN_ANY, NFT_SYN_SET, NFT_SYN_CLEAR };

struct nft_set_plan {
	char name[16];
	int family;               /* AF_INET or AF_INET6; 0 for instances */
	enum nft_set_role role;
	const struct config_ip **ips; /* elements (fallback: data, keyed 0..n-1) */
	size_t n_ips;
};

struct nft_chain_plan {
	const char *name;
	bool nat;                 /* type nat, else filter */
	bool output;              /* output hook, else prerouting */
	int priority;
};

struct nft_rule_plan {
	enum nft_chain_id chain;
	int family;
	uint8_t l4proto;          /* IPPROTO_UDP or IPPROTO_TCP */
	enum nft_match match;     /* which address is looked up in set */
	const struct nft_set_plan *set;
	enum nft_tcp_syn syn;
	bool bound;               /* and a full socket bound to that very address
				   * exists (not a wildcard: socket wildcard 0) */
	enum nft_flow flow;
	const struct nft_set_plan *flows; /* NFT_FLOW_*: the flows set */
	enum nft_action action;
	const struct nft_set_plan *map; /* NFT_DNAT: the endpoint map */
};

#define NFT_PLAN_SETS 11
#define NFT_PLAN_RULES 32

struct nft_plan {
	const char *table;
	uint16_t port;
	struct nft_set_plan sets[NFT_PLAN_SETS];
	size_t n_sets;
	struct nft_rule_plan rules[NFT_PLAN_RULES];
	size_t n_rules;
	size_t rules_per_chain[NFT_CHAINS];
	uint64_t flow_timeout_ms; /* of the flows sets' entries */
	char comment[32];         /* "localdns <fingerprint>" */
	/* Storage for the element pointers of sets. */
	const struct config_ip **storage;
};

extern const struct nft_chain_plan nft_chains[NFT_CHAINS];

/*
 * Plan the table for cfg with these fallback endpoints (NULL/0: none); ips
 * must outlive the plan. Returns 0, or -1 when out of memory.
 */
int nft_plan_build(struct nft_plan *p, const struct config *cfg,
		   const struct config_ip *endpoints, size_t n_endpoints);
void nft_plan_free(struct nft_plan *p);

/* The set of this role and family, or NULL. */
const struct nft_set_plan *nft_plan_set(const struct nft_plan *p, enum nft_set_role role,
					int family);

#endif
