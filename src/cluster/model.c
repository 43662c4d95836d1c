/*
 * cluster/model.c — Kubernetes objects in, names out.
 *
 * The writer keeps a compact model of each Service with its EndpointSlices
 * (addresses, readiness, hostnames, named ports), the namespaces and this
 * node's pods: never the JSON. Any change to a Service or one of its slices
 * rebuilds that Service's records alone: every record it contributes is
 * listed, sorted and grouped by owner, each owner published as one node, and
 * the names it published last time but not now are removed. The cost is
 * O(records of that Service), not of the table.
 *
 * What is held and what answer.c derives, to keep a node per name that
 * needs one: a Service's node holds its addresses and one port entry
 * (CLUSTER_T_PORT) per ClusterIP or endpoint address and port, from which
 * every SRV answer and the _<port>._<proto> names are derived; an endpoint
 * address gets a PTR, and a node only when its name is a hostname or pod
 * name (a dashed name is found through the PTR).
 *
 * Reverse names are shared (an address may be a ClusterIP of one Service
 * and an endpoint of another): a PTR node is rewritten from its current
 * records minus the targets under this Service's name plus the new ones.
 * Pod names in verified mode are reference-counted (a pod may back several
 * Services and run on this node). This node's pods also publish their
 * addresses as autopath clients (clients.c).
 */
#include "cluster/internal.h"

#include <stddef.h>
#include <stdio.h>
#include <errno.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "log/log.h"
#include "zone/zone.h"

/* One record a Service contributes; type 0 only makes the name exist. The
 * largest rdata is a CLUSTER_T_PORT entry: a name, the port, two labels. */
struct rec {
	uint16_t owner_len, type, rdlen;
	uint8_t owner[DNS_MAX_NAME];
	uint8_t rdata[DNS_MAX_NAME + 2 + 8 + 16];
};

struct recs {
	struct rec *v;
	size_t n, cap;
	bool failed; /* out of memory, or a name too long: logged once */
};

static struct rec *recs_push(struct recs *r)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 16;
		struct rec *v = realloc(r->v, cap * sizeof *v);
		if (!v) {
			r->failed = true;
			return NULL;
		}
		r->v = v;
		r->cap = cap;
	}
	return &r->v[r->n++];
}

static void recs_add(struct recs *r, const uint8_t *owner, size_t owner_len, uint16_t type,
		     const void *rdata, size_t rdlen)
{
	struct rec *e;

	if (!owner_len || rdlen > sizeof e->rdata) {
		r->failed = true;
		return;
	}
	if (!(e = recs_push(r)))
		return;
	e->owner_len = (uint16_t)owner_len;
	memcpy(e->owner, owner, owner_len);
	e->type = type;
	e->rdlen = (uint16_t)rdlen;
	if (rdlen)
		memcpy(e->rdata, rdata, rdlen);
}

static int compare_rec(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;
	size_t n = x->owner_len < y->owner_len ? x->owner_len : y->owner_len;
	int d = memcmp(x->owner, y->owner, n);

	if (d || x->owner_len != y->owner_len)
		return d ? d : (int)x->owner_len - (int)y->owner_len;
	if (x->type != y->type)
		return (int)x->type - (int)y->type;
	/* bytewise, so the port entries of one target are adjacent */
	d = memcmp(x->rdata, y->rdata, x->rdlen < y->rdlen ? x->rdlen : y->rdlen);
	return d ? d : (int)x->rdlen - (int)y->rdlen;
}

static void sort_recs(struct recs *r)
{
	if (r->n) /* qsort's base may not be NULL, even for no elements */
		qsort(r->v, r->n, sizeof *r->v, compare_rec);
}

static bool same_owner(const struct rec *a, const struct rec *b)
{
	return a->owner_len == b->owner_len && memcmp(a->owner, b->owner, a->owner_len) == 0;
}

/* ---- name lists: concatenated wire names ------------------------------------ */

struct namelist {
	uint8_t *data;
	size_t len, cap;
};

static int namelist_add(struct namelist *l, const uint8_t *name, size_t len)
{
	if (l->len + len > l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		while (cap < l->len + len)
			cap *= 2;
		uint8_t *d = realloc(l->data, cap);
		if (!d)
			return -1;
		l->data = d;
		l->cap = cap;
	}
	memcpy(l->data + l->len, name, len);
	l->len += len;
	return 0;
}

static bool namelist_has(const uint8_t *data, size_t len, const uint8_t *name, size_t name_len)
{
	for (size_t pos = 0; pos < len; pos += dns_name_len(data + pos))
		if (dns_name_len(data + pos) == name_len && memcmp(data + pos, name, name_len) == 0)
			return true;
	return false;
}

/* ---- JSON access ------------------------------------------------------------ */

static struct json_object *field(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	if (o && json_object_is_type(o, json_type_object))
		json_object_object_get_ex(o, key, &v);
	return v;
}

