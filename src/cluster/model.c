/*
 * cluster/model.c — Kubernetes objects in, the table's snapshots out: the
 * one writer (the Kubernetes client's thread).
 *
 * A Service is a node of the name table (struct cluster_service) pointing
 * to a snapshot of its spec and an RCU list of snapshots of its
 * EndpointSlices (parse.c). A change to a Service publishes a new spec
 * snapshot; a change to an EndpointSlice publishes a new snapshot of that
 * slice alone, in the old one's place in the list and the indexes
 * (index.c). The old snapshot is freed after a grace period. So a change
 * costs what the changed object holds, whatever the size of its Service,
 * and nothing lists or compares the names a Service had: they are derived
 * from the snapshots when asked (service.c).
 *
 * The names that are held as records (the apex and the structure names,
 * each namespace's two, this node's pod names in verified mode) are nodes
 * replaced whole (table.c). Pod names are reference-counted (two of this
 * node's pods may have had one address). This node's pods also publish
 * their addresses as autopath clients (clients.c).
 */
#include "cluster/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dnstap/dnstap.h"
#include "log/log.h"
#include "util/tsan.h"
#include "zone/zone.h"

_Static_assert(LIMIT_KINDS == CLUSTER_LIMITS, "cluster_stats.limited has one count per bound");

const char *const cluster_limit_names[CLUSTER_LIMITS] = {
	[LIMIT_PORTS] = "ports", [LIMIT_ENDPOINTS] = "endpoints", [LIMIT_NAME_LENGTH] = "name_length",
};

/* "ns/name"; false when it does not fit. */
static bool make_key(char key[512], const char *ns, const char *name)
{
	return snprintf(key, 512, "%s/%s", ns, name) < 512;
}

/* "ns/name" from an object's metadata; false when either is missing. */
static bool object_key(const struct kube_json *obj, bool namespaced, char key[512])
{
	const struct kube_json *meta = kube_json_get(obj, "metadata");
	const char *ns = namespaced ? kube_json_get_text(meta, "namespace") : "";
	const char *name = kube_json_get_text(meta, "name");

	return ns && name && *name && make_key(key, ns, name);
}

/*
 * The string tables (namespaces, this node's pods, pod references) hold
 * names tenants choose, so they are keyed like every other table outside
 * input fills: SipHash-1-3 under a key drawn once. json-c's own string hash
 * is lookup3 under a 32-bit seed, or no seed at all when a program sets
 * JSON_C_STR_HASH_PERLLIKE for the process, and its tables probe linearly:
 * names chosen to collide would make every lookup walk them all. One key
 * for the process, since json-c's hash function takes no argument.
 */
static uint8_t string_key[16];
static bool string_keyed;
static pthread_once_t string_key_once = PTHREAD_ONCE_INIT;

static void draw_string_key(void)
{
	string_keyed = getrandom(string_key, sizeof string_key, 0) == (ssize_t)sizeof string_key;
}

static unsigned long string_hash(const void *k)
{
	return (unsigned long)dns_siphash13(string_key, k, strlen(k));
}

static int string_equal(const void *a, const void *b)
{
	return strcmp(a, b) == 0;
}

/* NULL when out of memory or without a key. */
static struct lh_table *string_table(void)
{
	pthread_once(&string_key_once, draw_string_key);
	return string_keyed ? lh_table_new(64, NULL, string_hash, string_equal) : NULL;
}

static void *lookup_entry(struct lh_table *t, const char *key)
{
	void *v = NULL;

	return lh_table_lookup_ex(t, key, &v) ? v : NULL;
}

/* A change: the writer's lookups are made under the read lock, as a
 * reader's; after it the tables are resized to what they now hold. */
static void change_begin(void)
{
	urcu_memb_read_lock();
}

static void change_end(struct cluster *c)
{
	urcu_memb_read_unlock();
	cluster_fit_tables(c);
}

/* ---- bounds ---------------------------------------------------------------------- */

/*
 * A change to Service key hit the bounds in `hit` (1 << enum
 * cluster_limit_kind): counted each time, logged when the Service was
 * within that bound after its previous change, so a Service that stays
 * over it does not fill the log at every update.
 */
