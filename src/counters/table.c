/*
 * counters/table.c — every counter, one table per subsystem.
 *
 * A table's rows are in `ctl stats` order (an operator contract: append
 * only); its family list is in /metrics order. A row names the family it
 * gives values to; a family written by no row is an error the unit test
 * catches (tests/unit/test_counters.c).
 */
#include "counters/counters.h"

#include "dns/dns.h"

#define AT(field) offsetof(struct counter_values, field)
#define N(array) (sizeof(array) / sizeof((array)[0]))
#define TABLE(id, name, rows_, families_, shown)                                            \
	const struct counter_table id = {name, rows_, N(rows_), families_, N(families_), shown}

/* Families without labels: a count, or a gauge (in a base unit: "bytes"). */
#define PLAIN(id, name, type, unit, help)                                                   \
	static const struct counter_family id = {name, type, unit, help, NULL, NULL, 0, NULL}
#define PLAIN_COUNTER(id, name, help) PLAIN(id, name, COUNTER_COUNTER, "", help)
#define PLAIN_GAUGE(id, name, help) PLAIN(id, name, COUNTER_GAUGE, "", help)
#define PLAIN_GAUGE_IN(id, name, unit, help) PLAIN(id, name, COUNTER_GAUGE, unit, help)

/* Families with one label: its name, its values in sample order (ctl names them alike). */
#define LABELLED(id, name, type, help, label, values, n)                                    \
	static const struct counter_family id = {name, type, "", help, label, values, n, NULL}
#define LABELLED_COUNTER(id, name, help, label, values, n)                                  \
	LABELLED(id, name, COUNTER_COUNTER, help, label, values, n)
#define LABELLED_GAUGE(id, name, help, label, values, n)                                    \
	LABELLED(id, name, COUNTER_GAUGE, help, label, values, n)

/* ---- queries: the workers (server/, query/), the resolver's replies -------- */

static const char *const protocols[] = {[QUERY_UDP] = "udp", [QUERY_TCP] = "tcp"};
static const char *const rcodes[DNS_RCODE_SLOTS] = {"NOERROR", "FORMERR", "SERVFAIL",
						    "NXDOMAIN", "NOTIMP", "REFUSED", "other"};
static const char *const rcode_stats[DNS_RCODE_SLOTS] = {"noerror", "formerr", "servfail",
							 "nxdomain", "notimp", "refused", "other"};
static const char *const rrl_actions[] = {"slipped", "dropped"};

LABELLED_COUNTER(requests, "localdns_requests_total",
	"DNS queries received, by transport.",
	"protocol", protocols, N(protocols));
LABELLED_COUNTER(requests_by_qtype, "localdns_requests_by_qtype_total",
	"DNS queries whose question parsed, by query type (other: any type not listed).",
	"qtype", query_qtype_names, QUERY_QTYPE_COUNT);
static const struct counter_family responses = {
	"localdns_responses_total", COUNTER_COUNTER, "",
	"DNS replies sent, by rcode (other: BADVERS and above), by the workers and the "
	"resolver thread.",
	"rcode", rcodes, DNS_RCODE_SLOTS, rcode_stats};
LABELLED_COUNTER(answers, "localdns_answers_total",
	"DNS queries by the source that took them: static records, the cluster table, "
	"a live or stale cache entry, the upstream (handed to the resolver), or none "
	"(refused, malformed or answered by protocol rules).",
	"source", query_source_names, QUERY_SOURCE_COUNT);
PLAIN_COUNTER(dropped, "localdns_dropped_total",
	"DNS queries that got no reply from a worker: QR set, runt packets, or the "
	"resolver's request ring full.");
PLAIN_COUNTER(truncated, "localdns_truncated_total",
	"DNS replies sent with TC=1.");
PLAIN_COUNTER(not_allowed, "localdns_not_allowed_total",
	"DNS queries answered REFUSED because the client's address is outside "
	"listen.allow.");
