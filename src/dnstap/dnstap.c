/*
 * dnstap/dnstap.c — see dnstap.h.
 *
 * Rings. Each producer owns a byte ring (dnstap.buffer bytes, a power of
 * two) of variable-size records (internal.h, struct tap_entry): a cached
 * answer's record is about 200 bytes, header, query and reply. The
 * producer writes a record and publishes it with a release store of
 * `tail`; the writer thread reads up to `tail` (acquire) and gives the
 * bytes back with a release store of `head` once it has encoded them.
 * Records never straddle the end (a size of 0 sends the reader to the
 * start). A record that does not fit is dropped and counted: the producer
 * never waits.
 *
 * The writer thread polls an eventfd (stop, new settings, or a producer's
 * ring past half full: a producer writes it at most once until the writer
 * has drained that ring, so at most one syscall per half ring) with a
 * timeout of 10 ms while records keep coming and 100 ms once they stop;
 * while dnstap is off it sleeps without a timeout. At 1 MiB a ring holds
 * about 5,000 exchanges: 50 ms of a worker answering 100,000 queries a
 * second, so the half-full wake-up, not the timeout, paces a busy writer.
 *
 * The collector: while none is connected the writer leaves the rings as
 * they are and tries again after a backoff (0.5 s doubling to 30 s, reset
 * by a connection that worked); producers drop what no longer fits, so a
 * collector that comes back gets what the rings still hold and loses what
 * fell in the gap. A failed write drops that batch (counted) and the
 * connection. Every message of a batch is encoded into one buffer and
 * written with one writev of up to TAP_FRAMES frames.
 */
#include "dnstap/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "dns/dns.h"
#include "log/log.h"
#include "privs/privs.h"
#include "util/clock.h"
#include "util/pow2.h"
#include "util/wake.h"

static uint64_t now_ms(void)
{
	return (uint64_t)monotonic_ms();
}

#define BUSY_POLL_MS 10
#define IDLE_POLL_MS 100
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
#define EXTRA_MAX 300                   /* "pod=" + namespace/name */

_Alignas(64) _Atomic uint32_t dnstap_messages;

struct ring {
	uint8_t *bytes;           /* read-only after start */
	uint32_t mask;
	_Alignas(64) _Atomic uint32_t head;   /* the writer's */
	_Alignas(64) _Atomic uint32_t tail;   /* the producer's ... */
	_Atomic uint64_t dropped;             /* ... and so is this ... */
	int64_t batch_sec;                    /* ... and the time of its batch (dnstap_batch_begin) */
	uint32_t batch_nsec;
	bool in_batch;
	atomic_bool wake_asked;               /* the producer wrote the eventfd; the writer clears it */
};

/* What the writer connects to and stamps on messages; under settings_lock. */
struct settings {
	uint32_t messages;
	struct tap_target target;
	bool has_target;
	char identity[256];
	bool recursive;
	uint64_t generation;      /* bumped by every dnstap_configure that changes the above */
};

