"""Mesh and multi-cluster names end to end: localdns watching the fake API
server (tests/kube/fakeapi.py) with its Istio CRDs (ServiceEntries,
WorkloadEntries, networking.istio.io/v1) and its Multi-Cluster Services
CRD (ServiceImports, multicluster.x-k8s.io/v1alpha1), objects shaped as
the API server returns them.

Istio's rules (mesh.istio): addresses, istiod's allocation, headless
entries from the Pods a selector picks (a label-selected watch of that
namespace only) and WorkloadEntries, what goes upstream instead, a
Service winning, wildcards, exportTo by the client's namespace (clients
pose as pods of this node by sending from 127.0.0.x, as in
test_cluster.py), the search-path alias; changes served within a second;
CRDs absent (404: logged once, asked again slowly, picked up once
installed, no restart); Multi-Cluster Services (multicluster.enabled):
ClusterSetIP and headless imports, names under each source cluster,
NXDOMAIN with the zone's SOA, the zone empty without the CRD.
"""

import os
import sys
import time

import authority
import harness
from harness import wait_until
import test_metrics

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

NODE = "node-a"
SITE = authority.zone_path("site.example.")
PROD_POD = "127.0.0.61"     # a pod of this node in namespace prod
TEAM_POD = "127.0.0.62"     # ... in team
OTHER = "127.0.0.63"        # no pod of this node: its namespace is not known

T0, T1 = "2024-05-01T10:00:00Z", "2024-05-02T10:00:00Z"


def base_objects():
    return [
        F.namespace("prod"), F.namespace("team"), F.namespace("shop"),
        F.service("shop", "db", cluster_ips=["10.96.0.5"], ports=[3306]),
        F.pod("prod", "client", ips=[PROD_POD], node=NODE),
        F.pod("team", "client", ips=[TEAM_POD], node=NODE),
    ]


def start(env, api, up=None, **over):
    """localdns with mesh.istio (and over), once cluster names are synced."""
    kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig-%d" % id(api)))
    cfg = {"kubernetes": {"enabled": True, "kubeconfig": kc, "node_name": NODE},
           "cluster": {"domain": "cluster.local", "ttl": "5s"},
           "mesh": {"istio": True, "ttl": "30s"}}
    if up is not None:
        cfg["upstream"] = {"servers": [up.addr], "timeout": "2s"}
    d = env.start(**harness.deep_merge(cfg, over))
    wait_until(lambda: d.udp("dns-version.cluster.local", "TXT").rcode_name == "NOERROR",
               "the first sync")
    return d


def data(m, rtype):
    return sorted(str(r["rdata"]) for r in m.rrs("answer", rtype))


def mesh_answer(d, name, qt="A", source=None):
    """The mesh's answer (AA, TTL 30, no SOA): its records' data, sorted."""
    m = d.udp(name, qt, source=source)
    assert m.rcode_name == "NOERROR" and m.aa and not m.rrs("authority"), (name, m.describe())
    assert all(r["ttl"] == 30 for r in m.answer), m.describe()
    return data(m, qt)


def wait_answer(d, name, want, qt="A", source=None, timeout=5.0):
    return wait_until(lambda: data(d.udp(name, qt, source=source), qt) == want,
                      "%s %s = %s" % (name, qt, want), timeout)


# ------------------------------------------------------------ ServiceEntries

