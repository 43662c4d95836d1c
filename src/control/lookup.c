/*
 * control — `lookup NAME [TYPE]`: answer a query the way a client would
 * get it and say which source gave the answer.
 *
 * The query (RD, EDNS with a 1232-byte payload) runs through query_handle
 * on the control thread under the RCU read lock, as over TCP (so the whole
 * answer shows). It is counted in the control threads' own query_stats
 * (`control_lookups` in stats), not in the workers' counters. A cache miss
 * (query_handle hands back QUERY_UPSTREAM_ASK) goes to the resolver like a
 * worker's, through the control thread's own request ring; the resolver
 * sends the answer into one end of the thread's datagram socket pair (a
 * UDP reply to a connected socket: no address), and the thread reads the
 * other, until upstream.timeout and a second more. The answer lands in the
 * cache as any; the source is then `upstream`. Nothing goes through the
 * listen addresses or listen.allow, and the workers' counters do not see it.
 *
 * A lookup that hits an entry in its last tenth of TTL takes the prefetch
 * claim but does not queue the refresh; that entry is then refreshed on its
 * first miss instead of ahead of time.
 *
 * The answer is printed by libldns (ldns_pkt2str), like drill or dig, or
 * with --json as one JSON document of the same fields (json.c).
 */
#include "control/internal.h"

#include <errno.h>
#include <ldns/ldns.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "dns/wire.h"
#include "upstream/upstream.h"
#include "util/clock.h"

#define LOOKUP_EDNS_PAYLOAD 1232
#define LOOKUP_WAIT_EXTRA_MS 1000   /* beyond upstream.timeout: the daemon answers by then */
#define LOOKUP_WAIT_MAX_MS 30000

/* The query a client would send: RD, EDNS. NULL with err set. */
static ldns_pkt *build_query(const char *name, const char *type_text, char *err, size_t errlen)
{
	ldns_rr_type type = ldns_get_rr_type_by_name(type_text);
	ldns_rdf *owner = NULL;

	if (type == 0) {
		snprintf(err, errlen, "unknown record type \"%s\"", type_text);
		return NULL;
	}
	if (ldns_str2rdf_dname(&owner, name) != LDNS_STATUS_OK) {
		snprintf(err, errlen, "\"%s\" is not a domain name", name);
		return NULL;
	}
	ldns_pkt *q = ldns_pkt_query_new(owner, type, LDNS_RR_CLASS_IN, LDNS_RD);
	if (!q) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	ldns_pkt_set_edns_udp_size(q, LOOKUP_EDNS_PAYLOAD);
	ldns_pkt_set_random_id(q);
	return q;
}

/* The local sources (static, cluster, cache); 0 when none answered. */
static size_t answer_here(struct control_thread *t, const uint8_t *query, size_t len,
			  struct query_ctx *ctx)
{
	*ctx = (struct query_ctx){
		.transport = QUERY_TCP,
		.stats = &t->lookup_stats,
		.now = cache_clock_seconds(),
		.serve_stale = upstream_failing(t->ctl->d->upstream),
		.ask = &t->request.ask,
	};
	atomic_fetch_add_explicit(&t->lookups, 1, memory_order_relaxed);
	urcu_memb_read_lock();
	size_t n = query_handle(query, len, t->answer, sizeof t->answer, ctx);
	urcu_memb_read_unlock();
	return n;
}

/* ---- asking the resolver ------------------------------------------------ */

/* Drop what an earlier lookup's late answer left in the socket. */
static void drain_replies(struct control_thread *t)
{
	while (recv(t->reply_fd[1], t->answer, sizeof t->answer, MSG_DONTWAIT) > 0)
		;
}

/* The request query_handle filled, to the resolver; its answer into t->answer. 0 with err. */
static size_t ask_resolver(struct control_thread *t, uint16_t id, char *err, size_t errlen)
{
	struct upstream *u = t->ctl->d->upstream;
	struct config_ip served;
	uint16_t port;
	uint64_t timeout_ms;

	daemon_serving(t->ctl->d, &served, &port, &timeout_ms); /* as reloads left it */
	uint64_t wait_ms = timeout_ms + LOOKUP_WAIT_EXTRA_MS;
	int64_t deadline = monotonic_ms() +
			   (int64_t)(wait_ms < LOOKUP_WAIT_MAX_MS ? wait_ms : LOOKUP_WAIT_MAX_MS);

	drain_replies(t);
	t->request.transport = UPSTREAM_UDP;
	t->request.fd = t->reply_fd[0];
	t->request.peer_len = 0; /* the pair is connected: the reply goes to its other end */
	t->request.log_reply = false;
	if (!upstream_submit(u, t->producer, &t->request)) {
		snprintf(err, errlen, "the resolver is too busy to take the question");
		return 0;
	}
	upstream_wake(u);
	for (;;) {
		int64_t left = deadline - monotonic_ms();
		if (left <= 0 ||
		    !control_wait(t->reply_fd[1], POLLIN, t->ctl->stop_fd, (int)left))
			break;
		ssize_t n = recv(t->reply_fd[1], t->answer, sizeof t->answer, MSG_DONTWAIT);
		if (n >= DNS_HEADER_LEN && dns_get16(t->answer) == id)
			return (size_t)n;
	}
	snprintf(err, errlen, "no answer from the resolver in time");
	return 0;
}

/* ---- printing ----------------------------------------------------------- */

