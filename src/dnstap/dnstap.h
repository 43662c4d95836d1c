/*
 * dnstap — every query and reply, as dnstap messages (dnstap.proto,
 * protobuf) in a Frame Streams connection (libfstrm) to a collector on a
 * unix socket (dnstap.socket) or TCP (dnstap.address).
 *
 * Owns: which messages are on (dnstap.messages), one single-producer/
 * single-consumer byte ring of exchanges per producer (each worker, the
 * resolver thread), the writer thread that encodes them
 * (encode.c) and writes them to the collector (output.c: the connection,
 * its handshake, reconnects with backoff), and the counts of messages sent
 * and of exchanges dropped.
 *
 * Must never: allocate, lock, format or make a syscall on the producer side
 * (an exchange is copied into the producer's own ring; the clock is read
 * through the vDSO; the writer is woken at most once per half ring); make a
 * producer wait (a full ring drops the exchange and counts it); cost a
 * worker more than one predictable branch per query while off
 * (dnstap_client_on); let a slow, silent or absent collector stall
 * anything but the writer thread.
 *
 * What is logged: an exchange is a query and the reply it got, from one
 * client, sent and received by one producer. A worker answers most queries
 * itself and records both at once (one clock read: for a local or cached
 * answer the two times are the same microsecond). A query handed to the
 * resolver is recorded by the worker without a reply (the CLIENT_QUERY),
 * and the resolver thread records the reply when it sends it (the
 * CLIENT_RESPONSE, whatever it is: libunbound's answer, a stale one at the
 * deadline, SERVFAIL). With resolver_query / resolver_response, the
 * resolver thread also records each question it hands libunbound and the
 * answer libunbound gives back (FORWARDER_* when forwarding, RESOLVER_*
 * when recursing).
 *
 * Lifetimes: dnstap_start before any producer starts, dnstap_stop after
 * every producer has stopped (it writes what is left while the collector
 * takes it, within a second).
 */
#ifndef LOCALDNS_DNSTAP_H
#define LOCALDNS_DNSTAP_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config/config.h"
#include "query/kinds.h"

/* dnstap.messages, as bits of dnstap_messages. */
enum dnstap_kind {
	DNSTAP_CLIENT_QUERY = 1 << 0,
	DNSTAP_CLIENT_RESPONSE = 1 << 1,
	DNSTAP_RESOLVER_QUERY = 1 << 2,
	DNSTAP_RESOLVER_RESPONSE = 1 << 3,
};
#define DNSTAP_CLIENT (DNSTAP_CLIENT_QUERY | DNSTAP_CLIENT_RESPONSE)
#define DNSTAP_RESOLVER (DNSTAP_RESOLVER_QUERY | DNSTAP_RESOLVER_RESPONSE)

/* The resolver thread's producer id; workers use their worker id. */
#define DNSTAP_PRODUCER_RESOLVER UINT_MAX

/* The enum dnstap_kind bits that are on; 0 while dnstap is off. */
extern _Atomic uint32_t dnstap_messages;

/* Whether client messages are on: one load and one branch while off. */
static inline bool dnstap_client_on(void)
{
	return __builtin_expect(
		(atomic_load_explicit(&dnstap_messages, memory_order_relaxed) & DNSTAP_CLIENT) != 0,
		0);
}

static inline bool dnstap_resolver_on(void)
{
	return __builtin_expect(
		(atomic_load_explicit(&dnstap_messages, memory_order_relaxed) & DNSTAP_RESOLVER) != 0,
		0);
}

/*
 * One client exchange seen by `producer` (only it may call this for its
 * ring): the query as received (query_len 0: none, the worker already
 * recorded it) and the reply as sent (reply_len 0: none yet, the resolver
 * will send it), between client and us (local: the address it asked, for
 * response_address; NULL when not known) over transport. The time is now.
 */
void dnstap_client(unsigned producer, const struct sockaddr_storage *client,
		   const struct sockaddr_storage *local, enum query_transport transport,
		   const uint8_t *query, size_t query_len, const uint8_t *reply, size_t reply_len);

/*
 * A producer's batch (a worker's recvmmsg batch): the records it makes
 * until dnstap_batch_end carry the time of dnstap_batch_begin, one clock
 * read for the batch instead of one per record (they were received
 * together; a batch takes microseconds). Only that producer may call them.
 */
void dnstap_batch_begin(unsigned producer);
void dnstap_batch_end(unsigned producer);

/*
 * The resolver thread's question to libunbound (qname in wire form, lower
 * case), and libunbound's answer to one (NULL or empty: none, nothing is
 * recorded). Resolver thread only.
 */
void dnstap_resolver_query(const uint8_t *qname, uint16_t qtype, uint16_t qclass);
void dnstap_resolver_response(const uint8_t *answer, size_t answer_len);

/*
 * Rings for n_workers workers and the resolver
 * (dnstap.buffer bytes each; pages are touched only when used) and the
 * writer thread, which connects when dnstap is on. `pods` names the pod
 * behind a client address (cluster_client_pod's contract; NULL: none) and
 * pods_arg is its first argument. -1 with err set.
 */
typedef bool (*dnstap_pod_fn)(const void *arg, const struct sockaddr_storage *client,
			      char *out, size_t cap);
int dnstap_start(const struct config *cfg, unsigned n_workers, dnstap_pod_fn pods,
		 const void *pods_arg, char *err, size_t errlen);

/*
 * Apply cfg's dnstap section (reload): messages at once; a new collector
 * or identity makes the writer reconnect. Any thread.
 */
void dnstap_configure(const struct config *cfg);

/* The dnstap.identity in effect for cfg: the key, else the node name, else the host name. */
void dnstap_identity(const struct config *cfg, char *out, size_t cap);

/* For metrics: exchanges dropped (a full ring), messages written, connections made. */
uint64_t dnstap_dropped(void);
uint64_t dnstap_sent(void);
uint64_t dnstap_connects(void);
/* 1 while connected to a collector, else 0. */
uint64_t dnstap_connected(void);

/* Stop the writer after writing what it can within a second; free the rings. */
void dnstap_stop(void);

#endif
