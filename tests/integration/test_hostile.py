"""One client, whatever it sends, cannot hurt DNS for the node's other
clients (docs/security.md). Each test runs one attack from 127.0.0.1 while a
well-behaved client on 127.0.0.2 keeps asking, and checks the same three
things:

- memory: resident memory grows at most a stated bound above its figure
  before the attack;
- liveness: every worker and the resolver keep going round their loops
  (localdns_loop_heartbeat_age_seconds, scraped every 100 ms, stays under
  1 s; idle, each loop turns twice a second);
- the other client: its local and cached names are answered, p99 under
  5 ms (25 ms under ASan; on a machine other work keeps busy, within three
  times what it saw in the half second before the attack), and its new
  external names are answered NOERROR.

The attacks: a pod holding the health endpoint's connections open with
requests it never finishes, a TCP client that never reads its replies, one
that sends a byte at a time, new names at a domain whose server is silent,
new names at a slow one, names chosen to collide in the old unkeyed hash
tables, a client outside listen.allow, and one past the response rate
limit. (A forbidden syscall on a worker is test_privileges.py's.)
"""

import ctypes
import heapq
import http.client
import multiprocessing
import os
import re
import socket
import struct
import subprocess
import threading
import time
import urllib.request

import authority
import dnsmsg
import harness
from test_upstream import SITE, _rss_kib, _sanitized

# Each judges the other client's latency: no other test beside it (run.py -j).
ALONE = True

FRESH_ZONE = """$TTL 300
@ IN SOA ns.fresh.example. admin.fresh.example. 1 3600 600 86400 300
@ IN NS ns.fresh.example.
ns IN A 192.0.2.53
* IN A 192.0.2.77
*.pin IN TXT %s
""" % " ".join('"%s"' % (c * 230) for c in "abcd")  # about 1 KiB: 58 answers fill a slab
VICTIM = "127.0.0.2"
LOCAL_NAME = "db.prod.svc.cluster.local"   # a static record of the harness
CACHED_NAME = "www.site.example"


def _victim_main(port, attacking, stop, out):
    """The well-behaved client, in a process of its own (so the test's
    threads cannot hold it up): a local name and a cached external name in
    turn, and a new external name every tenth query, one at a time, each
    with a 2 s deadline, from VICTIM. Sends (latencies before the attack,
    latencies during it, failures, new names)."""
    control, latencies, failures, new_names, i = [], [], [], 0, 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((VICTIM, 0))
        s.settimeout(2)
        while not stop.is_set():
            i += 1
            if i % 10 == 0:
                new_names += 1
                name = "v%d-%d.fresh.example" % (os.getpid(), i)
            else:
                name = LOCAL_NAME if i % 2 else CACHED_NAME
            qid = i & 0xffff
            t0 = time.perf_counter()
            s.sendto(dnsmsg.build_query(name, "A", qid=qid), ("127.0.0.1", port))
            m = None
            try:
                while m is None:
                    data = s.recv(4096)
                    if struct.unpack("!H", data[:2])[0] == qid:
                        m = dnsmsg.parse(data)
            except socket.timeout:
                pass
            took = time.perf_counter() - t0
            if m is None or m.rcode_name != "NOERROR" or not m.answer:
                failures.append((name, m.describe() if m else "no reply in 2 s"))
            elif i % 10:
                (latencies if attacking.is_set() else control).append(took)
            time.sleep(0.005)
    out.send((control, latencies, failures, new_names))


class Victim:
    def __init__(self, port):
        ctx = multiprocessing.get_context("fork")
        self.attacking, self.stop = ctx.Event(), ctx.Event()
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_victim_main, args=(port, self.attacking, self.stop, send),
                                daemon=True)

    def start(self):
        """Start asking; the first half second is the control, without the attack."""
        self.proc.start()
        time.sleep(0.5)
        self.attacking.set()

    def finish(self):
        """Stop it; (control latencies, latencies under attack, failures, new names)."""
        self.stop.set()
        if not self.recv.poll(10):
            self.proc.kill()
            raise AssertionError("the other client did not report")
        result = self.recv.recv()
        self.proc.join(5)
        return result


def p95(values):
    values = sorted(values)
    return values[int(len(values) * 0.95)] if values else None


class SlowAuthority:
    """An authority for one zone that answers every A question with
    192.0.2.88 (TTL `ttl`) after `delay` seconds, or never when delay is
    None: one thread, replies held in a heap (thousands a second)."""

    def __init__(self, delay, ttl=300):
        self.delay = delay
        self.ttl = ttl
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.asked = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _reply(self, data):
        q = dnsmsg.parse(data)
        qend = 12 + len(dnsmsg.encode_name(q.question[0][0])) + 4
        ans = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, self.ttl, 4) + bytes([192, 0, 2, 88])
        return dnsmsg.header(struct.unpack("!H", data[:2])[0], 0x8580, qd=1, an=1) + \
            data[12:qend] + ans

    def _serve(self):
        due = []
        while not self.stopping:
            wait = max(0.0, min(0.1, due[0][0] - time.monotonic())) if due else 0.1
            self.sock.settimeout(wait if wait > 0 else 0.0001)
            try:
                data, peer = self.sock.recvfrom(4096)
                self.asked += 1
                if self.delay is not None:
                    heapq.heappush(due, (time.monotonic() + self.delay, self.asked,
                                         self._reply(data), peer))
            except (socket.timeout, BlockingIOError):
                pass
            except (OSError, IndexError, ValueError):
                continue
            while due and due[0][0] <= time.monotonic():
                _, _, reply, peer = heapq.heappop(due)
                try:
                    self.sock.sendto(reply, peer)
                except OSError:
                    pass

    def close(self):
        self.stopping = True
        self.thread.join(2)
        self.sock.close()


