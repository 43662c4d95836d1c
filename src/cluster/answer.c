/*
 * cluster/answer.c — answering one query from the name table.
 *
 * Runs on the hot path under the caller's RCU read lock: hash lookups and
 * writes into the caller's writer, no allocation, no lock. Under the zone we
 * are authoritative: a name not in the table is NXDOMAIN (so search-path
 * misses like name.ns.svc.<zone>.ns.svc.<zone> never leave the node), a name
 * without the asked type is NODATA, both with the SOA. Pod names are read
 * from the name itself (cluster.pods: insecure) or looked up (verified).
 */
#include "cluster/internal.h"

#include <string.h>

#include "util/tsan.h"

static const struct cluster_node *lookup(const struct cluster *c, const uint8_t *name)
{
	return cluster_find(c, name, dns_name_len(name));
}

static void add_soa(const struct cluster *c, struct dns_writer *w)
{
	dns_response_add_rr(w, DNS_SEC_AUTHORITY, c->apex, DNS_T_SOA, DNS_C_IN, c->ttl,
			    c->soa, c->soa_len);
}

/* Addresses of SRV targets we hold, so clients skip a round trip. */
static void add_target_addresses(const struct cluster *c, struct dns_writer *w,
				 const struct cluster_rr *srv)
{
	const struct cluster_node *t = lookup(c, srv->rdata + 6);
	struct cluster_rr rr;
	size_t pos = 0;

	while (t && cluster_node_next(t, &pos, &rr))
		if (rr.type == DNS_T_A || rr.type == DNS_T_AAAA)
			dns_response_add_rr(w, DNS_SEC_ADDITIONAL, t->data, rr.type, DNS_C_IN,
					    c->ttl, rr.rdata, rr.rdlen);
}

/* The records of type qtype (all for ANY) with this owner (NULL: the
 * question name); false when there are none. */
static bool add_records(const struct cluster *c, struct dns_writer *w,
			const struct cluster_node *n, const uint8_t *owner, uint16_t qtype)
{
	struct cluster_rr rr;
	size_t pos = 0;
	bool any = false;

	while (cluster_node_next(n, &pos, &rr)) {
		if (rr.type != qtype && qtype != DNS_T_ANY)
			continue;
		any = true;
		if (!dns_response_add_rr(w, DNS_SEC_ANSWER, owner, rr.type, DNS_C_IN, c->ttl,
					 rr.rdata, rr.rdlen))
			return true;
	}
	if (!any || (qtype != DNS_T_SRV && qtype != DNS_T_ANY))
		return any;
	for (pos = 0; cluster_node_next(n, &pos, &rr);)
		if (rr.type == DNS_T_SRV)
			add_target_addresses(c, w, &rr);
	return true;
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
static bool answer_insecure_pod(const struct cluster *c, const struct dns_query *q,
				struct dns_writer *w)
{
	const uint8_t *ns = q->qname + 1 + q->qname[0];
	struct cluster_ip ip;

	if (c->pods != CONFIG_PODS_INSECURE || !dns_name_is_subdomain(ns, c->pod_apex) ||
	    dns_name_len(ns) != dns_name_len(c->pod_apex) + 1 + ns[0] ||
	    !lookup(c, ns) || !cluster_parse_dashed_ip(q->qname + 1, q->qname[0], &ip))
		return false;
	uint16_t type = ip.family == AF_INET ? DNS_T_A : DNS_T_AAAA;
	if (q->qtype == type || q->qtype == DNS_T_ANY)
		dns_response_add_rr(w, DNS_SEC_ANSWER, dns_response_owner(w, q), type, DNS_C_IN,
				    c->ttl, ip.addr, type == DNS_T_A ? 4 : 16);
	else
		add_soa(c, w);
	return true;
}

static void answer_nxdomain(const struct cluster *c, struct dns_writer *w)
{
	dns_response_set_rcode(w, DNS_R_NXDOMAIN);
	add_soa(c, w);
}

static enum cluster_result answer_in_zone(const struct cluster *c, const struct dns_query *q,
					  struct dns_writer *w, struct cluster_chase *chase)
{
	const struct cluster_node *n = lookup(c, q->qname);
	const uint8_t *owner = dns_response_owner(w, q); /* NULL: the question, in client case */

	dns_response_set_aa(w, true);
	if (!n) {
		if (!answer_insecure_pod(c, q, w))
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
		dns_response_add_rr(w, DNS_SEC_ANSWER, owner, DNS_T_CNAME, DNS_C_IN, c->ttl,
				    target, (uint16_t)dns_name_len(target));
		chase->targets[chase->n++] = target;
		if (!dns_name_is_subdomain(target, c->apex)) {
			chase->ttl = c->ttl;
			return CLUSTER_CHASE;
		}
		owner = target;
		n = lookup(c, target);
		if (!n) {
			answer_nxdomain(c, w); /* RFC 6604: the rcode is the last name's */
			return CLUSTER_ANSWERED;
		}
	}
	return CLUSTER_ANSWERED; /* a CNAME loop: what fits the hop limit */
}

/* Reverse names: ours only when we hold a PTR there. */
static enum cluster_result answer_reverse(const struct cluster *c, const struct dns_query *q,
					  struct dns_writer *w)
{
	const struct cluster_node *n;

	if ((q->qtype != DNS_T_PTR && q->qtype != DNS_T_ANY) || !(n = lookup(c, q->qname)))
		return CLUSTER_NOT_LOCAL;
	dns_response_set_aa(w, true);
	add_records(c, w, n, dns_response_owner(w, q), DNS_T_PTR);
	return CLUSTER_ANSWERED;
}

static enum cluster_result answer(const struct cluster *c, const struct dns_query *q,
				  struct dns_writer *w, struct cluster_chase *chase)
{
	chase->n = 0;
	if (dns_name_is_subdomain(q->qname, c->apex)) {
		if (!atomic_load_explicit(&c->synced, memory_order_acquire))
			return CLUSTER_UNSYNCED;
		return answer_in_zone(c, q, w, chase);
	}
	if (cluster_is_reverse_name(q->qname) &&
	    atomic_load_explicit(&c->synced, memory_order_acquire))
		return answer_reverse(c, q, w);
	return CLUSTER_NOT_LOCAL;
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
