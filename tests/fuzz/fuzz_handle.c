/*
 * libFuzzer target for the query pipeline (src/query/query_handle): the
 * input is a query packet from a client. It is answered over a real set of
 * sources built once: static records (every record type the config has,
 * CNAME chains, a set too big for UDP), a synced cluster table (ClusterIP,
 * headless and ExternalName Services, endpoints, pods for autopath), a
 * clusterset table (a ClusterSetIP and a headless import), the mesh's
 * ServiceEntry hosts (exact, wildcard, exported to one namespace, headless,
 * one with more addresses than UDP holds, one under the cluster zone) and a
 * cache holding live, negative, SERVFAIL and large answers. Each input is
 * answered four ways: over UDP from a pod (autopath walks), over TCP from
 * another pod, over UDP from no known address with the upstream failing
 * and the cache long expired (stale answers), and over UDP from IPv6.
 *
 * ASan/UBSan catch memory errors (the output buffers are exactly the size
 * query_handle is promised); the checks catch a reply larger than its
 * limit, one a client cannot read, a reply with another ID, and a request
 * for the resolver that is not a well-formed question and chain.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <urcu/urcu-memb.h>

#include "cache/cache.h"
#include "cluster/cluster.h"
#include "cluster/objects.h"
#include "config/config.h"
#include "dns/dns.h"
#include "fuzz.h"
#include "mesh/mesh.h"
#include "mesh/objects.h"
#include "query/query.h"

#define NOW 1000
#define UDP_MAX 1232

static const char config_fmt[] =
	"kubernetes: {enabled: true}\n"
	"listen: {addresses: [127.0.0.1], udp_max_payload: %d}\n"
	"chaos: {enabled: true, version: \"fuzz\", id: \"node-a\"}\n"
	"cluster: {domain: cluster.local, ttl: 5s, autopath: true, pods: insecure}\n"
	"mesh: {istio: true}\n"
	"multicluster: {enabled: true}\n"
	"upstream: {resolv_conf: \"%s\"}\n"
	"static:\n"
	"  records:\n"
	"    - {name: db.prod.svc.cluster.local, a: [10.0.0.5], aaaa: [\"fd00::5\"]}\n"
	"    - {name: alias.prod.svc.cluster.local, cname: db.prod.svc.cluster.local}\n"
	"    - {name: alias2.prod.svc.cluster.local, cname: alias.prod.svc.cluster.local}\n"
	"    - {name: out.prod.svc.cluster.local, cname: www.example.com}\n"
	"    - name: _mysql._tcp.db.prod.svc.cluster.local\n"
	"      srv: [{priority: 10, weight: 60, port: 3306, target: db.prod.svc.cluster.local}]\n"
	"    - {name: txt.prod.svc.cluster.local, txt: [\"hello world\", \"v=spf1 -all\"]}\n"
	"    - {name: 5.0.0.10.in-addr.arpa, ptr: [db.prod.svc.cluster.local]}\n"
	"    - {name: legacy.corp.internal, cname: db.prod.svc.cluster.local}\n"
	"    - name: big.prod.svc.cluster.local\n"
	"      a: [10.1.0.1, 10.1.0.2, 10.1.0.3, 10.1.0.4, 10.1.0.5, 10.1.0.6, 10.1.0.7,\n"
	"          10.1.0.8, 10.1.0.9, 10.1.0.10, 10.1.0.11, 10.1.0.12, 10.1.0.13, 10.1.0.14,\n"
	"          10.1.0.15, 10.1.0.16, 10.1.0.17, 10.1.0.18, 10.1.0.19, 10.1.0.20,\n"
	"          10.1.0.21, 10.1.0.22, 10.1.0.23, 10.1.0.24, 10.1.0.25, 10.1.0.26,\n"
	"          10.1.0.27, 10.1.0.28, 10.1.0.29, 10.1.0.30, 10.1.0.31, 10.1.0.32,\n"
	"          10.1.0.33, 10.1.0.34, 10.1.0.35, 10.1.0.36, 10.1.0.37, 10.1.0.38]\n";

static const char *const cluster_objects[][2] = {
	{"ns", "{\"kind\":\"Namespace\",\"metadata\":{\"name\":\"prod\"}}"},
	{"ns", "{\"kind\":\"Namespace\",\"metadata\":{\"name\":\"team\"}}"},
	{"svc", "{\"kind\":\"Service\",\"metadata\":{\"name\":\"api\",\"namespace\":\"team\"},"
		"\"spec\":{\"clusterIP\":\"10.96.0.9\",\"clusterIPs\":[\"10.96.0.9\",\"fd00::9\"],"
		"\"ports\":[{\"name\":\"http\",\"port\":80,\"protocol\":\"TCP\"}]}}"},
	{"svc", "{\"kind\":\"Service\",\"metadata\":{\"name\":\"web\",\"namespace\":\"prod\"},"
		"\"spec\":{\"clusterIP\":\"None\",\"clusterIPs\":[\"None\"],"
		"\"ports\":[{\"name\":\"http\",\"port\":80,\"protocol\":\"TCP\"}]}}"},
	{"slice", "{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\","
		  "\"metadata\":{\"name\":\"web-1\",\"namespace\":\"prod\","
		  "\"labels\":{\"kubernetes.io/service-name\":\"web\"}},\"endpoints\":["
		  "{\"addresses\":[\"10.1.0.1\"],\"conditions\":{\"ready\":true},\"hostname\":\"web-0\"},"
		  "{\"addresses\":[\"10.1.0.2\"],\"conditions\":{\"ready\":true}},"
		  "{\"addresses\":[\"10.1.0.3\"],\"conditions\":{\"ready\":false}}],"
		  "\"ports\":[{\"name\":\"http\",\"port\":8080,\"protocol\":\"TCP\"}]}"},
	{"svc", "{\"kind\":\"Service\",\"metadata\":{\"name\":\"ext\",\"namespace\":\"prod\"},"
		"\"spec\":{\"type\":\"ExternalName\",\"externalName\":\"www.example.org\"}}"},
	{"pod", "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"client\",\"namespace\":\"prod\"},"
		"\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Running\","
		"\"podIP\":\"10.1.0.50\",\"podIPs\":[{\"ip\":\"10.1.0.50\"}]}}"},
	{"pod", "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"client\",\"namespace\":\"team\"},"
		"\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Running\","
		"\"podIP\":\"10.1.0.51\",\"podIPs\":[{\"ip\":\"10.1.0.51\"},{\"ip\":\"fd00:1::51\"}]}}"},
};

/* The mesh's ServiceEntries and the clusterset's ServiceImports and slices. */
#define SE(ns, name, spec) \
	"{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"" ns "\"," \
	"\"creationTimestamp\":\"2024-05-01T10:00:00Z\"},\"spec\":{" spec "}}"
