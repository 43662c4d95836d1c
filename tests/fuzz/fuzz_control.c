/*
 * libFuzzer target for the control protocol (src/control/): the input is
 * what a client sends on one connection to the control socket of a daemon
 * core (tests/unit/daemon_core.h: answer cache, static records, top
 * talkers, resolver, one worker on loopback, the four control threads, and
 * a thread serving their reloads), half-closed after its last byte. Every
 * command runs for real: stats, lookup (local names answered at once,
 * others through the resolver to a port nothing answers on, 100 ms),
 * flush, dump-cache, top, node, reload (the config file is unchanged).
 *
 * Checks: the daemon closes every connection (no input may hang it); a
 * request line (one that ends with a newline within the request limit) is
 * answered with a status line ("ok", "error ...", "usage ...") and the
 * reply ends with the "." line; no reply line is "." but the last; and
 * afterwards `stats` still answers (no control thread stopped or wedged).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "../unit/daemon_core.h"
#include "fuzz.h"
#include "log/log.h"
#include "privs/privs.h"

#define REPLY_MAX (4 << 20)
#define CLOSE_WAIT_MS 9000 /* CONTROL_IO_TIMEOUT_MS, and room for a busy machine */

static struct daemon_core core;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char err[CONFIG_ERR_MAX];

	(void)argc;
	(void)argv;
	log_setup(LOG_ERROR, LOG_FORMAT_LOGFMT);
	privs_use_seccomp(false); /* the sanitizers' own calls are not on the lists */
	urcu_memb_register_thread();
	if (daemon_core_start(&core, err, sizeof err) < 0) {
		fprintf(stderr, "fuzz_control: %s\n", err);
		abort();
	}
	return 0;
}

/* Send data on a new connection, half-close, read until the daemon closes. */
static size_t exchange(const uint8_t *data, size_t size, char *reply)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t sent = 0, n = 0;

	snprintf(a.sun_path, sizeof a.sun_path, "%s", core.sock);
	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
	while (sent < size) {
		ssize_t k = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
		if (k <= 0)
			break; /* it read its line and closed */
		sent += (size_t)k;
	}
	shutdown(fd, SHUT_WR);
	for (;;) {
		CHECK(fuzz_readable_in_time(fd, CLOSE_WAIT_MS)); /* never left hanging */
		ssize_t k = recv(fd, reply + n, REPLY_MAX - 1 - n, 0);
		if (k < 0 && errno == ECONNRESET)
			break;
		CHECK(k >= 0);
		if (k == 0 || (n += (size_t)k) == REPLY_MAX - 1)
			break;
	}
	reply[n] = '\0';
	close(fd);
	return n;
}

/* A status line, then body lines none of which is ".", then ".". */
static bool well_formed(const char *reply, size_t n)
{
	if (!(strncmp(reply, "ok\n", 3) == 0 || strncmp(reply, "error ", 6) == 0 ||
	      strncmp(reply, "usage ", 6) == 0))
		return false;
	if (n < 2 || memcmp(reply + n - 2, ".\n", 2) != 0 || (n > 2 && reply[n - 3] != '\n'))
		return false;
	for (const char *line = reply; line < reply + n - 2;) {
		const char *end = memchr(line, '\n', (size_t)(reply + n - line));
		CHECK(end);
		if (end - line == 1 && line[0] == '.')
			return false;
		line = end + 1;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char reply[REPLY_MAX];
	static const char stats[] = "stats\n";
	const uint8_t *nl = memchr(data, '\n', size < CONTROL_REQUEST_MAX ? size : CONTROL_REQUEST_MAX);
	size_t n = exchange(data, size, reply);

	if (nl)
		CHECK(well_formed(reply, n));
	n = exchange((const uint8_t *)stats, sizeof stats - 1, reply);
	CHECK(strncmp(reply, "ok\nqueries ", 11) == 0 && well_formed(reply, n));
	return 0;
}
