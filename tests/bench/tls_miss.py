#!/usr/bin/env python3
"""tls_miss.py BIN [--rounds N] [--names N] [--seconds S] [--doc] — what a cache
miss costs when localdns forwards over DNS-over-TLS instead of UDP.

    tests/bench/tls_miss.py build/localdns --doc

The upstream is a local Unbound (one thread, iterator only) that answers
every name under miss.example (a redirect zone) on one port: over TLS on TCP
(tls-port, a certificate from a CA made here with openssl) and plain on UDP.
localdns (one worker) forwards to it either way: `upstream.servers:
[127.0.0.1:PORT]` (UDP) or `[127.0.0.1:PORT#dot.test]` with `upstream.tls`.
Every name is asked once, so every query is a miss. Per round and mode, a
fresh daemon, then:

  - sequential: --names names one after another, each sent once and waited
    for (a stub resolver's pattern): latency percentiles, the first query
    apart (it opens the connection: TCP and TLS handshakes over TLS);
  - load: dnsgen asks new names at --rate for --seconds, at most
    --outstanding in flight (upstream.max_rate off): misses answered a
    second, and localdns's CPU time per answered miss (/proc/PID/stat,
    utime + stime, over the run).

Modes alternate (udp, tls, udp, tls, ...) so a neighbour's load on the shared
machine falls on both; the table has each mode's median over the rounds.
--doc rewrites the marked block in docs/performance.md. Traffic stays on
127.0.0.1; every process started is stopped on exit.
"""

import argparse
import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from harness import free_port, make_tls_ca, write_unbound_tls_conf  # noqa: E402  (the integration tests' own)
from benchlib import (a_query, dnsgen, git_rev, localdns_conf, stop, wait_answer,  # noqa: E402
                      write_doc_block)
ZONE = "miss.example"
TLS_NAME = "dot.test"
BEGIN, END = "<!-- tls_miss:begin -->", "<!-- tls_miss:end -->"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def ask(sock, port, name, timeout):
    """One A query over UDP, sent once; (seconds, rcode) or None without an answer."""
    qid = random.randrange(65536)
    sock.settimeout(timeout)
    t0 = time.perf_counter()
    sock.sendto(a_query(name, qid), ("127.0.0.1", port))
    while True:
        try:
            data = sock.recv(4096)
        except socket.timeout:
            return None
        if len(data) >= 12 and struct.unpack(">H", data[:2])[0] == qid:
            return time.perf_counter() - t0, data[3] & 0xF


def start_unbound(tmp, port, procs):
    conf = write_unbound_tls_conf(tmp, port, [
        "incoming-num-tcp: 100",
        'local-zone: "%s." redirect' % ZONE,
        'local-data: "%s. 300 IN A 192.0.2.53"' % ZONE])
    p = subprocess.Popen([shutil.which("unbound") or "/usr/sbin/unbound", "-d", "-c", conf],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "unbound.log"),
                                                                 "w"))
    procs.append(p)
    return p