static const char *const mesh_objects[] = {
	SE("prod", "api", "\"hosts\":[\"api.example.com\",\"*.wild.example.com\","
	   "\"cache.prod.svc.cluster.local\"],\"addresses\":[\"192.0.2.1\",\"2001:db8::1\"]"),
	SE("prod", "private", "\"hosts\":[\"private.example.com\"],\"exportTo\":[\".\"],"
	   "\"addresses\":[\"192.0.2.2\"]"),
	SE("team", "legacy", "\"hosts\":[\"legacy.corp.example\"],\"resolution\":\"NONE\","
	   "\"endpoints\":[{\"address\":\"10.9.0.1\"},{\"address\":\"10.9.0.2\"}]"),
	SE("team", "many", "\"hosts\":[\"many.example.com\"],\"addresses\":["
	   "\"192.0.2.10\",\"192.0.2.11\",\"192.0.2.12\",\"192.0.2.13\",\"192.0.2.14\","
	   "\"192.0.2.15\",\"192.0.2.16\",\"192.0.2.17\",\"192.0.2.18\",\"192.0.2.19\","
	   "\"192.0.2.20\",\"192.0.2.21\",\"192.0.2.22\",\"192.0.2.23\",\"192.0.2.24\","
	   "\"192.0.2.25\",\"192.0.2.26\",\"192.0.2.27\",\"192.0.2.28\",\"192.0.2.29\","
	   "\"192.0.2.30\",\"192.0.2.31\",\"192.0.2.32\",\"192.0.2.33\",\"192.0.2.34\","
	   "\"192.0.2.35\",\"192.0.2.36\",\"192.0.2.37\",\"192.0.2.38\",\"192.0.2.39\","
	   "\"192.0.2.40\",\"192.0.2.41\",\"192.0.2.42\",\"192.0.2.43\",\"192.0.2.44\"]"),
	SE("team", "many-b", "\"hosts\":[\"many.example.com\"],\"addresses\":[\"192.0.2.99\"]"),
};
static const char *const clusterset_objects[][2] = {
	{"ns", "{\"metadata\":{\"name\":\"prod\"}}"},
	{"svc", "{\"metadata\":{\"name\":\"db\",\"namespace\":\"prod\"},\"spec\":{"
		"\"type\":\"ClusterSetIP\",\"ips\":[\"10.100.0.5\"],"
		"\"ports\":[{\"name\":\"sql\",\"port\":5432,\"protocol\":\"TCP\"}]}}"},
	{"svc", "{\"metadata\":{\"name\":\"web\",\"namespace\":\"prod\"},\"spec\":{"
		"\"type\":\"Headless\",\"ports\":[{\"name\":\"http\",\"port\":80}]}}"},
	{"slice", "{\"addressType\":\"IPv4\",\"metadata\":{\"name\":\"web-east\","
		  "\"namespace\":\"prod\",\"labels\":{\"multicluster.kubernetes.io/service-name\":"
		  "\"web\",\"multicluster.kubernetes.io/source-cluster\":\"east\"}},\"endpoints\":["
		  "{\"addresses\":[\"10.2.0.1\"],\"hostname\":\"web-0\"},{\"addresses\":[\"10.2.0.2\"]}],"
		  "\"ports\":[{\"name\":\"http\",\"port\":80,\"protocol\":\"TCP\"}]}"},
};

