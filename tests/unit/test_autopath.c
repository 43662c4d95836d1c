/*
 * Unit tests for autopath (query/autopath.c) through query_handle: a pod's
 * first search-list query walks the rest of its list here. Local
 * candidates (cluster table, static records) are answered at once with a
 * CNAME; external ones become one upstream request listing them
 * (query_ask.search), skipping those the cache knows are NXDOMAIN;
 * a local candidate after unresolved external ones ends the list; when
 * every candidate is NXDOMAIN the original NXDOMAIN stands. Unknown
 * clients, other namespaces, existing names and autopath off are left
 * alone. The walk allocates nothing and takes no mutex (this binary is
 * linked with --wrap, see the Makefile).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <urcu/urcu-memb.h>

#include "alloc_count.h"
#include "ask.h"
#include "cache/cache.h"
#include "cluster/cluster.h"
#include "cluster/objects.h"
#include "config/config.h"
#include "cluster_fixture.h"
#include "config_text.h"
#include "query/query.h"

#define NOW 1000 /* the cache's clock, in seconds */

static struct cache *cache;
static struct cluster *cluster;
static char resolv_conf[ASK_PATH_MAX]; /* the node's resolv.conf, made by setup */

static const char *prod_client = "10.1.0.50"; /* a pod of this node in prod */
static const char *team_client = "10.1.0.51"; /* ... in team */

static struct config *load_config(bool autopath)
{
	char yaml[1024];

	snprintf(yaml, sizeof yaml,
		 "cluster: {domain: cluster.local, ttl: 5s, autopath: %s}\n"
		 "upstream: {resolv_conf: \"%s\"}\n"
		 "static:\n"
		 "  records:\n"
		 "    - {name: legacy.corp.internal, a: [192.0.2.10]}\n"
		 "    - {name: old.prod.svc.cluster.local, a: [10.0.0.5]}\n",
		 autopath ? "true" : "false", resolv_conf);
	return config_of(yaml);
}

static void publish(bool autopath, bool with_cache)
{
	char err[CONFIG_ERR_MAX];
	struct config *cfg = load_config(autopath);
	struct query_sources *s = query_sources_build(cfg, &(struct query_names){.cluster = cluster},
						      with_cache ? cache : NULL, err, sizeof err);

	config_free(cfg);
	assert_non_null(s);
	query_sources_publish(s);
}

/*
 * Namespaces prod and team; team/api (ClusterIP), prod/web (ClusterIP),
 * prod/ext (ExternalName to www.example.org); one client pod in each
 * namespace; the node searches corp.internal and example.org.
 */
static int setup(void **state)
{
	struct cache_config cc = {.max_bytes = 1 << 20, .max_ttl = 86400,
				  .negative_max_ttl = 3600, .servfail_ttl = 5};
	struct config *cfg;
	char err[CONFIG_ERR_MAX];

	(void)state;
	urcu_memb_register_thread();
	ask_resolv_conf(resolv_conf, "autopath",
			"nameserver 192.0.2.53\nsearch corp.internal example.org\n");

	cfg = load_config(true);
	cluster = cluster_new(cfg, err, sizeof err);
	config_free(cfg);
	assert_non_null(cluster);
	UPSERT(cluster_namespace_upsert, cluster,
	       "{\"kind\":\"Namespace\",\"metadata\":{\"name\":\"prod\"}}");
	UPSERT(cluster_namespace_upsert, cluster,
	       "{\"kind\":\"Namespace\",\"metadata\":{\"name\":\"team\"}}");
	UPSERT(cluster_service_upsert, cluster,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"api\",\"namespace\":\"team\"},"
	       "\"spec\":{\"clusterIP\":\"10.96.0.9\",\"clusterIPs\":[\"10.96.0.9\"]}}");
	UPSERT(cluster_service_upsert, cluster,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"web\",\"namespace\":\"prod\"},"
	       "\"spec\":{\"clusterIP\":\"10.96.0.8\",\"clusterIPs\":[\"10.96.0.8\"]}}");
	UPSERT(cluster_service_upsert, cluster,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"ext\",\"namespace\":\"prod\"},"
	       "\"spec\":{\"type\":\"ExternalName\",\"externalName\":\"www.example.org\"}}");
	add_node_pod(cluster, "prod", "client", prod_client);
	add_node_pod(cluster, "team", "client", team_client);
	cluster_set_synced(cluster);
	cache = cache_new(&cc);
	assert_non_null(cache);
	publish(true, true);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	query_sources_retire();
	cache_free(cache);
	cluster_free(cluster);
	unlink(resolv_conf);
	urcu_memb_unregister_thread();
	return 0;
}

