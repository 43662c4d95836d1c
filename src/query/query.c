/* query — see query.h. */
#include "query/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include <netinet/in.h>

#include "dns/dns.h"
#include "log/log.h"
#include "resolvconf/resolvconf.h"
#include "static/static.h"
#include "util/tsan.h"

static struct query_sources *current_sources;

/* One TXT character-string; longer text is cut at 255 bytes. */
static uint16_t txt_rdata(uint8_t out[256], const char *text)
{
	size_t len = strlen(text);

	if (len > 255)
		len = 255;
	out[0] = (uint8_t)len;
	memcpy(out + 1, text, len);
	return (uint16_t)(len + 1);
}

static void set_chaos_identity(struct query_sources *s, const struct config *cfg)
{
	char host[256] = "";
	const char *id = cfg->chaos.id;

	if (!id || !*id) {
		gethostname(host, sizeof host - 1);
		id = host;
	}
	s->chaos_enabled = cfg->chaos.enabled;
	s->chaos_version_len = txt_rdata(s->chaos_version, cfg->chaos.version ? cfg->chaos.version : "");
	s->chaos_id_len = txt_rdata(s->chaos_id, id);
}

/* The node's search domains, for autopath; none when resolv.conf cannot be read. */
static void load_search_domains(struct query_sources *s, const char *path)
{
	char text[1024] = "";
	size_t used = 0;
	int n = resolvconf_search_domains(path, s->search, sizeof s->search);

	if (n < 0) {
		log_warn("autopath: cannot read the node's search domains; the cluster's only",
			 "file", path, "error", strerror(errno));
		return;
	}
	s->search_len = (uint16_t)n;
	for (size_t pos = 0; pos < s->search_len; pos += dns_name_len(s->search + pos)) {
		int len = dns_name_to_text(s->search + pos, text + used, sizeof text - used);
		if (len < 0 || used + (size_t)len + 1 >= sizeof text)
			break;
		used += (size_t)len;
		text[used++] = ' ';
	}
	text[used ? used - 1 : 0] = '\0';
	log_info("autopath: search list <ns>.svc, svc, the cluster domain, then the node's domains",
		 "file", path, "domains", text);
}

struct query_sources *query_sources_build(const struct config *cfg, const struct query_names *names,
					  struct cache *cache, char *err, size_t errlen)
{
	const struct cluster *cluster = names ? names->cluster : NULL;
	struct query_sources *s = calloc(1, sizeof *s);

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->zone = static_zone_build(cfg, (uint32_t)time(NULL), err, errlen);
	if (!s->zone) {
		free(s);
		return NULL;
	}
	s->cluster = cluster;
	s->clusterset = cluster ? names->clusterset : NULL;
	s->mesh = cluster ? names->mesh : NULL;
	s->cluster_fallback = cfg->cluster.n_fallback_servers > 0;
	s->autopath = cfg->cluster.autopath && cluster;
	s->autopath_ttl = cfg->cluster.ttl;
	if (*cfg->dns64.prefix) { /* checked by the loader: IPv6, an RFC 6052 length */
		memcpy(s->dns64.addr, &cfg->dns64.net.ip.v6, 16);
		s->dns64.len = cfg->dns64.net.prefix;
	}
	if (s->autopath)
		load_search_domains(s, cfg->upstream.resolv_conf);
	s->cache = cache;
	s->udp_max_payload = cfg->listen.udp_max_payload;
	if (query_allow_build(s, cfg, err, errlen) < 0) {
		query_sources_free(s);
		return NULL;
	}
	set_chaos_identity(s, cfg);
	if (getrandom(s->cookie_secret, sizeof s->cookie_secret, 0) !=
	    (ssize_t)sizeof s->cookie_secret) {
		snprintf(err, errlen, "cannot get random bytes for the cookie secret");
		query_sources_free(s);
		return NULL;
	}
	return s;
}

void query_sources_free(struct query_sources *s)
{
	if (!s)
		return;
	zone_table_free(s->zone);
	free(s);
}