static struct cache *cache;
static struct cluster *cluster, *clusterset;
static struct mesh *mesh;
static uint8_t *udp_out, *tcp_out; /* exactly the size query_handle may fill */
static struct query_ask request;

static void apply_object(struct cluster *c, const char *kind, const char *json)
{
	struct kube_json_doc *doc = kube_json_parse(json, strlen(json));
	const struct kube_json *o;

	CHECK(doc);
	o = kube_json_root(doc);
	if (strcmp(kind, "ns") == 0)
		cluster_namespace_upsert(c, o);
	else if (strcmp(kind, "svc") == 0)
		cluster_service_upsert(c, o);
	else if (strcmp(kind, "slice") == 0)
		cluster_slice_upsert(c, o);
	else if (strcmp(kind, "pod") == 0)
		cluster_pod_upsert(c, o);
	else
		mesh_entry_upsert(mesh, o);
	kube_json_doc_free(doc);
}

static void make_query(struct dns_query *q, const char *name, uint16_t qtype, bool dnssec_ok)
{
	uint8_t pkt[DNS_HEADER_LEN + DNS_MAX_NAME + 4 + 11] = {0x12, 0x34, 0x01, 0, 0, 1};
	size_t n = DNS_HEADER_LEN;
	int len = dns_name_from_text(name, pkt + n);

	CHECK(len > 0);
	n += (size_t)len;
	pkt[n++] = (uint8_t)(qtype >> 8);
	pkt[n++] = (uint8_t)qtype;
	pkt[n++] = 0;
	pkt[n++] = DNS_C_IN;
	if (dnssec_ok) {
		static const uint8_t opt[11] = {0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0};
		memcpy(pkt + n, opt, sizeof opt);
		n += sizeof opt;
		pkt[11] = 1;
	}
	CHECK(dns_parse_query(pkt, n, q) == DNS_PARSE_OK);
}

/* An upstream reply to name/qtype with rcode, and `records` copies of rdata in the
 * answer (NXDOMAIN: example.org's SOA in authority instead), stored in the cache. */
