/*
 * nft/conntrack.c — forgetting the UDP flows our fallback DNAT sent to an
 * endpoint that is no longer there (see nft.h, nft_forget_flows).
 *
 * While no localdns takes DNS, the fallback chains DNAT the link-local
 * addresses to the endpoints of the fallback maps, and conntrack remembers
 * each UDP flow (client address and port) with its translation for 30 s
 * unreplied, 120 s once answered. Stub resolvers pick a random source port
 * per query, so within that time a new query may reuse a remembered flow:
 * it then goes where the old one went, whatever the map says now. When that
 * endpoint is gone (a CoreDNS pod deleted), the query gets "port
 * unreachable" and glibc gives up. kube-proxy deletes the flows of a
 * Service's removed UDP endpoint for the same reason; this does it for the
 * link-local addresses, whose translation is ours.
 *
 * ctnetlink, through libmnl: one dump per link address and family, narrowed
 * by the kernel (CTA_FILTER, Linux 5.8; older kernels dump the family's
 * whole table and we narrow it here), then one delete per flow found. Only
 * when the endpoints change, on the node monitor thread.
 */
#include "nft/nft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Not in the UAPI headers; fixed by the kernel's ABI since 5.8. */
#define FILTER_IP_DST (1u << 1)
#define FILTER_PROTO_NUM (1u << 3)
#define FILTER_PROTO_DST_PORT (1u << 5)

#define MAX_FLOWS 65536 /* deleted per change at most: more wait for their timeout */

/* One flow's original direction, as a delete names it. */
struct flow {
	uint8_t src[16], dst[16];
	uint16_t sport, dport;  /* network order */
};

struct found {
	int family;
	const struct config_ip *addr;   /* the link address asked about */
	uint16_t port;                  /* network order */
	const struct config_ip *gone;
	size_t n_gone;
	struct flow *flows;
	size_t n;
};

static size_t addr_len(int family)
{
	return family == AF_INET6 ? 16 : 4;
}

static const void *ip_bytes(const struct config_ip *ip)
{
	return ip->family == AF_INET6 ? (const void *)&ip->v6 : (const void *)&ip->v4;
}

/* The nested attributes of a tuple: CTA_TUPLE_IP's addresses, CTA_TUPLE_PROTO's. */
struct tuple {
	const void *src, *dst;
	uint8_t proto;
	uint16_t sport, dport;
	bool has_proto;
};

static int tuple_ip(const struct nlattr *a, void *data)
{
	struct tuple *t = data;
	uint16_t type = mnl_attr_get_type(a);
	size_t len = mnl_attr_get_payload_len(a);

	if ((type == CTA_IP_V4_SRC || type == CTA_IP_V6_SRC) && (len == 4 || len == 16))
		t->src = mnl_attr_get_payload(a);
	if ((type == CTA_IP_V4_DST || type == CTA_IP_V6_DST) && (len == 4 || len == 16))
		t->dst = mnl_attr_get_payload(a);
	return MNL_CB_OK;
}

static int tuple_proto(const struct nlattr *a, void *data)
{
	struct tuple *t = data;

	switch (mnl_attr_get_type(a)) {
	case CTA_PROTO_NUM:
		t->proto = mnl_attr_get_u8(a);
		t->has_proto = true;
		break;
	case CTA_PROTO_SRC_PORT:
		t->sport = mnl_attr_get_u16(a);
		break;
	case CTA_PROTO_DST_PORT:
		t->dport = mnl_attr_get_u16(a);
		break;
	}
	return MNL_CB_OK;
}

static int tuple_part(const struct nlattr *a, void *data)
{
	if (mnl_attr_get_type(a) == CTA_TUPLE_IP)
		mnl_attr_parse_nested(a, tuple_ip, data);
	if (mnl_attr_get_type(a) == CTA_TUPLE_PROTO)
		mnl_attr_parse_nested(a, tuple_proto, data);
	return MNL_CB_OK;
}

struct entry {
	struct tuple orig, reply;
};

static int entry_attr(const struct nlattr *a, void *data)
{
	struct entry *e = data;

	if (mnl_attr_get_type(a) == CTA_TUPLE_ORIG)
		mnl_attr_parse_nested(a, tuple_part, &e->orig);
	if (mnl_attr_get_type(a) == CTA_TUPLE_REPLY)
		mnl_attr_parse_nested(a, tuple_part, &e->reply);
	return MNL_CB_OK;
}

/* A flow to our address and port, answered (reply source) by an endpoint that is gone. */
static int on_entry(const struct nlmsghdr *h, void *data)
{
	struct found *f = data;
	struct entry e = {0};
	size_t len = addr_len(f->family);

	mnl_attr_parse(h, sizeof(struct nfgenmsg), entry_attr, &e);
	if (!e.orig.src || !e.orig.dst || !e.reply.src || !e.orig.has_proto ||
	    e.orig.proto != IPPROTO_UDP || e.orig.dport != f->port ||
	    memcmp(e.orig.dst, ip_bytes(f->addr), len) != 0 || f->n == MAX_FLOWS)
		return MNL_CB_OK;
	for (size_t i = 0; i < f->n_gone; i++) {
		if (f->gone[i].family != f->family || memcmp(e.reply.src, ip_bytes(&f->gone[i]), len))
			continue;
		struct flow *fl = &f->flows[f->n++];
		memcpy(fl->src, e.orig.src, len);
		memcpy(fl->dst, e.orig.dst, len);
		fl->sport = e.orig.sport;
		fl->dport = e.orig.dport;
		break;
	}
	return MNL_CB_OK;
}

static struct nlmsghdr *ct_msg(char *buf, int type, uint16_t flags, int family, uint32_t seq)
{
	struct nlmsghdr *h = mnl_nlmsg_put_header(buf);
	struct nfgenmsg *g;

