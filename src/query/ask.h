/*
 * query/ask.h — what the pipeline hands on when it cannot answer a query
 * now: the question and how its reply must be written for this client (ID,
 * flags, EDNS, size limit, cookie, a local CNAME chain or autopath's
 * candidates, DNS64). What to answer, and nothing of where the reply goes.
 *
 * Why here, below the resolver: query_handle fills it, and the pipeline is
 * the lower layer; the resolver (upstream/request.h) wraps it with where
 * the reply goes (the socket and client address, or the TCP connection:
 * the worker's to add) as Unbound keeps a query's comm_reply apart from its
 * question. So query/ includes nothing of upstream/, and the resolver reads
 * this struct as the pipeline wrote it. A leaf header beside kinds.h: it
 * includes only the codec (dns/) and DNS64's rules (dns64/).
 *
 * Must never: name a socket, an address or a connection; grow a field that
 * request.c's transfer() does not pack.
 */
#ifndef LOCALDNS_QUERY_ASK_H
#define LOCALDNS_QUERY_ASK_H

#include <stdbool.h>
#include <stdint.h>

#include "dns/dns.h"
#include "dns64/dns64.h"

/* A local CNAME chain leaving local data, or autopath's candidates: concatenated wire names. */
#define QUERY_CHAIN_MAX 512
/* q's local NXDOMAIN answer for autopath: one SOA record, compressed (54 bytes). */
#define QUERY_NXDOMAIN_MAX 64

struct query_ask {
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
	uint8_t chain[QUERY_CHAIN_MAX];
	uint16_t chain_len;
	uint32_t chain_ttl;
	bool search;
	uint8_t nxdomain_len;
	uint8_t nxdomain[QUERY_NXDOMAIN_MAX];
	uint32_t reply_limit;  /* largest reply this client may get */
	uint16_t udp_payload;  /* what our OPT record advertises */
	bool has_cookie;       /* answer the client's cookie with `cookie` */
	uint8_t cookie[DNS_SERVER_COOKIE_LEN];
	/* DNS64 (dns64.prefix): set (len > 0) when the client's AAAA question
	 * may be synthesized (dns64_applies). When its AAAA answer has no AAAA
	 * records (and is not NXDOMAIN), the resolver asks the A question of
	 * the last name of its CNAME chain and answers with AAAA records made
	 * from it; dns64_a then marks the ask as waiting for that A answer,
	 * with the name in chain (search false). */
	struct dns64_prefix dns64;
	bool dns64_a;
	/* The worker's cache look-up for q found no entry at all, live or
	 * expired: the resolver need not look for a stale answer to give q's
	 * client at RFC 8767's timer (false: not known). */
	bool cache_absent;
	/* The cache's key for q (cache/cache.h, struct cache_key: the name's
	 * hash and the whole key's) when the worker's look-up made it
	 * (cache_keyed): the resolver stores and replays q's answer with it
	 * instead of hashing the name again. Whoever changes q clears it. */
	bool cache_keyed;
	uint64_t cache_name_hash, cache_hash;
};

#endif
