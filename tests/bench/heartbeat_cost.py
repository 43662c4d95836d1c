#!/usr/bin/env python3
"""heartbeat_cost.py BINARY [SECONDS] — the CPU an idle localdns spends to
keep its nftables heartbeat (docs/node-integration.md, "Heartbeat").

Runs BINARY in a network namespace of its own with the node integration on
(interface.kind loopback, one link-local and one intercepted address, two
workers, no Kubernetes) and no traffic, and reads each thread's CPU time
(utime + stime in /proc/PID/task/TID/stat) over SECONDS (default 120):
the node monitor renews the heartbeat (one nftables transaction) every
NFT_LIVE_REFRESH_MS, and each worker goes round its loop every
SERVER_IDLE_TURN_MS, which the heartbeat's test reads. Prints one line per
thread name and the total, as milliseconds of CPU per second of wall time
(1 ms/s is 0.1% of one core). Needs root (ip netns, nftables).
"""

import os
import subprocess
import sys
import tempfile
import time

CONFIG = """listen: {addresses: [169.254.20.10], port: 53, workers: 2}
interface: {manage: true, kind: loopback}
nftables: {enabled: true, table: localdns, intercept: [10.96.0.10]}
kubernetes: {enabled: false}
health: {listen: ""}
metrics: {listen: ""}
control: {socket: ""}
upstream: {servers: ["127.0.0.1:9"]}
"""


def cpu_ms_by_thread(pid):
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                name = f.read().strip()
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue                       # a thread that just ended
        out[name] = out.get(name, 0) + (int(fields[11]) + int(fields[12])) * 1000 / ticks
    return out


def main():
    binary = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 120
    ns = "ldns-hb-%d" % os.getpid()
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(CONFIG)
        p = subprocess.Popen(["ip", "netns", "exec", ns, binary, "--config", f.name],
                             stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)                   # start-up done
            before, t0 = cpu_ms_by_thread(p.pid), time.monotonic()
            time.sleep(seconds)
            after, wall = cpu_ms_by_thread(p.pid), time.monotonic() - t0
        finally:
            p.terminate()
            p.wait(10)
            os.unlink(f.name)
    finally:
        subprocess.run(["ip", "netns", "delete", ns])
    total = 0.0
    print("idle CPU over %.0f s (ms of CPU per s; 1 ms/s = 0.1%% of a core):" % wall)
    for name in sorted(after):
        used = after[name] - before.get(name, 0)
        total += used
        print("  %-10s %6.2f ms/s" % (name, used / wall))
    print("  %-10s %6.2f ms/s" % ("total", total / wall))


if __name__ == "__main__":
    main()