static struct {
	struct ring *rings;       /* one per worker, then the resolver's */
	unsigned n_rings;
	int wake_fd;
	int stop_fd;              /* eventfd: written once, at the stop (output.c's waits) */
	atomic_bool stopping;
	pthread_t thread;
	bool started;
	dnstap_pod_fn pods;
	const void *pods_arg;
	pthread_mutex_t settings_lock;
	struct settings settings;
	/* the writer thread's */
	struct tap_output *out;
	uint64_t connected_generation;
	uint8_t *buf;             /* TAP_WRITE_BYTES: the encoded frames of one write */
	char version[64];
	_Atomic uint64_t unsent;  /* records lost after they left a ring (a failed write) */
	_Atomic uint64_t sent;
	_Atomic uint64_t connects;
	atomic_bool connected;
} tap = {.wake_fd = -1, .stop_fd = -1, .settings_lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- producer side ---------------------------------------------------------- */

static struct ring *ring_of(unsigned producer)
{
	unsigned i = producer == DNSTAP_PRODUCER_RESOLVER ? tap.n_rings - 1 : producer;

	return tap.rings && i < tap.n_rings ? &tap.rings[i] : NULL;
}

static uint32_t padded(size_t len)
{
	return (uint32_t)((len + TAP_ALIGN - 1) & ~(size_t)(TAP_ALIGN - 1));
}

/*
 * Room for a record of size bytes (padded) in r, or NULL (counted as a
 * drop). *tail_out is where the tail goes once it is written.
 */
static struct tap_entry *reserve(struct ring *r, uint32_t size, uint32_t *tail_out)
{
	uint32_t cap = r->mask + 1;
	uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint32_t off = tail & r->mask, to_end = cap - off;
	uint32_t need = size > to_end ? size + to_end : size;

	if (size > cap / 2 || cap - (tail - head) < need) {
		atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
		return NULL;
	}
	if (size > to_end) {
		((struct tap_entry *)(r->bytes + off))->size = TAP_WRAP;
		tail += to_end;
		off = 0;
	}
	*tail_out = tail + size;
	struct tap_entry *e = (struct tap_entry *)(r->bytes + off);
	e->size = size;
	return e;
}

static void publish(struct ring *r, uint32_t tail)
{
	uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

	atomic_store_explicit(&r->tail, tail, memory_order_release);
	if (tail - head > (r->mask + 1) / 2 &&
	    !atomic_exchange_explicit(&r->wake_asked, true, memory_order_relaxed))
		wake_send(tap.wake_fd);
}

static void stamp(struct ring *r, struct tap_entry *e)
{
	struct timespec now;

	if (r->in_batch) {
		e->sec = r->batch_sec;
		e->nsec = r->batch_nsec;
		return;
	}
	clock_gettime(CLOCK_REALTIME, &now); /* the vDSO: no syscall */
	e->sec = now.tv_sec;
	e->nsec = (uint32_t)now.tv_nsec;
}

void dnstap_batch_begin(unsigned producer)
{
	struct ring *r = ring_of(producer);
	struct timespec now;

	if (!r)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	r->batch_sec = now.tv_sec;
	r->batch_nsec = (uint32_t)now.tv_nsec;
	r->in_batch = true;
}

void dnstap_batch_end(unsigned producer)
{
	struct ring *r = ring_of(producer);

	if (r)
		r->in_batch = false;
}

/* a's address and port into addr, port; its family (0: neither IPv4 nor IPv6). */
static uint8_t take_address(const struct sockaddr_storage *a, uint8_t addr[16], uint16_t *port)
{
	*port = 0;
	if (a && a->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)a;
		memcpy(addr, &in->sin_addr, 4);
		*port = ntohs(in->sin_port);
		return AF_INET;
	}
	if (a && a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
		memcpy(addr, &in6->sin6_addr, 16);
		*port = ntohs(in6->sin6_port);
		return AF_INET6;
	}
	return 0;
}

/* The client's address, and ours it asked when of the same family (response_address). */
static void take_client(struct tap_entry *e, const struct sockaddr_storage *client,
			const struct sockaddr_storage *local)
{
	e->family = take_address(client, e->addr, &e->port);
	if (take_address(local, e->local, &e->local_port) != e->family || !e->family)
		e->local_port = 0;
}

void dnstap_client(unsigned producer, const struct sockaddr_storage *client,
		   const struct sockaddr_storage *local, enum query_transport transport,
		   const uint8_t *query, size_t query_len, const uint8_t *reply, size_t reply_len)
{
	struct ring *r = ring_of(producer);
	uint32_t tail;
	struct tap_entry *e;

	if (!r || query_len > UINT16_MAX || (query_len == 0 && reply_len == 0))
		return;
	e = reserve(r, padded(sizeof *e + query_len + reply_len), &tail);
	if (!e)
		return;
	e->kind = TAP_CLIENT;
	e->transport = (uint8_t)transport;
	e->first_len = (uint16_t)query_len;
	e->second_len = (uint32_t)reply_len;
	take_client(e, client, local);
	stamp(r, e);
	if (query_len) /* memcpy from NULL is undefined even for 0 bytes */
		memcpy(e->bytes, query, query_len);
	if (reply_len)
		memcpy(e->bytes + query_len, reply, reply_len);
	publish(r, tail);
}

