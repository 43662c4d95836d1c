/*
 * cluster/parse.c — Kubernetes objects (borrowed kube_json) into the table's
 * immutable snapshots: a Service's spec and an EndpointSlice's entries,
 * each in one allocation, with the bounds that keep what no real workload
 * needs from costing every node: ports per Service or slice
 * (cluster.max_ports_per_service), endpoints per Service
 * (cluster.max_endpoints_per_service) and names past 255 bytes. Only the
 * fields DNS uses are read.
 */
#include "cluster/internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"

/* ---- ports ----------------------------------------------------------------------- */

/* text as one lower-case wire label of at most max characters; false otherwise. */
static bool label_of(uint8_t *out, size_t max, const char *text)
{
	size_t len = strlen(text);

	if (len > max)
		return false;
	out[0] = (uint8_t)len;
	for (size_t i = 0; i < len; i++)
		out[1 + i] = (uint8_t)tolower((unsigned char)text[i]);
	return true;
}

/*
 * Every port with a number, at most max (the rest: *cut), into out, sorted
 * and indexed (ports.c); an unnamed one has the empty label (CoreDNS lists
 * it in the SRV records of the Service's own name). How many; -1 when out
 * of memory.
 */
static int parse_ports(const struct kube_json *arr, struct cluster_port *out, size_t max,
		       bool *cut)
{
	size_t kept = 0;

	for (const struct kube_json *p = kube_json_first(arr); p; p = p->next) {
		const char *name = kube_json_get_text(p, "name");
		const char *proto = kube_json_get_text(p, "protocol");
		const struct kube_json *num = kube_json_get(p, "port");
		struct cluster_port port = {0};
		if (!num || !label_of(port.name, sizeof port.name - 1, name ? name : "") ||
		    !label_of(port.proto, sizeof port.proto - 1, proto && *proto ? proto : "TCP"))
			continue;
		if (kept == max) {
			*cut = true;
			break;
		}
		port.port = (uint16_t)kube_json_int(num);
		out[kept++] = port;
	}
	return cluster_ports_sort(out, kept) ? (int)kept : -1;
}

static size_t count_ports(const struct kube_json *arr, size_t max)
{
	size_t n = kube_json_len(arr);

	return n < max ? n : max;
}

/* ---- a Service's spec -------------------------------------------------------------- */

/* The ClusterIPs of a Service that has them (clusterIPs, else clusterIP);
 * a ServiceImport's are its ClusterSetIPs (ips). */
static uint8_t parse_cluster_ips(const struct kube_json *spec, bool import,
				 struct cluster_ip *out)
{
	const struct kube_json *list = kube_json_get(spec, import ? "ips" : "clusterIPs");
	const char *one = import ? NULL : kube_json_get_text(spec, "clusterIP");
	size_t n = kube_json_len(list);
	uint8_t kept = 0;

	for (const struct kube_json *v = kube_json_first(list);
	     v && kept < CLUSTER_MAX_CLUSTER_IPS; v = v->next) {
		const char *ip = kube_json_text(v);
		if (ip && cluster_parse_ip(ip, &out[kept]))
			kept++;
	}
	if (!n && one && cluster_parse_ip(one, &out[0]))
		kept = 1;
	return kept;
}

/* A ServiceImport (KEP-1645) is ClusterSetIP or Headless. */
static enum cluster_service_kind service_kind(const struct kube_json *spec, bool import)
{
	const char *type = kube_json_get_text(spec, "type");
	const char *cluster_ip = kube_json_get_text(spec, "clusterIP");

	if (import)
		return type && strcmp(type, "Headless") == 0 ? SVC_HEADLESS : SVC_CLUSTER_IP;
	if (type && strcmp(type, "ExternalName") == 0)
		return SVC_EXTERNAL_NAME;
	if (cluster_ip && strcmp(cluster_ip, "None") == 0)
		return SVC_HEADLESS;
	return SVC_CLUSTER_IP;
}

/* The ExternalName's target in wire form; 0 when it is none. */
static size_t external_target(const struct kube_json *spec, const char *key,
			      uint8_t out[DNS_MAX_NAME])
{
	const char *ext = kube_json_get_text(spec, "externalName");
	int len = ext ? dns_name_from_text(ext, out) : -1;

	if (len <= 1) {
		log_warn("externalName is not a DNS name; service not served", "service", key,
			 "external_name", ext ? ext : "");
		return 0;
	}
	return (size_t)len;
}

