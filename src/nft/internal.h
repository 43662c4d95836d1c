/*
 * nft/internal.h — what the files of src/nft/ share. Nothing outside
 * src/nft/ includes this (tests/unit/test_nft_batch.c does, for the pure
 * parts); the daemon sees nft.h and plan.h.
 *
 * The folder, from the configuration to the kernel:
 *   plan.c       what the table holds, as plain data (plan.h)
 *   rule.c       a planned rule as nftables expressions            pure
 *   batch.c      the messages of each transaction, from the plan   pure
 *   owner.c      what the kernel shows, judged: whose the table
 *                is, whether it is as planned, whose a change was  pure
 *   walk.c       the netlink socket: a request about our table and
 *                the walk over its answer, a batch and its acks
 *   nft.c        the operations of nft.h, the one struct nft
 *   conntrack.c  forgetting the fallback's UDP flows (ctnetlink)
 * The pure files take the plan and the state they need as arguments and
 * touch no socket: unit tests build and judge a whole table without a
 * kernel.
 */
#ifndef LOCALDNS_NFT_INTERNAL_H
#define LOCALDNS_NFT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libmnl/libmnl.h>

#include "nft/plan.h"

struct nftnl_rule;
struct nftnl_set_elem;

/* The table's comment (userdata, kernel 5.13+): how a table says it is ours. */
#define NFT_TABLE_COMMENT "managed by localdns"

/* Room for describing one object in an error message. */
#define NFT_WHAT_MAX 96

/*
 * The largest batch, in bytes: the table and NFT_KEPT_MAX kept elements
 * (about 80 bytes each). The message that crosses it is written past it,
 * so a batch's buffer and the socket's send room are twice this.
 */
#define NFT_BATCH_LIMIT (256 * 1024)

/* ---- rule.c ---------------------------------------------------------------- */

/*
 * The planned rule as a libnftnl rule of p's table and chain, carrying the
 * comment "localdns <fingerprint>"; NULL when out of memory.
 */
struct nftnl_rule *nft_rule_object(const struct nft_plan *p, const struct nft_rule_plan *rp);

/* ---- batch.c --------------------------------------------------------------- */

/*
 * One element of a timeout set given as its key: a heartbeat element, a
 * token or a flow. A rebuild puts back those of other processes with what
 * was left of their time (expires_ms), so it neither ends nor extends
 * their heartbeat.
 */
struct nft_element {
	const struct nft_set_plan *set;
	uint8_t key[36];           /* up to a flow: 16 + 4 + 16 */
	uint32_t len;
	uint64_t expires_ms;       /* 0: the whole timeout of its set */
};

/*
 * What a rebuild keeps of our table in the kernel. A rebuild deletes the
 * table and adds it again, and with it the elements that come and go at
 * run time: the heartbeats of every localdns on the node and the flows of
 * open TCP connections. They are read first (nft_kept_element over dumps
 * of those sets) and put back with the time they had left, so a rebuild
 * (a localdns starting beside a running one, a reload, new fallback
 * endpoints, a repair) neither ends another process's heartbeat nor hands
 * an open connection to conntrack mid-stream. At most NFT_KEPT_MAX:
 * connections past that are picked up by conntrack at their next packet.
 */
#define NFT_KEPT_MAX 2048

struct nft_kept {
	uint64_t table_handle;     /* of the table they were read from */
	const struct nft_set_plan *set; /* the set being read */
	uint32_t own_token;        /* left out of el, and noted in own_seen */
	bool own_seen;
	size_t n;
	struct nft_element el[NFT_KEPT_MAX];
};

/* A libnftnl element visitor: element e of k->set into k (always 0). */
int nft_kept_element(struct nftnl_set_elem *e, void *k);

/* This process's part in the heartbeat, as the messages carry it. */
struct nft_beat {
	uint32_t token;            /* in set instances */
	uint64_t live_timeout_ms;  /* of its elements */
	bool beating;              /* renewing: a rebuild puts the heartbeat back */
};

/*
 * One transaction: the batch's begin, its messages, its end. Every message
 * asks for an ack and is described ("rule 2 of chain prerouting") so a
 * refusal names what the kernel refused. Sequence numbers come from *seq
 * (the socket's), which outlives the batch. Each constructor returns the
 * whole batch, or NULL when out of memory.
 */
struct nft_batch;

/*
 * Replace the table with the planned one: delete ours (old, NULL when
 * there is none) by its handle, add it anew with every set, element, chain
 * and rule, put back what old kept, and our token while we beat.
 */
