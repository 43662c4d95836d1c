/*
 * control — the socket file, the control thread and the connection I/O.
 * See control.h for the protocol.
 *
 * CONTROL_THREADS threads, each serving one connection at a time: the
 * commands are for operators and probes, not for traffic, so a few threads
 * with fixed memory each are enough, and a slow `lookup` (up to
 * upstream.timeout) holds up only its own client. They all wait on the
 * listening socket (non-blocking: the one that loses the race to accept
 * goes back to waiting). A client that stalls costs at most
 * CONTROL_IO_TIMEOUT_MS per wait; everything waits on the stop eventfd too,
 * so shutdown never waits for a client.
 */
#include "control/internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <urcu/urcu-memb.h>

#include "log/log.h"
#include "privs/privs.h"
#include "util/wake.h"

#define SOCKET_MODE 0660
#define DIR_MODE 0755
#define LISTEN_BACKLOG 16

/* ---- the socket file ---------------------------------------------------- */

/* mkdir -p for the directories above path. */
static int make_parents(const char *path, char *err, size_t errlen)
{
	char dir[sizeof ((struct sockaddr_un *)0)->sun_path];

	snprintf(dir, sizeof dir, "%s", path);
	for (char *slash = strchr(dir + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		if (mkdir(dir, DIR_MODE) < 0 && errno != EEXIST) {
			snprintf(err, errlen, "control.socket: cannot create directory %s: %s", dir,
				 strerror(errno));
			return -1;
		}
		*slash = '/';
	}
	return 0;
}

static socklen_t unix_address(const char *path, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	snprintf(sa->sun_path, sizeof sa->sun_path, "%s", path);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(sa->sun_path) + 1);
}

/* Mode and identity before listen(): nobody can connect to it before it is 0660. */
static int finish_socket_file(struct control *ctl, const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (chmod(path, SOCKET_MODE) < 0 || stat(path, &st) < 0) {
		snprintf(err, errlen, "control.socket: %s: %s", path, strerror(errno));
		unlink(path);
		return -1;
	}
	ctl->dev = st.st_dev;
	ctl->ino = st.st_ino;
	if (listen(ctl->listen_fd, LISTEN_BACKLOG) < 0) {
		snprintf(err, errlen, "control.socket: listen on %s: %s", path, strerror(errno));
		unlink(path);
		return -1;
	}
	return 0;
}

/* Is a socket file answering? 1 yes, 0 no (refused), -1 cannot tell (err). */
static int socket_answers(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	socklen_t salen = unix_address(path, &sa);
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (probe < 0) {
		snprintf(err, errlen, "control.socket: socket: %s", strerror(errno));
		return -1;
	}
	int rc = connect(probe, (struct sockaddr *)&sa, salen);
	int connect_errno = errno;
	close(probe);
	if (rc == 0)
		return 1;
	if (connect_errno == ECONNREFUSED)
		return 0;
	snprintf(err, errlen, "control.socket: cannot check %s: %s", path, strerror(connect_errno));
	return -1;
}

/*
 * A file at the path: something that is not a socket (refuse: never delete
 * an operator's file), a socket nobody listens on any more (a crash: remove
 * it, 0), or a live localdns's (1): in an upgrade the new process starts
 * beside the old one, which may share the directory (a hostPath), and the
 * new one takes the path over (take_over).
 */
static int clear_stale_socket(const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "control.socket: %s exists and is not a socket", path);
		return -1;
	}
	int live = socket_answers(path, err, errlen);
	if (live != 0)
		return live;
	if (unlink(path) < 0 && errno != ENOENT) {
		snprintf(err, errlen, "control.socket: cannot remove the stale %s: %s", path,
			 strerror(errno));
		return -1;
	}
	log_info("replaced a stale control socket (left by a process that is gone)", "path", path);
	return 0;
}

/* 0, or -1 with errno and, unless the address is in use, err. */
static int bind_path(struct control *ctl, const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	socklen_t salen = unix_address(path, &sa);

	if (bind(ctl->listen_fd, (struct sockaddr *)&sa, salen) == 0)
		return 0;
	int saved = errno;
	if (saved != EADDRINUSE)
		snprintf(err, errlen, "control.socket: cannot bind %s: %s", path, strerror(saved));
	errno = saved;
	return -1;
}

/*
 * Another localdns answers on the path: ours is made ready under a
 * temporary name beside it (bound, mode set, listening) and renamed over
 * it, so `localdns ctl` reaches the newest process from then on and never
 * finds no socket. The other keeps its listening socket and, at its exit,
 * leaves our file alone (remove_socket_file).
 */
