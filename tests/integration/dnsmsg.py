"""dnsmsg: build and parse DNS messages by hand (stdlib only).

The integration tests use this for everything the real tools (dig, kdig)
cannot do or would hide: malformed packets, exact header bits, the echoed
question's letter case, EDNS options byte for byte, and pipelined TCP.

Building is deliberately permissive (any count, any flag, raw name bytes) so
a test can say exactly what goes on the wire. Parsing is strict and bounded
(pointer hops, name length) and raises ValueError on anything malformed, so a
broken reply from the server shows up as a test failure with a reason.
"""

import random
import socket
import struct
import time

# Types, classes, rcodes used by the tests.
T = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "PTR": 12, "HINFO": 13, "MX": 15,
     "TXT": 16, "AAAA": 28, "SRV": 33, "OPT": 41, "IXFR": 251, "AXFR": 252,
     "ANY": 255}
TYPE_NAME = {v: k for k, v in T.items()}
C_IN, C_CH, C_HS, C_NONE, C_ANY = 1, 3, 4, 254, 255
RCODE = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN",
         4: "NOTIMP", 5: "REFUSED", 16: "BADVERS"}
OPT_COOKIE = 10

F_QR, F_AA, F_TC, F_RD, F_RA, F_AD, F_CD = (0x8000, 0x0400, 0x0200, 0x0100,
                                            0x0080, 0x0020, 0x0010)


def qtype(t):
    return T[t.upper()] if isinstance(t, str) else int(t)


# ---------------------------------------------------------------- building

def encode_name(name):
    """Text name ("a.b.c" or "a.b.c.") to uncompressed wire form, case kept."""
    if isinstance(name, (bytes, bytearray)):
        return bytes(name)  # already wire form
    name = name.rstrip(".")
    out = b""
    if name:
        for label in name.split("."):
            raw = label.encode("ascii")
            if not 0 < len(raw) < 64:
                raise ValueError("bad label in %r" % name)
            out += bytes([len(raw)]) + raw
    return out + b"\x00"


def header(qid, flags=F_RD, qd=1, an=0, ns=0, ar=0, opcode=0, rcode=0):
    flags = (flags & ~0x7800 & ~0x000f) | ((opcode & 0xf) << 11) | (rcode & 0xf)
    return struct.pack("!HHHHHH", qid & 0xffff, flags & 0xffff, qd, an, ns, ar)


def opt_rr(udp_size=1232, version=0, do=False, ext_rcode=0, options=(),
           raw_rdata=None, rdlen=None):
    """An OPT pseudo-record. options: [(code, bytes)]; raw_rdata overrides."""
    rdata = raw_rdata if raw_rdata is not None else b"".join(
        struct.pack("!HH", c, len(v)) + v for c, v in options)
    ttl = (ext_rcode << 24) | (version << 16) | (0x8000 if do else 0)
    return (b"\x00" + struct.pack("!HHIH", T["OPT"], udp_size, ttl,
                                  len(rdata) if rdlen is None else rdlen)
            + rdata)


def build_query(name, qt="A", qclass=C_IN, qid=None, flags=F_RD, opcode=0,
                edns=False, udp_size=1232, version=0, do=False, cookie=None,
                options=()):
    """A normal one-question query; edns/cookie/do add an OPT record."""
    if qid is None:
        qid = random.randrange(0, 65536)
    opts = list(options)
    if cookie is not None:
        opts.append((OPT_COOKIE, cookie))
        edns = True
    if do or version:
        edns = True
    add = opt_rr(udp_size, version, do, options=opts) if edns else b""
    return (header(qid, flags, qd=1, ar=1 if edns else 0, opcode=opcode)
            + encode_name(name) + struct.pack("!HH", qtype(qt), qclass) + add)


def frame(msg):
    """TCP framing: 2-byte length prefix."""
    return struct.pack("!H", len(msg)) + msg


# ----------------------------------------------------------------- parsing

