/*
 * Unit tests for nft/plan: which addresses land in which set, which rules
 * exist for which families and endpoints, and that the fingerprint follows
 * every change of what is installed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <cmocka.h>

#include "config/config.h"
#include "config_text.h"
#include "nft/plan.h"

static void assert_set(const struct nft_plan *p, enum nft_set_role role, int family,
		       const char *name, const char *const *texts, size_t n)
{
	const struct nft_set_plan *s = nft_plan_set(p, role, family);

	assert_non_null(s);
	assert_string_equal(s->name, name);
	assert_int_equal(s->n_ips, n);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(s->ips[i]->text, texts[i]);
}

static void test_sets_split_by_role_and_family(void **state)
{
	(void)state;
	struct config *c = config_of("listen: {addresses: [169.254.20.10, \"fd00::10\"], port: 5353}\n"
				"nftables: {table: ldns, intercept: [10.96.0.10, \"fd00:96::a\"]}\n");
	struct config_ip eps[2];
	const char *why;
	struct nft_plan p;

	assert_int_equal(config_value_ip("10.244.0.5", &eps[0], &why), 0);
	assert_int_equal(config_value_ip("10.244.1.5", &eps[1], &why), 0);
	assert_int_equal(nft_plan_build(&p, c, eps, 2), 0);
	assert_string_equal(p.table, "ldns");
	assert_int_equal(p.port, 5353);
	assert_int_equal(p.n_sets, 11);
	static const char *const local4[] = {"169.254.20.10", "10.96.0.10"};
	static const char *const local6[] = {"fd00::10", "fd00:96::a"};
	static const char *const link4[] = {"169.254.20.10"};
	static const char *const link6[] = {"fd00::10"};
	static const char *const fb4[] = {"10.244.0.5", "10.244.1.5"};
	assert_set(&p, NFT_SET_LOCAL, AF_INET, "local4", local4, 2);
	assert_set(&p, NFT_SET_LOCAL, AF_INET6, "local6", local6, 2);
	assert_set(&p, NFT_SET_LIVE, AF_INET, "live4", local4, 2);
	assert_set(&p, NFT_SET_LINK, AF_INET, "link4", link4, 1);
	assert_set(&p, NFT_SET_LINK, AF_INET6, "link6", link6, 1);
	assert_set(&p, NFT_SET_FALLBACK, AF_INET, "fallback4", fb4, 2);
	assert_set(&p, NFT_SET_FALLBACK, AF_INET6, "fallback6", NULL, 0);
	/* Filled at run time: by the rules, by each process. */
	assert_set(&p, NFT_SET_FLOWS, AF_INET, "flows4", NULL, 0);
	assert_set(&p, NFT_SET_FLOWS, AF_INET6, "flows6", NULL, 0);
	assert_set(&p, NFT_SET_INSTANCES, 0, "instances", NULL, 0);
	nft_plan_free(&p);
	config_free(c);
}

static size_t count_rules(const struct nft_plan *p, enum nft_chain_id chain, int family,
			  enum nft_action action)
{
	size_t n = 0;

	for (size_t i = 0; i < p->n_rules; i++)
		if (p->rules[i].chain == chain && p->rules[i].family == family &&
		    p->rules[i].action == action)
			n++;
	return n;
}

