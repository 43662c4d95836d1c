/*
 * Unit tests for metrics/text.c, the Prometheus text format: family
 * headers, label and help escaping, number formatting (exact integers,
 * shortest round-trip doubles, +Inf/-Inf/NaN), histogram layout, growth
 * past the first buffer, and handing the text over.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "metrics/metrics.h"

/* The text t holds, taken (the caller frees it). */
static char *take(struct metrics_text *t)
{
	size_t len = 0;
	char *text = metrics_text_take(t, &len);

	assert_non_null(text);
	assert_int_equal(len, strlen(text));
	return text;
}

static void test_family_and_samples(void **state)
{
	struct metrics_text t;
	const struct metrics_label labels[2] = {{"protocol", "udp"}, {"zone", "a.example"}};
	char *text;

	(void)state;
	metrics_text_init(&t);
	metrics_family(&t, "localdns_requests_total", "counter", "Queries received.");
	metrics_sample_u64(&t, "localdns_requests_total", labels, 1, 7);
	metrics_sample_u64(&t, "localdns_requests_total", labels, 2, 0);
	metrics_sample_u64(&t, "localdns_requests_total", NULL, 0, UINT64_MAX);
	text = take(&t);
	assert_string_equal(text,
			    "# HELP localdns_requests_total Queries received.\n"
			    "# TYPE localdns_requests_total counter\n"
			    "localdns_requests_total{protocol=\"udp\"} 7\n"
			    "localdns_requests_total{protocol=\"udp\",zone=\"a.example\"} 0\n"
			    "localdns_requests_total 18446744073709551615\n");
	free(text);
}

static void test_escaping(void **state)
{
	struct metrics_text t;
	const struct metrics_label label = {"v", "a\\b\"c\nd"};
	char *text;

	(void)state;
	metrics_text_init(&t);
	metrics_family(&t, "x", "gauge", "back\\slash \"quoted\"\nsecond line");
	metrics_sample_u64(&t, "x", &label, 1, 1);
	text = take(&t);
	/* help escapes backslash and newline only; label values also the quote */
	assert_string_equal(text,
			    "# HELP x back\\\\slash \"quoted\"\\nsecond line\n"
			    "# TYPE x gauge\n"
			    "x{v=\"a\\\\b\\\"c\\nd\"} 1\n");
	free(text);
}

/* The value metrics_sample writes for v. */
static void expect_double(double v, const char *want)
{
	struct metrics_text t;
	char line[64];
	char *text;

	metrics_text_init(&t);
	metrics_sample(&t, "v", NULL, 0, v);
	text = take(&t);
	snprintf(line, sizeof line, "v %s\n", want);
	assert_string_equal(text, line);
	free(text);
}

static void test_numbers(void **state)
{
	(void)state;
	expect_double(0, "0");
	expect_double(1, "1");
	expect_double(-2.5, "-2.5");
	expect_double(0.1, "0.1");
	expect_double(0.0005, "0.0005");
	expect_double(1795274252.75, "1795274252.75");
	expect_double(1e-05, "1e-05");
	expect_double(1.0 / 3.0, "0.33333333333333331"); /* 15 digits would not read back */
	expect_double(INFINITY, "+Inf");
	expect_double(-INFINITY, "-Inf");
	expect_double(NAN, "NaN");
}

static void test_histogram(void **state)
{
	struct metrics_text t;
	const double bounds[3] = {0.005, 0.1, 2.5};
	const uint64_t le[3] = {1, 4, 4};
	char *text;

	(void)state;
	metrics_text_init(&t);
	metrics_family(&t, "d_seconds", "histogram", "Durations.");
	metrics_histogram(&t, "d_seconds", bounds, le, 3, 6, 12.25);
	text = take(&t);
	assert_string_equal(text,
			    "# HELP d_seconds Durations.\n"
			    "# TYPE d_seconds histogram\n"
			    "d_seconds_bucket{le=\"0.005\"} 1\n"
			    "d_seconds_bucket{le=\"0.1\"} 4\n"
			    "d_seconds_bucket{le=\"2.5\"} 4\n"
			    "d_seconds_bucket{le=\"+Inf\"} 6\n"
			    "d_seconds_sum 12.25\n"
			    "d_seconds_count 6\n");
	free(text);
}

static void test_growth_and_take(void **state)
{
	struct metrics_text t;
	char name[32], *text;
	size_t len = 1, expected = 0;

	(void)state;
	metrics_text_init(&t);
	text = metrics_text_take(&t, &len); /* nothing written: an empty string */
	assert_non_null(text);
	assert_string_equal(text, "");
	assert_int_equal(len, 0);
	free(text);

	for (int i = 0; i < 5000; i++) {
		snprintf(name, sizeof name, "m_%d", i);
		metrics_sample_u64(&t, name, NULL, 0, (uint64_t)i);
		expected += strlen(name) + 1 + (size_t)snprintf(NULL, 0, "%d", i) + 1;
	}
	assert_false(t.failed);
	text = metrics_text_take(&t, &len);
	assert_int_equal(len, expected);
	assert_int_equal(strlen(text), expected);
	assert_memory_equal(text, "m_0 0\nm_1 1\n", 12);
	assert_string_equal(text + expected - 12, "m_4999 4999\n");
	free(text);
	/* taken: t is empty and usable again */
	assert_null(t.buf);
	assert_int_equal(t.len, 0);
	metrics_sample_u64(&t, "again", NULL, 0, 1);
	text = take(&t);
	assert_string_equal(text, "again 1\n");
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_family_and_samples),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_histogram),
		cmocka_unit_test(test_growth_and_take),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
