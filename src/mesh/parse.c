/*
 * mesh/parse.c — a ServiceEntry (borrowed kube_json) into a draft: its
 * hosts as wire names, where its addresses come from (mesh.h), its
 * exportTo and, for a headless entry, its workloadSelector. Only the
 * fields Istio's name table reads are read; the draft is the writer's, and
 * entries.c turns it into the immutable entry readers see.
 */
#include "mesh/internal.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "dns/wire.h"
#include "log/log.h"

bool mesh_parse_ip(const char *s, struct mesh_ip *ip)
{
	memset(ip, 0, sizeof *ip);
	if (inet_pton(AF_INET, s, ip->addr) == 1)
		ip->family = AF_INET;
	else if (inet_pton(AF_INET6, s, ip->addr) == 1)
		ip->family = AF_INET6;
	return ip->family != 0;
}

/* An address of spec.addresses: an IP, or a CIDR of one address
 * (10.0.0.1/32, fd00::1/128); wider CIDRs give none (Istio's name table
 * skips what is no IP). */
static bool address_of(const char *s, struct mesh_ip *ip)
{
	const char *slash = strchr(s, '/');
	char buf[64];

	if (!slash)
		return mesh_parse_ip(s, ip);
	if ((size_t)(slash - s) >= sizeof buf)
		return false;
	memcpy(buf, s, (size_t)(slash - s));
	buf[slash - s] = '\0';
	return mesh_parse_ip(buf, ip) &&
	       strcmp(slash + 1, ip->family == AF_INET ? "32" : "128") == 0;
}

/* metadata.creationTimestamp (RFC 3339, as the API server writes it), in
 * Unix seconds; 0 when absent or unreadable (then oldest of all). */
static int64_t creation_time(const char *s)
{
	struct tm tm = {0};
	const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;

	return end ? (int64_t)timegm(&tm) : 0;
}

/* A host of spec.hosts as a wire name: lower-cased, a wildcard only as a
 * whole first label ("*.example.com"); false for anything else, and for
 * "*" alone, which would take every name of the node. */
static bool host_name(const char *s, uint8_t out[DNS_MAX_NAME])
{
	int len = dns_name_from_text(s, out);

	if (len <= 1 || (out[0] == 1 && out[1] == '*' && out[2] == 0))
		return false;
	for (const uint8_t *p = out; *p; p += 1 + *p)
		if (memchr(p + 1, '*', *p) && !(p == out && *p == 1))
			return false;
	return true;
}

static bool listed(const uint8_t (*hosts)[DNS_MAX_NAME], size_t n, const uint8_t *name)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(hosts[i], name, dns_name_len(name)) == 0)
			return true;
	return false;
}

static bool read_hosts(const struct kube_json *list, struct mesh_draft *d)
{
	size_t n = kube_json_len(list);

	if (n && !(d->hosts = calloc(n, sizeof *d->hosts)))
		return false;
	for (const struct kube_json *h = kube_json_first(list); h; h = h->next) {
		const char *s = kube_json_text(h);
		uint8_t name[DNS_MAX_NAME];
		if (!s || !host_name(s, name)) {
			log_warn("serviceentry host is no DNS name or wildcard; not served",
				 "serviceentry", d->key, "host", s ? s : "");
			continue;
		}
		if (!listed((const uint8_t(*)[DNS_MAX_NAME])d->hosts, d->n_hosts, name))
			memcpy(d->hosts[d->n_hosts++], name, dns_name_len(name));
	}
	return true;
}

/* exportTo: "*" everyone, "." the entry's namespace, "~" nobody, else
 * namespace names; none at all is the mesh's default, "*". */
