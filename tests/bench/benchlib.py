"""benchlib: what the Python benchmarks share (stdlib only).

    sys.path.insert(0, os.path.join(REPO, "tests", "bench"))   # beside the script: already there
    from benchlib import git_rev, proc_status, stop, write_doc_block

write_doc_block rewrites one marked block of docs/performance.md (the
numbers a benchmark's --doc run measured); git_rev names the commit they
were measured at; proc_status reads a figure of /proc/PID/status; stop ends
a process the benchmark started.
"""

import os
import re
import signal
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PERFORMANCE_DOC = os.path.join(REPO, "docs", "performance.md")


def write_doc_block(begin, end, text, heading=None, path=PERFORMANCE_DOC):
    """Put text between the marker lines begin and end of path. Without the
    block: a new section `heading` at the end holding it, or, without a
    heading, an exit naming the missing block."""
    with open(path) as f:
        doc = f.read()
    block = "%s\n%s\n%s" % (begin, text, end)
    if begin in doc and end in doc.split(begin, 1)[1]:
        doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, doc, count=1,
                     flags=re.S)
    elif heading:
        doc += "\n## %s\n\n%s\n" % (heading, block)
    else:
        sys.exit("%s has no %s ... %s block" % (path, begin, end))
    with open(path, "w") as f:
        f.write(doc)


def git_rev():
    """The short hash of the commit checked out, or "unknown"."""
    p = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    return p.stdout.strip() or "unknown"


def proc_status(pid, field):
    """A figure of /proc/PID/status (VmRSS, VmHWM, RssAnon ...: kB)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def stop(p):
    """SIGTERM, then SIGKILL after 5 s; waits for it."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
