"""The fake Kubernetes API server (tests/kube/fakeapi.py) checked on its own,
with a plain HTTP client (http.client, and a raw socket where the chunk
framing itself matters): paging, where each read is served from (watch
cache or etcd), ListOptions validation, WatchList, a watch cache behind
etcd, watch resume, 410, bookmarks, cut streams,
tokens, 403, selectors, TLS and mTLS, outage, the script with its control
endpoints, and a 10,000-Service / 100,000-endpoint list."""

import gzip
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
import zlib

import harness

sys.path.insert(0, os.path.join(harness.REPO, "tests", "kube"))
import fakeapi  # noqa: E402

# Checks test tooling; starts no localdns (run.py --daemon-tests-only skips it).
NO_DAEMON = True

TOKEN = "tok-1"


# ------------------------------------------------------------------ clients

def call(api, path, token=TOKEN, conn=None, headers=None, context=None):
    """GET path; returns (status, parsed JSON body, response headers)."""
    own = conn is None
    if own:
        conn = connect(api, context)
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    conn.request("GET", path, headers=h)
    r = conn.getresponse()
    raw = r.read()
    if r.getheader("Content-Encoding") == "gzip":
        raw = gzip.decompress(raw)
    if own:
        conn.close()
    return r.status, json.loads(raw) if raw else None, dict(r.getheaders())


def connect(api, context=None):
    if api.scheme == "https":
        return http.client.HTTPSConnection("127.0.0.1", api.port, timeout=5,
                                           context=context)
    return http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)


class RawWatch:
    """A watch read chunk by chunk off the socket, so the framing is seen
    as sent: one event per chunk, and whether the final 0-chunk came.
    gzip: ask for it (Accept-Encoding); a gzipped stream must be one whole
    gzip member per chunk."""

    def __init__(self, api, path, token=TOKEN, gzip=False):
        self.sock = socket.create_connection(("127.0.0.1", api.port), 5)
        self.buf = b""
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n"
                           "Authorization: Bearer %s\r\n%s\r\n"
                           % (path, token, "Accept-Encoding: gzip\r\n"
                              if gzip else "")).encode())
        head = self._until(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1])
        self.headers = head.decode().lower()
        self.gzipped = "content-encoding: gzip" in self.headers
        self.ended = False      # the terminating chunk arrived
        self.cut = False        # the connection closed without it

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def _until(self, sep):
        while sep not in self.buf:
            self._fill()
        out, self.buf = self.buf.split(sep, 1)
        return out

    def event(self):
        """The next event (a dict), or None at the end of the stream."""
        if self.ended or self.cut:
            return None
        try:
            size = int(self._until(b"\r\n"), 16)
            if size == 0:
                self._until(b"\r\n")
                self.ended = True
                return None
            while len(self.buf) < size + 2:
                self._fill()
        except EOFError:
            self.cut = True
            return None
        chunk, self.buf = self.buf[:size], self.buf[size + 2:]
        if self.gzipped:
            # One member: decompressobj stops at its end and says so.
            z = zlib.decompressobj(16 + zlib.MAX_WBITS)
            chunk = z.decompress(chunk)
            assert z.eof and not z.unused_data, "not one gzip member a chunk"
        assert chunk.endswith(b"\n") and chunk.count(b"\n") == 1, \
            "a chunk is not one newline-terminated event: %r" % chunk[:200]
        return json.loads(chunk)

    def events(self, n, timeout=5):
        """n events (fewer if the stream ends)."""
        self.sock.settimeout(timeout)
        out = []
        while len(out) < n:
            ev = self.event()
            if ev is None:
                break
            out.append(ev)
        return out

    def close(self):
        self.sock.close()


def rv_of(obj):
    return int(obj["metadata"]["resourceVersion"])


def start(**kw):
    kw.setdefault("tokens", [TOKEN])
    kw.setdefault("control_port", False)
    return fakeapi.FakeAPI(**kw).start()


# -------------------------------------------------------------------- tests

def test_fakeapi_objects_shapes(env):
    """Real JSON field names and list/GET shapes; namespaced paths; 404."""
    with start() as api:
        api.apply(fakeapi.namespace("ns1"),
                  fakeapi.service("ns1", "web", ["10.96.0.7", "fd00::7"],
                                  ports=[{"name": "http", "port": 80,
                                          "targetPort": 8080}]),
                  fakeapi.service("ns1", "hl", headless=True,
                                  publish_not_ready=True),
                  fakeapi.service("ns1", "ext", type="ExternalName",
                                  external_name="db.example.org"),
                  fakeapi.endpointslice("ns1", "hl", "hl-1", endpoints=[
                      fakeapi.endpoint("10.1.0.1", hostname="h1",
                                       node="node-a", pod="p1")]),
                  fakeapi.endpointslice("ns1", "web", "web-1"),
                  fakeapi.pod("ns1", "p1", ["10.1.0.1", "fd00::1:1"]))
        code, body, _ = call(api, "/api/v1/namespaces/ns1/services")
        assert code == 200 and body["kind"] == "ServiceList", body
        items = {s["metadata"]["name"]: s for s in body["items"]}
        assert sorted(items) == ["ext", "hl", "web"], sorted(items)
        assert "kind" not in items["web"], "list items carry no kind"
        web = items["web"]["spec"]
        assert web["clusterIPs"] == ["10.96.0.7", "fd00::7"] and \
            web["ipFamilies"] == ["IPv4", "IPv6"] and \
            web["ports"] == [{"name": "http", "protocol": "TCP", "port": 80,
                              "targetPort": 8080}], web
        assert items["hl"]["spec"]["clusterIP"] == "None" and \
            items["hl"]["spec"]["publishNotReadyAddresses"] is True
        assert items["ext"]["spec"]["externalName"] == "db.example.org" and \
            "clusterIP" not in items["ext"]["spec"]
        code, es, _ = call(api, "/apis/discovery.k8s.io/v1/namespaces/ns1/"
                           "endpointslices/hl-1")
        assert code == 200 and es["kind"] == "EndpointSlice", es
        ep = es["endpoints"][0]
        assert es["metadata"]["labels"]["kubernetes.io/service-name"] == "hl"
        assert ep["hostname"] == "h1" and ep["nodeName"] == "node-a" and \
            ep["targetRef"]["namespace"] == "ns1" and \
            ep["conditions"] == {"ready": True, "serving": True,
                                 "terminating": False}, ep
        code, empty, _ = call(api, "/apis/discovery.k8s.io/v1/namespaces/ns1/"
                              "endpointslices/web-1")
        assert empty["endpoints"] is None and empty["ports"] is None, empty
        code, p, _ = call(api, "/api/v1/namespaces/ns1/pods/p1")
        assert p["status"]["podIP"] == "10.1.0.1" and \
            p["status"]["podIPs"] == [{"ip": "10.1.0.1"},
                                      {"ip": "fd00::1:1"}] and \
            p["spec"]["nodeName"] == "node-a", p
        code, body, _ = call(api, "/api/v1/namespaces/ns1/services/nope")
        assert code == 404 and body["kind"] == "Status" and \
            body["reason"] == "NotFound", body
        code, body, _ = call(api, "/api/v1/namespaces/ns1/namespaces")
        assert code == 404, (code, body)


