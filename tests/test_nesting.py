"""Interval nesting used by the parsers: hand-made cases, and the columnar sweep against a plain
stack sweep (the definition) on random ranges with ties, zero-length and crossing ranges."""
import pyarrow.compute as pc
import pytest

from traceview.parsers import _nesting
from traceview.parsers._nesting import innermost_container, nest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


def _nest(*args):
    return tuple(a.to_pylist() for a in nest(*args))


def _inner(*args):
    return innermost_container(*args).to_pylist()


def test_nest_depth_and_parent():
    # thread 1: A[0,100) > B[10,50) > C[20,30); D[60,90) in A; thread 2: E[0,100)
    tids = [1, 1, 1, 1, 2]
    starts = [0, 10, 20, 60, 0]
    ends = [100, 50, 30, 90, 100]
    ids = [10, 11, 12, 13, 14]
    depth, parent = _nest(tids, starts, ends, ids)
    assert depth == [0, 1, 2, 1, 0]
    assert parent == [None, 10, 11, 10, None]


def test_nest_same_start_longer_is_parent():
    depth, parent = _nest([1, 1], [0, 0], [10, 100], [1, 2])
    assert parent == [2, None] and depth == [1, 0]


def test_nest_zero_length_and_crossing_by_hand():
    # A[0,10); D[2,12) crosses A's end: no parent (A ends first); E[3,11) inside D only;
    # F[5,5] zero-length inside A, D and E: the innermost started last, E; B[10,10] zero-length
    # at A's end: not inside A (it has ended), inside E; C[10,10] a second zero-length range at the
    # same instant: inside B (identical ranges nest in input order)
    tids = [0] * 6
    starts = [0, 10, 10, 2, 3, 5]
    ends = [10, 10, 10, 12, 11, 5]
    ids = [1, 2, 3, 4, 5, 6]
    depth, parent = _nest(tids, starts, ends, ids)
    assert parent == [None, 5, 2, None, 4, 5]
    assert depth == [0, 2, 3, 0, 1, 2]


def test_innermost_container():
    ctids, cs, ce, cids = [1, 1, 1, 2], [0, 10, 60, 0], [100, 50, 90, 5], [10, 11, 13, 20]
    # queries: inside B; inside A only; inside D; other thread outside; thread 2 inside; straddles B's end
    q = [(1, 20, 22), (1, 55, 56), (1, 70, 71), (3, 1, 2), (2, 1, 2), (1, 45, 55)]
    got = _inner(ctids, cs, ce, cids, [t for t, _, _ in q], [s for _, s, _ in q], [e for _, _, e in q])
    assert got == [11, 10, 13, None, 20, 10]


def test_nest_with_queries_matches_innermost_container():
    """The combined sweep (ranges and queries together) gives the same containers as the separate one."""
    ctids, cs, ce, cids = [1, 1, 1, 2, 1], [0, 10, 60, 0, 10], [100, 50, 90, 5, 10], [10, 11, 13, 20, 14]
    q = [(1, 20, 22), (1, 55, 56), (1, 70, 71), (3, 1, 2), (2, 1, 2), (1, 45, 55), (1, 10, 10), (1, 0, 100)]
    qt, qs, qe = [t for t, _, _ in q], [s for _, s, _ in q], [e for _, _, e in q]
    depth, parent, found = _nest(ctids, cs, ce, cids, qt, qs, qe)
    assert (depth, parent) == _nest(ctids, cs, ce, cids)
    assert found == _inner(ctids, cs, ce, cids, qt, qs, qe) == [11, 10, 13, None, 20, 10, 14, 10]


def test_empty_inputs():
    assert _nest([], [], [], []) == ([], [])
    assert _nest([], [], [], [], [1], [0], [1]) == ([], [], [None])
    assert _inner([], [], [], [], [1], [0], [1]) == [None]
    assert _inner([1], [0], [5], [7], [], [], []) == []


# --- the definition: a stack sweep, one range at a time ---------------------------------------

def _sorted(keys):
    return sorted(range(len(keys[0])), key=lambda i: tuple(k[i] for k in keys))


