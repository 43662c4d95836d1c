/*
 * dnsgen — a UDP DNS load generator for the benchmarks (tests/bench/).
 *
 *   dnsgen -s 127.0.0.1 -p 5353 -d queries.txt -l 10 -q 500          max rate
 *   dnsgen -s 127.0.0.1 -p 5353 -d queries.txt -l 10 -Q 20000        fixed rate
 *
 * Why not dnsperf: dnsperf sends and receives one datagram per syscall and
 * tops out near 180k QPS on one core here, below the servers we measure, so
 * its "max QPS" is its own ceiling. dnsgen does the same job with sendmmsg
 * and recvmmsg batches on one thread (pinned by the caller with taskset),
 * and does as little per query as it can: copy a prebuilt query, match the
 * reply, check it, file its latency.
 *
 * Input: a query file in dnsperf's format, "name TYPE" per line (blank
 * lines and lines starting with ';' or '#' skipped). Every line is turned
 * into wire format once at start (RD set, no EDNS, like dnsperf without
 * -e); the run cycles through them in file order. A line may name the
 * reply it expects in a third column: NOERROR (with an answer), NODATA
 * (NOERROR, empty answer) or NXDOMAIN; each reply to such a line is
 * counted as it expected or not (expect_ok, expect_failed), so a mix of
 * rcodes can be checked as closely as an all-NOERROR one. dnsperf does
 * not take the third column: the benchmarks give it the first two.
 *
 * Several sockets (-c, default 8), each connect()ed to the server from its
 * own ephemeral port: a server with several SO_REUSEPORT sockets (localdns
 * runs one per worker) and a NIC's RSS both pick a socket or queue by
 * hashing the 4-tuple, so a single client socket would land on one worker
 * only. Each socket also has its own 65,536 query IDs.
 *
 * Matching replies: per socket, a slot per ID holds the query sent with it
 * and when. IDs come from a FIFO of free IDs, so a freed ID is reused as
 * late as possible (after the 65,535 others), which keeps a reply that
 * comes after its query timed out from matching the ID's next query. The
 * slots in flight form a list in send order, so the oldest is at its head
 * and timeouts (-t) are found without a scan. A reply counts as received
 * only when its ID is in flight on the socket it came in on and it answers
 * that query: QR set, the same opcode, one question, the same name (case
 * folded), type and class. Otherwise it is "unexpected" (no such ID in
 * flight: late, duplicated) or "mismatched" (the ID's query is still
 * waiting). So received + lost == sent once the run has drained, and
 * every received reply is tallied by rcode (NOERROR, NXDOMAIN, SERVFAIL,
 * other), TC, empty answer section and size: a bench can prove every
 * answer was right.
 *
 * Sending cheaply: on loopback the sender's CPU also carries each
 * datagram through the receive path into the server's socket, so a
 * generator sending one datagram per message costs about as much per query
 * as the bare responder it measures, and the two would share the limit. So
 * a run of queries of one length in a batch goes as one message with
 * UDP_SEGMENT (GSO): the kernel takes it through the stack once and splits
 * it into ordinary datagrams just before the server's socket, which sees
 * exactly what a plain sendmmsg would have delivered. Queries of equal
 * length are the usual case in the benchmarks' files. -G turns this off;
 * a kernel that refuses it turns it off with a message.
 *
 * Time: CLOCK_MONOTONIC, read once per batch (vDSO, no syscall): just
 * before a sendmmsg for every query in it, just after a recvmmsg for every
 * reply in it. A query's latency is the difference. Batching blurs it by
 * the time one batch takes to build or check (well under a microsecond),
 * far below the server's share. Latencies go into a log-linear histogram
 * (64 steps per power of two: values within 1.6%), so memory does not grow
 * with the run.
 *
 * Modes:
 *   - max rate (default): each socket keeps its share of -q queries in
 *     flight and refills it as replies come; with nothing to read and no
 *     room to send, the thread sleeps in ppoll until a reply arrives.
 *   - fixed rate (-Q R): the schedule says R * elapsed queries should have
 *     been sent; each turn sends what is due (at most -b, normally one or
 *     two) on the next socket in turn, then sleeps in ppoll until the next
 *     query is due or a reply arrives (timer slack set to 1 ns, so the
 *     wake-up is on time). A generator that falls behind catches up in
 *     batches of -b, and the reported QPS shows it. -q still caps what is
 *     in flight.
 * Sending stops after -l seconds (or -n queries); then dnsgen waits for
 * the queries in flight (at most -t) and reports. QPS is received replies
 * over the time from the first send to the last reply.
 *
 * Output: one line of key=value pairs on stdout (for tests/bench/lib.sh and
 * the integration test; p50, p90, p95, p99 and p99.9 among them), a
 * readable summary on stderr, and with -H the histogram itself. Exit
 * status 0 when the run happened (whatever was lost), 1 on a set-up error,
 * 2 on usage.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SOCKETS 64 /* a bit each in a uint64_t */
#define MAX_BATCH 64
#define ID_SPACE 65536
#define NIL (-1)
#define HEADER 12
#define MAX_QUERY (HEADER + 255 + 4)
#define MAX_REPLY 65536
#define SOCKET_BUFFER (4 << 20)
#define MAX_WAIT_NS 1000000 /* wake at least every millisecond */
#define NS 1000000000ull

