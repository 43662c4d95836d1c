/*
 * Unit tests for kube/'s pure parts: the streaming decoder (every chunk
 * boundary of a LIST and of a watch stream, only the kept fields, items
 * handed out as they close, the per-object bound, bad JSON, nesting), the
 * backoff schedule and the 410 relist schedule, base64, kubeconfig
 * parsing (contexts, relative paths, *-data, tokenFile, refused
 * credentials, exact messages), the in-cluster connection, token file
 * rotation, and the known-key set with its relist sweep.
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
#include <zlib.h>
#include <cmocka.h>

#include "alloc_count.h"
#include "kube/internal.h"
#include "util/hash.h"

/* ---- the streaming decoder ------------------------------------------------------ */

struct collected {
	char text[8192]; /* each object handed out, as plain JSON, joined with '|' */
	size_t n;
	size_t stop_after; /* return 7 from the callback at this object (0: never) */
};

/* A kept value as compact JSON text, appended to out (at *len, within cap). */
static void put_json(const struct kube_json *v, char *out, size_t *len, size_t cap)
{
	switch (v->type) {
	case KUBE_JSON_NULL:
		*len += (size_t)snprintf(out + *len, cap - *len, "null");
		break;
	case KUBE_JSON_BOOL:
		*len += (size_t)snprintf(out + *len, cap - *len, v->boolean ? "true" : "false");
		break;
	case KUBE_JSON_NUMBER:
		*len += (size_t)snprintf(out + *len, cap - *len, "%s", v->text);
		break;
	case KUBE_JSON_STRING:
		*len += (size_t)snprintf(out + *len, cap - *len, "\"");
		for (size_t i = 0; i < v->len; i++) {
			unsigned char ch = (unsigned char)v->text[i];
			*len += (size_t)snprintf(out + *len, cap - *len,
						 ch == '"' || ch == '\\' ? "\\%c" : ch < 0x20 ? "\\u%04x" : "%c",
						 ch);
		}
		*len += (size_t)snprintf(out + *len, cap - *len, "\"");
		break;
	case KUBE_JSON_ARRAY:
	case KUBE_JSON_OBJECT:
		*len += (size_t)snprintf(out + *len, cap - *len, v->type == KUBE_JSON_ARRAY ? "[" : "{");
		for (const struct kube_json *e = v->first; e; e = e->next) {
			if (e != v->first)
				*len += (size_t)snprintf(out + *len, cap - *len, ",");
			if (e->key)
				*len += (size_t)snprintf(out + *len, cap - *len, "\"%s\":", e->key);
			put_json(e, out, len, cap);
		}
		*len += (size_t)snprintf(out + *len, cap - *len, v->type == KUBE_JSON_ARRAY ? "]" : "}");
		break;
	}
	assert_true(*len < cap);
}

/* v as compact JSON text (in a static buffer). */
static const char *json_text(const struct kube_json *v)
{
	static char buf[8192];
	size_t len = 0;

	assert_non_null(v);
	put_json(v, buf, &len, sizeof buf);
	return buf;
}

static int count_object(void *ctx, const struct kube_json *obj)
{
	(void)obj;
	((struct collected *)ctx)->n++;
	return 0;
}

static int collect_object(void *ctx, const struct kube_json *obj)
{
	struct collected *c = ctx;
	const char *json = json_text(obj);
	size_t used = strlen(c->text);

	assert_true(used + strlen(json) + 2 < sizeof c->text);
	strcat(c->text, json);
	strcat(c->text, "|");
	c->n++;
	return c->stop_after && c->n == c->stop_after ? 7 : 0;
}

/* Feeds text in chunks of the given size; returns the last feed's result. */
static int feed_in_chunks(struct kube_decoder *d, const char *text, size_t chunk)
{
	size_t len = strlen(text);
	int rc = 0;

	for (size_t off = 0; off < len && rc == 0; off += chunk)
		rc = kube_decoder_feed(d, text + off, len - off < chunk ? len - off : chunk);
	return rc;
}

/* A ServiceList as the API server sends it: everything DNS does not read is
 * dropped (kind, managedFields, annotations but the initial-events-end one,
 * selector, targetPort, status), including values that look like JSON. */
static const char service_list[] =
	"{\"kind\":\"ServiceList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"42\","
	"\"continue\":\"eyJ2Ijoi\",\"remainingItemCount\":7},\"items\":["
	"{\"metadata\":{\"name\":\"web\",\"namespace\":\"prod\",\"uid\":\"u-1\","
	"\"resourceVersion\":\"40\",\"annotations\":{\"note\":\"}]{[\\\"x\\\\\",\"big\":"
	"\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"},\"managedFields\":[{\"manager\":"
	"\"kubectl\",\"fieldsV1\":{\"f:spec\":{\"f:ports\":{}}}}]},\"spec\":{\"ports\":[{\"name\":"
	"\"http\",\"protocol\":\"TCP\",\"port\":80,\"targetPort\":8080}],\"selector\":{\"app\":"
	"\"web\"},\"clusterIP\":\"10.96.0.7\",\"clusterIPs\":[\"10.96.0.7\",\"fd00::7\"],\"type\":"
	"\"ClusterIP\",\"publishNotReadyAddresses\":true,\"sessionAffinity\":null},\"status\":"
	"{\"loadBalancer\":{}}},"
	"{\"metadata\":{\"name\":\"ext\",\"namespace\":\"prod\",\"resourceVersion\":\"41\"},"
	"\"spec\":{\"type\":\"ExternalName\",\"externalName\":\"db.example.org\",\"ports\":null}},"
	"{\"metadata\":{\"name\":\"n\",\"namespace\":\"x\",\"resourceVersion\":\"9\","
	"\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}},\"spec\":{\"clusterIP\":"
	"\"None\",\"ports\":[{\"port\":53,\"nodePort\":99999999999999999999}]}}"
	"]}\n";

static const char service_items[] =
	"{\"metadata\":{\"name\":\"web\",\"namespace\":\"prod\",\"resourceVersion\":\"40\","
	"\"annotations\":{}},\"spec\":{\"ports\":[{\"name\":\"http\",\"protocol\":\"TCP\","
	"\"port\":80}],\"clusterIP\":\"10.96.0.7\",\"clusterIPs\":[\"10.96.0.7\",\"fd00::7\"],"
	"\"type\":\"ClusterIP\",\"publishNotReadyAddresses\":true}}|"
	"{\"metadata\":{\"name\":\"ext\",\"namespace\":\"prod\",\"resourceVersion\":\"41\"},"
	"\"spec\":{\"type\":\"ExternalName\",\"externalName\":\"db.example.org\",\"ports\":null}}|"
	"{\"metadata\":{\"name\":\"n\",\"namespace\":\"x\",\"resourceVersion\":\"9\","
	"\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}},\"spec\":{\"clusterIP\":"
	"\"None\",\"ports\":[{\"port\":53}]}}|";

