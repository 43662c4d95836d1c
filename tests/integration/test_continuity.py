"""Continuity: what steady clients see while localdns crashes, is wedged,
upgraded, reloaded, loses its upstream or its API server, and is replaced
the way the chart's DaemonSet replaces it.

The node is test_node's (network namespaces pod, node and coredns, a
stand-in CoreDNS behind an emulated kube-proxy DNAT of the ClusterIP), with
a second stand-in CoreDNS endpoint, a stand-in upstream forwarder for
external names, and the fake Kubernetes API server. localdns runs from the
config the chart renders (the rendered ConfigMap with the test's few
overrides), every instance on the same files, as two pods of the DaemonSet
sharing a node would.

Clients, one process in the pod namespace and one on the host network (the
node namespace), each send UDP queries every 10 ms and TCP queries every
100 ms to the link-local address and to the intercepted ClusterIP, cycling
through a cluster Service name, the kube-dns name and an external name.
Each query has a deadline of 1 s from its first send, within which the
client behaves like a stub resolver: it sends again after 200 ms (TCP: a
new connection after 300 ms) without an answer, and 10 ms after "port
unreachable" or a reset. A query fails when no right answer (localdns's, or
the stand-in CoreDNS's when DNS fails open) arrives by its deadline, or a
wrong one (SERVFAIL, another address) arrives first.

Why a client's own delays cannot fail a query: the clients are separate
processes running SCHED_FIFO (the machine's other work cannot delay their
sends and retries), and a reply's arrival time is the kernel's receive
timestamp (SO_TIMESTAMPNS), compared with the send time, so a client that
reads a reply late does not make it late. What is judged is a count:
failed queries per event and kind of client, which must be zero.

Each event's window runs from its first action to the next event's; every
query belongs to the window in which it was first sent. The table is
printed; docs/node-integration.md has the figures.
"""

import json
import os
import signal
import subprocess
import sys
import time

import yaml

import chart
import harness
import test_node
from test_node import CLUSTER_IP, COREDNS, LINK, STANDIN, F

# Every query has a 1 s deadline: no other test beside it (run.py -j).
ALONE = True

COREDNS_B = "10.200.2.3"          # the kube-dns endpoint after the change
UPSTREAM = "10.200.2.4"           # the forwarder for external names
STANDIN_A, STANDIN_B = "192.0.2.99", "192.0.2.98"
WEB_IP = "10.96.5.5"
EXT_IP, EXT_TTL = "198.51.100.7", 2

# (name, answers that are right, localdns's own answer)
NAMES = [
    ["web.shop.svc.cluster.local", [WEB_IP, STANDIN_A, STANDIN_B], WEB_IP],
    ["kube-dns.kube-system.svc.cluster.local", [CLUSTER_IP, STANDIN_A, STANDIN_B], CLUSTER_IP],
    ["ext.example", [EXT_IP, STANDIN_A, STANDIN_B], EXT_IP],
]

# The upstream forwarder: ext.example A with a short TTL, NXDOMAIN for the
# rest; "silent" on stdin makes it drop every query, "answer" ends that.
UPSTREAM_SERVER = r'''
import socket, struct, sys, threading
addr, ip, ttl = sys.argv[1], socket.inet_aton(sys.argv[2]), int(sys.argv[3])
silent = False
def answer(q):
    end = 12
    while q[end]:
        end += q[end] + 1
    qname, qtype = q[12:end + 1], struct.unpack("!H", q[end + 1:end + 3])[0]
    end += 5
    if qname == b"\x03ext\x07example\x00":
        rr = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, ttl, 4) + ip if qtype == 1 else b""
        return q[:2] + struct.pack("!HHHHH", 0x8580, 1, 1 if rr else 0, 0, 0) + q[12:end] + rr
    return q[:2] + struct.pack("!HHHHH", 0x8583, 1, 0, 0, 0) + q[12:end]
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 53))
    while True:
        q, peer = s.recvfrom(4096)
        if not silent:
            s.sendto(answer(q), peer)
def tcp():
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind((addr, 53))
    t.listen(16)
    while True:
        c = t.accept()[0]
        threading.Thread(target=serve, args=(c,), daemon=True).start()
def serve(c):
    with c:
        while True:
            head = c.recv(2)
            if len(head) < 2:
                return
            n = struct.unpack("!H", head)[0]
            q = b""
            while len(q) < n:
                q += c.recv(n - len(q))
            if not silent:
                a = answer(q)
                c.sendall(struct.pack("!H", len(a)) + a)
threading.Thread(target=udp, daemon=True).start()
threading.Thread(target=tcp, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:
    silent = line.strip() == "silent"
    print("ok", flush=True)
'''

