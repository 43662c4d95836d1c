/*
 * metrics/collect.c — what GET /metrics shows: the counter registry's
 * families (src/counters/, read through each subsystem's stats getter at
 * the moment of the scrape), and between them the figures that are not
 * plain counters: loop heartbeats, the upstream latency histogram,
 * Kubernetes timestamps, health, the build and the process.
 *
 * Consistency: each getter reads its counters one by one while the
 * subsystem runs, so two related values may be a few events apart; each
 * counter on its own only grows. Workers' counters are plain integers each
 * worker alone writes (no atomics on the query path); reading them from
 * this thread is the racy-but-whole read server_stats documents.
 *
 * Families of a subsystem that is not running (Kubernetes, the node
 * integration) are left out rather than shown as zero.
 */
#include "metrics/metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "counters/counters.h"
#include "daemon/daemon.h"
#include "kube/kube.h"
#include "node/node.h"
#include "server/server.h"
#include "upstream/upstream.h"
#include "util/clock.h"

static const char *const type_names[] = {[COUNTER_COUNTER] = "counter",
					  [COUNTER_GAUGE] = "gauge"};

/* A family with one unlabelled sample. */
static void single(struct metrics_text *t, const char *name, const char *type, const char *help,
		   uint64_t value)
{
	metrics_family(t, name, type, help);
	metrics_sample_u64(t, name, NULL, 0, value);
}

static double seconds_of_ms(int64_t ms)
{
	return (double)ms / 1000.0;
}

/* A registry table's families, each with its samples in label order; none
 * when the table's subsystem is not running. */
static void collect_table(struct metrics_text *t, const struct counter_table *table,
			  const struct counter_values *v)
{
	if (table->shown_if != COUNTERS_ALWAYS && !counter_value(v, table->shown_if, 0))
		return;
	for (size_t i = 0; i < table->n_families; i++) {
		const struct counter_family *f = table->families[i];
		unsigned n = f->label ? f->n_values : 1;
		uint64_t value;

		metrics_family(t, f->name, type_names[f->type], f->help);
		for (unsigned k = 0; k < n; k++) {
			if (!counters_family_value(table, f, k, v, &value))
				continue;
			const struct metrics_label l = {f->label, f->label ? f->values[k] : NULL};
			metrics_sample_u64(t, f->name, &l, f->label ? 1 : 0, value);
		}
	}
}

/* ---- loops ----------------------------------------------------------------------- */

static void heartbeat_sample(struct metrics_text *t, const char *loop, uint64_t beat_ms,
			     uint64_t now_ms)
{
	const struct metrics_label l = {"loop", loop};

	metrics_sample(t, "localdns_loop_heartbeat_age_seconds", &l, 1,
		       now_ms > beat_ms ? (double)(now_ms - beat_ms) / 1000.0 : 0);
}

/* How long since each event loop last went round: each turns at least once a second. */
static void collect_heartbeats(struct metrics_text *t, const struct daemon *d)
{
	uint64_t now = (uint64_t)monotonic_ms();
	char name[32];

	metrics_family(t, "localdns_loop_heartbeat_age_seconds", "gauge",
		       "Seconds since each event loop last went round (each turns at least once a "
		       "second when idle; /health fails past 5 s, 30 s for kubernetes).");
	for (unsigned i = 0; i < server_workers(d->server); i++) {
		snprintf(name, sizeof name, "worker%u", i);
		heartbeat_sample(t, name, server_heartbeat_ms(d->server, i), now);
	}
	heartbeat_sample(t, "resolver", upstream_heartbeat_ms(d->upstream), now);
	if (node_heartbeat_ms(d->node))
		heartbeat_sample(t, "node", node_heartbeat_ms(d->node), now);
	if (d->kube) {
		struct kube_status ks;
		kube_status(d->kube, &ks);
		heartbeat_sample(t, "kubernetes", (uint64_t)ks.heartbeat_ms, now);
	}
}

/* ---- upstream ------------------------------------------------------------------- */

static void collect_upstream_latency(struct metrics_text *t, const struct upstream_stats *us)
{
	metrics_family(t, "localdns_upstream_duration_seconds", "histogram",
		       "Time from asking libunbound to its result, whatever the result.");
	metrics_histogram(t, "localdns_upstream_duration_seconds", upstream_latency_bounds,
			  us->latency_le, UPSTREAM_LATENCY_BUCKETS, us->latency_count,
			  us->latency_sum);
}

