/*
 * query/kinds.h — what a query was: its transport and where its answer came
 * from. A leaf header (no project includes), so that the subsystems that
 * record queries (querylog, the resolver) need not include the whole
 * pipeline, which includes them in turn.
 */
#ifndef LOCALDNS_QUERY_KINDS_H
#define LOCALDNS_QUERY_KINDS_H

enum query_transport { QUERY_UDP, QUERY_TCP };

/*
 * Where one answer came from. NONE: the query was refused, malformed or
 * answered by the protocol rules (CHAOS, AXFR, SERVFAIL before a sync).
 */
enum query_source {
	QUERY_SOURCE_NONE,
	QUERY_SOURCE_STATIC,   /* static records */
	QUERY_SOURCE_CLUSTER,  /* the Kubernetes table */
	QUERY_SOURCE_CACHE,    /* a live cache entry */
	QUERY_SOURCE_STALE,    /* an expired entry (the upstream is failing) */
	QUERY_SOURCE_UPSTREAM, /* handed to the resolver */
	QUERY_SOURCE_MESH,     /* Istio's ServiceEntry hosts (mesh.istio) */
	QUERY_SOURCE_COUNT
};

/* "none", "static", "cluster", "cache", "stale", "upstream", "mesh" (query.c). */
const char *query_source_name(enum query_source source);
extern const char *const query_source_names[QUERY_SOURCE_COUNT];

#endif
