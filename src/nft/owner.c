/*
 * nft/owner.c — what the kernel shows of our table, judged: whose the
 * table is, whether its chains and rules are the plan's, and whose a
 * change event was.
 *
 * A table named like ours is ours when it carries our comment, and also,
 * without any comment, when everything in it looks like ours: a table made
 * by a localdns from before tables were marked, or on a kernel older than
 * 5.13, which keeps no table comment. Either way it survives us (kill -9,
 * an upgrade) and the next localdns adopts it: that is what makes a crash
 * fail open. Anything else is someone's firewall.
 *
 * One reader (nft_seen_message) takes every answer about the table, its
 * sets, chains and rules into a struct nft_seen, whichever question it
 * answers: whose the table is (nft_seen_ours) and whether it drifted from
 * the plan (nft_seen_as_planned) count the same chains and rules, a rule
 * being either the plan's (the current fingerprint in its comment), an
 * older localdns's (another fingerprint) or someone else's (no localdns
 * comment).
 *
 * Pure: reads netlink messages, asks nothing (walk.c does); it reads a
 * batch's messages as well as a dump's, so tests/unit/test_nft_batch.c
 * judges the table batch.c builds.
 *
 * Must never: call a table ours that carries someone else's comment, or,
 * without a comment, holds a chain or a rule that is not ours.
 */
#include "nft/internal.h"

#include <libnftnl/chain.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <stdio.h>
#include <string.h>

/* The prefix of our rules' comments, "localdns <fingerprint>" (plan.c). */
#define RULE_COMMENT_PREFIX "localdns "

/*
 * The table an nftables message of family inet is about (attribute 1 is
 * the table's name in table, chain, rule, set and element messages), or
 * NULL for any other message.
 */
static const char *table_of(const struct nlmsghdr *h)
{
	if (NFNL_SUBSYS_ID(h->nlmsg_type) != NFNL_SUBSYS_NFTABLES ||
	    NFNL_MSG_TYPE(h->nlmsg_type) == NFT_MSG_NEWGEN)
		return NULL;
	const struct nfgenmsg *g = mnl_nlmsg_get_payload(h);
	if (g->nfgen_family != NFPROTO_INET)
		return NULL;
	const struct nlattr *a;
	mnl_attr_for_each(a, h, sizeof *g) {
		if (mnl_attr_get_type(a) == 1)
			return mnl_attr_validate(a, MNL_TYPE_NUL_STRING) == 0 ? mnl_attr_get_str(a)
									       : NULL;
	}
	return NULL;
}

bool nft_foreign_change(const struct nlmsghdr *h, uint32_t portid, const char *table)
{
	const char *name;

	return h->nlmsg_pid != portid && (name = table_of(h)) && strcmp(name, table) == 0;
}

static int chain_index(const char *name)
{
	for (int i = 0; i < NFT_CHAINS; i++)
		if (name && strcmp(nft_chains[i].name, name) == 0)
			return i;
	return -1;
}

static int table_comment_cb(const struct nftnl_udata *attr, void *data)
{
	struct nft_seen *s = data;

	if (nftnl_udata_type(attr) == NFTNL_UDATA_TABLE_COMMENT) {
		s->has_comment = true;
		snprintf(s->comment, sizeof s->comment, "%.*s", (int)nftnl_udata_len(attr),
			 (const char *)nftnl_udata_get(attr));
	}
	return MNL_CB_OK;
}

static int see_table(struct nft_seen *s, const struct nlmsghdr *h)
{
	struct nftnl_table *t = nftnl_table_alloc();
	uint32_t len = 0;

	if (!t || nftnl_table_nlmsg_parse(h, t) < 0) {
		nftnl_table_free(t);
		return MNL_CB_ERROR;
	}
	s->handle = nftnl_table_get_u64(t, NFTNL_TABLE_HANDLE);
	const void *udata = nftnl_table_get_data(t, NFTNL_TABLE_USERDATA, &len);
	if (udata)
		nftnl_udata_parse(udata, len, table_comment_cb, s);
	nftnl_table_free(t);
	return MNL_CB_OK;
}

static int see_chain(struct nft_seen *s, const struct nlmsghdr *h)
{
	struct nftnl_chain *c = nftnl_chain_alloc();

	if (!c || nftnl_chain_nlmsg_parse(h, c) < 0) {
		nftnl_chain_free(c);
		return MNL_CB_ERROR;
	}
	const char *name = nftnl_chain_get_str(c, NFTNL_CHAIN_NAME);

	s->chains++;
	if (chain_index(name) < 0 && s->unplanned_chains++ == 0)
		snprintf(s->unplanned_chain, sizeof s->unplanned_chain, "%s", name ? name : "");
	nftnl_chain_free(c);
	return MNL_CB_OK;
}

