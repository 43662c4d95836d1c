"""Live reload: the config file watched (kubelet's ConfigMap symlink swap,
an editor's rename, a write in place) and SIGHUP; listen addresses added
and removed, the cache resized, the upstream switched, static records
changed, all without losing a query; a broken file rejected with its
FILE:LINE:COL while the running config keeps serving; and, in network
namespaces, an address added to lo and the nftables sets by a reload.

Each test rewrites its daemon's config file and waits for the log line
that ends a reload ("reloaded" or "reload failed"), so no test guesses how
long a reload takes.
"""

import os
import re
import signal
import socket
import struct
import threading
import time

import authority
import dnsmsg
import harness
import test_ctl
import test_node

NAME = "db.prod.svc.cluster.local"        # a standard static record
EXTRA = "127.0.0.77"                      # every 127/8 address is local on lo


def swap_zone(address):
    """swap.example.: any name under it has an A record `address`."""
    return ("$ORIGIN swap.example.\n$TTL 3600\n"
            "@ 60 IN SOA ns.swap.example. hostmaster.swap.example. "
            "( 1 3600 600 86400 30 )\n"
            "@ IN NS ns.swap.example.\nns IN A 127.0.0.1\n"
            "* 3600 IN A %s\n" % address)


# ------------------------------------------------------------------ helpers

def write_config(d, config):
    """Replace d's config file as an editor does: a new file renamed over it."""
    tmp = d.config_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(harness.to_yaml(config) + "\n")
    os.replace(tmp, d.config_path)


def log_count(d, msg):
    """How many log lines carry this msg (logfmt)."""
    field = "msg=" + ('"%s"' % msg if " " in msg else msg)
    return sum(1 for line in d.stderr().splitlines()
               if (" " + field + " ") in (" " + line + " "))


def wait_log(d, msg, count, timeout=15.0):
    # generous: a reload builds a resolver context, and the machine may be busy
    deadline = time.monotonic() + timeout
    while log_count(d, msg) < count:
        if time.monotonic() > deadline:
            raise AssertionError("no %d x %r in %.0fs; log:\n%s"
                                 % (count, msg, timeout, d.tail(25)))
        time.sleep(0.02)


def log_fields(d, msg):
    """The key=value fields of the last log line with this msg."""
    field = "msg=" + ('"%s"' % msg if " " in msg else msg)
    lines = [l for l in d.stderr().splitlines() if field in l]
    assert lines, "no %r line:\n%s" % (msg, d.tail(25))
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', lines[-1]))


def stop_cleanly(d):
    """SIGTERM; exit 0 (a sanitized build exits 1 on a leak or memory error)."""
    rc, _ = d.stop()
    assert rc == 0, "exit status %s:\n%s" % (rc, d.tail(40))


def a_records(m):
    return [r["rdata"] for r in m.rrs("answer", "A")]


def no_udp_answer(host, port):
    return dnsmsg.udp_exchange(host, port, dnsmsg.build_query(NAME), 0.5) is None


class Stream(threading.Thread):
    """One client asking over UDP, one query at a time, until stopped (and
    at least `minimum` queries): static names, cached upstream names and a
    fresh upstream name every 25th query. A query without a reply within
    3 s is lost; a reply that is not NOERROR with an answer is bad."""

    def __init__(self, host, port, minimum):
        super().__init__(daemon=True)
        self.addr = (host, port)
        self.minimum = minimum
        self.stopping = threading.Event()
        self.sent = 0
        self.lost = []
        self.bad = []

    def name(self, k):
        if k % 25 == 0:
            return "fresh%d.swap.example" % k
        return NAME if k % 2 else "n%d.swap.example" % (k % 40)

    def run(self):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(self.addr)
            k = 0
            while not self.stopping.is_set() or self.sent < self.minimum:
                k += 1
                name = self.name(k)
                qid = k & 0xffff
                s.send(dnsmsg.build_query(name, qid=qid))
                self.sent += 1
                reply = self.reply(s, qid)
                if reply is None:
                    self.lost.append(name)
                elif reply.rcode_name != "NOERROR" or not reply.answer:
                    self.bad.append((name, reply.describe()))

    @staticmethod
    def reply(s, qid):
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            s.settimeout(deadline - time.monotonic())
            try:
                data = s.recv(4096)
            except (socket.timeout, ConnectionRefusedError):
                return None
            if struct.unpack("!H", data[:2])[0] == qid:
                return dnsmsg.parse(data)
        return None


