/*
 * Unit tests for the clusterset zone (Multi-Cluster Services, KEP-1645;
 * CoreDNS's kubernetes plugin with `multicluster`): a cluster table made by
 * cluster_new_clusterset and fed ServiceImports (multicluster.x-k8s.io/
 * v1alpha1) and EndpointSlices labelled multicluster.kubernetes.io/
 * service-name and source-cluster, as the API server returns them.
 * ClusterSetIP imports answer with spec.ips and SRV for their ports;
 * headless ones from their slices, with endpoint names under each source
 * cluster; NXDOMAIN/NODATA carry the zone's SOA; no reverse names, no pod
 * names; the query pipeline asks it after the cluster zone; answering
 * allocates nothing and takes no mutex (linked with --wrap).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <urcu/urcu-memb.h>

#include "alloc_count.h"
#include "reply.h"
#include "cluster_fixture.h"
#include "cluster/objects.h"
#include "query/query.h"

static const char config_yaml[] =
	"cluster: {domain: cluster.local, ttl: 5s}\n"
	"multicluster: {enabled: true, domain: clusterset.local}\n";

static struct cluster *set;

static void import(const char *ns, const char *name, const char *spec)
{
	char json[2048];

	snprintf(json, sizeof json,
		 "{\"apiVersion\":\"multicluster.x-k8s.io/v1alpha1\",\"kind\":\"ServiceImport\","
		 "\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"resourceVersion\":\"9\"},"
		 "\"spec\":{%s},\"status\":{\"clusters\":[{\"cluster\":\"east\"}]}}", name, ns, spec);
	UPSERT(cluster_service_upsert, set, json);
}

/* An imported EndpointSlice of service in ns from cluster (NULL: no label). */
static void imported_slice(const char *ns, const char *service, const char *name,
			   const char *cluster, const char *endpoints, const char *ports)
{
	char json[4096];

	snprintf(json, sizeof json,
		 "{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\","
		 "\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"labels\":{"
		 "\"endpointslice.kubernetes.io/managed-by\":\"mcs-controller\","
		 "\"multicluster.kubernetes.io/service-name\":\"%s\"%s%s%s}},"
		 "\"addressType\":\"IPv4\",\"endpoints\":[%s],\"ports\":[%s]}",
		 name, ns, service, cluster ? ",\"multicluster.kubernetes.io/source-cluster\":\"" : "",
		 cluster ? cluster : "", cluster ? "\"" : "", endpoints, ports);
	UPSERT(cluster_slice_upsert, set, json);
}

#define EP(ip, host, ready)                                                             \
	"{\"addresses\":[\"" ip "\"],\"conditions\":{\"ready\":" ready "}" host "}"
#define HOST(h) ",\"hostname\":\"" h "\""

static int setup(void **state)
{
	char err[CONFIG_ERR_MAX];
	struct config *cfg;

	(void)state;
	urcu_memb_register_thread();
	cfg = config_of(config_yaml);
	set = cluster_new_clusterset(cfg, err, sizeof err);
	config_free(cfg);
	assert_non_null(set);
	UPSERT(cluster_namespace_upsert, set, "{\"metadata\":{\"name\":\"shop\"}}");
	import("shop", "db", "\"type\":\"ClusterSetIP\",\"ips\":[\"10.100.0.5\",\"fd00:100::5\"],"
	       "\"ports\":[{\"name\":\"mysql\",\"protocol\":\"TCP\",\"port\":3306}],"
	       "\"sessionAffinity\":\"None\"");
	import("shop", "web", "\"type\":\"Headless\","
	       "\"ports\":[{\"name\":\"http\",\"protocol\":\"TCP\",\"port\":8080}]");
	imported_slice("shop", "web", "web-east", "east",
		       EP("10.1.0.1", HOST("web-0"), "true") "," EP("10.1.0.2", "", "true") ","
		       EP("10.1.0.3", HOST("web-2"), "false"),
		       "{\"name\":\"http\",\"protocol\":\"TCP\",\"port\":8080}");
	imported_slice("shop", "web", "web-west", "west", EP("10.2.0.1", HOST("web-0"), "true"),
		       "{\"name\":\"http\",\"protocol\":\"TCP\",\"port\":8080}");
	/* not the clusterset's: a plain Service's slice, and one with no source cluster */
	UPSERT(cluster_slice_upsert, set,
	       "{\"metadata\":{\"name\":\"web-x\",\"namespace\":\"shop\",\"labels\":"
	       "{\"kubernetes.io/service-name\":\"web\"}},\"addressType\":\"IPv4\","
	       "\"endpoints\":[{\"addresses\":[\"10.9.0.9\"]}]}");
	imported_slice("shop", "web", "web-nowhere", NULL, EP("10.9.0.8", "", "true"), "");
	*state = set;
	return 0;
}

