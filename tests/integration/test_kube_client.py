"""The Kubernetes API client (src/kube/) against the fake API server
(tests/kube/fakeapi.py, in process), judged by the requests the fake saw and
where it served them from: the first sync as one WatchList per resource from
the watch cache; without WatchList, LIST resourceVersion=0 from the cache
(paged only where the server pages); the node's Pods only; watch events and
resume after a cut (no relist); 410 -> a relist NotOlderThan the last RV with
the deletions of the gap reported; a cache behind our RV -> a consistent
relist; a WatchList cut before its end; jittered backoff of relists and
errors; a fleet that reads nothing from etcd; bookmarks moving the
resourceVersion; the API down and back (nothing lost or repeated); 401/403
logged clearly, token rotation (a changed file, and one the stat check cannot
see), TLS from kubeconfig data and files, in-cluster mode, the per-object
bound, start-up errors, and a prompt stop.

The client runs in tests/kube_dump (built next to the daemon), which prints
one line per handler call: "upsert RES NS/NAME rv=N", "remove RES NS/NAME",
"commit", "synced", and on SIGUSR1 a "status ..." line with its counters.
"""

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

# Light: a small share of a CPU (they mostly wait on the daemon), so they may
# run beside a test that runs alone (run.py -j).
QUIET = True

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

    def wait_status(self, done, what, timeout=10):
        """status() again until done(status) holds: a count the client
        reaches in its own time (a WatchList's relist ends when the client
        has read the stream's end, after the server has seen the watch)."""
        deadline = time.monotonic() + timeout
        st = self.status()
        while not done(st):
            assert time.monotonic() < deadline, "%s never happened: %s" % (what, st)
            time.sleep(0.05)
            st = self.status()
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


def events(lines, pattern, res=None):
    """The groups of each line pattern matches whose resource (the first
    group) is res (any, without one)."""
    out = []
    for l in lines:
        m = re.match(pattern, l)
        if m and (res is None or m.group(1) == res):
            out.append(m.groups())
    return out


def upserts(lines, res=None):
    """[(resource, key, rv)] of the upsert lines."""
    return [(r, k, int(rv)) for r, k, rv in events(lines, r"upsert (\S+) (\S+) rv=(\d+)$", res)]


def removes(lines, res=None):
    """[(resource, key)] of the remove lines."""
    return events(lines, r"remove (\S+) (\S+)$", res)


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


WATCH_LIST = {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
              "allowWatchBookmarks": "true"}


def is_watch_list(req, rv=None):
    """req is a WatchList (from resourceVersion rv: "" for none)."""
    return (req.verb == "watch" and
            all(req.query.get(k) == v for k, v in WATCH_LIST.items()) and
            (rv is None or req.query.get("resourceVersion", "") == rv))


def resources_watched():
    return ("services", "endpointslices", "namespaces", "pods")


