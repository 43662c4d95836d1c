"""The VM case (issue 25): a machine outside the cluster runs localdns as
deploy/systemd/localdns.service would, with deploy/vm/config.yaml, and its
own resolver -- glibc's, through `getent` -- resolves a Service, an Istio
ServiceEntry host and an external name through it.

Everything lives in one network namespace of the test's own (the "VM"):
the fake API server (its socket bound there by a thread that enters it,
as test_node.py does), NSD as the VM's real resolver for the external zone
site.example, and localdns on 169.254.20.10:53 with the link and nftables
table that config asks for. `ip netns exec` gives the namespace its own
/etc/resolv.conf (from /etc/netns/<name>/), naming 169.254.20.10 only, so
getent there asks localdns and nothing else. The config is the example
file as shipped, changed only where this machine differs from a VM: where
the kubeconfig and control socket are, the VM's real resolver (the
example's own advice when resolv.conf names localdns), and the link kind
(this kernel has no dummy links: loopback, through the same netlink code).
systemd-analyze verify of the unit is test_deploy.py's.
"""

import contextlib
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

import authority
import harness
import test_node

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

VM_CONFIG = os.path.join(harness.REPO, "deploy", "vm", "config.yaml")
SITE = authority.zone_path("site.example.")
LINK = "169.254.20.10"


def api_server_in(netns, api):
    """Start api with its socket bound inside netns (only the binding
    thread enters it)."""
    harness.run_in_netns(netns, api.start)
    return api


def getent(netns, name):
    """The IPv4 addresses glibc's getent finds for name inside netns."""
    p = subprocess.run(harness.netns_argv(netns, ["getent", "ahostsv4", name]),
                       capture_output=True, text=True, timeout=15)
    return sorted({line.split()[0] for line in p.stdout.splitlines()}) if p.returncode == 0 \
        else "exit %d" % p.returncode