static void note_limits(struct cluster *c, struct cluster_service *s, const char *key, uint8_t hit)
{
	for (int k = 0; k < LIMIT_KINDS; k++) {
		uint8_t bit = (uint8_t)(1u << k);
		if (!(hit & bit))
			continue;
		atomic_fetch_add(&c->n_limited[k], 1);
		if (s && (s->limited & bit))
			continue;
		char max[24];
		snprintf(max, sizeof max, "%u", k == LIMIT_PORTS       ? c->max_ports
					       : k == LIMIT_ENDPOINTS ? c->max_endpoints
								      : DNS_MAX_NAME);
		log_warn(k == LIMIT_PORTS ? "service has more ports than cluster.max_ports_per_service; "
					    "the first are served"
			 : k == LIMIT_ENDPOINTS ? "service has more endpoints than "
						  "cluster.max_endpoints_per_service; the rest are not served"
						: "a name of this service would be longer than 255 bytes; "
						  "it is not served",
			 "service", key, "limit", cluster_limit_names[k], "max", max);
	}
	if (s)
		s->limited = hit;
}

/* ---- Services --------------------------------------------------------------------- */

static size_t service_owner(const struct cluster *c, const char *ns, const char *name,
			    uint8_t out[DNS_MAX_NAME])
{
	const char *labels[] = {name, ns, "svc", NULL};

	return cluster_name(out, c->apex, labels);
}

/* The Service ns/name, made (unpublished: no spec) if new; NULL when its
 * name cannot be a DNS name (logged) or out of memory. */
static struct cluster_service *service_entry(struct cluster *c, const char *ns, const char *name,
					     const char *key)
{
	uint8_t owner[DNS_MAX_NAME];
	size_t len = service_owner(c, ns, name, owner);
	struct cluster_service *s;

	if (!len) {
		note_limits(c, NULL, key, 1u << LIMIT_NAME_LENGTH);
		return NULL;
	}
	if ((s = cluster_find_service(c, owner, len)))
		return s;
	if (!(s = calloc(1, sizeof *s + len))) {
		log_error("out of memory", "service", key);
		return NULL;
	}
	s->h.kind = NAMED_SERVICE;
	s->h.owner_len = (uint8_t)len;
	memcpy(s->owner, owner, len);
	cluster_add_service(c, s);
	return s;
}

static void free_spec_now(struct rcu_head *head)
{
	TSAN_GRACE_ACQUIRE();
	free(caa_container_of(head, struct cluster_spec, rcu));
}

/* Replace s's spec (NULL: the Service is gone); the old one goes after a grace period. */
static void set_spec(struct cluster *c, struct cluster_service *s, struct cluster_spec *spec)
{
	struct cluster_spec *old = atomic_load_explicit(&s->spec, memory_order_relaxed);

	if (spec)
		cluster_index_add_spec(c, spec);
	atomic_store_explicit(&s->spec, spec, memory_order_release);
	if (old) {
		cluster_index_del_spec(c, old);
		cluster_retire(&old->rcu, free_spec_now);
	}
}

static void free_service_now(struct rcu_head *head)
{
	TSAN_GRACE_ACQUIRE();
	free(caa_container_of(head, struct cluster_service, h.rcu));
}

/* A Service with neither its object nor a slice left is forgotten (a slice
 * that serves nothing still refers to it: it stays while that slice does). */
static void forget_service_if_unused(struct cluster *c, struct cluster_service *s)
{
	if (s->spec || s->slices || s->n_slices)
		return;
	cluster_del_service(c, s);
	cluster_retire(&s->h.rcu, free_service_now);
}

void cluster_service_upsert(struct cluster *c, const struct kube_json *obj)
{
	const struct kube_json *meta = kube_json_get(obj, "metadata");
	const char *ns = kube_json_get_text(meta, "namespace");
	const char *name = kube_json_get_text(meta, "name");
	struct cluster_service *s;
	struct cluster_spec *spec;
	uint8_t limited = 0;
	char key[512];

	if (!object_key(obj, true, key))
		return;
	change_begin();
	if (!(s = service_entry(c, ns, name, key)))
		goto out;
	if (!(spec = cluster_parse_spec(c, s, kube_json_get(obj, "spec"), key, &limited))) {
		log_error("out of memory", "service", key);
		forget_service_if_unused(c, s);
		goto out;
	}
	if (!s->spec)
		atomic_fetch_add(&c->n_services, 1);
	set_spec(c, s, spec);
	note_limits(c, s, key, limited);
	cluster_report_endpoints(c, s);
out:
	change_end(c);
}

