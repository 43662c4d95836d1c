#!/usr/bin/env python3
"""Integration test runner for localdns (stdlib only).

    python3 tests/integration/run.py --binary build/localdns [-k SUBSTRING] [-j N]

Collects the plain functions `test_*` from tests/integration/test_*.py in
file and definition order, runs each with a fresh harness.Env under a time
limit (a function may set `fn.timeout = seconds`; default 20), prints one
line per test (PASS / FAIL with the reason / SKIP), and ends with

    integration: N passed, N failed

Exit status 0 only when nothing failed and at least one test passed. All
daemons and temp dirs are removed on every way out (normal end, Ctrl-C,
SIGTERM, a timeout).

With -j N, N worker processes (this script with --worker) run the tests,
each test in one of them, N at a time: the tests are isolated from each
other (ports, network namespaces and temp dirs of their own), and each
worker has its own shared daemon. A test that judges latency or a rate,
or floods the machine, is marked to run alone (`fn.alone = True`, or
`ALONE = True` for a whole module): one at a time, first, with nothing
beside it but tests marked quiet (`QUIET = True`: they mostly wait on the
daemon's timers and use a small share of a CPU). Lines are printed in
collection order whatever order the tests end in, what a test printed
itself just before its own line.
"""

import argparse
import collections
import glob
import importlib.util
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402

DEFAULT_TIMEOUT = 20


class TestTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise TestTimeout("test exceeded its time limit")


_workers = []   # the worker processes of -j, stopped with this one


def _on_term(signum, frame):
    for p in _workers:
        p.terminate()
    harness.cleanup_all()
    sys.stdout.write("interrupted by signal %d\n" % signum)
    sys.stdout.flush()
    os._exit(1)


def collect(pattern, daemon_tests_only=False):
    tests = []
    for path in sorted(glob.glob(os.path.join(HERE, "test_*.py"))):
        modname = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        # Registered first, so a test file that imports another (test_reload
        # uses test_node's namespaces) shares its module, counters included.
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
        if daemon_tests_only and getattr(mod, "NO_DAEMON", False):
            continue
        fns = [v for k, v in vars(mod).items()
               if k.startswith("test_") and callable(v)
               and getattr(v, "__module__", None) == modname]
        fns.sort(key=lambda f: f.__code__.co_firstlineno)
        for fn in fns:
            full = "%s::%s" % (modname, fn.__name__)
            if pattern and not any(p in full for p in pattern.split(",")):
                continue
            for mark in ("alone", "quiet"):
                if getattr(mod, mark.upper(), False):
                    setattr(fn, mark, True)
            tests.append((full, fn))
    return tests


def one_line(text, limit=600):
    text = " | ".join(l.strip() for l in str(text).strip().split("\n")
                      if l.strip())
    return text if len(text) <= limit else text[:limit] + "..."


def run_test(name, fn, binary, shared, verbose):
    """Runs one test; returns its outcome (PASS, FAIL or SKIP) and the
    text to print for it."""
    env = harness.Env(binary, shared)
    limit = getattr(fn, "timeout", DEFAULT_TIMEOUT)
    t0 = time.monotonic()
    outcome, reason = "PASS", ""
    try:
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            fn(env)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if shared.died():
            raise AssertionError(
                "shared daemon died during this test (exit %s): %s"
                % (shared.daemon.proc.returncode, shared.daemon.tail(8)))
    except harness.Skip as e:
        outcome, reason = "SKIP", str(e)
    except TestTimeout:
        outcome, reason = "FAIL", "timed out after %ss" % limit
    except AssertionError as e:
        outcome, reason = "FAIL", str(e) or "assertion failed"
        if verbose:
            reason += "\n" + traceback.format_exc()
    except Exception as e:
        outcome = "FAIL"
        tb = traceback.extract_tb(e.__traceback__)
        where = ""
        for fr in reversed(tb):
            if os.path.basename(fr.filename).startswith("test_"):
                where = " at %s:%d" % (os.path.basename(fr.filename),
                                        fr.lineno)
                break
        reason = "%s: %s%s" % (type(e).__name__, e, where)
        if verbose:
            reason += "\n" + traceback.format_exc()
    finally:
        logs = env.daemon_logs() if outcome == "FAIL" else ""
        env.close()
    dt = time.monotonic() - t0
    if outcome == "PASS":
        text = "PASS %s (%.2fs)" % (name, dt)
    elif outcome == "SKIP":
        text = "SKIP %s: %s" % (name, one_line(reason))
    elif verbose:
        text = "FAIL %s (%.2fs): %s" % (name, dt, reason)
        if logs:
            text += "\n" + logs
    else:
        text = "FAIL %s (%.2fs): %s" % (name, dt, one_line(reason))
    if outcome == "FAIL" and shared.died():
        shared.close()   # the next test gets a fresh one
    return outcome, text


