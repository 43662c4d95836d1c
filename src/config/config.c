/*
 * config/config.c — loads config.yaml into struct config (see config.h).
 *
 * The format is described by tables, not code: each mapping (the top level,
 * every section, a static record, an SRV entry, a forward zone) has a
 * schema listing its keys with their value type, where the value lives in
 * the struct, its default written in the key's own syntax, its limits, and
 * how a reload applies a change to it (enum config_reload: restart-only, or
 * which of daemon/reload.c's steps take it in).
 * One walker checks every mapping against its schema, so unknown keys,
 * duplicate keys, type errors and defaults behave the same everywhere, and
 * config_free walks the same tables, so a new string or list field is freed
 * without anyone having to remember it. Rules that span keys (min_ttl <=
 * max_ttl, a CNAME stands alone) are a schema's check function, run after
 * its mapping is read.
 *
 * We use libyaml's document API: configs are small, and a tree gives every
 * node its position for messages. Scalars are typed by the schema, not by
 * YAML's resolver, so `port: "53"` and `port: 53` mean the same.
 *
 * The first problem stops the load. It is formatted once, as
 * "FILE:LINE:COL: key.path: what is wrong", and everything built so far is
 * freed, so a bad reload leaves the running configuration alone.
 */
#include "config/config.h"
#include "util/file.h"
#include "util/hash.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#ifdef LOCALDNS_VERSION
#define DEFAULT_CHAOS_VERSION "localdns " LOCALDNS_VERSION
#else
#define DEFAULT_CHAOS_VERSION "localdns"
#endif

/* RFC 2181 section 8: a TTL is at most 2^31 - 1 seconds. */
#define TTL_MAX 2147483647u
/* A record without a ttl key; becomes cluster.ttl once the whole file is read. */
#define TTL_FROM_CLUSTER UINT32_MAX
/* Files we read whole; a config larger than this is a mistake (or /dev/zero). */
#define FILE_MAX (16u << 20)
/*
 * List and map elements across the whole load. An alias is walked each time
 * it is used, so a small file could otherwise expand quadratically.
 */
#define ELEMENTS_MAX (1u << 20)
#define PATH_LEN 320
#define WHY_LEN 320

/* How a value is spelled; see set_scalar for each. */
enum vtype {
	V_BOOL,
	V_UINT,     /* decimal integer */
	V_DURATION, /* "10s", stored in milliseconds */
	V_SECONDS,  /* "5s", stored in whole seconds (TTLs) */
	V_SIZE,     /* "64MiB", stored in bytes */
	V_ENUM,     /* one of key->names, stored as its index */
	V_STRING,   /* owned char * */
	V_NAME,     /* owned char *, a DNS name normalised by config_value_name */
	V_LISTEN,   /* owned char *, "" (off) or a normalised ip:port */
	V_PATH,     /* owned char *, relative paths resolved against the config's directory */
	V_OBJECT,   /* owned char *, "" (off) or a Kubernetes "namespace/name" */
	V_IP,       /* struct config_ip */
	V_CIDR,     /* struct config_cidr */
	V_HOSTPORT, /* struct config_hostport, port 53 unless given */
	V_SERVER,   /* the same, with an optional "#TLS-NAME" (upstream servers) */
	V_MAPPING,  /* a nested mapping described by key->sub */
};

enum shape {
	ONE,  /* a single value */
	LIST, /* a YAML sequence, stored as an array and a size_t count */
	MAP,  /* a YAML mapping of name -> value, stored as an array of key->sub
		 structs whose first key is filled from the name and whose
		 second is filled from the value */
};

enum {
	F_REQUIRED = 1 << 0,
	F_NONEMPTY = 1 << 1, /* LIST/MAP: at least one element */
	F_NO_WILDCARD = 1 << 2, /* V_IP: refuse 0.0.0.0 and :: */
	F_V4_ONLY = 1 << 3,
	F_V6_ONLY = 1 << 4,
	F_UNIQUE = 1 << 5, /* V_IP LIST: no address twice */
};

struct loader;
struct schema;

struct key {
	const char *name;
	enum vtype type;
	enum shape shape;
	size_t off;       /* the field; for LIST and MAP the array pointer */
	size_t count_off; /* LIST and MAP: the element count (size_t) */
	size_t size;      /* the field, or one array element */
	uint64_t min, max; /* numbers: bounds in the stored unit, max 0 = the
			      field's own limit; strings: byte length, max 0 =
			      unlimited */
	const char *const *names; /* V_ENUM: names in enum order, NULL-terminated */
	const struct schema *sub; /* V_MAPPING */
	const char *def;  /* default in the key's own syntax; NULL = zero/empty/NULL.
			     For a LIST: its single element. */
	unsigned flags;
	unsigned reload;  /* enum config_reload; every key of a section has one
			     (test_config.c checks), keys inside a list of
			     mappings have none (their list is the key) */
};

struct schema {
	const struct key *keys;
	size_t n_keys;
	/* Cross-key rules, run after the mapping (possibly null) is read. */
	int (*check)(struct loader *ld, const yaml_node_t *map, const char *path, void *base);
};

struct loader {
	struct config *cfg;
	yaml_document_t *doc;
	const char *file; /* name for messages: an entry of cfg->files */
	char *dir;        /* directory of the main file, for static.files */
	size_t elements;  /* list and map elements so far, against ELEMENTS_MAX */
	char *err;
	size_t errlen;
};

#define FIELD(T, m) .off = offsetof(T, m), .size = sizeof(((T *)0)->m)
#define ARRAY(T, m, n) .off = offsetof(T, m), .count_off = offsetof(T, n), \
		       .size = sizeof(*((T *)0)->m)
#define CFG(m) FIELD(struct config, m)
#define CFG_LIST(m, n) .shape = LIST, ARRAY(struct config, m, n)
#define SCHEMA(keys, check) { keys, sizeof keys / sizeof keys[0], check }

static int record_check(struct loader *, const yaml_node_t *, const char *, void *);
static int static_check(struct loader *, const yaml_node_t *, const char *, void *);
static int cache_check(struct loader *, const yaml_node_t *, const char *, void *);
static int cluster_check(struct loader *, const yaml_node_t *, const char *, void *);
static int top_check(struct loader *, const yaml_node_t *, const char *, void *);
static int upstream_check(struct loader *, const yaml_node_t *, const char *, void *);
static int dnstap_check(struct loader *, const yaml_node_t *, const char *, void *);
static int dns64_check(struct loader *, const yaml_node_t *, const char *, void *);

static const char *const interface_kinds[] = {"dummy", "loopback", NULL};
static const char *const resolver_places[] = {"auto", "own_thread", "first_worker", NULL};
static const char *const pods_modes[] = {"disabled", "insecure", "verified", NULL};
static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};
static const char *const log_formats[] = {"logfmt", "json", NULL};

static const struct key listen_keys[] = {
	{"addresses", V_IP, CFG_LIST(listen.addresses, listen.n_addresses),
	 .def = "169.254.20.10", .flags = F_NONEMPTY | F_NO_WILDCARD | F_UNIQUE,
	 .reload = CONFIG_APPLY_LISTEN},
	{"allow", V_CIDR, CFG_LIST(listen.allow, listen.n_allow), .flags = F_NONEMPTY,
	 .reload = CONFIG_APPLY_SOURCES},
	{"port", V_UINT, CFG(listen.port), .min = 1, .def = "53", .reload = CONFIG_APPLY_LISTEN},
	{"workers", V_UINT, CFG(listen.workers), .max = 1024, .def = "0",
	 .reload = CONFIG_RESTART_ONLY},
	{"tcp_max_connections", V_UINT, CFG(listen.tcp_max_connections), .min = 1,
	 .max = 1000000, .def = "1024", .reload = CONFIG_RESTART_ONLY},
	{"tcp_idle_timeout", V_DURATION, CFG(listen.tcp_idle_timeout_ms), .min = 1,
	 .def = "10s", .reload = CONFIG_APPLY_SERVER},
	{"tcp_max_connections_per_client", V_UINT, CFG(listen.tcp_max_connections_per_client),
	 .min = 1, .max = 65535, .def = "64", .reload = CONFIG_APPLY_SERVER},
	{"ipv6_client_prefix_length", V_UINT, CFG(listen.ipv6_client_prefix_length), .min = 32,
	 .max = 128, .def = "128", .reload = CONFIG_RESTART_ONLY},
	{"tcp_max_pending_queries", V_UINT, CFG(listen.tcp_max_pending_queries), .min = 1,
	 .max = 65535, .def = "64", .reload = CONFIG_APPLY_SERVER},
	{"tcp_output_budget", V_SIZE, CFG(listen.tcp_output_budget), .min = 65536,
	 .max = 1ull << 32, .def = "4MiB", .reload = CONFIG_APPLY_SERVER},
	{"tcp_query_timeout", V_DURATION, CFG(listen.tcp_query_timeout_ms), .min = 1,
	 .def = "2s", .reload = CONFIG_APPLY_SERVER},
	{"udp_max_payload", V_UINT, CFG(listen.udp_max_payload), .min = 512, .max = 4096,
	 .def = "1232", .reload = CONFIG_APPLY_SOURCES},
	/* SO_RCVBUF takes an int and the kernel doubles it. */
	{"udp_rcvbuf", V_SIZE, CFG(listen.udp_rcvbuf), .min = 4096, .max = 1u << 30,
	 .def = "4MiB", .reload = CONFIG_APPLY_SERVER},
};

static const struct key interface_keys[] = {
	{"manage", V_BOOL, CFG(interface.manage), .def = "true", .reload = CONFIG_RESTART_ONLY},
	/* IFNAMSIZ - 1 */
	{"name", V_STRING, CFG(interface.name), .min = 1, .max = 15, .def = "localdns",
	 .reload = CONFIG_RESTART_ONLY},
	{"kind", V_ENUM, CFG(interface.kind), .names = interface_kinds, .def = "dummy",
	 .reload = CONFIG_RESTART_ONLY},
};

static const struct key nftables_keys[] = {
	{"enabled", V_BOOL, CFG(nftables.enabled), .def = "true", .reload = CONFIG_RESTART_ONLY},
	{"table", V_STRING, CFG(nftables.table), .min = 1, .max = 255, .def = "localdns",
	 .reload = CONFIG_RESTART_ONLY},
	{"intercept", V_IP, CFG_LIST(nftables.intercept, nftables.n_intercept),
	 .flags = F_NO_WILDCARD | F_UNIQUE, .reload = CONFIG_APPLY_LISTEN},
	{"teardown", V_BOOL, CFG(nftables.teardown), .def = "false", .reload = CONFIG_APPLY_NODE},
	{"reassert_interval", V_DURATION, CFG(nftables.reassert_interval_ms), .min = 1000,
	 .def = "30s", .reload = CONFIG_APPLY_NODE},
	{"fallback_endpoints", V_IP,
	 CFG_LIST(nftables.fallback_endpoints, nftables.n_fallback_endpoints),
	 .flags = F_NO_WILDCARD | F_UNIQUE, .reload = CONFIG_RESTART_ONLY},
	{"fallback_service", V_OBJECT, CFG(nftables.fallback_service),
	 .def = "kube-system/kube-dns", .reload = CONFIG_RESTART_ONLY},
};

