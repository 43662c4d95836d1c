"""Cluster names end to end: localdns watching the fake API server
(tests/kube/fakeapi.py) and answering per the Kubernetes DNS specification.

Conformance for every record kind (A/AAAA dual-stack, headless endpoints and
hostnames, SRV with additionals, PTR v4/v6, ExternalName chased through the
upstream, pods, dns-version, SOA/NS, NXDOMAIN vs NODATA, search-path
NXDOMAIN), then the dynamic cases (add, modify, delete; readiness flips;
namespace deletion; watch cut; 410; API down and back), SERVFAIL before the
first sync, kube-dns fallback before the sync and in forward mode, and the
update latency (reported, not asserted).
"""

import os
import sys
import time

import authority
import harness

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

NODE = "node-a"
SITE = authority.zone_path("site.example.")


def standard_objects():
    return [
        F.namespace("shop"),
        F.namespace("team"),
        F.service("shop", "db", cluster_ips=["10.96.0.5", "fd00::5"],
                  ports=[F.service_port(3306, name="mysql"), F.service_port(9999)]),
        F.endpointslice("shop", "db", name="db-x", endpoints=[
            F.endpoint("10.1.0.7", pod="db-0")],
            ports=[F.endpoint_port(3306, name="mysql")]),
        F.service("shop", "web", headless=True,
                  ports=[F.service_port(80, name="http")]),
        F.endpointslice("shop", "web", name="web-x", endpoints=[
            F.endpoint("10.1.0.1", hostname="web-0", pod="web-0"),
            F.endpoint("10.1.0.2", pod="web-1"),
            F.endpoint("10.1.0.3", ready=False, hostname="web-2", pod="web-2")],
            ports=[F.endpoint_port(8080, name="http")]),
        F.service("shop", "ext", type="ExternalName", external_name="www.site.example"),
        F.pod("shop", "client", ips=["10.1.0.50"], node=NODE),
    ]


def start(env, api, wait_sync=True, **over):
    kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig-%d" % id(api)))
    cfg = {"kubernetes": {"enabled": True, "kubeconfig": kc, "node_name": NODE},
           "cluster": {"domain": "cluster.local", "ttl": "5s"}}
    cfg = harness.deep_merge(cfg, over)
    d = env.start(**cfg)
    if wait_sync:
        wait_until(lambda: d.udp("dns-version.cluster.local", "TXT").rcode_name == "NOERROR",
                   "the first sync")
    return d