static const char *text(struct json_object *o, const char *key)
{
	struct json_object *v = field(o, key);

	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static size_t array_len(struct json_object *a)
{
	return a && json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
}

/* "ns/name"; false when it does not fit. */
static bool make_key(char key[512], const char *ns, const char *name)
{
	return snprintf(key, 512, "%s/%s", ns, name) < 512;
}

/* "ns/name" from an object's metadata; false when either is missing. */
static bool object_key(struct json_object *obj, bool namespaced, char key[512])
{
	struct json_object *meta = field(obj, "metadata");
	const char *ns = namespaced ? text(meta, "namespace") : "";
	const char *name = text(meta, "name");

	return ns && name && *name && make_key(key, ns, name);
}

static void *lookup_entry(struct lh_table *t, const char *key)
{
	void *v = NULL;

	return lh_table_lookup_ex(t, key, &v) ? v : NULL;
}

/* Lower-case copy of text into out (size bytes); false when it does not fit. */
static bool copy_lower(char *out, size_t size, const char *text)
{
	size_t len = strlen(text);

	if (len >= size)
		return false;
	for (size_t i = 0; i <= len; i++)
		out[i] = (char)tolower((unsigned char)text[i]);
	return true;
}

/* Every port with a number; an unnamed one has name "" (CoreDNS lists it in
 * the SRV records of the Service's own name). */
static void parse_ports(struct json_object *arr, struct cluster_port **out, size_t *n_out)
{
	size_t n = array_len(arr), kept = 0;
	struct cluster_port *ports = n ? calloc(n, sizeof *ports) : NULL;

	for (size_t i = 0; ports && i < n; i++) {
		struct json_object *p = json_object_array_get_idx(arr, i);
		const char *name = text(p, "name"), *proto = text(p, "protocol");
		struct json_object *num = field(p, "port");
		struct cluster_port *o = &ports[kept];
		if (!num || !copy_lower(o->name, sizeof o->name, name ? name : "") ||
		    !copy_lower(o->proto, sizeof o->proto, proto && *proto ? proto : "TCP"))
			continue;
		o->port = (uint16_t)json_object_get_int(num);
		kept++;
	}
	*out = ports;
	*n_out = kept;
}

static void parse_ips(struct json_object *arr, struct cluster_ip **out, size_t *n_out)
{
	size_t n = array_len(arr), kept = 0;
	struct cluster_ip *ips = n ? calloc(n, sizeof *ips) : NULL;

	for (size_t i = 0; ips && i < n; i++) {
		struct json_object *v = json_object_array_get_idx(arr, i);
		if (json_object_is_type(v, json_type_string) &&
		    cluster_parse_ip(json_object_get_string(v), &ips[kept]))
			kept++;
	}
	*out = ips;
	*n_out = kept;
}

/* ---- building a Service's records ------------------------------------------- */

static size_t service_owner(const struct cluster *c, const struct cluster_service *s,
			    uint8_t out[DNS_MAX_NAME])
{
	const char *labels[] = {s->name, s->ns, "svc", NULL};

	return cluster_name(out, c->apex, labels);
}

static uint16_t ip_type(const struct cluster_ip *ip)
{
	return ip->family == AF_INET ? DNS_T_A : DNS_T_AAAA;
}

static size_t ip_len(const struct cluster_ip *ip)
{
	return ip->family == AF_INET ? 4 : 16;
}

/* One CLUSTER_T_PORT entry of owner (see internal.h). */
static void add_port_entry(struct recs *r, const uint8_t *owner, size_t owner_len,
			   const struct cluster_port *p, const uint8_t *target, size_t target_len)
{
	uint8_t rdata[sizeof ((struct rec *)0)->rdata];
	size_t proto = strlen(p->proto), name = strlen(p->name), n = target_len;

	memcpy(rdata, target, target_len);
	rdata[n++] = (uint8_t)(p->port >> 8);
	rdata[n++] = (uint8_t)p->port;
	rdata[n++] = (uint8_t)proto;
	memcpy(rdata + n, p->proto, proto);
	n += proto;
	rdata[n++] = (uint8_t)name;
	memcpy(rdata + n, p->name, name);
	recs_add(r, owner, owner_len, CLUSTER_T_PORT, rdata, n + name);
}

static void add_ptr(struct recs *ptrs, const struct cluster_ip *ip, const uint8_t *target,
		    size_t target_len)
{
	uint8_t rev[DNS_MAX_NAME];

	recs_add(ptrs, rev, cluster_reverse_name(ip, rev), DNS_T_PTR, target, target_len);
}

static bool endpoint_serves(const struct cluster_service *s, const struct cluster_endpoint *e)
{
	return e->ready || s->publish_not_ready;
}

/* CoreDNS's "ignore empty_service" counts these. */
static size_t serving_addresses(const struct cluster_service *s)
{
	size_t n = 0;

	for (const struct cluster_slice *sl = s->slices; sl; sl = sl->next)
		for (size_t i = 0; i < sl->n_eps; i++)
			n += endpoint_serves(s, &sl->eps[i]) ? sl->eps[i].n_ips : 0;
	return n;
}

/*
 * <name>.<svc>...: an endpoint address's own name: its endpoint's name,
 * else (none, or one that is no DNS label: the API server checks them, so
 * only a broken one sends such) the address's dashed form. *named: the
 * endpoint's name was used. 0 when not even the dashed name fits.
 */
static size_t endpoint_owner(const struct cluster_endpoint *e, const struct cluster_ip *ip,
			     const uint8_t *svc_owner, uint8_t out[DNS_MAX_NAME], bool *named)
{
	char dashed[64];
	const char *labels[] = {e->hostname, NULL};
	size_t len = e->hostname[0] ? cluster_name(out, svc_owner, labels) : 0;

	*named = len > 0;
	if (len)
		return len;
	cluster_dashed_ip(ip, dashed);
	labels[0] = dashed;
	return cluster_name(out, svc_owner, labels);
}

/*
 * Every serving endpoint address of s, under s's name whatever its kind
 * (CoreDNS answers endpoint names of Services with a ClusterIP too): its
 * PTR, and a node for it when it has a name of its own; a dashed name
 * needs none, answer.c finds it through the PTR. A headless Service's own
 * name holds the addresses and, per EndpointSlice port, the SRV targets.
 */
static void build_endpoints(const struct cluster *c, const struct cluster_service *s,
			    const uint8_t *owner, size_t owner_len, bool headless,
			    struct recs *r, struct recs *ptrs)
{
	if (c->noendpoints)
		return;
	for (const struct cluster_slice *sl = s->slices; sl; sl = sl->next) {
		for (size_t i = 0; i < sl->n_eps; i++) {
			const struct cluster_endpoint *e = &sl->eps[i];
			for (size_t j = 0; endpoint_serves(s, e) && j < e->n_ips; j++) {
				const struct cluster_ip *ip = &e->ips[j];
				uint8_t ep[DNS_MAX_NAME];
				bool named;
				size_t ep_len = endpoint_owner(e, ip, owner, ep, &named);
				if (!ep_len)
					r->failed = true; /* its address still counts for the Service */
				if (named)
					recs_add(r, ep, ep_len, ip_type(ip), ip->addr, ip_len(ip));
				if (ep_len) /* no PTR or SRV to a name that is not there */
					add_ptr(ptrs, ip, ep, ep_len);
				if (!headless)
					continue;
				recs_add(r, owner, owner_len, ip_type(ip), ip->addr, ip_len(ip));
				for (size_t k = 0; ep_len && k < sl->n_ports; k++)
					add_port_entry(r, owner, owner_len, &sl->ports[k], ep, ep_len);
			}
		}
	}
}

/*
 * The ClusterIPs' PTRs, then the name with its addresses and a port entry
 * per ClusterIP and port, and the endpoints. With ignore_empty_service a
 * Service without a serving endpoint has no name (CoreDNS keeps the PTR).
 */
static void build_cluster_ip(const struct cluster *c, const struct cluster_service *s,
			     const uint8_t *owner, size_t owner_len, struct recs *r,
			     struct recs *ptrs)
{
	for (size_t i = 0; i < s->n_ips; i++)
		add_ptr(ptrs, &s->ips[i], owner, owner_len);
	if (c->ignore_empty_service && !serving_addresses(s))
		return;
	recs_add(r, owner, owner_len, 0, NULL, 0);
	for (size_t i = 0; i < s->n_ips; i++)
		recs_add(r, owner, owner_len, ip_type(&s->ips[i]), s->ips[i].addr,
			 ip_len(&s->ips[i]));
	for (size_t i = 0; i < s->n_ports; i++)
		for (size_t j = 0; j < s->n_ips; j++)
			add_port_entry(r, owner, owner_len, &s->ports[i], owner, owner_len);
	build_endpoints(c, s, owner, owner_len, false, r, ptrs);
}

static void build_external(const struct cluster_service *s, const uint8_t *owner,
			   size_t owner_len, struct recs *r)
{
	uint8_t target[DNS_MAX_NAME];
	int len = s->external_name ? dns_name_from_text(s->external_name, target) : -1;

	if (len <= 1) {
		log_warn("externalName is not a DNS name; service not served", "service", s->key,
			 "external_name", s->external_name ? s->external_name : "");
		return;
	}
	recs_add(r, owner, owner_len, DNS_T_CNAME, target, (size_t)len);
}

/* Pod names (verified mode) of the pods behind this Service's endpoints. */
static void build_pod_refs(const struct cluster *c, const struct cluster_service *s,
			   struct recs *pods)
{
	for (const struct cluster_slice *sl = s->slices; sl; sl = sl->next) {
		for (size_t i = 0; i < sl->n_eps; i++) {
			const struct cluster_endpoint *e = &sl->eps[i];
			for (size_t j = 0; e->is_pod && j < e->n_ips; j++) {
				char dashed[64];
				const char *labels[] = {dashed, s->ns, "pod", NULL};
				uint8_t owner[DNS_MAX_NAME];
				cluster_dashed_ip(&e->ips[j], dashed);
				recs_add(pods, owner, cluster_name(owner, c->apex, labels), 0, NULL, 0);
			}
		}
	}
}

/* ---- publishing -------------------------------------------------------------- */

/* Group sorted records by owner into nodes; the owners go to `published`. */
static void publish_records(struct cluster *c, struct recs *r, struct namelist *published)
{
	struct cluster_rrbuf buf = {0};

	sort_recs(r);
	for (size_t i = 0; i < r->n;) {
		size_t j = i;
		buf.len = 0;
		for (; j < r->n && same_owner(&r->v[i], &r->v[j]); j++) {
			const struct rec *e = &r->v[j];
			/* duplicates go, but port entries count them (internal.h) */
			if (e->type &&
			    (e->type == CLUSTER_T_PORT || j == i || compare_rec(e, &r->v[j - 1]) != 0) &&
			    cluster_rrbuf_add(&buf, e->type, e->rdata, e->rdlen) < 0)
				r->failed = true;
		}
		if (cluster_put(c, r->v[i].owner, r->v[i].owner_len, buf.data, buf.len) < 0 ||
		    namelist_add(published, r->v[i].owner, r->v[i].owner_len) < 0)
			r->failed = true;
		i = j;
	}
	free(buf.data);
}

static void remove_stale_names(struct cluster *c, const uint8_t *old, size_t old_len,
			       const struct namelist *now)
{
	for (size_t pos = 0; pos < old_len; pos += dns_name_len(old + pos)) {
		size_t len = dns_name_len(old + pos);
		if (!namelist_has(now->data, now->len, old + pos, len))
			cluster_del(c, old + pos, len);
	}
}

/*
 * Rewrite one reverse name: its current PTRs minus those pointing into
 * `svc_owner`, plus this Service's new ones (new_ptrs[first..end)).
 */
static void rewrite_ptr(struct cluster *c, const uint8_t *rev, size_t rev_len,
			const uint8_t *svc_owner, const struct rec *adds, size_t n_adds,
			bool *failed)
{
	const struct cluster_node *cur = cluster_find(c, rev, rev_len);
	struct cluster_rrbuf buf = {0};
	struct cluster_rr rr;
	size_t pos = 0;

	while (cur && cluster_node_next(cur, &pos, &rr))
		if (!dns_name_is_subdomain(rr.rdata, svc_owner) &&
		    cluster_rrbuf_add(&buf, rr.type, rr.rdata, rr.rdlen) < 0)
			*failed = true;
	for (size_t i = 0; i < n_adds; i++)
		if ((i == 0 || compare_rec(&adds[i], &adds[i - 1]) != 0) &&
		    cluster_rrbuf_add(&buf, DNS_T_PTR, adds[i].rdata, adds[i].rdlen) < 0)
			*failed = true;
	if (buf.len)
		*failed |= cluster_put(c, rev, rev_len, buf.data, buf.len) < 0;
	else
		cluster_del(c, rev, rev_len);
	free(buf.data);
}

static void publish_ptrs(struct cluster *c, const uint8_t *svc_owner, struct recs *p,
			 const uint8_t *old, size_t old_len, struct namelist *published)
{
	sort_recs(p);
	for (size_t i = 0; i < p->n;) {
		size_t j = i;
		while (j < p->n && same_owner(&p->v[i], &p->v[j]))
			j++;
		rewrite_ptr(c, p->v[i].owner, p->v[i].owner_len, svc_owner, &p->v[i], j - i,
			    &p->failed);
		if (namelist_add(published, p->v[i].owner, p->v[i].owner_len) < 0)
			p->failed = true;
		i = j;
	}
	for (size_t pos = 0; pos < old_len; pos += dns_name_len(old + pos)) {
		size_t len = dns_name_len(old + pos);
		if (!namelist_has(published->data, published->len, old + pos, len))
			rewrite_ptr(c, old + pos, len, svc_owner, NULL, 0, &p->failed);
	}
}

static void pod_ref(struct cluster *c, const uint8_t *owner, size_t len, int delta);

static void publish_pod_refs(struct cluster *c, struct recs *pods, const uint8_t *old,
			     size_t old_len, struct namelist *published)
{
	sort_recs(pods);
	for (size_t i = 0; i < pods->n; i++) {
		if (i > 0 && same_owner(&pods->v[i], &pods->v[i - 1]))
			continue;
		if (namelist_add(published, pods->v[i].owner, pods->v[i].owner_len) < 0) {
			pods->failed = true;
			continue;
		}
		if (!namelist_has(old, old_len, pods->v[i].owner, pods->v[i].owner_len))
			pod_ref(c, pods->v[i].owner, pods->v[i].owner_len, +1);
	}
	for (size_t pos = 0; pos < old_len; pos += dns_name_len(old + pos))
		if (!namelist_has(published->data, published->len, old + pos, dns_name_len(old + pos)))
			pod_ref(c, old + pos, dns_name_len(old + pos), -1);
}

static void replace_list(uint8_t **data, size_t *len, struct namelist *now)
{
	free(*data);
	*data = now->data;
	*len = now->len;
}

/* Recompute and publish everything Service s contributes. */
static void rebuild_service(struct cluster *c, struct cluster_service *s)
{
	struct recs r = {0}, ptrs = {0}, pods = {0};
	struct namelist names = {0}, ptr_names = {0}, pod_names = {0};
	uint8_t owner[DNS_MAX_NAME];
	size_t owner_len = service_owner(c, s, owner);

	if (!owner_len) {
		log_warn("name too long for the cluster domain; service not served", "service", s->key);
		return;
	}
	if (s->seen && s->kind == SVC_CLUSTER_IP) {
		build_cluster_ip(c, s, owner, owner_len, &r, &ptrs);
	} else if (s->seen && s->kind == SVC_HEADLESS) {
		build_endpoints(c, s, owner, owner_len, true, &r, &ptrs);
	} else if (s->seen) {
		build_external(s, owner, owner_len, &r);
	}
	if (c->pods == CONFIG_PODS_VERIFIED)
		build_pod_refs(c, s, &pods);

	publish_records(c, &r, &names);
	remove_stale_names(c, s->names, s->names_len, &names);
	publish_ptrs(c, owner, &ptrs, s->ptrs, s->ptrs_len, &ptr_names);
	publish_pod_refs(c, &pods, s->pods, s->pods_len, &pod_names);
	if (r.failed || ptrs.failed || pods.failed)
		log_error("some records could not be stored (out of memory or a name over 255 bytes)",
			  "service", s->key);
	replace_list(&s->names, &s->names_len, &names);
	replace_list(&s->ptrs, &s->ptrs_len, &ptr_names);
	replace_list(&s->pods, &s->pods_len, &pod_names);
	free(r.v);
	free(ptrs.v);
	free(pods.v);
	cluster_report_endpoints(c, s);
}

/* ---- pod names (cluster.pods: verified) ----------------------------------- */

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
	uint16_t type = ip_type(&ip), rdlen = (uint16_t)ip_len(&ip);
	memcpy(rr, &type, 2);
	memcpy(rr + 2, &rdlen, 2);
	memcpy(rr + 4, ip.addr, rdlen);
	if (!k || lh_table_insert(c->pod_refs, k, (void *)(intptr_t)delta) < 0 ||
	    cluster_put(c, owner, len, rr, 4u + rdlen) < 0)
		log_error("out of memory", "pod_name", key);
}