static const struct key cluster_keys[] = {
	{"domain", V_NAME, CFG(cluster.domain), .def = "cluster.local",
	 .reload = CONFIG_RESTART_ONLY},
	{"ttl", V_SECONDS, CFG(cluster.ttl), .max = TTL_MAX, .def = "5s",
	 .reload = CONFIG_RESTART_ONLY},
	{"pods", V_ENUM, CFG(cluster.pods), .names = pods_modes, .def = "insecure",
	 .reload = CONFIG_RESTART_ONLY},
	/* They become forward zones, and send unsynced cluster names upstream. */
	{"fallback_servers", V_HOSTPORT,
	 CFG_LIST(cluster.fallback_servers, cluster.n_fallback_servers),
	 .reload = CONFIG_APPLY_UPSTREAM | CONFIG_APPLY_SOURCES},
	/* Autopath needs this node's Pods: the watch follows it (pods is restart-only). */
	{"autopath", V_BOOL, CFG(cluster.autopath), .def = "false",
	 .reload = CONFIG_APPLY_SOURCES | CONFIG_APPLY_PODS},
	{"endpoint_pod_names", V_BOOL, CFG(cluster.endpoint_pod_names), .def = "false",
	 .reload = CONFIG_RESTART_ONLY},
	{"noendpoints", V_BOOL, CFG(cluster.noendpoints), .def = "false",
	 .reload = CONFIG_RESTART_ONLY},
	{"ignore_empty_service", V_BOOL, CFG(cluster.ignore_empty_service), .def = "false",
	 .reload = CONFIG_RESTART_ONLY},
	{"max_ports_per_service", V_UINT, CFG(cluster.max_ports_per_service), .min = 1,
	 .max = 65535, .def = "1024", .reload = CONFIG_RESTART_ONLY},
	{"max_endpoints_per_service", V_UINT, CFG(cluster.max_endpoints_per_service), .min = 1,
	 .max = 10000000, .def = "20000", .reload = CONFIG_RESTART_ONLY},
	{"fallthrough", V_NAME, CFG_LIST(cluster.fallthrough, cluster.n_fallthrough),
	 .def = "in-addr.arpa ip6.arpa", .reload = CONFIG_RESTART_ONLY},
};

static const struct key kubernetes_keys[] = {
	{"enabled", V_BOOL, CFG(kubernetes.enabled), .def = "true", .reload = CONFIG_RESTART_ONLY},
	{"kubeconfig", V_PATH, CFG(kubernetes.kubeconfig), .def = "",
	 .reload = CONFIG_RESTART_ONLY},
	{"node_name", V_STRING, CFG(kubernetes.node_name), .max = 253, .def = "",
	 .reload = CONFIG_RESTART_ONLY},
	/* Where the in-cluster token and ca.crt are; tests point it elsewhere. */
	{"service_account_dir", V_PATH, CFG(kubernetes.service_account_dir), .min = 1,
	 .def = "/var/run/secrets/kubernetes.io/serviceaccount", .reload = CONFIG_RESTART_ONLY},
	/* Streamed past, not held: it bounds the parser's buffer for one long
	 * token; etcd's own limit on an object is 1.5 MiB, in protobuf. */
	{"object_max_bytes", V_SIZE, CFG(kubernetes.object_max_bytes), .min = 65536,
	 .max = 1u << 30, .def = "16MiB", .reload = CONFIG_RESTART_ONLY},
	{"crd_retry_interval", V_DURATION, CFG(kubernetes.crd_retry_interval_ms), .min = 1000,
	 .def = "60s", .reload = CONFIG_RESTART_ONLY},
};

static const struct key mesh_keys[] = {
	{"istio", V_BOOL, CFG(mesh.istio), .def = "false", .reload = CONFIG_RESTART_ONLY},
	{"ttl", V_SECONDS, CFG(mesh.ttl), .max = TTL_MAX, .def = "30s",
	 .reload = CONFIG_RESTART_ONLY},
};

static const struct key multicluster_keys[] = {
	{"enabled", V_BOOL, CFG(multicluster.enabled), .def = "false",
	 .reload = CONFIG_RESTART_ONLY},
	{"domain", V_NAME, CFG(multicluster.domain), .def = "clusterset.local",
	 .reload = CONFIG_RESTART_ONLY},
};

static const struct key srv_keys[] = {
	{"priority", V_UINT, FIELD(struct config_srv, priority), .def = "0"},
	{"weight", V_UINT, FIELD(struct config_srv, weight), .def = "0"},
	{"port", V_UINT, FIELD(struct config_srv, port), .flags = F_REQUIRED},
	{"target", V_NAME, FIELD(struct config_srv, target), .flags = F_REQUIRED},
};
static const struct schema srv_schema = SCHEMA(srv_keys, NULL);

#define RECORD_LIST(m) .shape = LIST, ARRAY(struct config_record, m, n_##m)
static const struct key record_keys[] = {
	{"name", V_NAME, FIELD(struct config_record, name), .flags = F_REQUIRED},
	{"ttl", V_SECONDS, FIELD(struct config_record, ttl), .max = TTL_MAX},
	{"a", V_IP, RECORD_LIST(a), .flags = F_NONEMPTY | F_V4_ONLY},
	{"aaaa", V_IP, RECORD_LIST(aaaa), .flags = F_NONEMPTY | F_V6_ONLY},
	{"cname", V_NAME, FIELD(struct config_record, cname)},
	{"srv", V_MAPPING, RECORD_LIST(srv), .sub = &srv_schema, .flags = F_NONEMPTY},
	/* One character-string each (RFC 1035 3.3.14: at most 255 bytes). */
	{"txt", V_STRING, RECORD_LIST(txt), .max = 255, .flags = F_NONEMPTY},
	{"ptr", V_NAME, RECORD_LIST(ptr), .flags = F_NONEMPTY},
};
static const struct schema record_schema = SCHEMA(record_keys, record_check);

static const struct key static_keys[] = {
	{"records", V_MAPPING, CFG_LIST(statics.records, statics.n_records),
	 .sub = &record_schema, .reload = CONFIG_APPLY_SOURCES},
	{"files", V_PATH, CFG_LIST(statics.files, statics.n_files), .reload = CONFIG_APPLY_SOURCES},
};

static const struct key forward_zone_keys[] = {
	{"zone", V_NAME, FIELD(struct config_forward_zone, zone)},
	{"servers", V_SERVER, .shape = LIST,
	 ARRAY(struct config_forward_zone, servers, n_servers), .flags = F_NONEMPTY},
};
static const struct schema forward_zone_schema = SCHEMA(forward_zone_keys, NULL);

static const struct key upstream_keys[] = {
	{"servers", V_SERVER, CFG_LIST(upstream.servers, upstream.n_servers),
	 .reload = CONFIG_APPLY_UPSTREAM},
	/* Also where autopath reads the node's search domains. */
	{"resolv_conf", V_PATH, CFG(upstream.resolv_conf), .def = "/etc/resolv.conf",
	 .reload = CONFIG_APPLY_UPSTREAM | CONFIG_APPLY_SOURCES},
	/* It makes resolver messages RESOLVER_* rather than FORWARDER_*. */
	{"recursive", V_BOOL, CFG(upstream.recursive), .def = "false",
	 .reload = CONFIG_APPLY_UPSTREAM | CONFIG_APPLY_DNSTAP},
	{"dnssec", V_BOOL, CFG(upstream.dnssec), .def = "false", .reload = CONFIG_APPLY_UPSTREAM},
	{"timeout", V_DURATION, CFG(upstream.timeout_ms), .min = 1, .def = "2s",
	 .reload = CONFIG_APPLY_UPSTREAM},
	{"max_rate", V_UINT, CFG(upstream.max_rate), .max = 10000000, .def = "5000",
	 .reload = CONFIG_APPLY_UPSTREAM},
	{"max_pending_per_client", V_UINT, CFG(upstream.max_pending_per_client), .min = 1,
	 .max = 65535, .def = "1000", .reload = CONFIG_APPLY_UPSTREAM},
	{"trust_anchor", V_PATH, CFG(upstream.trust_anchor), .def = "/usr/share/dns/root.key",
	 .reload = CONFIG_APPLY_UPSTREAM},
	{"root_hints", V_PATH, CFG(upstream.root_hints), .def = "",
	 .reload = CONFIG_APPLY_UPSTREAM},
	{"forward_zones", V_MAPPING, .shape = MAP,
	 ARRAY(struct config, upstream.forward_zones, upstream.n_forward_zones),
	 .sub = &forward_zone_schema, .reload = CONFIG_APPLY_UPSTREAM},
	{"tls", V_BOOL, CFG(upstream.tls), .def = "false", .reload = CONFIG_APPLY_UPSTREAM},
	{"tls_ca_file", V_PATH, CFG(upstream.tls_ca_file), .def = "",
	 .reload = CONFIG_APPLY_UPSTREAM},
	{"resolver", V_ENUM, CFG(upstream.resolver), .names = resolver_places, .def = "auto",
	 .reload = CONFIG_RESTART_ONLY},
};

static const struct key cache_keys[] = {
	{"size", V_SIZE, CFG(cache.size), .min = 65536, .def = "64MiB",
	 .reload = CONFIG_APPLY_CACHE},
	{"min_ttl", V_SECONDS, CFG(cache.min_ttl), .max = TTL_MAX, .def = "0s",
	 .reload = CONFIG_APPLY_CACHE},
	{"max_ttl", V_SECONDS, CFG(cache.max_ttl), .max = TTL_MAX, .def = "1d",
	 .reload = CONFIG_APPLY_CACHE},
	{"serve_stale", V_BOOL, CFG(cache.serve_stale), .def = "true",
	 .reload = CONFIG_APPLY_CACHE},
	{"stale_max_age", V_SECONDS, CFG(cache.stale_max_age), .max = TTL_MAX, .def = "1d",
	 .reload = CONFIG_APPLY_CACHE},
	{"stale_answer_timeout", V_DURATION, CFG(cache.stale_answer_timeout_ms), .max = 60000,
	 .def = "400ms", .reload = CONFIG_APPLY_CACHE},
	{"prefetch", V_BOOL, CFG(cache.prefetch), .def = "true", .reload = CONFIG_APPLY_CACHE},
};

static const struct key health_keys[] = {
	{"listen", V_LISTEN, CFG(health.listen), .def = "127.0.0.1:8080",
	 .reload = CONFIG_RESTART_ONLY},
};

static const struct key metrics_keys[] = {
	{"listen", V_LISTEN, CFG(metrics.listen), .def = "127.0.0.1:9253",
	 .reload = CONFIG_RESTART_ONLY},
};

