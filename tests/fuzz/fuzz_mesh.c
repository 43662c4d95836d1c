/*
 * libFuzzer target for the Istio objects -> mesh path: the input is what
 * the API server sends for ServiceEntries or WorkloadEntries (the first
 * kind it names picks which; without one its length does), read as the
 * Kubernetes client reads it: its streaming decoder, fed in uneven chunks,
 * keeping the fields the client keeps (kube/fields.c) -- a LIST's items,
 * else a watch stream's events (ADDED/MODIFIED upsert, DELETED removes) --
 * and handed to the mesh as cluster/feed.c does. Every object is then also
 * given as a Pod of each selector the mesh asked to watch.
 *
 * Then every host the input's strings spell, and a name below each, is
 * asked for A and AAAA by clients of three kinds (a pod of a known
 * namespace, one of another, an unknown one), also as Istio's search-path
 * alias; then every object is removed. ASan/UBSan catch memory errors and
 * leaks (nothing outlives mesh_free); the checks catch a reply a client
 * cannot read, one over its limit, an answer not the mesh's to give
 * (another type), and anything left (a host, a selector, a Pod) once every
 * object that made it is gone.
 */
#include <stdio.h>
#include <string.h>

#include <urcu/rculfhash.h>
#include <urcu/urcu-memb.h>

#include "config/config.h"
#include "dns/dns.h"
#include "deferred_rcu.h"
#include "fuzz.h"
#include "kube_feed.h"
#include "mesh/mesh.h"
#include "mesh/objects.h"

#define UDP_MAX 1232

static struct config *config;
static struct cds_lfht *keep_worker; /* see LLVMFuzzerInitialize */

/* What the stream upserted, to remove at the end. */
struct stream {
	struct mesh *m;
	struct fuzz_kube_feed feed;
	char keys[256][2][512];
	size_t n_keys;
	bool lost_key;         /* more objects than keys: not all can be removed */
	void *tags[16];        /* the selectors the mesh asked to watch */
	size_t n_tags;
	uint8_t names[64][DNS_MAX_NAME]; /* hosts the input spells */
	size_t n_names;
};

static struct stream *current;

static void *watch(void *ctx, const char *ns, const char *selector, void *tag)
{
	(void)ctx;
	(void)ns;
	(void)selector;
	if (current->n_tags < 16)
		current->tags[current->n_tags++] = tag;
	return tag;
}

static void unwatch(void *ctx, void *handle)
{
	(void)ctx;
	for (size_t i = 0; i < current->n_tags; i++)
		if (current->tags[i] == handle)
			current->tags[i] = current->tags[--current->n_tags];
}

/* Strings of the object that could be hosts, for asking later. */
static void collect_names(struct stream *s, const struct kube_json *v)
{
	for (const struct kube_json *e = v && (v->type == KUBE_JSON_ARRAY ||
					       v->type == KUBE_JSON_OBJECT) ? v->first : NULL;
	     e; e = e->next)
		collect_names(s, e);
	if (v && v->type == KUBE_JSON_STRING && s->n_names < 64 &&
	    dns_name_from_text(v->text, s->names[s->n_names]) > 1)
		s->n_names++;
}

/* An object of the stream's resource into the mesh (fuzz_kube_feed's upsert). */
static void upsert(void *ctx, const struct kube_json *obj)
{
	struct stream *s = ctx;
	const struct kube_json *meta = kube_json_get(obj, "metadata");
	const char *name = kube_json_get_text(meta, "name"), *ns = kube_json_get_text(meta, "namespace");

	if (s->feed.res == KUBE_SERVICEENTRIES)
		mesh_entry_upsert(s->m, obj);
	else
		mesh_workload_upsert(s->m, obj);
	/* the same object as a Pod of every selector watched so far */
	for (size_t i = 0; i < s->n_tags; i++)
		mesh_pod_upsert(s->m, s->tags[i], obj);
	collect_names(s, obj);
	if (!name || !*name)
		return;
	if (s->n_keys == 256) {
		s->lost_key = true;
	} else if (strlen(name) < 512 && (!ns || strlen(ns) < 512)) {
		strcpy(s->keys[s->n_keys][0], ns ? ns : "");
		strcpy(s->keys[s->n_keys++][1], name);
	}
}

/* Out of the mesh (fuzz_kube_feed's remove, and every object at the end). */
static void remove_object(void *ctx, const char *ns, const char *name)
{
	struct stream *s = ctx;

	if (s->feed.res == KUBE_SERVICEENTRIES)
		mesh_entry_remove(s->m, ns, name);
	else
		mesh_workload_remove(s->m, ns, name);
	for (size_t i = 0; i < s->n_tags; i++)
		mesh_pod_remove(s->m, s->tags[i], ns, name);
}

/* The clients: namespace "prod", "team", unknown. */
static const uint8_t *namespace_of(const void *ctx)
{
	return ctx;
}

/* Ask name/qtype as a client of ns (a wire label, NULL: unknown); the
 * alias form when base_len is set. The reply must be readable and, when
 * the mesh answers, of the asked type (or the alias's CNAME). */
