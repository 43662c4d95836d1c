/*
 * nft/nft.c — see nft.h; the table itself is described in plan.h.
 *
 * Every change is one nfnetlink batch, and every message in it asks for an
 * ack, so a refusal names the object the kernel refused (by sequence
 * number) with the kernel's errno. The kernel applies a batch whole or not
 * at all; its answers are queued on our socket before sendto returns, so
 * they are read without waiting.
 */
#include "nft/nft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nft/plan.h"

/* nft's datatype numbers (src/datatype.h), so `nft list` prints our sets. */
#define NFT_TYPE_MARK 19
#define NFT_TYPE_IPADDR 7
#define NFT_TYPE_IP6ADDR 8
#define NFT_TYPE_INET_SERVICE 13
#define NFT_TYPE_BITS 6               /* a concatenation's type: one per field */

/* The table's comment (userdata, kernel 5.13+): how a table says it is ours. */
#define TABLE_COMMENT "managed by localdns"

/* Room for the table and KEPT_MAX kept elements (about 80 bytes each). */
#define BATCH_LIMIT (256 * 1024)
#define BATCH_MSGS 512
#define WHAT_MAX 96

struct nft {
	pthread_mutex_t lock;
	const struct config *cfg;
	struct mnl_socket *nl;     /* batches and dumps */
	struct mnl_socket *events; /* NFNLGRP_NFTABLES */
	uint32_t portid;           /* of nl: events we caused carry it */
	uint32_t seq;
	struct config_ip *endpoints;
	size_t n_endpoints;
	struct nft_plan plan;
	uint32_t token;            /* this process in set instances */
	_Atomic uint64_t live_timeout_ms; /* of our heartbeat's elements (nft_live_timeout) */
	bool beating;              /* renewing the heartbeat: rebuilds put it back */
};

static void drop_stale_answers(struct nft *n);
static int dump_elements(struct nft *n, const char *set_name,
			 int (*fn)(struct nftnl_set_elem *e, void *arg), void *arg);

/* ---- batches -------------------------------------------------------------- */

struct batch {
	char *buf;
	struct mnl_nlmsg_batch *b;
	uint32_t first_seq;        /* of what[0] */
	size_t n;
	bool broken;               /* out of memory or too many messages */
	char what[BATCH_MSGS][WHAT_MAX];
};

static struct batch *batch_new(struct nft *n)
{
	struct batch *bt = calloc(1, sizeof *bt);

	/* The message that crosses the limit is written past it: twice the room. */
	if (!bt || !(bt->buf = malloc(2 * BATCH_LIMIT))) {
		free(bt);
		return NULL;
	}
	bt->b = mnl_nlmsg_batch_start(bt->buf, BATCH_LIMIT);
	nftnl_batch_begin(mnl_nlmsg_batch_current(bt->b), n->seq++);
	mnl_nlmsg_batch_next(bt->b);
	bt->first_seq = n->seq;
	return bt;
}

static void batch_free(struct batch *bt)
{
	if (!bt)
		return;
	mnl_nlmsg_batch_stop(bt->b);
	free(bt->buf);
	free(bt);
}

/* The header of the next message, described for error messages; NULL if full. */
static struct nlmsghdr *batch_msg(struct nft *n, struct batch *bt, uint16_t type,
				  uint16_t flags, const char *what)
{
	if (bt->broken || bt->n == BATCH_MSGS) {
		bt->broken = true;
		return NULL;
	}
	snprintf(bt->what[bt->n++], WHAT_MAX, "%s", what);
	return nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt->b), type, NFPROTO_INET,
				     flags | NLM_F_ACK, n->seq++);
}

static void batch_done_msg(struct batch *bt)
{
	if (!mnl_nlmsg_batch_next(bt->b))
		bt->broken = true;
}

/* The first error the kernel answered, as "what: strerror"; 0 when all acked. */
static int read_acks(struct nft *n, struct batch *bt, char *err, size_t errlen)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	int failed = 0;

	for (;;) {
		ssize_t r = recv(mnl_socket_get_fd(n->nl), buf, sizeof buf, MSG_DONTWAIT);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		size_t len = (size_t)r;
		for (const struct nlmsghdr *h = (const void *)buf; mnl_nlmsg_ok(h, (int)len);
		     h = mnl_nlmsg_next(h, (int *)&len)) {
			if (h->nlmsg_type != NLMSG_ERROR || failed)
				continue;
			const struct nlmsgerr *e = mnl_nlmsg_get_payload(h);
			if (e->error == 0)
				continue;
			failed = -e->error;
			uint32_t i = e->msg.nlmsg_seq - bt->first_seq;
			snprintf(err, errlen, "nftables refused %s: %s",
				 i < bt->n ? bt->what[i] : "the batch", strerror(failed));
		}
	}
	return failed ? -1 : 0;
}

static int batch_send(struct nft *n, struct batch *bt, char *err, size_t errlen)
{
	nftnl_batch_end(mnl_nlmsg_batch_current(bt->b), n->seq++);
	batch_done_msg(bt);
	if (bt->broken) {
		snprintf(err, errlen, "nftables: the rule set is too large for one batch");
		return -1;
	}
	drop_stale_answers(n);
	if (mnl_socket_sendto(n->nl, mnl_nlmsg_batch_head(bt->b),
			      mnl_nlmsg_batch_size(bt->b)) < 0) {
		snprintf(err, errlen, "nftables: cannot send to the kernel: %s", strerror(errno));
		return -1;
	}
	return read_acks(n, bt, err, errlen);
}

/* ---- objects ---------------------------------------------------------------- */

/* A new table carries our comment; a kernel without table userdata ignores it. */
static bool mark_table(struct nftnl_table *t)
{
	struct nftnl_udata_buf *u = nftnl_udata_buf_alloc(64);
	bool ok = u && nftnl_udata_put_strz(u, NFTNL_UDATA_TABLE_COMMENT, TABLE_COMMENT);

	if (ok)
		nftnl_table_set_data(t, NFTNL_TABLE_USERDATA, nftnl_udata_buf_data(u),
				     nftnl_udata_buf_len(u));
	nftnl_udata_buf_free(u);
	return ok;
}

/*
 * NEWTABLE (marked as ours), or DELTABLE of the table with this handle: the
 * one found to be ours a moment ago. Were it replaced by someone else's
 * since, the handle no longer names a table and the whole batch fails.
 */
