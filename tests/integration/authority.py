"""authority: real authoritative DNS servers for the upstream tests (NSD).

  Authority           one NSD serving some zones on ADDRESS:PORT (127.0.0.1
                      and a free port by default, or an address inside a
                      network namespace), with a query counter.
  Hierarchy           a network namespace of its own holding a small DNS
                      tree (root, example., leaf.example., ...) on port 53, for
                      resolvers that recurse from root hints.
  sign_secure_zone()  signs zones/secure.example.zone with fresh keys: good is
                      secure, bad is bogus under the returned trust anchor.
  zone_path(origin)   the committed zone file of an origin in zones/.

NSD runs in the foreground (`nsd -d`) as root with everything it writes
(config, log, control socket, xfrd scratch) in a temp dir from
harness.mkdtemp(), and nothing read from /etc/nsd: a system NSD, running or
not, does not matter. Every process and namespace is registered with the
harness, so harness.cleanup_all() removes them on every way out. Traffic
goes to loopback or to addresses inside namespaces created here only.
"""

import collections
import os
import re
import shutil
import signal
import subprocess
import time

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
ZONES = os.path.join(HERE, "zones")


class AuthorityError(AssertionError):
    pass


def zone_path(origin):
    """The committed zone file for origin ("site.example." or "." ...)."""
    name = origin.rstrip(".").lower() or "root"
    path = os.path.join(ZONES, name + ".zone")
    if not os.path.isfile(path):
        raise AuthorityError("no zone file %s for %r" % (path, origin))
    return path


def _fqdn(origin):
    return origin if origin.endswith(".") else origin + "."


