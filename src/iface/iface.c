/*
 * iface/iface.c — see iface.h.
 *
 * Every operation re-reads the kernel's state instead of trusting a copy:
 * "ensure" (used for start-up and for repairs alike) looks the link up by
 * name, then the addresses in one dump, and adds only what is missing. So
 * it is idempotent, a second instance during an upgrade finds everything in
 * place, and our own additions (which come back to us as events) cost one
 * look-up that changes nothing.
 */
#include "iface/iface.h"

#include <errno.h>
#include <linux/if.h>
#include <linux/rtnetlink.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DUMMY_KIND "dummy"
#define LOOPBACK_NAME "lo"
#define EVENT_BUFFER (1 << 20)

struct iface {
	const struct config *cfg;
	struct nl_sock *sk;     /* requests */
	struct nl_sock *events; /* RTNLGRP_LINK and address groups */
	bool maybe_removed;     /* set by the event callback */
	/* What the last iface_apply or iface_add created, for iface_rollback. */
	bool created_link;
	bool *created_addr;     /* one per served address of created_for */
	const struct config *created_for; /* NULL: nothing to roll back */
};

static bool loopback(const struct iface *ifc)
{
	return ifc->cfg->interface.kind == CONFIG_IF_LOOPBACK;
}

static const char *link_name(const struct iface *ifc)
{
	return loopback(ifc) ? LOOPBACK_NAME : ifc->cfg->interface.name;
}

static int on_event(struct nl_msg *msg, void *arg)
{
	struct iface *ifc = arg;
	int type = nlmsg_hdr(msg)->nlmsg_type;

	/* A link set down arrives as RTM_NEWLINK. */
	if (type == RTM_DELLINK || type == RTM_DELADDR || type == RTM_NEWLINK)
		ifc->maybe_removed = true;
	return NL_OK;
}

static struct nl_sock *connect_route(char *err, size_t errlen)
{
	struct nl_sock *sk = nl_socket_alloc();
	int rc;

	if (!sk) {
		snprintf(err, errlen, "netlink: out of memory");
		return NULL;
	}
	if ((rc = nl_connect(sk, NETLINK_ROUTE)) < 0) {
		snprintf(err, errlen, "netlink: cannot open a route socket: %s", nl_geterror(rc));
		nl_socket_free(sk);
		return NULL;
	}
	return sk;
}

static int subscribe(struct iface *ifc, char *err, size_t errlen)
{
	struct nl_sock *ev = nl_socket_alloc();
	int rc;

	if (!ev) {
		snprintf(err, errlen, "netlink: out of memory");
		return -1;
	}
	ifc->events = ev;
	nl_socket_disable_seq_check(ev);
	nl_socket_modify_cb(ev, NL_CB_VALID, NL_CB_CUSTOM, on_event, ifc);
	if ((rc = nl_connect(ev, NETLINK_ROUTE)) < 0 ||
	    (rc = nl_socket_add_memberships(ev, RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR,
					    RTNLGRP_IPV6_IFADDR, 0)) < 0 ||
	    (rc = nl_socket_set_nonblocking(ev)) < 0 ||
	    (rc = nl_socket_set_buffer_size(ev, EVENT_BUFFER, 0)) < 0) {
		snprintf(err, errlen, "netlink: cannot watch links and addresses: %s",
			 nl_geterror(rc));
		return -1;
	}
	return 0;
}

struct iface *iface_open(const struct config *cfg, char *err, size_t errlen)
{
	struct iface *ifc = calloc(1, sizeof *ifc);

	if (!ifc || !(ifc->created_addr = calloc(config_served_count(cfg) + 1, sizeof(bool)))) {
		free(ifc);
		snprintf(err, errlen, "netlink: out of memory");
		return NULL;
	}
	ifc->cfg = cfg;
	if (!(ifc->sk = connect_route(err, errlen)) || subscribe(ifc, err, errlen) < 0) {
		iface_close(ifc);
		return NULL;
	}
	return ifc;
}

void iface_close(struct iface *ifc)
{
	if (!ifc)
		return;
	if (ifc->sk)
		nl_socket_free(ifc->sk);
	if (ifc->events)
		nl_socket_free(ifc->events);
	free(ifc->created_addr);
	free(ifc);
}

int iface_event_fd(const struct iface *ifc)
{
	return nl_socket_get_fd(ifc->events);
}

bool iface_drain_events(struct iface *ifc)
{
	int rc;

	while ((rc = nl_recvmsgs_default(ifc->events)) >= 0)
		;
	/* Anything but "nothing more to read" (e.g. an overrun) may hide a removal. */
	if (rc != -NLE_AGAIN)
		ifc->maybe_removed = true;
	bool seen = ifc->maybe_removed;
	ifc->maybe_removed = false;
	return seen;
}

