/*
 * kube/decode.c — LIST responses and watch streams decoded as they arrive
 * (see internal.h): yajl's push parser calls us once per token, and we
 * build json-c objects of the kept fields only (fields.c), handing each
 * LIST item or watch event out the moment it closes.
 *
 * Why not json_tokener over the whole response: it builds every value of
 * it (json-c spends about 150 bytes per value: 14 times the bytes of an
 * EndpointSlice), and a LIST served from the API server's watch cache is
 * never paged: it is the whole collection in one response. Here a skipped
 * value (annotations, managedFields, a Pod's spec) is only counted past,
 * and what is held at any time is one object's kept fields.
 */
#include "kube/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

/* Kept values nest this deep at most; skipped ones are only counted. */
#define KEPT_DEPTH 32
/* Input goes to yajl in pieces of at most this: one long token (a string
 * yajl buffers whole) over the bound is caught at most this late. */
#define PIECE 65536

/* What to keep of one value. */
struct keep {
	bool keep;
	bool all;                      /* the whole value */
	bool each;                     /* an array whose elements are handed out */
	const struct kube_field *sub;  /* an object's kept keys (and each object's in an array) */
};

/* An open container whose value is kept: being built, or an "each" array (obj NULL). */
struct frame {
	struct json_object *obj;
	bool is_object;
	bool root;                     /* an item or event: handed out when it closes */
	struct keep keep;
	char *key;                     /* an object's key whose value comes next, when kept */
	struct keep next;              /* what to keep of that value */
};

struct kube_decoder {
	yajl_handle yajl;
	enum kube_decode_kind kind;
	kube_object_fn fn;
	void *ctx;
	uint64_t object_max;
	struct kube_field top_keys[3]; /* of the List, or of each event */
	struct frame frames[KEPT_DEPTH];
	int depth;                     /* open kept containers */
	uint64_t skipping;             /* open containers inside a skipped value */
	struct json_object *list;      /* LIST: the List (its metadata only) */
	struct json_object *root;      /* the item or event being built */
	uint64_t root_start;           /* its first byte, counted from the start of the input */
	uint64_t fed;                  /* input before the piece being parsed */
	int stop;                      /* set: stopped, and this is what feed returns */
	char error[256];
};

static const struct kube_field list_meta_keys[] = {
	{.key = "resourceVersion"}, {.key = "continue"}, {.key = NULL}};

static uint64_t position(const struct kube_decoder *d)
{
	return d->fed + yajl_get_bytes_consumed(d->yajl);
}

/* Stops the parse: yajl sees 0 from the callback and returns "canceled". */
static int fail(struct kube_decoder *d, int code, const char *why)
{
	d->stop = code;
	snprintf(d->error, sizeof d->error, "%s", why);
	return 0;
}

/* The item or event being built is past the bound: checked at every token
 * (and after every piece, for one long token). */
static bool over_bound(struct kube_decoder *d, uint64_t at)
{
	if (!d->root || at - d->root_start <= d->object_max)
		return false;
	snprintf(d->error, sizeof d->error, "an object larger than %llu bytes",
		 (unsigned long long)d->object_max);
	d->stop = KUBE_DECODE_TOO_LARGE;
	return true;
}

static struct frame *top(struct kube_decoder *d)
{
	return d->depth ? &d->frames[d->depth - 1] : NULL;
}

/* Where the value starting now goes: what to keep of it (false: skip it). */
static bool value_kept(struct kube_decoder *d, struct keep *k)
{
	struct frame *f = top(d);

	if (d->skipping)
		return false;
	if (!f)
		*k = (struct keep){.keep = true, .sub = d->top_keys};
	else if (f->is_object)
		*k = f->next;
	else
		*k = (struct keep){.keep = true, .all = f->keep.all || !f->keep.sub, .sub = f->keep.sub};
	return k->keep;
}

/* An item (an element of an "each" array) or an event (a top-level value of a watch). */
static bool at_root(struct kube_decoder *d)
{
	struct frame *f = top(d);

	return f ? !f->is_object && f->keep.each : d->kind == KUBE_DECODE_WATCH;
}

/* Hands out a finished item or event, then drops it. */
static int emit(struct kube_decoder *d, struct json_object *obj)
{
	int rc = d->fn(d->ctx, obj);

	json_object_put(obj);
	d->root = NULL;
	if (rc) {
		d->stop = rc;
		return 0;
	}
	return 1;
}