static void put_table(struct nft *n, struct batch *bt, uint16_t type, uint16_t flags,
		      uint64_t handle)
{
	struct nftnl_table *t = nftnl_table_alloc();
	char what[WHAT_MAX];

	if (!t || (type == NFT_MSG_NEWTABLE && !mark_table(t))) {
		bt->broken = true;
		nftnl_table_free(t);
		return;
	}
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, n->plan.table);
	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	if (type == NFT_MSG_DELTABLE)
		nftnl_table_set_u64(t, NFTNL_TABLE_HANDLE, handle);
	snprintf(what, sizeof what, "table inet %s", n->plan.table);
	struct nlmsghdr *h = batch_msg(n, bt, type, flags, what);
	if (h) {
		nftnl_table_nlmsg_build_payload(h, t);
		batch_done_msg(bt);
	}
	nftnl_table_free(t);
}

static const void *ip_bytes(const struct config_ip *ip, uint32_t *len)
{
	*len = ip->family == AF_INET ? 4 : 16;
	return ip->family == AF_INET ? (const void *)&ip->v4 : (const void *)&ip->v6;
}

static struct nftnl_set *set_object(const struct nft_plan *p, const struct nft_set_plan *sp)
{
	struct nftnl_set *s = nftnl_set_alloc();
	uint32_t addr_type = sp->family == AF_INET ? NFT_TYPE_IPADDR : NFT_TYPE_IP6ADDR;
	uint32_t addr_len = sp->family == AF_INET ? 4 : 16;

	if (!s)
		return NULL;
	nftnl_set_set_str(s, NFTNL_SET_TABLE, p->table);
	nftnl_set_set_str(s, NFTNL_SET_NAME, sp->name);
	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_u32(s, NFTNL_SET_ID, (uint32_t)(sp - p->sets) + 1);
	if (sp->role == NFT_SET_INSTANCES) {
		nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_TIMEOUT);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, NFT_TYPE_MARK);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, 4);
	} else if (sp->role == NFT_SET_FLOWS) {
		/* client address . client port . our address; each field takes
		 * whole 32-bit registers, so the port 4 bytes */
		nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_TIMEOUT | NFT_SET_EVAL);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE,
				  addr_type << 2 * NFT_TYPE_BITS |
				  NFT_TYPE_INET_SERVICE << NFT_TYPE_BITS | addr_type);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, 2 * addr_len + 4);
		nftnl_set_set_u64(s, NFTNL_SET_TIMEOUT, p->flow_timeout_ms);
		nftnl_set_set_u32(s, NFTNL_SET_DESC_SIZE, NFT_FLOW_SET_SIZE);
	} else if (sp->role == NFT_SET_FALLBACK) {
		/* numgen's value, in host byte order, is the key. */
		nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_MAP);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, NFT_TYPE_MARK);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, 4);
		nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, addr_type);
		nftnl_set_set_u32(s, NFTNL_SET_DATA_LEN, addr_len);
	} else {
		nftnl_set_set_u32(s, NFTNL_SET_FLAGS, sp->role == NFT_SET_LIVE ? NFT_SET_TIMEOUT : 0);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, addr_type);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, addr_len);
	}
	return s;
}

/* The set's elements added to s; false when out of memory. */
static bool add_elements(struct nftnl_set *s, const struct nft_set_plan *sp,
			 uint64_t live_timeout)
{
	for (size_t i = 0; i < sp->n_ips; i++) {
		struct nftnl_set_elem *e = nftnl_set_elem_alloc();
		uint32_t len;
		const void *bytes = ip_bytes(sp->ips[i], &len);

		if (!e)
			return false;
		if (sp->role == NFT_SET_FALLBACK) {
			uint32_t key = (uint32_t)i;
			nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, &key, sizeof key);
			nftnl_set_elem_set(e, NFTNL_SET_ELEM_DATA, bytes, len);
		} else {
			nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, bytes, len);
		}
		if (sp->role == NFT_SET_LIVE)
			nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, live_timeout);
		nftnl_set_elem_add(s, e);
	}
	return true;
}

/* NEWSET (with_set) and/or NEWSETELEM with the planned elements (with_elements). */
static void put_set(struct nft *n, struct batch *bt, const struct nft_set_plan *sp,
		    bool with_set, bool with_elements)
{
	struct nftnl_set *s = set_object(&n->plan, sp);
	char what[WHAT_MAX];
	struct nlmsghdr *h;

	if (!s || (with_elements && !add_elements(s, sp, atomic_load(&n->live_timeout_ms)))) {
		bt->broken = true;
		nftnl_set_free(s);
		return;
	}
	snprintf(what, sizeof what, "set %s", sp->name);
	if (with_set && (h = batch_msg(n, bt, NFT_MSG_NEWSET, NLM_F_CREATE, what))) {
		nftnl_set_nlmsg_build_payload(h, s);
		batch_done_msg(bt);
	}
	snprintf(what, sizeof what, "the elements of set %s", sp->name);
	if (with_elements && sp->n_ips &&
	    (h = batch_msg(n, bt, NFT_MSG_NEWSETELEM, NLM_F_CREATE, what))) {
		nftnl_set_elems_nlmsg_build_payload(h, s);
		batch_done_msg(bt);
	}
	nftnl_set_free(s);
}

/*
 * One element of a timeout set given as its key: a heartbeat element or a
 * token. A rebuild puts back those of other processes with what was left
 * of their time (expires_ms), so it neither ends nor extends their
 * heartbeat.
 */
struct element {
	const struct nft_set_plan *set;
	uint8_t key[36];           /* up to a flow: 16 + 4 + 16 */
	uint32_t len;
	uint64_t expires_ms;       /* 0: the whole timeout of its set */
};

/* One element, without its timeout for a flow (the set's applies). */
static struct nftnl_set_elem *element_object(const struct nft *n, const struct element *el)
{
	struct nftnl_set_elem *e = nftnl_set_elem_alloc();

	if (!e)
		return NULL;
	nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, el->key, el->len);
	/* Another process's element keeps what it had left, whatever its timeout was. */
	uint64_t timeout = atomic_load(&n->live_timeout_ms);
	if (el->expires_ms > timeout)
		timeout = el->expires_ms;
	if (el->set->role != NFT_SET_FLOWS)
		nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, timeout);
	if (el->expires_ms)
		nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_EXPIRATION, el->expires_ms);
	return e;
}

