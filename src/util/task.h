/*
 * util/task — what the kernel says of one thread: its scheduling state
 * and the CPU time it has had, for util/stall.h's judges.
 *
 * Reads /proc/PID/task/TID/stat (the state, proc(5)) and .../schedstat
 * (CPU time in ns; CONFIG_SCHED_INFO, which every distribution kernel
 * has). Two small reads, made only while a heartbeat stands still.
 *
 * Must never: allocate, lock, log or keep state.
 */
#ifndef LOCALDNS_UTIL_TASK_H
#define LOCALDNS_UTIL_TASK_H

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "util/stall.h"

static inline ssize_t task_read(pid_t pid, pid_t tid, const char *what, char *buf, size_t len)
{
	char path[64];
	int fd;

	snprintf(path, sizeof path, "/proc/%d/task/%d/%s", (int)pid, (int)tid, what);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

/* Thread tid of process pid as the kernel sees it now; out->known false when it cannot tell. */
static inline void task_sched(pid_t pid, pid_t tid, struct stall_task *out)
{
	char buf[512];
	const char *paren;

	out->known = false;
	if (pid <= 0 || tid <= 0 || task_read(pid, tid, "stat", buf, sizeof buf) <= 0 ||
	    !(paren = strrchr(buf, ')')) || paren[1] != ' ' || !paren[2])
		return;
	out->state = paren[2]; /* the name may hold anything, but not past its last ')' */
	if (task_read(pid, tid, "schedstat", buf, sizeof buf) <= 0 ||
	    sscanf(buf, "%" SCNu64, &out->cpu_ns) != 1)
		return;
	out->known = true;
}

#endif
