/*
 * Unit tests for dnstap/: every field of the messages encode.c writes
 * (decoded again with protobuf-c's generated unpacker), FORWARDER_* versus
 * RESOLVER_*, the config keys; and the producer side: it allocates nothing
 * and takes no mutex (this binary is linked with --wrap, see
 * alloc_count.h), and a ring that nobody drains keeps exactly what fits
 * and counts the rest as dropped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <cmocka.h>

#include "alloc_count.h"
#include "config_text.h"
#include "config/config.h"
#include "dnstap/dnstap.h"
#include "dnstap/dnstap.pb-c.h"
#include "dnstap/internal.h"
#include "log/log.h"

static void config_fails(const char *yaml, const char *want)
{
	char err[CONFIG_ERR_MAX];
	struct config *cfg = NULL;

	assert_int_equal(config_load_string("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof err),
			 -1);
	if (!strstr(err, want))
		fail_msg("expected \"%s\" in: %s", want, err);
}

/* A record as the rings hold it, in a buffer of its own. */
static struct tap_entry *entry(uint8_t *buf, enum tap_entry_kind kind, const uint8_t *first,
			       size_t first_len, const uint8_t *second, size_t second_len)
{
	struct tap_entry *e = (struct tap_entry *)buf;

	memset(e, 0, sizeof *e);
	e->kind = (uint8_t)kind;
	e->family = AF_INET;
	e->transport = QUERY_TCP;
	e->port = 40000;
	inet_pton(AF_INET, "10.1.2.3", e->addr);
	inet_pton(AF_INET, "169.254.20.10", e->local);
	e->local_port = 53;
	e->sec = 1700000000;
	e->nsec = 123456789;
	e->first_len = (uint16_t)first_len;
	e->second_len = (uint32_t)second_len;
	if (first_len)
		memcpy(e->bytes, first, first_len);
	if (second_len)
		memcpy(e->bytes + first_len, second, second_len);
	return e;
}

static Dnstap__Dnstap *decode(const uint8_t *buf, size_t len)
{
	Dnstap__Dnstap *d = dnstap__dnstap__unpack(NULL, len, buf);

	assert_non_null(d);
	assert_int_equal(d->type, DNSTAP__DNSTAP__TYPE__MESSAGE);
	assert_non_null(d->message);
	return d;
}

static const uint8_t query[] = {0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
				3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0, 1, 0, 1};
static const uint8_t reply[] = {0xab, 0xcd, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0,
				3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0, 1, 0, 1,
				0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1};

static void client_messages_carry_every_recommended_field(void **state)
{
	uint8_t buf[512], out[2048];
	struct tap_meta meta = {.identity = "node-a", .version = "localdns 1.2.3"};
	const struct tap_entry *e =
		entry(buf, TAP_CLIENT, query, sizeof query, reply, sizeof reply);
	size_t len;
	Dnstap__Dnstap *d;

	(void)state;
	len = dnstap_encode(e, DNSTAP_CLIENT_QUERY, &meta, "pod=shop/app", out, sizeof out);
	assert_true(len > 0);
	d = decode(out, len);
	Dnstap__Message *m = d->message;
	assert_int_equal(m->type, DNSTAP__MESSAGE__TYPE__CLIENT_QUERY);
	assert_true(m->has_socket_family && m->socket_family == DNSTAP__SOCKET_FAMILY__INET);
	assert_true(m->has_socket_protocol && m->socket_protocol == DNSTAP__SOCKET_PROTOCOL__TCP);
	assert_true(m->has_query_address && m->query_address.len == 4);
	assert_memory_equal(m->query_address.data, e->addr, 4);
	assert_true(m->has_query_port && m->query_port == 40000);
	assert_true(m->has_response_address && m->response_address.len == 4);
	assert_memory_equal(m->response_address.data, e->local, 4); /* the listen address */
	assert_true(m->has_response_port && m->response_port == 53);
	assert_true(m->has_query_time_sec && m->query_time_sec == 1700000000);
	assert_true(m->has_query_time_nsec && m->query_time_nsec == 123456789);
	assert_true(m->has_query_message && m->query_message.len == sizeof query);
	assert_memory_equal(m->query_message.data, query, sizeof query);
	assert_false(m->has_response_message);
	assert_true(d->has_identity && d->identity.len == 6);
	assert_memory_equal(d->identity.data, "node-a", 6);
	assert_true(d->has_version && d->version.len == 14);
	assert_true(d->has_extra && d->extra.len == 12);
	assert_memory_equal(d->extra.data, "pod=shop/app", 12);
	dnstap__dnstap__free_unpacked(d, NULL);

	len = dnstap_encode(e, DNSTAP_CLIENT_RESPONSE, &meta, NULL, out, sizeof out);
	d = decode(out, len);
	m = d->message;
	assert_int_equal(m->type, DNSTAP__MESSAGE__TYPE__CLIENT_RESPONSE);
	assert_true(m->has_response_message && m->response_message.len == sizeof reply);
	assert_memory_equal(m->response_message.data, reply, sizeof reply);
	assert_true(m->has_response_time_sec && m->response_time_sec == 1700000000);
	assert_true(m->has_query_time_sec); /* the same record had the query */
	assert_false(m->has_query_message);
	assert_false(d->has_extra);
	dnstap__dnstap__free_unpacked(d, NULL);

	/* nothing of a kind the record does not hold, or a resolver kind */
	assert_int_equal(dnstap_encode(e, DNSTAP_RESOLVER_QUERY, &meta, NULL, out, sizeof out), 0);
	/* no room */
	assert_int_equal(dnstap_encode(e, DNSTAP_CLIENT_QUERY, &meta, NULL, out, 20), 0);
}

