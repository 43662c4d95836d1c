/*
 * cluster/service.c — the answers derived from a Service at query time:
 * its addresses, every SRV answer (CoreDNS's weights), the _<port>._<proto>
 * and _<proto> names, endpoint names (hostnames and dashed addresses), the
 * PTRs of ClusterIPs and endpoint addresses, and verified pod names behind
 * endpoints. Nothing here is stored per name: a Service's spec and slice
 * snapshots and the indexes (index.c) are read under the caller's RCU read
 * lock, with no lock and no allocation.
 *
 * An address (or hostname) can sit in two slices of one Service while an
 * endpoint moves between them: the records it gives are written once, by
 * the slice with the lowest sequence number (model.c numbers slices as it
 * first sees them; the snapshots of one slice share its number, so a
 * reader meeting a slice's old and new snapshot during an update takes
 * neither for a second slice).
 *
 * In the clusterset zone (multicluster.enabled) each slice comes from one
 * source cluster, whose label sits between an endpoint's name and its
 * Service's (<ep>.<cluster>.<svc>, CoreDNS's multicluster names): an
 * endpoint name is looked for in that cluster's slices only.
 */
#include "cluster/internal.h"

#include <string.h>

/* PTR targets of one reverse name that one answer lists at most (the same
 * address under this many Services is no real workload). */
#define MAX_PTRS 64

static bool is_address(uint16_t type)
{
	return type == DNS_T_A || type == DNS_T_AAAA;
}

static uint16_t family_type(int family)
{
	return family == AF_INET ? DNS_T_A : DNS_T_AAAA;
}

static const struct cluster_spec *spec_of(const struct cluster_service *s)
{
	return cluster_spec_of(s);
}

/* Whether entry i of e gives names and addresses (ready, or the Service
 * publishes not-ready addresses). */
static bool serving(const struct cluster_spec *spec, const struct cluster_eps *e, uint32_t i)
{
	return spec->publish_not_ready || (e->flags[i] & EP_READY);
}

#define for_each_eps(e, s) for (e = cluster_first_eps(s); e; e = cluster_next_eps(e))

/* Both slices name the same source cluster (or none: the cluster zone). */
static bool same_cluster(const uint8_t *a, const uint8_t *b)
{
	return a == b || (a && b && a[0] == b[0] && memcmp(a + 1, b + 1, a[0]) == 0);
}

/* Whether two slices of s may hold one address or hostname (index.c). */
static bool may_repeat(const struct cluster_service *s)
{
	return atomic_load_explicit(&s->shared, memory_order_relaxed) != 0;
}

static bool has_serving(const struct cluster_service *s, const struct cluster_spec *spec)
{
	const struct cluster_eps *e;

	for_each_eps(e, s)
		if (e->n && (spec->publish_not_ready || e->n_ready))
			return true;
	return false;
}

bool cluster_service_exists(const struct cluster *c, const struct cluster_service *s,
			    const struct cluster_spec *spec)
{
	if (!spec)
		return false;
	switch (spec->kind) {
	case SVC_CLUSTER_IP:
		return !c->ignore_empty_service || has_serving(s, spec);
	case SVC_HEADLESS:
		return !c->noendpoints && has_serving(s, spec);
	default:
		return spec->target_len > 0;
	}
}

/* ---- names of endpoints ------------------------------------------------------------ */

/* Entry i's name under s (its hostname, else its dashed address; then its
 * source cluster, if any); 0 when it does not fit in a name. */
static size_t entry_name(const struct cluster_service *s, const struct cluster_eps *e, uint32_t i,
			 uint8_t out[DNS_MAX_NAME])
{
	uint8_t dashed[64];
	const uint8_t *label = dashed;
	size_t cluster_len = e->cluster ? 1u + e->cluster[0] : 0, len = 0;

	if (i >= e->named) {
		label = e->labels + cluster_eps_group_of(e, i)->label;
	} else {
		struct cluster_ip ip = {.family = e->family};
		memcpy(ip.addr, eps_addr(e, i), e->alen);
		cluster_dashed_label(&ip, dashed);
	}
	if (1u + label[0] + cluster_len + s->h.owner_len > DNS_MAX_NAME)
		return 0;
	memcpy(out, label, 1u + label[0]);
	len = 1u + label[0];
	if (e->cluster) {
		memcpy(out + len, e->cluster, cluster_len);
		len += cluster_len;
	}
	memcpy(out + len, s->owner, s->h.owner_len);
	return len + s->h.owner_len;
}

