/*
 * control — `node`: what localdns installed on this node and what DNS on
 * the node would do if localdns died now (docs/ctl.md has the format).
 *
 * The control threads may not ask the kernel (no CAP_NET_ADMIN, no
 * netlink socket), so the installed state is the node monitor's word
 * (node_status) with its age; the consequences follow from it the way
 * docs/node-integration.md ("Which paths fail open") describes them.
 */
#include "control/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/daemon.h"
#include "nft/plan.h"
#include "node/node.h"
#include "util/clock.h"

#define SHOWN_ADDRESSES 64

/* "3.2s" since a monotonic ms; "never" for 0. */
static const char *age(uint64_t then_ms, uint64_t now_ms, char *out, size_t len)
{
	if (!then_ms)
		return "never";
	uint64_t ms = now_ms > then_ms ? now_ms - then_ms : 0;
	snprintf(out, len, "%" PRIu64 ".%" PRIu64 "s ago", ms / 1000, ms % 1000 / 100);
	return out;
}

static void show_link(struct conn *c, const struct node_status *st, uint64_t now)
{
	char ago[32];

	if (!st->link_managed) {
		control_conn_printf(c, "link none (interface.manage: false; the addresses are "
				    "the operator's)\n");
		return;
	}
	control_conn_printf(c, "link %s (%s) checked %s: %s%s\n", st->link,
			    st->loopback ? "loopback" : "dummy",
			    age(st->link_checked_ms, now, ago, sizeof ago),
			    st->link_problem[0] ? "cannot put it back: " : "in place",
			    st->link_problem);
}

static void show_table(struct conn *c, const struct node_status *st, uint64_t now)
{
	char ago[32];
	uint64_t renewed = st->heartbeat_renewed_ms;

	if (!st->table_managed) {
		control_conn_printf(c, "table none (nftables.enabled: false)\n");
		return;
	}
	control_conn_printf(c, "table inet %s checked %s: %s%s\n", st->table,
			    age(st->table_checked_ms, now, ago, sizeof ago),
			    st->table_problem[0] ? "not as planned: " : "as planned",
			    st->table_problem);
	if (!st->capturing)
		control_conn_printf(c, "heartbeat not renewed: %s (new DNS flows fail open; "
				    "last renewed %s)\n", st->not_capturing,
				    age(renewed, now, ago, sizeof ago));
	else if (st->heartbeat_problem[0])
		control_conn_printf(c, "heartbeat failing: %s (last renewed %s)\n",
				    st->heartbeat_problem, age(renewed, now, ago, sizeof ago));
	else
		control_conn_printf(c, "heartbeat renewed %s\n",
				    age(renewed, now, ago, sizeof ago));
}

static size_t endpoints_of_family(const struct node_status *st, int family)
{
	size_t n = 0, shown = st->n_fallback < NODE_STATUS_ENDPOINTS ? st->n_fallback
								      : NODE_STATUS_ENDPOINTS;

	for (size_t i = 0; i < shown; i++)
		n += st->fallback[i].family == family;
	return n;
}

static void show_fallback(struct conn *c, const struct node_status *st)
{
	if (!st->table_managed)
		return;
	control_conn_printf(c, "fallback");
	for (size_t i = 0; i < st->n_fallback && i < NODE_STATUS_ENDPOINTS; i++)
		control_conn_printf(c, " %s", st->fallback[i].text);
	if (st->n_fallback > NODE_STATUS_ENDPOINTS)
		control_conn_printf(c, " (and %zu more)", st->n_fallback - NODE_STATUS_ENDPOINTS);
	if (st->n_fallback == 0)
		control_conn_printf(c, " none");
	else if (strcmp(st->fallback_source, "kubernetes") == 0)
		control_conn_printf(c, " (ready endpoints of %s)", st->fallback_service);
	else
		control_conn_printf(c, " (%s)", st->fallback_source);
	control_conn_printf(c, "\n");
}

/* How long the output hook's notrack outlives us: the heartbeat elements' timeout. */
static int64_t heartbeat_left_ms(const struct node_status *st, uint64_t now)
{
	if (!st->heartbeat_renewed_ms)
		return 0;
	int64_t left = (int64_t)(st->heartbeat_renewed_ms + st->heartbeat_timeout_ms) - (int64_t)now;
	return left > 0 ? left : 0;
}

/* One served address: where its DNS would go from pods and from the host. */
static void show_if_died(struct conn *c, const struct node_status *st, const struct config_ip *a,
			 bool intercepted, uint64_t now)
{
	if (!st->table_managed) {
		control_conn_printf(c, "if_died %s: fails closed: no nftables table sends it "
				    "elsewhere (port unreachable)\n", a->text);
		return;
	}
	if (intercepted) {
		control_conn_printf(c, "if_died %s: pods fail open at once (kube-proxy's DNAT "
				    "to the Service); host-network clients ", a->text);
	} else if (endpoints_of_family(st, a->family)) {
		control_conn_printf(c, "if_died %s: pods fail open at once (DNAT to the "
				    "fallback endpoints); host-network clients ", a->text);
	} else {
		control_conn_printf(c, "if_died %s: fails closed: no %s fallback endpoints "
				    "(port unreachable; clients try their next nameserver)\n",
				    a->text, a->family == AF_INET6 ? "IPv6" : "IPv4");
		return;
	}
	int64_t left = heartbeat_left_ms(st, now);
	if (left)
		control_conn_printf(c, "within %" PRId64 ".%" PRId64 "s, when the heartbeat "
				    "expires\n", left / 1000, left % 1000 / 100);
	else
		control_conn_printf(c, "at once (the heartbeat has expired)\n");
}

static void show_served(struct conn *c, struct daemon *d, const struct node_status *st,
			   uint64_t now)
{
	struct config_ip served[SHOWN_ADDRESSES];
	size_t n_listen, n = daemon_served_addresses(d, served, SHOWN_ADDRESSES, &n_listen);
	size_t shown = n < SHOWN_ADDRESSES ? n : SHOWN_ADDRESSES;

	for (size_t i = 0; i < shown; i++)
		control_conn_printf(c, "address %s %s\n", served[i].text,
				    i < n_listen ? "listen" : "intercepted");
	if (n > shown)
		control_conn_printf(c, "address (and %zu more)\n", n - shown);
	for (size_t i = 0; i < shown; i++)
		show_if_died(c, st, &served[i], i >= n_listen, now);
}

void control_node(struct control_thread *t, struct conn *c)
{
	struct node_status st;
	uint64_t now = (uint64_t)monotonic_ms();
	char ago[32];

	node_status(t->ctl->d->node, &st);
	control_reply_ok(c);
	show_link(c, &st, now);
	show_table(c, &st, now);
	show_fallback(c, &st);
	control_conn_printf(c, "repairs link %" PRIu64 " table %" PRIu64 "\n",
			    st.repairs.link_repairs, st.repairs.table_repairs);
	if (st.link_managed || st.table_managed) {
		control_conn_printf(c, "monitor turned %s\n",
				    age(st.monitor_turned_ms, now, ago, sizeof ago));
		control_conn_printf(c, "at_exit %s\n",
				    st.teardown ? "removed (nftables.teardown: true)"
						: "left in place: it fails open without localdns");
	}
	show_served(c, t->ctl->d, &st, now);
}
