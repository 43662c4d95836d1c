"""dnstap (dnstap.*): every client query and reply as dnstap messages to a
real collector, decoded by real readers.

Collectors: fstrm_capture (fstrm-bin, libfstrm's own reader: the
bidirectional handshake on a unix socket or TCP) and golang-dnstap's
`dnstap` (its own Frame Streams code). Readers: BIND's dnstap-read and
golang-dnstap's `dnstap -r -j`, which also shows the `extra` field (the pod
behind the client). The counts are judged exactly: every query the daemon
received is either in a collector's file or counted in
localdns_dnstap_dropped_total.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import authority
import harness
from harness import wait_until

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

NODE = "node-a"
DB = "db.prod.svc.cluster.local"


class Collector:
    """A dnstap collector writing what it reads to a file: fstrm_capture, or
    golang-dnstap's `dnstap` with tool="golang"."""

    def __init__(self, out, path=None, port=None, tool="fstrm"):
        self.out, self.path, self.port, self.tool = out, path, port, tool
        if tool == "fstrm":
            argv = ["fstrm_capture", "-t", "protobuf:dnstap.Dnstap", "-w", out]
            argv += ["-u", path] if path else ["-a", "127.0.0.1", "-p", str(port)]
        else:
            argv = ["dnstap", "-j", "-w", out]  # JSON lines, written as they come
            argv += ["-u", path] if path else ["-l", "127.0.0.1:%d" % port]
        if path and os.path.exists(path):
            os.unlink(path)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        harness.track_process(self.proc)
        wait_until(self._listening, "the collector listening")

    def _listening(self):
        if self.path:
            return os.path.exists(self.path)
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0 or None

    def stop(self):
        """Ends it (it writes what it read and closes the file)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        harness.untrack_process(self.proc)
        return self.proc.stderr.read().decode(errors="replace")


def read_bind(path):
    """dnstap-read's one-line form: [(mnemonic, client, proto, qname/class/type)]."""
    text = subprocess.run(["dnstap-read", path], capture_output=True, text=True,
                          timeout=10).stdout
    out = []
    for line in text.splitlines():
        m = re.match(r"\S+ \S+ (\w\w) (\S+) (?:->|<-) \S+ (\w+) \d+b (\S+)", line)
        if m:
            out.append(m.groups())
    return out


def read_golang(path):
    """golang-dnstap's JSON, one object per message: of a Frame Streams file
    (its reader), or the file its collector wrote."""
    with open(path, "rb") as f:
        if f.read(1) == b"{":
            text = open(path).read()
        else:
            text = subprocess.run(["dnstap", "-r", path, "-j"], capture_output=True,
                                  text=True, timeout=10).stdout
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def read_ldns(path):
    """dnstap-ldns's YAML: one dict per message with its top-level fields,
    then the message's (which win: "type" is the message's type), as text."""
    text = subprocess.run(["dnstap-ldns", "-y", "-r", path], capture_output=True,
                          text=True, timeout=10).stdout
    out = []
    for doc in text.split("\n---\n"):
        fields = {}
        for line in doc.splitlines():
            m = re.match(r"^( {0,2})(\w+): (.*)$", line)
            if m and m.group(3) != "|":
                fields[m.group(2)] = m.group(3).strip('"')
        fields["text"] = doc
        out.append(fields)
    return out


def _fields(buf):
    """A protobuf message's fields: number -> value (varint or bytes; last one wins)."""
    out, i = {}, 0
    while i < len(buf):
        key, i = _varint(buf, i)
        if key & 7 == 0:
            out[key >> 3], i = _varint(buf, i)
        elif key & 7 == 2:
            n, i = _varint(buf, i)
            out[key >> 3], i = buf[i:i + n], i + n
        elif key & 7 == 5:
            out[key >> 3], i = buf[i:i + 4], i + 4
        else:
            raise AssertionError("wire type %d" % (key & 7))
    return out


def _varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7f) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def frames(path):
    """A Frame Streams file's data frames, each as (Dnstap fields, Message fields)."""
    data = open(path, "rb").read()
    i, out = 0, []
    while i + 4 <= len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        i += 4
        if n == 0:  # a control frame: its length, then it
            n = int.from_bytes(data[i:i + 4], "big")
            i += 4 + n
            continue
        top = _fields(data[i:i + n])
        out.append((top, _fields(top.get(14, b""))))
        i += n
    return out


