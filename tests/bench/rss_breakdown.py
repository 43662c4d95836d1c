#!/usr/bin/env python3
"""rss_breakdown.py PID [--all] — where a process's resident memory is, from
/proc/PID/smaps.

    tests/bench/rss_breakdown.py $(pidof localdns)

One row per file (a library's text, data and relro mappings together) and
per kind of anonymous memory, largest first:

  [heap]          the main arena (brk): the main thread's malloc, and every
                  thread's small allocations until glibc gives it an arena
  [arena]         a glibc malloc arena of another thread (64 MiB reserved,
                  rw part plus a PROT_NONE tail)
  [stack]         the main thread's stack; [thread stack] another thread's
                  (an anonymous rw mapping right above a PROT_NONE guard)
  [anon mmap]     other anonymous mappings: allocations over malloc's mmap
                  threshold (128 KiB at first), libraries' own mmaps
  [vdso] etc.     the kernel's

Columns (KiB): Size (mapped), Rss (resident), Pss (proportional: each
shared page divided by the processes mapping it), Private (resident pages
only this process maps; for files, Private_Dirty is what it has written:
relocations, .data, .bss), Shared (resident pages other processes map
too). A file-backed clean page can be dropped by the kernel and read again
from the file; an anonymous or dirty one cannot (no swap on a node). So
"what this process costs the node" is closer to Pss, and "what it alone
costs" to anon Rss plus file Private_Dirty. (The kernel's RssAnon, in the
first line, counts both: a library page the dynamic linker relocated is a
private copy, anonymous memory inside a file mapping.)

Rows smaller than 64 KiB of Rss are summed into "(small)" unless --all.
"""

import argparse
import os
import sys

FIELDS = ("Size", "Rss", "Pss", "Shared_Clean", "Shared_Dirty", "Private_Clean",
          "Private_Dirty", "Anonymous")
ARENA_RESERVE_KIB = 64 * 1024  # glibc's HEAP_MAX_SIZE on 64-bit


class Mapping:
    def __init__(self, line):
        parts = line.split(None, 5)
        start, end = (int(x, 16) for x in parts[0].split("-"))
        self.start, self.end = start, end
        self.perms = parts[1]
        self.path = parts[5].strip() if len(parts) > 5 else ""
        self.kib = dict.fromkeys(FIELDS, 0)
        self.kind = None


def read_smaps(pid):
    maps = []
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                maps.append(Mapping(line))
            elif head[:-1] in FIELDS:
                maps[-1].kib[head[:-1]] = int(line.split()[1])
    return maps


def classify(maps):
    """Name each mapping's row: a file's base name, or a kind of anon memory."""
    for i, m in enumerate(maps):
        prev = maps[i - 1] if i > 0 else None
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        if m.path.startswith("/"):
            m.kind = os.path.basename(m.path.replace(" (deleted)", ""))
        elif m.path:
            m.kind = m.path  # [heap], [stack], [vdso], [vvar], memfd:...
        elif m.perms.startswith("---"):
            m.kind = None  # guard pages and arena tails: nothing resident
        elif (nxt and not nxt.path and nxt.perms.startswith("---") and m.end == nxt.start
              and (nxt.end - m.start) // 1024 == ARENA_RESERVE_KIB):
            m.kind = "[arena]"
        elif prev and not prev.path and prev.perms.startswith("---") and prev.end == m.start:
            m.kind = "[thread stack]"
        else:
            m.kind = "[anon mmap]"


def add(into, m):
    for k in FIELDS:
        into[k] = into.get(k, 0) + m.kib[k]


def rows(maps):
    out = {}
    for m in maps:
        if m.kind:
            row = out.setdefault(m.kind, {"count": 0})
            row["count"] += 1
            add(row, m)
    return out


def fmt(name, r, count=True):
    private = r["Private_Clean"] + r["Private_Dirty"]
    shared = r["Shared_Clean"] + r["Shared_Dirty"]
    n = " x%d" % r["count"] if count and r.get("count", 1) > 1 else ""
    return "%-34s %8d %7d %7d %8d %7d %8d" % ((name + n)[:34], r["Size"], r["Rss"], r["Pss"],
                                              private, r["Private_Dirty"], shared)


def status_line(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split(":", 1)[1].strip()
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("--all", action="store_true", help="list small rows too")
    args = ap.parse_args()

    maps = read_smaps(args.pid)
    classify(maps)
    table = rows(maps)
    anon = {k: v for k, v in table.items() if k.startswith("[") and k not in ("[vdso]", "[vvar]")}
    files = {k: v for k, v in table.items() if k not in anon}

    print("pid %d: VmRSS %s (RssAnon %s, RssFile %s), threads %s" % (
        args.pid, status_line(args.pid, "VmRSS"), status_line(args.pid, "RssAnon"),
        status_line(args.pid, "RssFile"), status_line(args.pid, "Threads")))
    print("%-34s %8s %7s %7s %8s %7s %8s" % ("KiB", "Size", "Rss", "Pss", "Private", "P.Dirty",
                                             "Shared"))
    for title, group in (("anonymous", anon), ("file-backed", files)):
        total, small = {}, {"count": 0}
        print("-- %s" % title)
        for name, r in sorted(group.items(), key=lambda kv: -kv[1]["Rss"]):
            for k in FIELDS:
                total[k] = total.get(k, 0) + r[k]
            if r["Rss"] < 64 and not args.all:
                small["count"] += 1
                for k in FIELDS:
                    small[k] = small.get(k, 0) + r[k]
                continue
            print(fmt(name, r))
        if small["count"]:
            print(fmt("(small: %d rows)" % small["count"], small, count=False))
        print(fmt("= %s" % title, total, count=False))
    every = {}
    for r in table.values():
        for k in FIELDS:
            every[k] = every.get(k, 0) + r[k]
    print(fmt("= total", every, count=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