def test_kube_first_sync_is_one_watch_list_per_resource_from_the_watch_cache(env):
    """Where the server offers WatchList, the first sync of each resource
    is one WATCH with sendInitialEvents=true, resourceVersionMatch=
    NotOlderThan, allowWatchBookmarks=true and resourceVersion=0: the state
    from the watch cache (no etcd read, no LIST at all), ended by the
    k8s.io/initial-events-end bookmark; the same stream then carries the
    changes. It asks for gzip, which a 1.37 server sends as one gzip member
    per event, and takes every member."""
    with F.FakeAPI() as api:
        list_rv = api.apply(standard_objects(1201))
        d = start_synced(env, api)
        before_sync = d.lines()[:d.wait("synced")]
        svcs = upserts(before_sync, "services")
        assert len(svcs) == 1201 and len(set(svcs)) == 1201, len(svcs)
        assert before_sync[-1] == "commit", before_sync[-3:]
        assert ("namespaces", "kube-system") in \
            [(r, k) for r, k, _ in upserts(before_sync)], before_sync[:5]
        # Only this node's Pods, by field selector.
        pods = [k for _, k, _ in upserts(before_sync, "pods")]
        assert pods == ["default/here"], pods
        api.wait_watches(count=4)
        for res in resources_watched():
            reqs = api.requests(res)
            assert len(reqs) == 1 and is_watch_list(reqs[0], "0"), reqs
            assert reqs[0].served_from == "cache" and not reqs[0].consistent, \
                reqs[0].to_dict()
            assert 300 <= int(reqs[0].query["timeoutSeconds"]) < 600, reqs[0]
            assert "gzip" in reqs[0].accept_encoding, reqs[0].to_dict()
        assert api.requests("pods")[0].query.get("fieldSelector") == \
            "spec.nodeName=" + NODE
        assert api.count(verb="list") == 0 and not api.reads("etcd"), \
            api.requests()
        assert 'msg="kubernetes list done" resource=services how=watch-list ' \
            'objects=1201 pages=1' in d.log() and \
            "resource_version=%d" % list_rv in d.log(), d.log()
        # The changes come on the same stream: no second request.
        m = d.mark()
        rv = api.apply(F.service("default", "later"))
        d.wait("upsert services default/later rv=%d" % rv, start=m)
        d.wait("commit", start=m)
        assert api.count("services") == 1, api.requests("services")
        st = d.status()
        assert st["synced"] == 1 and st["services"]["objects"] == 1202, st
        assert st["pods"]["objects"] == 1 and st["contact"] == 1, st
        took = d.stop()
        assert took < 1.0, took


def test_kube_without_watch_list_lists_from_the_watch_cache(env):
    """A server without WatchList (before 1.27, or the gate off) refuses it
    with 422 Invalid: each resource then LISTs with resourceVersion=0 --
    the watch cache's whole state in one response (the limit is ignored),
    not an etcd read -- and WATCHes from that list's RV."""
    with F.FakeAPI(watch_list=False) as api:
        list_rv = api.apply(standard_objects(1201))
        d = start_synced(env, api)
        svcs = upserts(d.lines()[:d.wait("synced")], "services")
        assert len(svcs) == 1201 and len(set(svcs)) == 1201, len(svcs)
        api.wait_watches(count=4)
        for res in resources_watched():
            refused, lst, w = api.requests(res)
            assert is_watch_list(refused, "0") and refused.code == 422, refused
            assert lst.verb == "list" and lst.query.get("resourceVersion") == "0" and \
                lst.query.get("limit") == "500" and lst.served_from == "cache" and \
                lst.code == 200, lst.to_dict()
            assert w.verb == "watch" and not w.watch_list and \
                watch_rv(w) == list_rv and w.query.get("allowWatchBookmarks") == "true", w
        assert not api.reads("etcd"), api.reads("etcd")
        assert 'msg="kubernetes API server refuses watch-list (sendInitialEvents); ' \
            'listing instead" resource=services status=422' in d.log(), d.log()
        assert d.status()["errors"] == 0
        d.stop()


