"""The harness itself (harness.py): what every other test relies on to run
beside other tests, and other test runs, on one machine."""

import socket

import harness

# Checks test tooling; starts no localdns (run.py --daemon-tests-only skips it).
NO_DAEMON = True


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
