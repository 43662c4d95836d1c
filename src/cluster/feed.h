/*
 * cluster/feed.h — a kube_handler that applies the Kubernetes client's
 * events to the name tables it feeds (on the client's thread, each table's
 * one writer): the cluster zone's, the clusterset zone's (Multi-Cluster
 * Services) and the mesh's (Istio's ServiceEntries), and opens each to
 * readers once what it needs has been listed.
 */
#ifndef LOCALDNS_CLUSTER_FEED_H
#define LOCALDNS_CLUSTER_FEED_H

#include "cluster/cluster.h"
#include "kube/kube.h"
#include "mesh/mesh.h"

struct cluster_feed {
	struct cluster *cluster;     /* the cluster zone */
	struct cluster *clusterset;  /* NULL: multicluster.enabled is false */
	struct mesh *mesh;           /* NULL: mesh.istio is false */
	/* the feed's own, on the client's thread */
	struct kube_client *kube;
	bool core_synced, imports_listed, entries_listed, workloads_listed;
};

/* f must outlive the client; its tables are set, the rest zero. */
void cluster_feed_handler(struct cluster_feed *f, struct kube_handler *out);

#endif
