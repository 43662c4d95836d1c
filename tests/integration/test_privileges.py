"""Privileges. The process holds CAP_NET_ADMIN and CAP_NET_BIND_SERVICE
only (permitted, bounding), no inheritable or ambient capability, and
no_new_privs; it still answers and reloads a root-owned 0600 config, but a
file only another user may read is now refused (CAP_DAC_OVERRIDE is gone).
Per thread (docs/ARCHITECTURE.md, "Privileges"): the main thread keeps both,
the node monitor CAP_NET_ADMIN alone, and every thread that parses traffic
(workers, resolver, control, HTTP, Kubernetes, query log, and the threads
libraries start from them) nothing, under a seccomp allow-list; the main
thread runs under a deny-list of what localdns never does, which every
other thread inherits beneath its own. A worker, or the main thread, that
makes a forbidden syscall kills the process (tests/privs/forbidden.c is
the daemon with a worker and a main thread that do so on cue), and so does
the keeper's main thread; with security.seccomp off the same call would
have got through. Started without privileges (uid 65534) it
runs and says what is missing; asked to manage the node without
CAP_NET_ADMIN it refuses to start and says why."""

import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request

import authority
import dnsmsg
import harness

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

DB = "db.prod.svc.cluster.local"
NET_BIND_SERVICE, NET_ADMIN = 10, 12
KEPT = (1 << NET_BIND_SERVICE) | (1 << NET_ADMIN)


def status_of(path):
    """The Cap* and NoNewPrivs lines of a /proc status file, as ints."""
    out = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.startswith("Cap"):
                out[key] = int(value.strip(), 16)
            elif key in ("NoNewPrivs", "Uid", "Seccomp", "Seccomp_filters"):
                out[key] = value.split()[0]
    return out


def thread_statuses(pid):
    """{tid: (thread name, status)} for every thread of pid."""
    base = "/proc/%d/task" % pid
    out = {}
    for tid in os.listdir(base):
        with open(os.path.join(base, tid, "comm")) as f:
            out[tid] = (f.read().strip(), status_of(os.path.join(base, tid, "status")))
    return out


# Threads that parse traffic: no capability, seccomp filter mode (2). Threads
# a library starts carry the name of the one that started them (libcurl's
# resolver threads and liburcu's call_rcu thread: kubernetes). libunbound
# runs on our "resolver" thread, libmicrohttpd on our "http" threads.
RESTRICTED = ("resolver", "http", "kubernetes", "querylog", "dnstap")
SECCOMP_FILTER = "2"


def expected(name, kept):
    """(capabilities, seccomp mode, filters) the docs give the thread named
    name: the main thread's deny-list, and every other thread's own list
    over the deny-list it inherited."""
    if name == "localdns":                  # main: reloads bind and change the node
        return kept, SECCOMP_FILTER, "1"
    if name == "node":                      # netlink is its job, under its own list
        return kept & (1 << NET_ADMIN), SECCOMP_FILTER, "2"
    assert name.startswith(("worker/", "control/")) or name in RESTRICTED, \
        "unexpected thread " + name
    return 0, SECCOMP_FILTER, "2"


def check_threads(pid, kept):
    """Every thread as documented; returns how many there are of each name."""
    names = {}
    for tid, (name, st) in thread_statuses(pid).items():
        caps, mode, filters = expected(name, kept)
        assert (st["CapEff"], st["CapPrm"], st["Seccomp"], st["Seccomp_filters"]) == \
            (caps, caps, mode, filters), \
            (tid, name, hex(st["CapEff"]), hex(st["CapPrm"]), st["Seccomp"],
             st["Seccomp_filters"])
        # The bounding set needs CAP_SETPCAP to shrink and stays the process's:
        # it grants nothing without execve, which no_new_privs and the filters close.
        assert st["CapBnd"] == kept, (tid, name, hex(st["CapBnd"]))
        assert st["CapInh"] == 0 and st["CapAmb"] == 0, (tid, name, st)
        assert st["NoNewPrivs"] == "1", (tid, name, st)
        key = name.split("/")[0] if name.startswith(("worker/", "control/")) else name
        names[key] = names.get(key, 0) + 1
    return names


def need_root():
    if os.geteuid() != 0:
        raise harness.Skip("needs root")


def kept_caps():
    mine = status_of("/proc/self/status")
    return KEPT & mine["CapPrm"] & mine["CapBnd"]


def http_get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
        return r.status, r.read().decode()