LABELLED_COUNTER(rrl_limited, "localdns_rrl_limited_total",
	"UDP responses over rrl.responses_per_second for their client network and answer, "
	"by the workers and the resolver thread: sent truncated (slipped, so the client "
	"retries over TCP) or not sent (dropped).",
	"action", rrl_actions, N(rrl_actions));
PLAIN_COUNTER(autopath, "localdns_autopath_answers_total",
	"Queries a worker answered for another name of the client's search list "
	"(cluster.autopath: a CNAME to the name that exists).");
PLAIN_COUNTER(dns64_synthesized, "localdns_dns64_synthesized_total",
	"AAAA answers made from A records under dns64.prefix (RFC 6147).");
PLAIN_COUNTER(udp_busy_wakeups, "localdns_udp_busy_wakeups_total",
	"Worker wake-ups whose first read of a UDP socket filled a whole batch (64 "
	"queries): the worker was behind, at or near the queries a core can answer.");

static const struct counter_family *const query_families[] = {
	&requests, &requests_by_qtype, &responses, &answers, &dropped, &truncated,
	&not_allowed, &rrl_limited, &autopath, &udp_busy_wakeups, &dns64_synthesized};

static const struct counter query_rows[] = {
	{.stat = "queries", .at = AT(queries.received), .log = "queries"},
	{.stat = "queries_dropped", .family = &dropped, .at = AT(queries.dropped), .log = "dropped"},
	{.stat = "queries_truncated", .family = &truncated, .at = AT(queries.truncated)},
	{.stat = "rcode_", .family = &responses, .n = DNS_RCODE_SLOTS, .at = AT(queries.rcode)},
	{.stat = "answers_", .family = &answers, .n = QUERY_SOURCE_COUNT, .at = AT(queries.source)},
	{.stat = "control_lookups", .at = AT(control_lookups)},
	{.stat = "queries_not_allowed", .family = &not_allowed, .at = AT(queries.not_allowed)},
	{.stat = "queries_rrl_slipped", .family = &rrl_limited, .label = 0,
	 .at = AT(queries.rrl_slipped)},
	{.stat = "queries_rrl_dropped", .family = &rrl_limited, .label = 1,
	 .at = AT(queries.rrl_dropped)},
	{.family = &requests, .n = N(protocols), .at = AT(queries.transport)},
	{.family = &requests_by_qtype, .n = QUERY_QTYPE_COUNT, .at = AT(queries.qtype)},
	{.family = &autopath, .at = AT(queries.autopath)},
	{.stat = "udp_busy_wakeups", .family = &udp_busy_wakeups, .at = AT(queries.udp_busy_wakeups)},
	/* /metrics only: a ctl line here would move every line after it (append only) */
	{.family = &dns64_synthesized, .at = AT(queries.dns64_synthesized)},
};

TABLE(counters_queries, "queries", query_rows, query_families, COUNTERS_ALWAYS);

/* ---- TCP: the workers' connections (server/tcp.c) -------------------------------- */

static const char *const tcp_refusals[] = {"max_connections", "per_client", "not_allowed"};
static const char *const tcp_closes[] = {"idle", "slow_query", "output_budget", "silent"};

PLAIN_GAUGE(tcp_connections, "localdns_tcp_connections",
	"TCP connections open now.");
PLAIN_GAUGE_IN(tcp_output_bytes, "localdns_tcp_output_bytes", "bytes",
	"TCP reply bytes the clients have not taken yet, all connections: held by localdns "
	"and in the kernel's send queues once full (listen.tcp_output_budget caps it).");
LABELLED_COUNTER(tcp_refused, "localdns_tcp_refused_total",
	"TCP connections closed at accept: listen.tcp_max_connections reached, "
	"listen.tcp_max_connections_per_client for the client (IPv6: its address cut to "
	"listen.ipv6_client_prefix_length), or "
	"the client outside listen.allow.",
	"reason", tcp_refusals, N(tcp_refusals));