/* ---- Kubernetes ------------------------------------------------------------------ */

/* When the API was last heard from and how old the served data may be. */
static void collect_kubernetes_times(struct metrics_text *t, const struct kube_status *ks)
{
	int64_t now = wall_ms();

	metrics_family(t, "localdns_kubernetes_last_sync_timestamp_seconds", "gauge",
		       "When the last (re)list of a resource ended (the first sync or a relist), "
		       "Unix time.");
	for (size_t i = 0; i < KUBE_N_RESOURCES; i++) {
		const struct metrics_label l = {"resource", kube_resource_names[i]};
		if (ks->last_list_ms[i])
			metrics_sample(t, "localdns_kubernetes_last_sync_timestamp_seconds", &l, 1,
				       seconds_of_ms(ks->last_list_ms[i]));
	}
	metrics_family(t, "localdns_kubernetes_last_contact_timestamp_seconds", "gauge",
		       "When the Kubernetes API last answered or sent an event, Unix time.");
	if (ks->last_contact_ms)
		metrics_sample(t, "localdns_kubernetes_last_contact_timestamp_seconds", NULL, 0,
			       seconds_of_ms(ks->last_contact_ms));
	metrics_family(t, "localdns_kubernetes_data_age_seconds", "gauge",
		       "How old the served cluster data may be: seconds since the API was last "
		       "heard from (after the first sync; bookmarks keep it low while all is well).");
	if (ks->synced && ks->last_contact_ms)
		metrics_sample(t, "localdns_kubernetes_data_age_seconds", NULL, 0,
			       now > ks->last_contact_ms ? seconds_of_ms(now - ks->last_contact_ms)
							 : 0);
}

/* ---- node, config, build ------------------------------------------------------------ */

static void collect_last_reload(struct metrics_text *t, const struct counter_values *v,
				double start_time)
{
	metrics_family(t, "localdns_config_last_reload_success_timestamp_seconds", "gauge",
		       "When the configuration was last loaded successfully (at start-up, or the "
		       "last successful reload), Unix time.");
	metrics_sample(t, "localdns_config_last_reload_success_timestamp_seconds", NULL, 0,
		       v->reload_last_ok_ms ? seconds_of_ms(v->reload_last_ok_ms) : start_time);
}

static void collect_build(struct metrics_text *t)
{
	const struct metrics_label labels[2] = {{"version", LOCALDNS_VERSION},
						{"revision", LOCALDNS_GIT_REV}};

	metrics_family(t, "localdns_build_info", "gauge",
		       "Always 1; the labels say which build is running.");
	metrics_sample_u64(t, "localdns_build_info", labels, 2, 1);
}

/* ---- the process, from /proc ----------------------------------------------------------- */

struct process_figures {
	double cpu_seconds;
	double start_time;       /* Unix seconds */
	uint64_t virtual_bytes;
	uint64_t resident_bytes;
};

/* The boot time, Unix seconds: /proc/stat's btime line. */
static bool boot_time(unsigned long long *out)
{
	char line[256];
	bool found = false;
	FILE *f = fopen("/proc/stat", "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof line, f))
		found = sscanf(line, "btime %llu", out) == 1;
	fclose(f);
	return found;
}

/* CPU time, start time and memory from /proc/self/stat (proc(5), fields 14-15, 22-24). */
static bool read_self_stat(struct process_figures *p)
{
	char buf[1024];
	unsigned long long utime, stime, start, vsize, boot;
	long long rss;
	FILE *f = fopen("/proc/self/stat", "re");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The command name may hold spaces and parentheses: skip past the last ')'. */
	const char *rest = strrchr(buf, ')');
	if (!rest || sscanf(rest + 2,
			    "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d "
			    "%*d %*d %*d %llu %llu %lld",
			    &utime, &stime, &start, &vsize, &rss) != 5 ||
	    !boot_time(&boot))
		return false;
	double ticks = (double)sysconf(_SC_CLK_TCK);
	p->cpu_seconds = (double)(utime + stime) / ticks;
	p->start_time = (double)boot + (double)start / ticks;
	p->virtual_bytes = vsize;
	p->resident_bytes = rss > 0 ? (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
	return true;
}

static uint64_t count_open_fds(void)
{
	uint64_t n = 0;
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;

	if (!dir)
		return 0;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n - 1; /* the directory's own descriptor */
}

/* A limit read from path: a number below 2^62 (cgroup v1 writes ~2^63 for none, v2 "max"). */
static bool read_limit(const char *path, uint64_t *out)
{
	char buf[64];
	unsigned long long v;
	FILE *f = fopen(path, "re");
	bool ok;

	if (!f)
		return false;
	ok = fgets(buf, sizeof buf, f) && sscanf(buf, "%llu", &v) == 1 && v < (1ull << 62);
	fclose(f);
	if (ok)
		*out = v;
	return ok;
}

/*
 * The memory limit of the cgroup we run in (a container's), from
 * /proc/self/cgroup: cgroup v2 ("0::PATH", memory.max) or v1 ("N:memory:PATH",
 * memory.limit_in_bytes). Inside a container's cgroup namespace PATH is "/".
 * false when there is none.
 */
static bool cgroup_memory_limit(uint64_t *out)
{
	char line[512], path[640];
	bool found = false;
	FILE *f = fopen("/proc/self/cgroup", "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		char *controllers = strchr(line, ':'), *where;
		if (!controllers || !(where = strchr(controllers + 1, ':')))
			continue;
		*where++ = '\0';
		controllers++;
		if (strcmp(line, "0") == 0 && *controllers == '\0')
			snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max",
				 strcmp(where, "/") ? where : "");
		else if (strstr(controllers, "memory"))
			snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes",
				 strcmp(where, "/") ? where : "");
		else
			continue;
		found = read_limit(path, out);
	}
	fclose(f);
	return found;
}