# -------------------------------------------------------------------- tests

def test_no_query_is_lost_through_a_series_of_reloads(env):
    with authority.Authority({"swap.example.": swap_zone("192.0.2.1")}) as a, \
            authority.Authority({"swap.example.": swap_zone("192.0.2.2")}) as b:
        port = harness.free_port(("127.0.0.1", EXTRA))
        cfg = env.config(port=port, upstream={"servers": [a.addr], "timeout": "2s"})
        d = env.start(config=cfg)
        steps = [
            ("add an address", lambda c: c["listen"]["addresses"].append(EXTRA)),
            ("resize the cache", lambda c: c.update(cache={"size": "256KiB"})),
            ("switch the upstream", lambda c: c["upstream"].update(servers=[b.addr])),
            ("add a static record", lambda c: c["static"]["records"].append(
                {"name": "new.prod.svc.cluster.local", "a": ["10.0.0.77"]})),
            ("remove the address", lambda c: c["listen"]["addresses"].remove(EXTRA)),
            ("change the log level", lambda c: c.update(log={"level": "debug"})),
        ]
        client = Stream(d.host, d.port, minimum=2000)
        client.start()
        try:
            for i, (what, change) in enumerate(steps):
                time.sleep(0.3)
                change(cfg)
                write_config(d, cfg)
                wait_log(d, "reloaded", i + 1)
            time.sleep(0.3)
        finally:
            client.stopping.set()
            client.join(60)
        assert log_count(d, "reload failed; keeping the running configuration") == 0, d.tail(30)
        assert client.sent >= 2000, client.sent
        assert not client.lost, "%d of %d queries lost: %s" % (
            len(client.lost), client.sent, client.lost[:10])
        assert not client.bad, client.bad[:5]
        assert b.queries() > 0, "the new upstream was never asked"
        m = d.udp("new.prod.svc.cluster.local")
        assert a_records(m) == ["10.0.0.77"], m.describe()
        stop_cleanly(d)


test_no_query_is_lost_through_a_series_of_reloads.timeout = 60


def test_listen_addresses_are_added_and_removed(env):
    port = harness.free_port(("127.0.0.1", EXTRA))
    cfg = env.config(port=port)
    d = env.start(config=cfg)
    assert no_udp_answer(EXTRA, port)
    cfg["listen"]["addresses"].append(EXTRA)
    write_config(d, cfg)
    wait_log(d, "reloaded", 1)
    assert a_records(dnsmsg.udp_query(EXTRA, port, NAME)) == ["10.0.0.5"]
    assert a_records(dnsmsg.tcp_query(EXTRA, port, NAME)) == ["10.0.0.5"]
    fields = log_fields(d, "listening")
    assert fields["address"] == EXTRA, fields

    # An address that cannot be bound fails the whole reload: nothing changes.
    bad = harness.deep_merge(cfg, {})
    bad["listen"]["addresses"].append("192.0.2.1")
    bad["static"]["records"].append({"name": "not.prod.svc.cluster.local", "a": ["10.9.9.9"]})
    write_config(d, bad)
    wait_log(d, "reload failed; keeping the running configuration", 1)
    assert "cannot listen on 192.0.2.1:%d/udp" % port in d.stderr(), d.tail()
    assert d.udp("not.prod.svc.cluster.local").rcode_name == "NXDOMAIN"
    assert a_records(dnsmsg.udp_query(EXTRA, port, NAME)) == ["10.0.0.5"]

    cfg["listen"]["addresses"].remove(EXTRA)
    write_config(d, cfg)
    wait_log(d, "reloaded", 2)
    assert no_udp_answer(EXTRA, port), "the removed address still answers"
    try:
        dnsmsg.tcp_query(EXTRA, port, NAME, timeout=1)
        raise AssertionError("the removed address still accepts TCP")
    except OSError:
        pass
    assert a_records(d.udp(NAME)) == ["10.0.0.5"]
    assert a_records(d.tcp(NAME)) == ["10.0.0.5"]
    assert log_fields(d, "stopped listening")["address"] == EXTRA
    # the workers handed their UDP sockets to the resolver, which closes
    # them once no waiting client can be answered on them (none waits here)
    assert udp_port_freed(EXTRA, port), "the removed address's UDP sockets stay open"
    stop_cleanly(d)


