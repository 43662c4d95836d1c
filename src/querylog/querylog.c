/*
 * querylog/querylog.c — see querylog.h.
 *
 * Rings. Each producer owns one ring of power-of-two size: it writes a
 * slot and publishes it with a release store of `tail`; the log thread
 * reads up to `tail` (acquire) and gives the slots back with a release
 * store of `head`. Head and tail sit on their own cache lines, so a worker
 * and the log thread touch a shared line only when a record moves.
 *
 * The log thread sleeps in poll on an eventfd (stop or new settings) with
 * a 100 ms timeout while the log is on, and without a timeout while it is
 * off: an unused query log costs no wake-ups. At 4,096 records a ring
 * holds 100 ms of a worker sampling 40,000 queries a second; beyond that
 * records are dropped, counted, and the count is logged (at most every
 * 10 s, and at stop).
 */
#include "querylog/querylog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dns/dns.h"
#include "dns/wire.h"
#include "log/log.h"
#include "privs/privs.h"
#include "util/clock.h"
#include "util/pow2.h"
#include "util/wake.h"

#define DRAIN_MS 100
#define DROP_REPORT_MS 10000

_Alignas(64) _Atomic uint32_t querylog_every;

/* One sampled reply: what its log line needs, nothing more (about 300 bytes). */
struct record {
	struct timespec when;
	uint16_t port;
	uint16_t qtype;
	uint16_t size;
	uint8_t family;           /* AF_INET, AF_INET6, or 0 when unknown */
	uint8_t transport;        /* enum query_transport */
	uint8_t source;           /* enum query_source */
	uint8_t rcode;            /* the header's 4 bits */
	uint16_t qname_len;       /* 0: the reply had no question */
	uint8_t addr[16];
	uint8_t qname[DNS_MAX_NAME];
};

struct ring {
	struct record *slots;     /* read-only after start */
	uint32_t mask;
	_Alignas(64) _Atomic uint32_t head;    /* the log thread's */
	_Alignas(64) _Atomic uint32_t tail;    /* the producer's ... */
	_Atomic uint64_t dropped;              /* ... and so is this */
};

static struct {
	struct ring *rings;       /* one per worker, then the resolver's */
	unsigned n_rings;
	int wake_fd;              /* eventfd: stop, or new settings */
	atomic_bool stopping;
	pthread_t thread;
	uint64_t reported_drops;  /* log thread only */
} ql = {.wake_fd = -1};

/* ---- producer side ---------------------------------------------------------- */

static void take_client(struct record *r, const struct sockaddr_storage *client)
{
	if (client->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)client;
		memcpy(r->addr, &in->sin_addr, 4);
		r->port = ntohs(in->sin_port);
	} else if (client->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)client;
		memcpy(r->addr, &in6->sin6_addr, 16);
		r->port = ntohs(in6->sin6_port);
	} else {
		r->port = 0;
	}
	r->family = (uint8_t)client->ss_family;
}

/*
 * The rcode, and the question our writer put uncompressed after the header;
 * anything unexpected (no question, a pointer, a cut) leaves qname empty.
 */
static void take_question(struct record *r, const uint8_t *reply, size_t len)
{
	size_t pos = DNS_HEADER_LEN;

	r->qname_len = 0;
	r->qtype = 0;
	r->rcode = len >= DNS_HEADER_LEN ? reply[3] & 0xf : 0;
	if (len < DNS_HEADER_LEN || (reply[4] == 0 && reply[5] == 0))
		return;
	while (pos < len && reply[pos] != 0) {
		if (reply[pos] > DNS_MAX_LABEL)
			return;
		pos += 1u + reply[pos];
	}
	size_t name_len = pos + 1 - DNS_HEADER_LEN;
	if (pos + 5 > len || name_len > DNS_MAX_NAME)
		return;
	memcpy(r->qname, reply + DNS_HEADER_LEN, name_len);
	r->qname_len = (uint16_t)name_len;
	r->qtype = dns_get16(reply + pos + 1);
}