void cluster_service_remove(struct cluster *c, const char *ns, const char *name)
{
	uint8_t owner[DNS_MAX_NAME];
	size_t len = service_owner(c, ns, name, owner);
	struct cluster_service *s;

	change_begin();
	if (len && (s = cluster_find_service(c, owner, len)) && s->spec) {
		atomic_fetch_sub(&c->n_services, 1);
		set_spec(c, s, NULL);
		cluster_report_endpoints(c, s);
		forget_service_if_unused(c, s);
	}
	change_end(c);
}

/* ---- EndpointSlices ---------------------------------------------------------------- */

static uint64_t slice_hash(const struct cluster *c, const char *key)
{
	return cluster_hash(c, key, strlen(key));
}

static int match_slice(struct cds_lfht_node *ht, const void *key)
{
	return strcmp(caa_container_of(ht, struct cluster_slice, ht)->key, key) == 0;
}

static struct cluster_slice *find_slice(const struct cluster *c, const char *key)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *ht;

	cds_lfht_lookup(c->slices, slice_hash(c, key), match_slice, key, &it);
	ht = cds_lfht_iter_get_node(&it);
	return ht ? caa_container_of(ht, struct cluster_slice, ht) : NULL;
}

static struct cluster_slice *slice_entry(struct cluster *c, const char *key)
{
	struct cluster_slice *sl = find_slice(c, key);

	if (sl)
		return sl;
	if (!(sl = calloc(1, sizeof *sl + strlen(key) + 1))) {
		log_error("out of memory", "endpointslice", key);
		return NULL;
	}
	strcpy(sl->key, key);
	sl->seq = ++c->next_seq;
	cds_lfht_node_init(&sl->ht);
	cds_lfht_add(c->slices, slice_hash(c, key), &sl->ht);
	atomic_fetch_add(&c->n_slices, 1);
	return sl;
}

static void free_eps_now(struct rcu_head *head)
{
	TSAN_GRACE_ACQUIRE();
	free(caa_container_of(head, struct cluster_eps, rcu));
}

/* The link of s's slice list that points to e (NULL: the one past the end). */
static struct cluster_eps *_Atomic *link_to(struct cluster_service *s, const struct cluster_eps *e)
{
	struct cluster_eps *_Atomic *link = &s->slices;
	struct cluster_eps *at;

	while ((at = atomic_load_explicit(link, memory_order_relaxed)) != e)
		link = &at->next;
	return link;
}

/*
 * Publish eps (NULL: nothing) as sl's snapshot under sl->svc: its keys go
 * into the indexes, it takes the old snapshot's place in the Service's
 * list, then the old one's keys go and it is freed after a grace period.
 */
static void set_eps(struct cluster *c, struct cluster_slice *sl, struct cluster_eps *eps)
{
	struct cluster_eps *old = sl->eps;
	struct cluster_service *s = sl->svc;

	if (eps) {
		eps->svc = s;
		eps->seq = sl->seq;
		s->n_addresses += eps->n;
		atomic_fetch_add(&c->n_endpoints, eps->n);
		if (!c->noendpoints)
			cluster_index_add_eps(c, eps);
		/* in the old one's place, else at the end; readers on the old
		 * one go on from it to the same next */
		atomic_store_explicit(&eps->next, old ? atomic_load_explicit(&old->next,
									 memory_order_relaxed)
						      : NULL,
				      memory_order_relaxed);
		atomic_store_explicit(link_to(s, old), eps, memory_order_release);
	} else if (old) {
		atomic_store_explicit(link_to(s, old),
				      atomic_load_explicit(&old->next, memory_order_relaxed),
				      memory_order_release);
	}
	if (old) {
		s->n_addresses -= old->n;
		atomic_fetch_sub(&c->n_endpoints, old->n);
		if (!c->noendpoints)
			cluster_index_del_eps(c, old);
		cluster_retire(&old->rcu, free_eps_now);
	}
	sl->eps = eps;
}

/* Take sl out of its Service, which is forgotten if nothing else holds it. */
static void leave_service(struct cluster *c, struct cluster_slice *sl)
{
	struct cluster_service *s = sl->svc;

	if (!s)
		return;
	set_eps(c, sl, NULL);
	s->n_slices--;
	sl->svc = NULL;
	cluster_report_endpoints(c, s);
	forget_service_if_unused(c, s);
}

