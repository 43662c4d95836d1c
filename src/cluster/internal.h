/*
 * cluster/internal.h — the table's layout and the writer's model, shared by
 * table.c (the RCU hash of names), index.c (the endpoint and ClusterIP
 * indexes), parse.c (objects into snapshots), model.c (the writer),
 * service.c and answer.c (reading). Nothing outside src/cluster/ includes
 * this.
 *
 * What is held: a node per name that is not derived (the apex, dns-version,
 * svc, pod, each namespace's two names, this node's pod names in verified
 * mode) and one per Service, the Service itself. A Service points to an
 * immutable snapshot of its spec and to an RCU list of immutable snapshots
 * of its EndpointSlices; a change replaces one snapshot. Every other name
 * (SRV, _<port>._<proto>, endpoint names, PTRs, pod names behind
 * endpoints) is derived at query time from those snapshots and two
 * indexes: endpoint address -> slice entries, and (Service, hostname) ->
 * slice entries (index.c), plus ClusterIP -> spec.
 */
#ifndef LOCALDNS_CLUSTER_INTERNAL_H
#define LOCALDNS_CLUSTER_INTERNAL_H

#include "cluster/cluster.h"
#include "cluster/objects.h"

#include <stdatomic.h>

#include <json-c/linkhash.h>
#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

/* ---- the name table ---------------------------------------------------------- */

enum cluster_named_kind {
	NAMED_RECORDS, /* struct cluster_node */
	NAMED_SERVICE, /* struct cluster_service */
};

/* What every entry of the name table starts with. */
struct cluster_named {
	struct cds_lfht_node ht;
	struct rcu_head rcu;
	uint8_t kind;
	uint8_t owner_len;
};

/*
 * One owner name and all its records, immutable once published: a change
 * publishes a new node in its place. data holds the owner (owner_len bytes,
 * lower-cased wire form), then each record as type (2 bytes, host order),
 * rdata length (2 bytes, host order) and rdata (uncompressed wire form),
 * the records of one type adjacent. A node with no records is a name that
 * exists with no data (NODATA).
 */
struct cluster_node {
	struct cluster_named h;
	uint32_t rr_len;   /* bytes of records after the owner */
	uint8_t data[];
};

/* Iterating a node's records. */
struct cluster_rr {
	uint16_t type;
	uint16_t rdlen;
	const uint8_t *rdata;
};
bool cluster_node_next(const struct cluster_node *n, size_t *pos, struct cluster_rr *rr);

/* ---- addresses and ports ----------------------------------------------------- */

struct cluster_ip {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
};

/*
 * A port of a Service or an EndpointSlice, its labels in wire form as
 * they appear in _<name>._<proto> (the underscore left out), zero-padded.
 */
struct cluster_port {
	uint8_t name[16];  /* "\4http"; "\0" for an unnamed port (IANA_SVC_NAME: <= 15) */
	uint8_t proto[8];  /* "\3tcp", lower-cased */
	uint16_t port;
};

/* ---- a Service's spec -------------------------------------------------------- */

enum cluster_service_kind { SVC_CLUSTER_IP, SVC_HEADLESS, SVC_EXTERNAL_NAME };

struct cluster_spec;
struct cluster_service;

/* A ClusterIP's key in c->vips (address -> the spec holding it). */
struct cluster_vip {
	struct cds_lfht_node ht;
	const struct cluster_spec *spec;
};

#define CLUSTER_MAX_CLUSTER_IPS 8 /* the API allows 2, one per family */

/* What the Service object says, immutable; replaced whole on a change. */
struct cluster_spec {
	struct rcu_head rcu;
	struct cluster_service *svc;
	uint8_t kind;              /* enum cluster_service_kind */
	bool publish_not_ready;
	uint8_t n_ips;
	uint8_t target_len;        /* ExternalName's target (wire); 0: none */
	uint16_t n_ports;
	struct cluster_vip *vips;  /* [n_ips], in c->vips */
	struct cluster_ip *ips;    /* [n_ips] */
	struct cluster_port *ports; /* [n_ports] and its index (ports.c) */
	const uint8_t *target;     /* ExternalName, wire form */
};