/* ---- the link ----------------------------------------------------------- */

/* The link by name: 1 and *out, 0 when there is none, -1 with err. */
static int find_link(struct iface *ifc, const char *name, struct rtnl_link **out,
		     char *err, size_t errlen)
{
	int rc = rtnl_link_get_kernel(ifc->sk, 0, name, out);

	if (rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NODEV)
		return 0;
	if (rc < 0) {
		snprintf(err, errlen, "netlink: cannot look up link %s: %s", name, nl_geterror(rc));
		return -1;
	}
	return 1;
}

static int create_dummy(struct iface *ifc, char *err, size_t errlen)
{
	const char *name = ifc->cfg->interface.name;
	struct rtnl_link *link = rtnl_link_alloc();
	int rc;

	if (!link) {
		snprintf(err, errlen, "netlink: out of memory");
		return -1;
	}
	rtnl_link_set_name(link, name);
	rc = rtnl_link_set_type(link, DUMMY_KIND);
	if (rc >= 0)
		rc = rtnl_link_add(ifc->sk, link, NLM_F_CREATE | NLM_F_EXCL);
	rtnl_link_put(link);
	if (rc == -NLE_OPNOTSUPP || rc == -NLE_NOATTR || rc == -NLE_INVAL)
		snprintf(err, errlen,
			 "netlink: cannot create link %s of kind dummy: %s (this kernel has no "
			 "dummy link type?); set interface.kind: loopback to put the addresses "
			 "on lo instead",
			 name, nl_geterror(rc));
	else if (rc < 0)
		snprintf(err, errlen, "netlink: cannot create link %s of kind dummy: %s", name,
			 nl_geterror(rc));
	return rc < 0 ? -1 : 0;
}

static int bring_up(struct iface *ifc, struct rtnl_link *link, char *err, size_t errlen)
{
	struct rtnl_link *change = rtnl_link_alloc();
	int rc;

	if (!change) {
		snprintf(err, errlen, "netlink: out of memory");
		return -1;
	}
	rtnl_link_set_flags(change, IFF_UP);
	rc = rtnl_link_change(ifc->sk, link, change, 0);
	rtnl_link_put(change);
	if (rc < 0) {
		snprintf(err, errlen, "netlink: cannot bring link %s up: %s",
			 rtnl_link_get_name(link), nl_geterror(rc));
		return -1;
	}
	return 0;
}

/* A link of that name that is not a dummy belongs to someone else. */
static int check_ours(struct iface *ifc, struct rtnl_link *link, char *err, size_t errlen)
{
	const char *kind = rtnl_link_get_type(link);

	if (loopback(ifc) || (kind && strcmp(kind, DUMMY_KIND) == 0))
		return 0;
	snprintf(err, errlen,
		 "netlink: link %s exists and is of kind %s, not dummy: it is not ours "
		 "(choose another interface.name)",
		 ifc->cfg->interface.name, kind ? kind : "unknown");
	return -1;
}

/*
 * The link, created if missing and brought up if down; its index in
 * *ifindex. Returns how many changes that took, or -1 with err.
 */
static int ensure_link(struct iface *ifc, int *ifindex, char *err, size_t errlen)
{
	struct rtnl_link *link = NULL;
	int changes = 0;
	int found = find_link(ifc, link_name(ifc), &link, err, errlen);

	if (found == 0 && !loopback(ifc)) {
		if (create_dummy(ifc, err, errlen) < 0)
			return -1;
		changes++;
		ifc->created_link = true;
		found = find_link(ifc, link_name(ifc), &link, err, errlen);
	}
	if (found <= 0) {
		if (found == 0)
			snprintf(err, errlen, "netlink: link %s does not exist", link_name(ifc));
		return -1;
	}
	int rc = check_ours(ifc, link, err, errlen);
	if (rc == 0 && !(rtnl_link_get_flags(link) & IFF_UP)) {
		rc = bring_up(ifc, link, err, errlen);
		changes++;
	}
	*ifindex = rtnl_link_get_ifindex(link);
	rtnl_link_put(link);
	return rc < 0 ? -1 : changes;
}

/* ---- addresses ---------------------------------------------------------- */

static struct nl_addr *to_nl_addr(const struct config_ip *ip)
{
	bool v4 = ip->family == AF_INET;
	struct nl_addr *a = nl_addr_build(ip->family, v4 ? (const void *)&ip->v4 : &ip->v6,
					  v4 ? 4 : 16);

