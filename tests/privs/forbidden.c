/*
 * tests/privs/forbidden.c — the daemon with two additions, for
 * tests/integration/test_privileges.py, as code an attacker had taken over
 * on the query path would behave:
 *
 *   - a worker that receives a query for forbidden-syscall.test makes the
 *     syscall named by $LOCALDNS_TEST_SYSCALL at once;
 *   - the resolver thread, asked for read-a-file.test (a cache miss, so it
 *     asks libunbound: ub_resolve_event, on that thread, whose loop runs
 *     libunbound too), tries to open $LOCALDNS_TEST_READ for reading;
 *   - the main thread, at a reload (SIGHUP), makes the syscall named by
 *     $LOCALDNS_TEST_MAIN_SYSCALL before it reloads, as code that took the
 *     main thread over through memory it shares with a worker would;
 *   - the keeper's main thread (`localdns keeper`), once its working thread
 *     runs and it waits for it, makes $LOCALDNS_TEST_KEEPER_SYSCALL.
 *
 * Linked from the daemon's own objects with -Wl,--wrap for recvmmsg,
 * ub_resolve_event, daemon_reload and pthread_join, so every call of those
 * comes here first;
 * build/localdns is linked without them and has no such path. The syscall is made with syscall(2),
 * so the filter sees exactly it and no glibc wrapper's extra calls. If the
 * process survives (no filter, or a call the filter lets fail), the result
 * goes to stderr and the worker goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unbound.h>
#include <unbound-event.h>
#include <unistd.h>

#define PATH_MAX_LINE 512

/* The question's name as it is on the wire. */
static const char cue[] = "\021forbidden-syscall\004test";

static long attempt(const char *what)
{
	static char *const argv[] = {"/bin/true", NULL};

	if (strcmp(what, "netlink") == 0)
		return syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
	if (strcmp(what, "execve") == 0)
		return syscall(SYS_execve, argv[0], argv, environ);
	if (strcmp(what, "open-write") == 0)
		return syscall(SYS_openat, AT_FDCWD, getenv("LOCALDNS_TEST_PATH"),
			       O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (strcmp(what, "open-read") == 0)
		return syscall(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (strcmp(what, "mprotect-exec") == 0)
		return syscall(SYS_mprotect, (void *)((unsigned long)&cue & ~4095UL), 4096,
			       PROT_READ | PROT_EXEC);
	/* What the main thread's deny-list kills; each harmless if it got through. */
	if (strcmp(what, "fork") == 0) /* with no filter a child would run on: only with one */
		return syscall(SYS_fork);
	if (strcmp(what, "ptrace-peek") == 0)   /* a process we do not trace: ESRCH */
		return syscall(SYS_ptrace, PTRACE_PEEKDATA, getppid(), &cue, NULL);
	if (strcmp(what, "unshare-user") == 0)  /* a threaded process: EINVAL */
		return syscall(SYS_unshare, CLONE_NEWUSER);
	if (strcmp(what, "io-uring") == 0)      /* a bad address: EFAULT */
		return syscall(SYS_io_uring_setup, 1, NULL);
	if (strcmp(what, "personality") == 0)   /* asks, changes nothing */
		return syscall(SYS_personality, 0xffffffffUL);
	errno = EINVAL;
	return -1;
}

static void report(const char *what, long rc)
{
	char line[160];
	int n = snprintf(line, sizeof line, "forbidden syscall %s returned %ld (%s)\n", what, rc,
			 rc < 0 ? strerror(errno) : "ok");
	ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);

	(void)ignored;
}

int __real_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *t);

int __wrap_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *t)
{
	int got = __real_recvmmsg(fd, v, n, flags, t);
	const char *what = getenv("LOCALDNS_TEST_SYSCALL");

	for (int i = 0; what && i < got; i++) {
		const struct iovec *head = &v[i].msg_hdr.msg_iov[0];
		size_t len = v[i].msg_len < head->iov_len ? v[i].msg_len : head->iov_len;
		if (memmem(head->iov_base, len, cue, sizeof cue - 1))
			report(what, attempt(what));
	}
	return got;
}

int __real_ub_resolve_event(struct ub_ctx *ctx, const char *name, int rrtype, int rrclass,
			    void *mydata, ub_event_callback_type callback, int *async_id);

int __wrap_ub_resolve_event(struct ub_ctx *ctx, const char *name, int rrtype, int rrclass,
			    void *mydata, ub_event_callback_type callback, int *async_id)
{
	const char *path = getenv("LOCALDNS_TEST_READ");

	if (path && strstr(name, "read-a-file.test")) {
		long rc = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
		char line[PATH_MAX_LINE];
		int n = snprintf(line, sizeof line, "resolver read %s returned %ld (%s)\n", path, rc,
				 rc < 0 ? strerror(errno) : "ok");
		ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);
		(void)ignored;
		if (rc >= 0)
			close((int)rc);
	}
	return __real_ub_resolve_event(ctx, name, rrtype, rrclass, mydata, callback, async_id);
}

struct daemon;
int __real_daemon_reload(struct daemon *d, char *err, size_t errlen);

int __wrap_daemon_reload(struct daemon *d, char *err, size_t errlen)
{
	const char *what = getenv("LOCALDNS_TEST_MAIN_SYSCALL");

	if (what)
		report(what, attempt(what));
	return __real_daemon_reload(d, err, errlen);
}

int __real_pthread_join(pthread_t thread, void **ret);

int __wrap_pthread_join(pthread_t thread, void **ret)
{
	const char *what = getenv("LOCALDNS_TEST_KEEPER_SYSCALL");

	if (what && gettid() == getpid()) /* the keeper's main thread, waiting */
		report(what, attempt(what));
	return __real_pthread_join(thread, ret);
}
