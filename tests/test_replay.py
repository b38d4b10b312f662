"""A repeated `traceview analyze` is written from the store before the command line is imported
(traceview/replay.py), with the same bytes and exit status as the command run in full; any change
to what it read, or to how it was asked, runs it in full again."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from traceview import replay

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "fixtures" / "generated" / "straggler_4rank"


def tv(tmp_path: Path, *args, env: dict | None = None,
       cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, bool]:
    """(the finished command, whether it ran in full: the command line imported, analyze_cli, which a
    replay never imports). Imports are listed on stderr by PYTHONPROFILEIMPORTTIME, which is not part of
    a command's identity."""
    e = {**os.environ, "TRACEVIEW_CACHE_DIR": str(tmp_path / "store"), "PYTHONPROFILEIMPORTTIME": "1", **(env or {})}
    p = subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True,
                       cwd=cwd or tmp_path, env=e, timeout=300)
    err = p.stderr.decode()
    full = any(line.split("|")[-1].strip() == "traceview.analyze_cli"
               for line in err.splitlines() if line.startswith("import time:"))
    p.stderr = "\n".join(line for line in err.splitlines() if not line.startswith("import time:"))
    return p, full


@pytest.fixture
def job(tmp_path):
    d = tmp_path / "job"
    shutil.copytree(JOB, d)
    return d


def test_repeat_is_replayed_with_the_same_bytes(tmp_path, job):
    reference, _ = tv(tmp_path, "analyze", job, "-f", "json", "--no-store")
    assert reference.returncode == 0, reference.stderr
    first, full1 = tv(tmp_path, "analyze", job, "-f", "json")
    second, full2 = tv(tmp_path, "analyze", job, "-f", "json")
    assert full1 and not full2
    assert first.stdout == second.stdout == reference.stdout
    assert first.returncode == second.returncode == 0 and second.stderr == ""
    assert json.loads(second.stdout)["world_size"] == 4
    # -o FILE, and each of the kept formats
    for fmt in ("json", "markdown", "text"):
        out = tmp_path / f"r.{fmt}"
        a, fa = tv(tmp_path, "analyze", job, "-f", fmt, "-o", out)
        got_a = out.read_bytes()
        out.unlink()
        b, fb = tv(tmp_path, "analyze", job, "-f", fmt, "-o", out)
        assert fa and not fb and a.returncode == b.returncode == 0
        assert out.read_bytes() == got_a
    ref_md, _ = tv(tmp_path, "analyze", job, "-f", "markdown", "--no-store")
    assert (tmp_path / "r.markdown").read_bytes() == ref_md.stdout


def test_other_options_or_places_run_in_full(tmp_path, job):
    tv(tmp_path, "analyze", job, "-f", "json")
    for args in (["--top", "3"], ["--jobs", "1"]):
        _, full = tv(tmp_path, "analyze", job, "-f", "json", *args)
        assert full
    _, full = tv(tmp_path, "analyze", job, "-f", "json", env={"TRACEVIEW_TOP_SECRET": "x"})
    assert full                  # every TRACEVIEW_* variable is part of the identity
    (tmp_path / "elsewhere").mkdir()
    _, full = tv(tmp_path, "analyze", job, "-f", "json", cwd=tmp_path / "elsewhere")
    assert full                  # the working directory too
    # what needs the command line is never replayed, and --no-store leaves nothing
    _, full = tv(tmp_path, "analyze", job, "-f", "json", "--progress")
    assert full
    _, full = tv(tmp_path, "analyze", job, "-f", "json", "--progress")
    assert full
    nostore = tmp_path / "nostore"
    _, _ = tv(tmp_path, "analyze", job, "-f", "json", "--no-store", env={"TRACEVIEW_CACHE_DIR": str(nostore)})
    assert not nostore.exists()


