/*
 * control — `lookup NAME [TYPE]`: answer a query the way a client would
 * get it and say which source gave the answer.
 *
 * The query (RD, EDNS with a 1232-byte payload) runs through query_handle
 * on the control thread under the RCU read lock, as over TCP (so the whole
 * answer shows). It is counted in the control thread's own query_stats
 * (`control_lookups` in stats), not in the workers' counters. A cache miss
 * (query_handle hands back QUERY_UPSTREAM_ASK) cannot be given to the
 * resolver from here: the request rings have one producer each, a worker.
 * So the same query goes over UDP (TCP when truncated) to the daemon's
 * first served address, where a worker handles it like any client's: the
 * answer lands in the cache and the client's counters count it. The
 * source is then `upstream`.
 *
 * A lookup that hits an entry in its last tenth of TTL takes the prefetch
 * claim but cannot queue the refresh; that entry is then refreshed on its
 * first miss instead of ahead of time.
 *
 * The answer is printed by libldns (ldns_pkt2str), like drill or dig.
 */
#include "control/internal.h"

#include <errno.h>
#include <ldns/ldns.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

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
static size_t answer_here(struct control *ctl, const uint8_t *query, size_t len,
			  struct query_ctx *ctx)
{
	*ctx = (struct query_ctx){
		.transport = QUERY_TCP,
		.stats = &ctl->lookup_stats,
		.now = cache_clock_seconds(),
		.serve_stale = upstream_failing(ctl->d->upstream),
		.request = &ctl->request,
	};
	urcu_memb_read_lock();
	size_t n = query_handle(query, len, ctl->answer, sizeof ctl->answer, ctx);
	urcu_memb_read_unlock();
	return n;
}

/* ---- asking the daemon like a client ------------------------------------ */

struct exchange {
	struct control *ctl;
	const uint8_t *query;
	size_t query_len;
	uint16_t id;
	struct sockaddr_storage addr;
	socklen_t addr_len;
	int64_t deadline_ms;
};

static int remaining_ms(const struct exchange *x)
{
	int64_t left = x->deadline_ms - monotonic_ms();

	return left > 0 ? (int)left : 0;
}

static bool wait_for(const struct exchange *x, int fd, short events)
{
	return control_wait(fd, events, x->ctl->stop_fd, remaining_ms(x));
}

static bool is_our_reply(const struct exchange *x, const uint8_t *m, size_t len)
{
	return len >= DNS_HEADER_LEN && ((m[0] << 8) | m[1]) == x->id && (m[2] & 0x80);
}

/* The reply over UDP into ctl->answer; its length, or 0. */
static size_t exchange_udp(const struct exchange *x)
{
	int fd = socket(x->addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	size_t got = 0;

	if (fd < 0)
		return 0;
	if (connect(fd, (const struct sockaddr *)&x->addr, x->addr_len) == 0 &&
	    send(fd, x->query, x->query_len, 0) == (ssize_t)x->query_len) {
		while (got == 0 && wait_for(x, fd, POLLIN)) {
			ssize_t n = recv(fd, x->ctl->answer, sizeof x->ctl->answer, 0);
			if (n > 0 && is_our_reply(x, x->ctl->answer, (size_t)n))
				got = (size_t)n;
			else if (n < 0 && errno != EAGAIN && errno != EINTR)
				break;
		}
	}
	close(fd);
	return got;
}

static bool read_exact(const struct exchange *x, int fd, uint8_t *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		if (!wait_for(x, fd, POLLIN))
			return false;
		ssize_t n = recv(fd, buf + done, len - done, 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return false;
		if (n > 0)
			done += (size_t)n;
	}
	return true;
}

static bool connect_tcp(const struct exchange *x, int fd)
{
	int soerr = 0;
	socklen_t soerr_len = sizeof soerr;

	if (connect(fd, (const struct sockaddr *)&x->addr, x->addr_len) == 0)
		return true;
	return errno == EINPROGRESS && wait_for(x, fd, POLLOUT) &&
	       getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &soerr_len) == 0 && soerr == 0;
}

