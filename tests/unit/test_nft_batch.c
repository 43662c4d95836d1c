/*
 * Unit tests for the pure parts of src/nft/, without a kernel: the batches
 * batch.c builds from a plan (read back message by message with libnftnl),
 * the expressions rule.c gives a planned rule, what a rebuild keeps, which
 * message a refusal names, and owner.c's judgments: whose a table is,
 * whether it is as planned (fed the very messages batch.c builds, as the
 * kernel would list them), whose a change event was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
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

#include "config/config.h"
#include "nft/internal.h"

#define LIVE_MS 300
#define OUR_TOKEN 0x0a0b0c0du
#define OTHER_TOKEN 0x01020304u

/* A plan for a dual-stack node with a ClusterIP and one IPv4 endpoint. */
struct fixture {
	struct config *cfg;
	struct config_ip endpoint;
	struct nft_plan plan;
};

static int setup(void **state)
{
	static const char yaml[] = "listen: {addresses: [169.254.20.10, \"fd00::10\"], port: 5353}\n"
				   "nftables: {table: ldns, intercept: [10.96.0.10]}\n";
	static struct fixture f;
	char err[CONFIG_ERR_MAX] = "";
	const char *why;

	memset(&f, 0, sizeof f);
	if (config_load_string("t.yaml", yaml, sizeof yaml - 1, &f.cfg, err, sizeof err) != 0 ||
	    config_value_ip("10.244.0.5", &f.endpoint, &why) != 0 ||
	    nft_plan_build(&f.plan, f.cfg, &f.endpoint, 1) != 0) {
		print_error("fixture: %s\n", err);
		return -1;
	}
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	nft_plan_free(&f->plan);
	config_free(f->cfg);
	return 0;
}

/* ---- reading a batch back ----------------------------------------------------- */

#define MSGS_MAX 600

struct msgs {
	const struct nlmsghdr *m[MSGS_MAX];
	size_t n;
};

/*
 * The messages of a batch, checked as a frame: begin, then messages of the
 * nftables subsystem, each asking for an ack, in sequence, then end; the
 * socket's sequence number, seq_after, moved past them all.
 */
static void read_batch(const struct nft_batch *bt, uint32_t seq_after, struct msgs *out)
{
	size_t len = 0;
	const void *data = bt ? nft_batch_data(bt, &len) : NULL;

	assert_non_null(data);
	out->n = 0;
	int left = (int)len;
	for (const struct nlmsghdr *h = data; mnl_nlmsg_ok(h, left); h = mnl_nlmsg_next(h, &left)) {
		assert_true(out->n < MSGS_MAX);
		out->m[out->n++] = h;
	}
	assert_int_equal(left, 0);
	assert_true(out->n >= 3);
	assert_int_equal(out->m[0]->nlmsg_type, NFNL_MSG_BATCH_BEGIN);
	assert_int_equal(out->m[out->n - 1]->nlmsg_type, NFNL_MSG_BATCH_END);
	uint32_t first_seq = out->m[0]->nlmsg_seq;
	for (size_t i = 0; i < out->n; i++) {
		assert_int_equal(out->m[i]->nlmsg_seq, first_seq + i);
		if (i == 0 || i == out->n - 1)
			continue;
		assert_int_equal(NFNL_SUBSYS_ID(out->m[i]->nlmsg_type), NFNL_SUBSYS_NFTABLES);
		assert_true(out->m[i]->nlmsg_flags & NLM_F_ACK);
	}
	assert_int_equal(seq_after, first_seq + out->n);
}

static uint16_t type_of(const struct nlmsghdr *h)
{
	return NFNL_MSG_TYPE(h->nlmsg_type);
}

static size_t count_type(const struct msgs *ms, uint16_t type)
{
	size_t n = 0;

	for (size_t i = 1; i + 1 < ms->n; i++)
		n += type_of(ms->m[i]) == type;
	return n;
}

/*
 * One element message (NEWSETELEM, DELSETELEM) as the kernel reads it. Not
 * through libnftnl: it numbers the elements it writes 1, 2, ... and reads
 * back only NFTA_LIST_ELEM (1), so it fails on its own messages of two.
 */
#define ELEMS_KEPT 4

