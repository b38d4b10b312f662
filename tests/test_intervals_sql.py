"""The interval macros (traceview/sql/intervals/intervals.sql) on small hand-made tables, with the
expected rows worked out by hand (drawn on a number line in the comments); the union also against
the textbook merge of sorted intervals on generated tables."""
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from traceview.engine.session import Session

# partition 1:  A [0,10) [5,15) [20,30) [30,35)   B [2,3) [8,22)
# partition 2:  A [0,4) [6,6) (empty)              B [10,12)
# partition 3:  A none                             B [0,5)
A = [(1, 0, 10), (1, 5, 15), (1, 20, 30), (1, 30, 35), (2, 0, 4), (2, 6, 6)]
B = [(1, 2, 3), (1, 8, 22), (2, 10, 12), (3, 0, 5)]


def _session():
    s = Session()
    for name, rows in (("a", A), ("b", B)):
        s.register(name, pa.table({"grp": [r[0] for r in rows], "s": [r[1] for r in rows], "e": [r[2] for r in rows]}))
    return s


def _rows(s, query):
    return [tuple(r.values()) for r in s.rows(f"SELECT * FROM {query} ORDER BY ALL")]


def test_segments_count_the_intervals_over_each_elementary_piece():
    # boundaries of partition 1: 0 5 10 15 20 30 35; covering counts 1 2 1 0 1 1 (the gap 15-20 is 0;
    # 30 is a boundary of two touching intervals: two pieces, each covered once)
    assert _rows(_session(), "interval_segments('a')") == [
        (1, 0, 5, 1), (1, 5, 10, 2), (1, 10, 15, 1), (1, 15, 20, 0), (1, 20, 30, 1), (1, 30, 35, 1),
        (2, 0, 4, 1)]                                   # [6,6) is empty: no boundary of its own


def test_union_merges_overlapping_and_touching_intervals():
    assert _rows(_session(), "interval_union('a')") == [(1, 0, 15), (1, 20, 35), (2, 0, 4)]
    assert _rows(_session(), "interval_union('b')") == [(1, 2, 3), (1, 8, 22), (2, 10, 12), (3, 0, 5)]


def test_intersection_keeps_what_both_cover():
    # 1: A = [0,15) u [20,35), B = [2,3) u [8,22): [2,3) [8,15) [20,22); 2: [0,4) vs [10,12): none; 3: A empty
    assert _rows(_session(), "interval_intersect('a', 'b')") == [(1, 2, 3), (1, 8, 15), (1, 20, 22)]


def test_subtraction_keeps_what_only_the_first_covers():
    # 1: [0,15) minus [2,3),[8,15) -> [0,2) [3,8); [20,35) minus [20,22) -> [22,35); 2: [0,4) untouched
    assert _rows(_session(), "interval_subtract('a', 'b')") == [(1, 0, 2), (1, 3, 8), (1, 22, 35), (2, 0, 4)]
    # B minus A: 1: [2,3) all covered; [8,22) minus [8,15),[20,22) -> [15,20); 2: [10,12); 3: [0,5)
    assert _rows(_session(), "interval_subtract('b', 'a')") == [(1, 15, 20), (2, 10, 12), (3, 0, 5)]


def test_overlapping_names_the_partitions_where_two_intervals_overlap():
    # A: 1 has [0,10) and [5,15) overlapping; [20,30) [30,35) only touch; 2: [0,4) and the empty [6,6)
    # B: 1: [2,3) then [8,22) (apart); 2 and 3: one interval each
    assert _rows(_session(), "interval_overlapping('a')") == [(1,)]
    assert _rows(_session(), "interval_overlapping('b')") == []
    s = _session()  # two intervals starting together overlap; an empty one inside another does not
    s.register("c", pa.table({"grp": [4, 4, 5, 5], "s": [0, 0, 0, 3], "e": [2, 9, 9, 3]}))
    assert _rows(s, "interval_overlapping('c')") == [(4,)]


def _merged(rows):
    """The union of each partition's non-empty [s, e) by the textbook merge: sorted by start, an
    interval joins the last merged one when it starts at or before that one's end."""
    out = []
    for g in sorted({r[0] for r in rows}):
        cur = None
        for s, e in sorted((r[1], r[2]) for r in rows if r[0] == g and r[2] > r[1]):
            if cur is not None and s <= cur[2]:
                cur[2] = max(cur[2], e)
            else:
                cur = [g, s, e]
                out.append(cur)
    return [tuple(c) for c in out]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 40), st.integers(-3, 12)), max_size=40))