/* NEWSETELEM or DELSETELEM of one element. */
static void put_element(struct nft *n, struct batch *bt, uint16_t type, const struct element *el)
{
	struct nftnl_set *s = set_object(&n->plan, el->set);
	struct nftnl_set_elem *e = element_object(n, el);
	char what[WHAT_MAX];
	struct nlmsghdr *h;

	if (!s || !e) {
		bt->broken = true;
		if (s)
			nftnl_set_free(s);
		if (e)
			nftnl_set_elem_free(e);
		return;
	}
	nftnl_set_elem_add(s, e);
	snprintf(what, sizeof what, "%s an element of set %s",
		 type == NFT_MSG_NEWSETELEM ? "adding" : "deleting", el->set->name);
	if ((h = batch_msg(n, bt, type, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0, what))) {
		nftnl_set_elems_nlmsg_build_payload(h, s);
		batch_done_msg(bt);
	}
	nftnl_set_free(s);
}

static struct element own_token(const struct nft *n)
{
	struct element el = {.set = nft_plan_set(&n->plan, NFT_SET_INSTANCES, 0), .len = 4};

	memcpy(el.key, &n->token, 4);
	return el;
}

/*
 * Our token with a fresh timeout. Adding an element that exists does not
 * renew it, deleting one that does not exist fails the batch: add (a
 * no-op if there), delete, add, all in one transaction.
 */
static void renew_token(struct nft *n, struct batch *bt)
{
	struct element el = own_token(n);

	put_element(n, bt, NFT_MSG_NEWSETELEM, &el);
	put_element(n, bt, NFT_MSG_DELSETELEM, &el);
	put_element(n, bt, NFT_MSG_NEWSETELEM, &el);
}

static void flush_set(struct nft *n, struct batch *bt, const struct nft_set_plan *sp)
{
	struct nftnl_set *s = set_object(&n->plan, sp);
	char what[WHAT_MAX];
	struct nlmsghdr *h;

	snprintf(what, sizeof what, "flushing set %s", sp->name);
	if (!s)
		bt->broken = true;
	else if ((h = batch_msg(n, bt, NFT_MSG_DELSETELEM, 0, what))) {
		nftnl_set_elems_nlmsg_build_payload(h, s);
		batch_done_msg(bt);
	}
	nftnl_set_free(s);
}

static void put_chain(struct nft *n, struct batch *bt, const struct nft_chain_plan *cp)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	char what[WHAT_MAX];
	struct nlmsghdr *h;

	if (!c) {
		bt->broken = true;
		return;
	}
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, n->plan.table);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, cp->name);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM,
			    cp->output ? NF_INET_LOCAL_OUT : NF_INET_PRE_ROUTING);
	nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, cp->priority);
	nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, cp->nat ? "nat" : "filter");
	nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
	snprintf(what, sizeof what, "chain %s", cp->name);
	if ((h = batch_msg(n, bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, what))) {
		nftnl_chain_nlmsg_build_payload(h, c);
		batch_done_msg(bt);
	}
	nftnl_chain_free(c);
}

/* ---- rules ------------------------------------------------------------------ */

/* Expressions go into r in order; a failed allocation marks the rule broken. */
struct rule_builder {
	struct nftnl_rule *r;
	bool broken;
};

static struct nftnl_expr *expr(struct rule_builder *rb, const char *name)
{
	struct nftnl_expr *e = nftnl_expr_alloc(name);

	if (!e)
		rb->broken = true;
	return e;
}

static void add(struct rule_builder *rb, struct nftnl_expr *e)
{
	if (e)
		nftnl_rule_add_expr(rb->r, e);
}

static void cmp_eq(struct rule_builder *rb, const void *data, uint32_t len)
{
	struct nftnl_expr *e = expr(rb, "cmp");

	if (e) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, NFT_CMP_EQ);
		nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
	}
	add(rb, e);
}

static void meta_eq(struct rule_builder *rb, uint32_t key, uint8_t value)
{
	struct nftnl_expr *e = expr(rb, "meta");

	if (e) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
		nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
	}
	add(rb, e);
	cmp_eq(rb, &value, 1);
}

static void payload_to(struct rule_builder *rb, uint32_t base, uint32_t offset, uint32_t len,
		       uint32_t dreg)
{
	struct nftnl_expr *e = expr(rb, "payload");

	if (e) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, dreg);
	}
	add(rb, e);
}

static void payload(struct rule_builder *rb, uint32_t base, uint32_t offset, uint32_t len)
{
	payload_to(rb, base, offset, len, NFT_REG_1);
}

/* Register 1 looked up in the set; a map also writes its value to register 1. */
static void lookup(struct rule_builder *rb, const struct nft_plan *p,
		   const struct nft_set_plan *sp)
{
	struct nftnl_expr *e = expr(rb, "lookup");

	if (e) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
		nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, sp->name);
		nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, (uint32_t)(sp - p->sets) + 1);
		if (sp->role == NFT_SET_FALLBACK)
			nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, NFT_REG_1);
	}
	add(rb, e);
}

/* The address half of the rule: family, protocol, address in set, port. */
static void match(struct rule_builder *rb, const struct nft_plan *p,
		  const struct nft_rule_plan *rp)
{
	bool v4 = rp->family == AF_INET;
	bool dst = rp->match == NFT_MATCH_DADDR;
	uint16_t port = htons(p->port);

	meta_eq(rb, NFT_META_NFPROTO, v4 ? NFPROTO_IPV4 : NFPROTO_IPV6);
	meta_eq(rb, NFT_META_L4PROTO, rp->l4proto);
	if (v4)
		payload(rb, NFT_PAYLOAD_NETWORK_HEADER, dst ? 16 : 12, 4);
	else
		payload(rb, NFT_PAYLOAD_NETWORK_HEADER, dst ? 24 : 8, 16);
	lookup(rb, p, rp->set);
	payload(rb, NFT_PAYLOAD_TRANSPORT_HEADER, dst ? 2 : 0, 2);
	cmp_eq(rb, &port, sizeof port);
}

/*
 * The packet has a socket, and its key is 0: "wildcard 0" needs a full
 * socket bound to this very address (not a wildcard; a UDP socket
 * connected elsewhere does not count).
 */
static void socket_key_zero(struct rule_builder *rb, uint32_t key)
{
	struct nftnl_expr *e = expr(rb, "socket");
	uint8_t zero = 0;

	if (e) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_SOCKET_KEY, key);
		nftnl_expr_set_u32(e, NFTNL_EXPR_SOCKET_DREG, NFT_REG_1);
	}
	add(rb, e);
	cmp_eq(rb, &zero, 1);
}

/*
 * The connection's key, client address . client port . our address, in
 * consecutive 32-bit registers from register 1 on (a concatenation: each
 * field starts on a register of its own).
 */
