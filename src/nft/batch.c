/*
 * nft/batch.c — the messages of each transaction on our table, built from
 * the plan: installing the table (the old one deleted and the new one
 * added whole, with what the rebuild keeps put back), renewing the
 * heartbeat, leaving it, removing the table; and, from the kernel's acks,
 * which message it refused.
 *
 * Every change is one nfnetlink batch, and every message in it asks for an
 * ack, so a refusal names the object the kernel refused (by sequence
 * number) with the kernel's errno. The kernel applies a batch whole or not
 * at all.
 *
 * Pure: libnftnl objects serialised into one buffer; walk.c sends it, and
 * tests/unit/test_nft_batch.c reads it back without a kernel.
 *
 * Must never: name a table but the plan's, delete a table but by the
 * handle it is given (the one just found to be ours), or flush the
 * ruleset.
 */
#include "nft/internal.h"

#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nft's datatype numbers (src/datatype.h), so `nft list` prints our sets. */
#define NFT_TYPE_MARK 19
#define NFT_TYPE_IPADDR 7
#define NFT_TYPE_IP6ADDR 8
#define NFT_TYPE_INET_SERVICE 13
#define NFT_TYPE_BITS 6               /* a concatenation's type: one per field */

#define BATCH_MSGS 512

struct nft_batch {
	char *buf;
	struct mnl_nlmsg_batch *b;
	uint32_t *seq;             /* the socket's sequence numbers */
	uint32_t first_seq;        /* of what[0] */
	size_t n;
	bool broken;               /* out of memory or too many messages */
	char what[BATCH_MSGS][NFT_WHAT_MAX];
};

static struct nft_batch *batch_begin(uint32_t *seq)
{
	struct nft_batch *bt = calloc(1, sizeof *bt);

	/* The message that crosses the limit is written past it: twice the room. */
	if (!bt || !(bt->buf = malloc(2 * NFT_BATCH_LIMIT))) {
		free(bt);
		return NULL;
	}
	bt->seq = seq;
	bt->b = mnl_nlmsg_batch_start(bt->buf, NFT_BATCH_LIMIT);
	nftnl_batch_begin(mnl_nlmsg_batch_current(bt->b), (*seq)++);
	mnl_nlmsg_batch_next(bt->b);
	bt->first_seq = *seq;
	return bt;
}

void nft_batch_free(struct nft_batch *bt)
{
	if (!bt)
		return;
	mnl_nlmsg_batch_stop(bt->b);
	free(bt->buf);
	free(bt);
}

/* The header of the next message, described for error messages; NULL if full. */
static struct nlmsghdr *batch_msg(struct nft_batch *bt, uint16_t type, uint16_t flags,
				  const char *what)
{
	if (bt->broken || bt->n == BATCH_MSGS) {
		bt->broken = true;
		return NULL;
	}
	snprintf(bt->what[bt->n++], NFT_WHAT_MAX, "%s", what);
	return nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt->b), type, NFPROTO_INET,
				     flags | NLM_F_ACK, (*bt->seq)++);
}

static void batch_done_msg(struct nft_batch *bt)
{
	if (!mnl_nlmsg_batch_next(bt->b))
		bt->broken = true;
}

static struct nft_batch *batch_end(struct nft_batch *bt)
{
	nftnl_batch_end(mnl_nlmsg_batch_current(bt->b), (*bt->seq)++);
	batch_done_msg(bt);
	return bt;
}

const void *nft_batch_data(const struct nft_batch *bt, size_t *len)
{
	if (bt->broken)
		return NULL;
	*len = mnl_nlmsg_batch_size(bt->b);
	return mnl_nlmsg_batch_head(bt->b);
}

