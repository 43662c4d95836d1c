#!/usr/bin/env python3
"""ratelimit.py BIN [--seconds S] [--rate QPS] — external names through an
upstream that pushes back: localdns against Unbound in the same run.

    tests/bench/ratelimit.py build/localdns
    tests/bench/ratelimit.py build/localdns --seconds 10 --only localdns

The upstream is NSD serving a wildcard zone (*.rl.example. A, TTL 300) with
its default response rate limiting on: 200 answers a second per /24, every
second limited answer sent back truncated (slip 2), the rest dropped. This
is what corporate resolvers do; cloud VPC resolvers cap packets per second
in the same spirit. The load is dnsgen at a fixed rate of new names (each
name asked once, so every query is a miss), at most --outstanding in
flight, each given --client-timeout to be answered (dnsperf's default 5 s).

Each resolver forwards everything to that NSD and runs on its own: localdns
with one worker, Unbound with one thread (its defaults otherwise, iterator
only). Between the two, NSD is restarted so neither inherits the other's
rate-limit state. Reported per resolver: answers by rcode, NOERROR as a
share of queries sent, answered NOERROR per second, latency percentiles of
the answered queries, peak RSS (VmHWM) and, for localdns, the resolver's
own counters from /metrics (queries to libunbound, waiting clients, paced
queries, TCP retries the upstream asked for ...).

--doc rewrites the marked block in docs/performance.md. Traffic stays on
127.0.0.1; every process started is stopped on exit.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from harness import free_port  # noqa: E402  (the integration tests' own)
from benchlib import (dnsgen, git_rev, localdns_conf, nsd_conf, proc_status, stop,  # noqa: E402
                      wait_answer, write_doc_block)
ZONE = "rl.example"
PROBE = "warmup." + ZONE
BEGIN, END = "<!-- ratelimit:begin -->", "<!-- ratelimit:end -->"

# The localdns counters worth reading next to the client's view.
METRICS = ("localdns_upstream_queries_total", "localdns_upstream_coalesced_total",
           'localdns_upstream_errors_total{kind="resolution"}',
           'localdns_upstream_errors_total{kind="timeout"}',
           "localdns_upstream_shed_total", "localdns_upstream_context_renewals_total",
           "localdns_upstream_paced_total", "localdns_upstream_retries_total",
           'localdns_upstream_shed_total{reason="queue_full"}',
           'localdns_upstream_results_total{result="SERVFAIL"}',
           'localdns_upstream_results_total{result="error"}',
           'localdns_upstream_fallback_replies_total{reply="servfail"}',
           "localdns_upstream_duration_seconds_sum", "localdns_upstream_duration_seconds_count")


def unbound_conf(tmp, port, nsd_port):
    return """server:
  interface: 127.0.0.1
  port: %d
  num-threads: 1
  do-daemonize: no
  chroot: ""
  username: ""
  directory: "%s"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 0
  do-ip6: no
  do-not-query-localhost: no
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
forward-zone:
  name: "."
  forward-addr: 127.0.0.1@%d
