/*
 * kube/keys.c — the set of object keys a resource has delivered (see
 * internal.h).
 *
 * A chained hash table of "ns/name" strings, each with the generation of
 * the LIST that last saw it. It exists only so a relist can tell which
 * objects vanished while we were not watching; the objects themselves are
 * the consumer's. 100,000 keys cost about 100 bytes each. Tenants choose
 * the names, so the table is keyed like every other table outside input
 * fills (docs/security.md, "Hash flooding"): SipHash-1-3 under a key drawn
 * when the set first holds something.
 */
#include "kube/internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dns/dns.h"

/* "ns/name" under the set's key. */
static uint64_t key_hash(const struct kube_keys *s, const char *ns, const char *name)
{
	size_t ns_len = strlen(ns), name_len = strlen(name);
	char joined[512];

	if (ns_len + 1 + name_len > sizeof joined) { /* longer than Kubernetes allows: in parts */
		uint64_t h = dns_siphash13(s->hash_key, (const uint8_t *)ns, ns_len);
		return h ^ dns_siphash13(s->hash_key, (const uint8_t *)name, name_len) *
				   0x9e3779b97f4a7c15ull;
	}
	memcpy(joined, ns, ns_len);
	joined[ns_len] = '/';
	memcpy(joined + ns_len + 1, name, name_len);
	return dns_siphash13(s->hash_key, (const uint8_t *)joined, ns_len + 1 + name_len);
}

static bool key_equal(const struct kube_key *k, const char *ns, size_t ns_len, const char *name)
{
	return k->ns_len == ns_len && memcmp(k->key, ns, ns_len) == 0 &&
	       strcmp(k->key + ns_len + 1, name) == 0;
}

void kube_keys_init(struct kube_keys *s)
{
	*s = (struct kube_keys){0};
}

/* Doubles the bucket array when the load passes 1 (the first one also
 * draws the key); a failed grow keeps the old one. */
static void grow(struct kube_keys *s)
{
	size_t n = s->n_buckets ? s->n_buckets * 2 : 64;
	struct kube_key **b;

	if (!s->n_buckets &&
	    getrandom(s->hash_key, sizeof s->hash_key, 0) != (ssize_t)sizeof s->hash_key)
		return;
	if (!(b = calloc(n, sizeof *b)))
		return;
	for (size_t i = 0; i < s->n_buckets; i++) {
		struct kube_key *k = s->buckets[i];
		while (k) {
			struct kube_key *next = k->next;
			size_t j = k->hash & (n - 1);
			k->next = b[j];
			b[j] = k;
			k = next;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->n_buckets = n;
}

static struct kube_key **find(const struct kube_keys *s, const char *ns, const char *name, uint64_t h)
{
	size_t ns_len = strlen(ns);
	struct kube_key **p = &s->buckets[h & (s->n_buckets - 1)];

	while (*p && !((*p)->hash == h && key_equal(*p, ns, ns_len, name)))
		p = &(*p)->next;
	return p;
}

int kube_keys_mark(struct kube_keys *s, const char *ns, const char *name)
{
	if (s->count >= s->n_buckets)
		grow(s);
	if (!s->n_buckets)
		return -1;
	uint64_t h = key_hash(s, ns, name);
	struct kube_key **p = find(s, ns, name, h);
	if (*p) {
		(*p)->gen = s->gen;
		return 0;
	}
	size_t ns_len = strlen(ns), name_len = strlen(name);
	struct kube_key *k = malloc(sizeof *k + ns_len + 1 + name_len + 1);
	if (!k)
		return -1;
	k->next = NULL;
	k->hash = h;
	k->gen = s->gen;
	k->ns_len = ns_len;
	memcpy(k->key, ns, ns_len);
	k->key[ns_len] = '/';
	memcpy(k->key + ns_len + 1, name, name_len + 1);
	*p = k;
	s->count++;
	return 0;
}

bool kube_keys_remove(struct kube_keys *s, const char *ns, const char *name)
{
	if (!s->n_buckets)
		return false;
	struct kube_key **p = find(s, ns, name, key_hash(s, ns, name));
	struct kube_key *k = *p;
	if (!k)
		return false;
	*p = k->next;
	free(k);
	s->count--;
	return true;
}

void kube_keys_new_generation(struct kube_keys *s)
{
	s->gen++;
}

void kube_keys_sweep(struct kube_keys *s, void (*fn)(void *ctx, const char *ns, const char *name),
		     void *ctx)
{
	for (size_t i = 0; i < s->n_buckets; i++) {
		struct kube_key **p = &s->buckets[i];
		while (*p) {
			struct kube_key *k = *p;
			if (k->gen == s->gen) {
				p = &k->next;
				continue;
			}
			*p = k->next;
			s->count--;
			k->key[k->ns_len] = '\0'; /* split in place into ns and name */
			fn(ctx, k->key, k->key + k->ns_len + 1);
			free(k);
		}
	}
}

void kube_keys_free(struct kube_keys *s)
{
	for (size_t i = 0; i < s->n_buckets; i++) {
		struct kube_key *k = s->buckets[i];
		while (k) {
			struct kube_key *next = k->next;
			free(k);
			k = next;
		}
	}
	free(s->buckets);
	kube_keys_init(s);
}
