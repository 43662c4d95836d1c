"""`localdns ctl` and the control socket: stats after known queries, lookup
from every source (static, cluster, cache, upstream, stale), flush one name
and all, dump-cache (streamed, with and without records), reload good and
bad, the socket file's life (parents, mode, a stale file replaced, a live
one taken over, removed at exit), a client that stalls, the client's
errors and exit codes without a daemon, and --json (parsed with the json
module and checked against the text output)."""

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time

import authority
import dnsmsg
import harness

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

SITE = authority.zone_path("site.example.")

# Every name `ctl stats` prints, in order (docs/ctl.md): a contract.
STAT_NAMES = [
    "queries", "queries_dropped", "queries_truncated",
    "rcode_noerror", "rcode_formerr", "rcode_servfail", "rcode_nxdomain",
    "rcode_notimp", "rcode_refused", "rcode_other",
    "answers_none", "answers_static", "answers_cluster", "answers_cache",
    "answers_stale", "answers_upstream", "answers_mesh", "control_lookups",
    "queries_not_allowed", "queries_rrl_slipped", "queries_rrl_dropped",
    "udp_busy_wakeups",
    "cache_entries", "cache_bytes", "cache_max_bytes", "cache_slab_bytes", "cache_slab_overflows",
    "cache_hits",
    "cache_misses", "cache_stale_hits", "cache_prefetches", "cache_inserts",
    "cache_rejected", "cache_evictions",
    "upstream_queries", "upstream_coalesced", "upstream_answers",
    "upstream_failures", "upstream_timeouts", "upstream_stale",
    "upstream_servfail", "upstream_dropped", "upstream_bogus", "upstream_resolving",
    "upstream_context_renewals", "upstream_shed", "upstream_failing",
    "upstream_queued", "upstream_flights", "upstream_paced", "upstream_retries",
    "upstream_client_limited", "upstream_evicted", "upstream_shed_queue_full",
    "upstream_shed_table_full", "upstream_shed_refresh_limit",
    "upstream_results_NOERROR", "upstream_results_NXDOMAIN", "upstream_results_SERVFAIL",
    "upstream_results_other", "upstream_results_error", "upstream_results_bogus",
    "kube_enabled", "kube_synced", "kube_objects_services",
    "kube_objects_endpointslices", "kube_objects_namespaces", "kube_objects_pods",
    "kube_objects_serviceentries", "kube_objects_workloadentries", "kube_objects_serviceimports",
    "kube_objects_selectedpods",
    "kube_events", "kube_relists", "kube_errors", "kube_last_contact_time",
    "node_link_repairs", "node_table_repairs",
    "reloads_ok", "reloads_failed", "reload_last_success_time",
    "dnstap_sent", "dnstap_dropped", "dnstap_connections", "dnstap_connected",
    "keeper_enabled", "keeper_connected", "keeper_rescues_death", "keeper_rescues_hang",
    "keeper_relayed_death", "keeper_relayed_hang", "keeper_failed_not_sent",
    "keeper_failed_no_answer",
]

EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


def sock_path(env, name="control.sock"):
    return os.path.join(env.tmp, "run", name)


def start(env, path=None, **over):
    """A daemon of this test's own with its control socket at path."""
    path = path or sock_path(env)
    d = env.start(control={"socket": path}, **over)
    d.ctl_path = path
    return d


def ctl(env, d, *args, timeout=15):
    return env.run(["ctl", "--socket", d.ctl_path] + list(args), timeout=timeout)


def ok(env, d, *args):
    p = ctl(env, d, *args)
    assert p.returncode == 0, "ctl %s: exit %d\n%s%s" % (
        " ".join(args), p.returncode, p.stdout, p.stderr)
    return p.stdout


def stats(env, d):
    out = ok(env, d, "stats")
    pairs = [line.split(" ") for line in out.strip().split("\n")]
    assert all(len(p) == 2 and p[1].isdigit() for p in pairs), out
    assert [p[0] for p in pairs] == STAT_NAMES, out
    return {k: int(v) for k, v in pairs}


def lookup(env, d, *args):
    """(source, answer records as 'name ttl class type rdata' lists, text)."""
    out = ok(env, d, "lookup", *args)
    first, _, rest = out.partition("\n")
    m = re.match(r"^source: (\w+)$", first)
    assert m, out
    section = re.search(r";; ANSWER SECTION:\n(.*?)\n\n", rest, re.S)
    answer = [l.split(None, 4) for l in section.group(1).split("\n") if l] if section else []
    return m.group(1), answer, out


def ok_json(env, d, *args):
    """ctl --json ARGS: stdout must be one JSON document on one line."""
    out = ok(env, d, "--json", *args)
    assert out.endswith("\n") and out.count("\n") == 1, out
    return json.loads(out)


