/*
 * zone/table.c — building and freezing the local record table.
 *
 * The builder and the table are the same structure: an open-addressing hash
 * of nodes (owner name -> RRsets). Building grows it freely; finishing adds
 * the empty non-terminals under each authoritative apex and then the table
 * is never written again, which is what lets workers read it without a lock.
 *
 * Duplicate records are dropped with a linear scan of their RRset: RRsets of
 * local data are small (a handful of addresses), so O(n) per insert is fine;
 * a headless Service with thousands of endpoints would want a better plan,
 * and the cluster table (a separate structure) is where that lives.
 */
#include "zone/internal.h"

#include "dns/wire.h"

#include <stdlib.h>
#include <string.h>

#define INITIAL_SLOTS 64

struct zone_builder *zone_builder_new(void)
{
	struct zone_table *t = calloc(1, sizeof *t);

	if (!t)
		return NULL;
	t->slots = calloc(INITIAL_SLOTS, sizeof *t->slots);
	if (!t->slots) {
		free(t);
		return NULL;
	}
	t->mask = INITIAL_SLOTS - 1;
	return (struct zone_builder *)t;
}

static void free_node(struct zone_node *n)
{
	for (uint16_t i = 0; i < n->n_rrsets; i++) {
		for (uint16_t j = 0; j < n->rrsets[i].count; j++)
			free(n->rrsets[i].rdata[j]);
		free(n->rrsets[i].rdata);
	}
	free(n->rrsets);
	free(n);
}

void zone_table_free(struct zone_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i <= t->mask; i++)
		if (t->slots[i].node)
			free_node(t->slots[i].node);
	free(t->slots);
	free(t->authorities);
	free(t);
}

void zone_builder_free(struct zone_builder *b)
{
	zone_table_free((struct zone_table *)b);
}

size_t zone_table_size(const struct zone_table *t)
{
	return t->n_nodes - t->n_empty;
}

static int grow_slots(struct zone_table *t)
{
	size_t n = (t->mask + 1) * 2;
	struct zone_slot *slots = calloc(n, sizeof *slots);

	if (!slots)
		return -1;
	for (size_t i = 0; i <= t->mask; i++) {
		struct zone_slot s = t->slots[i];
		if (!s.node)
			continue;
		size_t j = s.hash & (n - 1);
		while (slots[j].node)
			j = (j + 1) & (n - 1);
		slots[j] = s;
	}
	free(t->slots);
	t->slots = slots;
	t->mask = n - 1;
	return 0;
}

/* Find or create the node for name; NULL only on ENOMEM. */
static struct zone_node *node_for(struct zone_table *t, const uint8_t *name)
{
	size_t len = dns_name_len(name);
	struct zone_node *n = (struct zone_node *)zone_find(t, name, len);

	if (n)
		return n;
	if ((t->n_nodes + 1) * 2 > t->mask + 1 && grow_slots(t) < 0)
		return NULL;
	n = calloc(1, sizeof *n + len);
	if (!n)
		return NULL;
	memcpy(n->name, name, len);
	n->name_len = (uint16_t)len;
	uint32_t h = zone_hash_name(name, len);
	size_t i = h & t->mask;
	while (t->slots[i].node)
		i = (i + 1) & t->mask;
	t->slots[i] = (struct zone_slot){.hash = h, .node = n};
	t->n_nodes++;
	return n;
}

static struct zone_rrset *rrset_for(struct zone_node *n, uint16_t type)
{
	struct zone_rrset *s = (struct zone_rrset *)zone_node_rrset(n, type);

	if (s)
		return s;
	s = realloc(n->rrsets, (n->n_rrsets + 1) * sizeof *s);
	if (!s)
		return NULL;
	n->rrsets = s;
	s = &n->rrsets[n->n_rrsets++];
	*s = (struct zone_rrset){.type = type, .ttl = UINT32_MAX};
	return s;
}

static bool rrset_has(const struct zone_rrset *s, const uint8_t *rdata, uint16_t len)
{
	for (uint16_t i = 0; i < s->count; i++)
		if (s->rdata[i]->len == len && memcmp(s->rdata[i]->data, rdata, len) == 0)
			return true;
	return false;
}

static int rrset_append(struct zone_rrset *s, const uint8_t *rdata, uint16_t len)
{
	struct zone_rdata **v, *rd;

	if (s->count == UINT16_MAX)
		return -1;
	v = realloc(s->rdata, (s->count + 1u) * sizeof *v);
	if (!v)
		return -1;
	s->rdata = v;
	rd = malloc(sizeof *rd + len);
	if (!rd)
		return -1;
	rd->len = len;
	memcpy(rd->data, rdata, len);
	s->rdata[s->count++] = rd;
	return 0;
}

