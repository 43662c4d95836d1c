"""Process lifecycle and listeners: SIGTERM/SIGINT, IPv6, several
addresses, the `make run` example config."""

import json
import os
import re
import shutil
import signal
import time
import urllib.request

import dnsmsg
import harness
from dnsmsg import build_query, frame, tcp_read_msg

# Light: a small share of a CPU (they mostly wait on the daemon), so they may
# run beside a test that runs alone (run.py -j).
QUIET = True

DB = "db.prod.svc.cluster.local"


def _stop_with(env, sig):
    d = env.start()
    c = dnsmsg.tcp_connect(d.host, d.port)
    try:
        c.sendall(frame(build_query(DB, "A")))
        assert tcp_read_msg(c) is not None
        # Connection stays open and idle while the signal arrives.
        rc, dt = d.stop(sig, timeout=2.0)
    finally:
        c.close()
    assert rc is not None, "still running 2s after %s (killed)" % sig.name
    assert rc == 0, "exit status %s after %s; stderr:\n%s" % (rc, sig.name,
                                                             d.tail(5))
    assert dt < 2.0, "took %.2fs to exit" % dt


def test_sigterm_exits_zero(env):
    _stop_with(env, signal.SIGTERM)


def test_sigint_exits_zero(env):
    _stop_with(env, signal.SIGINT)


def test_signal_right_after_start(env):
    # Signals are handled from the first answer on: 6 quick start/stop
    # cycles, alternating SIGTERM and SIGINT, all exit 0.
    for i in range(6):
        d = env.start(listen={"workers": 2})
        sig = signal.SIGTERM if i % 2 == 0 else signal.SIGINT
        rc, dt = d.stop(sig, timeout=2.0)
        assert rc == 0, "cycle %d: exit %s after %s (%.2fs); stderr:\n%s" % (
            i, rc, sig.name, dt, d.tail(5))


def test_sigterm_under_load(env):
    # Queries are in flight when the signal comes: still a clean, quick exit.
    d = env.start()
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for i in range(300):
            s.sendto(build_query(DB, "A", qid=i), (d.host, d.port))
        rc, dt = d.stop(signal.SIGTERM, timeout=2.0)
    finally:
        s.close()
    assert rc == 0, "exit %s" % rc


def test_logs_to_stderr(env):
    d = env.start()
    d.stop()
    assert d.stderr().strip(), "nothing logged on stderr"


def test_log_formats(env):
    # logfmt: every line has ts=, level= and msg=; json: every line is an
    # object with the same fields plus the event's own keys.
    d = env.start(log={"format": "logfmt"})
    d.stop()
    lines = [l for l in d.stderr().splitlines() if l.strip()]
    assert lines, "nothing logged"
    for line in lines:
        assert re.match(r"ts=\S+ level=(debug|info|warn|error) msg=", line), line
    assert any("msg=listening" in l and "address=127.0.0.1" in l for l in lines), lines

    d = env.start(log={"format": "json"})
    d.stop()
    lines = [l for l in d.stderr().splitlines() if l.strip()]
    events = [json.loads(l) for l in lines]
    assert all({"ts", "level", "msg"} <= set(e) for e in events), events
    listening = [e for e in events if e["msg"] == "listening"]
    assert listening and listening[0]["address"] == "127.0.0.1", events


def test_log_level_filters(env):
    d = env.start(log={"level": "error"})
    d.stop()
    assert "level=info" not in d.stderr(), d.stderr()


def test_ipv6_and_ipv4(env):
    if not harness.have_ipv6_loopback():
        raise harness.Skip("::1 is not configured on lo")
    d = env.start(addresses=("127.0.0.1", "::1"))
    for host in ("127.0.0.1", "::1"):
        m = dnsmsg.udp_query(host, d.port, DB, "AAAA")
        assert [r["rdata"] for r in m.answer] == ["fd00::5"], (host, m.describe())
        m = dnsmsg.tcp_query(host, d.port, DB, "A")
        assert [r["rdata"] for r in m.answer] == ["10.0.0.5"], (host, m.describe())
    r = harness.dig("::1", d.port, DB, "A")
    assert r.rdatas("A") == ["10.0.0.5"], r.text
    r = harness.kdig("::1", d.port, DB, "A", "+tcp")
    assert r.rdatas("A") == ["10.0.0.5"], r.text


def test_ipv6_only(env):
    if not harness.have_ipv6_loopback():
        raise harness.Skip("::1 is not configured on lo")
    # free on 127.0.0.1 too: a daemon of a test running beside this one
    # could otherwise hold that port there and answer the check below
    port = harness.free_port(("::1", "127.0.0.1"))
    cfg = env.config(port=port, addresses=("::1",))
    env.start(config=cfg)
    m = dnsmsg.udp_query("::1", port, DB, "A")
    assert m.answer, m.describe()
    # Nothing on 127.0.0.1 at that port.
    got = dnsmsg.udp_exchange("127.0.0.1", port, build_query(DB, "A"), timeout=0.3)
    assert got is None, "an answer on 127.0.0.1:%d" % port


