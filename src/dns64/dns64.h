/*
 * dns64 — DNS64 (RFC 6147) as pure functions: which answers it changes,
 * the AAAA records it makes from A records under the NAT64 prefix (RFC
 * 6052), and the IPv4 reverse name behind an IPv6 reverse name under that
 * prefix.
 *
 * Owns: the rules; nothing else. Callers (query/ for local data and cache
 * hits; the resolver for the names it asks) look the records up and hand
 * the messages here.
 *
 * Must never: allocate, lock, log or make a syscall (it runs on the
 * workers' query path); read past its buffers.
 *
 * The rules (RFC 6147 section 5, and CoreDNS's dns64 plugin where the RFC
 * leaves room; docs/operations.md, "DNS64", says why each):
 * - only AAAA questions of class IN, asked over IPv6 (CoreDNS: a client
 *   asking over IPv4 has IPv4 and needs no synthesis), and not with both
 *   DO and CD set (RFC 6147 5.5: the client validates, and a synthesized
 *   record would fail its validation);
 * - an answer with any AAAA record is kept as it is (5.1.1), and so is
 *   NXDOMAIN (5.1.2); NODATA, a CNAME chain that ends without AAAA, and
 *   any other rcode (SERVFAIL: 5.1.2 treats it as an empty answer) are
 *   replaced by the answer to the A question, each A record made an AAAA
 *   record under the prefix and every other record kept (5.3.3), when
 *   that answer has A records; otherwise the AAAA answer stays;
 * - a synthesized record's TTL is the smaller of the A record's and the
 *   TTL of the SOA record in the AAAA answer's authority section, or 600
 *   without one (5.1.7);
 * - synthesized answers never carry AD (their data was never signed);
 * - a PTR question for an address under the prefix is answered with a
 *   CNAME to the IPv4 address's in-addr.arpa name (5.3.1, its first way),
 *   which the caller then answers or chases like any CNAME (CoreDNS's
 *   plugin does not answer these; the RFC asks for it).
 */
#ifndef LOCALDNS_DNS64_H
#define LOCALDNS_DNS64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dns/dns.h"

/* RFC 6147 5.1.7: a synthesized record lives at most this long without an SOA to go by. */
#define DNS64_TTL_WITHOUT_SOA 600

/* The NAT64 prefix: its first len bits (32, 40, 48, 56, 64 or 96) count. */
struct dns64_prefix {
	uint8_t addr[16];
	uint8_t len;     /* 0: DNS64 off */
};

/* RFC 6052 section 2.2: v4 embedded under p, around the "u" octet (bits 64-71). */
void dns64_embed(const struct dns64_prefix *p, const uint8_t v4[4], uint8_t out[16]);

/* The IPv4 address embedded in v6 under p; false when v6 is not under p. */
bool dns64_extract(const struct dns64_prefix *p, const uint8_t v6[16], uint8_t v4[4]);

/* Whether a query from peer for q may be synthesized (see the rules above). */
bool dns64_applies(const struct dns64_prefix *p, const struct dns_query *q,
		   const struct sockaddr_storage *peer);

/*
 * Whether the reply to an AAAA question (reply[0..len)) asks for synthesis:
 * not NXDOMAIN, and no AAAA record in its answer section.
 */
bool dns64_wanted(const uint8_t *reply, size_t len);

/*
 * Fill w, begun for the client's AAAA question and empty, with the answer
 * synthesized from a (a reply to the A question for the same name): its
 * rcode and AA, its answer section with every A record made an AAAA
 * record under p (TTL capped as the rules say, from aaaa, the AAAA reply),
 * its authority and additional records (not OPT: w writes the client's).
 * false when a has no A record in its answer (or is malformed): w is then
 * untouched, and the AAAA reply is the answer.
 */
bool dns64_synthesize(const struct dns64_prefix *p, const uint8_t *aaaa, size_t aaaa_len,
		      const uint8_t *a, size_t a_len, struct dns_writer *w);

/*
 * The same for an A reply to the question of the last name of the AAAA
 * reply's CNAME chain (dns64_chain_end): the AAAA reply's answer section
 * (its CNAMEs) comes first, as it is, then the A reply's records as above.
 * The resolver's way for external names: it asks A for where the chain ends.
 */
bool dns64_synthesize_chain(const struct dns64_prefix *p, const uint8_t *aaaa,
			    size_t aaaa_len, const uint8_t *a, size_t a_len,
			    struct dns_writer *w);

/*
 * The last name of the CNAME chain that reply's answer section holds from
 * qname (qname itself without one), lower-cased into out; its wire length,
 * or 0 when reply is malformed.
 */
size_t dns64_chain_end(const uint8_t *reply, size_t len, const uint8_t *qname,
		       uint8_t out[DNS_MAX_NAME]);

/*
 * For a PTR question's name (lower-cased wire form): when it is the
 * ip6.arpa name of an address under p, the in-addr.arpa name of the IPv4
 * address embedded in it, into out; its length, or 0.
 */
size_t dns64_ptr_target(const struct dns64_prefix *p, const uint8_t *qname,
			uint8_t out[DNS_MAX_NAME]);

#endif