def metric(port, name, labels=""):
    """The sum of name's samples (those whose labels include `labels`)."""
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=3).read()
    total = 0
    for line in body.decode().splitlines():
        if (line.startswith(name + " ") or line.startswith(name + "{")) and labels in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def start(env, tap, workers=1, **over):
    mport = harness.free_port()
    cfg = harness.deep_merge({"dnstap": tap, "listen": {"workers": workers},
                              "metrics": {"listen": "127.0.0.1:%d" % mport}}, over)
    d = env.start(**cfg)
    d.metrics_port = mport
    return d


def queries_received(d):
    return metric(d.metrics_port, "localdns_requests_total")


def test_dnstap_every_query_and_reply_read_by_dnstap_read(env):
    sock = os.path.join(env.tmp, "tap.sock")
    out = os.path.join(env.tmp, "tap.fstrm")
    c = Collector(out, path=sock)
    with authority.Authority({"site.example.": authority.zone_path("site.example.")}) as up:
        d = start(env, {"socket": sock, "identity": "node-x"},
                  upstream={"servers": [up.addr], "timeout": "2s"})
        for name, tcp in [(DB, False), ("nope.prod.svc.cluster.local", False), (DB, True),
                          ("www.site.example", False)]:
            r = d.tcp(name, "A") if tcp else d.udp(name, "A")
            assert r.rcode_name in ("NOERROR", "NXDOMAIN"), r.describe()
        wait_until(lambda: metric(d.metrics_port, "localdns_dnstap_sent_total")
                   >= 2 * queries_received(d), "every query's two messages sent")
        rc, _ = d.stop()
        assert rc == 0, d.tail()
    c.stop()
    msgs = read_bind(out)
    seen = {(kind, proto, q) for kind, _, proto, q in msgs}
    for want in [("CQ", "UDP", DB + "/IN/A"), ("CR", "UDP", DB + "/IN/A"),
                 ("CQ", "TCP", DB + "/IN/A"), ("CR", "TCP", DB + "/IN/A"),
                 ("CQ", "UDP", "nope.prod.svc.cluster.local/IN/A"),
                 ("CR", "UDP", "nope.prod.svc.cluster.local/IN/A"),
                 ("CQ", "UDP", "www.site.example/IN/A"), ("CR", "UDP", "www.site.example/IN/A")]:
        assert want in seen, (want, msgs)
    # the upstream answer is the one the client got, recorded by the resolver thread
    golang = read_golang(out)
    cr = [m for m in golang if m["message"]["type"] == "CLIENT_RESPONSE"
          and "www.site.example" in m["message"]["response_message"]]
    assert cr and "192.0.2.1" in cr[0]["message"]["response_message"], golang[-2:]
    assert all(m["identity"] == "node-x" for m in golang), golang[0]
    assert golang[0]["version"].startswith("localdns "), golang[0]
    # response_address: the listen address each client asked, over UDP and TCP, also on
    # the reply the resolver thread sent
    client = [m["message"] for m in golang if m["message"]["type"].startswith("CLIENT_")]
    assert client and all((m.get("response_address"), m.get("response_port")) ==
                          ("127.0.0.1", d.port) for m in client), client[:2]
    # every client query and every reply: two messages per query received
    assert len([m for m in msgs if m[0] == "CQ"]) == queries_received_at_exit(d), msgs


def queries_received_at_exit(d):
    m = re.search(r'msg=stopped queries=(\d+)', d.stderr())
    assert m, d.tail()
    return int(m.group(1))


def test_dnstap_to_a_tcp_collector(env):
    port = harness.free_port()
    out = os.path.join(env.tmp, "tap.fstrm")
    c = Collector(out, port=port)
    d = start(env, {"address": "127.0.0.1:%d" % port, "messages": ["client_response"]})
    for _ in range(5):
        assert d.udp(DB, "A").rcode_name == "NOERROR"
    wait_until(lambda: metric(d.metrics_port, "localdns_dnstap_sent_total")
               >= queries_received(d), "the replies sent")
    d.stop()
    c.stop()
    msgs = read_bind(out)
    assert msgs and {m[0] for m in msgs} == {"CR"}, msgs  # only what was asked for
    assert len(msgs) == queries_received_at_exit(d), msgs


