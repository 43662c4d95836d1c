/*
 * node/node.c — see node.h.
 *
 * The monitor thread sleeps in poll() on three descriptors (rtnetlink
 * events, nftables events, a stop eventfd) with a timeout that wakes it for
 * the next heartbeat or the next full check. Events only say "look": the
 * repair re-reads the kernel's state (iface_repair, nft_check) and changes
 * only what is missing, so our own changes coming back as events, or a
 * second localdns during an upgrade, cause no churn. A rebuilt table is at
 * most one per MIN_REBUILD_GAP_MS, so two instances with different configs
 * cannot trade rebuilds in a tight loop.
 *
 * A reload changes the served addresses under node->lock, which the
 * monitor holds while it handles events and timers (never while it
 * polls): iface is one-thread-at-a-time, and node->cfg moves to the new
 * config.
 *
 * The fallback endpoints come from the Kubernetes thread, which has no
 * capability and may not open netlink sockets (privs.h): it leaves them in
 * node->pending and wakes the monitor, which installs the latest.
 *
 * The heartbeat is renewed only while the daemon's capture test says DNS
 * should come here (node_capture): ready, and every worker turning. The
 * test runs on this thread before each renewal, under node->lock, so
 * node_release, which takes it away under the same lock, is never followed
 * by a late renewal.
 */
#include "node/node.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keeper/keeper.h"
#include "log/log.h"
#include "iface/iface.h"
#include "nft/plan.h"
#include "privs/privs.h"
#include "util/clock.h"
#include "util/wake.h"

#define MIN_REBUILD_GAP_MS 200
#define IDLE_TURN_MS 1000 /* an idle loop still turns: /health watches it */

struct node {
	pthread_mutex_t lock;   /* cfg, iface: the monitor, reloads, the kube watch */
	const struct config *cfg;
	struct iface *iface;  /* NULL: interface.manage is off */
	struct nft *nft;      /* NULL: nftables.enabled is off */
	int stop_fd;
	int wake_fd;          /* eventfd: new fallback endpoints are pending */
	pthread_mutex_t pending_lock;
	struct pending_endpoints {
		bool set;
		struct config_ip *ips;
		size_t n;
	} pending;            /* pending_lock: the latest from the Kubernetes watch */
	pthread_t thread;
	bool running;
	node_capture_fn *capture; /* lock: NULL until node_capture, after node_release */
	void *capture_arg;
	bool capturing;           /* the last heartbeat was renewed (monitor thread) */
	_Atomic(struct keeper_link *) keeper; /* node_keep; driven by the monitor */
	atomic_uint_fast64_t heartbeat_ms; /* each turn of the monitor loop, for /health */
	atomic_uint_fast64_t link_repairs;
	atomic_uint_fast64_t table_repairs;
	struct node_status seen; /* lock: the checks' outcomes (the rest comes from cfg) */
};

/* A check's outcome, for `localdns ctl node`; problem NULL: all is well. */
static void saw(uint64_t *when, char *slot, const char *problem)
{
	*when = (uint64_t)monotonic_ms();
	snprintf(slot, CONFIG_ERR_MAX, "%s", problem ? problem : "");
}

static void saw_endpoints(struct node *node, const char *from, const struct config_ip *ips,
			  size_t n)
{
	struct node_status *seen = &node->seen;
	size_t shown = n < NODE_STATUS_ENDPOINTS ? n : NODE_STATUS_ENDPOINTS;

	snprintf(seen->fallback_source, sizeof seen->fallback_source, "%s", n ? from : "");
	if (shown)
		memcpy(seen->fallback, ips, shown * sizeof *ips);
	seen->n_fallback = n;
}

static void repair_link(struct node *node)
{
	char err[CONFIG_ERR_MAX], count[24];
	int put_back = iface_repair(node->iface, err, sizeof err);

	saw(&node->seen.link_checked_ms, node->seen.link_problem, put_back < 0 ? err : NULL);
	if (put_back < 0) {
		log_error("cannot put the link and addresses back", "error", err);
		return;
	}
	if (put_back == 0)
		return;
	atomic_fetch_add(&node->link_repairs, (uint64_t)put_back);
	snprintf(count, sizeof count, "%d", put_back);
	log_warn("put back the link or addresses someone removed", "interface",
		 node->cfg->interface.kind == CONFIG_IF_LOOPBACK ? "lo" : node->cfg->interface.name,
		 "objects", count);
}

