/*
 * bare_responder — the benchmarks' "100%" line: the least a UDP DNS server
 * can do per query, so a real server's figure can be read as a share of
 * what this machine's kernel allows (the brief, section 7).
 *
 *   bare_responder -p 5353 [-s 127.0.0.1] [-r 4194304] [-a 0]
 *
 * One thread, one socket with a large SO_RCVBUF (so bursts are not
 * dropped), and two syscalls per batch: a blocking recvmmsg with
 * MSG_WAITFORONE (sleeps until one datagram is there, then takes whatever
 * else is queued, up to 64) and one sendmmsg for the replies. No epoll, no
 * lookup, no parsing beyond finding where the question ends.
 *
 * The reply is the query up to the end of its question (an OPT record or
 * anything after it is dropped), with QR and AA set and one answer: a
 * fixed AAAA record (2001:db8::1) for an AAAA question, else a fixed A
 * record (192.0.2.1), owner compressed to the question name, TTL 30. That
 * is byte for byte the size of localdns's answer to the same question
 * without EDNS, so both servers move the same bytes per query. A datagram
 * that is not a one-question query (too short, QR set, a name running past
 * its end or compressed) gets no reply.
 *
 * -a BYTES makes every reply BYTES longer, with one record of type NULL
 * (owner: the question name) in the additional section, for mixes whose
 * answers are larger than one address (SRV with its targets' addresses, a
 * negative answer's SOA): the benchmark sets it to the difference between
 * localdns's average reply and this one's, so both servers move the same
 * bytes on average. The rcode and answer stay the canned ones: a lookup
 * is exactly what this server does not do.
 *
 * SIGTERM or SIGINT: prints how many queries it answered and dropped on
 * stderr and exits 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 64
#define HEADER 12
#define QUERY_MAX 512                  /* larger datagrams are dropped (MSG_TRUNC) */
#define ANSWER_MAX (2 + 10 + 16)       /* pointer, type..rdlength, AAAA rdata */
#define PAD_MIN (2 + 10)               /* the NULL record with empty rdata */
#define PAD_MAX 1024
#define TYPE_A 1
#define TYPE_NULL 10
#define TYPE_AAAA 28

static volatile sig_atomic_t stopping;

struct responder {
	int fd;
	struct mmsghdr rx[BATCH], tx[BATCH];
	struct iovec rx_iov[BATCH], tx_iov[BATCH];
	struct sockaddr_storage peer[BATCH];
	uint8_t in[BATCH][QUERY_MAX];
	uint8_t out[BATCH][QUERY_MAX + ANSWER_MAX + PAD_MAX];
	size_t pad;                    /* -a: bytes added to each reply, 0 or PAD_MIN..PAD_MAX */
	uint64_t answered, dropped;
};

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

/* Where the (uncompressed) question ends, or 0 if q[0..len) does not hold one. */
static size_t question_end(const uint8_t *q, size_t len)
{
	size_t pos = HEADER;

	while (pos < len && q[pos] != 0) {
		if (q[pos] > 63)
			return 0;
		pos += 1u + q[pos];
	}
	pos += 1 + 4; /* the root label, type, class */
	return pos <= len ? pos : 0;
}

/* The -a padding at p: a NULL record owned by the question name, pad bytes in all. */
static uint8_t *put_padding(uint8_t *p, size_t pad)
{
	size_t rdlen = pad - PAD_MIN;

	*p++ = 0xc0, *p++ = HEADER;
	*p++ = 0, *p++ = TYPE_NULL;
	*p++ = 0, *p++ = 1;
	*p++ = 0, *p++ = 0, *p++ = 0, *p++ = 30;
	*p++ = (uint8_t)(rdlen >> 8), *p++ = (uint8_t)rdlen;
	memset(p, 0, rdlen);
	return p + rdlen;
}

/* The canned reply to query q into r; returns its length, 0 for no reply. */
static size_t build_reply(const uint8_t *q, size_t len, uint8_t *r, size_t pad)
{
	static const uint8_t a[4] = {192, 0, 2, 1};
	static const uint8_t aaaa[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1};
	size_t end;

	if (len < HEADER || (q[2] & 0x80) || q[4] != 0 || q[5] != 1 || !(end = question_end(q, len)))
		return 0;
	bool v6 = q[end - 4] == 0 && q[end - 3] == TYPE_AAAA;
	uint8_t *p = r + end;

	memcpy(r, q, end);
	r[2] = 0x80 | 0x04 | (q[2] & 0x79); /* QR, AA; opcode and RD copied; TC clear */
	r[3] = 0;                           /* RA clear, NOERROR */
	r[6] = 0, r[7] = 1;                 /* ANCOUNT */
	memset(r + 8, 0, 4);                /* NSCOUNT, ARCOUNT */
	r[11] = pad > 0;
	*p++ = 0xc0, *p++ = HEADER;         /* owner: the question name */
	*p++ = 0, *p++ = v6 ? TYPE_AAAA : TYPE_A;
	*p++ = 0, *p++ = 1;                 /* IN */
	*p++ = 0, *p++ = 0, *p++ = 0, *p++ = 30;
	*p++ = 0, *p++ = v6 ? 16 : 4;
	memcpy(p, v6 ? aaaa : a, v6 ? 16 : 4);
	p += v6 ? 16 : 4;
	if (pad)
		p = put_padding(p, pad);
	return (size_t)(p - r);
}

