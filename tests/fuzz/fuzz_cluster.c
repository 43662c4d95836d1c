/*
 * libFuzzer target for the Kubernetes objects -> cluster table path: the
 * input is what the API server sends, read the way the Kubernetes client
 * (kube/client.c) reads it and handed to the model (src/cluster/) the way
 * cluster/feed.c does: through the client's own streaming decoder
 * (kube/decode.c), fed in chunks of uneven sizes, keeping the fields the
 * client keeps of that resource (kube/fields.c), with its per-object bound.
 * A LIST ({"kind": "ServiceList", "items": [...]}) has every item upserted as
 * it closes; an input that is not one whole LIST with items is then read as
 * a watch stream, a sequence of {"type", "object"} events: ADDED and
 * MODIFIED upsert, DELETED removes, BOOKMARK does nothing, ERROR or a value
 * that is not an event ends the stream. As an informer knows its resource,
 * the first kind the input names picks it ("EndpointSlice", "Namespace",
 * "Pod", "Service"); without one the input's length does, so objects also
 * reach a resource they are not. The table's mode for pods (disabled,
 * insecure, verified) follows the input's length too.
 *
 * After the input the table is synced and every name in it, and every
 * name its Services derive at query time (ports, endpoints, pod names
 * behind them, PTRs), is asked for every type the specification answers;
 * then every object is removed.
 * ASan/UBSan catch memory errors and leaks (nothing may outlive
 * cluster_free); the checks catch a record the table holds or a reply it
 * writes that a client cannot read, a CNAME chase that is not a list of
 * names, an endpoint watch reporting nonsense, and anything left in the
 * table once every object that made it is gone.
 */
#include <stdio.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "cluster/cluster.h"
#include "cluster/objects.h"
#include "cluster/internal.h"
#include "config/config.h"
#include "dns/dns.h"
#include "deferred_rcu.h"
#include "fuzz.h"
#include "kube_feed.h"

static struct config *configs[3]; /* pods: disabled, insecure, verified */
static struct cds_lfht *keep_worker; /* see LLVMFuzzerInitialize */

/* An object the stream upserted, to remove at the end. */
struct seen {
	enum kube_resource res;
	char *ns, *name;
};

struct stream {
	struct cluster *c;
	struct fuzz_kube_feed feed;
	struct seen *seen;
	size_t n_seen, cap_seen;
};

/* The resource whose informer would read this input: the first kind it names. */
static enum kube_resource resource_of(const uint8_t *data, size_t size)
{
	/* the resources the cluster table reads */
	static const char *const kinds[] = {"\"Service", "\"EndpointSlice", "\"Namespace", "\"Pod"};
	const int n = (int)(sizeof kinds / sizeof kinds[0]);
	const uint8_t *first = NULL;
	enum kube_resource r = (enum kube_resource)(size / 3 % n);

	for (int k = 0; k < n; k++) {
		const uint8_t *at = memmem(data, size, kinds[k], strlen(kinds[k]));
		if (at && (!first || at < first)) {
			first = at;
			r = (enum kube_resource)k;
		}
	}
	return r;
}

static void upsert(struct cluster *c, enum kube_resource r, const struct kube_json *obj)
{
	switch (r) {
	case KUBE_SERVICES: cluster_service_upsert(c, obj); break;
	case KUBE_ENDPOINTSLICES: cluster_slice_upsert(c, obj); break;
	case KUBE_NAMESPACES: cluster_namespace_upsert(c, obj); break;
	case KUBE_PODS: cluster_pod_upsert(c, obj); break;
	default: break;
	}
}

static void remove_object(struct cluster *c, enum kube_resource r, const char *ns, const char *name)
{
	switch (r) {
	case KUBE_SERVICES: cluster_service_remove(c, ns, name); break;
	case KUBE_ENDPOINTSLICES: cluster_slice_remove(c, ns, name); break;
	case KUBE_NAMESPACES: cluster_namespace_remove(c, name); break;
	case KUBE_PODS: cluster_pod_remove(c, ns, name); break;
	default: break;
	}
}

static void remember(struct stream *s, enum kube_resource r, const char *ns, const char *name)
{
	if (s->n_seen == s->cap_seen) {
		s->cap_seen = s->cap_seen ? 2 * s->cap_seen : 16;
		s->seen = realloc(s->seen, s->cap_seen * sizeof *s->seen);
		CHECK(s->seen);
	}
	s->seen[s->n_seen++] = (struct seen){r, strdup(ns), strdup(name)};
}

/* An object of the stream's resource into the table (fuzz_kube_feed's upsert). */
static void take_object(void *ctx, const struct kube_json *obj)
{
	struct stream *s = ctx;
	const struct kube_json *meta = kube_json_get(obj, "metadata");
	const char *name = kube_json_get_text(meta, "name");
	const char *ns = kube_json_get_text(meta, "namespace");

	upsert(s->c, s->feed.res, obj);
	if (name && *name)
		remember(s, s->feed.res, ns ? ns : "", name);
}

