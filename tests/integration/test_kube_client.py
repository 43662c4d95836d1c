"""The Kubernetes API client (src/kube/) against the fake API server
(tests/kube/fakeapi.py, in process): LIST paging, the node's Pods only,
watch events and resume after a cut (no relist), 410 -> relist with the
deletions of the gap reported, bookmarks moving the resourceVersion, the API
down and back (backoff, recovery, nothing lost or repeated), 401/403 logged
clearly, token rotation (a changed file, and one the stat check cannot see),
TLS from kubeconfig data and files, in-cluster mode, start-up errors, and a
prompt stop.

The client runs in tests/kube_dump (built next to the daemon), which prints
one line per handler call: "upsert RES NS/NAME rv=N", "remove RES NS/NAME",
"commit", "synced", and on SIGUSR1 a "status ..." line with its counters.
"""

import base64
import os
import re
import signal
import subprocess
import sys
import threading
import time

import harness

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi as F  # noqa: E402

NODE = "node-a"


class Dump:
    """kube_dump running on a config of its own; its stdout lines are
    collected by a thread, its stderr (the log) goes to a file."""

    def __init__(self, env, kubernetes, extra_env=None, cluster=None):
        """cluster: the config's cluster section; the default, verified pod
        names, has this node's Pods watched (as autopath would)."""
        self.dir = env.tmp
        self.config = os.path.join(self.dir, "dump-%d.yaml" % id(self))
        with open(self.config, "w") as f:
            f.write(harness.to_yaml({"kubernetes": kubernetes,
                                     "cluster": {"pods": "verified"} if cluster is None
                                     else cluster,
                                     "log": {"level": "debug"}}) + "\n")
        self.log_path = os.path.join(self.dir, "dump-%d.log" % id(self))
        binary = os.path.join(os.path.dirname(env.binary), "tests", "kube_dump")
        run_env = {k: v for k, v in os.environ.items()
                   if not k.startswith("KUBERNETES_") and k != "NODE_NAME"}
        run_env.update(extra_env or {})
        self._log = open(self.log_path, "w")
        self.proc = harness.track_process(subprocess.Popen(
            [binary, "--config", self.config], stdout=subprocess.PIPE,
            stderr=self._log, text=True, env=run_env))
        self.out = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self._cond:
                self.out.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self.out.append(None)   # end of output
            self._cond.notify_all()

    def wait(self, pred, timeout=5.0, start=0, what=None):
        """The index of the first output line from `start` on for which
        pred(line) (or line == pred, for a string) holds."""
        if isinstance(pred, str):
            want, pred = pred, (lambda l, w=pred: l == w)
        deadline = time.monotonic() + timeout
        with self._cond:
            i = start
            while True:
                while i < len(self.out):
                    if self.out[i] is None:
                        raise AssertionError(
                            "kube_dump exited (%s) before %s; log:\n%s"
                            % (self.proc.poll(), what or want, self.log()))
                    if pred(self.out[i]):
                        return i
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        "no %s within %.1fs; output:\n%s\nlog:\n%s"
                        % (what or getattr(pred, "__name__", "match"), timeout,
                           "\n".join(self.out[start:][-40:]), self.log()))
                self._cond.wait(left)

    def lines(self, start=0):
        with self._cond:
            return [l for l in self.out[start:] if l is not None]

    def mark(self):
        with self._cond:
            return len(self.out)

    def status(self):
        """The client's counters: {"synced": 1, "errors": N, "services":
        {"events": N, "relists": N, "objects": N}, ...}."""
        start = self.mark()
        self.proc.send_signal(signal.SIGUSR1)
        line = self.out[self.wait(lambda l: l.startswith("status "),
                                  start=start, what="status line")]
        st = {}
        for field in line.split()[1:]:
            k, v = field.split("=")
            if ":" in v:
                st[k] = {a: int(b) for a, b in
                         (p.split(":") for p in v.split(","))}
            else:
                st[k] = int(v)
        return st

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        """SIGTERM; asserts a clean exit 0 (under ASan that includes no
        leak) and returns the seconds it took."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(2)
        took = time.monotonic() - t0
        harness.untrack_process(self.proc)
        self._log.close()
        assert rc == 0, "kube_dump exit status %s; log:\n%s" % (rc, self.log())
        return took


def upserts(lines, res=None):
    """[(resource, key, rv)] of the upsert lines."""
    out = []
    for l in lines:
        m = re.match(r"upsert (\S+) (\S+) rv=(\d+)$", l)
        if m and (res is None or m.group(1) == res):
            out.append((m.group(1), m.group(2), int(m.group(3))))
    return out


def removes(lines, res=None):
    out = []
    for l in lines:
        m = re.match(r"remove (\S+) (\S+)$", l)
        if m and (res is None or m.group(1) == res):
            out.append((m.group(1), m.group(2)))
    return out


def standard_objects(n_services=3):
    return [F.namespace("default"), F.namespace("kube-system")] + \
           [F.service("default", "svc-%04d" % i, ports=[80])
            for i in range(n_services)] + \
           [F.endpointslice("default", "svc-0000", name="svc-0000-abcde",
                            endpoints=["10.1.0.1", "10.1.0.2"], ports=[80]),
            F.pod("default", "here", ips="10.1.0.1", node=NODE),
            F.pod("default", "elsewhere", ips="10.1.0.9", node="node-b")]


_tls = []


def shared_tls():
    """A CA, server and client certificates (fakeapi.make_tls), made once for
    every test here: a bearer token only ever goes to an https:// server."""
    if not _tls:
        _tls.append(F.make_tls(harness.mkdtemp("localdns-tls-")))
    return _tls[0]