def test_a_changed_trace_or_directory_is_analyzed_again(tmp_path, job):
    first, _ = tv(tmp_path, "analyze", job, "-f", "json")
    # a rank rewritten with other content (its second half of events gone): its report, not the kept one
    r0 = job / "rank0.json"
    doc = json.loads(r0.read_text())
    doc["traceEvents"] = doc["traceEvents"][: len(doc["traceEvents"]) // 2]
    r0.write_text(json.dumps(doc))
    changed, full = tv(tmp_path, "analyze", job, "-f", "json")
    reference, _ = tv(tmp_path, "analyze", job, "-f", "json", "--no-store")
    assert full and changed.stdout == reference.stdout != first.stdout
    # a rank gone from the directory: the job has 3 ranks now
    (job / "rank3.json").unlink()
    shrunk, full = tv(tmp_path, "analyze", job, "-f", "json")
    files = [i["file"] for i in json.loads(shrunk.stdout)["inputs"]]
    assert full and files == ["rank0.json", "rank1.json", "rank2.json"]


def test_budget_exit_status_and_named_file_content(tmp_path, job):
    budget = tmp_path / "budget.toml"
    budget.write_text("max_idle_pct = 0.0\n")        # any idle at all violates it
    a, fa = tv(tmp_path, "analyze", job, "-f", "json", "--budget", budget)
    b, fb = tv(tmp_path, "analyze", job, "-f", "json", "--budget", budget)
    assert fa and not fb and a.returncode == b.returncode == 1 and a.stdout == b.stdout
    assert json.loads(b.stdout)["budget"]["violations"]
    # the same size (and, within the clock's tick, maybe the same mtime): the content decides
    budget.write_text("max_idle_pct = 100\n")
    c, fc = tv(tmp_path, "analyze", job, "-f", "json", "--budget", budget)
    assert fc and c.returncode == 0 and json.loads(c.stdout)["budget"]["violations"] == []


def test_a_damaged_kept_report_is_not_replayed(tmp_path, job):
    first, _ = tv(tmp_path, "analyze", job, "-f", "json")
    kept = list((tmp_path / "store" / "jobs").glob("*.json.kept"))
    assert len(kept) == 1
    data = kept[0].read_bytes()
    kept[0].write_bytes(data[:-10] + b"0123456789")      # the same size, other bytes: the hash says so
    again, full = tv(tmp_path, "analyze", job, "-f", "json")
    assert full and again.stdout == first.stdout
    entries = list((tmp_path / "store" / "replay").glob("*.json"))
    assert entries
    for e in entries:
        e.write_text("{not json")
    third, full = tv(tmp_path, "analyze", job, "-f", "json")
    assert full and third.stdout == first.stdout


def test_a_kept_report_damaged_in_place_is_never_put_at_o_file(tmp_path, job):
    """-o FILE is replayed in one read of the kept report, checked as it is copied: a kept report
    changed in place (the same size) leaves neither its bytes at FILE nor a temporary file beside
    it; the command runs in full and writes the report."""
    reference, _ = tv(tmp_path, "analyze", job, "-f", "json", "--no-store")
    out = tmp_path / "out" / "r.json"
    out.parent.mkdir()
    first, full1 = tv(tmp_path, "analyze", job, "-f", "json", "-o", out)
    second, full2 = tv(tmp_path, "analyze", job, "-f", "json", "-o", out)
    assert full1 and not full2 and out.read_bytes() == reference.stdout
    # the kept report is a link of the file the first run wrote (store.keep_linked), which the
    # replay found at -o and left in place: its payload file, changed in place (r.json with it)
    (kept,) = (tmp_path / "store" / "jobs").glob("*.json.payload")
    assert kept.stat().st_ino == out.stat().st_ino
    data = bytearray(kept.read_bytes())
    data[-20] ^= 0x01                                   # near the end: the last piece of the copy
    with open(kept, "r+b") as f:
        f.write(bytes(data))
    out.write_bytes(b"previous")
    third, full3 = tv(tmp_path, "analyze", job, "-f", "json", "-o", out)
    assert third.returncode == 0 and full3 and out.read_bytes() == reference.stdout
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json"]


def test_a_replay_to_the_file_the_kept_report_links_writes_nothing(tmp_path, job):
    """The JSON report of -o FILE is kept by a link of FILE: the same command again finds FILE
    already holding the kept report (the same file, its size and CRC-32 checked as it is read) and
    leaves it in place, its modification time set to now; -o another file is a copy, as before."""
    reference, _ = tv(tmp_path, "analyze", job, "-f", "json", "--no-store")
    out = tmp_path / "r.json"
    first, full1 = tv(tmp_path, "analyze", job, "-f", "json", "-o", out)
    (kept,) = (tmp_path / "store" / "jobs").glob("*.json.payload")
    ino = out.stat().st_ino
    assert full1 and kept.stat().st_ino == ino and out.stat().st_nlink == 2
    os.utime(out, (1_000_000_000, 1_000_000_000))              # 2001: as if written long ago
    second, full2 = tv(tmp_path, "analyze", job, "-f", "json", "-o", out)
    assert not full2 and second.returncode == 0 and second.stderr == ""
    assert out.stat().st_ino == ino and out.stat().st_nlink == 2 and out.read_bytes() == reference.stdout
    assert out.stat().st_mtime > 1_000_000_000 + 365 * 86400    # touched as a write would
    other = tmp_path / "other.json"
    shutil.copyfile(out, other)                                 # the same bytes, another file
    third, _ = tv(tmp_path, "analyze", job, "-f", "json", "-o", other)
    assert third.returncode == 0 and other.read_bytes() == reference.stdout
    assert other.stat().st_ino != ino and kept.stat().st_ino == ino


def test_entry_records_what_the_run_read(tmp_path, job, monkeypatch, capsys):
    """record() writes nothing when a trace changed during the run (the snapshot before differs);
    try_replay writes the kept payload the entry names, and nothing when the store lacks it."""
    from traceview.store import Store
    store = tmp_path / "s"
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(store))
    argv = ["analyze", str(job), "-f", "json"]
    monkeypatch.setattr(replay, "INVOCATION", argv)
    before = replay.snapshot([str(job)], [])
    assert before is not None and str(job / "rank0.json") in before and str(job) in before
    assert not replay.record(store, {**before, str(job / "rank0.json"): [0, 0, 0, 0, 0]},
                             [str(job)], [], ("k", "json"), None, 0)
    assert not (store / "replay").exists()
    assert replay.record(store, before, [str(job)], [], ("k", "json"), None, 3)
    assert replay.try_replay(argv) is None          # the entry names a report the store lacks
    assert Store(store).put_kept("k", "json", b'{"x": 1}\n')
    assert replay.try_replay(argv) == 3
    assert capsys.readouterr().out == '{"x": 1}\n'
    assert replay.try_replay([*argv, "--top", "2"]) is None      # another command


