/*
 * upstream/deliver.h — the resolver thread's replies to waiting clients
 * (deliver.c): the flight table's reply callback, which builds each reply
 * and sends it, the only place of the resolver that sends anything.
 */
#ifndef LOCALDNS_UPSTREAM_DELIVER_H
#define LOCALDNS_UPSTREAM_DELIVER_H

#include <stdint.h>
#include <sys/socket.h>

#include "cache/cache.h"
#include "dns/dns.h"
#include "talkers/talkers.h"
#include "upstream/flight.h"
#include "upstream/request.h"
#include "upstream/ring.h"
#include "upstream/stats.h"

/* TCP replies a full completion ring could not take yet, oldest first. */
struct held_reply {
	struct upstream_completion c;
	struct held_reply *next;
};

struct held_replies {
	struct held_reply *head, *tail;
};

#define UDP_OUT_REPLIES 32           /* UDP replies sent with one sendmmsg at most */
#define UDP_OUT_BYTES (64 * 1024)    /* and their bytes */

/* UDP replies built this turn for one socket, sent together (deliver_flush). */
struct udp_out {
	int fd;
	unsigned n;
	size_t used;
	struct mmsghdr msgs[UDP_OUT_REPLIES];
	struct iovec iov[UDP_OUT_REPLIES];
	struct sockaddr_storage peers[UDP_OUT_REPLIES];
	uint8_t bytes[UDP_OUT_BYTES];
};

struct deliver {
	struct cache *cache;
	struct upstream_counters *n;
	struct completion_ring **completions; /* the workers' (borrowed), one each */
	struct held_replies *held;            /* one list per worker */
	unsigned n_workers;
	unsigned n_held;                      /* in all the lists */
	bool signal_owed;                     /* a TCP reply was put since deliver_flush */
	struct talkers_sampler top_sampler;   /* the top talkers' (talkers_sample) */
	struct udp_out udp;                   /* UDP replies not sent yet */
	uint8_t buf[DNS_MAX_MESSAGE];         /* the reply being built */
	uint8_t aaaa[DNS_MAX_MESSAGE];        /* DNS64: the AAAA answer ... */
	uint8_t a[DNS_MAX_MESSAGE];           /* ... and the A answer it is made from */
};

/* d replies for these workers, through their completion rings for TCP. -1 without memory. */
int deliver_init(struct deliver *d, struct cache *cache, struct upstream_counters *n,
		 struct completion_ring **completions, unsigned n_workers);
/* The replies still held are freed (their clients get none). */
void deliver_free(struct deliver *d);

/*
 * flight_io.reply, env a struct deliver: answer the client that sent r as
 * a says, with its own ID, question case, EDNS and cookie; UDP on the
 * socket r came in on, with the turn's other replies for that socket (one
 * sendmmsg at deliver_flush, or when UDP_OUT_REPLIES are waiting), TCP
 * through worker's completion ring: when
 * that is full, the reply is held here and put there by deliver_flush (a
 * lost TCP reply would leave its connection's count of waiting queries
 * too high). Counts the reply by rcode, and whether a failure was
 * answered stale or with SERVFAIL.
 */
void deliver_reply(void *env, unsigned worker, const struct upstream_request *r,
		   const struct flight_reply *a, uint64_t now_ms);

/*
 * Once per loop turn, and before a socket the UDP replies may use is
 * closed: send the UDP replies built so far, move held TCP replies into
 * their rings as far as they have room, then wake the workers that have
 * replies waiting. deliver_holding is true while some are still held (the
 * loop comes back soon: the workers are taking replies out).
 */
void deliver_flush(struct deliver *d);
bool deliver_holding(const struct deliver *d);

#endif
