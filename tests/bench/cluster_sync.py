#!/usr/bin/env python3
"""cluster_sync.py BINARY [--doc] [--only SCENARIO,...] — cluster data at
scale: the first sync, memory, and how fast watch events are served, against
the fake API server (tests/kube/fakeapi.py) running in this process.

Scenarios (issue 17's targets; docs/performance.md, "Cluster names"):
  10k     10,000 Services (9,000 ClusterIP with 2 named ports, 1,000 headless
          with one) with one EndpointSlice of 10 endpoints each: 100,000
          endpoints. Start to first complete sync, RSS after it, whether the
          node answers during it, then watch event -> name served for 100
          new Services.
  churn   (on the 10k table) a headless Service of 10,000 endpoints in 100
          slices; one of its slices is rewritten (new addresses) every 100 ms
          while 100 new Services are timed; then 50 of the slice rewrites
          themselves, each with one endpoint at an address never used, until
          that endpoint's name answers.
  ports   (on the 10k table) a Service with 1,000 named ports; 100 changes
          of one port's number, each until its _<port>._tcp SRV shows it
          (100, so that the p99 is not simply the slowest sample).
          With --only ports: the 10k table and this part alone (no --doc),
          to run it again on a noisy machine.
  50k     50,000 Services / 500,000 endpoints, the same shape: first sync,
          RSS, answers during it, 20 new Services.

"Watch event to name served": from the moment the fake server begins writing
the event to the daemon's watch stream (FakeAPI.written_at: encoded, and
gzipped as the daemon's WatchList stream asks) to the first reply that shows
the change. The object is built before, and what the fake server's Python
does before the write (storing, encoding, compressing) is not counted, nor
is its garbage collector, which is off while a sample runs: none of it is
the daemon's. Counted: the transfer, the daemon reading, inflating and
decoding the event, its table's change, and the polling: one UDP question
every POLL seconds on one socket, so a sample is late by up to POLL plus a
question's round trip and the Python that parses the reply (about 0.4 ms).

"Answers during the sync": dnsgen (build/bench/dnsgen) asks for a static
name and a cluster name at 400 QPS in 1-second windows from the moment the
daemon answers (its static name) until the sync; every query must get a
reply (the cluster name SERVFAIL until the sync, as it should) and the
static name must be NOERROR. Beside the sync time: the daemon's CPU time
until then, and how long the fake server alone takes to send the same
WatchLists, which no client of it can beat.

Timing on this shared 2-core machine is noisy (the fake server's Python
shares the cores); RSS is the stable figure. With --doc the report replaces
the cluster-sync block of docs/performance.md.
"""

import argparse
import gc
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "kube"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import dnsmsg  # noqa: E402
import fakeapi as F  # noqa: E402
from benchlib import proc_status, write_doc_block  # noqa: E402

NAMESPACES = 10
PER_SERVICE = 10           # endpoints in each Service's one slice
PROBE = "probe.bench.example"
TIMEOUT = 10               # seconds a sample may wait for its answer
POLL = 0.0002              # seconds between two questions while a sample waits


