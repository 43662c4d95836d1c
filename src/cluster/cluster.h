/*
 * cluster — the cluster domain's records, built from Kubernetes objects, and
 * the rules that answer from them (the Kubernetes DNS-Based Service
 * Discovery specification, schema 1.1.0; CoreDNS's kubernetes plugin where
 * the specification is silent).
 *
 * Owns: a compact model of the watched objects (Services, EndpointSlices,
 * Namespaces, this node's Pods when autopath or verified pod names need
 * them) kept by one writer thread as immutable snapshots in liburcu
 * lock-free hash tables: owner name -> records (the structure names) or a
 * Service (its spec and slice snapshots), endpoint address or hostname ->
 * slice entries, ClusterIP -> Service; beside them, this node's pod
 * addresses -> their namespace (for autopath). Every name of a Service
 * (its addresses, SRV, ports, endpoints, PTRs) is derived from those at
 * query time. A change to one object replaces that object's snapshot only;
 * workers read with no lock while it happens, and a replaced snapshot is
 * freed after an RCU grace period. Bounds (cluster.max_ports_per_service,
 * cluster.max_endpoints_per_service, names within 255 bytes) keep one
 * hostile Service from costing more than itself.
 *
 * Must never: block or allocate on the read side (cluster_answer and
 * cluster_autopath_base run on the hot path); be written from more than one thread; keep the JSON objects it
 * is given (they are borrowed for the call).
 *
 * Names it serves, under <zone> = cluster.domain (docs/coredns-compat.md for
 * the answers CoreDNS gives where the specification is silent):
 *   <zone> SOA/NS, dns-version.<zone> TXT "1.1.0", svc.<zone> and pod.<zone>
 *   <ns>.svc.<zone>, <ns>.pod.<zone>          exist while the namespace does
 *                                             (<ns>.pod not with pods: disabled)
 *   <svc>.<ns>.svc.<zone>                     A/AAAA (ClusterIPs, or ready
 *                                             endpoints when headless), SRV
 *                                             (every port), CNAME (ExternalName)
 *   <ep>.<svc>.<ns>.svc.<zone>                A/AAAA of one endpoint address,
 *                                             any kind of Service (hostname
 *                                             if it is a DNS label, pod name,
 *                                             else its dashed IP)
 *   _<port>._<proto>.<svc>.<ns>.svc.<zone>    SRV for named ports
 *   <a-b-c-d>.<ns>.pod.<zone>                 A/AAAA per cluster.pods
 *   <reversed IP>.in-addr.arpa / ip6.arpa     PTR for ClusterIPs and ready
 *                                             endpoints (their own names)
 * Every other name under <zone> is NXDOMAIN; reverse names we do not hold
 * go upstream under cluster.fallthrough and are NXDOMAIN elsewhere.
 *
 * A second table serves the clusterset zone of Multi-Cluster Services
 * (KEP-1645, multicluster.domain; cluster_new_clusterset) with the same
 * code: its Services are ServiceImports (ClusterSetIP: spec.ips; Headless:
 * endpoints), its EndpointSlices those labelled
 * multicluster.kubernetes.io/service-name, and an endpoint is named under
 * its slice's source cluster (multicluster.kubernetes.io/source-cluster):
 *   <ep>.<cluster>.<svc>.<ns>.svc.<zone>      as CoreDNS's multicluster
 * It has no pod names and no reverse names.
 */
#ifndef LOCALDNS_CLUSTER_H
#define LOCALDNS_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "config/config.h"
#include "dns/dns.h"

struct cluster;

/* A table for cfg's cluster section (domain, ttl, pods mode, CoreDNS's
 * options); NULL with a reason. */
struct cluster *cluster_new(const struct config *cfg, char *err, size_t errlen);

/* The clusterset zone's table (multicluster.domain, the cluster section's
 * ttl and CoreDNS options); NULL with a reason. Its Services are fed
 * ServiceImports (cluster_service_upsert), its slices every EndpointSlice
 * (those without the multi-cluster label are ignored). */
struct cluster *cluster_new_clusterset(const struct config *cfg, char *err, size_t errlen);

/* After every reader has stopped. */
void cluster_free(struct cluster *c);

/* ---- writer side: one thread, registered with RCU ---------------------------- */

/* The Kubernetes objects themselves come in through cluster/objects.h. */

/*
 * Whether cfg needs this node's Pods: autopath or mesh.istio (who is
 * asking: a mesh host's exportTo and alias depend on the client's
 * namespace), verified pod names (pods that back no Service), or dnstap's
 * client messages (which name the pod that asked). Otherwise they are not
 * watched at all, so the service account needs no right to read Pod specs.
 */
