#!/usr/bin/env python3
"""fakeapi: a fake Kubernetes API server for localdns's tests (stdlib only).

It owns the resources localdns reads -- Services, EndpointSlices
(discovery.k8s.io/v1), Namespaces and Pods, and the custom resources of
Istio (ServiceEntries and WorkloadEntries, networking.istio.io/v1) and of
Multi-Cluster Services (ServiceImports, multicluster.x-k8s.io/v1alpha1) --
and serves them the way kube-apiserver (backed by etcd and the watch cache)
does, as far as a client can tell:

  * custom resources exist only while their CRD is installed (FakeAPI(crds=
    ...), install_crd/uninstall_crd): otherwise every request for them gets
    the 404 NotFound Status the real server gives an unknown resource path;
    uninstalling deletes their objects (watchers see them DELETED) and ends
    their watches, as a CRD's removal does;

  * one global resourceVersion counter (etcd's revision): every create,
    update and delete bumps it; objects carry theirs as a string;
  * where each read is served from, as the cacher decides
    (shouldDelegateList): the watch cache serves a LIST with
    `resourceVersion=0` (whole: it ignores `limit`, never pages) and one
    with `resourceVersion=N` (`resourceVersionMatch` NotOlderThan or unset)
    without `limit`, as the state at least as new as N (waiting up to 3 s
    for N, then 504 ResourceVersionTooLarge); etcd serves the rest: no
    `resourceVersion` (a consistent read), `continue`, `limit` with an RV
    other than 0 (the legacy RV with a limit is Exact), Exact. Each request
    records it (Request.served_from, .consistent; FakeAPI.reads()), so
    tests count LISTs by kind; `watch_cache=False` sends everything to
    etcd; cache_behind(rv) makes the watch cache lag etcd;
  * LIST with `limit`/`continue` paging served from a consistent snapshot
    (MVCC: later pages show the list's resourceVersion, not live data);
    opaque continue tokens (base64url JSON with the snapshot RV and the next
    key, like the real ones); a token older than the last compaction -> 410
    Expired; `remainingItemCount`; ListOptions validated as the real server
    does (422 Invalid: `resourceVersionMatch` without `resourceVersion` or
    with `continue`, Exact with "0", `sendInitialEvents` on a LIST), and the
    real 400/410/504s; list items without kind/apiVersion, as the real
    server sends them;
  * WATCH: chunked newline-delimited JSON events (ADDED, MODIFIED, DELETED,
    BOOKMARK, ERROR), one chunk per event, flushed at once (initial
    events go out many chunks to a write, as from the real server while
    its queue of them is full; Request.initial_sent says when they all
    went); events after `resourceVersion` from a bounded history; an RV
    older than the history (or than a compaction) -> HTTP 200 then an
    ERROR event carrying a 410 Status, then the end of the stream; no RV
    or "0" -> synthetic ADDED events for the current state first;
    bookmarks when `allowWatchBookmarks=true`; `timeoutSeconds` ends the
    stream cleanly; FakeAPI.written_at(rv) tells when an event began to be
    written to a watch stream (benchmarks time a client from that moment);
  * WatchList: `sendInitialEvents=true` (with `resourceVersionMatch=
    NotOlderThan`, else 422) streams the state from the watch cache as
    ADDED events -- at least as new as `resourceVersion` (none: as etcd's
    current revision; "0": whatever the cache has) -- then, with
    `allowWatchBookmarks=true`, the bookmark annotated
    `k8s.io/initial-events-end`, then the changes; an RV the cache does not
    reach in time -> an ERROR event with the 504. `watch_list=False` is a
    server without it (the gate off): 422 Invalid. Asked with
    Accept-Encoding: gzip, it comes gzipped one member per event, as from
    1.37 (WatchListCompression); plain watches are never compressed;
  * serving is cheap, as the real server's is from its watch cache: each
    stored revision keeps its JSON and its gzipped ADDED event (made once,
    like the API server's cachingObject), a read of a snapshot keeps the
    keys live in it for the next page, and a WatchList's state is joined
    from those bytes, not encoded or compressed per watcher;
  * `fieldSelector` (the per-resource field labels the real server accepts,
    400 on others) and `labelSelector` (=, ==, !=, in, notin, exists, !key)
    on LIST and WATCH; a watcher whose selector stops matching an object
    sees it DELETED, one that starts matching sees it ADDED, as the watch
    cache does;
  * bearer tokens (re-read from a file on every request, so tests rotate
    them), client certificates (mTLS), 401/403 Status objects, TLS;
  * gzip above 128 KiB when asked; bodies over 2 KiB chunked (as Go's
    net/http does when it cannot buffer the whole body).

Tests steer it through a control API: a Python API when used in process
(FakeAPI), and the same operations as HTTP endpoints under /_control/ (on the
API port, without auth, and on a separate control port that stays up while
the API is "down"). Builders (service, endpointslice, endpoint, namespace,
pod, service_entry, workload_entry, service_import,
imported_endpointslice) make objects with the real JSON field names. make_tls() makes a CA,
a server certificate for 127.0.0.1 and a client certificate with openssl.

HTTP control API (JSON bodies; query parameters work too; answers JSON):

    POST /_control/apply         {"objects": [obj, ...]} | {"object": obj} |
                                 a bare object or List -> {"resourceVersion"}
    POST /_control/delete        {"resource", "namespace", "name"}
    GET  /_control/objects?resource=services
    POST /_control/cut_watches   {"resource"?, "partial"?}  -> {"cut": n}
    POST /_control/compact       -> {"resourceVersion"}
    POST /_control/down          {"seconds"?}  (back up by itself after)
    POST /_control/up            (use the control port: the API port is shut)
    POST /_control/fail_next     {"n", "status", "resource"?, "verb"?,
                                  "close"?}
    POST /_control/forbid        {"resource", "verbs"?};  /_control/allow
    POST /_control/tokens        {"tokens": [...]}
    POST /_control/bookmark_interval {"seconds"}
    POST /_control/cache_behind  {"resourceVersion": N | null}
    POST /_control/hold_initial_events {"resource", "after": N | null}
    GET  /_control/requests?resource=&verb=  -> {"requests": [...]}
                                 (each with its query, status code, time,
                                  served_from and, for a LIST, the body's
                                  size)
    POST /_control/clear_requests
    GET  /_control/state         -> RV, compaction, down, port, open watches
    POST /_control/wait_watches  {"resource", "count", "timeout"} (504 on
                                  timeout)
    POST /_control/crd           {"resource", "installed": bool}

Run as a script:

    python3 tests/kube/fakeapi.py --port 0 --token-file F \
        [--tls-cert C --tls-key K [--client-ca CA]] --ready-file PATH

The ready file gets the API port on its first line and the control port on
its second, written atomically once both listen.
"""

import argparse
import base64
import bisect
import copy
import datetime
import gzip
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


# ------------------------------------------------------------------ resources

class Resource:
    """One API resource: where it lives and what its objects look like."""

    def __init__(self, name, kind, api_version, namespaced, fields,
                 crd=False):
        self.name = name                  # "services"
        self.crd = crd                    # a custom resource: served only while installed
        self.kind = kind                  # "Service"
        self.list_kind = kind + "List"
        self.api_version = api_version    # "v1", "discovery.k8s.io/v1"
        self.group = api_version.rpartition("/")[0]
        self.namespaced = namespaced
        # field label -> path in the object; the real server accepts
        # metadata.name and metadata.namespace everywhere plus a few
        # per-resource labels, and answers 400 for any other.
        self.fields = {"metadata.name": ("metadata", "name")}
        if namespaced:
            self.fields["metadata.namespace"] = ("metadata", "namespace")
        self.fields.update(fields)
        # The prefix of every full object and event object: list items lack
        # kind and apiVersion, watch objects and GETs have them.
        self.prefix = ('{"kind":%s,"apiVersion":%s,' % (
            json.dumps(kind), json.dumps(api_version))).encode()


RESOURCES = {r.name: r for r in [
    Resource("services", "Service", "v1", True, {
        "spec.clusterIP": ("spec", "clusterIP"),
        "spec.type": ("spec", "type"),
    }),
    Resource("endpointslices", "EndpointSlice", "discovery.k8s.io/v1", True, {
        "addressType": ("addressType",),
    }),
    Resource("namespaces", "Namespace", "v1", False, {
        "status.phase": ("status", "phase"),
    }),
    Resource("pods", "Pod", "v1", True, {
        "spec.nodeName": ("spec", "nodeName"),
        "spec.restartPolicy": ("spec", "restartPolicy"),
        "spec.schedulerName": ("spec", "schedulerName"),
        "spec.serviceAccountName": ("spec", "serviceAccountName"),
        "spec.hostNetwork": ("spec", "hostNetwork"),
        "status.phase": ("status", "phase"),
        "status.podIP": ("status", "podIP"),
        "status.nominatedNodeName": ("status", "nominatedNodeName"),
    }),
    Resource("serviceentries", "ServiceEntry", "networking.istio.io/v1", True,
             {}, crd=True),
    Resource("workloadentries", "WorkloadEntry", "networking.istio.io/v1",
             True, {}, crd=True),
    Resource("serviceimports", "ServiceImport",
             "multicluster.x-k8s.io/v1alpha1", True, {}, crd=True),
]}
ISTIO_CRDS = ("serviceentries", "workloadentries")
MCS_CRDS = ("serviceimports",)
KIND_TO_RESOURCE = {r.kind: r for r in RESOURCES.values()}


def resource_of(obj):
    kind = obj.get("kind")
    if kind not in KIND_TO_RESOURCE:
        raise ValueError("fakeapi does not serve kind %r" % kind)
    return KIND_TO_RESOURCE[kind]


def key_of(res, obj):
    """The object's storage key, relative to the resource prefix as in etcd
    (/registry/services/specs/<ns>/<name>): "<ns>/<name>", or "<name>" for
    cluster-scoped resources. Lists come out in this key order."""
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        raise ValueError("object without metadata.name")
    if res.namespaced:
        if not meta.get("namespace"):
            raise ValueError("%s %s without metadata.namespace"
                             % (res.kind, meta["name"]))
        return "%s/%s" % (meta["namespace"], meta["name"])
    return meta["name"]


# ------------------------------------------------------------------- builders

def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def _meta(name, namespace=None, labels=None, annotations=None,
          deleting=False, generate_name=None):
    """metadata as the server returns it (its field order too);
    resourceVersion is set on apply."""
    m = {"name": name}
    if generate_name:
        m["generateName"] = generate_name
    if namespace is not None:
        m["namespace"] = namespace
    m["uid"] = str(uuid.uuid4())
    m["resourceVersion"] = "0"
    m["creationTimestamp"] = now_rfc3339()
    if deleting:
        m["deletionTimestamp"] = now_rfc3339()
        m["deletionGracePeriodSeconds"] = 30
    if labels:
        m["labels"] = dict(labels)
    if annotations:
        m["annotations"] = dict(annotations)
    return m


def _as_list(v):
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


