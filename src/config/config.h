/*
 * config — the YAML configuration (ConfigMap key config.yaml) as a typed,
 * validated struct.
 *
 * Owns: reading the file with libyaml, applying defaults, checking every
 * value (unknown keys, wrong types, bad IPs, durations, sizes), loading
 * static.files, and reporting the first problem as "FILE:LINE:COL: what is
 * wrong" (1-based line and column of the offending node).
 *
 * Must never: act on the configuration (bind, resolve, log): it only
 * describes it. A failed load leaves nothing allocated and changes nothing,
 * so a running daemon keeps its current config when a new one is bad.
 *
 * The key names are a public contract (docs/configuration.md, the product
 * brief section 3): add keys freely, never rename one.
 */
#ifndef LOCALDNS_CONFIG_H
#define LOCALDNS_CONFIG_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define CONFIG_ERR_MAX 512

/* Where a value came from, for messages that name FILE:LINE:COL. */
struct config_pos {
	const char *file; /* points into struct config's file list */
	unsigned line;
	unsigned col;
};

/* An IP literal (no port). */
struct config_ip {
	int family; /* AF_INET or AF_INET6 */
	union {
		struct in_addr v4;
		struct in6_addr v6;
	};
	char text[48]; /* as normalised by inet_ntop */
};

/* A network: "10.0.0.0/8", "fd00::/8", or one address (all its bits). */
struct config_cidr {
	struct config_ip ip;       /* the network address (no host bits set) */
	uint8_t prefix;            /* 0..32 (IPv4) or 0..128 (IPv6) */
	char text[52];             /* normalised "ip/prefix" */
};

/*
 * "ip", "ip:port" or "[ipv6]:port"; the port defaults per use (53). An
 * upstream server may add "#TLS-NAME" (upstream.tls): the name its
 * certificate must carry; its port then defaults to 853.
 */
struct config_hostport {
	struct sockaddr_storage addr;
	socklen_t addr_len;
	bool port_given;      /* the text had a port: no default applies */
	char tls_name[254];   /* "" = none; a normalised DNS name */
	char text[320];       /* normalised "ip:port" / "[ip6]:port", "#name" appended */
};

struct config_srv {
	uint16_t priority;
	uint16_t weight;
	uint16_t port;
	char *target;
};

/* One entry of static.records (or of a static.files file). */
struct config_record {
	struct config_pos pos;
	char *name;
	uint32_t ttl; /* seconds; default cluster.ttl */
	struct config_ip *a;      size_t n_a;
	struct config_ip *aaaa;   size_t n_aaaa;
	char *cname;              /* NULL when absent */
	struct config_srv *srv;   size_t n_srv;
	char **txt;               size_t n_txt;   /* each string <= 255 bytes */
	char **ptr;               size_t n_ptr;
};

struct config_forward_zone {
	char *zone;
	struct config_hostport *servers;
	size_t n_servers;
};

enum config_interface_kind { CONFIG_IF_DUMMY, CONFIG_IF_LOOPBACK };
/* Where the resolver (libunbound and the flight table) runs: upstream.resolver. */
enum config_resolver_on {
	CONFIG_RESOLVER_AUTO,        /* on the worker when there is one, else its own thread */
	CONFIG_RESOLVER_OWN_THREAD,
	CONFIG_RESOLVER_FIRST_WORKER,
};
enum config_pods_mode { CONFIG_PODS_DISABLED, CONFIG_PODS_INSECURE, CONFIG_PODS_VERIFIED };
enum config_log_level { CONFIG_LOG_DEBUG, CONFIG_LOG_INFO, CONFIG_LOG_WARN, CONFIG_LOG_ERROR };
enum config_log_format { CONFIG_LOG_LOGFMT, CONFIG_LOG_JSON };

/* Durations are kept in milliseconds, sizes in bytes, TTLs in seconds. */
struct config {
	char **files; size_t n_files; /* files[0] is the main file */
	uint64_t files_hash;          /* config_file_hash over each file's bytes as parsed */