static int teardown(void **state)
{
	return free_cluster_and_unregister(state);
}

static const char *addresses(struct reply *r)
{
	static char text[512];
	size_t used = 0;

	text[0] = '\0';
	for (int i = 0; i < r->v->an; i++) {
		int type = r->v->rr[i].type;
		if (type != DNS_T_A && type != DNS_T_AAAA)
			continue;
		if (used)
			text[used++] = ' ';
		inet_ntop(type == DNS_T_A ? AF_INET : AF_INET6, reply_rdata(r, i), text + used,
			  (socklen_t)(sizeof text - used));
		used += strlen(text + used);
	}
	return text;
}

static void test_unsynced_then_answered(void **state)
{
	struct reply r;

	(void)state;
	assert_int_equal(ask_for(set, "db.shop.svc.clusterset.local", DNS_T_A, 512, &r),
			 CLUSTER_UNSYNCED);
	cluster_set_synced(set);
	assert_int_equal(ask_for(set, "db.shop.svc.clusterset.local", DNS_T_A, 512, &r),
			 CLUSTER_ANSWERED);
	assert_true(r.v->flags & DNS_F_AA);
	assert_string_equal(addresses(&r), "10.100.0.5");
	assert_int_equal(r.v->rr[0].ttl, 5);
	ask_for(set, "db.shop.svc.clusterset.local", DNS_T_AAAA, 512, &r);
	assert_string_equal(addresses(&r), "fd00:100::5");
}

