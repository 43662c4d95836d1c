#!/usr/bin/env python3
"""make_seeds: (re)writes the seed corpora in tests/fuzz/seeds/ from real
sources, so every seed is an input some real peer sends or some real file
holds. Run as root from the repository (NSD is started on loopback):

    tests/fuzz/make_seeds.py [cache|handle|cluster|mesh|config|http|kubeconfig|control]...
                                                                     (default: all)

  seeds/cache/     replies of NSD (the integration tests' authority) serving
                   the committed zones, secure.example. signed: answers,
                   CNAME chains, referrals, NXDOMAIN/NODATA with SOA, MX,
                   TXT, a 2.6 KB answer over TCP, RRSIGs and NSEC with DO.
                   The reply's ID is the fuzz target's options (bit 0: DO in
                   the key, bit 1: CD, bit 2: shrink the cache); a DO query
                   gets an odd ID.
  seeds/handle/    queries for the names fuzz_handle's tables hold (static,
                   cluster, cache, autopath candidates, CHAOS) and for the
                   protocol rules (AXFR, ANY, EDNS, cookies, other classes).
  seeds/cluster/   what the API server sends: LIST pages (items without
                   kind, as the real server writes them) and watch streams
                   (one {"type", "object"} event per line), objects from the
                   fake API server's builders (tests/kube/fakeapi.py), with
                   the fields the real server fills in.
  seeds/mesh/      the same for Istio's ServiceEntries and WorkloadEntries:
                   every kind of entry (addresses, CIDRs, istiod's
                   allocation, headless with a selector or endpoints,
                   wildcards, exportTo), changes and deletions.
  seeds/config/    the shipped configs (deploy/examples, deploy/vm, the
                   chart's ConfigMap in deploy/kubernetes/localdns.yaml) and
                   the integration tests' standard config.
  seeds/kubeconfig/ kubeconfigs as the fake API server writes them for the
                   integration tests (token, tokenFile, client certificates
                   as files and inline, a CA, insecure-skip-tls-verify with
                   a certificate), and kind's shape with several contexts.
  seeds/control/   every `localdns ctl` request, as ctl.c writes it: the
                   words joined by single spaces, then a newline.
  seeds/http/      requests to the health and metrics endpoints: curl's and
                   wget's as they send them (captured on a loopback socket),
                   and the kubelet's probe and Prometheus's scrape as their
                   sources write them.

Files are named by what they hold; re-running rewrites them all, except
the regress-* files: inputs that once found a bug, kept by hand.
"""

import json
import os
import re
import socket
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "kube"))

import authority  # noqa: E402
import dnsmsg  # noqa: E402
import fakeapi  # noqa: E402
import harness  # noqa: E402

SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")


