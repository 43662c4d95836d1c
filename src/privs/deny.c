/*
 * privs/deny.c — what no thread of localdns ever does: a seccomp deny-list
 * for the main thread, which every thread started after it inherits.
 *
 * The main thread reloads: it binds new addresses, speaks rtnetlink and
 * nftables, reads whatever files a new config names and builds libunbound
 * contexts (whose probes open sockets). An allow-list for it would be most
 * of the syscalls there are, so it runs under the opposite: everything is
 * allowed but what localdns never does, and that kills the process
 * (SECCOMP_RET_KILL_PROCESS, as the per-thread lists do: code exploring
 * what it may do gets one attempt). It matters because every thread shares
 * the main thread's memory: code running in a worker could make the main
 * thread run its code (a return address, a function pointer), and then it
 * could start a program. Installed before the first thread starts, the
 * list is beneath every thread's own allow-list too (filters stack: the
 * strictest answer wins), and beneath the threads libraries start.
 *
 * What is denied, by purpose:
 *   - programs and processes: execve, execveat, fork, vfork, a clone
 *     without CLONE_VM (a process of its own) or with a new namespace,
 *     unshare, setns (a user namespace would hand the code every
 *     capability inside it, and the kernel's attack surface with them);
 *   - other processes' memory: ptrace (but for LeakSanitizer, below),
 *     process_vm_readv/writev, process_madvise, pidfd_getfd;
 *   - the kernel: modules, kexec, reboot, bpf, perf_event_open,
 *     userfaultfd, io_uring (its operations bypass seccomp), the keyrings,
 *     personality, swap, accounting, the clock, the kernel log, ioperm;
 *   - filesystems: mount and the new mount API, umount2, pivot_root,
 *     chroot, open_by_handle_at.
 * clone3 fails with ENOSYS instead (its flags are in memory, where a
 * filter cannot look), so glibc's pthread_create falls back to clone,
 * whose flags it can: the per-thread lists do the same.
 *
 * ptrace: LeakSanitizer's leak check at exit (the sanitized builds of the
 * test suite) stops every thread from a clone of the exiting one, with
 * PTRACE_ATTACH, PTRACE_GETREGSET and PTRACE_DETACH; a filter that kills
 * those makes it spin for ever. Those three stay allowed, in every build,
 * so that the list the tests run is the list shipped: they stop a process
 * and read its registers, never its memory (PEEK, POKE, SETREGS, SEIZE and
 * the rest kill). The kernel's own check then decides whom (same uid,
 * dumpable, no CAP_SYS_PTRACE held): the keeper, the one other process of
 * the pod's uid, is not dumpable.
 *
 * Cost: a syscall whose answer in this filter does not depend on its
 * arguments (every one but clone and ptrace) is answered from the kernel's
 * per-filter cache since Linux 5.11, without running the filter.
 */
#include "privs/internal.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>

/* Killed whatever their arguments. */
static const int never[] = {
	SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(fork), SCMP_SYS(vfork),
	SCMP_SYS(unshare), SCMP_SYS(setns),
	SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev), SCMP_SYS(process_madvise),
	SCMP_SYS(pidfd_getfd),
	SCMP_SYS(init_module), SCMP_SYS(finit_module), SCMP_SYS(delete_module),
	SCMP_SYS(kexec_load), SCMP_SYS(kexec_file_load), SCMP_SYS(reboot),
	SCMP_SYS(bpf), SCMP_SYS(perf_event_open), SCMP_SYS(userfaultfd),
	SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter), SCMP_SYS(io_uring_register),
	SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key),
	SCMP_SYS(personality), SCMP_SYS(swapon), SCMP_SYS(swapoff), SCMP_SYS(acct),
	SCMP_SYS(settimeofday), SCMP_SYS(clock_settime), SCMP_SYS(clock_adjtime),
	SCMP_SYS(adjtimex), SCMP_SYS(syslog), SCMP_SYS(iopl), SCMP_SYS(ioperm),
	SCMP_SYS(quotactl), SCMP_SYS(lookup_dcookie), SCMP_SYS(uselib),
	SCMP_SYS(mount), SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(chroot),
	SCMP_SYS(move_mount), SCMP_SYS(open_tree), SCMP_SYS(fsopen), SCMP_SYS(fsconfig),
	SCMP_SYS(fsmount), SCMP_SYS(fspick), SCMP_SYS(mount_setattr),
	SCMP_SYS(name_to_handle_at), SCMP_SYS(open_by_handle_at),
};

