/*
 * upstream/ring.h — the rings between the workers and the resolver thread
 * (ring.c), one of each kind per worker, each with a single producer and
 * a single consumer. None of their functions allocates, locks or waits.
 */
#ifndef LOCALDNS_UPSTREAM_RING_H
#define LOCALDNS_UPSTREAM_RING_H

#include <stdbool.h>

#include "upstream/request.h"

/*
 * A worker's request ring: single producer (the worker), single
 * consumer (the resolver thread), requests packed into 256 KiB. put is
 * false when the ring has no room (the request is not queued); take is
 * false when it is empty, else *out holds the oldest request. Neither
 * allocates, locks or makes a syscall.
 */
struct request_ring;
struct request_ring *ring_request_new(void);
void ring_request_free(struct request_ring *ring);
bool ring_request_put(struct request_ring *ring, const struct upstream_request *r);
bool ring_request_take(struct request_ring *ring, struct upstream_request *out);
/* Resolver side: nothing to take (the worker may be putting a record right now). */
bool ring_request_empty(struct request_ring *ring);

/*
 * A worker's completion ring: TCP replies from the resolver
 * thread (single producer) to the worker (single consumer), with the
 * eventfd the worker watches. new is NULL without memory or an eventfd;
 * free frees the replies still in it. Resolver side: has_room, then put
 * (which cannot fail after has_room said yes); signal writes the eventfd
 * once for everything put since the last signal. Worker side: take is
 * false when the ring is empty (having read the eventfd clean).
 */
struct completion_ring;
struct completion_ring *ring_completion_new(void);
void ring_completion_free(struct completion_ring *ring);
int ring_completion_fd(const struct completion_ring *ring);
bool ring_completion_has_room(const struct completion_ring *ring);
void ring_completion_put(struct completion_ring *ring, const struct upstream_completion *c);
void ring_completion_signal(struct completion_ring *ring);
bool ring_completion_take(struct completion_ring *ring, struct upstream_completion *out);

/*
 * A worker's socket ring: the UDP sockets it no longer reads,
 * handed to the resolver thread (upstream_retire_socket). put is false
 * when the ring is full (try again later); take is false when it is
 * empty. A socket taken was put after every request that carries it, so
 * those requests are in the request ring by then: the resolver takes the
 * sockets first, then drains the requests.
 */
struct socket_ring;
struct socket_ring *ring_socket_new(void);
void ring_socket_free(struct socket_ring *ring);
bool ring_socket_put(struct socket_ring *ring, int fd);
bool ring_socket_take(struct socket_ring *ring, int *fd);

#endif
