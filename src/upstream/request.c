/*
 * upstream/request.c — a request packed: what the request rings carry
 * (ring.c) and what each waiting client keeps (flight.c).
 *
 * Why packed: a struct upstream_request is about 1.4 KB, nearly all of it
 * room for the largest name, CNAME chain, autopath candidates and client
 * address, while a typical miss uses 150 bytes of it. A ring of whole
 * structs touches every one of its pages as it goes round, and a waiter
 * holding a whole struct costs ten times what it needs.
 *
 * The packed form is the request's fields in the order transfer() lists
 * them, each variable part only as long as its length field says.
 */
#include "upstream/request.h"

#include <string.h>

/*
 * Move one request between r and the packed bytes at p: into p when pack,
 * out of it otherwise; with p NULL (pack only) just count. Every field of
 * struct upstream_request and of its struct query_ask is listed here once,
 * lengths before the parts they measure, so packing and unpacking cannot
 * disagree. Returns the packed size.
 */
static size_t transfer(struct upstream_request *r, uint8_t *p, bool pack)
{
	size_t n = 0;

#define MOVE(field, len)                                                  \
	do {                                                              \
		if (p && pack)                                            \
			memcpy(p + n, &r->field, len);                    \
		else if (p)                                               \
			memcpy(&r->field, p + n, len);                    \
		n += len;                                                 \
	} while (0)
#define FIELD(field) MOVE(field, sizeof r->field)
	FIELD(ask.q.id);
	FIELD(ask.q.flags);
	FIELD(ask.q.question_ok);
	FIELD(ask.q.qtype);
	FIELD(ask.q.qclass);
	FIELD(ask.q.qname_len);
	FIELD(ask.q.qname_labels);
	FIELD(ask.q.has_edns);
	FIELD(ask.q.edns_version);
	FIELD(ask.q.edns_do);
	FIELD(ask.q.edns_udp_size);
	FIELD(ask.q.cookie_len);
	FIELD(ask.chain_len);
	FIELD(ask.chain_ttl);
	FIELD(ask.search);
	FIELD(ask.nxdomain_len);
	FIELD(ask.reply_limit);
	FIELD(ask.udp_payload);
	FIELD(ask.has_cookie);
	FIELD(ask.cookie);
	FIELD(ask.cache_absent);
	FIELD(ask.cache_keyed);
	FIELD(transport);
	FIELD(fd);
	FIELD(peer_len);
	FIELD(conn);
	FIELD(conn_gen);
	FIELD(log_reply);
	FIELD(tap_reply);
	FIELD(ask.dns64.len);
	FIELD(ask.dns64_a);
	MOVE(ask.q.qname, r->ask.q.qname_len);
	MOVE(ask.q.qname_orig, r->ask.q.qname_len);
	MOVE(ask.q.cookie, r->ask.q.cookie_len);
	MOVE(ask.chain, r->ask.chain_len);
	MOVE(ask.nxdomain, r->ask.nxdomain_len);
	MOVE(peer, r->peer_len);
	MOVE(local, r->tap_reply ? sizeof r->local : 0);
	MOVE(ask.dns64.addr, r->ask.dns64.len ? sizeof r->ask.dns64.addr : 0);
	MOVE(ask.cache_name_hash, r->ask.cache_keyed ? sizeof r->ask.cache_name_hash : 0);
	MOVE(ask.cache_hash, r->ask.cache_keyed ? sizeof r->ask.cache_hash : 0);
#undef FIELD
#undef MOVE
	return n;
}

size_t upstream_request_packed_size(const struct upstream_request *r)
{
	return transfer((struct upstream_request *)r, NULL, true); /* only reads it */
}

void upstream_request_pack(const struct upstream_request *r, uint8_t *out)
{
	transfer((struct upstream_request *)r, out, true); /* only reads it */
}

void upstream_request_unpack(const uint8_t *in, struct upstream_request *r)
{
	transfer(r, (uint8_t *)in, false); /* only reads in */
}

bool upstream_request_fits(const struct upstream_request *r)
{
	const struct query_ask *a = &r->ask;

	return a->q.qname_len <= sizeof a->q.qname && a->q.cookie_len <= sizeof a->q.cookie &&
	       a->chain_len <= sizeof a->chain && a->nxdomain_len <= sizeof a->nxdomain &&
	       r->peer_len <= sizeof r->peer && a->dns64.len <= 128;
}
