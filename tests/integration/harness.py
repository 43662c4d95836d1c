"""harness: run localdns for integration tests (stdlib only).

A test is a plain function `def test_xxx(env)`. `env` (an Env) gives it:
  env.server          a shared daemon with the standard records (STANDARD)
  env.start(...)      a daemon of its own with config overrides
  env.run(args)       run the binary with arguments (CLI tests)
  env.tmp             a temporary directory removed after the test
Daemons listen on 127.0.0.1 (and ::1 when asked) on a free port, log to a
file in their temp dir, and are stopped (SIGTERM, then SIGKILL) after the
test, or at exit whatever happens. Only loopback addresses are ever used,
and addresses inside network namespaces the tests create (netns=...).

dig()/kdig() run the real tools with bounded +time/+tries and parse their
text output into a ToolReply; dnsmsg has the raw-socket side.
"""

import copy
import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import dnsmsg

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

_live_procs = set()   # every daemon process still possibly running
_live_dirs = set()    # every temp dir still to remove
_live_netns = set()   # every network namespace still to delete


class Skip(Exception):
    """Raised by a test that cannot run here (e.g. no ::1)."""


def cleanup_all():
    for p in list(_live_procs):
        _kill(p)
    for name in list(_live_netns):    # after the processes living in them
        delete_netns(name)
    for d in list(_live_dirs):
        shutil.rmtree(d, ignore_errors=True)
        _live_dirs.discard(d)


def track_process(p):
    """Have cleanup_all() stop Popen p (SIGTERM, then SIGKILL) if it still
    runs. Returns p."""
    _live_procs.add(p)
    return p


def untrack_process(p):
    """p was stopped by its owner: cleanup_all() need not see it."""
    _live_procs.discard(p)


def netns_name(prefix):
    """A network namespace name no other run uses: prefix-PID-RANDOM. A run
    killed before its cleanup leaves its namespaces behind, and a later run
    may get the same PID."""
    return "%s-%d-%s" % (prefix, os.getpid(), os.urandom(3).hex())


def track_netns(name):
    """Have cleanup_all() delete network namespace `name` (after stopping
    every tracked process)."""
    _live_netns.add(name)


def delete_netns(name):
    """Delete network namespace `name` (no error if it is gone)."""
    subprocess.run(["ip", "netns", "delete", name], capture_output=True,
                   timeout=10)
    _live_netns.discard(name)


def netns_argv(netns, argv):
    """argv run inside network namespace netns (as is when netns is None)."""
    return (["ip", "netns", "exec", netns] if netns else []) + list(argv)


def run_in_netns(netns, fn):
    """fn() on a thread of its own that enters network namespace netns
    first (only that thread does: a socket fn binds is bound there, the
    caller stays where it is); its exception is raised here."""
    failure = []

    def inside():
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            with open("/var/run/netns/" + netns) as f:
                if libc.setns(f.fileno(), 0x40000000) != 0:  # CLONE_NEWNET
                    raise OSError(ctypes.get_errno(), "setns")
            fn()
        except Exception as e:  # reported by the caller's thread
            failure.append(e)
    t = threading.Thread(target=inside)
    t.start()
    t.join(10)
    if failure:
        raise failure[0]


def _kill(p):
    try:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(2)
    except Exception:
        pass
    _live_procs.discard(p)


def mkdtemp(prefix="localdns-it-"):
    d = tempfile.mkdtemp(prefix=prefix)
    _live_dirs.add(d)
    return d


def rmtemp(d):
    shutil.rmtree(d, ignore_errors=True)
    _live_dirs.discard(d)


# ------------------------------------------------------------------ YAML out

def _scalar(v):
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v))  # a JSON string is a YAML double-quoted scalar


def to_yaml(obj, indent=0):
    """A small YAML emitter: block mappings, block sequences of mappings,
    flow sequences of scalars. Enough for our configs."""
    pad = "  " * indent
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, dict):
                if v:
                    lines.append("%s%s:" % (pad, k))
                    lines.append(to_yaml(v, indent + 1))
                else:
                    lines.append("%s%s: {}" % (pad, k))
            elif isinstance(v, list):
                if v and any(isinstance(x, (dict, list)) for x in v):
                    lines.append("%s%s:" % (pad, k))
                    lines.append(to_yaml(v, indent + 1))
                else:
                    lines.append("%s%s: [%s]" % (pad, k, ", ".join(
                        _scalar(x) for x in v)))
            else:
                lines.append("%s%s: %s" % (pad, k, _scalar(v)))
    elif isinstance(obj, list):
        for item in obj:
            if isinstance(item, dict):
                sub = to_yaml(item, indent + 1).split("\n")
                lines.append("%s- %s" % (pad, sub[0].lstrip()))
                lines.extend(sub[1:])
            else:
                lines.append("%s- %s" % (pad, _scalar(item)))
    return "\n".join(l for l in lines if l != "")