LABELLED_COUNTER(tcp_closed, "localdns_tcp_closed_total",
	"TCP connections localdns closed: idle (listen.tcp_idle_timeout), slow_query (a "
	"query not complete within listen.tcp_query_timeout of its first byte), "
	"output_budget (it held the most unsent bytes when listen.tcp_output_budget was "
	"exceeded), silent (not a byte within listen.tcp_query_timeout of the connection).",
	"reason", tcp_closes, N(tcp_closes));

static const struct counter_family *const tcp_families[] = {
	&tcp_connections, &tcp_output_bytes, &tcp_refused, &tcp_closed};

static const struct counter tcp_rows[] = {
	{.family = &tcp_connections, .at = AT(tcp.connections)},
	{.family = &tcp_output_bytes, .at = AT(tcp.output_bytes)},
	{.family = &tcp_refused, .n = N(tcp_refusals),
	 .at = AT(tcp.events[SERVER_TCP_REFUSED_MAX_CONNECTIONS])},
	{.family = &tcp_closed, .n = N(tcp_closes), .at = AT(tcp.events[SERVER_TCP_CLOSED_IDLE])},
};

TABLE(counters_tcp, "tcp", tcp_rows, tcp_families, COUNTERS_ALWAYS);

/* ---- the health and metrics endpoints (http/) ------------------------------------ */

static const char *const http_closes[] = {"deadline"};

PLAIN_COUNTER(http_refused, "localdns_http_refused_total",
	"HTTP connections to the health and metrics endpoints closed at accept: their "
	"client address already had 8 open, or the endpoint's 64 were taken.");
LABELLED_COUNTER(http_closed, "localdns_http_closed_total",
	"HTTP connections localdns closed: deadline (a request not done, its reply sent, "
	"within 5 s of its connection or of the previous reply).",
	"reason", http_closes, N(http_closes));

static const struct counter_family *const http_families[] = {&http_refused, &http_closed};

static const struct counter http_rows[] = {
	{.family = &http_refused, .at = AT(http.refused)},
	{.family = &http_closed, .n = N(http_closes), .at = AT(http.closed_deadline)},
};

TABLE(counters_http, "http", http_rows, http_families, COUNTERS_ALWAYS);

/* ---- the answer cache (cache/) --------------------------------------------------- */

PLAIN_GAUGE(cache_entries, "localdns_cache_entries",
	"Answer cache entries held (live, stale, or removed and not yet freed).");
PLAIN_GAUGE_IN(cache_bytes, "localdns_cache_bytes", "bytes",
	"Bytes the answer cache accounts for: entries and bucket arrays.");
PLAIN_GAUGE_IN(cache_max_bytes, "localdns_cache_max_bytes", "bytes",
	"The answer cache's limit (cache.size).");
PLAIN_GAUGE_IN(cache_slab_bytes, "localdns_cache_slab_bytes", "bytes",
	"Memory of the slabs holding the answer cache's entries (all but those over 2 KiB).");
PLAIN_COUNTER(cache_slab_overflows, "localdns_cache_slab_overflows_total",
	"Answer cache entries put in the heap (charged 2 KiB) because the slabs were at their limit.");
PLAIN_COUNTER(cache_hits, "localdns_cache_hits_total",
	"Answer cache lookups answered from a live entry.");
PLAIN_COUNTER(cache_misses, "localdns_cache_misses_total",
	"Answer cache lookups that found nothing usable.");
PLAIN_COUNTER(cache_stale_hits, "localdns_cache_stale_hits_total",
	"Answer cache lookups answered from an expired entry (serve-stale).");
PLAIN_COUNTER(cache_prefetches, "localdns_cache_prefetches_total",
	"Hits in an entry's last 10% of TTL that started a background refresh.");
PLAIN_COUNTER(cache_inserts, "localdns_cache_inserts_total",
	"Entries stored in the answer cache, replacements included.");
PLAIN_COUNTER(cache_rejected, "localdns_cache_insert_rejections_total",
	"Upstream replies the answer cache would not store.");
PLAIN_COUNTER(cache_evictions, "localdns_cache_evictions_total",
	"Answer cache entries dropped to make room.");