static void entry_ip(const struct cluster_eps *e, uint32_t i, struct cluster_ip *ip)
{
	memset(ip, 0, sizeof *ip);
	ip->family = e->family;
	memcpy(ip->addr, eps_addr(e, i), e->alen);
}

/* An earlier slice of s (by sequence number) has entry i's address serving. */
static bool address_in_earlier_slice(const struct cluster *c, const struct cluster_service *s,
				     const struct cluster_spec *spec, const struct cluster_eps *e,
				     uint32_t i)
{
	struct cluster_index_iter it;
	const struct cluster_eps *t;
	struct cluster_ip ip;
	uint32_t j;

	if (!may_repeat(s))
		return false;
	entry_ip(e, i, &ip);
	for (bool ok = cluster_addr_first(c, &ip, &it, &t, &j); ok;
	     ok = cluster_addr_next(c, &it, &t, &j))
		if (t->svc == s && t->seq < e->seq && serving(spec, t, j))
			return true;
	return false;
}

/* Whether an endpoint of s from source cluster `cluster` with hostname label serves. */
static bool hostname_serves(const struct cluster *c, const struct cluster_service *s,
			    const struct cluster_spec *spec, const uint8_t *label,
			    const uint8_t *cluster)
{
	struct cluster_index_iter it;
	const struct cluster_eps *e;
	const struct cluster_group *g;

	for (bool ok = cluster_name_first(c, s, label, &it, &e, &g); ok;
	     ok = cluster_name_next(c, &it, &e, &g))
		if ((spec->publish_not_ready || g->ready) && same_cluster(e->cluster, cluster))
			return true;
	return false;
}

/* The serving addresses of s's endpoints of type qtype (0: both) with
 * hostname label (from source cluster `cluster`), each once, under owner;
 * how many. */
static unsigned add_hostname_addresses(const struct cluster *c, struct dns_writer *w,
				       enum dns_section section, const struct cluster_service *s,
				       const struct cluster_spec *spec, const uint8_t *label,
				       const uint8_t *cluster, const uint8_t *owner, uint16_t qtype)
{
	struct cluster_index_iter it, other;
	const struct cluster_eps *e, *t;
	const struct cluster_group *g, *h;
	bool repeats = may_repeat(s);
	unsigned added = 0;

	for (bool ok = cluster_name_first(c, s, label, &it, &e, &g); ok;
	     ok = cluster_name_next(c, &it, &e, &g)) {
		if (!same_cluster(e->cluster, cluster))
			continue;
		for (uint32_t i = g->first; i < g->end; i++) {
			bool again = false;
			if (!serving(spec, e, i) || (qtype && family_type(e->family) != qtype))
				continue;
			/* the same hostname and address in an earlier slice: written there */
			for (bool more = repeats && cluster_name_first(c, s, label, &other, &t, &h);
			     more && !again;
			     more = cluster_name_next(c, &other, &t, &h))
				for (uint32_t j = h->first; t->seq < e->seq && j < h->end && !again; j++)
					again = t->family == e->family && serving(spec, t, j) &&
						same_cluster(t->cluster, cluster) &&
						memcmp(eps_addr(t, j), eps_addr(e, i), e->alen) == 0;
			if (again)
				continue;
			if (!cluster_add_rr(c, w, section, owner, family_type(e->family), eps_addr(e, i),
					    e->alen) && section == DNS_SEC_ANSWER)
				return added;
			added++;
		}
	}
	return added;
}

/* The address a label spells in the one dashed form we write it in (the
 * name an endpoint has; fd00-3-- is not fd00-3--0's); false otherwise. */
static bool canonical_dashed_ip(const uint8_t *label, struct cluster_ip *ip)
{
	uint8_t again[64];

	return cluster_parse_dashed_ip(label + 1, label[0], ip) &&
	       cluster_dashed_label(ip, again) == 1u + label[0] &&
	       memcmp(again + 1, label + 1, label[0]) == 0;
}