def test_dnstap_to_golang_dnstap_over_tcp(env):
    # another Frame Streams implementation than libfstrm's own
    port = harness.free_port()
    out = os.path.join(env.tmp, "tap.json")
    c = Collector(out, port=port, tool="golang")
    d = start(env, {"address": "127.0.0.1:%d" % port})
    assert d.tcp(DB, "AAAA").rcode_name == "NOERROR"
    wait_until(lambda: metric(d.metrics_port, "localdns_dnstap_sent_total")
               >= 2 * queries_received(d), "every message sent")
    d.stop()
    c.stop()
    got = [(m["message"]["type"], m["message"]["socket_protocol"]) for m in read_golang(out)
           if DB in m["message"].get("query_message", m["message"].get("response_message", ""))
           and "AAAA" in m["message"].get("query_message", m["message"].get("response_message", ""))]
    assert got == [("CLIENT_QUERY", "TCP"), ("CLIENT_RESPONSE", "TCP")], got


def test_dnstap_collector_away_and_back_loses_only_the_gap(env):
    # Every query is answered throughout; each one is in the first
    # collector's file, the second's, or counted as dropped: exactly.
    sock = os.path.join(env.tmp, "tap.sock")
    first, second = os.path.join(env.tmp, "1.fstrm"), os.path.join(env.tmp, "2.fstrm")
    c = Collector(first, path=sock)
    d = start(env, {"socket": sock, "buffer": "64KiB"})
    sent = lambda: metric(d.metrics_port, "localdns_dnstap_sent_total")  # noqa: E731
    for _ in range(20):
        assert d.udp(DB, "A").rcode_name == "NOERROR"
    wait_until(lambda: sent() >= 2 * queries_received(d), "the first batch sent")
    c.stop()
    # the gap: no collector. DNS goes on; 64 KiB rings fill and drop.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        for i in range(600):
            s.sendto(harness.dnsmsg.build_query(DB, "A", qid=i), (d.host, d.port))
            assert harness.dnsmsg.parse(s.recv(4096)).rcode_name == "NOERROR"
    wait_until(lambda: metric(d.metrics_port, "localdns_dnstap_dropped_total") > 0,
               "drops counted while the collector is away")
    assert metric(d.metrics_port, "localdns_dnstap_connected") == 0
    c2 = Collector(second, path=sock)
    wait_until(lambda: metric(d.metrics_port, "localdns_dnstap_connections_total") == 2,
               "the reconnect (backoff at most 30 s)", timeout=40)
    for _ in range(20):
        assert d.udp("after.prod.svc.cluster.local", "A").rcode_name == "NXDOMAIN"
    dropped = lambda: metric(d.metrics_port, "localdns_dnstap_dropped_total")  # noqa: E731
    wait_until(lambda: sent() == 2 * (queries_received(d) - dropped()),
               "every exchange sent or counted as dropped")
    dropped = dropped()
    rc, _ = d.stop()
    assert rc == 0, d.tail()
    c2.stop()
    one, two = read_bind(first), read_bind(second)
    after = [m for m in two if m[0] == "CQ" and m[3].startswith("after.")]
    assert len(after) == 20, two[-5:]
    cq = len([m for m in one + two if m[0] == "CQ"])
    assert cq + dropped == queries_received_at_exit(d), (cq, dropped, d.tail())
    assert "dnstap collector lost" in d.stderr(), d.tail()
test_dnstap_collector_away_and_back_loses_only_the_gap.timeout = 60


def test_dnstap_names_the_pod_that_asked(env):
    sock = os.path.join(env.tmp, "tap.sock")
    out = os.path.join(env.tmp, "tap.fstrm")
    c = Collector(out, path=sock)
    with F.FakeAPI() as api:
        api.apply(F.namespace("shop"), F.pod("shop", "app-7d9", ips=["127.0.0.55"], node=NODE),
                  F.pod("shop", "agent", ips=["127.0.0.56"], node=NODE, host_network=True))
        kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))
        d = start(env, {"socket": sock}, kubernetes={"enabled": True, "kubeconfig": kc,
                                                     "node_name": NODE})
        wait_until(lambda: d.udp("dns-version.cluster.local", "TXT").rcode_name == "NOERROR",
                   "the first sync")
        # the Pods watch is on for dnstap alone (no autopath, no verified pods)
        wait_until(lambda: metric(d.metrics_port, "localdns_kubernetes_objects",
                                  'resource="pods"') == 2, "this node's two Pods")
        for src in ("127.0.0.55", "127.0.0.56", "127.0.0.1"):
            assert d.udp(DB, "A", source=src).rcode_name == "NOERROR"
        wait_until(lambda: metric(d.metrics_port, "localdns_dnstap_sent_total")
                   >= 2 * queries_received(d), "every message sent")
        d.stop()
    c.stop()
    # dnstap-read and dnstap-ldns agree on who asked what ...
    asked = {(m["query_address"], m["type"]) for m in read_ldns(out) if DB in m["text"]}
    assert asked == {(a, t) for a in ("127.0.0.55", "127.0.0.56", "127.0.0.1")
                     for t in ("CLIENT_QUERY", "CLIENT_RESPONSE")}, asked
    # ... but no packaged reader prints the extra field: read it from the frames
    by_source = {}
    for top, msg in frames(out):
        if DB.encode().split(b".")[0] in msg.get(10, msg.get(14, b"")):
            addr = socket.inet_ntoa(msg[4])
            by_source.setdefault(addr, set()).add(top.get(3, b"").decode() or None)
    assert by_source.get("127.0.0.55") == {"pod=shop/app-7d9"}, by_source
    # a host-network pod's address is the node's: no pod named; nor for others
    assert by_source.get("127.0.0.56") == {None}, by_source
    assert by_source.get("127.0.0.1") == {None}, by_source


