/*
 * util/file — opening a file the daemon reads whole (a config, a static
 * records file, a kubeconfig, a token) only when it is a regular file.
 *
 * A FIFO named by mistake (or on purpose) would block open() until someone
 * writes it, on the thread that loads, and a device may never end: the
 * open does not wait (O_NONBLOCK, which a regular file ignores), and
 * anything but a regular file is refused.
 *
 * Owns: nothing. Must never: allocate, lock, log or keep state.
 */
#ifndef LOCALDNS_UTIL_FILE_H
#define LOCALDNS_UTIL_FILE_H

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A descriptor for reading path, its stat in *st; -1 with why set
 * (strerror's text, or "not a regular file"). */
static inline int file_open_regular(const char *path, struct stat *st, const char **why)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		*why = strerror(errno);
		return -1;
	}
	if (fstat(fd, st) < 0)
		*why = strerror(errno);
	else if (S_ISREG(st->st_mode))
		return fd;
	else
		*why = S_ISDIR(st->st_mode) ? strerror(EISDIR) : "not a regular file";
	close(fd);
	return -1;
}

#endif