static void resolver_record(enum tap_entry_kind kind, const uint8_t *qname, uint16_t qtype,
			    uint16_t qclass, const uint8_t *answer, size_t answer_len)
{
	struct ring *r = ring_of(DNSTAP_PRODUCER_RESOLVER);
	size_t name_len = qname ? dns_name_len(qname) : 0;
	uint32_t tail;
	struct tap_entry *e;

	if (!r || name_len > DNS_MAX_NAME)
		return;
	e = reserve(r, padded(sizeof *e + name_len + answer_len), &tail);
	if (!e)
		return;
	e->kind = (uint8_t)kind;
	e->family = 0;
	e->port = e->local_port = 0;
	e->transport = QUERY_UDP;
	e->qtype = qtype;
	e->qclass = qclass;
	e->first_len = (uint16_t)name_len;
	e->second_len = (uint32_t)answer_len;
	stamp(r, e);
	if (name_len)
		memcpy(e->bytes, qname, name_len);
	if (answer_len)
		memcpy(e->bytes + name_len, answer, answer_len);
	publish(r, tail);
}

void dnstap_resolver_query(const uint8_t *qname, uint16_t qtype, uint16_t qclass)
{
	if (atomic_load_explicit(&dnstap_messages, memory_order_relaxed) & DNSTAP_RESOLVER_QUERY)
		resolver_record(TAP_RESOLVER_QUERY, qname, qtype, qclass, NULL, 0);
}

void dnstap_resolver_response(const uint8_t *answer, size_t answer_len)
{
	if ((atomic_load_explicit(&dnstap_messages, memory_order_relaxed) &
	     DNSTAP_RESOLVER_RESPONSE) && answer && answer_len > 0)
		resolver_record(TAP_RESOLVER_RESPONSE, NULL, 0, 0, answer, answer_len);
}

/* ---- the writer thread ---------------------------------------------------------- */

/* A batch being encoded: frames in tap.buf, and how many records they came from. */
struct batch {
	struct iovec frames[TAP_FRAMES];
	int n;
	size_t used;
	uint64_t records;
};

static void log_count(const char *msg, const char *key, uint64_t n)
{
	char text[24];

	snprintf(text, sizeof text, "%" PRIu64, n);
	log_warn(msg, key, text);
}

static bool flush(struct batch *b)
{
	bool ok = b->n == 0 || (tap.out && dnstap_output_write(tap.out, b->frames, b->n));

	if (ok) {
		atomic_fetch_add_explicit(&tap.sent, (uint64_t)b->n, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&tap.unsent, b->records, memory_order_relaxed);
		dnstap_output_close(tap.out);
		tap.out = NULL;
		atomic_store(&tap.connected, false);
		log_count("dnstap collector lost: reconnecting (records of the failed write dropped)",
			  "dropped", b->records);
	}
	b->n = 0;
	b->used = 0;
	b->records = 0;
	return ok;
}

/* The pod behind a client record's address, as the extra field says it; NULL: none. */
static const char *pod_extra(const struct tap_entry *e, char *out, size_t cap)
{
	struct sockaddr_storage ss = {.ss_family = e->family};
	char pod[EXTRA_MAX - 8];

	if (!tap.pods || e->kind != TAP_CLIENT)
		return NULL;
	if (e->family == AF_INET)
		memcpy(&((struct sockaddr_in *)&ss)->sin_addr, e->addr, 4);
	else if (e->family == AF_INET6)
		memcpy(&((struct sockaddr_in6 *)&ss)->sin6_addr, e->addr, 16);
	else
		return NULL;
	if (!tap.pods(tap.pods_arg, &ss, pod, sizeof pod))
		return NULL;
	snprintf(out, cap, "pod=%s", pod);
	return out;
}

/* The envelope of a turn's messages without extra (dnstap_envelope), packed once per turn. */
struct envelope {
	uint8_t bytes[TAP_ENVELOPE_MAX];
	size_t len;
};

/* Encode e's messages into b; false when b is full (flush it and try again). */
static bool encode_record(struct batch *b, const struct tap_entry *e, uint32_t messages,
			  const struct tap_meta *meta, const struct envelope *plain)
{
	static const enum dnstap_kind kinds[] = {DNSTAP_CLIENT_QUERY, DNSTAP_CLIENT_RESPONSE,
						 DNSTAP_RESOLVER_QUERY, DNSTAP_RESOLVER_RESPONSE};
	char extra_buf[EXTRA_MAX];
	const char *extra = pod_extra(e, extra_buf, sizeof extra_buf);
	struct envelope own;
	const struct envelope *env = plain;
	int n_before = b->n;
	size_t used_before = b->used;

	if (extra) { /* the pod's: once for the record's messages */
		own.len = dnstap_envelope(meta, extra, own.bytes, sizeof own.bytes);
		env = &own;
	}
	for (size_t i = 0; env->len && i < sizeof kinds / sizeof kinds[0]; i++) {
		size_t start, len;
		if (!(messages & kinds[i]))
			continue;
		if (b->n == TAP_FRAMES || TAP_WRITE_BYTES - b->used < TAP_ENVELOPE_MAX + 4 + tap_encoded_max(e)) {
			b->n = n_before; /* the record's messages go in the next batch, all together */
			b->used = used_before;
			return false;
		}
		len = dnstap_encode_after(e, kinds[i], meta, env->bytes, env->len,
					  tap.buf + b->used, TAP_WRITE_BYTES - b->used, &start);
		if (len == 0)
			continue;
		b->frames[b->n++] =
			(struct iovec){.iov_base = tap.buf + b->used + start, .iov_len = len};
		b->used += start + len;
	}
	b->records++;
	return true;
}

