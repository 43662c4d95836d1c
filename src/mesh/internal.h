/*
 * mesh/internal.h — the host table's layout and the writer's model, shared
 * by table.c (the two RCU hashes), parse.c (a ServiceEntry into a draft),
 * entries.c (drafts into published entries), workloads.c (selectors, their
 * Pods and the WorkloadEntries: headless entries' endpoints) and answer.c
 * (reading). Nothing outside src/mesh/ includes this.
 *
 * What is held: one immutable struct mesh_entry per ServiceEntry (replaced
 * whole on a change, freed after a grace period), and one node per host
 * name (struct mesh_host) pointing to the entries that define it, oldest
 * first. A reader finds the host, picks the entries its client sees and
 * writes their addresses: nothing is stored per (host, client namespace).
 */
#ifndef LOCALDNS_MESH_INTERNAL_H
#define LOCALDNS_MESH_INTERNAL_H

#include "mesh/mesh.h"
#include "mesh/objects.h"

#include <stdatomic.h>

#include <json-c/linkhash.h>
#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

/* Where an entry's addresses come from (mesh.h has the rules). */
enum mesh_kind {
	KIND_ADDRESSES, /* spec.addresses */
	KIND_ALLOCATED, /* istiod's, per host, from status.addresses */
	KIND_HEADLESS,  /* resolution NONE: its endpoints' addresses */
	KIND_UPSTREAM,  /* none: its hosts are no local names */
};

/* exportTo: everyone, the entry's own namespace; plus the names listed. */
enum { EXPORT_ALL = 1, EXPORT_SELF = 2 };

/* One host's allocated addresses (status.addresses): one per family. */
struct mesh_allocated {
	uint8_t v4[4];
	uint8_t v6[16];
	uint8_t has;   /* 1: v4, 2: v6 */
};

struct mesh_host;
struct mesh_selector;

/*
 * A ServiceEntry, immutable once published, in one allocation. Its
 * addresses are n4 IPv4 then n6 IPv6 ones (KIND_ADDRESSES, KIND_HEADLESS:
 * spec.addresses or the endpoints'), or per host (KIND_ALLOCATED).
 */
struct mesh_entry {
	struct cds_lfht_node ht;       /* in m->entries, by key */
	struct rcu_head rcu;
	int64_t created;               /* metadata.creationTimestamp, Unix seconds */
	struct mesh_selector *selector; /* writer only: KIND_HEADLESS with a workloadSelector */
	struct mesh_host **hosts;      /* [n_hosts], distinct */
	struct mesh_allocated *allocated; /* [n_hosts], KIND_ALLOCATED only */
	const uint8_t *addrs;          /* [n4 * 4 + n6 * 16] */
	const uint8_t *exports;        /* n_export wire labels, one after the other */
	const uint8_t *ns;             /* its namespace, one wire label */
	uint32_t n4, n6;
	uint16_t n_hosts;
	uint8_t kind;                  /* enum mesh_kind */
	uint8_t export_flags;          /* EXPORT_* */
	uint8_t n_export;
	char key[];                    /* "ns/name" */
};

/*
 * A host name (lower-cased wire form; a wildcard's first label is "*")
 * while some entry defines it. defs is what readers follow: one entry
 * (the pointer with bit 0 set) or a struct mesh_defs, replaced whole.
 */
struct mesh_host {
	struct cds_lfht_node ht;       /* in m->hosts */
	struct rcu_head rcu;
	_Atomic uintptr_t defs;
	uint8_t len;
	uint8_t name[];
};

/* Two or more entries of one host, oldest first (created, then key). */
struct mesh_defs {
	struct rcu_head rcu;
	uint32_t n;
	const struct mesh_entry *e[];
};

/* A host's entries as a reader sees them. */
struct mesh_def_list {
	const struct mesh_entry *const *e;
	uint32_t n;
	const struct mesh_entry *one;  /* storage when there is one */
};

static inline void mesh_defs_of(const struct mesh_host *h, struct mesh_def_list *out)
{
	uintptr_t d = atomic_load_explicit(&h->defs, memory_order_acquire);

	if (d & 1) {
		out->one = (const struct mesh_entry *)(d & ~(uintptr_t)1);
		out->e = &out->one;
		out->n = 1;
	} else if (d) {
		const struct mesh_defs *defs = (const struct mesh_defs *)d;
		out->e = defs->e;
		out->n = defs->n;
	} else {
		out->n = 0;
	}
}

/* An address, zero-filled past its family's length. */
struct mesh_ip {
	int family;      /* AF_INET, AF_INET6 */
	uint8_t addr[16];
};

/* A Pod a selector picked: its addresses while it is ready. */
struct mesh_pod {
	char *key;       /* "ns/name" */
	struct mesh_ip ips[2];
	uint8_t n_ips;   /* 0: not ready, or no address yet */
};

/*
 * One workloadSelector of one namespace, shared by the headless entries
 * that have it (users, by key), with its Pods watch. Writer only.
 */
struct mesh_selector {
	struct mesh_selector *next;
	char *ns;
	char *selector;        /* "k=v,k2=v2", keys sorted: the labelSelector */
	char *pairs;           /* the same as "k\0v\0k2\0v2\0" */
	size_t pairs_len;
	char **users;          /* keys of the entries with this selector */
	size_t n_users;
	void *handle;          /* the watcher's; NULL: not watched */
	struct lh_table *pods; /* key -> struct mesh_pod */
};

/* A WorkloadEntry. Writer only. */
struct mesh_workload {
	char *key;             /* "ns/name" */
	size_t ns_len;
	char *labels;          /* spec.labels over which metadata.labels win, "k\0v\0..." */
	size_t labels_len;
	struct mesh_ip ip;     /* family 0: its address is no IP (a DNS name, a unix socket) */
	bool healthy;
};