int nft_batch_refusal(const struct nft_batch *bt, const void *buf, size_t len, char *err,
		      size_t errlen)
{
	int left = (int)len;

	for (const struct nlmsghdr *h = buf; mnl_nlmsg_ok(h, left); h = mnl_nlmsg_next(h, &left)) {
		if (h->nlmsg_type != NLMSG_ERROR)
			continue;
		const struct nlmsgerr *e = mnl_nlmsg_get_payload(h);
		if (e->error == 0)
			continue;
		uint32_t i = e->msg.nlmsg_seq - bt->first_seq;
		snprintf(err, errlen, "nftables refused %s: %s",
			 i < bt->n ? bt->what[i] : "the batch", strerror(-e->error));
		return -e->error;
	}
	return 0;
}

/* ---- objects ---------------------------------------------------------------- */

/* A new table carries our comment; a kernel without table userdata ignores it. */
static bool mark_table(struct nftnl_table *t)
{
	struct nftnl_udata_buf *u = nftnl_udata_buf_alloc(64);
	bool ok = u && nftnl_udata_put_strz(u, NFTNL_UDATA_TABLE_COMMENT, NFT_TABLE_COMMENT);

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
static void put_table(struct nft_batch *bt, const struct nft_plan *p, uint16_t type,
		      uint16_t flags, uint64_t handle)
{
	struct nftnl_table *t = nftnl_table_alloc();
	char what[NFT_WHAT_MAX];

	if (!t || (type == NFT_MSG_NEWTABLE && !mark_table(t))) {
		bt->broken = true;
		nftnl_table_free(t);
		return;
	}
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, p->table);
	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	if (type == NFT_MSG_DELTABLE)
		nftnl_table_set_u64(t, NFTNL_TABLE_HANDLE, handle);
	snprintf(what, sizeof what, "table inet %s", p->table);
	struct nlmsghdr *h = batch_msg(bt, type, flags, what);
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
static void put_set(struct nft_batch *bt, const struct nft_plan *p,
		    const struct nft_set_plan *sp, bool with_set, bool with_elements,
		    uint64_t live_timeout)
{
	struct nftnl_set *s = set_object(p, sp);
	char what[NFT_WHAT_MAX];
	struct nlmsghdr *h;

	if (!s || (with_elements && !add_elements(s, sp, live_timeout))) {
		bt->broken = true;
		nftnl_set_free(s);
		return;
	}
	snprintf(what, sizeof what, "set %s", sp->name);
	if (with_set && (h = batch_msg(bt, NFT_MSG_NEWSET, NLM_F_CREATE, what))) {
		nftnl_set_nlmsg_build_payload(h, s);
		batch_done_msg(bt);
	}
	snprintf(what, sizeof what, "the elements of set %s", sp->name);
	if (with_elements && sp->n_ips &&
	    (h = batch_msg(bt, NFT_MSG_NEWSETELEM, NLM_F_CREATE, what))) {
		nftnl_set_elems_nlmsg_build_payload(h, s);
		batch_done_msg(bt);
	}
	nftnl_set_free(s);
}

/* One element, without its timeout for a flow (the set's applies). */
static struct nftnl_set_elem *element_object(const struct nft_element *el,
					     uint64_t live_timeout)
{
	struct nftnl_set_elem *e = nftnl_set_elem_alloc();

	if (!e)
		return NULL;
	nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, el->key, el->len);
	/* Another process's element keeps what it had left, whatever its timeout was. */
	uint64_t timeout = live_timeout;
	if (el->expires_ms > timeout)
		timeout = el->expires_ms;
	if (el->set->role != NFT_SET_FLOWS)
		nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, timeout);
	if (el->expires_ms)
		nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_EXPIRATION, el->expires_ms);
	return e;
}

/* NEWSETELEM or DELSETELEM of one element. */
static void put_element(struct nft_batch *bt, const struct nft_plan *p, uint16_t type,
			const struct nft_element *el, uint64_t live_timeout)
{
	struct nftnl_set *s = set_object(p, el->set);
	struct nftnl_set_elem *e = element_object(el, live_timeout);
	char what[NFT_WHAT_MAX];
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
	if ((h = batch_msg(bt, type, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0, what))) {
		nftnl_set_elems_nlmsg_build_payload(h, s);
		batch_done_msg(bt);
	}
	nftnl_set_free(s);
}