def test_kube_without_watch_cache_pages_from_etcd(env):
    """A resource the server has no watch cache for (--watch-cache=false):
    the resourceVersion=0 LIST comes back paged, so the client pages
    (limit=500, continue) as client-go does, and after a 410 relists
    NotOlderThan its last RV with a limit too; all of it from etcd, since
    that is all this server has."""
    with F.FakeAPI(watch_list=False, watch_cache=False) as api:
        api.apply(standard_objects(1201))
        d = start_synced(env, api)
        api.wait_watches(count=4)
        lists = api.requests("services", "list")
        assert [(r.query.get("resourceVersion"), bool(r.query.get("continue")))
                for r in lists] == [("0", False), (None, True), (None, True)], lists
        assert all(r.query["limit"] == "500" and r.served_from == "etcd"
                   for r in lists), lists
        assert len(upserts(d.lines(), "services")) == 1201
        last = api.resource_version
        api.clear_requests()
        api.fail_next(1, 410, resource="services", verb="watch")
        assert api.cut_watches("services") == 1
        api.wait_requests("services", "watch", count=2, timeout=10)
        relist = api.requests("services", "list")
        assert relist[0].query.get("resourceVersion") == str(last) and \
            relist[0].query.get("resourceVersionMatch") == "NotOlderThan" and \
            relist[0].query.get("limit") == "500" and \
            all(r.query.get("continue") for r in relist[1:]) and \
            len(relist) == 3, relist
        assert d.status()["services"]["relists"] == 1
        d.stop()


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
        m = d.mark()
        assert api.cut_watches(partial=True) == 4
        last_rv = api.resource_version
        rv2 = api.apply(F.service("default", "after-cut"))
        api.delete("services", "default", "new")
        d.wait("remove services default/new", start=m)
        assert upserts(d.lines(m)) == [("services", "default/after-cut", rv2)], \
            d.lines(m)
        assert removes(d.lines(m)) == [("services", "default/new")], d.lines(m)
        # Resumed from the last RV seen with a plain watch, not relisted.
        api.wait_watches("services", count=1)
        w = api.requests("services", "watch")[-1]
        assert not w.watch_list and watch_rv(w) >= last_rv, (w, last_rv)
        assert sum(r.watch_list for r in api.requests()) == 4, api.requests()
        assert api.count(verb="list") == 0, api.requests(verb="list")
        # the count follows the remove line once the event is taken
        st = d.wait_status(lambda st: st["services"]["objects"] == 3,
                           "3 services: svc-0000, -0002, after-cut")
        assert st["services"]["relists"] == 0, st
        d.stop()


def test_kube_410_relists_and_reports_deletions_of_the_gap(env):
    """After a gap the watch's RV is too old (410): the relist is a
    WatchList NotOlderThan the last RV seen -- from the watch cache, never
    older than what the client had -- and what vanished meanwhile is
    reported."""
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        d = start_synced(env, api)
        api.wait_watches(count=4)
        last = api.resource_version
        # A gap: the API goes away, things change, history is compacted.
        api.set_down(True)
        api.delete("services", "default", "svc-0002")
        api.delete("namespaces", "kube-system")
        api.apply(F.service("default", "born-in-gap"))
        api.compact()
        m = d.mark()
        api.clear_requests()
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
        relists = [r for r in api.requests("services") if r.watch_list]
        assert len(relists) == 1 and is_watch_list(relists[0], str(last)) and \
            relists[0].served_from == "cache", relists
        assert not api.reads("etcd"), api.reads("etcd")
        st = d.status()
        assert st["services"]["relists"] == 1, st
        assert st["services"]["objects"] == 3 and st["namespaces"]["objects"] == 1, st
        # The relist's stream goes on as the watch.
        m = d.mark()
        rv = api.apply(F.service("default", "after"))
        d.wait("upsert services default/after rv=%d" % rv, start=m)
        assert len(api.requests("services")) == 2, api.requests("services")
        d.stop()


def test_kube_relist_without_watch_list_is_not_older_than_the_last_rv(env):
    """Without WatchList, the relist after a 410 is a LIST with
    resourceVersion=<last RV seen>&resourceVersionMatch=NotOlderThan and no
    limit: the watch cache's state, at least as new as what the client
    had, in one response; never resourceVersion=0 (which could go back in
    time) and never a read from etcd."""
    with F.FakeAPI(watch_list=False) as api:
        api.apply(standard_objects(700))
        d = start_synced(env, api)
        api.wait_watches(count=4)
        m = d.mark()
        api.delete("services", "default", "svc-0005")
        last = api.apply(F.service("default", "zz-late"))
        d.wait("commit", start=d.wait("upsert services default/zz-late rv=%d" % last, start=m))
        m = d.mark()
        api.set_down(True)
        api.clear_requests()
        api.delete("services", "default", "svc-0006")   # unseen: in the gap
        api.compact()
        api.set_down(False)
        d.wait("remove services default/svc-0006", start=m, timeout=10)
        api.wait_watches("services", count=1)
        lists = api.requests("services", "list")
        assert len(lists) == 1, lists
        q = lists[0].query
        assert q.get("resourceVersion") == str(last) and \
            q.get("resourceVersionMatch") == "NotOlderThan" and "limit" not in q and \
            lists[0].served_from == "cache", lists[0].to_dict()
        assert len(upserts(d.lines(m), "services")) == 699, [l for l in d.lines(m) if not l.startswith("upsert services default/svc-")]
        assert removes(d.lines(m)) == [("services", "default/svc-0006")], removes(d.lines(m))
        assert not api.reads("etcd"), api.reads("etcd")
        assert not [r for r in api.requests("services") if r.watch_list], \
            "asked for a watch-list again after the server refused it"
        d.stop()