static int take_over(struct control *ctl, char *err, size_t errlen)
{
	char tmp[sizeof ctl->path];
	const char *slash = strrchr(ctl->path, '/');
	uint32_t r = 0;

	if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
		r = (uint32_t)getpid();
	int len = snprintf(tmp, sizeof tmp, "%.*s.localdns-%08x",
			   slash ? (int)(slash - ctl->path + 1) : 0, ctl->path, r);
	if (len < 0 || (size_t)len >= sizeof tmp) {
		snprintf(err, errlen, "control.socket: %s answers: another localdns is running "
			 "with this control socket, and the path is too long to take it over",
			 ctl->path);
		return -1;
	}
	if (bind_path(ctl, tmp, err, errlen) < 0) {
		if (errno == EADDRINUSE)
			snprintf(err, errlen, "control.socket: cannot bind %s: %s", tmp,
				 strerror(errno));
		return -1;
	}
	if (finish_socket_file(ctl, tmp, err, errlen) < 0)
		return -1;
	if (rename(tmp, ctl->path) < 0) {
		snprintf(err, errlen, "control.socket: cannot take over %s: %s", ctl->path,
			 strerror(errno));
		unlink(tmp);
		return -1;
	}
	log_info("took over the control socket from another localdns, which keeps running "
		 "(an upgrade's overlap)", "path", ctl->path);
	return 0;
}

static int bind_socket(struct control *ctl, char *err, size_t errlen)
{
	if (bind_path(ctl, ctl->path, err, errlen) == 0)
		return finish_socket_file(ctl, ctl->path, err, errlen);
	if (errno != EADDRINUSE)
		return -1;
	int live = clear_stale_socket(ctl->path, err, errlen);
	if (live < 0)
		return -1;
	if (live == 1)
		return take_over(ctl, err, errlen);
	if (bind_path(ctl, ctl->path, err, errlen) < 0) {
		if (errno == EADDRINUSE)
			snprintf(err, errlen, "control.socket: cannot bind %s: %s", ctl->path,
				 strerror(errno));
		return -1;
	}
	return finish_socket_file(ctl, ctl->path, err, errlen);
}

/* Remove the socket file unless someone else's has replaced it since. */
static void remove_socket_file(const struct control *ctl)
{
	struct stat st;

	if (lstat(ctl->path, &st) == 0 && st.st_dev == ctl->dev && st.st_ino == ctl->ino)
		unlink(ctl->path);
}

static void close_fds(struct control *ctl)
{
	if (ctl->listen_fd >= 0)
		close(ctl->listen_fd);
	if (ctl->stop_fd >= 0)
		close(ctl->stop_fd);
	ctl->listen_fd = ctl->stop_fd = -1;
	for (int i = 0; i < CONTROL_THREADS; i++)
		for (int k = 0; k < 2; k++)
			if (ctl->threads[i].reply_fd[k] >= 0)
				close(ctl->threads[i].reply_fd[k]);
}

int control_open(const struct config *cfg, struct control **out, char *err, size_t errlen)
{
	*out = NULL;
	if (cfg->control.socket[0] == '\0')
		return 0;
	struct control *ctl = calloc(1, sizeof *ctl);
	if (!ctl) {
		snprintf(err, errlen, "control.socket: out of memory");
		return -1;
	}
	snprintf(ctl->path, sizeof ctl->path, "%s", cfg->control.socket);
	for (int i = 0; i < CONTROL_THREADS; i++)
		ctl->threads[i].reply_fd[0] = ctl->threads[i].reply_fd[1] = -1;
	ctl->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	ctl->stop_fd = wake_open();
	if (ctl->listen_fd < 0 || ctl->stop_fd < 0) {
		snprintf(err, errlen, "control.socket: %s", strerror(errno));
		goto fail;
	}
	for (int i = 0; i < CONTROL_THREADS; i++) {
		int *fds = ctl->threads[i].reply_fd;
		if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) < 0) {
			fds[0] = fds[1] = -1;
			snprintf(err, errlen, "control: socketpair: %s", strerror(errno));
			goto fail;
		}
	}
	if (make_parents(ctl->path, err, errlen) < 0 || bind_socket(ctl, err, errlen) < 0)
		goto fail;
	*out = ctl;
	return 0;
fail:
	close_fds(ctl);
	free(ctl);
	return -1;
}

/* ---- connection I/O ----------------------------------------------------- */

bool control_wait(int fd, short events, int stop_fd, int timeout_ms)
{
	struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = stop_fd, .events = POLLIN}};

	for (;;) {
		int n = poll(p, 2, timeout_ms);
		if (n < 0 && errno == EINTR)
			continue;
		return n > 0 && !(p[1].revents & POLLIN) && (p[0].revents & (events | POLLHUP | POLLERR));
	}
}

static void send_all(struct conn *c, const char *p, size_t len)
{
	while (len > 0 && !c->failed) {
		ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			c->failed = !control_wait(c->fd, POLLOUT, c->stop_fd, CONTROL_IO_TIMEOUT_MS);
		} else {
			c->failed = true;
		}
	}
}

/* Send what the buffer holds. */
static void conn_flush(struct conn *c)
{
	send_all(c, c->buf, c->len);
	c->len = 0;
}

void control_conn_write(struct conn *c, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0 && !c->failed) {
		size_t room = sizeof c->buf - c->len;
		size_t n = len < room ? len : room;
		memcpy(c->buf + c->len, p, n);
		c->len += n;
		p += n;
		len -= n;
		if (c->len == sizeof c->buf)
			conn_flush(c);
	}
}