/* ---- the public writer calls ------------------------------------------------ */

static void free_service(struct cluster_service *s);

static struct cluster_service *service_entry(struct cluster *c, const char *key)
{
	struct cluster_service *s = lookup_entry(c->services, key);
	const char *slash;

	if (s)
		return s;
	slash = strchr(key, '/');
	s = calloc(1, sizeof *s);
	if (!s || !(s->key = strdup(key)) || !(s->ns = strndup(key, (size_t)(slash - key))) ||
	    !(s->name = strdup(slash + 1)) || lh_table_insert(c->services, s->key, s) < 0) {
		if (s)
			free_service(s);
		log_error("out of memory", "service", key);
		return NULL;
	}
	return s;
}

static void clear_service_spec(struct cluster_service *s)
{
	free(s->ips);
	free(s->external_name);
	free(s->ports);
	s->ips = NULL;
	s->external_name = NULL;
	s->ports = NULL;
	s->n_ips = s->n_ports = 0;
}

static void free_service(struct cluster_service *s)
{
	clear_service_spec(s);
	free(s->names);
	free(s->ptrs);
	free(s->pods);
	free(s->key);
	free(s->ns);
	free(s->name);
	free(s);
}

/* A Service with neither its object nor a slice left is forgotten. */
static void forget_service_if_unused(struct cluster *c, struct cluster_service *s)
{
	if (s->seen || s->slices || s->names_len || s->ptrs_len || s->pods_len)
		return;
	lh_table_delete(c->services, s->key);
	free_service(s);
}