static void ask(const struct mesh *m, const uint8_t *name, uint16_t qtype, const uint8_t *ns,
		size_t base_len)
{
	static uint8_t buf[UDP_MAX];
	struct dns_query q = {.id = 7, .qtype = qtype, .qclass = DNS_C_IN, .question_ok = true};
	struct mesh_client client = {.namespace_of = namespace_of, .ctx = ns};
	struct dns_writer w;
	enum mesh_result r;

	q.qname_len = (uint16_t)dns_name_len(name);
	memcpy(q.qname, name, q.qname_len);
	memcpy(q.qname_orig, name, q.qname_len);
	for (const uint8_t *p = name; *p; p += 1 + *p)
		q.qname_labels++;
	dns_response_begin(&w, buf, sizeof buf, &q, DNS_R_NOERROR);
	urcu_memb_read_lock();
	r = base_len ? mesh_answer_alias(m, &q, base_len, &client, &w)
		     : mesh_answer(m, &q, &client, true, &w);
	urcu_memb_read_unlock();
	size_t len = dns_response_finish(&w, UDP_MAX);
	CHECK(len <= sizeof buf);
	if (len)
		CHECK(fuzz_message_ok(buf, len));
	if (r == MESH_NOT_LOCAL)
		CHECK(fuzz_get16(buf + 6) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char yaml[] = "mesh: {istio: true, ttl: 30s}\n";
	char err[CONFIG_ERR_MAX];

	(void)argc;
	(void)argv;
	CHECK(config_load_string("fuzz.yaml", yaml, strlen(yaml), &config, err, sizeof err) == 0);
	urcu_memb_register_thread();
	/* liburcu runs one resize thread while any cds_lfht exists: keep it */
	keep_worker = cds_lfht_new_flavor(1, 1, 0, 0, &urcu_memb_flavor, NULL);
	CHECK(keep_worker);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct stream s;
	static const uint8_t prod[] = "\4prod", team[] = "\4team";
	static const uint8_t svc_zone[] = "\4prod\3svc\7cluster\5local";
	const uint8_t *namespaces[] = {prod, team, NULL};
	char err[CONFIG_ERR_MAX];
	struct mesh_stats st;

	memset(&s, 0, sizeof s);
	current = &s;
	s.m = mesh_new(config, err, sizeof err);
	CHECK(s.m);
	mesh_bind(s.m, &(struct mesh_watcher){.watch = watch, .unwatch = unwatch});
	const char *at_se = memmem(data, size, "\"ServiceEntry", 13);
	const char *at_we = memmem(data, size, "\"WorkloadEntry", 14);
	s.feed = (struct fuzz_kube_feed){
		.res = at_se && (!at_we || at_se < at_we) ? KUBE_SERVICEENTRIES
		       : at_we ? KUBE_WORKLOADENTRIES
			       : size % 2 ? KUBE_SERVICEENTRIES : KUBE_WORKLOADENTRIES,
		.upsert = upsert, .remove = remove_object, .ctx = &s};
	if (!fuzz_kube_decode(&s.feed, KUBE_DECODE_LIST, data, size))
		fuzz_kube_decode(&s.feed, KUBE_DECODE_WATCH, data, size);
	for (size_t i = 0; i < s.n_names; i++) {
		uint8_t below[DNS_MAX_NAME + 2] = {1, 'x'}, alias[DNS_MAX_NAME];
		size_t len = dns_name_len(s.names[i]);
		const uint8_t *name = s.names[i];
		if (name[0] == 1 && name[1] == '*')
			name += 2; /* a wildcard's parent: ask below it */
		memcpy(below + 2, name, dns_name_len(name));
		for (size_t k = 0; k < 3; k++)
			for (uint16_t t = DNS_T_A; t <= DNS_T_AAAA; t += DNS_T_AAAA - DNS_T_A) {
				ask(s.m, s.names[i], t, namespaces[k], 0);
				if (dns_name_len(below) <= DNS_MAX_NAME)
					ask(s.m, below, t, namespaces[k], 0);
				if (len - 1 + sizeof svc_zone <= DNS_MAX_NAME) {
					memcpy(alias, s.names[i], len - 1);
					memcpy(alias + len - 1, svc_zone, sizeof svc_zone);
					ask(s.m, alias, t, namespaces[k], len - 1);
				}
				ask(s.m, s.names[i], DNS_T_MX, namespaces[k], 0);
			}
	}
	/* every object gone: nothing is left */
	for (size_t i = 0; i < s.n_keys; i++)
		remove_object(&s, s.keys[i][0], s.keys[i][1]);
	mesh_stats(s.m, &st);
	if (!s.lost_key)
		CHECK(s.feed.res == KUBE_SERVICEENTRIES
			      ? st.entries == 0 && st.hosts == 0 && st.selectors == 0 && st.pods == 0
			      : st.workloads == 0);
	mesh_free(s.m);
	return 0;
}
