"""Logs: logfmt and JSON carry the same fields, values are escaped (a
query name with a quote and a newline stays on one line), debug lines only
at debug level; the sampled query log (log.queries: every query with its
client, port, protocol, qname, qtype, rcode, source and size, in both
formats; 1 in N; off; turned on by a reload; a full ring counted exactly);
and no bearer token or client key ever reaches the log, even at debug level
against the fake Kubernetes API with 401s on the way."""

import base64
import json
import os
import re
import socket
import sys
import time

import dnsmsg
import harness
from harness import wait_until

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

# Light: a small share of a CPU (they mostly wait on the daemon), so they may
# run beside a test that runs alone (run.py -j).
QUIET = True

DB = "db.prod.svc.cluster.local"

_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^ ]*)')


def parse_logfmt(line):
    """A logfmt line as a dict; quoted values use JSON's escapes."""
    return {k: json.loads(v) if v.startswith('"') else v
            for k, v in _PAIR.findall(line)}


def log_events(d, fmt="logfmt"):
    lines = [l for l in d.stderr().split("\n") if l]
    return [json.loads(l) if fmt == "json" else parse_logfmt(l) for l in lines]


def queries_logged(d, fmt="logfmt"):
    return [e for e in log_events(d, fmt) if e.get("msg") == "query"]


