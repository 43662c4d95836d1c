/*
 * upstream/request.h — a question for the resolver, as a worker (or a
 * control thread) hands it over: what to answer (struct query_ask, which
 * the query pipeline fills: query/ask.h) and where the reply goes (which
 * the worker adds: its UDP socket and the client's address, or its TCP
 * connection); packed (request.c) for the rings and for the clients that
 * wait; and the TCP reply that comes back. The two halves are apart as
 * Unbound keeps a query's comm_reply apart from its question: the pipeline
 * never sees a socket, and includes nothing of the resolver.
 */
#ifndef LOCALDNS_UPSTREAM_REQUEST_H
#define LOCALDNS_UPSTREAM_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "query/ask.h"

/* Where a deferred reply goes. */
enum upstream_transport {
	UPSTREAM_NO_REPLY, /* a background refresh (prefetch, stale): nobody waits */
	UPSTREAM_UDP,
	UPSTREAM_TCP,
};

/* A new field here (or in struct query_ask) must also be listed in transfer() in request.c,
 * which packs requests. */
struct upstream_request {
	struct query_ask ask;  /* what to answer: query_handle fills it (ctx->ask) */

	/* where the reply goes: the worker's */
	enum upstream_transport transport;
	int fd;                /* UDP: the socket the query came in on */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	struct sockaddr_storage local; /* the address the client asked (dnstap, with tap_reply) */
	uint32_t conn;         /* TCP: the worker's connection slot ... */
	uint32_t conn_gen;     /* ... and which connection held it */
	bool log_reply;        /* sampled for the query log (peer set for TCP too):
				  the resolver logs the reply it sends */
	bool tap_reply;        /* the same for dnstap's client_response */
};

/*
 * A request packed: its fields, each variable part only as long as its
 * length says; about 150 bytes for a typical miss instead of sizeof
 * (1.4 KB). unpack leaves the unused ends of the arrays as they were.
 * upstream_request_fits is false when a length is beyond its array (a
 * writer's bug: the reader's arrays must not be overrun).
 */
size_t upstream_request_packed_size(const struct upstream_request *r);
void upstream_request_pack(const struct upstream_request *r, uint8_t *out);
void upstream_request_unpack(const uint8_t *in, struct upstream_request *r);
bool upstream_request_fits(const struct upstream_request *r);

/* A TCP reply for a worker: the DNS message with its 2-byte length prefix. */
struct upstream_completion {
	uint32_t conn;
	uint32_t conn_gen;
	uint8_t *framed;       /* malloc'd; the taker frees it */
	size_t len;
};

#endif
