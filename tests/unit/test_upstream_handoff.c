/*
 * The upstream hand-off on real threads, end to end: two worker threads
 * answer TCP queries with query_handle as server/worker.c does, pack the
 * cache misses into their request rings and wake the resolver thread,
 * which asks libunbound, which asks a DNS server on loopback run by this
 * test; the resolver stores each answer in the cache and hands the reply
 * back through the asking worker's completion ring, while the workers keep
 * answering hits from the same cache. Every query must be answered exactly
 * once, to its own worker, for its own connection, with its own question
 * and the address the server gave for that name. `make tsan` runs this for
 * the request and completion rings and the cache between the resolver and
 * the workers (test_upstream_ring has the ring alone). The second test runs
 * the resolver on worker 0 (upstream.resolver: first_worker): its turns
 * follow that worker's own work, as server/worker.c's loop takes them,
 * libunbound's sockets in that worker's epoll set (upstream_host_ready), and
 * it hands its own misses over after each batch with upstream_host_ask
 * (every fourth through its ring instead, as when its slots are full),
 * while worker 1 hands its misses over through its ring and the wake-up.
 */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <urcu/urcu-memb.h>

#include "cache/cache.h"
#include "config/config.h"
#include "dns/dns.h"
#include "query/query.h"
#include "upstream/upstream.h"
#include "util/clock.h"

#define WORKERS 2
#define NAMES 1536        /* n0.example .. n1535.example, asked by both workers */
#define QUERIES (NAMES + 512) /* per worker: every name, then 512 again */
#define BATCH 512         /* misses in flight per worker: half a completion ring, so
			   * the rings, not the resolver's held replies, carry them */
#define WAIT_LIMIT_MS 120000 /* only so a broken hand-off fails instead of hanging */
#define QUERY_MAX (DNS_HEADER_LEN + DNS_MAX_NAME + 4)

/* ---- the upstream: n<k>.example A 198.51.(100 + k / 256).(k % 256) ----------- */

struct server {
	int fd;
	uint16_t port;
	pthread_t thread;
	atomic_bool stop;
};

static void answer_query(struct server *s, const uint8_t *pkt, size_t len,
			 const struct sockaddr_storage *from, socklen_t from_len)
{
	uint8_t out[512], addr[4] = {198, 51, 100, 0};
	char text[1024];
	struct dns_query q;
	struct dns_writer w;
	unsigned k;

	if (dns_parse_query(pkt, len, &q) != DNS_PARSE_OK)
		return;
	dns_response_begin(&w, out, sizeof out, &q, DNS_R_NOERROR);
	dns_response_set_aa(&w, true);
	if (dns_name_to_text(q.qname, text, sizeof text) > 0 &&
	    sscanf(text, "n%u.example.", &k) == 1 && k < NAMES && q.qtype == DNS_T_A) {
		addr[2] = (uint8_t)(100 + k / 256);
		addr[3] = (uint8_t)k;
		dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_A, DNS_C_IN, 300, addr, 4);
	} else {
		dns_response_set_rcode(&w, DNS_R_REFUSED);
	}
	size_t n = dns_response_finish(&w, 1232);
	sendto(s->fd, out, n, 0, (const struct sockaddr *)from, from_len);
}

static void *server_main(void *arg)
{
	struct server *s = arg;
	uint8_t pkt[4096];

	while (!atomic_load(&s->stop)) {
		struct pollfd p = {.fd = s->fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		struct sockaddr_storage from;
		socklen_t from_len = sizeof from;
		ssize_t n = recvfrom(s->fd, pkt, sizeof pkt, 0, (struct sockaddr *)&from, &from_len);
		if (n > 0)
			answer_query(s, pkt, (size_t)n, &from, from_len);
	}
	return NULL;
}

static void server_start(struct server *s)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;

	s->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(s->fd >= 0);
	assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
	s->port = ntohs(a.sin_port);
	atomic_init(&s->stop, false);
	assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
}

static void server_stop(struct server *s)
{
	atomic_store(&s->stop, true);
	pthread_join(s->thread, NULL);
	close(s->fd);
}

/* ---- the workers --------------------------------------------------------------- */

#define HAND_OVER 16      /* queries per batch: one hand-over each */

