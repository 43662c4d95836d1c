/*
 * upstream/context.h — the upstream and cache sections of our config as
 * an unbound.conf text (context.c); upstream.c makes the libunbound
 * context from it.
 */
#ifndef LOCALDNS_UPSTREAM_CONTEXT_H
#define LOCALDNS_UPSTREAM_CONTEXT_H

#include <stddef.h>

#include "config/config.h"
#include "resolvconf/resolvconf.h"

/* Largest text form of a forwarder ("ip@port"): resolv.conf's nameservers come in it too. */
#define UPSTREAM_ADDR_TEXT RESOLVCONF_ADDR_TEXT

/*
 * The libunbound configuration for cfg as unbound.conf text, malloc'd:
 * forwarders or recursion, forward zones, DNSSEC. Every decision an
 * operator would want to know about (which resolv.conf servers were used
 * or skipped, and why) is logged. It may probe resolv.conf servers (up to
 * a few hundred ms), so it never runs on the resolver thread. NULL with
 * err set.
 */
char *upstream_conf_text(const struct config *cfg, char *err, size_t errlen);

#endif
