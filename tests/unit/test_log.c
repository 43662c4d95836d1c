/*
 * Unit tests for log/: logfmt quoting and escaping, JSON lines that parse
 * with the same fields and values, level filtering, lines stamped with a
 * given time, and the 4 KiB limit (a cut JSON line is still JSON).
 * stderr is captured into a temporary file around each call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <json-c/json.h>

#include "log/log.h"

#include "stderr_capture.h"

/* The line after "ts=... " (timestamps differ from run to run). */
static const char *after_ts(const char *line)
{
	const char *sp = strchr(line, ' ');

	assert_non_null(sp);
	assert_memory_equal(line, "ts=", 3);
	return sp + 1;
}

static int reset_level(void **state)
{
	(void)state;
	log_setup(LOG_INFO, LOG_FORMAT_LOGFMT);
	return 0;
}

/* ---- logfmt ----------------------------------------------------------------- */

static void logfmt_quotes_only_values_that_need_it(void **state)
{
	(void)state;
	begin_capture();
	log_info("listening", "address", "127.0.0.1", "why", "two words", "empty", "",
		 "pair", "a=b", "null", NULL);
	assert_string_equal(after_ts(end_capture()),
			    "level=info msg=listening address=127.0.0.1 why=\"two words\" "
			    "empty=\"\" pair=\"a=b\" null=\"\"\n");
}

static void logfmt_escapes_quotes_backslashes_and_control_characters(void **state)
{
	(void)state;
	begin_capture();
	log_warn("bad \"name\"", "v", "say \"hi\" \\ back\nslash\r\tbell\a del\x7f", "esc",
		 "\x1b[31mred");
	assert_string_equal(after_ts(end_capture()),
			    "level=warn msg=\"bad \\\"name\\\"\" "
			    "v=\"say \\\"hi\\\" \\\\ back\\nslash\\r\\tbell\\u0007 del\\u007f\" "
			    "esc=\"\\u001b[31mred\"\n");
}

static void logfmt_line_is_one_line_whatever_the_values(void **state)
{
	(void)state;
	begin_capture();
	log_error("m", "a", "one\ntwo\nthree", "b", "\n");
	const char *out = end_capture();
	assert_non_null(strchr(out, '\n'));
	assert_ptr_equal(strchr(out, '\n'), out + strlen(out) - 1);
}

/* ---- JSON ------------------------------------------------------------------- */

static json_object *parse_one_json_line(const char *out)
{
	size_t len = strlen(out);

	assert_true(len > 0 && out[len - 1] == '\n');
	assert_ptr_equal(strchr(out, '\n'), out + len - 1);
	json_object *obj = json_tokener_parse(out);
	assert_non_null(obj);
	assert_true(json_object_is_type(obj, json_type_object));
	return obj;
}

static const char *field(json_object *obj, const char *key)
{
	json_object *v;

	assert_true(json_object_object_get_ex(obj, key, &v));
	return json_object_get_string(v);
}

static void json_lines_carry_the_same_fields_and_exact_values(void **state)
{
	static const char tricky[] = "say \"hi\" \\ back\nslash\r\tbell\a del\x7f =x";

	(void)state;
	log_setup(LOG_INFO, LOG_FORMAT_JSON);
	begin_capture();
	log_info("listening", "address", "127.0.0.1", "v", tricky, "empty", "");
	json_object *obj = parse_one_json_line(end_capture());
	assert_int_equal(json_object_object_length(obj), 6);
	assert_string_equal(field(obj, "level"), "info");
	assert_string_equal(field(obj, "msg"), "listening");
	assert_string_equal(field(obj, "address"), "127.0.0.1");
	assert_string_equal(field(obj, "v"), tricky);
	assert_string_equal(field(obj, "empty"), "");
	assert_int_equal(strlen(field(obj, "ts")), strlen("2026-11-21T13:04:05.123Z"));
	json_object_put(obj);
}

static void json_line_too_long_keeps_msg_and_says_truncated(void **state)
{
	char big[6000];

	(void)state;
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	log_setup(LOG_INFO, LOG_FORMAT_JSON);
	begin_capture();
	log_info("huge", "v", big);
	json_object *obj = parse_one_json_line(end_capture());
	assert_string_equal(field(obj, "msg"), "huge");
	assert_string_equal(field(obj, "truncated"), "true");
	json_object_put(obj);
}

static void logfmt_line_too_long_is_cut_with_closing_quote(void **state)
{
	char big[6000];

	(void)state;
	memset(big, '"', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	begin_capture();
	log_info("huge", "v", big);
	const char *out = end_capture();
	size_t len = strlen(out);
	assert_true(len <= 4096);
	assert_string_equal(out + len - 2, "\"\n");
	/* every quote inside is escaped: the cut fell between two escapes */
	assert_int_equal((len - 2 - (size_t)(strstr(out, "v=\"") + 3 - out)) % 2, 0);
}

/* ---- levels and stamped events ---------------------------------------------------- */

static void levels_below_the_configured_one_are_not_written(void **state)
{
	(void)state;
	begin_capture();
	log_debug("hidden at info");
	log_info("shown at info");
	assert_non_null(strstr(end_capture(), "msg=\"shown at info\""));
	assert_null(strstr(captured, "hidden"));

	log_setup(LOG_DEBUG, LOG_FORMAT_LOGFMT);
	assert_true(log_enabled(LOG_DEBUG));
	begin_capture();
	log_debug("shown at debug");
	assert_non_null(strstr(end_capture(), "level=debug msg=\"shown at debug\""));

	log_setup(LOG_ERROR, LOG_FORMAT_LOGFMT);
	assert_false(log_enabled(LOG_WARN));
	begin_capture();
	log_info("a");
	log_warn("b");
	log_error("c");
	assert_string_equal(after_ts(end_capture()), "level=error msg=c\n");
}

static void stamped_events_use_their_time_and_ignore_the_level(void **state)
{
	struct timespec when = {.tv_sec = 1700000000, .tv_nsec = 123456789};

	(void)state;
	log_setup(LOG_ERROR, LOG_FORMAT_LOGFMT);
	begin_capture();
	log_event_at(&when, "query", "qname", "a.example.", NULL);
	assert_string_equal(end_capture(),
			    "ts=2023-11-14T22:13:20.123Z level=info msg=query qname=a.example.\n");

	log_setup(LOG_ERROR, LOG_FORMAT_JSON);
	begin_capture();
	log_event_at(&when, "query", "qname", "a.example.", NULL);
	json_object *obj = parse_one_json_line(end_capture());
	assert_string_equal(field(obj, "ts"), "2023-11-14T22:13:20.123Z");
	assert_string_equal(field(obj, "level"), "info");
	assert_string_equal(field(obj, "qname"), "a.example.");
	json_object_put(obj);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(logfmt_quotes_only_values_that_need_it, reset_level),
		cmocka_unit_test_setup(logfmt_escapes_quotes_backslashes_and_control_characters,
				       reset_level),
		cmocka_unit_test_setup(logfmt_line_is_one_line_whatever_the_values, reset_level),
		cmocka_unit_test_setup(json_lines_carry_the_same_fields_and_exact_values,
				       reset_level),
		cmocka_unit_test_setup(json_line_too_long_keeps_msg_and_says_truncated,
				       reset_level),
		cmocka_unit_test_setup(logfmt_line_too_long_is_cut_with_closing_quote, reset_level),
		cmocka_unit_test_setup(levels_below_the_configured_one_are_not_written, reset_level),
		cmocka_unit_test_setup(stamped_events_use_their_time_and_ignore_the_level,
				       reset_level),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