	h->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | type;
	h->nlmsg_flags = NLM_F_REQUEST | flags;
	h->nlmsg_seq = seq;
	g = mnl_nlmsg_put_extra_header(h, sizeof *g);
	g->nfgen_family = (uint8_t)family;
	g->version = NFNETLINK_V0;
	g->res_id = 0;
	return h;
}

/* CTA_TUPLE_ORIG: the addresses (src may be NULL), UDP, the ports (sport 0: none). */
static void put_tuple(struct nlmsghdr *h, int family, const void *src, const void *dst,
		      uint16_t sport, uint16_t dport)
{
	bool v6 = family == AF_INET6;
	struct nlattr *tuple = mnl_attr_nest_start(h, CTA_TUPLE_ORIG);
	struct nlattr *ip = mnl_attr_nest_start(h, CTA_TUPLE_IP);

	if (src)
		mnl_attr_put(h, v6 ? CTA_IP_V6_SRC : CTA_IP_V4_SRC, addr_len(family), src);
	mnl_attr_put(h, v6 ? CTA_IP_V6_DST : CTA_IP_V4_DST, addr_len(family), dst);
	mnl_attr_nest_end(h, ip);
	struct nlattr *proto = mnl_attr_nest_start(h, CTA_TUPLE_PROTO);
	mnl_attr_put_u8(h, CTA_PROTO_NUM, IPPROTO_UDP);
	if (src)
		mnl_attr_put_u16(h, CTA_PROTO_SRC_PORT, sport);
	mnl_attr_put_u16(h, CTA_PROTO_DST_PORT, dport);
	mnl_attr_nest_end(h, proto);
	mnl_attr_nest_end(h, tuple);
}

/* Read the replies to seq until done; -1 with errno on a failure the kernel reports. */
static int receive(struct mnl_socket *nl, uint32_t seq, mnl_cb_t cb, void *data)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	unsigned portid = mnl_socket_get_portid(nl);
	int rc;

	do {
		ssize_t r = mnl_socket_recvfrom(nl, buf, sizeof buf);
		if (r < 0)
			return -1;
		rc = mnl_cb_run(buf, (size_t)r, seq, portid, cb, data);
	} while (rc > 0);
	return rc;
}

/* Every UDP flow to f->addr's port, into f->flows when an endpoint that is gone answered it. */
static int dump(struct mnl_socket *nl, struct found *f, uint32_t *seq, bool filtered)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *h = ct_msg(buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP, f->family, ++*seq);

	if (filtered) {
		put_tuple(h, f->family, NULL, ip_bytes(f->addr), 0, f->port);
		struct nlattr *filter = mnl_attr_nest_start(h, CTA_FILTER);
		mnl_attr_put_u32(h, CTA_FILTER_ORIG_FLAGS,
				 FILTER_IP_DST | FILTER_PROTO_NUM | FILTER_PROTO_DST_PORT);
		mnl_attr_put_u32(h, CTA_FILTER_REPLY_FLAGS, 0);
		mnl_attr_nest_end(h, filter);
	}
	if (mnl_socket_sendto(nl, h, h->nlmsg_len) < 0)
		return -1;
	return receive(nl, *seq, on_entry, f);
}

static size_t delete_flows(struct mnl_socket *nl, const struct found *f, uint32_t *seq)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	size_t deleted = 0;

	for (size_t i = 0; i < f->n; i++) {
		const struct flow *fl = &f->flows[i];
		struct nlmsghdr *h = ct_msg(buf, IPCTNL_MSG_CT_DELETE, NLM_F_ACK, f->family, ++*seq);
		put_tuple(h, f->family, fl->src, fl->dst, fl->sport, fl->dport);
		/* ENOENT: it timed out or was answered away meanwhile; as good. */
		if (mnl_socket_sendto(nl, h, h->nlmsg_len) >= 0 &&
		    receive(nl, *seq, NULL, NULL) >= 0)
			deleted++;
	}
	return deleted;
}

int nft_forget_flows(const struct config *cfg, const struct config_ip *gone, size_t n_gone,
		     char *err, size_t errlen)
{
	struct mnl_socket *nl;
	struct flow *flows;
	uint32_t seq = (uint32_t)time(NULL);
	int total = 0;

	if (n_gone == 0 || cfg->listen.n_addresses == 0)
		return 0;
	if (!(flows = calloc(MAX_FLOWS, sizeof *flows))) {
		snprintf(err, errlen, "conntrack: out of memory");
		return -1;
	}
	if (!(nl = mnl_socket_open(NETLINK_NETFILTER)) ||
	    mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		snprintf(err, errlen, "conntrack: cannot open a netfilter netlink socket: %s",
			 strerror(errno));
		total = -1;
		goto out;
	}
	for (size_t i = 0; i < cfg->listen.n_addresses; i++) {
		const struct config_ip *a = &cfg->listen.addresses[i];
		struct found f = {.family = a->family, .addr = a, .port = htons(cfg->listen.port),
				  .gone = gone, .n_gone = n_gone, .flows = flows};
		/* EINVAL, EOPNOTSUPP: a kernel before CTA_FILTER; narrowed here instead. */
		if (dump(nl, &f, &seq, true) < 0 && (f.n = 0, dump(nl, &f, &seq, false) < 0)) {
			snprintf(err, errlen, "conntrack: cannot list the flows to %s: %s", a->text,
				 strerror(errno));
			total = -1;
			goto out;
		}
		total += (int)delete_flows(nl, &f, &seq);
	}
out:
	if (nl)
		mnl_socket_close(nl);
	free(flows);
	return total;
}
