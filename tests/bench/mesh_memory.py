#!/usr/bin/env python3
"""mesh_memory.py BINARY [--doc] [--entries N] [--rounds R] — what Istio's
ServiceEntries cost a node (issue 25's target: 10,000 entries with two hosts
each add at most 8 MiB), against the fake API server (tests/kube/fakeapi.py)
running in this process.

Two daemons with the same config (mesh.istio on, the Istio CRDs installed,
a small cluster: 10 namespaces), started one after the other:

  without   no ServiceEntry at all;
  with      N ServiceEntries (default 10,000), each with two hosts
            (svc-<i>-a.mesh-<ns>.example and svc-<i>-b...), resolution DNS,
            one port, and istiod's allocation in status.addresses: an IPv4
            address (240.240/16) and an IPv6 one (2001:2::/48) per host, as
            Istio's allocator writes them; spread over the 10 namespaces.

Each is measured once its first sync is in (the last entry's second host
answers, and the cluster zone does) and two seconds have passed: VmRSS and
RssAnon from /proc. The entries' cost is the difference, of the daemon's
whole RSS (the decoder's arenas, the client's keys, the host table and
entries, malloc's slack: all of it). R rounds (default 3) of the pair; the
report gives each and the largest difference. The fake server's memory is
its own (a separate process would change nothing: it is not the daemon's).

Run it on a quiet machine: RSS does not depend on load, but the sync's time
(also reported) does. With --doc the report replaces the mesh-memory block
of docs/performance.md.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "kube"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import dnsmsg  # noqa: E402
import fakeapi as F  # noqa: E402
from benchlib import proc_status, write_doc_block  # noqa: E402

NAMESPACES = 10
TARGET_MIB = 8.0


def entry(i):
    ns = "mesh-%d" % (i % NAMESPACES)
    hosts = ["svc-%d-a.%s.example" % (i, ns), "svc-%d-b.%s.example" % (i, ns)]
    allocated = {h: ["240.240.%d.%d" % ((2 * i + k) // 256 % 256, (2 * i + k) % 256),
                     "2001:2::%x" % (2 * i + k + 1)]
                 for k, h in enumerate(hosts)}
    return F.service_entry(ns, "svc-%d" % i, hosts, resolution="DNS",
                           ports=[{"number": 443, "name": "https", "protocol": "TLS"}],
                           allocated=allocated)


def last_host(n):
    return "svc-%d-b.mesh-%d.example" % (n - 1, (n - 1) % NAMESPACES)


def answers(port, name, qt="A"):
    try:
        m = dnsmsg.udp_query("127.0.0.1", port, name, qt, timeout=0.5)
    except (socket.timeout, OSError):
        return False
    return m is not None and m.rcode_name == "NOERROR" and bool(m.answer)


def measure(binary, api, tmp, port, name):
    """Start a daemon, wait until name answers, settle; RSS and anon MiB, sync s."""
    kc = api.kubeconfig(os.path.join(tmp, "kubeconfig"))
    cfg = os.path.join(tmp, "localdns.yaml")
    with open(cfg, "w") as f:
        f.write("listen: {addresses: [127.0.0.1], port: %d}\n"
                "interface: {manage: false}\nnftables: {enabled: false}\n"
                "health: {listen: \"\"}\nmetrics: {listen: \"\"}\n"
                "control: {socket: \"\"}\n"
                "kubernetes: {enabled: true, kubeconfig: %s, node_name: bench}\n"
                "mesh: {istio: true}\n"
                "upstream: {servers: [\"127.0.0.1:9\"]}\nlog: {level: warn}\n" % (port, kc))
    proc = subprocess.Popen([binary, "--config", cfg])
    start = time.monotonic()
    try:
        deadline = start + 300
        while not (answers(port, "dns-version.cluster.local", "TXT") and
                   (name is None or answers(port, name))):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("no sync within 300 s (daemon %s)" %
                                 ("running" if proc.poll() is None else "exited"))
            time.sleep(0.05)
        synced = time.monotonic() - start
        time.sleep(2)
        return (proc_status(proc.pid, "VmRSS") / 1024, proc_status(proc.pid, "RssAnon") / 1024,
                synced)
    finally:
        proc.terminate()
        proc.wait(10)


def report(n, rounds, load):
    worst = max(w[0] - wo[0] for wo, w in rounds)
    lines = [
        "Measured by `tests/bench/mesh_memory.py` (load average %s when it started): %d "
        "ServiceEntries with two hosts each (resolution DNS, istiod's IPv4 and IPv6 "
        "allocation per host in `status.addresses`), in %d namespaces, against a daemon "
        "without any; RSS two seconds after the first sync." % (load, n, NAMESPACES),
        "",
        "| round | RSS without (anon) | RSS with (anon) | added | sync with |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, (wo, w) in enumerate(rounds, 1):
        lines.append("| %d | %.1f MiB (%.1f) | %.1f MiB (%.1f) | %.1f MiB | %.1f s |"
                     % (i, wo[0], wo[1], w[0], w[1], w[0] - wo[0], w[2]))
    lines += ["", "The most added: %.1f MiB, %d bytes a ServiceEntry (target: at most %.0f MiB)."
              % (worst, worst * 1048576 / n, TARGET_MIB)]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--doc", action="store_true", help="rewrite docs/performance.md's block")
    ap.add_argument("--entries", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    load = "%.2f %.2f %.2f" % os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="localdns-bench-")
    port = 20000 + os.getpid() % 20000
    base = [F.namespace("mesh-%d" % k) for k in range(NAMESPACES)]
    rounds = []
    with F.FakeAPI(crds=F.ISTIO_CRDS) as empty, F.FakeAPI(crds=F.ISTIO_CRDS) as full:
        empty.apply(*base)
        full.apply(*base)
        full.apply(*[entry(i) for i in range(args.entries)])
        for _ in range(args.rounds):
            without = measure(args.binary, empty, tmp, port, None)
            with_ = measure(args.binary, full, tmp, port, last_host(args.entries))
            rounds.append((without, with_))
            print("without %.1f MiB, with %.1f MiB: %.1f MiB added"
                  % (without[0], with_[0], with_[0] - without[0]), flush=True)
    text = report(args.entries, rounds, load)
    print(text)
    if args.doc:
        write_doc_block("<!-- mesh-memory:begin (written by tests/bench/mesh_memory.py; "
                        "do not edit by hand) -->", "<!-- mesh-memory:end -->", text,
                        heading="Mesh names: what ServiceEntries cost")
    worst = max(w[0] - wo[0] for wo, w in rounds)
    return 0 if worst <= TARGET_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
