/*
 * privs/thread.c — what each thread keeps once it runs: see privs.h,
 * "Per thread".
 *
 * A thread restricts itself (capset(2) and seccomp(2) act on the caller
 * only) in a trampoline that runs before its own function, while the
 * creator waits: a thread that cannot restrict itself never runs its
 * function, and start-up fails with the reason instead.
 *
 * The allow-lists are what each kind of thread was seen to call (strace
 * -f of the whole integration suite, one list per thread name; the suite
 * passes with them, plain and under ASan and UBSan), grouped by purpose.
 * Threads that libraries start (libunbound's, libcurl's resolver threads,
 * libmicrohttpd's, liburcu's call_rcu and hash table resize threads)
 * inherit the list of the thread that started them, so a list covers
 * those too.
 */
#include "privs/privs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <termios.h>

static atomic_bool seccomp_on = true;

void privs_use_seccomp(bool on)
{
	atomic_store(&seccomp_on, on);
}

/* ---- capabilities ---------------------------------------------------------------- */

/*
 * The node monitor keeps CAP_NET_ADMIN (netlink, nftables) when the process
 * has it; every other thread keeps nothing. cap_set_proc is capset(2) on the
 * calling thread: we do not link libpsx, which would make it process-wide.
 */
static int drop_capabilities(enum privs_thread kind, char *err, size_t errlen)
{
	cap_value_t admin = CAP_NET_ADMIN;
	cap_flag_value_t has = CAP_CLEAR;
	cap_t now = cap_get_proc(), want = cap_init();
	int rc = -1;

	if (!now || !want) {
		snprintf(err, errlen, "cannot read capabilities: %s", strerror(errno));
		goto out;
	}
	if (kind == PRIVS_NODE && cap_get_flag(now, admin, CAP_PERMITTED, &has) == 0 &&
	    has == CAP_SET &&
	    (cap_set_flag(want, CAP_EFFECTIVE, 1, &admin, CAP_SET) < 0 ||
	     cap_set_flag(want, CAP_PERMITTED, 1, &admin, CAP_SET) < 0)) {
		snprintf(err, errlen, "cannot keep CAP_NET_ADMIN: %s", strerror(errno));
		goto out;
	}
	if (cap_set_proc(want) < 0) {
		snprintf(err, errlen, "cannot drop capabilities: %s", strerror(errno));
		goto out;
	}
	rc = 0;
out:
	cap_free(want);
	cap_free(now);
	return rc;
}

/* ---- seccomp allow-lists ------------------------------------------------------------ */

#define K(kind) (1u << (kind))
#define WORKER K(PRIVS_WORKER)
#define RESOLVER K(PRIVS_RESOLVER)
#define CONTROL K(PRIVS_CONTROL)
#define HTTP K(PRIVS_HTTP)
#define KUBE K(PRIVS_KUBERNETES)
#define QUERYLOG K(PRIVS_QUERYLOG)
#define FILTERED (WORKER | RESOLVER | CONTROL | HTTP | KUBE | QUERYLOG)
/* Who reads files: trust anchors and unbound.conf, tokens and CA files,
 * /proc for /metrics, openssl.cnf (OpenSSL's first use, ldns's random ID). */
#define READERS (RESOLVER | CONTROL | HTTP | KUBE)
/* Who starts threads: libunbound's, libmicrohttpd's, libcurl's and liburcu's. */
#define SPAWNS (RESOLVER | HTTP | KUBE)

#define WRITE_FLAGS (O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND)
#define INT_ARG 0xffffffffull  /* an int argument: the register's upper half is not its */

/*
 * One line: the kinds it is for; the syscall; allowed (fail = 0) or made
 * to fail with that errno; and at most one condition on an argument,
 * (arg & mask) == value, when mask is not 0.
 */
struct rule {
	unsigned kinds;
	int nr;
	int fail;
	unsigned arg;
	uint64_t mask, value;
};

