/*
 * kube_feed.h — what the targets that stand for an informer (fuzz_cluster,
 * fuzz_mesh) share: the input read the way the Kubernetes client
 * (kube/client.c) reads a response, through its own streaming decoder
 * (kube/decode.c) fed in chunks of uneven sizes, keeping the fields the
 * client keeps of the resource (kube/fields.c), with its per-object bound.
 * A LIST hands out its items; a watch stream its events: ADDED and
 * MODIFIED upsert, DELETED removes, BOOKMARK does nothing, ERROR or a
 * value that is not an event ends the stream. Include after fuzz.h.
 */
#ifndef LOCALDNS_FUZZ_KUBE_FEED_H
#define LOCALDNS_FUZZ_KUBE_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kube/internal.h"
#include "kube/kube.h"

#define FUZZ_OBJECT_MAX (16u << 20) /* kubernetes.object_max_bytes' default */

/* Where the objects go: the target's model. */
struct fuzz_kube_feed {
	enum kube_resource res;
	void (*upsert)(void *ctx, const struct kube_json *obj);
	void (*remove)(void *ctx, const char *ns, const char *name);
	void *ctx;
	size_t items;          /* LIST items handed out */
};

/* A LIST item, as the client takes it (client.c, take_list_item). */
static inline int fuzz_kube_take_item(void *arg, const struct kube_json *obj)
{
	struct fuzz_kube_feed *f = arg;

	f->items++;
	f->upsert(f->ctx, obj);
	return 0;
}

/* One watch event, as the client takes it (client.c, take_watch_event). */
static inline int fuzz_kube_take_event(void *arg, const struct kube_json *ev)
{
	struct fuzz_kube_feed *f = arg;
	const char *type = kube_json_get_text(ev, "type");
	const struct kube_json *obj = kube_json_get(ev, "object");

	if (!type || !obj || obj->type != KUBE_JSON_OBJECT || strcmp(type, "ERROR") == 0)
		return 1;
	if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0) {
		f->upsert(f->ctx, obj);
	} else if (strcmp(type, "DELETED") == 0) {
		const struct kube_json *meta = kube_json_get(obj, "metadata");
		const char *name = kube_json_get_text(meta, "name");
		const char *ns = kube_json_get_text(meta, "namespace");
		if (name && *name)
			f->remove(f->ctx, ns ? ns : "", name);
	}
	return 0;
}

/* The input through the client's decoder as a LIST (kind KUBE_DECODE_LIST)
 * or a watch stream, in chunks of uneven size as a response arrives;
 * returns whether it decoded whole. */
static inline bool fuzz_kube_decode(struct fuzz_kube_feed *f, enum kube_decode_kind kind,
				    const uint8_t *data, size_t size)
{
	struct kube_decoder *d =
		kube_decoder_new(kind, kube_fields(f->res), FUZZ_OBJECT_MAX,
				 kind == KUBE_DECODE_LIST ? fuzz_kube_take_item : fuzz_kube_take_event,
				 f);
	size_t step = 1 + size % 251;
	int rc = 0;

	CHECK(d);
	for (size_t off = 0, n; rc == 0 && off < size; off += n) {
		n = size - off < step ? size - off : step;
		step = step * 3 % 509 + 1;
		rc = kube_decoder_feed(d, (const char *)data + off, n);
	}
	CHECK(rc != KUBE_DECODE_NOMEM);
	bool whole = rc == 0 && kube_decoder_finish(d) == 0;
	kube_decoder_free(d);
	return whole;
}

#endif