class Tally:
    """Prints each test's line as it comes and counts the outcomes."""

    def __init__(self):
        self.counts = collections.Counter()

    def add(self, outcome, text):
        self.counts[outcome] += 1
        print(text)
        sys.stdout.flush()


def run_here(tests, binary, verbose, tally):
    """Every test in this process, one after another."""
    shared = harness.SharedServer(binary)
    try:
        for name, fn in tests:
            tally.add(*run_test(name, fn, binary, shared, verbose))
    finally:
        shared.close()


def worker_main(args):
    """--worker: runs the tests whose indexes (into what collect() finds)
    come on stdin, one a line, and writes each result as a JSON line to
    file descriptor args.worker; what a test prints goes with it."""
    tests = collect(args.pattern, args.daemon_tests_only)
    results = os.fdopen(args.worker, "w")
    shared = harness.SharedServer(os.path.abspath(args.binary))
    capture = tempfile.TemporaryFile()
    try:
        for line in sys.stdin:
            i = int(line)
            name, fn = tests[i]
            capture.seek(0)
            capture.truncate()
            sys.stdout.flush()
            saved = os.dup(1)
            os.dup2(capture.fileno(), 1)
            try:
                outcome, text = run_test(name, fn, os.path.abspath(args.binary),
                                         shared, args.verbose)
            finally:
                sys.stdout.flush()
                os.dup2(saved, 1)
                os.close(saved)
            capture.seek(0)
            printed = capture.read().decode("utf-8", "replace")
            results.write(json.dumps({"i": i, "outcome": outcome,
                                      "text": printed + text}) + "\n")
            results.flush()
    finally:
        shared.close()
        harness.cleanup_all()
    return 0


class Worker:
    """One worker process and the test it runs (None when idle)."""

    def __init__(self, argv):
        r, w = os.pipe()
        self.proc = subprocess.Popen(argv + ["--worker", str(w)], stdin=subprocess.PIPE,
                                     pass_fds=(w,), text=True)
        os.close(w)
        _workers.append(self.proc)
        self.results = os.fdopen(r)
        self.running = None

    def send(self, i):
        self.running = i
        self.proc.stdin.write("%d\n" % i)
        self.proc.stdin.flush()

    def stop(self, sig=None):
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        _workers.remove(self.proc)
        self.results.close()


class Schedule:
    """Which test a free worker takes next. A test marked alone runs with no
    other beside it but quiet ones (they mostly wait on timers: a small
    share of a CPU at most), one alone test at a time; the alone ones go
    first, while the quiet ones keep the other workers busy."""

    def __init__(self, tests):
        self.kinds = [kind_of(fn) for _, fn in tests]
        self.pending = {k: collections.deque(i for i, ki in enumerate(self.kinds) if ki == k)
                        for k in ("alone", "other", "quiet")}
        self.running = collections.Counter()

    def _take(self, kind):
        if not self.pending[kind]:
            return None
        self.running[kind] += 1
        return self.pending[kind].popleft()

    def next(self):
        """The next test for a free worker, or None: none may start now."""
        if self.running["alone"]:
            return self._take("quiet")
        if self.pending["alone"]:
            return self._take("quiet") if self.running["other"] else self._take("alone")
        return self._take("other") if self.pending["other"] else self._take("quiet")

    def finished(self, i):
        self.running[self.kinds[i]] -= 1