	if (a)
		nl_addr_set_prefixlen(a, v4 ? 32 : 128);
	return a;
}

/* The index of the link carrying ip in the dump, or 0. */
static int owner_of(struct nl_cache *addrs, const struct config_ip *ip)
{
	struct nl_addr *want = to_nl_addr(ip);
	int owner = 0;

	if (!want)
		return 0;
	for (struct nl_object *o = nl_cache_get_first(addrs); o && !owner;
	     o = nl_cache_get_next(o)) {
		struct rtnl_addr *a = (struct rtnl_addr *)o;
		struct nl_addr *local = rtnl_addr_get_local(a);

		if (local && nl_addr_get_family(local) == ip->family &&
		    nl_addr_cmp_prefix(local, want) == 0 &&
		    nl_addr_get_prefixlen(local) == nl_addr_get_prefixlen(want))
			owner = rtnl_addr_get_ifindex(a);
	}
	nl_addr_put(want);
	return owner;
}

/* Add or delete ip (/32, /128) on ifindex. */
static int change_address(struct iface *ifc, int ifindex, const struct config_ip *ip, bool add)
{
	struct rtnl_addr *a = rtnl_addr_alloc();
	struct nl_addr *local = to_nl_addr(ip);
	int rc = -NLE_NOMEM;

	if (a && local) {
		rtnl_addr_set_ifindex(a, ifindex);
		rtnl_addr_set_family(a, ip->family);
		rc = rtnl_addr_set_local(a, local);
		/* No duplicate address detection: the address must work at once. */
		if (ip->family == AF_INET6)
			rtnl_addr_set_flags(a, IFA_F_NODAD);
		if (rc >= 0)
			rc = add ? rtnl_addr_add(ifc->sk, a, 0) : rtnl_addr_delete(ifc->sk, a, 0);
	}
	if (local)
		nl_addr_put(local);
	if (a)
		rtnl_addr_put(a);
	return rc;
}

static struct nl_cache *dump_addresses(struct iface *ifc, char *err, size_t errlen)
{
	struct nl_cache *addrs = NULL;
	int rc = rtnl_addr_alloc_cache(ifc->sk, &addrs);

	if (rc < 0) {
		snprintf(err, errlen, "netlink: cannot list addresses: %s", nl_geterror(rc));
		return NULL;
	}
	return addrs;
}

static const char *index_name(struct iface *ifc, int ifindex, char *buf, size_t len)
{
	struct rtnl_link *link = NULL;

	if (rtnl_link_get_kernel(ifc->sk, ifindex, NULL, &link) < 0) {
		snprintf(buf, len, "index %d", ifindex);
		return buf;
	}
	snprintf(buf, len, "%s", rtnl_link_get_name(link));
	rtnl_link_put(link);
	return buf;
}

/* Every address cfg serves on ifindex; returns how many were added, or -1. */
static int ensure_addresses(struct iface *ifc, const struct config *cfg, int ifindex, bool track,
			    char *err, size_t errlen)
{
	struct nl_cache *addrs = dump_addresses(ifc, err, errlen);
	int added = 0;

	if (!addrs)
		return -1;
	for (size_t i = 0; i < config_served_count(cfg); i++) {
		const struct config_ip *ip = config_served_address(cfg, i);
		int owner = owner_of(addrs, ip);
		char other[IFNAMSIZ + 16];

		if (owner == ifindex)
			continue;
		if (owner != 0) {
			snprintf(err, errlen,
				 "netlink: address %s is already on link %s; localdns puts it on "
				 "%s only (remove it there first)",
				 ip->text, index_name(ifc, owner, other, sizeof other),
				 link_name(ifc));
			added = -1;
			break;
		}
		int rc = change_address(ifc, ifindex, ip, true);
		if (rc < 0 && rc != -NLE_EXIST) {
			snprintf(err, errlen, "netlink: cannot add address %s to %s: %s", ip->text,
				 link_name(ifc), nl_geterror(rc));
			added = -1;
			break;
		}
		if (track)
			ifc->created_addr[i] = true;
		added++;
	}
	nl_cache_free(addrs);
	return added;
}

/* ---- the operations ----------------------------------------------------- */

static int ensure(struct iface *ifc, const struct config *cfg, bool track, char *err,
		  size_t errlen)
{
	int ifindex, links, addrs;

	if ((links = ensure_link(ifc, &ifindex, err, errlen)) < 0)
		return -1;
	if ((addrs = ensure_addresses(ifc, cfg, ifindex, track, err, errlen)) < 0)
		return -1;
	return links + addrs;
}

