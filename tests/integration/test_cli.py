"""Command line: --version, --help, unknown flags, --check-config, startup
failures (bad config, address not on this host)."""

import os
import re
import subprocess
import time

import harness


def _version():
    with open(os.path.join(harness.REPO, "VERSION")) as f:
        return f.read().strip()


def test_version(env):
    p = env.run(["--version"])
    assert p.returncode == 0, "exit %d, stderr %r" % (p.returncode, p.stderr)
    first = p.stdout.split("\n")[0]
    assert first.startswith("localdns "), "first line %r" % first
    assert _version() in first, "version %s not in %r" % (_version(), first)


def test_help(env):
    p = env.run(["--help"])
    assert p.returncode == 0, "exit %d" % p.returncode
    assert re.search(r"usage", p.stdout, re.I), "no usage on stdout: %r" % p.stdout
    for flag in ("--config", "--check-config", "--version"):
        assert flag in p.stdout, "%s not in help text" % flag


def test_unknown_flag(env):
    p = env.run(["--no-such-flag"])
    assert p.returncode == 2, "exit %d, want 2" % p.returncode
    assert re.search(r"usage", p.stderr, re.I), "no usage on stderr: %r" % p.stderr


def _write(env, name, text):
    path = os.path.join(env.tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


VALID = """\
listen:
  addresses: [127.0.0.1]
  port: 5399
  workers: 1
interface:
  manage: false
nftables:
  enabled: false
kubernetes:
  enabled: false
health:
  listen: ""
metrics:
  listen: ""
control:
  socket: ""
cluster:
  domain: cluster.local
  ttl: 5s
static:
  records:
    - {name: db.prod.svc.cluster.local, a: [10.0.0.5], aaaa: ["fd00::5"]}
    - {name: legacy.corp.internal, cname: db.prod.svc.cluster.local}
    - name: _mysql._tcp.db.prod.svc.cluster.local
      srv: [{priority: 0, weight: 100, port: 3306, target: db.prod.svc.cluster.local}]
"""


def test_check_config_valid(env):
    path = _write(env, "good.yaml", VALID)
    p = env.run(["--check-config", path])
    assert p.returncode == 0, "exit %d, stderr %r" % (p.returncode, p.stderr)


def test_check_config_generated_valid(env):
    # The harness's own config shape (with static.files) must be valid.
    cfg = env.config(port=5399)
    path = _write(env, "gen.yaml", harness.to_yaml(cfg) + "\n")
    _write(env, harness.STANDARD_FILE_NAME,
           harness.static_file_yaml(harness.STANDARD_FILE_RECORDS))
    p = env.run(["--check-config", path])
    assert p.returncode == 0, "exit %d, stderr %r" % (p.returncode, p.stderr)


def _replace_line(text, lineno, new):
    lines = text.split("\n")
    lines[lineno - 1] = new
    return "\n".join(lines)


# (case, line number, replacement line, column of the offending node)
BAD = [
    ("unknown_key", 4, "  wrokers: 1", 3),
    ("bad_ip", 2, "  addresses: [127.0.0.1, 300.1.2.3]", 26),
    ("bad_duration", 19, "  ttl: 5 parsecs", 8),
]


def _check_bad(env, case, lineno, line, col):
    text = _replace_line(VALID, lineno, line)
    path = _write(env, case + ".yaml", text)
    p = env.run(["--check-config", path])
    assert p.returncode == 1, "%s: exit %d, want 1 (stderr %r)" % (
        case, p.returncode, p.stderr)
    lines = [l for l in p.stderr.split("\n") if l.strip()]
    assert len(lines) == 1, "%s: want one line on stderr, got %r" % (
        case, p.stderr)
    m = re.search(re.escape(path) + r":(\d+):(\d+): \S", lines[0])
    assert m, "%s: no %s:LINE:COL: message in %r" % (case, path, lines[0])
    got = (int(m.group(1)), int(m.group(2)))
    assert got == (lineno, col), "%s: position %d:%d, want %d:%d (%r)" % (
        case, got[0], got[1], lineno, col, lines[0])


def test_check_config_unknown_key(env):
    _check_bad(env, *BAD[0])


def test_check_config_bad_ip(env):
    _check_bad(env, *BAD[1])


def test_check_config_bad_duration(env):
    _check_bad(env, *BAD[2])


def test_check_config_bad_record(env):
    # A bad address inside a static record, deep in the file.
    text = VALID.replace('aaaa: ["fd00::5"]', 'aaaa: ["10.0.0.7"]')
    path = _write(env, "badrec.yaml", text)
    p = env.run(["--check-config", path])
    assert p.returncode == 1, "exit %d, want 1" % p.returncode
    assert re.search(re.escape(path) + r":22:\d+: ", p.stderr), \
        "no %s:22:COL in %r" % (path, p.stderr)


def test_check_config_missing_file(env):
    path = os.path.join(env.tmp, "does-not-exist.yaml")
    p = env.run(["--check-config", path])
    assert p.returncode == 1, "exit %d, want 1" % p.returncode
    assert path in p.stderr, "message does not name the file: %r" % p.stderr


def test_check_config_yaml_syntax_error(env):
    text = VALID.replace("  workers: 1", "  workers: [1")
    path = _write(env, "syntax.yaml", text)
    p = env.run(["--check-config", path])
    assert p.returncode == 1, "exit %d, want 1" % p.returncode
    assert re.search(re.escape(path) + r":\d+:\d+: ", p.stderr), \
        "no FILE:LINE:COL in %r" % p.stderr


def test_start_with_bad_config_exits_1(env):
    text = _replace_line(VALID, 4, "  wrokers: 1")
    path = _write(env, "bad.yaml", text)
    p = env.run(["--config", path], timeout=5)
    assert p.returncode == 1, "exit %d, want 1" % p.returncode
    assert re.search(re.escape(path) + r":4:3: ", p.stderr), \
        "no %s:4:3: in %r" % (path, p.stderr)


def test_bind_failure_exits_nonzero(env):
    # 192.0.2.1 (TEST-NET-1) is not on this host: bind() fails, no traffic.
    cfg = env.config(port=5399)
    cfg["listen"]["addresses"] = ["192.0.2.1"]
    path = _write(env, "bind.yaml", harness.to_yaml(cfg) + "\n")
    _write(env, harness.STANDARD_FILE_NAME,
           harness.static_file_yaml(harness.STANDARD_FILE_RECORDS))
    t0 = time.monotonic()
    p = env.run(["--config", path], timeout=5)
    dt = time.monotonic() - t0
    assert p.returncode != 0, "exit 0 on a failed bind"
    assert p.returncode > 0, "killed by signal %d" % -p.returncode
    assert "192.0.2.1" in p.stderr, "error does not name the address: %r" % (
        p.stderr[-400:])
    assert dt < 3, "took %.1fs to fail" % dt


def test_port_in_use_exits_nonzero(env):
    # Someone else holds the UDP port: startup must fail, not half-serve.
    import socket
    port = harness.free_port()
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        holder.bind(("127.0.0.1", port))
        cfg = env.config(port=port)
        path = _write(env, "busy.yaml", harness.to_yaml(cfg) + "\n")
        _write(env, harness.STANDARD_FILE_NAME,
               harness.static_file_yaml(harness.STANDARD_FILE_RECORDS))
        try:
            p = subprocess.run([env.binary, "--config", path],
                               capture_output=True, text=True, timeout=5)
        except subprocess.TimeoutExpired:
            raise AssertionError("daemon kept running with its UDP port taken")
        assert p.returncode not in (0, None), "exit %s" % p.returncode
        assert str(port) in p.stderr or "127.0.0.1" in p.stderr, \
            "error does not name the address: %r" % p.stderr[-300:]
    finally:
        holder.close()


def test_check_config_error_in_static_file(env):
    # The position names the static file, not the main config.
    _write(env, "recs.yaml", "- {name: a.prod.svc.cluster.local, a: [10.0.0.1]}\n"
                             "- name: b.prod.svc.cluster.local\n"
                             "  a: [10.0.0.256]\n")
    text = VALID.replace("static:\n  records:\n",
                         "static:\n  files: [recs.yaml]\n  records:\n")
    path = _write(env, "withfile.yaml", text)
    p = env.run(["--check-config", path], cwd="/")
    assert p.returncode == 1, "exit %d, want 1 (%r)" % (p.returncode, p.stderr)
    rec = os.path.join(env.tmp, "recs.yaml")
    m = re.search(r"(\S*recs\.yaml):(\d+):(\d+): ", p.stderr)
    assert m, "no recs.yaml:LINE:COL in %r" % p.stderr
    assert os.path.realpath(m.group(1)) == os.path.realpath(rec) or \
        m.group(1) == "recs.yaml", "file named %r" % m.group(1)
    assert (int(m.group(2)), int(m.group(3))) == (3, 7), \
        "position %s:%s, want 3:7 (%r)" % (m.group(2), m.group(3), p.stderr)


def test_check_config_missing_static_file(env):
    text = VALID.replace("static:\n  records:\n",
                         "static:\n  files: [nope.yaml]\n  records:\n")
    path = _write(env, "missing.yaml", text)
    p = env.run(["--check-config", path])
    assert p.returncode == 1, "exit %d, want 1" % p.returncode
    assert "nope.yaml" in p.stderr, p.stderr
    assert re.search(re.escape(path) + r":21:\d+: ", p.stderr), \
        "no %s:21:COL (the files entry) in %r" % (path, p.stderr)


def test_check_config_refuses_a_fifo_and_deep_nesting(env):
    # Issue 22, item 11: a FIFO in static.files blocked the load for ever
    # (until someone wrote it), and 400 KB of nested flow sequences took
    # libyaml 98 s to reject: both on the thread that handles signals.
    fifo = os.path.join(env.tmp, "records.fifo")
    os.mkfifo(fifo)
    text = VALID.replace("static:\n  records:\n",
                         "static:\n  files: [records.fifo]\n  records:\n")
    path = _write(env, "fifo.yaml", text)
    p = env.run(["--check-config", path], timeout=10)
    assert p.returncode == 1 and "%s: not a regular file" % fifo in p.stderr, p.stderr
    deep = _write(env, "deep.yaml", "[" * 200000 + "]" * 200000 + "\n")
    p = env.run(["--check-config", deep], timeout=10)   # not minutes
    assert p.returncode == 1 and "%s:1:65: nested deeper than 64 levels" % deep in p.stderr, \
        p.stderr


def test_check_config_cname_with_other_data(env):
    text = VALID.replace(
        "    - {name: legacy.corp.internal, cname: db.prod.svc.cluster.local}",
        "    - {name: legacy.corp.internal, cname: db.prod.svc.cluster.local,"
        " a: [10.0.0.8]}")
    path = _write(env, "cname.yaml", text)
    p = env.run(["--check-config", path])
    assert p.returncode == 1, "exit %d, want 1 (CNAME next to A)" % p.returncode
    assert re.search(re.escape(path) + r":23:\d+: ", p.stderr), \
        "no %s:23:COL in %r" % (path, p.stderr)