/* Log-linear histogram: values below 128 ns exact, then 64 steps per power of two. */
#define HIST_EXACT 128
#define HIST_STEPS 64
#define HIST_BUCKETS (HIST_EXACT + (64 - 7) * HIST_STEPS)

enum rcode_class { RC_NOERROR, RC_NXDOMAIN, RC_SERVFAIL, RC_OTHER, RC_CLASSES };

/* What a query file line says its reply must be (the optional third column). */
enum expectation { EXPECT_NONE, EXPECT_NOERROR, EXPECT_NODATA, EXPECT_NXDOMAIN };

struct options {
	struct sockaddr_storage server;
	socklen_t server_len;
	char server_text[INET6_ADDRSTRLEN + 8];
	struct sockaddr_storage source; /* AF_UNSPEC: the kernel picks */
	socklen_t source_len;
	const char *file;
	const char *hist_file;  /* -H: the latency histogram, for pooling runs */
	uint64_t duration_ns;
	uint64_t timeout_ns;
	uint64_t rate;          /* 0: max rate */
	uint64_t limit;         /* stop after this many queries; 0: no limit */
	unsigned outstanding;
	unsigned sockets;
	unsigned batch;
	bool gso;               /* send runs of equal-size queries as one UDP_SEGMENT message */
};

/* The prebuilt queries, packed one after another in wire. */
struct queries {
	uint8_t *wire;
	size_t used, cap;
	uint32_t *off;          /* where query i starts in wire */
	uint16_t *len;          /* its length (header + question) */
	uint8_t *expect;        /* its enum expectation */
	size_t n, n_cap;
};

struct slot {
	uint64_t sent_ns;
	uint32_t query;
	int32_t prev, next;     /* the in-flight list, oldest first */
	bool in_flight;
};

struct gen_socket {
	int fd;
	struct slot *slots;     /* by ID */
	uint16_t *free_ids;     /* FIFO ring of the IDs not in flight */
	uint32_t free_head, free_count;
	int32_t oldest, newest;
	unsigned in_flight;
	unsigned share;         /* max rate: this socket's part of -q */
};

/* Room for one UDP_SEGMENT control message. */
union gso_cmsg {
	char buf[CMSG_SPACE(sizeof(uint16_t))];
	struct cmsghdr align;
};

struct batch {
	struct mmsghdr msg[MAX_BATCH];
	struct iovec iov[MAX_BATCH];        /* one per datagram */
	union gso_cmsg cmsg[MAX_BATCH];     /* sending: message m's UDP_SEGMENT */
	unsigned first[MAX_BATCH + 1];      /* sending: message m carries datagrams first[m].. */
};

struct tally {
	uint64_t sent, received, lost, mismatched, unexpected, errors;
	uint64_t rcode[RC_CLASSES];
	uint64_t truncated, no_answer;
	uint64_t expect_ok, expect_failed;
	uint64_t bytes, size_min, size_max;
	uint64_t hist[HIST_BUCKETS];
	uint64_t first_send_ns, last_reply_ns;
};

struct gen {
	struct options opt;
	struct queries q;
	size_t cursor;          /* the next query to send */
	struct gen_socket sock[MAX_SOCKETS];
	unsigned next_sock;     /* fixed rate: whose turn it is */
	unsigned in_flight;
	struct batch tx, rx;
	uint8_t tx_buf[MAX_BATCH][MAX_QUERY];
	uint8_t (*rx_buf)[MAX_REPLY];
	struct tally t;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p) {
		fprintf(stderr, "dnsgen: out of memory\n");
		exit(1);
	}
	return p;
}

static void *xrealloc(void *p, size_t size)
{
	p = realloc(p, size);
	if (!p) {
		fprintf(stderr, "dnsgen: out of memory\n");
		exit(1);
	}
	return p;
}

/* ------------------------------------------------------------ latency histogram */

static unsigned hist_index(uint64_t ns)
{
	if (ns < HIST_EXACT)
		return (unsigned)ns;
	unsigned e = 63u - (unsigned)__builtin_clzll(ns); /* >= 7 */
	unsigned step = (unsigned)(ns >> (e - 6)) & (HIST_STEPS - 1);

	return HIST_EXACT + (e - 7) * HIST_STEPS + step;
}

/* The middle of bucket i, in ns. */
static double hist_value(unsigned i)
{
	if (i < HIST_EXACT)
		return i;
	unsigned e = (i - HIST_EXACT) / HIST_STEPS + 7;
	uint64_t low = (uint64_t)(HIST_STEPS + (i - HIST_EXACT) % HIST_STEPS) << (e - 6);

	return (double)low + (double)(1ull << (e - 6)) / 2;
}

/* The latency (us) below which a fraction p of the replies came; 0 without replies. */
static double percentile_us(const struct tally *t, double p)
{
	uint64_t want = (uint64_t)(p * (double)t->received);
	uint64_t seen = 0;

	if (t->received == 0)
		return 0;
	if (want >= t->received)
		want = t->received - 1;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += t->hist[i];
		if (seen > want)
			return hist_value(i) / 1000;
	}
	return 0;
}