def _family(ip):
    return "IPv6" if ":" in ip else "IPv4"


_next_ip = [0]


def _allocate_cluster_ip():
    """Distinct 10.96.0.0/16 addresses for services built without one."""
    _next_ip[0] += 1
    n = _next_ip[0]
    return "10.96.%d.%d" % ((n >> 8) & 255, n & 255 or 1)


def service_port(port, name=None, protocol="TCP", target_port=None,
                 node_port=None, app_protocol=None):
    """One spec.ports[] entry (name is omitted when empty, as the real JSON
    does; targetPort defaults to port, as the API server defaults it)."""
    p = {}
    if name:
        p["name"] = name
    p["protocol"] = protocol
    if app_protocol:
        p["appProtocol"] = app_protocol
    p["port"] = int(port)
    p["targetPort"] = port if target_port is None else target_port
    if node_port:
        p["nodePort"] = node_port
    return p


def _ports(ports, make):
    """Accept ready dicts, ints (port numbers) or keyword dicts for make()."""
    out = []
    for p in ports or []:
        if isinstance(p, int):
            out.append(make(p))
        else:
            out.append(dict(p))
    return out


def _normalise_service_port(p):
    p = dict(p)
    p.setdefault("protocol", "TCP")
    p.setdefault("targetPort", p["port"])
    if p.get("name") == "":
        del p["name"]
    return p


def service(ns, name, cluster_ips=None, ports=None, type="ClusterIP",
            external_name=None, headless=False, publish_not_ready=False,
            ip_families=None, selector=None, labels=None, deleting=False,
            annotations=None):
    """A v1 Service.

    type: "ClusterIP" (default), "NodePort", "LoadBalancer" or
    "ExternalName" (give external_name). headless=True makes clusterIP
    "None". cluster_ips: one address or a list (dual-stack); allocated from
    10.96/16 when omitted. ports: ints or dicts with name, port, protocol,
    targetPort (see service_port()). annotations: a dict, e.g.
    {"example.com/blob": "x" * 100000} for a large object (the server
    refuses more than 256 KiB of them, see ANNOTATIONS_MAX)."""
    spec = {}
    if ports:
        spec["ports"] = [_normalise_service_port(p)
                         for p in _ports(ports, service_port)]
    if selector is None and type != "ExternalName":
        selector = {"app": name}
    if selector:
        spec["selector"] = dict(selector)
    if type == "ExternalName":
        if not external_name:
            raise ValueError("ExternalName service needs external_name")
        spec["type"] = "ExternalName"
        spec["sessionAffinity"] = "None"
        spec["externalName"] = external_name
    else:
        if headless:
            ips = ["None"]
            families = ip_families or ["IPv4"]
        else:
            ips = _as_list(cluster_ips) or [_allocate_cluster_ip()]
            families = ip_families or [_family(ip) for ip in ips]
        spec["clusterIP"] = ips[0]
        spec["clusterIPs"] = ips
        spec["type"] = type
        spec["sessionAffinity"] = "None"
        if publish_not_ready:
            spec["publishNotReadyAddresses"] = True
        spec["ipFamilies"] = list(families)
        spec["ipFamilyPolicy"] = ("PreferDualStack" if len(families) > 1
                                  else "SingleStack")
        spec["internalTrafficPolicy"] = "Cluster"
    if type == "ExternalName" and publish_not_ready:
        spec["publishNotReadyAddresses"] = True
    return {"kind": "Service", "apiVersion": "v1",
            "metadata": _meta(name, ns, labels, annotations, deleting=deleting),
            "spec": spec,
            "status": {"loadBalancer": {}}}


def endpoint(addresses, ready=True, serving=None, terminating=False,
             hostname=None, node=None, pod=None, zone=None):
    """One EndpointSlice endpoints[] entry. pod: the name of the Pod in the
    targetRef (its namespace is filled in by endpointslice()); serving
    defaults to ready, as the controller sets it for non-terminating pods."""
    e = {"addresses": _as_list(addresses),
         "conditions": {"ready": bool(ready),
                        "serving": bool(ready if serving is None else serving),
                        "terminating": bool(terminating)}}
    if hostname:
        e["hostname"] = hostname
    if pod:
        e["targetRef"] = {"kind": "Pod", "name": pod,
                          "uid": str(uuid.uuid4())}
    if node:
        e["nodeName"] = node
    if zone:
        e["zone"] = zone
    return e


def endpoint_port(port, name="", protocol="TCP", app_protocol=None):
    """One EndpointSlice ports[] entry. The controller always sets name,
    "" for an unnamed port."""
    p = {"name": name, "protocol": protocol, "port": int(port)}
    if app_protocol:
        p["appProtocol"] = app_protocol
    return p


def endpointslice(ns, service_name, name=None, address_type="IPv4",
                  endpoints=None, ports=None, labels=None, deleting=False):
    """A discovery.k8s.io/v1 EndpointSlice of service_name.

    endpoints: dicts from endpoint() (or raw dicts), or plain address
    strings for ready endpoints. ports: ints or dicts (see endpoint_port()).
    An empty endpoints or ports list is serialised as null, exactly as the
    real server does (the fields are not omitempty)."""
    if name is None:
        name = "%s-%s" % (service_name, uuid.uuid4().hex[:5])
    eps = []
    for e in endpoints or []:
        # A shallow copy is enough: targetRef is replaced, never changed.
        e = endpoint(e) if isinstance(e, str) else dict(e)
        ref = e.get("targetRef")
        if ref is not None and "namespace" not in ref:
            # targetRef's field order: kind, namespace, name, uid
            e["targetRef"] = {"kind": ref.get("kind", "Pod"), "namespace": ns,
                              **{k: v for k, v in ref.items() if k != "kind"}}
        eps.append(e)
    all_labels = {"endpointslice.kubernetes.io/managed-by":
                  "endpointslice-controller.k8s.io",
                  "kubernetes.io/service-name": service_name}
    all_labels.update(labels or {})
    meta = _meta(name, ns, all_labels, deleting=deleting,
                 generate_name=service_name + "-")
    meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Service",
                                "name": service_name,
                                "uid": str(uuid.uuid4()),
                                "controller": True,
                                "blockOwnerDeletion": True}]
    return {"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
            "metadata": meta,
            "addressType": address_type,
            "endpoints": eps or None,
            "ports": _ports(ports, endpoint_port) or None}


