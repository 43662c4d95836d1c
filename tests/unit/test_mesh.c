/*
 * Unit tests for the mesh (src/mesh/) through query_handle, as a worker
 * asks: Istio's ServiceEntry hosts answered with Istio's name-table rules
 * (addresses, CIDRs, istiod's allocation and its opt-out, headless entries
 * from selected Pods and WorkloadEntries, merging, several namespaces,
 * wildcards, exportTo by the client's namespace, the search-path alias,
 * a Service's name winning, types other than A/AAAA going upstream),
 * changes and removals, the selector watches the mesh asks for, and the
 * hot-path promise: answering allocates nothing and takes no mutex (this
 * binary is linked with --wrap, see the Makefile). Each ServiceEntry is
 * JSON shaped as the API server returns networking.istio.io/v1 objects.
 */
#include <pthread.h>
#include <sched.h>
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
#include <urcu/urcu-memb.h>

#include "alloc_count.h"
#include "ask.h"
#include "cache/cache.h"
#include "cluster/cluster.h"
#include "cluster/objects.h"
#include "config/config.h"
#include "cluster_fixture.h"
#include "config_text.h"
#include "mesh/mesh.h"
#include "mesh/objects.h"
#include "query/query.h"
#include "readers.h"

#define NOW 1000

static struct cache *cache;
static struct cluster *cluster;
static struct mesh *mesh;
static char resolv_conf[ASK_PATH_MAX];

static const char *prod_client = "10.1.0.50"; /* a pod of this node in prod */
static const char *team_client = "10.1.0.51"; /* ... in team */
static const char *vm_client = "10.1.9.9";    /* no pod of this node: namespace unknown */

/* ---- objects ---------------------------------------------------------------- */

static struct kube_json_doc *parse(const char *json)
{
	struct kube_json_doc *doc = kube_json_parse(json, strlen(json));

	assert_non_null(doc);
	return doc;
}

static void apply_mesh(void (*fn)(struct mesh *, const struct kube_json *), const char *json)
{
	struct kube_json_doc *doc = parse(json);

	fn(mesh, kube_json_root(doc));
	kube_json_doc_free(doc);
}

/*
 * A ServiceEntry as the API server returns it; spec and status are JSON
 * members ("" for none), created its creationTimestamp, labels its labels
 * member ("" for none).
 */
static void entry(const char *ns, const char *name, const char *created, const char *labels,
		  const char *spec, const char *status)
{
	char json[4096];

	snprintf(json, sizeof json,
		 "{\"apiVersion\":\"networking.istio.io/v1\",\"kind\":\"ServiceEntry\","
		 "\"metadata\":{\"creationTimestamp\":\"%s\",\"generation\":1,%s%s"
		 "\"name\":\"%s\",\"namespace\":\"%s\",\"resourceVersion\":\"7\","
		 "\"uid\":\"0b7f6c4a-3d8e-4f3e-9d7a-2f1c5e6b7a80\"},"
		 "\"spec\":{%s}%s%s%s}",
		 created, labels, *labels ? "," : "", name, ns, spec, *status ? ",\"status\":{" : "",
		 status, *status ? "}" : "");
	apply_mesh(mesh_entry_upsert, json);
}

/* ---- the selector watches the mesh asks for (a stand-in for the client) ------------ */

static struct {
	char ns[64], selector[256];
	void *tag;
	bool stopped;
} watches[8];
static int n_watches;

static void *watch(void *ctx, const char *ns, const char *selector, void *tag)
{
	(void)ctx;
	assert_true(n_watches < 8);
	snprintf(watches[n_watches].ns, sizeof watches[n_watches].ns, "%s", ns);
	snprintf(watches[n_watches].selector, sizeof watches[n_watches].selector, "%s", selector);
	watches[n_watches].tag = tag;
	watches[n_watches].stopped = false;
	return &watches[n_watches++];
}

static void unwatch(void *ctx, void *handle)
{
	(void)ctx;
	((typeof(&watches[0]))handle)->stopped = true;
}

/* A Pod of the selector watch w (a Pod the API server picked for it). */
static void selected_pod(int w, const char *name, const char *ip, bool ready, bool deleting)
{
	char json[1024];

	snprintf(json, sizeof json,
		 "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\"%s},"
		 "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Initialized\","
		 "\"status\":\"True\"},{\"type\":\"Ready\",\"status\":\"%s\"}],"
		 "\"podIP\":\"%s\",\"podIPs\":[{\"ip\":\"%s\"}]}}",
		 name, watches[w].ns,
		 deleting ? ",\"deletionTimestamp\":\"2024-05-01T10:00:00Z\"" : "",
		 ready ? "True" : "False", ip, ip);
	struct kube_json_doc *doc = parse(json);
	mesh_pod_upsert(mesh, watches[w].tag, kube_json_root(doc));
	kube_json_doc_free(doc);
}