def test_each_thread_holds_what_the_docs_say(env):
    need_root()
    kept = kept_caps()
    site = authority.zone_path("site.example.")
    with authority.Authority({"site.example.": site}) as up, F.FakeAPI() as api:
        api.apply(F.service("prod", "web", cluster_ips="10.96.0.20"))
        port = harness.free_port()
        sock = os.path.join(env.tmp, "control.sock")
        d = env.start(
            upstream={"servers": [up.addr], "timeout": "1s"},
            kubernetes={"enabled": True, "node_name": "node-a",
                        "kubeconfig": api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))},
            health={"listen": "127.0.0.1:%d" % port}, metrics={"listen": "127.0.0.1:%d" % port},
            control={"socket": sock}, log={"queries": 1})
        # Put every thread to work, the libraries' own threads included.
        assert d.udp("www.site.example", "A").answer, "no upstream answer"   # libunbound
        deadline = time.monotonic() + 5
        while d.udp("web.prod.svc.cluster.local", "A").rcode_name != "NOERROR":
            assert time.monotonic() < deadline, "no cluster names: " + d.tail()
            time.sleep(0.05)
        assert d.udp(DB, "A").answer and d.tcp(DB, "A").answer             # workers
        status, body = http_get(port, "/metrics")                          # reads /proc
        assert status == 200 and "process_open_fds" in body, body[:200]
        assert http_get(port, "/ready") == (200, "ready\n")
        ctl = env.run(["ctl", "--socket", sock, "lookup", "www.site.example"])
        assert ctl.returncode == 0 and "192.0.2.1" in ctl.stdout, ctl.stdout + ctl.stderr
        # A reload asked on the control socket runs on the main thread.
        ctl = env.run(["ctl", "--socket", sock, "reload"])
        assert ctl.returncode == 0, ctl.stdout + ctl.stderr
        names = check_threads(d.proc.pid, kept)
        assert names.get("localdns") == 1 and names.get("worker") == 2, names
        # one: libunbound runs on the resolver thread and starts none (src/upstream/loop.c)
        assert names.get("resolver") == 1, names
        assert names.get("control") == 4, names
        for name in ("http", "kubernetes", "querylog", "dnstap"):
            assert names.get(name, 0) >= 1, names
        deadline = time.monotonic() + 5    # the query log thread writes every 100 ms
        while "msg=query" not in d.stderr():
            assert d.alive() and time.monotonic() < deadline, "no query logged: " + d.tail()
            time.sleep(0.05)
        assert 'msg="privileges dropped" kept=net_admin,net_bind_service missing=none ' \
               'bounding_set=reduced no_new_privs=true ' \
               'seccomp="per thread, over a process-wide deny-list"' in d.stderr(), \
            d.stderr()


test_each_thread_holds_what_the_docs_say.timeout = 30


def test_the_node_monitor_keeps_net_admin_alone(env):
    need_root()
    import test_node
    n = test_node.Node(env)
    d = n.start()
    assert n.ask(test_node.CLUSTER_IP) == test_node.LOCAL_ANSWER
    names = check_threads(d.proc.pid, kept_caps())
    assert names.get("node") == 1 and names.get("localdns") == 1, names


FORBIDDEN_NAME = "forbidden-syscall.test"


def start_forbidden(env, syscall, **over):
    """The daemon of tests/privs/forbidden.c, whose workers make syscall on cue."""
    binary = os.path.join(os.path.dirname(env.binary), "tests", "localdns-forbidden")
    files = {harness.STANDARD_FILE_NAME: harness.static_file_yaml(harness.STANDARD_FILE_RECORDS)}
    target = os.path.join(env.tmp, "written-by-a-worker")
    d = harness.Daemon(binary, env.config(**over), files=files, wait=False, extra_env={
        "LOCALDNS_TEST_SYSCALL": syscall, "LOCALDNS_TEST_PATH": target})
    env._daemons.append(d)
    d.wait_ready()
    assert d.udp(DB, "A").answer, "no answer before the cue"
    d.udp_raw(dnsmsg.build_query(FORBIDDEN_NAME, "A"), timeout=0.5)  # no reply if killed
    return d, target


def wait_exit(d, seconds=5):
    try:
        return d.proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