struct elems {
	char set[32];
	size_t n;                  /* all of them; the first ELEMS_KEPT below */
	uint8_t key[ELEMS_KEPT][36];
	uint32_t key_len[ELEMS_KEPT];
	uint64_t timeout[ELEMS_KEPT]; /* 0: none given */
	uint64_t expiration[ELEMS_KEPT];
};

static void read_elem(const struct nlattr *nest, struct elems *el)
{
	size_t i = el->n++;
	const struct nlattr *a;

	if (i >= ELEMS_KEPT)
		return;
	mnl_attr_for_each_nested(a, nest) {
		switch (mnl_attr_get_type(a)) {
		case NFTA_SET_ELEM_KEY: {
			const struct nlattr *value = mnl_attr_get_payload(a); /* NFTA_DATA_VALUE */
			el->key_len[i] = mnl_attr_get_payload_len(value);
			assert_true(el->key_len[i] <= sizeof el->key[i]);
			memcpy(el->key[i], mnl_attr_get_payload(value), el->key_len[i]);
			break;
		}
		case NFTA_SET_ELEM_TIMEOUT:
			el->timeout[i] = be64toh(mnl_attr_get_u64(a));
			break;
		case NFTA_SET_ELEM_EXPIRATION:
			el->expiration[i] = be64toh(mnl_attr_get_u64(a));
			break;
		}
	}
}

static struct elems read_elems(const struct nlmsghdr *h)
{
	struct elems el = {.n = 0};
	const struct nlattr *a, *e;

	mnl_attr_for_each(a, h, sizeof(struct nfgenmsg)) {
		if (mnl_attr_get_type(a) == NFTA_SET_ELEM_LIST_SET)
			snprintf(el.set, sizeof el.set, "%s", mnl_attr_get_str(a));
		else if (mnl_attr_get_type(a) == NFTA_SET_ELEM_LIST_ELEMENTS)
			mnl_attr_for_each_nested(e, a)
				read_elem(e, &el);
	}
	assert_true(el.set[0]);
	return el;
}

/* The element messages of the batch for set name: how many, the last into *out. */
static size_t find_elems(const struct msgs *ms, uint16_t type, const char *name,
			 struct elems *out)
{
	size_t n = 0;

	for (size_t i = 1; i + 1 < ms->n; i++) {
		if (type_of(ms->m[i]) != type)
			continue;
		struct elems el = read_elems(ms->m[i]);
		if (strcmp(el.set, name) == 0) {
			*out = el;
			n++;
		}
	}
	return n;
}

static void assert_token(const struct elems *el, size_t i, uint32_t token)
{
	assert_int_equal(el->key_len[i], 4);
	assert_memory_equal(el->key[i], &token, 4);
}

/* Every message of the batch through owner.c's reader, as a listing of the table. */
static void see_all(const struct msgs *ms, struct nft_seen *s)
{
	for (size_t i = 0; i < ms->n; i++)
		assert_int_equal(nft_seen_message(ms->m[i], s), MNL_CB_OK);
}

/* ---- batches -------------------------------------------------------------------- */

