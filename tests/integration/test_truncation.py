"""Truncation: UDP answers over the client's limit (512 without EDNS, the
EDNS size capped by listen.udp_max_payload) come back TC=1 with an empty
answer; the same query over TCP returns everything."""

import harness
from dnsmsg import build_query, parse

BIG = "big.prod.svc.cluster.local"        # 40 A records (~700 bytes)
BIGTXT = "bigtxt.prod.svc.cluster.local"  # 30 TXT of 200 bytes (~6.5 KB)


def udp(env, name, qt, **kw):
    s = env.server
    data = s.udp_raw(build_query(name, qt, **kw), timeout=2)
    assert data is not None, "no reply"
    return data, parse(data)


def assert_truncated(data, m, limit):
    assert m.tc, "TC not set (%s)" % m.describe()
    assert m.rcode_name == "NOERROR", m.describe()
    assert m.answer == [] and m.counts[1] == 0, "truncated reply carries %d answers" % m.counts[1]
    assert len(data) <= limit, "reply of %d bytes over the %d limit" % (len(data), limit)
    assert len(m.question) == 1, "question not echoed in the TC reply"


def test_no_edns_over_512_truncated(env):
    data, m = udp(env, BIG, "A", edns=False)
    assert_truncated(data, m, 512)
    assert m.opt is None


def test_edns_fits_not_truncated(env):
    data, m = udp(env, BIG, "A", edns=True, udp_size=1232)
    assert not m.tc, m.describe()
    got = sorted(r["rdata"] for r in m.answer)
    assert got == sorted(harness.BIG_A), "%d of 40 A records" % len(got)
    assert len(data) <= 1232


def test_edns_small_buffer_truncated(env):
    data, m = udp(env, BIG, "A", edns=True, udp_size=512)
    assert_truncated(data, m, 512)
    assert m.opt is not None, "OPT missing from the TC reply"


def test_edns_below_512_means_512(env):
    # RFC 6891: sizes under 512 are treated as 512.
    data, m = udp(env, "db.prod.svc.cluster.local", "A", edns=True, udp_size=100)
    assert not m.tc and m.answer, m.describe()
    data, m = udp(env, BIG, "A", edns=True, udp_size=100)
    assert_truncated(data, m, 512)


def test_udp_max_payload_caps_edns(env):
    # The client offers 4096; the server must not send more than 1232.
    data, m = udp(env, BIGTXT, "TXT", edns=True, udp_size=4096)
    assert_truncated(data, m, 1232)


def test_udp_max_payload_configured(env):
    # With udp_max_payload 600 a 40-A answer (~700 bytes) no longer fits
    # even though the client offers 1232.
    d = env.start(listen={"udp_max_payload": 600})
    data = d.udp_raw(build_query(BIG, "A", edns=True, udp_size=1232), timeout=2)
    m = parse(data)
    assert_truncated(data, m, 600)
    data = d.udp_raw(build_query("db.prod.svc.cluster.local", "A", edns=True,
                                 udp_size=1232), timeout=2)
    m = parse(data)
    assert not m.tc and m.answer


def test_tcp_returns_all_a(env):
    m = env.server.tcp(BIG, "A", edns=False)
    assert not m.tc, m.describe()
    assert sorted(r["rdata"] for r in m.answer) == sorted(harness.BIG_A)


def test_tcp_returns_all_txt(env):
    m = env.server.tcp(BIGTXT, "TXT", edns=True)
    assert not m.tc, m.describe()
    got = sorted(r["rdata"][0] for r in m.answer)
    assert got == sorted(harness.BIG_TXT), "%d of 30 TXT records" % len(got)
    assert m.size > 6000


def test_dig_ignore_shows_tc(env):
    r = env.server.dig(BIG, "A", "+noedns", "+ignore")
    assert "tc" in r.flags, "no tc flag:\n" + r.text
    assert r.answer == []
    r = env.server.dig(BIGTXT, "TXT", "+ignore")
    assert "tc" in r.flags, "no tc flag:\n" + r.text


def test_dig_retries_over_tcp(env):
    r = env.server.dig(BIGTXT, "TXT")
    assert r.truncated_retry, "dig did not see a truncated UDP reply:\n" + r.text[:500]
    assert r.status == "NOERROR" and "tc" not in r.flags, r.text[:500]
    got = sorted(harness.txt_strings(x)[0] for x in r.rdatas("TXT"))
    assert got == sorted(harness.BIG_TXT), "%d of 30 TXT records" % len(got)
    r = env.server.dig(BIG, "A", "+noedns")
    assert len(r.rdatas("A")) == 40, r.text[:500]


def test_kdig_tcp_full(env):
    r = env.server.kdig(BIGTXT, "TXT", "+tcp")
    assert r.status == "NOERROR", r.text[:500]
    assert len(r.rdatas("TXT")) == 30, r.text[:500]
