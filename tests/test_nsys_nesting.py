"""The nsys parser's NVTX nesting (parsers/nsys_nesting.py): both ways of `last_at_depth` against a
plain loop over the rows, and the parser's depth, parent and innermost op of every range and call on
random exports against a stack of open ranges kept by hand."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from traceview.parsers import nsys, nsys_nesting

A2A = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"


def _loop(thread, is_start, depth, want):
    """The definition, row by row: the latest earlier start on the row's thread at depth `want`."""
    out = []
    for i, (t, w) in enumerate(zip(thread, want, strict=True)):
        hit = None
        if w is not None and w >= 0:
            for j in range(i - 1, -1, -1):
                if thread[j] != t:
                    break
                if is_start[j] and depth[j] == w:
                    hit = j
                    break
        out.append(hit)
    return out


def _arrays(thread, is_start, depth, want):
    return (pa.array(thread, pa.int64()), pa.array(is_start, pa.bool_()), pa.array(depth, pa.int64()),
            pa.array(want, pa.int64()))


rows = st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 5),
                          st.one_of(st.none(), st.integers(-1, 6))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(rows)
def test_last_at_depth_both_ways_match_the_definition(data):
    data.sort(key=lambda r: r[0])  # sorted by thread, as the sweep is
    thread = [r[0] * 1_000_003 + 7 for r in data]
    is_start = [r[1] for r in data]
    depth = [r[2] if r[1] else None for r in data]
    want = [r[3] for r in data]
    args = _arrays(thread, is_start, depth, want)
    expected = _loop(thread, is_start, depth, want)
    assert nsys_nesting.last_at_depth(*args).to_pylist() == expected
    if data:
        assert nsys_nesting._by_sort(*args).to_pylist() == expected
    assert nsys_nesting._by_levels(*args, max((d for d in depth if d is not None), default=-1)).to_pylist() == expected


def test_deep_nesting_takes_the_sorted_way_and_agrees(monkeypatch):
    # one thread, a chain of 60 nested starts, then a question per level
    n = 60
    thread = [5] * (2 * n)
    is_start = [True] * n + [False] * n
    depth = list(range(n)) + [None] * n
    want = [d - 1 for d in range(n)] + list(range(n))
    args = _arrays(thread, is_start, depth, want)
    assert n > nsys_nesting.LEVELS
    expected = [None] + list(range(n - 1)) + list(range(n))
    assert nsys_nesting.last_at_depth(*args).to_pylist() == expected
    monkeypatch.setattr(nsys_nesting, "LEVELS", 1000)
    assert nsys_nesting.last_at_depth(*args).to_pylist() == expected


# ------------------------------------------------------------------ the parser on random exports
def _tree(draw, lo, hi, budget):
    """Properly nested ranges inside [lo, hi): (start, end, children), zero-length ones and children
        as long as their parent included."""
    out, t = [], lo
    while budget[0] > 0 and t < hi and draw(st.booleans()):
        s = draw(st.integers(t, hi - 1))   # a zero-length range at the parent's end is not inside it
        e = draw(st.integers(s, hi))
        budget[0] -= 1
        out.append((s, e, _tree(draw, s, e, budget) if e > s else []))
        t = e if e > s else s + 1   # siblings: the next starts at or after this one's end
    return out


@st.composite
def exports(draw):
    threads = []
    for _ in range(draw(st.integers(1, 4))):
        budget = [draw(st.integers(1, 25))]
        threads.append((_tree(draw, 0, 200, budget), draw(st.lists(st.integers(0, 210), max_size=20))))
    return threads


def _flat(tree, depth=0, parent=None, out=None):
    out = [] if out is None else out
    for s, e, kids in tree:
        me = len(out)
        out.append((s, e, depth, parent))
        _flat(kids, depth + 1, me, out)
    return out


def _innermost(ranges, t):
    """The deepest range with start <= t < end (ends exclusive); the latest-started among equals."""
    best = None
    for i, (s, e, d, _) in enumerate(ranges):
        if s <= t < e and (best is None or d > ranges[best][2]):
            best = i
    return best


