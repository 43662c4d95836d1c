/*
 * mesh/entries.c — entries built and published: one allocation per entry,
 * and each of its hosts' lists of entries replaced to hold it.
 *
 * A change to a ServiceEntry (or to a headless entry's endpoints) builds a
 * new entry and puts it in the old one's place: first in each host it
 * defines (a new list, oldest entry first), then out of the hosts it no
 * longer defines (a host left with none goes), then in the table by key;
 * the old entry is freed after a grace period. A reader sees each host's
 * old list or its new one. The cost of a change is that entry's size and
 * its hosts' lists, whatever the size of the mesh.
 */
#include "mesh/internal.h"

#include <stdlib.h>
#include <string.h>

#include "log/log.h"

/* What an entry is made of besides its addresses. */
struct parts {
	const char *key;
	int64_t created;
	uint8_t kind, export_flags, n_export;
	const uint8_t *ns;
	struct mesh_host *const *hosts;
	size_t n_hosts;
	const struct mesh_allocated *allocated; /* NULL: none */
	const uint8_t *exports;
	size_t exports_len;
	struct mesh_selector *selector;
};

static size_t align8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* One allocation: the struct, hosts, allocated, addresses, exports, ns, key. */
static struct mesh_entry *entry_new(const struct parts *p, const struct mesh_ip *ips, size_t n_ips)
{
	size_t n4 = 0, n6;
	size_t key_len = strlen(p->key) + 1, ns_len = 1u + p->ns[0];

	for (size_t i = 0; i < n_ips; i++)
		n4 += ips[i].family == AF_INET;
	n6 = n_ips - n4;
	size_t hosts_at = align8(sizeof(struct mesh_entry) + key_len);
	size_t alloc_at = hosts_at + p->n_hosts * sizeof(struct mesh_host *);
	size_t addrs_at = alloc_at + (p->allocated ? p->n_hosts * sizeof(struct mesh_allocated) : 0);
	size_t exports_at = addrs_at + n4 * 4 + n6 * 16;
	size_t ns_at = exports_at + p->exports_len;
	uint8_t *base = calloc(1, ns_at + ns_len);
	struct mesh_entry *e = (struct mesh_entry *)base;

	if (!e)
		return NULL;
	memcpy(e->key, p->key, key_len);
	e->created = p->created;
	e->kind = p->kind;
	e->export_flags = p->export_flags;
	e->n_export = p->n_export;
	e->selector = p->selector;
	e->n_hosts = (uint16_t)p->n_hosts;
	e->hosts = (struct mesh_host **)(base + hosts_at);
	memcpy(e->hosts, p->hosts, p->n_hosts * sizeof *e->hosts);
	if (p->allocated) {
		e->allocated = (struct mesh_allocated *)(base + alloc_at);
		memcpy(e->allocated, p->allocated, p->n_hosts * sizeof *e->allocated);
	}
	uint8_t *a = base + addrs_at;
	for (int fam = AF_INET, round = 0; round < 2; round++, fam = AF_INET6)
		for (size_t i = 0; i < n_ips; i++)
			if (ips[i].family == fam) {
				memcpy(a, ips[i].addr, fam == AF_INET ? 4 : 16);
				a += fam == AF_INET ? 4 : 16;
			}
	e->addrs = base + addrs_at;
	e->n4 = (uint32_t)n4;
	e->n6 = (uint32_t)n6;
	memcpy(base + exports_at, p->exports, p->exports_len);
	e->exports = base + exports_at;
	memcpy(base + ns_at, p->ns, ns_len);
	e->ns = base + ns_at;
	return e;
}

/* Older first: creationTimestamp, then namespace/name. */
static bool older(const struct mesh_entry *a, const struct mesh_entry *b)
{
	return a->created != b->created ? a->created < b->created : strcmp(a->key, b->key) < 0;
}

