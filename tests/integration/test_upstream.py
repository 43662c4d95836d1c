"""External names: forwarding through libunbound to a real authoritative
server (NSD, see authority.py), the answer cache in front of it (TTL ageing,
clamps, negative caching, prefetch, serve-stale, coalescing, a random-name
flood under a small cache), forward zones, recursion from a local root, and
DNSSEC validation with a bogus case."""

import os
import re
import select
import socket
import struct
import subprocess
import threading
import time
import urllib.request

import authority
import dnsmsg
import harness

SITE = authority.zone_path("site.example.")
SUB = authority.zone_path("sub.site.example.")
CORP = authority.zone_path("corp.internal.")
RRSIG = 46


def forwarding(env, up, upstream=None, **over):
    """A daemon of this test's own forwarding everything to authority up."""
    cfg = {"servers": [up.addr], "timeout": "1s"}
    cfg.update(upstream or {})
    return env.start(upstream=cfg, **over)


def a_records(m):
    return sorted(r["rdata"] for r in m.rrs("answer", "A"))


def ttls(m):
    return [r["ttl"] for r in m.answer]


def test_forwarded_answers_keep_the_clients_id_and_case(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        m = d.udp("WwW.Site.Example", "A", qid=0x4242)
        assert m.id == 0x4242 and m.rcode_name == "NOERROR", m.describe()
        assert m.question[0][0] == "WwW.Site.Example.", m.question
        assert a_records(m) == ["192.0.2.1"], m.answer
        assert m.ra and not m.aa, m.describe()
        m = d.udp("www.site.example", "AAAA")
        assert [r["rdata"] for r in m.answer] == ["2001:db8::1"], m.answer
        m = d.udp("mail.site.example", "MX")
        assert m.rcode_name == "NOERROR" and len(m.rrs("answer", "MX")) == 1, m.answer
        r = d.dig("txt.site.example", "TXT")
        assert r.status == "NOERROR" and len(r.rrs("answer", "TXT")) == 3, r.text
        m = d.udp("c1.site.example", "A")
        assert [x["type"] for x in m.answer] == [5, 5, 5, 1], m.answer  # 3 CNAMEs, A
        assert a_records(m) == ["192.0.2.1"], m.answer


def test_tcp_misses_are_answered_through_the_worker(env):
    # A miss over TCP is answered by the resolver thread through the
    # worker's completion queue; several on one connection may come back
    # in any order (RFC 7766), each under its own ID.
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        m = d.tcp("mail.site.example", "MX", qid=0x5151)
        assert m.id == 0x5151 and m.rcode_name == "NOERROR", m.describe()
        assert len(m.rrs("answer", "MX")) == 1, m.answer
        assert up.queries() == 1, "not a miss: %d upstream queries" % up.queries()
        names = ["www", "txt", "noaaaa", "c1", "nothere"]
        with socket.create_connection(("127.0.0.1", d.port), timeout=3) as s:
            for i, n in enumerate(names):
                q = dnsmsg.build_query(n + ".site.example", "A", qid=100 + i)
                s.sendall(struct.pack("!H", len(q)) + q)
            replies = {}
            buf = b""
            while len(replies) < len(names):
                chunk = s.recv(65535)
                assert chunk, "connection closed after %d replies" % len(replies)
                buf += chunk
                while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
                    n = struct.unpack("!H", buf[:2])[0]
                    m = dnsmsg.parse(buf[2:2 + n])
                    replies[m.id] = m
                    buf = buf[2 + n:]
        assert sorted(replies) == list(range(100, 100 + len(names))), sorted(replies)
        assert a_records(replies[100]) == ["192.0.2.1"], replies[100].describe()
        assert replies[104].rcode_name == "NXDOMAIN", replies[104].describe()


def test_a_cname_chains_links_are_asked_once_not_for_every_type(env):
    # libunbound restarts a question at each CNAME of an answer and takes
    # the chain's next names from its RRset cache once it holds them, so
    # the first question about c1 -> c2 -> c3 -> www asks the upstream for
    # each link, and the next type asks for www alone. With forward-no-cache
    # (libunbound caching nothing a forwarder answers) every question asked
    # for every link again (docs/ARCHITECTURE.md).
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        for qtype in ("A", "AAAA", "MX"):
            asked = up.queries()
            m = d.udp("c1.site.example", qtype)
            assert m.rcode_name == "NOERROR" and len(m.rrs("answer", "CNAME")) == 3, \
                m.describe()
            if qtype != "A":  # the first asks for every link
                assert up.queries() - asked == 1, "%s asked the upstream %d times" % (
                    qtype, up.queries() - asked)


def test_zero_ttl_answers_are_passed_on_but_not_cached(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        for i in range(1, 3):
            m = d.udp("Zero.site.example", "A", qid=0x7000 + i)
            assert m.id == 0x7000 + i and m.rcode_name == "NOERROR", m.describe()
            assert a_records(m) == ["192.0.2.9"] and ttls(m) == [0], m.answer
            assert m.question[0][0] == "Zero.site.example.", m.question
            assert up.queries() == i, "TTL 0 was cached: %d upstream queries" % up.queries()


def test_negative_answers_carry_the_soa_and_are_cached(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        m = d.udp("nothere.site.example", "A")
        assert m.rcode_name == "NXDOMAIN", m.describe()
        soa = m.rrs("authority", "SOA")
        assert len(soa) == 1 and soa[0]["ttl"] <= 30, m.authority  # SOA minimum
        m = d.udp("noaaaa.site.example", "AAAA")
        assert m.rcode_name == "NOERROR" and m.answer == [], m.describe()
        assert len(m.rrs("authority", "SOA")) == 1, m.authority
        asked = up.queries()
        for name, qt, rcode in (("nothere.site.example", "A", "NXDOMAIN"),
                                ("noaaaa.site.example", "AAAA", "NOERROR")):
            m = d.udp(name, qt)
            assert m.rcode_name == rcode, m.describe()
        assert up.queries() == asked, "negative answers were not cached"


def test_large_answer_truncates_over_udp_and_comes_whole_over_tcp(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        m = d.udp("big.site.example", "TXT", edns=True, udp_size=1232)
        assert m.tc and m.answer == [], m.describe()
        m = d.tcp("big.site.example", "TXT")
        assert not m.tc and len(m.answer) == 40, m.describe()
        assert m.size > 1232, m.size


def test_second_query_comes_from_the_cache_with_aged_ttls(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        first = d.udp("www.site.example", "A")
        asked = up.queries()
        time.sleep(2.2)
        second = d.udp("www.site.example", "A")
        assert up.queries() == asked, "a cache hit went upstream"
        assert a_records(second) == a_records(first)
        aged = first.answer[0]["ttl"] - second.answer[0]["ttl"]
        assert 2 <= aged <= 3, "TTL %d then %d" % (first.answer[0]["ttl"],
                                                   second.answer[0]["ttl"])
        m = d.tcp("www.site.example", "A")  # TCP reads the same cache
        assert up.queries() == asked and a_records(m) == ["192.0.2.1"], m.describe()


def test_min_and_max_ttl_clamp_what_clients_see(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up, cache={"min_ttl": "60s", "max_ttl": "100s"})
        assert ttls(d.udp("short.site.example", "A")) == [60]   # zone says 5
        assert ttls(d.udp("long.site.example", "A")) == [100]   # zone says 7d
        assert ttls(d.udp("www.site.example", "A")) == [100]    # zone says 300


def test_prefetch_refreshes_a_popular_entry_before_it_expires(env):
    # max_ttl 10s makes every entry live 10 s; its last 10% is the last
    # second, and a hit then is answered from the cache and starts one refresh.
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up, cache={"max_ttl": "10s"})
        d.udp("www.site.example", "A")
        # libunbound keeps its last message: make it another one, so the
        # refresh cannot be answered from there (ARCHITECTURE.md).
        d.udp("mail.site.example", "MX")
        asked = up.queries()
        deadline = time.monotonic() + 12
        refreshed = False
        while time.monotonic() < deadline and not refreshed:
            m = d.udp("www.site.example", "A")
            assert m.rcode_name == "NOERROR" and m.answer, m.describe()
            time.sleep(0.1)
            refreshed = up.queries() > asked
        assert refreshed, "no refresh reached the upstream before expiry"
        assert up.queries() == asked + 1, "one hit, one refresh"
        m = d.udp("www.site.example", "A")
        assert ttls(m)[0] >= 9, "refreshed entry not served: %s" % ttls(m)


test_prefetch_refreshes_a_popular_entry_before_it_expires.timeout = 30


def test_upstream_outage_serves_stale_then_recovers(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up, upstream={"timeout": "1s"},
                       cache={"max_ttl": "1s"})
        assert a_records(d.udp("www.site.example", "A")) == ["192.0.2.1"]
        d.udp("mail.site.example", "MX")  # libunbound's one kept message
        up.stop()
        time.sleep(1.5)  # the entry is expired now
        for _ in range(3):
            start = time.monotonic()
            m = d.udp("www.site.example", "A", timeout=3)
            took = time.monotonic() - start
            assert m.rcode_name == "NOERROR", m.describe()
            assert ttls(m) == [30], "stale answers carry TTL 30: %s" % m.answer
            assert took < 1.5, "stale answer took %.2fs" % took
        for name in ("never1.site.example", "never2.site.example"):
            start = time.monotonic()
            m = d.udp(name, "A", timeout=3)
            took = time.monotonic() - start
            assert m.rcode_name == "SERVFAIL", m.describe()
            assert took < 1.5, "SERVFAIL after %.2fs, timeout is 1s" % took
        up.restart()
        deadline = time.monotonic() + 10
        while True:
            m = d.udp("www.site.example", "A", timeout=3)
            if ttls(m) != [30]:
                break
            assert time.monotonic() < deadline, "never recovered: %s" % m.answer
            time.sleep(0.5)
        assert a_records(m) == ["192.0.2.1"] and ttls(m)[0] <= 1, m.answer
        m = d.udp("txt.site.example", "TXT", timeout=3)
        assert m.rcode_name == "NOERROR" and m.answer, m.describe()


test_upstream_outage_serves_stale_then_recovers.timeout = 40


class SlowProxy:
    """A UDP relay that holds each query `delay` seconds before passing it
    on to 127.0.0.1:target, so many client queries arrive while the first
    upstream query is still in flight; while `drop` is set it answers
    nothing at all (an upstream that has stopped answering)."""

    def __init__(self, target, delay, drop=False):
        self.target, self.delay, self.drop = target, delay, drop
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.relayed = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _relay(self, data, client):
        time.sleep(self.delay)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(2)
            s.sendto(data, ("127.0.0.1", self.target))
            try:
                self.sock.sendto(s.recvfrom(65535)[0], client)
            except OSError:
                pass

    def _serve(self):
        self.sock.settimeout(0.2)
        while not self.stopping:
            try:
                data, client = self.sock.recvfrom(65535)
            except OSError:
                continue
            if self.drop:
                continue
            self.relayed += 1
            threading.Thread(target=self._relay, args=(data, client),
                             daemon=True).start()

    def close(self):
        self.stopping = True
        self.thread.join(2)
        self.sock.close()


def stale_at_the_client_response_timer(env, resolver):
    # RFC 8767: an expired answer whose refresh takes seconds goes out stale
    # at cache.stale_answer_timeout (400 ms), not at upstream.timeout (3 s),
    # and the refresh still lands in the cache. The upstream is slow (each
    # answer 1 s late), not failing: nothing marks it so. resolver: where
    # it runs (upstream.resolver): on its own thread, each miss comes
    # through a ring and is looked up again; on the only worker, the
    # worker's own look-up is all there is.
    with authority.Authority({"site.example.": SITE}) as up:
        proxy = SlowProxy(up.port, 0)
        try:
            d = env.start(upstream={"servers": ["127.0.0.1:%d" % proxy.port], "timeout": "3s",
                                    "resolver": resolver},
                          cache={"max_ttl": "1s"}, listen={"workers": 1})
            assert a_records(d.udp("www.site.example", "A")) == ["192.0.2.1"]
            d.udp("mail.site.example", "MX")  # libunbound's one kept message
            proxy.delay = 1.0
            time.sleep(1.5)  # expired now
            start = time.monotonic()
            m = d.udp("www.site.example", "A", timeout=2.5)
            took = time.monotonic() - start
            assert m.rcode_name == "NOERROR" and ttls(m) == [30], m.describe()
            # 3 s without the timer; the margin is what a busy machine may add
            assert took < 2.0, "the stale answer took %.2f s" % took
            # the refresh lands, in its own time: libunbound's retransmissions
            # (each answered 1 s late) get an answer about 4 s after it began,
            # after upstream.timeout: a client without the timer would get
            # the stale answer at 3 s, not a fresh one sooner
            deadline = time.monotonic() + 20
            while ttls(m) == [30]:
                assert time.monotonic() < deadline, "the refresh never landed"
                time.sleep(0.3)
                m = d.udp("www.site.example", "A", timeout=3)
            assert a_records(m) == ["192.0.2.1"], m.describe()
        finally:
            proxy.close()


def test_a_slow_refresh_gets_the_stale_answer_at_the_client_response_timer(env):
    stale_at_the_client_response_timer(env, "own_thread")


test_a_slow_refresh_gets_the_stale_answer_at_the_client_response_timer.timeout = 40


def test_a_slow_refresh_gets_the_stale_answer_where_the_resolver_runs_on_the_worker(env):
    stale_at_the_client_response_timer(env, "first_worker")


test_a_slow_refresh_gets_the_stale_answer_where_the_resolver_runs_on_the_worker.timeout = 40


def burst(port, name, n, sockets=10):
    """n identical queries from several sockets, all sent before any reply
    is read; returns {qid: parsed reply}."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(sockets)]
    replies = {}
    try:
        for s in socks:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        for qid in range(n):
            socks[qid % sockets].sendto(dnsmsg.build_query(name, "A", qid=qid),
                                        ("127.0.0.1", port))
        deadline = time.monotonic() + 5
        while len(replies) < n and time.monotonic() < deadline:
            ready, _, _ = select.select(socks, [], [], 0.2)
            for s in ready:
                m = dnsmsg.parse(s.recv(65535))
                replies[m.id] = m
    finally:
        for s in socks:
            s.close()
    return replies


def test_identical_misses_share_one_upstream_query(env):
    with authority.Authority({"site.example.": SITE}) as up:
        # 0.25 s: below libunbound's first retransmit (376 ms), which
        # would be a second query of libunbound's own, not ours.
        proxy = SlowProxy(up.port, 0.25)
        try:
            d = env.start(upstream={"servers": ["127.0.0.1:%d" % proxy.port],
                                    "timeout": "3s"})
            asked = up.queries()
            replies = burst(d.port, "www.site.example", 1000)
            assert len(replies) == 1000, "%d replies" % len(replies)
            bad = [m.describe() for m in replies.values()
                   if m.rcode_name != "NOERROR" or a_records(m) != ["192.0.2.1"]]
            assert not bad, bad[:3]
            assert up.queries() - asked == 1, "%d upstream queries" % (up.queries() - asked)
            assert proxy.relayed == 1, proxy.relayed
        finally:
            proxy.close()


test_identical_misses_share_one_upstream_query.timeout = 30


def _thread_names(pid):
    names = []
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            names.append(f.read().strip())
    return names


def test_the_resolver_runs_on_the_only_worker(env):
    """upstream.resolver auto with one worker: libunbound runs on worker/0,
    there is no resolver thread (issue 27). Misses over UDP and TCP, a
    thousand identical ones sharing one upstream question, and a miss
    still waiting on a slow upstream at SIGTERM, answered before exit."""
    with authority.Authority({"site.example.": SITE}) as up:
        proxy = SlowProxy(up.port, 0.25)
        try:
            d = env.start(listen={"workers": 1},
                          upstream={"servers": ["127.0.0.1:%d" % proxy.port], "timeout": "3s"})
            names = _thread_names(d.proc.pid)
            assert "worker/0" in names and "resolver" not in names, names
            assert "runs_on=worker/0" in d.stderr(), d.tail()  # the start-up log says where
            assert a_records(d.udp("www.site.example")) == ["192.0.2.1"]
            m = d.tcp("mail.site.example", "MX")
            assert m.rcode_name == "NOERROR" and len(m.rrs("answer", "MX")) == 1, m.describe()
            asked = up.queries()
            replies = burst(d.port, "noaaaa.site.example", 1000)
            assert len(replies) == 1000, "%d replies" % len(replies)
            bad = [m.describe() for m in replies.values() if a_records(m) != ["192.0.2.8"]]
            assert not bad, bad[:3]
            assert up.queries() - asked == 1, "%d upstream queries" % (up.queries() - asked)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(2)
                relayed = proxy.relayed
                s.sendto(dnsmsg.build_query("mx1.site.example", "A", qid=77),
                         ("127.0.0.1", d.port))
                # SIGTERM once it waits on the proxy's 0.25 s: the settle's 0.5 s covers it
                deadline = time.monotonic() + 5
                while proxy.relayed == relayed and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert proxy.relayed == relayed + 1, "the miss never reached the upstream"
                rc, _ = d.stop(timeout=3)
                m = dnsmsg.parse(s.recv(65535))
            assert rc == 0, d.tail()
            assert m.id == 77 and a_records(m) == ["192.0.2.25"], m.describe()
        finally:
            proxy.close()


test_the_resolver_runs_on_the_only_worker.timeout = 30


def test_the_resolver_on_the_first_of_two_workers_answers_both(env):
    """upstream.resolver: first_worker with two workers: worker/1's misses
    reach it through its ring and the loop's descriptor in worker/0's epoll
    set; own_thread with one worker keeps the resolver thread."""
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up, upstream={"resolver": "first_worker"}, listen={"workers": 2})
        names = _thread_names(d.proc.pid)
        assert "worker/1" in names and "resolver" not in names, names
        # 32 source ports: SO_REUSEPORT spreads them over both workers
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(32)]
        try:
            for i, s in enumerate(socks):
                s.settimeout(3)
                s.sendto(dnsmsg.build_query("n%d.site.example" % i, "A", qid=i),
                         ("127.0.0.1", d.port))
            rcodes = [dnsmsg.parse(s.recv(65535)).rcode_name for s in socks]
        finally:
            for s in socks:
                s.close()
        assert rcodes == ["NXDOMAIN"] * 32, rcodes
        assert up.queries() == 32, up.queries()
        d.stop()
        d = forwarding(env, up, upstream={"resolver": "own_thread"}, listen={"workers": 1})
        assert "resolver" in _thread_names(d.proc.pid)
        assert "runs_on=resolver" in d.stderr(), d.tail()
        assert a_records(d.udp("www.site.example")) == ["192.0.2.1"]


def _question(msg):
    """(lower-case name, the question's bytes) of a one-question message"""
    i, labels = 12, []
    while msg[i]:
        labels.append(msg[i + 1:i + 1 + msg[i]].decode().lower())
        i += msg[i] + 1
    return ".".join(labels), msg[12:i + 5]


def _a_reply(query, addr="192.0.2.77"):
    """An authoritative answer to query's question: one A record, TTL 300."""
    qid = struct.unpack("!H", query[:2])[0]
    _, question = _question(query)
    return (dnsmsg.header(qid, dnsmsg.F_QR | dnsmsg.F_AA, qd=1, an=1) + question +
            struct.pack("!HHHIH", 0xC00C, 1, 1, 300, 4) + socket.inet_aton(addr))


def _udp_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(3)
    return s


def test_the_resolvers_replies_go_before_the_client_queries_of_the_same_turn(env):
    """With the resolver on the worker, one wake-up that finds an upstream's
    reply and new client queries answers the waiting client first: its
    query already waited a round trip, and the batch's queries (looked up,
    answered, their misses asked) would make it wait longer (issue 27: p50
    at half Unbound's rate). The worker is held stopped while the reply and
    ten queries the cache answers arrive, so its next epoll_wait finds
    both; the client's socket receives in the order the answers left.
    libunbound asks again after 50 ms at the least (its shortest
    retransmission timeout): an attempt where it did, before the stop, has
    the reply land on a socket already closed and is taken again."""
    upstream, client = _udp_socket(), _udp_socket()

    def answer_upstream(until_name):
        """Answer the resolver's questions until it asks until_name; returns that one."""
        while True:
            data, addr = upstream.recvfrom(65535)
            if _question(data)[0] == until_name:
                return data, addr
            upstream.sendto(_a_reply(data), addr)

    def attempt(d, server, n):
        """The ids in the order the client got them, and how often the held name was asked again."""
        name = "held%d.order.example" % n
        client.sendto(dnsmsg.build_query(name, "A", qid=n), server)
        held, resolver_addr = answer_upstream(name)
        with harness.StoppedThread(harness.thread_id(d.proc.pid, "worker/0")):
            upstream.sendto(_a_reply(held), resolver_addr)
            for i in range(10):
                client.sendto(dnsmsg.build_query("hit%d.order.example" % i, "A", qid=200 + i),
                              server)
            time.sleep(0.005)  # all of it queued before the worker runs again
        order, asked_again = [], 0
        while len(order) < 11:
            ready, _, _ = select.select([client, upstream], [], [], 3)
            assert ready, "got %s, the held name asked again %d times" % (order, asked_again)
            if upstream in ready:
                data, addr = upstream.recvfrom(65535)
                asked_again += _question(data)[0] == name
                upstream.sendto(_a_reply(data), addr)
            if client in ready:
                m = dnsmsg.parse(client.recv(65535))
                assert a_records(m) == ["192.0.2.77"], m.describe()
                order.append(m.id)
        return order, asked_again

    try:
        d = env.start(listen={"workers": 1},
                      upstream={"servers": ["127.0.0.1:%d" % upstream.getsockname()[1]],
                                "timeout": "3s"})
        assert "runs_on=worker/0" in d.stderr(), d.tail()
        server = ("127.0.0.1", d.port)
        for i in range(10):  # cached: the batch's queries are answered in the batch
            client.sendto(dnsmsg.build_query("hit%d.order.example" % i, "A", qid=100 + i), server)
            q, addr = answer_upstream("hit%d.order.example" % i)
            upstream.sendto(_a_reply(q), addr)
            assert dnsmsg.parse(client.recv(65535)).id == 100 + i
        tries = []
        for n in range(1, 4):
            order, asked_again = attempt(d, server, n)
            tries.append((order, asked_again))
            if not asked_again:
                assert order == [n] + list(range(200, 210)), order
                return
        raise AssertionError("the resolver asked again in every attempt: %s" % tries)
    finally:
        upstream.close()
        client.close()


def _rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def _sanitized(binary):
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


# RSS may grow past its start-up value by cache.size plus this: libunbound's
# own caches (256 KiB of RRsets when forwarding, 1 MiB of negative answers,
# its infrastructure cache), its query
# state, and malloc's free lists (docs/performance.md).
FLOOD_OVERHEAD_KIB = 8 * 1024


HOT_ZONE = """$TTL 300
@ IN SOA ns.hot.example. admin.hot.example. 1 3600 600 86400 300
@ IN NS ns.hot.example.
ns IN A 192.0.2.53
www IN A 192.0.2.80
"""


def test_random_name_flood_stays_within_the_cache_size(env):
    # The hot name lives on an authority of its own, so "fetched again"
    # is counted there, not guessed from its TTL. Its TTL must still never
    # go up between two answers, whichever worker ages it. The flood is
    # several times what a 2 MiB cache holds (evictions prove it filled),
    # and takes the time upstream.max_rate (5,000 a second) gives it.
    sanitized = _sanitized(env.binary)
    names = 20000 if sanitized else 60000
    mport = harness.free_port()
    with authority.Authority({"site.example.": SITE}) as up, \
            authority.Authority({"hot.example.": HOT_ZONE}) as hot_up:
        d = forwarding(env, up, upstream={"timeout": "2s",
                                          "forward_zones": {"hot.example": [hot_up.addr]}},
                       cache={"size": "2MiB"}, metrics={"listen": "127.0.0.1:%d" % mport})
        hot = d.udp("www.hot.example", "A")
        assert a_records(hot) == ["192.0.2.80"]
        assert hot_up.queries() == 1, hot_up.queries()
        before = _rss_kib(d.proc.pid)
        qfile = os.path.join(env.tmp, "flood.txt")
        with open(qfile, "w") as f:
            for i in range(names):
                f.write("r%07d.site.example A\n" % i)
        perf = subprocess.Popen(
            ["dnsperf", "-s", "127.0.0.1", "-p", str(d.port), "-d", qfile,
             "-n", "1", "-Q", "20000", "-c", "4", "-t", "3"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        harness.track_process(perf)
        last_ttl, checks = hot.answer[0]["ttl"], 0
        while perf.poll() is None:
            m = d.udp("www.hot.example", "A")
            assert m.rcode_name == "NOERROR", "hot name: %s" % m.describe()
            ttl = m.answer[0]["ttl"]
            assert ttl <= last_ttl, "hot name's TTL went up (%d after %d)" % (ttl, last_ttl)
            last_ttl, checks = ttl, checks + 1
            time.sleep(0.05)
        out = perf.communicate()[0]
        assert perf.returncode == 0, out
        assert checks > 5, "the flood ended before the hot name was checked"
        assert hot_up.queries() == 1, "hot name fetched again (%d queries)" % hot_up.queries()
        completed = int(out.split("Queries completed:")[1].split()[0])
        assert completed >= names * 0.95, out
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as h:
            text = h.read().decode()
        evicted = re.search(r"(?m)^localdns_cache_evictions_total (\S+)$", text)
        assert evicted and float(evicted.group(1)) > 0, "the flood never filled the cache"
        grown = _rss_kib(d.proc.pid) - before
        if not sanitized:  # ASan's shadow memory and quarantine say nothing
            assert grown <= 2 * 1024 + FLOOD_OVERHEAD_KIB, "RSS grew %d KiB" % grown
        assert d.alive(), d.tail()


test_random_name_flood_stays_within_the_cache_size.timeout = 90
test_random_name_flood_stays_within_the_cache_size.alone = True   # a flood: no other test beside it


def test_a_flood_while_the_upstream_is_silent_stays_bounded_and_recovers(env):
    # libunbound holds a query to a silent forwarder for minutes (~12 KB a
    # name). localdns runs at most 1,024 on a context, queues the rest (a
    # bounded queue that gives up its longest-waiting question when full),
    # and renews a full context from which nothing came back for
    # upstream.timeout, at most once per timeout: the held queries, and
    # RSS, stay bounded; every client gets SERVFAIL at its deadline, and new
    # names resolve as soon as the upstream answers again.
    #
    # Judged by counts, not by the machine's speed: two clients (each under
    # its own waiter share) ask 6,000 new names in all, more than a context
    # and the queue hold (1,024 + 2,048), and with a 6 s timeout nothing
    # frees a place before the queue has overflowed, however slowly the
    # names arrive (a context is renewed 6 s after it filled; a queued
    # question waits for its client's 6 s deadline).
    sanitized = _sanitized(env.binary)
    per_client, rate = 3000, 1000
    with authority.Authority({"site.example.": SITE}) as up:
        proxy = SlowProxy(up.port, 0, drop=True)
        try:
            mport = harness.free_port()
            d = env.start(upstream={"servers": ["127.0.0.1:%d" % proxy.port], "timeout": "6s",
                                    "max_pending_per_client": 65535},
                          metrics={"listen": "127.0.0.1:%d" % mport})
            before = _rss_kib(d.proc.pid)
            results = {}

            def client(source):
                flood = [("%s-%05d.site.example" % (source.replace(".", "-"), i), "A")
                         for i in range(per_client)]
                results[source] = harness.dnsgen(
                    env, d.port, flood, "-S", source, "-n", str(per_client), "-Q", str(rate),
                    "-l", "10", "-q", str(per_client), "-t", "14")
            clients = [threading.Thread(target=client, args=(s,)) for s in ("127.0.0.1", "127.0.0.2")]
            for t in clients:
                t.start()
            for t in clients:
                t.join()
            for source in ("127.0.0.1", "127.0.0.2"):
                r, summary = results[source]
                assert r["received"] == per_client and r["servfail"] == per_client, summary
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as h:
                text = h.read().decode()

            def metric(name):
                return float(re.search(r"(?m)^%s (\S+)$" % re.escape(name), text).group(1))
            assert metric("localdns_upstream_resolving") <= 2048, text
            assert metric("localdns_upstream_queued") <= 2048, text
            assert metric("localdns_upstream_flights") <= 8192, text
            assert metric("localdns_upstream_context_renewals_total") >= 1, text
            # the queue overflowed: its longest-waiting questions gave way
            assert metric('localdns_upstream_shed_total{reason="queue_full"}') > 0, text
            grown = _rss_kib(d.proc.pid) - before
            if not sanitized:  # 6,000 names held would be ~70 MiB
                assert grown <= 48 * 1024, "RSS grew %d KiB" % grown
            assert "libunbound has too many queries running" in d.stderr(), d.tail()
            proxy.drop = False
            deadline = time.monotonic() + 8
            while True:
                m = d.udp("www.site.example", "A", timeout=3)
                if m.rcode_name == "NOERROR":
                    break
                assert time.monotonic() < deadline, "no recovery: %s" % m.describe()
                time.sleep(0.5)
            assert a_records(m) == ["192.0.2.1"], m.describe()
        finally:
            proxy.close()


test_a_flood_while_the_upstream_is_silent_stays_bounded_and_recovers.timeout = 60
test_a_flood_while_the_upstream_is_silent_stays_bounded_and_recovers.alone = True


WILDCARD_ZONE = """$TTL 300
@ IN SOA ns.rl.example. admin.rl.example. 1 3600 600 86400 300
@ IN NS ns.rl.example.
ns IN A 192.0.2.53
* IN A 192.0.2.1
"""


def test_a_rate_limiting_upstream_costs_latency_not_answers(env):
    # NSD with its default response rate limiting answers 200 a second per
    # /24: of the rest, every second answer comes back truncated (the
    # resolver must retry over TCP) and the others are dropped (it must
    # retransmit). A burst of new names at several times that rate must
    # still be answered, as Unbound answers it (tests/bench/ratelimit.py
    # compares the two; docs/performance.md). libunbound's library defaults
    # (16 outgoing ports, 2 TCP connections) answered about a third.
    # Answers are what is judged: the client deadline (upstream.timeout)
    # leaves room for a machine slowed by other work, so a slow run costs
    # latency here too, not answers.
    sanitized = _sanitized(env.binary)
    rate, seconds = (400, 4) if sanitized else (1500, 5)
    with authority.Authority({"rl.example.": WILDCARD_ZONE}, rrl=True) as up:
        mport = harness.free_port()
        d = forwarding(env, up, upstream={"timeout": "5s"},
                       metrics={"listen": "127.0.0.1:%d" % mport})
        names = [("n%06d.rl.example" % i, "A") for i in range(rate * seconds)]
        r, summary = harness.dnsgen(env, d.port, names, "-n", str(len(names)), "-Q", str(rate),
                                    "-l", "10", "-q", "2000", "-t", "8")
        assert r["noerror"] >= len(names) * 0.99, "answers collapsed: " + summary
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as h:
            text = h.read().decode()
        def metric(name):
            return float(re.search(r"(?m)^%s (\S+)$" % re.escape(name), text).group(1))
        # what libunbound learned about the server (RTT, TCP) was kept
        assert metric("localdns_upstream_context_renewals_total") == 0, text
        # a question libunbound gave up on is asked once more (failures here
        # are far inside the retry budget), and only one that failed twice
        # reaches its client as SERVFAIL
        failed = metric('localdns_upstream_errors_total{kind="resolution"}')
        assert metric("localdns_upstream_retries_total") >= failed, text
        assert r["servfail"] == failed, "%s\n%s" % (summary, text)


test_a_rate_limiting_upstream_costs_latency_not_answers.timeout = 60
test_a_rate_limiting_upstream_costs_latency_not_answers.alone = True


class TruncatingForwarder:
    """A forwarder whose every UDP answer is truncated (header and question,
    TC set), so that each question is asked again over TCP, where it gets an
    A record; counts the TCP connections it accepts."""

    def __init__(self):
        self.port = harness.free_port()
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("127.0.0.1", self.port))
        self.tcp.listen(1024)
        self.connections = 0
        self.stopping = False
        for fn in (self._udp, self._accept):
            threading.Thread(target=fn, daemon=True).start()

    @staticmethod
    def _reply(q, truncated):
        end = 12
        while end < len(q) and q[end]:
            end += q[end] + 1
        question = q[12:end + 5]
        if truncated:
            return q[:2] + struct.pack("!HHHHH", 0x8380, 1, 0, 0, 0) + question
        rr = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 300, 4) + socket.inet_aton("192.0.2.7")
        return q[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0) + question + rr

    def _udp(self):
        self.udp.settimeout(0.2)
        while not self.stopping:
            try:
                q, peer = self.udp.recvfrom(4096)
                self.udp.sendto(self._reply(q, True), peer)
            except OSError:
                continue

    def _accept(self):
        self.tcp.settimeout(0.2)
        while not self.stopping:
            try:
                c = self.tcp.accept()[0]
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b""
        with c:
            c.settimeout(10)
            try:
                while True:
                    data = c.recv(65535)
                    if not data:
                        return
                    buf += data
                    while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
                        n = struct.unpack("!H", buf[:2])[0]
                        a = self._reply(buf[2:2 + n], False)
                        buf = buf[2 + n:]
                        c.sendall(struct.pack("!H", len(a)) + a)
            except OSError:
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stopping = True
        self.udp.close()
        self.tcp.close()


def test_truncated_answers_share_the_tcp_connections_to_the_forwarder(env):
    # Every UDP answer of this forwarder is truncated, so every question is
    # asked again over TCP. libunbound keeps up to 10 connections open and
    # sends each new question down one of them. Debian 12's libunbound
    # (1.17) finds a connection to reuse by comparing pointers (a key on
    # its own thread's stack against connection records our resolver
    # thread allocated); where that thread's malloc arena lay above
    # libunbound's stack it never found one, and opened a connection per
    # question: against a rate-limiting forwarder under load, hundreds a
    # second, refused or reset, each question then failing in
    # milliseconds (SERVFAIL; docs/performance.md). Eight workers made that
    # layout every time here; one malloc arena for the process (main.c)
    # keeps every record below every thread stack.
    with TruncatingForwarder() as up:
        d = env.start(listen={"workers": 8},
                      upstream={"servers": ["127.0.0.1:%d" % up.port], "timeout": "5s"})
        names = [("t%04d.tc.example" % i, "A") for i in range(300)]
        r, summary = harness.dnsgen(env, d.port, names, "-n", str(len(names)), "-Q", "1000",
                                    "-q", "50", "-l", "10", "-t", "5")
        assert r["noerror"] == len(names), summary
        assert up.connections <= 10, "%d TCP connections for %d truncated answers (%s)" % (
            up.connections, len(names), summary)


test_truncated_answers_share_the_tcp_connections_to_the_forwarder.timeout = 40


def test_retries_stay_within_a_tenth_of_the_questions_when_most_fail(env):
    # A question libunbound fails is asked once more, but only within a
    # budget of a tenth of the questions asked (and a burst of 100 after a
    # quiet spell): when most questions fail, asking each twice only adds
    # to what the upstream refuses. NSD refuses names outside its zone, so
    # every one of these fails.
    names = 2000
    with authority.Authority({"site.example.": SITE}) as up:
        mport = harness.free_port()
        d = forwarding(env, up, upstream={"timeout": "4s", "max_pending_per_client": 65535},
                       metrics={"listen": "127.0.0.1:%d" % mport})
        r, summary = harness.dnsgen(env, d.port, [("f%05d.elsewhere.example" % i, "A")
                                                  for i in range(names)],
                                    "-n", str(names), "-Q", "1000", "-q", str(names), "-t", "8")
        assert r["servfail"] == names, summary
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as h:
            text = h.read().decode()

        def metric(name):
            return float(re.search(r"(?m)^%s (\S+)$" % re.escape(name), text).group(1))
        retries = metric("localdns_upstream_retries_total")
        assert 0 < retries <= 100 + names / 10 + 1, text
        assert metric('localdns_upstream_results_total{result="SERVFAIL"}') >= names, text


test_retries_stay_within_a_tenth_of_the_questions_when_most_fail.alone = True


def test_max_rate_paces_new_names_and_keeps_their_answers(env):
    # upstream.max_rate: a burst of new names waits its turn in localdns
    # instead of going upstream at once; it costs latency, not answers.
    rate, names = 200, 400
    with authority.Authority({"rl.example.": WILDCARD_ZONE}) as up:
        mport = harness.free_port()
        # one client here: its own share (the hostile-client tests check it) lifted
        d = forwarding(env, up, upstream={"timeout": "4s", "max_rate": rate,
                                          "max_pending_per_client": 65535},
                       metrics={"listen": "127.0.0.1:%d" % mport})
        before = up.queries()
        start = time.monotonic()
        r, summary = harness.dnsgen(env, d.port, [("p%04d.rl.example" % i, "A")
                                                  for i in range(names)],
                                    "-n", str(names), "-q", str(names), "-t", "5")
        elapsed = time.monotonic() - start
        assert r["noerror"] == names, summary
        sent = up.queries() - before
        # however slow this machine, localdns cannot have sent more than
        # the rate allows in the time the test saw pass (plus one burst)
        assert sent <= rate * elapsed + rate / 10 + 2, (sent, elapsed)
        assert r["max_us"] >= 1e6 * (names - rate / 10 - 5) / rate * 0.9, summary
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as h:
            text = h.read().decode()
        paced = re.search(r"(?m)^localdns_upstream_paced_total (\S+)$", text)
        assert paced and float(paced.group(1)) > 0, text
        assert "upstream.max_rate reached" in d.stderr(), d.tail()


test_max_rate_paces_new_names_and_keeps_their_answers.timeout = 40


def test_forward_zones_longest_match_wins(env):
    with authority.Authority({"site.example.": SITE}) as up, \
            authority.Authority({"sub.site.example.": SUB}) as sub, \
            authority.Authority({"corp.internal.": CORP}) as corp:
        d = forwarding(env, up, upstream={"forward_zones": {
            "corp.internal": [corp.addr], "sub.site.example": [sub.addr]}})
        m = d.udp("db.corp.internal", "A")
        assert a_records(m) == ["10.1.0.5"], m.describe()
        m = d.udp("host.sub.site.example", "A")  # delegated below site.example
        assert a_records(m) == ["192.0.2.50"], m.describe()
        assert a_records(d.udp("www.site.example", "A")) == ["192.0.2.1"]
        assert corp.queries() == 1 and sub.queries() == 1, (corp.queries(), sub.queries())


SPECIAL_USE = """$ORIGIN %(zone)s
$TTL 300
@   IN SOA ns.%(zone)s hostmaster.%(zone)s 1 3600 600 86400 30
@   IN NS  ns.%(zone)s
ns  IN A   10.53.0.9
nas IN A   10.1.9.%(host)d
"""


def test_forward_zones_win_over_the_special_use_defaults(env):
    # libunbound answers test., home.arpa. and the other RFC 6761 zones
    # itself (NXDOMAIN); a forward zone the operator lists, at such a zone
    # or below one, goes to its servers instead. One not listed keeps the
    # local answer, never leaving the node.
    zones = {"corp.test.": SPECIAL_USE % {"zone": "corp.test.", "host": 1},
             "home.arpa.": SPECIAL_USE % {"zone": "home.arpa.", "host": 2},
             "invalid.": SPECIAL_USE % {"zone": "invalid.", "host": 3}}
    with authority.Authority({"site.example.": SITE}) as up, \
            authority.Authority(zones) as special:
        d = forwarding(env, up, upstream={"forward_zones": {
            "corp.test": [special.addr], "home.arpa": [special.addr]}})
        assert a_records(d.udp("nas.corp.test", "A")) == ["10.1.9.1"]
        assert a_records(d.udp("nas.home.arpa", "A")) == ["10.1.9.2"]
        m = d.udp("home.arpa", "SOA")
        assert m.rcode_name == "NOERROR" and m.rrs("answer", "SOA")[0]["rdata"]["mname"] == \
            "ns.home.arpa.", m.describe()
        asked = special.queries()
        for name in ("nas.invalid", "nas.other.test", "www.test"):
            m = d.udp(name, "A")
            assert m.rcode_name == "NXDOMAIN", (name, m.describe())
        assert special.queries() == asked and up.queries() == 0, (special.queries(), up.queries())


def test_forwarders_of_one_family_and_of_both(env):
    # libunbound gets outgoing sockets only for the families the forwarders
    # use (src/upstream/context.c): an IPv6-only forwarder must still be
    # reached, and so must each forwarder when the two families are mixed.
    if not harness.have_ipv6_loopback():
        raise harness.Skip("::1 is not configured on lo")
    with authority.Authority({"site.example.": SITE}, address="::1") as up6, \
            authority.Authority({"corp.internal.": CORP}) as corp:
        d = forwarding(env, up6)
        assert a_records(d.udp("www.site.example", "A")) == ["192.0.2.1"]
        d.stop()
        d = forwarding(env, up6, upstream={"forward_zones": {"corp.internal": [corp.addr]}})
        assert a_records(d.udp("db.corp.internal", "A")) == ["10.1.0.5"]
        assert a_records(d.udp("mx1.site.example", "A")) == ["192.0.2.25"]
        assert corp.queries() == 1 and up6.queries() == 2, (corp.queries(), up6.queries())


def test_recursion_from_a_local_root(env):
    with authority.Hierarchy() as h:
        d = env.start(netns=h.netns, upstream={
            "recursive": True, "root_hints": h.hints_path, "timeout": "2s",
            "forward_zones": {"corp.internal": ["10.53.0.6"]}})
        r = d.dig("www.leaf.example", "A")
        assert r.status == "NOERROR" and r.rdatas("A") == ["192.0.2.77"], r.text
        assert h.servers["leaf.example."].queries() > 0
        assert h.servers["."].queries() > 0, "the root was never asked"
        r = d.dig("host.sub.site.example", "A")  # two delegations down
        assert r.rdatas("A") == ["192.0.2.50"], r.text
        r = d.dig("nothere.leaf.example", "A")
        assert r.status == "NXDOMAIN", r.text
        r = d.dig("db.corp.internal", "A")
        assert r.rdatas("A") == ["10.1.0.5"], r.text
        asked = h.servers["leaf.example."].queries()
        r = d.dig("www.leaf.example", "A")
        assert r.rdatas("A") == ["192.0.2.77"], r.text
        assert h.servers["leaf.example."].queries() == asked, "not cached"


test_recursion_from_a_local_root.timeout = 30


def test_dnssec_validation_sets_ad_and_refuses_bogus_data(env):
    signed = authority.sign_secure_zone(env.tmp)
    with authority.Authority({"site.example.": SITE,
                              "secure.example.": signed.path}) as up:
        d = forwarding(env, up, upstream={
            "dnssec": True, "trust_anchor": signed.anchor_file, "timeout": "2s"})
        m = d.udp("good.secure.example", "A", do=True)
        assert m.rcode_name == "NOERROR" and m.ad, m.describe()
        assert a_records(m) == ["192.0.2.10"], m.answer
        assert m.rrs("answer", RRSIG), "DO=1 gets the signatures: %s" % m.answer
        m = d.udp("good.secure.example", "A")  # no EDNS, no AD asked
        assert a_records(m) == ["192.0.2.10"] and not m.ad, m.describe()
        assert not m.rrs("answer", RRSIG), "DO=0 got RRSIGs: %s" % m.answer
        r = d.dig("good.secure.example", "A")  # dig sets AD in its queries
        assert "ad" in r.flags, r.text
        for do in (False, True):
            m = d.udp("bad.secure.example", "A", do=do, edns=do)
            assert m.rcode_name == "SERVFAIL" and not m.answer, m.describe()
        m = d.udp("nothere.secure.example", "A", do=True)
        assert m.rcode_name == "NXDOMAIN" and m.ad, m.describe()
        m = d.udp("www.site.example", "A", do=True)  # no anchor: insecure
        assert a_records(m) == ["192.0.2.1"] and not m.ad, m.describe()


test_dnssec_validation_sets_ad_and_refuses_bogus_data.timeout = 30


def test_unreadable_trust_anchor_stops_start_up(env):
    path = os.path.join(env.tmp, "c.yaml")
    with open(path, "w") as f:
        f.write("listen: {addresses: [127.0.0.1], port: %d}\n"
                "upstream:\n  dnssec: true\n  servers: [127.0.0.1:9]\n"
                "  trust_anchor: /nonexistent/root.key\n" % harness.free_port())
    for args in (["--check-config", path], ["--config", path]):
        r = env.run(args)
        assert r.returncode == 1, r
        assert "upstream.trust_anchor: cannot read /nonexistent/root.key" in r.stderr, r.stderr


def test_resolv_conf_nameservers_are_used_and_unusable_ones_skipped(env):
    # In the Hierarchy's namespace, so localdns can listen on port 53 (what
    # resolv.conf nameservers use) and 10.53.0.4:53 serves site.example.
    with authority.Hierarchy() as h:
        rc = os.path.join(env.tmp, "resolv.conf")
        with open(rc, "w") as f:
            f.write("search example\noptions ndots:5\n"
                    "nameserver 127.0.0.1\n"        # localdns itself: a loop
                    "nameserver 127.0.0.2\n"        # loopback, nobody answers
                    "nameserver not-an-address\n"
                    "nameserver 10.53.0.4\n")
        d = env.start(netns=h.netns, listen={"port": 53},
                      upstream={"servers": [], "resolv_conf": rc})
        r = d.dig("www.site.example", "A")
        assert r.rdatas("A") == ["192.0.2.1"], r.text
        logs = d.stderr()
        for phrase in ("localdns itself (it would loop)\" file=%s nameserver=127.0.0.1" % rc,
                       "does not answer\" file=%s nameserver=127.0.0.2" % rc,
                       "nameserver=not-an-address",
                       "nameserver from resolv.conf\" file=%s nameserver=10.53.0.4" % rc):
            assert phrase in logs, "%r not in: %s" % (phrase, logs)


def test_no_usable_nameserver_means_servfail_not_silence(env):
    rc = os.path.join(env.tmp, "resolv.conf")
    with open(rc, "w") as f:
        f.write("# nothing here\n")
    d = env.start(upstream={"servers": [], "resolv_conf": rc})
    assert "no usable upstream servers" in d.stderr(), d.stderr()
    m = d.udp("www.site.example", "A", timeout=3)
    assert m.rcode_name == "SERVFAIL", m.describe()
    assert "cluster.local" in d.udp("db.prod.svc.cluster.local", "A").answer[0]["name"]
