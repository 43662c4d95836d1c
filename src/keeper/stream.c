/*
 * keeper/stream.c — a TCP connection the keeper took from a rescued
 * listener, carried to a cluster DNS endpoint over TCP. See internal.h.
 *
 * What the node's fallback DNAT does for a new TCP flow, done by hand for
 * the connections a dead or stuck localdns left queued on its listeners:
 * the keeper connects to an endpoint of the table's fallback maps and
 * copies the bytes both ways. Over TCP the answer comes back whole, where
 * a query relayed over UDP would bring a TCP client the truncated answer
 * of a UDP reply (TC=1), which it has no way to ask again.
 *
 * The bytes are not rewritten: no ID of ours is needed, since nobody can
 * answer into a TCP connection without its sequence numbers, and the
 * endpoint answers in the client's own framing (RFC 1035 4.2.2, RFC 7766,
 * pipelining included). The messages are counted as they pass, by their
 * two-byte length prefixes: queries taken from the client, queries written
 * to the endpoint (relayed), answers written to the client; when the
 * connection ends, the queries taken and not relayed were not sent, and
 * those relayed and not answered got no answer.
 *
 * Bounds: STREAMS_MAX connections (each with its one connection to an
 * endpoint), a buffer each way (TO_ENDPOINT, TO_CLIENT bytes: a side that
 * does not read stops the reading of the other), STREAM_LIFE_MS from
 * accept to close whatever happens. No descriptor is closed while the
 * keeper walks its poll set (keeper_streams_ready only marks a stream done):
 * keeper_streams_sweep closes them.
 */
#include "keeper/internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TO_ENDPOINT 4096       /* queries on their way (a query is at most 2 + 512ish bytes) */
#define TO_CLIENT 8192         /* answers on their way (a 64 KiB one streams through) */
#define STREAM_LIFE_MS 2000    /* from accept to close */

/* Counts the messages that end in the bytes given (2-byte length framing). */
struct framer {
	uint8_t have;              /* bytes of the length prefix seen (0..2) */
	uint8_t high;              /* its first byte */
	size_t left;               /* bytes of the current message still to come */
};

static uint64_t frames_in(struct framer *f, const uint8_t *p, size_t n)
{
	uint64_t done = 0;

	while (n > 0) {
		if (f->have < 2) {
			if (f->have++ == 0) {
				f->high = *p;
			} else {
				f->left = (size_t)f->high << 8 | *p;
				done += f->left == 0;       /* an empty message ends here */
				f->have = f->left ? 2 : 0;
			}
			p++, n--;
			continue;
		}
		size_t take = n < f->left ? n : f->left;
		p += take, n -= take, f->left -= take;
		if (f->left == 0) {
			f->have = 0;
			done++;
		}
	}
	return done;
}

struct buffer {
	size_t start, end;         /* bytes [start, end) wait to be written */
	bool eof;                  /* the side that fills it will send no more */
};

struct stream {
	int client;                /* the connection taken from a rescued listener */
	int endpoint;              /* ours to the cluster DNS; -1: none (not sent) */
	bool connected;            /* the endpoint connection is up */
	bool shut;                 /* we told the endpoint we send no more */
	bool done;                 /* to be closed by the next sweep */
	enum keeper_reason why;
	uint64_t deadline_ms;
	struct buffer up, down;    /* client -> endpoint, endpoint -> client */
	struct framer taken_f, relayed_f, answered_f;
	uint64_t taken, relayed, answered;
	uint8_t up_bytes[TO_ENDPOINT];
	uint8_t down_bytes[TO_CLIENT];
};

struct streams {
	struct stream *s[STREAMS_MAX];
	size_t n;
	struct stream_stats stats;
};

struct streams *keeper_streams_new(void)
{
	return calloc(1, sizeof(struct streams));
}

static void close_stream(struct streams *st, size_t i)
{
	struct stream *s = st->s[i];

	st->stats.relayed[s->why] += s->relayed;
	if (s->taken > s->relayed)
		st->stats.not_sent += s->taken - s->relayed;
	if (s->relayed > s->answered)
		st->stats.no_answer += s->relayed - s->answered;
	close(s->client);
	if (s->endpoint >= 0)
		close(s->endpoint);
	free(s);
	st->s[i] = st->s[--st->n];
}

void keeper_streams_free(struct streams *st)
{
	if (!st)
		return;
	while (st->n)
		close_stream(st, 0);
	free(st);
}

size_t keeper_streams_count(const struct streams *st)
{
	return st->n;
}

/* A non-blocking connection to ep under way; -1 when it cannot be. */
static int connect_to(const struct sockaddr_storage *ep)
{
	int fd = socket(ep->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	socklen_t len = ep->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in);

	if (fd >= 0 && connect(fd, (const struct sockaddr *)ep, len) < 0 && errno != EINPROGRESS) {
		close(fd);
		fd = -1;
	}
	return fd;
}