/* Puts a new kept value in its place; v is NULL for JSON null. */
static int place(struct kube_decoder *d, struct json_object *v)
{
	struct frame *f = top(d);

	if (!f) {
		if (d->kind == KUBE_DECODE_WATCH)
			return emit(d, v);
		json_object_put(d->list);
		d->list = v;
	} else if (f->is_object) {
		if (json_object_object_add(f->obj, f->key, v) < 0) {
			json_object_put(v);
			return fail(d, KUBE_DECODE_NOMEM, "out of memory");
		}
	} else if (f->keep.each) {
		return emit(d, v);
	} else if (json_object_array_add(f->obj, v) < 0) {
		json_object_put(v);
		return fail(d, KUBE_DECODE_NOMEM, "out of memory");
	}
	return 1;
}

static int scalar(struct kube_decoder *d, struct json_object *v, bool made)
{
	if (!made)
		return fail(d, KUBE_DECODE_NOMEM, "out of memory");
	return place(d, v);
}

static int on_null(void *ctx)
{
	struct kube_decoder *d = ctx;
	struct keep k;

	if (over_bound(d, position(d)))
		return 0;
	return value_kept(d, &k) ? scalar(d, NULL, true) : 1;
}

static int on_boolean(void *ctx, int b)
{
	struct kube_decoder *d = ctx;
	struct keep k;
	struct json_object *v;

	if (over_bound(d, position(d)))
		return 0;
	if (!value_kept(d, &k))
		return 1;
	v = json_object_new_boolean(b);
	return scalar(d, v, v != NULL);
}

/* A kept number: an integer when it is one that fits, else a double. */
static int on_number(void *ctx, const char *text, size_t len)
{
	struct kube_decoder *d = ctx;
	struct keep k;
	struct json_object *v = NULL;

	if (over_bound(d, position(d)))
		return 0;
	if (!value_kept(d, &k))
		return 1;
	char *copy = strndup(text, len);
	if (copy) {
		char *end;
		errno = 0;
		long long n = strtoll(copy, &end, 10);
		v = *end || errno ? json_object_new_double(strtod(copy, NULL))
				  : json_object_new_int64(n);
		free(copy);
	}
	return scalar(d, v, v != NULL);
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
	struct kube_decoder *d = ctx;
	struct keep k;
	struct json_object *v;

	if (over_bound(d, position(d)))
		return 0;
	if (!value_kept(d, &k))
		return 1;
	v = json_object_new_string_len((const char *)s, (int)len);
	return scalar(d, v, v != NULL);
}

static int open_container(struct kube_decoder *d, bool is_object)
{
	struct keep k;

	if (over_bound(d, position(d)))
		return 0;
	if (!value_kept(d, &k) || (k.each && is_object)) {
		d->skipping++;
		return 1;
	}
	if (d->depth == KEPT_DEPTH)
		return fail(d, KUBE_DECODE_BAD, "JSON nested too deep");
	struct frame f = {.is_object = is_object, .keep = k};
	if (!k.each) {
		f.obj = is_object ? json_object_new_object() : json_object_new_array();
		if (!f.obj)
			return fail(d, KUBE_DECODE_NOMEM, "out of memory");
		if (at_root(d)) {
			/* Ours until it closes and is handed out. */
			f.root = true;
			d->root = f.obj;
			d->root_start = position(d);
		} else if (!place(d, f.obj)) {
			return 0; /* its container, holding it, keeps filling it */
		}
	}
	d->frames[d->depth++] = f;
	return 1;
}

static int close_container(struct kube_decoder *d)
{
	if (over_bound(d, position(d)))
		return 0;
	if (d->skipping) {
		d->skipping--;
		return 1;
	}
	struct frame *f = &d->frames[--d->depth];
	free(f->key);
	f->key = NULL;
	return f->root ? emit(d, f->obj) : 1;
}

static int on_start_map(void *ctx)
{
	return open_container(ctx, true);
}

static int on_end_map(void *ctx)
{
	return close_container(ctx);
}

static int on_start_array(void *ctx)
{
	return open_container(ctx, false);
}

static int on_end_array(void *ctx)
{
	return close_container(ctx);
}

/* What a kept object keeps of the value under key. */
static struct keep key_kept(const struct frame *f, const unsigned char *key, size_t len)
{
	if (f->keep.all)
		return (struct keep){.keep = true, .all = true};
	for (const struct kube_field *e = f->keep.sub; e && e->key; e++)
		if (strlen(e->key) == len && memcmp(e->key, key, len) == 0)
			return (struct keep){.keep = true, .all = !e->sub && !e->each,
					     .each = e->each, .sub = e->sub};
	return (struct keep){0};
}