/* Every chunk size from 1 byte to the whole response hands out the same items. */
static void test_decode_list_any_chunk_size(void **state)
{
	(void)state;
	size_t len = sizeof service_list - 1;

	for (size_t chunk = 1; chunk <= len; chunk++) {
		struct collected c = {.text = ""};
		struct kube_decoder *d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_SERVICES),
							  1 << 20, collect_object, &c);
		assert_non_null(d);
		assert_int_equal(feed_in_chunks(d, service_list, chunk), 0);
		assert_int_equal(kube_decoder_finish(d), 0);
		assert_string_equal(c.text, service_items);
		const struct kube_json *meta = kube_decoder_list_meta(d);
		assert_non_null(meta);
		assert_string_equal(json_text(meta),
				    "{\"resourceVersion\":\"42\",\"continue\":\"eyJ2Ijoi\"}");
		assert_null(kube_decoder_partial(d));
		kube_decoder_free(d);
	}
}

/* Items are handed out as each closes, before the response ends; a kept port is an integer. */
static void test_decode_list_items_as_they_close(void **state)
{
	(void)state;
	struct collected c = {.text = ""};
	struct kube_decoder *d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_SERVICES),
						  1 << 20, collect_object, &c);
	const char *first = strstr(service_list, ",{\"metadata\":{\"name\":\"ext\"");

	assert_int_equal(kube_decoder_feed(d, service_list, (size_t)(first - service_list)), 0);
	assert_int_equal(c.n, 1);
	assert_non_null(strstr(c.text, "\"port\":80}"));
	assert_null(kube_decoder_partial(d));
	assert_int_equal(kube_decoder_feed(d, first, 30), 0);
	assert_int_equal(c.n, 1);
	assert_string_equal(json_text(kube_decoder_partial(d)),
			    "{\"metadata\":{\"name\":\"ext\"}}");
	/* Cut here: the LIST is not whole. */
	assert_int_equal(kube_decoder_finish(d), KUBE_DECODE_BAD);
	kube_decoder_free(d);
}

static const char watch_stream[] =
	"{\"type\":\"ADDED\",\"object\":{\"kind\":\"EndpointSlice\",\"metadata\":{\"name\":\"web-1\","
	"\"namespace\":\"prod\",\"resourceVersion\":\"50\",\"labels\":{\"kubernetes.io/service-name\":"
	"\"web\",\"other\":\"x\"}},\"addressType\":\"IPv4\",\"endpoints\":[{\"addresses\":"
	"[\"10.1.0.1\"],\"conditions\":{\"ready\":true,\"serving\":true,\"terminating\":false},"
	"\"hostname\":\"h1\",\"targetRef\":{\"kind\":\"Pod\",\"namespace\":\"prod\",\"name\":\"p1\","
	"\"uid\":\"u\"},\"nodeName\":\"node-a\",\"zone\":\"z\"}],\"ports\":[{\"name\":\"\","
	"\"protocol\":\"UDP\",\"port\":53,\"appProtocol\":\"dns\"}]}}\n"
	"{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"EndpointSlice\",\"apiVersion\":"
	"\"discovery.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"51\",\"creationTimestamp\":null,"
	"\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\r\n"
	"\n"
	"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
	"\"status\":\"Failure\",\"message\":\"too old resource version: 1 (50)\",\"reason\":"
	"\"Expired\",\"code\":410}}\n";

static const char watch_events[] =
	"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"web-1\",\"namespace\":\"prod\","
	"\"resourceVersion\":\"50\",\"labels\":{\"kubernetes.io/service-name\":\"web\"}},"
	"\"addressType\":\"IPv4\",\"endpoints\":[{\"addresses\":[\"10.1.0.1\"],\"conditions\":"
	"{\"ready\":true,\"serving\":true,\"terminating\":false},\"hostname\":\"h1\",\"targetRef\":"
	"{\"kind\":\"Pod\",\"namespace\":\"prod\",\"name\":\"p1\"}}],\"ports\":[{\"name\":\"\","
	"\"protocol\":\"UDP\",\"port\":53}]}}|"
	"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"51\","
	"\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}|"
	"{\"type\":\"ERROR\",\"object\":{\"metadata\":{},\"message\":\"too old resource version: 1 (50)\","
	"\"reason\":\"Expired\",\"code\":410}}|";

/* A watch stream is a sequence of events, each handed out whole, at any chunk size. */
static void test_decode_watch_any_chunk_size(void **state)
{
	(void)state;
	size_t len = sizeof watch_stream - 1;

	for (size_t chunk = 1; chunk <= len; chunk++) {
		struct collected c = {.text = ""};
		struct kube_decoder *d = kube_decoder_new(
			KUBE_DECODE_WATCH, kube_fields(KUBE_ENDPOINTSLICES), 1 << 20, collect_object, &c);
		assert_int_equal(feed_in_chunks(d, watch_stream, chunk), 0);
		assert_string_equal(c.text, watch_events);
		assert_int_equal(kube_decoder_finish(d), 0);
		kube_decoder_free(d);
	}
	/* A stream cut inside an event: that event is never handed out. */
	struct collected c = {.text = ""};
	struct kube_decoder *d = kube_decoder_new(KUBE_DECODE_WATCH, kube_fields(KUBE_ENDPOINTSLICES),
						  1 << 20, collect_object, &c);
	assert_int_equal(kube_decoder_feed(d, watch_stream, 40), 0);
	assert_int_equal(c.n, 0);
	assert_int_equal(kube_decoder_finish(d), KUBE_DECODE_BAD);
	kube_decoder_free(d);
}

/* The bound is per object: a response far larger passes; one object over it fails. */
static void test_decode_object_bound(void **state)
{
	(void)state;
	enum { N = 200, NOTE = 5000 };
	char *big = malloc(N * (NOTE + 200) + 100), *p = big;
	char note[NOTE + 1];

	memset(note, 'x', NOTE);
	note[NOTE] = '\0';
	p += sprintf(p, "{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[");
	for (int i = 0; i < N; i++)
		p += sprintf(p, "%s{\"metadata\":{\"name\":\"s%d\",\"namespace\":\"n\","
			     "\"annotations\":{\"a\":\"%s\"}}}", i ? "," : "", i, note);
	strcpy(p, "]}");
	struct collected c = {.text = ""};
	struct kube_decoder *d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_NAMESPACES),
						  2 * NOTE, count_object, &c);
	assert_true(strlen(big) > 100 * 2 * NOTE);
	assert_int_equal(feed_in_chunks(d, big, 16384), 0);
	assert_int_equal(kube_decoder_finish(d), 0);
	assert_int_equal(c.n, N);
	kube_decoder_free(d);

	/* Half the bound: the first object is too large, whatever the chunking;
	 * what of it had come names it. */
	for (size_t chunk = 1000; chunk <= strlen(big); chunk *= 7) {
		struct collected none = {.text = ""};
		d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_NAMESPACES), NOTE / 2,
				     collect_object, &none);
		assert_int_equal(feed_in_chunks(d, big, chunk), KUBE_DECODE_TOO_LARGE);
		assert_int_equal(none.n, 0);
		assert_string_equal(json_text(kube_decoder_partial(d)),
				    "{\"metadata\":{\"name\":\"s0\",\"namespace\":\"n\",\"annotations\":{}}}");
		assert_non_null(strstr(kube_decoder_error(d), "larger than 2500 bytes"));
		/* It stays stopped. */
		assert_int_equal(kube_decoder_feed(d, "]}", 2), KUBE_DECODE_TOO_LARGE);
		kube_decoder_free(d);
	}
	free(big);
}