static struct ring *ring_of(unsigned producer)
{
	unsigned i = producer == QUERYLOG_RESOLVER ? ql.n_rings - 1 : producer;

	return ql.rings && i < ql.n_rings ? &ql.rings[i] : NULL;
}

void querylog_add(unsigned producer, const struct sockaddr_storage *client,
		  enum query_transport transport, enum query_source source,
		  const uint8_t *reply, size_t len)
{
	struct ring *ring = ring_of(producer);

	if (!ring)
		return;
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
	if (tail - head > ring->mask) {
		atomic_fetch_add_explicit(&ring->dropped, 1, memory_order_relaxed);
		return;
	}
	struct record *r = &ring->slots[tail & ring->mask];
	clock_gettime(CLOCK_REALTIME, &r->when);
	take_client(r, client);
	take_question(r, reply, len);
	r->transport = (uint8_t)transport;
	r->source = (uint8_t)source;
	r->size = (uint16_t)(len > UINT16_MAX ? UINT16_MAX : len);
	atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
}

/* ---- the log thread ------------------------------------------------------------ */

static const char *type_name(uint16_t type, char *buf, size_t len)
{
	static const struct { uint16_t type; const char *name; } names[] = {
		{1, "A"}, {2, "NS"}, {5, "CNAME"}, {6, "SOA"}, {12, "PTR"}, {13, "HINFO"},
		{15, "MX"}, {16, "TXT"}, {28, "AAAA"}, {33, "SRV"}, {35, "NAPTR"}, {39, "DNAME"},
		{41, "OPT"}, {43, "DS"}, {46, "RRSIG"}, {47, "NSEC"}, {48, "DNSKEY"},
		{50, "NSEC3"}, {52, "TLSA"}, {64, "SVCB"}, {65, "HTTPS"}, {251, "IXFR"},
		{252, "AXFR"}, {255, "ANY"}, {257, "CAA"},
	};

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].type == type)
			return names[i].name;
	snprintf(buf, len, "TYPE%u", type); /* RFC 3597 */
	return buf;
}

static const char *rcode_name(uint8_t rcode, char *buf, size_t len)
{
	static const char *const names[] = {"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN",
					    "NOTIMP", "REFUSED"};

	if (rcode < sizeof names / sizeof names[0])
		return names[rcode];
	snprintf(buf, len, "RCODE%u", rcode);
	return buf;
}

static void write_record(const struct record *r)
{
	char client[INET6_ADDRSTRLEN] = "", port[8], qname[1024] = "", type_buf[16],
	     rcode_buf[16], size[8];
	const char *qtype = "";

	if (r->family == AF_INET || r->family == AF_INET6)
		inet_ntop(r->family, r->addr, client, sizeof client);
	snprintf(port, sizeof port, "%u", r->port);
	if (r->qname_len > 0) {
		dns_name_to_text(r->qname, qname, sizeof qname);
		qtype = type_name(r->qtype, type_buf, sizeof type_buf);
	}
	snprintf(size, sizeof size, "%u", r->size);
	log_event_at(&r->when, "query", "client", client, "client_port", port, "protocol",
		     r->transport == QUERY_TCP ? "tcp" : "udp", "qname", qname, "qtype", qtype,
		     "rcode", rcode_name(r->rcode, rcode_buf, sizeof rcode_buf), "source",
		     query_source_name((enum query_source)r->source), "size", size, NULL);
}

static void drain(struct ring *ring)
{
	uint32_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);

	for (; head != tail; head++) {
		write_record(&ring->slots[head & ring->mask]);
		/* given back one by one: a producer may refill the slot at once */
		atomic_store_explicit(&ring->head, head + 1, memory_order_release);
	}
}

