/*
 * cluster/feed.h — a kube_handler that applies the Kubernetes client's
 * events to a cluster table (on the client's thread, the table's one
 * writer) and opens the table to readers after the first full sync.
 */
#ifndef LOCALDNS_CLUSTER_FEED_H
#define LOCALDNS_CLUSTER_FEED_H

#include "cluster/cluster.h"
#include "kube/kube.h"

void cluster_feed_handler(struct cluster *c, struct kube_handler *out);

#endif
