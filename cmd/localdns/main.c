/*
 * localdns — command line entry point.
 *
 *   localdns --config FILE         serve in the foreground
 *   localdns --check-config FILE   validate and exit 0, or 1 with FILE:LINE:COL
 *   localdns cleanup --config FILE remove the nftables table and the link (uninstall)
 *   localdns keeper --config FILE  the keeper beside it (src/keeper/)
 *   localdns ctl [...] COMMAND     talk to a running localdns (ctl.c)
 *   localdns --version | --help
 *
 * The main thread owns signals (a signalfd, polled with the config file
 * watcher: SIGTERM/SIGINT stop, SIGHUP and changed config files reload);
 * workers and the resolver thread never see a signal.
 * Start order: the control socket (a second localdns on the same path
 * stops here, before it touches the node), cache, cluster table, answer
 * sources, resolver, node integration (the addresses must exist before the
 * workers bind them), Kubernetes client (it feeds the node the kube-dns
 * endpoints), workers, the health and metrics endpoints and the control
 * threads (they read them all). stop_serving stops them in the reverse
 * order (the node integration is torn down only with nftables.teardown:
 * left in place it fails open).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "cluster/cluster.h"
#include "cluster/feed.h"
#include "config/config.h"
#include "control/control.h"
#include "counters/counters.h"
#include "ctl.h"
#include "daemon/daemon.h"
#include "http/http.h"
#include "keeper/keeper.h"
#include "kube/kube.h"
#include "log/log.h"
#include "mesh/mesh.h"
#include "nft/plan.h"
#include "node/node.h"
#include "privs/privs.h"
#include "query/query.h"
#include "querylog/querylog.h"
#include "dnstap/dnstap.h"
#include "talkers/talkers.h"
#include "server/server.h"
#include "upstream/upstream.h"
#include "util/clock.h"

static const char usage_text[] =
	"usage: localdns --config FILE\n"
	"       localdns --check-config FILE\n"
	"       localdns cleanup --config FILE\n"
	"       localdns keeper --config FILE\n"
	"       localdns ctl [--socket PATH | --config FILE] COMMAND [ARGS]\n"
	"       localdns --version | --help\n"
	"\n"
	"A node-local DNS cache for Kubernetes.\n"
	"\n"
	"  -c, --config FILE        serve with this configuration (YAML)\n"
	"  -C, --check-config FILE  validate FILE; print FILE:LINE:COL on error, exit 1\n"
	"  -V, --version            print the version and exit\n"
	"  -h, --help               print this help and exit\n"
	"  cleanup --config FILE    remove the nftables table and the link or addresses\n"
	"                           FILE describes (uninstall), then exit\n"
	"  keeper --config FILE     hold copies of the DNS sockets of the localdns on\n"
	"                           keeper.socket and answer what is queued in them\n"
	"                           when it dies or hangs (a second container)\n"
	"  ctl COMMAND              stats, lookup, flush, dump-cache or reload on a\n"
	"                           running localdns (localdns ctl --help)\n"
	"\n"
	"See docs/configuration.md for every configuration key.\n";

/* Load the config and the answer sources built from it; both or neither. */
static int load(const char *path, const struct cluster *cluster, struct cache *cache,
		struct config **cfg, struct query_sources **sources, char *err, size_t errlen)
{
	if (config_load(path, cfg, err, errlen) < 0)
		return -1;
	*sources = query_sources_build(*cfg, &(struct query_names){.cluster = cluster}, cache, err,
				       errlen);
	if (!*sources) {
		config_free(*cfg);
		*cfg = NULL;
		return -1;
	}
	return 0;
}