/* A DELETED event's object out of the table (fuzz_kube_feed's remove). */
static void take_removal(void *ctx, const char *ns, const char *name)
{
	struct stream *s = ctx;

	remove_object(s->c, s->feed.res, ns, name);
}

/* A record the table holds is what the specification says it is. */
static void check_records(const struct cluster_node *n)
{
	struct cluster_rr rr;
	size_t pos = 0;

	CHECK(n->h.owner_len > 0 && dns_name_len(n->data) == n->h.owner_len);
	while (cluster_node_next(n, &pos, &rr)) {
		CHECK(pos <= n->rr_len);
		switch (rr.type) {
		case DNS_T_A: CHECK(rr.rdlen == 4); break;
		case DNS_T_AAAA: CHECK(rr.rdlen == 16); break;
		case DNS_T_CNAME:
		case DNS_T_PTR:
		case DNS_T_NS:
			CHECK(rr.rdlen > 0 && dns_name_len(rr.rdata) == rr.rdlen);
			break;
		case DNS_T_SRV:
			CHECK(rr.rdlen > 6 && dns_name_len(rr.rdata + 6) == rr.rdlen - 6u);
			break;
		default: break;
		}
	}
	CHECK(pos == n->rr_len);
}

/* Under the zone every name is answered, and when the table holds name
 * (held) so is PTR (or ANY) for it; a derived reverse name may be none
 * (its endpoint not ready, its Service gone) and go on upstream. */
static void ask(const struct cluster *c, const uint8_t *name, size_t len, uint16_t qtype,
		bool held)
{
	static uint8_t buf[DNS_MAX_MESSAGE];
	struct dns_query q = {.id = 1, .flags = DNS_F_RD, .question_ok = true, .qtype = qtype,
			      .qclass = DNS_C_IN, .qname_len = (uint16_t)len};
	struct cluster_chase chase;
	struct dns_writer w;

	memcpy(q.qname, name, len);
	memcpy(q.qname_orig, name, len);
	for (size_t p = 0; name[p]; p += 1u + name[p])
		q.qname_labels++;
	dns_response_begin(&w, buf, sizeof buf, &q, DNS_R_NOERROR);
	enum cluster_result r = cluster_answer(c, &q, &w, &chase);
	if (dns_name_is_subdomain(name, cluster_zone(c)) ||
	    (held && (qtype == DNS_T_PTR || qtype == DNS_T_ANY)))
		CHECK(r == CLUSTER_ANSWERED || r == CLUSTER_CHASE);
	if (r == CLUSTER_CHASE) {
		CHECK(chase.n > 0 && chase.n <= CLUSTER_MAX_CHAIN);
		for (unsigned i = 0; i < chase.n; i++)
			CHECK(dns_name_len(chase.targets[i]) <= DNS_MAX_NAME);
	}
	size_t n = dns_response_finish(&w, 1232);
	CHECK(fuzz_message_ok(buf, n));
}

static void ask_every_type(const struct cluster *c, const uint8_t *name, size_t len)
{
	static const uint16_t types[] = {DNS_T_A, DNS_T_AAAA, DNS_T_SRV, DNS_T_PTR, DNS_T_CNAME,
					 DNS_T_TXT, DNS_T_SOA, DNS_T_NS, DNS_T_ANY, DNS_T_MX};

	CHECK(len > 0 && len <= DNS_MAX_NAME && dns_name_len(name) == len);
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		ask(c, name, len, types[i], true);
}

/* labels (wire, concatenated, llen bytes) then the name tail; asked when it fits. */
static void ask_below(const struct cluster *c, const uint8_t *labels, size_t llen,
		      const uint8_t *tail, size_t tail_len)
{
	uint8_t name[DNS_MAX_NAME];

	if (llen + tail_len > DNS_MAX_NAME)
		return;
	memcpy(name, labels, llen);
	memcpy(name + llen, tail, tail_len);
	ask_every_type(c, name, llen + tail_len);
}

static void ask_reverse(const struct cluster *c, const struct cluster_ip *ip)
{
	uint8_t name[DNS_MAX_NAME];
	size_t len = cluster_reverse_name(ip, name);

	ask(c, name, len, DNS_T_PTR, false);
	ask(c, name, len, DNS_T_ANY, false);
}

/* _<name>._<proto> of a port, as labels. */
static size_t port_labels(const struct cluster_port *p, uint8_t out[32])
{
	size_t n = 0;

	out[n++] = (uint8_t)(p->name[0] + 1);
	out[n++] = '_';
	memcpy(out + n, p->name + 1, p->name[0]);
	n += p->name[0];
	out[n++] = (uint8_t)(p->proto[0] + 1);
	out[n++] = '_';
	memcpy(out + n, p->proto + 1, p->proto[0]);
	return n + p->proto[0];
}

static void ask_ports(const struct cluster *c, const struct cluster_service *s,
		      const struct cluster_port *ports, size_t n)
{
	uint8_t labels[32];

	for (size_t i = 0; i < n; i++)
		if (ports[i].name[0])
			ask_below(c, labels, port_labels(&ports[i], labels), s->owner, s->h.owner_len);
}