static const struct counter_family *const cache_families[] = {
	&cache_entries, &cache_bytes, &cache_max_bytes, &cache_slab_bytes, &cache_slab_overflows,
	&cache_hits, &cache_misses, &cache_stale_hits, &cache_prefetches, &cache_inserts,
	&cache_rejected, &cache_evictions};

static const struct counter cache_rows[] = {
	{.stat = "cache_entries", .family = &cache_entries, .at = AT(cache.entries),
	 .log = "cache_entries"},
	{.stat = "cache_bytes", .family = &cache_bytes, .at = AT(cache.bytes)},
	{.stat = "cache_max_bytes", .family = &cache_max_bytes, .at = AT(cache.max_bytes)},
	{.stat = "cache_slab_bytes", .family = &cache_slab_bytes, .at = AT(cache.slab_bytes)},
	{.stat = "cache_slab_overflows", .family = &cache_slab_overflows,
	 .at = AT(cache.slab_overflows)},
	{.stat = "cache_hits", .family = &cache_hits, .at = AT(cache.hits), .log = "cache_hits"},
	{.stat = "cache_misses", .family = &cache_misses, .at = AT(cache.misses),
	 .log = "cache_misses"},
	{.stat = "cache_stale_hits", .family = &cache_stale_hits, .at = AT(cache.stale_hits)},
	{.stat = "cache_prefetches", .family = &cache_prefetches, .at = AT(cache.prefetches)},
	{.stat = "cache_inserts", .family = &cache_inserts, .at = AT(cache.inserts)},
	{.stat = "cache_rejected", .family = &cache_rejected, .at = AT(cache.rejected)},
	{.stat = "cache_evictions", .family = &cache_evictions, .at = AT(cache.evictions),
	 .log = "cache_evictions"},
};

TABLE(counters_cache, "cache", cache_rows, cache_families, COUNTERS_ALWAYS);

/* ---- the resolver thread (upstream/) --------------------------------------------- */

static const char *const error_kinds[] = {"resolution", "bogus", "timeout"};
static const char *const fallbacks[] = {"stale", "servfail"};

PLAIN_COUNTER(upstream_queries, "localdns_upstream_queries_total",
	"Queries sent to libunbound.");
PLAIN_COUNTER(upstream_coalesced, "localdns_upstream_coalesced_total",
	"Cache misses that joined an identical query already in flight.");
LABELLED_COUNTER(upstream_errors, "localdns_upstream_errors_total",
	"Upstream trouble: resolution (libunbound gave SERVFAIL or an error), bogus "
	"(DNSSEC validation failed), timeout (a client's upstream.timeout passed first).",
	"kind", error_kinds, N(error_kinds));
LABELLED_COUNTER(upstream_fallbacks, "localdns_upstream_fallback_replies_total",
	"Clients the resolver answered without a fresh upstream reply: from a stale "
	"entry, or SERVFAIL.",
	"reply", fallbacks, N(fallbacks));
PLAIN_COUNTER(upstream_dropped, "localdns_upstream_dropped_total",
	"Upstream requests lost: a full request ring (the worker could not hand the "
	"query over), or no memory for a TCP reply.");
PLAIN_GAUGE(upstream_resolving, "localdns_upstream_resolving",
	"libunbound queries running now, on the current and on retired contexts.");
PLAIN_GAUGE(upstream_queued, "localdns_upstream_queued",
	"Questions waiting to be sent upstream: libunbound runs all it may, or "
	"upstream.max_rate is reached.");
PLAIN_GAUGE(upstream_flights, "localdns_upstream_flights",
	"Questions the resolver knows now: running, queued, or cooling down after a failure.");
PLAIN_COUNTER(upstream_paced, "localdns_upstream_paced_total",
	"Questions that had to wait because upstream.max_rate was reached.");