def udp_port_freed(host, port, within=3.0):
    """Whether host:port can be bound without SO_REUSEPORT within `within` s
    (it cannot while any socket of the daemon holds it)."""
    deadline = time.monotonic() + within
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((host, port))
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
        time.sleep(0.1)


def test_cache_resize_evicts_down_to_the_new_size(env):
    with authority.Authority({"swap.example.": swap_zone("192.0.2.1")}) as a:
        cfg = env.config(upstream={"servers": [a.addr], "timeout": "2s"},
                         cache={"size": "8MiB"})
        d = env.start(config=cfg)
        names = ["c%d.swap.example" % i for i in range(600)]
        for name in names:
            assert a_records(d.udp(name)) == ["192.0.2.1"], name
        asked = a.queries()
        cfg["cache"] = {"size": "64KiB"}
        write_config(d, cfg)
        wait_log(d, "reloaded", 1)
        f = log_fields(d, "cache reconfigured")
        assert (f["size"], f["was"]) == ("65536", "8388608"), f
        kept, evicted = int(f["entries"]), int(f["evicted"])
        assert kept < 600 and kept + evicted == 600, f
        # What was evicted is asked again; what was kept is not.
        for name in names:
            assert a_records(d.udp(name)) == ["192.0.2.1"], name
        assert a.queries() - asked >= evicted, (a.queries() - asked, f)
        stop_cleanly(d)


def test_upstream_switch_sends_new_names_to_the_new_servers(env):
    _switch_upstream(env, workers=2)


def test_upstream_switch_where_the_resolver_runs_on_the_worker(env):
    # upstream.resolver auto, one worker: the hand-over reaches worker/0's turn
    _switch_upstream(env, workers=1)


def _switch_upstream(env, workers):
    with authority.Authority({"swap.example.": swap_zone("192.0.2.1")}) as a, \
            authority.Authority({"swap.example.": swap_zone("192.0.2.2")}) as b:
        cfg = env.config(upstream={"servers": [a.addr], "timeout": "2s"},
                         listen={"workers": workers})
        d = env.start(config=cfg)
        assert a_records(d.udp("old.swap.example")) == ["192.0.2.1"]
        assert a_records(d.udp("kept.swap.example")) == ["192.0.2.1"]
        cfg["upstream"]["servers"] = [b.addr]
        write_config(d, cfg)
        wait_log(d, "reloaded", 1)
        assert "upstream switched" in d.stderr(), d.tail()
        asked_a = a.queries()
        assert a_records(d.udp("new.swap.example")) == ["192.0.2.2"]
        assert a_records(d.tcp("new2.swap.example")) == ["192.0.2.2"]
        assert a.queries() == asked_a, "the old upstream was asked after the switch"
        assert b.queries() >= 2
        # What the old upstream said is asked again of the new one ...
        assert a_records(d.udp("old.swap.example")) == ["192.0.2.2"]
        asked_b = b.queries()
        assert a_records(d.udp("old.swap.example")) == ["192.0.2.2"]
        assert b.queries() == asked_b, "the new answer was not cached"
        # ... and still covers an outage of the new one, as stale data.
        b.stop()
        m = d.udp("kept.swap.example", timeout=4)
        assert a_records(m) == ["192.0.2.1"] and m.answer[0]["ttl"] == 30, m.describe()
        stop_cleanly(d)


