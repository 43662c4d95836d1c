/*
 * nft/plan.c — see plan.h for the table and why it looks like this.
 */
#include "nft/plan.h"
#include "util/hash.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* raw and dstnat, as nft names them. */
#define PRIORITY_RAW (-300)
#define PRIORITY_DSTNAT (-100)

const struct nft_chain_plan nft_chains[NFT_CHAINS] = {
	[NFT_CHAIN_PREROUTING] = {"prerouting", false, false, PRIORITY_RAW},
	[NFT_CHAIN_OUTPUT] = {"output", false, true, PRIORITY_RAW},
	[NFT_CHAIN_FALLBACK_PREROUTING] = {"fallback-prerouting", true, false, PRIORITY_DSTNAT},
	[NFT_CHAIN_FALLBACK_OUTPUT] = {"fallback-output", true, true, PRIORITY_DSTNAT},
};

static const char *const role_names[] = {
	[NFT_SET_LOCAL] = "local", [NFT_SET_LINK] = "link",
	[NFT_SET_LIVE] = "live", [NFT_SET_FALLBACK] = "fallback",
	[NFT_SET_FLOWS] = "flows", [NFT_SET_INSTANCES] = "instances",
};

/* Append the IPs of family from list to the set (storage is big enough). */
static void add_ips(struct nft_set_plan *s, const struct config_ip *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (list[i].family == s->family)
			s->ips[s->n_ips++] = &list[i];
}

static void fill_set(struct nft_set_plan *s, const struct config *cfg,
		     const struct config_ip *endpoints, size_t n_endpoints)
{
	switch (s->role) {
	case NFT_SET_LOCAL:
	case NFT_SET_LIVE:
		add_ips(s, cfg->listen.addresses, cfg->listen.n_addresses);
		add_ips(s, cfg->nftables.intercept, cfg->nftables.n_intercept);
		break;
	case NFT_SET_LINK:
		add_ips(s, cfg->listen.addresses, cfg->listen.n_addresses);
		break;
	case NFT_SET_FALLBACK:
		add_ips(s, endpoints, n_endpoints);
		break;
	case NFT_SET_FLOWS:
	case NFT_SET_INSTANCES:
		break; /* written by the rules, and by each process itself */
	}
}

static struct nft_rule_plan *add_rule(struct nft_plan *p, enum nft_chain_id chain, int family,
				      uint8_t proto, enum nft_match match,
				      enum nft_set_role role, enum nft_action action)
{
	struct nft_rule_plan *r = &p->rules[p->n_rules++];

	*r = (struct nft_rule_plan){
		.chain = chain,
		.family = family,
		.l4proto = proto,
		.match = match,
		.set = nft_plan_set(p, role, family),
		.syn = NFT_SYN_ANY,
		.action = action,
		.map = action == NFT_DNAT ? nft_plan_set(p, NFT_SET_FALLBACK, family) : NULL,
	};
	p->rules_per_chain[chain]++;
	return r;
}

/* TCP: the SYN (a new connection: the same test as a datagram) and the rest. */
static void add_tcp_rules(struct nft_plan *p, enum nft_chain_id chain, int family, bool bound)
{
	struct nft_rule_plan *r;

	r = add_rule(p, chain, family, IPPROTO_TCP, NFT_MATCH_DADDR, NFT_SET_LIVE, NFT_NOTRACK);
	r->syn = NFT_SYN_SET;
	r->bound = bound;
	r->flow = NFT_FLOW_START;
	r->flows = nft_plan_set(p, NFT_SET_FLOWS, family);
	/* Not the heartbeat, not a socket: the connection's SYN decided. */
	r = add_rule(p, chain, family, IPPROTO_TCP, NFT_MATCH_DADDR, NFT_SET_LOCAL, NFT_NOTRACK);
	r->syn = NFT_SYN_CLEAR;
	r->flow = NFT_FLOW_KNOWN;
	r->flows = nft_plan_set(p, NFT_SET_FLOWS, family);
}

