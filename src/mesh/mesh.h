/*
 * mesh — Istio's ServiceEntry hosts answered on the node (mesh.istio), as
 * Istio's DNS proxy answers them inside each sidecar, for every pod of the
 * node and for VMs: no proxy per pod, no connection to istiod.
 *
 * Owns: a model of the watched networking.istio.io/v1 ServiceEntries and
 * WorkloadEntries, and of the Pods that the workloadSelectors of
 * resolution-NONE entries pick (each selector one label-selected watch in
 * its namespace, started and stopped through mesh_bind's functions); the
 * host table, a liburcu lock-free hash of host name -> the entries that
 * define it, read by workers without lock or allocation; and the rules
 * Istio's name table and DNS proxy answer by (istio/istio
 * pkg/dns/server/name_table.go, pkg/dns/client/dns.go,
 * pilot/pkg/serviceregistry/serviceentry/conversion.go,
 * pilot/pkg/model/sidecar.go):
 *
 *   - a host's addresses are its entry's spec.addresses (IPs; a /32 or /128
 *     counts as its IP, wider CIDRs give none); without them istiod's
 *     allocation in status.addresses (that host's, one per family) when
 *     Istio itself would use it: resolution is not NONE and the label
 *     networking.istio.io/enable-autoallocate-ip is not "false"; with
 *     resolution NONE the entry is headless: the addresses of the ready
 *     Pods and healthy WorkloadEntries its workloadSelector picks in its
 *     namespace, or without a selector its spec.endpoints' IPs. Anything
 *     else is no local name: it goes upstream like any external name;
 *   - one host in several entries of one namespace merges their addresses;
 *     in several namespaces, the client's own namespace wins, then the
 *     oldest (creationTimestamp, then namespace/name);
 *   - exportTo ("*", ".", "~", namespace names; empty: "*") decides which
 *     client namespaces see an entry; a client whose namespace is not
 *     known sees only "*"-exported entries;
 *   - a wildcard host (*.example.com) answers every name below it (not the
 *     bare parent) with the question as owner; the closest wildcard, and
 *     an exact host before any, wins;
 *   - A and AAAA only (other types are not local), AA, TTL mesh.ttl,
 *     NOERROR with no records for a known host without that family, and a
 *     host with no address at all (a headless entry with no ready
 *     endpoint) is not local;
 *   - Istio's search-path alias: <host>.<ns>.svc.<zone> asked by a pod of
 *     namespace <ns> is a CNAME to <host> and its records (the query
 *     pipeline decides who asks: cluster_autopath_base).
 * Where localdns answers otherwise than Istio's proxy, docs/operations.md
 * ("Istio and multi-cluster") says why.
 *
 * Must never: allocate, lock or block when answering (mesh_answer,
 * mesh_answer_alias run on the hot path under the caller's RCU read lock);
 * be written from more than one thread; keep the JSON objects it is given.
 */
#ifndef LOCALDNS_MESH_H
#define LOCALDNS_MESH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "dns/dns.h"

struct mesh;

/* A table for cfg's mesh section (mesh.ttl); NULL with a reason. */
struct mesh *mesh_new(const struct config *cfg, char *err, size_t errlen);

/* After every reader has stopped (and the writer's thread, which may still
 * hold selector watches: the Kubernetes client, stopped first). */
void mesh_free(struct mesh *m);

/* ---- writer side: one thread, registered with RCU ---------------------------- */

/*
 * How the mesh watches the Pods a selector picks: watch(ctx, ns, selector,
 * tag) starts a watch of namespace ns's Pods with labelSelector selector
 * ("k=v,k2=v2"), whose objects then come to mesh_pod_upsert/remove with
 * tag, and returns a handle (NULL: not watched); unwatch(ctx, handle) stops
 * it. Both are called on the writer's thread. Without mesh_bind, selectors
 * are kept but nothing is watched (their Pods come only through the calls
 * below).
 */
struct mesh_watcher {
	void *ctx;
	void *(*watch)(void *ctx, const char *ns, const char *selector, void *tag);
	void (*unwatch)(void *ctx, void *handle);
};
void mesh_bind(struct mesh *m, const struct mesh_watcher *w);

/* The objects themselves (ServiceEntries, WorkloadEntries, the Pods of a
 * selector watch) come in through mesh/objects.h. */

struct mesh_stats {
	size_t entries;    /* ServiceEntries held */
	size_t hosts;      /* host names answered for (wildcards counted once) */
	size_t workloads;  /* WorkloadEntries held */
	size_t selectors;  /* selector watches (one per namespace and selector) */
	size_t pods;       /* Pods those watches hold */
};
void mesh_stats(const struct mesh *m, struct mesh_stats *out);

/* ---- read side: workers, under the RCU read lock ---------------------------- */

enum mesh_result {
	MESH_NOT_LOCAL, /* not a mesh name for this client: w is untouched */
	MESH_ANSWERED,  /* w was rewound and holds the whole answer */
};

/*
 * Who asks: the namespace of the client (one wire label, as
 * cluster_client_namespace gives it; NULL: not known), looked up with
 * namespace_of(ctx) only once a host is found, so a name that is no host
 * costs no lookup of the client.
 */
struct mesh_client {
	const uint8_t *(*namespace_of)(const void *ctx);
	const void *ctx;
	const uint8_t *ns;   /* the answer, once looked is set */
	bool looked;
};

/*
 * q (class IN) as a host for client. w may hold another source's answer (a
 * cluster zone's NXDOMAIN): with rewind it is rewound, only when the mesh
 * answers; without, the answer is added to what w holds (autopath's CNAME
 * to q's name, q being a candidate of its search).
 */
enum mesh_result mesh_answer(const struct mesh *m, const struct dns_query *q,
			     struct mesh_client *client, bool rewind, struct dns_writer *w);

/*
 * Istio's search-path alias: q's name is <host>.<ns>.svc.<zone>, asked by a
 * pod of namespace <ns> (client), and <host> its first base_len bytes
 * (cluster_autopath_base). When <host> is a mesh host that client sees: a
 * CNAME from q's name to <host>, then <host>'s records of q's type (none:
 * an empty NOERROR, as Istio's proxy answers).
 */
enum mesh_result mesh_answer_alias(const struct mesh *m, const struct dns_query *q,
				   size_t base_len, struct mesh_client *client,
				   struct dns_writer *w);

#endif