static bool name_fills(const uint8_t *rdata, size_t avail, size_t *used)
{
	size_t i = 0;

	while (i < avail && rdata[i] != 0) {
		if (rdata[i] > DNS_MAX_LABEL)
			return false;
		i += 1u + rdata[i];
	}
	if (i >= avail || i + 1 > DNS_MAX_NAME)
		return false;
	*used = i + 1;
	return true;
}

/* Is rdata the wire shape its type requires? Names must be uncompressed. */
static bool rdata_well_formed(uint16_t type, const uint8_t *rdata, uint16_t len)
{
	size_t used = 0, used2 = 0;

	switch (type) {
	case DNS_T_A:
		return len == 4;
	case DNS_T_AAAA:
		return len == 16;
	case DNS_T_NS:
	case DNS_T_CNAME:
	case DNS_T_PTR:
		return name_fills(rdata, len, &used) && used == len;
	case DNS_T_MX:
		return len > 2 && name_fills(rdata + 2, len - 2u, &used) && used + 2 == len;
	case DNS_T_SRV:
		return len > 6 && name_fills(rdata + 6, len - 6u, &used) && used + 6 == len;
	case DNS_T_SOA:
		return name_fills(rdata, len, &used) &&
		       name_fills(rdata + used, len - used, &used2) &&
		       used + used2 + 20 == len;
	case DNS_T_TXT:
		for (size_t i = 0; i < len; i += 1u + rdata[i])
			if (i + 1u + rdata[i] > len)
				return false;
		return len > 0;
	default:
		return true;
	}
}

int zone_builder_add_rr(struct zone_builder *b, const uint8_t *owner,
			uint16_t type, uint32_t ttl, const uint8_t *rdata,
			uint16_t rdlen, const char **why)
{
	struct zone_table *t = (struct zone_table *)b;
	struct zone_node *n;
	struct zone_rrset *s;

	if (type == DNS_T_OPT || type == DNS_T_ANY || type == DNS_T_AXFR ||
	    type == DNS_T_IXFR) {
		*why = "record type cannot be stored";
		return -1;
	}
	if (!rdata_well_formed(type, rdata, rdlen)) {
		*why = "record data does not match its type";
		return -1;
	}
	n = node_for(t, owner);
	if (!n)
		goto nomem;
	bool has_cname = zone_node_rrset(n, DNS_T_CNAME) != NULL;
	if (type == DNS_T_CNAME ? (n->n_rrsets > 0) : has_cname) {
		/* RFC 1034 3.6.2: a CNAME owner has no other data (and one CNAME). */
		*why = "a CNAME cannot share its name with other records";
		return -1;
	}
	s = rrset_for(n, type);
	if (!s)
		goto nomem;
	if (rrset_has(s, rdata, rdlen))
		return 0;
	if (rrset_append(s, rdata, rdlen) < 0)
		goto nomem;
	/* RFC 2181 5.2: one TTL per RRset; the smallest given wins. */
	if (ttl < s->ttl)
		s->ttl = ttl;
	return 0;
nomem:
	*why = "out of memory";
	return -1;
}

static size_t write_name_prefixed(uint8_t *out, const char *label1,
				  const char *label2, const uint8_t *apex)
{
	size_t n = 0;

	for (const char *l = label1; l; l = (l == label1 ? label2 : NULL)) {
		size_t len = strlen(l);
		out[n++] = (uint8_t)len;
		memcpy(out + n, l, len);
		n += len;
	}
	size_t alen = dns_name_len(apex);
	memcpy(out + n, apex, alen);
	return n + alen;
}

size_t zone_soa_rdata(const uint8_t *apex, uint32_t serial, uint32_t minimum,
		      uint8_t out[ZONE_SOA_RDATA_MAX])
{
	/* ns.dns.<apex> / hostmaster.<apex>: CoreDNS's shape, so tools agree. */
	if (dns_name_len(apex) + 11 > DNS_MAX_NAME)
		return 0;
	size_t mlen = write_name_prefixed(out, "ns", "dns", apex);
	size_t rlen = write_name_prefixed(out + mlen, "hostmaster", NULL, apex);
	uint8_t *p = out + mlen + rlen;
	dns_put32(p, serial);
	dns_put32(p + 4, 7200);   /* refresh */
	dns_put32(p + 8, 1800);   /* retry */
	dns_put32(p + 12, 86400); /* expire */
	dns_put32(p + 16, minimum);
	return mlen + rlen + 20;
}

size_t zone_ns_rdata(const uint8_t *apex, uint8_t out[DNS_MAX_NAME])
{
	if (dns_name_len(apex) + 7 > DNS_MAX_NAME)
		return 0;
	return write_name_prefixed(out, "ns", "dns", apex);
}