/* Put cfg's addresses (and the link) in place, remembering what was created. */
static int ensure_tracked(struct iface *ifc, const struct config *cfg, char *err, size_t errlen)
{
	bool *created = realloc(ifc->created_addr, (config_served_count(cfg) + 1) * sizeof *created);

	if (!created) {
		snprintf(err, errlen, "netlink: out of memory");
		return -1;
	}
	ifc->created_addr = created;
	memset(created, 0, config_served_count(cfg) * sizeof *created);
	ifc->created_link = false;
	ifc->created_for = cfg;
	if (ensure(ifc, cfg, true, err, errlen) < 0) {
		iface_rollback(ifc);
		return -1;
	}
	return 0;
}

int iface_apply(struct iface *ifc, char *err, size_t errlen)
{
	return ensure_tracked(ifc, ifc->cfg, err, errlen);
}

int iface_add(struct iface *ifc, const struct config *next, char *err, size_t errlen)
{
	return ensure_tracked(ifc, next, err, errlen);
}

void iface_use(struct iface *ifc, const struct config *cfg)
{
	ifc->cfg = cfg;
	ifc->created_link = false;
	ifc->created_for = NULL;
}

int iface_repair(struct iface *ifc, char *err, size_t errlen)
{
	return ensure(ifc, ifc->cfg, false, err, errlen);
}

static int delete_link(struct iface *ifc, char *err, size_t errlen)
{
	struct rtnl_link *link = NULL;
	int found = find_link(ifc, ifc->cfg->interface.name, &link, err, errlen);

	if (found <= 0)
		return found;
	int rc = check_ours(ifc, link, err, errlen);
	if (rc == 0 && (rc = rtnl_link_delete(ifc->sk, link)) < 0) {
		snprintf(err, errlen, "netlink: cannot delete link %s: %s",
			 ifc->cfg->interface.name, nl_geterror(rc));
		rc = -1;
	}
	rtnl_link_put(link);
	return rc;
}

static bool served_by(const struct config *cfg, const struct config_ip *ip)
{
	for (size_t i = 0; i < config_served_count(cfg); i++) {
		const struct config_ip *mine = config_served_address(cfg, i);
		if (mine->family == ip->family && strcmp(mine->text, ip->text) == 0)
			return true;
	}
	return false;
}

enum which { ALL_OF_THEM, CREATED_ONLY, NOT_SERVED_NOW };

/* Delete cfg's served addresses from our link: all, those we created, or those ifc->cfg drops. */
static int delete_addresses(struct iface *ifc, const struct config *cfg, enum which which,
			    char *err, size_t errlen)
{
	struct rtnl_link *link = NULL;
	int rc = 0, found = find_link(ifc, link_name(ifc), &link, err, errlen);

	if (found <= 0)
		return found;
	int ifindex = rtnl_link_get_ifindex(link);
	rtnl_link_put(link);
	for (size_t i = 0; i < config_served_count(cfg); i++) {
		const struct config_ip *ip = config_served_address(cfg, i);

		if ((which == CREATED_ONLY && !ifc->created_addr[i]) ||
		    (which == NOT_SERVED_NOW && served_by(ifc->cfg, ip)))
			continue;
		int r = change_address(ifc, ifindex, ip, false);
		/* Absent already is what we want. */
		if (r < 0 && r != -NLE_NOADDR && r != -NLE_OBJ_NOTFOUND && rc == 0) {
			snprintf(err, errlen, "netlink: cannot delete address %s from %s: %s",
				 ip->text, link_name(ifc), nl_geterror(r));
			rc = -1;
		}
	}
	return rc;
}

void iface_rollback(struct iface *ifc)
{
	char ignored[CONFIG_ERR_MAX];

	if (ifc->created_link)
		delete_link(ifc, ignored, sizeof ignored);
	else if (ifc->created_for)
		delete_addresses(ifc, ifc->created_for, CREATED_ONLY, ignored, sizeof ignored);
	ifc->created_link = false;
	ifc->created_for = NULL;
}

int iface_drop(struct iface *ifc, const struct config *prev, char *err, size_t errlen)
{
	return delete_addresses(ifc, prev, NOT_SERVED_NOW, err, errlen) < 0 ? -1 : 0;
}

int iface_remove(struct iface *ifc, char *err, size_t errlen)
{
	if (loopback(ifc))
		return delete_addresses(ifc, ifc->cfg, ALL_OF_THEM, err, errlen);
	return delete_link(ifc, err, errlen) < 0 ? -1 : 0;
}