void query_sources_publish(struct query_sources *s)
{
	TSAN_PUBLISH(s);
	struct query_sources *old = rcu_xchg_pointer(&current_sources, s);

	if (old) {
		urcu_memb_synchronize_rcu();
		TSAN_GRACE_ACQUIRE();
		query_sources_free(old);
	}
}

void query_sources_retire(void)
{
	query_sources_free(rcu_xchg_pointer(&current_sources, NULL));
}

/* RFC 6891 6.2.5: never below 512; never above what we are willing to send. */
static size_t udp_reply_limit(const struct dns_query *q, const struct query_sources *s)
{
	size_t limit;

	if (!q->has_edns)
		return DNS_MAX_UDP_PLAIN;
	limit = q->edns_udp_size < DNS_EDNS_MIN_PAYLOAD ? DNS_EDNS_MIN_PAYLOAD : q->edns_udp_size;
	return limit < s->udp_max_payload ? limit : s->udp_max_payload;
}

static const uint8_t version_bind[] = "\7version\4bind";
static const uint8_t id_server[] = "\2id\6server";

/* CH TXT version.bind / id.server (RFC 4892), only when the operator opts in. */
static void answer_chaos(const struct dns_query *q, const struct query_sources *s,
			 struct dns_writer *w)
{
	const uint8_t *rdata = NULL;
	uint16_t len = 0;

	if (q->qtype == DNS_T_TXT || q->qtype == DNS_T_ANY) {
		if (memcmp(q->qname, version_bind, sizeof version_bind) == 0) {
			rdata = s->chaos_version;
			len = s->chaos_version_len;
		} else if (memcmp(q->qname, id_server, sizeof id_server) == 0) {
			rdata = s->chaos_id;
			len = s->chaos_id_len;
		}
	}
	if (!s->chaos_enabled || !rdata) {
		dns_response_set_rcode(w, DNS_R_REFUSED);
		return;
	}
	dns_response_set_aa(w, true);
	dns_response_add_rr(w, DNS_SEC_ANSWER, NULL, DNS_T_TXT, DNS_C_CH, 0, rdata, len);
}

const char *const query_source_names[QUERY_SOURCE_COUNT] = {
	"none", "static", "cluster", "cache", "stale", "upstream", "mesh"};

const char *const query_qtype_names[QUERY_QTYPE_COUNT] = {
	"A", "AAAA", "CNAME", "PTR", "SRV", "TXT", "MX", "NS", "SOA", "ANY",
	"HTTPS", "SVCB", "other"};

const char *query_source_name(enum query_source source)
{
	return source < QUERY_SOURCE_COUNT ? query_source_names[source] : "none";
}

static enum query_qtype qtype_counted(uint16_t qtype)
{
	switch (qtype) {
	case DNS_T_A: return QUERY_QTYPE_A;
	case DNS_T_AAAA: return QUERY_QTYPE_AAAA;
	case DNS_T_CNAME: return QUERY_QTYPE_CNAME;
	case DNS_T_PTR: return QUERY_QTYPE_PTR;
	case DNS_T_SRV: return QUERY_QTYPE_SRV;
	case DNS_T_TXT: return QUERY_QTYPE_TXT;
	case DNS_T_MX: return QUERY_QTYPE_MX;
	case DNS_T_NS: return QUERY_QTYPE_NS;
	case DNS_T_SOA: return QUERY_QTYPE_SOA;
	case DNS_T_ANY: return QUERY_QTYPE_ANY;
	case DNS_T_HTTPS: return QUERY_QTYPE_HTTPS;
	case DNS_T_SVCB: return QUERY_QTYPE_SVCB;
	default: return QUERY_QTYPE_OTHER;
	}
}

static enum zone_result answer_from_zone(const struct query_prepared *p,
					 const struct query_sources *s, struct dns_writer *w)
{
	if (p->zone_absent)
		return ZONE_NOT_LOCAL; /* found so while fetching: the table does not change */
	if (p->zone_hashed)
		return zone_answer_hashed(s->zone, &p->q, p->zone_hash, w);
	return zone_answer(s->zone, &p->q, w);
}