def test_fakeapi_paging_walks_snapshot(env):
    """limit/continue visit every object once, on one kept-alive
    connection, at the first page's RV even while objects change."""
    with start() as api:
        names = ["svc-%04d" % i for i in range(1234)]
        api.apply([fakeapi.service("ns%d" % (i % 7), n)
                   for i, n in enumerate(names)])
        conn = connect(api)
        seen, cont, pages, rvs = [], "", 0, set()
        while True:
            q = "limit=100" + ("&continue=" + urllib.parse.quote(cont)
                               if cont else "")
            code, body, _ = call(api, "/api/v1/services?" + q, conn=conn)
            assert code == 200, body
            if pages == 0:
                sock = conn.sock
                first_rv = body["metadata"]["resourceVersion"]
                # changes after the first page: invisible to later pages
                api.apply(fakeapi.service("ns0", "zzz-added"))
                api.delete("services", "ns6", "svc-1224")
            assert conn.sock is sock, "connection was not kept alive"
            rvs.add(body["metadata"]["resourceVersion"])
            seen += [s["metadata"]["name"] for s in body["items"]]
            pages += 1
            cont = body["metadata"].get("continue")
            if not cont:
                assert "remainingItemCount" not in body["metadata"]
                break
            assert body["metadata"]["remainingItemCount"] == \
                1234 - len(seen), body["metadata"]
        assert pages == 13 and sorted(seen) == names and \
            len(seen) == len(set(seen)), (pages, len(seen))
        assert rvs == {first_rv}, rvs
        # resourceVersion=0 is served from the watch cache: no paging
        code, body, _ = call(api, "/api/v1/services?limit=100&"
                             "resourceVersion=0")
        assert len(body["items"]) == 1234 and \
            "continue" not in body["metadata"], body["metadata"]
        lists = api.requests("services", "list")[:-1]
        assert len(lists) == 13 and "continue" not in lists[0].query and \
            all(r.query["limit"] == "100" and r.query["continue"]
                for r in lists[1:]), lists[:3]


def test_fakeapi_paging_within_a_namespace(env):
    """A namespace's LIST pages through that namespace only, even beside
    namespaces whose names begin with its name ("a-b", "a0" beside "a"),
    with remainingItemCount counting its objects alone; a WatchList of it
    sends them alone; a label selector pages the objects it matches, and
    the last page says no more remain."""
    with start() as api:
        for ns, n in (("a", 25), ("a-b", 7), ("a0", 5), ("b", 3)):
            api.apply([fakeapi.service(ns, "s%02d" % i,
                                       labels={"odd": str(i % 2)})
                       for i in range(n)])
        seen, cont = [], ""
        while True:
            q = "limit=10" + ("&continue=" + cont if cont else "")
            code, body, _ = call(api, "/api/v1/namespaces/a/services?" + q)
            assert code == 200, body
            seen += [(s["metadata"]["namespace"], s["metadata"]["name"])
                     for s in body["items"]]
            cont = body["metadata"].get("continue")
            if not cont:
                assert "remainingItemCount" not in body["metadata"], body
                break
            assert body["metadata"]["remainingItemCount"] == 25 - len(seen)
        assert seen == [("a", "s%02d" % i) for i in range(25)], seen
        w = RawWatch(api, "/api/v1/namespaces/a-b/services?watch=1&"
                     "sendInitialEvents=true&resourceVersionMatch="
                     "NotOlderThan&allowWatchBookmarks=true")
        try:
            evs = w.events(8)
            assert [(e["type"], e["object"]["metadata"].get("namespace"))
                    for e in evs] == [("ADDED", "a-b")] * 7 + \
                [("BOOKMARK", None)], evs
        finally:
            w.close()
        names, cont = [], ""
        while True:
            q = "labelSelector=odd%3D1&limit=4" + \
                ("&continue=" + cont if cont else "")
            code, body, _ = call(api, "/api/v1/namespaces/a/services?" + q)
            names += [s["metadata"]["name"] for s in body["items"]]
            cont = body["metadata"].get("continue")
            assert "remainingItemCount" not in body["metadata"], body
            if not cont:
                break
        assert names == ["s%02d" % i for i in range(1, 25, 2)], names


def test_fakeapi_large_objects(env):
    """Services with large annotations make large LIST pages; each LIST
    request records its body's size (before gzip, which the client gets
    when it asks); annotations over 256 KiB are refused as by the real
    server's validation."""
    with start() as api:
        blob = "x" * 100000
        api.apply([fakeapi.service("big", "s%d" % i,
                                   annotations={"example.com/blob": blob})
                   for i in range(5)])
        code, body, headers = call(api, "/api/v1/services?limit=3",
                                   headers={"Accept-Encoding": "gzip"})
        assert code == 200 and headers.get("Content-Encoding") == "gzip", headers
        assert [s["metadata"]["annotations"]["example.com/blob"] == blob
                for s in body["items"]] == [True] * 3, body["metadata"]
        sent = len(json.dumps(body, separators=(",", ":")))
        size = api.requests("services", "list")[-1].size
        assert 300000 < size and abs(size - sent) < 100, (size, sent)
        too_big = fakeapi.service("big", "huge", annotations={
            "example.com/blob": "x" * (fakeapi.ANNOTATIONS_MAX + 1)})
        try:
            api.apply(too_big)
            raise AssertionError("annotations over 256 KiB accepted")
        except ValueError as e:
            assert "must have at most 262144 bytes" in str(e), e
        assert api.get("services", "big", "huge") is None