struct cluster_spec *cluster_parse_spec(struct cluster *c, struct cluster_service *svc,
					const struct kube_json *spec, const char *key, uint8_t *limited)
{
	enum cluster_service_kind kind = service_kind(spec, c->multicluster);
	const struct kube_json *ports = kube_json_get(spec, "ports");
	struct cluster_ip ips[CLUSTER_MAX_CLUSTER_IPS];
	uint8_t target[DNS_MAX_NAME];
	uint8_t n_ips = kind == SVC_CLUSTER_IP ? parse_cluster_ips(spec, c->multicluster, ips) : 0;
	size_t target_len = kind == SVC_EXTERNAL_NAME ? external_target(spec, key, target) : 0;
	size_t max_ports = count_ports(ports, c->max_ports);
	struct cluster_spec *s;
	bool cut = false;
	int n_ports;

	s = calloc(1, sizeof *s + n_ips * (sizeof *s->vips + sizeof *s->ips) +
			      cluster_ports_bytes(max_ports) + target_len);
	if (!s)
		return NULL;
	s->vips = (struct cluster_vip *)(s + 1);
	s->ips = (struct cluster_ip *)(s->vips + n_ips);
	s->ports = (struct cluster_port *)(s->ips + n_ips);
	s->svc = svc;
	s->kind = (uint8_t)kind;
	s->publish_not_ready = kube_json_true(kube_json_get(spec, "publishNotReadyAddresses"));
	s->n_ips = n_ips;
	memcpy(s->ips, ips, n_ips * sizeof *ips);
	if ((n_ports = parse_ports(ports, s->ports, max_ports, &cut)) < 0) {
		free(s);
		return NULL;
	}
	s->n_ports = (uint16_t)n_ports;
	if (target_len) {
		uint8_t *t = (uint8_t *)s->ports + cluster_ports_bytes(max_ports);
		memcpy(t, target, target_len);
		s->target = t;
		s->target_len = (uint8_t)target_len;
	}
	if (cut)
		*limited |= 1u << LIMIT_PORTS;
	return s;
}

/* ---- an EndpointSlice -------------------------------------------------------------- */

/* One endpoint address while a slice is read. */
struct entry {
	uint8_t addr[16];
	const char *hostname; /* lower-cased label, or NULL */
	uint8_t flags;
	uint32_t pos;         /* its place once sorted (for the address flags) */
};

static int compare_hostnames(const char *a, const char *b)
{
	if (!a || !b)
		return a ? 1 : b ? -1 : 0;
	size_t la = strlen(a), lb = strlen(b);
	return la != lb ? (la < lb ? -1 : 1) : memcmp(a, b, la);
}

/* Hostname-less entries first, then by hostname (length, then bytes), then address. */
static int compare_entries(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	int d = compare_hostnames(x->hostname, y->hostname);

	return d ? d : memcmp(x->addr, y->addr, sizeof x->addr);
}

static int compare_by_address(const void *a, const void *b)
{
	const struct entry *const *x = a, *const *y = b;
	int d = memcmp((*x)->addr, (*y)->addr, sizeof (*x)->addr);

	return d ? d : (int)(*x)->pos - (int)(*y)->pos;
}

/* Absent conditions.ready means ready (the API's documented default). */
static bool endpoint_ready(const struct kube_json *ep)
{
	const struct kube_json *ready = kube_json_get(kube_json_get(ep, "conditions"), "ready");

	return !ready || kube_json_true(ready);
}

/*
 * An endpoint's name: its hostname, else with cluster.endpoint_pod_names
 * its targetRef's name (CoreDNS's order); NULL when that is not one DNS
 * label, or would make a name past 255 bytes under owner (*too_long).
 */
static const char *endpoint_name(const struct cluster *c, const struct kube_json *ep,
				 size_t owner_len, char buf[DNS_MAX_LABEL + 1], bool *too_long)
{
	const char *hostname = kube_json_get_text(ep, "hostname");
	const char *target = kube_json_get_text(kube_json_get(ep, "targetRef"), "name");

	if (hostname && *hostname)
		target = hostname;
	else if (!c->endpoint_pod_names)
		target = NULL;
	if (!target || !cluster_is_label(target))
		return NULL;
	if (owner_len + 1 + strlen(target) > DNS_MAX_NAME) {
		*too_long = true;
		return NULL;
	}
	for (size_t i = 0; i <= strlen(target); i++)
		buf[i] = (char)tolower((unsigned char)target[i]);
	return buf;
}

/* The hostnames the entries point to, copied: the JSON's strings are
 * lower-cased into these. */
struct names {
	char (*v)[DNS_MAX_LABEL + 1];
	size_t n;
};

