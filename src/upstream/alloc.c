/*
 * upstream/alloc.c — calloc for libunbound, through malloc's thread cache
 * (alloc.h says why).
 */
#include "upstream/alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The largest request glibc's thread cache holds (its 64th size class, 1,032 bytes),
 * rounded down; larger blocks gain nothing from malloc, and calloc skips the
 * zeroing of pages fresh from the kernel. */
#define CACHED_MAX 1024

void *upstream_calloc(size_t n, size_t size)
{
	size_t bytes;
	void *p;

	if (__builtin_mul_overflow(n, size, &bytes)) {
		errno = ENOMEM;
		return NULL;
	}
	if (bytes > CACHED_MAX)
		return calloc(n, size);
	p = malloc(bytes);
	/* Hide where p came from: GCC and clang turn a malloc followed by a
	 * memset of it into a calloc call, which is what this avoids. */
	__asm__("" : "+r"(p));
	if (p)
		memset(p, 0, bytes);
	return p;
}