static void parse_service_spec(struct cluster_service *s, struct json_object *spec)
{
	const char *type = text(spec, "type"), *cluster_ip = text(spec, "clusterIP");
	struct json_object *ips = field(spec, "clusterIPs"), *pna = field(spec, "publishNotReadyAddresses");

	clear_service_spec(s);
	s->publish_not_ready = pna && json_object_get_boolean(pna);
	parse_ports(field(spec, "ports"), &s->ports, &s->n_ports);
	if (type && strcmp(type, "ExternalName") == 0) {
		const char *ext = text(spec, "externalName");
		s->kind = SVC_EXTERNAL_NAME;
		s->external_name = ext ? strdup(ext) : NULL;
	} else if (cluster_ip && strcmp(cluster_ip, "None") == 0) {
		s->kind = SVC_HEADLESS;
	} else {
		s->kind = SVC_CLUSTER_IP;
		if (array_len(ips)) {
			parse_ips(ips, &s->ips, &s->n_ips);
		} else if (cluster_ip && (s->ips = calloc(1, sizeof *s->ips)) &&
			   cluster_parse_ip(cluster_ip, s->ips)) {
			s->n_ips = 1;
		}
	}
}

static void with_read_lock_begin(void)
{
	urcu_memb_read_lock();
}

static void with_read_lock_end(void)
{
	urcu_memb_read_unlock();
}