static void a_reply_the_resolver_sent_has_no_query_part(void **state)
{
	uint8_t buf[512], out[2048];
	struct tap_meta meta = {.identity = "", .version = NULL};
	struct tap_entry *e = entry(buf, TAP_CLIENT, NULL, 0, reply, sizeof reply);
	Dnstap__Dnstap *d;

	(void)state;
	e->family = AF_INET6;
	inet_pton(AF_INET6, "fd00::7", e->addr);
	e->transport = QUERY_UDP;
	assert_int_equal(dnstap_encode(e, DNSTAP_CLIENT_QUERY, &meta, NULL, out, sizeof out), 0);
	size_t len = dnstap_encode(e, DNSTAP_CLIENT_RESPONSE, &meta, NULL, out, sizeof out);
	d = decode(out, len);
	assert_false(d->has_identity);
	assert_false(d->has_version);
	assert_int_equal(d->message->socket_family, DNSTAP__SOCKET_FAMILY__INET6);
	assert_int_equal(d->message->socket_protocol, DNSTAP__SOCKET_PROTOCOL__UDP);
	assert_int_equal(d->message->query_address.len, 16);
	assert_false(d->message->has_query_time_sec);
	dnstap__dnstap__free_unpacked(d, NULL);
}

/* Messages of every length class (one-, two- and three-byte lengths) decode whole. */
static void long_messages_decode_whole(void **state)
{
	static uint8_t buf[70000 + 512], out[2 * 70000];
	static uint8_t big[66000];
	struct tap_meta meta = {.identity = "node-a", .version = "localdns 1"};

	(void)state;
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)(i * 7);
	for (size_t len = 1; len <= sizeof big; len = len * 3 + 1) {
		const struct tap_entry *e = entry(buf, TAP_CLIENT, query, sizeof query, big, len);
		size_t n = dnstap_encode(e, DNSTAP_CLIENT_RESPONSE, &meta, "pod=a/b", out,
					 sizeof out);
		Dnstap__Dnstap *d = decode(out, n);
		assert_int_equal(d->message->response_message.len, len);
		assert_memory_equal(d->message->response_message.data, big, len);
		assert_true(d->has_extra && d->extra.len == 7);
		dnstap__dnstap__free_unpacked(d, NULL);
	}
}

static void resolver_messages_are_forwarder_or_resolver_ones(void **state)
{
	static const uint8_t name[] = {3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0};
	uint8_t buf[512], out[2048];
	struct tap_meta meta = {.identity = "n"};
	struct tap_entry *e = entry(buf, TAP_RESOLVER_QUERY, name, sizeof name, NULL, 0);
	Dnstap__Dnstap *d;

	(void)state;
	e->qtype = 28;
	e->qclass = 1;
	e->family = 0;
	size_t len = dnstap_encode(e, DNSTAP_RESOLVER_QUERY, &meta, NULL, out, sizeof out);
	d = decode(out, len);
	assert_int_equal(d->message->type, DNSTAP__MESSAGE__TYPE__FORWARDER_QUERY);
	assert_false(d->message->has_query_address);
	/* the question as a wire query: ID 0, RD, one question, AAAA IN */
	static const uint8_t want[] = {0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0,
				       3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0,
				       0, 28, 0, 1};
	assert_int_equal(d->message->query_message.len, sizeof want);
	assert_memory_equal(d->message->query_message.data, want, sizeof want);
	dnstap__dnstap__free_unpacked(d, NULL);

	meta.recursive = true;
	len = dnstap_encode(e, DNSTAP_RESOLVER_QUERY, &meta, NULL, out, sizeof out);
	d = decode(out, len);
	assert_int_equal(d->message->type, DNSTAP__MESSAGE__TYPE__RESOLVER_QUERY);
	dnstap__dnstap__free_unpacked(d, NULL);
	assert_int_equal(dnstap_encode(e, DNSTAP_RESOLVER_RESPONSE, &meta, NULL, out, sizeof out),
			 0);

	e = entry(buf, TAP_RESOLVER_RESPONSE, NULL, 0, reply, sizeof reply);
	e->family = 0;
	len = dnstap_encode(e, DNSTAP_RESOLVER_RESPONSE, &meta, NULL, out, sizeof out);
	d = decode(out, len);
	assert_int_equal(d->message->type, DNSTAP__MESSAGE__TYPE__RESOLVER_RESPONSE);
	assert_int_equal(d->message->response_message.len, sizeof reply);
	assert_true(d->message->has_response_time_sec);
	dnstap__dnstap__free_unpacked(d, NULL);
}