def _export(path, threads):
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER,
            correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER,
            globalTid INTEGER, correlationId INTEGER, nameId INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER,
            textId INTEGER, domainId INTEGER);
        INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel'), (2, 'k');
    """)
    pid = 77
    gpid = pid << 24
    corr = 0
    for ti, (tree, calls) in enumerate(threads):
        gtid = gpid | (100 + ti)
        for k, (s, e, _, _) in enumerate(_flat(tree)):
            con.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, NULL, 0)", (s, e, f"r{ti}.{k}", gtid))
        for t in calls:
            corr += 1
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 1)", (t, t + 1, gtid, corr))
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (0, 5, 0, 7, 0, ?, 2, 2)", (gpid,))
    con.commit()
    con.close()


@pytest.mark.parametrize("levels", [nsys_nesting.LEVELS, 0])   # level by level, and the sort
@pytest.mark.parametrize("cores", [1, 2, 3])   # the sweep in one block, or in blocks of threads on threads
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(threads=exports())
def test_parser_nesting_matches_a_stack_of_open_ranges(tmp_path_factory, monkeypatch, levels, cores, threads):
    monkeypatch.setattr(nsys_nesting, "LEVELS", levels)
    monkeypatch.setattr(nsys, "_cores", lambda: cores)
    monkeypatch.setattr(nsys, "SWEEP_BLOCK_MIN", 0)
    monkeypatch.setattr(nsys, "PARALLEL_MIN_BYTES", 0)   # (as a large export)
    path = tmp_path_factory.mktemp("nest") / "t.sqlite"
    _export(path, threads)
    prof = nsys.read(path)
    got = {r["name"]: r for r in prof.cpu_ranges.to_pylist()}
    by_id = {r["id"]: r["name"] for r in got.values()}
    calls = {r["correlation"]: r for r in prof.launches.to_pylist()}
    corr = 0
    for ti, (tree, times) in enumerate(threads):
        flat = _flat(tree)
        for k, (_, _, depth, parent) in enumerate(flat):
            r = got[f"r{ti}.{k}"]
            assert r["depth"] == depth
            assert (by_id.get(r["parent_id"]) if r["parent_id"] is not None else None) == \
                (f"r{ti}.{parent}" if parent is not None else None)
        for t in times:
            corr += 1
            inner = _innermost(flat, t)
            op = calls[corr]["op_id"]
            assert (by_id[op] if op is not None else None) == (f"r{ti}.{inner}" if inner is not None else None), t
    assert not any("not properly nested" in w for w in prof.warnings)


def test_start_end_ranges_have_no_depth_and_do_not_nest(tmp_path):
    # push/pop A [100, 1000) and B [200, 500) on one thread, a start/end range S [150, 900) between
    # them in time order: S has no depth and no parent, B is A's child, the call at 300 is in B
    path = tmp_path / "se.sqlite"
    _export(path, [([], [300])])
    con = sqlite3.connect(path)
    gtid = (77 << 24) | 100
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, NULL, 0)", [
        (100, 1000, 59, "A", gtid), (150, 900, 60, "S", gtid), (200, 500, 59, "B", gtid)])
    con.commit()
    con.close()
    prof = nsys.read(path)
    r = {row["name"]: row for row in prof.cpu_ranges.to_pylist()}
    assert (r["A"]["depth"], r["A"]["parent_id"]) == (0, None)
    assert (r["S"]["depth"], r["S"]["parent_id"]) == (None, None)
    assert (r["B"]["depth"], r["B"]["parent_id"]) == (1, r["A"]["id"])
    (call,) = prof.launches.to_pylist()
    assert call["op_id"] == r["B"]["id"]


@pytest.mark.parametrize("counts, parts, groups", [
    ([(1, 10), (2, 10), (3, 10), (4, 10)], 2, [[1, 2], [3, 4]]),
    ([(1, 10), (2, 10), (3, 10), (4, 10)], 4, [[1], [2], [3], [4]]),
    ([(1, 10), (2, 10), (3, 10), (4, 10)], 8, [[1], [2], [3], [4]]),
    ([(1, 100), (2, 1), (3, 1)], 2, [[1], [2, 3]]),
    ([(1, 1), (2, 1), (3, 100)], 2, [[1, 2], [3]]),       # 3's middle (52) lies past half of 102
    ([(7, 944_300), (9, 967_500)], 2, [[7], [9]]),        # the a2a export x100's two threads
    ([(7, 5)], 4, [[7]]),
    ([], 2, []),
])
def test_sweep_threads_cut_into_runs_of_about_equal_ranges(counts, parts, groups):
    assert nsys._thread_groups(counts, parts) == groups


def test_the_sweep_in_blocks_gives_the_profile_of_one_block(monkeypatch):
    """The a2a export's nesting sweep in two blocks (one rank's thread each) on a thread each: every
    canonical table equal to the one block's, and the two blocks' sorts were made."""
    one = nsys.read(A2A)
    monkeypatch.setattr(nsys, "SWEEP_BLOCK_MIN", 1_000)
    monkeypatch.setattr(nsys, "_cores", lambda: 2)
    monkeypatch.setattr(nsys, "PARALLEL_MIN_BYTES", 0)   # (as a large export)
    made: list = []
    sweep = nsys._sweep

    def counted(ev, ends):
        made.append((ev.num_rows, len(set(ev.column("gtid").to_pylist()))))
        return sweep(ev, ends)
    monkeypatch.setattr(nsys, "_sweep", counted)
    two = nsys.read(A2A)
    assert len(made) == 2 and all(threads == 1 for _, threads in made)
    for name in ("gpu_activities", "cpu_ranges", "launches", "syncs", "meta"):
        assert getattr(two, name).equals(getattr(one, name)), name
