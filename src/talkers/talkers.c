/*
 * talkers/talkers.c — see talkers.h.
 *
 * Layout: per producer, TALKERS_SLOTS slots of a minute each, the slot of a
 * minute being minute % TALKERS_SLOTS; each slot holds one sketch per kind
 * and the minute it is for, so a slot from ten minutes ago is emptied when
 * its turn comes again. A slot is written by its producer only, under a
 * sequence count (odd while it changes); a reader copies a sketch and
 * takes it only when the count was even and unchanged around the copy.
 *
 * Costs: a sampled note scans at most TALKERS_ENTRIES keys per kind it
 * touches (two for a worker's query, one for an NXDOMAIN or SERVFAIL); a
 * read merges at most (producers x TALKERS_SLOTS x TALKERS_ENTRIES) entries
 * by sorting, on the control thread.
 */
#include "talkers/talkers.h"

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dns/dns.h"
#include "util/clock.h"

struct entry {
	uint64_t count;
	uint16_t key_len;
	bool cut;
	uint8_t key[TALKERS_KEY_MAX];
};

struct sketch {
	uint32_t n;
	struct entry e[TALKERS_ENTRIES];
};

struct slot {
	_Atomic uint32_t seq;
	_Atomic uint64_t minute;
	struct sketch kinds[TALKERS_KINDS];
};

struct producer {
	_Alignas(64) struct slot slots[TALKERS_SLOTS];
};

static struct producer *producers;
static unsigned n_producers;

int talkers_start(unsigned n_workers)
{
	n_producers = n_workers + 1;
	producers = calloc(n_producers, sizeof *producers);
	return producers ? 0 : -1;
}

void talkers_stop(void)
{
	free(producers);
	producers = NULL;
	n_producers = 0;
}

static struct producer *producer_of(unsigned producer)
{
	if (!producers)
		return NULL;
	return &producers[producer == TALKERS_RESOLVER ? n_producers - 1 : producer];
}

/* Count one for key in s: space-saving. */
static void sketch_add(struct sketch *s, const uint8_t *key, size_t len, bool cut)
{
	uint32_t least = 0;

	for (uint32_t i = 0; i < s->n; i++) {
		struct entry *e = &s->e[i];
		if (e->key_len == len && e->cut == cut && memcmp(e->key, key, len) == 0) {
			e->count++;
			return;
		}
		if (e->count < s->e[least].count)
			least = i;
	}
	struct entry *e;
	if (s->n < TALKERS_ENTRIES) {
		e = &s->e[s->n++];
		e->count = 1;
	} else {
		e = &s->e[least]; /* takes over the least count: it may have been this key's */
		e->count++;
	}
	e->key_len = (uint16_t)len;
	e->cut = cut;
	memcpy(e->key, key, len);
}

/* The slot of this minute, emptied first when it last held another minute (seq odd). */
static struct slot *open_slot(struct producer *p, uint64_t minute)
{
	struct slot *s = &p->slots[minute % TALKERS_SLOTS];
	uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);

	atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	if (atomic_load_explicit(&s->minute, memory_order_relaxed) != minute) {
		for (int k = 0; k < TALKERS_KINDS; k++) {
			s->kinds[k].n = 0;
			memset(s->kinds[k].e, 0, sizeof s->kinds[k].e);
		}
		atomic_store_explicit(&s->minute, minute, memory_order_relaxed);
	}
	return s;
}

static void close_slot(struct slot *s)
{
	atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) + 1,
			      memory_order_release);
}

void talkers_note(unsigned producer, const struct sockaddr_storage *client, const uint8_t *qname,
		  size_t qname_len, int rcode)
{
	struct producer *p = producer_of(producer);
	uint8_t addr[1 + 16];
	size_t addr_len = 0;

	if (!p)
		return;
	if (client) {
		addr[0] = (uint8_t)client->ss_family;
		if (client->ss_family == AF_INET) {
			memcpy(addr + 1, &((const struct sockaddr_in *)client)->sin_addr, 4);
			addr_len = 5;
		} else if (client->ss_family == AF_INET6) {
			memcpy(addr + 1, &((const struct sockaddr_in6 *)client)->sin6_addr, 16);
			addr_len = 17;
		}
	}
	bool cut = qname_len > TALKERS_KEY_MAX;
	size_t name_len = cut ? TALKERS_KEY_MAX : qname_len;
	struct slot *s = open_slot(p, (uint64_t)coarse_ms() / 1000 / TALKERS_SLOT_SECONDS);

	if (addr_len) {
		sketch_add(&s->kinds[TALKERS_CLIENTS], addr, addr_len, false);
		sketch_add(&s->kinds[TALKERS_NAMES], qname, name_len, cut);
	}
	if (rcode == DNS_R_NXDOMAIN)
		sketch_add(&s->kinds[TALKERS_NXDOMAIN], qname, name_len, cut);
	else if (rcode == DNS_R_SERVFAIL)
		sketch_add(&s->kinds[TALKERS_SERVFAIL], qname, name_len, cut);
	close_slot(s);
}