static struct nft_element token_element(const struct nft_plan *p, uint32_t token)
{
	struct nft_element el = {.set = nft_plan_set(p, NFT_SET_INSTANCES, 0), .len = 4};

	memcpy(el.key, &token, 4);
	return el;
}

/*
 * Our token with a fresh timeout. Adding an element that exists does not
 * renew it, deleting one that does not exist fails the batch: add (a
 * no-op if there), delete, add, all in one transaction.
 */
static void renew_token(struct nft_batch *bt, const struct nft_plan *p,
			const struct nft_beat *beat)
{
	struct nft_element el = token_element(p, beat->token);

	put_element(bt, p, NFT_MSG_NEWSETELEM, &el, beat->live_timeout_ms);
	put_element(bt, p, NFT_MSG_DELSETELEM, &el, beat->live_timeout_ms);
	put_element(bt, p, NFT_MSG_NEWSETELEM, &el, beat->live_timeout_ms);
}

static void flush_set(struct nft_batch *bt, const struct nft_plan *p,
		      const struct nft_set_plan *sp)
{
	struct nftnl_set *s = set_object(p, sp);
	char what[NFT_WHAT_MAX];
	struct nlmsghdr *h;

	snprintf(what, sizeof what, "flushing set %s", sp->name);
	if (!s)
		bt->broken = true;
	else if ((h = batch_msg(bt, NFT_MSG_DELSETELEM, 0, what))) {
		nftnl_set_elems_nlmsg_build_payload(h, s);
		batch_done_msg(bt);
	}
	nftnl_set_free(s);
}

static void put_chain(struct nft_batch *bt, const struct nft_plan *p,
		      const struct nft_chain_plan *cp)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	char what[NFT_WHAT_MAX];
	struct nlmsghdr *h;

	if (!c) {
		bt->broken = true;
		return;
	}
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, p->table);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, cp->name);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM,
			    cp->output ? NF_INET_LOCAL_OUT : NF_INET_PRE_ROUTING);
	nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, cp->priority);
	nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, cp->nat ? "nat" : "filter");
	nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
	snprintf(what, sizeof what, "chain %s", cp->name);
	if ((h = batch_msg(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, what))) {
		nftnl_chain_nlmsg_build_payload(h, c);
		batch_done_msg(bt);
	}
	nftnl_chain_free(c);
}

static void put_rule(struct nft_batch *bt, const struct nft_plan *p,
		     const struct nft_rule_plan *rp, size_t index_in_chain)
{
	struct nftnl_rule *r = nft_rule_object(p, rp);
	char what[NFT_WHAT_MAX];
	struct nlmsghdr *h;

	if (!r) {
		bt->broken = true;
		return;
	}
	snprintf(what, sizeof what, "rule %zu of chain %s", index_in_chain + 1,
		 nft_chains[rp->chain].name);
	if ((h = batch_msg(bt, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, what))) {
		nftnl_rule_nlmsg_build_payload(h, r);
		batch_done_msg(bt);
	}
	nftnl_rule_free(r);
}

/* ---- what a rebuild keeps ------------------------------------------------------ */

int nft_kept_element(struct nftnl_set_elem *e, void *data)
{
	struct nft_kept *k = data;
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
	if (left == 0 || k->n == NFT_KEPT_MAX)
		return 0;
	struct nft_element *el = &k->el[k->n++];
	*el = (struct nft_element){.set = k->set, .len = len, .expires_ms = left};
	memcpy(el->key, key, len);
	return 0;
}