def test_a_forbidden_syscall_from_a_worker_kills_the_process(env):
    need_root()
    # A netlink socket (the node's nftables), a program, a file written,
    # executable memory: the first syscall of each kills the whole process.
    for syscall in ("netlink", "execve", "open-write", "mprotect-exec"):
        d, target = start_forbidden(env, syscall)
        assert wait_exit(d) == -signal.SIGSYS, (syscall, d.proc.returncode, d.tail())
        assert "forbidden syscall" not in d.stderr(), d.tail()   # it never returned
        assert not os.path.exists(target), syscall


def test_a_worker_opening_a_file_to_read_is_refused_and_goes_on(env):
    need_root()
    # By design an error, not a kill: glibc reads a /proc file in whichever
    # thread first trims the heap, and does without it.
    d, _ = start_forbidden(env, "open-read")
    assert "forbidden syscall open-read returned -1 (Permission denied)" in d.stderr(), d.tail()
    assert d.alive() and d.udp(DB, "A").answer


def test_with_seccomp_off_the_same_syscall_gets_through(env):
    need_root()
    # The cue works: without the filter the worker opens its netlink socket
    # (it still has no capability: the kernel would refuse it any change).
    d, _ = start_forbidden(env, "netlink", security={"seccomp": False})
    deadline = time.monotonic() + 5
    while "forbidden syscall netlink returned" not in d.stderr():
        assert time.monotonic() < deadline, d.tail()
        time.sleep(0.02)
    assert "forbidden syscall netlink returned -1" not in d.stderr(), d.tail()
    assert d.alive() and d.udp(DB, "A").answer
    assert 'seccomp="off (security.seccomp)"' in d.stderr()
    for tid, (name, st) in thread_statuses(d.proc.pid).items():
        if name.startswith("worker/"):
            assert st["Seccomp"] == "0" and st["CapEff"] == 0, (name, st)


def start_forbidden_main(env, syscall, **over):
    """The daemon of tests/privs/forbidden.c, whose main thread makes
    syscall at a reload (SIGHUP, as an operator or the config watcher
    starts one); returns it once the signal is sent."""
    binary = os.path.join(os.path.dirname(env.binary), "tests", "localdns-forbidden")
    files = {harness.STANDARD_FILE_NAME: harness.static_file_yaml(harness.STANDARD_FILE_RECORDS)}
    d = harness.Daemon(binary, env.config(**over), files=files, wait=False,
                       extra_env={"LOCALDNS_TEST_MAIN_SYSCALL": syscall})
    env._daemons.append(d)
    d.wait_ready()
    assert d.udp(DB, "A").answer, "no answer before the cue"
    d.proc.send_signal(signal.SIGHUP)
    return d


def test_a_forbidden_syscall_from_the_main_thread_kills_the_process(env):
    need_root()
    # Code that took the main thread over (it shares the workers' memory):
    # a program, a process, another process's memory, a user namespace,
    # io_uring (whose operations seccomp does not see). Each kills.
    for syscall in ("execve", "fork", "ptrace-peek", "unshare-user", "io-uring"):
        d = start_forbidden_main(env, syscall)
        assert wait_exit(d) == -signal.SIGSYS, (syscall, d.proc.returncode, d.tail())
        assert "forbidden syscall" not in d.stderr(), d.tail()   # it never returned


def test_with_seccomp_off_the_main_thread_gets_through_and_reloads(env):
    need_root()
    # The cue works: with the filter, personality kills; without it, the
    # call returns, the reload runs and the daemon serves on.
    d = start_forbidden_main(env, "personality")
    assert wait_exit(d) == -signal.SIGSYS, (d.proc.returncode, d.tail())
    d = start_forbidden_main(env, "personality", security={"seccomp": False})
    deadline = time.monotonic() + 5
    while not any(o in d.stderr() for o in RELOAD_OUTCOMES):
        assert d.alive() and time.monotonic() < deadline, d.tail()
        time.sleep(0.02)
    assert "forbidden syscall personality returned 0 (ok)" in d.stderr(), d.tail()
    assert d.alive() and d.udp(DB, "A").answer
    st = status_of("/proc/%d/status" % d.proc.pid)
    assert st["Seccomp"] == "0", st