/* The reply over TCP into ctl->answer; its length, or 0. */
static size_t exchange_tcp(const struct exchange *x)
{
	uint8_t frame[2 + 512], prefix[2]; /* a query: header, one name, OPT */
	size_t got = 0;

	if (x->query_len > sizeof frame - 2)
		return 0;
	int fd = socket(x->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	frame[0] = (uint8_t)(x->query_len >> 8);
	frame[1] = (uint8_t)x->query_len;
	memcpy(frame + 2, x->query, x->query_len);
	if (connect_tcp(x, fd) &&
	    send(fd, frame, x->query_len + 2, MSG_NOSIGNAL) == (ssize_t)(x->query_len + 2) &&
	    read_exact(x, fd, prefix, 2)) {
		size_t len = (size_t)prefix[0] << 8 | prefix[1];
		if (read_exact(x, fd, x->ctl->answer, len) && is_our_reply(x, x->ctl->answer, len))
			got = len;
	}
	close(fd);
	return got;
}

/* Ask the daemon's first served address (into server); the reply's length, or 0 with err. */
static size_t ask_daemon(struct control *ctl, const uint8_t *query, size_t len,
			 struct config_ip *server, char *err, size_t errlen)
{
	uint16_t port;
	uint64_t timeout_ms;

	daemon_serving(ctl->d, server, &port, &timeout_ms); /* as reloads left it */
	uint64_t wait_ms = timeout_ms + LOOKUP_WAIT_EXTRA_MS;
	struct exchange x = {
		.ctl = ctl,
		.query = query,
		.query_len = len,
		.id = (uint16_t)(query[0] << 8 | query[1]),
		.deadline_ms = monotonic_ms() +
			       (int64_t)(wait_ms < LOOKUP_WAIT_MAX_MS ? wait_ms : LOOKUP_WAIT_MAX_MS),
	};

	x.addr_len = config_ip_sockaddr(server, port, &x.addr);
	size_t n = exchange_udp(&x);
	if (n > 0 && (ctl->answer[2] & (DNS_F_TC >> 8)))
		n = exchange_tcp(&x);
	if (n == 0)
		snprintf(err, errlen, "no answer from localdns on %s port %u in time", server->text,
			 port);
	return n;
}

/* ---- printing ----------------------------------------------------------- */

static void print_answer(struct conn *c, enum query_source source, size_t len, uint32_t ms,
			 const struct config_ip *server, const uint8_t *msg)
{
	ldns_pkt *pkt;
	struct timeval now;

	if (ldns_wire2pkt(&pkt, msg, len) != LDNS_STATUS_OK) {
		reply_error(c, "the answer does not parse (%zu bytes)", len);
		return;
	}
	gettimeofday(&now, NULL);
	ldns_pkt_set_timestamp(pkt, now);
	ldns_pkt_set_querytime(pkt, ms);
	if (server)
		ldns_pkt_set_answerfrom(pkt, ldns_rdf_new_frm_str(server->family == AF_INET6 ?
					LDNS_RDF_TYPE_AAAA : LDNS_RDF_TYPE_A, server->text));
	char *text = ldns_pkt2str(pkt);
	ldns_pkt_free(pkt);
	if (!text) {
		reply_error(c, "out of memory");
		return;
	}
	reply_ok(c);
	conn_printf(c, "source: %s\n", query_source_name(source));
	conn_write(c, text, strlen(text));
	free(text);
}

void control_lookup(struct control *ctl, struct conn *c, const char *name, const char *type)
{
	char err[256];
	uint8_t *query = NULL;
	size_t query_len = 0;
	struct query_ctx ctx;
	struct config_ip served;
	const struct config_ip *server = NULL;
	ldns_pkt *q = build_query(name, type, err, sizeof err);

	if (!q) {
		reply_error(c, "%s", err);
		return;
	}
	ldns_status st = ldns_pkt2wire(&query, q, &query_len);
	ldns_pkt_free(q);
	if (st != LDNS_STATUS_OK) {
		reply_error(c, "cannot build the query: %s", ldns_get_errorstr_by_id(st));
		return;
	}
	int64_t start = monotonic_ms();
	size_t len = answer_here(ctl, query, query_len, &ctx);
	if (len == 0 && ctx.upstream == QUERY_UPSTREAM_ASK) {
		len = ask_daemon(ctl, query, query_len, &served, err, sizeof err);
		server = &served;
	}
	else if (len == 0)
		snprintf(err, sizeof err, "the query was dropped");
	free(query);
	if (len == 0) {
		reply_error(c, "%s", err);
		return;
	}
	print_answer(c, ctx.source, len, (uint32_t)(monotonic_ms() - start), server, ctl->answer);
}