/* A ServiceEntry and a WorkloadEntry as the API server sends them: what
 * Istio's name table reads is kept (hosts, addresses, resolution, exportTo,
 * endpoints' addresses, the selector, istiod's allocation, the opt-out
 * label, creationTimestamp; a WorkloadEntry's address, labels, health),
 * the rest (ports, location, other labels, conditions' times) dropped. */
static void test_decode_istio_objects(void **state)
{
	static const char entries[] =
		"{\"apiVersion\":\"networking.istio.io/v1\",\"kind\":\"ServiceEntryList\","
		"\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[{\"apiVersion\":"
		"\"networking.istio.io/v1\",\"kind\":\"ServiceEntry\",\"metadata\":{\"creationTimestamp\":"
		"\"2024-05-01T10:00:00Z\",\"generation\":1,\"labels\":{\"app\":\"x\","
		"\"networking.istio.io/enable-autoallocate-ip\":\"false\"},\"name\":\"ext\",\"namespace\":"
		"\"prod\",\"resourceVersion\":\"4\",\"uid\":\"u\"},\"spec\":{\"hosts\":[\"a.example.org\"],"
		"\"addresses\":[\"192.0.2.1/32\"],\"ports\":[{\"number\":443,\"name\":\"https\","
		"\"protocol\":\"TLS\"}],\"location\":\"MESH_EXTERNAL\",\"resolution\":\"NONE\","
		"\"exportTo\":[\".\"],\"endpoints\":[{\"address\":\"10.0.0.1\",\"ports\":{\"https\":8443},"
		"\"labels\":{\"v\":\"1\"}}],\"workloadSelector\":{\"labels\":{\"app\":\"db\"}}},"
		"\"status\":{\"addresses\":[{\"value\":\"240.240.0.1\",\"host\":\"a.example.org\"}],"
		"\"conditions\":[{\"type\":\"Reconciled\",\"status\":\"True\",\"lastTransitionTime\":"
		"\"2024-05-01T10:00:01Z\"}],\"observedGeneration\":\"1\"}}]}";
	static const char workloads[] =
		"{\"type\":\"ADDED\",\"object\":{\"apiVersion\":\"networking.istio.io/v1\",\"kind\":"
		"\"WorkloadEntry\",\"metadata\":{\"annotations\":{\"proxy.istio.io/health-checks-enabled\":"
		"\"true\",\"other\":\"x\"},\"labels\":{\"app\":\"db\"},\"name\":\"vm-1\",\"namespace\":"
		"\"prod\",\"resourceVersion\":\"6\"},\"spec\":{\"address\":\"10.20.0.1\",\"labels\":"
		"{\"tier\":\"db\"},\"serviceAccount\":\"sa\",\"network\":\"n1\"},\"status\":{\"conditions\":"
		"[{\"type\":\"Healthy\",\"status\":\"True\",\"lastProbeTime\":\"2024-05-01T10:00:02Z\"}]}}}\n";
	struct collected c = {.text = ""};
	struct kube_decoder *d;

	(void)state;
	d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_SERVICEENTRIES), 1 << 20,
			     collect_object, &c);
	assert_int_equal(feed_in_chunks(d, entries, 7), 0);
	assert_int_equal(kube_decoder_finish(d), 0);
	kube_decoder_free(d);
	assert_string_equal(c.text,
		"{\"metadata\":{\"creationTimestamp\":\"2024-05-01T10:00:00Z\",\"labels\":"
		"{\"networking.istio.io/enable-autoallocate-ip\":\"false\"},\"name\":\"ext\","
		"\"namespace\":\"prod\",\"resourceVersion\":\"4\"},\"spec\":{\"hosts\":"
		"[\"a.example.org\"],\"addresses\":[\"192.0.2.1/32\"],\"resolution\":\"NONE\","
		"\"exportTo\":[\".\"],\"endpoints\":[{\"address\":\"10.0.0.1\"}],"
		"\"workloadSelector\":{\"labels\":{\"app\":\"db\"}}},\"status\":{\"addresses\":"
		"[{\"value\":\"240.240.0.1\",\"host\":\"a.example.org\"}]}}|");
	c = (struct collected){.text = ""};
	d = kube_decoder_new(KUBE_DECODE_WATCH, kube_fields(KUBE_WORKLOADENTRIES), 1 << 20,
			     collect_object, &c);
	assert_int_equal(feed_in_chunks(d, workloads, 5), 0);
	assert_int_equal(kube_decoder_finish(d), 0);
	kube_decoder_free(d);
	assert_string_equal(c.text,
		"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"annotations\":"
		"{\"proxy.istio.io/health-checks-enabled\":\"true\"},\"labels\":{\"app\":\"db\"},"
		"\"name\":\"vm-1\",\"namespace\":\"prod\",\"resourceVersion\":\"6\"},\"spec\":"
		"{\"address\":\"10.20.0.1\",\"labels\":{\"tier\":\"db\"}},\"status\":"
		"{\"conditions\":[{\"type\":\"Healthy\",\"status\":\"True\"}]}}}|");
}

/* Not JSON; kept values nested too deep (skipped ones may nest as they like);
 * the callback's nonzero value stops it for good. */
static void test_decode_errors_and_stop(void **state)
{
	(void)state;
	struct collected c = {.text = ""};
	struct kube_decoder *d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_SERVICES),
						  1 << 20, collect_object, &c);

	assert_int_equal(feed_in_chunks(d, "{\"items\":[{]", 3), KUBE_DECODE_BAD);
	assert_non_null(strstr(kube_decoder_error(d), "not JSON"));
	kube_decoder_free(d);

	char deep[4096] = "{\"items\":[{\"metadata\":{\"annotations\":{\"a\":";
	for (int i = 0; i < 1000; i++)
		strcat(deep, "[");
	for (int i = 0; i < 1000; i++)
		strcat(deep, "]");
	strcat(deep, "}}}]}");
	d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_SERVICES), 1 << 20, collect_object, &c);
	assert_int_equal(feed_in_chunks(d, deep, 100), 0);
	assert_int_equal(kube_decoder_finish(d), 0);
	kube_decoder_free(d);

	char kept[512] = "{\"type\":\"ADDED\",\"object\":{\"spec\":{\"clusterIPs\":";
	for (int i = 0; i < 40; i++)
		strcat(kept, "[");
	d = kube_decoder_new(KUBE_DECODE_WATCH, kube_fields(KUBE_SERVICES), 1 << 20, collect_object, &c);
	assert_int_equal(feed_in_chunks(d, kept, 8), KUBE_DECODE_BAD);
	assert_string_equal(kube_decoder_error(d), "JSON nested too deep");
	kube_decoder_free(d);

	struct collected s = {.text = "", .stop_after = 2};
	d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_SERVICES), 1 << 20, collect_object, &s);
	assert_int_equal(feed_in_chunks(d, service_list, 64), 7);
	assert_int_equal(s.n, 2);
	assert_int_equal(kube_decoder_feed(d, "x", 1), 7);
	kube_decoder_free(d);
}

/* A LIST of n EndpointSlices of eps endpoints each (and a hostname of
 * host_len bytes in the first one, if any), appended to a malloc'd text. */