/* Room left in s for one slice's entries, its own old ones counted out. */
static uint32_t room_for(const struct cluster *c, const struct cluster_service *s,
			 const struct cluster_slice *sl)
{
	uint32_t others = s->n_addresses - (sl->eps && sl->svc == s ? sl->eps->n : 0);

	return others < c->max_endpoints ? c->max_endpoints - others : 0;
}

void cluster_slice_upsert(struct cluster *c, const struct kube_json *obj)
{
	const struct kube_json *meta = kube_json_get(obj, "metadata");
	const char *svc_name = kube_json_get_text(kube_json_get(meta, "labels"), c->multicluster
								  ? "multicluster.kubernetes.io/service-name"
								  : "kubernetes.io/service-name");
	const char *ns = kube_json_get_text(meta, "namespace");
	char key[512], svc_key[512];
	struct cluster_slice *sl;
	struct cluster_service *s;
	struct cluster_eps *eps;
	uint8_t limited = 0;
	bool oom;

	if (!object_key(obj, true, key) || !svc_name || !*svc_name || !make_key(svc_key, ns, svc_name))
		return; /* a slice no Service owns names nothing */
	change_begin();
	if (!(sl = slice_entry(c, key)))
		goto out;
	s = service_entry(c, ns, svc_name, svc_key);
	if (sl->svc && sl->svc != s)
		leave_service(c, sl);
	if (!s)
		goto out;
	if (!sl->svc) {
		sl->svc = s;
		s->n_slices++;
	}
	eps = cluster_parse_eps(c, obj, s->h.owner_len, room_for(c, s, sl), &limited, &oom);
	if (oom)
		log_error("out of memory; endpointslice not served", "endpointslice", key);
	set_eps(c, sl, eps);
	note_limits(c, s, svc_key, limited);
	cluster_report_endpoints(c, s);
	forget_service_if_unused(c, s);
out:
	change_end(c);
}

static void free_slice_now(struct rcu_head *head)
{
	TSAN_GRACE_ACQUIRE();
	free(caa_container_of(head, struct cluster_slice, rcu));
}

void cluster_slice_remove(struct cluster *c, const char *ns, const char *name)
{
	char key[512];
	struct cluster_slice *sl;

	if (!make_key(key, ns, name))
		return;
	change_begin();
	if ((sl = find_slice(c, key)) && cds_lfht_del(c->slices, &sl->ht) == 0) {
		atomic_fetch_sub(&c->n_slices, 1);
		leave_service(c, sl);
		cluster_retire(&sl->rcu, free_slice_now);
	}
	change_end(c);
}

/* ---- namespaces ------------------------------------------------------------- */

/* <ns>.svc.<zone> and <ns>.pod.<zone>: they exist while the namespace does
 * (the latter not with cluster.pods: disabled, CoreDNS's NXDOMAIN). */
static void namespace_names(struct cluster *c, const char *name, bool exists)
{
	const char *svc[] = {name, "svc", NULL}, *pod[] = {name, "pod", NULL};
	const char *const *all[] = {svc, pod};

	for (size_t i = 0; i < (c->pods == CONFIG_PODS_DISABLED ? 1u : 2u); i++) {
		uint8_t owner[DNS_MAX_NAME];
		size_t len = cluster_name(owner, c->apex, all[i]);
		if (!len)
			continue;
		if (exists && cluster_put(c, owner, len, NULL, 0) < 0)
			log_error("out of memory", "namespace", name);
		else if (!exists)
			cluster_del(c, owner, len);
	}
}

void cluster_namespace_upsert(struct cluster *c, const struct kube_json *obj)
{
	const char *name = kube_json_get_text(kube_json_get(obj, "metadata"), "name");
	char *key;

	if (!name || !*name || lookup_entry(c->namespaces, name))
		return;
	if (!(key = strdup(name)) || lh_table_insert(c->namespaces, key, key) < 0) {
		free(key);
		log_error("out of memory", "namespace", name);
		return;
	}
	atomic_fetch_add(&c->n_namespaces, 1);
	change_begin();
	namespace_names(c, name, true);
	change_end(c);
}

