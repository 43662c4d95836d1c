/*
 * Unit tests for cluster/: Kubernetes objects (real JSON shapes) in, the
 * specification's records out, read back through the codec: ClusterIP and
 * headless Services, SRV with additionals, PTR, ExternalName, pods,
 * NXDOMAIN vs NODATA, namespaces, updates and deletions, the sync gate,
 * autopath's clients (this node's pod addresses -> namespace), and
 * readers on other threads while the writer replaces what they read (the
 * test `make tsan` runs for the table).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <json-c/json.h>
#include <urcu/urcu-memb.h>

#include "address.h"
#include "alloc_count.h"
#include "cluster/cluster.h"
#include "cluster/objects.h"
#include "cluster/internal.h"
#include "config/config.h"
#include "reply.h"
#include "cluster_fixture.h"
#include "readers.h"
#include "stderr_capture.h"

static struct cluster *make_cluster(const char *pods_mode)
{
	char yaml[256];

	snprintf(yaml, sizeof yaml, "cluster: {domain: cluster.local, ttl: 5s, pods: %s}\n", pods_mode);
	return make_cluster_from(yaml);
}

static void add_namespace(struct cluster *c, const char *name)
{
	char json[256];

	snprintf(json, sizeof json, "{\"kind\":\"Namespace\",\"metadata\":{\"name\":\"%s\"}}", name);
	UPSERT(cluster_namespace_upsert, c, json);
}

static const char svc_db[] =
	"{\"kind\":\"Service\",\"metadata\":{\"name\":\"db\",\"namespace\":\"prod\"},"
	"\"spec\":{\"type\":\"ClusterIP\",\"clusterIP\":\"10.96.0.5\","
	"\"clusterIPs\":[\"10.96.0.5\",\"fd00::5\"],\"ipFamilies\":[\"IPv4\",\"IPv6\"],"
	"\"ports\":[{\"name\":\"mysql\",\"port\":3306,\"protocol\":\"TCP\",\"targetPort\":3306},"
	"{\"port\":9999,\"protocol\":\"TCP\"}]}}";

static const char slice_db[] =
	"{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\","
	"\"metadata\":{\"name\":\"db-abc\",\"namespace\":\"prod\","
	"\"labels\":{\"kubernetes.io/service-name\":\"db\"}},"
	"\"endpoints\":[{\"addresses\":[\"10.1.0.7\"],\"conditions\":{\"ready\":true},"
	"\"targetRef\":{\"kind\":\"Pod\",\"namespace\":\"prod\",\"name\":\"db-0\"}}],"
	"\"ports\":[{\"name\":\"mysql\",\"port\":3306,\"protocol\":\"TCP\"}]}";

static const char svc_web[] =
	"{\"kind\":\"Service\",\"metadata\":{\"name\":\"web\",\"namespace\":\"prod\"},"
	"\"spec\":{\"clusterIP\":\"None\",\"clusterIPs\":[\"None\"],"
	"\"ports\":[{\"name\":\"http\",\"port\":80,\"protocol\":\"TCP\"}]}}";

static const char slice_web[] =
	"{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\","
	"\"metadata\":{\"name\":\"web-1\",\"namespace\":\"prod\","
	"\"labels\":{\"kubernetes.io/service-name\":\"web\"}},"
	"\"endpoints\":["
	"{\"addresses\":[\"10.1.0.1\"],\"conditions\":{\"ready\":true},\"hostname\":\"web-0\"},"
	"{\"addresses\":[\"10.1.0.2\"],\"conditions\":{\"ready\":true}},"
	"{\"addresses\":[\"10.1.0.3\"],\"conditions\":{\"ready\":false},\"hostname\":\"web-2\"}],"
	"\"ports\":[{\"name\":\"http\",\"port\":8080,\"protocol\":\"TCP\"}]}";

/* prod with db (ClusterIP, dual-stack) and web (headless), synced. */
static void load_prod(struct cluster *c)
{
	add_namespace(c, "prod");
	UPSERT(cluster_service_upsert, c, svc_db);
	UPSERT(cluster_slice_upsert, c, slice_db);
	UPSERT(cluster_service_upsert, c, svc_web);
	UPSERT(cluster_slice_upsert, c, slice_web);
	cluster_set_synced(c);
}

static int setup(void **state)
{
	struct cluster *c;

	urcu_memb_register_thread();
	c = make_cluster("insecure");
	load_prod(c);
	*state = c;
	return 0;
}

/* Asked with the EDNS payload size clients are told to use (1232). */
static enum cluster_result ask(struct cluster *c, const char *name, uint16_t qtype,
			       struct reply *r)
{
	return ask_for(c, name, qtype, 1232, r);
}

/* Addresses of the given type in the answer section, as text, sorted by position. */
static size_t answer_addresses(const struct reply *r, uint16_t type, char out[][48], size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < r->v->an && n < max; i++)
		if (r->v->rr[i].type == type)
			inet_ntop(type == DNS_T_A ? AF_INET : AF_INET6, reply_rdata(r, i), out[n++], 48);
	return n;
}

static bool has_answer_address(const struct reply *r, uint16_t type, const char *ip)
{
	char got[64][48];
	size_t n = answer_addresses(r, type, got, 64);

	for (size_t i = 0; i < n; i++)
		if (strcmp(got[i], ip) == 0)
			return true;
	return false;
}