void talkers_note_reply(unsigned producer, const struct sockaddr_storage *client,
			const uint8_t *reply, size_t len)
{
	size_t pos = DNS_HEADER_LEN;

	if (len <= DNS_HEADER_LEN || reply[4] != 0 || reply[5] != 1)
		return;
	while (pos < len && reply[pos] != 0 && reply[pos] < 64)
		pos += 1u + reply[pos];
	if (pos >= len || reply[pos] != 0)
		return; /* not the plain name our writer puts in the question */
	talkers_note(producer, client, reply + DNS_HEADER_LEN, pos + 1 - DNS_HEADER_LEN,
		     reply[3] & 0xf);
}

/* A copy of one sketch of s when it holds minute >= oldest; false otherwise. */
static bool copy_sketch(const struct slot *s, enum talkers_kind kind, uint64_t oldest,
			uint64_t newest, struct sketch *out)
{
	for (int tries = 0; tries < 100; tries++) {
		uint32_t before = atomic_load_explicit(&s->seq, memory_order_acquire);
		if (before & 1)
			continue;
		uint64_t minute = atomic_load_explicit(&s->minute, memory_order_relaxed);
		memcpy(out, &s->kinds[kind], sizeof *out);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->seq, memory_order_relaxed) == before)
			return minute >= oldest && minute <= newest && out->n <= TALKERS_ENTRIES;
	}
	return false; /* a producer kept changing it: left out of this read */
}

static int by_key(const void *a, const void *b)
{
	const struct talkers_item *x = a, *y = b;

	if (x->key_len != y->key_len)
		return x->key_len < y->key_len ? -1 : 1;
	if (x->cut != y->cut)
		return x->cut ? 1 : -1;
	return memcmp(x->key, y->key, x->key_len);
}

static int by_count(const void *a, const void *b)
{
	const struct talkers_item *x = a, *y = b;

	return x->count == y->count ? by_key(a, b) : x->count > y->count ? -1 : 1;
}

size_t talkers_read(enum talkers_kind kind, uint64_t seconds, struct talkers_item *out,
		    size_t max)
{
	uint64_t newest = (uint64_t)coarse_ms() / 1000 / TALKERS_SLOT_SECONDS;
	uint64_t minutes = (seconds + TALKERS_SLOT_SECONDS - 1) / TALKERS_SLOT_SECONDS;
	struct sketch copy;
	struct talkers_item *all;
	size_t n = 0, merged = 0;

	if (!producers || kind >= TALKERS_KINDS)
		return 0;
	minutes = minutes < 1 ? 1 : minutes > TALKERS_SLOTS ? TALKERS_SLOTS : minutes;
	all = calloc((size_t)n_producers * TALKERS_SLOTS * TALKERS_ENTRIES, sizeof *all);
	if (!all)
		return 0;
	for (unsigned p = 0; p < n_producers; p++)
		for (int i = 0; i < TALKERS_SLOTS; i++)
			if (copy_sketch(&producers[p].slots[i], kind,
					newest + 1 >= minutes ? newest + 1 - minutes : 0, newest, &copy))
				for (uint32_t k = 0; k < copy.n; k++) {
					struct talkers_item *it = &all[n++];
					it->count = copy.e[k].count;
					it->key_len = copy.e[k].key_len;
					it->cut = copy.e[k].cut;
					memcpy(it->key, copy.e[k].key, it->key_len);
				}
	qsort(all, n, sizeof *all, by_key);
	for (size_t i = 0; i < n; i++) {
		if (merged && by_key(&all[merged - 1], &all[i]) == 0)
			all[merged - 1].count += all[i].count;
		else
			all[merged++] = all[i];
	}
	qsort(all, merged, sizeof *all, by_count);
	n = merged < max ? merged : max;
	for (size_t i = 0; i < n; i++) {
		out[i] = all[i];
		out[i].count *= TALKERS_SAMPLE;
	}
	free(all);
	return n;
}
