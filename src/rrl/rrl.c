/*
 * rrl/rrl.c — response rate limiting: see rrl.h.
 *
 * The counts live in one table of RRL_SLOTS words, each holding (second,
 * count) and updated with one compare-and-swap, picked by a hash of the
 * client network and the answer, keyed with SipHash-1-3 under a key drawn
 * at the table's making: two (network, answer) pairs may share a slot (and
 * its count), but nobody can aim at another's. Off (the default), nothing
 * of this runs and the table is never made.
 */
#include "rrl/rrl.h"

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "config/config.h"
#include "dns/dns.h"

#define RRL_SLOTS 65536 /* a power of two: 512 KiB */

static _Atomic unsigned rate;   /* rrl.responses_per_second; 0 = off */
static _Atomic unsigned slip;
static _Atomic unsigned v4_prefix, v6_prefix;
static _Atomic(_Atomic uint64_t *) slots; /* RRL_SLOTS of (second << 32 | count) */
static uint8_t key[16];         /* written before slots is published */

void rrl_configure(const struct config *cfg)
{
	atomic_store(&slip, cfg->rrl.slip);
	atomic_store(&v4_prefix, cfg->rrl.ipv4_prefix_length);
	atomic_store(&v6_prefix, cfg->rrl.ipv6_prefix_length);
	if (cfg->rrl.responses_per_second && !atomic_load(&slots) &&
	    getrandom(key, sizeof key, 0) == (ssize_t)sizeof key)
		atomic_store_explicit(&slots, calloc(RRL_SLOTS, sizeof(uint64_t)),
				      memory_order_release);
	atomic_store(&rate, atomic_load(&slots) ? cfg->rrl.responses_per_second : 0);
}

void rrl_free(void)
{
	free((void *)atomic_exchange(&slots, NULL));
	atomic_store(&rate, 0);
}

/* The client's network (its address cut to the prefix length) at out; the length. */
static size_t network_of(const struct sockaddr_storage *peer, uint8_t *out)
{
	const uint8_t *addr;
	unsigned prefix, bytes;

	if (peer->ss_family == AF_INET) {
		addr = (const uint8_t *)&((const struct sockaddr_in *)peer)->sin_addr;
		prefix = atomic_load_explicit(&v4_prefix, memory_order_relaxed);
		bytes = 4;
	} else {
		addr = (const uint8_t *)&((const struct sockaddr_in6 *)peer)->sin6_addr;
		prefix = atomic_load_explicit(&v6_prefix, memory_order_relaxed);
		bytes = 16;
	}
	out[0] = (uint8_t)peer->ss_family;
	memset(out + 1, 0, bytes);
	memcpy(out + 1, addr, prefix / 8);
	if (prefix % 8)
		out[1 + prefix / 8] = addr[prefix / 8] & (uint8_t)(0xff << (8 - prefix % 8));
	return 1 + bytes;
}

/* The network and the answer, as the bytes the slot is picked by; their length. */
static size_t key_bytes(const struct sockaddr_storage *peer, const uint8_t *reply, size_t len,
			uint8_t *out)
{
	struct dns_reply_key answer;
	size_t n = network_of(peer, out);

	dns_reply_key(reply, len, &answer);
	out[n++] = answer.kind;
	out[n++] = (uint8_t)(answer.type >> 8);
	out[n++] = (uint8_t)answer.type;
	memcpy(out + n, answer.name, answer.name_len);
	return n + answer.name_len;
}

/* Count one reply in slot for second now_s; the count so far this second. */
static uint32_t count_in(_Atomic uint64_t *slot, uint64_t now_s)
{
	uint64_t word = atomic_load_explicit(slot, memory_order_relaxed), next;
	uint32_t count;

	do {
		count = (word >> 32) == (uint32_t)now_s ? (uint32_t)word + 1 : 1;
		next = (uint64_t)(uint32_t)now_s << 32 | count;
	} while (!atomic_compare_exchange_weak_explicit(slot, &word, next, memory_order_relaxed,
							memory_order_relaxed));
	return count;
}

/* Cut a reply to header and question with TC set (a slip); its new length, 0 if it cannot be. */
static size_t truncate_reply(uint8_t *reply, size_t len)
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

enum rrl_verdict rrl_apply(const struct sockaddr_storage *peer, uint8_t *reply, size_t *len,
			   uint64_t now_s)
{
	unsigned limit = atomic_load_explicit(&rate, memory_order_relaxed);
	_Atomic uint64_t *table = atomic_load_explicit(&slots, memory_order_acquire);
	uint8_t bytes[1 + 16 + 3 + DNS_MAX_NAME];

	if (limit == 0 || !table)
		return RRL_PASS;
	size_t n = key_bytes(peer, reply, *len, bytes);
	uint32_t count = count_in(&table[dns_siphash13(key, bytes, n) & (RRL_SLOTS - 1)], now_s);
	if (count <= limit)
		return RRL_PASS;
	unsigned every = atomic_load_explicit(&slip, memory_order_relaxed);
	if (every && (count - limit) % every == 0 && (*len = truncate_reply(reply, *len)) > 0)
		return RRL_SLIP;
	*len = 0;
	return RRL_DROP;
}
