"""The benchmarks' tools (tests/bench/): dnsgen, the load generator, and
bare_responder, the canned-reply server the benchmarks call 100%.

A benchmark is only as true as its generator, so: dnsgen's counts add up
(received + lost == sent), it tallies rcodes, empty answers and reply sizes
as they are, it does not count a reply with the wrong question or an ID
not in flight, and its fixed rate is the rate asked for. The bare
responder's replies must be valid DNS answers, the size of localdns's.
Short runs at modest rates; no speed is asserted."""

import os
import signal
import socket
import struct
import subprocess
import threading
import time

import dnsmsg
import harness

DB = "db.prod.svc.cluster.local"

def check_consistent(r, summary):
    """What every run must satisfy, whatever the server did."""
    why = "%r\n%s" % (r, summary)
    assert r["sent"] > 0, why
    assert r["received"] + r["lost"] == r["sent"], "received + lost != sent: " + why
    assert r["noerror"] + r["nxdomain"] + r["servfail"] + r["rcode_other"] == r["received"], why
    assert r["errors"] == 0, why


def reply_size(port, name, qt):
    """The size of the server's reply to one query without EDNS (as dnsgen asks)."""
    data = dnsmsg.udp_exchange("127.0.0.1", port, dnsmsg.build_query(name, qt), tries=3)
    assert data is not None, "no reply to %s %s on port %d" % (name, qt, port)
    return len(data)


def check_all_answered(r, summary, port, queries):
    """Every query answered NOERROR with a non-empty answer, and the replies
    as big as the server's answers to the same queries asked one by one."""
    check_consistent(r, summary)
    why = "%r\n%s" % (r, summary)
    assert r["lost"] == 0 and r["noerror"] == r["received"], why
    for k in ("truncated", "no_answer", "mismatched", "unexpected"):
        assert r[k] == 0, "%s: %s" % (k, why)
    sizes = [reply_size(port, n, t) for n, t in queries]
    assert (r["size_min"], r["size_max"]) == (min(sizes), max(sizes)), \
        "reply sizes %d..%d, one by one %s: %s" % (r["size_min"], r["size_max"], sizes, why)
    assert r["p50_us"] > 0 and r["p50_us"] <= r["p90_us"] <= r["p95_us"] <= r["p99_us"] \
        <= r["p999_us"] <= r["max_us"], why


STATIC = [(DB, "A"), (DB, "AAAA"), ("web.prod.svc.cluster.local", "A"),
          ("host.corp.internal", "A")]


def test_dnsgen_max_rate_counts_add_up(env):
    # With UDP GSO (db A and AAAA are one length: one message, two
    # datagrams) and with one datagram per message (-G).
    for extra in ((), ("-G",)):
        r, summary = harness.dnsgen(env, env.server.port, STATIC, "-l", "0.5", "-q", "8", "-c", "4",
                            "-t", "2", *extra)
        assert r["mode"] == "max", r
        assert r["gso"] == 0 if extra else (r["gso"] == 1 or "GSO refused" in summary), r
        check_all_answered(r, summary, env.server.port, STATIC)


def test_dnsgen_fixed_rate_is_the_rate_asked(env):
    r, summary = harness.dnsgen(env, env.server.port, STATIC, "-l", "1", "-Q", "2000", "-t", "2")
    assert r["mode"] == "fixed" and r["rate"] == 2000, r
    check_all_answered(r, summary, env.server.port, STATIC)
    assert 1800 <= r["sent"] <= 2200, "asked 2000 QPS for 1 s, sent %d: %s" % (r["sent"], summary)
    assert 1800 <= r["qps"] <= 2200, "asked 2000 QPS, reported %.0f: %s" % (r["qps"], summary)


test_dnsgen_fixed_rate_is_the_rate_asked.alone = True   # judges a rate: no other test beside it


def test_dnsgen_histogram_holds_every_reply_and_its_percentiles(env):
    # -H: what the benchmarks pool over rounds. Every reply in one bucket,
    # and the percentiles dnsgen reports are read off the same buckets.
    hfile = os.path.join(env.tmp, "latency.hist")
    r, summary = harness.dnsgen(env, env.server.port, STATIC, "-n", "400", "-Q", "4000", "-l", "5",
                                "-H", hfile)
    check_all_answered(r, summary, env.server.port, STATIC)
    buckets = [tuple(int(x) for x in line.split()) for line in open(hfile)]
    assert sum(n for _, n in buckets) == r["received"] == 400, (buckets, r)
    assert [ns for ns, _ in buckets] == sorted(set(ns for ns, _ in buckets)), buckets

    def percentile_us(p):
        want, seen = min(int(p * 400), 399), 0
        for ns, n in buckets:
            seen += n
            if seen > want:
                return ns / 1000
    for key, p in (("p50_us", 0.5), ("p90_us", 0.9), ("p99_us", 0.99), ("max_us", 1.0)):
        assert abs(percentile_us(p) - r[key]) < 0.06, (key, percentile_us(p), r)


