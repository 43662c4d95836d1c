/*
 * util/wake — one thread waking another through an eventfd: the sleeper
 * polls the descriptor, the waker adds one to its counter, the sleeper
 * reads the counter back to zero. However many wake-ups came meanwhile,
 * the sleeper takes them in one read and then looks at everything it
 * serves; a wake-up says "look", never what to look at.
 *
 * Owns: nothing; the caller owns the descriptor (wake_open) and closes it.
 *
 * Must never: allocate, lock, log or keep state; block (the descriptor is
 * non-blocking: a counter that cannot grow further already has a wake-up
 * pending).
 */
#ifndef LOCALDNS_UTIL_WAKE_H
#define LOCALDNS_UTIL_WAKE_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A new wake-up descriptor (close-on-exec, non-blocking); -1 with errno set. */
static inline int wake_open(void)
{
	return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

/* Wake whoever polls fd. false when it could not be done (a counter at its
 * maximum, which no waker reaches, or a bad descriptor); most callers need
 * not look: the sleeper also wakes on its own timeout or is being stopped. */
static inline bool wake_send(int fd)
{
	const uint64_t one = 1;

	return write(fd, &one, sizeof one) == (ssize_t)sizeof one;
}

/* Take every wake-up pending on fd: 1 when there was one, 0 when there was
 * none (EAGAIN), -1 on another error (errno set). */
static inline int wake_take(int fd)
{
	uint64_t count;

	if (read(fd, &count, sizeof count) >= 0)
		return 1;
	return errno == EAGAIN ? 0 : -1;
}

#endif