/* Replies to rx[0..n) into tx; returns how many to send. */
static int answer_batch(struct responder *s, int n)
{
	int out = 0;

	for (int i = 0; i < n; i++) {
		size_t len = (s->rx[i].msg_hdr.msg_flags & MSG_TRUNC) ? 0 :
			     build_reply(s->in[i], s->rx[i].msg_len, s->out[out], s->pad);

		if (len == 0) {
			s->dropped++;
		} else {
			s->tx_iov[out].iov_len = len;
			s->tx[out].msg_hdr.msg_name = &s->peer[i];
			s->tx[out].msg_hdr.msg_namelen = s->rx[i].msg_hdr.msg_namelen;
			out++;
		}
		s->rx[i].msg_hdr.msg_namelen = sizeof s->peer[i]; /* ready for the next recvmmsg */
	}
	return out;
}

/* Like a full network queue, a full socket buffer drops the rest. */
static void send_batch(struct responder *s, int n)
{
	for (int sent = 0; sent < n;) {
		int rc = sendmmsg(s->fd, s->tx + sent, (unsigned)(n - sent), MSG_DONTWAIT);

		if (rc > 0) {
			sent += rc;
			s->answered += (uint64_t)rc;
		} else if (rc < 0 && errno == EINTR) {
			continue;
		} else if (rc < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			sent++; /* this peer is unreachable: skip it */
			s->dropped++;
		} else {
			s->dropped += (uint64_t)(n - sent);
			return;
		}
	}
}

static void set_up(struct responder *s)
{
	for (int i = 0; i < BATCH; i++) {
		s->rx_iov[i] = (struct iovec){.iov_base = s->in[i], .iov_len = QUERY_MAX};
		s->rx[i].msg_hdr = (struct msghdr){.msg_name = &s->peer[i],
						   .msg_namelen = sizeof s->peer[i],
						   .msg_iov = &s->rx_iov[i], .msg_iovlen = 1};
		s->tx_iov[i] = (struct iovec){.iov_base = s->out[i]};
		s->tx[i].msg_hdr = (struct msghdr){.msg_iov = &s->tx_iov[i], .msg_iovlen = 1};
	}
}

static int open_socket(const char *addr, unsigned port, int rcvbuf)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
	socklen_t len;
	int fd;

	if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)port);
		len = sizeof *v4;
	} else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)port);
		len = sizeof *v6;
	} else {
		fprintf(stderr, "bare_responder: -s %s is not an IP address\n", addr);
		return -1;
	}
	fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0) {
		fprintf(stderr, "bare_responder: %s port %u: %s\n", addr, port, strerror(errno));
		return -1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	return fd;
}

static bool parse_number(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	return *s != '\0' && *s != '-' && *end == '\0' && !errno && *out >= min && *out <= max;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bare_responder -p PORT [-s ADDR] [-r RCVBUF_BYTES] [-a BYTES]\n"
		   "  -p PORT    UDP port to answer on\n"
		   "  -s ADDR    IPv4 or IPv6 address to bind (default 127.0.0.1)\n"
		   "  -r BYTES   SO_RCVBUF (default 4194304, as localdns's listen.udp_rcvbuf)\n"
		   "  -a BYTES   make each reply this much longer: 0 (default) or %d..%d,\n"
		   "             one NULL record in the additional section\n",
		PAD_MIN, PAD_MAX);
}

int main(int argc, char **argv)
{
	static struct responder s; /* batch buffers: not on the stack */
	const char *addr = "127.0.0.1";
	unsigned long port = 0, rcvbuf = 4u << 20, pad = 0;
	bool ok = true;
	int c;

	while ((c = getopt(argc, argv, "p:s:r:a:h")) != -1) {
		switch (c) {
		case 'p': ok = ok && parse_number(optarg, 1, 65535, &port); break;
		case 'a': ok = ok && parse_number(optarg, 0, PAD_MAX, &pad) && (pad == 0 || pad >= PAD_MIN);
			  break;
		case 's': addr = optarg; break;
		case 'r': ok = ok && parse_number(optarg, 4096, 1u << 30, &rcvbuf); break;
		case 'h': usage(stdout); return 0;
		default: ok = false;
		}
	}
	if (!ok || optind != argc || port == 0) {
		usage(stderr);
		return 2;
	}
	if ((s.fd = open_socket(addr, (unsigned)port, (int)rcvbuf)) < 0)
		return 1;
	s.pad = pad;
	set_up(&s);

	/* No SA_RESTART: a signal ends the blocking recvmmsg with EINTR. */
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	fprintf(stderr, "bare_responder: answering on %s port %lu\n", addr, port);

	while (!stopping) {
		int n = recvmmsg(s.fd, s.rx, BATCH, MSG_WAITFORONE, NULL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "bare_responder: recvmmsg: %s\n", strerror(errno));
			return 1;
		}
		send_batch(&s, answer_batch(&s, n));
	}
	fprintf(stderr, "bare_responder: answered %" PRIu64 ", dropped %" PRIu64 "\n", s.answered,
		s.dropped);
	return 0;
}
