/*
 * static — turns the configuration's local data (cluster.domain and
 * static.records / static.files) into a zone table.
 *
 * Owns: the mapping from config records to wire-form RRs, and the error
 * messages that point at the record's FILE:LINE:COL.
 *
 * Must never: serve or publish the table (query/ does), or keep pointers
 * into the config (the table outlives it).
 */
#ifndef LOCALDNS_STATIC_H
#define LOCALDNS_STATIC_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "zone/zone.h"

/*
 * Whether the static records speak for the whole cluster domain (SOA, NS,
 * NXDOMAIN for names they lack): only without Kubernetes and without
 * cluster.fallback_servers, as on a VM or in a demo. Otherwise the cluster
 * table or kube-dns does, and static records only add or override names.
 */
bool static_owns_cluster_domain(const struct config *cfg);

/*
 * Build the table for cfg: an authoritative zone for cluster.domain (SOA
 * serial = `serial`) when static_owns_cluster_domain, and every static record. NULL with "FILE:LINE:COL:
 * message" in err when a record cannot be stored.
 */
struct zone_table *static_zone_build(const struct config *cfg, uint32_t serial,
				     char *err, size_t errlen);

#endif
