/*
 * cluster — one Service's ready endpoint addresses, reported when they
 * change (see cluster_watch_endpoints in cluster.h).
 *
 * The node integration uses this for kube-dns: while localdns is down, DNS
 * to the link-local address is DNATed to these addresses. Only ready
 * endpoints count (publishNotReadyAddresses is about DNS records, not about
 * where to send traffic), each address once, in a stable order, so the
 * report fires only when the set really changed.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/internal.h"

void cluster_watch_endpoints(struct cluster *c, const char *ns, const char *name,
			     cluster_endpoints_fn fn, void *ctx)
{
	struct cluster_endpoint_watch *w = &c->watch;

	const char *labels[] = {name, ns, "svc", NULL};

	free(w->key);
	w->key = NULL;
	if (asprintf(&w->key, "%s/%s", ns, name) < 0)
		w->key = NULL;
	w->owner_len = cluster_name(w->owner, c->apex, labels);
	w->fn = fn;
	w->ctx = ctx;
	w->n_last = 0;
}

const char *cluster_slices_needed(const struct cluster *c)
{
	if (!c || !c->noendpoints)
		return NULL;
	return c->watch.key ? c->watch.key : "";
}

static int compare_ips(const void *a, const void *b)
{
	const struct config_ip *x = a, *y = b;
	size_t len = x->family == AF_INET ? 4 : 16;

	if (x->family != y->family)
		return x->family == AF_INET ? -1 : 1;
	return memcmp(x->family == AF_INET ? (const void *)&x->v4 : (const void *)&x->v6,
		      y->family == AF_INET ? (const void *)&y->v4 : (const void *)&y->v6, len);
}

static void to_config_ip(const struct cluster_ip *ip, struct config_ip *out)
{
	memset(out, 0, sizeof *out);
	out->family = ip->family;
	if (ip->family == AF_INET)
		memcpy(&out->v4, ip->addr, 4);
	else
		memcpy(&out->v6, ip->addr, 16);
	inet_ntop(ip->family, ip->addr, out->text, sizeof out->text);
}

/* The ready addresses of s, sorted and unique; at most CLUSTER_WATCH_MAX. */
static size_t ready_addresses(const struct cluster_service *s, struct config_ip *out)
{
	const struct cluster_eps *e;
	size_t n = 0, unique = 0;

	for (e = cluster_first_eps(s); e; e = cluster_next_eps(e))
		for (uint32_t i = 0; i < e->n && n < CLUSTER_WATCH_MAX; i++) {
			struct cluster_ip ip = {.family = e->family};
			if (!(e->flags[i] & EP_READY))
				continue;
			memcpy(ip.addr, eps_addr(e, i), e->alen);
			to_config_ip(&ip, &out[n++]);
		}
	qsort(out, n, sizeof *out, compare_ips);
	for (size_t i = 0; i < n; i++)
		if (unique == 0 || compare_ips(&out[unique - 1], &out[i]) != 0)
			out[unique++] = out[i];
	return unique;
}

void cluster_report_endpoints(struct cluster *c, const struct cluster_service *s)
{
	struct cluster_endpoint_watch *w = &c->watch;
	struct config_ip now[CLUSTER_WATCH_MAX];
	size_t n;

	if (!w->fn || !w->owner_len || w->owner_len != s->h.owner_len ||
	    memcmp(w->owner, s->owner, s->h.owner_len) != 0 ||
	    !atomic_load_explicit(&c->synced, memory_order_acquire))
		return;
	n = ready_addresses(s, now);
	if (w->reported && n == w->n_last && memcmp(now, w->last, n * sizeof *now) == 0)
		return;
	memcpy(w->last, now, n * sizeof *now);
	w->n_last = n;
	w->reported = true;
	w->fn(w->ctx, now, n);
}

void cluster_report_synced(struct cluster *c, const struct cluster_service *watched)
{
	struct cluster_endpoint_watch *w = &c->watch;

	if (watched) {
		cluster_report_endpoints(c, watched);
	} else if (w->fn && w->owner_len && !w->reported) {
		w->reported = true;
		w->n_last = 0;
		w->fn(w->ctx, NULL, 0);
	}
}

void cluster_watch_free(struct cluster *c)
{
	free(c->watch.key);
	c->watch.key = NULL;
}