def test_fakeapi_list_errors(env):
    """Expired continue -> 410 Expired; continue with an RV -> 400; an
    Exact RV before the compaction -> 410; selectors the real server
    refuses -> 400."""
    with start() as api:
        api.apply([fakeapi.namespace("ns%d" % i) for i in range(5)])
        code, body, _ = call(api, "/api/v1/namespaces?limit=2")
        cont = body["metadata"]["continue"]
        code, body, _ = call(api, "/api/v1/namespaces?limit=2&"
                             "resourceVersion=3&continue=" + cont)
        assert code == 400 and body["reason"] == "BadRequest", body
        api.apply(fakeapi.namespace("later"))   # the snapshot is now old
        api.compact()
        code, body, _ = call(api, "/api/v1/namespaces?limit=2&continue="
                             + cont)
        assert code == 410 and body["reason"] == "Expired" and \
            body["kind"] == "Status", body
        code, body, _ = call(api, "/api/v1/namespaces?resourceVersion=2&"
                             "resourceVersionMatch=Exact")
        assert code == 410, body
        code, body, _ = call(api, "/api/v1/pods?fieldSelector=spec.bogus=1")
        assert code == 400 and "not supported" in body["message"], body
        code, body, _ = call(api, "/api/v1/namespaces?continue=garbage")
        assert code == 400, body
        # an RV the server has not reached: 504 after the watch cache's wait
        api.rv_wait = 0.2
        for path in ("/api/v1/namespaces?resourceVersion=999",
                     "/api/v1/namespaces?watch=1&resourceVersion=999"):
            code, body, _ = call(api, path)
            assert code == 504 and body["details"]["causes"][0]["reason"] \
                == "ResourceVersionTooLarge", body


def test_fakeapi_before_next_runs_once_before_the_matching_request(env):
    """before_next(fn, resource, verb, paged) calls fn just before the next
    request it matches is served, once: a compaction before a LIST's second
    page makes that page's continue token expire (410), the next first
    page and its second page are served as usual."""
    with start() as api:
        api.apply([fakeapi.namespace("ns%d" % i) for i in range(5)])
        calls = []
        api.before_next(lambda: calls.append(api.compact()),
                        resource="namespaces", verb="list", paged=True)
        code, body, _ = call(api, "/api/v1/namespaces?limit=2")
        assert code == 200 and calls == [], (code, calls)
        api.apply(fakeapi.namespace("later"))   # the snapshot becomes old ...
        code, body, _ = call(api, "/api/v1/namespaces?limit=2&continue="
                             + body["metadata"]["continue"])
        assert code == 410 and len(calls) == 1, (code, calls)  # ... and compacted
        code, body, _ = call(api, "/api/v1/namespaces?limit=2")
        code, body, _ = call(api, "/api/v1/namespaces?limit=2&continue="
                             + body["metadata"]["continue"])
        assert code == 200 and len(calls) == 1, (code, calls)


def served(api, path):
    """GET path; (status, body, where the server read it from)."""
    code, body, _ = call(api, path)
    return code, body, api.requests()[-1].served_from


def test_fakeapi_lists_from_the_watch_cache_or_etcd(env):
    """Where each LIST is served from, as the real cacher decides: RV=0
    from the watch cache, whole (limit ignored, no continue); RV=N
    NotOlderThan without a limit from the cache, as the state now; no RV,
    a continue, a limit with an RV other than 0, or Exact from etcd. With
    the watch cache off, RV=0 is paged from etcd."""
    with start() as api:
        api.apply([fakeapi.namespace("ns%d" % i) for i in range(5)])
        rv = api.resource_version
        api.apply(fakeapi.namespace("late"))
        now = api.resource_version
        code, body, src = served(api, "/api/v1/namespaces?resourceVersion=0&"
                                 "limit=2")
        assert (code, src, len(body["items"])) == (200, "cache", 6) and \
            "continue" not in body["metadata"] and \
            body["metadata"]["resourceVersion"] == str(now), body["metadata"]
        code, body, src = served(api, "/api/v1/namespaces?resourceVersion=%d&"
                                 "resourceVersionMatch=NotOlderThan" % rv)
        assert (code, src, len(body["items"])) == (200, "cache", 6) and \
            body["metadata"]["resourceVersion"] == str(now), body["metadata"]
        code, body, src = served(api, "/api/v1/namespaces?resourceVersion=%d"
                                 % rv)                # legacy: NotOlderThan
        assert (code, src) == (200, "cache"), body
        code, body, src = served(api, "/api/v1/namespaces?resourceVersion=%d&"
                                 "resourceVersionMatch=NotOlderThan&limit=2"
                                 % rv)
        assert (code, src, len(body["items"])) == (200, "etcd", 2) and \
            body["metadata"]["resourceVersion"] == str(now), body["metadata"]
        code, body, src = served(api, "/api/v1/namespaces?resourceVersion=%d&"
                                 "limit=2" % rv)      # legacy with a limit: Exact
        assert (code, src) == (200, "etcd") and \
            body["metadata"]["resourceVersion"] == str(rv), body["metadata"]
        code, body, src = served(api, "/api/v1/namespaces?limit=2")
        assert (code, src) == (200, "etcd") and api.requests()[-1].consistent
        cont = body["metadata"]["continue"]
        code, body, src = served(api, "/api/v1/namespaces?limit=2&continue="
                                 + urllib.parse.quote(cont))
        assert (code, src) == (200, "etcd") and \
            not api.requests()[-1].consistent, body
        code, body, src = served(api, "/api/v1/namespaces?resourceVersion=%d&"
                                 "resourceVersionMatch=Exact" % rv)
        assert (code, src, len(body["items"])) == (200, "etcd", 5), body
        assert len(api.reads("cache")) == 3 and len(api.reads("etcd")) == 5, \
            api.requests()
    with start(watch_cache=False) as api:
        api.apply([fakeapi.namespace("ns%d" % i) for i in range(5)])
        code, body, src = served(api, "/api/v1/namespaces?resourceVersion=0&"
                                  "limit=2")
        assert (code, src, len(body["items"])) == (200, "etcd", 2) and \
            body["metadata"]["continue"], body["metadata"]