class Watch(threading.Thread):
    """Scrapes /metrics every 100 ms: the oldest worker or resolver heartbeat
    seen, and the largest value of each gauge asked for."""

    def __init__(self, mport, pid, gauges=()):
        super().__init__(daemon=True)
        self.mport, self.pid, self.gauges = mport, pid, gauges
        self.max_age = 0.0
        self.max_gauge = {g: 0.0 for g in gauges}
        self.max_rss = 0
        self.scrapes = 0
        self.stopping = False

    def run(self):
        while not self.stopping:
            text = metrics(self.mport)
            ages = [float(v) for loop, v in re.findall(
                r'(?m)^localdns_loop_heartbeat_age_seconds\{loop="(worker\d+|resolver)"\} (\S+)$',
                text)]
            assert ages, text
            self.max_age = max([self.max_age] + ages)
            for g in self.gauges:
                self.max_gauge[g] = max(self.max_gauge[g], metric(text, g))
            self.max_rss = max(self.max_rss, _rss_kib(self.pid))
            self.scrapes += 1
            time.sleep(0.1)


def metrics(mport):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as h:
        return h.read().decode()


def metric(text, name):
    m = re.search(r"(?m)^%s (\S+)$" % re.escape(name), text)
    assert m, "no %s in:\n%s" % (name, text)
    return float(m.group(1))


class Setting:
    """A daemon forwarding to an authority for site.example and fresh.example
    (plus any extra forward zones), with metrics on, the cached name warm."""

    def __init__(self, env, forward_zones=None, **over):
        self.env = env
        self.up = authority.Authority({"site.example.": SITE, "fresh.example.": FRESH_ZONE})
        self.up.start()
        self.mport = harness.free_port()
        cfg = {"servers": [self.up.addr], "timeout": "2s"}
        if forward_zones:
            cfg["forward_zones"] = forward_zones
        upstream = over.pop("upstream", {})
        cfg.update(upstream)
        self.d = env.start(upstream=cfg, metrics={"listen": "127.0.0.1:%d" % self.mport}, **over)
        warm = dnsmsg.udp_query("127.0.0.1", self.d.port, CACHED_NAME, "A", source=VICTIM)
        assert warm.rcode_name == "NOERROR", warm.describe()
        self.sanitized = _sanitized(env.binary)

    def close(self):
        self.up.close()

    def under_attack(self, attack, rss_bound_mib, gauges=()):
        """Run attack() while the victim asks and the watch scrapes; check
        the three promises; return (watch, metrics text after)."""
        time.sleep(0.3)  # the daemon's own start-up allocations settle
        before = _rss_kib(self.d.proc.pid)
        victim, watch = Victim(self.d.port), Watch(self.mport, self.d.proc.pid, gauges)
        victim.start()
        watch.start()
        try:
            attack()
            time.sleep(0.3)  # the victim asks once more after the attack's last packet
        finally:
            watch.stopping = True
            control, latencies, failures, new_names = victim.finish()
            watch.join(5)
        text = metrics(self.mport)
        assert self.d.alive(), self.d.tail()
        assert not failures, "the other client failed %d times: %s" % (
            len(failures), failures[:5])
        assert len(latencies) >= 30 and len(control) >= 10 and new_names >= 3, (
            len(control), len(latencies), new_names)
        # Under 5 ms (25 under ASan); on a machine other work keeps busy, no
        # worse than three times what the same client saw just before the
        # attack. The 95th percentile, not the 99th: the client asks one
        # query at a time, about every 5 ms, so each scheduling gap other
        # work makes on this shared 2-core machine delays one of its ~200
        # answers (a fresh-clone run saw three in a second: a p99 of 10 ms
        # against 2.5 ms before), while a worker the attacker slows delays
        # every answer it gives, far more than the ten p95 lets by. A single
        # hold-up delays one answer (p99 missed it too): the watch (max_age)
        # catches one of a second, the failures one of two.
        limit = max(0.025 if self.sanitized else 0.005, 3 * p95(control))
        assert p95(latencies) < limit, (
            "the other client's p95 was %.1f ms (%.1f ms before the attack)"
            % (p95(latencies) * 1000, p95(control) * 1000))
        assert watch.scrapes >= 3 and watch.max_age < 1.0, (
            "a loop did not turn for %.2f s" % watch.max_age)
        grown = watch.max_rss - before
        if not self.sanitized:  # ASan's shadow memory and quarantine say nothing
            assert grown <= rss_bound_mib * 1024, "RSS grew %d KiB" % grown
        return watch, text


def flood(env, port, names, rate, seconds, timeout=3):
    """dnsgen from 127.0.0.1: these names at this rate, each asked once."""
    r, summary = harness.dnsgen(env, port, [(n, "A") for n in names], "-Q", str(rate),
                                "-l", str(seconds), "-q", "2000", "-t", str(timeout))
    return r, summary


# ---- the health and metrics endpoints --------------------------------------------

