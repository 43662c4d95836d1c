/*
 * util/client — who a client is, for the limits that apply per client: its
 * IPv4 address, or its IPv6 /64 (one host usually holds a whole /64, so a
 * limit per IPv6 address would be a limit per 2^64 addresses).
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

#define CLIENT_PREFIX_MAX 9

/* The family and the address (IPv4) or its first 64 bits (IPv6) into out; the length. */
static inline size_t client_prefix(const struct sockaddr_storage *ss,
				   uint8_t out[CLIENT_PREFIX_MAX])
{
	out[0] = (uint8_t)ss->ss_family;
	if (ss->ss_family == AF_INET) {
		memcpy(out + 1, &((const struct sockaddr_in *)ss)->sin_addr, 4);
		return 5;
	}
	if (ss->ss_family == AF_INET6) {
		memcpy(out + 1, &((const struct sockaddr_in6 *)ss)->sin6_addr, 8);
		return 9;
	}
	return 1;
}

#endif
