"""DNS64 (dns64.prefix, RFC 6147) on local data, checked with dig over ::1:
AAAA made from A records under the prefix (static names, behind a CNAME,
cluster names from the fake API), the TTL rule, own AAAA kept, NXDOMAIN
kept, no synthesis for IPv4 clients or validating ones (DO+CD), PTR for an
address under the prefix (a CNAME to in-addr.arpa, answered locally or by
the upstream), the prefix changed by a reload, the counter.
"""
import os
import sys
import time

import authority
import harness

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

PREFIX = "64:ff9b::/96"


def start(env, prefix=PREFIX, **over):
    if not harness.have_ipv6_loopback():
        raise harness.Skip("no ::1 on this machine")
    cfg = env.config(addresses=("::1", "127.0.0.1"), dns64={"prefix": prefix}, **over)
    return env.start(config=cfg)


def aaaa(d, name, *opts, host=None):
    r = harness.dig(host or d.host, d.port, name, "AAAA", *opts)
    assert r.rc == 0, r.text
    return r


def test_dns64_synthesizes_aaaa_from_local_a_records(env):
    d = start(env)
    # static, under the cluster domain: the NODATA's SOA TTL (cluster.ttl 5s) caps the A TTL (30s)
    r = aaaa(d, "web.prod.svc.cluster.local")
    assert r.status == "NOERROR" and "aa" in r.flags and "ad" not in r.flags, r.text
    assert [(x["rdata"], x["ttl"]) for x in r.rrs("answer", "AAAA")] == [
        ("64:ff9b::a00:6", 5)], r.text
    # outside it: NODATA without an SOA, so the A TTL (60s) under 600
    r = aaaa(d, "host.corp.internal")
    assert [(x["rdata"], x["ttl"]) for x in r.rrs("answer", "AAAA")] == [
        ("64:ff9b::c000:20a", 60)], r.text
    # a name with AAAA of its own keeps it (5.1.1), also behind CNAMEs
    r = aaaa(d, "db.prod.svc.cluster.local")
    assert r.rdatas("AAAA") == ["fd00::5"], r.text
    r = aaaa(d, "alias2.prod.svc.cluster.local")
    assert r.rdatas("CNAME") == ["alias.prod.svc.cluster.local.",
                                 "db.prod.svc.cluster.local."] and \
        r.rdatas("AAAA") == ["fd00::5"], r.text
    # NXDOMAIN stays NXDOMAIN (5.1.2), with its SOA
    r = aaaa(d, "nope.prod.svc.cluster.local")
    assert r.status == "NXDOMAIN" and not r.answer and r.rrs("authority", "SOA"), r.text
    # a name with neither stays NODATA
    r = aaaa(d, "txt.prod.svc.cluster.local")
    assert r.status == "NOERROR" and not r.answer, r.text
    # A questions are untouched
    assert harness.dig(d.host, d.port, "web.prod.svc.cluster.local", "A").rdatas("A") == [
        "10.0.0.6"]


def test_dns64_behind_a_cname(env):
    d = start(env, static={"records": [
        {"name": "v4only.corp.internal", "ttl": "3000s", "a": ["192.0.2.7", "192.0.2.8"]},
        {"name": "www.corp.internal", "ttl": "120s", "cname": "v4only.corp.internal"}]})
    r = aaaa(d, "www.corp.internal")
    assert r.status == "NOERROR", r.text
    assert [(x["name"], x["type"], x["ttl"]) for x in r.answer] == [
        ("www.corp.internal.", "CNAME", 120),
        ("v4only.corp.internal.", "AAAA", 600),
        ("v4only.corp.internal.", "AAAA", 600)], r.text
    assert sorted(r.rdatas("AAAA")) == ["64:ff9b::c000:207", "64:ff9b::c000:208"], r.text
    # and over TCP
    r = aaaa(d, "www.corp.internal", "+tcp")
    assert sorted(r.rdatas("AAAA")) == ["64:ff9b::c000:207", "64:ff9b::c000:208"], r.text


def test_dns64_not_for_ipv4_clients_nor_validating_ones(env):
    d = start(env)
    r = aaaa(d, "web.prod.svc.cluster.local", host="127.0.0.1")
    assert r.status == "NOERROR" and not r.answer, r.text          # CoreDNS: IPv6 only
    r = aaaa(d, "web.prod.svc.cluster.local", "+dnssec", "+cdflag")
    assert r.status == "NOERROR" and not r.answer, r.text          # RFC 6147 5.5
    r = aaaa(d, "web.prod.svc.cluster.local", "+dnssec")
    assert r.rdatas("AAAA") == ["64:ff9b::a00:6"] and "ad" not in r.flags, r.text


