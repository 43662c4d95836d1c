#!/usr/bin/env python3
"""keeper_cost.py BINARY [SECONDS] — what the keeper costs
(docs/performance.md, "The keeper").

Runs BINARY and its keeper (`BINARY keeper`) in a network namespace of
their own, as test_continuity's pods do (node integration on, one
link-local and one intercepted address, two workers, no Kubernetes, a
static fallback endpoint answered by a stand-in responder), and measures:

  idle     over SECONDS (default 60) without traffic: the CPU of the keeper
           (it looks at the workers' heartbeats every KEEPER_LOOK_MS) and
           of localdns's node monitor (its link turn each 100 ms), in ms of
           CPU per second of wall time (schedstat, in ns); the resident,
           proportional and private memory of both processes (the two share
           the binary and its libraries);
  rescue   localdns stopped (SIGSTOP) while a client sends RESCUED UDP
           queries, which the keeper relays to the fallback endpoint: its
           CPU per relayed query, and how many were answered.

Prints one line per figure. Needs root (ip netns, nftables).
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

CONFIG = """listen: {addresses: [169.254.20.10], port: 53, workers: 2}
interface: {manage: true, kind: loopback}
nftables: {enabled: true, table: localdns, intercept: [10.96.0.10],
           fallback_endpoints: [127.0.0.53]}
kubernetes: {enabled: false}
health: {listen: ""}
metrics: {listen: ""}
control: {socket: ""}
keeper: {socket: %s}
upstream: {servers: ["127.0.0.1:9"]}
static: {records: [{name: db.prod.svc.cluster.local, a: [10.0.0.5]}]}
"""

# The cluster DNS stand-in: an A record for anything, on 127.0.0.53:53.
RESPONDER = r'''
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.53", 53))
while True:
    q, peer = s.recvfrom(4096)
    end = 12
    while q[end]:
        end += q[end] + 1
    end += 5
    s.sendto(q[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0) + q[12:end]
             + b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 0, 4) + bytes([192, 0, 2, 99]), peer)
'''

# The client: n queries, one every 2 ms, each with its own ID; prints how many were answered.
CLIENT = r'''
import socket, struct, sys, time
n, seen = int(sys.argv[1]), set()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(("169.254.20.10", 53))
s.setblocking(False)
def take():
    while True:
        try:
            seen.add(struct.unpack("!H", s.recv(512)[:2])[0])
        except (BlockingIOError, ConnectionRefusedError):
            return
for i in range(n):
    s.send(struct.pack("!HHHHHH", i, 0x0100, 1, 0, 0, 0)
           + b"\x02db\x04prod\x03svc\x07cluster\x05local\x00\x00\x01\x00\x01")
    take()
    time.sleep(0.002)
deadline = time.monotonic() + 3
while len(seen) < n and time.monotonic() < deadline:
    take()
    time.sleep(0.01)
print(len(seen))
'''


def cpu_ms(pid, thread=None):
    """CPU time of pid's threads (or of those named thread), from schedstat (ns)."""
    total = 0.0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                name = f.read().strip()
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        if thread is None or name == thread:
            total += ns / 1e6
    return total


def memory_kib(pid):
    out = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                out[key] = int(rest.split()[0])
    out["Private"] = out["Private_Clean"] + out["Private_Dirty"]
    return out


def until(what, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(0.05)
    raise SystemExit("timed out")


def main():
    binary = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60
    ns = "ldns-kc-%d" % os.getpid()
    tmp = tempfile.mkdtemp()
    config, log = os.path.join(tmp, "config.yaml"), os.path.join(tmp, "keeper.log")
    with open(config, "w") as f:
        f.write(CONFIG % os.path.join(tmp, "keeper.sock"))
    subprocess.run(["ip", "netns", "add", ns], check=True)
    procs = []
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        run = lambda argv, **kw: procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns] + argv, **kw)) or procs[-1]
        run([sys.executable, "-c", RESPONDER])
        keeper = run([binary, "keeper", "--config", config], stderr=open(log, "w"))
        until(lambda: "waiting for localdns" in open(log).read(), 10)
        server = run([binary, "--config", config], stderr=subprocess.DEVNULL)
        until(lambda: "holding the serving process's sockets" in open(log).read(), 10)
        time.sleep(2)
        k0, m0, t0 = cpu_ms(keeper.pid), cpu_ms(server.pid, "node"), time.monotonic()
        time.sleep(seconds)
        k1, m1, wall = cpu_ms(keeper.pid), cpu_ms(server.pid, "node"), time.monotonic() - t0
        km, sm = memory_kib(keeper.pid), memory_kib(server.pid)
        print("idle over %.0f s (ms of CPU per s; 1 ms/s = 0.1%% of a core):" % wall)
        print("  keeper            %6.2f ms/s" % ((k1 - k0) / wall))
        print("  localdns node     %6.2f ms/s (monitor with the keeper link)" % ((m1 - m0) / wall))
        print("memory (KiB): keeper Rss %d Pss %d private %d; localdns Rss %d Pss %d "
              "private %d" % (km["Rss"], km["Pss"], km["Private"], sm["Rss"], sm["Pss"],
                              sm["Private"]))

        n = int(os.environ.get("RESCUED", "2000"))
        os.kill(server.pid, signal.SIGSTOP)
        k0 = cpu_ms(keeper.pid)
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CLIENT, str(n)],
                             capture_output=True, text=True, check=True).stdout
        time.sleep(1)
        k1 = cpu_ms(keeper.pid)
        os.kill(server.pid, signal.SIGCONT)
        print("rescue: %s of %d queries answered while localdns was stopped; keeper CPU "
              "%.1f ms, %.1f us per query" % (out.strip(), n, k1 - k0,
                                                1000 * (k1 - k0) / max(1, int(out))))
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["ip", "netns", "delete", ns])


if __name__ == "__main__":
    main()