static void cache_reply(const char *name, uint16_t qtype, bool dnssec_ok, enum dns_rcode rcode,
			const uint8_t *rdata, uint16_t rdlen, int records)
{
	static const uint8_t soa[] = {2, 'n', 's', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'o', 'r',
				      'g', 0, 0, 0, 0, 0, 1, 0, 0, 14, 16, 0, 0, 3, 132, 0, 9,
				      58, 128, 0, 0, 1, 44};
	static const uint8_t apex[] = {7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'o', 'r', 'g', 0};
	static uint8_t msg[DNS_MAX_MESSAGE];
	struct dns_query q;
	struct dns_writer w;

	make_query(&q, name, qtype, dnssec_ok);
	dns_response_begin(&w, msg, sizeof msg, &q, rcode);
	for (int i = 0; i < records; i++)
		dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, qtype, DNS_C_IN, 300, rdata, rdlen);
	if (rcode == DNS_R_NXDOMAIN)
		dns_response_add_rr(&w, DNS_SEC_AUTHORITY, apex, DNS_T_SOA, DNS_C_IN, 300, soa,
				    sizeof soa);
	CHECK(cache_insert(cache, &q, msg, dns_response_finish(&w, 0), NOW) == 0);
}

static void fill_cache(void)
{
	static const uint8_t addr[4] = {192, 0, 2, 1};
	uint8_t txt[200];

	memset(txt, 'x', sizeof txt);
	txt[0] = sizeof txt - 1;
	cache_reply("www.example.org", DNS_T_A, false, DNS_R_NOERROR, addr, 4, 1);
	cache_reply("www.example.org", DNS_T_A, true, DNS_R_NOERROR, addr, 4, 1);
	cache_reply("gone.example.org", DNS_T_A, false, DNS_R_NXDOMAIN, NULL, 0, 0);
	cache_reply("broken.example.org", DNS_T_A, false, DNS_R_SERVFAIL, NULL, 0, 0);
	cache_reply("big.example.org", DNS_T_TXT, false, DNS_R_NOERROR, txt, sizeof txt, 15);
	/* an autopath candidate the resolver has answered */
	cache_reply("www.example.org.corp.internal", DNS_T_A, false, DNS_R_NXDOMAIN, NULL, 0, 0);
}

