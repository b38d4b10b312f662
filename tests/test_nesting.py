"""Interval nesting used by the parsers, checked on hand-made cases."""
from traceview.parsers._nesting import innermost_container, nest


def test_nest_depth_and_parent():
    # thread 1: A[0,100) > B[10,50) > C[20,30); D[60,90) in A; thread 2: E[0,100)
    tids = [1, 1, 1, 1, 2]
    starts = [0, 10, 20, 60, 0]
    ends = [100, 50, 30, 90, 100]
    ids = [10, 11, 12, 13, 14]
    depth, parent = nest(tids, starts, ends, ids)
    assert depth == [0, 1, 2, 1, 0]
    assert parent == [None, 10, 11, 10, None]


def test_nest_same_start_longer_is_parent():
    depth, parent = nest([1, 1], [0, 0], [10, 100], [1, 2])
    assert parent == [2, None] and depth == [1, 0]


def test_innermost_container():
    ctids, cs, ce, cids = [1, 1, 1, 2], [0, 10, 60, 0], [100, 50, 90, 5], [10, 11, 13, 20]
    # queries: inside B; inside A only; inside D; other thread outside; thread 2 inside; straddles B's end
    q = [(1, 20, 22), (1, 55, 56), (1, 70, 71), (3, 1, 2), (2, 1, 2), (1, 45, 55)]
    got = innermost_container(ctids, cs, ce, cids, [t for t, _, _ in q], [s for _, s, _ in q], [e for _, _, e in q])
    assert got == [11, 10, 13, None, 20, 10]


def test_nest_with_queries_matches_innermost_container():
    """The combined sweep (ranges and queries together) gives the same containers as the separate one."""
    ctids, cs, ce, cids = [1, 1, 1, 2, 1], [0, 10, 60, 0, 10], [100, 50, 90, 5, 10], [10, 11, 13, 20, 14]
    q = [(1, 20, 22), (1, 55, 56), (1, 70, 71), (3, 1, 2), (2, 1, 2), (1, 45, 55), (1, 10, 10), (1, 0, 100)]
    qt, qs, qe = [t for t, _, _ in q], [s for _, s, _ in q], [e for _, _, e in q]
    depth, parent, found = nest(ctids, cs, ce, cids, qt, qs, qe)
    assert (depth, parent) == nest(ctids, cs, ce, cids)
    assert found == innermost_container(ctids, cs, ce, cids, qt, qs, qe) == [11, 10, 13, None, 20, 10, 14, 10]