bool keeper_streams_add(struct streams *st, struct relay *r, int fd, enum keeper_reason why,
			uint64_t now_ms)
{
	struct stream *s = st->n < STREAMS_MAX ? calloc(1, sizeof *s) : NULL;
	const struct sockaddr_storage *ep = keeper_relay_next_endpoint(r);

	if (!s) {
		close(fd); /* the client sees a reset: better than a wait for nothing */
		st->stats.not_sent++; /* a connection carries a query at least */
		return false;
	}
	*s = (struct stream){.client = fd, .endpoint = ep ? connect_to(ep) : -1, .why = why,
			     .deadline_ms = now_ms + STREAM_LIFE_MS};
	st->s[st->n++] = s;
	return true;
}

/* ---- moving the bytes -------------------------------------------------------------- */

static size_t fill(struct buffer *b, uint8_t *bytes, size_t cap, int fd)
{
	if (b->start == b->end)
		b->start = b->end = 0;
	if (b->eof || b->end == cap)
		return 0;
	ssize_t r = recv(fd, bytes + b->end, cap - b->end, MSG_DONTWAIT);
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
		b->eof = true;
	if (r <= 0)
		return 0;
	b->end += (size_t)r;
	return (size_t)r;
}

/* Write what b holds to fd; the messages that ended in it. -1: fd is gone. */
static int64_t drain(struct buffer *b, const uint8_t *bytes, int fd, struct framer *f)
{
	if (b->start == b->end)
		return 0;
	ssize_t w = send(fd, bytes + b->start, b->end - b->start, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (w < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	uint64_t done = frames_in(f, bytes + b->start, (size_t)w);
	b->start += (size_t)w;
	return (int64_t)done;
}

static void finish_connect(struct stream *s)
{
	int err = 0;
	socklen_t len = sizeof err;

	if (getsockopt(s->endpoint, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
		close(s->endpoint); /* refused or unreachable: what it carries was not sent */
		s->endpoint = -1;
		return;
	}
	s->connected = true;
}

/* One step for s: read, write, and whether it is over. */
static void step(struct stream *s)
{
	size_t before = s->up.end;

	if (fill(&s->up, s->up_bytes, TO_ENDPOINT, s->client))
		s->taken += frames_in(&s->taken_f, s->up_bytes + before, s->up.end - before);
	if (s->endpoint < 0) {
		s->done = true; /* nowhere to send it: a reset now, not a wait */
		return;
	}
	if (!s->connected)
		return;
	int64_t n = drain(&s->up, s->up_bytes, s->endpoint, &s->relayed_f);
	if (n < 0) {
		s->done = true;
		return;
	}
	s->relayed += (uint64_t)n;
	if (s->up.eof && s->up.start == s->up.end && !s->shut) {
		shutdown(s->endpoint, SHUT_WR); /* the client has said all: so do we */
		s->shut = true;
	}
	fill(&s->down, s->down_bytes, TO_CLIENT, s->endpoint);
	n = drain(&s->down, s->down_bytes, s->client, &s->answered_f);
	if (n < 0) {
		s->done = true;
		return;
	}
	s->answered += (uint64_t)n;
	bool answered_all = s->up.eof && s->up.start == s->up.end && s->answered >= s->taken;
	bool endpoint_gone = s->down.eof && s->down.start == s->down.end;
	if (answered_all || endpoint_gone)
		s->done = true;
}

size_t keeper_streams_poll_set(const struct streams *st, struct pollfd *fds, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < st->n && n + 2 <= max; i++) {
		const struct stream *s = st->s[i];
		if (s->done)
			continue;
		short c = (short)((!s->up.eof && s->up.end < TO_ENDPOINT ? POLLIN : 0) |
				  (s->down.start < s->down.end ? POLLOUT : 0));
		fds[n++] = (struct pollfd){.fd = s->client, .events = c};
		if (s->endpoint < 0)
			continue;
		short e = (short)(!s->connected || s->up.start < s->up.end ? POLLOUT : 0);
		if (s->connected && !s->down.eof && s->down.end < TO_CLIENT)
			e |= POLLIN;
		fds[n++] = (struct pollfd){.fd = s->endpoint, .events = e};
	}
	return n;
}

void keeper_streams_ready(struct streams *st, int fd, short revents)
{
	if (!revents)
		return;
	for (size_t i = 0; i < st->n; i++) {
		struct stream *s = st->s[i];
		if (s->done || (s->client != fd && s->endpoint != fd))
			continue;
		if (fd == s->endpoint && !s->connected)
			finish_connect(s);
		step(s);
		return;
	}
}

void keeper_streams_sweep(struct streams *st, uint64_t now_ms)
{
	for (size_t i = 0; i < st->n;) {
		if (st->s[i]->done || now_ms >= st->s[i]->deadline_ms)
			close_stream(st, i);
		else
			i++;
	}
}

void keeper_streams_stats(const struct streams *st, struct stream_stats *out)
{
	*out = st->stats;
}
