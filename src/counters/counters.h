/*
 * counters — the one list of localdns's counters and gauges, and where to
 * read each: `localdns ctl stats` (text and --json), GET /metrics and the
 * exit log line are all written from it.
 *
 * Owns: the tables (table.c, one per subsystem): each counter once, with
 * its `ctl stats` name, its /metrics family (name, type, unit, help, label
 * and label values) and its exit-log key, and where its value sits in a
 * struct counter_values; and reading every subsystem's stats getter into
 * one struct counter_values (read.c), where the resolver's replies are
 * added to the workers' (so ctl and /metrics report the same total).
 *
 * Must never: count anything itself or be read on the query path (the
 * subsystems count in their own per-worker or atomic counters, unchanged;
 * this only says where to find them), allocate, or take a lock a worker
 * could wait on. Figures that are not plain integers (heartbeat ages,
 * timestamps, the latency histogram, the process's /proc figures) stay
 * with their one reader, metrics/collect.c.
 *
 * Contracts: the `ctl stats` names and their order are an interface for
 * operators' scripts (docs/ctl.md): a table's rows are in that order; add,
 * never rename or reorder. The /metrics families (docs/metrics.md) are
 * written in the order of each table's family list, their samples in the
 * order of the label values.
 */
#ifndef LOCALDNS_COUNTERS_H
#define LOCALDNS_COUNTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "cluster/cluster.h"
#include "http/http.h"
#include "keeper/keeper.h"
#include "kube/kube.h"
#include "node/node.h"
#include "query/query.h"
#include "server/server.h"
#include "upstream/upstream.h"

struct daemon;

/* Every value the tables name, read at one moment (each exact on its own;
 * the set is not a snapshot: see server_stats and upstream_stats). */
struct counter_values {
	/* The workers' query counters; rcode and truncated also hold the
	 * resolver thread's replies (upstream.rcode, upstream.truncated). */
	struct query_stats queries;
	uint64_t control_lookups;   /* the control threads' lookups: control/ fills it in */
	struct server_tcp_stats tcp;
	struct cache_stats cache;
	struct upstream_stats upstream;
	uint64_t upstream_failing;  /* 0 or 1 */
	uint64_t kube_enabled;      /* 0 or 1: without it, kube is all zeros */
	struct kube_status kube;
	uint64_t kube_synced;       /* kube.synced */
	uint64_t kube_last_contact_time; /* Unix seconds; 0: never */
	uint64_t cluster_names;
	uint64_t cluster_limited[CLUSTER_LIMITS];
	uint64_t mesh_hosts;        /* 0 without mesh.istio */
	uint64_t node_enabled;      /* 0 or 1: without it, node is all zeros */
	struct node_stats node;
	uint64_t reloads_ok, reloads_failed;
	uint64_t reload_last_success_time; /* Unix seconds; 0: never */
	int64_t reload_last_ok_ms;  /* the same, wall clock milliseconds */
	uint64_t query_log_dropped;
	uint64_t dnstap_sent, dnstap_dropped, dnstap_connects, dnstap_connected;
	struct http_stats http;
	uint64_t keeper_enabled;    /* 0 or 1 (keeper.socket): without it, keeper is all zeros */
	struct keeper_stats keeper;
};

/* Read every subsystem's counters into out (control_lookups left 0). Any
 * thread but a worker's or the resolver's. */
void counters_read(const struct daemon *d, struct counter_values *out);

enum counter_type { COUNTER_COUNTER, COUNTER_GAUGE };

/* One /metrics family: its HELP and TYPE, and its label's values (none:
 * one unlabelled sample). */
struct counter_family {
	const char *name;
	enum counter_type type;
	const char *unit;                 /* base unit in the name ("bytes"), "" for a count */
	const char *help;
	const char *label;                /* NULL: unlabelled */
	const char *const *values;        /* the label's values, in sample order */
	unsigned n_values;
	const char *const *stat_values;   /* ctl's names for them; NULL: the same */
};

/*
 * One counter, or a run of a labelled family's values read from
 * consecutive uint64_t: family->values[label .. label+n).
 */
struct counter {
	const char *stat;     /* ctl stats name; a run: the prefix of each value's
				 name (stat + stat_values[i]); NULL: not in ctl */
	bool stat_sum;        /* ctl shows the run as one line: stat, the sum */
	const struct counter_family *family; /* NULL: ctl only */
	bool ctl_only;        /* another row gives the family these values */
	unsigned label;       /* the first value's index in family->values */
	unsigned n;           /* values in the run (0: 1) */
	size_t at;            /* offsetof(struct counter_values, the first value) */
	const char *log;      /* the exit log line's key; NULL: not logged */
};

/* One subsystem's counters: rows in ctl order, families in /metrics order. */
struct counter_table {
	const char *subsystem;
	const struct counter *rows;
	size_t n_rows;
	const struct counter_family *const *families;
	size_t n_families;
	size_t shown_if;      /* /metrics leaves the families out unless the
				 uint64_t here is non-zero; COUNTERS_ALWAYS */
};
#define COUNTERS_ALWAYS SIZE_MAX

/* The tables, in ctl order (table.c). */
extern const struct counter_table counters_queries, counters_tcp, counters_cache,
	counters_upstream, counters_kubernetes, counters_cluster, counters_node, counters_config,
	counters_query_log, counters_dnstap, counters_http, counters_keeper;
extern const struct counter_table *const counters_tables[];
extern const size_t counters_n_tables;

/* The value at a row's offset (plus i values into its run). */
static inline uint64_t counter_value(const struct counter_values *v, size_t at, unsigned i)
{
	return ((const uint64_t *)((const char *)v + at))[i];
}

static inline unsigned counter_run(const struct counter *c)
{
	return c->n ? c->n : 1;
}

/* Every ctl stats line in order: fn(name, value, arg). */
void counters_each_stat(const struct counter_values *v,
			void (*fn)(const char *name, uint64_t value, void *arg), void *arg);

/* Every exit-log field in table order: fn(key, value, arg). */
void counters_each_log(const struct counter_values *v,
		       void (*fn)(const char *key, uint64_t value, void *arg), void *arg);

/* The family's value for label index i (0 unlabelled), and false when no
 * row gives it one. */
bool counters_family_value(const struct counter_table *t, const struct counter_family *f,
			   unsigned i, const struct counter_values *v, uint64_t *out);

#endif