static void repair_table(struct node *node)
{
	char why[CONFIG_ERR_MAX], err[CONFIG_ERR_MAX];
	int state = nft_check(node->nft, why, sizeof why);

	saw(&node->seen.table_checked_ms, node->seen.table_problem, state < 0 ? why : NULL);
	if (state < 0) {
		log_error("cannot check the nftables table", "error", why);
		return;
	}
	if (state == 1)
		return;
	if (nft_apply(node->nft, err, sizeof err) < 0) {
		saw(&node->seen.table_checked_ms, node->seen.table_problem, err);
		log_error("cannot rebuild the nftables table", "table", node->cfg->nftables.table,
			  "error", err);
		return;
	}
	atomic_fetch_add(&node->table_repairs, 1);
	log_warn("rebuilt the nftables table after a change by someone else", "table",
		 node->cfg->nftables.table, "found", why);
}


/* Deadlines of the monitor loop, in (uint64_t)monotonic_ms() time. */
struct schedule {
	uint64_t heartbeat;
	uint64_t reassert;
	uint64_t table_check;    /* 0: none pending */
	uint64_t last_rebuild_check;
};

static int poll_timeout(const struct node *node, const struct schedule *s, uint64_t now)
{
	uint64_t next = now + IDLE_TURN_MS;

	if (s->reassert < next)
		next = s->reassert;

	if (node->nft && s->heartbeat < next)
		next = s->heartbeat;
	if (s->table_check && s->table_check < next)
		next = s->table_check;
	return next <= now ? 0 : (int)(next - now);
}

/* Check the table soon, but not sooner than MIN_REBUILD_GAP_MS after the last check. */
static void schedule_table_check(struct schedule *s, uint64_t now)
{
	uint64_t earliest = s->last_rebuild_check + MIN_REBUILD_GAP_MS;

	if (!s->table_check)
		s->table_check = earliest > now ? earliest : now;
}

/*
 * Renewed only while DNS should come here; a failed renewal usually means
 * the table was changed under us: check it. Capture starting and stopping
 * is logged.
 */
static void heartbeat(struct node *node, struct schedule *s, uint64_t now)
{
	char why[CONFIG_ERR_MAX] = "not ready", err[CONFIG_ERR_MAX];

	if (!node->capture || !node->capture(node->capture_arg, why, sizeof why)) {
		if (node->capturing)
			log_warn("not renewing the nftables heartbeat: DNS fails open until it is "
				 "back", "reason", why);
		node->capturing = node->seen.capturing = false;
		snprintf(node->seen.not_capturing, sizeof node->seen.not_capturing, "%s", why);
		return;
	}
	node->seen.capturing = true;
	if (nft_heartbeat(node->nft, err, sizeof err) < 0) {
		snprintf(node->seen.heartbeat_problem, CONFIG_ERR_MAX, "%s", err);
		log_warn("cannot renew the nftables heartbeat; checking the table", "error", err);
		schedule_table_check(s, now);
		return;
	}
	saw(&node->seen.heartbeat_renewed_ms, node->seen.heartbeat_problem, NULL);
	if (!node->capturing)
		log_info("taking DNS: the nftables heartbeat is renewed");
	node->capturing = true;
}

/* "10.244.1.5,10.244.2.7" (cut short when it does not fit). */
static void join_ips(const struct config_ip *ips, size_t n, char *out, size_t len)
{
	size_t used = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n && used < len; i++) {
		int w = snprintf(out + used, len - used, "%s%s", i ? "," : "", ips[i].text);
		if (w < 0)
			break;
		used += (size_t)w;
	}
}

#define OLD_ENDPOINTS 64