bool cluster_needs_pods(const struct config *cfg);

/*
 * Which EndpointSlices the table needs watched: NULL every one; with
 * cluster.noendpoints only the watched Service's ("ns/name", see
 * cluster_watch_endpoints, which must come first), or none (""). Valid
 * while c is.
 */
const char *cluster_slices_needed(const struct cluster *c);

/*
 * Report the ready endpoint addresses of Service ns/name to fn, on the
 * writer thread, whenever that set changes (also when it becomes empty or
 * the Service goes). Nothing before the first sync (a Service listed
 * before its EndpointSlices would look empty): then the whole set, empty
 * when the Service does not exist. Call before the writer starts; one
 * watch per table. ips is valid for the call only.
 */
typedef void (*cluster_endpoints_fn)(void *ctx, const struct config_ip *ips, size_t n);
void cluster_watch_endpoints(struct cluster *c, const char *ns, const char *name,
			     cluster_endpoints_fn fn, void *ctx);

/* Every resource has been listed once: names under the zone are answered
 * from now on (before, cluster_answer says CLUSTER_UNSYNCED). */
void cluster_set_synced(struct cluster *c);

#define CLUSTER_LIMITS 3 /* the bounds below, named in cluster_limit_names */

struct cluster_stats {
	size_t names;      /* names held in the table: Services, namespaces, the
			    * structure (derived names are not counted) */
	size_t services;
	size_t slices;
	size_t endpoints;  /* endpoint addresses across all slices */
	size_t namespaces;
	size_t pods;       /* this node's pods */
	bool synced;
	/* Changes cut by a bound, by kind (cluster_limit_names: "ports",
	 * "endpoints", "name_length"). */
	uint64_t limited[CLUSTER_LIMITS];
};
void cluster_stats(const struct cluster *c, struct cluster_stats *out);
extern const char *const cluster_limit_names[CLUSTER_LIMITS];

/* ---- read side: workers, under the RCU read lock ---------------------------- */

#define CLUSTER_MAX_CHAIN 8 /* CNAME hops followed */

/* A CNAME chain that leaves the zone, as written into the reply. */
struct cluster_chase {
	const uint8_t *targets[CLUSTER_MAX_CHAIN]; /* each CNAME's target, in order;
						    * valid under the read lock */
	unsigned n;
	uint32_t ttl;
};

enum cluster_result {
	CLUSTER_NOT_LOCAL, /* not ours: try the next source; w is untouched */
	CLUSTER_ANSWERED,  /* w holds the whole answer */
	CLUSTER_UNSYNCED,  /* under the zone, but the first sync is not done */
	CLUSTER_CHASE,     /* w holds a CNAME chain ending outside the zone
			    * (ExternalName), described in *chase: the caller
			    * resolves the last target for the same type and
			    * answers with the chain and its records */
};

/* Answer q (class IN) from the table into w, as zone_answer does. */
enum cluster_result cluster_answer(const struct cluster *c, const struct dns_query *q,
				   struct dns_writer *w, struct cluster_chase *chase);

/*
 * Autopath: when q's name is <base>.<ns>.svc.<zone> and peer is the address
 * of a pod on this node in namespace <ns> (see clients.c for which pods
 * count), the wire length of <base> (its labels, no root): the search list
 * to walk starts there. 0 otherwise, and for a NULL peer.
 */
/*
 * The pod ("namespace/name") of this node that holds peer's address, as the
 * Pods watch knows it (only with autopath or verified pod names; host-network
 * pods are left out); false when none. Any RCU-registered thread; copies.
 */
bool cluster_client_pod(const struct cluster *c, const struct sockaddr_storage *peer, char *out,
			size_t cap);

size_t cluster_autopath_base(const struct cluster *c, const struct dns_query *q,
			     const struct sockaddr_storage *peer);

/*
 * The namespace of the pod of this node at peer's address (one wire label,
 * valid under the read lock), as autopath knows it; NULL for a NULL peer,
 * an address no such pod has (host network, another node, a VM), or
 * without the Pods watch. No allocation, no lock: the hot path's.
 */
const uint8_t *cluster_client_namespace(const struct cluster *c,
					const struct sockaddr_storage *peer);

/* The zone apex, lower-cased wire form (for the upstream's forward zones). */
const uint8_t *cluster_zone(const struct cluster *c);

#endif