/* Encode and write what r holds; false when the connection failed. */
static bool drain(struct ring *r, uint32_t messages, const struct tap_meta *meta,
		  const struct envelope *plain, bool *had_records)
{
	uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	struct batch b = {.n = 0};

	atomic_store_explicit(&r->wake_asked, false, memory_order_relaxed);
	while (head != tail) {
		const struct tap_entry *e = (const struct tap_entry *)(r->bytes + (head & r->mask));
		if (e->size == TAP_WRAP) {
			head += (r->mask + 1) - (head & r->mask);
			continue;
		}
		if (!encode_record(&b, e, messages, meta, plain)) {
			if (b.n == 0) { /* cannot be encoded at all: skip it */
				atomic_fetch_add_explicit(&tap.unsent, 1, memory_order_relaxed);
				head += e->size;
				continue;
			}
			bool ok = flush(&b);
			/* written, or lost and counted: either way their ring bytes go back */
			atomic_store_explicit(&r->head, head, memory_order_release);
			if (!ok)
				return false;
			continue;
		}
		*had_records = true;
		head += e->size;
	}
	bool ok = flush(&b);
	atomic_store_explicit(&r->head, head, memory_order_release);
	return ok;
}

/* Give back everything the rings hold (records nobody will write), counting them. */
static void discard_all(void)
{
	for (unsigned i = 0; i < tap.n_rings; i++) {
		struct ring *r = &tap.rings[i];
		uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
		uint32_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
		uint64_t n = 0;
		while (head != tail) {
			const struct tap_entry *e =
				(const struct tap_entry *)(r->bytes + (head & r->mask));
			if (e->size == TAP_WRAP) {
				head += (r->mask + 1) - (head & r->mask);
				continue;
			}
			head += e->size;
			n++;
		}
		atomic_fetch_add_explicit(&tap.unsent, n, memory_order_relaxed);
		atomic_store_explicit(&r->head, head, memory_order_release);
	}
}

static void target_text(const struct tap_target *t, char *out, size_t cap)
{
	char ip[64] = "";

	if (t->path[0]) {
		snprintf(out, cap, "%s", t->path);
		return;
	}
	if (t->addr.ss_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)&t->addr)->sin_addr, ip, sizeof ip);
	else
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&t->addr)->sin6_addr, ip,
			  sizeof ip);
	snprintf(out, cap, t->addr.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip,
		 ntohs(((const struct sockaddr_in *)&t->addr)->sin_port));
}

/* The writer's state between turns. */
struct writer {
	struct settings s;        /* a copy, taken each turn */
	uint64_t next_try_ms;     /* when to connect again */
	uint64_t backoff_ms;
	bool failing;             /* a failure was logged; the next connection is logged */
	struct envelope plain;    /* this turn's envelope without extra */
};

static void disconnect(void)
{
	dnstap_output_close(tap.out);
	tap.out = NULL;
	atomic_store(&tap.connected, false);
}

/* Connected to the collector the settings name, when it is time to try. */
static void connect_if_due(struct writer *w)
{
	char err[256], where[160];

	if (tap.out && tap.connected_generation != w->s.generation)
		disconnect(); /* the collector changed (reload) */
	if (tap.out || !w->s.has_target || now_ms() < w->next_try_ms)
		return;
	target_text(&w->s.target, where, sizeof where);
	tap.out = dnstap_output_open(&w->s.target, tap.stop_fd, err, sizeof err);
	if (!tap.out) {
		if (!w->failing)
			log_warn("dnstap collector unreachable: retrying with backoff", "collector",
				 where, "error", err);
		w->failing = true;
		w->backoff_ms = w->backoff_ms ? w->backoff_ms * 2 : BACKOFF_MIN_MS;
		if (w->backoff_ms > BACKOFF_MAX_MS)
			w->backoff_ms = BACKOFF_MAX_MS;
		w->next_try_ms = now_ms() + w->backoff_ms;
		return;
	}
	tap.connected_generation = w->s.generation;
	atomic_fetch_add(&tap.connects, 1);
	atomic_store(&tap.connected, true);
	log_info("dnstap collector connected", "collector", where);
	w->failing = false;
	w->backoff_ms = 0;
}