def test_fakeapi_list_options_are_validated(env):
    """What apimachinery's ValidateListOptions refuses is 422 Invalid with
    the field in the causes, before any read."""
    cases = [
        ("/api/v1/namespaces?resourceVersionMatch=NotOlderThan",
         "resourceVersionMatch", "forbidden unless resourceVersion is provided"),
        ("/api/v1/namespaces?resourceVersion=0&resourceVersionMatch=Exact",
         "resourceVersionMatch", 'forbidden for resourceVersion "0"'),
        ("/api/v1/namespaces?resourceVersion=1&resourceVersionMatch=Newest",
         "resourceVersionMatch", 'Unsupported value: "Newest"'),
        ("/api/v1/namespaces?sendInitialEvents=true",
         "sendInitialEvents", "forbidden for list"),
        ("/api/v1/namespaces?watch=1&resourceVersion=1&"
         "resourceVersionMatch=NotOlderThan",
         "resourceVersionMatch", "unless sendInitialEvents is provided"),
        ("/api/v1/namespaces?watch=1&sendInitialEvents=true",
         "resourceVersionMatch", "requires setting resourceVersionMatch to "
         "NotOlderThan"),
    ]
    with start() as api:
        for path, field, text in cases:
            code, body, _ = call(api, path)
            assert code == 422 and body["reason"] == "Invalid" and \
                body["message"].startswith('ListOptions.meta.k8s.io "" is '
                                           'invalid: ') and \
                text in body["message"] and \
                body["details"]["causes"][0]["field"] == field, (path, body)
            assert api.requests()[-1].served_from is None
        code, body, _ = call(api, "/api/v1/namespaces?limit=1&resourceVersion=0"
                             "&continue=x&resourceVersionMatch=NotOlderThan")
        assert code == 422 and "when continue is provided" in \
            body["message"], body


def test_fakeapi_watch_list_is_gzipped_one_member_per_event(env):
    """WatchListCompression (1.37, on by default): a WatchList asked with
    Accept-Encoding: gzip comes gzipped, each event a gzip member of its
    own; without the gate, or without gzip asked, it is plain; a watch of
    changes from an RV is never compressed."""
    wl = ("/api/v1/services?watch=1&sendInitialEvents=true&"
          "resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
    for gate, ask, watch_list, gzipped in (
            (True, True, True, True), (True, False, True, False),
            (False, True, True, False), (True, True, False, False)):
        with start(watch_list_compression=gate) as api:
            rv = api.apply(fakeapi.namespace("a"))
            path = wl if watch_list else \
                "/api/v1/services?watch=1&resourceVersion=%d" % rv
            w = RawWatch(api, path, gzip=ask)
            try:
                assert w.gzipped == gzipped, (gate, ask, path, w.headers)
                api.apply([fakeapi.service("a", "s%d" % i) for i in range(3)])
                n = 4 if watch_list else 3
                evs = w.events(n)
                assert len(evs) == n, evs
                req = api.requests("services", "watch")[-1]
                assert ("gzip" in (req.accept_encoding or "")) == ask, \
                    req.to_dict()
            finally:
                w.close()


def test_fakeapi_watch_list_streams_the_state_then_changes(env):
    """sendInitialEvents=true: the state as ADDED events from the watch
    cache, the bookmark annotated k8s.io/initial-events-end carrying the
    state's RV, then the changes, on one stream. No RV: at least as new as
    etcd's current revision (a consistent read); "0": whatever the cache
    has; N: at least N. Without allowWatchBookmarks, no end bookmark. A
    server without WatchList refuses it: 422 Invalid."""
    wl = ("/api/v1/services?watch=1&sendInitialEvents=true&"
          "resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
    with start() as api:
        api.apply([fakeapi.service("a", "s%d" % i) for i in range(3)])
        rv = api.resource_version
        api.apply(fakeapi.namespace("a"))
        names = ["s0", "s1", "s2"]
        for i, (q, consistent) in enumerate((
                ("", True), ("&resourceVersion=0", False),
                ("&resourceVersion=%d" % rv, False))):
            w = RawWatch(api, wl + q)
            try:
                evs = w.events(len(names) + 1)
                assert [e["type"] for e in evs] == ["ADDED"] * len(names) + \
                    ["BOOKMARK"], evs
                end = evs[-1]["object"]["metadata"]
                assert end["annotations"] == {
                    "k8s.io/initial-events-end": "true"} and \
                    end["resourceVersion"] == str(api.resource_version), end
                assert sorted(e["object"]["metadata"]["name"]
                              for e in evs[:-1]) == sorted(names), evs
                req = api.requests("services", "watch")[-1]
                assert req.watch_list and req.served_from == "cache" and \
                    req.consistent == consistent, req.to_dict()
                names.append("new%d" % i)
                api.apply(fakeapi.service("a", names[-1]))
                ev = w.events(1)[0]
                assert ev["type"] == "ADDED" and \
                    ev["object"]["metadata"]["name"] == names[-1], ev
            finally:
                w.close()
        w = RawWatch(api, wl.replace("&allowWatchBookmarks=true", "") +
                     "&timeoutSeconds=1")
        evs = w.events(20)
        w.close()
        assert [e["type"] for e in evs] == ["ADDED"] * 6, evs
        # Held back after two initial events: the rest and the bookmark
        # come only when released.
        api.hold_initial_events("services", after=2)
        w = RawWatch(api, wl)
        try:
            assert len(w.events(2)) == 2
            w.sock.settimeout(0.3)
            try:
                raise AssertionError("past the hold: %r" % w.event())
            except socket.timeout:
                pass
            api.hold_initial_events("services")
            w.sock.settimeout(5)
            evs = [w.event() for _ in range(5)]
            assert [e["type"] for e in evs] == ["ADDED"] * 4 + ["BOOKMARK"], evs
        finally:
            w.close()
    with start(watch_list=False) as api:
        api.apply(fakeapi.service("a", "s"))
        code, body, _ = call(api, wl)
        assert code == 422 and body["reason"] == "Invalid" and \
            "sendInitialEvents is forbidden for watch unless the WatchList " \
            "feature gate is enabled" in body["message"], body
        req = api.requests("services", "watch")[-1]
        assert req.watch_list and req.served_from is None, req.to_dict()


def test_fakeapi_watch_cache_behind_etcd(env):
    """cache_behind(rv): the watch cache serves the state at rv; a read it
    serves asking for a newer RV waits, then 504 ResourceVersionTooLarge
    (a LIST: the HTTP status; a WatchList: an ERROR event in a 200
    stream); a consistent LIST from etcd is current; watches see nothing
    past rv until the cache catches up."""
    with start() as api:
        api.rv_wait = 0.2
        api.apply([fakeapi.service("a", "s%d" % i) for i in range(2)])
        behind = api.resource_version
        api.cache_behind(behind)
        api.apply(fakeapi.service("a", "later"))
        now = api.resource_version
        code, body, src = served(api, "/api/v1/services?resourceVersion=0")
        assert (code, src) == (200, "cache") and \
            [s["metadata"]["name"] for s in body["items"]] == ["s0", "s1"] and \
            body["metadata"]["resourceVersion"] == str(behind), body
        code, body, _ = call(api, "/api/v1/services?resourceVersion=%d&"
                             "resourceVersionMatch=NotOlderThan" % now)
        assert code == 504 and body["details"]["causes"][0]["reason"] == \
            "ResourceVersionTooLarge", body
        w = RawWatch(api, "/api/v1/services?watch=1&sendInitialEvents=true&"
                     "resourceVersionMatch=NotOlderThan&allowWatchBookmarks="
                     "true&resourceVersion=%d" % now)
        evs = w.events(5)
        w.close()
        assert w.status == 200 and [e["type"] for e in evs] == ["ERROR"] and \
            evs[0]["object"]["code"] == 504 and w.ended, evs
        code, body, src = served(api, "/api/v1/services?limit=10")
        assert (code, src, len(body["items"])) == (200, "etcd", 3), body
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=%d"
                     % behind)
        try:
            w.sock.settimeout(0.3)
            try:
                assert w.event() is None
            except socket.timeout:
                pass                        # nothing past the cache's RV
            api.cache_behind(None)
            ev = w.events(1)[0]
            assert (ev["type"], ev["object"]["metadata"]["name"]) == \
                ("ADDED", "later"), ev
        finally:
            w.close()


def test_fakeapi_watch_resumes_from_rv(env):
    """A watch from a list's RV replays the later changes in order, each
    in its own chunk; the DELETED object carries the deletion RV."""
    with start() as api:
        api.apply(fakeapi.service("a", "one"))
        code, body, _ = call(api, "/api/v1/services")
        rv = body["metadata"]["resourceVersion"]
        api.apply(fakeapi.namespace("a"))            # another resource
        api.apply(fakeapi.service("a", "two"))
        changed = fakeapi.service("a", "one", "10.96.9.9")
        api.apply(changed)
        gone = api.delete("services", "a", "two")
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=" + rv)
        try:
            assert w.status == 200 and "chunked" in w.headers, w.headers
            evs = w.events(3)
            got = [(e["type"], e["object"]["metadata"]["name"]) for e in evs]
            assert got == [("ADDED", "two"), ("MODIFIED", "one"),
                           ("DELETED", "two")], got
            assert evs[0]["object"]["kind"] == "Service"
            assert rv_of(evs[2]["object"]) == rv_of(gone) == \
                api.resource_version, evs[2]
            assert evs[1]["object"]["spec"]["clusterIP"] == "10.96.9.9"
            api.apply(fakeapi.service("a", "three"))
            ev = w.events(1)[0]
            assert ev["type"] == "ADDED" and \
                ev["object"]["metadata"]["name"] == "three", ev
        finally:
            w.close()
        # no RV: the current state as ADDED events first
        w = RawWatch(api, "/api/v1/services?watch=true&timeoutSeconds=1")
        try:
            names = sorted(e["object"]["metadata"]["name"]
                           for e in w.events(10))
            assert names == ["one", "three"] and w.ended, (names, w.ended)
        finally:
            w.close()


def test_fakeapi_watch_connections_send_at_once(env):
    """The server's connections have TCP_NODELAY, as Go's net package sets
    on every connection: with Nagle's algorithm on, an event written while
    the client has not yet acknowledged the previous one waits for the
    client's delayed ACK (40 ms on Linux), which is no real server's
    latency."""
    with start() as api:
        rv = api.apply(fakeapi.namespace("a"))
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=%d" % rv)
        try:
            api.apply(fakeapi.service("a", "s"))
            assert len(w.events(1)) == 1
            with api._lock:
                conns = list(api._conns)
            assert conns
            for c in conns:
                assert c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), c
        finally:
            w.close()


