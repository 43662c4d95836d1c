"""Answers from local data: the cluster domain (authoritative, NXDOMAIN /
NODATA with the SOA, empty non-terminals, apex SOA/NS, CNAME chains, case),
static names outside it, SRV with additional data, PTR, minimal ANY."""

import harness

# Light: a small share of a CPU (they mostly wait on the daemon), so they may
# run beside a test that runs alone (run.py -j).
QUIET = True

DB = "db.prod.svc.cluster.local."


def names(rrs):
    return [r["name"].lower() for r in rrs]


def expect(m, rcode="NOERROR", aa=True):
    assert m.qr, "QR not set: " + m.describe()
    assert m.rcode_name == rcode, "rcode %s, want %s (%s)" % (
        m.rcode_name, rcode, m.describe())
    if aa is not None:
        assert m.aa == aa, "AA=%s, want %s (%s)" % (m.aa, aa, m.describe())
    assert not m.tc, "TC set: " + m.describe()


def check_soa_authority(m):
    soa = m.rrs("authority", "SOA")
    assert len(soa) == 1, "want one SOA in authority, got %s" % m.authority
    r = soa[0]
    assert r["name"].lower() == "cluster.local.", "SOA owner %s" % r["name"]
    assert r["rdata"]["mname"].lower() == "ns.dns.cluster.local.", r["rdata"]
    assert r["rdata"]["rname"].lower() == "hostmaster.cluster.local.", r["rdata"]


def test_a_record(env):
    m = env.server.udp(DB, "A")
    expect(m)
    assert [r["rdata"] for r in m.rrs("answer", "A")] == ["10.0.0.5"], m.answer
    assert len(m.answer) == 1, m.answer
    assert m.answer[0]["ttl"] == 5, "TTL %d, want cluster.ttl 5" % m.answer[0]["ttl"]
    assert m.answer[0]["class"] == 1


def test_aaaa_record(env):
    m = env.server.udp(DB, "AAAA")
    expect(m)
    assert [r["rdata"] for r in m.answer] == ["fd00::5"], m.answer


def test_record_ttl(env):
    m = env.server.udp("web.prod.svc.cluster.local", "A")
    expect(m)
    assert m.answer[0]["ttl"] == 30, "TTL %d, want 30" % m.answer[0]["ttl"]


def test_dig_a_record(env):
    r = env.server.dig("db.prod.svc.cluster.local", "A")
    assert r.status == "NOERROR", r.text
    assert "aa" in r.flags and "qr" in r.flags, r.flags
    assert r.rdatas("A") == ["10.0.0.5"], r.text
    assert r.answer[0]["ttl"] == 5, r.text


def test_kdig_aaaa_record(env):
    r = env.server.kdig("db.prod.svc.cluster.local", "AAAA")
    assert r.status == "NOERROR", r.text
    assert "aa" in r.flags, r.text
    assert r.rdatas("AAAA") == ["fd00::5"], r.text


def test_id_and_rd_echoed(env):
    import dnsmsg
    for flags, want_rd in ((dnsmsg.F_RD, True), (0, False)):
        pkt = dnsmsg.build_query(DB, "A", qid=0x1234, flags=flags)
        m = dnsmsg.parse(env.server.udp_raw(pkt))
        assert m.id == 0x1234, "id %#x" % m.id
        assert m.rd == want_rd, "RD not copied (%s)" % m.describe()
        assert m.opcode == 0


def test_cd_copied(env):
    import dnsmsg
    pkt = dnsmsg.build_query(DB, "A", flags=dnsmsg.F_RD | dnsmsg.F_CD)
    m = dnsmsg.parse(env.server.udp_raw(pkt))
    assert m.cd, "CD not copied: " + m.describe()


def test_static_file_record(env):
    m = env.server.udp("fromfile.prod.svc.cluster.local", "A")
    expect(m)
    assert [r["rdata"] for r in m.answer] == ["10.0.0.9"], m.answer


def test_nxdomain_with_soa(env):
    m = env.server.udp("nothere.prod.svc.cluster.local", "A")
    expect(m, "NXDOMAIN")
    assert m.answer == [], m.answer
    check_soa_authority(m)


