/*
 * metrics — localdns's counters as Prometheus text (exposition format
 * 0.0.4), for GET /metrics.
 *
 * Owns: the text format (text.c: family headers, samples with escaped
 * label values, numbers, cumulative histograms) and the scrape (collect.c):
 * the counter registry's families (src/counters/, which declares their
 * names, types, labels and help) and the figures that are not plain
 * counters (heartbeats, the latency histogram, timestamps, the process's
 * own /proc entries), read at the moment of the scrape.
 *
 * Must never: keep state between scrapes (every counter lives in the
 * subsystem that counts it), take a lock a worker could wait on, or run on
 * the query path. A scrape costs one pass over each subsystem's counters.
 *
 * Names follow Prometheus's conventions: the `localdns_` prefix, `_total`
 * on counters, base units (seconds, bytes), one family's samples together
 * after its HELP and TYPE. docs/metrics.md lists every metric.
 */
#ifndef LOCALDNS_METRICS_H
#define LOCALDNS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct daemon;

/* ---- text.c: the exposition format --------------------------------------- */

/* A growing text; after an allocation failure it stays failed (and short). */
struct metrics_text {
	char *buf;
	size_t len;
	size_t cap;
	bool failed;
};

struct metrics_label {
	const char *name;
	const char *value;   /* any bytes but NUL: escaped as the format asks */
};

void metrics_text_init(struct metrics_text *t);
void metrics_text_free(struct metrics_text *t);

/*
 * The text so far, NUL-terminated; the caller frees it with free() and t is
 * empty again. NULL when an allocation failed along the way.
 */
char *metrics_text_take(struct metrics_text *t, size_t *len);

/* "# HELP name help" and "# TYPE name type" (counter, gauge, histogram). */
void metrics_family(struct metrics_text *t, const char *name, const char *type,
		    const char *help);

/* One sample: name{labels} value. Integers are written exactly. */
void metrics_sample(struct metrics_text *t, const char *name, const struct metrics_label *labels,
		    size_t n_labels, double value);
void metrics_sample_u64(struct metrics_text *t, const char *name,
			const struct metrics_label *labels, size_t n_labels, uint64_t value);

/*
 * A histogram's samples (after its family header): name_bucket for each
 * bound with le="bound" and the cumulative count le_counts[i], the +Inf
 * bucket with count, name_sum and name_count.
 */
void metrics_histogram(struct metrics_text *t, const char *name, const double *bounds,
		       const uint64_t *le_counts, size_t n_bounds, uint64_t count, double sum);

/* ---- collect.c: localdns's metrics ---------------------------------------- */

/*
 * Every metric of the running daemon as exposition text (malloc'd,
 * NUL-terminated, length in *len); NULL when out of memory. Any thread.
 */
char *metrics_collect(const struct daemon *d, size_t *len);

#endif