PLAIN_COUNTER(upstream_client_limited, "localdns_upstream_client_limited_total",
	"Requests answered at once (stale or SERVFAIL), and background refreshes not "
	"sent, because their client (an IPv4 address, an IPv6 address cut to "
	"listen.ipv6_client_prefix_length) already had its share: upstream.max_pending_per_client questions (refreshes of its hits "
	"included), 1,024 queries joining questions asked, or, with every waiting "
	"place taken, the most waiting queries of any client.");
PLAIN_COUNTER(upstream_evicted, "localdns_upstream_evicted_total",
	"Waiting queries answered before their deadline (stale or SERVFAIL) to make "
	"room for another client's: every waiting place was taken, and theirs held "
	"the most.");
PLAIN_COUNTER(upstream_retries, "localdns_upstream_retries_total",
	"Failed questions asked once more because clients still waited for them.");
LABELLED_COUNTER(upstream_results, "localdns_upstream_results_total",
	"libunbound's results by what they said: an rcode, error (no answer at all) or "
	"bogus (DNSSEC validation failed).",
	"result", upstream_result_names, UPSTREAM_RESULTS);
PLAIN_COUNTER(upstream_renewals, "localdns_upstream_context_renewals_total",
	"Fresh libunbound contexts started because the current one was full and nothing "
	"came back from it for upstream.timeout.");
LABELLED_COUNTER(upstream_shed, "localdns_upstream_shed_total",
	"Questions given up without asking the upstream, their clients answered from a "
	"stale entry or with SERVFAIL at once: queue_full (the longest-waiting question "
	"made room for a new one), table_full (too many questions known at once), "
	"refresh_limit (a background refresh, while refreshes held a quarter of the "
	"upstream's places).",
	"reason", upstream_shed_names, UPSTREAM_SHEDS);
PLAIN_GAUGE(upstream_failing_now, "localdns_upstream_failing",
	"1 while the upstream looks down (its last resolution failed or timed out).");

/* localdns_upstream_duration_seconds, a histogram, follows these (metrics/collect.c). */
static const struct counter_family *const upstream_families[] = {
	&upstream_queries, &upstream_coalesced, &upstream_errors, &upstream_fallbacks,
	&upstream_dropped, &upstream_resolving, &upstream_queued, &upstream_flights,
	&upstream_paced, &upstream_client_limited, &upstream_evicted, &upstream_retries,
	&upstream_results,
	&upstream_renewals, &upstream_shed, &upstream_failing_now};

static const struct counter upstream_rows[] = {
	{.stat = "upstream_queries", .family = &upstream_queries, .at = AT(upstream.queries),
	 .log = "upstream_queries"},
	{.stat = "upstream_coalesced", .family = &upstream_coalesced,
	 .at = AT(upstream.coalesced), .log = "coalesced"},
	{.stat = "upstream_answers", .at = AT(upstream.answers)},
	{.stat = "upstream_failures", .family = &upstream_errors, .label = 0,
	 .at = AT(upstream.failures)},
	{.stat = "upstream_timeouts", .family = &upstream_errors, .label = 2,
	 .at = AT(upstream.timeouts), .log = "upstream_timeouts"},
	{.stat = "upstream_stale", .family = &upstream_fallbacks, .label = 0,
	 .at = AT(upstream.stale)},
	{.stat = "upstream_servfail", .family = &upstream_fallbacks, .label = 1,
	 .at = AT(upstream.servfail)},
	{.stat = "upstream_dropped", .family = &upstream_dropped, .at = AT(upstream.dropped),
	 .log = "upstream_dropped"},
	{.stat = "upstream_bogus", .family = &upstream_errors, .label = 1,
	 .at = AT(upstream.bogus)},
	{.stat = "upstream_resolving", .family = &upstream_resolving, .at = AT(upstream.resolving)},
	{.stat = "upstream_context_renewals", .family = &upstream_renewals,
	 .at = AT(upstream.renewals)},
	{.stat = "upstream_shed", .stat_sum = true, .family = &upstream_shed, .ctl_only = true,
	 .n = UPSTREAM_SHEDS, .at = AT(upstream.shed)},
	{.stat = "upstream_failing", .family = &upstream_failing_now, .at = AT(upstream_failing)},
	{.stat = "upstream_queued", .family = &upstream_queued, .at = AT(upstream.queued)},
	{.stat = "upstream_flights", .family = &upstream_flights, .at = AT(upstream.flights)},
	{.stat = "upstream_paced", .family = &upstream_paced, .at = AT(upstream.paced)},
	{.stat = "upstream_retries", .family = &upstream_retries, .at = AT(upstream.retries)},
	{.stat = "upstream_client_limited", .family = &upstream_client_limited,
	 .at = AT(upstream.client_limited)},
	{.stat = "upstream_evicted", .family = &upstream_evicted, .at = AT(upstream.evicted)},
	{.stat = "upstream_shed_", .family = &upstream_shed, .n = UPSTREAM_SHEDS,
	 .at = AT(upstream.shed)},
	{.stat = "upstream_results_", .family = &upstream_results, .n = UPSTREAM_RESULTS,
	 .at = AT(upstream.results)},
};

