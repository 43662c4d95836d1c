/*
 * ask.h — asking the query path (query_handle) as a worker does: a plain
 * query built with packet.h, from a client's address, over UDP, under the
 * RCU read lock; the reply read back with reply.h. The caller has
 * registered its thread with RCU and published its query sources. Include
 * after <cmocka.h>.
 */
#ifndef LOCALDNS_TEST_ASK_H
#define LOCALDNS_TEST_ASK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <urcu/urcu-memb.h>

#include "address.h"
#include "packet.h"
#include "query/query.h"
#include "reply.h"

/* The node's resolv.conf (upstream.resolv_conf: its search list is the
 * one autopath walks), holding text, in a new file whose name goes in
 * path[ASK_PATH_MAX]; the caller unlinks it. */
#define ASK_PATH_MAX 64
static inline void ask_resolv_conf(char *path, const char *test, const char *text)
{
	snprintf(path, ASK_PATH_MAX, "/tmp/localdns-%s-resolv-XXXXXX", test);
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* What one query got. */
struct asked {
	struct reply r;                /* the reply, when there is one now */
	enum query_upstream upstream;  /* what the path asks of the upstream */
	enum query_source source;      /* who answered */
	struct query_stats stats;      /* this query's counters */
};

/* A plain query (RD, no EDNS) for name, in its letter case. */
static inline void ask_query(struct pkt *p, const char *name, uint16_t qtype)
{
	pkt_build_query(p, &(struct pkt_query){.id = 0xbeef, .flags = DNS_F_RD, .qname = name,
					       .qtype = qtype});
}

/*
 * Ask name/qtype from a client at ip (NULL: no address) at now (the
 * cache's clock, in seconds); what the path asks of the upstream is put in
 * *request. o->r is read when there is a reply now.
 */
static inline void ask_path(const char *name, uint16_t qtype, const char *ip, uint64_t now,
			    struct query_ask *request, struct asked *o)
{
	struct pkt in;
	struct sockaddr_storage peer;

	memset(&o->stats, 0, sizeof o->stats);
	if (ip)
		peer = address_of(ip);
	ask_query(&in, name, qtype);
	struct query_ctx ctx = {.transport = QUERY_UDP, .peer = ip ? &peer : NULL,
				.stats = &o->stats, .now = now, .ask = request};

	urcu_memb_read_lock();
	o->r.len = query_handle(in.b, in.len, o->r.buf, sizeof o->r.buf, &ctx);
	urcu_memb_read_unlock();
	o->upstream = ctx.upstream;
	o->source = ctx.source;
	o->r.v = NULL; /* no reply: nothing left of an earlier one to check */
	if (o->r.len)
		read_reply(&o->r);
}

#endif