def test_kube_cache_behind_our_rv_relists_consistently(env):
    """An API server whose watch cache is behind the client's RV (it just
    started): the NotOlderThan relist waits for it and gets 504
    ResourceVersionTooLarge, so the next relist is a consistent read (no
    resourceVersion) -- from etcd for a LIST -- never the cache's older
    state: the data does not go back in time."""
    for watch_list in (False, True):
        with F.FakeAPI(watch_list=watch_list) as api:
            api.rv_wait = 0.3
            api.apply(standard_objects())
            d = start_synced(env, api)
            api.wait_watches(count=4)
            behind = api.resource_version
            m = d.mark()
            last = api.apply(F.service("default", "newest"))
            d.wait("commit", start=d.wait("upsert services default/newest rv=%d" % last,
                                          start=m))
            api.cache_behind(behind)
            api.clear_requests()
            api.fail_next(1, 410, resource="services", verb="watch")
            m = d.mark()
            assert api.cut_watches("services") == 1
            if watch_list:
                # A consistent WatchList needs the cache at etcd's revision too.
                api.wait_requests("services", "watch", count=4, timeout=15)
                api.cache_behind(None)
            d.wait(lambda l: l.startswith("commit"), start=m, timeout=15,
                   what="the relist's commit")
            relists = [r for r in api.requests("services")
                       if r.verb == "list" or r.watch_list]
            assert relists[0].query.get("resourceVersion") == str(last) and \
                relists[0].code in (200, 504), relists
            later = relists[1:]
            assert later and all("resourceVersion" not in r.query for r in later), relists
            if not watch_list:
                assert later[0].served_from == "etcd" and later[0].consistent and \
                    later[0].query.get("limit") == "500", later[0].to_dict()
            assert "listing consistently (from etcd)" in d.log(), d.log()
            # Nothing older than what the client had was delivered.
            got = dict((k, rv) for _, k, rv in upserts(d.lines(m), "services"))
            assert got.get("default/newest") == last, got
            assert not removes(d.lines(m)), removes(d.lines(m))
            api.cache_behind(None)
            d.stop()
test_kube_cache_behind_our_rv_relists_consistently.timeout = 60


def test_kube_watch_list_cut_before_its_end_starts_over(env):
    """A WatchList cut before its initial-events-end bookmark is no list:
    nothing is committed or swept for it, and a new WatchList starts over;
    the sync comes with the bookmark of the one that completes."""
    with F.FakeAPI() as api:
        api.apply(standard_objects(5))
        api.hold_initial_events("services", after=2)
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        d = Dump(env, {"kubeconfig": path, "node_name": NODE})
        d.wait(lambda l: len(upserts([l], "services")) == 1, what="a service")
        api.wait_watches("services", count=1)
        assert api.cut_watches("services") == 1
        api.wait_requests("services", "watch", count=2, timeout=10)
        assert "synced" not in d.lines()
        api.hold_initial_events("services")
        d.wait("synced", timeout=10)
        reqs = api.requests("services")
        assert len(reqs) == 2 and all(is_watch_list(r, "0") for r in reqs), reqs
        svcs = [k for _, k, _ in upserts(d.lines(), "services")]
        assert len(set(svcs)) == 5 and len(svcs) >= 5, svcs
        assert not removes(d.lines()), d.lines()
        assert "watch-list ended before its initial events did; starting over" in d.log()
        st = d.status()
        assert st["services"]["relists"] == 0 and st["services"]["objects"] == 5, st
        d.stop()