/* ---- an EndpointSlice -------------------------------------------------------- */

/* A key of c->endpoints: one entry's address, or one hostname group. */
struct cluster_ep_node {
	struct cds_lfht_node ht;
	const struct cluster_eps *eps;
};

/* Entry flags. "Group": the entries of one slice with one name (a hostname,
 * or for entries without one, their address). */
enum {
	EP_READY = 1,           /* conditions.ready (absent means ready) */
	EP_POD = 2,             /* targetRef is a Pod (cluster.pods: verified) */
	EP_ADDR_FIRST = 4,      /* the slice's first entry with this address */
	EP_ADDR_READY = 8,      /* some entry of the slice with this address is ready */
	EP_NAME_FIRST = 16,     /* first entry of its group */
	EP_NAME_FIRST_READY = 32, /* first ready entry of its group */
};

/* Entries of one slice sharing a hostname: [first, end), sorted by address. */
struct cluster_group {
	uint32_t first, end;
	uint32_t label;         /* offset of its wire label in eps->labels */
	bool ready;             /* one of them is ready */
};

/*
 * One EndpointSlice's endpoints, immutable; a change to the slice publishes
 * a new snapshot in its place (in the Service's list and in the index) and
 * frees this one after a grace period. One entry per endpoint address (an
 * endpoint with two addresses is two entries with the same hostname), an
 * address with one name listed twice is one entry. Entries without a
 * hostname come first, sorted by address; then the hostname groups, by
 * hostname. Everything is in one allocation.
 */
struct cluster_eps {
	struct cluster_eps *_Atomic next; /* in svc->slices (cluster_next_eps) */
	struct rcu_head rcu;
	struct cluster_service *svc;
	uint64_t seq;                  /* the slice's, kept across its snapshots */
	uint32_t n, n_ready;           /* entries; ready ones */
	uint32_t named;                /* the first entry with a hostname */
	uint32_t n_groups;
	uint16_t n_ports;
	uint8_t family, alen;          /* AF_INET/4 or AF_INET6/16 */
	struct cluster_ep_node *addr_nodes; /* [n], in c->endpoints */
	struct cluster_ep_node *name_nodes; /* [n_groups], in c->endpoints */
	struct cluster_group *groups;  /* [n_groups] */
	struct cluster_port *ports;    /* [n_ports] and its index (ports.c) */
	uint8_t *addrs;                /* [n * alen] */
	uint8_t *flags;                /* [n] */
	uint8_t *labels;               /* the groups' wire labels */
	/* A multi-cluster slice's source cluster (one wire label): its
	 * endpoints are named <ep>.<cluster>.<svc>. NULL in the cluster zone. */
	const uint8_t *cluster;
};

static inline const uint8_t *eps_addr(const struct cluster_eps *e, uint32_t i)
{
	return e->addrs + (size_t)i * e->alen;
}

/* The group of entry i (>= e->named). */
const struct cluster_group *cluster_eps_group_of(const struct cluster_eps *e, uint32_t i);

/* ---- a Service ---------------------------------------------------------------- */

enum cluster_limit_kind { LIMIT_PORTS, LIMIT_ENDPOINTS, LIMIT_NAME_LENGTH, LIMIT_KINDS };

/*
 * A Service as the table knows it: its name's node, its spec (NULL while
 * only its slices are known, or after it is deleted: the name does not
 * exist then) and its slices. It stays while either is there.
 */
struct cluster_service {
	struct cluster_named h;       /* in c->ht under owner */
	/* Both published with release stores and read with acquire loads
	 * (cluster_spec_of, cluster_first_eps): C11 atomics rather than
	 * liburcu's list and pointer macros, whose plain stores ThreadSanitizer
	 * (make tsan) cannot tell from a race. */
	struct cluster_spec *_Atomic spec;
	struct cluster_eps *_Atomic slices; /* singly linked, in the order first seen */
	/* Pairs of entries (or hostname groups) in two different slices with
	 * one address (hostname): while 0, readers skip looking for repeats
	 * across slices (index.c keeps it). */
	_Atomic uint32_t shared;
	/* writer only */
	uint32_t n_slices, n_addresses;
	uint8_t limited;              /* 1 << enum cluster_limit_kind: bounds it is over now */
	uint8_t owner[];              /* <name>.<ns>.svc.<zone>, wire form */
};

