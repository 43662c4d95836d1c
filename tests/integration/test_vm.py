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

import ctypes
import os
import shutil
import subprocess
import sys
import threading
import time

import yaml

import authority
import harness

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

VM_CONFIG = os.path.join(harness.REPO, "deploy", "vm", "config.yaml")
SITE = authority.zone_path("site.example.")
LINK = "169.254.20.10"


def api_server_in(netns, api):
    """Start api with its socket bound inside netns (only the binding
    thread enters it)."""
    failure = []

    def listen_inside():
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            with open("/var/run/netns/" + netns) as f:
                if libc.setns(f.fileno(), 0x40000000) != 0:  # CLONE_NEWNET
                    raise OSError(ctypes.get_errno(), "setns")
            api.start()
        except Exception as e:  # reported by the caller's thread
            failure.append(e)
    t = threading.Thread(target=listen_inside)
    t.start()
    t.join(10)
    if failure:
        raise failure[0]
    return api


def getent(netns, name):
    """The IPv4 addresses glibc's getent finds for name inside netns."""
    p = subprocess.run(harness.netns_argv(netns, ["getent", "ahostsv4", name]),
                       capture_output=True, text=True, timeout=15)
    return sorted({line.split()[0] for line in p.stdout.splitlines()}) if p.returncode == 0 \
        else "exit %d" % p.returncode


def vm_config(env, api, up):
    """deploy/vm/config.yaml, changed only where this machine is no VM."""
    with open(VM_CONFIG) as f:
        cfg = yaml.safe_load(f)
    cfg["kubernetes"]["kubeconfig"] = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))
    cfg["interface"]["kind"] = "loopback"          # no dummy links on this kernel
    cfg["upstream"]["servers"] = [up.addr]         # the VM's real resolver
    cfg["control"]["socket"] = os.path.join(env.tmp, "run", "control.sock")
    path = os.path.join(env.tmp, "config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return cfg, path


def test_vm_resolves_cluster_mesh_and_external_names_with_getent(env):
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
                cfg, path = vm_config(env, api, up)
                assert cfg["mesh"]["istio"] and not cfg["kubernetes"]["node_name"], cfg
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
        finally:
            api.stop()
    finally:
        shutil.rmtree(etc, ignore_errors=True)


test_vm_resolves_cluster_mesh_and_external_names_with_getent.timeout = 60