static void conn_vprintf(struct conn *c, const char *fmt, va_list ap)
{
	char line[4096];
	int n = vsnprintf(line, sizeof line, fmt, ap);

	if (n > 0)
		control_conn_write(c, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

void control_conn_printf(struct conn *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conn_vprintf(c, fmt, ap);
	va_end(ap);
}

void control_reply_ok(struct conn *c)
{
	control_conn_write(c, "ok\n", 3);
}

/* "error MESSAGE" / "usage MESSAGE": one line, whatever the message holds. */
static void reply_status(struct conn *c, const char *status, const char *fmt, va_list ap)
{
	char msg[CONFIG_ERR_MAX + 256];

	vsnprintf(msg, sizeof msg, fmt, ap);
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	control_conn_printf(c, "%s %s\n", status, msg);
}

void control_reply_error(struct conn *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	reply_status(c, "error", fmt, ap);
	va_end(ap);
}

void control_reply_usage(struct conn *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	reply_status(c, "usage", fmt, ap);
	va_end(ap);
}

/* ---- serving ------------------------------------------------------------ */

/* The request line, without its newline; false if none came in time. */
static bool read_request(struct conn *c, char *line, size_t cap)
{
	size_t len = 0;

	for (;;) {
		if (!control_wait(c->fd, POLLIN, c->stop_fd, CONTROL_IO_TIMEOUT_MS))
			return false;
		ssize_t n = recv(c->fd, line + len, cap - 1 - len, MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n <= 0)
			return false;
		char *nl = memchr(line + len, '\n', (size_t)n);
		len += (size_t)n;
		if (nl) {
			*nl = '\0';
			return true;
		}
		if (len == cap - 1)
			return false;
	}
}

/* Split on single spaces; false for empty words or too many. */
static bool split_words(char *line, int *argc, char **argv)
{
	*argc = 0;
	for (char *word = line;; word++) {
		char *space = strchr(word, ' ');
		if (*word == '\0' || *word == ' ' || *argc == CONTROL_MAX_ARGS)
			return false;
		argv[(*argc)++] = word;
		if (!space)
			return true;
		*space = '\0';
		word = space;
	}
}

static void serve_connection(struct control_thread *t, int fd)
{
	static _Thread_local struct conn c; /* 16 KiB: one per control thread, not on its stack */
	char line[CONTROL_REQUEST_MAX + 1];
	char *argv[CONTROL_MAX_ARGS];
	int argc;

	c = (struct conn){.fd = fd, .stop_fd = t->ctl->stop_fd};
	if (!read_request(&c, line, sizeof line))
		return;
	line[strcspn(line, "\r")] = '\0';
	if (!split_words(line, &argc, argv))
		control_reply_usage(&c, "a request is a command and up to %d arguments, separated "
				    "by single spaces", CONTROL_MAX_ARGS - 1);
	else
		control_run(t, &c, argc, argv);
	control_conn_write(&c, ".\n", 2);
	conn_flush(&c);
}

static void *control_main(void *arg)
{
	struct control_thread *t = arg;
	struct control *ctl = t->ctl;
	struct pollfd p[2] = {{.fd = ctl->listen_fd, .events = POLLIN},
			      {.fd = ctl->stop_fd, .events = POLLIN}};

	urcu_memb_register_thread();
	for (;;) {
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents & POLLIN)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		int fd = accept4(ctl->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve_connection(t, fd);
		close(fd);
	}
	urcu_memb_unregister_thread();
	return NULL;
}

static void stop_threads(struct control *ctl)
{
	wake_send(ctl->stop_fd);
	for (int i = 0; i < CONTROL_THREADS; i++) {
		struct control_thread *t = &ctl->threads[i];
		if (t->started)
			pthread_join(t->thread, NULL);
		t->started = false;
	}
}

int control_start(struct control *ctl, struct daemon *d, unsigned first_producer, char *err,
		  size_t errlen)
{
	char name[24]; /* privs_thread_create keeps the kernel's 15 characters */

	if (!ctl)
		return 0;
	ctl->d = d;
	for (int i = 0; i < CONTROL_THREADS; i++) {
		struct control_thread *t = &ctl->threads[i];
		t->ctl = ctl;
		t->producer = first_producer + (unsigned)i;
		snprintf(name, sizeof name, "control/%d", i);
		if (privs_thread_create(&t->thread, PRIVS_CONTROL, name, control_main, t, err,
					errlen) < 0) {
			stop_threads(ctl);
			close(ctl->listen_fd);
			ctl->listen_fd = -1;
			return -1;
		}
		t->started = true;
	}
	log_info("control socket ready", "path", ctl->path);
	return 0;
}

void control_stop(struct control *ctl)
{
	if (!ctl)
		return;
	stop_threads(ctl);
	remove_socket_file(ctl);
	close_fds(ctl);
	free(ctl);
}