def udp_from_own_port(d, pkt):
    """Send pkt from a socket of our own; (reply, our port). Only the
    daemon's reply with pkt's ID counts: the kernel may give us a port
    another test's socket left with a reply still on its way to it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(3)
        s.sendto(pkt, (d.host, d.port))
        while True:
            data, addr = s.recvfrom(65535)
            if addr == (d.host, d.port) and data[:2] == pkt[:2]:
                return dnsmsg.parse(data), s.getsockname()[1]


def tcp_from_own_port(d, pkt):
    with socket.create_connection((d.host, d.port), 3) as s:
        s.sendall(dnsmsg.frame(pkt))
        return dnsmsg.parse(dnsmsg.tcp_read_msg(s)), s.getsockname()[1]


# ------------------------------------------------------------- formats

def test_logfmt_and_json_lines_carry_the_same_fields(env):
    keys = {}
    for fmt in ("logfmt", "json"):
        d = env.start(log={"format": fmt})
        d.stop()
        events = log_events(d, fmt)
        assert events, "nothing logged in %s" % fmt
        for e in events:
            assert {"ts", "level", "msg"} <= set(e), (fmt, e)
            assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", e["ts"]), e
        keys[fmt] = {e["msg"]: set(e) for e in events}
    for msg in ("listening", "serving", "privileges dropped", "stopped"):
        assert msg in keys["logfmt"], (msg, keys["logfmt"])
        assert keys["logfmt"][msg] == keys["json"][msg], \
            (msg, keys["logfmt"][msg], keys["json"][msg])


def test_debug_lines_only_at_debug_level(env):
    d = env.start(log={"level": "debug"})
    d.stop()
    debug = [e for e in log_events(d) if e["level"] == "debug"]
    assert any(e["msg"] == "capabilities before the drop" for e in debug), d.stderr()
    for level in ("info", "warn"):
        d = env.start(log={"level": level})
        d.stop()
        assert "level=debug" not in d.stderr(), d.stderr()
        if level == "warn":
            assert "level=info" not in d.stderr(), d.stderr()


def test_values_are_escaped_in_both_formats(env):
    # A query name with a quote, a space and a newline: dns_name_to_text
    # writes \034 \032 \010, and the log escapes the backslashes; one line.
    raw = b"\x09we\"i d\nrd" + dnsmsg.encode_name("prod.svc.cluster.local")
    for fmt in ("logfmt", "json"):
        d = env.start(log={"format": fmt, "queries": 1})
        m, _ = udp_from_own_port(d, dnsmsg.build_query(raw, "A"))
        assert m.rcode_name == "NXDOMAIN", m.describe()
        d.stop()
        names = [e["qname"] for e in queries_logged(d, fmt)]
        assert "we\\034i\\032d\\010rd.prod.svc.cluster.local." in names, (fmt, names)
        if fmt == "logfmt":
            assert 'qname="we\\\\034i\\\\032d\\\\010rd.prod.svc.cluster.local."' \
                in d.stderr(), d.stderr()


# ------------------------------------------------------------- query log

def _check_every_field(env, fmt):
    d = env.start(log={"format": fmt, "queries": 1}, listen={"workers": 1})
    m, udp_port = udp_from_own_port(d, dnsmsg.build_query("DB.prod.svc.cluster.local", "AAAA"))
    assert m.rcode_name == "NOERROR", m.describe()
    m, tcp_port = tcp_from_own_port(d, dnsmsg.build_query("nope.prod.svc.cluster.local", "TXT"))
    assert m.rcode_name == "NXDOMAIN", m.describe()
    # External: the upstream is a dead port, so the resolver answers (SERVFAIL)
    # and logs the reply it sent.
    m, ext_port = udp_from_own_port(d, dnsmsg.build_query("www.site.example", "A"))
    assert m.rcode_name == "SERVFAIL", m.describe()
    ports = {str(udp_port), str(tcp_port), str(ext_port)}
    wait_until(lambda: len([e for e in queries_logged(d, fmt) if e["client_port"] in ports]) == 3,
               "three query lines")
    d.stop()
    by_port = {e["client_port"]: e for e in queries_logged(d, fmt)}
    want = {
        udp_port: dict(protocol="udp", qname="DB.prod.svc.cluster.local.", qtype="AAAA",
                       rcode="NOERROR", source="static"),
        tcp_port: dict(protocol="tcp", qname="nope.prod.svc.cluster.local.", qtype="TXT",
                       rcode="NXDOMAIN", source="static"),
        ext_port: dict(protocol="udp", qname="www.site.example.", qtype="A",
                       rcode="SERVFAIL", source="upstream"),
    }
    for port, fields in want.items():
        e = by_port.get(str(port))
        assert e, "no query line from port %d: %s" % (port, by_port)
        assert e["level"] == "info" and e["client"] == "127.0.0.1", e
        for k, v in fields.items():
            assert e[k] == v, (k, e)
        assert int(e["size"]) > 12, e
    assert set(by_port[str(udp_port)]) == {
        "ts", "level", "msg", "client", "client_port", "protocol", "qname", "qtype",
        "rcode", "source", "size"}, by_port[str(udp_port)]


def test_query_log_every_query_logfmt(env):
    _check_every_field(env, "logfmt")


def test_query_log_every_query_json(env):
    _check_every_field(env, "json")


def test_query_log_reply_size_is_what_was_sent(env):
    d = env.start(log={"queries": 1}, listen={"workers": 1})
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(3)
        s.sendto(dnsmsg.build_query("big.prod.svc.cluster.local", "A"), (d.host, d.port))
        size = len(s.recv(65535))
        port = s.getsockname()[1]
    wait_until(lambda: any(e["client_port"] == str(port) for e in queries_logged(d)),
               "the query line")
    e = [e for e in queries_logged(d) if e["client_port"] == str(port)][0]
    assert e["size"] == str(size), (e, size)


def test_query_log_samples_one_in_n_per_worker(env):
    # One worker, so one counter: of any 100 consecutive queries exactly 10
    # are the tenth (the readiness probes before them only shift the phase).
    d = env.start(log={"queries": 10}, listen={"workers": 1})
    name = "sampled.prod.svc.cluster.local"
    for i in range(100):
        assert d.udp(name, "A").rcode_name == "NXDOMAIN"
    d.stop()
    lines = [e for e in queries_logged(d) if e["qname"] == name + "."]
    assert len(lines) == 10, len(lines)


def test_query_log_off_logs_none(env):
    d = env.start(listen={"workers": 1})
    for i in range(50):
        d.udp(DB, "A")
    d.stop()
    assert not queries_logged(d), d.stderr()
    assert "logging queries" not in d.stderr()


def test_query_log_turned_on_by_a_reload(env):
    d = env.start(listen={"workers": 1})
    d.udp("before.prod.svc.cluster.local", "A")
    cfg = harness.deep_merge(d.config, {"log": {"queries": 1, "format": "json"}})
    d.reload(cfg)
    wait_until(lambda: "reloaded" in d.stderr(), "the reload")
    d.udp("after.prod.svc.cluster.local", "A")
    wait_until(lambda: '"qname":"after.prod.svc.cluster.local."' in d.stderr(),
               "the query line after the reload")
    assert "before.prod" not in d.stderr(), d.stderr()


def test_query_log_full_ring_drops_are_counted_exactly(env):
    # 16 records per ring, drained every 100 ms: a flood of 3,000 queries
    # overflows. Every query the daemon received is either logged or
    # counted in the drop report at exit.
    d = env.start(log={"queries": 1, "query_buffer": 16}, listen={"workers": 1})
    pkt = dnsmsg.build_query(DB, "A")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(3000):
            s.sendto(pkt, (d.host, d.port))
    time.sleep(0.3)
    rc, _ = d.stop()
    assert rc == 0, d.tail()
    events = log_events(d)
    logged = sum(1 for e in events if e["msg"] == "query")
    drops = [e for e in events if e["msg"].startswith("query log records dropped")]
    stopped = [e for e in events if e["msg"] == "stopped"]
    assert drops and stopped, d.tail()
    dropped = int(drops[-1]["dropped_total"])
    received = int(stopped[0]["queries"])
    assert dropped > 0 and drops[-1]["level"] == "warn", drops
    assert received >= 3000, stopped
    assert logged + dropped == received, (logged, dropped, received)


# ------------------------------------------------------------- secrets

def _kube_daemon(env, api, kubeconfig):
    return env.start(kubernetes={"enabled": True, "kubeconfig": kubeconfig,
                                 "node_name": "node-a"},
                     log={"level": "debug"})


def _assert_secret_free(d, secrets):
    log = d.stderr()
    assert "level=debug" in log and "kubernetes request" in log, \
        "not at debug level, or no request logged: " + d.tail()
    for s in secrets:
        assert s not in log, "secret %r in the log:\n%s" % (s[:24], log)
    assert "Authorization" not in log and "Bearer" not in log, log


def test_no_token_or_client_key_in_the_log_at_debug_level(env):
    tls = F.make_tls(os.path.join(env.tmp, "tls"))
    token = "tok-" + base64.b32encode(os.urandom(20)).decode().lower()
    with open(tls.client_key) as f:
        key_pem = f.read()
    key_b64 = base64.b64encode(key_pem.encode()).decode()
    key_lines = [l for l in key_pem.split("\n") if l and not l.startswith("-----")]
    with F.FakeAPI(tokens=[token], tls_cert=tls.server_cert, tls_key=tls.server_key) as api:
        api.apply(F.namespace("shop"), F.service("shop", "db", cluster_ips=["10.96.0.5"]))
        kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"), token=token, ca=tls.ca,
                            client_cert=tls.client_cert, client_key=tls.client_key, embed=True)
        api.fail_next(2, 401)   # the refusal is logged, with the Status body
        d = _kube_daemon(env, api, kc)
        wait_until(lambda: d.udp("db.shop.svc.cluster.local", "A").rcode_name == "NOERROR",
                   "the first sync", timeout=15)
        d.stop()
    assert "401" in d.stderr(), d.tail()
    _assert_secret_free(d, [token, key_b64] + key_lines)
test_no_token_or_client_key_in_the_log_at_debug_level.timeout = 40


def test_no_token_from_a_rotated_token_file_in_the_log(env):
    # The file first holds a token the API refuses (401, re-read, 401 again,
    # logged), then the right one.
    good = "good-" + base64.b32encode(os.urandom(20)).decode().lower()
    bad = "bad-" + base64.b32encode(os.urandom(20)).decode().lower()
    path = os.path.join(env.tmp, "token")
    with open(path, "w") as f:
        f.write(bad + "\n")
    tls = F.make_tls(os.path.join(env.tmp, "tls"))
    with F.FakeAPI(tokens=[good], tls_cert=tls.server_cert, tls_key=tls.server_key) as api:
        api.apply(F.namespace("shop"), F.service("shop", "db", cluster_ips=["10.96.0.5"]))
        kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"), token_file=path, ca=tls.ca)
        d = _kube_daemon(env, api, kc)
        wait_until(lambda: "401 Unauthorized" in d.stderr(), "the 401 in the log")
        with open(path + ".new", "w") as f:
            f.write(good + "\n")
        os.rename(path + ".new", path)
        wait_until(lambda: d.udp("db.shop.svc.cluster.local", "A").rcode_name == "NOERROR",
                   "the sync with the rotated token", timeout=20)
        d.stop()
    _assert_secret_free(d, [good, bad])
test_no_token_from_a_rotated_token_file_in_the_log.timeout = 40