/* <dashed>[.<cluster>].<s>: whether an entry of s without a hostname has ip and serves. */
static bool dashed_endpoint_exists(const struct cluster *c, const struct cluster_service *s,
				   const struct cluster_spec *spec, const struct cluster_ip *ip,
				   const uint8_t *cluster)
{
	struct cluster_index_iter it;
	const struct cluster_eps *t;
	uint32_t j;

	for (bool ok = cluster_addr_first(c, ip, &it, &t, &j); ok;
	     ok = cluster_addr_next(c, &it, &t, &j))
		if (t->svc == s && j < t->named && serving(spec, t, j) &&
		    same_cluster(t->cluster, cluster))
			return true;
	return false;
}

/* The addresses of entry i's name (qtype 0: both types) under owner; how many. */
static unsigned add_entry_addresses(const struct cluster *c, struct dns_writer *w,
				    enum dns_section section, const struct cluster_service *s,
				    const struct cluster_spec *spec, const struct cluster_eps *e,
				    uint32_t i, const uint8_t *owner, uint16_t qtype)
{
	if (i >= e->named)
		return add_hostname_addresses(c, w, section, s, spec,
					      e->labels + cluster_eps_group_of(e, i)->label,
					      e->cluster, owner, qtype);
	if (qtype && family_type(e->family) != qtype)
		return 0;
	return cluster_add_rr(c, w, section, owner, family_type(e->family), eps_addr(e, i), e->alen);
}

/* ---- ports and SRV ----------------------------------------------------------------- */

/* Whether slice t has a port pq selects numbered `port` (0: any). */
static bool slice_has_port(const struct cluster_port_query *pq, const struct cluster_eps *t,
			   uint16_t port)
{
	return cluster_ports_have(pq, t->ports, t->n_ports, port);
}

/* The entries that speak for their name in e: the first (serving) one of
 * each hostname group, every hostname-less entry that serves. */
static bool speaks_for_name(const struct cluster_spec *spec, const struct cluster_eps *e, uint32_t i)
{
	return spec->publish_not_ready ? e->flags[i] & EP_NAME_FIRST
				       : e->flags[i] & EP_NAME_FIRST_READY;
}

/*
 * Entry i's name is also a target of an earlier slice of s with a matching
 * port numbered `port` (0: any): the records are that slice's to write.
 */
static bool target_in_earlier_slice(const struct cluster *c, const struct cluster_service *s,
				    const struct cluster_spec *spec, const struct cluster_port_query *pq,
				    const struct cluster_eps *e, uint32_t i, uint16_t port)
{
	struct cluster_index_iter it;
	const struct cluster_eps *t;
	const struct cluster_group *g;
	struct cluster_ip ip;
	uint32_t j;

	if (!may_repeat(s))
		return false;
	if (i >= e->named) {
		for (bool ok = cluster_name_first(c, s,
						  e->labels + cluster_eps_group_of(e, i)->label,
						  &it, &t, &g);
		     ok; ok = cluster_name_next(c, &it, &t, &g))
			if (t->seq < e->seq && (spec->publish_not_ready || g->ready) &&
			    same_cluster(t->cluster, e->cluster) && slice_has_port(pq, t, port))
				return true;
		return false;
	}
	entry_ip(e, i, &ip);
	for (bool ok = cluster_addr_first(c, &ip, &it, &t, &j); ok;
	     ok = cluster_addr_next(c, &it, &t, &j))
		if (t->svc == s && t->seq < e->seq && j < t->named && serving(spec, t, j) &&
		    same_cluster(t->cluster, e->cluster) && slice_has_port(pq, t, port))
			return true;
	return false;
}

/* How many (target, port) entries pq selects: CoreDNS's weight divides by it. */
static unsigned count_entries(const struct cluster_service *s, const struct cluster_spec *spec,
			      const struct cluster_port_query *pq)
{
	const struct cluster_eps *e;
	unsigned count = 0;

	if (spec->kind == SVC_CLUSTER_IP)
		return cluster_ports_matching(pq, spec->ports, spec->n_ports) * spec->n_ips;
	if (spec->kind != SVC_HEADLESS)
		return 0;
	for_each_eps(e, s)
		count += cluster_ports_matching(pq, e->ports, e->n_ports) *
			 (spec->publish_not_ready ? e->n : e->n_ready);
	return count;
}

