/*
 * mesh/answer.c — answering a question from the host table, as Istio's DNS
 * proxy answers from its name table (mesh.h has the rules).
 *
 * Runs on the hot path under the caller's RCU read lock: hash lookups (the
 * name itself, then the wildcards of its ancestors, closest first, only
 * for label counts some host has) and writes into the caller's writer; no
 * allocation, no lock. For the host found, the entries the client sees
 * are those exported to its namespace; of them, its own namespace's, else
 * the oldest's namespace's; their addresses, each written once, are the
 * answer. Nothing is written until the answer is known to be the mesh's.
 */
#include "mesh/internal.h"

#include <string.h>

#include "util/tsan.h"

static bool same_label(const uint8_t *a, const uint8_t *b)
{
	return a[0] == b[0] && memcmp(a + 1, b + 1, a[0]) == 0;
}

static bool visible(const struct mesh_entry *e, const uint8_t *client_ns)
{
	if (e->export_flags & EXPORT_ALL)
		return true;
	if (!client_ns)
		return false;
	if ((e->export_flags & EXPORT_SELF) && same_label(e->ns, client_ns))
		return true;
	const uint8_t *l = e->exports;
	for (uint8_t i = 0; i < e->n_export; i++, l += 1 + *l)
		if (same_label(l, client_ns))
			return true;
	return false;
}

/* The addresses of e for host h of family (AF_INET, AF_INET6): where they start, how many. */
static uint32_t addresses_of(const struct mesh_entry *e, const struct mesh_host *h, int family,
			     const uint8_t **at)
{
	if (e->kind == KIND_ALLOCATED) {
		for (uint16_t i = 0; i < e->n_hosts; i++) {
			if (e->hosts[i] != h)
				continue;
			const struct mesh_allocated *a = &e->allocated[i];
			*at = family == AF_INET ? a->v4 : a->v6;
			return (a->has & (family == AF_INET ? 1 : 2)) ? 1 : 0;
		}
		return 0;
	}
	if (e->kind == KIND_UPSTREAM)
		return 0;
	*at = family == AF_INET ? e->addrs : e->addrs + (size_t)e->n4 * 4;
	return family == AF_INET ? e->n4 : e->n6;
}

/* What a client sees of a host: the entries of the namespace chosen for it. */
struct view {
	const struct mesh_host *h;
	struct mesh_def_list defs;
	const uint8_t *ns;           /* the chosen namespace; NULL: none visible */
	const uint8_t *client_ns;
};

static const uint8_t *client_namespace(struct mesh_client *c)
{
	if (!c->looked) {
		c->ns = c->namespace_of ? c->namespace_of(c->ctx) : NULL;
		c->looked = true;
	}
	return c->ns;
}

static bool counts(const struct view *v, const struct mesh_entry *e)
{
	return same_label(e->ns, v->ns) && visible(e, v->client_ns);
}

/* Own namespace first, then the oldest visible entry's (defs are oldest first). */
static bool choose(const struct mesh_host *h, struct mesh_client *client, struct view *v)
{
	const uint8_t *client_ns = client_namespace(client);

	v->h = h;
	v->client_ns = client_ns;
	v->ns = NULL;
	mesh_defs_of(h, &v->defs);
	for (uint32_t i = 0; i < v->defs.n; i++) {
		const struct mesh_entry *e = v->defs.e[i];
		if (!visible(e, client_ns))
			continue;
		if (client_ns && same_label(e->ns, client_ns)) {
			v->ns = e->ns;
			break;
		}
		if (!v->ns)
			v->ns = e->ns;
	}
	return v->ns != NULL;
}

/* Address j of entry i was already given by an earlier entry of the view. */
static bool given_before(const struct view *v, uint32_t i, const uint8_t *addr, int family)
{
	size_t alen = family == AF_INET ? 4 : 16;

	for (uint32_t k = 0; k < i; k++) {
		const uint8_t *at;
		uint32_t n;
		if (!counts(v, v->defs.e[k]))
			continue;
		n = addresses_of(v->defs.e[k], v->h, family, &at);
		for (uint32_t j = 0; j < n; j++)
			if (memcmp(at + j * alen, addr, alen) == 0)
				return true;
	}
	return false;
}

/* How many addresses of family the view has (0 past the first when only is set). */
static uint32_t count_family(const struct view *v, int family, bool only)
{
	uint32_t total = 0;

	for (uint32_t i = 0; i < v->defs.n; i++) {
		const uint8_t *at;
		if (counts(v, v->defs.e[i]))
			total += addresses_of(v->defs.e[i], v->h, family, &at);
		if (only && total)
			return total;
	}
	return total;
}