/* The slice's endpoint addresses of its family, at most max. */
static size_t read_entries(const struct cluster *c, const struct kube_json *eps, int family,
			   size_t owner_len, struct entry *out, struct names *names, size_t max,
			   uint8_t *limited)
{
	size_t n = 0;
	bool too_long = false;

	for (const struct kube_json *ep = kube_json_first(eps); ep; ep = ep->next) {
		const struct kube_json *addrs = kube_json_get(ep, "addresses");
		const char *kind = kube_json_get_text(kube_json_get(ep, "targetRef"), "kind");
		uint8_t flags = (uint8_t)((endpoint_ready(ep) ? EP_READY : 0) |
					  (kind && strcmp(kind, "Pod") == 0 ? EP_POD : 0));
		const char *host = endpoint_name(c, ep, owner_len, names->v[names->n], &too_long);
		if (host)
			names->n++;
		for (const struct kube_json *a = kube_json_first(addrs); a; a = a->next) {
			const char *addr = kube_json_text(a);
			struct cluster_ip ip;
			if (!addr || !cluster_parse_ip(addr, &ip) || ip.family != family)
				continue;
			if (n == max) {
				*limited |= 1u << LIMIT_ENDPOINTS;
				goto out;
			}
			memcpy(out[n].addr, ip.addr, sizeof ip.addr);
			out[n].hostname = host;
			out[n].flags = flags;
			n++;
		}
	}
out:
	if (too_long)
		*limited |= 1u << LIMIT_NAME_LENGTH;
	return n;
}

/* One entry per (hostname, address): a repeat adds its readiness. */
static size_t merge_repeats(struct entry *v, size_t n)
{
	size_t kept = 0;

	for (size_t i = 0; i < n; i++) {
		if (kept && compare_entries(&v[kept - 1], &v[i]) == 0) {
			v[kept - 1].flags |= v[i].flags;
			continue;
		}
		v[kept++] = v[i];
	}
	return kept;
}

/* EP_ADDR_FIRST and EP_ADDR_READY, across hostname groups. */
static int mark_addresses(struct entry *v, size_t n)
{
	struct entry **by = n ? malloc(n * sizeof *by) : NULL;

	if (n && !by)
		return -1;
	for (size_t i = 0; i < n; i++) {
		v[i].pos = (uint32_t)i;
		by[i] = &v[i];
	}
	if (n)
		qsort(by, n, sizeof *by, compare_by_address);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		bool ready = false;
		for (; j < n && memcmp(by[j]->addr, by[i]->addr, sizeof by[i]->addr) == 0; j++)
			ready |= by[j]->flags & EP_READY;
		by[i]->flags |= EP_ADDR_FIRST;
		for (size_t k = i; k < j; k++)
			by[k]->flags |= ready ? EP_ADDR_READY : 0;
		i = j;
	}
	free(by);
	return 0;
}

/* EP_NAME_FIRST(_READY) and the hostname groups; how many groups. */
static size_t mark_names(struct entry *v, size_t n, size_t *named)
{
	size_t groups = 0;

	*named = n;
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;
		bool ready = false;
		if (!v[i].hostname) {
			v[i].flags |= EP_NAME_FIRST | (v[i].flags & EP_READY ? EP_NAME_FIRST_READY : 0);
			i++;
			continue;
		}
		if (*named == n)
			*named = i;
		while (j < n && compare_hostnames(v[i].hostname, v[j].hostname) == 0)
			j++;
		v[i].flags |= EP_NAME_FIRST;
		for (size_t k = i; k < j && !ready; k++)
			if (v[k].flags & EP_READY) {
				v[k].flags |= EP_NAME_FIRST_READY;
				ready = true;
			}
		groups++;
		i = j;
	}
	return groups;
}

/* The snapshot's one allocation: the header, then its arrays by alignment;
 * the source cluster's label (cluster, or NULL) after the groups' labels. */
static struct cluster_eps *alloc_eps(size_t n, size_t groups, size_t ports, size_t alen,
				     size_t labels, const uint8_t *cluster)
{
	size_t cluster_len = cluster ? 1u + cluster[0] : 0;
	struct cluster_eps *e = calloc(1, sizeof *e + n * sizeof *e->addr_nodes +
					       groups * (sizeof *e->name_nodes + sizeof *e->groups) +
					       cluster_ports_bytes(ports) + n * (alen + 1) + labels +
					       cluster_len);

	if (!e)
		return NULL;
	e->addr_nodes = (struct cluster_ep_node *)(e + 1);
	e->name_nodes = e->addr_nodes + n;
	e->groups = (struct cluster_group *)(e->name_nodes + groups);
	e->ports = (struct cluster_port *)(e->groups + groups);
	e->addrs = (uint8_t *)e->ports + cluster_ports_bytes(ports);
	e->flags = e->addrs + n * alen;
	e->labels = e->flags + n;
	if (cluster) {
		memcpy(e->labels + labels, cluster, cluster_len);
		e->cluster = e->labels + labels;
	}
	return e;
}

/*
 * A multi-cluster slice's source cluster as one wire label (its endpoint
 * names have it); false when the slice names none that can be a label:
 * such a slice serves nothing.
 */