/* ---- asking ----------------------------------------------------------------- */

static struct query_ask request;

/* Ask name/qtype from a client at ip (NULL: no address) over UDP. */
static void ask(const char *name, uint16_t qtype, const char *ip, struct asked *o)
{
	ask_path(name, qtype, ip, NOW, &request, o);
}

static const char *owner(const struct asked *o, size_t i)
{
	return o->r.v->rr[i].owner;
}

/* The concatenated names in the request's chain, as one dotted list. */
static const char *chain_text(void)
{
	static char text[2048];
	size_t used = 0;

	text[0] = '\0';
	for (size_t pos = 0; pos < request.chain_len; pos += dns_name_len(request.chain + pos)) {
		int n = dns_name_to_text(request.chain + pos, text + used, sizeof text - used - 1);
		assert_true(n > 0);
		used += (size_t)n;
		text[used++] = ' ';
		text[used] = '\0';
	}
	return text;
}

/* An upstream's NXDOMAIN for name (with example.org's SOA) in the cache. */
static void cache_nxdomain(const char *name, uint16_t qtype)
{
	static const uint8_t soa_tail[20] = {0, 0, 0, 1, 0, 0, 14, 16, 0, 0, 3, 132,
					     0, 9, 58, 128, 0, 0, 1, 44};
	uint8_t msg[512], rdata[DNS_MAX_NAME * 2 + 20];
	struct dns_query q;
	struct dns_writer w;
	size_t n = 0;

	make_query(&q, name, qtype);
	n += (size_t)dns_name_from_text("ns.example.org", rdata);
	n += (size_t)dns_name_from_text("hostmaster.example.org", rdata + n);
	memcpy(rdata + n, soa_tail, sizeof soa_tail);
	n += sizeof soa_tail;
	dns_response_begin(&w, msg, sizeof msg, &q, DNS_R_NXDOMAIN);
	dns_response_add_rr(&w, DNS_SEC_AUTHORITY, wire("example.org"), DNS_T_SOA, DNS_C_IN, 300,
			    rdata, (uint16_t)n);
	assert_int_equal(cache_insert(cache, &q, msg, dns_response_finish(&w, 0), NOW), 0);
}

static void assert_cname(const struct asked *o, const char *from, const char *to)
{
	assert_true(o->r.v->an >= 1);
	assert_int_equal(o->r.v->rr[0].type, DNS_T_CNAME);
	assert_name_equal(owner(o, 0), from);
	assert_int_equal(o->r.v->rr[0].ttl, 5);
	assert_name_equal(o->r.v->rr[0].target, to);
}

static void assert_original_nxdomain(const struct asked *o)
{
	assert_int_equal(o->upstream, QUERY_UPSTREAM_NONE);
	assert_int_equal(o->r.v->flags & 0xf, DNS_R_NXDOMAIN);
	assert_true(o->r.v->flags & DNS_F_AA);
	assert_int_equal(o->r.v->an, 0);
	assert_int_equal(o->r.v->ns, 1);
	assert_int_equal(o->r.v->rr[0].type, DNS_T_SOA);
	assert_name_equal(owner(o, 0), "cluster.local.");
}

/* ---- local candidates ------------------------------------------------------- */

