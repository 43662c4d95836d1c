/*
 * kube/decode.c — LIST responses and watch streams decoded as they arrive
 * (see internal.h): yajl's push parser calls us once per token, and we
 * keep the kept fields only (fields.c) as struct kube_json values, handing
 * each LIST item or watch event out the moment it closes.
 *
 * Why not json_tokener over the whole response: it builds every value of
 * it (json-c spends about 150 bytes per value: 14 times the bytes of an
 * EndpointSlice), and a LIST served from the API server's watch cache is
 * never paged: it is the whole collection in one response. Here a skipped
 * value (annotations, managedFields, a Pod's spec) is only counted past,
 * and what is held at any time is one object's kept fields.
 *
 * Why not json-c objects for what is kept: one per value, each with its
 * own hash table and copied keys, made and freed per object, were most of
 * a first sync's CPU (callgrind: 2.6 of 4.9 billion instructions for
 * 10,000 Services and 100,000 endpoints). A kept value is a node in an
 * arena instead, its key the field table's own string, rewound when the
 * item or event it belongs to has been handed out: in the steady state an
 * object costs no allocation at all. The List around LIST items (its
 * metadata) lives in an arena of its own, which items do not rewind.
 *
 * Must never: hold more than one item or event (and its List's
 * metadata), or let one grow past object_max.
 */
#include "kube/internal.h"

#include <errno.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

/* Kept values nest this deep at most; skipped ones are only counted. */
#define KEPT_DEPTH 32
/* Input goes to yajl in pieces of at most this: one long token (a string
 * yajl buffers whole) over the bound is caught at most this late. */
#define PIECE 65536
/* An arena grows by blocks of this (a larger string gets a block its size). */
#define BLOCK 65536
/* Blocks an arena keeps when rewound: an object larger than this gives
 * back the rest once handed out. */
#define BLOCKS_KEPT 4

/* ---- arenas -------------------------------------------------------------------- */

struct block {
	struct block *next;
	size_t size, used;
	alignas(max_align_t) unsigned char data[];
};

struct arena {
	struct block *first, *at; /* at: the block being filled */
};

static struct block *new_block(size_t size)
{
	struct block *b = malloc(sizeof *b + size);

	if (b)
		*b = (struct block){.size = size};
	return b;
}