""" % (port, tmp, nsd_port)


def scrape(mport):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as h:
        text = h.read().decode()
    out = {}
    for name in METRICS:
        m = re.search(r"(?m)^%s (\S+)$" % re.escape(name), text)
        if m:
            out[name] = float(m.group(1))
    return out


class Run:
    """One resolver's process, started against the NSD at nsd_port."""

    def __init__(self, tmp, procs):
        self.tmp, self.procs = tmp, procs

    def start(self, label, argv):
        log = open(os.path.join(self.tmp, label + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=log)
        self.procs.append(p)
        return p


def write_queries(tmp, label, n):
    path = os.path.join(tmp, label + "-queries.txt")
    with open(path, "w") as f:
        f.write("".join("%s%07d.%s A\n" % (label[0], i, ZONE) for i in range(n)))
    return path


def measure(label, binary, tmp, procs, nsd_port, args):
    port = free_port()
    mport = None
    if label == "localdns":
        mport = free_port()
        conf = os.path.join(tmp, "localdns.yaml")
        with open(conf, "w") as f:
            f.write(localdns_conf(port, args.set, metrics='{listen: "127.0.0.1:%d"}' % mport,
                                  upstream='{servers: ["127.0.0.1:%d"]}' % nsd_port))
        argv = [os.path.abspath(binary), "--config", conf]
    else:
        conf = os.path.join(tmp, "unbound.conf")
        with open(conf, "w") as f:
            f.write(unbound_conf(tmp, port, nsd_port))
        argv = [shutil.which("unbound") or "/usr/sbin/unbound", "-d", "-c", conf]
    p = Run(tmp, procs).start(label, argv)
    wait_answer(port, p, label, PROBE, "ratelimit", seconds=10)
    qfile = write_queries(tmp, label, int(args.rate * args.seconds) + 1000)
    r = dnsgen(binary, port, qfile, args.rate, args.seconds, args.outstanding,
               args.client_timeout, "ratelimit")
    r["peak_rss_kib"] = proc_status(p.pid, "VmHWM")
    if mport:
        r["metrics"] = scrape(mport)
    stop(p)
    return r


def row(label, r):
    sent = r["sent"] or 1
    return ("| %s | %d | %d (%.1f%%) | %d | %d | %.0f | %.0f | %.0f | %.1f |"
            % (label, r["sent"], r["noerror"], 100.0 * r["noerror"] / sent, r["servfail"],
               r["lost"], r["noerror"] / r["elapsed_s"], r["p50_us"] / 1000,
               r["p99_us"] / 1000, r["peak_rss_kib"] / 1024.0))


def report(results, args):
    lines = ["%s, commit %s, %d CPUs: %d new names a second for %d s, at most %d in flight, "
             "%g s client timeout; NSD %s with its default rate limiting (200/s per /24, slip 2)."
             % (time.strftime("%Y-%m-%d"), git_rev(), os.cpu_count(), args.rate, args.seconds,
                args.outstanding, args.client_timeout, nsd_version()),
             "",
             "| resolver | sent | NOERROR | SERVFAIL | no answer | NOERROR/s | p50 ms | p99 ms "
             "| peak RSS MiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, r in results:
        lines.append(row(label, r))
    for label, r in results:
        if "metrics" in r:
            m = r["metrics"]
            lat = m.get("localdns_upstream_duration_seconds_sum", 0) / max(
                m.get("localdns_upstream_duration_seconds_count", 0), 1)
            lines.append("")
            lines.append("localdns's resolver: %s; libunbound's mean time to a result %.0f ms."
                         % (", ".join("%s %d" % (k.replace("localdns_upstream_", ""), v)
                                      for k, v in m.items() if "duration" not in k),
                            lat * 1000))
    return "\n".join(lines)


def nsd_version():
    p = subprocess.run([shutil.which("nsd") or "/usr/sbin/nsd", "-v"], capture_output=True,
                       text=True)
    m = re.search(r"version (\S+)", p.stdout + p.stderr)
    return m.group(1) if m else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--outstanding", type=int, default=500)
    ap.add_argument("--client-timeout", type=float, default=5)
    ap.add_argument("--only", choices=("localdns", "unbound"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY: YAML",
                    help="replace a top-level localdns config key")
    ap.add_argument("--doc", action="store_true", help="rewrite the block in docs/performance.md")
    args = ap.parse_args()
    nsd = shutil.which("nsd") or "/usr/sbin/nsd"
    if not os.path.exists(nsd):
        sys.exit("ratelimit: needs nsd (make deps)")
    labels = ["localdns", "unbound"]
    if args.only:
        labels = [args.only]
    if "unbound" in labels and not (shutil.which("unbound") or os.path.exists("/usr/sbin/unbound")):
        print("ratelimit: unbound not installed: localdns alone", file=sys.stderr)
        labels = ["localdns"]

    tmp = tempfile.mkdtemp(prefix="localdns-ratelimit.")
    procs = []
    results = []
    try:
        with open(os.path.join(tmp, "zone.txt"), "w") as f:
            f.write("$ORIGIN %s.\n$TTL 300\n" % ZONE)
            f.write("@ IN SOA ns.%s. hostmaster.%s. 1 3600 600 86400 300\n" % (ZONE, ZONE))
            f.write("@ IN NS ns\nns IN A 127.0.0.1\n* IN A 192.0.2.1\n")
        for label in labels:
            nsd_port = free_port()
            with open(os.path.join(tmp, "nsd.conf"), "w") as f:
                f.write(nsd_conf(tmp, nsd_port, ZONE))
            up = Run(tmp, procs).start("nsd", [nsd, "-d", "-c", os.path.join(tmp, "nsd.conf")])
            wait_answer(nsd_port, up, "nsd", PROBE, "ratelimit", seconds=10)
            time.sleep(1.5)  # NSD's rate-limit buckets forget the warm-up
            results.append((label, measure(label, args.binary, tmp, procs, nsd_port, args)))
            stop(up)
            print(row(label, results[-1][1]), flush=True)
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(results, args)
    print("\n" + text)
    if args.doc:
        write_doc_block(BEGIN, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
