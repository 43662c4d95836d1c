"""Node integration: the addresses (netlink), the nftables table, the
crash-safe fallback, drift repair, teardown and cleanup.

Every test builds its own three network namespaces (class Node) and sends
traffic only inside them; this is their IPv4 shape (Family IPV4), and
test_node_dualstack.py gives them an IPv6 Family beside it:

    pod  10.200.1.2 --veth-- 10.200.1.1  node  10.200.2.1 --veth-- 10.200.2.2  coredns
                                  |
        localdns on lo: 169.254.20.10 (listen), 10.96.0.10 (intercept)
        "kube-proxy": nft DNAT 10.96.0.10:53 -> 10.200.2.2:53 (table ip kubeproxy)

The stand-in CoreDNS answers A 192.0.2.99 to every question; localdns
answers db.prod.svc.cluster.local A 10.0.0.5 from its static records, so
each answer says who gave it. This kernel has no dummy link type, so the
daemon runs with interface.kind: loopback through the same netlink code.
"""

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time

import harness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kube"))
import fakeapi as F  # noqa: E402

NAME = "db.prod.svc.cluster.local"
LOCAL_ANSWER = ["10.0.0.5"]
STANDIN_ANSWER = ["192.0.2.99"]
LINK = "169.254.20.10"
CLUSTER_IP = "10.96.0.10"
COREDNS = "10.200.2.2"

_ids = itertools.count()

# Logged by the node monitor when its first heartbeat is in: DNS comes to
# localdns from then on.
CAPTURING = "taking DNS: the nftables heartbeat is renewed"

# The stand-in CoreDNS: UDP and TCP on port 53 of one address (IPv4 or
# IPv6), A 192.0.2.99 (or argv[2]) for anything, but BIG_NAME: BIG_RECORDS
# A records, more than a UDP reply holds, so over UDP its answer is
# truncated (TC=1, no records) past 512 bytes or the query's EDNS size,
# as CoreDNS truncates.
BIG_NAME, BIG_RECORDS = "big.example", 100
STANDIN = r'''
import socket, struct, sys, threading
addr = sys.argv[1]
family = socket.AF_INET6 if ":" in addr else socket.AF_INET
rdata = socket.inet_aton(sys.argv[2] if len(sys.argv) > 2 else "192.0.2.99")
def answer(q, udp=False):
    end = 12
    while q[end]:
        end += q[end] + 1
    big = q[12:end + 1] == b"\x03big\x07example\x00"
    end += 5
    limit = 512 if udp else 65535
    if udp and q[end:end + 3] == b"\x00\x00\x29":  # an OPT record: its payload size
        limit = max(512, struct.unpack("!H", q[end + 3:end + 5])[0])
    rrs = [b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 0, 4) +
           (bytes([10, 77, i // 256, i % 256]) if big else rdata)
           for i in range(100 if big else 1)]
    reply = q[:2] + struct.pack("!HHHHH", 0x8180, 1, len(rrs), 0, 0) + q[12:end] + b"".join(rrs)
    if len(reply) > limit:
        return q[:2] + struct.pack("!HHHHH", 0x8380, 1, 0, 0, 0) + q[12:end]
    return reply
def udp():
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind((addr, 53))
    while True:
        q, peer = s.recvfrom(4096)
        s.sendto(answer(q, udp=True), peer)
def tcp_client(c):
    with c:
        n = struct.unpack("!H", c.recv(2))[0]
        q = b""
        while len(q) < n:
            q += c.recv(n - len(q))
        a = answer(q)
        c.sendall(struct.pack("!H", len(a)) + a)
t = socket.socket(family, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((addr, 53))
t.listen(16)
threading.Thread(target=udp, daemon=True).start()
print("ready", flush=True)
while True:
    threading.Thread(target=tcp_client, args=(t.accept()[0],), daemon=True).start()
'''

# Another program's table named like ours, created with the owner flag
# (NFT_TABLE_F_OWNER): the kernel refuses everyone else's changes to it
# while this process holds its netlink socket.
OWNED_TABLE = r'''
import socket, struct, sys
def attr(t, data):
    a = struct.pack("=HH", 4 + len(data), t) + data
    return a + b"\0" * (-len(a) % 4)
def msg(mtype, flags, seq, payload):
    return struct.pack("=IHHII", 16 + len(payload), mtype, flags, seq, 0) + payload
REQ, ACK, CREATE = 1, 4, 0x400
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
s.bind((0, 0))
gen = lambda fam, res: struct.pack("=BBH", fam, 0, socket.htons(res))
body = gen(1, 0) + attr(1, sys.argv[1].encode() + b"\0") + attr(2, struct.pack("!I", 2))
s.send(msg(0x10, REQ, 1, gen(0, 10)) + msg(10 << 8, REQ | ACK | CREATE, 2, body)
       + msg(0x11, REQ, 3, gen(0, 10)))
err = struct.unpack("=i", s.recv(65536)[16:20])[0]
print("ready" if err == 0 else "error %d" % err, flush=True)
sys.stdin.read()
'''


class Family:
    """One address family of the namespaces' network: the addresses on
    both ends of the two links, what lets the node route between them, and
    the two addresses localdns serves."""

    def __init__(self, ip, nft, prefix, pod, pod_gateway, coredns, coredns_gateway,
                 forwarding, link, cluster_ip, address_flags=()):
        self.ip = ip                        # ip(8)'s switch: "-4" or "-6"
        self.nft = nft                      # nftables' family and address keyword
        self.prefix = prefix
        self.pod, self.pod_gateway = pod, pod_gateway
        self.coredns, self.coredns_gateway = coredns, coredns_gateway
        self.forwarding = forwarding        # sysctl setting, on the node
        self.link = link                    # listen address
        self.cluster_ip = cluster_ip        # kube-dns's ClusterIP, intercepted
        self.address_flags = list(address_flags)


IPV4 = Family("-4", "ip", 24, "10.200.1.2", "10.200.1.1", COREDNS, "10.200.2.1",
              "net.ipv4.ip_forward=1", LINK, CLUSTER_IP)

