"""DNS-over-TLS upstreams (upstream.tls, upstream.tls_ca_file, servers
"IP[:PORT]#TLS-NAME").

localdns links a libunbound built with OpenSSL from Debian's own source
(deploy/libunbound/build.sh): Debian 12's libunbound8 is built with nettle
and cannot make TLS connections. Against a real Unbound serving TLS with a
CA made here (openssl): the right name answers, a wrong one gets SERVFAIL
(stale when held) and nothing in the clear, and queries share one TLS
connection (Unbound's own log of handshakes). The same daemon linked with
Debian's libunbound8 (build/tests/localdns-nettle) refuses upstream.tls at
start and at reload, saying why, and sends nothing meanwhile (a listener of
the test's own on the upstream's port).
"""
import os
import re
import shutil
import socket
import subprocess
import threading
import time

import dnsmsg
import harness

TLS_NAME = "dot.test"


def nettle_daemon(env):
    """The daemon linked with Debian's libunbound8 (the Makefile's NETTLE_DAEMON)."""
    return os.path.join(os.path.dirname(env.binary), "tests", "localdns-nettle")


def check_tls_config(env, binary):
    """--check-config of a TLS config by binary: (exit code, stderr)."""
    path = os.path.join(env.tmp, "probe.yaml")
    with open(path, "w") as f:
        f.write('upstream: {servers: ["127.0.0.1:853#dot.test"], tls: true}\n')
    p = subprocess.run([binary, "--check-config", path], capture_output=True, text=True,
                       timeout=10, stdin=subprocess.DEVNULL)
    return p.returncode, p.stderr


def test_the_daemon_links_its_own_libunbound_with_tls(env):
    libs = subprocess.run(["ldd", env.binary], capture_output=True, text=True,
                          timeout=10).stdout
    assert "libunbound" not in libs, "linked with a shared libunbound:\n" + libs
    assert "libssl" in libs, libs
    assert check_tls_config(env, env.binary) == (0, ""), check_tls_config(env, env.binary)


def check_config_error(env, yaml_text):
    path = os.path.join(env.tmp, "c%d.yaml" % len(os.listdir(env.tmp)))
    with open(path, "w") as f:
        f.write(yaml_text)
    p = env.run(["--check-config", path])
    assert p.returncode == 1, (yaml_text, p.stdout, p.stderr)
    return p.stderr.strip()


def test_tls_config_rules(env):
    err = check_config_error(env, 'upstream: {servers: ["10.0.0.1#dot.test"], recursive: true, '
                                  'tls: true}\n')
    assert ":1:" in err and "upstream.tls: DNS-over-TLS is for forwarding and cannot be used " \
        "with upstream.recursive" in err, err
    err = check_config_error(env, 'upstream: {servers: ["10.0.0.1"], tls: true}\n')
    assert 'upstream.servers[0]: "10.0.0.1:53" has no TLS name' in err, err
    err = check_config_error(env, 'upstream: {tls: true}\n')
    assert "upstream.tls needs upstream.servers written IP[:PORT]#TLS-NAME" in err, err
    err = check_config_error(env, 'upstream: {servers: ["10.0.0.1#dot.test"]}\n')
    assert "has a TLS name but upstream.tls is false" in err, err
    err = check_config_error(env, 'upstream: {forward_zones: {corp.internal: ["10.0.0.1"]},\n'
                                  '  servers: ["10.0.0.1#dot.test"], tls: true}\n')
    assert "upstream.forward_zones.corp.internal[0]" in err and "no TLS name" in err, err
    err = check_config_error(env, 'upstream: {servers: ["10.0.0.1#dot..test"], tls: true}\n')
    assert "the TLS name" in err, err
    err = check_config_error(env, 'upstream: {servers: ["10.0.0.1#dot.test"], tls: true,\n'
                                  '  tls_ca_file: /nonexistent/ca.pem}\n')
    assert "upstream.tls_ca_file: cannot read /nonexistent/ca.pem" in err, err


class Trap:
    """A TCP listener and a UDP socket on one port: counts whatever comes."""

    def __init__(self):
        self.port = harness.free_port()
        self.tcp = socket.socket()
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("127.0.0.1", self.port))
        self.tcp.listen(16)
        self.tcp.settimeout(0.1)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.udp.settimeout(0.1)
        self.connections = self.datagrams = 0
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            for s in (self.tcp, self.udp):
                try:
                    if s is self.tcp:
                        c, _ = s.accept()
                        c.close()
                        self.connections += 1
                    else:
                        s.recv(4096)
                        self.datagrams += 1
                except (socket.timeout, OSError):
                    pass

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.tcp.close()
        self.udp.close()


def start_nettle(env, cfg, wait=True):
    files = {harness.STANDARD_FILE_NAME: harness.static_file_yaml(harness.STANDARD_FILE_RECORDS)}
    d = harness.Daemon(nettle_daemon(env), cfg, files=files, wait=False)
    env._daemons.append(d)
    if wait:
        d.wait_ready()
    return d


