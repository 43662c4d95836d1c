/*
 * dnstap/encode.c — one ring record as dnstap protobuf messages (the
 * schema is dnstap.proto beside this file; protoc-c generates its C at
 * build time). Pure: no I/O, no allocation (protobuf-c packs into the
 * caller's buffer), so tests/unit/test_dnstap.c checks every field.
 *
 * Which fields (dnstap.proto's recommendations for each type):
 * - CLIENT_QUERY: socket family and protocol, the client's address and
 *   port (query_address/query_port), ours it asked (response_address/
 *   response_port: a listen address), the query verbatim, its time.
 * - CLIENT_RESPONSE: the same, plus the reply verbatim and its time.
 *   The query time is given when the same record has the query (a local
 *   or cached answer); a reply the resolver thread sent later comes
 *   without it: the worker recorded the query, at its own time, in the
 *   CLIENT_QUERY.
 * - FORWARDER_QUERY / RESOLVER_QUERY (resolver_query): the question as
 *   localdns hands it to libunbound, as a wire query (ID 0, RD set), and
 *   its time; FORWARDER_* while forwarding, RESOLVER_* while recursing.
 *   libunbound does not tell us which server it asks, nor how often, so
 *   these have no response_address: a message per question, not per packet.
 * - FORWARDER_RESPONSE / RESOLVER_RESPONSE: libunbound's answer message
 *   (its question, rcode and records; not necessarily the upstream's
 *   bytes) and its time.
 * The Dnstap envelope carries identity, version and, for a client whose
 * address is a pod's on this node, extra = "pod=<namespace>/<name>".
 *
 * Cost: protobuf-c packs a nested message by walking it twice (its size,
 * for the length in front of it, then its bytes), and the Message is most
 * of the work, so the envelope is packed by protobuf-c without it and the
 * Message after it as field 14 (its tag, its length, then protobuf-c's
 * bytes for it: protobuf parses the fields of an encoding in any order).
 * That halved protobuf-c's share of the writer thread's time with every
 * query logged (docs/performance.md, "dnstap"). The envelope is the same
 * for every message of a record (and, without extra, of a connection), so
 * the writer packs it once (dnstap_envelope) and copies it in front of each
 * Message, which protobuf-c packs where it stays (dnstap_encode_after).
 */
#include "dnstap/internal.h"

#include <string.h>

#include "dnstap/dnstap.pb-c.h"
#include "dns/dns.h"
#include "dns/wire.h"

/* The wire query (ID 0, RD set) for a resolver record's question; its length, 0 if cap is short. */
static size_t resolver_question(const struct tap_entry *e, uint8_t *out, size_t cap)
{
	size_t need = DNS_HEADER_LEN + e->first_len + 4u;

	if (need > cap || e->first_len == 0)
		return 0;
	memset(out, 0, DNS_HEADER_LEN);
	out[2] = 0x01; /* RD */
	out[5] = 1;    /* QDCOUNT */
	memcpy(out + DNS_HEADER_LEN, e->bytes, e->first_len);
	uint8_t *t = out + DNS_HEADER_LEN + e->first_len;
	dns_put16(t, e->qtype);
	dns_put16(t + 2, e->qclass);
	return need;
}

static ProtobufCBinaryData bytes(const void *data, size_t len)
{
	return (ProtobufCBinaryData){.len = len, .data = (uint8_t *)(uintptr_t)data};
}

static void set_query_time(Dnstap__Message *m, const struct tap_entry *e)
{
	m->has_query_time_sec = m->has_query_time_nsec = true;
	m->query_time_sec = (uint64_t)e->sec;
	m->query_time_nsec = e->nsec;
}

static void set_response_time(Dnstap__Message *m, const struct tap_entry *e)
{
	m->has_response_time_sec = m->has_response_time_nsec = true;
	m->response_time_sec = (uint64_t)e->sec;
	m->response_time_nsec = e->nsec;
}

/* The client's side of a client record: family, protocol, address and port. */
static void set_client(Dnstap__Message *m, const struct tap_entry *e)
{
	m->has_socket_protocol = true;
	m->socket_protocol = e->transport == QUERY_TCP ? DNSTAP__SOCKET_PROTOCOL__TCP
						       : DNSTAP__SOCKET_PROTOCOL__UDP;
	if (e->family != AF_INET && e->family != AF_INET6)
		return;
	m->has_socket_family = m->has_query_address = m->has_query_port = true;
	m->socket_family = e->family == AF_INET ? DNSTAP__SOCKET_FAMILY__INET
						: DNSTAP__SOCKET_FAMILY__INET6;
	m->query_address = bytes(e->addr, e->family == AF_INET ? 4 : 16);
	m->query_port = e->port;
	if (e->local_port) { /* the responder: localdns, at the address the client asked */
		m->has_response_address = m->has_response_port = true;
		m->response_address = bytes(e->local, e->family == AF_INET ? 4 : 16);
		m->response_port = e->local_port;
	}
}

