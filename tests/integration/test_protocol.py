"""Protocol edges: opcodes, question counts, QR=1 and short packets, classes
and CHAOS, zone transfers, EDNS (OPT presence, BADVERS, DO, cookies)."""

import os
import socket
import struct
import time

import dnsmsg
from dnsmsg import build_query, header, encode_name, parse

# Light: a small share of a CPU (they mostly wait on the daemon), so they may
# run beside a test that runs alone (run.py -j).
QUIET = True

DB = "db.prod.svc.cluster.local"


def raw(env, pkt, timeout=1.0):
    return env.server.udp_raw(pkt, timeout)


def expect_rcode(data, rcode, qid=None):
    assert data is not None, "no reply, want %s" % rcode
    m = parse(data)
    assert m.qr, "QR not set"
    if qid is not None:
        assert m.id == qid, "id %#x, want %#x" % (m.id, qid)
    assert m.rcode_name == rcode, "rcode %s, want %s (%s)" % (
        m.rcode_name, rcode, m.describe())
    return m


def expect_silence(env, pkts, what):
    """Send every packet from one socket; nothing may come back."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for p in pkts:
            s.sendto(p, (env.server.host, env.server.port))
        s.settimeout(0.5)
        try:
            data, _ = s.recvfrom(65535)
        except socket.timeout:
            return
    raise AssertionError("%s got a reply: %r" % (what, data[:32]))


def test_opcode_notimp(env):
    for opcode in (1, 2, 4, 5, 15):
        qid = 0x4000 + opcode
        pkt = build_query(DB, "A", qid=qid, opcode=opcode)
        m = expect_rcode(raw(env, pkt), "NOTIMP", qid)
        assert m.opcode == opcode, "opcode %d not copied (got %d)" % (
            opcode, m.opcode)


def test_notify_via_kdig(env):
    r = env.server.kdig(DB, "NOTIFY")
    assert r.status in ("NOTIMP", "NOTIMPL"), r.text   # kdig says NOTIMPL


def test_qdcount_zero_formerr(env):
    pkt = header(0x2222, qd=0)
    expect_rcode(raw(env, pkt), "FORMERR", 0x2222)


def test_qdcount_two_formerr(env):
    q = encode_name(DB) + struct.pack("!HH", 1, 1)
    pkt = header(0x2323, qd=2) + q + q
    expect_rcode(raw(env, pkt), "FORMERR", 0x2323)


def test_qdcount_one_but_missing_formerr(env):
    pkt = header(0x2424, qd=1)
    expect_rcode(raw(env, pkt), "FORMERR", 0x2424)


def test_trailing_garbage_formerr_or_ok(env):
    # Bytes after the last record: FORMERR is the strict answer; a server
    # may also ignore them. It must not crash or answer garbage.
    pkt = build_query(DB, "A", qid=0x2525) + b"\x01\x02\x03"
    data = raw(env, pkt)
    assert data is not None, "no reply"
    m = parse(data)
    assert m.id == 0x2525 and m.rcode_name in ("FORMERR", "NOERROR"), m.describe()


def test_qr_set_no_reply(env):
    pkts = [build_query(DB, "A", flags=dnsmsg.F_QR | dnsmsg.F_RD),
            build_query(DB, "A", flags=dnsmsg.F_QR, opcode=4),
            header(1, flags=dnsmsg.F_QR, qd=0)]
    expect_silence(env, pkts, "a QR=1 packet")


def test_short_packets_no_reply(env):
    full = build_query(DB, "A", qid=0x0102)
    expect_silence(env, [full[:n] for n in range(0, 12)], "a <12 byte packet")


def test_server_answers_after_silence(env):
    m = env.server.udp(DB, "A")
    assert m.rcode_name == "NOERROR" and m.answer


def test_other_classes_refused(env):
    for qclass, name, qt in ((dnsmsg.C_HS, DB, "A"), (dnsmsg.C_CH, DB, "A"),
                             (dnsmsg.C_NONE, DB, "A"), (42, DB, "A")):
        qid = 0x3000 + qclass
        data = raw(env, build_query(name, qt, qclass=qclass, qid=qid))
        expect_rcode(data, "REFUSED", qid)


def test_chaos_disabled_refused(env):
    for name in ("version.bind", "id.server"):
        data = raw(env, build_query(name, "TXT", qclass=dnsmsg.C_CH, qid=7))
        m = expect_rcode(data, "REFUSED", 7)
        assert m.answer == []
    r = env.server.dig("version.bind", "TXT", qclass="CH")
    assert r.status == "REFUSED", r.text


def test_chaos_enabled(env):
    d = env.start(chaos={"enabled": True, "version": "localdns-it 9.9",
                         "id": "node-a.example"})
    for name, want in (("version.bind", "localdns-it 9.9"),
                       ("VERSION.BIND", "localdns-it 9.9"),
                       ("id.server", "node-a.example")):
        m = parse(d.udp_raw(build_query(name, "TXT", qclass=dnsmsg.C_CH)))
        assert m.rcode_name == "NOERROR", "%s: %s" % (name, m.describe())
        txt = [r for r in m.answer if r["type"] == dnsmsg.T["TXT"]]
        assert len(txt) == 1, "%s: answer %s" % (name, m.answer)
        assert txt[0]["class"] == dnsmsg.C_CH, "%s: class %d" % (
            name, txt[0]["class"])
        assert txt[0]["rdata"] == [want], "%s: %r" % (name, txt[0]["rdata"])
    r = d.dig("version.bind", "TXT", qclass="CH")
    assert r.status == "NOERROR" and '"localdns-it 9.9"' in r.text, r.text
    # Other CHAOS queries stay REFUSED.
    for name, qt in (("version.bind", "A"), ("foo.bind", "TXT"),
                     (DB, "TXT")):
        data = d.udp_raw(build_query(name, qt, qclass=dnsmsg.C_CH, qid=9))
        expect_rcode(data, "REFUSED", 9)
    # IN class still works on the same daemon.
    assert d.udp(DB, "A").answer


def test_axfr_refused_tcp(env):
    s = env.server
    m = parse(dnsmsg.tcp_exchange(s.host, s.port,
                                  build_query("cluster.local", "AXFR",
                                              qid=0x5151, flags=0)))
    assert m.id == 0x5151 and m.rcode_name == "REFUSED", m.describe()
    assert m.answer == []
    r = s.dig("cluster.local", "AXFR")
    assert "Transfer failed" in r.text or "REFUSED" in r.text, r.text


def test_axfr_ixfr_refused_udp(env):
    for qt in ("AXFR", "IXFR"):
        data = raw(env, build_query("cluster.local", qt, qid=0x5252))
        expect_rcode(data, "REFUSED", 0x5252)


def test_ixfr_refused_tcp(env):
    s = env.server
    m = parse(dnsmsg.tcp_exchange(s.host, s.port,
                                  build_query("cluster.local", "IXFR",
                                              qid=0x5353)))
    assert m.rcode_name == "REFUSED", m.describe()


# ------------------------------------------------------------------ EDNS

def test_edns_opt_present(env):
    m = env.server.udp(DB, "A", edns=True, udp_size=1232)
    assert m.opt is not None, "no OPT in reply to an EDNS query"
    assert m.opt["version"] == 0 and m.opt["owner"] == "."
    assert m.opt["udp_size"] >= 512, m.opt
    assert m.rcode_name == "NOERROR"
    r = env.server.dig(DB, "A")
    assert r.edns is not None, "dig shows no EDNS in the reply:\n" + r.text


def test_no_edns_no_opt(env):
    m = env.server.udp(DB, "A", edns=False)
    assert m.opt is None, "OPT in reply to a query without EDNS"
    assert m.counts[3] == 0
    r = env.server.dig(DB, "A", "+noedns")
    assert r.edns is None, r.text
    # Error replies too.
    m = parse(raw(env, build_query(DB, "A", opcode=2, qid=1)))
    assert m.opt is None
    m = env.server.udp("www.example.com", "A", edns=False)
    assert m.opt is None


def test_edns_on_error_replies(env):
    m = env.server.udp("nothere.prod.svc.cluster.local", "A", edns=True)
    assert m.rcode_name == "NXDOMAIN" and m.opt is not None, m.describe()
    m = env.server.udp("www.example.com", "A", edns=True, timeout=3)
    assert m.rcode_name == "SERVFAIL" and m.opt is not None, m.describe()


def test_badvers(env):
    qid = 0x6161
    data = raw(env, build_query(DB, "A", qid=qid, version=1))
    m = expect_rcode(data, "BADVERS", qid)
    assert m.opt is not None, "BADVERS needs an OPT"
    assert m.opt["version"] == 0, "reply OPT version %d" % m.opt["version"]
    assert m.answer == [], m.answer
    r = env.server.dig(DB, "A", "+edns=1", "+noednsnegotiation")
    assert r.status == "BADVERS", r.text


def test_do_bit_echoed(env):
    m = env.server.udp(DB, "A", do=True)
    assert m.opt is not None and m.opt["do"], "DO not echoed: %s" % m.opt
    m = env.server.udp(DB, "A", edns=True, do=False)
    assert m.opt is not None and not m.opt["do"], "DO set unasked"
    r = env.server.dig(DB, "A", "+dnssec")
    assert r.edns and "do" in r.edns.split("flags:")[1].split(";")[0], r.text


def test_cookie_answered(env):
    # RFC 7873 + RFC 9018: the reply's COOKIE is the client's 8 bytes then a
    # 16-byte server cookie (version 1, reserved zeros, timestamp, hash).
    client = os.urandom(8)
    m = env.server.udp(DB, "A", cookie=client)
    assert m.rcode_name == "NOERROR" and m.answer, m.describe()
    cookies = [v for c, v in m.opt["options"] if c == dnsmsg.OPT_COOKIE]
    assert len(cookies) == 1, "want one COOKIE option, got %s" % m.opt["options"]
    c = cookies[0]
    assert len(c) == 24 and c[:8] == client, c.hex()
    assert c[8:12] == b"\x01\x00\x00\x00", "not an RFC 9018 cookie: %s" % c.hex()
    stamp = struct.unpack("!I", c[12:16])[0]
    assert abs(stamp - time.time()) < 60, "timestamp %d is not now" % stamp
    # A returning client (client + our server cookie) over TCP: same client
    # part back, a server cookie from the same secret and address.
    m = env.server.tcp(DB, "A", cookie=c)
    again = [v for code, v in m.opt["options"] if code == dnsmsg.OPT_COOKIE]
    assert again and again[0][:8] == client and len(again[0]) == 24, m.opt
    # No cookie in, no cookie out.
    m = env.server.udp(DB, "A", edns=True)
    assert not [v for code, v in m.opt["options"] if code == dnsmsg.OPT_COOKIE]


def test_dig_cookie(env):
    r = env.server.dig(DB, "A", "+cookie")
    assert r.status == "NOERROR", r.text
    assert r.cookie is not None, "dig shows no COOKIE in the reply:\n" + r.text
    assert len(r.cookie) == 48, "cookie %s: want client 8 + server 16 bytes" % r.cookie
    assert "(good)" in r.text, "dig does not accept the cookie:\n" + r.text


def test_unknown_edns_option_ignored(env):
    m = env.server.udp(DB, "A", options=[(65001, b"hello"), (8, b"\x00\x01\x18\x00\x0a\x00\x00")])
    assert m.rcode_name == "NOERROR" and m.answer, m.describe()


def padded_query(name, qid, size):
    """An A query of exactly size bytes: an EDNS padding option (RFC 7830)
    fills it, then a client cookie made of the ID ends it."""
    cookie = struct.pack("!HHI", qid, qid, 0x600d600d)
    bare = build_query(name, "A", qid=qid, cookie=cookie)
    return build_query(name, "A", qid=qid, options=[(12, b"\0" * (size - len(bare) - 4))],
                       cookie=cookie)


def test_long_udp_queries_are_answered_up_to_4096_bytes(env):
    # A worker takes each datagram's first 512 bytes into a packed slot and
    # the rest into another (src/server/internal.h): long queries in one
    # burst with short ones are all answered, each with its own question
    # and the cookie from its last bytes.
    sizes = [512, 513, 1500, 4095, 4096, 511, 700]
    pkts = {}
    for i in range(60):
        qid = 0x5000 + i
        pkts[qid] = padded_query(DB, qid, sizes[i % len(sizes)] if i % 2 else 80)
        assert len(pkts[qid]) == (sizes[i % len(sizes)] if i % 2 else 80)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        for p in pkts.values():
            s.sendto(p, (env.server.host, env.server.port))
        got = {}
        s.settimeout(2)
        while len(got) < len(pkts):
            try:
                m = parse(s.recv(65535))
            except socket.timeout:
                break
            got[m.id] = m
    missing = sorted(set(pkts) - set(got))
    assert not missing, "no reply to %d queries, ids %s" % (len(missing), missing[:5])
    for qid, m in got.items():
        assert m.rcode_name == "NOERROR" and m.question[0][0] == DB + ".", m.describe()
        assert [r["rdata"] for r in m.answer] == ["10.0.0.5"], m.describe()
        cookies = [v for c, v in m.opt["options"] if c == dnsmsg.OPT_COOKIE]
        assert cookies and cookies[0][:8] == struct.pack("!HHI", qid, qid, 0x600d600d), \
            (hex(qid), cookies)
    expect_silence(env, [padded_query(DB, 0x5fff, 4097)], "a 4,097-byte query")


def test_two_opt_formerr(env):
    q = build_query(DB, "A", qid=0x7171)
    pkt = bytearray(q[:12] + q[12:]) + dnsmsg.opt_rr() + dnsmsg.opt_rr()
    struct.pack_into("!H", pkt, 10, 2)
    expect_rcode(raw(env, bytes(pkt)), "FORMERR", 0x7171)


def test_udp_reply_source(env):
    # The reply comes from the address and port the query went to.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(build_query(DB, "A", qid=77), (env.server.host, env.server.port))
        data, addr = s.recvfrom(65535)
    assert addr == (env.server.host, env.server.port), addr
    assert parse(data).id == 77


def test_many_udp_clients(env):
    # 200 queries from 20 sockets at once, all answered with right IDs.
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(20)]
    try:
        want = {}
        for i, s in enumerate(socks):
            for j in range(10):
                qid = i * 100 + j
                name = ("web" if j % 2 else "db") + ".prod.svc.cluster.local"
                s.sendto(build_query(name, "A", qid=qid),
                         (env.server.host, env.server.port))
                want[qid] = "10.0.0.6" if j % 2 else "10.0.0.5"
        got = {}
        deadline = time.monotonic() + 3
        for s in socks:
            s.setblocking(False)
        while len(got) < len(want) and time.monotonic() < deadline:
            import select
            r, _, _ = select.select(socks, [], [], 0.2)
            for s in r:
                try:
                    data = s.recv(65535)
                except BlockingIOError:
                    continue
                m = parse(data)
                got[m.id] = m.answer[0]["rdata"] if m.answer else None
        missing = len(want) - len(got)
        assert missing == 0, "%d of %d queries unanswered" % (missing, len(want))
        bad = [k for k, v in got.items() if want.get(k) != v]
        assert not bad, "wrong answers for ids %s" % bad[:5]
    finally:
        for s in socks:
            s.close()