static const struct key log_keys[] = {
	{"level", V_ENUM, CFG(log.level), .names = log_levels, .def = "info",
	 .reload = CONFIG_APPLY_LOG},
	{"format", V_ENUM, CFG(log.format), .names = log_formats, .def = "logfmt",
	 .reload = CONFIG_APPLY_LOG},
	{"queries", V_UINT, CFG(log.queries), .max = 1000000000, .def = "0",
	 .reload = CONFIG_APPLY_LOG},
	/* A record is about 300 bytes; pages are only touched once used. */
	{"query_buffer", V_UINT, CFG(log.query_buffer), .min = 16, .max = 1u << 20,
	 .def = "4096", .reload = CONFIG_RESTART_ONLY},
};

static const struct key control_keys[] = {
	/* sizeof sun_path - 1 */
	{"socket", V_PATH, CFG(control.socket), .max = 107,
	 .def = "/run/localdns/control.sock", .reload = CONFIG_RESTART_ONLY},
};

static const struct key keeper_keys[] = {
	/* sizeof sun_path - 1; "" = no keeper (needs nftables.enabled) */
	{"socket", V_PATH, CFG(keeper.socket), .max = 107, .def = "",
	 .reload = CONFIG_RESTART_ONLY},
};

static const struct key security_keys[] = {
	{"seccomp", V_BOOL, CFG(security.seccomp), .def = "true", .reload = CONFIG_RESTART_ONLY},
};

static const struct key chaos_keys[] = {
	{"enabled", V_BOOL, CFG(chaos.enabled), .def = "false", .reload = CONFIG_APPLY_SOURCES},
	/* Answered as one TXT character-string. */
	{"version", V_STRING, CFG(chaos.version), .max = 255, .def = DEFAULT_CHAOS_VERSION,
	 .reload = CONFIG_APPLY_SOURCES},
	{"id", V_STRING, CFG(chaos.id), .max = 255, .def = "", .reload = CONFIG_APPLY_SOURCES},
};

#define DNSTAP_RELOAD (CONFIG_APPLY_DNSTAP | CONFIG_APPLY_PODS)
static const struct key dnstap_keys[] = {
	/* sizeof sun_path - 1 */
	/* Its client messages name the pod that asked: the Pods watch follows. */
	{"socket", V_PATH, CFG(dnstap.socket), .max = 107, .def = "", .reload = DNSTAP_RELOAD},
	{"address", V_LISTEN, CFG(dnstap.address), .def = "", .reload = DNSTAP_RELOAD},
	{"identity", V_STRING, CFG(dnstap.identity), .max = 255, .def = "",
	 .reload = DNSTAP_RELOAD},
	{"messages", V_ENUM, CFG_LIST(dnstap.message_list, dnstap.n_message_list),
	 .names = config_dnstap_messages, .def = "client_query client_response",
	 .reload = DNSTAP_RELOAD},
	/* A cached answer's record is about 200 bytes; pages are touched once used.
	 * The rings are sized at start. */
	{"buffer", V_SIZE, CFG(dnstap.buffer), .min = 65536, .max = 1u << 30, .def = "1MiB",
	 .reload = CONFIG_RESTART_ONLY},
};

static const struct key dns64_keys[] = {
	{"prefix", V_STRING, CFG(dns64.prefix), .max = 60, .def = "",
	 .reload = CONFIG_APPLY_SOURCES},
};

static const struct key rrl_keys[] = {
	{"responses_per_second", V_UINT, CFG(rrl.responses_per_second), .max = 1000000,
	 .def = "0", .reload = CONFIG_APPLY_SERVER},
	{"slip", V_UINT, CFG(rrl.slip), .max = 10, .def = "2", .reload = CONFIG_APPLY_SERVER},
	{"ipv4_prefix_length", V_UINT, CFG(rrl.ipv4_prefix_length), .max = 32, .def = "24",
	 .reload = CONFIG_APPLY_SERVER},
	{"ipv6_prefix_length", V_UINT, CFG(rrl.ipv6_prefix_length), .max = 128, .def = "56",
	 .reload = CONFIG_APPLY_SERVER},
};

static const struct schema listen_schema = SCHEMA(listen_keys, NULL);
static const struct schema rrl_schema = SCHEMA(rrl_keys, NULL);
static const struct schema interface_schema = SCHEMA(interface_keys, NULL);
static const struct schema nftables_schema = SCHEMA(nftables_keys, NULL);
static const struct schema cluster_schema = SCHEMA(cluster_keys, cluster_check);
static const struct schema kubernetes_schema = SCHEMA(kubernetes_keys, NULL);
static const struct schema mesh_schema = SCHEMA(mesh_keys, NULL);
static const struct schema multicluster_schema = SCHEMA(multicluster_keys, NULL);
static const struct schema static_schema = SCHEMA(static_keys, static_check);
static const struct schema upstream_schema = SCHEMA(upstream_keys, upstream_check);
static const struct schema dnstap_schema = SCHEMA(dnstap_keys, dnstap_check);
static const struct schema dns64_schema = SCHEMA(dns64_keys, dns64_check);
static const struct schema cache_schema = SCHEMA(cache_keys, cache_check);
static const struct schema health_schema = SCHEMA(health_keys, NULL);
static const struct schema metrics_schema = SCHEMA(metrics_keys, NULL);
static const struct schema log_schema = SCHEMA(log_keys, NULL);
static const struct schema control_schema = SCHEMA(control_keys, NULL);
static const struct schema keeper_schema = SCHEMA(keeper_keys, NULL);
static const struct schema security_schema = SCHEMA(security_keys, NULL);
static const struct schema chaos_schema = SCHEMA(chaos_keys, NULL);

/* Sections share struct config as their base: their keys' offsets are absolute. */
#define SECTION(n, s) {n, V_MAPPING, .sub = &s}
static const struct key top_keys[] = {
	SECTION("listen", listen_schema),     SECTION("interface", interface_schema),
	SECTION("nftables", nftables_schema), SECTION("cluster", cluster_schema),
	SECTION("kubernetes", kubernetes_schema), SECTION("static", static_schema),
	SECTION("upstream", upstream_schema), SECTION("cache", cache_schema),
	SECTION("health", health_schema),     SECTION("metrics", metrics_schema),
	SECTION("log", log_schema),           SECTION("control", control_schema),
	SECTION("security", security_schema), SECTION("chaos", chaos_schema),
	SECTION("rrl", rrl_schema),           SECTION("dnstap", dnstap_schema),
	SECTION("dns64", dns64_schema),
	SECTION("mesh", mesh_schema),         SECTION("multicluster", multicluster_schema),
	SECTION("keeper", keeper_schema),};
static const struct schema top_schema = SCHEMA(top_keys, top_check);

/* ---- messages ---------------------------------------------------------- */

static int vfail_at(struct loader *ld, const char *file, unsigned line, unsigned col,
		    const char *fmt, va_list ap)
{
	int n = line ? snprintf(ld->err, ld->errlen, "%s:%u:%u: ", file, line, col)
		     : snprintf(ld->err, ld->errlen, "%s: ", file);

	if (n >= 0 && (size_t)n < ld->errlen)
		vsnprintf(ld->err + n, ld->errlen - (size_t)n, fmt, ap);
	return -1;
}

/* Report at a libyaml mark (0-based) in the current file; NULL: no position. */
__attribute__((format(printf, 3, 4)))
static int fail_mark(struct loader *ld, const yaml_mark_t *mark, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (mark)
		vfail_at(ld, ld->file, (unsigned)mark->line + 1, (unsigned)mark->column + 1,
			 fmt, ap);
	else
		vfail_at(ld, ld->file, 0, 0, fmt, ap);
	va_end(ap);
	return -1;
}

#define fail(ld, node, ...) fail_mark(ld, &(node)->start_mark, __VA_ARGS__)
#define fail_nopos(ld, ...) fail_mark(ld, NULL, __VA_ARGS__)

__attribute__((format(printf, 3, 4)))
static int fail_pos(struct loader *ld, const struct config_pos *pos, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail_at(ld, pos->file, pos->line, pos->col, fmt, ap);
	va_end(ap);
	return -1;
}

/* Long values are cut in messages: the position already says where they are. */
#define QUOTE_FMT "\"%.60s%s\""
#define QUOTE(s) (s), strlen(s) > 60 ? "..." : ""

/* "the path" for messages about a mapping; the top level has no path. */
static const char *label(const char *path)
{
	return path[0] ? path : "top level";
}

static void join_path(char *out, const char *path, const char *name)
{
	if (snprintf(out, PATH_LEN, "%s%s%s", path, path[0] ? "." : "", name) >= PATH_LEN)
		strcpy(out + PATH_LEN - 4, "...");
}

static void index_path(char *out, const char *path, size_t i)
{
	if (snprintf(out, PATH_LEN, "%s[%zu]", path, i) >= PATH_LEN)
		strcpy(out + PATH_LEN - 4, "...");
}

/* ---- nodes ------------------------------------------------------------- */

static yaml_node_t *node_at(struct loader *ld, int index)
{
	return yaml_document_get_node(ld->doc, index);
}

static const char *scalar(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

/* A plain empty, "~" or "null" scalar: YAML's null, e.g. `intercept:` with nothing after. */
static bool is_null(const yaml_node_t *n)
{
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};

	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
		if (strcmp(scalar(n), nulls[i]) == 0)
			return true;
	return false;
}

/* What a node is, for "expected X, got Y". */
static const char *describe(const yaml_node_t *n, char *buf, size_t len)
{
	if (n->type == YAML_SEQUENCE_NODE)
		return "a sequence";
	if (n->type == YAML_MAPPING_NODE)
		return "a mapping";
	if (is_null(n))
		return "null";
	snprintf(buf, len, QUOTE_FMT, QUOTE(scalar(n)));
	return buf;
}

static int expected(struct loader *ld, const yaml_node_t *n, const char *path, const char *what)
{
	char buf[80];

	return fail(ld, n, "%s: expected %s, got %s", path, what, describe(n, buf, sizeof buf));
}