def start_synced(env, api, token=None, node=NODE, **kc):
    """A kube_dump on a kubeconfig for api; returns it once synced."""
    path = api.kubeconfig(os.path.join(env.tmp, "kubeconfig-%d" % time.monotonic_ns()),
                          token=token, **kc)
    d = Dump(env, {"kubeconfig": path, "node_name": node})
    d.wait("synced", timeout=10)
    return d


def watch_rv(req):
    return int(req.query["resourceVersion"])


def test_kube_list_pages_then_watches_from_the_list_rv(env):
    with F.FakeAPI() as api:
        list_rv = api.apply(standard_objects(1201))
        d = start_synced(env, api)
        before_sync = d.lines()[:d.wait("synced")]
        svcs = upserts(before_sync, "services")
        assert len(svcs) == 1201 and len(set(svcs)) == 1201, len(svcs)
        assert before_sync[-1] == "commit", before_sync[-3:]
        assert ("namespaces", "kube-system") in \
            [(r, k) for r, k, _ in upserts(before_sync)], before_sync[:5]
        # Paging: limit=500, three pages, the 2nd and 3rd with a continue.
        lists = api.requests("services", "list")
        assert len(lists) == 3, lists
        assert all(r.query.get("limit") == "500" for r in lists), lists
        assert "continue" not in lists[0].query, lists[0]
        assert all(r.query.get("continue") for r in lists[1:]), lists
        assert all(r.code == 200 for r in lists), lists
        # Only this node's Pods, by field selector, in LIST and WATCH.
        pods = [k for _, k, _ in upserts(before_sync, "pods")]
        assert pods == ["default/here"], pods
        api.wait_watches(count=4)
        for r in api.requests("pods"):
            assert r.query.get("fieldSelector") == "spec.nodeName=" + NODE, r
        # Each watch starts from its list's RV, with bookmarks and a timeout.
        for res in ("services", "endpointslices", "namespaces", "pods"):
            w = api.requests(res, "watch")[0]
            assert watch_rv(w) == list_rv, (w, list_rv)
            assert w.query.get("allowWatchBookmarks") == "true", w
            assert 300 <= int(w.query["timeoutSeconds"]) < 600, w
        st = d.status()
        assert st["synced"] == 1 and st["services"]["objects"] == 1201, st
        assert st["pods"]["objects"] == 1 and st["contact"] == 1, st
        took = d.stop()
        assert took < 1.0, took