static void test_clustersetip_srv_and_negative_answers(void **state)
{
	struct reply r;

	(void)state;
	cluster_set_synced(set);
	ask_for(set, "_mysql._tcp.db.shop.svc.clusterset.local", DNS_T_SRV, 512, &r);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(rd16(reply_rdata(&r, 0) + 4), 3306);
	ask_for(set, "db.shop.svc.clusterset.local", DNS_T_SRV, 512, &r);
	assert_int_equal(r.v->an, 1);
	/* NXDOMAIN and NODATA with the zone's SOA */
	ask_for(set, "nope.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	assert_int_equal(r.v->ns, 1);
	assert_name_equal(r.v->rr[0].owner, "clusterset.local.");
	ask_for(set, "db.shop.svc.clusterset.local", DNS_T_TXT, 512, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 0);
	assert_int_equal(r.v->rr[0].type, DNS_T_SOA);
	ask_for(set, "shop.svc.clusterset.local", DNS_T_A, 512, &r); /* the namespace: NODATA */
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	ask_for(set, "clusterset.local", DNS_T_SOA, 512, &r);
	assert_int_equal(r.v->an, 1);
	/* no pod names, no reverse names */
	ask_for(set, "10-1-0-1.shop.pod.clusterset.local", DNS_T_A, 512, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	assert_int_equal(ask_for(set, "5.0.100.10.in-addr.arpa", DNS_T_PTR, 512, &r),
			 CLUSTER_NOT_LOCAL);
}

static void test_headless_imports_name_endpoints_under_their_cluster(void **state)
{
	struct reply r;

	(void)state;
	cluster_set_synced(set);
	ask_for(set, "web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	/* ready ones, every cluster (in slice order: entries without a hostname first) */
	assert_string_equal(addresses(&r), "10.1.0.2 10.1.0.1 10.2.0.1");
	ask_for(set, "web-0.east.web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_string_equal(addresses(&r), "10.1.0.1");
	ask_for(set, "web-0.west.web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_string_equal(addresses(&r), "10.2.0.1");
	ask_for(set, "10-1-0-2.east.web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_string_equal(addresses(&r), "10.1.0.2");
	ask_for(set, "10-1-0-2.west.web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);               /* not from west */
	ask_for(set, "web-2.east.web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);               /* not ready */
	ask_for(set, "web-0.web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);               /* no cluster label */
	ask_for(set, "10-9-0-8.web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);               /* a slice with no cluster */
	/* SRV: one per target, named under its cluster, addresses in the additional section */
	ask_for(set, "_http._tcp.web.shop.svc.clusterset.local", DNS_T_SRV, 512, &r);
	assert_int_equal(r.v->an, 3);
	bool east = false, west = false;
	for (int i = 0; i < r.v->an; i++) {
		char target[256];
		const uint8_t *rd = reply_rdata(&r, i) + 6;
		assert_true(dns_name_to_text(rd, target, sizeof target) > 0);
		east |= strcmp(target, "web-0.east.web.shop.svc.clusterset.local.") == 0;
		west |= strcmp(target, "web-0.west.web.shop.svc.clusterset.local.") == 0;
	}
	assert_true(east && west);
	assert_int_equal(r.v->ar, 3);
	/* the slice goes: its cluster's names go */
	cluster_slice_remove(set, "shop", "web-west");
	ask_for(set, "web-0.west.web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	cluster_service_remove(set, "shop", "web");
	ask_for(set, "web.shop.svc.clusterset.local", DNS_T_A, 512, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
}

/* Through query_handle: the cluster zone's table first, then the clusterset's. */
static void test_the_pipeline_asks_the_clusterset_after_the_cluster_zone(void **state)
{
	char err[CONFIG_ERR_MAX];
	struct config *cfg;
	struct cluster *zone;
	uint8_t in[512], out[1024];
	struct reply r;
	struct query_stats st = {0};

	(void)state;
	cluster_set_synced(set);
	cfg = config_of(config_yaml);
	zone = cluster_new(cfg, err, sizeof err);
	assert_non_null(zone);
	cluster_set_synced(zone);
	struct query_sources *s = query_sources_build(
		cfg, &(struct query_names){.cluster = zone, .clusterset = set}, NULL, err, sizeof err);
	config_free(cfg);
	assert_non_null(s);
	query_sources_publish(s);
	for (int round = 0; round < 2; round++) {
		struct dns_query q;
		struct dns_writer w;
		make_query(&q, round ? "cluster.local" : "db.shop.svc.clusterset.local",
			   round ? DNS_T_SOA : DNS_T_A);
		dns_response_begin(&w, in, sizeof in, &q, DNS_R_NOERROR);
		size_t inlen = dns_response_finish(&w, 512);
		in[2] &= (uint8_t)~(DNS_F_QR >> 8); /* a query, not a reply */
		struct query_ctx ctx = {.transport = QUERY_UDP, .stats = &st};
		urcu_memb_read_lock();
		r.len = query_handle(in, inlen, out, sizeof out, &ctx);
		urcu_memb_read_unlock();
		memcpy(r.buf, out, r.len);
		read_reply(&r);
		assert_int_equal(ctx.source, QUERY_SOURCE_CLUSTER);
		assert_int_equal(r.v->an, 1);
	}
	query_sources_retire();
	cluster_free(zone);
}

static void test_answering_allocates_nothing_and_takes_no_mutex(void **state)
{
	static const char *const names[] = {
		"db.shop.svc.clusterset.local", "web.shop.svc.clusterset.local",
		"web-0.east.web.shop.svc.clusterset.local", "_http._tcp.web.shop.svc.clusterset.local",
		"10-1-0-2.east.web.shop.svc.clusterset.local", "nope.shop.svc.clusterset.local",
	};
	struct reply r;
	struct dns_query q;

	(void)state;
	if (!alloc_counting_works()) {
		print_message("not linked with -Wl,--wrap=malloc,...: see the Makefile\n");
		skip();
	}
	cluster_set_synced(set);
	urcu_memb_barrier();
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		for (uint16_t t = 0; t < 3; t++) {
			make_query(&q, names[i], t == 0 ? DNS_T_A : t == 1 ? DNS_T_SRV : DNS_T_AAAA);
			counting = true;
			answer_query(set, &q, &r, 4096);
			counting = false;
		}
	assert_int_equal(forbidden_calls, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_unsynced_then_answered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clustersetip_srv_and_negative_answers, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_headless_imports_name_endpoints_under_their_cluster,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_the_pipeline_asks_the_clusterset_after_the_cluster_zone,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_answering_allocates_nothing_and_takes_no_mutex,
						setup, teardown),
	};
	return cmocka_run_group_tests_name("multicluster", tests, NULL, NULL);
}
