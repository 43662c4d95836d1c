/*
 * upstream/internal.h — shared by the files of src/upstream/ only.
 */
#ifndef LOCALDNS_UPSTREAM_INTERNAL_H
#define LOCALDNS_UPSTREAM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <unbound.h>

#include "config/config.h"
#include "upstream/upstream.h"

/*
 * The libunbound configuration for cfg (context.c) as unbound.conf text,
 * malloc'd: forwarders or recursion, forward zones, DNSSEC. Every decision
 * an operator would want to know about (which resolv.conf servers were used
 * or skipped, and why) is logged. It may probe resolv.conf servers (up to a
 * few hundred ms), so it never runs on the resolver thread. NULL with err set.
 */
char *upstream_conf_text(const struct config *cfg, char *err, size_t errlen);

/* A libunbound context (threads, not a forked process) configured by text;
 * reads no file but those text names. NULL with err set. */
struct ub_ctx *upstream_context_from_text(const char *text, char *err, size_t errlen);

/* Largest text form of a forwarder ("ip@port"). */
#define UPSTREAM_ADDR_TEXT 64

/*
 * The nameservers of a resolv.conf file, as "ip@port" strings, skipping
 * (with a log line each) any that would loop back to us or that are
 * loopback stubs not answering. Returns how many were stored, or -1 with
 * err set when the file cannot be read.
 */
int upstream_resolv_conf(const char *path, const struct config *cfg,
			 char out[][UPSTREAM_ADDR_TEXT], size_t max,
			 char *err, size_t errlen);

/*
 * A request packed (ring.c): its fields, each variable part only as long
 * as its length says; about 150 bytes for a typical miss instead of
 * sizeof (1.4 KB). unpack leaves the unused ends of the arrays as they were.
 */
size_t upstream_request_packed_size(const struct upstream_request *r);
void upstream_request_pack(const struct upstream_request *r, uint8_t *out);
void upstream_request_unpack(const uint8_t *in, struct upstream_request *r);

/*
 * A worker's request ring (ring.c): single producer (the worker), single
 * consumer (the resolver thread), requests packed into 256 KiB. put is
 * false when the ring has no room (the request is not queued); take is
 * false when it is empty, else *out holds the oldest request. Neither
 * allocates, locks or makes a syscall.
 */
struct request_ring;
struct request_ring *request_ring_new(void);
void request_ring_free(struct request_ring *ring);
bool request_ring_put(struct request_ring *ring, const struct upstream_request *r);
bool request_ring_take(struct request_ring *ring, struct upstream_request *out);

#endif