static bool add_srv(const struct cluster *c, struct dns_writer *w, const uint8_t *owner,
		    uint16_t weight, uint16_t port, const uint8_t *target, size_t target_len)
{
	uint8_t rdata[6 + DNS_MAX_NAME];

	rdata[0] = rdata[1] = 0;
	rdata[2] = (uint8_t)(weight >> 8);
	rdata[3] = (uint8_t)weight;
	rdata[4] = (uint8_t)(port >> 8);
	rdata[5] = (uint8_t)port;
	memcpy(rdata + 6, target, target_len);
	return cluster_add_rr(c, w, DNS_SEC_ANSWER, owner, DNS_T_SRV, rdata, 6 + target_len);
}

/* A ClusterIP Service's addresses of qtype (0: both) under owner; how many. */
static unsigned add_cluster_ips(const struct cluster *c, struct dns_writer *w,
				enum dns_section section, const struct cluster_spec *spec,
				const uint8_t *owner, uint16_t qtype)
{
	unsigned added = 0;

	for (uint8_t i = 0; i < spec->n_ips; i++) {
		uint16_t type = family_type(spec->ips[i].family);
		if (qtype && type != qtype)
			continue;
		if (!cluster_add_rr(c, w, section, owner, type, spec->ips[i].addr,
				    spec->ips[i].family == AF_INET ? 4 : 16) &&
		    section == DNS_SEC_ANSWER)
			break;
		added++;
	}
	return added;
}

/*
 * The distinct targets of a headless Service's entries pq selects, each
 * once: their addresses of qtype (0: both) under the target's name in the
 * additional section, or under owner in the answer. How many.
 */
static unsigned add_target_addresses(const struct cluster *c, struct dns_writer *w,
				     enum dns_section section, const struct cluster_service *s,
				     const struct cluster_spec *spec, const struct cluster_port_query *pq,
				     const uint8_t *owner, uint16_t qtype)
{
	const struct cluster_eps *e;
	unsigned added = 0;

	for_each_eps(e, s) {
		if (!slice_has_port(pq, e, 0))
			continue;
		for (uint32_t i = 0; i < e->n; i++) {
			uint8_t target[DNS_MAX_NAME];
			if (!speaks_for_name(spec, e, i) || target_in_earlier_slice(c, s, spec, pq, e, i, 0))
				continue;
			if (section == DNS_SEC_ADDITIONAL && !entry_name(s, e, i, target))
				continue;
			added += add_entry_addresses(c, w, section, s, spec, e, i,
						     section == DNS_SEC_ADDITIONAL ? target : owner,
						     qtype);
		}
	}
	return added;
}

/* A headless Service's SRV records: one per target and port number; false
 * when the message is truncated. */
static bool add_headless_srv(const struct cluster *c, struct dns_writer *w,
			     const struct cluster_service *s, const struct cluster_spec *spec,
			     const struct cluster_port_query *pq, const uint8_t *owner, uint16_t weight)
{
	const struct cluster_eps *e;

	for_each_eps(e, s) {
		struct cluster_port_walk pw;
		const struct cluster_port *p;
		for (cluster_port_walk_begin(&pw, pq, e->ports, e->n_ports);
		     (p = cluster_port_walk_next_number(&pw));) {
			for (uint32_t i = 0; i < e->n; i++) {
				uint8_t target[DNS_MAX_NAME];
				size_t len;
				if (!speaks_for_name(spec, e, i) || !(len = entry_name(s, e, i, target)) ||
				    target_in_earlier_slice(c, s, spec, pq, e, i, p->port))
					continue;
				if (!add_srv(c, w, owner, weight, p->port, target, len))
					return false;
			}
		}
	}
	return true;
}

/*
 * CoreDNS's SRV answer from the entries pq selects: one record per target
 * and port number, priority 0, weight 100 / the number of entries (at
 * least 1), then the targets' addresses in the additional section. false:
 * none.
 */
static bool add_srv_records(const struct cluster *c, struct dns_writer *w,
			    const struct cluster_service *s, const struct cluster_spec *spec,
			    const uint8_t *owner, const struct cluster_port_query *pq)
{
	unsigned count = count_entries(s, spec, pq);
	uint16_t weight = (uint16_t)(count >= 100 ? 1 : 100 / (count ? count : 1));
	struct cluster_port_walk pw;
	const struct cluster_port *p;

	if (!count)
		return false;
	if (spec->kind == SVC_HEADLESS) {
		if (add_headless_srv(c, w, s, spec, pq, owner, weight))
			add_target_addresses(c, w, DNS_SEC_ADDITIONAL, s, spec, pq, NULL, 0);
		return true;
	}
	for (cluster_port_walk_begin(&pw, pq, spec->ports, spec->n_ports);
	     (p = cluster_port_walk_next_number(&pw));)
		if (!add_srv(c, w, owner, weight, p->port, s->owner, s->h.owner_len))
			return true; /* truncated */
	add_cluster_ips(c, w, DNS_SEC_ADDITIONAL, spec, s->owner, 0);
	return true;
}

