/*
 * mesh/table.c — the two liburcu hashes: host name -> struct mesh_host
 * (what readers look up) and "ns/name" -> struct mesh_entry (the writer's
 * own lookups, made under the read lock as a reader's).
 *
 * A host node lives while some entry defines it; its list of entries is
 * replaced whole (one entry is stored inline, as a tagged pointer: most
 * hosts have one, and a list would be an allocation each). The writer
 * sizes both tables itself after each change, to at most 4 nodes a bucket,
 * as cluster/table.c does and for its reason: liburcu's own resize thread
 * lags on a busy node.
 */
#include "mesh/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/tsan.h"

#define TABLE_MIN_BUCKETS 256ul

/* The tables' hash of bytes under m's key. */
static uint64_t hash_of(const struct mesh *m, const void *bytes, size_t len)
{
	return dns_siphash13(m->hash_key, bytes, len);
}

/* ---- hosts ------------------------------------------------------------------------ */

static int match_host(struct cds_lfht_node *ht, const void *key)
{
	const struct mesh_host *h = caa_container_of(ht, struct mesh_host, ht);
	const uint8_t *name = key;
	size_t len = dns_name_len(name);

	TSAN_SUBSCRIBE(h);
	return h->len == len && memcmp(h->name, name, len) == 0;
}

const struct mesh_host *mesh_find_host(const struct mesh *m, const uint8_t *name, size_t len)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *ht;

	cds_lfht_lookup(m->hosts, hash_of(m, name, len), match_host, name, &it);
	ht = cds_lfht_iter_get_node(&it);
	return ht ? caa_container_of(ht, struct mesh_host, ht) : NULL;
}

/* Which of m->label_hosts and its mask a host's name counts in. */
static void count_labels(struct mesh *m, const uint8_t *name, int delta)
{
	bool wild = name[0] == 1 && name[1] == '*';
	unsigned labels = 0;
	uint64_t mask = 0;

	for (const uint8_t *p = name; *p; p += 1 + *p)
		labels++;
	if (labels > 63)
		labels = 63;
	m->label_hosts[wild][labels] += (uint32_t)delta;
	for (unsigned i = 0; i < 64; i++)
		if (m->label_hosts[wild][i])
			mask |= 1ull << i;
	atomic_store_explicit(wild ? &m->wild_labels : &m->exact_labels, mask, memory_order_release);
}

struct mesh_host *mesh_host_get(struct mesh *m, const uint8_t *name, size_t len)
{
	struct mesh_host *h = (struct mesh_host *)mesh_find_host(m, name, len);

	if (h)
		return h;
	if (!(h = calloc(1, sizeof *h + len)))
		return NULL;
	cds_lfht_node_init(&h->ht);
	h->len = (uint8_t)len;
	memcpy(h->name, name, len);
	TSAN_PUBLISH(h);
	cds_lfht_add(m->hosts, hash_of(m, name, len), &h->ht);
	atomic_fetch_add(&m->n_hosts, 1);
	count_labels(m, name, +1);
	return h;
}

static void free_host_now(struct rcu_head *head)
{
	TSAN_GRACE_ACQUIRE();
	free(caa_container_of(head, struct mesh_host, rcu));
}

static void free_defs_now(struct rcu_head *head)
{
	TSAN_GRACE_ACQUIRE();
	free(caa_container_of(head, struct mesh_defs, rcu));
}

/* Hand what readers may still hold to free_fn after a grace period. */
static void retire(struct rcu_head *head, void (*free_fn)(struct rcu_head *))
{
	TSAN_GRACE_RELEASE();
	urcu_memb_call_rcu(head, free_fn);
}

