/*
 * cluster/ports.c — a port list (a Service's spec, an EndpointSlice) and
 * which of its ports a name selects.
 *
 * A list is sorted by number, so one number's ports are adjacent. Past
 * CLUSTER_PORT_INDEX_MIN ports it is followed, in the snapshot's one
 * allocation, by its name index: the list's positions sorted by protocol,
 * name and position, where _<name>._<proto> and _<proto> find their ports
 * by binary search instead of walking every port (a Service may have a
 * thousand). The writer sorts and indexes a list once, when it makes the
 * snapshot (parse.c); readers (service.c) only search it: no allocation,
 * no lock. Short lists, the common case, have no index and pay nothing for
 * it: walking three ports is as quick as searching them.
 */
#include "cluster/internal.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

/* A list's index, or NULL when it has none. */
static const uint16_t *index_of(const struct cluster_port *ports, size_t n)
{
	return n > CLUSTER_PORT_INDEX_MIN ? (const uint16_t *)(ports + n) : NULL;
}

size_t cluster_ports_bytes(size_t n)
{
	return n * sizeof(struct cluster_port) + (n > CLUSTER_PORT_INDEX_MIN ? n * sizeof(uint16_t) : 0);
}

/* ---- the writer --------------------------------------------------------------- */

static int compare_numbers(const void *a, const void *b)
{
	const struct cluster_port *x = a, *y = b;
	int d;

	if (x->port != y->port)
		return (int)x->port - (int)y->port;
	if ((d = memcmp(x->proto, y->proto, sizeof x->proto)) != 0)
		return d;
	return memcmp(x->name, y->name, sizeof x->name);
}

/* A label's 8 bytes as a big-endian word: compared as numbers, words order
 * as their bytes do under memcmp. */
static uint64_t word_at(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof v);
	return be64toh(v);
}

static int compare_words(uint64_t a, uint64_t b)
{
	return (a > b) - (a < b);
}

static int compare_protos(const struct cluster_port *x, const struct cluster_port *y)
{
	return compare_words(word_at(x->proto), word_at(y->proto));
}

/* The index's order: protocol, then name (labels zero-padded, so compared
 * bytewise). Inline word compares: building the index of a 1,000-port
 * list makes some 10,000 of them. */
static int compare_keys(const struct cluster_port *x, const struct cluster_port *y)
{
	uint64_t a = word_at(x->proto), b = word_at(y->proto);

	if (a == b) {
		a = word_at(x->name);
		b = word_at(y->name);
	}
	if (a == b) {
		a = word_at(x->name + 8);
		b = word_at(y->name + 8);
	}
	return compare_words(a, b);
}

/* index[0..n) (positions in the list's order) sorted by key, equal keys
 * kept in that order, so one key's positions stay in number order: a
 * bottom-up merge sort through aux[0..n). */
static void sort_positions(const struct cluster_port *ports, uint16_t *index, uint16_t *aux,
			   size_t n)
{
	uint16_t *from = index, *to = aux, *t;

	for (size_t width = 1; width < n; width *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * width) {
			size_t mid = lo + width < n ? lo + width : n;
			size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				to[k++] = compare_keys(&ports[from[j]], &ports[from[i]]) < 0 ? from[j++]
											 : from[i++];
			while (i < mid)
				to[k++] = from[i++];
			while (j < hi)
				to[k++] = from[j++];
		}
		t = from;
		from = to;
		to = t;
	}
	if (from != index)
		memcpy(index, from, n * sizeof *index);
}

bool cluster_ports_sort(struct cluster_port *ports, size_t n)
{
	uint16_t *index, *aux;

	if (n)
		qsort(ports, n, sizeof *ports, compare_numbers);
	if (!index_of(ports, n))
		return true;
	if (!(aux = malloc(n * sizeof *aux)))
		return false;
	index = (uint16_t *)(ports + n);
	for (size_t k = 0; k < n; k++)
		index[k] = (uint16_t)k;
	sort_positions(ports, index, aux, n);
	free(aux);
	return true;
}

/* ---- readers ------------------------------------------------------------------------ */

/* Question label "_x" against a port's label "x". */
static bool label_is(const uint8_t *query, const uint8_t *label)
{
	return query[0] == label[0] + 1 && memcmp(query + 2, label + 1, label[0]) == 0;
}

static bool port_matches(const struct cluster_port_query *pq, const struct cluster_port *p)
{
	return (!pq->proto || label_is(pq->proto, p->proto)) &&
	       (!pq->name || label_is(pq->name, p->name)) && (!pq->named_only || p->name[0]);
}

/* Question label "_x" as a port's label (zero-padded to size); false when
 * no port can have it. */