static int check_config(const char *path)
{
	struct config *cfg;
	struct query_sources *sources;
	char err[CONFIG_ERR_MAX];
	int rc = 0;

	if (load(path, NULL, NULL, &cfg, &sources, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	urcu_memb_register_thread();
	query_sources_publish(sources);
	int kube = 0;
	if (upstream_check(cfg, err, sizeof err) < 0 || (kube = kube_check(cfg, err, sizeof err)) < 0) {
		fprintf(stderr, "%s: %s\n", path, err);
		rc = 1;
	} else {
		if (kube > 0)
			printf("%s: %s\n", path, err);
		printf("%s: configuration is valid\n", path);
	}
	query_sources_retire();
	urcu_memb_unregister_thread();
	config_free(cfg);
	return rc;
}

static void log_serving(const struct config *cfg, const struct server *s)
{
	char port[8], workers[16];

	snprintf(port, sizeof port, "%u", cfg->listen.port);
	snprintf(workers, sizeof workers, "%u", server_workers(s));
	for (size_t i = 0; i < config_served_count(cfg); i++)
		log_info("listening", "address", config_served_address(cfg, i)->text, "port", port,
			 "protocols", "udp,tcp");
	log_info("serving", "workers", workers, "config", cfg->files[0]);
}

static void log_node_totals(struct node *node)
{
	struct node_stats ns;
	char links[24], tables[24];

	if (!node)
		return;
	node_stats(node, &ns);
	snprintf(links, sizeof links, "%llu", (unsigned long long)ns.link_repairs);
	snprintf(tables, sizeof tables, "%llu", (unsigned long long)ns.table_repairs);
	log_info("node integration", "link_repairs", links, "table_repairs", tables);
}

/* The exit line's fields: the registry's rows with a log key (src/counters/). */
struct totals {
	const char *kv[2 * LOG_MAX_FIELDS];
	char values[LOG_MAX_FIELDS][24];
	size_t n;
};

static void add_total(const char *key, uint64_t value, void *arg)
{
	struct totals *t = arg;

	if (t->n == LOG_MAX_FIELDS)
		return;
	snprintf(t->values[t->n], sizeof t->values[t->n], "%" PRIu64, value);
	t->kv[2 * t->n] = key;
	t->kv[2 * t->n + 1] = t->values[t->n];
	t->n++;
}

static void log_totals(const struct daemon *d)
{
	struct counter_values v;
	struct totals t = {.n = 0};

	counters_read(d, &v);
	counters_each_log(&v, add_total, &t);
	log_write_fields(LOG_INFO, "stopped", t.kv, t.n);
}

static struct cache *make_cache(const struct config *cfg)
{
	struct cache_config cc;

	upstream_cache_config(cfg, &cc);
	return cache_new(&cc);
}

static void block_signals(sigset_t *signals)
{
	/* Blocked before any thread starts, so only the signalfd sees them. */
	sigemptyset(signals);
	sigaddset(signals, SIGTERM);
	sigaddset(signals, SIGINT);
	sigaddset(signals, SIGHUP);
	pthread_sigmask(SIG_BLOCK, signals, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/*
 * Names from the Kubernetes API: the tables first (the answer sources point
 * at them), the client that fills them once everything else has started
 * (start_watching).
 */
struct cluster_making {
	const struct config *cfg;
	struct cluster *cluster, *clusterset;
	struct mesh *mesh;
	char *err;
	size_t errlen;
};

static void make_cluster(void *arg)
{
	struct cluster_making *m = arg;

	urcu_memb_register_thread(); /* the fixed names go in under the read lock */
	m->cluster = cluster_new(m->cfg, m->err, m->errlen);
	if (m->cluster && m->cfg->multicluster.enabled)
		m->clusterset = cluster_new_clusterset(m->cfg, m->err, m->errlen);
	if (m->cluster && (!m->cfg->multicluster.enabled || m->clusterset) && m->cfg->mesh.istio)
		m->mesh = mesh_new(m->cfg, m->err, m->errlen);
	urcu_memb_unregister_thread();
}

/*
 * liburcu's hash tables start their resize thread from the thread that
 * makes the first of them: made on a thread restricted as the Kubernetes
 * thread (the tables' writer), that resize thread inherits its limits
 * instead of the main thread's capabilities.
 */
static int make_cluster_table(const struct config *cfg, struct daemon *d, char *err, size_t errlen)
{
	struct cluster_making m = {.cfg = cfg, .err = err, .errlen = errlen};

	if (!cfg->kubernetes.enabled)
		return 0;
	if (privs_run_as(PRIVS_KUBERNETES, "kubernetes", make_cluster, &m, err, errlen) < 0)
		return -1;
	d->cluster = m.cluster;
	d->clusterset = m.clusterset;
	d->mesh = m.mesh;
	return m.cluster && (m.clusterset || !cfg->multicluster.enabled) &&
			       (m.mesh || !cfg->mesh.istio)
		       ? 0
		       : -1;
}

/* dnstap's extra field: the pod of this node behind a client address. */
static bool client_pod(const void *cluster, const struct sockaddr_storage *client, char *out,
		       size_t cap)
{
	return cluster_client_pod(cluster, client, out, cap);
}

static int start_watching(const struct config *cfg, struct daemon *d, struct cluster_feed *feed,
			  char *err, size_t errlen)
{
	struct kube_handler h;

	if (!d->cluster)
		return 0;
	*feed = (struct cluster_feed){.cluster = d->cluster, .clusterset = d->clusterset,
				      .mesh = d->mesh};
	cluster_feed_handler(feed, &h);
	return kube_start(cfg, cluster_needs_pods(cfg), cluster_slices_needed(d->cluster), &h,
			  &d->kube, err, errlen);
}

static void use_cluster_dns_endpoints(void *node, const struct config_ip *ips, size_t n)
{
	node_use_cluster_dns_endpoints(node, ips, n);
}

/* The fallback DNAT follows the watched kube-dns endpoints (nftables.fallback_service). */
static void follow_cluster_dns(const struct config *cfg, struct cluster *cluster,
			       struct node *node)
{
	const char *svc = cfg->nftables.fallback_service;
	const char *slash = strchr(svc, '/');
	char ns[64];

	if (!cluster || !node_nft(node) || !slash)
		return;
	snprintf(ns, sizeof ns, "%.*s", (int)(slash - svc), svc);
	cluster_watch_endpoints(cluster, ns, slash + 1, use_cluster_dns_endpoints, node);
}

#define STALE_AFTER_MS 30000   /* no word from the API this long: say so */
#define STALE_REPEAT_MS 60000  /* and again this often while it lasts */

/* After a sync, an API outage keeps the last good data: the log says how old it is. */
static void report_staleness(const struct kube_client *kube, int64_t *last_report_ms)
{
	struct kube_status st;
	int64_t now = wall_ms();
	char age[24];

	if (!kube)
		return;
	kube_status(kube, &st);
	if (!st.synced || st.last_contact_ms == 0 || now - st.last_contact_ms < STALE_AFTER_MS ||
	    now - *last_report_ms < STALE_REPEAT_MS)
		return;
	*last_report_ms = now;
	snprintf(age, sizeof age, "%llds", (long long)((now - st.last_contact_ms) / 1000));
	log_warn("kubernetes API unreachable: serving the last synced cluster data",
		 "stale_for", age);
}

#define TICK_MS 5000 /* how often the API's health is looked at */

/* A signal from the signalfd: SIGHUP reloads (0 returned), the others stop. */
static int take_signal(int sigfd, struct daemon *d)
{
	struct signalfd_siginfo si;
	char err[CONFIG_ERR_MAX];

	if (read(sigfd, &si, sizeof si) != sizeof si)
		return 0;
	if (si.ssi_signo != SIGHUP)
		return (int)si.ssi_signo;
	daemon_reload(d, err, sizeof err);
	return 0;
}

/*
 * Until SIGTERM or SIGINT: reload on SIGHUP and when the config files
 * change, and look at the API's health every few seconds meanwhile.
 */
static int serve_until_stopped(int sigfd, struct daemon *d)
{
	char err[CONFIG_ERR_MAX];
	int64_t last_stale_report = 0;
	int sig = 0;
	struct daemon_watch *watch = daemon_watch_new(d, err, sizeof err);
	struct pollfd fds[3] = {
		{.fd = sigfd, .events = POLLIN},
		{.fd = watch ? daemon_watch_fd(watch) : -1, .events = POLLIN},
		/* localdns ctl reload; ready: take the node's DNS */
		{.fd = daemon_ask_fd(d), .events = POLLIN},
	};

	if (!watch)
		log_warn("the config file is not watched; SIGHUP reloads", "error", err);
	while (!sig) {
		int n = poll(fds, 3, TICK_MS);
		if (n < 0 && errno != EINTR) {
			log_error("poll failed; stopping", "error", strerror(errno));
			sig = SIGTERM;
		}
		if (watch)
			daemon_watch_process(watch);
		if (n > 0 && (fds[0].revents & POLLIN))
			sig = take_signal(sigfd, d);
		if (n > 0 && (fds[2].revents & POLLIN))
			daemon_serve_asks(d);
		report_staleness(d->kube, &last_stale_report);
	}
	daemon_refuse_reloads(d); /* before the control thread is stopped: it may be waiting */
	daemon_watch_free(watch);
	return sig;
}

#define SETTLE_MS 500 /* covers cache.stale_answer_timeout's stale answers (400 ms) */

/*
 * How late a query the heartbeat let in just before the leave may still
 * reach its socket: its socket lookup waits for a softirq, which a busy
 * node may run in ksoftirqd, a thread like any other, milliseconds later.
 */
#define LATE_QUERY_MS 200

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/*
 * Leave without losing a query: the heartbeat out first (new flows fail
 * open, or go to another localdns on the node), then the sockets steered
 * away and what they had queued answered, then the answers that wait for
 * the upstream, for a moment. Alone on the node, the listeners are left
 * as they are for LATE_QUERY_MS first: a query the heartbeat sent here
 * just before it went may reach its socket only now, and a UDP socket
 * steered away (connected to itself) or a closed TCP listener would make
 * the kernel refuse it ("port unreachable", a reset), which a stub
 * resolver gives up on. Beside another localdns they are steered at once:
 * what comes then is the other one's.
 */
static void hand_over(struct keeper_link *keeper, struct node *node, struct server *server,
		      struct upstream *upstream)
{
	keeper_link_leave(keeper); /* we hand over ourselves: the keeper rescues nothing */
	if (!node_release(node)) {
		char ms[16];
		snprintf(ms, sizeof ms, "%d", LATE_QUERY_MS);
		log_info("keeping the listeners open for queries already on their way", "ms", ms);
		sleep_ms(LATE_QUERY_MS);
	}
	server_release(server);
	log_info("handed the sockets over");
	upstream_settle(upstream, SETTLE_MS);
}

static bool needs_node(const struct config *cfg)
{
	return cfg->interface.manage || cfg->nftables.enabled;
}

/* `localdns cleanup --config FILE`: what an uninstall runs on each node. */
static int cleanup(const char *path)
{
	struct config *cfg;
	char err[CONFIG_ERR_MAX];

	if (config_load(path, &cfg, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	int rc = node_cleanup(cfg, err, sizeof err);
	if (rc < 0)
		fprintf(stderr, "localdns cleanup: %s\n", err);
	else
		printf("removed table inet %s%s\n", cfg->nftables.table,
		       cfg->interface.manage ? " and our link or addresses" : "");
	config_free(cfg);
	return rc < 0 ? 1 : 0;
}

/* What serve() starts beyond the subsystems daemon.h lists. */
struct serving {
	struct daemon daemon;        /* the subsystems, filled as each starts */
	struct control *control;
	struct http *http;
	struct cluster_feed feed;    /* the Kubernetes client's handler's */
};

/*
 * The one stop order: the reverse of start_serving's, with one exception:
 * the resolver thread halts before the workers, because it sends deferred
 * replies on their sockets; its memory goes in the reverse order. Every
 * step takes a subsystem that never started (NULL).
 */
static void stop_serving(struct serving *run)
{
	struct daemon *d = &run->daemon;

	control_stop(run->control);
	http_stop(run->http);
	keeper_link_leave(d->keeper); /* from now on the monitor leaves the server alone */
	upstream_stop(d->upstream);
	server_stop(d->server);
	kube_stop(d->kube);
	log_node_totals(d->node);
	node_stop(d->node);
	keeper_link_free(d->keeper);
	upstream_free(d->upstream);
	talkers_stop();
	querylog_stop();
	dnstap_stop();
	query_sources_retire();
	mesh_free(d->mesh);
	cluster_free(d->clusterset);
	cluster_free(d->cluster);
	cache_free(d->cache);
	daemon_destroy(d);
}

/* Everything up to the control thread, in order; a failure leaves err set. */
static int start_serving(struct serving *run, struct config *cfg, char *err, size_t errlen)
{
	struct daemon *d = &run->daemon;
	unsigned workers = server_worker_count(cfg);
	struct query_sources *sources;

	if (control_open(cfg, &run->control, err, errlen) < 0)
		return -1;
	d->cache = make_cache(cfg);
	if (!d->cache) {
		snprintf(err, errlen, "cannot allocate the answer cache (cache.size)");
		return -1;
	}
	if (make_cluster_table(cfg, d, err, errlen) < 0)
		return -1;
	sources = query_sources_build(cfg, &(struct query_names){d->cluster, d->clusterset, d->mesh},
				      d->cache, err, errlen);
	if (!sources)
		return -1;
	query_sources_publish(sources);
	if (querylog_start(cfg, workers, err, errlen) < 0)
		return -1;
	if (dnstap_start(cfg, workers, d->cluster ? client_pod : NULL, d->cluster, err,
			 errlen) < 0)
		return -1;
	if (talkers_start(workers) < 0) {
		snprintf(err, errlen, "top talkers: out of memory");
		return -1;
	}
	/* request rings for the workers, then the control threads' (ctl lookup) */
	d->upstream = upstream_start(cfg, d->cache, workers + CONTROL_THREADS,
				     upstream_on_worker(cfg, workers), err, errlen);
	if (!d->upstream)
		return -1;
	if (needs_node(cfg) && !(d->node = node_start(cfg, err, errlen)))
		return -1;
	if (cfg->keeper.socket[0] && !(d->keeper = keeper_link_new(cfg, workers, err, errlen)))
		return -1;
	follow_cluster_dns(cfg, d->cluster, d->node);
	if (start_watching(cfg, d, &run->feed, err, errlen) < 0)
		return -1;
	/* With the nftables table, DNS comes here only once ready (node_capture). */
	d->server = server_start(cfg, d->upstream, node_nft(d->node) != NULL,
				 keeper_link_beats(d->keeper), err, errlen);
	if (!d->server)
		return -1;
	if (d->keeper) {
		/* The keeper takes the heartbeat out on death and hang: its expiry is the last resort. */
		nft_live_timeout(node_nft(d->node), NFT_LIVE_TIMEOUT_KEPT_MS);
		keeper_link_serve(d->keeper, d->server, nft_token(node_nft(d->node)));
		node_keep(d->node, d->keeper);
	}
	node_capture(d->node, daemon_may_capture, d);
	/* Last: a bad health or metrics address stops everything started so far. */
	run->http = http_start(d, err, errlen);
	if (!run->http)
		return -1;
	if (control_start(run->control, d, workers, err, errlen) < 0)
		log_error("no control socket; serving without it", "error", err);
	log_serving(cfg, d->server); /* everything is up: tests and operators wait for this */
	return 0;
}

static int serve(const char *path)
{
	struct config *cfg;
	struct serving run = {0};
	char err[CONFIG_ERR_MAX];
	sigset_t signals;
	int sigfd, rc = 1;

	if (config_load(path, &cfg, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	log_setup((enum log_level)cfg->log.level, (enum log_format)cfg->log.format);
	/* First: capabilities are per thread, and every thread copies these (privs.h). */
	if (privs_drop(cfg, err, sizeof err) < 0) {
		log_error("cannot start", "error", err);
		config_free(cfg);
		return 1;
	}
	block_signals(&signals);
	sigfd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigfd < 0) {
		fprintf(stderr, "cannot receive signals: %s\n", strerror(errno));
		config_free(cfg);
		return 1;
	}
	urcu_memb_register_thread();
	if (daemon_init(&run.daemon, path, cfg, err, sizeof err) < 0) {
		log_error("cannot start", "error", err);
	} else if (start_serving(&run, cfg, err, sizeof err) < 0) {
		log_error("cannot start", "error", err);
		stop_serving(&run);
	} else {
		int sig = serve_until_stopped(sigfd, &run.daemon);
		log_info("shutting down", "signal", sig == SIGINT ? "SIGINT" : "SIGTERM");
		hand_over(run.daemon.keeper, run.daemon.node, run.daemon.server,
			  run.daemon.upstream);
		log_totals(&run.daemon);
		stop_serving(&run);
		rc = 0;
	}
	urcu_memb_unregister_thread();
	close(sigfd);
	config_free(cfg);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{"config", required_argument, NULL, 'c'},
		{"check-config", required_argument, NULL, 'C'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *config_path = NULL, *check_path = NULL;
	bool cleaning = argc > 1 && strcmp(argv[1], "cleanup") == 0;
	bool keeping = argc > 1 && strcmp(argv[1], "keeper") == 0;
	int opt;

	upstream_prepare_process(); /* before any thread, libunbound's among them */
	if (argc > 1 && strcmp(argv[1], "ctl") == 0)
		return ctl_main(argc - 1, argv + 1);
	if (cleaning || keeping) {
		/* The subcommands take the same options after them. */
		argv[1] = argv[0];
		argc--;
		argv++;
	}

	while ((opt = getopt_long(argc, argv, "c:C:Vh", options, NULL)) != -1) {
		switch (opt) {
		case 'c':
			config_path = optarg;
			break;
		case 'C':
			check_path = optarg;
			break;
		case 'V':
			printf("localdns %s (%s)\n", LOCALDNS_VERSION, LOCALDNS_GIT_REV);
			return 0;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (optind < argc || (!config_path && !check_path) ||
	    ((cleaning || keeping) && !config_path)) {
		fputs(usage_text, stderr);
		return 2;
	}
	if (cleaning)
		return cleanup(config_path);
	if (keeping)
		return keeper_main(config_path);
	if (check_path)
		return check_config(check_path);
	return serve(config_path);
}
