/*
 * fuzz.h — what the libFuzzer targets in tests/fuzz/ share: CHECK (abort,
 * so libFuzzer keeps the input), a wait for a socket of ours, and a strict
 * reader of the DNS messages the code under test writes. Header-only; each
 * target is one file.
 */
#ifndef LOCALDNS_FUZZ_H
#define LOCALDNS_FUZZ_H

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dns/dns.h"

/* The failed condition, its line and errno go to stderr first: a run that
 * failed on a machine we cannot reach (CI) says which check it was. */
#define CHECK(cond) \
	do { \
		if (!(cond)) { \
			fprintf(stderr, "%s:%d: CHECK(%s) failed (errno %d: %s)\n", __FILE__, \
				__LINE__, #cond, errno, strerror(errno)); \
			abort(); \
		} \
	} while (0)

/* Whether fd reports events within ms: for the targets that talk to a
 * server of ours over a socket (libFuzzer's -timeout alarm interrupts
 * poll every few seconds, so an EINTR waits on). */
static inline bool fuzz_ready_in_time(int fd, short events, long ms)
{
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		clock_gettime(CLOCK_MONOTONIC, &now);
		long spent = (now.tv_sec - start.tv_sec) * 1000 +
			     (now.tv_nsec - start.tv_nsec) / 1000000;
		if (spent >= ms)
			return false;
		int rc = poll(&p, 1, (int)(ms - spent));
		if (rc == 1)
			return true;
		if (rc < 0 && errno != EINTR)
			return false;
	}
}

static inline bool fuzz_readable_in_time(int fd, long ms)
{
	return fuzz_ready_in_time(fd, POLLIN, ms);
}

static inline bool fuzz_writable_in_time(int fd, long ms)
{
	return fuzz_ready_in_time(fd, POLLOUT, ms);
}

static inline uint16_t fuzz_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* Step over the name at msg[*pos]; its in-place bytes must end by end. */
static inline bool fuzz_skip_name(const uint8_t *msg, size_t end, size_t *pos)
{
	uint8_t name[DNS_MAX_NAME];

	return dns_name_read(msg, end, pos, name, false) > 0;
}

/*
 * Whether msg[0..len) is a whole DNS message a client can read: its
 * question (none in some error replies), then exactly the records the header counts, each owner and each
 * name inside rdata (the types dns_rdata_names lists) readable with its
 * pointers, each rdata exactly as long as its names and fixed parts, and
 * nothing after the last record. A reply we send must pass; a cached entry
 * must pass however the upstream wrote it.
 */
static inline bool fuzz_message_ok(const uint8_t *msg, size_t len)
{
	size_t pos = DNS_HEADER_LEN;

	if (len < DNS_HEADER_LEN || fuzz_get16(msg + 4) > 1)
		return false;
	if (fuzz_get16(msg + 4) == 1) {
		if (!fuzz_skip_name(msg, len, &pos) || len - pos < 4)
			return false;
		pos += 4;
	}
	unsigned records = (unsigned)fuzz_get16(msg + 6) + fuzz_get16(msg + 8) + fuzz_get16(msg + 10);
	for (unsigned i = 0; i < records; i++) {
		struct dns_rdata_names shape;
		if (!fuzz_skip_name(msg, len, &pos) || len - pos < 10)
			return false;
		uint16_t type = fuzz_get16(msg + pos);
		size_t rdlen = fuzz_get16(msg + pos + 8);
		pos += 10;
		if (len - pos < rdlen)
			return false;
		size_t end = pos + rdlen;
		if (dns_rdata_names(type, &shape)) {
			if (rdlen < (size_t)shape.before + shape.after)
				return false;
			pos += shape.before;
			for (int n = 0; n < shape.names; n++)
				if (!fuzz_skip_name(msg, end - shape.after, &pos))
					return false;
			if (pos + shape.after != end)
				return false;
		}
		pos = end;
	}
	return pos == len;
}

#endif
