/*
 * http/http.c — libmicrohttpd daemons, the three routes, and the limits
 * that keep one client from starving the others.
 *
 * We open, bind and listen on each socket ourselves and hand it to
 * libmicrohttpd (MHD_OPTION_LISTEN_SOCKET): the bind error then comes with
 * its errno and the key it belongs to, and the socket gets SO_REUSEPORT.
 *
 * Limits (docs/security.md, "Health and metrics endpoints"). Anyone who
 * reaches the address may connect, and a kubelet whose probe cannot get in
 * restarts localdns: so a client may hold MAX_PER_ADDRESS of the
 * endpoint's MAX_CONNECTIONS (libmicrohttpd's per-IP and total limits),
 * and each request must be over, reply sent, within DEADLINE_MS of its
 * connection or of the previous reply on it. libmicrohttpd only closes
 * connections that go quiet (its timeout is an idle time, reset by every
 * byte), so a client sending a header line every few seconds would keep a
 * place for ever: the deadline is ours. Each endpoint runs its daemon from
 * a loop of its own ("external polling": MHD_run after a poll on
 * libmicrohttpd's epoll descriptor), and that loop, which alone runs
 * libmicrohttpd's code, shuts down the socket of a connection past its
 * deadline (libmicrohttpd then sees the end of the stream and closes it).
 * The connections are learnt from libmicrohttpd's notifications, on that
 * same thread. Its warnings (refused connections, requests cut short) are
 * logged at most once a minute per endpoint, with a count of those not
 * logged, and counted (http_stats).
 *
 * The loop is a thread of the "http" kind (privs.h): no capability, the
 * http seccomp list. A request is answered within the access callback, on
 * that thread; probes and scrapes are rare and small.
 */
#include "http/http.h"

#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "daemon/daemon.h"
#include "log/log.h"
#include "metrics/metrics.h"
#include "privs/privs.h"
#include "util/clock.h"
#include "util/wake.h"

#define MAX_CONNECTIONS 64   /* per endpoint; probes and scrapes only */
#define MAX_PER_ADDRESS 8    /* of those, per client address */
#define DEADLINE_MS 5000     /* a request, from its connection or the previous reply to its reply sent */
#define LOG_EVERY_MS 60000   /* one warning line a minute per endpoint at most */
#define LISTEN_BACKLOG 64
#define REASON_MAX 256

static const char text_plain[] = "text/plain; charset=utf-8";
static const char prometheus_text[] = "text/plain; version=0.0.4; charset=utf-8";

/* libmicrohttpd's words when it refuses a connection (per-IP or total limit). */
static const char refused_message[] = "Server reached connection limit";

/* A connection libmicrohttpd holds, as the loop sees it. */
struct conn {
	struct MHD_Connection *c; /* NULL: a free place */
	int fd;
	int64_t deadline_ms;      /* monotonic_ms; INT64_MAX once shut down */
};

struct endpoint {
	struct MHD_Daemon *mhd;
	const struct daemon *d;
	bool health;  /* /health and /ready */
	bool metrics; /* /metrics */
	char address[64];
	int stop_fd;  /* eventfd: the loop ends when it is readable */
	pthread_t thread;
	bool running;
	/* Below: the loop's own (and libmicrohttpd's start and stop, before and after it). */
	struct conn conns[MAX_CONNECTIONS];
	int64_t log_next_ms;     /* no warning line before this */
	uint64_t log_suppressed; /* warnings not logged since the last line */
};

struct http {
	struct endpoint ep[2];
	size_t n;
};

static _Atomic uint64_t refused_total, deadline_total;

void http_stats(struct http_stats *out)
{
	out->refused = atomic_load_explicit(&refused_total, memory_order_relaxed);
	out->closed_deadline = atomic_load_explicit(&deadline_total, memory_order_relaxed);
}

/* ---- warnings, at most one line a minute ------------------------------------------- */

static void warn_limited(struct endpoint *ep, const char *what)
{
	int64_t now = monotonic_ms();
	char suppressed[24];

	if (now < ep->log_next_ms) {
		ep->log_suppressed++;
		return;
	}
	snprintf(suppressed, sizeof suppressed, "%" PRIu64, ep->log_suppressed);
	log_warn("http endpoint (said at most once a minute)", "address", ep->address, "error",
		 what, "suppressed", suppressed);
	ep->log_next_ms = now + LOG_EVERY_MS;
	ep->log_suppressed = 0;
}

static void log_mhd(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	vsnprintf(msg, sizeof msg, fmt, ap);
	n = strlen(msg);
	while (n > 0 && msg[n - 1] == '\n')
		msg[--n] = '\0';
	if (strncmp(msg, refused_message, sizeof refused_message - 1) == 0)
		atomic_fetch_add_explicit(&refused_total, 1, memory_order_relaxed);
	warn_limited(cls, msg);
}