static int rule_comment_cb(const struct nftnl_udata *attr, void *data)
{
	const char **comment = data;

	if (nftnl_udata_type(attr) == NFTNL_UDATA_RULE_COMMENT)
		*comment = nftnl_udata_get(attr);
	return MNL_CB_OK;
}

/* The rule's comment (its own: gone with it), or NULL. */
static const char *rule_comment(const struct nftnl_rule *r)
{
	const char *comment = NULL;
	uint32_t len = 0;
	const void *udata = nftnl_rule_get_data(r, NFTNL_RULE_USERDATA, &len);

	if (udata)
		nftnl_udata_parse(udata, len, rule_comment_cb, &comment);
	return comment;
}

static int see_rule(struct nft_seen *s, const struct nlmsghdr *h)
{
	struct nftnl_rule *r = nftnl_rule_alloc();

	if (!r || nftnl_rule_nlmsg_parse(h, r) < 0) {
		nftnl_rule_free(r);
		return MNL_CB_ERROR;
	}
	const char *comment = rule_comment(r);
	const char *chain_name = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
	int chain = chain_index(chain_name);

	if (!chain_name)
		chain_name = "";
	if (!comment || strncmp(comment, RULE_COMMENT_PREFIX, strlen(RULE_COMMENT_PREFIX)) != 0) {
		if (s->foreign_rules++ == 0)
			snprintf(s->foreign_rule_chain, sizeof s->foreign_rule_chain, "%s",
				 chain_name);
	} else {
		s->localdns_rules++;
	}
	if (chain >= 0 && comment && strcmp(comment, s->plan->comment) == 0)
		s->current[chain]++;
	else if (s->stale_rules++ == 0)
		snprintf(s->stale_rule_chain, sizeof s->stale_rule_chain, "%s", chain_name);
	nftnl_rule_free(r);
	return MNL_CB_OK;
}

int nft_seen_message(const struct nlmsghdr *h, void *data)
{
	struct nft_seen *s = data;
	const char *table = table_of(h);

	/* Chain dumps are not filtered by table in the kernel. */
	if (!table || strcmp(table, s->plan->table) != 0)
		return MNL_CB_OK;
	switch (NFNL_MSG_TYPE(h->nlmsg_type)) {
	case NFT_MSG_NEWTABLE:
		return see_table(s, h);
	case NFT_MSG_NEWSET:
		s->sets++;
		return MNL_CB_OK;
	case NFT_MSG_NEWCHAIN:
		return see_chain(s, h);
	case NFT_MSG_NEWRULE:
		return see_rule(s, h);
	default:
		return MNL_CB_OK;
	}
}

bool nft_seen_ours(const struct nft_seen *s, char *err, size_t errlen)
{
	char why[2 * NFT_WHAT_MAX];

	if (s->has_comment && strcmp(s->comment, NFT_TABLE_COMMENT) == 0)
		return true;
	if (s->has_comment)
		snprintf(why, sizeof why, "its comment is \"%.48s\"", s->comment);
	else if (s->unplanned_chains)
		snprintf(why, sizeof why, "it has a chain %s", s->unplanned_chain);
	else if (s->foreign_rules)
		snprintf(why, sizeof why, "a rule in its chain %s is not ours",
			 s->foreign_rule_chain);
	else if (!s->localdns_rules)
		snprintf(why, sizeof why, "it has no rule of ours");
	else
		return true;
	snprintf(err, errlen, "nftables.table: table inet %s exists and was not made by localdns "
		 "(%s); localdns never replaces a table it did not make: set nftables.table to a "
		 "name no other program uses, or delete that table if it is a leftover",
		 s->plan->table, why);
	return false;
}

int nft_seen_as_planned(const struct nft_seen *s, char *err, size_t errlen)
{
	if (s->chains != NFT_CHAINS) {
		snprintf(err, errlen, "%zu chains instead of %d", s->chains, NFT_CHAINS);
		return 0;
	}
	if (s->stale_rules) {
		snprintf(err, errlen, "a rule in chain %s is not ours", s->stale_rule_chain);
		return 0;
	}
	for (int i = 0; i < NFT_CHAINS; i++)
		if (s->current[i] != s->plan->rules_per_chain[i]) {
			snprintf(err, errlen, "chain %s has %zu rules instead of %zu",
				 nft_chains[i].name, s->current[i], s->plan->rules_per_chain[i]);
			return 0;
		}
	return 1;
}