def test_service_entries_answered_on_the_node(env):
    with authority.Authority({"site.example.": SITE}) as up, \
            F.FakeAPI(crds=F.ISTIO_CRDS) as api:
        api.apply(*base_objects())
        api.apply(
            F.service_entry("prod", "api", ["api.example.com", "API2.example.com",
                                            "mail.site.example"],
                            addresses=["192.0.2.10", "192.0.2.11/32", "198.51.100.0/24",
                                       "2001:db8::10"], resolution="STATIC"),
            # istiod's allocation: used with resolution DNS, as Istio uses it
            F.service_entry("prod", "ext", ["ext.example.org"], resolution="DNS",
                            allocated={"ext.example.org": ["240.240.0.5", "2001:2::5"]}),
            # resolution DNS, no allocation: the name goes upstream
            F.service_entry("prod", "www", ["www.site.example"], resolution="DNS",
                            endpoints=["192.0.2.99"],
                            labels={"networking.istio.io/enable-autoallocate-ip": "false"},
                            allocated={"www.site.example": ["240.240.0.6"]}),
            F.service_entry("prod", "wild", ["*.wild.site.example"], addresses=["192.0.2.20"]),
            # a Service of that name wins
            F.service_entry("prod", "db", ["db.shop.svc.cluster.local"], addresses=["192.0.2.30"]))
        mport = harness.free_port()
        d = start(env, api, up, metrics={"listen": "127.0.0.1:%d" % mport})
        wait_answer(d, "api.example.com", ["192.0.2.10", "192.0.2.11"])
        assert mesh_answer(d, "api2.example.com", "AAAA") == ["2001:db8::10"]
        assert mesh_answer(d, "ext.example.org") == ["240.240.0.5"]
        assert mesh_answer(d, "ext.example.org", "AAAA") == ["2001:2::5"]
        m = d.udp("Deep.Name.wild.site.example")
        assert data(m, "A") == ["192.0.2.20"] and m.answer[0]["name"] == \
            "Deep.Name.wild.site.example.", m.describe()
        m = d.udp("wild.site.example")         # not the parent: the upstream's NXDOMAIN
        assert m.rcode_name == "NXDOMAIN" and not m.aa, m.describe()
        # other types are not the mesh's; the opted-out entry is the upstream's
        assert data(d.udp("www.site.example"), "A") == ["192.0.2.1"]
        assert mesh_answer(d, "mail.site.example") == ["192.0.2.10", "192.0.2.11"]
        m = d.udp("mail.site.example", "MX")
        assert data(m, "MX") and not m.aa, m.describe()
        m = d.udp("db.shop.svc.cluster.local")
        assert data(m, "A") == ["10.96.0.5"], m.describe()
        r = d.dig("ext.example.org", "A")      # the real tool
        assert r.rdatas("A") == ["240.240.0.5"], r.text
        # counted as the mesh's answers; its hosts, wildcards once
        s = test_metrics.scrape(mport)
        assert s.value("localdns_answers_total", source="mesh") >= 7, s.value("localdns_answers_total", source="mesh")
        assert s.value("localdns_mesh_hosts") == 7   # an entry that cannot answer has its hosts too
        assert s.value("localdns_kubernetes_objects", resource="serviceentries") == 5


def test_headless_entries_from_selected_pods_and_workload_entries(env):
    with F.FakeAPI(crds=F.ISTIO_CRDS) as api:
        api.apply(*base_objects())
        api.apply(
            F.service_entry("prod", "db", ["db.vms.internal"], resolution="NONE",
                            workload_selector={"app": "pg"}),
            # Pods the selector picks, wherever they run; one not ready, one elsewhere
            F.pod("prod", "pg-0", ips=["10.1.2.3"], node="node-b", labels={"app": "pg"}),
            F.pod("prod", "pg-1", ips=["10.1.2.4"], node="node-c", labels={"app": "pg"},
                  ready=False),
            F.pod("team", "pg-2", ips=["10.1.2.5"], node="node-b", labels={"app": "pg"}),
            F.pod("prod", "web-0", ips=["10.1.2.6"], node="node-b", labels={"app": "web"}),
            F.workload_entry("prod", "vm-1", "10.20.0.1", labels={"app": "pg"}),
            F.workload_entry("prod", "vm-2", "10.20.0.2", spec_labels={"app": "pg"},
                             health_checks=True, healthy=False))
        d = start(env, api)
        wait_answer(d, "db.vms.internal", ["10.1.2.3", "10.20.0.1"])
        # one label-selected watch of that namespace's Pods, never every Pod
        pods = api.requests("pods")
        assert all(r.namespace == "prod" and "labelSelector=app%3Dpg" in r.raw_query
                   or "fieldSelector=spec.nodeName" in r.raw_query for r in pods), \
            [(r.namespace, r.raw_query) for r in pods]
        assert any(r.namespace == "prod" for r in pods), [r.raw_query for r in pods]
        # changes: a Pod turns ready, a WorkloadEntry turns healthy, one goes
        t = time.monotonic()
        api.apply(F.pod("prod", "pg-1", ips=["10.1.2.4"], node="node-c", labels={"app": "pg"}))
        api.apply(F.workload_entry("prod", "vm-2", "10.20.0.2", spec_labels={"app": "pg"},
                                   health_checks=True, healthy=True))
        api.delete("workloadentries", "prod", "vm-1")
        took = wait_answer(d, "db.vms.internal", ["10.1.2.3", "10.1.2.4", "10.20.0.2"]) - t
        print("headless entry updated in %.3fs" % took)
        # no ready endpoint: not local
        api.delete("serviceentries", "prod", "db")
        wait_until(lambda: not d.udp("db.vms.internal").aa, "the entry gone")
        wait_until(lambda: api.open_watches("pods") == 1, "the selector watch stopped")


