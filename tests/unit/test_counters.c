/*
 * Unit tests for counters/, the counter registry: every /metrics family
 * gets exactly one value per label value, rows point inside their table
 * and inside struct counter_values, ctl names are unique, family names
 * follow their type and unit, and the walks read what the rows name
 * (runs, sums, the family's own label order).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "counters/counters.h"

static bool family_listed(const struct counter_table *t, const struct counter_family *f)
{
	for (size_t i = 0; i < t->n_families; i++)
		if (t->families[i] == f)
			return true;
	return false;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

static void test_every_family_value_comes_from_exactly_one_row(void **state)
{
	(void)state;
	for (size_t t = 0; t < counters_n_tables; t++) {
		const struct counter_table *table = counters_tables[t];
		for (size_t i = 0; i < table->n_families; i++) {
			const struct counter_family *f = table->families[i];
			unsigned n = f->label ? f->n_values : 1;
			for (unsigned k = 0; k < n; k++) {
				unsigned givers = 0;
				for (size_t r = 0; r < table->n_rows; r++) {
					const struct counter *c = &table->rows[r];
					givers += c->family == f && !c->ctl_only && k >= c->label &&
						  k < c->label + counter_run(c);
				}
				if (givers != 1)
					fail_msg("%s value %u: %u rows give it", f->name, k, givers);
			}
		}
	}
}

static void test_rows_stay_inside_their_family_and_the_values(void **state)
{
	(void)state;
	for (size_t t = 0; t < counters_n_tables; t++) {
		const struct counter_table *table = counters_tables[t];
		for (size_t r = 0; r < table->n_rows; r++) {
			const struct counter *c = &table->rows[r];
			const char *what = c->stat ? c->stat : c->family->name;
			if (!c->stat && !c->family)
				fail_msg("%s row %zu is shown nowhere", table->subsystem, r);
			if (c->family && !family_listed(table, c->family))
				fail_msg("%s: family %s is not in its table", what, c->family->name);
			if (c->family && c->label + counter_run(c) > (c->family->label ? c->family->n_values : 1))
				fail_msg("%s: run past the family's values", what);
			if (c->n && !c->stat_sum && c->stat && !c->family)
				fail_msg("%s: a run needs a family to name its values", what);
			if (c->at % sizeof(uint64_t) ||
			    c->at + counter_run(c) * sizeof(uint64_t) > sizeof(struct counter_values))
				fail_msg("%s: offset %zu outside the values", what, c->at);
		}
		if (table->shown_if != COUNTERS_ALWAYS &&
		    table->shown_if + sizeof(uint64_t) > sizeof(struct counter_values))
			fail_msg("%s: shown_if outside the values", table->subsystem);
	}
}

static void test_family_names_follow_type_and_unit(void **state)
{
	(void)state;
	for (size_t t = 0; t < counters_n_tables; t++) {
		const struct counter_table *table = counters_tables[t];
		for (size_t i = 0; i < table->n_families; i++) {
			const struct counter_family *f = table->families[i];
			char unit[32];
			snprintf(unit, sizeof unit, "_%s", f->unit);
			if (strncmp(f->name, "localdns_", 9) != 0 ||
			    ends_with(f->name, "_total") != (f->type == COUNTER_COUNTER))
				fail_msg("%s: prefix, or _total on a counter only", f->name);
			if (f->unit[0] && !ends_with(f->name, unit) &&
			    !(ends_with(f->name, "_total") && strstr(f->name, unit)))
				fail_msg("%s: the name does not say its unit %s", f->name, f->unit);
			if (!f->help[0] || (f->label && (!f->values || f->n_values == 0)))
				fail_msg("%s: no help or no label values", f->name);
		}
	}
}

struct seen {
	char names[256][64];
	uint64_t values[256];
	size_t n;
};

static void note(const char *name, uint64_t value, void *arg)
{
	struct seen *s = arg;

	assert_true(s->n < 256);
	snprintf(s->names[s->n], sizeof s->names[s->n], "%s", name);
	s->values[s->n++] = value;
}

static uint64_t seen_value(const struct seen *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->names[i], name) == 0)
			return s->values[i];
	fail_msg("no %s", name);
	return 0;
}

static void test_ctl_names_are_unique(void **state)
{
	static struct counter_values v;
	static struct seen s;

	(void)state;
	counters_each_stat(&v, note, &s);
	assert_true(s.n > 60);
	for (size_t i = 0; i < s.n; i++)
		for (size_t k = i + 1; k < s.n; k++)
			if (strcmp(s.names[i], s.names[k]) == 0)
				fail_msg("ctl stats shows %s twice", s.names[i]);
}

static void test_the_walks_read_what_the_rows_name(void **state)
{
	static struct counter_values v;
	static struct seen s, logged;
	uint64_t value;

	(void)state;
	v.queries.rcode[DNS_R_SERVFAIL] = 7;
	v.queries.rcode[DNS_RCODE_SLOT_OTHER] = 3;
	v.upstream.timeouts = 5;
	v.upstream.bogus = 2;
	v.upstream.shed[0] = 10;
	v.upstream.shed[1] = 20;
	v.kube.events[KUBE_SERVICES] = 4;
	v.kube.events[KUBE_PODS] = 6;
	v.cache.hits = 11;
	counters_each_stat(&v, note, &s);
	assert_int_equal(seen_value(&s, "rcode_servfail"), 7);
	assert_int_equal(seen_value(&s, "rcode_other"), 3);
	assert_int_equal(seen_value(&s, "upstream_timeouts"), 5);
	assert_int_equal(seen_value(&s, "upstream_shed"), 30);
	assert_int_equal(seen_value(&s, "upstream_shed_table_full"), 20);
	assert_int_equal(seen_value(&s, "kube_events"), 10);
	assert_int_equal(seen_value(&s, "kube_objects_pods"), 0);

	/* /metrics: the family's label order (resolution, bogus, timeout), not ctl's */
	assert_true(counters_family_value(&counters_upstream, counters_upstream.families[2], 1, &v,
					  &value));
	assert_string_equal(counters_upstream.families[2]->values[1], "bogus");
	assert_int_equal(value, 2);
	assert_true(counters_family_value(&counters_upstream, counters_upstream.families[2], 2, &v,
					  &value));
	assert_int_equal(value, 5);

	counters_each_log(&v, note, &logged);
	assert_int_equal(seen_value(&logged, "cache_hits"), 11);
	assert_int_equal(seen_value(&logged, "upstream_timeouts"), 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_family_value_comes_from_exactly_one_row),
		cmocka_unit_test(test_rows_stay_inside_their_family_and_the_values),
		cmocka_unit_test(test_family_names_follow_type_and_unit),
		cmocka_unit_test(test_ctl_names_are_unique),
		cmocka_unit_test(test_the_walks_read_what_the_rows_name),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