/* The cluster zone's table, then the clusterset zone's. */
static enum cluster_result answer_from_clusters(const struct query_sources *s,
						const struct dns_query *q, struct dns_writer *w,
						struct cluster_chase *chase)
{
	enum cluster_result r = s->cluster ? cluster_answer(s->cluster, q, w, chase)
					   : CLUSTER_NOT_LOCAL;

	if (r == CLUSTER_NOT_LOCAL && s->clusterset)
		r = cluster_answer(s->clusterset, q, w, chase);
	return r;
}

static void answer_in(const struct query_prepared *p, const struct query_sources *s,
		      struct dns_writer *w, struct query_ctx *ctx)
{
	const struct dns_query *q = &p->q;
	struct cluster_chase chase;

	if (ctx->ask) { /* the worker's ask is reused: nothing carries over */
		ctx->ask->chain_len = 0;
		ctx->ask->search = false;
		ctx->ask->nxdomain_len = 0;
	}
	if (s->dns64.len && query_dns64_ptr(s, q, w, ctx)) /* dns64.c */
		return;
	if (answer_from_zone(p, s, w) == ZONE_ANSWERED) {
		ctx->source = QUERY_SOURCE_STATIC;
		return;
	}
	switch (answer_from_clusters(s, q, w, &chase)) {
	case CLUSTER_ANSWERED:
		ctx->source = QUERY_SOURCE_CLUSTER;
		if (s->mesh && w->rcode == DNS_R_NXDOMAIN &&
		    query_answer_mesh(q, s, w, ctx, MESH_ASK_NXDOMAIN))
			return;
		if (s->autopath)
			query_autopath(q, s, w, ctx);
		return;
	case CLUSTER_CHASE:
		query_answer_chase(s, w, ctx, NULL, &chase);
		return;
	case CLUSTER_UNSYNCED:
		if (!s->cluster_fallback) {
			dns_response_set_rcode(w, DNS_R_SERVFAIL); /* never a false NXDOMAIN */
			return;
		}
		break; /* the resolver forwards the zone to kube-dns */
	case CLUSTER_NOT_LOCAL:
		if (s->mesh && query_answer_mesh(q, s, w, ctx, MESH_ASK_NAME))
			return;
		break;
	}
	if (!s->cache) {
		dns_response_set_rcode(w, DNS_R_REFUSED); /* no upstream path */
		return;
	}
	query_answer_from_cache(s, w, ctx, p->cache_keyed ? &p->cache_key : NULL);
}

/*
 * RFC 7873: a client cookie gets a fresh server cookie on every reply. We do
 * not require cookies, so an incoming server cookie needs no verification:
 * valid or not, the answer and the new cookie are the same. false when the
 * reply carries no cookie.
 */
static bool make_cookie(uint8_t cookie[DNS_SERVER_COOKIE_LEN], const struct dns_query *q,
			const struct query_sources *s, const struct sockaddr_storage *peer)
{
	const uint8_t *ip;
	size_t ip_len;

	if (!q->cookie_len || !peer)
		return false;
	if (peer->ss_family == AF_INET) {
		ip = (const uint8_t *)&((const struct sockaddr_in *)peer)->sin_addr;
		ip_len = 4;
	} else if (peer->ss_family == AF_INET6) {
		ip = ((const struct sockaddr_in6 *)peer)->sin6_addr.s6_addr;
		ip_len = 16;
	} else {
		return false;
	}
	dns_server_cookie(cookie, q->cookie, s->cookie_secret, (uint32_t)time(NULL), ip, ip_len);
	return true;
}