void mesh_host_set_defs(struct mesh *m, struct mesh_host *h, uintptr_t defs)
{
	uintptr_t old = atomic_load_explicit(&h->defs, memory_order_relaxed);

	if (defs && !(defs & 1))
		TSAN_PUBLISH((void *)defs);
	atomic_store_explicit(&h->defs, defs, memory_order_release);
	if (old && !(old & 1))
		retire(&((struct mesh_defs *)old)->rcu, free_defs_now);
	if (defs)
		return;
	if (cds_lfht_del(m->hosts, &h->ht) == 0) {
		atomic_fetch_sub(&m->n_hosts, 1);
		count_labels(m, h->name, -1);
		retire(&h->rcu, free_host_now);
	}
}

/* ---- entries ------------------------------------------------------------------------ */

static int match_entry(struct cds_lfht_node *ht, const void *key)
{
	return strcmp(caa_container_of(ht, struct mesh_entry, ht)->key, key) == 0;
}

const struct mesh_entry *mesh_find_entry(const struct mesh *m, const char *key)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *ht;

	cds_lfht_lookup(m->entries, hash_of(m, key, strlen(key)), match_entry, key, &it);
	ht = cds_lfht_iter_get_node(&it);
	return ht ? caa_container_of(ht, struct mesh_entry, ht) : NULL;
}

static void free_entry_now(struct rcu_head *head)
{
	TSAN_GRACE_ACQUIRE();
	free(caa_container_of(head, struct mesh_entry, rcu));
}

void mesh_entries_replace(struct mesh *m, const struct mesh_entry *old, struct mesh_entry *e)
{
	struct mesh_entry *o = (struct mesh_entry *)old;

	if (e) {
		cds_lfht_node_init(&e->ht);
		TSAN_PUBLISH(e);
		/* the one writer: the node replaced is old's */
		if (!cds_lfht_add_replace(m->entries, hash_of(m, e->key, strlen(e->key)),
					  match_entry, e->key, &e->ht))
			atomic_fetch_add(&m->n_entries, 1);
	} else if (o && cds_lfht_del(m->entries, &o->ht) == 0) {
		atomic_fetch_sub(&m->n_entries, 1);
	}
	if (o)
		retire(&o->rcu, free_entry_now);
}

/* ---- sizing -------------------------------------------------------------------------- */

struct cds_lfht *mesh_table_new(unsigned long *buckets)
{
	*buckets = TABLE_MIN_BUCKETS;
	return cds_lfht_new_flavor(TABLE_MIN_BUCKETS, TABLE_MIN_BUCKETS, 0, 0, &urcu_memb_flavor,
				   NULL);
}

/* Grow when chains would pass 4 nodes, shrink when under 1. */
static void size_table(struct cds_lfht *t, unsigned long *buckets, size_t nodes)
{
	unsigned long want = TABLE_MIN_BUCKETS;

	while (want * 4 < nodes)
		want <<= 1;
	if (want <= *buckets && want >= *buckets / 4)
		return;
	cds_lfht_resize(t, want);
	*buckets = want;
}

void mesh_fit_tables(struct mesh *m)
{
	size_table(m->hosts, &m->buckets[0], atomic_load_explicit(&m->n_hosts, memory_order_relaxed));
	size_table(m->entries, &m->buckets[1],
		   atomic_load_explicit(&m->n_entries, memory_order_relaxed));
}

void mesh_tables_destroy(struct mesh *m)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;

	urcu_memb_read_lock();
	if (m->hosts)
		cds_lfht_for_each(m->hosts, &it, node) {
			struct mesh_host *h = caa_container_of(node, struct mesh_host, ht);
			uintptr_t d = atomic_load_explicit(&h->defs, memory_order_relaxed);
			cds_lfht_del(m->hosts, node);
			if (d && !(d & 1))
				free((void *)d);
			free(h);
		}
	if (m->entries)
		cds_lfht_for_each(m->entries, &it, node) {
			cds_lfht_del(m->entries, node);
			free(caa_container_of(node, struct mesh_entry, ht));
		}
	urcu_memb_read_unlock();
	if (m->hosts)
		cds_lfht_destroy(m->hosts, NULL);
	if (m->entries)
		cds_lfht_destroy(m->entries, NULL);
}
