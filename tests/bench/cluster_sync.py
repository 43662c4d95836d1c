#!/usr/bin/env python3
"""cluster_sync.py BINARY — time to the first complete sync and RSS for a
big cluster: 10,000 Services (ClusterIP, 2 named ports each) and 100,000
endpoints (1,000 headless Services with one EndpointSlice of 100 endpoints),
served by the fake API server (tests/kube/fakeapi.py) in this process.

Measured from the daemon's start to the first answer for the last Service
listed (before the sync it gets SERVFAIL), then RSS. Then the time from a
watch event (one new Service) to its name being served, 20 times. The
report replaces the cluster-sync block of docs/performance.md.
"""

import os
import re
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "kube"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import dnsmsg  # noqa: E402
import fakeapi as F  # noqa: E402

SERVICES = 10000
HEADLESS = 1000
PER_SLICE = 100


def objects():
    out = [F.namespace("ns%d" % i) for i in range(10)]
    for i in range(SERVICES):
        out.append(F.service("ns%d" % (i % 10), "svc%d" % i,
                             cluster_ips=["10.%d.%d.%d" % (96 + i // 65536, i // 256 % 256, i % 256)],
                             ports=[F.service_port(80, name="http"),
                                    F.service_port(443, name="https")]))
    for i in range(HEADLESS):
        ns = "ns%d" % (i % 10)
        out.append(F.service(ns, "hl%d" % i, headless=True,
                             ports=[F.service_port(80, name="http")]))
        eps = ["10.%d.%d.%d" % (128 + i // 256, i % 256, j + 1) for j in range(PER_SLICE)]
        out.append(F.endpointslice(ns, "hl%d" % i, name="hl%d-x" % i, endpoints=eps,
                                   ports=[F.endpoint_port(8080, name="http")]))
    return out


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def answers(port, name):
    try:
        return dnsmsg.udp_query("127.0.0.1", port, name, "A", timeout=0.5).rcode_name == "NOERROR"
    except OSError:
        return False


def wait_for(port, name, timeout):
    deadline = time.monotonic() + timeout
    while not answers(port, name):
        if time.monotonic() > deadline:
            raise SystemExit("no answer for %s within %ds" % (name, timeout))
        time.sleep(0.002)
    return time.monotonic()


def write_doc(text):
    path = os.path.join(REPO, "docs", "performance.md")
    with open(path) as f:
        doc = f.read()
    begin, end = "<!-- cluster-sync:begin -->", "<!-- cluster-sync:end -->"
    block = "%s\n%s\n%s" % (begin, text, end)
    if begin in doc:
        doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, doc, flags=re.S)
    else:
        doc += "\n## Cluster names: first sync at scale\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(doc)


def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="localdns-bench-")
    with F.FakeAPI(bookmark_interval=5) as api:
        t0 = time.monotonic()
        api.apply(objects())
        load_s = time.monotonic() - t0
        kc = api.kubeconfig(os.path.join(tmp, "kubeconfig"))
        port = 20000 + os.getpid() % 20000
        cfg = os.path.join(tmp, "localdns.yaml")
        with open(cfg, "w") as f:
            f.write("listen: {addresses: [127.0.0.1], port: %d}\n"
                    "interface: {manage: false}\nnftables: {enabled: false}\n"
                    "health: {listen: \"\"}\nmetrics: {listen: \"\"}\n"
                    "kubernetes: {enabled: true, kubeconfig: %s, node_name: bench}\n"
                    "upstream: {servers: [\"127.0.0.1:9\"]}\nlog: {level: warn}\n" % (port, kc))
        start = time.monotonic()
        proc = subprocess.Popen([binary, "--config", cfg])
        try:
            last = "hl%d.ns%d.svc.cluster.local" % (HEADLESS - 1, (HEADLESS - 1) % 10)
            synced = wait_for(port, last, 60) - start
            rss = rss_kib(proc.pid)
            lat = []
            for i in range(20):
                t = time.monotonic()
                api.apply(F.service("ns0", "new%d" % i, cluster_ips=["10.200.0.%d" % (i + 1)]))
                lat.append(wait_for(port, "new%d.ns0.svc.cluster.local" % i, 10) - t)
            lat.sort()
        finally:
            proc.terminate()
            proc.wait(10)
    text = ("%d Services (%d ClusterIP with 2 named ports, %d headless) and %d endpoints "
            "in %d EndpointSlices, listed in pages of 500 from the fake API server on "
            "this machine (2 cores):\n\n"
            "| measure | result | target |\n|---|---|---|\n"
            "| start to first complete sync (last name answered) | %.2f s | < 2 s |\n"
            "| RSS after the sync | %.1f MiB | < 200 MiB |\n"
            "| watch event to name served (p50 / max of 20) | %.1f / %.1f ms | < 100 ms |\n\n"
            "(The fake server took %.1f s to load the objects; that is not counted.)"
            % (SERVICES + HEADLESS, SERVICES, HEADLESS, HEADLESS * PER_SLICE, HEADLESS,
               synced, rss / 1024, lat[len(lat) // 2] * 1000, lat[-1] * 1000, load_s))
    print(text)
    write_doc(text)


if __name__ == "__main__":
    main()
