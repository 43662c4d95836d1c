/*
 * cluster/index.c — the keys by which derived names find their data:
 * c->endpoints maps an endpoint address to every slice entry holding it
 * (PTR, dashed endpoint names, verified pod names) and a (Service,
 * hostname) pair to every slice's group of entries with that hostname
 * (hostname endpoint names, SRV targets); c->vips maps a ClusterIP to the
 * spec that holds it (its PTR).
 *
 * The keys are nodes inside the snapshots themselves (struct cluster_eps,
 * struct cluster_spec), so an index costs no allocation of its own: 24
 * bytes an entry plus liburcu's buckets. Keys repeat (an address in two
 * slices), so nodes go in with cds_lfht_add and readers walk the
 * duplicates. The writer adds a new snapshot's keys before it replaces the
 * old one and removes the old one's after: a reader may meet both for a
 * moment, and the answers (service.c) tell them apart by the slice's
 * sequence number, which the snapshots of one slice share.
 *
 * A key that two slices of one Service share (an endpoint moving between
 * slices) makes readers look for repeats; svc->shared counts such pairs
 * as keys come and go, so while it is 0 (nearly always) they do not: a
 * headless Service's 10,000 addresses are then written without 10,000
 * lookups.
 */
#include "cluster/internal.h"

#include <string.h>

#include "util/tsan.h"

static size_t family_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

static uint64_t addr_hash(const struct cluster *c, int family, const uint8_t *addr)
{
	uint8_t buf[1 + 16];

	buf[0] = family == AF_INET ? 4 : 6;
	memcpy(buf + 1, addr, family_len(family));
	return cluster_hash(c, buf, 1 + family_len(family));
}

static uint64_t name_hash(const struct cluster *c, const struct cluster_service *svc,
			  const uint8_t *label)
{
	uint8_t buf[1 + sizeof svc + 1 + DNS_MAX_LABEL];

	buf[0] = 'n';
	memcpy(buf + 1, &svc, sizeof svc);
	memcpy(buf + 1 + sizeof svc, label, 1u + label[0]);
	return cluster_hash(c, buf, 1 + sizeof svc + 1u + label[0]);
}

static bool is_addr_node(const struct cluster_ep_node *n)
{
	return n >= n->eps->addr_nodes && n < n->eps->addr_nodes + n->eps->n;
}

static int match_endpoint(struct cds_lfht_node *ht, const void *key)
{
	const struct cluster_ep_node *n = caa_container_of(ht, struct cluster_ep_node, ht);
	const struct cluster_index_iter *k = key;

	TSAN_SUBSCRIBE(n); /* the first read of a key a lookup found */
	const struct cluster_eps *e = n->eps;

	if (is_addr_node(n))
		return k->ip.family == e->family &&
		       memcmp(eps_addr(e, (uint32_t)(n - e->addr_nodes)), k->ip.addr, e->alen) == 0;
	const uint8_t *label = e->labels + e->groups[n - e->name_nodes].label;
	return !k->ip.family && k->svc == e->svc && memcmp(label, k->label, 1u + label[0]) == 0;
}

static int match_vip(struct cds_lfht_node *ht, const void *key)
{
	const struct cluster_vip *v = caa_container_of(ht, struct cluster_vip, ht);

	TSAN_SUBSCRIBE(v); /* the first read of a key a lookup found */
	const struct cluster_ip *ip = &((const struct cluster_index_iter *)key)->ip, *mine = &v->spec->ips[v - v->spec->vips];

	return ip->family == mine->family && memcmp(ip->addr, mine->addr, family_len(ip->family)) == 0;
}

/* ---- writer ------------------------------------------------------------------- */

/* The key of node n, as a lookup would give it. */
static void key_of(const struct cluster_ep_node *n, struct cluster_index_iter *k)
{
	const struct cluster_eps *e = n->eps;

	memset(k, 0, sizeof *k);
	if (is_addr_node(n)) {
		k->ip.family = e->family;
		memcpy(k->ip.addr, eps_addr(e, (uint32_t)(n - e->addr_nodes)), e->alen);
	} else {
		k->svc = e->svc;
		k->label = e->labels + e->groups[n - e->name_nodes].label;
	}
}

/* How many keys like n's other slices of its Service hold. */
static uint32_t others_of(const struct cluster *c, const struct cluster_ep_node *n,
			  uint64_t hash)
{
	struct cluster_index_iter k;
	struct cds_lfht_node *ht;
	uint32_t count = 0;

	key_of(n, &k);
	cds_lfht_lookup(c->endpoints, hash, match_endpoint, &k, &k.it);
	for (; (ht = cds_lfht_iter_get_node(&k.it)); cds_lfht_next_duplicate(c->endpoints,
									     match_endpoint, &k, &k.it)) {
		const struct cluster_eps *t = caa_container_of(ht, struct cluster_ep_node, ht)->eps;
		count += t->svc == n->eps->svc && t->seq != n->eps->seq;
	}
	return count;
}

static uint64_t node_hash(const struct cluster *c, const struct cluster_ep_node *n)
{
	const struct cluster_eps *e = n->eps;

	if (is_addr_node(n))
		return addr_hash(c, e->family, eps_addr(e, (uint32_t)(n - e->addr_nodes)));
	return name_hash(c, e->svc, e->labels + e->groups[n - e->name_nodes].label);
}