def namespace(name, labels=None, terminating=False):
    """A v1 Namespace (phase Terminating with a deletionTimestamp when
    terminating)."""
    all_labels = {"kubernetes.io/metadata.name": name}
    all_labels.update(labels or {})
    return {"kind": "Namespace", "apiVersion": "v1",
            "metadata": _meta(name, None, all_labels, deleting=terminating),
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Terminating" if terminating else "Active"}}


def pod(ns, name, ips=None, node="node-a", phase="Running", ready=True,
        labels=None, host_network=False, host_ip="192.168.0.10",
        deleting=False):
    """A v1 Pod on node (None: unscheduled). ips: one address or a list
    (dual-stack); status.podIP is the first, status.podIPs all of them."""
    ips = _as_list(ips)
    spec = {"containers": [{"name": "app",
                            "image": "registry.k8s.io/pause:3.9",
                            "resources": {},
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default"}
    if node:
        spec["nodeName"] = node
    if host_network:
        spec["hostNetwork"] = True
    spec["securityContext"] = {}
    spec["schedulerName"] = "default-scheduler"
    spec["enableServiceLinks"] = True
    spec["preemptionPolicy"] = "PreemptLowerPriority"
    ts = now_rfc3339()
    status_word = "True" if ready else "False"
    status = {"phase": phase,
              "conditions": [
                  {"type": t, "status": s, "lastProbeTime": None,
                   "lastTransitionTime": ts}
                  for t, s in (("Initialized", "True"),
                               ("Ready", status_word),
                               ("ContainersReady", status_word),
                               ("PodScheduled", "True" if node else "False"))]}
    if node:
        status["hostIP"] = host_ip
        status["hostIPs"] = [{"ip": host_ip}]
    if ips:
        status["podIP"] = ips[0]
        status["podIPs"] = [{"ip": ip} for ip in ips]
    if node:
        status["startTime"] = ts
    status["qosClass"] = "BestEffort"
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": _meta(name, ns, labels or {"app": name},
                              deleting=deleting),
            "spec": spec, "status": status}


def _created(meta, created):
    if created:
        meta["creationTimestamp"] = created
    return meta


def service_entry(ns, name, hosts, addresses=None, resolution="NONE",
                  ports=None, location="MESH_EXTERNAL", export_to=None,
                  endpoints=None, workload_selector=None, labels=None,
                  allocated=None, created=None):
    """A networking.istio.io/v1 ServiceEntry. hosts: names (or one);
    addresses: IPs or CIDRs; resolution: NONE, STATIC, DNS,
    DNS_ROUND_ROBIN; ports: ints or {number, name, protocol}; endpoints:
    addresses or dicts ({"address": ...}); workload_selector: a labels
    dict; allocated: {host: [addresses]} as istiod writes them into
    status.addresses; created: its creationTimestamp (RFC 3339)."""
    spec = {"hosts": _as_list(hosts)}
    if addresses:
        spec["addresses"] = _as_list(addresses)
    spec["ports"] = [p if isinstance(p, dict) else
                     {"number": int(p), "name": "tcp-%d" % p, "protocol": "TCP"}
                     for p in (ports or [443])]
    spec["location"] = location
    if resolution != "NONE":
        spec["resolution"] = resolution  # NONE is the zero value: omitted
    if export_to is not None:
        spec["exportTo"] = _as_list(export_to)
    if endpoints:
        spec["endpoints"] = [e if isinstance(e, dict) else {"address": e}
                             for e in endpoints]
    if workload_selector is not None:
        spec["workloadSelector"] = {"labels": dict(workload_selector)}
    obj = {"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
           "metadata": _created(_meta(name, ns, labels), created),
           "spec": spec}
    obj["metadata"]["generation"] = 1
    status = {"conditions": [{"type": "Reconciled", "status": "True",
                              "lastTransitionTime": now_rfc3339()}],
              "observedGeneration": "1"}
    if allocated:
        status["addresses"] = [{"value": ip, "host": h}
                               for h, ips in allocated.items()
                               for ip in _as_list(ips)]
    obj["status"] = status
    return obj


def workload_entry(ns, name, address, labels=None, spec_labels=None,
                   health_checks=False, healthy=True, network=None):
    """A networking.istio.io/v1 WorkloadEntry (metadata labels and
    spec.labels, which Istio merges); health_checks: the annotation that
    makes Istio trust its Healthy condition, healthy: that condition."""
    meta = _meta(name, ns, labels,
                 {"proxy.istio.io/health-checks-enabled": "true"}
                 if health_checks else None)
    spec = {"address": address}
    if spec_labels:
        spec["labels"] = dict(spec_labels)
    if network:
        spec["network"] = network
    obj = {"apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
           "metadata": meta, "spec": spec}
    if health_checks:
        obj["status"] = {"conditions": [{
            "type": "Healthy", "status": "True" if healthy else "False",
            "lastProbeTime": now_rfc3339(),
            "lastTransitionTime": now_rfc3339()}]}
    return obj


def service_import(ns, name, type="ClusterSetIP", ips=None, ports=None,
                   clusters=("cluster-a",)):
    """A multicluster.x-k8s.io/v1alpha1 ServiceImport: ClusterSetIP (ips:
    its ClusterSetIPs) or Headless; ports as for service()."""
    spec = {"type": type,
            "ports": [_normalise_import_port(p)
                      for p in _ports(ports, service_port)]}
    if type == "ClusterSetIP":
        spec["ips"] = _as_list(ips) or [_allocate_cluster_ip()]
    spec["sessionAffinity"] = "None"
    return {"apiVersion": "multicluster.x-k8s.io/v1alpha1",
            "kind": "ServiceImport", "metadata": _meta(name, ns),
            "spec": spec,
            "status": {"clusters": [{"cluster": c} for c in clusters]}}


def _normalise_import_port(p):
    """An MCS ServicePort has no targetPort."""
    p = _normalise_service_port(p)
    p.pop("targetPort", None)
    return p


def imported_endpointslice(ns, service_name, cluster, name=None,
                           address_type="IPv4", endpoints=None, ports=None):
    """An EndpointSlice an MCS controller imported for ServiceImport
    service_name from cluster: labelled multicluster.kubernetes.io/
    service-name and source-cluster, not kubernetes.io/service-name."""
    s = endpointslice(ns, service_name, name or "%s-%s" % (service_name,
                                                           cluster),
                      address_type, endpoints, ports)
    labels = s["metadata"]["labels"]
    del labels["kubernetes.io/service-name"]
    labels["endpointslice.kubernetes.io/managed-by"] = "mcs-controller"
    labels["multicluster.kubernetes.io/service-name"] = service_name
    labels["multicluster.kubernetes.io/source-cluster"] = cluster
    del s["metadata"]["ownerReferences"]
    return s


# ------------------------------------------------------------------ selectors

class BadRequest(Exception):
    """A client error the real server answers with 400 BadRequest."""


def _split_top(text):
    """Split a selector on commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text):
    """A predicate on an object's labels; the full labels.Parse grammar:
    key, !key, key=v, key==v, key!=v, key in (a,b), key notin (a,b)."""
    reqs = []
    for part in _split_top(text or ""):
        words = part.split(None, 1)
        if len(words) == 2 and words[1].split(None, 1)[0] in ("in", "notin"):
            op, _, rest = words[1].partition(" ")
            rest = rest.strip()
            if not (rest.startswith("(") and rest.endswith(")")):
                raise BadRequest("unable to parse requirement: %r" % part)
            values = {v.strip() for v in rest[1:-1].split(",") if v.strip()}
            reqs.append((words[0], op, values))
        elif "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append((k.strip(), "!=", v.strip()))
        elif "==" in part:
            k, v = part.split("==", 1)
            reqs.append((k.strip(), "=", v.strip()))
        elif "=" in part:
            k, v = part.split("=", 1)
            reqs.append((k.strip(), "=", v.strip()))
        elif part.startswith("!"):
            reqs.append((part[1:].strip(), "!exists", None))
        else:
            reqs.append((part, "exists", None))
    if not reqs:
        return None

    def match(obj):
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for k, op, v in reqs:
            have = k in labels
            val = labels.get(k)
            ok = {"=": lambda: have and val == v,
                  "!=": lambda: not have or val != v,
                  "in": lambda: have and val in v,
                  "notin": lambda: not have or val not in v,
                  "exists": lambda: have,
                  "!exists": lambda: not have}[op]()
            if not ok:
                return False
        return True
    return match


def _field_value(obj, path):
    v = obj
    for p in path:
        v = v.get(p) if isinstance(v, dict) else None
    if v is None:
        return ""          # an unset field selects as "" (spec.nodeName=)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def parse_field_selector(res, text):
    """A predicate for fieldSelector; only the resource's field labels are
    accepted, as on the real server."""
    reqs = []
    for part in _split_top(text or ""):
        if "!=" in part:
            k, v = part.split("!=", 1)
            neg = True
        elif "=" in part:
            k, v = part.split("==", 1) if "==" in part else part.split("=", 1)
            neg = False
        else:
            raise BadRequest("invalid selector: '%s'; can't understand '%s'"
                             % (text, part))
        k = k.strip()
        if k not in res.fields:
            raise BadRequest('field label not supported: %s' % k)
        reqs.append((res.fields[k], v.strip(), neg))
    if not reqs:
        return None

    def match(obj):
        return all((_field_value(obj, path) == v) != neg
                   for path, v, neg in reqs)
    return match


def combine(*preds):
    preds = [p for p in preds if p is not None]
    if not preds:
        return None
    if len(preds) == 1:
        return preds[0]
    return lambda obj: all(p(obj) for p in preds)


# ----------------------------------------------------------------- the store

class Rev:
    """One revision of one key: obj is None for a deletion. item is the
    JSON of obj without kind/apiVersion (a list item), computed once.
    added_gz: the chunk that carries it as a WatchList's initial ADDED
    event gzipped (see added_gz_chunk()), or None while none was made."""
    __slots__ = ("rv", "obj", "item", "added_gz")

    def __init__(self, rv, obj, item, added_gz=None):
        self.rv, self.obj, self.item = rv, obj, item
        self.added_gz = added_gz


class Event:
    """One change, for watchers. obj/item: the new object (for DELETED the
    final state, carrying the deletion's RV, as etcd reports it); old: the
    previous object (None for ADDED)."""
    __slots__ = ("rv", "type", "res", "obj", "item", "old")

    def __init__(self, rv, type_, res, obj, item, old):
        self.rv, self.type, self.res = rv, type_, res
        self.obj, self.item, self.old = obj, item, old


# The API server's limit on one object's annotations, keys and values
# together (apimachinery's TotalAnnotationSizeLimitB): the largest object a
# client can be sent through annotations alone.
ANNOTATIONS_MAX = 256 * 1024


def check_annotations(obj):
    """Refuse what the real server's validation refuses: annotations over
    ANNOTATIONS_MAX bytes in total."""
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    size = sum(len(k) + len(v) for k, v in notes.items())
    if size > ANNOTATIONS_MAX:
        raise ValueError("metadata.annotations: Too long: must have at most "
                         "%d bytes" % ANNOTATIONS_MAX)


def encode_item(obj):
    body = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    return json.dumps(body, separators=(",", ":")).encode()


def full_json(res, item):
    """A list item's JSON with kind and apiVersion put back in front."""
    return res.prefix + item[1:]


ADDED_HEAD = b'{"type":"ADDED","object":'


def added_event_parts(res, item):
    """item as a WatchList's initial ADDED event line, in pieces to join:
    the object is copied only by the one join of a whole write."""
    return (ADDED_HEAD, res.prefix, memoryview(item)[1:], b"}\n")


def added_plain_chunk(res, item):
    """The chunk of that event, plain, in pieces to join."""
    parts = added_event_parts(res, item)
    return (b"%x\r\n" % sum(len(p) for p in parts),) + parts + (b"\r\n",)


def added_gz_chunk(res, item):
    """The chunk of that event gzipped, a gzip member of its own (as the
    stream is compressed, see _watch). Made once per stored revision, as
    the API server's cachingObject keeps one serialization of an object for
    all its watchers, so serving a WatchList compresses nothing."""
    z = gzip.compress(b"".join(added_event_parts(res, item)), compresslevel=1,
                      mtime=0)
    return b"%x\r\n%s\r\n" % (len(z), z)


class Store:
    """etcd plus the watch cache, in memory.

    Every key keeps its revisions newer than the last compaction (and the
    last one at or before it), so a LIST page can be served at any RV since
    the compaction. The event log keeps the last `history` events; a watch
    can resume from any RV >= watch_floor. cond guards everything and is
    notified on every change. gzip_added: make each revision's gzipped
    ADDED chunk as it is stored (a server that compresses WatchLists)."""

    def __init__(self, history=1000, initial_rv=1, gzip_added=False):
        self.cond = threading.Condition()
        self.gzip_added = gzip_added
        self.rv = initial_rv
        self.compact_rv = initial_rv      # etcd compaction point
        self.watch_floor = initial_rv     # events with rv > this are in log
        self.history = history
        self.revs = {name: {} for name in RESOURCES}    # res -> key -> [Rev]
        self._sorted = {name: None for name in RESOURCES}
        self._views = {}          # res -> (rv, keys, revs): see view()
        self.log = []

    # -- writes (callers hold no lock; these take it)

    def apply(self, objs):
        """Create or replace each object; returns the last RV."""
        with self.cond:
            for obj in objs:
                self._apply_one(obj)
            self.cond.notify_all()
            return self.rv

    def _apply_one(self, obj):
        res = resource_of(obj)
        key = key_of(res, obj)
        check_annotations(obj)
        revs = self.revs[res.name].get(key)
        old = revs[-1].obj if revs and revs[-1].obj is not None else None
        meta = dict(obj["metadata"])
        if old is not None:
            # An update keeps the object's identity, as the server enforces.
            meta["uid"] = old["metadata"]["uid"]
            meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
        else:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        item = encode_item(dict(obj, metadata=meta))
        # The stored dict is parsed back from the JSON: a private copy (the
        # caller may go on changing its own), faster than deepcopy.
        obj = {"kind": res.kind, "apiVersion": res.api_version,
               **json.loads(item)}
        gz = added_gz_chunk(res, item) if self.gzip_added else None
        self._add_rev(res, key, Rev(self.rv, obj, item, gz))
        self._add_event(Event(self.rv, "MODIFIED" if old else "ADDED", res,
                              obj, item, old))

    def delete(self, res, key):
        """Delete one object; returns its final state, or None if absent."""
        with self.cond:
            revs = self.revs[res.name].get(key)
            if not revs or revs[-1].obj is None:
                return None
            old = revs[-1].obj
            self.rv += 1
            final = copy.deepcopy(old)
            final["metadata"]["resourceVersion"] = str(self.rv)
            self._add_rev(res, key, Rev(self.rv, None, None))
            self._add_event(Event(self.rv, "DELETED", res, final,
                                  encode_item(final), old))
            self.cond.notify_all()
            return final

    def _add_rev(self, res, key, rev):
        revs = self.revs[res.name].setdefault(key, [])
        if not revs:
            self._sorted[res.name] = None
        revs.append(rev)
        # Drop revisions nobody can read any more: those before the last
        # one at or below the compaction point.
        while len(revs) > 1 and revs[1].rv <= self.compact_rv:
            del revs[0]

    def _add_event(self, ev):
        self.log.append(ev)
        if len(self.log) > self.history:
            drop = len(self.log) - self.history
            self.watch_floor = self.log[drop - 1].rv
            del self.log[:drop]

    def compact(self):
        """Compact at the current RV, as etcd's periodic compaction does:
        older continue tokens and watch RVs get 410 from now on."""
        with self.cond:
            self.compact_rv = self.rv
            self.watch_floor = max(self.watch_floor, self.rv)
            self.log = []
            for name, keys in self.revs.items():
                for key in list(keys):
                    revs = keys[key]
                    del revs[:-1]
                    if revs[-1].obj is None:
                        del keys[key]
                        self._sorted[name] = None
            self.cond.notify_all()
            return self.compact_rv

    # -- reads (callers hold self.cond)

    def sorted_keys(self, res):
        if self._sorted[res.name] is None:
            self._sorted[res.name] = sorted(self.revs[res.name])
        return self._sorted[res.name]

    @staticmethod
    def rev_at(revs, rv):
        for rev in reversed(revs):
            if rev.rv <= rv:
                return rev
        return None

    def live(self, res, key, rv):
        """The object stored at key as of rv, or None."""
        revs = self.revs[res.name].get(key)
        rev = self.rev_at(revs, rv) if revs else None
        return rev if rev is not None and rev.obj is not None else None

    def view(self, res, rv):
        """The keys live at snapshot rv, in key order, and their revisions
        (etcd's range read at a revision). Built once per snapshot and kept
        for the next read of it: every page of a paged LIST reads the same
        snapshot. A snapshot never changes (later writes have later RVs; a
        compaction drops only what no readable snapshot shows)."""
        v = self._views.get(res.name)
        if v is None or v[0] != rv:
            keys, revs = [], []
            for key in self.sorted_keys(res):
                rev = self.live(res, key, rv)
                if rev is not None:
                    keys.append(key)
                    revs.append(rev)
            v = self._views[res.name] = (rv, keys, revs)
        return v[1], v[2]

    def select(self, res, ns, pred, limit, start, rv):
        """Up to limit revisions (0: all) at snapshot rv, keys from start
        on, within namespace ns. Returns (revs, next_key or None,
        remaining): next_key is set when live keys remain after the page
        (whether or not they match pred, as etcd's More flag); remaining
        counts them."""
        keys, revs = self.view(res, rv)
        i, end = 0, len(keys)
        if ns:
            # A namespace's keys: from "ns/" to "ns0" ('/' + 1) excluded.
            i = bisect.bisect_left(keys, ns + "/")
            end = bisect.bisect_left(keys, ns + "0", i)
        if start:
            i = max(i, bisect.bisect_left(keys, start, i, end))
        if pred is None and not limit:
            return revs[i:end], None, 0
        out = []
        while i < end:
            rev = revs[i]
            i += 1
            if pred is not None and not pred(rev.obj):
                continue
            out.append(rev)
            if limit and len(out) == limit:
                if i < end:
                    return out, keys[i - 1] + "\x00", end - i
                break
        return out, None, 0

    def page(self, res, ns, pred, limit, start, rv):
        """select(), the revisions' list items."""
        revs, next_key, remaining = self.select(res, ns, pred, limit, start,
                                                rv)
        return [rev.item for rev in revs], next_key, remaining

    def events_after(self, rv):
        """Events with an RV above rv (caller checked rv >= watch_floor)."""
        i = bisect.bisect_right(self.log, rv, key=lambda e: e.rv)
        return self.log[i:]


def encode_continue(rv, start):
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start},
                     separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_continue(token):
    try:
        pad = "=" * (-len(token) % 4)
        d = json.loads(base64.urlsafe_b64decode(token + pad))
        if d.get("v") != "meta.k8s.io/v1":
            raise ValueError("wrong version")
        return int(d["rv"]), str(d["start"])
    except Exception as e:
        raise BadRequest("continue key is not valid: %s" % e)


# -------------------------------------------------------------------- status

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden",
           404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict",
           410: "Expired", 429: "TooManyRequests", 500: "InternalError",
           503: "ServiceUnavailable", 504: "Timeout"}


def status(code, message, reason=None, details=None):
    """A metav1.Status failure, as the server sends for errors."""
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {},
         "status": "Failure", "message": message,
         "reason": reason or REASONS.get(code, ""), "code": code}
    if details is not None:
        s["details"] = details
        s["code"] = s.pop("code")        # code stays last, as on the wire
    return s


