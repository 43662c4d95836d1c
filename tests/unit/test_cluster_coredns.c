/*
 * CoreDNS compatibility of cluster/: where the Kubernetes DNS specification
 * leaves the answer open, localdns answers as CoreDNS's kubernetes plugin
 * does (docs/coredns-compat.md has one row per behaviour and names the test
 * here that checks it). Kept apart from test_cluster.c, which holds the
 * specification's cases.
 *
 * The fixture is our own: a namespace "shop" with Services of every shape
 * (single- and dual-stack ClusterIPs, unnamed ports, one port number under
 * two protocols, no ports, headless with hostnames, a shared hostname, an
 * IPv6 endpoint, no ports, ExternalName, ExternalIPs). Replies are compared
 * as sorted text lines, "<owner> <ttl> <TYPE> <data>", one per record.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <urcu/urcu-memb.h>

#include "alloc_count.h"
#include "cluster/cluster.h"
#include "cluster/objects.h"
#include "config/config.h"
#include "reply.h"
#include "cluster_fixture.h"

/* A table for "cluster: {domain: cluster.local, <options>}"; the other
 * keys keep their defaults (ttl 5s, pods insecure, both reverse zones
 * falling through). */
static struct cluster *make_cluster(const char *options)
{
	char yaml[512];

	snprintf(yaml, sizeof yaml, "cluster: {domain: cluster.local%s%s}\n", *options ? ", " : "",
		 options);
	return make_cluster_from(yaml);
}

#define NS(name) "{\"kind\":\"Namespace\",\"metadata\":{\"name\":\"" name "\"}}"

#define SVC(name, spec) \
	"{\"kind\":\"Service\",\"metadata\":{\"name\":\"" name "\",\"namespace\":\"shop\"}," \
	"\"spec\":{" spec "}}"

#define SLICE(svc, name, family, endpoints, ports)                                          \
	"{\"kind\":\"EndpointSlice\",\"addressType\":\"" family "\",\"metadata\":{\"name\":\"" \
	name "\",\"namespace\":\"shop\",\"labels\":{\"kubernetes.io/service-name\":\"" svc   \
	"\"}},\"endpoints\":[" endpoints "],\"ports\":" ports "}"

#define EP(addr, extra) "{\"addresses\":[\"" addr "\"],\"conditions\":{\"ready\":true}" extra "}"
#define NOT_READY(addr) "{\"addresses\":[\"" addr "\"],\"conditions\":{\"ready\":false}}"
#define POD(name) ",\"targetRef\":{\"kind\":\"Pod\",\"namespace\":\"shop\",\"name\":\"" name "\"}"
#define HOST(name) ",\"hostname\":\"" name "\""
#define PORT(name, proto, n) "{\"name\":\"" name "\",\"protocol\":\"" proto "\",\"port\":" #n "}"

static const char *const shop[] = {
	NS("shop"),
	/* ClusterIP, two named ports; endpoints: pod-backed, with a hostname, not ready */
	SVC("api", "\"clusterIP\":\"10.96.1.1\",\"clusterIPs\":[\"10.96.1.1\"],"
		   "\"ports\":[" PORT("http", "TCP", 80) "," PORT("metrics", "TCP", 9090) "]"),
	SLICE("api", "api-1", "IPv4",
	      EP("10.2.0.1", POD("api-7f9c")) "," EP("10.2.0.2", HOST("primary") POD("api-0")) ","
	      NOT_READY("10.2.0.3"),
	      "[" PORT("http", "TCP", 8080) "]"),
	/* dual-stack ClusterIP, an endpoint per family */
	SVC("dual", "\"clusterIP\":\"10.96.1.2\",\"clusterIPs\":[\"10.96.1.2\",\"fd00:96::2\"],"
		    "\"ports\":[" PORT("grpc", "TCP", 50051) "]"),
	SLICE("dual", "dual-4", "IPv4", EP("10.2.1.1", ""), "[" PORT("grpc", "TCP", 50051) "]"),
	SLICE("dual", "dual-6", "IPv6", EP("fd00:2::1", ""), "[" PORT("grpc", "TCP", 50051) "]"),
	/* one unnamed port, no endpoints */
	SVC("bare", "\"clusterIP\":\"10.96.1.3\",\"ports\":[{\"port\":5432,\"protocol\":\"TCP\"}]"),
	/* one port number under two protocols (kube-dns's shape) */
	SVC("dns", "\"clusterIP\":\"10.96.1.4\",\"ports\":[" PORT("dns", "UDP", 53) ","
		   PORT("dns-tcp", "TCP", 53) "]"),
	SLICE("dns", "dns-1", "IPv4", EP("10.2.4.1", ""), "[" PORT("dns", "UDP", 53) ","
	      PORT("dns-tcp", "TCP", 53) "]"),
	/* no ports at all */
	SVC("noports", "\"clusterIP\":\"10.96.1.5\""),
	/* headless: hostnames, a dashed IPv4 and IPv6, one hostname twice, two ports */
	SVC("peers", "\"clusterIP\":\"None\",\"clusterIPs\":[\"None\"]"),
	SLICE("peers", "peers-4", "IPv4",
	      EP("10.2.2.1", HOST("etcd-0")) "," EP("10.2.2.2", HOST("etcd-1")) ","
	      EP("10.2.2.3", "") "," EP("10.2.2.4", HOST("twin")) "," EP("10.2.2.5", HOST("twin")),
	      "[" PORT("peer", "TCP", 2380) "," PORT("client", "TCP", 2379) "]"),
	SLICE("peers", "peers-6", "IPv6", EP("fd00:2::2:3", ""),
	      "[" PORT("peer", "TCP", 2380) "," PORT("client", "TCP", 2379) "]"),
	/* headless without ports; an IPv6 endpoint whose text ends in "::" */
	SVC("portless", "\"clusterIP\":\"None\""),
	SLICE("portless", "portless-1", "IPv4",
	      EP("10.2.3.1", "") ",{\"addresses\":[\"10.2.3.2\",\"10.2.3.3\"],"
	      "\"conditions\":{\"ready\":true}}", "null"),
	SLICE("portless", "portless-6", "IPv6", EP("fd00:3::", ""), "null"),
	/* EndpointSlice skew: api's first pod in a second slice too */
	SLICE("api", "api-2", "IPv4", EP("10.2.0.1", POD("api-7f9c")), "[" PORT("http", "TCP", 8080) "]"),
	/* a second Service selecting api's first pod */
	SVC("canary", "\"clusterIP\":\"None\""),
	SLICE("canary", "canary-1", "IPv4", EP("10.2.0.1", ""), "null"),
	/* a hand-made slice naming api's ClusterIP as an endpoint */
	SVC("odd", "\"clusterIP\":\"None\""),
	SLICE("odd", "odd-1", "IPv4", EP("10.96.1.1", ""), "null"),
	SVC("ext", "\"type\":\"ExternalName\",\"externalName\":\"db.example.org\","
		   "\"ports\":[" PORT("http", "TCP", 80) "]"),
	SVC("lb", "\"type\":\"LoadBalancer\",\"clusterIP\":\"10.96.1.6\","
		  "\"externalIPs\":[\"203.0.113.7\"],\"ports\":[" PORT("http", "TCP", 80) "]"),
	NULL,
};