def json_lines(env, d, *args):
    """ctl --json ARGS: one JSON object per line, parsed."""
    out = ok(env, d, "--json", *args)
    assert out == "" or out.endswith("\n"), out[-200:]
    return [json.loads(line) for line in out[:-1].split("\n")] if out else []


def text_sections(out):
    """{"answer"|"authority"|"additional": [[name, ttl, class, type, data]]}
    from dig-style text (lookup's), records tab-separated."""
    sections, current = {}, None
    for line in out.split("\n"):
        m = re.match(r"^;; (ANSWER|AUTHORITY|ADDITIONAL) SECTION:$", line)
        if m:
            current = sections.setdefault(m.group(1).lower(), [])
        elif not line:
            current = None
        elif current is not None:
            current.append(line.split("\t", 4))
    return sections


def same_records(json_records, text_records, aged):
    """JSON records ({name, ttl, class, type, data}) and text ones
    ([name, ttl, class, type, data]) hold the same records in the same order,
    TTLs at most `aged` seconds apart (1 for rounding, plus the seconds that
    passed between the two calls)."""
    assert [[r["name"], r["class"], r["type"], r["data"]] for r in json_records] == \
        [[t[0], t[2], t[3], t[4]] for t in text_records], (json_records, text_records)
    assert all(type(r["ttl"]) is int and abs(r["ttl"] - int(t[1])) <= aged
               for r, t in zip(json_records, text_records)), (json_records, text_records)


def rdatas(answer, rtype):
    return sorted(r[4] for r in answer if r[3] == rtype)


def dump(env, d, *args):
    """dump-cache entry lines as lists of fields; records lines apart."""
    out = ok(env, d, "dump-cache", *args)
    entries, records = [], []
    for line in out.split("\n"):
        if line.startswith("  "):
            records.append(line.strip())
        elif line:
            entries.append(line.split(" "))
    return entries, records


def forwarding(env, up, **over):
    return start(env, upstream={"servers": [up.addr], "timeout": "1s"}, **over)


# ------------------------------------------------------------------- stats

def test_stats_count_known_queries_by_source_and_rcode(env):
    d = start(env)
    before = stats(env, d)
    for _ in range(3):
        assert d.udp("db.prod.svc.cluster.local", "A").rcode_name == "NOERROR"
    assert d.udp("nothere.prod.svc.cluster.local", "A").rcode_name == "NXDOMAIN"
    assert d.udp("db.prod.svc.cluster.local", "A", qclass=dnsmsg.C_CH).rcode_name == "REFUSED"
    after = stats(env, d)
    delta = {k: after[k] - before[k] for k in STAT_NAMES}
    assert delta["queries"] == 5, delta
    assert delta["answers_static"] == 4 and delta["answers_none"] == 1, delta
    assert delta["rcode_noerror"] == 3 and delta["rcode_nxdomain"] == 1, delta
    assert delta["rcode_refused"] == 1, delta
    assert after["cache_max_bytes"] == 64 << 20, after
    assert after["kube_enabled"] == 0 and after["kube_synced"] == 0, after
    assert after["reloads_ok"] == 0 and after["reload_last_success_time"] == 0, after
    # ctl's own lookups are counted apart, not as client queries
    lookup(env, d, "db.prod.svc.cluster.local")
    again = stats(env, d)
    assert again["control_lookups"] == after["control_lookups"] + 1, again
    assert again["queries"] == after["queries"], again


# ------------------------------------------------------------------ lookup