int zone_builder_add_authority(struct zone_builder *b, const uint8_t *apex,
			       uint32_t ttl, uint32_t serial, const char **why)
{
	struct zone_table *t = (struct zone_table *)b;
	uint8_t soa[ZONE_SOA_RDATA_MAX], ns[DNS_MAX_NAME];
	size_t apex_len = dns_name_len(apex);
	/* minimum = ttl: negative answers live as long as positive ones */
	size_t soa_len = zone_soa_rdata(apex, serial, ttl, soa);
	size_t ns_len = zone_ns_rdata(apex, ns);

	if (!soa_len || !ns_len) {
		*why = "zone name too long for its SOA names";
		return -1;
	}
	struct zone_authority *v =
		realloc(t->authorities, (t->n_authorities + 1) * sizeof *v);
	if (!v) {
		*why = "out of memory";
		return -1;
	}
	t->authorities = v;
	v[t->n_authorities] = (struct zone_authority){.apex_len = (uint16_t)apex_len};
	memcpy(v[t->n_authorities].apex, apex, apex_len);
	t->n_authorities++;

	if (zone_builder_add_rr(b, apex, DNS_T_SOA, ttl, soa, (uint16_t)soa_len, why) < 0)
		return -1;
	return zone_builder_add_rr(b, apex, DNS_T_NS, ttl, ns, (uint16_t)ns_len, why);
}

/*
 * Every name between an owner and its authoritative apex must exist (as an
 * empty non-terminal) so that it answers NODATA, not NXDOMAIN (RFC 8020).
 */
static int add_empty_non_terminals(struct zone_table *t)
{
	size_t n_slots = t->mask + 1;
	struct zone_node **owners = malloc(t->n_nodes * sizeof *owners);
	size_t n_owners = 0;

	if (!owners)
		return -1;
	for (size_t i = 0; i < n_slots; i++)
		if (t->slots[i].node)
			owners[n_owners++] = t->slots[i].node;
	for (size_t i = 0; i < n_owners; i++) {
		const struct zone_authority *a = zone_authority_for(t, owners[i]->name);
		if (!a)
			continue;
		const uint8_t *name = owners[i]->name;
		size_t depth = owners[i]->name_len - a->apex_len;
		for (size_t off = 0; off < depth;) {
			off += 1u + name[off];
			if (off >= depth)
				break;
			struct zone_node *before = (struct zone_node *)zone_find(
				t, name + off, owners[i]->name_len - off);
			if (before)
				continue;
			if (!node_for(t, name + off)) {
				free(owners);
				return -1;
			}
			t->n_empty++;
		}
	}
	free(owners);
	return 0;
}

/* Room for one node's precompiled replies: every qtype at its longest. */
#define NODE_REPLIES_MAX (16 * (sizeof(struct zone_reply) + ZONE_REPLY_MAX + 1) + \
			  sizeof(struct zone_reply))

/*
 * Each node again, in one piece with its precompiled replies after its
 * name (answer.c says what they are). The rules that write them look
 * nodes up through the slots, so each slot takes its new node at once.
 */
static int precompile_replies(struct zone_table *t)
{
	uint8_t *scratch = malloc(NODE_REPLIES_MAX);

	if (!scratch)
		return -1;
	for (size_t i = 0; i <= t->mask; i++) {
		struct zone_node *n = t->slots[i].node;
		if (!n)
			continue;
		size_t used = zone_precompile_replies(t, n, scratch, NODE_REPLIES_MAX);
		if (!used)
			continue;
		size_t at = sizeof *n + n->name_len;
		at = (at + _Alignof(struct zone_reply) - 1) & ~(_Alignof(struct zone_reply) - 1);
		struct zone_node *m = malloc(at + used);
		if (!m) {
			free(scratch);
			return -1;
		}
		memcpy(m, n, sizeof *n + n->name_len);
		memcpy((uint8_t *)m + at, scratch, used);
		m->replies = (const struct zone_reply *)((const uint8_t *)m + at);
		t->slots[i].node = m;
		free(n); /* its RRsets are m's now */
	}
	free(scratch);
	return 0;
}

struct zone_table *zone_builder_finish(struct zone_builder *b)
{
	struct zone_table *t = (struct zone_table *)b;

	if (add_empty_non_terminals(t) < 0) {
		zone_table_free(t);
		return NULL;
	}
	for (size_t i = 0; i < t->n_authorities; i++) {
		struct zone_authority *a = &t->authorities[i];
		const struct zone_node *apex = zone_find(t, a->apex, a->apex_len);
		a->soa = apex ? zone_node_rrset(apex, DNS_T_SOA) : NULL;
		if (a->soa && a->soa->count == 1)
			dns_apex_rr_build(&a->soa_rr, a->apex, DNS_T_SOA, a->soa->ttl,
					  a->soa->rdata[0]->data, a->soa->rdata[0]->len);
	}
	if (precompile_replies(t) < 0) {
		zone_table_free(t);
		return NULL;
	}
	return t;
}
