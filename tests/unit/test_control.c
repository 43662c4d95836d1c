/*
 * The control threads on real threads: a daemon core as main starts it
 * (answer cache, static records, the top talkers, the resolver, one worker
 * on loopback, the control socket) while a client sends the worker queries
 * and four clients call `localdns ctl` commands on the control socket at
 * once: top of every kind, stats, lookup (local names, and misses that go
 * to the resolver through each control thread's own ring), dump-cache and
 * flush. Every reply must be whole and of the kind asked: a `top clients`
 * line names the client's address, a `top names` line a name. `make tsan`
 * runs this for the control threads' own state and what they share with
 * the workers and the resolver (the cache, the top sketches, the rings).
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
#include <sys/socket.h>
#include <urcu/urcu-memb.h>

#include "cache/cache.h"
#include "config/config.h"
#include "control/control.h"
#include "daemon/daemon.h"
#include "dns/dns.h"
#include "log/log.h"
#include "privs/privs.h"
#include "query/query.h"
#include "server/server.h"
#include "top/top.h"
#include "upstream/upstream.h"

#define CALLERS 4
#define CALLS 48          /* per caller */
#define NAMES 8

static const char *const local_names[NAMES] = {
	"n0.prod.svc.cluster.local", "n1.prod.svc.cluster.local", "n2.prod.svc.cluster.local",
	"n3.prod.svc.cluster.local", "n4.prod.svc.cluster.local", "n5.prod.svc.cluster.local",
	"n6.prod.svc.cluster.local", "n7.prod.svc.cluster.local"};

struct core {
	char dir[64], sock[128];
	struct config *cfg;
	struct daemon d;
	struct control *ctl;
	uint16_t port;
	atomic_bool stop;
};

static uint16_t free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* Everything main's start_serving starts but the node, Kubernetes and HTTP. */
static void start_core(struct core *k)
{
	char yaml[2048], err[CONFIG_ERR_MAX];
	struct cache_config cc;
	struct query_sources *sources;
	int n;

	snprintf(k->dir, sizeof k->dir, "/tmp/localdns-test-control-XXXXXX");
	assert_non_null(mkdtemp(k->dir));
	snprintf(k->sock, sizeof k->sock, "%s/control.sock", k->dir);
	k->port = free_port();
	n = snprintf(yaml, sizeof yaml,
		     "listen: {addresses: [127.0.0.1], port: %u, workers: 1}\n"
		     "interface: {manage: false}\nnftables: {enabled: false}\n"
		     "kubernetes: {enabled: false}\nhealth: {listen: \"\"}\n"
		     "metrics: {listen: \"\"}\ncontrol: {socket: \"%s\"}\n"
		     "upstream: {servers: [\"127.0.0.1:9\"], timeout: 100ms}\n"
		     "static:\n  records:\n",
		     (unsigned)k->port, k->sock);
	for (int i = 0; i < NAMES; i++)
		n += snprintf(yaml + n, sizeof yaml - (size_t)n, "    - {name: %s, a: [10.0.0.%d]}\n",
			      local_names[i], i + 1);
	assert_int_equal(config_load_string("t.yaml", yaml, (size_t)n, &k->cfg, err, sizeof err), 0);
	assert_int_equal(daemon_init(&k->d, "t.yaml", k->cfg, err, sizeof err), 0);
	upstream_cache_config(k->cfg, &cc);
	assert_non_null(k->d.cache = cache_new(&cc));
	sources = query_sources_build(k->cfg, NULL, k->d.cache, err, sizeof err);
	assert_non_null(sources);
	query_sources_publish(sources);
	assert_int_equal(top_start(1), 0);
	k->d.upstream = upstream_start(k->cfg, k->d.cache, 1 + CONTROL_THREADS, err, sizeof err);
	assert_non_null(k->d.upstream);
	k->d.server = server_start(k->cfg, k->d.upstream, false, err, sizeof err);
	if (!k->d.server)
		fail_msg("%s", err);
	assert_int_equal(control_open(k->cfg, &k->ctl, err, sizeof err), 0);
	assert_int_equal(control_start(k->ctl, &k->d, 1, err, sizeof err), 0);
}

static void stop_core(struct core *k)
{
	control_stop(k->ctl);
	upstream_stop(k->d.upstream);
	server_stop(k->d.server);
	upstream_free(k->d.upstream);
	top_stop();
	query_sources_retire();
	cache_free(k->d.cache);
	daemon_destroy(&k->d);
	config_free(k->cfg);
	rmdir(k->dir);
}