struct worker {
	pthread_t thread;
	unsigned id;
	struct upstream *u;
	struct upstream_request request;
	/* the hosting worker's misses of this batch, for upstream_host_ask */
	struct upstream_request own[HAND_OVER];
	unsigned n_own, n_asked;
	bool answered[QUERIES];
	/* what went wrong, counted (cmocka asserts only on the main thread) */
	unsigned hits, via_resolver, wrong, twice, ring_full, missing;
	bool hosts;              /* the resolver's turns are this worker's */
	int epfd;                /* hosting: its epoll set, as server/worker.c's */
};

/* The hosting worker's epoll set: what each event is about (data word's high half). */
enum { EV_COMPLETION = 1, EV_RESOLVER, EV_SOCKET };
#define EV_TAG(kind) ((uint64_t)(kind) << 32)

/* The hosting worker's set: its completions, the resolver's descriptor and libunbound's sockets. */
static bool host(struct worker *w)
{
	struct epoll_event completion = {.events = EPOLLIN, .data.u64 = EV_TAG(EV_COMPLETION)};
	struct epoll_event resolver = {.events = EPOLLIN, .data.u64 = EV_TAG(EV_RESOLVER)};
	int fd;

	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	assert_true(w->epfd >= 0);
	assert_int_equal(epoll_ctl(w->epfd, EPOLL_CTL_ADD, upstream_completion_fd(w->u, w->id),
				   &completion), 0);
	fd = upstream_host_attach(w->u, w->id, w->epfd, EV_TAG(EV_SOCKET));
	if (fd < 0)
		return false;
	assert_int_equal(epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &resolver), 0);
	return true;
}

/* What a worker does after a batch: the hosting one hands its own misses
 * over and takes the resolver's turn, the others wake it. */
static void hand_over(struct worker *w)
{
	if (!w->hosts) {
		upstream_wake(w->u);
		return;
	}
	upstream_host_ask(w->u, w->own, w->n_own);
	w->n_own = 0;
	w->hosts = upstream_host_turn(w->u, false);
}

/* Wait up to ms for this worker's completions, or (hosting) for the
 * resolver's descriptor or libunbound's sockets, and take the turn it owes. */