static size_t n_pairs(const yaml_node_t *map)
{
	return (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
}

static size_t n_items(const yaml_node_t *seq)
{
	return (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

/* The pair whose key is name in map, or NULL (also for a null map). */
static const yaml_node_pair_t *find_pair(const yaml_node_t *map, const char *name,
					 struct loader *ld)
{
	if (map->type != YAML_MAPPING_NODE)
		return NULL;
	for (const yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		const yaml_node_t *k = node_at(ld, p->key);
		if (k->type == YAML_SCALAR_NODE && strcmp(scalar(k), name) == 0)
			return p;
	}
	return NULL;
}

static const yaml_node_t *find_key(struct loader *ld, const yaml_node_t *map, const char *name)
{
	const yaml_node_pair_t *p = find_pair(map, name, ld);

	return p ? node_at(ld, p->key) : NULL;
}

static const yaml_node_t *find_value(struct loader *ld, const yaml_node_t *map,
				     const char *name)
{
	const yaml_node_pair_t *p = find_pair(map, name, ld);

	return p ? node_at(ld, p->value) : NULL;
}

/* ---- freeing (also of half-built values) --------------------------------- */

static void free_fields(const struct schema *s, void *base);

static bool owns_string(enum vtype t)
{
	return t == V_STRING || t == V_NAME || t == V_LISTEN || t == V_PATH || t == V_OBJECT;
}

static void free_element(const struct key *k, void *elem)
{
	if (k->type == V_MAPPING) {
		free_fields(k->sub, elem);
	} else if (owns_string(k->type)) {
		free(*(char **)elem);
		*(char **)elem = NULL;
	}
}

static void free_value(const struct key *k, void *base)
{
	char *field = (char *)base + k->off;

	if (k->shape == ONE) {
		free_element(k, field);
		return;
	}
	char *arr = *(char **)field;
	size_t *count = (size_t *)((char *)base + k->count_off);
	for (size_t i = 0; i < *count; i++)
		free_element(k, arr + i * k->size);
	free(arr);
	*(char **)field = NULL;
	*count = 0;
}

static void free_fields(const struct schema *s, void *base)
{
	for (size_t i = 0; i < s->n_keys; i++)
		free_value(&s->keys[i], base);
}

void config_free(struct config *cfg)
{
	if (!cfg)
		return;
	free_fields(&top_schema, cfg);
	for (size_t i = 0; i < cfg->n_files; i++)
		free(cfg->files[i]);
	free(cfg->files);
	free(cfg);
}

/* ---- scalars ------------------------------------------------------------- */

static void store_uint(void *field, size_t size, uint64_t v)
{
	switch (size) {
	case 1: *(uint8_t *)field = (uint8_t)v; break;
	case 2: *(uint16_t *)field = (uint16_t)v; break;
	case 4: *(uint32_t *)field = (uint32_t)v; break;
	default: *(uint64_t *)field = v; break;
	}
}

/* v in the largest unit that divides it exactly, for range messages: 1024 -> "1KiB". */
static void format_amount(const struct key *k, uint64_t v, char *out, size_t len)
{
	static const char *const time_names[] = {"d", "h", "m", "s", "ms"};
	static const uint64_t time_factors[] = {86400000, 3600000, 60000, 1000, 1};
	static const char *const size_names[] = {"GiB", "MiB", "KiB", "B"};
	static const uint64_t size_factors[] = {1u << 30, 1u << 20, 1u << 10, 1};
	const char *const *names = time_names;
	const uint64_t *factors = time_factors;

	if (k->type == V_UINT) {
		snprintf(out, len, "%" PRIu64, v);
		return;
	}
	if (k->type == V_SECONDS)
		v *= 1000;
	if (k->type == V_SIZE) {
		names = size_names;
		factors = size_factors;
	}
	size_t i = 0;
	while (v % factors[i] != 0) /* ends at the last factor, 1 */
		i++;
	snprintf(out, len, "%" PRIu64 "%s", v / factors[i], names[i]);
}

static int set_number(const struct key *k, const char *text, void *field, char *why,
		      size_t len)
{
	const char *phrase;
	uint64_t v;
	int rc = k->type == V_UINT ? config_value_uint(text, &v, &phrase)
	       : k->type == V_SIZE ? config_value_size(text, &v, &phrase)
				   : config_value_duration_ms(text, &v, &phrase);

	if (rc < 0) {
		snprintf(why, len, QUOTE_FMT " %s", QUOTE(text), phrase);
		return -1;
	}
	if (k->type == V_SECONDS) {
		if (v % 1000 != 0) {
			snprintf(why, len, QUOTE_FMT " is not a whole number of seconds",
				 QUOTE(text));
			return -1;
		}
		v /= 1000;
	}
	uint64_t max = k->max ? k->max : UINT64_MAX >> (64 - 8 * k->size);
	if (v < k->min || v > max) {
		char bound[32];
		format_amount(k, v < k->min ? k->min : max, bound, sizeof bound);
		snprintf(why, len, QUOTE_FMT " is %s %s", QUOTE(text),
			 v < k->min ? "below the minimum" : "above the maximum", bound);
		return -1;
	}
	store_uint(field, k->size, v);
	return 0;
}

static int set_enum(const struct key *k, const char *text, void *field, char *why, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; k->names[i]; i++) {
		if (strcmp(text, k->names[i]) == 0) {
			store_uint(field, k->size, i);
			return 0;
		}
	}
	n = (size_t)snprintf(why, len, QUOTE_FMT " is not one of", QUOTE(text));
	for (size_t i = 0; k->names[i] && n < len; i++)
		n += (size_t)snprintf(why + n, len - n, "%s %s", i ? "," : "", k->names[i]);
	return -1;
}

static int set_string(const struct key *k, const char *text, char **field, char *why, size_t len)
{
	size_t n = strlen(text);

	if (n < k->min) {
		snprintf(why, len, "must not be empty");
		return -1;
	}
	if (k->max && n > k->max) {
		snprintf(why, len, QUOTE_FMT " is longer than %" PRIu64 " bytes", QUOTE(text),
			 k->max);
		return -1;
	}
	char *copy = strdup(text);
	if (!copy) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	free(*field);
	*field = copy;
	return 0;
}

/* Relative paths are taken from the directory of the file that names them. */
static int set_path(struct loader *ld, const struct key *k, const char *text, char **field,
		    char *why, size_t len)
{
	char path[4096];

	if (text[0] == '\0' || text[0] == '/' || !ld->dir)
		return set_string(k, text, field, why, len);
	if (snprintf(path, sizeof path, "%s/%s", ld->dir, text) >= (int)sizeof path) {
		snprintf(why, len, QUOTE_FMT " is too long", QUOTE(text));
		return -1;
	}
	return set_string(k, path, field, why, len);
}

static int set_name(const struct key *k, const char *text, char **field, char *why, size_t len)
{
	const char *phrase;

	if (set_string(k, text, field, why, len) < 0)
		return -1;
	if (config_value_name(*field, &phrase) < 0) {
		snprintf(why, len, QUOTE_FMT " %s", QUOTE(text), phrase);
		return -1;
	}
	return 0;
}

static int set_ip(const struct key *k, const char *text, struct config_ip *ip, char *why,
		  size_t len)
{
	const char *phrase = NULL;

	if (config_value_ip(text, ip, &phrase) == 0) {
		bool wildcard = ip->family == AF_INET ? ip->v4.s_addr == htonl(INADDR_ANY)
						      : IN6_IS_ADDR_UNSPECIFIED(&ip->v6);
		if ((k->flags & F_NO_WILDCARD) && wildcard) {
			snprintf(why, len, "wildcard address not allowed: localdns binds "
				 "specific addresses");
			return -1;
		}
		if ((k->flags & F_V4_ONLY) && ip->family != AF_INET)
			phrase = "is an IPv6 address; a holds IPv4 only (use aaaa)";
		else if ((k->flags & F_V6_ONLY) && ip->family != AF_INET6)
			phrase = "is an IPv4 address; aaaa holds IPv6 only (use a)";
	}
	if (phrase) {
		snprintf(why, len, QUOTE_FMT " %s", QUOTE(text), phrase);
		return -1;
	}
	return 0;
}

static int set_hostport(const char *text, uint16_t default_port, struct config_hostport *hp,
			char *why, size_t len)
{
	const char *phrase;

	if (config_value_hostport(text, default_port, hp, &phrase) < 0) {
		snprintf(why, len, QUOTE_FMT " %s", QUOTE(text), phrase);
		return -1;
	}
	return 0;
}

/*
 * An upstream server: a host and port, then optionally "#" and the name its
 * TLS certificate must carry. Whether a port was written is kept, since
 * the default (53, or 853 with upstream.tls) depends on another key.
 */
static int set_server(const char *text, struct config_hostport *hp, char *why, size_t len)
{
	const char *hash = strchr(text, '#'), *phrase;
	char host[80], name[256];

	if (!hash)
		return set_hostport(text, 53, hp, why, len);
	if ((size_t)(hash - text) >= sizeof host || strlen(hash + 1) >= sizeof name) {
		snprintf(why, len, QUOTE_FMT " is not IP[:PORT][#TLS-NAME]", QUOTE(text));
		return -1;
	}
	snprintf(host, sizeof host, "%.*s", (int)(hash - text), text);
	snprintf(name, sizeof name, "%s", hash + 1);
	if (set_hostport(host, 53, hp, why, len) < 0)
		return -1;
	if (config_value_name(name, &phrase) < 0) {
		snprintf(why, len, QUOTE_FMT ": the TLS name %s", QUOTE(text), phrase);
		return -1;
	}
	snprintf(hp->tls_name, sizeof hp->tls_name, "%.253s", name); /* <= 253: checked */
	size_t used = strlen(hp->text);
	snprintf(hp->text + used, sizeof hp->text - used, "#%s", name);
	return 0;
}

static bool is_env_name(const char *s, size_t n)
{
	if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

/*
 * "${NAME}:port" is the address in environment variable NAME (set at start:
 * the chart gives POD_IP, the pod's status.podIP, which on the host network
 * is the node's own address) with that port; anything else is copied.
 * The result, "ip:port" or "[ipv6]:port" text, is what gets parsed.
 */
static int expand_listen(const char *text, char *out, size_t outlen, char *why, size_t len)
{
	const char *close = strchr(text, '}'), *value;
	char name[64];

	if (strncmp(text, "${", 2) != 0) {
		snprintf(out, outlen, "%s", text);
		return 0;
	}
	if (!close || close[1] != ':' || (size_t)(close - text - 2) >= sizeof name ||
	    !is_env_name(text + 2, (size_t)(close - text - 2))) {
		snprintf(why, len, QUOTE_FMT " is not ${NAME}:port", QUOTE(text));
		return -1;
	}
	memcpy(name, text + 2, (size_t)(close - text - 2));
	name[close - text - 2] = '\0';
	value = getenv(name);
	if (!value || !value[0]) {
		snprintf(why, len, QUOTE_FMT " names $%s, which is not set in localdns's environment",
			 QUOTE(text), name);
		return -1;
	}
	bool v6 = strchr(value, ':') != NULL;
	if ((size_t)snprintf(out, outlen, "%s%s%s%s", v6 ? "[" : "", value, v6 ? "]" : "",
			     close + 1) >= outlen) {
		snprintf(why, len, "$%s is not an IP address", name);
		return -1;
	}
	return 0;
}

/* "" turns a listener off; otherwise an ip:port (or "${NAME}:port"), kept
 * in normalised form. */
static int set_listen(const struct key *k, const char *text, char **field, char *why,
		      size_t len)
{
	struct config_hostport hp;
	char expanded[128];

	if (text[0] != '\0' && (expand_listen(text, expanded, sizeof expanded, why, len) < 0 ||
				 set_hostport(expanded, 0, &hp, why, len) < 0))
		return -1;
	return set_string(k, text[0] ? hp.text : "", field, why, len);
}

/* A Kubernetes namespace or Service name: an RFC 1123 label. */
static bool is_dns_label(const char *s, size_t n)
{
	if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return false;
	return true;
}

static int set_object(const struct key *k, const char *text, char **field, char *why,
		      size_t len)
{
	const char *slash = strchr(text, '/');

	if (text[0] != '\0' &&
	    (!slash || !is_dns_label(text, (size_t)(slash - text)) ||
	     !is_dns_label(slash + 1, strlen(slash + 1)))) {
		snprintf(why, len, QUOTE_FMT " is not \"namespace/name\" (lower-case RFC 1123 "
			 "labels)", QUOTE(text));
		return -1;
	}
	return set_string(k, text, field, why, len);
}

/* Parse text as k's type into field, or say why not in why. */
static int set_scalar(struct loader *ld, const struct key *k, const char *text, void *field,
		      char *why, size_t len)
{
	const char *phrase;

	switch (k->type) {
	case V_BOOL:
		if (config_value_bool(text, field, &phrase) == 0)
			return 0;
		snprintf(why, len, QUOTE_FMT " %s", QUOTE(text), phrase);
		return -1;
	case V_UINT:
	case V_DURATION:
	case V_SECONDS:
	case V_SIZE:
		return set_number(k, text, field, why, len);
	case V_ENUM:
		return set_enum(k, text, field, why, len);
	case V_STRING:
		return set_string(k, text, field, why, len);
	case V_NAME:
		return set_name(k, text, field, why, len);
	case V_LISTEN:
		return set_listen(k, text, field, why, len);
	case V_PATH:
		return set_path(ld, k, text, field, why, len);
	case V_OBJECT:
		return set_object(k, text, field, why, len);
	case V_IP:
		return set_ip(k, text, field, why, len);
	case V_CIDR:
		if (config_value_cidr(text, field, &phrase) == 0)
			return 0;
		snprintf(why, len, QUOTE_FMT " %s", QUOTE(text), phrase);
		return -1;
	case V_HOSTPORT:
		return set_hostport(text, 53, field, why, len);
	case V_SERVER:
		return set_server(text, field, why, len);
	case V_MAPPING:
		break;
	}
	snprintf(why, len, "internal error: %s is not a scalar", k->name);
	return -1;
}

static const char *expectation(const struct key *k)
{
	static const char *const what[] = {
		[V_BOOL] = "true or false",
		[V_UINT] = "an integer",
		[V_DURATION] = "a duration like \"10s\"",
		[V_SECONDS] = "a duration like \"5s\"",
		[V_SIZE] = "a size like \"64MiB\"",
		[V_ENUM] = "a string",
		[V_STRING] = "a string",
		[V_NAME] = "a DNS name",
		[V_LISTEN] = "\"ip:port\", \"${NAME}:port\" or \"\"",
		[V_PATH] = "a file path",
		[V_OBJECT] = "\"namespace/name\" or \"\"",
		[V_IP] = "an IP address",
		[V_CIDR] = "an IP network",
		[V_HOSTPORT] = "\"ip\" or \"ip:port\"",
		[V_SERVER] = "\"ip\", \"ip:port\" or \"ip[:port]#tls-name\"",
		[V_MAPPING] = "a mapping",
	};
	return what[k->type];
}

/* ---- the walk ------------------------------------------------------------ */

static int load_mapping(struct loader *ld, const struct schema *s, const yaml_node_t *map,
			const char *path, void *base);

/* A list's default: its elements separated by spaces (no default value holds one). */
static int apply_list_default(struct loader *ld, const struct key *k, void *base)
{
	char why[WHY_LEN], text[256];
	size_t n = 1;

	for (const char *p = k->def; *p; p++)
		n += *p == ' ';
	char *arr = calloc(n, k->size);
	if (!arr)
		return fail_nopos(ld, "out of memory");
	*(void **)((char *)base + k->off) = arr;
	*(size_t *)((char *)base + k->count_off) = n;
	const char *start = k->def;
	for (size_t i = 0; i < n; i++) {
		size_t len = strcspn(start, " ");
		snprintf(text, sizeof text, "%.*s", (int)len, start);
		if (set_scalar(ld, k, text, arr + i * k->size, why, sizeof why) < 0)
			return fail_nopos(ld, "internal error: default of %s: %s", k->name, why);
		start += len + 1;
	}
	return 0;
}

static int apply_defaults(struct loader *ld, const struct schema *s, void *base)
{
	char why[WHY_LEN];

	for (size_t i = 0; i < s->n_keys; i++) {
		const struct key *k = &s->keys[i];
		void *field = (char *)base + k->off;

		if (k->shape == ONE && k->type == V_MAPPING) {
			if (apply_defaults(ld, k->sub, field) < 0)
				return -1;
			continue;
		}
		if (!k->def)
			continue;
		if (k->shape == LIST) {
			if (apply_list_default(ld, k, base) < 0)
				return -1;
			continue;
		}
		if (set_scalar(ld, k, k->def, field, why, sizeof why) < 0)
			return fail_nopos(ld, "internal error: default of %s: %s", k->name, why);
	}
	return 0;
}

/* One value of k's type (a scalar, or a mapping for V_MAPPING) into elem. */
static int load_element(struct loader *ld, const struct key *k, const yaml_node_t *node,
			const char *path, void *elem)
{
	char why[WHY_LEN];

	if (k->type == V_MAPPING) {
		/* Nested mappings get their defaults here; sections got theirs up front. */
		if (k->shape != ONE && apply_defaults(ld, k->sub, elem) < 0)
			return -1;
		return load_mapping(ld, k->sub, node, path, elem);
	}
	if (node->type != YAML_SCALAR_NODE || is_null(node))
		return expected(ld, node, path, expectation(k));
	if (strlen(scalar(node)) != node->data.scalar.length)
		return fail(ld, node, "%s: contains a NUL character", path);
	if (set_scalar(ld, k, scalar(node), elem, why, sizeof why) < 0)
		return fail(ld, node, "%s: %s", path, why);
	return 0;
}

static int check_unique_ips(struct loader *ld, const struct key *k, const yaml_node_t *seq,
			    const char *path, void *base)
{
	const struct config_ip *ips = *(struct config_ip **)((char *)base + k->off);
	size_t n = *(size_t *)((char *)base + k->count_off);

	for (size_t i = 1; i < n; i++)
		for (size_t j = 0; j < i; j++)
			if (strcmp(ips[i].text, ips[j].text) == 0)
				return fail(ld, node_at(ld, seq->data.sequence.items.start[i]),
					    "%s[%zu]: %s is listed twice", path, i, ips[i].text);
	return 0;
}

/*
 * Allocate a zeroed array of n elements for a LIST or MAP key, replacing its
 * default. The count is set at once: zeroed elements free cleanly if a later
 * element fails.
 */
static char *new_array(struct loader *ld, const struct key *k, const yaml_node_t *node,
		       const char *path, void *base, size_t n)
{
	char *arr;

	ld->elements += n;
	if (ld->elements > ELEMENTS_MAX) {
		fail(ld, node, "%s: more than %u list elements in all (aliases count each time "
			 "they are used)", path, ELEMENTS_MAX);
		return NULL;
	}
	arr = n ? calloc(n, k->size) : NULL;
	if (n && !arr) {
		fail_nopos(ld, "out of memory");
		return NULL;
	}
	free_value(k, base);
	*(char **)((char *)base + k->off) = arr;
	*(size_t *)((char *)base + k->count_off) = n;
	return arr;
}

static int load_list(struct loader *ld, const struct key *k, const yaml_node_t *node,
		     const char *path, void *base)
{
	char ipath[PATH_LEN];
	size_t n = 0;

	if (!is_null(node) && node->type != YAML_SEQUENCE_NODE)
		return expected(ld, node, path, "a sequence");
	if (node->type == YAML_SEQUENCE_NODE)
		n = n_items(node);
	if (n == 0 && (k->flags & F_NONEMPTY))
		return fail(ld, node, "%s: must not be empty", path);
	char *arr = new_array(ld, k, node, path, base, n);
	if (n && !arr)
		return -1;
	for (size_t i = 0; i < n; i++) {
		index_path(ipath, path, i);
		if (load_element(ld, k, node_at(ld, node->data.sequence.items.start[i]), ipath,
				 arr + i * k->size) < 0)
			return -1;
	}
	if ((k->flags & F_UNIQUE) && check_unique_ips(ld, k, node, path, base) < 0)
		return -1;
	return 0;
}

/* name -> value pairs (upstream.forward_zones); names compare after normalising. */
static int load_map(struct loader *ld, const struct key *k, const yaml_node_t *node,
		    const char *path, void *base)
{
	const struct key *name_key = &k->sub->keys[0], *value_key = &k->sub->keys[1];
	char why[WHY_LEN], epath[PATH_LEN];
	size_t n = 0;

	if (!is_null(node) && node->type != YAML_MAPPING_NODE)
		return expected(ld, node, path, "a mapping");
	if (node->type == YAML_MAPPING_NODE)
		n = n_pairs(node);
	char *arr = new_array(ld, k, node, path, base, n);
	if (n && !arr)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const yaml_node_pair_t *p = &node->data.mapping.pairs.start[i];
		const yaml_node_t *kn = node_at(ld, p->key);
		char *elem = arr + i * k->size;
		char **name = (char **)(elem + name_key->off);

		if (kn->type != YAML_SCALAR_NODE || is_null(kn))
			return expected(ld, kn, path, "a name as key");
		if (set_scalar(ld, name_key, scalar(kn), name, why, sizeof why) < 0)
			return fail(ld, kn, "%s: %s", path, why);
		for (size_t j = 0; j < i; j++)
			if (strcmp(*name, *(char **)(arr + j * k->size + name_key->off)) == 0)
				return fail(ld, kn, "%s: %s is listed twice", path, *name);
		join_path(epath, path, *name);
		if (load_list(ld, value_key, node_at(ld, p->value), epath, elem) < 0)
			return -1;
	}
	return 0;
}

static int load_value(struct loader *ld, const struct key *k, const yaml_node_t *node,
		      const char *path, void *base)
{
	switch (k->shape) {
	case LIST:
		return load_list(ld, k, node, path, base);
	case MAP:
		return load_map(ld, k, node, path, base);
	case ONE:
		break;
	}
	return load_element(ld, k, node, path, (char *)base + k->off);
}

/* Edit distance, for "did you mean". Keys are short; longer input is never close. */
static size_t distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[33];

	if (la > 32 || lb > 32)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* Keys a release had, and what took their place: an old config gets told, not just refused. */
static const struct {
	const char *path, *name, *why;
} removed_keys[] = {
	{"kubernetes", "list_max_bytes",
	 "responses are decoded as they stream; kubernetes.object_max_bytes bounds one object"},
};

static int unknown_key(struct loader *ld, const yaml_node_t *kn, const struct schema *s,
		       const char *path)
{
	const char *name = scalar(kn), *best = NULL;
	size_t best_d = 3; /* suggest only within two edits */

	for (size_t i = 0; i < sizeof removed_keys / sizeof removed_keys[0]; i++)
		if (strcmp(path, removed_keys[i].path) == 0 && strcmp(name, removed_keys[i].name) == 0)
			return fail(ld, kn, "%s.%s was removed: %s", path, name, removed_keys[i].why);

	for (size_t i = 0; i < s->n_keys; i++) {
		size_t d = distance(name, s->keys[i].name);
		if (d < best_d) {
			best_d = d;
			best = s->keys[i].name;
		}
	}
	return fail(ld, kn, "unknown key " QUOTE_FMT " %s%s%s%s%s", QUOTE(name),
		    path[0] ? "in " : "at top level", path, best ? " (did you mean \"" : "",
		    best ? best : "", best ? "\"?)" : "");
}

static const struct key *schema_key(const struct schema *s, const char *name)
{
	for (size_t i = 0; i < s->n_keys; i++)
		if (strcmp(s->keys[i].name, name) == 0)
			return &s->keys[i];
	return NULL;
}

static int load_pair(struct loader *ld, const struct schema *s, const yaml_node_t *map,
		     size_t i, const char *path, void *base)
{
	const yaml_node_pair_t *p = &map->data.mapping.pairs.start[i];
	const yaml_node_t *kn = node_at(ld, p->key);
	char kpath[PATH_LEN];

	if (kn->type != YAML_SCALAR_NODE || is_null(kn))
		return expected(ld, kn, label(path), "a key name");
	for (size_t j = 0; j < i; j++) {
		const yaml_node_t *prev = node_at(ld, map->data.mapping.pairs.start[j].key);
		if (prev->type == YAML_SCALAR_NODE && strcmp(scalar(prev), scalar(kn)) == 0)
			return fail(ld, kn, "duplicate key " QUOTE_FMT " %s%s", QUOTE(scalar(kn)),
				    path[0] ? "in " : "at top level", path);
	}
	const struct key *k = schema_key(s, scalar(kn));
	if (!k)
		return unknown_key(ld, kn, s, path);
	join_path(kpath, path, k->name);
	return load_value(ld, k, node_at(ld, p->value), kpath, base);
}

/* A null node (a key with nothing after it) reads as an empty mapping. */
static int load_mapping(struct loader *ld, const struct schema *s, const yaml_node_t *map,
			const char *path, void *base)
{
	if (!is_null(map) && map->type != YAML_MAPPING_NODE)
		return expected(ld, map, label(path), "a mapping");
	if (map->type == YAML_MAPPING_NODE)
		for (size_t i = 0; i < n_pairs(map); i++)
			if (load_pair(ld, s, map, i, path, base) < 0)
				return -1;
	for (size_t i = 0; i < s->n_keys; i++)
		if ((s->keys[i].flags & F_REQUIRED) && !find_key(ld, map, s->keys[i].name))
			return fail(ld, map, "%s: missing key \"%s\"", label(path),
				    s->keys[i].name);
	return s->check ? s->check(ld, map, path, base) : 0;
}

/* ---- checks that span keys -------------------------------------------------- */

static int cache_check(struct loader *ld, const yaml_node_t *map, const char *path, void *base)
{
	const struct config *cfg = base;
	const yaml_node_t *at = find_key(ld, map, "max_ttl");

	if (cfg->cache.min_ttl <= cfg->cache.max_ttl)
		return 0;
	return fail(ld, at ? at : find_key(ld, map, "min_ttl"),
		    "%s: max_ttl (%" PRIu32 "s) is below min_ttl (%" PRIu32 "s)", path,
		    cfg->cache.max_ttl, cfg->cache.min_ttl);
}

/* ---- upstream, dnstap, dns64 ----------------------------------------------- */

/* The node of item i of the sequence under key name in map (map itself when absent). */
static const yaml_node_t *item_at(struct loader *ld, const yaml_node_t *map, const char *name,
				  size_t i)
{
	const yaml_node_t *seq = find_value(ld, map, name);

	if (!seq || seq->type != YAML_SEQUENCE_NODE || i >= n_items(seq))
		return map;
	return node_at(ld, seq->data.sequence.items.start[i]);
}

/* A TLS server without a port of its own goes to 853 (RFC 7858). */
static void use_tls_port(struct config_hostport *hp)
{
	char ip[INET6_ADDRSTRLEN];
	bool v4 = hp->addr.ss_family == AF_INET;

	if (hp->port_given)
		return;
	if (v4) {
		((struct sockaddr_in *)&hp->addr)->sin_port = htons(853);
		inet_ntop(AF_INET, &((struct sockaddr_in *)&hp->addr)->sin_addr, ip, sizeof ip);
	} else {
		((struct sockaddr_in6 *)&hp->addr)->sin6_port = htons(853);
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&hp->addr)->sin6_addr, ip, sizeof ip);
	}
	snprintf(hp->text, sizeof hp->text, v4 ? "%s:853#%s" : "[%s]:853#%s", ip, hp->tls_name);
}