def test_kube_watch_events_and_resume_after_a_cut(env):
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        d = start_synced(env, api)
        api.wait_watches(count=4)
        m = d.mark()
        rv_new = api.apply(F.service("default", "new", ports=[53]))
        api.apply(F.service("default", "new", ports=[54]))
        api.delete("services", "default", "svc-0001")
        i = d.wait("remove services default/svc-0001", start=m)
        d.wait("commit", start=i)
        got = upserts(d.lines(m))
        assert [k for _, k, _ in got] == ["default/new", "default/new"], got
        assert got[0][2] == rv_new, got
        # Cut every watch mid-event; changes made meanwhile arrive once.
        lists_before = api.count(verb="list")
        m = d.mark()
        assert api.cut_watches(partial=True) == 4
        last_rv = api.resource_version
        rv2 = api.apply(F.service("default", "after-cut"))
        api.delete("services", "default", "new")
        d.wait("remove services default/new", start=m)
        assert upserts(d.lines(m)) == [("services", "default/after-cut", rv2)], \
            d.lines(m)
        assert removes(d.lines(m)) == [("services", "default/new")], d.lines(m)
        # Resumed from the last RV seen, not relisted.
        api.wait_watches("services", count=1)
        w = api.requests("services", "watch")[-1]
        assert watch_rv(w) >= last_rv, (w, last_rv)
        assert api.count(verb="list") == lists_before, api.requests(verb="list")
        st = d.status()
        assert st["services"]["relists"] == 0, st
        assert st["services"]["objects"] == 3, st   # svc-0000, -0002, after-cut
        d.stop()


def test_kube_410_relists_and_reports_deletions_of_the_gap(env):
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        d = start_synced(env, api)
        api.wait_watches(count=4)
        # A gap: the API goes away, things change, history is compacted.
        api.set_down(True)
        api.delete("services", "default", "svc-0002")
        api.delete("namespaces", "kube-system")
        api.apply(F.service("default", "born-in-gap"))
        api.compact()
        m = d.mark()
        api.set_down(False)
        i = d.wait("remove services default/svc-0002", start=m, timeout=10)
        j = d.wait("remove namespaces kube-system", start=m, timeout=10)
        # Each relist's counters are set before the commit that ends it.
        d.wait("commit", start=max(i, j))
        lines = d.lines(m)
        assert ("services", "default/born-in-gap") in \
            [(r, k) for r, k, _ in upserts(lines)], lines
        assert sorted(removes(lines)) == [("namespaces", "kube-system"),
                                          ("services", "default/svc-0002")], lines
        assert "410" in d.log() and "relisting" in d.log(), d.log()
        st = d.status()
        assert st["services"]["relists"] == 1, st
        assert st["services"]["objects"] == 3 and st["namespaces"]["objects"] == 1, st
        # After the relist it watches again, from the new list's RV.
        api.wait_watches("services", count=1)
        d.stop()


def test_kube_repeated_410_relists_back_off(env):
    """A 410 that comes back after every relist (a server or proxy that
    expires each watch at once): the first relist is at once, the next
    ones wait per the backoff (jittered in [b/2, b], b = 400, 800, 1600
    ms), so a fleet of nodes does not LIST the cluster in a loop."""
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        d = start_synced(env, api)
        api.wait_watches(count=4)
        api.clear_requests()
        api.fail_next(4, 410, resource="services", verb="watch")
        assert api.cut_watches("services") == 1
        d_mark = d.mark()
        # Four expired watches, each followed by a LIST, then a watch that holds.
        api.wait_requests("services", "watch", count=5, timeout=10)
        api.wait_watches("services", count=1, timeout=10)
        reqs = [r for r in api.requests("services") if r.verb in ("list", "watch")]
        assert [r.verb for r in reqs] == ["watch", "list"] * 4 + ["watch"], reqs
        # The wait between each expiry and its LIST: the server's own clock.
        gaps = [reqs[i + 1].time - reqs[i].time for i in range(0, 8, 2)]
        for gap, least in zip(gaps[1:], (0.2, 0.4, 0.8)):
            assert gap >= least, gaps
        waits = [int(w) for w in re.findall(
            r'msg="kubernetes watch expired \(410 Gone\); relisting" resource=services '
            r'.*retry_ms=(\d+)', d.log())]
        assert len(waits) == 4 and waits[0] == 0, waits
        assert 200 <= waits[1] <= 400 and 400 <= waits[2] <= 800 and 800 <= waits[3] <= 1600, \
            waits
        st = d.status()
        assert st["services"]["relists"] == 4, st
        # The other resources never noticed.
        assert api.count("namespaces", "list") == 0, api.requests("namespaces")
        assert not removes(d.lines(d_mark)), d.lines(d_mark)
        d.stop()