struct mesh {
	struct cds_lfht *hosts;        /* host name -> struct mesh_host */
	struct cds_lfht *entries;      /* "ns/name" -> struct mesh_entry (writer lookups) */
	uint8_t hash_key[16];          /* SipHash: tenants choose the names */
	uint32_t ttl;                  /* mesh.ttl */
	/* bit n: a host (a wildcard host) of n labels exists, 63 for more:
	 * a name of a length no host has costs no lookup */
	_Atomic uint64_t exact_labels, wild_labels;

	/* writer only */
	unsigned long buckets[2];      /* of hosts and entries */
	uint32_t label_hosts[2][64];   /* hosts by label count: exact, wildcard */
	struct mesh_watcher watcher;
	bool bound;
	struct mesh_selector *selectors;
	struct lh_table *workloads;    /* key -> struct mesh_workload */

	/* for mesh_stats from any thread */
	_Atomic size_t n_entries, n_hosts, n_workloads, n_selectors, n_pods;
};

/* ---- table.c: the RCU hashes (writer calls hold the read lock) ---------------- */

/* Readers: the host named name (wire, lower-cased), or NULL. */
const struct mesh_host *mesh_find_host(const struct mesh *m, const uint8_t *name, size_t len);
/* Writer: the host, made (with no entry yet) if new; NULL when out of memory. */
struct mesh_host *mesh_host_get(struct mesh *m, const uint8_t *name, size_t len);
/* Writer: the host's entries become defs (NULL, one tagged entry, or an array);
 * a host left with none leaves the table. */
void mesh_host_set_defs(struct mesh *m, struct mesh_host *h, uintptr_t defs);
/* Writer: the entry of key "ns/name", or NULL. */
const struct mesh_entry *mesh_find_entry(const struct mesh *m, const char *key);
/* Writer: put e in the table (replacing old, NULL for none) / take old out;
 * old is freed after a grace period. */
void mesh_entries_replace(struct mesh *m, const struct mesh_entry *old, struct mesh_entry *e);
/* Writer, outside the read lock: size the tables to what they hold. */
void mesh_fit_tables(struct mesh *m);
/* A table the writer sizes, with its first buckets in *buckets. */
struct cds_lfht *mesh_table_new(unsigned long *buckets);
/* At mesh_free: empty and destroy both tables. */
void mesh_tables_destroy(struct mesh *m);

/* ---- parse.c: a ServiceEntry into a draft ------------------------------------ */

/* What an entry will hold, before its hosts have nodes. Writer only. */
struct mesh_draft {
	char key[512];
	int64_t created;
	enum mesh_kind kind;
	uint8_t ns[1 + 63];
	uint8_t (*hosts)[DNS_MAX_NAME]; /* [n_hosts], wire, distinct */
	size_t n_hosts;
	struct mesh_allocated *allocated; /* [n_hosts] */
	struct mesh_ip *ips;           /* spec.addresses, or spec.endpoints' (headless) */
	size_t n_ips;
	uint8_t exports[8 * 64];       /* wire labels */
	size_t exports_len;
	uint8_t n_export, export_flags;
	char *selector;                /* headless with a workloadSelector: its text */
	char *pairs;                   /* and its pairs */
	size_t pairs_len;
};

/* se into d; false (logged) when it names nothing (no name, no valid host) or
 * out of memory. mesh_draft_free after either. */
bool mesh_parse_entry(const struct kube_json *se, struct mesh_draft *d);
void mesh_draft_free(struct mesh_draft *d);
/* "10.0.0.1" / "fd00::1" into ip; false otherwise. */
bool mesh_parse_ip(const char *text, struct mesh_ip *ip);
/* An object's labels (a JSON object of strings) as "k\0v\0..." sorted by key,
 * with over's winning; also as "k=v,..." when text is not NULL. -1 when out of memory. */
int mesh_labels(const struct kube_json *labels, const struct kube_json *over, char **pairs,
		size_t *len, char **text);

/* ---- entries.c: drafts into entries; entries into hosts ----------------------- */

/* Build d's entry with these addresses and publish it in old's place (NULL: a new
 * one); returns it, or NULL when out of memory (old stays). */
const struct mesh_entry *mesh_entry_publish(struct mesh *m, const struct mesh_entry *old,
					    const struct mesh_draft *d, struct mesh_selector *sel,
					    const struct mesh_ip *ips, size_t n_ips);
/* The same entry with new addresses (a headless entry's endpoints changed). */
void mesh_entry_readdress(struct mesh *m, const struct mesh_entry *old,
			  const struct mesh_ip *ips, size_t n_ips);
/* Take old out of its hosts and the table. */
void mesh_entry_unpublish(struct mesh *m, const struct mesh_entry *old);

/* ---- workloads.c: selectors, their Pods, WorkloadEntries ---------------------- */

/* The selector (ns, d's) the headless entry key uses, made and watched if new;
 * NULL when out of memory. */
struct mesh_selector *mesh_selector_use(struct mesh *m, const char *ns, const char *selector,
					const char *pairs, size_t pairs_len, const char *key);
/* key no longer uses sel (which goes when nobody does). */
void mesh_selector_leave(struct mesh *m, struct mesh_selector *sel, const char *key);
/* The addresses a headless entry of namespace ns with selector sel has now
 * (ready Pods, healthy WorkloadEntries), sorted and distinct, in a new
 * array (*ips, free it); -1 when out of memory. */
int mesh_selector_addresses(const struct mesh *m, const struct mesh_selector *sel,
			    struct mesh_ip **ips, size_t *n);
/* At mesh_free. */
void mesh_workloads_free(struct mesh *m);

#endif