/* A client of the worker: local names and misses, one at a time, until stopped. */
static void *ask_the_worker(void *arg)
{
	struct core *k = arg;
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(k->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	uint8_t q[DNS_HEADER_LEN + DNS_MAX_NAME + 4], reply[1232];
	char name[64];

	for (unsigned i = 0; !atomic_load(&k->stop); i++) {
		memset(q, 0, DNS_HEADER_LEN);
		q[0] = (uint8_t)(i >> 8), q[1] = (uint8_t)i, q[2] = 1, q[5] = 1;
		if (i % 4 == 3)
			snprintf(name, sizeof name, "m%u.example", i);
		else
			snprintf(name, sizeof name, "%s", local_names[i % NAMES]);
		int len = dns_name_from_text(name, q + DNS_HEADER_LEN);
		q[DNS_HEADER_LEN + len + 1] = DNS_T_A;
		q[DNS_HEADER_LEN + len + 3] = DNS_C_IN;
		sendto(fd, q, DNS_HEADER_LEN + (size_t)len + 4, 0, (struct sockaddr *)&to, sizeof to);
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 200) == 1)
			recv(fd, reply, sizeof reply, 0);
	}
	close(fd);
	return NULL;
}

struct caller {
	struct core *k;
	unsigned id;
	unsigned failures;
	char failure[1500];
};

static void failed(struct caller *c, const char *request, const char *why)
{
	if (c->failures++ == 0)
		snprintf(c->failure, sizeof c->failure, "%s: %s", request, why);
}

/* Each line of a `top` body: "COUNT KEY...", the key an address or a name as asked. */
static void check_top(struct caller *c, const char *request, const char *body, bool clients)
{
	char line[1100];

	for (const char *p = body; *p;) {
		size_t n = strcspn(p, "\n");
		unsigned long long count;
		char key[1024];
		struct in_addr a;
		snprintf(line, sizeof line, "%.*s", (int)n, p);
		p += n + (p[n] == '\n');
		if (sscanf(line, "%llu %1023s", &count, key) != 2)
			return failed(c, request, line);
		bool address = inet_pton(AF_INET, key, &a) == 1;
		if (clients ? strcmp(key, "127.0.0.1") != 0 : address || !strchr(key, '.'))
			return failed(c, request, line);
	}
}

static void *call_commands(void *arg)
{
	struct caller *c = arg;
	static const char *const requests[] = {
		"top clients -n 20", "top names -n 20", "stats", "top nxdomain", "top servfail",
		"lookup n3.prod.svc.cluster.local", "dump-cache", "top clients --since 5m",
		"lookup m0.example", "flush", "top names --since 10m", "stats --json"};
	const size_t n_requests = sizeof requests / sizeof requests[0];

	for (unsigned i = 0; i < CALLS; i++) {
		const char *request = requests[(i + c->id * 5) % n_requests];
		char *body = NULL, msg[256];
		size_t len = 0;
		FILE *out = open_memstream(&body, &len);
		enum control_status st = control_call(c->k->sock, request, out, msg, sizeof msg);
		fclose(out);
		if (st != CONTROL_OK)
			failed(c, request, msg);
		else if (strncmp(request, "top clients", 11) == 0)
			check_top(c, request, body, true);
		else if (strncmp(request, "top names", 9) == 0)
			check_top(c, request, body, false);
		free(body);
	}
	return NULL;
}

static void test_control_threads_at_once(void **state)
{
	struct core k = {0};
	struct caller callers[CALLERS];
	pthread_t asker, threads[CALLERS];

	(void)state;
	start_core(&k);
	assert_int_equal(pthread_create(&asker, NULL, ask_the_worker, &k), 0);
	usleep(200 * 1000); /* the top sketches and the cache have something to show */
	for (unsigned i = 0; i < CALLERS; i++) {
		callers[i] = (struct caller){.k = &k, .id = i};
		assert_int_equal(pthread_create(&threads[i], NULL, call_commands, &callers[i]), 0);
	}
	for (unsigned i = 0; i < CALLERS; i++)
		pthread_join(threads[i], NULL);
	atomic_store(&k.stop, true);
	pthread_join(asker, NULL);
	stop_core(&k);
	for (unsigned i = 0; i < CALLERS; i++)
		if (callers[i].failures)
			fail_msg("caller %u: %u bad replies, the first: %s", i, callers[i].failures,
				 callers[i].failure);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_control_threads_at_once),
	};

	privs_use_seccomp(false); /* the sanitizers' own calls are not on the lists */
	log_setup(LOG_WARN, LOG_FORMAT_LOGFMT);
	urcu_memb_register_thread();
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	urcu_memb_unregister_thread();
	return rc;
}
