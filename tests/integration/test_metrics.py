"""Health, readiness and Prometheus metrics over HTTP (health.listen,
metrics.listen): /health and /ready answers, /ready held at 503 until the
first Kubernetes sync (the fake API server forbids Services, then allows
them), /metrics counting queries by protocol, qtype, rcode and answer source
(static, cache, upstream through NSD, stale during an outage), the
upstream latency histogram, /health failing while one thread is held
stopped (ptrace) and recovering when it runs again, the Kubernetes figures, `promtool check
metrics` on real scrapes, one server for both keys or one each, 404/405,
and start-up failing on an address in use or not on this machine."""

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import authority
import dnsmsg
import harness
import test_ctl

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

# Light: a small share of a CPU (they mostly wait on the daemon), so they may
# run beside a test that runs alone (run.py -j).
QUIET = True

SITE = authority.zone_path("site.example.")
NODE = "node-m"


def request(port, path, method="GET", body=None):
    """(status, headers with lower-case names, body text) of one request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request(method, path, body=body)
        r = c.getresponse()
        data = r.read().decode()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def status_body(port, path):
    status, _, body = request(port, path)
    return status, body


def with_http(env, health=True, metrics=True, same=True, **over):
    """A daemon of this test's own with /health and /metrics on free
    ports; returns (daemon, health port, metrics port)."""
    hport = harness.free_port()
    mport = hport if same else harness.free_port()
    over["health"] = {"listen": "127.0.0.1:%d" % hport if health else ""}
    over["metrics"] = {"listen": "127.0.0.1:%d" % mport if metrics else ""}
    return env.start(**over), hport, mport


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Scrape:
    """One /metrics body, parsed: value(name, **labels), families."""

    def __init__(self, text):
        self.text = text
        self.samples = {}
        self.types = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
                continue
            if line.startswith("#") or not line:
                continue
            m = SAMPLE.match(line)
            assert m, "not a sample line: %r" % line
            labels = frozenset(LABEL.findall(m.group(2) or ""))
            self.samples[(m.group(1), labels)] = float(m.group(3))

    def value(self, name, **labels):
        key = (name, frozenset(labels.items()))
        assert key in self.samples, "no sample %s%s in:\n%s" % (
            name, labels, self.text)
        return self.samples[key]

    def has(self, name, **labels):
        return (name, frozenset(labels.items())) in self.samples

    def series(self, name):
        """{frozenset(labels): value} of every sample named name."""
        return {k[1]: v for k, v in self.samples.items() if k[0] == name}


def scrape(port):
    status, headers, body = request(port, "/metrics")
    assert status == 200, (status, body)
    assert headers["content-type"].startswith("text/plain; version=0.0.4"), headers
    return Scrape(body)


def promtool_check(text):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make deps` installs it (Debian package prometheus)"
    p = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                       capture_output=True, timeout=30)
    assert p.returncode == 0, "promtool check metrics:\n%s%s" % (p.stdout, p.stderr)


def delta(before, after, name, **labels):
    return after.value(name, **labels) - before.value(name, **labels)


def wait_until(pred, what, timeout=10.0):
    harness.wait_until(pred, what, timeout, step=0.05)


# ---------------------------------------------------------------- endpoints

def test_health_and_ready_answer_on_one_shared_address(env):
    d, port, _ = with_http(env)
    assert status_body(port, "/health") == (200, "ok\n")
    status, headers, body = request(port, "/ready")
    assert (status, body) == (200, "ready\n"), (status, body)
    assert headers["content-type"] == "text/plain; charset=utf-8", headers
    status, _, body = request(port, "/metrics")  # the same server has every path
    assert status == 200 and "localdns_build_info{" in body, body[:200]
    assert request(port, "/")[0] == 404
    assert request(port, "/health/extra")[0] == 404
    assert status_body(port, "/health?verbose=1") == (200, "ok\n")  # query strings ignored
    status, headers, body = request(port, "/health", "HEAD")
    assert status == 200 and body == "" and headers["content-length"] == "3", headers
    status, headers, body = request(port, "/metrics", "POST", body="x" * 1000)
    assert status == 405 and headers["allow"] == "GET, HEAD", (status, headers)
    assert request(port, "/ready", "DELETE")[0] == 405
    assert d.alive()
    assert "serving /health, /ready and /metrics" in d.stderr(), d.tail()


def test_health_and_metrics_on_their_own_addresses(env):
    d, hport, mport = with_http(env, same=False)
    assert request(hport, "/health")[0] == 200
    assert request(hport, "/ready")[0] == 200
    assert request(hport, "/metrics")[0] == 404
    assert request(mport, "/metrics")[0] == 200
    assert request(mport, "/health")[0] == 404
    assert request(mport, "/ready")[0] == 404


def test_metrics_on_the_address_the_environment_names(env):
    # The chart's metrics.listen, "${POD_IP}:9253": the pod's IP, which on
    # the host network is the node's own address, where Prometheus scrapes.
    mport = harness.free_port()
    d = env.start(metrics={"listen": "${POD_IP}:%d" % mport}, extra_env={"POD_IP": "127.0.0.1"})
    assert "localdns_requests_total" in request(mport, "/metrics")[2]
    assert 'msg="serving /metrics" address=127.0.0.1:%d' % mport in d.stderr(), d.tail()


def test_only_metrics_when_health_is_off(env):
    d, hport, mport = with_http(env, health=False, same=False)
    assert request(mport, "/metrics")[0] == 200
    assert request(mport, "/health")[0] == 404
    with socket.socket() as s:  # nothing listens on the health port
        assert s.connect_ex(("127.0.0.1", hport)) != 0


# ---------------------------------------------------------------- counting

def test_health_fails_while_a_loop_is_stuck_and_recovers(env):
    # A loop that has not turned for 5 s fails /health, so kubelet restarts a
    # wedged daemon; /ready and the other threads are not affected. The
    # resolver and worker 0 are stopped together (one 5 s wait, not two):
    # /health names the workers first, so it names worker 0 until that runs
    # again, then the resolver until it does.
    d, port, _ = with_http(env)
    assert status_body(port, "/health") == (200, "ok\n")

    def health_says(says):
        status, body = status_body(port, "/health")
        return status == 503 and says in body

    with harness.StoppedThread(harness.thread_id(d.proc.pid, "resolver")):
        with harness.StoppedThread(harness.thread_id(d.proc.pid, "worker/0")):
            wait_until(lambda: health_says("worker 0 has not gone round its loop"),
                       "503 naming worker 0 with it and the resolver stopped", timeout=10)
            assert status_body(port, "/ready") == (200, "ready\n")
        # worker 0 turns again: /health no longer names it
        wait_until(lambda: health_says("the resolver has not gone round its loop"),
                   "503 naming the resolver once worker 0 runs again", timeout=5)
        assert status_body(port, "/ready") == (200, "ready\n")
        m = d.udp("db.prod.svc.cluster.local", "A")  # the workers still answer local names
        assert m.rcode_name == "NOERROR" and m.answer, m.describe()
    wait_until(lambda: request(port, "/health")[0] == 200,
               "200 once the resolver runs again", timeout=5)
    m = d.udp("db.prod.svc.cluster.local", "A")
    assert m.rcode_name == "NOERROR" and m.answer, m.describe()


test_health_fails_while_a_loop_is_stuck_and_recovers.timeout = 40


def test_metrics_count_queries_by_protocol_qtype_rcode_and_source(env):
    with authority.Authority({"site.example.": SITE}) as up:
        # no client response timer: the outage below goes the timeout's way
        d, port, _ = with_http(env, upstream={"servers": [up.addr], "timeout": "1s"},
                               cache={"max_ttl": "1s", "stale_answer_timeout": "0s"})
        before = scrape(port)
        assert d.udp("db.prod.svc.cluster.local", "A").rcode_name == "NOERROR"
        assert d.udp("db.prod.svc.cluster.local", "A").rcode_name == "NOERROR"
        assert d.tcp("db.prod.svc.cluster.local", "AAAA").rcode_name == "NOERROR"
        assert d.udp("nope.prod.svc.cluster.local", "A").rcode_name == "NXDOMAIN"
        assert d.udp("version.bind", "TXT", qclass=dnsmsg.C_CH).rcode_name == "REFUSED"
        assert d.udp("www.site.example", "A").rcode_name == "NOERROR"   # upstream
        assert d.udp("www.site.example", "A").rcode_name == "NOERROR"   # cache
        assert d.udp("mail.site.example", "MX").rcode_name == "NOERROR"  # upstream
        after = scrape(port)

        def changed(name, label, want):
            got = {dict(k)[label]: v - before.series(name)[k]
                   for k, v in after.series(name).items()}
            got = {k: v for k, v in got.items() if v}
            assert got == want, "%s: expected %s, got %s" % (name, want, got)

        changed("localdns_requests_total", "protocol", {"udp": 7, "tcp": 1})
        changed("localdns_requests_by_qtype_total", "qtype",
                {"A": 5, "AAAA": 1, "TXT": 1, "MX": 1})
        changed("localdns_responses_total", "rcode",
                {"NOERROR": 6, "NXDOMAIN": 1, "REFUSED": 1})
        changed("localdns_answers_total", "source",
                {"static": 4, "none": 1, "upstream": 2, "cache": 1})
        assert delta(before, after, "localdns_cache_hits_total") == 1
        assert delta(before, after, "localdns_cache_misses_total") == 2
        assert delta(before, after, "localdns_upstream_queries_total") == 2
        assert after.value("localdns_cache_entries") >= 2
        assert 0 < after.value("localdns_cache_bytes") <= after.value("localdns_cache_max_bytes")
        assert after.value("localdns_cache_slab_bytes") % (64 << 10) == 0  # whole slabs
        assert after.value("localdns_cache_slab_bytes") >= 64 << 10  # the entries' slab
        assert after.value("localdns_cache_slab_overflows_total") == 0  # far below the limit

        # The outage: the entry expires, the first query waits for the
        # timeout and gets the stale entry from the resolver, the next is
        # served stale by the worker at once.
        up.stop()
        time.sleep(1.5)
        before = scrape(port)
        for _ in range(2):
            m = d.udp("www.site.example", "A", timeout=3)
            assert m.rcode_name == "NOERROR" and m.answer[0]["ttl"] == 30, m.describe()
        after = scrape(port)
        assert delta(before, after, "localdns_answers_total", source="upstream") == 1
        assert delta(before, after, "localdns_answers_total", source="stale") == 1
        assert delta(before, after, "localdns_upstream_errors_total", kind="timeout") == 1
        assert delta(before, after, "localdns_upstream_fallback_replies_total",
                     reply="stale") == 1
        assert delta(before, after, "localdns_cache_stale_hits_total") >= 1
        assert after.value("localdns_upstream_failing") == 1
        promtool_check(after.text)


test_metrics_count_queries_by_protocol_qtype_rcode_and_source.timeout = 40


def test_a_backlog_is_counted_and_the_socket_is_watched_again_after_it(env):
    # A stopped daemon piles up 200 queries in its UDP socket, so a read
    # on waking fills a whole batch (64): counted, and the socket is out of
    # the epoll set while the backlog drains. Before each backlog, 20
    # queries come alone, so the worker has gone over to reading one
    # datagram at a time (server/udp.c: after 8 reads in a row that found
    # one), and it must still see the backlog and read it in batches. Every
    # query is answered, and queries sent after each backlog are answered
    # too: they need the socket back in the set to wake the worker.
    d, port, _ = with_http(env, listen={"workers": 1})
    queries = [dnsmsg.build_query("db.prod.svc.cluster.local", "A", qid=i) for i in range(200)]
    for round_ in (1, 2):
        for _ in range(20):
            m = d.udp("db.prod.svc.cluster.local", "A", timeout=2)
            assert m.rcode_name == "NOERROR", "round %d, alone: %s" % (round_, m.describe())
        before = scrape(port)
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        client.bind(("127.0.0.1", 0))
        client.settimeout(5)
        try:
            harness.stop_process(d.proc.pid)
            for q in queries:
                client.sendto(q, ("127.0.0.1", d.port))
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        ids = set()
        try:
            while len(ids) < len(queries):
                ids.add(dnsmsg.parse(client.recv(4096)).id)
        except socket.timeout:
            pass
        client.close()
        assert len(ids) == len(queries), "round %d: %d of %d queries answered" % (
            round_, len(ids), len(queries))
        after = scrape(port)
        assert delta(before, after, "localdns_udp_busy_wakeups_total") >= 1, (
            "round %d: a 200-query backlog was not counted as a busy wake-up" % round_)
        for _ in range(3):
            m = d.udp("db.prod.svc.cluster.local", "A", timeout=2)
            assert m.rcode_name == "NOERROR", "round %d: %s" % (round_, m.describe())


def test_upstream_latency_histogram_is_consistent(env):
    with authority.Authority({"site.example.": SITE}) as up:
        d, port, _ = with_http(env, upstream={"servers": [up.addr], "timeout": "2s"})
        names = ["www", "mail", "txt", "short", "long", "noaaaa", "c1", "nx1"]
        for name in names:
            d.udp(name + ".site.example", "A", timeout=3)
        s = scrape(port)
    name = "localdns_upstream_duration_seconds"
    assert s.types[name] == "histogram"
    buckets = sorted(((float(dict(k)["le"]), v) for k, v in
                      s.series(name + "_bucket").items()))
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), "buckets are not cumulative: %s" % buckets
    assert buckets[-1][0] == float("inf")
    count = s.value(name + "_count")
    assert buckets[-1][1] == count
    # every question was asked once and answered before the scrape
    assert count == s.value("localdns_upstream_queries_total") == len(names), s.text
    total = s.value(name + "_sum")
    assert 0 < total < count * 2, "sum %s for %s answers from loopback" % (total, count)
    assert dict(buckets)[10.0] == count


# ---------------------------------------------------------------- Kubernetes

def test_ready_waits_for_the_first_kubernetes_sync(env):
    with F.FakeAPI() as api:
        api.apply(F.namespace("shop"),
                  F.service("shop", "db", cluster_ips=["10.96.0.5"]),
                  F.service("shop", "web", cluster_ips=["10.96.0.6"]))
        api.forbid("services")
        kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))
        d, port, _ = with_http(env, kubernetes={"enabled": True, "kubeconfig": kc,
                                                "node_name": NODE})
        assert status_body(port, "/ready") == (503, "waiting for the first Kubernetes sync\n")
        assert status_body(port, "/health") == (200, "ok\n")  # alive, just not ready
        s = scrape(port)
        assert s.value("localdns_kubernetes_synced") == 0
        assert not s.series("localdns_kubernetes_data_age_seconds")
        promtool_check(s.text)

        api.allow()
        wait_until(lambda: request(port, "/ready")[0] == 200, "ready after the sync", 20)
        assert status_body(port, "/ready") == (200, "ready\n")
        assert d.udp("db.shop.svc.cluster.local").rcode_name == "NOERROR"
        s = scrape(port)
        now = time.time()
        assert s.value("localdns_kubernetes_synced") == 1
        assert s.value("localdns_kubernetes_objects", resource="services") == 2
        assert s.value("localdns_kubernetes_objects", resource="namespaces") == 1
        assert s.value("localdns_kubernetes_errors_total") >= 1  # the 403s
        for res in ("services", "endpointslices", "namespaces"):
            t = s.value("localdns_kubernetes_last_sync_timestamp_seconds", resource=res)
            assert now - 30 < t <= now + 1, (res, t, now)
        # Nothing needs Pods here (no autopath, no verified pod names): never listed.
        synced = s.series("localdns_kubernetes_last_sync_timestamp_seconds")
        assert frozenset({("resource", "pods")}) not in synced and len(synced) == 3, synced
        assert s.value("localdns_kubernetes_objects", resource="pods") == 0
        for res in ("services", "endpointslices"):
            assert s.value("localdns_kubernetes_objects_too_large_total", resource=res) == 0
        assert now - 30 < s.value("localdns_kubernetes_last_contact_timestamp_seconds") <= now + 1
        assert 0 <= s.value("localdns_kubernetes_data_age_seconds") < 30
        assert s.value("localdns_cluster_names") > 0
        assert s.value("localdns_answers_total", source="cluster") >= 1

        api.apply(F.service("shop", "cache", cluster_ips=["10.96.0.7"]))
        wait_until(lambda: scrape(port).value("localdns_kubernetes_objects",
                                              resource="services") == 3, "the watch event")
        s = scrape(port)
        assert s.value("localdns_kubernetes_watch_events_total", resource="services") >= 1
        promtool_check(s.text)


test_ready_waits_for_the_first_kubernetes_sync.timeout = 40


# ---------------------------------------------------------------- everything

def test_promtool_accepts_the_whole_exposition(env):
    d, port, _ = with_http(env)
    for qt in ("A", "AAAA", "SRV", "PTR", "TXT", 65, 64, 257):  # HTTPS, SVCB, CAA
        d.udp("db.prod.svc.cluster.local", qt)
    s = scrape(port)
    promtool_check(s.text)
    for name, kind in s.types.items():
        if kind == "counter":
            assert name.endswith("_total"), name
        assert name.startswith(("localdns_", "process_")), name
    assert s.value("localdns_requests_by_qtype_total", qtype="other") == 1  # CAA
    assert s.value("localdns_requests_by_qtype_total", qtype="HTTPS") == 1
    version = open(os.path.join(harness.REPO, "VERSION")).read().strip()
    info = [dict(k) for k in s.series("localdns_build_info")]
    assert len(info) == 1 and info[0]["version"] == version, info
    assert s.value("localdns_config_reloads_total", result="success") == 0
    assert s.value("localdns_query_log_dropped_total") == 0  # log.queries is off
    assert abs(s.value("localdns_config_last_reload_success_timestamp_seconds")
               - s.value("process_start_time_seconds")) < 1
    assert abs(s.value("process_start_time_seconds") - time.time()) < 60
    assert s.value("process_resident_memory_bytes") > 1 << 20
    assert s.value("process_open_fds") > 3
    # no Kubernetes, no node integration and no keeper here: their families are left out
    assert not any(n.startswith(("localdns_kubernetes_", "localdns_node_", "localdns_keeper_"))
                   for n in s.types)

    os.kill(d.proc.pid, 1)  # SIGHUP: a reload is counted
    wait_until(lambda: scrape(port).value("localdns_config_reloads_total",
                                          result="success") == 1, "the reload")
    s = scrape(port)
    assert abs(s.value("localdns_config_last_reload_success_timestamp_seconds") - time.time()) < 10


# ---------------------------------------------------------------- ctl stats

# Every `ctl stats` line that /metrics also shows: (metric, labels), or a
# list of them when ctl shows their sum. The rest are ctl's own
# (control_lookups, upstream_answers, kube_enabled, the *_time lines) or
# shown only with Kubernetes or the node integration.
def shared_counters():
    pairs = {
        "queries": [("localdns_requests_total", {"protocol": p}) for p in ("udp", "tcp")],
        "queries_dropped": ("localdns_dropped_total", {}),
        "queries_truncated": ("localdns_truncated_total", {}),
        "queries_not_allowed": ("localdns_not_allowed_total", {}),
        "queries_rrl_slipped": ("localdns_rrl_limited_total", {"action": "slipped"}),
        "queries_rrl_dropped": ("localdns_rrl_limited_total", {"action": "dropped"}),
        "udp_busy_wakeups": ("localdns_udp_busy_wakeups_total", {}),
        "cache_entries": ("localdns_cache_entries", {}),
        "cache_bytes": ("localdns_cache_bytes", {}),
        "cache_max_bytes": ("localdns_cache_max_bytes", {}),
        "cache_slab_bytes": ("localdns_cache_slab_bytes", {}),
        "cache_slab_overflows": ("localdns_cache_slab_overflows_total", {}),
        "cache_hits": ("localdns_cache_hits_total", {}),
        "cache_misses": ("localdns_cache_misses_total", {}),
        "cache_stale_hits": ("localdns_cache_stale_hits_total", {}),
        "cache_prefetches": ("localdns_cache_prefetches_total", {}),
        "cache_inserts": ("localdns_cache_inserts_total", {}),
        "cache_rejected": ("localdns_cache_insert_rejections_total", {}),
        "cache_evictions": ("localdns_cache_evictions_total", {}),
        "upstream_queries": ("localdns_upstream_queries_total", {}),
        "upstream_coalesced": ("localdns_upstream_coalesced_total", {}),
        "upstream_failures": ("localdns_upstream_errors_total", {"kind": "resolution"}),
        "upstream_bogus": ("localdns_upstream_errors_total", {"kind": "bogus"}),
        "upstream_timeouts": ("localdns_upstream_errors_total", {"kind": "timeout"}),
        "upstream_stale": ("localdns_upstream_fallback_replies_total", {"reply": "stale"}),
        "upstream_servfail": ("localdns_upstream_fallback_replies_total",
                              {"reply": "servfail"}),
        "upstream_dropped": ("localdns_upstream_dropped_total", {}),
        "upstream_resolving": ("localdns_upstream_resolving", {}),
        "upstream_queued": ("localdns_upstream_queued", {}),
        "upstream_flights": ("localdns_upstream_flights", {}),
        "upstream_paced": ("localdns_upstream_paced_total", {}),
        "upstream_retries": ("localdns_upstream_retries_total", {}),
        "upstream_client_limited": ("localdns_upstream_client_limited_total", {}),
        "upstream_evicted": ("localdns_upstream_evicted_total", {}),
        "upstream_context_renewals": ("localdns_upstream_context_renewals_total", {}),
        "upstream_failing": ("localdns_upstream_failing", {}),
        "reloads_ok": ("localdns_config_reloads_total", {"result": "success"}),
        "reloads_failed": ("localdns_config_reloads_total", {"result": "failure"}),
        "dnstap_sent": ("localdns_dnstap_sent_total", {}),
        "dnstap_dropped": ("localdns_dnstap_dropped_total", {}),
        "dnstap_connections": ("localdns_dnstap_connections_total", {}),
        "dnstap_connected": ("localdns_dnstap_connected", {}),
    }
    for rcode in ("NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "other"):
        pairs["rcode_" + rcode.lower()] = ("localdns_responses_total", {"rcode": rcode})
    for source in ("none", "static", "cluster", "cache", "stale", "upstream", "mesh"):
        pairs["answers_" + source] = ("localdns_answers_total", {"source": source})
    reasons = ("queue_full", "table_full", "refresh_limit")
    for reason in reasons:
        pairs["upstream_shed_" + reason] = ("localdns_upstream_shed_total", {"reason": reason})
    pairs["upstream_shed"] = [("localdns_upstream_shed_total", {"reason": r}) for r in reasons]
    for result in ("NOERROR", "NXDOMAIN", "SERVFAIL", "other", "error", "bogus"):
        pairs["upstream_results_" + result] = ("localdns_upstream_results_total",
                                               {"result": result})
    return pairs


def test_ctl_stats_and_metrics_agree_on_every_counter_they_share(env):
    # The resolver thread sends replies too (upstream answers, SERVFAIL):
    # ctl's rcode_* and queries_truncated count them as /metrics does.
    with authority.Authority({"site.example.": SITE}) as up:
        sock = test_ctl.sock_path(env)
        d, port, _ = with_http(env, control={"socket": sock},
                               upstream={"servers": [up.addr], "timeout": "2s"})
        d.ctl_path = sock
        assert d.udp("db.prod.svc.cluster.local", "A").rcode_name == "NOERROR"
        assert d.udp("nope.prod.svc.cluster.local", "A").rcode_name == "NXDOMAIN"
        assert d.udp("version.bind", "TXT", qclass=dnsmsg.C_CH).rcode_name == "REFUSED"
        assert d.udp("www.site.example", "A").rcode_name == "NOERROR"      # the resolver
        assert d.udp("www.site.example", "A").rcode_name == "NOERROR"      # the cache
        assert d.tcp("mail.site.example", "MX").rcode_name == "NOERROR"    # resolver, TCP
        # outside the authority's zones: it refuses, the resolver sends SERVFAIL
        m = d.udp("www.elsewhere.example", "A", timeout=3)
        assert m.rcode_name == "SERVFAIL", m.describe()
        ctl = test_ctl.stats(env, d)
        s = scrape(port)
    assert ctl["rcode_servfail"] >= 1 and ctl["upstream_queries"] >= 3, ctl
    shared = shared_counters()
    for name, value in ctl.items():
        if name not in shared:
            continue
        samples = shared[name] if isinstance(shared[name], list) else [shared[name]]
        total = sum(s.value(metric, **labels) for metric, labels in samples)
        assert value == total, "ctl %s is %d, /metrics %s says %d" % (
            name, value, samples, total)
    unshared = set(ctl) - set(shared)
    assert unshared == {"control_lookups", "upstream_answers", "kube_enabled", "kube_synced",
                        "kube_objects_services", "kube_objects_endpointslices",
                        "kube_objects_namespaces", "kube_objects_pods",
                        "kube_objects_serviceentries", "kube_objects_workloadentries",
                        "kube_objects_serviceimports", "kube_objects_selectedpods", "kube_events",
                        "kube_relists", "kube_errors", "kube_last_contact_time",
                        "node_link_repairs", "node_table_repairs",
                        "reload_last_success_time", "keeper_enabled", "keeper_connected",
                        "keeper_rescues_death", "keeper_rescues_hang", "keeper_relayed_death",
                        "keeper_relayed_hang", "keeper_failed_not_sent",
                        "keeper_failed_no_answer"}, unshared


test_ctl_stats_and_metrics_agree_on_every_counter_they_share.timeout = 30


# ---------------------------------------------------------------- start-up errors

def start_fails(env, message, **over):
    d = env.start(wait=False, **over)
    try:
        rc = d.proc.wait(10)
    except subprocess.TimeoutExpired:
        raise AssertionError("localdns kept running: %s" % d.tail())
    assert rc == 1, (rc, d.tail())
    assert message in d.stderr(), "expected %r in:\n%s" % (message, d.tail())


def test_an_address_in_use_fails_start_up_naming_the_key(env):
    port = harness.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        start_fails(env, "health.listen: cannot listen on 127.0.0.1:%d: Address already in use"
                    % port, health={"listen": "127.0.0.1:%d" % port})
        start_fails(env, "metrics.listen: cannot listen on 127.0.0.1:%d: Address already in use"
                    % port, metrics={"listen": "127.0.0.1:%d" % port})


def test_an_address_not_on_this_machine_fails_start_up(env):
    start_fails(env, "metrics.listen: cannot listen on 192.0.2.1:9253: Cannot assign "
                "requested address", metrics={"listen": "192.0.2.1:9253"})