# One client process (see the module's docstring). argv[1]: JSON with its
# kind, servers, names and the file its results go to, one JSON line per
# query. A line on stdin stops it once the queries in flight are done.
CLIENT = r'''
import errno, gc, heapq, itertools, json, os, random, selectors, socket, struct, sys, time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
DEADLINE = 1.0
UDP_RETRY, TCP_RETRY, ERROR_RETRY = 0.2, 0.3, 0.01

cfg = json.loads(sys.argv[1])
out = open(cfg["out"], "w")
sel = selectors.DefaultSelector()
timers = []
tick = itertools.count()


def at(when, fn):
    heapq.heappush(timers, (when, next(tick), fn))


def build(name, qid):
    wire = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + wire + struct.pack("!HH", 1, 1)


def skip_name(m, i):
    while m[i] and m[i] & 0xC0 != 0xC0:
        i += m[i] + 1
    return i + (2 if m[i] else 1)


def parse(m):
    """(id, rcode, [A addresses])"""
    qid, flags, qd, an = struct.unpack("!HHHH", m[:8])
    i, addrs = 12, []
    for _ in range(qd):
        i = skip_name(m, i) + 4
    for _ in range(an):
        i = skip_name(m, i)
        rtype, _, _, n = struct.unpack("!HHIH", m[i:i + 10])
        if rtype == 1 and n == 4:
            addrs.append(socket.inet_ntoa(m[i + 10:i + 14]))
        i += 10 + n
    return qid, flags & 0xF, addrs


def arrival(ancdata):
    """The kernel's receive timestamp (CLOCK_REALTIME)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", data[:16])
            return sec + nsec / 1e9
    return time.time()


def record(q, ok, src):
    out.write(json.dumps({"kind": cfg["kind"], "proto": "tcp" if q.tcp else "udp",
                          "server": q.server, "name": q.name, "t0": q.t0_mono, "ok": ok,
                          "tries": q.tries, "src": src, "why": None if ok else q.why}) + "\n")


class Query:
    def __init__(self, server, tcp, name, right, local):
        self.server, self.tcp, self.name, self.right, self.local = server, tcp, name, right, local
        self.t0_mono = time.monotonic()
        self.t0 = None              # CLOCK_REALTIME of the first send
        self.tries, self.socks, self.done = 0, [], False
        self.why, self.retry_due = "no answer", None

    def start_clock(self):
        if self.t0 is None:
            self.t0 = time.time()
            at(time.monotonic() + DEADLINE + 0.2, self.fail)

    def attempt(self):
        if self.done or (self.t0 is not None and time.time() > self.t0 + DEADLINE):
            return
        self.tries += 1
        qid = random.randrange(65536)
        msg = build(self.name, qid)
        self.start_clock()
        try:
            kind = socket.SOCK_STREAM if self.tcp else socket.SOCK_DGRAM
            s = socket.socket(socket.AF_INET, kind | socket.SOCK_NONBLOCK)
            self.socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            state = {"q": self, "s": s, "qid": qid, "buf": b""}
            if self.tcp:
                s.connect_ex((self.server, 53))
                state["out"] = struct.pack("!H", len(msg)) + msg
                sel.register(s, selectors.EVENT_WRITE, state)
            else:
                s.connect((self.server, 53))
                s.send(msg)
                sel.register(s, selectors.EVENT_READ, state)
        except OSError as e:
            self.attempt_failed(e)
            return
        self.retry_in(TCP_RETRY if self.tcp else UDP_RETRY)

    def retry_in(self, delay):
        due = time.monotonic() + delay
        if self.retry_due is not None and self.retry_due <= due:
            return
        self.retry_due = due

        def fire():
            if self.retry_due == due:
                self.retry_due = None
                self.attempt()
        at(due, fire)

    def attempt_failed(self, e):
        self.why = errno.errorcode.get(e.errno, str(e))
        self.retry_in(ERROR_RETRY)

    def answered(self, m, t_rx):
        qid, rcode, addrs = parse(m)
        if rcode != 0 or not addrs or not set(addrs) <= set(self.right):
            self.why = "rcode %d %s" % (rcode, ",".join(addrs))
            self.fail()           # a wrong answer is the answer: a stub does not retry
        elif t_rx > self.t0 + DEADLINE:
            self.why = "late %.3fs" % (t_rx - self.t0)
        else:
            self.finish(True, "localdns" if addrs == [self.local] else "coredns")

    def fail(self):
        self.finish(False, None)

    def finish(self, ok, src):
        if self.done:
            return
        self.done = True
        for s in self.socks:
            forget(s)
            s.close()
        record(self, ok, src)


def forget(s):
    try:
        sel.unregister(s)
    except (KeyError, ValueError):
        pass


def on_event(key, mask):
    st = key.data
    q, s = st["q"], st["s"]
    if q.done:
        return                    # answered on another socket in this batch: closed
    try:
        if mask & selectors.EVENT_WRITE:
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, os.strerror(err))
            s.send(st["out"])
            sel.modify(s, selectors.EVENT_READ, st)
            return
        data, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(16))
        if q.tcp:
            if not data:
                raise OSError(errno.ECONNRESET, "closed")
            st["buf"] += data
            buf = st["buf"]
            if len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
                return
            data = buf[2:2 + struct.unpack("!H", buf[:2])[0]]
        if struct.unpack("!H", data[:2])[0] == st["qid"]:
            forget(s)
            q.answered(data, arrival(anc))
    except OSError as e:
        forget(s)
        q.attempt_failed(e)


def stream(server, tcp, every):
    state = {"next": time.monotonic() + random.random() * every, "i": random.randrange(99)}

    def send():
        name, right, local = cfg["names"][state["i"] % len(cfg["names"])]
        state["i"] += 1
        Query(server, tcp, name, right, local).attempt()
        state["next"] = max(state["next"] + every, time.monotonic())
        if not stopping:
            at(state["next"], send)
    at(state["next"], send)


gc.disable()
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    realtime = True
except OSError:
    realtime = False
stopping, stop_at = False, None
for server in cfg["servers"]:
    stream(server, False, 0.01)
    stream(server, True, 0.1)
sel.register(sys.stdin, selectors.EVENT_READ, None)
print(json.dumps({"ready": True, "realtime": realtime}), flush=True)
while stop_at is None or time.monotonic() < stop_at:
    now = time.monotonic()
    while timers and timers[0][0] <= now:
        heapq.heappop(timers)[2]()
        now = time.monotonic()
    wait = min(0.1, max(0.0, timers[0][0] - now)) if timers else 0.1
    for key, mask in sel.select(wait):
        if key.data is None:
            sys.stdin.readline()
            sel.unregister(sys.stdin)
            stopping, stop_at = True, time.monotonic() + DEADLINE + 0.5
        else:
            on_event(key, mask)
out.close()
'''