def test_dns64_other_prefix_lengths_and_a_reload(env):
    d = start(env, prefix="2001:db8:122:344::/64")
    r = aaaa(d, "web.prod.svc.cluster.local")
    assert r.rdatas("AAAA") == ["2001:db8:122:344:a:0:600:0"], r.text  # RFC 6052, /64
    cfg = harness.deep_merge(d.config, {"dns64": {"prefix": ""}})
    d.reload(cfg)
    deadline = time.monotonic() + 5
    while "reloaded" not in d.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "dns64.prefix" in d.stderr(), d.tail()
    r = aaaa(d, "web.prod.svc.cluster.local")
    assert r.status == "NOERROR" and not r.answer, r.text          # off again


def test_dns64_ptr_of_a_synthesized_address(env):
    zone = ("$ORIGIN 2.0.192.in-addr.arpa.\n$TTL 300\n"
            "@ 60 IN SOA ns.site.example. hostmaster.site.example. 1 3600 600 86400 30\n"
            "@ IN NS ns.site.example.\n33 IN PTR printer.site.example.\n")
    with authority.Authority({"2.0.192.in-addr.arpa.": zone}) as up:
        d = start(env, upstream={"servers": [up.addr], "timeout": "2s"})
        # local: the static PTR of 10.0.0.5
        r = harness.dig(d.host, d.port, "5.0.0.0.0.0.a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0."
                        "b.9.f.f.4.6.0.0.ip6.arpa", "PTR")
        assert [(x["type"], x["rdata"]) for x in r.answer] == [
            ("CNAME", "5.0.0.10.in-addr.arpa."), ("PTR", "db.prod.svc.cluster.local.")], r.text
        # upstream: the CNAME, then NSD's PTR, in one reply
        r = harness.dig(d.host, d.port, "1.2.2.0.0.0.0.c.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0."
                        "b.9.f.f.4.6.0.0.ip6.arpa", "PTR")
        assert r.status == "NOERROR", r.text
        assert [(x["type"], x["rdata"]) for x in r.answer] == [
            ("CNAME", "33.2.0.192.in-addr.arpa."), ("PTR", "printer.site.example.")], r.text
        # an address outside the prefix is a plain reverse name (not ours: upstream)
        r = harness.dig(d.host, d.port, "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0."
                        "8.b.d.0.1.0.0.2.ip6.arpa", "PTR")
        assert not r.rrs("answer", "CNAME"), r.text


def test_dns64_cluster_names_and_the_counter(env):
    mport = harness.free_port()
    with F.FakeAPI() as api:
        api.apply(F.namespace("shop"),
                  F.service("shop", "v4", cluster_ips=["10.96.0.7"],
                            ports=[F.service_port(80, name="http")]),
                  F.service("shop", "dual", cluster_ips=["10.96.0.8", "fd00::8"],
                            ports=[F.service_port(80, name="http")]))
        kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))
        d = start(env, kubernetes={"enabled": True, "kubeconfig": kc, "node_name": "node-a"},
                  metrics={"listen": "127.0.0.1:%d" % mport})
        deadline = time.monotonic() + 5
        while harness.dig(d.host, d.port, "v4.shop.svc.cluster.local", "A").status != "NOERROR":
            assert time.monotonic() < deadline, "no sync"
            time.sleep(0.05)
        r = aaaa(d, "v4.shop.svc.cluster.local")
        assert r.rdatas("AAAA") == ["64:ff9b::a60:7"] and "aa" in r.flags, r.text
        r = aaaa(d, "dual.shop.svc.cluster.local")
        assert r.rdatas("AAAA") == ["fd00::8"], r.text
        import urllib.request
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport).read().decode()
        assert "localdns_dns64_synthesized_total 1\n" in body, [
            x for x in body.splitlines() if "dns64" in x]


EXT_ZONE = """$ORIGIN ext.example.
$TTL 300
@ 300 IN SOA ns.ext.example. hostmaster.ext.example. 1 3600 600 86400 45
@ IN NS ns
ns IN A 127.0.0.1
v4only 3000 IN A 192.0.2.7
v4only 3000 IN A 192.0.2.8
dual IN A 192.0.2.9
dual IN AAAA 2001:db8::9
www 120 IN CNAME v4only
chain 200 IN CNAME www
late 3000 IN A 192.0.2.11
empty IN TXT "neither A nor AAAA"
"""


