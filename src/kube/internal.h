/*
 * kube/internal.h — the client's pure parts, private to src/kube/ (and its
 * unit tests): the connection description and where it comes from, the
 * streaming decoder of LIST responses and watch streams and the fields it
 * keeps, gzip bodies decompressed member by member, the backoff schedules
 * (errors, repeated 410s) and the set of known object keys. None of these does network I/O or logs.
 */
#ifndef LOCALDNS_KUBE_INTERNAL_H
#define LOCALDNS_KUBE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kube/kube.h"

/* ---- connection (conn.c) -------------------------------------------------- */

/* Bytes from a kubeconfig's *-data key (base64-decoded) or NULL. */
struct kube_blob {
	unsigned char *data;
	size_t len;
};

/*
 * Everything needed to talk to the API server. File paths are absolute or
 * relative to the process's working directory (a kubeconfig's relative
 * paths are already joined to its directory). Where a file and inline data
 * are both given, the data wins, as in client-go.
 */
struct kube_conn {
	char *server;        /* "https://host:port[/prefix]", no trailing '/' */
	char *ca_file;       /* NULL = the system's CAs (unless ca_data) */
	struct kube_blob ca_data;
	char *cert_file;
	struct kube_blob cert_data;
	char *key_file;
	struct kube_blob key_data;
	char *token;         /* a fixed bearer token, or NULL */
	char *token_file;    /* re-read when it changes; NULL = none */
	bool insecure;       /* insecure-skip-tls-verify */
};

/*
 * Parse the kubeconfig text yaml (read from path, whose directory anchors
 * relative paths): current-context -> its cluster and user. Returns 0, or -1
 * with "kubeconfig PATH: what is wrong" in err; out is filled only on success.
 */
int kube_conn_from_kubeconfig(const char *path, const char *yaml, size_t len,
			      struct kube_conn *out, char *err, size_t errlen);

/* Read the file at path, then kube_conn_from_kubeconfig. */
int kube_conn_load_kubeconfig(const char *path, struct kube_conn *out, char *err, size_t errlen);

/*
 * In-cluster: host and port as in $KUBERNETES_SERVICE_HOST/PORT (an IPv6
 * host gets brackets), token and ca.crt from sa_dir. Either being NULL or
 * empty is an error naming the variable.
 */
int kube_conn_in_cluster(const char *host, const char *port, const char *sa_dir,
			 struct kube_conn *out, char *err, size_t errlen);

void kube_conn_free(struct kube_conn *c);

/* Standard base64 (padding optional, whitespace skipped); -1 on bad input. */
int kube_base64_decode(const char *text, size_t len, struct kube_blob *out);

/*
 * A token file and what we last read from it. kube_token_refresh re-reads
 * the file when its inode, size or mtime changed since the last read (or
 * always with force); returns 1 when the token changed, 0 when not, -1 when
 * the file cannot be read or is empty (the previous token is kept).
 */
struct kube_token {
	char *value;         /* trimmed file content, or NULL */
	dev_t dev;
	ino_t ino;
	off_t size;
	int64_t mtime_ns;
};
int kube_token_refresh(struct kube_token *t, const char *path, bool force);
void kube_token_free(struct kube_token *t);

/* ---- the streaming decoder (decode.c, fields.c) ------------------------------ */

/* The annotation of the bookmark that ends a WatchList's initial events. */
#define KUBE_INITIAL_EVENTS_END "k8s.io/initial-events-end"

/*
 * Which keys of a JSON object are kept: key (len bytes), and for an object
 * value (or each object in an array value) the keys kept of it; sub NULL
 * keeps the whole value. each: the value is an array whose elements are
 * handed out one at a time and never held together (a LIST's items). A
 * table ends with key NULL. KUBE_FIELD makes one from a string literal.
 */
struct kube_field {
	const char *key;
	size_t len;
	const struct kube_field *sub;
	bool each;
};
#define KUBE_FIELD(k, ...) {.key = (k), .len = sizeof(k) - 1, __VA_ARGS__}

/* What the decoder keeps of each resource's objects (fields.c). */
const struct kube_field *kube_fields(enum kube_resource r);

/*
 * Decodes a LIST response or a watch stream as it arrives (yajl, a push
 * parser), keeping only the kept fields of each LIST item or watch event
 * (struct kube_json, kube.h), and handing each to a callback as soon as it
 * is complete: no response, page or whole object is ever held. One object
 * (an item, an event) longer than object_max bytes is an error, so the
 * parser's own buffer for a token spanning chunks stays bounded too.
 */
enum kube_decode_kind {
	KUBE_DECODE_LIST,   /* one List: metadata kept, items handed out */
	KUBE_DECODE_WATCH,  /* a sequence of events {type, object}, each handed out */
	KUBE_DECODE_VALUE,  /* one value, all of it kept, none handed out (kube_json_parse) */
};

#define KUBE_DECODE_BAD (-1)       /* not JSON, or nested too deep */
#define KUBE_DECODE_TOO_LARGE (-2) /* one object over object_max */
#define KUBE_DECODE_NOMEM (-3)

/* A LIST item or a whole watch event; obj is borrowed for the call. Nonzero stops the decoder. */
typedef int (*kube_object_fn)(void *ctx, const struct kube_json *obj);

struct kube_decoder;

/* fields: what the items (LIST) or the events' objects (watch) keep. NULL when out of memory. */
struct kube_decoder *kube_decoder_new(enum kube_decode_kind kind, const struct kube_field *fields,
				      uint64_t object_max, kube_object_fn fn, void *ctx);
