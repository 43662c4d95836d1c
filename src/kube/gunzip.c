/*
 * kube/gunzip.c — a gzip response body decompressed as it arrives, member
 * after member (see internal.h).
 *
 * Why not libcurl's own decoding: it stops at the end of the first gzip
 * member. The API server writes a compressed WatchList (WatchListCompression,
 * on by default from 1.37) as one gzip member per flush, that is per event,
 * so libcurl would hand over the first event and drop the rest: the
 * initial-events-end bookmark would never arrive and every WatchList would
 * end unfinished and start over. RFC 1952 allows any number of members;
 * after each one zlib's state is reset for the next.
 */
#include "kube/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Decompressed bytes handed out per call: what is held at a time. */
#define OUT_CHUNK 16384

struct kube_gunzip {
	z_stream z;
	bool in_member;       /* inside a member (between its header and its trailer) */
	char error[128];
	unsigned char out[OUT_CHUNK];
};

struct kube_gunzip *kube_gunzip_new(void)
{
	struct kube_gunzip *g = calloc(1, sizeof *g);

	/* 16 + MAX_WBITS: a gzip wrapper, not zlib's or raw deflate. */
	if (g && inflateInit2(&g->z, 16 + MAX_WBITS) != Z_OK) {
		free(g);
		return NULL;
	}
	return g;
}

static int bad_input(struct kube_gunzip *g, const char *why)
{
	snprintf(g->error, sizeof g->error, "gzip: %s", why ? why : "corrupt data");
	return KUBE_GUNZIP_BAD;
}

/* Hand out what one inflate call produced; nonzero: the consumer stopped. */
static int hand_out(struct kube_gunzip *g, kube_bytes_fn out, void *ctx)
{
	size_t n = sizeof g->out - g->z.avail_out;

	return n ? out(ctx, (const char *)g->out, n) : 0;
}

int kube_gunzip_feed(struct kube_gunzip *g, const char *data, size_t len, kube_bytes_fn out,
		     void *ctx)
{
	bool full = false; /* the last call filled the output: zlib may hold more */

	while (len > 0 || full) {
		uInt piece = len > UINT32_MAX ? UINT32_MAX : (uInt)len;
		g->z.next_in = (unsigned char *)data;
		g->z.avail_in = piece;
		g->z.next_out = g->out;
		g->z.avail_out = sizeof g->out;
		g->in_member = true;
		int zr = inflate(&g->z, Z_NO_FLUSH);
		size_t used = piece - g->z.avail_in;
		data += used;
		len -= used;
		full = g->z.avail_out == 0;
		if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && !len))
			return bad_input(g, g->z.msg);
		int rc = hand_out(g, out, ctx);
		if (rc)
			return rc;
		if (zr == Z_STREAM_END) {
			/* A member is complete; whatever follows is the next one's. */
			g->in_member = false;
			full = false;
			if (inflateReset(&g->z) != Z_OK)
				return bad_input(g, "cannot reset the inflater");
		}
	}
	return 0;
}

int kube_gunzip_finish(struct kube_gunzip *g)
{
	if (g->in_member)
		return bad_input(g, "the body ends inside a gzip member");
	return 0;
}

const char *kube_gunzip_error(const struct kube_gunzip *g)
{
	return g->error;
}

void kube_gunzip_free(struct kube_gunzip *g)
{
	if (!g)
		return;
	inflateEnd(&g->z);
	free(g);
}