def test_kube_bookmarks_move_the_resource_version(env):
    with F.FakeAPI(bookmark_interval=0.2) as api:
        list_rv = api.apply(standard_objects())
        d = start_synced(env, api)
        # Only namespaces change: services' RV moves by bookmarks alone.
        rv = api.apply(F.namespace("other"))
        d.wait("upsert namespaces other rv=%d" % rv)
        time.sleep(0.6)
        api.cut_watches("services")
        api.wait_requests("services", "watch", count=2)
        w = api.requests("services", "watch")[-1]
        assert watch_rv(w) >= rv > list_rv, (w, rv, list_rv)
        assert not upserts(d.lines(), "services")[3:], d.lines()
        assert d.status()["services"]["events"] >= 2   # bookmarks count
        d.stop()


def test_kube_api_down_backs_off_then_resumes_without_loss(env):
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        d = start_synced(env, api)
        api.wait_watches(count=4)
        m = d.mark()
        api.set_down(True)
        names = ["down-%d" % i for i in range(5)]
        for n in names:
            api.apply(F.service("default", n))
        api.delete("services", "default", "svc-0000")
        time.sleep(2.5)
        api.set_down(False)
        d.wait("remove services default/svc-0000", start=m, timeout=15)
        time.sleep(0.3)
        got = [k for _, k, _ in upserts(d.lines(m), "services")]
        assert got == ["default/" + n for n in names], d.lines(m)
        assert removes(d.lines(m)) == [("services", "default/svc-0000")], d.lines(m)
        # Backoff: each resource waited longer after each failure (jittered
        # in [b/2, b] for b = 400, 800, 1600 ms ...), so a few tries only.
        waits = [int(w) for w in re.findall(
            r'msg="kubernetes watch failed" resource=services .*retry_ms=(\d+)',
            d.log())]
        assert 2 <= len(waits) <= 6, d.log()
        assert waits[0] <= 400 and max(waits) >= 400, waits
        st = d.status()
        assert st["services"]["relists"] == 0 and st["errors"] >= 4, st
        d.stop()


def write_token(path, token):
    tmp = path + ".new"
    with open(tmp, "w") as f:
        f.write(token + "\n")
    os.rename(tmp, path)


def test_kube_401_logged_then_a_rotated_token_file_recovers(env):
    valid = os.path.join(env.tmp, "valid-tokens")
    write_token(valid, "old")
    client_token = os.path.join(env.tmp, "client-token")
    write_token(client_token, "old")
    tls = shared_tls()
    with F.FakeAPI(token_file=valid, tls_cert=tls.server_cert, tls_key=tls.server_key) as api:
        api.apply(standard_objects())
        d = start_synced(env, api, token_file=client_token, ca=tls.ca)
        api.wait_watches(count=4)
        # The server stops accepting our token: every request gets 401.
        write_token(valid, "new")
        api.cut_watches()
        api.wait_requests("services", "watch", count=3, timeout=5)
        time.sleep(0.3)
        log = d.log()
        assert re.search(r'level=error msg="kubernetes API refused our credentials '
                         r'\(401 Unauthorized\)" resource=services status=401 '
                         r'reason="Unauthorized', log), log
        # kubelet rotates our file: the next try uses the new token.
        m = d.mark()
        write_token(client_token, "new")
        rv = api.apply(F.service("default", "with-new-token"))
        d.wait("upsert services default/with-new-token rv=%d" % rv, start=m, timeout=10)
        api.wait_watches(count=4, timeout=10)
        for res in ("services", "endpointslices", "namespaces", "pods"):
            last = api.requests(res, "watch")[-1]
            assert (last.user, last.code) == ("new", 200), api.requests(res)
        d.stop()


