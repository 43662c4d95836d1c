/*
 * mesh/objects.h — Istio's objects and the Pods of its selectors into the
 * mesh: the calls of its one writer thread that take the Kubernetes
 * client's JSON (cluster/feed.c makes them). Apart from mesh.h so that the
 * read side, which the hot path includes, does not pull in the Kubernetes
 * client.
 *
 * Must never: keep the JSON objects it is given (they are borrowed for the
 * call); be called from more than one thread, or from one not registered
 * with RCU.
 */
#ifndef LOCALDNS_MESH_OBJECTS_H
#define LOCALDNS_MESH_OBJECTS_H

#include "kube/kube.h"
#include "mesh/mesh.h"

/* A ServiceEntry / WorkloadEntry added or changed, or gone. Objects without
 * a name are ignored; fields Istio's name table does not use are never read. */
void mesh_entry_upsert(struct mesh *m, const struct kube_json *se);
void mesh_entry_remove(struct mesh *m, const char *ns, const char *name);
void mesh_workload_upsert(struct mesh *m, const struct kube_json *we);
void mesh_workload_remove(struct mesh *m, const char *ns, const char *name);
/* A Pod of the selector watch tag (struct mesh_watcher) added, changed or gone. */
void mesh_pod_upsert(struct mesh *m, void *tag, const struct kube_json *pod);
void mesh_pod_remove(struct mesh *m, void *tag, const char *ns, const char *name);

#endif
