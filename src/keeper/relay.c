/*
 * keeper/relay.c — a rescued query asked of the cluster DNS, its answer
 * sent back from the socket the query came in on. See internal.h.
 *
 * What the node's fallback does for new flows (DNAT to the kube-dns
 * endpoints of the table's fallback maps), done by hand for the queries a
 * dead or stuck process left queued: the bytes go to an endpoint as they
 * came, under an ID of ours, and the answer goes back under the client's.
 * Nothing is parsed beyond the header.
 *
 * TCP connections go over TCP (stream.c): relayed over UDP, a large
 * answer would reach a TCP client truncated.
 *
 * Forgery: an answer is taken only from the endpoint it was asked of, on
 * the relay socket it was asked from (RELAY_PORTS per family, each with its
 * own random port), with the random ID it was asked under: about 2^18
 * guesses for someone who can forge the endpoint's address, for the few
 * seconds a rescue lasts.
 */
#include "keeper/internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "dns/wire.h"

#define RELAY_PORTS 4          /* sockets per family */
#define RELAY_SLOTS 4096       /* queries in flight */
#define RELAY_TIMEOUT_MS 2000  /* no answer by then: forgotten */
#define RELAY_MAX 4096         /* the longest query or answer relayed */
#define RELAY_READS 256        /* answers read per call */

struct slot {
	bool used;
	int reply_fd;
	int out_fd;
	uint16_t client_id;
	uint16_t wire_id;
	struct sockaddr_storage client;
	struct sockaddr_storage endpoint;
	uint64_t deadline_ms;
};

struct relay {
	int fds[2 * RELAY_PORTS];
	int families[2 * RELAY_PORTS];
	size_t n_fds;
	struct sockaddr_storage *endpoints;
	size_t n_endpoints;
	size_t next_endpoint;
	size_t next_slot;
	unsigned n_used;
	struct slot slots[RELAY_SLOTS];
	uint16_t by_id[65536];     /* wire ID -> slot + 1; 0: free */
	struct keeper_relay_stats stats;
};

static int relay_socket(int family)
{
	int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd >= 0 && family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	return fd; /* unbound: the first sendto picks a random port */
}

struct relay *keeper_relay_new(char *err, size_t errlen)
{
	struct relay *r = calloc(1, sizeof *r);

	if (!r) {
		snprintf(err, errlen, "keeper: out of memory");
		return NULL;
	}
	for (int f = 0; f < 2; f++)
		for (int i = 0; i < RELAY_PORTS; i++) {
			int family = f ? AF_INET6 : AF_INET;
			int fd = relay_socket(family);
			if (fd < 0)
				continue; /* a node without IPv6 relays over IPv4 only */
			/* Bound now, so the port is fixed before any filter forbids bind. */
			struct sockaddr_storage any = {.ss_family = (sa_family_t)family};
			if (bind(fd, (struct sockaddr *)&any, family == AF_INET6
				 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) < 0) {
				close(fd);
				continue;
			}
			r->families[r->n_fds] = family;
			r->fds[r->n_fds++] = fd;
		}
	if (r->n_fds == 0) {
		snprintf(err, errlen, "keeper: cannot open a UDP socket to relay queries: %s",
			 strerror(errno));
		keeper_relay_free(r);
		return NULL;
	}
	return r;
}

void keeper_relay_free(struct relay *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_fds; i++)
		close(r->fds[i]);
	free(r->endpoints);
	free(r);
}

void keeper_relay_use_endpoints(struct relay *r, const struct config_ip *ips, size_t n,
				uint16_t port)
{
	struct sockaddr_storage *copy = n ? calloc(n, sizeof *copy) : NULL;

	if (n && !copy)
		return; /* keeps the ones it had */
	for (size_t i = 0; i < n; i++)
		config_ip_sockaddr(&ips[i], port, &copy[i]);
	free(r->endpoints);
	r->endpoints = copy;
	r->n_endpoints = n;
}

size_t keeper_relay_endpoints(const struct relay *r)
{
	return r->n_endpoints;
}

static socklen_t sockaddr_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static bool same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
	return x->sin6_port == y->sin6_port &&
	       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
}

/* A relay socket of the endpoint's family, picked at random; -1: none. */
static int pick_socket(const struct relay *r, int family, uint32_t random)
{
	int found[2 * RELAY_PORTS];
	size_t n = 0;

	for (size_t i = 0; i < r->n_fds; i++)
		if (r->families[i] == family)
			found[n++] = r->fds[i];
	return n ? found[random % n] : -1;
}

static struct slot *free_slot(struct relay *r)
{
	for (size_t i = 0; i < RELAY_SLOTS; i++) {
		struct slot *s = &r->slots[(r->next_slot + i) % RELAY_SLOTS];
		if (!s->used) {
			r->next_slot = (size_t)(s - r->slots) + 1;
			return s;
		}
	}
	return NULL;
}

