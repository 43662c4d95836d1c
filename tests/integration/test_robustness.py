"""Robustness: hostile packets over UDP and TCP. The server must stay up,
never answer what it must drop, answer malformed queries with FORMERR (or
NOTIMP for other opcodes) and the same ID, and keep answering correctly."""

import os
import random
import select
import socket
import struct
import time

import dnsmsg
from dnsmsg import build_query, encode_name, frame, header, opt_rr, parse

# Light: a small share of a CPU (they mostly wait on the daemon), so they may
# run beside a test that runs alone (run.py -j).
QUIET = True

DB = "db.prod.svc.cluster.local"
Q = struct.pack("!HH", 1, 1)  # qtype A, class IN


def malformed_cases(rng):
    """(packet, kind) pairs that all have a full header with QR=0 and are
    malformed, so any reply must be FORMERR (or NOTIMP for opcode != 0).
    IDs are set by the caller."""
    good = build_query(DB, "A", qid=0, edns=True, cookie=b"12345678")
    qend = 12 + len(encode_name(DB)) + 4
    cases = []
    # Truncated after the header: question cut anywhere, or the OPT cut.
    for n in list(range(13, qend)) + list(range(qend + 1, len(good))):
        cases.append((good[:n], "truncated at %d" % n))
    # Compression loops and bad pointers in the question.
    cases.append((header(0) + b"\xc0\x0c" + Q, "self pointer"))
    cases.append((header(0) + b"\x01a\xc0\x0c" + Q, "loop via label"))
    cases.append((header(0) + b"\x01a\xc0\x0e\x01b\xc0\x0c" + Q, "two-name loop"))
    cases.append((header(0) + b"\xc0\x20" + Q + b"\x00" * 20, "forward pointer"))
    cases.append((header(0) + b"\xc3\xff" + Q, "pointer past end"))
    cases.append((header(0) + b"\xc0" , "half pointer"))
    cases.append((header(0) + b"\x40" + b"a" * 64 + b"\x00" + Q, "label 64"))
    cases.append((header(0) + b"\x3f" + b"a" * 63 + b"\x00" + Q[:3], "short qtype"))
    cases.append((header(0) + b"\x80abc\x00" + Q, "label type 0x80"))
    cases.append((header(0) + b"\x41abc\x00" + Q, "label type 0x40 (EDNS0 ext)"))
    long_name = (b"\x3f" + b"b" * 63) * 4 + b"\x00"          # 257 bytes
    cases.append((header(0) + long_name + Q, "name 257 bytes"))
    via_ptr = header(0) + (b"\x3f" + b"c" * 63) * 3 + b"\x00" + Q
    cases.append((via_ptr[:12] + b"\x3f" + b"d" * 63 + b"\x3f" + b"e" * 63 +
                  b"\x3f" + b"f" * 63 + b"\x3f" + b"g" * 63 + b"\xc0\x0c" + Q,
                  "name > 255 via pointer"))
    # Counts that lie.
    q = encode_name(DB) + Q
    cases.append((header(0, an=5) + q, "ancount 5, no answers"))
    cases.append((header(0, ns=1) + q + b"\x00\x00", "authority record cut"))
    cases.append((header(0, ar=3) + q + opt_rr(), "arcount 3, one record"))
    # Additional record with a bogus rdlength.
    rr = b"\x00" + struct.pack("!HHIH", 1, 1, 0, 1000) + b"\x01\x02\x03\x04"
    cases.append((header(0, ar=1) + q + rr, "rdlength 1000 with 4 bytes"))
    rr = b"\x00" + struct.pack("!HHIH", 16, 1, 0, 2)
    cases.append((header(0, ar=1) + q + rr, "rdlength 2 with 0 bytes"))
    # OPT records whose options overrun.
    cases.append((header(0, ar=1) + q + opt_rr(raw_rdata=struct.pack("!HH", 10, 50) + b"x" * 8),
                  "OPT option overruns rdata"))
    cases.append((header(0, ar=1) + q + opt_rr(raw_rdata=b"\x00\x0a\x00", rdlen=3),
                  "OPT option header cut"))
    cases.append((header(0, ar=1) + q + opt_rr(raw_rdata=b"", rdlen=40),
                  "OPT rdlength past end"))
    cases.append((header(0, ar=2) + q + opt_rr() + opt_rr(), "two OPT"))
    cases.append((header(0, ar=1) + q + b"\x01x" + opt_rr()[1:], "OPT not at root"))
    # Question counts.
    cases.append((header(0, qd=0), "qdcount 0"))
    cases.append((header(0, qd=2) + q + q, "qdcount 2"))
    cases.append((header(0, qd=65535) + q, "qdcount 65535"))
    # Odd opcodes with garbage after the header (FORMERR or NOTIMP).
    for op in (1, 2, 3, 4, 5, 6, 15):
        cases.append((header(0, opcode=op) + b"\xff" * rng.randrange(0, 20),
                      "opcode %d garbage" % op))
    return cases