static void config_keys(void **state)
{
	struct config *cfg;

	(void)state;
	cfg = config_of("dnstap: {socket: /run/tap.sock}\n");
	assert_int_equal(cfg->dnstap.messages, DNSTAP_CLIENT_QUERY | DNSTAP_CLIENT_RESPONSE);
	assert_int_equal(cfg->dnstap.buffer, 1u << 20);
	config_free(cfg);
	cfg = config_of("dnstap: {address: \"127.0.0.1:6000\", identity: x,\n"
			  "  messages: [resolver_response, client_query]}\n");
	assert_int_equal(cfg->dnstap.messages, DNSTAP_CLIENT_QUERY | DNSTAP_RESOLVER_RESPONSE);
	assert_string_equal(cfg->dnstap.address, "127.0.0.1:6000");
	char identity[64];
	dnstap_identity(cfg, identity, sizeof identity);
	assert_string_equal(identity, "x");
	config_free(cfg);
	cfg = config_of("kubernetes: {node_name: node-7}\n");
	dnstap_identity(cfg, identity, sizeof identity);
	assert_string_equal(identity, "node-7"); /* the default: the node's name */
	config_free(cfg);
	config_fails("dnstap: {socket: /a, address: \"127.0.0.1:1\"}\n",
		     "t.yaml:1:22: dnstap: socket and address are both set");
	config_fails("dnstap: {messages: [client_query, auth_query]}\n",
		     "\"auth_query\" is not one of client_query, client_response, resolver_query, "
		     "resolver_response");
	config_fails("dnstap: {address: collector:6000}\n", "t.yaml:1:19:");
}

/*
 * A 64 KiB ring nobody drains (the collector is not there): 128-byte
 * records fill it exactly, every one after is dropped and counted, and
 * no call allocated or locked (counted on this thread only: the writer
 * thread is trying to connect meanwhile).
 */
static void producers_allocate_nothing_and_count_what_does_not_fit(void **state)
{
	char err[256];
	struct config *cfg = config_of("dnstap: {socket: /nonexistent/tap.sock, buffer: 64KiB}\n");
	struct sockaddr_storage client = {.ss_family = AF_INET};
	uint8_t q[28] = {0}, r[28] = {0};

	(void)state;
	assert_true(alloc_counting_works());
	log_setup(LOG_ERROR, LOG_FORMAT_LOGFMT);
	if (dnstap_start(cfg, 1, NULL, NULL, err, sizeof err) < 0)
		fail_msg("%s", err);
	assert_true(dnstap_client_on());
	assert_int_equal(sizeof(struct tap_entry) + sizeof q + sizeof r, 128);
	count_thread = pthread_self();
	count_one_thread = true;
	counting = true;
	for (int i = 0; i < 600; i++)
		dnstap_client(0, &client, NULL, QUERY_UDP, q, sizeof q, r, sizeof r);
	counting = false;
	count_one_thread = false;
	assert_int_equal(forbidden_calls, 0);
	assert_int_equal(dnstap_dropped(), 600 - 65536 / 128);
	assert_int_equal(dnstap_sent(), 0);
	assert_int_equal(dnstap_connected(), 0);
	dnstap_stop();
	assert_false(dnstap_client_on());
	config_free(cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(client_messages_carry_every_recommended_field),
		cmocka_unit_test(a_reply_the_resolver_sent_has_no_query_part),
		cmocka_unit_test(long_messages_decode_whole),
		cmocka_unit_test(resolver_messages_are_forwarder_or_resolver_ones),
		cmocka_unit_test(config_keys),
		cmocka_unit_test(producers_allocate_nothing_and_count_what_does_not_fit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