/* The header flags set, in dig's order. */
static json_object *flags_json(struct jdoc *d, const ldns_pkt *pkt)
{
	const struct {
		const char *name;
		bool set;
	} flags[] = {
		{"qr", ldns_pkt_qr(pkt)}, {"aa", ldns_pkt_aa(pkt)}, {"tc", ldns_pkt_tc(pkt)},
		{"rd", ldns_pkt_rd(pkt)}, {"ra", ldns_pkt_ra(pkt)}, {"ad", ldns_pkt_ad(pkt)},
		{"cd", ldns_pkt_cd(pkt)},
	};
	json_object *list = control_jdoc_array(d);

	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
		if (flags[i].set)
			control_jdoc_push(d, list, json_object_new_string(flags[i].name));
	return list;
}

/* {"udp_size", "do"}, or null without EDNS. */
static void edns_json(struct jdoc *d, json_object *o, const ldns_pkt *pkt)
{
	if (!ldns_pkt_edns(pkt)) {
		if (o && json_object_object_add(o, "edns", NULL) < 0)
			d->failed = true;
		return;
	}
	json_object *edns = control_jdoc_object(d);
	control_jdoc_put(d, edns, "udp_size", json_object_new_int(ldns_pkt_edns_udp_size(pkt)));
	control_jdoc_put(d, edns, "do", json_object_new_boolean(ldns_pkt_edns_do(pkt)));
	control_jdoc_put(d, o, "edns", edns);
}

/* One document: the source, then the reply as dig's text shows it. */
static void print_answer_json(struct conn *c, enum query_source source, size_t len,
			      uint32_t ms, const ldns_pkt *pkt)
{
	struct jdoc doc = {0};
	json_object *o = doc.root = control_jdoc_object(&doc);

	control_jdoc_put(&doc, o, "source", json_object_new_string(query_source_name(source)));
	control_jdoc_put(&doc, o, "id", json_object_new_int(ldns_pkt_id(pkt)));
	control_jdoc_put(&doc, o, "opcode",
			 control_jdoc_ldns_string(ldns_pkt_opcode2str(ldns_pkt_get_opcode(pkt))));
	control_jdoc_put(&doc, o, "rcode",
			 control_jdoc_ldns_string(ldns_pkt_rcode2str(ldns_pkt_get_rcode(pkt))));
	control_jdoc_put(&doc, o, "flags", flags_json(&doc, pkt));
	control_jdoc_put(&doc, o, "question",
			 control_jdoc_records(&doc, ldns_pkt_question(pkt), true));
	control_jdoc_sections(&doc, o, pkt);
	edns_json(&doc, o, pkt);
	control_jdoc_put(&doc, o, "query_time_ms", json_object_new_int64(ms));
	control_jdoc_put(&doc, o, "size", json_object_new_uint64(len));
	control_reply_json(c, &doc);
}

static pthread_mutex_t ldns_print_lock = PTHREAD_MUTEX_INITIALIZER;

static void print_answer(struct conn *c, enum query_source source, size_t len, uint32_t ms,
			 const uint8_t *msg)
{
	ldns_pkt *pkt;
	struct timeval now;

	if (ldns_wire2pkt(&pkt, msg, len) != LDNS_STATUS_OK) {
		control_reply_error(c, "the answer does not parse (%zu bytes)", len);
		return;
	}
	if (c->json) {
		print_answer_json(c, source, len, ms, pkt);
		ldns_pkt_free(pkt);
		return;
	}
	gettimeofday(&now, NULL);
	ldns_pkt_set_timestamp(pkt, now);
	ldns_pkt_set_querytime(pkt, ms);
	/* ldns prints ";; WHEN:" with ctime(), whose one buffer (and glibc's
	 * time zone state it refreshes) every control thread would share. */
	pthread_mutex_lock(&ldns_print_lock);
	char *text = ldns_pkt2str(pkt);
	pthread_mutex_unlock(&ldns_print_lock);
	ldns_pkt_free(pkt);
	if (!text) {
		control_reply_error(c, "out of memory");
		return;
	}
	control_reply_ok(c);
	control_conn_printf(c, "source: %s\n", query_source_name(source));
	control_conn_write(c, text, strlen(text));
	free(text);
}

void control_lookup(struct control_thread *t, struct conn *c, const char *name, const char *type)
{
	char err[256];
	uint8_t *query = NULL;
	size_t query_len = 0;
	struct query_ctx ctx;
	ldns_pkt *q = build_query(name, type, err, sizeof err);

	if (!q) {
		control_reply_error(c, "%s", err);
		return;
	}
	ldns_status st = ldns_pkt2wire(&query, q, &query_len);
	ldns_pkt_free(q);
	if (st != LDNS_STATUS_OK) {
		control_reply_error(c, "cannot build the query: %s", ldns_get_errorstr_by_id(st));
		return;
	}
	int64_t start = monotonic_ms();
	uint16_t id = dns_get16(query);
	size_t len = answer_here(t, query, query_len, &ctx);
	if (len == 0 && ctx.upstream == QUERY_UPSTREAM_ASK)
		len = ask_resolver(t, id, err, sizeof err);
	else if (len == 0)
		snprintf(err, sizeof err, "the query was dropped");
	free(query);
	if (len == 0) {
		control_reply_error(c, "%s", err);
		return;
	}
	print_answer(c, ctx.source, len, (uint32_t)(monotonic_ms() - start), t->answer);
}