static void wait_a_little(struct worker *w, int ms)
{
	struct pollfd p = {.fd = upstream_completion_fd(w->u, w->id), .events = POLLIN};
	struct epoll_event events[16];
	bool ready = false;

	if (!w->hosts) {
		poll(&p, 1, ms);
		return;
	}
	int n = epoll_wait(w->epfd, events, 16, upstream_host_wait_ms(w->u, ms));
	for (int i = 0; i < n; i++) {
		uint64_t kind = events[i].data.u64 >> 32;
		if (kind == EV_SOCKET)
			upstream_host_ready(w->u, (int)(uint32_t)events[i].data.u64,
					    events[i].events);
		ready = ready || kind == EV_RESOLVER;
	}
	w->hosts = upstream_host_turn(w->u, ready);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static size_t make_query(uint8_t *pkt, unsigned j)
{
	static const uint8_t header[DNS_HEADER_LEN] = {0, 0, DNS_F_RD >> 8, 0, 0, 1};
	char name[32];
	size_t n = DNS_HEADER_LEN;

	memcpy(pkt, header, sizeof header);
	pkt[0] = (uint8_t)(j >> 8);
	pkt[1] = (uint8_t)j;
	snprintf(name, sizeof name, "n%u.example", j % NAMES);
	n += (size_t)dns_name_from_text(name, pkt + n);
	static const uint8_t type_class[4] = {0, DNS_T_A, 0, DNS_C_IN};
	memcpy(pkt + n, type_class, 4);
	return n + 4;
}

/* The reply to query j: its ID, its question, the one A record the server gives. */
static bool reply_ok(const uint8_t *msg, size_t len, unsigned j)
{
	uint8_t pkt[QUERY_MAX], name[DNS_MAX_NAME];
	size_t qlen = make_query(pkt, j), pos = DNS_HEADER_LEN;

	if (len < qlen + 16 || get16(msg) != (uint16_t)j || (msg[3] & 0xf) != DNS_R_NOERROR ||
	    get16(msg + 4) != 1 || get16(msg + 6) != 1 ||
	    memcmp(msg + DNS_HEADER_LEN, pkt + DNS_HEADER_LEN, qlen - DNS_HEADER_LEN) != 0)
		return false;
	pos = qlen;
	if (dns_name_read(msg, len, &pos, name, true) < 0 || len - pos < 14 ||
	    get16(msg + pos) != DNS_T_A || get16(msg + pos + 8) != 4)
		return false;
	const uint8_t *a = msg + pos + 10;
	unsigned k = j % NAMES;
	return a[0] == 198 && a[1] == 51 && a[2] == 100 + k / 256 && a[3] == k % 256;
}

/* Replies the resolver has handed back for this worker's connections. */
static void take_completions(struct worker *w)
{
	struct upstream_completion c;

	while (upstream_take_completion(w->u, w->id, &c)) {
		unsigned j = c.conn;
		if (j >= QUERIES || c.conn_gen != w->id || c.len < 2 ||
		    get16(c.framed) != c.len - 2 || !reply_ok(c.framed + 2, c.len - 2, j))
			w->wrong++;
		else if (w->answered[j])
			w->twice++;
		else
			w->answered[j] = true;
		w->via_resolver++;
		free(c.framed);
	}
}

/* Answer query j as a worker does for a TCP client. */
static void ask(struct worker *w, unsigned j, uint8_t *out)
{
	uint8_t pkt[QUERY_MAX];
	size_t len = make_query(pkt, j);
	struct query_stats st = {0};
	struct query_ctx ctx = {.transport = QUERY_TCP, .stats = &st,
				.now = cache_clock_seconds(), .ask = &w->request.ask};

	urcu_memb_read_lock();
	size_t n = query_handle(pkt, len, out, DNS_MAX_MESSAGE, &ctx);
	urcu_memb_read_unlock();
	if (ctx.upstream != QUERY_UPSTREAM_ASK) {
		w->hits++;
		if (!reply_ok(out, n, j) || w->answered[j])
			w->wrong++;
		w->answered[j] = true;
		return;
	}
	w->request.transport = UPSTREAM_TCP;
	w->request.conn = j;
	w->request.conn_gen = w->id;
	if (w->hosts && w->n_asked++ % 4 != 3) {
		w->own[w->n_own++] = w->request; /* ask() is called HAND_OVER times at most */
		return;
	}
	while (!upstream_submit(w->u, w->id, &w->request)) { /* ring full: let it drain */
		hand_over(w);
		take_completions(w);
		w->ring_full++;
	}
}

static bool answered_below(const struct worker *w, unsigned end)
{
	for (unsigned j = 0; j < end; j++)
		if (!w->answered[j])
			return false;
	return true;
}

/* Queries [from, to), one hand-over per HAND_OVER as the UDP loop does per batch;
 * then wait until every query below `to` has its answer, or until give_up_ms. */
static void ask_and_wait(struct worker *w, unsigned from, unsigned to, uint8_t *out,
			 uint64_t give_up_ms)
{
	for (unsigned j = from; j < to; j++) {
		ask(w, j, out);
		if (j % HAND_OVER == HAND_OVER - 1) {
			hand_over(w);
			take_completions(w);
		}
	}
	hand_over(w);
	while (!answered_below(w, to) && (uint64_t)coarse_ms() < give_up_ms) {
		wait_a_little(w, 100);
		take_completions(w);
	}
}

/* Every name once, BATCH at a time (misses, unless the other worker was
 * first: more than a whole completion ring of replies in all), then, once
 * those are answered, names again: cache hits, read while the resolver may
 * still be storing the other worker's answers. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *out = malloc(DNS_MAX_MESSAGE);
	uint64_t give_up_ms = (uint64_t)coarse_ms() + WAIT_LIMIT_MS;

	urcu_memb_register_thread();
	for (unsigned from = 0; from < QUERIES; from += BATCH)
		ask_and_wait(w, from, from + BATCH < QUERIES ? from + BATCH : QUERIES, out,
			     give_up_ms);
	for (unsigned j = 0; j < QUERIES; j++)
		w->missing += !w->answered[j];
	while (w->hosts) /* the others' misses, until upstream_stop */
		wait_a_little(w, 100);
	urcu_memb_unregister_thread();
	free(out);
	return NULL;
}

/* ---- the test ------------------------------------------------------------------ */

