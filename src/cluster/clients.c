/*
 * cluster/clients.c — who is asking: this node's pod addresses and their
 * namespaces, for autopath (cluster.autopath).
 *
 * A second liburcu hash beside the name table, keyed by address, with the
 * same single writer (the Kubernetes thread) and the same readers (workers,
 * under the RCU read lock they already hold: one lookup, no lock, no
 * allocation). An entry is replaced whole and the old one freed by call_rcu.
 *
 * A pod is a client while it queries from addresses of its own: not on the
 * host network (its address is the node's, shared with every host process,
 * so a namespace would be a guess), not being deleted and not finished
 * (Succeeded, Failed), since its address may already belong to a new pod.
 * A Pending pod with an address counts: its init containers resolve names.
 * When two pods claim one address, the last one seen has it.
 */
#include "cluster/internal.h"

#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>

#include "log/log.h"
#include "util/tsan.h"

/* Addresses are zero-filled past their family's length, so 16 bytes compare. */
static uint64_t ip_hash(const struct cluster_ip *ip)
{
	return dns_name_hash(ip->addr, sizeof ip->addr) ^ (uint64_t)ip->family;
}

static bool same_ip(const struct cluster_ip *a, const struct cluster_ip *b)
{
	return a->family == b->family && memcmp(a->addr, b->addr, sizeof a->addr) == 0;
}

static int match_client(struct cds_lfht_node *ht, const void *key)
{
	const struct cluster_client *e = caa_container_of(ht, struct cluster_client, ht);

	TSAN_SUBSCRIBE(e); /* the first read of an entry a lookup found */
	return same_ip(&e->ip, key);
}

static struct cluster_client *find_client(struct cds_lfht *clients, const struct cluster_ip *ip)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *ht;

	cds_lfht_lookup(clients, ip_hash(ip), match_client, ip, &it);
	ht = cds_lfht_iter_get_node(&it);
	return ht ? caa_container_of(ht, struct cluster_client, ht) : NULL;
}

static void free_client(struct rcu_head *head)
{
	TSAN_GRACE_ACQUIRE();
	free(caa_container_of(head, struct cluster_client, rcu));
}

/* After a grace period, when no reader can hold e any more. */
static void retire_client(struct cluster_client *e)
{
	TSAN_GRACE_RELEASE();
	urcu_memb_call_rcu(&e->rcu, free_client);
}

static void remove_client(struct cds_lfht *clients, struct cluster_client *e)
{
	if (cds_lfht_del(clients, &e->ht) == 0)
		retire_client(e);
}

static bool listed(const struct cluster_ip *ips, size_t n, const struct cluster_ip *ip)
{
	for (size_t i = 0; i < n; i++)
		if (same_ip(&ips[i], ip))
			return true;
	return false;
}

static void publish_client(struct cds_lfht *clients, const struct cluster_pod *p,
			   const struct cluster_ip *ip, const uint8_t *ns)
{
	struct cluster_client *cur = find_client(clients, ip), *e;
	struct cds_lfht_node *old;

	if (cur && cur->pod == p && memcmp(cur->ns, ns, 1u + ns[0]) == 0)
		return;
	if (!(e = calloc(1, sizeof *e + strlen(p->key) + 1))) {
		log_error("pod address for autopath: out of memory", "pod", p->key);
		return;
	}
	cds_lfht_node_init(&e->ht);
	e->pod = p;
	e->ip = *ip;
	memcpy(e->ns, ns, 1u + ns[0]);
	strcpy(e->pod_key, p->key);
	TSAN_PUBLISH(e);
	old = cds_lfht_add_replace(clients, ip_hash(ip), match_client, &e->ip, &e->ht);
	if (old)
		retire_client(caa_container_of(old, struct cluster_client, ht));
}

