/*
 * mesh/model.c — ServiceEntries in, published entries out: the one writer
 * (the Kubernetes client's thread), and the table's life.
 *
 * An added or changed ServiceEntry is parsed into a draft (parse.c); a
 * headless one with a workloadSelector joins that selector (workloads.c),
 * whose current Pods and WorkloadEntries give its addresses; the draft is
 * then published in the old entry's place (entries.c). Every change is
 * visible to readers as soon as it is made, as in cluster/.
 */
#include "mesh/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "log/log.h"

static void change_begin(void)
{
	urcu_memb_read_lock();
}

static void change_end(struct mesh *m)
{
	urcu_memb_read_unlock();
	mesh_fit_tables(m);
}

/* The selector d's entry uses (NULL: none), joined; *failed when out of memory. */
static struct mesh_selector *join_selector(struct mesh *m, const struct mesh_draft *d,
					   bool *failed)
{
	char ns[64];

	*failed = false;
	if (!d->selector)
		return NULL;
	memcpy(ns, d->ns + 1, d->ns[0]);
	ns[d->ns[0]] = '\0';
	struct mesh_selector *s = mesh_selector_use(m, ns, d->selector, d->pairs, d->pairs_len,
						    d->key);
	*failed = !s;
	return s;
}

void mesh_entry_upsert(struct mesh *m, const struct kube_json *se)
{
	struct mesh_draft d;
	struct mesh_selector *sel;
	struct mesh_ip *ips = NULL;
	size_t n_ips = 0;
	bool failed;

	if (!mesh_parse_entry(se, &d)) {
		mesh_draft_free(&d);
		return;
	}
	change_begin();
	const struct mesh_entry *old = mesh_find_entry(m, d.key);
	/* read now: once replaced, old is for readers only (until its grace period) */
	struct mesh_selector *old_sel = old ? old->selector : NULL;
	sel = join_selector(m, &d, &failed);
	if (!failed && sel && mesh_selector_addresses(m, sel, &ips, &n_ips) < 0)
		failed = true;
	if (failed || !mesh_entry_publish(m, old, &d, sel, sel ? ips : d.ips,
					  sel ? n_ips : d.n_ips)) {
		log_error("out of memory; serviceentry not updated", "serviceentry", d.key);
		if (sel && sel != old_sel)
			mesh_selector_leave(m, sel, d.key);
	} else if (old_sel && old_sel != sel) {
		mesh_selector_leave(m, old_sel, d.key);
	}
	change_end(m);
	free(ips);
	mesh_draft_free(&d);
}

void mesh_entry_remove(struct mesh *m, const char *ns, const char *name)
{
	char key[512];
	const struct mesh_entry *old;

	if (snprintf(key, sizeof key, "%s/%s", ns, name) >= (int)sizeof key)
		return;
	change_begin();
	if ((old = mesh_find_entry(m, key))) {
		struct mesh_selector *sel = old->selector;
		mesh_entry_unpublish(m, old);
		if (sel)
			mesh_selector_leave(m, sel, key);
	}
	change_end(m);
}

void mesh_bind(struct mesh *m, const struct mesh_watcher *w)
{
	m->watcher = *w;
	m->bound = true;
	for (struct mesh_selector *s = m->selectors; s; s = s->next)
		if (!s->handle)
			s->handle = w->watch(w->ctx, s->ns, s->selector, s);
}

void mesh_stats(const struct mesh *m, struct mesh_stats *out)
{
	*out = (struct mesh_stats){
		.entries = atomic_load(&m->n_entries),
		.hosts = atomic_load(&m->n_hosts),
		.workloads = atomic_load(&m->n_workloads),
		.selectors = atomic_load(&m->n_selectors),
		.pods = atomic_load(&m->n_pods),
	};
}

struct mesh *mesh_new(const struct config *cfg, char *err, size_t errlen)
{
	struct mesh *m = calloc(1, sizeof *m);

	if (!m) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	m->ttl = cfg->mesh.ttl;
	if (getrandom(m->hash_key, sizeof m->hash_key, 0) != (ssize_t)sizeof m->hash_key) {
		snprintf(err, errlen, "cannot key the mesh table: %s", strerror(errno));
		free(m);
		return NULL;
	}
	m->hosts = mesh_table_new(&m->buckets[0]);
	m->entries = mesh_table_new(&m->buckets[1]);
	m->workloads = lh_kchar_table_new(64, NULL);
	if (!m->hosts || !m->entries || !m->workloads) {
		mesh_free(m);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	return m;
}

void mesh_free(struct mesh *m)
{
	if (!m)
		return;
	urcu_memb_barrier(); /* run the call_rcu frees still queued */
	mesh_workloads_free(m);
	mesh_tables_destroy(m);
	free(m);
}