# kube-proxy's DNAT of a family's ClusterIP port 53 to the stand-in CoreDNS.
KUBE_PROXY = """
    table %(family)s kubeproxy {
      chain pre { type nat hook prerouting priority dstnat; policy accept;
        %(family)s daddr %(ip)s meta l4proto { udp, tcp } th dport 53 dnat to %(to)s
      }
      chain out { type nat hook output priority -100; policy accept;
        %(family)s daddr %(ip)s meta l4proto { udp, tcp } th dport 53 dnat to %(to)s
      }
    }"""


class Node:
    """The three namespaces, the stand-in CoreDNS and the kube-proxy DNAT,
    for each of `families` (IPv4 alone unless told)."""

    def __init__(self, env, families=(IPV4,)):
        self.env = env
        self.families = families
        self.node, self.pod, self.coredns = (harness.netns_name("ldns-" + r)
                                             for r in ("node", "pod", "cdns"))
        for ns in (self.node, self.pod, self.coredns):
            p = self.run(None, "ip", "netns", "add", ns, check=False)
            if p.returncode != 0:
                raise harness.Skip("cannot create a network namespace: "
                                   + p.stderr.strip())
            harness.track_netns(ns)
            self.ip(ns, "link", "set", "lo", "up")
        self.pod_link = self.wire(self.pod)
        self.coredns_link = self.wire(self.coredns)
        self.standins = []
        for f in families:
            self.address(f, self.pod, self.pod_link, f.pod, f.pod_gateway)
            self.address(f, self.coredns, self.coredns_link, f.coredns, f.coredns_gateway)
            self.run(self.node, "sysctl", "-qw", f.forwarding)
            self.nft(self.node, KUBE_PROXY % {"family": f.nft, "ip": f.cluster_ip,
                                              "to": f.coredns})
            self.standins.append(self.helper(self.coredns, STANDIN, f.coredns))
        self.standin = self.standins[0]
        if any(f.ip == "-6" for f in families):
            # The veths' link-local addresses are tentative for about a
            # second (duplicate address detection), and neighbour discovery
            # to the coredns namespace fails until they are not: a first
            # packet there would be lost, by the network's set-up and not
            # by localdns.
            for ns in (self.node, self.pod, self.coredns):
                self.until(lambda: self.ip(ns, "-6", "addr", "show", "tentative").stdout, "",
                           5.0)

    # -- plumbing
    def run(self, ns, *argv, check=True, stdin=None):
        p = subprocess.run(harness.netns_argv(ns, argv), capture_output=True,
                           text=True, timeout=10, input=stdin)
        if check and p.returncode != 0:
            raise AssertionError("%s: %s" % (" ".join(argv), p.stderr.strip()))
        return p

    def ip(self, ns, *args):
        return self.run(None, "ip", "-n", ns, *args)

    def nft(self, ns, script):
        return self.run(ns, "nft", "-f", "-", stdin=script)

    def wire(self, ns):
        """A veth pair from the node to ns, both ends up; the node's end."""
        inside, outside = "eth0", ("v" + ns.split("-")[1] + ns.split("-")[-1])[:15]
        self.ip(self.node, "link", "add", outside, "type", "veth", "peer",
                "name", inside, "netns", ns)
        self.ip(self.node, "link", "set", outside, "up")
        self.ip(ns, "link", "set", inside, "up")
        return outside

    def address(self, family, ns, outside, addr, gateway):
        """addr on ns's end of the veth whose node end is outside, gateway
        on the node's, ns routing everything of the family via it."""
        prefix = "/%d" % family.prefix
        self.ip(self.node, family.ip, "addr", "add", gateway + prefix, "dev", outside,
                *family.address_flags)
        self.ip(ns, family.ip, "addr", "add", addr + prefix, "dev", "eth0", *family.address_flags)
        self.ip(ns, family.ip, "route", "add", "default", "via", gateway)

    def helper(self, ns, script, *args):
        """A Python helper in ns that prints "ready" once set up."""
        p = harness.track_process(subprocess.Popen(
            harness.netns_argv(ns, [sys.executable, "-c", script] + list(args)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
        line = p.stdout.readline().strip()
        assert line == "ready", "helper in %s: %r %s" % (ns, line, p.stderr.read()
                                                          if p.poll() is not None else "")
        return p

    # -- localdns
    def config(self, **nftables):
        cfg = self.env.config(port=53, addresses=[f.link for f in self.families],
                              listen={"workers": 1})
        cfg["interface"] = {"manage": True, "kind": "loopback"}
        cfg["nftables"] = dict({"enabled": True, "table": "localdns",
                                "intercept": [f.cluster_ip for f in self.families],
                                "reassert_interval": "2s"}, **nftables)
        return cfg

    def config_with_api(self, api, **nftables):
        """config() with Kubernetes on: node node-a of api, the fake API server."""
        cfg = self.config(**nftables)
        cfg["kubernetes"] = {"enabled": True, "node_name": "node-a",
                             "kubeconfig": api.kubeconfig(os.path.join(self.env.tmp,
                                                                       "kubeconfig"))}
        return cfg

    def start(self, config=None, wait=True, **nftables):
        """localdns in the node namespace; with wait, until it takes DNS
        (before that, the fallback answers, which wait_ready cannot tell)."""
        d = self.env.start(config=config or self.config(**nftables),
                           netns=self.node, wait=wait)
        if wait:
            self.until(lambda: CAPTURING in d.stderr(), True, 10.0)
        return d

    # -- observations
    def ask(self, server, *opts, ns=None):
        """The A records for NAME asked from the pod (or ns) to server."""
        r = harness.dig(server, 53, NAME, "A", *opts, timeout=1,
                        netns=ns or self.pod)
        return r.rdatas("A") if r.status else None

    def until(self, what, want, seconds):
        """Poll what() until it returns want; the seconds it took."""
        t0 = time.monotonic()
        got = None
        while time.monotonic() - t0 < seconds:
            got = what()
            if got == want:
                return time.monotonic() - t0
            time.sleep(0.05)
        raise AssertionError("after %.1fs still %r, wanted %r" % (seconds, got, want))

    def tables(self):
        out = self.run(self.node, "nft", "list", "tables").stdout
        return sorted(l.strip() for l in out.splitlines() if l.strip())

    def lo_addresses(self, family=IPV4):
        out = self.ip(self.node, family.ip, "-o", "addr", "show", "dev", "lo").stdout
        return sorted(l.split()[3] for l in out.splitlines())

    def conntrack(self, address):
        family = ["-f", "ipv6"] if ":" in address else []
        p = self.run(self.node, "conntrack", "-L", *family, "-d", address, check=False)
        return [l for l in p.stdout.splitlines() if "dport=53" in l]

    def flush_conntrack(self):
        self.run(self.node, "conntrack", "-F", check=False)
        self.run(self.node, "conntrack", "-F", "-f", "ipv6", check=False)

    def fallback_map(self):
        """The endpoints in our fallback4 map (none when it is absent)."""
        p = self.run(self.node, "nft", "list", "map", "inet", "localdns", "fallback4",
                     check=False)
        return sorted(w.rstrip(",}") for w in p.stdout.split()
                      if w.count(".") == 3 and w[0].isdigit())

    def api_server(self):
        """A fake Kubernetes API server listening on 127.0.0.1 inside the
        node namespace (only the thread that binds it enters the namespace),
        so localdns there can reach it and nothing leaves the namespaces."""
        api = F.FakeAPI(control_port=False)
        harness.run_in_netns(self.node, api.start)
        return api


OURS = ["10.96.0.10/32", "127.0.0.1/8", "169.254.20.10/32"]
BARE = ["127.0.0.1/8"]


def assert_answered_locally_without_conntrack(n, d, family):
    """Every address of every family of n answered by localdns from the
    pod over UDP and TCP; family's addresses with no conntrack entry, for
    the pod and for a host-network client on the node (output hook)."""
    n.flush_conntrack()
    for f in n.families:
        for server in (f.link, f.cluster_ip):
            for transport in ("+notcp", "+tcp"):
                got = n.ask(server, transport)
                assert got == LOCAL_ANSWER, "%s %s: %r\n%s" % (server, transport, got,
                                                               d.tail())
    for server in (family.link, family.cluster_ip):
        assert n.conntrack(server) == [], n.conntrack(server)
    assert n.ask(family.cluster_ip, ns=n.node) == LOCAL_ANSWER
    assert n.conntrack(family.cluster_ip) == [], n.conntrack(family.cluster_ip)


def assert_kill9_fails_open(n, d, family):
    """After kill -9 of d, family's addresses answered by the stand-in
    CoreDNS: for pods at once (the socket check fails, kube-proxy's DNAT
    takes the ClusterIP, our fallback map the link address), for
    host-network clients once the heartbeat elements expire (1 s)."""
    d.proc.kill()
    d.proc.wait(2)
    took = n.until(lambda: n.ask(family.cluster_ip), STANDIN_ANSWER, 1.0)
    assert n.ask(family.cluster_ip, "+tcp") == STANDIN_ANSWER
    assert n.ask(family.link) == STANDIN_ANSWER and n.ask(family.link, "+tcp") == STANDIN_ANSWER
    # The fallback goes through conntrack, as it must for DNAT: the checks
    # that find no entries while localdns runs are not vacuous.
    assert n.conntrack(family.cluster_ip), "fallback traffic to %s was not tracked" % (
        family.cluster_ip)
    n.until(lambda: n.ask(family.cluster_ip, ns=n.node), STANDIN_ANSWER, 2.0)
    assert took < 1.0


def test_node_answers_both_addresses_without_conntrack(env):
    n = Node(env)
    d = n.start()
    assert n.lo_addresses() == OURS, n.lo_addresses()
    assert_answered_locally_without_conntrack(n, d, IPV4)


def test_node_kill9_fails_open_and_restart_takes_over(env):
    n = Node(env)
    d = n.start(fallback_endpoints=[COREDNS])
    assert n.ask(CLUSTER_IP) == LOCAL_ANSWER
    assert_kill9_fails_open(n, d, IPV4)
    # A restart over the leftovers (our table, marked as ours) needs no cleanup.
    assert 'comment "managed by localdns"' in n.run(
        n.node, "nft", "list", "table", "inet", "localdns").stdout
    n.start(fallback_endpoints=[COREDNS])
    for server in (LINK, CLUSTER_IP):
        assert n.ask(server) == LOCAL_ANSWER and n.ask(server, "+tcp") == LOCAL_ANSWER
    assert n.ask(CLUSTER_IP, ns=n.node) == LOCAL_ANSWER


test_node_kill9_fails_open_and_restart_takes_over.timeout = 30


def kube_dns(*endpoints):
    """kube-system/kube-dns and its slice; endpoints: (address, ready)."""
    return [F.service("kube-system", "kube-dns", cluster_ips=CLUSTER_IP,
                      ports=[{"name": "dns", "port": 53, "protocol": "UDP"}]),
            F.endpointslice("kube-system", "kube-dns", name="kube-dns-abc",
                            endpoints=[F.endpoint(a, ready=r) for a, r in endpoints],
                            ports=[F.endpoint_port(53, name="dns", protocol="UDP")])]


def test_node_fallback_follows_the_kube_dns_endpoints(env):
    n = Node(env)
    api = n.api_server()
    try:
        api.apply(*kube_dns((COREDNS, True), ("10.200.2.3", False)))
        cfg = n.config_with_api(api, fallback_endpoints=["10.200.2.77"])
        d = n.start(config=cfg)
        # Only the ready endpoint, in place of the static list.
        n.until(n.fallback_map, [COREDNS], 3.0)
        assert "source=kubernetes endpoints=" + COREDNS in d.stderr(), d.tail()
        # Readiness flips are followed; none ready: back to the static list.
        api.apply(kube_dns((COREDNS, True), ("10.200.2.3", True))[1])
        n.until(n.fallback_map, [COREDNS, "10.200.2.3"], 3.0)
        api.apply(kube_dns((COREDNS, False))[1])
        n.until(n.fallback_map, ["10.200.2.77"], 3.0)
        api.apply(kube_dns((COREDNS, True))[1])
        n.until(n.fallback_map, [COREDNS], 3.0)
        # With localdns gone, the link-local address reaches the live endpoint.
        d.proc.kill()
        d.proc.wait(2)
        n.until(lambda: n.ask(LINK), STANDIN_ANSWER, 1.0)
        assert n.ask(LINK, "+tcp") == STANDIN_ANSWER
    finally:
        api.stop()


test_node_fallback_follows_the_kube_dns_endpoints.timeout = 40


def test_node_noendpoints_watches_only_the_kube_dns_endpointslices(env):
    # cluster.noendpoints drops endpoint names; the fallback DNAT still follows
    # kube-dns, whose slices alone are watched (its namespace, its label).
    n = Node(env)
    api = n.api_server()
    try:
        api.apply(*kube_dns((COREDNS, True)))
        api.apply(F.namespace("shop"), F.service("shop", "web", headless=True),
                  F.endpointslice("shop", "web", name="web-1", endpoints=[F.endpoint("10.1.0.1")]))
        cfg = n.config_with_api(api, fallback_endpoints=["10.200.2.77"])
        cfg["cluster"] = {"noendpoints": True}
        d = n.start(config=cfg)
        n.until(n.fallback_map, [COREDNS], 3.0)
        api.apply(kube_dns((COREDNS, False), ("10.200.2.3", True))[1])
        n.until(n.fallback_map, ["10.200.2.3"], 3.0)
        reqs = api.requests("endpointslices")
        assert reqs and all(
            r.path == "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices" and
            r.query.get("labelSelector") == "kubernetes.io/service-name=kube-dns"
            for r in reqs), reqs
        r = harness.dig(LINK, 53, "web.shop.svc.cluster.local", "A", timeout=1, netns=n.pod)
        assert r.status == "NXDOMAIN", r.text
        assert "endpointslices=kube-system/kube-dns" in d.stderr(), d.tail()
    finally:
        api.stop()


test_node_noendpoints_watches_only_the_kube_dns_endpointslices.timeout = 40


def test_node_link_local_without_endpoints_is_not_redirected(env):
    n = Node(env)
    d = n.start()
    d.proc.kill()
    d.proc.wait(2)
    n.until(lambda: n.ask(CLUSTER_IP), STANDIN_ANSWER, 1.0)
    # No endpoints known: nothing to send it to, so no answer (refused port).
    assert n.ask(LINK) is None


def ctl_node(env, n, d):
    """`localdns ctl node`: its lines, and {address: "open" | "closed"} from
    its if_died lines (what pods' DNS to each address would do)."""
    p = env.run(["ctl", "--socket", d.ctl_path, "node"])
    assert p.returncode == 0, p.stdout + p.stderr
    fate = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^if_died (\S+): (pods fail open|fails closed)", line)
        if m:
            fate[m.group(1)] = "open" if m.group(2) == "pods fail open" else "closed"
    return p.stdout, fate


def start_with_ctl(env, n, **nftables):
    cfg = n.config(**nftables)
    cfg["control"] = {"socket": os.path.join(env.tmp, "ctl-%d.sock" % next(_ids))}
    d = n.start(config=cfg)
    d.ctl_path = cfg["control"]["socket"]
    return d


def test_node_ctl_node_tells_what_a_crash_would_do_and_is_right(env):
    # What `ctl node` predicts for each address is what happens after kill -9.
    for endpoints, want in (([COREDNS], {LINK: "open", CLUSTER_IP: "open"}),
                            ([], {LINK: "closed", CLUSTER_IP: "open"})):
        n = Node(env)
        d = start_with_ctl(env, n, fallback_endpoints=endpoints)
        out, fate = ctl_node(env, n, d)
        assert fate == want, out
        assert re.search(r"(?m)^link lo \(loopback\) checked [0-9.]+s ago: in place$", out), out
        assert re.search(r"(?m)^table inet localdns checked [0-9.]+s ago: as planned$", out), out
        m = re.search(r"(?m)^heartbeat renewed ([0-9.]+)s ago$", out)
        assert m and float(m.group(1)) < 1.0, out
        assert ("fallback %s (nftables.fallback_endpoints)" % COREDNS if endpoints
                else "fallback none") in out, out
        assert "address %s listen\naddress %s intercepted\n" % (LINK, CLUSTER_IP) in out, out
        assert re.search(r"(?m)^if_died %s: pods fail open at once \(kube-proxy's DNAT to the "
                         r"Service\); host-network clients within [0-9.]+s" % CLUSTER_IP,
                         out), out
        assert "at_exit left in place" in out, out
        # Someone deletes the table: the rebuild shows in the repairs line.
        n.run(n.node, "nft", "delete", "table", "inet", "localdns")
        n.until(lambda: re.search(r"(?m)^repairs link 0 table [1-9]",
                                  ctl_node(env, n, d)[0]) is not None, True, 3.0)
        d.proc.kill()
        d.proc.wait(2)
        for address, what in fate.items():
            if what == "open":
                n.until(lambda: n.ask(address), STANDIN_ANSWER, 1.0)
            else:
                assert n.ask(address) is None, address


test_node_ctl_node_tells_what_a_crash_would_do_and_is_right.timeout = 40


def test_node_repairs_table_and_addresses_within_a_second(env):
    n = Node(env)
    cfg = n.config()
    cfg["metrics"] = {"listen": "127.0.0.1:9253"}  # inside the node's namespace
    d = n.start(config=cfg)
    n.run(n.node, "nft", "delete", "table", "inet", "localdns")
    n.until(lambda: "table inet localdns" in n.tables(), True, 1.0)
    n.ip(n.node, "addr", "del", CLUSTER_IP + "/32", "dev", "lo")
    n.until(n.lo_addresses, OURS, 1.0)
    n.run(n.node, "nft", "add", "rule", "inet", "localdns", "prerouting", "accept")
    n.until(lambda: any(l.strip() == "accept" for l in n.run(
        n.node, "nft", "list", "chain", "inet", "localdns", "prerouting").stdout.splitlines()),
        False, 1.0)
    n.run(n.node, "nft", "delete", "element", "inet", "localdns", "local4",
          "{ %s }" % CLUSTER_IP)
    n.until(lambda: CLUSTER_IP in n.run(n.node, "nft", "list", "set", "inet", "localdns",
                                        "local4").stdout, True, 1.0)
    assert n.ask(CLUSTER_IP) == LOCAL_ANSWER
    assert n.conntrack(CLUSTER_IP) == []
    metrics = n.run(n.node, sys.executable, "-c", "import urllib.request as u; print(u.urlopen("
                    "'http://127.0.0.1:9253/metrics', timeout=5).read().decode(), end='')").stdout
    assert 'localdns_node_repairs_total{kind="link"} 1\n' in metrics, metrics
    assert re.search(r'(?m)^localdns_node_repairs_total\{kind="table"\} [1-9]', metrics), metrics
    rc, _ = d.stop()
    assert rc == 0
    log = d.stderr()
    assert "table inet localdns is missing" in log and "link_repairs=1" in log, log


def test_node_health_fails_while_the_monitor_is_stuck(env):
    # The monitor thread repairs links and rules and renews the heartbeat
    # set; /health fails when it stops turning, while serving goes on.
    n = Node(env)
    cfg = n.config()
    cfg["health"] = {"listen": "127.0.0.1:9254"}  # inside the node's namespace
    d = n.start(config=cfg)

    def health():
        return n.run(n.node, sys.executable, "-c", HEALTH_PROBE, check=False).stdout.strip()
    assert health() == "200 ok"
    with harness.StoppedThread(harness.thread_id(d.proc.pid, "node")):
        n.until(lambda: health().startswith("503"), True, 10.0)
        assert "the node monitor has not gone round its loop" in health(), health()
        assert n.ask(LINK) == LOCAL_ANSWER
    n.until(health, "200 ok", 5.0)


# A TCP client that connects first and asks later: argv[1] the server; a
# line on stdin sends the query for NAME, and it prints the A records (or
# the error) of the answer.
LATE_QUERY = r"""
import socket, struct, sys
s = socket.create_connection((sys.argv[1], 53), timeout=3)
print("ready", flush=True)
sys.stdin.readline()
q = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"".join(
    bytes([len(l)]) + l.encode() for l in sys.argv[2].split(".")) + b"\0\0\1\0\1"
try:
    s.sendall(struct.pack("!H", len(q)) + q)
    head = s.recv(2)
    n = struct.unpack("!H", head)[0]
    m = b""
    while len(m) < n:
        m += s.recv(n - len(m))
    print(socket.inet_ntoa(m[-4:]), flush=True)
except OSError as e:
    print("error", e.errno, flush=True)
"""


def test_node_tcp_connections_stay_where_their_syn_went(env):
    # Capture switches off while connections to localdns are open (the
    # node monitor held: the heartbeat expires, the workers still answer),
    # and on again while connections to CoreDNS are open: every connection
    # is answered by whoever took its SYN, from pods and from the host.
    n = Node(env)
    d = n.start(fallback_endpoints=[COREDNS])
    monitor = harness.thread_id(d.proc.pid, "node")

    def connect(ns, server):
        return n.helper(ns, LATE_QUERY, server, NAME)

    def answer(client):
        client.stdin.write("go\n")
        client.stdin.flush()
        return [client.stdout.readline().strip()]
    ours = [connect(ns, server) for ns in (n.pod, n.node) for server in (LINK, CLUSTER_IP)]
    with harness.StoppedThread(monitor):
        n.until(lambda: n.ask(CLUSTER_IP), STANDIN_ANSWER, 2.0)  # new flows: CoreDNS
        for client in ours:
            assert answer(client) == LOCAL_ANSWER, "a connection localdns took moved"
        theirs = [connect(ns, server) for ns in (n.pod, n.node) for server in (LINK, CLUSTER_IP)]
    n.until(lambda: n.ask(CLUSTER_IP), LOCAL_ANSWER, 2.0)        # capture is back
    for client in theirs:
        assert answer(client) == STANDIN_ANSWER, "a connection CoreDNS took moved"


test_node_tcp_connections_stay_where_their_syn_went.timeout = 40


def test_node_takes_dns_only_once_ready(env):
    # Before the first Kubernetes sync localdns would answer cluster names
    # with SERVFAIL: until then its sockets are held and DNS fails open.
    n = Node(env)
    api = n.api_server()
    try:
        api.apply(*kube_dns((COREDNS, True)))
        api.forbid("services")
        cfg = n.config_with_api(api)
        d = n.start(config=cfg, wait=False)
        n.until(lambda: "msg=listening" in d.stderr(), True, 10.0)
        for _ in range(3):
            for ns in (n.pod, n.node):
                assert n.ask(CLUSTER_IP, ns=ns) == STANDIN_ANSWER
                assert n.ask(CLUSTER_IP, "+tcp", ns=ns) == STANDIN_ANSWER
            time.sleep(0.2)
        assert CAPTURING not in d.stderr()
        api.allow()
        n.until(lambda: CAPTURING in d.stderr(), True, 30.0)
        for ns in (n.pod, n.node):
            assert n.ask(CLUSTER_IP, ns=ns) == LOCAL_ANSWER
            assert n.ask(LINK, "+tcp", ns=ns) == LOCAL_ANSWER
    finally:
        api.stop()


test_node_takes_dns_only_once_ready.timeout = 60


HEALTH_PROBE = """
import urllib.request, urllib.error
try:
    r = urllib.request.urlopen("http://127.0.0.1:9254/health", timeout=5)
    print(r.status, r.read().decode().strip())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
"""


def test_node_sigterm_teardown_and_cleanup_leave_nothing(env):
    n = Node(env)
    d = n.start(teardown=True)
    assert "table inet localdns" in n.tables()
    rc, _ = d.stop()
    assert rc == 0, d.tail()
    assert n.tables() == ["table ip kubeproxy"], n.tables()
    assert n.lo_addresses() == BARE, n.lo_addresses()
    # Without teardown everything stays (it fails open); cleanup removes it.
    d = n.start()
    assert d.stop()[0] == 0
    assert "table inet localdns" in n.tables() and n.lo_addresses() == OURS
    p = n.run(n.node, env.binary, "cleanup", "--config", d.config_path, check=False)
    assert p.returncode == 0, p.stderr
    assert n.tables() == ["table ip kubeproxy"], n.tables()
    assert n.lo_addresses() == BARE, n.lo_addresses()
    # Cleanup on a clean node is fine too.
    p = n.run(n.node, env.binary, "cleanup", "--config", d.config_path, check=False)
    assert p.returncode == 0, p.stderr


NOT_OURS = "exists and was not made by localdns"


def refused_at_start(n, config=None, **nftables):
    """Start localdns, which must exit 1 at once."""
    d = n.start(config=config, wait=False, **nftables)
    try:
        d.proc.wait(5)
    except subprocess.TimeoutExpired:
        raise AssertionError("localdns kept running: " + d.tail())
    assert d.proc.returncode == 1, d.tail()
    return d


def test_node_another_programs_table_is_refused_before_the_node_changes(env):
    n = Node(env)
    owner = n.helper(n.node, OWNED_TABLE, "localdns")
    before = n.run(n.node, "nft", "list", "ruleset").stdout
    log = refused_at_start(n).stderr()
    assert "table inet localdns " + NOT_OURS in log, log
    assert n.run(n.node, "nft", "list", "ruleset").stdout == before
    assert n.lo_addresses() == BARE, n.lo_addresses()
    owner.stdin.close()
    owner.wait(5)
    harness.untrack_process(owner)


FIREWALL = """
table inet filter {
  chain input { type filter hook input priority filter; policy accept;
    tcp dport 22 accept comment "ssh"
  }
}"""


def test_node_a_typo_naming_the_firewall_leaves_it_alone(env):
    # nftables.table: filter must not wipe the node's firewall: not at
    # start, not on uninstall (localdns cleanup).
    n = Node(env)
    n.nft(n.node, FIREWALL)
    before = n.run(n.node, "nft", "list", "ruleset").stdout
    d = refused_at_start(n, table="filter")
    log = d.stderr()
    assert "nftables.table: table inet filter " + NOT_OURS + " (it has a chain input)" in log, log
    assert "set nftables.table to a name no other program uses" in log, log
    assert n.run(n.node, "nft", "list", "ruleset").stdout == before
    assert n.lo_addresses() == BARE, n.lo_addresses()
    p = n.run(n.node, env.binary, "cleanup", "--config", d.config_path, check=False)
    assert p.returncode == 1 and NOT_OURS in p.stderr, (p.returncode, p.stderr)
    assert n.run(n.node, "nft", "list", "ruleset").stdout == before


def test_node_a_table_swapped_in_under_our_name_is_never_replaced(env):
    # Someone replaces our table with one of their own while we run: the
    # monitor does not rebuild over it, and a reload that would change the
    # table fails and keeps the running config.
    n = Node(env)
    d = n.start()
    # One transaction, or the monitor would put ours back in between.
    theirs = """
        delete table inet localdns
        table inet localdns {
          chain input { type filter hook input priority filter; policy accept;
            udp dport 5353 accept comment "mdns"
          }
        }"""
    n.nft(n.node, theirs)
    n.until(lambda: NOT_OURS in d.stderr(), True, 3.0)
    cfg = n.config()
    cfg["listen"]["addresses"] = [LINK, "169.254.20.11"]
    mark = d.reload(cfg)
    n.until(lambda: "reload failed" in d.stderr()[mark:], True, 3.0)
    assert NOT_OURS in d.stderr()[mark:], d.tail()
    assert 'comment "mdns"' in n.run(n.node, "nft", "list", "table", "inet", "localdns").stdout
    assert n.lo_addresses() == OURS, n.lo_addresses()
    assert n.ask(LINK) == LOCAL_ANSWER and d.alive()


# A table as a localdns from before tables were marked left it: no table
# comment, only our chains and rules with their "localdns <fingerprint>".
LEGACY_TABLE = """
table inet localdns {
  chain prerouting { type filter hook prerouting priority raw; policy accept;
    ip daddr 169.254.20.10 udp dport 53 notrack comment "localdns 0123abcd"
  }
}"""


def test_node_a_table_left_by_an_older_localdns_is_adopted(env):
    n = Node(env)
    n.nft(n.node, LEGACY_TABLE)
    n.start()
    table = n.run(n.node, "nft", "list", "table", "inet", "localdns").stdout
    assert 'comment "managed by localdns"' in table and "0123abcd" not in table, table
    assert n.ask(CLUSTER_IP) == LOCAL_ANSWER


def test_node_dummy_link_or_a_clear_way_out(env):
    n = Node(env)
    cfg = n.config(teardown=True)
    cfg["interface"] = {"manage": True, "kind": "dummy", "name": "localdns"}
    d = n.start(config=cfg, wait=False)
    try:
        d.wait_ready()
    except harness.DaemonError:
        # This kernel has no dummy link type: the error names the way out.
        d.proc.wait(5)
        assert d.proc.returncode == 1
        assert "set interface.kind: loopback" in d.stderr(), d.tail()
        assert n.tables() == ["table ip kubeproxy"], n.tables()
        return
    link = n.ip(n.node, "-d", "link", "show", "localdns").stdout
    assert "dummy" in link and "UP" in link, link
    assert n.ask(CLUSTER_IP) == LOCAL_ANSWER
    assert d.stop()[0] == 0
    assert n.run(n.node, "ip", "link", "show", "localdns", check=False).returncode != 0



# Holds every packet NFQUEUE queue argv[1] gives it until a line comes on
# stdin, then lets them all through, and every later one at once (raw
# nfnetlink_queue: this kernel has no nft queue expression, but xt_NFQUEUE).
# Prints "ready" once bound, "held N" as it holds the Nth, "released N".
QUEUE_HOLDER = r'''
import select, socket, struct, sys
def attr(t, data):
    a = struct.pack("=HH", 4 + len(data), t) + data
    return a + b"\0" * (-len(a) % 4)
def msg(mtype, flags, payload):
    return struct.pack("=IHHII", 16 + len(payload), mtype, flags, 0, 0) + payload
REQ, ACK, QUEUE = 1, 4, 3 << 8                       # NFNL_SUBSYS_QUEUE
PACKET, VERDICT, CONFIG, NF_ACCEPT = 0, 1, 2, 1
head = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(int(sys.argv[1])))
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
s.bind((0, 0))
for a in (attr(1, struct.pack("!BBH", 1, 0, 0)),       # NFQA_CFG_CMD: bind
          attr(2, struct.pack("!IB", 0, 1))):          # NFQA_CFG_PARAMS: metadata only
    s.send(msg(QUEUE | CONFIG, REQ | ACK, head + a))
    err = struct.unpack("=i", s.recv(65536)[16:20])[0]
    assert err == 0, err
def packet_ids(data):
    while len(data) >= 16:
        length, mtype = struct.unpack("=IH", data[:6])
        at = 20
        while mtype == QUEUE | PACKET and at + 4 <= length:
            alen, atype = struct.unpack("=HH", data[at:at + 4])
            if atype & 0x7fff == 1:                        # NFQA_PACKET_HDR
                yield struct.unpack("!I", data[at + 4:at + 8])[0]
            at += (alen + 3) & ~3
        data = data[(length + 3) & ~3:]
def accept(packet):
    s.send(msg(QUEUE | VERDICT, REQ, head + attr(2, struct.pack("!II", NF_ACCEPT, packet))))
held, holding = [], True
print("ready", flush=True)
while True:
    ready = select.select([s, sys.stdin], [], [])[0]
    if sys.stdin in ready:
        if not sys.stdin.readline():
            break
        for packet in held:
            accept(packet)
        print("released %d" % len(held), flush=True)
        held, holding = [], False
    if s in ready:
        for packet in packet_ids(s.recv(65536)):
            if holding:
                held.append(packet)
                print("held %d" % len(held), flush=True)
            else:
                accept(packet)
'''

# Sends argv[2] queries for NAME to argv[1]:53, each from a UDP socket of its
# own connected there (as glibc sends one), prints "sent", then, once each
# is answered or refused or argv[3] seconds have passed, how they ended.
ONE_SOCKET_EACH = r'''
import errno, json, select, socket, struct, sys, time
server, n, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
name = b"".join(bytes([len(l)]) + l.encode() for l in sys.argv[4].split(".")) + b"\0"
socks = []
for i in range(n):
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.connect((server, 53))
    c.send(struct.pack("!HHHHHH", i, 0x0100, 1, 0, 0, 0) + name + b"\0\1\0\1")
    socks.append(c)
print("sent", flush=True)
ended = {"answered": 0, "refused": 0, "other": 0}
deadline = time.monotonic() + wait
while socks and time.monotonic() < deadline:
    for c in select.select(socks, [], [], 0.1)[0]:
        try:
            c.recv(4096)
            ended["answered"] += 1
        except OSError as e:
            ended["refused" if e.errno == errno.ECONNREFUSED else "other"] += 1
        socks.remove(c)
ended["unanswered"] = len(socks)
print(json.dumps(ended), flush=True)
'''

# A UDP server on argv[1]:53 that answers nothing, and says "asked" for each query.
SILENT = r'''
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 53))
print("ready", flush=True)
while True:
    s.recv(4096)
    print("asked", flush=True)
'''

HANDED_OVER = "handed the sockets over"
KEEPING_OPEN = "keeping the listeners open for queries already on their way"

# Opens argv[2] TCP connections to argv[1]:53 at once (their SYNs leave
# together), prints "sent", then on each that connects asks NAME (argv[4])
# as glibc does after a truncated answer, and once each is answered, refused
# (a reset) or argv[3] seconds have passed, prints how they ended.
ONE_CONNECTION_EACH = r'''
import errno, json, select, socket, struct, sys, time
server, n, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
name = b"".join(bytes([len(l)]) + l.encode() for l in sys.argv[4].split(".")) + b"\0"
connecting, asked = [], {}
for i in range(n):
    c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    c.setblocking(False)
    assert c.connect_ex((server, 53)) == errno.EINPROGRESS
    connecting.append(c)
print("sent", flush=True)
ended = {"answered": 0, "refused": 0, "other": 0}
deadline = time.monotonic() + wait
while (connecting or asked) and time.monotonic() < deadline:
    readable, writable, _ = select.select(list(asked), connecting, [], 0.1)
    for c in writable:
        connecting.remove(c)
        err = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            ended["refused" if err == errno.ECONNREFUSED else "other"] += 1
            continue
        q = struct.pack("!HHHHHH", len(asked), 0x0100, 1, 0, 0, 0) + name + b"\0\1\0\1"
        c.send(struct.pack("!H", len(q)) + q)
        asked[c] = b""
    for c in readable:
        try:
            data = c.recv(4096)
        except OSError as e:
            data = None
            ended["refused" if e.errno == errno.ECONNRESET else "other"] += 1
        if data:
            asked[c] += data
            if len(asked[c]) < 2 or len(asked[c]) < 2 + struct.unpack("!H", asked[c][:2])[0]:
                continue
            ended["answered"] += 1
        elif data is not None:
            ended["other"] += 1  # closed without an answer
        del asked[c]
ended["unanswered"] = len(connecting) + len(asked)
print(json.dumps(ended), flush=True)
'''


def with_a_silent_upstream(n):
    """n.config() falling back to the stand-in CoreDNS, with external names
    forwarded to an upstream in the coredns namespace that never answers
    (SILENT, which says "asked" for each query), and that upstream."""
    silent = "10.200.2.9"
    n.ip(n.coredns, "addr", "add", silent + "/24", "dev", "eth0")
    upstream = n.helper(n.coredns, SILENT, silent)
    cfg = n.config(fallback_endpoints=[COREDNS])
    cfg["upstream"] = {"servers": ["%s:53" % silent], "timeout": "5s"}
    return cfg, upstream


def one_socket_each(n, server, count, name, wait=3):
    """ONE_SOCKET_EACH from the pod, once it has sent its queries."""
    p = harness.track_process(subprocess.Popen(
        harness.netns_argv(n.pod, [sys.executable, "-c", ONE_SOCKET_EACH, server, str(count),
                                   str(wait), name]), stdout=subprocess.PIPE, text=True))
    assert p.stdout.readline().strip() == "sent"
    return p


def keep_in_settle(n, upstream):
    """A pod asks an external name, which the silent upstream is asked for:
    the localdns that took it, stopped, waits in upstream_settle (500 ms)
    for its answer, its sockets open."""
    one_socket_each(n, CLUSTER_IP, 1, "ext.example")
    assert upstream.stdout.readline().strip() == "asked"


def udp_peers(n, pid):
    """Each UDP socket of process pid on port 53 in the node namespace: its
    address and the one it is connected to ("*": none)."""
    out = n.run(n.node, "ss", "-Huanp").stdout
    return {f[3]: "*" if f[4].endswith(":*") else f[4]
            for f in (line.split() for line in out.splitlines())
            if ",pid=%d," % pid in f[-1] and f[3].endswith(":53")}


def one_connection_each(n, server, count, name, wait=3):
    """ONE_CONNECTION_EACH from the pod, once its SYNs have left."""
    p = harness.track_process(subprocess.Popen(
        harness.netns_argv(n.pod, [sys.executable, "-c", ONE_CONNECTION_EACH, server,
                                   str(count), str(wait), name]),
        stdout=subprocess.PIPE, text=True))
    assert p.stdout.readline().strip() == "sent"
    return p


def until_logged(d, line):
    """Until d logs line (polled closely: what follows it comes soon)."""
    t0 = time.monotonic()
    while line not in d.stderr():
        assert time.monotonic() - t0 < 5, d.tail()
        time.sleep(0.005)


def hold_then_stop(n, d, rule, late, client):
    """Hold late packets the rule (iptables INPUT, the pod's to the link
    address) sends to NFQUEUE 7: between the raw prerouting hook, where the
    heartbeat sent them to localdns, and the socket lookup. Then SIGTERM d,
    let them go once it has taken the heartbeat out, and return how the
    client's queries ended."""
    holder = n.helper(n.node, QUEUE_HOLDER, "7")
    n.run(n.node, "iptables", "-w", "-A", "INPUT", "-s", IPV4.pod, "-d", LINK, *rule,
          "-j", "NFQUEUE", "--queue-num", "7")
    p = client()
    for i in range(late):
        assert holder.stdout.readline().strip() == "held %d" % (i + 1)
    d.proc.send_signal(signal.SIGTERM)
    until_logged(d, KEEPING_OPEN)
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "released %d" % late
    ended = json.loads(p.stdout.readline())
    assert d.proc.wait(5) == 0, d.tail()
    return ended


def test_node_sigterm_refuses_no_query_the_heartbeat_let_in(env):
    # A datagram the ruleset sent to localdns's socket (untracked, by the
    # heartbeat) just before SIGTERM took the heartbeat out may meet that
    # socket a moment later, its softirq held up on a busy node. Alone on
    # the node, localdns must still answer it, not refuse it: glibc gives
    # up on "port unreachable", which a socket connected to its own
    # address, or a closed one, gets it. Here that moment lasts as long as
    # the test wants: NFQUEUE holds the pod's datagrams to the link address
    # and lets them go once localdns has taken the heartbeat out, well
    # inside the 200 ms it leaves its sockets as they are after the leave.
    n = Node(env)
    d = n.start(fallback_endpoints=[COREDNS])
    # Every refusal counted: no rate limit on the node's ICMP errors.
    n.run(n.node, "sysctl", "-qw", "net.ipv4.icmp_ratelimit=0",
          "net.ipv4.icmp_msgs_per_sec=100000", "net.ipv4.icmp_msgs_burst=10000")
    late = 20
    ended = hold_then_stop(n, d, ["-p", "udp", "--dport", "53"], late,
                           lambda: one_socket_each(n, LINK, late, NAME))
    assert HANDED_OVER in d.stderr(), d.tail()
    assert ended == {"answered": late, "refused": 0, "other": 0, "unanswered": 0}, (
        "%r\n%s" % (ended, d.tail(8)))


def test_node_sigterm_resets_no_connection_the_heartbeat_let_in(env):
    # The same for TCP, which glibc asks over after a truncated answer: a
    # SYN the heartbeat sent to localdns just before it went (the ruleset
    # notes the connection then, so the rest of it follows the SYN) must
    # find the listener still there, not closed (a reset), and be answered.
    n = Node(env)
    d = n.start(fallback_endpoints=[COREDNS])
    late = 10
    ended = hold_then_stop(n, d, ["-p", "tcp", "--dport", "53", "--syn"], late,
                           lambda: one_connection_each(n, LINK, late, NAME))
    assert ended == {"answered": late, "refused": 0, "other": 0, "unanswered": 0}, (
        "%r\n%s" % (ended, d.tail(8)))


def test_node_sigterm_beside_another_localdns_steers_its_udp_sockets_away_at_once(env):
    # In a surge upgrade both processes bind the link address with
    # SO_REUSEPORT. At SIGTERM the old one leaves the heartbeat to the new
    # one's token and connects its UDP sockets to their own address, which
    # the kernel's choice then skips: every new datagram goes to the new
    # process. Held stopped right after its hand-over, the old one answers
    # nothing, so a query the kernel still gave it would go unanswered.
    n = Node(env)
    cfg, upstream = with_a_silent_upstream(n)
    old = n.start(cfg)
    keep_in_settle(n, upstream)           # before the new one binds: the old one has it
    new = n.start(cfg)
    old.proc.send_signal(signal.SIGTERM)
    until_logged(old, HANDED_OVER)
    os.kill(old.proc.pid, signal.SIGSTOP)
    try:
        peers = udp_peers(n, old.proc.pid)
        ended = json.loads(one_socket_each(n, LINK, 20, NAME, wait=1).stdout.readline())
    finally:
        os.kill(old.proc.pid, signal.SIGCONT)
    assert old.proc.wait(5) == 0, old.tail()
    assert KEEPING_OPEN not in old.stderr(), old.tail()
    assert peers == {LINK + ":53": LINK + ":53", CLUSTER_IP + ":53": CLUSTER_IP + ":53"}, peers
    assert ended == {"answered": 20, "refused": 0, "other": 0, "unanswered": 0}, (
        "%r\n%s" % (ended, new.tail(5)))
