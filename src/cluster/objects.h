/*
 * cluster/objects.h — the Kubernetes objects into a cluster table: the
 * calls of the table's one writer thread that take the client's JSON
 * (cluster/feed.c makes them). Apart from cluster.h so that the read side,
 * which the hot path includes, does not pull in the Kubernetes client.
 *
 * Must never: keep the JSON objects it is given (they are borrowed for the
 * call); be called from more than one thread, or from one not registered
 * with RCU.
 */
#ifndef LOCALDNS_CLUSTER_OBJECTS_H
#define LOCALDNS_CLUSTER_OBJECTS_H

#include "cluster/cluster.h"
#include "kube/kube.h"

/*
 * An object was added or changed / is gone. Objects that are not what the
 * call says, or lack a name, are ignored with a debug log line; fields the
 * table does not use are never read.
 */
void cluster_service_upsert(struct cluster *c, const struct kube_json *svc);
void cluster_service_remove(struct cluster *c, const char *ns, const char *name);
void cluster_slice_upsert(struct cluster *c, const struct kube_json *slice);
void cluster_slice_remove(struct cluster *c, const char *ns, const char *name);
void cluster_namespace_upsert(struct cluster *c, const struct kube_json *ns);
void cluster_namespace_remove(struct cluster *c, const char *name);
void cluster_pod_upsert(struct cluster *c, const struct kube_json *pod);
void cluster_pod_remove(struct cluster *c, const char *ns, const char *name);

#endif