	struct {
		struct config_ip *addresses; size_t n_addresses;
		/* Clients that may query; none given = the private and local
		 * ranges (config_default_allow). */
		struct config_cidr *allow; size_t n_allow;
		uint16_t port;                 /* 53 */
		unsigned workers;              /* 0 = one per CPU we may run on */
		unsigned tcp_max_connections;  /* 1024, across all workers */
		uint64_t tcp_idle_timeout_ms;  /* 10s */
		unsigned tcp_max_connections_per_client; /* 64: per client (util/client.h) */
		unsigned ipv6_client_prefix_length; /* 128: IPv6 clients told apart at this length */
		unsigned tcp_max_pending_queries; /* 64: per connection, waiting for the upstream */
		uint64_t tcp_output_budget;    /* 4MiB: unsent TCP replies, all connections */
		uint64_t tcp_query_timeout_ms; /* 2s: from a query's first byte to its last */
		uint16_t udp_max_payload;      /* 1232: largest UDP reply we send */
		uint64_t udp_rcvbuf;           /* 4MiB: SO_RCVBUF per UDP socket */
	} listen;

	struct {
		bool manage;                   /* true */
		char *name;                    /* "localdns" */
		enum config_interface_kind kind; /* dummy */
	} interface;

	struct {
		bool enabled;                  /* true */
		char *table;                   /* "localdns" */
		struct config_ip *intercept; size_t n_intercept;
		bool teardown;                 /* false */
		uint64_t reassert_interval_ms; /* 30s */
		/* Where the link-local addresses' DNS goes while localdns is down
		 * and no Kubernetes data replaced these (port unchanged). */
		struct config_ip *fallback_endpoints; size_t n_fallback_endpoints;
		/* "kube-system/kube-dns": whose ready endpoints replace those
		 * while the Kubernetes watch has some ("" = never). */
		char *fallback_service;
	} nftables;

	struct {
		char *domain;                  /* "cluster.local" (no trailing dot) */
		uint32_t ttl;                  /* 5 */
		enum config_pods_mode pods;    /* insecure */
		struct config_hostport *fallback_servers; size_t n_fallback_servers;
		bool autopath;                 /* false */
		/* CoreDNS's kubernetes plugin options (docs/coredns-compat.md). */
		bool endpoint_pod_names;       /* false */
		bool noendpoints;              /* false */
		bool ignore_empty_service;     /* false */
		/* Bounds on what one Service may cost every node (docs/configuration.md). */
		unsigned max_ports_per_service;     /* 1024: of its spec, and of each slice */
		unsigned max_endpoints_per_service; /* 20000: endpoint addresses, all slices */
		/* Reverse zones whose names the table does not hold go on to the
		 * cache and upstream; other reverse names it does not hold get
		 * NXDOMAIN. Lower-case, no trailing dot. */
		char **fallthrough; size_t n_fallthrough; /* in-addr.arpa, ip6.arpa */
	} cluster;

	struct {
		bool enabled;                  /* true */
		char *kubeconfig;              /* "" = in-cluster */
		char *node_name;               /* "" = $NODE_NAME */
		char *service_account_dir;     /* in-cluster token and ca.crt */
		uint64_t object_max_bytes;     /* 16MiB: one object in a LIST or watch, decoded */
		uint64_t crd_retry_interval_ms; /* 60s: a custom resource not installed is asked again */
	} kubernetes;

	struct {
		bool istio;                    /* false: ServiceEntry/WorkloadEntry hosts answered here */
		uint32_t ttl;                  /* 30: seconds, as Istio's DNS proxy */
	} mesh;

	struct {
		bool enabled;                  /* false: ServiceImports answered here */
		char *domain;                  /* "clusterset.local" (no trailing dot) */
	} multicluster;

	struct {
		struct config_record *records; size_t n_records; /* inline + files */
		/* As opened: a relative path gets the config file's directory. */
		char **files; size_t n_files;
	} statics;

	struct {
		struct config_hostport *servers; size_t n_servers;
		char *resolv_conf;             /* "/etc/resolv.conf" */
		bool recursive;                /* false */
		bool dnssec;                   /* false */
		uint64_t timeout_ms;           /* 2s */
		uint64_t max_rate;             /* 5000: new questions a second; 0 = no limit */
		unsigned max_pending_per_client; /* 1000: per client (util/client.h) */
		char *trust_anchor;            /* "/usr/share/dns/root.key" (dnssec) */
		char *root_hints;              /* "" = libunbound's built-in (recursive) */
		struct config_forward_zone *forward_zones; size_t n_forward_zones;
		/* DNS-over-TLS to upstream.servers and forward_zones (not to
		 * cluster.fallback_servers); every server then has a TLS name. */
		bool tls;                      /* false */
		char *tls_ca_file;             /* "" = the system's CA bundle */
		enum config_resolver_on resolver; /* auto */
	} upstream;