/*
 * With upstream.tls every server needs a TLS name (the certificate is
 * checked against it; without one libunbound would encrypt to anybody)
 * and gets port 853 unless it says otherwise; without it a TLS name is a
 * mistake (the query would go out in the clear). Returns the index of the
 * first server that breaks the rule, or n.
 */
static size_t check_tls_servers(struct config_hostport *servers, size_t n, bool tls)
{
	for (size_t i = 0; i < n; i++) {
		if (tls != (servers[i].tls_name[0] != '\0'))
			return i;
		if (tls)
			use_tls_port(&servers[i]);
	}
	return n;
}

static int tls_server_fail(struct loader *ld, const yaml_node_t *at, const char *path,
			   const struct config_hostport *hp, bool tls)
{
	if (tls)
		return fail(ld, at, "%s: \"%s\" has no TLS name (IP[:PORT]#TLS-NAME): with "
			    "upstream.tls the upstream's certificate is checked against it",
			    path, hp->text);
	return fail(ld, at, "%s: \"%s\" has a TLS name but upstream.tls is false: its "
		    "queries would go out unencrypted", path, hp->text);
}

static int upstream_check(struct loader *ld, const yaml_node_t *map, const char *path, void *base)
{
	struct config *cfg = base;
	const yaml_node_t *tls = find_key(ld, map, "tls");
	bool on = cfg->upstream.tls;
	char where[PATH_LEN];
	size_t bad;

	if (on && cfg->upstream.recursive)
		return fail(ld, tls ? tls : map, "%s.tls: DNS-over-TLS is for forwarding and cannot "
			    "be used with upstream.recursive (recursion asks authoritative servers, "
			    "which do not serve TLS)", path);
	if (on && cfg->upstream.n_servers == 0)
		return fail(ld, tls ? tls : map, "%s.tls needs upstream.servers written "
			    "IP[:PORT]#TLS-NAME: resolv.conf's nameservers have no TLS names to "
			    "check certificates against", path);
	bad = check_tls_servers(cfg->upstream.servers, cfg->upstream.n_servers, on);
	if (bad < cfg->upstream.n_servers) {
		snprintf(where, sizeof where, "%s.servers[%zu]", path, bad);
		return tls_server_fail(ld, item_at(ld, map, "servers", bad), where,
				       &cfg->upstream.servers[bad], on);
	}
	for (size_t i = 0; i < cfg->upstream.n_forward_zones; i++) {
		struct config_forward_zone *z = &cfg->upstream.forward_zones[i];
		bad = check_tls_servers(z->servers, z->n_servers, on);
		if (bad == z->n_servers)
			continue;
		const yaml_node_t *zones = find_value(ld, map, "forward_zones");
		snprintf(where, sizeof where, "%s.forward_zones.%s[%zu]", path, z->zone, bad);
		return tls_server_fail(ld, zones ? zones : map, where, &z->servers[bad], on);
	}
	return 0;
}