/* One NEWSETELEM per set with the kept elements (k may be NULL), and our token. */
static void put_kept(struct nft_batch *bt, const struct nft_plan *p,
		     const struct nft_beat *beat, const struct nft_kept *k)
{
	size_t n_kept = k ? k->n : 0;

	for (size_t i = 0; i < p->n_sets; i++) {
		const struct nft_set_plan *sp = &p->sets[i];
		struct nftnl_set *s = NULL;
		size_t count = 0;
		char what[NFT_WHAT_MAX];
		struct nlmsghdr *h;

		/* While we beat, our live elements (put_set) cover everyone's. */
		if (sp->role == NFT_SET_LIVE && beat->beating)
			continue;
		for (size_t j = 0; j < n_kept; j++) {
			struct nftnl_set_elem *e;
			if (k->el[j].set != sp)
				continue;
			if ((!s && !(s = set_object(p, sp))) ||
			    !(e = element_object(&k->el[j], beat->live_timeout_ms))) {
				bt->broken = true;
				break;
			}
			nftnl_set_elem_add(s, e);
			count++;
		}
		snprintf(what, sizeof what, "the kept elements of set %s", sp->name);
		if (count && (h = batch_msg(bt, NFT_MSG_NEWSETELEM, NLM_F_CREATE, what))) {
			nftnl_set_elems_nlmsg_build_payload(h, s);
			batch_done_msg(bt);
		}
		if (s)
			nftnl_set_free(s);
	}
	if (beat->beating) {
		struct nft_element el = token_element(p, beat->token);
		put_element(bt, p, NFT_MSG_NEWSETELEM, &el, beat->live_timeout_ms);
	}
}

/* ---- transactions --------------------------------------------------------------- */

struct nft_batch *nft_batch_install(uint32_t *seq, const struct nft_plan *p,
				    const struct nft_beat *beat, const struct nft_kept *old)
{
	struct nft_batch *bt = batch_begin(seq);
	size_t in_chain[NFT_CHAINS] = {0};

	if (!bt)
		return NULL;
	if (old)
		put_table(bt, p, NFT_MSG_DELTABLE, 0, old->table_handle);
	put_table(bt, p, NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_EXCL, 0);
	for (size_t i = 0; i < p->n_sets; i++) {
		const struct nft_set_plan *sp = &p->sets[i];
		/* The heartbeat only from a process that takes traffic (node.c). */
		put_set(bt, p, sp, true, sp->role != NFT_SET_LIVE || beat->beating,
			beat->live_timeout_ms);
	}
	for (size_t i = 0; i < NFT_CHAINS; i++)
		put_chain(bt, p, &nft_chains[i]);
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct nft_rule_plan *rp = &p->rules[i];
		put_rule(bt, p, rp, in_chain[rp->chain]++);
	}
	put_kept(bt, p, beat, old);
	return batch_end(bt);
}

/* Re-adding an element does not renew its timeout; replacing it does. */
struct nft_batch *nft_batch_heartbeat(uint32_t *seq, const struct nft_plan *p,
				      const struct nft_beat *beat)
{
	struct nft_batch *bt = batch_begin(seq);

	if (!bt)
		return NULL;
	for (size_t i = 0; i < p->n_sets; i++) {
		const struct nft_set_plan *sp = &p->sets[i];
		if (sp->role != NFT_SET_LIVE)
			continue;
		flush_set(bt, p, sp);
		put_set(bt, p, sp, false, true, beat->live_timeout_ms);
	}
	renew_token(bt, p, beat);
	return batch_end(bt);
}

struct nft_batch *nft_batch_leave(uint32_t *seq, const struct nft_plan *p,
				  const struct nft_beat *beat, const struct nft_kept *tokens)
{
	struct nft_batch *bt = batch_begin(seq);
	struct nft_element el = token_element(p, beat->token);

	if (!bt)
		return NULL;
	if (tokens->own_seen)
		put_element(bt, p, NFT_MSG_DELSETELEM, &el, beat->live_timeout_ms);
	for (size_t i = 0; tokens->n == 0 && i < p->n_sets; i++)
		if (p->sets[i].role == NFT_SET_LIVE)
			flush_set(bt, p, &p->sets[i]);
	return batch_end(bt);
}

struct nft_batch *nft_batch_remove(uint32_t *seq, const struct nft_plan *p, uint64_t handle)
{
	struct nft_batch *bt = batch_begin(seq);

	if (!bt)
		return NULL;
	put_table(bt, p, NFT_MSG_DELTABLE, 0, handle);
	return batch_end(bt);
}