/* ---- a Service's own name ------------------------------------------------------------ */

/* A headless Service's serving addresses of qtype, each once, under owner. */
static bool add_headless_addresses(const struct cluster *c, struct dns_writer *w,
				   const struct cluster_service *s, const struct cluster_spec *spec,
				   const uint8_t *owner, uint16_t qtype)
{
	const struct cluster_eps *e;
	bool any = false;

	for_each_eps(e, s) {
		if (family_type(e->family) != qtype)
			continue;
		for (uint32_t i = 0; i < e->n; i++) {
			if (!(e->flags[i] & EP_ADDR_FIRST) ||
			    !(spec->publish_not_ready || (e->flags[i] & EP_ADDR_READY)) ||
			    address_in_earlier_slice(c, s, spec, e, i))
				continue;
			any = true;
			if (!cluster_add_rr(c, w, DNS_SEC_ANSWER, owner, qtype, eps_addr(e, i), e->alen))
				return true; /* truncated */
		}
	}
	return any;
}

/* Whether s has a serving address of this type. */
static bool has_type(const struct cluster_service *s, const struct cluster_spec *spec,
		     uint16_t type)
{
	const struct cluster_eps *e;

	if (spec->kind == SVC_CLUSTER_IP) {
		for (uint8_t i = 0; i < spec->n_ips; i++)
			if (family_type(spec->ips[i].family) == type)
				return true;
		return false;
	}
	for_each_eps(e, s)
		if (family_type(e->family) == type && e->n &&
		    (spec->publish_not_ready || e->n_ready))
			return true;
	return false;
}

/* RFC 8482: ANY gets one RRset, the first the name has (A, AAAA, SRV). */
static uint16_t any_type(const struct cluster_service *s, const struct cluster_spec *spec)
{
	static const struct cluster_port_query every_port;

	if (spec->kind == SVC_EXTERNAL_NAME)
		return DNS_T_CNAME;
	if (has_type(s, spec, DNS_T_A))
		return DNS_T_A;
	if (has_type(s, spec, DNS_T_AAAA))
		return DNS_T_AAAA;
	return count_entries(s, spec, &every_port) ? DNS_T_SRV : 0;
}

bool cluster_service_answer(const struct cluster *c, struct dns_writer *w,
			    const struct cluster_service *s, const struct cluster_spec *spec,
			    const uint8_t *owner, uint16_t qtype)
{
	static const struct cluster_port_query every_port;

	if (qtype == DNS_T_ANY && !(qtype = any_type(s, spec)))
		return false;
	if (spec->kind == SVC_EXTERNAL_NAME) {
		if (qtype != DNS_T_CNAME)
			return false; /* answer.c follows the CNAME */
		cluster_add_rr(c, w, DNS_SEC_ANSWER, owner, DNS_T_CNAME, spec->target, spec->target_len);
		return true;
	}
	if (qtype == DNS_T_SRV)
		return add_srv_records(c, w, s, spec, owner, &every_port);
	if (!is_address(qtype))
		return false;
	if (spec->kind == SVC_CLUSTER_IP)
		return add_cluster_ips(c, w, DNS_SEC_ANSWER, spec, owner, qtype) > 0;
	return add_headless_addresses(c, w, s, spec, owner, qtype);
}

/* ---- names below a Service ------------------------------------------------------------ */

/* The Service whose name is svc, if its name exists now (with its spec in *spec). */
static const struct cluster_service *existing_service(const struct cluster *c, const uint8_t *svc,
						      const struct cluster_spec **spec)
{
	const struct cluster_service *s = cluster_find_service(c, svc, dns_name_len(svc));

	if (!s || !(*spec = spec_of(s)) || !cluster_service_exists(c, s, *spec))
		return NULL;
	return s;
}