const char *const config_dnstap_messages[] = {"client_query", "client_response",
					      "resolver_query", "resolver_response", NULL};

static int dnstap_check(struct loader *ld, const yaml_node_t *map, const char *path, void *base)
{
	struct config *cfg = base;

	if (*cfg->dnstap.socket && *cfg->dnstap.address)
		return fail(ld, find_key(ld, map, "address"), "%s: socket and address are both "
			    "set: a collector is on one or the other", path);
	cfg->dnstap.messages = 0;
	for (size_t i = 0; i < cfg->dnstap.n_message_list; i++)
		cfg->dnstap.messages |= 1u << cfg->dnstap.message_list[i];
	return 0;
}

/*
 * RFC 6052 section 2.2: a prefix of 32, 40, 48, 56, 64 or 96 bits; bits 64
 * to 71 (the "u" octet) must be zero, which a /96 prefix covers.
 */
static int dns64_check(struct loader *ld, const yaml_node_t *map, const char *path, void *base)
{
	struct config *cfg = base;
	const yaml_node_t *at = find_value(ld, map, "prefix");
	const char *phrase;
	struct config_cidr *net = &cfg->dns64.net;

	memset(net, 0, sizeof *net);
	if (!*cfg->dns64.prefix)
		return 0;
	if (config_value_cidr(cfg->dns64.prefix, net, &phrase) < 0)
		return fail(ld, at ? at : map, "%s.prefix: \"%s\" %s", path, cfg->dns64.prefix,
			    phrase);
	if (net->ip.family != AF_INET6 || !strchr(cfg->dns64.prefix, '/'))
		return fail(ld, at ? at : map, "%s.prefix: \"%s\" is not an IPv6 prefix like "
			    "64:ff9b::/96", path, cfg->dns64.prefix);
	if (net->prefix % 8 != 0 || net->prefix < 32 || net->prefix > 96 ||
	    (net->prefix > 64 && net->prefix < 96))
		return fail(ld, at ? at : map, "%s.prefix: /%u is not an RFC 6052 prefix length "
			    "(32, 40, 48, 56, 64 or 96)", path, net->prefix);
	if (net->ip.v6.s6_addr[8] != 0)
		return fail(ld, at ? at : map, "%s.prefix: bits 64 to 71 of \"%s\" must be zero "
			    "(RFC 6052 section 2.2)", path, cfg->dns64.prefix);
	return 0;
}

static bool is_reverse_zone(const char *zone)
{
	static const char *const roots[] = {"in-addr.arpa", "ip6.arpa"};

	for (size_t i = 0; i < 2; i++) {
		size_t len = strlen(zone), root = strlen(roots[i]);
		if (strcmp(zone, roots[i]) == 0 ||
		    (len > root && zone[len - root - 1] == '.' && strcmp(zone + len - root, roots[i]) == 0))
			return true;
	}
	return false;
}

/*
 * fallthrough names reverse zones only: names under cluster.domain are
 * always answered here. ignore_empty_service counts endpoints, which
 * noendpoints does not watch: together every ClusterIP name would vanish.
 */
static int cluster_check(struct loader *ld, const yaml_node_t *map, const char *path, void *base)
{
	const struct config *cfg = base;
	const yaml_node_t *list = find_value(ld, map, "fallthrough");

	for (size_t i = 0; i < cfg->cluster.n_fallthrough; i++) {
		if (is_reverse_zone(cfg->cluster.fallthrough[i]))
			continue;
		return fail(ld, list ? node_at(ld, list->data.sequence.items.start[i]) : map,
			    "%s.fallthrough[%zu]: %s is not a reverse zone (in-addr.arpa, ip6.arpa or "
			    "one below them): names under cluster.domain are always answered here",
			    path, i, cfg->cluster.fallthrough[i]);
	}
	if (cfg->cluster.noendpoints && cfg->cluster.ignore_empty_service)
		return fail(ld, find_key(ld, map, "ignore_empty_service"),
			    "%s: ignore_empty_service needs the endpoints that noendpoints stops "
			    "watching (every Service with a ClusterIP would get NXDOMAIN)", path);
	return 0;
}

