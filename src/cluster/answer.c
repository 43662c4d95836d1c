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
 * Some names are derived here instead of held (model.c builds neither):
 * SRV records and _<port>._<proto> names from a Service's port entries
 * (CLUSTER_T_PORT, internal.h), and an endpoint's dashed name
 * (10-1-0-7.<svc>...) from the PTR of that address, which names it.
 * Where the specification is silent the answers are CoreDNS's
 * (docs/coredns-compat.md).
 */
#include "cluster/internal.h"

#include <string.h>

#include "util/tsan.h"

/* CoreDNS's TTL of dns-version's TXT (the only TXT the table holds). */
#define VERSION_TTL 28800
/* CoreDNS gives its SOA at most this TTL (its minimum stays cluster.ttl). */
#define SOA_TTL_MAX 300

static const struct cluster_node *lookup(const struct cluster *c, const uint8_t *name)
{
	return cluster_find(c, name, dns_name_len(name));
}

static uint32_t ttl_of(const struct cluster *c, uint16_t type)
{
	if (type == DNS_T_TXT)
		return VERSION_TTL;
	if (type == DNS_T_SOA && c->ttl > SOA_TTL_MAX)
		return SOA_TTL_MAX;
	return c->ttl;
}

static bool add_rr(const struct cluster *c, struct dns_writer *w, enum dns_section section,
		   const uint8_t *owner, uint16_t type, const uint8_t *rdata, size_t rdlen)
{
	return dns_response_add_rr(w, section, owner, type, DNS_C_IN, ttl_of(c, type), rdata,
				   (uint16_t)rdlen);
}

static void add_soa(const struct cluster *c, struct dns_writer *w)
{
	add_rr(c, w, DNS_SEC_AUTHORITY, c->apex, DNS_T_SOA, c->soa, c->soa_len);
}

static void answer_nxdomain(const struct cluster *c, struct dns_writer *w)
{
	dns_response_set_rcode(w, DNS_R_NXDOMAIN);
	add_soa(c, w);
}

static bool is_address(uint16_t type)
{
	return type == DNS_T_A || type == DNS_T_AAAA;
}

/* ---- dashed endpoint names ------------------------------------------------- */

/*
 * <a-b-c-d>.<svc>.<ns>.svc.<zone> with no node of its own: it exists when
 * the PTR of that address names it exactly (model.c publishes one for
 * every serving endpoint address). *ip: the address.
 */
static bool dashed_endpoint(const struct cluster *c, const uint8_t *name, struct cluster_ip *ip)
{
	uint8_t rev[DNS_MAX_NAME];
	const struct cluster_node *ptrs;
	struct cluster_rr rr;
	size_t pos = 0, len = dns_name_len(name);

	if (!cluster_parse_dashed_ip(name + 1, name[0], ip) ||
	    !(ptrs = cluster_find(c, rev, cluster_reverse_name(ip, rev))))
		return false;
	while (cluster_node_next(ptrs, &pos, &rr))
		if (rr.type == DNS_T_PTR && rr.rdlen == len && memcmp(rr.rdata, name, len) == 0)
			return true;
	return false;
}

/* The A/AAAA records of name (a node's, or a dashed endpoint's), of qtype
 * only unless it is 0, written with owner; how many. */
static unsigned add_addresses_of(const struct cluster *c, struct dns_writer *w,
				 enum dns_section section, const uint8_t *name,
				 const uint8_t *owner, uint16_t qtype)
{
	const struct cluster_node *n = lookup(c, name);
	struct cluster_ip ip;
	struct cluster_rr rr;
	size_t pos = 0;
	unsigned added = 0;

	if (n) {
		while (cluster_node_next(n, &pos, &rr))
			if (is_address(rr.type) && (!qtype || rr.type == qtype)) {
				add_rr(c, w, section, owner, rr.type, rr.rdata, rr.rdlen);
				added++;
			}
		return added;
	}
	if (!dashed_endpoint(c, name, &ip))
		return 0;
	uint16_t type = ip.family == AF_INET ? DNS_T_A : DNS_T_AAAA;
	if (qtype && qtype != type)
		return 0;
	add_rr(c, w, section, owner, type, ip.addr, type == DNS_T_A ? 4 : 16);
	return 1;
}

/* ---- SRV from port entries -------------------------------------------------- */