def deep_merge(base, over):
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def wait_until(pred, what, timeout=5.0, step=0.01):
    """Poll pred until it holds; returns the moment it did (time.monotonic),
    so a caller can tell how long a change took to show. Fails naming what
    did not come within timeout seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("no %s within %.1fs" % (what, timeout))
        time.sleep(step)
    return time.monotonic()


# ------------------------------------------------------------- test data

BIG_A = ["10.1.0.%d" % i for i in range(1, 41)]                  # 40 A
BIG_TXT = [("%02d" % i) + "x" * 198 for i in range(30)]          # 30 x 200 B

STANDARD_RECORDS = [
    {"name": "db.prod.svc.cluster.local", "a": ["10.0.0.5"],
     "aaaa": ["fd00::5"]},
    {"name": "web.prod.svc.cluster.local", "ttl": "30s", "a": ["10.0.0.6"]},
    {"name": "alias.prod.svc.cluster.local",
     "cname": "db.prod.svc.cluster.local"},
    {"name": "alias2.prod.svc.cluster.local",
     "cname": "alias.prod.svc.cluster.local"},
    {"name": "ext.prod.svc.cluster.local", "cname": "www.example.com"},
    {"name": "_mysql._tcp.db.prod.svc.cluster.local",
     "srv": [{"priority": 0, "weight": 100, "port": 3306,
              "target": "db.prod.svc.cluster.local"}]},
    {"name": "_http._tcp.web.prod.svc.cluster.local",
     "srv": [{"priority": 10, "weight": 60, "port": 8080,
              "target": "web.prod.svc.cluster.local"},
             {"priority": 20, "weight": 40, "port": 8081,
              "target": "db.prod.svc.cluster.local"}]},
    {"name": "txt.prod.svc.cluster.local",
     "txt": ["hello world", "v=spf1 -all"]},
    {"name": "5.0.0.10.in-addr.arpa", "ptr": ["db.prod.svc.cluster.local"]},
    {"name": "legacy.corp.internal", "cname": "db.prod.svc.cluster.local"},
    {"name": "host.corp.internal", "ttl": "60s", "a": ["192.0.2.10"]},
    {"name": "big.prod.svc.cluster.local", "a": BIG_A},
    {"name": "bigtxt.prod.svc.cluster.local", "txt": BIG_TXT},
]

# A record loaded from static.files (relative path next to the config).
STANDARD_FILE_NAME = "extra-records.yaml"
STANDARD_FILE_RECORDS = [
    {"name": "fromfile.prod.svc.cluster.local", "a": ["10.0.0.9"]},
]


DEAD_PORT = 9  # the discard port: nothing answers DNS there


def base_config(port, addresses=("127.0.0.1",)):
    return {
        "listen": {"addresses": list(addresses), "port": port, "workers": 2,
                   "tcp_max_connections": 64, "tcp_idle_timeout": "10s",
                   "udp_max_payload": 1232},
        "interface": {"manage": False},
        "nftables": {"enabled": False},
        "kubernetes": {"enabled": False},
        "health": {"listen": ""},
        "metrics": {"listen": ""},
        "control": {"socket": ""},
        "cluster": {"domain": "cluster.local", "ttl": "5s"},
        "chaos": {"enabled": False, "version": "x", "id": "y"},
        "static": {"records": copy.deepcopy(STANDARD_RECORDS),
                   "files": [STANDARD_FILE_NAME]},
        # Never the machine's resolv.conf: external names go to a loopback
        # port nothing listens on (fast SERVFAIL) unless a test says otherwise.
        "upstream": {"servers": ["127.0.0.1:%d" % DEAD_PORT], "timeout": "1s"},
    }


def static_file_yaml(records):
    """A static.files file: a YAML sequence of records at the top level."""
    return to_yaml(records) + "\n"


# ------------------------------------------------------------- free ports

def have_ipv6_loopback():
    try:
        out = subprocess.run(["ip", "-6", "addr", "show", "lo"],
                             capture_output=True, text=True, timeout=5).stdout
    except Exception:
        return False
    if "::1" not in out:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def _ephemeral_ports():
    """The kernel's range for sockets bound to port 0 and unbound sockets
    that connect (net.ipv4.ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


_port_rng = random.Random()   # seeded from os.urandom: each process its own sequence


def _candidate_ports():
    """Ports to try for a server: at random below the kernel's ephemeral
    range when there is room, else whatever bind(0) gives. Between
    free_port() and the daemon's bind the port is free for anyone to take;
    below that range no client socket (dig's, a test's, another test run's)
    is ever given it by the kernel, and a random pick makes two runs at once
    unlikely to want the same one."""
    low, _ = _ephemeral_ports()
    for _ in range(200):
        yield _port_rng.randrange(10000, low) if low > 11000 else 0


def free_port(hosts=("127.0.0.1",)):
    """A port free for both UDP and TCP on every host (bind, then check)."""
    for candidate in _candidate_ports():
        socks = []
        try:
            fam = dnsmsg.family_of(hosts[0])
            t = socket.socket(fam, socket.SOCK_STREAM)
            socks.append(t)
            t.bind((hosts[0], candidate))
            port = t.getsockname()[1]
            for i, h in enumerate(hosts):
                fam = dnsmsg.family_of(h)
                for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                    if i == 0 and kind == socket.SOCK_STREAM:
                        continue
                    s = socket.socket(fam, kind)
                    socks.append(s)
                    if fam == socket.AF_INET6:
                        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    s.bind((h, port))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port found")


# ------------------------------------------------------------ bench tools

# What dnsgen's key=value line counts (tests/bench/dnsgen.c).
DNSGEN_COUNTS = ("sent", "received", "lost", "noerror", "nxdomain", "servfail",
                 "rcode_other", "truncated", "no_answer", "expect_ok", "expect_failed",
                 "mismatched", "unexpected", "errors", "size_min", "size_max")


def bench_tool(env, name):
    """A tool built next to the daemon (build/bench/, or the sanitized build's)."""
    path = os.path.join(os.path.dirname(env.binary), "bench", name)
    assert os.access(path, os.X_OK), "%s not built (make integration builds it)" % path
    return path


def dnsgen(env, port, queries, *args):
    """Run dnsgen against 127.0.0.1:port with queries [(name, type)] or
    [(name, type, expected reply)]; returns
    its key=value line as a dict (counts as ints, the rest as floats or
    text) and its stderr summary."""
    fd, qfile = tempfile.mkstemp(prefix="queries-", suffix=".txt", dir=env.tmp)
    with os.fdopen(fd, "w") as f:
        f.write("; comment lines and blank lines are skipped\n\n")
        f.write("".join(" ".join(q) + "\n" for q in queries))
    argv = [bench_tool(env, "dnsgen"), "-s", "127.0.0.1", "-p", str(port),
            "-d", qfile] + list(args)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, "dnsgen exited %d: %s" % (p.returncode, p.stderr)
    lines = p.stdout.strip().split("\n")
    assert len(lines) == 1, "want one key=value line, got: %r" % p.stdout
    r = {}
    for kv in lines[0].split():
        k, v = kv.split("=", 1)
        try:
            r[k] = int(v) if k in DNSGEN_COUNTS else float(v)
        except ValueError:
            r[k] = v
    for k in DNSGEN_COUNTS:
        assert k in r, "no %s= in %r" % (k, lines[0])
    return r, p.stderr


# ------------------------------------------------------ TLS certificates

def make_tls_ca(tmp, name):
    """A CA (tmp/ca.pem) and a server key and certificate for name and
    127.0.0.1 signed by it (tmp/srv.key, tmp/srv.pem), made with openssl;
    returns the CA's path."""
    def run(*argv):
        subprocess.run(argv, cwd=tmp, check=True, capture_output=True, timeout=60)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
        "-out", "ca.pem", "-days", "2", "-subj", "/CN=localdns test CA")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out",
        "srv.csr", "-subj", "/CN=" + name)
    with open(os.path.join(tmp, "ext.cnf"), "w") as f:
        f.write("subjectAltName=DNS:%s,IP:127.0.0.1\n" % name)
    run("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf")
    return os.path.join(tmp, "ca.pem")