static bool write_turn(struct writer *w)
{
	struct tap_meta meta = {.identity = w->s.identity, .version = tap.version,
				.recursive = w->s.recursive};
	bool had_records = false;

	connect_if_due(w);
	if (!tap.out)
		return false;
	w->plain.len = dnstap_envelope(&meta, NULL, w->plain.bytes, sizeof w->plain.bytes);
	for (unsigned i = 0; i < tap.n_rings; i++)
		if (!drain(&tap.rings[i], w->s.messages, &meta, &w->plain, &had_records)) {
			w->next_try_ms = now_ms() + BACKOFF_MIN_MS;
			break;
		}
	return had_records;
}

static void take_settings(struct writer *w)
{
	pthread_mutex_lock(&tap.settings_lock);
	w->s = tap.settings;
	pthread_mutex_unlock(&tap.settings_lock);
}

static void *writer_thread(void *arg)
{
	struct pollfd wake = {.fd = tap.wake_fd, .events = POLLIN};
	struct writer w = {.next_try_ms = 0};
	bool busy = false;

	(void)arg;
	if (tap.pods)
		urcu_memb_register_thread(); /* the pod lookup reads the cluster table */
	while (!atomic_load(&tap.stopping)) {
		take_settings(&w);
		bool on = w.s.messages != 0 && w.s.has_target;
		int timeout = !on ? -1 : busy ? BUSY_POLL_MS : IDLE_POLL_MS;
		if (on && !tap.out && w.next_try_ms > now_ms() &&
		    w.next_try_ms - now_ms() < (uint64_t)IDLE_POLL_MS)
			timeout = (int)(w.next_try_ms - now_ms());
		if (poll(&wake, 1, timeout) > 0 && wake_take(tap.wake_fd) < 0)
			break;
		take_settings(&w);
		if (w.s.messages == 0 || !w.s.has_target) {
			disconnect();
			discard_all(); /* turned off: what is left would be stale when it is back on */
			busy = false;
			continue;
		}
		busy = write_turn(&w);
	}
	/* the stop: what is left, while the collector takes it within the flush deadline */
	if (tap.out)
		write_turn(&w);
	disconnect();
	discard_all();
	if (tap.pods)
		urcu_memb_unregister_thread();
	return NULL;
}

/* ---- settings and life cycle ---------------------------------------------------- */

void dnstap_identity(const struct config *cfg, char *out, size_t cap)
{
	const char *node = getenv("NODE_NAME");

	if (*cfg->dnstap.identity)
		snprintf(out, cap, "%s", cfg->dnstap.identity);
	else if (*cfg->kubernetes.node_name)
		snprintf(out, cap, "%s", cfg->kubernetes.node_name);
	else if (node && *node)
		snprintf(out, cap, "%s", node);
	else if (gethostname(out, cap) != 0)
		snprintf(out, cap, "localdns");
	out[cap - 1] = '\0';
}

static void settings_from(const struct config *cfg, struct settings *s)
{
	memset(s, 0, sizeof *s);
	s->messages = cfg->dnstap.messages;
	if (*cfg->dnstap.socket) {
		snprintf(s->target.path, sizeof s->target.path, "%s", cfg->dnstap.socket);
		s->has_target = true;
	} else if (*cfg->dnstap.address) {
		struct config_hostport hp;
		const char *why;
		if (config_value_hostport(cfg->dnstap.address, 0, &hp, &why) == 0) {
			s->target.addr = hp.addr;
			s->target.addr_len = hp.addr_len;
			s->has_target = true;
		}
	}
	if (!s->has_target)
		s->messages = 0;
	dnstap_identity(cfg, s->identity, sizeof s->identity);
	s->recursive = cfg->upstream.recursive;
}