static bool ip_equal(const struct config_ip *a, const struct config_ip *b)
{
	return a->family == b->family && strcmp(a->text, b->text) == 0;
}

/*
 * An intercepted ClusterIP is served as well as listen.addresses; the same
 * address in both would be bound twice and put in two roles in nftables.
 */
/* One of two names is the other or lies below it (both normalised). */
static bool names_nest(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	const char *longer = la >= lb ? a : b, *shorter = la >= lb ? b : a;
	size_t ll = la >= lb ? la : lb, ls = la >= lb ? lb : la;

	return strcmp(longer + ll - ls, shorter) == 0 && (ll == ls || longer[ll - ls - 1] == '.');
}

/* The mesh and multicluster names come from the Kubernetes API; the
 * clusterset zone is a zone of its own beside cluster.domain. */
static int kube_sources_check(struct loader *ld, const yaml_node_t *map)
{
	const struct config *cfg = ld->cfg;
	const yaml_node_t *at;

	if ((cfg->mesh.istio || cfg->multicluster.enabled) && !cfg->kubernetes.enabled) {
		at = find_value(ld, map, cfg->mesh.istio ? "mesh" : "multicluster");
		return fail(ld, at ? at : map, "%s needs kubernetes.enabled: its names come from the "
			    "Kubernetes API", cfg->mesh.istio ? "mesh.istio" : "multicluster.enabled");
	}
	if (cfg->multicluster.enabled && names_nest(cfg->multicluster.domain, cfg->cluster.domain)) {
		at = find_value(ld, map, "multicluster");
		return fail(ld, at ? at : map, "multicluster.domain %s and cluster.domain %s overlap: "
			    "each is a zone of its own", cfg->multicluster.domain, cfg->cluster.domain);
	}
	return 0;
}

static int top_check(struct loader *ld, const yaml_node_t *map, const char *path, void *base)
{
	const struct config *cfg = base;

	(void)path;
	if (kube_sources_check(ld, map) < 0)
		return -1;
	for (size_t i = 0; i < cfg->nftables.n_intercept; i++)
		for (size_t j = 0; j < cfg->listen.n_addresses; j++) {
			if (!ip_equal(&cfg->nftables.intercept[i], &cfg->listen.addresses[j]))
				continue;
			const yaml_node_t *at = find_value(ld, map, "nftables");
			return fail(ld, at ? at : map,
				    "nftables.intercept: %s is also in listen.addresses "
				    "(intercepted addresses are served without being listed there)",
				    cfg->nftables.intercept[i].text);
		}
	/* The keeper takes the heartbeat out and relays to the fallback: both nftables'. */
	if (cfg->keeper.socket[0] && !cfg->nftables.enabled) {
		const yaml_node_t *at = find_value(ld, map, "keeper");
		return fail(ld, at ? at : map, "keeper.socket needs nftables.enabled: the keeper "
			    "takes the nftables heartbeat out and relays to its fallback endpoints");
	}
	return 0;
}

/*
 * A record's position and TTL default, and its data rules: at least one data
 * key, and a CNAME alone (RFC 1034 3.6.2: a name with a CNAME has no other data).
 */
static int record_check(struct loader *ld, const yaml_node_t *map, const char *path, void *base)
{
	static const char *const others[] = {"a", "aaaa", "srv", "txt", "ptr"};
	struct config_record *r = base;
	size_t counts[] = {r->n_a, r->n_aaaa, r->n_srv, r->n_txt, r->n_ptr};

	r->pos.file = ld->file;
	r->pos.line = (unsigned)map->start_mark.line + 1;
	r->pos.col = (unsigned)map->start_mark.column + 1;
	if (!find_key(ld, map, "ttl"))
		r->ttl = TTL_FROM_CLUSTER;

	bool any = r->cname != NULL;
	for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
		if (counts[i] && r->cname)
			return fail(ld, find_key(ld, map, "cname"),
				    "%s: cname cannot be combined with %s: a CNAME stands alone "
				    "(RFC 1034)", path, others[i]);
		any = any || counts[i];
	}
	if (!any)
		return fail(ld, map, "%s: needs at least one of a, aaaa, cname, srv, txt, ptr",
			    path);
	return 0;
}

/* ---- files ------------------------------------------------------------------ */

/* The whole file in a NUL-terminated buffer; -1 with why set on failure.
 * Only a regular file (util/file.h), at most FILE_MAX bytes. */
static int read_file(const char *path, char **out, size_t *len, const char **why)
{
	struct stat st;
	int fd = file_open_regular(path, &st, why);
	size_t cap = 0, n = 0;
	char *buf = NULL;
	int e;

	if (fd < 0)
		return -1;
	for (;;) {
		if (n + 1 >= cap) {
			char *grown = realloc(buf, cap = cap ? cap * 2 : 4096);
			if (!grown) {
				e = ENOMEM;
				break;
			}
			buf = grown;
		}
		ssize_t got = read(fd, buf + n, cap - n - 1);
		if (got == 0) {
			close(fd);
			buf[n] = '\0';
			*out = buf;
			*len = n;
			return 0;
		}
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			e = errno;
			break;
		}
		n += (size_t)got;
		if (n > FILE_MAX) {
			e = EFBIG;
			break;
		}
	}
	close(fd);
	free(buf);
	*why = strerror(e);
	return -1;
}

/*
 * Keep a copy of name in cfg->files (config_pos.file points at it), and
 * count its bytes, text[0..len), into cfg->files_hash.
 */
static const char *add_file(struct loader *ld, const char *name, const char *text, size_t len)
{
	struct config *cfg = ld->cfg;
	char **grown = realloc(cfg->files, (cfg->n_files + 1) * sizeof *grown);
	char *copy = strdup(name);

	if (grown)
		cfg->files = grown;
	if (!grown || !copy) {
		free(copy);
		fail_nopos(ld, "out of memory");
		return NULL;
	}
	cfg->files[cfg->n_files++] = copy;
	cfg->files_hash = config_file_hash(cfg->n_files == 1 ? FNV1A_SEED : cfg->files_hash,
					   name, text, len);
	return copy;
}

/* Line and column of a byte offset, for libyaml's reader errors (bad UTF-8). */
static void offset_mark(const char *text, size_t offset, yaml_mark_t *mark)
{
	mark->line = mark->column = 0;
	for (size_t i = 0; i < offset; i++) {
		if (text[i] == '\n') {
			mark->line++;
			mark->column = 0;
		} else {
			mark->column++;
		}
	}
}

/* libyaml's own message, at its position: "did not find expected key (while ...)". */
static int yaml_failure(struct loader *ld, const yaml_parser_t *p, const char *text)
{
	yaml_mark_t mark = p->problem_mark;

	if (p->error == YAML_MEMORY_ERROR)
		return fail_nopos(ld, "out of memory");
	if (p->error == YAML_READER_ERROR)
		offset_mark(text, p->problem_offset, &mark);
	if (p->context)
		return fail_mark(ld, &mark, "%s (%s that starts at %u:%u)", p->problem,
				 p->context, (unsigned)p->context_mark.line + 1,
				 (unsigned)p->context_mark.column + 1);
	return fail_mark(ld, &mark, "%s", p->problem ? p->problem : "invalid YAML");
}

bool config_yaml_shallow(const char *text, size_t len, unsigned *line, unsigned *col)
{
	yaml_parser_t p;
	yaml_event_t ev;
	unsigned depth = 0;
	bool shallow = true;

	if (!yaml_parser_initialize(&p))
		return true; /* out of memory: the load itself says so */
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	/* A syntax error ends the walk: the load reports it, having gone no deeper. */
	while (yaml_parser_parse(&p, &ev)) {
		yaml_event_type_t type = ev.type;
		if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
			if (++depth > CONFIG_YAML_DEPTH_MAX) {
				*line = (unsigned)ev.start_mark.line + 1;
				*col = (unsigned)ev.start_mark.column + 1;
				shallow = false;
			}
		} else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
			depth--;
		}
		yaml_event_delete(&ev);
		if (!shallow || type == YAML_STREAM_END_EVENT)
			break;
	}
	yaml_parser_delete(&p);
	return shallow;
}

/*
 * Parse text into doc (ld->doc points at it). Exactly one document: a
 * second one would be silently ignored, so it is an error. Nesting is
 * bounded first (config_yaml_shallow).
 */
static int parse_document(struct loader *ld, const char *text, size_t len, yaml_document_t *doc)
{
	yaml_parser_t p;
	yaml_document_t extra;
	unsigned line, col;
	int rc = 0;

	if (!config_yaml_shallow(text, len, &line, &col)) {
		yaml_mark_t at = {.line = line - 1, .column = col - 1};
		return fail_mark(ld, &at, "nested deeper than %d levels", CONFIG_YAML_DEPTH_MAX);
	}
	if (!yaml_parser_initialize(&p))
		return fail_nopos(ld, "out of memory");
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	if (!yaml_parser_load(&p, doc)) {
		yaml_failure(ld, &p, text);
		yaml_parser_delete(&p);
		return -1;
	}
	ld->doc = doc;
	if (!yaml_parser_load(&p, &extra)) {
		rc = yaml_failure(ld, &p, text);
	} else {
		const yaml_node_t *second = yaml_document_get_root_node(&extra);
		if (second)
			rc = fail(ld, second, "a second YAML document; a config file holds one");
		yaml_document_delete(&extra);
	}
	yaml_parser_delete(&p);
	if (rc < 0)
		yaml_document_delete(doc);
	return rc;
}

/* Records from one static file (a YAML sequence), appended to statics.records. */
static int load_record_sequence(struct loader *ld, const yaml_node_t *seq)
{
	struct config *cfg = ld->cfg;
	size_t old = cfg->statics.n_records, n = n_items(seq);
	char path[PATH_LEN];

	struct config_record *grown = realloc(cfg->statics.records, (old + n) * sizeof *grown);
	if (n && !grown)
		return fail_nopos(ld, "out of memory");
	if (n) {
		memset(grown + old, 0, n * sizeof *grown);
		cfg->statics.records = grown;
		cfg->statics.n_records = old + n;
	}
	for (size_t i = 0; i < n; i++) {
		struct config_record *r = &cfg->statics.records[old + i];
		index_path(path, "records", i);
		if (apply_defaults(ld, &record_schema, r) < 0 ||
		    load_mapping(ld, &record_schema,
				 node_at(ld, seq->data.sequence.items.start[i]), path, r) < 0)
			return -1;
	}
	return 0;
}