static void test_a_new_table_is_installed_whole_and_marked_ours(void **state)
{
	struct fixture *f = *state;
	const struct nft_plan *p = &f->plan;
	struct nft_beat beat = {.token = OUR_TOKEN, .live_timeout_ms = LIVE_MS, .beating = false};
	uint32_t seq = 1000;
	struct nft_batch *bt = nft_batch_install(&seq, p, &beat, NULL);
	struct msgs ms;
	struct elems el;

	read_batch(bt, seq, &ms);
	assert_int_equal(ms.m[0]->nlmsg_seq, 1000);
	/* No table of ours before: nothing deleted, the new one must not exist. */
	assert_int_equal(count_type(&ms, NFT_MSG_DELTABLE), 0);
	assert_int_equal(type_of(ms.m[1]), NFT_MSG_NEWTABLE);
	assert_true(ms.m[1]->nlmsg_flags & NLM_F_EXCL);
	assert_int_equal(count_type(&ms, NFT_MSG_NEWSET), p->n_sets);
	assert_int_equal(count_type(&ms, NFT_MSG_NEWCHAIN), NFT_CHAINS);
	assert_int_equal(count_type(&ms, NFT_MSG_NEWRULE), p->n_rules);
	/* The planned elements; no heartbeat and no token from a process not
	 * yet taking traffic. */
	assert_int_equal(find_elems(&ms, NFT_MSG_NEWSETELEM, "local4", &el), 1);
	assert_int_equal(el.n, 2);
	assert_int_equal(find_elems(&ms, NFT_MSG_NEWSETELEM, "link6", &el), 1);
	assert_int_equal(el.n, 1);
	assert_int_equal(find_elems(&ms, NFT_MSG_NEWSETELEM, "fallback4", &el), 1);
	assert_int_equal(el.n, 1);
	assert_int_equal(find_elems(&ms, NFT_MSG_NEWSETELEM, "fallback6", &el), 0);
	assert_int_equal(find_elems(&ms, NFT_MSG_NEWSETELEM, "live4", &el), 0);
	assert_int_equal(find_elems(&ms, NFT_MSG_NEWSETELEM, "instances", &el), 0);

	/* Listed back, the table is ours and as planned. */
	struct nft_seen s = {.plan = p};
	char err[512] = "";
	see_all(&ms, &s);
	assert_true(s.has_comment);
	assert_string_equal(s.comment, NFT_TABLE_COMMENT);
	assert_true(nft_seen_ours(&s, err, sizeof err));
	assert_int_equal(s.sets, p->n_sets);
	assert_int_equal(nft_seen_as_planned(&s, err, sizeof err), 1);
	nft_batch_free(bt);
}

/* An element of set as a dump lists it, through nft_kept_element into k. */
static void keep(struct nft_kept *k, const struct nft_set_plan *set, const void *key,
		 uint32_t len, uint64_t expires_ms)
{
	struct nftnl_set_elem *e = nftnl_set_elem_alloc();

	assert_non_null(e);
	nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, len);
	if (expires_ms)
		nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_EXPIRATION, expires_ms);
	k->set = set;
	assert_int_equal(nft_kept_element(e, k), 0);
	nftnl_set_elem_free(e);
}

static struct nft_kept *kept_from_the_kernel(const struct nft_plan *p)
{
	static struct nft_kept k;
	const struct nft_set_plan *instances = nft_plan_set(p, NFT_SET_INSTANCES, 0);
	const struct nft_set_plan *flows4 = nft_plan_set(p, NFT_SET_FLOWS, AF_INET);
	uint32_t own = OUR_TOKEN, other = OTHER_TOKEN, unexpiring = 0x55555555u;
	uint8_t flow[12] = {10, 244, 0, 9, 0, 0, 0x9c, 0x40, 169, 254, 20, 10};
	uint8_t too_long[40] = {0};

	memset(&k, 0, sizeof k);
	k.own_token = OUR_TOKEN;
	keep(&k, instances, &own, 4, 250);        /* ours: noted, not kept */
	keep(&k, instances, &other, 4, 200);      /* another process's, 200 ms left */
	keep(&k, instances, &unexpiring, 4, 0);   /* no time left to keep */
	keep(&k, flows4, flow, sizeof flow, 4000); /* an open connection */
	keep(&k, flows4, too_long, sizeof too_long, 4000);
	assert_true(k.own_seen);
	assert_int_equal(k.n, 2);
	k.table_handle = 42;
	return &k;
}