def test_switching_away_from_a_silent_upstream_leaves_no_client_unanswered(env):
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # takes queries, never answers
    silent.bind(("127.0.0.1", 0))
    with silent, authority.Authority({"swap.example.": swap_zone("192.0.2.2")}) as b:
        cfg = env.config(upstream={"servers": ["127.0.0.1:%d" % silent.getsockname()[1]],
                                   "timeout": "3s"})
        d = env.start(config=cfg)
        waiting = {}

        def ask():
            t0 = time.monotonic()
            waiting["reply"] = dnsmsg.udp_exchange(
                d.host, d.port, dnsmsg.build_query("w.swap.example"), timeout=8)
            waiting["took"] = time.monotonic() - t0

        client = threading.Thread(target=ask)
        client.start()
        time.sleep(0.3)        # its query is now running on the silent upstream
        cfg["upstream"]["servers"] = [b.addr]
        write_config(d, cfg)
        wait_log(d, "reloaded", 1)
        # The same name, asked after the switch, does not wait on the old query.
        t0 = time.monotonic()
        assert a_records(d.udp("w.swap.example")) == ["192.0.2.2"]
        assert time.monotonic() - t0 < 1.5
        client.join(10)
        # The client from before was answered too, at the latest at its deadline.
        assert waiting.get("reply") is not None, waiting
        assert waiting["took"] < 4, waiting
        stop_cleanly(d)


def test_broken_config_is_rejected_with_its_position_and_the_old_one_serves(env):
    cfg = env.config()
    d = env.start(config=cfg)
    good = harness.to_yaml(cfg) + "\n"
    with open(d.config_path + ".tmp", "w") as f:
        f.write(good + "cache: {size: [\n")
    os.replace(d.config_path + ".tmp", d.config_path)
    wait_log(d, "reload failed; keeping the running configuration", 1)
    # libyaml names the broken line, or the end of the file after it.
    m = re.search(r"config\.yaml:(\d+):\d+: ", d.stderr())
    assert m and int(m.group(1)) - len(good.splitlines()) in (1, 2), d.tail()

    bad = harness.deep_merge(cfg, {"cache": {"size": "lots"}})
    write_config(d, bad)
    wait_log(d, "reload failed; keeping the running configuration", 2)
    text = harness.to_yaml(bad).splitlines()
    line = [i for i, l in enumerate(text, 1) if l.strip().startswith("size:")][0]
    assert re.search(r'config\.yaml:%d:\d+: cache\.size: \\?"lots\\?"' % line,
                     d.stderr()), d.tail()
    assert d.alive()
    assert a_records(d.udp(NAME)) == ["10.0.0.5"]

    cfg["static"]["records"].append({"name": "fixed.prod.svc.cluster.local", "a": ["10.0.0.66"]})
    write_config(d, cfg)
    wait_log(d, "reloaded", 1)
    assert a_records(d.udp("fixed.prod.svc.cluster.local")) == ["10.0.0.66"]
    stop_cleanly(d)


def publish(directory, stamp, files, first=False):
    """What kubelet's atomic writer does for a ConfigMap volume: the files
    in a new timestamped directory, `..data` renamed over to point at it,
    the user-visible names as symlinks through `..data`, the old one gone."""
    target = os.path.join(directory, stamp)
    os.mkdir(target)
    for name, text in files.items():
        with open(os.path.join(target, name), "w") as f:
            f.write(text)
    data = os.path.join(directory, "..data")
    old = os.readlink(data) if os.path.islink(data) else None
    os.symlink(stamp, os.path.join(directory, "..data_tmp"))
    os.rename(os.path.join(directory, "..data_tmp"), data)
    if first:
        for name in files:
            os.symlink(os.path.join("..data", name), os.path.join(directory, name))
    if old:
        for name in os.listdir(os.path.join(directory, old)):
            os.unlink(os.path.join(directory, old, name))
        os.rmdir(os.path.join(directory, old))


