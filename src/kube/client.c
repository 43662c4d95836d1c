/*
 * kube/client.c — the client thread: one informer per resource, driven by
 * libcurl's multi interface (see kube.h for the contract).
 *
 * Each informer follows client-go's reflector, as kube-proxy runs it, so
 * that a fleet of nodes costs the API server what a fleet of kube-proxies
 * does (docs/ARCHITECTURE.md has the numbers):
 *
 *   (re)list, first choice: WatchList -- a WATCH with sendInitialEvents=true,
 *        resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true:
 *        the state as ADDED events from the API server's watch cache (the
 *        first time from resourceVersion=0, "any": no etcd read at all;
 *        a relist from the last RV seen, "at least as new"), ended by the
 *        bookmark annotated k8s.io/initial-events-end; then the same
 *        stream goes on as a watch;
 *   (re)list, when the server refuses WatchList (422/400: before 1.27, or
 *        the gate off): LIST resourceVersion=0 (from the watch cache, which
 *        ignores limit and sends the whole collection), a relist with
 *        resourceVersion=<last RV>&resourceVersionMatch=NotOlderThan and no
 *        limit (from the watch cache, never older than what we saw); paged
 *        (limit=500, continue) only where the server pages: a resource
 *        without a watch cache (the RV=0 LIST came back with a continue),
 *        or the consistent LIST below;
 *   WATCH from the last RV (allowWatchBookmarks=true, timeoutSeconds
 *        300..600): ADDED/MODIFIED -> upsert, DELETED -> remove, BOOKMARK
 *        -> only the RV moves; every event moves RV.
 *
 * A watch that ends (its timeout, a cut connection, the server going away)
 * resumes from the last RV, so nothing is listed again and nothing is missed.
 * Only "410 Gone" (an ERROR event or the HTTP status: the server no longer
 * has history back to our RV) sends the informer back to a relist, after a
 * jittered wait that grows while 410s keep coming (backoff.c), so a fleet
 * whose watches all expired at once (an API server restart) does not relist
 * in step. A relist asks for data at least as new as the last RV, so the
 * data never goes back in time; when that RV is unavailable (410, or the
 * server's cache is behind it: 504 ResourceVersionTooLarge, as on an API
 * server that just started) the next one is a consistent read from etcd
 * (no RV), as client-go does. The relist marks every key it sees with a new
 * generation and the sweep at its end reports whatever vanished meanwhile.
 * A 410 on a continue page means its token expired: the LIST starts over.
 *
 * Errors (connection failures, 5xx, 401/403, a broken stream) wait with
 * exponential backoff and jitter (backoff.c), per informer, reset by the
 * next good response. A watch that ends normally after less than a second
 * with no event also counts as a failure, so a proxy that closes every
 * watch at once cannot make us spin. A 401 first re-reads the token file
 * and retries at once: kubelet may have rotated the token between our
 * check and the request.
 *
 * This node's Pods are an informer like the others, enabled only while the
 * consumer needs them (kube_watch_pods): turning it off ends its request
 * and reports every Pod it delivered as removed. EndpointSlices may be
 * narrowed at start to one Service's (its namespace's path and the
 * kubernetes.io/service-name label), or not watched at all.
 *
 * The custom resources (ServiceEntries, WorkloadEntries, ServiceImports)
 * are informers like the others, made optional: their CRD may not be
 * installed, and a 404 then is no error but an empty list (the resource
 * counts as synced, anything it delivered before is reported removed),
 * logged when it starts and when it ends, and asked again after
 * kubernetes.crd_retry_interval (plus up to half of it, jitter), never
 * sooner. They never hold back the first `synced`: cluster names do not
 * wait for a mesh.
 *
 * Selector watches (kube_watch_selected) are informers made while the
 * client runs, one per (namespace, label selector) the consumer asks for,
 * in a list beside the fixed ones. A handler call may start or stop one;
 * since a handler runs inside libcurl's callbacks, where no handle may be
 * removed, stopping only marks it (no more calls carry its tag) and the
 * loop frees it after the transfers' callbacks are done.
 *
 * One request per informer is in flight at a time, each on its own easy
 * handle (a new one per request; the multi handle keeps the connections).
 * A 200 response, LIST or watch, goes through the streaming decoder
 * (decode.c) as it arrives: each item or event is handed over the moment it
 * is complete, with only the fields DNS reads (fields.c), so no response,
 * page or whole object sits in memory. Every byte we parse comes from
 * objects anyone allowed to create a Service may write; one object over
 * kubernetes.object_max_bytes (decoded, so a gzip bomb counts at its real
 * size) fails the request, which holds that resource (an error log naming
 * the object, backoff) until it shrinks or goes. The handler is called only
 * from this thread; status counters are behind a mutex that no handler call
 * is made under.
 */
#include "kube/kube.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "kube/internal.h"
#include "log/log.h"
#include "privs/privs.h"
#include "util/clock.h"

/* Objects per LIST page where the server pages: client-go's pager's 500. */
#define LIST_PAGE_LIMIT 500
/* client-go: a watch asks for 5 minutes times (1 + rand), so a fleet spreads out. */
#define WATCH_TIMEOUT_MIN_S 300
/* Past its own timeoutSeconds, a watch that sends nothing is dead (a lost peer). */
#define WATCH_GRACE_S 60
/* A LIST from the watch cache is the whole collection: give it time. */
#define LIST_TIMEOUT_S 300
#define CONNECT_TIMEOUT_S 10
/* An error response is a Status: small. */
#define ERROR_BODY_MAX (64u << 10)
/* The longest wait in curl_multi_poll, so a missed wake-up costs at most this. */
#define POLL_MAX_MS 1000
/* A watch that ends sooner than this without an event counts as a failure. */
#define SHORT_WATCH_MS 1000

enum request_kind { REQ_NONE, REQ_LIST, REQ_WATCH };

/* Which LIST a request is, for its URL and for what its answer means. */
enum list_kind {
	LIST_ANY,           /* resourceVersion=0: the watch cache's state, no etcd read */
	LIST_NOT_OLDER,     /* resourceVersion=<ours>, NotOlderThan: the watch cache */
	LIST_CONSISTENT,    /* no resourceVersion: a quorum read from etcd, paged */
	LIST_CONTINUE,      /* the next page of any of these */
};

/* How a stream was stopped from inside (by what we read of it). */
enum stream_stop {
	STREAM_OK,
	STREAM_GONE,        /* ERROR event, 410: our RV is too old */
	STREAM_TOO_NEW,     /* ERROR event, 504 ResourceVersionTooLarge: the server is behind our RV */
	STREAM_ERROR_EVENT, /* any other ERROR event */
	STREAM_BROKEN,      /* not JSON, or not an event */
	STREAM_TOO_LARGE,   /* one object over kubernetes.object_max_bytes */
};

struct informer {
	struct kube_client *k;
	enum kube_resource res;
	const char *path;          /* e.g. "/api/v1/services" */
	char *own_path;            /* path, when made for this client (one namespace's) */
	char *selector;            /* "fieldSelector=..." / "labelSelector=..." (escaped), or NULL */
	bool enabled;
	bool optional;             /* a custom resource: 404 means not installed */
	bool absent;               /* its last answer was 404 */
	bool reported;             /* resource_synced was called for it */
	void *tag;                 /* a selector watch's: its handler calls carry it */
	bool dropped;              /* a selector watch stopped: freed at the loop's next turn */
	struct informer *next;     /* the next selector watch */

	bool need_list;            /* the next request (re)lists: a WatchList, or a LIST */
	bool synced;               /* a full (re)list has completed once */
	char *rv;                  /* last resourceVersion seen (list, event, bookmark) */
	bool rv_unavailable;       /* a (re)list from rv got 410 or "too large": list consistently */
	bool no_watch_list;        /* the server refused WatchList: (re)list with LIST */
	bool paged;                /* the server pages this resource's RV=0 LIST: no watch cache */
	char *cont;                /* continue token of the LIST in progress */
	unsigned pages;            /* pages of the LIST in progress */
	int64_t list_started_ms;
	int64_t next_at_ms;        /* CLOCK_MONOTONIC: when the next request may start */
	struct kube_backoff backoff;
	struct kube_gone gone;     /* 410s in a row: each relist waits longer */
	bool auth_retried;         /* a 401 already re-read the token and retried */
	struct kube_keys keys;