def test_tls_without_tls_in_libunbound_is_refused_and_sends_nothing(env):
    code, err = check_tls_config(env, nettle_daemon(env))
    assert code == 1 and "upstream.tls: this libunbound (1." in err and \
        "built without TLS support" in err, (code, err)
    trap = Trap()
    try:
        cfg = env.config(upstream={"servers": ["127.0.0.1:%d#%s" % (trap.port, TLS_NAME)],
                                   "tls": True})
        d = start_nettle(env, cfg, wait=False)
        deadline = time.monotonic() + 5
        while d.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not d.alive(), "started with upstream.tls on a libunbound without TLS"
        assert "upstream.tls: this libunbound" in d.stderr() and \
            "built without TLS support" in d.stderr(), d.tail()
        # a reload that turns it on fails and the running config stays
        d = start_nettle(env, env.config(upstream={"servers": ["127.0.0.1:%d" % trap.port],
                                                   "timeout": "1s"}))
        cfg = harness.deep_merge(d.config, {"upstream": {
            "servers": ["127.0.0.1:%d#%s" % (trap.port, TLS_NAME)], "tls": True}})
        d.reload(cfg)
        deadline = time.monotonic() + 5
        while "reload failed" not in d.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "reload failed" in d.stderr() and "built without TLS support" in d.stderr(), \
            d.tail()
        assert d.udp("db.prod.svc.cluster.local", "A").rcode_name == "NOERROR"
        before = trap.datagrams + trap.connections
        time.sleep(0.3)
        # nothing went to the TLS server's port before the failed reload either: only the
        # running, plain config's own queries (none asked) could have
        assert trap.datagrams + trap.connections == before == 0, (
            trap.datagrams, trap.connections)
    finally:
        trap.close()


# ------------------------------------------------------ with a libunbound that has TLS

class TlsUnbound:
    """Unbound serving one static zone over TLS only, on 127.0.0.1:port."""

    def __init__(self, tmp):
        self.port = harness.free_port()
        conf = harness.write_unbound_tls_conf(tmp, self.port, [
            "log-queries: yes",
            'local-zone: "tls.example." static',
            'local-zone: "marks.example." static',
            'local-data: "www.tls.example. 300 IN A 192.0.2.53"'], verbosity=4)
        self.proc = subprocess.Popen([shutil.which("unbound") or "/usr/sbin/unbound", "-d",
                                      "-c", conf], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        harness.track_process(self.proc)
        self.lines = []
        self.marks = 0
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 5
        while not any("start of service" in x for x in self.lines):
            assert time.monotonic() < deadline and self.proc.poll() is None, self.lines
            time.sleep(0.05)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def logged_so_far(self):
        """Waits until everything Unbound logged before now has reached self.lines.
        The reader thread lags Unbound's log, and an answer can reach the test before
        the line for its question does; so ask a marker over UDP (neither a TLS read
        nor a handshake) and wait for its line: Unbound logs in order."""
        self.marks += 1
        mark = "mark%d.marks.example." % self.marks
        dnsmsg.udp_query("127.0.0.1", self.port, mark, "A", timeout=2)
        harness.wait_until(lambda: any(mark in x for x in self.lines), "log line for " + mark)

    def queries(self):
        """The questions it logged (log-queries: "info: 127.0.0.1 www.tls.example. A IN"),
        up to now (logged_so_far)."""
        self.logged_so_far()
        return [x for x in self.lines if re.search(r"tls\.example\. \w+ IN$", x.strip())]

    def handshakes(self):
        """TLS handshakes it completed (verbosity 4: "SSL connection ip4 127.0.0.1 port N")."""
        self.logged_so_far()
        return sum(1 for x in self.lines if re.search(r"debug: SSL connection ip4 127\.0\.0\.1 ", x))

    def tls_reads(self):
        """Queries it read over TLS (verbosity 4: "Reading ssl tcp query of length N")."""
        self.logged_so_far()
        return sum(1 for x in self.lines if "debug: Reading ssl tcp query" in x)

    def close(self):
        self.proc.terminate()
        self.proc.wait(5)
        harness.untrack_process(self.proc)


def test_tls_upstream_against_unbound(env):
    ca = harness.make_tls_ca(env.tmp, TLS_NAME)
    up = TlsUnbound(env.tmp)
    try:
        good = env.start(upstream={"servers": ["127.0.0.1:%d#%s" % (up.port, TLS_NAME)],
                                   "tls": True, "tls_ca_file": ca, "timeout": "2s"})
        m = good.udp("www.tls.example", "A")
        assert m.rcode_name == "NOERROR" and m.answer, m.describe()
        for i in range(10):  # new names, one after the other: one connection carries them
            assert good.udp("n%d.tls.example" % i, "A").rcode_name == "NXDOMAIN"
        assert len(up.queries()) == 11, up.queries()
        assert up.tls_reads() == 11, "queries in the clear: %d of 11 over TLS" % up.tls_reads()
        assert up.handshakes() == 1, "connections not reused: %d handshakes" % up.handshakes()
        # A wrong name (a reload switches to it): the certificate does not match. The
        # cached name is served stale (the reload made it stale-only), a new one gets
        # SERVFAIL, and Unbound sees no query, TLS or clear.
        asked = len(up.queries())
        cfg = harness.deep_merge(good.config, {"upstream": {
            "servers": ["127.0.0.1:%d#wrong.example" % up.port], "timeout": "1s"}})
        good.reload(cfg)
        deadline = time.monotonic() + 5
        while "reloaded" not in good.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        m = good.udp("www.tls.example", "A", timeout=3)
        assert m.rcode_name == "NOERROR" and m.answer and m.answer[0]["ttl"] == 30, m.describe()
        m = good.udp("new.tls.example", "A", timeout=3)
        assert m.rcode_name == "SERVFAIL", m.describe()
        assert len(up.queries()) == asked, up.queries()[asked:]
        assert up.tls_reads() == 11 and up.handshakes() == 1, (up.tls_reads(), up.handshakes())
    finally:
        up.close()
test_tls_upstream_against_unbound.timeout = 40