void cluster_namespace_remove(struct cluster *c, const char *name)
{
	char *key = lookup_entry(c->namespaces, name);

	if (!key)
		return;
	lh_table_delete(c->namespaces, key);
	atomic_fetch_sub(&c->n_namespaces, 1);
	change_begin();
	namespace_names(c, name, false);
	change_end(c);
	free(key);
}

/* ---- this node's pods ------------------------------------------------------- */

bool cluster_needs_pods(const struct config *cfg)
{
	bool dnstap = (*cfg->dnstap.socket || *cfg->dnstap.address) &&
		      (cfg->dnstap.messages & DNSTAP_CLIENT);

	return cfg->cluster.autopath || cfg->cluster.pods == CONFIG_PODS_VERIFIED || cfg->mesh.istio ||
	       dnstap;
}

static void pod_ips(const struct kube_json *status, struct cluster_ip **ips, size_t *n)
{
	const struct kube_json *list = kube_json_get(status, "podIPs");
	const char *ip = kube_json_get_text(status, "podIP");
	size_t count = kube_json_len(list);

	*n = 0;
	*ips = calloc(count ? count : 1, sizeof **ips);
	for (const struct kube_json *e = *ips ? kube_json_first(list) : NULL; e; e = e->next)
		*n += cluster_parse_ip(kube_json_get_text(e, "ip") ?: "", &(*ips)[*n]);
	if (*ips && !count && ip)
		*n += cluster_parse_ip(ip, &(*ips)[0]);
}

static uint16_t ip_type(const struct cluster_ip *ip)
{
	return ip->family == AF_INET ? DNS_T_A : DNS_T_AAAA;
}

/* Reference counts are kept per owner, as text: the lh_table keys on strings. */
static void pod_ref(struct cluster *c, const uint8_t *owner, size_t len, int delta)
{
	char key[1024];
	struct lh_entry *e;
	struct cluster_ip ip;

	if (dns_name_to_text(owner, key, sizeof key) < 0)
		return;
	e = lh_table_lookup_entry(c->pod_refs, key);
	if (e) {
		intptr_t n = (intptr_t)lh_entry_v(e) + delta;
		if (n > 0) {
			lh_entry_set_val(e, (void *)n);
			return;
		}
		void *k = (void *)lh_entry_k(e);
		lh_table_delete_entry(c->pod_refs, e);
		free(k);
		cluster_del(c, owner, len);
		return;
	}
	if (delta <= 0 || !cluster_parse_dashed_ip(owner + 1, owner[0], &ip))
		return;
	char *k = strdup(key);
	uint8_t rr[4 + 16];
	uint16_t type = ip_type(&ip), rdlen = ip.family == AF_INET ? 4 : 16;
	memcpy(rr, &type, 2);
	memcpy(rr + 2, &rdlen, 2);
	memcpy(rr + 4, ip.addr, rdlen);
	if (!k || lh_table_insert(c->pod_refs, k, (void *)(intptr_t)delta) < 0 ||
	    cluster_put(c, owner, len, rr, 4u + rdlen) < 0)
		log_error("out of memory", "pod_name", key);
}

static bool listed_name(const uint8_t *list, size_t len, const uint8_t *name)
{
	for (size_t pos = 0; pos < len; pos += dns_name_len(list + pos))
		if (dns_name_len(list + pos) == dns_name_len(name) &&
		    memcmp(list + pos, name, dns_name_len(name)) == 0)
			return true;
	return false;
}

/*
 * The pod names (verified mode) of a pod of this node: <dashed>.<ns>.pod
 * for each of its addresses. The pod's old names it no longer has lose a
 * reference, its new ones gain one. A pod has one address per family, so
 * the lists are short.
 */