void cluster_service_upsert(struct cluster *c, struct json_object *obj)
{
	char key[512];
	struct cluster_service *s;

	if (!object_key(obj, true, key) || !(s = service_entry(c, key)))
		return;
	parse_service_spec(s, field(obj, "spec"));
	if (!s->seen)
		atomic_fetch_add(&c->n_services, 1);
	s->seen = true;
	with_read_lock_begin();
	rebuild_service(c, s);
	with_read_lock_end();
}

void cluster_service_remove(struct cluster *c, const char *ns, const char *name)
{
	char key[512];
	struct cluster_service *s;

	if (!make_key(key, ns, name) || !(s = lookup_entry(c->services, key)) || !s->seen)
		return;
	atomic_fetch_sub(&c->n_services, 1);
	s->seen = false;
	clear_service_spec(s);
	with_read_lock_begin();
	rebuild_service(c, s);
	with_read_lock_end();
	forget_service_if_unused(c, s);
}

static size_t slice_addresses(const struct cluster_slice *sl)
{
	size_t n = 0;

	for (size_t i = 0; i < sl->n_eps; i++)
		n += sl->eps[i].n_ips;
	return n;
}

static void free_slice_data(struct cluster *c, struct cluster_slice *sl)
{
	atomic_fetch_sub(&c->n_endpoints, slice_addresses(sl));
	for (size_t i = 0; i < sl->n_eps; i++)
		free(sl->eps[i].ips);
	free(sl->eps);
	free(sl->ports);
	sl->eps = NULL;
	sl->ports = NULL;
	sl->n_eps = sl->n_ports = 0;
}

