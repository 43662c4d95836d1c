/*
 * counters/read.c — one read of every subsystem's stats getter, and the
 * walks over the tables that ctl, /metrics and the exit log line share.
 */
#include "counters/counters.h"

#include <stdio.h>
#include <string.h>

#include "cluster/cluster.h"
#include "mesh/mesh.h"
#include "daemon/daemon.h"
#include "dnstap/dnstap.h"
#include "querylog/querylog.h"

/* A reply is counted once, by whoever sent it: a worker, or the resolver
 * thread for the clients it answered. Both views show the total. */
static void add_resolver_replies(struct query_stats *q, const struct upstream_stats *u)
{
	for (size_t i = 0; i < DNS_RCODE_SLOTS; i++)
		q->rcode[i] += u->rcode[i];
	q->truncated += u->truncated;
	q->rrl_slipped += u->rrl_slipped;
	q->rrl_dropped += u->rrl_dropped;
	q->dns64_synthesized += u->dns64_synthesized;
}

void counters_read(const struct daemon *d, struct counter_values *out)
{
	struct daemon_reload_stats rs;

	memset(out, 0, sizeof *out);
	server_stats(d->server, &out->queries);
	server_tcp_stats(d->server, &out->tcp);
	cache_stats(d->cache, &out->cache);
	upstream_stats(d->upstream, &out->upstream);
	add_resolver_replies(&out->queries, &out->upstream);
	out->upstream_failing = upstream_failing(d->upstream);
	if (d->kube) {
		struct cluster_stats cs;

		out->kube_enabled = 1;
		kube_status(d->kube, &out->kube);
		out->kube_synced = out->kube.synced;
		out->kube_last_contact_time = (uint64_t)(out->kube.last_contact_ms / 1000);
		cluster_stats(d->cluster, &cs);
		out->cluster_names = cs.names;
		memcpy(out->cluster_limited, cs.limited, sizeof out->cluster_limited);
	}
	if (d->mesh) {
		struct mesh_stats ms;

		mesh_stats(d->mesh, &ms);
		out->mesh_hosts = ms.hosts;
	}
	out->node_enabled = d->node != NULL;
	node_stats(d->node, &out->node); /* zeros without node integration */
	daemon_reload_stats(d, &rs);
	out->reloads_ok = rs.ok;
	out->reloads_failed = rs.failed;
	out->reload_last_ok_ms = rs.last_ok_ms;
	out->reload_last_success_time = (uint64_t)(rs.last_ok_ms / 1000);
	out->query_log_dropped = querylog_dropped();
	out->dnstap_sent = dnstap_sent();
	out->dnstap_dropped = dnstap_dropped();
	out->dnstap_connects = dnstap_connects();
	out->dnstap_connected = dnstap_connected();
	http_stats(&out->http);
	out->keeper_enabled = d->keeper != NULL;
	keeper_link_stats(d->keeper, &out->keeper); /* zeros without a keeper */
}

/* A row's ctl lines: one for a single value or a stat_sum run, else one per
 * value of the run, named by the family's values. */
static void row_stats(const struct counter *c, const struct counter_values *v,
		      void (*fn)(const char *name, uint64_t value, void *arg), void *arg)
{
	unsigned n = counter_run(c);
	uint64_t sum = 0;
	char name[64];

	if (c->stat_sum || c->n == 0) {
		for (unsigned i = 0; i < n; i++)
			sum += counter_value(v, c->at, i);
		fn(c->stat, sum, arg);
		return;
	}
	const struct counter_family *f = c->family;
	const char *const *suffixes = f->stat_values ? f->stat_values : f->values;
	for (unsigned i = 0; i < n; i++) {
		snprintf(name, sizeof name, "%s%s", c->stat, suffixes[c->label + i]);
		fn(name, counter_value(v, c->at, i), arg);
	}
}

void counters_each_stat(const struct counter_values *v,
			void (*fn)(const char *name, uint64_t value, void *arg), void *arg)
{
	for (size_t t = 0; t < counters_n_tables; t++) {
		const struct counter_table *table = counters_tables[t];
		for (size_t r = 0; r < table->n_rows; r++)
			if (table->rows[r].stat)
				row_stats(&table->rows[r], v, fn, arg);
	}
}

void counters_each_log(const struct counter_values *v,
		       void (*fn)(const char *key, uint64_t value, void *arg), void *arg)
{
	for (size_t t = 0; t < counters_n_tables; t++) {
		const struct counter_table *table = counters_tables[t];
		for (size_t r = 0; r < table->n_rows; r++)
			if (table->rows[r].log)
				fn(table->rows[r].log, counter_value(v, table->rows[r].at, 0), arg);
	}
}

bool counters_family_value(const struct counter_table *t, const struct counter_family *f,
			   unsigned i, const struct counter_values *v, uint64_t *out)
{
	for (size_t r = 0; r < t->n_rows; r++) {
		const struct counter *c = &t->rows[r];
		if (c->family != f || c->ctl_only || i < c->label || i >= c->label + counter_run(c))
			continue;
		*out = counter_value(v, c->at, i - c->label);
		return true;
	}
	return false;
}
