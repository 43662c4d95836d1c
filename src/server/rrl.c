/*
 * server/rrl.c — response rate limiting (rrl.*), in the style of BIND's and
 * Knot's: UDP responses to one client network (an IPv4 /24, an IPv6 /56 by
 * default) are counted per second, and past rrl.responses_per_second the
 * rest of that second's responses are dropped, except every rrl.slip-th,
 * which goes out truncated (TC=1, no records) so a real client retries over
 * TCP, which is not limited. A forged source address therefore gets little
 * back to reflect at its victim, while a real client still gets through.
 *
 * The counts live in one table shared by all workers (a client's queries
 * reach every worker: SO_REUSEPORT spreads them by port), RRL_SLOTS words
 * each holding (second, count), updated with one compare-and-swap, and
 * picked by a keyed hash of the network: two networks may share a slot (and
 * its count), but nobody can aim at another's. Off (the default), nothing
 * of this runs and the table is never touched.
 */
#include "server/internal.h"

#include <netinet/in.h>
#include <string.h>

#include "util/client.h"

/* The client's network (its address cut to the prefix length) into out; the length. */
static size_t network_of(const struct server *s, const struct sockaddr_storage *peer,
			 uint8_t out[1 + 16])
{
	const uint8_t *addr;
	unsigned prefix, bytes;

	if (peer->ss_family == AF_INET) {
		addr = (const uint8_t *)&((const struct sockaddr_in *)peer)->sin_addr;
		prefix = atomic_load_explicit(&s->rrl_v4_prefix, memory_order_relaxed);
		bytes = 4;
	} else {
		addr = (const uint8_t *)&((const struct sockaddr_in6 *)peer)->sin6_addr;
		prefix = atomic_load_explicit(&s->rrl_v6_prefix, memory_order_relaxed);
		bytes = 16;
	}
	out[0] = (uint8_t)peer->ss_family;
	memset(out + 1, 0, bytes);
	memcpy(out + 1, addr, prefix / 8);
	if (prefix % 8)
		out[1 + prefix / 8] = addr[prefix / 8] & (uint8_t)(0xff << (8 - prefix % 8));
	return 1 + bytes;
}

enum rrl_verdict rrl_check(struct server *s, const struct sockaddr_storage *peer, uint64_t now_s)
{
	unsigned limit = atomic_load_explicit(&s->rrl_rate, memory_order_relaxed);
	uint8_t net[1 + 16];
	uint64_t word, next;
	uint32_t count;

	_Atomic uint64_t *slots = atomic_load_explicit(&s->rrl_slots, memory_order_acquire);

	if (limit == 0 || !slots)
		return RRL_PASS;
	size_t n = network_of(s, peer, net);
	_Atomic uint64_t *slot = &slots[dns_siphash13(s->source_key, net, n) & (RRL_SLOTS - 1)];
	word = atomic_load_explicit(slot, memory_order_relaxed);
	do {
		count = (word >> 32) == (uint32_t)now_s ? (uint32_t)word + 1 : 1;
		next = (uint64_t)(uint32_t)now_s << 32 | count;
	} while (!atomic_compare_exchange_weak_explicit(slot, &word, next, memory_order_relaxed,
							memory_order_relaxed));
	if (count <= limit)
		return RRL_PASS;
	unsigned slip = atomic_load_explicit(&s->rrl_slip, memory_order_relaxed);
	return slip && (count - limit) % slip == 0 ? RRL_SLIP : RRL_DROP;
}

size_t rrl_truncate(uint8_t *reply, size_t len)
{
	size_t pos = DNS_HEADER_LEN;

	if (len < DNS_HEADER_LEN || reply[4] != 0 || reply[5] != 1)
		return 0; /* not one question: nothing to slip (drop it) */
	/* our own writer put the question there uncompressed */
	while (pos < len && reply[pos] != 0)
		pos += 1u + reply[pos];
	pos += 1 + 4;
	if (pos > len)
		return 0;
	reply[2] |= DNS_F_TC >> 8;
	memset(reply + 6, 0, 6); /* no answer, authority or additional records */
	return pos;
}
