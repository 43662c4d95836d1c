/*
 * mesh/workloads.c — the endpoints of headless entries (resolution NONE
 * with a workloadSelector): the selectors, the Pods each one's watch
 * delivers, and the WorkloadEntries; writer only.
 *
 * A selector is one (namespace, labels) pair, shared by every headless
 * entry that has it, and one label-selected watch of that namespace's Pods
 * (mesh_bind's watcher): the API server picks the Pods, wherever they run,
 * and nothing else of the cluster's Pods is read. WorkloadEntries are all
 * watched (few, and Istio's own); a selector picks those of its namespace
 * whose labels (spec.labels, over which metadata.labels win, as Istio
 * merges them) hold all of its pairs. An entry's addresses are those of
 * its selector's ready Pods and healthy WorkloadEntries with an IP, sorted
 * and distinct; any change to one of them gives each entry of that
 * selector a new snapshot (entries.c). There are few selectors and they
 * change rarely, so they are a list.
 */
#include "mesh/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"

/* ---- selectors --------------------------------------------------------------------- */

static void free_pod(struct mesh_pod *p)
{
	free(p->key);
	free(p);
}

static void free_selector(struct mesh *m, struct mesh_selector *s)
{
	struct lh_entry *e, *tmp;

	if (s->pods) {
		lh_foreach_safe(s->pods, e, tmp) {
			atomic_fetch_sub(&m->n_pods, 1);
			free_pod((struct mesh_pod *)lh_entry_v(e));
		}
		lh_table_free(s->pods);
	}
	for (size_t i = 0; i < s->n_users; i++)
		free(s->users[i]);
	free(s->users);
	free(s->ns);
	free(s->selector);
	free(s->pairs);
	free(s);
}

static struct mesh_selector *find_selector(const struct mesh *m, const char *ns,
					   const char *selector)
{
	for (struct mesh_selector *s = m->selectors; s; s = s->next)
		if (strcmp(s->ns, ns) == 0 && strcmp(s->selector, selector) == 0)
			return s;
	return NULL;
}

static struct mesh_selector *new_selector(struct mesh *m, const char *ns, const char *selector,
					  const char *pairs, size_t pairs_len)
{
	struct mesh_selector *s = calloc(1, sizeof *s);

	if (!s || !(s->ns = strdup(ns)) || !(s->selector = strdup(selector)) ||
	    !(s->pairs = malloc(pairs_len ? pairs_len : 1)) ||
	    !(s->pods = lh_kchar_table_new(16, NULL))) {
		if (s)
			free_selector(m, s);
		return NULL;
	}
	memcpy(s->pairs, pairs, pairs_len);
	s->pairs_len = pairs_len;
	if (m->bound)
		s->handle = m->watcher.watch(m->watcher.ctx, ns, selector, s);
	s->next = m->selectors;
	m->selectors = s;
	atomic_fetch_add(&m->n_selectors, 1);
	return s;
}

struct mesh_selector *mesh_selector_use(struct mesh *m, const char *ns, const char *selector,
					const char *pairs, size_t pairs_len, const char *key)
{
	struct mesh_selector *s = find_selector(m, ns, selector);
	char *k = strdup(key), **users;

	for (size_t i = 0; s && i < s->n_users; i++)
		if (strcmp(s->users[i], key) == 0) {
			free(k);
			return s;
		}
	if (!k || (!s && !(s = new_selector(m, ns, selector, pairs, pairs_len))) ||
	    !(users = realloc(s->users, (s->n_users + 1) * sizeof *users))) {
		free(k);
		if (s && !s->n_users)
			mesh_selector_leave(m, s, "");
		return NULL;
	}
	s->users = users;
	s->users[s->n_users++] = k;
	return s;
}

