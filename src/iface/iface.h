/*
 * iface — the link and the addresses localdns serves on, through
 * rtnetlink (libnl-route-3).
 *
 * Owns: creating the link `interface.name` (kind dummy) and bringing it up,
 * or using `lo` (interface.kind: loopback); putting every served address
 * (listen.addresses and nftables.intercept, /32 or /128, IPv6 without DAD)
 * on it; putting back what someone removed (iface_repair, driven by the
 * events of iface_event_fd); removing it all again (teardown, uninstall).
 *
 * Must never: touch a link or an address it was not configured with. A
 * link named like ours but of another kind is not ours: it is refused, not
 * reused or deleted. An address already on another link is a start-up
 * error, not something to move.
 *
 * Threads: one struct iface is used by one thread at a time (start-up on
 * the main thread, then the node monitor thread and reloads, which the node
 * serialises with a mutex, then teardown on the main thread after the
 * monitor has stopped).
 */
#ifndef LOCALDNS_IFACE_H
#define LOCALDNS_IFACE_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"

struct iface;

/* Open the rtnetlink sockets for cfg (kept by reference); changes nothing. */
struct iface *iface_open(const struct config *cfg, char *err, size_t errlen);
void iface_close(struct iface *ifc);

/*
 * Create or reuse the link, bring it up, add the served addresses. Existing
 * ones are reused. On error nothing this call added is left behind, and err
 * says what failed (with the kernel's reason; for a kernel without the
 * dummy link type it names `interface.kind: loopback` as the way out).
 */
int iface_apply(struct iface *ifc, char *err, size_t errlen);

/* Remove what the last iface_apply or iface_add created (and only that). */
void iface_rollback(struct iface *ifc);

/*
 * Live reload, in three steps around the server's: iface_add puts next's
 * served addresses (and the link, if it went missing) in place before they
 * are bound, leaving ifc describing its current config (on error nothing
 * it added remains; iface_rollback takes back what it added); iface_use
 * makes ifc describe cfg from then on (repairs, removal; nothing is rolled
 * back any more); iface_drop, once the server has closed them, deletes
 * prev's served addresses that ifc's config no longer serves. cfg and next
 * are kept by reference, like iface_open's.
 */
int iface_add(struct iface *ifc, const struct config *next, char *err, size_t errlen);
void iface_use(struct iface *ifc, const struct config *cfg);
int iface_drop(struct iface *ifc, const struct config *prev, char *err, size_t errlen);

/*
 * Put back the link (up) and every address if missing. Returns how many
 * objects were put back (0: all was in place), or -1 with err set.
 */
int iface_repair(struct iface *ifc, char *err, size_t errlen);

/* Remove the link (dummy) or our addresses from lo (loopback); absent is fine. */
int iface_remove(struct iface *ifc, char *err, size_t errlen);

/*
 * A non-blocking descriptor that becomes readable when links or addresses
 * change; iface_drain_events reads what is pending and says whether any of
 * it could be a removal of ours (then call iface_repair).
 */
int iface_event_fd(const struct iface *ifc);
bool iface_drain_events(struct iface *ifc);

#endif
