"""Executors: the same report in process and on a process pool; bad ranks stop the run in one line
or are skipped and listed; a worker that dies is retried once; progress only when asked or on a TTY."""
import json
import os
import subprocess
import sys

import pytest

from fixtures import moe_job
from traceview.cli import run_cli

JOB = moe_job.Job(ranks=16, steps=3, layers=8)


@pytest.fixture(scope="module")
def job16(tmp_path_factory):
    d = tmp_path_factory.mktemp("job16")
    moe_job.write(d, JOB)
    return d


def analyze(tmp_path, *args, fmt="json"):
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}.{fmt}"
    rc = run_cli(["analyze", *map(str, args), "-f", fmt, "-o", str(out)])
    return rc, (out.read_text() if out.exists() else None)


def test_pool_gives_the_report_of_one_process_and_the_planted_causes(tmp_path, job16):
    rc1, one = analyze(tmp_path, job16, "--jobs", "1", "--no-store")
    rc2, two = analyze(tmp_path, job16, "--jobs", "2", "--no-store")
    rc3, stored = analyze(tmp_path, job16, "--jobs", "2", "--store", tmp_path / "s")
    rc4, again = analyze(tmp_path, job16, "--jobs", "2", "--store", tmp_path / "s")
    assert rc1 == rc2 == rc3 == rc4 == 0
    assert one == two == stored == again
    doc, want = json.loads(one), moe_job.expected(JOB)
    top = doc["stragglers"][0]
    assert (top["rank"], top["times_last"], top["total_skew_ns"], top["wait_caused_ns"]) == \
        (want["straggler"], want["times_last"], want["total_skew_ns"], want["wait_caused_ns"])
    assert all(s["times_last"] == 0 for s in doc["stragglers"][1:])
    a2a = [c for c in doc["collectives"] if c["kind"] == "all_to_all"]
    assert len(a2a) == want["all_to_alls"] and {c["skew_ns"] for c in a2a} == {want["skew_ns"]}
    experts = {(r["rank"], r["layer"]): r["compute_ns"] for r in doc["layers"]
               if r["stage"] == "experts" and r["step"] == 1}
    slow = {k: v for k, v in experts.items() if v != want["experts_compute_ns"]}
    assert slow == {(r, want["slow_layer"]): want["slow_experts_compute_ns"] for r in want["slow_ranks"]}
    assert {r["step_time_ns"] for r in doc["per_rank"]} == {want["step_time_ns"]}


def corrupt(job, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in sorted(job.iterdir()):
        (bad / f.name).write_bytes(f.read_bytes())
    victim = bad / "rank_00005.json"
    victim.write_bytes(victim.read_bytes()[:1000])
    return bad, victim


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_corrupt_rank_stops_the_run_in_one_line_naming_it(tmp_path, job16, jobs, capsys):
    bad, victim = corrupt(job16, tmp_path)
    out = tmp_path / "r.json"
    assert run_cli(["analyze", str(bad), "-f", "json", "-o", str(out), "--jobs", jobs,
                    "--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(victim) in err[0] and "Traceback" not in err[0]
    assert not out.exists()


def test_skip_bad_ranks_analyzes_the_rest_and_every_format_lists_it(tmp_path, job16):
    bad, victim = corrupt(job16, tmp_path)
    rc, text = analyze(tmp_path, bad, "--skip-bad-ranks", "--jobs", "2", "--no-store")
    assert rc == 0
    doc = json.loads(text)
    assert [s["file"] for s in doc["skipped_ranks"]] == [str(victim)] and doc["skipped_ranks"][0]["reason"]
    assert 5 not in {r["rank"] for r in doc["inputs"]} and len(doc["inputs"]) == JOB.ranks - 1
    for fmt in ("text", "markdown", "html"):
        rc, body = analyze(tmp_path, bad, "--skip-bad-ranks", "--jobs", "1", "--no-store", fmt=fmt)
        assert rc == 0 and "rank_00005.json" in body and "kipped" in body, fmt


def test_a_worker_that_dies_is_retried_once(tmp_path, job16, monkeypatch):
    marker = tmp_path / "die"
    marker.write_text("rank_00007.json")
    monkeypatch.setenv("TRACEVIEW_FAULT_DIE_ONCE", str(marker))
    rc, text = analyze(tmp_path, job16, "--jobs", "2", "--no-store")
    assert rc == 0 and not marker.exists()           # it died once, and the retry succeeded
    rc1, one = analyze(tmp_path, job16, "--jobs", "1", "--no-store")
    assert text == one


def test_a_rank_that_kills_its_worker_twice_is_a_failed_rank(tmp_path, job16, monkeypatch, capsys):
    marker = tmp_path / "die"
    marker.write_text("always:rank_00007.json")
    monkeypatch.setenv("TRACEVIEW_FAULT_DIE_ONCE", str(marker))
    out = tmp_path / "r.json"
    assert run_cli(["analyze", str(job16), "-f", "json", "-o", str(out), "--jobs", "2", "--no-store"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rank_00007.json" in err[0] and "died twice" in err[0] and not out.exists()
    rc, text = analyze(tmp_path, job16, "--jobs", "2", "--no-store", "--skip-bad-ranks")
    doc = json.loads(text)
    assert rc == 0 and [s["file"].rsplit("/", 1)[1] for s in doc["skipped_ranks"]] == ["rank_00007.json"]
    assert len(doc["inputs"]) == JOB.ranks - 1


def test_progress_only_when_asked_off_a_terminal(job16, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    base = [sys.executable, "-m", "traceview", "analyze", str(job16), "-f", "json", "-o", str(tmp_path / "p.json"),
            "--jobs", "1", "--no-store"]
    quiet = subprocess.run(base, capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0 and quiet.stderr == ""
    loud = subprocess.run(base + ["--progress"], capture_output=True, text=True, env=env, timeout=300)
    lines = loud.stderr.splitlines()
    assert loud.returncode == 0 and lines[-1].startswith(f"traceview: ranks {JOB.ranks}/{JOB.ranks}, ")
    assert "MB/s" in lines[-1] and "\x1b" not in loud.stderr


def test_progress_line_on_a_terminal_updates_in_place(monkeypatch):
    import io
    monkeypatch.delenv("CI", raising=False)      # under CI the line is off (tested above); here, a terminal

    from traceview.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    s = Tty()
    p = Progress(4, 4_000_000, stream=s, every_s=0)
    for _ in range(4):
        p.advance(1_000_000)
    p.close()
    out = s.getvalue()
    assert out.count("\r\x1b[2K") == 4 and "ranks 2/4" in out and "s left" in out and out.endswith("4/4, "
           + out.rsplit("4/4, ", 1)[1])
    assert out.endswith("\n")


def test_unreachable_dask_scheduler_is_one_line_before_any_work(tmp_path, job16, capsys):
    pytest.importorskip("distributed")
    out = tmp_path / "r.json"
    assert run_cli(["analyze", str(job16), "-f", "json", "-o", str(out), "--dask", "tcp://127.0.0.1:9",
                    "--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Dask scheduler" in err[0] and "127.0.0.1:9" in err[0]
    assert not out.exists() and not (tmp_path / "s").exists()