def test_kube_repeated_410_relists_back_off(env):
    """A 410 that comes back after every relist (a server or proxy that
    expires each watch at once): every relist waits, jittered in [b, 2b)
    for b = 800, 1600 ms..., so a fleet whose watches all expired together
    does not LIST the cluster in step, and one that keeps failing slows
    down; after a 410 on the relist itself, the next one is consistent."""
    with F.FakeAPI() as api:
        api.apply(standard_objects())
        d = start_synced(env, api)
        api.wait_watches(count=4)
        last = api.resource_version
        api.clear_requests()
        api.fail_next(2, 410, resource="services", verb="watch")
        assert api.cut_watches("services") == 1
        d_mark = d.mark()
        # The expired watch, an expired relist, then a relist that holds.
        api.wait_requests("services", "watch", count=3, timeout=15)
        api.wait_watches("services", count=1, timeout=10)
        reqs = api.requests("services")
        assert [r.watch_list for r in reqs] == [False, True, True], reqs
        assert is_watch_list(reqs[1], str(last)) and is_watch_list(reqs[2], ""), reqs
        # The waits the log announced, and that the server saw (its clock).
        waits = [int(w) for w in re.findall(
            r'msg="kubernetes (?:watch expired \(410 Gone\); relisting|resourceVersion '
            r'unavailable for the list; listing consistently \(from etcd\))" '
            r'resource=services .*retry_ms=(\d+)', d.log())]
        assert len(waits) == 2 and 800 <= waits[0] < 1600 and 1600 <= waits[1] < 3200, waits
        gaps = [reqs[i + 1].time - reqs[i].time for i in range(2)]
        assert gaps[0] >= 0.8 and gaps[1] >= 1.6, gaps
        d.wait_status(lambda st: st["services"]["relists"] == 1, "the relist's end")
        # The other resources never noticed.
        assert api.count("namespaces") == 0, api.requests("namespaces")
        assert not removes(d.lines(d_mark)), d.lines(d_mark)
        d.stop()
test_kube_repeated_410_relists_back_off.timeout = 40


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
        # in [b, 2b) for b = 800, 1600 ms ...), so a few tries only.
        waits = [int(w) for w in re.findall(
            r'msg="kubernetes watch failed" resource=services .*retry_ms=(\d+)',
            d.log())]
        assert 1 <= len(waits) <= 4, d.log()
        assert 800 <= waits[0] < 1600, waits
        assert all(b >= a for a, b in zip(waits, waits[1:])) or len(waits) == 1 or \
            all(1600 * 2 ** i <= w for i, w in enumerate(waits[1:])), waits
        st = d.status()
        assert st["services"]["relists"] == 0 and st["errors"] >= 4, st
        assert not [r for r in api.requests() if r.watch_list][4:], \
            "a watch that broke was relisted"
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
        api.wait_requests("endpointslices", "watch", count=2)
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


