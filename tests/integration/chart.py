"""chart: render the Helm chart with tests/chart's renderer (built next to
the daemon as tests/chart-render) and read the references its output is
checked against: the keys and defaults of docs/configuration.md (and
which of them its "Live reload" section says apply live), the key table of
src/config/config.c (and what each key's .reload declares), and the values
table of the chart's README.

    r = chart.render(env, values={"config": {...}}, sets=["a.b=1"])
    r.one("DaemonSet")["spec"]...     r.config (config.yaml, parsed)
    r.notes                           r.objects, r.text
"""

import json
import os
import re
import subprocess

import yaml

import harness

CHART = os.path.join(harness.REPO, "chart", "localdns")


def renderer(env):
    return os.path.join(os.path.dirname(env.binary), "tests", "chart-render")


class Rendered:
    def __init__(self, text, notes):
        self.text = text
        self.notes = notes
        self.objects = [d for d in yaml.safe_load_all(text) if d]

    def all(self, kind):
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind, name=None):
        found = [o for o in self.all(kind)
                 if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, "want one %s %s, got %d: %s" % (
            kind, name or "", len(found), self.kinds())
        return found[0]

    def kinds(self):
        return [(o["kind"], o["metadata"]["name"]) for o in self.objects]

    @property
    def configmap(self):
        return self.one("ConfigMap")

    @property
    def config_text(self):
        return self.configmap["data"]["config.yaml"]

    @property
    def config(self):
        return yaml.safe_load(self.config_text)

    @property
    def pod(self):
        return self.one("DaemonSet")["spec"]["template"]

    @property
    def container(self):
        """The localdns container."""
        return self.named_container("localdns")

    @property
    def keeper(self):
        """The keeper container, or None."""
        found = [c for c in self.pod["spec"]["containers"] if c["name"] == "keeper"]
        return found[0] if found else None

    def container_env(self, name, node_name, pod_ip):
        """The environment the kubelet gives container name on a node:
        its env list, fieldRefs resolved (on the host network the pod's IP
        is the node's address)."""
        fields = {"spec.nodeName": node_name, "status.podIP": pod_ip}
        env = {}
        for e in self.named_container(name).get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            else:
                env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        return env

    def named_container(self, name):
        containers = self.pod["spec"]["containers"]
        assert {c["name"] for c in containers} <= {"localdns", "keeper"}, \
            "containers: %r" % containers
        return [c for c in containers if c["name"] == name][0]


def run_renderer(env, values=None, sets=(), args=()):
    """Run the renderer; values (a dict) goes in as a -f file. Returns the
    CompletedProcess and the NOTES.txt path."""
    argv = [renderer(env)]
    if values is not None:
        path = os.path.join(env.tmp, "values-%d.yaml" % len(os.listdir(env.tmp)))
        with open(path, "w") as f:
            json.dump(values, f)          # JSON is YAML
        argv += ["-f", path]
    for s in sets:
        argv += ["--set", s]
    notes = os.path.join(env.tmp, "NOTES-%d.txt" % len(os.listdir(env.tmp)))
    argv += ["--notes", notes] + list(args) + [CHART]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    return p, notes


def render(env, values=None, sets=(), args=()):
    p, notes = run_renderer(env, values, sets, args)
    assert p.returncode == 0, "render failed (exit %d): %s" % (p.returncode, p.stderr)
    with open(notes) as f:
        return Rendered(p.stdout, f.read())


def render_fails(env, values=None, sets=(), args=()):
    """Render expecting failure; returns the error text."""
    p, _ = run_renderer(env, values, sets, args)
    assert p.returncode == 1, "render of values=%r sets=%r: exit %d, want 1; stderr %r" % (
        values, sets, p.returncode, p.stderr)
    assert p.stdout == "", "a failed render printed manifests"
    return p.stderr


def check_config(env, rendered, name):
    """Write the rendered config.yaml (and the ConfigMap's other files) to a
    directory and run `localdns --check-config` on it, with the pod's
    POD_IP as the kubelet would set it."""
    d = os.path.join(env.tmp, name)
    os.makedirs(d)
    for key, content in rendered.configmap["data"].items():
        with open(os.path.join(d, key), "w") as f:
            f.write(content)
    path = os.path.join(d, "config.yaml")
    p = env.run(["--check-config", path], extra_env={"POD_IP": "10.0.0.7"})
    assert p.returncode == 0, "%s: --check-config exit %d: %s\n%s" % (
        name, p.returncode, p.stderr.strip(), rendered.config_text)


# ------------------------------------------------------------ references

def _backticked(cell):
    m = re.fullmatch(r"`([^`]*)`", cell.strip())
    return m.group(1) if m else None


def documented_defaults():
    """{"section.key": default} for every key of docs/configuration.md's
    section tables (## listen, ## cluster, ...), defaults parsed as YAML."""
    out = {}
    section = None
    with open(os.path.join(harness.REPO, "docs", "configuration.md")) as f:
        for line in f:
            if line.startswith("## "):
                m = re.fullmatch(r"## ([a-z0-9_]+)\s*", line)
                section = m.group(1) if m else None
                continue
            if not section or not line.startswith("| `"):
                continue
            cells = line.strip().strip("|").split("|")
            key, default = _backticked(cells[0]), _backticked(cells[2])
            assert key and default is not None, "cannot read row %r" % line
            out[section + "." + key] = yaml.safe_load(default)
    assert len(out) > 40, "only %d keys read from docs/configuration.md" % len(out)
    return out


def source_keys():
    """{"section.key"} from the key table of src/config/config.c."""
    with open(os.path.join(harness.REPO, "src", "config", "config.c")) as f:
        src = f.read()
    arrays = {m.group(1): re.findall(r'^\s*\{"(\w+)",', m.group(2), re.M)
              for m in re.finditer(r"static const struct key (\w+)\[\] = \{(.*?)\n\};",
                                   src, re.S)}
    schemas = dict(re.findall(r"static const struct schema (\w+) = SCHEMA\((\w+),", src))
    sections = re.findall(r'SECTION\("(\w+)", (\w+)\)', src)
    assert sections, "no SECTION(...) in config.c"
    return {"%s.%s" % (name, key)
            for name, schema in sections for key in arrays[schemas[schema]]}


def source_restart_only():
    """{"section.key": restart_only} from the key table of src/config/config.c:
    whether each key's .reload says CONFIG_RESTART_ONLY (the schema's
    declaration that daemon/reload.c reads)."""
    with open(os.path.join(harness.REPO, "src", "config", "config.c")) as f:
        src = f.read()
    arrays = {}
    for m in re.finditer(r"static const struct key (\w+)\[\] = \{(.*?)\n\};", src, re.S):
        entries = re.split(r'^\s*\{"', m.group(2), flags=re.M)[1:]
        arrays[m.group(1)] = {e.split('"', 1)[0]: re.search(r"\.reload = ([A-Z_ |]+)\}", e)
                              for e in entries}
    schemas = dict(re.findall(r"static const struct schema (\w+) = SCHEMA\((\w+),", src))
    out = {}
    for name, schema in re.findall(r'SECTION\("(\w+)", (\w+)\)', src):
        for key, reload in arrays[schemas[schema]].items():
            assert reload, "%s.%s: no .reload in config.c" % (name, key)
            out["%s.%s" % (name, key)] = reload.group(1).strip() == "CONFIG_RESTART_ONLY"
    return out


def documented_reload(keys):
    """(live, restart_only) sets of keys that docs/configuration.md's "Live
    reload" section names: the keys of its table, and its "Everything else
    needs a restart" list; `section.*` stands for every key of keys in it."""
    with open(os.path.join(harness.REPO, "docs", "configuration.md")) as f:
        text = f.read()
    section = text[text.index("\n## Live reload\n"):]
    section = section[:section.index("\n## ", 1)]

    def expand(names):
        out = set()
        for n in names:
            if n.endswith(".*"):
                matched = {k for k in keys if k.startswith(n[:-1])}
                assert matched, "%s matches no key" % n
                out |= matched
            else:
                out.add(n)
        return out

    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    live = expand(n for row in rows for n in re.findall(r"`([^`]+)`", row))
    rest = section[section.index("Everything else needs a restart:"):]
    rest = rest[:rest.index("A reload that changes them")]
    return live, expand(re.findall(r"`([^`]+)`", rest))


def readme_example(heading):
    """The values of the first ```yaml block under heading in the chart's README."""
    with open(os.path.join(CHART, "README.md")) as f:
        text = f.read()
    section = text[text.index("\n" + heading + "\n"):]
    block = section[section.index("```yaml\n") + 8:]
    return yaml.safe_load(block[:block.index("```")])


def readme_values():
    """{"path": default} from the values table of the chart's README."""
    out = {}
    with open(os.path.join(CHART, "README.md")) as f:
        for line in f:
            if not line.startswith("| `"):
                continue
            cells = line.strip().strip("|").split("|")
            path, default = _backticked(cells[0]), _backticked(cells[1])
            if path is not None and default is not None:
                out[path] = yaml.safe_load(default)
    return out


def chart_values():
    with open(os.path.join(CHART, "values.yaml")) as f:
        return yaml.safe_load(f)