static void set_pod_names(struct cluster *c, struct cluster_pod *p, const char *ns,
			  const struct cluster_ip *ips, size_t n)
{
	uint8_t *now = NULL;
	size_t now_len = 0;

	for (size_t i = 0; c->pods == CONFIG_PODS_VERIFIED && i < n; i++) {
		char dashed[64];
		const char *labels[] = {dashed, ns, "pod", NULL};
		uint8_t owner[DNS_MAX_NAME], *grown;
		size_t len;
		cluster_dashed_ip(&ips[i], dashed);
		if (!(len = cluster_name(owner, c->apex, labels)) || listed_name(now, now_len, owner))
			continue;
		if (!(grown = realloc(now, now_len + len))) {
			log_error("out of memory", "pod", p->key);
			break;
		}
		now = grown;
		memcpy(now + now_len, owner, len);
		now_len += len;
	}
	change_begin();
	for (size_t pos = 0; pos < now_len; pos += dns_name_len(now + pos))
		if (!listed_name(p->names, p->names_len, now + pos))
			pod_ref(c, now + pos, dns_name_len(now + pos), +1);
	for (size_t pos = 0; pos < p->names_len; pos += dns_name_len(p->names + pos))
		if (!listed_name(now, now_len, p->names + pos))
			pod_ref(c, p->names + pos, dns_name_len(p->names + pos), -1);
	change_end(c);
	free(p->names);
	p->names = now;
	p->names_len = now_len;
}

static void free_pod(struct cluster_pod *p)
{
	free(p->clients);
	free(p->names);
	free(p->key);
	free(p);
}

/* Whether the pod queries from addresses of its own (see clients.c). */
static bool pod_is_client(const struct kube_json *obj)
{
	const struct kube_json *spec = kube_json_get(obj, "spec");
	const struct kube_json *host_network = kube_json_get(spec, "hostNetwork");
	const char *phase = kube_json_get_text(kube_json_get(obj, "status"), "phase");

	if (kube_json_true(host_network))
		return false;
	if (kube_json_get(kube_json_get(obj, "metadata"), "deletionTimestamp"))
		return false;
	return !phase || (strcmp(phase, "Succeeded") != 0 && strcmp(phase, "Failed") != 0);
}

void cluster_pod_upsert(struct cluster *c, const struct kube_json *obj)
{
	char key[512];
	struct cluster_pod *p;
	struct cluster_ip *ips;
	size_t n;
	const char *ns = kube_json_get_text(kube_json_get(obj, "metadata"), "namespace");

	if (!object_key(obj, true, key))
		return;
	if (!(p = lookup_entry(c->local_pods, key))) {
		p = calloc(1, sizeof *p);
		if (!p || !(p->key = strdup(key)) || lh_table_insert(c->local_pods, p->key, p) < 0) {
			if (p)
				free_pod(p);
			log_error("out of memory", "pod", key);
			return;
		}
		atomic_fetch_add(&c->n_pods, 1);
	}
	pod_ips(kube_json_get(obj, "status"), &ips, &n);
	set_pod_names(c, p, ns, ips, n);
	change_begin();
	cluster_clients_set(c, p, ns, ips, pod_is_client(obj) ? n : 0);
	change_end(c);
	free(ips);
}

void cluster_pod_remove(struct cluster *c, const char *ns, const char *name)
{
	char key[512];
	struct cluster_pod *p;

	if (!make_key(key, ns, name) || !(p = lookup_entry(c->local_pods, key)))
		return;
	set_pod_names(c, p, ns, NULL, 0);
	change_begin();
	cluster_clients_set(c, p, ns, NULL, 0);
	change_end(c);
	lh_table_delete(c->local_pods, p->key);
	atomic_fetch_sub(&c->n_pods, 1);
	free_pod(p);
}

/* ---- the table's life ------------------------------------------------------- */

static const uint8_t dns_version_label[] = "\13dns-version";

/* The names that exist whatever the cluster holds. */
static int publish_fixed_names(struct cluster *c)
{
	struct cluster_rrbuf apex = {0}, version = {0};
	uint8_t ns[DNS_MAX_NAME], owner[DNS_MAX_NAME];
	static const uint8_t txt[] = "\0051.1.0";
	size_t ns_len = zone_ns_rdata(c->apex, ns);
	int rc = -1;

	if (cluster_rrbuf_add(&apex, DNS_T_SOA, c->soa, c->soa_len) < 0 ||
	    cluster_rrbuf_add(&apex, DNS_T_NS, ns, (uint16_t)ns_len) < 0 ||
	    cluster_rrbuf_add(&version, DNS_T_TXT, txt, sizeof txt - 1) < 0)
		goto out;
	memcpy(owner, dns_version_label, sizeof dns_version_label - 1);
	memcpy(owner + sizeof dns_version_label - 1, c->apex, c->apex_len);
	urcu_memb_read_lock();
	rc = cluster_put(c, c->apex, c->apex_len, apex.data, apex.len) |
	     cluster_put(c, owner, sizeof dns_version_label - 1 + c->apex_len, version.data, version.len) |
	     cluster_put(c, c->svc_apex, dns_name_len(c->svc_apex), NULL, 0) |
	     cluster_put(c, c->pod_apex, dns_name_len(c->pod_apex), NULL, 0);
	urcu_memb_read_unlock();
out:
	free(apex.data);
	free(version.data);
	return rc;
}