static void read_export(const struct kube_json *list, struct mesh_draft *d)
{
	if (!kube_json_len(list)) {
		d->export_flags = EXPORT_ALL;
		return;
	}
	for (const struct kube_json *v = kube_json_first(list); v; v = v->next) {
		const char *s = kube_json_text(v);
		size_t len = s ? strlen(s) : 0;
		if (!s || strcmp(s, "~") == 0)
			continue;
		if (strcmp(s, "*") == 0) {
			d->export_flags |= EXPORT_ALL;
		} else if (strcmp(s, ".") == 0) {
			d->export_flags |= EXPORT_SELF;
		} else if (len && len <= 63 && d->exports_len + 1 + len <= sizeof d->exports &&
			   d->n_export < 255) {
			d->exports[d->exports_len] = (uint8_t)len;
			memcpy(d->exports + d->exports_len + 1, s, len);
			d->exports_len += 1 + len;
			d->n_export++;
		}
	}
}

/* The addresses of list (spec.addresses, or with key "address" spec.endpoints). */
static bool read_ips(const struct kube_json *list, const char *key, struct mesh_draft *d)
{
	size_t n = kube_json_len(list);

	if (n && !(d->ips = calloc(n, sizeof *d->ips)))
		return false;
	for (const struct kube_json *v = kube_json_first(list); v; v = v->next) {
		const char *s = key ? kube_json_get_text(v, key) : kube_json_text(v);
		if (s && (key ? mesh_parse_ip(s, &d->ips[d->n_ips]) : address_of(s, &d->ips[d->n_ips])))
			d->n_ips++;
	}
	return true;
}

/* status.addresses: istiod's allocation, {value, host} each; the last of
 * each family per host counts, as Istio's conversion takes it. */
static bool read_allocated(const struct kube_json *list, struct mesh_draft *d)
{
	if (d->n_hosts && !(d->allocated = calloc(d->n_hosts, sizeof *d->allocated)))
		return false;
	for (const struct kube_json *a = kube_json_first(list); a; a = a->next) {
		const char *host = kube_json_get_text(a, "host");
		const char *value = kube_json_get_text(a, "value");
		uint8_t name[DNS_MAX_NAME];
		struct mesh_ip ip;
		if (!host || !value || dns_name_from_text(host, name) <= 1 || !mesh_parse_ip(value, &ip))
			continue;
		for (size_t i = 0; i < d->n_hosts; i++) {
			if (memcmp(d->hosts[i], name, dns_name_len(name)) != 0)
				continue;
			struct mesh_allocated *al = &d->allocated[i];
			if (ip.family == AF_INET)
				memcpy(al->v4, ip.addr, 4);
			else
				memcpy(al->v6, ip.addr, 16);
			al->has |= ip.family == AF_INET ? 1 : 2;
		}
	}
	return true;
}

/* Istio uses istiod's allocation unless resolution is NONE or the entry opts out. */
static bool uses_allocation(const struct kube_json *meta, const char *resolution)
{
	const struct kube_json *labels = kube_json_get(meta, "labels");
	const char *opt = kube_json_get_text(labels, "networking.istio.io/enable-autoallocate-ip");

	return strcmp(resolution, "NONE") != 0 && !(opt && strcasecmp(opt, "false") == 0);
}

/* One label map's pairs, collected for sorting. */
struct pair {
	const char *k, *v;
};

static int compare_pairs(const void *a, const void *b)
{
	return strcmp(((const struct pair *)a)->k, ((const struct pair *)b)->k);
}

static size_t collect(const struct kube_json *labels, struct pair *out, size_t n)
{
	for (const struct kube_json *l = labels && labels->type == KUBE_JSON_OBJECT ? labels->first
										  : NULL;
	     l; l = l->next) {
		const char *v = kube_json_text(l);
		size_t i;
		if (!v)
			continue;
		for (i = 0; i < n && strcmp(out[i].k, l->key) != 0; i++)
			;
		out[i] = (struct pair){l->key, v};
		n += i == n;
	}
	return n;
}