def test_dnsgen_tallies_rcodes_and_empty_answers(env):
    # -n 300 over three lines: each asked exactly 100 times.
    queries = [(DB, "A"), ("nope.prod.svc.cluster.local", "A"), (DB, "TXT")]
    r, summary = harness.dnsgen(env, env.server.port, queries, "-n", "300", "-Q", "3000", "-l", "5")
    check_consistent(r, summary)
    got = {k: r[k] for k in ("sent", "received", "noerror", "nxdomain", "no_answer")}
    assert got == {"sent": 300, "received": 300, "noerror": 200, "nxdomain": 100,
                   "no_answer": 200}, "%r\n%s" % (got, summary)


def test_dnsgen_checks_the_replies_a_query_file_expects(env):
    # -n 500 over five lines: each asked exactly 100 times; the last two
    # expect what the server does not say.
    queries = [(DB, "A", "NOERROR"), ("nope.prod.svc.cluster.local", "A", "nxdomain"),
               (DB, "TXT", "NODATA"), (DB, "A", "NXDOMAIN"), (DB, "TXT", "NOERROR")]
    r, summary = harness.dnsgen(env, env.server.port, queries, "-n", "500", "-Q", "5000", "-l", "5")
    check_consistent(r, summary)
    got = {k: r[k] for k in ("received", "expect_ok", "expect_failed")}
    assert got == {"received": 500, "expect_ok": 300, "expect_failed": 200}, \
        "%r\n%s" % (got, summary)
    # Without a third column nothing is checked.
    r, summary = harness.dnsgen(env, env.server.port, [(DB, "A")], "-n", "50", "-Q", "1000")
    assert (r["received"], r["expect_ok"], r["expect_failed"]) == (50, 0, 0), summary
    # An expectation dnsgen does not know is refused.
    qfile = os.path.join(env.tmp, "bad-expect.txt")
    with open(qfile, "w") as f:
        f.write("%s A NOERROR\n%s A REFUSED\n" % (DB, DB))
    p = subprocess.run([harness.bench_tool(env, "dnsgen"), "-p", "53", "-d", qfile],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 1 and "bad-expect.txt:2: unknown expectation REFUSED" in p.stderr, \
        (p.returncode, p.stderr)


class Liar:
    """A UDP server that misbehaves by query name, to show what dnsgen
    counts: lost.* gets no reply, servfail.* SERVFAIL, wrong.* first a
    reply with another question then the right one, twice.* the right
    reply twice. Replies carry no records."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @staticmethod
    def reply(query, rcode=0, qtype=None):
        head = bytearray(query[:12])
        head[2] |= 0x80
        head[3] = rcode
        question = query[12:]
        if qtype is not None:
            question = question[:-4] + struct.pack("!HH", qtype, 1)
        return bytes(head) + question

    def serve(self):
        while not self.stopping.is_set():
            try:
                q, peer = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            first = dnsmsg.read_name(q, 12)[0].split(".")[0].lower()
            if first == "servfail":
                out = [self.reply(q, rcode=2)]
            elif first == "wrong":
                out = [self.reply(q, qtype=dnsmsg.T["AAAA"]), self.reply(q)]
            elif first == "twice":
                out = [self.reply(q), self.reply(q)]
            else:
                out = []
            for pkt in out:
                self.sock.sendto(pkt, peer)

    def close(self):
        self.stopping.set()
        self.thread.join(2)
        self.sock.close()


def test_dnsgen_does_not_count_wrong_or_stray_replies(env):
    liar = Liar()
    try:
        names = [("lost.example", "A"), ("servfail.example", "A"), ("wrong.example", "A"),
                 ("twice.example", "A")]
        r, summary = harness.dnsgen(env, liar.port, names, "-n", "40", "-Q", "400", "-l", "5",
                            "-t", "0.5", "-c", "2")
    finally:
        liar.close()
    check_consistent(r, summary)
    got = {k: r[k] for k in ("sent", "received", "lost", "noerror", "servfail",
                             "mismatched", "unexpected", "no_answer")}
    assert got == {"sent": 40, "received": 30, "lost": 10, "noerror": 20, "servfail": 10,
                   "mismatched": 10, "unexpected": 10, "no_answer": 30}, \
        "%r\n%s" % (got, summary)


def test_dnsgen_refuses_a_bad_query_file(env):
    qfile = os.path.join(env.tmp, "bad.txt")
    with open(qfile, "w") as f:
        f.write("%s A\nbad..name A\n" % DB)
    p = subprocess.run([harness.bench_tool(env, "dnsgen"), "-p", "53", "-d", qfile], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 1 and "bad.txt:2: bad name" in p.stderr, (p.returncode, p.stderr)
    p = subprocess.run([harness.bench_tool(env, "dnsgen"), "-d", qfile, "-q", "0"], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 2 and "-q" in p.stderr, (p.returncode, p.stderr)


def start_bare(env, *args):
    port = harness.free_port()
    p = harness.track_process(subprocess.Popen(
        [harness.bench_tool(env, "bare_responder"), "-p", str(port), *args], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    probe = dnsmsg.build_query("probe.example", "A")
    deadline = time.monotonic() + 5
    while dnsmsg.udp_exchange("127.0.0.1", port, probe, timeout=0.1) is None:
        assert p.poll() is None, "bare_responder exited: %s" % p.stderr.read()
        assert time.monotonic() < deadline, "bare_responder does not answer"
    return p, port


def stop_bare(p):
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=5)
    finally:
        harness.untrack_process(p)
    return p.returncode, err


def test_bare_responder_replies_are_valid_answers(env):
    p, port = start_bare(env)
    try:
        for qt, rdata in (("A", "192.0.2.1"), ("AAAA", "2001:db8::1")):
            for edns in (False, True):
                q = dnsmsg.build_query("Some.Name.example", qt, qid=0x4242, edns=edns)
                m = dnsmsg.parse(dnsmsg.udp_exchange("127.0.0.1", port, q))
                assert m.id == 0x4242 and m.qr and m.aa and m.rd and not m.tc, m.describe()
                assert m.rcode_name == "NOERROR" and m.counts == (1, 1, 0, 0), m.describe()
                assert m.question == [("Some.Name.example.", dnsmsg.T[qt], dnsmsg.C_IN)], \
                    m.question
                [a] = m.answer
                assert (a["name"], a["type"], a["class"], a["ttl"], a["rdata"]) == \
                    ("Some.Name.example.", dnsmsg.T[qt], dnsmsg.C_IN, 30, rdata), a
        # A reply, or a datagram shorter than a header, gets nothing back.
        for junk in (dnsmsg.build_query(DB, "A", flags=dnsmsg.F_QR), b"\x12\x34\x01"):
            assert dnsmsg.udp_exchange("127.0.0.1", port, junk, timeout=0.3) is None, junk
        # dig agrees, and the reply is as big as localdns's to the same question.
        d = harness.dig("127.0.0.1", port, DB, "A", "+noedns")
        assert d.status == "NOERROR" and d.rdatas("A") == ["192.0.2.1"], d.text
        for qt in ("A", "AAAA"):
            assert reply_size(port, DB, qt) == reply_size(env.server.port, DB, qt), qt
        # dnsgen's view of it: every query answered.
        queries = [(DB, "A"), (DB, "AAAA"), ("x.example", "A")]
        r, summary = harness.dnsgen(env, port, queries, "-l", "1", "-Q", "1000")
        check_all_answered(r, summary, port, queries)
    finally:
        rc, err = stop_bare(p)
    assert rc == 0, "bare_responder exited %s: %s" % (rc, err)
    assert "answered" in err and "dropped 2" in err, err


def test_bare_responder_pads_replies_when_asked(env):
    plain, plain_port = start_bare(env)
    padded, port = start_bare(env, "-a", "60")
    try:
        for qt in ("A", "AAAA"):
            q = dnsmsg.build_query("Some.Name.example", qt, qid=0x4243)
            base = dnsmsg.udp_exchange("127.0.0.1", plain_port, q)
            data = dnsmsg.udp_exchange("127.0.0.1", port, q)
            assert len(data) == len(base) + 60, (len(base), len(data))
            m = dnsmsg.parse(data)
            assert m.rcode_name == "NOERROR" and m.counts == (1, 1, 0, 1), m.describe()
            [pad] = m.additional
            assert (pad["name"], pad["type"]) == ("Some.Name.example.", 10), pad
    finally:
        for p in (plain, padded):
            rc, err = stop_bare(p)
            assert rc == 0, err
    # Less than an empty NULL record cannot be added.
    r = subprocess.run([harness.bench_tool(env, "bare_responder"), "-p", "53", "-a", "5"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "-a" in r.stderr, (r.returncode, r.stderr)