static void setup(void)
{
	char resolv_conf[] = "/tmp/localdns-fuzz-resolv-XXXXXX";
	static const char resolv_text[] = "nameserver 192.0.2.53\nsearch corp.internal example.org\n";
	char yaml[sizeof config_fmt + 64], err[CONFIG_ERR_MAX];
	struct config *cfg;
	int fd = mkstemp(resolv_conf);

	CHECK(fd >= 0);
	CHECK(write(fd, resolv_text, sizeof resolv_text - 1) == (ssize_t)(sizeof resolv_text - 1));
	close(fd);
	snprintf(yaml, sizeof yaml, config_fmt, UDP_MAX, resolv_conf);
	if (config_load_string("fuzz.yaml", yaml, strlen(yaml), &cfg, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	urcu_memb_register_thread();
	cluster = cluster_new(cfg, err, sizeof err);
	clusterset = cluster_new_clusterset(cfg, err, sizeof err);
	mesh = mesh_new(cfg, err, sizeof err);
	CHECK(cluster && clusterset && mesh);
	for (size_t i = 0; i < sizeof cluster_objects / sizeof cluster_objects[0]; i++)
		apply_object(cluster, cluster_objects[i][0], cluster_objects[i][1]);
	for (size_t i = 0; i < sizeof clusterset_objects / sizeof clusterset_objects[0]; i++)
		apply_object(clusterset, clusterset_objects[i][0], clusterset_objects[i][1]);
	for (size_t i = 0; i < sizeof mesh_objects / sizeof mesh_objects[0]; i++)
		apply_object(NULL, "entry", mesh_objects[i]);
	cluster_set_synced(cluster);
	cluster_set_synced(clusterset);

	struct cache_config cc = {.max_bytes = 1 << 20, .max_ttl = 86400, .negative_max_ttl = 3600,
				  .servfail_ttl = 5, .serve_stale = true, .stale_max_age = 86400 * 30,
				  .prefetch = true};
	cache = cache_new(&cc);
	CHECK(cache);
	fill_cache();
	struct query_sources *s = query_sources_build(
		cfg, &(struct query_names){.cluster = cluster, .clusterset = clusterset, .mesh = mesh},
		cache, err, sizeof err);
	if (!s) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	query_sources_publish(s);
	config_free(cfg);
	unlink(resolv_conf);
	udp_out = malloc(UDP_MAX);
	tcp_out = malloc(DNS_MAX_MESSAGE);
	CHECK(udp_out && tcp_out);
}

static const struct sockaddr_storage *peer_v4(const char *ip)
{
	static struct sockaddr_storage ss[2];
	static int next;
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss[next++ % 2];

	memset(v4, 0, sizeof ss[0]);
	v4->sin_family = AF_INET;
	CHECK(inet_pton(AF_INET, ip, &v4->sin_addr) == 1);
	return (struct sockaddr_storage *)v4;
}

static const struct sockaddr_storage *peer_v6(const char *ip)
{
	static struct sockaddr_storage ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;

	v6->sin6_family = AF_INET6;
	CHECK(inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1);
	return &ss;
}

/* The most a UDP reply to this packet may hold (RFC 6891 6.2.5, our cap). */
static size_t udp_limit(const uint8_t *data, size_t size)
{
	struct dns_query q;
	enum dns_parse_result r = dns_parse_query(data, size, &q);

	if ((r != DNS_PARSE_OK && r != DNS_PARSE_BADVERS) || !q.has_edns)
		return DNS_MAX_UDP_PLAIN;
	if (q.edns_udp_size < DNS_EDNS_MIN_PAYLOAD)
		return DNS_EDNS_MIN_PAYLOAD;
	return q.edns_udp_size < UDP_MAX ? q.edns_udp_size : UDP_MAX;
}

/* What the resolver gets is a question it can ask and a chain of names. */
static void check_request(const struct query_ask *r, size_t limit)
{
	CHECK(r->q.question_ok && r->q.qname_len > 0 && r->q.qname_len <= DNS_MAX_NAME);
	CHECK(dns_name_len(r->q.qname) == r->q.qname_len);
	CHECK(r->reply_limit >= DNS_HEADER_LEN && r->reply_limit <= limit);
	CHECK(r->chain_len <= QUERY_CHAIN_MAX && r->nxdomain_len <= QUERY_NXDOMAIN_MAX);
	for (size_t pos = 0; pos < r->chain_len;) {
		size_t n = 0;
		while (pos + n < r->chain_len && r->chain[pos + n] != 0)
			n += 1u + r->chain[pos + n];
		CHECK(pos + n < r->chain_len && n + 1 <= DNS_MAX_NAME);
		pos += n + 1;
	}
	CHECK(!r->search || r->chain_len > 0);
}

static void handle(const uint8_t *data, size_t size, enum query_transport transport,
		   const struct sockaddr_storage *peer, uint64_t now, bool serve_stale)
{
	struct query_stats st = {0};
	struct query_ctx ctx = {.transport = transport, .peer = peer, .stats = &st, .now = now,
				.serve_stale = serve_stale, .ask = &request};
	uint8_t *out = transport == QUERY_TCP ? tcp_out : udp_out;
	size_t cap = transport == QUERY_TCP ? DNS_MAX_MESSAGE : UDP_MAX;
	size_t limit = transport == QUERY_TCP ? DNS_MAX_MESSAGE : udp_limit(data, size);

	urcu_memb_read_lock();
	size_t len = query_handle(data, size, out, cap, &ctx);
	urcu_memb_read_unlock();

	CHECK(st.received == 1);
	if (ctx.upstream == QUERY_UPSTREAM_ASK) {
		CHECK(len == 0);
		check_request(&request, limit);
		return;
	}
	if (ctx.upstream == QUERY_UPSTREAM_REFRESH)
		check_request(&request, limit);
	if (len == 0)
		return;
	CHECK(len <= limit);
	CHECK(memcmp(out, data, 2) == 0 && (out[2] & 0x80));
	CHECK(fuzz_message_ok(out, len));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setup();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	handle(data, size, QUERY_UDP, peer_v4("10.1.0.50"), NOW, false);
	handle(data, size, QUERY_TCP, peer_v4("10.1.0.51"), NOW, false);
	handle(data, size, QUERY_UDP, NULL, NOW + 86400, true);
	handle(data, size, QUERY_UDP, peer_v6("fd00:1::51"), NOW, false);
	return 0;
}
