"""The harness itself (harness.py): what every other test relies on to run
beside other tests, and other test runs, on one machine."""

import socket
import threading
import time

import harness


def test_free_ports_are_below_the_kernels_ephemeral_range(env):
    # Between free_port() and the daemon's bind the port is anyone's: in
    # the ephemeral range, any client socket (dig, a test's own, another
    # run's) may be given it, and the daemon fails with "Address already in
    # use" (seen once in a run beside another). Below it, none is.
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    if low <= 11000:
        raise harness.Skip("ip_local_port_range starts at %d: no room below it" % low)
    for hosts in (("127.0.0.1",), ("127.0.0.1", "127.0.0.2")):
        ports = [harness.free_port(hosts) for _ in range(100)]
        outside = [p for p in ports if not 10000 <= p < low]
        assert not outside, "ports in the ephemeral range %d-: %s" % (low, outside)
        assert len(set(ports)) > 90, "not spread at random: %s" % sorted(ports)
        for p in ports[:10]:      # and free for both protocols
            for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                with socket.socket(socket.AF_INET, kind) as s:
                    s.bind((hosts[-1], p))


def test_a_daemon_whose_port_is_taken_at_start_is_started_again(env):
    # What is left of that race: libunbound sends from random ports across
    # 1024-65535, below the ephemeral range too, one socket per query. A
    # start that fails on an address in use is tried again (3 times).
    port = harness.free_port()
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    taken.bind(("127.0.0.1", port))
    d = env.start(port=port, wait=False)

    def release_after_the_first_failure():
        deadline = time.monotonic() + 5
        while "Address already in use" not in d.stderr() and time.monotonic() < deadline:
            time.sleep(0.01)
        taken.close()
    t = threading.Thread(target=release_after_the_first_failure)
    t.start()
    try:
        d.wait_ready()
    finally:
        t.join()
        taken.close()
    assert d.stderr().count("Address already in use") == 1, d.stderr()
    m = d.udp("db.prod.svc.cluster.local", "A")
    assert m.rcode_name == "NOERROR" and m.answer, m.describe()


def test_a_port_free_port_picked_and_lost_for_good_is_traded_for_another(env):
    # libunbound's queries to a silent upstream hold their random ports for
    # seconds, longer than the retries wait: a daemon on a port the harness
    # picked (not the test) moves to a new one when it loses it.
    real_free_port = harness.free_port
    port = real_free_port()
    picks = [port]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", port))
        harness.free_port = lambda hosts=("127.0.0.1",): (
            picks.pop() if picks else real_free_port(hosts))
        try:
            d = env.start(wait=False)
            d.wait_ready()
        finally:
            harness.free_port = real_free_port
        assert d.port != port, "still on the taken port %d" % port
        assert d.stderr().count("Address already in use") == 1, d.stderr()
        m = d.udp("db.prod.svc.cluster.local", "A")
        assert m.rcode_name == "NOERROR" and m.answer, m.describe()


def test_a_port_taken_for_good_still_fails_the_start(env):
    port = harness.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", port))
        d = env.start(port=port, wait=False)
        try:
            d.wait_ready()
        except harness.DaemonError as e:
            assert "Address already in use" in str(e).split(";")[0], e
        else:
            raise AssertionError("the daemon started on a port in use")
    assert d.stderr().count("Address already in use") == 1 + d.PORT_RACE_RETRIES, d.stderr()