def test_kubelet_configmap_update_reloads_once(env):
    cfg = env.config()
    directory = os.path.join(env.tmp, "configmap")
    os.mkdir(directory)
    records = harness.STANDARD_FILE_RECORDS
    publish(directory, "..2026_11_21_10_00_00.000000001", {
        "config.yaml": harness.to_yaml(cfg) + "\n",
        harness.STANDARD_FILE_NAME: harness.static_file_yaml(records)}, first=True)
    d = env.start_file(os.path.join(directory, "config.yaml"), cfg["listen"]["port"])
    cfg["static"]["records"].append({"name": "cm.prod.svc.cluster.local", "a": ["10.0.0.88"]})
    publish(directory, "..2026_11_21_10_05_00.000000002", {
        "config.yaml": harness.to_yaml(cfg) + "\n",
        harness.STANDARD_FILE_NAME: harness.static_file_yaml(
            [{"name": "fromfile.prod.svc.cluster.local", "a": ["10.0.0.99"]}])})
    wait_log(d, "reloaded", 1)
    time.sleep(1.0)
    assert log_count(d, "configuration files changed; reloading") == 1, d.tail(20)
    assert log_count(d, "reloaded") == 1, d.tail(20)
    assert a_records(d.udp("cm.prod.svc.cluster.local")) == ["10.0.0.88"]
    assert a_records(d.udp("fromfile.prod.svc.cluster.local")) == ["10.0.0.99"]
    # The next update lands in another directory: still watched.
    publish(directory, "..2026_11_21_10_10_00.000000003", {
        "config.yaml": harness.to_yaml(cfg) + "\n",
        harness.STANDARD_FILE_NAME: harness.static_file_yaml(
            [{"name": "fromfile.prod.svc.cluster.local", "a": ["10.0.0.100"]}])})
    wait_log(d, "reloaded", 2)
    assert a_records(d.udp("fromfile.prod.svc.cluster.local")) == ["10.0.0.100"]
    stop_cleanly(d)


def test_edit_in_place_reloads_once_and_unchanged_bytes_do_not(env):
    cfg = env.config()
    d = env.start(config=cfg)
    cfg["static"]["records"].append({"name": "edit.prod.svc.cluster.local", "a": ["10.0.0.44"]})
    text = harness.to_yaml(cfg) + "\n"
    with open(d.config_path, "w") as f:
        f.write(text)
    wait_log(d, "reloaded", 1)
    assert a_records(d.udp("edit.prod.svc.cluster.local")) == ["10.0.0.44"]
    # The same bytes again, and a touch: events, but nothing to reload.
    with open(d.config_path, "w") as f:
        f.write(text)
    os.utime(d.config_path)
    time.sleep(1.0)
    assert log_count(d, "configuration files changed; reloading") == 1, d.tail(20)
    # A static.files file written in place is watched as well.
    with open(os.path.join(d.dir, harness.STANDARD_FILE_NAME), "w") as f:
        f.write(harness.static_file_yaml(
            [{"name": "fromfile.prod.svc.cluster.local", "a": ["10.0.0.98"]}]))
    wait_log(d, "reloaded", 2)
    assert a_records(d.udp("fromfile.prod.svc.cluster.local")) == ["10.0.0.98"]
    assert log_count(d, "configuration files changed; reloading") == 2, d.tail(20)
    stop_cleanly(d)


def test_a_static_file_added_in_another_directory_is_watched_too(env):
    cfg = env.config()
    d = env.start(config=cfg)
    os.mkdir(os.path.join(d.dir, "more"))
    added = os.path.join(d.dir, "more", "added.yaml")
    with open(added, "w") as f:
        f.write(harness.static_file_yaml([{"name": "more.prod.svc.cluster.local",
                                           "a": ["10.0.0.21"]}]))
    cfg["static"]["files"].append("more/added.yaml")
    write_config(d, cfg)
    wait_log(d, "reloaded", 1)
    assert a_records(d.udp("more.prod.svc.cluster.local")) == ["10.0.0.21"]
    with open(added, "w") as f:
        f.write(harness.static_file_yaml([{"name": "more.prod.svc.cluster.local",
                                           "a": ["10.0.0.22"]}]))
    wait_log(d, "reloaded", 2)
    assert a_records(d.udp("more.prod.svc.cluster.local")) == ["10.0.0.22"]
    time.sleep(0.5)
    assert log_count(d, "configuration files changed; reloading") == 2, d.tail(20)
    stop_cleanly(d)