def test_kube_401_rereads_a_token_the_stat_check_cannot_see(env):
    """Same inode, size and mtime: only the re-read after a 401 finds the
    new token, and the retry is immediate (no error logged)."""
    client_token = os.path.join(env.tmp, "client-token")
    write_token(client_token, "tok-1")
    tls = shared_tls()
    with F.FakeAPI(tokens=["tok-1"], tls_cert=tls.server_cert, tls_key=tls.server_key) as api:
        api.apply(standard_objects())
        d = start_synced(env, api, token_file=client_token, ca=tls.ca)
        api.wait_watches(count=4)
        st = os.stat(client_token)
        with open(client_token, "r+") as f:
            f.write("tok-2\n")
        os.utime(client_token, ns=(st.st_atime_ns, st.st_mtime_ns))
        api.set_tokens(["tok-2"])
        m = d.mark()
        api.cut_watches("services")
        rv = api.apply(F.service("default", "x"))
        d.wait("upsert services default/x rv=%d" % rv, start=m, timeout=5)
        codes = [(r.user, r.code) for r in api.requests("services", "watch")[-2:]]
        assert codes == [(None, 401), ("tok-2", 200)], api.requests("services")
        assert "token file re-read, retrying" in d.log(), d.log()
        assert "refused our credentials" not in d.log(), d.log()
        d.stop()


def test_kube_403_is_logged_with_the_reason_and_holds_the_sync(env):
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        api.forbid("endpointslices")
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        d = Dump(env, {"kubeconfig": path, "node_name": NODE})
        api.wait_requests("endpointslices", "list", count=2)
        log = d.log()
        assert re.search(r'level=error msg="kubernetes API forbids this request '
                         r'\(403 Forbidden; check RBAC\)" resource=endpointslices '
                         r'status=403 reason="Forbidden: endpointslices is forbidden',
                         log), log
        assert "synced" not in d.lines(), d.lines()
        api.allow()
        d.wait("synced", timeout=10)
        assert upserts(d.lines(), "endpointslices"), d.lines()
        d.stop()


def users(api):
    """Who made the answered requests (one still being authenticated has
    no user yet)."""
    return {r.user for r in api.requests() if r.code is not None}


def b64file(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def test_kube_tls_from_kubeconfig_data_and_files(env):
    tls = F.make_tls(os.path.join(env.tmp, "tls"))
    tokens = os.path.join(env.tmp, "tokens")
    write_token(tokens, "file-token")
    with F.FakeAPI(tls_cert=tls.server_cert, tls_key=tls.server_key,
                   client_ca=tls.ca, token_file=tokens) as api:
        api.apply(standard_objects())
        # Inline data: CA, client certificate and key (mTLS).
        kc = os.path.join(env.tmp, "kc-data")
        with open(kc, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                    "clusters:\n- name: k\n  cluster:\n    server: %s\n"
                    "    certificate-authority-data: %s\n"
                    "users:\n- name: u\n  user:\n"
                    "    client-certificate-data: %s\n    client-key-data: %s\n"
                    "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                    % (api.url, b64file(tls.ca), b64file(tls.client_cert),
                       b64file(tls.client_key)))
        d = Dump(env, {"kubeconfig": kc, "node_name": NODE})
        d.wait("synced", timeout=10)
        assert users(api) == {"system:serviceaccount:kube-system:localdns"}, users(api)
        d.stop()
        # Files relative to the kubeconfig's directory, and a token file.
        os.symlink(tls.ca, os.path.join(env.tmp, "ca-link.crt"))
        api.clear_requests()
        kc = api.kubeconfig(os.path.join(env.tmp, "kc-files"), ca="ca-link.crt",
                            token_file="tokens")
        d = Dump(env, {"kubeconfig": kc, "node_name": NODE})
        d.wait("synced", timeout=10)
        assert users(api) == {"file-token"}, users(api)
        d.stop()
        # A CA that did not sign the server: no sync, the TLS error logged.
        other = F.make_tls(os.path.join(env.tmp, "other"))
        kc = api.kubeconfig(os.path.join(env.tmp, "kc-bad"), ca=other.ca,
                            token_file="tokens")
        d = Dump(env, {"kubeconfig": kc, "node_name": NODE})
        deadline = time.monotonic() + 5
        while "certificate" not in d.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert re.search(r'msg="kubernetes list failed" resource=\w+ status=0 '
                         r'error="[^"]*certificate', d.log()), d.log()
        assert "synced" not in d.lines()
        d.stop()