/* Readers: s's spec and slices, under the RCU read lock. */
static inline const struct cluster_spec *cluster_spec_of(const struct cluster_service *s)
{
	return atomic_load_explicit(&s->spec, memory_order_acquire);
}

static inline const struct cluster_eps *cluster_first_eps(const struct cluster_service *s)
{
	return atomic_load_explicit(&s->slices, memory_order_acquire);
}

static inline const struct cluster_eps *cluster_next_eps(const struct cluster_eps *e)
{
	return atomic_load_explicit(&e->next, memory_order_acquire);
}

/* The writer's handle of one EndpointSlice, by "ns/name". */
struct cluster_slice {
	struct cds_lfht_node ht;      /* in c->slices (writer only) */
	struct rcu_head rcu;
	struct cluster_service *svc;  /* the Service it belongs to (maybe not seen yet) */
	struct cluster_eps *eps;      /* published; NULL: nothing to serve */
	uint64_t seq;
	char key[];
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
	uint8_t owner[DNS_MAX_NAME]; /* its name, wire form; owner_len 0: none */
	size_t owner_len;
	cluster_endpoints_fn fn;
	void *ctx;
	bool reported;              /* fn has been called once */
	struct config_ip last[CLUSTER_WATCH_MAX];
	size_t n_last;
};

struct cluster {
	struct cds_lfht *ht;         /* owner name -> struct cluster_named */
	struct cds_lfht *endpoints;  /* address or (Service, hostname) -> struct cluster_ep_node */
	struct cds_lfht *vips;       /* ClusterIP -> struct cluster_vip */
	struct cds_lfht *clients;    /* address -> struct cluster_client */
	uint8_t apex[DNS_MAX_NAME];
	size_t apex_len;
	unsigned apex_labels;
	uint8_t svc_apex[DNS_MAX_NAME]; /* svc.<zone> */
	uint8_t pod_apex[DNS_MAX_NAME]; /* pod.<zone> */
	uint32_t ttl;
	bool multicluster;           /* the clusterset zone: Services are ServiceImports */
	enum config_pods_mode pods;
	bool endpoint_pod_names, noendpoints, ignore_empty_service;
	uint32_t max_ports, max_endpoints; /* cluster.max_ports_per_service, ..._endpoints_... */
	uint8_t soa[2 * DNS_MAX_NAME + 20];
	uint16_t soa_len;
	/* in-addr.arpa and ip6.arpa: the SOA of a reverse name we answer for
	 * without holding it (outside cluster.fallthrough). */
	uint8_t reverse_soa[2][96];
	uint16_t reverse_soa_len[2];
	/* the same SOAs, encoded once for negative answers (dns_apex_rr) */
	struct dns_apex_rr soa_rr, reverse_soa_rr[2];
	/* cluster.fallthrough, wire form, concatenated */
	uint8_t *fallthrough;
	size_t fallthrough_len;
	_Atomic bool synced;
	/* Keys the tables' hash (SipHash): names come from objects tenants
	 * create, and must not be chosen to share a chain. */
	uint8_t hash_key[16];

	/* writer only */
	struct cds_lfht *slices;     /* "ns/name" -> struct cluster_slice */
	size_t endpoint_keys, vip_keys; /* nodes in c->endpoints, c->vips */
	/* buckets of ht, endpoints, vips and slices (cluster_fit_tables) */
	unsigned long buckets[4];
	uint64_t next_seq;
	struct lh_table *namespaces; /* name -> (the key itself) */
	struct lh_table *local_pods; /* key -> struct cluster_pod */
	struct lh_table *pod_refs;   /* verified pod owner (text) -> count */
	struct cluster_endpoint_watch watch;
	/* for cluster_stats from any thread */
	_Atomic size_t n_names, n_services, n_slices, n_endpoints, n_namespaces, n_pods;
	_Atomic uint64_t n_limited[LIMIT_KINDS];
};

