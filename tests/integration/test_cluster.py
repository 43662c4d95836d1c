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
from harness import wait_until

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


def test_pods_are_watched_only_for_autopath_or_verified_pod_names(env):
    """By default (insecure pod names, no autopath) Pods are never read. A
    reload that turns autopath on starts the watch of this node's Pods (and
    autopath answers once they are listed); one that turns it off ends the
    watch and forgets them."""
    import test_ctl
    import test_reload
    with F.FakeAPI() as api:
        api.apply(*autopath_objects())
        kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))
        d = test_ctl.start(env, kubernetes={"enabled": True, "kubeconfig": kc,
                                            "node_name": NODE},
                           upstream={"resolv_conf": node_resolv_conf(env, None)})
        wait_until(lambda: test_ctl.stats(env, d)["kube_synced"] == 1, "the first sync")
        api.wait_watches("namespaces", count=1)
        assert data(d.udp("10-1-0-99.shop.pod.cluster.local"), "A") == ["10.1.0.99"]
        name = "db.shop.shop.svc.cluster.local"
        assert_plain_nxdomain(d.udp(name, source=SHOP_POD))
        assert api.count("pods") == 0, api.requests("pods")

        cfg = harness.deep_merge(d.config, {"cluster": {"autopath": True}})
        test_reload.write_config(d, cfg)
        test_reload.wait_log(d, "reloaded", 1)
        wait_until(lambda: d.udp(name, source=SHOP_POD).rcode_name == "NOERROR",
                   "autopath for the pod, once Pods are listed")
        cname_then(d.udp(name, source=SHOP_POD), name + ".", "db.shop.svc.cluster.local.")
        api.wait_watches("pods", count=1)
        # One WatchList: the list and then the watch, on one request.
        reqs = api.requests("pods")
        assert [(r.verb, r.watch_list) for r in reqs] == [("watch", True)], reqs
        assert all(r.query["fieldSelector"] == "spec.nodeName=" + NODE for r in reqs), reqs
        assert test_ctl.stats(env, d)["kube_objects_pods"] == 4   # this node's

        cfg["cluster"]["autopath"] = False
        test_reload.write_config(d, cfg)
        test_reload.wait_log(d, "reloaded", 2)
        wait_until(lambda: api.open_watches("pods") == 0, "the Pods watch to end")
        wait_until(lambda: test_ctl.stats(env, d)["kube_objects_pods"] == 0,
                   "the Pods to be forgotten")
        assert "changed keys only apply at a restart" not in d.stderr(), d.tail()
        # Nothing reads Pods any more: a new one is never asked for.
        api.apply(F.pod("shop", "late", ips=["127.0.0.59"], node=NODE))
        assert_plain_nxdomain(d.udp(name, source=SHOP_POD))
        assert len(api.requests("pods")) == 1, api.requests("pods")
        # Other resources are untouched by it all: one WatchList each, still open.
        assert api.count("services") == 1, api.requests("services")
        assert api.open_watches("services") == 1


def test_a_service_past_the_bounds_degrades_only_itself(env):
    """cluster.max_ports_per_service and cluster.max_endpoints_per_service:
    the Service past them serves its first ports and endpoints, says so once
    in the log and in localdns_cluster_limited_total; others are untouched."""
    import test_metrics
    with F.FakeAPI() as api:
        api.apply(*standard_objects())
        api.apply(F.service("shop", "wide", cluster_ips=["10.96.0.9"],
                            ports=[F.service_port(80 + i, name="p%d" % i) for i in range(5)]),
                  F.service("shop", "crowd", headless=True),
                  F.endpointslice("shop", "crowd", name="crowd-x", endpoints=[
                      F.endpoint("10.2.0.%d" % i) for i in range(1, 6)]))
        mport = harness.free_port()
        d = start(env, api, cluster={"max_ports_per_service": 3, "max_endpoints_per_service": 4},
                  metrics={"listen": "127.0.0.1:%d" % mport})
        m = d.tcp("_p2._tcp.wide.shop.svc.cluster.local", "SRV")
        assert [r["rdata"]["port"] for r in m.answer] == [82], m.describe()
        assert rcode_of(d, "_p3._tcp.wide.shop.svc.cluster.local", "SRV") == "NXDOMAIN"
        assert len(d.udp("crowd.shop.svc.cluster.local").answer) == 4
        assert len(d.udp("web.shop.svc.cluster.local").answer) == 2   # others untouched
        assert data(d.udp("_mysql._tcp.db.shop.svc.cluster.local", "SRV"), "SRV")

        log = d.stderr()
        assert log.count("cluster.max_ports_per_service") == 1, d.tail()
        assert log.count("cluster.max_endpoints_per_service") == 1, d.tail()
        assert "service=shop/wide" in log and "service=shop/crowd" in log, d.tail()
        s = test_metrics.scrape(mport)
        assert s.value("localdns_cluster_limited_total", limit="ports") == 1
        assert s.value("localdns_cluster_limited_total", limit="endpoints") == 1
        assert s.value("localdns_cluster_limited_total", limit="name_length") == 0


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
        # Each name is replaced whole, but one after another: a reader may see
        # the Service's new A before its old PTR is gone.
        wait_until(lambda: not d.udp("1.1.96.10.in-addr.arpa", "PTR").answer,
                   "the old ClusterIP's PTR to go")
        api.delete("services", "team", "svc1")
        wait_until(lambda: rcode_of(d, "svc1.team.svc.cluster.local") == "NXDOMAIN", "deletion")
        # readiness flips
        api.apply(F.endpointslice("shop", "web", name="web-x", endpoints=[
            F.endpoint("10.1.0.1", hostname="web-0", ready=False),
            F.endpoint("10.1.0.2"), F.endpoint("10.1.0.3", hostname="web-2")],
            ports=[F.endpoint_port(8080, name="http")]))
        wait_until(lambda: data(d.udp("web.shop.svc.cluster.local"), "A") ==
                   ["10.1.0.2", "10.1.0.3"], "readiness flip")
        wait_until(lambda: rcode_of(d, "web-0.web.shop.svc.cluster.local") == "NXDOMAIN",
                   "the not-ready endpoint's own name to go")
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