/*
 * _<name>._<proto>.<svc> and _<proto>.<svc>: SRV as for the Service's
 * name, of that port only; A and AAAA the targets' addresses (CoreDNS's
 * answer); other types NODATA. A name no entry matches does not exist.
 */
static bool answer_port_name(const struct cluster *c, struct dns_writer *w,
			     const uint8_t *name, uint16_t qtype, const uint8_t *owner)
{
	const uint8_t *svc = name + 1 + name[0];
	struct cluster_port_query pq = {0};
	const struct cluster_service *s;
	const struct cluster_spec *spec;

	if (name[0] < 2 || name[1] != '_')
		return false;
	if (svc[0] >= 2 && svc[1] == '_') {
		pq.name = name;
		pq.proto = svc;
		svc += 1 + svc[0];
	} else {
		pq.proto = name;
		pq.named_only = true;
	}
	if (!(s = existing_service(c, svc, &spec)) || !count_entries(s, spec, &pq))
		return false;
	if (qtype == DNS_T_ANY)
		qtype = DNS_T_SRV;
	if (pq.named_only)
		cluster_add_soa(c, w); /* an empty non-terminal */
	else if (qtype == DNS_T_SRV)
		add_srv_records(c, w, s, spec, owner, &pq);
	else if (!is_address(qtype) ||
		 !(spec->kind == SVC_CLUSTER_IP
			   ? add_cluster_ips(c, w, DNS_SEC_ANSWER, spec, owner, qtype)
			   : add_target_addresses(c, w, DNS_SEC_ANSWER, s, spec, &pq, owner, qtype)))
		cluster_add_soa(c, w);
	return true;
}

/* One address answer for a name that has exactly that address, or NODATA. */
static void answer_one_address(const struct cluster *c, struct dns_writer *w,
			       const struct cluster_ip *ip, const uint8_t *owner, uint16_t qtype)
{
	uint16_t type = family_type(ip->family);

	if (qtype == type || qtype == DNS_T_ANY)
		cluster_add_rr(c, w, DNS_SEC_ANSWER, owner, type, ip->addr,
			       ip->family == AF_INET ? 4 : 16);
	else
		cluster_add_soa(c, w);
}

/*
 * <label>.<svc>: an endpoint of the Service svc (any kind with endpoints),
 * by hostname (every serving address with it) or, without one, by its
 * dashed address. In the clusterset zone <label>.<cluster>.<svc>: an
 * endpoint of a slice from that source cluster.
 */
static bool answer_endpoint_name(const struct cluster *c, struct dns_writer *w,
				 const uint8_t *name, uint16_t qtype, const uint8_t *owner)
{
	const uint8_t *cluster = c->multicluster ? name + 1 + name[0] : NULL;
	const uint8_t *svc = cluster ? cluster + 1 + cluster[0] : name + 1 + name[0];
	const struct cluster_service *s;
	const struct cluster_spec *spec;
	struct cluster_ip ip;

	if (c->noendpoints || (cluster && !cluster[0]) || !(s = existing_service(c, svc, &spec)) ||
	    spec->kind == SVC_EXTERNAL_NAME)
		return false;
	if (hostname_serves(c, s, spec, name, cluster)) {
		unsigned added = 0;
		if (qtype == DNS_T_ANY) /* one RRset: A if the name has one, else AAAA */
			added = add_hostname_addresses(c, w, DNS_SEC_ANSWER, s, spec, name, cluster,
						       owner, DNS_T_A) ?:
				add_hostname_addresses(c, w, DNS_SEC_ANSWER, s, spec, name, cluster,
						       owner, DNS_T_AAAA);
		else if (is_address(qtype))
			added = add_hostname_addresses(c, w, DNS_SEC_ANSWER, s, spec, name, cluster,
						       owner, qtype);
		if (!added)
			cluster_add_soa(c, w);
		return true;
	}
	if (!canonical_dashed_ip(name, &ip) || !dashed_endpoint_exists(c, s, spec, &ip, cluster))
		return false;
	answer_one_address(c, w, &ip, owner, qtype);
	return true;
}

/* <dashed>.<ns>.pod.<zone> in verified mode: an address of a Pod behind an
 * endpoint of a Service in <ns>. */