def test_another_output_file_is_a_copy_of_the_kept_report(tmp_path, job):
    """The same analysis written to another -o FILE is written from the store (the masked entry),
    with the bytes and exit status of the command run in full, whichever way -o is spelled."""
    reference, _ = tv(tmp_path, "analyze", job, "-f", "json", "--no-store")
    first, full1 = tv(tmp_path, "analyze", job, "-f", "json", "-o", tmp_path / "a.json")
    assert full1 and first.returncode == 0, first.stderr
    for spelled in (["-o", tmp_path / "b.json"], ["--output", tmp_path / "c.json"],
                    [f"--output={tmp_path / 'd.json'}"], ["-o", "e.json"]):
        out = Path(spelled[-1].split("=", 1)[-1] if isinstance(spelled[-1], str) else spelled[-1])
        out = out if out.is_absolute() else tmp_path / out
        got, full = tv(tmp_path, "analyze", job, "-f", "json", *spelled)
        assert not full and got.returncode == 0 and got.stdout == b"" and got.stderr == "", spelled
        assert out.read_bytes() == reference.stdout, spelled
    # to stdout it is another command (the kept report has no entry for it yet): run in full once
    _, full = tv(tmp_path, "analyze", job, "-f", "json")
    assert full
    # another option besides another file: run in full
    _, full = tv(tmp_path, "analyze", job, "-f", "json", "--top", "3", "-o", tmp_path / "f.json")
    assert full


def test_another_output_file_keeps_the_exit_status_and_follows_the_inputs(tmp_path, job):
    budget = tmp_path / "budget.toml"
    budget.write_text("max_idle_pct = 0.0\n")        # any idle at all violates it
    a, fa = tv(tmp_path, "analyze", job, "-f", "json", "--budget", budget, "-o", tmp_path / "a.json")
    b, fb = tv(tmp_path, "analyze", job, "-f", "json", "--budget", budget, "-o", tmp_path / "b.json")
    assert fa and not fb and a.returncode == b.returncode == 1
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    (job / "rank3.json").unlink()                    # the job changed: analyzed again
    c, fc = tv(tmp_path, "analyze", job, "-f", "json", "--budget", budget, "-o", tmp_path / "c.json")
    assert fc and len(json.loads((tmp_path / "c.json").read_text())["inputs"]) == 3


def test_masked_flags_are_analyzes_output_option():
    from traceview import analyze_cli
    flags = {name: f for name, f, _, _ in analyze_cli.OPTIONS}
    assert replay.OUT_FLAGS == flags["out"]


def test_masked_names_one_output_file_only():
    assert replay.masked(["analyze", "t", "-o", "r.json", "-f", "json"]) == \
        (["analyze", "t", replay.MASK, "-f", "json"], "r.json")
    assert replay.masked(["analyze", "t", "--output=r.json"]) == (["analyze", "t", replay.MASK], "r.json")
    assert replay.masked(["analyze", "t", "--output", "r.json"]) == (["analyze", "t", replay.MASK], "r.json")
    # the two spellings mask alike: either is the same command with another file
    assert replay.masked(["analyze", "t", "-o", "x"])[0] == replay.masked(["analyze", "t", "--output=y"])[0]
    for argv in (["analyze", "t"], ["analyze", "t", "-o"], ["analyze", "t", "-o", "a", "-o", "b"],
                 ["analyze", "t", "--output="], ["analyze", "t", "-o", "a", "--output=b"]):
        assert replay.masked(argv) is None, argv


def test_no_masked_entry_where_the_command_read_another_output(tmp_path, job, monkeypatch):
    """record() leaves the masked entry only where the run's own output is the masked value: a
    `-o` that the command line read as another option's value (`--step-regex -o`) is not its
    output, and a run to stdout has no file to mask."""
    store = tmp_path / "s"
    before = replay.snapshot([str(job)], [])
    entries = lambda: sorted(p.name[:2] for p in (store / "replay").glob("*.json"))  # noqa: E731
    argv = ["analyze", str(job), "--step-regex", "-o", "x.json"]
    monkeypatch.setattr(replay, "INVOCATION", argv)
    assert replay.record(store, before, [str(job)], [], ("k", "json"), None, 0)
    assert replay.record(store, before, [str(job)], [], ("k", "json"), "other.json", 0)
    assert all(not n.startswith("o-") for n in entries()) and len(entries()) == 1
    argv = ["analyze", str(job), "-o", "x.json"]
    monkeypatch.setattr(replay, "INVOCATION", argv)
    assert replay.record(store, before, [str(job)], [], ("k", "json"), "x.json", 0)
    assert [n for n in entries() if n.startswith("o-")] == ["o-"]