static void test_service_of_another_namespace_answers_with_a_cname(void **state)
{
	struct asked o;
	char ip[48];

	(void)state;
	ask("API.team.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_int_equal(o.r.v->flags & 0xf, DNS_R_NOERROR);
	assert_true(o.r.v->flags & DNS_F_AA);
	assert_int_equal(o.r.v->an, 2);
	assert_cname(&o, "api.team.prod.svc.cluster.local.", "api.team.svc.cluster.local.");
	assert_int_equal(o.r.v->rr[1].type, DNS_T_A);
	assert_name_equal(owner(&o, 1), "api.team.svc.cluster.local.");
	inet_ntop(AF_INET, reply_rdata(&o.r, 1), ip, sizeof ip);
	assert_string_equal(ip, "10.96.0.9");
	assert_memory_equal(o.r.buf + DNS_HEADER_LEN, "\3API", 4); /* the client's question */
	assert_int_equal(o.source, QUERY_SOURCE_CLUSTER);
	assert_int_equal(o.stats.autopath, 1);

	/* the candidate exists without the type: the CNAME and its NODATA */
	ask("api.team.prod.svc.cluster.local", DNS_T_AAAA, prod_client, &o);
	assert_int_equal(o.r.v->flags & 0xf, DNS_R_NOERROR);
	assert_int_equal(o.r.v->an, 1);
	assert_cname(&o, "api.team.prod.svc.cluster.local.", "api.team.svc.cluster.local.");
	assert_int_equal(o.r.v->ns, 1);
	assert_int_equal(o.r.v->rr[1].type, DNS_T_SOA);
}

static void test_each_cluster_suffix_and_node_domain_is_tried(void **state)
{
	struct asked o;

	(void)state;
	/* <zone>, the third suffix */
	ask("dns-version.prod.svc.cluster.local", DNS_T_TXT, prod_client, &o);
	assert_cname(&o, "dns-version.prod.svc.cluster.local.", "dns-version.cluster.local.");
	assert_int_equal(o.r.v->rr[1].type, DNS_T_TXT);
	/* a node search domain whose name is a static record */
	ask("legacy.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_cname(&o, "legacy.prod.svc.cluster.local.", "legacy.corp.internal.");
	assert_int_equal(o.r.v->rr[1].type, DNS_T_A);
	assert_int_equal(o.source, QUERY_SOURCE_STATIC);
	/* the bare name, under the zone (a 4-dot name asked with ndots:5) */
	ask("web.prod.svc.cluster.local.team.svc.cluster.local", DNS_T_A, team_client, &o);
	assert_int_equal(o.upstream, QUERY_UPSTREAM_ASK); /* the node's domains come first */
	cache_nxdomain("web.prod.svc.cluster.local.corp.internal", DNS_T_A);
	cache_nxdomain("web.prod.svc.cluster.local.example.org", DNS_T_A);
	ask("web.prod.svc.cluster.local.team.svc.cluster.local", DNS_T_A, team_client, &o);
	assert_int_equal(o.upstream, QUERY_UPSTREAM_NONE);
	assert_cname(&o, "web.prod.svc.cluster.local.team.svc.cluster.local.",
		     "web.prod.svc.cluster.local.");
	assert_int_equal(o.r.v->an, 2);
}

static void test_existing_names_unknown_clients_and_other_namespaces_are_left_alone(void **state)
{
	struct asked o;

	(void)state;
	ask("web.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_int_equal(o.r.v->an, 1);
	assert_int_equal(o.r.v->rr[0].type, DNS_T_A);
	assert_int_equal(o.stats.autopath, 0);
	ask("api.team.prod.svc.cluster.local", DNS_T_A, "10.1.0.99", &o);
	assert_original_nxdomain(&o);
	ask("api.team.prod.svc.cluster.local", DNS_T_A, NULL, &o);
	assert_original_nxdomain(&o);
	ask("api.team.prod.svc.cluster.local", DNS_T_A, team_client, &o); /* not team's first */
	assert_original_nxdomain(&o);
	assert_int_equal(o.stats.autopath, 0);
}

static void test_autopath_off_answers_nxdomain(void **state)
{
	struct asked o;

	publish(false, true);
	ask("api.team.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_original_nxdomain(&o);
	assert_int_equal(o.stats.autopath, 0);
	teardown(state);
	setup(state);
}

static void test_external_name_candidate_is_chased(void **state)
{
	struct asked o;

	(void)state;
	memset(&request, 0, sizeof request);
	ask("ext.prod.team.svc.cluster.local", DNS_T_A, team_client, &o);
	assert_int_equal(o.upstream, QUERY_UPSTREAM_ASK);
	assert_false(request.search);
	assert_string_equal(chain_text(), "ext.prod.svc.cluster.local. www.example.org. ");
	assert_int_equal(request.chain_ttl, 5);
	assert_int_equal(o.stats.autopath, 1);
}

/* ---- external candidates ---------------------------------------------------- */

static void test_external_candidates_go_to_the_resolver_in_one_request(void **state)
{
	struct asked o;

	(void)state;
	memset(&request, 0, sizeof request);
	ask("www.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_int_equal(o.upstream, QUERY_UPSTREAM_ASK);
	assert_int_equal(o.r.len, 0);
	assert_int_equal(o.source, QUERY_SOURCE_UPSTREAM);
	assert_int_equal(o.stats.autopath, 1);
	assert_true(request.search);
	assert_int_equal(request.chain_ttl, 5);
	assert_string_equal(chain_text(), "www.corp.internal. www.example.org. www. ");
	assert_memory_equal(request.q.qname, wire("www.prod.svc.cluster.local"),
			    request.q.qname_len);

	/* the original NXDOMAIN rides along: the resolver's answer if none exists */
	struct dns_writer w;
	struct reply r;
	static const uint16_t counts[3] = {0, 1, 0};
	assert_true(request.nxdomain_len > 0 && request.nxdomain_len <= QUERY_NXDOMAIN_MAX);
	dns_response_begin(&w, r.buf, sizeof r.buf, &request.q, DNS_R_NOERROR);
	assert_true(dns_response_append_raw(&w, request.nxdomain, request.nxdomain_len, counts));
	dns_response_set_rcode(&w, DNS_R_NXDOMAIN);
	r.len = dns_response_finish(&w, 0);
	read_reply(&r);
	assert_int_equal(r.v->rr[0].type, DNS_T_SOA);
	assert_name_equal(r.v->rr[0].owner, "cluster.local.");

	/* candidates the cache knows are NXDOMAIN are left out */
	cache_nxdomain("www.corp.internal", DNS_T_A);
	ask("www.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_int_equal(o.upstream, QUERY_UPSTREAM_ASK);
	assert_string_equal(chain_text(), "www.example.org. www. ");
}

static void test_joined_answer_in_the_cache_is_served(void **state)
{
	struct asked o;
	struct dns_query q;
	struct dns_writer w;
	uint8_t msg[512], target[DNS_MAX_NAME];
	static const uint8_t addr[4] = {192, 0, 2, 1};
	int n = dns_name_from_text("site.example.org", target);

	(void)state;
	make_query(&q, "site.prod.svc.cluster.local", DNS_T_A);
	dns_response_begin(&w, msg, sizeof msg, &q, DNS_R_NOERROR);
	dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_CNAME, DNS_C_IN, 5, target,
			    (uint16_t)n);
	dns_response_add_rr(&w, DNS_SEC_ANSWER, target, DNS_T_A, DNS_C_IN, 300, addr, 4);
	assert_int_equal(cache_insert(cache, &q, msg, dns_response_finish(&w, 0), NOW), 0);

	ask("site.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_int_equal(o.upstream, QUERY_UPSTREAM_NONE);
	assert_int_equal(o.source, QUERY_SOURCE_CACHE);
	assert_cname(&o, "site.prod.svc.cluster.local.", "site.example.org.");
	assert_int_equal(o.r.v->an, 2);
}

static void test_every_candidate_nxdomain_keeps_the_original_answer(void **state)
{
	struct asked o;

	(void)state;
	cache_nxdomain("nothing.corp.internal", DNS_T_A);
	cache_nxdomain("nothing.example.org", DNS_T_A);
	cache_nxdomain("nothing", DNS_T_A);
	ask("nothing.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_original_nxdomain(&o);
	assert_int_equal(o.source, QUERY_SOURCE_CLUSTER);
	/* other types are other questions: those still go to the resolver */
	ask("nothing.prod.svc.cluster.local", DNS_T_AAAA, prod_client, &o);
	assert_int_equal(o.upstream, QUERY_UPSTREAM_ASK);
}

static void test_without_an_upstream_path_external_candidates_end_the_walk(void **state)
{
	struct asked o;

	publish(true, false);
	ask("www.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_original_nxdomain(&o);
	ask("api.team.prod.svc.cluster.local", DNS_T_A, prod_client, &o); /* local: still found */
	assert_cname(&o, "api.team.prod.svc.cluster.local.", "api.team.svc.cluster.local.");
	teardown(state);
	setup(state);
}

/* ---- the hot-path promise --------------------------------------------------- */

static void test_the_walk_allocates_nothing_and_takes_no_mutex(void **state)
{
	static const struct {
		const char *name;
		uint16_t type;
		const char *client;
	} cases[] = {
		{"api.team.prod.svc.cluster.local", DNS_T_A, "10.1.0.50"},   /* local */
		{"api.team.prod.svc.cluster.local", DNS_T_AAAA, "10.1.0.50"},/* local NODATA */
		{"legacy.prod.svc.cluster.local", DNS_T_A, "10.1.0.50"},     /* static */
		{"www.prod.svc.cluster.local", DNS_T_A, "10.1.0.50"},        /* upstream */
		{"nothing.prod.svc.cluster.local", DNS_T_A, "10.1.0.50"},    /* all NXDOMAIN */
		{"ext.prod.team.svc.cluster.local", DNS_T_A, "10.1.0.51"},   /* chase */
		{"api.team.prod.svc.cluster.local", DNS_T_A, "10.1.0.99"},   /* unknown client */
	};
	struct asked o;

	(void)state;
	if (!alloc_counting_works()) {
		print_message("not linked with -Wl,--wrap=malloc,...: see the Makefile\n");
		skip();
	}
	cache_nxdomain("nothing.corp.internal", DNS_T_A);
	cache_nxdomain("nothing.example.org", DNS_T_A);
	cache_nxdomain("nothing", DNS_T_A);
	urcu_memb_barrier(); /* the setup's deferred frees run now, not while counting */
	for (int round = 0; round < 100; round++) {
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			counting = true;
			ask(cases[i].name, cases[i].type, cases[i].client, &o);
			counting = false;
		}
	}
	assert_int_equal(forbidden_calls, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_service_of_another_namespace_answers_with_a_cname),
		cmocka_unit_test(test_each_cluster_suffix_and_node_domain_is_tried),
		cmocka_unit_test(test_existing_names_unknown_clients_and_other_namespaces_are_left_alone),
		cmocka_unit_test(test_autopath_off_answers_nxdomain),
		cmocka_unit_test(test_external_name_candidate_is_chased),
		cmocka_unit_test(test_external_candidates_go_to_the_resolver_in_one_request),
		cmocka_unit_test(test_joined_answer_in_the_cache_is_served),
		cmocka_unit_test(test_every_candidate_nxdomain_keeps_the_original_answer),
		cmocka_unit_test(test_without_an_upstream_path_external_candidates_end_the_walk),
		cmocka_unit_test(test_the_walk_allocates_nothing_and_takes_no_mutex),
	};
	return cmocka_run_group_tests_name("autopath", tests, setup, teardown);
}
