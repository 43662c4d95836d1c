/*
 * nft/nft.c — the operations of nft.h on our table: install, check,
 * heartbeat and leaving it, the fallback endpoints, removal, events. The
 * table itself is described in plan.h; how the files of this folder share
 * the work, in internal.h.
 *
 * Owns: the one struct nft (its sockets, the plan, the endpoints, the
 * token) and the order of each operation: look at the table in the kernel
 * (walk.c, judged by owner.c), read what a rebuild keeps, build the batch
 * (batch.c), send it (walk.c), and keep the plan that describes what the
 * kernel has. Every operation holds the mutex from the first question to
 * the last ack.
 *
 * Must never: send a batch that replaces or deletes a table it has not
 * just found to be ours; keep a plan the kernel refused (on failure the
 * old plan, endpoints and config stay, as the kernel's table did).
 */
#include "nft/nft.h"
#include "nft/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libnftnl/set.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct nft {
	pthread_mutex_t lock;
	const struct config *cfg;
	struct nft_link link;      /* batches and dumps */
	struct mnl_socket *events; /* NFNLGRP_NFTABLES */
	struct config_ip *endpoints;
	size_t n_endpoints;
	struct nft_plan plan;
	uint32_t token;            /* this process in set instances */
	_Atomic uint64_t live_timeout_ms; /* of our heartbeat's elements (nft_live_timeout) */
	bool beating;              /* renewing the heartbeat: rebuilds put it back */
};

/* This process's heartbeat as the next batch carries it; n->lock held. */
static struct nft_beat beat_of(const struct nft *n, uint32_t token)
{
	return (struct nft_beat){
		.token = token,
		.live_timeout_ms = atomic_load(&n->live_timeout_ms),
		.beating = n->beating,
	};
}

/* ---- looking at the table --------------------------------------------------------- */

/* The table's chains and rules into s: the one walk whose and check share. */
static int walk_chains_and_rules(struct nft *n, struct nft_seen *s)
{
	if (nft_ask(&n->link, n->plan.table, NFT_MSG_GETCHAIN, NULL, nft_seen_message, s) < 0 ||
	    nft_ask(&n->link, n->plan.table, NFT_MSG_GETRULE, NULL, nft_seen_message, s) < 0)
		return -1;
	return 0;
}

/* enum nft_table_owner, or -1 when the kernel could not be asked; err for both failures. */
static int table_owner(struct nft *n, uint64_t *handle, char *err, size_t errlen)
{
	struct nft_seen s = {.plan = &n->plan};
	int rc = nft_ask(&n->link, n->plan.table, NFT_MSG_GETTABLE, NULL, nft_seen_message, &s);

	if (rc < 0 && errno == ENOENT)
		return NFT_TABLE_ABSENT;
	if (rc < 0 || (!s.has_comment && walk_chains_and_rules(n, &s) < 0)) {
		snprintf(err, errlen, "nftables: cannot look at table inet %s: %s", n->plan.table,
			 strerror(errno));
		return -1;
	}
	*handle = s.handle;
	return nft_seen_ours(&s, err, errlen) ? NFT_TABLE_OURS : NFT_TABLE_FOREIGN;
}

int nft_table_owner(struct nft *n, char *err, size_t errlen)
{
	uint64_t handle;

	pthread_mutex_lock(&n->lock);
	int owner = table_owner(n, &handle, err, errlen);
	pthread_mutex_unlock(&n->lock);
	return owner;
}

static int count_element(struct nftnl_set_elem *e, void *data)
{
	(void)e;
	(*(size_t *)data)++;
	return 0;
}

/* 1 as planned, 0 drifted (why in err), -1 could not ask. */
static int check_sets(struct nft *n, char *err, size_t errlen)
{
	struct nft_seen s = {.plan = &n->plan};

	if (nft_ask(&n->link, n->plan.table, NFT_MSG_GETSET, NULL, nft_seen_message, &s) < 0) {
		if (errno != ENOENT)
			goto fail;
		snprintf(err, errlen, "table inet %s is missing", n->plan.table);
		return 0;
	}
	if (s.sets != n->plan.n_sets) {
		snprintf(err, errlen, "%zu sets instead of %zu", s.sets, n->plan.n_sets);
		return 0;
	}
	for (size_t i = 0; i < n->plan.n_sets; i++) {
		const struct nft_set_plan *sp = &n->plan.sets[i];
		size_t count = 0;

		if (sp->role == NFT_SET_LIVE || sp->role == NFT_SET_INSTANCES ||
		    sp->role == NFT_SET_FLOWS)
			continue; /* they change on their own: timeouts, packets */
		if (nft_ask_elements(&n->link, n->plan.table, sp->name, count_element, &count) < 0) {
			if (errno != ENOENT)
				goto fail;
			snprintf(err, errlen, "set %s is missing", sp->name);
			return 0;
		}
		if (count != sp->n_ips) {
			snprintf(err, errlen, "set %s has %zu elements instead of %zu", sp->name,
				 count, sp->n_ips);
			return 0;
		}
	}
	return 1;
fail:
	snprintf(err, errlen, "nftables: cannot list our sets: %s", strerror(errno));
	return -1;
}

