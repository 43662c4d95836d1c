/*
 * daemon/watch.c — reload when the config files change.
 *
 * inotify watches directories, not the files: kubelet updates a mounted
 * ConfigMap by writing a new timestamped directory and renaming a `..data`
 * symlink over the old one (config.yaml -> ..data/config.yaml), so the file
 * the daemon opened is never written; editors often write a temporary file
 * and rename it over the old one. Each file therefore gives two
 * directories: the one its name is in (where `..data` or the file itself is
 * replaced) and the one it resolves to (where it is written in place
 * through a symlink). Every event there starts the quiet period again;
 * when WATCH_QUIET_MS pass without one, the watches are set up again (the
 * resolved directory moves with every kubelet update, and static.files may
 * have changed) and daemon_reload_if_changed compares the files' bytes with
 * those read at the last reload.
 */
#include "daemon/internal.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "log/log.h"

#define EVENTS (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | \
		IN_DELETE_SELF | IN_MOVE_SELF)

struct daemon_watch {
	struct daemon *d;
	int epfd;                /* the two below, so main polls one descriptor */
	int inotify_fd;
	int timer_fd;            /* the quiet period */
	int *wds;                /* the watches in place */
	size_t n_wds;
	uint_fast64_t armed_after; /* reloads_ok when they were set up */
};

/* The directory part of path, into out (PATH_MAX). */
static void dir_of(const char *path, char *out)
{
	char copy[PATH_MAX];

	snprintf(copy, sizeof copy, "%s", path);
	snprintf(out, PATH_MAX, "%s", dirname(copy));
}

static bool has(const int *wds, size_t n, int wd)
{
	for (size_t i = 0; i < n; i++)
		if (wds[i] == wd)
			return true;
	return false;
}

/* Watch dir, unless it is watched already (two paths, one inode). */
static void add_dir(struct daemon_watch *w, const char *dir, int *wds, size_t *n)
{
	int wd = inotify_add_watch(w->inotify_fd, dir, EVENTS | IN_ONLYDIR);

	if (wd < 0) {
		log_warn("cannot watch a config directory; SIGHUP still reloads", "directory", dir,
			 "error", strerror(errno));
		return;
	}
	if (!has(wds, *n, wd))
		wds[(*n)++] = wd;
}

/* Watch the directories of the running config's files, and no others. */
static void arm(struct daemon_watch *w)
{
	size_t n_files, n = 0;
	char **files = daemon_files(w->d, &n_files);
	char dir[PATH_MAX], resolved[PATH_MAX];
	int *wds;

	if (!files)
		return;
	w->armed_after = atomic_load(&w->d->reloads_ok);
	wds = calloc(2 * n_files + 1, sizeof *wds);
	for (size_t i = 0; wds && i < n_files; i++) {
		dir_of(files[i], dir);
		add_dir(w, dir, wds, &n);
		if (realpath(files[i], resolved)) {
			dir_of(resolved, dir);
			add_dir(w, dir, wds, &n);
		}
	}
	for (size_t i = 0; i < n_files; i++)
		free(files[i]);
	free(files);
	if (!wds)
		return;
	for (size_t i = 0; i < w->n_wds; i++)
		if (!has(wds, n, w->wds[i]))
			inotify_rm_watch(w->inotify_fd, w->wds[i]); /* gone already is fine */
	free(w->wds);
	w->wds = wds;
	w->n_wds = n;
}

static void start_quiet_period(struct daemon_watch *w);

static int watch_fd(int epfd, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

struct daemon_watch *daemon_watch_new(struct daemon *d, char *err, size_t errlen)
{
	struct daemon_watch *w = calloc(1, sizeof *w);

	if (!w) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	w->d = d;
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	w->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (w->epfd < 0 || w->inotify_fd < 0 || w->timer_fd < 0 ||
	    watch_fd(w->epfd, w->inotify_fd) < 0 || watch_fd(w->epfd, w->timer_fd) < 0) {
		snprintf(err, errlen, "cannot watch the config file: %s", strerror(errno));
		daemon_watch_free(w);
		return NULL;
	}
	arm(w);
	/* A change between the first load and these watches made no event:
	 * compare the bytes once the quiet period is over, as after one. */
	start_quiet_period(w);
	return w;
}

int daemon_watch_fd(const struct daemon_watch *w)
{
	return w->epfd;
}

/* Read every pending event; true if there was any. */
static bool drain_events(struct daemon_watch *w)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool any = false;
	ssize_t n;

	while ((n = read(w->inotify_fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
		any = any || n > 0;
	return any;
}

static void start_quiet_period(struct daemon_watch *w)
{
	struct itimerspec t = {.it_value = {.tv_nsec = WATCH_QUIET_MS * 1000000L}};

	timerfd_settime(w->timer_fd, 0, &t, NULL);
}

static bool quiet_period_over(struct daemon_watch *w)
{
	uint64_t expirations;

	return read(w->timer_fd, &expirations, sizeof expirations) == sizeof expirations;
}

void daemon_watch_process(struct daemon_watch *w)
{
	char err[CONFIG_ERR_MAX];

	if (drain_events(w)) {
		start_quiet_period(w); /* also forgets an expiry not read yet */
		return;
	}
	if (quiet_period_over(w)) {
		arm(w);
		daemon_reload_if_changed(w->d, err, sizeof err);
	}
	/* After any reload (SIGHUP, `ctl reload` too) static.files may name other directories. */
	if (atomic_load(&w->d->reloads_ok) != w->armed_after)
		arm(w);
}

void daemon_watch_free(struct daemon_watch *w)
{
	if (!w)
		return;
	if (w->epfd >= 0)
		close(w->epfd);
	if (w->inotify_fd >= 0)
		close(w->inotify_fd);
	if (w->timer_fd >= 0)
		close(w->timer_fd);
	free(w->wds);
	free(w);
}