def _group_alive(pgid):
    """Whether a process of group pgid still runs (zombies excluded)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()   # state ppid pgrp ...
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


class Authority:
    """One NSD process serving `zones` on address:port.

    Owns a temp dir (nsd.conf, copies of zones given as text, nsd.log, the
    nsd-control socket) and the NSD process group. NSD forks: the process
    started is xfrd, its child is the main process holding the sockets,
    whose child serves queries; stop() waits until the whole group is gone,
    so a restart() can bind the same address and port again.

        with Authority({"site.example.": zone_path("site.example.")}) as up:
            d = env.start(upstream={"servers": [up.addr]})
            ...                      # up.queries(), up.restart(), up.stop()

    Without `with`, call close() (or stop()) in a finally; whatever is left
    is removed by harness.cleanup_all() at the end of the run.
    """

    def __init__(self, zones, address="127.0.0.1", port=None, netns=None, rrl=False):
        """zones: {origin: zone file text (has a newline) or path}.
        port: a free one by default (53 inside a netns, where everything is
        ours). netns: run NSD in that network namespace; address must be
        configured there. rrl: keep NSD's response rate limiting (200
        answers a second per /24, slip 2) instead of turning it off."""
        if not zones:
            raise ValueError("an Authority needs at least one zone")
        self.host = address
        self.netns = netns
        self.rrl = rrl
        if port is None:
            port = 53 if netns else harness.free_port((address,))
        self.port = port
        self.dir = harness.mkdtemp(prefix="localdns-nsd-")
        self.conf = os.path.join(self.dir, "nsd.conf")
        self.log_path = os.path.join(self.dir, "nsd.log")
        self.out_path = os.path.join(self.dir, "nsd.out")
        self.ctl_path = os.path.join(self.dir, "nsd.ctl")
        self.origins = []
        zone_clauses = []
        for i, (origin, data) in enumerate(zones.items()):
            origin = _fqdn(origin)
            if "\n" in data:
                path = os.path.join(self.dir, "zone%d.txt" % i)
                with open(path, "w") as f:
                    f.write(data)
            else:
                path = os.path.abspath(data)
                if not os.path.isfile(path):
                    raise AuthorityError("zone file %s (for %s) not found"
                                         % (path, origin))
            self.origins.append(origin)
            zone_clauses.append('zone:\n    name: "%s"\n    zonefile: "%s"\n'
                                % (origin, path))
        with open(self.conf, "w") as f:
            f.write(self._server_clause() + "".join(zone_clauses))
        self.proc = None
        self._base = 0

    def _server_clause(self):
        d = self.dir
        return "\n".join([
            "server:",
            '    ip-address: %s@%d' % (self.host, self.port),
            "    server-count: 1",
            '    username: ""',
            '    chroot: ""',
            '    zonesdir: "%s"' % d,
            '    database: ""',
            '    zonelistfile: "%s/zone.list"' % d,
            '    xfrdfile: ""',
            '    xfrdir: "%s"' % d,
            '    pidfile: ""',
            '    logfile: "%s"' % self.log_path,
            '    cookie-secret-file: "%s/cookiesecrets.txt"' % d,
            "    verbosity: 0",   # errors only: no line per nsd-control
            # NSD's response rate limiting (on by default) would drop or
            # truncate a burst of similar answers to one source: a flood
            # test would measure NSD's policy instead of localdns. rrl=True
            # keeps NSD's defaults, for the tests about an upstream that
            # pushes back.
            ] + ([] if self.rrl else [
            "    rrl-ratelimit: 0",
            "    rrl-whitelist-ratelimit: 0",
            ]) + [
            "remote-control:",
            "    control-enable: yes",
            '    control-interface: "%s"' % self.ctl_path,
            ""])

    # -- addresses
    @property
    def addr(self):
        """"ip:port" ("[ip6]:port") for localdns's upstream.servers."""
        if ":" in self.host:
            return "[%s]:%d" % (self.host, self.port)
        return "%s:%d" % (self.host, self.port)

    def __repr__(self):
        return "Authority(%s %s%s)" % (self.addr, " ".join(self.origins),
                                       " netns " + self.netns
                                       if self.netns else "")

    # -- lifecycle
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self, wait=True, timeout=5.0):
        """Start NSD; with wait, return once it answers SOA for every zone
        (see wait_ready). Returns self."""
        if self.alive():
            raise AuthorityError("%r already running" % self)
        for tool in ("nsd", "nsd-control"):
            if shutil.which(tool) is None:
                raise AuthorityError("%s not installed (apt-get install nsd)"
                                     % tool)
        # As for a daemon (harness.Daemon.PORT_RACE_RETRIES): a port taken
        # between free_port() and NSD's bind is tried again.
        for retries in range(harness.Daemon.PORT_RACE_RETRIES, -1, -1):
            log_start = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
            self._spawn()
            if not wait:
                break
            try:
                self.wait_ready(timeout)
                break
            except AuthorityError:
                self.stop()
                if not retries or b"Address already in use" not in self._log_since(log_start):
                    raise
                time.sleep(0.2)
            except BaseException:
                self.stop()
                raise
        return self

    def _spawn(self):
        if os.path.exists(self.ctl_path):   # left by a killed NSD
            os.unlink(self.ctl_path)
        with open(self.out_path, "ab") as out:
            self.proc = harness.track_process(subprocess.Popen(
                harness.netns_argv(self.netns, ["nsd", "-d", "-c", self.conf]),
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True))

    def _log_since(self, offset):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return b""

    def __enter__(self):
        return self if self.alive() else self.start()

    def __exit__(self, *exc):
        self.close()

    def wait_ready(self, timeout=5.0):
        """Wait until this NSD has bound its address (its control socket
        appears: NSD creates it only after binding the DNS sockets, so
        another server on the same port cannot pass for it) and answers
        every zone's SOA authoritatively. Then take the query counter's
        base, so queries() starts from 0."""
        deadline = time.monotonic() + timeout

        def check_alive():
            if not self.alive():
                raise AuthorityError(
                    "%r exited with status %s before answering;\n%s"
                    % (self, self.proc.returncode, self.tail()))

        while not os.path.exists(self.ctl_path):
            check_alive()
            if time.monotonic() > deadline:
                raise AuthorityError("%r did not open its control socket "
                                     "within %.1fs;\n%s"
                                     % (self, timeout, self.tail()))
            time.sleep(0.01)
        for origin in self.origins:
            while True:
                check_alive()
                r = self.dig(origin, "SOA", "+norec", timeout=1)
                if (r.status == "NOERROR" and "aa" in r.flags
                        and r.rrs("answer", "SOA")):
                    break
                if time.monotonic() > deadline:
                    raise AuthorityError(
                        "%r did not answer SOA %s within %.1fs (last: %s);\n%s"
                        % (self, origin, timeout, r.status, self.tail()))
                time.sleep(0.02)
        self._base = self._raw_queries()

    def stop(self, timeout=3.0):
        """SIGTERM the process group and wait until all of it is gone
        (SIGKILL after timeout). Safe to call when not running."""
        if self.proc is None:
            return
        pgid = self.proc.pid   # start_new_session: the group id is its pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while _group_alive(pgid) and time.monotonic() < deadline:
            self.proc.poll()   # reap ours as soon as it exits
            time.sleep(0.02)
        if _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            pass
        harness.untrack_process(self.proc)

    def restart(self, timeout=5.0):
        """stop() then start() on the same address and port; the counter
        starts again from 0."""
        self.stop()
        return self.start(timeout=timeout)

    def close(self):
        """stop() and remove the temp dir."""
        self.stop()
        harness.rmtemp(self.dir)

    # -- observation
    def _read(self, path):
        try:
            with open(path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def tail(self, n=15):
        """The last lines of NSD's log and of its stdout/stderr."""
        parts = []
        for label, path in (("nsd.log", self.log_path),
                            ("stdout/stderr", self.out_path)):
            text = self._read(path).rstrip("\n")
            if text:
                parts.append("--- %s:\n%s" % (
                    label, "\n".join(text.split("\n")[-n:])))
        return "\n".join(parts) or "(NSD wrote nothing)"

    def _raw_queries(self):
        try:
            p = subprocess.run(["nsd-control", "-c", self.conf,
                                "stats_noreset"], capture_output=True,
                               text=True, timeout=5)
        except subprocess.TimeoutExpired:
            raise AuthorityError("nsd-control stats_noreset timed out (%r)"
                                 % self)
        m = re.search(r"^num\.queries=(\d+)$", p.stdout, re.M)
        if p.returncode != 0 or not m:
            raise AuthorityError("nsd-control stats_noreset failed (%r): %s"
                                 % (self, (p.stdout + p.stderr).strip()))
        return int(m.group(1))

    def queries(self):
        """Queries NSD received (UDP and TCP) since it became ready; the
        readiness probes are not counted."""
        return self._raw_queries() - self._base

    def dig(self, name, qt="A", *opts, **kw):
        """harness.dig at this server (inside its namespace if it has one)."""
        kw.setdefault("netns", self.netns)
        return harness.dig(self.host, self.port, name, qt, *opts, **kw)


# ------------------------------------------------------------------ DNSSEC

SECURE_ORIGIN = "secure.example."
BOGUS_A = "192.0.2.66"   # bad.secure.example's address after signing

SignedZone = collections.namedtuple("SignedZone", "path ds anchor_file")
SignedZone.__doc__ = """path: the signed zone file. ds: the KSK's DS record
as one line ("secure.example. IN DS ..."), for unbound's trust-anchor: or
libunbound's ub_ctx_add_ta(). anchor_file: a file holding that line
(trust-anchor-file: / ub_ctx_add_ta_file())."""


def _run(argv, cwd):
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                       timeout=20, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise AuthorityError("%s failed (%d): %s" % (
            " ".join(argv), p.returncode, (p.stdout + p.stderr).strip()))
    return p.stdout.strip()


def sign_secure_zone(directory=None):
    """Sign zones/secure.example.zone (ECDSA P-256, NSEC) with a fresh KSK and
    ZSK, valid from a day ago for a year, then change bad.secure.example's A
    rdata to BOGUS_A so its RRSIG no longer verifies. Keys and output go to
    directory (a new harness temp dir by default). Returns a SignedZone."""
    d = directory or harness.mkdtemp(prefix="localdns-dnssec-")
    ksk = _run(["ldns-keygen", "-a", "ECDSAP256SHA256", "-k",
                SECURE_ORIGIN], d)
    zsk = _run(["ldns-keygen", "-a", "ECDSAP256SHA256", SECURE_ORIGIN], d)
    now = int(time.time())
    signed = os.path.join(d, "secure.example.signed")
    _run(["ldns-signzone", "-i", str(now - 86400), "-e",
          str(now + 365 * 86400), "-f", signed, zone_path(SECURE_ORIGIN),
          ksk, zsk], d)
    with open(signed) as f:
        text = f.read()
    text, n = re.subn(r"^(bad\.secure\.example\.\s+\d+\s+IN\s+A\s+)192\.0\.2\.11$",
                      r"\g<1>" + BOGUS_A, text, flags=re.M)
    if n != 1:
        raise AuthorityError("bad.secure.example. A not found in %s" % signed)
    with open(signed, "w") as f:
        f.write(text)
    with open(os.path.join(d, ksk + ".ds")) as f:
        ds = " ".join(f.read().split())
    anchor = os.path.join(d, "secure.example.anchor")
    with open(anchor, "w") as f:
        f.write(ds + "\n")
    return SignedZone(signed, ds, anchor)


# --------------------------------------------------------------- hierarchy


class Hierarchy:
    """A network namespace with a small DNS tree, each zone served by its
    own Authority on port 53 of an address on the namespace's lo:

        10.53.0.1  .                  NS a.root-servers.example.; delegates example.
        10.53.0.2  example.           delegates leaf, site, secure
        10.53.0.3  leaf.example.      www.leaf.example. A 192.0.2.77
        10.53.0.4  site.example.      zones/site.example.zone
        10.53.0.5  sub.site.example.  delegated from site.example.
        10.53.0.6  corp.internal.     not delegated from the root: only a
                                      forward zone reaches it
        10.53.0.7  secure.example.    signed at start (sign_secure_zone);
                                      no DS in example.: use .secure.ds as anchor

    Owns the namespace (ldns-rec-<pid>-<n>), the Authorities and a temp dir
    with the root hints file (.hints_path). A resolver under test runs in
    the namespace too (harness.Daemon/dig/kdig netns=h.netns), listening on
    127.0.0.1 there. Use as `with Hierarchy() as h:` or start()/cleanup();
    both are registered so harness.cleanup_all() removes whatever is left.
    """

    ZONES = (
        (".", "10.53.0.1"),
        ("example.", "10.53.0.2"),
        ("leaf.example.", "10.53.0.3"),
        ("site.example.", "10.53.0.4"),
        ("sub.site.example.", "10.53.0.5"),
        ("corp.internal.", "10.53.0.6"),
        (SECURE_ORIGIN, "10.53.0.7"),
    )
    ROOT_NS = "a.root-servers.example."

    def __init__(self):
        self.netns = harness.netns_name("ldns-rec")
        self.dir = None
        self.hints_path = None
        self.secure = None      # SignedZone
        self.servers = {}       # origin -> Authority
        self._created = False

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()

    def _ip(self, *args):
        p = subprocess.run(["ip", "-n", self.netns] + list(args),
                           capture_output=True, text=True, timeout=10)
        if p.returncode != 0:
            raise AuthorityError("ip -n %s %s: %s" % (
                self.netns, " ".join(args), p.stderr.strip()))

    def start(self, timeout=5.0):
        """Create the namespace and addresses, sign secure.example., start every
        server and wait (bounded) until all answer. Returns self; on failure
        everything is cleaned up before the error propagates."""
        try:
            return self._start(timeout)
        except BaseException:
            self.cleanup()
            raise

    def _start(self, timeout):
        self.dir = harness.mkdtemp(prefix="localdns-hier-")
        p = subprocess.run(["ip", "netns", "add", self.netns],
                           capture_output=True, text=True, timeout=10)
        if p.returncode != 0:
            why = p.stderr.strip()
            if "not permitted" in why or "denied" in why:
                raise harness.Skip("cannot create a network namespace: "
                                   + why)
            raise AuthorityError("ip netns add %s: %s" % (self.netns, why))
        harness.track_netns(self.netns)
        self._created = True
        self._ip("link", "set", "lo", "up")
        for _, address in self.ZONES:
            self._ip("addr", "add", address + "/32", "dev", "lo")
        self.secure = sign_secure_zone(self.dir)
        for origin, address in self.ZONES:
            path = (self.secure.path if origin == SECURE_ORIGIN
                    else zone_path(origin))
            self.servers[origin] = Authority({origin: path}, address,
                                             netns=self.netns).start(wait=False)
        deadline = time.monotonic() + timeout
        for a in self.servers.values():
            a.wait_ready(max(0.5, deadline - time.monotonic()))
        self.hints_path = os.path.join(self.dir, "root.hints")
        with open(self.hints_path, "w") as f:
            f.write(".                     3600000 IN NS %s\n"
                    "%-21s 3600000 IN A  %s\n"
                    % (self.ROOT_NS, self.ROOT_NS, self.ZONES[0][1]))
        return self

    def stop(self):
        """Stop every server (the namespace stays)."""
        for a in self.servers.values():
            a.stop()

    def cleanup(self):
        """Stop every server, delete the namespace and the temp dirs."""
        for a in self.servers.values():
            a.close()
        self.servers = {}
        if self._created:
            harness.delete_netns(self.netns)
            self._created = False
        if self.dir:
            harness.rmtemp(self.dir)
            self.dir = None

    def dig(self, server, name, qt="A", *opts, port=53, **kw):
        """harness.dig from inside the namespace to server:port."""
        return harness.dig(server, port, name, qt, *opts, netns=self.netns,
                           **kw)