def test_fakeapi_written_at_tells_when_an_event_left(env):
    """written_at(rv): when the event of rv began to be written to a watch
    (between its apply and its arrival at the client), the first time;
    None for one no watch was sent (another resource's)."""
    with start() as api:
        rv0 = api.apply(fakeapi.namespace("a"))
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=%d" % rv0)
        w2 = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=%d" % rv0)
        try:
            t0 = time.monotonic()
            rv = api.apply(fakeapi.service("a", "s"))
            evs = w.events(1)
            t1 = time.monotonic()
            assert len(evs) == 1 and rv_of(evs[0]["object"]) == rv, evs
            written = api.written_at(rv, timeout=0)
            assert written is not None and t0 <= written <= t1, (t0, written, t1)
            assert len(w2.events(1)) == 1
            assert api.written_at(rv, timeout=0) == written  # the first watch's
            assert api.written_at(rv0, timeout=0) is None
        finally:
            w.close()
            w2.close()


def test_fakeapi_watch_410(env):
    """An RV older than the history window, or than a compaction: HTTP 200,
    one ERROR event with a 410 Status, then the end of the stream."""
    with start(history=5) as api:
        api.apply(fakeapi.namespace("a"))
        rv = api.resource_version
        api.apply([fakeapi.service("a", "s%d" % i) for i in range(4)])
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=%d" % rv)
        evs = w.events(4)
        w.close()
        assert [e["type"] for e in evs] == ["ADDED"] * 4, evs  # in window
        api.apply([fakeapi.service("a", "t%d" % i) for i in range(3)])
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=%d" % rv)
        evs = w.events(10)
        w.close()
        assert w.status == 200 and len(evs) == 1 and w.ended, (w.status, evs)
        err = evs[0]
        assert err["type"] == "ERROR" and err["object"]["code"] == 410 and \
            err["object"]["reason"] == "Expired", err
        now = api.resource_version
        api.compact()
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=%d"
                     % (now - 1))
        evs = w.events(10)
        w.close()
        assert [e["type"] for e in evs] == ["ERROR"] and w.ended, evs
        # forced: the next watch expires whatever its RV
        api.fail_next(1, 410, resource="services", verb="watch")
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=%d" % now)
        evs = w.events(10)
        w.close()
        assert w.status == 200 and [e["type"] for e in evs] == ["ERROR"] \
            and evs[0]["object"]["code"] == 410 and w.ended, evs
        # from the compaction point on, watching works again
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=%d" % now)
        try:
            api.apply(fakeapi.service("a", "after"))
            evs = w.events(1)
            assert [(e["type"], e["object"]["metadata"]["name"])
                    for e in evs] == [("ADDED", "after")], evs
        finally:
            w.close()