/* The tables' hash of bytes (a wire name, an address), under c's key. */
static inline uint64_t cluster_hash(const struct cluster *c, const void *bytes, size_t len)
{
	return dns_siphash13(c->hash_key, bytes, len);
}

static inline const uint8_t *cluster_named_owner(const struct cluster_named *n)
{
	return n->kind == NAMED_RECORDS ? ((const struct cluster_node *)n)->data
					: ((const struct cluster_service *)n)->owner;
}

/* watch.c: after every change to s (calls the watcher when its set changed,
 * once synced); at the first sync with the watched Service, NULL if absent. */
void cluster_report_endpoints(struct cluster *c, const struct cluster_service *s);
void cluster_report_synced(struct cluster *c, const struct cluster_service *watched);
void cluster_watch_free(struct cluster *c);

/* ---- table.c: the RCU hash of names (writer calls hold the read lock) ---- */

const struct cluster_named *cluster_find(const struct cluster *c, const uint8_t *name,
					 size_t len);
/* A records node, or NULL (none, or a Service's). */
const struct cluster_node *cluster_find_node(const struct cluster *c, const uint8_t *name,
					     size_t len);
/* A Service by its owner name, or NULL. */
struct cluster_service *cluster_find_service(const struct cluster *c, const uint8_t *name,
					     size_t len);
/* Publish owner with these records (replacing any node there); -1 on ENOMEM. */
int cluster_put(struct cluster *c, const uint8_t *owner, size_t owner_len,
		const uint8_t *rrs, size_t rr_len);
void cluster_del(struct cluster *c, const uint8_t *owner, size_t owner_len);
/* Hand what readers may still hold to free_fn after a grace period (which
 * begins with TSAN_GRACE_ACQUIRE: util/tsan.h). */
void cluster_retire(struct rcu_head *head, void (*free_fn)(struct rcu_head *));
/* Add a Service's node (its owner not in the table) / take it out; the
 * caller frees it after a grace period. */
void cluster_add_service(struct cluster *c, struct cluster_service *s);
void cluster_del_service(struct cluster *c, struct cluster_service *s);

/* Writer, outside the read lock: resize the tables the writer sizes (ht,
 * endpoints, vips, slices) to what they hold; cheap when nothing is due. */
void cluster_fit_tables(struct cluster *c);
/* A table the writer sizes, made with its first buckets (in *buckets). */
struct cds_lfht *cluster_table_new(unsigned long *buckets);

/* A growing record buffer in node layout, for building one name's records. */
struct cluster_rrbuf {
	uint8_t *data;
	size_t len, cap;
};
int cluster_rrbuf_add(struct cluster_rrbuf *b, uint16_t type, const uint8_t *rdata, uint16_t rdlen);

/* ---- index.c: the endpoint and ClusterIP indexes ---------------------------- */

/* Writer (read lock held): put a snapshot's keys in / take them out,
 * keeping e->svc->shared. */
void cluster_index_add_eps(struct cluster *c, struct cluster_eps *e);
void cluster_index_del_eps(struct cluster *c, struct cluster_eps *e);
void cluster_index_add_spec(struct cluster *c, struct cluster_spec *s);
void cluster_index_del_spec(struct cluster *c, struct cluster_spec *s);

/* Reader: iterating the entries with one address, or the groups with one
 * (Service, hostname). */
struct cluster_index_iter {
	struct cds_lfht_iter it;
	struct cluster_ip ip;            /* address keys: family 0 for hostname keys */
	const struct cluster_service *svc; /* hostname keys */
	const uint8_t *label;
};
/* The first / next entry with address ip: *eps and *i; false when none is left. */
bool cluster_addr_first(const struct cluster *c, const struct cluster_ip *ip,
			struct cluster_index_iter *it, const struct cluster_eps **eps, uint32_t *i);
bool cluster_addr_next(const struct cluster *c, struct cluster_index_iter *it,
		       const struct cluster_eps **eps, uint32_t *i);