	/* The request in flight (kind REQ_NONE: none). */
	enum request_kind kind;
	enum list_kind list;       /* REQ_LIST: which */
	bool initial;              /* a WatchList before its initial-events-end bookmark */
	CURL *easy;
	struct curl_slist *headers;
	char errbuf[CURL_ERROR_SIZE];
	long status;               /* HTTP status, once the headers are in */
	struct kube_decoder *dec;  /* a 200 response, as it arrives */
	struct kube_gunzip *gunzip; /* a gzip body (Content-Encoding: gzip), or NULL */
	char *body;                /* an error response's body, as it came (bounded) */
	uint64_t body_bytes;       /* of it */
	struct kube_json_doc *error; /* that body parsed, once the transfer is over */
	bool body_bad;             /* the error body is too large, or not one JSON value */
	enum stream_stop stop;
	char *stop_reason;         /* why the stream stopped, for the log */
	char *stop_key;            /* ns/name of the object over the bound, when known */
	uint64_t watch_events;     /* events read by this watch */
	int64_t started_ms;
};

struct kube_client {
	struct kube_handler h;
	struct kube_conn conn;
	struct kube_token token;
	char *node;                /* NULL: pods cannot be watched */
	char *slices_of;           /* NULL: every EndpointSlice; "": none; "ns/name": one Service's */
	atomic_bool pods_wanted;   /* kube_watch_pods, from any thread */
	bool pods_applied;         /* what the thread last made of pods_wanted */
	uint64_t object_max_bytes; /* kubernetes.object_max_bytes */
	int64_t crd_retry_ms;      /* kubernetes.crd_retry_interval */
	bool mesh, multicluster;   /* mesh.istio, multicluster.enabled: their resources are watched */
	struct informer *selected; /* the selector watches (kube_watch_selected) */
	CURLM *multi;
	pthread_t thread;
	atomic_bool stopping;
	bool dirty;                /* handler calls since the last commit */
	bool synced_called;
	uint32_t rnd;              /* xorshift32 state, for jitter */
	struct informer inf[KUBE_N_RESOURCES];

	pthread_mutex_t status_lock;
	struct kube_status status;
	_Atomic int64_t heartbeat_ms; /* outside the lock: stored every loop turn */
};

const char *const kube_resource_names[KUBE_N_RESOURCES] = {
	[KUBE_SERVICES] = "services", [KUBE_ENDPOINTSLICES] = "endpointslices",
	[KUBE_NAMESPACES] = "namespaces", [KUBE_PODS] = "pods",
	[KUBE_SERVICEENTRIES] = "serviceentries", [KUBE_WORKLOADENTRIES] = "workloadentries",
	[KUBE_SERVICEIMPORTS] = "serviceimports", [KUBE_SELECTED_PODS] = "selectedpods"};

/* Selector watches have paths of their own (one namespace's). */
static const char *const resource_paths[KUBE_N_RESOURCES] = {
	[KUBE_SERVICES] = "/api/v1/services",
	[KUBE_ENDPOINTSLICES] = "/apis/discovery.k8s.io/v1/endpointslices",
	[KUBE_NAMESPACES] = "/api/v1/namespaces",
	[KUBE_PODS] = "/api/v1/pods",
	[KUBE_SERVICEENTRIES] = "/apis/networking.istio.io/v1/serviceentries",
	[KUBE_WORKLOADENTRIES] = "/apis/networking.istio.io/v1/workloadentries",
	[KUBE_SERVICEIMPORTS] = "/apis/multicluster.x-k8s.io/v1alpha1/serviceimports",
};

/* Resources behind a CRD that may not be installed. */
static bool is_optional(enum kube_resource r)
{
	return r == KUBE_SERVICEENTRIES || r == KUBE_WORKLOADENTRIES || r == KUBE_SERVICEIMPORTS;
}

const char *kube_resource_name(enum kube_resource r)
{
	return r < KUBE_N_RESOURCES ? kube_resource_names[r] : "unknown";
}

/* ---- clocks, randomness, status ------------------------------------------- */

static int64_t now_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

static uint32_t next_random(struct kube_client *k)
{
	uint32_t x = k->rnd;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return k->rnd = x;
}

static void note_contact(struct kube_client *k)
{
	int64_t t = clock_ms(CLOCK_REALTIME);

	pthread_mutex_lock(&k->status_lock);
	k->status.last_contact_ms = t;
	pthread_mutex_unlock(&k->status_lock);
}

/* The objects inf's resource knows now: the selector watches' together. */
static uint64_t objects_of(const struct informer *inf)
{
	uint64_t n = 0;

	if (inf->res != KUBE_SELECTED_PODS)
		return inf->keys.count;
	for (const struct informer *w = inf->k->selected; w; w = w->next)
		n += w->dropped ? 0 : w->keys.count;
	return n;
}

static void note_event(struct informer *inf)
{
	uint64_t objects = objects_of(inf);

	pthread_mutex_lock(&inf->k->status_lock);
	inf->k->status.events[inf->res]++;
	inf->k->status.objects[inf->res] = objects;
	pthread_mutex_unlock(&inf->k->status_lock);
}

static void note_list_done(struct informer *inf, bool relist)
{
	int64_t t = clock_ms(CLOCK_REALTIME);
	uint64_t objects = objects_of(inf);

	pthread_mutex_lock(&inf->k->status_lock);
	inf->k->status.last_list_ms[inf->res] = t;
	if (relist)
		inf->k->status.relists[inf->res]++;
	inf->k->status.objects[inf->res] = objects;
	pthread_mutex_unlock(&inf->k->status_lock);
}

static void note_object_too_large(struct informer *inf)
{
	pthread_mutex_lock(&inf->k->status_lock);
	inf->k->status.objects_too_large[inf->res]++;
	pthread_mutex_unlock(&inf->k->status_lock);
}
static void note_error(struct kube_client *k)
{
	pthread_mutex_lock(&k->status_lock);
	k->status.errors++;
	pthread_mutex_unlock(&k->status_lock);
}

void kube_status(const struct kube_client *k, struct kube_status *out)
{
	struct kube_client *mk = (struct kube_client *)k; /* the lock, not the data, changes */

	pthread_mutex_lock(&mk->status_lock);
	*out = k->status;
	pthread_mutex_unlock(&mk->status_lock);
	out->heartbeat_ms = atomic_load_explicit(&mk->heartbeat_ms, memory_order_relaxed);
}

/* ---- small helpers ---------------------------------------------------------- */

static void set_string(char **field, const char *value)
{
	char *copy = value ? strdup(value) : NULL;

	free(*field);
	*field = copy;
}

/* An object's namespace ("" when cluster-scoped) and name; false without a name. */
static bool object_key(const struct kube_json *obj, const char **ns, const char **name)
{
	const struct kube_json *meta = kube_json_get(obj, "metadata");
	const char *n = kube_json_get_text(meta, "name");
	const char *s = kube_json_get_text(meta, "namespace");

	if (!n || !*n)
		return false;
	*name = n;
	*ns = s ? s : "";
	return true;
}

static const char *object_rv(const struct kube_json *obj)
{
	return kube_json_get_text(kube_json_get(obj, "metadata"), "resourceVersion");
}

/* ---- delivering objects ----------------------------------------------------- */

static void deliver_upsert(struct informer *inf, const struct kube_json *obj)
{
	const char *ns, *name;

	if (inf->dropped)
		return;
	if (!object_key(obj, &ns, &name)) {
		log_warn("kubernetes object without metadata.name ignored", "resource",
			 kube_resource_names[inf->res]);
		return;
	}
	if (kube_keys_mark(&inf->keys, ns, name) < 0)
		log_error("out of memory tracking kubernetes objects", "resource",
			  kube_resource_names[inf->res]);
	if (inf->tag)
		inf->k->h.selected_upsert(inf->k->h.ctx, inf->tag, obj);
	else
		inf->k->h.upsert(inf->k->h.ctx, inf->res, obj);
}

