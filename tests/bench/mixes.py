#!/usr/bin/env python3
"""mixes.py MIX DIR [N] — write one benchmark mix's data into DIR.

The mixes the benchmark scripts measure (static_qps.sh, cache_qps.sh,
search_qps.sh, srv_qps.sh) and callgrind.sh counts instructions for, in one
place so that both see the same names in the same order:

  static  N (1,000) names svc-NNNN.ns-NN.svc.cluster.local, one A and one
          AAAA each: records.yaml (static.files), unbound-data.conf; the
          query file asks all 2N (name, type) pairs, shuffled.
  cache   N (10,000) names hNNNNN.bench.example, one A each, TTL 1 day:
          zone.txt for NSD; the query file asks every A, shuffled.
  search  N (1,000) names hNNNN.bench.example through a pod's ndots:5
          search list (<ns>.svc.cluster.local svc.cluster.local
          cluster.local c.corp.internal corp.internal), A and AAAA:
          bench.zone and corp.zone for NSD; 12 questions per name, in
          rounds of 32 lookups walking their lists in step.
  srv     N (2,500) ClusterIP Services with two named ports and N/5
          headless Services with three endpoints, as static records:
          records.yaml, unbound-data.conf; every name asked once with its
          type, in shuffled blocks of 16 of one shape.

Every query file is dnsgen's format, "name TYPE", with the reply expected
as a third column for the search and srv mixes. The order is fixed (seed
42), so every run and every tool asks the same questions.
"""

import random
import sys

DEFAULT_N = {"static": 1000, "cache": 10000, "search": 1000, "srv": 2500}


def write(path, lines):
    with open(path, "w") as f:
        f.writelines(lines)