/* n bytes aligned for any value; NULL when out of memory. */
static void *arena_alloc(struct arena *a, size_t n)
{
	struct block *b = a->at, *last = NULL;

	n = (n + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
	for (; b; last = b, b = b->next) {
		if (b->size - b->used >= n)
			break;
		b->used = b->size; /* passed: the rest of it stays unused */
	}
	if (!b) {
		if (!(b = new_block(n > BLOCK ? n : BLOCK)))
			return NULL;
		if (last)
			last->next = b;
		else
			a->first = b;
	}
	a->at = b;
	b->used += n;
	return b->data + b->used - n;
}

/* Everything in it is gone; its first blocks stay for the next object. */
static void arena_rewind(struct arena *a, int keep)
{
	struct block **link = &a->first, *b;

	for (int kept = 0; (b = *link) && kept < keep && b->size == BLOCK; kept++) {
		b->used = 0;
		link = &b->next;
	}
	*link = NULL;
	while (b) {
		struct block *next = b->next;
		free(b);
		b = next;
	}
	a->at = a->first;
}

static char *arena_text(struct arena *a, const void *s, size_t len)
{
	char *t = arena_alloc(a, len + 1);

	if (t) {
		memcpy(t, s, len);
		t[len] = '\0';
	}
	return t;
}

/* ---- the decoder ------------------------------------------------------------------ */

/* What to keep of one value. */
struct keep {
	bool keep;
	bool all;                      /* the whole value */
	bool each;                     /* an array whose elements are handed out */
	const struct kube_field *sub;  /* an object's kept keys (and each object's in an array) */
};

/* An open container whose value is kept: being built, or an "each" array (v NULL). */
struct frame {
	struct kube_json *v;
	struct kube_json *last;        /* its last element or member so far */
	bool is_object;
	bool root;                     /* an item or event: handed out when it closes */
	struct keep keep;
	const char *key;               /* an object's key whose value comes next, when kept */
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
	struct arena items;            /* the item or event being built */
	struct arena outer;            /* LIST: the List (its metadata); a whole value */
	struct kube_json *list;        /* LIST: the List (its metadata only) */
	struct kube_json *root;        /* the item or event being built; a whole value */
	uint64_t root_start;           /* its first byte, counted from the start of the input */
	uint64_t fed;                  /* input before the piece being parsed */
	int stop;                      /* set: stopped, and this is what feed returns */
	char error[256];
};

static const struct kube_field list_meta_keys[] = {
	KUBE_FIELD("resourceVersion"), KUBE_FIELD("continue"), {.key = NULL}};

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

static int out_of_memory(struct kube_decoder *d)
{
	return fail(d, KUBE_DECODE_NOMEM, "out of memory");
}

/* The item or event being built is past the bound: checked at every token
 * (and after every piece, for one long token). */
static bool over_bound(struct kube_decoder *d, uint64_t at)
{
	if (d->kind == KUBE_DECODE_VALUE || !d->root || at - d->root_start <= d->object_max)
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
		*k = d->kind == KUBE_DECODE_VALUE ? (struct keep){.keep = true, .all = true}
						  : (struct keep){.keep = true, .sub = d->top_keys};
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

	return f ? !f->is_object && f->keep.each : d->kind != KUBE_DECODE_LIST;
}

/* The arena of the value starting now: an item's or event's, else the List's. */
static struct arena *arena_now(struct kube_decoder *d)
{
	return d->root || at_root(d) ? &d->items : &d->outer;
}

static struct kube_json *new_value(struct kube_decoder *d, enum kube_json_type type)
{
	struct kube_json *v = arena_alloc(arena_now(d), sizeof *v);

	if (v)
		*v = (struct kube_json){.type = type};
	return v;
}

/* Hands out a finished item or event, then drops it. */
static int emit(struct kube_decoder *d, const struct kube_json *v)
{
	int rc = d->fn(d->ctx, v);

	d->root = NULL;
	arena_rewind(&d->items, BLOCKS_KEPT);
	if (rc) {
		d->stop = rc;
		return 0;
	}
	return 1;
}

/* Puts a new kept value in its place. */
static int place(struct kube_decoder *d, struct kube_json *v)
{
	struct frame *f = top(d);

	if (!f) {
		if (d->kind == KUBE_DECODE_WATCH)
			return emit(d, v);
		if (d->kind == KUBE_DECODE_LIST)
			d->list = v;
		else
			d->root = v;
		return 1;
	}
	if (f->keep.each)
		return emit(d, v);
	if (f->is_object)
		v->key = f->key;
	if (f->last)
		f->last->next = v;
	else
		f->v->first = v;
	f->last = v;
	f->v->count++;
	return 1;
}

/* A scalar token (null, a boolean b, a number's literal or a string of
 * text/len): a new value of type in its place when kept, nothing when
 * skipped. Inline: each callback's type is a constant, and what does not
 * apply to it folds away. */
static inline int scalar(struct kube_decoder *d, enum kube_json_type type, bool b,
			 const void *text, size_t len)
{
	struct keep k;
	struct kube_json *v;

	if (over_bound(d, position(d)))
		return 0;
	if (!value_kept(d, &k))
		return 1;
	if (!(v = new_value(d, type)))
		return out_of_memory(d);
	if (type == KUBE_JSON_BOOL)
		v->boolean = b;
	if (type == KUBE_JSON_NUMBER || type == KUBE_JSON_STRING) {
		if (!(v->text = arena_text(arena_now(d), text, len)))
			return out_of_memory(d);
		v->len = len;
	}
	return place(d, v);
}

static int on_null(void *ctx)
{
	return scalar(ctx, KUBE_JSON_NULL, false, NULL, 0);
}

static int on_boolean(void *ctx, int b)
{
	return scalar(ctx, KUBE_JSON_BOOL, b, NULL, 0);
}

/* A kept number keeps its literal: kube_json_int reads it. */
static int on_number(void *ctx, const char *text, size_t len)
{
	return scalar(ctx, KUBE_JSON_NUMBER, false, text, len);
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
	return scalar(ctx, KUBE_JSON_STRING, false, s, len);
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
		bool root = at_root(d);
		f.v = new_value(d, is_object ? KUBE_JSON_OBJECT : KUBE_JSON_ARRAY);
		if (!f.v)
			return out_of_memory(d);
		if (root && d->kind != KUBE_DECODE_VALUE) {
			/* Ours until it closes and is handed out. */
			f.root = true;
			d->root = f.v;
			d->root_start = position(d);
		} else if (!place(d, f.v)) {
			return 0;
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
	return f->root ? emit(d, f->v) : 1;
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

/* What a kept object keeps of the value under key, and the key to give it
 * (the field table's own string when it names it). */
static struct keep key_kept(const struct frame *f, const unsigned char *key, size_t len,
			    const char **name)
{
	*name = NULL;
	if (f->keep.all)
		return (struct keep){.keep = true, .all = true};
	for (const struct kube_field *e = f->keep.sub; e && e->key; e++)
		if (e->len == len && memcmp(e->key, key, len) == 0) {
			*name = e->key;
			return (struct keep){.keep = true, .all = !e->sub && !e->each,
					     .each = e->each, .sub = e->sub};
		}
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
	f->next = key_kept(f, key, len, &f->key);
	if (f->next.keep && !f->key && !(f->key = arena_text(arena_now(d), key, len)))
		return out_of_memory(d);
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
		d->top_keys[0] = (struct kube_field)KUBE_FIELD("metadata", .sub = list_meta_keys);
		d->top_keys[1] = (struct kube_field)KUBE_FIELD("items", .sub = fields, .each = true);
	} else {
		d->top_keys[0] = (struct kube_field)KUBE_FIELD("type");
		d->top_keys[1] = (struct kube_field)KUBE_FIELD("object", .sub = fields);
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

const struct kube_json *kube_decoder_list_meta(const struct kube_decoder *d)
{
	const struct kube_json *meta = kube_json_get(d->list, "metadata");

	return meta && meta->type == KUBE_JSON_OBJECT ? meta : NULL;
}

const struct kube_json *kube_decoder_partial(const struct kube_decoder *d)
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
	arena_rewind(&d->items, 0);
	arena_rewind(&d->outer, 0);
	yajl_free(d->yajl);
	free(d);
}

/* ---- a whole text ------------------------------------------------------------------ */

struct kube_json_doc {
	struct kube_decoder *d;
};

static int never_called(void *ctx, const struct kube_json *v)
{
	(void)ctx;
	(void)v;
	return 0;
}

struct kube_json_doc *kube_json_parse(const char *text, size_t len)
{
	struct kube_json_doc *doc = calloc(1, sizeof *doc);

	if (!doc || !(doc->d = kube_decoder_new(KUBE_DECODE_VALUE, NULL, 0, never_called, NULL)) ||
	    kube_decoder_feed(doc->d, text, len) != 0 || kube_decoder_finish(doc->d) != 0 ||
	    !doc->d->root) {
		kube_json_doc_free(doc);
		return NULL;
	}
	return doc;
}

const struct kube_json *kube_json_root(const struct kube_json_doc *doc)
{
	return doc->d->root;
}

void kube_json_doc_free(struct kube_json_doc *doc)
{
	if (!doc)
		return;
	kube_decoder_free(doc->d);
	free(doc);
}