/*
 * The latency histogram as "ns count" lines (the middle of each bucket
 * that holds a reply), so that a script can pool the runs of several
 * rounds: a percentile of the pooled replies, not a median of percentiles.
 */
static bool write_histogram(const struct tally *t, const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "dnsgen: %s: %s\n", path, strerror(errno));
		return false;
	}
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		if (t->hist[i])
			fprintf(f, "%.0f %" PRIu64 "\n", hist_value(i), t->hist[i]);
	if (fclose(f) != 0) {
		fprintf(stderr, "dnsgen: %s: %s\n", path, strerror(errno));
		return false;
	}
	return true;
}

/* ------------------------------------------------------------ the query file */

static int qtype_code(const char *s)
{
	static const struct { const char *name; int code; } types[] = {
		{"A", 1}, {"NS", 2}, {"CNAME", 5}, {"SOA", 6}, {"PTR", 12}, {"MX", 15},
		{"TXT", 16}, {"AAAA", 28}, {"SRV", 33}, {"NAPTR", 35}, {"DS", 43},
		{"DNSKEY", 48}, {"SVCB", 64}, {"HTTPS", 65}, {"ANY", 255}, {"CAA", 257},
	};

	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		if (strcasecmp(s, types[i].name) == 0)
			return types[i].code;
	if (strncasecmp(s, "TYPE", 4) == 0 && isdigit((unsigned char)s[4])) {
		char *end;
		long v = strtol(s + 4, &end, 10);

		if (*end == '\0' && v >= 0 && v <= 65535)
			return (int)v;
	}
	return -1;
}

/* name in presentation form (no escapes) into wire at out; returns its length, 0 if invalid. */
static size_t encode_name(const char *name, uint8_t *out)
{
	size_t n = 0;

	if (strcmp(name, ".") == 0) {
		out[0] = 0;
		return 1;
	}
	while (*name) {
		const char *dot = strchr(name, '.');
		size_t label = dot ? (size_t)(dot - name) : strlen(name);

		if (label == 0 || label > 63 || n + 1 + label + 1 > 255 ||
		    memchr(name, '\\', label))
			return 0;
		out[n++] = (uint8_t)label;
		memcpy(out + n, name, label);
		n += label;
		name += label + (dot ? 1 : 0);
	}
	out[n++] = 0;
	return n;
}

static int expectation_code(const char *s)
{
	static const char *const names[] = {
		[EXPECT_NOERROR] = "NOERROR", [EXPECT_NODATA] = "NODATA", [EXPECT_NXDOMAIN] = "NXDOMAIN"};

	for (int e = EXPECT_NOERROR; e <= EXPECT_NXDOMAIN; e++)
		if (strcasecmp(s, names[e]) == 0)
			return e;
	return -1;
}

static void add_query(struct queries *q, const uint8_t *wire, size_t len, enum expectation expect)
{
	if (q->n == q->n_cap) {
		q->n_cap = q->n_cap ? 2 * q->n_cap : 1024;
		q->off = xrealloc(q->off, q->n_cap * sizeof *q->off);
		q->len = xrealloc(q->len, q->n_cap * sizeof *q->len);
		q->expect = xrealloc(q->expect, q->n_cap * sizeof *q->expect);
	}
	if (q->used + len > q->cap) {
		q->cap = q->cap ? 2 * q->cap : 65536;
		q->wire = xrealloc(q->wire, q->cap);
	}
	memcpy(q->wire + q->used, wire, len);
	q->off[q->n] = (uint32_t)q->used;
	q->len[q->n] = (uint16_t)len;
	q->expect[q->n] = (uint8_t)expect;
	q->used += len;
	q->n++;
}

/* One line of the file; returns false (with a message) when it is malformed. */
static bool parse_line(struct queries *q, char *line, const char *file, unsigned lineno)
{
	char *save = NULL;
	char *name = strtok_r(line, " \t\r\n", &save);
	char *type = name ? strtok_r(NULL, " \t\r\n", &save) : NULL;
	char *expect = type ? strtok_r(NULL, " \t\r\n", &save) : NULL;
	uint8_t wire[MAX_QUERY] = {0};
	int code, expected = EXPECT_NONE;
	size_t nlen;

	if (!name || name[0] == ';' || name[0] == '#')
		return true;
	if (!type || strtok_r(NULL, " \t\r\n", &save)) {
		fprintf(stderr, "dnsgen: %s:%u: want \"name TYPE [NOERROR|NODATA|NXDOMAIN]\"\n", file,
			lineno);
		return false;
	}
	if ((code = qtype_code(type)) < 0) {
		fprintf(stderr, "dnsgen: %s:%u: unknown type %s\n", file, lineno, type);
		return false;
	}
	if (expect && (expected = expectation_code(expect)) < 0) {
		fprintf(stderr, "dnsgen: %s:%u: unknown expectation %s\n", file, lineno, expect);
		return false;
	}
	size_t last = strlen(name) - 1;
	if (last > 0 && name[last] == '.')
		name[last] = '\0';
	if ((nlen = encode_name(name, wire + HEADER)) == 0) {
		fprintf(stderr, "dnsgen: %s:%u: bad name %s\n", file, lineno, name);
		return false;
	}
	wire[2] = 0x01;         /* RD */
	wire[5] = 1;            /* QDCOUNT */
	wire[HEADER + nlen] = (uint8_t)(code >> 8);
	wire[HEADER + nlen + 1] = (uint8_t)code;
	wire[HEADER + nlen + 3] = 1; /* class IN */
	add_query(q, wire, HEADER + nlen + 4, (enum expectation)expected);
	return true;
}