static void load_flow_key(struct rule_builder *rb, int family)
{
	bool v4 = family == AF_INET;
	uint32_t addr_len = v4 ? 4 : 16;

	payload_to(rb, NFT_PAYLOAD_NETWORK_HEADER, v4 ? 12 : 8, addr_len, NFT_REG32_00);
	payload_to(rb, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 2, NFT_REG32_00 + addr_len / 4);
	payload_to(rb, NFT_PAYLOAD_NETWORK_HEADER, v4 ? 16 : 24, addr_len,
		   NFT_REG32_00 + addr_len / 4 + 1);
}

/* Add the connection to the flows set, or renew its entry's timeout. */
static void flow_update(struct rule_builder *rb, const struct nft_plan *p,
			const struct nft_set_plan *flows)
{
	struct nftnl_expr *e = expr(rb, "dynset");

	if (e) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_DYNSET_SREG_KEY, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_DYNSET_OP, NFT_DYNSET_OP_UPDATE);
		nftnl_expr_set_str(e, NFTNL_EXPR_DYNSET_SET_NAME, flows->name);
		nftnl_expr_set_u32(e, NFTNL_EXPR_DYNSET_SET_ID, (uint32_t)(flows - p->sets) + 1);
		nftnl_expr_set_u64(e, NFTNL_EXPR_DYNSET_TIMEOUT, p->flow_timeout_ms);
	}
	add(rb, e);
}

/* TCP flags & SYN, compared with syn ? SYN : 0. */
static void tcp_syn(struct rule_builder *rb, bool syn)
{
	struct nftnl_expr *e = expr(rb, "bitwise");
	uint8_t mask = 0x02, xor = 0, want = syn ? 0x02 : 0;

	payload(rb, NFT_PAYLOAD_TRANSPORT_HEADER, 13, 1);
	if (e) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 1);
		nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, 1);
		nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &xor, 1);
	}
	add(rb, e);
	cmp_eq(rb, &want, 1);
}

static void dnat_to_map(struct rule_builder *rb, const struct nft_plan *p,
			const struct nft_rule_plan *rp)
{
	struct nftnl_expr *ng = expr(rb, "numgen");

	if (ng) {
		nftnl_expr_set_u32(ng, NFTNL_EXPR_NG_DREG, NFT_REG_1);
		nftnl_expr_set_u32(ng, NFTNL_EXPR_NG_TYPE, NFT_NG_RANDOM);
		nftnl_expr_set_u32(ng, NFTNL_EXPR_NG_MODULUS, (uint32_t)rp->map->n_ips);
	}
	add(rb, ng);
	lookup(rb, p, rp->map);
	struct nftnl_expr *nat = expr(rb, "nat");
	if (nat) {
		nftnl_expr_set_u32(nat, NFTNL_EXPR_NAT_TYPE, NFT_NAT_DNAT);
		nftnl_expr_set_u32(nat, NFTNL_EXPR_NAT_FAMILY,
				   rp->family == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6);
		nftnl_expr_set_u32(nat, NFTNL_EXPR_NAT_REG_ADDR_MIN, NFT_REG_1);
	}
	add(rb, nat);
}

static void set_comment(struct rule_builder *rb, const char *comment)
{
	struct nftnl_udata_buf *u = nftnl_udata_buf_alloc(64);

	if (!u || !nftnl_udata_put_strz(u, NFTNL_UDATA_RULE_COMMENT, comment))
		rb->broken = true;
	else
		nftnl_rule_set_data(rb->r, NFTNL_RULE_USERDATA, nftnl_udata_buf_data(u),
				    nftnl_udata_buf_len(u));
	nftnl_udata_buf_free(u);
}

static struct nftnl_rule *rule_object(const struct nft_plan *p, const struct nft_rule_plan *rp)
{
	struct rule_builder rb = {.r = nftnl_rule_alloc()};

	if (!rb.r)
		return NULL;
	nftnl_rule_set_str(rb.r, NFTNL_RULE_TABLE, p->table);
	nftnl_rule_set_str(rb.r, NFTNL_RULE_CHAIN, nft_chains[rp->chain].name);
	nftnl_rule_set_u32(rb.r, NFTNL_RULE_FAMILY, NFPROTO_INET);
	match(&rb, p, rp);
	if (rp->syn != NFT_SYN_ANY)
		tcp_syn(&rb, rp->syn == NFT_SYN_SET);
	if (rp->bound)
		socket_key_zero(&rb, NFT_SOCKET_WILDCARD);
	if (rp->flow == NFT_FLOW_KNOWN) {
		load_flow_key(&rb, rp->family);
		lookup(&rb, p, rp->flows);
	}
	if (rp->flow != NFT_FLOW_NONE) {
		load_flow_key(&rb, rp->family);
		flow_update(&rb, p, rp->flows); /* a full set: no match, the SYN fails open */
	}
	if (rp->action == NFT_DNAT)
		dnat_to_map(&rb, p, rp);
	else
		add(&rb, expr(&rb, "notrack"));
	set_comment(&rb, p->comment);
	if (rb.broken) {
		nftnl_rule_free(rb.r);
		return NULL;
	}
	return rb.r;
}

static void put_rule(struct nft *n, struct batch *bt, const struct nft_rule_plan *rp,
		     size_t index_in_chain)
{
	struct nftnl_rule *r = rule_object(&n->plan, rp);
	char what[WHAT_MAX];
	struct nlmsghdr *h;

	if (!r) {
		bt->broken = true;
		return;
	}
	snprintf(what, sizeof what, "rule %zu of chain %s", index_in_chain + 1,
		 nft_chains[rp->chain].name);
	if ((h = batch_msg(n, bt, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, what))) {
		nftnl_rule_nlmsg_build_payload(h, r);
		batch_done_msg(bt);
	}
	nftnl_rule_free(r);
}

/* ---- whose table -------------------------------------------------------------- */

static int table_owner(struct nft *n, uint64_t *handle, char *err, size_t errlen);

/* ---- what a rebuild keeps ------------------------------------------------------------ */

/*
 * A rebuild deletes the table and adds it again, and with it the elements
 * that come and go at run time: the heartbeats of every localdns on the
 * node and the flows of open TCP connections. They are read first and put
 * back with the time they had left, so a rebuild (a localdns starting
 * beside a running one, a reload, new fallback endpoints, a repair)
 * neither ends another process's heartbeat nor hands an open connection
 * to conntrack mid-stream. At most KEPT_MAX: connections past that are
 * picked up by conntrack at their next packet.
 */
#define KEPT_MAX 2048

struct kept {
	const struct nft_set_plan *set; /* the set being dumped */
	uint32_t own_token;
	bool own_seen;
	size_t n;
	struct element el[KEPT_MAX];
};