def kind_of(fn):
    if getattr(fn, "alone", False):
        return "alone"
    return "quiet" if getattr(fn, "quiet", False) else "other"


def run_in_workers(tests, jobs, argv, tally):
    """The tests in `jobs` worker processes; results printed in order."""
    schedule = Schedule(tests)
    done, printed = {}, 0
    sel = selectors.DefaultSelector()
    workers = []

    def start_worker():
        w = Worker(argv)
        sel.register(w.results, selectors.EVENT_READ, w)
        workers.append(w)

    for _ in range(min(jobs, len(tests))):
        start_worker()
    try:
        while printed < len(tests):
            for w in workers:
                if w.running is None:
                    i = schedule.next()
                    if i is not None:
                        w.send(i)
            for key, _ in sel.select():
                w = key.data
                line = w.results.readline()
                if line:
                    r = json.loads(line)
                    done[r["i"]] = (r["outcome"], r["text"])
                else:   # the worker died: its test failed, a new one takes over
                    if w.running is not None:
                        done[w.running] = ("FAIL", "FAIL %s: the worker running it exited (%s)"
                                           % (tests[w.running][0], w.proc.wait()))
                    sel.unregister(w.results)
                    workers.remove(w)
                    w.stop()
                    start_worker()
                if w.running is not None:
                    schedule.finished(w.running)
                w.running = None
            while printed in done:
                tally.add(*done.pop(printed))
                printed += 1
    except BaseException:
        for w in workers:
            w.stop(signal.SIGTERM)
        raise
    for w in workers:
        w.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("-k", dest="pattern", default=None,
                    help="run only tests whose module::name contains this "
                    "(or one of several, comma-separated)")
    ap.add_argument("--daemon-tests-only", action="store_true",
                    help="skip the modules that check test tooling and run no "
                    "localdns (NO_DAEMON = True): the sanitized pass has "
                    "nothing to find there")
    ap.add_argument("-j", dest="jobs", type=int, default=1,
                    help="run the tests in this many worker processes, this "
                    "many at a time (the ones marked alone: one at a time, beside "
                    "quiet ones only)")
    ap.add_argument("-v", dest="verbose", action="store_true",
                    help="print daemon stderr tails and tracebacks on failure")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGALRM, _on_alarm)
    if args.worker is not None:
        return worker_main(args)

    binary = os.path.abspath(args.binary)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        print("FAIL setup: binary %s not found or not executable" % binary)
        print("integration: 0 passed, 1 failed")
        return 1

    tests = collect(args.pattern, args.daemon_tests_only)
    tally = Tally()
    t_suite = time.monotonic()
    try:
        if args.jobs > 1:
            argv = [sys.executable, os.path.abspath(__file__), "--binary", binary]
            argv += ["-k", args.pattern] if args.pattern else []
            argv += ["--daemon-tests-only"] if args.daemon_tests_only else []
            argv += ["-v"] if args.verbose else []
            run_in_workers(tests, args.jobs, argv, tally)
        else:
            run_here(tests, binary, args.verbose, tally)
    except KeyboardInterrupt:
        print("interrupted")
        tally.counts["FAIL"] += 1
    finally:
        harness.cleanup_all()
    passed, failed, skipped = (tally.counts[k] for k in ("PASS", "FAIL", "SKIP"))
    if skipped:
        print("skipped: %d (%.1fs total)" % (skipped, time.monotonic() - t_suite))
    else:
        print("time: %.1fs" % (time.monotonic() - t_suite))
    print("integration: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