TABLE(counters_upstream, "upstream", upstream_rows, upstream_families, COUNTERS_ALWAYS);

/* ---- Kubernetes (kube/): ctl shows zeros without it, /metrics nothing ---------- */

PLAIN_GAUGE(kube_synced, "localdns_kubernetes_synced",
	"1 once every resource has been listed in full (cluster names are served).");
LABELLED_COUNTER(kube_events, "localdns_kubernetes_watch_events_total",
	"Watch events received, bookmarks included, by resource.",
	"resource", kube_resource_names, KUBE_N_RESOURCES);
LABELLED_COUNTER(kube_relists, "localdns_kubernetes_relists_total",
	"Complete (re)lists after the first (a watch expired with 410 Gone), by resource.",
	"resource", kube_resource_names, KUBE_N_RESOURCES);
PLAIN_COUNTER(kube_errors, "localdns_kubernetes_errors_total",
	"Failed Kubernetes API requests (connection, 5xx, 401/403, broken streams).");
LABELLED_GAUGE(kube_objects, "localdns_kubernetes_objects",
	"Objects known now, by resource.",
	"resource", kube_resource_names, KUBE_N_RESOURCES);
LABELLED_COUNTER(kube_objects_too_large, "localdns_kubernetes_objects_too_large_total",
	"Requests failed on an object over kubernetes.object_max_bytes (retried with "
	"backoff: the resource is held until the object shrinks), by resource.",
	"resource", kube_resource_names, KUBE_N_RESOURCES);

/* The sync and contact timestamps and the data age follow (metrics/collect.c). */
static const struct counter_family *const kube_families[] = {
	&kube_synced, &kube_events, &kube_relists, &kube_errors, &kube_objects,
	&kube_objects_too_large};

static const struct counter kube_rows[] = {
	{.stat = "kube_enabled", .at = AT(kube_enabled)},
	{.stat = "kube_synced", .family = &kube_synced, .at = AT(kube_synced)},
	{.stat = "kube_objects_", .family = &kube_objects, .n = KUBE_N_RESOURCES,
	 .at = AT(kube.objects)},
	{.stat = "kube_events", .stat_sum = true, .family = &kube_events, .n = KUBE_N_RESOURCES,
	 .at = AT(kube.events)},
	{.stat = "kube_relists", .stat_sum = true, .family = &kube_relists,
	 .n = KUBE_N_RESOURCES, .at = AT(kube.relists)},
	{.stat = "kube_errors", .family = &kube_errors, .at = AT(kube.errors)},
	{.stat = "kube_last_contact_time", .at = AT(kube_last_contact_time)},
	{.family = &kube_objects_too_large, .n = KUBE_N_RESOURCES,
	 .at = AT(kube.objects_too_large)},
};

TABLE(counters_kubernetes, "kubernetes", kube_rows, kube_families, AT(kube_enabled));

/* ---- the cluster table (cluster/), with Kubernetes ------------------------------- */

