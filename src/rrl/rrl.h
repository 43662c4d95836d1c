/*
 * rrl — response rate limiting (rrl.*), in the style of BIND's and Knot's.
 *
 * Owns: the counts of UDP replies per client network and answer, shared by
 * every thread that sends UDP replies (the workers, and the resolver thread
 * for the names it asked upstream), the key they are hashed under, and the
 * limits (rrl.responses_per_second, rrl.slip, the prefix lengths).
 *
 * A count is kept per second for each (client network, answer): the
 * network is the client's address cut to rrl.ipv4_prefix_length or
 * rrl.ipv6_prefix_length, the answer is what dns_reply_key says (its kind,
 * name and type: NXDOMAIN under its zone, errors under no name). Past the
 * limit the rest of that second's replies are dropped, except every
 * rrl.slip-th, which goes out truncated (TC=1, no records) so a real client
 * retries over TCP, which is not limited. A forged source gets little to
 * reflect at its victim; a client asking other names than the flooder
 * beside it in its network is not limited with it.
 *
 * Must never: allocate, lock or make a syscall in rrl_apply (one hash and
 * one compare-and-swap on a keyed slot); be applied to TCP.
 */
#ifndef LOCALDNS_RRL_H
#define LOCALDNS_RRL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct config;

enum rrl_verdict { RRL_PASS, RRL_SLIP, RRL_DROP };

/*
 * Apply cfg's rrl.* (start-up and reload, one thread at a time; replies
 * being counted meanwhile see either setting). The table (512 KiB) and its
 * key are made the first time rrl is on and kept; if it cannot be made,
 * rrl stays off.
 */
void rrl_configure(const struct config *cfg);

/*
 * Count the UDP reply[0..*len) to peer in second now_s (monotonic): PASS
 * (send it as it is), SLIP (send it as cut here to a truncated reply: *len
 * is its new length) or DROP (send nothing: *len is 0). Any thread.
 */
enum rrl_verdict rrl_apply(const struct sockaddr_storage *peer, uint8_t *reply, size_t *len,
			   uint64_t now_s);

/* Free the table at exit, once no thread sends replies. */
void rrl_free(void);

#endif