/* The first / next hostname group named label (a wire label) of Service s. */
bool cluster_name_first(const struct cluster *c, const struct cluster_service *s,
			const uint8_t *label, struct cluster_index_iter *it,
			const struct cluster_eps **eps, const struct cluster_group **g);
bool cluster_name_next(const struct cluster *c, struct cluster_index_iter *it,
		       const struct cluster_eps **eps, const struct cluster_group **g);
/* The first / next spec holding ClusterIP ip. */
const struct cluster_spec *cluster_vip_first(const struct cluster *c, const struct cluster_ip *ip,
					     struct cluster_index_iter *it);
const struct cluster_spec *cluster_vip_next(const struct cluster *c, struct cluster_index_iter *it);

/* ---- parse.c: objects into snapshots (writer) ---------------------------------- */

/*
 * s's spec from a Service's "spec", for Service svc (key: "ns/name", for
 * logs); NULL when out of memory. Ports past c->max_ports are left out and
 * *limited gets 1 << LIMIT_PORTS.
 */
struct cluster_spec *cluster_parse_spec(struct cluster *c, struct cluster_service *svc,
					const struct kube_json *spec, const char *key,
					uint8_t *limited);
/*
 * A slice's snapshot from an EndpointSlice, with at most max_entries
 * entries (the rest left out: *limited gets 1 << LIMIT_ENDPOINTS; ports past
 * c->max_ports: 1 << LIMIT_PORTS; hostnames that would make a name past 255
 * bytes under owner: 1 << LIMIT_NAME_LENGTH, the address's dashed name is
 * used). NULL when it holds nothing to serve (an FQDN slice, no endpoints)
 * or out of memory (*oom).
 */
struct cluster_eps *cluster_parse_eps(struct cluster *c, const struct kube_json *slice,
				      size_t owner_len, uint32_t max_entries, uint8_t *limited,
				      bool *oom);

/* ---- ports.c: port lists and which ports a name selects ---------------------- */

/* Lists of more ports than this have a name index (2 bytes a port). */
#define CLUSTER_PORT_INDEX_MIN 8

/* Bytes for a list of up to n ports and its index, which follows the
 * ports actually kept: allocate this much for ports[]. */
size_t cluster_ports_bytes(size_t n);
/* Writer: sort ports[0..n) by number and write its index behind it; false
 * when out of memory. */
bool cluster_ports_sort(struct cluster_port *ports, size_t n);

/*
 * Which ports a name selects: all of them (the Service's own name), one
 * port name and protocol (_<name>._<proto>), or the named ports of one
 * protocol (_<proto>). Labels as in the question (lower-cased, the
 * underscore included); NULL: any.
 */
struct cluster_port_query {
	const uint8_t *name, *proto;
	bool named_only;
};

/* How many ports of the list pq selects. */
unsigned cluster_ports_matching(const struct cluster_port_query *pq,
				const struct cluster_port *ports, size_t n);
/* Whether pq selects a port numbered `port` (0: any) of the list. */
bool cluster_ports_have(const struct cluster_port_query *pq, const struct cluster_port *ports,
			size_t n, uint16_t port);

/* Walking the ports pq selects, in the list's order (by number). */
struct cluster_port_walk {
	const struct cluster_port_query *pq;
	const struct cluster_port *ports;
	const uint16_t *index;   /* walking a range of the index; NULL: the list */
	size_t pos, end;
	uint16_t last;           /* the number last returned, once seen */
	bool seen;
};
void cluster_port_walk_begin(struct cluster_port_walk *w, const struct cluster_port_query *pq,
			     const struct cluster_port *ports, size_t n);
/* The next selected port, or NULL. */
const struct cluster_port *cluster_port_walk_next(struct cluster_port_walk *w);
/* The next selected port with a number not returned yet (the one record a
 * target gets for a number), or NULL. */
const struct cluster_port *cluster_port_walk_next_number(struct cluster_port_walk *w);

/* ---- service.c: answers derived from Services (read side) --------------------- */

/* Whether the name of s exists now (its spec, and for a headless Service
 * or with ignore_empty_service, a serving endpoint). */