def test_lookup_static_then_cache_then_upstream_after_flush(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        source, answer, out = lookup(env, d, "db.prod.svc.cluster.local")
        assert source == "static" and rdatas(answer, "A") == ["10.0.0.5"], out
        assert re.search(r"flags: qr aa rd", out), out
        source, answer, _ = lookup(env, d, "db.prod.svc.cluster.local", "AAAA")
        assert source == "static" and rdatas(answer, "AAAA") == ["fd00::5"], answer

        before = stats(env, d)["queries"]
        source, answer, out = lookup(env, d, "www.site.example")
        assert source == "upstream" and rdatas(answer, "A") == ["192.0.2.1"], out
        assert up.queries() == 1
        # the control thread asked the resolver itself: no worker saw a query
        assert stats(env, d)["queries"] == before
        source, answer, out = lookup(env, d, "www.site.example")
        assert source == "cache" and rdatas(answer, "A") == ["192.0.2.1"], out
        assert 0 < int(answer[0][1]) <= 300, answer
        source, answer, _ = lookup(env, d, "WWW.Site.Example.", "aaaa")
        assert source == "upstream" and rdatas(answer, "AAAA") == ["2001:db8::1"], answer
        m = d.udp("www.site.example", "AAAA")   # the lookup filled the cache
        assert m.rcode_name == "NOERROR" and up.queries() == 2, m.describe()

        assert ok(env, d, "flush", "www.site.example") == \
            "flushed www.site.example (every type)\n"
        assert lookup(env, d, "www.site.example")[0] == "upstream"
        assert lookup(env, d, "www.site.example", "AAAA")[0] == "upstream"
        assert up.queries() == 4
        source, answer, out = lookup(env, d, "nothere.site.example", "TXT")
        assert source == "upstream" and "rcode: NXDOMAIN" in out, out
        assert lookup(env, d, "nothere.site.example", "TXT")[0] == "cache"


def test_lookup_large_answer_comes_whole(env):
    # 40 TXT records: more than 1232 bytes, so the daemon's UDP reply is
    # truncated and ctl asks again over TCP; from the cache it is whole.
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        for expect in ("upstream", "cache"):
            source, answer, out = lookup(env, d, "big.site.example", "TXT")
            assert source == expect and len(rdatas(answer, "TXT")) == 40, out
            assert "flags: qr rd ra ;" in out and " tc " not in out, out


def test_lookup_stale_while_the_upstream_is_down(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up, cache={"max_ttl": "1s"})
        assert lookup(env, d, "www.site.example")[0] == "upstream"
        d.udp("mail.site.example", "MX")  # libunbound's one kept message
        up.stop()
        time.sleep(1.5)  # expired now
        m = d.udp("never.site.example", "A", timeout=3)  # fails: upstream marked failing
        assert m.rcode_name == "SERVFAIL", m.describe()
        assert stats(env, d)["upstream_failing"] == 1
        source, answer, out = lookup(env, d, "www.site.example")
        assert source == "stale", out
        assert rdatas(answer, "A") == ["192.0.2.1"] and answer[0][1] == "30", out
        entries, _ = dump(env, d)
        www = [e for e in entries if e[0] == "www.site.example." and e[1] == "A"]
        assert len(www) == 1 and www[0][5].startswith("stale="), entries


test_lookup_stale_while_the_upstream_is_down.timeout = 30


def test_lookup_cluster_name_and_kube_stats(env):
    with F.FakeAPI() as api:
        api.apply(F.namespace("shop"),
                  F.service("shop", "db", cluster_ips=["10.96.0.5"],
                            ports=[F.service_port(3306, name="mysql")]))
        kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))
        d = start(env, kubernetes={"enabled": True, "kubeconfig": kc,
                                   "node_name": "node-a"})
        deadline = time.monotonic() + 5
        while stats(env, d)["kube_synced"] != 1:
            assert time.monotonic() < deadline, "no first sync"
            time.sleep(0.05)
        source, answer, out = lookup(env, d, "db.shop.svc.cluster.local")
        assert source == "cluster" and rdatas(answer, "A") == ["10.96.0.5"], out
        source, _, out = lookup(env, d, "nothere.shop.svc.cluster.local")
        assert source == "cluster" and "rcode: NXDOMAIN" in out, out
        s = stats(env, d)
        assert s["kube_enabled"] == 1 and s["kube_objects_services"] == 1, s
        assert s["kube_objects_namespaces"] == 1, s
        assert abs(s["kube_last_contact_time"] - time.time()) < 60, s


def test_lookup_errors(env):
    d = start(env)
    p = ctl(env, d, "lookup", "db.prod.svc.cluster.local", "NOSUCHTYPE")
    assert p.returncode == EXIT_FAILED, (p.returncode, p.stderr)
    assert 'unknown record type "NOSUCHTYPE"' in p.stderr, p.stderr
    p = ctl(env, d, "lookup", "a..b")
    assert p.returncode == EXIT_FAILED and "not a domain name" in p.stderr, p.stderr
    # an external name with a dead upstream: SERVFAIL is still an answer
    source, _, out = lookup(env, d, "www.example.org")
    assert source == "upstream" and "rcode: SERVFAIL" in out, out


# --------------------------------------------------------- flush and dump