void mesh_selector_leave(struct mesh *m, struct mesh_selector *sel, const char *key)
{
	struct mesh_selector **link = &m->selectors;

	for (size_t i = 0; i < sel->n_users; i++)
		if (strcmp(sel->users[i], key) == 0) {
			free(sel->users[i]);
			sel->users[i] = sel->users[--sel->n_users];
			break;
		}
	if (sel->n_users)
		return;
	while (*link != sel)
		link = &(*link)->next;
	*link = sel->next;
	if (sel->handle)
		m->watcher.unwatch(m->watcher.ctx, sel->handle);
	atomic_fetch_sub(&m->n_selectors, 1);
	free_selector(m, sel);
}

/* ---- addresses ------------------------------------------------------------------- */

/* Whether labels ("k\0v\0...") hold every pair of sel. */
static bool selects(const struct mesh_selector *sel, const char *labels, size_t len)
{
	for (size_t i = 0; i < sel->pairs_len;) {
		const char *k = sel->pairs + i, *v = k + strlen(k) + 1;
		bool found = false;
		for (size_t j = 0; j < len && !found;) {
			const char *lk = labels + j, *lv = lk + strlen(lk) + 1;
			found = strcmp(lk, k) == 0 && strcmp(lv, v) == 0;
			j = (size_t)(lv - labels) + strlen(lv) + 1;
		}
		if (!found)
			return false;
		i = (size_t)(v - sel->pairs) + strlen(v) + 1;
	}
	return true;
}

static bool in_namespace(const struct mesh_workload *w, const char *ns)
{
	return strlen(ns) == w->ns_len && memcmp(w->key, ns, w->ns_len) == 0;
}

static int compare_ips(const void *a, const void *b)
{
	const struct mesh_ip *x = a, *y = b;

	if (x->family != y->family)
		return x->family == AF_INET ? -1 : 1;
	return memcmp(x->addr, y->addr, sizeof x->addr);
}

int mesh_selector_addresses(const struct mesh *m, const struct mesh_selector *sel,
			    struct mesh_ip **ips, size_t *n)
{
	size_t cap = 2 * (size_t)lh_table_length(sel->pods) + (size_t)lh_table_length(m->workloads);
	struct mesh_ip *v = malloc((cap ? cap : 1) * sizeof *v);
	struct lh_entry *e;
	size_t k = 0;

	if (!v)
		return -1;
	lh_foreach(sel->pods, e) {
		const struct mesh_pod *p = lh_entry_v(e);
		for (uint8_t i = 0; i < p->n_ips; i++)
			v[k++] = p->ips[i];
	}
	lh_foreach(m->workloads, e) {
		const struct mesh_workload *w = lh_entry_v(e);
		if (w->ip.family && w->healthy && in_namespace(w, sel->ns) &&
		    selects(sel, w->labels, w->labels_len))
			v[k++] = w->ip;
	}
	qsort(v, k, sizeof *v, compare_ips);
	*n = 0;
	for (size_t i = 0; i < k; i++)
		if (!*n || compare_ips(&v[*n - 1], &v[i]) != 0)
			v[(*n)++] = v[i];
	*ips = v;
	return 0;
}

/* Every entry using sel gets the addresses it has now. */
static void refresh_selector(struct mesh *m, struct mesh_selector *sel)
{
	struct mesh_ip *ips;
	size_t n;

	if (mesh_selector_addresses(m, sel, &ips, &n) < 0) {
		log_error("out of memory; serviceentry endpoints not updated", "selector", sel->selector);
		return;
	}
	for (size_t i = 0; i < sel->n_users; i++) {
		const struct mesh_entry *e = mesh_find_entry(m, sel->users[i]);
		if (e && e->selector == sel)
			mesh_entry_readdress(m, e, ips, n);
	}
	free(ips);
}

/* ---- Pods of a selector ------------------------------------------------------------- */

/* Whether a status (a Pod's, a WorkloadEntry's) holds the condition of this
 * type, and it is True. */
