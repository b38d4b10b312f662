"""stalls.start_rank_part: the critical-path walk on a thread beside the caller's queries gives
exactly the part that rank_part computes in line (the sequential walk is the reference); several
chunks are fetched (through a reader of the session: another connection) and walked one after the
other on that one thread, into parts that merge to the same sections, one chunk's rows at a time;
the walk's error is raised in the caller."""

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


def _dlrm(ranks: int | None = None):
    """The DLRM job's first `ranks` ranks (all where None), prepared; skipped without the corpus."""
    paths = sorted(DLRM.glob("*.json*"))[:ranks]
    if not paths:
        pytest.skip("the shared corpus is not beside the checkout")
    return _prepared(paths)


def _recorded(monkeypatch) -> list:
    """("fetch", rank) for each chunk's rows fetched and ("walk", rank) for each window walked, in
    the order they happen (one rank a chunk)."""
    events: list = []
    fetch, walk = critical_path._chunk, critical_path.walk_columns
    monkeypatch.setattr(critical_path, "_chunk", lambda session, ranks, *a: events.append(("fetch", ranks[0]))
                        or fetch(session, ranks, *a))
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
    # (the thread fetched its first chunk before cp_host_syncs was built: the syncs read after)
    assert any(st["cause"] == "host_sync" for st in _plain(want)["stalls"])
    assert _plain(got[0]) == _plain(want)


def test_several_chunks_are_fetched_and_walked_on_one_thread_one_after_the_other(monkeypatch):
    s, idle = _dlrm()
    job = stalls.job_inputs(s)
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 1)    # one rank a chunk: 8 chunks
    chunks = critical_path.windows_data(s)["chunks"]
    assert chunks == [[r] for r in range(8)]
    events = _recorded(monkeypatch)
    readers: list = []
    fetch = critical_path._chunk
    monkeypatch.setattr(critical_path, "_chunk",
                        lambda session, ranks, *a: readers.append(session) or fetch(session, ranks, *a))
    threads = []
    make = later.threading.Thread
    monkeypatch.setattr(later.threading, "Thread", lambda *a, **k: threads.append(k.get("name")) or make(*a, **k))
    wait = stalls.start_rank_part(s, job, idle)
    assert s.rows("SELECT count(*) AS n FROM activity_class")[0]["n"] > 0   # the caller's queries go on
    got = wait()
    seen = list(events)                             # (the reference walk below records more)
    assert len(threads) == 1 and len(got) == 8     # one thread, a part per chunk
    # every chunk fetched through one reader of the session, not the session's own connection
    assert len({id(r) for r in readers}) == 1 and readers[0] is not s and readers[0].con is not s.con
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 10 ** 9)
    want = stalls.rank_part(s, job, idle)          # the reference: one part, walked in line
    assert stalls.merge(job, got) == stalls.merge(job, [want])
    assert [_plain(p)["critical_path"] for p in got] == [[r for r in want["critical_path"] if r["rank"] == k]
                                                        for k in range(8)]
    # chunk i is fetched once chunk i - 1 is walked: one chunk's rows at a time
    assert [r for e, r in seen if e == "fetch"] == list(range(8))
    for i in range(1, 8):
        at = seen.index(("fetch", i))
        walked = [n for n, (e, r) in enumerate(seen) if e == "walk" and r == i - 1]
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


def test_a_failed_fetch_is_raised_by_the_call(monkeypatch):
    s, idle = _dlrm(2)
    job = stalls.job_inputs(s)
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 1)
    fetch = critical_path._chunk

    def second_fails(session, ranks, *a):
        if ranks == [1]:
            raise OSError("the chunk's rows could not be read")
        return fetch(session, ranks, *a)
    monkeypatch.setattr(critical_path, "_chunk", second_fails)
    wait = stalls.start_rank_part(s, job, idle)
    with pytest.raises(OSError, match="could not be read"):
        wait()


def test_the_first_chunk_is_fetched_while_the_collectives_are_matched_and_no_more(monkeypatch):
    s, idle = _dlrm(3)
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 1)    # one rank a chunk: 3 chunks
    events = _recorded(monkeypatch)
    begun = stalls.begin_rank_part(s, idle)
    for _ in range(500):                                  # (up to 5 s for the thread's first fetch)
        if events:
            break
        time.sleep(0.01)
    time.sleep(0.2)
    assert events == [("fetch", 0)]                       # fetched, then waits for the job: no walk, no more rows
    assert "coll_instances" not in s.built                # the collectives not matched yet
    job = stalls.job_inputs(s)
    got = begun.walk(job)()
    seen = list(events)
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 10 ** 9)
    assert stalls.merge(job, got) == stalls.merge(job, [stalls.rank_part(s, job, idle)])
    assert [e for e, _ in seen if e == "fetch"] == ["fetch"] * 3 and seen.index(("walk", 0)) > 0


def test_a_begun_walk_that_gets_no_job_ends_with_nothing_walked(monkeypatch):
    if not OVERLAP.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    s, idle = _prepared([OVERLAP])
    events = _recorded(monkeypatch)
    begun = stalls.begin_rank_part(s, idle)
    begun.cancel()                                        # (the caller's error): the thread ends
    assert begun._walks is not None and not begun._walks.thread.is_alive()
    assert begun._walks.result() == [] and all(e == "fetch" for e, _ in events)