def test_two_ipv4_addresses(env):
    # 127.0.0.1 and 127.0.0.2 are both loopback on Linux.
    port = harness.free_port(("127.0.0.1", "127.0.0.2"))
    cfg = env.config(port=port, addresses=("127.0.0.1", "127.0.0.2"))
    env.start(config=cfg)
    for host in ("127.0.0.1", "127.0.0.2"):
        m = dnsmsg.udp_query(host, port, DB, "A")
        assert m.answer, (host, m.describe())
        m = dnsmsg.tcp_query(host, port, DB, "A")
        assert m.answer, (host, m.describe())


def test_one_worker(env):
    d = env.start(listen={"workers": 1})
    assert d.udp(DB, "A").answer
    assert d.tcp(DB, "A").answer


def test_default_workers(env):
    # workers 0 = one per CPU.
    d = env.start(listen={"workers": 0})
    for _ in range(20):
        assert d.udp(DB, "A").answer


def test_make_run_example(env):
    src = os.path.join(harness.REPO, "deploy", "examples")
    main = os.path.join(src, "local.yaml")
    assert os.path.isfile(main), "deploy/examples/local.yaml is missing"
    dst = os.path.join(env.tmp, "examples")
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "local.yaml")) as f:
        text = f.read()
    port = harness.free_port()
    new, n = re.subn(r"(?m)^(\s+port:\s*)5353\b", r"\g<1>%d" % port, text)
    assert n == 1, "expected one `port: 5353` line in local.yaml, found %d" % n
    http_port = harness.free_port()
    new, n = re.subn(r"(?m)^(\s+listen:\s*)127\.0\.0\.1:9253\b",
                     r"\g<1>127.0.0.1:%d" % http_port, new)
    assert n == 2, "expected health and metrics on 127.0.0.1:9253 in local.yaml"
    # Not the machine's resolvers: tests send nothing off loopback.
    resolv = os.path.join(env.tmp, "resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver 127.0.0.1\n")
    new, n = re.subn(r"(?m)^(\s+resolv_conf:\s*)/etc/resolv.conf\b", r"\g<1>" + resolv, new)
    assert n == 1, "expected one `resolv_conf: /etc/resolv.conf` line in local.yaml"
    sock = os.path.join(env.tmp, "control.sock")  # runs may overlap: not the shared /tmp path
    new, n = re.subn(r"(?m)^(\s+socket:\s*)/tmp/localdns/control.sock\b", r"\g<1>" + sock, new)
    assert n == 1, "expected one `socket: /tmp/localdns/control.sock` line in local.yaml"
    path = os.path.join(dst, "local.yaml")
    with open(path, "w") as f:
        f.write(new)
    p = env.run(["--check-config", path])
    assert p.returncode == 0, "--check-config: %s" % p.stderr
    d = env.start_file(path, port)
    m = d.udp(DB, "A")
    assert m.rcode_name == "NOERROR" and m.rrs("answer", "A"), m.describe()
    assert m.aa, m.describe()
    r = d.dig(DB, "A")
    assert r.status == "NOERROR" and r.rdatas("A"), r.text
    p = env.run(["ctl", "--config", path, "lookup", DB])
    assert p.returncode == 0 and p.stdout.startswith("source: static\n"), p.stdout + p.stderr
    with urllib.request.urlopen("http://127.0.0.1:%d/ready" % http_port, timeout=5) as r:
        assert r.status == 200 and r.read() == b"ready\n"
    rc, _ = d.stop()
    assert rc == 0, "exit %s" % rc


def test_sighup_reloads_static_records(env):
    d = env.start()
    m = d.udp("fromfile.prod.svc.cluster.local", "A")
    assert [r["rdata"] for r in m.answer] == ["10.0.0.9"], m.describe()
    with open(os.path.join(d.dir, harness.STANDARD_FILE_NAME), "w") as f:
        f.write(harness.static_file_yaml([
            {"name": "fromfile.prod.svc.cluster.local", "a": ["10.0.0.99"]},
            {"name": "added.prod.svc.cluster.local", "a": ["10.0.0.100"]}]))
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        m = d.udp("added.prod.svc.cluster.local", "A")
        if m.answer:
            break
        time.sleep(0.05)
    assert [r["rdata"] for r in m.answer] == ["10.0.0.100"], \
        "new record not served 3s after SIGHUP: " + m.describe()
    m = d.udp("fromfile.prod.svc.cluster.local", "A")
    assert [r["rdata"] for r in m.answer] == ["10.0.0.99"], m.describe()
    assert d.alive()
    # A broken file on reload keeps the old data and the process.
    with open(os.path.join(d.dir, harness.STANDARD_FILE_NAME), "w") as f:
        f.write("- {name: x.prod.svc.cluster.local, a: [not-an-ip]}\n")
    d.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert d.alive(), "a bad config on SIGHUP killed the daemon"
    m = d.udp("added.prod.svc.cluster.local", "A")
    assert [r["rdata"] for r in m.answer] == ["10.0.0.100"], \
        "old data lost after a failed reload: " + m.describe()
