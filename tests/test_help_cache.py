"""`traceview --help` is written from the kept copy of its text before typer is imported
(traceview/help_cache.py): the same bytes as the command line renders, and rendered anew whenever
what lays it out changes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from traceview import help_cache

RENDER = ("import sys; from traceview import cli, cli_common; cli_common.IN_CLI = True; "
          "sys.exit(cli.run_cli(sys.argv[1:]))")


def tv(cache: Path, *args, env: dict | None = None) -> tuple[subprocess.CompletedProcess, bool]:
    """(the finished command through the entry point, whether typer was imported)."""
    e = {**os.environ, "TRACEVIEW_CACHE_DIR": str(cache), "PYTHONPROFILEIMPORTTIME": "1", **(env or {})}
    p = subprocess.run([sys.executable, "-m", "traceview", *args], capture_output=True, env=e, timeout=120)
    err = p.stderr.decode()
    full = any(line.split("|")[-1].strip() == "typer" for line in err.splitlines() if line.startswith("import time:"))
    return p, full


def rendered(*args, env: dict | None = None) -> bytes:
    """The help as the command line itself renders it, with no copy involved (a second method)."""
    e = {**os.environ, **(env or {})}
    e.pop("TRACEVIEW_CACHE_DIR", None)
    p = subprocess.run([sys.executable, "-c", RENDER, *args], capture_output=True, env=e, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("args", [("--help",), ("analyze", "--help"), ("diff", "--help")])
def test_second_help_is_the_copy_with_the_same_bytes(tmp_path, args):
    reference = rendered(*args)
    assert reference.startswith(b"Usage: traceview") and len(reference) > 200
    first, full1 = tv(tmp_path, *args)
    second, full2 = tv(tmp_path, *args)
    assert full1 and not full2
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout == reference
    assert len(list((tmp_path / "help").glob("*.txt"))) == 1


def test_another_width_is_rendered_again(tmp_path):
    wide, _ = tv(tmp_path, "analyze", "--help", env={"COLUMNS": "200"})
    narrow, full = tv(tmp_path, "analyze", "--help", env={"COLUMNS": "60"})
    assert full
    assert narrow.stdout == rendered("analyze", "--help", env={"COLUMNS": "60"}) != wide.stdout
    assert max(len(line) for line in narrow.stdout.decode().splitlines()) <= 60
    assert max(len(line) for line in wide.stdout.decode().splitlines()) > 60   # click caps it at 80


def test_damaged_copy_is_rendered_again(tmp_path):
    tv(tmp_path, "--help")
    [copy] = (tmp_path / "help").glob("*.txt")
    copy.write_bytes(b"Usage: traceview [OPTIONS] half")         # no final newline: not a whole copy
    p, full = tv(tmp_path, "--help")
    assert full and p.returncode == 0 and p.stdout == rendered("--help")
    copy.write_bytes(b"\xff\xfe not utf-8\n")
    p, full = tv(tmp_path, "--help")
    assert full and p.stdout == rendered("--help")
    p, full = tv(tmp_path, "--help")                          # and kept again, whole
    assert not full and p.stdout == rendered("--help")


def test_unwritable_cache_still_prints_help(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the folder would be")
    for _ in range(2):
        p, full = tv(blocker, "--help")
        assert full and p.returncode == 0 and p.stdout == rendered("--help")
        assert "Traceback" not in p.stderr.decode()
    assert blocker.read_text() == "a file where the folder would be"


def test_what_is_a_plain_request_for_help():
    assert help_cache.wanted(["--help"]) and help_cache.wanted(["analyze", "--help"])
    for argv in ([], ["--version"], ["analyze"], ["analyze", "run.json", "--help"], ["-f", "--help"],
                 ["analyze", "--help", "x"], ["ana\u0301lyze", "--help"], ["../x", "--help"]):
        assert not help_cache.wanted(argv), argv


def test_key_follows_the_code_and_the_terminal(monkeypatch):
    from traceview import code_stamp
    base = help_cache.key(["--help"])
    assert help_cache.key(["analyze", "--help"]) != base
    monkeypatch.setattr(code_stamp, "code_stamp", lambda: "another checkout")
    assert help_cache.key(["--help"]) != base
    monkeypatch.undo()
    monkeypatch.setenv("COLUMNS", "123")
    assert help_cache.key(["--help"]) != base
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(help_cache, "_terminal", lambda: [132, 40])
    assert help_cache.key(["--help"]) != base