struct port_entry {
	const uint8_t *target;
	size_t target_len;
	uint16_t port;
	const uint8_t *proto; /* one label */
	const uint8_t *name;  /* one label, maybe empty */
};

static void read_port_entry(const struct cluster_rr *rr, struct port_entry *e)
{
	e->target = rr->rdata;
	e->target_len = dns_name_len(rr->rdata);
	e->port = (uint16_t)(rr->rdata[e->target_len] << 8 | rr->rdata[e->target_len + 1]);
	e->proto = rr->rdata + e->target_len + 2;
	e->name = e->proto + 1 + e->proto[0];
}

static bool same_target(const struct port_entry *a, const struct port_entry *b)
{
	return a->target_len == b->target_len && memcmp(a->target, b->target, a->target_len) == 0;
}

/*
 * Which port entries a name selects: all of them (the Service's own name),
 * one port name and protocol (_<name>._<proto>), or the named ports of one
 * protocol (_<proto>, which only exists). Labels as in the query, the
 * underscore left out.
 */
struct port_query {
	const uint8_t *name, *proto; /* NULL: any */
	uint8_t name_len, proto_len;
	bool named_only;
};

static bool label_is(const uint8_t *label, const uint8_t *want, uint8_t len)
{
	return label[0] == len && memcmp(label + 1, want, len) == 0;
}

/* The next entry of n that pq selects, from *pos on. */
static bool next_port(const struct cluster_node *n, size_t *pos, const struct port_query *pq,
		      struct port_entry *e)
{
	struct cluster_rr rr;

	while (cluster_node_next(n, pos, &rr)) {
		if (rr.type != CLUSTER_T_PORT)
			continue;
		read_port_entry(&rr, e);
		if ((!pq->proto || label_is(e->proto, pq->proto, pq->proto_len)) &&
		    (!pq->name || label_is(e->name, pq->name, pq->name_len)) &&
		    (!pq->named_only || e->name[0]))
			return true;
	}
	return false;
}

static unsigned count_ports(const struct cluster_node *n, const struct port_query *pq)
{
	struct port_entry e;
	size_t pos = 0;
	unsigned count = 0;

	while (next_port(n, &pos, pq, &e))
		count++;
	return count;
}

/*
 * The addresses of every target pq selects in n, once per target (the
 * entries of a target are adjacent), of qtype only unless it is 0: in the
 * additional section under the targets' names, or in the answer with owner
 * (NULL: the question); how many.
 */
static unsigned add_target_addresses(const struct cluster *c, struct dns_writer *w,
				     enum dns_section section, const struct cluster_node *n,
				     const struct port_query *pq, const uint8_t *owner,
				     uint16_t qtype)
{
	struct port_entry e, last = {0};
	size_t pos = 0;
	unsigned added = 0;

	while (next_port(n, &pos, pq, &e)) {
		if (last.target && same_target(&e, &last))
			continue;
		added += add_addresses_of(c, w, section, e.target,
					  section == DNS_SEC_ADDITIONAL ? e.target : owner, qtype);
		last = e;
	}
	return added;
}

/*
 * CoreDNS's SRV answer from the entries pq selects: one record per target
 * and port, priority 0, weight 100 / the number of entries (at least 1),
 * then the targets' addresses in the additional section. false: none.
 */
static bool add_srv_records(const struct cluster *c, struct dns_writer *w,
			    const struct cluster_node *n, const uint8_t *owner,
			    const struct port_query *pq)
{
	unsigned count = count_ports(n, pq);
	uint16_t weight = (uint16_t)(count >= 100 ? 1 : 100 / (count ? count : 1));
	uint8_t rdata[6 + DNS_MAX_NAME];
	struct port_entry e, last = {0};
	size_t pos = 0;

	if (!count)
		return false;
	while (next_port(n, &pos, pq, &e)) {
		if (last.target && same_target(&e, &last) && e.port == last.port)
			continue;
		last = e;
		rdata[0] = rdata[1] = 0;
		rdata[2] = (uint8_t)(weight >> 8);
		rdata[3] = (uint8_t)weight;
		rdata[4] = (uint8_t)(e.port >> 8);
		rdata[5] = (uint8_t)e.port;
		memcpy(rdata + 6, e.target, e.target_len);
		if (!add_rr(c, w, DNS_SEC_ANSWER, owner, DNS_T_SRV, rdata, 6 + e.target_len))
			return true; /* truncated */
	}
	add_target_addresses(c, w, DNS_SEC_ADDITIONAL, n, pq, NULL, 0);
	return true;
}

