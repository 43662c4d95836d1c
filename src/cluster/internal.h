/*
 * cluster/internal.h — the name table's layout and the writer's model,
 * shared by table.c (the RCU hash of names), answer.c (reading) and
 * model.c / names.c (building). Nothing outside src/cluster/ includes this.
 */
#ifndef LOCALDNS_CLUSTER_INTERNAL_H
#define LOCALDNS_CLUSTER_INTERNAL_H

#include "cluster/cluster.h"

#include <stdatomic.h>

#include <json-c/linkhash.h>
#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

/*
 * One owner name and all its records, immutable once published: a change
 * publishes a new node in its place. data holds the owner (owner_len bytes,
 * lower-cased wire form), then each record as type (2 bytes, host order),
 * rdata length (2 bytes, host order) and rdata (uncompressed wire form),
 * the records of one type adjacent. A node with no records is a name that
 * exists with no data (NODATA).
 */
struct cluster_node {
	struct cds_lfht_node ht;
	struct rcu_head rcu;
	uint32_t rr_len;   /* bytes of records after the owner */
	uint8_t owner_len;
	uint8_t data[];
};

/*
 * A record type of our own (RFC 6895's private-use range), never answered
 * as such: one SRV target and port of a Service, kept in the Service's
 * node. cluster_answer derives from these, at query time, the SRV RRset of
 * the Service's name and those of its _<port>._<proto> names (the weights
 * depend on how many match), the empty non-terminal _<proto>, and the
 * addresses CoreDNS gives an A/AAAA question for an SRV name, so a port
 * costs no name of its own. rdata: the target (wire name), the port (2
 * bytes, network order), the protocol as one label ("\3tcp") and the
 * port's name as one label ("\4http", or "\0" for an unnamed port). One per
 * ClusterIP and Service port, or per endpoint address and EndpointSlice
 * port (headless), duplicates kept: CoreDNS's weights count them. Sorted as
 * the node's records are (bytewise), a target's entries are adjacent.
 */
#define CLUSTER_T_PORT 0xff00

/* Iterating a node's records. */
struct cluster_rr {
	uint16_t type;
	uint16_t rdlen;
	const uint8_t *rdata;
};
bool cluster_node_next(const struct cluster_node *n, size_t *pos, struct cluster_rr *rr);

/* ---- the writer's model -------------------------------------------------- */

struct cluster_ip {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
};

/* A named port: only those get SRV records. */
struct cluster_port {
	char name[16];  /* IANA_SVC_NAME: at most 15 characters */
	char proto[8];  /* lower-cased: tcp, udp, sctp */
	uint16_t port;
};

struct cluster_endpoint {
	struct cluster_ip *ips;
	size_t n_ips;
	bool ready;
	bool is_pod;        /* targetRef is a Pod (cluster.pods: verified) */
	/* Its name under the Service: its hostname, else with
	 * cluster.endpoint_pod_names its targetRef's name when that is one DNS
	 * label; "" = each address's dashed form. */
	char hostname[64];
};

struct cluster_service;

struct cluster_slice {
	char *key;                   /* "ns/name" */
	struct cluster_service *svc; /* the Service it belongs to (maybe not seen yet) */
	struct cluster_slice *next;  /* in svc->slices */
	struct cluster_endpoint *eps;
	size_t n_eps;
	struct cluster_port *ports;
	size_t n_ports;
};

enum cluster_service_kind { SVC_CLUSTER_IP, SVC_HEADLESS, SVC_EXTERNAL_NAME };

/*
 * A Service and its slices. The entry exists while either does: slices may
 * arrive before their Service. `names` and `ptrs` are what the last rebuild
 * published (concatenated wire names), so the next one can remove what is
 * gone.
 */
struct cluster_service {
	char *key;             /* "ns/name" */
	char *ns, *name;
	bool seen;             /* the Service object itself is known */
	enum cluster_service_kind kind;
	struct cluster_ip *ips;
	size_t n_ips;
	char *external_name;
	bool publish_not_ready;
	struct cluster_port *ports;
	size_t n_ports;
	struct cluster_slice *slices;
	uint8_t *names; size_t names_len;
	uint8_t *ptrs;  size_t ptrs_len;
	uint8_t *pods;  size_t pods_len;   /* verified pod names referenced */
};

struct cluster_pod {
	char *key;             /* "ns/name" */
	uint8_t *names; size_t names_len;  /* its pod names (verified mode) */
	struct cluster_ip *clients; size_t n_clients; /* its addresses in c->clients */
};

/*
 * One address of a pod on this node and the pod's namespace (autopath),
 * immutable once published: a change publishes a new entry in its place.
 * `pod` is for the writer only: the pod that published it, since an
 * address can pass to a new pod before the old one is gone, and the old
 * one's removal must then leave it alone.
 */
struct cluster_client {
	struct cds_lfht_node ht;
	struct rcu_head rcu;
	const struct cluster_pod *pod;
	struct cluster_ip ip;
	uint8_t ns[1 + DNS_MAX_LABEL]; /* one wire label, lower-cased */
	char pod_key[];                /* "ns/name", for `localdns ctl top clients` */
};

#define CLUSTER_WATCH_MAX 64 /* addresses reported by cluster_watch_endpoints */

/* watch.c: the Service whose ready endpoints are reported (writer only). */
struct cluster_endpoint_watch {
	char *key;                  /* "ns/name"; NULL: none */
	cluster_endpoints_fn fn;
	void *ctx;
	bool reported;              /* fn has been called once */
	struct config_ip last[CLUSTER_WATCH_MAX];
	size_t n_last;
};

