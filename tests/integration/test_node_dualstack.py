"""Node integration over IPv6, beside IPv4 (dual-stack): the same three
network namespaces as test_node.py (its Node class, with IPV6 below as a
second Family), each link given an IPv6 address too:

    pod  10.200.1.2      --veth-- node --veth-- 10.200.2.2      coredns
         fd00:200:1::2                          fd00:200:2::2
        localdns on lo: 169.254.20.10 and fd00:169:254::10 (listen),
                        10.96.0.10 and fd00:96::a (intercept)
        "kube-proxy": DNAT of both ClusterIPs' port 53 to the stand-in
                      CoreDNS of the same family (tables ip / ip6 kubeproxy)

Checked for IPv6: the addresses on lo, the local6/link6/live6 sets, no
conntrack entry for captured DNS, fail-open after kill -9 (kube-proxy's
DNAT for the ClusterIP, our fallback6 map for the link address, the
heartbeat for host-network clients), drift repair of an IPv6 address, and a
dual-stack Service answered with A and AAAA through both families.
"""

import re

import harness
import test_node
from test_node import CLUSTER_IP, COREDNS, IPV4, LINK, LOCAL_ANSWER, STANDIN_ANSWER, F

LINK6 = "fd00:169:254::10"
CLUSTER_IP6 = "fd00:96::a"
COREDNS6 = "fd00:200:2::2"
POD6 = "fd00:200:1::2"

# nodad: the addresses are usable at once (the link-local ones are waited for).
IPV6 = test_node.Family("-6", "ip6", 64, POD6, "fd00:200:1::1", COREDNS6, "fd00:200:2::1",
                        "net.ipv6.conf.all.forwarding=1", LINK6, CLUSTER_IP6,
                        address_flags=["nodad"])


def dual_node(env):
    """test_node's node with IPv6 beside IPv4 on every link."""
    return test_node.Node(env, families=(IPV4, IPV6))


def set_elements(n, name):
    """The IPv6 addresses in our set or map `name`."""
    p = n.run(n.node, "nft", "list", "set" if "fallback" not in name else "map",
              "inet", "localdns", name, check=False)
    body = p.stdout.split("elements =", 1)[1] if "elements =" in p.stdout else ""
    return sorted(set(re.findall(r"\b[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){2,7}", body)))


OURS6 = sorted(["::1/128", LINK6 + "/128", CLUSTER_IP6 + "/128"])


def test_node_ipv6_answers_both_addresses_without_conntrack(env):
    n = dual_node(env)
    d = n.start()
    assert n.lo_addresses(IPV6) == OURS6, n.lo_addresses(IPV6)
    assert n.lo_addresses() == test_node.OURS, n.lo_addresses()
    assert set_elements(n, "local6") == sorted([LINK6, CLUSTER_IP6])
    assert set_elements(n, "link6") == [LINK6]
    assert set_elements(n, "live6") == sorted([LINK6, CLUSTER_IP6])
    test_node.assert_answered_locally_without_conntrack(n, d, IPV6)


def test_node_ipv6_kill9_fails_open(env):
    n = dual_node(env)
    d = n.start(fallback_endpoints=[COREDNS, COREDNS6])
    assert set_elements(n, "fallback6") == [COREDNS6]
    assert n.ask(CLUSTER_IP6) == LOCAL_ANSWER and n.ask(LINK6) == LOCAL_ANSWER
    test_node.assert_kill9_fails_open(n, d, IPV6)
    n.start(fallback_endpoints=[COREDNS, COREDNS6])
    assert n.ask(CLUSTER_IP6) == LOCAL_ANSWER and n.ask(LINK6, "+tcp") == LOCAL_ANSWER


test_node_ipv6_kill9_fails_open.timeout = 30


def test_node_ipv6_address_and_set_drift_is_repaired(env):
    n = dual_node(env)
    cfg = n.config()
    cfg["metrics"] = {"listen": "127.0.0.1:9253"}  # inside the node's namespace
    d = n.start(config=cfg)
    n.ip(n.node, "-6", "addr", "del", CLUSTER_IP6 + "/128", "dev", "lo")
    n.until(lambda: n.lo_addresses(IPV6), OURS6, 1.0)
    n.ip(n.node, "-6", "addr", "del", LINK6 + "/128", "dev", "lo")
    n.until(lambda: n.lo_addresses(IPV6), OURS6, 1.0)
    n.run(n.node, "nft", "delete", "element", "inet", "localdns", "local6",
          "{ %s }" % CLUSTER_IP6)
    n.until(lambda: set_elements(n, "local6"), sorted([LINK6, CLUSTER_IP6]), 1.0)
    assert n.ask(CLUSTER_IP6) == LOCAL_ANSWER and n.ask(LINK6) == LOCAL_ANSWER
    assert n.conntrack(CLUSTER_IP6) == []
    assert d.stop()[0] == 0
    assert "link_repairs=2" in d.stderr(), d.tail()


def test_node_dual_stack_service_answers_a_and_aaaa_over_both_families(env):
    n = dual_node(env)
    api = n.api_server()
    try:
        api.apply(F.namespace("shop"),
                  F.service("shop", "orders", cluster_ips=["10.96.0.5", "fd00:96::5"],
                            ports=[F.service_port(5432, name="pg")]),
                  F.endpointslice("shop", "orders", name="orders-4",
                                  endpoints=[F.endpoint("10.244.1.5")]),
                  F.endpointslice("shop", "orders", name="orders-6", address_type="IPv6",
                                  endpoints=[F.endpoint("fd00:244:1::5")]))
        d = n.start(config=n.config_with_api(api))
        name = "orders.shop.svc.cluster.local"

        def ask(server, qt, *opts):
            r = harness.dig(server, 53, name, qt, *opts, timeout=1, netns=n.pod)
            return r.rdatas(qt) if r.status == "NOERROR" else r.status
        n.until(lambda: ask(LINK6, "AAAA"), ["fd00:96::5"], 5.0)
        for server in (LINK, CLUSTER_IP, LINK6, CLUSTER_IP6):
            for transport in ("+notcp", "+tcp"):
                assert ask(server, "A", transport) == ["10.96.0.5"], (server, d.tail())
                assert ask(server, "AAAA", transport) == ["fd00:96::5"], (server, d.tail())
        # the endpoints by their own names and PTRs, over IPv6
        r = harness.dig(CLUSTER_IP6, 53, "5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.0.0.4.4.2.0"
                        ".0.0.d.f.ip6.arpa", "PTR", timeout=1, netns=n.pod)
        assert r.rdatas("PTR") == ["fd00-244-1--5.orders.shop.svc.cluster.local."], r.text
    finally:
        api.stop()


test_node_dual_stack_service_answers_a_and_aaaa_over_both_families.timeout = 30