def test_dnstap_resolver_messages_when_asked(env):
    sock = os.path.join(env.tmp, "tap.sock")
    out = os.path.join(env.tmp, "tap.fstrm")
    c = Collector(out, path=sock)
    with authority.Authority({"site.example.": authority.zone_path("site.example.")}) as up:
        d = start(env, {"socket": sock, "messages": ["resolver_query", "resolver_response"]},
                  upstream={"servers": [up.addr], "timeout": "2s"})
        assert d.udp("www.site.example", "A").rcode_name == "NOERROR"
        assert d.udp(DB, "A").rcode_name == "NOERROR"  # local: nothing for the resolver
        wait_until(lambda: metric(d.metrics_port, "localdns_dnstap_sent_total") >= 2,
                   "the resolver's two messages")
        d.stop()
    c.stop()
    msgs = read_bind(out)
    assert [(m[0], m[3]) for m in msgs] == [("FQ", "www.site.example/IN/A"),
                                           ("FR", "www.site.example/IN/A")], msgs


def test_dnstap_collector_absent_dns_answers(env):
    d = start(env, {"socket": os.path.join(env.tmp, "nobody.sock")})
    assert d.udp(DB, "A").rcode_name == "NOERROR"
    # a collector that is not there: DNS answers, the writer retries with backoff
    wait_until(lambda: "dnstap collector unreachable" in d.stderr(), "the warning")
    assert d.stderr().count("dnstap collector unreachable") == 1, d.stderr()
    assert metric(d.metrics_port, "localdns_dnstap_sent_total") == 0


def test_dnstap_turned_on_by_a_reload(env):
    sock = os.path.join(env.tmp, "tap.sock")
    out = os.path.join(env.tmp, "tap.fstrm")
    d = start(env, {})
    assert d.udp("before.prod.svc.cluster.local", "A").rcode_name == "NXDOMAIN"
    c = Collector(out, path=sock)
    cfg = harness.deep_merge(d.config, {"dnstap": {"socket": sock}})
    d.reload(cfg)
    wait_until(lambda: metric(d.metrics_port, "localdns_dnstap_connected") == 1, "the collector")
    assert d.udp("after.prod.svc.cluster.local", "A").rcode_name == "NXDOMAIN"
    wait_until(lambda: metric(d.metrics_port, "localdns_dnstap_sent_total") >= 2, "two messages")
    d.stop()
    c.stop()
    names = {m[3] for m in read_bind(out)}
    assert "after.prod.svc.cluster.local/IN/A" in names, names
    assert not any(n.startswith("before.") for n in names), names


def test_dnstap_a_collector_that_never_answers_stalls_nothing(env):
    # It accepts and then never says a word (no ACCEPT frame): the writer
    # waits for it (5 s at most), DNS does not, and SIGTERM does not wait
    # past the stop's one-second flush.
    sock = os.path.join(env.tmp, "silent.sock")
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(sock)
    silent.listen(4)
    try:
        d = start(env, {"socket": sock})
        conn, _ = silent.accept()
        for _ in range(20):
            assert d.udp(DB, "A").rcode_name == "NOERROR"
        t0 = time.monotonic()
        rc, _ = d.stop(timeout=4)
        assert rc == 0 and time.monotonic() - t0 < 2.5, (rc, time.monotonic() - t0, d.tail())
        assert "dnstap records dropped" in d.stderr(), d.tail()  # 20 queries never sent
        conn.close()
    finally:
        silent.close()