static void assert_nxdomain(struct cluster *c, const char *name)
{
	struct reply r;

	assert_int_equal(ask(c, name, DNS_T_A, &r), CLUSTER_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	assert_int_equal(r.v->an, 0);
	assert_int_equal(r.v->ns, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_SOA);
}

static void assert_nodata(struct cluster *c, const char *name, uint16_t qtype)
{
	struct reply r;

	assert_int_equal(ask(c, name, qtype, &r), CLUSTER_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 0);
	assert_int_equal(r.v->ns, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_SOA);
}

static void test_cluster_ip_service_has_every_cluster_ip(void **state)
{
	struct reply r;

	assert_int_equal(ask(*state, "db.prod.svc.cluster.local", DNS_T_A, &r), CLUSTER_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_true(r.v->flags & DNS_F_AA);
	assert_int_equal(r.v->an, 1);
	assert_true(has_answer_address(&r, DNS_T_A, "10.96.0.5"));
	assert_int_equal(r.v->rr[0].ttl, 5);
	ask(*state, "DB.Prod.svc.cluster.local", DNS_T_AAAA, &r);
	assert_int_equal(r.v->an, 1);
	assert_true(has_answer_address(&r, DNS_T_AAAA, "fd00::5"));
}

/* RFC 8482: a small ANY question must not draw every record: one RRset. */
static void test_any_gets_one_rrset(void **state)
{
	struct reply r;

	assert_int_equal(ask(*state, "db.prod.svc.cluster.local", DNS_T_ANY, &r),
			 CLUSTER_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 1); /* the service has an A and an AAAA */
	assert_true(r.v->rr[0].type == DNS_T_A || r.v->rr[0].type == DNS_T_AAAA);
	assert_int_equal(r.v->ar, 0);
}

static void test_named_ports_get_srv_with_target_addresses(void **state)
{
	struct reply r;

	ask(*state, "_mysql._tcp.db.prod.svc.cluster.local", DNS_T_SRV, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_SRV);
	assert_int_equal(rd16(reply_rdata(&r, 0) + 4), 3306);
	assert_memory_equal(reply_rdata(&r, 0) + 6, wire("db.prod.svc.cluster.local"),
			    dns_name_len(wire("db.prod.svc.cluster.local")));
	assert_int_equal(r.v->ar, 2); /* A and AAAA of the target */
	assert_nodata(*state, "_tcp.db.prod.svc.cluster.local", DNS_T_SRV);
	assert_nxdomain(*state, "_http._tcp.db.prod.svc.cluster.local");
}

static void test_headless_service_lists_ready_endpoints(void **state)
{
	struct reply r;

	ask(*state, "web.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(r.v->an, 2);
	assert_true(has_answer_address(&r, DNS_T_A, "10.1.0.1"));
	assert_true(has_answer_address(&r, DNS_T_A, "10.1.0.2"));
	ask(*state, "web-0.web.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(r.v->an, 1);
	assert_true(has_answer_address(&r, DNS_T_A, "10.1.0.1"));
	ask(*state, "10-1-0-2.web.prod.svc.cluster.local", DNS_T_A, &r);
	assert_true(has_answer_address(&r, DNS_T_A, "10.1.0.2"));
	assert_nxdomain(*state, "web-2.web.prod.svc.cluster.local"); /* not ready */
}

static void test_headless_srv_names_each_endpoint(void **state)
{
	struct reply r;

	ask(*state, "_http._tcp.web.prod.svc.cluster.local", DNS_T_SRV, &r);
	assert_int_equal(r.v->an, 2);
	assert_int_equal(rd16(reply_rdata(&r, 0) + 4), 8080);
	assert_int_equal(r.v->ar, 2);
}

/* Kubernetes checks endpoint hostnames, but one that is no DNS label (from
 * a broken or hostile API server) must not leave records without a name:
 * such an endpoint is named by its dashed IP, as one without a hostname. */
static void test_endpoint_hostname_that_is_no_label_falls_back_to_the_dashed_ip(void **state)
{
	struct cluster *c = *state;
	struct reply r;
	uint8_t target[DNS_MAX_NAME];
	size_t pos;

	UPSERT(cluster_slice_upsert, c,
	       "{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\","
	       "\"metadata\":{\"name\":\"web-2\",\"namespace\":\"prod\","
	       "\"labels\":{\"kubernetes.io/service-name\":\"web\"}},"
	       "\"endpoints\":[{\"addresses\":[\"10.1.0.9\"],\"conditions\":{\"ready\":true},"
	       "\"hostname\":\"web 9!\"}],"
	       "\"ports\":[{\"name\":\"http\",\"port\":8080,\"protocol\":\"TCP\"}]}");
	ask(c, "9.0.1.10.in-addr.arpa", DNS_T_PTR, &r);
	assert_int_equal(r.v->an, 1);
	assert_name_equal(r.v->rr[0].target, "10-1-0-9.web.prod.svc.cluster.local.");
	ask(c, "10-1-0-9.web.prod.svc.cluster.local", DNS_T_A, &r);
	assert_true(has_answer_address(&r, DNS_T_A, "10.1.0.9"));
	ask(c, "_http._tcp.web.prod.svc.cluster.local", DNS_T_SRV, &r);
	assert_int_equal(r.v->an, 3);
	for (size_t i = 0; i < r.v->an; i++) {
		assert_true(r.v->rr[i].rdlen > 6);
		pos = r.v->rr[i].rdoff + 6;
		assert_true(dns_name_read(r.buf, r.len, &pos, target, true) > 0);
	}
}

static void test_publish_not_ready_addresses_is_honoured(void **state)
{
	struct cluster *c = *state;
	struct reply r;
	char svc[1024];

	snprintf(svc, sizeof svc, "%s", svc_web);
	char *spec = strstr(svc, "\"spec\":{");
	assert_non_null(spec);
	memmove(spec + 8 + 33, spec + 8, strlen(spec + 8) + 1);
	memcpy(spec + 8, "\"publishNotReadyAddresses\":true, ", 33);
	UPSERT(cluster_service_upsert, c, svc);
	ask(c, "web.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(r.v->an, 3);
	ask(c, "web-2.web.prod.svc.cluster.local", DNS_T_A, &r);
	assert_true(has_answer_address(&r, DNS_T_A, "10.1.0.3"));
}

/* What cluster_watch_endpoints reported last, as "a,b" text, and how often. */
struct watched {
	char last[256];
	int calls;
};

static void record_endpoints(void *ctx, const struct config_ip *ips, size_t n)
{
	struct watched *w = ctx;
	size_t used = 0;

	w->calls++;
	w->last[0] = '\0';
	for (size_t i = 0; i < n; i++)
		used += (size_t)snprintf(w->last + used, sizeof w->last - used, "%s%s",
					 i ? "," : "", ips[i].text);
}

static void test_watched_service_reports_ready_endpoints_on_change(void **state)
{
	struct cluster *c = make_cluster("insecure"); /* a table of its own, empty */
	struct watched w = {.calls = 0};
	static const char other[] =
		"{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\","
		"\"metadata\":{\"name\":\"web-2\",\"namespace\":\"prod\","
		"\"labels\":{\"kubernetes.io/service-name\":\"web\"}},"
		"\"endpoints\":[{\"addresses\":[\"10.1.0.2\"],\"conditions\":{\"ready\":true}},"
		"{\"addresses\":[\"10.0.9.9\"],\"conditions\":{\"ready\":true}}]}";
	(void)state;

	cluster_watch_endpoints(c, "prod", "web", record_endpoints, &w);
	UPSERT(cluster_service_upsert, c, svc_db);  /* not watched: no report */
	UPSERT(cluster_slice_upsert, c, slice_db);
	assert_int_equal(w.calls, 0);
	/* Before the first sync nothing is reported: the list may still hold
	 * more slices (a Service listed before its slices would look empty). */
	UPSERT(cluster_slice_upsert, c, slice_web);
	assert_int_equal(w.calls, 0);
	cluster_set_synced(c);                      /* then the whole set at once */
	assert_int_equal(w.calls, 1);
	assert_string_equal(w.last, "10.1.0.1,10.1.0.2"); /* ready only, sorted */
	UPSERT(cluster_service_upsert, c, svc_web); /* same set: no report */
	assert_int_equal(w.calls, 1);
	UPSERT(cluster_slice_upsert, c, other);     /* a second slice; 10.1.0.2 once */
	assert_int_equal(w.calls, 2);
	assert_string_equal(w.last, "10.0.9.9,10.1.0.1,10.1.0.2");
	cluster_slice_remove(c, "prod", "web-1");
	cluster_slice_remove(c, "prod", "web-2");
	assert_int_equal(w.calls, 4);
	assert_string_equal(w.last, "");            /* none left: said so */
	cluster_free(c);

	/* A watched Service that does not exist at the sync: none, said once. */
	c = make_cluster("insecure");
	w.calls = 0;
	cluster_watch_endpoints(c, "kube-system", "kube-dns", record_endpoints, &w);
	UPSERT(cluster_service_upsert, c, svc_db);
	cluster_set_synced(c);
	assert_int_equal(w.calls, 1);
	assert_string_equal(w.last, "");
	cluster_free(c);
}

static void test_headless_without_ready_endpoints_is_nxdomain(void **state)
{
	struct cluster *c = *state;

	cluster_slice_remove(c, "prod", "web-1");
	assert_nxdomain(c, "web.prod.svc.cluster.local");
	assert_nxdomain(c, "_http._tcp.web.prod.svc.cluster.local");
	assert_nxdomain(c, "web-0.web.prod.svc.cluster.local");
}

static void test_ptr_for_cluster_ips_and_endpoints(void **state)
{
	struct reply r;
	struct dns_query q;

	assert_int_equal(ask(*state, "5.0.96.10.in-addr.arpa", DNS_T_PTR, &r), CLUSTER_ANSWERED);
	assert_int_equal(r.v->an, 1);
	assert_true(r.v->flags & DNS_F_AA);
	/* the PTR target is compressed against nothing earlier: read it from the message */
	assert_name_equal(r.v->rr[0].target, "db.prod.svc.cluster.local.");

	ask(*state, "5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa",
	    DNS_T_PTR, &r);
	assert_int_equal(r.v->an, 1);

	ask(*state, "1.0.1.10.in-addr.arpa", DNS_T_PTR, &r);
	assert_name_equal(r.v->rr[0].target, "web-0.web.prod.svc.cluster.local.");

	ask(*state, "7.0.1.10.in-addr.arpa", DNS_T_PTR, &r); /* endpoint of a ClusterIP service */
	assert_int_equal(r.v->an, 1);

	make_query(&q, "9.9.9.9.in-addr.arpa", DNS_T_PTR);
	struct dns_writer w;
	struct cluster_chase chase;
	dns_response_begin(&w, r.buf, sizeof r.buf, &q, DNS_R_NOERROR);
	urcu_memb_read_lock();
	assert_int_equal(cluster_answer(*state, &q, &w, &chase), CLUSTER_NOT_LOCAL);
	urcu_memb_read_unlock();
}

static void test_external_name_is_a_cname_chased_elsewhere(void **state)
{
	struct cluster *c = *state;
	struct dns_query q;
	struct dns_writer w;
	struct reply r;
	struct cluster_chase chase;

	UPSERT(cluster_service_upsert, c,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"ext\",\"namespace\":\"prod\"},"
	       "\"spec\":{\"type\":\"ExternalName\",\"externalName\":\"db.example.org.\"}}");
	make_query(&q, "ext.prod.svc.cluster.local", DNS_T_A);
	dns_response_begin(&w, r.buf, sizeof r.buf, &q, DNS_R_NOERROR);
	urcu_memb_read_lock();
	assert_int_equal(cluster_answer(c, &q, &w, &chase), CLUSTER_CHASE);
	urcu_memb_read_unlock();
	assert_int_equal(chase.n, 1);
	assert_int_equal(chase.ttl, 5);
	assert_memory_equal(chase.targets[0], wire("db.example.org"), dns_name_len(chase.targets[0]));
	r.len = dns_response_finish(&w, 1232);
	read_reply(&r);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_CNAME);

	/* an ExternalName inside the zone is followed here */
	UPSERT(cluster_service_upsert, c,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"alias\",\"namespace\":\"prod\"},"
	       "\"spec\":{\"type\":\"ExternalName\",\"externalName\":\"db.prod.svc.cluster.local\"}}");
	assert_int_equal(ask(c, "alias.prod.svc.cluster.local", DNS_T_A, &r), CLUSTER_ANSWERED);
	assert_int_equal(r.v->an, 2);
	assert_int_equal(r.v->rr[0].type, DNS_T_CNAME);
	assert_true(has_answer_address(&r, DNS_T_A, "10.96.0.5"));
}

static void test_names_that_fit_no_shape_are_nxdomain(void **state)
{
	assert_nxdomain(*state, "google.com.prod.svc.cluster.local");
	assert_nxdomain(*state, "db.prod.svc.cluster.local.prod.svc.cluster.local");
	assert_nxdomain(*state, "nope.prod.svc.cluster.local");
	assert_nxdomain(*state, "db.other.svc.cluster.local");
	assert_nxdomain(*state, "x.cluster.local");
}

static void test_existing_names_without_the_type_are_nodata(void **state)
{
	assert_nodata(*state, "db.prod.svc.cluster.local", DNS_T_TXT);
	assert_nodata(*state, "prod.svc.cluster.local", DNS_T_A);
	assert_nodata(*state, "svc.cluster.local", DNS_T_A);
	assert_nodata(*state, "prod.pod.cluster.local", DNS_T_A);
}

/* A ClusterIP Service without an address yet is a name without records;
 * the same object again (every relist sends it) leaves that name as it is. */
static void test_service_without_addresses_delivered_again_stays_nodata(void **state)
{
	static const char svc[] = "{\"kind\":\"Service\",\"metadata\":{\"name\":\"new\","
				  "\"namespace\":\"prod\"},\"spec\":{\"type\":\"ClusterIP\"}}";
	struct cluster *c = *state;
	struct cluster_stats once, twice;

	UPSERT(cluster_service_upsert, c, svc);
	cluster_stats(c, &once);
	assert_nodata(c, "new.prod.svc.cluster.local", DNS_T_A);
	UPSERT(cluster_service_upsert, c, svc);
	cluster_stats(c, &twice);
	assert_int_equal(twice.names, once.names);
	assert_nodata(c, "new.prod.svc.cluster.local", DNS_T_A);
}

static void test_namespace_names_follow_the_namespace(void **state)
{
	struct cluster *c = *state;

	assert_nxdomain(c, "staging.svc.cluster.local");
	add_namespace(c, "staging");
	assert_nodata(c, "staging.svc.cluster.local", DNS_T_A);
	cluster_namespace_remove(c, "staging");
	assert_nxdomain(c, "staging.svc.cluster.local");
}

static void test_apex_and_dns_version(void **state)
{
	struct reply r;

	ask(*state, "cluster.local", DNS_T_SOA, &r);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->rr[0].type, DNS_T_SOA);
	ask(*state, "cluster.local", DNS_T_NS, &r);
	assert_int_equal(r.v->an, 1);
	ask(*state, "dns-version.cluster.local", DNS_T_TXT, &r);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(r.v->rr[0].rdlen, 6);
	assert_memory_equal(reply_rdata(&r, 0), "\0051.1.0", 6);
}

static void test_insecure_pods_need_an_existing_namespace(void **state)
{
	struct reply r;

	ask(*state, "10-1-0-9.prod.pod.cluster.local", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_true(has_answer_address(&r, DNS_T_A, "10.1.0.9"));
	ask(*state, "fd00--9.prod.pod.cluster.local", DNS_T_AAAA, &r);
	assert_true(has_answer_address(&r, DNS_T_AAAA, "fd00::9"));
	/* three dashes, one of them "::": IPv6 (CoreDNS's rule) */
	ask(*state, "fd00-1--9.prod.pod.cluster.local", DNS_T_AAAA, &r);
	assert_true(has_answer_address(&r, DNS_T_AAAA, "fd00:1::9"));
	assert_nodata(*state, "10-1-0-9.prod.pod.cluster.local", DNS_T_AAAA);
	assert_nxdomain(*state, "10-1-0-9.nope.pod.cluster.local");
	assert_nxdomain(*state, "10-1-0.prod.pod.cluster.local");
	assert_nxdomain(*state, "x.10-1-0-9.prod.pod.cluster.local");
}

static void test_verified_pods_must_exist(void **state)
{
	struct cluster *c = make_cluster("verified");
	struct reply r;

	(void)state;
	add_namespace(c, "prod");
	UPSERT(cluster_service_upsert, c, svc_db);
	UPSERT(cluster_slice_upsert, c, slice_db);
	UPSERT(cluster_pod_upsert, c,
	       "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"local\",\"namespace\":\"prod\"},"
	       "\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Running\","
	       "\"podIP\":\"10.1.0.20\",\"podIPs\":[{\"ip\":\"10.1.0.20\"}]}}");
	cluster_set_synced(c);
	ask(c, "10-1-0-20.prod.pod.cluster.local", DNS_T_A, &r);
	assert_true(has_answer_address(&r, DNS_T_A, "10.1.0.20"));
	ask(c, "10-1-0-7.prod.pod.cluster.local", DNS_T_A, &r); /* behind an endpoint */
	assert_true(has_answer_address(&r, DNS_T_A, "10.1.0.7"));
	assert_nxdomain(c, "10-1-0-9.prod.pod.cluster.local");
	cluster_pod_remove(c, "prod", "local");
	assert_nxdomain(c, "10-1-0-20.prod.pod.cluster.local");
	cluster_slice_remove(c, "prod", "db-abc");
	assert_nxdomain(c, "10-1-0-7.prod.pod.cluster.local");
	cluster_free(c);
}

static void test_service_changes_and_deletion_update_only_its_names(void **state)
{
	struct cluster *c = *state;
	struct reply r;
	struct cluster_stats before, after;

	cluster_stats(c, &before);
	UPSERT(cluster_service_upsert, c,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"db\",\"namespace\":\"prod\"},"
	       "\"spec\":{\"clusterIP\":\"10.96.0.6\",\"clusterIPs\":[\"10.96.0.6\"]}}");
	ask(c, "db.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(r.v->an, 1);
	assert_true(has_answer_address(&r, DNS_T_A, "10.96.0.6"));
	assert_nodata(c, "db.prod.svc.cluster.local", DNS_T_AAAA);
	assert_nxdomain(c, "_mysql._tcp.db.prod.svc.cluster.local"); /* port gone */
	ask(c, "6.0.96.10.in-addr.arpa", DNS_T_PTR, &r);
	assert_int_equal(r.v->an, 1);

	cluster_service_remove(c, "prod", "db");
	assert_nxdomain(c, "db.prod.svc.cluster.local");
	ask(c, "web.prod.svc.cluster.local", DNS_T_A, &r); /* others untouched */
	assert_int_equal(r.v->an, 2);
	cluster_slice_remove(c, "prod", "db-abc");
	cluster_stats(c, &after);
	assert_int_equal(after.services, before.services - 1);
	assert_int_equal(after.slices, before.slices - 1);
	assert_true(after.names < before.names);
}

static void test_ptr_shared_by_two_services_keeps_both(void **state)
{
	struct cluster *c = *state;
	struct reply r;

	/* a second headless service selecting the same pod as web-0 */
	UPSERT(cluster_service_upsert, c,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"web2\",\"namespace\":\"prod\"},"
	       "\"spec\":{\"clusterIP\":\"None\"}}");
	UPSERT(cluster_slice_upsert, c,
	       "{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\",\"metadata\":{\"name\":\"web2-x\","
	       "\"namespace\":\"prod\",\"labels\":{\"kubernetes.io/service-name\":\"web2\"}},"
	       "\"endpoints\":[{\"addresses\":[\"10.1.0.1\"]}]}");
	ask(c, "1.0.1.10.in-addr.arpa", DNS_T_PTR, &r);
	assert_int_equal(r.v->an, 2);
	cluster_service_remove(c, "prod", "web2");
	ask(c, "1.0.1.10.in-addr.arpa", DNS_T_PTR, &r);
	assert_int_equal(r.v->an, 1);
}

static void test_slices_before_their_service_count_once_it_arrives(void **state)
{
	struct cluster *c = make_cluster("insecure");
	struct reply r;

	(void)state;
	add_namespace(c, "prod");
	UPSERT(cluster_slice_upsert, c, slice_web);
	cluster_set_synced(c);
	assert_nxdomain(c, "web.prod.svc.cluster.local");
	UPSERT(cluster_service_upsert, c, svc_web);
	ask(c, "web.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(r.v->an, 2);
	cluster_free(c);
}

/* A slice that serves nothing (no endpoint of its addressType) still
 * belongs to its Service: the Service's entry stays while the slice
 * refers to it, and goes, once, with the slice. */
static void test_a_slice_serving_nothing_keeps_its_service_entry_until_it_goes(void **state)
{
	static const char fqdn_slice[] =
		"{\"kind\":\"EndpointSlice\",\"addressType\":\"FQDN\","
		"\"metadata\":{\"name\":\"late-1\",\"namespace\":\"prod\","
		"\"labels\":{\"kubernetes.io/service-name\":\"late\"}},"
		"\"endpoints\":[{\"addresses\":[\"a.example\"]}]}";
	struct cluster *c = *state;
	struct cluster_stats before, after;

	cluster_stats(c, &before);
	UPSERT(cluster_slice_upsert, c, fqdn_slice);
	UPSERT(cluster_slice_upsert, c, fqdn_slice);
	assert_nxdomain(c, "late.prod.svc.cluster.local");
	UPSERT(cluster_service_upsert, c,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"late\",\"namespace\":\"prod\"},"
	       "\"spec\":{\"clusterIP\":\"10.96.0.44\",\"clusterIPs\":[\"10.96.0.44\"]}}");
	cluster_service_remove(c, "prod", "late");
	cluster_slice_remove(c, "prod", "late-1");
	urcu_memb_barrier(); /* the deferred frees run: each entry once */
	cluster_stats(c, &after);
	assert_int_equal(after.names, before.names);
	assert_int_equal(after.slices, before.slices);
}

static void test_nothing_is_answered_before_the_first_sync(void **state)
{
	struct cluster *c = make_cluster("insecure");
	struct reply r;
	struct dns_query q;
	struct dns_writer w;
	struct cluster_chase chase;

	(void)state;
	make_query(&q, "db.prod.svc.cluster.local", DNS_T_A);
	dns_response_begin(&w, r.buf, sizeof r.buf, &q, DNS_R_NOERROR);
	urcu_memb_read_lock();
	assert_int_equal(cluster_answer(c, &q, &w, &chase), CLUSTER_UNSYNCED);
	make_query(&q, "example.org", DNS_T_A);
	assert_int_equal(cluster_answer(c, &q, &w, &chase), CLUSTER_NOT_LOCAL);
	urcu_memb_read_unlock();
	cluster_free(c);
}

static void test_objects_without_names_are_ignored(void **state)
{
	struct cluster *c = *state;
	struct cluster_stats before, after;

	cluster_stats(c, &before);
	UPSERT(cluster_service_upsert, c, "{\"kind\":\"Service\",\"metadata\":{}}");
	UPSERT(cluster_slice_upsert, c,
	       "{\"kind\":\"EndpointSlice\",\"metadata\":{\"name\":\"x\",\"namespace\":\"prod\"}}");
	UPSERT(cluster_service_upsert, c, "[1,2,3]");
	cluster_stats(c, &after);
	assert_int_equal(after.names, before.names);
	assert_int_equal(after.services, before.services);
}

/* ---- autopath: which client asks ---------------------------------------------- */

static void upsert_pod(struct cluster *c, const char *ns, const char *name, const char *ip,
		       const char *extra_spec, const char *phase, bool deleting)
{
	char json[1024];

	snprintf(json, sizeof json,
		 "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\"%s},"
		 "\"spec\":{\"nodeName\":\"n1\"%s},\"status\":{\"phase\":\"%s\","
		 "\"podIP\":\"%s\",\"podIPs\":[{\"ip\":\"%s\"}]}}",
		 name, ns, deleting ? ",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"" : "",
		 extra_spec, phase, ip, ip);
	UPSERT(cluster_pod_upsert, c, json);
}

static const struct sockaddr_storage *peer(const char *ip)
{
	static struct sockaddr_storage ss;

	ss = address_of(ip);
	return &ss;
}

/* The base cluster_autopath_base finds in name for a client at ip (0: none). */
static size_t base_for(struct cluster *c, const char *name, const char *ip)
{
	struct dns_query q;
	size_t base;

	make_query(&q, name, DNS_T_A);
	urcu_memb_read_lock();
	base = cluster_autopath_base(c, &q, ip ? peer(ip) : NULL);
	urcu_memb_read_unlock();
	return base;
}

static void test_autopath_base_is_for_this_nodes_pods_in_their_namespace(void **state)
{
	struct cluster *c = *state;
	const size_t www_example_com = 16; /* \3www\7example\3com */

	upsert_pod(c, "prod", "client", "10.1.0.50", "", "Running", false);
	assert_int_equal(base_for(c, "www.example.com.prod.svc.cluster.local", "10.1.0.50"),
			 www_example_com);
	assert_int_equal(base_for(c, "WWW.Example.com.prod.svc.cluster.local", "10.1.0.50"),
			 www_example_com);
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local", "10.1.0.50"), 3);
	assert_int_equal(base_for(c, "db.team.svc.cluster.local", "10.1.0.50"), 0);
	assert_int_equal(base_for(c, "prod.svc.cluster.local", "10.1.0.50"), 0); /* no base */
	assert_int_equal(base_for(c, "db.prod.pod.cluster.local", "10.1.0.50"), 0);
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local.example", "10.1.0.50"), 0);
	assert_int_equal(base_for(c, "www.example.com.prod.svc.cluster.local", "10.1.0.51"), 0);
	assert_int_equal(base_for(c, "www.example.com.prod.svc.cluster.local", NULL), 0);
	/* an IPv4 client on a dual-stack socket */
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local", "::ffff:10.1.0.50"), 3);

	upsert_pod(c, "prod", "v6", "fd00::50", "", "Running", false);
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local", "fd00::50"), 3);
	upsert_pod(c, "prod", "init", "10.1.0.53", "", "Pending", false);
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local", "10.1.0.53"), 3);
}

static void test_autopath_skips_host_network_finished_and_deleted_pods(void **state)
{
	struct cluster *c = *state;

	upsert_pod(c, "prod", "host", "10.1.0.60", ",\"hostNetwork\":true", "Running", false);
	upsert_pod(c, "prod", "done", "10.1.0.61", "", "Succeeded", false);
	upsert_pod(c, "prod", "failed", "10.1.0.62", "", "Failed", false);
	upsert_pod(c, "prod", "leaving", "10.1.0.63", "", "Running", true);
	for (const char *const *ip = (const char *const[]){"10.1.0.60", "10.1.0.61", "10.1.0.62",
							   "10.1.0.63", NULL}; *ip; ip++)
		assert_int_equal(base_for(c, "db.prod.svc.cluster.local", *ip), 0);

	/* a pod stops being a client when it finishes, starts being deleted or goes */
	upsert_pod(c, "prod", "job", "10.1.0.64", "", "Running", false);
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local", "10.1.0.64"), 3);
	upsert_pod(c, "prod", "job", "10.1.0.64", "", "Succeeded", false);
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local", "10.1.0.64"), 0);
	upsert_pod(c, "prod", "job", "10.1.0.64", "", "Running", false);
	upsert_pod(c, "prod", "job", "10.1.0.64", "", "Running", true);
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local", "10.1.0.64"), 0);
	upsert_pod(c, "prod", "job", "10.1.0.64", "", "Running", false);
	cluster_pod_remove(c, "prod", "job");
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local", "10.1.0.64"), 0);
}

static void test_autopath_address_reused_by_a_new_pod_follows_it(void **state)
{
	struct cluster *c = *state;

	upsert_pod(c, "prod", "old", "10.1.0.70", "", "Running", false);
	upsert_pod(c, "team", "new", "10.1.0.70", "", "Running", false);
	assert_int_equal(base_for(c, "db.team.svc.cluster.local", "10.1.0.70"), 3);
	assert_int_equal(base_for(c, "db.prod.svc.cluster.local", "10.1.0.70"), 0);
	cluster_pod_remove(c, "prod", "old"); /* the address is not the old pod's any more */
	assert_int_equal(base_for(c, "db.team.svc.cluster.local", "10.1.0.70"), 3);
	upsert_pod(c, "team", "new", "10.1.0.71", "", "Running", false); /* address changed */
	assert_int_equal(base_for(c, "db.team.svc.cluster.local", "10.1.0.70"), 0);
	assert_int_equal(base_for(c, "db.team.svc.cluster.local", "10.1.0.71"), 3);
}

/* ---- bounds: a hostile Service degrades only itself ------------------------------ */

static uint64_t limited(struct cluster *c, const char *kind)
{
	struct cluster_stats st;

	cluster_stats(c, &st);
	for (unsigned k = 0; k < CLUSTER_LIMITS; k++)
		if (strcmp(cluster_limit_names[k], kind) == 0)
			return st.limited[k];
	fail_msg("no bound named %s", kind);
	return 0;
}

static size_t count_lines_with(const char *text, const char *needle)
{
	size_t n = 0;

	for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static int register_thread(void **state)
{
	(void)state;
	urcu_memb_register_thread();
	return 0;
}

static int unregister_thread(void **state)
{
	(void)state;
	urcu_memb_unregister_thread();
	return 0;
}

/* prod with db and web (setup), bounds of 2 ports and 3 endpoints per Service. */
static struct cluster *make_bounded_cluster(void)
{
	struct cluster *c = make_cluster_from("cluster: {domain: cluster.local, ttl: 5s, "
					      "max_ports_per_service: 2, "
					      "max_endpoints_per_service: 3}\n");

	load_prod(c);
	return c;
}

static const char svc_many_ports[] =
	"{\"kind\":\"Service\",\"metadata\":{\"name\":\"wide\",\"namespace\":\"prod\"},"
	"\"spec\":{\"clusterIP\":\"10.96.0.9\",\"clusterIPs\":[\"10.96.0.9\"],\"ports\":["
	"{\"name\":\"p0\",\"port\":80,\"protocol\":\"TCP\"},{\"name\":\"p1\",\"port\":81,\"protocol\":\"TCP\"},"
	"{\"name\":\"p2\",\"port\":82,\"protocol\":\"TCP\"},{\"name\":\"p3\",\"port\":83,\"protocol\":\"TCP\"}]}}";

static void test_ports_past_the_bound_are_cut_logged_once_and_counted(void **state)
{
	struct cluster *c = make_bounded_cluster();
	const char *log;
	struct reply r;

	(void)state;
	begin_capture();
	UPSERT(cluster_service_upsert, c, svc_many_ports);
	UPSERT(cluster_service_upsert, c, svc_many_ports); /* still over: counted, not logged again */
	log = end_capture();
	assert_int_equal(count_lines_with(log, "cluster.max_ports_per_service"), 1);
	assert_non_null(strstr(log, "service=prod/wide"));
	assert_int_equal(limited(c, "ports"), 2);
	assert_int_equal(limited(c, "endpoints"), 0);

	ask(c, "_p1._tcp.wide.prod.svc.cluster.local", DNS_T_SRV, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 1);
	assert_int_equal(rd16(reply_rdata(&r, 0) + 4), 81);
	assert_nxdomain(c, "_p2._tcp.wide.prod.svc.cluster.local");
	ask(c, "wide.prod.svc.cluster.local", DNS_T_SRV, &r);
	assert_int_equal(r.v->an, 2);
	ask(c, "wide.prod.svc.cluster.local", DNS_T_A, &r); /* the Service itself still serves */
	assert_true(has_answer_address(&r, DNS_T_A, "10.96.0.9"));
	ask(c, "_mysql._tcp.db.prod.svc.cluster.local", DNS_T_SRV, &r); /* others untouched */
	assert_int_equal(r.v->an, 1);
	cluster_free(c);
}

static const char svc_crowd[] =
	"{\"kind\":\"Service\",\"metadata\":{\"name\":\"crowd\",\"namespace\":\"prod\"},"
	"\"spec\":{\"clusterIP\":\"None\",\"clusterIPs\":[\"None\"]}}";

static void upsert_crowd_slice(struct cluster *c, const char *name, const char *a, const char *b)
{
	char json[1024];

	snprintf(json, sizeof json,
		 "{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\",\"metadata\":{\"name\":\"%s\","
		 "\"namespace\":\"prod\",\"labels\":{\"kubernetes.io/service-name\":\"crowd\"}},"
		 "\"endpoints\":[{\"addresses\":[\"%s\"]},{\"addresses\":[\"%s\"]}]}",
		 name, a, b);
	UPSERT(cluster_slice_upsert, c, json);
}

static void test_endpoints_past_the_bound_are_left_out_of_their_service_only(void **state)
{
	struct cluster *c = make_bounded_cluster();
	const char *log;
	struct reply r;

	(void)state;
	UPSERT(cluster_service_upsert, c, svc_crowd);
	begin_capture();
	upsert_crowd_slice(c, "crowd-a", "10.2.0.1", "10.2.0.2");
	upsert_crowd_slice(c, "crowd-b", "10.2.0.3", "10.2.0.4");
	log = end_capture();
	assert_int_equal(count_lines_with(log, "cluster.max_endpoints_per_service"), 1);
	assert_non_null(strstr(log, "service=prod/crowd"));
	assert_int_equal(limited(c, "endpoints"), 1);
	ask(c, "crowd.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(r.v->an, 3);
	assert_false(has_answer_address(&r, DNS_T_A, "10.2.0.4"));
	assert_nxdomain(c, "10-2-0-4.crowd.prod.svc.cluster.local");
	ask(c, "web.prod.svc.cluster.local", DNS_T_A, &r); /* others untouched */
	assert_int_equal(r.v->an, 2);

	/* room made by another slice's removal is taken at the next change */
	cluster_slice_remove(c, "prod", "crowd-a");
	upsert_crowd_slice(c, "crowd-b", "10.2.0.3", "10.2.0.4");
	ask(c, "crowd.prod.svc.cluster.local", DNS_T_A, &r);
	assert_int_equal(r.v->an, 2);
	assert_true(has_answer_address(&r, DNS_T_A, "10.2.0.4"));
	assert_int_equal(limited(c, "endpoints"), 1);
	cluster_free(c);
}

#define DIGITS62 "23456789012345678901234567890123456789012345678901234567890123"
#define LABEL63 "h" DIGITS62

/* A hostname is one label, but under a long Service name and cluster domain
 * it can make a name past 255 bytes: the endpoint is named by its address. */
static void test_a_hostname_past_the_name_length_falls_back_to_the_dashed_address(void **state)
{
	static const char domain[] =
		"d23456789012345678901234567890.e23456789012345678901234567890.cluster.local";
	static const char svc[] = "s" DIGITS62, ns[] = "n" DIGITS62;
	char yaml[256], json[1024], name[512];
	struct cluster *c;
	const char *log;
	struct reply r;

	(void)state;
	snprintf(yaml, sizeof yaml, "cluster: {domain: %s, ttl: 5s}\n", domain);
	c = make_cluster_from(yaml);
	snprintf(json, sizeof json,
		 "{\"kind\":\"Service\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\"},"
		 "\"spec\":{\"clusterIP\":\"None\",\"clusterIPs\":[\"None\"]}}", svc, ns);
	UPSERT(cluster_service_upsert, c, json);
	snprintf(json, sizeof json,
		 "{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\",\"metadata\":{\"name\":\"x\","
		 "\"namespace\":\"%s\",\"labels\":{\"kubernetes.io/service-name\":\"%s\"}},"
		 "\"endpoints\":[{\"addresses\":[\"10.3.0.1\"],\"hostname\":\"%s\"}]}", ns, svc, LABEL63);
	begin_capture();
	UPSERT(cluster_slice_upsert, c, json);
	log = end_capture();
	cluster_set_synced(c);
	assert_int_equal(count_lines_with(log, "longer than 255 bytes"), 1);
	assert_int_equal(limited(c, "name_length"), 1);

	snprintf(name, sizeof name, "10-3-0-1.%s.%s.svc.%s", svc, ns, domain);
	ask(c, name, DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_true(has_answer_address(&r, DNS_T_A, "10.3.0.1"));
	snprintf(name, sizeof name, "%s.%s.svc.%s", svc, ns, domain);
	ask(c, name, DNS_T_A, &r);
	assert_true(has_answer_address(&r, DNS_T_A, "10.3.0.1"));
	cluster_free(c);
}

/* ---- Services with many ports ------------------------------------------------- */

static const char *const wide_protos[] = {"TCP", "UDP", "SCTP"};

/* Port p<i> of a wide Service: number 20000 + i, TCP, UDP and SCTP in turn. */
static const char *wide_proto(unsigned i)
{
	return wide_protos[i % 3];
}

/*
 * The "ports" array of a wide Service or slice: p<i> for i < n, last first
 * (the list is sorted on the way in), then one number under two names
 * (dup-a, dup-b: 30000), one name under two protocols (same: 30001, TCP and
 * UDP) and an unnamed port (40000). Returns out.
 */
static char *wide_ports(char *out, size_t size, unsigned n)
{
	size_t len = 0;

	len += (size_t)snprintf(out + len, size - len, "[");
	for (unsigned i = n; i-- > 0;) {
		len += (size_t)snprintf(out + len, size - len,
					"{\"name\":\"p%u\",\"port\":%u,\"protocol\":\"%s\"},", i,
					20000 + i, wide_proto(i));
		assert_true(len < size);
	}
	len += (size_t)snprintf(out + len, size - len,
				"{\"name\":\"dup-a\",\"port\":30000,\"protocol\":\"TCP\"},"
				"{\"name\":\"same\",\"port\":30001,\"protocol\":\"UDP\"},"
				"{\"port\":40000,\"protocol\":\"TCP\"},"
				"{\"name\":\"dup-b\",\"port\":30000,\"protocol\":\"TCP\"},"
				"{\"name\":\"same\",\"port\":30001,\"protocol\":\"TCP\"}]");
	assert_true(len < size);
	return out;
}

#define WIDE_EXTRA 5 /* the ports wide_ports adds to p<i> */
#define WIDE_JSON (1024 * 64)

/* The ClusterIP of Service w<n>. */
static const char *wide_ip(unsigned n)
{
	static char ip[32];

	snprintf(ip, sizeof ip, "10.96.%u.%u", 2 + n / 250, n % 250);
	return ip;
}

/* ClusterIP Service w<n> (wide_ip(n)) in prod with wide_ports(n). */
static void upsert_wide_service(struct cluster *c, unsigned n)
{
	char *ports = malloc(WIDE_JSON), *json = malloc(WIDE_JSON + 512);

	assert_non_null(ports);
	assert_non_null(json);
	snprintf(json, WIDE_JSON + 512,
		 "{\"kind\":\"Service\",\"metadata\":{\"name\":\"w%u\",\"namespace\":\"prod\"},"
		 "\"spec\":{\"clusterIP\":\"%s\",\"clusterIPs\":[\"%s\"],\"ports\":%s}}",
		 n, wide_ip(n), wide_ip(n), wide_ports(ports, WIDE_JSON, n));
	UPSERT(cluster_service_upsert, c, json);
	free(ports);
	free(json);
}

/* Headless Service whl in prod, its slice with wide_ports(n) and two ready
 * endpoints: 10.1.2.1 (hostname w-0) and 10.1.2.2. */
static void upsert_wide_headless(struct cluster *c, unsigned n)
{
	char *ports = malloc(WIDE_JSON), *json = malloc(WIDE_JSON + 1024);

	assert_non_null(ports);
	assert_non_null(json);
	UPSERT(cluster_service_upsert, c,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"whl\",\"namespace\":\"prod\"},"
	       "\"spec\":{\"clusterIP\":\"None\",\"clusterIPs\":[\"None\"],"
	       "\"ports\":[{\"name\":\"p0\",\"port\":20000,\"protocol\":\"TCP\"}]}}");
	snprintf(json, WIDE_JSON + 1024,
		 "{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\","
		 "\"metadata\":{\"name\":\"whl-1\",\"namespace\":\"prod\","
		 "\"labels\":{\"kubernetes.io/service-name\":\"whl\"}},"
		 "\"endpoints\":[{\"addresses\":[\"10.1.2.1\"],\"conditions\":{\"ready\":true},"
		 "\"hostname\":\"w-0\"},{\"addresses\":[\"10.1.2.2\"],\"conditions\":{\"ready\":true}}],"
		 "\"ports\":%s}",
		 wide_ports(ports, WIDE_JSON, n));
	UPSERT(cluster_slice_upsert, c, json);
	free(ports);
	free(json);
}

/* SRV record i of the answer: its weight, port and target (text, with the dot). */
static void srv_of(const struct reply *r, size_t i, unsigned *weight, unsigned *port,
		   char target[MSG_TEXT_MAX])
{
	uint8_t name[DNS_MAX_NAME];
	size_t pos = r->v->rr[i].rdoff + 6;

	assert_int_equal(r->v->rr[i].type, DNS_T_SRV);
	*weight = rd16(reply_rdata(r, i) + 2);
	*port = rd16(reply_rdata(r, i) + 4);
	assert_true(dns_name_read(r->buf, r->len, &pos, name, true) > 0);
	assert_true(dns_name_to_text(name, target, MSG_TEXT_MAX) >= 0);
}

/* _<port>._<proto>.<svc> SRV: exactly one record, for number `port`, the
 * Service itself the target. */
static void assert_one_srv(struct cluster *c, const char *port_name, const char *proto,
			   const char *svc, unsigned port)
{
	char name[MSG_TEXT_MAX], lower[8], target[MSG_TEXT_MAX], want[MSG_TEXT_MAX];
	unsigned weight, number;
	struct reply r;
	size_t i;

	for (i = 0; proto[i] && i < sizeof lower - 1; i++)
		lower[i] = (char)(proto[i] | 0x20);
	lower[i] = '\0';
	snprintf(name, sizeof name, "_%s._%s.%s.prod.svc.cluster.local", port_name, lower, svc);
	snprintf(want, sizeof want, "%s.prod.svc.cluster.local.", svc);
	assert_int_equal(ask(c, name, DNS_T_SRV, &r), CLUSTER_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 1);
	srv_of(&r, 0, &weight, &number, target);
	assert_int_equal(number, port);
	assert_int_equal(weight, 100);
	assert_string_equal(target, want);
}

/*
 * Every port of a ClusterIP Service answers by its name and protocol,
 * whatever the number of ports (a handful is walked, more are indexed):
 * the first, middle and last of the list, one number under two names, one
 * name under two protocols; another protocol or a name not there is
 * NXDOMAIN, the unnamed port has no name of its own.
 */
static void test_each_port_of_a_wide_service_answers_by_name_and_protocol(void **state)
{
	static const unsigned sizes[] = {0, 1, 2, 3, 4, 8, 9, 60, 1000};
	struct cluster *c = *state;
	char name[MSG_TEXT_MAX], port_name[16];
	struct reply r;

	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		unsigned n = sizes[s];
		const unsigned picks[] = {0, n / 2, n ? n - 1 : 0};
		upsert_wide_service(c, n);
		snprintf(name, sizeof name, "w%u", n);
		for (size_t k = 0; n && k < 3; k++) {
			unsigned i = picks[k];
			snprintf(port_name, sizeof port_name, "p%u", i);
			assert_one_srv(c, port_name, wide_proto(i), name, 20000 + i);
			/* the same name under another protocol is not there */
			snprintf(name, sizeof name, "_p%u._%s.w%u.prod.svc.cluster.local", i,
				 i % 3 == 0 ? "udp" : "tcp", n);
			assert_nxdomain(c, name);
			/* A: the Service's address, as CoreDNS answers */
			snprintf(name, sizeof name, "_p%u._%s.w%u.prod.svc.cluster.local", i,
				 i % 3 == 0 ? "tcp" : i % 3 == 1 ? "udp" : "sctp", n);
			ask(c, name, DNS_T_A, &r);
			assert_int_equal(r.v->an, 1);
			assert_true(has_answer_address(&r, DNS_T_A, wide_ip(n)));
			snprintf(name, sizeof name, "w%u", n);
		}
		assert_one_srv(c, "dup-a", "TCP", name, 30000);
		assert_one_srv(c, "dup-b", "TCP", name, 30000);
		assert_one_srv(c, "same", "TCP", name, 30001);
		assert_one_srv(c, "same", "UDP", name, 30001);
		snprintf(name, sizeof name, "_P%u._TCP.W%u.prod.svc.cluster.local", n, n);
		assert_nxdomain(c, name); /* one past the last: no such name */
		snprintf(name, sizeof name, "_nope._tcp.w%u.prod.svc.cluster.local", n);
		assert_nxdomain(c, name);
		snprintf(name, sizeof name, "_dup-a._udp.w%u.prod.svc.cluster.local", n);
		assert_nxdomain(c, name);
		snprintf(name, sizeof name, "_same._sctp.w%u.prod.svc.cluster.local", n);
		assert_nxdomain(c, name);
		snprintf(name, sizeof name, "_a-name-too-long-for-a-port._tcp.w%u.prod.svc.cluster.local", n);
		assert_nxdomain(c, name);
		snprintf(name, sizeof name, "_p0._not-a-protocol.w%u.prod.svc.cluster.local", n);
		assert_nxdomain(c, name);
		/* _<proto>: a name while a named port has the protocol */
		snprintf(name, sizeof name, "_udp.w%u.prod.svc.cluster.local", n);
		assert_nodata(c, name, DNS_T_SRV);
		snprintf(name, sizeof name, "_sctp.w%u.prod.svc.cluster.local", n);
		if (n >= 3)
			assert_nodata(c, name, DNS_T_SRV);
		else
			assert_nxdomain(c, name);
	}
}

/* The Service's own SRV: one record per port number (30000 and 30001 once),
 * the unnamed port among them, each entry weighing 100 / the ports. */
static void test_a_wide_service_name_has_one_srv_per_port_number(void **state)
{
	struct cluster *c = *state;
	char target[MSG_TEXT_MAX];
	unsigned weight, port, seen[3] = {0};
	struct reply r;

	upsert_wide_service(c, 60);
	ask(c, "w60.prod.svc.cluster.local", DNS_T_SRV, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_int_equal(r.v->an, 60 + 3);
	for (size_t i = 0; i < r.v->an; i++) {
		srv_of(&r, i, &weight, &port, target);
		assert_int_equal(weight, 100 / (60 + WIDE_EXTRA));
		assert_string_equal(target, "w60.prod.svc.cluster.local.");
		seen[0] += port == 30000;
		seen[1] += port == 30001;
		seen[2] += port == 40000;
		if (i)
			assert_true(port > rd16(reply_rdata(&r, i - 1) + 4)); /* by number, each once */
	}
	assert_int_equal(seen[0], 1);
	assert_int_equal(seen[1], 1);
	assert_int_equal(seen[2], 1);
}

/* A headless Service takes its ports from its slice: each selected port
 * gives a record per endpoint, the endpoints' addresses in the additional
 * section (and in the answer of an A question). */
static void test_each_port_of_a_wide_headless_service_names_every_endpoint(void **state)
{
	static const unsigned sizes[] = {1, 60, 1000};
	static const char *const targets[] = {"10-1-2-2.whl.prod.svc.cluster.local.",
					      "w-0.whl.prod.svc.cluster.local."};
	struct cluster *c = *state;
	char name[MSG_TEXT_MAX], target[MSG_TEXT_MAX];
	unsigned weight, port;
	struct reply r;

	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		unsigned n = sizes[s], last = n - 1;
		const struct {
			const char *name;
			unsigned port;
		} asked[] = {{"_p0._tcp", 20000}, {"_dup-a._tcp", 30000}, {"_dup-b._tcp", 30000},
			     {"_same._udp", 30001}, {NULL, 20000 + last}};
		upsert_wide_headless(c, n);
		for (size_t k = 0; k < sizeof asked / sizeof asked[0]; k++) {
			if (asked[k].name)
				snprintf(name, sizeof name, "%s.whl.prod.svc.cluster.local", asked[k].name);
			else
				snprintf(name, sizeof name, "_p%u._%s.whl.prod.svc.cluster.local", last,
					 last % 3 == 0 ? "tcp" : last % 3 == 1 ? "udp" : "sctp");
			ask(c, name, DNS_T_SRV, &r);
			assert_int_equal(rcode(&r), DNS_R_NOERROR);
			assert_int_equal(r.v->an, 2);
			for (size_t i = 0; i < 2; i++) {
				srv_of(&r, i, &weight, &port, target);
				assert_int_equal(port, asked[k].port);
				assert_int_equal(weight, 50);
				assert_true(strcmp(target, targets[0]) == 0 ||
					    strcmp(target, targets[1]) == 0);
			}
			assert_int_equal(r.v->ar, 2);
			ask(c, name, DNS_T_A, &r);
			assert_int_equal(r.v->an, 2);
			assert_true(has_answer_address(&r, DNS_T_A, "10.1.2.1"));
			assert_true(has_answer_address(&r, DNS_T_A, "10.1.2.2"));
		}
		snprintf(name, sizeof name, "_p%u._tcp.whl.prod.svc.cluster.local", n);
		assert_nxdomain(c, name);
		assert_nxdomain(c, "_p0._udp.whl.prod.svc.cluster.local");
		assert_nxdomain(c, "_nope._tcp.whl.prod.svc.cluster.local");
		assert_nodata(c, "_tcp.whl.prod.svc.cluster.local", DNS_T_SRV);
		assert_nxdomain(c, "_xyz.whl.prod.svc.cluster.local");
	}
}

/* The hot-path promise: answering from the table allocates nothing and locks nothing. */
/* ---- readers beside the writer ------------------------------------------------ */

#define WRITER_ROUNDS 1000

/* The addresses of type `type` in the answer section of buf[0..len), or -1
 * when the reply does not read (no cmocka asserts off the main thread). */
static int answer_addresses_of(const uint8_t *buf, size_t len, uint16_t type, uint32_t *v4,
			       int max)
{
	uint8_t name[DNS_MAX_NAME];
	size_t pos = DNS_HEADER_LEN;
	int n = 0;

	if (len < DNS_HEADER_LEN || dns_name_read(buf, len, &pos, name, true) < 0 || len - pos < 4)
		return -1;
	pos += 4;
	for (unsigned i = 0; i < rd16(buf + 6); i++) {
		if (dns_name_read(buf, len, &pos, name, true) < 0 || len - pos < 10)
			return -1;
		uint16_t rtype = rd16(buf + pos), rdlen = rd16(buf + pos + 8);
		pos += 10;
		if (len - pos < rdlen)
			return -1;
		if (rtype == type && rdlen == 4 && n < max)
			memcpy(&v4[n++], buf + pos, 4);
		pos += rdlen;
	}
	return n;
}

/* One A question; false when the answer is none the writer ever made. */
static bool read_db_and_web(struct cluster *c)
{
	static const char *const names[] = {"db.prod.svc.cluster.local",
					     "web.prod.svc.cluster.local"};
	uint8_t buf[1232];
	uint32_t a[8];

	for (int i = 0; i < 2; i++) {
		struct dns_query q;
		struct dns_writer w;
		struct cluster_chase chase;
		make_query(&q, names[i], DNS_T_A);
		dns_response_begin(&w, buf, sizeof buf, &q, DNS_R_NOERROR);
		urcu_memb_read_lock();
		enum cluster_result r = cluster_answer(c, &q, &w, &chase);
		urcu_memb_read_unlock();
		int n = answer_addresses_of(buf, dns_response_finish(&w, 1232), DNS_T_A, a, 8);
		if (r != CLUSTER_ANSWERED)
			return false;
		if (i == 0 && !(n == 1 && (a[0] == inet_addr("10.96.0.5") ||
					    a[0] == inet_addr("10.96.0.6"))))
			return false;
		if (i == 1 && n != 2 && n != 3) /* web-1's two ready endpoints, and web-2's */
			return false;
	}
	return true;
}

/* PTRs through the indexes the writer changes (a ClusterIP that comes and
 * goes, web-2's endpoint) and the endpoint name: one answer when held, none
 * (handed on, or NXDOMAIN) when not, never anything else. */
static bool read_derived(struct cluster *c)
{
	static const struct {
		const char *name;
		uint16_t type;
	} asked[] = {
		{"5.0.96.10.in-addr.arpa", DNS_T_PTR},
		{"9.0.1.10.in-addr.arpa", DNS_T_PTR},
		{"10-1-0-9.web.prod.svc.cluster.local", DNS_T_A},
	};
	uint8_t buf[1232];

	for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++) {
		struct dns_query q;
		struct dns_writer w;
		struct cluster_chase chase;
		make_query(&q, asked[i].name, asked[i].type);
		dns_response_begin(&w, buf, sizeof buf, &q, DNS_R_NOERROR);
		urcu_memb_read_lock();
		enum cluster_result r = cluster_answer(c, &q, &w, &chase);
		urcu_memb_read_unlock();
		size_t len = dns_response_finish(&w, 1232);
		unsigned an = len >= DNS_HEADER_LEN ? rd16(buf + 6) : 99;
		if (r == CLUSTER_ANSWERED ? an > 1 : r != CLUSTER_NOT_LOCAL)
			return false;
	}
	return true;
}

/* This node's pod 10.1.0.50 is in prod or in team, never anywhere else. */
static bool read_client(struct cluster *c)
{
	struct sockaddr_storage ss = {0}; /* not peer(): its buffer is shared */
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct dns_query q;

	v4->sin_family = AF_INET;
	v4->sin_addr.s_addr = inet_addr("10.1.0.50");
	make_query(&q, "api.prod.svc.cluster.local", DNS_T_A);
	urcu_memb_read_lock();
	size_t base = cluster_autopath_base(c, &q, &ss);
	urcu_memb_read_unlock();
	return base == 0 || base == 4; /* "\3api" */
}

/* A reader's round (readers.h): the answers of the table c that are wrong. */
static unsigned read_round(void *c)
{
	return !read_db_and_web(c) + !read_client(c) + !read_derived(c);
}

/*
 * Readers on two threads ask while the writer changes every name they ask
 * about, round after round (each change replaces nodes and frees the old
 * ones after a grace period): every answer is one the table held at some
 * moment. Under `make tsan` this is the cluster table's race test.
 */
static void test_readers_beside_the_writer_see_whole_states(void **state)
{
	static const char svc_fmt[] =
		"{\"kind\":\"Service\",\"metadata\":{\"name\":\"db\",\"namespace\":\"prod\"},"
		"\"spec\":{\"clusterIP\":\"%s\",\"clusterIPs\":[\"%s\"],"
		"\"ports\":[{\"name\":\"mysql\",\"port\":3306,\"protocol\":\"TCP\"}]}}";
	static const char slice_web2[] =
		"{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\","
		"\"metadata\":{\"name\":\"web-2\",\"namespace\":\"prod\","
		"\"labels\":{\"kubernetes.io/service-name\":\"web\"}},"
		"\"endpoints\":[{\"addresses\":[\"10.1.0.9\"],\"conditions\":{\"ready\":true}}]}";
	struct cluster *c = *state;
	struct readers readers;
	char json[512];

	add_namespace(c, "team");
	upsert_pod(c, "prod", "client", "10.1.0.50", "", "Running", false);
	readers_start(&readers, read_round, c);
	readers_wait_reading(&readers);
	for (int round = 0; round < WRITER_ROUNDS; round++) {
		const char *ip = round % 2 ? "10.96.0.6" : "10.96.0.5";
		snprintf(json, sizeof json, svc_fmt, ip, ip);
		UPSERT(cluster_service_upsert, c, json);
		if (round % 2)
			UPSERT(cluster_slice_upsert, c, slice_web2);
		else
			cluster_slice_remove(c, "prod", "web-2");
		upsert_pod(c, round % 3 ? "prod" : "team", "client", "10.1.0.50", "", "Running",
			   false);
	}
	readers_stop(&readers);
}

/* Services (with a ClusterIP) and slices (4 endpoints) to fill the tables
 * past several sizes. */
#define FILLERS 6000

static void upsert_filler(struct cluster *c, int i)
{
	char json[1024];
	int k = i * 4;

	snprintf(json, sizeof json,
		 "{\"kind\":\"Service\",\"metadata\":{\"name\":\"fill%d\",\"namespace\":\"prod\"},"
		 "\"spec\":{\"clusterIP\":\"10.100.%d.%d\",\"clusterIPs\":[\"10.100.%d.%d\"]}}",
		 i, i / 256, i % 256, i / 256, i % 256);
	UPSERT(cluster_service_upsert, c, json);
	snprintf(json, sizeof json,
		 "{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\","
		 "\"metadata\":{\"name\":\"fill%d-s\",\"namespace\":\"prod\","
		 "\"labels\":{\"kubernetes.io/service-name\":\"fill%d\"}},"
		 "\"endpoints\":[{\"addresses\":[\"10.200.%d.%d\"]},{\"addresses\":[\"10.200.%d.%d\"]},"
		 "{\"addresses\":[\"10.200.%d.%d\"]},{\"addresses\":[\"10.200.%d.%d\"]}]}",
		 i, i, k / 256, k % 256, (k + 1) / 256, (k + 1) % 256, (k + 2) / 256, (k + 2) % 256,
		 (k + 3) / 256, (k + 3) % 256);
	UPSERT(cluster_slice_upsert, c, json);
}

/*
 * The writer resizes its tables as they fill and as they empty (table.c):
 * readers asking about names that stay meanwhile always get them, each
 * name added is answered with its data, and each name removed is gone.
 */
static void test_tables_grow_and_shrink_beside_readers(void **state)
{
	struct cluster *c = *state;
	struct readers readers;
	struct reply r;

	readers_start(&readers, read_round, c);
	for (int i = 0; i < FILLERS; i++)
		upsert_filler(c, i);
	for (int i = 0; i < FILLERS; i += 997) {
		char name[128], ptr[64];
		int k = i * 4 + 3;
		snprintf(name, sizeof name, "fill%d.prod.svc.cluster.local", i);
		ask(c, name, DNS_T_A, &r);
		snprintf(ptr, sizeof ptr, "10.100.%d.%d", i / 256, i % 256);
		assert_true(has_answer_address(&r, DNS_T_A, ptr));
		snprintf(ptr, sizeof ptr, "%d.%d.200.10.in-addr.arpa", k % 256, k / 256);
		ask(c, ptr, DNS_T_PTR, &r);
		assert_int_equal(rcode(&r), DNS_R_NOERROR);
		assert_int_equal(r.v->an, 1);
	}
	for (int i = 0; i < FILLERS; i++) {
		char name[32];
		snprintf(name, sizeof name, "fill%d", i);
		cluster_service_remove(c, "prod", name);
		snprintf(name, sizeof name, "fill%d-s", i);
		cluster_slice_remove(c, "prod", name);
	}
	assert_nxdomain(c, "fill0.prod.svc.cluster.local");
	assert_nxdomain(c, "fill5999.prod.svc.cluster.local");
	ask(c, "3.0.200.10.in-addr.arpa", DNS_T_PTR, &r);
	assert_int_equal(r.v->an, 0);
	readers_stop(&readers);
}

static void test_answering_allocates_nothing_and_takes_no_mutex(void **state)
{
	static const struct {
		const char *name;
		uint16_t type;
	} cases[] = {
		{"db.prod.svc.cluster.local", DNS_T_A},
		{"_mysql._tcp.db.prod.svc.cluster.local", DNS_T_SRV},
		{"web.prod.svc.cluster.local", DNS_T_A},
		{"5.0.96.10.in-addr.arpa", DNS_T_PTR},
		{"10-1-0-9.prod.pod.cluster.local", DNS_T_A},
		{"nope.prod.svc.cluster.local.prod.svc.cluster.local", DNS_T_A},
		{"db.prod.svc.cluster.local", DNS_T_TXT},
		{"example.org", DNS_T_A},
		/* derived at query time from the Services' snapshots */
		{"db.prod.svc.cluster.local", DNS_T_SRV},
		{"_tcp.db.prod.svc.cluster.local", DNS_T_SRV},
		{"_http._tcp.web.prod.svc.cluster.local", DNS_T_SRV},
		{"web-0.web.prod.svc.cluster.local", DNS_T_A},
		{"10-1-0-2.web.prod.svc.cluster.local", DNS_T_A},
		{"web-2.web.prod.svc.cluster.local", DNS_T_A},
		{"1.0.1.10.in-addr.arpa", DNS_T_PTR},
		{"5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa", DNS_T_PTR},
		{"10-1-0-7.prod.pod.cluster.local", DNS_T_A},
		/* ports found through a wide Service's index (upserted below) */
		{"_p31._udp.w60.prod.svc.cluster.local", DNS_T_SRV},
		{"_p59._sctp.w60.prod.svc.cluster.local", DNS_T_A},
		{"_nope._tcp.w60.prod.svc.cluster.local", DNS_T_SRV},
		{"_sctp.w60.prod.svc.cluster.local", DNS_T_SRV},
		{"w60.prod.svc.cluster.local", DNS_T_SRV},
		{"_dup-b._tcp.whl.prod.svc.cluster.local", DNS_T_SRV},
		{"_p0._tcp.whl.prod.svc.cluster.local", DNS_T_A},
		{"_p0._udp.whl.prod.svc.cluster.local", DNS_T_SRV},
	};
	struct reply r;
	const struct sockaddr_storage *client;

	if (!alloc_counting_works()) {
		print_message("not linked with -Wl,--wrap=malloc,...: see the Makefile\n");
		skip();
	}
	upsert_pod(*state, "prod", "client", "10.1.0.50", "", "Running", false);
	upsert_wide_service(*state, 60);
	upsert_wide_headless(*state, 60);
	client = peer("10.1.0.50");
	urcu_memb_barrier(); /* the setup's deferred frees run now, not while counting */
	for (int round = 0; round < 100; round++) {
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			struct dns_query q;
			make_query(&q, cases[i].name, cases[i].type);
			counting = true;
			answer_query(*state, &q, &r, 1232);
			urcu_memb_read_lock();
			cluster_autopath_base(*state, &q, client);
			urcu_memb_read_unlock();
			counting = false;
		}
	}
	assert_int_equal(forbidden_calls, 0);

	/* and the wrap reaches library code: an update allocates */
	counting = true;
	add_namespace(*state, "another");
	counting = false;
	assert_true(forbidden_calls > 0);
}

/*
 * Namespaces are named by tenants: 2,048 names whose unkeyed string hash
 * agrees (json-c's "perl-like" one, which a program may pick for every
 * json-c table of the process: json_global_set_string_hash) would all
 * start at one slot of a linear-probing table, about two million probes
 * in all. The model's tables hash with their own key, whatever json-c's
 * setting: about one probe per name.
 */
/* The slots a lookup of every key of t steps over past its own (linear probing). */
static unsigned long probes(const struct lh_table *t)
{
	unsigned long sum = 0;
	struct lh_entry *e;

	lh_foreach(t, e) {
		unsigned long home = t->hash_fn(lh_entry_k(e)) % (unsigned long)t->size;
		unsigned long at = (unsigned long)(e - t->table);
		sum += (at + (unsigned long)t->size - home) % (unsigned long)t->size;
	}
	return sum;
}

static void test_namespaces_chosen_to_collide_spread(void **state)
{
	struct cluster *c = *state;
	int before = lh_table_length(c->namespaces);
	char name[32];

	/* "az" and "c8" add the same to the hash at any place: 2^11 names of 22 bytes */
	for (unsigned i = 0; i < 2048; i++) {
		for (unsigned b = 0; b < 11; b++)
			memcpy(name + 2 * b, i >> b & 1 ? "c8" : "az", 2);
		name[22] = '\0';
		add_namespace(c, name);
	}
	assert_int_equal(lh_table_length(c->namespaces), before + 2048);
	unsigned long n = probes(c->namespaces);
	if (n >= 4 * 2048)
		fail_msg("%lu probes for 2,048 namespaces", n);
}

static int setup_perllike(void **state)
{
	json_global_set_string_hash(JSON_C_STR_HASH_PERLLIKE);
	return setup(state);
}

static int teardown_perllike(void **state)
{
	json_global_set_string_hash(JSON_C_STR_HASH_DFLT);
	return free_cluster_and_unregister(state);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, free_cluster_and_unregister)
#define T_RCU_ONLY(name) cmocka_unit_test_setup_teardown(name, register_thread, unregister_thread)
	const struct CMUnitTest tests[] = {
		T(test_cluster_ip_service_has_every_cluster_ip),
		cmocka_unit_test_setup_teardown(test_namespaces_chosen_to_collide_spread,
						setup_perllike, teardown_perllike),
		T(test_any_gets_one_rrset),
		T(test_named_ports_get_srv_with_target_addresses),
		T(test_headless_service_lists_ready_endpoints),
		T(test_headless_srv_names_each_endpoint),
		T(test_endpoint_hostname_that_is_no_label_falls_back_to_the_dashed_ip),
		T(test_publish_not_ready_addresses_is_honoured),
		T(test_watched_service_reports_ready_endpoints_on_change),
		T(test_headless_without_ready_endpoints_is_nxdomain),
		T(test_ptr_for_cluster_ips_and_endpoints),
		T(test_external_name_is_a_cname_chased_elsewhere),
		T(test_names_that_fit_no_shape_are_nxdomain),
		T(test_existing_names_without_the_type_are_nodata),
		T(test_service_without_addresses_delivered_again_stays_nodata),
		T(test_namespace_names_follow_the_namespace),
		T(test_apex_and_dns_version),
		T(test_insecure_pods_need_an_existing_namespace),
		T(test_verified_pods_must_exist),
		T(test_service_changes_and_deletion_update_only_its_names),
		T(test_ptr_shared_by_two_services_keeps_both),
		T(test_slices_before_their_service_count_once_it_arrives),
		T(test_a_slice_serving_nothing_keeps_its_service_entry_until_it_goes),
		T(test_nothing_is_answered_before_the_first_sync),
		T(test_objects_without_names_are_ignored),
		T(test_autopath_base_is_for_this_nodes_pods_in_their_namespace),
		T(test_autopath_skips_host_network_finished_and_deleted_pods),
		T(test_autopath_address_reused_by_a_new_pod_follows_it),
		T_RCU_ONLY(test_ports_past_the_bound_are_cut_logged_once_and_counted),
		T_RCU_ONLY(test_endpoints_past_the_bound_are_left_out_of_their_service_only),
		T_RCU_ONLY(test_a_hostname_past_the_name_length_falls_back_to_the_dashed_address),
		T(test_each_port_of_a_wide_service_answers_by_name_and_protocol),
		T(test_a_wide_service_name_has_one_srv_per_port_number),
		T(test_each_port_of_a_wide_headless_service_names_every_endpoint),
		T(test_readers_beside_the_writer_see_whole_states),
		T(test_tables_grow_and_shrink_beside_readers),
		T(test_answering_allocates_nothing_and_takes_no_mutex),
	};
#undef T_RCU_ONLY
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}