def _stack_nest(tids, starts, ends, ids, qtids=(), qstarts=(), qends=()):
    """Ranges by (thread, start, longer first, input order), queries after the ranges that start
    with them; pop what ended before the next range starts (a zero-length range at that instant
    stays); a range's parent is the nearest range on the stack ending at or after its end, a
    query's container the nearest ending at or after the query's end."""
    n = len(ids)
    t = list(tids) + list(qtids)
    s = list(starts) + list(qstarts)
    e = list(ends) + list(qends)
    kind = [0] * n + [1] * len(qtids)
    order = _sorted([t, s, kind, [-x for x in e], list(range(len(t)))])
    parent = [None] * n
    depth = [0] * n
    found = [None] * len(qtids)
    stack: list[int] = []
    thread = None
    for i in order:
        if t[i] != thread:
            stack, thread = [], t[i]
        if i < n:
            while stack and e[stack[-1]] <= s[i] and not (e[stack[-1]] == s[i] == s[stack[-1]]):
                stack.pop()
        hit = next((j for j in reversed(stack) if e[j] >= e[i]), None)
        if i < n:
            if hit is not None:
                parent[i], depth[i] = ids[hit], depth[hit] + 1
            stack.append(i)
        elif hit is not None:
            found[i - n] = ids[hit]
    return (depth, parent, found) if qtids else (depth, parent)


def _stack_inner(ctids, cstarts, cends, cids, qtids, qstarts, qends):
    """Containers popped once they end before the next start; the innermost one left reaching the
    query's end."""
    nc = len(cids)
    t, s, e = list(ctids) + list(qtids), list(cstarts) + list(qstarts), list(cends) + list(qends)
    kind = [0] * nc + [1] * len(qtids)
    out = [None] * len(qtids)
    stack: list[int] = []
    thread = None
    for i in _sorted([t, s, kind, [-x for x in e], list(range(len(t)))]):
        if t[i] != thread:
            stack, thread = [], t[i]
        while stack and e[stack[-1]] < s[i]:
            stack.pop()
        if i < nc:
            stack.append(i)
        else:
            out[i - nc] = next((cids[j] for j in reversed(stack) if e[j] >= e[i]), None)
    return out


_ranges = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(0, 6)), max_size=60)


def _cols(rows, first_id=100):
    return ([r[0] for r in rows], [r[1] for r in rows], [r[1] + r[2] for r in rows],
            list(range(first_id, first_id + len(rows))))


@settings(max_examples=400, deadline=None)
@given(_ranges, st.lists(st.tuples(st.integers(0, 3), st.integers(0, 12), st.integers(0, 4)), max_size=20))
def test_nest_matches_the_stack_sweep(rows, queries):
    tids, starts, ends, ids = _cols(rows)
    assert _nest(tids, starts, ends, ids) == _stack_nest(tids, starts, ends, ids)
    qt, qs, qe, _ = _cols(queries)
    if queries:
        assert _nest(tids, starts, ends, ids, qt, qs, qe) == _stack_nest(tids, starts, ends, ids, qt, qs, qe)


@settings(max_examples=400, deadline=None)
@given(_ranges, st.lists(st.tuples(st.integers(0, 3), st.integers(0, 12), st.integers(0, 4)), max_size=20))
def test_innermost_container_matches_the_stack_sweep(rows, queries):
    tids, starts, ends, ids = _cols(rows)
    qt, qs, qe, _ = _cols(queries)
    assert _inner(tids, starts, ends, ids, qt, qs, qe) == _stack_inner(tids, starts, ends, ids, qt, qs, qe)


def test_nest_deep_and_long_chains():
    """A 2,000-deep staircase and 2,000 siblings: depths and parents by construction."""
    n = 2000
    depth, parent = _nest([0] * n, list(range(n)), [2 * n - i for i in range(n)], list(range(n)))
    assert depth == list(range(n)) and parent == [None] + list(range(n - 1))
    depth, parent = _nest([0] * (n + 1), [0] + [2 * i for i in range(n)], [2 * n] + [2 * i + 1 for i in range(n)],
                          list(range(n + 1)))
    assert depth == [0] + [1] * n and parent == [None] + [0] * n


def _nearest_all_rounds(tid, end, is_range, need):
    """`_nearest` as it was before its rounds narrowed to the moving positions: every round over
    every position (the reference for `_nearest_few`)."""
    cand = _nesting._prev_on_thread(tid, is_range)
    while True:
        short = pc.fill_null(pc.less(pc.take(end, cand), need), False)
        if not pc.any(short).as_py():
            return cand
        cand = pc.if_else(short, pc.take(cand, cand), cand)


# runs of siblings under one parent, staircases and random ranges mixed, so that some positions
# keep moving for many rounds while most have settled (the narrowed rounds, over several narrowings)
_block = st.one_of(
    st.tuples(st.just("siblings"), st.integers(1, 120), st.integers(0, 3)),
    st.tuples(st.just("stairs"), st.integers(1, 40), st.integers(0, 3)),
    st.tuples(st.just("random"), st.integers(1, 30), st.integers(0, 3)))