static void add_node(struct cluster *c, struct cluster_eps *e, struct cluster_ep_node *n,
		     uint32_t *shared)
{
	uint64_t hash;

	cds_lfht_node_init(&n->ht);
	n->eps = e;
	hash = node_hash(c, n);
	TSAN_PUBLISH(n);
	cds_lfht_add(c->endpoints, hash, &n->ht);
	*shared += others_of(c, n, hash);
}

void cluster_index_add_eps(struct cluster *c, struct cluster_eps *e)
{
	uint32_t shared = 0;

	for (uint32_t i = 0; i < e->n; i++)
		add_node(c, e, &e->addr_nodes[i], &shared);
	for (uint32_t g = 0; g < e->n_groups; g++)
		add_node(c, e, &e->name_nodes[g], &shared);
	c->endpoint_keys += e->n + e->n_groups;
	if (shared)
		atomic_fetch_add(&e->svc->shared, shared);
}

void cluster_index_del_eps(struct cluster *c, struct cluster_eps *e)
{
	uint32_t shared = 0;

	for (uint32_t i = 0; i < e->n; i++) {
		shared += others_of(c, &e->addr_nodes[i], node_hash(c, &e->addr_nodes[i]));
		cds_lfht_del(c->endpoints, &e->addr_nodes[i].ht);
	}
	for (uint32_t g = 0; g < e->n_groups; g++) {
		shared += others_of(c, &e->name_nodes[g], node_hash(c, &e->name_nodes[g]));
		cds_lfht_del(c->endpoints, &e->name_nodes[g].ht);
	}
	c->endpoint_keys -= e->n + e->n_groups;
	if (shared)
		atomic_fetch_sub(&e->svc->shared, shared);
}

void cluster_index_add_spec(struct cluster *c, struct cluster_spec *s)
{
	for (uint8_t i = 0; i < s->n_ips; i++) {
		cds_lfht_node_init(&s->vips[i].ht);
		s->vips[i].spec = s;
		TSAN_PUBLISH(&s->vips[i]);
		cds_lfht_add(c->vips, addr_hash(c, s->ips[i].family, s->ips[i].addr), &s->vips[i].ht);
	}
	c->vip_keys += s->n_ips;
}

void cluster_index_del_spec(struct cluster *c, struct cluster_spec *s)
{
	for (uint8_t i = 0; i < s->n_ips; i++)
		cds_lfht_del(c->vips, &s->vips[i].ht);
	c->vip_keys -= s->n_ips;
}

/* ---- reader ------------------------------------------------------------------- */

/* The entry or group the iterator is at; false past the end. */
static bool at_entry(struct cluster_index_iter *it, const struct cluster_eps **eps, uint32_t *i)
{
	struct cds_lfht_node *ht = cds_lfht_iter_get_node(&it->it);
	const struct cluster_ep_node *n;

	if (!ht)
		return false;
	n = caa_container_of(ht, struct cluster_ep_node, ht);
	*eps = n->eps;
	*i = (uint32_t)(is_addr_node(n) ? n - n->eps->addr_nodes : n - n->eps->name_nodes);
	return true;
}

bool cluster_addr_first(const struct cluster *c, const struct cluster_ip *ip,
			struct cluster_index_iter *it, const struct cluster_eps **eps, uint32_t *i)
{
	it->ip = *ip;
	cds_lfht_lookup(c->endpoints, addr_hash(c, ip->family, ip->addr), match_endpoint, it,
			&it->it);
	return at_entry(it, eps, i);
}

bool cluster_addr_next(const struct cluster *c, struct cluster_index_iter *it,
		       const struct cluster_eps **eps, uint32_t *i)
{
	cds_lfht_next_duplicate(c->endpoints, match_endpoint, it, &it->it);
	return at_entry(it, eps, i);
}

bool cluster_name_first(const struct cluster *c, const struct cluster_service *s,
			const uint8_t *label, struct cluster_index_iter *it,
			const struct cluster_eps **eps, const struct cluster_group **g)
{
	uint32_t i;

	it->ip.family = 0;
	it->svc = s;
	it->label = label;
	cds_lfht_lookup(c->endpoints, name_hash(c, s, label), match_endpoint, it, &it->it);
	if (!at_entry(it, eps, &i))
		return false;
	*g = &(*eps)->groups[i];
	return true;
}

bool cluster_name_next(const struct cluster *c, struct cluster_index_iter *it,
		       const struct cluster_eps **eps, const struct cluster_group **g)
{
	uint32_t i;

	cds_lfht_next_duplicate(c->endpoints, match_endpoint, it, &it->it);
	if (!at_entry(it, eps, &i))
		return false;
	*g = &(*eps)->groups[i];
	return true;
}

const struct cluster_spec *cluster_vip_first(const struct cluster *c, const struct cluster_ip *ip,
					     struct cluster_index_iter *it)
{
	struct cds_lfht_node *ht;

	it->ip = *ip;
	cds_lfht_lookup(c->vips, addr_hash(c, ip->family, ip->addr), match_vip, it, &it->it);
	ht = cds_lfht_iter_get_node(&it->it);
	return ht ? caa_container_of(ht, struct cluster_vip, ht)->spec : NULL;
}

const struct cluster_spec *cluster_vip_next(const struct cluster *c, struct cluster_index_iter *it)
{
	struct cds_lfht_node *ht;

	cds_lfht_next_duplicate(c->vips, match_vip, it, &it->it);
	ht = cds_lfht_iter_get_node(&it->it);
	return ht ? caa_container_of(ht, struct cluster_vip, ht)->spec : NULL;
}
