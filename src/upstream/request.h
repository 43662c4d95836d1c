/*
 * upstream/request.h — a question for the resolver, as a worker (or a
 * control thread) hands it over: the parsed question, what the reply may
 * hold, and where it goes; packed (request.c) for the rings and for the
 * clients that wait; and the TCP reply that comes back. A header of its
 * own so that the query pipeline, which fills it, need not include the
 * resolver's interface.
 */
#ifndef LOCALDNS_UPSTREAM_REQUEST_H
#define LOCALDNS_UPSTREAM_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dns/dns.h"
#include "dns64/dns64.h"

/* Where a deferred reply goes. */
enum upstream_transport {
	UPSTREAM_NO_REPLY, /* a background refresh (prefetch, stale): nobody waits */
	UPSTREAM_UDP,
	UPSTREAM_TCP,
};

/* A local CNAME chain leaving local data, or autopath's candidates: concatenated wire names. */
#define UPSTREAM_CHAIN_MAX 512
/* q's local NXDOMAIN answer for autopath: one SOA record, compressed (54 bytes). */
#define UPSTREAM_NXDOMAIN_MAX 64

/* A new field here must also be listed in transfer() in request.c, which packs requests. */
struct upstream_request {
	struct dns_query q;
	/* When chain_len > 0, q was answered locally with CNAMEs (each with
	 * chain_ttl) ending at the last name in chain: the resolver asks for
	 * that name and answers q with the chain followed by its records.
	 * With search (autopath), q is NXDOMAIN here and chain holds the
	 * candidates still to try, in order: the resolver asks for each in
	 * turn (an NXDOMAIN is cached under the candidate's own question) and
	 * answers q with a CNAME (chain_ttl) to the first that exists plus its
	 * records; when none does, q gets its local NXDOMAIN: the authority
	 * section in nxdomain, as written after q's question. */
	uint8_t chain[UPSTREAM_CHAIN_MAX];
	uint16_t chain_len;
	uint32_t chain_ttl;
	bool search;
	uint8_t nxdomain_len;
	uint8_t nxdomain[UPSTREAM_NXDOMAIN_MAX];
	uint32_t reply_limit;  /* largest reply this client may get */
	uint16_t udp_payload;  /* what our OPT record advertises */
	bool has_cookie;       /* answer the client's cookie with `cookie` */
	uint8_t cookie[DNS_SERVER_COOKIE_LEN];

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
	/* DNS64 (dns64.prefix): set (len > 0) when the client's AAAA question
	 * may be synthesized (dns64_applies). When its AAAA answer has no AAAA
	 * records (and is not NXDOMAIN), the resolver asks the A question of
	 * the last name of its CNAME chain and answers with AAAA records made
	 * from it; dns64_a then marks the request as waiting for that A answer,
	 * with the name in chain (search false). */
	struct dns64_prefix dns64;
	bool dns64_a;
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
