/*
 * libFuzzer target for the health and metrics endpoints (src/http/): the
 * input is what one client sends on one TCP connection to an endpoint that
 * serves /health, /ready and /metrics (health.listen and metrics.listen on
 * one address, as `make run` has them). The bytes go over loopback, half-
 * closed after the last one, to the real endpoint: libmicrohttpd's parser,
 * our routes, the connection places and deadlines of http.c's loop.
 *
 * The daemon's state is not what is fuzzed: daemon_alive, daemon_ready and
 * metrics_collect are linked wrapped (-Wl,--wrap, see the Makefile) to
 * answer as a live daemon waiting for its first sync would, with a
 * Prometheus text as long as a real one, so no worker or resolver has to run.
 *
 * Checks: the endpoint closes every connection (it never waits for more
 * from a client that has said all it will: no input may hang); whatever it
 * sends starts with an HTTP/1.x status line; and after every input a
 * well-formed probe still gets 200 "ok", so no input leaves a connection
 * place taken or the loop stopped. libmicrohttpd itself is not built with
 * the sanitizers, but what it allocates and copies goes through theirs.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "daemon/daemon.h"
#include "fuzz.h"
#include "http/http.h"
#include "log/log.h"
#include "metrics/metrics.h"
#include "privs/privs.h"

#define REPLY_MAX (1 << 20)
#define CLOSE_WAIT_MS 9000 /* the endpoint's 5 s deadline, and room for a busy machine */

static struct daemon daemon_state;
static struct http *endpoint;
static uint16_t port;

bool __wrap_daemon_alive(const struct daemon *d, char *why, size_t whylen);
bool __wrap_daemon_ready(const struct daemon *d, char *why, size_t whylen);
char *__wrap_metrics_collect(const struct daemon *d, size_t *len);

bool __wrap_daemon_alive(const struct daemon *d, char *why, size_t whylen)
{
	(void)d;
	snprintf(why, whylen, "ok");
	return true;
}

bool __wrap_daemon_ready(const struct daemon *d, char *why, size_t whylen)
{
	(void)d;
	snprintf(why, whylen, "waiting for the first Kubernetes sync");
	return false;
}

/* About the size of a real scrape (14 KiB without Kubernetes). */
char *__wrap_metrics_collect(const struct daemon *d, size_t *len)
{
	struct metrics_text t;
	char name[64];

	(void)d;
	metrics_text_init(&t);
	for (unsigned i = 0; i < 120; i++) {
		snprintf(name, sizeof name, "localdns_fuzz_family_%u_total", i);
		metrics_family(&t, name, "counter", "A family as long as the real ones are.");
		metrics_sample_u64(&t, name, NULL, 0, i);
	}
	return metrics_text_take(&t, len);
}

/* A port nothing listens on now (the endpoint binds it with SO_REUSEADDR). */
static uint16_t free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	      getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	close(fd);
	return ntohs(a.sin_port);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char yaml[256], err[CONFIG_ERR_MAX];
	struct config *cfg;

	(void)argc;
	(void)argv;
	log_setup(LOG_ERROR, LOG_FORMAT_LOGFMT);
	privs_use_seccomp(false); /* the sanitizers' own calls are not on the http list */
	port = free_port();
	snprintf(yaml, sizeof yaml,
		 "health: {listen: \"127.0.0.1:%u\"}\nmetrics: {listen: \"127.0.0.1:%u\"}\n",
		 (unsigned)port, (unsigned)port);
	CHECK(config_load_string("fuzz.yaml", yaml, strlen(yaml), &cfg, err, sizeof err) == 0);
	daemon_state.cfg = cfg;
	endpoint = http_start(&daemon_state, err, sizeof err);
	if (!endpoint) {
		fprintf(stderr, "fuzz_http: %s\n", err);
		abort();
	}
	return 0;
}

/* A connection to the endpoint. A connect that has to send its SYN again
 * (a full accept queue, or a SYN that met one of the thousands of TIME_WAIT
 * sockets a run leaves, on a loaded machine) takes a second, and libFuzzer's
 * -timeout alarm interrupts it (EINTR): the kernel goes on connecting, and
 * it is the connection's outcome that counts (CI at 66d67ff). */
static int connect_endpoint(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int err = 0;
	socklen_t len = sizeof err;

	CHECK(fd >= 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
		return fd;
	CHECK(errno == EINTR);
	CHECK(fuzz_writable_in_time(fd, CLOSE_WAIT_MS));
	CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0);
	return fd;
}

/* Send all of data (or what the endpoint takes before it closes), half-close
 * (after a pause, when asked), and read until the endpoint closes; what it
 * sent, in reply (len in *n). */
static void exchange(const uint8_t *data, size_t size, bool pause, char *reply, size_t *n)
{
	int fd = connect_endpoint();
	size_t sent = 0;

	while (sent < size) {
		ssize_t k = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
		if (k <= 0)
			break; /* it closed on us: a bad request, answered or not */
		sent += (size_t)k;
	}
	/* libmicrohttpd's epoll is edge-triggered and it stops reading after a
	 * short read: an end of stream that comes with the last bytes is only
	 * seen at the endpoint's 5 s deadline. A moment between them keeps the
	 * runs fast; when it is not enough, the deadline closes the connection. */
	if (pause)
		usleep(1000);
	shutdown(fd, SHUT_WR);
	*n = 0;
	for (;;) {
		CHECK(fuzz_readable_in_time(fd, CLOSE_WAIT_MS)); /* never left hanging */
		ssize_t k = recv(fd, reply + *n, REPLY_MAX - 1 - *n, 0);
		if (k < 0 && errno == ECONNRESET)
			break;
		CHECK(k >= 0);
		if (k == 0 || (*n += (size_t)k) == REPLY_MAX - 1)
			break;
	}
	reply[*n] = '\0';
	close(fd);
}

/* "HTTP/1.x NNN " */
static bool status_line(const char *reply)
{
	return strncmp(reply, "HTTP/1.", 7) == 0 && (reply[7] == '0' || reply[7] == '1') &&
	       reply[8] == ' ' && reply[9] >= '1' && reply[9] <= '5' && reply[10] >= '0' &&
	       reply[10] <= '9' && reply[11] >= '0' && reply[11] <= '9' && reply[12] == ' ';
}

/* What the probe got, and the endpoint's own counts (a refusal or a deadline
 * means a place was still taken), before libFuzzer keeps the input. */
static void probe_failed(const char *reply, size_t n)
{
	struct http_stats st;

	http_stats(&st);
	fprintf(stderr, "fuzz_http: the probe after this input got %zu bytes \"%.200s\"; "
		"connections refused %" PRIu64 ", closed at the deadline %" PRIu64 "\n",
		n, reply, st.refused, st.closed_deadline);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char reply[REPLY_MAX];
	static const char probe[] = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
				    "Connection: close\r\n\r\n";
	size_t n;

	exchange(data, size, true, reply, &n);
	CHECK(n == 0 || status_line(reply));
	/* a whole request that asks to close: answered, then closed, at once */
	exchange((const uint8_t *)probe, sizeof probe - 1, false, reply, &n);
	if (strncmp(reply, "HTTP/1.1 200 ", 13) != 0 || !strstr(reply, "\r\n\r\nok\n"))
		probe_failed(reply, n);
	return 0;
}