PLAIN_GAUGE(cluster_names, "localdns_cluster_names",
	"Owner names in the cluster table.");

LABELLED_COUNTER(cluster_limited, "localdns_cluster_limited_total",
	"Service and EndpointSlice changes cut by a bound (cluster.max_ports_per_service, "
	"cluster.max_endpoints_per_service, names past 255 bytes), by bound.",
	"limit", cluster_limit_names, CLUSTER_LIMITS);

PLAIN_GAUGE(mesh_hosts, "localdns_mesh_hosts",
	"Istio ServiceEntry host names the mesh answers for (mesh.istio; a wildcard counts once).");

static const struct counter_family *const cluster_families[] = {&cluster_names,
								&cluster_limited, &mesh_hosts};

static const struct counter cluster_rows[] = {
	{.family = &cluster_names, .at = AT(cluster_names)},
	{.family = &cluster_limited, .n = CLUSTER_LIMITS, .at = AT(cluster_limited)},
	{.family = &mesh_hosts, .at = AT(mesh_hosts)},
};

TABLE(counters_cluster, "cluster", cluster_rows, cluster_families, AT(kube_enabled));

/* ---- the node integration (node/): ctl shows zeros without it, /metrics nothing - */

static const char *const repair_kinds[] = {"link", "table"};

LABELLED_COUNTER(node_repairs, "localdns_node_repairs_total",
	"Repairs of the node integration: the link or an address put back, or the "
	"nftables table rebuilt after a change.",
	"kind", repair_kinds, N(repair_kinds));

static const struct counter_family *const node_families[] = {&node_repairs};

static const struct counter node_rows[] = {
	{.stat = "node_link_repairs", .family = &node_repairs, .label = 0,
	 .at = AT(node.link_repairs)},
	{.stat = "node_table_repairs", .family = &node_repairs, .label = 1,
	 .at = AT(node.table_repairs)},
};

TABLE(counters_node, "node", node_rows, node_families, AT(node_enabled));

/* ---- configuration reloads (daemon/reload.c) -------------------------------------- */

static const char *const reload_results[] = {"success", "failure"};

LABELLED_COUNTER(reloads, "localdns_config_reloads_total",
	"Configuration reloads, by result.",
	"result", reload_results, N(reload_results));

/* localdns_config_last_reload_success_timestamp_seconds follows (metrics/collect.c). */
static const struct counter_family *const config_families[] = {&reloads};

static const struct counter config_rows[] = {
	{.stat = "reloads_ok", .family = &reloads, .label = 0, .at = AT(reloads_ok)},
	{.stat = "reloads_failed", .family = &reloads, .label = 1, .at = AT(reloads_failed)},
	{.stat = "reload_last_success_time", .at = AT(reload_last_success_time)},
};

TABLE(counters_config, "config", config_rows, config_families, COUNTERS_ALWAYS);

/* ---- the query log (querylog/) ---------------------------------------------------- */

PLAIN_COUNTER(query_log_dropped, "localdns_query_log_dropped_total",
	"Sampled query log records dropped because the log thread fell behind.");

static const struct counter_family *const query_log_families[] = {&query_log_dropped};

static const struct counter query_log_rows[] = {
	{.family = &query_log_dropped, .at = AT(query_log_dropped)},
};

TABLE(counters_query_log, "query_log", query_log_rows, query_log_families, COUNTERS_ALWAYS);

/* ---- dnstap (dnstap/) ---------------------------------------------------------------- */

PLAIN_COUNTER(dnstap_sent, "localdns_dnstap_sent_total",
	"dnstap messages written to the collector (dnstap.socket or dnstap.address).");
PLAIN_COUNTER(dnstap_dropped, "localdns_dnstap_dropped_total",
	"Queries and replies not sent to the dnstap collector: a thread's ring was full "
	"(the collector slow or away), or a write to the collector failed.");
PLAIN_COUNTER(dnstap_connects, "localdns_dnstap_connections_total",
	"Connections made to the dnstap collector (the first, and each reconnect).");