/* Absent conditions.ready means ready (the API's documented default). */
static bool endpoint_ready(struct json_object *ep)
{
	struct json_object *ready = field(field(ep, "conditions"), "ready");

	return !ready || json_object_get_boolean(ready);
}

/* Its hostname, else with cluster.endpoint_pod_names its targetRef's name
 * (CoreDNS's order); a name that is not one DNS label is not used. */
static void parse_endpoint(const struct cluster *c, struct json_object *ep,
			   struct cluster_endpoint *out)
{
	const char *hostname = text(ep, "hostname");
	const char *kind = text(field(ep, "targetRef"), "kind");
	const char *target = text(field(ep, "targetRef"), "name");

	parse_ips(field(ep, "addresses"), &out->ips, &out->n_ips);
	out->ready = endpoint_ready(ep);
	out->is_pod = kind && strcmp(kind, "Pod") == 0;
	if (hostname && *hostname)
		target = hostname;
	else if (!c->endpoint_pod_names)
		target = NULL;
	if (target && cluster_is_label(target))
		snprintf(out->hostname, sizeof out->hostname, "%s", target);
}

static void parse_slice(struct cluster *c, struct cluster_slice *sl, struct json_object *obj)
{
	const char *type = text(obj, "addressType");
	struct json_object *eps = field(obj, "endpoints");
	size_t n = array_len(eps);

	free_slice_data(c, sl);
	/* FQDN slices name no addresses we could serve. */
	if (!type || (strcmp(type, "IPv4") != 0 && strcmp(type, "IPv6") != 0))
		return;
	parse_ports(field(obj, "ports"), &sl->ports, &sl->n_ports);
	sl->eps = n ? calloc(n, sizeof *sl->eps) : NULL;
	for (size_t i = 0; sl->eps && i < n; i++)
		parse_endpoint(c, json_object_array_get_idx(eps, i), &sl->eps[sl->n_eps++]);
	atomic_fetch_add(&c->n_endpoints, slice_addresses(sl));
}

static void detach_slice(struct cluster_slice *sl)
{
	struct cluster_slice **p;

	if (!sl->svc)
		return;
	for (p = &sl->svc->slices; *p && *p != sl; p = &(*p)->next)
		;
	if (*p)
		*p = sl->next;
	sl->svc = NULL;
	sl->next = NULL;
}

static struct cluster_slice *slice_entry(struct cluster *c, const char *key)
{
	struct cluster_slice *sl = lookup_entry(c->slices, key);

	if (sl)
		return sl;
	sl = calloc(1, sizeof *sl);
	if (!sl || !(sl->key = strdup(key)) || lh_table_insert(c->slices, sl->key, sl) < 0) {
		if (sl)
			free(sl->key);
		free(sl);
		log_error("out of memory", "endpointslice", key);
		return NULL;
	}
	atomic_fetch_add(&c->n_slices, 1);
	return sl;
}