static void every_miss_comes_back_once_to_its_own_worker(bool on_worker)
{
	static struct worker workers[WORKERS]; /* too large for cmocka's test stack */
	struct server srv;
	struct config *cfg;
	struct cache_config cc;
	char yaml[256], err[CONFIG_ERR_MAX];

	server_start(&srv);
	/* a timeout no slow machine reaches: answers, never deadlines, end every wait */
	snprintf(yaml, sizeof yaml,
		 "kubernetes: {enabled: false}\n"
		 "upstream: {servers: [\"127.0.0.1:%u\"], timeout: 60s, max_rate: 0}\n",
		 srv.port);
	assert_int_equal(config_load_string("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof err), 0);
	urcu_memb_register_thread();
	upstream_cache_config(cfg, &cc);
	struct cache *cache = cache_new(&cc);
	assert_non_null(cache);
	struct query_sources *sources = query_sources_build(cfg, NULL, cache, err, sizeof err);
	assert_non_null(sources);
	query_sources_publish(sources);
	struct upstream *u = upstream_start(cfg, cache, WORKERS, on_worker, err, sizeof err);
	if (!u)
		print_error("%s\n", err);
	assert_non_null(u);

	for (unsigned i = 0; i < WORKERS; i++) {
		memset(&workers[i], 0, sizeof workers[i]);
		workers[i].id = i;
		workers[i].u = u;
		workers[i].epfd = -1;
		workers[i].hosts = i == 0 && host(&workers[i]);
		assert_int_equal(workers[i].hosts, i == 0 && on_worker);
		assert_int_equal(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]),
				 0);
	}
	/* the others first: a hosting worker 0 turns until upstream_stop */
	for (unsigned i = WORKERS; i-- > 1;)
		pthread_join(workers[i].thread, NULL);
	upstream_stop(u);
	pthread_join(workers[0].thread, NULL);
	assert_false(workers[0].hosts);
	if (workers[0].epfd >= 0)
		close(workers[0].epfd);
	unsigned via_resolver = 0;
	for (unsigned i = 0; i < WORKERS; i++) {
		struct worker *w = &workers[i];
		print_message("worker %u: %u hits, %u via the resolver, %u waits for a full ring\n",
			      i, w->hits, w->via_resolver, w->ring_full);
		assert_int_equal(w->missing, 0);
		assert_int_equal(w->wrong, 0);
		assert_int_equal(w->twice, 0);
		assert_int_equal(w->hits + w->via_resolver, QUERIES);
		assert_true(w->hits >= QUERIES - NAMES); /* all of the second round */
		via_resolver += w->via_resolver;
	}
	/* each name's first query found an empty cache: at least that many came
	 * back through a completion ring */
	assert_true(via_resolver >= NAMES);

	upstream_free(u);
	query_sources_retire();
	cache_free(cache);
	config_free(cfg);
	urcu_memb_unregister_thread();
	server_stop(&srv);
}

static void test_every_miss_comes_back_once_to_its_own_worker(void **state)
{
	(void)state;
	every_miss_comes_back_once_to_its_own_worker(false);
}

static void test_the_same_with_the_resolver_on_worker_0(void **state)
{
	(void)state;
	every_miss_comes_back_once_to_its_own_worker(true);
}

/* upstream.resolver: auto is the worker only when there is one worker to run it on. */
static void test_auto_puts_the_resolver_on_the_worker_only_when_there_is_one(void **state)
{
	static const struct {
		const char *value;
		unsigned workers;
		bool on_worker;
	} cases[] = {
		{"auto", 1, true},           {"auto", 2, false},         {"auto", 64, false},
		{"own_thread", 1, false},    {"first_worker", 1, true},  {"first_worker", 8, true},
	};
	char yaml[128], err[CONFIG_ERR_MAX];
	struct config *cfg;
	(void)state;

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(yaml, sizeof yaml, "upstream: {resolver: %s}\n", cases[i].value);
		assert_int_equal(config_load_string("t.yaml", yaml, strlen(yaml), &cfg, err,
						    sizeof err), 0);
		assert_int_equal(upstream_on_worker(cfg, cases[i].workers), cases[i].on_worker);
		config_free(cfg);
	}
	snprintf(yaml, sizeof yaml, "upstream: {resolver: second_worker}\n");
	assert_int_equal(config_load_string("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof err), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_miss_comes_back_once_to_its_own_worker),
		cmocka_unit_test(test_the_same_with_the_resolver_on_worker_0),
		cmocka_unit_test(test_auto_puts_the_resolver_on_the_worker_only_when_there_is_one),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
