/*
 * stderr_capture.h — capture what the code under test writes to stderr (log
 * lines) into a temporary file, and read it back as one string. Include
 * after <cmocka.h>; one capture at a time per test binary.
 */
#ifndef LOCALDNS_TEST_STDERR_CAPTURE_H
#define LOCALDNS_TEST_STDERR_CAPTURE_H

#include <stdlib.h>
#include <unistd.h>

static char captured[1 << 20];
static int saved_stderr = -1;
static int capture_fd = -1;

static void begin_capture(void)
{
	char path[] = "/tmp/localdns-test-stderr-XXXXXX";

	capture_fd = mkstemp(path);
	assert_true(capture_fd >= 0);
	unlink(path);
	saved_stderr = dup(STDERR_FILENO);
	assert_true(dup2(capture_fd, STDERR_FILENO) >= 0);
}

/* Everything written since begin_capture, NUL-terminated, in `captured`. */
static const char *end_capture(void)
{
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	ssize_t n = pread(capture_fd, captured, sizeof captured - 1, 0);
	close(capture_fd);
	assert_true(n >= 0);
	captured[n] = '\0';
	return captured;
}

#endif
