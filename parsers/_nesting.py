"""Interval nesting on one thread: parents of ranges and the innermost range around a point/interval.

Columnar, in Arrow kernels (no Python work per range). One sort (by thread, start, longer first),
then every answer is "the nearest range before this one in sorted order, on the same thread, whose
end reaches a threshold" (see `_nearest`), found for all ranges at once by pointer jumping: each
round, a range whose candidate falls short moves to that candidate's own candidate (everything in
between ends before the threshold too), so the rounds needed grow with the log of the distances.
Depth is the number of ancestors, counted by pointer doubling over the parents.

Before the rounds, the positions that have no answer at all are settled in one pass: where no
earlier range on the thread ends at or after the need (`_none_before`, a running maximum of the
ends). Without it, each of a long run of outermost ranges (a thread's steps, or the launches of a
thread with no annotation around them) jumps back through the whole run to the thread's first
position: 20 rounds over ~300,000 moving positions on h200_moe/overlap x50 (1.7 M ranges, 0.45 of the
0.55 s of its `innermost_container`).

The answers are those of a stack sweep over the sorted ranges (pop the ranges that ended before
the next starts, a zero-length range at that instant staying; the parent is the nearest range
left on the stack that ends at or after the new one's end), for any input, crossing ranges included:
a range that ends after the new one's start is never popped before it, so the nearest one on the
stack reaching the new end is the nearest one before it in sorted order; for a zero-length range,
a range ending exactly at its instant counts only if it starts there too.
"""
from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

_I64 = pa.int64()
_NULL = pa.scalar(None, _I64)
_ZERO, _ONE, _MINUS_ONE = (pa.scalar(v, _I64) for v in (0, 1, -1))  # typed: no conversion per call


def _col(v) -> pa.Array:
    if isinstance(v, pa.ChunkedArray):
        v = v.combine_chunks()
    if isinstance(v, pa.Array):
        return v if v.type == _I64 else v.cast(_I64)
    return pa.array(v if isinstance(v, (list, tuple)) else list(v), type=_I64)


def _prev_on_thread(tid: pa.Array, candidate: pa.Array) -> pa.Array:
    """For each position (sorted by thread), the last earlier candidate position on the same
    thread (null when none)."""
    n = len(tid)
    if not n:
        return pa.array([], type=_I64)
    pos = _positions(n)
    last = pc.cumulative_max(pc.if_else(candidate, pos, _MINUS_ONE))  # the last candidate at or before
    before = pa.concat_arrays([pa.array([-1], type=_I64), last[:-1]])
    new_thread = pc.not_equal(tid, pa.concat_arrays([tid[:1], tid[:-1]]))
    first = pc.cumulative_max(pc.if_else(new_thread, pos, _ZERO))  # where the position's thread begins
    return pc.if_else(pc.greater_equal(before, first), before, _NULL)


def _nearest(tid: pa.Array, end: pa.Array, is_range: pa.Array, need: pa.Array) -> pa.Array:
    """Positions sorted by (thread, start): for each, the nearest earlier range on its thread with
    end >= need (null when none). Queries (not ranges) are never candidates.

    The invariant: every range strictly between a position and its candidate ends before its need.
    A candidate that falls short (end < need) has need <= its own end + 1 <= the asker's need, so the
    asker may jump to the candidate's candidate (an answer or a lower bound) and keep the invariant.
    Once few positions are still moving (a long run of siblings keeps a few in ten for many rounds),
    the rounds work on those alone (`_nearest_few`)."""
    cand = _prev_on_thread(tid, is_range)
    none = _none_before(tid, end, need)
    if none is not None:
        cand = pc.if_else(none, _NULL, cand)   # settled: no earlier range on the thread reaches the need
    n = len(cand)
    while True:
        reach = pc.take(end, cand)
        short = pc.fill_null(pc.less(reach, need), False)  # a candidate that falls short: jump
        k = pc.sum(short).as_py() or 0
        if not k:
            return cand
        cand = pc.if_else(short, pc.take(cand, cand), cand)
        if k * FEW <= n:
            return _nearest_few(cand, end, need, short)


