/*
 * cluster_model — the cluster table alone, without the API server or the
 * JSON decoder: what its model and name table cost in heap and CPU for a
 * cluster of a given size, what one change costs, and what derived answers
 * cost per query. The objects are made as JSON text and parsed before the
 * clock starts, one at a time, so the heap figure is the table's.
 *
 *   cluster_model [-s SERVICES] [-e ENDPOINTS_PER_SERVICE] [-a KIND,...]
 *
 * Phases (each printed as "phase key=value..."):
 *   sync    SERVICES Services (a tenth headless) with one EndpointSlice of
 *           ENDPOINTS_PER_SERVICE endpoints each, as tests/bench/cluster_sync.py
 *           makes them: heap in use after (mallinfo2), time to apply.
 *   churn   a headless Service of 10,000 endpoints in 100 slices; 200
 *           rewrites of one slice: time and heap allocations per rewrite.
 *   ports   a Service with 1,000 named ports; 200 changes of one port.
 *           Then a headless one with 1,000 named ports and 10 endpoints.
 *   answer  queries against that table: ns per query by kind, the reply
 *           limited as over UDP (1232 bytes) and, for the big Services,
 *           as over TCP (65535). -a asks only the kinds named (e.g.
 *           -a ports1k_port_srv), so that a callgrind run counts one kind.
 *
 * Under `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=...`
 * or massif it is where docs/performance.md's instruction counts and heap
 * profiles of the cluster table come from:
 *
 *   valgrind --tool=callgrind --collect-atstart=no --toggle-collect=answer_ns \
 *       build/bench/cluster_model -s 100 -a ports1k_port_srv
 *
 * counts the instructions of ANSWER_ROUNDS answers of that kind (UDP and,
 * for a big Service, TCP).
 */
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <urcu/urcu-memb.h>

#include "cluster/cluster.h"
#include "cluster/objects.h"
#include "config/config.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t heap_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* A growing text buffer for one object's JSON. */
struct text {
	char *s;
	size_t len, cap;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;

	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if ((size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		t->cap = t->cap * 2 + (size_t)n + 1024;
		if (!(t->s = realloc(t->s, t->cap)))
			abort();
	}
}

static struct kube_json_doc *parsed(struct text *t)
{
	struct kube_json_doc *o = kube_json_parse(t->s, t->len);

	if (!o) {
		fprintf(stderr, "bad JSON: %.200s\n", t->s);
		exit(1);
	}
	t->len = 0;
	t->s[0] = '\0';
	return o;
}

/* Endpoint address idx, distinct for every idx below 64,000,000. */
static void endpoint_ip(char out[32], unsigned base, size_t idx)
{
	snprintf(out, 32, "%zu.%zu.%zu.%zu", base + idx / 16384000, idx / 64000 % 256,
		 idx / 250 % 256, idx % 250 + 1);
}

static struct kube_json_doc *service_json(struct text *t, const char *name, const char *ip,
					unsigned ports)
{
	put(t, "{\"kind\":\"Service\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"ns0\"},"
	       "\"spec\":{\"clusterIP\":\"%s\",\"clusterIPs\":[\"%s\"],\"ports\":[",
	    name, ip ? ip : "None", ip ? ip : "None");
	for (unsigned i = 0; i < ports; i++)
		put(t, "%s{\"name\":\"p%u\",\"protocol\":\"TCP\",\"port\":%u}", i ? "," : "", i,
		    10000 + i);
	put(t, "]}}");
	return parsed(t);
}

static struct kube_json_doc *slice_json(struct text *t, const char *svc, const char *name,
				      unsigned base, size_t first, size_t n, unsigned ports)
{
	char ip[32];

	put(t, "{\"kind\":\"EndpointSlice\",\"addressType\":\"IPv4\",\"metadata\":{\"name\":\"%s\","
	       "\"namespace\":\"ns0\",\"labels\":{\"kubernetes.io/service-name\":\"%s\"}},"
	       "\"endpoints\":[", name, svc);
	for (size_t i = 0; i < n; i++) {
		endpoint_ip(ip, base, first + i);
		put(t, "%s{\"addresses\":[\"%s\"],\"conditions\":{\"ready\":true},"
		       "\"targetRef\":{\"kind\":\"Pod\",\"namespace\":\"ns0\",\"name\":\"%s-%zu\"}}",
		    i ? "," : "", ip, svc, i);
	}
	put(t, "],\"ports\":[");
	for (unsigned i = 0; i < ports; i++)
		put(t, "%s{\"name\":\"p%u\",\"protocol\":\"TCP\",\"port\":%u}", i ? "," : "", i,
		    8080 + i);
	put(t, "]}");
	return parsed(t);
}

/* Apply o with fn, adding the time it took to *spent; o is freed. */
static void timed(void (*fn)(struct cluster *, const struct kube_json *), struct cluster *c,
		  struct kube_json_doc *o, double *spent)
{
	double t0 = now_s();