static bool load_queries(struct queries *q, const char *file)
{
	FILE *f = fopen(file, "r");
	char *line = NULL;
	size_t cap = 0;
	unsigned lineno = 0;
	bool ok = true;

	if (!f) {
		fprintf(stderr, "dnsgen: %s: %s\n", file, strerror(errno));
		return false;
	}
	while (ok && getline(&line, &cap, f) >= 0)
		ok = parse_line(q, line, file, ++lineno);
	free(line);
	fclose(f);
	if (ok && q->n == 0) {
		fprintf(stderr, "dnsgen: %s: no queries\n", file);
		ok = false;
	}
	return ok;
}

/* ------------------------------------------------------------ sockets and IDs */

static bool open_socket(struct gen_socket *s, const struct options *opt)
{
	int size = SOCKET_BUFFER;

	s->fd = socket(opt->server.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->fd >= 0 && opt->source_len &&
	    bind(s->fd, (const struct sockaddr *)&opt->source, opt->source_len) < 0) {
		fprintf(stderr, "dnsgen: cannot send from the -S address: %s\n", strerror(errno));
		return false;
	}
	if (s->fd < 0 || connect(s->fd, (const struct sockaddr *)&opt->server, opt->server_len) < 0) {
		fprintf(stderr, "dnsgen: socket to %s: %s\n", opt->server_text, strerror(errno));
		return false;
	}
	/* Forced past rmem_max/wmem_max when allowed (root), else as big as allowed. */
	if (setsockopt(s->fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
		setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
	if (setsockopt(s->fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) < 0)
		setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
	s->slots = xcalloc(ID_SPACE, sizeof *s->slots);
	s->free_ids = xcalloc(ID_SPACE, sizeof *s->free_ids);
	for (uint32_t id = 0; id < ID_SPACE; id++)
		s->free_ids[id] = (uint16_t)id;
	s->free_count = ID_SPACE;
	s->oldest = s->newest = NIL;
	return true;
}

/* Take the least recently used free ID and put its slot at the end of the in-flight list. */
static uint16_t take_id(struct gen_socket *s, uint32_t query, uint64_t sent_ns)
{
	uint16_t id = s->free_ids[s->free_head];
	struct slot *sl = &s->slots[id];

	s->free_head = (s->free_head + 1) % ID_SPACE;
	s->free_count--;
	*sl = (struct slot){.sent_ns = sent_ns, .query = query, .prev = s->newest, .next = NIL,
			    .in_flight = true};
	if (s->newest != NIL)
		s->slots[s->newest].next = id;
	else
		s->oldest = id;
	s->newest = id;
	s->in_flight++;
	return id;
}

static void release_id(struct gen_socket *s, uint16_t id)
{
	struct slot *sl = &s->slots[id];

	if (sl->prev != NIL)
		s->slots[sl->prev].next = sl->next;
	else
		s->oldest = sl->next;
	if (sl->next != NIL)
		s->slots[sl->next].prev = sl->prev;
	else
		s->newest = sl->prev;
	sl->in_flight = false;
	s->free_ids[(s->free_head + s->free_count) % ID_SPACE] = id;
	s->free_count++;
	s->in_flight--;
}

/* ------------------------------------------------------------ sending */

/*
 * Put the n datagrams of tx.iov into messages; returns how many. With GSO,
 * a run of datagrams of one length is one message with UDP_SEGMENT: the
 * kernel takes it through the stack once and splits it into datagrams just
 * before the server's socket.
 */
static unsigned gather(struct gen *g, unsigned n)
{
	unsigned m = 0;

	for (unsigned i = 0; i < n; m++) {
		size_t len = g->tx.iov[i].iov_len;
		unsigned k = 1;
		struct msghdr *h = &g->tx.msg[m].msg_hdr;

		while (g->opt.gso && i + k < n && g->tx.iov[i + k].iov_len == len)
			k++;
		*h = (struct msghdr){.msg_iov = &g->tx.iov[i], .msg_iovlen = k};
		if (k > 1) {
			uint16_t segment = (uint16_t)len;

			h->msg_control = g->tx.cmsg[m].buf;
			h->msg_controllen = sizeof g->tx.cmsg[m].buf;
			struct cmsghdr *c = CMSG_FIRSTHDR(h);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof segment);
			memcpy(CMSG_DATA(c), &segment, sizeof segment);
		}
		g->tx.first[m] = i;
		i += k;
	}
	g->tx.first[m] = n;
	return m;
}

/* Send up to n queries on s; returns how many the socket took. */
static unsigned send_batch(struct gen *g, struct gen_socket *s, unsigned n)
{
	uint64_t now = now_ns();
	uint16_t ids[MAX_BATCH];

	for (unsigned i = 0; i < n; i++) {
		uint32_t qi = (uint32_t)g->cursor;
		uint16_t len = g->q.len[qi];
		uint16_t id = take_id(s, qi, now);

		memcpy(g->tx_buf[i], g->q.wire + g->q.off[qi], len);
		g->tx_buf[i][0] = (uint8_t)(id >> 8);
		g->tx_buf[i][1] = (uint8_t)id;
		g->tx.iov[i].iov_len = len;
		ids[i] = id;
		g->cursor = (g->cursor + 1) % g->q.n;
	}
	unsigned messages = gather(g, n);
	int rc = sendmmsg(s->fd, g->tx.msg, messages, 0);
	unsigned sent = rc > 0 ? g->tx.first[rc] : 0;

	if (rc < 0 && g->opt.gso && messages < n && (errno == EINVAL || errno == EIO)) {
		fprintf(stderr, "dnsgen: UDP GSO refused (%s): one datagram per message\n",
			strerror(errno));
		g->opt.gso = false;
	} else if (rc < 0 && errno != EAGAIN && errno != ENOBUFS && errno != EINTR) {
		g->t.errors++; /* e.g. a port unreachable reported for an earlier datagram */
	}
	/* What the socket did not take was not sent: give the IDs back, ask those queries next. */
	for (unsigned i = n; i-- > sent;) {
		release_id(s, ids[i]);
		g->cursor = (g->cursor + g->q.n - 1) % g->q.n;
	}
	if (sent && g->t.sent == 0)
		g->t.first_send_ns = now;
	g->t.sent += sent;
	g->in_flight += sent;
	return sent;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Queries the -n limit still allows. */
static uint64_t below_limit(const struct gen *g)
{
	return g->opt.limit ? g->opt.limit - g->t.sent : UINT64_MAX;
}

/* Max rate: every socket tops up its share of the queries in flight. */
static unsigned send_max_rate(struct gen *g)
{
	unsigned total = 0;

	for (unsigned i = 0; i < g->opt.sockets; i++) {
		struct gen_socket *s = &g->sock[i];
		uint64_t room = s->share > s->in_flight ? s->share - s->in_flight : 0;
		unsigned n = (unsigned)min_u64(min_u64(room, g->opt.batch), below_limit(g));

		if (n)
			total += send_batch(g, s, n);
	}
	return total;
}

/* Queries the fixed-rate schedule wants sent by now. */
static uint64_t due(const struct gen *g, uint64_t start, uint64_t now)
{
	uint64_t want = (uint64_t)((unsigned __int128)(now - start) * g->opt.rate / NS) + 1;

	return want > g->t.sent ? want - g->t.sent : 0;
}

/* When the fixed-rate schedule wants the next query sent. */
static uint64_t next_due(const struct gen *g, uint64_t start)
{
	return start + (uint64_t)((unsigned __int128)g->t.sent * NS / g->opt.rate);
}

/* Fixed rate: what is due, on the next socket in turn. */
static unsigned send_fixed_rate(struct gen *g, uint64_t start, uint64_t now)
{
	uint64_t room = g->opt.outstanding > g->in_flight ? g->opt.outstanding - g->in_flight : 0;
	unsigned n = (unsigned)min_u64(min_u64(due(g, start, now), room),
				       min_u64(g->opt.batch, below_limit(g)));

	if (n == 0)
		return 0;
	struct gen_socket *s = &g->sock[g->next_sock];
	g->next_sock = (g->next_sock + 1) % g->opt.sockets;
	return send_batch(g, s, n);
}

/* ------------------------------------------------------------ receiving */

static bool same_question(const uint8_t *reply, size_t reply_len, const uint8_t *query,
			  size_t query_len)
{
	size_t name_end = query_len - 4;

	if (reply_len < query_len)
		return false;
	for (size_t i = HEADER; i < name_end; i++)
		if (tolower(reply[i]) != tolower(query[i]))
			return false;
	return memcmp(reply + name_end, query + name_end, 4) == 0;
}

static enum rcode_class rcode_class(uint8_t rcode)
{
	switch (rcode) {
	case 0: return RC_NOERROR;
	case 3: return RC_NXDOMAIN;
	case 2: return RC_SERVFAIL;
	default: return RC_OTHER;
	}
}

/* Does a reply with this header match what its query file line expects? */
static bool as_expected(enum expectation e, const uint8_t *p)
{
	unsigned rcode = p[3] & 0x0f;
	bool answered = p[6] != 0 || p[7] != 0;

	switch (e) {
	case EXPECT_NOERROR: return rcode == 0 && answered;
	case EXPECT_NODATA: return rcode == 0 && !answered;
	case EXPECT_NXDOMAIN: return rcode == 3;
	case EXPECT_NONE: break;
	}
	return true;
}

static void check_reply(struct gen *g, struct gen_socket *s, const uint8_t *p, size_t len,
			uint64_t now)
{
	struct tally *t = &g->t;

	if (len < 2 || !s->slots[(p[0] << 8) | p[1]].in_flight) {
		t->unexpected++;
		return;
	}
	uint16_t id = (uint16_t)((p[0] << 8) | p[1]);
	struct slot *sl = &s->slots[id];
	const uint8_t *q = g->q.wire + g->q.off[sl->query];
	size_t qlen = g->q.len[sl->query];

	if (len < HEADER || !(p[2] & 0x80) || (p[2] & 0x78) != (q[2] & 0x78) ||
	    p[4] != 0 || p[5] != 1 || !same_question(p, len, q, qlen)) {
		t->mismatched++; /* not the answer to this ID's query, which still waits */
		return;
	}
	uint64_t latency = now - sl->sent_ns;
	t->hist[hist_index(latency)]++;
	t->received++;
	t->rcode[rcode_class(p[3] & 0x0f)]++;
	t->truncated += (p[2] & 0x02) != 0;
	t->no_answer += p[6] == 0 && p[7] == 0;
	if (g->q.expect[sl->query] != EXPECT_NONE) {
		bool ok = as_expected((enum expectation)g->q.expect[sl->query], p);
		t->expect_ok += ok;
		t->expect_failed += !ok;
	}
	t->bytes += len;
	if (t->size_min == 0 || len < t->size_min)
		t->size_min = len;
	if (len > t->size_max)
		t->size_max = len;
	t->last_reply_ns = now;
	release_id(s, id);
	g->in_flight--;
}

/* Read everything queued on s; returns how many datagrams came. */
static unsigned receive(struct gen *g, struct gen_socket *s)
{
	unsigned total = 0;

	for (;;) {
		int n = recvmmsg(s->fd, g->rx.msg, g->opt.batch, MSG_DONTWAIT, NULL);
		if (n <= 0) {
			if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				g->t.errors++;
			return total;
		}
		uint64_t now = now_ns();
		for (int i = 0; i < n; i++)
			check_reply(g, s, g->rx_buf[i], g->rx.msg[i].msg_len, now);
		total += (unsigned)n;
		if ((unsigned)n < g->opt.batch)
			return total;
	}
}

/* Queries older than the timeout are lost; returns the earliest deadline left (or UINT64_MAX). */
static uint64_t expire(struct gen *g, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (unsigned i = 0; i < g->opt.sockets; i++) {
		struct gen_socket *s = &g->sock[i];

		while (s->oldest != NIL && s->slots[s->oldest].sent_ns + g->opt.timeout_ns <= now) {
			release_id(s, (uint16_t)s->oldest);
			g->in_flight--;
			g->t.lost++;
		}
		if (s->oldest != NIL)
			next = min_u64(next, s->slots[s->oldest].sent_ns + g->opt.timeout_ns);
	}
	return next;
}

/*
 * Sleep until a reply comes or until `until` (at most MAX_WAIT_NS from now);
 * returns the sockets with something to read (a bit each), so the next turn
 * reads only those.
 */
static uint64_t wait_for_work(struct gen *g, uint64_t now, uint64_t until)
{
	struct pollfd pfd[MAX_SOCKETS];
	uint64_t wait = until > now ? min_u64(until - now, MAX_WAIT_NS) : 0;
	struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)wait};
	uint64_t ready = 0;

	for (unsigned i = 0; i < g->opt.sockets; i++)
		pfd[i] = (struct pollfd){.fd = g->sock[i].fd, .events = POLLIN};
	if (ppoll(pfd, g->opt.sockets, &ts, NULL) <= 0)
		return 0;
	for (unsigned i = 0; i < g->opt.sockets; i++)
		if (pfd[i].revents) /* a reply, or an error for recvmmsg to collect */
			ready |= 1ull << i;
	return ready;
}