static bool source_cluster(const struct kube_json *obj, uint8_t out[1 + DNS_MAX_LABEL])
{
	const struct kube_json *labels = kube_json_get(kube_json_get(obj, "metadata"), "labels");
	const char *id = kube_json_get_text(labels, "multicluster.kubernetes.io/source-cluster");

	return id && cluster_is_label(id) && label_of(out, DNS_MAX_LABEL, id);
}

static void fill_eps(struct cluster_eps *e, const struct entry *v, size_t n)
{
	size_t g = 0, label = 0;

	for (size_t i = 0; i < n; i++) {
		memcpy(e->addrs + i * e->alen, v[i].addr, e->alen);
		e->flags[i] = v[i].flags;
		e->n_ready += (v[i].flags & EP_READY) != 0;
		if (!v[i].hostname || !(v[i].flags & EP_NAME_FIRST))
			continue;
		if (g)
			e->groups[g - 1].end = (uint32_t)i;
		e->groups[g] = (struct cluster_group){.first = (uint32_t)i, .label = (uint32_t)label};
		label_of(e->labels + label, DNS_MAX_LABEL, v[i].hostname); /* checked: a label */
		label += 1u + e->labels[label];
		g++;
	}
	if (g)
		e->groups[g - 1].end = (uint32_t)n;
	for (size_t k = 0; k < g; k++)
		for (uint32_t i = e->groups[k].first; i < e->groups[k].end; i++)
			e->groups[k].ready |= (e->flags[i] & EP_READY) != 0;
}

struct cluster_eps *cluster_parse_eps(struct cluster *c, const struct kube_json *obj,
				      size_t owner_len, uint32_t max_entries, uint8_t *limited,
				      bool *oom)
{
	const char *type = kube_json_get_text(obj, "addressType");
	const struct kube_json *eps = kube_json_get(obj, "endpoints");
	const struct kube_json *ports = kube_json_get(obj, "ports");
	int family = type && strcmp(type, "IPv4") == 0 ? AF_INET
		     : type && strcmp(type, "IPv6") == 0 ? AF_INET6 : 0;
	size_t total = 0, n, named, groups, labels = 0, max_ports = count_ports(ports, c->max_ports);
	struct names names = {0};
	struct entry *v = NULL;
	struct cluster_eps *e = NULL;
	uint8_t cluster[1 + DNS_MAX_LABEL];
	bool cut = false;
	int n_ports;

	*oom = false;
	if (!family) /* FQDN slices name no addresses we could serve */
		return NULL;
	if (c->multicluster) {
		if (!source_cluster(obj, cluster))
			return NULL;
		owner_len += 1u + cluster[0]; /* names are <ep>.<cluster>.<svc> */
	}
	for (const struct kube_json *ep = kube_json_first(eps); ep; ep = ep->next)
		total += kube_json_len(kube_json_get(ep, "addresses"));
	if (total > max_entries)
		total = max_entries + 1; /* one more tells that some were left out */
	if (!total)
		return NULL;
	v = malloc(total * sizeof *v);
	names.v = malloc(kube_json_len(eps) * sizeof *names.v);
	if (!v || !names.v)
		goto oom;
	n = read_entries(c, eps, family, owner_len, v, &names, max_entries, limited);
	if (!n)
		goto out;
	qsort(v, n, sizeof *v, compare_entries);
	n = merge_repeats(v, n);
	if (mark_addresses(v, n) < 0)
		goto oom;
	groups = mark_names(v, n, &named);
	for (size_t i = named; i < n; i++)
		labels += v[i].flags & EP_NAME_FIRST ? 1 + strlen(v[i].hostname) : 0;
	if (!(e = alloc_eps(n, groups, max_ports, family == AF_INET ? 4 : 16, labels,
			    c->multicluster ? cluster : NULL)))
		goto oom;
	e->n = (uint32_t)n;
	e->named = (uint32_t)named;
	e->n_groups = (uint32_t)groups;
	e->family = (uint8_t)family;
	e->alen = family == AF_INET ? 4 : 16;
	fill_eps(e, v, n);
	if ((n_ports = parse_ports(ports, e->ports, max_ports, &cut)) < 0) {
		free(e);
		e = NULL;
		goto oom;
	}
	e->n_ports = (uint16_t)n_ports;
	if (cut)
		*limited |= 1u << LIMIT_PORTS;
	goto out;
oom:
	*oom = true;
out:
	free(v);
	free(names.v);
	return e;
}

const struct cluster_group *cluster_eps_group_of(const struct cluster_eps *e, uint32_t i)
{
	uint32_t lo = 0, hi = e->n_groups;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (e->groups[mid].first <= i)
			lo = mid;
		else
			hi = mid;
	}
	return &e->groups[lo];
}
