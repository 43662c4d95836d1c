"""benchlib: what the Python benchmarks share (stdlib only).

    sys.path.insert(0, os.path.join(REPO, "tests", "bench"))   # beside the script: already there
    from benchlib import git_rev, proc_status, stop, write_doc_block

write_doc_block rewrites one marked block of docs/performance.md (the
numbers a benchmark's --doc run measured); git_rev names the commit they
were measured at; proc_status reads a figure of /proc/PID/status; stop ends
a process the benchmark started. For the benchmarks that run localdns
against a local NSD: localdns_conf and nsd_conf write their configs,
a_query/answers/wait_answer probe a server until it serves, and dnsgen runs
tests/bench/dnsgen and returns its key=value summary.
"""

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PERFORMANCE_DOC = os.path.join(REPO, "docs", "performance.md")


def write_doc_block(begin, end, text, heading=None, path=PERFORMANCE_DOC):
    """Put text between the marker lines begin and end of path. Without the
    block: a new section `heading` at the end holding it, or, without a
    heading, an exit naming the missing block."""
    with open(path) as f:
        doc = f.read()
    block = "%s\n%s\n%s" % (begin, text, end)
    if begin in doc and end in doc.split(begin, 1)[1]:
        doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, doc, count=1,
                     flags=re.S)
    elif heading:
        doc += "\n## %s\n\n%s\n" % (heading, block)
    else:
        sys.exit("%s has no %s ... %s block" % (path, begin, end))
    with open(path, "w") as f:
        f.write(doc)


def git_rev():
    """The short hash of the commit checked out, or "unknown"."""
    p = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    return p.stdout.strip() or "unknown"


def proc_status(pid, field):
    """A figure of /proc/PID/status (VmRSS, VmHWM, RssAnon ...: kB)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def stop(p):
    """SIGTERM, then SIGKILL after 5 s; waits for it."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def a_query(name, qid=0x1234):
    """An A query for name, recursion desired, in wire format."""
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + b"\x00\x01\x00\x01"


def answers(port, name, noerror=False, timeout=0.3):
    """One A query over UDP to 127.0.0.1:port; True when a reply comes back
    (with noerror, a NOERROR one)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(a_query(name), ("127.0.0.1", port))
        reply = s.recv(4096)
        return len(reply) > 3 and (not noerror or reply[3] & 0xF == 0)
    except OSError:
        return False
    finally:
        s.close()


def wait_answer(port, proc, what, name, tag, seconds=5, noerror=False):
    """Until the server proc (called what) answers name on port; exits the
    benchmark (tag: its name) when proc dies or after seconds."""
    for _ in range(int(seconds * 10)):
        if proc.poll() is not None:
            sys.exit("%s: %s exited at start" % (tag, what))
        if answers(port, name, noerror):
            return
        time.sleep(0.1)
    sys.exit("%s: %s did not answer within %g s" % (tag, what, seconds))


def localdns_conf(port, overrides=(), **keys):
    """A localdns config: one worker on 127.0.0.1:port, nothing of the node
    touched, no Kubernetes, no endpoints; then keys (upstream=..., cache=...:
    YAML flow values), then overrides ("key: YAML" strings, --set's form)."""
    conf = {
        "listen": "{addresses: [127.0.0.1], port: %d, workers: 1}" % port,
        "interface": "{manage: false}",
        "nftables": "{enabled: false}",
        "kubernetes": "{enabled: false}",
        "health": '{listen: ""}',
        "metrics": '{listen: ""}',
        "control": '{socket: ""}',
        "log": "{level: warn}",
    }
    conf.update(keys)
    for item in overrides:
        key, _, value = item.partition(":")
        conf[key.strip()] = value.strip()
    return "".join("%s: %s\n" % kv for kv in conf.items())


def nsd_conf(tmp, port, zone, rrl=True):
    """NSD on 127.0.0.1@port serving zone from tmp/zone.txt, every file in
    tmp; rrl=False turns its response rate limiting off."""
    return """server:
  ip-address: 127.0.0.1@%d
  do-ip6: no
%s  server-count: 1
  username: ""
  database: ""
  chroot: ""
  zonesdir: "%s"
  zonelistfile: "%s/nsd.zonelist"
  xfrdfile: "%s/nsd.xfrd"
  xfrdir: "%s"
  pidfile: ""
  logfile: "%s/nsd.log"
  verbosity: 0
remote-control:
  control-enable: no
zone:
  name: "%s."
  zonefile: "zone.txt"
""" % (port, "" if rrl else "  rrl-ratelimit: 0\n", tmp, tmp, tmp, tmp, tmp, zone)


def dnsgen(binary, port, qfile, rate, seconds, outstanding, client_timeout, tag):
    """tests/bench/dnsgen (built beside binary) at rate queries a second from
    qfile for seconds, at most outstanding in flight, each waited for
    client_timeout; its summary as a dict (numbers as floats)."""
    gen = os.path.join(os.path.dirname(os.path.abspath(binary)), "bench", "dnsgen")
    argv = [gen, "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-c", "8",
            "-Q", str(rate), "-l", str(seconds), "-q", str(outstanding),
            "-t", str(client_timeout)]
    p = subprocess.run(argv, capture_output=True, text=True,
                       timeout=seconds + client_timeout + 60)
    if p.returncode != 0:
        sys.exit("%s: dnsgen failed: %s" % (tag, p.stderr))
    r = {}
    for kv in p.stdout.split():
        k, v = kv.split("=", 1)
        try:
            r[k] = float(v)
        except ValueError:
            r[k] = v
    return r