static void test_a_rebuild_keeps_what_runs_and_deletes_ours_by_handle(void **state)
{
	struct fixture *f = *state;
	const struct nft_plan *p = &f->plan;
	struct nft_beat beat = {.token = OUR_TOKEN, .live_timeout_ms = LIVE_MS, .beating = true};
	struct nft_kept *k = kept_from_the_kernel(p);
	uint32_t seq = 7;
	struct nft_batch *bt = nft_batch_install(&seq, p, &beat, k);
	struct msgs ms;
	struct elems el;

	read_batch(bt, seq, &ms);
	/* First the old table, by the handle found to be ours. */
	assert_int_equal(type_of(ms.m[1]), NFT_MSG_DELTABLE);
	struct nftnl_table *t = nftnl_table_alloc();
	assert_int_equal(nftnl_table_nlmsg_parse(ms.m[1], t), 0);
	assert_int_equal(nftnl_table_get_u64(t, NFTNL_TABLE_HANDLE), 42);
	assert_string_equal(nftnl_table_get_str(t, NFTNL_TABLE_NAME), "ldns");
	nftnl_table_free(t);
	assert_int_equal(type_of(ms.m[2]), NFT_MSG_NEWTABLE);
	/* We beat: the heartbeat with its full timeout, both served IPv4 addresses. */
	assert_int_equal(find_elems(&ms, NFT_MSG_NEWSETELEM, "live4", &el), 1);
	assert_int_equal(el.n, 2);
	assert_int_equal(el.timeout[0], LIVE_MS);
	/* The flow with what it had left, under its set's own timeout. */
	assert_int_equal(find_elems(&ms, NFT_MSG_NEWSETELEM, "flows4", &el), 1);
	assert_int_equal(el.n, 1);
	assert_int_equal(el.key_len[0], 12);
	assert_int_equal(el.timeout[0], 0);
	assert_int_equal(el.expiration[0], 4000);
	/* The other process's token with its 200 ms left, then ours, whole. */
	assert_int_equal(find_elems(&ms, NFT_MSG_NEWSETELEM, "instances", &el), 2);
	assert_token(&el, 0, OUR_TOKEN);
	assert_int_equal(el.timeout[0], LIVE_MS);
	assert_int_equal(el.expiration[0], 0);
	bool other_seen = false;
	for (size_t i = 1; i + 1 < ms.n; i++) {
		if (type_of(ms.m[i]) != NFT_MSG_NEWSETELEM)
			continue;
		struct elems o = read_elems(ms.m[i]);
		if (strcmp(o.set, "instances") != 0 || memcmp(o.key[0], &(uint32_t){OTHER_TOKEN}, 4))
			continue;
		other_seen = true;
		assert_int_equal(o.expiration[0], 200);
	}
	assert_true(other_seen);
	nft_batch_free(bt);
}

static void test_a_heartbeat_replaces_the_live_elements_and_renews_the_token(void **state)
{
	struct fixture *f = *state;
	struct nft_beat beat = {.token = OUR_TOKEN, .live_timeout_ms = 1000, .beating = true};
	uint32_t seq = 1;
	struct nft_batch *bt = nft_batch_heartbeat(&seq, &f->plan, &beat);
	struct msgs ms;

	read_batch(bt, seq, &ms);
	/* Re-adding an element does not renew it: flush and add, per family
	 * (live6 has an address too); then the token added, deleted, added. */
	static const struct {
		uint16_t type;
		const char *set;
		size_t n;
	} want[] = {
		{NFT_MSG_DELSETELEM, "live4", 0}, {NFT_MSG_NEWSETELEM, "live4", 2},
		{NFT_MSG_DELSETELEM, "live6", 0}, {NFT_MSG_NEWSETELEM, "live6", 1},
		{NFT_MSG_NEWSETELEM, "instances", 1}, {NFT_MSG_DELSETELEM, "instances", 1},
		{NFT_MSG_NEWSETELEM, "instances", 1},
	};
	assert_int_equal(ms.n, 2 + sizeof want / sizeof want[0]);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		struct elems el = read_elems(ms.m[1 + i]);
		assert_int_equal(type_of(ms.m[1 + i]), want[i].type);
		assert_string_equal(el.set, want[i].set);
		assert_int_equal(el.n, want[i].n);
		for (size_t j = 0; j < el.n; j++)
			assert_int_equal(el.timeout[j], 1000);
		if (strcmp(want[i].set, "instances") == 0)
			assert_token(&el, 0, OUR_TOKEN);
	}
	nft_batch_free(bt);
}