def _keeper(env, ns, syscall, **over):
    """`localdns keeper` of tests/privs/forbidden.c in network namespace ns,
    its main thread making syscall once it waits for its working thread."""
    binary = os.path.join(os.path.dirname(env.binary), "tests", "localdns-forbidden")
    cfg = env.config(nftables={"enabled": True, "table": "ldpriv"},
                     keeper={"socket": os.path.join(env.tmp, "keeper.sock")}, **over)
    path = os.path.join(env.tmp, "keeper.yaml")
    with open(path, "w") as f:
        f.write(harness.to_yaml(cfg) + "\n")
    with open(os.path.join(env.tmp, harness.STANDARD_FILE_NAME), "w") as f:
        f.write(harness.static_file_yaml(harness.STANDARD_FILE_RECORDS))
    log = open(os.path.join(env.tmp, "keeper.log"), "w+")
    p = harness.track_process(subprocess.Popen(
        harness.netns_argv(ns, [binary, "keeper", "--config", path]), stdin=subprocess.DEVNULL,
        stdout=log, stderr=log, env=dict(os.environ, LOCALDNS_TEST_KEEPER_SYSCALL=syscall)))
    return p, log


def _log_of(log):
    log.seek(0)
    return log.read()


def test_the_keepers_main_thread_is_filtered_too(env):
    need_root()
    ns = harness.netns_name("ldkeep")
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True, timeout=10)
    harness.track_netns(ns)
    try:
        p, log = _keeper(env, ns, "execve")
        try:
            rc = p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait(5)
        harness.untrack_process(p)
        assert rc == -signal.SIGSYS, (rc, _log_of(log))
        assert "forbidden syscall" not in _log_of(log)
        # The cue works: without the filter its main thread gets through and
        # waits on; its working thread runs (and stops at SIGTERM).
        p, log = _keeper(env, ns, "personality", security={"seccomp": False})
        deadline = time.monotonic() + 10
        while "forbidden syscall personality returned 0 (ok)" not in _log_of(log):
            assert p.poll() is None and time.monotonic() < deadline, _log_of(log)
            time.sleep(0.05)
        assert "keeper: waiting for localdns" in _log_of(log), _log_of(log)
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0, _log_of(log)
        harness.untrack_process(p)
    finally:
        harness.delete_netns(ns)


def _resolver_reads(env, path, **over):
    """What the resolver thread of tests/privs/forbidden.c gets when, asked a
    miss, it opens path: its stderr line."""
    binary = os.path.join(os.path.dirname(env.binary), "tests", "localdns-forbidden")
    files = {harness.STANDARD_FILE_NAME: harness.static_file_yaml(harness.STANDARD_FILE_RECORDS)}
    # A silent upstream: the miss reaches libunbound and stays there.
    d = harness.Daemon(binary, env.config(upstream={"servers": ["127.0.0.1:9"]}, **over),
                       files=files, wait=False, extra_env={"LOCALDNS_TEST_READ": path})
    env._daemons.append(d)
    d.wait_ready()
    d.udp_raw(dnsmsg.build_query("read-a-file.test", "A"), timeout=0.2)
    deadline = time.monotonic() + 5
    while "resolver read" not in d.stderr():
        assert time.monotonic() < deadline, d.tail()
        time.sleep(0.02)
    line = [l for l in d.stderr().splitlines() if l.startswith("resolver read")][0]
    d.stop()
    return line


def test_the_resolver_cannot_read_the_service_account_token(env):
    need_root()
    if "files=\"per thread (landlock)\"" not in _privileges_line(env):
        raise harness.Skip("no Landlock in this kernel: files are not limited per thread")
    # The in-cluster token lives in /var/run/secrets: outside what the
    # resolver, which speaks to the network, may read.
    secrets = os.path.join(env.tmp, "serviceaccount")
    os.makedirs(secrets)
    token = os.path.join(secrets, "token")
    with open(token, "w") as f:
        f.write("eyJhbGciOi-not-a-real-token\n")
    assert _resolver_reads(env, token).endswith("returned -1 (Permission denied)")
    # What it needs stays readable: /etc (resolv.conf, hosts, openssl.cnf)...
    assert _resolver_reads(env, "/etc/hosts").endswith("(ok)")
    # The same where the resolver runs on the only worker (upstream.resolver):
    one = {"listen": {"workers": 1}}
    assert _resolver_reads(env, token, **one).endswith("returned -1 (Permission denied)")
    assert _resolver_reads(env, "/etc/hosts", **one).endswith("(ok)")
    # ... and the cue works: without the limits the same open succeeds.
    assert _resolver_reads(env, token, security={"seccomp": False}).endswith("(ok)")


def _privileges_line(env):
    d = env.start()
    line = [l for l in d.stderr().splitlines() if "privileges dropped" in l][0]
    d.stop()
    return line


