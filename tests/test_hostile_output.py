"""Hostile names and output promises: control characters neutralized for each destination, the
--out-dir bundle all or nothing (also under SIGTERM/SIGINT), -o through symlinks and onto FIFOs and
devices, option values checked before work, one-line usage errors."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import tty as termios_tty
from pathlib import Path

import pytest
from helpers import ROOT
from reports_support import GEN, validate

from traceview.cli import run_cli

CONTROL = json.loads((GEN / "control_names.expected.json").read_text())
KERNEL, ANNOTATION, OP = CONTROL["kernel_name"], CONTROL["annotation_name"], CONTROL["op_name"]
TINY = GEN / "tiny_breakdown.json"
SGR = re.compile(rb"\x1b\[[0-9;]*m")            # the colours traceview itself adds on a terminal


def bad_bytes(data: bytes) -> list[int]:
    """Bytes a terminal acts on: below 0x20 except tab and newline, and DEL."""
    return sorted({b for b in data if (b < 0x20 and b not in (9, 10)) or b == 0x7F})


def shown(name: str) -> str:
    """The escaped form, written out independently of reports/escape.py: \\r and \\xNN."""
    out = []
    for ch in name:
        o = ord(ch)
        if ch == "\r":
            out.append("\\r")
        elif ch in "\t\n":
            out.append(ch)
        elif o < 0x20 or 0x7F <= o <= 0x9F:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    return "".join(out)


def strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)


def cli(capsys, *args) -> tuple[int, str, str]:
    """The command line in-process: (exit code, stdout, stderr)."""
    code = run_cli([str(a) for a in args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def tv(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, **(env or {})}, **kw)


def hostile_file(tmp_path: Path, src: Path) -> Path:
    """A copy of `src` whose file name holds ESC, a newline, CR and DEL."""
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    p = d / f"run\x1b[2J\nnext\r\x7f{src.suffix}"
    shutil.copy(src, p)
    return p


# --- 1. text neutralized for where it goes ---------------------------------------------------------

def test_escaped_form_is_written_out_by_hand():
    assert shown("a\x1b[2J\rb\x7f\x9bc\td") == "a\\x1b[2J\\rb\\x7f\\x9bc\td"


def run_in_pty(args, env) -> tuple[int, bytes]:
    """Run traceview with stdout and stderr on a pseudo-terminal (raw: no newline translation)."""
    master, slave = pty.openpty()
    termios_tty.setraw(slave)
    p = subprocess.Popen([sys.executable, "-m", "traceview", *map(str, args)], stdout=slave, stderr=slave,
                         stdin=subprocess.DEVNULL, cwd=ROOT, env={**os.environ, **env})
    os.close(slave)
    data = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 1.0)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:        # EIO: the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    return p.wait(timeout=60), data


@pytest.mark.parametrize("src", ["control_names.json", "control_names.sqlite"])
def test_no_control_bytes_reach_the_terminal(tmp_path, src):
    """analyze and diff text output, trace names and file names with ESC/CR/DEL/C1, under a pty."""
    f = hostile_file(tmp_path, GEN / src)
    for color, args in (("1", ["analyze", f]), ("0", ["analyze", f]), ("1", ["diff", TINY, f])):
        env = {"FORCE_COLOR": "1"} if color == "1" else {"NO_COLOR": "1", "FORCE_COLOR": ""}
        if True:
            code, data = run_in_pty(args, env)
            assert code == 0, data[-2000:]
            plain = SGR.sub(b"", data) if color == "1" else data
            assert bad_bytes(plain) == [], (args, bad_bytes(plain))
            text = plain.decode("utf-8")
            assert "\x9b" not in text
            assert shown("run\x1b[2J") in text                          # the file name, escaped
            if args[0] == "analyze":
                assert shown(KERNEL)[:40] in text                       # the kernel name, escaped


def test_error_line_stays_one_line_on_a_terminal(tmp_path):
    bad = tmp_path / "in"
    bad.mkdir()
    f = bad / "cut\x1b]8;;http:x.invalid\x07\nsecond\r.json"
    f.write_text('{"traceEvents": [')
    code, data = run_in_pty(["analyze", f], {"NO_COLOR": "1"})
    assert code == 2
    assert bad_bytes(data) == [] and data.count(b"\n") == 1 and data.endswith(b"\n"), data
    line = data.decode()
    assert line.startswith("traceview: ") and "\\x1b]8;;http:x.invalid\\x07\\nsecond\\r.json" in line


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json"])
def test_each_format_shows_or_keeps_control_characters(capsys, tmp_path, fmt):
    f = hostile_file(tmp_path, GEN / "control_names.json")
    out = tmp_path / f"r.{fmt}"
    code, _, err = cli(capsys, "analyze", f, "-f", fmt, "-o", out)
    assert code == 0, err
    data = out.read_bytes()
    assert bad_bytes(data) == [] and "\x9b".encode() not in data
    text = data.decode()
    if fmt == "json":      # the data keeps the names exactly: JSON escapes are not a change of value
        doc = validate(json.loads(text))
        kernels = {k["name"] for k in doc["top_kernels"]}
        assert KERNEL in kernels
        assert doc["inputs"][0]["file"] == f.name
    elif fmt == "markdown":   # shown, then Markdown-escaped: a backslash and [ get a backslash
        assert "run\\\\x1b\\[2J" in text and "\\\\x07" in text and "\\\\x7f\\\\x9b31m" in text
    else:
        assert "\\x1b[2J" in text and "\\x07" in text and "\\r" in text
        if fmt == "html":     # the text report clips the kernel name before its DEL and C1 CSI
            assert shown(KERNEL) in text


def test_text_to_a_pipe_has_no_control_bytes(tmp_path):
    f = hostile_file(tmp_path, GEN / "control_names.sqlite")
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(f)], capture_output=True, cwd=ROOT,
                       timeout=300, env={**os.environ, "FORCE_COLOR": "", "NO_COLOR": ""})
    assert r.returncode == 0 and bad_bytes(r.stdout) == [] and bad_bytes(r.stderr) == [], r.stderr
    assert shown(KERNEL)[:40].encode() in r.stdout


def test_diff_formats_show_control_characters(capsys, tmp_path):
    f = hostile_file(tmp_path, GEN / "control_names.json")
    for fmt in ("text", "markdown", "html", "json"):
        out = tmp_path / f"d.{fmt}"
        code, _, err = cli(capsys, "diff", TINY, f, "-f", fmt, "-o", out)
        assert code == 0, err
        data = out.read_bytes()
        assert bad_bytes(data) == [], fmt
        if fmt == "json":
            doc = validate(json.loads(data))
            assert any(f.name in x for x in strings(doc))      # the parsed value is the raw name
        elif fmt == "markdown":
            assert "run\\\\x1b\\[2J" in data.decode()
        else:
            assert shown("run\x1b[2J") in data.decode(), fmt


def test_out_dir_with_control_names_draws_charts_without_them(capsys, tmp_path):
    """The PNG renderer rejects ESC: the charts get the names with control characters removed."""
    out = tmp_path / "bundle"
    code, _, err = cli(capsys, "analyze", GEN / "control_names.json", "--out-dir", out)
    assert code == 0, err
    svgs = sorted((out / "charts").glob("*.svg"))
    pngs = sorted((out / "charts").glob("*.png"))
    assert svgs and len(pngs) == len(svgs)
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stripped = "".join(ch for ch in KERNEL if not (ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F))
    assert stripped.startswith("gemm[2J]8;;http://x.invalid/link")
    svg_text = "".join(p.read_text() for p in svgs)
    assert bad_bytes(svg_text.encode()) == [] and "\x9b" not in svg_text
    for name in ("report.md", "report.html", "report.json"):
        assert bad_bytes((out / name).read_bytes()) == [], name
    assert "gemm\\\\x1b\\[2J" in (out / "report.md").read_text()


# --- 2. all-or-nothing --out-dir ---------------------------------------------------------------------

def snapshot(d: Path) -> dict:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def make_old_bundle(capsys, parent: Path) -> Path:
    out = parent / "perf"
    code, _, err = cli(capsys, "analyze", TINY, "--out-dir", out, "-f", "json")
    assert code == 0, err
    return out


@pytest.mark.parametrize("sig,code,foreign", [(signal.SIGTERM, 128 + signal.SIGTERM, False),
                                              (signal.SIGINT, 130, False), (signal.SIGTERM, 143, True)])
def test_signal_during_the_write_leaves_the_old_bundle(capsys, tmp_path, sig, code, foreign):
    out = make_old_bundle(capsys, tmp_path)
    if foreign:     # a directory that also holds a file of the user's
        (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    p = subprocess.Popen([sys.executable, "-m", "traceview", "analyze", str(GEN / "moe_overlap_1rank.json"),
                          "--out-dir", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=ROOT, env={**os.environ, "TRACEVIEW_TEST_WRITE_DELAY": "60"})
    deadline = time.monotonic() + 240
    staged = []
    while time.monotonic() < deadline and not staged:       # the write phase has begun: a file is staged
        staged = [q for q in tmp_path.glob(".perf.*.tmp") if any(q.rglob("*.*"))]
        time.sleep(0.05)
    assert staged, "the write phase never started"
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == code, err
    assert err.count("\n") == 1 and err.startswith("traceview: ") and "interrupted" in err, err
    assert snapshot(out) == before                      # byte-identical
    assert sorted(q.name for q in tmp_path.iterdir()) == ["perf"]     # no temp folders left


def test_failed_write_leaves_the_old_bundle_and_no_temp_files(capsys, tmp_path):
    from traceview.errors import UsageError
    from traceview.output import write_tree
    out = make_old_bundle(capsys, tmp_path)
    before = snapshot(out)
    files = [("report.json", "{}"), ("report.json/x", "cannot: report.json is a file")]
    with pytest.raises(UsageError):
        write_tree(files, out)
    assert snapshot(out) == before
    assert sorted(q.name for q in tmp_path.iterdir()) == ["perf"]


def test_rerun_replaces_the_bundle_as_a_whole(capsys, tmp_path):
    out = make_old_bundle(capsys, tmp_path)
    (out / "charts" / "old_chart.svg").write_text("<svg/>")   # a chart an older run drew
    mode = stat.S_IMODE(out.stat().st_mode)
    code, _, err = cli(capsys, "analyze", GEN / "moe_overlap_1rank.json", "--out-dir", out, "-f", "json")
    assert code == 0, err
    assert not (out / "charts" / "old_chart.svg").exists()
    assert json.loads((out / "report.json").read_text())["inputs"][0]["file"] == "moe_overlap_1rank.json"
    assert stat.S_IMODE(out.stat().st_mode) == mode
    assert sorted(q.name for q in tmp_path.iterdir()) == ["perf"]


def test_out_dir_holding_other_files_keeps_them(capsys, tmp_path):
    """A directory with files traceview did not write: they stay; the old run's extra chart goes."""
    out = make_old_bundle(capsys, tmp_path)
    (out / "notes.txt").write_text("mine")
    (out / "charts" / "old_chart.svg").write_text("<svg/>")
    code, _, err = cli(capsys, "analyze", GEN / "moe_overlap_1rank.json", "--out-dir", out, "-f", "json")
    assert code == 0, err
    assert (out / "notes.txt").read_text() == "mine" and not (out / "charts" / "old_chart.svg").exists()
    assert json.loads((out / "report.json").read_text())["inputs"][0]["file"] == "moe_overlap_1rank.json"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["perf"]