def test_dig_nxdomain(env):
    r = env.server.dig("nothere.prod.svc.cluster.local", "A")
    assert r.status == "NXDOMAIN", r.text
    assert "aa" in r.flags, r.flags
    soa = r.rrs("authority", "SOA")
    assert soa and soa[0]["name"] == "cluster.local.", r.text
    assert soa[0]["rdata"].startswith("ns.dns.cluster.local. "
                                      "hostmaster.cluster.local."), r.text


def test_nodata_with_soa(env):
    m = env.server.udp("web.prod.svc.cluster.local", "AAAA")
    expect(m, "NOERROR")
    assert m.answer == [], m.answer
    check_soa_authority(m)
    m = env.server.udp(DB, "TXT")
    expect(m, "NOERROR")
    assert m.answer == [], m.answer
    check_soa_authority(m)


def test_empty_non_terminal_is_nodata(env):
    for name in ("svc.cluster.local", "prod.svc.cluster.local",
                 "_tcp.db.prod.svc.cluster.local"):
        m = env.server.udp(name, "A")
        expect(m, "NOERROR")
        assert m.answer == [], "%s: %s" % (name, m.answer)
        check_soa_authority(m)


def test_search_path_miss_answered_locally(env):
    # ndots:5 expansion of a cluster name: answered NXDOMAIN here.
    m = env.server.udp("db.prod.svc.cluster.local.prod.svc.cluster.local", "A")
    expect(m, "NXDOMAIN")
    check_soa_authority(m)
    m = env.server.udp("www.example.com.default.svc.cluster.local", "AAAA")
    expect(m, "NXDOMAIN")


def test_apex_soa_and_ns(env):
    m = env.server.udp("cluster.local", "SOA")
    expect(m)
    soa = m.rrs("answer", "SOA")
    assert len(soa) == 1 and len(m.answer) == 1, m.answer
    assert soa[0]["rdata"]["mname"].lower() == "ns.dns.cluster.local."
    assert soa[0]["rdata"]["rname"].lower() == "hostmaster.cluster.local."
    m = env.server.udp("cluster.local", "NS")
    expect(m)
    ns = m.rrs("answer", "NS")
    assert len(ns) >= 1 and len(ns) == len(m.answer), m.answer
    assert all(r["name"].lower() == "cluster.local." for r in ns)


def test_apex_nodata(env):
    m = env.server.udp("cluster.local", "A")
    expect(m)
    assert m.answer == []
    check_soa_authority(m)


def test_cname_followed(env):
    m = env.server.udp("alias.prod.svc.cluster.local", "A")
    expect(m)
    types = [r["type"] for r in m.answer]
    assert types == [5, 1], "answer types %s, want CNAME then A" % types
    assert m.answer[0]["rdata"].lower() == DB
    assert m.answer[1]["name"].lower() == DB
    assert m.answer[1]["rdata"] == "10.0.0.5"


def test_cname_chain_followed(env):
    m = env.server.udp("alias2.prod.svc.cluster.local", "AAAA")
    expect(m)
    got = [(r["name"].lower(), r["type"]) for r in m.answer]
    want = [("alias2.prod.svc.cluster.local.", 5),
            ("alias.prod.svc.cluster.local.", 5), (DB, 28)]
    assert got == want, "answer %s, want %s" % (got, want)
    assert m.answer[2]["rdata"] == "fd00::5"


def test_cname_query_type(env):
    m = env.server.udp("alias.prod.svc.cluster.local", "CNAME")
    expect(m)
    assert len(m.answer) == 1 and m.answer[0]["type"] == 5, m.answer


def test_cname_leaving_local_data(env):
    # The chain ends at the CNAME whose target is not local.
    m = env.server.udp("ext.prod.svc.cluster.local", "A")
    assert m.rcode_name == "NOERROR", m.describe()
    assert len(m.answer) == 1 and m.answer[0]["type"] == 5, m.answer
    assert m.answer[0]["rdata"].lower() == "www.example.com."


def test_case_insensitive_and_echoed(env):
    qname = "DB.Prod.SVC.cluster.local."
    m = env.server.udp(qname, "A")
    expect(m)
    assert m.question[0][0] == qname, "question echoed as %r, want %r" % (
        m.question[0][0], qname)
    assert [r["rdata"] for r in m.answer] == ["10.0.0.5"]
    assert m.answer[0]["name"].lower() == qname.lower()
    m = env.server.udp("NOTHERE.PROD.svc.cluster.local", "A")
    assert m.question[0][0] == "NOTHERE.PROD.svc.cluster.local."
    expect(m, "NXDOMAIN")


