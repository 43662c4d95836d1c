"""CoreDNS compatibility end to end: localdns watching the fake API server and
answering, where the Kubernetes DNS specification is silent, as CoreDNS's
kubernetes plugin does (docs/coredns-compat.md names the test of each
behaviour; tests/unit/test_cluster_coredns.c has the exhaustive table).
Apart from test_cluster.py, which holds the specification's cases.

Covered here over the wire: SRV for a Service's own name and CoreDNS's
weights, endpoint names under a Service with a ClusterIP, PTRs of endpoint
addresses (IPv4 and IPv6), the client's letter case, `fallthrough` for the
reverse zones against a real upstream, and the options operators set
(`endpoint_pod_names`, `ignore_empty_service`, `ttl`, `pods: disabled`,
`noendpoints`, which also stops the EndpointSlice watch).
"""

import os
import sys

import authority
import harness
from harness import wait_until
from test_cluster import data, rcode_of, start

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

API_V6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.7.0.0.0.0.0.d.f.ip6.arpa"

# 203.0.113.0/24's reverse zone, served by the upstream: not the cluster's.
REVERSE_ZONE = """$ORIGIN 113.0.203.in-addr.arpa.
$TTL 300
@   IN SOA ns.site.example. admin.site.example. 1 3600 600 86400 300
@   IN NS  ns.site.example.
7   IN PTR gw.site.example.
"""


def shop():
    return [
        F.namespace("shop"),
        F.service("shop", "api", cluster_ips=["10.96.7.1", "fd00:96::7:1"],
                  ports=[F.service_port(80, name="http"), F.service_port(9090, name="metrics")]),
        F.endpointslice("shop", "api", name="api-4", endpoints=[
            F.endpoint("10.7.0.1", pod="api-5d8f"),
            F.endpoint("10.7.0.2", hostname="primary", pod="api-0")],
            ports=[F.endpoint_port(8080, name="http")]),
        F.endpointslice("shop", "api", name="api-6", address_type="IPv6", endpoints=[
            F.endpoint("fd00:7::1", pod="api-5d8f")],
            ports=[F.endpoint_port(8080, name="http")]),
        F.service("shop", "peers", headless=True),
        F.endpointslice("shop", "peers", name="peers-4", endpoints=[
            F.endpoint("10.7.1.1", hostname="etcd-0"), F.endpoint("10.7.1.2")],
            ports=[F.endpoint_port(2380, name="peer"), F.endpoint_port(2379, name="client")]),
        F.service("shop", "idle", cluster_ips="10.96.7.3", ports=[F.service_port(5432)]),
    ]


def srv(m):
    return sorted((r["rdata"]["weight"], r["rdata"]["port"], r["rdata"]["target"])
                  for r in m.rrs("answer", "SRV"))


def additional(m):
    return sorted((r["name"], str(r["rdata"])) for r in m.additional
                  if r["type"] in (1, 28))


def test_coredns_srv_of_service_names_and_weights(env):
    with F.FakeAPI() as api:
        api.apply(*shop())
        d = start(env, api)
        # two ports x two ClusterIPs: four entries, weight 25, one record per port
        m = d.udp("api.shop.svc.cluster.local", "SRV")
        assert m.rcode_name == "NOERROR" and m.aa, m.describe()
        assert srv(m) == [(25, 80, "api.shop.svc.cluster.local."),
                          (25, 9090, "api.shop.svc.cluster.local.")], srv(m)
        assert additional(m) == [("api.shop.svc.cluster.local.", "10.96.7.1"),
                                 ("api.shop.svc.cluster.local.", "fd00:96::7:1")], m.additional
        assert srv(d.udp("_http._tcp.api.shop.svc.cluster.local", "SRV")) == [
            (50, 80, "api.shop.svc.cluster.local.")]
        # headless: every endpoint and port, targets' addresses alongside
        m = d.tcp("peers.shop.svc.cluster.local", "SRV")
        assert srv(m) == [(25, 2379, "10-7-1-2.peers.shop.svc.cluster.local."),
                          (25, 2379, "etcd-0.peers.shop.svc.cluster.local."),
                          (25, 2380, "10-7-1-2.peers.shop.svc.cluster.local."),
                          (25, 2380, "etcd-0.peers.shop.svc.cluster.local.")], srv(m)
        assert additional(m) == [("10-7-1-2.peers.shop.svc.cluster.local.", "10.7.1.2"),
                                 ("etcd-0.peers.shop.svc.cluster.local.", "10.7.1.1")]
        # an unnamed port is listed at the name (it has no _port name)
        assert srv(d.udp("idle.shop.svc.cluster.local", "SRV")) == [
            (100, 5432, "idle.shop.svc.cluster.local.")]
        # the owner keeps the client's letter case, the target is ours (lower case)
        m = d.udp("_HTTP._tcp.API.shop.svc.cluster.local", "SRV")
        assert m.answer[0]["name"] == "_HTTP._tcp.API.shop.svc.cluster.local.", m.answer
        assert m.answer[0]["rdata"]["target"] == "api.shop.svc.cluster.local.", m.answer
        # CoreDNS answers an address question at an SRV name with the targets'
        assert data(d.udp("_peer._tcp.peers.shop.svc.cluster.local", "A"), "A") == [
            "10.7.1.1", "10.7.1.2"]