static void test_leaving_takes_the_heartbeat_only_when_no_one_else_beats(void **state)
{
	struct fixture *f = *state;
	struct nft_beat beat = {.token = OTHER_TOKEN, .live_timeout_ms = LIVE_MS};
	struct nft_kept alone = {.own_token = OTHER_TOKEN, .own_seen = true, .n = 0};
	struct nft_kept beside = {.own_token = OTHER_TOKEN, .own_seen = true, .n = 1};
	uint32_t seq = 1;
	struct msgs ms;
	struct elems el;

	/* Alone: its token (for whoever's token it is) and the live elements. */
	struct nft_batch *bt = nft_batch_leave(&seq, &f->plan, &beat, &alone);
	read_batch(bt, seq, &ms);
	assert_int_equal(ms.n, 2 + 3);
	assert_int_equal(find_elems(&ms, NFT_MSG_DELSETELEM, "instances", &el), 1);
	assert_token(&el, 0, OTHER_TOKEN);
	assert_int_equal(find_elems(&ms, NFT_MSG_DELSETELEM, "live4", &el), 1);
	assert_int_equal(el.n, 0); /* the whole set */
	assert_int_equal(find_elems(&ms, NFT_MSG_DELSETELEM, "live6", &el), 1);
	nft_batch_free(bt);

	/* Another localdns beats beside it: the heartbeat stays. */
	bt = nft_batch_leave(&seq, &f->plan, &beat, &beside);
	read_batch(bt, seq, &ms);
	assert_int_equal(ms.n, 2 + 1);
	assert_int_equal(find_elems(&ms, NFT_MSG_DELSETELEM, "instances", &el), 1);
	nft_batch_free(bt);
}

static void test_removal_deletes_our_table_by_its_handle(void **state)
{
	struct fixture *f = *state;
	uint32_t seq = 1;
	struct nft_batch *bt = nft_batch_remove(&seq, &f->plan, 99);
	struct msgs ms;

	read_batch(bt, seq, &ms);
	assert_int_equal(ms.n, 3);
	assert_int_equal(type_of(ms.m[1]), NFT_MSG_DELTABLE);
	struct nftnl_table *t = nftnl_table_alloc();
	assert_int_equal(nftnl_table_nlmsg_parse(ms.m[1], t), 0);
	assert_int_equal(nftnl_table_get_u64(t, NFTNL_TABLE_HANDLE), 99);
	nftnl_table_free(t);
	nft_batch_free(bt);
}

/* An ack (error 0) or a refusal of the message with this sequence number. */
static size_t put_answer(char *at, uint32_t seq, int error)
{
	struct nlmsghdr *h = mnl_nlmsg_put_header(at);
	struct nlmsgerr *e = mnl_nlmsg_put_extra_header(h, sizeof *e);

	h->nlmsg_type = NLMSG_ERROR;
	e->error = error;
	e->msg.nlmsg_seq = seq;
	return NLMSG_ALIGN(h->nlmsg_len);
}

static void test_a_refusal_names_the_message_the_kernel_refused(void **state)
{
	struct fixture *f = *state;
	struct nft_beat beat = {.token = OUR_TOKEN, .live_timeout_ms = LIVE_MS};
	uint32_t seq = 500;
	struct nft_batch *bt = nft_batch_install(&seq, &f->plan, &beat, NULL);
	struct msgs ms;
	uint32_t rule2 = 0;
	size_t rules = 0;

	read_batch(bt, seq, &ms);
	for (size_t i = 1; i + 1 < ms.n && !rule2; i++)
		if (type_of(ms.m[i]) == NFT_MSG_NEWRULE && ++rules == 2)
			rule2 = ms.m[i]->nlmsg_seq;
	assert_int_not_equal(rule2, 0);

	char buf[256] = {0}, err[256] = "";
	size_t len = put_answer(buf, rule2 - 1, 0);
	assert_int_equal(nft_batch_refusal(bt, buf, len, err, sizeof err), 0);
	len += put_answer(buf + len, rule2, -EOPNOTSUPP);
	assert_int_equal(nft_batch_refusal(bt, buf, len, err, sizeof err), EOPNOTSUPP);
	assert_string_equal(err, "nftables refused rule 2 of chain prerouting: "
				 "Operation not supported");
	/* A sequence number outside the batch: the batch as a whole. */
	put_answer(buf, seq + 100, -ENOBUFS);
	assert_int_equal(nft_batch_refusal(bt, buf, len, err, sizeof err), ENOBUFS);
	assert_non_null(strstr(err, "nftables refused the batch: "));
	nft_batch_free(bt);
}

/* ---- rules ------------------------------------------------------------------------ */

static int append_name(struct nftnl_expr *e, void *data)
{
	char *names = data;

	strcat(names, names[0] ? " " : "");
	strcat(names, nftnl_expr_get_str(e, NFTNL_EXPR_NAME));
	return 0;
}