/* The view's addresses of family under owner (NULL: the question). */
static void add_addresses(const struct mesh *m, struct dns_writer *w, const struct view *v,
			  int family, const uint8_t *owner)
{
	uint16_t type = family == AF_INET ? DNS_T_A : DNS_T_AAAA;
	size_t alen = family == AF_INET ? 4 : 16;

	for (uint32_t i = 0; i < v->defs.n; i++) {
		const struct mesh_entry *e = v->defs.e[i];
		const uint8_t *at;
		uint32_t n;
		if (!counts(v, e))
			continue;
		n = addresses_of(e, v->h, family, &at);
		for (uint32_t j = 0; j < n; j++) {
			if (i && given_before(v, i, at + j * alen, family))
				continue;
			if (!dns_response_add_rr(w, DNS_SEC_ANSWER, owner, type, DNS_C_IN, m->ttl,
						 at + j * alen, (uint16_t)alen))
				return; /* truncated */
		}
	}
}

static unsigned name_labels(const uint8_t *name)
{
	unsigned n = 0;

	for (; *name && n < 63; name += 1 + *name)
		n++;
	return n;
}

/* The view of an exact host of this name, if the client sees one with an address. */
static bool find_exact(const struct mesh *m, const uint8_t *name, size_t len, unsigned labels,
		       struct mesh_client *client, struct view *v)
{
	uint64_t mask = atomic_load_explicit(&m->exact_labels, memory_order_acquire);
	const struct mesh_host *h;

	if (!(mask & (1ull << labels)) || !(h = mesh_find_host(m, name, len)))
		return false;
	return choose(h, client, v) && (count_family(v, AF_INET, true) ||
					count_family(v, AF_INET6, true));
}

/* The closest wildcard above name the client sees with an address. */
static bool find_wildcard(const struct mesh *m, const uint8_t *name, unsigned labels,
			  struct mesh_client *client, struct view *v)
{
	uint64_t mask = atomic_load_explicit(&m->wild_labels, memory_order_acquire);
	uint8_t wild[DNS_MAX_NAME + 2] = {1, '*'};
	const uint8_t *parent = name;

	/* *.<parent> has as many labels as name when parent is name's parent */
	for (unsigned n = labels; mask && *parent; n--) {
		parent += 1 + *parent;
		if (!(mask & (1ull << (n > 63 ? 63 : n))))
			continue;
		size_t plen = dns_name_len(parent);
		const struct mesh_host *h;
		memcpy(wild + 2, parent, plen);
		if ((h = mesh_find_host(m, wild, plen + 2)) && choose(h, client, v) &&
		    (count_family(v, AF_INET, true) || count_family(v, AF_INET6, true)))
			return true;
	}
	return false;
}

static bool find(const struct mesh *m, const uint8_t *name, size_t len,
		 struct mesh_client *client, struct view *v)
{
	unsigned labels = name_labels(name);

	return find_exact(m, name, len, labels, client, v) ||
	       find_wildcard(m, name, labels, client, v);
}

/* Istio makes no alias for a host already under the search domain. */
static bool ends_with(const uint8_t *name, const uint8_t *suffix, size_t len)
{
	for (const uint8_t *p = name; *p; p += 1 + *p)
		if (dns_name_len(p) == len && memcmp(p, suffix, len) == 0)
			return true;
	return false;
}

static int family_of(uint16_t qtype)
{
	return qtype == DNS_T_A ? AF_INET : qtype == DNS_T_AAAA ? AF_INET6 : 0;
}

enum mesh_result mesh_answer(const struct mesh *m, const struct dns_query *q,
			     struct mesh_client *client, bool rewind, struct dns_writer *w)
{
	int family = family_of(q->qtype);
	struct view v;

	if (!family || !find(m, q->qname, q->qname_len, client, &v)) {
		TSAN_GRACE_RELEASE();
		return MESH_NOT_LOCAL;
	}
	if (rewind)
		dns_response_rewind(w);
	dns_response_set_aa(w, true);
	add_addresses(m, w, &v, family, dns_response_owner(w, q));
	TSAN_GRACE_RELEASE(); /* done with the host and its entries */
	return MESH_ANSWERED;
}

enum mesh_result mesh_answer_alias(const struct mesh *m, const struct dns_query *q,
				   size_t base_len, struct mesh_client *client,
				   struct dns_writer *w)
{
	int family = family_of(q->qtype);
	uint8_t host[DNS_MAX_NAME];
	const uint8_t *search = q->qname + base_len; /* <ns>.svc.<zone> */
	size_t search_len = q->qname_len - base_len;
	struct view v;

	if (!family || !base_len || base_len + 1 > DNS_MAX_NAME)
		return MESH_NOT_LOCAL;
	memcpy(host, q->qname, base_len);
	host[base_len] = 0;
	if (ends_with(host, search, search_len) || !find(m, host, base_len + 1, client, &v)) {
		TSAN_GRACE_RELEASE();
		return MESH_NOT_LOCAL;
	}
	dns_response_rewind(w);
	dns_response_set_aa(w, true);
	if (count_family(&v, family, true)) {
		dns_response_add_rr(w, DNS_SEC_ANSWER, dns_response_owner(w, q), DNS_T_CNAME, DNS_C_IN,
				    m->ttl, host, (uint16_t)(base_len + 1));
		add_addresses(m, w, &v, family, host);
	}
	TSAN_GRACE_RELEASE();
	return MESH_ANSWERED;
}