def test_visibility_by_the_clients_namespace_and_the_search_alias(env):
    with F.FakeAPI(crds=F.ISTIO_CRDS) as api:
        api.apply(*base_objects())
        api.apply(
            F.service_entry("prod", "private", ["private.example.com"],
                            addresses=["192.0.2.40"], export_to=["."], created=T0),
            F.service_entry("team", "twin", ["private.example.com"],
                            addresses=["192.0.2.41"], created=T1),
            F.service_entry("shop", "older", ["shared.example.com"],
                            addresses=["192.0.2.50"], created=T0),
            F.service_entry("team", "newer", ["shared.example.com"],
                            addresses=["192.0.2.51"], created=T1),
            F.service_entry("prod", "merge-a", ["merged.example.com"],
                            addresses=["192.0.2.60"], created=T0),
            F.service_entry("prod", "merge-b", ["merged.example.com"],
                            addresses=["192.0.2.61"], created=T1))
        d = start(env, api)
        wait_answer(d, "private.example.com", ["192.0.2.40"], source=PROD_POD)
        assert mesh_answer(d, "private.example.com", source=TEAM_POD) == ["192.0.2.41"]
        assert mesh_answer(d, "private.example.com", source=OTHER) == ["192.0.2.41"]
        assert mesh_answer(d, "shared.example.com", source=TEAM_POD) == ["192.0.2.51"]  # own
        assert mesh_answer(d, "shared.example.com", source=PROD_POD) == ["192.0.2.50"]  # oldest
        assert mesh_answer(d, "merged.example.com") == ["192.0.2.60", "192.0.2.61"]
        # Istio's alias: the pod's first search query, a CNAME and the records
        m = d.udp("private.example.com.prod.svc.cluster.local", source=PROD_POD)
        assert [r["rdata"] for r in m.answer] == ["private.example.com.", "192.0.2.40"], \
            m.describe()
        assert m.answer[0]["name"] == "private.example.com.prod.svc.cluster.local."
        m = d.udp("private.example.com.prod.svc.cluster.local", source=TEAM_POD)
        assert m.rcode_name == "NXDOMAIN", m.describe()      # not that pod's namespace
        m = d.udp("private.example.com.prod.svc.cluster.local", source=OTHER)
        assert m.rcode_name == "NXDOMAIN", m.describe()


def test_changes_are_served_within_a_second(env):
    with F.FakeAPI(crds=F.ISTIO_CRDS) as api:
        api.apply(*base_objects())
        d = start(env, api)
        took = []
        t = time.monotonic()
        api.apply(F.service_entry("prod", "api", ["live.example.com"], addresses=["192.0.2.1"]))
        took.append(wait_answer(d, "live.example.com", ["192.0.2.1"]) - t)
        t = time.monotonic()
        api.apply(F.service_entry("prod", "api", ["live.example.com"], addresses=["192.0.2.2"]))
        took.append(wait_answer(d, "live.example.com", ["192.0.2.2"]) - t)
        t = time.monotonic()
        api.delete("serviceentries", "prod", "api")
        took.append(wait_until(lambda: not d.udp("live.example.com").aa, "the host gone") - t)
        print("added, changed, deleted served after %s s" % ["%.3f" % x for x in took])
        # a watch cut and a 410 relist lose nothing
        api.apply(F.service_entry("prod", "api", ["again.example.com"], addresses=["192.0.2.3"]))
        wait_answer(d, "again.example.com", ["192.0.2.3"])
        api.cut_watches("serviceentries")
        api.apply(F.service_entry("prod", "api", ["again.example.com"], addresses=["192.0.2.4"]))
        wait_answer(d, "again.example.com", ["192.0.2.4"])


def test_absent_crds_are_logged_once_asked_again_slowly_and_picked_up(env):
    with F.FakeAPI(crds=()) as api:
        api.apply(*base_objects())
        d = start(env, api, kubernetes={"crd_retry_interval": "2s"})
        # the cluster zone does not wait for the mesh
        assert data(d.udp("db.shop.svc.cluster.local"), "A") == ["10.96.0.5"]
        wait_until(lambda: "resource=workloadentries" in d.stderr(), "the 404 logged")
        t0 = time.monotonic()
        time.sleep(3.5)
        asked = api.count("serviceentries")
        # the first ask, then one every 2-3 s: never a tight loop
        assert 1 <= asked <= 3, [r.to_dict() for r in api.requests("serviceentries")]
        lines = [l for l in d.stderr().splitlines() if "not installed" in l]
        assert len(lines) == 2, lines          # one per resource, once
        assert "resource=serviceentries" in " ".join(lines) and d.alive()
        # Istio is installed later: picked up without a restart
        api.install_crd("serviceentries")
        api.install_crd("workloadentries")
        api.apply(F.service_entry("prod", "api", ["late.example.com"], addresses=["192.0.2.7"]))
        took = wait_answer(d, "late.example.com", ["192.0.2.7"], timeout=8) - t0
        assert "kubernetes resource installed now" in d.stderr()
        print("installed CRD picked up %.1fs into a 2s retry interval" % took)
        # and removed again: its hosts go, and it is absent once more
        api.uninstall_crd("serviceentries")
        wait_until(lambda: not d.udp("late.example.com").aa, "the hosts gone", timeout=8)