/*
 * The names a Service's snapshots give, which the table derives at query
 * time: its ports' SRV names, its endpoints' names (hostnames and dashed
 * addresses), the pod names behind them, and the PTRs of its ClusterIPs
 * and endpoint addresses.
 */
static void read_service(const struct cluster *c, const struct cluster_service *s)
{
	const struct cluster_spec *spec = cluster_spec_of(s);
	const uint8_t *ns = s->owner + 1 + s->owner[0]; /* <ns>.svc.<zone> */
	uint8_t pod_tail[DNS_MAX_NAME];
	size_t pod_tail_len = 1u + ns[0] + dns_name_len(c->pod_apex);

	memcpy(pod_tail, ns, 1u + ns[0]);
	memcpy(pod_tail + 1 + ns[0], c->pod_apex, dns_name_len(c->pod_apex));
	if (spec) {
		ask_ports(c, s, spec->ports, spec->n_ports);
		for (size_t i = 0; i < spec->n_ips; i++)
			ask_reverse(c, &spec->ips[i]);
	}
	for (const struct cluster_eps *e = cluster_first_eps(s); e; e = cluster_next_eps(e)) {
		ask_ports(c, s, e->ports, e->n_ports);
		for (uint32_t i = 0; i < e->n; i++) {
			struct cluster_ip ip = {.family = e->family};
			uint8_t dashed[64];
			memcpy(ip.addr, eps_addr(e, i), e->alen);
			size_t len = cluster_dashed_label(&ip, dashed);
			ask_below(c, dashed, len, s->owner, s->h.owner_len);
			if (pod_tail_len <= DNS_MAX_NAME)
				ask_below(c, dashed, len, pod_tail, pod_tail_len);
			ask_reverse(c, &ip);
		}
		for (uint32_t g = 0; g < e->n_groups; g++) {
			const uint8_t *label = e->labels + e->groups[g].label;
			ask_below(c, label, 1u + label[0], s->owner, s->h.owner_len);
		}
	}
}

/* Every name in the table and every name derived from it, read and asked
 * for every type we answer. */
static void read_everything(const struct cluster *c)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *ht;

	urcu_memb_read_lock();
	/* not cds_lfht_for_each_entry: its last step offsets a NULL pointer (UBSan) */
	cds_lfht_for_each(c->ht, &it, ht) {
		const struct cluster_named *n = caa_container_of(ht, struct cluster_named, ht);
		if (n->kind == NAMED_RECORDS) {
			check_records((const struct cluster_node *)n);
		} else {
			CHECK(n->kind == NAMED_SERVICE);
			read_service(c, (const struct cluster_service *)n);
		}
		ask_every_type(c, cluster_named_owner(n), n->owner_len);
	}
	urcu_memb_read_unlock();
}

static void on_endpoints(void *ctx, const struct config_ip *ips, size_t n)
{
	(void)ctx;
	CHECK(n <= CLUSTER_WATCH_MAX);
	for (size_t i = 0; i < n; i++)
		CHECK(ips[i].family == AF_INET || ips[i].family == AF_INET6);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char *const modes[3] = {"disabled", "insecure", "verified"};
	char yaml[128], err[CONFIG_ERR_MAX];

	(void)argc;
	(void)argv;
	urcu_memb_register_thread();
	for (int i = 0; i < 3; i++) {
		snprintf(yaml, sizeof yaml, "cluster: {domain: cluster.local, ttl: 5s, pods: %s}\n",
			 modes[i]);
		CHECK(config_load_string("fuzz.yaml", yaml, strlen(yaml), &configs[i], err,
					 sizeof err) == 0);
	}
	/* liburcu runs one resize thread while any cds_lfht exists; this one
	 * keeps it, so each input's table does not start and stop a thread */
	keep_worker = cds_lfht_new_flavor(1, 1, 0, 0, &urcu_memb_flavor, NULL);
	CHECK(keep_worker);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[CONFIG_ERR_MAX];
	struct cluster_stats empty, st;
	struct stream s = {0};

	s.c = cluster_new(configs[size % 3], err, sizeof err);
	CHECK(s.c);
	cluster_watch_endpoints(s.c, "prod", "db", on_endpoints, NULL);
	cluster_stats(s.c, &empty);
	s.feed = (struct fuzz_kube_feed){.res = resource_of(data, size), .upsert = take_object,
					 .remove = take_removal, .ctx = &s};
	if (!fuzz_kube_decode(&s.feed, KUBE_DECODE_LIST, data, size) || !s.feed.items)
		fuzz_kube_decode(&s.feed, KUBE_DECODE_WATCH, data, size);
	cluster_set_synced(s.c);
	read_everything(s.c);

	for (size_t i = s.n_seen; i-- > 0;) {
		remove_object(s.c, s.seen[i].res, s.seen[i].ns, s.seen[i].name);
		free(s.seen[i].ns);
		free(s.seen[i].name);
	}
	free(s.seen);
	cluster_stats(s.c, &st);
	CHECK(st.services == 0 && st.slices == 0 && st.endpoints == 0 && st.namespaces == 0 &&
	      st.pods == 0);
	CHECK(st.names == empty.names);
	cluster_free(s.c);
	return 0;
}
