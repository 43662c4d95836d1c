"""The operator's view shipped with the chart: the Prometheus alerts
(chart/localdns/alerts/localdns-rules.yaml, tested with promtool on synthetic
series in tests/alerts/) and the Grafana dashboard
(chart/localdns/dashboards/localdns.json). Every metric they name must be in
docs/metrics.md and in a real scrape, so neither can silently watch a metric
that was renamed or never existed."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import yaml

import chart
import harness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kube"))
import fakeapi as F  # noqa: E402
from test_node import Node  # noqa: E402

RULES = os.path.join(harness.REPO, "chart", "localdns", "alerts", "localdns-rules.yaml")
DASHBOARD = os.path.join(harness.REPO, "chart", "localdns", "dashboards", "localdns.json")
RULE_TESTS = os.path.join(harness.REPO, "tests", "alerts", "localdns-rules_test.yaml")
METRIC = re.compile(r"\b((?:localdns|process)_[a-z_]+)\b")


def promtool(*args):
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: `make deps` installs it (Debian package prometheus)"
    p = subprocess.run([tool] + list(args), capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def rules():
    with open(RULES) as f:
        return yaml.safe_load(f)


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def used_metrics():
    """{metric name: where} for every expression of the alerts and the dashboard
    (a histogram's _bucket/_sum/_count named as its family)."""
    exprs = [("alert " + r["alert"], r["expr"]) for g in rules()["groups"] for r in g["rules"]]
    exprs += [("panel " + p["title"], t["expr"]) for p in dashboard()["panels"]
              for t in p["targets"]]
    exprs += [("variable " + v["name"], v["definition"])
              for v in dashboard()["templating"]["list"] if "definition" in v]
    out = {}
    for where, expr in exprs:
        for name in METRIC.findall(expr):
            out.setdefault(re.sub(r"_(bucket|sum|count)$", "", name), where)
    return out


def test_alerts_fire_and_stay_silent_on_their_synthetic_series(env):
    rc, out = promtool("check", "rules", RULES)
    assert rc == 0, out
    names = {r["alert"] for g in rules()["groups"] for r in g["rules"]}
    assert len(names) >= 8, names
    with open(RULE_TESTS) as f:
        tested = {t["alertname"] for case in yaml.safe_load(f)["tests"]
                  for t in case["alert_rule_test"]}
    assert tested == names, "alerts without a promtool test: %s" % sorted(names - tested)
    rc, out = promtool("test", "rules", RULE_TESTS)
    assert rc == 0, out


def test_every_alert_has_a_runbook(env):
    with open(os.path.join(harness.REPO, "docs", "operations.md")) as f:
        headings = {re.sub(r"[^a-z0-9]", "", l.lower()) for l in f if l.startswith("#")}
    for g in rules()["groups"]:
        for r in g["rules"]:
            anchor = r["annotations"]["runbook"].split("#")[1]
            assert anchor == r["alert"].lower(), r
            assert anchor in headings, "no runbook section for %s in docs/operations.md" % anchor


def test_the_chart_ships_the_alerts_and_the_dashboard_when_asked(env):
    plain = chart.render(env)
    assert not plain.all("PrometheusRule") and not [
        c for c in plain.all("ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
    r = chart.render(env, sets=["prometheusRule.enabled=true",
                                "prometheusRule.labels.release=prometheus",
                                "grafanaDashboard.enabled=true"])
    rule = r.one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1", rule
    assert rule["metadata"]["labels"]["release"] == "prometheus", rule
    assert rule["spec"] == rules(), "the PrometheusRule is not the rules file as it is"
    cm = r.one("ConfigMap", "localdns-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1", cm["metadata"]
    assert json.loads(cm["data"]["localdns.json"]) == dashboard()


def test_every_metric_the_alerts_and_the_dashboard_use_is_documented_and_scraped(env):
    used = used_metrics()
    with open(os.path.join(harness.REPO, "docs", "metrics.md")) as f:
        documented = set(re.findall(r"^\| `([a-z_]+)` \|", f.read(), re.M))
    missing = {m: w for m, w in used.items() if m not in documented}
    assert not missing, "not in docs/metrics.md: %s" % missing

    scraped = set()
    # Kubernetes metrics: a daemon watching the fake API server, in a
    # memory cgroup of its own with a limit (localdns_memory_limit_bytes).
    with F.FakeAPI() as api:
        kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"))
        mport = harness.free_port()
        d = env.start(kubernetes={"enabled": True, "kubeconfig": kc, "node_name": "node-a"},
                      metrics={"listen": "127.0.0.1:%d" % mport})
        with harness.MemoryCgroup(64 << 20) as cg:
            cg.add(d.proc.pid)
            # scraped once the first sync is in: some figures exist only from then on
            deadline = time.monotonic() + 10
            while True:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport,
                                            timeout=5) as h:
                    text = h.read().decode()
                if re.search(r"(?m)^localdns_kubernetes_synced 1$", text):
                    break
                assert time.monotonic() < deadline, "no Kubernetes sync within 10 s"
                time.sleep(0.05)
            scraped |= set(re.findall(r"(?m)^([a-z_]+?)(?:_bucket|_sum|_count)?[{ ]", text))
    # Node integration metrics: a daemon on a node of network namespaces.
    n = Node(env)
    cfg = n.config()
    cfg["metrics"] = {"listen": "127.0.0.1:9253"}
    cfg["keeper"] = {"socket": os.path.join(env.tmp, "keeper.sock")}  # none there: connected 0
    n.start(config=cfg)
    text = n.run(n.node, sys.executable, "-c", "import urllib.request as u; print(u.urlopen("
                 "'http://127.0.0.1:9253/metrics', timeout=5).read().decode(), end='')").stdout
    scraped |= set(re.findall(r"(?m)^([a-z_]+?)(?:_bucket|_sum|_count)?[{ ]", text))
    missing = {m: w for m, w in used.items() if m not in scraped}
    assert not missing, "never in a scrape: %s" % missing


test_every_metric_the_alerts_and_the_dashboard_use_is_documented_and_scraped.timeout = 40