/* ------------------------------------------------------------ the run */

static void set_up_batches(struct gen *g)
{
	g->rx_buf = xcalloc(MAX_BATCH, sizeof *g->rx_buf);
	for (unsigned i = 0; i < MAX_BATCH; i++) {
		g->tx.iov[i] = (struct iovec){.iov_base = g->tx_buf[i]};
		g->rx.iov[i] = (struct iovec){.iov_base = g->rx_buf[i], .iov_len = MAX_REPLY};
		g->rx.msg[i].msg_hdr = (struct msghdr){.msg_iov = &g->rx.iov[i], .msg_iovlen = 1};
	}
}

static void run(struct gen *g)
{
	uint64_t start = now_ns();
	uint64_t stop_sending = start + g->opt.duration_ns;
	uint64_t every_socket = g->opt.sockets == 64 ? UINT64_MAX : (1ull << g->opt.sockets) - 1;
	uint64_t ready = every_socket;

	for (;;) {
		uint64_t now = now_ns();
		bool sending = now < stop_sending && below_limit(g) > 0;
		unsigned work = 0;

		if (!sending && g->in_flight == 0)
			return;
		for (unsigned i = 0; i < g->opt.sockets; i++)
			if (ready & (1ull << i))
				work += receive(g, &g->sock[i]);
		now = now_ns();
		uint64_t until = expire(g, now);
		if (sending) {
			work += g->opt.rate ? send_fixed_rate(g, start, now) : send_max_rate(g);
			until = min_u64(until, stop_sending);
			if (g->opt.rate && g->in_flight < g->opt.outstanding)
				until = min_u64(until, next_due(g, start));
		}
		ready = work ? every_socket : wait_for_work(g, now_ns(), until);
	}
}

