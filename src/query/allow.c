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
 * Cost: a linear walk of at most QUERY_ALLOW_MAX prefixes, a few masked
 * byte compares each; no allocation, no lock.
 */
#include "query/internal.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static void add_net(struct query_sources *s, const struct config_cidr *c)
{
	struct query_net *n = &s->allow[s->n_allow++];

	n->family = (uint8_t)c->ip.family;
	n->prefix = c->prefix;
	memcpy(n->addr, c->ip.family == AF_INET ? (const void *)&c->ip.v4 : (const void *)&c->ip.v6,
	       c->ip.family == AF_INET ? 4 : 16);
}

int query_allow_build(struct query_sources *s, const struct config *cfg, char *err,
		      size_t errlen)
{
	struct config_cidr c;
	const char *why;

	s->n_allow = 0;
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

static bool in_net(const struct query_net *n, const uint8_t *addr)
{
	unsigned whole = n->prefix / 8, rest = n->prefix % 8;

	if (memcmp(n->addr, addr, whole) != 0)
		return false;
	return rest == 0 || ((n->addr[whole] ^ addr[whole]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

bool query_client_allowed(const struct query_sources *s, const struct sockaddr_storage *peer)
{
	const uint8_t *addr;

	if (!peer) /* ctl lookup: the operator's own question */
		return true;
	if (peer->ss_family == AF_INET)
		addr = (const uint8_t *)&((const struct sockaddr_in *)peer)->sin_addr;
	else if (peer->ss_family == AF_INET6)
		addr = (const uint8_t *)&((const struct sockaddr_in6 *)peer)->sin6_addr;
	else
		return false;
	for (unsigned i = 0; i < s->n_allow; i++)
		if (s->allow[i].family == peer->ss_family && in_net(&s->allow[i], addr))
			return true;
	return false;
}