/* What /health and /ready say, and the memory limit: the alerts' inputs. */
static void collect_state(struct metrics_text *t, const struct daemon *d)
{
	char why[256];
	uint64_t limit;

	single(t, "localdns_healthy", "gauge",
	       "1 while /health says ok: every event loop turns (0: one is stuck).",
	       daemon_alive(d, why, sizeof why));
	single(t, "localdns_ready", "gauge",
	       "1 while /ready says ready: serving, and the first Kubernetes sync done.",
	       daemon_ready(d, why, sizeof why));
	if (cgroup_memory_limit(&limit))
		single(t, "localdns_memory_limit_bytes", "gauge",
		       "The memory limit of localdns's cgroup (its container's; cgroup v2 "
		       "memory.max or v1 memory.limit_in_bytes); absent without one.",
		       limit);
}

static void collect_process(struct metrics_text *t, const struct process_figures *p)
{
	struct rlimit rl;

	metrics_family(t, "process_cpu_seconds_total", "counter",
		       "User and system CPU time spent, in seconds.");
	metrics_sample(t, "process_cpu_seconds_total", NULL, 0, p->cpu_seconds);
	single(t, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
	       p->resident_bytes);
	single(t, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
	       p->virtual_bytes);
	metrics_family(t, "process_start_time_seconds", "gauge",
		       "Start time of the process since the Unix epoch, in seconds.");
	metrics_sample(t, "process_start_time_seconds", NULL, 0, p->start_time);
	single(t, "process_open_fds", "gauge", "Open file descriptors.", count_open_fds());
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		single(t, "process_max_fds", "gauge", "Limit on open file descriptors.",
		       rl.rlim_cur);
}

char *metrics_collect(const struct daemon *d, size_t *len)
{
	struct metrics_text t;
	struct counter_values v;
	struct process_figures proc = {0};
	bool have_proc = read_self_stat(&proc);

	metrics_text_init(&t);
	counters_read(d, &v);
	collect_table(&t, &counters_queries, &v);
	collect_table(&t, &counters_tcp, &v);
	collect_heartbeats(&t, d);
	collect_table(&t, &counters_cache, &v);
	collect_table(&t, &counters_upstream, &v);
	collect_upstream_latency(&t, &v.upstream);
	if (v.kube_enabled) {
		collect_table(&t, &counters_kubernetes, &v);
		collect_kubernetes_times(&t, &v.kube);
		collect_table(&t, &counters_cluster, &v);
	}
	collect_table(&t, &counters_node, &v);
	collect_table(&t, &counters_keeper, &v);
	collect_state(&t, d);
	collect_table(&t, &counters_config, &v);
	collect_last_reload(&t, &v, proc.start_time);
	collect_table(&t, &counters_query_log, &v);
	collect_table(&t, &counters_dnstap, &v);
	collect_table(&t, &counters_http, &v);
	collect_build(&t);
	if (have_proc)
		collect_process(&t, &proc);
	return metrics_text_take(&t, len);
}