/* A clone with one of these makes a namespace: killed. */
static const uint64_t new_namespaces[] = {
	CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
	CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
};

/* The ptrace requests LeakSanitizer's leak check makes (see the top comment), sorted. */
static const uint64_t sanitizer_ptrace[] = {PTRACE_ATTACH, PTRACE_DETACH, PTRACE_GETREGSET};

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define KILL SCMP_ACT_KILL_PROCESS

static int kill_if_masked(scmp_filter_ctx f, int nr, unsigned arg, uint64_t mask, uint64_t value)
{
	return seccomp_rule_add(f, KILL, nr, 1, SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, mask, value));
}

/*
 * Kill nr when argument arg is in [lo, hi]: the range cut into aligned
 * blocks of powers of two, one masked compare each (libseccomp compares an
 * argument once per rule, and rules for one action are ORed).
 */
static int kill_in_range(scmp_filter_ctx f, int nr, unsigned arg, uint64_t lo, uint64_t hi)
{
	while (lo <= hi) {
		uint64_t size = 1;
		while (lo % (size * 2) == 0 && lo + size * 2 - 1 <= hi && size < (1ull << 62))
			size *= 2;
		if (kill_if_masked(f, nr, arg, ~(size - 1), lo) < 0)
			return -1;
		if (lo + size - 1 == hi)
			break;
		lo += size;
	}
	return 0;
}

/* Kill nr unless argument arg is one of allowed (sorted, n > 0). */
static int kill_unless(scmp_filter_ctx f, int nr, unsigned arg, const uint64_t *allowed, size_t n)
{
	if (allowed[0] > 0 && kill_in_range(f, nr, arg, 0, allowed[0] - 1) < 0)
		return -1;
	for (size_t i = 1; i < n; i++)
		if (allowed[i] > allowed[i - 1] + 1 &&
		    kill_in_range(f, nr, arg, allowed[i - 1] + 1, allowed[i] - 1) < 0)
			return -1;
	return seccomp_rule_add(f, KILL, nr, 1, SCMP_CMP(arg, SCMP_CMP_GT, allowed[n - 1], 0));
}

static int add_rules(scmp_filter_ctx f)
{
	for (size_t i = 0; i < N(never); i++)
		if (seccomp_rule_add(f, KILL, never[i], 0) < 0)
			return -1;
	/* A new process has its own memory: clone without CLONE_VM. */
	if (kill_if_masked(f, SCMP_SYS(clone), 0, CLONE_VM, 0) < 0)
		return -1;
	for (size_t i = 0; i < N(new_namespaces); i++)
		if (kill_if_masked(f, SCMP_SYS(clone), 0, new_namespaces[i], new_namespaces[i]) < 0)
			return -1;
	if (seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) < 0)
		return -1;
	return kill_unless(f, SCMP_SYS(ptrace), 0, sanitizer_ptrace, N(sanitizer_ptrace));
}

int privs_deny_never_used(char *err, size_t errlen)
{
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
	int rc = -ENOMEM;

	if (!f)
		goto out;
	/* A syscall of another ABI (int 0x80, x32) would dodge the list: kill it. */
	if ((rc = seccomp_attr_set(f, SCMP_FLTATR_ACT_BADARCH, KILL)) < 0 ||
	    (rc = seccomp_attr_set(f, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0)
		goto out;
	if (add_rules(f) < 0) {
		rc = -EINVAL;
		goto out;
	}
	rc = seccomp_load(f);
out:
	if (rc < 0)
		snprintf(err, errlen, "cannot install the main thread's seccomp filter: %s (set "
			 "security.seccomp: false to run without)", strerror(-rc));
	seccomp_release(f);
	return rc < 0 ? -1 : 0;
}