static void deliver_remove(struct informer *inf, const char *ns, const char *name)
{
	if (inf->dropped)
		return;
	if (inf->tag)
		inf->k->h.selected_remove(inf->k->h.ctx, inf->tag, ns, name);
	else
		inf->k->h.remove(inf->k->h.ctx, inf->res, ns, name);
	inf->k->dirty = true;
}

static void sweep_removed(void *ctx, const char *ns, const char *name)
{
	deliver_remove(ctx, ns, name);
}

/* ---- scheduling --------------------------------------------------------------- */

static void schedule_now(struct informer *inf)
{
	inf->next_at_ms = now_ms();
}

/* A 410: list again, at once or after the wait repeated 410s earn; returns the wait. */
static uint64_t schedule_relist(struct informer *inf)
{
	int64_t now = now_ms();
	uint64_t wait = kube_gone_next(&inf->gone, now, next_random(inf->k));

	inf->next_at_ms = now + (int64_t)wait;
	return wait;
}

/* One more failure: wait per the backoff; returns the wait for the log. */
static uint64_t schedule_backoff(struct informer *inf)
{
	uint64_t wait = kube_backoff_next(&inf->backoff, next_random(inf->k));

	inf->next_at_ms = now_ms() + (int64_t)wait;
	note_error(inf->k);
	return wait;
}

/* A good response: the next failure starts the backoff from the beginning. */
static void note_success(struct informer *inf)
{
	kube_backoff_reset(&inf->backoff);
	inf->auth_retried = false;
	note_contact(inf->k);
}

/* ---- (re)lists ------------------------------------------------------------------ */

/* A (re)list is starting (a WatchList, or a LIST's first page): a new generation of keys. */
static void begin_list(struct informer *inf)
{
	kube_keys_new_generation(&inf->keys);
	inf->pages = 0;
	inf->list_started_ms = now_ms();
}

/* The (re)list is complete at rv: report what vanished, publish, and watch from rv. */
static void finish_list(struct informer *inf, const char *rv, const char *how)
{
	kube_keys_sweep(&inf->keys, sweep_removed, inf);
	set_string(&inf->rv, rv);
	set_string(&inf->cont, NULL);
	inf->need_list = false;
	inf->rv_unavailable = false;
	inf->k->dirty = true;
	bool relist = inf->synced && !inf->absent;
	inf->synced = true;
	note_list_done(inf, relist);
	if (inf->absent) {
		inf->absent = false;
		log_info("kubernetes resource installed now", "resource",
			 kube_resource_names[inf->res]);
	}

	char objects[24], pages[16], ms[24];
	snprintf(objects, sizeof objects, "%zu", inf->keys.count);
	snprintf(pages, sizeof pages, "%u", inf->pages);
	snprintf(ms, sizeof ms, "%" PRId64, now_ms() - inf->list_started_ms);
	log_info(relist ? "kubernetes relist done" : "kubernetes list done", "resource",
		 kube_resource_names[inf->res], "how", how, "objects", objects, "pages", pages, "ms", ms,
		 "resource_version", rv);
	schedule_now(inf);
}

/* Our RV is of no use for the next (re)list (410, or the server is behind it): the
 * next one is a consistent read, after the wait repeated 410s earn. */
static void relist_consistently(struct informer *inf, const char *why)
{
	char w[24];

	inf->rv_unavailable = true;
	set_string(&inf->cont, NULL);
	snprintf(w, sizeof w, "%" PRIu64, schedule_relist(inf));
	log_info("kubernetes resourceVersion unavailable for the list; listing consistently (from etcd)",
		 "resource", kube_resource_names[inf->res], "resource_version", inf->rv ? inf->rv : "",
		 "reason", why, "retry_ms", w);
}

/* A LIST item, handed over by the decoder as soon as it is complete. */
static int take_list_item(void *ctx, const struct kube_json *obj)
{
	deliver_upsert(ctx, obj);
	return 0;
}

/* A whole 200 LIST response (its items already delivered): the next page, or the end. */
static void take_list_page(struct informer *inf)
{
	const struct kube_json *meta = kube_decoder_list_meta(inf->dec);
	const char *rv = kube_json_get_text(meta, "resourceVersion");

	bool cut = inf->gunzip && kube_gunzip_finish(inf->gunzip) != 0;

	if (cut || kube_decoder_finish(inf->dec) != 0 || !rv) {
		char w[24];
		snprintf(w, sizeof w, "%" PRIu64, schedule_backoff(inf));
		log_warn("kubernetes list response is not a list (no metadata.resourceVersion)",
			 "resource", kube_resource_names[inf->res], "error",
			 cut ? kube_gunzip_error(inf->gunzip) : kube_decoder_error(inf->dec),
			 "retry_ms", w);
		set_string(&inf->cont, NULL);
		return;
	}
	inf->pages++;
	note_success(inf);
	const char *cont = kube_json_get_text(meta, "continue");
	if (cont && *cont) {
		/* resourceVersion=0 paged: this resource has no watch cache, so
		 * the server pages it from etcd whatever we ask (client-go). */
		if (inf->list == LIST_ANY)
			inf->paged = true;
		set_string(&inf->cont, cont);
		schedule_now(inf);
		return;
	}
	finish_list(inf, rv, inf->list == LIST_CONSISTENT || inf->pages > 1 ? "paged list" : "list");
}

/* ---- WATCH events ---------------------------------------------------------- */

static void take_watch_object(struct informer *inf, const char *type, const struct kube_json *obj)
{
	const char *rv = object_rv(obj);

	if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0) {
		deliver_upsert(inf, obj);
		inf->k->dirty = true;
	} else if (strcmp(type, "DELETED") == 0) {
		const char *ns, *name;
		if (object_key(obj, &ns, &name)) {
			kube_keys_remove(&inf->keys, ns, name);
			deliver_remove(inf, ns, name);
		}
	} else if (strcmp(type, "BOOKMARK") != 0) {
		log_warn("kubernetes watch event of unknown type ignored", "resource",
			 kube_resource_names[inf->res], "type", type);
		return;
	}
	if (rv && *rv)
		set_string(&inf->rv, rv);
	inf->watch_events++;
	note_event(inf);
}

static bool is_initial_events_end(const struct kube_json *bookmark)
{
	const struct kube_json *notes = kube_json_get(kube_json_get(bookmark, "metadata"),
						      "annotations");
	const char *end = kube_json_get_text(notes, KUBE_INITIAL_EVENTS_END);

	return end && strcmp(end, "true") == 0;
}

/*
 * An event of a WatchList before its end: the state, as ADDED events
 * (delivered like LIST items: no commit, no RV move, since their RVs are
 * each object's own), until the bookmark annotated initial-events-end,
 * which completes the (re)list at its RV. The stream then goes on as a
 * watch.
 */
static void take_initial_event(struct informer *inf, const char *type,
			       const struct kube_json *obj)
{
	inf->watch_events++;
	if (strcmp(type, "BOOKMARK") != 0) {
		deliver_upsert(inf, obj);
		return;
	}
	const char *rv = object_rv(obj);
	if (!is_initial_events_end(obj) || !rv || !*rv)
		return;
	inf->initial = false;
	inf->pages = 1;
	note_success(inf);
	note_event(inf);
	finish_list(inf, rv, "watch-list");
}

/* The Status says the server has not reached our RV (client-go's
 * isTooLargeResourceVersionError: the cause, or the message of old servers). */
static bool status_too_new(const struct kube_json *status)
{
	const struct kube_json *causes = kube_json_get(kube_json_get(status, "details"), "causes");
	const char *msg = kube_json_get_text(status, "message");

	if (kube_json_int(kube_json_get(status, "code")) != 504)
		return false;
	for (const struct kube_json *c = kube_json_first(causes); c; c = c->next) {
		const char *r = kube_json_get_text(c, "reason");
		if (r && strcmp(r, "ResourceVersionTooLarge") == 0)
			return true;
	}
	return msg && strstr(msg, "Too large resource version");
}