def test_fakeapi_bookmarks_and_timeout(env):
    """Bookmarks only when asked, carrying the current RV; timeoutSeconds
    ends the stream with the final chunk."""
    with start(bookmark_interval=0.2) as api:
        api.apply(fakeapi.namespace("a"))
        rv = api.resource_version
        api.apply(fakeapi.pod("a", "p"))      # another resource moves the RV
        w = RawWatch(api, "/api/v1/services?watch=1&allowWatchBookmarks=true"
                     "&timeoutSeconds=1&resourceVersion=%d" % rv)
        t0 = time.monotonic()
        evs = w.events(100, timeout=3)
        dt = time.monotonic() - t0
        w.close()
        assert w.ended and 0.9 < dt < 2, (w.ended, dt)
        assert len(evs) >= 3 and all(e["type"] == "BOOKMARK" for e in evs), \
            evs
        bm = evs[0]["object"]
        assert bm["kind"] == "Service" and \
            rv_of(bm) == api.resource_version, bm
        w = RawWatch(api, "/api/v1/services?watch=1&timeoutSeconds=1&"
                     "resourceVersion=%d" % rv)
        evs = w.events(100, timeout=3)
        w.close()
        assert evs == [] and w.ended, evs


def test_fakeapi_cut_watches(env):
    """cut_watches() closes every stream without the final chunk (also
    mid-chunk); wait_watches() sees them open and then gone."""
    with start() as api:
        ws = [RawWatch(api, "/api/v1/%s?watch=1&resourceVersion=1" % r)
              for r in ("services", "services", "pods")]
        try:
            api.wait_watches("services", 2, timeout=2)
            api.wait_watches("pods", 1, timeout=2)
            n = api.cut_watches("services")
            assert n == 2, "cut %d watches, want 2" % n
            for w in ws[:2]:
                evs = w.events(1)
                assert evs == [] and w.cut and not w.ended, \
                    (evs, w.cut, w.ended)
            n = api.cut_watches(partial=True)
            assert n == 1, "cut %d more watches, want 1" % n
            try:
                ws[2].events(1)
                cut = ws[2].cut
            except AssertionError:
                cut = False
            assert cut, "the partial cut did not end the stream"
            deadline = time.monotonic() + 2
            while api.open_watches() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert api.open_watches() == 0, api.open_watches()
            assert api.count("services", "watch") == 2, api.requests()
        finally:
            for w in ws:
                w.close()


def test_fakeapi_custom_resources_only_while_their_crd_is_installed(env):
    """Istio's and MCS's resources: 404 (the real NotFound Status) for every
    verb until their CRD is installed (the request still recorded), then
    listed and watched like the others, in their own API groups; objects
    shaped as the API returns them; uninstalling deletes them (DELETED
    events) and ends the watches cleanly; no object without its CRD."""
    se_path = "/apis/networking.istio.io/v1/namespaces/prod/serviceentries"
    si_path = "/apis/multicluster.x-k8s.io/v1alpha1/serviceimports"
    with start(crds=fakeapi.ISTIO_CRDS) as api:
        code, body, _ = call(api, si_path)
        assert code == 404 and body["reason"] == "NotFound" and body["kind"] == "Status", body
        code, _, _ = call(api, si_path + "?watch=1")
        assert code == 404 and api.count("serviceimports") == 2, api.requests("serviceimports")
        try:
            api.apply(fakeapi.service_import("prod", "db", ips=["10.100.0.1"]))
            raise AssertionError("a ServiceImport was stored without its CRD")
        except ValueError:
            pass
        se = fakeapi.service_entry("prod", "ext", ["a.example.com"], resolution="DNS",
                                   allocated={"a.example.com": ["240.240.0.1"]})
        api.apply(fakeapi.namespace("prod"), se,
                  fakeapi.workload_entry("prod", "vm", "10.0.0.1", labels={"app": "x"}))
        code, body, _ = call(api, se_path)
        assert code == 200 and body["kind"] == "ServiceEntryList" and \
            body["apiVersion"] == "networking.istio.io/v1", body
        item = body["items"][0]
        assert item["spec"]["hosts"] == ["a.example.com"] and \
            item["status"]["addresses"] == [{"value": "240.240.0.1", "host": "a.example.com"}], item
        code, body, _ = call(api, "/apis/networking.istio.io/v1/workloadentries")
        assert code == 200 and body["items"][0]["spec"]["address"] == "10.0.0.1", body
        w = RawWatch(api, se_path + "?watch=1&resourceVersion=%d" % rv_of(item))
        try:
            api.wait_watches("serviceentries", 1, timeout=2)
            api.uninstall_crd("serviceentries")
            evs = w.events(2)
            assert [e["type"] for e in evs] == ["DELETED"] and w.ended, (evs, w.ended, w.cut)
        finally:
            w.close()
        assert call(api, se_path)[0] == 404
        api.install_crd("serviceimports")
        api.apply(fakeapi.service_import("prod", "db", ips=["10.100.0.1"], ports=[80]),
                  fakeapi.imported_endpointslice("prod", "db", "east",
                                                 endpoints=["10.1.0.1"], ports=[80]))
        code, body, _ = call(api, si_path)
        assert code == 200 and body["items"][0]["spec"]["ips"] == ["10.100.0.1"], body
        code, body, _ = call(api, "/apis/discovery.k8s.io/v1/endpointslices?labelSelector="
                             "multicluster.kubernetes.io%2Fsource-cluster%3Deast")
        assert [i["metadata"]["labels"]["multicluster.kubernetes.io/service-name"]
                for i in body["items"]] == ["db"], body


def test_fakeapi_many_watches(env):
    """50 concurrent watches each get the same change promptly."""
    with start() as api:
        ws = [RawWatch(api, "/api/v1/namespaces?watch=1&resourceVersion=1")
              for _ in range(50)]
        try:
            api.wait_watches("namespaces", 50, timeout=5)
            t0 = time.monotonic()
            api.apply(fakeapi.namespace("fresh"))
            for w in ws:
                ev = w.events(1, timeout=2)
                assert [e["object"]["metadata"]["name"] for e in ev] == \
                    ["fresh"], ev
            dt = time.monotonic() - t0
            assert dt < 1, "50 watchers took %.2fs to get one event" % dt
        finally:
            for w in ws:
                w.close()