def qr_set_cases(rng):
    out = []
    for _ in range(20):
        n = rng.randrange(12, 200)
        b = bytearray(os.urandom(n))
        b[2] |= 0x80
        out.append(bytes(b))
    out.append(build_query(DB, "A", flags=dnsmsg.F_QR))
    return out


def random_packets(rng, n):
    out = []
    for _ in range(n):
        k = rng.random()
        if k < 0.6:
            out.append(os.urandom(rng.randrange(0, 601)))
        elif k < 0.8:
            # A valid query with random bytes flipped.
            b = bytearray(build_query(DB, rng.choice(["A", "AAAA", "SRV", "TXT"]),
                                      edns=rng.random() < 0.5))
            for _ in range(rng.randrange(1, 6)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            out.append(bytes(b))
        else:
            # A valid query with random junk appended and counts bumped.
            b = bytearray(build_query(DB, "A"))
            struct.pack_into("!H", b, rng.choice([6, 8, 10]), rng.randrange(1, 8))
            out.append(bytes(b) + os.urandom(rng.randrange(0, 100)))
    return out


def drain(sock, seconds):
    got = []
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([sock], [], [], min(left, 0.2))
        if not r:
            if got and left < seconds - 0.5:
                # nothing for a while after something came: stop early
                pass
            continue
        try:
            data = sock.recv(65535)
        except (BlockingIOError, ConnectionRefusedError):
            continue
        got.append(data)
    return got


def check_alive_and_correct(d):
    assert d.alive(), "daemon died (exit %s): %s" % (d.proc.returncode, d.tail())
    m = d.udp(DB, "A")
    assert m.rcode_name == "NOERROR" and [r["rdata"] for r in m.answer] == \
        ["10.0.0.5"], "wrong answer after the storm: " + m.describe()
    m = d.tcp(DB, "AAAA")
    assert [r["rdata"] for r in m.answer] == ["fd00::5"], m.describe()


def test_udp_malformed_storm(env):
    d = env.start(listen={"workers": 2})
    rng = random.Random(1234)
    addr = (d.host, d.port)
    cases = malformed_cases(rng)
    qr_cases = qr_set_cases(rng)
    rand = random_packets(rng, 500 - len(cases) - len(qr_cases))
    checked = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    noise = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for s in (checked, silent, noise):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sent = {}
        for i, (pkt, kind) in enumerate(cases):
            qid = 0x8000 + i
            b = bytearray(pkt)
            struct.pack_into("!H", b, 0, qid)
            sent[qid] = (kind, (b[2] >> 3) & 0xf)
            checked.sendto(bytes(b), addr)
        for pkt in qr_cases:
            silent.sendto(pkt, addr)
        for i, pkt in enumerate(rand):
            noise.sendto(pkt, addr)
            if i % 50 == 0:
                time.sleep(0.005)
        total = len(cases) + len(qr_cases) + len(rand)
        assert total == 500, total
        replies = drain(checked, 1.5)
        bad = []
        answered = set()
        for data in replies:
            try:
                m = parse(data)
            except ValueError as e:
                bad.append("unparsable reply (%s): %r" % (e, data[:40]))
                continue
            if m.id not in sent:
                bad.append("reply with unknown id %#x" % m.id)
                continue
            kind, opcode = sent[m.id]
            answered.add(m.id)
            ok = {"FORMERR"} | ({"NOTIMP"} if opcode != 0 else set())
            if m.rcode_name not in ok or not m.qr:
                bad.append("%s: got %s" % (kind, m.describe()))
            if m.answer:
                bad.append("%s: answer records in an error reply" % kind)
        assert not bad, "%d bad replies: %s" % (len(bad), "; ".join(bad[:6]))
        qr_replies = drain(silent, 0.3)
        assert not qr_replies, "%d replies to QR=1 packets" % len(qr_replies)
        drain(noise, 0.2)
        # A server may drop a malformed packet, but qdcount 0 / 2 must
        # get their FORMERR (they have a sound header).
        for qid, (kind, _op) in sent.items():
            if kind in ("qdcount 0", "qdcount 2"):
                assert qid in answered, "no FORMERR for %s in the storm" % kind
    finally:
        checked.close()
        silent.close()
        noise.close()
    check_alive_and_correct(d)


test_udp_malformed_storm.timeout = 30


def tcp_bad_streams(rng):
    q = build_query(DB, "A", qid=0x9999)
    out = []
    for pkt, _ in malformed_cases(rng)[:25]:
        out.append(frame(pkt))
    out.append(b"\x00")                              # half a length prefix
    out.append(b"\x00\x00")                          # zero-length frame
    out.append(b"\x00\x05abc")                       # frame cut short, EOF
    out.append(b"\xff\xff" + q)                      # claims 65535, short
    out.append(b"\x00\x0bhello world")               # 11 bytes of text
    out.append(frame(os.urandom(3)))                 # shorter than a header
    out.append(frame(build_query(DB, "A", flags=dnsmsg.F_QR)))  # QR=1
    out.append(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # not DNS
    out.append(frame(q)[:-1])                         # last byte missing
    out.append(frame(q) + b"\x00")                    # trailing half prefix
    while len(out) < 50:
        out.append(os.urandom(rng.randrange(1, 300)))
    return out


def test_tcp_malformed_streams(env):
    d = env.start(listen={"tcp_max_connections": 64, "tcp_idle_timeout": "2s"})
    rng = random.Random(99)
    streams = tcp_bad_streams(rng)
    for i in range(0, len(streams), 10):
        conns = []
        for blob in streams[i:i + 10]:
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.settimeout(2)
            c.connect((d.host, d.port))
            try:
                c.sendall(blob)
            except OSError:
                pass
            conns.append(c)
        time.sleep(0.2)
        for c in conns:
            c.setblocking(False)
            try:
                c.recv(65535)
            except (BlockingIOError, OSError):
                pass
            c.close()
    assert d.alive(), "daemon died: %s" % d.tail()
    # Error replies over TCP keep the ID: FORMERR for a qdcount-0 frame.
    with dnsmsg.tcp_connect(d.host, d.port) as c:
        c.sendall(frame(header(0x4321, qd=0)))
        data = dnsmsg.tcp_read_msg(c)
        assert data is not None, "no FORMERR over TCP"
        m = parse(data)
        assert m.id == 0x4321 and m.rcode_name == "FORMERR", m.describe()
    check_alive_and_correct(d)


test_tcp_malformed_streams.timeout = 30


def test_malformed_cookie_formerr(env):
    # RFC 7873 5.2.2: a COOKIE option shorter than 8 or longer than 40 bytes,
    # or between 9 and 15, is FORMERR.
    q = encode_name(DB) + Q
    for i, n in enumerate((3, 12, 41)):
        qid = 0x6600 + i
        pkt = header(qid, ar=1) + q + opt_rr(options=[(10, b"1" * n)])
        data = env.server.udp_raw(pkt)
        assert data is not None, "no reply to a %d-byte cookie" % n
        m = parse(data)
        assert m.id == qid and m.rcode_name == "FORMERR", \
            "%d-byte cookie: %s" % (n, m.describe())


def test_shared_server_survived(env):
    # The shared daemon saw its own share of odd packets in other tests.
    check_alive_and_correct(env.server)