class Msg:
    """A parsed DNS message. Sections are lists of RR dicts:
    {name, type, class, ttl, rdata (decoded), raw}."""

    def __init__(self):
        self.id = 0
        self.flags = 0
        self.counts = (0, 0, 0, 0)
        self.question = []        # [(name_in_wire_case, qtype, qclass)]
        self.answer = []
        self.authority = []
        self.additional = []
        self.opt = None           # dict when an OPT record is present
        self.size = 0

    # header bits
    qr = property(lambda s: bool(s.flags & F_QR))
    aa = property(lambda s: bool(s.flags & F_AA))
    tc = property(lambda s: bool(s.flags & F_TC))
    rd = property(lambda s: bool(s.flags & F_RD))
    ra = property(lambda s: bool(s.flags & F_RA))
    ad = property(lambda s: bool(s.flags & F_AD))
    cd = property(lambda s: bool(s.flags & F_CD))
    opcode = property(lambda s: (s.flags >> 11) & 0xf)

    @property
    def rcode(self):
        low = self.flags & 0xf
        if self.opt is not None:
            return (self.opt["ext_rcode"] << 4) | low
        return low

    @property
    def rcode_name(self):
        return RCODE.get(self.rcode, str(self.rcode))

    def rrs(self, section="answer", rtype=None):
        recs = getattr(self, section)
        if rtype is None:
            return recs
        return [r for r in recs if r["type"] == qtype(rtype)]

    def describe(self):
        return ("id=%d rcode=%s flags=%s an=%d ns=%d ar=%d size=%d" % (
            self.id, self.rcode_name,
            "".join(f for f, b in (("qr ", F_QR), ("aa ", F_AA), ("tc ", F_TC),
                                   ("rd ", F_RD), ("ra ", F_RA), ("cd ", F_CD))
                    if self.flags & b).strip().replace(" ", ","),
            *self.counts[1:], self.size))


def read_name(buf, pos):
    """Read a possibly compressed name. Returns (text, next_pos). Text keeps
    the letter case and ends with a dot. Raises ValueError on bad input."""
    labels = []
    end = None
    hops = 0
    total = 1
    while True:
        if pos >= len(buf):
            raise ValueError("name runs past end")
        n = buf[pos]
        if n & 0xc0 == 0xc0:
            if pos + 1 >= len(buf):
                raise ValueError("truncated pointer")
            ptr = ((n & 0x3f) << 8) | buf[pos + 1]
            if end is None:
                end = pos + 2
            if ptr >= pos:
                raise ValueError("forward/self pointer")
            hops += 1
            if hops > 128:
                raise ValueError("pointer loop")
            pos = ptr
            continue
        if n & 0xc0:
            raise ValueError("bad label type")
        pos += 1
        if n == 0:
            break
        if pos + n > len(buf):
            raise ValueError("label runs past end")
        total += n + 1
        if total > 255:
            raise ValueError("name too long")
        labels.append(buf[pos:pos + n].decode("latin-1"))
        pos += n
    return (".".join(labels) + "."), (end if end is not None else pos)


def _rdata(buf, rtype, start, rdlen):
    data = buf[start:start + rdlen]
    if rtype == T["A"] and rdlen == 4:
        return socket.inet_ntop(socket.AF_INET, data)
    if rtype == T["AAAA"] and rdlen == 16:
        return socket.inet_ntop(socket.AF_INET6, data)
    if rtype in (T["CNAME"], T["NS"], T["PTR"]):
        name, end = read_name(buf, start)
        if end != start + rdlen:
            raise ValueError("name rdata length mismatch")
        return name
    if rtype == T["SOA"]:
        mname, p = read_name(buf, start)
        rname, p = read_name(buf, p)
        if p + 20 != start + rdlen:
            raise ValueError("SOA rdata length mismatch")
        serial, refresh, retry, expire, minimum = struct.unpack("!5I", buf[p:p + 20])
        return {"mname": mname, "rname": rname, "serial": serial,
                "refresh": refresh, "retry": retry, "expire": expire,
                "minimum": minimum}
    if rtype == T["SRV"]:
        if rdlen < 7:
            raise ValueError("short SRV")
        pri, wei, port = struct.unpack("!HHH", data[:6])
        target, end = read_name(buf, start + 6)
        if end != start + rdlen:
            raise ValueError("SRV rdata length mismatch")
        return {"priority": pri, "weight": wei, "port": port, "target": target}
    if rtype in (T["TXT"], T["HINFO"]):
        strs, p = [], 0
        while p < rdlen:
            n = data[p]
            if p + 1 + n > rdlen:
                raise ValueError("TXT string runs past rdata")
            strs.append(data[p + 1:p + 1 + n].decode("latin-1"))
            p += 1 + n
        return strs
    return data