def test_fakeapi_with_curl(env):
    """libcurl (the client localdns uses, here through the curl tool)
    reuses the connection across LIST pages, takes gzip, and reads a watch
    to its clean end."""
    if not os.path.exists("/usr/bin/curl"):
        raise harness.Skip("no curl")
    with start() as api:
        api.apply([fakeapi.service("a", "s%04d" % i) for i in range(600)])
        auth = ["-H", "Authorization: Bearer " + TOKEN]
        p = subprocess.run(
            ["curl", "-sv", "--compressed", "-o", "/dev/null", "-o",
             "/dev/null"] + auth +
            [api.url + "/api/v1/services?limit=500",
             api.url + "/api/v1/services?limit=2"],
            capture_output=True, text=True, timeout=10)
        assert p.returncode == 0, p.stderr[-500:]
        assert "Re-using existing connection" in p.stderr, p.stderr[-800:]
        assert "Content-Encoding: gzip" in p.stderr, p.stderr[-800:]
        rv = api.resource_version
        api.apply(fakeapi.service("a", "late"))
        p = subprocess.run(
            ["curl", "-sSN", "-m", "5"] + auth +
            [api.url + "/api/v1/services?watch=1&resourceVersion=%d&"
             "timeoutSeconds=1" % rv], capture_output=True, text=True,
            timeout=10)
        assert p.returncode == 0, (p.returncode, p.stderr)
        lines = [json.loads(l) for l in p.stdout.splitlines()]
        assert [(e["type"], e["object"]["metadata"]["name"])
                for e in lines] == [("ADDED", "late")], lines
        # a cut watch is an error for curl: the transfer was cut short
        w = subprocess.Popen(["curl", "-sSN", "-m", "5"] + auth +
                             [api.url + "/api/v1/services?watch=1&"
                              "resourceVersion=%d" % rv],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        try:
            api.wait_watches("services")
            api.cut_watches()
            out, err = w.communicate(timeout=5)
        finally:
            if w.poll() is None:
                w.kill()
        assert w.returncode == 18, (w.returncode, err)   # CURLE_PARTIAL_FILE


def test_fakeapi_auth_and_faults(env):
    """401 without or with a wrong token; the token file is re-read;
    forbid() -> 403; fail_next() -> the given status, then normal."""
    token_file = os.path.join(env.tmp, "token")
    with open(token_file, "w") as f:
        f.write("first\n")
    with start(tokens=None, token_file=token_file) as api:
        code, body, _ = call(api, "/api/v1/pods", token=None)
        assert code == 401 and body["reason"] == "Unauthorized", body
        assert call(api, "/api/v1/pods", token="first")[0] == 200
        with open(token_file, "w") as f:
            f.write("second\n")
        assert call(api, "/api/v1/pods", token="first")[0] == 401
        assert call(api, "/api/v1/pods", token="second")[0] == 200
        api.forbid("pods")
        code, body, _ = call(api, "/api/v1/pods?watch=1", token="second")
        assert code == 403 and body["reason"] == "Forbidden" and \
            "cannot watch" in body["message"], body
        assert call(api, "/api/v1/services", token="second")[0] == 200
        api.allow("pods")
        api.fail_next(2, 503, resource="pods")
        code, body, hdr = call(api, "/api/v1/pods", token="second")
        assert code == 503 and hdr.get("Retry-After") == "1", (code, hdr)
        assert call(api, "/api/v1/services", token="second")[0] == 200
        assert call(api, "/api/v1/pods", token="second")[0] == 503
        assert call(api, "/api/v1/pods", token="second")[0] == 200
        codes = [r.code for r in api.requests("pods")]
        assert codes == [401, 200, 401, 200, 403, 503, 503, 200], codes


def test_fakeapi_selectors(env):
    """fieldSelector spec.nodeName on list and watch (a pod moving onto the
    node is ADDED, off it DELETED); labelSelector on EndpointSlices."""
    with start() as api:
        api.apply(fakeapi.pod("a", "here", "10.1.0.1", node="node-a"),
                  fakeapi.pod("a", "there", "10.1.0.2", node="node-b"),
                  fakeapi.endpointslice("a", "web", "web-x"),
                  fakeapi.endpointslice("a", "db", "db-x"))
        code, body, _ = call(api, "/api/v1/pods?fieldSelector="
                             "spec.nodeName%3Dnode-a")
        assert [p["metadata"]["name"] for p in body["items"]] == ["here"]
        code, body, _ = call(api, "/api/v1/pods?fieldSelector="
                             "metadata.name%3Dthere")
        assert [p["metadata"]["name"] for p in body["items"]] == ["there"]
        code, body, _ = call(api, "/apis/discovery.k8s.io/v1/endpointslices"
                             "?labelSelector=kubernetes.io%2Fservice-name"
                             "%3Ddb")
        assert [e["metadata"]["name"] for e in body["items"]] == ["db-x"]
        rv = api.resource_version
        w = RawWatch(api, "/api/v1/pods?watch=1&resourceVersion=%d&"
                     "fieldSelector=spec.nodeName%%3Dnode-a" % rv)
        try:
            api.apply(fakeapi.pod("a", "there", "10.1.0.2", node="node-a"))
            api.apply(fakeapi.pod("a", "here", "10.1.0.1", node="node-c"))
            api.apply(fakeapi.pod("a", "far", "10.1.0.3", node="node-c"))
            api.delete("pods", "a", "there")
            evs = [(e["type"], e["object"]["metadata"]["name"],
                    e["object"]["spec"]["nodeName"]) for e in w.events(3)]
            assert evs == [("ADDED", "there", "node-a"),
                           ("DELETED", "here", "node-a"),
                           ("DELETED", "there", "node-a")], evs
        finally:
            w.close()


def test_fakeapi_namespace_deletion(env):
    """delete_namespace(): the namespace turns Terminating, its objects go,
    then it goes; other namespaces stay."""
    with start() as api:
        api.apply(fakeapi.namespace("doomed"), fakeapi.namespace("kept"),
                  fakeapi.service("doomed", "a"), fakeapi.service("kept", "b"),
                  fakeapi.endpointslice("doomed", "a", "a-1", ["10.1.0.1"]))
        rv = api.resource_version
        api.delete_namespace("doomed")
        w = RawWatch(api, "/api/v1/namespaces?watch=1&resourceVersion=%d"
                     % rv)
        evs = w.events(2)
        w.close()
        assert [(e["type"], e["object"]["status"]["phase"]) for e in evs] \
            == [("MODIFIED", "Terminating"), ("DELETED", "Terminating")], evs
        assert "deletionTimestamp" in evs[0]["object"]["metadata"]
        assert [s["metadata"]["name"] for s in api.objects("services")] == \
            ["b"]
        assert api.objects("endpointslices") == []


def test_fakeapi_tls_and_mtls(env):
    """HTTPS with the CA from make_tls(); a client certificate alone
    authenticates; a client that does not trust the CA fails."""
    tls = fakeapi.make_tls(os.path.join(env.tmp, "pki"))
    with start(tls_cert=tls.server_cert, tls_key=tls.server_key,
               client_ca=tls.ca) as api:
        api.apply(fakeapi.namespace("a"))
        ctx = ssl.create_default_context(cafile=tls.ca)
        code, body, _ = call(api, "/api/v1/namespaces", context=ctx)
        assert code == 200 and len(body["items"]) == 1, body
        assert call(api, "/api/v1/namespaces", token=None,
                    context=ctx)[0] == 401
        ctx.load_cert_chain(tls.client_cert, tls.client_key)
        code, body, _ = call(api, "/api/v1/namespaces", token=None,
                             context=ctx)
        assert code == 200, body
        assert api.requests()[-1].user == \
            "system:serviceaccount:kube-system:localdns"
        other = fakeapi.make_tls(os.path.join(env.tmp, "other"))
        try:
            call(api, "/api/v1/namespaces",
                 context=ssl.create_default_context(cafile=other.ca))
            raise AssertionError("a foreign CA was accepted")
        except ssl.SSLCertVerificationError:
            pass
        kc = api.kubeconfig(os.path.join(env.tmp, "kubeconfig"), ca=tls.ca,
                            token=TOKEN)
        text = open(kc).read()
        assert "server: https://127.0.0.1:%d" % api.port in text and \
            "certificate-authority: %s" % tls.ca in text, text
        kc = api.kubeconfig(os.path.join(env.tmp, "kc2"), ca=tls.ca,
                            client_cert=tls.client_cert,
                            client_key=tls.client_key, embed=True)
        text = open(kc).read()
        assert "client-key-data: " in text and "BEGIN" not in text, text


def test_fakeapi_down_and_up(env):
    """set_down(True) refuses connections and drops open ones; after
    set_down(False) the same port answers again."""
    with start() as api:
        port = api.port
        w = RawWatch(api, "/api/v1/services?watch=1&resourceVersion=1")
        api.wait_watches("services")
        api.set_down(True)
        assert w.events(1) == [] and w.cut, "open watch survived the outage"
        w.close()
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            raise AssertionError("connection accepted while down")
        except ConnectionRefusedError:
            pass
        api.set_down(False)
        assert api.port == port and call(api, "/api/v1/services")[0] == 200


def test_fakeapi_script_and_control(env):
    """Run as a script: the ready file names the ports; the HTTP control
    endpoints load objects, read counters and survive "down"."""
    ready = os.path.join(env.tmp, "ready")
    token_file = os.path.join(env.tmp, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN)
    p = harness.track_process(subprocess.Popen(
        [sys.executable, os.path.join(harness.REPO, "tests", "kube",
                                      "fakeapi.py"),
         "--port", "0", "--token-file", token_file, "--ready-file", ready],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    try:
        deadline = time.monotonic() + 5
        while not os.path.exists(ready):
            assert p.poll() is None and time.monotonic() < deadline, \
                "fakeapi did not start: %r" % p.stderr.read()
            time.sleep(0.02)
        port, cport = [int(x) for x in open(ready).read().split()]

        def control(op, body=None, port=cport):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("POST", "/_control/" + op,
                      body=json.dumps(body or {}).encode(),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            out = json.loads(r.read())
            c.close()
            assert r.status == 200, (op, r.status, out)
            return out

        control("apply", {"objects": [fakeapi.namespace("a"),
                                      fakeapi.service("a", "s")]})
        api = type("Remote", (), {"port": port, "scheme": "http"})()
        code, body, _ = call(api, "/api/v1/services")
        assert code == 200 and len(body["items"]) == 1, body
        reqs = control("requests", {"resource": "services"})["requests"]
        assert [r["verb"] for r in reqs] == ["list"], reqs
        control("down", port=port)          # through the API port itself
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            raise AssertionError("connection accepted while down")
        except ConnectionRefusedError:
            pass
        control("up")
        state = control("state")
        assert state["down"] is False and state["port"] == port, state
        control("delete", {"resource": "services", "namespace": "a",
                           "name": "s"})
        code, body, _ = call(api, "/api/v1/services")
        assert body["items"] == [], body
    finally:
        harness._kill(p)


def test_fakeapi_scale(env):
    """10,000 Services and 1,000 EndpointSlices of 100 endpoints each, read
    in pages of 500 (gzip asked, as libcurl may), within a few seconds."""
    with start() as api:
        api.apply([fakeapi.service("ns%d" % (i % 50), "svc-%05d" % i,
                                   ports=[80]) for i in range(10000)])
        api.apply([fakeapi.endpointslice(
            "ns%d" % (i % 50), "svc-%05d" % i, "svc-%05d-x" % i,
            endpoints=[fakeapi.endpoint("10.%d.%d.%d" % (i // 256, i % 256, j),
                                        node="node-%d" % (j % 10))
                       for j in range(100)], ports=[80])
            for i in range(1000)])
        conn = connect(api)
        totals = {}
        t0 = time.monotonic()
        for path in ("/api/v1/services",
                     "/apis/discovery.k8s.io/v1/endpointslices"):
            cont, n, eps = "", 0, 0
            while True:
                q = "?limit=500" + ("&continue=" + cont if cont else "")
                code, body, hdr = call(api, path + q, conn=conn, headers={
                    "Accept-Encoding": "gzip"})
                assert code == 200, body
                n += len(body["items"])
                eps += sum(len(i.get("endpoints") or [])
                           for i in body["items"])
                cont = body["metadata"].get("continue")
                if not cont:
                    break
            totals[path] = (n, eps)
        dt = time.monotonic() - t0
        assert totals == {"/api/v1/services": (10000, 0),
                          "/apis/discovery.k8s.io/v1/endpointslices":
                          (1000, 100000)}, totals
        assert hdr.get("Content-Encoding") == "gzip", hdr
        assert dt < 8, "listing took %.1fs" % dt


test_fakeapi_scale.timeout = 60
