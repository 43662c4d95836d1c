/*
 * metrics/text.c — the Prometheus text exposition format, version 0.0.4.
 *
 *   # HELP localdns_requests_total Queries received, by transport.
 *   # TYPE localdns_requests_total counter
 *   localdns_requests_total{protocol="udp"} 1027
 *
 * Label values escape backslash, double quote and newline; help text
 * escapes backslash and newline. Numbers: integers exactly, other values in
 * the shortest form that reads back as the same double, and +Inf, -Inf,
 * NaN as the format spells them. The buffer doubles as it grows, so a
 * scrape of a few hundred samples costs a handful of reallocations.
 */
#include "metrics/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INITIAL_CAP 4096

void metrics_text_init(struct metrics_text *t)
{
	*t = (struct metrics_text){0};
}

void metrics_text_free(struct metrics_text *t)
{
	free(t->buf);
	metrics_text_init(t);
}

char *metrics_text_take(struct metrics_text *t, size_t *len)
{
	char *buf;

	if (t->failed || (!t->buf && !(t->buf = calloc(1, 1)))) {
		metrics_text_free(t);
		return NULL;
	}
	buf = t->buf;
	*len = t->len;
	metrics_text_init(t);
	return buf;
}

/* Room for n more bytes and the NUL; false (and failed) when there is none. */
static bool reserve(struct metrics_text *t, size_t n)
{
	size_t cap = t->cap ? t->cap : INITIAL_CAP;
	char *grown;

	if (t->failed)
		return false;
	if (t->len + n + 1 <= t->cap)
		return true;
	while (cap < t->len + n + 1)
		cap *= 2;
	grown = realloc(t->buf, cap);
	if (!grown) {
		t->failed = true;
		return false;
	}
	t->buf = grown;
	t->cap = cap;
	return true;
}

static void put(struct metrics_text *t, const char *s, size_t n)
{
	if (!reserve(t, n))
		return;
	memcpy(t->buf + t->len, s, n);
	t->len += n;
	t->buf[t->len] = '\0';
}

static void puts_text(struct metrics_text *t, const char *s)
{
	put(t, s, strlen(s));
}

/* s with backslash and newline escaped, and double quote too when asked. */
static void put_escaped(struct metrics_text *t, const char *s, bool quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			put(t, "\\\\", 2);
		else if (*s == '\n')
			put(t, "\\n", 2);
		else if (*s == '"' && quote)
			put(t, "\\\"", 2);
		else
			put(t, s, 1);
	}
}

/* The shortest of %.15g and %.17g that reads back as v. */
static void format_double(double v, char *out, size_t len)
{
	if (isnan(v)) {
		snprintf(out, len, "NaN");
	} else if (isinf(v)) {
		snprintf(out, len, v > 0 ? "+Inf" : "-Inf");
	} else {
		snprintf(out, len, "%.15g", v);
		if (strtod(out, NULL) != v)
			snprintf(out, len, "%.17g", v);
	}
}

void metrics_family(struct metrics_text *t, const char *name, const char *type,
		    const char *help)
{
	puts_text(t, "# HELP ");
	puts_text(t, name);
	put(t, " ", 1);
	put_escaped(t, help, false);
	puts_text(t, "\n# TYPE ");
	puts_text(t, name);
	put(t, " ", 1);
	puts_text(t, type);
	put(t, "\n", 1);
}

static void put_series(struct metrics_text *t, const char *name, const char *suffix,
		       const struct metrics_label *labels, size_t n_labels)
{
	puts_text(t, name);
	puts_text(t, suffix);
	if (n_labels == 0)
		return;
	put(t, "{", 1);
	for (size_t i = 0; i < n_labels; i++) {
		if (i > 0)
			put(t, ",", 1);
		puts_text(t, labels[i].name);
		put(t, "=\"", 2);
		put_escaped(t, labels[i].value, true);
		put(t, "\"", 1);
	}
	put(t, "}", 1);
}

static void put_value_line(struct metrics_text *t, const char *value)
{
	put(t, " ", 1);
	puts_text(t, value);
	put(t, "\n", 1);
}

void metrics_sample(struct metrics_text *t, const char *name, const struct metrics_label *labels,
		    size_t n_labels, double value)
{
	char text[40];

	format_double(value, text, sizeof text);
	put_series(t, name, "", labels, n_labels);
	put_value_line(t, text);
}

void metrics_sample_u64(struct metrics_text *t, const char *name,
			const struct metrics_label *labels, size_t n_labels, uint64_t value)
{
	char text[24];

	snprintf(text, sizeof text, "%llu", (unsigned long long)value);
	put_series(t, name, "", labels, n_labels);
	put_value_line(t, text);
}

static void put_bucket(struct metrics_text *t, const char *name, const char *le, uint64_t count)
{
	const struct metrics_label label = {"le", le};
	char text[24];

	snprintf(text, sizeof text, "%llu", (unsigned long long)count);
	put_series(t, name, "_bucket", &label, 1);
	put_value_line(t, text);
}

void metrics_histogram(struct metrics_text *t, const char *name, const double *bounds,
		       const uint64_t *le_counts, size_t n_bounds, uint64_t count, double sum)
{
	char text[40];

	for (size_t i = 0; i < n_bounds; i++) {
		format_double(bounds[i], text, sizeof text);
		put_bucket(t, name, text, le_counts[i]);
	}
	put_bucket(t, name, "+Inf", count);
	format_double(sum, text, sizeof text);
	put_series(t, name, "_sum", NULL, 0);
	put_value_line(t, text);
	snprintf(text, sizeof text, "%llu", (unsigned long long)count);
	put_series(t, name, "_count", NULL, 0);
	put_value_line(t, text);
}
