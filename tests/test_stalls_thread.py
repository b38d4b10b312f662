"""stalls.start_rank_part: the critical-path walk of a one-chunk job on a thread beside the
caller's queries gives exactly the part that rank_part computes in line (the sequential walk is
the reference), walks several chunks one after the other on threads (the next one fetched while
the one before is walked) into parts that merge to the same sections, and raises the walk's error
in the caller; the caller's poll between its queries (session.between, after each step built)
starts the next chunk's walk as soon as the walk before has ended."""
import time

import pytest
from helpers import TRACES

from traceview import later
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


def _recorded(monkeypatch) -> list:
    """("fetch", rank) for each chunk's rows fetched and ("walk", rank) for each window walked, in
    the order they happen (one rank a chunk)."""
    events: list = []
    fetch, walk = critical_path._chunk, critical_path.walk_columns
    monkeypatch.setattr(critical_path, "_chunk", lambda session, ranks: events.append(("fetch", ranks[0]))
                        or fetch(session, ranks))
    monkeypatch.setattr(critical_path, "walk_columns", lambda acts, *a, **k: events.append(("walk", acts.rank))
                        or walk(acts, *a, **k))
    return events


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


def test_several_chunks_walk_on_threads_one_chunk_after_the_other(monkeypatch):
    paths = sorted(DLRM.glob("*.json*"))
    if not paths:
        pytest.skip("the shared corpus is not beside the checkout")
    s, idle = _prepared(paths)
    job = stalls.job_inputs(s)
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 1)    # one rank a chunk: 8 chunks
    chunks = critical_path.windows_data(s)["chunks"]
    assert chunks == [[r] for r in range(8)]
    events = _recorded(monkeypatch)
    threads = []
    make = later.threading.Thread
    monkeypatch.setattr(later.threading, "Thread", lambda *a, **k: threads.append(k.get("name")) or make(*a, **k))
    wait = stalls.start_rank_part(s, job, idle)
    assert s.rows("SELECT count(*) AS n FROM activity_class")[0]["n"] > 0   # the caller's queries go on
    got = wait()
    seen = list(events)                             # (the reference walk below records more)
    assert len(threads) == 8 and len(got) == 8     # a thread and a part per chunk
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 10 ** 9)
    want = stalls.rank_part(s, job, idle)          # the reference: one part, walked in line
    assert stalls.merge(job, got) == stalls.merge(job, [want])
    assert [_plain(p)["critical_path"] for p in got] == [[r for r in want["critical_path"] if r["rank"] == k]
                                                        for k in range(8)]
    # chunk i is fetched once chunk i - 2 is walked: at most two chunks' rows live at once
    assert [r for e, r in seen if e == "fetch"] == list(range(8))
    for i in range(2, 8):
        at = seen.index(("fetch", i))
        walked = [n for n, (e, r) in enumerate(seen) if e == "walk" and r == i - 2]
        assert walked and max(walked) < at


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


def test_poll_walks_the_next_chunk_once_the_walk_before_has_ended(monkeypatch):
    """The caller's `poll` between its queries (session.between) fetches the next chunk only when
    the walk before has ended, and starts its walk; the parts are those of the in-line walk."""
    paths = sorted(DLRM.glob("*.json*"))
    if not paths:
        pytest.skip("the shared corpus is not beside the checkout")
    s, idle = _prepared(paths)
    job = stalls.job_inputs(s)
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 1)    # one rank a chunk: 8 chunks
    events = _recorded(monkeypatch)
    walks = stalls.start_rank_part(s, job, idle)
    deadline = time.monotonic() + 60
    while sum(e == "fetch" for e, _ in events) < 8 and time.monotonic() < deadline:
        walks.poll()             # the caller between two of its queries
        time.sleep(0.001)
    fetched_by_poll = [r for e, r in events if e == "fetch"]
    got = walks()
    assert fetched_by_poll == list(range(8))          # every chunk fetched by a poll, in order
    assert [r for e, r in events if e == "fetch"] == list(range(8))   # none fetched again by the call
    # chunk i fetched once chunk i - 1's walk has ended (its last window walked)
    for i in range(1, 8):
        at = events.index(("fetch", i))
        assert max(n for n, (e, r) in enumerate(events) if e == "walk" and r == i - 1) < at
    walks.poll()                                      # after the call: nothing left, nothing done
    assert len(got) == 8
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 10 ** 9)
    want = stalls.rank_part(s, job, idle)
    assert stalls.merge(job, got) == stalls.merge(job, [want])


def test_assemble_polls_the_walks_between_its_steps(monkeypatch):
    """assemble hands the walks' poll to the session while it builds its sections (called after each
    step: engine/pipeline.py), and takes it back before it waits for the parts."""
    paths = sorted(DLRM.glob("*.json*"))[:2]
    if not paths:
        pytest.skip("the shared corpus is not beside the checkout")
    from traceview.document import assemble
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 1)    # one rank a chunk: 2 chunks
    polls: list = []
    start = stalls.start_rank_part

    def spy(session, *a, **k):
        walks = start(session, *a, **k)
        poll = walks.poll
        monkeypatch.setattr(walks, "poll", lambda: polls.append(session.between is not None) or poll())
        return walks
    monkeypatch.setattr(stalls, "start_rank_part", spy)
    s = Session(load([str(p) for p in paths]))
    doc = assemble.assemble(s.profile, session=s)
    assert polls and all(polls)            # polled while the sections were built
    assert s.between is None               # and no longer once the parts were asked for
    s2 = Session(load([str(p) for p in paths]))
    monkeypatch.setattr(stalls, "start_rank_part", start)
    assert assemble.assemble(s2.profile, session=s2) == doc


def test_build_calls_the_sessions_between_after_each_step():
    if not OVERLAP.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    s = Session(load([str(OVERLAP)]))
    calls: list = []
    s.between = lambda: calls.append(len(s.built))
    breakdown.prepare(s, breakdown.Options())
    assert len(s.built) >= 5
    assert calls == list(range(1, len(s.built) + 1))   # once after each step built


def test_a_failed_walk_is_raised_by_the_call_not_by_a_poll(monkeypatch):
    paths = sorted(DLRM.glob("*.json*"))[:2]
    if not paths:
        pytest.skip("the shared corpus is not beside the checkout")
    s, idle = _prepared(paths)
    job = stalls.job_inputs(s)
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 1)

    def broken(*a, **k):
        raise AssertionError("critical path does not cover the window")
    monkeypatch.setattr(critical_path, "composition", broken)
    walks = stalls.start_rank_part(s, job, idle)
    walks.pending.wait()
    walks.poll()                          # the walk failed: nothing raised here, nothing fetched
    assert walks.next == 1
    with pytest.raises(AssertionError, match="does not cover"):
        walks()