# ---------------------------------------------------------------- autopath
#
# Clients pose as pods of this node by sending from 127.0.0.x addresses that
# fake Pods carry as status.podIP. The node's resolv.conf (a file of the
# test's own) searches nope.site.example (NXDOMAIN at the NSD upstream) then
# site.example, so the resolver has to step over a missing candidate. The
# upstream also serves a bare root zone, so the last candidate (a bare name
# like "nothing.") gets a real NXDOMAIN.

ROOT_ZONE = """$TTL 300
. IN SOA a.root. hostmaster.root. 1 1800 900 604800 300
. IN NS a.root.
a.root. IN A 127.0.0.1
"""

SHOP_POD = "127.0.0.55"      # a pod of this node in namespace shop
HOSTNET_POD = "127.0.0.56"   # a host-network pod in shop: never autopathed
TEAM_POD = "127.0.0.57"      # a pod of this node in namespace team


def autopath_objects():
    return standard_objects() + [
        F.pod("shop", "app", ips=[SHOP_POD], node=NODE),
        F.pod("shop", "agent", ips=[HOSTNET_POD], node=NODE, host_network=True),
        F.pod("team", "app", ips=[TEAM_POD], node=NODE),
    ]


def node_resolv_conf(env, search="nope.site.example site.example"):
    path = os.path.join(env.tmp, "resolv.conf")
    with open(path, "w") as f:
        f.write("nameserver 192.0.2.53\n" + ("search %s\n" % search if search else ""))
    return path


def start_autopath(env, api, up=None, autopath=True, search="nope.site.example site.example"):
    upstream = {"resolv_conf": node_resolv_conf(env, search)}
    if up is not None:
        upstream.update({"servers": [up.addr], "timeout": "2s"})
    return start(env, api, cluster={"autopath": autopath}, upstream=upstream)


def types(m):
    return [harness.dnsmsg.TYPE_NAME[r["type"]] for r in m.answer]


def cname_then(m, asked, target):
    """The reply starts with the CNAME asked -> target (cluster.ttl)."""
    assert m.rcode_name == "NOERROR" and m.answer, m.describe()
    first = m.answer[0]
    assert (types(m)[0], first["name"], first["rdata"], first["ttl"]) == (
        "CNAME", asked, target, 5), (m.describe(), m.answer)


def assert_plain_nxdomain(m):
    assert m.rcode_name == "NXDOMAIN" and m.aa and not m.answer, m.describe()
    assert [r["name"] for r in m.rrs("authority", "SOA")] == ["cluster.local."], m.describe()


def test_autopath_answers_the_first_search_query_with_a_cname(env):
    with authority.Authority({"site.example.": SITE, ".": ROOT_ZONE}) as up, \
            F.FakeAPI() as api:
        api.apply(*autopath_objects())
        d = start_autopath(env, api, up)
        # a Service of another namespace, behind the team pod's first suffix
        m = d.udp("db.shop.team.svc.cluster.local", "A", source=TEAM_POD)
        cname_then(m, "db.shop.team.svc.cluster.local.", "db.shop.svc.cluster.local.")
        assert m.aa and data(m, "A") == ["10.96.0.5"], m.describe()
        m = d.tcp("db.shop.team.svc.cluster.local", "AAAA", source=TEAM_POD)
        cname_then(m, "db.shop.team.svc.cluster.local.", "db.shop.svc.cluster.local.")
        assert data(m, "AAAA") == ["fd00::5"], m.describe()
        # <zone>, the third suffix
        m = d.udp("dns-version.shop.svc.cluster.local", "TXT", source=SHOP_POD)
        cname_then(m, "dns-version.shop.svc.cluster.local.", "dns-version.cluster.local.")
        # the pod's own namespace: answered as it is
        m = d.udp("db.shop.svc.cluster.local", "A", source=SHOP_POD)
        assert types(m) == ["A"], m.describe()


