/*
 * cluster_fixture.h — the set-up the tests of cluster/ share
 * (test_cluster.c, test_cluster_coredns.c, and the query path's tests that
 * hold a table: test_autopath.c, test_mesh.c): a table made from a config's
 * YAML, Kubernetes objects upserted from JSON text (a pod of this node), the RCU registration
 * a test's thread needs, and questions answered as the query path answers
 * them. Include after <cmocka.h> and reply.h.
 *
 * Must never: count allocations (alloc_count.h belongs to the test file,
 * once per binary), or allocate between a reply's begin and its finish
 * (the no-allocation tests answer through answer_query while counting).
 */
#ifndef LOCALDNS_TEST_CLUSTER_FIXTURE_H
#define LOCALDNS_TEST_CLUSTER_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "cluster/cluster.h"
#include "cluster/objects.h"
#include "config/config.h"
#include "config_text.h"
#include "dns/dns.h"
#include "kube/kube.h"

static inline struct cluster *make_cluster_from(const char *yaml)
{
	char err[CONFIG_ERR_MAX];
	struct config *cfg = config_of(yaml);
	struct cluster *c = cluster_new(cfg, err, sizeof err);

	config_free(cfg);
	assert_non_null(c);
	return c;
}

/* fn(c, object) for the object in the JSON text json. */
#define UPSERT(fn, c, json)                                                 \
	do {                                                                \
		struct kube_json_doc *d_ = kube_json_parse(json, strlen(json)); \
		assert_non_null(d_);                                        \
		fn(c, kube_json_root(d_));                                  \
		kube_json_doc_free(d_);                                     \
	} while (0)

/* A Running Pod name in ns with address ip, on this node (n1). */
static inline void add_node_pod(struct cluster *c, const char *ns, const char *name,
				const char *ip)
{
	char json[512];

	snprintf(json, sizeof json,
		 "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\"},"
		 "\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Running\","
		 "\"podIP\":\"%s\",\"podIPs\":[{\"ip\":\"%s\"}]}}", name, ns, ip, ip);
	UPSERT(cluster_pod_upsert, c, json);
}

/* A test's teardown for a setup that registered the thread with RCU and
 * left its table in *state. */
static inline int free_cluster_and_unregister(void **state)
{
	cluster_free(*state);
	urcu_memb_unregister_thread();
	return 0;
}

/* Answers q into r->buf as the query path does, the reply finished for a
 * client's udp_payload; r is not read back (read_reply does that). */
static inline enum cluster_result answer_query(const struct cluster *c, const struct dns_query *q,
					       struct reply *r, uint16_t udp_payload)
{
	struct dns_writer w;
	struct cluster_chase chase;
	enum cluster_result res;

	dns_response_begin(&w, r->buf, sizeof r->buf, q, DNS_R_NOERROR);
	urcu_memb_read_lock();
	res = cluster_answer(c, q, &w, &chase);
	urcu_memb_read_unlock();
	r->len = dns_response_finish(&w, udp_payload);
	return res;
}

/* The question name/qtype answered into r and read back. */
static inline enum cluster_result ask_for(const struct cluster *c, const char *name, uint16_t qtype,
					  uint16_t udp_payload, struct reply *r)
{
	struct dns_query q;
	enum cluster_result res;

	make_query(&q, name, qtype);
	res = answer_query(c, &q, r, udp_payload);
	read_reply(r);
	return res;
}

static inline int rcode(const struct reply *r)
{
	return r->v->flags & 0xf;
}

#endif