static int check_chains_and_rules(struct nft *n, char *err, size_t errlen)
{
	struct nft_seen s = {.plan = &n->plan};

	if (walk_chains_and_rules(n, &s) < 0) {
		snprintf(err, errlen, "nftables: cannot list our rules: %s", strerror(errno));
		return -1;
	}
	return nft_seen_as_planned(&s, err, errlen);
}

int nft_check(struct nft *n, char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	int rc = check_sets(n, err, errlen);
	if (rc == 1)
		rc = check_chains_and_rules(n, err, errlen);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

/* ---- changing the table ------------------------------------------------------------ */

/*
 * The tokens, and unless tokens_only the live elements and the flows, in
 * the kernel now (a missing set has none), others' apart from own_token's.
 * NULL: errno.
 */
static struct nft_kept *find_kept(struct nft *n, uint32_t own_token, bool tokens_only)
{
	struct nft_kept *k = malloc(sizeof *k);

	if (!k)
		return NULL;
	k->own_token = own_token;
	k->own_seen = false;
	k->n = 0;
	for (size_t i = 0; i < n->plan.n_sets; i++) {
		const struct nft_set_plan *sp = &n->plan.sets[i];

		if (sp->role != NFT_SET_INSTANCES &&
		    (tokens_only || (sp->role != NFT_SET_LIVE && sp->role != NFT_SET_FLOWS)))
			continue;
		k->set = sp;
		if (nft_ask_elements(&n->link, n->plan.table, sp->name, nft_kept_element, k) < 0 &&
		    errno != ENOENT) {
			int saved = errno;
			free(k);
			errno = saved;
			return NULL;
		}
	}
	return k;
}

/*
 * Delete our table (if there is one) and add it again with everything: one
 * transaction. A table of that name that is not ours is never touched.
 */
static int apply_locked(struct nft *n, char *err, size_t errlen)
{
	uint64_t handle;
	struct nft_kept *kept = NULL; /* none: a new table */
	struct nft_beat beat = beat_of(n, n->token);
	int owner = table_owner(n, &handle, err, errlen);

	if (owner < 0 || owner == NFT_TABLE_FOREIGN)
		return -1;
	if (owner == NFT_TABLE_OURS) {
		if (!(kept = find_kept(n, n->token, false))) {
			snprintf(err, errlen, "nftables: cannot read the heartbeat and flow sets: %s",
				 strerror(errno));
			return -1;
		}
		kept->table_handle = handle;
	}
	int rc = nft_send(&n->link, nft_batch_install(&n->link.seq, &n->plan, &beat, kept), err,
			  errlen);
	free(kept);
	return rc;
}

int nft_apply(struct nft *n, char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	int rc = apply_locked(n, err, errlen);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

int nft_heartbeat(struct nft *n, char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	n->beating = true; /* also when this renewal fails: a rebuild puts it back */
	struct nft_beat beat = beat_of(n, n->token);
	int rc = nft_send(&n->link, nft_batch_heartbeat(&n->link.seq, &n->plan, &beat), err,
			  errlen);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

/* nft_leave for whichever process token names; n->lock held. */
static int leave(struct nft *n, uint32_t token, char *err, size_t errlen)
{
	struct nft_beat beat = beat_of(n, token);
	struct nft_kept *others = find_kept(n, token, true);
	int rc = -1;

	if (!others)
		snprintf(err, errlen, "nftables: cannot read set instances: %s", strerror(errno));
	else if (!others->own_seen && others->n > 0)
		rc = 1; /* nothing of ours left to take out */
	else if (nft_send(&n->link, nft_batch_leave(&n->link.seq, &n->plan, &beat, others), err,
			  errlen) == 0)
		rc = others->n > 0;
	free(others);
	return rc;
}

int nft_leave(struct nft *n, char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	n->beating = false;
	int rc = leave(n, n->token, err, errlen);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

int nft_leave_for(struct nft *n, uint32_t token, char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	int rc = leave(n, token, err, errlen);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

int nft_remove(struct nft *n, char *err, size_t errlen)
{
	uint64_t handle;
	int rc = -1;

	pthread_mutex_lock(&n->lock);
	int owner = table_owner(n, &handle, err, errlen);
	if (owner == NFT_TABLE_ABSENT)
		rc = 0;
	else if (owner == NFT_TABLE_OURS)
		rc = nft_send(&n->link, nft_batch_remove(&n->link.seq, &n->plan, handle), err,
			      errlen);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

void nft_live_timeout(struct nft *n, uint64_t ms)
{
	atomic_store(&n->live_timeout_ms, ms);
}

uint64_t nft_live_timeout_ms(struct nft *n)
{
	return atomic_load(&n->live_timeout_ms);
}

uint32_t nft_token(struct nft *n)
{
	return n->token; /* set once, by nft_open */
}

/* ---- the fallback endpoints and the plan ------------------------------------------ */

static int copy_endpoints(struct nft *n, const struct config_ip *ips, size_t n_ips)
{
	struct config_ip *copy = NULL;

	if (n_ips && !(copy = malloc(n_ips * sizeof *copy)))
		return -1;
	if (n_ips)
		memcpy(copy, ips, n_ips * sizeof *copy);
	free(n->endpoints);
	n->endpoints = copy;
	n->n_endpoints = n_ips;
	return 0;
}

/* The endpoints in the fallback maps of the table in the kernel. */
struct found_endpoints {
	struct config_ip ips[64];
	size_t n;
};

static int found_endpoint(struct nftnl_set_elem *e, void *data)
{
	struct found_endpoints *f = data;
	uint32_t len = 0;
	const void *addr = nftnl_set_elem_get(e, NFTNL_SET_ELEM_DATA, &len);

	if (!addr || (len != 4 && len != 16) || f->n == sizeof f->ips / sizeof f->ips[0])
		return 0;
	struct config_ip *ip = &f->ips[f->n++];
	memset(ip, 0, sizeof *ip);
	ip->family = len == 4 ? AF_INET : AF_INET6;
	memcpy(len == 4 ? (void *)&ip->v4 : (void *)&ip->v6, addr, len);
	inet_ntop(ip->family, addr, ip->text, sizeof ip->text);
	return 0;
}

int nft_keep_endpoints(struct nft *n, struct config_ip *out, size_t max)
{
	struct found_endpoints f = {.n = 0};
	int rc = 0;

	pthread_mutex_lock(&n->lock);
	for (size_t i = 0; i < n->plan.n_sets && rc == 0; i++)
		if (n->plan.sets[i].role == NFT_SET_FALLBACK &&
		    nft_ask_elements(&n->link, n->plan.table, n->plan.sets[i].name, found_endpoint,
				     &f) < 0 &&
		    errno != ENOENT)
			rc = -1;
	if (rc == 0 && f.n > 0) {
		struct nft_plan old = n->plan;
		if (copy_endpoints(n, f.ips, f.n) < 0 ||
		    nft_plan_build(&n->plan, n->cfg, n->endpoints, n->n_endpoints) < 0) {
			n->plan = old; /* the static list stays; the watch will report */
			rc = -1;
		} else {
			nft_plan_free(&old);
		}
	}
	pthread_mutex_unlock(&n->lock);
	for (size_t i = 0; rc == 0 && i < f.n && i < max; i++)
		out[i] = f.ips[i];
	return rc < 0 ? -1 : (int)f.n;
}
size_t nft_fallback_endpoints(struct nft *n, struct config_ip *out, size_t max)
{
	pthread_mutex_lock(&n->lock);
	size_t count = n->n_endpoints;
	if (max > count)
		max = count;
	if (max)
		memcpy(out, n->endpoints, max * sizeof *out);
	pthread_mutex_unlock(&n->lock);
	return count;
}

int nft_set_fallback_endpoints(struct nft *n, const struct config_ip *ips, size_t n_ips,
			       char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	struct config_ip *old = n->endpoints;
	size_t n_old = n->n_endpoints;
	struct nft_plan old_plan = n->plan;
	int rc = -1;

	n->endpoints = NULL;
	if (copy_endpoints(n, ips, n_ips) < 0 ||
	    nft_plan_build(&n->plan, n->cfg, n->endpoints, n->n_endpoints) < 0) {
		snprintf(err, errlen, "nftables: out of memory");
		free(n->endpoints);
	} else if ((rc = apply_locked(n, err, errlen)) < 0) {
		nft_plan_free(&n->plan);
		free(n->endpoints);
	}
	if (rc < 0) {
		/* The kernel kept the old table: keep the plan that describes it. */
		n->endpoints = old;
		n->n_endpoints = n_old;
		n->plan = old_plan;
	} else {
		free(old);
		nft_plan_free(&old_plan);
	}
	pthread_mutex_unlock(&n->lock);
	return rc;
}

int nft_use(struct nft *n, const struct config *cfg, char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	struct nft_plan old_plan = n->plan;
	int rc = -1;

	if (nft_plan_build(&n->plan, cfg, n->endpoints, n->n_endpoints) < 0) {
		snprintf(err, errlen, "nftables: out of memory");
		n->plan = old_plan;
	} else if (strcmp(n->plan.comment, old_plan.comment) != 0 &&
		   apply_locked(n, err, errlen) < 0) {
		nft_plan_free(&n->plan);
		n->plan = old_plan; /* the kernel kept the old table */
	} else {
		/* The same fingerprint is the same table: nothing to send. */
		nft_plan_free(&old_plan);
		n->cfg = cfg;
		rc = 0;
	}
	pthread_mutex_unlock(&n->lock);
	return rc;
}

/* ---- events ------------------------------------------------------------------- */

int nft_event_fd(const struct nft *n)
{
	return n->events ? mnl_socket_get_fd(n->events) : -1;
}

bool nft_drain_events(struct nft *n)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	bool foreign = false;

	pthread_mutex_lock(&n->lock);
	for (;;) {
		ssize_t r = recv(mnl_socket_get_fd(n->events), buf, sizeof buf, MSG_DONTWAIT);

		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			/* ENOBUFS: events were lost; any of them may have been ours. */
			foreign = true;
			if (r < 0 && errno == ENOBUFS)
				continue;
			break;
		}
		int len = (int)r;
		for (const struct nlmsghdr *h = (const void *)buf; mnl_nlmsg_ok(h, len);
		     h = mnl_nlmsg_next(h, &len))
			foreign = nft_foreign_change(h, n->link.portid, n->plan.table) || foreign;
	}
	pthread_mutex_unlock(&n->lock);
	return foreign;
}

void nft_mute(struct nft *n)
{
	pthread_mutex_lock(&n->lock);
	if (n->events)
		mnl_socket_close(n->events);
	n->events = NULL;
	pthread_mutex_unlock(&n->lock);
}

/* ---- lifetime ------------------------------------------------------------------- */

struct nft *nft_open(const struct config *cfg, char *err, size_t errlen)
{
	struct nft *n = calloc(1, sizeof *n);

	if (!n) {
		snprintf(err, errlen, "nftables: out of memory");
		return NULL;
	}
	pthread_mutex_init(&n->lock, NULL);
	n->cfg = cfg;
	n->link.seq = (uint32_t)time(NULL);
	atomic_init(&n->live_timeout_ms, NFT_LIVE_TIMEOUT_MS);
	/* Pods have PID namespaces of their own: two may both be PID 1. */
	while (n->token == 0)
		if (getrandom(&n->token, sizeof n->token, 0) != (ssize_t)sizeof n->token)
			n->token = (uint32_t)time(NULL) ^ (uint32_t)getpid();
	if (!(n->link.nl = nft_socket_open(0, err, errlen)) ||
	    !(n->events = nft_socket_open(1u << (NFNLGRP_NFTABLES - 1), err, errlen))) {
		nft_close(n);
		return NULL;
	}
	n->link.portid = mnl_socket_get_portid(n->link.nl);
	if (copy_endpoints(n, cfg->nftables.fallback_endpoints,
			   cfg->nftables.n_fallback_endpoints) < 0 ||
	    nft_plan_build(&n->plan, cfg, n->endpoints, n->n_endpoints) < 0) {
		snprintf(err, errlen, "nftables: out of memory");
		nft_close(n);
		return NULL;
	}
	return n;
}

void nft_close(struct nft *n)
{
	if (!n)
		return;
	if (n->link.nl)
		mnl_socket_close(n->link.nl);
	if (n->events)
		mnl_socket_close(n->events);
	nft_plan_free(&n->plan);
	free(n->endpoints);
	pthread_mutex_destroy(&n->lock);
	free(n);
}