def test_o_inside_the_bundle_is_part_of_it(capsys, tmp_path):
    out = tmp_path / "perf"
    for _ in range(2):      # the rerun accepts the file an earlier run wrote with -o
        code, _, err = cli(capsys, "analyze", TINY, "--out-dir", out, "-f", "markdown", "-o", out / "summary.md")
        assert code == 0, err
    assert (out / "summary.md").read_text().startswith("#")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["perf"]


# --- 3. -o onto links, FIFOs and devices -----------------------------------------------------------

def test_o_writes_through_a_symlink(capsys, tmp_path):
    target = tmp_path / "real" / "report.json"
    target.parent.mkdir()
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    code, _, err = cli(capsys, "analyze", TINY, "-f", "json", "-o", link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["schema"] == "traceview.report/1"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.json"]
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "real" / "new.json")
    code, _, err = cli(capsys, "analyze", TINY, "-f", "json", "-o", dangling)
    assert code == 0 and dangling.is_symlink() and (tmp_path / "real" / "new.json").exists(), err


def test_o_onto_a_fifo_writes_into_it(capsys, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo, "rb") as fh:
            got["data"] = fh.read()

    t = threading.Thread(target=reader)
    t.start()
    code, _, err = cli(capsys, "analyze", TINY, "-f", "json", "-o", fifo)
    t.join(timeout=60)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert validate(json.loads(got["data"]))["schema"] == "traceview.report/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_o_onto_devices_writes_without_replacing(tmp_path):
    before = os.lstat("/dev/null")
    r = tv("analyze", TINY, "-f", "json", "-o", "/dev/null")
    after = os.lstat("/dev/null")
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)
    assert not list(Path("/dev").glob(".null.*"))
    r = tv("analyze", TINY, "-f", "json", "-o", "/dev/stdout")
    assert r.returncode == 0, r.stderr
    assert validate(json.loads(r.stdout))["schema"] == "traceview.report/1"
    assert os.path.islink("/dev/stdout") or not os.path.isfile("/dev/stdout")