CAPTURING = test_node.CAPTURING


class Clients:
    """The two client processes and their results."""

    def __init__(self, env, n):
        self.procs = []
        self.files = []
        for kind, ns in (("pod", n.pod), ("host", n.node)):
            out = os.path.join(env.tmp, "queries-%s.jsonl" % kind)
            arg = json.dumps({"kind": kind, "servers": [LINK, CLUSTER_IP], "names": NAMES,
                              "out": out})
            p = harness.track_process(subprocess.Popen(
                harness.netns_argv(ns, [sys.executable, "-c", CLIENT, arg]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            hello = json.loads(p.stdout.readline())
            assert hello["ready"], hello
            self.realtime = hello["realtime"]
            self.procs.append(p)
            self.files.append(out)

    def stop(self):
        for p in self.procs:
            p.stdin.write("stop\n")
            p.stdin.flush()
        for p in self.procs:
            assert p.wait(10) == 0, "a client failed"
            harness.untrack_process(p)
        queries = []
        for path in self.files:
            with open(path) as f:
                queries += [json.loads(line) for line in f]
        return queries


class Node(test_node.Node):
    """test_node's node plus a second CoreDNS endpoint, an upstream
    forwarder, the fake API server with kube-dns and one Service, and
    localdns from the chart's rendered config."""

    def __init__(self, env):
        super().__init__(env)
        self.ip(self.coredns, "addr", "add", COREDNS_B + "/24", "dev", "eth0")
        self.ip(self.coredns, "addr", "add", UPSTREAM + "/24", "dev", "eth0")
        self.standin_b = self.helper(self.coredns, STANDIN, COREDNS_B, STANDIN_B)
        self.upstream = self.helper(self.coredns, UPSTREAM_SERVER, UPSTREAM, EXT_IP,
                                    str(EXT_TTL))
        self.api = self.api_server()
        self.api.apply(F.namespace("kube-system"), F.namespace("shop"),
                       F.service("shop", "web", cluster_ips=WEB_IP,
                                 ports=[F.service_port(80, name="http")]),
                       *test_node.kube_dns((COREDNS, True)))

    def render(self):
        """The chart's objects and config, with what this node needs."""
        tmp = self.env.tmp
        resolv = os.path.join(tmp, "resolv.conf")
        with open(resolv, "w") as f:
            f.write("nameserver %s\n" % UPSTREAM)
        values = {"config": {
            "interface": {"kind": "loopback"},            # no dummy links on this kernel
            "nftables": {"intercept": [CLUSTER_IP]},
            "kubernetes": {"kubeconfig": self.api.kubeconfig(os.path.join(tmp, "kubeconfig")),
                           "node_name": "node-a"},
            "upstream": {"servers": ["%s:53" % UPSTREAM], "resolv_conf": resolv},
            # One path for every instance, as a hostPath would be.
            "control": {"socket": os.path.join(tmp, "run", "control.sock")},
        }}
        self.rendered = chart.render(self.env, values)
        self.config_path = os.path.join(tmp, "config.yaml")
        self.write_config(self.rendered.config)
        return self.rendered

    def write_config(self, config):
        with open(self.config_path, "w") as f:
            yaml.safe_dump(config, f)

    def localdns(self):
        """A new instance (a new pod's container), not waited for."""
        # POD_IP as the kubelet sets it (status.podIP: on the host network,
        # the node's address); the chart's metrics.listen names it.
        return self.env.start_file(self.config_path, 53, wait=False, host=LINK, netns=self.node,
                                   extra_env={"POD_IP": test_node.IPV4.pod_gateway})

    def wait_capturing(self, d):
        """Until d takes DNS (its monitor logs the first heartbeat)."""
        self.until(lambda: CAPTURING in d.stderr(), True, 15.0)

    def silence_upstream(self, silent):
        self.upstream.stdin.write("silent\n" if silent else "answer\n")
        self.upstream.stdin.flush()
        assert self.upstream.stdout.readline().strip() == "ok"

    def api_reachable(self, yes):
        """An outage: the node drops what it sends to the API server."""
        if yes:
            self.run(self.node, "nft", "delete", "table", "inet", "apioutage")
        else:
            self.nft(self.node, """
                table inet apioutage {
                  chain out { type filter hook output priority 0; policy accept;
                    tcp dport %d drop
                  }
                }""" % self.api.port)

    def kube_proxy_to(self, endpoint):
        """What kube-proxy does when kube-dns's endpoints change."""
        self.nft(self.node, """
            flush table ip kubeproxy
            table ip kubeproxy {
              chain pre {
                ip daddr %(ip)s meta l4proto { udp, tcp } th dport 53 dnat to %(to)s
              }
              chain out {
                ip daddr %(ip)s meta l4proto { udp, tcp } th dport 53 dnat to %(to)s
              }
            }""" % {"ip": CLUSTER_IP, "to": endpoint})

    def http_ready(self):
        """What the kubelet's readinessProbe gets on the health address."""
        probe = self.rendered.container["readinessProbe"]["httpGet"]
        url = "http://%s:%d%s" % (probe["host"], probe["port"], probe["path"])
        p = self.run(self.node, sys.executable, "-c", READY_PROBE, url, check=False)
        return p.stdout.strip() == "200"


READY_PROBE = """
import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).status)
except Exception as e:
    print(getattr(e, "code", "error"))
"""


def stop(d, sig=signal.SIGTERM, grace=10.0):
    """As the kubelet stops a container: the signal, then SIGKILL after the grace period."""
    rc, _ = d.stop(sig, timeout=grace)
    assert rc == 0, "exit %s after %s\n%s" % (rc, sig, d.tail())


# ------------------------------------------------------------------ the events
#
# Each takes the node and the running localdns and returns the running one.

def kill9_and_restart(n, d):
    d.proc.kill()
    d.proc.wait(5)
    time.sleep(2)
    d = n.localdns()
    n.wait_capturing(d)
    return d


def overlapping_upgrade(n, d):
    # A second instance, and the first one stopped as soon as the second has
    # bound its sockets, whether or not it is ready yet.
    new = n.localdns()
    n.until(lambda: "msg=listening" in new.stderr(), True, 10.0)
    stop(d)
    n.wait_capturing(new)
    return new


def reload(n, d):
    config = n.rendered.config
    config["static"]["records"] = [{"name": "reloaded.test", "a": ["10.9.9.9"]}]
    n.write_config(config)
    mark = d.stderr().count("reloaded")
    d.proc.send_signal(signal.SIGHUP)
    n.until(lambda: d.stderr().count("reloaded") > mark, True, 10.0)
    return d


def upstream_silent_while_a_name_expires(n, d):
    n.silence_upstream(True)
    time.sleep(EXT_TTL + 1.5)         # ext.example's TTL runs out meanwhile
    n.silence_upstream(False)
    return d


def wedged_3s(n, d):
    os.kill(d.proc.pid, signal.SIGSTOP)
    time.sleep(3)
    os.kill(d.proc.pid, signal.SIGCONT)   # capture comes back at the next heartbeat
    return d


def sigterm_without_replacement(n, d):
    stop(d)
    time.sleep(1.5)
    d = n.localdns()
    n.wait_capturing(d)
    return d


def api_outage(n, d):
    n.api_reachable(False)
    time.sleep(3)
    n.api_reachable(True)
    return d


def kube_dns_moves_while_down(n, d):
    # kube-dns's endpoint moves from COREDNS to COREDNS_B while localdns is
    # down, kube-proxy following; the old CoreDNS pod still answers until it
    # is gone. The restarted localdns points its fallback at the new one.
    d.proc.kill()
    d.proc.wait(5)
    n.api.apply(*test_node.kube_dns((COREDNS, False), (COREDNS_B, True)))
    n.kube_proxy_to(COREDNS_B)
    time.sleep(1)
    d = n.localdns()
    n.wait_capturing(d)
    n.until(n.fallback_map, [COREDNS_B], 5.0)
    n.standin.kill()                  # the old CoreDNS pod is gone
    n.standin.wait(5)
    stop(d)                           # and DNS fails open to the new one
    time.sleep(1.5)
    d = n.localdns()
    n.wait_capturing(d)
    return d


def rolling_upgrade_as_the_chart_does(n, d):
    strategy = n.rendered.one("DaemonSet")["spec"]["updateStrategy"]
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}, strategy
    grace = n.rendered.pod["spec"]["terminationGracePeriodSeconds"]
    # The DaemonSet controller starts the surge pod beside the old one and
    # waits until it is Ready. The kubelet's probe may reach either process
    # on the shared port; the new one is ready when it takes DNS.
    new = n.localdns()
    n.wait_capturing(new)
    n.until(n.http_ready, True, 10.0)
    stop(d, grace=grace)              # then deletes the old pod
    return new


EVENTS = [
    ("kill -9, restart 2 s later", kill9_and_restart),
    ("second instance, then SIGTERM to the first", overlapping_upgrade),
    ("config reload (SIGHUP)", reload),
    ("upstream silent while a cached name expires", upstream_silent_while_a_name_expires),
    ("wedged 3 s (SIGSTOP, SIGCONT)", wedged_3s),
    ("SIGTERM, no replacement for 1.5 s", sigterm_without_replacement),
    ("Kubernetes API unreachable for 3 s", api_outage),
    ("kube-dns endpoint moves while localdns is down", kube_dns_moves_while_down),
    ("rolling upgrade as the chart's DaemonSet does it", rolling_upgrade_as_the_chart_does),
]
SETTLE = 1.0                          # after each event, before the next begins


def table(windows, queries):
    """Per window and kind of client: queries, failed, sent more than once,
    answered by CoreDNS (DNS failed open)."""
    rows = []
    for i, (label, start) in enumerate(windows):
        end = windows[i + 1][1] if i + 1 < len(windows) else float("inf")
        row = [label]
        for kind in ("pod", "host"):
            qs = [q for q in queries if q["kind"] == kind and start <= q["t0"] < end]
            row.append({"queries": len(qs),
                        "failed": sum(not q["ok"] for q in qs),
                        "retried": sum(q["ok"] and q["tries"] > 1 for q in qs),
                        "coredns": sum(q["src"] == "coredns" for q in qs),
                        "failures": [q for q in qs if not q["ok"]]})
        rows.append(row)
    return rows


def print_table(rows, realtime):
    head = "| event | pod clients: failed / queries (retried, via CoreDNS) | " \
           "host-network clients: failed / queries (retried, via CoreDNS) |"
    lines = [head, "| --- | --- | --- |"]
    for label, pod, host in rows:
        lines.append("| %s | %s | %s |" % (label, *("%d / %d (%d, %d)" % (
            c["failed"], c["queries"], c["retried"], c["coredns"]) for c in (pod, host))))
    print("\ncontinuity (clients %s):\n%s" % (
        "SCHED_FIFO" if realtime else "NOT real-time", "\n".join(lines)), flush=True)


def test_continuity_no_failed_query_through_crash_wedge_upgrade_reload_and_outages(env):
    n = Node(env)
    try:
        n.render()
        d = n.localdns()
        n.wait_capturing(d)
        clients = Clients(env, n)
        windows = [("steady", time.monotonic())]
        time.sleep(1.5)
        for label, event in EVENTS:
            windows.append((label, time.monotonic()))
            d = event(n, d)
            time.sleep(SETTLE)
        queries = clients.stop()
        stop(d)
    finally:
        n.api.stop()
    rows = table(windows, queries)
    print_table(rows, clients.realtime)
    by_label = {row[0]: row for row in rows}
    for label, pod, host in rows:
        for kind, c in (("pod", pod), ("host", host)):
            # Every window saw steady traffic from both kinds of client.
            assert c["queries"] > 100, "%s, %s clients: only %d queries" % (
                label, kind, c["queries"])
    # The events did what they say: DNS failed open where it must (the
    # wedge too, for pods), localdns kept answering cluster names through
    # the API outage and the external name from its stale cache.
    for label in ("kill -9, restart 2 s later", "wedged 3 s (SIGSTOP, SIGCONT)",
                  "SIGTERM, no replacement for 1.5 s"):
        for c in by_label[label][1:]:
            assert c["coredns"] > 0, "%s: nothing failed open" % label
    began = dict(windows)
    outage = began["Kubernetes API unreachable for 3 s"]
    answered = [q for q in queries if q["name"].startswith("web.shop") and
                q["src"] == "localdns" and outage + 0.5 < q["t0"] < outage + 2.5]
    assert len(answered) > 20, "cluster names not answered by localdns during the API outage"
    silent = began["upstream silent while a cached name expires"]
    stale = [q for q in queries if q["name"] == "ext.example" and q["src"] == "localdns"
             and silent + EXT_TTL + 0.5 < q["t0"] < silent + EXT_TTL + 1.5]
    assert len(stale) > 10, "the expired external name was not served stale"
    failures = ["%s: %s %s %s to %s: %s after %d tries" % (
        label, q["kind"], q["proto"], q["name"], q["server"], q["why"], q["tries"])
        for label, pod, host in rows for c in (pod, host) for q in c["failures"]]
    assert not failures, "%d failed queries:\n%s\n%s" % (
        len(failures), "\n".join(failures[:40]), env.daemon_logs())


test_continuity_no_failed_query_through_crash_wedge_upgrade_reload_and_outages.timeout = 240
