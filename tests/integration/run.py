#!/usr/bin/env python3
"""Integration test runner for localdns (stdlib only).

    python3 tests/integration/run.py --binary build/localdns [-k SUBSTRING]

Collects the plain functions `test_*` from tests/integration/test_*.py in
file and definition order, runs each with a fresh harness.Env under a time
limit (a function may set `fn.timeout = seconds`; default 20), prints one
line per test (PASS / FAIL with the reason / SKIP), and ends with

    integration: N passed, N failed

Exit status 0 only when nothing failed and at least one test passed. All
daemons and temp dirs are removed on every way out (normal end, Ctrl-C,
SIGTERM, a timeout).
"""

import argparse
import glob
import importlib.util
import os
import signal
import sys
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


def _on_term(signum, frame):
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
            tests.append((full, fn))
    return tests


def one_line(text, limit=600):
    text = " | ".join(l.strip() for l in str(text).strip().split("\n")
                      if l.strip())
    return text if len(text) <= limit else text[:limit] + "..."


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
    ap.add_argument("-v", dest="verbose", action="store_true",
                    help="print daemon stderr tails and tracebacks on failure")
    args = ap.parse_args()

    binary = os.path.abspath(args.binary)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGALRM, _on_alarm)

    passed = failed = skipped = 0
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        print("FAIL setup: binary %s not found or not executable" % binary)
        print("integration: 0 passed, 1 failed")
        return 1

    tests = collect(args.pattern, args.daemon_tests_only)
    shared = harness.SharedServer(binary)
    t_suite = time.monotonic()
    try:
        for name, fn in tests:
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
                        % (shared.daemon.proc.returncode,
                           shared.daemon.tail(8)))
            except harness.Skip as e:
                outcome, reason = "SKIP", str(e)
            except KeyboardInterrupt:
                raise
            except TestTimeout:
                outcome, reason = "FAIL", "timed out after %ss" % limit
            except AssertionError as e:
                outcome, reason = "FAIL", str(e) or "assertion failed"
                if args.verbose:
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
                if args.verbose:
                    reason += "\n" + traceback.format_exc()
            finally:
                logs = env.daemon_logs() if outcome == "FAIL" else ""
                env.close()
            dt = time.monotonic() - t0
            if outcome == "PASS":
                passed += 1
                print("PASS %s (%.2fs)" % (name, dt))
            elif outcome == "SKIP":
                skipped += 1
                print("SKIP %s: %s" % (name, one_line(reason)))
            else:
                failed += 1
                if args.verbose:
                    print("FAIL %s (%.2fs): %s" % (name, dt, reason))
                    if logs:
                        print(logs)
                else:
                    print("FAIL %s (%.2fs): %s" % (name, dt, one_line(reason)))
                if shared.died():
                    shared.close()   # the next test gets a fresh one
            sys.stdout.flush()
    except KeyboardInterrupt:
        print("interrupted")
        failed += 1
    finally:
        shared.close()
        harness.cleanup_all()
    if skipped:
        print("skipped: %d (%.1fs total)" % (skipped, time.monotonic() - t_suite))
    else:
        print("time: %.1fs" % (time.monotonic() - t_suite))
    print("integration: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