def static(d, n):
    names = ["svc-%04d.ns-%02d.svc.cluster.local" % (i, i % 50) for i in range(n)]
    a = lambda i: "10.%d.%d.%d" % (100 + i // 65536, (i // 256) % 256, i % 256)
    aaaa = lambda i: "fd00::%x" % (i + 1)
    write(d + "/records.yaml", ['- {name: %s, ttl: 30s, a: ["%s"], aaaa: ["%s"]}\n'
                                % (nm, a(i), aaaa(i)) for i, nm in enumerate(names)])
    data = ['  local-zone: "cluster.local." static\n']
    for i, nm in enumerate(names):
        data.append('  local-data: "%s. 30 IN A %s"\n' % (nm, a(i)))
        data.append('  local-data: "%s. 30 IN AAAA %s"\n' % (nm, aaaa(i)))
    write(d + "/unbound-data.conf", data)
    pairs = [(nm, t) for nm in names for t in ("A", "AAAA")]
    random.Random(42).shuffle(pairs)
    write(d + "/queries.txt", ["%s %s\n" % p for p in pairs])


def cache(d, n, zone="bench.example"):
    names = ["h%05d" % i for i in range(n)]
    lines = ["$ORIGIN %s.\n$TTL 86400\n" % zone,
             "@ IN SOA ns.%s. hostmaster.%s. 1 3600 600 86400 86400\n" % (zone, zone),
             "@ IN NS ns\nns IN A 127.0.0.1\n"]
    lines += ["%s IN A 10.%d.%d.%d\n" % (nm, i // 65536, (i // 256) % 256, i % 256)
              for i, nm in enumerate(names)]
    write(d + "/zone.txt", lines)
    qs = ["%s.%s A" % (nm, zone) for nm in names]
    random.Random(42).shuffle(qs)
    write(d + "/queries.txt", ["\n".join(qs) + "\n"])


SEARCH = ["%s.svc.cluster.local", "svc.cluster.local", "cluster.local", "c.corp.internal",
          "corp.internal", None]


def search(d, n):
    names = ["h%04d.bench.example" % i for i in range(n)]
    zone = ["$ORIGIN bench.example.\n$TTL 86400\n",
            "@ IN SOA ns.bench.example. hostmaster.bench.example. 1 3600 600 86400 3600\n",
            "@ IN NS ns\nns IN A 127.0.0.1\n"]
    for i, nm in enumerate(names):
        label = nm.split(".")[0]
        zone.append("%s IN A 10.%d.%d.%d\n" % (label, i // 65536, (i // 256) % 256, i % 256))
        zone.append("%s IN AAAA fd00::%x\n" % (label, i + 1))
    write(d + "/bench.zone", zone)
    write(d + "/corp.zone", [
        "$ORIGIN corp.internal.\n$TTL 86400\n",
        "@ IN SOA ns.corp.internal. hostmaster.corp.internal. 1 3600 600 86400 3600\n",
        "@ IN NS ns\nns IN A 127.0.0.1\n"])
    random.Random(42).shuffle(names)
    group_size, lines = 32, []
    for g in range(0, n, group_size):
        group = [(nm, "ns-%02d" % ((g + j) % 10)) for j, nm in enumerate(names[g:g + group_size])]
        for suffix in SEARCH:
            for nm, ns in group:
                if suffix is None:
                    q, rcode = nm, "NOERROR"
                else:
                    q, rcode = "%s.%s" % (nm, suffix.replace("%s", ns)), "NXDOMAIN"
                lines += ["%s %s %s\n" % (q, t, rcode) for t in ("A", "AAAA")]
    write(d + "/queries.txt", lines)


def srv(d, services):
    headless = services // 5
    z = "svc.cluster.local"
    records, unbound, shapes = [], ['  local-zone: "cluster.local." static\n'], {}

    def add_srv(owner, targets):
        records.append("- {name: %s, srv: [%s]}\n" % (owner, ", ".join(
            "{priority: 0, weight: %d, port: %d, target: %s}" % t for t in targets)))
        unbound.extend('  local-data: "%s. 5 IN SRV 0 %d %d %s."\n' % ((owner,) + t)
                       for t in targets)

    def add_a(owner, addrs):
        records.append("- {name: %s, a: [%s]}\n" % (owner, ", ".join(addrs)))
        unbound.extend('  local-data: "%s. 5 IN A %s"\n' % (owner, x) for x in addrs)

    def ask(shape, name, qtype):
        shapes.setdefault(shape, []).append("%s %s NOERROR\n" % (name, qtype))

    for i in range(services):
        svc = "svc-%04d.ns-%02d.%s" % (i, i % 10, z)
        add_a(svc, ["10.96.%d.%d" % (i // 256, i % 256)])
        add_srv("_http._tcp." + svc, [(100, 80, svc)])
        add_srv("_https._tcp." + svc, [(100, 443, svc)])
        ask("svc", svc, "A")
        ask("http", "_http._tcp." + svc, "SRV")
        ask("https", "_https._tcp." + svc, "SRV")
    for i in range(headless):
        hl = "hl-%03d.ns-%02d.%s" % (i, i % 10, z)
        eps = ["10.%d.%d.%d" % (128 + i // 256, i % 256, k + 1) for k in range(3)]
        add_a(hl, eps)
        ask("hl", hl, "A")
        for k, ip in enumerate(eps):
            add_a("ep-%d.%s" % (k, hl), [ip])
            ask("ep", "ep-%d.%s" % (k, hl), "A")
        add_srv("_http._tcp." + hl, [(33, 8080, "ep-%d.%s" % (k, hl)) for k in range(3)])
        ask("hlsrv", "_http._tcp." + hl, "SRV")
    write(d + "/records.yaml", records)
    write(d + "/unbound-data.conf", unbound)
    rng = random.Random(42)
    blocks = []
    for shape in sorted(shapes):
        qs = shapes[shape]
        rng.shuffle(qs)
        blocks += [qs[j:j + 16] for j in range(0, len(qs), 16)]
    rng.shuffle(blocks)
    write(d + "/queries.txt", [q for b in blocks for q in b])


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in DEFAULT_N:
        sys.exit("usage: mixes.py static|cache|search|srv DIR [N]")
    mix, d = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) == 4 else DEFAULT_N[mix]
    {"static": static, "cache": cache, "search": search, "srv": srv}[mix](d, n)


if __name__ == "__main__":
    main()