struct nft_batch *nft_batch_install(uint32_t *seq, const struct nft_plan *p,
				    const struct nft_beat *beat, const struct nft_kept *old);

/* Renew the heartbeat: the live elements replaced, the token renewed. */
struct nft_batch *nft_batch_heartbeat(uint32_t *seq, const struct nft_plan *p,
				      const struct nft_beat *beat);

/*
 * Take beat's token out (when tokens saw it) and, unless tokens found
 * another process's, the live elements.
 */
struct nft_batch *nft_batch_leave(uint32_t *seq, const struct nft_plan *p,
				  const struct nft_beat *beat, const struct nft_kept *tokens);

/* Delete the table with this handle. */
struct nft_batch *nft_batch_remove(uint32_t *seq, const struct nft_plan *p, uint64_t handle);

void nft_batch_free(struct nft_batch *bt);

/*
 * The bytes to send, or NULL when the batch could not be built whole (too
 * large for one batch, or out of memory on the way).
 */
const void *nft_batch_data(const struct nft_batch *bt, size_t *len);

/*
 * The first refusal among the kernel's answers in buf, as "nftables refused
 * <what>: <strerror>" in err: its errno, or 0 when they are all acks.
 */
int nft_batch_refusal(const struct nft_batch *bt, const void *buf, size_t len, char *err,
		      size_t errlen);

/* ---- owner.c --------------------------------------------------------------- */

/*
 * What answers about our table showed (nft_seen_message reads them; the
 * verdicts below judge). Objects of other tables are not counted.
 */
struct nft_seen {
	const struct nft_plan *plan;
	uint64_t handle;           /* the table's */
	bool has_comment;
	char comment[64];
	size_t sets;
	size_t chains;
	size_t unplanned_chains;   /* chains the plan has not; the first: */
	char unplanned_chain[NFT_WHAT_MAX];
	size_t localdns_rules;     /* rules carrying "localdns <any fingerprint>" */
	size_t foreign_rules;      /* rules without; the first one's chain: */
	char foreign_rule_chain[NFT_WHAT_MAX];
	size_t current[NFT_CHAINS]; /* rules of a planned chain carrying the plan's comment */
	size_t stale_rules;        /* any other rule; the first one's chain: */
	char stale_rule_chain[NFT_WHAT_MAX];
};

/*
 * An mnl_cb_t: one netlink message about a table, chain, set or rule into
 * the struct nft_seen at data (other messages are passed over).
 * MNL_CB_ERROR when it does not parse.
 */
int nft_seen_message(const struct nlmsghdr *h, void *data);

/*
 * Is the table seen (it exists) ours: true, or false with err saying why
 * not and what to do. For a table without a comment, s must have seen its
 * chains and rules.
 */
bool nft_seen_ours(const struct nft_seen *s, char *err, size_t errlen);

/* Are the chains and rules seen the plan's: 1, or 0 with err saying how not. */
int nft_seen_as_planned(const struct nft_seen *s, char *err, size_t errlen);

/*
 * Is the event h someone else's change to an object of the table named
 * table (ours are those sent from the socket with this portid)?
 */
bool nft_foreign_change(const struct nlmsghdr *h, uint32_t portid, const char *table);

/* ---- walk.c ---------------------------------------------------------------- */

/* The socket that batches and requests go through. */
struct nft_link {
	struct mnl_socket *nl;
	uint32_t portid;           /* events we caused carry it */
	uint32_t seq;
};

/* A netfilter netlink socket bound to groups (0: none), or NULL with err. */
struct mnl_socket *nft_socket_open(unsigned groups, char *err, size_t errlen);

/*
 * Ask about the table named table: type NFT_MSG_GETTABLE (the table
 * itself), or a dump of its sets, chains, rules, or of the elements of set
 * set_name (NFT_MSG_GETSETELEM); cb sees every object of the answer. 0, or
 * -1 with errno (ENOENT: no such table or set).
 */
int nft_ask(struct nft_link *l, const char *table, uint16_t type, const char *set_name,
	    mnl_cb_t cb, void *data);

/* Every element of set set_name of table through fn; as nft_ask. */
int nft_ask_elements(struct nft_link *l, const char *table, const char *set_name,
		     int (*fn)(struct nftnl_set_elem *e, void *arg), void *arg);

/*
 * Send bt (a constructor's answer: NULL means out of memory) and free it:
 * 0 when the kernel acked every message, -1 with err naming the first it
 * refused, or why it could not be sent.
 */
int nft_send(struct nft_link *l, struct nft_batch *bt, char *err, size_t errlen);

#endif