	struct {
		uint64_t size;                 /* 64MiB */
		uint32_t min_ttl;              /* 0 */
		uint32_t max_ttl;              /* 86400 */
		bool serve_stale;              /* true */
		uint32_t stale_max_age;        /* 86400 */
		uint64_t stale_answer_timeout_ms; /* 400ms: RFC 8767's client response timer; 0 = off */
		bool prefetch;                 /* true */
	} cache;

	struct { char *listen; } health;   /* "127.0.0.1:8080" ("" = off) */
	struct { char *listen; } metrics;  /* "127.0.0.1:9253" ("" = off) */

	struct {
		enum config_log_level level;   /* info */
		enum config_log_format format; /* logfmt */
		uint32_t queries;              /* 0 = off; N = one query line per N per worker */
		uint32_t query_buffer;         /* 4096: query records a thread may hold unwritten */
	} log;

	struct { char *socket; } control;  /* "/run/localdns/control.sock" */

	/* The keeper (`localdns keeper`, src/keeper/): "" = none. */
	struct { char *socket; } keeper;

	struct {
		bool seccomp;                  /* true: each thread gets its syscall allow-list */
	} security;

	struct {
		bool enabled;                  /* false: CH TXT queries get REFUSED */
		char *version;                 /* answer to version.bind */
		char *id;                      /* answer to id.server; "" = hostname */
	} chaos;

	struct {
		char *socket;                  /* "" = off: a collector's unix socket */
		char *address;                 /* "" = off, or a collector's normalised ip:port */
		char *identity;                /* "" = the node name, else the host name */
		unsigned *message_list; size_t n_message_list; /* dnstap.messages as written */
		uint32_t messages;             /* the same as bits: 1 << index in config_dnstap_messages */
		uint64_t buffer;               /* 1MiB: bytes of records each thread may hold unsent */
	} dnstap;

	struct {
		char *prefix;                  /* "" = off; else the text as written */
		struct config_cidr net;        /* the parsed prefix (RFC 6052 lengths) */
	} dns64;

	struct {
		unsigned responses_per_second; /* 0 = off */
		unsigned slip;                 /* 2: every 2nd limited response goes out TC */
		unsigned ipv4_prefix_length;   /* 24 */
		unsigned ipv6_prefix_length;   /* 56 */
	} rrl;
};

/*
 * Load and validate the file at path (and the static.files it names).
 * Returns 0 and a new config in *out, or -1 with "FILE:LINE:COL: message"
 * (or "FILE: message" when there is no position, e.g. unreadable file) in
 * err, and *out untouched.
 */
int config_load(const char *path, struct config **out, char *err, size_t errlen);

/*
 * Whether YAML text nests its collections at most CONFIG_YAML_DEPTH_MAX
 * deep; if not, where the first one too deep opens (from 1). libyaml's
 * scanner costs the current depth for each token, so a document of deeply
 * nested flow sequences takes time quadratic in its size (400 KB: 98 s)
 * before it is even built; this walks the parser's events and stops at the
 * first level too deep, in time linear in what it read. Every YAML input
 * the daemon parses (the config, static files, kubeconfigs) passes here
 * first. Files are read whole only when regular and at most 16 MiB.
 */
#define CONFIG_YAML_DEPTH_MAX 64
bool config_yaml_shallow(const char *text, size_t len, unsigned *line, unsigned *col);

/*
 * The same from a string; `name` stands in for the file name in messages,
 * and its directory part (none: the current directory) is where relative
 * paths in the document (static.files, ...) are resolved.
 */
int config_load_string(const char *name, const char *yaml, size_t len,
		       struct config **out, char *err, size_t errlen);

void config_free(struct config *cfg);

/* "10s" -> 10000; units ms, s, m, h, d; -1 on error. */
int config_parse_duration_ms(const char *text, uint64_t *out);

/* "64MiB" -> 67108864; units B, KiB, MiB, GiB, K, M, G (K = 1000); -1 on error. */
int config_parse_size(const char *text, uint64_t *out);

/*
 * The loader's scalar parsers, shared with tools and tests so each syntax
 * has one definition. Each returns 0, or -1 with *why set to a static
 * phrase that reads after the quoted input: "\"10\" has no unit (...)".
 */