def probe(port, path="/health", source="127.0.0.1"):
    """What the kubelet's httpGet probe sees (a new connection, timeoutSeconds
    2 as the chart sets it): the status, or what went wrong."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=2, source_address=(source, 0))
    try:
        c.request("GET", path)
        return c.getresponse().status
    except (OSError, http.client.HTTPException) as e:
        return repr(e)
    finally:
        c.close()


class Trickle(threading.Thread):
    """A pod that holds HTTP connections open (issue 22's lockout): each
    sends a request line and then one header line a second, never ending
    its request. It keeps `want` connections from `source`, opening a new
    one in place of each the server closes; `lived` holds how long each
    closed one lasted, `opened` how many it opened."""

    def __init__(self, port, source, want):
        super().__init__(daemon=True)
        self.port, self.source, self.want = port, source, want
        self.conns, self.lived, self.opened = [], [], 0
        self.stopping = False

    def _open(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((self.source, 0))
        try:
            s.connect(("127.0.0.1", self.port))
            s.send(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            s.close()
            return
        s.setblocking(False)
        self.opened += 1
        self.conns.append((s, time.monotonic()))

    def _still_open(self, s):
        try:
            if s.recv(4096) == b"":
                return False
        except BlockingIOError:
            pass
        except OSError:
            return False
        try:
            s.send(b"X-Slow: %d\r\n" % self.opened)
            return True
        except OSError:
            return False

    def run(self):
        while not self.stopping:
            kept = []
            for s, since in self.conns:
                if self._still_open(s):
                    kept.append((s, since))
                else:
                    self.lived.append(time.monotonic() - since)
                    s.close()
            self.conns = kept
            while len(self.conns) < self.want:
                self._open()
            time.sleep(1)

    def stop(self):
        self.stopping = True
        self.join(5)
        now = time.monotonic()
        longest = max([now - since for _, since in self.conns] + self.lived)
        for s, _ in self.conns:
            s.close()
        return longest


def http_warnings(d):
    """Warning lines the HTTP endpoints logged."""
    return [l for l in d.stderr().splitlines() if "level=warn" in l and "http" in l]


def test_a_pod_holding_http_connections_cannot_starve_the_probes(env):
    # Issue 22, item 1: 40 connections from one pod that never finish their
    # request took every place the health endpoint had (32, closed only when
    # idle), so the kubelet's probes failed and it restarted localdns in a
    # loop. Now one address may hold 8, each request must be done within 5
    # s of its connection (or of the previous reply), and what the server
    # closes is logged once, not once a connection.
    hport = harness.free_port()
    st = Setting(env, health={"listen": "127.0.0.1:%d" % hport})
    try:
        result = {}

        def attack():
            trickle = Trickle(hport, "127.0.0.5", 40)
            trickle.start()
            probes, end = [], time.monotonic() + 9
            while time.monotonic() < end:
                probes.append(probe(hport))
                time.sleep(0.5)
            result.update(longest=trickle.stop(), probes=probes, opened=trickle.opened)

        _, text = st.under_attack(attack, rss_bound_mib=8)
        failed = [p for p in result["probes"] if p != 200]
        assert not failed, "%d of %d probes failed: %s" % (
            len(failed), len(result["probes"]), failed[:5])
        # every request was cut at its deadline, sending or not
        assert result["longest"] < 7, "a connection lasted %.1f s" % result["longest"]
        closed = metric(text, 'localdns_http_closed_total{reason="deadline"}')
        refused = metric(text, 'localdns_http_refused_total')
        assert closed >= 8 and refused >= 32, (closed, refused, result["opened"])
        # hundreds of requests refused or cut: a line for the first, the
        # rest counted in a line a minute
        lines = http_warnings(st.d)
        assert 1 <= len(lines) <= 3, "%d lines:\n%s" % (len(lines), "\n".join(lines[:10]))
    finally:
        st.close()


test_a_pod_holding_http_connections_cannot_starve_the_probes.timeout = 60


# ---- TCP ------------------------------------------------------------------------

def test_tcp_client_that_never_reads_its_replies(env):
    # 40 connections (the client may have 32), each sending 300 queries for
    # a 6 KB local answer and reading nothing. A connection stops being read
    # while replies wait for its socket (at most one turn's 16 answers are
    # made), the kernel's buffer is fixed at 64 KiB, and what waits in
    # localdns, all connections together, is capped (64 KiB here): the
    # connections holding the most are closed.
    st = Setting(env, listen={"tcp_max_connections": 256, "tcp_max_connections_per_client": 32,
                              "tcp_output_budget": "64KiB"})
    conns = []
    try:
        def attack():
            query = dnsmsg.frame(dnsmsg.build_query("bigtxt.prod.svc.cluster.local", "TXT"))
            for _ in range(40):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.bind(("127.0.0.1", 0))
                s.connect(("127.0.0.1", st.d.port))
                s.setblocking(False)
                conns.append(s)
            # every connection accepted or refused before any reply can
            # close one and free a place (then the count would be a race)
            deadline = time.monotonic() + 10
            while True:
                text = metrics(st.mport)
                seen = (metric(text, "localdns_tcp_connections") +
                        metric(text, 'localdns_tcp_refused_total{reason="per_client"}'))
                if seen >= 40:
                    break
                assert time.monotonic() < deadline, "only %d of 40 connections seen" % seen
                time.sleep(0.05)
            for s in conns:
                try:
                    s.send(query * 300)  # what the kernel takes; the rest is never sent
                except OSError:
                    pass  # refused at accept (over the client's 32)
            time.sleep(1.5)

        watch, text = st.under_attack(attack, rss_bound_mib=8,
                                      gauges=("localdns_tcp_output_bytes",))
        tcp = " ".join(l for l in text.splitlines() if l.startswith("localdns_tcp"))
        assert metric(text, 'localdns_tcp_refused_total{reason="per_client"}') == 8, tcp
        assert metric(text, 'localdns_tcp_closed_total{reason="output_budget"}') > 0, tcp
        # past the budget only by what one addition brought (a turn's 16
        # answers of 6 KB) before the biggest holders were closed
        assert watch.max_gauge["localdns_tcp_output_bytes"] <= (64 + 100) * 1024, watch.max_gauge
    finally:
        for s in conns:
            s.close()
        st.close()


test_tcp_client_that_never_reads_its_replies.timeout = 40


def kernel_tcp_bytes(port):
    """Bytes the kernel holds for localdns's TCP connections on port, in
    their receive and send queues (ss's skmem: rmem_alloc + wmem_queued)."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", "( sport = :%d )" % port],
                         capture_output=True, text=True, timeout=5).stdout
    return sum(int(r) + int(w) for r, w in
               re.findall(r"skmem:\(r(\d+),rb\d+,t\d+,tb\d+,f\d+,w(\d+)", out))


def connections_on_worker_0(d, port, source, want, tries=200):
    """want connections from source that worker 0 serves (and one more that
    worker 1 serves, or None): worker 1 is held stopped while each
    connection asks once, so those that get an answer are worker 0's."""
    query = dnsmsg.frame(dnsmsg.build_query(LOCAL_NAME, "A"))
    mine, other = [], None
    with harness.StoppedThread(harness.thread_id(d.proc.pid, "worker/1")):
        for _ in range(tries):
            if len(mine) == want and other:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind((source, 0))
            s.connect(("127.0.0.1", port))
            s.sendall(query)
            s.settimeout(0.3)
            try:
                answered = len(s.recv(4096)) > 0
            except socket.timeout:
                answered = False
            if answered and len(mine) < want:
                mine.append(s)
            elif not answered and other is None:
                other = s
            else:
                s.close()
    assert len(mine) == want and other, (len(mine), other)
    return mine, other


def test_tcp_budget_counts_the_kernel_and_closes_the_heaviest_of_any_worker(env):
    # Issue 22, item 6: connections that never read held about 217 KiB each
    # in the kernel's queues, outside localdns_tcp_output_bytes; and a
    # worker past the budget closed its own heaviest connection, however
    # light, while another worker held the heavy ones. Here 12 connections
    # on worker 0 never read (each ends up holding a turn's 16 answers of 6
    # KB, the budget closing the heaviest); then a reader on worker 1 asks
    # for just enough large answers to go past the budget, fewer than 16,
    # reading them a moment later. The kernel's send queues now count
    # (SIOCOUTQ), accepted sockets get small buffers, and worker 1 has
    # worker 0 close its heaviest instead of closing its own lighter one.
    budget, answer = 1024 * 1024, 6 * 1024
    st = Setting(env, listen={"tcp_max_connections": 256, "tcp_max_connections_per_client": 64,
                              "tcp_output_budget": "1MiB"})
    flooders, reader = connections_on_worker_0(st.d, st.d.port, "127.0.0.1", 12)
    conns = flooders + [reader]
    closes = 'localdns_tcp_closed_total{reason="output_budget"}'
    try:
        result = {"kernel": 0}
        big = dnsmsg.frame(dnsmsg.build_query("bigtxt.prod.svc.cluster.local", "TXT", qid=9))

        def attack():
            for s in flooders:
                s.setblocking(False)
                try:
                    s.send(big * 300)
                except OSError:
                    pass
            time.sleep(1)
            text = metrics(st.mport)
            margin = budget - metric(text, "localdns_tcp_output_bytes")
            result.update(margin=margin, closes_before=metric(text, closes))
            result["kernel"] = max(result["kernel"], kernel_tcp_bytes(st.d.port))
            # its socket's and its own buffers take about 4 KB less than asked
            asked = int((margin + 10 * 1024) // answer) + 1
            reader.sendall(big * asked)
            time.sleep(0.5)
            result["kernel"] = max(result["kernel"], kernel_tcp_bytes(st.d.port))
            reader.settimeout(5)
            got, deadline = b"", time.monotonic() + 10
            while got.count(b"\x00\x09\x85") < asked and time.monotonic() < deadline:
                try:
                    chunk = reader.recv(65536)
                except OSError as e:
                    result["reader"] = repr(e)
                    break
                if not chunk:
                    result["reader"] = "closed after %d bytes" % len(got)
                    break
                got += chunk
            result.update(asked=asked, answers=got.count(b"\x00\x09\x85"))

        watch, text = st.under_attack(attack, rss_bound_mib=8,
                                      gauges=("localdns_tcp_output_bytes",))
        tcp = " ".join(l for l in text.splitlines() if l.startswith("localdns_tcp"))
        # fewer than a flooder's 16: the reader holds less than any of them
        assert result["asked"] < 16, (result, tcp)
        assert result["answers"] == result["asked"], (result, tcp)
        # the reader went past the budget: a connection of worker 0 paid
        assert metric(text, closes) > result["closes_before"], (result, tcp)
        # in localdns and in the kernel's send queues: the budget, past it by
        # one turn's replies at most; the receive queues are 16 KiB each
        assert watch.max_gauge["localdns_tcp_output_bytes"] <= budget + 100 * 1024, watch.max_gauge
        assert result["kernel"] <= budget + len(conns) * 16 * 1024, result["kernel"]
    finally:
        for s in conns:
            s.close()
        st.close()


test_tcp_budget_counts_the_kernel_and_closes_the_heaviest_of_any_worker.timeout = 60


def test_tcp_client_that_sends_a_byte_at_a_time(env):
    st = Setting(env, listen={"tcp_max_connections": 256, "tcp_query_timeout": "1s"})
    conns = []
    try:
        def attack():
            query = dnsmsg.frame(dnsmsg.build_query(LOCAL_NAME, "A"))
            for _ in range(20):
                conns.append(socket.create_connection(("127.0.0.1", st.d.port), timeout=3))
            closed_at = {}
            start = time.monotonic()
            for i in range(len(query)):  # never a whole query within 1 s
                for k, s in enumerate(conns):
                    if k in closed_at:
                        continue
                    try:
                        s.send(query[i:i + 1])
                    except OSError:
                        closed_at[k] = time.monotonic() - start
                if len(closed_at) == len(conns):
                    break
                time.sleep(0.2)
            for k, s in enumerate(conns):
                s.settimeout(3)
                try:
                    s.recv(16)  # EOF once localdns closed it
                except OSError:
                    pass
            assert len(closed_at) == len(conns) or all(
                s.recv(16) == b"" for k, s in enumerate(conns) if k not in closed_at)

        _, text = st.under_attack(attack, rss_bound_mib=8)
        assert metric(text, 'localdns_tcp_closed_total{reason="slow_query"}') == 20, text
    finally:
        for s in conns:
            s.close()
        st.close()


test_tcp_client_that_sends_a_byte_at_a_time.timeout = 40


def tcp_answered(port, source, name=LOCAL_NAME, host="127.0.0.1"):
    """One query over a new TCP connection from source: the reply, or what went wrong."""
    try:
        with socket.socket(dnsmsg.family_of(host), socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.bind((source, 0))
            s.connect((host, port))
            s.sendall(dnsmsg.frame(dnsmsg.build_query(name, "A", qid=77)))
            head = b""
            while len(head) < 2:
                chunk = s.recv(2 - len(head))
                if not chunk:
                    return "closed without a reply"
                head += chunk
            body = b""
            while len(body) < struct.unpack("!H", head)[0]:
                chunk = s.recv(65535)
                if not chunk:
                    return "closed mid-reply"
                body += chunk
            return dnsmsg.parse(body)
    except OSError as e:
        return repr(e)


def all_answered(answers, who):
    """Every one of tcp_answered's results a NOERROR reply."""
    bad = [a if isinstance(a, str) else a.describe() for a in answers
           if isinstance(a, str) or a.rcode_name != "NOERROR"]
    assert not bad, "%s: %s" % (who, bad)


def silent_connections(port, source, n):
    """n connections from source that never send a byte."""
    conns = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        conns.append(s)
    return conns


def closed_by_peer(s, wait):
    """Whether the other end closed s within wait seconds."""
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_silent_tcp_connections_cannot_lock_out_an_allowed_client(env):
    # Issue 22, item 5: listen.allow was checked per query, not at accept,
    # and a connection that never sends lived for the idle timeout (10 s):
    # 42 silent connections from outside the list took every place (32
    # here) and the allowed client's TCP queries were refused at accept. Now
    # an outsider is closed at accept, and a connection must bring its first
    # query within listen.tcp_query_timeout, as any query must.
    st = Setting(env, listen={"allow": ["127.0.0.2", "127.0.0.3"], "tcp_max_connections": 32,
                              "tcp_max_connections_per_client": 16, "tcp_query_timeout": "1s"})
    conns = []
    try:
        result = {}

        def attack():
            # three outside addresses (each within the per-client cap), then
            # an allowed one that never asks
            result["refused_before"] = metric(
                metrics(st.mport), 'localdns_tcp_refused_total{reason="not_allowed"}')
            outsiders = [s for a in ("127.0.1.1", "127.0.1.2", "127.0.1.3")
                         for s in silent_connections(st.d.port, a, 14)]
            insiders = silent_connections(st.d.port, "127.0.0.3", 8)
            opened = time.monotonic()
            conns.extend(outsiders + insiders)
            answers = [tcp_answered(st.d.port, VICTIM) for _ in range(10)]
            result["answers"] = answers
            # within the 1 s deadline and a sweep, long before the 10 s idle timeout
            result["insiders_closed"] = sum(
                closed_by_peer(s, max(0.01, opened + 3 - time.monotonic())) for s in insiders)
            result["outsiders_closed"] = sum(closed_by_peer(s, 0.01) for s in outsiders)

        _, text = st.under_attack(attack, rss_bound_mib=8)
        all_answered(result["answers"], "the allowed client's TCP queries")
        assert result["outsiders_closed"] == 42 and result["insiders_closed"] == 8, result
        tcp = " ".join(l for l in text.splitlines() if l.startswith("localdns_tcp"))
        refused = metric(text, 'localdns_tcp_refused_total{reason="not_allowed"}')
        assert refused - result["refused_before"] == 42, tcp
        assert metric(text, 'localdns_tcp_closed_total{reason="silent"}') == 8, tcp
    finally:
        for s in conns:
            s.close()
        st.close()


test_silent_tcp_connections_cannot_lock_out_an_allowed_client.timeout = 40


class InNetns:
    """The calling thread, and the processes and threads it starts
    meanwhile, in a network namespace of its own with lo up and these
    addresses on it (IPv6 pods of one /64, which the root namespace's lo
    cannot hold)."""

    CLONE_NEWNET = 0x40000000

    def __init__(self, addresses):
        self.name, self.addresses = harness.netns_name("hostile"), addresses
        self.libc = ctypes.CDLL(None, use_errno=True)

    def _setns(self, fd):
        if self.libc.setns(fd, self.CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")

    def __enter__(self):
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True,
                       timeout=10)
        harness.track_netns(self.name)
        subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True,
                       capture_output=True, timeout=10)
        for a in self.addresses:
            subprocess.run(["ip", "-n", self.name, "addr", "add", a + "/128", "dev", "lo",
                            "nodad"], check=True, capture_output=True, timeout=10)
        self.home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        fd = os.open("/var/run/netns/" + self.name, os.O_RDONLY)
        try:
            self._setns(fd)
        finally:
            os.close(fd)
        return self

    def __exit__(self, *exc):
        self._setns(self.home)
        os.close(self.home)
        harness.delete_netns(self.name)


def test_ipv6_pods_of_one_64_are_different_clients(env):
    # Issue 22, item 4: clients were keyed by IPv6 /64, but Kubernetes gives
    # a node's pods one /64 (some CNIs put several nodes' pods in one): one
    # IPv6 pod used up the per-client TCP and upstream shares of every IPv6
    # pod of its node. Pods are now told apart by address
    # (listen.ipv6_client_prefix_length, 128 by default).
    server, attacker, victim = "fd00:53::1", "fd00:53::2", "fd00:53::3"
    with InNetns([server, attacker, victim]):
        st = Setting(env, listen={"addresses": ["127.0.0.1", server],
                                  "tcp_max_connections_per_client": 4})
        conns = []
        try:
            result = {}

            def attack():
                # the attacker takes its 4 places (and is refused 2 more)
                for _ in range(6):
                    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
                    s.bind((attacker, 0))
                    s.connect((server, st.d.port))
                    conns.append(s)
                result["answers"] = []
                for _ in range(10):   # over a second or so: enough of the victim's queries
                    time.sleep(0.1)
                    result["answers"].append(tcp_answered(st.d.port, victim, host=server))

            _, text = st.under_attack(attack, rss_bound_mib=8)
            all_answered(result["answers"], "the other IPv6 pod's TCP queries")
            assert metric(text, 'localdns_tcp_refused_total{reason="per_client"}') == 2, text
        finally:
            for s in conns:
                s.close()
            st.close()


test_ipv6_pods_of_one_64_are_different_clients.timeout = 40


# ---- the resolver ---------------------------------------------------------------

def test_new_names_at_a_silent_domain(env):
    # The attacker's questions never come back: without a share per client
    # they would take every place libunbound has, for minutes.
    proxy = SlowAuthority(None)
    st = Setting(env, forward_zones={"silent.example": ["127.0.0.1:%d" % proxy.port]})
    try:
        def attack():
            names = ["s%05d.silent.example" % i for i in range(6000)]
            r, summary = flood(env, st.d.port, names, 2000, 3)
            assert r["servfail"] + r["noerror"] == r["received"] and r["received"] > 0, summary

        _, text = st.under_attack(attack, rss_bound_mib=48)
        assert metric(text, "localdns_upstream_client_limited_total") > 0, text
        assert metric(text, "localdns_upstream_resolving") <= 1024, text
    finally:
        st.close()
        proxy.close()


test_new_names_at_a_silent_domain.timeout = 60


def test_one_client_flooding_slow_misses(env):
    # An upstream that takes 1.5 s for the attacker's domain: its questions
    # pile up; the other client's new names still go out and come back.
    proxy = SlowAuthority(1.5)
    st = Setting(env, forward_zones={"slow.example": ["127.0.0.1:%d" % proxy.port]})
    try:
        def attack():
            names = ["m%05d.slow.example" % i for i in range(6000)]
            r, summary = flood(env, st.d.port, names, 2000, 3)
            assert r["received"] > 0, summary

        _, text = st.under_attack(attack, rss_bound_mib=48)
        assert metric(text, "localdns_upstream_client_limited_total") > 0, text
    finally:
        st.close()
        proxy.close()


test_one_client_flooding_slow_misses.timeout = 60


def test_new_names_flooding_the_worker_that_runs_the_resolver(env):
    # One worker (a one-CPU node): the resolver's turns are that worker's
    # (upstream.resolver auto), so the attacker's misses are taken, asked and
    # answered between the victim's hits. The victim's p99 stays within the
    # same promise as with a resolver thread of its own.
    st = Setting(env, listen={"workers": 1})
    try:
        assert "runs_on=worker/0" in st.d.stderr(), st.d.tail()

        def attack():
            names = ["w%05d.fresh.example" % i for i in range(9000)]
            r, summary = flood(env, st.d.port, names, 3000, 3)
            assert r["received"] > 0 and r["noerror"] > 0, summary

        _, text = st.under_attack(attack, rss_bound_mib=48)
        assert metric(text, "localdns_upstream_queries_total") >= 1000, text
    finally:
        st.close()


test_new_names_flooding_the_worker_that_runs_the_resolver.timeout = 60


def test_hot_names_of_many_sizes_cannot_pin_the_caches_memory(env):
    # The cache keeps its entries in 64 KiB slabs, one entry size a slab, and
    # a slab stays while one entry in it lives. A client asking for ~1 KiB
    # answers of one name length after another, keeping one name of about
    # every slab hot, pinned slab after slab (docs/performance.md, item 20).
    # The pool stops at cache.size and a quarter plus 32 slabs; past it, an
    # entry that finds no slot goes to the heap, charged 2 KiB, so every
    # size is still cached. Seen to fail at ceef748 (no limit: the slabs of
    # a 1 MiB cache reached 10.56 MiB) and at f6327f8 (the limit rejected those
    # answers: the sizes after it were not cached).
    st = Setting(env, cache={"size": "1MiB"})
    sizes, names, pin_every, reask_every = 14, 1000, 50, 200
    limit = (1 << 20) + (1 << 20) // 4 + 32 * 65536
    try:
        queries, pinned = [], []
        for size in range(sizes):
            pad = ("p" * 16 + ".") * size  # 17 bytes more an entry: another slab size
            for i in range(names):
                name = "%sn%04d.pin.fresh.example" % (pad, i)
                queries.append((name, "TXT"))
                if i % pin_every == 0:
                    pinned.append(name)
                if i % reask_every == reask_every - 1:
                    queries.extend((n, "TXT") for n in pinned)  # referenced: kept

        def attack():
            r, summary = harness.dnsgen(env, st.d.port, queries, "-Q", "5000", "-n",
                                        str(len(queries)), "-l", "15", "-q", "500")
            assert r["noerror"] >= len(queries) * 0.99, summary

        watch, text = st.under_attack(attack, rss_bound_mib=48,
                                      gauges=("localdns_cache_slab_bytes",))
        peak = watch.max_gauge["localdns_cache_slab_bytes"]
        assert peak <= limit, "the slabs reached %.2f MiB for a 1 MiB cache" % (peak / 2**20)
        assert metric(text, "localdns_cache_slab_overflows_total") > 0, text

        # Every size is still cached: the first size's hot name, the last
        # size's (which came after the limit), and a new name of the last
        # size, asked twice, go upstream once in all.
        asked = metric(text, "localdns_upstream_queries_total")
        last = "%sx0000.pin.fresh.example" % pad
        upstream = []
        for name in (pinned[0], pinned[-1], last, last):
            m = dnsmsg.udp_query("127.0.0.1", st.d.port, name, "TXT", edns=True)
            assert m.rcode_name == "NOERROR" and m.answer and not m.tc, m.describe()
            upstream.append(metric(metrics(st.mport), "localdns_upstream_queries_total") - asked)
        assert upstream == [0, 0, 1, 1], upstream
    finally:
        st.close()


test_hot_names_of_many_sizes_cannot_pin_the_caches_memory.timeout = 90


def _tcp_replies(sock, n, within):
    """Read n framed replies from sock within `within` seconds: {id: message}."""
    sock.settimeout(within)
    replies = {}
    deadline = time.monotonic() + within
    while len(replies) < n and time.monotonic() < deadline:
        try:
            m = dnsmsg.parse(dnsmsg.tcp_read_msg(sock))
        except OSError:
            break
        replies[m.id] = m
    return replies


def test_a_few_sources_holding_waiters_on_a_slow_name(env):
    # Five sources each send 5,000 queries for one name whose server never
    # answers: more than the 16,384 places for waiting clients together.
    # Each source may hold only its share of them (1,024), so a handful of
    # sources, forged or not, cannot fill the table; what a source asks past
    # its share is answered at once. Every query is answered (SERVFAIL at
    # the deadline when nothing better exists), none dropped; a TCP client's
    # 64 new names at the same time are all answered too, so its connection
    # is read again (a lost reply used to keep its count of waiting queries
    # at the cap), and the other client's new names go out and come back.
    proxy = SlowAuthority(None)
    st = Setting(env, forward_zones={"silent.example": ["127.0.0.1:%d" % proxy.port]})
    sources = ["127.0.0.%d" % (10 + i) for i in range(5)]
    try:
        results, tcp = {}, {}

        def source(addr):
            results[addr] = harness.dnsgen(env, st.d.port, [("hold.silent.example", "A")],
                                           "-S", addr, "-n", "5000", "-Q", "5000", "-l", "3",
                                           "-q", "5000", "-t", "4")

        def attack():
            threads = [threading.Thread(target=source, args=(a,)) for a in sources]
            for t in threads:
                t.start()
            time.sleep(1.0)  # the sources' queries wait for their 2 s deadline
            with dnsmsg.tcp_connect("127.0.0.1", st.d.port, timeout=5) as s:
                s.sendall(b"".join(dnsmsg.frame(dnsmsg.build_query(
                    "t%02d.silent.example" % i, "A", qid=i)) for i in range(64)) +
                    dnsmsg.frame(dnsmsg.build_query(LOCAL_NAME, "A", qid=64)))
                tcp.update(_tcp_replies(s, 65, 6))
            for t in threads:
                t.join()

        _, text = st.under_attack(attack, rss_bound_mib=48)
        for addr in sources:
            r, summary = results[addr]
            assert r["sent"] == 5000 and r["received"] == 5000 and r["lost"] == 0, summary
            assert r["servfail"] == 5000, summary
        assert len(tcp) == 65, "TCP: %d of 65 replies" % len(tcp)
        assert tcp[64].rcode_name == "NOERROR" and tcp[64].answer, tcp[64].describe()
        assert all(tcp[i].rcode_name == "SERVFAIL" for i in range(64))
        # past its share, each source was answered at once
        limited = metric(text, "localdns_upstream_client_limited_total")
        assert limited >= 5 * (5000 - 1024), text
        assert metric(text, "localdns_upstream_dropped_total") == 0, text
    finally:
        st.close()
        proxy.close()


test_a_few_sources_holding_waiters_on_a_slow_name.timeout = 60


def test_one_client_triggering_refreshes_of_many_names(env):
    # 300 names cached with a 20 s TTL, all hit by one client in their last
    # two seconds, so that each hit hands out a background refresh
    # (prefetch). A refresh is charged to the client whose hit triggered
    # it: with max_pending_per_client 10 at most 10 go upstream at once
    # (each takes the upstream 0.3 s, below libunbound's first retransmit,
    # and the 300 hits come within 0.1 s), the others are counted as
    # client_limited, and the other client is not disturbed.
    proxy = SlowAuthority(0, ttl=20)
    st = Setting(env, forward_zones={"slow.example": ["127.0.0.1:%d" % proxy.port]},
                 upstream={"max_pending_per_client": 10})
    names = [("p%03d.slow.example" % i, "A") for i in range(300)]
    try:
        # cached at once (the upstream answers at once meanwhile), from 3
        # sources asking 2 at a time: within a client's share even while
        # the resolver counts as busy (a quarter of 10)
        warm = {}

        def cache_names(k):
            warm[k] = harness.dnsgen(env, st.d.port, names[100 * k:100 * k + 100],
                                     "-S", "127.0.0.%d" % (100 + k), "-n", "100", "-q", "2",
                                     "-t", "3")
        threads = [threading.Thread(target=cache_names, args=(k,)) for k in range(3)]
        first = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        last = time.monotonic()
        for r, summary in warm.values():
            assert r["noerror"] == 100, summary
        proxy.delay = 0.3
        # The cache counts whole seconds of CLOCK_MONOTONIC (time.monotonic's
        # clock): an entry stored in second S hands out a refresh from
        # second S+18 and expires at S+20. Stored within two seconds
        # (floor(first)..floor(last)), every entry is in its last two in
        # second floor(last)+18, when the attack starts (0.1 s in, past the
        # coarse clock's lag) and ends (0.1 s at 3,000 a second).
        assert int(last) - int(first) <= 1, \
            "caching took %.1f s: no one second is in every entry's last two" % (last - first)
        aim = int(last) + 18.1
        counts = {}

        def attack():
            time.sleep(max(0.0, aim - time.monotonic()))
            counts["before"] = metrics(st.mport)
            r, summary = harness.dnsgen(env, st.d.port, names, "-n", "300", "-Q", "3000",
                                        "-q", "300", "-t", "2")
            assert r["noerror"] == 300, summary  # hits: answered from the cache
            counts["after"] = metrics(st.mport)
            counts["taken"] = _refreshes_taken(st.mport, counts["before"], counts["after"])

        st.under_attack(attack, rss_bound_mib=16)
        # the hits' refreshes as the attack's end counted them (the other
        # client's hits may hand out one later); what became of them, once taken
        delta = {k: metric(counts[at], k) - metric(counts["before"], k)
                 for k, at in (("localdns_upstream_queries_total", "taken"),
                               ("localdns_upstream_client_limited_total", "taken"),
                               ("localdns_cache_prefetches_total", "after"))}
        assert delta["localdns_cache_prefetches_total"] >= 250, delta
        # the refreshes that went: its 10, and the other client's few new names
        assert delta["localdns_upstream_queries_total"] <= 10 + 10, delta
        assert delta["localdns_upstream_client_limited_total"] >= \
            delta["localdns_cache_prefetches_total"] - 10, delta
    finally:
        st.close()
        proxy.close()


test_one_client_triggering_refreshes_of_many_names.timeout = 60


def _refreshes_taken(mport, before, after, timeout=5.0):
    """The metrics once the resolver has taken the refreshes the hits
    between before and after handed out, each either limited or asked.
    A worker answers a hit, then puts its refresh in the resolver thread's
    ring: the client can have its last answer, and scrape, before the
    resolver has taken them all (a CI run saw 289 limited of 300 where all
    but 10 were). Both counts only grow, so this waits for at most 10 not
    limited; when more than 10 went upstream that never comes, and the
    last scrape is returned for the test's assertion to fail on."""
    key = "localdns_upstream_client_limited_total"
    handed = metric(after, "localdns_cache_prefetches_total") - \
        metric(before, "localdns_cache_prefetches_total")
    deadline = time.monotonic() + timeout
    while True:
        now = metrics(mport)
        if metric(now, key) - metric(before, key) >= handed - 10 or time.monotonic() > deadline:
            return now
        time.sleep(0.01)


def _fnv1a(data, h=0xcbf29ce484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def _colliding_names(n, bits=8):
    """Names whose unkeyed FNV-1a (the cache's and the resolver's hash before
    they were keyed) agree in their low bits: one bucket of a 256-bucket
    table (the flight table's first size)."""
    out, target, i = [], None, 0
    while len(out) < n:
        name = "c%d.slow.example" % i
        wire = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
        h = _fnv1a(wire) & ((1 << bits) - 1)
        if target is None:
            target = h
        if h == target:
            out.append(name)
        i += 1
    return out


def test_names_chosen_to_collide(env):
    proxy = SlowAuthority(1.0)
    st = Setting(env, forward_zones={"slow.example": ["127.0.0.1:%d" % proxy.port]},
                 upstream={"max_pending_per_client": 65535})
    try:
        names = _colliding_names(800)

        def attack():
            r, summary = flood(env, st.d.port, names, 400, 2)
            assert r["noerror"] > 0, summary

        st.under_attack(attack, rss_bound_mib=48)
    finally:
        st.close()
        proxy.close()


test_names_chosen_to_collide.timeout = 60


# ---- who may ask, and how much ----------------------------------------------------

def test_client_outside_listen_allow_is_refused(env):
    st = Setting(env, listen={"allow": ["127.0.0.2"]})
    try:
        # the harness itself asked from 127.0.0.1: refused
        assert st.d.udp(LOCAL_NAME, "A").rcode_name == "REFUSED"

        def attack():
            r, summary = flood(env, st.d.port, [LOCAL_NAME, CACHED_NAME, "x.fresh.example"],
                               3000, 2)
            assert r["received"] == r["sent"] and r["rcode_other"] == r["sent"], summary

        _, text = st.under_attack(attack, rss_bound_mib=8)
        assert metric(text, "localdns_not_allowed_total") >= 6000 * 0.9, text
    finally:
        st.close()


test_client_outside_listen_allow_is_refused.timeout = 40


def test_client_past_the_response_rate_limit(env):
    # 3,000 queries a second from one address for two names, 200 answers of
    # each allowed a second: of the rest, every second one goes back
    # truncated (the client may retry over TCP), the others get nothing.
    # The other client is another /32 here.
    st = Setting(env, rrl={"responses_per_second": 200, "ipv4_prefix_length": 32})
    try:
        result = {}

        def attack():
            r, summary = flood(env, st.d.port, [LOCAL_NAME, CACHED_NAME], 3000, 2, timeout=1)
            result.update(r, summary=summary)

        _, text = st.under_attack(attack, rss_bound_mib=8)
        r = result
        slipped = metric(text, 'localdns_rrl_limited_total{action="slipped"}')
        dropped = metric(text, 'localdns_rrl_limited_total{action="dropped"}')
        assert r["truncated"] == slipped and r["lost"] == dropped, (r["summary"], text)
        # slip 2: every second limited response slips (one more per second
        # and answer at most)
        assert abs(slipped - dropped) <= 8, (slipped, dropped)
        # at most 200 a second of each answer passed whole (the run spans
        # three seconds at most)
        whole = r["received"] - r["truncated"]
        assert 0 < whole <= 2 * 200 * 3, r["summary"]
        # TCP is not limited: a truncated client gets its answer there
        assert st.d.tcp(LOCAL_NAME, "A").rcode_name == "NOERROR"
    finally:
        st.close()


test_client_past_the_response_rate_limit.timeout = 40


def test_a_neighbour_past_the_rate_limit_does_not_throttle_the_victim(env):
    # Issue 22, item 7: RRL counted per client network only (a /24, the
    # usual pod range of a node), so a flooder asking one name made the
    # victim, in the same /24, lose its answers to other names (all of them
    # with slip 0). Now a count is per network and answer (name, type,
    # rcode), as in BIND and Knot: the flooder's answer is limited, the
    # victim's are not.
    st = Setting(env, rrl={"responses_per_second": 200, "slip": 0})
    try:
        result = {}

        def attack():
            r, summary = flood(env, st.d.port, ["host.corp.internal"], 3000, 2, timeout=1)
            result.update(r, summary=summary)

        _, text = st.under_attack(attack, rss_bound_mib=8)
        r = result
        # the flooder's own answer is limited: 200 a second pass
        assert 0 < r["received"] <= 200 * 3 and r["lost"] > 0, r["summary"]
        assert metric(text, 'localdns_rrl_limited_total{action="dropped"}') == r["lost"], text
    finally:
        st.close()


test_a_neighbour_past_the_rate_limit_does_not_throttle_the_victim.timeout = 40


def test_rate_limit_counts_the_replies_the_resolver_sends(env):
    # Issue 22, item 7: replies the resolver sends later (names asked
    # upstream) were not counted, so a flood of new names went unlimited.
    # They are now, by the zone their NXDOMAIN names: random names in one
    # zone share a count.
    st = Setting(env, rrl={"responses_per_second": 200, "ipv4_prefix_length": 32},
                 upstream={"max_pending_per_client": 65535})
    try:
        result = {}

        def attack():
            names = ["r%05d.site.example" % i for i in range(6000)]
            r, summary = flood(env, st.d.port, names, 2000, 3, timeout=2)
            result.update(r, summary=summary)

        _, text = st.under_attack(attack, rss_bound_mib=48)
        r = result
        slipped = metric(text, 'localdns_rrl_limited_total{action="slipped"}')
        dropped = metric(text, 'localdns_rrl_limited_total{action="dropped"}')
        whole = r["received"] - r["truncated"]
        # NXDOMAIN for site.example: 200 a second whole, every second one of
        # the rest truncated (the run spans four seconds at most)
        assert 0 < whole <= 200 * 4 and r["truncated"] == slipped, (r["summary"], text)
        assert dropped > 0 and abs(slipped - dropped) <= 4, (slipped, dropped)
    finally:
        st.close()


test_rate_limit_counts_the_replies_the_resolver_sends.timeout = 60