static char *slice_list(int n, int eps, size_t host_len)
{
	size_t cap = 256 + (size_t)n * (300 + (size_t)eps * 260) + host_len, len = 0;
	char *t = malloc(cap);

	assert_non_null(t);
	len += (size_t)snprintf(t + len, cap - len, "{\"metadata\":{\"resourceVersion\":\"7\"},\"items\":[");
	for (int i = 0; i < n; i++) {
		len += (size_t)snprintf(t + len, cap - len,
					"%s{\"metadata\":{\"name\":\"s%d\",\"namespace\":\"n\",\"labels\":"
					"{\"kubernetes.io/service-name\":\"s%d\"},\"uid\":\"u\"},"
					"\"addressType\":\"IPv4\",\"endpoints\":[",
					i ? "," : "", i, i);
		for (int j = 0; j < eps; j++) {
			len += (size_t)snprintf(t + len, cap - len,
						"%s{\"addresses\":[\"10.%d.%d.%d\"],\"conditions\":{\"ready\":"
						"true,\"serving\":true,\"terminating\":false},\"targetRef\":"
						"{\"kind\":\"Pod\",\"namespace\":\"n\",\"name\":\"p%d\",\"uid\":"
						"\"x\"},\"nodeName\":\"node-a\"",
						j ? "," : "", i % 256, j / 256, j % 256, j);
			if (i == 0 && j == 0 && host_len) {
				len += (size_t)snprintf(t + len, cap - len, ",\"hostname\":\"");
				memset(t + len, 'h', host_len);
				len += host_len;
				t[len++] = '"';
			}
			t[len++] = '}';
		}
		len += (size_t)snprintf(t + len, cap - len,
					"],\"ports\":[{\"name\":\"http\",\"protocol\":\"TCP\",\"port\":80}]}");
	}
	snprintf(t + len, cap - len, "]}");
	return t;
}

struct slices_seen {
	size_t n, endpoints, host_len;
	bool intact; /* every endpoint read back as it was sent */
};

static int check_slice(void *ctx, const struct kube_json *obj)
{
	struct slices_seen *s = ctx;
	const struct kube_json *eps = kube_json_get(obj, "endpoints");
	int j = 0;

	for (const struct kube_json *e = kube_json_first(eps); e; e = e->next, j++) {
		const char *pod = kube_json_get_text(kube_json_get(e, "targetRef"), "name");
		const char *host = kube_json_get_text(e, "hostname");
		char want[16];
		snprintf(want, sizeof want, "p%d", j);
		s->intact &= pod && strcmp(pod, want) == 0 &&
			     kube_json_true(kube_json_get(kube_json_get(e, "conditions"), "ready")) &&
			     kube_json_len(kube_json_get(e, "addresses")) == 1;
		if (host)
			s->host_len = strlen(host);
	}
	s->intact &= kube_json_int(kube_json_get(kube_json_first(kube_json_get(obj, "ports")),
						 "port")) == 80;
	s->endpoints += kube_json_len(eps);
	s->n++;
	return 0;
}

/*
 * Once the decoder has held an object as large as the next ones, handing
 * objects out costs no allocation: what is kept goes into its arena,
 * rewound after each (counted by alloc_count.h's wrappers).
 */
static void test_decode_objects_cost_no_allocation_once_warm(void **state)
{
	(void)state;
	char *text = slice_list(50, 10, 0);
	struct slices_seen seen = {.intact = true};
	struct kube_decoder *d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_ENDPOINTSLICES),
						  1 << 20, check_slice, &seen);
	const char *second = strstr(text, ",{\"metadata\":{\"name\":\"s1\"");

	assert_true(alloc_counting_works());
	assert_int_equal(kube_decoder_feed(d, text, (size_t)(second - text)), 0);
	atomic_store(&counting, true);
	assert_int_equal(kube_decoder_feed(d, second, strlen(second)), 0);
	atomic_store(&counting, false);
	assert_int_equal(forbidden_calls, 0);
	assert_int_equal(kube_decoder_finish(d), 0);
	assert_int_equal(seen.n, 50);
	assert_int_equal(seen.endpoints, 500);
	assert_true(seen.intact);
	kube_decoder_free(d);
	free(text);
}

/* An object far larger than one arena block (and a string larger than a
 * block) is handed out whole, and so is each smaller one after it. */
static void test_decode_objects_larger_than_a_block(void **state)
{
	(void)state;
	char *text = slice_list(3, 2000, 100000);
	struct slices_seen seen = {.intact = true};
	struct kube_decoder *d = kube_decoder_new(KUBE_DECODE_LIST, kube_fields(KUBE_ENDPOINTSLICES),
						  8 << 20, check_slice, &seen);

	assert_int_equal(feed_in_chunks(d, text, 4096), 0);
	assert_int_equal(kube_decoder_finish(d), 0);
	assert_int_equal(seen.n, 3);
	assert_int_equal(seen.endpoints, 6000);
	assert_int_equal(seen.host_len, 100000);
	assert_true(seen.intact);
	kube_decoder_free(d);
	free(text);
}

/* Reading kept values: a repeated key reads as its last value, a null
 * member as none, a number's integer part, and any value of another type
 * as nothing; a whole text parses into one value, or fails. */
static void test_json_reads_and_whole_texts(void **state)
{
	(void)state;
	static const char text[] =
		"{\"a\":1,\"a\":\"two\",\"n\":null,\"big\":99999999999999999999,\"f\":80.9,"
		"\"e\":1e3,\"neg\":-5,\"t\":true,\"s\":\"x\",\"arr\":[null,\"y\",3],\"o\":{}}";
	struct kube_json_doc *doc = kube_json_parse(text, strlen(text));
	const struct kube_json *root, *arr;

	assert_non_null(doc);
	root = kube_json_root(doc);
	assert_string_equal(kube_json_get_text(root, "a"), "two");
	assert_null(kube_json_get(root, "n"));
	assert_null(kube_json_get(root, "missing"));
	assert_true(kube_json_int(kube_json_get(root, "big")) == INT64_MAX);
	assert_int_equal(kube_json_int(kube_json_get(root, "f")), 80);
	assert_int_equal(kube_json_int(kube_json_get(root, "e")), 1000);
	assert_int_equal(kube_json_int(kube_json_get(root, "neg")), -5);
	assert_int_equal(kube_json_int(kube_json_get(root, "s")), 0);
	assert_true(kube_json_true(kube_json_get(root, "t")));
	assert_false(kube_json_true(kube_json_get(root, "s")));
	assert_null(kube_json_get_text(root, "t"));
	arr = kube_json_get(root, "arr");
	assert_int_equal(kube_json_len(arr), 3);
	assert_int_equal(kube_json_first(arr)->type, KUBE_JSON_NULL);
	assert_string_equal(kube_json_text(kube_json_first(arr)->next), "y");
	assert_int_equal(kube_json_len(root), 0);
	assert_null(kube_json_first(kube_json_get(root, "o")));
	assert_null(kube_json_get(arr, "a"));
	assert_string_equal(json_text(root), text);
	kube_json_doc_free(doc);

	assert_null(kube_json_parse("{\"a\":", 5));
	assert_null(kube_json_parse("{} {}", 5));
	assert_null(kube_json_parse("", 0));
	doc = kube_json_parse("\"only\"", 6);
	assert_string_equal(kube_json_text(kube_json_root(doc)), "only");
	kube_json_doc_free(doc);
}

/* ---- gzip bodies ------------------------------------------------------------------ */