/* Take back p's entries for the addresses it no longer has. */
static void unpublish_gone(struct cluster *c, const struct cluster_pod *p,
			   const struct cluster_ip *ips, size_t n)
{
	for (size_t i = 0; i < p->n_clients; i++) {
		struct cluster_client *e = find_client(c->clients, &p->clients[i]);
		if (e && e->pod == p && !listed(ips, n, &p->clients[i]))
			remove_client(c->clients, e);
	}
}

void cluster_clients_set(struct cluster *c, struct cluster_pod *p, const char *ns,
			 const struct cluster_ip *ips, size_t n)
{
	const char *labels[] = {ns, NULL};
	uint8_t label[DNS_MAX_NAME];
	struct cluster_ip *kept = NULL;

	if (n && (!cluster_name(label, (const uint8_t *)"", labels) ||
		  !(kept = malloc(n * sizeof *kept)))) {
		log_warn("pod addresses not used for autopath (namespace is no DNS label, or "
			 "out of memory)", "pod", p->key);
		n = 0;
	}
	unpublish_gone(c, p, ips, n);
	for (size_t i = 0; i < n; i++)
		publish_client(c->clients, p, &ips[i], label);
	if (n)
		memcpy(kept, ips, n * sizeof *kept);
	free(p->clients);
	p->clients = kept;
	p->n_clients = n;
}


/* ---- read side ------------------------------------------------------------ */

/* The client's address; a v4-mapped IPv6 address is the IPv4 one. */
static bool peer_ip(const struct sockaddr_storage *peer, struct cluster_ip *ip)
{
	memset(ip, 0, sizeof *ip);
	if (peer->ss_family == AF_INET) {
		ip->family = AF_INET;
		memcpy(ip->addr, &((const struct sockaddr_in *)peer)->sin_addr, 4);
		return true;
	}
	if (peer->ss_family != AF_INET6)
		return false;
	const struct in6_addr *a = &((const struct sockaddr_in6 *)peer)->sin6_addr;
	if (IN6_IS_ADDR_V4MAPPED(a)) {
		ip->family = AF_INET;
		memcpy(ip->addr, a->s6_addr + 12, 4);
	} else {
		ip->family = AF_INET6;
		memcpy(ip->addr, a->s6_addr, 16);
	}
	return true;
}

size_t cluster_autopath_base(const struct cluster *c, const struct dns_query *q,
			     const struct sockaddr_storage *peer)
{
	size_t svc_len = dns_name_len(c->svc_apex), pos = 0, ns = 0;
	const struct cluster_client *e;
	struct cluster_ip ip;

	if (!peer || q->qname_len <= svc_len)
		return 0;
	/* q's name must be <base>.<ns>.<svc apex>: ns is the label before it */
	size_t svc_at = q->qname_len - svc_len;
	while (pos < svc_at) {
		ns = pos;
		pos += 1u + q->qname[pos];
	}
	if (pos != svc_at || ns == 0 || memcmp(q->qname + svc_at, c->svc_apex, svc_len) != 0 ||
	    !peer_ip(peer, &ip) || !(e = find_client(c->clients, &ip)))
		return 0;
	size_t base = memcmp(e->ns, q->qname + ns, 1u + e->ns[0]) == 0 ? ns : 0;
	TSAN_GRACE_RELEASE(); /* done with the entry */
	return base;
}

const uint8_t *cluster_client_namespace(const struct cluster *c,
					const struct sockaddr_storage *peer)
{
	const struct cluster_client *e;
	struct cluster_ip ip;

	if (!peer || !peer_ip(peer, &ip) || !(e = find_client(c->clients, &ip)))
		return NULL;
	return e->ns;
}

bool cluster_client_pod(const struct cluster *c, const struct sockaddr_storage *peer, char *out,
			size_t cap)
{
	const struct cluster_client *e;
	struct cluster_ip ip;
	bool found = false;

	if (!c || !peer_ip(peer, &ip))
		return false;
	urcu_memb_read_lock();
	if ((e = find_client(c->clients, &ip)) && strlen(e->pod_key) < cap) {
		strcpy(out, e->pod_key);
		found = true;
	}
	urcu_memb_read_unlock();
	return found;
}