/* cluster.fallthrough in wire form (the config has checked the names). */
static int set_fallthrough(struct cluster *c, const struct config *cfg, char *err, size_t errlen)
{
	size_t n = cfg->cluster.n_fallthrough;

	if (n && !(c->fallthrough = malloc(n * DNS_MAX_NAME))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		int len = dns_name_from_text(cfg->cluster.fallthrough[i],
					     c->fallthrough + c->fallthrough_len);
		if (len <= 1) {
			snprintf(err, errlen, "cluster.fallthrough: \"%s\" is not a DNS name",
				 cfg->cluster.fallthrough[i]);
			return -1;
		}
		c->fallthrough_len += (size_t)len;
	}
	return 0;
}

/* The zone's names and answer options: cluster.domain's, or the clusterset
 * zone's (multicluster.domain: no pod names, no reverse names). */
static int set_zone(struct cluster *c, const struct config *cfg, bool clusterset, char *err,
		    size_t errlen)
{
	const char *svc[] = {"svc", NULL}, *pod[] = {"pod", NULL};
	const char *domain = clusterset ? cfg->multicluster.domain : cfg->cluster.domain;
	int len = dns_name_from_text(domain, c->apex);

	if (len <= 1 || (size_t)len + 12 > DNS_MAX_NAME || !cluster_name(c->svc_apex, c->apex, svc) ||
	    !cluster_name(c->pod_apex, c->apex, pod)) {
		snprintf(err, errlen, "%s \"%s\" cannot hold the cluster's names",
			 clusterset ? "multicluster.domain" : "cluster.domain", domain);
		return -1;
	}
	c->apex_len = (size_t)len;
	c->apex_labels = cluster_name_labels(c->apex);
	c->ttl = cfg->cluster.ttl;
	c->multicluster = clusterset;
	c->pods = clusterset ? CONFIG_PODS_DISABLED : cfg->cluster.pods;
	c->endpoint_pod_names = cfg->cluster.endpoint_pod_names;
	c->noendpoints = cfg->cluster.noendpoints;
	c->ignore_empty_service = cfg->cluster.ignore_empty_service;
	c->max_ports = cfg->cluster.max_ports_per_service;
	c->max_endpoints = cfg->cluster.max_endpoints_per_service;
	/* minimum = ttl: negative answers live as long as positive ones */
	c->soa_len = (uint16_t)zone_soa_rdata(c->apex, (uint32_t)time(NULL), c->ttl, c->soa);
	for (int i = 0; i < 2; i++) {
		uint8_t soa[ZONE_SOA_RDATA_MAX];
		size_t n = zone_soa_rdata(cluster_reverse_apex(i), (uint32_t)time(NULL), c->ttl, soa);
		memcpy(c->reverse_soa[i], soa, n);
		c->reverse_soa_len[i] = (uint16_t)n;
		dns_apex_rr_build(&c->reverse_soa_rr[i], cluster_reverse_apex(i), DNS_T_SOA,
				  cluster_ttl_of(c, DNS_T_SOA), c->reverse_soa[i], c->reverse_soa_len[i]);
	}
	dns_apex_rr_build(&c->soa_rr, c->apex, DNS_T_SOA, cluster_ttl_of(c, DNS_T_SOA), c->soa,
			  c->soa_len);
	return set_fallthrough(c, cfg, err, errlen);
}