def vm_config(env, api, up, **over):
    """deploy/vm/config.yaml, changed only where this machine is no VM
    (and by over: {section: {key: value}})."""
    with open(VM_CONFIG) as f:
        cfg = yaml.safe_load(f)
    cfg["kubernetes"]["kubeconfig"] = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))
    cfg["interface"]["kind"] = "loopback"          # no dummy links on this kernel
    cfg["upstream"]["servers"] = [up.addr]         # the VM's real resolver
    cfg["control"]["socket"] = os.path.join(env.tmp, "run", "control.sock")
    for section, keys in over.items():
        cfg[section].update(keys)
    path = os.path.join(env.tmp, "config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return cfg, path


@contextlib.contextmanager
def vm_machine(env):
    """The VM: its network namespace (resolv.conf naming localdns only),
    the fake API server with a Service and a ServiceEntry, and NSD as its
    real resolver for site.example. Yields (netns, api, nsd)."""
    if not shutil.which("getent"):
        raise harness.Skip("getent (libc-bin) is not installed")
    vm = harness.netns_name("ldns-vm")
    p = subprocess.run(["ip", "netns", "add", vm], capture_output=True, text=True)
    if p.returncode != 0:
        raise harness.Skip("cannot create a network namespace: " + p.stderr.strip())
    harness.track_netns(vm)
    etc = os.path.join("/etc/netns", vm)
    os.makedirs(etc, exist_ok=True)
    try:
        with open(os.path.join(etc, "resolv.conf"), "w") as f:
            f.write("nameserver %s\noptions timeout:2 attempts:1\n" % LINK)
        subprocess.run(["ip", "-n", vm, "link", "set", "lo", "up"], check=True)
        api = api_server_in(vm, F.FakeAPI(control_port=False, crds=F.ISTIO_CRDS))
        try:
            api.apply(F.namespace("prod"),
                      F.service("prod", "db", cluster_ips=["10.96.0.5"], ports=[5432]),
                      F.endpointslice("prod", "db", endpoints=[F.endpoint("10.1.0.5")],
                                      ports=[5432]),
                      F.service_entry("prod", "billing", ["billing.mesh.example"],
                                      addresses=["192.0.2.80"], resolution="STATIC"))
            with authority.Authority({"site.example.": SITE}, netns=vm) as up:
                yield vm, api, up
        finally:
            api.stop()
    finally:
        shutil.rmtree(etc, ignore_errors=True)


def test_vm_resolves_cluster_mesh_and_external_names_with_getent(env):
    with vm_machine(env) as (vm, api, up):
        cfg, path = vm_config(env, api, up)
        assert cfg["mesh"]["istio"] and not cfg["kubernetes"]["node_name"], cfg
        assert cfg["keeper"]["socket"] == "", "the keeper is off in the example"
        d = env.start_file(path, port=53, host=LINK, netns=vm)
        deadline = time.monotonic() + 10
        want = {"db.prod.svc.cluster.local": ["10.96.0.5"],
                "billing.mesh.example": ["192.0.2.80"],
                "www.site.example": ["192.0.2.1"]}
        got = {}
        while time.monotonic() < deadline:
            got = {name: getent(vm, name) for name in want}
            if got == want:
                break
            time.sleep(0.2)
        assert got == want, "%r\n%s" % (got, d.tail())
        # the table the config asks for is there
        nft = subprocess.run(harness.netns_argv(vm, ["nft", "list", "tables"]),
                             capture_output=True, text=True, timeout=10)
        assert "inet localdns" in nft.stdout, nft.stdout + nft.stderr
        d.stop()


test_vm_resolves_cluster_mesh_and_external_names_with_getent.timeout = 60


# ------------------------------------------------------------------ the keeper

KEEPER_UNIT = os.path.join(harness.REPO, "deploy", "systemd", "localdns-keeper.service")


class Keeper:
    """`localdns keeper`, as deploy/systemd/localdns-keeper.service runs it
    (its ExecStart's arguments), inside the VM's namespace."""

    def __init__(self, env, netns, config_path):
        with open(KEEPER_UNIT) as f:
            argv = [l.split("=", 1)[1].split()[1:] for l in f
                    if l.startswith("ExecStart=")][0]
        assert argv[:2] == ["keeper", "--config"], argv
        self.log = open(os.path.join(env.tmp, "keeper.log"), "w+")
        self.proc = harness.track_process(subprocess.Popen(
            harness.netns_argv(netns, [env.binary] + argv[:2] + [config_path]),
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log))

    def text(self):
        self.log.seek(0)
        return self.log.read()

    def until(self, line, seconds=10.0):
        deadline = time.monotonic() + seconds
        while line not in self.text():
            assert self.proc.poll() is None and time.monotonic() < deadline, \
                "no %r from the keeper:\n%s" % (line, self.text())
            time.sleep(0.02)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(10)
        harness.untrack_process(self.proc)
        assert rc == 0, (rc, self.text())


def keeper_socket(env):
    return {"socket": os.path.join(env.tmp, "keeper", "keeper.sock")}


def start_with_keeper(env, vm, path):
    os.makedirs(os.path.join(env.tmp, "keeper"), exist_ok=True)
    keeper = Keeper(env, vm, path)
    keeper.until("keeper: waiting for localdns")
    d = env.start_file(path, port=53, host=LINK, netns=vm)
    keeper.until("keeper: holding the serving process's sockets")
    # The keeper holds the sockets one step before localdns takes DNS (the
    # heartbeat's transaction): until then DNS fails open to the fallback,
    # which would answer the tests' questions in localdns's place.
    deadline = time.monotonic() + 10
    while test_node.CAPTURING not in d.stderr():
        assert d.alive() and time.monotonic() < deadline, d.stderr()
        time.sleep(0.02)
    return keeper, d


def dig_later(vm, name):
    """dig for name in the VM, not waited for; answer_of() reads it."""
    out = tempfile.TemporaryFile("w+")
    p = harness.track_process(subprocess.Popen(
        harness.netns_argv(vm, ["dig", "@" + LINK, "-t", "A", "-q", name, "+time=4",
                                "+tries=1"]),
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    return p, out


def answer_of(asked):
    p, out = asked
    p.wait(15)
    harness.untrack_process(p)
    out.seek(0)
    return harness.ToolReply(out.read(), p.returncode)


def test_vm_keeper_answers_through_the_fallback_endpoints_through_a_hang_and_a_crash(env):
    # The keeper unit on a VM whose fallback is a resolver it reaches (here
    # the VM's own, NSD): what queues while localdns hangs, and what comes
    # while it is dead, is answered there; glibc never notices.
    with vm_machine(env) as (vm, api, up):
        _, path = vm_config(env, api, up, keeper=keeper_socket(env),
                            nftables={"fallback_endpoints": [up.host]})
        keeper, d = start_with_keeper(env, vm, path)
        assert getent(vm, "www.site.example") == ["192.0.2.1"]
        try:
            harness.stop_process(d.proc.pid)  # else a worker may still answer it itself
            t0 = time.monotonic()
            got = getent(vm, "www.site.example")
            assert got == ["192.0.2.1"], "%r after %.2f s\n%s\n%s" % (
                got, time.monotonic() - t0, keeper.text(), d.tail(8))
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        assert "a worker stands still" in keeper.text(), keeper.text()
        d.proc.kill()
        d.proc.wait(5)
        keeper.until("keeper: the serving process is gone")
        assert getent(vm, "www.site.example") == ["192.0.2.1"], keeper.text()
        keeper.stop()


def test_vm_keeper_without_fallback_endpoints_leaves_a_hang_to_localdns_and_a_crash_refused(env):
    # With nowhere to send them, the keeper neither drops a stuck worker's
    # queries (it answers them when it turns again) nor keeps a dead
    # process's sockets (clients are refused at once and ask elsewhere,
    # as without a keeper).
    with vm_machine(env) as (vm, api, up):
        _, path = vm_config(env, api, up, keeper=keeper_socket(env))
        keeper, d = start_with_keeper(env, vm, path)
        assert getent(vm, "www.site.example") == ["192.0.2.1"]
        try:
            harness.stop_process(d.proc.pid)
            asked = dig_later(vm, "www.site.example")
            keeper.until("a worker stands still")
            time.sleep(0.3)                 # the keeper's looks go on: six of them
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        r = answer_of(asked)
        assert r.status == "NOERROR" and r.rdatas("A") == ["192.0.2.1"], r.text + keeper.text()
        d.proc.kill()
        d.proc.wait(5)
        keeper.until("with no fallback endpoint its sockets are closed at once")
        r = harness.dig(LINK, 53, "www.site.example", "A", timeout=2, netns=vm)
        assert "connection refused" in r.text, r.text
        keeper.stop()