/* ---- replies -------------------------------------------------------------- */

/* Queue body (copied, or taken and freed when owned) with status and type. */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
			     char *body, size_t len, bool owned)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
		len, body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_MUST_COPY);
	enum MHD_Result queued;

	if (!r) {
		if (owned)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	queued = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return queued;
}

static enum MHD_Result reply_line(struct MHD_Connection *c, unsigned status, const char *line)
{
	char body[REASON_MAX + 2];
	int n = snprintf(body, sizeof body, "%s\n", line);

	return reply(c, status, text_plain, body, (size_t)n < sizeof body ? (size_t)n : sizeof body - 1,
		     false);
}

/* 200 with why when the check passed, else 503 with why. */
static enum MHD_Result reply_check(struct MHD_Connection *c, bool passed, const char *why)
{
	return reply_line(c, passed ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, why);
}

static enum MHD_Result reply_metrics(struct MHD_Connection *c, const struct daemon *d)
{
	size_t len;
	char *text = metrics_collect(d, &len);

	if (!text)
		return reply_line(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	return reply(c, MHD_HTTP_OK, prometheus_text, text, len, true);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_len, void **request_state)
{
	const struct endpoint *ep = cls;
	char why[REASON_MAX];

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)request_state;
	/* Answered on the first call: a request with a body gets its 405 before
	 * the body is read, and libmicrohttpd closes the connection after it. */
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply_line(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD");
	if (ep->health && strcmp(url, "/health") == 0)
		return reply_check(c, daemon_alive(ep->d, why, sizeof why), why);
	if (ep->health && strcmp(url, "/ready") == 0)
		return reply_check(c, daemon_ready(ep->d, why, sizeof why), why);
	if (ep->metrics && strcmp(url, "/metrics") == 0)
		return reply_metrics(c, ep->d);
	return reply_line(c, MHD_HTTP_NOT_FOUND, "not found");
}

/* ---- the connections and their deadlines --------------------------------------- */

static struct conn *free_place(struct endpoint *ep)
{
	for (size_t i = 0; i < MAX_CONNECTIONS; i++)
		if (!ep->conns[i].c)
			return &ep->conns[i];
	return NULL;
}

/* A connection starts: it has DEADLINE_MS for its first request. Its place
 * is freed before libmicrohttpd counts it gone, so there is always one. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct endpoint *ep = cls;
	struct conn *place = *socket_context;
	const union MHD_ConnectionInfo *info;

	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (place)
			place->c = NULL;
		*socket_context = NULL;
		return;
	}
	info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	place = free_place(ep);
	if (!place || !info) {
		if (info)
			shutdown(info->connect_fd, SHUT_RDWR);
		return;
	}
	*place = (struct conn){
		.c = c, .fd = info->connect_fd, .deadline_ms = monotonic_ms() + DEADLINE_MS};
	*socket_context = place;
}

/* A reply went out in full: the next request on the connection (keep-alive)
 * has DEADLINE_MS from now. */
static void on_completed(void *cls, struct MHD_Connection *c, void **request_state,
			 enum MHD_RequestTerminationCode toe)
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn *place = info ? info->socket_context : NULL;

	(void)cls;
	(void)request_state;
	if (place && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && place->deadline_ms != INT64_MAX)
		place->deadline_ms = monotonic_ms() + DEADLINE_MS;
}

/* Shut down what is past its deadline; the time until the next one (-1: none). */
static int enforce_deadlines(struct endpoint *ep, int64_t now)
{
	int64_t next = INT64_MAX;

	for (size_t i = 0; i < MAX_CONNECTIONS; i++) {
		struct conn *k = &ep->conns[i];
		if (!k->c || k->deadline_ms == INT64_MAX)
			continue;
		if (k->deadline_ms > now) {
			next = k->deadline_ms < next ? k->deadline_ms : next;
			continue;
		}
		shutdown(k->fd, SHUT_RDWR);
		k->deadline_ms = INT64_MAX;
		atomic_fetch_add_explicit(&deadline_total, 1, memory_order_relaxed);
		warn_limited(ep, "a request not done within 5 s of its connection; closed");
	}
	return next == INT64_MAX ? -1 : (int)(next - now);
}

/* How long the loop may sleep: until the next deadline or libmicrohttpd's next timeout. */
static int wait_ms(struct endpoint *ep, int until_deadline)
{
	MHD_UNSIGNED_LONG_LONG mhd_ms;
	int ms = until_deadline;

	if (MHD_get_timeout(ep->mhd, &mhd_ms) == MHD_YES &&
	    (ms < 0 || mhd_ms < (MHD_UNSIGNED_LONG_LONG)ms))
		ms = mhd_ms > INT32_MAX ? INT32_MAX : (int)mhd_ms;
	return ms;
}