def test_union_equals_the_textbook_merge(rows):
    # ties, duplicates, touching, empty and reversed intervals (e <= s: ignored) in a few partitions
    rows = [(g, s, s + d) for g, s, d in rows]
    s = Session()
    s.register("r", pa.table({"grp": pa.array([r[0] for r in rows], pa.int64()),
                              "s": pa.array([r[1] for r in rows], pa.int64()),
                              "e": pa.array([r[2] for r in rows], pa.int64())}))
    assert _rows(s, "interval_union('r')") == _merged(rows)


@pytest.mark.parametrize("query", ["interval_union('a')", "interval_subtract('a', 'b')"])
def test_the_partition_key_may_be_a_struct(query):
    s = _session()
    s.con.execute("CREATE TEMP TABLE a2 AS SELECT {'rank': grp, 'step': 7} AS grp, s, e FROM a")
    s.con.execute("CREATE TEMP TABLE b2 AS SELECT {'rank': grp, 'step': 7} AS grp, s, e FROM b")
    got = [(r[0]["rank"],) + r[1:] for r in _rows(s, query.replace("'a'", "'a2'").replace("'b'", "'b2'"))]
    assert got == _rows(s, query)


# The breakdown's parts by a second method: interval algebra on the activities clipped to each
# window, against the breakdown step (one sweep over the segments). The integers must agree exactly.
BY_ALGEBRA = """
WITH clipped AS MATERIALIZED (
    SELECT {'rank': w.rank, 'step': w.step} AS grp, a.class, greatest(a.start_ns, w.start_ns) AS s,
           least(a.end_ns, w.end_ns) AS e
    FROM activity_class a JOIN windows w ON a.rank = w.rank AND a.end_ns > w.start_ns AND a.start_ns < w.end_ns
),
win AS (SELECT {'rank': rank, 'step': step} AS grp, start_ns AS s, end_ns AS e FROM windows),
compute AS (SELECT grp, s, e FROM clipped WHERE class = 'compute'),
comm AS (SELECT grp, s, e FROM clipped WHERE class = 'comm'),
memory AS (SELECT grp, s, e FROM clipped WHERE class = 'memory'),
busy AS (SELECT grp, s, e FROM clipped WHERE class IN ('compute', 'comm')),
parts AS (
    SELECT grp, 'compute_ns' AS part, e - s AS ns FROM interval_union('compute')
    UNION ALL SELECT grp, 'exposed_comm_ns', e - s FROM interval_subtract('comm', 'compute')
    UNION ALL SELECT grp, 'overlapped_comm_ns', e - s FROM interval_intersect('comm', 'compute')
    UNION ALL SELECT grp, 'exposed_memory_ns', e - s FROM interval_subtract('memory', 'busy')
    UNION ALL SELECT grp, 'idle_ns', e - s FROM interval_subtract('win', 'clipped')
    UNION ALL SELECT grp, 'comm_ns', e - s FROM interval_union('comm')
)
SELECT grp.rank AS rank, grp.step AS step, part, sum(ns)::BIGINT AS ns FROM parts GROUP BY ALL
"""


@pytest.mark.parametrize("trace", ["kineto/h200_moe/overlap.json.gz", "nsys/h100_2gpu_train_a2a_2026.2.sqlite"])
def test_breakdown_parts_equal_the_interval_algebra(trace):
    from helpers import TRACES

    from traceview.analysis import breakdown
    from traceview.load import load
    path = TRACES / trace
    if not path.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    s = Session(load([str(path)]))
    breakdown.prepare(s, breakdown.Options())
    rows = breakdown.step_rows(s)
    got = {(r["rank"], r["step"], r["part"]): r["ns"] for r in s.rows(BY_ALGEBRA)}
    parts = ("compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns", "idle_ns", "comm_ns")
    assert rows and any(r["comm_ns"] for r in rows) and any(r["exposed_memory_ns"] or r["idle_ns"] for r in rows)
    if "overlap" in trace:
        assert any(r["overlapped_comm_ns"] for r in rows)
    for r in rows:
        assert {p: r[p] for p in parts} == {p: got.get((r["rank"], r["step"], p), 0) for p in parts}
