/*
 * The control threads on real threads: a daemon core as main starts it
 * (daemon_core.h: answer cache, static records, the top talkers, the
 * resolver, one worker on loopback, the control socket, reloads served)
 * while a client sends the worker queries and four clients call `localdns
 * ctl` commands on the control socket at once: top of every kind, stats,
 * lookup (local names, and misses that go to the resolver through each
 * control thread's own ring), dump-cache, flush and reload. Every reply must be whole and of the kind asked: a `top clients`
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

#include "daemon_core.h"
#include "dns/dns.h"
#include "log/log.h"
#include "privs/privs.h"

#define CALLERS 4
#define CALLS 48          /* per caller */

/* A client of the worker: local names and misses, one at a time, until stopped. */
static void *ask_the_worker(void *arg)
{
	struct daemon_core *k = arg;
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
			snprintf(name, sizeof name, "%s", core_names[i % CORE_NAMES]);
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
	struct daemon_core *k;
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
		"lookup m0.example", "flush", "top names --since 10m", "stats --json", "reload"};
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
	struct daemon_core k;
	struct caller callers[CALLERS];
	pthread_t asker, threads[CALLERS];
	char err[CONFIG_ERR_MAX];

	(void)state;
	if (daemon_core_start(&k, err, sizeof err) < 0)
		fail_msg("%s", err);
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
	daemon_core_stop(&k);
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