/* Returns 0, the callback's nonzero value, or a KUBE_DECODE_* error (then it stays stopped). */
int kube_decoder_feed(struct kube_decoder *d, const char *data, size_t len);
/* The input is over: 0 when it ended between objects (a LIST: its document complete). */
int kube_decoder_finish(struct kube_decoder *d);
/* LIST: the list's metadata kept so far ({resourceVersion, continue}), or NULL. */
const struct kube_json *kube_decoder_list_meta(const struct kube_decoder *d);
/* The item or event being decoded (what of it has arrived), or NULL: to name it in a log. */
const struct kube_json *kube_decoder_partial(const struct kube_decoder *d);
/* Why the last feed or finish failed ("" when it did not). */
const char *kube_decoder_error(const struct kube_decoder *d);
void kube_decoder_free(struct kube_decoder *d);

/* ---- gzip bodies (gunzip.c) ------------------------------------------------ */

/*
 * A gzip response body decompressed as it arrives, any number of gzip
 * members one after the other (a compressed WatchList is one member per
 * event), handed out in pieces of at most 16 KiB: nothing grows with the
 * body, and a gzip bomb reaches the consumer at its real size, piece by
 * piece, for the consumer's own bound to stop.
 */
#define KUBE_GUNZIP_BAD (-1)      /* not gzip, or corrupt */

/* Decompressed bytes; nonzero stops the feed, which returns it. */
typedef int (*kube_bytes_fn)(void *ctx, const char *data, size_t len);

struct kube_gunzip;

/* NULL when out of memory. */
struct kube_gunzip *kube_gunzip_new(void);
/* Returns 0, out's nonzero value, or KUBE_GUNZIP_BAD. */
int kube_gunzip_feed(struct kube_gunzip *g, const char *data, size_t len, kube_bytes_fn out,
		     void *ctx);
/* The body is over: 0 when it ended between members. */
int kube_gunzip_finish(struct kube_gunzip *g);
/* Why feed or finish failed. */
const char *kube_gunzip_error(const struct kube_gunzip *g);
void kube_gunzip_free(struct kube_gunzip *g);

/* ---- backoff (backoff.c) --------------------------------------------------- */

/*
 * Exponential backoff with jitter, client-go's reflector's values
 * (NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)): failure n
 * (1-based) waits a random time in [b, 2b) where b = min(cap, initial *
 * 2^(n-1)): 0.8-1.6 s, 1.6-3.2 s, ..., 30-60 s at most. Clients that failed
 * together (an API server restart) come back spread over the whole window.
 */
#define KUBE_BACKOFF_INITIAL_MS 800
#define KUBE_BACKOFF_CAP_MS 30000

struct kube_backoff {
	unsigned failures;   /* since the last success */
};

/* The wait in ms before the next attempt after one more failure; rnd is any random 32-bit value. */
uint64_t kube_backoff_next(struct kube_backoff *b, uint32_t rnd);
void kube_backoff_reset(struct kube_backoff *b);

/*
 * Relists after "410 Gone". Even the first waits the backoff's first step
 * (0.8-1.6 s): every node's watch expires together when an API server
 * restarts with a fresh watch cache, and relisting at once would be every
 * node listing in the same instant. A 410 within KUBE_GONE_STREAK_MS of the
 * previous one means listing again did not help (a server or proxy that
 * expires every watch, continue tokens that never last), so each such
 * relist waits the next step; a streak ends after that long without a 410
 * (client-go's reflector resets its backoff after 2 min).
 */
#define KUBE_GONE_STREAK_MS 120000

struct kube_gone {
	struct kube_backoff backoff;
	int64_t last_ms;     /* the previous 410, any monotonic ms clock */
	bool seen;           /* there was a previous 410 */
};

/* The wait in ms before relisting after a 410 at now_ms. */
uint64_t kube_gone_next(struct kube_gone *g, int64_t now_ms, uint32_t rnd);

/* ---- known object keys (keys.c) -------------------------------------------- */

/*
 * The set of "namespace/name" keys a resource has delivered ("/name" for
 * cluster-scoped objects), each tagged with the generation of the LIST
 * that last saw it. A relist starts a new generation; after its last page
 * every key still tagged with an older one is gone.
 */
struct kube_key {
	struct kube_key *next;
	uint64_t hash;
	uint32_t gen;
	size_t ns_len;       /* the '/' is at key[ns_len] */
	char key[];
};
struct kube_keys {
	struct kube_key **buckets;
	size_t n_buckets;    /* a power of two, or 0 before the first insert */
	size_t count;
	uint32_t gen;
	uint8_t hash_key[16]; /* SipHash-1-3, drawn at the first insert */
};

void kube_keys_init(struct kube_keys *s);
/* Insert or retag with the current generation; -1 on allocation failure. */
int kube_keys_mark(struct kube_keys *s, const char *ns, const char *name);
/* Remove; returns whether the key was there. */
bool kube_keys_remove(struct kube_keys *s, const char *ns, const char *name);
/* Start a LIST: later kube_keys_mark calls tag with a new generation. */
void kube_keys_new_generation(struct kube_keys *s);
/* Remove every key not marked in the current generation, calling fn(ns, name) for each. */
void kube_keys_sweep(struct kube_keys *s, void (*fn)(void *ctx, const char *ns, const char *name),
		     void *ctx);
void kube_keys_free(struct kube_keys *s);

#endif
