/*
 * Unit tests for config/: defaults, the brief's contract example, static
 * records, every kind of error with its exact FILE:LINE:COL message,
 * static.files (relative paths, errors named by the right file), and the
 * scalar parsers' edge cases. Run from the repository root (`make unit`
 * does): one test loads deploy/examples/local.yaml.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <cmocka.h>

#include "address.h"
#include "config_text.h"
#include "config/config.h"
#include "util/client.h"
#include "util/hash.h"

/* The load must fail with exactly this message and leave *out alone. */
static void expect_error(const char *yaml, const char *want)
{
	static struct config untouched;
	struct config *cfg = &untouched;
	char err[CONFIG_ERR_MAX] = "";

	assert_int_equal(config_load_string("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof err),
			 -1);
	assert_ptr_equal(cfg, &untouched);
	assert_string_equal(err, want);
}

/* ---- defaults and good documents ------------------------------------------ */

static void check_defaults(const struct config *c)
{
	assert_int_equal(c->n_files, 1);
	assert_string_equal(c->files[0], "t.yaml");
	assert_int_equal(c->listen.n_addresses, 1);
	assert_int_equal(c->listen.addresses[0].family, AF_INET);
	assert_string_equal(c->listen.addresses[0].text, "169.254.20.10");
	assert_int_equal(c->listen.addresses[0].v4.s_addr, inet_addr("169.254.20.10"));
	assert_int_equal(c->listen.port, 53);
	assert_int_equal(c->listen.workers, 0);
	assert_int_equal(c->listen.tcp_max_connections, 1024);
	assert_int_equal(c->listen.tcp_idle_timeout_ms, 10000);
	assert_int_equal(c->listen.udp_max_payload, 1232);
	assert_int_equal(c->listen.udp_rcvbuf, 4 << 20);
	assert_true(c->interface.manage);
	assert_string_equal(c->interface.name, "localdns");
	assert_int_equal(c->interface.kind, CONFIG_IF_DUMMY);
	assert_true(c->nftables.enabled);
	assert_string_equal(c->nftables.table, "localdns");
	assert_int_equal(c->nftables.n_intercept, 0);
	assert_false(c->nftables.teardown);
	assert_int_equal(c->nftables.reassert_interval_ms, 30000);
	assert_string_equal(c->cluster.domain, "cluster.local");
	assert_int_equal(c->cluster.ttl, 5);
	assert_int_equal(c->cluster.pods, CONFIG_PODS_INSECURE);
	assert_int_equal(c->cluster.n_fallback_servers, 0);
	assert_false(c->cluster.autopath);
	assert_false(c->cluster.endpoint_pod_names);
	assert_false(c->cluster.noendpoints);
	assert_false(c->cluster.ignore_empty_service);
	assert_int_equal(c->cluster.n_fallthrough, 2);
	assert_string_equal(c->cluster.fallthrough[0], "in-addr.arpa");
	assert_string_equal(c->cluster.fallthrough[1], "ip6.arpa");
	assert_true(c->kubernetes.enabled);
	assert_string_equal(c->kubernetes.kubeconfig, "");
	assert_string_equal(c->kubernetes.node_name, "");
	assert_string_equal(c->kubernetes.service_account_dir,
			    "/var/run/secrets/kubernetes.io/serviceaccount");
	assert_int_equal(c->kubernetes.object_max_bytes, 16 << 20);
	assert_int_equal(c->kubernetes.crd_retry_interval_ms, 60000);
	assert_false(c->mesh.istio);
	assert_int_equal(c->mesh.ttl, 30);
	assert_false(c->multicluster.enabled);
	assert_string_equal(c->multicluster.domain, "clusterset.local");
	assert_int_equal(c->statics.n_records, 0);
	assert_int_equal(c->statics.n_files, 0);
	assert_int_equal(c->upstream.n_servers, 0);
	assert_string_equal(c->upstream.resolv_conf, "/etc/resolv.conf");
	assert_false(c->upstream.recursive);
	assert_false(c->upstream.dnssec);
	assert_int_equal(c->upstream.timeout_ms, 2000);
	assert_int_equal(c->upstream.n_forward_zones, 0);
	assert_int_equal(c->cache.size, 64 << 20);
	assert_int_equal(c->cache.min_ttl, 0);
	assert_int_equal(c->cache.max_ttl, 86400);
	assert_true(c->cache.serve_stale);
	assert_int_equal(c->cache.stale_max_age, 86400);
	assert_true(c->cache.prefetch);
	assert_string_equal(c->health.listen, "127.0.0.1:8080");
	assert_string_equal(c->metrics.listen, "127.0.0.1:9253");
	assert_int_equal(c->log.level, CONFIG_LOG_INFO);
	assert_int_equal(c->log.format, CONFIG_LOG_LOGFMT);
	assert_int_equal(c->log.queries, 0);
	assert_int_equal(c->log.query_buffer, 4096);
	assert_string_equal(c->control.socket, "/run/localdns/control.sock");
	assert_false(c->chaos.enabled);
#ifdef LOCALDNS_VERSION
	assert_string_equal(c->chaos.version, "localdns " LOCALDNS_VERSION);
#else
	assert_string_equal(c->chaos.version, "localdns");
#endif
	assert_string_equal(c->chaos.id, "");
	assert_int_equal(c->listen.n_allow, 0); /* config_default_allow applies */
	assert_int_equal(c->listen.tcp_max_connections_per_client, 64);
	assert_int_equal(c->listen.ipv6_client_prefix_length, 128);
	assert_int_equal(c->listen.tcp_max_pending_queries, 64);
	assert_int_equal(c->listen.tcp_output_budget, 4 << 20);
	assert_int_equal(c->listen.tcp_query_timeout_ms, 2000);
	assert_int_equal(c->upstream.max_rate, 5000);
	assert_int_equal(c->upstream.max_pending_per_client, 1000);
	assert_int_equal(c->rrl.responses_per_second, 0);
	assert_int_equal(c->rrl.slip, 2);
	assert_int_equal(c->rrl.ipv4_prefix_length, 24);
	assert_int_equal(c->rrl.ipv6_prefix_length, 56);
}

static void test_defaults_from_empty_document(void **state)
{
	(void)state;
	struct config *c = config_of("");
	check_defaults(c);
	config_free(c);
}

/* A section whose children are all commented out is YAML null: all defaults. */
static void test_null_sections_mean_defaults(void **state)
{
	(void)state;
	struct config *c = config_of("# nothing yet\nlisten:\ncache: ~\nstatic:\n  records:\n");
	check_defaults(c);
	config_free(c);
}

static const char brief_example[] =
	"listen:\n"
	"  addresses: [169.254.20.10]\n"
	"  port: 53\n"
	"  workers: 0\n"
	"interface:\n"
	"  manage: true\n"
	"  name: localdns\n"
	"  kind: dummy\n"
	"nftables:\n"
	"  enabled: true\n"
	"  table: localdns\n"
	"  intercept: [10.96.0.10]\n"
	"  teardown: false\n"
	"  reassert_interval: 30s\n"
	"cluster:\n"
	"  domain: cluster.local\n"
	"  ttl: 5s\n"
	"  pods: insecure\n"
	"  fallback_servers: []\n"
	"kubernetes:\n"
	"  enabled: true\n"
	"  kubeconfig: \"\"\n"
	"  node_name: \"\"\n"
	"static:\n"
	"  records:\n"
	"    - {name: db.prod.svc.cluster.local, a: [10.0.0.5], aaaa: [\"fd00::5\"]}\n"
	"    - {name: legacy.corp.internal, cname: db.prod.svc.cluster.local}\n"
	"    - {name: _mysql._tcp.db.prod.svc.cluster.local,\n"
	"       srv: [{priority: 0, weight: 100, port: 3306, target: db.prod.svc.cluster.local}]}\n"
	"upstream:\n"
	"  servers: []\n"
	"  resolv_conf: /etc/resolv.conf\n"
	"  recursive: false\n"
	"  dnssec: false\n"
	"  timeout: 2s\n"
	"  forward_zones: {}\n"
	"cache:\n"
	"  size: 64MiB\n"
	"  min_ttl: 0s\n"
	"  max_ttl: 1d\n"
	"  serve_stale: true\n"
	"  stale_max_age: 1d\n"
	"  prefetch: true\n"
	"health:\n"
	"  listen: 127.0.0.1:8080\n"
	"metrics:\n"
	"  listen: 127.0.0.1:9253\n"
	"log:\n"
	"  level: info\n"
	"  format: logfmt\n"
	"control:\n"
	"  socket: /run/localdns/control.sock\n";

static void test_brief_contract_example(void **state)
{
	(void)state;
	struct config *c = config_of(brief_example);

	assert_string_equal(c->listen.addresses[0].text, "169.254.20.10");
	assert_int_equal(c->nftables.n_intercept, 1);
	assert_string_equal(c->nftables.intercept[0].text, "10.96.0.10");
	assert_int_equal(c->cache.max_ttl, 86400);
	assert_int_equal(c->upstream.n_forward_zones, 0);
	assert_int_equal(c->statics.n_records, 3);

	const struct config_record *db = &c->statics.records[0];
	assert_string_equal(db->name, "db.prod.svc.cluster.local");
	assert_int_equal(db->ttl, 5);
	assert_int_equal(db->n_a, 1);
	assert_string_equal(db->a[0].text, "10.0.0.5");
	assert_int_equal(db->n_aaaa, 1);
	assert_int_equal(db->aaaa[0].family, AF_INET6);
	assert_string_equal(db->aaaa[0].text, "fd00::5");
	assert_null(db->cname);
	assert_string_equal(db->pos.file, "t.yaml");
	assert_ptr_equal(db->pos.file, c->files[0]);
	assert_int_equal(db->pos.line, 26);
	assert_int_equal(db->pos.col, 7);

	const struct config_record *legacy = &c->statics.records[1];
	assert_string_equal(legacy->cname, "db.prod.svc.cluster.local");
	assert_int_equal(legacy->n_a + legacy->n_aaaa + legacy->n_srv, 0);

	const struct config_record *srv = &c->statics.records[2];
	assert_int_equal(srv->n_srv, 1);
	assert_int_equal(srv->srv[0].priority, 0);
	assert_int_equal(srv->srv[0].weight, 100);
	assert_int_equal(srv->srv[0].port, 3306);
	assert_string_equal(srv->srv[0].target, "db.prod.svc.cluster.local");
	config_free(c);
}

static void test_every_value_set(void **state)
{
	(void)state;
	struct config *c = config_of(
		"listen: {addresses: [127.0.0.1, \"::1\"], port: \"5353\", workers: 4,\n"
		"  tcp_max_connections: 10, tcp_idle_timeout: 500ms, udp_max_payload: 4096,\n"
		"  udp_rcvbuf: 512KiB}\n"
		"interface: {manage: false, name: dns0, kind: loopback}\n"
		"nftables: {enabled: false, table: t, intercept: [\"fd00::10\"], teardown: true,\n"
		"  reassert_interval: 5m}\n"
		"cluster: {domain: Example.COM., ttl: 1h, pods: verified,\n"
		"  fallback_servers: [10.96.0.10], autopath: true, endpoint_pod_names: true,\n"
		"  noendpoints: true, fallthrough: [10.IN-ADDR.arpa.]}\n"
		"kubernetes: {enabled: false, kubeconfig: /etc/kube.conf, node_name: n1,\n"
		"  service_account_dir: sa, object_max_bytes: 64KiB}\n"
		"upstream: {resolv_conf: r.conf, recursive: true, dnssec: true, timeout: 1500ms}\n"
		"cache: {size: 1G, min_ttl: 30s, max_ttl: 2h, serve_stale: false,\n"
		"  stale_max_age: 1m, prefetch: false}\n"
		"health: {listen: \"\"}\n"
		"metrics: {listen: \"[::1]:9253\"}\n"
		"log: {level: debug, format: json, queries: 100, query_buffer: 16}\n"
		"control: {socket: \"\"}\n"
		"chaos: {enabled: true, version: v1, id: node-a}\n");

	assert_int_equal(c->listen.n_addresses, 2);
	assert_string_equal(c->listen.addresses[1].text, "::1");
	assert_int_equal(c->listen.port, 5353);
	assert_int_equal(c->listen.workers, 4);
	assert_int_equal(c->listen.tcp_max_connections, 10);
	assert_int_equal(c->listen.tcp_idle_timeout_ms, 500);
	assert_int_equal(c->listen.udp_max_payload, 4096);
	assert_int_equal(c->listen.udp_rcvbuf, 512 * 1024);
	assert_false(c->interface.manage);
	assert_string_equal(c->interface.name, "dns0");
	assert_int_equal(c->interface.kind, CONFIG_IF_LOOPBACK);
	assert_false(c->nftables.enabled);
	assert_string_equal(c->nftables.table, "t");
	assert_string_equal(c->nftables.intercept[0].text, "fd00::10");
	assert_true(c->nftables.teardown);
	assert_int_equal(c->nftables.reassert_interval_ms, 300000);
	assert_string_equal(c->cluster.domain, "example.com");
	assert_int_equal(c->cluster.ttl, 3600);
	assert_int_equal(c->cluster.pods, CONFIG_PODS_VERIFIED);
	assert_string_equal(c->cluster.fallback_servers[0].text, "10.96.0.10:53");
	assert_true(c->cluster.autopath);
	assert_true(c->cluster.endpoint_pod_names);
	assert_true(c->cluster.noendpoints);
	assert_int_equal(c->cluster.n_fallthrough, 1);
	assert_string_equal(c->cluster.fallthrough[0], "10.in-addr.arpa");
	assert_false(c->kubernetes.enabled);
	assert_string_equal(c->kubernetes.kubeconfig, "/etc/kube.conf");
	assert_string_equal(c->kubernetes.node_name, "n1");
	assert_string_equal(c->kubernetes.service_account_dir, "sa");
	assert_int_equal(c->kubernetes.object_max_bytes, 65536);
	/* t.yaml has no directory part: relative paths stay relative to the cwd. */
	assert_string_equal(c->upstream.resolv_conf, "r.conf");
	assert_true(c->upstream.recursive);
	assert_true(c->upstream.dnssec);
	assert_int_equal(c->upstream.timeout_ms, 1500);
	assert_int_equal(c->cache.size, 1000000000);
	assert_int_equal(c->cache.min_ttl, 30);
	assert_int_equal(c->cache.max_ttl, 7200);
	assert_false(c->cache.serve_stale);
	assert_int_equal(c->cache.stale_max_age, 60);
	assert_false(c->cache.prefetch);
	assert_string_equal(c->health.listen, "");
	assert_string_equal(c->metrics.listen, "[::1]:9253");
	assert_int_equal(c->log.level, CONFIG_LOG_DEBUG);
	assert_int_equal(c->log.format, CONFIG_LOG_JSON);
	assert_int_equal(c->log.queries, 100);
	assert_int_equal(c->log.query_buffer, 16);
	assert_string_equal(c->control.socket, "");
	assert_true(c->chaos.enabled);
	assert_string_equal(c->chaos.version, "v1");
	assert_string_equal(c->chaos.id, "node-a");
	config_free(c);
}

static void test_record_types(void **state)
{
	(void)state;
	struct config *c = config_of(
		"static:\n"
		"  records:\n"
		"  - name: Svc.Example.\n"
		"    ttl: 1m\n"
		"    a: [10.0.0.1, 10.0.0.2]\n"
		"    txt: [\"v=1\", \"\", \"two words\"]\n"
		"    srv: [{port: 53, target: ns.example.}]\n"
		"  - name: 5.0.0.10.in-addr.arpa\n"
		"    ptr: [db.example, db2.example]\n"
		"    ttl: 0s\n");
	const struct config_record *r = &c->statics.records[0];

	assert_int_equal(c->statics.n_records, 2);
	assert_string_equal(r->name, "svc.example");
	assert_int_equal(r->ttl, 60);
	assert_int_equal(r->n_a, 2);
	assert_string_equal(r->a[1].text, "10.0.0.2");
	assert_int_equal(r->n_txt, 3);
	assert_string_equal(r->txt[0], "v=1");
	assert_string_equal(r->txt[1], "");
	assert_string_equal(r->txt[2], "two words");
	assert_int_equal(r->srv[0].priority, 0);
	assert_int_equal(r->srv[0].weight, 0);
	assert_int_equal(r->srv[0].port, 53);
	assert_string_equal(r->srv[0].target, "ns.example");
	assert_int_equal(r->pos.line, 3);
	assert_int_equal(r->pos.col, 5);
	r = &c->statics.records[1];
	assert_int_equal(r->ttl, 0);
	assert_int_equal(r->n_ptr, 2);
	assert_string_equal(r->ptr[1], "db2.example");
	config_free(c);
}

/* cluster.ttl may come after static: record defaults resolve once all is read. */
static void test_record_ttl_defaults_to_cluster_ttl(void **state)
{
	(void)state;
	struct config *c = config_of("static:\n"
				   "  records: [{name: a.example, a: [10.0.0.1]},\n"
				   "            {name: b.example, a: [10.0.0.2], ttl: 7s}]\n"
				   "cluster:\n"
				   "  ttl: 30s\n");

	assert_int_equal(c->statics.records[0].ttl, 30);
	assert_int_equal(c->statics.records[1].ttl, 7);
	config_free(c);
}

static void test_hostport_forms(void **state)
{
	(void)state;
	struct config *c = config_of(
		"upstream:\n"
		"  servers: [10.0.0.1, \"10.0.0.2:5353\", \"[fd00::1]:5353\", \"fd00::2\",\n"
		"            \"[fd00::3]\"]\n"
		"  forward_zones:\n"
		"    corp.internal: [10.1.0.1, \"10.1.0.2:54\"]\n"
		"    Consul.: [\"127.0.0.1:8600\"]\n");
	const struct config_hostport *s = c->upstream.servers;

	assert_int_equal(c->upstream.n_servers, 5);
	assert_string_equal(s[0].text, "10.0.0.1:53");
	assert_int_equal(s[0].addr_len, sizeof(struct sockaddr_in));
	assert_int_equal(ntohs(((const struct sockaddr_in *)&s[0].addr)->sin_port), 53);
	assert_string_equal(s[1].text, "10.0.0.2:5353");
	assert_string_equal(s[2].text, "[fd00::1]:5353");
	assert_int_equal(s[2].addr_len, sizeof(struct sockaddr_in6));
	assert_int_equal(ntohs(((const struct sockaddr_in6 *)&s[2].addr)->sin6_port), 5353);
	assert_string_equal(s[3].text, "[fd00::2]:53");
	assert_string_equal(s[4].text, "[fd00::3]:53");

	assert_int_equal(c->upstream.n_forward_zones, 2);
	assert_string_equal(c->upstream.forward_zones[0].zone, "corp.internal");
	assert_int_equal(c->upstream.forward_zones[0].n_servers, 2);
	assert_string_equal(c->upstream.forward_zones[0].servers[1].text, "10.1.0.2:54");
	assert_string_equal(c->upstream.forward_zones[1].zone, "consul");
	assert_string_equal(c->upstream.forward_zones[1].servers[0].text, "127.0.0.1:8600");
	config_free(c);
}

static void test_allow_networks(void **state)
{
	(void)state;
	struct config *c = config_of("listen:\n  allow: [10.0.0.0/8, 192.0.2.7, \"fd00::/8\", \"::/0\",\n"
				   "          172.16.0.0/12]\n");

	assert_int_equal(c->listen.n_allow, 5);
	assert_string_equal(c->listen.allow[0].text, "10.0.0.0/8");
	assert_int_equal(c->listen.allow[0].prefix, 8);
	assert_string_equal(c->listen.allow[1].text, "192.0.2.7/32");
	assert_string_equal(c->listen.allow[2].text, "fd00::/8");
	assert_int_equal(c->listen.allow[2].ip.family, AF_INET6);
	assert_string_equal(c->listen.allow[3].text, "::/0");
	config_free(c);
	for (size_t i = 0; config_default_allow[i]; i++) {
		struct config_cidr cidr;
		const char *why;
		assert_int_equal(config_value_cidr(config_default_allow[i], &cidr, &why), 0);
	}
	expect_error("listen:\n  allow: [10.0.0.1/8]\n",
		     "t.yaml:2:11: listen.allow[0]: \"10.0.0.1/8\" has bits set past its prefix "
		     "length (write the network address)");
	expect_error("listen:\n  allow: [10.0.0.0/33]\n",
		     "t.yaml:2:11: listen.allow[0]: \"10.0.0.0/33\" has a bad prefix length (0..32)");
	expect_error("listen:\n  allow: [\"fd00::/129\"]\n",
		     "t.yaml:2:11: listen.allow[0]: \"fd00::/129\" has a bad prefix length (0..128)");
	expect_error("listen:\n  allow: [pods]\n",
		     "t.yaml:2:11: listen.allow[0]: \"pods\" is not an IP network (\"10.0.0.0/8\", "
		     "\"fd00::/8\" or one address)");
	expect_error("listen:\n  allow: []\n",
		     "t.yaml:2:10: listen.allow: must not be empty");
}

/*
 * The daemon compares the files on disk with files_hash to tell a change:
 * it must be the hash of the bytes the loader parsed, not of a later read
 * (a change between the first read and the daemon's watches was missed:
 * test_reload's reload tests failed 1 run in 3 on a busy machine).
 */
static void test_files_hash_is_of_the_bytes_parsed(void **state)
{
	(void)state;
	const char *yaml = "log:\n  level: debug\n";
	struct config *c = config_of(yaml);

	assert_true(c->files_hash ==
		    config_file_hash(FNV1A_SEED, "t.yaml", yaml, strlen(yaml)));
	config_free(c);
	struct config *d = config_of("log:\n  level: info\n");
	assert_true(d->files_hash != config_file_hash(FNV1A_SEED, "t.yaml", yaml, strlen(yaml)));
	config_free(d);
}

/* The repository's example must stay loadable: `make run` uses it. */
static void test_example_config_loads(void **state)
{
	(void)state;
	char err[CONFIG_ERR_MAX] = "";
	struct config *c = NULL;

	assert_int_equal(config_load("deploy/examples/local.yaml", &c, err, sizeof err), 0);
	assert_string_equal(c->listen.addresses[0].text, "127.0.0.1");
	assert_int_equal(c->listen.port, 5353);
	assert_false(c->nftables.enabled);
	assert_false(c->kubernetes.enabled);
	assert_int_equal(c->statics.n_files, 1);
	assert_string_equal(c->statics.files[0], "deploy/examples/records.yaml");
	assert_int_equal(c->n_files, 2);
	assert_int_equal(c->statics.n_records, 6);
	assert_string_equal(c->statics.records[c->statics.n_records - 1].pos.file,
			    "deploy/examples/records.yaml");
	config_free(c);
}

/* ---- errors in the document ---------------------------------------------- */

static void test_error_unknown_key(void **state)
{
	(void)state;
	expect_error("listen:\n  port: 53\n  foo: 1\n",
		     "t.yaml:3:3: unknown key \"foo\" in listen");
	expect_error("listen:\n  prot: 53\n",
		     "t.yaml:2:3: unknown key \"prot\" in listen (did you mean \"port\"?)");
	expect_error("log: {}\nlisen: {}\n",
		     "t.yaml:2:1: unknown key \"lisen\" at top level (did you mean \"listen\"?)");
	expect_error("static:\n  records:\n    - {name: a.b, a: [10.0.0.1], typo: 1}\n",
		     "t.yaml:3:34: unknown key \"typo\" in static.records[0]");
	/* A key a release had says what replaced it. */
	expect_error("kubernetes:\n  list_max_bytes: 4MiB\n",
		     "t.yaml:2:3: kubernetes.list_max_bytes was removed: responses are decoded as "
		     "they stream; kubernetes.object_max_bytes bounds one object");
}

static void test_error_wrong_type(void **state)
{
	(void)state;
	expect_error("listen:\n  port: [53]\n",
		     "t.yaml:2:9: listen.port: expected an integer, got a sequence");
	expect_error("listen: 53\n", "t.yaml:1:9: listen: expected a mapping, got \"53\"");
	expect_error("listen:\n  addresses: 10.0.0.1\n",
		     "t.yaml:2:14: listen.addresses: expected a sequence, got \"10.0.0.1\"");
	expect_error("interface:\n  name:\n",
		     "t.yaml:2:8: interface.name: expected a string, got null");
	expect_error("- listen\n", "t.yaml:1:1: top level: expected a mapping, got a sequence");
}

static void test_error_integer(void **state)
{
	(void)state;
	expect_error("listen:\n  port: 70000\n",
		     "t.yaml:2:9: listen.port: \"70000\" is above the maximum 65535");
	expect_error("listen:\n  port: 0\n",
		     "t.yaml:2:9: listen.port: \"0\" is below the minimum 1");
	expect_error("listen:\n  port: 053\n",
		     "t.yaml:2:9: listen.port: \"053\" is not a decimal integer");
	expect_error("listen:\n  workers: -1\n",
		     "t.yaml:2:12: listen.workers: \"-1\" is not a decimal integer");
	expect_error("listen:\n  udp_max_payload: 511\n",
		     "t.yaml:2:20: listen.udp_max_payload: \"511\" is below the minimum 512");
	expect_error("log:\n  queries: 1000000001\n",
		     "t.yaml:2:12: log.queries: \"1000000001\" is above the maximum 1000000000");
	expect_error("log:\n  query_buffer: 15\n",
		     "t.yaml:2:17: log.query_buffer: \"15\" is below the minimum 16");
}

static void test_error_boolean(void **state)
{
	(void)state;
	expect_error("nftables:\n  enabled: yes\n",
		     "t.yaml:2:12: nftables.enabled: \"yes\" is not true or false");
	expect_error("cluster: {domain: cluster.local, autopath: 1}\n",
		     "t.yaml:1:44: cluster.autopath: \"1\" is not true or false");
}

static void test_error_bad_ip(void **state)
{
	(void)state;
	expect_error("listen:\n  addresses: [10.0.0.300]\n",
		     "t.yaml:2:15: listen.addresses[0]: \"10.0.0.300\" is not an IP address");
	expect_error("nftables:\n  intercept: [10.96.0.10, 10.96.0.0/12]\n",
		     "t.yaml:2:27: nftables.intercept[1]: \"10.96.0.0/12\" is a prefix, not a "
		     "single IP address");
	expect_error("listen:\n  addresses: [10.0.0.1, 10.0.0.1]\n",
		     "t.yaml:2:25: listen.addresses[1]: 10.0.0.1 is listed twice");
	expect_error("listen:\n  addresses: []\n",
		     "t.yaml:2:14: listen.addresses: must not be empty");
	expect_error("upstream:\n  servers: [\"10.0.0.1:0\"]\n",
		     "t.yaml:2:13: upstream.servers[0]: \"10.0.0.1:0\" has a bad port (1..65535)");
	expect_error("metrics:\n  listen: 127.0.0.1\n",
		     "t.yaml:2:11: metrics.listen: \"127.0.0.1\" needs a port (ip:port or "
		     "[ipv6]:port)");
}

static void test_error_wildcard_address(void **state)
{
	(void)state;
	expect_error("listen:\n  addresses: [0.0.0.0]\n",
		     "t.yaml:2:15: listen.addresses[0]: wildcard address not allowed: "
		     "localdns binds specific addresses");
	expect_error("nftables:\n  intercept:\n    - \"::\"\n",
		     "t.yaml:3:7: nftables.intercept[0]: wildcard address not allowed: "
		     "localdns binds specific addresses");
}

/* listen.ipv6_client_prefix_length as util/client.h applies it: IPv6
 * clients equal when their first bits are; IPv4 clients by address. */
static size_t client_of(const char *ip, unsigned bits, uint8_t out[CLIENT_PREFIX_MAX])
{
	struct sockaddr_storage ss = address_of(ip);

	return client_prefix(&ss, bits, out);
}

static bool same_client(const char *a, const char *b, unsigned bits)
{
	uint8_t ka[CLIENT_PREFIX_MAX], kb[CLIENT_PREFIX_MAX];
	size_t na = client_of(a, bits, ka), nb = client_of(b, bits, kb);

	return na == nb && memcmp(ka, kb, na) == 0;
}

static void test_ipv6_clients_cut_at_the_configured_length(void **state)
{
	(void)state;
	assert_false(same_client("fd00::2", "fd00::3", 128));
	assert_true(same_client("fd00::2", "fd00::2", 128));
	assert_true(same_client("fd00::2", "fd00::3", 64));
	assert_false(same_client("fd00:0:0:1::2", "fd00::2", 64));
	assert_true(same_client("fd00:0:0:1::2", "fd00::2", 56));
	/* a length inside a byte: fd00:: and fd01:: agree in their first 15 bits */
	assert_true(same_client("fd00::1", "fd01::1", 15));
	assert_false(same_client("fd00::1", "fd01::1", 16));
	/* IPv4: the address, whatever the IPv6 length */
	assert_false(same_client("10.0.0.1", "10.0.0.2", 32));
	assert_true(same_client("10.0.0.1", "10.0.0.1", 32));
	struct config *c = config_of("listen: {ipv6_client_prefix_length: 64}\n");
	assert_int_equal(c->listen.ipv6_client_prefix_length, 64);
	config_free(c);
	expect_error("listen: {ipv6_client_prefix_length: 129}\n",
		     "t.yaml:1:37: listen.ipv6_client_prefix_length: \"129\" is above the maximum 128");
}

/* The chart's metrics.listen: the pod's address (the node's, on the host
 * network) from the environment, IPv4 or IPv6. */
static void test_listen_address_from_the_environment(void **state)
{
	struct config *c;

	(void)state;
	setenv("LOCALDNS_TEST_IP", "10.1.2.3", 1);
	c = config_of("metrics: {listen: \"${LOCALDNS_TEST_IP}:9253\"}\n"
		    "health: {listen: \"${LOCALDNS_TEST_IP}:8080\"}\n");
	assert_string_equal(c->metrics.listen, "10.1.2.3:9253");
	assert_string_equal(c->health.listen, "10.1.2.3:8080");
	config_free(c);
	setenv("LOCALDNS_TEST_IP", "fd00::7", 1);
	c = config_of("metrics: {listen: \"${LOCALDNS_TEST_IP}:9253\"}\n");
	assert_string_equal(c->metrics.listen, "[fd00::7]:9253");
	config_free(c);
	setenv("LOCALDNS_TEST_IP", "not-an-ip", 1);
	expect_error("metrics: {listen: \"${LOCALDNS_TEST_IP}:9253\"}\n",
		     "t.yaml:1:19: metrics.listen: \"not-an-ip:9253\" is not an IP address");
	unsetenv("LOCALDNS_TEST_IP");
	expect_error("metrics: {listen: \"${LOCALDNS_TEST_IP}:9253\"}\n",
		     "t.yaml:1:19: metrics.listen: \"${LOCALDNS_TEST_IP}:9253\" names "
		     "$LOCALDNS_TEST_IP, which is not set in localdns's environment");
	expect_error("metrics: {listen: \"${LOCALDNS_TEST_IP}\"}\n",
		     "t.yaml:1:19: metrics.listen: \"${LOCALDNS_TEST_IP}\" is not ${NAME}:port");
	expect_error("metrics: {listen: \"${A-B}:1\"}\n",
		     "t.yaml:1:19: metrics.listen: \"${A-B}:1\" is not ${NAME}:port");
}

static void test_intercept_and_fallback_endpoints(void **state)
{
	(void)state;
	struct config *c = config_of("listen: {addresses: [169.254.20.10, \"fd00::10\"]}\n"
				   "nftables:\n  intercept: [10.96.0.10]\n"
				   "  fallback_endpoints: [10.244.1.5, \"fd00::53\"]\n");
	assert_int_equal(c->nftables.n_fallback_endpoints, 2);
	assert_string_equal(c->nftables.fallback_endpoints[0].text, "10.244.1.5");
	assert_int_equal(c->nftables.fallback_endpoints[1].family, AF_INET6);
	/* Served: the listen addresses in order, then the intercepted ClusterIPs. */
	assert_int_equal(config_served_count(c), 3);
	assert_string_equal(config_served_address(c, 0)->text, "169.254.20.10");
	assert_string_equal(config_served_address(c, 1)->text, "fd00::10");
	assert_string_equal(config_served_address(c, 2)->text, "10.96.0.10");
	config_free(c);

	expect_error("listen: {addresses: [10.96.0.10]}\nnftables:\n  intercept: [10.96.0.10]\n",
		     "t.yaml:3:3: nftables.intercept: 10.96.0.10 is also in listen.addresses "
		     "(intercepted addresses are served without being listed there)");
	expect_error("nftables:\n  fallback_endpoints: [10.0.0.1, 10.0.0.1]\n",
		     "t.yaml:2:34: nftables.fallback_endpoints[1]: 10.0.0.1 is listed twice");
}

static void test_fallback_service(void **state)
{
	(void)state;
	struct config *c = config_of("");
	assert_string_equal(c->nftables.fallback_service, "kube-system/kube-dns");
	config_free(c);
	c = config_of("nftables: {fallback_service: dns/coredns-1}\n");
	assert_string_equal(c->nftables.fallback_service, "dns/coredns-1");
	config_free(c);
	c = config_of("nftables: {fallback_service: \"\"}\n");
	assert_string_equal(c->nftables.fallback_service, "");
	config_free(c);
	expect_error("nftables: {fallback_service: kube-dns}\n",
		     "t.yaml:1:30: nftables.fallback_service: \"kube-dns\" is not "
		     "\"namespace/name\" (lower-case RFC 1123 labels)");
	expect_error("nftables: {fallback_service: Kube-System/kube-dns}\n",
		     "t.yaml:1:30: nftables.fallback_service: \"Kube-System/kube-dns\" is not "
		     "\"namespace/name\" (lower-case RFC 1123 labels)");
	expect_error("nftables: {fallback_service: a/b/c}\n",
		     "t.yaml:1:30: nftables.fallback_service: \"a/b/c\" is not "
		     "\"namespace/name\" (lower-case RFC 1123 labels)");
}

/* CoreDNS's fallthrough, for reverse zones only; options that contradict. */
static void test_cluster_coredns_options(void **state)
{
	(void)state;
	struct config *c = config_of("cluster: {fallthrough: [], ignore_empty_service: true}\n");
	assert_int_equal(c->cluster.n_fallthrough, 0);
	assert_true(c->cluster.ignore_empty_service);
	config_free(c);
	c = config_of("cluster: {fallthrough: [ip6.arpa, 168.192.in-addr.arpa]}\n");
	assert_int_equal(c->cluster.n_fallthrough, 2);
	config_free(c);
	expect_error("cluster:\n  fallthrough: [ip6.arpa, cluster.local]\n",
		     "t.yaml:2:27: cluster.fallthrough[1]: cluster.local is not a reverse zone "
		     "(in-addr.arpa, ip6.arpa or one below them): names under cluster.domain are "
		     "always answered here");
	expect_error("cluster: {fallthrough: [xin-addr.arpa]}\n",
		     "t.yaml:1:25: cluster.fallthrough[0]: xin-addr.arpa is not a reverse zone "
		     "(in-addr.arpa, ip6.arpa or one below them): names under cluster.domain are "
		     "always answered here");
	expect_error("cluster:\n  noendpoints: true\n  ignore_empty_service: true\n",
		     "t.yaml:3:3: cluster: ignore_empty_service needs the endpoints that noendpoints "
		     "stops watching (every Service with a ClusterIP would get NXDOMAIN)");
}

/* The mesh and the clusterset zone come from the Kubernetes API; the zone is its own. */
static void test_mesh_and_multicluster(void **state)
{
	(void)state;
	struct config *c = config_of("mesh: {istio: true, ttl: 10s}\n"
				   "multicluster: {enabled: true, domain: ClusterSet.Example.}\n"
				   "kubernetes: {crd_retry_interval: 5s}\n");
	assert_true(c->mesh.istio);
	assert_int_equal(c->mesh.ttl, 10);
	assert_true(c->multicluster.enabled);
	assert_string_equal(c->multicluster.domain, "clusterset.example");
	assert_int_equal(c->kubernetes.crd_retry_interval_ms, 5000);
	config_free(c);
	expect_error("kubernetes: {enabled: false}\nmesh: {istio: true}\n",
		     "t.yaml:2:7: mesh.istio needs kubernetes.enabled: its names come from the "
		     "Kubernetes API");
	expect_error("kubernetes: {enabled: false}\nmulticluster: {enabled: true}\n",
		     "t.yaml:2:15: multicluster.enabled needs kubernetes.enabled: its names come from "
		     "the Kubernetes API");
	expect_error("multicluster: {enabled: true, domain: svc.cluster.local}\n",
		     "t.yaml:1:15: multicluster.domain svc.cluster.local and cluster.domain "
		     "cluster.local overlap: each is a zone of its own");
	expect_error("cluster: {domain: local}\nmulticluster: {enabled: true}\n",
		     "t.yaml:2:15: multicluster.domain clusterset.local and cluster.domain local "
		     "overlap: each is a zone of its own");
	c = config_of("cluster: {domain: xcluster.local}\nmulticluster: {enabled: true, domain: cluster.local}\n");
	config_free(c); /* labels, not bytes: neither lies below the other */
	expect_error("kubernetes: {crd_retry_interval: 100ms}\n",
		     "t.yaml:1:34: kubernetes.crd_retry_interval: \"100ms\" is below the minimum 1s");
}

static void test_error_duration(void **state)
{
	(void)state;
	expect_error("upstream:\n  timeout: 10\n",
		     "t.yaml:2:12: upstream.timeout: \"10\" has no unit (ms, s, m, h or d)");
	expect_error("upstream:\n  timeout: 2 s\n",
		     "t.yaml:2:12: upstream.timeout: \"2 s\" has an unknown unit (use ms, s, m, h "
		     "or d)");
	expect_error("upstream:\n  timeout: 0s\n",
		     "t.yaml:2:12: upstream.timeout: \"0s\" is below the minimum 1ms");
	expect_error("cluster:\n  ttl: 1500ms\n",
		     "t.yaml:2:8: cluster.ttl: \"1500ms\" is not a whole number of seconds");
	expect_error("cluster:\n  ttl: 25000d\n",
		     "t.yaml:2:8: cluster.ttl: \"25000d\" is above the maximum 2147483647s");
}

static void test_error_size(void **state)
{
	(void)state;
	expect_error("cache:\n  size: 64MB\n",
		     "t.yaml:2:9: cache.size: \"64MB\" has an unknown unit (use B, KiB, MiB, GiB, "
		     "K, M or G)");
	expect_error("listen:\n  udp_rcvbuf: 2GiB\n",
		     "t.yaml:2:15: listen.udp_rcvbuf: \"2GiB\" is above the maximum 1GiB");
}

static void test_error_enum(void **state)
{
	(void)state;
	expect_error("log:\n  level: verbose\n",
		     "t.yaml:2:10: log.level: \"verbose\" is not one of debug, info, warn, error");
	expect_error("cluster:\n  pods: Verified\n",
		     "t.yaml:2:9: cluster.pods: \"Verified\" is not one of disabled, insecure, "
		     "verified");
}

static void test_error_duplicate_key(void **state)
{
	(void)state;
	expect_error("listen:\n  port: 53\n  workers: 1\n  port: 54\n",
		     "t.yaml:4:3: duplicate key \"port\" in listen");
	expect_error("log: {}\nlog: {}\n", "t.yaml:2:1: duplicate key \"log\" at top level");
	expect_error("upstream:\n  forward_zones:\n    a.example: [10.0.0.1]\n"
		     "    A.Example.: [10.0.0.2]\n",
		     "t.yaml:4:5: upstream.forward_zones: a.example is listed twice");
}

static void test_error_min_ttl_above_max_ttl(void **state)
{
	(void)state;
	expect_error("cache:\n  max_ttl: 60s\n  min_ttl: 5m\n",
		     "t.yaml:2:3: cache: max_ttl (60s) is below min_ttl (300s)");
	/* max_ttl left at its default: point at min_ttl instead. */
	expect_error("cache:\n  min_ttl: 2d\n",
		     "t.yaml:2:3: cache: max_ttl (86400s) is below min_ttl (172800s)");
}

static void test_error_record_cname_with_other_data(void **state)
{
	(void)state;
	expect_error("static:\n  records:\n    - name: x.example\n      a: [10.0.0.1]\n"
		     "      cname: y.example\n",
		     "t.yaml:5:7: static.records[0]: cname cannot be combined with a: a CNAME "
		     "stands alone (RFC 1034)");
	/* The same rule across two records that share a name. */
	expect_error("static:\n  records:\n    - {name: x.example, cname: y.example}\n"
		     "    - {name: X.example., txt: [hi]}\n",
		     "t.yaml:4:7: static record x.example: a name with a CNAME cannot have other "
		     "records (RFC 1034; also at t.yaml:3:7)");
}

static void test_error_record_address_family(void **state)
{
	(void)state;
	expect_error("static:\n  records:\n    - {name: x.example, a: [\"fd00::5\"]}\n",
		     "t.yaml:3:29: static.records[0].a[0]: \"fd00::5\" is an IPv6 address; a "
		     "holds IPv4 only (use aaaa)");
	expect_error("static:\n  records:\n    - {name: x.example, aaaa: [10.0.0.5]}\n",
		     "t.yaml:3:32: static.records[0].aaaa[0]: \"10.0.0.5\" is an IPv4 address; "
		     "aaaa holds IPv6 only (use a)");
}

static void test_error_record_shape(void **state)
{
	(void)state;
	expect_error("static:\n  records:\n    - {name: x.example}\n",
		     "t.yaml:3:7: static.records[0]: needs at least one of a, aaaa, cname, srv, "
		     "txt, ptr");
	expect_error("static:\n  records:\n    - {a: [10.0.0.1]}\n",
		     "t.yaml:3:7: static.records[0]: missing key \"name\"");
	expect_error("static:\n  records:\n    - {name: x.example, a: []}\n",
		     "t.yaml:3:28: static.records[0].a: must not be empty");
	expect_error("static:\n  records:\n    - {name: x.example, srv: [{target: y.example}]}\n",
		     "t.yaml:3:31: static.records[0].srv[0]: missing key \"port\"");
}

static void test_error_bad_name(void **state)
{
	(void)state;
	expect_error("static:\n  records:\n    - {name: \"bad name.example\", txt: [x]}\n",
		     "t.yaml:3:14: static.records[0].name: \"bad name.example\" has a character "
		     "other than letters, digits, '-', '_' and '.'");
	expect_error("static:\n  records:\n    - {name: \"*.example\", txt: [x]}\n",
		     "t.yaml:3:14: static.records[0].name: \"*.example\" is a wildcard; wildcard "
		     "names are not supported");
	expect_error("static:\n  records:\n    - {name: a..example, txt: [x]}\n",
		     "t.yaml:3:14: static.records[0].name: \"a..example\" has an empty label");
	expect_error("static:\n  records:\n    - {name: x.example, cname: \".\"}\n",
		     "t.yaml:3:32: static.records[0].cname: \".\" is not a name (empty, or the "
		     "root)");
	expect_error("cluster:\n  domain: \"cluster local\"\n",
		     "t.yaml:2:11: cluster.domain: \"cluster local\" has a character other than "
		     "letters, digits, '-', '_' and '.'");
}

static void test_error_label_and_name_too_long(void **state)
{
	(void)state;
	char yaml[1024], want[CONFIG_ERR_MAX];
	char label[65];

	memset(label, 'a', 64);
	label[64] = '\0';
	snprintf(yaml, sizeof yaml, "static:\n  records:\n    - {name: %s.example, txt: [x]}\n",
		 label);
	snprintf(want, sizeof want, "t.yaml:3:14: static.records[0].name: \"%.60s...\" has a "
		 "label longer than 63 characters", label);
	expect_error(yaml, want);

	/* 63 is fine. */
	label[63] = '\0';
	snprintf(yaml, sizeof yaml, "static:\n  records:\n    - {name: %s.example, txt: [x]}\n",
		 label);
	config_free(config_of(yaml));

	/* 4 x 63 + 4 dots = 256 characters without the final dot: too long. */
	snprintf(yaml, sizeof yaml, "cluster:\n  domain: %s.%s.%s.%s.\n", label, label, label,
		 label);
	snprintf(want, sizeof want, "t.yaml:2:11: cluster.domain: \"%.60s...\" is longer than "
		 "253 characters", label);
	expect_error(yaml, want);
}

static void test_error_txt_too_long(void **state)
{
	(void)state;
	char yaml[1024], want[CONFIG_ERR_MAX], txt[257];

	memset(txt, 't', 256);
	txt[256] = '\0';
	snprintf(yaml, sizeof yaml, "static:\n  records:\n  - name: t.example\n    txt:\n"
		 "    - ok\n    - %s\n", txt);
	snprintf(want, sizeof want, "t.yaml:6:7: static.records[0].txt[1]: \"%.60s...\" is "
		 "longer than 255 bytes", txt);
	expect_error(yaml, want);

	txt[255] = '\0'; /* exactly 255 bytes is allowed */
	snprintf(yaml, sizeof yaml, "static:\n  records:\n  - {name: t.example, txt: [%s]}\n",
		 txt);
	struct config *c = config_of(yaml);
	assert_int_equal(strlen(c->statics.records[0].txt[0]), 255);
	config_free(c);
}

static void test_error_strings(void **state)
{
	(void)state;
	expect_error("interface:\n  name: averylonginterfacename\n",
		     "t.yaml:2:9: interface.name: \"averylonginterfacename\" is longer than 15 "
		     "bytes");
	expect_error("nftables:\n  table: \"\"\n",
		     "t.yaml:2:10: nftables.table: must not be empty");
	expect_error("kubernetes:\n  service_account_dir: \"\"\n",
		     "t.yaml:2:24: kubernetes.service_account_dir: must not be empty");
	expect_error("kubernetes:\n  object_max_bytes: 60KiB\n",
		     "t.yaml:2:21: kubernetes.object_max_bytes: \"60KiB\" is below the minimum 64KiB");
	/* A YAML escape can put a NUL inside a scalar; C strings would cut it. */
	expect_error("chaos:\n  id: \"a\\0b\"\n",
		     "t.yaml:2:7: chaos.id: contains a NUL character");
}

static void test_error_yaml_syntax(void **state)
{
	(void)state;
	expect_error("listen:\n  port: 53\n bad: [\n",
		     "t.yaml:3:2: did not find expected key (while parsing a block mapping that "
		     "starts at 1:1)");
	expect_error("listen: {port: 53\n",
		     "t.yaml:2:1: did not find expected ',' or '}' (while parsing a flow mapping "
		     "that starts at 1:9)");
	expect_error("listen: {}\n---\nlog: {}\n",
		     "t.yaml:3:1: a second YAML document; a config file holds one");
	/* Invalid UTF-8: libyaml gives a byte offset, we give a line and column. */
	expect_error("log:\n  level: \xff\n",
		     "t.yaml:2:10: invalid leading UTF-8 octet");
}

/* An alias is walked each time it is used; the total is capped. */
static void test_error_alias_expansion_capped(void **state)
{
	(void)state;
	size_t cap = 64 * 1024, n = 0;
	char *yaml = malloc(cap);

	assert_non_null(yaml);
	n += (size_t)snprintf(yaml + n, cap - n, "static:\n  records:\n  - name: r0.example\n"
			      "    a: &ips [");
	for (int i = 0; i < 1024; i++)
		n += (size_t)snprintf(yaml + n, cap - n, "%s10.0.%d.%d", i ? "," : "", i / 256,
				      i % 256);
	n += (size_t)snprintf(yaml + n, cap - n, "]\n");
	for (int i = 1; i <= 1024; i++)
		n += (size_t)snprintf(yaml + n, cap - n, "  - {name: r%d.example, a: *ips}\n", i);
	assert_true(n < cap);
	/*
	 * 1025 records + 1024 addresses per record pass 2^20 at record 1022. The
	 * position is the anchored list's: the document API resolves an alias to
	 * its node, so the path tells which use it was.
	 */
	expect_error(yaml, "t.yaml:4:8: static.records[1022].a: more than 1048576 list "
		     "elements in all (aliases count each time they are used)");
	free(yaml);
}

/* ---- files ------------------------------------------------------------------ */

struct tmpdir {
	char path[64];
};
static void write_file(const char *dir, const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static int make_tmpdir(void **state)
{
	struct tmpdir *t = malloc(sizeof *t);

	if (!t)
		return -1;
	strcpy(t->path, "/tmp/localdns-config-XXXXXX");
	if (!mkdtemp(t->path)) {
		free(t);
		return -1;
	}
	*state = t;
	return 0;
}

static int remove_tmpdir(void **state)
{
	struct tmpdir *t = *state;
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->path);
	int rc = system(cmd);
	free(t);
	return rc == 0 ? 0 : -1;
}

static void test_static_files_relative_to_config(void **state)
{
	struct tmpdir *t = *state;
	char main_path[128], rec_path[128], err[CONFIG_ERR_MAX] = "";
	struct config *c = NULL;

	write_file(t->path, "main.yaml",
		   "static:\n"
		   "  files: [records.yaml]\n"
		   "  records: [{name: inline.example, a: [10.0.0.1]}]\n"
		   "cluster: {ttl: 9s}\n");
	write_file(t->path, "records.yaml",
		   "# records from a file\n"
		   "- {name: one.example, a: [10.0.0.2]}\n"
		   "- name: two.example\n"
		   "  txt: [hello]\n");
	snprintf(main_path, sizeof main_path, "%s/main.yaml", t->path);
	snprintf(rec_path, sizeof rec_path, "%s/records.yaml", t->path);

	assert_int_equal(config_load(main_path, &c, err, sizeof err), 0);
	assert_int_equal(c->n_files, 2);
	assert_string_equal(c->files[0], main_path);
	assert_string_equal(c->files[1], rec_path);
	assert_string_equal(c->statics.files[0], rec_path);
	assert_int_equal(c->statics.n_records, 3);
	/* Inline records first, then the file's, each with its own position. */
	assert_string_equal(c->statics.records[0].name, "inline.example");
	assert_ptr_equal(c->statics.records[0].pos.file, c->files[0]);
	assert_string_equal(c->statics.records[1].name, "one.example");
	assert_ptr_equal(c->statics.records[1].pos.file, c->files[1]);
	assert_int_equal(c->statics.records[1].pos.line, 2);
	assert_int_equal(c->statics.records[1].pos.col, 3);
	assert_string_equal(c->statics.records[2].name, "two.example");
	assert_int_equal(c->statics.records[2].pos.line, 3);
	assert_int_equal(c->statics.records[2].ttl, 9);
	config_free(c);
}

static void test_static_file_errors_name_that_file(void **state)
{
	struct tmpdir *t = *state;
	char main_path[128], want[CONFIG_ERR_MAX], err[CONFIG_ERR_MAX] = "";
	struct config *c = NULL;

	snprintf(main_path, sizeof main_path, "%s/main.yaml", t->path);

	write_file(t->path, "main.yaml", "static:\n  files: [bad.yaml]\n");
	write_file(t->path, "bad.yaml", "- {name: ok.example, a: [10.0.0.1]}\n"
					"- {name: v6.example, a: [\"fd00::1\"]}\n");
	snprintf(want, sizeof want, "%s/bad.yaml:2:26: records[1].a[0]: \"fd00::1\" is an IPv6 "
		 "address; a holds IPv4 only (use aaaa)", t->path);
	assert_int_equal(config_load(main_path, &c, err, sizeof err), -1);
	assert_string_equal(err, want);
	assert_null(c);

	write_file(t->path, "bad.yaml", "name: x.example\n");
	snprintf(want, sizeof want, "%s/bad.yaml:1:1: top level: expected a sequence of records, "
		 "got a mapping", t->path);
	assert_int_equal(config_load(main_path, &c, err, sizeof err), -1);
	assert_string_equal(err, want);

	write_file(t->path, "main.yaml", "static:\n  files:\n    - bad.yaml\n    - missing.yaml\n");
	write_file(t->path, "bad.yaml", "");
	snprintf(want, sizeof want, "%s/main.yaml:4:7: static.files: cannot read "
		 "%s/missing.yaml: No such file or directory", t->path, t->path);
	assert_int_equal(config_load(main_path, &c, err, sizeof err), -1);
	assert_string_equal(err, want);
	assert_null(c);
}

/* A FIFO (or a device) named as a file would block the load, on the main
 * thread, until someone writes it: only regular files are read. */
static void test_only_regular_files_are_read(void **state)
{
	struct tmpdir *t = *state;
	char main_path[128], fifo[128], want[CONFIG_ERR_MAX], err[CONFIG_ERR_MAX] = "";
	struct config *c = NULL;

	snprintf(main_path, sizeof main_path, "%s/main.yaml", t->path);
	snprintf(fifo, sizeof fifo, "%s/records.fifo", t->path);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	write_file(t->path, "main.yaml", "static:\n  files: [records.fifo]\n");
	snprintf(want, sizeof want, "%s:2:11: static.files: cannot read %s: not a regular file",
		 main_path, fifo);
	assert_int_equal(config_load(main_path, &c, err, sizeof err), -1);
	assert_string_equal(err, want);
	snprintf(want, sizeof want, "%s: cannot read: not a regular file", fifo);
	assert_int_equal(config_load(fifo, &c, err, sizeof err), -1);
	assert_string_equal(err, want);
	write_file(t->path, "main.yaml", "static:\n  files: [/dev/zero]\n");
	snprintf(want, sizeof want, "%s:2:11: static.files: cannot read /dev/zero: not a regular "
		 "file", main_path);
	assert_int_equal(config_load(main_path, &c, err, sizeof err), -1);
	assert_string_equal(err, want);
	assert_null(c);
}

/* libyaml's scanner costs the nesting depth per token: 400 KB of nested
 * flow sequences took 98 s to reject. The depth is bounded before the
 * document is built, where the 65th level opens. */
static void test_nesting_is_bounded(void **state)
{
	size_t n = 20000;
	char *text = malloc(2 * n + 2);

	(void)state;
	assert_non_null(text);
	memset(text, '[', n);
	memset(text + n, ']', n);
	memcpy(text + 2 * n, "\n", 2);
	struct config *c = NULL;
	char err[CONFIG_ERR_MAX] = "";
	assert_int_equal(config_load_string("t.yaml", text, 2 * n + 1, &c, err, sizeof err), -1);
	free(text);
	assert_string_equal(err, "t.yaml:1:65: nested deeper than 64 levels");
	expect_error("listen:\n  allow: [[[[[10.0.0.0/8]]]]]\n",
		     "t.yaml:2:11: listen.allow[0]: expected an IP network, got a sequence");
}

static void test_unreadable_config_file(void **state)
{
	struct tmpdir *t = *state;
	char path[128], want[CONFIG_ERR_MAX], err[CONFIG_ERR_MAX] = "";
	struct config *c = NULL;

	snprintf(path, sizeof path, "%s/absent.yaml", t->path);
	snprintf(want, sizeof want, "%s: cannot read: No such file or directory", path);
	assert_int_equal(config_load(path, &c, err, sizeof err), -1);
	assert_string_equal(err, want);

	snprintf(want, sizeof want, "%s: cannot read: Is a directory", t->path);
	assert_int_equal(config_load(t->path, &c, err, sizeof err), -1);
	assert_string_equal(err, want);
	assert_null(c);
}

/* ---- scalar parsers ---------------------------------------------------------- */

static void test_parse_duration(void **state)
{
	(void)state;
	uint64_t v = 1;

	assert_int_equal(config_parse_duration_ms("0s", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(config_parse_duration_ms("500ms", &v), 0);
	assert_int_equal(v, 500);
	assert_int_equal(config_parse_duration_ms("10s", &v), 0);
	assert_int_equal(v, 10000);
	assert_int_equal(config_parse_duration_ms("5m", &v), 0);
	assert_int_equal(v, 300000);
	assert_int_equal(config_parse_duration_ms("2h", &v), 0);
	assert_int_equal(v, 7200000);
	assert_int_equal(config_parse_duration_ms("1d", &v), 0);
	assert_int_equal(v, 86400000);
	assert_int_equal(config_parse_duration_ms("18446744073709551615ms", &v), 0);
	assert_true(v == UINT64_MAX);
	/* UINT64_MAX / 86400000 = 213503982334.6 */
	assert_int_equal(config_parse_duration_ms("213503982334d", &v), 0);

	v = 42;
	static const char *const bad[] = {
		"", "10", "s", "-1s", "+1s", "1.5s", "10 s", " 10s", "10s ", "10S", "1h30m",
		"10sec", "0x10s", "18446744073709551616ms", "213503982335d",
		"99999999999999999999999s",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (config_parse_duration_ms(bad[i], &v) != -1)
			fail_msg("duration \"%s\" was accepted", bad[i]);
	}
	assert_int_equal(v, 42); /* untouched on failure */

	const char *why = NULL;
	assert_int_equal(config_value_duration_ms("213503982335d", &v, &why), -1);
	assert_string_equal(why, "is too large");
}

static void test_parse_size(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		uint64_t bytes;
	} good[] = {
		{"0B", 0},           {"4096B", 4096},          {"1K", 1000},
		{"512KiB", 524288},  {"8MiB", 8 << 20},        {"64MiB", 64 << 20},
		{"1M", 1000000},     {"1G", 1000000000},       {"1GiB", 1 << 30},
		{"17179869183GiB", 17179869183ULL << 30},
	};
	uint64_t v;

	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		assert_int_equal(config_parse_size(good[i].text, &v), 0);
		assert_true(v == good[i].bytes);
	}
	static const char *const bad[] = {
		"", "64", "MiB", "64mib", "64MB", "64 MiB", "1.5GiB", "-1B", "64KIB",
		"17179869184GiB", "18446744073709551616B",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (config_parse_size(bad[i], &v) != -1)
			fail_msg("size \"%s\" was accepted", bad[i]);
	}
}

static void test_parse_uint_bool_ip(void **state)
{
	(void)state;
	const char *why;
	uint64_t v;
	bool b;
	struct config_ip ip;

	assert_int_equal(config_value_uint("0", &v, &why), 0);
	assert_int_equal(v, 0);
	assert_int_equal(config_value_uint("18446744073709551615", &v, &why), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(config_value_uint("18446744073709551616", &v, &why), -1);
	assert_string_equal(why, "is too large");
	assert_int_equal(config_value_uint("00", &v, &why), -1);
	assert_int_equal(config_value_uint("1e3", &v, &why), -1);
	assert_int_equal(config_value_uint("", &v, &why), -1);

	assert_int_equal(config_value_bool("true", &b, &why), 0);
	assert_true(b);
	assert_int_equal(config_value_bool("false", &b, &why), 0);
	assert_false(b);
	assert_int_equal(config_value_bool("True", &b, &why), -1);
	assert_int_equal(config_value_bool("on", &b, &why), -1);

	assert_int_equal(config_value_ip("FD00:0::5", &ip, &why), 0);
	assert_string_equal(ip.text, "fd00::5");
	assert_int_equal(config_value_ip("10.0.0", &ip, &why), -1);
	assert_int_equal(config_value_ip("fe80::1%eth0", &ip, &why), -1);
	assert_int_equal(config_value_ip("localhost", &ip, &why), -1);
	assert_string_equal(why, "is not an IP address");
}

static void test_parse_hostport_and_name(void **state)
{
	(void)state;
	struct config_hostport hp;
	const char *why;
	char name[300];

	assert_int_equal(config_value_hostport("::1", 53, &hp, &why), 0);
	assert_string_equal(hp.text, "[::1]:53");
	assert_int_equal(config_value_hostport("10.0.0.1:65535", 53, &hp, &why), 0);
	assert_string_equal(hp.text, "10.0.0.1:65535");
	static const char *const bad[] = {
		"10.0.0.1:65536", "10.0.0.1:", "10.0.0.1:x", "[10.0.0.1]:53", "[::1]53",
		"[::1", "dns.google:53", "", ":53",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (config_value_hostport(bad[i], 53, &hp, &why) != -1)
			fail_msg("host:port \"%s\" was accepted", bad[i]);
	}
	assert_int_equal(config_value_hostport("10.0.0.1", 0, &hp, &why), -1);
	assert_string_equal(why, "needs a port (ip:port or [ipv6]:port)");

	strcpy(name, "_Sip._TCP.Example.ORG.");
	assert_int_equal(config_value_name(name, &why), 0);
	assert_string_equal(name, "_sip._tcp.example.org");
	strcpy(name, "a.*.example");
	assert_int_equal(config_value_name(name, &why), -1);
	strcpy(name, ".example");
	assert_int_equal(config_value_name(name, &why), -1);
	assert_string_equal(why, "has an empty label");
	strcpy(name, "example..");
	assert_int_equal(config_value_name(name, &why), -1);
}

/* ---- comparing and copying (live reload) ---------------------------------------- */

struct changed {
	char keys[16][64];
	unsigned reload[16];
	size_t n;
};

static void note_change(const char *key, unsigned reload, void *arg)
{
	struct changed *c = arg;

	assert_true(c->n < 16);
	c->reload[c->n] = reload;
	snprintf(c->keys[c->n++], sizeof c->keys[0], "%s", key);
}

static const char reload_base[] =
	"listen: {addresses: [127.0.0.1], port: 5353, workers: 2}\n"
	"cache: {size: 1MiB}\n"
	"static:\n"
	"  records:\n"
	"    - {name: a.example, a: [10.0.0.1]}\n"
	"upstream:\n"
	"  servers: [127.0.0.1:5300]\n"
	"  forward_zones: {corp.internal: [10.1.0.1]}\n"
	"kubernetes: {node_name: n1}\n";

static void test_diff_names_each_changed_key(void **state)
{
	(void)state;
	struct config *a = config_of(reload_base);
	struct config *b = config_of(
		"listen: {addresses: [127.0.0.1, 127.0.0.2], port: 5353, workers: 3}\n"
		"cache: {size: 2MiB}\n"
		"static:\n"
		"  records:\n"
		"    - {name: a.example, a: [10.0.0.2]}\n"
		"upstream:\n"
		"  servers: [127.0.0.1:5300]\n"
		"  forward_zones: {corp.internal: [10.1.0.2]}\n"
		"kubernetes: {node_name: n2}\n");
	static const struct {
		const char *key;
		unsigned reload; /* as the schema declares it */
	} want[] = {
		{"listen.addresses", CONFIG_APPLY_LISTEN},
		{"listen.workers", CONFIG_RESTART_ONLY},
		{"kubernetes.node_name", CONFIG_RESTART_ONLY},
		{"static.records", CONFIG_APPLY_SOURCES},
		{"upstream.forward_zones", CONFIG_APPLY_UPSTREAM},
		{"cache.size", CONFIG_APPLY_CACHE},
	};
	struct changed c = {0};

	config_diff(a, b, note_change, &c);
	assert_int_equal(c.n, sizeof want / sizeof want[0]);
	for (size_t i = 0; i < c.n; i++) {
		assert_string_equal(c.keys[i], want[i].key);
		assert_int_equal(c.reload[i], want[i].reload);
	}
	config_free(b);
	config_free(a);
}

struct declared {
	const struct config *running;
	struct config *next;
	size_t keys, restart_only;
};

static void check_declared(const char *key, unsigned reload, void *arg)
{
	static const unsigned apply_steps =
		CONFIG_APPLY_LISTEN | CONFIG_APPLY_SERVER | CONFIG_APPLY_SOURCES |
		CONFIG_APPLY_UPSTREAM | CONFIG_APPLY_CACHE | CONFIG_APPLY_LOG | CONFIG_APPLY_NODE |
		CONFIG_APPLY_PODS | CONFIG_APPLY_DNSTAP;
	struct declared *d = arg;

	d->keys++;
	if (reload == CONFIG_RESTART_ONLY) {
		/* A reload must be able to keep its running value. */
		if (config_copy_key(d->next, d->running, key) != 0)
			fail_msg("%s is restart-only, but its running value cannot be kept", key);
		d->restart_only++;
		return;
	}
	if (!reload || (reload & ~apply_steps))
		fail_msg("%s: reload %#x: declare CONFIG_RESTART_ONLY or the CONFIG_APPLY_* steps "
			 "that take it in (config.c)",
			 key, reload);
}

/* Every key says how a reload applies it: none is live or restart-only by omission. */
static void test_every_key_declares_how_a_reload_applies_it(void **state)
{
	(void)state;
	struct declared d = {.running = config_of(reload_base), .next = config_of("")};

	config_each_key(check_declared, &d);
	assert_true(d.keys > 70);
	assert_true(d.restart_only > 0 && d.restart_only < d.keys);
	config_free(d.next);
	config_free((struct config *)d.running);
}

static void test_diff_of_equal_configs_is_empty(void **state)
{
	(void)state;
	/* Same values written differently and at other positions. */
	struct config *a = config_of(reload_base);
	struct config *b = config_of(
		"kubernetes: {node_name: n1}\n"
		"upstream:\n"
		"  forward_zones: {Corp.Internal.: ['10.1.0.1:53']}\n"
		"  servers: ['127.0.0.1:5300']\n"
		"\n"
		"static: {records: [{name: A.Example., a: [10.0.0.1]}]}\n"
		"cache: {size: 1024KiB}\n"
		"listen: {workers: 2, addresses: [127.0.0.1], port: \"5353\"}\n");
	struct changed c = {0};

	config_diff(a, b, note_change, &c);
	assert_int_equal(c.n, 0);
	config_free(b);
	config_free(a);
}

static void test_copy_key_keeps_a_running_value(void **state)
{
	(void)state;
	struct config *running = config_of(reload_base);
	struct config *next = config_of(
		"listen: {addresses: [127.0.0.3], port: 5353, workers: 4}\n"
		"kubernetes: {node_name: other}\n"
		"nftables: {fallback_endpoints: [10.96.0.20]}\n");
	struct changed c = {0};

	assert_int_equal(config_copy_key(next, running, "listen.workers"), 0);
	assert_int_equal(config_copy_key(next, running, "kubernetes.node_name"), 0);
	assert_int_equal(config_copy_key(next, running, "nftables.fallback_endpoints"), 0);
	assert_int_equal(config_copy_key(next, running, "listen.addresses"), 0);
	assert_int_equal(next->listen.workers, 2);
	assert_string_equal(next->kubernetes.node_name, "n1");
	assert_int_equal(next->nftables.n_fallback_endpoints, 0);
	assert_int_equal(next->listen.n_addresses, 1);
	assert_string_equal(next->listen.addresses[0].text, "127.0.0.1");
	/* Lists of mappings, sections and unknown keys are refused, and change nothing. */
	assert_int_equal(config_copy_key(next, running, "static.records"), -1);
	assert_int_equal(config_copy_key(next, running, "upstream.forward_zones"), -1);
	assert_int_equal(config_copy_key(next, running, "listen"), -1);
	assert_int_equal(config_copy_key(next, running, "listen.nope"), -1);
	assert_int_equal(config_copy_key(next, running, "listen.workers.x"), -1);
	/* What was not copied still differs; what was copied does not. */
	config_diff(running, next, note_change, &c);
	assert_int_equal(c.n, 4);
	assert_string_equal(c.keys[0], "static.records");
	assert_string_equal(c.keys[1], "upstream.servers");
	assert_string_equal(c.keys[2], "upstream.forward_zones");
	assert_string_equal(c.keys[3], "cache.size");
	config_free(running);
	/* next owns its copies: it outlives running and frees them itself. */
	assert_string_equal(next->kubernetes.node_name, "n1");
	config_free(next);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_from_empty_document),
		cmocka_unit_test(test_null_sections_mean_defaults),
		cmocka_unit_test(test_brief_contract_example),
		cmocka_unit_test(test_every_value_set),
		cmocka_unit_test(test_record_types),
		cmocka_unit_test(test_record_ttl_defaults_to_cluster_ttl),
		cmocka_unit_test(test_hostport_forms),
		cmocka_unit_test(test_allow_networks),
		cmocka_unit_test(test_files_hash_is_of_the_bytes_parsed),
		cmocka_unit_test(test_example_config_loads),
		cmocka_unit_test(test_error_unknown_key),
		cmocka_unit_test(test_error_wrong_type),
		cmocka_unit_test(test_error_integer),
		cmocka_unit_test(test_error_boolean),
		cmocka_unit_test(test_error_bad_ip),
		cmocka_unit_test(test_error_wildcard_address),
		cmocka_unit_test(test_error_duration),
		cmocka_unit_test(test_error_size),
		cmocka_unit_test(test_error_enum),
		cmocka_unit_test(test_error_duplicate_key),
		cmocka_unit_test(test_error_min_ttl_above_max_ttl),
		cmocka_unit_test(test_error_record_cname_with_other_data),
		cmocka_unit_test(test_error_record_address_family),
		cmocka_unit_test(test_error_record_shape),
		cmocka_unit_test(test_error_bad_name),
		cmocka_unit_test(test_error_label_and_name_too_long),
		cmocka_unit_test(test_error_txt_too_long),
		cmocka_unit_test(test_error_strings),
		cmocka_unit_test(test_error_yaml_syntax),
		cmocka_unit_test(test_error_alias_expansion_capped),
		cmocka_unit_test_setup_teardown(test_static_files_relative_to_config, make_tmpdir,
						remove_tmpdir),
		cmocka_unit_test_setup_teardown(test_static_file_errors_name_that_file,
						make_tmpdir, remove_tmpdir),
		cmocka_unit_test_setup_teardown(test_only_regular_files_are_read, make_tmpdir,
						remove_tmpdir),
		cmocka_unit_test(test_nesting_is_bounded),
		cmocka_unit_test_setup_teardown(test_unreadable_config_file, make_tmpdir,
						remove_tmpdir),
		cmocka_unit_test(test_listen_address_from_the_environment),
		cmocka_unit_test(test_ipv6_clients_cut_at_the_configured_length),
		cmocka_unit_test(test_intercept_and_fallback_endpoints),
		cmocka_unit_test(test_fallback_service),
		cmocka_unit_test(test_cluster_coredns_options),
		cmocka_unit_test(test_mesh_and_multicluster),
		cmocka_unit_test(test_parse_duration),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_parse_uint_bool_ip),
		cmocka_unit_test(test_parse_hostport_and_name),
		cmocka_unit_test(test_diff_names_each_changed_key),
		cmocka_unit_test(test_diff_of_equal_configs_is_empty),
		cmocka_unit_test(test_every_key_declares_how_a_reload_applies_it),
		cmocka_unit_test(test_copy_key_keeps_a_running_value),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