/* The client message of kind for e; false when e has no such part. */
static bool client_message(Dnstap__Message *m, const struct tap_entry *e, enum dnstap_kind kind)
{
	const uint8_t *query = e->bytes, *reply = e->bytes + e->first_len;

	set_client(m, e);
	if (kind == DNSTAP_CLIENT_QUERY) {
		if (e->first_len == 0)
			return false;
		m->type = DNSTAP__MESSAGE__TYPE__CLIENT_QUERY;
		m->has_query_message = true;
		m->query_message = bytes(query, e->first_len);
		set_query_time(m, e);
		return true;
	}
	if (e->second_len == 0)
		return false;
	m->type = DNSTAP__MESSAGE__TYPE__CLIENT_RESPONSE;
	m->has_response_message = true;
	m->response_message = bytes(reply, e->second_len);
	set_response_time(m, e);
	if (e->first_len)
		set_query_time(m, e);
	return true;
}

/* question: room for the wire query (DNS_HEADER_LEN + name + 4 bytes). */
static bool resolver_message(Dnstap__Message *m, const struct tap_entry *e,
			     enum dnstap_kind kind, bool recursive, uint8_t *question, size_t cap)
{
	size_t qlen;

	if ((kind == DNSTAP_RESOLVER_QUERY) != (e->kind == TAP_RESOLVER_QUERY))
		return false;
	if (kind == DNSTAP_RESOLVER_QUERY) {
		if (!(qlen = resolver_question(e, question, cap)))
			return false;
		m->has_query_message = true;
		m->query_message = bytes(question, qlen);
		m->type = recursive ? DNSTAP__MESSAGE__TYPE__RESOLVER_QUERY
				    : DNSTAP__MESSAGE__TYPE__FORWARDER_QUERY;
		set_query_time(m, e);
		return true;
	}
	if (e->second_len == 0)
		return false;
	m->type = recursive ? DNSTAP__MESSAGE__TYPE__RESOLVER_RESPONSE
			    : DNSTAP__MESSAGE__TYPE__FORWARDER_RESPONSE;
	m->has_response_message = true;
	m->response_message = bytes(e->bytes + e->first_len, e->second_len);
	set_response_time(m, e);
	return true;
}

/* Field 14 (message), wire type 2 (length-delimited): dnstap.proto. */
#define MESSAGE_TAG (14u << 3 | 2u)
#define LENGTH_ROOM 3 /* a varint of up to 2^21 - 1: any message tap_encoded_max allows */

static ProtobufCBinaryData text_bytes(const char *text)
{
	return bytes(text, strlen(text));
}

size_t dnstap_envelope(const struct tap_meta *meta, const char *extra, uint8_t *out, size_t cap)
{
	Dnstap__Dnstap d = DNSTAP__DNSTAP__INIT;

	d.type = DNSTAP__DNSTAP__TYPE__MESSAGE;
	if (meta->identity && *meta->identity) {
		d.has_identity = true;
		d.identity = text_bytes(meta->identity);
	}
	if (meta->version) {
		d.has_version = true;
		d.version = text_bytes(meta->version);
	}
	if (extra) {
		d.has_extra = true;
		d.extra = text_bytes(extra);
	}
	if (dnstap__dnstap__get_packed_size(&d) > cap)
		return 0;
	return dnstap__dnstap__pack(&d, out);
}

size_t dnstap_encode_after(const struct tap_entry *e, enum dnstap_kind kind,
			   const struct tap_meta *meta, const uint8_t *env, size_t env_len,
			   uint8_t *out, size_t cap, size_t *start)
{
	Dnstap__Message m = DNSTAP__MESSAGE__INIT;
	uint8_t question[DNS_HEADER_LEN + DNS_MAX_NAME + 4];
	size_t head = env_len + 1 + LENGTH_ROOM, body, n = 0;
	uint8_t varint[LENGTH_ROOM];
	bool ok;

	if (e->kind == TAP_CLIENT)
		ok = (kind & DNSTAP_CLIENT) && client_message(&m, e, kind);
	else
		ok = (kind & DNSTAP_RESOLVER) &&
		     resolver_message(&m, e, kind, meta->recursive, question, sizeof question);
	/* The bound, not get_packed_size: that would walk the fields a second time. */
	if (!ok || cap < head + tap_encoded_max(e))
		return 0;
	body = dnstap__message__pack(&m, out + head);
	for (size_t v = body; ; v >>= 7) {
		varint[n++] = (uint8_t)(v & 0x7f) | (v >= 0x80 ? 0x80 : 0);
		if (v < 0x80)
			break;
	}
	/* the envelope, the tag and the length go right in front of the body: nothing moves */
	*start = head - (env_len + 1 + n);
	memcpy(out + *start, env, env_len);
	out[*start + env_len] = MESSAGE_TAG;
	memcpy(out + *start + env_len + 1, varint, n);
	return env_len + 1 + n + body;
}

size_t dnstap_encode(const struct tap_entry *e, enum dnstap_kind kind, const struct tap_meta *meta,
		     const char *extra, uint8_t *out, size_t cap)
{
	uint8_t env[TAP_ENVELOPE_MAX];
	size_t env_len = dnstap_envelope(meta, extra, env, sizeof env), start, len;

	if (env_len == 0 ||
	    !(len = dnstap_encode_after(e, kind, meta, env, env_len, out, cap, &start)))
		return 0;
	memmove(out, out + start, len);
	return len;
}