/* An ERROR event carries a Status: 410, our RV is too old; 504 "too large",
 * the server is behind it. */
static int take_watch_error(struct informer *inf, const struct kube_json *status)
{
	const char *msg = kube_json_get_text(status, "message");
	int64_t code = kube_json_int(kube_json_get(status, "code"));
	char why[64];

	snprintf(why, sizeof why, "an ERROR event, code %" PRId64 ", without a message", code);
	set_string(&inf->stop_reason, msg ? msg : why);
	inf->stop = code == 410 ? STREAM_GONE : status_too_new(status) ? STREAM_TOO_NEW : STREAM_ERROR_EVENT;
	return 1;
}

/* One watch event, handed over by the decoder. Nonzero stops the stream. */
static int take_watch_event(void *ctx, const struct kube_json *ev)
{
	struct informer *inf = ctx;
	const char *type = kube_json_get_text(ev, "type");
	const struct kube_json *obj = kube_json_get(ev, "object");

	if (!type || !obj || obj->type != KUBE_JSON_OBJECT) {
		inf->stop = STREAM_BROKEN;
		set_string(&inf->stop_reason, "a watch event that is not {type, object} JSON");
		return 1;
	}
	if (strcmp(type, "ERROR") == 0)
		return take_watch_error(inf, obj);
	if (inf->initial)
		take_initial_event(inf, type, obj);
	else
		take_watch_object(inf, type, obj);
	return 0;
}

/* ---- curl callbacks ----------------------------------------------------------- */

/* Body bytes of an error response (within ERROR_BODY_MAX): kept to be parsed at its end. */
static void feed_error_body(struct informer *inf, const char *data, size_t len)
{
	char *grown = inf->body_bad ? NULL : realloc(inf->body, inf->body_bytes);

	if (!grown) {
		inf->body_bad = true;
		return;
	}
	memcpy(grown + inf->body_bytes - len, data, len);
	inf->body = grown;
}

/* The error response's Status, once the transfer is over; NULL when it
 * sent none, or no JSON. */
static const struct kube_json *error_status(struct informer *inf)
{
	if (!inf->error && inf->body && !inf->body_bad &&
	    !(inf->error = kube_json_parse(inf->body, inf->body_bytes)))
		inf->body_bad = true;
	return inf->error && !inf->body_bad ? kube_json_root(inf->error) : NULL;
}

/* "ns/name" of the object the decoder is in, if its metadata has come. */
static void note_partial_key(struct informer *inf)
{
	const struct kube_json *obj = kube_decoder_partial(inf->dec);
	const char *ns, *name;
	char key[512];

	if (inf->kind == REQ_WATCH)
		obj = kube_json_get(obj, "object");
	if (obj && object_key(obj, &ns, &name)) {
		snprintf(key, sizeof key, "%s%s%s", ns, *ns ? "/" : "", name);
		set_string(&inf->stop_key, key);
	}
}

/* What the decoder refused, and why. */
static void decode_failed(struct informer *inf, int rc)
{
	if (rc == KUBE_DECODE_TOO_LARGE) {
		inf->stop = STREAM_TOO_LARGE;
		note_partial_key(inf);
	} else if (rc < 0) {
		inf->stop = STREAM_BROKEN;
	}
	if (rc < 0)
		set_string(&inf->stop_reason, kube_decoder_error(inf->dec));
}

/* Body bytes, decompressed if they came compressed. Nonzero stops the transfer. */
static int take_body(void *ctx, const char *data, size_t len)
{
	struct informer *inf = ctx;

	if (inf->status == 200) {
		if (inf->kind == REQ_WATCH)
			note_contact(inf->k);
		int rc = kube_decoder_feed(inf->dec, data, len);
		if (rc)
			decode_failed(inf, rc);
		return rc;
	}
	/* Counted after decoding: a compressed body is as costly as a plain one. */
	inf->body_bytes += len;
	if (inf->body_bytes > ERROR_BODY_MAX) {
		inf->body_bad = true;
		return 1;
	}
	feed_error_body(inf, data, len);
	return 0;
}

/*
 * The response's Content-Encoding, once its headers are in: gzip gets a
 * decompressor of our own (libcurl's stops at the end of the first gzip
 * member; a compressed WatchList is a member per event). We ask for gzip
 * only, so anything else is a broken response.
 */
static int choose_body_decoding(struct informer *inf)
{
	struct curl_header *h;
	const char *enc = curl_easy_header(inf->easy, "Content-Encoding", 0, CURLH_HEADER, -1, &h) ==
					  CURLHE_OK
				  ? h->value
				  : "identity";

	if (strcasecmp(enc, "identity") == 0 || !*enc)
		return 0;
	if (strcasecmp(enc, "gzip") == 0) {
		inf->gunzip = kube_gunzip_new();
		if (inf->gunzip)
			return 0;
		set_string(&inf->stop_reason, "out of memory for a gzip decompressor");
	} else {
		char why[160];
		snprintf(why, sizeof why, "a body in Content-Encoding %.64s, which we did not ask for",
			 enc);
		set_string(&inf->stop_reason, why);
	}
	inf->stop = STREAM_BROKEN;
	return -1;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct informer *inf = ctx;
	size_t len = size * nmemb;

	if (!inf->status) {
		curl_easy_getinfo(inf->easy, CURLINFO_RESPONSE_CODE, &inf->status);
		if (choose_body_decoding(inf) < 0)
			return 0;
	}
	int rc = inf->gunzip ? kube_gunzip_feed(inf->gunzip, data, len, take_body, inf)
			     : take_body(inf, data, len);
	if (rc == KUBE_GUNZIP_BAD && inf->stop == STREAM_OK) {
		inf->stop = STREAM_BROKEN;
		set_string(&inf->stop_reason, kube_gunzip_error(inf->gunzip));
	}
	/* Returning less than the chunk aborts the transfer (CURLE_WRITE_ERROR). */
	return rc ? 0 : len;
}

/* ---- starting requests ---------------------------------------------------------- */

/* The Authorization header, from the fixed token or the (re-read if changed) token file. */
static int auth_header(struct informer *inf, char *out, size_t outlen)
{
	struct kube_client *k = inf->k;
	const char *token = k->conn.token;

	out[0] = '\0';
	if (k->conn.token_file) {
		if (kube_token_refresh(&k->token, k->conn.token_file, false) < 0 && !k->token.value) {
			log_error("cannot read the kubernetes token file", "file", k->conn.token_file,
				  "error", errno ? strerror(errno) : "empty or not a token");
			return -1;
		}
		token = k->token.value;
	}
	if (token && snprintf(out, outlen, "Authorization: Bearer %s", token) >= (int)outlen)
		return -1;
	return 0;
}

static void set_tls_options(CURL *e, const struct kube_conn *c)
{
	if (c->ca_data.data) {
		struct curl_blob b = {c->ca_data.data, c->ca_data.len, CURL_BLOB_NOCOPY};
		curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &b);
	} else if (c->ca_file) {
		curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
	}
	if (c->cert_data.data) {
		struct curl_blob b = {c->cert_data.data, c->cert_data.len, CURL_BLOB_NOCOPY};
		curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &b);
		curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
	} else if (c->cert_file) {
		curl_easy_setopt(e, CURLOPT_SSLCERT, c->cert_file);
	}
	if (c->key_data.data) {
		struct curl_blob b = {c->key_data.data, c->key_data.len, CURL_BLOB_NOCOPY};
		curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &b);
		curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
	} else if (c->key_file) {
		curl_easy_setopt(e, CURLOPT_SSLKEY, c->key_file);
	}
	if (c->insecure) {
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
	}
}

