/*
 * zone/answer.c — answering one query from a frozen table.
 *
 * Runs on the hot path: reads the table, writes into the caller's writer,
 * allocates nothing. The answer rules are in answer_by_rules: one hash
 * probe per name in its CNAME chain plus one per additional-section
 * target, each record written with name compression. Since the table
 * never changes, what those rules write for a name that is in the table
 * is known when the table is finished: zone_precompile_replies runs them
 * then for each node and the qtypes clients ask most (the node's own
 * types, A and AAAA), and keeps the bytes after the question. A query for
 * one of those is then one probe and one copy (answer_precompiled), the
 * same bytes the rules would write, which is what the unit tests check
 * for every node and type. The rest (other qtypes, ANY, a reply that does
 * not fit the client's limit, names not in the table) go by the rules;
 * their negative answers' SOA is itself encoded once (dns_apex_rr).
 */
#include "zone/internal.h"

#include <string.h>

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
	if (!a || !a->soa)
		return;
	if (a->soa->count == 1)
		dns_response_add_apex_rr(w, DNS_SEC_AUTHORITY, &a->soa_rr);
	else
		add_rrset(w, DNS_SEC_AUTHORITY, a->apex, a->soa);
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

/* The answer rules; n is q's node (NULL: q's name is not in the table). */
static enum zone_result answer_by_rules(const struct zone_table *t, const struct dns_query *q,
					struct dns_writer *w, const struct zone_node *n)
{
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

static size_t reply_size(const struct zone_reply *r)
{
	return sizeof *r + ((r->len + 1u) & ~1u);
}

static const struct zone_reply *precompiled(const struct zone_node *n, uint16_t qtype)
{
	const struct zone_reply *r = n->replies;

	if (!r)
		return NULL;
	for (; r->qtype; r = (const struct zone_reply *)((const uint8_t *)r + reply_size(r)))
		if (r->qtype == qtype)
			return r;
	return NULL;
}

/*
 * q's precompiled reply into w, when there is one and it fits whole (a
 * reply the client's limit cuts goes by the rules, which decide what to
 * leave out exactly as before).
 */
static bool answer_precompiled(const struct zone_node *n, const struct dns_query *q,
			       struct dns_writer *w)
{
	const struct zone_reply *r;

