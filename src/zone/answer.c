/*
 * zone/answer.c — answering one query from a frozen table.
 *
 * Runs on the hot path: reads the table, writes into the caller's writer,
 * allocates nothing. A query costs one hash probe per name in its CNAME
 * chain plus one per additional-section target.
 */
#include "zone/internal.h"

#define MAX_CNAME_HOPS 8

static const struct zone_node *lookup(const struct zone_table *t, const uint8_t *name)
{
	return zone_find(t, name, dns_name_len(name));
}

static void add_rrset(struct dns_writer *w, enum dns_section section,
		      const uint8_t *owner, const struct zone_rrset *s)
{
	for (uint16_t i = 0; i < s->count; i++)
		if (!dns_response_add_rr(w, section, owner, s->type, DNS_C_IN, s->ttl,
					 s->rdata[i]->data, s->rdata[i]->len))
			return;
}

/* Negative answers carry the zone's SOA so resolvers can cache them (RFC 2308). */
static void add_authority_soa(struct dns_writer *w, const struct zone_authority *a)
{
	if (a && a->soa)
		add_rrset(w, DNS_SEC_AUTHORITY, a->apex_node->name, a->soa);
}

static void add_soa(const struct zone_table *t, struct dns_writer *w, const uint8_t *name)
{
	add_authority_soa(w, zone_authority_for(t, name));
}

/* Addresses of SRV and MX targets we hold, so clients skip a round trip. */
static void add_target_addresses(const struct zone_table *t, struct dns_writer *w,
				 const struct zone_rrset *s)
{
	size_t skip = s->type == DNS_T_SRV ? 6 : s->type == DNS_T_MX ? 2 : 0;

	if (!skip)
		return;
	for (uint16_t i = 0; i < s->count; i++) {
		const struct zone_node *target = lookup(t, s->rdata[i]->data + skip);
		if (!target)
			continue;
		for (uint16_t j = 0; j < target->n_rrsets; j++) {
			const struct zone_rrset *addr = &target->rrsets[j];
			if (addr->type == DNS_T_A || addr->type == DNS_T_AAAA)
				add_rrset(w, DNS_SEC_ADDITIONAL, target->name, addr);
		}
	}
}

/* RFC 8482: ANY gets one RRset, the first we hold, instead of everything. */
static const struct zone_rrset *pick_rrset(const struct zone_node *n, uint16_t qtype)
{
	if (qtype == DNS_T_ANY)
		return n->n_rrsets ? &n->rrsets[0] : NULL;
	return zone_node_rrset(n, qtype);
}

enum zone_result zone_answer(const struct zone_table *t, const struct dns_query *q,
			     struct dns_writer *w)
{
	const struct zone_node *n = zone_find(t, q->qname, q->qname_len);
	const uint8_t *owner = dns_response_owner(w, q); /* NULL: the question, in client case */
	const uint8_t *name = q->qname;

	if (!n) {
		const struct zone_authority *a = zone_authority_for_len(t, q->qname, q->qname_len);
		if (!a)
			return ZONE_NOT_LOCAL;
		dns_response_set_aa(w, true);
		dns_response_set_rcode(w, DNS_R_NXDOMAIN);
		add_authority_soa(w, a);
		return ZONE_ANSWERED;
	}
	dns_response_set_aa(w, true);
	for (int hop = 0; hop < MAX_CNAME_HOPS; hop++) {
		const struct zone_rrset *s = pick_rrset(n, q->qtype);
		if (s) {
			add_rrset(w, DNS_SEC_ANSWER, owner, s);
			add_target_addresses(t, w, s);
			return ZONE_ANSWERED;
		}
		const struct zone_rrset *cname = zone_node_rrset(n, DNS_T_CNAME);
		if (!cname) {
			add_soa(t, w, name); /* NODATA */
			return ZONE_ANSWERED;
		}
		add_rrset(w, DNS_SEC_ANSWER, owner, cname);
		owner = name = cname->rdata[0]->data;
		n = lookup(t, name);
		if (!n) {
			/* RFC 6604: the rcode speaks for the last name in the chain. */
			if (zone_authority_for(t, name)) {
				dns_response_set_rcode(w, DNS_R_NXDOMAIN);
				add_soa(t, w, name);
			}
			return ZONE_ANSWERED;
		}
	}
	return ZONE_ANSWERED; /* a loop of local CNAMEs: what fits the hop limit */
}
