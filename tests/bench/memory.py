#!/usr/bin/env python3
"""memory.py BIN [--names N] [--set KEY=YAML ...] — localdns's resident
memory just after start and with N external names cached, taken apart by
rss_breakdown.py.

    tests/bench/memory.py build/localdns
    tests/bench/memory.py build/localdns --set 'cache: {size: 8MiB}'

The set-up is cache_qps.sh's (docs/performance.md, "Method for cache
hits"): NSD serves N names h00000.bench.example. ... (one A record each,
TTL 1 day) on 127.0.0.1 at a free port; localdns forwards to it with one
worker, health, metrics and control off, cache.size 64MiB; one pass of
dnsperf over every name at 5,000 QPS (--warm-rate) fills the cache; --load N then
queries them at full rate for N seconds (the batches fill up, as in
cache_qps.sh's runs). Not pinned, no throughput figures: this only looks
at memory, so it is quick (about 5 s) and fine on a busy machine. --set replaces a top-level key of the
config (YAML flow text). --env NAME=VALUE runs localdns with it in its
environment. Every process started is killed on exit; traffic stays on
127.0.0.1.
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "integration"))
import rss_breakdown  # noqa: E402
from harness import free_port  # noqa: E402  (the integration tests' own)
from benchlib import localdns_conf, nsd_conf, stop, wait_answer  # noqa: E402

ZONE = "bench.example"
PROBE = "h00000." + ZONE  # the first name of the zone: answered once serving


def write_zone(tmp, n):
    with open(os.path.join(tmp, "zone.txt"), "w") as f:
        f.write("$ORIGIN %s.\n$TTL 86400\n" % ZONE)
        f.write("@ IN SOA ns.%s. hostmaster.%s. 1 3600 600 86400 86400\n" % (ZONE, ZONE))
        f.write("@ IN NS ns\nns IN A 127.0.0.1\n")
        for i in range(n):
            f.write("h%05d IN A 10.%d.%d.%d\n" % (i, i // 65536, (i // 256) % 256, i % 256))
    with open(os.path.join(tmp, "queries.txt"), "w") as f:
        f.write("".join("h%05d.%s A\n" % (i, ZONE) for i in range(n)))


def show(title, pid, log, malloc_stats):
    print("\n== %s" % title, flush=True)
    subprocess.run([sys.executable, os.path.join(HERE, "rss_breakdown.py"), str(pid)], check=True)
    if not malloc_stats:
        return
    # glibc's malloc_stats() writes each arena's figures to the daemon's stderr.
    start = os.path.getsize(log)
    subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "call (void) malloc_stats()"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)
    with open(log) as f:
        f.seek(start)
        print(f.read().rstrip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--names", type=int, default=10000)
    ap.add_argument("--warm-rate", type=int, default=5000, metavar="QPS",
                    help="the warm-up pass's rate (every query a miss)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY: YAML",
                    help="replace a top-level config key, e.g. 'cache: {size: 8MiB}'")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--wrap", default="", metavar="CMD",
                    help="run localdns under CMD (e.g. 'valgrind --tool=massif'); figures then "
                         "describe CMD's process unless it execs localdns")
    ap.add_argument("--load", type=float, default=0, metavar="SECONDS",
                    help="then query the cached names at dnsperf's full rate this long "
                         "(full batches, as cache_qps.sh's runs) and show the memory again")
    ap.add_argument("--malloc-stats", action="store_true",
                    help="also print glibc's malloc_stats() per arena (attaches gdb)")
    args = ap.parse_args()
    nsd = shutil.which("nsd") or "/usr/sbin/nsd"
    if not os.path.exists(nsd) or not shutil.which("dnsperf"):
        sys.exit("memory: needs nsd and dnsperf (make deps)")

    tmp = tempfile.mkdtemp(prefix="localdns-memory.")
    procs = []
    try:
        write_zone(tmp, args.names)
        nsd_port, port = free_port(), free_port()
        with open(os.path.join(tmp, "nsd.conf"), "w") as f:
            f.write(nsd_conf(tmp, nsd_port, ZONE, rrl=False))
        with open(os.path.join(tmp, "localdns.yaml"), "w") as f:
            f.write(localdns_conf(port, args.set,
                                  upstream='{servers: ["127.0.0.1:%d"], timeout: 2s}' % nsd_port,
                                  cache="{size: 64MiB, max_ttl: 1d, prefetch: true}"))
        procs.append(subprocess.Popen([nsd, "-d", "-c", os.path.join(tmp, "nsd.conf")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_answer(nsd_port, procs[0], "nsd", PROBE, "memory", noerror=True)
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in args.env)
        log_path = os.path.join(tmp, "localdns.log")
        log = open(log_path, "w")
        daemon = subprocess.Popen(shlex.split(args.wrap) + [os.path.abspath(args.binary), "--config",
                                   os.path.join(tmp, "localdns.yaml")],
                                  stdout=log, stderr=log, env=env)
        procs.append(daemon)
        wait_answer(port, daemon, "localdns", PROBE, "memory", noerror=True)
        time.sleep(0.5)
        show("just after start (one name cached)", daemon.pid, log_path, args.malloc_stats)
        warm = subprocess.run(["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d",
                               os.path.join(tmp, "queries.txt"), "-n", "1", "-Q",
                               str(args.warm_rate),
                               "-c", "8", "-q", "500", "-t", "2"],
                              capture_output=True, text=True,
                              timeout=args.names // args.warm_rate + 60)
        done = [ln.strip() for ln in warm.stdout.splitlines()
                if "Queries completed" in ln or "Response codes" in ln or "Run time" in ln]
        time.sleep(0.5)
        show("with %d names cached (%s)" % (args.names, "; ".join(done)), daemon.pid, log_path,
             args.malloc_stats)
        if args.load > 0:
            run = subprocess.run(["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d",
                                  os.path.join(tmp, "queries.txt"), "-l", str(args.load),
                                  "-c", "8", "-q", "500", "-t", "2"],
                                 capture_output=True, text=True, timeout=args.load + 60)
            qps = [ln.strip() for ln in run.stdout.splitlines() if "Queries per second" in ln]
            show("after %g s at full rate (%s)" % (args.load, "; ".join(qps)), daemon.pid,
                 log_path, args.malloc_stats)
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