	if (dns_response_owner(w, q) || !(r = precompiled(n, q->qtype)) ||
	    r->len > dns_response_room(w) ||
	    !dns_response_append_raw(w, r->bytes, r->len, r->counts))
		return false;
	dns_response_set_aa(w, true);
	dns_response_set_rcode(w, (enum dns_rcode)r->rcode);
	return true;
}

enum zone_result zone_answer_hashed(const struct zone_table *t, const struct dns_query *q,
				    uint32_t hash, struct dns_writer *w)
{
	const struct zone_node *n = zone_find_hashed(t, q->qname, q->qname_len, hash);

	if (n && answer_precompiled(n, q, w))
		return ZONE_ANSWERED;
	return answer_by_rules(t, q, w, n);
}

enum zone_result zone_answer(const struct zone_table *t, const struct dns_query *q,
			     struct dns_writer *w)
{
	return zone_answer_hashed(t, q, zone_hash_name(q->qname, q->qname_len), w);
}

uint32_t zone_name_hash(const uint8_t *name, size_t len)
{
	return zone_hash_name(name, len);
}

void zone_prefetch_slot(const struct zone_table *t, uint32_t hash)
{
	__builtin_prefetch(&t->slots[hash & t->mask]);
}

/*
 * A node's header, name and first replies: what answering one reads first.
 * malloc aligns nodes to 16 bytes, not to cache lines, so every line the
 * span touches is fetched.
 */
#define NODE_PREFETCH_BYTES 160
#define CACHE_LINE 64

bool zone_prefetch_node(const struct zone_table *t, uint32_t hash)
{
	for (size_t i = hash & t->mask;; i = (i + 1) & t->mask) {
		const struct zone_slot *s = &t->slots[i];
		if (!s->node)
			return false;
		if (s->hash == hash) {
			uintptr_t end = (uintptr_t)s->node + NODE_PREFETCH_BYTES;
			for (uintptr_t line = (uintptr_t)s->node & ~(uintptr_t)(CACHE_LINE - 1);
			     line < end; line += CACHE_LINE)
				__builtin_prefetch((const void *)line);
			return true;
		}
	}
}

bool zone_covers(const struct zone_table *t, const uint8_t *name, size_t len)
{
	return zone_authority_for_len(t, name, len) != NULL;
}

enum zone_result zone_answer_by_rules(const struct zone_table *t, const struct dns_query *q,
				      struct dns_writer *w)
{
	return answer_by_rules(t, q, w, zone_find(t, q->qname, q->qname_len));
}

/* ---- precompiling (zone_builder_finish) ------------------------------------ */

/* The qtypes a node's replies are precompiled for: its own types, then A and AAAA. */
#define PRECOMPILED_QTYPES 16
static size_t precompiled_qtypes(const struct zone_node *n, uint16_t out[PRECOMPILED_QTYPES])
{
	size_t k = 0;

	for (uint16_t i = 0; i < n->n_rrsets && k < PRECOMPILED_QTYPES - 2; i++)
		if (n->rrsets[i].type != 0) /* 0 ends a node's list of replies */
			out[k++] = n->rrsets[i].type;
	for (uint16_t extra = DNS_T_A;; extra = DNS_T_AAAA) {
		bool have = false;
		for (size_t i = 0; i < k; i++)
			have = have || out[i] == extra;
		if (!have)
			out[k++] = extra;
		if (extra == DNS_T_AAAA)
			break;
	}
	return k;
}

/*
 * Run the rules for (n's name, qtype) into r; false when there is nothing
 * to keep (no answer, or one too long for ZONE_REPLY_MAX).
 */
static bool precompile_one(const struct zone_table *t, const struct zone_node *n,
			   uint16_t qtype, struct zone_reply *r)
{
	/* room for this name's question and ZONE_REPLY_MAX bytes after it, no more */
	const size_t limit = DNS_HEADER_LEN + n->name_len + 4 + ZONE_REPLY_MAX;
	uint8_t buf[DNS_HEADER_LEN + DNS_MAX_NAME + 4 + ZONE_REPLY_MAX];
	struct dns_query q = {.question_ok = true, .qtype = qtype, .qclass = DNS_C_IN,
			      .qname_len = n->name_len};
	struct dns_writer w;

	memcpy(q.qname, n->name, n->name_len);
	memcpy(q.qname_orig, n->name, n->name_len);
	dns_response_begin(&w, buf, limit, &q, DNS_R_NOERROR);
	if (answer_by_rules(t, &q, &w, n) != ZONE_ANSWERED || w.truncated)
		return false;
	*r = (struct zone_reply){.qtype = qtype, .len = (uint16_t)(w.len - w.question_end),
				 .rcode = w.rcode};
	memcpy(r->counts, w.count, sizeof r->counts);
	memcpy(r->bytes, buf + w.question_end, r->len);
	return true;
}

size_t zone_precompile_replies(const struct zone_table *t, const struct zone_node *n,
			       uint8_t *out, size_t room)
{
	uint16_t qtypes[PRECOMPILED_QTYPES];
	size_t k = precompiled_qtypes(n, qtypes), used = 0;
	_Alignas(struct zone_reply) uint8_t one[sizeof(struct zone_reply) + ZONE_REPLY_MAX + 1];
	struct zone_reply *r = (struct zone_reply *)one;

	for (size_t i = 0; i < k; i++) {
		if (!precompile_one(t, n, qtypes[i], r) || used + reply_size(r) > room)
			continue;
		memcpy(out + used, r, reply_size(r));
		used += reply_size(r);
	}
	if (used == 0 || used + sizeof *r > room)
		return 0;
	memset(out + used, 0, sizeof *r); /* qtype 0 ends the list */
	return used + sizeof *r;
}