static void *serve_endpoint(void *arg)
{
	struct endpoint *ep = arg;
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(ep->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	struct pollfd fds[2] = {{.fd = info->epoll_fd, .events = POLLIN},
				{.fd = ep->stop_fd, .events = POLLIN}};
	int until_deadline = -1;

	for (;;) {
		if (poll(fds, 2, wait_ms(ep, until_deadline)) < 0 && errno != EINTR)
			log_error("http endpoint: poll failed", "error", strerror(errno));
		if (fds[1].revents)
			return NULL;
		MHD_run(ep->mhd);
		until_deadline = enforce_deadlines(ep, monotonic_ms());
	}
}

/* ---- daemons ---------------------------------------------------------------- */

/* A bound, listening socket for key's ip:port, or -1 with err naming key. */
static int listen_on(const char *key, const char *address, char *err, size_t errlen)
{
	struct config_hostport hp;
	const char *why;
	const int one = 1;
	int fd;

	if (config_value_hostport(address, 0, &hp, &why) < 0) {
		snprintf(err, errlen, "%s: \"%s\" %s", key, address, why);
		return -1;
	}
	fd = socket(hp.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
	    bind(fd, (const struct sockaddr *)&hp.addr, hp.addr_len) < 0 ||
	    listen(fd, LISTEN_BACKLOG) < 0) {
		snprintf(err, errlen, "%s: cannot listen on %s: %s", key, hp.text, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* libmicrohttpd without a thread of its own: serve_endpoint drives it. */
static struct MHD_Daemon *start_mhd(struct endpoint *ep, int fd)
{
	return MHD_start_daemon(
		MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, ep,
		MHD_OPTION_EXTERNAL_LOGGER, log_mhd, ep, /* first, or some messages go to stderr raw */
		MHD_OPTION_LISTEN_SOCKET, fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)MAX_PER_ADDRESS,
		/* idle connections: the deadline closes them anyway; this is libmicrohttpd's own */
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(DEADLINE_MS / 1000),
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, ep,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, ep,
		MHD_OPTION_END);
}

static int start_endpoint(struct endpoint *ep, const char *key, const char *address,
			  char *err, size_t errlen)
{
	int fd = listen_on(key, address, err, errlen);

	if (fd < 0)
		return -1;
	snprintf(ep->address, sizeof ep->address, "%s", address);
	ep->stop_fd = wake_open();
	ep->mhd = ep->stop_fd < 0 ? NULL : start_mhd(ep, fd);
	if (!ep->mhd) {
		snprintf(err, errlen, "%s: cannot start the HTTP server on %s", key, address);
		close(fd);
		return -1;
	}
	if (privs_thread_create(&ep->thread, PRIVS_HTTP, "http", serve_endpoint, ep, err,
				errlen) < 0)
		return -1;
	ep->running = true;
	log_info(ep->health && ep->metrics ? "serving /health, /ready and /metrics"
		 : ep->health		   ? "serving /health and /ready"
					   : "serving /metrics",
		 "address", address);
	return 0;
}

/* Stop the loop, then the daemon (which closes the socket); safe on a half-started one. */
static void stop_endpoint(struct endpoint *ep)
{
	if (ep->running) {
		if (!wake_send(ep->stop_fd))
			log_error("http endpoint: cannot stop its thread", "error", strerror(errno));
		pthread_join(ep->thread, NULL);
	}
	if (ep->mhd)
		MHD_stop_daemon(ep->mhd);
	if (ep->stop_fd >= 0)
		close(ep->stop_fd);
}

struct http *http_start(const struct daemon *d, char *err, size_t errlen)
{
	const char *health = d->cfg->health.listen, *metrics = d->cfg->metrics.listen;
	struct http *h = calloc(1, sizeof *h);

	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	/* Both keys hold normalised ip:port text, so equal text is the same socket. */
	bool shared = health[0] && strcmp(health, metrics) == 0;
	if (health[0]) {
		struct endpoint *ep = &h->ep[h->n];
		*ep = (struct endpoint){.d = d, .health = true, .metrics = shared, .stop_fd = -1};
		h->n++;
		if (start_endpoint(ep, "health.listen", health, err, errlen) < 0)
			goto fail;
	}
	if (metrics[0] && !shared) {
		struct endpoint *ep = &h->ep[h->n];
		*ep = (struct endpoint){.d = d, .metrics = true, .stop_fd = -1};
		h->n++;
		if (start_endpoint(ep, "metrics.listen", metrics, err, errlen) < 0)
			goto fail;
	}
	return h;
fail:
	http_stop(h);
	return NULL;
}

void http_stop(struct http *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n; i++)
		stop_endpoint(&h->ep[i]);
	free(h);
}