/* ---- names held in the table ---------------------------------------------- */

/* RFC 8482: ANY gets one RRset, the first the name holds, not everything
 * (a small question must not draw a large answer); 0 when it holds none. */
static uint16_t any_type(const struct cluster_node *n)
{
	struct cluster_rr rr;
	size_t pos = 0;

	if (!cluster_node_next(n, &pos, &rr))
		return 0;
	return rr.type == CLUSTER_T_PORT ? DNS_T_SRV : rr.type;
}

/* The records of type qtype (one RRset for ANY) with this owner (NULL: the
 * question name); false when there are none. */
static bool add_records(const struct cluster *c, struct dns_writer *w,
			const struct cluster_node *n, const uint8_t *owner, uint16_t qtype)
{
	static const struct port_query every_port;
	struct cluster_rr rr;
	size_t pos = 0;
	bool any = false;

	if (qtype == DNS_T_ANY && !(qtype = any_type(n)))
		return false;
	if (qtype == DNS_T_SRV)
		return add_srv_records(c, w, n, owner, &every_port);
	while (cluster_node_next(n, &pos, &rr)) {
		if (rr.type != qtype) {
			if (any)
				break; /* a type's records are adjacent: the rest are others */
			continue;
		}
		any = true;
		if (!add_rr(c, w, DNS_SEC_ANSWER, owner, rr.type, rr.rdata, rr.rdlen))
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

/* ---- names derived from others ------------------------------------------- */

/*
 * _<name>._<proto>.<svc> and _<proto>.<svc>, from the Service's port
 * entries: SRV as for the Service's name, of that port only; A and AAAA
 * the targets' addresses (CoreDNS's answer); other types NODATA. A
 * name no entry matches does not exist.
 */
static bool answer_port_name(const struct cluster *c, struct dns_writer *w,
			     const uint8_t *name, uint16_t qtype, const uint8_t *owner)
{
	const uint8_t *svc = name + 1 + name[0];
	struct port_query pq = {0};
	const struct cluster_node *n;

	if (name[0] < 2 || name[1] != '_')
		return false;
	if (svc[0] >= 2 && svc[1] == '_') {
		pq.name = name + 2;
		pq.name_len = (uint8_t)(name[0] - 1);
		pq.proto = svc + 2;
		pq.proto_len = (uint8_t)(svc[0] - 1);
		svc += 1 + svc[0];
	} else {
		pq.proto = name + 2;
		pq.proto_len = (uint8_t)(name[0] - 1);
		pq.named_only = true;
	}
	if (!(n = lookup(c, svc)) || !count_ports(n, &pq))
		return false;
	if (qtype == DNS_T_ANY)
		qtype = DNS_T_SRV;
	if (pq.named_only)
		add_soa(c, w); /* an empty non-terminal */
	else if (qtype == DNS_T_SRV)
		add_srv_records(c, w, n, owner, &pq);
	else if (!is_address(qtype) ||
		 !add_target_addresses(c, w, DNS_SEC_ANSWER, n, &pq, owner, qtype))
		add_soa(c, w);
	return true;
}

static bool answer_dashed_endpoint(const struct cluster *c, struct dns_writer *w,
				   const uint8_t *name, uint16_t qtype, const uint8_t *owner)
{
	struct cluster_ip ip;

	if (!dashed_endpoint(c, name, &ip))
		return false;
	uint16_t type = ip.family == AF_INET ? DNS_T_A : DNS_T_AAAA;
	if (qtype == type || qtype == DNS_T_ANY)
		add_rr(c, w, DNS_SEC_ANSWER, owner, type, ip.addr, type == DNS_T_A ? 4 : 16);
	else
		add_soa(c, w);
	return true;
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

	if (c->pods != CONFIG_PODS_INSECURE || !dns_name_is_subdomain(ns, c->pod_apex) ||
	    dns_name_len(ns) != dns_name_len(c->pod_apex) + 1 + ns[0] ||
	    !lookup(c, ns) || !cluster_parse_dashed_ip(name + 1, name[0], &ip))
		return false;
	uint16_t type = ip.family == AF_INET ? DNS_T_A : DNS_T_AAAA;
	if (qtype == type || qtype == DNS_T_ANY)
		add_rr(c, w, DNS_SEC_ANSWER, owner, type, ip.addr, type == DNS_T_A ? 4 : 16);
	else
		add_soa(c, w);
	return true;
}

/* A name the table holds no node for: answered when it is derived. */
static bool answer_derived(const struct cluster *c, struct dns_writer *w, const uint8_t *name,
			   uint16_t qtype, const uint8_t *owner)
{
	return answer_port_name(c, w, name, qtype, owner) ||
	       answer_dashed_endpoint(c, w, name, qtype, owner) ||
	       answer_insecure_pod(c, w, name, qtype, owner);
}

static enum cluster_result answer_in_zone(const struct cluster *c, const struct dns_query *q,
					  struct dns_writer *w, struct cluster_chase *chase)
{
	const struct cluster_node *n = lookup(c, q->qname);
	const uint8_t *owner = dns_response_owner(w, q); /* NULL: the question, in client case */

	dns_response_set_aa(w, true);
	if (!n) {
		if (!answer_derived(c, w, q->qname, q->qtype, owner))
			answer_nxdomain(c, w);
		return CLUSTER_ANSWERED;
	}
	for (int hop = 0; hop < CLUSTER_MAX_CHAIN; hop++) {
		if (add_records(c, w, n, owner, q->qtype))
			return CLUSTER_ANSWERED;
		const uint8_t *target = cname_of(n);
		if (!target) {
			add_soa(c, w); /* NODATA */
			return CLUSTER_ANSWERED;
		}
		add_rr(c, w, DNS_SEC_ANSWER, owner, DNS_T_CNAME, target, dns_name_len(target));
		chase->targets[chase->n++] = target;
		if (!dns_name_is_subdomain(target, c->apex)) {
			chase->ttl = c->ttl;
			return CLUSTER_CHASE;
		}
		owner = target;
		n = lookup(c, target);
		if (!n) {
			/* RFC 6604: the rcode is the last name's */
			if (!answer_derived(c, w, target, q->qtype, target))
				answer_nxdomain(c, w);
			return CLUSTER_ANSWERED;
		}
	}
	return CLUSTER_ANSWERED; /* a CNAME loop: what fits the hop limit */
}

/* ---- reverse names ---------------------------------------------------------- */

/* <svc>.<ns>.svc.<zone>: a ClusterIP's PTR target (an endpoint's has a label more). */
static bool names_service(const struct cluster *c, const uint8_t *target)
{
	return cluster_name_labels(target) == c->apex_labels + 3;
}

/* A reverse name's PTRs; when one names a Service (the address is its
 * ClusterIP), that one alone, as CoreDNS answers. */
static void add_ptr_records(const struct cluster *c, struct dns_writer *w,
			    const struct cluster_node *n, const uint8_t *owner)
{
	struct cluster_rr rr;
	size_t pos = 0;
	bool service = false;

	while (!service && cluster_node_next(n, &pos, &rr))
		service = rr.type == DNS_T_PTR && names_service(c, rr.rdata);
	for (pos = 0; cluster_node_next(n, &pos, &rr);)
		if (rr.type == DNS_T_PTR && (!service || names_service(c, rr.rdata)) &&
		    !add_rr(c, w, DNS_SEC_ANSWER, owner, rr.type, rr.rdata, rr.rdlen))
			return;
}

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
	const struct cluster_node *n = lookup(c, q->qname);

	if (n && (q->qtype == DNS_T_PTR || q->qtype == DNS_T_ANY)) {
		dns_response_set_aa(w, true);
		add_ptr_records(c, w, n, dns_response_owner(w, q));
		return CLUSTER_ANSWERED;
	}
	if (falls_through(c, q->qname))
		return CLUSTER_NOT_LOCAL;
	dns_response_set_aa(w, true);
	if (!n)
		dns_response_set_rcode(w, DNS_R_NXDOMAIN);
	add_rr(c, w, DNS_SEC_AUTHORITY, cluster_reverse_apex(zone), DNS_T_SOA,
	       c->reverse_soa[zone], c->reverse_soa_len[zone]);
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
	if ((zone = cluster_reverse_zone(q->qname)) < 0)
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