def fresh_dir(name):
    """tests/fuzz/seeds/name/, emptied of everything but regress-* files."""
    d = os.path.join(SEEDS, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if not f.startswith("regress-"):
            os.unlink(os.path.join(d, f))
    return d


def write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---------------------------------------------------------------- cache

def udp_exchange(addr, pkt):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(pkt, addr)
        return s.recv(65535)


def tcp_exchange(addr, pkt):
    with socket.create_connection(addr, timeout=2) as s:
        s.sendall(dnsmsg.frame(pkt))
        head = b""
        while len(head) < 2:
            head += s.recv(2 - len(head))
        (n,) = struct.unpack("!H", head)
        body = b""
        while len(body) < n:
            body += s.recv(n - len(body))
        return body


# (file name, qname, qtype, DO, over TCP)
CACHE_QUERIES = [
    ("a", "www.site.example", "A", False, False),
    ("aaaa", "www.site.example", "AAAA", False, False),
    ("cname-chain", "c1.site.example", "A", False, False),
    ("mx", "mail.site.example", "MX", False, False),
    ("txt", "txt.site.example", "TXT", False, False),
    ("nxdomain", "nope.site.example", "A", False, False),
    ("nodata", "noaaaa.site.example", "AAAA", False, False),
    ("referral", "x.sub.site.example", "A", False, False),
    ("ttl-zero", "zero.site.example", "A", False, False),
    ("short-ttl", "short.site.example", "A", False, False),
    ("soa", "site.example", "SOA", False, False),
    ("ns", "site.example", "NS", False, False),
    ("any", "www.site.example", "ANY", False, False),
    ("big-txt-tcp", "big.site.example", "TXT", False, True),
    ("big-txt-udp-tc", "big.site.example", "TXT", False, False),
    ("mixed-case", "WwW.SiTe.ExAmPlE", "A", False, False),
    ("corp-a", "db.corp.internal", "A", False, False),
    ("dnssec-a", "good.secure.example", "A", True, False),
    ("dnssec-nxdomain", "nope.secure.example", "A", True, False),
    ("dnssec-nodata", "good.secure.example", "TXT", True, False),
    ("dnssec-dnskey", "secure.example", "DNSKEY", True, True),
    ("dnssec-a-no-do", "good.secure.example", "A", False, False),
]


def cache_seeds():
    d = fresh_dir("cache")
    signed = authority.sign_secure_zone()
    zones = {"site.example.": authority.zone_path("site.example."),
             "corp.internal.": authority.zone_path("corp.internal."),
             "secure.example.": signed.path}
    with authority.Authority(zones) as up:
        addr = (up.host, up.port)
        for i, (name, qname, qt, do, tcp) in enumerate(CACHE_QUERIES):
            qid = (i << 4) | (1 if do else 0)
            qt_num = 48 if qt == "DNSKEY" else qt
            pkt = dnsmsg.build_query(qname, qt_num, qid=qid, edns=True,
                                     udp_size=1232, do=do)
            reply = (tcp_exchange if tcp else udp_exchange)(addr, pkt)
            write(d, name, reply)
    print("cache: %d replies from NSD" % len(CACHE_QUERIES))


# ---------------------------------------------------------------- handle

# Names in fuzz_handle.c's tables; keep the two in step.
HANDLE_QUERIES = [
    ("static-a", "db.prod.svc.cluster.local", "A", {}),
    ("static-aaaa-edns", "db.prod.svc.cluster.local", "AAAA", {"edns": True}),
    ("static-cname", "alias2.prod.svc.cluster.local", "A", {}),
    ("static-cname-out", "out.prod.svc.cluster.local", "A", {}),
    ("static-srv", "_mysql._tcp.db.prod.svc.cluster.local", "SRV", {}),
    ("static-txt", "txt.prod.svc.cluster.local", "TXT", {}),
    ("static-ptr", "5.0.0.10.in-addr.arpa", "PTR", {}),
    ("static-big-tc", "big.prod.svc.cluster.local", "A", {}),
    ("static-big-edns", "big.prod.svc.cluster.local", "A", {"edns": True, "udp_size": 4096}),
    ("cluster-svc", "api.team.svc.cluster.local", "A", {}),
    ("cluster-svc-aaaa", "api.team.svc.cluster.local", "AAAA", {}),
    ("cluster-headless", "web.prod.svc.cluster.local", "A", {}),
    ("cluster-endpoint", "web-0.web.prod.svc.cluster.local", "A", {}),
    ("cluster-srv", "_http._tcp.web.prod.svc.cluster.local", "SRV", {}),
    ("cluster-external-name", "ext.prod.svc.cluster.local", "A", {}),
    ("cluster-pod", "10-1-0-50.prod.pod.cluster.local", "A", {}),
    ("cluster-ptr", "9.0.96.10.in-addr.arpa", "PTR", {}),
    ("cluster-apex-soa", "cluster.local", "SOA", {}),
    ("cluster-version", "dns-version.cluster.local", "TXT", {}),
    ("cluster-nxdomain", "nope.prod.svc.cluster.local", "A", {}),
    ("cluster-any", "api.team.svc.cluster.local", "ANY", {}),
    ("autopath-svc", "api.team.svc.prod.svc.cluster.local", "A", {}),
    ("autopath-external", "www.example.org.prod.svc.cluster.local", "A", {}),
    ("autopath-node-domain", "legacy.prod.svc.cluster.local", "A", {}),
    ("cache-hit", "www.example.org", "A", {}),
    ("cache-hit-do", "www.example.org", "A", {"do": True}),
    ("cache-nxdomain", "gone.example.org", "A", {}),
    ("cache-servfail", "broken.example.org", "A", {}),
    ("cache-big", "big.example.org", "TXT", {"edns": True, "udp_size": 512}),
    ("miss", "new.example.net", "A", {}),
    ("miss-cookie", "new.example.net", "AAAA", {"cookie": bytes(range(8))}),
    ("chaos-version", "version.bind", "TXT", {"qclass": dnsmsg.C_CH}),
    ("chaos-id", "id.server", "TXT", {"qclass": dnsmsg.C_CH}),
    ("axfr", "cluster.local", "AXFR", {}),
    ("ixfr", "cluster.local", "IXFR", {}),
    ("class-any", "db.prod.svc.cluster.local", "A", {"qclass": dnsmsg.C_ANY}),
    ("badvers", "db.prod.svc.cluster.local", "A", {"version": 1}),
    ("notify-opcode", "cluster.local", "SOA", {"opcode": 4}),
]


def handle_seeds():
    d = fresh_dir("handle")
    for i, (name, qname, qt, kw) in enumerate(HANDLE_QUERIES):
        write(d, name, dnsmsg.build_query(qname, qt, qid=0x1000 + i, **kw))
    print("handle: %d queries" % len(HANDLE_QUERIES))


# ---------------------------------------------------------------- cluster

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def event_line(type_, obj, rv):
    """One watch event as the API server writes it (its resourceVersion
    set); the builders' random UIDs and the time made fixed, so the seeds
    stay the same from run to run."""
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["resourceVersion"] = str(rv)
    text = json.dumps({"type": type_, "object": obj}, separators=(",", ":"))
    n = iter(range(1, 1000))
    text = UUID.sub(lambda m: "00000000-0000-4000-8000-%012d" % next(n), text)
    return TIMESTAMP.sub("2024-01-01T00:00:00Z", text) + "\n"


def stream(*events):
    return "".join(event_line(t, o, 100 + i) for i, (t, o) in enumerate(events))


def list_page(kind, objs, cont=None):
    """A LIST page: kind "<Kind>List", items without kind and apiVersion."""
    items = []
    for i, obj in enumerate(objs):
        item = json.loads(event_line("ADDED", obj, 200 + i))["object"]
        del item["kind"], item["apiVersion"]
        items.append(item)
    meta = {"resourceVersion": "300"}
    if cont:
        meta["continue"] = cont
        meta["remainingItemCount"] = 7
    return json.dumps({"kind": kind + "List", "apiVersion": "v1", "metadata": meta,
                       "items": items}, separators=(",", ":"))


def cluster_seeds():
    d = fresh_dir("cluster")
    ns_prod = fakeapi.namespace("prod")
    ns_team = fakeapi.namespace("team", labels={"team": "a"})
    svc_db = fakeapi.service("prod", "db", cluster_ips=["10.96.0.5", "fd00::5"],
                             ports=[fakeapi.service_port(3306, "mysql"),
                                    fakeapi.service_port(53, "dns", protocol="UDP")])
    svc_headless = fakeapi.service("prod", "web", headless=True,
                                   ports=[fakeapi.service_port(80, "http")])
    svc_ext = fakeapi.service("prod", "ext", type="ExternalName",
                              external_name="www.example.org")
    slice_web = fakeapi.endpointslice(
        "prod", "web", name="web-abc12",
        endpoints=[fakeapi.endpoint(["10.1.0.1"], hostname="web-0", pod="web-0"),
                   fakeapi.endpoint(["10.1.0.2"], pod="web-1"),
                   fakeapi.endpoint(["10.1.0.3"], ready=False, hostname="web-2",
                                    pod="web-2")],
        ports=[fakeapi.endpoint_port(8080, "http")])
    slice_v6 = fakeapi.endpointslice(
        "prod", "db", name="db-v6", address_type="IPv6",
        endpoints=[fakeapi.endpoint(["fd00:1::7"], hostname="db-0")],
        ports=[fakeapi.endpoint_port(3306, "mysql")])
    pod = fakeapi.pod("prod", "client", ips=["10.1.0.50", "fd00:1::50"])
    pod_done = fakeapi.pod("team", "job", ips=["10.1.0.60"], phase="Succeeded")

    write(d, "namespace-added", stream(("ADDED", ns_prod)))
    write(d, "service-cluster-ip", stream(("ADDED", ns_prod), ("ADDED", svc_db)))
    write(d, "service-headless-with-slice",
          stream(("ADDED", ns_prod), ("ADDED", svc_headless), ("ADDED", slice_web)))
    write(d, "slice-before-service",
          stream(("ADDED", slice_web), ("ADDED", ns_prod), ("ADDED", svc_headless)))
    write(d, "service-external-name", stream(("ADDED", ns_prod), ("ADDED", svc_ext)))
    write(d, "slice-ipv6", stream(("ADDED", ns_prod), ("ADDED", svc_db), ("ADDED", slice_v6)))
    write(d, "pods", stream(("ADDED", ns_prod), ("ADDED", ns_team), ("ADDED", pod),
                            ("ADDED", pod_done)))
    svc_db_changed = json.loads(json.dumps(svc_db))
    svc_db_changed["spec"]["ports"] = [fakeapi.service_port(5432, "pg")]
    write(d, "modified-then-deleted",
          stream(("ADDED", ns_prod), ("ADDED", svc_db), ("MODIFIED", svc_db_changed),
                 ("ADDED", slice_web), ("DELETED", slice_web), ("DELETED", svc_db_changed),
                 ("DELETED", ns_prod)))
    write(d, "bookmark",
          json.dumps({"type": "BOOKMARK", "object": {
              "kind": "Service", "apiVersion": "v1",
              "metadata": {"resourceVersion": "12345",
                           "annotations": {"k8s.io/initial-events-end": "true"}}}}) + "\n")
    write(d, "error-gone",
          json.dumps({"type": "ERROR", "object": fakeapi.status(
              410, "too old resource version: 1 (200)", "Expired")}) + "\n")
    write(d, "everything",
          stream(("ADDED", ns_prod), ("ADDED", ns_team), ("ADDED", svc_db),
                 ("ADDED", svc_headless), ("ADDED", svc_ext), ("ADDED", slice_web),
                 ("ADDED", slice_v6), ("ADDED", pod), ("ADDED", pod_done)))
    write(d, "list-namespaces", list_page("Namespace", [ns_prod, ns_team]))
    write(d, "list-services", list_page("Service", [svc_db, svc_headless, svc_ext],
                                        cont="eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MzAwfQ"))
    write(d, "list-endpointslices", list_page("EndpointSlice", [slice_web, slice_v6]))
    write(d, "list-pods", list_page("Pod", [pod, pod_done]))
    write(d, "list-empty", list_page("Service", []))
    print("cluster: %d LIST pages and watch streams" % len(os.listdir(d)))


def mesh_seeds():
    d = fresh_dir("mesh")
    se = fakeapi.service_entry
    static = se("prod", "api", ["api.example.com", "*.wild.example.com"],
                addresses=["192.0.2.1", "192.0.2.2/32", "198.51.100.0/24", "2001:db8::1"],
                resolution="STATIC", export_to=["."])
    allocated = se("prod", "ext", ["ext.example.org"], resolution="DNS",
                   allocated={"ext.example.org": ["240.240.0.1", "2001:2::1"]})
    opted_out = se("team", "out", ["ext.example.org"], resolution="DNS",
                   labels={"networking.istio.io/enable-autoallocate-ip": "false"},
                   export_to=["prod", "~"])
    headless = se("prod", "db", ["db.vms.internal"], workload_selector={"app": "pg"})
    endpoints = se("team", "legacy", ["legacy.corp.example"],
                   endpoints=["10.9.0.1", "vm.corp.example", "fd00::9"])
    we = fakeapi.workload_entry("prod", "vm-1", "10.20.0.1", labels={"app": "pg"},
                                health_checks=True)
    changed = json.loads(json.dumps(static))
    changed["spec"]["hosts"] = ["api.example.com", "api2.example.com"]
    write(d, "entries", stream(("ADDED", static), ("ADDED", allocated), ("ADDED", opted_out),
                               ("ADDED", headless), ("ADDED", endpoints)))
    write(d, "modified-then-deleted",
          stream(("ADDED", static), ("MODIFIED", changed), ("DELETED", changed),
                 ("ADDED", headless), ("DELETED", headless)))
    write(d, "list-entries", list_page("ServiceEntry", [static, allocated, headless]))
    write(d, "workloads", stream(("ADDED", we), ("DELETED", we)))
    write(d, "list-workloads", list_page("WorkloadEntry", [we]))
    print("mesh: %d LIST pages and watch streams" % len(os.listdir(d)))


# ---------------------------------------------------------------- config

def configmap_config():
    """config.yaml from the ConfigMap in the generated manifests."""
    with open(os.path.join(ROOT, "deploy", "kubernetes", "localdns.yaml")) as f:
        text = f.read()
    m = re.search(r"^  config\.yaml: \|\n((?:    .*\n|\n)+)", text, re.M)
    if not m:
        raise SystemExit("no config.yaml in deploy/kubernetes/localdns.yaml")
    return "".join(line[4:] + "\n" for line in m.group(1).split("\n")).rstrip() + "\n"


def config_seeds():
    d = fresh_dir("config")
    for src, name in (("deploy/examples/local.yaml", "examples-local"),
                      ("deploy/vm/config.yaml", "vm"),
                      ("deploy/examples/records.yaml", "records-file-as-config")):
        with open(os.path.join(ROOT, src)) as f:
            write(d, name, f.read())
    write(d, "chart-configmap", configmap_config())
    write(d, "integration-standard", harness.to_yaml(harness.base_config(5353)) + "\n")
    # fuzz_config.c writes extra-records.yaml and records.yaml next to the config
    write(d, "static-files",
          "static:\n  files: [extra-records.yaml, records.yaml]\n")
    print("config: %d files" % len(os.listdir(d)))


def captured_request(argv_for_url):
    """The bytes a client tool sends for one request, up to the end of its
    headers (and the body its Content-Length announces), caught on a
    loopback socket that then closes."""
    import subprocess
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        url = "http://127.0.0.1:%d" % srv.getsockname()[1]
        tool = subprocess.Popen(argv_for_url(url), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        conn, _ = srv.accept()
        data = b""
        with conn:
            conn.settimeout(5)
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            m = re.search(rb"(?im)^content-length: *(\d+)", head)
            while m and len(body) < int(m.group(1)):
                body += conn.recv(65536)
        tool.kill()
        tool.wait()
        return head + b"\r\n\r\n" + body


def http_seeds():
    d = fresh_dir("http")
    tools = {
        "curl-metrics": lambda u: ["curl", "-s", u + "/metrics"],
        "curl-head-health": lambda u: ["curl", "-sI", u + "/health"],
        "curl-post-ready": lambda u: ["curl", "-s", "-d", "probe=1", u + "/ready"],
        "wget-health": lambda u: ["wget", "-q", "-O-", u + "/health"],
    }
    for name, argv in tools.items():
        write(d, name, captured_request(argv))
    # The kubelet's httpGet probe (pkg/probe/http: Go's net/http, keep-alive
    # off) and Prometheus's scrape (scrape/scrape.go), as they write them.
    write(d, "kubelet-probe",
          b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: kube-probe/1.29\r\n"
          b"Accept: */*\r\nConnection: close\r\nAccept-Encoding: gzip\r\n\r\n")
    write(d, "prometheus-scrape",
          b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.7:9253\r\nUser-Agent: Prometheus/2.42.0\r\n"
          b"Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
          b"version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
          b"Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n")
    # a kept-alive connection: a scrape, then a probe on the same connection
    with open(os.path.join(d, "prometheus-scrape"), "rb") as a, \
            open(os.path.join(d, "kubelet-probe"), "rb") as b:
        write(d, "pipelined-scrape-then-probe", a.read() + b.read())
    print("http: %d files" % len(os.listdir(d)))


def kubeconfig_seeds():
    import tempfile
    import types
    d = fresh_dir("kubeconfig")
    api = types.SimpleNamespace(url="https://10.0.0.1:6443")
    variants = {
        "token": {"token": "abc.def"},
        "token-file": {"token_file": "/var/run/secrets/token"},
        "ca-and-token": {"ca": "ca.crt", "token": "abc.def"},
        "client-cert-files": {"client_cert": "client.crt", "client_key": "client.key"},
        "insecure-client-cert": {"insecure": True, "client_cert": "/etc/k/c.crt",
                                 "client_key": "/etc/k/c.key"},
        "anonymous": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for f in ("ca.crt", "client.crt", "client.key"):
            with open(os.path.join(tmp, f), "w") as out:
                out.write("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
        variants["embedded"] = {"ca": os.path.join(tmp, "ca.crt"),
                                "client_cert": os.path.join(tmp, "client.crt"),
                                "client_key": os.path.join(tmp, "client.key"), "embed": True}
        for name, kw in variants.items():
            path = os.path.join(tmp, name)
            fakeapi.FakeAPI.kubeconfig(api, path, **kw)
            with open(path) as f:
                write(d, name, f.read())
    # kind's shape: several clusters, users and contexts, the current one last
    write(d, "kind-several-contexts", """apiVersion: v1
kind: Config
preferences: {}
current-context: kind-b
clusters:
- cluster:
    certificate-authority-data: QUJD
    server: https://127.0.0.1:37001
  name: kind-a
- cluster:
    certificate-authority-data: REVG
    server: https://[::1]:37002/prefix/
  name: kind-b
contexts:
- context: {cluster: kind-a, user: kind-a}
  name: kind-a
- context: {cluster: kind-b, user: kind-b, namespace: dns}
  name: kind-b
users:
- name: kind-a
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
- name: kind-b
  user: {token: kind-b-token}
""")
    print("kubeconfig: %d files" % len(os.listdir(d)))


def control_seeds():
    d = fresh_dir("control")
    requests = ["stats", "stats --json", "lookup db.prod.svc.cluster.local",
                "lookup n3.prod.svc.cluster.local AAAA", "lookup --json www.example.com MX",
                "flush", "flush www.example.com", "dump-cache", "dump-cache --json",
                "dump-cache --records", "reload", "top clients", "top names --since 5m -n 20",
                "top --json nxdomain", "top servfail -n 100", "node", "help"]
    for r in requests:
        write(d, re.sub(r"[^a-z0-9]+", "-", r).strip("-"), r + "\n")
    print("control: %d files" % len(os.listdir(d)))


def main():
    makers = {"cache": cache_seeds, "handle": handle_seeds, "cluster": cluster_seeds,
              "mesh": mesh_seeds, "config": config_seeds, "http": http_seeds,
              "kubeconfig": kubeconfig_seeds, "control": control_seeds}
    for name in sys.argv[1:] or makers:
        if name not in makers:
            raise SystemExit("usage: make_seeds.py [%s]..." % "|".join(makers))
        makers[name]()
    harness.cleanup_all()


if __name__ == "__main__":
    main()