def wait_until(pred, what, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("no %s within %.1fs" % (what, timeout))
        time.sleep(0.01)
    return time.monotonic()


def data(m, rtype):
    return sorted(str(r["rdata"]) for r in m.rrs("answer", rtype))


def rcode_of(d, name, qt="A"):
    return d.udp(name, qt).rcode_name


def test_cluster_ip_services_answer_every_cluster_ip_and_port(env):
    with F.FakeAPI() as api:
        api.apply(*standard_objects())
        d = start(env, api)
        m = d.udp("db.shop.svc.cluster.local", "A")
        assert m.rcode_name == "NOERROR" and m.aa, m.describe()
        assert data(m, "A") == ["10.96.0.5"], m.describe()
        assert m.answer[0]["ttl"] == 5
        assert data(d.udp("DB.Shop.svc.cluster.local", "AAAA"), "AAAA") == ["fd00::5"]
        m = d.udp("db.shop.svc.cluster.local", "AAAA")
        assert m.question[0][0] == "db.shop.svc.cluster.local."
        m = d.tcp("_mysql._tcp.db.shop.svc.cluster.local", "SRV")
        assert len(m.answer) == 1, m.describe()
        srv = m.answer[0]["rdata"]
        assert (srv["port"], srv["target"]) == (3306, "db.shop.svc.cluster.local."), srv
        assert len(m.rrs("additional", "A")) == 1 and len(m.rrs("additional", "AAAA")) == 1, \
            m.describe()
        # unnamed ports get no SRV; the proto label exists (NODATA)
        assert rcode_of(d, "_9999._tcp.db.shop.svc.cluster.local", "SRV") == "NXDOMAIN"
        m = d.udp("_tcp.db.shop.svc.cluster.local", "SRV")
        assert m.rcode_name == "NOERROR" and not m.answer and m.rrs("authority", "SOA")


def test_headless_services_answer_ready_endpoints_and_hostnames(env):
    with F.FakeAPI() as api:
        api.apply(*standard_objects())
        d = start(env, api)
        assert data(d.udp("web.shop.svc.cluster.local"), "A") == ["10.1.0.1", "10.1.0.2"]
        assert data(d.udp("web-0.web.shop.svc.cluster.local"), "A") == ["10.1.0.1"]
        assert data(d.udp("10-1-0-2.web.shop.svc.cluster.local"), "A") == ["10.1.0.2"]
        assert rcode_of(d, "web-2.web.shop.svc.cluster.local") == "NXDOMAIN"   # not ready
        m = d.udp("_http._tcp.web.shop.svc.cluster.local", "SRV")
        assert sorted((r["rdata"]["port"], r["rdata"]["target"]) for r in m.answer) == [
            (8080, "10-1-0-2.web.shop.svc.cluster.local."),
            (8080, "web-0.web.shop.svc.cluster.local.")], m.describe()
        assert len(m.rrs("additional", "A")) == 2, m.describe()


def test_ptr_records_for_cluster_ips_and_endpoints(env):
    with F.FakeAPI() as api:
        api.apply(*standard_objects())
        d = start(env, api)
        m = d.udp("5.0.96.10.in-addr.arpa", "PTR")
        assert m.aa and data(m, "PTR") == ["db.shop.svc.cluster.local."], m.describe()
        v6 = ".".join(reversed("fd00" + "0" * 27 + "5")) + ".ip6.arpa"
        assert data(d.udp(v6, "PTR"), "PTR") == ["db.shop.svc.cluster.local."]
        assert data(d.udp("1.0.1.10.in-addr.arpa", "PTR"), "PTR") == \
            ["web-0.web.shop.svc.cluster.local."]
        assert data(d.udp("2.0.1.10.in-addr.arpa", "PTR"), "PTR") == \
            ["10-1-0-2.web.shop.svc.cluster.local."]


def test_spec_names_nxdomain_nodata_and_the_apex(env):
    with F.FakeAPI() as api:
        api.apply(*standard_objects())
        d = start(env, api)
        for name in ("google.com.shop.svc.cluster.local",
                     "db.shop.svc.cluster.local.shop.svc.cluster.local",
                     "nope.shop.svc.cluster.local", "db.other.svc.cluster.local",
                     "other.svc.cluster.local", "x.cluster.local"):
            m = d.udp(name)
            assert m.rcode_name == "NXDOMAIN" and m.aa and m.rrs("authority", "SOA"), \
                (name, m.describe())
        for name, qt in (("db.shop.svc.cluster.local", "TXT"), ("shop.svc.cluster.local", "A"),
                         ("svc.cluster.local", "A"), ("shop.pod.cluster.local", "A")):
            m = d.udp(name, qt)
            assert m.rcode_name == "NOERROR" and not m.answer and m.rrs("authority", "SOA"), \
                (name, m.describe())
        assert d.udp("dns-version.cluster.local", "TXT").answer[0]["rdata"] == ["1.1.0"]
        soa = d.udp("cluster.local", "SOA").answer[0]["rdata"]
        assert (soa["mname"], soa["rname"], soa["minimum"]) == (
            "ns.dns.cluster.local.", "hostmaster.cluster.local.", 5), soa
        assert data(d.udp("cluster.local", "NS"), "NS") == ["ns.dns.cluster.local."]


def test_pod_names_insecure_and_verified(env):
    with F.FakeAPI() as api:
        api.apply(*standard_objects())
        d = start(env, api)
        assert data(d.udp("10-1-0-99.shop.pod.cluster.local"), "A") == ["10.1.0.99"]
        assert rcode_of(d, "10-1-0-99.nope.pod.cluster.local") == "NXDOMAIN"
        d.stop()
        d = start(env, api, cluster={"pods": "verified"})
        assert data(d.udp("10-1-0-50.shop.pod.cluster.local"), "A") == ["10.1.0.50"]  # this node
        assert data(d.udp("10-1-0-7.shop.pod.cluster.local"), "A") == ["10.1.0.7"]    # endpoint
        assert rcode_of(d, "10-1-0-99.shop.pod.cluster.local") == "NXDOMAIN"
        d.stop()
        d = start(env, api, cluster={"pods": "disabled"})
        assert rcode_of(d, "10-1-0-50.shop.pod.cluster.local") == "NXDOMAIN"


def test_external_name_is_chased_through_the_upstream(env):
    with authority.Authority({"site.example.": SITE}) as up, F.FakeAPI() as api:
        api.apply(*standard_objects())
        d = start(env, api, upstream={"servers": [up.addr], "timeout": "1s"})
        m = d.udp("Ext.shop.svc.cluster.local", "A")
        assert m.rcode_name == "NOERROR", m.describe()
        cname = m.rrs("answer", "CNAME")
        assert len(m.answer) == 2 and m.answer[0] is cname[0], m.describe()
        assert (cname[0]["name"], cname[0]["rdata"]) == ("Ext.shop.svc.cluster.local.",
                                                         "www.site.example."), cname
        assert data(m, "A") == ["192.0.2.1"]
        asked = up.queries()
        m = d.tcp("ext.shop.svc.cluster.local", "A")
        assert data(m, "A") == ["192.0.2.1"] and up.queries() == asked, m.describe()


def test_objects_added_changed_and_deleted_are_served_within_moments(env):
    with F.FakeAPI() as api:
        api.apply(*standard_objects())
        d = start(env, api)
        latencies = []
        for i in range(30):
            name = "svc%d.team.svc.cluster.local" % i
            t0 = time.monotonic()
            api.apply(F.service("team", "svc%d" % i, cluster_ips=["10.96.1.%d" % (i + 1)]))
            latencies.append(wait_until(lambda: rcode_of(d, name) == "NOERROR", name) - t0)
        latencies.sort()
        print("watch event to servable: p50 %.1f ms, p99 %.1f ms over %d Services"
              % (latencies[len(latencies) // 2] * 1000, latencies[-1] * 1000, len(latencies)))
        api.apply(F.service("team", "svc0", cluster_ips=["10.96.2.1"]))
        wait_until(lambda: data(d.udp("svc0.team.svc.cluster.local"), "A") == ["10.96.2.1"],
                   "the changed ClusterIP")
        assert rcode_of(d, "1.1.96.10.in-addr.arpa", "PTR") != "NOERROR" or \
            not d.udp("1.1.96.10.in-addr.arpa", "PTR").answer
        api.delete("services", "team", "svc1")
        wait_until(lambda: rcode_of(d, "svc1.team.svc.cluster.local") == "NXDOMAIN", "deletion")
        # readiness flips
        api.apply(F.endpointslice("shop", "web", name="web-x", endpoints=[
            F.endpoint("10.1.0.1", hostname="web-0", ready=False),
            F.endpoint("10.1.0.2"), F.endpoint("10.1.0.3", hostname="web-2")],
            ports=[F.endpoint_port(8080, name="http")]))
        wait_until(lambda: data(d.udp("web.shop.svc.cluster.local"), "A") ==
                   ["10.1.0.2", "10.1.0.3"], "readiness flip")
        assert rcode_of(d, "web-0.web.shop.svc.cluster.local") == "NXDOMAIN"
        # namespace deletion
        api.delete("namespaces", None, "team")
        wait_until(lambda: rcode_of(d, "team.svc.cluster.local") == "NXDOMAIN",
                   "namespace deletion")


def test_watch_cuts_410_and_outages_keep_data_current(env):
    with F.FakeAPI() as api:
        api.apply(*standard_objects())
        d = start(env, api)
        api.cut_watches()
        api.apply(F.service("team", "after-cut", cluster_ips=["10.96.3.1"]))
        wait_until(lambda: rcode_of(d, "after-cut.team.svc.cluster.local") == "NOERROR",
                   "an event after a watch cut")
        # 410: history compacted while the watches are down; a deletion in the gap
        api.set_down(True)
        time.sleep(0.3)
        assert data(d.udp("db.shop.svc.cluster.local"), "A") == ["10.96.0.5"]  # last good data
        api.delete("services", "team", "after-cut")
        api.apply(F.service("team", "in-gap", cluster_ips=["10.96.3.2"]))
        api.compact()
        api.set_down(False)
        wait_until(lambda: rcode_of(d, "after-cut.team.svc.cluster.local") == "NXDOMAIN",
                   "the deletion made during the gap", timeout=15)
        assert rcode_of(d, "in-gap.team.svc.cluster.local") == "NOERROR"
        assert data(d.udp("db.shop.svc.cluster.local"), "A") == ["10.96.0.5"]


test_watch_cuts_410_and_outages_keep_data_current.timeout = 40


def test_cluster_names_get_servfail_before_the_first_sync(env):
    with F.FakeAPI() as api:
        api.apply(*standard_objects())
        api.forbid("services")
        d = start(env, api, wait_sync=False)
        for _ in range(3):
            assert rcode_of(d, "db.shop.svc.cluster.local") == "SERVFAIL"
            assert rcode_of(d, "nope.shop.svc.cluster.local") == "SERVFAIL"   # never NXDOMAIN
            time.sleep(0.1)
        assert "403" in d.tail() or "forbidden" in d.tail().lower(), d.tail()
        api.allow()
        wait_until(lambda: rcode_of(d, "db.shop.svc.cluster.local") == "NOERROR",
                   "the sync after access is granted", timeout=40)


test_cluster_names_get_servfail_before_the_first_sync.timeout = 60


KUBE_DNS_ZONE = """$TTL 30
@ IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30
@ IN NS ns.dns.cluster.local.
ns.dns IN A 127.0.0.1
db.shop.svc IN A 10.96.9.9
"""


def test_fallback_servers_answer_until_the_sync_and_in_forward_mode(env):
    with authority.Authority({"cluster.local.": KUBE_DNS_ZONE}) as kube_dns, \
            F.FakeAPI() as api:
        api.apply(*standard_objects())
        api.set_down(True)
        d = start(env, api, wait_sync=False,
                  cluster={"fallback_servers": [kube_dns.addr]})
        m = d.udp("db.shop.svc.cluster.local")
        assert data(m, "A") == ["10.96.9.9"], m.describe()    # kube-dns's answer
        api.set_down(False)
        wait_until(lambda: data(d.udp("db.shop.svc.cluster.local"), "A") == ["10.96.0.5"],
                   "the local answer after the sync", timeout=40)
        d.stop()
        # forward mode: no watch, kube-dns for the zone, answers cached
        d = env.start(kubernetes={"enabled": False},
                      cluster={"domain": "cluster.local", "fallback_servers": [kube_dns.addr]})
        assert data(d.udp("db.shop.svc.cluster.local"), "A") == ["10.96.9.9"]
        asked = kube_dns.queries()
        assert data(d.udp("db.shop.svc.cluster.local"), "A") == ["10.96.9.9"]
        assert kube_dns.queries() == asked
        assert rcode_of(d, "nope.shop.svc.cluster.local") == "NXDOMAIN"


test_fallback_servers_answer_until_the_sync_and_in_forward_mode.timeout = 60
