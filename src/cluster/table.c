/*
 * cluster/table.c — the lock-free name table: owner name -> one immutable
 * node holding every record of that name, or a Service (whose records are
 * derived from it, service.c).
 *
 * liburcu's resizable hash (cds_lfht) keyed by the lower-cased wire name:
 * readers look up under the RCU read lock with no lock and no allocation;
 * the single writer replaces a whole node at once (cds_lfht_add_replace),
 * so a reader sees either the old records of a name or the new ones, never
 * a mix, and the old node is freed by call_rcu after every reader that
 * might hold it has moved on.
 *
 * The writer sizes this table and the indexes itself (cluster_fit_tables),
 * after each change, to 2 to 4 nodes a bucket. liburcu's automatic resize
 * runs on its own worker thread and grows a table only once chains average
 * 8 nodes: during a first sync, with the API client and the writer keeping
 * both cores of a small node busy, that thread lagged and chains grew to
 * dozens of nodes, which every insert and lookup walks (over half the
 * writer's time at 500,000 endpoints).
 */
#include "cluster/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/tsan.h"

static int match_owner(struct cds_lfht_node *ht, const void *key)
{
	const struct cluster_named *n = caa_container_of(ht, struct cluster_named, ht);
	const uint8_t *name = key;
	size_t len = dns_name_len(name);

	TSAN_SUBSCRIBE(n); /* the first read of an entry a lookup found */
	return n->owner_len == len && memcmp(cluster_named_owner(n), name, len) == 0;
}

const struct cluster_named *cluster_find(const struct cluster *c, const uint8_t *name, size_t len)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *ht;

	cds_lfht_lookup(c->ht, cluster_hash(c, name, len), match_owner, name, &it);
	ht = cds_lfht_iter_get_node(&it);
	return ht ? caa_container_of(ht, struct cluster_named, ht) : NULL;
}

const struct cluster_node *cluster_find_node(const struct cluster *c, const uint8_t *name,
					     size_t len)
{
	const struct cluster_named *n = cluster_find(c, name, len);

	return n && n->kind == NAMED_RECORDS ? (const struct cluster_node *)n : NULL;
}

struct cluster_service *cluster_find_service(const struct cluster *c, const uint8_t *name,
					     size_t len)
{
	const struct cluster_named *n = cluster_find(c, name, len);

	return n && n->kind == NAMED_SERVICE ? (struct cluster_service *)n : NULL;
}

bool cluster_node_next(const struct cluster_node *n, size_t *pos, struct cluster_rr *rr)
{
	const uint8_t *p = n->data + n->h.owner_len + *pos;

	if (*pos + 4 > n->rr_len)
		return false;
	memcpy(&rr->type, p, 2);
	memcpy(&rr->rdlen, p + 2, 2);
	rr->rdata = p + 4;
	*pos += 4 + (size_t)rr->rdlen;
	return true;
}

static void free_named(struct rcu_head *head)
{
	TSAN_GRACE_ACQUIRE();
	free(caa_container_of(head, struct cluster_named, rcu));
}

void cluster_retire(struct rcu_head *head, void (*free_fn)(struct rcu_head *))
{
	TSAN_GRACE_RELEASE();
	urcu_memb_call_rcu(head, free_fn);
}

int cluster_put(struct cluster *c, const uint8_t *owner, size_t owner_len,
		const uint8_t *rrs, size_t rr_len)
{
	const struct cluster_named *cur = cluster_find(c, owner, owner_len);
	const struct cluster_node *same = cur && cur->kind == NAMED_RECORDS ? (const void *)cur : NULL;
	struct cluster_node *n;
	struct cds_lfht_node *old;

	/* An unchanged name keeps its node: no churn for readers or call_rcu.
	 * (A name without records comes with rrs NULL, which memcmp must not see.) */
	if (same && same->rr_len == rr_len &&
	    (rr_len == 0 || memcmp(same->data + owner_len, rrs, rr_len) == 0))
		return 0;
	if (cur && !same)
		return -1; /* a Service's name: never a records node's (their shapes differ) */
	n = malloc(sizeof *n + owner_len + rr_len);
	if (!n)
		return -1;
	cds_lfht_node_init(&n->h.ht);
	n->h.kind = NAMED_RECORDS;
	n->h.owner_len = (uint8_t)owner_len;
	n->rr_len = (uint32_t)rr_len;
	memcpy(n->data, owner, owner_len);
	if (rr_len)
		memcpy(n->data + owner_len, rrs, rr_len);
	TSAN_PUBLISH(n);
	old = cds_lfht_add_replace(c->ht, cluster_hash(c, owner, owner_len), match_owner,
				   n->data, &n->h.ht);
	if (old)
		cluster_retire(&caa_container_of(old, struct cluster_named, ht)->rcu, free_named);
	else
		atomic_fetch_add(&c->n_names, 1);
	return 0;
}