/* The expressions of the first planned rule that fits, by name. */
static void rule_exprs(const struct nft_plan *p, enum nft_chain_id chain, uint8_t l4proto,
		       enum nft_tcp_syn syn, enum nft_action action, char *names)
{
	names[0] = 0;
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct nft_rule_plan *rp = &p->rules[i];
		if (rp->chain != chain || rp->l4proto != l4proto || rp->syn != syn ||
		    rp->action != action || rp->match != NFT_MATCH_DADDR)
			continue;
		struct nftnl_rule *r = nft_rule_object(p, rp);
		assert_non_null(r);
		nftnl_expr_foreach(r, append_name, names);
		nftnl_rule_free(r);
		return;
	}
	fail_msg("no such rule planned");
}

static void test_each_kind_of_rule_becomes_its_expressions(void **state)
{
	struct fixture *f = *state;
	char names[512];
	/* family, protocol, address in the set, port */
	const char *match = "meta cmp meta cmp payload lookup payload cmp";
	char want[512];

	/* A datagram to us, from a pod: a socket bound to the address. */
	rule_exprs(&f->plan, NFT_CHAIN_PREROUTING, IPPROTO_UDP, NFT_SYN_ANY, NFT_NOTRACK, names);
	snprintf(want, sizeof want, "%s socket cmp notrack", match);
	assert_string_equal(names, want);
	/* A SYN: the SYN bit, the socket, then the connection into the flows. */
	rule_exprs(&f->plan, NFT_CHAIN_PREROUTING, IPPROTO_TCP, NFT_SYN_SET, NFT_NOTRACK, names);
	snprintf(want, sizeof want,
		 "%s payload bitwise cmp socket cmp payload payload payload dynset notrack", match);
	assert_string_equal(names, want);
	/* Past the SYN: only a remembered connection, refreshed. */
	rule_exprs(&f->plan, NFT_CHAIN_PREROUTING, IPPROTO_TCP, NFT_SYN_CLEAR, NFT_NOTRACK, names);
	snprintf(want, sizeof want,
		 "%s payload bitwise cmp payload payload payload lookup payload payload payload "
		 "dynset notrack", match);
	assert_string_equal(names, want);
	/* The host's own datagram: no socket test in the output hook. */
	rule_exprs(&f->plan, NFT_CHAIN_OUTPUT, IPPROTO_UDP, NFT_SYN_ANY, NFT_NOTRACK, names);
	snprintf(want, sizeof want, "%s notrack", match);
	assert_string_equal(names, want);
	/* The fallback: a random endpoint from the map. */
	rule_exprs(&f->plan, NFT_CHAIN_FALLBACK_PREROUTING, IPPROTO_UDP, NFT_SYN_ANY, NFT_DNAT,
		   names);
	snprintf(want, sizeof want, "%s numgen lookup nat", match);
	assert_string_equal(names, want);
}

/* ---- whose table ------------------------------------------------------------------ */

/* Listings of tables that are not all ours, message by message. */
static char listing[4096];
static size_t listed;

static struct nlmsghdr *next_msg(uint16_t type)
{
	return nftnl_nlmsg_build_hdr(listing + listed, type, NFPROTO_INET, 0, 0);
}

static void done_msg(struct nlmsghdr *h)
{
	listed += NLMSG_ALIGN(h->nlmsg_len);
	assert_true(listed < sizeof listing - 512);
}

/* A comment as nft keeps it in userdata (attribute type): bytes (static) and *len. */
static const void *comment_udata(uint8_t type, const char *comment, uint32_t *len)
{
	static char bytes[128];
	struct nftnl_udata_buf *u = nftnl_udata_buf_alloc(sizeof bytes);

	assert_true(u && nftnl_udata_put_strz(u, type, comment));
	*len = nftnl_udata_buf_len(u);
	memcpy(bytes, nftnl_udata_buf_data(u), *len);
	nftnl_udata_buf_free(u);
	return bytes;
}