test_kube_tls_from_kubeconfig_data_and_files.timeout = 40


def test_kube_in_cluster_from_the_service_account_dir(env):
    tls = F.make_tls(os.path.join(env.tmp, "tls"))
    sa = os.path.join(env.tmp, "serviceaccount")
    os.makedirs(sa)
    write_token(os.path.join(sa, "token"), "sa-token")
    with open(tls.ca) as src, open(os.path.join(sa, "ca.crt"), "w") as dst:
        dst.write(src.read())
    with F.FakeAPI(tls_cert=tls.server_cert, tls_key=tls.server_key,
                   tokens=["sa-token"]) as api:
        api.apply(standard_objects())
        d = Dump(env, {"service_account_dir": sa},
                 extra_env={"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                            "KUBERNETES_SERVICE_PORT": str(api.port),
                            "NODE_NAME": NODE})
        d.wait("synced", timeout=10)
        assert users(api) == {"sa-token"}, users(api)
        pods = [k for _, k, _ in upserts(d.lines(), "pods")]
        assert pods == ["default/here"], pods    # node from $NODE_NAME
        assert "source=in-cluster" in d.log(), d.log()
        d.stop()
test_kube_in_cluster_from_the_service_account_dir.timeout = 30


def loopback_name_in_etc_hosts():
    """A name /etc/hosts maps to 127.0.0.1 that libcurl does not resolve by
    itself (it answers "localhost" without getaddrinfo); None if there is none."""
    with open("/etc/hosts") as f:
        for line in f:
            words = line.split("#")[0].split()
            for name in words[1:] if words and words[0] == "127.0.0.1" else []:
                if name != "localhost" and not name.endswith(".localhost"):
                    return name
    return None


def test_kube_server_by_name_resolves_in_libcurls_thread(env):
    # libcurl resolves the server's name with getaddrinfo on a thread of its
    # own, started from the Kubernetes thread: it runs under that thread's
    # seccomp list (glibc reads /etc/hosts, tries nscd, may ask netlink).
    name = loopback_name_in_etc_hosts()
    if not name:
        raise harness.Skip("no name for 127.0.0.1 in /etc/hosts")
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        path = api.kubeconfig(os.path.join(env.tmp, "kubeconfig-by-name"))
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("://127.0.0.1:", "://%s:" % name))
        d = Dump(env, {"kubeconfig": path, "node_name": NODE})
        d.wait("synced", timeout=10)
        assert "server=http://%s:" % name in d.log(), d.log()
        assert d.stop() < 1.0


def test_kube_no_node_name_skips_pods(env):
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        d = start_synced(env, api, node="")
        assert api.count("pods") == 0, api.requests("pods")
        assert 'msg="pods needed but not watched: no node name' in d.log(), d.log()
        assert not upserts(d.lines(), "pods")
        d.stop()


def test_kube_pods_watched_only_when_needed(env):
    """Without cluster.autopath or verified pod names nothing reads Pods:
    no LIST, no WATCH; either one has this node's Pods watched."""
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        for cluster in ({}, {"pods": "insecure", "autopath": False}, {"pods": "disabled"}):
            d = Dump(env, {"kubeconfig": path, "node_name": NODE}, cluster=cluster)
            d.wait("synced", timeout=10)
            api.wait_watches("namespaces", count=1)
            assert 'pods="not watched (not needed)"' in d.log(), d.log()
            assert not upserts(d.lines(), "pods"), d.lines()
            d.stop()
        assert api.count("pods") == 0, api.requests("pods")
        for cluster in ({"autopath": True}, {"pods": "verified"}):
            d = Dump(env, {"kubeconfig": path, "node_name": NODE}, cluster=cluster)
            d.wait("synced", timeout=10)
            assert [k for _, k, _ in upserts(d.lines(), "pods")] == ["default/here"], cluster
            assert "pods=watched" in d.log(), d.log()
            d.stop()
        assert api.count("pods", "list") == 2, api.requests("pods")


