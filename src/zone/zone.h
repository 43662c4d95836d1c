/*
 * zone — an immutable table of local records and the logic that answers a
 * query from it.
 *
 * Owns: owner name -> RRsets (rdata in uncompressed wire form), the list of
 * zones we are authoritative for (each with its SOA), empty non-terminals,
 * and the answer rules for local data: exact matches, CNAME chains followed
 * inside the table, NXDOMAIN vs NODATA with the SOA in authority under an
 * authoritative zone, minimal ANY (RFC 8482).
 *
 * Must never: change a table after zone_builder_finish (workers read it with
 * no lock; a new table is built and swapped in by the owner, see query/),
 * or allocate while answering.
 *
 * Lookup is one open-addressing hash probe per name on the lower-cased wire
 * form; building is O(records) and happens off the hot path.
 */
#ifndef LOCALDNS_ZONE_H
#define LOCALDNS_ZONE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dns/dns.h"

struct zone_table;
struct zone_builder;

struct zone_builder *zone_builder_new(void);
void zone_builder_free(struct zone_builder *b);

/*
 * Declare an authoritative zone: the apex gets an SOA (CoreDNS's shape:
 * ns.dns.<apex> hostmaster.<apex> serial 7200 1800 86400 <ttl>) and an NS
 * record; names below it that are not in the table answer NXDOMAIN.
 */
int zone_builder_add_authority(struct zone_builder *b, const uint8_t *apex,
			       uint32_t ttl, uint32_t serial, const char **why);

/*
 * The apex records zone_builder_add_authority adds, for tables of other
 * shapes (cluster/): SOA "ns.dns.<apex> hostmaster.<apex> serial 7200 1800
 * 86400 minimum" and NS "ns.dns.<apex>". Each returns the rdata length, or 0
 * when apex is too long for the names.
 */
#define ZONE_SOA_RDATA_MAX (2 * DNS_MAX_NAME + 20)
size_t zone_soa_rdata(const uint8_t *apex, uint32_t serial, uint32_t minimum,
		      uint8_t out[ZONE_SOA_RDATA_MAX]);
size_t zone_ns_rdata(const uint8_t *apex, uint8_t out[DNS_MAX_NAME]);

/*
 * Add one record (class IN). Rejects, with a reason in *why: a CNAME next to
 * other data at the same owner, a second CNAME, rdata that does not match
 * its type's shape. Duplicate records are kept once.
 */
int zone_builder_add_rr(struct zone_builder *b, const uint8_t *owner,
			uint16_t type, uint32_t ttl, const uint8_t *rdata,
			uint16_t rdlen, const char **why);

/* Freeze the builder into a table (the builder is consumed). NULL on ENOMEM. */
struct zone_table *zone_builder_finish(struct zone_builder *b);

void zone_table_free(struct zone_table *t);

/* Number of owner names in the table (empty non-terminals excluded). */
size_t zone_table_size(const struct zone_table *t);

enum zone_result {
	ZONE_NOT_LOCAL, /* no local data covers the name: w is untouched */
	ZONE_ANSWERED,  /* w holds the whole answer, rcode and AA included */
};

/*
 * Answer q from t into w (which dns_response_begin has started). A name
 * outside every authoritative zone is answered only when it is in the table.
 * A CNAME whose target leaves local data ends the chain at that CNAME.
 */
enum zone_result zone_answer(const struct zone_table *t,
			     const struct dns_query *q, struct dns_writer *w);

/*
 * The same in steps, for a batch of queries whose lookups should wait on
 * memory together rather than one after the other: zone_name_hash once per
 * query, zone_prefetch_slot for every query, then zone_prefetch_node for
 * every query (it reads the slot the first step fetched), then
 * zone_answer_hashed. The prefetches only warm the CPU's caches: skipping
 * them changes nothing but speed.
 */
uint32_t zone_name_hash(const uint8_t *name, size_t len);
void zone_prefetch_slot(const struct zone_table *t, uint32_t hash);
/* true when a node of this hash is in the table (the name probably is). */
bool zone_prefetch_node(const struct zone_table *t, uint32_t hash);
enum zone_result zone_answer_hashed(const struct zone_table *t, const struct dns_query *q,
				    uint32_t hash, struct dns_writer *w);

/* Is name (len bytes) in one of t's authoritative zones (answered even when absent)? */
bool zone_covers(const struct zone_table *t, const uint8_t *name, size_t len);

#endif