bool cluster_service_exists(const struct cluster *c, const struct cluster_service *s,
			    const struct cluster_spec *spec);
/* The answer at s's own name for qtype (not CNAME chasing: answer.c does
 * that); false when it has none of that type (NODATA). */
bool cluster_service_answer(const struct cluster *c, struct dns_writer *w,
			    const struct cluster_service *s, const struct cluster_spec *spec,
			    const uint8_t *owner, uint16_t qtype);
/* A name below a Service (_<port>._<proto>, _<proto>, an endpoint name), or
 * a pod name behind an endpoint (verified): answered, or false when it is
 * no such name. */
bool cluster_derived_answer(const struct cluster *c, struct dns_writer *w, const uint8_t *name,
			    uint16_t qtype, const uint8_t *owner);
/* The PTRs of ip, or false when it has none. With w NULL only whether. */
bool cluster_reverse_answer(const struct cluster *c, struct dns_writer *w,
			    const struct cluster_ip *ip, const uint8_t *owner);

/* answer.c: the record writer every answer goes through (TTLs by type: cluster_ttl_of). */
uint32_t cluster_ttl_of(const struct cluster *c, uint16_t type);
bool cluster_add_rr(const struct cluster *c, struct dns_writer *w, enum dns_section section,
		    const uint8_t *owner, uint16_t type, const uint8_t *rdata, size_t rdlen);
void cluster_add_soa(const struct cluster *c, struct dns_writer *w);

/* ---- clients.c: this node's pod addresses (writer calls hold the read lock) */

/* Publish p's client addresses (none: it is not a client, or it is gone). */
void cluster_clients_set(struct cluster *c, struct cluster_pod *p, const char *ns,
			 const struct cluster_ip *ips, size_t n);
/*
 * Empty ht, passing every entry to free_entry (NULL: its memory is someone
 * else's), and destroy it. At cluster_free: no reader is left.
 */
void cluster_table_destroy(struct cds_lfht *ht, void (*free_entry)(struct cds_lfht_node *));

/* ---- names.c: building owner names and rdata ----------------------------- */

/* "<label>.<label>...<apex>" from text labels (NULL-terminated list); 0 when
 * a label is empty, too long or not a DNS label, or the name is too long. */
size_t cluster_name(uint8_t out[DNS_MAX_NAME], const uint8_t *apex, const char *const *labels);
/* One DNS label: 1..63 letters, digits, '-' or '_'. */
bool cluster_is_label(const char *text);
/* How many labels a wire name has (the root not counted). */
unsigned cluster_name_labels(const uint8_t *name);
/* The dashed form of an IP: 10-0-0-1, 2001-db8--1; one ending in "::" gets
 * a last 0 (fd00--0), as CoreDNS writes it, since a label may not end in '-'.
 * No allocation, no lock (service.c writes it on the hot path). */
void cluster_dashed_ip(const struct cluster_ip *ip, char out[64]);
/* The same as one wire label (length byte first); its length with it. */
size_t cluster_dashed_label(const struct cluster_ip *ip, uint8_t out[64]);
/* Parse a dashed IP label back; false when it is not one. */
bool cluster_parse_dashed_ip(const uint8_t *label, size_t len, struct cluster_ip *out);
/* d.c.b.a.in-addr.arpa or the ip6.arpa nibble name (no allocation, no lock). */
size_t cluster_reverse_name(const struct cluster_ip *ip, uint8_t out[DNS_MAX_NAME]);
/* The address a full reverse name spells (its canonical form only); false
 * for anything else (a shorter name, a leading zero, upper-case hex). */
bool cluster_parse_reverse_name(const uint8_t *name, struct cluster_ip *out);
/* Which reverse zone name is in: 0 in-addr.arpa, 1 ip6.arpa, -1 neither. */
int cluster_reverse_zone(const uint8_t *name);
/* Reverse zone i's apex (wire form). */
const uint8_t *cluster_reverse_apex(int i);
/* "10.0.0.1" / "fd00::1" to an address; false otherwise. */
bool cluster_parse_ip(const char *text, struct cluster_ip *out);

#endif