FEW = 4  # the rounds go on over the moving positions alone once they are at most 1/FEW of all


def _none_before(tid: pa.Array, end: pa.Array, need: pa.Array) -> pa.Array | None:
    """Positions sorted by thread: True where no earlier range on the same thread has end >= need
    (`end` null: not a range), so `_nearest` has no answer there. One running maximum over all
    positions, each thread's ends lifted above every value of the threads before it (its index
    times the span of the ends): the maximum before a position, less its thread's lift, is the
    largest end of the earlier ranges on its thread, or below the lift where there is none. None
    where that does not fit in 64 bits, where no position is a range, or a thread is null."""
    n = len(tid)
    lo, hi = (v.as_py() for v in pc.min_max(end).values())
    if lo is None or hi is None or tid.null_count:
        return None
    span = hi - lo + 1
    new_thread = pc.not_equal(tid, pa.concat_arrays([tid[:1], tid[:-1]]))
    thread = pc.cumulative_sum(new_thread.cast(_I64))         # 0, 1, ...: the thread's index
    if (thread[n - 1].as_py() + 2) * span >= 1 << 62:
        return None
    lift = pc.multiply(thread, pa.scalar(span, _I64))
    # a range: its end above the lift; any other position: just below it (the threads' before reach no higher)
    value = pc.if_else(pc.is_valid(end), pc.add(lift, pc.subtract(end, pa.scalar(lo, _I64))),
                       pc.subtract(lift, _ONE))
    before = pa.concat_arrays([pa.array([-1], type=_I64), pc.cumulative_max(value)[:-1]])
    reach = pc.add(pc.subtract(before, lift), pa.scalar(lo, _I64))   # the largest earlier end on the thread
    return pc.fill_null(pc.or_(pc.less(before, lift), pc.less(reach, need)), False)


def _nearest_few(cand: pa.Array, end: pa.Array, need: pa.Array, moving: pa.Array) -> pa.Array:
    """The rounds of `_nearest` from candidates `cand`, where only the positions in the mask `moving`
    may still fall short (the others' candidates are their answers): the same jumps, each round over
    the moving positions only. Their candidates are kept apart (`mine`), a candidate among them read
    there through `slot` (its index among them), any other from `cand`; when the moving shrink to
    1/FEW, their candidates are written back and the set is narrowed."""
    while True:
        at = pc.indices_nonzero(moving)
        m = len(at)
        mine, nd = pc.take(cand, at), pc.take(need, at)
        slot = pc.replace_with_mask(pa.nulls(len(cand), _I64), moving, _positions(m))
        while True:
            still = pc.fill_null(pc.less(pc.take(end, mine), nd), False)
            k = pc.sum(still).as_py() or 0
            if not k or k * FEW <= m:
                break
            s = pc.take(slot, mine)
            nxt = pc.if_else(pc.is_valid(s), pc.take(mine, s), pc.take(cand, mine))
            mine = pc.if_else(still, nxt, mine)
        cand = pc.replace_with_mask(cand, moving, mine)
        if not k:
            return cand
        moving = pc.replace_with_mask(moving, moving, still)


def _positions(n: int) -> pa.Array:
    """0 .. n-1 (int64)."""
    return pc.subtract(pc.cumulative_sum(pa.repeat(_ONE, n)), _ONE) if n else pa.array([], type=_I64)


def _depths(parent: pa.Array) -> pa.Array:
    """Number of ancestors of each node from parent positions (null at a root), by pointer doubling."""
    up = parent
    depth = pc.if_else(pc.is_valid(parent), _ONE, _ZERO)
    while up.null_count < len(up):
        depth = pc.add(depth, pc.fill_null(pc.take(depth, up), _ZERO))
        up = pc.take(up, up)
    return depth