def test_kube_tls_from_kubeconfig_data_and_files(env):
    tls = F.make_tls(os.path.join(env.tmp, "tls"))
    tokens = os.path.join(env.tmp, "tokens")
    write_token(tokens, "file-token")
    with F.FakeAPI(tls_cert=tls.server_cert, tls_key=tls.server_key,
                   client_ca=tls.ca, token_file=tokens) as api:
        api.apply(standard_objects())
        # Inline data: CA, client certificate and key (mTLS).
        kc = api.kubeconfig(os.path.join(env.tmp, "kc-data"), ca=tls.ca,
                            client_cert=tls.client_cert, client_key=tls.client_key, embed=True)
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
        assert re.search(r'msg="kubernetes watch-list failed" resource=\w+ status=0 '
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
        assert len([r for r in api.requests("pods") if r.watch_list]) == 2, \
            api.requests("pods")


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


def refused_by_the_daemon(env, kubeconfig, name, want):
    """--check-config and start-up both refuse the kubeconfig with want,
    and neither prints the token."""
    daemon_cfg = os.path.join(env.tmp, "daemon-%s.yaml" % name)
    with open(daemon_cfg, "w") as f:
        f.write(harness.to_yaml(env.config(
            kubernetes={"enabled": True, "kubeconfig": kubeconfig, "node_name": NODE},
            static={"records": [], "files": []})) + "\n")
    p = env.run(["--check-config", daemon_cfg])
    assert p.returncode == 1 and want in p.stderr, (name, p.stderr)
    p = env.run(["--config", daemon_cfg])     # logfmt escapes the quotes
    assert p.returncode == 1 and 'msg="cannot start"' in p.stderr and \
        want.replace('"', '\\"') in p.stderr, (name, p.stderr)
    assert "secret-token" not in p.stderr, p.stderr


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
            refused_by_the_daemon(env, path, name, want)
        assert api.count() == 0, api.requests()
        # No token, nothing to leak: an anonymous client may use http://.
        d = start_synced(env, api)
        assert users(api) == {"anonymous"}, users(api)
        d.stop()


def test_kube_token_never_sent_to_an_unchecked_server(env):
    """A kubeconfig pairing insecure-skip-tls-verify with a token (inline or
    a file) is refused by --check-config and at start-up: whoever answers in
    the server's place would be handed the token. A client certificate may
    go there."""
    token_file = os.path.join(env.tmp, "token")
    write_token(token_file, "secret-token")
    want = ('cluster "k" has insecure-skip-tls-verify, and user "u" has a bearer token, '
            'which would go to whoever answers in the server\'s place; give the cluster its '
            'certificate-authority (or use a user without a token)')
    head = ("current-context: x\ncontexts: [{name: x, context: {cluster: k, user: u}}]\n"
            "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443', "
            "insecure-skip-tls-verify: true}}]\n")
    for name, user in (("inline", "{token: secret-token}"),
                       ("file", "{tokenFile: %s}" % token_file)):
        kc = os.path.join(env.tmp, "kc-" + name)
        with open(kc, "w") as f:
            f.write(head + "users: [{name: u, user: %s}]\n" % user)
        refused_by_the_daemon(env, kc, name, want)


def big_services(n, size=30000):
    """n Services in default, after standard_objects()' in list order, each
    carrying `size` bytes of annotations."""
    blob = "x" * size
    return [F.service("default", "zz-big-%02d" % i, ports=[80],
                      annotations={"example.com/blob": blob}) for i in range(n)]


def test_kube_whole_list_is_decoded_as_it_streams(env):
    """A LIST from the watch cache is the whole collection in one response
    (here 1.8 MB, 40 Services with 30 KB of annotations each), far over
    kubernetes.object_max_bytes (64 KiB): the bound is per object, the
    response streams through, and nothing fails or is asked twice."""
    with F.FakeAPI(watch_list=False) as api:
        api.apply(standard_objects(600) + big_services(40))
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        d = Dump(env, {"kubeconfig": path, "node_name": NODE, "object_max_bytes": "64KiB"})
        d.wait("synced", timeout=15)
        lists = api.requests("services", "list")
        assert len(lists) == 1 and lists[0].size > 1500000, lists
        got = [k for _, k, _ in upserts(d.lines(), "services")]
        assert len(got) == 640 and len(set(got)) == 640, len(got)
        st = d.status()
        assert st["errors"] == 0 and st["services"]["too_large"] == 0, st
        d.stop()


def test_kube_object_over_the_bound_holds_the_sync_and_says_so(env):
    """One object larger than kubernetes.object_max_bytes: its resource's
    (re)list fails (an error naming the object and the key, retried with
    backoff, counted) until the object is gone; the other resources sync."""
    with F.FakeAPI() as api:
        api.apply(standard_objects() + [F.service("default", "huge", annotations={
            "example.com/blob": "x" * 100000})])
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        d = Dump(env, {"kubeconfig": path, "node_name": NODE, "object_max_bytes": "64KiB"})
        api.wait_requests("services", "watch", count=2, timeout=10)
        api.wait_watches("namespaces", count=1)
        log = d.log()
        waits = [int(w) for w in re.findall(
            r'level=error msg="kubernetes object over kubernetes.object_max_bytes; raise it" '
            r'resource=services object=default/huge max_bytes=65536 verb=watch-list '
            r'retry_ms=(\d+)', log)]
        assert waits and waits[0] >= 800, log       # backoff, not a spin
        assert "synced" not in d.lines()
        assert ("namespaces", "default") in [(r, k) for r, k, _ in upserts(d.lines())]
        assert d.status()["services"]["too_large"] >= 1
        api.delete("services", "default", "huge")
        d.wait("synced", timeout=10)
        got = sorted(set(k for _, k, _ in upserts(d.lines(), "services")))
        assert got == ["default/svc-0000", "default/svc-0001", "default/svc-0002"], got
        d.stop()


def test_kube_expired_continue_token_starts_the_list_over(env):
    """Paging (no WatchList, no watch cache): a continue token that expired
    (410) starts the LIST over, from the first page."""
    with F.FakeAPI(watch_list=False, watch_cache=False) as api:
        api.apply(standard_objects(1500))
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        # Between pages 1 and 2, history moves on and is compacted: page 2's
        # continue token is then too old (410 Expired). Done by the server
        # as page 2 is asked, so how fast the client pages does not matter.
        late = []
        api.before_next(lambda: (late.append(api.apply(F.service("default", "late"))),
                                 api.compact()),
                        resource="services", verb="list", paged=True)
        d = Dump(env, {"kubeconfig": path, "node_name": NODE})
        d.wait("synced", timeout=10)
        rv = late[0]
        lists = api.requests("services", "list")
        codes = [(bool(r.query.get("continue")), r.code) for r in lists]
        assert codes[:2] == [(False, 200), (True, 410)], lists
        assert codes[2:] == [(False, 200), (True, 200), (True, 200), (True, 200)], lists
        assert lists[2].query.get("resourceVersion") == "0", lists[2]
        assert "continue token expired" in d.log(), d.log()
        # The second LIST saw the late service; nothing is reported twice as gone.
        assert ("services", "default/late", rv) in upserts(d.lines()), d.lines()[-5:]
        assert not removes(d.lines()), removes(d.lines())
        d.stop()


def test_kube_a_fleet_of_nodes_reads_nothing_from_etcd(env):
    """Five nodes starting together, then all their watches expiring
    together (an API server restart with a fresh watch cache): every sync
    and relist is served from the watch cache -- no LIST, no etcd read, no
    consistent read -- and the relists are spread by jitter, each from
    its own node's last RV."""
    with F.FakeAPI() as api:
        api.apply(standard_objects(50))
        path = api.kubeconfig(os.path.join(env.tmp, "kc"))
        dumps = [Dump(env, {"kubeconfig": path, "node_name": NODE}) for _ in range(5)]
        for d in dumps:
            d.wait("synced", timeout=15)
        api.wait_watches(count=20, timeout=10)
        assert len(api.requests()) == 20 and all(is_watch_list(r, "0") for r in api.requests())
        last = api.resource_version
        api.clear_requests()
        api.fail_next(5, 410, resource="services", verb="watch")
        assert api.cut_watches("services") == 5
        api.wait_requests("services", "watch", count=10, timeout=15)
        api.wait_watches("services", count=5, timeout=10)
        relists = [r for r in api.requests("services") if r.watch_list]
        assert len(relists) == 5 and all(is_watch_list(r, str(last)) for r in relists), relists
        assert api.count(verb="list") == 0 and not api.reads("etcd") and \
            not [r for r in api.requests() if r.consistent], api.requests()
        waits = [int(re.findall(r'watch expired \(410 Gone\); relisting" resource=services '
                                r'.*retry_ms=(\d+)', d.log())[0]) for d in dumps]
        assert all(800 <= w < 1600 for w in waits) and len(set(waits)) > 1, waits
        for d in dumps:
            d.stop()
test_kube_a_fleet_of_nodes_reads_nothing_from_etcd.timeout = 60