/* Everything the resolver needs to write this client's reply later; key: q's, or NULL. */
static void fill_ask(struct query_ask *r, const struct dns_query *q, const struct cache_key *key,
		     const struct query_sources *s, const struct query_ctx *ctx,
		     size_t limit, bool has_cookie, const uint8_t cookie[DNS_SERVER_COOKIE_LEN])
{
	static const struct dns64_prefix off;
	const struct sockaddr_storage *peer = ctx->peer;

	r->q = *q;
	r->cache_absent = ctx->cache_absent;
	r->cache_keyed = key != NULL;
	if (key) {
		r->cache_name_hash = key->name_hash;
		r->cache_hash = key->hash;
	}
	/* the resolver synthesizes for this client too (dns64.c, upstream/flight.c) */
	r->dns64 = dns64_applies(&s->dns64, q, peer) ? s->dns64 : off;
	r->dns64_a = false;
	r->reply_limit = (uint32_t)limit;
	r->udp_payload = s->udp_max_payload;
	r->has_cookie = has_cookie;
	if (has_cookie)
		memcpy(r->cookie, cookie, DNS_SERVER_COOKIE_LEN);
}

/* A parsed query (DNS_PARSE_OK or DNS_PARSE_BADVERS) to a finished reply. */
static size_t answer(const struct query_prepared *p, bool bad_version,
		     const struct query_sources *s, struct query_ctx *ctx,
		     uint8_t *out, size_t limit)
{
	const struct dns_query *q = &p->q;
	struct dns_writer w;
	uint8_t cookie[DNS_SERVER_COOKIE_LEN];
	bool has_cookie = make_cookie(cookie, q, s, ctx->peer);

	dns_response_begin(&w, out, limit, q, DNS_R_NOERROR);
	if (has_cookie)
		dns_response_set_server_cookie(&w, cookie);
	if (!query_client_allowed(s, ctx->peer)) {
		ctx->stats->not_allowed++;
		dns_response_set_rcode(&w, DNS_R_REFUSED);
	} else if (bad_version)
		dns_response_set_rcode(&w, DNS_R_BADVERS); /* RFC 6891 6.1.3 */
	else if (q->qtype == DNS_T_AXFR || q->qtype == DNS_T_IXFR)
		dns_response_set_rcode(&w, DNS_R_REFUSED); /* we serve no zones to copy */
	else if (q->qclass == DNS_C_CH)
		answer_chaos(q, s, &w);
	else if (q->qclass == DNS_C_IN)
		answer_in(p, s, &w, ctx);
	else
		dns_response_set_rcode(&w, DNS_R_REFUSED);
	size_t len = 0;
	if (ctx->upstream != QUERY_UPSTREAM_ASK) {
		len = dns_response_finish(&w, s->udp_max_payload);
		if (s->dns64.len && q->qtype == DNS_T_AAAA) { /* dns64.c: answers without AAAA */
			len = query_dns64_local(s, q, ctx, out, len, limit,
						has_cookie ? cookie : NULL);
			len = query_dns64_cached(s, q, ctx, out, len, limit,
						 has_cookie ? cookie : NULL);
		}
	}
	if (ctx->upstream != QUERY_UPSTREAM_NONE)
		fill_ask(ctx->ask, q, p->cache_keyed ? &p->cache_key : NULL, s, ctx, limit,
			 has_cookie, cookie);
	return ctx->upstream == QUERY_UPSTREAM_ASK ? 0 : len;
}

static size_t reply_limit(const struct dns_query *q, const struct query_sources *s,
			  enum query_transport transport, size_t outcap)
{
	size_t limit = transport == QUERY_TCP ? DNS_MAX_MESSAGE : udp_reply_limit(q, s);

	return limit < outcap ? limit : outcap;
}

/* BADVERS hides in OPT (the header says 0), so the caller says which it was. */
static void count_reply(struct query_stats *st, const uint8_t *reply, size_t len,
			bool bad_version)
{
	if (len == 0) {
		st->dropped++; /* nothing was written: the header is not ours to read */
		return;
	}
	st->rcode[dns_reply_rcode_slot(reply, bad_version)]++;
	st->truncated += dns_reply_truncated(reply);
}

/* Would answer_in ask the static table, then the cache, for p? */
static bool asks_tables(const struct query_prepared *p)
{
	return p->sources && p->parsed == DNS_PARSE_OK && p->q.qclass == DNS_C_IN &&
	       p->q.qtype != DNS_T_AXFR && p->q.qtype != DNS_T_IXFR;
}