void dnstap_configure(const struct config *cfg)
{
	struct settings next;
	bool changed;

	settings_from(cfg, &next);
	pthread_mutex_lock(&tap.settings_lock);
	next.generation = tap.settings.generation;
	changed = memcmp(&next, &tap.settings, sizeof next) != 0;
	if (changed) {
		next.generation++;
		tap.settings = next;
	}
	pthread_mutex_unlock(&tap.settings_lock);
	atomic_store(&dnstap_messages, tap.started ? next.messages : 0);
	if (changed && tap.wake_fd >= 0)
		wake_send(tap.wake_fd);
}

static void free_rings(void)
{
	for (unsigned i = 0; tap.rings && i < tap.n_rings; i++)
		free(tap.rings[i].bytes);
	free(tap.rings);
	tap.rings = NULL;
	tap.n_rings = 0;
	free(tap.buf);
	tap.buf = NULL;
	if (tap.wake_fd >= 0)
		close(tap.wake_fd);
	if (tap.stop_fd >= 0)
		close(tap.stop_fd);
	tap.wake_fd = tap.stop_fd = -1;
}

int dnstap_start(const struct config *cfg, unsigned n_workers, dnstap_pod_fn pods,
		 const void *pods_arg, char *err, size_t errlen)
{
	uint32_t bytes = pow2_at_least(cfg->dnstap.buffer);

	tap.n_rings = n_workers + 1;
	tap.rings = calloc(tap.n_rings, sizeof *tap.rings);
	tap.buf = malloc(TAP_WRITE_BYTES);
	tap.wake_fd = wake_open();
	tap.stop_fd = wake_open();
	tap.pods = pods;
	tap.pods_arg = pods_arg;
	atomic_store(&tap.stopping, false);
	snprintf(tap.version, sizeof tap.version, "localdns %s", LOCALDNS_VERSION);
	if (!tap.rings || !tap.buf || tap.wake_fd < 0 || tap.stop_fd < 0)
		goto fail;
	for (unsigned i = 0; i < tap.n_rings; i++) {
		tap.rings[i].mask = bytes - 1;
		/* calloc: pages cost memory only once a record lands on them */
		if (!(tap.rings[i].bytes = calloc(1, bytes)))
			goto fail;
	}
	tap.started = true;
	dnstap_configure(cfg); /* before the thread: it sleeps without a timeout while off */
	if (privs_thread_create(&tap.thread, PRIVS_DNSTAP, "dnstap", writer_thread, NULL, err,
				errlen) < 0) {
		tap.started = false;
		atomic_store(&dnstap_messages, 0);
		free_rings();
		return -1;
	}
	if (atomic_load(&dnstap_messages)) {
		char where[160], size[24];
		target_text(&tap.settings.target, where, sizeof where);
		snprintf(size, sizeof size, "%" PRIu32, bytes);
		log_info("dnstap on", "collector", where, "identity", tap.settings.identity,
			 "buffer", size);
	}
	return 0;
fail:
	snprintf(err, errlen, "cannot set up dnstap: %s", strerror(errno));
	tap.started = false;
	free_rings();
	return -1;
}

uint64_t dnstap_dropped(void)
{
	uint64_t total = atomic_load_explicit(&tap.unsent, memory_order_relaxed);

	for (unsigned i = 0; i < tap.n_rings; i++)
		total += atomic_load_explicit(&tap.rings[i].dropped, memory_order_relaxed);
	return total;
}

uint64_t dnstap_sent(void)
{
	return atomic_load_explicit(&tap.sent, memory_order_relaxed);
}

uint64_t dnstap_connects(void)
{
	return atomic_load_explicit(&tap.connects, memory_order_relaxed);
}

uint64_t dnstap_connected(void)
{
	return atomic_load_explicit(&tap.connected, memory_order_relaxed) ? 1 : 0;
}

void dnstap_stop(void)
{
	if (!tap.started)
		return;
	atomic_store(&dnstap_messages, 0);
	atomic_store(&tap.stopping, true);
	wake_send(tap.wake_fd);
	wake_send(tap.stop_fd); /* a wait on the collector ends too */
	pthread_join(tap.thread, NULL);
	tap.started = false;
	uint64_t dropped = dnstap_dropped();
	if (dropped) {
		log_count("dnstap records dropped (collector slow or away, or rings full; "
			  "see dnstap.buffer)", "dropped_total", dropped);
	}
	free_rings();
}
