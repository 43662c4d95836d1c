/*
 * kube/fields.c — which fields of each object the decoder keeps: what the
 * client needs (names, resourceVersion, the WatchList end bookmark's
 * annotation, a Status's code and message) and what the consumer reads
 * (cluster/model.c). Everything else (annotations, managedFields, status
 * conditions, ...) is skipped while it streams past and never reaches
 * memory. A consumer that starts reading another field adds it here; the
 * integration tests that go through the client (test_cluster.py and the
 * rest) fail if one is missing.
 */
#include "kube/kube.h"

#include "kube/internal.h"

/* A key kept with its whole value. */
#define WHOLE(k) KUBE_FIELD(k)
/* A key whose object value (or each object in its array value) keeps only these keys. */
#define ONLY(k, keys) KUBE_FIELD(k, .sub = (keys))
#define END {.key = NULL}

/* What every object keeps of its metadata. */
#define META_KEYS                                                                          \
	WHOLE("name"), WHOLE("namespace"), WHOLE("resourceVersion"),                       \
		ONLY("annotations", initial_events_end)

/* An ERROR event's object is a Status, whatever the resource. */
#define STATUS_KEYS WHOLE("code"), WHOLE("reason"), WHOLE("message"), WHOLE("details")

static const struct kube_field initial_events_end[] = {WHOLE(KUBE_INITIAL_EVENTS_END), END};

static const struct kube_field port_keys[] = {
	WHOLE("name"), WHOLE("protocol"), WHOLE("port"), END};

static const struct kube_field service_meta[] = {META_KEYS, END};
static const struct kube_field service_spec[] = {
	WHOLE("type"), WHOLE("clusterIP"), WHOLE("clusterIPs"), WHOLE("externalName"),
	WHOLE("publishNotReadyAddresses"), ONLY("ports", port_keys), END};
static const struct kube_field service_keys[] = {
	ONLY("metadata", service_meta), ONLY("spec", service_spec), STATUS_KEYS, END};

static const struct kube_field slice_labels[] = {WHOLE("kubernetes.io/service-name"), END};
static const struct kube_field slice_meta[] = {META_KEYS, ONLY("labels", slice_labels), END};
static const struct kube_field target_ref_keys[] = {
	WHOLE("kind"), WHOLE("namespace"), WHOLE("name"), END};
static const struct kube_field condition_keys[] = {
	WHOLE("ready"), WHOLE("serving"), WHOLE("terminating"), END};
static const struct kube_field endpoint_keys[] = {
	WHOLE("addresses"), ONLY("conditions", condition_keys), WHOLE("hostname"),
	ONLY("targetRef", target_ref_keys), END};
static const struct kube_field slice_keys[] = {
	ONLY("metadata", slice_meta), WHOLE("addressType"), ONLY("endpoints", endpoint_keys),
	ONLY("ports", port_keys), STATUS_KEYS, END};

static const struct kube_field namespace_meta[] = {META_KEYS, END};
static const struct kube_field namespace_keys[] = {ONLY("metadata", namespace_meta), STATUS_KEYS,
						    END};

static const struct kube_field pod_meta[] = {META_KEYS, WHOLE("deletionTimestamp"), END};
static const struct kube_field pod_spec[] = {WHOLE("hostNetwork"), END};
static const struct kube_field pod_ip_keys[] = {WHOLE("ip"), END};
static const struct kube_field pod_status[] = {
	WHOLE("phase"), WHOLE("podIP"), ONLY("podIPs", pod_ip_keys), END};
static const struct kube_field pod_keys[] = {
	ONLY("metadata", pod_meta), ONLY("spec", pod_spec), ONLY("status", pod_status),
	STATUS_KEYS, END};

const struct kube_field *kube_fields(enum kube_resource r)
{
	switch (r) {
	case KUBE_SERVICES:
		return service_keys;
	case KUBE_ENDPOINTSLICES:
		return slice_keys;
	case KUBE_NAMESPACES:
		return namespace_keys;
	case KUBE_PODS:
		return pod_keys;
	case KUBE_N_RESOURCES:
		break;
	}
	return NULL;
}
