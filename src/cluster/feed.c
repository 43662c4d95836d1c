/*
 * cluster/feed.c — the Kubernetes client's events into the name tables: the
 * glue between kube/ (which knows the API) and the tables (which know
 * DNS). Services, Pods: the cluster zone; ServiceImports: the clusterset
 * zone; EndpointSlices and Namespaces: both (each table ignores the slices
 * that are not its own); ServiceEntries, WorkloadEntries and the Pods of
 * their selectors: the mesh, which starts and stops those selector watches
 * through the client (mesh_bind). No commit hook: each change is visible
 * to readers as soon as it is made.
 *
 * A table answers once what it reads has been listed: the cluster zone
 * after the core resources (the client's `synced`), the clusterset zone
 * after them and the ServiceImports, the mesh after ServiceEntries and
 * WorkloadEntries (an absent CRD counts as listed).
 */
#include "cluster/feed.h"

#include <stdio.h>
#include <urcu/urcu-memb.h>

#include "cluster/objects.h"
#include "log/log.h"
#include "mesh/objects.h"

static void on_upsert(void *ctx, enum kube_resource r, const struct kube_json *obj)
{
	struct cluster_feed *f = ctx;

	switch (r) {
	case KUBE_SERVICES:
		cluster_service_upsert(f->cluster, obj);
		break;
	case KUBE_ENDPOINTSLICES:
		cluster_slice_upsert(f->cluster, obj);
		if (f->clusterset)
			cluster_slice_upsert(f->clusterset, obj);
		break;
	case KUBE_NAMESPACES:
		cluster_namespace_upsert(f->cluster, obj);
		if (f->clusterset)
			cluster_namespace_upsert(f->clusterset, obj);
		break;
	case KUBE_PODS:
		cluster_pod_upsert(f->cluster, obj);
		break;
	case KUBE_SERVICEIMPORTS:
		if (f->clusterset)
			cluster_service_upsert(f->clusterset, obj);
		break;
	case KUBE_SERVICEENTRIES:
		if (f->mesh)
			mesh_entry_upsert(f->mesh, obj);
		break;
	case KUBE_WORKLOADENTRIES:
		if (f->mesh)
			mesh_workload_upsert(f->mesh, obj);
		break;
	case KUBE_SELECTED_PODS: /* selector watches come through on_selected_* */
	case KUBE_N_RESOURCES:
		break;
	}
}

static void on_remove(void *ctx, enum kube_resource r, const char *ns, const char *name)
{
	struct cluster_feed *f = ctx;

	switch (r) {
	case KUBE_SERVICES:
		cluster_service_remove(f->cluster, ns, name);
		break;
	case KUBE_ENDPOINTSLICES:
		cluster_slice_remove(f->cluster, ns, name);
		if (f->clusterset)
			cluster_slice_remove(f->clusterset, ns, name);
		break;
	case KUBE_NAMESPACES:
		cluster_namespace_remove(f->cluster, name);
		if (f->clusterset)
			cluster_namespace_remove(f->clusterset, name);
		break;
	case KUBE_PODS:
		cluster_pod_remove(f->cluster, ns, name);
		break;
	case KUBE_SERVICEIMPORTS:
		if (f->clusterset)
			cluster_service_remove(f->clusterset, ns, name);
		break;
	case KUBE_SERVICEENTRIES:
		if (f->mesh)
			mesh_entry_remove(f->mesh, ns, name);
		break;
	case KUBE_WORKLOADENTRIES:
		if (f->mesh)
			mesh_workload_remove(f->mesh, ns, name);
		break;
	case KUBE_SELECTED_PODS:
	case KUBE_N_RESOURCES:
		break;
	}
}

static void on_selected_upsert(void *ctx, void *tag, const struct kube_json *obj)
{
	struct cluster_feed *f = ctx;

	if (f->mesh)
		mesh_pod_upsert(f->mesh, tag, obj);
}

static void on_selected_remove(void *ctx, void *tag, const char *ns, const char *name)
{
	struct cluster_feed *f = ctx;

	if (f->mesh)
		mesh_pod_remove(f->mesh, tag, ns, name);
}

static void log_table_synced(const char *what, const struct cluster *c)
{
	struct cluster_stats st;
	char services[24], endpoints[24], names[24];

	cluster_stats(c, &st);
	snprintf(services, sizeof services, "%zu", st.services);
	snprintf(endpoints, sizeof endpoints, "%zu", st.endpoints);
	snprintf(names, sizeof names, "%zu", st.names);
	log_info(what, "services", services, "endpoints", endpoints, "names", names);
}

/* The clusterset zone needs the core resources and the ServiceImports.
 * The mesh answers from its first entry on: its first list is only logged. */
static void open_clusterset(struct cluster_feed *f)
{
	if (!f->clusterset || !f->core_synced || !f->imports_listed)
		return;
	cluster_set_synced(f->clusterset);
	log_table_synced("multi-cluster names synced from the Kubernetes API", f->clusterset);
}

static void open_mesh(struct cluster_feed *f)
{
	struct mesh_stats st;
	char entries[24], hosts[24], workloads[24];

	if (!f->mesh || !f->entries_listed || !f->workloads_listed)
		return;
	mesh_stats(f->mesh, &st);
	snprintf(entries, sizeof entries, "%zu", st.entries);
	snprintf(hosts, sizeof hosts, "%zu", st.hosts);
	snprintf(workloads, sizeof workloads, "%zu", st.workloads);
	log_info("mesh names synced from the Kubernetes API", "serviceentries", entries, "hosts",
		 hosts, "workloadentries", workloads);
}

static void on_synced(void *ctx)
{
	struct cluster_feed *f = ctx;

	cluster_set_synced(f->cluster);
	log_table_synced("cluster names synced from the Kubernetes API", f->cluster);
	f->core_synced = true;
	open_clusterset(f);
}

static void on_resource_synced(void *ctx, enum kube_resource r)
{
	struct cluster_feed *f = ctx;

	if (r == KUBE_SERVICEIMPORTS) {
		f->imports_listed = true;
		open_clusterset(f);
	} else if (r == KUBE_SERVICEENTRIES || r == KUBE_WORKLOADENTRIES) {
		f->entries_listed |= r == KUBE_SERVICEENTRIES;
		f->workloads_listed |= r == KUBE_WORKLOADENTRIES;
		open_mesh(f);
	}
}

/* The mesh's selector watches, through the client. */
static void *watch_selected(void *ctx, const char *ns, const char *selector, void *tag)
{
	struct cluster_feed *f = ctx;

	return kube_watch_selected(f->kube, ns, selector, tag);
}

static void unwatch_selected(void *ctx, void *handle)
{
	struct cluster_feed *f = ctx;

	kube_unwatch(f->kube, handle);
}

static void on_bind(void *ctx, struct kube_client *k)
{
	struct cluster_feed *f = ctx;

	f->kube = k;
	if (f->mesh)
		mesh_bind(f->mesh, &(struct mesh_watcher){
					   .ctx = f, .watch = watch_selected, .unwatch = unwatch_selected});
}

/* The tables' writer calls take the RCU read lock: the thread must be known to RCU. */
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

void cluster_feed_handler(struct cluster_feed *f, struct kube_handler *out)
{
	*out = (struct kube_handler){
		.ctx = f,
		.upsert = on_upsert,
		.remove = on_remove,
		.synced = on_synced,
		.resource_synced = on_resource_synced,
		.selected_upsert = on_selected_upsert,
		.selected_remove = on_selected_remove,
		.bind = on_bind,
		.thread_begin = on_thread_begin,
		.thread_end = on_thread_end,
	};
}
