"""The upstream fixtures themselves (authority.py, zones/), checked with dig,
not localdns: the answers each zone gives, the query counter, and restart on
the same port. When these fail, the upstream tests' failures mean nothing.
(The signed zone and the Hierarchy are exercised through localdns in
test_upstream.py.)"""

import authority

# Checks test tooling; starts no localdns (run.py --daemon-tests-only skips it).
NO_DAEMON = True

EX = authority.zone_path("site.example.")


def test_authority_answers(env):
    with authority.Authority({"site.example.": EX}) as up:
        r = up.dig("www.site.example", "A")
        assert "aa" in r.flags and r.rdatas("A") == ["192.0.2.1"], r.text
        assert r.answer[0]["ttl"] == 300, r.text
        assert up.dig("www.site.example", "AAAA").rdatas("AAAA") == \
            ["2001:db8::1"]
        r = up.dig("c1.site.example", "A")
        assert [(x["name"], x["type"]) for x in r.answer] == [
            ("c1.site.example.", "CNAME"), ("c2.site.example.", "CNAME"),
            ("c3.site.example.", "CNAME"), ("www.site.example.", "A")], r.text
        assert r.answer[0]["ttl"] == 120, r.text
        r = up.dig("mail.site.example", "MX")
        assert r.rdatas("MX") == ["10 mx1.site.example."], r.text
        assert "192.0.2.25" in r.rdatas("A", "additional"), r.text
        assert len(up.dig("txt.site.example", "TXT").rdatas("TXT")) == 3
        r = up.dig("big.site.example", "TXT", "+ignore", "+bufsize=1232")
        assert "tc" in r.flags, r.text
        r = up.dig("big.site.example", "TXT", "+tcp")
        assert len(r.rdatas("TXT")) == 40 and "MSG SIZE  rcvd: 2598" in \
            r.text, r.text
        for name, ttl in (("short", 5), ("long", 604800)):
            r = up.dig(name + ".site.example", "A")
            assert r.answer[0]["ttl"] == ttl, r.text
        r = up.dig("nothere.site.example", "A")
        assert r.status == "NXDOMAIN", r.text
        soa = r.rrs("authority", "SOA")
        assert soa and soa[0]["ttl"] == 30, r.text     # SOA minimum 30
        r = up.dig("noaaaa.site.example", "AAAA")
        assert r.status == "NOERROR" and not r.answer and \
            r.rrs("authority", "SOA"), r.text
        r = up.dig("host.sub.site.example", "A")
        assert r.status == "NOERROR" and "aa" not in r.flags and \
            not r.answer, r.text
        assert r.rdatas("NS", "authority") == ["ns.sub.site.example."], r.text
        assert r.rdatas("A", "additional") == ["10.53.0.5"], r.text
    sub = authority.zone_path("sub.site.example.")
    corp = authority.zone_path("corp.internal.")
    with authority.Authority({"sub.site.example.": sub,
                              "corp.internal.": corp}) as up:
        assert up.dig("host.sub.site.example", "A").rdatas("A") == \
            ["192.0.2.50"]
        assert up.dig("db.corp.internal", "A").rdatas("A") == ["10.1.0.5"]
        assert up.dig("www.site.example", "A").status == "REFUSED"


def test_authority_counts_queries_and_restarts(env):
    with authority.Authority({"site.example.": EX}) as up:
        assert up.queries() == 0, "readiness probes counted"
        for _ in range(5):
            up.dig("www.site.example", "A")
        assert up.queries() == 5, up.queries()
        up.dig("big.site.example", "TXT", "+tcp")
        assert up.queries() == 6, "TCP query not counted: %d" % up.queries()
        port = up.port
        up.restart()
        assert up.port == port and up.queries() == 0
        assert up.dig("www.site.example", "A").rdatas("A") == ["192.0.2.1"]
        assert up.queries() == 1
        up.stop()
        assert up.dig("www.site.example", "A", timeout=1).status is None