static void report_drops(void)
{
	uint64_t total = querylog_dropped();
	char since[24], all[24];

	if (total == ql.reported_drops)
		return;
	snprintf(since, sizeof since, "%" PRIu64, total - ql.reported_drops);
	snprintf(all, sizeof all, "%" PRIu64, total);
	log_warn("query log records dropped: the log thread fell behind (see log.query_buffer)",
		 "dropped", since, "dropped_total", all);
	ql.reported_drops = total;
}

static void *log_thread(void *arg)
{
	struct pollfd wake = {.fd = ql.wake_fd, .events = POLLIN};
	uint64_t last_report = monotonic_ms();

	(void)arg;
	while (!atomic_load(&ql.stopping)) {
		bool on = atomic_load_explicit(&querylog_every, memory_order_relaxed) > 0;
		if (poll(&wake, 1, on ? DRAIN_MS : -1) > 0 && wake_take(ql.wake_fd) < 0)
			break;
		for (unsigned i = 0; i < ql.n_rings; i++)
			drain(&ql.rings[i]);
		if (monotonic_ms() - last_report >= DROP_REPORT_MS) {
			report_drops();
			last_report = monotonic_ms();
		}
	}
	for (unsigned i = 0; i < ql.n_rings; i++)
		drain(&ql.rings[i]);
	report_drops();
	return NULL;
}

/* ---- life cycle ----------------------------------------------------------------- */

static void free_rings(void)
{
	for (unsigned i = 0; ql.rings && i < ql.n_rings; i++)
		free(ql.rings[i].slots);
	free(ql.rings);
	ql.rings = NULL;
	ql.n_rings = 0;
	if (ql.wake_fd >= 0)
		close(ql.wake_fd);
	ql.wake_fd = -1;
}

int querylog_start(const struct config *cfg, unsigned n_workers, char *err, size_t errlen)
{
	uint32_t slots = pow2_at_least(cfg->log.query_buffer);

	ql.n_rings = n_workers + 1;
	ql.rings = calloc(ql.n_rings, sizeof *ql.rings);
	ql.wake_fd = wake_open();
	ql.reported_drops = 0;
	atomic_store(&ql.stopping, false);
	if (!ql.rings || ql.wake_fd < 0)
		goto fail;
	for (unsigned i = 0; i < ql.n_rings; i++) {
		ql.rings[i].mask = slots - 1;
		if (!(ql.rings[i].slots = calloc(slots, sizeof *ql.rings[i].slots)))
			goto fail;
	}
	/* before the thread starts: it sleeps without a timeout while this is 0 */
	atomic_store(&querylog_every, cfg->log.queries);
	if (privs_thread_create(&ql.thread, PRIVS_QUERYLOG, "querylog", log_thread, NULL, err,
				errlen) < 0) {
		atomic_store(&querylog_every, 0);
		free_rings();
		return -1;
	}
	if (cfg->log.queries > 0) {
		char every[16], buffer[16];
		snprintf(every, sizeof every, "%u", cfg->log.queries);
		snprintf(buffer, sizeof buffer, "%u", slots);
		log_info("logging queries", "one_in", every, "buffer", buffer);
	}
	return 0;
fail:
	snprintf(err, errlen, "cannot set up the query log: %s", strerror(errno));
	free_rings();
	return -1;
}

void querylog_set_every(uint32_t every)
{
	atomic_store(&querylog_every, every);
	if (ql.wake_fd >= 0)
		wake_send(ql.wake_fd);
}

uint64_t querylog_dropped(void)
{
	uint64_t total = 0;

	for (unsigned i = 0; i < ql.n_rings; i++)
		total += atomic_load_explicit(&ql.rings[i].dropped, memory_order_relaxed);
	return total;
}

void querylog_stop(void)
{
	if (!ql.rings)
		return;
	atomic_store(&querylog_every, 0);
	atomic_store(&ql.stopping, true);
	wake_send(ql.wake_fd);
	pthread_join(ql.thread, NULL);
	free_rings();
}
