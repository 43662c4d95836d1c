/*
 * metrics/collect.c — what GET /metrics shows: every subsystem's counters,
 * read through its stats getter at the moment of the scrape.
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

#include "cache/cache.h"
#include "cluster/cluster.h"
#include "daemon/daemon.h"
#include "kube/kube.h"
#include "node/node.h"
#include "query/query.h"
#include "server/server.h"
#include "querylog/querylog.h"
#include "upstream/upstream.h"
#include "util/clock.h"

#define N_RCODES 7 /* NOERROR .. REFUSED, then everything else */

static const char *const rcode_names[N_RCODES] = {
	"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "other"};

/* A family with one unlabelled sample. */
static void single(struct metrics_text *t, const char *name, const char *type, const char *help,
		   uint64_t value)
{
	metrics_family(t, name, type, help);
	metrics_sample_u64(t, name, NULL, 0, value);
}

/* A family with one sample per value of one label. */
static void by_label(struct metrics_text *t, const char *name, const char *type, const char *help,
		     const char *label, const char *const *values, const uint64_t *counts, size_t n)
{
	metrics_family(t, name, type, help);
	for (size_t i = 0; i < n; i++) {
		const struct metrics_label l = {label, values[i]};
		metrics_sample_u64(t, name, &l, 1, counts[i]);
	}
}

static double seconds_of_ms(int64_t ms)
{
	return (double)ms / 1000.0;
}

/* ---- queries ----------------------------------------------------------------- */

static void collect_queries(struct metrics_text *t, const struct server *s,
			    const struct upstream_stats *us)
{
	static const char *const protocols[2] = {[QUERY_UDP] = "udp", [QUERY_TCP] = "tcp"};
	const char *qtypes[QUERY_QTYPE_COUNT], *sources[QUERY_SOURCE_COUNT];
	uint64_t rcodes[N_RCODES];
	struct query_stats st;

	server_stats(s, &st);
	for (size_t i = 0; i < QUERY_QTYPE_COUNT; i++)
		qtypes[i] = query_qtype_name((enum query_qtype)i);
	for (size_t i = 0; i < QUERY_SOURCE_COUNT; i++)
		sources[i] = query_source_name((enum query_source)i);
	for (size_t i = 0; i < 6; i++)
		rcodes[i] = st.rcode[i] + us->rcode[i];
	rcodes[6] = st.rcode_other + us->rcode_other;

	by_label(t, "localdns_requests_total", "counter", "DNS queries received, by transport.",
		 "protocol", protocols, st.transport, 2);
	by_label(t, "localdns_requests_by_qtype_total", "counter",
		 "DNS queries whose question parsed, by query type (other: any type not listed).",
		 "qtype", qtypes, st.qtype, QUERY_QTYPE_COUNT);
	by_label(t, "localdns_responses_total", "counter",
		 "DNS replies sent, by rcode (other: BADVERS and above), by the workers and the "
		 "resolver thread.",
		 "rcode", rcode_names, rcodes, N_RCODES);
	by_label(t, "localdns_answers_total", "counter",
		 "DNS queries by the source that took them: static records, the cluster table, "
		 "a live or stale cache entry, the upstream (handed to the resolver), or none "
		 "(refused, malformed or answered by protocol rules).",
		 "source", sources, st.source, QUERY_SOURCE_COUNT);
	single(t, "localdns_dropped_total", "counter",
	       "DNS queries that got no reply from a worker: QR set, runt packets, or the "
	       "resolver's request ring full.",
	       st.dropped);
	single(t, "localdns_truncated_total", "counter", "DNS replies sent with TC=1.",
	       st.truncated + us->truncated);
	single(t, "localdns_not_allowed_total", "counter",
	       "DNS queries answered REFUSED because the client's address is outside "
	       "listen.allow.",
	       st.not_allowed);
	const uint64_t rrl[2] = {st.rrl_slipped, st.rrl_dropped};
	static const char *const rrl_actions[2] = {"slipped", "dropped"};
	by_label(t, "localdns_rrl_limited_total", "counter",
		 "UDP responses over rrl.responses_per_second for their client network: sent "
		 "truncated (slipped, so the client retries over TCP) or not sent (dropped).",
		 "action", rrl_actions, rrl, 2);
	single(t, "localdns_autopath_answers_total", "counter",
	       "Queries a worker answered for another name of the client's search list "
	       "(cluster.autopath: a CNAME to the name that exists).",
	       st.autopath);
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

/* ---- TCP ------------------------------------------------------------------------- */

static void collect_tcp(struct metrics_text *t, const struct server *s)
{
	static const char *const refusals[2] = {"max_connections", "per_client"};
	static const char *const closes[3] = {"idle", "slow_query", "output_budget"};
	struct server_tcp_stats st;

	server_tcp_stats(s, &st);
	single(t, "localdns_tcp_connections", "gauge", "TCP connections open now.", st.connections);
	single(t, "localdns_tcp_output_bytes", "gauge",
	       "TCP reply bytes the clients' sockets have not taken yet, all connections "
	       "(listen.tcp_output_budget caps it).",
	       st.output_bytes);
	by_label(t, "localdns_tcp_refused_total", "counter",
		 "TCP connections closed at accept: listen.tcp_max_connections reached, or "
		 "listen.tcp_max_connections_per_client for the client's address (IPv6: /64).",
		 "reason", refusals, &st.events[SERVER_TCP_REFUSED_MAX_CONNECTIONS], 2);
	by_label(t, "localdns_tcp_closed_total", "counter",
		 "TCP connections localdns closed: idle (listen.tcp_idle_timeout), slow_query (a "
		 "query not complete within listen.tcp_query_timeout of its first byte), "
		 "output_budget (it held the most unsent bytes when listen.tcp_output_budget was "
		 "exceeded).",
		 "reason", closes, &st.events[SERVER_TCP_CLOSED_IDLE], 3);
}

/* ---- answer cache -------------------------------------------------------------- */

static void collect_cache(struct metrics_text *t, const struct cache *c)
{
	struct cache_stats cs;

	cache_stats(c, &cs);
	single(t, "localdns_cache_entries", "gauge",
	       "Answer cache entries held (live, stale, or removed and not yet freed).", cs.entries);
	single(t, "localdns_cache_bytes", "gauge",
	       "Bytes the answer cache accounts for: entries and bucket arrays.", cs.bytes);
	single(t, "localdns_cache_max_bytes", "gauge", "The answer cache's limit (cache.size).",
	       cs.max_bytes);
	single(t, "localdns_cache_hits_total", "counter",
	       "Answer cache lookups answered from a live entry.", cs.hits);
	single(t, "localdns_cache_misses_total", "counter",
	       "Answer cache lookups that found nothing usable.", cs.misses);
	single(t, "localdns_cache_stale_hits_total", "counter",
	       "Answer cache lookups answered from an expired entry (serve-stale).", cs.stale_hits);
	single(t, "localdns_cache_prefetches_total", "counter",
	       "Hits in an entry's last 10% of TTL that started a background refresh.",
	       cs.prefetches);
	single(t, "localdns_cache_inserts_total", "counter",
	       "Entries stored in the answer cache, replacements included.", cs.inserts);
	single(t, "localdns_cache_insert_rejections_total", "counter",
	       "Upstream replies the answer cache would not store.", cs.rejected);
	single(t, "localdns_cache_evictions_total", "counter",
	       "Answer cache entries dropped to make room.", cs.evictions);
}

/* ---- upstream ------------------------------------------------------------------- */

static void collect_upstream(struct metrics_text *t, const struct upstream *u,
			     const struct upstream_stats *us)
{
	static const char *const error_kinds[3] = {"resolution", "bogus", "timeout"};
	static const char *const fallbacks[2] = {"stale", "servfail"};
	const uint64_t errors[3] = {us->failures, us->bogus, us->timeouts};
	const uint64_t fallback_counts[2] = {us->stale, us->servfail};

	single(t, "localdns_upstream_queries_total", "counter", "Queries sent to libunbound.",
	       us->queries);
	single(t, "localdns_upstream_coalesced_total", "counter",
	       "Cache misses that joined an identical query already in flight.", us->coalesced);
	by_label(t, "localdns_upstream_errors_total", "counter",
		 "Upstream trouble: resolution (libunbound gave SERVFAIL or an error), bogus "
		 "(DNSSEC validation failed), timeout (a client's upstream.timeout passed first).",
		 "kind", error_kinds, errors, 3);
	by_label(t, "localdns_upstream_fallback_replies_total", "counter",
		 "Clients the resolver answered without a fresh upstream reply: from a stale "
		 "entry, or SERVFAIL.",
		 "reply", fallbacks, fallback_counts, 2);
	single(t, "localdns_upstream_dropped_total", "counter",
	       "Upstream requests lost to a full request or reply ring or the waiting-client cap.",
	       us->dropped);
	single(t, "localdns_upstream_resolving", "gauge",
	       "libunbound queries running now, on the current and on retired contexts.",
	       us->resolving);
	single(t, "localdns_upstream_queued", "gauge",
	       "Questions waiting to be sent upstream: libunbound runs all it may, or "
	       "upstream.max_rate is reached.",
	       us->queued);
	single(t, "localdns_upstream_flights", "gauge",
	       "Questions the resolver knows now: running, queued, or cooling down after a failure.",
	       us->flights);
	single(t, "localdns_upstream_paced_total", "counter",
	       "Questions that had to wait because upstream.max_rate was reached.", us->paced);
	single(t, "localdns_upstream_client_limited_total", "counter",
	       "Requests answered at once (stale or SERVFAIL) because their client (an IPv4 "
	       "address, an IPv6 /64) already had upstream.max_pending_per_client questions "
	       "or waiting queries.",
	       us->client_limited);
	single(t, "localdns_upstream_retries_total", "counter",
	       "Failed questions asked once more because clients still waited for them.",
	       us->retries);
	by_label(t, "localdns_upstream_results_total", "counter",
		 "libunbound's results by what they said: an rcode, error (no answer at all) or "
		 "bogus (DNSSEC validation failed).",
		 "result", upstream_result_names, us->results, UPSTREAM_RESULTS);
	single(t, "localdns_upstream_context_renewals_total", "counter",
	       "Fresh libunbound contexts started because the current one was full and nothing "
	       "came back from it for upstream.timeout.",
	       us->renewals);
	by_label(t, "localdns_upstream_shed_total", "counter",
		 "Questions given up without asking the upstream, their clients answered from a "
		 "stale entry or with SERVFAIL at once: queue_full (the longest-waiting question "
		 "made room for a new one), table_full (too many questions known at once).",
		 "reason", upstream_shed_names, us->shed, UPSTREAM_SHEDS);
	single(t, "localdns_upstream_failing", "gauge",
	       "1 while the upstream looks down (its last resolution failed or timed out).",
	       upstream_failing(u) ? 1 : 0);
	metrics_family(t, "localdns_upstream_duration_seconds", "histogram",
		       "Time from asking libunbound to its result, whatever the result.");
	metrics_histogram(t, "localdns_upstream_duration_seconds", upstream_latency_bounds,
			  us->latency_le, UPSTREAM_LATENCY_BUCKETS, us->latency_count,
			  us->latency_sum);
}

/* ---- Kubernetes ------------------------------------------------------------------ */

static void collect_kubernetes(struct metrics_text *t, const struct kube_client *k,
			       const struct cluster *c)
{
	const char *resources[KUBE_N_RESOURCES];
	struct kube_status ks;
	struct cluster_stats cs;
	int64_t now = wall_ms();

	kube_status(k, &ks);
	cluster_stats(c, &cs);
	for (size_t i = 0; i < KUBE_N_RESOURCES; i++)
		resources[i] = kube_resource_name((enum kube_resource)i);

	single(t, "localdns_kubernetes_synced", "gauge",
	       "1 once every resource has been listed in full (cluster names are served).",
	       ks.synced ? 1 : 0);
	by_label(t, "localdns_kubernetes_watch_events_total", "counter",
		 "Watch events received, bookmarks included, by resource.", "resource", resources,
		 ks.events, KUBE_N_RESOURCES);
	by_label(t, "localdns_kubernetes_relists_total", "counter",
		 "Complete LISTs after the first (a watch expired with 410 Gone), by resource.",
		 "resource", resources, ks.relists, KUBE_N_RESOURCES);
	single(t, "localdns_kubernetes_errors_total", "counter",
	       "Failed Kubernetes API requests (connection, 5xx, 401/403, broken streams).",
	       ks.errors);
	by_label(t, "localdns_kubernetes_objects", "gauge", "Objects known now, by resource.",
		 "resource", resources, ks.objects, KUBE_N_RESOURCES);
	by_label(t, "localdns_kubernetes_list_pages_too_large_total", "counter",
		 "LIST responses abandoned past kubernetes.list_max_bytes (the page is asked for "
		 "again with fewer objects, or, at one object, fails), by resource.",
		 "resource", resources, ks.pages_too_large, KUBE_N_RESOURCES);
	by_label(t, "localdns_kubernetes_list_page_limit", "gauge",
		 "Objects the next LIST page asks for (limit=): 500, 100 for endpointslices, "
		 "less after a response past kubernetes.list_max_bytes.",
		 "resource", resources, ks.page_limit, KUBE_N_RESOURCES);

	metrics_family(t, "localdns_kubernetes_last_sync_timestamp_seconds", "gauge",
		       "When the last full LIST of a resource ended (the first sync or a relist), "
		       "Unix time.");
	for (size_t i = 0; i < KUBE_N_RESOURCES; i++) {
		const struct metrics_label l = {"resource", resources[i]};
		if (ks.last_list_ms[i])
			metrics_sample(t, "localdns_kubernetes_last_sync_timestamp_seconds", &l, 1,
				       seconds_of_ms(ks.last_list_ms[i]));
	}
	metrics_family(t, "localdns_kubernetes_last_contact_timestamp_seconds", "gauge",
		       "When the Kubernetes API last answered or sent an event, Unix time.");
	if (ks.last_contact_ms)
		metrics_sample(t, "localdns_kubernetes_last_contact_timestamp_seconds", NULL, 0,
			       seconds_of_ms(ks.last_contact_ms));
	metrics_family(t, "localdns_kubernetes_data_age_seconds", "gauge",
		       "How old the served cluster data may be: seconds since the API was last "
		       "heard from (after the first sync; bookmarks keep it low while all is well).");
	if (ks.synced && ks.last_contact_ms)
		metrics_sample(t, "localdns_kubernetes_data_age_seconds", NULL, 0,
			       now > ks.last_contact_ms ? seconds_of_ms(now - ks.last_contact_ms) : 0);
	single(t, "localdns_cluster_names", "gauge", "Owner names in the cluster table.", cs.names);

	const char *limits[CLUSTER_LIMITS];
	for (unsigned i = 0; i < CLUSTER_LIMITS; i++)
		limits[i] = cluster_limit_name(i);
	by_label(t, "localdns_cluster_limited_total", "counter",
		 "Service and EndpointSlice changes cut by a bound (cluster.max_ports_per_service, "
		 "cluster.max_endpoints_per_service, names past 255 bytes), by bound.",
		 "limit", limits, cs.limited, CLUSTER_LIMITS);
}

/* ---- node, config, build ------------------------------------------------------------ */

static void collect_node(struct metrics_text *t, struct node *node)
{
	static const char *const kinds[2] = {"link", "table"};
	struct node_stats ns;

	node_stats(node, &ns);
	const uint64_t counts[2] = {ns.link_repairs, ns.table_repairs};
	by_label(t, "localdns_node_repairs_total", "counter",
		 "Repairs of the node integration: the link or an address put back, or the "
		 "nftables table rebuilt after a change.",
		 "kind", kinds, counts, 2);
}

static void collect_config(struct metrics_text *t, const struct daemon *d, double start_time)
{
	static const char *const results[2] = {"success", "failure"};
	struct daemon_reload_stats rs;

	daemon_reload_stats(d, &rs);
	const uint64_t counts[2] = {rs.ok, rs.failed};
	by_label(t, "localdns_config_reloads_total", "counter", "Configuration reloads, by result.",
		 "result", results, counts, 2);
	metrics_family(t, "localdns_config_last_reload_success_timestamp_seconds", "gauge",
		       "When the configuration was last loaded successfully (at start-up, or the "
		       "last successful reload), Unix time.");
	metrics_sample(t, "localdns_config_last_reload_success_timestamp_seconds", NULL, 0,
		       rs.last_ok_ms ? seconds_of_ms(rs.last_ok_ms) : start_time);
}

static void collect_query_log(struct metrics_text *t)
{
	single(t, "localdns_query_log_dropped_total", "counter",
	       "Sampled query log records dropped because the log thread fell behind.",
	       querylog_dropped());
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
	struct upstream_stats us;
	struct process_figures proc = {0};
	bool have_proc = read_self_stat(&proc);

	metrics_text_init(&t);
	upstream_stats(d->upstream, &us);
	collect_queries(&t, d->server, &us);
	collect_tcp(&t, d->server);
	collect_heartbeats(&t, d);
	collect_cache(&t, d->cache);
	collect_upstream(&t, d->upstream, &us);
	if (d->kube)
		collect_kubernetes(&t, d->kube, d->cluster);
	if (d->node)
		collect_node(&t, d->node);
	collect_state(&t, d);
	collect_config(&t, d, proc.start_time);
	collect_query_log(&t);
	collect_build(&t);
	if (have_proc)
		collect_process(&t, &proc);
	return metrics_text_take(&t, len);
}