static bool stored_label(const uint8_t *query, uint8_t *out, size_t size)
{
	memset(out, 0, size);
	if (query[0] < 1 || query[0] > size)
		return false;
	out[0] = (uint8_t)(query[0] - 1);
	memcpy(out + 1, query + 2, out[0]);
	return true;
}

/*
 * The first index position whose port's key is past (upper) or not before
 * (!upper) key; with any_name, only the protocols are compared.
 */
static size_t bound(const struct cluster_port *ports, const uint16_t *index, size_t n,
		    const struct cluster_port *key, bool any_name, bool upper)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct cluster_port *p = &ports[index[mid]];
		int d = any_name ? compare_protos(p, key) : compare_keys(p, key);
		if (upper ? d <= 0 : d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * The index positions [*lo, *hi) of the ports pq selects, when the index
 * can tell them: pq names a protocol. false: search the list instead.
 */
static bool index_range(const struct cluster_port_query *pq, const struct cluster_port *ports,
			size_t n, size_t *lo, size_t *hi)
{
	const uint16_t *index = index_of(ports, n);
	struct cluster_port key;

	if (!index || !pq->proto)
		return false;
	*lo = *hi = 0;
	if (!stored_label(pq->proto, key.proto, sizeof key.proto) ||
	    !stored_label(pq->name ? pq->name : (const uint8_t *)"\1_", key.name, sizeof key.name))
		return true; /* a label no port has: none */
	if (pq->name) {
		*lo = bound(ports, index, n, &key, false, false);
		*hi = bound(ports, index, n, &key, false, true);
		return true;
	}
	/* any name of the protocol: past its unnamed ports (the empty name sorts
	 * first) when only named ones count */
	*lo = pq->named_only ? bound(ports, index, n, &key, false, true)
			     : bound(ports, index, n, &key, true, false);
	*hi = bound(ports, index, n, &key, true, true);
	return true;
}

unsigned cluster_ports_matching(const struct cluster_port_query *pq,
				const struct cluster_port *ports, size_t n)
{
	unsigned count = 0;
	size_t lo, hi;

	if (index_range(pq, ports, n, &lo, &hi))
		return (unsigned)(hi - lo);
	for (size_t k = 0; k < n; k++)
		count += port_matches(pq, &ports[k]);
	return count;
}

void cluster_port_walk_begin(struct cluster_port_walk *w, const struct cluster_port_query *pq,
			     const struct cluster_port *ports, size_t n)
{
	size_t lo, hi;

	*w = (struct cluster_port_walk){.pq = pq, .ports = ports, .end = n};
	/* one (name, protocol)'s index positions are in the list's order; a
	 * whole protocol's are not, and it is walked on the list */
	if (pq->name && index_range(pq, ports, n, &lo, &hi)) {
		w->index = index_of(ports, n);
		w->pos = lo;
		w->end = hi;
	}
}

const struct cluster_port *cluster_port_walk_next(struct cluster_port_walk *w)
{
	while (w->pos < w->end) {
		size_t k = w->index ? w->index[w->pos] : w->pos;
		w->pos++;
		if (w->index || port_matches(w->pq, &w->ports[k]))
			return &w->ports[k];
	}
	return NULL;
}

const struct cluster_port *cluster_port_walk_next_number(struct cluster_port_walk *w)
{
	const struct cluster_port *p;

	while ((p = cluster_port_walk_next(w))) {
		bool again = w->seen && p->port == w->last;
		w->seen = true;
		w->last = p->port;
		if (!again)
			return p;
	}
	return NULL;
}

/* The first position in [lo, hi) of the list (through index, when given)
 * whose number is not below port. */
static size_t number_bound(const struct cluster_port *ports, const uint16_t *index, size_t lo,
			   size_t hi, uint16_t port)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ports[index ? index[mid] : mid].port < port)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

bool cluster_ports_have(const struct cluster_port_query *pq, const struct cluster_port *ports,
			size_t n, uint16_t port)
{
	struct cluster_port_walk w;
	size_t lo, hi;

	if (!port) {
		cluster_port_walk_begin(&w, pq, ports, n);
		return cluster_port_walk_next(&w) != NULL;
	}
	if (pq->name && index_range(pq, ports, n, &lo, &hi)) {
		const uint16_t *index = index_of(ports, n);
		size_t j = number_bound(ports, index, lo, hi, port);
		return j < hi && ports[index[j]].port == port;
	}
	for (size_t k = number_bound(ports, NULL, 0, n, port); k < n && ports[k].port == port; k++)
		if (port_matches(pq, &ports[k]))
			return true;
	return false;
}
