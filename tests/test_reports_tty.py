"""Colours in the text report only on a terminal."""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys

from helpers import ROOT
from reports_support import GEN

from traceview.reports import tty

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SAMPLE = """traceview 0.1.0 — 1 input(s)

Budget b.toml: 1 of 2 threshold(s) violated
  VIOLATED overall: idle 20.3% above the budget maximum 15.0%

Top kernels by GPU time
kernel  class    count  ms
------  -------  -----  ----
gemm    compute      3  1.000
warning: something odd
"""


def test_colorize_marks_lines_and_keeps_layout():
    out = tty.colorize(SAMPLE)
    assert ANSI.sub("", out) == SAMPLE                      # only escape codes added
    lines = out.split("\n")
    assert lines[0].startswith(tty.BOLD)
    assert lines[2].startswith(tty.RED) and lines[3].startswith(tty.RED)
    assert lines[5].startswith(tty.CYAN) and lines[6].startswith(tty.BOLD)
    assert lines[8] == "gemm    compute      3  1.000"   # data rows untouched
    assert lines[9].startswith(tty.YELLOW)


def test_want_color(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True
    for k in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(k, raising=False)
    assert tty.want_color(Tty()) and not tty.want_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not tty.want_color(Tty())
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not tty.want_color(Tty())
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert tty.want_color(io.StringIO())


def test_no_colour_when_piped():
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(GEN / "tiny_breakdown.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != "FORCE_COLOR"})
    assert r.returncode == 0, r.stderr
    assert "\x1b[" not in r.stdout and r.stdout.startswith("traceview ")


def test_colour_on_a_terminal():
    import pty
    out = []
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm"
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "traceview", "analyze", str(GEN / "tiny_breakdown.json")], env)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out.append(chunk)
    os.waitpid(pid, 0)
    text = b"".join(out).decode("utf-8", "replace")
    assert tty.BOLD in text and "traceview " in ANSI.sub("", text)