class ApiError(Exception):
    def __init__(self, code, message, reason=None, details=None,
                 headers=None):
        super().__init__(message)
        self.status = status(code, message, reason, details)
        self.code = code
        self.headers = headers or {}


def _too_large(rv, current):
    return ApiError(504, "Too large resource version: %d, current: %d"
                    % (rv, current), "Timeout",
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1})


EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent "
    "list result. You can start a new list without the continue parameter, "
    "or use the continue token in this response to retrieve the remainder "
    "of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in "
    "the list.")


# ----------------------------------------------------------------- requests

class Request:
    """One API request as the server saw it (for tests to assert on)."""

    def __init__(self, verb, resource, namespace, name, path, raw_query,
                 user):
        self.verb = verb              # "list", "watch", "get"
        self.resource = resource      # "services", ...
        self.namespace = namespace
        self.name = name
        self.path = path
        self.raw_query = raw_query
        self.query = {k: v[-1] for k, v in urllib.parse.parse_qs(
            raw_query, keep_blank_values=True).items()}
        self.user = user              # token or client cert CN, or None
        self.code = None              # HTTP status sent
        self.size = None              # LIST: body bytes before any gzip
        self.time = time.time()
        # Where the server read the objects: "etcd" (a range read of the
        # whole collection, or a page of it, from etcd), "cache" (the
        # API server's watch cache, no etcd read), or None (refused).
        self.served_from = None
        # It had to learn etcd's current revision first (a quorum read,
        # cheap: no objects): a consistent LIST or a WatchList with no RV.
        self.consistent = False
        # A watch with sendInitialEvents=true (the streaming list).
        self.watch_list = _truthy(self.query.get("sendInitialEvents"))
        self.accept_encoding = None   # the request's Accept-Encoding
        # A watch: when its initial events (and the bookmark ending them)
        # were written (time.time()), or None.
        self.initial_sent = None

    def to_dict(self):
        return {k: getattr(self, k) for k in (
            "verb", "resource", "namespace", "name", "path", "raw_query",
            "query", "user", "code", "size", "time", "served_from",
            "consistent", "watch_list", "accept_encoding", "initial_sent")}

    def __repr__(self):
        return "<%s %s?%s -> %s>" % (self.verb, self.path, self.raw_query,
                                     self.code)


class Watch:
    """One open watch stream, for cut_watches() and open_watches()."""

    def __init__(self, resource, conn):
        self.resource = resource
        self.conn = conn
        self.cut = False
        self.partial = False
        self.ended = False      # end cleanly once caught up (end_watches)


def _truthy(v):
    return v is not None and v.lower() in ("1", "true", "t", "yes")


# ------------------------------------------------------------------ handler

