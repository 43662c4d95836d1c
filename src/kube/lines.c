/*
 * kube/lines.c — splits a watch stream into lines (see internal.h).
 *
 * A watch response is one JSON event per line, sent as chunks whose
 * boundaries have nothing to do with the lines. Most chunks carry whole
 * events, so lines inside a chunk are handed out where they lie; only the
 * tail of a chunk (an event cut in two, or in many) is copied, and it grows
 * until its '\n' arrives. The buffer never holds more than one event.
 */
#include "kube/internal.h"

#include <stdlib.h>
#include <string.h>

void kube_lines_init(struct kube_lines *l, size_t max)
{
	*l = (struct kube_lines){.max = max};
}

void kube_lines_reset(struct kube_lines *l)
{
	l->len = 0;
}

void kube_lines_free(struct kube_lines *l)
{
	free(l->buf);
	kube_lines_init(l, l->max);
}

/* Appends to the partial line; -1 when it would pass max or memory runs out. */
static int keep_partial(struct kube_lines *l, const char *data, size_t len)
{
	if (l->len + len > l->max)
		return -1;
	if (l->len + len > l->cap) {
		size_t cap = l->cap ? l->cap : 4096;
		while (cap < l->len + len)
			cap *= 2;
		if (cap > l->max)
			cap = l->max;
		char *buf = realloc(l->buf, cap);
		if (!buf)
			return -1;
		l->buf = buf;
		l->cap = cap;
	}
	memcpy(l->buf + l->len, data, len);
	l->len += len;
	return 0;
}

int kube_lines_feed(struct kube_lines *l, const char *data, size_t len, kube_line_fn fn, void *ctx)
{
	const char *end = data + len;

	while (data < end) {
		const char *nl = memchr(data, '\n', (size_t)(end - data));
		if (!nl)
			return keep_partial(l, data, (size_t)(end - data));
		const char *line = data;
		size_t line_len = (size_t)(nl - data);
		if (l->len) {
			/* The end of a line that began in an earlier chunk. */
			if (keep_partial(l, data, line_len) < 0)
				return -1;
			line = l->buf;
			line_len = l->len;
			l->len = 0;
		}
		data = nl + 1;
		int rc = fn(ctx, line, line_len);
		if (rc)
			return rc;
	}
	return 0;
}
