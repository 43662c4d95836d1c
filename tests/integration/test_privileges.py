"""Privileges: after start-up every thread of localdns holds CAP_NET_ADMIN
and CAP_NET_BIND_SERVICE only (effective, permitted, bounding), no
inheritable or ambient capability, and no_new_privs; it still answers and
reloads a root-owned 0600 config, but a file only another user may read is
now refused (CAP_DAC_OVERRIDE is gone). Started without privileges (uid
65534) it runs and says what is missing; asked to manage the node without
CAP_NET_ADMIN it refuses to start and says why."""

import os
import signal
import stat
import subprocess
import time

import harness

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
            elif key in ("NoNewPrivs", "Uid"):
                out[key] = value.split()[0]
    return out


def thread_statuses(pid):
    base = "/proc/%d/task" % pid
    return {tid: status_of(os.path.join(base, tid, "status")) for tid in os.listdir(base)}


def need_root():
    if os.geteuid() != 0:
        raise harness.Skip("needs root")


def test_only_net_admin_and_net_bind_service_in_every_thread(env):
    need_root()
    mine = status_of("/proc/self/status")
    want = KEPT & mine["CapPrm"] & mine["CapBnd"]
    d = env.start()
    # libunbound runs a thread of its own (not made by our code): it must be
    # covered too. An external name puts it to work first.
    assert d.udp("www.site.example", "A", timeout=3).rcode_name == "SERVFAIL"
    assert d.udp(DB, "A").answer, "no answer after the drop"
    threads = thread_statuses(d.proc.pid)
    assert len(threads) >= 5, threads   # main, query log, resolver, libunbound, workers
    for tid, st in threads.items():
        assert st["CapEff"] == want and st["CapPrm"] == want, (tid, hex(st["CapEff"]), st)
        assert st["CapBnd"] == want, (tid, hex(st["CapBnd"]))
        assert st["CapInh"] == 0 and st["CapAmb"] == 0, (tid, st)
        assert st["NoNewPrivs"] == "1", (tid, st)
    assert 'msg="privileges dropped" kept=net_admin,net_bind_service missing=none ' \
           'bounding_set=reduced no_new_privs=true' in d.stderr(), d.stderr()


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
    ns = "ldpriv-%d" % os.getpid()
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