static void test_rules_per_chain(void **state)
{
	(void)state;
	struct config *c = config_of("listen: {addresses: [169.254.20.10]}\n");
	struct config_ip ep;
	const char *why;
	struct nft_plan p;

	/* Without endpoints: notrack rules only, both families, UDP and TCP. */
	assert_int_equal(nft_plan_build(&p, c, NULL, 0), 0);
	assert_int_equal(p.rules_per_chain[NFT_CHAIN_PREROUTING], 6);
	assert_int_equal(p.rules_per_chain[NFT_CHAIN_OUTPUT], 10);
	assert_int_equal(p.rules_per_chain[NFT_CHAIN_FALLBACK_PREROUTING], 0);
	assert_int_equal(p.rules_per_chain[NFT_CHAIN_FALLBACK_OUTPUT], 0);
	assert_int_equal(count_rules(&p, NFT_CHAIN_PREROUTING, AF_INET, NFT_NOTRACK), 3);
	/* Flow entries outlive a connection's idle time. */
	assert_int_equal(p.flow_timeout_ms, 10000 + NFT_FLOW_MARGIN_MS);
	for (size_t i = 0; i < p.n_rules; i++) {
		const struct nft_rule_plan *r = &p.rules[i];
		assert_true(r->l4proto == IPPROTO_UDP || r->l4proto == IPPROTO_TCP);
		assert_int_equal(r->set->family, r->family);
		if (r->l4proto == IPPROTO_UDP)
			assert_true(r->syn == NFT_SYN_ANY && r->flow == NFT_FLOW_NONE);
		/* A new flow (a datagram, a SYN) to us is untracked only while the
		 * heartbeat lives: a wedged process fails open. Pods' also need a
		 * socket bound to the address; the output hook cannot test that. */
		if (r->match == NFT_MATCH_DADDR && r->syn != NFT_SYN_CLEAR) {
			assert_int_equal(r->set->role, NFT_SET_LIVE);
			assert_int_equal(r->bound, r->chain == NFT_CHAIN_PREROUTING);
		}
		/* TCP: the SYN starts a flow, the rest follows it, with or without
		 * the heartbeat or a socket: a connection stays where its SYN went. */
		if (r->l4proto == IPPROTO_TCP && r->match == NFT_MATCH_DADDR) {
			assert_int_equal(r->flow, r->syn == NFT_SYN_SET ? NFT_FLOW_START
								   : NFT_FLOW_KNOWN);
			assert_int_equal(r->flows->role, NFT_SET_FLOWS);
			assert_int_equal(r->flows->family, r->family);
		}
		if (r->syn == NFT_SYN_CLEAR)
			assert_true(r->set->role == NFT_SET_LOCAL && !r->bound);
		if (r->chain == NFT_CHAIN_OUTPUT && r->match == NFT_MATCH_SADDR)
			assert_int_equal(r->set->role, NFT_SET_LOCAL);
	}
	nft_plan_free(&p);

	/* An IPv4 endpoint: DNAT for IPv4 to the link addresses, in both nat chains. */
	assert_int_equal(config_value_ip("10.244.0.5", &ep, &why), 0);
	assert_int_equal(nft_plan_build(&p, c, &ep, 1), 0);
	assert_int_equal(count_rules(&p, NFT_CHAIN_FALLBACK_PREROUTING, AF_INET, NFT_DNAT), 2);
	assert_int_equal(count_rules(&p, NFT_CHAIN_FALLBACK_OUTPUT, AF_INET, NFT_DNAT), 2);
	assert_int_equal(count_rules(&p, NFT_CHAIN_FALLBACK_PREROUTING, AF_INET6, NFT_DNAT), 0);
	for (size_t i = 0; i < p.n_rules; i++)
		if (p.rules[i].action == NFT_DNAT) {
			assert_int_equal(p.rules[i].set->role, NFT_SET_LINK);
			assert_int_equal(p.rules[i].map->role, NFT_SET_FALLBACK);
			assert_int_equal(p.rules[i].map->n_ips, 1);
		}
	nft_plan_free(&p);
	config_free(c);
}

static void test_fingerprint_follows_content(void **state)
{
	(void)state;
	struct config *a = config_of("listen: {addresses: [169.254.20.10]}\n");
	struct config *same = config_of("listen: {addresses: [169.254.20.10]}\n");
	struct config *other_port = config_of("listen: {addresses: [169.254.20.10], port: 54}\n");
	struct config *intercept = config_of("listen: {addresses: [169.254.20.10]}\n"
					"nftables: {intercept: [10.96.0.10]}\n");
	struct config_ip ep;
	const char *why;
	struct nft_plan p1, p2, p3, p4, p5;

	assert_int_equal(config_value_ip("10.244.0.5", &ep, &why), 0);
	assert_int_equal(nft_plan_build(&p1, a, NULL, 0), 0);
	assert_int_equal(nft_plan_build(&p2, same, NULL, 0), 0);
	assert_int_equal(nft_plan_build(&p3, other_port, NULL, 0), 0);
	assert_int_equal(nft_plan_build(&p4, intercept, NULL, 0), 0);
	assert_int_equal(nft_plan_build(&p5, a, &ep, 1), 0);
	assert_int_equal(strncmp(p1.comment, "localdns ", 9), 0);
	assert_string_equal(p1.comment, p2.comment);
	assert_string_not_equal(p1.comment, p3.comment);
	assert_string_not_equal(p1.comment, p4.comment);
	assert_string_not_equal(p1.comment, p5.comment);
	struct nft_plan *all[] = {&p1, &p2, &p3, &p4, &p5};
	for (size_t i = 0; i < 5; i++)
		nft_plan_free(all[i]);
	config_free(a);
	config_free(same);
	config_free(other_port);
	config_free(intercept);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sets_split_by_role_and_family),
		cmocka_unit_test(test_rules_per_chain),
		cmocka_unit_test(test_fingerprint_follows_content),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