PLAIN_GAUGE(dnstap_connected, "localdns_dnstap_connected",
	"1 while a dnstap collector is connected, else 0.");

static const struct counter_family *const dnstap_families[] = {
	&dnstap_sent, &dnstap_dropped, &dnstap_connects, &dnstap_connected};

static const struct counter dnstap_rows[] = {
	{.stat = "dnstap_sent", .family = &dnstap_sent, .at = AT(dnstap_sent)},
	{.stat = "dnstap_dropped", .family = &dnstap_dropped, .at = AT(dnstap_dropped)},
	{.stat = "dnstap_connections", .family = &dnstap_connects, .at = AT(dnstap_connects)},
	{.stat = "dnstap_connected", .family = &dnstap_connected, .at = AT(dnstap_connected)},
};

TABLE(counters_dnstap, "dnstap", dnstap_rows, dnstap_families, COUNTERS_ALWAYS);

/* ---- the keeper (keeper/): ctl shows zeros without it, /metrics nothing ------------ */

static const char *const keeper_reasons[KEEPER_REASONS] = {[KEEPER_DEATH] = "death",
							  [KEEPER_HANG] = "hang"};
static const char *const keeper_failures[KEEPER_FAILURES] = {[KEEPER_NOT_SENT] = "not_sent",
							    [KEEPER_NO_ANSWER] = "no_answer"};

PLAIN_GAUGE(keeper_connected, "localdns_keeper_connected",
	"1 while the keeper (keeper.socket) holds a copy of every listening socket of this "
	"process; 0 while it does not, when what the sockets had queued would be lost if "
	"this process died or hung.");
LABELLED_COUNTER(keeper_rescues, "localdns_keeper_rescues_total",
	"Times the keeper took over this pod's DNS sockets: a localdns died (death) or one "
	"of its workers stood still (hang). The keeper's counts since it started, so a "
	"localdns started after a crash shows the crash.",
	"reason", keeper_reasons, KEEPER_REASONS);
LABELLED_COUNTER(keeper_relayed, "localdns_keeper_relayed_total",
	"Queries the keeper took from localdns's sockets and asked of the cluster DNS, by why "
	"(death, hang); since the keeper started.",
	"reason", keeper_reasons, KEEPER_REASONS);
LABELLED_COUNTER(keeper_failed, "localdns_keeper_relay_failures_total",
	"Queries the keeper took that got no answer through it: not_sent (no fallback "
	"endpoint, no room, a send or connect error), no_answer (the endpoint did not answer "
	"in time, or the connection ended first); since the keeper started.",
	"failure", keeper_failures, KEEPER_FAILURES);

static const struct counter_family *const keeper_families[] = {
	&keeper_connected, &keeper_rescues, &keeper_relayed, &keeper_failed};

static const struct counter keeper_rows[] = {
	{.stat = "keeper_enabled", .at = AT(keeper_enabled)},
	{.stat = "keeper_connected", .family = &keeper_connected, .at = AT(keeper.connected)},
	{.stat = "keeper_rescues_", .family = &keeper_rescues, .n = KEEPER_REASONS,
	 .at = AT(keeper.rescues)},
	{.stat = "keeper_relayed_", .family = &keeper_relayed, .n = KEEPER_REASONS,
	 .at = AT(keeper.relayed)},
	{.stat = "keeper_failed_", .family = &keeper_failed, .n = KEEPER_FAILURES,
	 .at = AT(keeper.failed)},
};

TABLE(counters_keeper, "keeper", keeper_rows, keeper_families, AT(keeper_enabled));

/* ---- all of them, in ctl order ------------------------------------------------------ */

const struct counter_table *const counters_tables[] = {
	&counters_queries, &counters_tcp, &counters_cache, &counters_upstream, &counters_kubernetes,
	&counters_cluster, &counters_node, &counters_config, &counters_query_log, &counters_dnstap,
	&counters_http, &counters_keeper};
const size_t counters_n_tables = N(counters_tables);