/* Detach sl from its Service, rebuild that Service, forget it if unused. */
static void leave_service(struct cluster *c, struct cluster_slice *sl)
{
	struct cluster_service *old = sl->svc;

	if (!old)
		return;
	detach_slice(sl);
	rebuild_service(c, old);
	forget_service_if_unused(c, old);
}

void cluster_slice_upsert(struct cluster *c, struct json_object *obj)
{
	char key[512], svc_key[512];
	const char *svc_name = text(field(field(obj, "metadata"), "labels"), "kubernetes.io/service-name");
	const char *ns = text(field(obj, "metadata"), "namespace");
	struct cluster_slice *sl;
	struct cluster_service *s;

	if (!object_key(obj, true, key) || !svc_name || !*svc_name || !make_key(svc_key, ns, svc_name))
		return; /* a slice no Service owns names nothing */
	if (!(sl = slice_entry(c, key)))
		return;
	with_read_lock_begin();
	if (sl->svc && strcmp(sl->svc->key, svc_key) != 0)
		leave_service(c, sl);
	parse_slice(c, sl, obj);
	if (!sl->svc && (s = service_entry(c, svc_key))) {
		sl->svc = s;
		sl->next = s->slices;
		s->slices = sl;
	}
	if (sl->svc)
		rebuild_service(c, sl->svc);
	with_read_lock_end();
}

