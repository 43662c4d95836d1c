/*
 * nft/walk.c — the netfilter netlink socket our table is changed and read
 * through (libmnl): one request about the table and the walk over every
 * object of its answer, whatever was asked (the table itself, its sets,
 * chains, rules, or one set's elements); and a batch sent, with every ack
 * read.
 *
 * The kernel queues its answers to a batch on our socket before sendto
 * returns, so they are read without waiting; answers to an earlier
 * request that failed half-read are dropped before each request, so they
 * never count as this one's.
 *
 * Must never: send a request that does not name our table, build a
 * batch (batch.c does), or judge an answer (owner.c and nft.c do). Calls
 * on one struct nft_link are serialised by the caller (nft.c's mutex).
 */
#include "nft/internal.h"

#include <errno.h>
#include <libnftnl/common.h>
#include <libnftnl/set.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

struct mnl_socket *nft_socket_open(unsigned groups, char *err, size_t errlen)
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
	int room = 2 * NFT_BATCH_LIMIT;
	if (setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room) < 0)
		setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
	return nl;
}

/* Answers to an earlier request that failed half-read must not count here. */
static void drop_stale_answers(struct nft_link *l)
{
	char stale[MNL_SOCKET_BUFFER_SIZE];

	while (recv(mnl_socket_get_fd(l->nl), stale, sizeof stale, MSG_DONTWAIT) > 0)
		;
}

int nft_ask(struct nft_link *l, const char *table, uint16_t type, const char *set_name,
	    mnl_cb_t cb, void *data)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	uint32_t seq = l->seq++;
	uint16_t flags = type == NFT_MSG_GETTABLE ? NLM_F_ACK : NLM_F_DUMP;
	struct nlmsghdr *h = nftnl_nlmsg_build_hdr(buf, type, NFPROTO_INET, flags, seq);

	/* Every object kind keeps its table's name in attribute 1. */
	mnl_attr_put_strz(h, NFTA_TABLE_NAME, table);
	if (set_name)
		mnl_attr_put_strz(h, NFTA_SET_ELEM_LIST_SET, set_name);
	drop_stale_answers(l);
	if (mnl_socket_sendto(l->nl, h, h->nlmsg_len) < 0)
		return -1;
	for (;;) {
		ssize_t r = mnl_socket_recvfrom(l->nl, buf, sizeof buf);
		if (r < 0)
			return -1;
		/* The end: NLMSG_DONE after a dump, the ack after the table. */
		int rc = mnl_cb_run(buf, (size_t)r, seq, l->portid, cb, data);
		if (rc <= MNL_CB_STOP)
			return rc;
	}
}

/* What a set's dump does with each element (nft_ask_elements). */
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

int nft_ask_elements(struct nft_link *l, const char *table, const char *set_name,
		     int (*fn)(struct nftnl_set_elem *e, void *arg), void *arg)
{
	struct element_visit v = {fn, arg};

	return nft_ask(l, table, NFT_MSG_GETSETELEM, set_name, on_set_elements, &v);
}

/* The batch sent and every answer read: 0 all acked, -1 with err. */
static int send_batch(struct nft_link *l, const struct nft_batch *bt, char *err, size_t errlen)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	size_t len;
	const void *data = nft_batch_data(bt, &len);
	int failed = 0;

	if (!data) {
		snprintf(err, errlen, "nftables: the rule set is too large for one batch");
		return -1;
	}
	drop_stale_answers(l);
	if (mnl_socket_sendto(l->nl, data, len) < 0) {
		snprintf(err, errlen, "nftables: cannot send to the kernel: %s", strerror(errno));
		return -1;
	}
	/* Every answer is read, the first refusal kept. */
	for (;;) {
		ssize_t r = recv(mnl_socket_get_fd(l->nl), buf, sizeof buf, MSG_DONTWAIT);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (!failed)
			failed = nft_batch_refusal(bt, buf, (size_t)r, err, errlen);
	}
	return failed ? -1 : 0;
}

int nft_send(struct nft_link *l, struct nft_batch *bt, char *err, size_t errlen)
{
	int rc = -1;

	if (!bt)
		snprintf(err, errlen, "nftables: out of memory");
	else
		rc = send_batch(l, bt, err, errlen);
	nft_batch_free(bt);
	return rc;
}
