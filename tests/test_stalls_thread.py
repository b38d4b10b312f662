"""stalls.start_rank_part: the critical-path walk of a one-chunk job on a thread beside the
caller's queries gives exactly the part that rank_part computes in line (the sequential walk is
the reference), falls back to a walk when called where the windows span several chunks, and
raises the walk's error in the caller."""
import pytest
from helpers import TRACES

from traceview.analysis import breakdown, critical_path, layers, stalls
from traceview.config import Rules
from traceview.engine.session import Session
from traceview.load import load

OVERLAP = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"
DLRM = TRACES / "kineto" / "dlrm_8rank_v100"


def _prepared(paths):
    s = Session(load([str(p) for p in paths]))
    breakdown.prepare(s, breakdown.Options())
    rows = breakdown.step_rows(s)
    layers.prepare(s, Rules())
    return s, {(r["rank"], r["step"]): r["idle_ns"] for r in rows}


def _plain(part):
    return {k: list(v) if k in ("critical_path", "stalls", "a2a") else v for k, v in part.items()}


def test_thread_part_equals_the_inline_part():
    if not OVERLAP.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    s, idle = _prepared([OVERLAP])
    job = stalls.job_inputs(s)
    wait = stalls.start_rank_part(s, job, idle)
    # the caller's queries go on while the walk runs
    assert s.rows("SELECT count(*) AS n FROM activity_class")[0]["n"] > 0
    got = wait()
    want = stalls.rank_part(s, job, idle)
    assert len(got) == 1 and want["critical_path"] and want["stalls"]
    assert _plain(got[0]) == _plain(want)


def test_several_chunks_walk_when_asked(monkeypatch):
    paths = sorted(DLRM.glob("*.json*"))
    if not paths:
        pytest.skip("the shared corpus is not beside the checkout")
    s, idle = _prepared(paths)
    job = stalls.job_inputs(s)
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 1)    # one rank a chunk: 8 chunks
    assert len(critical_path.windows_data(s)["chunks"]) == 8
    started = []
    monkeypatch.setattr(stalls.threading, "Thread", lambda *a, **k: started.append(a) or pytest.fail("a thread"))
    got = stalls.start_rank_part(s, job, idle)()
    assert not started and _plain(got[0]) == _plain(stalls.rank_part(s, job, idle))


def test_the_walks_error_is_raised_by_the_caller(monkeypatch):
    if not OVERLAP.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    s, idle = _prepared([OVERLAP])
    job = stalls.job_inputs(s)

    def broken(*a, **k):
        raise AssertionError("critical path does not cover the window")
    monkeypatch.setattr(critical_path, "composition", broken)
    wait = stalls.start_rank_part(s, job, idle)
    with pytest.raises(AssertionError, match="does not cover"):
        wait()
