/*
 * cluster/feed.c — the Kubernetes client's events into the table: the glue
 * between kube/ (which knows the API) and the model (which knows DNS).
 * No commit hook: each change is visible to readers as soon as it is made.
 */
#include "cluster/feed.h"

#include <stdio.h>
#include <urcu/urcu-memb.h>

#include "log/log.h"

static void on_upsert(void *ctx, enum kube_resource r, const struct kube_json *obj)
{
	struct cluster *c = ctx;

	switch (r) {
	case KUBE_SERVICES:
		cluster_service_upsert(c, obj);
		break;
	case KUBE_ENDPOINTSLICES:
		cluster_slice_upsert(c, obj);
		break;
	case KUBE_NAMESPACES:
		cluster_namespace_upsert(c, obj);
		break;
	case KUBE_PODS:
		cluster_pod_upsert(c, obj);
		break;
	case KUBE_N_RESOURCES:
		break;
	}
}

static void on_remove(void *ctx, enum kube_resource r, const char *ns, const char *name)
{
	struct cluster *c = ctx;

	switch (r) {
	case KUBE_SERVICES:
		cluster_service_remove(c, ns, name);
		break;
	case KUBE_ENDPOINTSLICES:
		cluster_slice_remove(c, ns, name);
		break;
	case KUBE_NAMESPACES:
		cluster_namespace_remove(c, name);
		break;
	case KUBE_PODS:
		cluster_pod_remove(c, ns, name);
		break;
	case KUBE_N_RESOURCES:
		break;
	}
}

static void on_synced(void *ctx)
{
	struct cluster *c = ctx;
	struct cluster_stats st;
	char services[24], endpoints[24], names[24];

	cluster_set_synced(c);
	cluster_stats(c, &st);
	snprintf(services, sizeof services, "%zu", st.services);
	snprintf(endpoints, sizeof endpoints, "%zu", st.endpoints);
	snprintf(names, sizeof names, "%zu", st.names);
	log_info("cluster names synced from the Kubernetes API", "services", services,
		 "endpoints", endpoints, "names", names);
}

/* The table's writer calls take the RCU read lock: the thread must be known to RCU. */
static void on_thread_begin(void *ctx)
{
	(void)ctx;
	urcu_memb_register_thread();
}

static void on_thread_end(void *ctx)
{
	(void)ctx;
	urcu_memb_unregister_thread();
}

void cluster_feed_handler(struct cluster *c, struct kube_handler *out)
{
	*out = (struct kube_handler){
		.ctx = c,
		.upsert = on_upsert,
		.remove = on_remove,
		.synced = on_synced,
		.thread_begin = on_thread_begin,
		.thread_end = on_thread_end,
	};
}
