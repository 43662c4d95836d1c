/*
 * http/http.c — libmicrohttpd daemons and the three routes.
 *
 * We open, bind and listen on each socket ourselves and hand it to
 * libmicrohttpd (MHD_OPTION_LISTEN_SOCKET): the bind error then comes with
 * its errno and the key it belongs to, and the socket gets SO_REUSEPORT.
 * Each daemon runs libmicrohttpd's own thread (epoll where available); a
 * request is answered within the access callback, on that thread, which
 * has no capability and the "http" seccomp list (privs.h): it is started
 * from a short-lived thread restricted so, whose limits and name it
 * inherits. Scrapes
 * and probes are rare and small: a connection cap and an idle timeout are
 * all the protection they need.
 */
#include "http/http.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdbool.h>
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

#define MAX_CONNECTIONS 32   /* per daemon; probes and scrapes only */
#define IDLE_TIMEOUT_S 10
#define LISTEN_BACKLOG 64
#define REASON_MAX 256

static const char text_plain[] = "text/plain; charset=utf-8";
static const char prometheus_text[] = "text/plain; version=0.0.4; charset=utf-8";

struct endpoint {
	struct MHD_Daemon *mhd;
	const struct daemon *d;
	bool health;  /* /health and /ready */
	bool metrics; /* /metrics */
};

struct http {
	struct endpoint ep[2];
	size_t n;
};

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

/* ---- daemons ---------------------------------------------------------------- */

static void log_mhd(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	(void)cls;
	vsnprintf(msg, sizeof msg, fmt, ap);
	n = strlen(msg);
	while (n > 0 && msg[n - 1] == '\n')
		msg[--n] = '\0';
	log_warn("http endpoint", "error", msg);
}

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

struct mhd_start {
	struct endpoint *ep;
	int fd;
};

static void start_mhd(void *arg)
{
	struct mhd_start *st = arg;

	st->ep->mhd = MHD_start_daemon(
		MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG, 0, NULL, NULL,
		on_request, st->ep, MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL, /* first, or some
		messages go to stderr raw */
		MHD_OPTION_LISTEN_SOCKET, st->fd, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
		MHD_OPTION_END);
}

static int start_endpoint(struct endpoint *ep, const char *key, const char *address,
			  char *err, size_t errlen)
{
	struct mhd_start st = {.ep = ep, .fd = listen_on(key, address, err, errlen)};

	if (st.fd < 0)
		return -1;
	/* libmicrohttpd's thread is started by one already restricted: it inherits that. */
	if (privs_run_as(PRIVS_HTTP, "http", start_mhd, &st, err, errlen) < 0) {
		close(st.fd);
		return -1;
	}
	if (!ep->mhd) {
		snprintf(err, errlen, "%s: cannot start the HTTP server on %s", key, address);
		close(st.fd);
		return -1;
	}
	log_info(ep->health && ep->metrics ? "serving /health, /ready and /metrics"
		 : ep->health		   ? "serving /health and /ready"
					   : "serving /metrics",
		 "address", address);
	return 0;
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
		*ep = (struct endpoint){.d = d, .health = true, .metrics = shared};
		if (start_endpoint(ep, "health.listen", health, err, errlen) < 0)
			goto fail;
		h->n++;
	}
	if (metrics[0] && !shared) {
		struct endpoint *ep = &h->ep[h->n];
		*ep = (struct endpoint){.d = d, .metrics = true};
		if (start_endpoint(ep, "metrics.listen", metrics, err, errlen) < 0)
			goto fail;
		h->n++;
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
		MHD_stop_daemon(h->ep[i].mhd); /* joins its thread, closes the socket */
	free(h);
}