static void release(struct relay *r, struct slot *s)
{
	r->by_id[s->wire_id] = 0;
	s->used = false;
	r->n_used--;
}

const struct sockaddr_storage *keeper_relay_next_endpoint(struct relay *r)
{
	return r->n_endpoints ? &r->endpoints[r->next_endpoint++ % r->n_endpoints] : NULL;
}

bool keeper_relay_ask(struct relay *r, int reply_fd, const struct sockaddr_storage *client,
		      const uint8_t *q, size_t len, uint64_t now_ms)
{
	uint8_t out[RELAY_MAX];
	uint32_t random[2];
	struct slot *s;

	/* A query (QR clear) with a header: anything else is no business of ours. */
	if (len < 12 || len > sizeof out || (q[2] & 0x80) || r->n_endpoints == 0 ||
	    !(s = free_slot(r)) || getrandom(random, sizeof random, 0) != sizeof random) {
		r->stats.dropped++;
		return false;
	}
	const struct sockaddr_storage *ep = keeper_relay_next_endpoint(r);
	int out_fd = pick_socket(r, ep->ss_family, random[0]);
	uint16_t id = (uint16_t)random[1];
	for (int tries = 0; r->by_id[id] && tries < 16; tries++)
		id = (uint16_t)(id * 40503u + 1);
	if (out_fd < 0 || r->by_id[id]) {
		r->stats.dropped++;
		return false;
	}
	memcpy(out, q, len);
	dns_put16(out, id);
	if (sendto(out_fd, out, len, MSG_DONTWAIT, (const struct sockaddr *)ep, sockaddr_len(ep)) !=
	    (ssize_t)len) {
		r->stats.dropped++;
		return false;
	}
	*s = (struct slot){.used = true, .reply_fd = reply_fd, .out_fd = out_fd,
			   .client_id = dns_get16(q), .wire_id = id,
			   .client = *client, .endpoint = *ep,
			   .deadline_ms = now_ms + RELAY_TIMEOUT_MS};
	r->by_id[id] = (uint16_t)(s - r->slots + 1);
	r->n_used++;
	r->stats.asked++;
	return true;
}

unsigned keeper_relay_pending(const struct relay *r, int reply_fd)
{
	unsigned n = 0;

	for (size_t i = 0; r->n_used && i < RELAY_SLOTS; i++)
		n += r->slots[i].used && r->slots[i].reply_fd == reply_fd;
	return n;
}

void keeper_relay_forget(struct relay *r, int reply_fd)
{
	for (size_t i = 0; r->n_used && i < RELAY_SLOTS; i++)
		if (r->slots[i].used && r->slots[i].reply_fd == reply_fd) {
			release(r, &r->slots[i]);
			r->stats.forgotten++;
		}
}

size_t keeper_relay_fds(const struct relay *r, int *fds, size_t max)
{
	size_t n = r->n_fds < max ? r->n_fds : max;

	memcpy(fds, r->fds, n * sizeof *fds);
	return n;
}

/* The answer, under the client's ID, from the socket the query came in on. */
static void answer(struct slot *s, uint8_t *m, size_t len)
{
	dns_put16(m, s->client_id);
	sendto(s->reply_fd, m, len, MSG_DONTWAIT, (const struct sockaddr *)&s->client,
	       sockaddr_len(&s->client));
}

void keeper_relay_read(struct relay *r, int fd)
{
	uint8_t m[RELAY_MAX];

	for (int i = 0; i < RELAY_READS; i++) {
		struct sockaddr_storage from;
		socklen_t flen = sizeof from;
		ssize_t n = recvfrom(fd, m, sizeof m, MSG_DONTWAIT, (struct sockaddr *)&from, &flen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return;
		if (n < 12 || !(m[2] & 0x80))
			continue;
		uint16_t slot = r->by_id[dns_get16(m)];
		struct slot *s = slot ? &r->slots[slot - 1] : NULL;
		if (!s || s->out_fd != fd || !same_address(&from, &s->endpoint))
			continue; /* not an answer we wait for */
		answer(s, m, (size_t)n);
		r->stats.answered++;
		release(r, s);
	}
}

void keeper_relay_expire(struct relay *r, uint64_t now_ms)
{
	for (size_t i = 0; r->n_used && i < RELAY_SLOTS; i++) {
		struct slot *s = &r->slots[i];
		if (s->used && now_ms >= s->deadline_ms) {
			release(r, s);
			r->stats.expired++;
		}
	}
}

void keeper_relay_stats(const struct relay *r, struct keeper_relay_stats *out)
{
	*out = r->stats;
}
