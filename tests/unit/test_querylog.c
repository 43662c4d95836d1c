/*
 * Unit tests for querylog/: the 1-in-N sampler, the fields of a query line
 * in logfmt and JSON (client, port, protocol, escaped qname, qtype, rcode,
 * source, size), replies without a question, a full ring (every record is
 * either written or counted as dropped, and the drop count is logged), and
 * the producer side allocating nothing and taking no mutex (this binary is
 * linked with --wrap, see alloc_count.h). stderr is captured into a file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <cmocka.h>
#include <json-c/json.h>

#include "alloc_count.h"
#include "config_text.h"
#include "config/config.h"
#include "log/log.h"
#include "querylog/querylog.h"

#include "stderr_capture.h"

static void start(const char *yaml, unsigned workers)
{
	char err[256];
	struct config *cfg = config_of(yaml);

	log_setup((enum log_level)cfg->log.level, (enum log_format)cfg->log.format);
	if (querylog_start(cfg, workers, err, sizeof err) < 0)
		fail_msg("%s", err);
	config_free(cfg);
}

static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;

	in->sin_family = AF_INET;
	in->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &in->sin_addr), 1);
	return ss;
}

static struct sockaddr_storage v6(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons(port);
	assert_int_equal(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1);
	return ss;
}

/*
 * A reply header with one question: labels as given (bytes as is, so any
 * byte can be tested), then qtype and class IN, then `extra` bytes of
 * answer. Returns the length.
 */
static size_t make_reply(uint8_t *out, const char *const *labels, uint16_t qtype,
			 uint8_t rcode, size_t extra)
{
	static const uint8_t header[12] = {0x12, 0x34, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0};
	size_t n = sizeof header;

	memcpy(out, header, sizeof header);
	out[3] = (uint8_t)(0x80 | rcode);
	for (; *labels; labels++) {
		out[n++] = (uint8_t)strlen(*labels);
		memcpy(out + n, *labels, strlen(*labels));
		n += strlen(*labels);
	}
	out[n++] = 0;
	out[n++] = (uint8_t)(qtype >> 8);
	out[n++] = (uint8_t)qtype;
	out[n++] = 0;
	out[n++] = 1;
	memset(out + n, 0, extra);
	return n + extra;
}

/* The lines written, each without its leading "ts=... ". */
static size_t split_lines(char *text, char **lines, size_t max)
{
	size_t n = 0;

	for (char *line = strtok(text, "\n"); line && n < max; line = strtok(NULL, "\n")) {
		char *sp = strchr(line, ' ');
		lines[n++] = sp ? sp + 1 : line;
	}
	return n;
}

/* ---- sampling -------------------------------------------------------------- */

static void sampler_picks_one_in_n(void **state)
{
	uint32_t count = 0;
	int picked = 0;

	(void)state;
	querylog_set_every(0);
	for (int i = 0; i < 100; i++)
		picked += querylog_sample(&count);
	assert_int_equal(picked, 0);

	querylog_set_every(1);
	for (int i = 0; i < 100; i++)
		picked += querylog_sample(&count);
	assert_int_equal(picked, 100);

	querylog_set_every(3);
	count = 0;
	for (int i = 1; i <= 9; i++)
		assert_int_equal(querylog_sample(&count), i % 3 == 0);

	/* Lowered N: the counter past the new N picks the next query. */
	querylog_set_every(100);
	count = 0;
	for (int i = 0; i < 50; i++)
		assert_false(querylog_sample(&count));
	querylog_set_every(10);
	assert_true(querylog_sample(&count));
	querylog_set_every(0);
}

/* ---- lines ------------------------------------------------------------------ */

static void logfmt_lines_carry_every_field(void **state)
{
	static const char *const www[] = {"Www", "Example", "com", NULL};
	static const char *const odd[] = {"a b", "q\"uote", "nl\n", "example", NULL};
	uint8_t reply[512];
	struct sockaddr_storage c4 = v4("192.0.2.7", 53211), c6 = v6("2001:db8::9", 40000);
	char *lines[8];

	(void)state;
	start("log: {queries: 1}\n", 2);
	begin_capture();
	querylog_add(1, &c4, QUERY_UDP, QUERY_SOURCE_CACHE, reply,
		     make_reply(reply, www, 1, 0, 16));
	querylog_add(1, &c6, QUERY_TCP, QUERY_SOURCE_CLUSTER, reply,
		     make_reply(reply, odd, 65, 3, 0));
	/* FORMERR for a question we could not read: no question echoed */
	memcpy(reply, "\x12\x34\x81\x81\0\0\0\0\0\0\0\0", 12);
	querylog_add(0, &c4, QUERY_UDP, QUERY_SOURCE_NONE, reply, 12);
	querylog_add(QUERYLOG_RESOLVER, &c4, QUERY_UDP, QUERY_SOURCE_UPSTREAM, reply,
		     make_reply(reply, www, 4242, 2, 0));
	querylog_stop();
	assert_int_equal(split_lines((char *)end_capture(), lines, 8), 4);
	/* rings are written in order: worker 0, worker 1, then the resolver */
	assert_string_equal(lines[0],
			    "level=info msg=query client=192.0.2.7 client_port=53211 protocol=udp "
			    "qname=\"\" qtype=\"\" rcode=FORMERR source=none size=12");
	assert_string_equal(lines[1],
			    "level=info msg=query client=192.0.2.7 client_port=53211 protocol=udp "
			    "qname=Www.Example.com. qtype=A rcode=NOERROR source=cache size=49");
	assert_string_equal(lines[2],
			    "level=info msg=query client=2001:db8::9 client_port=40000 protocol=tcp "
			    "qname=\"a\\\\032b.q\\\\034uote.nl\\\\010.example.\" qtype=HTTPS "
			    "rcode=NXDOMAIN source=cluster size=40");
	assert_string_equal(lines[3],
			    "level=info msg=query client=192.0.2.7 client_port=53211 protocol=udp "
			    "qname=Www.Example.com. qtype=TYPE4242 rcode=SERVFAIL source=upstream "
			    "size=33");
}

