/*
 * control — the client side of the protocol (control.h), for `localdns
 * ctl`: connect, send the request line, read the status line, then copy
 * the body to the caller's stream as it arrives, holding back the last two
 * bytes so the final ".\n" line is recognised (and not printed) however
 * the reply is split across reads. Memory stays fixed whatever the size
 * of the reply.
 */
#include "control/internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define STATUS_LINE_MAX (CONFIG_ERR_MAX + 512)

/* The body so far: all but its last two bytes are written out. */
struct body {
	FILE *out;
	char held[2];
	size_t nheld;
	char last;        /* the last byte written; '\n' before any */
};

static void body_feed(struct body *b, const char *p, size_t n)
{
	if (n >= 2) {
		fwrite(b->held, 1, b->nheld, b->out);
		if (b->nheld)
			b->last = b->held[b->nheld - 1];
		fwrite(p, 1, n - 2, b->out);
		if (n > 2)
			b->last = p[n - 3];
		memcpy(b->held, p + n - 2, 2);
		b->nheld = 2;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (b->nheld == 2) {
			fputc(b->held[0], b->out);
			b->last = b->held[0];
			b->held[0] = b->held[1];
			b->nheld = 1;
		}
		b->held[b->nheld++] = p[i];
	}
}

/* The reply ended with its own last line, "." alone. */
static bool body_complete(const struct body *b)
{
	return b->nheld == 2 && b->held[0] == '.' && b->held[1] == '\n' && b->last == '\n';
}

static int connect_to(const char *path, char *msg, size_t msglen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	if (strlen(path) >= sizeof sa.sun_path) {
		snprintf(msg, msglen, "cannot connect to %s: the path is too long for a unix socket",
			 path);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(msg, msglen, "socket: %s", strerror(errno));
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		snprintf(msg, msglen, "cannot connect to %s: %s%s", path, strerror(e),
			 e == ENOENT || e == ECONNREFUSED ? " (is localdns running?)" : "");
		close(fd);
		return -1;
	}
	return fd;
}

static bool send_line(int fd, const char *request)
{
	char line[CONTROL_REQUEST_MAX + 1];
	int n = snprintf(line, sizeof line, "%s\n", request);

	if (n < 0 || (size_t)n >= sizeof line)
		return false;
	for (size_t done = 0; done < (size_t)n;) {
		ssize_t w = send(fd, line + done, (size_t)n - done, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		done += (size_t)w;
	}
	return true;
}

/* Some bytes, 0 at the end, -1 on an error or CONTROL_CALL_TIMEOUT_MS of silence. */
static ssize_t receive(int fd, char *buf, size_t cap)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	for (;;) {
		int ready = poll(&p, 1, CONTROL_CALL_TIMEOUT_MS);
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0)
			return -1;
		ssize_t n = recv(fd, buf, cap, 0);
		if (n < 0 && errno == EINTR)
			continue;
		return n;
	}
}

static enum control_status unreachable(char *msg, size_t msglen, const char *why)
{
	snprintf(msg, msglen, "%s", why);
	return CONTROL_UNREACHABLE;
}

/* "ok", or "error MESSAGE" / "usage MESSAGE" with MESSAGE into msg. */
static enum control_status parse_status(const char *line, char *msg, size_t msglen)
{
	if (strcmp(line, "ok") == 0)
		return CONTROL_OK;
	if (strncmp(line, "error ", 6) == 0) {
		snprintf(msg, msglen, "%s", line + 6);
		return CONTROL_FAILED;
	}
	if (strncmp(line, "usage ", 6) == 0) {
		snprintf(msg, msglen, "%s", line + 6);
		return CONTROL_USAGE;
	}
	return unreachable(msg, msglen, "the daemon's reply is not in the control protocol");
}

enum control_status control_call(const char *path, const char *request, FILE *out,
				 char *msg, size_t msglen)
{
	char buf[65536];
	size_t len = 0;
	char *nl = NULL;
	ssize_t n;

	int fd = connect_to(path, msg, msglen);
	if (fd < 0)
		return CONTROL_UNREACHABLE;
	if (!send_line(fd, request)) {
		close(fd);
		return unreachable(msg, msglen, "cannot send the request");
	}
	while (!nl && len < STATUS_LINE_MAX && (n = receive(fd, buf + len, sizeof buf - len)) > 0) {
		nl = memchr(buf + len, '\n', (size_t)n);
		len += (size_t)n;
	}
	if (!nl) {
		close(fd);
		return unreachable(msg, msglen, "no reply from the daemon");
	}
	*nl = '\0';
	enum control_status status = parse_status(buf, msg, msglen);
	if (status != CONTROL_OK) {
		close(fd);
		return status;
	}
	struct body b = {.out = out, .last = '\n'};
	body_feed(&b, nl + 1, len - (size_t)(nl + 1 - buf));
	while ((n = receive(fd, buf, sizeof buf)) > 0)
		body_feed(&b, buf, (size_t)n);
	close(fd);
	fflush(out);
	if (n < 0 || !body_complete(&b))
		return unreachable(msg, msglen, "the reply was cut short (see the daemon's log)");
	return CONTROL_OK;
}