/* The URL of the informer's next request (kind and list chosen); NULL when out of memory. */
static char *request_url(struct informer *inf, CURL *e, long watch_timeout_s)
{
	const char *server = inf->k->conn.server, *path = inf->path;
	const char *sel = inf->selector ? inf->selector : "";
	const char *amp = inf->selector ? "&" : "";
	char *rv = inf->rv ? curl_easy_escape(e, inf->rv, 0) : NULL;
	char *cont = inf->cont ? curl_easy_escape(e, inf->cont, 0) : NULL;
	char *url = NULL, limit[24];
	int n = -1;

	snprintf(limit, sizeof limit, "limit=%d", LIST_PAGE_LIMIT);
	if ((inf->rv && !rv) || (inf->cont && !cont))
		goto out;
	if (inf->kind == REQ_WATCH && inf->initial)
		/* No resourceVersion: consistent (the state as of etcd's revision now). */
		n = asprintf(&url, "%s%s?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
			     "&allowWatchBookmarks=true%s%s&timeoutSeconds=%ld%s%s", server, path,
			     inf->rv_unavailable ? "" : "&resourceVersion=",
			     inf->rv_unavailable ? "" : rv ? rv : "0", watch_timeout_s, amp, sel);
	else if (inf->kind == REQ_WATCH)
		n = asprintf(&url, "%s%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s"
			     "&timeoutSeconds=%ld%s%s", server, path, rv, watch_timeout_s, amp, sel);
	else if (inf->list == LIST_CONTINUE)
		n = asprintf(&url, "%s%s?%s&continue=%s%s%s", server, path, limit, cont, amp, sel);
	else if (inf->list == LIST_CONSISTENT)
		n = asprintf(&url, "%s%s?%s%s%s", server, path, limit, amp, sel);
	else if (inf->list == LIST_ANY)
		/* The watch cache ignores the limit; without one, the server pages. */
		n = asprintf(&url, "%s%s?resourceVersion=0&%s%s%s", server, path, limit, amp, sel);
	else
		/* Without a limit, or the server reads etcd instead of its cache. */
		n = asprintf(&url, "%s%s?resourceVersion=%s&resourceVersionMatch=NotOlderThan%s%s%s%s",
			     server, path, rv, inf->paged ? "&" : "", inf->paged ? limit : "", amp, sel);
out:
	curl_free(rv);
	curl_free(cont);
	return n < 0 ? NULL : url;
}

/* Forget the request in flight (its easy handle, headers, parser state). */
static void end_request(struct informer *inf)
{
	if (inf->easy) {
		curl_multi_remove_handle(inf->k->multi, inf->easy);
		curl_easy_cleanup(inf->easy);
	}
	curl_slist_free_all(inf->headers);
	kube_decoder_free(inf->dec);
	kube_gunzip_free(inf->gunzip);
	free(inf->body);
	kube_json_doc_free(inf->error);
	free(inf->stop_reason);
	free(inf->stop_key);
	inf->easy = NULL;
	inf->headers = NULL;
	inf->dec = NULL;
	inf->gunzip = NULL;
	inf->body = NULL;
	inf->error = NULL;
	inf->body_bad = false;
	inf->body_bytes = 0;
	inf->stop = STREAM_OK;
	inf->stop_reason = NULL;
	inf->stop_key = NULL;
	inf->status = 0;
	inf->kind = REQ_NONE;
	inf->initial = false;
}

/*
 * What the next request is: a watch from our RV; a LIST's next page; or a
 * (re)list: a WatchList unless the server refused one, else a LIST from
 * the watch cache (resourceVersion=0 the first time, NotOlderThan our RV
 * after), or from etcd when our RV is unavailable.
 */
static void choose_request(struct informer *inf)
{
	if (!inf->need_list && !inf->rv)
		inf->need_list = true; /* the RV copy was lost to an allocation failure */
	inf->initial = false;
	inf->kind = REQ_LIST;
	if (!inf->need_list) {
		inf->kind = REQ_WATCH;
	} else if (inf->cont) {
		inf->list = LIST_CONTINUE;
	} else if (!inf->no_watch_list) {
		inf->kind = REQ_WATCH;
		inf->initial = true;
	} else {
		inf->list = inf->rv_unavailable ? LIST_CONSISTENT : inf->rv ? LIST_NOT_OLDER : LIST_ANY;
	}
	if (inf->need_list && !inf->cont)
		begin_list(inf);
}

static const char *request_verb(const struct informer *inf)
{
	return inf->kind == REQ_LIST ? "list" : inf->initial ? "watch-list" : "watch";
}

static int start_request(struct informer *inf)
{
	struct kube_client *k = inf->k;
	char auth[8192];
	long watch_timeout_s = WATCH_TIMEOUT_MIN_S + next_random(k) % WATCH_TIMEOUT_MIN_S;

	if (auth_header(inf, auth, sizeof auth) < 0)
		return -1;
	CURL *e = curl_easy_init();
	if (!e)
		return -1;
	choose_request(inf);
	char *url = request_url(inf, e, watch_timeout_s);
	/* gzip, decompressed here (choose_body_decoding): the API server
	 * compresses LISTs over 128 KiB and, from 1.37, WatchLists. */
	struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
	struct curl_slist *h1 = h ? curl_slist_append(h, "Accept-Encoding: gzip") : NULL;
	struct curl_slist *h2 = h1 && auth[0] ? curl_slist_append(h1, auth) : h1;
	inf->dec = kube_decoder_new(inf->kind == REQ_LIST ? KUBE_DECODE_LIST : KUBE_DECODE_WATCH,
				    kube_fields(inf->res), k->object_max_bytes,
				    inf->kind == REQ_LIST ? take_list_item : take_watch_event, inf);
	if (!url || !h2 || !inf->dec) {
		free(url);
		curl_slist_free_all(h);
		curl_easy_cleanup(e);
		kube_decoder_free(inf->dec);
		inf->dec = NULL;
		inf->kind = REQ_NONE;
		return -1;
	}
	inf->easy = e;
	inf->headers = h2;
	/* The URL holds no credentials (kube/conn.c refuses user@ in it); the
	 * Authorization header is never logged. */
	log_debug("kubernetes request", "resource", kube_resource_names[inf->res], "verb",
		  request_verb(inf), "url", url);
	inf->started_ms = now_ms();
	inf->watch_events = 0;
	curl_easy_setopt(e, CURLOPT_URL, url);
	free(url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, inf->headers);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, inf);
	curl_easy_setopt(e, CURLOPT_PRIVATE, inf);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, inf->errbuf);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_TIMEOUT_S);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, inf->kind == REQ_WATCH ? watch_timeout_s + WATCH_GRACE_S
								    : (long)LIST_TIMEOUT_S);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "localdns/" LOCALDNS_VERSION);
	set_tls_options(e, &k->conn);
	inf->errbuf[0] = '\0';
	if (curl_multi_add_handle(k->multi, e) != CURLM_OK) {
		end_request(inf);
		return -1;
	}
	return 0;
}

/* ---- finished requests ---------------------------------------------------------- */

/* "reason: message" from a Status body, else the HTTP status alone. */
static void status_reason(struct informer *inf, char *out, size_t outlen)
{
	const struct kube_json *status = error_status(inf);
	const char *reason = kube_json_get_text(status, "reason");
	const char *msg = kube_json_get_text(status, "message");

	if (inf->body_bad) {
		snprintf(out, outlen, "the response body is not JSON");
		return;
	}
	snprintf(out, outlen, "%s%s%s", reason ? reason : "", reason && msg ? ": " : "",
		 msg ? msg : (reason ? "" : "no Status in the response"));
}

/* 401/403: say clearly who refused what, and why. 401 first retries with a re-read token. */
static void take_auth_failure(struct informer *inf)
{
	struct kube_client *k = inf->k;
	char why[512], code[8], w[24];

	if (inf->status == 401 && k->conn.token_file && !inf->auth_retried) {
		inf->auth_retried = true;
		kube_token_refresh(&k->token, k->conn.token_file, true);
		log_info("kubernetes API answered 401; token file re-read, retrying", "resource",
			 kube_resource_names[inf->res]);
		schedule_now(inf);
		return;
	}
	status_reason(inf, why, sizeof why);
	snprintf(code, sizeof code, "%ld", inf->status);
	snprintf(w, sizeof w, "%" PRIu64, schedule_backoff(inf));
	log_error(inf->status == 401 ? "kubernetes API refused our credentials (401 Unauthorized)"
				     : "kubernetes API forbids this request (403 Forbidden; check RBAC)",
		  "resource", kube_resource_names[inf->res], "status", code, "reason", why,
		  "retry_ms", w);
}

