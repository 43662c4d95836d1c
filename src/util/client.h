/*
 * util/client — who a client is, for the limits that apply per client (TCP
 * connections per client, the upstream share): its IPv4 address, or its
 * IPv6 address cut to listen.ipv6_client_prefix_length (128 by default: a
 * pod has one address, and Kubernetes puts a node's pods, sometimes several
 * nodes' pods, in one /64; 64 where clients are hosts that each hold a
 * whole /64 and may send from any of it).
 *
 * Owns: nothing; a pure function the per-client tables hash (with their
 * own keys) to find a client's slot.
 *
 * Must never: allocate, lock, log or keep state.
 */
#ifndef LOCALDNS_UTIL_CLIENT_H
#define LOCALDNS_UTIL_CLIENT_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#define CLIENT_PREFIX_MAX 17

/* The family and the address (IPv4), or its first ipv6_bits bits with the
 * rest cleared (IPv6), into out; the length. */
static inline size_t client_prefix(const struct sockaddr_storage *ss, unsigned ipv6_bits,
				   uint8_t out[CLIENT_PREFIX_MAX])
{
	out[0] = (uint8_t)ss->ss_family;
	if (ss->ss_family == AF_INET) {
		memcpy(out + 1, &((const struct sockaddr_in *)ss)->sin_addr, 4);
		return 5;
	}
	if (ss->ss_family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)ss)->sin6_addr.s6_addr;
		unsigned bits = ipv6_bits > 128 ? 128 : ipv6_bits;
		memset(out + 1, 0, 16);
		memcpy(out + 1, a, bits / 8);
		if (bits % 8)
			out[1 + bits / 8] = a[bits / 8] & (uint8_t)(0xff << (8 - bits % 8));
		return 17;
	}
	return 1;
}

#endif
