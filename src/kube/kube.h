/*
 * kube — the Kubernetes API client: list+watch of Services, EndpointSlices,
 * Namespaces and, when asked, this node's Pods; with mesh.istio Istio's
 * ServiceEntries and WorkloadEntries and the Pods that selectors pick
 * (kube_watch_selected); with multicluster.enabled ServiceImports. Each is
 * delivered object by object to a handler.
 *
 * Owns: the connection (a kubeconfig or the in-cluster service account, the
 * bearer token and its rotation), one thread running libcurl's multi
 * interface with one request per resource at a time, the informer state of
 * each resource (a WatchList or a LIST served from the API server's watch
 * cache, then WATCH from its resourceVersion, resume from the last seen
 * resourceVersion, relist on 410 Gone never older than what it saw),
 * jittered backoff on errors and repeated relists, and the set of object
 * keys (namespace/name) it has delivered, so a relist can report what
 * disappeared. Responses are decoded as they stream in, keeping only the
 * fields DNS reads of one object at a time (struct kube_json, below); one
 * object is bounded by kubernetes.object_max_bytes. The custom resources
 * (ServiceEntries, WorkloadEntries, ServiceImports) are optional: a 404
 * (their CRD is not installed) counts as an empty list, is logged once, and
 * is asked again every kubernetes.crd_retry_interval, so a CRD installed
 * later is picked up without a restart; they never hold back `synced`.
 *
 * Must never: keep whole objects (the consumer keeps what it needs), hold a
 * whole LIST response, page or watch stream, ask etcd for a LIST the watch
 * cache can serve, call the handler from any thread but its own, or block
 * the caller of kube_status.
 */
#ifndef LOCALDNS_KUBE_H
#define LOCALDNS_KUBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

enum kube_resource {
	KUBE_SERVICES, KUBE_ENDPOINTSLICES, KUBE_NAMESPACES, KUBE_PODS,
	KUBE_SERVICEENTRIES,  /* networking.istio.io/v1, with mesh.istio */
	KUBE_WORKLOADENTRIES, /* networking.istio.io/v1, with mesh.istio */
	KUBE_SERVICEIMPORTS,  /* multicluster.x-k8s.io/v1alpha1, with multicluster.enabled */
	KUBE_SELECTED_PODS,   /* Pods of kube_watch_selected's watches, all together */
	KUBE_N_RESOURCES
};

struct kube_client;

/*
 * An object as the client hands it over: the JSON values it kept (kube/
 * fields.c), read with the functions below (kube/json.c). Borrowed for
 * the call it is handed to. A JSON null is an element of type
 * KUBE_JSON_NULL in an array, and no member at all to kube_json_get.
 */
enum kube_json_type {
	KUBE_JSON_NULL, KUBE_JSON_BOOL, KUBE_JSON_NUMBER, KUBE_JSON_STRING, KUBE_JSON_ARRAY,
	KUBE_JSON_OBJECT,
};

struct kube_json {
	enum kube_json_type type;
	bool boolean;                   /* KUBE_JSON_BOOL */
	uint32_t count;                 /* KUBE_JSON_ARRAY, _OBJECT: its elements, members */
	const char *key;                /* a member's key; NULL for an element */
	const char *text;               /* KUBE_JSON_STRING; _NUMBER: its literal; NUL-ended */
	size_t len;                     /* of text */
	const struct kube_json *first;  /* an array's or object's first element or member */
	const struct kube_json *next;   /* the element or member after this one */
};

/* obj's member named key (the last one, if repeated); NULL when obj is no
 * object, has no such member, or it is null. */
const struct kube_json *kube_json_get(const struct kube_json *obj, const char *key);
/* v's text when it is a string, else NULL. */
const char *kube_json_text(const struct kube_json *v);
/* The text of obj's member key when it is a string, else NULL. */
const char *kube_json_get_text(const struct kube_json *obj, const char *key);
/* An array's elements (then ->next); 0 / NULL for anything else. */
size_t kube_json_len(const struct kube_json *arr);
const struct kube_json *kube_json_first(const struct kube_json *arr);
/* A number's integer part (clamped to int64); 0 for anything else. */
int64_t kube_json_int(const struct kube_json *v);
/* Whether v is JSON true. */
bool kube_json_true(const struct kube_json *v);

/* A JSON text parsed whole, every value kept (tests, tools: the client
 * decodes as bytes arrive). NULL when it is not one JSON value. */
struct kube_json_doc;
struct kube_json_doc *kube_json_parse(const char *text, size_t len);
const struct kube_json *kube_json_root(const struct kube_json_doc *doc);
void kube_json_doc_free(struct kube_json_doc *doc);

/* "services", "endpointslices", "namespaces", "pods", "serviceentries", "workloadentries",
 * "serviceimports", "selectedpods". */
const char *kube_resource_name(enum kube_resource r);
extern const char *const kube_resource_names[KUBE_N_RESOURCES];

/*
 * Called on the client's own thread, one call at a time (single writer).
 * Every call is made with no lock of the client held.
 */