/* Which of old[0..n_old) are not in ips; into gone, how many. */
static size_t gone_endpoints(const struct config_ip *old, size_t n_old, const struct config_ip *ips,
			     size_t n, struct config_ip *gone)
{
	size_t n_gone = 0;

	for (size_t i = 0; i < n_old; i++) {
		bool kept = false;
		for (size_t j = 0; j < n && !kept; j++)
			kept = old[i].family == ips[j].family && strcmp(old[i].text, ips[j].text) == 0;
		if (!kept)
			gone[n_gone++] = old[i];
	}
	return n_gone;
}

/* The UDP flows the fallback DNAT sent to endpoints now gone: forgotten (nft_forget_flows). */
static void forget_flows(struct node *node, const struct config_ip *gone, size_t n_gone)
{
	char err[CONFIG_ERR_MAX], list[512], count[24];
	int forgotten = nft_forget_flows(node->cfg, gone, n_gone, err, sizeof err);

	if (forgotten < 0) {
		log_warn("cannot forget the flows sent to the old fallback endpoints; they go there "
			 "until they time out", "error", err);
	} else if (forgotten > 0) {
		join_ips(gone, n_gone, list, sizeof list);
		snprintf(count, sizeof count, "%d", forgotten);
		log_info("forgot the UDP flows the fallback sent to endpoints that are gone",
			 "endpoints", list, "flows", count);
	}
}

/*
 * On the monitor thread, which keeps CAP_NET_ADMIN, under node->lock (a
 * reload may replace cfg).
 */
static void use_endpoints(struct node *node, const struct config_ip *ips, size_t n)
{
	const struct config *cfg = node->cfg;
	char err[CONFIG_ERR_MAX], list[512];
	const char *from = "kubernetes";
	struct config_ip old[OLD_ENDPOINTS], gone[OLD_ENDPOINTS];
	size_t n_old = nft_fallback_endpoints(node->nft, old, OLD_ENDPOINTS);

	if (n == 0) {
		/* Nothing ready: the static list is the best guess left. */
		ips = cfg->nftables.fallback_endpoints;
		n = cfg->nftables.n_fallback_endpoints;
		from = "nftables.fallback_endpoints";
	}
	join_ips(ips, n, list, sizeof list);
	if (nft_set_fallback_endpoints(node->nft, ips, n, err, sizeof err) < 0) {
		log_error("cannot update the fallback endpoints; keeping the previous ones",
			  "error", err);
		return;
	}
	saw_endpoints(node, from, ips, n);
	log_info("fallback endpoints for the link-local addresses", "service",
		 cfg->nftables.fallback_service, "source", from, "endpoints", n ? list : "none");
	forget_flows(node, gone, gone_endpoints(old, n_old < OLD_ENDPOINTS ? n_old : OLD_ENDPOINTS,
						ips, n, gone));
}

/* The endpoints the Kubernetes watch left, if any, installed. */
static void take_pending_endpoints(struct node *node)
{
	struct pending_endpoints p;

	wake_take(node->wake_fd);
	pthread_mutex_lock(&node->pending_lock);
	p = node->pending;
	node->pending = (struct pending_endpoints){0};
	pthread_mutex_unlock(&node->pending_lock);
	if (p.set)
		use_endpoints(node, p.ips, p.n);
	free(p.ips);
}

static void on_events(struct node *node, struct pollfd *fds, struct schedule *s, uint64_t now)
{
	if (node->iface && (fds[1].revents & POLLIN) && iface_drain_events(node->iface))
		repair_link(node);
	if (node->nft && (fds[2].revents & POLLIN) && nft_drain_events(node->nft))
		schedule_table_check(s, now);
	if (fds[3].revents & POLLIN)
		take_pending_endpoints(node);
}

static void on_timers(struct node *node, struct schedule *s, uint64_t now)
{
	if (node->nft && now >= s->heartbeat) {
		heartbeat(node, s, now);
		s->heartbeat = now + NFT_LIVE_REFRESH_MS;
	}
	if (now >= s->reassert) {
		if (node->iface)
			repair_link(node);
		if (node->nft)
			s->table_check = now;
		s->reassert = now + node->cfg->nftables.reassert_interval_ms;
	}
	if (s->table_check && now >= s->table_check) {
		repair_table(node);
		s->table_check = 0;
		s->last_rebuild_check = now;
	}
}

