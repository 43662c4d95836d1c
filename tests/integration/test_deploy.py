"""deploy/: the plain manifests generated from the chart (must match a fresh
render), the VM example config (must pass --check-config) and the systemd
unit (systemd-analyze verify, and its hardening)."""

import os
import re
import shutil
import subprocess

import yaml

import chart
import harness

DEPLOY = os.path.join(harness.REPO, "deploy")
MANIFEST = os.path.join(DEPLOY, "kubernetes", "localdns.yaml")
UNIT = os.path.join(DEPLOY, "systemd", "localdns.service")


def test_deploy_manifests_match_the_chart(env):
    with open(MANIFEST) as f:
        header = [f.readline(), f.readline()]
        body = f.read()
    m = re.fullmatch(r"# chart-render (.*)\n", header[1])
    assert header[0].startswith("# Generated from chart/localdns") and m, header
    p, _ = chart.run_renderer(env, args=m.group(1).split())
    assert p.returncode == 0, p.stderr
    assert p.stdout == body, (
        "deploy/kubernetes/localdns.yaml is out of date with chart/localdns: run `make deploy`")
    objects = [o for o in yaml.safe_load_all(body) if o]
    kinds = {o["kind"] for o in objects}
    assert {"DaemonSet", "ConfigMap", "ClusterRole", "ClusterRoleBinding",
            "ServiceAccount"} <= kinds, kinds
    for o in objects:
        assert o["metadata"].get("namespace", "kube-system") == "kube-system", o["metadata"]
        assert o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubectl"


def test_deploy_vm_config_is_valid(env):
    path = os.path.join(DEPLOY, "vm", "config.yaml")
    p = env.run(["--check-config", path])
    assert p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr)
    with open(path) as f:
        config = yaml.safe_load(f)
    assert config["kubernetes"]["kubeconfig"] == \
        "/run/credentials/localdns.service/kubeconfig", "the unit's LoadCredential= path"
    assert config["control"]["socket"].startswith("/run/localdns/"), "the unit's RuntimeDirectory"


def _unit_settings():
    settings = {}
    with open(UNIT) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "[")):
                key, _, value = line.partition("=")
                settings.setdefault(key, []).append(value)
    return settings


def test_deploy_systemd_unit_settings(env):
    s = _unit_settings()
    caps = {"CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE"}
    assert set(s["CapabilityBoundingSet"][0].split()) == caps, s["CapabilityBoundingSet"]
    assert set(s["AmbientCapabilities"][0].split()) == caps, s["AmbientCapabilities"]
    for key, want in {"NoNewPrivileges": "yes", "ProtectSystem": "strict",
                      "RuntimeDirectory": "localdns", "Restart": "always",
                      "DynamicUser": "yes",
                      "ExecReload": "/bin/kill -HUP $MAINPID"}.items():
        assert s.get(key) == [want], "%s=%s, want %s" % (key, s.get(key), want)
    assert s["ExecStart"] == ["/usr/local/bin/localdns --config /etc/localdns/config.yaml"]
    # Fail open: nothing removes the table when the service stops.
    assert "ExecStopPost" not in s and "ExecStop" not in s, s.keys()


def test_deploy_systemd_unit_verifies(env):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        raise harness.Skip("systemd-analyze is not installed (Debian package systemd)")
    # verify checks that ExecStart's binary exists: use the one under test.
    d = os.path.join(env.tmp, "units")
    os.makedirs(d)
    unit = os.path.join(d, "localdns.service")
    with open(UNIT) as f:
        text = f.read().replace("/usr/local/bin/localdns", env.binary)
    with open(unit, "w") as f:
        f.write(text)
    p = subprocess.run([analyze, "verify", unit], capture_output=True, text=True, timeout=60)
    # Unknown or misspelt settings are only warnings: any output is a failure.
    assert p.returncode == 0 and not p.stderr.strip() and not p.stdout.strip(), \
        "systemd-analyze verify: exit %d: %s%s" % (p.returncode, p.stdout, p.stderr)

    p = subprocess.run([analyze, "security", "--offline=yes", "--no-pager", unit],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for localdns\.service: ([0-9.]+)", p.stdout)
    assert m, "systemd-analyze security: exit %d: %s" % (p.returncode, p.stdout + p.stderr)
    # 0 is a fully locked-down unit, 10 an unconfined one; systemd calls
    # anything below 3 "OK". This unit is at 2.0; its network access and
    # two capabilities are what it is for.
    assert float(m.group(1)) <= 2.5, "exposure %s:\n%s" % (m.group(1), p.stdout)