/* h's entries with old taken out and e put in its place by age (either NULL). */
static bool swap_in_host(struct mesh *m, struct mesh_host *h, const struct mesh_entry *old,
			 const struct mesh_entry *e)
{
	struct mesh_def_list cur;
	struct mesh_defs *next;
	uint32_t n = 0;

	mesh_defs_of(h, &cur);
	size_t room = cur.n + (e != NULL);
	if (room - (old && cur.n) <= 1) {
		/* at most one entry left: stored inline */
		const struct mesh_entry *only = e;
		for (uint32_t i = 0; !only && i < cur.n; i++)
			if (cur.e[i] != old)
				only = cur.e[i];
		mesh_host_set_defs(m, h, only ? (uintptr_t)only | 1 : 0);
		return true;
	}
	if (!(next = malloc(sizeof *next + room * sizeof next->e[0])))
		return false;
	bool placed = !e;
	for (uint32_t i = 0; i < cur.n; i++) {
		if (cur.e[i] == old)
			continue;
		if (!placed && older(e, cur.e[i])) {
			next->e[n++] = e;
			placed = true;
		}
		next->e[n++] = cur.e[i];
	}
	if (!placed)
		next->e[n++] = e;
	next->n = n;
	mesh_host_set_defs(m, h, (uintptr_t)next);
	return true;
}

static bool has_host(const struct mesh_entry *e, const struct mesh_host *h)
{
	for (uint16_t i = 0; e && i < e->n_hosts; i++)
		if (e->hosts[i] == h)
			return true;
	return false;
}

/* e in old's place in every host and in the table (e NULL: old goes). */
static void publish(struct mesh *m, const struct mesh_entry *old, struct mesh_entry *e)
{
	for (uint16_t i = 0; e && i < e->n_hosts; i++)
		if (!swap_in_host(m, e->hosts[i], has_host(old, e->hosts[i]) ? old : NULL, e))
			log_error("out of memory; serviceentry host not updated", "serviceentry",
				  e->key);
	for (uint16_t i = 0; old && i < old->n_hosts; i++)
		if (!has_host(e, old->hosts[i]) && !swap_in_host(m, old->hosts[i], old, NULL))
			log_error("out of memory; serviceentry host not updated", "serviceentry",
				  old->key);
	mesh_entries_replace(m, old, e);
}

/* A host of an entry may have been made for it and be left with no entry
 * (the entry could not be built): it goes. */
static void drop_unused(struct mesh *m, struct mesh_host **hosts, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (hosts[i] && !atomic_load_explicit(&hosts[i]->defs, memory_order_relaxed))
			mesh_host_set_defs(m, hosts[i], 0);
}

const struct mesh_entry *mesh_entry_publish(struct mesh *m, const struct mesh_entry *old,
					    const struct mesh_draft *d, struct mesh_selector *sel,
					    const struct mesh_ip *ips, size_t n_ips)
{
	struct mesh_host **hosts = calloc(d->n_hosts ? d->n_hosts : 1, sizeof *hosts);
	struct mesh_entry *e = NULL;
	bool ok = hosts != NULL;

	for (size_t i = 0; ok && i < d->n_hosts; i++)
		ok = (hosts[i] = mesh_host_get(m, d->hosts[i], dns_name_len(d->hosts[i]))) != NULL;
	if (ok) {
		struct parts p = {
			.key = d->key, .created = d->created, .kind = (uint8_t)d->kind,
			.export_flags = d->export_flags, .n_export = d->n_export, .ns = d->ns,
			.hosts = hosts, .n_hosts = d->n_hosts,
			.allocated = d->kind == KIND_ALLOCATED ? d->allocated : NULL,
			.exports = d->exports, .exports_len = d->exports_len, .selector = sel,
		};
		e = entry_new(&p, ips, n_ips);
	}
	if (e)
		publish(m, old, e);
	else if (hosts)
		drop_unused(m, hosts, d->n_hosts);
	free(hosts);
	return e;
}

void mesh_entry_readdress(struct mesh *m, const struct mesh_entry *old,
			  const struct mesh_ip *ips, size_t n_ips)
{
	const uint8_t *end = old->exports;
	struct parts p = {
		.key = old->key, .created = old->created, .kind = old->kind,
		.export_flags = old->export_flags, .n_export = old->n_export, .ns = old->ns,
		.hosts = old->hosts, .n_hosts = old->n_hosts, .allocated = old->allocated,
		.exports = old->exports, .selector = old->selector,
	};
	struct mesh_entry *e;

	for (uint8_t i = 0; i < old->n_export; i++)
		end += 1 + *end;
	p.exports_len = (size_t)(end - old->exports);
	if (!(e = entry_new(&p, ips, n_ips))) {
		log_error("out of memory; serviceentry endpoints not updated", "serviceentry",
			  old->key);
		return;
	}
	publish(m, old, e);
}

void mesh_entry_unpublish(struct mesh *m, const struct mesh_entry *old)
{
	publish(m, old, NULL);
}
