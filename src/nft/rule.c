/*
 * nft/rule.c — a planned rule (plan.h, struct nft_rule_plan) as the
 * nftables expressions the kernel runs, in a libnftnl rule.
 *
 * Owns: the translation of each part of a rule into expressions and
 * registers: family and protocol (meta), the address looked up in a set
 * and the port (payload, lookup, cmp), the SYN bit (bitwise), a socket
 * bound to that very address (socket wildcard 0), the flow key and its
 * update (dynset), the DNAT through the endpoint map (numgen, lookup,
 * nat), notrack, and the comment "localdns <fingerprint>" on every rule.
 *
 * Pure: builds objects, sends nothing (batch.c puts them in a batch), so a
 * rule can be built and read back without a kernel.
 *
 * Must never: decide what a rule does; that is the plan's (plan.c).
 */
#include "nft/internal.h"

#include <arpa/inet.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/udata.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <netinet/in.h>

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

struct nftnl_rule *nft_rule_object(const struct nft_plan *p, const struct nft_rule_plan *rp)
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
