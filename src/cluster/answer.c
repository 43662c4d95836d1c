/*
 * cluster/answer.c — answering one query from the name table.
 *
 * Runs on the hot path under the caller's RCU read lock: hash lookups and
 * writes into the caller's writer, no allocation, no lock. Under the zone we
 * are authoritative: a name not in the table is NXDOMAIN (so search-path
 * misses like name.ns.svc.<zone>.ns.svc.<zone> never leave the node), a name
 * without the asked type is NODATA, both with the SOA. Pod names are read
 * from the name itself (cluster.pods: insecure) or looked up (verified).
 *
 * A name is a node of records (the apex and the structure names), a
 * Service (its answers are derived from it: service.c), or no node: then
 * it may be a name derived at query time (below a Service, a pod name, a
 * PTR: service.c), and is NXDOMAIN otherwise. This file follows CNAMEs and
 * decides NXDOMAIN, NODATA and what falls through. Where the specification
 * is silent the answers are CoreDNS's (docs/coredns-compat.md).
 */
#include "cluster/internal.h"

#include <string.h>

#include "util/tsan.h"

/* CoreDNS's TTL of dns-version's TXT (the only TXT the table holds). */
#define VERSION_TTL 28800
/* CoreDNS gives its SOA at most this TTL (its minimum stays cluster.ttl). */
#define SOA_TTL_MAX 300

uint32_t cluster_ttl_of(const struct cluster *c, uint16_t type)
{
	if (type == DNS_T_TXT)
		return VERSION_TTL;
	if (type == DNS_T_SOA && c->ttl > SOA_TTL_MAX)
		return SOA_TTL_MAX;
	return c->ttl;
}

bool cluster_add_rr(const struct cluster *c, struct dns_writer *w, enum dns_section section,
		    const uint8_t *owner, uint16_t type, const uint8_t *rdata, size_t rdlen)
{
	return dns_response_add_rr(w, section, owner, type, DNS_C_IN, cluster_ttl_of(c, type), rdata,
				   (uint16_t)rdlen);
}

void cluster_add_soa(const struct cluster *c, struct dns_writer *w)
{
	dns_response_add_apex_rr(w, DNS_SEC_AUTHORITY, &c->soa_rr);
}

static void answer_nxdomain(const struct cluster *c, struct dns_writer *w)
{
	dns_response_set_rcode(w, DNS_R_NXDOMAIN);
	cluster_add_soa(c, w);
}

/* ---- names held in the table ---------------------------------------------- */

/* RFC 8482: ANY gets one RRset, the first the name holds, not everything
 * (a small question must not draw a large answer); 0 when it holds none. */
static uint16_t any_type(const struct cluster_node *n)
{
	struct cluster_rr rr;
	size_t pos = 0;

	return cluster_node_next(n, &pos, &rr) ? rr.type : 0;
}

/* The records of type qtype (one RRset for ANY) with this owner (NULL: the
 * question name); false when there are none. */
static bool add_records(const struct cluster *c, struct dns_writer *w,
			const struct cluster_node *n, const uint8_t *owner, uint16_t qtype)
{
	struct cluster_rr rr;
	size_t pos = 0;
	bool any = false;

	if (qtype == DNS_T_ANY && !(qtype = any_type(n)))
		return false;
	while (cluster_node_next(n, &pos, &rr)) {
		if (rr.type != qtype) {
			if (any)
				break; /* a type's records are adjacent: the rest are others */
			continue;
		}
		any = true;
		if (!cluster_add_rr(c, w, DNS_SEC_ANSWER, owner, rr.type, rr.rdata, rr.rdlen))
			break;
	}
	return any;
}

static const uint8_t *cname_of(const struct cluster_node *n)
{
	struct cluster_rr rr;
	size_t pos = 0;

	while (cluster_node_next(n, &pos, &rr))
		if (rr.type == DNS_T_CNAME)
			return rr.rdata;
	return NULL;
}

/*
 * <ip>.<ns>.pod.<zone> with cluster.pods: insecure: the address is the name,
 * provided the namespace exists (CoreDNS's rule). false: not a pod name.
 */
static bool answer_insecure_pod(const struct cluster *c, struct dns_writer *w,
				const uint8_t *name, uint16_t qtype, const uint8_t *owner)
{
	const uint8_t *ns = name + 1 + name[0];
	struct cluster_ip ip;

	if (!name[0] || c->pods != CONFIG_PODS_INSECURE || !dns_name_is_subdomain(ns, c->pod_apex) ||
	    dns_name_len(ns) != dns_name_len(c->pod_apex) + 1 + ns[0] ||
	    !cluster_find_node(c, ns, dns_name_len(ns)) ||
	    !cluster_parse_dashed_ip(name + 1, name[0], &ip))
		return false;
	uint16_t type = ip.family == AF_INET ? DNS_T_A : DNS_T_AAAA;
	if (qtype == type || qtype == DNS_T_ANY)
		cluster_add_rr(c, w, DNS_SEC_ANSWER, owner, type, ip.addr, type == DNS_T_A ? 4 : 16);
	else
		cluster_add_soa(c, w);
	return true;
}

/* A name the table holds no node for: answered when it is derived. */
static bool answer_derived(const struct cluster *c, struct dns_writer *w, const uint8_t *name,
			   uint16_t qtype, const uint8_t *owner)
{
	return cluster_derived_answer(c, w, name, qtype, owner) ||
	       answer_insecure_pod(c, w, name, qtype, owner);
}