def test_coredns_endpoint_names_and_their_ptrs(env):
    with F.FakeAPI() as api:
        api.apply(*shop())
        d = start(env, api)
        assert data(d.udp("10-7-0-1.api.shop.svc.cluster.local"), "A") == ["10.7.0.1"]
        assert data(d.udp("primary.api.shop.svc.cluster.local"), "A") == ["10.7.0.2"]
        assert data(d.udp("fd00-7--1.api.shop.svc.cluster.local", "AAAA"), "AAAA") == [
            "fd00:7::1"]
        assert rcode_of(d, "10-7-0-2.api.shop.svc.cluster.local") == "NXDOMAIN"
        m = d.udp("1.0.7.10.in-addr.arpa", "PTR")
        assert m.aa and data(m, "PTR") == ["10-7-0-1.api.shop.svc.cluster.local."], m.describe()
        assert data(d.udp(API_V6, "PTR"), "PTR") == ["fd00-7--1.api.shop.svc.cluster.local."]
        assert data(d.udp("1.7.96.10.in-addr.arpa", "PTR"), "PTR") == [
            "api.shop.svc.cluster.local."]
        # a second Service selecting the same pod: both names
        api.apply(F.service("shop", "canary", headless=True),
                  F.endpointslice("shop", "canary", name="canary-1",
                                  endpoints=[F.endpoint("10.7.0.1")]))
        wait_until(lambda: len(d.udp("1.0.7.10.in-addr.arpa", "PTR").answer) == 2,
                   "the second PTR")
        assert data(d.udp("1.0.7.10.in-addr.arpa", "PTR"), "PTR") == [
            "10-7-0-1.api.shop.svc.cluster.local.", "10-7-0-1.canary.shop.svc.cluster.local."]


def test_coredns_fallthrough_sends_reverse_misses_upstream_or_answers_nxdomain(env):
    with authority.Authority({"113.0.203.in-addr.arpa.": REVERSE_ZONE}) as up, \
            F.FakeAPI() as api:
        api.apply(*shop())
        d = start(env, api, upstream={"servers": [up.addr], "timeout": "1s"})
        # the default (kubeadm's Corefile): not ours, so the upstream answers
        m = d.udp("7.113.0.203.in-addr.arpa", "PTR")
        assert data(m, "PTR") == ["gw.site.example."] and not m.aa, m.describe()
        asked = up.queries()
        assert data(d.udp("1.0.7.10.in-addr.arpa", "PTR"), "PTR") == [
            "10-7-0-1.api.shop.svc.cluster.local."]
        d.stop()
        # none: authoritative NXDOMAIN with in-addr.arpa's SOA, the upstream never asked
        d = start(env, api, upstream={"servers": [up.addr], "timeout": "1s"},
                  cluster={"fallthrough": []})
        m = d.udp("9.113.0.203.in-addr.arpa", "PTR")
        assert m.rcode_name == "NXDOMAIN" and m.aa, m.describe()
        soa = m.rrs("authority", "SOA")
        assert soa and soa[0]["name"] == "in-addr.arpa." and \
            soa[0]["rdata"]["mname"] == "ns.dns.in-addr.arpa.", m.authority
        assert data(d.udp("1.0.7.10.in-addr.arpa", "PTR"), "PTR") == [
            "10-7-0-1.api.shop.svc.cluster.local."]
        assert up.queries() == asked, "a reverse name outside fallthrough went upstream"


def test_coredns_options_endpoint_pod_names_ignore_empty_service_ttl_pods(env):
    with F.FakeAPI() as api:
        api.apply(*shop())
        d = start(env, api, cluster={"endpoint_pod_names": True,
                                     "ignore_empty_service": True,
                                     "ttl": "3600s", "pods": "disabled"})
        m = d.udp("api-5d8f.api.shop.svc.cluster.local")
        assert data(m, "A") == ["10.7.0.1"] and m.answer[0]["ttl"] == 3600, m.describe()
        assert data(d.udp("api-5d8f.api.shop.svc.cluster.local", "AAAA"), "AAAA") == [
            "fd00:7::1"]
        assert data(d.udp("primary.api.shop.svc.cluster.local"), "A") == ["10.7.0.2"]
        # no endpoint: no name, until one is ready
        m = d.udp("idle.shop.svc.cluster.local")
        assert m.rcode_name == "NXDOMAIN", m.describe()
        soa = m.rrs("authority", "SOA")[0]
        assert (soa["ttl"], soa["rdata"]["minimum"]) == (300, 3600), soa
        api.apply(F.endpointslice("shop", "idle", name="idle-1",
                                  endpoints=[F.endpoint("10.7.3.1")]))
        wait_until(lambda: data(d.udp("idle.shop.svc.cluster.local"), "A") == ["10.96.7.3"],
                   "the Service with its first endpoint")
        assert d.udp("dns-version.cluster.local", "TXT").answer[0]["ttl"] == 28800
        assert rcode_of(d, "shop.pod.cluster.local") == "NXDOMAIN"
        assert rcode_of(d, "10-7-0-1.shop.pod.cluster.local") == "NXDOMAIN"


def test_coredns_noendpoints_stops_the_endpointslice_watch(env):
    with F.FakeAPI() as api:
        api.apply(*shop())
        d = start(env, api, cluster={"noendpoints": True})
        assert data(d.udp("api.shop.svc.cluster.local"), "A") == ["10.96.7.1"]
        assert srv(d.udp("_http._tcp.api.shop.svc.cluster.local", "SRV")) == [
            (50, 80, "api.shop.svc.cluster.local.")]
        for name in ("peers.shop.svc.cluster.local", "etcd-0.peers.shop.svc.cluster.local",
                     "10-7-0-1.api.shop.svc.cluster.local"):
            assert rcode_of(d, name) == "NXDOMAIN", name
        # no node integration follows kube-dns here: no slice is ever asked for
        assert api.count("endpointslices") == 0, api.requests("endpointslices")
        assert "endpointslices=none" in d.stderr(), d.tail()