def service_ip(i):
    return "10.%d.%d.%d" % (96 + i // 65536, i // 256 % 256, i % 256)


def endpoint_ips(i, n, base=128):
    """n endpoint addresses of Service i, distinct across Services."""
    out = []
    for idx in range(i * n, i * n + n):
        out.append("%d.%d.%d.%d" % (base + idx // 16384000, idx // 64000 % 256,
                                    idx // 250 % 256, idx % 250 + 1))
    return out


def objects(services):
    """Namespaces, Services and their slices: a tenth headless."""
    out = [F.namespace("ns%d" % i) for i in range(NAMESPACES)]
    headless = services // 10
    for i in range(services):
        ns = "ns%d" % (i % NAMESPACES)
        if i < services - headless:
            name = "svc%d" % i
            out.append(F.service(ns, name, cluster_ips=[service_ip(i)],
                                 ports=[F.service_port(80, name="http"),
                                        F.service_port(443, name="https")]))
            ports = [F.endpoint_port(8080, name="http"), F.endpoint_port(8443, name="https")]
        else:
            name = "hl%d" % i
            out.append(F.service(ns, name, headless=True,
                                 ports=[F.service_port(80, name="http")]))
            ports = [F.endpoint_port(8080, name="http")]
        eps = [F.endpoint(ip, pod="%s-%d" % (name, j))
               for j, ip in enumerate(endpoint_ips(i, PER_SERVICE))]
        out.append(F.endpointslice(ns, name, name="%s-x" % name, endpoints=eps, ports=ports))
    return out


def last_name(services):
    return "hl%d.ns%d.svc.cluster.local" % (services - 1, (services - 1) % NAMESPACES)


def cpu_seconds(pid):
    """User and system CPU time the process has used."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def answers(port, name, qt="A", want=None, timeout=0.5):
    try:
        m = dnsmsg.udp_query("127.0.0.1", port, name, qt, timeout=timeout)
    except (OSError, AssertionError):  # AssertionError: no reply
        return False
    if m.rcode_name != "NOERROR":
        return False
    return want is None or want(m)


def wait_for(port, name, timeout, qt="A", want=None, query_timeout=0.5):
    """When name answers (monotonic time); None after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not answers(port, name, qt, want, query_timeout):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.001)
    return time.monotonic()


def must_answer(port, name, timeout, qt="A", query_timeout=0.5):
    t = wait_for(port, name, timeout, qt, query_timeout=query_timeout)
    if t is None:
        raise SystemExit("no answer for %s within %ds" % (name, timeout))
    return t


class Asker:
    """One question asked again and again on one UDP socket, built once:
    cheap enough to ask every POLL seconds."""

    def __init__(self, port, name, qt="A", want=None):
        self.name = name
        self.want = want
        self.query = dnsmsg.build_query(name, qt)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(0.5)

    def shows(self):
        """When (monotonic) a reply showing what we wait for (NOERROR, and
        want) came; None when this one does not."""
        try:
            self.sock.send(self.query)
            data = self.sock.recv(65535)
        except OSError:
            return None
        t = time.monotonic()
        m = dnsmsg.parse(data)
        return t if m.rcode_name == "NOERROR" and (self.want is None or self.want(m)) else None

    def close(self):
        self.sock.close()


def event_to_served(api, port, obj, name, qt="A", want=None):
    """One sample: apply obj (built by the caller) and ask name until the
    reply shows the change. Seconds from when the fake server began writing
    the event to the daemon's watch to that reply (see the module's doc),
    or None after TIMEOUT."""
    asker = Asker(port, name, qt, want)
    try:
        if asker.shows() is not None:
            raise SystemExit("%s shows the change before it is made" % name)
        gc.disable()
        try:
            rv = api.apply(obj)
            deadline = time.monotonic() + TIMEOUT
            while (seen := asker.shows()) is None:
                if time.monotonic() > deadline:
                    return None
                time.sleep(POLL)
        finally:
            gc.enable()
    finally:
        asker.close()
    written = api.written_at(rv)
    if written is None or written > seen:
        raise SystemExit("%s served, but its event (RV %d) was not written before" % (name, rv))
    return seen - written


def latencies_text(lat):
    """p50 / p99 / max of the samples; a timeout is longer than any answer."""
    v = sorted(lat, key=lambda x: float("inf") if x is None else x)

    def at(p):
        x = v[min(len(v) - 1, int(round(p * (len(v) - 1))))]
        return "> %d s" % TIMEOUT if x is None else "%.1f ms" % (x * 1000)

    return "%s / %s / %s" % (at(0.5), at(0.99), at(1))


def too_slow(lat):
    """Three samples not served within TIMEOUT: the rest would not be either."""
    return lat.count(None) >= 3


class Prober(threading.Thread):
    """dnsgen in 1-second windows until stopped: does the node answer?"""

    def __init__(self, dnsgen, port, cluster_name, tmp):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.cmd = None
        if dnsgen:
            qfile = os.path.join(tmp, "probe.txt")
            with open(qfile, "w") as f:
                f.write("%s A\n%s A\n" % (PROBE, cluster_name))
            self.cmd = [dnsgen, "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-l", "1",
                        "-Q", "400", "-t", "1", "-c", "2"]
        self.sent = self.received = self.lost = self.noerror = self.servfail = 0
        self.p99_us = self.max_us = 0.0

    def run(self):
        while self.cmd and not self.stop.is_set():
            out = subprocess.run(self.cmd, capture_output=True, text=True).stdout
            kv = dict(item.split("=", 1) for item in out.split())
            if "sent" not in kv:
                continue
            self.sent += int(kv["sent"])
            self.received += int(kv["received"])
            self.lost += int(kv["lost"])
            self.noerror += int(kv["noerror"])
            self.servfail += int(kv["servfail"])
            self.p99_us = max(self.p99_us, float(kv["p99_us"]))
            self.max_us = max(self.max_us, float(kv["max_us"]))

    def text(self):
        if not self.cmd:
            return "not measured (no dnsgen: make build/bench/dnsgen)"
        return ("%d of %d answered (%d lost; %d NOERROR, %d SERVFAIL), p99 of the worst "
                "second %.1f ms, max %.1f ms" % (self.received, self.sent, self.lost,
                                                  self.noerror, self.servfail,
                                                  self.p99_us / 1000, self.max_us / 1000))


class Daemon:
    def __init__(self, binary, api, tmp):
        self.port = 20000 + os.getpid() % 20000
        kc = api.kubeconfig(os.path.join(tmp, "kubeconfig"))
        self.cfg = os.path.join(tmp, "localdns.yaml")
        with open(self.cfg, "w") as f:
            f.write("listen: {addresses: [127.0.0.1], port: %d}\n"
                    "interface: {manage: false}\nnftables: {enabled: false}\n"
                    "health: {listen: \"\"}\nmetrics: {listen: \"\"}\n"
                    "control: {socket: \"\"}\n"
                    "kubernetes: {enabled: true, kubeconfig: %s, node_name: bench}\n"
                    "static: {records: [{name: %s, a: [192.0.2.1]}]}\n"
                    "upstream: {servers: [\"127.0.0.1:9\"]}\nlog: {level: warn}\n"
                    % (self.port, kc, PROBE))
        self.binary = binary
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([self.binary, "--config", self.cfg])
        return time.monotonic()

    def rss_mib(self):
        return (proc_status(self.proc.pid, "VmRSS") / 1024,
                proc_status(self.proc.pid, "RssAnon") / 1024)

    def stop(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                print("the daemon did not stop within 10 s of SIGTERM: killed", flush=True)
                self.proc.kill()
                self.proc.wait()


WATCH_LISTS = ("/api/v1/namespaces", "/api/v1/services",
               "/apis/discovery.k8s.io/v1/endpointslices")
WATCH_LIST_QUERY = ("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                    "&allowWatchBookmarks=true&resourceVersion=0")


def server_floor(api):
    """Seconds the fake server takes to send what the daemon's first sync
    reads (the same WatchLists, at once, gzip asked) to curl processes that
    only read it: no client of this server syncs faster."""
    t0 = time.time()
    curls = [subprocess.Popen(["curl", "-sS", "-o", "/dev/null", "-H", "Accept-Encoding: gzip",
                               "%s%s?%s" % (api.url, path, WATCH_LIST_QUERY)])
             for path in WATCH_LISTS]
    try:
        deadline = time.monotonic() + 300
        while True:
            sent = [r.initial_sent for r in api.requests(verb="watch") if r.time >= t0]
            if len(sent) == len(WATCH_LISTS) and all(sent):
                return max(sent) - t0
            if time.monotonic() > deadline:
                raise SystemExit("the fake server did not send the WatchLists within 300 s")
            time.sleep(0.01)
    finally:
        for c in curls:
            c.terminate()
            c.wait()


def first_sync(binary, api, services, tmp, dnsgen):
    """Start the daemon, wait for the sync with the prober running."""
    d = Daemon(binary, api, tmp)
    name = last_name(services)
    start = d.start()
    probe = Prober(dnsgen, d.port, name, tmp)
    try:
        # Listening: from now on every query must be answered. Until then
        # a query is lost, so wait for each only briefly.
        must_answer(d.port, PROBE, 30, query_timeout=0.02)
        probe.start()
        synced = must_answer(d.port, name, 300) - start
        cpu = cpu_seconds(d.proc.pid)
    except BaseException:
        d.stop()
        raise
    finally:
        probe.stop.set()
        if probe.is_alive():
            probe.join()
    rss, anon = d.rss_mib()
    return d, {"sync": synced, "cpu": cpu, "rss": rss, "anon": anon, "probe": probe.text()}


def new_services(api, port, count, prefix):
    lat = []
    for i in range(count):
        if too_slow(lat):
            break
        svc = F.service("ns0", "%s%d" % (prefix, i),
                        cluster_ips=["10.200.%d.%d" % (i // 250, i % 250 + 1)])
        lat.append(event_to_served(api, port, svc, "%s%d.ns0.svc.cluster.local" % (prefix, i)))
    return lat


BIG = 10000          # endpoints of the churning Service
BIG_SLICE = 100


def big_slice(k, generation):
    """Slice k of the churning Service, its addresses moved by generation."""
    base = (k * BIG_SLICE + generation * 7) % 60000
    eps = [F.endpoint("172.16.%d.%d" % ((base + j) // 250, (base + j) % 250 + 1))
           for j in range(BIG_SLICE)]
    return F.endpointslice("ns0", "big", name="big-%d" % k, endpoints=eps,
                           ports=[F.endpoint_port(8080, name="http")])


def dashed(ip):
    return ip.replace(".", "-")


def churn(api, port):
    api.apply(F.service("ns0", "big", headless=True, ports=[F.service_port(80, name="http")]))
    api.apply(*[big_slice(k, 0) for k in range(BIG // BIG_SLICE)])
    must_answer(port, "big.ns0.svc.cluster.local", 60)
    stop = threading.Event()
    generation = [1]

    def loop():
        while not stop.wait(0.1):
            k = generation[0] % (BIG // BIG_SLICE)
            api.apply(big_slice(k, generation[0]))
            generation[0] += 1

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        during = new_services(api, port, 100, "churn")
    finally:
        stop.set()
        t.join()
    own = []
    for n in range(50):
        if too_slow(own):
            break
        g = generation[0]
        k = g % (BIG // BIG_SLICE)
        s = big_slice(k, g)
        generation[0] += 1
        # Its last endpoint at an address no slice has had: the slices'
        # moving addresses overlap, so most of a rewrite's names are
        # already served by another slice.
        fresh = "172.31.%d.%d" % (n // 250, n % 250 + 1)
        s["endpoints"][-1]["addresses"] = [fresh]
        own.append(event_to_served(api, port, s, "%s.big.ns0.svc.cluster.local" % dashed(fresh)))
        time.sleep(0.1)
    return during, own


def ports_service(numbers):
    return F.service("ns0", "ports1k", cluster_ips=["10.201.0.1"],
                     ports=[F.service_port(n, name="p%d" % i) for i, n in enumerate(numbers)])


def many_ports(api, port):
    numbers = [10000 + i for i in range(1000)]
    api.apply(ports_service(numbers))
    must_answer(port, "_p999._tcp.ports1k.ns0.svc.cluster.local", 60, "SRV")
    lat = []
    for n in range(100):
        if too_slow(lat):
            break
        i = (n * 37) % 1000
        numbers[i] = 30000 + n
        want = numbers[i]
        lat.append(event_to_served(
            api, port, ports_service(numbers), "_p%d._tcp.ports1k.ns0.svc.cluster.local" % i,
            "SRV", lambda m: any(rr["rdata"]["port"] == want for rr in m.answer)))
    return lat


def scale_run(binary, services, tmp, dnsgen, parts):
    """One scale: the first sync, new Services, then parts ("ports",
    "churn") on that table."""
    with F.FakeAPI(bookmark_interval=5) as api:
        t0 = time.monotonic()
        api.apply(*objects(services))
        load = time.monotonic() - t0
        floor = server_floor(api)
        d, r = first_sync(binary, api, services, tmp, dnsgen)
        r["load"] = load
        r["floor"] = floor
        print("%d Services: synced in %.2f s (daemon CPU %.2f s), RSS %.1f MiB (anonymous %.1f); "
              "during the sync %s" % (services, r["sync"], r["cpu"], r["rss"], r["anon"],
                                      r["probe"]), flush=True)
        try:
            r["new"] = new_services(api, d.port, 100 if parts else 20, "new")
            print("new Services:", latencies_text(r["new"]), flush=True)
            if "ports" in parts:
                r["ports"] = many_ports(api, d.port)
                print("1,000 ports:", latencies_text(r["ports"]), flush=True)
            if "churn" in parts:
                r["churn_new"], r["churn_own"] = churn(api, d.port)
                print("churn: new Services %s, its own slices %s"
                      % (latencies_text(r["churn_new"]), latencies_text(r["churn_own"])),
                      flush=True)
            if parts:
                r["rss_end"], r["anon_end"] = d.rss_mib()
        finally:
            d.stop()
    return r


def report(results):
    lines = []
    targets = {10000: ("< 1 s", "<= 30 MiB"), 50000: ("< 5 s", "< 120 MiB")}
    for services, r in sorted(results.items()):
        t_sync, t_rss = targets.get(services, ("", ""))
        lines.append("%d Services (%d ClusterIP with 2 named ports, %d headless), each with one "
                     "EndpointSlice of %d endpoints (%d endpoints), %d namespaces; the fake "
                     "server took %.0f s to load them (not counted)."
                     % (services, services - services // 10, services // 10, PER_SERVICE,
                        services * PER_SERVICE, NAMESPACES, r["load"]))
        lines.append("")
        lines.append("| measure | result | target |")
        lines.append("|---|---|---|")
        lines.append("| start to first complete sync (last name answered) | %.2f s | %s |"
                     % (r["sync"], t_sync))
        lines.append("| the daemon's CPU time until then (user + system) | %.2f s | |" % r["cpu"])
        lines.append("| the fake server alone sending the same WatchLists (to curl, not parsed) | "
                     "%.2f s | |" % r["floor"])
        lines.append("| RSS after the sync (of it anonymous) | %.1f MiB (%.1f) | %s |"
                     % (r["rss"], r["anon"], t_rss))
        lines.append("| answers during the sync (static and cluster name, 400 QPS) | %s | all |"
                     % r["probe"])
        lines.append("| watch event to name served, new Services (p50 / p99 / max of %d) | %s "
                     "| p99 < 10 ms |" % (len(r["new"]), latencies_text(r["new"])))
        if "churn_new" in r:
            lines.append("| the same while a 10,000-endpoint Service's slices change every "
                         "100 ms (of %d) | %s | p99 < 10 ms |"
                         % (len(r["churn_new"]), latencies_text(r["churn_new"])))
            lines.append("| that Service's slice rewrites, to the new endpoint's name served "
                         "(of %d) | %s | p99 < 10 ms |"
                         % (len(r["churn_own"]), latencies_text(r["churn_own"])))
        if "ports" in r:
            lines.append("| a port change of a Service with 1,000 named ports, to its SRV "
                         "served (of %d) | %s | p99 < 10 ms |"
                         % (len(r["ports"]), latencies_text(r["ports"])))
        if "rss_end" in r:
            lines.append("| RSS at the end (of it anonymous) | %.1f MiB (%.1f) | |"
                         % (r["rss_end"], r["anon_end"]))
        lines.append("")
    return "\n".join(lines).rstrip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--doc", action="store_true", help="rewrite docs/performance.md's block")
    ap.add_argument("--only", default="10k,50k",
                    help="10k (with churn and ports), 50k, ports (the 10k table, ports alone)")
    args = ap.parse_args()
    scenarios = args.only.split(",")
    if args.doc and "ports" in scenarios:
        ap.error("--only ports is a partial run: not for --doc")
    dnsgen = os.path.join(REPO, "build", "bench", "dnsgen")
    dnsgen = dnsgen if os.access(dnsgen, os.X_OK) else None
    tmp = tempfile.mkdtemp(prefix="localdns-bench-")
    results = {}
    parts = {"10k": ("ports", "churn"), "ports": ("ports",), "50k": ()}
    for scenario in scenarios:
        services = 50000 if scenario == "50k" else 10000
        results[services] = scale_run(args.binary, services, tmp, dnsgen, parts[scenario])
        print(report({services: results[services]}), flush=True)
    if args.doc:
        write_doc_block("<!-- cluster-sync:begin -->", "<!-- cluster-sync:end -->",
                        report(results), heading="Cluster names: first sync at scale")


if __name__ == "__main__":
    main()