def _blocks(blocks, seed):
    import random
    rnd = random.Random(seed)
    rows, t0 = [], 0
    for kind, n, tid in blocks:
        if kind == "siblings":
            rows.append((tid, t0, 2 * n + 2))
            rows += [(tid, t0 + 1 + 2 * i, rnd.choice([0, 1, 1, 2])) for i in range(n)]
        elif kind == "stairs":
            rows += [(tid, t0 + i, 2 * n - 2 * i) for i in range(n)]
        else:
            rows += [(tid, t0 + rnd.randint(0, 2 * n), rnd.randint(0, n)) for _ in range(n)]
        t0 += 2 * n + 3 if rnd.random() < 0.8 else n  # some blocks overlap the next: crossing ranges
    return rows


@settings(max_examples=300, deadline=None)
@given(st.lists(_block, min_size=1, max_size=8), st.integers(0, 2**32), st.sampled_from([2, 4, 16]),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 400), st.integers(0, 30)), max_size=30))
def test_narrowed_rounds_match_every_round_over_every_position(blocks, seed, few, queries):
    rows = _blocks(blocks, seed)
    tids, starts, ends, ids = _cols(rows)
    qt, qs, qe, _ = _cols(queries)
    before = _nesting.FEW
    _nesting.FEW = few
    try:
        got = _nest(tids, starts, ends, ids, qt, qs, qe) if queries else _nest(tids, starts, ends, ids)
        real = _nesting._nearest
        _nesting._nearest = _nearest_all_rounds
        try:
            want = _nest(tids, starts, ends, ids, qt, qs, qe) if queries else _nest(tids, starts, ends, ids)
        finally:
            _nesting._nearest = real
    finally:
        _nesting.FEW = before
    assert got == want
    if len(rows) < 400:  # and the definition, where the stack sweep is quick enough
        assert got[:2] == _stack_nest(tids, starts, ends, ids)[:2]


# --- positions settled before the rounds: no earlier range on the thread reaches the need ----------

def _none_before_by_hand(tids, ends, needs):
    """The definition: no earlier position on the same thread is a range (end not None) whose end
    reaches the need."""
    return [not any(tids[j] == tids[i] and ends[j] is not None and ends[j] >= needs[i] for j in range(i))
            for i in range(len(tids))]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(-50, 50)), st.integers(-60, 60)),
                max_size=60),
       st.sampled_from([0, 10**12, 2**61]))
def test_none_before_matches_its_definition(rows, offset):
    import pyarrow as pa
    rows = sorted(rows, key=lambda r: r[0])          # (positions sorted by thread, as `_nearest` gets them)
    tids = [r[0] for r in rows]
    ends = [None if r[1] is None else r[1] + offset for r in rows]
    needs = [r[2] + offset for r in rows]
    got = _nesting._none_before(*(pa.array(v, type=pa.int64()) for v in (tids, ends, needs)))
    if got is None:     # no range at all, or the lifted ends would not fit in 64 bits
        assert all(e is None for e in ends) or offset == 2**61
        return
    assert got.to_pylist() == _none_before_by_hand(tids, ends, needs)


def test_none_before_declines_what_does_not_fit_and_nest_is_still_exact():
    """Ends near 2**62 on two threads: the lifted maximum would overflow, so no position is settled
    before the rounds, and the rounds alone give the stack sweep's answers."""
    import pyarrow as pa
    big = 2**62
    tids, starts, ends, ids = [0, 0, 1, 1], [0, 5, big - 100, big - 50], [10, 6, big - 1, big - 60], [1, 2, 3, 4]
    assert _nesting._none_before(pa.array([0, 0, 1, 1], type=pa.int64()), pa.array(ends, type=pa.int64()),
                                 pa.array(ends, type=pa.int64())) is None
    assert _nest(tids, starts, ends, ids) == _stack_nest(tids, starts, ends, ids) == ([0, 1, 0, 1], [None, 1, None, 3])


def test_long_runs_of_outermost_ranges_on_several_threads():
    """Thousands of outermost ranges one after another on each of three threads, some with children
    and launches (queries) inside: the settled positions (no parent, no container) and the others
    as the stack sweep gives them."""
    tids, starts, ends, qt, qs, qe = [], [], [], [], [], []
    for tid in (3, 1, 2):
        for i in range(3000):
            t0 = 100 * i
            tids.append(tid), starts.append(t0), ends.append(t0 + 50)
            if i % 7 == 0:
                tids.append(tid), starts.append(t0 + 10), ends.append(t0 + 20)
            qt.append(tid), qs.append(t0 + 60 if i % 3 else t0 + 12), qe.append(t0 + 61 if i % 3 else t0 + 13)
    ids = list(range(len(tids)))
    got = _nest(tids, starts, ends, ids, qt, qs, qe)
    assert got == _stack_nest(tids, starts, ends, ids, qt, qs, qe)
    assert got[1].count(None) == 9000 and got[2].count(None) == 6000