static void list_table(const char *name, const char *comment)
{
	struct nftnl_table *t = nftnl_table_alloc();
	struct nlmsghdr *h = next_msg(NFT_MSG_NEWTABLE);

	nftnl_table_set_str(t, NFTNL_TABLE_NAME, name);
	nftnl_table_set_u64(t, NFTNL_TABLE_HANDLE, 7);
	if (comment) {
		uint32_t len;
		const void *u = comment_udata(NFTNL_UDATA_TABLE_COMMENT, comment, &len);
		nftnl_table_set_data(t, NFTNL_TABLE_USERDATA, u, len);
	}
	nftnl_table_nlmsg_build_payload(h, t);
	done_msg(h);
	nftnl_table_free(t);
}

static void list_chain(const char *table, const char *name)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	struct nlmsghdr *h = next_msg(NFT_MSG_NEWCHAIN);

	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	nftnl_chain_nlmsg_build_payload(h, c);
	done_msg(h);
	nftnl_chain_free(c);
}

static void list_rule(const char *table, const char *chain, const char *comment)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	struct nlmsghdr *h = next_msg(NFT_MSG_NEWRULE);

	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
	if (comment) {
		uint32_t len;
		const void *u = comment_udata(NFTNL_UDATA_RULE_COMMENT, comment, &len);
		nftnl_rule_set_data(r, NFTNL_RULE_USERDATA, u, len);
	}
	nftnl_rule_nlmsg_build_payload(h, r);
	done_msg(h);
	nftnl_rule_free(r);
}

/* The listing so far, judged (and started again): ours, or not with err saying why. */
static bool judge_listing(const struct nft_plan *p, char *err, size_t errlen)
{
	struct nft_seen s = {.plan = p};
	int left = (int)listed;

	for (const struct nlmsghdr *h = (const void *)listing; mnl_nlmsg_ok(h, left);
	     h = mnl_nlmsg_next(h, &left))
		assert_int_equal(nft_seen_message(h, &s), MNL_CB_OK);
	listed = 0;
	err[0] = 0;
	return nft_seen_ours(&s, err, errlen);
}

static void test_whose_table_by_its_comment_or_its_content(void **state)
{
	struct fixture *f = *state;
	const struct nft_plan *p = &f->plan;
	char err[512];

	/* Someone else's comment: never ours, whatever it holds. */
	list_table("ldns", "made by hand");
	assert_false(judge_listing(p, err, sizeof err));
	assert_non_null(strstr(err, "nftables.table: table inet ldns exists and was not made by "
				    "localdns (its comment is \"made by hand\")"));
	assert_non_null(strstr(err, "set nftables.table to a name no other program uses"));

	/* No comment (an older localdns, a kernel before 5.13): ours when all
	 * in it is, whatever the fingerprint. */
	list_table("ldns", NULL);
	list_chain("ldns", "prerouting");
	list_rule("ldns", "prerouting", "localdns 0123abcd");
	list_chain("filter", "input"); /* another table: chain dumps list every table's */
	list_rule("filter", "input", "ssh");
	assert_true(judge_listing(p, err, sizeof err));

	/* ...and someone's firewall when anything in it is not. */
	list_table("ldns", NULL);
	list_chain("ldns", "input");
	list_rule("ldns", "input", "ssh");
	assert_false(judge_listing(p, err, sizeof err));
	assert_non_null(strstr(err, "(it has a chain input)"));

	list_table("ldns", NULL);
	list_chain("ldns", "prerouting");
	list_rule("ldns", "prerouting", "localdns 0123abcd");
	list_rule("ldns", "prerouting", NULL);
	assert_false(judge_listing(p, err, sizeof err));
	assert_non_null(strstr(err, "(a rule in its chain prerouting is not ours)"));

	list_table("ldns", NULL);
	list_chain("ldns", "prerouting");
	assert_false(judge_listing(p, err, sizeof err));
	assert_non_null(strstr(err, "(it has no rule of ours)"));
}

