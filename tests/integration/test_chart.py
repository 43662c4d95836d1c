"""The Helm chart (chart/localdns), rendered by tests/chart's renderer
(Helm's template engine: text/template + sprig) with the default values and
with value sets for each way it is installed; the objects it produces are
checked field by field, the rendered ConfigMap by `localdns --check-config`,
and a mistyped value must fail values.schema.json."""

import os
import re

import yaml

import chart
import harness

NAMESPACED = {"ServiceAccount", "ConfigMap", "Service", "DaemonSet", "ServiceMonitor"}

INTERCEPT = {
    "config": {"nftables": {"intercept": ["10.96.0.10"]}},
    "kubeDnsUpstream": {"enabled": True, "clusterIP": "10.96.0.11"},
}


def _release_labels(obj, release="localdns", service="Helm"):
    labels = obj["metadata"]["labels"]
    want = {
        "app.kubernetes.io/name": "localdns",
        "app.kubernetes.io/instance": release,
        "app.kubernetes.io/version": _chart_meta()["appVersion"],
        "app.kubernetes.io/managed-by": service,
        "helm.sh/chart": "localdns-" + _chart_meta()["version"],
    }
    for k, v in want.items():
        assert labels.get(k) == v, "%s %s: label %s=%r, want %r" % (
            obj["kind"], obj["metadata"]["name"], k, labels.get(k), v)


def _chart_meta():
    with open(os.path.join(chart.CHART, "Chart.yaml")) as f:
        return yaml.safe_load(f)


def test_chart_metadata_matches_version(env):
    meta = _chart_meta()
    with open(os.path.join(harness.REPO, "VERSION")) as f:
        version = f.read().strip()
    assert meta["appVersion"] == version, "appVersion %r, VERSION %r" % (
        meta["appVersion"], version)
    assert meta["apiVersion"] == "v2" and meta["name"] == "localdns", meta


def test_chart_default_objects(env):
    r = chart.render(env, args=["--namespace", "dns-system"])
    assert r.kinds() == [
        ("ServiceAccount", "localdns"), ("ConfigMap", "localdns"),
        ("ClusterRole", "localdns"), ("ClusterRoleBinding", "localdns"),
        ("Service", "localdns-metrics"), ("DaemonSet", "localdns"),
    ], "objects (in install order): %s" % r.kinds()
    for obj in r.objects:
        _release_labels(obj)
        ns = obj["metadata"].get("namespace")
        if obj["kind"] in NAMESPACED:
            assert ns == "dns-system", "%s in namespace %r" % (obj["kind"], ns)
        else:
            assert ns is None, "cluster-scoped %s has namespace %r" % (obj["kind"], ns)
    assert "# Source: localdns/templates/daemonset.yaml" in r.text, r.text[:300]