/* text as one gzip member appended to out (at *len); out has room. */
static void gzip_member(const char *text, size_t text_len, unsigned char *out, size_t *len,
			size_t room)
{
	z_stream z = {0};

	assert_int_equal(deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
	z.next_in = (unsigned char *)text;
	z.avail_in = (uInt)text_len;
	z.next_out = out + *len;
	z.avail_out = (uInt)(room - *len);
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	*len = room - z.avail_out;
	deflateEnd(&z);
}

struct inflated {
	char text[200000];
	size_t len;
	size_t largest;
	int stop_at;      /* return this from the piece that ends past stop_len (0: never) */
	size_t stop_len;
};

static int take_inflated(void *ctx, const char *data, size_t len)
{
	struct inflated *o = ctx;

	assert_true(o->len + len <= sizeof o->text);
	memcpy(o->text + o->len, data, len);
	o->len += len;
	if (len > o->largest)
		o->largest = len;
	return o->stop_at && o->len > o->stop_len ? o->stop_at : 0;
}

/* Feeds in chunks of the given size; returns the last feed's result. */
static int gunzip_in_chunks(struct kube_gunzip *g, const unsigned char *in, size_t len, size_t chunk,
			    struct inflated *o)
{
	int rc = 0;

	for (size_t off = 0; off < len && rc == 0; off += chunk)
		rc = kube_gunzip_feed(g, (const char *)in + off, len - off < chunk ? len - off : chunk,
				      take_inflated, o);
	return rc;
}

/*
 * A compressed WatchList: a gzip member per event (and one event far larger
 * than a piece, compressing to little), decompressed whole at every chunk
 * size, handed out in pieces of at most 16 KiB.
 */
static void test_gunzip_member_after_member(void **state)
{
	(void)state;
	static const char *events[] = {
		"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n",
		"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"b\"}}}\n",
		NULL, /* the large one */
		"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"9\"}}}\n",
	};
	static char large[100001];
	static unsigned char gz[4096];
	static char want[sizeof large + 512];
	size_t gz_len = 0;

	memset(large, 'x', sizeof large - 2);
	large[sizeof large - 2] = '\n';
	want[0] = '\0';
	for (size_t i = 0; i < sizeof events / sizeof *events; i++) {
		const char *e = events[i] ? events[i] : large;
		gzip_member(e, strlen(e), gz, &gz_len, sizeof gz);
		strcat(want, e);
	}
	for (size_t chunk = 1; chunk <= gz_len; chunk++) {
		static struct inflated o;
		memset(&o, 0, sizeof o);
		struct kube_gunzip *g = kube_gunzip_new();
		assert_non_null(g);
		assert_int_equal(gunzip_in_chunks(g, gz, gz_len, chunk, &o), 0);
		assert_int_equal(kube_gunzip_finish(g), 0);
		assert_int_equal(o.len, strlen(want));
		assert_memory_equal(o.text, want, o.len);
		assert_true(o.largest <= 16384);
		kube_gunzip_free(g);
	}
}

/* Not gzip, a corrupt member after a good one, a body cut inside a member, a consumer that stops. */
static void test_gunzip_errors_and_stop(void **state)
{
	(void)state;
	static struct inflated o;
	unsigned char gz[512];
	size_t len = 0;
	const char *ev = "{\"type\":\"ADDED\",\"object\":{}}\n";

	struct kube_gunzip *g = kube_gunzip_new();
	assert_int_equal(kube_gunzip_feed(g, "{\"items\":[]}", 12, take_inflated, &o),
			 KUBE_GUNZIP_BAD);
	assert_string_equal(kube_gunzip_error(g), "gzip: incorrect header check");
	kube_gunzip_free(g);

	gzip_member(ev, strlen(ev), gz, &len, sizeof gz);
	size_t one = len;
	gzip_member(ev, strlen(ev), gz, &len, sizeof gz);
	gz[len - 5] ^= 0xff; /* the second member's CRC */
	memset(&o, 0, sizeof o);
	g = kube_gunzip_new();
	assert_int_equal(gunzip_in_chunks(g, gz, len, 7, &o), KUBE_GUNZIP_BAD);
	assert_string_equal(kube_gunzip_error(g), "gzip: incorrect data check");
	kube_gunzip_free(g);

	memset(&o, 0, sizeof o);
	g = kube_gunzip_new();
	assert_int_equal(gunzip_in_chunks(g, gz, one + 10, 3, &o), 0);
	assert_int_equal(o.len, strlen(ev));
	assert_int_equal(kube_gunzip_finish(g), KUBE_GUNZIP_BAD);
	assert_string_equal(kube_gunzip_error(g), "gzip: the body ends inside a gzip member");
	kube_gunzip_free(g);

	memset(&o, 0, sizeof o);
	o.stop_at = 5;
	g = kube_gunzip_new();
	assert_int_equal(gunzip_in_chunks(g, gz, one, one, &o), 5);
	kube_gunzip_free(g);
}

/* ---- backoff --------------------------------------------------------------- */

static void test_backoff_grows_jitters_and_caps(void **state)
{
	(void)state;
	struct kube_backoff b = {0};

	/* rnd 0 gives the low end b, rnd UINT32_MAX stays within [b, 2b). */
	assert_int_equal(kube_backoff_next(&b, 0), 800);
	assert_int_equal(kube_backoff_next(&b, 0), 1600);
	assert_int_equal(kube_backoff_next(&b, 0), 3200);
	uint64_t w = kube_backoff_next(&b, UINT32_MAX);
	assert_true(w >= 6400 && w < 12800);
	for (int i = 0; i < 40; i++) {
		w = kube_backoff_next(&b, (uint32_t)i * 2654435761u);
		assert_true(w < 2 * KUBE_BACKOFF_CAP_MS);
	}
	assert_true(w >= KUBE_BACKOFF_CAP_MS);
	assert_int_equal(kube_backoff_next(&b, 29999), 2 * KUBE_BACKOFF_CAP_MS - 1);
	kube_backoff_reset(&b);
	assert_int_equal(kube_backoff_next(&b, 0), 800);
	w = kube_backoff_next(&(struct kube_backoff){0}, 200);
	assert_int_equal(w, 1000);
}

/* Even the first 410 waits (jittered); 410s that keep coming back wait longer and longer. */
static void test_gone_jittered_then_backoff(void **state)
{
	(void)state;
	struct kube_gone g = {0};
	int64_t t = 1000000;

	assert_int_equal(kube_gone_next(&g, t, 0), 800);
	assert_int_equal(kube_gone_next(&(struct kube_gone){0}, t, 799), 1599);
	assert_int_equal(kube_gone_next(&g, t += 50, 0), 1600);
	assert_int_equal(kube_gone_next(&g, t += 300, 0), 3200);
	uint64_t w = kube_gone_next(&g, t += 500, UINT32_MAX);
	assert_true(w >= 6400 && w < 12800);
	/* Quiet for a whole streak: the next 410 is a first one again. */
	assert_int_equal(kube_gone_next(&g, t += KUBE_GONE_STREAK_MS, 0), 800);
	assert_int_equal(kube_gone_next(&g, t += KUBE_GONE_STREAK_MS - 1, 0), 1600);
	/* The wait is capped like any backoff; the streak goes on while 410s come. */
	for (int i = 0; i < 20; i++)
		w = kube_gone_next(&g, t += KUBE_BACKOFF_CAP_MS, (uint32_t)i * 2654435761u);
	assert_true(w >= KUBE_BACKOFF_CAP_MS && w < 2 * KUBE_BACKOFF_CAP_MS);
}

/* ---- base64 ---------------------------------------------------------------- */

static void expect_b64(const char *in, const char *want)
{
	struct kube_blob b = {0};

	assert_int_equal(kube_base64_decode(in, strlen(in), &b), 0);
	assert_int_equal(b.len, strlen(want));
	assert_memory_equal(b.data, want, b.len);
	free(b.data);
}

static void test_base64(void **state)
{
	(void)state;
	struct kube_blob b = {0};

	expect_b64("", "");
	expect_b64("QQ==", "A");
	expect_b64("QUI=", "AB");
	expect_b64("QUJD", "ABC");
	expect_b64("QUI", "AB"); /* padding optional */
	expect_b64("LS0t\nLS1C\r\nRUdJ Tg==", "-----BEGIN");
	expect_b64("+/+/", "\xfb\xff\xbf");
	assert_int_equal(kube_base64_decode("QU*C", 4, &b), -1);
	assert_int_equal(kube_base64_decode("Q", 1, &b), -1);      /* 6 bits: no byte */
	assert_int_equal(kube_base64_decode("QQ=A", 4, &b), -1);   /* data after padding */
	assert_int_equal(kube_base64_decode("QR==", 4, &b), -1);   /* nonzero leftover bits */
	assert_int_equal(kube_base64_decode("QUI==", 5, &b), -1);  /* too much padding */
}

/* ---- kubeconfig -------------------------------------------------------------- */

static const char kubeconfig[] =
	"apiVersion: v1\n"
	"kind: Config\n"
	"preferences: {}\n"
	"current-context: prod\n"
	"clusters:\n"
	"- name: dev\n"
	"  cluster: {server: 'https://dev.example:6443'}\n"
	"- name: prod\n"
	"  cluster:\n"
	"    server: https://10.0.0.1:6443/\n"
	"    certificate-authority: certs/ca.crt\n"
	"    extensions: [{name: x, extension: {a: 1}}]\n"
	"users:\n"
	"- name: admin\n"
	"  user:\n"
	"    client-certificate-data: Q0VSVA==\n"
	"    client-key-data: S0VZ\n"
	"    client-certificate: ignored.crt\n"
	"    client-key: /abs/ignored.key\n"
	"    tokenFile: tok\n"
	"contexts:\n"
	"- name: dev\n"
	"  context: {cluster: dev, user: nobody}\n"
	"- name: prod\n"
	"  context: {cluster: prod, user: admin, namespace: default}\n";

static void test_kubeconfig_current_context(void **state)
{
	(void)state;
	struct kube_conn c;
	char err[256] = "";

	int rc = kube_conn_from_kubeconfig("/etc/kube/config", kubeconfig, strlen(kubeconfig), &c,
					   err, sizeof err);
	if (rc)
		print_error("%s\n", err);
	assert_int_equal(rc, 0);
	assert_string_equal(c.server, "https://10.0.0.1:6443");
	assert_string_equal(c.ca_file, "/etc/kube/certs/ca.crt");
	assert_null(c.ca_data.data);
	/* The -data variants win over the file paths. */
	assert_null(c.cert_file);
	assert_null(c.key_file);
	assert_int_equal(c.cert_data.len, 4);
	assert_memory_equal(c.cert_data.data, "CERT", 4);
	assert_memory_equal(c.key_data.data, "KEY", 3);
	assert_null(c.token);
	assert_string_equal(c.token_file, "/etc/kube/tok");
	assert_false(c.insecure);
	kube_conn_free(&c);
}

static void test_kubeconfig_files_token_insecure(void **state)
{
	(void)state;
	static const char text[] =
		"current-context: c\n"
		"contexts: [{name: c, context: {cluster: k, user: u}}]\n"
		"clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443', "
		"insecure-skip-tls-verify: true, certificate-authority-data: QUJD}}]\n"
		"users: [{name: u, user: {client-certificate: c.crt, client-key: /k/c.key}}]\n";
	static const char with_token[] =
		"current-context: c\n"
		"contexts: [{name: c, context: {cluster: k, user: u}}]\n"
		"clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443', "
		"certificate-authority-data: QUJD}}]\n"
		"users: [{name: u, user: {token: abc.def, client-certificate: c.crt, "
		"client-key: /k/c.key}}]\n";
	struct kube_conn c;
	char err[256] = "";

	/* No directory part: relative paths stay relative to the working directory.
	 * A client certificate may go to an unchecked server (its key never leaves us). */
	assert_int_equal(kube_conn_from_kubeconfig("kc", text, strlen(text), &c, err, sizeof err), 0);
	assert_string_equal(c.server, "https://127.0.0.1:6443");
	assert_true(c.insecure);
	assert_memory_equal(c.ca_data.data, "ABC", 3);
	assert_null(c.token);
	assert_null(c.token_file);
	assert_string_equal(c.cert_file, "c.crt");
	assert_string_equal(c.key_file, "/k/c.key");
	kube_conn_free(&c);
	assert_int_equal(kube_conn_from_kubeconfig("kc", with_token, strlen(with_token), &c, err,
						   sizeof err), 0);
	assert_false(c.insecure);
	assert_string_equal(c.token, "abc.def");
	assert_string_equal(c.cert_file, "c.crt");
	kube_conn_free(&c);
}

static void expect_kubeconfig_error(const char *text, const char *want)
{
	struct kube_conn c = {0};
	char err[512] = "";

	assert_int_equal(kube_conn_from_kubeconfig("/k/config", text, strlen(text), &c, err,
						   sizeof err), -1);
	assert_string_equal(err, want);
	assert_null(c.server);
}

static void test_kubeconfig_errors(void **state)
{
	(void)state;
	expect_kubeconfig_error("clusters: []\n", "kubeconfig /k/config: no current-context");
	expect_kubeconfig_error("current-context: x\ncontexts: []\n",
				"kubeconfig /k/config: context \"x\" not found in contexts");
	expect_kubeconfig_error("current-context: x\ncontexts: [{name: x, context: {user: u}}]\n",
				"kubeconfig /k/config: context \"x\" names no cluster");
	expect_kubeconfig_error("current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
				"clusters: [{name: k, cluster: {insecure-skip-tls-verify: true}}]\n",
				"kubeconfig /k/config: cluster \"k\" has no server");
	expect_kubeconfig_error("current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
				"clusters: [{name: k, cluster: {server: 10.0.0.1}}]\n",
				"kubeconfig /k/config: cluster \"k\": server \"10.0.0.1\" is not an "
				"http(s) URL");
	/* never repeated in the message: it would be logged */
	expect_kubeconfig_error("current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
				"clusters: [{name: k, cluster: {server: 'https://u:s3cret@a/x'}}]\n",
				"kubeconfig /k/config: cluster \"k\": the server URL holds credentials "
				"(user@); put them in the user entry");
	expect_kubeconfig_error("current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
				"clusters: [{name: k, cluster: {server: 'https://a', "
				"certificate-authority-data: '!!'}}]\n",
				"kubeconfig /k/config: cluster \"k\": certificate-authority-data is "
				"not valid base64");
	static const char head[] = "current-context: x\n"
				   "contexts: [{name: x, context: {cluster: k, user: u}}]\n"
				   "clusters: [{name: k, cluster: {server: 'https://a'}}]\n";
	char text[512];
	snprintf(text, sizeof text, "%susers: [{name: u, user: {exec: {command: aws}}}]\n", head);
	expect_kubeconfig_error(text, "kubeconfig /k/config: user \"u\" uses exec credentials, which "
				      "localdns does not support (use a token, tokenFile or a client "
				      "certificate)");
	snprintf(text, sizeof text, "%susers: [{name: u, user: {client-certificate: a.crt}}]\n", head);
	expect_kubeconfig_error(text, "kubeconfig /k/config: user \"u\" has a client certificate "
				      "without a key, or a key without a certificate");
	snprintf(text, sizeof text, "%susers: [{name: v, user: {}}]\n", head);
	expect_kubeconfig_error(text, "kubeconfig /k/config: user \"u\" not found in users");
	/* A bearer token is never sent where anyone on the path can read it. */
	static const char plain[] = "current-context: x\n"
				    "contexts: [{name: x, context: {cluster: k, user: u}}]\n"
				    "clusters: [{name: k, cluster: {server: 'http://10.0.0.1:8080'}}]\n";
	static const char *const tokens[] = {"{token: abc}", "{tokenFile: /t}"};
	for (size_t i = 0; i < 2; i++) {
		snprintf(text, sizeof text, "%susers: [{name: u, user: %s}]\n", plain, tokens[i]);
		expect_kubeconfig_error(text, "kubeconfig /k/config: cluster \"k\": server "
					      "\"http://10.0.0.1:8080\" is plain http://, and user "
					      "\"u\" has a bearer token, which would cross the network "
					      "unencrypted; use https:// (or a user without a token)");
	}
	/* ...nor to a server whose certificate goes unchecked (anyone on the path can
	 * pose as it), while a client certificate or no user at all may go there. */
	static const char unchecked[] =
		"current-context: x\n"
		"contexts: [{name: x, context: {cluster: k, user: u}}]\n"
		"clusters: [{name: k, cluster: {server: 'https://10.0.0.1:6443', "
		"insecure-skip-tls-verify: true}}]\n";
	for (size_t i = 0; i < 2; i++) {
		snprintf(text, sizeof text, "%susers: [{name: u, user: %s}]\n", unchecked, tokens[i]);
		expect_kubeconfig_error(text, "kubeconfig /k/config: cluster \"k\" has "
					      "insecure-skip-tls-verify, and user \"u\" has a bearer "
					      "token, which would go to whoever answers in the server's "
					      "place; give the cluster its certificate-authority (or use "
					      "a user without a token)");
	}
	/* fuzz_kubeconfig: "http://" alone was trimmed to "http:/", which the
	 * plain-http check did not know, and its token went through */
	snprintf(text, sizeof text, "current-context: x\n"
		 "contexts: [{name: x, context: {cluster: k, user: u}}]\n"
		 "clusters: [{name: k, cluster: {server: 'http://'}}]\n"
		 "users: [{name: u, user: {token: abc}}]\n");
	expect_kubeconfig_error(text, "kubeconfig /k/config: cluster \"k\": server \"http://\" names "
				      "no host");
	expect_kubeconfig_error("a: [\n", "kubeconfig /k/config: 2:1: did not find expected node "
					  "content");
	expect_kubeconfig_error("- 1\n", "kubeconfig /k/config: not a YAML mapping");
}

/* Plain http:// with nothing to hide (a local API proxy, a test server) is allowed. */
static void test_kubeconfig_plain_http_without_token(void **state)
{
	(void)state;
	static const char text[] =
		"current-context: c\n"
		"contexts: [{name: c, context: {cluster: k, user: u}}]\n"
		"clusters: [{name: k, cluster: {server: 'http://127.0.0.1:8001'}}]\n"
		"users: [{name: u, user: {}}]\n";
	struct kube_conn c;
	char err[256] = "";

	assert_int_equal(kube_conn_from_kubeconfig("kc", text, strlen(text), &c, err, sizeof err), 0);
	assert_string_equal(c.server, "http://127.0.0.1:8001");
	assert_null(c.token);
	assert_null(c.token_file);
	kube_conn_free(&c);
}

static void test_kubeconfig_unreadable(void **state)
{
	(void)state;
	struct kube_conn c = {0};
	char err[256] = "";

	assert_int_equal(kube_conn_load_kubeconfig("/nonexistent/kc", &c, err, sizeof err), -1);
	assert_string_equal(err, "kubeconfig /nonexistent/kc: No such file or directory");
	/* a FIFO would block the open until someone writes it */
	char dir[] = "/tmp/localdns-kc-XXXXXX", fifo[64], want[128];
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof fifo, "%s/kc", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(kube_conn_load_kubeconfig(fifo, &c, err, sizeof err), -1);
	snprintf(want, sizeof want, "kubeconfig %s: not a regular file", fifo);
	assert_string_equal(err, want);
	unlink(fifo);
	rmdir(dir);
}

/* Nested deeper than any kubeconfig is: refused before libyaml builds it. */
static void test_kubeconfig_nesting_is_bounded(void **state)
{
	(void)state;
	char text[2 * 5000 + 2];

	memset(text, '[', 5000);
	memset(text + 5000, ']', 5000);
	memcpy(text + 10000, "\n", 2);
	expect_kubeconfig_error(text, "kubeconfig /k/config: 1:65: nested deeper than 64 levels");
}

static void test_in_cluster(void **state)
{
	(void)state;
	struct kube_conn c;
	char err[256] = "";

	assert_int_equal(kube_conn_in_cluster("10.96.0.1", "443", "/sa", &c, err, sizeof err), 0);
	assert_string_equal(c.server, "https://10.96.0.1:443");
	assert_string_equal(c.ca_file, "/sa/ca.crt");
	assert_string_equal(c.token_file, "/sa/token");
	assert_null(c.token);
	kube_conn_free(&c);
	assert_int_equal(kube_conn_in_cluster("fd00::1", "6443", "/sa", &c, err, sizeof err), 0);
	assert_string_equal(c.server, "https://[fd00::1]:6443");
	kube_conn_free(&c);
	assert_int_equal(kube_conn_in_cluster(NULL, "443", "/sa", &c, err, sizeof err), -1);
	assert_string_equal(err, "in-cluster: KUBERNETES_SERVICE_HOST is not set (no "
				 "kubernetes.kubeconfig given, and not running in a pod?)");
	assert_int_equal(kube_conn_in_cluster("10.96.0.1", "", "/sa", &c, err, sizeof err), -1);
	assert_string_equal(err, "in-cluster: KUBERNETES_SERVICE_PORT is not set (no "
				 "kubernetes.kubeconfig given, and not running in a pod?)");
}

/* ---- token file ------------------------------------------------------------------ */

static void write_token(const char *path, const char *text)
{
	char tmp[300];
	snprintf(tmp, sizeof tmp, "%s.new", path);
	FILE *f = fopen(tmp, "w");
	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
	/* As kubelet does: a new file renamed over the old one (a new inode). */
	assert_int_equal(rename(tmp, path), 0);
}

static void test_token_rotation(void **state)
{
	(void)state;
	char dir[] = "/tmp/localdns-kube-XXXXXX", path[300];
	struct kube_token t = {0};

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/token", dir);
	assert_int_equal(kube_token_refresh(&t, path, false), -1); /* no file yet */
	write_token(path, "first\n");
	assert_int_equal(kube_token_refresh(&t, path, false), 1);
	assert_string_equal(t.value, "first");
	assert_int_equal(kube_token_refresh(&t, path, false), 0);   /* unchanged: not read */
	assert_int_equal(kube_token_refresh(&t, path, true), 0);    /* forced: read, same */
	write_token(path, "  second  \n");
	assert_int_equal(kube_token_refresh(&t, path, false), 1);
	assert_string_equal(t.value, "second");
	/* Empty, or a line break inside: refused, the last good token stays. */
	write_token(path, "\n");
	assert_int_equal(kube_token_refresh(&t, path, false), -1);
	assert_string_equal(t.value, "second");
	write_token(path, "a\nb");
	assert_int_equal(kube_token_refresh(&t, path, false), -1);
	assert_string_equal(t.value, "second");
	kube_token_free(&t);
	assert_null(t.value);
	unlink(path);
	rmdir(dir);
}

/* ---- known keys ------------------------------------------------------------------ */

struct swept {
	char text[256];
	int n;
};

static void collect_swept(void *ctx, const char *ns, const char *name)
{
	struct swept *s = ctx;
	size_t used = strlen(s->text);
	snprintf(s->text + used, sizeof s->text - used, "[%s/%s]", ns, name);
	s->n++;
}

static void test_keys_relist_sweep(void **state)
{
	(void)state;
	struct kube_keys k;
	struct swept s = {.text = ""};

	kube_keys_init(&k);
	kube_keys_new_generation(&k);
	assert_int_equal(kube_keys_mark(&k, "default", "a"), 0);
	assert_int_equal(kube_keys_mark(&k, "default", "b"), 0);
	assert_int_equal(kube_keys_mark(&k, "", "kube-system"), 0);
	assert_int_equal(kube_keys_mark(&k, "default", "a"), 0);
	assert_int_equal(k.count, 3);
	/* "a/b" in "x" is not "b" in "x/a": the '/' can only come from the join. */
	assert_int_equal(kube_keys_mark(&k, "x", "a/b"), 0);
	assert_false(kube_keys_remove(&k, "x/a", "b"));
	assert_true(kube_keys_remove(&k, "x", "a/b"));
	assert_false(kube_keys_remove(&k, "x", "a/b"));
	kube_keys_sweep(&k, collect_swept, &s);
	assert_int_equal(s.n, 0); /* all marked in the current generation */

	/* A relist that sees only default/b: a and the namespace are reported gone. */
	kube_keys_new_generation(&k);
	assert_int_equal(kube_keys_mark(&k, "default", "b"), 0);
	kube_keys_sweep(&k, collect_swept, &s);
	assert_int_equal(s.n, 2);
	assert_true(strstr(s.text, "[default/a]") != NULL);
	assert_true(strstr(s.text, "[/kube-system]") != NULL);
	assert_int_equal(k.count, 1);
	assert_true(kube_keys_remove(&k, "default", "b"));
	assert_int_equal(k.count, 0);
	kube_keys_free(&k);
}

/* The longest chain of k's buckets. */
static size_t longest_chain(const struct kube_keys *k)
{
	size_t longest = 0;

	for (size_t i = 0; i < k->n_buckets; i++) {
		size_t n = 0;
		for (const struct kube_key *e = k->buckets[i]; e; e = e->next)
			n++;
		longest = n > longest ? n : longest;
	}
	return longest;
}

/*
 * Tenants choose namespace/name: 1,000 names whose unkeyed FNV-1a (what the
 * set used before) agrees in its low 10 bits, all of one bucket of the
 * 1,024 they end in. Keyed, they spread like any others.
 */
static void test_keys_chosen_to_collide_spread(void **state)
{
	(void)state;
	struct kube_keys k;
	char name[32];
	int found = 0;

	kube_keys_init(&k);
	for (unsigned i = 0; found < 1000; i++) {
		snprintf(name, sizeof name, "svc-%u", i);
		uint64_t h = fnv1a(fnv1a_byte(fnv1a(FNV1A_SEED, "ns", 2), '/'), name, strlen(name));
		if ((h & 1023) != 0)
			continue;
		assert_int_equal(kube_keys_mark(&k, "ns", name), 0);
		found++;
	}
	assert_int_equal(k.n_buckets, 1024);
	size_t longest = longest_chain(&k);
	kube_keys_free(&k);
	assert_true(longest <= 8);
}

static void test_keys_many(void **state)
{
	(void)state;
	struct kube_keys k;
	char name[32];
	struct swept s = {.text = ""};

	kube_keys_init(&k);
	assert_false(kube_keys_remove(&k, "ns", "none")); /* empty set */
	for (int i = 0; i < 20000; i++) {
		snprintf(name, sizeof name, "svc-%d", i);
		assert_int_equal(kube_keys_mark(&k, "ns", name), 0);
	}
	assert_int_equal(k.count, 20000);
	assert_true(k.n_buckets >= 20000);
	kube_keys_new_generation(&k);
	for (int i = 0; i < 20000; i++) {
		snprintf(name, sizeof name, "svc-%d", i);
		if (i != 12345)
			assert_int_equal(kube_keys_mark(&k, "ns", name), 0);
	}
	kube_keys_sweep(&k, collect_swept, &s);
	assert_string_equal(s.text, "[ns/svc-12345]");
	assert_int_equal(k.count, 19999);
	kube_keys_free(&k);
	assert_int_equal(k.count, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_list_any_chunk_size),
		cmocka_unit_test(test_decode_list_items_as_they_close),
		cmocka_unit_test(test_decode_watch_any_chunk_size),
		cmocka_unit_test(test_decode_object_bound),
		cmocka_unit_test(test_decode_errors_and_stop),
		cmocka_unit_test(test_decode_istio_objects),
		cmocka_unit_test(test_decode_objects_cost_no_allocation_once_warm),
		cmocka_unit_test(test_decode_objects_larger_than_a_block),
		cmocka_unit_test(test_json_reads_and_whole_texts),
		cmocka_unit_test(test_gunzip_member_after_member),
		cmocka_unit_test(test_gunzip_errors_and_stop),
		cmocka_unit_test(test_backoff_grows_jitters_and_caps),
		cmocka_unit_test(test_gone_jittered_then_backoff),
		cmocka_unit_test(test_base64),
		cmocka_unit_test(test_kubeconfig_current_context),
		cmocka_unit_test(test_kubeconfig_files_token_insecure),
		cmocka_unit_test(test_kubeconfig_errors),
		cmocka_unit_test(test_kubeconfig_plain_http_without_token),
		cmocka_unit_test(test_kubeconfig_unreadable),
		cmocka_unit_test(test_kubeconfig_nesting_is_bounded),
		cmocka_unit_test(test_in_cluster),
		cmocka_unit_test(test_token_rotation),
		cmocka_unit_test(test_keys_relist_sweep),
		cmocka_unit_test(test_keys_many),
		cmocka_unit_test(test_keys_chosen_to_collide_spread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