class Handler(BaseHTTPRequestHandler):
    """One connection (kept alive across requests, as libcurl expects)."""

    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as Go's net package sets on every connection: with Nagle
    # on, an event written while the client has not yet acknowledged the
    # last one waits for its delayed ACK (40 ms on Linux).
    disable_nagle_algorithm = True

    def version_string(self):
        return "fakeapi"

    @property
    def api(self):
        return self.server.api

    def setup(self):
        if isinstance(self.request, ssl.SSLSocket):
            # The handshake runs here, in the connection's thread, not in
            # the accept loop: a slow or failing client must not stall it.
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
        self.api._track(self.connection, True)

    def finish(self):
        self.api._track(self.connection, False)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, fmt, *args):
        if self.api.verbose:
            sys.stderr.write("fakeapi: %s\n" % (fmt % args))

    # -- response helpers

    def send_json(self, code, body, headers=None):
        if not isinstance(body, bytes):
            body = json.dumps(body, separators=(",", ":")).encode()
        gz = (len(body) >= 128 * 1024 and
              "gzip" in (self.headers.get("Accept-Encoding") or ""))
        if gz:
            body = gzip.compress(body, compresslevel=1)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        if gz:
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        if len(body) <= 2048:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        # Like Go's net/http: a body bigger than its buffer goes chunked.
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        step = 256 * 1024
        for i in range(0, len(body), step):
            self.write_chunk(body[i:i + step])
        self.wfile.write(b"0\r\n\r\n")

    def send_status(self, err):
        if self._req is not None:
            self._req.code = err.code
        self.send_json(err.code, err.status, err.headers)

    def write_chunk(self, data, rv=None):
        """rv: the chunk is the event of that resourceVersion (its write
        time is noted for FakeAPI.written_at, once it is compressed)."""
        # One write per chunk: header, data and CRLF leave together.
        if self.gzip_members:
            data = gzip.compress(data, compresslevel=1)
        if rv is not None:
            self.api._note_written(rv)
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    # -- dispatch

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        self._req = None
        self.gzip_members = False   # a compressed WatchList: a member per chunk
        url = urllib.parse.urlsplit(self.path)
        try:
            if url.path.startswith("/_control/"):
                self.api._control_http(self, method, url)
            elif self.server.control_only:
                raise ApiError(404, "the server could not find the "
                               "requested resource", details={})
            else:
                self.api._serve_api(self, method, url)
        except ApiError as e:
            self.send_status(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:
            if self.api.verbose:
                import traceback
                traceback.print_exc()
            self.send_status(ApiError(500, "fakeapi: %s: %s"
                                      % (type(e).__name__, e)))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # Clients that go away mid-request are normal here (cut watches,
        # down, TLS clients rejecting the certificate on purpose).
        if self.api.verbose:
            super().handle_error(request, client_address)


def _route(path, crds=()):
    """(resource, namespace, name) for an API path, or None (a custom
    resource only while its CRD is in crds)."""
    parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3 and \
            "%s/%s" % (parts[1], parts[2]) in API_VERSIONS:
        group, rest = parts[1], parts[3:]
    else:
        return None
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 2:
        return None
    res = RESOURCES.get(rest[0])
    if res is None or res.group != group or (ns and not res.namespaced) or \
            (res.crd and res.name not in crds):
        return None
    return res, ns, (rest[1] if len(rest) == 2 else None)


API_VERSIONS = {r.api_version for r in RESOURCES.values() if r.group}


# --------------------------------------------------------------- the server

class FakeAPI:
    """The fake API server, in process. See the module docstring; the
    public methods are the control API (the HTTP control API maps onto
    them)."""

    def __init__(self, host="127.0.0.1", port=0, tokens=None, token_file=None,
                 tls_cert=None, tls_key=None, client_ca=None,
                 require_client_cert=False, bookmark_interval=1.0,
                 history=1000, initial_rv=1, gone_reason="Expired",
                 control_port=None, verbose=False, watch_list=True,
                 watch_cache=True, watch_list_compression=True, crds=()):
        """tokens: valid bearer tokens (a list); token_file: a file of
        valid tokens, one per line, re-read on every request. With neither
        tokens, token_file nor client_ca, every request is allowed.
        client_ca: verify client certificates against it (a valid one
        authenticates); require_client_cert: refuse TLS without one.
        control_port: None: a free port; False: no control listener.
        watch_list: the WatchList feature gate (False: a watch with
        sendInitialEvents is refused, 422 Invalid, as by servers before
        1.27 or with the gate off). watch_cache: False as with
        --watch-cache=false: every LIST and WATCH is served from etcd.
        watch_list_compression: the gate of that name (beta, on, in 1.37):
        a WatchList asked with Accept-Encoding: gzip comes gzipped, one
        gzip member per event. crds: the custom resources installed
        (ISTIO_CRDS, MCS_CRDS); the others answer 404."""
        self.host = host
        self.crds = set(crds)
        self.watch_list = watch_list
        self.watch_list_compression = watch_list_compression
        self.watch_cache = watch_cache
        # The RV the watch cache has reached, when it lags behind etcd
        # (cache_behind()); None: it is current.
        self.cache_at = None
        self._held = {}       # resource -> initial events a WatchList sends
        self.port = port
        self.token_file = token_file
        self.tokens = list(tokens) if tokens is not None else None
        self.client_ca = client_ca
        self.bookmark_interval = bookmark_interval
        self.gone_reason = gone_reason
        self.rv_wait = 3.0
        self.verbose = verbose
        self.store = Store(history=history, initial_rv=initial_rv,
                           gzip_added=watch_list and watch_list_compression)
        self._ssl = None
        if tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls_cert, tls_key)
            if client_ca:
                ctx.load_verify_locations(client_ca)
                ctx.verify_mode = (ssl.CERT_REQUIRED if require_client_cert
                                   else ssl.CERT_OPTIONAL)
            self._ssl = ctx
        self._lock = threading.Lock()          # guards the fields below
        self._conns = set()
        self._watches = set()
        self._requests = []
        self._written = {}                     # rv -> when its event first left
        self._fail = []                        # [n, status, res, verb, close]
        self._before = []                      # [fn, res, verb, paged]
        self._forbidden = {}                   # resource -> set of verbs
        self._server = None
        self._thread = None
        self._down = False
        self._control_port = control_port
        self._control = None

    # -- lifecycle

    def start(self):
        self._listen()
        if self._control_port is not False:
            srv = _Server((self.host, self._control_port or 0), Handler)
            srv.api, srv.control_only = self, True
            self._control = srv
            threading.Thread(target=srv.serve_forever, args=(0.05,),
                             daemon=True, name="fakeapi-control").start()
        return self

    def _listen(self):
        srv = _Server((self.host, self.port), Handler, bind_and_activate=False)
        srv.api, srv.control_only = self, False
        srv.server_bind()
        srv.server_activate()
        if self._ssl is not None:
            srv.socket = self._ssl.wrap_socket(
                srv.socket, server_side=True, do_handshake_on_connect=False)
        self.port = srv.server_address[1]
        self._server = srv
        self._thread = threading.Thread(target=srv.serve_forever, args=(0.05,),
                                        daemon=True, name="fakeapi")
        self._thread.start()

    def _unlisten(self, keep=None):
        srv, self._server = self._server, None
        if srv is None:
            return
        srv.shutdown()
        srv.server_close()
        self._thread.join(5)
        with self._lock:
            conns = [c for c in self._conns if c is not keep]
            for w in self._watches:
                w.cut = True
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self.store.cond:
            self.store.cond.notify_all()

    def stop(self):
        self._unlisten()
        if self._control is not None:
            self._control.shutdown()
            self._control.server_close()
            self._control = None

    def __enter__(self):
        return self if self._server or self._down else self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def scheme(self):
        return "https" if self._ssl else "http"

    @property
    def url(self):
        return "%s://%s:%d" % (self.scheme, self.host, self.port)

    @property
    def control_port(self):
        return self._control.server_address[1] if self._control else None

    @property
    def control_url(self):
        return "http://%s:%d" % (self.host, self.control_port)

    def _track(self, conn, opened):
        with self._lock:
            (self._conns.add if opened else self._conns.discard)(conn)

    # -- data

    def apply(self, *objs):
        """Create or replace objects (full JSON dicts, e.g. from service());
        lists of objects are flattened. Returns the resourceVersion after
        the last write."""
        flat = []
        for o in objs:
            flat.extend(o if isinstance(o, (list, tuple)) else [o])
        for o in flat:
            res = resource_of(o)
            if res.crd and res.name not in self.crds:
                raise ValueError("no %s without its CRD (install_crd)" % res.kind)
        return self.store.apply(flat)

    def delete(self, obj_or_resource, namespace=None, name=None):
        """Delete by object (its kind, namespace and name) or by
        ("services", "ns", "name") / ("namespaces", "name"). Returns the
        final object, or None when there was none."""
        if isinstance(obj_or_resource, dict):
            res = resource_of(obj_or_resource)
            key = key_of(res, obj_or_resource)
        else:
            res = RESOURCES[obj_or_resource]
            if not res.namespaced and name is None:
                namespace, name = None, namespace
            key = "%s/%s" % (namespace, name) if res.namespaced else name
        return self.store.delete(res, key)

    def delete_namespace(self, name):
        """Delete a namespace the way the cluster does: it turns
        Terminating (MODIFIED, deletionTimestamp set), the namespace
        controller deletes everything in it, then the namespace goes.
        Returns the final RV."""
        ns = self.get("namespaces", name)
        if ns is not None:
            ns["metadata"]["deletionTimestamp"] = now_rfc3339()
            ns["status"]["phase"] = "Terminating"
            self.apply(ns)
        for res in RESOURCES.values():
            if res.namespaced:
                for obj in self.objects(res.name):
                    if obj["metadata"]["namespace"] == name:
                        self.delete(obj)
        self.delete("namespaces", name)
        return self.resource_version

    def get(self, resource, namespace=None, name=None):
        """The stored object (a deep copy), or None."""
        res = RESOURCES[resource]
        if not res.namespaced and name is None:
            namespace, name = None, namespace
        key = "%s/%s" % (namespace, name) if res.namespaced else name
        with self.store.cond:
            rev = self.store.live(res, key, self.store.rv)
            return copy.deepcopy(rev.obj) if rev else None

    def objects(self, resource):
        """Every stored object of a resource, in list order (deep copies)."""
        res = RESOURCES[resource]
        with self.store.cond:
            items = [self.store.live(res, k, self.store.rv)
                     for k in self.store.sorted_keys(res)]
            return [copy.deepcopy(r.obj) for r in items if r]

    @property
    def resource_version(self):
        with self.store.cond:
            return self.store.rv

    # -- custom resources

    def install_crd(self, resource):
        """Install a custom resource's CRD: from now on it is served."""
        with self._lock:
            self.crds.add(resource)

    def uninstall_crd(self, resource):
        """Remove a CRD: its objects are deleted (watchers see them go),
        its watches end, and its requests get 404 again."""
        for obj in self.objects(resource):
            self.delete(obj)
        with self._lock:
            self.crds.discard(resource)
        self.end_watches(resource)

    def end_watches(self, resource):
        """End a resource's watch streams cleanly, as the server does when
        the resource goes away. Returns how many."""
        with self._lock:
            ended = [w for w in self._watches
                     if not w.cut and w.resource == resource]
            for w in ended:
                w.ended = True
        with self.store.cond:
            self.store.cond.notify_all()
        return len(ended)

    # -- faults

    def cut_watches(self, resource=None, partial=False):
        """Close every open watch stream (of one resource or all) abruptly:
        no final chunk, so the client sees a transfer cut short. partial:
        first send half of an event chunk. Returns how many were cut."""
        with self._lock:
            cut = [w for w in self._watches if not w.cut and
                   (resource is None or w.resource == resource)]
            for w in cut:
                w.cut, w.partial = True, partial
        with self.store.cond:
            self.store.cond.notify_all()
        return len(cut)

    def compact(self):
        """Forget history: a watch or a continue token from an RV before
        now gets 410. Returns the compaction RV."""
        return self.store.compact()

    def cache_behind(self, rv):
        """The watch cache stops at rv while etcd moves on, as on an API
        server that just started or lags the others: what it serves is the
        state at rv, and a read it serves that asks for a newer RV waits
        for it (rv_wait) and gets 504 ResourceVersionTooLarge. None: it
        catches up."""
        with self.store.cond:
            if rv is not None and rv < self.store.compact_rv:
                raise ValueError("rv %d is before the compaction (%d)"
                                 % (rv, self.store.compact_rv))
            self.cache_at = rv
            self.store.cond.notify_all()

    def hold_initial_events(self, resource, after=None):
        """WatchLists of resource send only their first `after` initial
        events, then stall (as over a slow link) until released (after=
        None) or cut: a client is seen to handle a stream that ends before
        its initial-events-end bookmark."""
        with self.store.cond:
            if after is None:
                self._held.pop(resource, None)
            else:
                self._held[resource] = after
            self.store.cond.notify_all()

    def set_down(self, down, keep=None):
        """True: close the listening socket and every connection (clients
        get "connection refused"); False: listen again on the same port."""
        if down and not self._down:
            self._down = True
            self._unlisten(keep)
        elif not down and self._down:
            self._listen()
            self._down = False

    @property
    def down(self):
        return self._down

    def fail_next(self, n=1, status=503, resource=None, verb=None,
                  close=False):
        """The next n API requests (of one resource and verb, when given)
        get `status` with a Status body (429 and 503 with Retry-After: 1),
        or, with close=True, a connection closed without any response.
        status=410 with verb="watch": HTTP 200 and an ERROR 410 event, as
        for an expired RV -- the way to force a relist whatever RV the
        client resumes from."""
        with self._lock:
            self._fail.append([n, status, resource, verb, close])

    def before_next(self, fn, resource=None, verb=None, paged=None):
        """Call fn() once, on the server's thread, just before it serves
        the next request of resource and verb (when given; paged=True: a
        LIST page after the first, False: a first page): a change of state
        timed against the client's requests, not against the test's clock
        (e.g. a compaction between two pages)."""
        with self._lock:
            self._before.append([fn, resource, verb, paged])

    def _run_before(self, res, verb, q):
        with self._lock:
            for b in self._before:
                fn, bres, bverb, paged = b
                if (bres is None or bres == res.name) and \
                        (bverb is None or bverb == verb) and \
                        (paged is None or paged == bool(q.get("continue"))):
                    self._before.remove(b)
                    break
            else:
                return
        fn()

    def forbid(self, resource, verbs=("list", "watch", "get")):
        """Requests for resource with these verbs get 403 Forbidden."""
        with self._lock:
            self._forbidden[resource] = set(verbs)

    def allow(self, resource=None):
        """Undo forbid() for one resource (or all)."""
        with self._lock:
            if resource is None:
                self._forbidden.clear()
            else:
                self._forbidden.pop(resource, None)

    def set_tokens(self, tokens):
        """Replace the in-process valid tokens (the token file, if any,
        still counts)."""
        with self._lock:
            self.tokens = list(tokens) if tokens is not None else None

    def set_bookmark_interval(self, seconds):
        self.bookmark_interval = seconds

    # -- observation

    def requests(self, resource=None, verb=None):
        """API requests seen so far (Request objects), oldest first."""
        with self._lock:
            return [r for r in self._requests
                    if (resource is None or r.resource == resource)
                    and (verb is None or r.verb == verb)]

    def count(self, resource=None, verb=None):
        return len(self.requests(resource, verb))

    def reads(self, served_from, resource=None, verb=None):
        """The answered requests that read from "etcd" or "cache" (see
        Request.served_from)."""
        return [r for r in self.requests(resource, verb)
                if r.served_from == served_from and r.code == 200]

    def clear_requests(self):
        with self._lock:
            self._requests = []

    # Events whose write time written_at() remembers (the newest).
    WRITTEN_KEPT = 1000

    def _note_written(self, rv):
        with self._lock:
            if rv not in self._written:
                self._written[rv] = time.monotonic()
                while len(self._written) > self.WRITTEN_KEPT:
                    del self._written[next(iter(self._written))]

    def written_at(self, rv, timeout=5.0):
        """When (time.monotonic()) the event of resourceVersion rv began
        to be written to a watch stream (encoded, and compressed if the
        stream is), the first time one was; None if none was within timeout
        seconds. A benchmark times a client from there: what came before
        (building, storing, encoding and compressing the object, in this
        server's Python) is not the client's."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                t = self._written.get(rv)
            if t is not None or time.monotonic() >= deadline:
                return t
            time.sleep(0.001)

    def open_watches(self, resource=None):
        """How many watch streams are open now (cut ones not counted)."""
        with self._lock:
            return sum(1 for w in self._watches if not w.cut and
                       (resource is None or w.resource == resource))

    def wait_watches(self, resource=None, count=1, timeout=5.0):
        """Wait until at least count watches of resource are open; raises
        TimeoutError (saying what was requested) otherwise."""
        deadline = time.monotonic() + timeout
        while self.open_watches(resource) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    "%d watch(es) on %s not open after %.1fs (open: %d); "
                    "requests: %s" % (count, resource or "any", timeout,
                                      self.open_watches(resource),
                                      self.requests(resource)[-6:]))
            time.sleep(0.01)

    def wait_requests(self, resource=None, verb=None, count=1, timeout=5.0):
        """Wait until count requests of resource/verb were seen; returns
        them, or raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            reqs = self.requests(resource, verb)
            if len(reqs) >= count:
                return reqs
            if time.monotonic() > deadline:
                raise TimeoutError(
                    "%d %s request(s) on %s not seen after %.1fs; seen: %s"
                    % (count, verb or "any", resource or "any", timeout,
                       reqs[-6:]))
            time.sleep(0.01)

    # -- kubeconfig for the client under test

    def kubeconfig(self, path, token=None, token_file=None, ca=None,
                   client_cert=None, client_key=None, insecure=False,
                   embed=False):
        """Write a kubeconfig (YAML, current-context "fake") pointing at
        this server; returns path. ca/client_cert/client_key are file
        paths; embed=True writes them inline as certificate-authority-data,
        client-certificate-data and client-key-data (base64)."""
        def ref(field, fpath):
            if not embed:
                return "    %s: %s" % (field, fpath)
            with open(fpath, "rb") as f:
                return "    %s-data: %s" % (field, base64.b64encode(
                    f.read()).decode())
        cluster = ["    server: %s" % self.url]
        if ca:
            cluster.append(ref("certificate-authority", ca))
        if insecure:
            cluster.append("    insecure-skip-tls-verify: true")
        user = []
        if token:
            user.append("    token: %s" % token)
        if token_file:
            user.append("    tokenFile: %s" % token_file)
        if client_cert:
            user.append(ref("client-certificate", client_cert))
            user.append(ref("client-key", client_key))
        text = "\n".join([
            "apiVersion: v1", "kind: Config", "current-context: fake",
            "clusters:", "- name: fake", "  cluster:"] + cluster + [
            "users:", "- name: fake", "  user:" + ("" if user else " {}")]
            + user + [
            "contexts:", "- name: fake", "  context:", "    cluster: fake",
            "    user: fake", ""])
        with open(path, "w") as f:
            f.write(text)
        return path

    def service_account_dir(self, d, token, ca=None, namespace="kube-system"):
        """Write what a pod finds in /var/run/secrets/kubernetes.io/
        serviceaccount (token, ca.crt, namespace) into d; returns the
        environment for in-cluster mode (KUBERNETES_SERVICE_HOST/PORT)."""
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "token"), "w") as f:
            f.write(token)
        with open(os.path.join(d, "namespace"), "w") as f:
            f.write(namespace)
        if ca:
            with open(ca, "rb") as src, \
                    open(os.path.join(d, "ca.crt"), "wb") as dst:
                dst.write(src.read())
        return {"KUBERNETES_SERVICE_HOST": self.host,
                "KUBERNETES_SERVICE_PORT": str(self.port)}

    # -- auth

    def _valid_tokens(self):
        toks = set(self.tokens or [])
        if self.token_file:
            try:
                with open(self.token_file) as f:
                    toks.update(l.strip() for l in f if l.strip())
            except OSError:
                pass
        return toks

    def _authenticate(self, handler):
        """The user name, or None for a 401. Certificates first, then the
        bearer token, as the real authenticator chain does."""
        if isinstance(handler.connection, ssl.SSLSocket) and self.client_ca:
            cert = handler.connection.getpeercert()
            if cert:
                for rdn in cert.get("subject", ()):
                    for k, v in rdn:
                        if k == "commonName":
                            return v
                return "client-cert"
        auth = handler.headers.get("Authorization") or ""
        if self.tokens is None and not self.token_file and not self.client_ca:
            return auth[7:] if auth.startswith("Bearer ") else "anonymous"
        if auth.startswith("Bearer ") and auth[7:].strip() in \
                self._valid_tokens():
            return auth[7:].strip()
        return None

    # -- API requests

    def _serve_api(self, h, method, url):
        path = url.path
        if path in ("/healthz", "/livez", "/readyz"):
            return self._send_text(h)
        if path == "/version":
            return h.send_json(200, {"major": "1", "minor": "30",
                                     "gitVersion": "v1.30.0-fakeapi",
                                     "platform": "linux/amd64"})
        with self._lock:
            crds = set(self.crds)
        # recorded even for a CRD not installed (tests count those 404s)
        route = _route(path, RESOURCES)
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(
            url.query, keep_blank_values=True).items()}
        verb = None
        if route:
            res, ns, name = route
            verb = ("get" if name else
                    "watch" if _truthy(q.get("watch")) else "list")
            h._req = Request(verb, res.name, ns, name, path, url.query, None)
            h._req.accept_encoding = h.headers.get("Accept-Encoding")
            with self._lock:
                self._requests.append(h._req)
        user = self._authenticate(h)
        if h._req is not None:
            h._req.user = user
        if user is None:
            raise ApiError(401, "Unauthorized")
        if route is None or (route[0].crd and route[0].name not in crds):
            raise ApiError(404, "the server could not find the requested "
                           "resource", details={})
        if method != "GET":
            raise ApiError(405, "fakeapi serves only GET on %s" % path)
        self._run_before(res, verb, q)
        gone = self._inject_failure(h, res, verb) == "gone"
        if verb in self._forbidden.get(res.name, ()):
            scope = ('in the namespace "%s"' % ns if ns
                     else "at the cluster scope")
            raise ApiError(403, '%s is forbidden: User "%s" cannot %s '
                           'resource "%s" in API group "%s" %s'
                           % (res.name, user, verb, res.name, res.group,
                              scope),
                           details={"kind": res.name})
        if verb == "get":
            return self._get(h, res, ns, name)
        if verb == "watch":
            return self._watch(h, res, ns, q, gone)
        return self._list(h, res, ns, q)

    def _send_text(self, h):
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; charset=utf-8")
        h.send_header("Content-Length", "2")
        h.end_headers()
        h.wfile.write(b"ok")

    def _inject_failure(self, h, res, verb):
        with self._lock:
            for f in self._fail:
                n, code, fres, fverb, close = f
                if (fres is None or fres == res.name) and \
                        (fverb is None or fverb == verb):
                    f[0] -= 1
                    if f[0] <= 0:
                        self._fail.remove(f)
                    break
            else:
                return
        if close:
            h._req.code = 0
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            raise BrokenPipeError("fail_next close")
        if code == 410 and verb == "watch":
            # A watch learns of expiry in the stream, as from the server.
            return "gone"
        headers = {"Retry-After": 1} if code in (429, 503) else None
        raise ApiError(code, "fakeapi: injected failure %d" % code,
                       headers=headers)

    def _get(self, h, res, ns, name):
        key = "%s/%s" % (ns, name) if res.namespaced else name
        with self.store.cond:
            rev = self.store.live(res, key, self.store.rv)
        if rev is None:
            raise ApiError(404, '%s "%s" not found' % (res.name, name),
                           details={"name": name, "group": res.group,
                                    "kind": res.name} if res.group else
                           {"name": name, "kind": res.name})
        h._req.code = 200
        h.send_json(200, full_json(res, rev.item))

    def _selector(self, res, q):
        return combine(parse_field_selector(res, q.get("fieldSelector")),
                       parse_label_selector(q.get("labelSelector")))

    @staticmethod
    def _parse_rv(text):
        try:
            rv = int(text)
            if rv < 0:
                raise ValueError
            return rv
        except ValueError:
            raise BadRequest('Invalid value: "%s": invalid resource version'
                             % text)

    # -- the watch cache

    def _cache_rv(self):
        """The RV the watch cache has reached (caller holds cond)."""
        st = self.store
        return st.rv if self.cache_at is None else min(self.cache_at, st.rv)

    def _wait_for_cache(self, rv):
        """The watch cache waits up to 3 s (self.rv_wait) for an RV it has
        not reached yet, then answers 504 ResourceVersionTooLarge. Caller
        holds cond."""
        deadline = time.monotonic() + self.rv_wait
        while self._cache_rv() < rv:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _too_large(rv, self._cache_rv())
            self.store.cond.wait(left)

    def _validate_list_options(self, q, watch):
        """apimachinery's ValidateListOptions (with the WatchList gate as
        self.watch_list): what it refuses is 422 Invalid, before any read."""
        match = q.get("resourceVersionMatch", "")
        sie = q.get("sendInitialEvents")
        errs = []
        if watch:
            if sie is not None:
                if match != "NotOlderThan":
                    errs.append(("resourceVersionMatch", "FieldValueForbidden",
                                 "Forbidden: sendInitialEvents requires setting "
                                 "resourceVersionMatch to NotOlderThan"))
                if not self.watch_list:
                    errs.append(("sendInitialEvents", "FieldValueForbidden",
                                 "Forbidden: sendInitialEvents is forbidden for "
                                 "watch unless the WatchList feature gate is "
                                 "enabled"))
            if match:
                if sie is None:
                    errs.append(("resourceVersionMatch", "FieldValueForbidden",
                                 "Forbidden: resourceVersionMatch is forbidden "
                                 "for watch unless sendInitialEvents is "
                                 "provided"))
                if match != "NotOlderThan":
                    errs.append(("resourceVersionMatch",
                                 "FieldValueNotSupported",
                                 'Unsupported value: "%s": supported values: '
                                 '"NotOlderThan"' % match))
                if q.get("continue"):
                    errs.append(("resourceVersionMatch", "FieldValueForbidden",
                                 "Forbidden: resourceVersionMatch is forbidden "
                                 "when continue is provided"))
        else:
            if match:
                if not q.get("resourceVersion"):
                    errs.append(("resourceVersionMatch", "FieldValueForbidden",
                                 "Forbidden: resourceVersionMatch is forbidden "
                                 "unless resourceVersion is provided"))
                if q.get("continue"):
                    errs.append(("resourceVersionMatch", "FieldValueForbidden",
                                 "Forbidden: resourceVersionMatch is forbidden "
                                 "when continue is provided"))
                if match not in ("Exact", "NotOlderThan"):
                    errs.append(("resourceVersionMatch",
                                 "FieldValueNotSupported",
                                 'Unsupported value: "%s": supported values: '
                                 '"Exact", "NotOlderThan", ""' % match))
                if match == "Exact" and q.get("resourceVersion") == "0":
                    errs.append(("resourceVersionMatch", "FieldValueForbidden",
                                 'Forbidden: resourceVersionMatch "exact" is '
                                 'forbidden for resourceVersion "0"'))
            if sie is not None:
                errs.append(("sendInitialEvents", "FieldValueForbidden",
                             "Forbidden: sendInitialEvents is forbidden for "
                             "list"))
        if not errs:
            return
        texts = ["%s: %s" % (f, m) for f, _, m in errs]
        raise ApiError(422, 'ListOptions.meta.k8s.io "" is invalid: %s' % (
            texts[0] if len(texts) == 1 else "[%s]" % ", ".join(texts)),
            "Invalid", {"group": "meta.k8s.io", "kind": "ListOptions",
                        "causes": [{"reason": r, "message": m, "field": f}
                                   for f, r, m in errs]})

    def _list_from_cache(self, q, limit):
        """The cacher's shouldDelegateList: the watch cache serves a LIST
        unless it is consistent (no RV), continues, pages an RV other than
        "0", or asks for an Exact RV."""
        rv_text = q.get("resourceVersion", "")
        return (self.watch_cache and rv_text != "" and not q.get("continue")
                and not (limit and rv_text != "0")
                and q.get("resourceVersionMatch", "") in ("", "NotOlderThan"))

    def _list(self, h, res, ns, q):
        self._validate_list_options(q, watch=False)
        try:
            pred = self._selector(res, q)
            limit = int(q.get("limit") or 0)
            rv_text = q.get("resourceVersion", "")
            match = q.get("resourceVersionMatch", "")
            cont = q.get("continue", "")
            if cont and rv_text not in ("", "0"):
                raise BadRequest("specifying resource version is not "
                                 "allowed when using continue")
            start = None
            if cont:
                snapshot, start = decode_continue(cont)
            rv = self._parse_rv(rv_text) if rv_text else None
        except (BadRequest, ValueError) as e:
            raise ApiError(400, str(e))
        cached = self._list_from_cache(q, limit)
        h._req.served_from = "cache" if cached else "etcd"
        h._req.consistent = not rv_text and not cont
        st = self.store
        with st.cond:
            if cached:
                # Whatever it holds at least as new as rv, all of it: the
                # watch cache does not page (limit is ignored).
                if rv:
                    self._wait_for_cache(rv)
                snapshot, limit = self._cache_rv(), 0
            elif cont:
                if snapshot < st.compact_rv:
                    raise ApiError(410, EXPIRED_CONTINUE, "Expired")
            elif rv and (match == "Exact" or (not match and limit)):
                # etcd at exactly rv (the legacy paged RV is Exact too).
                if rv < st.compact_rv:
                    raise ApiError(410, "The resourceVersion for the "
                                   "provided list is too old.", "Expired")
                if rv > st.rv:
                    raise _too_large(rv, st.rv)
                snapshot = rv
            else:
                # etcd at its current revision: consistent, "0" without a
                # watch cache, or NotOlderThan rv (checked after the read).
                if rv and rv > st.rv:
                    raise _too_large(rv, st.rv)
                snapshot = st.rv
            items, next_key, remaining = st.page(res, ns, pred, limit, start,
                                                 snapshot)
        meta = '"resourceVersion":"%d"' % snapshot
        if next_key is not None:
            meta += ',"continue":"%s"' % encode_continue(snapshot, next_key)
            if pred is None:
                meta += ',"remainingItemCount":%d' % remaining
        body = b"".join([
            b'{"kind":"%s","apiVersion":"%s","metadata":{%s},"items":['
            % (res.list_kind.encode(), res.api_version.encode(),
               meta.encode()),
            b",".join(items), b"]}"])
        h._req.code = 200
        h._req.size = len(body)
        h.send_json(200, body)

    # -- watch

    def _watch(self, h, res, ns, q, gone=False):
        self._validate_list_options(q, watch=True)
        try:
            pred = self._selector(res, q)
            rv_text = q.get("resourceVersion", "")
            rv = self._parse_rv(rv_text) if rv_text else 0
            timeout = q.get("timeoutSeconds")
            timeout = float(timeout) if timeout else None
        except (BadRequest, ValueError) as e:
            raise ApiError(400, str(e))
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        initial_events = _truthy(q.get("sendInitialEvents"))
        if (self.watch_list and "sendInitialEvents" not in q and
                rv_text in ("", "0")):
            # SetListOptionsDefaults: with the WatchList gate on, a legacy
            # watch from no RV or "0" is a streaming list.
            initial_events = True
        if ns:
            pred = combine(lambda o: o["metadata"].get("namespace") == ns,
                           pred)
        # A watch from the cache, but a watch without an RV and without
        # initial events, which the cacher hands to etcd.
        from_cache = self.watch_cache and (rv_text != "" or initial_events)
        h._req.served_from = "cache" if from_cache else "etcd"
        h._req.consistent = initial_events and rv_text == ""
        st = self.store
        initial, expired, too_large = [], None, None
        with st.cond:
            if gone:
                expired = pos = rv
            elif initial_events:
                # The state at least as new as rv (no RV: as new as etcd's
                # current revision, which the cache waits for), as ADDED
                # events from the cache, then the changes after it.
                want = st.rv if rv_text == "" else rv
                try:
                    self._wait_for_cache(want)
                except ApiError as e:
                    # Past authentication and a parsed RV, the cacher
                    # reports errors in the stream, not as the status.
                    too_large, pos = e, rv
                else:
                    pos = self._cache_rv()
                    initial, _, _ = st.select(res, ns, pred, 0, None, pos)
            elif rv == 0:
                # No RV and no initial events (WatchList off): "get state
                # and start at most recent", from etcd.
                pos = st.rv
                initial, _, _ = st.select(res, ns, pred, 0, None, pos)
            elif rv < st.watch_floor:
                expired = rv
                pos = rv
            else:
                self._wait_for_cache(rv)
                pos = rv
        h._req.code = 200
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Cache-Control", "no-cache, private")
        h.send_header("Transfer-Encoding", "chunked")
        if (initial_events and self.watch_list_compression and
                "gzip" in (h.headers.get("Accept-Encoding") or "")):
            # WatchListCompression (1.37): the writer closes the gzip
            # stream at every flush, so each event is a gzip member.
            h.send_header("Content-Encoding", "gzip")
            h.gzip_members = True
        h.end_headers()
        if expired is not None:
            return self._watch_expired(h, expired)
        if too_large is not None:
            return self._watch_error(h, too_large.status)
        watch = Watch(res.name, h.connection)
        with self._lock:
            self._watches.add(watch)
        try:
            if not self._send_initial(h, res, initial, watch,
                                      held=initial_events):
                return self._cut(h, res, watch)
            if initial_events and bookmarks:
                h.write_chunk(self._bookmark(res, pos, initial_end=True))
            h._req.initial_sent = time.time()
            self._stream(h, res, pred, pos, watch, bookmarks, timeout)
        finally:
            with self._lock:
                self._watches.discard(watch)

    # Bytes of initial events per write: the API server flushes when its
    # queue of events is empty, so while the state streams out it writes
    # large buffers (the chunk framing is one event per chunk all the same).
    INITIAL_WRITE = 256 * 1024

    def _send_initial(self, h, res, revs, watch, held):
        """The initial events (revs as ADDED), a gzip member each when the
        stream is compressed, in large writes of cached bytes. held: a
        WatchList, which hold_initial_events() may stall. False when the
        watch was cut meanwhile."""
        i = 0
        while i < len(revs):
            end = len(revs)
            if held:
                end = self._initial_events_may_go(res, i, h, watch, end)
                if end is None:
                    return False
            elif watch.cut:
                return False
            parts, size = [], 0
            while i < end and size < self.INITIAL_WRITE:
                rev = revs[i]
                i += 1
                if h.gzip_members:
                    if rev.added_gz is None:
                        rev.added_gz = added_gz_chunk(res, rev.item)
                    parts.append(rev.added_gz)
                    size += len(rev.added_gz)
                else:
                    chunk = added_plain_chunk(res, rev.item)
                    parts.extend(chunk)
                    size += len(rev.item)
            h.wfile.write(b"".join(parts))
        return True

    def _initial_events_may_go(self, res, i, h, watch, end):
        """Where the initial events from i on may go up to (excluded): end,
        or the point hold_initial_events() holds them at, waiting while it
        holds event i back. None when the watch was cut meanwhile."""
        with self.store.cond:
            while True:
                if watch.cut:
                    return None
                after = self._held.get(res.name)
                if after is None or i < after:
                    return end if after is None else min(end, after)
                if self._client_gone(h.connection):
                    return None
                self.store.cond.wait(0.05)

    def _watch_error(self, h, err):
        h.write_chunk(b'{"type":"ERROR","object":%s}\n'
                      % json.dumps(err, separators=(",", ":")).encode())
        h.wfile.write(b"0\r\n\r\n")

    def _watch_expired(self, h, rv):
        with self.store.cond:
            floor = self.store.watch_floor
        self._watch_error(h, status(410, "too old resource version: %d (%d)"
                                    % (rv, floor), self.gone_reason))

    def _bookmark(self, res, rv, initial_end=False):
        meta = {"resourceVersion": str(rv), "creationTimestamp": None}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": res.kind, "apiVersion": res.api_version,
               "metadata": meta}
        return b'{"type":"BOOKMARK","object":%s}\n' % json.dumps(
            obj, separators=(",", ":")).encode()

    def _stream(self, h, res, pred, pos, watch, bookmarks, timeout):
        """Send events after pos until the timeout, a cut, 410, or the
        client going away."""
        st = self.store
        start = time.monotonic()
        deadline = start + timeout if timeout else None
        next_bookmark = start + self.bookmark_interval
        while True:
            with st.cond:
                while True:
                    if watch.cut or watch.ended:
                        break
                    if pos < st.watch_floor:
                        break
                    if st.log and min(st.log[-1].rv,
                                      self._cache_rv()) > pos:
                        break
                    now = time.monotonic()
                    if deadline is not None and now >= deadline:
                        break
                    if bookmarks and now >= next_bookmark:
                        break
                    if self._client_gone(h.connection):
                        watch.cut = True
                        break
                    wake = now + 0.25
                    if deadline is not None:
                        wake = min(wake, deadline)
                    if bookmarks:
                        wake = min(wake, next_bookmark)
                    st.cond.wait(max(wake - now, 0.001))
                expired = pos < st.watch_floor
                # What the watch cache has reached, not beyond.
                upto = max(pos, self._cache_rv())
                events = [] if expired or watch.cut else [
                    e for e in st.events_after(pos) if e.rv <= upto]
            if watch.cut:
                return self._cut(h, res, watch)
            if expired:
                return self._watch_expired(h, pos)
            for ev in events:
                if ev.res is res:
                    line = self._event_line(res, ev, pred)
                    if line is not None:
                        h.write_chunk(line, ev.rv)
            pos = max(pos, upto)
            now = time.monotonic()
            if (deadline is not None and now >= deadline) or \
                    (watch.ended and pos >= st.rv):
                h.wfile.write(b"0\r\n\r\n")     # a clean end of the stream
                return
            if bookmarks and now >= next_bookmark:
                h.write_chunk(self._bookmark(res, pos))
                next_bookmark = now + self.bookmark_interval

    @staticmethod
    def _event_line(res, ev, pred):
        """The event as this watcher sees it through its selector, or
        None."""
        typ, item = ev.type, ev.item
        if pred is not None:
            now_ok = pred(ev.obj)
            was_ok = ev.old is not None and pred(ev.old)
            if ev.type == "DELETED":
                if not now_ok:
                    return None
            elif now_ok and not was_ok:
                typ = "ADDED"
            elif was_ok and not now_ok:
                # It left the selection: DELETED with its previous state,
                # stamped with this event's RV, as the watch cache does.
                gone = copy.deepcopy(ev.old)
                gone["metadata"]["resourceVersion"] = str(ev.rv)
                typ, item = "DELETED", encode_item(gone)
            elif not now_ok:
                return None
        return b'{"type":"%s","object":%s}\n' % (typ.encode(),
                                                  full_json(res, item))

    @staticmethod
    def _client_gone(conn):
        """True when the client closed its end (a watch otherwise notices
        only on its next write)."""
        try:
            r, _, _ = select.select([conn], [], [], 0)
            if not r:
                return False
            if isinstance(conn, ssl.SSLSocket):
                return True     # nothing else arrives on a watch but EOF
            return conn.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _cut(self, h, res, watch):
        if watch.partial:
            line = self._bookmark(res, 0)
            h.wfile.write(b"%x\r\n%s" % (len(line), line[:len(line) // 2]))
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- HTTP control API

    def _control_http(self, h, method, url):
        """POST /_control/<op> with a JSON body; GET for the read-only ops.
        Answers JSON."""
        op = url.path[len("/_control/"):].strip("/")
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        body = {}
        n = int(h.headers.get("Content-Length") or 0)
        if n:
            body = json.loads(h.rfile.read(n) or b"{}")
        args = dict(q)
        if isinstance(body, dict):
            args.update(body)
        out = self._control_op(h, op, args, body)
        h.send_json(200, out)

    def _control_op(self, h, op, a, body):
        if op == "apply":
            objs = a.get("objects") or a.get("items") or (
                [a["object"]] if "object" in a else
                body if isinstance(body, list) else [body])
            return {"resourceVersion": str(self.apply(objs))}
        if op == "delete":
            final = self.delete(a["resource"], a.get("namespace"),
                                a.get("name"))
            if final is None:
                raise ApiError(404, "no such object")
            return {"resourceVersion":
                    final["metadata"]["resourceVersion"]}
        if op == "objects":
            return {"items": self.objects(a["resource"])}
        if op == "cut_watches":
            return {"cut": self.cut_watches(a.get("resource"),
                                            _truthy(str(a.get("partial"))))}
        if op == "compact":
            return {"resourceVersion": str(self.compact())}
        if op in ("down", "up"):
            down = op == "down"
            keep = h.connection if not h.server.control_only else None
            self.set_down(down, keep=keep)
            if down and a.get("seconds"):
                threading.Timer(float(a["seconds"]),
                                self.set_down, (False,)).start()
            if keep is not None:
                h.close_connection = True
            return {"down": self.down, "port": self.port}
        if op == "fail_next":
            self.fail_next(int(a.get("n", 1)), int(a.get("status", 503)),
                           a.get("resource"), a.get("verb"),
                           _truthy(str(a.get("close"))))
            return {}
        if op == "forbid":
            self.forbid(a["resource"], a.get("verbs")
                        or ("list", "watch", "get"))
            return {}
        if op == "allow":
            self.allow(a.get("resource"))
            return {}
        if op == "tokens":
            self.set_tokens(a.get("tokens"))
            return {}
        if op == "hold_initial_events":
            after = a.get("after")
            self.hold_initial_events(a["resource"], None if after in
                                     (None, "", "null") else int(after))
            return {}
        if op == "cache_behind":
            rv = a.get("resourceVersion")
            self.cache_behind(None if rv in (None, "", "null") else int(rv))
            return {}
        if op == "bookmark_interval":
            self.set_bookmark_interval(float(a["seconds"]))
            return {}
        if op == "requests":
            return {"requests": [r.to_dict() for r in self.requests(
                a.get("resource"), a.get("verb"))]}
        if op == "clear_requests":
            self.clear_requests()
            return {}
        if op == "state":
            with self.store.cond:
                rv, crv, floor = (self.store.rv, self.store.compact_rv,
                                  self.store.watch_floor)
            return {"resourceVersion": str(rv), "compacted": str(crv),
                    "cacheAt": None if self.cache_at is None
                    else str(self.cache_at),
                    "watchFloor": str(floor), "down": self.down,
                    "port": self.port,
                    "openWatches": {r: self.open_watches(r)
                                    for r in RESOURCES}}
        if op == "crd":
            if _truthy(str(a.get("installed", True))):
                self.install_crd(a["resource"])
            else:
                self.uninstall_crd(a["resource"])
            return {"installed": sorted(self.crds)}
        if op == "wait_watches":
            try:
                self.wait_watches(a.get("resource"), int(a.get("count", 1)),
                                  float(a.get("timeout", 5)))
            except TimeoutError as e:
                raise ApiError(504, str(e), "Timeout")
            return {"open": self.open_watches(a.get("resource"))}
        raise ApiError(404, "no control operation %r" % op)


# ----------------------------------------------------------------------- TLS

class TLSFiles:
    """Paths made by make_tls()."""

    def __init__(self, d):
        self.dir = d
        self.ca = os.path.join(d, "ca.crt")
        self.ca_key = os.path.join(d, "ca.key")
        self.server_cert = os.path.join(d, "server.crt")
        self.server_key = os.path.join(d, "server.key")
        self.client_cert = os.path.join(d, "client.crt")
        self.client_key = os.path.join(d, "client.key")


def _openssl(*args, cwd):
    p = subprocess.run(["openssl"] + list(args), cwd=cwd,
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), p.stderr))


def make_tls(d, client_cn="system:serviceaccount:kube-system:localdns"):
    """Make in directory d (created if needed) with the openssl CLI:
    ca.crt/ca.key (a self-signed CA), server.crt/key (signed by it, SAN
    IP:127.0.0.1, IP:::1, DNS:localhost, serverAuth) and client.crt/key
    (CN=client_cn, O=system:serviceaccounts, clientAuth). EC P-256 keys:
    fast to make. Returns TLSFiles."""
    os.makedirs(d, exist_ok=True)
    t = TLSFiles(d)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", t.ca_key, "-out", t.ca,
             "-days", "3", "-subj", "/CN=fakeapi-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    for name, subj, ext in (
            ("server", "/CN=kube-apiserver",
             "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n"
             "extendedKeyUsage=serverAuth\n"
             "keyUsage=critical,digitalSignature\n"),
            ("client", "/O=system:serviceaccounts/CN=%s" % client_cn,
             "extendedKeyUsage=clientAuth\n"
             "keyUsage=critical,digitalSignature\n")):
        csr = os.path.join(d, name + ".csr")
        extfile = os.path.join(d, name + ".ext")
        with open(extfile, "w") as f:
            f.write(ext)
        _openssl("req", *ec, "-keyout", os.path.join(d, name + ".key"),
                 "-out", csr, "-subj", subj, cwd=d)
        _openssl("x509", "-req", "-in", csr, "-CA", t.ca, "-CAkey", t.ca_key,
                 "-CAcreateserial", "-days", "3", "-extfile", extfile,
                 "-out", os.path.join(d, name + ".crt"), cwd=d)
    return t