def test_kube_start_errors_are_clear(env):
    binary = os.path.join(os.path.dirname(env.binary), "tests", "kube_dump")
    kc = os.path.join(env.tmp, "kc")
    with open(kc, "w") as f:
        f.write("apiVersion: v1\nclusters: []\n")
    cfg = os.path.join(env.tmp, "c.yaml")
    cases = [
        ({"kubeconfig": kc}, "kubeconfig %s: no current-context" % kc),
        ({"kubeconfig": os.path.join(env.tmp, "missing")},
         "kubeconfig %s: No such file or directory" % os.path.join(env.tmp, "missing")),
        ({}, "in-cluster: KUBERNETES_SERVICE_HOST is not set"),
    ]
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    for kube, want in cases:
        with open(cfg, "w") as f:
            f.write(harness.to_yaml({"kubernetes": kube}) + "\n")
        p = subprocess.run([binary, "--config", cfg], capture_output=True, text=True,
                           timeout=5, env=clean_env)
        assert p.returncode == 1 and want in p.stderr, (kube, p.returncode, p.stderr)


def test_kube_token_never_sent_over_plain_http(env):
    """A kubeconfig pairing an http:// server with a token (inline or a
    file) is refused by the client, by --check-config and by the daemon's
    start-up, before any request; without a token plain HTTP works."""
    token_file = os.path.join(env.tmp, "token")
    write_token(token_file, "secret-token")
    binary = os.path.join(os.path.dirname(env.binary), "tests", "kube_dump")
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        want = ('cluster "fake": server "%s" is plain http://, and user "fake" has a bearer '
                'token, which would cross the network unencrypted; use https:// (or a user '
                'without a token)' % api.url)
        for name, kc in (("inline", {"token": "secret-token"}),
                         ("file", {"token_file": token_file})):
            path = api.kubeconfig(os.path.join(env.tmp, "kc-" + name), **kc)
            dump_cfg = os.path.join(env.tmp, "dump-%s.yaml" % name)
            with open(dump_cfg, "w") as f:
                f.write(harness.to_yaml({"kubernetes": {"kubeconfig": path}}) + "\n")
            p = subprocess.run([binary, "--config", dump_cfg], capture_output=True,
                               text=True, timeout=5)
            assert p.returncode == 1 and want in p.stderr, (name, p.returncode, p.stderr)
            daemon_cfg = os.path.join(env.tmp, "daemon-%s.yaml" % name)
            with open(daemon_cfg, "w") as f:
                f.write(harness.to_yaml(env.config(
                    kubernetes={"enabled": True, "kubeconfig": path, "node_name": NODE},
                    static={"records": [], "files": []})) + "\n")
            p = env.run(["--check-config", daemon_cfg])
            assert p.returncode == 1 and want in p.stderr, (name, p.stderr)
            p = env.run(["--config", daemon_cfg])     # logfmt escapes the quotes
            assert p.returncode == 1 and 'msg="cannot start"' in p.stderr and \
                want.replace('"', '\\"') in p.stderr, (name, p.stderr)
            assert "secret-token" not in p.stderr, p.stderr
        assert api.count() == 0, api.requests()
        # No token, nothing to leak: an anonymous client may use http://.
        d = start_synced(env, api)
        assert users(api) == {"anonymous"}, users(api)
        d.stop()


def big_services(n, size=30000):
    """n Services in default, after standard_objects()' in list order, each
    carrying `size` bytes of annotations."""
    blob = "x" * size
    return [F.service("default", "zz-big-%02d" % i, ports=[80],
                      annotations={"example.com/blob": blob}) for i in range(n)]


