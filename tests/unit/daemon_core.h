/*
 * daemon_core.h — a daemon core as main's start_serving starts it, for the
 * tests and fuzz targets of the control threads (test_control.c,
 * tests/fuzz/fuzz_control.c): the config written to a file of its own (so
 * a reload reads it again), the answer cache, static records, the top
 * talkers, the resolver (its upstream a port nothing answers on), one
 * worker on a free loopback port, the control socket, and a thread that
 * does what the control threads ask of the main thread (reloads).
 *
 * Must never: depend on cmocka (the fuzz targets use it too); leave a
 * thread or a file behind after daemon_core_stop.
 */
#ifndef LOCALDNS_TEST_DAEMON_CORE_H
#define LOCALDNS_TEST_DAEMON_CORE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "config/config.h"
#include "control/control.h"
#include "daemon/daemon.h"
#include "query/query.h"
#include "server/server.h"
#include "talkers/talkers.h"
#include "upstream/upstream.h"

#define CORE_NAMES 8

static const char *const core_names[CORE_NAMES] = {
	"n0.prod.svc.cluster.local", "n1.prod.svc.cluster.local", "n2.prod.svc.cluster.local",
	"n3.prod.svc.cluster.local", "n4.prod.svc.cluster.local", "n5.prod.svc.cluster.local",
	"n6.prod.svc.cluster.local", "n7.prod.svc.cluster.local"};

struct daemon_core {
	char dir[64], sock[128], path[128];
	struct config *cfg;
	struct daemon d;
	struct control *ctl;
	uint16_t port;
	pthread_t asks;
	bool inited, asking;
	atomic_bool stop;
};

/* Whether port on 127.0.0.1 takes a bind of this kind now. */
static inline bool core_port_takes(uint16_t port, int type)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, type, 0);
	bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;

	if (fd >= 0)
		close(fd);
	return ok;
}

/*
 * A port free for UDP and TCP now, at random below the kernel's ephemeral
 * range (as the integration harness's free_port): a port bind(0) gives
 * for UDP may be some client's TCP port already, or become one before the
 * worker binds it; below the range the kernel gives no client socket one.
 */
static inline uint16_t core_free_port(void)
{
	unsigned low = 32768, high;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	if (f) {
		if (fscanf(f, "%u %u", &low, &high) != 2)
			low = 32768;
		fclose(f);
	}
	if (low <= 11000)
		low = 11000;
	srandom((unsigned)getpid() ^ (unsigned)time(NULL));
	for (int tries = 0; tries < 200; tries++) {
		uint16_t port = (uint16_t)(10000 + random() % (low - 10000));
		if (core_port_takes(port, SOCK_DGRAM) && core_port_takes(port, SOCK_STREAM))
			return port;
	}
	return 0;
}

/* What main's loop does for the control threads: their reloads. */
static inline void *core_serve_asks(void *arg)
{
	struct daemon_core *k = arg;
	struct pollfd p = {.fd = daemon_ask_fd(&k->d), .events = POLLIN};

	while (!atomic_load(&k->stop))
		if (poll(&p, 1, 50) == 1)
			daemon_serve_asks(&k->d);
	return NULL;
}

static inline int core_write_config(struct daemon_core *k, char *err, size_t errlen)
{
	FILE *f = fopen(k->path, "w");

	if (!f) {
		snprintf(err, errlen, "cannot write %s", k->path);
		return -1;
	}
	fprintf(f,
		"listen: {addresses: [127.0.0.1], port: %u, workers: 1}\n"
		"interface: {manage: false}\nnftables: {enabled: false}\n"
		"kubernetes: {enabled: false}\nhealth: {listen: \"\"}\n"
		"metrics: {listen: \"\"}\ncontrol: {socket: \"%s\"}\n"
		"upstream: {servers: [\"127.0.0.1:9\"], timeout: 100ms}\n"
		"static:\n  records:\n",
		(unsigned)k->port, k->sock);
	for (int i = 0; i < CORE_NAMES; i++)
		fprintf(f, "    - {name: %s, a: [10.0.0.%d]}\n", core_names[i], i + 1);
	return fclose(f) == 0 ? 0 : -1;
}

/* 0, or -1 with err set (what started is left for daemon_core_stop). */
static inline int daemon_core_start(struct daemon_core *k, char *err, size_t errlen)
{
	struct cache_config cc;
	struct query_sources *sources;

	memset(k, 0, sizeof *k);
	snprintf(k->dir, sizeof k->dir, "/tmp/localdns-core-XXXXXX");
	if (!mkdtemp(k->dir)) {
		snprintf(err, errlen, "mkdtemp failed");
		return -1;
	}
	snprintf(k->sock, sizeof k->sock, "%s/control.sock", k->dir);
	snprintf(k->path, sizeof k->path, "%s/config.yaml", k->dir);
	if (!(k->port = core_free_port()) || core_write_config(k, err, errlen) < 0 ||
	    config_load(k->path, &k->cfg, err, errlen) < 0 ||
	    daemon_init(&k->d, k->path, k->cfg, err, errlen) < 0)
		return -1;
	k->inited = true;
	upstream_cache_config(k->cfg, &cc);
	if (!(k->d.cache = cache_new(&cc)) ||
	    !(sources = query_sources_build(k->cfg, NULL, k->d.cache, err, errlen)))
		return -1;
	query_sources_publish(sources);
	if (talkers_start(1) < 0 ||
	    !(k->d.upstream = upstream_start(k->cfg, k->d.cache, 1 + CONTROL_THREADS,
					     upstream_on_worker(k->cfg, 1), err, errlen)) ||
	    !(k->d.server = server_start(k->cfg, k->d.upstream, false, NULL, err, errlen)) ||
	    control_open(k->cfg, &k->ctl, err, errlen) < 0 ||
	    control_start(k->ctl, &k->d, 1, err, errlen) < 0)
		return -1;
	if (pthread_create(&k->asks, NULL, core_serve_asks, k) != 0) {
		snprintf(err, errlen, "pthread_create failed");
		return -1;
	}
	k->asking = true;
	return 0;
}

static inline void daemon_core_stop(struct daemon_core *k)
{
	control_stop(k->ctl); /* first: a reload it asked for is answered meanwhile */
	atomic_store(&k->stop, true);
	if (k->asking)
		pthread_join(k->asks, NULL);
	if (k->d.upstream)
		upstream_stop(k->d.upstream);
	if (k->d.server)
		server_stop(k->d.server);
	upstream_free(k->d.upstream);
	talkers_stop();
	query_sources_retire();
	if (k->d.cache)
		cache_free(k->d.cache);
	if (k->inited)
		daemon_destroy(&k->d); /* and the running config, if a reload replaced it */
	config_free(k->cfg);
	unlink(k->path);
	rmdir(k->dir);
}

#endif