static void test_drift_from_the_plan_is_named(void **state)
{
	struct fixture *f = *state;
	const struct nft_plan *p = &f->plan;
	struct nft_beat beat = {.token = OUR_TOKEN, .live_timeout_ms = LIVE_MS};
	uint32_t seq = 1;
	struct nft_batch *bt = nft_batch_install(&seq, p, &beat, NULL);
	struct msgs ms;
	char err[256];

	read_batch(bt, seq, &ms);
	/* A rule of an older plan among ours. */
	struct nft_seen s = {.plan = p};
	see_all(&ms, &s);
	list_rule("ldns", "output", "localdns 0123abcd");
	assert_int_equal(nft_seen_message((const void *)listing, &s), MNL_CB_OK);
	listed = 0;
	assert_int_equal(nft_seen_as_planned(&s, err, sizeof err), 0);
	assert_string_equal(err, "a rule in chain output is not ours");
	/* Still ours: only its rules drifted. */
	assert_true(nft_seen_ours(&s, err, sizeof err));

	/* A rule gone, then a chain gone. */
	struct nft_seen fewer = {.plan = p};
	size_t last_rule = 0, a_chain = 0;
	for (size_t i = 0; i < ms.n; i++) {
		if (type_of(ms.m[i]) == NFT_MSG_NEWRULE)
			last_rule = i;
		if (type_of(ms.m[i]) == NFT_MSG_NEWCHAIN)
			a_chain = i;
	}
	for (size_t i = 0; i < ms.n; i++)
		if (i != last_rule)
			assert_int_equal(nft_seen_message(ms.m[i], &fewer), MNL_CB_OK);
	assert_int_equal(nft_seen_as_planned(&fewer, err, sizeof err), 0);
	const struct nft_rule_plan *gone = &p->rules[p->n_rules - 1];
	char want[256];
	snprintf(want, sizeof want, "chain %s has %zu rules instead of %zu",
		 nft_chains[gone->chain].name, p->rules_per_chain[gone->chain] - 1,
		 p->rules_per_chain[gone->chain]);
	assert_string_equal(err, want);
	struct nft_seen no_chain = {.plan = p};
	for (size_t i = 0; i < ms.n; i++)
		if (i != a_chain)
			assert_int_equal(nft_seen_message(ms.m[i], &no_chain), MNL_CB_OK);
	assert_int_equal(nft_seen_as_planned(&no_chain, err, sizeof err), 0);
	assert_string_equal(err, "3 chains instead of 4");
	nft_batch_free(bt);
}

static void test_a_change_is_foreign_when_another_socket_made_it_to_our_table(void **state)
{
	(void)state;
	list_rule("ldns", "prerouting", NULL);
	struct nlmsghdr *h = (void *)listing;

	h->nlmsg_pid = 4242;
	assert_false(nft_foreign_change(h, 4242, "ldns")); /* our own batch's echo */
	assert_true(nft_foreign_change(h, 1, "ldns"));
	assert_false(nft_foreign_change(h, 1, "localdns")); /* another table */
	struct nfgenmsg *g = mnl_nlmsg_get_payload(h);
	g->nfgen_family = NFPROTO_IPV4;
	assert_false(nft_foreign_change(h, 1, "ldns")); /* only family inet is ours */
	listed = 0;

	/* A new generation names no table: its attribute 1 is the generation's
	 * id, whose bytes may well read as a short name ("dns"). */
	struct nlmsghdr *gen = nftnl_nlmsg_build_hdr(listing, NFT_MSG_NEWGEN, NFPROTO_INET, 0, 0);
	mnl_attr_put(gen, NFTA_GEN_ID, 4, "dns");
	gen->nlmsg_pid = 1;
	assert_false(nft_foreign_change(gen, 4242, "dns"));
	/* The same bytes in a rule's table attribute would be a change to "dns". */
	gen->nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE;
	assert_true(nft_foreign_change(gen, 4242, "dns"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_new_table_is_installed_whole_and_marked_ours),
		cmocka_unit_test(test_a_rebuild_keeps_what_runs_and_deletes_ours_by_handle),
		cmocka_unit_test(test_a_heartbeat_replaces_the_live_elements_and_renews_the_token),
		cmocka_unit_test(test_leaving_takes_the_heartbeat_only_when_no_one_else_beats),
		cmocka_unit_test(test_removal_deletes_our_table_by_its_handle),
		cmocka_unit_test(test_a_refusal_names_the_message_the_kernel_refused),
		cmocka_unit_test(test_each_kind_of_rule_becomes_its_expressions),
		cmocka_unit_test(test_whose_table_by_its_comment_or_its_content),
		cmocka_unit_test(test_drift_from_the_plan_is_named),
		cmocka_unit_test(test_a_change_is_foreign_when_another_socket_made_it_to_our_table),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