#define ALLOW(k, name) {.kinds = (k), .nr = SCMP_SYS(name)}
#define FAIL(k, name, err) {.kinds = (k), .nr = SCMP_SYS(name), .fail = (err)}
#define ALLOW_IF(k, name, a, m, v) \
	{.kinds = (k), .nr = SCMP_SYS(name), .arg = (a), .mask = (m), .value = (v)}
#define FAIL_IF(k, name, err, a, m, v) \
	{.kinds = (k), .nr = SCMP_SYS(name), .fail = (err), .arg = (a), .mask = (m), .value = (v)}

static const struct rule rules[] = {
	/* Every thread: memory, locks, clocks, randomness, its own end, its descriptors. */
	ALLOW(FILTERED, read),
	ALLOW(FILTERED, write),
	ALLOW(FILTERED, close),
	ALLOW(FILTERED, futex),
	ALLOW(FILTERED, poll),
	ALLOW(FILTERED, ppoll),
	ALLOW(FILTERED, brk),
	/* Never executable memory: no thread here loads code. */
	ALLOW_IF(FILTERED, mmap, 2, PROT_EXEC, 0),
	ALLOW_IF(FILTERED, mprotect, 2, PROT_EXEC, 0),
	ALLOW(FILTERED, munmap),
	ALLOW(FILTERED, mremap),
	ALLOW(FILTERED, madvise),
	ALLOW(FILTERED, clock_gettime),
	ALLOW(FILTERED, clock_nanosleep),
	ALLOW(FILTERED, nanosleep),
	ALLOW(FILTERED, gettimeofday),
	ALLOW(FILTERED, getpid),
	ALLOW(FILTERED, gettid),
	ALLOW(FILTERED, getrandom),
	ALLOW(FILTERED, sched_yield),
	/* ASan and UBSan builds: their thread start and exit (the same list is shipped). */
	ALLOW(FILTERED, sched_getaffinity),
	ALLOW(FILTERED, sigaltstack),
	ALLOW(FILTERED, membarrier),       /* liburcu's grace periods */
	ALLOW(FILTERED, rt_sigprocmask),
	ALLOW(FILTERED, rt_sigreturn),
	ALLOW(FILTERED, restart_syscall),  /* a wait resumed after a ptrace stop */
	ALLOW(FILTERED, exit),
	ALLOW(FILTERED, exit_group),
	/* Files: opened for reading only, and only by the readers. glibc's
	 * malloc reads /proc/sys/vm/overcommit_memory once, in whichever thread
	 * first gives memory back, and does without it: elsewhere that fails. */
	ALLOW_IF(READERS, openat, 2, WRITE_FLAGS, 0),
	FAIL_IF(WORKER | QUERYLOG, openat, EACCES, 2, WRITE_FLAGS, 0),
	ALLOW(READERS, newfstatat),
	ALLOW(READERS, fstat),
	ALLOW(READERS, lseek),
	ALLOW(HTTP, getdents64),           /* /proc/self/fd */
	ALLOW(HTTP, prlimit64),            /* process_max_fds */
	ALLOW_IF(READERS, ioctl, 1, INT_ARG, TCGETS), /* stdio's isatty */
	ALLOW(RESOLVER | KUBE | CONTROL, getuid),     /* OpenSSL, libunbound */
	ALLOW(RESOLVER | KUBE | CONTROL, geteuid),
	ALLOW(RESOLVER | KUBE | CONTROL, getgid),
	ALLOW(RESOLVER | KUBE | CONTROL, getegid),
	/* Event loops. */
	ALLOW(WORKER | RESOLVER | HTTP, epoll_wait),
	ALLOW(WORKER | RESOLVER | HTTP, epoll_pwait),
	ALLOW(WORKER | RESOLVER | HTTP, epoll_ctl),
	ALLOW(RESOLVER | HTTP, epoll_create1),
	ALLOW(HTTP, eventfd2),
	ALLOW(RESOLVER, pipe2),            /* libunbound's pipes to its thread */
	ALLOW(RESOLVER | KUBE, socketpair),
	/* Sockets: traffic on those the thread has or accepts. */
	ALLOW(WORKER | RESOLVER | CONTROL | HTTP | KUBE, recvfrom),
	ALLOW(WORKER | RESOLVER | CONTROL | HTTP | KUBE, sendto),
	ALLOW(RESOLVER | HTTP | KUBE, recvmsg),
	ALLOW(RESOLVER | HTTP | KUBE, sendmsg),
	ALLOW(WORKER, recvmmsg),
	/* glibc's resolver asks A and AAAA at once; the resolver sends a turn's UDP replies */
	ALLOW(WORKER | RESOLVER | KUBE, sendmmsg),
	ALLOW(RESOLVER, writev),
	ALLOW(WORKER | CONTROL | HTTP, accept4),
	ALLOW(HTTP, shutdown),
	ALLOW(RESOLVER | HTTP | KUBE, getsockopt),
	ALLOW(RESOLVER | HTTP | KUBE, setsockopt),
	/* A worker fixes an accepted connection's send buffer (server/tcp.c). */
	ALLOW_IF(WORKER, setsockopt, 2, INT_ARG, SO_SNDBUF),
	ALLOW(HTTP | KUBE, getsockname),
	ALLOW(KUBE, getpeername),
	ALLOW(KUBE, uname),                     /* glibc's getaddrinfo: the host's name */
	ALLOW(RESOLVER | HTTP | KUBE, fcntl),
	ALLOW_IF(KUBE, ioctl, 1, INT_ARG, FIONREAD),
	/* A worker connects a retired UDP socket to itself (server/worker.c). */
	ALLOW(WORKER | RESOLVER | KUBE, connect),
	ALLOW(RESOLVER, bind),             /* libunbound's random source ports */
	/* New sockets: IPv4 and IPv6 only, for those that ask over the network:
	 * never netlink (the node's), packet or raw sockets. glibc's getaddrinfo
	 * in libcurl's resolver threads tries nscd (unix) and asks netlink for
	 * the local addresses to sort its answers: both do without, so those fail. */
	ALLOW_IF(RESOLVER | KUBE, socket, 0, INT_ARG, AF_INET),
	ALLOW_IF(RESOLVER | KUBE, socket, 0, INT_ARG, AF_INET6),
	FAIL_IF(KUBE, socket, EACCES, 0, INT_ARG, AF_UNIX),
	FAIL_IF(KUBE, socket, EACCES, 0, INT_ARG, AF_NETLINK),
	/* A renewed libunbound context reads its unbound.conf text from a memfd. */
	ALLOW(RESOLVER, memfd_create),
	/* libunbound asks whether its thread is still there: pthread_kill(t, 0). */
	ALLOW_IF(RESOLVER, tgkill, 2, INT_ARG, 0),
	/* Threads, never processes: clone must carry CLONE_THREAD. clone3 passes
	 * its flags in memory, where a filter cannot look, so it fails with
	 * ENOSYS and glibc falls back to clone. */
	ALLOW_IF(SPAWNS, clone, 0, CLONE_THREAD, CLONE_THREAD),
	FAIL(SPAWNS, clone3, ENOSYS),
	ALLOW(SPAWNS, set_robust_list),
	ALLOW(SPAWNS, rseq),
	ALLOW_IF(HTTP, prctl, 0, INT_ARG, PR_SET_NAME), /* libmicrohttpd names its thread */
};