	fn(c, kube_json_root(o));
	*spent += now_s() - t0;
	kube_json_doc_free(o);
}

static struct cluster *make_cluster(void)
{
	static const char yaml[] = "cluster: {domain: cluster.local}\n";
	char err[CONFIG_ERR_MAX];
	struct config *cfg;
	struct cluster *c;

	if (config_load_string("bench.yaml", yaml, sizeof yaml - 1, &cfg, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	c = cluster_new(cfg, err, sizeof err);
	config_free(cfg);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	return c;
}

static void sync_phase(struct cluster *c, struct text *t, size_t services, size_t per)
{
	double spent = 0;
	size_t heap0 = heap_in_use();
	struct cluster_stats st;

	for (size_t i = 0; i < services; i++) {
		bool headless = i >= services - services / 10;
		char name[32], ip[32], slice[40];
		snprintf(name, sizeof name, "%s%zu", headless ? "hl" : "svc", i);
		snprintf(ip, sizeof ip, "10.%zu.%zu.%zu", 96 + i / 65536, i / 256 % 256, i % 256);
		snprintf(slice, sizeof slice, "%s-x", name);
		timed(cluster_service_upsert, c, service_json(t, name, headless ? NULL : ip,
							       headless ? 1 : 2), &spent);
		timed(cluster_slice_upsert, c, slice_json(t, name, slice, 128, i * per, per,
							  headless ? 1 : 2), &spent);
	}
	cluster_set_synced(c);
	urcu_memb_barrier();
	cluster_stats(c, &st);
	printf("sync services=%zu endpoints=%zu names=%zu apply_s=%.3f heap_mib=%.1f "
	       "heap_per_endpoint_b=%.0f\n", services, st.endpoints, st.names, spent,
	       (double)(heap_in_use() - heap0) / 1048576,
	       (double)(heap_in_use() - heap0) / (double)(st.endpoints ? st.endpoints : 1));
}

#define BIG 10000
#define BIG_SLICE 100
#define ROUNDS 200

static void churn_phase(struct cluster *c, struct text *t)
{
	double spent = 0, setup = 0;
	size_t heap0;

	timed(cluster_service_upsert, c, service_json(t, "big", NULL, 1), &setup);
	for (size_t k = 0; k < BIG / BIG_SLICE; k++) {
		char name[32];
		snprintf(name, sizeof name, "big-%zu", k);
		timed(cluster_slice_upsert, c,
		      slice_json(t, "big", name, 172, k * BIG_SLICE, BIG_SLICE, 1), &setup);
	}
	urcu_memb_barrier();
	heap0 = heap_in_use();
	for (size_t r = 0; r < ROUNDS; r++) {
		char name[32];
		size_t k = r % (BIG / BIG_SLICE);
		snprintf(name, sizeof name, "big-%zu", k);
		timed(cluster_slice_upsert, c,
		      slice_json(t, "big", name, 172, k * BIG_SLICE + (r + 1) * 7 % 50000,
				 BIG_SLICE, 1), &spent);
	}
	urcu_memb_barrier();
	printf("churn endpoints=%d slice=%d setup_s=%.3f per_rewrite_us=%.0f heap_growth_kib=%.0f\n",
	       BIG, BIG_SLICE, setup, spent / ROUNDS * 1e6,
	       ((double)heap_in_use() - (double)heap0) / 1024);
}

static void ports_phase(struct cluster *c, struct text *t)
{
	double spent = 0, setup = 0;

	timed(cluster_service_upsert, c, service_json(t, "ports1k", "10.201.0.1", 1000), &setup);
	for (size_t r = 0; r < ROUNDS; r++)
		timed(cluster_service_upsert, c,
		      service_json(t, "ports1k", r % 2 ? "10.201.0.1" : "10.201.0.2", 1000), &spent);
	urcu_memb_barrier();
	printf("ports ports=1000 setup_s=%.3f per_change_us=%.0f\n", setup, spent / ROUNDS * 1e6);
	timed(cluster_service_upsert, c, service_json(t, "hlports1k", NULL, 1000), &setup);
	timed(cluster_slice_upsert, c, slice_json(t, "hlports1k", "hlports1k-x", 173, 0, 10, 1000),
	      &setup);
}

#define ANSWER_ROUNDS 2000

/* ns per answer, the reply limited to `limit` bytes (1232: UDP with EDNS;
 * 65535: TCP). */
static double answer_ns(struct cluster *c, const char *name, uint16_t qtype, size_t limit)
{
	static uint8_t buf[65535];
	struct dns_query q = {.id = 1, .qtype = qtype, .qclass = DNS_C_IN, .question_ok = true};
	int len = dns_name_from_text(name, q.qname);
	const int rounds = ANSWER_ROUNDS;
	double t0;

	if (len <= 0)
		abort();
	q.qname_len = (uint16_t)len;
	memcpy(q.qname_orig, q.qname, (size_t)len);
	t0 = now_s();
	urcu_memb_read_lock();
	for (int i = 0; i < rounds; i++) {
		struct dns_writer w;
		struct cluster_chase chase;
		dns_response_begin(&w, buf, limit, &q, DNS_R_NOERROR);
		cluster_answer(c, &q, &w, &chase);
		dns_response_finish(&w, 1232);
	}
	urcu_memb_read_unlock();
	return (now_s() - t0) / rounds * 1e9;
}

/* Whether key is one of the comma-separated kinds in only (NULL: all). */
static bool asked_for(const char *only, const char *key)
{
	size_t len = strlen(key);

	for (const char *p = only; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (strncmp(p, key, len) == 0 && (p[len] == ',' || p[len] == '\0'))
			return true;
	return !only;
}

static void answer_phase(struct cluster *c, const char *only)
{
	static const struct {
		const char *key, *name;
		uint16_t qtype;
	} q[] = {
		{"service_a", "svc5.ns0.svc.cluster.local", DNS_T_A},
		{"service_srv", "svc5.ns0.svc.cluster.local", DNS_T_SRV},
		{"port_srv", "_http._tcp.svc5.ns0.svc.cluster.local", DNS_T_SRV},
		{"endpoint_a", "128-0-0-51.svc5.ns0.svc.cluster.local", DNS_T_A},
		{"endpoint_ptr", "51.0.0.128.in-addr.arpa", DNS_T_PTR},
		{"cluster_ip_ptr", "5.0.96.10.in-addr.arpa", DNS_T_PTR},
		{"nxdomain", "www.example.com.ns0.svc.cluster.local", DNS_T_A},
		{"big_a", "big.ns0.svc.cluster.local", DNS_T_A},
		{"big_srv", "big.ns0.svc.cluster.local", DNS_T_SRV},
		{"big_endpoint_a", "172-0-0-1.big.ns0.svc.cluster.local", DNS_T_A},
		{"ports1k_srv", "ports1k.ns0.svc.cluster.local", DNS_T_SRV},
		{"ports1k_port_srv", "_p999._tcp.ports1k.ns0.svc.cluster.local", DNS_T_SRV},
		{"ports1k_first_port_srv", "_p0._tcp.ports1k.ns0.svc.cluster.local", DNS_T_SRV},
		{"ports1k_absent_port_srv", "_nope._tcp.ports1k.ns0.svc.cluster.local", DNS_T_SRV},
		{"ports1k_proto", "_tcp.ports1k.ns0.svc.cluster.local", DNS_T_SRV},
		{"hlports1k_port_srv", "_p999._tcp.hlports1k.ns0.svc.cluster.local", DNS_T_SRV},
	};

	printf("answer udp");
	for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
		if (asked_for(only, q[i].key))
			printf(" %s_ns=%.0f", q[i].key, answer_ns(c, q[i].name, q[i].qtype, 1232));
	printf("\nanswer tcp");
	for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
		if ((strncmp(q[i].key, "big", 3) == 0 || strncmp(q[i].key, "ports1k", 7) == 0) &&
		    asked_for(only, q[i].key))
			printf(" %s_ns=%.0f", q[i].key, answer_ns(c, q[i].name, q[i].qtype, 65535));
	printf("\n");
}

int main(int argc, char **argv)
{
	size_t services = 10000, per = 10;
	const char *only = NULL;
	struct text t = {0};
	struct cluster *c;
	int opt;

	while ((opt = getopt(argc, argv, "s:e:a:")) != -1) {
		if (opt == 's')
			services = strtoul(optarg, NULL, 10);
		else if (opt == 'e')
			per = strtoul(optarg, NULL, 10);
		else if (opt == 'a')
			only = optarg;
		else {
			fprintf(stderr, "usage: cluster_model [-s SERVICES] [-e ENDPOINTS_PER_SERVICE] "
					"[-a KIND,...]\n");
			return 2;
		}
	}
	urcu_memb_register_thread();
	c = make_cluster();
	sync_phase(c, &t, services, per);
	churn_phase(c, &t);
	ports_phase(c, &t);
	answer_phase(c, only);
	cluster_free(c);
	urcu_memb_unregister_thread();
	free(t.s);
	return 0;
}