bool query_client_may_ask(const struct sockaddr_storage *peer)
{
	const struct query_sources *s = rcu_dereference(current_sources);

	if (!s) /* only between start-up steps: sources are published first */
		return true;
	TSAN_SUBSCRIBE(s);
	bool allowed = query_client_allowed(s, peer);
	TSAN_GRACE_RELEASE(); /* done with the sources */
	return allowed;
}

void query_prepare(const uint8_t *in, size_t inlen, struct query_prepared *p)
{
	const struct query_sources *s = rcu_dereference(current_sources);

	if (s)
		TSAN_SUBSCRIBE(s);
	p->sources = s;
	p->parsed = dns_parse_query(in, inlen, &p->q);
	p->cache_keyed = p->zone_absent = false;
	p->zone_hashed = asks_tables(p);
	if (p->zone_hashed) {
		p->zone_hash = zone_name_hash(p->q.qname, p->q.qname_len);
		zone_prefetch_slot(s->zone, p->zone_hash);
	}
}

/* Will p's answer come from the cache, if from anywhere? (Not local data.) */
static bool cache_bound(struct query_prepared *p)
{
	const struct query_sources *s = p->sources;
	const struct dns_query *q = &p->q;

	if (zone_prefetch_node(s->zone, p->zone_hash) ||
	    zone_covers(s->zone, q->qname, q->qname_len))
		return false;
	p->zone_absent = true;
	return s->cache && (!s->cluster || !dns_name_is_subdomain(q->qname, cluster_zone(s->cluster)));
}

void query_prefetch(struct query_prepared *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!p[i].zone_hashed || !cache_bound(&p[i]))
			continue;
		cache_key_of(p[i].sources->cache, &p[i].q, &p[i].cache_key);
		cache_prefetch_bucket(p[i].sources->cache, &p[i].cache_key);
		p[i].cache_keyed = true;
	}
	for (size_t i = 0; i < n; i++)
		if (p[i].cache_keyed)
			cache_prefetch_entry(&p[i].cache_key);
}

size_t query_handle_prepared(const struct query_prepared *p, const uint8_t *in, size_t inlen,
			     uint8_t *out, size_t outcap, struct query_ctx *ctx)
{
	const struct query_sources *s = p->sources;
	const struct dns_query *q = &p->q;
	struct query_stats *stats = ctx->stats;
	bool bad_version = p->parsed == DNS_PARSE_BADVERS;
	size_t len = 0;

	ctx->upstream = QUERY_UPSTREAM_NONE;
	ctx->source = QUERY_SOURCE_NONE;
	stats->received++;
	stats->transport[ctx->transport]++;
	if (p->parsed != DNS_PARSE_DROP && q->question_ok) /* a runt leaves q unset */
		stats->qtype[qtype_counted(q->qtype)]++;
	switch (p->parsed) {
	case DNS_PARSE_DROP:
		break;
	case DNS_PARSE_FORMERR:
		len = dns_error_reply(in, inlen, q, DNS_R_FORMERR, out, outcap);
		break;
	case DNS_PARSE_NOTIMP:
		len = dns_error_reply(in, inlen, q, DNS_R_NOTIMP, out, outcap);
		break;
	case DNS_PARSE_BADVERS:
	case DNS_PARSE_OK:
		if (s)
			len = answer(p, bad_version, s, ctx, out,
				     reply_limit(q, s, ctx->transport, outcap));
		else /* only between start-up steps: sources are published first */
			len = dns_error_reply(in, inlen, q, DNS_R_SERVFAIL, out, outcap);
		break;
	}
	stats->source[ctx->source]++;
	if (ctx->upstream != QUERY_UPSTREAM_ASK)
		count_reply(stats, out, len, bad_version);
	TSAN_GRACE_RELEASE(); /* done with the sources and what they hold */
	return len;
}

size_t query_handle(const uint8_t *in, size_t inlen, uint8_t *out, size_t outcap,
		    struct query_ctx *ctx)
{
	struct query_prepared p;

	query_prepare(in, inlen, &p);
	return query_handle_prepared(&p, in, inlen, out, outcap, ctx);
}