static void take_failure(struct informer *inf, CURLcode cc, const char *what)
{
	char why[512], code[8], w[24];

	if (cc != CURLE_OK && cc != CURLE_WRITE_ERROR)
		snprintf(why, sizeof why, "%s", inf->errbuf[0] ? inf->errbuf : curl_easy_strerror(cc));
	else if (inf->stop_reason)
		snprintf(why, sizeof why, "%s", inf->stop_reason);
	else
		status_reason(inf, why, sizeof why);
	snprintf(code, sizeof code, "%ld", inf->status);
	snprintf(w, sizeof w, "%" PRIu64, schedule_backoff(inf));
	log_warn(what, "resource", kube_resource_names[inf->res], "status", code, "error", why,
		 "retry_ms", w);
}

/* One object over kubernetes.object_max_bytes: the request failed, and will until it shrinks. */
static void take_too_large(struct informer *inf)
{
	char max[24], w[24];

	note_object_too_large(inf);
	snprintf(max, sizeof max, "%" PRIu64, inf->k->object_max_bytes);
	snprintf(w, sizeof w, "%" PRIu64, schedule_backoff(inf));
	log_error("kubernetes object over kubernetes.object_max_bytes; raise it", "resource",
		  kube_resource_names[inf->res], "object", inf->stop_key ? inf->stop_key : "",
		  "max_bytes", max, "verb", request_verb(inf), "retry_ms", w);
}

static void take_list_result(struct informer *inf, CURLcode cc)
{
	bool was_continue = inf->list == LIST_CONTINUE;

	if (cc == CURLE_OK && inf->status == 200) {
		take_list_page(inf);
		return;
	}
	/* Any failure starts the LIST over, as client-go's reflector does. */
	set_string(&inf->cont, NULL);
	if (inf->stop == STREAM_TOO_LARGE) {
		take_too_large(inf);
	} else if (cc == CURLE_OK && inf->status == 410 && was_continue) {
		/* The continue token expired (the server compacted past the list's RV). */
		char w[24];
		snprintf(w, sizeof w, "%" PRIu64, schedule_relist(inf));
		log_info("kubernetes list continue token expired; listing again", "resource",
			 kube_resource_names[inf->res], "retry_ms", w);
	} else if (cc == CURLE_OK && (inf->status == 410 || status_too_new(error_status(inf)))) {
		char why[512];
		status_reason(inf, why, sizeof why);
		relist_consistently(inf, why);
	} else if (cc == CURLE_OK && (inf->status == 401 || inf->status == 403)) {
		take_auth_failure(inf);
	} else {
		take_failure(inf, cc, "kubernetes list failed");
	}
}

/* A WatchList that ended before its initial-events-end bookmark. */
static void take_watch_list_result(struct informer *inf, CURLcode cc)
{
	int64_t lasted = now_ms() - inf->started_ms;

	if (cc == CURLE_OK && (inf->status == 422 || inf->status == 400)) {
		/* Invalid ListOptions: a server before 1.27, or the WatchList gate off. */
		char why[512], code[8];
		status_reason(inf, why, sizeof why);
		snprintf(code, sizeof code, "%ld", inf->status);
		inf->no_watch_list = true;
		note_success(inf);
		schedule_now(inf);
		log_info("kubernetes API server refuses watch-list (sendInitialEvents); listing instead",
			 "resource", kube_resource_names[inf->res], "status", code, "reason", why);
	} else if (inf->stop == STREAM_TOO_LARGE) {
		take_too_large(inf);
	} else if (inf->stop == STREAM_GONE || inf->stop == STREAM_TOO_NEW ||
		   (cc == CURLE_OK && (inf->status == 410 || status_too_new(error_status(inf))))) {
		char why[512];
		if (inf->stop_reason)
			snprintf(why, sizeof why, "%s", inf->stop_reason);
		else
			status_reason(inf, why, sizeof why);
		relist_consistently(inf, why);
	} else if (cc == CURLE_OK && (inf->status == 401 || inf->status == 403)) {
		take_auth_failure(inf);
	} else if (inf->status == 200 && inf->stop == STREAM_OK &&
		   (inf->watch_events || lasted >= SHORT_WATCH_MS)) {
		/* Its timeout or a cut before the state was whole: start it over. */
		log_info("kubernetes watch-list ended before its initial events did; starting over",
			 "resource", kube_resource_names[inf->res], "error",
			 cc == CURLE_OK ? "the stream ended" : inf->errbuf[0] ? inf->errbuf
									 : curl_easy_strerror(cc));
		note_success(inf);
		schedule_now(inf);
	} else if (cc == CURLE_OK && inf->status == 200) {
		take_failure(inf, cc, "kubernetes watch-list ended at once without an event");
	} else {
		take_failure(inf, cc, "kubernetes watch-list failed");
	}
}

static void take_watch_result(struct informer *inf, CURLcode cc)
{
	int64_t lasted = now_ms() - inf->started_ms;

	if (inf->initial) {
		take_watch_list_result(inf, cc);
	} else if (inf->stop == STREAM_GONE || (cc == CURLE_OK && inf->status == 410)) {
		char w[24];
		snprintf(w, sizeof w, "%" PRIu64, schedule_relist(inf));
		log_info("kubernetes watch expired (410 Gone); relisting", "resource",
			 kube_resource_names[inf->res], "resource_version", inf->rv, "reason",
			 inf->stop_reason ? inf->stop_reason : "HTTP 410", "retry_ms", w);
		note_contact(inf->k);
		inf->need_list = true;
	} else if (inf->stop == STREAM_TOO_LARGE) {
		take_too_large(inf);
	} else if (cc == CURLE_OK && (inf->status == 401 || inf->status == 403)) {
		take_auth_failure(inf);
	} else if (inf->status == 200 && inf->stop == STREAM_OK &&
		   (inf->watch_events || lasted >= SHORT_WATCH_MS)) {
		/* The watch's timeout, the server closing it, or a cut after the
		 * connection had worked: resume from the last RV, now. */
		if (cc != CURLE_OK)
			log_info("kubernetes watch interrupted; resuming", "resource",
				 kube_resource_names[inf->res], "error",
				 inf->errbuf[0] ? inf->errbuf : curl_easy_strerror(cc));
		note_success(inf);
		schedule_now(inf);
	} else if (cc == CURLE_OK && inf->status == 200) {
		take_failure(inf, cc, "kubernetes watch ended at once without an event");
	} else {
		take_failure(inf, cc, "kubernetes watch failed");
	}
}

/*
 * An optional resource's API answered 404: its CRD is not installed (or
 * was removed). An empty list: what it delivered is gone, it counts as
 * synced, and it is asked again slowly. Logged when it starts.
 */
static void take_absent(struct informer *inf)
{
	struct kube_client *k = inf->k;
	uint64_t wait = (uint64_t)k->crd_retry_ms + next_random(k) % ((uint64_t)k->crd_retry_ms / 2 + 1);
	char w[24];

	kube_keys_new_generation(&inf->keys);
	kube_keys_sweep(&inf->keys, sweep_removed, inf);
	set_string(&inf->rv, NULL);
	set_string(&inf->cont, NULL);
	inf->need_list = true;
	inf->rv_unavailable = false;
	inf->synced = true;
	note_success(inf);
	inf->next_at_ms = now_ms() + (int64_t)wait;
	pthread_mutex_lock(&k->status_lock);
	k->status.objects[inf->res] = 0;
	pthread_mutex_unlock(&k->status_lock);
	if (inf->absent)
		return;
	inf->absent = true;
	snprintf(w, sizeof w, "%" PRIu64, wait);
	log_info("kubernetes resource not installed (404); serving without it, asking again later",
		 "resource", kube_resource_names[inf->res], "retry_ms", w);
}