int config_value_duration_ms(const char *text, uint64_t *out, const char **why);
int config_value_size(const char *text, uint64_t *out, const char **why);
/* Decimal digits only; a leading zero is refused (YAML 1.1 reads 010 as octal). */
int config_value_uint(const char *text, uint64_t *out, const char **why);
/* Exactly "true" or "false" (not YAML 1.1's yes/no/on/off). */
int config_value_bool(const char *text, bool *out, const char **why);
/* One IPv4 or IPv6 literal; no prefix length, no zone index. */
int config_value_ip(const char *text, struct config_ip *out, const char **why);
/* "ip/prefix" or a bare "ip" (the whole address); host bits must be zero. */
int config_value_cidr(const char *text, struct config_cidr *out, const char **why);
/* "ip", "ip:port", "[ip6]:port" or a bare "ip6"; default_port 0 = port required. */
int config_value_hostport(const char *text, uint16_t default_port,
			  struct config_hostport *out, const char **why);
/*
 * Check a DNS name in place and normalise it: one trailing dot dropped,
 * lower-cased. Letters, digits, '-' and '_'; labels 1..63, name <= 253.
 * The root and wildcards ("*.example") are refused.
 */
int config_value_name(char *name, const char **why);

/*
 * Continue h (FNV-1a; start from FNV1A_SEED) over one file: its path, then
 * its bytes. The loader hashes what it parsed this way (config.files_hash);
 * comparing with the files on disk, hashed the same way, tells whether
 * they changed since (daemon/reload.c).
 */
uint64_t config_file_hash(uint64_t h, const char *path, const char *text, size_t len);

/* dnstap.messages' names, in the order of their bits (dnstap/dnstap.h's enum dnstap_kind). */
extern const char *const config_dnstap_messages[];

/* listen.allow when the config gives none: the private and local address
 * ranges, where pods and the node's own processes query from. */
extern const char *const config_default_allow[];

/*
 * Every address localdns serves: listen.addresses, then nftables.intercept
 * (a ClusterIP captured here is answered like a listen address). i < the
 * count; the pointer lives as long as cfg.
 */
size_t config_served_count(const struct config *cfg);
const struct config_ip *config_served_address(const struct config *cfg, size_t i);

/*
 * How a reload applies a changed key, declared once per key in the schema
 * (config.c) and read by daemon/reload.c: either CONFIG_RESTART_ONLY (the
 * running value stays until a restart) or the CONFIG_APPLY_* steps that
 * take the new value in, ORed. docs/configuration.md, "Live reload", says
 * the same to operators (test_chart.py holds the two together).
 */
enum config_reload {
	CONFIG_RESTART_ONLY = 1 << 0,
	CONFIG_APPLY_LISTEN = 1 << 1,   /* served addresses and port: link, sockets, nftables sets */
	CONFIG_APPLY_SERVER = 1 << 2,   /* settings of open sockets and connections, rrl */
	CONFIG_APPLY_SOURCES = 1 << 3,  /* the answer sources, rebuilt and swapped in */
	CONFIG_APPLY_UPSTREAM = 1 << 4, /* a new libunbound context */
	CONFIG_APPLY_CACHE = 1 << 5,    /* the cache, reconfigured in place */
	CONFIG_APPLY_LOG = 1 << 6,      /* log and query log settings */
	CONFIG_APPLY_NODE = 1 << 7,     /* nothing to redo: the node reads its config as it goes */
	CONFIG_APPLY_PODS = 1 << 8,     /* whether the Kubernetes client watches this node's Pods */
	CONFIG_APPLY_DNSTAP = 1 << 9,   /* the dnstap collector, identity and messages */
};

/*
 * The keys a reload compares, each once, in table order, named
 * "section.key" (a list of mappings, such as static.records or
 * upstream.forward_zones, is one key), with their enum config_reload.
 */
typedef void (*config_key_fn)(const char *key, unsigned reload, void *arg);
void config_each_key(config_key_fn fn, void *arg);

/*
 * Live reload. config_diff calls fn for each of those keys whose value
 * differs between a and b (records from static.files count as
 * static.records). Where a value was written (FILE:LINE:COL) is not part
 * of it.
 */
void config_diff(const struct config *a, const struct config *b, config_key_fn fn, void *arg);

/*
 * Give dst's key ("section.key") a copy of src's value: how a reload keeps
 * the running value of a key that only a restart may change. For plain
 * values and lists of them, not lists of mappings. 0, or -1 (no such key,
 * a list of mappings, out of memory) with dst unchanged.
 */
int config_copy_key(struct config *dst, const struct config *src, const char *key);

/* The socket address of ip at port (for bind and connect). */
socklen_t config_ip_sockaddr(const struct config_ip *ip, uint16_t port,
			     struct sockaddr_storage *ss);

#endif