static void load(struct cluster *c, const char *const *objects)
{
	for (; *objects; objects++) {
		struct kube_json_doc *doc = kube_json_parse(*objects, strlen(*objects));
		const struct kube_json *o;
		const char *kind;
		assert_non_null(doc);
		o = kube_json_root(doc);
		kind = kube_json_get_text(o, "kind");
		assert_non_null(kind);
		if (strcmp(kind, "Namespace") == 0)
			cluster_namespace_upsert(c, o);
		else if (strcmp(kind, "Service") == 0)
			cluster_service_upsert(c, o);
		else
			cluster_slice_upsert(c, o);
		kube_json_doc_free(doc);
	}
	cluster_set_synced(c);
}

static struct cluster *shop_cluster(const char *options)
{
	struct cluster *c = make_cluster(options);

	load(c, shop);
	return c;
}

static int setup(void **state)
{
	urcu_memb_register_thread();
	*state = shop_cluster("");
	return 0;
}

/* Asked at the largest payload a reply holds, so no answer compared here is cut to fit. */
static enum cluster_result ask(const struct cluster *c, const char *name, uint16_t qtype,
			       struct reply *r)
{
	return ask_for(c, name, qtype, 4096, r);
}

static const char *type_name(uint16_t type)
{
	switch (type) {
	case DNS_T_A: return "A";
	case DNS_T_AAAA: return "AAAA";
	case DNS_T_CNAME: return "CNAME";
	case DNS_T_SOA: return "SOA";
	case DNS_T_NS: return "NS";
	case DNS_T_PTR: return "PTR";
	case DNS_T_TXT: return "TXT";
	case DNS_T_SRV: return "SRV";
	default: return "?";
	}
}

/* A (maybe compressed) name at p in r's message, as text. */
static void name_at(const struct reply *r, const uint8_t *p, char *out, size_t len)
{
	uint8_t name[DNS_MAX_NAME];
	size_t pos = (size_t)(p - r->buf);

	assert_true(dns_name_read(r->buf, r->len, &pos, name, true) > 0);
	assert_true(dns_name_to_text(name, out, len) >= 0);
}

static void rr_line(const struct reply *r, const struct rr_view *rr, char *out, size_t len)
{
	char owner[MSG_TEXT_MAX], data[700];
	const uint8_t *d = r->buf + rr->rdoff;

	for (size_t i = 0; i == 0 || owner[i - 1]; i++) /* the client's case aside */
		owner[i] = (char)tolower((unsigned char)rr->owner[i]);
	switch (rr->type) {
	case DNS_T_A:
	case DNS_T_AAAA:
		inet_ntop(rr->type == DNS_T_A ? AF_INET : AF_INET6, d, data, sizeof data);
		break;
	case DNS_T_SRV: {
		char target[256];
		assert_true(dns_name_to_text(d + 6, target, sizeof target) >= 0); /* never compressed */
		snprintf(data, sizeof data, "%u %u %u %s", rd16(d), rd16(d + 2), rd16(d + 4), target);
		break;
	}
	case DNS_T_SOA: {
		char mname[256], rname[256];
		size_t pos = (size_t)(d - r->buf);
		uint8_t tmp[DNS_MAX_NAME];
		assert_true(dns_name_read(r->buf, r->len, &pos, tmp, true) > 0);
		assert_true(dns_name_to_text(tmp, mname, sizeof mname) >= 0);
		assert_true(dns_name_read(r->buf, r->len, &pos, tmp, true) > 0);
		assert_true(dns_name_to_text(tmp, rname, sizeof rname) >= 0);
		const uint8_t *t = r->buf + pos + 4; /* past the serial, which is a time */
		snprintf(data, sizeof data, "%s %s %u %u %u %u", mname, rname,
			 (unsigned)rd16(t) << 16 | rd16(t + 2), (unsigned)rd16(t + 4) << 16 | rd16(t + 6),
			 (unsigned)rd16(t + 8) << 16 | rd16(t + 10),
			 (unsigned)rd16(t + 12) << 16 | rd16(t + 14));
		break;
	}
	case DNS_T_TXT:
		snprintf(data, sizeof data, "\"%.*s\"", d[0], (const char *)d + 1);
		break;
	default:
		name_at(r, d, data, sizeof data);
		break;
	}
	snprintf(out, len, "%s %u %s %s", owner, rr->ttl, type_name(rr->type), data);
}