static int on_map_key(void *ctx, const unsigned char *key, size_t len)
{
	struct kube_decoder *d = ctx;
	struct frame *f = top(d);

	if (over_bound(d, position(d)))
		return 0;
	if (d->skipping)
		return 1;
	free(f->key);
	f->key = NULL;
	f->next = key_kept(f, key, len);
	if (f->next.keep && !(f->key = strndup((const char *)key, len)))
		return fail(d, KUBE_DECODE_NOMEM, "out of memory");
	return 1;
}

static const yajl_callbacks callbacks = {
	.yajl_null = on_null,
	.yajl_boolean = on_boolean,
	.yajl_number = on_number,
	.yajl_string = on_string,
	.yajl_start_map = on_start_map,
	.yajl_map_key = on_map_key,
	.yajl_end_map = on_end_map,
	.yajl_start_array = on_start_array,
	.yajl_end_array = on_end_array,
};

struct kube_decoder *kube_decoder_new(enum kube_decode_kind kind, const struct kube_field *fields,
				      uint64_t object_max, kube_object_fn fn, void *ctx)
{
	struct kube_decoder *d = calloc(1, sizeof *d);

	if (!d)
		return NULL;
	d->kind = kind;
	d->fn = fn;
	d->ctx = ctx;
	d->object_max = object_max;
	if (kind == KUBE_DECODE_LIST) {
		d->top_keys[0] = (struct kube_field){.key = "metadata", .sub = list_meta_keys};
		d->top_keys[1] = (struct kube_field){.key = "items", .sub = fields, .each = true};
	} else {
		d->top_keys[0] = (struct kube_field){.key = "type"};
		d->top_keys[1] = (struct kube_field){.key = "object", .sub = fields};
	}
	if (!(d->yajl = yajl_alloc(&callbacks, NULL, d))) {
		free(d);
		return NULL;
	}
	/* The API server sends UTF-8 (Go's encoder replaces bad bytes); what
	 * we keep is checked where it is used (DNS names, addresses). */
	yajl_config(d->yajl, yajl_dont_validate_strings, 1);
	/* A watch is a sequence of events, one per line. */
	if (kind == KUBE_DECODE_WATCH)
		yajl_config(d->yajl, yajl_allow_multiple_values, 1);
	return d;
}

/* yajl refused the input (or a callback stopped it): keep why. */
static int parse_failed(struct kube_decoder *d, yajl_status st, const char *piece, size_t len)
{
	if (st == yajl_status_client_canceled)
		return d->stop;
	unsigned char *msg = yajl_get_error(d->yajl, 0, (const unsigned char *)piece, len);
	snprintf(d->error, sizeof d->error, "not JSON: %s", msg ? (const char *)msg : "?");
	if (msg)
		yajl_free_error(d->yajl, msg);
	return d->stop = KUBE_DECODE_BAD;
}

int kube_decoder_feed(struct kube_decoder *d, const char *data, size_t len)
{
	while (len && !d->stop) {
		size_t n = len < PIECE ? len : PIECE;
		yajl_status st = yajl_parse(d->yajl, (const unsigned char *)data, n);
		if (st != yajl_status_ok)
			return parse_failed(d, st, data, n);
		d->fed += n;
		data += n;
		len -= n;
		over_bound(d, d->fed);
	}
	return d->stop;
}

int kube_decoder_finish(struct kube_decoder *d)
{
	if (d->stop)
		return d->stop;
	if (d->kind == KUBE_DECODE_WATCH) {
		if (!d->root && !d->depth && !d->skipping)
			return 0;
		fail(d, KUBE_DECODE_BAD, "the stream ended inside an event");
		return d->stop;
	}
	yajl_status st = yajl_complete_parse(d->yajl);
	if (st != yajl_status_ok)
		return parse_failed(d, st, NULL, 0);
	return 0;
}

struct json_object *kube_decoder_list_meta(const struct kube_decoder *d)
{
	struct json_object *meta;

	return d->list && json_object_object_get_ex(d->list, "metadata", &meta) &&
			       json_object_is_type(meta, json_type_object)
		       ? meta
		       : NULL;
}

struct json_object *kube_decoder_partial(const struct kube_decoder *d)
{
	return d->root;
}

const char *kube_decoder_error(const struct kube_decoder *d)
{
	return d->error;
}

void kube_decoder_free(struct kube_decoder *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->depth; i++)
		free(d->frames[i].key);
	json_object_put(d->root);
	json_object_put(d->list);
	yajl_free(d->yajl);
	free(d);
}