def test_autopath_reaches_external_names_through_the_node_search_domains(env):
    with authority.Authority({"site.example.": SITE, ".": ROOT_ZONE}) as up, \
            F.FakeAPI() as api:
        api.apply(*autopath_objects())
        d = start_autopath(env, api, up)
        # www.nope.site.example is NXDOMAIN upstream; www.site.example answers
        m = d.udp("www.shop.svc.cluster.local", "A", source=SHOP_POD)
        cname_then(m, "www.shop.svc.cluster.local.", "www.site.example.")
        assert data(m, "A") == ["192.0.2.1"] and len(m.answer) == 2, m.describe()
        asked = up.queries()
        m = d.udp("www.shop.svc.cluster.local", "A", source=SHOP_POD)
        assert data(m, "A") == ["192.0.2.1"] and up.queries() == asked, \
            "the joined answer is cached under the asked name"
        # the bare name, after every search domain
        m = d.udp("www.site.example.shop.svc.cluster.local", "AAAA", source=SHOP_POD)
        cname_then(m, "www.site.example.shop.svc.cluster.local.", "www.site.example.")
        assert data(m, "AAAA") == ["2001:db8::1"], m.describe()
        # a CNAME chain upstream follows the autopath CNAME
        m = d.udp("c1.shop.svc.cluster.local", "A", source=SHOP_POD)
        assert types(m) == ["CNAME"] * 4 + ["A"], m.describe()


def test_autopath_with_no_candidate_keeps_the_original_nxdomain(env):
    with authority.Authority({"site.example.": SITE, ".": ROOT_ZONE}) as up, \
            F.FakeAPI() as api:
        api.apply(*autopath_objects())
        d = start_autopath(env, api, up)
        for _ in range(2):   # the resolver's answer, then the cached NXDOMAINs' here
            assert_plain_nxdomain(d.udp("nothing.shop.svc.cluster.local", "A",
                                        source=SHOP_POD))
        # a 4-dot name: the node's domains come before the bare (local) name,
        # so the first time the client searches on; then their NXDOMAINs are
        # known and the local name is found here
        name = "web.shop.svc.cluster.local.team.svc.cluster.local"
        assert_plain_nxdomain(d.udp(name, "A", source=TEAM_POD))
        m = d.udp(name, "A", source=TEAM_POD)
        cname_then(m, name + ".", "web.shop.svc.cluster.local.")
        assert data(m, "A") == ["10.1.0.1", "10.1.0.2"], m.describe()


def test_autopath_is_only_for_known_pods_and_when_enabled(env):
    with F.FakeAPI() as api:
        api.apply(*autopath_objects())
        d = start_autopath(env, api, search=None)
        name = "db.shop.shop.svc.cluster.local"
        cname_then(d.udp(name, source=SHOP_POD), name + ".", "db.shop.svc.cluster.local.")
        assert_plain_nxdomain(d.udp(name))                          # 127.0.0.1: unknown
        assert_plain_nxdomain(d.udp(name, source="127.0.0.58"))     # no pod has it
        assert_plain_nxdomain(d.udp(name, source=HOSTNET_POD))      # the node's address
        assert_plain_nxdomain(d.udp(name, source=TEAM_POD))         # not team's first
        api.delete("pods", "shop", "app")
        wait_until(lambda: d.udp(name, source=SHOP_POD).rcode_name == "NXDOMAIN",
                   "the deleted pod's address to be forgotten")
        api.apply(F.pod("shop", "app", ips=[SHOP_POD], node=NODE))
        wait_until(lambda: d.udp(name, source=SHOP_POD).rcode_name == "NOERROR",
                   "the pod's address again")
        api.apply(F.pod("shop", "app", ips=[SHOP_POD], node=NODE, phase="Succeeded"))
        wait_until(lambda: d.udp(name, source=SHOP_POD).rcode_name == "NXDOMAIN",
                   "a finished pod's address to be forgotten")
        d.stop()
        api.apply(F.pod("shop", "app", ips=[SHOP_POD], node=NODE))
        d = start_autopath(env, api, autopath=False, search=None)
        assert_plain_nxdomain(d.udp(name, source=SHOP_POD))