static int compare_lines(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Section sec (1 answer, 2 authority, 3 additional) as sorted lines joined by '\n'. */
static const char *section(const struct reply *r, int sec)
{
	static char out[8][16384];
	static int next;
	static char lines[64][2048]; /* an owner of MSG_TEXT_MAX and its data */
	char *sorted[64];
	const uint16_t counts[4] = {r->v->qd, r->v->an, r->v->ns, r->v->ar};
	size_t first = 0, n = counts[sec];
	char *o = out[next++ % 8];

	assert_true(n <= 64);
	for (int i = 1; i < sec; i++)
		first += counts[i];
	for (size_t i = 0; i < n; i++) {
		rr_line(r, &r->v->rr[first + i], lines[i], sizeof lines[i]);
		sorted[i] = lines[i];
	}
	qsort(sorted, n, sizeof *sorted, compare_lines);
	o[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		strcat(o, i ? "\n" : "");
		strcat(o, sorted[i]);
	}
	return o;
}

#define ANSWER(r) section(r, 1)
#define AUTHORITY(r) section(r, 2)
#define ADDITIONAL(r) section(r, 3)

#define SOA_LINE "cluster.local. 5 SOA ns.dns.cluster.local. hostmaster.cluster.local. 7200 1800 86400 5"

static void expect_nxdomain(const struct cluster *c, const char *name, uint16_t qtype)
{
	struct reply r;

	assert_int_equal(ask(c, name, qtype, &r), CLUSTER_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	assert_true(r.v->flags & DNS_F_AA);
	assert_string_equal(ANSWER(&r), "");
	assert_string_equal(AUTHORITY(&r), SOA_LINE);
}

static void expect_nodata(const struct cluster *c, const char *name, uint16_t qtype)
{
	struct reply r;

	assert_int_equal(ask(c, name, qtype, &r), CLUSTER_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_string_equal(ANSWER(&r), "");
	assert_string_equal(AUTHORITY(&r), SOA_LINE);
}

/* The whole answer section for name/qtype (NOERROR, AA). */
static void expect_answer(const struct cluster *c, const char *name, uint16_t qtype,
			  const char *answer)
{
	struct reply r;

	assert_int_equal(ask(c, name, qtype, &r), CLUSTER_ANSWERED);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_true(r.v->flags & DNS_F_AA);
	assert_string_equal(ANSWER(&r), answer);
}

static void expect_not_local(const struct cluster *c, const char *name, uint16_t qtype)
{
	struct reply r;

	assert_int_equal(ask(c, name, qtype, &r), CLUSTER_NOT_LOCAL);
}

/* ---- SRV ------------------------------------------------------------------ */

static void test_coredns_srv_of_a_service_name_has_one_record_per_port(void **state)
{
	struct reply r;

	ask(*state, "api.shop.svc.cluster.local", DNS_T_SRV, &r);
	assert_string_equal(ANSWER(&r),
			    "api.shop.svc.cluster.local. 5 SRV 0 50 80 api.shop.svc.cluster.local.\n"
			    "api.shop.svc.cluster.local. 5 SRV 0 50 9090 api.shop.svc.cluster.local.");
	assert_string_equal(ADDITIONAL(&r), "api.shop.svc.cluster.local. 5 A 10.96.1.1");
	/* an unnamed port is listed at the Service's name (it has no _port name); a
	 * Service without endpoints is answered all the same */
	expect_answer(*state, "bare.shop.svc.cluster.local", DNS_T_A,
		      "bare.shop.svc.cluster.local. 5 A 10.96.1.3");
	ask(*state, "bare.shop.svc.cluster.local", DNS_T_SRV, &r);
	assert_string_equal(ANSWER(&r),
			    "bare.shop.svc.cluster.local. 5 SRV 0 100 5432 bare.shop.svc.cluster.local.");
	assert_string_equal(ADDITIONAL(&r), "bare.shop.svc.cluster.local. 5 A 10.96.1.3");
	expect_nodata(*state, "noports.shop.svc.cluster.local", DNS_T_SRV);
}

static void test_coredns_srv_weights_count_every_cluster_ip(void **state)
{
	struct reply r;

	/* two ClusterIPs, one port: two entries, one record, weight 50 */
	ask(*state, "dual.shop.svc.cluster.local", DNS_T_SRV, &r);
	assert_string_equal(ANSWER(&r),
			    "dual.shop.svc.cluster.local. 5 SRV 0 50 50051 dual.shop.svc.cluster.local.");
	assert_string_equal(ADDITIONAL(&r), "dual.shop.svc.cluster.local. 5 A 10.96.1.2\n"
					    "dual.shop.svc.cluster.local. 5 AAAA fd00:96::2");
	ask(*state, "_grpc._tcp.dual.shop.svc.cluster.local", DNS_T_SRV, &r);
	assert_string_equal(
		ANSWER(&r),
		"_grpc._tcp.dual.shop.svc.cluster.local. 5 SRV 0 50 50051 dual.shop.svc.cluster.local.");
	ask(*state, "_http._tcp.api.shop.svc.cluster.local", DNS_T_SRV, &r);
	assert_string_equal(
		ANSWER(&r),
		"_http._tcp.api.shop.svc.cluster.local. 5 SRV 0 100 80 api.shop.svc.cluster.local.");
	assert_string_equal(ADDITIONAL(&r), "api.shop.svc.cluster.local. 5 A 10.96.1.1");
}

static void test_coredns_srv_of_one_port_number_under_two_protocols_is_one_record(void **state)
{
	struct reply r;

	ask(*state, "dns.shop.svc.cluster.local", DNS_T_SRV, &r);
	assert_string_equal(ANSWER(&r),
			    "dns.shop.svc.cluster.local. 5 SRV 0 50 53 dns.shop.svc.cluster.local.");
	ask(*state, "_dns._udp.dns.shop.svc.cluster.local", DNS_T_SRV, &r);
	assert_string_equal(ANSWER(&r),
			    "_dns._udp.dns.shop.svc.cluster.local. 5 SRV 0 100 53 dns.shop.svc.cluster.local.");
	expect_nxdomain(*state, "_dns._tcp.dns.shop.svc.cluster.local", DNS_T_SRV);
}

static void test_coredns_headless_srv_lists_every_endpoint_and_port(void **state)
{
	struct reply r;
	static const char *const additional =
		"10-2-2-3.peers.shop.svc.cluster.local. 5 A 10.2.2.3\n"
		"etcd-0.peers.shop.svc.cluster.local. 5 A 10.2.2.1\n"
		"etcd-1.peers.shop.svc.cluster.local. 5 A 10.2.2.2\n"
		"fd00-2--2-3.peers.shop.svc.cluster.local. 5 AAAA fd00:2::2:3\n"
		"twin.peers.shop.svc.cluster.local. 5 A 10.2.2.4\n"
		"twin.peers.shop.svc.cluster.local. 5 A 10.2.2.5";

	/* six addresses x two ports = 12 entries: weight 8; "twin" twice is one record per port */
	ask(*state, "peers.shop.svc.cluster.local", DNS_T_SRV, &r);
	assert_string_equal(ANSWER(&r),
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2379 10-2-2-3.peers.shop.svc.cluster.local.\n"
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2379 etcd-0.peers.shop.svc.cluster.local.\n"
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2379 etcd-1.peers.shop.svc.cluster.local.\n"
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2379 fd00-2--2-3.peers.shop.svc.cluster.local.\n"
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2379 twin.peers.shop.svc.cluster.local.\n"
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2380 10-2-2-3.peers.shop.svc.cluster.local.\n"
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2380 etcd-0.peers.shop.svc.cluster.local.\n"
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2380 etcd-1.peers.shop.svc.cluster.local.\n"
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2380 fd00-2--2-3.peers.shop.svc.cluster.local.\n"
			    "peers.shop.svc.cluster.local. 5 SRV 0 8 2380 twin.peers.shop.svc.cluster.local.");
	assert_string_equal(ADDITIONAL(&r), additional);
	/* one port: six entries, weight 16 */
	ask(*state, "_peer._tcp.peers.shop.svc.cluster.local", DNS_T_SRV, &r);
	assert_string_equal(
		ANSWER(&r),
		"_peer._tcp.peers.shop.svc.cluster.local. 5 SRV 0 16 2380 10-2-2-3.peers.shop.svc.cluster.local.\n"
		"_peer._tcp.peers.shop.svc.cluster.local. 5 SRV 0 16 2380 etcd-0.peers.shop.svc.cluster.local.\n"
		"_peer._tcp.peers.shop.svc.cluster.local. 5 SRV 0 16 2380 etcd-1.peers.shop.svc.cluster.local.\n"
		"_peer._tcp.peers.shop.svc.cluster.local. 5 SRV 0 16 2380 fd00-2--2-3.peers.shop.svc.cluster.local.\n"
		"_peer._tcp.peers.shop.svc.cluster.local. 5 SRV 0 16 2380 twin.peers.shop.svc.cluster.local.");
	assert_string_equal(ADDITIONAL(&r), additional);
}

static void test_coredns_headless_without_ports_has_addresses_but_no_srv(void **state)
{
	expect_answer(*state, "portless.shop.svc.cluster.local", DNS_T_A,
		      "portless.shop.svc.cluster.local. 5 A 10.2.3.1\n"
		      "portless.shop.svc.cluster.local. 5 A 10.2.3.2\n"
		      "portless.shop.svc.cluster.local. 5 A 10.2.3.3");
	expect_nodata(*state, "portless.shop.svc.cluster.local", DNS_T_SRV);
	expect_answer(*state, "10-2-3-1.portless.shop.svc.cluster.local", DNS_T_A,
		      "10-2-3-1.portless.shop.svc.cluster.local. 5 A 10.2.3.1");
	/* an endpoint with two addresses: each under its own dashed name */
	expect_answer(*state, "10-2-3-2.portless.shop.svc.cluster.local", DNS_T_A,
		      "10-2-3-2.portless.shop.svc.cluster.local. 5 A 10.2.3.2");
	expect_answer(*state, "10-2-3-3.portless.shop.svc.cluster.local", DNS_T_A,
		      "10-2-3-3.portless.shop.svc.cluster.local. 5 A 10.2.3.3");
	/* an IPv6 address whose text ends in "::" gets a last 0 */
	expect_answer(*state, "fd00-3--0.portless.shop.svc.cluster.local", DNS_T_AAAA,
		      "fd00-3--0.portless.shop.svc.cluster.local. 5 AAAA fd00:3::");
	expect_nxdomain(*state, "fd00-3--.portless.shop.svc.cluster.local", DNS_T_AAAA);
}

static void test_coredns_address_questions_at_srv_names_get_the_targets(void **state)
{
	expect_answer(*state, "_http._tcp.api.shop.svc.cluster.local", DNS_T_A,
		      "_http._tcp.api.shop.svc.cluster.local. 5 A 10.96.1.1");
	expect_nodata(*state, "_http._tcp.api.shop.svc.cluster.local", DNS_T_AAAA);
	expect_nodata(*state, "_http._tcp.api.shop.svc.cluster.local", DNS_T_TXT);
	expect_answer(*state, "_client._tcp.peers.shop.svc.cluster.local", DNS_T_AAAA,
		      "_client._tcp.peers.shop.svc.cluster.local. 5 AAAA fd00:2::2:3");
	expect_nxdomain(*state, "_nope._tcp.api.shop.svc.cluster.local", DNS_T_A);
}

/* Where we differ: _<proto>.<svc> is an empty non-terminal (RFC 8020), not NXDOMAIN. */
static void test_coredns_differs_proto_label_is_nodata(void **state)
{
	expect_nodata(*state, "_tcp.api.shop.svc.cluster.local", DNS_T_SRV);
	expect_nodata(*state, "_udp.dns.shop.svc.cluster.local", DNS_T_A);
	expect_nxdomain(*state, "_udp.api.shop.svc.cluster.local", DNS_T_SRV);
	expect_nxdomain(*state, "_tcp.bare.shop.svc.cluster.local", DNS_T_SRV); /* unnamed only */
}

/* ---- endpoint names ------------------------------------------------------- */

static void test_coredns_endpoint_names_under_cluster_ip_services(void **state)
{
	expect_answer(*state, "10-2-0-1.api.shop.svc.cluster.local", DNS_T_A,
		      "10-2-0-1.api.shop.svc.cluster.local. 5 A 10.2.0.1");
	expect_answer(*state, "primary.api.shop.svc.cluster.local", DNS_T_A,
		      "primary.api.shop.svc.cluster.local. 5 A 10.2.0.2");
	expect_nodata(*state, "10-2-0-1.api.shop.svc.cluster.local", DNS_T_AAAA);
	expect_answer(*state, "fd00-2--1.dual.shop.svc.cluster.local", DNS_T_AAAA,
		      "fd00-2--1.dual.shop.svc.cluster.local. 5 AAAA fd00:2::1");
	/* an endpoint with a hostname has no dashed name; not ready: no name */
	expect_nxdomain(*state, "10-2-0-2.api.shop.svc.cluster.local", DNS_T_A);
	expect_nxdomain(*state, "10-2-0-3.api.shop.svc.cluster.local", DNS_T_A);
	/* another Service's endpoint, and names below an endpoint */
	expect_nxdomain(*state, "10-2-1-1.api.shop.svc.cluster.local", DNS_T_A);
	expect_nxdomain(*state, "x.10-2-0-1.api.shop.svc.cluster.local", DNS_T_A);
	expect_nxdomain(*state, "api-7f9c.api.shop.svc.cluster.local", DNS_T_A);
	/* the SRV targets of a ClusterIP Service stay the Service's name */
	expect_nodata(*state, "10-2-0-1.api.shop.svc.cluster.local", DNS_T_SRV);
}

static void test_coredns_shared_hostname_answers_every_address(void **state)
{
	expect_answer(*state, "twin.peers.shop.svc.cluster.local", DNS_T_A,
		      "twin.peers.shop.svc.cluster.local. 5 A 10.2.2.4\n"
		      "twin.peers.shop.svc.cluster.local. 5 A 10.2.2.5");
	/* and an address in two slices of one Service answers once */
	expect_answer(*state, "10-2-0-1.api.shop.svc.cluster.local", DNS_T_A,
		      "10-2-0-1.api.shop.svc.cluster.local. 5 A 10.2.0.1");
}

static void test_coredns_endpoint_pod_names(void **state)
{
	struct cluster *c = shop_cluster("endpoint_pod_names: true");
	static const char *const odd_pods[] = {
		SVC("jobs", "\"clusterIP\":\"None\""),
		SLICE("jobs", "jobs-1", "IPv4",
		      EP("10.2.5.1", POD("with.dots")) ","
		      EP("10.2.5.2", POD("a-name-that-is-far-too-long-to-be-one-label-0123456789012345678901"))
		      "," EP("10.2.5.3", ",\"targetRef\":{\"kind\":\"Node\",\"name\":\"node-a\"}"),
		      "null"),
		NULL,
	};
	(void)state;

	load(c, odd_pods);
	/* no hostname: the pod's name; a hostname still wins */
	expect_answer(c, "api-7f9c.api.shop.svc.cluster.local", DNS_T_A,
		      "api-7f9c.api.shop.svc.cluster.local. 5 A 10.2.0.1");
	expect_nxdomain(c, "10-2-0-1.api.shop.svc.cluster.local", DNS_T_A);
	expect_answer(c, "primary.api.shop.svc.cluster.local", DNS_T_A,
		      "primary.api.shop.svc.cluster.local. 5 A 10.2.0.2");
	expect_nxdomain(c, "api-0.api.shop.svc.cluster.local", DNS_T_A);
	/* not one DNS label: the dashed address; any kind of targetRef counts */
	expect_answer(c, "10-2-5-1.jobs.shop.svc.cluster.local", DNS_T_A,
		      "10-2-5-1.jobs.shop.svc.cluster.local. 5 A 10.2.5.1");
	expect_answer(c, "10-2-5-2.jobs.shop.svc.cluster.local", DNS_T_A,
		      "10-2-5-2.jobs.shop.svc.cluster.local. 5 A 10.2.5.2");
	expect_answer(c, "node-a.jobs.shop.svc.cluster.local", DNS_T_A,
		      "node-a.jobs.shop.svc.cluster.local. 5 A 10.2.5.3");
	expect_answer(c, "2.0.2.10.in-addr.arpa", DNS_T_PTR,
		      "2.0.2.10.in-addr.arpa. 5 PTR primary.api.shop.svc.cluster.local.");
	cluster_free(c);
}

/* ---- reverse names ------------------------------------------------------- */

static void test_coredns_ptr_of_an_endpoint_names_it_under_each_service(void **state)
{
	/* under api once, though two of its slices hold it; and under canary */
	expect_answer(*state, "1.0.2.10.in-addr.arpa", DNS_T_PTR,
		      "1.0.2.10.in-addr.arpa. 5 PTR 10-2-0-1.api.shop.svc.cluster.local.\n"
		      "1.0.2.10.in-addr.arpa. 5 PTR 10-2-0-1.canary.shop.svc.cluster.local.");
	expect_answer(*state, "2.0.2.10.in-addr.arpa", DNS_T_PTR,
		      "2.0.2.10.in-addr.arpa. 5 PTR primary.api.shop.svc.cluster.local.");
	expect_answer(*state, "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.0.0.0.0.0.d.f.ip6.arpa",
		      DNS_T_PTR,
		      "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.0.0.0.0.0.d.f.ip6.arpa. 5 PTR "
		      "fd00-2--1.dual.shop.svc.cluster.local.");
	expect_answer(*state, "5.2.2.10.in-addr.arpa", DNS_T_PTR,
		      "5.2.2.10.in-addr.arpa. 5 PTR twin.peers.shop.svc.cluster.local.");
	expect_not_local(*state, "3.0.2.10.in-addr.arpa", DNS_T_PTR); /* not ready */
}

static void test_coredns_ptr_of_a_cluster_ip_names_the_service_alone(void **state)
{
	/* 10.96.1.1 is api's ClusterIP and, by a hand-made slice, odd's endpoint */
	expect_answer(*state, "1.1.96.10.in-addr.arpa", DNS_T_PTR,
		      "1.1.96.10.in-addr.arpa. 5 PTR api.shop.svc.cluster.local.");
	expect_answer(*state, "2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.0.d.f.ip6.arpa",
		      DNS_T_PTR,
		      "2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.0.d.f.ip6.arpa. 5 PTR "
		      "dual.shop.svc.cluster.local.");
	/* and its dashed name under odd still exists */
	expect_answer(*state, "10-96-1-1.odd.shop.svc.cluster.local", DNS_T_A,
		      "10-96-1-1.odd.shop.svc.cluster.local. 5 A 10.96.1.1");
}

static void test_coredns_ptr_of_an_external_ip_is_not_ours(void **state)
{
	expect_not_local(*state, "7.113.0.203.in-addr.arpa", DNS_T_PTR);
	expect_answer(*state, "6.1.96.10.in-addr.arpa", DNS_T_PTR,
		      "6.1.96.10.in-addr.arpa. 5 PTR lb.shop.svc.cluster.local.");
}

static void test_coredns_fallthrough_decides_reverse_misses(void **state)
{
	struct cluster *strict = shop_cluster("fallthrough: []");
	struct cluster *ten = shop_cluster("fallthrough: [10.in-addr.arpa]");
	struct reply r;

	/* the default, kubeadm's Corefile: every reverse zone falls through */
	expect_not_local(*state, "9.9.9.9.in-addr.arpa", DNS_T_PTR);
	expect_not_local(*state, "1.0.2.10.in-addr.arpa", DNS_T_A);
	/* none: authoritative, with the reverse zone's SOA */
	ask(strict, "9.9.9.9.in-addr.arpa", DNS_T_PTR, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	assert_true(r.v->flags & DNS_F_AA);
	assert_string_equal(AUTHORITY(&r), "in-addr.arpa. 5 SOA ns.dns.in-addr.arpa. "
					   "hostmaster.in-addr.arpa. 7200 1800 86400 5");
	ask(strict, "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa",
	    DNS_T_PTR, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	assert_string_equal(AUTHORITY(&r), "ip6.arpa. 5 SOA ns.dns.ip6.arpa. "
					   "hostmaster.ip6.arpa. 7200 1800 86400 5");
	expect_answer(strict, "1.0.2.10.in-addr.arpa", DNS_T_PTR,
		      "1.0.2.10.in-addr.arpa. 5 PTR 10-2-0-1.api.shop.svc.cluster.local.\n"
		      "1.0.2.10.in-addr.arpa. 5 PTR 10-2-0-1.canary.shop.svc.cluster.local.");
	/* another type at a name we hold: NODATA (CoreDNS: NXDOMAIN, see the doc) */
	ask(strict, "1.0.2.10.in-addr.arpa", DNS_T_A, &r);
	assert_int_equal(rcode(&r), DNS_R_NOERROR);
	assert_string_equal(ANSWER(&r), "");
	/* one zone */
	expect_not_local(ten, "9.9.9.10.in-addr.arpa", DNS_T_PTR);
	ask(ten, "9.9.9.9.in-addr.arpa", DNS_T_PTR, &r);
	assert_int_equal(rcode(&r), DNS_R_NXDOMAIN);
	cluster_free(strict);
	cluster_free(ten);
}

static void test_coredns_unsynced_reverse_names_outside_fallthrough_fail(void **state)
{
	struct cluster *c = make_cluster("fallthrough: [ip6.arpa]");
	struct dns_query q;
	struct dns_writer w;
	struct cluster_chase chase;
	uint8_t buf[512];
	(void)state;

	make_query(&q, "1.0.2.10.in-addr.arpa", DNS_T_PTR);
	dns_response_begin(&w, buf, sizeof buf, &q, DNS_R_NOERROR);
	urcu_memb_read_lock();
	assert_int_equal(cluster_answer(c, &q, &w, &chase), CLUSTER_UNSYNCED);
	make_query(&q, "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa",
		   DNS_T_PTR);
	assert_int_equal(cluster_answer(c, &q, &w, &chase), CLUSTER_NOT_LOCAL);
	urcu_memb_read_unlock();
	cluster_free(c);
}

/* ---- options -------------------------------------------------------------- */

static void test_coredns_ignore_empty_service(void **state)
{
	struct cluster *c = shop_cluster("ignore_empty_service: true");
	(void)state;

	expect_nxdomain(c, "bare.shop.svc.cluster.local", DNS_T_A);
	expect_nxdomain(c, "bare.shop.svc.cluster.local", DNS_T_SRV);
	expect_nxdomain(c, "noports.shop.svc.cluster.local", DNS_T_A);
	expect_answer(c, "3.1.96.10.in-addr.arpa", DNS_T_PTR, /* CoreDNS keeps the PTR */
		      "3.1.96.10.in-addr.arpa. 5 PTR bare.shop.svc.cluster.local.");
	expect_answer(c, "api.shop.svc.cluster.local", DNS_T_A,
		      "api.shop.svc.cluster.local. 5 A 10.96.1.1");
	expect_answer(c, "ext.shop.svc.cluster.local", DNS_T_CNAME,
		      "ext.shop.svc.cluster.local. 5 CNAME db.example.org.");
	/* the last endpoint going takes the name with it */
	cluster_slice_remove(c, "shop", "api-1");
	expect_answer(c, "api.shop.svc.cluster.local", DNS_T_A,
		      "api.shop.svc.cluster.local. 5 A 10.96.1.1");
	cluster_slice_remove(c, "shop", "api-2");
	expect_nxdomain(c, "api.shop.svc.cluster.local", DNS_T_A);
	cluster_free(c);
}

static void test_coredns_noendpoints(void **state)
{
	struct cluster *c = shop_cluster("noendpoints: true");
	(void)state;

	expect_nxdomain(c, "peers.shop.svc.cluster.local", DNS_T_A);
	expect_nxdomain(c, "etcd-0.peers.shop.svc.cluster.local", DNS_T_A);
	expect_nxdomain(c, "10-2-0-1.api.shop.svc.cluster.local", DNS_T_A);
	expect_nxdomain(c, "primary.api.shop.svc.cluster.local", DNS_T_A);
	expect_not_local(c, "1.0.2.10.in-addr.arpa", DNS_T_PTR);
	expect_answer(c, "api.shop.svc.cluster.local", DNS_T_A,
		      "api.shop.svc.cluster.local. 5 A 10.96.1.1");
	expect_answer(c, "_http._tcp.api.shop.svc.cluster.local", DNS_T_SRV,
		      "_http._tcp.api.shop.svc.cluster.local. 5 SRV 0 100 80 api.shop.svc.cluster.local.");
	expect_answer(c, "1.1.96.10.in-addr.arpa", DNS_T_PTR,
		      "1.1.96.10.in-addr.arpa. 5 PTR api.shop.svc.cluster.local.");
	cluster_free(c);
}

static void test_coredns_ttl_and_its_caps(void **state)
{
	struct cluster *c = make_cluster("ttl: 3600s");
	struct reply r;
	(void)state;

	load(c, shop);
	expect_answer(c, "api.shop.svc.cluster.local", DNS_T_A,
		      "api.shop.svc.cluster.local. 3600 A 10.96.1.1");
	/* the SOA at most 5 minutes, its minimum the ttl */
	ask(c, "nope.shop.svc.cluster.local", DNS_T_A, &r);
	assert_string_equal(AUTHORITY(&r), "cluster.local. 300 SOA ns.dns.cluster.local. "
					   "hostmaster.cluster.local. 7200 1800 86400 3600");
	/* dns-version for 8 hours */
	expect_answer(c, "dns-version.cluster.local", DNS_T_TXT,
		      "dns-version.cluster.local. 28800 TXT \"1.1.0\"");
	cluster_free(c);
	expect_answer(*state, "cluster.local", DNS_T_SOA,
		      "cluster.local. 5 SOA ns.dns.cluster.local. hostmaster.cluster.local. "
		      "7200 1800 86400 5");
}

static void test_coredns_pods_disabled(void **state)
{
	struct cluster *c = shop_cluster("pods: disabled");
	(void)state;

	expect_nxdomain(c, "10-2-0-1.shop.pod.cluster.local", DNS_T_A);
	expect_nxdomain(c, "shop.pod.cluster.local", DNS_T_A);
	expect_nodata(c, "pod.cluster.local", DNS_T_A);
	expect_nodata(c, "shop.svc.cluster.local", DNS_T_A);
	cluster_free(c);
}

static void test_coredns_pods_insecure(void **state)
{
	expect_answer(*state, "10-9-9-9.shop.pod.cluster.local", DNS_T_A,
		      "10-9-9-9.shop.pod.cluster.local. 5 A 10.9.9.9");
	expect_answer(*state, "fd00--0.shop.pod.cluster.local", DNS_T_AAAA,
		      "fd00--0.shop.pod.cluster.local. 5 AAAA fd00::");
	expect_nodata(*state, "10-9-9-9.shop.pod.cluster.local", DNS_T_AAAA);
	expect_nodata(*state, "shop.pod.cluster.local", DNS_T_A);
	expect_nxdomain(*state, "blah.shop.pod.cluster.local", DNS_T_A);
	expect_nxdomain(*state, "blah.shop.pod.cluster.local", DNS_T_HINFO);
	expect_nxdomain(*state, "10-9-9-9.nowhere.pod.cluster.local", DNS_T_A);
}

/* ---- names that are the same everywhere ----------------------------------- */

static void test_coredns_apex_and_structure(void **state)
{
	struct reply r;

	/* where we differ: no glue, and ns.dns.<zone> is no name of ours */
	expect_answer(*state, "cluster.local", DNS_T_NS,
		      "cluster.local. 5 NS ns.dns.cluster.local.");
	ask(*state, "cluster.local", DNS_T_NS, &r);
	assert_string_equal(ADDITIONAL(&r), "");
	expect_nxdomain(*state, "ns.dns.cluster.local", DNS_T_A);
	expect_nodata(*state, "cluster.local", DNS_T_A);
	expect_nodata(*state, "cluster.local", DNS_T_SRV);
	expect_nodata(*state, "cluster.local", DNS_T_HINFO);
	expect_nodata(*state, "svc.cluster.local", DNS_T_NS);
	expect_nodata(*state, "shop.svc.cluster.local", DNS_T_NS);
	expect_nodata(*state, "api.shop.svc.cluster.local", DNS_T_SOA);
	expect_nodata(*state, "api.shop.svc.cluster.local", DNS_T_TXT);
	expect_nodata(*state, "api.shop.svc.cluster.local", DNS_T_CNAME);
	expect_nodata(*state, "api.shop.svc.cluster.local", DNS_T_PTR);
	expect_nxdomain(*state, "foo.cluster.local", DNS_T_NS);
	expect_nxdomain(*state, "foo.svc.cluster.local", DNS_T_NS);
	expect_nxdomain(*state, "api.nowhere.svc.cluster.local", DNS_T_A);
	expect_nxdomain(*state, "a.b.c.d.api.shop.svc.cluster.local", DNS_T_A);
	expect_nxdomain(*state, "100.0.0.10.cluster.local", DNS_T_PTR);
	/* any letter case (the reply's owner has the client's: test_coredns_compat.py) */
	expect_answer(*state, "_HTTP._Tcp.API.shop.svc.cluster.local", DNS_T_SRV,
		      "_http._tcp.api.shop.svc.cluster.local. 5 SRV 0 100 80 api.shop.svc.cluster.local.");
}

static void test_coredns_external_name(void **state)
{
	struct dns_query q;
	struct dns_writer w;
	struct cluster_chase chase;
	struct reply r;

	expect_answer(*state, "ext.shop.svc.cluster.local", DNS_T_CNAME,
		      "ext.shop.svc.cluster.local. 5 CNAME db.example.org.");
	expect_nxdomain(*state, "_http._tcp.ext.shop.svc.cluster.local", DNS_T_SRV);
	expect_nxdomain(*state, "endpoint.ext.shop.svc.cluster.local", DNS_T_CNAME);
	expect_nxdomain(*state, "a.b.ext.shop.svc.cluster.local", DNS_T_CNAME);
	/* where we differ: SRV at the name follows its CNAME (CoreDNS: NODATA) */
	make_query(&q, "ext.shop.svc.cluster.local", DNS_T_SRV);
	dns_response_begin(&w, r.buf, sizeof r.buf, &q, DNS_R_NOERROR);
	urcu_memb_read_lock();
	assert_int_equal(cluster_answer(*state, &q, &w, &chase), CLUSTER_CHASE);
	urcu_memb_read_unlock();
	assert_int_equal(chase.n, 1);
}

/* Where we differ: ANY gets one RRset (RFC 8482), where CoreDNS answers NODATA. */
static void test_coredns_differs_any_gets_one_rrset(void **state)
{
	expect_answer(*state, "api.shop.svc.cluster.local", DNS_T_ANY,
		      "api.shop.svc.cluster.local. 5 A 10.96.1.1");
}

/* ---- the hot path --------------------------------------------------------- */

static void test_coredns_answers_allocate_nothing_and_take_no_mutex(void **state)
{
	static const struct {
		const char *name;
		uint16_t type;
	} cases[] = {
		{"api.shop.svc.cluster.local", DNS_T_SRV},
		{"peers.shop.svc.cluster.local", DNS_T_SRV},
		{"_peer._tcp.peers.shop.svc.cluster.local", DNS_T_SRV},
		{"_http._tcp.api.shop.svc.cluster.local", DNS_T_A},
		{"_tcp.api.shop.svc.cluster.local", DNS_T_SRV},
		{"_nope._tcp.api.shop.svc.cluster.local", DNS_T_SRV},
		{"10-2-0-1.api.shop.svc.cluster.local", DNS_T_A},
		{"fd00-2--1.dual.shop.svc.cluster.local", DNS_T_AAAA},
		{"10-2-0-2.api.shop.svc.cluster.local", DNS_T_A},
		{"1.1.96.10.in-addr.arpa", DNS_T_PTR},
		{"1.0.2.10.in-addr.arpa", DNS_T_PTR},
		{"9.9.9.9.in-addr.arpa", DNS_T_PTR},
		{"dns-version.cluster.local", DNS_T_TXT},
	};
	struct cluster *strict = shop_cluster("fallthrough: []");
	struct cluster *const tables[] = {*state, strict};
	struct reply r;

	if (!alloc_counting_works()) {
		print_message("not linked with -Wl,--wrap=malloc,...: see the Makefile\n");
		cluster_free(strict);
		skip();
	}
	urcu_memb_barrier(); /* the setup's deferred frees run now, not while counting */
	for (int round = 0; round < 50; round++) {
		for (size_t t = 0; t < 2; t++) {
			for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
				struct dns_query q;
				make_query(&q, cases[i].name, cases[i].type);
				counting = true;
				answer_query(tables[t], &q, &r, 1232);
				counting = false;
			}
		}
	}
	assert_int_equal(forbidden_calls, 0);
	counting = true; /* and the wrap reaches library code: an update allocates */
	UPSERT(cluster_namespace_upsert, strict, NS("another"));
	counting = false;
	assert_true(forbidden_calls > 0);
	cluster_free(strict);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, free_cluster_and_unregister)
	const struct CMUnitTest tests[] = {
		T(test_coredns_srv_of_a_service_name_has_one_record_per_port),
		T(test_coredns_srv_weights_count_every_cluster_ip),
		T(test_coredns_srv_of_one_port_number_under_two_protocols_is_one_record),
		T(test_coredns_headless_srv_lists_every_endpoint_and_port),
		T(test_coredns_headless_without_ports_has_addresses_but_no_srv),
		T(test_coredns_address_questions_at_srv_names_get_the_targets),
		T(test_coredns_differs_proto_label_is_nodata),
		T(test_coredns_endpoint_names_under_cluster_ip_services),
		T(test_coredns_shared_hostname_answers_every_address),
		T(test_coredns_endpoint_pod_names),
		T(test_coredns_ptr_of_an_endpoint_names_it_under_each_service),
		T(test_coredns_ptr_of_a_cluster_ip_names_the_service_alone),
		T(test_coredns_ptr_of_an_external_ip_is_not_ours),
		T(test_coredns_fallthrough_decides_reverse_misses),
		T(test_coredns_unsynced_reverse_names_outside_fallthrough_fail),
		T(test_coredns_ignore_empty_service),
		T(test_coredns_noendpoints),
		T(test_coredns_ttl_and_its_caps),
		T(test_coredns_pods_disabled),
		T(test_coredns_pods_insecure),
		T(test_coredns_apex_and_structure),
		T(test_coredns_external_name),
		T(test_coredns_differs_any_gets_one_rrset),
		T(test_coredns_answers_allocate_nothing_and_take_no_mutex),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}
