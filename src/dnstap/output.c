/*
 * dnstap/output.c — the connection to the collector: libfstrm's writer
 * (Frame Streams framing and the bidirectional handshake: READY, ACCEPT,
 * START; STOP and FINISH at the end) over our own socket operations.
 *
 * Why not libfstrm's unix and TCP writers: they connect, read and write
 * with blocking calls and no timeout, so a collector that accepts and then
 * never reads (or a TCP address that drops SYNs) would hold the writer
 * thread, and its stop, for minutes. Here every wait is a poll bounded by
 * TAP_IO_TIMEOUT_MS; past it the connection is given up and the writer
 * reconnects later. Every wait also watches the stop eventfd: once the
 * daemon stops, waits end at the stop's flush deadline (TAP_STOP_FLUSH_MS
 * after the stop began), even one that began before it.
 */
#include "dnstap/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <fstrm.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/clock.h"

static uint64_t now_ms(void)
{
	return (uint64_t)monotonic_ms();
}

#define CONTENT_TYPE "protobuf:dnstap.Dnstap"

struct conn {
	struct tap_target target;
	int stop_fd;                /* readable once the daemon stops */
	uint64_t stop_deadline_ms;  /* 0 until the stop is seen */
	int fd;
	uint8_t flat[TAP_WRITE_BYTES + 2 * 4 * TAP_FRAMES]; /* a batch and its frame lengths (conn_write) */
};

struct tap_output {
	struct fstrm_writer *writer;
	struct conn *conn;          /* owned by the writer's rdwr */
};

static bool stopped(struct conn *c)
{
	struct pollfd p = {.fd = c->stop_fd, .events = POLLIN};

	return poll(&p, 1, 0) > 0;
}

/*
 * Wait until fd is ready for events, TAP_IO_TIMEOUT_MS at most, or until the
 * stop's flush deadline once the stop eventfd says the daemon stops; false
 * on a timeout or an error.
 */
static bool wait_for(struct conn *c, short events)
{
	uint64_t deadline = now_ms() + TAP_IO_TIMEOUT_MS;

	for (;;) {
		struct pollfd p[2] = {{.fd = c->fd, .events = events},
				      {.fd = c->stop_fd, .events = POLLIN}};
		uint64_t now = now_ms();
		if (c->stop_deadline_ms == 0 && stopped(c))
			c->stop_deadline_ms = now + TAP_STOP_FLUSH_MS;
		uint64_t until = c->stop_deadline_ms && c->stop_deadline_ms < deadline
					 ? c->stop_deadline_ms : deadline;
		if (now >= until)
			return false;
		/* the stop eventfd only until it has been seen: it stays readable */
		int rc = poll(p, c->stop_deadline_ms ? 1 : 2, (int)(until - now));
		if (rc < 0 && errno != EINTR)
			return false;
		if (rc > 0 && p[0].revents)
			return !(p[0].revents & POLLNVAL);
	}
}

static fstrm_res conn_open(void *obj)
{
	struct conn *c = obj;
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	const struct sockaddr *addr = (const struct sockaddr *)&c->target.addr;
	socklen_t len = c->target.addr_len;
	int family = c->target.addr.ss_family, err = 0;
	socklen_t errlen = sizeof err;

	if (c->target.path[0]) {
		memcpy(un.sun_path, c->target.path, strlen(c->target.path) + 1);
		addr = (const struct sockaddr *)&un;
		len = sizeof un;
		family = AF_UNIX;
	}
	c->fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return fstrm_res_failure;
	if (connect(c->fd, addr, len) < 0 &&
	    (errno != EINPROGRESS || !wait_for(c, POLLOUT) ||
	     getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) < 0 || err != 0)) {
		if (err)
			errno = err;
		close(c->fd);
		c->fd = -1;
		return fstrm_res_failure;
	}
	return fstrm_res_success;
}

static fstrm_res conn_close(void *obj)
{
	struct conn *c = obj;

	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	return fstrm_res_success;
}

static fstrm_res conn_read(void *obj, void *data, size_t count)
{
	struct conn *c = obj;
	uint8_t *p = data;

	while (count > 0) {
		ssize_t n = recv(c->fd, p, count, MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			count -= (size_t)n;
		} else if (n == 0 || (errno != EAGAIN && errno != EINTR) || !wait_for(c, POLLIN)) {
			return fstrm_res_failure;
		}
	}
	return fstrm_res_success;
}