def synthesized(r):
    return sorted((x["name"], x["rdata"]) for x in r.rrs("answer", "AAAA"))


def test_dns64_external_names_through_the_resolver_and_the_cache(env):
    """External names (NSD behind the resolver): the AAAA answer without
    AAAA makes the resolver ask A for its chain's end; the cache keeps each
    answer under its own question, so what an IPv6 client gets never
    reaches an IPv4 or a validating client, and a hit is synthesized again
    from the two cached answers without asking NSD."""
    mport = harness.free_port()
    with authority.Authority({"ext.example.": EXT_ZONE}) as up:
        d = start(env, upstream={"servers": [up.addr], "timeout": "2s"},
                  metrics={"listen": "127.0.0.1:%d" % mport})
        # a miss: AAAA (NODATA), then A, both asked upstream; the TTL is the
        # NODATA's SOA TTL (45, RFC 2308's min(TTL, MINIMUM)) under the A's 3000 (5.1.7)
        r = aaaa(d, "v4only.ext.example")
        assert r.status == "NOERROR" and "ad" not in r.flags, r.text
        assert synthesized(r) == [("v4only.ext.example.", "64:ff9b::c000:207"),
                                  ("v4only.ext.example.", "64:ff9b::c000:208")], r.text
        assert all(40 <= x["ttl"] <= 45 for x in r.rrs("answer", "AAAA")), r.text
        asked = up.queries()
        assert asked == 2, asked
        # an IPv4 client and a validating one get the AAAA answer as NSD gave it (from the
        # cache: nothing new asked), and the IPv6 client's next hit is synthesized again
        r = aaaa(d, "v4only.ext.example", host="127.0.0.1")
        assert r.status == "NOERROR" and not r.answer and r.rrs("authority", "SOA"), r.text
        r = aaaa(d, "v4only.ext.example", "+dnssec", "+cdflag")
        assert r.status == "NOERROR" and not r.answer, r.text
        r = aaaa(d, "v4only.ext.example")
        assert len(synthesized(r)) == 2, r.text
        r = aaaa(d, "v4only.ext.example", "+tcp")
        assert len(synthesized(r)) == 2, r.text
        assert up.queries() == asked + 1, up.queries()  # only the +dnssec+cd question (DO, CD)
        # behind CNAMEs: the chain as NSD gave it, then AAAA made from the A of its end
        r = aaaa(d, "chain.ext.example")
        assert [(x["name"], x["type"]) for x in r.answer] == [
            ("chain.ext.example.", "CNAME"), ("www.ext.example.", "CNAME"),
            ("v4only.ext.example.", "AAAA"), ("v4only.ext.example.", "AAAA")], r.text
        # the CNAMEs as an IPv4 client gets them (the cache ages the whole NODATA entry
        # by its SOA's 45 s)
        r4 = aaaa(d, "chain.ext.example", host="127.0.0.1")
        chain6, chain4 = r.rrs("answer", "CNAME"), r4.rrs("answer", "CNAME")
        assert [x["rdata"] for x in chain6] == [x["rdata"] for x in chain4] == [
            "www.ext.example.", "v4only.ext.example."] and not r4.rrs("answer", "AAAA"), (
            r.text, r4.text)
        assert all(abs(a["ttl"] - b["ttl"]) <= 1 for a, b in zip(chain6, chain4)), (r.text,
                                                                                    r4.text)
        # own AAAA kept, NXDOMAIN kept, neither A nor AAAA: NODATA
        assert aaaa(d, "dual.ext.example").rdatas("AAAA") == ["2001:db8::9"]
        r = aaaa(d, "nope.ext.example")
        assert r.status == "NXDOMAIN" and not r.answer, r.text
        r = aaaa(d, "empty.ext.example")
        assert r.status == "NOERROR" and not r.answer and r.rrs("authority", "SOA"), r.text
        # an AAAA answer cached by an IPv4 client, the A not yet: the IPv6 client's hit
        # goes to the resolver, which asks only the A
        r = aaaa(d, "late.ext.example", host="127.0.0.1")
        assert not r.answer, r.text
        before = up.queries()
        r = aaaa(d, "late.ext.example")
        assert synthesized(r) == [("late.ext.example.", "64:ff9b::c000:20b")], r.text
        assert up.queries() == before + 1, (before, up.queries())
        import urllib.request
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport).read().decode()
        # misses by the resolver (v4only, chain, late), hits by the workers (v4only twice)
        assert "localdns_dns64_synthesized_total 5\n" in body, [
            x for x in body.splitlines() if "dns64" in x]