def parse(buf):
    """Parse a whole message; raises ValueError when malformed."""
    if len(buf) < 12:
        raise ValueError("shorter than a header (%d bytes)" % len(buf))
    m = Msg()
    m.size = len(buf)
    m.id, m.flags, qd, an, ns, ar = struct.unpack("!HHHHHH", buf[:12])
    m.counts = (qd, an, ns, ar)
    pos = 12
    for _ in range(qd):
        name, pos = read_name(buf, pos)
        if pos + 4 > len(buf):
            raise ValueError("truncated question")
        qt, qc = struct.unpack("!HH", buf[pos:pos + 4])
        pos += 4
        m.question.append((name, qt, qc))
    for section, count in (("answer", an), ("authority", ns),
                           ("additional", ar)):
        for _ in range(count):
            name, pos = read_name(buf, pos)
            if pos + 10 > len(buf):
                raise ValueError("truncated RR header in %s" % section)
            rtype, rclass, ttl, rdlen = struct.unpack("!HHIH", buf[pos:pos + 10])
            pos += 10
            if pos + rdlen > len(buf):
                raise ValueError("rdata runs past end in %s" % section)
            rr = {"name": name, "type": rtype, "class": rclass, "ttl": ttl,
                  "raw": buf[pos:pos + rdlen]}
            if rtype == T["OPT"]:
                if section != "additional" or m.opt is not None:
                    raise ValueError("misplaced or second OPT")
                opts, p = [], pos
                while p < pos + rdlen:
                    if p + 4 > pos + rdlen:
                        raise ValueError("truncated EDNS option")
                    code, olen = struct.unpack("!HH", buf[p:p + 4])
                    if p + 4 + olen > pos + rdlen:
                        raise ValueError("EDNS option overruns")
                    opts.append((code, buf[p + 4:p + 4 + olen]))
                    p += 4 + olen
                m.opt = {"udp_size": rclass, "ext_rcode": ttl >> 24,
                         "version": (ttl >> 16) & 0xff,
                         "do": bool(ttl & 0x8000), "options": opts,
                         "owner": name}
            else:
                rr["rdata"] = _rdata(buf, rtype, pos, rdlen)
                getattr(m, section).append(rr)
            pos += rdlen
    if pos != len(buf):
        raise ValueError("%d trailing bytes" % (len(buf) - pos))
    return m


# ------------------------------------------------------------------ sockets

def family_of(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def udp_exchange(host, port, pkt, timeout=2.0, tries=1, source=None):
    """Send pkt over UDP and return the raw reply whose ID matches, or None
    when nothing came back in time. source: the client address to send
    from (e.g. 127.0.0.55, posing as a pod's IP)."""
    qid = pkt[:2] if len(pkt) >= 2 else None
    with socket.socket(family_of(host), socket.SOCK_DGRAM) as s:
        if source:
            s.bind((source, 0))
        for _ in range(tries):
            s.sendto(pkt, (host, port))
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                s.settimeout(left)
                try:
                    data, _addr = s.recvfrom(65535)
                except socket.timeout:
                    break
                except ConnectionRefusedError:
                    return None
                # another daemon's late reply to a socket that had our port before
                if _addr[:2] != (host, port):
                    continue
                if qid is None or data[:2] == qid:
                    return data
    return None


def udp_query(host, port, name, qt="A", timeout=2.0, source=None, **kw):
    data = udp_exchange(host, port, build_query(name, qt, **kw), timeout,
                        tries=2, source=source)
    if data is None:
        raise AssertionError("no UDP reply to %s %s" % (name, qt))
    return parse(data)


def recv_exact(s, n):
    """Read exactly n bytes; returns fewer only at EOF."""
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def tcp_read_msg(s):
    """Read one framed message; None at a clean EOF before the frame."""
    hdr = recv_exact(s, 2)
    if len(hdr) == 0:
        return None
    if len(hdr) < 2:
        raise ValueError("EOF inside a TCP length prefix")
    (n,) = struct.unpack("!H", hdr)
    body = recv_exact(s, n)
    if len(body) < n:
        raise ValueError("EOF inside a TCP message (%d of %d bytes)"
                         % (len(body), n))
    return body


def tcp_connect(host, port, timeout=3.0, source=None):
    s = socket.socket(family_of(host), socket.SOCK_STREAM)
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    s.connect((host, port))
    return s


def tcp_exchange(host, port, pkt, timeout=3.0, source=None):
    with tcp_connect(host, port, timeout, source) as s:
        s.sendall(frame(pkt))
        data = tcp_read_msg(s)
    if data is None:
        raise AssertionError("TCP connection closed without a reply")
    return data


def tcp_query(host, port, name, qt="A", timeout=3.0, source=None, **kw):
    return parse(tcp_exchange(host, port, build_query(name, qt, **kw), timeout,
                              source))