def test_chart_daemonset_pod_spec(env):
    r = chart.render(env)
    ds = r.one("DaemonSet")
    spec = r.pod["spec"]
    assert spec["hostNetwork"] is True, spec
    assert spec["dnsPolicy"] == "Default", spec["dnsPolicy"]
    assert spec["priorityClassName"] == "system-node-critical", spec
    assert spec["tolerations"] == [{"operator": "Exists"}], spec["tolerations"]
    assert spec["serviceAccountName"] == r.one("ServiceAccount")["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is True, "in-cluster mode needs the token"
    assert spec["terminationGracePeriodSeconds"] == 10, spec
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}

    # The selector is the pods' stable labels, and no checksum annotation
    # restarts pods on a config edit (the daemon reloads it live).
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "localdns",
                        "app.kubernetes.io/instance": "localdns"}, selector
    labels = r.pod["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in selector.items()), labels
    assert not any("checksum" in k for k in r.pod["metadata"].get("annotations", {}))
    # The new pod starts beside the old one (a DaemonSet's surge needs
    # maxUnavailable 0), which the scheduler allows only without host
    # ports: with hostNetwork every declared containerPort is one.
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}, ds["spec"]["updateStrategy"]

    c = r.container
    assert c["image"] == "localdns:" + _chart_meta()["appVersion"], c["image"]
    assert c["args"] == ["--config", "/etc/localdns/config.yaml"], c["args"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} \
        in c["env"], c["env"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} \
        in c["env"], c["env"]
    assert "ports" not in c, c["ports"]

    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_BIND_SERVICE"]}, sc
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, sc
    assert sc["runAsUser"] == 0 and not sc.get("privileged"), sc

    # The ConfigMap as a directory (a subPath mount never sees kubelet's
    # symlink swap), and a writable /run/localdns for the control socket.
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["config"] == {"name": "config", "mountPath": "/etc/localdns",
                                "readOnly": True}, mounts["config"]
    assert mounts["run"]["mountPath"] == "/run/localdns", mounts["run"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["config"]["configMap"]["name"] == r.configmap["metadata"]["name"]
    assert "emptyDir" in volumes["run"], volumes["run"]


def test_chart_keeper_container(env):
    r = chart.render(env)
    spec, c, k = r.pod["spec"], r.container, r.keeper
    assert k is not None, "no keeper container by default"
    # The same image and config file, the keeper subcommand.
    assert k["image"] == c["image"] and k["args"] == ["keeper", "--config",
                                                      "/etc/localdns/config.yaml"], k
    sock = r.config["keeper"]["socket"]
    assert sock == "/run/localdns-keeper/keeper.sock", sock
    # Both containers mount the pod's own in-memory emptyDir the socket is in.
    for container in (c, k):
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts.get("keeper") == os.path.dirname(sock), container["volumeMounts"]
        assert mounts.get("config") == "/etc/localdns", container["volumeMounts"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["keeper"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}, volumes
    # The keeper asks the kernel about localdns's threads: one PID namespace.
    assert spec["shareProcessNamespace"] is True, spec
    # NET_ADMIN alone (the heartbeat, the fallback maps), nothing to gain.
    sc = k["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}, sc
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, sc
    assert "livenessProbe" not in k and "ports" not in k, k
    # It loads the same config, which may name the pod's environment
    # (metrics.listen: "${POD_IP}:9253" by default): the same env.
    assert k["env"] == c["env"], (k.get("env"), c["env"])
    assert k["resources"] == {"requests": {"cpu": "5m", "memory": "8Mi"},
                              "limits": {"memory": "32Mi"}}, k["resources"]
    chart.check_config(env, r, "with the keeper")

    # Off, or nothing to keep (no nftables table): the single-container pod of before.
    for values in ({"keeper": {"enabled": False}},
                   {"config": {"nftables": {"enabled": False}}}):
        r = chart.render(env, values)
        assert r.keeper is None and "shareProcessNamespace" not in r.pod["spec"], values
        assert r.config["keeper"]["socket"] == "", values
        assert "keeper" not in {v["name"] for v in r.pod["spec"]["volumes"]}, values
        assert "keeper" not in {m["name"] for m in r.container["volumeMounts"]}, values


def _probes(r):
    c = r.container
    return c.get("livenessProbe"), c.get("readinessProbe")


def test_chart_probes_follow_health_listen(env):
    # Loopback on the host network: the kubelet reaches it, pods do not, so
    # no pod can take the places the probes need (docs/security.md).
    live, ready = _probes(chart.render(env))
    assert live["httpGet"] == {"path": "/health", "host": "127.0.0.1", "port": 8080,
                               "scheme": "HTTP"}, live
    assert ready["httpGet"] == {"path": "/ready", "host": "127.0.0.1", "port": 8080,
                                "scheme": "HTTP"}, ready
    assert live["periodSeconds"] == 10 and ready["periodSeconds"] == 5, (live, ready)

    cases = [("[fd00::53]:9000", "fd00::53", 9000), ("0.0.0.0:8081", "127.0.0.1", 8081),
             ("[::]:8082", "::1", 8082), ("10.1.2.3:80", "10.1.2.3", 80)]
    for listen, host, port in cases:
        live, ready = _probes(chart.render(env, {"config": {"health": {"listen": listen}}}))
        for probe in (live, ready):
            got = (probe["httpGet"]["host"], probe["httpGet"]["port"])
            assert got == (host, port), "health.listen %s: probe at %s, want %s" % (
                listen, got, (host, port))
    # the pod's address: the kubelet's own default host
    live, ready = _probes(chart.render(env, {"config": {"health": {"listen": "${POD_IP}:8080"}}}))
    for probe in (live, ready):
        assert "host" not in probe["httpGet"] and probe["httpGet"]["port"] == 8080, probe
    err = chart.render_fails(env, {"config": {"health": {"listen": "${HOST_IP}:8080"}}})
    assert "the kubelet cannot probe ${HOST_IP}" in err, err

    live, ready = _probes(chart.render(env, sets=["config.health.listen="]))
    assert live is None and ready is None, "health off, still probed: %r %r" % (live, ready)


def _rules(rendered):
    """{(apiGroup, resource): sorted verbs} of the ClusterRole."""
    rules = {}
    for rule in rendered.one("ClusterRole")["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                assert (group, res) not in rules, "%s/%s twice" % (group, res)
                rules[(group, res)] = sorted(rule["verbs"])
    return rules


def test_chart_rbac_is_list_watch_only(env):
    r = chart.render(env, args=["--namespace", "kube-system"])
    # No Pods by default: only autopath, verified pod names and dnstap read them.
    want = {("", "services"): ["list", "watch"], ("", "namespaces"): ["list", "watch"],
            ("discovery.k8s.io", "endpointslices"): ["list", "watch"]}
    assert _rules(r) == want, _rules(r)
    for sets in (["config.cluster.autopath=true"], ["config.cluster.pods=verified"],
                 ["config.cluster.autopath=true", "config.cluster.pods=disabled"],
                 ["config.dnstap.socket=/run/dnstap/tap.sock"],
                 ["config.dnstap.address=10.0.0.9:6000",
                  "config.dnstap.messages={client_response}"]):
        rules = _rules(chart.render(env, sets=sets))
        assert rules == {**want, ("", "pods"): ["list", "watch"]}, (sets, rules)
    for sets in (["config.cluster.pods=disabled"], ["config.cluster.pods=insecure"],
                 # dnstap without client messages names no pod
                 ["config.dnstap.socket=/run/dnstap/tap.sock",
                  "config.dnstap.messages={resolver_query}"]):
        assert _rules(chart.render(env, sets=sets)) == want, sets
    # Istio's and MCS's resources only with the feature that reads them
    # (mesh.istio reads Pods too: who asks, and what a selector picks).
    istio = {("networking.istio.io", "serviceentries"): ["list", "watch"],
             ("networking.istio.io", "workloadentries"): ["list", "watch"]}
    mcs = {("multicluster.x-k8s.io", "serviceimports"): ["list", "watch"]}
    pods = {("", "pods"): ["list", "watch"]}
    for sets, extra in ((["config.mesh.istio=true"], {**istio, **pods}),
                        (["config.multicluster.enabled=true"], mcs),
                        (["config.mesh.istio=true", "config.multicluster.enabled=true"],
                         {**istio, **pods, **mcs}),
                        (["config.mesh.istio=false", "config.multicluster.enabled=false"], {})):
        rules = _rules(chart.render(env, sets=sets))
        assert rules == {**want, **extra}, (sets, rules)
    binding = r.one("ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "localdns"}, binding
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "localdns",
                                    "namespace": "kube-system"}], binding

    # No watch, no API access at all.
    r = chart.render(env, sets=["config.kubernetes.enabled=false"])
    assert not r.all("ClusterRole") and not r.all("ClusterRoleBinding"), r.kinds()
    assert r.pod["spec"]["automountServiceAccountToken"] is False


def test_chart_config_has_every_key_with_its_default(env):
    documented = chart.documented_defaults()
    source = chart.source_keys()
    assert set(documented) == source, (
        "docs/configuration.md and src/config/config.c disagree: only in docs %s, "
        "only in the source %s" % (sorted(set(documented) - source),
                                   sorted(source - set(documented))))
    config = chart.render(env).config
    app_version = _chart_meta()["appVersion"]
    for path, default in sorted(documented.items()):
        section, key = path.split(".")
        assert key in config.get(section, {}), "%s missing from the rendered config.yaml" % path
        if path == "chaos.version":    # "localdns VERSION": the build's version
            default = default.replace("VERSION", app_version)
        if path == "metrics.listen":   # the pod's (the node's) address, for Prometheus
            default = default.replace("127.0.0.1", "${POD_IP}")
        if path == "keeper.socket":    # the pod's keeper container (keeper.enabled)
            default = "/run/localdns-keeper/keeper.sock"
        got = config[section][key]
        assert got == default, "%s: rendered %r, documented default %r" % (path, got, default)
    extra = {"%s.%s" % (s, k) for s, keys in config.items() for k in keys} - set(documented)
    assert not extra, "rendered keys the daemon does not know: %s" % sorted(extra)


def test_live_reload_docs_say_what_the_schema_declares(env):
    # The schema's .reload per key is what daemon/reload.c does; the docs'
    # "Live reload" section is what operators read.
    restart_only = chart.source_restart_only()
    assert set(restart_only) == chart.source_keys()
    live, restart = chart.documented_reload(set(restart_only))
    both = live & restart
    assert not both, "docs/configuration.md calls these both live and restart-only: %s" % (
        sorted(both))
    for documented, want, says in ((live, False, "live"), (restart, True, "restart-only")):
        unknown = documented - set(restart_only)
        assert not unknown, "Live reload names keys the schema lacks: %s" % sorted(unknown)
        wrong = sorted(k for k in documented if restart_only[k] != want)
        assert not wrong, "Live reload calls these %s, config.c's .reload does not: %s" % (
            says, wrong)
    missing = set(restart_only) - live - restart
    assert not missing, "Live reload says nothing of: %s" % sorted(missing)


def test_chart_configs_pass_check_config(env):
    # The node's paths may not exist here: point the files a value set
    # names at this machine's.
    value_sets = {
        "default": {},
        "intercept": INTERCEPT,
        "metrics-off": {"config": {"metrics": {"listen": ""}}},
        "everything": {
            "configFiles": {"records.yaml": "- {name: db.corp.internal, a: [10.0.0.5]}\n"},
            "config": {
                "listen": {"addresses": ["169.254.20.10", "fd00:53::10"], "workers": 2},
                "cluster": {"pods": "verified", "fallback_servers": ["10.96.0.10"]},
                "static": {"files": ["records.yaml"], "records": [
                    {"name": "db.prod.svc.cluster.local", "a": ["10.0.0.5"],
                     "aaaa": ["fd00::5"]},
                    {"name": "_mysql._tcp.db.prod.svc.cluster.local",
                     "srv": [{"port": 3306, "target": "db.prod.svc.cluster.local"}]}]},
                "upstream": {"servers": ["10.0.0.2", "10.0.0.3:5353"],
                             "forward_zones": {"corp.internal": ["10.1.0.1"]}},
                "cache": {"size": "128MiB", "min_ttl": "5s"},
                "log": {"format": "json", "level": "debug"},
                "chaos": {"enabled": True, "id": "node-a"},
            },
        },
    }
    value_sets["dual-stack (README)"] = chart.readme_example("### Dual-stack")
    for name, values in value_sets.items():
        chart.check_config(env, chart.render(env, values), name)
    listen = chart.render(env, value_sets["dual-stack (README)"]).config["listen"]
    assert listen["addresses"] == ["169.254.20.10", "fd00:169:254::10"], listen


def test_chart_intercept_mode(env):
    r = chart.render(env, INTERCEPT, args=["--namespace", "dns"])
    svc = r.one("Service", "kube-dns-upstream")
    assert svc["metadata"]["namespace"] == "kube-system", svc["metadata"]
    assert svc["spec"]["clusterIP"] == "10.96.0.11", svc["spec"]
    assert svc["spec"]["selector"] == {"k8s-app": "kube-dns"}, svc["spec"]
    ports = {(p["port"], p["targetPort"], p["protocol"]) for p in svc["spec"]["ports"]}
    assert ports == {(53, 53, "UDP"), (53, 53, "TCP")}, ports
    config = r.config
    assert config["cluster"]["fallback_servers"] == ["10.96.0.11"], config["cluster"]
    assert config["nftables"]["intercept"] == ["10.96.0.10"], config["nftables"]
    assert "Nothing to change in the kubelet" in r.notes, r.notes
    assert "--cluster-dns=" not in r.notes, r.notes

    # Link-local mode: the kubelet flag to set; the warning about a gap only
    # when neither the watched kube-dns endpoints nor a static list can fill
    # the fallback map.
    notes = chart.render(env).notes
    assert "--cluster-dns=169.254.20.10" in notes and "fallback_endpoints" not in notes, notes
    for off in (["config.nftables.fallback_service="], ["config.kubernetes.enabled=false"]):
        notes = chart.render(env, sets=off).notes
        assert "fallback_endpoints" in notes and "fails until localdns is back" in notes, notes
        notes = chart.render(env, sets=off + ["config.nftables.fallback_endpoints={10.244.0.5}"]).notes
        assert "fallback_endpoints" not in notes, notes

    # An address already listed is not repeated; no clusterIP is an error.
    r = chart.render(env, {"kubeDnsUpstream": {"enabled": True, "clusterIP": "10.96.0.11"},
                           "config": {"cluster": {"fallback_servers": ["10.96.0.11"]}}})
    assert r.config["cluster"]["fallback_servers"] == ["10.96.0.11"], r.config["cluster"]
    err = chart.render_fails(env, sets=["kubeDnsUpstream.enabled=true"])
    assert "kubeDnsUpstream.clusterIP is required" in err, err


def test_chart_metrics_service_and_off(env):
    r = chart.render(env)
    svc = r.one("Service", "localdns-metrics")
    assert svc["spec"]["clusterIP"] == "None", svc["spec"]
    assert svc["spec"]["selector"] == r.one("DaemonSet")["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9253, "targetPort": 9253,
                                     "protocol": "TCP"}], svc["spec"]["ports"]
    assert not r.all("ServiceMonitor"), r.kinds()

    r = chart.render(env, sets=["config.metrics.listen=127.0.0.1:9300"])
    port = r.one("Service", "localdns-metrics")["spec"]["ports"][0]
    assert (port["port"], port["targetPort"]) == (9300, 9300), port

    r = chart.render(env, sets=["config.metrics.listen="])
    assert not [o for o in r.all("Service") if o["metadata"]["name"].endswith("-metrics")], r.kinds()
    assert r.config["metrics"]["listen"] == ""

    err = chart.render_fails(env, sets=["config.metrics.listen=",
                                        "metrics.serviceMonitor.enabled=true"])
    assert "needs the metrics Service" in err, err


def test_chart_service_monitor(env):
    r = chart.render(env, {"metrics": {"serviceMonitor": {
        "enabled": True, "labels": {"release": "prometheus"}, "interval": "15s"}}},
        args=["--namespace", "kube-system"])
    sm = r.one("ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1", sm["apiVersion"]
    assert sm["metadata"]["namespace"] == "kube-system", sm["metadata"]
    assert sm["metadata"]["labels"]["release"] == "prometheus", sm["metadata"]["labels"]
    _release_labels(sm)
    selector = sm["spec"]["selector"]["matchLabels"]
    svc_labels = r.one("Service", "localdns-metrics")["metadata"]["labels"]
    assert all(svc_labels.get(k) == v for k, v in selector.items()), (selector, svc_labels)
    assert "app.kubernetes.io/component" not in r.pod["metadata"]["labels"], \
        "the selector must not match the pods' own labels"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["kube-system"]}, sm["spec"]
    [ep] = sm["spec"]["endpoints"]
    assert (ep["port"], ep["path"], ep["interval"]) == ("metrics", "/metrics", "15s"), ep
    # Last in the stream: a kind Helm does not know is applied after the rest.
    assert r.kinds()[-1] == ("ServiceMonitor", "localdns"), r.kinds()


def test_chart_resources(env):
    res = chart.render(env).container["resources"]
    assert res == {"requests": {"cpu": "50m", "memory": "64Mi"},
                   "limits": {"memory": "256Mi"}}, res
    custom = {"requests": {"cpu": "200m", "memory": "128Mi"},
              "limits": {"cpu": "1", "memory": "512Mi"}}
    res = chart.render(env, {"resources": custom}).container["resources"]
    assert res == custom, res
    # null removes a default, as in Helm: here the memory limit.
    res = chart.render(env, sets=["resources.limits=null"]).container["resources"]
    assert res == {"requests": {"cpu": "50m", "memory": "64Mi"}}, res


def test_chart_kubeconfig_instead_of_in_cluster(env):
    r = chart.render(env)
    assert r.config["kubernetes"]["kubeconfig"] == "", r.config["kubernetes"]
    assert r.config["kubernetes"]["node_name"] == "", "node name comes from $NODE_NAME"
    assert not [m for m in r.container["volumeMounts"]
                if m["name"] not in ("config", "run", "keeper")]

    r = chart.render(env, {
        "config": {"kubernetes": {"kubeconfig": "/etc/localdns-kube/kubeconfig"}},
        "extraVolumes": [{"name": "kube", "secret": {"secretName": "localdns-kubeconfig"}}],
        "extraVolumeMounts": [{"name": "kube", "mountPath": "/etc/localdns-kube",
                               "readOnly": True}]})
    assert r.pod["spec"]["automountServiceAccountToken"] is False
    assert {"name": "kube", "secret": {"secretName": "localdns-kubeconfig"}} \
        in r.pod["spec"]["volumes"], r.pod["spec"]["volumes"]
    assert {"name": "kube", "mountPath": "/etc/localdns-kube", "readOnly": True} \
        in r.container["volumeMounts"], r.container["volumeMounts"]
    chart.check_config(env, r, "kubeconfig")


def test_chart_names_image_and_templated_annotations(env):
    r = chart.render(env, args=["--release-name", "dns"])
    assert {n for _, n in r.kinds()} == {"dns-localdns", "dns-localdns-metrics"}, r.kinds()
    r = chart.render(env, {"fullnameOverride": "nodedns",
                           "image": {"repository": "registry.example/localdns", "tag": "1.2.3"},
                           "podAnnotations": {"owner": "{{ .Release.Name }}-team"},
                           "podLabels": {"tier": "dns"}},
                     args=["--release-name", "edge"])
    assert r.one("DaemonSet")["metadata"]["name"] == "nodedns", r.kinds()
    assert r.container["image"] == "registry.example/localdns:1.2.3", r.container["image"]
    assert r.config["chaos"]["version"] == "localdns 1.2.3", r.config["chaos"]
    assert r.pod["metadata"]["annotations"] == {"owner": "edge-team"}, r.pod["metadata"]
    assert r.pod["metadata"]["labels"]["tier"] == "dns", r.pod["metadata"]["labels"]
    digest = "sha256:" + "ab" * 32
    r = chart.render(env, sets=["image.digest=" + digest])
    assert r.container["image"] == "localdns@" + digest, r.container["image"]


def test_chart_values_merge_like_helm(env):
    r = chart.render(env, {"config": {"cache": {"size": "32MiB"}}},
                     sets=["config.cache.prefetch=false,nodeSelector=null",
                           r"podLabels.example\.com/team=dns",
                           "config.upstream.servers={10.0.0.2,10.0.0.3:5353}"])
    cache = r.config["cache"]
    assert cache["size"] == "32MiB" and cache["prefetch"] is False, cache
    assert cache["max_ttl"] == "1d", "other cache keys keep their defaults: %r" % cache
    assert "nodeSelector" not in r.pod["spec"], r.pod["spec"]
    assert r.pod["metadata"]["labels"]["example.com/team"] == "dns"
    assert r.config["upstream"]["servers"] == ["10.0.0.2", "10.0.0.3:5353"], r.config["upstream"]


def test_chart_schema_rejects_bad_values(env):
    bad = [
        (["config.listen.port=fifty-three"], "config.listen.port"),
        (["config.listen.prot=53"], "prot"),
        (["config.listen.workers=-1"], "config.listen.workers"),
        (["config.cache.size=64MB"], "config.cache.size"),
        (["config.upstream.timeout=2"], "config.upstream.timeout"),
        (["config.log.level=verbose"], "config.log.level"),
        (["config.listen.addresses={}"], "config.listen.addresses"),
        (["config.nftables.intercept={kube-dns}"], "config.nftables.intercept"),
        (["config.interface.manage=yes"], "config.interface.manage"),
        (["config.cluster.fallthrough={cluster.local}"], "config.cluster.fallthrough"),
        (["config.health.listen=169.254.20.10"], "config.health.listen"),
        (["kubeDnsUpstream.clusterIP=kube-dns"], "kubeDnsUpstream.clusterIP"),
        (["updateStrategy.type=Rolling"], "updateStrategy.type"),
        (["tolerations=none"], "tolerations"),
        (["imagee.tag=1"], "imagee"),
        (["configFiles.config\\.yaml=x"], "configFiles"),
    ]
    for sets, names in bad:
        err = chart.render_fails(env, sets=sets)
        assert "values don't meet the specifications" in err and names in err, \
            "--set %s: %s" % (sets, err)
    err = chart.render_fails(env, {"config": {"static": {"records": [{"name": "x", "a": "10.0.0.1"}]}}})
    assert "config.static.records.0.a" in err, err


def test_chart_template_errors_name_the_place(env):
    err = chart.render_fails(env, sets=["serviceAccount.create=false"])
    assert re.search(r"execution error at \(localdns/templates/\w+\.yaml:\d+:\d+\): "
                     r"serviceAccount\.name is required", err), err
    r = chart.render(env, sets=["serviceAccount.create=false", "serviceAccount.name=dns"])
    assert not r.all("ServiceAccount") and r.pod["spec"]["serviceAccountName"] == "dns"
    err = chart.render_fails(env, args=["--kube-version", "v1.20.5"])
    assert "incompatible with Kubernetes v1.20.5" in err, err


def test_chart_readme_values_table(env):
    """Every value of values.yaml has a row with its default in the chart's
    README (a map may be documented whole), and every row names a value."""
    table = chart.readme_values()
    values = chart.chart_values()
    missing, wrong = [], []

    def walk(prefix, node):
        if prefix in table:
            if table[prefix] != node:
                wrong.append("%s: README %r, values.yaml %r" % (prefix, table[prefix], node))
            return
        if isinstance(node, dict) and node and prefix != "config":
            for k, v in node.items():
                walk(prefix + "." + k if prefix else k, v)
        elif prefix != "config":
            missing.append(prefix)

    walk("", values)
    assert not missing and not wrong, "README values table: missing %s; wrong %s" % (
        missing, wrong)

    def exists(path):
        node = values
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True
    stale = [p for p in table if not exists(p)]
    assert not stale, "README rows for values that do not exist: %s" % stale