struct kube_handler {
	void *ctx;
	/* An object was added or changed; obj is borrowed for the call and
	 * holds only the fields kube/fields.c keeps. A relist delivers every
	 * listed object again, changed or not. */
	void (*upsert)(void *ctx, enum kube_resource r, const struct kube_json *obj);
	/* An object is gone: a DELETED event, or a relist that no longer lists it.
	 * ns is "" for cluster-scoped objects (Namespaces). */
	void (*remove)(void *ctx, enum kube_resource r, const char *ns, const char *name);
	/* Optional: a batch of calls is complete (the end of a whole LIST, all pages and the
	 * removals it implies; or the watch events read in one go): the consumer
	 * publishes what it has changed so far. Pages of a LIST in progress get no
	 * commit of their own, but a commit for another resource's events may
	 * come between them. */
	void (*commit)(void *ctx);
	/* Every core resource (Services, EndpointSlices, Namespaces, and Pods
	 * when watched) has completed its first full LIST (called once, after
	 * that LIST's commit). The optional resources do not hold it back. */
	void (*synced)(void *ctx);
	/* Optional: resource r has completed its first full LIST, or answered
	 * 404 (an optional resource not installed: listed, empty); once per
	 * resource, after that commit. */
	void (*resource_synced)(void *ctx, enum kube_resource r);
	/* The objects of a selector watch (kube_watch_selected), with its tag,
	 * as upsert and remove. Required when the consumer starts such watches. */
	void (*selected_upsert)(void *ctx, void *tag, const struct kube_json *obj);
	void (*selected_remove)(void *ctx, void *tag, const char *ns, const char *name);
	/* Optional: on the client's thread before its first handler call: the
	 * client, for kube_watch_selected. */
	void (*bind)(void *ctx, struct kube_client *k);
	/* Optional: called on the client's thread before its first call and
	 * after its last (e.g. to register the thread with RCU). */
	void (*thread_begin)(void *ctx);
	void (*thread_end)(void *ctx);
};

/*
 * Resolve the connection (cfg->kubernetes.kubeconfig, or in-cluster from
 * $KUBERNETES_SERVICE_HOST/PORT and kubernetes.service_account_dir) and the
 * node name (kubernetes.node_name, else $NODE_NAME), then start the thread.
 * pods: watch this node's Pods too (with no node name they cannot be:
 * logged). slices_of: which EndpointSlices to watch: NULL every one, ""
 * none, "ns/name" that Service's only (cluster_slices_needed). cfg is not
 * kept.
 * Returns 0, or -1 with a clear message in err (e.g. "kubeconfig FILE: no
 * current-context") and nothing started.
 */
int kube_start(const struct config *cfg, bool pods, const char *slices_of,
	       const struct kube_handler *h, struct kube_client **out, char *err, size_t errlen);

/*
 * Start or stop watching this node's Pods; any thread, never waits: the
 * client's thread applies it at its next turn. Starting LISTs and WATCHes
 * them like the other resources; stopping ends the request in flight and
 * reports every Pod delivered so far through remove (then commit), so the
 * consumer keeps nothing of them.
 */
void kube_watch_pods(struct kube_client *k, bool on);

/*
 * Watch the Pods of namespace ns that a label selector picks ("k=v,k2=v2",
 * as a labelSelector), wherever they run: a list+watch of that namespace's
 * path with that selector (never every Pod of the cluster). Their events
 * come to h.selected_upsert / selected_remove with tag. Only on the
 * client's thread (from a handler call); the request starts at the
 * client's next turn. NULL when out of memory (logged).
 */
struct kube_watch;
struct kube_watch *kube_watch_selected(struct kube_client *k, const char *ns,
				       const char *selector, void *tag);
/*
 * Stop a selector watch: no handler call carries its tag after this
 * returns, and the Pods it delivered are not reported removed (the caller
 * forgets them). Only on the client's thread.
 */
void kube_unwatch(struct kube_client *k, struct kube_watch *w);

/*
 * What kube_start would refuse about the connection, checked without
 * starting anything (for --check-config): with kubernetes.kubeconfig set,
 * the file is read and parsed (a bearer token for a plain http:// server,
 * for one, is an error). Returns 0; 1 when the kubeconfig cannot be read
 * here (it may exist only where the daemon runs), with why in err; -1 with
 * the error in err. The in-cluster connection is known only in the pod.
 */
int kube_check(const struct config *cfg, char *err, size_t errlen);

/* Promptly stops the thread (wakes it from curl_multi_poll), joins it, frees all. */
void kube_stop(struct kube_client *k);

struct kube_status {
	bool synced;                 /* first full sync done */
	int64_t last_contact_ms;     /* CLOCK_REALTIME ms of the last successful response or event (0 = never) */
	uint64_t events[KUBE_N_RESOURCES];   /* watch events (bookmarks included) */
	uint64_t relists[KUBE_N_RESOURCES];  /* complete (re)lists after the first */
	uint64_t errors;                     /* failed requests, all resources */
	uint64_t objects[KUBE_N_RESOURCES];  /* objects known now */
	int64_t last_list_ms[KUBE_N_RESOURCES]; /* CLOCK_REALTIME ms the last (re)list ended (0 = never) */
	uint64_t objects_too_large[KUBE_N_RESOURCES]; /* requests failed on an object over object_max_bytes */
	int64_t heartbeat_ms;        /* CLOCK_MONOTONIC ms of the thread's last loop turn (at least 1/s) */
};

/* A snapshot of the counters; any thread, never waits for the network. */
void kube_status(const struct kube_client *k, struct kube_status *out);

#endif