static bool condition_true(const struct kube_json *status, const char *type)
{
	const struct kube_json *conditions = kube_json_get(status, "conditions");

	for (const struct kube_json *c = kube_json_first(conditions); c; c = c->next) {
		const char *t = kube_json_get_text(c, "type");
		const char *st = kube_json_get_text(c, "status");
		if (t && st && strcmp(t, type) == 0)
			return strcmp(st, "True") == 0;
	}
	return false;
}

/* Ready: the Ready condition is True and the Pod neither finished nor going. */
static bool pod_ready(const struct kube_json *pod)
{
	const struct kube_json *status = kube_json_get(pod, "status");
	const char *phase = kube_json_get_text(status, "phase");

	if (kube_json_get(kube_json_get(pod, "metadata"), "deletionTimestamp") ||
	    (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)))
		return false;
	return condition_true(status, "Ready");
}

static uint8_t pod_ips(const struct kube_json *status, struct mesh_ip ips[2])
{
	const struct kube_json *list = kube_json_get(status, "podIPs");
	const char *one = kube_json_get_text(status, "podIP");
	uint8_t n = 0;

	for (const struct kube_json *e = kube_json_first(list); e && n < 2; e = e->next)
		n += mesh_parse_ip(kube_json_get_text(e, "ip") ?: "", &ips[n]);
	if (!kube_json_len(list) && one)
		n += mesh_parse_ip(one, &ips[0]);
	return n;
}

static bool is_selector(const struct mesh *m, const struct mesh_selector *sel)
{
	for (const struct mesh_selector *s = m->selectors; s; s = s->next)
		if (s == sel)
			return true;
	return false;
}

static void change_begin(void)
{
	urcu_memb_read_lock();
}

static void change_end(struct mesh *m)
{
	urcu_memb_read_unlock();
	mesh_fit_tables(m);
}

/*
 * "namespace/name" of a Pod or WorkloadEntry into key: false when either
 * is missing or empty (mesh_parse_entry refuses such a ServiceEntry too:
 * no removal could name it) or the key does not fit.
 */
static bool object_key(const struct kube_json *meta, char *key, size_t cap)
{
	const char *ns = kube_json_get_text(meta, "namespace");
	const char *name = kube_json_get_text(meta, "name");

	return ns && *ns && name && *name && snprintf(key, cap, "%s/%s", ns, name) < (int)cap;
}

void mesh_pod_upsert(struct mesh *m, void *tag, const struct kube_json *pod)
{
	struct mesh_selector *sel = tag;
	struct mesh_ip ips[2];
	uint8_t n;
	char key[512];
	struct mesh_pod *p = NULL;

	if (!is_selector(m, sel) || !object_key(kube_json_get(pod, "metadata"), key, sizeof key))
		return;
	n = pod_ready(pod) ? pod_ips(kube_json_get(pod, "status"), ips) : 0;
	if (!lh_table_lookup_ex(sel->pods, key, (void **)&p)) {
		if (!(p = calloc(1, sizeof *p)) || !(p->key = strdup(key)) ||
		    lh_table_insert(sel->pods, p->key, p) < 0) {
			if (p)
				free_pod(p);
			log_error("out of memory; pod not served", "pod", key);
			return;
		}
		atomic_fetch_add(&m->n_pods, 1);
	} else if (p->n_ips == n && memcmp(p->ips, ips, n * sizeof *ips) == 0) {
		return; /* no change DNS sees (a label, a condition's time) */
	}
	memcpy(p->ips, ips, n * sizeof *ips);
	p->n_ips = n;
	change_begin();
	refresh_selector(m, sel);
	change_end(m);
}

void mesh_pod_remove(struct mesh *m, void *tag, const char *ns, const char *name)
{
	struct mesh_selector *sel = tag;
	struct mesh_pod *p = NULL;
	char key[512];

	if (!is_selector(m, sel) || snprintf(key, sizeof key, "%s/%s", ns, name) >= (int)sizeof key ||
	    !lh_table_lookup_ex(sel->pods, key, (void **)&p))
		return;
	lh_table_delete(sel->pods, key);
	atomic_fetch_sub(&m->n_pods, 1);
	bool served = p->n_ips;
	free_pod(p);
	if (!served)
		return;
	change_begin();
	refresh_selector(m, sel);
	change_end(m);
}