/* ------------------------------------------------------------ report */

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void report(const struct gen *g, double wall_s, double cpu_s)
{
	const struct tally *t = &g->t;
	const struct options *o = &g->opt;
	double elapsed = t->received ? (double)(t->last_reply_ns - t->first_send_ns) / NS : 0;
	double qps = elapsed > 0 ? (double)t->received / elapsed : 0;
	double avg_size = t->received ? (double)t->bytes / (double)t->received : 0;
	double lost_pct = t->sent ? 100.0 * (double)t->lost / (double)t->sent : 0;
	double cpu_pct = wall_s > 0 ? 100 * cpu_s / wall_s : 0;
	double p50 = percentile_us(t, 0.50), p90 = percentile_us(t, 0.90);
	double p95 = percentile_us(t, 0.95), p99 = percentile_us(t, 0.99);
	double p999 = percentile_us(t, 0.999), pmax = percentile_us(t, 1.0);

	printf("mode=%s rate=%" PRIu64 " server=%s sockets=%u outstanding=%u queries=%zu "
	       "elapsed_s=%.3f sent=%" PRIu64 " received=%" PRIu64 " lost=%" PRIu64 " qps=%.0f "
	       "noerror=%" PRIu64 " nxdomain=%" PRIu64 " servfail=%" PRIu64 " rcode_other=%" PRIu64
	       " truncated=%" PRIu64 " no_answer=%" PRIu64 " expect_ok=%" PRIu64
	       " expect_failed=%" PRIu64 " mismatched=%" PRIu64
	       " unexpected=%" PRIu64 " errors=%" PRIu64 " size_min=%" PRIu64 " size_avg=%.1f"
	       " size_max=%" PRIu64 " p50_us=%.1f p90_us=%.1f p95_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f"
	       " gen_cpu_pct=%.0f gso=%d\n",
	       o->rate ? "fixed" : "max", o->rate, o->server_text, o->sockets, o->outstanding,
	       g->q.n, elapsed, t->sent, t->received, t->lost, qps, t->rcode[RC_NOERROR],
	       t->rcode[RC_NXDOMAIN], t->rcode[RC_SERVFAIL], t->rcode[RC_OTHER], t->truncated,
	       t->no_answer, t->expect_ok, t->expect_failed, t->mismatched, t->unexpected, t->errors,
	       t->size_min, avg_size, t->size_max, p50, p90, p95, p99, p999, pmax, cpu_pct, o->gso);
	fflush(stdout);

	if (o->rate)
		fprintf(stderr, "dnsgen: fixed rate %" PRIu64 " QPS", o->rate);
	else
		fprintf(stderr, "dnsgen: max rate, %u in flight", o->outstanding);
	fprintf(stderr, ", %u sockets%s, to %s, %zu distinct queries\n", o->sockets,
		o->gso ? " (GSO)" : "", o->server_text, g->q.n);
	fprintf(stderr, "  sent %" PRIu64 ", received %" PRIu64 ", lost %" PRIu64
		" (%.2f%%) in %.2f s: %.0f QPS\n", t->sent, t->received, t->lost, lost_pct, elapsed, qps);
	fprintf(stderr, "  rcodes: NOERROR %" PRIu64 ", NXDOMAIN %" PRIu64 ", SERVFAIL %" PRIu64
		", other %" PRIu64 "; TC %" PRIu64 ", empty answer %" PRIu64 "\n",
		t->rcode[RC_NOERROR], t->rcode[RC_NXDOMAIN], t->rcode[RC_SERVFAIL], t->rcode[RC_OTHER],
		t->truncated, t->no_answer);
	if (t->expect_ok + t->expect_failed)
		fprintf(stderr, "  as the query file expects: %" PRIu64 ", not: %" PRIu64 "\n",
			t->expect_ok, t->expect_failed);
	fprintf(stderr, "  not counted: mismatched %" PRIu64 ", unexpected %" PRIu64
		", socket errors %" PRIu64 "\n", t->mismatched, t->unexpected, t->errors);
	fprintf(stderr, "  reply size min/avg/max %" PRIu64 "/%.1f/%" PRIu64 " bytes\n",
		t->size_min, avg_size, t->size_max);
	fprintf(stderr, "  latency p50 %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us\n",
		p50, p99, p999, pmax);
	fprintf(stderr, "  generator CPU %.0f%% of one core\n", cpu_pct);
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dnsgen -d FILE [-s ADDR] [-p PORT] [-l SECONDS] [-Q QPS] [-q N] [-c N]\n"
		"              [-t SECONDS] [-b N] [-n N] [-G] [-S ADDR] [-H FILE]\n"
		"  -d FILE     queries, \"name TYPE\" per line (dnsperf's format), optionally\n"
		"              followed by the reply expected: NOERROR, NODATA or NXDOMAIN\n"
		"  -s ADDR     server IPv4 or IPv6 address (default 127.0.0.1)\n"
		"  -p PORT     server port (default 53)\n"
		"  -l SECONDS  how long to send (default 10; fractions allowed)\n"
		"  -Q QPS      fixed rate; without it, as fast as the server answers\n"
		"  -q N        queries in flight at most (default 500)\n"
		"  -c N        sockets (default 8, at most %d)\n"
		"  -t SECONDS  a query unanswered this long is lost (default 2)\n"
		"  -b N        datagrams per sendmmsg/recvmmsg at most (default %d)\n"
		"  -n N        stop after N queries (e.g. one pass over the file)\n"
		"  -G          no UDP GSO: one datagram per message\n"
		"  -S ADDR     send from this address (a client of its own to the server)\n"
		"  -H FILE     write the latency histogram there, \"ns count\" per line\n",
		MAX_SOCKETS, MAX_BATCH);
}