static void *monitor(void *arg)
{
	struct node *node = arg;
	uint64_t now = (uint64_t)monotonic_ms();
	struct schedule s = {
		.heartbeat = now,
		.reassert = now + node->cfg->nftables.reassert_interval_ms,
	};
	struct pollfd fds[4] = {
		{.fd = node->stop_fd, .events = POLLIN},
		{.fd = node->iface ? iface_event_fd(node->iface) : -1, .events = POLLIN},
		{.fd = node->nft ? nft_event_fd(node->nft) : -1, .events = POLLIN},
		{.fd = node->wake_fd, .events = POLLIN},
	};

	for (;;) {
		int ready = poll(fds, 4, poll_timeout(node, &s, now));
		if (ready < 0 && errno != EINTR) {
			log_error("node monitor: poll failed; links and rules are no longer watched");
			break;
		}
		if (fds[0].revents & POLLIN)
			break;
		now = (uint64_t)monotonic_ms();
		atomic_store(&node->heartbeat_ms, now);
		/* Before the heartbeat: the keeper has the sockets it opens. */
		keeper_link_turn(atomic_load(&node->keeper), now);
		pthread_mutex_lock(&node->lock);
		if (ready > 0)
			on_events(node, fds, &s, now);
		on_timers(node, &s, now);
		pthread_mutex_unlock(&node->lock);
	}
	return NULL;
}

/* ---- start and stop ------------------------------------------------------------ */

static void free_node(struct node *node)
{
	iface_close(node->iface);
	nft_close(node->nft);
	if (node->stop_fd >= 0)
		close(node->stop_fd);
	if (node->wake_fd >= 0)
		close(node->wake_fd);
	free(node->pending.ips);
	pthread_mutex_destroy(&node->pending_lock);
	pthread_mutex_destroy(&node->lock);
	free(node);
}

static int apply_interface(struct node *node, char *err, size_t errlen)
{
	if (!node->cfg->interface.manage)
		return 0;
	if (!(node->iface = iface_open(node->cfg, err, errlen)))
		return -1;
	if (iface_apply(node->iface, err, errlen) < 0)
		return -1;
	saw(&node->seen.link_checked_ms, node->seen.link_problem, NULL);
	return 0;
}

/*
 * The table we take over was kept up to date by the Kubernetes watch of the
 * process before us: its fallback endpoints beat the static list until our
 * own watch reports (without the watch, the static list is the truth).
 */
static void keep_endpoints(struct node *node)
{
	const struct config *cfg = node->cfg;
	struct config_ip ips[NODE_STATUS_ENDPOINTS];
	char list[512];

	if (!cfg->kubernetes.enabled || !strchr(cfg->nftables.fallback_service, '/'))
		return;
	int n = nft_keep_endpoints(node->nft, ips, sizeof ips / sizeof ips[0]);
	if (n < 0) {
		log_warn("cannot read the fallback endpoints of the table; using "
			 "nftables.fallback_endpoints until the Kubernetes watch reports",
			 "error", strerror(errno));
	} else if (n > 0) {
		join_ips(ips, (size_t)n < sizeof ips / sizeof ips[0] ? (size_t)n : 16, list,
			 sizeof list);
		saw_endpoints(node, "the table found at start", ips, (size_t)n);
		log_info("keeping the fallback endpoints our table has until the Kubernetes watch "
			 "reports", "endpoints", list);
	}
}

/*
 * Before anything on the node changes: a table of our name that someone
 * else made (nftables.table: filter) stops start-up with the node as it was.
 */
static int claim_table(struct node *node, char *err, size_t errlen)
{
	if (!node->cfg->nftables.enabled)
		return 0;
	if (!(node->nft = nft_open(node->cfg, err, errlen)))
		return -1;
	int owner = nft_table_owner(node->nft, err, errlen);
	if (owner == NFT_TABLE_OURS)
		keep_endpoints(node);
	return owner < 0 || owner == NFT_TABLE_FOREIGN ? -1 : 0;
}