/* What a name holds, as answer_in_zone follows it. */
struct held {
	const struct cluster_node *node;       /* records, or */
	const struct cluster_service *svc;     /* a Service whose name exists */
	const struct cluster_spec *spec;
};

static bool find_held(const struct cluster *c, const uint8_t *name, struct held *h)
{
	const struct cluster_named *n = cluster_find(c, name, dns_name_len(name));

	*h = (struct held){0};
	if (n && n->kind == NAMED_RECORDS) {
		h->node = (const struct cluster_node *)n;
		return true;
	}
	if (!n)
		return false;
	h->svc = (const struct cluster_service *)n;
	h->spec = cluster_spec_of(h->svc);
	return cluster_service_exists(c, h->svc, h->spec);
}

static bool add_held(const struct cluster *c, struct dns_writer *w, const struct held *h,
		     const uint8_t *owner, uint16_t qtype)
{
	return h->node ? add_records(c, w, h->node, owner, qtype)
		       : cluster_service_answer(c, w, h->svc, h->spec, owner, qtype);
}

static const uint8_t *held_cname(const struct held *h)
{
	if (h->node)
		return cname_of(h->node);
	return h->spec->kind == SVC_EXTERNAL_NAME ? h->spec->target : NULL;
}

static enum cluster_result answer_in_zone(const struct cluster *c, const struct dns_query *q,
					  struct dns_writer *w, struct cluster_chase *chase)
{
	const uint8_t *owner = dns_response_owner(w, q); /* NULL: the question, in client case */
	const uint8_t *name = q->qname;
	struct held h;

	dns_response_set_aa(w, true);
	for (int hop = 0; hop < CLUSTER_MAX_CHAIN; hop++) {
		if (!find_held(c, name, &h)) {
			/* RFC 6604: after a CNAME, the rcode is the last name's */
			if (!answer_derived(c, w, name, q->qtype, owner))
				answer_nxdomain(c, w);
			return CLUSTER_ANSWERED;
		}
		if (add_held(c, w, &h, owner, q->qtype))
			return CLUSTER_ANSWERED;
		const uint8_t *target = held_cname(&h);
		if (!target) {
			cluster_add_soa(c, w); /* NODATA */
			return CLUSTER_ANSWERED;
		}
		cluster_add_rr(c, w, DNS_SEC_ANSWER, owner, DNS_T_CNAME, target, dns_name_len(target));
		chase->targets[chase->n++] = target;
		if (!dns_name_is_subdomain(target, c->apex)) {
			chase->ttl = c->ttl;
			return CLUSTER_CHASE;
		}
		owner = name = target;
	}
	return CLUSTER_ANSWERED; /* a CNAME loop: what fits the hop limit */
}

/* ---- reverse names ---------------------------------------------------------- */

/* Under a zone of cluster.fallthrough. */
static bool falls_through(const struct cluster *c, const uint8_t *name)
{
	for (size_t pos = 0; pos < c->fallthrough_len; pos += dns_name_len(c->fallthrough + pos))
		if (dns_name_is_subdomain(name, c->fallthrough + pos))
			return true;
	return false;
}

/*
 * Reverse names: the PTRs we hold; anything else under cluster.fallthrough
 * is not ours (cache and upstream), and outside it NXDOMAIN, or NODATA for
 * another type at a name we hold, with the reverse zone's SOA.
 */
static enum cluster_result answer_reverse(const struct cluster *c, const struct dns_query *q,
					  struct dns_writer *w, int zone)
{
	struct cluster_ip ip;
	bool held = cluster_parse_reverse_name(q->qname, &ip) && cluster_reverse_answer(c, NULL, &ip, NULL);

	if (held && (q->qtype == DNS_T_PTR || q->qtype == DNS_T_ANY)) {
		dns_response_set_aa(w, true);
		cluster_reverse_answer(c, w, &ip, dns_response_owner(w, q));
		return CLUSTER_ANSWERED;
	}
	if (falls_through(c, q->qname))
		return CLUSTER_NOT_LOCAL;
	dns_response_set_aa(w, true);
	if (!held)
		dns_response_set_rcode(w, DNS_R_NXDOMAIN);
	dns_response_add_apex_rr(w, DNS_SEC_AUTHORITY, &c->reverse_soa_rr[zone]);
	return CLUSTER_ANSWERED;
}

static enum cluster_result answer(const struct cluster *c, const struct dns_query *q,
				  struct dns_writer *w, struct cluster_chase *chase)
{
	bool synced = atomic_load_explicit(&c->synced, memory_order_acquire);
	int zone;

	chase->n = 0;
	if (dns_name_is_subdomain(q->qname, c->apex))
		return synced ? answer_in_zone(c, q, w, chase) : CLUSTER_UNSYNCED;
	/* the clusterset zone has no reverse names: the cluster zone's table answers those */
	if (c->multicluster || (zone = cluster_reverse_zone(q->qname)) < 0)
		return CLUSTER_NOT_LOCAL;
	if (!synced)
		return falls_through(c, q->qname) ? CLUSTER_NOT_LOCAL : CLUSTER_UNSYNCED;
	return answer_reverse(c, q, w, zone);
}

enum cluster_result cluster_answer(const struct cluster *c, const struct dns_query *q,
				   struct dns_writer *w, struct cluster_chase *chase)
{
	enum cluster_result r = answer(c, q, w, chase);

	TSAN_GRACE_RELEASE(); /* done with the nodes (query_handle, with the chase targets) */
	return r;
}

const uint8_t *cluster_zone(const struct cluster *c)
{
	return c->apex;
}