/* One static.files entry; `at` is its node in the main file, for read errors. */
static int load_static_file(struct loader *ld, const char *file, const yaml_node_t *at)
{
	yaml_document_t *main_doc = ld->doc, doc;
	const char *main_file = ld->file;
	const char *why;
	char *text;
	size_t len;
	int rc;

	if (read_file(file, &text, &len, &why) < 0)
		return fail(ld, at, "static.files: cannot read %s: %s", file, why);
	ld->file = add_file(ld, file, text, len);
	rc = ld->file ? parse_document(ld, text, len, &doc) : -1;
	if (rc == 0) {
		const yaml_node_t *root = yaml_document_get_root_node(&doc);
		if (root && root->type != YAML_SEQUENCE_NODE)
			rc = expected(ld, root, "top level", "a sequence of records");
		else if (root)
			rc = load_record_sequence(ld, root);
		yaml_document_delete(&doc);
	}
	free(text);
	ld->file = main_file;
	ld->doc = main_doc;
	return rc;
}

/* static.files load after static.records, so file records come after inline ones. */
static int static_check(struct loader *ld, const yaml_node_t *map, const char *path, void *base)
{
	const struct config *cfg = base;
	const yaml_node_t *files = find_value(ld, map, "files");

	(void)path;
	for (size_t i = 0; i < cfg->statics.n_files; i++)
		if (load_static_file(ld, cfg->statics.files[i],
				     node_at(ld, files->data.sequence.items.start[i])) < 0)
			return -1;
	return 0;
}

static int by_name_then_order(const void *a, const void *b)
{
	const struct config_record *ra = *(const struct config_record *const *)a;
	const struct config_record *rb = *(const struct config_record *const *)b;
	int c = strcmp(ra->name, rb->name);

	return c ? c : (ra > rb) - (ra < rb);
}

/*
 * Across records (inline and from files), a name with a CNAME has nothing
 * else. Sorting by name finds each group in O(n log n); the error names the
 * later record of a clashing pair and points back at the earlier one.
 */
static int check_cname_alone(struct loader *ld)
{
	size_t n = ld->cfg->statics.n_records;
	struct config_record **sorted;
	int rc = 0;

	if (n < 2)
		return 0;
	sorted = malloc(n * sizeof *sorted);
	if (!sorted)
		return fail_nopos(ld, "out of memory");
	for (size_t i = 0; i < n; i++)
		sorted[i] = &ld->cfg->statics.records[i];
	qsort(sorted, n, sizeof *sorted, by_name_then_order);
	for (size_t start = 0, end; start < n && rc == 0; start = end) {
		const struct config_record *cname = NULL;
		for (end = start; end < n && strcmp(sorted[end]->name, sorted[start]->name) == 0;
		     end++)
			if (sorted[end]->cname && !cname)
				cname = sorted[end];
		if (!cname || end - start < 2)
			continue;
		const struct config_record *first = sorted[start];
		const struct config_record *later = cname == first ? sorted[start + 1] : cname;
		rc = fail_pos(ld, &later->pos,
			      "static record %s: a name with a CNAME cannot have other records "
			      "(RFC 1034; also at %s:%u:%u)", later->name, first->pos.file,
			      first->pos.line, first->pos.col);
	}
	free(sorted);
	return rc;
}

/* Rules that need the whole configuration read. */
static int finish(struct loader *ld)
{
	struct config *cfg = ld->cfg;

	for (size_t i = 0; i < cfg->statics.n_records; i++)
		if (cfg->statics.records[i].ttl == TTL_FROM_CLUSTER)
			cfg->statics.records[i].ttl = cfg->cluster.ttl;
	return check_cname_alone(ld);
}

static int load_main(struct loader *ld, const char *yaml, size_t len)
{
	yaml_document_t doc;

	if (apply_defaults(ld, &top_schema, ld->cfg) < 0 ||
	    parse_document(ld, yaml, len, &doc) < 0)
		return -1;
	const yaml_node_t *root = yaml_document_get_root_node(&doc);
	int rc = root ? load_mapping(ld, &top_schema, root, "", ld->cfg) : 0;
	yaml_document_delete(&doc);
	return rc < 0 ? -1 : finish(ld);
}

/* The directory part of a file name, or NULL for the current directory. */
static char *dir_of(const char *file)
{
	const char *slash = strrchr(file, '/');

	if (!slash)
		return NULL;
	return slash == file ? strdup("/") : strndup(file, (size_t)(slash - file));
}

int config_load_string(const char *name, const char *yaml, size_t len, struct config **out,
		       char *err, size_t errlen)
{
	struct loader ld = {.file = name, .err = err, .errlen = errlen};
	int rc = -1;

	ld.cfg = calloc(1, sizeof *ld.cfg);
	if (!ld.cfg)
		return fail_nopos(&ld, "out of memory");
	ld.dir = dir_of(name);
	if (strchr(name, '/') && !ld.dir)
		fail_nopos(&ld, "out of memory");
	else if ((ld.file = add_file(&ld, name, yaml, len)) != NULL)
		rc = load_main(&ld, yaml, len);
	free(ld.dir);
	if (rc < 0) {
		config_free(ld.cfg);
		return -1;
	}
	*out = ld.cfg;
	return 0;
}

int config_load(const char *path, struct config **out, char *err, size_t errlen)
{
	const char *why;
	char *text;
	size_t len;

	if (read_file(path, &text, &len, &why) < 0) {
		snprintf(err, errlen, "%s: cannot read: %s", path, why);
		return -1;
	}
	int rc = config_load_string(path, text, len, out, err, errlen);
	free(text);
	return rc;
}

uint64_t config_file_hash(uint64_t h, const char *path, const char *text, size_t len)
{
	h = fnv1a(h, path, strlen(path) + 1);
	return fnv1a(h, text, len);
}

size_t config_served_count(const struct config *cfg)
{
	return cfg->listen.n_addresses + cfg->nftables.n_intercept;
}

const struct config_ip *config_served_address(const struct config *cfg, size_t i)
{
	if (i < cfg->listen.n_addresses)
		return &cfg->listen.addresses[i];
	return &cfg->nftables.intercept[i - cfg->listen.n_addresses];
}

/* ---- comparing and copying, for live reload ------------------------------------ */

static bool same_fields(const struct schema *s, const void *a, const void *b);

static bool same_element(const struct key *k, const void *a, const void *b)
{
	if (k->type == V_MAPPING)
		return same_fields(k->sub, a, b);
	if (owns_string(k->type)) {
		const char *x = *(char *const *)a, *y = *(char *const *)b;
		return x == y || (x && y && strcmp(x, y) == 0);
	}
	if (k->type == V_IP)
		return ip_equal(a, b);
	if (k->type == V_HOSTPORT || k->type == V_SERVER)
		return strcmp(((const struct config_hostport *)a)->text,
			      ((const struct config_hostport *)b)->text) == 0;
	if (k->type == V_CIDR)
		return strcmp(((const struct config_cidr *)a)->text,
			      ((const struct config_cidr *)b)->text) == 0;
	return memcmp(a, b, k->size) == 0; /* numbers, booleans and enums, stored in k->size bytes */
}

static const char *array_of(const struct key *k, const void *base)
{
	return *(char *const *)((const char *)base + k->off);
}

static size_t count_of(const struct key *k, const void *base)
{
	return *(const size_t *)((const char *)base + k->count_off);
}

static bool same_value(const struct key *k, const void *a, const void *b)
{
	if (k->shape == ONE)
		return same_element(k, (const char *)a + k->off, (const char *)b + k->off);
	size_t n = count_of(k, a);
	if (n != count_of(k, b))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!same_element(k, array_of(k, a) + i * k->size, array_of(k, b) + i * k->size))
			return false;
	return true;
}

static bool same_fields(const struct schema *s, const void *a, const void *b)
{
	for (size_t i = 0; i < s->n_keys; i++)
		if (!same_value(&s->keys[i], a, b))
			return false;
	return true;
}

/* The keys under s (at path) as config_each_key names them; with a and b,
 * only those whose values differ. */
static void report_keys(const struct schema *s, const void *a, const void *b,
			const char *path, config_key_fn fn, void *arg)
{
	char kpath[PATH_LEN];

	for (size_t i = 0; i < s->n_keys; i++) {
		const struct key *k = &s->keys[i];
		join_path(kpath, path, k->name);
		if (k->shape == ONE && k->type == V_MAPPING)
			report_keys(k->sub, a ? (const char *)a + k->off : NULL,
				    b ? (const char *)b + k->off : NULL, kpath, fn, arg);
		else if (!a || !same_value(k, a, b))
			fn(kpath, k->reload, arg);
	}
}

void config_each_key(config_key_fn fn, void *arg)
{
	report_keys(&top_schema, NULL, NULL, "", fn, arg);
}

void config_diff(const struct config *a, const struct config *b, config_key_fn fn, void *arg)
{
	report_keys(&top_schema, a, b, "", fn, arg);
}

/* The key at a "section.key" path, and where its offsets count from; NULL if none. */
static const struct key *key_at(const char *path, const struct schema *s, size_t *base_off)
{
	const char *dot = strchr(path, '.');
	size_t len = dot ? (size_t)(dot - path) : strlen(path);

	for (size_t i = 0; i < s->n_keys; i++) {
		const struct key *k = &s->keys[i];
		if (strlen(k->name) != len || strncmp(k->name, path, len) != 0)
			continue;
		if (!dot)
			return k;
		if (k->shape != ONE || k->type != V_MAPPING)
			return NULL;
		*base_off += k->off;
		return key_at(dot + 1, k->sub, base_off);
	}
	return NULL;
}

/* One plain element, large enough for any of them. */
union plain_element {
	struct config_ip ip;
	struct config_hostport hostport;
	char *string;
	uint64_t number;
};

/* A copy of one plain element (a string is duplicated); false when out of memory. */
static bool copy_element(const struct key *k, void *dst, const void *src)
{
	if (!owns_string(k->type)) {
		memcpy(dst, src, k->size);
		return true;
	}
	const char *s = *(char *const *)src;
	*(char **)dst = s ? strdup(s) : NULL;
	return !s || *(char **)dst;
}

int config_copy_key(struct config *dst, const struct config *src, const char *key)
{
	size_t off = 0;
	const struct key *k = key_at(key, &top_schema, &off);

	if (!k || k->type == V_MAPPING || k->size > sizeof(union plain_element))
		return -1;
	const char *from = (const char *)src + off;
	char *base = (char *)dst + off;
	if (k->shape == ONE) {
		union plain_element copy;
		if (!copy_element(k, &copy, from + k->off))
			return -1;
		free_value(k, base);
		memcpy(base + k->off, &copy, k->size);
		return 0;
	}
	size_t n = count_of(k, from);
	char *arr = n ? calloc(n, k->size) : NULL;
	if (n && !arr)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (copy_element(k, arr + i * k->size, array_of(k, from) + i * k->size))
			continue;
		for (size_t j = 0; j < i; j++)
			free_element(k, arr + j * k->size);
		free(arr);
		return -1;
	}
	free_value(k, base);
	*(char **)(base + k->off) = arr;
	*(size_t *)(base + k->count_off) = n;
	return 0;
}