test_absent_crds_are_logged_once_asked_again_slowly_and_picked_up.timeout = 40


def test_default_retry_interval_asks_once_a_minute(env):
    with F.FakeAPI(crds=()) as api:
        api.apply(*base_objects())
        d = start(env, api, multicluster={"enabled": True})
        wait_until(lambda: api.count("serviceimports") >= 1, "the first ask")
        time.sleep(2)
        assert api.count("serviceentries") == 1 and api.count("serviceimports") == 1, \
            [(r.resource, r.code) for r in api.requests() if r.resource.startswith("service")]
        # without the CRD the clusterset zone is empty: NXDOMAIN with its SOA
        m = d.udp("db.shop.svc.clusterset.local")
        assert m.rcode_name == "NXDOMAIN" and m.aa and \
            [r["name"] for r in m.rrs("authority", "SOA")] == ["clusterset.local."], m.describe()


# ------------------------------------------------------ Multi-Cluster Services

def test_multicluster_service_imports(env):
    with F.FakeAPI(crds=F.MCS_CRDS) as api:
        api.apply(*base_objects())
        api.apply(
            F.service_import("shop", "db", ips=["10.100.0.5"],
                             ports=[F.service_port(3306, name="mysql")]),
            F.service_import("shop", "web", type="Headless",
                             ports=[F.service_port(8080, name="http")]),
            F.imported_endpointslice("shop", "web", "east", endpoints=[
                F.endpoint("10.1.0.1", hostname="web-0"), F.endpoint("10.1.0.2"),
                F.endpoint("10.1.0.3", ready=False, hostname="web-2")],
                ports=[F.endpoint_port(8080, name="http")]),
            F.imported_endpointslice("shop", "web", "west", endpoints=[
                F.endpoint("10.2.0.1", hostname="web-0")],
                ports=[F.endpoint_port(8080, name="http")]))
        d = start(env, api, mesh={"istio": False}, multicluster={"enabled": True})
        wait_answer(d, "db.shop.svc.clusterset.local", ["10.100.0.5"])
        m = d.udp("_mysql._tcp.db.shop.svc.clusterset.local", "SRV")
        assert [(r["rdata"]["port"], r["rdata"]["target"]) for r in m.answer] == \
            [(3306, "db.shop.svc.clusterset.local.")], m.describe()
        assert data(d.udp("web.shop.svc.clusterset.local"), "A") == \
            ["10.1.0.1", "10.1.0.2", "10.2.0.1"]
        assert data(d.udp("web-0.east.web.shop.svc.clusterset.local"), "A") == ["10.1.0.1"]
        assert data(d.udp("web-0.west.web.shop.svc.clusterset.local"), "A") == ["10.2.0.1"]
        assert data(d.udp("10-1-0-2.east.web.shop.svc.clusterset.local"), "A") == ["10.1.0.2"]
        m = d.udp("web.shop.svc.clusterset.local", "SRV")
        assert sorted(r["rdata"]["target"] for r in m.answer) == [
            "10-1-0-2.east.web.shop.svc.clusterset.local.",
            "web-0.east.web.shop.svc.clusterset.local.",
            "web-0.west.web.shop.svc.clusterset.local."], m.describe()
        for name, rcode in (("web-2.east.web.shop.svc.clusterset.local", "NXDOMAIN"),
                            ("nope.shop.svc.clusterset.local", "NXDOMAIN"),
                            ("shop.svc.clusterset.local", "NOERROR")):
            m = d.udp(name)
            assert m.rcode_name == rcode and m.aa and not m.answer and \
                [r["name"] for r in m.rrs("authority", "SOA")] == ["clusterset.local."], \
                (name, m.describe())
        # the cluster zone is unchanged, and the imported slices are not its
        assert data(d.udp("db.shop.svc.cluster.local"), "A") == ["10.96.0.5"]
        assert d.udp("web.shop.svc.cluster.local").rcode_name == "NXDOMAIN"
        # changes
        api.delete("endpointslices", "shop", "web-west")
        wait_until(lambda: d.udp("web-0.west.web.shop.svc.clusterset.local").rcode_name ==
                   "NXDOMAIN", "the west slice gone")
        api.apply(F.service_import("shop", "db", ips=["10.100.0.6"], ports=[3306]))
        wait_answer(d, "db.shop.svc.clusterset.local", ["10.100.0.6"])
