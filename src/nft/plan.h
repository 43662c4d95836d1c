/*
 * nft/plan — what our nftables table must contain, as plain data.
 *
 * Owns: turning the configuration (served addresses, port, table name) and
 * the current fallback endpoints into the list of sets, chains and rules of
 * the table, and a fingerprint of it all. Pure: no netlink, no allocation
 * beyond the plan itself, so it is unit-tested (tests/unit/test_nft_plan.c)
 * and src/nft/nft.c only translates it into libnftnl objects.
 *
 * The table (family inet), and why each part is there:
 *
 *   set local4/local6    every served address (listen.addresses + intercept)
 *   set link4/link6      listen.addresses only (the link-local ones)
 *   set live4/live6      the served addresses with a 1 s timeout, refreshed
 *                        every 250 ms while localdns runs (the heartbeat)
 *   map fallback4/6      numgen index -> cluster DNS endpoint
 *
 *   chain prerouting  filter, prerouting, raw priority (-300):
 *       UDP, and TCP with SYN:
 *       daddr @local, dport <port>, a socket bound to it  -> notrack
 *       TCP without SYN (the rest of a connection):
 *       daddr @local, dport <port>, a socket it belongs to -> notrack
 *   chain output      filter, output, raw priority:
 *       daddr @live, dport <port>                         -> notrack
 *       saddr @local, sport <port>                        -> notrack
 *   chain fallback-prerouting / fallback-output  nat, dstnat priority (-100),
 *   only for a family with endpoints:
 *       daddr @link, dport <port> -> dnat to numgen random mod N map @fallback
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

/* How long a heartbeat element lives, and how often it is renewed. */
#define NFT_LIVE_TIMEOUT_MS 1000
#define NFT_LIVE_REFRESH_MS 250

enum nft_set_role { NFT_SET_LOCAL, NFT_SET_LINK, NFT_SET_LIVE, NFT_SET_FALLBACK };
enum nft_chain_id {
	NFT_CHAIN_PREROUTING,
	NFT_CHAIN_OUTPUT,
	NFT_CHAIN_FALLBACK_PREROUTING,
	NFT_CHAIN_FALLBACK_OUTPUT,
	NFT_CHAINS
};
enum nft_match { NFT_MATCH_DADDR, NFT_MATCH_SADDR };
/*
 * NOTRACK_IF_BOUND: a full socket bound to this very address (not a
 * wildcard) exists; NOTRACK_IF_CONNECTED: any socket of ours the packet
 * belongs to, including a half-open (SYN_RECV) or TIME_WAIT one, which the
 * kernel's socket expression cannot test for a bound address.
 */
enum nft_action { NFT_NOTRACK_IF_BOUND, NFT_NOTRACK_IF_CONNECTED, NFT_NOTRACK, NFT_DNAT };
/* TCP only: which packets the rule is for. */
enum nft_tcp_syn { NFT_SYN_ANY, NFT_SYN_SET, NFT_SYN_CLEAR };

struct nft_set_plan {
	char name[16];
	int family;               /* AF_INET or AF_INET6 */
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
	enum nft_action action;
	const struct nft_set_plan *map; /* NFT_DNAT: the endpoint map */
};

#define NFT_PLAN_SETS 8
#define NFT_PLAN_RULES 32

struct nft_plan {
	const char *table;
	uint16_t port;
	struct nft_set_plan sets[NFT_PLAN_SETS];
	size_t n_sets;
	struct nft_rule_plan rules[NFT_PLAN_RULES];
	size_t n_rules;
	size_t rules_per_chain[NFT_CHAINS];
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