/* The static list (nftables.fallback_endpoints), unless keep_endpoints kept the table's. */
static int apply_table(struct node *node, char *err, size_t errlen)
{
	const struct config *cfg = node->cfg;

	if (!node->nft)
		return 0;
	if (nft_apply(node->nft, err, errlen) < 0)
		return -1;
	saw(&node->seen.table_checked_ms, node->seen.table_problem, NULL);
	if (!node->seen.n_fallback) /* none kept from the table found at start */
		saw_endpoints(node, "nftables.fallback_endpoints", cfg->nftables.fallback_endpoints,
			      cfg->nftables.n_fallback_endpoints);
	return 0;
}

struct node *node_start(const struct config *cfg, char *err, size_t errlen)
{
	struct node *node = calloc(1, sizeof *node);

	if (!node) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	node->cfg = cfg;
	pthread_mutex_init(&node->lock, NULL);
	pthread_mutex_init(&node->pending_lock, NULL);
	node->stop_fd = wake_open();
	node->wake_fd = wake_open();
	if (node->stop_fd < 0 || node->wake_fd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		free_node(node);
		return NULL;
	}
	if (claim_table(node, err, errlen) < 0 || apply_interface(node, err, errlen) < 0)
		goto fail;
	if (apply_table(node, err, errlen) < 0) {
		if (node->iface)
			iface_rollback(node->iface);
		goto fail;
	}
	if (node->iface || node->nft) {
		atomic_init(&node->heartbeat_ms, (uint64_t)monotonic_ms()); /* alive before it runs */
		if (privs_thread_create(&node->thread, PRIVS_NODE, "node", monitor, node, err,
					errlen) < 0)
			goto fail;
		node->running = true;
	}
	return node;
fail:
	free_node(node);
	return NULL;
}

static void teardown(struct node *node)
{
	char err[CONFIG_ERR_MAX];

	if (node->nft && nft_remove(node->nft, err, sizeof err) < 0)
		log_error("teardown: cannot remove the nftables table", "error", err);
	else if (node->nft)
		log_info("teardown: removed the nftables table", "table", node->cfg->nftables.table);
	if (node->iface && iface_remove(node->iface, err, sizeof err) < 0)
		log_error("teardown: cannot remove the link or addresses", "error", err);
	else if (node->iface)
		log_info("teardown: removed the link or our addresses on lo");
}

void node_stop(struct node *node)
{
	if (!node)
		return;
	if (node->running) {
		wake_send(node->stop_fd);
		pthread_join(node->thread, NULL);
	}
	if (node->cfg->nftables.teardown)
		teardown(node);
	free_node(node);
}

struct nft *node_nft(struct node *node)
{
	return node ? node->nft : NULL;
}


void node_use_cluster_dns_endpoints(struct node *node, const struct config_ip *ips, size_t n)
{
	struct config_ip *copy = NULL;

	if (!node || !node->nft)
		return;
	if (n && !(copy = malloc(n * sizeof *copy))) {
		log_error("cannot update the fallback endpoints; keeping the previous ones",
			  "error", "out of memory");
		return;
	}
	if (n)
		memcpy(copy, ips, n * sizeof *copy);
	pthread_mutex_lock(&node->pending_lock);
	free(node->pending.ips); /* superseded before the monitor took it */
	node->pending = (struct pending_endpoints){.set = true, .ips = copy, .n = n};
	pthread_mutex_unlock(&node->pending_lock);
	wake_send(node->wake_fd);
}


/* ---- reload -------------------------------------------------------------------- */

int node_add_addresses(struct node *node, const struct config *next, char *err, size_t errlen)
{
	int rc = 0;

	pthread_mutex_lock(&node->lock);
	if (node->iface)
		rc = iface_add(node->iface, next, err, errlen);
	pthread_mutex_unlock(&node->lock);
	return rc;
}

void node_undo_addresses(struct node *node)
{
	pthread_mutex_lock(&node->lock);
	if (node->iface)
		iface_rollback(node->iface);
	pthread_mutex_unlock(&node->lock);
}