static void add_rules(struct nft_plan *p, int family)
{
	static const uint8_t protos[] = {IPPROTO_UDP, IPPROTO_TCP};
	bool fallback = nft_plan_set(p, NFT_SET_FALLBACK, family)->n_ips > 0;

	/* Pods: the heartbeat (proof of progress) and a socket bound to the address. */
	add_rule(p, NFT_CHAIN_PREROUTING, family, IPPROTO_UDP, NFT_MATCH_DADDR, NFT_SET_LIVE,
		 NFT_NOTRACK)->bound = true;
	add_tcp_rules(p, NFT_CHAIN_PREROUTING, family, true);
	/* Host clients: the heartbeat alone (here the socket test sees theirs). */
	add_rule(p, NFT_CHAIN_OUTPUT, family, IPPROTO_UDP, NFT_MATCH_DADDR, NFT_SET_LIVE,
		 NFT_NOTRACK);
	add_tcp_rules(p, NFT_CHAIN_OUTPUT, family, false);
	for (size_t i = 0; i < sizeof protos; i++) {
		uint8_t proto = protos[i];

		/* Our replies. */
		add_rule(p, NFT_CHAIN_OUTPUT, family, proto, NFT_MATCH_SADDR, NFT_SET_LOCAL,
			 NFT_NOTRACK);
		if (!fallback)
			continue;
		add_rule(p, NFT_CHAIN_FALLBACK_PREROUTING, family, proto, NFT_MATCH_DADDR,
			 NFT_SET_LINK, NFT_DNAT);
		add_rule(p, NFT_CHAIN_FALLBACK_OUTPUT, family, proto, NFT_MATCH_DADDR,
			 NFT_SET_LINK, NFT_DNAT);
	}
}

/* A change of anything we install changes the comment on every rule. */
static void fingerprint(struct nft_plan *p)
{
	uint64_t h = FNV1A_SEED;
	char port[8];

	h = fnv1a(h, p->table, strlen(p->table) + 1);
	snprintf(port, sizeof port, "%u", p->port);
	h = fnv1a(h, port, strlen(port) + 1);
	h = fnv1a(h, &p->flow_timeout_ms, sizeof p->flow_timeout_ms);
	for (size_t i = 0; i < p->n_sets; i++) {
		const struct nft_set_plan *s = &p->sets[i];

		h = fnv1a(h, s->name, strlen(s->name) + 1);
		for (size_t j = 0; j < s->n_ips; j++)
			h = fnv1a(h, s->ips[j]->text, strlen(s->ips[j]->text) + 1);
	}
	snprintf(p->comment, sizeof p->comment, "localdns %08x", (uint32_t)(h ^ (h >> 32)));
}

int nft_plan_build(struct nft_plan *p, const struct config *cfg,
		   const struct config_ip *endpoints, size_t n_endpoints)
{
	static const int families[] = {AF_INET, AF_INET6};
	size_t per_family = config_served_count(cfg) + n_endpoints;
	size_t used = 0;

	memset(p, 0, sizeof *p);
	p->table = cfg->nftables.table;
	p->port = cfg->listen.port;
	p->flow_timeout_ms = cfg->listen.tcp_idle_timeout_ms + NFT_FLOW_MARGIN_MS;
	/* Each address lands in at most one set per role (flows and instances: none). */
	p->storage = calloc(4 * per_family + 1, sizeof *p->storage);
	if (!p->storage)
		return -1;
	for (size_t f = 0; f < 2; f++)
		for (int role = NFT_SET_LOCAL; role <= NFT_SET_FLOWS; role++) {
			struct nft_set_plan *s = &p->sets[p->n_sets++];

			snprintf(s->name, sizeof s->name, "%s%c", role_names[role],
				 families[f] == AF_INET ? '4' : '6');
			s->family = families[f];
			s->role = (enum nft_set_role)role;
			s->ips = p->storage + used;
			fill_set(s, cfg, endpoints, n_endpoints);
			used += s->n_ips;
		}
	p->sets[p->n_sets++] = (struct nft_set_plan){.name = "instances",
						     .role = NFT_SET_INSTANCES,
						     .ips = p->storage + used};
	for (size_t f = 0; f < 2; f++)
		add_rules(p, families[f]);
	fingerprint(p);
	return 0;
}

void nft_plan_free(struct nft_plan *p)
{
	free(p->storage);
	p->storage = NULL;
}

const struct nft_set_plan *nft_plan_set(const struct nft_plan *p, enum nft_set_role role,
					int family)
{
	for (size_t i = 0; i < p->n_sets; i++)
		if (p->sets[i].role == role && p->sets[i].family == family)
			return &p->sets[i];
	return NULL;
}