def start_localdns(binary, tmp, mode, label, up_port, ca, procs):
    """localdns forwarding to the Unbound at up_port over mode (udp or tls); max_rate off."""
    port = free_port()
    server = "127.0.0.1:%d" % up_port
    upstream = '{servers: ["%s"], max_rate: 0}' % server
    if mode == "tls":
        upstream = '{servers: ["%s#%s"], tls: true, tls_ca_file: "%s", max_rate: 0}' % (
            server, TLS_NAME, ca)
    conf = os.path.join(tmp, "localdns-%s.yaml" % label)
    with open(conf, "w") as f:
        f.write(localdns_conf(port, upstream=upstream))
    log = open(os.path.join(tmp, "localdns-%s.log" % label), "w")
    p = subprocess.Popen([os.path.abspath(binary), "--config", conf], stdout=log, stderr=log)
    procs.append(p)
    return p, port


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def sequential(port, prefix, n):
    """The first query (it opens the connection) and the next n-1, one at a time."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    times, lost = [], 0
    try:
        for i in range(n):
            r = ask(s, port, "%s%06d.%s" % (prefix, i, ZONE), 5)
            if r is None or r[1] != 0:
                lost += 1
            else:
                times.append(r[0])
    finally:
        s.close()
    return times, lost


def load(binary, port, tmp, prefix, args):
    path = os.path.join(tmp, prefix + "-queries.txt")
    with open(path, "w") as f:
        f.write("".join("%s%07d.%s A\n" % (prefix, i, ZONE)
                        for i in range(args.rate * args.seconds + 1000)))
    return dnsgen(binary, port, path, args.rate, args.seconds, args.outstanding, 5, "tls_miss")


def one_round(binary, tmp, label, up_port, ca, procs, rnd, args):
    p, port = start_localdns(binary, tmp, label, label, up_port, ca, procs)
    try:
        wait_answer(port, p, "localdns (%s)" % label, "warmup." + ZONE, "tls_miss", seconds=10)
        # The warm-up opened the connection, so these misses reuse it; what opening
        # one costs is measured below, by a daemon that has asked the upstream nothing.
        times, lost = sequential(port, "%s%ds" % (label[0], rnd), args.names)
        cpu0 = cpu_seconds(p.pid)
        g = load(binary, port, tmp, "%s%dg" % (label[0], rnd), args)
        cpu = cpu_seconds(p.pid) - cpu0
    finally:
        stop(p)
    # The first miss of a daemon that has not yet talked to the upstream.
    p, port = start_localdns(binary, tmp, label, label + "-first", up_port, ca, procs)
    try:
        first = None
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(100):
            if p.poll() is not None:
                sys.exit("tls_miss: localdns (%s) exited at start" % label)
            try:
                # libunbound answers localhost itself: serving, and nothing asked upstream yet
                s.settimeout(0.2)
                s.sendto(a_query("localhost", 1), ("127.0.0.1", port))
                s.recv(4096)
                break
            except OSError:
                time.sleep(0.1)
        r = ask(s, port, "%s%dfirst.%s" % (label[0], rnd, ZONE), 5)
        first = r[0] if r and r[1] == 0 else None
        s.close()
    finally:
        stop(p)
    times.sort()
    return {
        "first_ms": first * 1000 if first else float("nan"),
        "p50_ms": statistics.median(times) * 1000,
        "p99_ms": times[int(len(times) * 0.99) - 1] * 1000,
        "lost": lost,
        "qps": g["noerror"] / g["elapsed_s"],
        "gen_lost": g["sent"] - g["noerror"],
        "cpu_us": cpu / max(g["noerror"], 1) * 1e6,
    }


def median_of(rounds, key):
    return statistics.median(r[key] for r in rounds)


def report(results, args):
    load = os.getloadavg()
    lines = ["%s, commit %s, %d CPUs (load average %.1f at the end): %d rounds, modes "
             "alternating; each %d names one at a time, then dnsgen at %d new names/s for %d s "
             "(at most %d in flight); Unbound %s with one thread answering every name from a "
             "redirect zone, localdns with one worker. Medians over the rounds."
             % (time.strftime("%Y-%m-%d"), git_rev(), os.cpu_count(), load[0], args.rounds,
                args.names, args.rate, args.seconds, args.outstanding, unbound_version()),
             "",
             "| upstream | first miss (connects) ms | miss p50 ms | miss p99 ms | misses/s "
             "under load | CPU per miss (localdns) µs | unanswered |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label in ("udp", "tls"):
        rs = results[label]
        lines.append("| %s | %.2f | %.3f | %.3f | %.0f | %.1f | %d |" % (
            "UDP" if label == "udp" else "TLS (one connection)",
            median_of(rs, "first_ms"), median_of(rs, "p50_ms"), median_of(rs, "p99_ms"),
            median_of(rs, "qps"), median_of(rs, "cpu_us"),
            sum(r["lost"] + r["gen_lost"] for r in rs)))
    lines.append("")
    lines.append("Each round: " + "; ".join(
        "%s %s" % (label, ", ".join("p50 %.3f ms, %.0f/s, %.1f µs" % (r["p50_ms"], r["qps"],
                                                                      r["cpu_us"])
                                    for r in results[label]))
        for label in ("udp", "tls")) + ".")
    return "\n".join(lines)


def unbound_version():
    p = subprocess.run([shutil.which("unbound") or "/usr/sbin/unbound", "-V"],
                       capture_output=True, text=True)
    for line in (p.stdout + p.stderr).splitlines():
        if line.startswith("Version"):
            return line.split()[1]
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--names", type=int, default=2000)
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--outstanding", type=int, default=200)
    ap.add_argument("--doc", action="store_true", help="rewrite the block in docs/performance.md")
    args = ap.parse_args()
    procs = []
    tmp = tempfile.mkdtemp(prefix="tls-miss-")
    try:
        ca = make_tls_ca(tmp, TLS_NAME)
        up_port = free_port()
        up = start_unbound(tmp, up_port, procs)
        time.sleep(0.5)
        if up.poll() is not None:
            sys.exit("tls_miss: unbound exited at start (%s/unbound.log)" % tmp)
        results = {"udp": [], "tls": []}
        for rnd in range(args.rounds):
            for label in ("udp", "tls"):
                r = one_round(args.binary, tmp, label, up_port, ca, procs, rnd, args)
                print("round %d %s: %s" % (rnd, label, r), flush=True)
                results[label].append(r)
        text = report(results, args)
        print(text)
        if args.doc:
            write_doc_block(BEGIN, END, text)
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