def test_kube_list_page_over_the_byte_cap_is_asked_again_smaller(env):
    """A LIST response past kubernetes.list_max_bytes is abandoned and the
    same page (same continue token) asked for again with half the limit,
    until it fits; the smaller limit stays for the pages and LISTs after,
    and grows back while pages come in well under the cap. Nothing is
    delivered twice or lost."""
    cap = 1 << 20
    with F.FakeAPI() as api:
        # Page 1 (limit 500): small Services. Page 2: 100 small ones, then
        # 40 of 30 KB: 1.3 MB at limit 500 or 250, 0.8 MB at 125.
        api.apply(standard_objects(600) + big_services(40))
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        d = Dump(env, {"kubeconfig": path, "node_name": NODE, "list_max_bytes": "1MiB"})
        d.wait("synced", timeout=15)
        lists = api.requests("services", "list")
        assert [int(r.query["limit"]) for r in lists] == [500, 500, 250, 125, 125], lists
        conts = [r.query.get("continue") for r in lists]
        assert conts[0] is None and conts[1] == conts[2] == conts[3] != conts[4], conts
        sizes = [r.size for r in lists]
        assert sizes[1] > cap and sizes[2] > cap, sizes       # abandoned
        assert all(s <= cap for s in sizes[:1] + sizes[3:]), sizes
        got = [k for _, k, _ in upserts(d.lines(), "services")]
        assert len(got) == 640 and len(set(got)) == 640, len(got)
        assert re.search(r'level=warn msg="kubernetes list response over '
                         r'kubernetes.list_max_bytes; asking for fewer objects" '
                         r'resource=services max_bytes=1048576 limit=500 new_limit=250', d.log()), \
            d.log()
        st = d.status()
        assert st["services"]["too_large"] == 2 and st["services"]["page_limit"] == 125, st
        assert st["endpointslices"]["too_large"] == 0 and \
            st["endpointslices"]["page_limit"] == 100, st
        assert st["errors"] == 0, st      # a page asked again smaller is no failure
        # A relist starts at the smaller limit, which doubles back while
        # pages of small Services come in far under the cap.
        api.wait_watches("services", count=1)
        api.clear_requests()
        api.fail_next(1, 410, resource="services", verb="watch")
        assert api.cut_watches("services") == 1
        # The expired watch, the relist, then a watch again.
        api.wait_requests("services", "watch", count=2, timeout=10)
        relist = [int(r.query["limit"]) for r in api.requests("services", "list")]
        assert relist[:3] == [125, 250, 500], relist
        assert d.status()["services"]["relists"] == 1
        d.stop()


def test_kube_list_object_over_the_byte_cap_holds_the_sync_and_says_so(env):
    """One object larger than kubernetes.list_max_bytes: the limit halves
    down to one object, then the page is a failure (logged as an error
    naming the key, retried with backoff) until the object is gone."""
    with F.FakeAPI() as api:
        api.apply(standard_objects() + [F.service("default", "huge", annotations={
            "example.com/blob": "x" * 100000})])
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        d = Dump(env, {"kubeconfig": path, "node_name": NODE, "list_max_bytes": "64KiB"})
        reqs = api.wait_requests("services", "list", count=10, timeout=10)
        assert [int(r.query["limit"]) for r in reqs] == \
            [500, 250, 125, 62, 31, 15, 7, 3, 1, 1], reqs
        assert reqs[-1].time - reqs[-2].time >= 0.2, reqs     # backoff, not a spin
        assert re.search(r'level=error msg="kubernetes list response over '
                         r'kubernetes.list_max_bytes with one object per page; raise it" '
                         r'resource=services max_bytes=65536 retry_ms=\d+', d.log()), d.log()
        assert "synced" not in d.lines()
        api.delete("services", "default", "huge")
        d.wait("synced", timeout=10)
        got = sorted(k for _, k, _ in upserts(d.lines(), "services"))
        assert got == ["default/svc-0000", "default/svc-0001", "default/svc-0002"], got
        assert d.status()["services"]["too_large"] >= 10
        d.stop()


def test_kube_expired_continue_token_starts_the_list_over(env):
    with F.FakeAPI() as api:
        api.apply(standard_objects(1500))
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        d = Dump(env, {"kubeconfig": path, "node_name": NODE})
        # While page 1 is being served, history moves on and is compacted:
        # page 2's continue token is then too old (410 Expired).
        api.wait_requests("services", "list", count=1)
        rv = api.apply(F.service("default", "late"))
        api.compact()
        d.wait("synced", timeout=10)
        lists = api.requests("services", "list")
        codes = [(bool(r.query.get("continue")), r.code) for r in lists]
        assert codes[:2] == [(False, 200), (True, 410)], lists
        assert codes[2:] == [(False, 200), (True, 200), (True, 200), (True, 200)], lists
        assert "continue token expired" in d.log(), d.log()
        # The second LIST saw the late service; nothing is reported twice as gone.
        assert ("services", "default/late", rv) in upserts(d.lines()), d.lines()[-5:]
        assert not removes(d.lines()), removes(d.lines())
        d.stop()