struct cluster {
	struct cds_lfht *ht;
	struct cds_lfht *clients;    /* address -> struct cluster_client */
	uint8_t apex[DNS_MAX_NAME];
	size_t apex_len;
	unsigned apex_labels;
	uint8_t svc_apex[DNS_MAX_NAME]; /* svc.<zone> */
	uint8_t pod_apex[DNS_MAX_NAME]; /* pod.<zone> */
	uint32_t ttl;
	enum config_pods_mode pods;
	bool endpoint_pod_names, noendpoints, ignore_empty_service;
	uint8_t soa[2 * DNS_MAX_NAME + 20];
	uint16_t soa_len;
	/* in-addr.arpa and ip6.arpa: the SOA of a reverse name we answer for
	 * without holding it (outside cluster.fallthrough). */
	uint8_t reverse_soa[2][96];
	uint16_t reverse_soa_len[2];
	/* cluster.fallthrough, wire form, concatenated */
	uint8_t *fallthrough;
	size_t fallthrough_len;
	_Atomic bool synced;
	/* Keys the tables' hash (SipHash): names come from objects tenants
	 * create, and must not be chosen to share a chain. */
	uint8_t hash_key[16];

	/* writer only */
	struct lh_table *services;   /* key -> struct cluster_service */
	struct lh_table *slices;     /* key -> struct cluster_slice */
	struct lh_table *namespaces; /* name -> (the key itself) */
	struct lh_table *local_pods; /* key -> struct cluster_pod */
	struct lh_table *pod_refs;   /* verified pod owner (text) -> count */
	struct cluster_endpoint_watch watch;
	/* for cluster_stats from any thread */
	_Atomic size_t n_names, n_services, n_slices, n_endpoints, n_namespaces, n_pods;
};

/* The tables' hash of bytes (a wire name, an address), under c's key. */
static inline uint64_t cluster_hash(const struct cluster *c, const void *bytes, size_t len)
{
	return dns_siphash24(c->hash_key, bytes, len);
}

/* watch.c: after every rebuild of s (calls the watcher when its set changed,
 * once synced); at the first sync with the watched Service, NULL if absent. */
void cluster_report_endpoints(struct cluster *c, const struct cluster_service *s);
void cluster_report_synced(struct cluster *c, const struct cluster_service *watched);
void cluster_watch_free(struct cluster *c);

/* ---- table.c: the RCU hash of names (writer calls hold the read lock) ---- */

const struct cluster_node *cluster_find(const struct cluster *c, const uint8_t *name, size_t len);
/* Publish owner with these records (replacing any node there); -1 on ENOMEM. */
int cluster_put(struct cluster *c, const uint8_t *owner, size_t owner_len,
		const uint8_t *rrs, size_t rr_len);
void cluster_del(struct cluster *c, const uint8_t *owner, size_t owner_len);

/* A growing record buffer in node layout, for building one name's records. */
struct cluster_rrbuf {
	uint8_t *data;
	size_t len, cap;
};
int cluster_rrbuf_add(struct cluster_rrbuf *b, uint16_t type, const uint8_t *rdata, uint16_t rdlen);

/* ---- clients.c: this node's pod addresses (writer calls hold the read lock) */

/* Publish p's client addresses (none: it is not a client, or it is gone). */
void cluster_clients_set(struct cluster *c, struct cluster_pod *p, const char *ns,
			 const struct cluster_ip *ips, size_t n);
/*
 * Empty ht, freeing every entry (malloc'd, its cds_lfht_node node_offset
 * bytes in), and destroy it. At cluster_free: no reader is left.
 */
void cluster_table_destroy(struct cds_lfht *ht, size_t node_offset);

/* ---- names.c: building owner names and rdata ----------------------------- */

/* "<label>.<label>...<apex>" from text labels (NULL-terminated list); 0 when
 * a label is empty, too long or not a DNS label, or the name is too long. */
size_t cluster_name(uint8_t out[DNS_MAX_NAME], const uint8_t *apex, const char *const *labels);
/* One DNS label: 1..63 letters, digits, '-' or '_'. */
bool cluster_is_label(const char *text);
/* How many labels a wire name has (the root not counted). */
unsigned cluster_name_labels(const uint8_t *name);
/* The dashed form of an IP: 10-0-0-1, 2001-db8--1; one ending in "::" gets
 * a last 0 (fd00--0), as CoreDNS writes it, since a label may not end in '-'. */
void cluster_dashed_ip(const struct cluster_ip *ip, char out[64]);
/* Parse a dashed IP label back; false when it is not one. */
bool cluster_parse_dashed_ip(const uint8_t *label, size_t len, struct cluster_ip *out);
/* d.c.b.a.in-addr.arpa or the ip6.arpa nibble name (no allocation, no lock:
 * answer.c uses it on the hot path). */
size_t cluster_reverse_name(const struct cluster_ip *ip, uint8_t out[DNS_MAX_NAME]);
/* Which reverse zone name is in: 0 in-addr.arpa, 1 ip6.arpa, -1 neither. */
int cluster_reverse_zone(const uint8_t *name);
/* Reverse zone i's apex (wire form). */
const uint8_t *cluster_reverse_apex(int i);
/* "10.0.0.1" / "fd00::1" to an address; false otherwise. */
bool cluster_parse_ip(const char *text, struct cluster_ip *out);

#endif