void cluster_slice_remove(struct cluster *c, const char *ns, const char *name)
{
	char key[512];
	struct cluster_slice *sl;

	if (!make_key(key, ns, name) || !(sl = lookup_entry(c->slices, key)))
		return;
	lh_table_delete(c->slices, sl->key);
	atomic_fetch_sub(&c->n_slices, 1);
	free_slice_data(c, sl);
	with_read_lock_begin();
	leave_service(c, sl);
	with_read_lock_end();
	free(sl->key);
	free(sl);
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

void cluster_namespace_upsert(struct cluster *c, struct json_object *obj)
{
	const char *name = text(field(obj, "metadata"), "name");
	char *key;

	if (!name || !*name || lookup_entry(c->namespaces, name))
		return;
	if (!(key = strdup(name)) || lh_table_insert(c->namespaces, key, key) < 0) {
		free(key);
		log_error("out of memory", "namespace", name);
		return;
	}
	atomic_fetch_add(&c->n_namespaces, 1);
	with_read_lock_begin();
	namespace_names(c, name, true);
	with_read_lock_end();
}

void cluster_namespace_remove(struct cluster *c, const char *name)
{
	char *key = lookup_entry(c->namespaces, name);

	if (!key)
		return;
	lh_table_delete(c->namespaces, key);
	atomic_fetch_sub(&c->n_namespaces, 1);
	with_read_lock_begin();
	namespace_names(c, name, false);
	with_read_lock_end();
	free(key);
}

/* ---- this node's pods ------------------------------------------------------- */

bool cluster_needs_pods(const struct config *cfg)
{
	return cfg->cluster.autopath || cfg->cluster.pods == CONFIG_PODS_VERIFIED;
}

static void pod_ips(struct json_object *status, struct cluster_ip **ips, size_t *n)
{
	struct json_object *list = field(status, "podIPs");
	const char *ip = text(status, "podIP");
	size_t count = array_len(list);

	*n = 0;
	*ips = calloc(count ? count : 1, sizeof **ips);
	for (size_t i = 0; *ips && i < count; i++)
		*n += cluster_parse_ip(text(json_object_array_get_idx(list, i), "ip") ?: "", &(*ips)[*n]);
	if (*ips && !count && ip)
		*n += cluster_parse_ip(ip, &(*ips)[0]);
}

/* The pod names a pod contributes (verified mode only). */
static void pod_names(struct cluster *c, const char *ns, const struct cluster_ip *ips, size_t n,
		      struct recs *out)
{
	for (size_t i = 0; c->pods == CONFIG_PODS_VERIFIED && i < n; i++) {
		char dashed[64];
		const char *labels[] = {dashed, ns, "pod", NULL};
		uint8_t owner[DNS_MAX_NAME];
		cluster_dashed_ip(&ips[i], dashed);
		recs_add(out, owner, cluster_name(owner, c->apex, labels), 0, NULL, 0);
	}
}

static void set_pod(struct cluster *c, struct cluster_pod *p, const char *ns,
		    const struct cluster_ip *ips, size_t n)
{
	struct recs names = {0};
	struct namelist now = {0};

	pod_names(c, ns, ips, n, &names);
	with_read_lock_begin();
	publish_pod_refs(c, &names, p->names, p->names_len, &now);
	with_read_lock_end();
	replace_list(&p->names, &p->names_len, &now);
	free(names.v);
}

static void free_pod(struct cluster_pod *p)
{
	free(p->clients);
	free(p->names);
	free(p->key);
	free(p);
}

/* Whether the pod queries from addresses of its own (see clients.c). */
static bool pod_is_client(struct json_object *obj)
{
	struct json_object *host_network = field(field(obj, "spec"), "hostNetwork");
	const char *phase = text(field(obj, "status"), "phase");

	if (host_network && json_object_get_boolean(host_network))
		return false;
	if (field(field(obj, "metadata"), "deletionTimestamp"))
		return false;
	return !phase || (strcmp(phase, "Succeeded") != 0 && strcmp(phase, "Failed") != 0);
}

void cluster_pod_upsert(struct cluster *c, struct json_object *obj)
{
	char key[512];
	struct cluster_pod *p;
	struct cluster_ip *ips;
	size_t n;
	const char *ns = text(field(obj, "metadata"), "namespace");

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
	pod_ips(field(obj, "status"), &ips, &n);
	set_pod(c, p, ns, ips, n);
	with_read_lock_begin();
	cluster_clients_set(c, p, ns, ips, pod_is_client(obj) ? n : 0);
	with_read_lock_end();
	free(ips);
}

void cluster_pod_remove(struct cluster *c, const char *ns, const char *name)
{
	char key[512];
	struct cluster_pod *p;

	if (!make_key(key, ns, name) || !(p = lookup_entry(c->local_pods, key)))
		return;
	set_pod(c, p, ns, NULL, 0);
	with_read_lock_begin();
	cluster_clients_set(c, p, ns, NULL, 0);
	with_read_lock_end();
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

static int set_zone(struct cluster *c, const struct config *cfg, char *err, size_t errlen)
{
	const char *svc[] = {"svc", NULL}, *pod[] = {"pod", NULL};
	int len = dns_name_from_text(cfg->cluster.domain, c->apex);

	if (len <= 1 || (size_t)len + 12 > DNS_MAX_NAME || !cluster_name(c->svc_apex, c->apex, svc) ||
	    !cluster_name(c->pod_apex, c->apex, pod)) {
		snprintf(err, errlen, "cluster.domain \"%s\" cannot hold the cluster's names",
			 cfg->cluster.domain);
		return -1;
	}
	c->apex_len = (size_t)len;
	c->apex_labels = cluster_name_labels(c->apex);
	c->ttl = cfg->cluster.ttl;
	c->pods = cfg->cluster.pods;
	c->endpoint_pod_names = cfg->cluster.endpoint_pod_names;
	c->noendpoints = cfg->cluster.noendpoints;
	c->ignore_empty_service = cfg->cluster.ignore_empty_service;
	/* minimum = ttl: negative answers live as long as positive ones */
	c->soa_len = (uint16_t)zone_soa_rdata(c->apex, (uint32_t)time(NULL), c->ttl, c->soa);
	for (int i = 0; i < 2; i++) {
		uint8_t soa[ZONE_SOA_RDATA_MAX];
		size_t n = zone_soa_rdata(cluster_reverse_apex(i), (uint32_t)time(NULL), c->ttl, soa);
		memcpy(c->reverse_soa[i], soa, n);
		c->reverse_soa_len[i] = (uint16_t)n;
	}
	return set_fallthrough(c, cfg, err, errlen);
}

struct cluster *cluster_new(const struct config *cfg, char *err, size_t errlen)
{
	struct cluster *c = calloc(1, sizeof *c);

	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (set_zone(c, cfg, err, errlen) < 0) {
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
	c->ht = cds_lfht_new_flavor(1024, 1024, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
				    &urcu_memb_flavor, NULL);
	c->clients = cds_lfht_new_flavor(64, 64, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
					 &urcu_memb_flavor, NULL);
	c->services = lh_kchar_table_new(1024, NULL);
	c->slices = lh_kchar_table_new(1024, NULL);
	c->namespaces = lh_kchar_table_new(64, NULL);
	c->local_pods = lh_kchar_table_new(64, NULL);
	c->pod_refs = lh_kchar_table_new(64, NULL);
	if (!c->ht || !c->clients || !c->services || !c->slices || !c->namespaces || !c->local_pods ||
	    !c->pod_refs || publish_fixed_names(c) < 0) {
		cluster_free(c);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	return c;
}

void cluster_set_synced(struct cluster *c)
{
	atomic_store_explicit(&c->synced, true, memory_order_release);
	cluster_report_synced(c, c->watch.key ? lookup_entry(c->services, c->watch.key) : NULL);
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
}

static void free_services(struct lh_table *t)
{
	struct lh_entry *e, *tmp;

	lh_foreach_safe(t, e, tmp)
		free_service((struct cluster_service *)lh_entry_v(e));
	lh_table_free(t);
}

static void free_slices(struct cluster *c, struct lh_table *t)
{
	struct lh_entry *e, *tmp;

	lh_foreach_safe(t, e, tmp) {
		struct cluster_slice *sl = (struct cluster_slice *)lh_entry_v(e);
		free_slice_data(c, sl);
		free(sl->key);
		free(sl);
	}
	lh_table_free(t);
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
	if (c->ht)
		cluster_table_destroy(c->ht, offsetof(struct cluster_node, ht));
	if (c->clients)
		cluster_table_destroy(c->clients, offsetof(struct cluster_client, ht));
	if (c->services)
		free_services(c->services);
	if (c->slices)
		free_slices(c, c->slices);
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
