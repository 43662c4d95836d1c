/*
 * query/allow.c — listen.allow: which client networks may query.
 *
 * In intercept mode the cluster DNS ClusterIP is a local address of the
 * node, reachable from anything that can route to it; and a node's
 * link-local address answers whatever reaches it. So every query is
 * checked against a short list of networks (the config's, or the private
 * and local ranges pods and the node's own processes use), and a client
 * outside them gets REFUSED. The list is part of the RCU-published answer
 * sources, so a reload swaps it whole.
 *
 * Cost: a linear walk of at most QUERY_ALLOW_MAX prefixes of the client's
 * family, one masked compare each (two for IPv6); no allocation, no lock.
 */
#include "query/internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* The first bits of a big-endian address, the rest cleared: mask of prefix bits. */
static uint64_t mask64(unsigned prefix)
{
	return prefix == 0 ? 0 : prefix >= 64 ? UINT64_MAX : ~(UINT64_MAX >> prefix);
}

static uint64_t load64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void add_net(struct query_sources *s, const struct config_cidr *c)
{
	if (c->ip.family == AF_INET) {
		struct query_net4 *n = &s->allow4[s->n_allow4++];
		n->mask = (uint32_t)(mask64(c->prefix) >> 32);
		n->net = ntohl(c->ip.v4.s_addr) & n->mask;
	} else {
		struct query_net6 *n = &s->allow6[s->n_allow6++];
		n->mask[0] = mask64(c->prefix);
		n->mask[1] = mask64(c->prefix > 64 ? c->prefix - 64u : 0);
		n->net[0] = load64(c->ip.v6.s6_addr) & n->mask[0];
		n->net[1] = load64(c->ip.v6.s6_addr + 8) & n->mask[1];
	}
}

int query_allow_build(struct query_sources *s, const struct config *cfg, char *err,
		      size_t errlen)
{
	struct config_cidr c;
	const char *why;

	s->n_allow4 = s->n_allow6 = 0;
	if (cfg->listen.n_allow > QUERY_ALLOW_MAX) {
		snprintf(err, errlen, "listen.allow: at most %d networks (got %zu)",
			 QUERY_ALLOW_MAX, cfg->listen.n_allow);
		return -1;
	}
	for (size_t i = 0; i < cfg->listen.n_allow; i++)
		add_net(s, &cfg->listen.allow[i]);
	for (size_t i = 0; cfg->listen.n_allow == 0 && config_default_allow[i]; i++) {
		if (config_value_cidr(config_default_allow[i], &c, &why) < 0) {
			snprintf(err, errlen, "internal error: default network %s %s",
				 config_default_allow[i], why);
			return -1;
		}
		add_net(s, &c);
	}
	return 0;
}

bool query_client_allowed(const struct query_sources *s, const struct sockaddr_storage *peer)
{
	if (!peer) /* ctl lookup: the operator's own question */
		return true;
	if (peer->ss_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)peer)->sin_addr.s_addr);
		for (unsigned i = 0; i < s->n_allow4; i++)
			if ((a & s->allow4[i].mask) == s->allow4[i].net)
				return true;
	} else if (peer->ss_family == AF_INET6) {
		const uint8_t *b = ((const struct sockaddr_in6 *)peer)->sin6_addr.s6_addr;
		uint64_t hi = load64(b), lo = load64(b + 8);
		for (unsigned i = 0; i < s->n_allow6; i++)
			if ((hi & s->allow6[i].mask[0]) == s->allow6[i].net[0] &&
			    (lo & s->allow6[i].mask[1]) == s->allow6[i].net[1])
				return true;
	}
	return false;
}