# ---------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--control-port", type=int, default=0)
    ap.add_argument("--token-file")
    ap.add_argument("--token", action="append",
                    help="a valid bearer token (repeatable)")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--client-ca")
    ap.add_argument("--require-client-cert", action="store_true")
    ap.add_argument("--bookmark-interval", type=float, default=1.0)
    ap.add_argument("--history", type=int, default=1000,
                    help="watch events kept (older RVs get 410)")
    ap.add_argument("--gone-reason", default="Expired",
                    help="reason of the watch 410 Status (Expired or Gone)")
    ap.add_argument("--no-watch-list", action="store_true",
                    help="refuse sendInitialEvents (the WatchList gate off)")
    ap.add_argument("--no-watch-cache", action="store_true",
                    help="serve every LIST and WATCH from etcd")
    ap.add_argument("--no-watch-list-compression", action="store_true",
                    help="never gzip a WatchList (servers before 1.37)")
    ap.add_argument("--crd", action="append", default=[],
                    help="a custom resource whose CRD is installed "
                         "(serviceentries, workloadentries, serviceimports; "
                         "repeatable)")
    ap.add_argument("--load", help="a JSON file: a list of objects to apply")
    ap.add_argument("--ready-file")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    api = FakeAPI(host=args.host, port=args.port, tokens=args.token,
                  token_file=args.token_file, tls_cert=args.tls_cert,
                  tls_key=args.tls_key, client_ca=args.client_ca,
                  require_client_cert=args.require_client_cert,
                  bookmark_interval=args.bookmark_interval,
                  history=args.history, gone_reason=args.gone_reason,
                  control_port=args.control_port,
                  verbose=args.verbose, watch_list=not args.no_watch_list,
                  watch_cache=not args.no_watch_cache,
                  watch_list_compression=not args.no_watch_list_compression,
                  crds=args.crd)
    if args.load:
        with open(args.load) as f:
            api.apply(json.load(f))
    api.start()
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n%d\n" % (api.port, api.control_port))
        os.rename(tmp, args.ready_file)
    stop = threading.Event()
    import signal
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