def test_static_outside_domain(env):
    m = env.server.udp("host.corp.internal", "A")
    expect(m)
    assert [r["rdata"] for r in m.answer] == ["192.0.2.10"], m.answer
    assert m.answer[0]["ttl"] == 60
    m = env.server.udp("host.corp.internal", "AAAA")
    expect(m, "NOERROR")
    assert m.answer == [], m.answer


def test_static_cname_outside_domain(env):
    m = env.server.udp("legacy.corp.internal", "A")
    expect(m)
    got = [(r["name"].lower(), r["type"], r["rdata"]) for r in m.answer]
    assert got == [("legacy.corp.internal.", 5, DB), (DB, 1, "10.0.0.5")], got


def test_non_local_names_go_upstream(env):
    # The shared daemon's upstream is a loopback port nobody answers on, so
    # names outside local data come back SERVFAIL (not REFUSED, not AA).
    for name in ("www.example.com", "cluster.local.example.com", "local"):
        m = env.server.udp(name, "A", timeout=3)
        assert m.rcode_name == "SERVFAIL", "%s: %s" % (name, m.describe())
        assert m.answer == [], m.answer
        assert not m.aa, "%s: AA on an upstream failure" % name
        assert m.ra, "%s: RA not set" % name


def test_srv_with_additional(env):
    m = env.server.udp("_mysql._tcp.db.prod.svc.cluster.local", "SRV")
    expect(m)
    assert len(m.answer) == 1, m.answer
    srv = m.answer[0]["rdata"]
    assert (srv["priority"], srv["weight"], srv["port"],
            srv["target"].lower()) == (0, 100, 3306, DB), srv
    add = sorted((r["name"].lower(), r["type"], r["rdata"])
                 for r in m.additional)
    assert (DB, 1, "10.0.0.5") in add, "no A for the target in additional: %s" % add
    assert (DB, 28, "fd00::5") in add, "no AAAA for target in additional: %s" % add


def test_srv_two_targets(env):
    m = env.server.udp("_http._tcp.web.prod.svc.cluster.local", "SRV")
    expect(m)
    got = sorted((r["rdata"]["priority"], r["rdata"]["weight"],
                  r["rdata"]["port"], r["rdata"]["target"].lower())
                 for r in m.answer)
    assert got == [(10, 60, 8080, "web.prod.svc.cluster.local."),
                   (20, 40, 8081, DB)], got
    add = {(r["name"].lower(), r["rdata"]) for r in m.additional}
    assert ("web.prod.svc.cluster.local.", "10.0.0.6") in add, add
    assert (DB, "10.0.0.5") in add, add


def test_dig_srv(env):
    r = env.server.dig("_mysql._tcp.db.prod.svc.cluster.local", "SRV")
    assert r.status == "NOERROR", r.text
    assert r.rdatas("SRV") == ["0 100 3306 db.prod.svc.cluster.local."], r.text


def test_txt(env):
    m = env.server.udp("txt.prod.svc.cluster.local", "TXT")
    expect(m)
    got = sorted(tuple(r["rdata"]) for r in m.answer)
    assert got == [("hello world",), ("v=spf1 -all",)], got


def test_ptr(env):
    m = env.server.udp("5.0.0.10.in-addr.arpa", "PTR")
    expect(m)
    assert [r["rdata"].lower() for r in m.answer] == [DB], m.answer


def test_dig_reverse(env):
    r = harness.dig(env.server.host, env.server.port, "5.0.0.10.in-addr.arpa",
                    "PTR")
    assert r.rdatas("PTR") == ["db.prod.svc.cluster.local."], r.text


def test_any_minimal(env):
    m = env.server.udp(DB, "ANY")
    expect(m, "NOERROR", aa=None)
    assert m.answer, "empty ANY answer"
    types = {r["type"] for r in m.answer}
    assert len(types) == 1, "ANY returned %d RRsets, want 1 (RFC 8482): %s" % (
        len(types), m.answer)
    t = types.pop()
    assert t in (1, 28, 13), "ANY returned type %d" % t
    assert all(r["name"].lower() == DB for r in m.answer)


def test_any_over_tcp(env):
    m = env.server.tcp("big.prod.svc.cluster.local", "ANY")
    assert m.rcode_name == "NOERROR", m.describe()
    assert {r["type"] for r in m.answer} in ({1}, {13}), m.answer
