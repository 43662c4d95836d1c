/*
 * upstream/stats.c — the resolver's counters read out, and the names and
 * bounds the metrics print them under.
 */
#include "upstream/stats.h"

const char *const upstream_result_names[UPSTREAM_RESULTS] = {
	"NOERROR", "NXDOMAIN", "SERVFAIL", "other", "error", "bogus"};

const char *const upstream_shed_names[UPSTREAM_SHEDS] = {"queue_full", "table_full",
							   "refresh_limit"};

/* Prometheus's default buckets and two below them: a forwarder on the node
 * or in the cluster answers in well under 5 ms. */
const double upstream_latency_bounds[UPSTREAM_LATENCY_BUCKETS] = {
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

void upstream_observe_latency(struct upstream_counters *n, uint64_t took_ns)
{
	double seconds = (double)took_ns / 1e9;
	size_t i = 0;

	while (i < UPSTREAM_LATENCY_BUCKETS && seconds > upstream_latency_bounds[i])
		i++;
	upstream_bump(&n->latency[i]);
	atomic_fetch_add_explicit(&n->latency_ns, took_ns, memory_order_relaxed);
}

/* Cumulative counts from the per-bucket ones; the total is their sum, so
 * the +Inf bucket always equals the count. */
static void latency_stats(const struct upstream_counters *n, struct upstream_stats *out)
{
	uint64_t below = 0;

	for (size_t i = 0; i < UPSTREAM_LATENCY_BUCKETS; i++) {
		below += atomic_load_explicit(&n->latency[i], memory_order_relaxed);
		out->latency_le[i] = below;
	}
	out->latency_count =
		below + atomic_load_explicit(&n->latency[UPSTREAM_LATENCY_BUCKETS], memory_order_relaxed);
	out->latency_sum = (double)atomic_load_explicit(&n->latency_ns, memory_order_relaxed) / 1e9;
}

void upstream_counters_read(const struct upstream_counters *n, struct upstream_stats *out)
{
	*out = (struct upstream_stats){
		.queries = atomic_load(&n->queries),
		.coalesced = atomic_load(&n->coalesced),
		.answers = atomic_load(&n->answers),
		.failures = atomic_load(&n->failures),
		.timeouts = atomic_load(&n->timeouts),
		.stale = atomic_load(&n->stale),
		.servfail = atomic_load(&n->servfail),
		.dropped = atomic_load(&n->dropped),
		.bogus = atomic_load(&n->bogus),
		.renewals = atomic_load(&n->renewals),
		.paced = atomic_load(&n->paced),
		.retries = atomic_load(&n->retries),
		.client_limited = atomic_load(&n->client_limited),
		.evicted = atomic_load(&n->evicted),
		.rrl_slipped = atomic_load(&n->rrl_slipped),
		.rrl_dropped = atomic_load(&n->rrl_dropped),
		.dns64_synthesized = atomic_load(&n->dns64_synthesized),
		.resolving = atomic_load(&n->resolving),
		.queued = atomic_load(&n->queued),
		.flights = atomic_load(&n->flights),
		.truncated = atomic_load(&n->truncated),
	};
	for (size_t r = 0; r < DNS_RCODE_SLOTS; r++)
		out->rcode[r] = atomic_load(&n->rcode[r]);
	for (size_t i = 0; i < UPSTREAM_SHEDS; i++)
		out->shed[i] = atomic_load(&n->shed[i]);
	for (size_t i = 0; i < UPSTREAM_RESULTS; i++)
		out->results[i] = atomic_load(&n->results[i]);
	latency_stats(n, out);
}