static int keep_element(struct nftnl_set_elem *e, void *data)
{
	struct kept *k = data;
	uint32_t len = 0;
	const void *key = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &len);
	uint64_t left = nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_EXPIRATION)
				? nftnl_set_elem_get_u64(e, NFTNL_SET_ELEM_EXPIRATION) : 0;

	if (!key || len > sizeof k->el[0].key)
		return 0;
	if (k->set->role == NFT_SET_INSTANCES && len == 4 && memcmp(key, &k->own_token, 4) == 0) {
		k->own_seen = true;
		return 0;
	}
	if (left == 0 || k->n == KEPT_MAX)
		return 0;
	struct element *el = &k->el[k->n++];
	*el = (struct element){.set = k->set, .len = len, .expires_ms = left};
	memcpy(el->key, key, len);
	return 0;
}

/*
 * The tokens, and unless tokens_only the live elements and the flows, in
 * the kernel now (a missing set has none). NULL: errno.
 */
static struct kept *find_kept(struct nft *n, bool tokens_only)
{
	struct kept *k = malloc(sizeof *k);

	if (!k)
		return NULL;
	k->own_token = n->token;
	k->own_seen = false;
	k->n = 0;
	for (size_t i = 0; i < n->plan.n_sets; i++) {
		const struct nft_set_plan *sp = &n->plan.sets[i];

		if (sp->role != NFT_SET_INSTANCES &&
		    (tokens_only || (sp->role != NFT_SET_LIVE && sp->role != NFT_SET_FLOWS)))
			continue;
		k->set = sp;
		if (dump_elements(n, sp->name, keep_element, k) < 0 && errno != ENOENT) {
			int saved = errno;
			free(k);
			errno = saved;
			return NULL;
		}
	}
	return k;
}

/* One NEWSETELEM per set with the kept elements (k may be NULL), and our token. */
static void put_kept(struct nft *n, struct batch *bt, const struct kept *k)
{
	size_t n_kept = k ? k->n : 0;

	for (size_t i = 0; i < n->plan.n_sets; i++) {
		const struct nft_set_plan *sp = &n->plan.sets[i];
		struct nftnl_set *s = NULL;
		size_t count = 0;
		char what[WHAT_MAX];
		struct nlmsghdr *h;

		/* While we beat, our live elements (put_set) cover everyone's. */
		if (sp->role == NFT_SET_LIVE && n->beating)
			continue;
		for (size_t j = 0; j < n_kept; j++) {
			struct nftnl_set_elem *e;
			if (k->el[j].set != sp)
				continue;
			if ((!s && !(s = set_object(&n->plan, sp))) || !(e = element_object(n, &k->el[j]))) {
				bt->broken = true;
				break;
			}
			nftnl_set_elem_add(s, e);
			count++;
		}
		snprintf(what, sizeof what, "the kept elements of set %s", sp->name);
		if (count && (h = batch_msg(n, bt, NFT_MSG_NEWSETELEM, NLM_F_CREATE, what))) {
			nftnl_set_elems_nlmsg_build_payload(h, s);
			batch_done_msg(bt);
		}
		if (s)
			nftnl_set_free(s);
	}
	if (n->beating) {
		struct element el = own_token(n);
		put_element(n, bt, NFT_MSG_NEWSETELEM, &el);
	}
}

/* ---- operations --------------------------------------------------------------- */

/*
 * Delete our table (if there is one) and add it again with everything: one
 * transaction. A table of that name that is not ours is never touched.
 */