def write_unbound_tls_conf(tmp, port, zone_lines, verbosity=0):
    """tmp/unbound.conf for an Unbound (`unbound -d -c`) answering on
    127.0.0.1:port over UDP, and over TLS on TCP, with make_tls_ca's server key and
    certificate, iterator only, logging to stdout at verbosity; zone_lines
    (its local-zone and local-data, and any other server: lines) decide what
    it answers. Returns the path."""
    conf = os.path.join(tmp, "unbound.conf")
    with open(conf, "w") as f:
        f.write("""server:
  interface: 127.0.0.1@%(port)d
  tls-port: %(port)d
  tls-service-key: "%(tmp)s/srv.key"
  tls-service-pem: "%(tmp)s/srv.pem"
  num-threads: 1
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "%(tmp)s"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: %(verbosity)d
  do-ip6: no
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
""" % {"port": port, "tmp": tmp, "verbosity": verbosity})
        f.writelines("  %s\n" % line for line in zone_lines)
    return conf


# ---------------------------------------- cgroups, stopping a thread

class Cgroup:
    """A cgroup of our own under parent (set by the subclass's __enter__,
    which makes self.path): add(pid) moves a process into it; leaving moves
    them back to parent and removes it."""

    def __init__(self):
        self.path, self.parent, self.pids = None, None, []

    def add(self, pid):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        self.pids.append(pid)

    def __exit__(self, *exc):
        if not self.path or not os.path.isdir(self.path):
            return
        for pid in self.pids:
            try:
                with open(os.path.join(self.parent, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
            except OSError:
                pass  # it has ended
        try:
            os.rmdir(self.path)
        except OSError:
            pass


class MemoryCgroup(Cgroup):
    """A memory cgroup of our own, a child of this process's, with a limit
    (cgroup v2 memory.max, or v1 memory.limit_in_bytes). Skip when the
    cgroup file system is not ours to write."""

    def __init__(self, limit):
        super().__init__()
        self.limit = limit

    @staticmethod
    def _own():
        with open("/proc/self/cgroup") as f:
            lines = [l.rstrip("\n").split(":", 2) for l in f]
        for hid, controllers, where in lines:
            if hid == "0" and controllers == "" and os.path.exists(
                    "/sys/fs/cgroup%s/memory.max" % where.rstrip("/")):
                return "/sys/fs/cgroup" + where.rstrip("/"), "memory.max"
        for hid, controllers, where in lines:
            if "memory" in controllers.split(","):
                return "/sys/fs/cgroup/memory" + where.rstrip("/"), "memory.limit_in_bytes"
        return None, None

    def __enter__(self):
        self.parent, limit_file = self._own()
        if not self.parent:
            raise Skip("no memory cgroup to make one in")
        self.path = os.path.join(self.parent, "localdns-test-%d" % os.getpid())
        try:
            os.mkdir(self.path)
            with open(os.path.join(self.path, limit_file), "w") as f:
                f.write(str(self.limit))
        except OSError as e:
            if os.path.isdir(self.path):
                os.rmdir(self.path)
            raise Skip("cannot make a memory cgroup: %s" % e)
        return self


class CpuCgroup(Cgroup):
    """A CPU cgroup of our own with a bandwidth limit (quota_us of CPU time
    per period_us, as a container's CPU limit is): cgroup v2 cpu.max, or v1
    cpu.cfs_quota_us. Skip when not ours to make."""

    def __init__(self, quota_us, period_us):
        super().__init__()
        self.quota, self.period = quota_us, period_us

    def __enter__(self):
        v2 = "/sys/fs/cgroup/cgroup.controllers"
        if os.path.exists(v2) and "cpu" in open(v2).read().split():
            self.parent = "/sys/fs/cgroup"
            limits = {"cpu.max": "%d %d" % (self.quota, self.period)}
        elif os.path.isdir("/sys/fs/cgroup/cpu"):
            self.parent = "/sys/fs/cgroup/cpu"
            limits = {"cpu.cfs_period_us": str(self.period), "cpu.cfs_quota_us": str(self.quota)}
        else:
            raise Skip("no CPU cgroup controller")
        self.path = os.path.join(self.parent, "localdns-starved-%d" % os.getpid())
        try:
            os.mkdir(self.path)
            for name, value in limits.items():
                with open(os.path.join(self.path, name), "w") as f:
                    f.write(value)
        except OSError as e:
            self.__exit__()
            raise Skip("cannot make a CPU cgroup: %s" % e)
        return self

    def throttled(self):
        """(periods the limit stopped the group, seconds it was stopped)"""
        with open(os.path.join(self.path, "cpu.stat")) as f:
            st = dict(line.split() for line in f)
        if "nr_throttled" in st and "throttled_usec" in st:
            return int(st["nr_throttled"]), int(st["throttled_usec"]) / 1e6
        return int(st.get("nr_throttled", 0)), int(st.get("throttled_time", 0)) / 1e9


class StoppedThread:
    """Holds one thread of another process stopped (PTRACE_SEIZE +
    PTRACE_INTERRUPT stop that thread alone, not its process) until exit."""

    PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH = 0x4206, 0x4207, 17
    WALL = 0x40000000

    def __init__(self, tid):
        self.tid = tid
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.libc.ptrace.restype = ctypes.c_long

    def _ptrace(self, request):
        if self.libc.ptrace(request, self.tid, None, None) != 0:
            raise OSError(ctypes.get_errno(), "ptrace %#x of thread %d" % (request, self.tid))

    def __enter__(self):
        self._ptrace(self.PTRACE_SEIZE)
        self._ptrace(self.PTRACE_INTERRUPT)
        os.waitpid(self.tid, self.WALL)
        return self

    def __exit__(self, *exc):
        self._ptrace(self.PTRACE_DETACH)


def stop_process(pid):
    """SIGSTOP to pid, and until every thread of it is stopped (state T): a
    thread on another CPU may still take a query the moment after kill()."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while True:
        states = []
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass  # a thread that has just ended
        if states and all(st in ("T", "t") for st in states):
            return
        assert time.monotonic() < deadline, "not stopped: %s" % states
        time.sleep(0.001)


def thread_id(pid, name):
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            if f.read().strip() == name:
                return int(tid)
    raise AssertionError("no thread named %r in process %d" % (name, pid))


# ------------------------------------------------------------- the daemon

class DaemonError(AssertionError):
    pass


class Daemon:
    """One localdns process with its config in its own temp dir."""

    def __init__(self, binary, config=None, files=None, host="127.0.0.1",
                 config_text=None, wait=True, tmpdir=None, config_file=None,
                 port=None, netns=None, extra_env=None, movable_port=False):
        """config: a dict written as YAML; or config_text as is; or
        config_file, an existing file used in place (then port= says where
        it listens). files: {relative path: text} written next to it.
        netns: run inside this network namespace (ip netns exec); then
        only dig()/kdig() reach it, not udp()/tcp()/udp_raw().
        extra_env: variables added to the daemon's environment.
        movable_port: the port was free_port()'s pick, not the test's: a
        start that loses it to another process moves to a new one."""
        self.binary = binary
        self.netns = netns
        self.dir = tmpdir or mkdtemp()
        self.config = config
        self.movable_port = movable_port and config is not None and \
            config_text is None and config_file is None
        self.host = host
        self.port = port if port is not None else (
            config["listen"]["port"] if config else None)
        for rel, text in (files or {}).items():
            path = os.path.join(self.dir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        if config_file is not None:
            self.config_path = config_file
        else:
            self.config_path = os.path.join(self.dir, "config.yaml")
            with open(self.config_path, "w") as f:
                f.write(config_text if config_text is not None
                        else to_yaml(config) + "\n")
        self.log_path = os.path.join(self.dir, "stderr.log")
        self.out_path = os.path.join(self.dir, "stdout.log")
        self._log = open(self.log_path, "wb")
        self._out = open(self.out_path, "wb")
        self._env = dict(os.environ, **(extra_env or {}))
        self._spawn()
        if wait:
            self.wait_ready()

    def _spawn(self):
        self._log.flush()
        self._log_start = os.fstat(self._log.fileno()).st_size
        self.proc = subprocess.Popen(
            netns_argv(self.netns, [self.binary, "--config", self.config_path]),
            stdin=subprocess.DEVNULL,
            stdout=self._out, stderr=self._log, env=self._env,
            cwd="/")  # not the config's dir: static.files must resolve
                      # against the config file, not the working directory
        _live_procs.add(self.proc)

    # A port picked by free_port() is free for anyone until the daemon binds
    # it, and libunbound (this run's daemons', or another run's) sends from
    # random ports across 1024-65535. Its sockets live for one query, so the
    # same config starts a moment later.
    PORT_RACE_RETRIES = 3

    def _move_to_a_new_port(self):
        """A port free_port() picked was taken meanwhile (by libunbound,
        whose queries to a silent upstream hold their random ports for
        seconds): the config is written again with a new one."""
        if not self.movable_port:
            return
        self.port = free_port(tuple(self.config["listen"]["addresses"]))
        self.config["listen"]["port"] = self.port
        with open(self.config_path, "w") as f:
            f.write(to_yaml(self.config) + "\n")

    def _lost_a_port_race(self):
        """Whether this start failed on an address in use."""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_start)
            return b"Address already in use" in f.read()

    def last_error(self):
        """The last error line of the log (or its last line)."""
        lines = self.stderr().rstrip("\n").split("\n")
        errors = [l for l in lines if "level=error" in l or '"level":"error"' in l]
        return (errors or lines)[-1]

    # -- lifecycle
    def alive(self):
        return self.proc.poll() is None

    def stderr(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def tail(self, n=15):
        lines = self.stderr().rstrip("\n").split("\n")
        return "\n".join(lines[-n:])

    def reload(self, config):
        """Write config (a dict) to the daemon's config file and send SIGHUP,
        as an operator editing the ConfigMap would (self.config stays the
        config it started with). Returns how long its log was before, so a
        test reads what this reload logged as stderr()[mark:]."""
        mark = len(self.stderr())
        with open(self.config_path, "w") as f:
            f.write(to_yaml(config) + "\n")
        self.proc.send_signal(signal.SIGHUP)
        return mark

    def wait_ready(self, timeout=5.0):
        """Poll with a UDP query until any reply comes, then check TCP."""
        if self.netns:
            return self._wait_ready_netns(timeout)
        deadline = time.monotonic() + timeout
        probe = dnsmsg.build_query("db.prod.svc.cluster.local", "A")
        retries = self.PORT_RACE_RETRIES
        while time.monotonic() < deadline:
            if not self.alive():
                _live_procs.discard(self.proc)
                if retries and self._lost_a_port_race():
                    retries -= 1
                    self._move_to_a_new_port()
                    time.sleep(0.2)
                    self._spawn()
                    deadline = time.monotonic() + timeout
                    continue
                raise DaemonError("daemon exited with status %s before "
                                  "answering (%s); stderr:\n%s"
                                  % (self.proc.returncode, self.last_error(), self.tail()))
            if self._probe_udp(probe) is not None:
                break
            time.sleep(0.01)
        else:
            raise DaemonError("daemon did not answer UDP within %.0fs; "
                              "stderr:\n%s" % (timeout, self.tail()))
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), 0.5):
                    return self._wait_serving(deadline)
            except OSError:
                time.sleep(0.05)
        raise DaemonError("daemon answers UDP but TCP connect fails")

    def _probe_udp(self, probe):
        """The reply to probe, or None. The socket is connected, so a port
        nothing has bound yet says so at once (ICMP port unreachable is
        reported to connected sockets only) instead of costing the whole
        wait: a daemon is seen ready within 10 ms of binding, not 100."""
        with socket.socket(dnsmsg.family_of(self.host), socket.SOCK_DGRAM) as s:
            s.settimeout(0.1)
            try:
                s.connect((self.host, self.port))
                s.send(probe)
                while True:
                    data = s.recv(65535)
                    if data[:2] == probe[:2]:
                        return data
            except (socket.timeout, ConnectionRefusedError):
                return None

    SERVING = re.compile(r'(?m)^.*(msg="?serving"?( |$)|"msg":"serving")')

    def _wait_serving(self, deadline):
        """DNS answers once the workers run; the health and metrics
        endpoints and the control threads start after them, and the
        "serving" line is logged once all are up (below info: not logged,
        so not waited for)."""
        if (self.config or {}).get("log", {}).get("level", "info") not in ("info", "debug"):
            return
        while not self.SERVING.search(self.stderr()):
            if not self.alive() or time.monotonic() > deadline:
                raise DaemonError("daemon answers DNS but never logged \"serving\"; "
                                  "stderr:\n%s" % self.tail())
            time.sleep(0.02)

    def _wait_ready_netns(self, timeout):
        """wait_ready inside a network namespace, which only tools started
        there reach: dig until it gets a reply over UDP, then over TCP."""
        deadline = time.monotonic() + timeout
        for transport in ("+notcp", "+tcp"):
            while True:
                if not self.alive():
                    raise DaemonError("daemon exited with status %s before "
                                      "answering; stderr:\n%s"
                                      % (self.proc.returncode, self.tail()))
                if self.dig("db.prod.svc.cluster.local", "A", transport,
                            timeout=1).status is not None:
                    break
                if time.monotonic() > deadline:
                    raise DaemonError("daemon in netns %s did not answer "
                                      "(%s) within %.0fs; stderr:\n%s"
                                      % (self.netns, transport, timeout,
                                         self.tail()))
                time.sleep(0.05)
        self._wait_serving(deadline)

    def stop(self, sig=signal.SIGTERM, timeout=2.0):
        """Signal and wait; returns (exit status, seconds taken). Kills it
        if it has not exited within timeout (status is then None)."""
        if not self.alive():
            return self.proc.returncode, 0.0
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(2)
            rc = None
        dt = time.monotonic() - t0
        _live_procs.discard(self.proc)
        return rc, dt

    def close(self):
        _kill(self.proc)
        for f in (self._log, self._out):
            try:
                f.close()
            except Exception:
                pass

    # -- queries
    def udp(self, name, qt="A", **kw):
        return dnsmsg.udp_query(self.host, self.port, name, qt, **kw)

    def tcp(self, name, qt="A", **kw):
        return dnsmsg.tcp_query(self.host, self.port, name, qt, **kw)

    def udp_raw(self, pkt, timeout=1.0):
        return dnsmsg.udp_exchange(self.host, self.port, pkt, timeout)

    def dig(self, *args, **kw):
        kw.setdefault("netns", self.netns)
        return dig(self.host, self.port, *args, **kw)

    def kdig(self, *args, **kw):
        kw.setdefault("netns", self.netns)
        return kdig(self.host, self.port, *args, **kw)


# ------------------------------------------------------------- dig / kdig

class ToolReply:
    """What dig/kdig printed, parsed: status, flags, sections of RRs
    (name, ttl, class, type, rdata text), EDNS line, raw text."""

    def __init__(self, text, rc):
        self.text = text
        self.rc = rc
        self.status = None
        self.flags = set()
        self.id = None
        self.edns = None         # the EDNS pseudo-section text or None
        self.cookie = None       # server cookie hex as printed
        self.question = []
        self.answer = []
        self.authority = []
        self.additional = []
        self.truncated_retry = ";; Truncated, retrying in TCP mode" in text
        self._parse()

    def _parse(self):
        # Only the last reply printed counts (dig prints the TCP retry's).
        blocks = self.text.split("->>HEADER<<-")
        if len(blocks) < 2:
            return
        last = "->>HEADER<<-" + blocks[-1]
        m = re.search(r"status: ([A-Z0-9]+)", last)
        self.status = m.group(1) if m else None
        m = re.search(r"id: (\d+)", last)
        self.id = int(m.group(1)) if m else None
        m = re.search(r"^;; [Ff]lags: ([a-z ]*)[;]", last, re.M)
        if m:
            self.flags = set(m.group(1).split())
        section = None
        for line in last.split("\n"):
            s = line.strip()
            sm = re.match(r"^;; (\w+) (?:PSEUDO)?SECTION:", s)
            if sm:
                section = sm.group(1).lower()
                continue
            if not s:
                continue
            if section == "opt" or section == "edns":
                if s.startswith("; EDNS:") or s.startswith(";; Version:"):
                    self.edns = s
                cm = re.search(r"COOKIE: ([0-9a-fA-F]+)", s)
                if cm:
                    self.cookie = cm.group(1).lower()
                continue
            if s.startswith(";"):
                if section == "question":
                    q = s.lstrip(";").split()
                    if len(q) >= 3:
                        self.question.append(tuple(q[:3]))
                if s.startswith(";; ") and "SECTION" not in s:
                    section = None if not s.startswith(";; Warning") else section
                continue
            if section in ("answer", "authority", "additional"):
                parts = s.split(None, 4)
                if len(parts) >= 4:
                    getattr(self, section).append({
                        "name": parts[0], "ttl": int(parts[1]),
                        "class": parts[2], "type": parts[3],
                        "rdata": parts[4] if len(parts) > 4 else ""})

    def rrs(self, section="answer", rtype=None):
        recs = getattr(self, section)
        return [r for r in recs if rtype is None or r["type"] == rtype]

    def rdatas(self, rtype, section="answer"):
        return [r["rdata"] for r in self.rrs(section, rtype)]


def txt_strings(rdata):
    """Split a TXT rdata as printed by dig/kdig into its strings."""
    return [re.sub(r"\\(.)", r"\1", s)
            for s in re.findall(r'"((?:[^"\\]|\\.)*)"', rdata)]


def _run_tool(argv, timeout):
    try:
        p = subprocess.run(argv, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("%s timed out" % " ".join(argv))
    return ToolReply(p.stdout + p.stderr, p.returncode)


def dig(host, port, name, qt="A", *opts, qclass="IN", timeout=2, tries=1,
        netns=None):
    argv = ["dig", "@" + host, "-p", str(port), "-c", qclass, "-t", qt,
            "-q", name, "+time=%d" % timeout, "+tries=%d" % tries] + list(opts)
    return _run_tool(netns_argv(netns, argv), timeout * tries * 3 + 5)


def kdig(host, port, name, qt="A", *opts, qclass="IN", timeout=2, tries=1,
         netns=None):
    argv = ["kdig", "@" + host, "-p", str(port), "-c", qclass, "-t", qt,
            "-q", name, "+time=%d" % timeout, "+retry=%d" % (tries - 1)] \
        + list(opts)
    return _run_tool(netns_argv(netns, argv), timeout * tries * 3 + 5)


# ------------------------------------------------------------- per-test env

class Env:
    """What a test function receives."""

    def __init__(self, binary, shared):
        self.binary = binary
        self.repo = REPO
        self._shared = shared     # SharedServer holder
        self._daemons = []
        self._tmp = None
        self.v6 = None

    @property
    def tmp(self):
        if self._tmp is None:
            self._tmp = mkdtemp()
        return self._tmp

    @property
    def server(self):
        return self._shared.get()

    def config(self, port=None, addresses=("127.0.0.1",), **over):
        """The standard config dict with overrides merged in."""
        if port is None:
            port = free_port(tuple(addresses))
        return deep_merge(base_config(port, addresses), over)

    def start(self, config=None, files=None, wait=True, netns=None, extra_env=None, **over):
        """Start a daemon of this test's own (inside network namespace
        netns when given, with extra_env added to its environment). Files
        for static.files are added unless given."""
        if files is None:
            files = {}
        files.setdefault(STANDARD_FILE_NAME,
                         static_file_yaml(STANDARD_FILE_RECORDS))
        movable = config is None and "port" not in over
        if config is None:
            config = self.config(**over)
        d = Daemon(self.binary, config, files=files,
                   host=config["listen"]["addresses"][0], wait=False,
                   netns=netns, extra_env=extra_env, movable_port=movable)
        self._daemons.append(d)
        if wait:
            d.wait_ready()
        return d

    def start_file(self, path, port, wait=True, host="127.0.0.1", netns=None, extra_env=None):
        """Start a daemon on an existing config file that listens on
        host:port (inside network namespace netns when given, with
        extra_env added to its environment)."""
        d = Daemon(self.binary, None, config_file=path, port=port, host=host,
                   wait=False, tmpdir=mkdtemp(), netns=netns, extra_env=extra_env)
        self._daemons.append(d)
        if wait:
            d.wait_ready()
        return d

    def run(self, args, timeout=10, cwd=None, extra_env=None):
        """Run the binary with args (and extra_env added to the
        environment); returns CompletedProcess (text)."""
        try:
            return subprocess.run([self.binary] + list(args),
                                  capture_output=True, text=True,
                                  timeout=timeout, cwd=cwd,
                                  env=dict(os.environ, **(extra_env or {})),
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s %s did not exit within %ss"
                                 % (self.binary, " ".join(args), timeout))

    def daemon_logs(self):
        out = []
        for d in self._daemons:
            out.append("--- daemon %s (port %s, %s) stderr tail:\n%s" % (
                d.proc.pid, d.port,
                "running" if d.alive() else "exit %s" % d.proc.returncode,
                d.tail()))
        return "\n".join(out)

    def close(self):
        for d in self._daemons:
            d.close()
            rmtemp(d.dir)
        self._daemons = []
        if self._tmp:
            rmtemp(self._tmp)
            self._tmp = None


class SharedServer:
    """The standard daemon, started on first use and restarted if it died
    (a death is reported by the runner against the test that caused it)."""

    def __init__(self, binary):
        self.binary = binary
        self.daemon = None

    def get(self):
        if self.daemon is None or not self.daemon.alive():
            if self.daemon is not None:
                self.close()
            port = free_port()
            files = {STANDARD_FILE_NAME:
                     static_file_yaml(STANDARD_FILE_RECORDS)}
            d = Daemon(self.binary, base_config(port), files=files, wait=False)
            try:
                d.wait_ready()
            except Exception:
                d.close()
                raise
            self.daemon = d
        return self.daemon

    def died(self):
        return self.daemon is not None and not self.daemon.alive()

    def close(self):
        if self.daemon is not None:
            self.daemon.close()
            rmtemp(self.daemon.dir)
            self.daemon = None