static void json_lines_carry_the_same_fields(void **state)
{
	static const char *const www[] = {"www", "example", "com", NULL};
	uint8_t reply[512];
	struct sockaddr_storage c6 = v6("::1", 5353);
	json_object *obj, *v;

	(void)state;
	start("log: {queries: 1, format: json}\n", 1);
	begin_capture();
	querylog_add(0, &c6, QUERY_TCP, QUERY_SOURCE_STALE, reply, make_reply(reply, www, 28, 0, 0));
	querylog_stop();
	obj = json_tokener_parse(end_capture());
	assert_non_null(obj);
	static const char *const want[][2] = {
		{"level", "info"}, {"msg", "query"}, {"client", "::1"}, {"client_port", "5353"},
		{"protocol", "tcp"}, {"qname", "www.example.com."}, {"qtype", "AAAA"},
		{"rcode", "NOERROR"}, {"source", "stale"}, {"size", "33"},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		assert_true(json_object_object_get_ex(obj, want[i][0], &v));
		assert_string_equal(json_object_get_string(v), want[i][1]);
	}
	assert_true(json_object_object_get_ex(obj, "ts", &v));
	assert_int_equal(json_object_object_length(obj), 11);
	json_object_put(obj);
	log_setup(LOG_INFO, LOG_FORMAT_LOGFMT);
}

/* Written by the log thread within its period, not only at stop. */
static void records_are_written_while_running(void **state)
{
	static const char *const www[] = {"www", "example", "com", NULL};
	uint8_t reply[512];
	struct sockaddr_storage c4 = v4("192.0.2.1", 1000);
	char line[256];
	ssize_t n = 0;

	(void)state;
	start("log: {queries: 1}\n", 1);
	begin_capture();
	querylog_add(0, &c4, QUERY_UDP, QUERY_SOURCE_STATIC, reply, make_reply(reply, www, 1, 0, 0));
	for (int i = 0; i < 200 && n <= 0; i++) {
		usleep(10000);
		n = pread(capture_fd, line, sizeof line - 1, 0);
	}
	querylog_stop();
	end_capture();
	assert_true(n > 0);
	line[n] = '\0';
	assert_non_null(strstr(line, "msg=query client=192.0.2.1"));
}

/* ---- a full ring ------------------------------------------------------------------ */

static void full_ring_drops_and_counts_every_record_it_cannot_keep(void **state)
{
	static const char *const www[] = {"www", "example", "com", NULL};
	enum { ADDED = 10000 };
	uint8_t reply[512];
	size_t len = make_reply(reply, www, 1, 0, 0);
	struct sockaddr_storage c4 = v4("192.0.2.1", 1000);
	char want[128];

	(void)state;
	begin_capture();
	start("log: {queries: 1, query_buffer: 16}\n", 1);
	for (int i = 0; i < ADDED; i++)
		querylog_add(0, &c4, QUERY_UDP, QUERY_SOURCE_STATIC, reply, len);
	uint64_t dropped = querylog_dropped();
	querylog_stop();
	const char *out = end_capture();
	size_t written = 0;
	for (const char *p = out; (p = strstr(p, "msg=query ")); p++)
		written++;
	/* 16 slots, drained every 100 ms: 10,000 records in a tight loop overflow. */
	assert_true(dropped > 0);
	assert_int_equal(written + dropped, ADDED);
	snprintf(want, sizeof want, "dropped=%llu dropped_total=%llu\n",
		 (unsigned long long)dropped, (unsigned long long)dropped);
	assert_non_null(strstr(out, "level=warn msg=\"query log records dropped"));
	assert_non_null(strstr(out, want));
}

static void producers_allocate_nothing_and_take_no_lock(void **state)
{
	static const char *const www[] = {"www", "example", "com", NULL};
	uint8_t reply[512];
	size_t len = make_reply(reply, www, 1, 0, 0);
	struct sockaddr_storage c4 = v4("192.0.2.1", 1000);
	uint32_t count = 0;

	(void)state;
	if (!alloc_counting_works())
		fail_msg("test_querylog is not linked with --wrap (see the Makefile)");
	begin_capture();
	start("log: {queries: 1}\n", 1);
	counting = true;
	for (int i = 0; i < 1000; i++)
		if (querylog_sample(&count))
			querylog_add(0, &c4, QUERY_UDP, QUERY_SOURCE_STATIC, reply, len);
	counting = false;
	querylog_stop();
	end_capture();
	assert_int_equal(forbidden_calls, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sampler_picks_one_in_n),
		cmocka_unit_test(logfmt_lines_carry_every_field),
		cmocka_unit_test(json_lines_carry_the_same_fields),
		cmocka_unit_test(records_are_written_while_running),
		cmocka_unit_test(full_ring_drops_and_counts_every_record_it_cannot_keep),
		cmocka_unit_test(producers_allocate_nothing_and_take_no_lock),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