int mesh_labels(const struct kube_json *labels, const struct kube_json *over, char **pairs,
		size_t *len, char **text_out)
{
	size_t cap = (labels ? labels->count : 0) + (over ? over->count : 0), n, size = 0, tlen = 0;
	struct pair *v = calloc(cap ? cap : 1, sizeof *v);
	char *p, *t = NULL;

	if (!v)
		return -1;
	n = collect(over, v, collect(labels, v, 0));
	qsort(v, n, sizeof *v, compare_pairs);
	for (size_t i = 0; i < n; i++)
		size += strlen(v[i].k) + strlen(v[i].v) + 2;
	if (!(p = malloc(size ? size : 1)) || (text_out && !(t = malloc(size + 1)))) {
		free(p);
		free(v);
		return -1;
	}
	*len = 0;
	for (size_t i = 0; i < n; i++) {
		size_t kl = strlen(v[i].k) + 1, vl = strlen(v[i].v) + 1;
		memcpy(p + *len, v[i].k, kl);
		memcpy(p + *len + kl, v[i].v, vl);
		*len += kl + vl;
		if (t)
			tlen += (size_t)sprintf(t + tlen, "%s%s=%s", i ? "," : "", v[i].k, v[i].v);
	}
	if (t)
		t[tlen] = '\0';
	free(v);
	*pairs = p;
	if (text_out)
		*text_out = t;
	return 0;
}

/* Where the entry's addresses come from, and what it needs for them. */
static bool read_addresses(const struct kube_json *se, struct mesh_draft *d)
{
	const struct kube_json *meta = kube_json_get(se, "metadata");
	const struct kube_json *spec = kube_json_get(se, "spec");
	const struct kube_json *addresses = kube_json_get(spec, "addresses");
	const struct kube_json *selector = kube_json_get(spec, "workloadSelector");
	const char *resolution = kube_json_get_text(spec, "resolution") ?: "NONE";

	if (kube_json_len(addresses)) {
		d->kind = KIND_ADDRESSES;
		return read_ips(addresses, NULL, d);
	}
	if (uses_allocation(meta, resolution)) {
		d->kind = KIND_ALLOCATED;
		return read_allocated(kube_json_get(kube_json_get(se, "status"), "addresses"), d);
	}
	if (strcmp(resolution, "NONE") != 0) {
		d->kind = KIND_UPSTREAM;
		return true;
	}
	d->kind = KIND_HEADLESS;
	if (selector)
		return mesh_labels(kube_json_get(selector, "labels"), NULL, &d->pairs,
				   &d->pairs_len, &d->selector) == 0;
	return read_ips(kube_json_get(spec, "endpoints"), "address", d);
}

bool mesh_parse_entry(const struct kube_json *se, struct mesh_draft *d)
{
	const struct kube_json *meta = kube_json_get(se, "metadata");
	const struct kube_json *spec = kube_json_get(se, "spec");
	const char *ns = kube_json_get_text(meta, "namespace");
	const char *name = kube_json_get_text(meta, "name");
	size_t ns_len = ns ? strlen(ns) : 0;

	memset(d, 0, sizeof *d);
	if (!name || !*name || !ns_len || ns_len > 63 ||
	    snprintf(d->key, sizeof d->key, "%s/%s", ns, name) >= (int)sizeof d->key)
		return false;
	d->ns[0] = (uint8_t)ns_len;
	for (size_t i = 0; i < ns_len; i++)
		d->ns[1 + i] = dns_ascii_lower((uint8_t)ns[i]);
	d->created = creation_time(kube_json_get_text(meta, "creationTimestamp"));
	read_export(kube_json_get(spec, "exportTo"), d);
	if (!read_hosts(kube_json_get(spec, "hosts"), d) || !read_addresses(se, d)) {
		log_error("out of memory; serviceentry not served", "serviceentry", d->key);
		return false;
	}
	return true;
}

void mesh_draft_free(struct mesh_draft *d)
{
	free(d->hosts);
	free(d->allocated);
	free(d->ips);
	free(d->selector);
	free(d->pairs);
}