static struct cluster *make_table(const struct config *cfg, bool clusterset, char *err,
				  size_t errlen)
{
	struct cluster *c = calloc(1, sizeof *c);

	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (set_zone(c, cfg, clusterset, err, errlen) < 0) {
		free(c->fallthrough);
		free(c);
		return NULL;
	}
	if (getrandom(c->hash_key, sizeof c->hash_key, 0) != (ssize_t)sizeof c->hash_key) {
		snprintf(err, errlen, "cannot key the cluster table: %s", strerror(errno));
		free(c->fallthrough);
		free(c);
		return NULL;
	}
	c->ht = cluster_table_new(&c->buckets[0]);
	c->endpoints = cluster_table_new(&c->buckets[1]);
	c->vips = cluster_table_new(&c->buckets[2]);
	c->slices = cluster_table_new(&c->buckets[3]);
	/* this node's pods: few, and written rarely; liburcu sizes it */
	c->clients = cds_lfht_new_flavor(64, 64, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
					 &urcu_memb_flavor, NULL);
	c->namespaces = string_table();
	c->local_pods = string_table();
	c->pod_refs = string_table();
	if (!c->ht || !c->endpoints || !c->vips || !c->slices || !c->clients || !c->namespaces ||
	    !c->local_pods || !c->pod_refs || publish_fixed_names(c) < 0) {
		cluster_free(c);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	return c;
}

struct cluster *cluster_new(const struct config *cfg, char *err, size_t errlen)
{
	return make_table(cfg, false, err, errlen);
}

struct cluster *cluster_new_clusterset(const struct config *cfg, char *err, size_t errlen)
{
	return make_table(cfg, true, err, errlen);
}

void cluster_set_synced(struct cluster *c)
{
	atomic_store_explicit(&c->synced, true, memory_order_release);
	urcu_memb_read_lock();
	cluster_report_synced(c, c->watch.owner_len ? cluster_find_service(c, c->watch.owner,
									  c->watch.owner_len)
						    : NULL);
	urcu_memb_read_unlock();
}

void cluster_stats(const struct cluster *c, struct cluster_stats *out)
{
	*out = (struct cluster_stats){
		.names = atomic_load(&c->n_names),
		.services = atomic_load(&c->n_services),
		.slices = atomic_load(&c->n_slices),
		.endpoints = atomic_load(&c->n_endpoints),
		.namespaces = atomic_load(&c->n_namespaces),
		.pods = atomic_load(&c->n_pods),
		.synced = atomic_load(&c->synced),
	};
	for (int k = 0; k < LIMIT_KINDS; k++)
		out->limited[k] = atomic_load(&c->n_limited[k]);
}

/* At cluster_free: no reader is left, and every deferred free has run. */
static void free_slice_entry(struct cds_lfht_node *ht)
{
	struct cluster_slice *sl = caa_container_of(ht, struct cluster_slice, ht);

	free(sl->eps);
	free(sl);
}

static void free_named_entry(struct cds_lfht_node *ht)
{
	struct cluster_named *n = caa_container_of(ht, struct cluster_named, ht);

	if (n->kind == NAMED_SERVICE)
		free(((struct cluster_service *)n)->spec);
	free(n);
}

static void free_client_entry(struct cds_lfht_node *ht)
{
	free(caa_container_of(ht, struct cluster_client, ht));
}

static void free_pods(struct lh_table *t)
{
	struct lh_entry *e, *tmp;

	lh_foreach_safe(t, e, tmp)
		free_pod((struct cluster_pod *)lh_entry_v(e));
	lh_table_free(t);
}

/* Tables whose only allocation per entry is the key string. */
static void free_keys(struct lh_table *t)
{
	struct lh_entry *e, *tmp;

	lh_foreach_safe(t, e, tmp)
		free((void *)lh_entry_k(e));
	lh_table_free(t);
}

void cluster_free(struct cluster *c)
{
	if (!c)
		return;
	urcu_memb_barrier(); /* run the call_rcu frees still queued */
	/* the indexes' nodes live in the snapshots: out of the tables first */
	if (c->endpoints)
		cluster_table_destroy(c->endpoints, NULL);
	if (c->vips)
		cluster_table_destroy(c->vips, NULL);
	if (c->slices)
		cluster_table_destroy(c->slices, free_slice_entry);
	if (c->ht)
		cluster_table_destroy(c->ht, free_named_entry);
	if (c->clients)
		cluster_table_destroy(c->clients, free_client_entry);
	if (c->namespaces)
		free_keys(c->namespaces);
	if (c->local_pods)
		free_pods(c->local_pods);
	if (c->pod_refs)
		free_keys(c->pod_refs);
	cluster_watch_free(c);
	free(c->fallthrough);
	free(c);
}