static void workload(const char *ns, const char *name, const char *address,
		     const char *spec_labels, const char *meta_labels, const char *health)
{
	char json[1024];

	snprintf(json, sizeof json,
		 "{\"apiVersion\":\"networking.istio.io/v1\",\"kind\":\"WorkloadEntry\","
		 "\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"labels\":{%s}%s},"
		 "\"spec\":{\"address\":\"%s\",\"labels\":{%s}}%s}",
		 name, ns, meta_labels,
		 health ? ",\"annotations\":{\"proxy.istio.io/health-checks-enabled\":\"true\"}" : "",
		 address, spec_labels, health ? health : "");
	apply_mesh(mesh_workload_upsert, json);
}

/* ---- set-up ------------------------------------------------------------------- */

static struct config *load_config(void)
{
	char yaml[512];

	snprintf(yaml, sizeof yaml,
		 "cluster: {domain: cluster.local, ttl: 5s, autopath: true}\n"
		 "mesh: {istio: true, ttl: 30s}\n"
		 "upstream: {resolv_conf: \"%s\"}\n", resolv_conf);
	return config_of(yaml);
}

/* Namespaces prod and team, a client pod in each, a Service shop/db; the
 * node searches corp.internal. */
static int setup(void **state)
{
	struct cache_config cc = {.max_bytes = 1 << 20, .max_ttl = 86400,
				  .negative_max_ttl = 3600, .servfail_ttl = 5};
	struct config *cfg;
	char err[CONFIG_ERR_MAX];

	(void)state;
	urcu_memb_register_thread();
	ask_resolv_conf(resolv_conf, "mesh", "nameserver 192.0.2.53\nsearch corp.internal\n");

	cfg = load_config();
	cluster = cluster_new(cfg, err, sizeof err);
	mesh = mesh_new(cfg, err, sizeof err);
	assert_non_null(cluster);
	assert_non_null(mesh);
	n_watches = 0;
	mesh_bind(mesh, &(struct mesh_watcher){.watch = watch, .unwatch = unwatch});
	for (const char *const *ns = (const char *const[]){"prod", "team", "shop", NULL}; *ns; ns++) {
		char json[128];
		snprintf(json, sizeof json, "{\"metadata\":{\"name\":\"%s\"}}", *ns);
		UPSERT(cluster_namespace_upsert, cluster, json);
	}
	UPSERT(cluster_service_upsert, cluster,
	       "{\"kind\":\"Service\",\"metadata\":{\"name\":\"db\",\"namespace\":\"shop\"},"
	       "\"spec\":{\"clusterIP\":\"10.96.0.5\",\"clusterIPs\":[\"10.96.0.5\"]}}");
	add_node_pod(cluster, "prod", "client", prod_client);
	add_node_pod(cluster, "team", "client", team_client);
	cluster_set_synced(cluster);
	cache = cache_new(&cc);
	assert_non_null(cache);
	struct query_sources *s = query_sources_build(
		cfg, &(struct query_names){.cluster = cluster, .mesh = mesh}, cache, err, sizeof err);
	assert_non_null(s);
	query_sources_publish(s);
	config_free(cfg);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	query_sources_retire();
	cache_free(cache);
	mesh_free(mesh);
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

/* The answer's addresses of the asked type, in order, space-separated. */
static const char *addresses(const struct asked *o)
{
	static char text[1024];
	size_t used = 0;

	text[0] = '\0';
	for (int i = 0; i < o->r.v->an; i++) {
		int type = o->r.v->rr[i].type;
		if (type != DNS_T_A && type != DNS_T_AAAA)
			continue;
		if (used)
			text[used++] = ' ';
		inet_ntop(type == DNS_T_A ? AF_INET : AF_INET6, reply_rdata(&o->r, i), text + used,
			  (socklen_t)(sizeof text - used));
		used += strlen(text + used);
	}
	return text;
}

/* The mesh answered: AA, NOERROR, TTL 30, these addresses ("" for NODATA). */
static void assert_mesh(const char *name, uint16_t qtype, const char *ip, const char *want)
{
	struct asked o;

	ask(name, qtype, ip, &o);
	if (o.source != QUERY_SOURCE_MESH)
		fail_msg("%s: not answered by the mesh (source %d, rcode %d, len %zu, an %d)", name, o.source, o.r.len ? o.r.v->flags & 0xf : -1, o.r.len, o.r.len ? o.r.v->an : -1);
	assert_int_equal(o.r.v->flags & 0xf, DNS_R_NOERROR);
	assert_true(o.r.v->flags & DNS_F_AA);
	assert_int_equal(o.r.v->ns, 0); /* no SOA: Istio's proxy gives none */
	for (int i = 0; i < o.r.v->an; i++)
		assert_int_equal(o.r.v->rr[i].ttl, 30);
	assert_string_equal(addresses(&o), want);
}

/* Not the mesh's: the name goes upstream like any external name. */
static void assert_upstream(const char *name, uint16_t qtype, const char *ip)
{
	struct asked o;

	ask(name, qtype, ip, &o);
	assert_int_equal(o.source, QUERY_SOURCE_UPSTREAM);
	assert_int_equal(o.upstream, QUERY_UPSTREAM_ASK);
}

static void assert_nxdomain(const char *name, uint16_t qtype, const char *ip)
{
	struct asked o;

	ask(name, qtype, ip, &o);
	assert_int_equal(o.source, QUERY_SOURCE_CLUSTER);
	assert_int_equal(o.r.v->flags & 0xf, DNS_R_NXDOMAIN);
}

#define SE_HOSTS(h) "\"hosts\":[" h "]"
#define T0 "2024-05-01T10:00:00Z"
#define T1 "2024-05-02T10:00:00Z"

/* ---- where addresses come from ------------------------------------------------- */

static void test_spec_addresses_ips_and_single_address_cidrs(void **state)
{
	(void)state;
	entry("prod", "api", T0, "",
	      SE_HOSTS("\"api.example.com\"") ",\"addresses\":[\"192.0.2.1\",\"192.0.2.2/32\","
	      "\"198.51.100.0/24\",\"2001:db8::1\",\"2001:db8::2/128\",\"2001:db8:1::/64\"],"
	      "\"ports\":[{\"number\":443,\"name\":\"https\",\"protocol\":\"TLS\"}],"
	      "\"location\":\"MESH_EXTERNAL\",\"resolution\":\"STATIC\"", "");
	assert_mesh("api.example.com", DNS_T_A, prod_client, "192.0.2.1 192.0.2.2");
	assert_mesh("API.Example.COM", DNS_T_AAAA, NULL, "2001:db8::1 2001:db8::2");
	/* other types are not local: they go upstream */
	assert_upstream("api.example.com", DNS_T_MX, prod_client);
	assert_upstream("api.example.com", DNS_T_TXT, prod_client);
	assert_upstream("other.example.com", DNS_T_A, prod_client);

	/* only wide CIDRs: no address at all, no local name */
	entry("prod", "wide", T0, "",
	      SE_HOSTS("\"wide.example.com\"") ",\"addresses\":[\"198.51.100.0/24\"],"
	      "\"resolution\":\"STATIC\"", "");
	assert_upstream("wide.example.com", DNS_T_A, prod_client);
}

static void test_istiod_allocation_unless_none_or_opted_out(void **state)
{
	(void)state;
	entry("prod", "ext", T0, "",
	      SE_HOSTS("\"a.example.org\",\"b.example.org\"") ",\"resolution\":\"DNS\","
	      "\"ports\":[{\"number\":80,\"name\":\"http\",\"protocol\":\"HTTP\"}]",
	      "\"addresses\":[{\"value\":\"240.240.0.1\",\"host\":\"a.example.org\"},"
	      "{\"value\":\"2001:2::1\",\"host\":\"a.example.org\"},"
	      "{\"value\":\"240.240.0.2\",\"host\":\"b.example.org\"}]");
	assert_mesh("a.example.org", DNS_T_A, prod_client, "240.240.0.1");
	assert_mesh("a.example.org", DNS_T_AAAA, prod_client, "2001:2::1");
	assert_mesh("b.example.org", DNS_T_A, team_client, "240.240.0.2");
	assert_mesh("b.example.org", DNS_T_AAAA, team_client, ""); /* known, no v6: NODATA */

	/* the opt-out label: Istio does not use the allocation, so neither do we */
	entry("prod", "ext", T0, "\"labels\":{\"networking.istio.io/enable-autoallocate-ip\":\"False\"}",
	      SE_HOSTS("\"a.example.org\"") ",\"resolution\":\"DNS\"",
	      "\"addresses\":[{\"value\":\"240.240.0.1\",\"host\":\"a.example.org\"}]");
	assert_upstream("a.example.org", DNS_T_A, prod_client);
	assert_upstream("b.example.org", DNS_T_A, prod_client); /* no longer a host */

	/* resolution DNS with endpoints and no allocation: never the endpoints' addresses */
	entry("prod", "dns", T0, "",
	      SE_HOSTS("\"c.example.org\"") ",\"resolution\":\"DNS\","
	      "\"endpoints\":[{\"address\":\"192.0.2.50\"}]", "");
	assert_upstream("c.example.org", DNS_T_A, prod_client);
}

static void test_resolution_none_is_headless(void **state)
{
	(void)state;
	/* without addresses or a selector: its endpoints' IPs (a DNS name is no IP) */
	entry("prod", "static", T0, "",
	      SE_HOSTS("\"legacy.corp.example\"") ",\"resolution\":\"NONE\","
	      "\"endpoints\":[{\"address\":\"10.9.0.2\"},{\"address\":\"10.9.0.1\"},"
	      "{\"address\":\"vm.corp.example\"},{\"address\":\"fd00::9\"}]", "");
	assert_mesh("legacy.corp.example", DNS_T_A, prod_client, "10.9.0.2 10.9.0.1");
	assert_mesh("legacy.corp.example", DNS_T_AAAA, prod_client, "fd00::9");

	/* NONE with no endpoint at all: not local */
	entry("prod", "passthrough", T0, "", SE_HOSTS("\"pass.corp.example\"") ",\"resolution\":\"NONE\"",
	      "");
	assert_upstream("pass.corp.example", DNS_T_A, prod_client);
}

static void test_selected_pods_and_workload_entries(void **state)
{
	(void)state;
	entry("prod", "vms", T0, "",
	      SE_HOSTS("\"db.vms.internal\"") ",\"resolution\":\"NONE\","
	      "\"workloadSelector\":{\"labels\":{\"tier\":\"db\",\"app\":\"pg\"}}", "");
	assert_int_equal(n_watches, 1);
	assert_string_equal(watches[0].ns, "prod");
	assert_string_equal(watches[0].selector, "app=pg,tier=db"); /* sorted: one watch per selector */
	/* no ready endpoint yet: not local */
	assert_upstream("db.vms.internal", DNS_T_A, prod_client);

	selected_pod(0, "pg-0", "10.1.2.3", true, false);
	selected_pod(0, "pg-1", "10.1.2.4", false, false); /* not ready */
	selected_pod(0, "pg-2", "10.1.2.5", true, true);   /* being deleted */
	assert_mesh("db.vms.internal", DNS_T_A, prod_client, "10.1.2.3");

	/* WorkloadEntries of its namespace whose labels (spec's, metadata's winning) match */
	workload("prod", "vm-1", "10.20.0.1", "\"app\":\"pg\",\"tier\":\"db\"", "", NULL);
	workload("prod", "vm-2", "10.20.0.2", "\"app\":\"pg\",\"tier\":\"web\"", "\"tier\":\"db\"",
		 NULL);
	workload("prod", "vm-3", "10.20.0.3", "\"app\":\"pg\",\"tier\":\"db\"", "\"tier\":\"cache\"",
		 NULL);
	workload("team", "vm-4", "10.20.0.4", "\"app\":\"pg\",\"tier\":\"db\"", "", NULL);
	workload("prod", "vm-5", "vm5.corp.example", "\"app\":\"pg\",\"tier\":\"db\"", "", NULL);
	/* health checks on: healthy only when the Healthy condition is True */
	workload("prod", "vm-6", "10.20.0.6", "\"app\":\"pg\",\"tier\":\"db\"", "",
		 ",\"status\":{\"conditions\":[{\"type\":\"Healthy\",\"status\":\"False\"}]}");
	workload("prod", "vm-7", "10.20.0.7", "\"app\":\"pg\",\"tier\":\"db\"", "",
		 ",\"status\":{\"conditions\":[{\"type\":\"Healthy\",\"status\":\"True\"}]}");
	assert_mesh("db.vms.internal", DNS_T_A, prod_client, "10.1.2.3 10.20.0.1 10.20.0.2 10.20.0.7");

	/* changes: a pod turns ready, one goes, a WorkloadEntry's labels no longer match */
	selected_pod(0, "pg-1", "10.1.2.4", true, false);
	mesh_pod_remove(mesh, watches[0].tag, "prod", "pg-0");
	workload("prod", "vm-1", "10.20.0.1", "\"app\":\"pg\",\"tier\":\"batch\"", "", NULL);
	mesh_workload_remove(mesh, "prod", "vm-2");
	assert_mesh("db.vms.internal", DNS_T_A, prod_client, "10.1.2.4 10.20.0.7");

	/* a second entry with the same selector shares the watch; the last one out stops it */
	entry("prod", "vms2", T1, "",
	      SE_HOSTS("\"db2.vms.internal\"") ",\"resolution\":\"NONE\","
	      "\"workloadSelector\":{\"labels\":{\"app\":\"pg\",\"tier\":\"db\"}}", "");
	assert_int_equal(n_watches, 1);
	assert_mesh("db2.vms.internal", DNS_T_A, prod_client, "10.1.2.4 10.20.0.7");
	mesh_entry_remove(mesh, "prod", "vms");
	assert_false(watches[0].stopped);
	mesh_entry_remove(mesh, "prod", "vms2");
	assert_true(watches[0].stopped);
	assert_upstream("db2.vms.internal", DNS_T_A, prod_client);
	struct mesh_stats st;
	mesh_stats(mesh, &st);
	assert_int_equal(st.selectors, 0);
	assert_int_equal(st.pods, 0);
	assert_int_equal(st.hosts, 0);
}

/*
 * A WorkloadEntry or Pod without a name or a namespace (the API server never
 * sends one; a broken stream might) is not taken: nothing could remove it
 * again, and a ServiceEntry without them is refused the same way.
 */
static void test_objects_without_a_name_or_namespace_are_not_taken(void **state)
{
	struct mesh_stats st;
	(void)state;

	entry("prod", "vms", T0, "",
	      SE_HOSTS("\"db.vms.internal\"") ",\"resolution\":\"NONE\","
	      "\"workloadSelector\":{\"labels\":{\"app\":\"pg\"}}", "");
	workload("prod", "", "10.20.0.1", "\"app\":\"pg\"", "", NULL);
	workload("", "vm-2", "10.20.0.2", "\"app\":\"pg\"", "", NULL);
	selected_pod(0, "", "10.1.2.3", true, false);
	mesh_stats(mesh, &st);
	assert_int_equal(st.workloads, 0);
	assert_int_equal(st.pods, 0);
	assert_upstream("db.vms.internal", DNS_T_A, prod_client);
	mesh_entry_remove(mesh, "prod", "vms");
}

/* ---- one host in several entries ---------------------------------------------------- */

static void test_entries_of_one_namespace_merge(void **state)
{
	(void)state;
	entry("prod", "one", T0, "",
	      SE_HOSTS("\"shared.example.com\"") ",\"addresses\":[\"192.0.2.1\",\"192.0.2.2\"]", "");
	entry("prod", "two", T1, "",
	      SE_HOSTS("\"shared.example.com\"") ",\"addresses\":[\"192.0.2.2\",\"192.0.2.3\"]", "");
	assert_mesh("shared.example.com", DNS_T_A, prod_client, "192.0.2.1 192.0.2.2 192.0.2.3");
	assert_mesh("shared.example.com", DNS_T_A, vm_client, "192.0.2.1 192.0.2.2 192.0.2.3");
	mesh_entry_remove(mesh, "prod", "one");
	assert_mesh("shared.example.com", DNS_T_A, prod_client, "192.0.2.2 192.0.2.3");
}

static void test_own_namespace_wins_then_the_oldest(void **state)
{
	(void)state;
	entry("team", "newer", T1, "", SE_HOSTS("\"svc.example.com\"") ",\"addresses\":[\"192.0.2.20\"]",
	      "");
	entry("shop", "older", T0, "", SE_HOSTS("\"svc.example.com\"") ",\"addresses\":[\"192.0.2.10\"]",
	      "");
	assert_mesh("svc.example.com", DNS_T_A, team_client, "192.0.2.20"); /* its own namespace */
	assert_mesh("svc.example.com", DNS_T_A, prod_client, "192.0.2.10"); /* the oldest */
	assert_mesh("svc.example.com", DNS_T_A, vm_client, "192.0.2.10");
	/* the own namespace wins even when its entry cannot answer (as Istio picks, then skips) */
	entry("prod", "mine", T1, "", SE_HOSTS("\"svc.example.com\"") ",\"resolution\":\"NONE\"", "");
	assert_upstream("svc.example.com", DNS_T_A, prod_client);
	/* created in the same second: namespace/name decides, prod/mine before team/newer */
	mesh_entry_remove(mesh, "shop", "older");
	assert_upstream("svc.example.com", DNS_T_A, vm_client);
	mesh_entry_remove(mesh, "prod", "mine");
	assert_mesh("svc.example.com", DNS_T_A, vm_client, "192.0.2.20");
}

static void test_a_service_wins_over_entries(void **state)
{
	struct asked o;

	(void)state;
	entry("prod", "k8s", T0, "",
	      SE_HOSTS("\"db.shop.svc.cluster.local\",\"cache.shop.svc.cluster.local\"")
	      ",\"addresses\":[\"192.0.2.99\"]", "");
	ask("db.shop.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_int_equal(o.source, QUERY_SOURCE_CLUSTER);
	assert_string_equal(addresses(&o), "10.96.0.5");
	ask("db.shop.svc.cluster.local", DNS_T_AAAA, prod_client, &o); /* the Service's NODATA */
	assert_int_equal(o.source, QUERY_SOURCE_CLUSTER);
	assert_int_equal(o.r.v->ns, 1);
	/* no such Service: the entry's host */
	assert_mesh("cache.shop.svc.cluster.local", DNS_T_A, prod_client, "192.0.2.99");
	assert_nxdomain("cache.shop.svc.cluster.local", DNS_T_SRV, prod_client);
}

/* ---- wildcards -------------------------------------------------------------------- */

static void test_wildcards_answer_names_below_them(void **state)
{
	struct asked o;

	(void)state;
	entry("prod", "wild", T0, "", SE_HOSTS("\"*.example.net\"") ",\"addresses\":[\"192.0.2.30\"]",
	      "");
	entry("prod", "wild-b", T0, "",
	      SE_HOSTS("\"*.b.example.net\"") ",\"addresses\":[\"192.0.2.31\"]", "");
	entry("prod", "exact", T0, "",
	      SE_HOSTS("\"api.example.net\"") ",\"addresses\":[\"192.0.2.32\"]", "");
	ask("Foo.example.net", DNS_T_A, prod_client, &o);
	assert_int_equal(o.source, QUERY_SOURCE_MESH);
	assert_name_equal(o.r.v->rr[0].owner, "Foo.example.net."); /* the question */
	assert_string_equal(addresses(&o), "192.0.2.30");
	assert_mesh("x.y.example.net", DNS_T_A, prod_client, "192.0.2.30");
	assert_mesh("x.b.example.net", DNS_T_A, prod_client, "192.0.2.31"); /* the closest */
	assert_mesh("api.example.net", DNS_T_A, prod_client, "192.0.2.32"); /* exact first */
	assert_upstream("example.net", DNS_T_A, prod_client);              /* not the parent */
	assert_mesh("b.example.net", DNS_T_A, prod_client, "192.0.2.30");
	/* hosts that are no DNS name, or would take every name, are not served */
	entry("prod", "bad", T0, "",
	      SE_HOSTS("\"*\",\"a.*.example.org\",\"*foo.example.org\"") ",\"addresses\":[\"192.0.2.33\"]",
	      "");
	assert_upstream("x.example.org", DNS_T_A, prod_client);
	assert_upstream("a.x.example.org", DNS_T_A, prod_client);
}

/* ---- visibility ---------------------------------------------------------------------- */

static void test_export_to_by_the_clients_namespace(void **state)
{
	(void)state;
	entry("prod", "private", T0, "",
	      SE_HOSTS("\"private.example.com\"") ",\"addresses\":[\"192.0.2.40\"],\"exportTo\":[\".\"]",
	      "");
	entry("prod", "listed", T0, "",
	      SE_HOSTS("\"listed.example.com\"") ",\"addresses\":[\"192.0.2.41\"],"
	      "\"exportTo\":[\"team\"]", "");
	entry("prod", "hidden", T0, "",
	      SE_HOSTS("\"hidden.example.com\"") ",\"addresses\":[\"192.0.2.42\"],\"exportTo\":[\"~\"]",
	      "");
	entry("prod", "public", T0, "",
	      SE_HOSTS("\"public.example.com\"") ",\"addresses\":[\"192.0.2.43\"],\"exportTo\":[\"*\"]",
	      "");
	assert_mesh("private.example.com", DNS_T_A, prod_client, "192.0.2.40");
	assert_upstream("private.example.com", DNS_T_A, team_client);
	assert_upstream("private.example.com", DNS_T_A, vm_client);  /* namespace unknown */
	assert_upstream("private.example.com", DNS_T_A, NULL);
	assert_mesh("listed.example.com", DNS_T_A, team_client, "192.0.2.41");
	assert_upstream("listed.example.com", DNS_T_A, prod_client); /* "." not listed */
	assert_upstream("hidden.example.com", DNS_T_A, prod_client);
	assert_mesh("public.example.com", DNS_T_A, vm_client, "192.0.2.43");
	/* a visible entry of another namespace serves who cannot see the own one's */
	entry("team", "public-twin", T1, "",
	      SE_HOSTS("\"private.example.com\"") ",\"addresses\":[\"192.0.2.44\"]", "");
	assert_mesh("private.example.com", DNS_T_A, vm_client, "192.0.2.44");
	assert_mesh("private.example.com", DNS_T_A, prod_client, "192.0.2.40");
}

/* ---- Istio's search-path alias ------------------------------------------------------ */

static void test_search_path_alias_for_pods_of_that_namespace(void **state)
{
	struct asked o;

	(void)state;
	entry("prod", "api", T0, "",
	      SE_HOSTS("\"api.example.com\",\"*.wild.example.com\"") ",\"addresses\":[\"192.0.2.1\"]",
	      "");
	ask("api.example.com.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_int_equal(o.source, QUERY_SOURCE_MESH);
	assert_int_equal(o.r.v->flags & 0xf, DNS_R_NOERROR);
	assert_true(o.r.v->flags & DNS_F_AA);
	assert_int_equal(o.r.v->an, 2);
	assert_int_equal(o.r.v->rr[0].type, DNS_T_CNAME);
	assert_name_equal(o.r.v->rr[0].owner, "api.example.com.prod.svc.cluster.local.");
	assert_name_equal(o.r.v->rr[0].target, "api.example.com.");
	assert_int_equal(o.r.v->rr[0].ttl, 30);
	assert_name_equal(o.r.v->rr[1].owner, "api.example.com.");
	assert_string_equal(addresses(&o), "192.0.2.1");
	/* a wildcard's name, by its own name */
	ask("x.wild.example.com.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_name_equal(o.r.v->rr[0].target, "x.wild.example.com.");
	assert_name_equal(o.r.v->rr[1].owner, "x.wild.example.com.");
	/* the host without the type: an empty NOERROR, as Istio's proxy */
	ask("api.example.com.prod.svc.cluster.local", DNS_T_AAAA, prod_client, &o);
	assert_int_equal(o.source, QUERY_SOURCE_MESH);
	assert_int_equal(o.r.v->flags & 0xf, DNS_R_NOERROR);
	assert_int_equal(o.r.v->an + o.r.v->ns, 0);
	/* only for a pod of that namespace */
	assert_nxdomain("api.example.com.prod.svc.cluster.local", DNS_T_A, team_client);
	assert_nxdomain("api.example.com.prod.svc.cluster.local", DNS_T_A, vm_client);
	assert_nxdomain("api.example.com.team.svc.cluster.local", DNS_T_A, prod_client);
}

static void test_autopath_candidates_include_mesh_hosts(void **state)
{
	struct asked o;

	(void)state;
	entry("prod", "corp", T0, "",
	      SE_HOSTS("\"billing.corp.internal\"") ",\"addresses\":[\"192.0.2.60\"]", "");
	/* billing.prod.svc...: NXDOMAIN, its candidates: billing.svc..., billing.cluster.local,
	 * then the node's billing.corp.internal, a mesh host */
	ask("billing.prod.svc.cluster.local", DNS_T_A, prod_client, &o);
	assert_int_equal(o.source, QUERY_SOURCE_MESH);
	assert_int_equal(o.r.v->an, 2);
	assert_name_equal(o.r.v->rr[0].target, "billing.corp.internal.");
	assert_string_equal(addresses(&o), "192.0.2.60");
}

/* ---- changes ---------------------------------------------------------------------------- */

static void test_changes_and_removals_are_served_at_once(void **state)
{
	struct mesh_stats st;

	(void)state;
	entry("prod", "api", T0, "",
	      SE_HOSTS("\"one.example.com\",\"two.example.com\"") ",\"addresses\":[\"192.0.2.1\"]", "");
	assert_mesh("two.example.com", DNS_T_A, prod_client, "192.0.2.1");
	entry("prod", "api", T0, "",
	      SE_HOSTS("\"one.example.com\",\"three.example.com\"") ",\"addresses\":[\"192.0.2.9\"]",
	      "");
	assert_mesh("one.example.com", DNS_T_A, prod_client, "192.0.2.9");
	assert_mesh("three.example.com", DNS_T_A, prod_client, "192.0.2.9");
	assert_upstream("two.example.com", DNS_T_A, prod_client);
	mesh_stats(mesh, &st);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.hosts, 2);
	mesh_entry_remove(mesh, "prod", "api");
	assert_upstream("one.example.com", DNS_T_A, prod_client);
	mesh_stats(mesh, &st);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.hosts, 0);
}

/* ---- readers beside the writer ------------------------------------------------------------ */

#define WRITER_ROUNDS 300

/* One of the states the writer goes through: {1}, {2}, {1 3}, {2 3}. */
static bool whole_state(const char *got)
{
	static const char *const states[] = {"192.0.2.1", "192.0.2.2", "192.0.2.1 192.0.2.3",
					     "192.0.2.2 192.0.2.3", "192.0.2.3 192.0.2.1",
					     "192.0.2.3 192.0.2.2"};

	for (size_t i = 0; i < sizeof states / sizeof states[0]; i++)
		if (strcmp(got, states[i]) == 0)
			return true;
	return false;
}

/*
 * A reader thread's ask: its own buffers (ask() and msg_view.h share
 * static ones), the reply's A records read by hand into text; returns the
 * answer's source.
 */
static enum query_source reader_ask(const char *name, const char *ip, char *text, size_t cap)
{
	struct pkt in;
	uint8_t out[1232];
	struct sockaddr_storage ss = address_of(ip);
	struct query_ask req;
	struct query_stats st = {0};
	struct query_ctx ctx = {.transport = QUERY_UDP, .peer = &ss, .stats = &st, .now = NOW,
				.ask = &req};
	size_t len, pos, used = 0;

	ask_query(&in, name, DNS_T_A);
	urcu_memb_read_lock();
	len = query_handle(in.b, in.len, out, sizeof out, &ctx);
	urcu_memb_read_unlock();
	text[0] = '\0';
	pos = in.len;
	for (unsigned an = len ? rd16(out + 6) : 0; an--;) {
		pos += (out[pos] & 0xc0) == 0xc0 ? 2 : dns_name_len(out + pos);
		uint16_t type = rd16(out + pos), rdlen = rd16(out + pos + 8);
		if (type == DNS_T_A) {
			used += (size_t)snprintf(text + used, cap - used, "%s", used ? " " : "");
			inet_ntop(AF_INET, out + pos + 10, text + used, (socklen_t)(cap - used));
			used += strlen(text + used);
		}
		pos += 10u + rdlen;
	}
	return ctx.source;
}

/* A reader's round (readers.h): the answers that are wrong. */
static unsigned read_round(void *unused)
{
	char got[256];
	unsigned bad = 0;

	(void)unused;
	bad += reader_ask("flip.example.com", prod_client, got, sizeof got) != QUERY_SOURCE_MESH ||
	       !whole_state(got);
	/* there, or not local */
	bad += reader_ask("x.wild.example.com", team_client, got, sizeof got) ==
		       QUERY_SOURCE_MESH && strcmp(got, "192.0.2.9") != 0;
	bad += reader_ask("db.vms.internal", prod_client, got, sizeof got) == QUERY_SOURCE_MESH &&
	       strcmp(got, "10.1.2.3") != 0 && strcmp(got, "10.1.2.3 10.1.2.4") != 0;
	return bad;
}

/*
 * Readers on two threads ask while the writer changes every host they ask
 * about, round after round: an entry's addresses, a second entry joining
 * and leaving its host (one entry inline, two in a list), a wildcard host
 * coming and going, a headless entry's Pods, and tables growing: every
 * answer is one the mesh held at some moment. Under `make tsan` this is
 * the mesh's race test.
 */
static void test_readers_beside_the_writer_see_whole_states(void **state)
{
	struct readers readers;

	(void)state;
	entry("prod", "flip", T0, "", SE_HOSTS("\"flip.example.com\"") ",\"addresses\":[\"192.0.2.1\"]",
	      "");
	entry("prod", "vms", T0, "",
	      SE_HOSTS("\"db.vms.internal\"") ",\"resolution\":\"NONE\","
	      "\"workloadSelector\":{\"labels\":{\"app\":\"pg\"}}", "");
	selected_pod(0, "pg-0", "10.1.2.3", true, false);
	readers_start(&readers, read_round, NULL);
	readers_wait_reading(&readers);
	for (int round = 0; round < WRITER_ROUNDS; round++) {
		char spec[256], name[32];
		snprintf(spec, sizeof spec, SE_HOSTS("\"flip.example.com\"") ",\"addresses\":[\"%s\"]",
			 round % 2 ? "192.0.2.2" : "192.0.2.1");
		entry("prod", "flip", T0, "", spec, "");
		if (round % 3 == 0)
			entry("prod", "flip-b", T1, "",
			      SE_HOSTS("\"flip.example.com\"") ",\"addresses\":[\"192.0.2.3\"]", "");
		else if (round % 3 == 2)
			mesh_entry_remove(mesh, "prod", "flip-b");
		if (round % 2)
			entry("team", "wild", T0, "",
			      SE_HOSTS("\"*.wild.example.com\"") ",\"addresses\":[\"192.0.2.9\"]", "");
		else
			mesh_entry_remove(mesh, "team", "wild");
		selected_pod(0, "pg-1", "10.1.2.4", round % 2, false);
		snprintf(name, sizeof name, "fill-%d", round);
		snprintf(spec, sizeof spec, SE_HOSTS("\"%s.example.org\",\"%s.example.net\"")
			 ",\"addresses\":[\"198.51.100.%d\"]", name, name, round % 250);
		entry("shop", name, T0, "", spec, "");
	}
	readers_stop(&readers);
}

/* ---- the hot-path promise -------------------------------------------------------------- */

static void test_answering_allocates_nothing_and_takes_no_mutex(void **state)
{
	static const struct {
		const char *name;
		uint16_t type;
		const char *client;
	} cases[] = {
		{"api.example.com", DNS_T_A, "10.1.0.50"},               /* exact */
		{"api.example.com", DNS_T_AAAA, "10.1.0.51"},            /* NODATA */
		{"x.y.wild.example.com", DNS_T_A, "10.1.0.50"},          /* wildcard */
		{"private.example.com", DNS_T_A, "10.1.0.51"},           /* not visible: upstream */
		{"api.example.com", DNS_T_MX, "10.1.0.50"},              /* another type */
		{"api.example.com.prod.svc.cluster.local", DNS_T_A, "10.1.0.50"}, /* alias */
		{"nothing.prod.svc.cluster.local", DNS_T_A, "10.1.0.50"}, /* autopath past the mesh */
		{"cache.shop.svc.cluster.local", DNS_T_A, "10.1.9.9"},   /* a host in the zone */
		{"www.elsewhere.org", DNS_T_A, NULL},                    /* no host */
		{"db.vms.internal", DNS_T_A, "10.1.0.50"},               /* headless */
	};
	struct asked o;

	(void)state;
	if (!alloc_counting_works()) {
		print_message("not linked with -Wl,--wrap=malloc,...: see the Makefile\n");
		skip();
	}
	entry("prod", "api", T0, "",
	      SE_HOSTS("\"api.example.com\",\"*.wild.example.com\",\"cache.shop.svc.cluster.local\"")
	      ",\"addresses\":[\"192.0.2.1\",\"192.0.2.2\"]", "");
	entry("prod", "private", T0, "",
	      SE_HOSTS("\"private.example.com\"") ",\"addresses\":[\"192.0.2.40\"],\"exportTo\":[\".\"]",
	      "");
	entry("prod", "vms", T0, "",
	      SE_HOSTS("\"db.vms.internal\"") ",\"resolution\":\"NONE\","
	      "\"workloadSelector\":{\"labels\":{\"app\":\"pg\"}}", "");
	selected_pod(0, "pg-0", "10.1.2.3", true, false);
	urcu_memb_barrier(); /* the set-up's deferred frees run now, not while counting */
	for (int round = 0; round < 100; round++)
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			counting = true;
			ask(cases[i].name, cases[i].type, cases[i].client, &o);
			counting = false;
		}
	assert_int_equal(forbidden_calls, 0);
	assert_mesh("db.vms.internal", DNS_T_A, prod_client, "10.1.2.3"); /* the cases were answered */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_spec_addresses_ips_and_single_address_cidrs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_istiod_allocation_unless_none_or_opted_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resolution_none_is_headless, setup, teardown),
		cmocka_unit_test_setup_teardown(test_selected_pods_and_workload_entries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_objects_without_a_name_or_namespace_are_not_taken,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_entries_of_one_namespace_merge, setup, teardown),
		cmocka_unit_test_setup_teardown(test_own_namespace_wins_then_the_oldest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_service_wins_over_entries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wildcards_answer_names_below_them, setup, teardown),
		cmocka_unit_test_setup_teardown(test_export_to_by_the_clients_namespace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_search_path_alias_for_pods_of_that_namespace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_autopath_candidates_include_mesh_hosts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_changes_and_removals_are_served_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readers_beside_the_writer_see_whole_states, setup, teardown),
		cmocka_unit_test_setup_teardown(test_answering_allocates_nothing_and_takes_no_mutex, setup, teardown),
	};
	return cmocka_run_group_tests_name("mesh", tests, NULL, NULL);
}