def test_dump_cache_lists_entries_and_flush_all_empties_it(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        assert dump(env, d) == ([], [])
        d.udp("www.site.example", "A")
        d.udp("www.site.example", "A", do=True)
        d.udp("nothere.site.example", "AAAA")
        d.udp("c1.site.example", "A")
        entries, records = dump(env, d, "--records")
        assert len(entries) == 4, entries
        by_key = {(e[0], e[1], e[3]): e for e in entries}
        www = by_key[("www.site.example.", "A", "-")]
        assert www[2] == "IN" and www[4] == "NOERROR", www
        assert re.match(r"^ttl=\d+$", www[5]) and 0 < int(www[5][4:]) <= 300, www
        assert int(www[6]) > 80, www
        assert ("www.site.example.", "A", "do") in by_key, entries
        nx = by_key[("nothere.site.example.", "AAAA", "-")]
        assert nx[4] == "NXDOMAIN" and 0 < int(nx[5][4:]) <= 30, nx
        # TTLs may have aged by a second since the answers were cached
        aged = r"\t1(19|20)\tIN\t"
        assert any(re.fullmatch(r"c1\.site\.example\." + aged + r"CNAME\tc2\.site\.example\.", r)
                   for r in records), records
        assert any(re.fullmatch(r"www\.site\.example\." + aged + r"A\t192\.0\.2\.1", r)
                   for r in records), records
        assert any("\tSOA\t" in r for r in records), records
        assert ok(env, d, "flush") == "flushed every entry\n"
        assert dump(env, d) == ([], [])
        assert stats(env, d)["cache_entries"] == 0


def test_dump_cache_streams_many_entries(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        names = ["n%d.site.example" % i for i in range(600)]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            for i, n in enumerate(names):
                s.sendto(dnsmsg.build_query(n, "A", qid=i), ("127.0.0.1", d.port))
                if i % 50 == 49:   # keep the resolver's rings from overflowing
                    for _ in range(50):
                        s.recv(4096)
        entries, records = dump(env, d, "--records")
        got = sorted(e[0] for e in entries)
        assert got == sorted(n + "." for n in names), got[:5]
        assert all(e[4] == "NXDOMAIN" for e in entries), entries[:3]
        assert len(records) == 600, len(records)   # the SOA of each
        assert stats(env, d)["cache_entries"] == 600
        # as JSON, one line per entry: far more than the daemon's 16 KiB buffer too
        docs = json_lines(env, d, "dump-cache", "--records")
        assert sorted(doc["name"] for doc in docs) == sorted(n + "." for n in names)
        assert all(doc["rcode"] == "NXDOMAIN" and doc["answer"] == [] and
                   [r["type"] for r in doc["authority"]] == ["SOA"] for doc in docs), docs[:3]


def test_flush_rejects_a_bad_name(env):
    d = start(env)
    p = ctl(env, d, "flush", "a" * 64 + ".example")
    assert p.returncode == EXIT_FAILED and "is not a domain name" in p.stderr, p.stderr


# ------------------------------------------------------------------ reload

def test_reload_applies_a_good_file_and_keeps_serving_on_a_bad_one(env):
    d = start(env)
    cfg = harness.deep_merge(d.config, {})
    cfg["static"]["records"].append({"name": "new.prod.svc.cluster.local",
                                     "a": ["10.0.0.77"]})
    with open(d.config_path, "w") as f:
        f.write(harness.to_yaml(cfg) + "\n")
    assert ok(env, d, "reload") == "reloaded %s\n" % d.config_path
    source, answer, _ = lookup(env, d, "new.prod.svc.cluster.local")
    assert source == "static" and rdatas(answer, "A") == ["10.0.0.77"], answer
    s = stats(env, d)
    # >= 1: the config file watcher may have reloaded the new file as well.
    assert s["reloads_ok"] >= 1 and abs(s["reload_last_success_time"] - time.time()) < 60, s

    text = harness.to_yaml(cfg).replace("workers: 2", "workers: lots")
    with open(d.config_path, "w") as f:
        f.write(text + "\n")
    line = text.split("\n").index("  workers: lots") + 1
    p = ctl(env, d, "reload")
    assert p.returncode == EXIT_FAILED and p.stdout == "", (p.returncode, p.stdout)
    assert re.search(r"^localdns ctl: %s:%d:\d+: " % (re.escape(d.config_path), line),
                     p.stderr), p.stderr
    assert d.udp("new.prod.svc.cluster.local", "A").rcode_name == "NOERROR"
    assert lookup(env, d, "new.prod.svc.cluster.local")[0] == "static"
    assert stats(env, d)["reloads_failed"] >= 1


# ------------------------------------------------------ the socket's life

def test_socket_made_with_parents_and_mode_then_removed_at_exit(env):
    path = os.path.join(env.tmp, "a", "b", "control.sock")
    d = start(env, path=path)
    st = os.lstat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660, oct(st.st_mode)
    for parent in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        assert stat.S_IMODE(os.stat(parent).st_mode) == 0o755, parent
    # logged as the control thread starts, which may be after the first answer
    deadline = time.monotonic() + 10
    while "control socket ready" not in d.stderr():
        assert time.monotonic() < deadline, d.tail()
        time.sleep(0.05)
    rc, _ = d.stop()
    assert rc == 0, d.tail()
    assert not os.path.exists(path), "the socket file outlived the daemon"


def test_a_stale_socket_file_is_replaced(env):
    path = sock_path(env)
    os.makedirs(os.path.dirname(path))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(path)            # closed without unlink: what a crash leaves
    d = start(env, path=path)
    assert "replaced a stale control socket" in d.stderr(), d.tail()
    assert stats(env, d)["queries"] >= 1


def test_a_second_localdns_takes_the_socket_over_and_each_removes_only_its_own(env):
    # An upgrade's overlap where both pods share the socket's directory (a
    # hostPath): the new process takes the path over, the old one keeps
    # running, and its exit leaves the new one's socket in place.
    first = start(env)
    second = start(env, path=first.ctl_path)
    assert "took over the control socket" in second.stderr(), second.tail()
    for _ in range(40):
        assert second.udp("db.prod.svc.cluster.local", "A").rcode_name == "NOERROR"
    assert stats(env, second)["queries"] >= 40      # the path reaches the new one
    assert not [f for f in os.listdir(os.path.dirname(first.ctl_path))
                if f.startswith(".localdns-")], "a temporary socket file was left"
    rc, _ = first.stop()
    assert rc == 0, first.tail()
    assert stats(env, second)["queries"] >= 40, "the old process took the new one's socket away"
    rc, _ = second.stop()
    assert rc == 0, second.tail()
    assert not os.path.exists(first.ctl_path)


def test_a_file_that_is_not_a_socket_is_left_alone(env):
    path = sock_path(env)
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write("not a socket\n")
    d = env.start(control={"socket": path}, wait=False)
    assert d.proc.wait(10) == 1, d.tail()
    assert "exists and is not a socket" in d.stderr(), d.tail()
    with open(path) as f:
        assert f.read() == "not a socket\n"


def test_stalled_clients_do_not_block_dns_or_other_operators(env):
    # Four control threads: three clients that never send a request hold
    # three; a fourth operator is served at once, and DNS never waits.
    d = start(env)
    idle = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
    try:
        for s in idle:
            s.connect(d.ctl_path)      # and never sends a request
        time.sleep(0.3)                # each taken by a thread by now
        assert d.udp("db.prod.svc.cluster.local", "A").rcode_name == "NOERROR"
        t0 = time.monotonic()
        assert stats(env, d)["queries"] >= 1
        waited = time.monotonic() - t0
        assert waited < 3, "served after %.1fs: behind the stalled ones" % waited
        for s in idle:                 # dropped at the 5 s I/O timeout
            s.settimeout(10)
            assert s.recv(100) == b"", "a stalled client was not dropped"
    finally:
        for s in idle:
            s.close()


# ------------------------------------------------------------------- --json

def test_json_stats_one_document_with_the_text_names_and_values(env):
    d = start(env)
    for _ in range(3):
        assert d.udp("db.prod.svc.cluster.local", "A").rcode_name == "NOERROR"
    text = stats(env, d)
    doc = ok_json(env, d, "stats")
    assert list(doc) == STAT_NAMES, list(doc)     # the same names, in the same order
    assert all(type(v) is int for v in doc.values()), doc
    assert doc == text, {k: (doc[k], text[k]) for k in STAT_NAMES if doc[k] != text[k]}
    assert doc["answers_static"] >= 3 and doc["cache_max_bytes"] == 64 << 20, doc


def test_json_lookup_matches_the_text_answer(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        doc = ok_json(env, d, "lookup", "db.prod.svc.cluster.local")
        assert doc["source"] == "static" and doc["rcode"] == "NOERROR", doc
        assert doc["flags"] == ["qr", "aa", "rd", "ra"] and doc["opcode"] == "QUERY", doc
        assert doc["question"] == [{"name": "db.prod.svc.cluster.local.", "class": "IN",
                                    "type": "A"}], doc
        assert [(r["type"], r["data"]) for r in doc["answer"]] == [("A", "10.0.0.5")], doc

        # the first ask goes upstream; then the same answer, from the cache, both ways
        for name, rtype in (("c1.site.example", "A"), ("txt.site.example", "TXT"),
                            ("nothere.site.example", "AAAA"), ("big.site.example", "TXT")):
            first = ok_json(env, d, "lookup", name, rtype)
            assert first["source"] == "upstream", first
            t0 = time.monotonic()
            source, _, out = lookup(env, d, name, rtype)
            doc = ok_json(env, d, "lookup", name, rtype)
            apart = time.monotonic() - t0
            assert source == doc["source"] == "cache", (source, doc)
            assert re.search(r"rcode: %s," % doc["rcode"], out), (doc, out)
            assert re.search(r";; flags: %s ;" % " ".join(doc["flags"]), out), (doc, out)
            assert doc["edns"] == {"udp_size": 1232, "do": False}, doc
            assert re.search(r"MSG SIZE  rcvd: %d$" % doc["size"], out, re.M), (doc, out)
            assert type(doc["query_time_ms"]) is int and type(doc["id"]) is int, doc
            sections = text_sections(out)
            for section in ("answer", "authority", "additional"):
                same_records(doc[section], sections.get(section, []), aged=1 + apart)
        c1 = ok_json(env, d, "lookup", "c1.site.example")
        assert [r["type"] for r in c1["answer"]] == ["CNAME", "CNAME", "CNAME", "A"], c1
        assert c1["answer"][-1] == {"name": "www.site.example.", "ttl": c1["answer"][-1]["ttl"],
                                    "class": "IN", "type": "A", "data": "192.0.2.1"}, c1
        txt = ok_json(env, d, "lookup", "txt.site.example", "TXT")
        assert sorted(r["data"] for r in txt["answer"]) == [
            '"first string" "second string"', '"hello world"', '"v=spf1 -all"'], txt
        nx = ok_json(env, d, "lookup", "nothere.site.example", "AAAA")
        assert nx["rcode"] == "NXDOMAIN" and nx["answer"] == [], nx
        assert [r["type"] for r in nx["authority"]] == ["SOA"], nx
        assert len(ok_json(env, d, "lookup", "big.site.example", "TXT")["answer"]) == 40

        p = ctl(env, d, "--json", "lookup", "db.prod.svc.cluster.local", "NOSUCHTYPE")
        assert p.returncode == EXIT_FAILED and p.stdout == "", (p.returncode, p.stdout)
        assert 'unknown record type "NOSUCHTYPE"' in p.stderr, p.stderr


def _dump_as_text_fields(entry):
    """A JSON dump-cache entry as the text line's fields."""
    flags = ",".join(f for f, on in (("do", entry["dnssec_ok"]),
                                     ("cd", entry["checking_disabled"])) if on) or "-"
    state = "ttl" if entry["state"] == "live" else entry["state"]
    return [entry["name"], entry["type"], entry["class"], flags, entry["rcode"],
            state, entry["seconds"], str(entry["bytes"])]


def test_json_dump_cache_one_object_per_entry_as_the_text_says(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d = forwarding(env, up)
        assert json_lines(env, d, "dump-cache") == []
        d.udp("www.site.example", "A")
        d.udp("www.site.example", "A", do=True)
        d.udp("nothere.site.example", "AAAA")
        d.udp("c1.site.example", "A")
        t0 = time.monotonic()
        entries, _ = dump(env, d)
        docs = json_lines(env, d, "dump-cache")
        apart = time.monotonic() - t0    # the entries aged this much between the two
        assert len(docs) == len(entries) == 4, (docs, entries)
        for doc in docs:
            assert set(doc) == {"name", "type", "class", "dnssec_ok", "checking_disabled",
                                "rcode", "state", "seconds", "bytes"}, doc
            assert doc["state"] == "live" and type(doc["seconds"]) is int, doc
        text = {tuple(e[:5]): e for e in entries}
        for doc in docs:
            fields = _dump_as_text_fields(doc)
            line = text[tuple(fields[:5])]
            state, seconds = line[5].split("=")
            assert fields[5] == state and abs(fields[6] - int(seconds)) <= 1 + apart, \
                (doc, line, apart)
            assert fields[7] == line[6], (doc, line)
        www_do = [doc for doc in docs if doc["name"] == "www.site.example." and doc["dnssec_ok"]]
        assert len(www_do) == 1 and not www_do[0]["checking_disabled"], docs

        # --records: each entry's sections, the records the text lists under it
        t0 = time.monotonic()
        _, records = dump(env, d, "--records")
        docs = json_lines(env, d, "dump-cache", "--records")
        apart = time.monotonic() - t0
        listed = [r for doc in docs for s in ("answer", "authority", "additional")
                  for r in doc[s]]
        assert len(listed) == len(records), (listed, records)
        by_text = sorted(r.split("\t", 4) for r in records)
        by_json = sorted(listed, key=lambda r: [r["name"], str(r["ttl"]), r["class"],
                                                r["type"], r["data"]])
        same_records(by_json, by_text, aged=1 + apart)
        nx = [doc for doc in docs if doc["rcode"] == "NXDOMAIN"]
        assert len(nx) == 1 and [r["type"] for r in nx[0]["authority"]] == ["SOA"], nx


def test_json_top_one_document_matching_the_text(env):
    with F.FakeAPI() as api:
        d = _start_with_a_crawler_pod(env, api)
        _ask_many(d.port, "127.0.0.2", ["db.prod.svc.cluster.local",
                                        "gone1.prod.svc.cluster.local"], 320)
        _ask_many(d.port, "127.0.0.3", ["web.prod.svc.cluster.local"], 160)
        # --since 10m: a minute turning over between the two calls changes nothing
        for kind in ("clients", "names", "nxdomain", "servfail"):
            lines = _top(env, d, kind, "--since", "10m")
            doc = ok_json(env, d, "top", kind, "--since", "10m")
            assert doc["kind"] == kind and doc["since_seconds"] == 600, doc
            assert [item["count"] for item in doc["items"]] == [int(l[0]) for l in lines], \
                (doc, lines)
            if kind == "clients":
                assert [[item["client"]] + (["pod=" + item["pod"]] if item["pod"] else [])
                        for item in doc["items"]] == [l[1:] for l in lines], (doc, lines)
                assert doc["items"][0] == {"count": doc["items"][0]["count"],
                                           "client": "127.0.0.2", "pod": "shop/crawler-1"}, doc
                assert {"client": "127.0.0.3", "pod": None}.items() <= \
                    doc["items"][1].items(), doc
            else:
                assert [item["name"] + ("..." if item["cut"] else "")
                        for item in doc["items"]] == [l[1] for l in lines], (doc, lines)
        assert ok_json(env, d, "top", "servfail")["items"] == []
        doc = ok_json(env, d, "top", "names", "-n", "1", "--since", "2m")
        assert len(doc["items"]) == 1 and doc["since_seconds"] == 120, doc


test_json_top_one_document_matching_the_text.timeout = 60


def test_json_only_where_there_is_json(env):
    d = start(env)
    for command in (["flush"], ["reload"]):
        p = ctl(env, d, "--json", *command)
        assert p.returncode == EXIT_USAGE, (command, p.returncode, p.stderr)
        assert "%s has no --json output" % command[0] in p.stderr, p.stderr
    # the same from the daemon, to a client that sends the word itself
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(d.ctl_path)
        s.sendall(b"flush --json\n")
        assert s.makefile().read().startswith("usage flush has no --json output")


def test_raw_protocol_status_lines(env):
    d = start(env)

    def raw(request):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(d.ctl_path)
            s.sendall(request)
            out = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:   # closed with our request unread
                    chunk = b""
                if not chunk:
                    return out.decode()
                out += chunk

    assert raw(b"flush\n") == "ok\nflushed every entry\n.\n"
    assert raw(b"nonsense\n").startswith("usage unknown command \"nonsense\""), raw(b"nonsense\n")
    assert raw(b"stats  extra\n").startswith("usage "), raw(b"stats  extra\n")
    assert raw(b"lookup\n") == "usage lookup NAME [TYPE]\n.\n"
    assert raw(b"stats\r\n").startswith("ok\nqueries ")
    assert re.fullmatch(r'ok\n\{"queries":\d+,.*\}\n\.\n', raw(b"stats --json\n"), re.S)
    assert raw(b"top --json clients --since 5m -n 3\n").startswith('ok\n{"kind":"clients",')
    assert raw(b"x" * 2000 + b"\n") == ""     # no line within the limit: dropped


def test_node_without_node_integration_says_nothing_is_installed(env):
    # The node tests (test_node.py) cover a node with a link and a table.
    d = start(env)
    out = ok(env, d, "node")
    served = d.config["listen"]["addresses"]
    assert out == "".join(
        ["link none (interface.manage: false; the addresses are the operator's)\n",
         "table none (nftables.enabled: false)\n",
         "repairs link 0 table 0\n"]
        + ["address %s listen\n" % a for a in served]
        + ["if_died %s: fails closed: no nftables table sends it elsewhere "
           "(port unreachable)\n" % a for a in served]), out
    assert ctl(env, d, "node", "extra").returncode == EXIT_USAGE


# ------------------------------------------------- the client on its own

def test_ctl_without_a_daemon_says_so(env):
    path = os.path.join(env.tmp, "nothing-here.sock")
    p = env.run(["ctl", "--socket", path, "stats"])
    assert p.returncode == EXIT_UNREACHABLE, (p.returncode, p.stderr)
    assert p.stderr == ("localdns ctl: cannot connect to %s: No such file or directory "
                        "(is localdns running?)\n" % path), p.stderr
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(path)                   # a socket file nobody listens on
    p = env.run(["ctl", "--socket", path, "stats"])
    assert p.returncode == EXIT_UNREACHABLE and "Connection refused" in p.stderr, p.stderr


def test_ctl_socket_from_config_file(env):
    d = start(env)
    p = env.run(["ctl", "--config", d.config_path, "stats"])
    assert p.returncode == 0 and p.stdout.startswith("queries "), p.stderr
    off = os.path.join(env.tmp, "off.yaml")
    with open(off, "w") as f:
        f.write(harness.to_yaml(harness.deep_merge(d.config, {"control": {"socket": ""}})))
    with open(os.path.join(env.tmp, harness.STANDARD_FILE_NAME), "w") as f:
        f.write(harness.static_file_yaml(harness.STANDARD_FILE_RECORDS))
    p = env.run(["ctl", "--config", off, "stats"])
    assert p.returncode == EXIT_USAGE and "control.socket is \"\" (off)" in p.stderr, p.stderr
    p = env.run(["ctl", "--config", os.path.join(env.tmp, "missing.yaml"), "stats"])
    assert p.returncode == EXIT_USAGE and "missing.yaml" in p.stderr, p.stderr


def test_ctl_usage_errors(env):
    cases = [
        [],
        ["bogus"],
        ["lookup"],
        ["lookup", "a", "A", "extra"],
        ["stats", "now"],
        ["node", "now"],
        ["dump-cache", "--all"],
        ["--socket", "/x", "--config", "/y", "stats"],
        ["lookup", "has space.example"],
        ["--json", "flush"],
        ["--json", "dump-cache", "--all"],
        ["stats", "--json"],
    ]
    for args in cases:
        p = env.run(["ctl", "--socket", "/nonexistent/ctl.sock"] + args
                    if "--socket" not in args else ["ctl"] + args)
        assert p.returncode == EXIT_USAGE, (args, p.returncode, p.stderr)
        assert "usage: localdns ctl" in p.stderr, (args, p.stderr)
    p = env.run(["ctl", "--help"])
    assert p.returncode == 0 and "dump-cache [--records]" in p.stdout, p.stdout
    assert "-j, --json" in p.stdout, p.stdout
    p = env.run(["--help"])
    assert "localdns ctl [--socket PATH | --config FILE] COMMAND" in p.stdout, p.stdout


def _ask_many(port, source, names, times):
    """Ask each of names `times` times over UDP from source, one at a time."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((source, 0))
        s.settimeout(2)
        for _ in range(times):
            for name in names:
                s.sendto(dnsmsg.build_query(name, "A"), ("127.0.0.1", port))
                s.recv(4096)


def _start_with_a_crawler_pod(env, api):
    """localdns synced with a fake API where 127.0.0.2 is the pod
    shop/crawler-1 on this node (autopath on, so Pods are watched)."""
    api.apply(F.namespace("shop"), F.pod("shop", "crawler-1", ips="127.0.0.2", node="node-a"))
    kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))
    d = start(env, kubernetes={"enabled": True, "kubeconfig": kc, "node_name": "node-a"},
              cluster={"domain": "cluster.local", "ttl": "5s", "autopath": True})
    deadline = time.monotonic() + 5
    while stats(env, d)["kube_synced"] != 1:
        assert time.monotonic() < deadline, "no first sync"
        time.sleep(0.05)
    return d


def _top(env, d, *args):
    out = ok(env, d, "top", *args)
    return [line.split(" ") for line in out.strip().split("\n") if line]


def test_top_shows_the_heaviest_clients_names_and_nxdomains_with_their_pods(env):
    # Counts are estimates from one query in 16 per worker: judged by order
    # and by bounds the sampling cannot miss.
    with F.FakeAPI() as api:
        d = _start_with_a_crawler_pod(env, api)
        # 127.0.0.2 (a pod) asks 1,280 times, 127.0.0.3 (no pod) 320 times
        _ask_many(d.port, "127.0.0.2", ["db.prod.svc.cluster.local",
                                        "gone1.prod.svc.cluster.local"], 640)
        _ask_many(d.port, "127.0.0.3", ["web.prod.svc.cluster.local",
                                        "gone2.prod.svc.cluster.local"], 160)
        clients = _top(env, d, "clients")
        assert [c[1] for c in clients[:2]] == ["127.0.0.2", "127.0.0.3"], clients
        assert clients[0][2] == "pod=shop/crawler-1" and len(clients[1]) == 2, clients
        # about 80 and 20 samples: bounds over three standard deviations out
        assert 1280 * 0.5 <= int(clients[0][0]) <= 1280 * 1.5, clients
        assert 320 * 0.25 <= int(clients[1][0]) <= 320 * 2, clients
        names = [n[1] for n in _top(env, d, "names", "-n", "2")]
        assert sorted(names[:2]) == ["db.prod.svc.cluster.local.",
                                     "gone1.prod.svc.cluster.local."], names
        nx = [n[1] for n in _top(env, d, "nxdomain", "--since", "5m")]
        assert nx[:2] == ["gone1.prod.svc.cluster.local.", "gone2.prod.svc.cluster.local."], nx
        assert _top(env, d, "servfail") == []
        p = ctl(env, d, "top", "pods")
        assert p.returncode == 2 and "top clients|names|nxdomain|servfail" in p.stderr, p.stderr
        p = ctl(env, d, "top", "names", "--since", "2h")
        assert p.returncode == 1 and "at most 10 minutes" in p.stderr, p.stderr


test_top_shows_the_heaviest_clients_names_and_nxdomains_with_their_pods.timeout = 60