def test_sighup_reloads_and_restart_only_keys_are_named(env):
    cfg = env.config()
    d = env.start(config=cfg)
    d.proc.send_signal(signal.SIGHUP)
    wait_log(d, "configuration unchanged: nothing to apply", 1)
    # A key only a restart applies is named and keeps its running value;
    # the rest of the file still applies.
    cfg["listen"]["workers"] = 3
    cfg["cluster"]["domain"] = "other.local"
    cfg["static"]["records"].append({"name": "hup.prod.svc.cluster.local", "a": ["10.0.0.33"]})
    write_config(d, cfg)
    wait_log(d, "reloaded", 1)
    f = log_fields(d, "changed keys only apply at a restart; ignored until then")
    assert f["keys"] == "listen.workers,cluster.domain", f
    assert a_records(d.udp("hup.prod.svc.cluster.local")) == ["10.0.0.33"]
    m = d.udp("nothing.prod.svc.cluster.local")
    assert m.rcode_name == "NXDOMAIN" and m.aa, m.describe()   # still our zone
    d.proc.send_signal(signal.SIGHUP)
    wait_log(d, "reloading configuration", 2)
    wait_log(d, "changed keys only apply at a restart; ignored until then", 2)
    stop_cleanly(d)


def test_ctl_reload_and_lookup_follow_the_new_addresses(env):
    with authority.Authority({"swap.example.": swap_zone("192.0.2.1")}) as a:
        port = harness.free_port(("127.0.0.1", EXTRA))
        d = test_ctl.start(env, port=port, upstream={"servers": [a.addr], "timeout": "2s"})
        cfg = harness.deep_merge(d.config, {})
        cfg["listen"]["addresses"] = [EXTRA]       # 127.0.0.1, the first address, goes
        write_config(d, cfg)
        wait_log(d, "reloaded", 1)
        assert test_ctl.ok(env, d, "reload") == "reloaded %s\n" % d.config_path
        # A miss goes to the resolver straight from the control thread,
        # whatever the daemon serves now.
        source, answer, out = test_ctl.lookup(env, d, "ctl.swap.example")
        assert source == "upstream" and test_ctl.rdatas(answer, "A") == ["192.0.2.1"], out
        assert no_udp_answer("127.0.0.1", port)
        stop_cleanly(d)


def test_node_reload_adds_and_removes_an_address_on_lo_and_in_nftables(env):
    n = test_node.Node(env)
    cfg = n.config()
    d = n.start(config=cfg)
    added = "169.254.20.11"

    def in_set():
        return added in n.run(n.node, "nft", "list", "set", "inet", "localdns",
                              "local4").stdout

    cfg["listen"]["addresses"].append(added)
    write_config(d, cfg)
    wait_log(d, "reloaded", 1)
    assert added + "/32" in n.lo_addresses(), n.lo_addresses()
    assert in_set()
    n.flush_conntrack()
    assert n.ask(added) == test_node.LOCAL_ANSWER, d.tail()
    assert n.ask(added, "+tcp") == test_node.LOCAL_ANSWER
    assert n.conntrack(added) == [], n.conntrack(added)

    cfg["listen"]["addresses"].remove(added)
    write_config(d, cfg)
    wait_log(d, "reloaded", 2)
    assert n.lo_addresses() == test_node.OURS, n.lo_addresses()
    assert not in_set()
    assert n.ask(added) is None
    assert n.ask(test_node.LINK) == test_node.LOCAL_ANSWER
    assert n.ask(test_node.CLUSTER_IP) == test_node.LOCAL_ANSWER
    stop_cleanly(d)


test_node_reload_adds_and_removes_an_address_on_lo_and_in_nftables.timeout = 30