static int add_rule(scmp_filter_ctx f, const struct rule *r)
{
	uint32_t action = r->fail ? SCMP_ACT_ERRNO((uint32_t)r->fail) : SCMP_ACT_ALLOW;
	struct scmp_arg_cmp cmp = {
		.arg = r->arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = r->mask, .datum_b = r->value};

	return seccomp_rule_add_array(f, action, r->nr, r->mask ? 1 : 0, &cmp);
}

static int add_rules(scmp_filter_ctx f, enum privs_thread kind)
{
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
		if ((rules[i].kinds & K(kind)) && add_rule(f, &rules[i]) < 0)
			return -1;
	return 0;
}

/*
 * Anything else kills the whole process (SIGSYS; the kernel logs the
 * thread's name and the syscall number): see docs/security.md for why
 * killing beats failing the call.
 */
static int install_filter(enum privs_thread kind, char *err, size_t errlen)
{
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_KILL_PROCESS);
	int rc = -ENOMEM;

	if (!f)
		goto out;
	/* A syscall of another ABI (int 0x80, x32) is not in the list: kill too. */
	if ((rc = seccomp_attr_set(f, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0 ||
	    (rc = seccomp_attr_set(f, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0)
		goto out;
	if (add_rules(f, kind) < 0) {
		rc = -EINVAL;
		goto out;
	}
	rc = seccomp_load(f);
out:
	if (rc < 0)
		snprintf(err, errlen, "cannot install the seccomp filter: %s (set "
			 "security.seccomp: false to run without)", strerror(-rc));
	seccomp_release(f);
	return rc < 0 ? -1 : 0;
}

static int restrict_self(enum privs_thread kind, char *err, size_t errlen)
{
	if (drop_capabilities(kind, err, errlen) < 0)
		return -1;
	if (kind == PRIVS_NODE || !atomic_load(&seccomp_on))
		return 0;
	return install_filter(kind, err, errlen);
}

/* ---- starting threads ----------------------------------------------------------------- */

struct start {
	enum privs_thread kind;
	char name[16];
	void *(*fn)(void *);
	void *arg;
	pthread_mutex_t lock;
	pthread_cond_t done;
	int state;                  /* 0 restricting, 1 restricted, -1 failed */
	char err[256];
};

static void *trampoline(void *p)
{
	struct start *s = p;
	void *(*fn)(void *) = s->fn;
	void *arg = s->arg;

	prctl(PR_SET_NAME, s->name);
	int rc = restrict_self(s->kind, s->err, sizeof s->err);
	pthread_mutex_lock(&s->lock);
	s->state = rc < 0 ? -1 : 1;
	pthread_cond_signal(&s->done);
	pthread_mutex_unlock(&s->lock); /* s is the creator's again from here */
	return rc < 0 ? NULL : fn(arg);
}

int privs_thread_create(pthread_t *thread, enum privs_thread kind, const char *name,
			void *(*fn)(void *), void *arg, char *err, size_t errlen)
{
	struct start s = {.kind = kind, .fn = fn, .arg = arg};
	int rc;

	snprintf(s.name, sizeof s.name, "%s", name);
	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.done, NULL);
	rc = pthread_create(thread, NULL, trampoline, &s);
	if (rc != 0) {
		snprintf(err, errlen, "cannot start the %s thread: %s", name, strerror(rc));
	} else {
		pthread_mutex_lock(&s.lock);
		while (s.state == 0)
			pthread_cond_wait(&s.done, &s.lock);
		pthread_mutex_unlock(&s.lock);
		if (s.state < 0) {
			pthread_join(*thread, NULL);
			snprintf(err, errlen, "%s thread: %s", name, s.err);
			rc = -1;
		}
	}
	pthread_cond_destroy(&s.done);
	pthread_mutex_destroy(&s.lock);
	return rc == 0 ? 0 : -1;
}

struct call {
	void (*fn)(void *);
	void *arg;
};

static void *run_call(void *p)
{
	struct call *c = p;

	c->fn(c->arg);
	return NULL;
}

int privs_run_as(enum privs_thread kind, const char *name, void (*fn)(void *), void *arg,
		 char *err, size_t errlen)
{
	struct call c = {.fn = fn, .arg = arg};
	pthread_t t;

	if (privs_thread_create(&t, kind, name, run_call, &c, err, errlen) < 0)
		return -1;
	pthread_join(t, NULL);
	return 0;
}