static int apply_locked(struct nft *n, char *err, size_t errlen)
{
	size_t in_chain[NFT_CHAINS] = {0};
	uint64_t handle;
	struct kept *kept = NULL; /* none: a new table */
	int owner = table_owner(n, &handle, err, errlen);

	if (owner < 0 || owner == NFT_TABLE_FOREIGN)
		return -1;
	if (owner == NFT_TABLE_OURS && !(kept = find_kept(n, false))) {
		snprintf(err, errlen, "nftables: cannot read the heartbeat and flow sets: %s",
			 strerror(errno));
		return -1;
	}
	struct batch *bt = batch_new(n);
	if (!bt) {
		snprintf(err, errlen, "nftables: out of memory");
		free(kept);
		return -1;
	}
	if (owner == NFT_TABLE_OURS)
		put_table(n, bt, NFT_MSG_DELTABLE, 0, handle);
	put_table(n, bt, NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_EXCL, 0);
	for (size_t i = 0; i < n->plan.n_sets; i++) {
		const struct nft_set_plan *sp = &n->plan.sets[i];
		/* The heartbeat only from a process that takes traffic (node.c). */
		put_set(n, bt, sp, true, sp->role != NFT_SET_LIVE || n->beating);
	}
	for (size_t i = 0; i < NFT_CHAINS; i++)
		put_chain(n, bt, &nft_chains[i]);
	for (size_t i = 0; i < n->plan.n_rules; i++) {
		const struct nft_rule_plan *rp = &n->plan.rules[i];
		put_rule(n, bt, rp, in_chain[rp->chain]++);
	}
	put_kept(n, bt, kept);
	int rc = batch_send(n, bt, err, errlen);
	batch_free(bt);
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

/* Re-adding an element does not renew its timeout; replacing it does. */
static void fill_heartbeat(struct nft *n, struct batch *bt)
{
	for (size_t i = 0; i < n->plan.n_sets; i++) {
		const struct nft_set_plan *sp = &n->plan.sets[i];
		if (sp->role != NFT_SET_LIVE)
			continue;
		flush_set(n, bt, sp);
		put_set(n, bt, sp, false, true);
	}
	renew_token(n, bt);
}

int nft_heartbeat(struct nft *n, char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	struct batch *bt = batch_new(n);
	int rc = -1;

	n->beating = true; /* also when this renewal fails: a rebuild puts it back */
	if (!bt) {
		snprintf(err, errlen, "nftables: out of memory");
	} else {
		fill_heartbeat(n, bt);
		rc = batch_send(n, bt, err, errlen);
	}
	batch_free(bt);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

/* nft_leave for whichever process n->token names; n->lock held. */
static int leave(struct nft *n, char *err, size_t errlen)
{
	struct kept *others;
	struct batch *bt = NULL;
	int rc = -1;

	if (!(others = find_kept(n, true))) {
		snprintf(err, errlen, "nftables: cannot read set instances: %s", strerror(errno));
	} else if (!others->own_seen && others->n > 0) {
		rc = 1; /* nothing of ours left to take out */
	} else if (!(bt = batch_new(n))) {
		snprintf(err, errlen, "nftables: out of memory");
	} else {
		struct element el = own_token(n);
		if (others->own_seen)
			put_element(n, bt, NFT_MSG_DELSETELEM, &el);
		for (size_t i = 0; others->n == 0 && i < n->plan.n_sets; i++)
			if (n->plan.sets[i].role == NFT_SET_LIVE)
				flush_set(n, bt, &n->plan.sets[i]);
		rc = batch_send(n, bt, err, errlen) < 0 ? -1 : others->n > 0;
	}
	batch_free(bt);
	free(others);
	return rc;
}

int nft_leave(struct nft *n, char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	n->beating = false;
	int rc = leave(n, err, errlen);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

int nft_leave_for(struct nft *n, uint32_t token, char *err, size_t errlen)
{
	pthread_mutex_lock(&n->lock);
	uint32_t own = n->token;
	n->token = token;
	int rc = leave(n, err, errlen);
	n->token = own;
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

void nft_mute(struct nft *n)
{
	pthread_mutex_lock(&n->lock);
	if (n->events)
		mnl_socket_close(n->events);
	n->events = NULL;
	pthread_mutex_unlock(&n->lock);
}

int nft_remove(struct nft *n, char *err, size_t errlen)
{
	uint64_t handle;
	struct batch *bt = NULL;
	int rc = -1;

	pthread_mutex_lock(&n->lock);
	int owner = table_owner(n, &handle, err, errlen);
	if (owner == NFT_TABLE_ABSENT) {
		rc = 0;
	} else if (owner == NFT_TABLE_OURS && !(bt = batch_new(n))) {
		snprintf(err, errlen, "nftables: out of memory");
	} else if (owner == NFT_TABLE_OURS) {
		put_table(n, bt, NFT_MSG_DELTABLE, 0, handle);
		rc = batch_send(n, bt, err, errlen);
	}
	batch_free(bt);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

int nft_table_owner(struct nft *n, char *err, size_t errlen)
{
	uint64_t handle;

	pthread_mutex_lock(&n->lock);
	int owner = table_owner(n, &handle, err, errlen);
	pthread_mutex_unlock(&n->lock);
	return owner;
}

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
		    dump_elements(n, n->plan.sets[i].name, found_endpoint, &f) < 0 &&
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

/* ---- checking ----------------------------------------------------------------- */

struct seen {
	const struct nft_plan *plan;
	size_t count;
	size_t per_chain[NFT_CHAINS];
	bool foreign;              /* a rule, chain or set we did not plan */
	char why[WHAT_MAX];
};

/*
 * One dump of our table's objects of this type (of one set's elements when
 * set_name is given) on nl; cb sees every object. -1 with errno on failure.
 */
static int dump(struct nft *n, uint16_t type, const char *set_name, mnl_cb_t cb, void *data)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	uint32_t seq = n->seq++;
	struct nlmsghdr *h = nftnl_nlmsg_build_hdr(buf, type, NFPROTO_INET, NLM_F_DUMP, seq);

	/* Every object kind keeps its table's name in attribute 1. */
	mnl_attr_put_strz(h, NFTA_TABLE_NAME, n->plan.table);
	if (set_name)
		mnl_attr_put_strz(h, NFTA_SET_ELEM_LIST_SET, set_name);
	if (mnl_socket_sendto(n->nl, h, h->nlmsg_len) < 0)
		return -1;
	for (;;) {
		ssize_t r = mnl_socket_recvfrom(n->nl, buf, sizeof buf);
		if (r < 0)
			return -1;
		int rc = mnl_cb_run(buf, (size_t)r, seq, n->portid, cb, data);
		if (rc <= MNL_CB_STOP)
			return rc;
	}
}

/* What a set's dump does with each element (dump_elements). */
struct element_visit {
	int (*fn)(struct nftnl_set_elem *e, void *arg);
	void *arg;
};

static int on_set_elements(const struct nlmsghdr *h, void *data)
{
	const struct element_visit *v = data;
	struct nftnl_set *set = nftnl_set_alloc();
	int rc = MNL_CB_OK;

	if (!set || nftnl_set_elems_nlmsg_parse(h, set) < 0)
		rc = MNL_CB_ERROR;
	else
		nftnl_set_elem_foreach(set, v->fn, v->arg);
	nftnl_set_free(set);
	return rc;
}

/* Every element of our set set_name through fn; -1 with errno (ENOENT: no such set). */
static int dump_elements(struct nft *n, const char *set_name,
			 int (*fn)(struct nftnl_set_elem *e, void *arg), void *arg)
{
	struct element_visit v = {fn, arg};

	return dump(n, NFT_MSG_GETSETELEM, set_name, on_set_elements, &v);
}

static int chain_index(const char *name)
{
	for (int i = 0; i < NFT_CHAINS; i++)
		if (name && strcmp(nft_chains[i].name, name) == 0)
			return i;
	return -1;
}

static int comment_cb(const struct nftnl_udata *attr, void *data)
{
	const char **comment = data;

	if (nftnl_udata_type(attr) == NFTNL_UDATA_RULE_COMMENT)
		*comment = nftnl_udata_get(attr);
	return MNL_CB_OK;
}

/* The rule in a dump's message, and its comment in *comment (NULL when it
 * has none; the rule's own, gone with it). NULL when it does not parse. */
static struct nftnl_rule *parse_rule(const struct nlmsghdr *h, const char **comment)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	uint32_t len = 0;

	*comment = NULL;
	if (!r || nftnl_rule_nlmsg_parse(h, r) < 0) {
		nftnl_rule_free(r);
		return NULL;
	}
	const void *udata = nftnl_rule_get_data(r, NFTNL_RULE_USERDATA, &len);
	if (udata)
		nftnl_udata_parse(udata, len, comment_cb, comment);
	return r;
}

/* The chain in a dump's message; NULL when it does not parse. */
static struct nftnl_chain *parse_chain(const struct nlmsghdr *h)
{
	struct nftnl_chain *c = nftnl_chain_alloc();

	if (!c || nftnl_chain_nlmsg_parse(h, c) < 0) {
		nftnl_chain_free(c);
		return NULL;
	}
	return c;
}

static int on_rule(const struct nlmsghdr *h, void *data)
{
	struct seen *s = data;
	const char *comment;
	struct nftnl_rule *r = parse_rule(h, &comment);

	if (!r)
		return MNL_CB_ERROR;
	int chain = chain_index(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN));
	if (chain < 0 || !comment || strcmp(comment, s->plan->comment) != 0) {
		s->foreign = true;
		snprintf(s->why, sizeof s->why, "a rule in chain %s is not ours",
			 nftnl_rule_get_str(r, NFTNL_RULE_CHAIN));
	} else {
		s->per_chain[chain]++;
	}
	nftnl_rule_free(r);
	return MNL_CB_OK;
}

static int on_object(const struct nlmsghdr *h, void *data)
{
	(void)h;
	((struct seen *)data)->count++;
	return MNL_CB_OK;
}

/* Chain dumps are not filtered by table in the kernel: count ours only. */
static int on_chain(const struct nlmsghdr *h, void *data)
{
	struct seen *s = data;
	struct nftnl_chain *c = parse_chain(h);

	if (!c)
		return MNL_CB_ERROR;
	const char *table = nftnl_chain_get_str(c, NFTNL_CHAIN_TABLE);
	if (table && strcmp(table, s->plan->table) == 0)
		s->count++;
	nftnl_chain_free(c);
	return MNL_CB_OK;
}

static int count_element(struct nftnl_set_elem *e, void *data)
{
	(void)e;
	((struct seen *)data)->count++;
	return 0;
}

/* 1 as planned, 0 drifted (why in err), -1 could not ask. */
static int check_sets(struct nft *n, char *err, size_t errlen)
{
	struct seen s = {.plan = &n->plan};

	if (dump(n, NFT_MSG_GETSET, NULL, on_object, &s) < 0) {
		if (errno != ENOENT)
			goto fail;
		snprintf(err, errlen, "table inet %s is missing", n->plan.table);
		return 0;
	}
	if (s.count != n->plan.n_sets) {
		snprintf(err, errlen, "%zu sets instead of %zu", s.count, n->plan.n_sets);
		return 0;
	}
	for (size_t i = 0; i < n->plan.n_sets; i++) {
		const struct nft_set_plan *sp = &n->plan.sets[i];

		if (sp->role == NFT_SET_LIVE || sp->role == NFT_SET_INSTANCES ||
		    sp->role == NFT_SET_FLOWS)
			continue; /* they change on their own: timeouts, packets */
		s.count = 0;
		if (dump_elements(n, sp->name, count_element, &s) < 0) {
			if (errno != ENOENT)
				goto fail;
			snprintf(err, errlen, "set %s is missing", sp->name);
			return 0;
		}
		if (s.count != sp->n_ips) {
			snprintf(err, errlen, "set %s has %zu elements instead of %zu", sp->name,
				 s.count, sp->n_ips);
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
	struct seen chains = {.plan = &n->plan}, rules = {.plan = &n->plan};

	if (dump(n, NFT_MSG_GETCHAIN, NULL, on_chain, &chains) < 0 ||
	    dump(n, NFT_MSG_GETRULE, NULL, on_rule, &rules) < 0) {
		snprintf(err, errlen, "nftables: cannot list our rules: %s", strerror(errno));
		return -1;
	}
	if (chains.count != NFT_CHAINS) {
		snprintf(err, errlen, "%zu chains instead of %d", chains.count, NFT_CHAINS);
		return 0;
	}
	if (rules.foreign) {
		snprintf(err, errlen, "%s", rules.why);
		return 0;
	}
	for (int i = 0; i < NFT_CHAINS; i++)
		if (rules.per_chain[i] != n->plan.rules_per_chain[i]) {
			snprintf(err, errlen, "chain %s has %zu rules instead of %zu",
				 nft_chains[i].name, rules.per_chain[i], n->plan.rules_per_chain[i]);
			return 0;
		}
	return 1;
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

/* ---- whose table ---------------------------------------------------------------- */

/*
 * A table named like ours is ours when it carries our comment, and also,
 * without any comment, when everything in it looks like ours: a table made
 * by a localdns from before tables were marked, or on a kernel older than
 * 5.13, which keeps no table comment. Either way it survives us (kill -9,
 * an upgrade) and the next localdns adopts it: that is what makes a crash
 * fail open. Anything else is someone's firewall.
 */
struct table_seen {
	uint64_t handle;
	bool has_comment;
	char comment[64];
	size_t our_rules;          /* (no comment) rules carrying "localdns <fingerprint>" */
	bool foreign;              /* (no comment) a chain or rule that is not ours */
	char why[WHAT_MAX];
};

static int table_comment_cb(const struct nftnl_udata *attr, void *data)
{
	struct table_seen *t = data;

	if (nftnl_udata_type(attr) == NFTNL_UDATA_TABLE_COMMENT) {
		t->has_comment = true;
		snprintf(t->comment, sizeof t->comment, "%.*s", (int)nftnl_udata_len(attr),
			 (const char *)nftnl_udata_get(attr));
	}
	return MNL_CB_OK;
}

static int on_table(const struct nlmsghdr *h, void *data)
{
	struct table_seen *t = data;
	struct nftnl_table *table = nftnl_table_alloc();
	uint32_t len = 0;

	if (!table || nftnl_table_nlmsg_parse(h, table) < 0) {
		nftnl_table_free(table);
		return MNL_CB_ERROR;
	}
	t->handle = nftnl_table_get_u64(table, NFTNL_TABLE_HANDLE);
	const void *udata = nftnl_table_get_data(table, NFTNL_TABLE_USERDATA, &len);
	if (udata)
		nftnl_udata_parse(udata, len, table_comment_cb, t);
	nftnl_table_free(table);
	return MNL_CB_OK;
}

/* Answers to an earlier request that failed half-read must not count here. */
static void drop_stale_answers(struct nft *n)
{
	char stale[MNL_SOCKET_BUFFER_SIZE];

	while (recv(mnl_socket_get_fd(n->nl), stale, sizeof stale, MSG_DONTWAIT) > 0)
		;
}

/* 1 found (t filled), 0 no such table, -1 could not ask (errno). */
static int get_table(struct nft *n, struct table_seen *t)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	uint32_t seq = n->seq++;
	struct nlmsghdr *h = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETTABLE, NFPROTO_INET, NLM_F_ACK,
						   seq);

	mnl_attr_put_strz(h, NFTA_TABLE_NAME, n->plan.table);
	drop_stale_answers(n);
	if (mnl_socket_sendto(n->nl, h, h->nlmsg_len) < 0)
		return -1;
	for (;;) {
		ssize_t r = mnl_socket_recvfrom(n->nl, buf, sizeof buf);
		if (r < 0)
			return -1;
		int rc = mnl_cb_run(buf, (size_t)r, seq, n->portid, on_table, t);
		if (rc < 0)
			return errno == ENOENT ? 0 : -1;
		if (rc == MNL_CB_STOP)
			return 1;
	}
}

static int on_probed_chain(const struct nlmsghdr *h, void *data)
{
	struct seen *s = data;
	struct nftnl_chain *c = parse_chain(h);

	if (!c)
		return MNL_CB_ERROR;
	const char *table = nftnl_chain_get_str(c, NFTNL_CHAIN_TABLE);
	const char *name = nftnl_chain_get_str(c, NFTNL_CHAIN_NAME);
	if (table && strcmp(table, s->plan->table) == 0 && chain_index(name) < 0 && !s->foreign) {
		s->foreign = true;
		snprintf(s->why, sizeof s->why, "it has a chain %s", name);
	}
	nftnl_chain_free(c);
	return MNL_CB_OK;
}

static int on_probed_rule(const struct nlmsghdr *h, void *data)
{
	struct seen *s = data;
	const char *comment;
	struct nftnl_rule *r = parse_rule(h, &comment);

	if (!r)
		return MNL_CB_ERROR;
	if (comment && strncmp(comment, "localdns ", 9) == 0) {
		s->count++;
	} else if (!s->foreign) {
		s->foreign = true;
		snprintf(s->why, sizeof s->why, "a rule in its chain %s is not ours",
			 nftnl_rule_get_str(r, NFTNL_RULE_CHAIN));
	}
	nftnl_rule_free(r);
	return MNL_CB_OK;
}

/* A table without a comment: are its chains and rules all ours? -1: could not ask. */
static int probe_unmarked(struct nft *n, struct table_seen *t)
{
	struct seen s = {.plan = &n->plan};

	if (dump(n, NFT_MSG_GETCHAIN, NULL, on_probed_chain, &s) < 0 ||
	    (!s.foreign && dump(n, NFT_MSG_GETRULE, NULL, on_probed_rule, &s) < 0))
		return -1;
	t->foreign = s.foreign;
	t->our_rules = s.count;
	snprintf(t->why, sizeof t->why, "%s", s.foreign ? s.why : "it has no rule of ours");
	return 0;
}

/* enum nft_table_owner, or -1 when the kernel could not be asked; err for both failures. */
static int table_owner(struct nft *n, uint64_t *handle, char *err, size_t errlen)
{
	struct table_seen t = {0};
	int found = get_table(n, &t);

	if (found == 0)
		return NFT_TABLE_ABSENT;
	if (found < 0 || (!t.has_comment && probe_unmarked(n, &t) < 0)) {
		snprintf(err, errlen, "nftables: cannot look at table inet %s: %s", n->plan.table,
			 strerror(errno));
		return -1;
	}
	*handle = t.handle;
	if (t.has_comment ? strcmp(t.comment, TABLE_COMMENT) == 0 : !t.foreign && t.our_rules)
		return NFT_TABLE_OURS;
	if (t.has_comment)
		snprintf(t.why, sizeof t.why, "its comment is \"%.48s\"", t.comment);
	snprintf(err, errlen, "nftables.table: table inet %s exists and was not made by localdns "
		 "(%s); localdns never replaces a table it did not make: set nftables.table to a "
		 "name no other program uses, or delete that table if it is a leftover",
		 n->plan.table, t.why);
	return NFT_TABLE_FOREIGN;
}

/* ---- events ------------------------------------------------------------------- */

int nft_event_fd(const struct nft *n)
{
	return n->events ? mnl_socket_get_fd(n->events) : -1;
}

/* Someone else's change to an object of our table? */
static bool foreign_change(const struct nft *n, const struct nlmsghdr *h)
{
	if (NFNL_SUBSYS_ID(h->nlmsg_type) != NFNL_SUBSYS_NFTABLES ||
	    NFNL_MSG_TYPE(h->nlmsg_type) == NFT_MSG_NEWGEN || h->nlmsg_pid == n->portid)
		return false;
	const struct nfgenmsg *g = mnl_nlmsg_get_payload(h);
	if (g->nfgen_family != NFPROTO_INET)
		return false;
	const struct nlattr *a;
	mnl_attr_for_each(a, h, sizeof *g) {
		/* Attribute 1 is the table's name in table, chain, rule, set and element events. */
		if (mnl_attr_get_type(a) == 1)
			return mnl_attr_validate(a, MNL_TYPE_NUL_STRING) == 0 &&
			       strcmp(mnl_attr_get_str(a), n->plan.table) == 0;
	}
	return false;
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
			foreign = foreign_change(n, h) || foreign;
	}
	pthread_mutex_unlock(&n->lock);
	return foreign;
}

/* ---- lifetime ------------------------------------------------------------------- */

static struct mnl_socket *open_socket(unsigned groups, char *err, size_t errlen)
{
	struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
	int one = 1;

	if (!nl || mnl_socket_bind(nl, groups, MNL_SOCKET_AUTOPID) < 0) {
		snprintf(err, errlen, "nftables: cannot open a netfilter netlink socket: %s",
			 strerror(errno));
		if (nl)
			mnl_socket_close(nl);
		return NULL;
	}
	/* Errors without a copy of the message we sent: we know what we sent. */
	mnl_socket_setsockopt(nl, NETLINK_CAP_ACK, &one, sizeof one);
	/* A batch is one message to the kernel, which refuses one larger
	 * than the send buffer (net.core.wmem_default, often 208 KiB). */
	int room = 2 * BATCH_LIMIT;
	if (setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room) < 0)
		setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
	return nl;
}

struct nft *nft_open(const struct config *cfg, char *err, size_t errlen)
{
	struct nft *n = calloc(1, sizeof *n);

	if (!n) {
		snprintf(err, errlen, "nftables: out of memory");
		return NULL;
	}
	pthread_mutex_init(&n->lock, NULL);
	n->cfg = cfg;
	n->seq = (uint32_t)time(NULL);
	atomic_init(&n->live_timeout_ms, NFT_LIVE_TIMEOUT_MS);
	/* Pods have PID namespaces of their own: two may both be PID 1. */
	while (n->token == 0)
		if (getrandom(&n->token, sizeof n->token, 0) != (ssize_t)sizeof n->token)
			n->token = (uint32_t)time(NULL) ^ (uint32_t)getpid();
	if (!(n->nl = open_socket(0, err, errlen)) ||
	    !(n->events = open_socket(1u << (NFNLGRP_NFTABLES - 1), err, errlen))) {
		nft_close(n);
		return NULL;
	}
	n->portid = mnl_socket_get_portid(n->nl);
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
	if (n->nl)
		mnl_socket_close(n->nl);
	if (n->events)
		mnl_socket_close(n->events);
	nft_plan_free(&n->plan);
	free(n->endpoints);
	pthread_mutex_destroy(&n->lock);
	free(n);
}