/* Send all of iov, waiting (bounded) while the socket is full. */
static fstrm_res send_all(struct conn *c, const struct iovec *iov, int iovcnt)
{
	struct iovec rest[iovcnt > 0 ? iovcnt : 1];
	struct msghdr msg = {.msg_iov = rest, .msg_iovlen = (size_t)iovcnt};

	memcpy(rest, iov, sizeof rest[0] * (size_t)iovcnt);
	while (msg.msg_iovlen > 0) {
		ssize_t n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if ((errno != EAGAIN && errno != EINTR) || !wait_for(c, POLLOUT))
				return fstrm_res_failure;
			continue;
		}
		while (msg.msg_iovlen > 0 && (size_t)n >= msg.msg_iov->iov_len) {
			n -= (ssize_t)msg.msg_iov->iov_len;
			msg.msg_iov++;
			msg.msg_iovlen--;
		}
		if (msg.msg_iovlen > 0) {
			msg.msg_iov->iov_base = (uint8_t *)msg.msg_iov->iov_base + n;
			msg.msg_iov->iov_len -= (size_t)n;
		}
	}
	return fstrm_res_success;
}

/*
 * libfstrm hands a batch over as two pieces a frame (its 4-byte length, then
 * the frame): 128 pieces of 4 and about 150 bytes for 64 frames. The kernel's
 * copy into the socket pays per piece (it was 4% of the process's samples,
 * a quarter of the writer's), so the pieces are copied together here first
 * and sent as one.
 */
static fstrm_res conn_write(void *obj, const struct iovec *iov, int iovcnt)
{
	struct conn *c = obj;
	size_t total = 0, used = 0;

	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (iovcnt < 2 || total > sizeof c->flat)
		return send_all(c, iov, iovcnt);
	for (int i = 0; i < iovcnt; i++) {
		memcpy(c->flat + used, iov[i].iov_base, iov[i].iov_len);
		used += iov[i].iov_len;
	}
	return send_all(c, &(struct iovec){.iov_base = c->flat, .iov_len = total}, 1);
}

static fstrm_res conn_destroy(void *obj)
{
	conn_close(obj);
	free(obj);
	return fstrm_res_success;
}

static struct fstrm_writer *new_writer(struct conn *c)
{
	struct fstrm_rdwr *rdwr = fstrm_rdwr_init(c);
	struct fstrm_writer_options *wopt;
	struct fstrm_writer *w = NULL;

	if (!rdwr) {
		free(c);
		return NULL;
	}
	fstrm_rdwr_set_open(rdwr, conn_open);
	fstrm_rdwr_set_close(rdwr, conn_close);
	fstrm_rdwr_set_read(rdwr, conn_read); /* a read op makes it bidirectional */
	fstrm_rdwr_set_write(rdwr, conn_write);
	fstrm_rdwr_set_destroy(rdwr, conn_destroy); /* from here on, rdwr owns c */
	wopt = fstrm_writer_options_init();
	if (wopt && fstrm_writer_options_add_content_type(wopt, CONTENT_TYPE,
							  strlen(CONTENT_TYPE)) == fstrm_res_success)
		w = fstrm_writer_init(wopt, &rdwr); /* takes rdwr */
	if (rdwr)
		fstrm_rdwr_destroy(&rdwr);
	fstrm_writer_options_destroy(&wopt);
	return w;
}

struct tap_output *dnstap_output_open(const struct tap_target *t, int stop_fd, char *err,
				      size_t errlen)
{
	struct tap_output *o = calloc(1, sizeof *o);
	struct conn *c = calloc(1, sizeof *c);

	if (!o || !c) {
		free(o);
		free(c);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	*c = (struct conn){.target = *t, .stop_fd = stop_fd, .fd = -1};
	o->conn = c;
	if (!(o->writer = new_writer(c))) {
		snprintf(err, errlen, "cannot set up the Frame Streams writer");
		free(o);
		return NULL;
	}
	errno = 0;
	if (fstrm_writer_open(o->writer) != fstrm_res_success) {
		if (errno)
			snprintf(err, errlen, "%s", strerror(errno));
		else
			snprintf(err, errlen, "the collector did not accept %s", CONTENT_TYPE);
		fstrm_writer_destroy(&o->writer);
		free(o);
		return NULL;
	}
	return o;
}

bool dnstap_output_write(struct tap_output *o, const struct iovec *frames, int n)
{
	if (fstrm_writer_writev(o->writer, frames, n) == fstrm_res_success)
		return true;
	conn_close(o->conn); /* a frame went out in part: no STOP can follow it */
	return false;
}

void dnstap_output_close(struct tap_output *o)
{
	if (!o)
		return;
	fstrm_writer_destroy(&o->writer); /* STOP, then FINISH while the collector answers */
	free(o);
}