static void take_finished(struct kube_client *k)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(k->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		struct informer *inf;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&inf);
		CURLcode cc = m->data.result;
		curl_easy_getinfo(inf->easy, CURLINFO_RESPONSE_CODE, &inf->status);
		if (cc == CURLE_OK && inf->status == 404 && inf->optional)
			take_absent(inf);
		else if (inf->kind == REQ_LIST)
			take_list_result(inf, cc);
		else
			take_watch_result(inf, cc);
		end_request(inf);
	}
}

/* ---- the Pods informer on and off ---------------------------------------------------- */

static void start_informer(struct informer *inf)
{
	inf->enabled = true;
	inf->need_list = true;
	schedule_now(inf);
}

/* Off: no request, no resourceVersion, and every key it delivered reported gone. */
static void stop_informer(struct informer *inf)
{
	end_request(inf);
	kube_keys_new_generation(&inf->keys);
	kube_keys_sweep(&inf->keys, sweep_removed, inf);
	set_string(&inf->rv, NULL);
	set_string(&inf->cont, NULL);
	inf->rv_unavailable = false;
	kube_backoff_reset(&inf->backoff);
	inf->gone = (struct kube_gone){0};
	inf->auth_retried = false;
	inf->enabled = false;
	inf->synced = false;
	pthread_mutex_lock(&inf->k->status_lock);
	inf->k->status.objects[inf->res] = inf->keys.count;
	pthread_mutex_unlock(&inf->k->status_lock);
}

/* Follow kube_watch_pods: start or stop the Pods informer once per change. */
static void follow_pods_wanted(struct kube_client *k)
{
	struct informer *inf = &k->inf[KUBE_PODS];
	bool want = atomic_load(&k->pods_wanted);

	if (want == k->pods_applied)
		return;
	k->pods_applied = want;
	if (want && !k->node) {
		log_warn("pods needed but not watched: no node name (kubernetes.node_name or "
			 "$NODE_NAME)");
		return;
	}
	if (want) {
		start_informer(inf);
		log_info("kubernetes pods watched from now on", "node", k->node);
	} else {
		stop_informer(inf);
		log_info("kubernetes pods no longer watched; those known are forgotten");
	}
}

void kube_watch_pods(struct kube_client *k, bool on)
{
	atomic_store(&k->pods_wanted, on);
	curl_multi_wakeup(k->multi);
}

/* ---- the thread ------------------------------------------------------------------ */

/* Start inf's request if it is due; lowers *wait to when it will be. */
static void start_if_due(struct informer *inf, int64_t now, long *wait)
{
	if (!inf->enabled || inf->kind != REQ_NONE)
		return;
	if (inf->next_at_ms <= now) {
		if (start_request(inf) == 0)
			return;
		char w[24];
		snprintf(w, sizeof w, "%" PRIu64, schedule_backoff(inf));
		log_error("cannot start a kubernetes request", "resource",
			  kube_resource_names[inf->res], "retry_ms", w);
	}
	if (inf->next_at_ms - now < *wait)
		*wait = (long)(inf->next_at_ms - now);
}

/* Start what is due; returns the ms until the next informer is due (POLL_MAX_MS at most). */
static long start_due_requests(struct kube_client *k)
{
	int64_t now = now_ms();
	long wait = POLL_MAX_MS;

	for (int r = 0; r < KUBE_N_RESOURCES; r++)
		start_if_due(&k->inf[r], now, &wait);
	for (struct informer *inf = k->selected; inf; inf = inf->next)
		start_if_due(inf, now, &wait);
	return wait < 0 ? 0 : wait;
}

/* The core resources: the optional ones and selector watches are not waited for. */
static bool all_synced(const struct kube_client *k)
{
	for (int r = 0; r < KUBE_N_RESOURCES; r++)
		if (k->inf[r].enabled && !k->inf[r].optional && !k->inf[r].synced)
			return false;
	return true;
}

/* Each resource's first full list (or 404), once, after its commit. */
static void report_resources_synced(struct kube_client *k)
{
	for (int r = 0; r < KUBE_N_RESOURCES; r++) {
		struct informer *inf = &k->inf[r];
		if (!inf->enabled || !inf->synced || inf->reported)
			continue;
		inf->reported = true;
		if (k->h.resource_synced)
			k->h.resource_synced(k->h.ctx, (enum kube_resource)r);
	}
}

/* Commit what this round changed; announce the first full sync after its commit. */
static void publish(struct kube_client *k)
{
	if (k->dirty) {
		k->dirty = false;
		if (k->h.commit)
			k->h.commit(k->h.ctx);
	}
	report_resources_synced(k);
	if (!k->synced_called && all_synced(k)) {
		k->synced_called = true;
		pthread_mutex_lock(&k->status_lock);
		k->status.synced = true;
		pthread_mutex_unlock(&k->status_lock);
		log_info("kubernetes data synced");
		k->h.synced(k->h.ctx);
	}
}

/* ---- selector watches ---------------------------------------------------------------- */

static void free_informer(struct informer *inf)
{
	if (inf->k)
		end_request(inf);
	kube_keys_free(&inf->keys);
	free(inf->selector);
	free(inf->own_path);
	free(inf->rv);
	free(inf->cont);
}

struct kube_watch *kube_watch_selected(struct kube_client *k, const char *ns,
				       const char *selector, void *tag)
{
	struct informer *inf = calloc(1, sizeof *inf);
	char *path_ns = curl_easy_escape(NULL, ns, 0), *sel = curl_easy_escape(NULL, selector, 0);

	if (!inf || !path_ns || !sel || asprintf(&inf->own_path, "/api/v1/namespaces/%s/pods",
						  path_ns) < 0 ||
	    asprintf(&inf->selector, "labelSelector=%s", sel) < 0) {
		if (inf) {
			inf->own_path = inf->selector = NULL; /* undefined after a failure */
			free(inf);
		}
		curl_free(path_ns);
		curl_free(sel);
		log_error("out of memory; pods of a selector not watched", "namespace", ns,
			  "selector", selector);
		return NULL;
	}
	curl_free(path_ns);
	curl_free(sel);
	inf->k = k;
	inf->res = KUBE_SELECTED_PODS;
	inf->path = inf->own_path;
	inf->tag = tag;
	inf->enabled = true;
	inf->need_list = true;
	kube_keys_init(&inf->keys);
	schedule_now(inf);
	inf->next = k->selected;
	k->selected = inf;
	log_info("kubernetes pods of a selector watched", "namespace", ns, "selector", selector);
	return (struct kube_watch *)inf;
}

void kube_unwatch(struct kube_client *k, struct kube_watch *w)
{
	struct informer *inf = (struct informer *)w;

	(void)k;
	inf->dropped = true; /* freed by the loop: this may run inside a curl callback */
}

/* Free the selector watches kube_unwatch stopped (outside every curl callback). */
static void reap_dropped(struct kube_client *k)
{
	struct informer **link = &k->selected, *inf;
	bool any = false;

	while ((inf = *link)) {
		if (!inf->dropped) {
			link = &inf->next;
			continue;
		}
		*link = inf->next;
		free_informer(inf);
		free(inf);
		any = true;
	}
	if (any) {
		uint64_t objects = objects_of(&k->inf[KUBE_SELECTED_PODS]);
		pthread_mutex_lock(&k->status_lock);
		k->status.objects[KUBE_SELECTED_PODS] = objects;
		pthread_mutex_unlock(&k->status_lock);
	}
}