int node_use(struct node *node, const struct config *next, char *err, size_t errlen)
{
	int rc = 0;

	pthread_mutex_lock(&node->lock);
	if (node->nft)
		rc = nft_use(node->nft, next, err, errlen);
	if (rc == 0) {
		if (node->iface)
			iface_use(node->iface, next);
		node->cfg = next;
	}
	pthread_mutex_unlock(&node->lock);
	return rc;
}

void node_drop_addresses(struct node *node, const struct config *prev)
{
	char err[CONFIG_ERR_MAX];

	pthread_mutex_lock(&node->lock);
	if (node->iface && iface_drop(node->iface, prev, err, sizeof err) < 0)
		log_error("cannot remove an address that is no longer served", "error", err);
	pthread_mutex_unlock(&node->lock);
}

void node_keep(struct node *node, struct keeper_link *link)
{
	if (node)
		atomic_store(&node->keeper, link);
}

void node_capture(struct node *node, node_capture_fn *fn, void *arg)
{
	if (!node)
		return;
	pthread_mutex_lock(&node->lock);
	node->capture = fn;
	node->capture_arg = arg;
	pthread_mutex_unlock(&node->lock);
}

bool node_release(struct node *node)
{
	char err[CONFIG_ERR_MAX];

	if (!node)
		return true;
	pthread_mutex_lock(&node->lock);
	node->capture = NULL;
	node->capturing = false;
	int rc = node->nft ? nft_leave(node->nft, err, sizeof err) : 0;
	pthread_mutex_unlock(&node->lock);
	if (rc < 0)
		log_error("cannot take out the nftables heartbeat; DNS fails open when it expires",
			  "error", err);
	else if (rc == 1)
		log_info("took out our nftables heartbeat; another localdns on the node keeps taking DNS");
	else if (node->nft)
		log_info("took out the nftables heartbeat: DNS fails open from now on");
	return rc != 0 || !node->nft;
}

uint64_t node_heartbeat_ms(struct node *node)
{
	return node && node->running ? atomic_load(&node->heartbeat_ms) : 0;
}

void node_stats(struct node *node, struct node_stats *out)
{
	out->link_repairs = node ? atomic_load(&node->link_repairs) : 0;
	out->table_repairs = node ? atomic_load(&node->table_repairs) : 0;
}

static void status_from_config(const struct config *cfg, struct node_status *out)
{
	out->link_managed = cfg->interface.manage;
	out->loopback = cfg->interface.kind == CONFIG_IF_LOOPBACK;
	snprintf(out->link, sizeof out->link, "%s", out->loopback ? "lo" : cfg->interface.name);
	out->table_managed = cfg->nftables.enabled;
	snprintf(out->table, sizeof out->table, "%s", cfg->nftables.table);
	out->teardown = cfg->nftables.teardown;
	snprintf(out->fallback_service, sizeof out->fallback_service, "%s",
		 cfg->nftables.fallback_service);
}

void node_status(struct node *node, struct node_status *out)
{
	memset(out, 0, sizeof *out);
	if (!node)
		return;
	pthread_mutex_lock(&node->lock);
	*out = node->seen;
	status_from_config(node->cfg, out);
	pthread_mutex_unlock(&node->lock);
	out->monitor_turned_ms = node_heartbeat_ms(node);
	out->heartbeat_timeout_ms = node->nft ? nft_live_timeout_ms(node->nft) : 0;
	node_stats(node, &out->repairs);
}

int node_cleanup(const struct config *cfg, char *err, size_t errlen)
{
	struct nft *nft = nft_open(cfg, err, errlen);
	int rc = nft ? nft_remove(nft, err, errlen) : -1;

	nft_close(nft);
	/* Without interface.manage the addresses are the operator's, not ours. */
	if (rc < 0 || !cfg->interface.manage)
		return rc;
	struct iface *ifc = iface_open(cfg, err, errlen);
	rc = ifc ? iface_remove(ifc, err, errlen) : -1;
	iface_close(ifc);
	return rc;
}
