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

/* A Service's slices; an imported multi-cluster Service's (KEP-1645) and where from. */
static const struct kube_field slice_labels[] = {
	WHOLE("kubernetes.io/service-name"), WHOLE("multicluster.kubernetes.io/service-name"),
	WHOLE("multicluster.kubernetes.io/source-cluster"), END};
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

/* A Pod a selector picked (mesh/): its addresses, whether it is ready. */
static const struct kube_field condition_type_keys[] = {WHOLE("type"), WHOLE("status"), END};
static const struct kube_field selected_pod_status[] = {
	WHOLE("phase"), WHOLE("podIP"), ONLY("podIPs", pod_ip_keys),
	ONLY("conditions", condition_type_keys), END};
static const struct kube_field selected_pod_keys[] = {
	ONLY("metadata", pod_meta), ONLY("status", selected_pod_status), STATUS_KEYS, END};

/* networking.istio.io/v1 ServiceEntry: what Istio's DNS name table is built from. */
static const struct kube_field entry_labels[] = {
	WHOLE("networking.istio.io/enable-autoallocate-ip"), END};
static const struct kube_field entry_meta[] = {
	META_KEYS, WHOLE("creationTimestamp"), ONLY("labels", entry_labels), END};
static const struct kube_field entry_endpoint_keys[] = {WHOLE("address"), END};
static const struct kube_field entry_selector_keys[] = {WHOLE("labels"), END};
static const struct kube_field entry_spec[] = {
	WHOLE("hosts"), WHOLE("addresses"), WHOLE("resolution"), WHOLE("exportTo"),
	ONLY("endpoints", entry_endpoint_keys), ONLY("workloadSelector", entry_selector_keys), END};
static const struct kube_field entry_address_keys[] = {WHOLE("value"), WHOLE("host"), END};
static const struct kube_field entry_status[] = {ONLY("addresses", entry_address_keys), END};
static const struct kube_field entry_keys[] = {
	ONLY("metadata", entry_meta), ONLY("spec", entry_spec), ONLY("status", entry_status),
	STATUS_KEYS, END};

/* networking.istio.io/v1 WorkloadEntry: its address, its labels (spec's and
 * metadata's, for selectors), its health when health checks are on. */
static const struct kube_field workload_notes[] = {
	WHOLE(KUBE_INITIAL_EVENTS_END), WHOLE("proxy.istio.io/health-checks-enabled"), END};
static const struct kube_field workload_meta[] = {
	WHOLE("name"), WHOLE("namespace"), WHOLE("resourceVersion"), WHOLE("labels"),
	ONLY("annotations", workload_notes), END};
static const struct kube_field workload_spec[] = {WHOLE("address"), WHOLE("labels"), END};
static const struct kube_field workload_status[] = {ONLY("conditions", condition_type_keys), END};
static const struct kube_field workload_keys[] = {
	ONLY("metadata", workload_meta), ONLY("spec", workload_spec),
	ONLY("status", workload_status), STATUS_KEYS, END};

/* multicluster.x-k8s.io/v1alpha1 ServiceImport. */
static const struct kube_field import_meta[] = {META_KEYS, END};
static const struct kube_field import_spec[] = {
	WHOLE("type"), WHOLE("ips"), ONLY("ports", port_keys), END};
static const struct kube_field import_keys[] = {
	ONLY("metadata", import_meta), ONLY("spec", import_spec), STATUS_KEYS, END};

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
	case KUBE_SERVICEENTRIES:
		return entry_keys;
	case KUBE_WORKLOADENTRIES:
		return workload_keys;
	case KUBE_SERVICEIMPORTS:
		return import_keys;
	case KUBE_SELECTED_PODS:
		return selected_pod_keys;
	case KUBE_N_RESOURCES:
		break;
	}
	return NULL;
}