/* ---- WorkloadEntries ---------------------------------------------------------------- */

static void free_workload(struct mesh_workload *w)
{
	free(w->key);
	free(w->labels);
	free(w);
}

/* Istio's: with health checks on (the annotation), healthy only once the
 * Healthy condition says so; otherwise always. */
static bool workload_healthy(const struct kube_json *we)
{
	const struct kube_json *annotations = kube_json_get(kube_json_get(we, "metadata"), "annotations");
	const char *on = kube_json_get_text(annotations, "proxy.istio.io/health-checks-enabled");

	if (!on || !(strcmp(on, "true") == 0 || strcmp(on, "True") == 0 ||
		     strcmp(on, "TRUE") == 0 || strcmp(on, "1") == 0 || strcmp(on, "t") == 0 ||
		     strcmp(on, "T") == 0))
		return true;
	return condition_true(kube_json_get(we, "status"), "Healthy");
}

/* The selectors of w's namespace that pick it: their entries are refreshed. */
static void refresh_selecting(struct mesh *m, const struct mesh_workload *w)
{
	change_begin();
	for (struct mesh_selector *s = m->selectors; s; s = s->next)
		if (in_namespace(w, s->ns) && selects(s, w->labels, w->labels_len))
			refresh_selector(m, s);
	change_end(m);
}

void mesh_workload_upsert(struct mesh *m, const struct kube_json *we)
{
	const struct kube_json *meta = kube_json_get(we, "metadata");
	const struct kube_json *spec = kube_json_get(we, "spec");
	struct mesh_workload *w = NULL, *old = NULL;
	char key[512];

	if (!object_key(meta, key, sizeof key) || !(w = calloc(1, sizeof *w)))
		return;
	w->ns_len = strcspn(key, "/"); /* object_key wrote "namespace/name" */
	w->healthy = workload_healthy(we);
	mesh_parse_ip(kube_json_get_text(spec, "address") ?: "", &w->ip);
	if (!(w->key = strdup(key)) ||
	    mesh_labels(kube_json_get(spec, "labels"), kube_json_get(meta, "labels"), &w->labels,
			&w->labels_len, NULL) < 0) {
		free_workload(w);
		log_error("out of memory; workloadentry not served", "workloadentry", key);
		return;
	}
	if (lh_table_lookup_ex(m->workloads, key, (void **)&old)) {
		lh_table_delete(m->workloads, key);
		refresh_selecting(m, old); /* the selectors that picked it before */
		free_workload(old);
	} else {
		atomic_fetch_add(&m->n_workloads, 1);
	}
	if (lh_table_insert(m->workloads, w->key, w) < 0) {
		atomic_fetch_sub(&m->n_workloads, 1);
		free_workload(w);
		log_error("out of memory; workloadentry not served", "workloadentry", key);
		return;
	}
	refresh_selecting(m, w);
}

void mesh_workload_remove(struct mesh *m, const char *ns, const char *name)
{
	struct mesh_workload *w = NULL;
	char key[512];

	if (snprintf(key, sizeof key, "%s/%s", ns, name) >= (int)sizeof key ||
	    !lh_table_lookup_ex(m->workloads, key, (void **)&w))
		return;
	lh_table_delete(m->workloads, key);
	atomic_fetch_sub(&m->n_workloads, 1);
	refresh_selecting(m, w);
	free_workload(w);
}

void mesh_workloads_free(struct mesh *m)
{
	struct lh_entry *e, *tmp;

	while (m->selectors) {
		struct mesh_selector *s = m->selectors;
		m->selectors = s->next;
		free_selector(m, s);
	}
	if (!m->workloads)
		return;
	lh_foreach_safe(m->workloads, e, tmp)
		free_workload((struct mesh_workload *)lh_entry_v(e));
	lh_table_free(m->workloads);
}
