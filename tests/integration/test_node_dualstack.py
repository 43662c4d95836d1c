"""Node integration over IPv6, beside IPv4 (dual-stack): the same three
network namespaces as test_node.py (its Node class), each link given an
IPv6 address too:

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

import os
import re

import harness
import test_node
from test_node import CLUSTER_IP, COREDNS, LINK, LOCAL_ANSWER, STANDIN_ANSWER, F

LINK6 = "fd00:169:254::10"
CLUSTER_IP6 = "fd00:96::a"
COREDNS6 = "fd00:200:2::2"
POD6 = "fd00:200:1::2"


class DualNode(test_node.Node):
    """test_node.Node with IPv6 on every link and a kube-proxy DNAT for the
    IPv6 ClusterIP."""

    def __init__(self, env):
        super().__init__(env)
        self.run(self.node, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        for ns, link, addr, gateway in ((self.pod, self.pod_link, POD6, "fd00:200:1::1"),
                                        (self.coredns, self.coredns_link, COREDNS6,
                                         "fd00:200:2::1")):
            self.ip(self.node, "-6", "addr", "add", gateway + "/64", "dev", link, "nodad")
            self.ip(ns, "-6", "addr", "add", addr + "/64", "dev", "eth0", "nodad")
            self.ip(ns, "-6", "route", "add", "default", "via", gateway)
        self.nft(self.node, """
            table ip6 kubeproxy {
              chain pre { type nat hook prerouting priority dstnat; policy accept;
                ip6 daddr %(ip)s meta l4proto { udp, tcp } th dport 53 dnat to %(to)s
              }
              chain out { type nat hook output priority -100; policy accept;
                ip6 daddr %(ip)s meta l4proto { udp, tcp } th dport 53 dnat to %(to)s
              }
            }""" % {"ip": CLUSTER_IP6, "to": COREDNS6})
        self.standin6 = self.helper(self.coredns, test_node.STANDIN, COREDNS6)
        # The veths' link-local addresses are tentative for about a second
        # (duplicate address detection), and neighbour discovery to the
        # coredns namespace fails until they are not: a first packet there
        # would be lost, by the network's set-up and not by localdns.
        for ns in (self.node, self.pod, self.coredns):
            self.until(lambda: self.ip(ns, "-6", "addr", "show", "tentative").stdout, "", 5.0)

    def config(self, **nftables):
        cfg = super().config(**nftables)
        cfg["listen"]["addresses"] = [LINK, LINK6]
        cfg["nftables"]["intercept"] = [CLUSTER_IP, CLUSTER_IP6]
        return cfg

    def lo_addresses6(self):
        out = self.ip(self.node, "-6", "-o", "addr", "show", "dev", "lo").stdout
        return sorted(l.split()[3] for l in out.splitlines())

    def set_elements(self, name):
        """The IPv6 addresses in our set or map `name`."""
        p = self.run(self.node, "nft", "list", "set" if "fallback" not in name else "map",
                     "inet", "localdns", name, check=False)
        body = p.stdout.split("elements =", 1)[1] if "elements =" in p.stdout else ""
        return sorted(set(re.findall(r"\b[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){2,7}", body)))


OURS6 = sorted(["::1/128", LINK6 + "/128", CLUSTER_IP6 + "/128"])


def test_node_ipv6_answers_both_addresses_without_conntrack(env):
    n = DualNode(env)
    d = n.start()
    assert n.lo_addresses6() == OURS6, n.lo_addresses6()
    assert n.lo_addresses() == test_node.OURS, n.lo_addresses()
    assert n.set_elements("local6") == sorted([LINK6, CLUSTER_IP6])
    assert n.set_elements("link6") == [LINK6]
    assert n.set_elements("live6") == sorted([LINK6, CLUSTER_IP6])
    n.flush_conntrack()
    for server in (LINK6, CLUSTER_IP6, LINK, CLUSTER_IP):
        for transport in ("+notcp", "+tcp"):
            got = n.ask(server, transport)
            assert got == LOCAL_ANSWER, "%s %s: %r\n%s" % (server, transport, got, d.tail())
    for server in (LINK6, CLUSTER_IP6):
        assert n.conntrack(server) == [], n.conntrack(server)
    # A host-network client on the node (output hook) is served locally too.
    assert n.ask(CLUSTER_IP6, ns=n.node) == LOCAL_ANSWER
    assert n.conntrack(CLUSTER_IP6) == [], n.conntrack(CLUSTER_IP6)


def test_node_ipv6_kill9_fails_open(env):
    n = DualNode(env)
    d = n.start(fallback_endpoints=[COREDNS, COREDNS6])
    assert n.set_elements("fallback6") == [COREDNS6]
    assert n.ask(CLUSTER_IP6) == LOCAL_ANSWER and n.ask(LINK6) == LOCAL_ANSWER
    d.proc.kill()
    d.proc.wait(2)
    # Pods: kube-proxy's DNAT for the ClusterIP, our fallback6 map for the link address.
    took = n.until(lambda: n.ask(CLUSTER_IP6), STANDIN_ANSWER, 1.0)
    assert n.ask(CLUSTER_IP6, "+tcp") == STANDIN_ANSWER
    assert n.ask(LINK6) == STANDIN_ANSWER and n.ask(LINK6, "+tcp") == STANDIN_ANSWER
    # The fallback goes through conntrack (the empty lists above are not vacuous).
    assert n.conntrack(CLUSTER_IP6), "IPv6 fallback traffic was not tracked"
    # Host-network clients: the live6 elements expire within 1 s.
    n.until(lambda: n.ask(CLUSTER_IP6, ns=n.node), STANDIN_ANSWER, 2.0)
    assert took < 1.0
    n.start(fallback_endpoints=[COREDNS, COREDNS6])
    assert n.ask(CLUSTER_IP6) == LOCAL_ANSWER and n.ask(LINK6, "+tcp") == LOCAL_ANSWER


test_node_ipv6_kill9_fails_open.timeout = 30


def test_node_ipv6_address_and_set_drift_is_repaired(env):
    n = DualNode(env)
    cfg = n.config()
    cfg["metrics"] = {"listen": "127.0.0.1:9253"}  # inside the node's namespace
    d = n.start(config=cfg)
    n.ip(n.node, "-6", "addr", "del", CLUSTER_IP6 + "/128", "dev", "lo")
    n.until(n.lo_addresses6, OURS6, 1.0)
    n.ip(n.node, "-6", "addr", "del", LINK6 + "/128", "dev", "lo")
    n.until(n.lo_addresses6, OURS6, 1.0)
    n.run(n.node, "nft", "delete", "element", "inet", "localdns", "local6",
          "{ %s }" % CLUSTER_IP6)
    n.until(lambda: n.set_elements("local6"), sorted([LINK6, CLUSTER_IP6]), 1.0)
    assert n.ask(CLUSTER_IP6) == LOCAL_ANSWER and n.ask(LINK6) == LOCAL_ANSWER
    assert n.conntrack(CLUSTER_IP6) == []
    assert d.stop()[0] == 0
    assert "link_repairs=2" in d.stderr(), d.tail()


def test_node_dual_stack_service_answers_a_and_aaaa_over_both_families(env):
    n = DualNode(env)
    api = n.api_server()
    try:
        api.apply(F.namespace("shop"),
                  F.service("shop", "orders", cluster_ips=["10.96.0.5", "fd00:96::5"],
                            ports=[F.service_port(5432, name="pg")]),
                  F.endpointslice("shop", "orders", name="orders-4",
                                  endpoints=[F.endpoint("10.244.1.5")]),
                  F.endpointslice("shop", "orders", name="orders-6", address_type="IPv6",
                                  endpoints=[F.endpoint("fd00:244:1::5")]))
        cfg = n.config()
        cfg["kubernetes"] = {"enabled": True, "node_name": "node-a",
                             "kubeconfig": api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))}
        d = n.start(config=cfg)
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