static bool answer_verified_pod(const struct cluster *c, struct dns_writer *w,
				const uint8_t *name, uint16_t qtype, const uint8_t *owner)
{
	const uint8_t *ns = name + 1 + name[0];
	struct cluster_index_iter it;
	const struct cluster_eps *t;
	struct cluster_ip ip;
	uint32_t j;

	if (c->pods != CONFIG_PODS_VERIFIED || !dns_name_is_subdomain(ns, c->pod_apex) ||
	    dns_name_len(ns) != dns_name_len(c->pod_apex) + 1 + ns[0] || !canonical_dashed_ip(name, &ip))
		return false;
	for (bool ok = cluster_addr_first(c, &ip, &it, &t, &j); ok;
	     ok = cluster_addr_next(c, &it, &t, &j)) {
		const uint8_t *svc_ns = t->svc->owner + 1 + t->svc->owner[0];
		if ((t->flags[j] & EP_POD) && memcmp(svc_ns, ns, 1u + ns[0]) == 0) {
			answer_one_address(c, w, &ip, owner, qtype);
			return true;
		}
	}
	return false;
}

bool cluster_derived_answer(const struct cluster *c, struct dns_writer *w, const uint8_t *name,
			    uint16_t qtype, const uint8_t *owner)
{
	if (!name[0])
		return false;
	return answer_port_name(c, w, name, qtype, owner) ||
	       answer_endpoint_name(c, w, name, qtype, owner) ||
	       answer_verified_pod(c, w, name, qtype, owner);
}

/* ---- reverse names -------------------------------------------------------------------- */

/* A PTR target already written in this answer: the same Service and name. */
struct ptr_seen {
	const struct cluster_service *svc[MAX_PTRS];
	const uint8_t *label[MAX_PTRS]; /* a hostname group's label; NULL: the dashed name */
	unsigned n;
};

static bool seen_before(const struct ptr_seen *seen, const struct cluster_service *s,
			const uint8_t *label)
{
	for (unsigned k = 0; k < seen->n; k++)
		if (seen->svc[k] == s && (seen->label[k] == label ||
					  (seen->label[k] && label &&
					   memcmp(seen->label[k], label, 1u + label[0]) == 0)))
			return true;
	return false;
}

/* The ClusterIPs' PTRs: the Service alone, as CoreDNS answers. */
static bool add_cluster_ip_ptrs(const struct cluster *c, struct dns_writer *w,
				const struct cluster_ip *ip, const uint8_t *owner)
{
	struct cluster_index_iter it;
	struct ptr_seen seen = {.n = 0};

	for (const struct cluster_spec *spec = cluster_vip_first(c, ip, &it); spec;
	     spec = cluster_vip_next(c, &it)) {
		if (!w)
			return true;
		if (seen.n == MAX_PTRS || seen_before(&seen, spec->svc, NULL))
			continue;
		seen.svc[seen.n] = spec->svc;
		seen.label[seen.n++] = NULL;
		if (!cluster_add_rr(c, w, DNS_SEC_ANSWER, owner, DNS_T_PTR, spec->svc->owner,
				    spec->svc->h.owner_len))
			break;
	}
	return seen.n > 0;
}

bool cluster_reverse_answer(const struct cluster *c, struct dns_writer *w,
			    const struct cluster_ip *ip, const uint8_t *owner)
{
	struct ptr_seen seen = {.n = 0};
	struct cluster_index_iter it;
	const struct cluster_eps *t;
	uint32_t j;

	if (add_cluster_ip_ptrs(c, w, ip, owner))
		return true;
	for (bool ok = cluster_addr_first(c, ip, &it, &t, &j); ok && seen.n < MAX_PTRS;
	     ok = cluster_addr_next(c, &it, &t, &j)) {
		const struct cluster_service *s = t->svc;
		const struct cluster_spec *spec = spec_of(s);
		const uint8_t *label =
			j >= t->named ? t->labels + cluster_eps_group_of(t, j)->label : NULL;
		uint8_t target[DNS_MAX_NAME];
		size_t len;
		if (!spec || spec->kind == SVC_EXTERNAL_NAME || !serving(spec, t, j) ||
		    !(len = entry_name(s, t, j, target)) || seen_before(&seen, s, label))
			continue;
		if (!w)
			return true;
		seen.svc[seen.n] = s;
		seen.label[seen.n++] = label;
		if (!cluster_add_rr(c, w, DNS_SEC_ANSWER, owner, DNS_T_PTR, target, len))
			break;
	}
	return seen.n > 0;
}