def _sort(tid, start, end, typ=None) -> pa.Array:
    cols = {"t": tid, "s": start, "e": pc.negate(end)}
    keys = [("t", "ascending"), ("s", "ascending"), ("e", "ascending")]
    if typ is not None:
        cols["y"] = typ
        keys.insert(2, ("y", "ascending"))
    return pc.sort_indices(pa.table(cols), sort_keys=keys)  # stable: equal keys keep input order


def _queries_back(sorted_vals: pa.Array, order: pa.Array, is_range: pa.Array) -> pa.Array:
    """The queries' values (given in sorted order, among the ranges') back in the queries' input
    order: only the queries' places are sorted back, not every position's."""
    at = pc.indices_nonzero(pc.invert(is_range))  # the queries' places in sorted order
    return pc.take(pc.take(sorted_vals, at), pc.sort_indices(pc.take(order, at)))


def nest(tids, starts, ends, ids, qtids=(), qstarts=(), qends=()):
    """Depth (int64) and parent id (int64, null at the outermost) of each range among ranges on the
    same thread (by containment). With query intervals (q*), also the innermost range containing
    each query (id or null): the same as `innermost_container` gives."""
    tid, start, end, ident = _col(tids), _col(starts), _col(ends), _col(ids)
    n, nq = len(tid), len(qtids)
    if nq:
        tid = pa.concat_arrays([tid, _col(qtids)])
        start = pa.concat_arrays([start, _col(qstarts)])
        end = pa.concat_arrays([end, _col(qends)])
    kind = pa.concat_arrays([pa.repeat(pa.scalar(0, pa.int8()), n), pa.repeat(pa.scalar(1, pa.int8()), nq)])
    order = _sort(tid, start, end, kind if nq else None)
    t, s, e = (pc.take(c, order) for c in (tid, start, end))
    is_range = pc.less(order, n)
    # a zero-length range reaches back past a range ending at its instant unless one starts there too
    same_start = pc.and_(pc.equal(t, _shift(t)), pc.equal(s, _shift(s)))
    zero_first = pc.and_(pc.and_(is_range, pc.equal(s, e)), pc.invert(pc.fill_null(same_start, False)))
    need = pc.add(e, pc.if_else(zero_first, _ONE, _ZERO))
    par = _nearest(t, pc.if_else(is_range, e, _NULL), is_range, need)
    back = pc.sort_indices(order)  # each input position's place in sorted order (one sort for both)
    depth = pc.take(_depths(par), back)
    held = pc.take(pc.take(order, par), back)  # input index of the container (null: none)
    parent = pc.take(ident, held[:n])
    if not nq:
        return depth[:n], parent
    return depth[:n], parent, pc.take(ident, held[n:])


def _shift(a: pa.Array) -> pa.Array:
    """The previous value at each position (null at the first)."""
    return pa.concat_arrays([pa.nulls(1, a.type), a[:-1]]) if len(a) else a


def innermost_container(ctids, cstarts, cends, cids, qtids, qstarts, qends) -> pa.Array:
    """For each query interval, the id of the innermost container on the same thread
    (container.start <= q.start and q.end <= container.end), or null."""
    nc = len(cids)
    tid = pa.concat_arrays([_col(ctids), _col(qtids)])
    start = pa.concat_arrays([_col(cstarts), _col(qstarts)])
    end = pa.concat_arrays([_col(cends), _col(qends)])
    kind = pa.concat_arrays([pa.repeat(pa.scalar(0, pa.int8()), nc), pa.repeat(pa.scalar(1, pa.int8()), len(tid) - nc)])
    order = _sort(tid, start, end, kind)
    t, e = pc.take(tid, order), pc.take(end, order)
    is_range = pc.less(order, nc)
    found = _nearest(t, pc.if_else(is_range, e, _NULL), is_range, e)
    return pc.take(_col(cids), _queries_back(pc.take(order, found), order, is_range))


__all__: Sequence[str] = ("nest", "innermost_container")