# --- 4. option values checked before any work -------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (["--top", str(2 ** 70)], "--top must be at most"),
    (["--peak-tflops", "inf"], "--peak-tflops must be a finite number"),
    (["--peak-tflops", "nan"], "--peak-tflops must be a finite number"),
    (["--peak-tflops", "-inf"], "--peak-tflops must be a finite number"),
    (["--tokens-per-step", str(2 ** 64)], "--tokens-per-step must be at most"),
    (["--out-dir", "/proc/traceview-x"], "/proc/traceview-x"),
    (["-o", "/proc/traceview-x/r.json"], "/proc/traceview-x/r.json"),
])
def test_analyze_options_refused_before_work(capsys, tmp_path, args, words):
    """The trace does not exist: the option is refused first, so nothing was read."""
    code, out, err = cli(capsys, "analyze", tmp_path / "absent.json", "-f", "json", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err and "absent" not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,words", [
    (["--fail-if-slower", "nan"], "--fail-if-slower must be a finite number"),
    (["--fail-if-slower", "inf"], "--fail-if-slower must be a finite number"),
    (["--fail-if-slower", "-inf"], "--fail-if-slower must be a finite number"),
    (["--noise-floor", "nan"], "--noise-floor must be a finite number"),
    (["--top", str(2 ** 70)], "--top must be at most"),
    (["-o", "/proc/traceview-x/d.json"], "/proc/traceview-x/d.json"),
])
def test_diff_options_refused_before_work(capsys, tmp_path, args, words):
    code, out, err = cli(capsys, "diff", tmp_path / "a.json", tmp_path / "b.json", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err and "a.json" not in err, err


def test_fail_if_slower_still_gates(capsys):
    """A finite threshold still works: a run against itself is not slower (exit 0)."""
    code, _, err = cli(capsys, "diff", TINY, TINY, "--fail-if-slower", "0", "-f", "json")
    assert code == 0, err


@pytest.mark.parametrize("args", [
    ["--tflops-per-gpu", "1e400"], ["--tokens-per-second-per-gpu", "1e999999"], ["--mfu", "1e400", "--gpu", "H200"],
    ["--step-time", "1e-400", "--tokens-per-step", "5"], ["--peak-tflops", "1e-300", "--tflops-per-gpu", "1e300"],
])
def test_mfu_overflow_is_one_line(args):
    r = tv("mfu", "--model", "deepseek-v3", *args)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("traceview: ") and "Traceback" not in r.stderr


# --- 5. one-line usage errors -------------------------------------------------------------------------

@pytest.mark.parametrize("args,command,words", [
    (["analyze", "--top", "x", "t.json"], "traceview analyze", "'--top'"),
    (["analyze"], "traceview analyze", "Missing argument"),
    (["analyze", "t.json", "--nope"], "traceview analyze", "--nope"),
    (["bogus"], "traceview", "No such command"),
    (["diff", "a.json"], "traceview diff", "Missing argument"),
    (["mfu", "--seq-len", "x"], "traceview mfu", "'--seq-len'"),
])
def test_usage_errors_are_one_line_and_a_hint(capsys, args, command, words):
    code, out, err = cli(capsys, *args)
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 2, err
    assert lines[0].startswith("traceview: ") and words in lines[0]
    assert lines[1] == f"Try '{command} --help'."


def test_option_missing_its_value_is_one_line(capsys):
    code, out, err = cli(capsys, "analyze", "t.json", "--format")
    assert code == 2 and out == "" and err == "traceview: Option '--format' requires an argument.\n"


def test_usage_error_from_the_real_entry_point():
    r = tv("analyze", "--top", "\x1b[2Jx", "t.json")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 2 and "\x1b" not in r.stderr, r.stderr


def test_o_dev_stdout_redirected_to_a_file_keeps_that_file(tmp_path):
    """stdout is a regular file: -o /dev/stdout writes into it (the shell's file is not replaced)."""
    target = tmp_path / "redirected.json"
    with open(target, "wb") as fh:
        ino = os.fstat(fh.fileno()).st_ino
        r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(TINY), "-f", "json", "-o", "/dev/stdout"],
                           stdout=fh, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert target.stat().st_ino == ino
    assert validate(json.loads(target.read_text()))["schema"] == "traceview.report/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["redirected.json"]


def test_sigterm_during_o_leaves_the_old_file(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("previous report")
    p = subprocess.Popen([sys.executable, "-m", "traceview", "analyze", str(TINY), "-f", "json", "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, "TRACEVIEW_TEST_WRITE_DELAY": "60"})
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not list(tmp_path.glob(".r.json.*.tmp")):
        time.sleep(0.05)
    assert list(tmp_path.glob(".r.json.*.tmp")), "the write never started"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM and err.count("\n") == 1 and "interrupted" in err, err
    assert out.read_text() == "previous report"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["r.json"]
