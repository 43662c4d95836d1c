/*
 * zone/internal.h — the table's layout, shared by table.c (building) and
 * answer.c (reading). Nothing outside src/zone/ includes this but its unit
 * tests (tests/unit/test_zone.c).
 */
#ifndef LOCALDNS_ZONE_INTERNAL_H
#define LOCALDNS_ZONE_INTERNAL_H

#include "zone/zone.h"

#include <stdbool.h>
#include <string.h>

struct zone_rdata {
	uint16_t len;
	uint8_t data[];
};

struct zone_rrset {
	uint16_t type;
	uint16_t count;
	uint32_t ttl;
	struct zone_rdata **rdata;
};

/*
 * A reply precompiled when the table is finished (answer.c): the records
 * zone_answer writes after the question for its node's name and qtype,
 * compression pointers as they land with the question at DNS_HEADER_LEN.
 * A node's replies follow its name, one after the other (each padded to
 * an even length), up to one with qtype 0.
 */
struct zone_reply {
	uint16_t qtype;
	uint16_t len;       /* bytes */
	uint16_t counts[3]; /* records per section */
	uint16_t rcode;
	uint8_t bytes[];
};

/* Replies longer than this are not precompiled (answered as they are asked). */
#define ZONE_REPLY_MAX 1232

/*
 * answer.c: n's precompiled replies (struct zone_reply, the list ended by
 * qtype 0) into out (room bytes, aligned for struct zone_reply), run by
 * the answer rules against t, which must be complete but for the replies.
 * Returns the bytes used; 0 when there is nothing to keep.
 */
struct zone_node;
size_t zone_precompile_replies(const struct zone_table *t, const struct zone_node *n,
			       uint8_t *out, size_t room);

/*
 * answer.c: q answered by the rules alone, never from a precompiled reply:
 * what every precompiled reply must equal (the unit tests compare them).
 */
enum zone_result zone_answer_by_rules(const struct zone_table *t, const struct dns_query *q,
				      struct dns_writer *w);

/* An owner name; an empty non-terminal is a node with no RRsets. */
struct zone_node {
	uint16_t name_len;
	uint16_t n_rrsets;
	struct zone_rrset *rrsets;
	const struct zone_reply *replies; /* after name; NULL in a builder */
	uint8_t name[]; /* lower-cased wire form */
};

/* The hash is kept beside the pointer so a probe rarely touches a node. */
struct zone_slot {
	uint32_t hash;
	struct zone_node *node;
};

struct zone_authority {
	uint16_t apex_len;
	uint8_t apex[DNS_MAX_NAME];
	/* The apex's SOA, found once when the table is finished: every negative
	 * answer carries it (soa_rr, encoded once, when it is one record). NULL
	 * in a builder. */
	const struct zone_rrset *soa;
	struct dns_apex_rr soa_rr;
};

struct zone_table {
	struct zone_slot *slots;
	size_t mask; /* slots - 1; slots is a power of two, at most half full */
	size_t n_nodes;
	size_t n_empty;
	struct zone_authority *authorities;
	size_t n_authorities;
};

/*
 * The table's hash of a lower-cased wire name, eight bytes at a time (the
 * last eight may overlap the ones before; the length is mixed in first, so
 * that does not make two names equal), then a 64-bit finaliser
 * (MurmurHash3's fmix64) for an even spread. The keys are the operator's
 * names and the table is at most half full, so a client choosing query
 * names can only pick which slot it starts at, not lengthen a probe: no
 * secret key is needed, unlike the cache's and the cluster table's. It
 * replaced byte-at-a-time FNV-1a, a tenth of a static answer's instructions.
 */
static inline uint32_t zone_hash_name(const uint8_t *name, size_t len)
{
	const uint64_t k = 0x9e3779b97f4a7c15ull;
	uint64_t h = (uint64_t)len * k, w;

	if (len >= 8) {
		for (size_t i = 0; i + 8 < len; i += 8) {
			memcpy(&w, name + i, 8);
			h = (h ^ w) * k;
			h ^= h >> 32;
		}
		memcpy(&w, name + len - 8, 8);
	} else {
		w = 0;
		for (size_t i = 0; i < len; i++)
			w |= (uint64_t)name[i] << (8 * i);
	}
	h = (h ^ w) * k;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return (uint32_t)h;
}

static inline const struct zone_node *zone_find_hashed(const struct zone_table *t,
						       const uint8_t *name, size_t len,
						       uint32_t h)
{
	for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
		const struct zone_slot *s = &t->slots[i];
		if (!s->node)
			return NULL;
		if (s->hash == h && s->node->name_len == len &&
		    memcmp(s->node->name, name, len) == 0)
			return s->node;
	}
}

static inline const struct zone_node *zone_find(const struct zone_table *t,
						const uint8_t *name, size_t len)
{
	return zone_find_hashed(t, name, len, zone_hash_name(name, len));
}

static inline const struct zone_rrset *zone_node_rrset(const struct zone_node *n,
						       uint16_t type)
{
	for (uint16_t i = 0; i < n->n_rrsets; i++)
		if (n->rrsets[i].type == type)
			return &n->rrsets[i];
	return NULL;
}

/*
 * Is name (len bytes) apex or below it? The last bytes are compared first,
 * which settles it for almost every name that is not (every external name
 * a client asks for passes here); only then is the apex's start checked to
 * be a label boundary ("xcluster.local" is not under "cluster.local").
 */
static inline bool zone_name_under(const uint8_t *name, size_t len,
				   const struct zone_authority *a)
{
	size_t start = len - a->apex_len, pos = 0;

	if (a->apex_len > len || memcmp(name + start, a->apex, a->apex_len) != 0)
		return false;
	while (pos < start)
		pos += 1u + name[pos];
	return pos == start;
}

/* The deepest authoritative zone holding name (len bytes), or NULL. */
static inline const struct zone_authority *
zone_authority_for_len(const struct zone_table *t, const uint8_t *name, size_t len)
{
	const struct zone_authority *best = NULL;

	for (size_t i = 0; i < t->n_authorities; i++) {
		const struct zone_authority *a = &t->authorities[i];
		if ((!best || a->apex_len > best->apex_len) && zone_name_under(name, len, a))
			best = a;
	}
	return best;
}

static inline const struct zone_authority *
zone_authority_for(const struct zone_table *t, const uint8_t *name)
{
	return zone_authority_for_len(t, name, dns_name_len(name));
}

#endif
