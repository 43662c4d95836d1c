/*
 * util/datagram — sending a batch of UDP replies, prepared as mmsghdrs
 * (one iovec each), without blocking: the workers' batches
 * (server/udp.c) and the resolver's turns (upstream/deliver.c).
 *
 * Owns: nothing; the caller owns the descriptor and the messages.
 *
 * Must never: allocate, lock, log or keep state; block (MSG_DONTWAIT is
 * always added: a full socket buffer drops the rest, as the network would).
 *
 * Why not always sendmmsg: a batch of one goes with sendto, and so does
 * the one datagram a sendmmsg left (one that stopped at an unreachable
 * peer); a batch of more goes with sendmmsg, all of it in one call. A
 * batch of one is what a worker or the resolver sends for a query that
 * came alone, every query of a node that is not busy, and sendmmsg of
 * one message cost 180 ns more
 * than sendto on loopback (2,600 against 2,420 ns; sendmsg 2,550):
 * docs/performance.md, "Cold misses", item 18.
 */
#ifndef LOCALDNS_UTIL_DATAGRAM_H
#define LOCALDNS_UTIL_DATAGRAM_H

#include <errno.h>
#include <sys/socket.h>

/* One message of msgs, with sendto: 1 when it went, else -1 (errno set). */
static inline int datagram_send_one(int fd, const struct mmsghdr *m, int flags)
{
	const struct msghdr *h = &m->msg_hdr;

	return sendto(fd, h->msg_iov[0].iov_base, h->msg_iov[0].iov_len, flags, h->msg_name,
		      h->msg_namelen) < 0 ? -1 : 1;
}

/*
 * msgs[0..n) to fd, each with one iovec, flags | MSG_DONTWAIT: a
 * datagram whose peer cannot be reached is skipped, an interrupted call
 * tried again; stops when the socket's buffer is full.
 */
static inline void datagram_send_all(int fd, struct mmsghdr *msgs, unsigned n, int flags)
{
	flags |= MSG_DONTWAIT;
	for (unsigned sent = 0; sent < n;) {
		int rc = n - sent == 1 ? datagram_send_one(fd, &msgs[sent], flags)
				       : sendmmsg(fd, msgs + sent, n - sent, flags);
		if (rc > 0)
			sent += (unsigned)rc;
		else if (rc < 0 && errno == EINTR)
			continue;
		else if (rc < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			sent++; /* this datagram's peer is unreachable: the next */
		else
			return;
	}
}

#endif
