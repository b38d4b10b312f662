"""analyze_cli.parse reads `traceview analyze ...` without typer only where typer reads it the same:
its table of options equals the parameters typer builds from cli.analyze, and for generated command
lines (known and unknown options, `=` forms, repeats, values that are numbers, text, paths that exist
or not, `-`, `--`, lone surrogates) every command line it reads gives the keyword arguments typer
gives the command, value for value and type for type; the rest it leaves to typer (None)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.main import get_command

from traceview import analyze_cli, cli

ANALYZE = get_command(cli.app).commands["analyze"]    # type: ignore[attr-defined]
HERE = Path(__file__).resolve().parent


def test_the_table_is_typers_parameters():
    params = [p for p in ANALYZE.params if p.name != "paths"]
    assert [p.name for p in params] == [name for name, *_ in analyze_cli.OPTIONS]
    for p, (name, flags, kind, default) in zip(params, analyze_cli.OPTIONS, strict=True):
        assert set(p.opts) == set(flags) and not p.secondary_opts, name
        assert p.type_descriptor.annotation == kind, name
        assert p.default == default and type(p.default) is type(default), name
        assert bool(getattr(p, "is_flag", False)) == (kind is bool), name
        assert p.multiple == (kind == list[str] or kind == analyze_cli.List[str]), name
        assert not p.required and p.envvar is None and p.callback is None, name
    paths = ANALYZE.params[0]
    assert paths.name == "paths" and paths.nargs == -1 and paths.required


def typer_kwargs(argv, monkeypatch, capsys):
    """What typer calls analyze's work with for `analyze ARGV`, or None (it refused: exit != 0)."""
    got = {}

    def fake(**kw):
        got.update(kw)
        return 0
    monkeypatch.setattr(cli, "analyze_main", fake)
    rc = cli.run_cli(["analyze", *argv])
    capsys.readouterr()
    return got if rc == 0 and got else None


def typed(kw):
    return None if kw is None else {k: (type(v).__name__, repr(v)) for k, v in kw.items()}


FLAGS = [f for _, flags, _, _ in analyze_cli.OPTIONS for f in flags]
EXISTING = [str(HERE / "helpers.py"), str(HERE), "."]
VALUES = st.one_of(
    st.sampled_from(["json", "text", "10", "0", "-3", "007", " 4", "2.5", "1e3", "nan", "", "x y", "-", "--",
                     "--top", "a=b", "\udcff", "caf\xe9", "a\x00b", "16G", "ProfilerStep#(\\d+)", *EXISTING,
                     "/no/such/file.json", "t.json.gz"]),
    st.from_regex(r"-?[0-9]{1,4}(\.[0-9]{1,3})?", fullmatch=True),
    st.text(max_size=6),
)
TOKEN = st.one_of(
    st.tuples(st.sampled_from(FLAGS), VALUES).map(lambda t: [t[0], t[1]]),
    st.tuples(st.sampled_from([f for f in FLAGS if f.startswith("--")]), VALUES).map(lambda t: [f"{t[0]}={t[1]}"]),
    st.sampled_from(FLAGS).map(lambda f: [f]),
    st.sampled_from(["--help", "--version", "-h", "--bogus", "-x", "--", "-", "-fjson", "-f=json"]).map(lambda f: [f]),
    VALUES.map(lambda v: [v]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(TOKEN, max_size=6).map(lambda ts: [t for tok in ts for t in tok]))
def test_what_parse_reads_typer_reads_the_same(argv, monkeypatch, capsys):
    mine = analyze_cli.parse(argv)
    if mine is not None:
        assert typed(mine) == typed(typer_kwargs(argv, monkeypatch, capsys)), argv


@pytest.mark.parametrize("argv", [
    ["t.json"], ["t.json", "--no-store", "-f", "json", "-o", "r.json"], ["a.json", "b.json", "--jobs", "2"],
    ["--format=markdown", "t.json", "--top", "3", "--comm-regex", "x", "--comm-regex", "y"],
    ["t.json", "--peak-tflops", "989.5", "--tokens-per-step", "4096", "--store", "s", "--debug", "-j", "1"],
    [str(HERE), "--config", str(HERE / "helpers.py"), "--max-input-size", "16G", "--step-regex", "step_(\\d+)"],
])
def test_the_usual_command_lines_are_read_here_as_typer_reads_them(argv, monkeypatch, capsys):
    mine = analyze_cli.parse(argv)
    assert mine is not None
    assert typed(mine) == typed(typer_kwargs(argv, monkeypatch, capsys))


@pytest.mark.parametrize("argv", [
    [], ["--top", "3"], ["t.json", "--top", " 3"], ["t.json", "--top", "3", "--top", "4"], ["t.json", "--help"],
    ["t.json", "--top"], ["t.json", "-f", "-o"], ["--", "t.json"], ["-"], ["t.json", "--no-store=1"],
    ["t.json", "--peak-tflops", "1e3"], ["t.json", "--jobs", "-1"], ["t.json", "-fjson"], ["\udcff.json"],
])
def test_what_needs_typer_is_left_to_it(argv):
    assert analyze_cli.parse(argv) is None


def test_a_shell_completion_request_is_left_to_typer(monkeypatch):
    monkeypatch.setenv("_TRACEVIEW_COMPLETE", "bash_source")
    assert analyze_cli.parse(["t.json"]) is None


def test_an_unreadable_path_is_left_to_typer(tmp_path, monkeypatch):
    f = tmp_path / "t.json"
    f.write_text("{}")
    monkeypatch.setattr(os, "access", lambda p, mode: False)
    assert analyze_cli.parse([str(f)]) is None
    assert analyze_cli.parse([str(tmp_path / "absent.json")]) is not None    # typer checks only what exists


def test_the_plain_command_runs_without_typer_or_pydantic(tmp_path):
    code = ("import sys, atexit\n"
            "atexit.register(lambda: print('typer' in sys.modules, 'pydantic' in sys.modules, file=sys.stderr))\n"
            "sys.argv = ['traceview', 'analyze', sys.argv[1], '--no-store', '-f', 'json']\n"
            "from traceview import launch\nlaunch.main()\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "absent.json")], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "no such file" in r.stderr
    assert r.stderr.splitlines()[-1] == "False False"