void cluster_del(struct cluster *c, const uint8_t *owner, size_t owner_len)
{
	struct cluster_named *n = (struct cluster_named *)cluster_find(c, owner, owner_len);

	if (n && n->kind == NAMED_RECORDS && cds_lfht_del(c->ht, &n->ht) == 0) {
		atomic_fetch_sub(&c->n_names, 1);
		cluster_retire(&n->rcu, free_named);
	}
}

void cluster_add_service(struct cluster *c, struct cluster_service *s)
{
	cds_lfht_node_init(&s->h.ht);
	TSAN_PUBLISH(s);
	cds_lfht_add(c->ht, cluster_hash(c, s->owner, s->h.owner_len), &s->h.ht);
	atomic_fetch_add(&c->n_names, 1);
}

void cluster_del_service(struct cluster *c, struct cluster_service *s)
{
	if (cds_lfht_del(c->ht, &s->h.ht) == 0)
		atomic_fetch_sub(&c->n_names, 1);
}

/* A table's first and smallest size, in buckets (16 bytes each). */
#define TABLE_MIN_BUCKETS 1024ul

struct cds_lfht *cluster_table_new(unsigned long *buckets)
{
	*buckets = TABLE_MIN_BUCKETS;
	return cds_lfht_new_flavor(TABLE_MIN_BUCKETS, TABLE_MIN_BUCKETS, 0, 0, &urcu_memb_flavor,
				   NULL);
}

/* The buckets for n nodes: a power of two with at most 4 nodes each. */
static unsigned long buckets_for(size_t n)
{
	unsigned long b = TABLE_MIN_BUCKETS;

	while (b * 4 < n)
		b <<= 1;
	return b;
}

/* Grow t as soon as its chains would average over 4 nodes; shrink it once
 * they average under 1 (not sooner, so a table does not flap). A resize
 * runs here, on the writer, which holds no read lock now: a shrink waits
 * for a grace period. */
static void fit(struct cds_lfht *t, unsigned long *buckets, size_t nodes)
{
	unsigned long want = buckets_for(nodes);

	if (want > *buckets || want < *buckets / 4) {
		cds_lfht_resize(t, want);
		*buckets = want;
	}
}

void cluster_fit_tables(struct cluster *c)
{
	fit(c->ht, &c->buckets[0], atomic_load_explicit(&c->n_names, memory_order_relaxed));
	fit(c->endpoints, &c->buckets[1], c->endpoint_keys);
	fit(c->vips, &c->buckets[2], c->vip_keys);
	fit(c->slices, &c->buckets[3], atomic_load_explicit(&c->n_slices, memory_order_relaxed));
}

int cluster_rrbuf_add(struct cluster_rrbuf *b, uint16_t type, const uint8_t *rdata, uint16_t rdlen)
{
	size_t need = b->len + 4 + rdlen;

	if (need > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 256;
		while (cap < need)
			cap *= 2;
		uint8_t *d = realloc(b->data, cap);
		if (!d)
			return -1;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, &type, 2);
	memcpy(b->data + b->len + 2, &rdlen, 2);
	memcpy(b->data + b->len + 4, rdata, rdlen);
	b->len = need;
	return 0;
}

void cluster_table_destroy(struct cds_lfht *ht, void (*free_entry)(struct cds_lfht_node *))
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;

	urcu_memb_read_lock();
	cds_lfht_for_each(ht, &it, node) {
		cds_lfht_del(ht, node);
		if (free_entry)
			free_entry(node); /* no reader is left to see it */
	}
	urcu_memb_read_unlock();
	cds_lfht_destroy(ht, NULL);
}