static void *client_thread(void *arg)
{
	struct kube_client *k = arg;
	int running;

	if (k->h.thread_begin)
		k->h.thread_begin(k->h.ctx);
	if (k->h.bind)
		k->h.bind(k->h.ctx, k);
	while (!atomic_load(&k->stopping)) {
		atomic_store_explicit(&k->heartbeat_ms, now_ms(), memory_order_relaxed);
		curl_multi_perform(k->multi, &running);
		take_finished(k);
		reap_dropped(k);
		follow_pods_wanted(k);
		publish(k);
		/* After the results: a finished LIST page or watch starts its
		 * successor now, not a poll timeout later. A new handle makes
		 * curl's own timeout 0, so the poll returns at once to drive it. */
		long wait = start_due_requests(k);
		curl_multi_poll(k->multi, NULL, 0, (int)wait, NULL);
	}
	if (k->h.thread_end)
		k->h.thread_end(k->h.ctx);
	return NULL;
}

/* ---- start and stop ------------------------------------------------------------------ */

static void log_connection(const struct kube_client *k, const char *source)
{
	const struct kube_conn *c = &k->conn;
	const char *auth = c->token_file ? "token file"
			   : c->token    ? "token"
			   : (c->cert_file || c->cert_data.data) ? "client certificate"
								 : "none";
	log_info("kubernetes API client starting", "server", c->server, "source", source, "auth",
		 auth, "tls_verify", c->insecure ? "false" : "true", "node", k->node ? k->node : "",
		 "pods", !k->pods_applied ? "not watched (not needed)"
			 : k->node ? "watched" : "not watched (no node name)",
		 "endpointslices", !k->slices_of ? "all" : *k->slices_of ? k->slices_of : "none");
}

/* Only the EndpointSlices of Service "ns/name": its namespace's path, its label. */
static int narrow_slices(struct informer *inf, const char *service)
{
	const char *slash = strchr(service, '/');
	char *esc = NULL, *ns = NULL, *label = NULL;
	int rc = -1;

	if (!slash || !(ns = curl_easy_escape(NULL, service, (int)(slash - service))))
		goto out;
	if (asprintf(&label, "kubernetes.io/service-name=%s", slash + 1) < 0) {
		label = NULL; /* undefined after a failure */
		goto out;
	}
	if (!(esc = curl_easy_escape(NULL, label, 0)))
		goto out;
	if (asprintf(&inf->own_path, "/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices",
		     ns) < 0) {
		inf->own_path = NULL;
		goto out;
	}
	if (asprintf(&inf->selector, "labelSelector=%s", esc) < 0) {
		inf->selector = NULL;
		goto out;
	}
	inf->path = inf->own_path;
	rc = 0;
out:
	free(label);
	curl_free(esc);
	curl_free(ns);
	return rc;
}

static int init_informers(struct kube_client *k)
{
	for (int r = 0; r < KUBE_N_RESOURCES; r++) {
		struct informer *inf = &k->inf[r];
		inf->k = k;
		inf->res = (enum kube_resource)r;
		inf->path = resource_paths[r];
		inf->need_list = true;
		inf->optional = is_optional(inf->res);
		inf->enabled = r == KUBE_PODS ? k->node && k->pods_applied
			       : r == KUBE_SERVICEENTRIES || r == KUBE_WORKLOADENTRIES ? k->mesh
			       : r == KUBE_SERVICEIMPORTS ? k->multicluster
							   : r != KUBE_SELECTED_PODS;
		if (r == KUBE_ENDPOINTSLICES && k->slices_of) {
			inf->enabled = *k->slices_of;
			if (inf->enabled && narrow_slices(inf, k->slices_of) < 0)
				return -1;
		}
		kube_keys_init(&inf->keys);
	}
	if (k->node) {
		char *sel = NULL, *esc = curl_easy_escape(NULL, "spec.nodeName=", 0);
		char *node = curl_easy_escape(NULL, k->node, 0);
		if (esc && node && asprintf(&sel, "fieldSelector=%s%s", esc, node) < 0)
			sel = NULL;
		curl_free(esc);
		curl_free(node);
		if (!sel)
			return -1;
		k->inf[KUBE_PODS].selector = sel;
	}
	return 0;
}

static void free_client(struct kube_client *k)
{
	for (int r = 0; r < KUBE_N_RESOURCES; r++)
		free_informer(&k->inf[r]);
	while (k->selected) {
		struct informer *inf = k->selected;
		k->selected = inf->next;
		free_informer(inf);
		free(inf);
	}
	if (k->multi)
		curl_multi_cleanup(k->multi);
	kube_conn_free(&k->conn);
	kube_token_free(&k->token);
	free(k->node);
	free(k->slices_of);
	pthread_mutex_destroy(&k->status_lock);
	free(k);
	curl_global_cleanup();
}

static int resolve_connection(const struct config *cfg, struct kube_client *k, char *err, size_t errlen)
{
	const char *kc = cfg->kubernetes.kubeconfig;

	if (kc && *kc)
		return kube_conn_load_kubeconfig(kc, &k->conn, err, errlen);
	return kube_conn_in_cluster(getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT"),
				    cfg->kubernetes.service_account_dir, &k->conn, err, errlen);
}

int kube_check(const struct config *cfg, char *err, size_t errlen)
{
	const char *kc = cfg->kubernetes.kubeconfig;
	struct kube_conn c;

	if (!cfg->kubernetes.enabled || !kc || !*kc)
		return 0;
	if (access(kc, R_OK) < 0) {
		snprintf(err, errlen, "kubeconfig %s: %s; not checked here", kc, strerror(errno));
		return 1;
	}
	if (kube_conn_load_kubeconfig(kc, &c, err, errlen) < 0)
		return -1;
	kube_conn_free(&c);
	return 0;
}

int kube_start(const struct config *cfg, bool pods, const char *slices_of,
	       const struct kube_handler *h, struct kube_client **out, char *err, size_t errlen)
{
	/* Thread-safe in libcurl >= 7.84 (Debian 12 has 7.88); reference-counted. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		snprintf(err, errlen, "libcurl initialisation failed");
		return -1;
	}
	struct kube_client *k = calloc(1, sizeof *k);
	if (!k) {
		curl_global_cleanup();
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	k->h = *h;
	k->object_max_bytes = cfg->kubernetes.object_max_bytes;
	k->crd_retry_ms = (int64_t)cfg->kubernetes.crd_retry_interval_ms;
	k->mesh = cfg->mesh.istio;
	k->multicluster = cfg->multicluster.enabled;
	atomic_init(&k->pods_wanted, pods);
	k->pods_applied = pods;
	pthread_mutex_init(&k->status_lock, NULL);
	atomic_init(&k->stopping, false);
	const char *node = cfg->kubernetes.node_name && *cfg->kubernetes.node_name
				   ? cfg->kubernetes.node_name
				   : getenv("NODE_NAME");
	if (getrandom(&k->rnd, sizeof k->rnd, 0) != sizeof k->rnd || !k->rnd)
		k->rnd = (uint32_t)now_ms() | 1;
	if (resolve_connection(cfg, k, err, errlen) < 0) {
		free_client(k);
		return -1;
	}
	if ((node && *node && !(k->node = strdup(node))) ||
	    (slices_of && !(k->slices_of = strdup(slices_of))) || init_informers(k) < 0 ||
	    !(k->multi = curl_multi_init())) {
		snprintf(err, errlen, "out of memory");
		free_client(k);
		return -1;
	}
	log_connection(k, cfg->kubernetes.kubeconfig && *cfg->kubernetes.kubeconfig
				  ? cfg->kubernetes.kubeconfig
				  : "in-cluster");
	if (pods && !k->node)
		log_warn("pods needed but not watched: no node name (kubernetes.node_name or "
			 "$NODE_NAME)");
	atomic_init(&k->heartbeat_ms, now_ms()); /* alive before it is scheduled */
	/* libcurl's resolver threads and liburcu's call_rcu thread start from this one. */
	if (privs_thread_create(&k->thread, PRIVS_KUBERNETES, "kubernetes", client_thread, k, err,
				errlen) < 0) {
		free_client(k);
		return -1;
	}
	*out = k;
	return 0;
}

void kube_stop(struct kube_client *k)
{
	if (!k)
		return;
	atomic_store(&k->stopping, true);
	curl_multi_wakeup(k->multi);
	pthread_join(k->thread, NULL);
	free_client(k);
}