static bool parse_seconds(const char *s, uint64_t *ns)
{
	char *end;
	double v = strtod(s, &end);

	if (*s == '\0' || *end != '\0' || !(v > 0) || v > 86400)
		return false;
	*ns = (uint64_t)(v * NS);
	return true;
}

static bool parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (*s == '\0' || *s == '-' || *end != '\0' || errno || v < min || v > max)
		return false;
	*out = v;
	return true;
}

/* addr:port into ss; its length, or 0 when addr is no IP address. */
static socklen_t parse_address(const char *addr, uint64_t port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof *ss);
	if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)port);
		return sizeof *v4;
	}
	if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)port);
		return sizeof *v6;
	}
	return 0;
}

static bool parse_server(struct options *o, const char *addr, uint64_t port)
{
	o->server_len = parse_address(addr, port, &o->server);
	snprintf(o->server_text, sizeof o->server_text,
		 o->server.ss_family == AF_INET6 ? "[%s]:%" PRIu64 : "%s:%" PRIu64, addr, port);
	return o->server_len > 0;
}

static bool parse_options(struct options *o, int argc, char **argv)
{
	const char *addr = "127.0.0.1", *source = NULL;
	uint64_t port = 53, outstanding = 500, sockets = 8, batch = MAX_BATCH;
	int c;

	*o = (struct options){.duration_ns = 10 * NS, .timeout_ns = 2 * NS, .gso = true};
	while ((c = getopt(argc, argv, "d:s:p:l:Q:q:c:t:b:n:GS:H:h")) != -1) {
		bool ok = true;

		switch (c) {
		case 'd': o->file = optarg; break;
		case 's': addr = optarg; break;
		case 'p': ok = parse_count(optarg, 1, 65535, &port); break;
		case 'l': ok = parse_seconds(optarg, &o->duration_ns); break;
		case 'Q': ok = parse_count(optarg, 1, 100000000, &o->rate); break;
		case 'q': ok = parse_count(optarg, 1, ID_SPACE, &outstanding); break;
		case 'c': ok = parse_count(optarg, 1, MAX_SOCKETS, &sockets); break;
		case 't': ok = parse_seconds(optarg, &o->timeout_ns); break;
		case 'b': ok = parse_count(optarg, 1, MAX_BATCH, &batch); break;
		case 'n': ok = parse_count(optarg, 1, UINT64_MAX, &o->limit); break;
		case 'G': o->gso = false; break;
		case 'S': source = optarg; break;
		case 'H': o->hist_file = optarg; break;
		case 'h': usage(stdout); exit(0);
		default: ok = false;
		}
		if (!ok) {
			if (c != '?')
				fprintf(stderr, "dnsgen: bad value for -%c: %s\n", c, optarg);
			return false;
		}
	}
	if (optind != argc || !o->file) {
		fprintf(stderr, "dnsgen: %s\n", o->file ? "unexpected argument" : "-d FILE is required");
		return false;
	}
	if (!parse_server(o, addr, port)) {
		fprintf(stderr, "dnsgen: -s %s is not an IP address\n", addr);
		return false;
	}
	if (source && (!(o->source_len = parse_address(source, 0, &o->source)) ||
		       o->source.ss_family != o->server.ss_family)) {
		fprintf(stderr, "dnsgen: -S %s is not an IP address of the server's family\n", source);
		return false;
	}
	o->outstanding = (unsigned)outstanding;
	o->sockets = (unsigned)sockets;
	o->batch = (unsigned)batch;
	return true;
}

int main(int argc, char **argv)
{
	static struct gen g; /* large (batch buffers, histogram): not on the stack */

	if (!parse_options(&g.opt, argc, argv)) {
		usage(stderr);
		return 2;
	}
	if (!load_queries(&g.q, g.opt.file))
		return 1;
	for (unsigned i = 0; i < g.opt.sockets; i++) {
		if (!open_socket(&g.sock[i], &g.opt))
			return 1;
		g.sock[i].share = g.opt.outstanding / g.opt.sockets +
				  (i < g.opt.outstanding % g.opt.sockets);
	}
	set_up_batches(&g);
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* fixed rate wakes on time */

	uint64_t wall0 = now_ns();
	double cpu0 = cpu_seconds();
	run(&g);
	report(&g, (double)(now_ns() - wall0) / NS, cpu_seconds() - cpu0);
	if (g.opt.hist_file && !write_histogram(&g.t, g.opt.hist_file))
		return 1;
	return 0;
}
