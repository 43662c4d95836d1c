/*
 * dnstap/internal.h — what the files of src/dnstap/ share: the exchange
 * record the producers write into their rings and the writer thread reads
 * (dnstap.c), its encoding as dnstap protobuf messages (encode.c), and the
 * collector connection (output.c). Nothing outside src/dnstap/ includes
 * this.
 */
#ifndef LOCALDNS_DNSTAP_INTERNAL_H
#define LOCALDNS_DNSTAP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "dnstap/dnstap.h"

/* What a record holds. */
enum tap_entry_kind {
	TAP_CLIENT = 1,            /* a client's query and/or the reply it got */
	TAP_RESOLVER_QUERY = 2,    /* a question handed to libunbound: qname in bytes */
	TAP_RESOLVER_RESPONSE = 3, /* an answer from libunbound: the message in the second part */
};

/*
 * One record in a producer's ring: this header, then first_len bytes (the
 * client's query, or the resolver's qname), then second_len bytes (the
 * reply, or libunbound's answer), padded to TAP_ALIGN. size 0 (TAP_WRAP)
 * where a record would not fit before the ring's end: the next one is at
 * the start.
 */
struct tap_entry {
	uint32_t size;           /* the whole record, padded */
	uint8_t kind;            /* enum tap_entry_kind */
	uint8_t family;          /* AF_INET, AF_INET6, or 0 (resolver records) */
	uint8_t transport;       /* enum query_transport */
	uint8_t pad;
	uint16_t port;           /* the client's */
	uint16_t qtype, qclass;  /* resolver records */
	uint16_t first_len;
	uint32_t second_len;
	uint32_t nsec;
	int64_t sec;             /* CLOCK_REALTIME */
	uint8_t addr[16];        /* the client's */
	uint8_t local[16];       /* the address it asked (ours), when local_port is not 0 */
	uint16_t local_port;
	uint8_t pad2[6];
	uint8_t bytes[];
};

#define TAP_ALIGN 8u
#define TAP_WRAP 0u

/* What every message of one connection carries. */
struct tap_meta {
	const char *identity;    /* dnstap.identity as in effect */
	const char *version;     /* "localdns <version>" */
	bool recursive;          /* resolver messages are RESOLVER_*, else FORWARDER_* */
};

/*
 * encode.c (pure): the dnstap message of kind (one enum dnstap_kind bit)
 * for entry e into out[0..cap), with extra (NULL: none; the pod behind the
 * client, "pod=<namespace>/<name>") as the Dnstap `extra` field. The
 * message's length, or 0 when e holds no part of that kind or it does not
 * fit in cap.
 */
size_t dnstap_encode(const struct tap_entry *e, enum dnstap_kind kind, const struct tap_meta *meta,
		     const char *extra, uint8_t *out, size_t cap);

/*
 * At most how many bytes one message of e takes (with an identity of at
 * most 255 bytes, a version of at most 63 and an extra of at most 299):
 * dnstap_encode into that much room never fails for want of it.
 */
static inline size_t tap_encoded_max(const struct tap_entry *e)
{
	return 1024u + e->first_len + e->second_len;
}

/*
 * The same in two steps, as the writer does it: the Dnstap envelope
 * (identity, version, extra, type; no message) packed once for every
 * message that shares it, into out (0 when cap is short), then one Message
 * of e behind a copy of it: packed at out + *start, the length returned
 * (0 as dnstap_encode's), cap needing TAP_ENVELOPE_MAX + 4 more than
 * tap_encoded_max(e).
 */
#define TAP_ENVELOPE_MAX 640
size_t dnstap_envelope(const struct tap_meta *meta, const char *extra, uint8_t *out, size_t cap);
size_t dnstap_encode_after(const struct tap_entry *e, enum dnstap_kind kind,
			   const struct tap_meta *meta, const uint8_t *env, size_t env_len,
			   uint8_t *out, size_t cap, size_t *start);

/*
 * output.c: a Frame Streams connection (bidirectional handshake, content
 * type "protobuf:dnstap.Dnstap") to a unix socket path or an ip:port,
 * whose every wait is bounded (TAP_IO_TIMEOUT_MS), and cut short once
 * stop_fd (an eventfd) is readable: then it waits at most until the stop's
 * deadline, TAP_STOP_FLUSH_MS after it saw the stop.
 */
#define TAP_IO_TIMEOUT_MS 5000
#define TAP_STOP_FLUSH_MS 1000

/* A write to the collector: up to TAP_FRAMES frames (libfstrm's writev would
 * take 128: measured no different) encoded into TAP_WRITE_BYTES, room for 64
 * typical frames or two of the largest. */
#define TAP_FRAMES 64
#define TAP_WRITE_BYTES (TAP_FRAMES * 1024 + 2 * 70000)

struct tap_target {
	char path[108];                /* unix socket, or "" */
	struct sockaddr_storage addr;  /* TCP, when path is "" */
	socklen_t addr_len;
};

struct tap_output;

/* Connect and hand-shake; NULL with err set (errno's text, or the step that failed). */
struct tap_output *dnstap_output_open(const struct tap_target *t, int stop_fd, char *err,
				      size_t errlen);
/* Write n frames; false when the connection failed (it is then useless: close it). */
bool dnstap_output_write(struct tap_output *o, const struct iovec *frames, int n);
/* STOP, FINISH (bounded) and close; NULL is fine. */
void dnstap_output_close(struct tap_output *o);

#endif