# The lines that end a reload (its first line, "reloading configuration", does not).
RELOAD_OUTCOMES = ("msg=reloaded", "reload failed", "configuration unchanged")


def _reload_and_wait(d):
    mark = len(d.stderr())
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        tail = d.stderr()[mark:]
        if any(outcome in tail for outcome in RELOAD_OUTCOMES):
            return tail
        time.sleep(0.02)
    raise AssertionError("no reload logged: " + d.tail())


def test_reload_after_the_drop_reads_root_files_but_not_other_users(env):
    need_root()
    d = env.start()
    cfg = harness.deep_merge(d.config, {})
    cfg["static"]["records"].append({"name": "added.prod.svc.cluster.local",
                                     "a": ["10.0.0.100"]})
    with open(d.config_path, "w") as f:
        f.write(harness.to_yaml(cfg) + "\n")
    # Owned by root, mode 0600: uid 0 reads it as its owner, no capability needed.
    os.chmod(d.config_path, stat.S_IRUSR | stat.S_IWUSR)
    # (The config file watcher may have reloaded it first: then this one finds it unchanged.)
    assert "reload failed" not in _reload_and_wait(d), d.tail()
    assert d.udp("added.prod.svc.cluster.local", "A").answer, "new record not served"
    # Owned by someone else, mode 0600: root needed CAP_DAC_OVERRIDE, gone now.
    os.chown(d.config_path, 65534, 65534)
    tail = _reload_and_wait(d)
    assert "reload failed" in tail and "Permission denied" in tail, tail
    assert d.alive() and d.udp("added.prod.svc.cluster.local", "A").answer


def _unprivileged_wrapper(env, binary, *setpriv_args):
    """A script that runs localdns through setpriv (harness.Daemon runs one binary)."""
    path = os.path.join(env.tmp, "localdns-setpriv")
    with open(path, "w") as f:
        f.write('#!/bin/sh\nexec setpriv %s %s "$@"\n' % (" ".join(setpriv_args), binary))
    os.chmod(path, 0o755)
    return path


def test_without_privileges_it_runs_and_says_what_is_missing(env):
    need_root()
    wrapper = _unprivileged_wrapper(env, env.binary, "--reuid=65534", "--regid=65534",
                                    "--clear-groups")
    tmpdir = harness.mkdtemp()
    os.chmod(tmpdir, 0o755)   # readable by uid 65534
    files = {harness.STANDARD_FILE_NAME:
             harness.static_file_yaml(harness.STANDARD_FILE_RECORDS)}
    d = harness.Daemon(wrapper, env.config(), files=files, tmpdir=tmpdir)
    try:
        assert d.udp(DB, "A").answer
        st = status_of("/proc/%d/status" % d.proc.pid)
        assert st["Uid"] == "65534" and st["CapEff"] == 0 and st["CapPrm"] == 0, st
        assert st["NoNewPrivs"] == "1", st
        assert 'kept=none missing=net_admin,net_bind_service ' \
               'bounding_set="unchanged (no CAP_SETPCAP)" no_new_privs=true' \
            in d.stderr(), d.stderr()
    finally:
        d.close()
        harness.rmtemp(tmpdir)


def test_node_integration_without_net_admin_refuses_to_start(env):
    need_root()
    # In a namespace of its own: were the check missing, nothing on the
    # host would be touched.
    ns = harness.netns_name("ldpriv")
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True, timeout=10)
    harness.track_netns(ns)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"],
                       check=True, capture_output=True, timeout=10)
        cfg = env.config(interface={"manage": True, "name": "ldpriv0"})
        path = os.path.join(env.tmp, "node.yaml")
        with open(path, "w") as f:
            f.write(harness.to_yaml(cfg) + "\n")
        with open(os.path.join(env.tmp, harness.STANDARD_FILE_NAME), "w") as f:
            f.write(harness.static_file_yaml(harness.STANDARD_FILE_RECORDS))
        p = subprocess.run(harness.netns_argv(ns, [
            "setpriv", "--bounding-set=-net_admin", env.binary, "--config", path]),
            capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
        assert p.returncode == 1, (p.returncode, p.stderr)
        assert "interface.manage is true and needs CAP_NET_ADMIN, which this process " \
               "does not have" in p.stderr, p.stderr
        links = subprocess.run(["ip", "netns", "exec", ns, "ip", "-o", "link"],
                               capture_output=True, text=True, timeout=10).stdout
        assert "ldpriv0" not in links, links
    finally:
        harness.delete_netns(ns)
