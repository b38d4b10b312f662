"""NVTX push/pop nesting from the sweep of one export (parsers/nsys.py), in Arrow kernels.

The sweep lists, per thread and in time order, the starts of push/pop ranges and the CUDA calls,
each with the open-range count there (`run`: a start counts itself). A start's depth is run - 1.
Two answers come from one sort:
- the parent of a start at depth d: the latest earlier start on its thread at depth d - 1;
- the innermost range open at a call with count r: the latest earlier start on its thread at
  depth r - 1 (open only if it ends after the call).
On one thread no two starts share a depth and a start time (a start at a time another started
is counted with it open), so "latest in sweep order" is "latest start at or before".

`last_at_depth` finds them for all rows at once. Nesting is shallow (a few to a few tens of levels),
so it goes level by level: for depth d, a running maximum over the positions of the starts at d
gives every row the latest one at or before it, which the rows that want d take if it is on their
thread (a handful of linear Arrow kernels per level, no sort). Deeper nesting than `LEVELS` goes
through one sort instead: candidates (starts, keyed by thread, depth and position) and questions
(keyed by thread, wanted depth and position) sorted together as one packed int64, each question
answered by the nearest candidate before it with the same thread and depth.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

_I64 = pa.int64()
_POS_BITS = 31  # sweep positions below 2^31; (group << 32) | (position << 1) | is_candidate
LEVELS = 48     # up to this many depths, level by level (linear); deeper, one sort


def thread_index(thread: pa.Array) -> pa.Array:
    """0, 1, 2, ... for the runs of equal values of `thread` (sorted by thread)."""
    n = len(thread)
    if not n:
        return pa.array([], _I64)
    prev = pa.concat_arrays([thread[:1], thread[:-1]])
    return pc.cumulative_sum(pc.not_equal(thread, prev).cast(_I64))


def last_at_depth(thread: pa.Array, is_start: pa.Array, depth: pa.Array, want: pa.Array) -> pa.Array:
    """Rows in sweep order (sorted by thread): for each row whose `want` is a depth >= 0, the
    position of the latest earlier start (`is_start`, at `depth`) on the same thread at depth
    `want`; null where there is none (or `want` is null or negative)."""
    n = len(thread)
    if not n:
        return pa.array([], _I64)
    top = pc.max(depth).as_py()
    if top is None or top < LEVELS:
        return _by_levels(thread, is_start, depth, want, -1 if top is None else top)
    return _by_sort(thread, is_start, depth, want)


def positions(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int64, in Arrow kernels (pa.array(range(n)) makes n Python ints)."""
    return pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, _I64), n)), 1)


def _by_levels(thread, is_start, depth, want, top: int) -> pa.Array:
    n = len(thread)
    pos = positions(n)
    prev = pa.concat_arrays([thread[:1], thread[:-1]])
    first = pc.cumulative_max(pc.if_else(pc.not_equal(thread, prev), pos, 0))  # where the row's thread begins
    starts_at = pc.if_else(pc.fill_null(is_start, False), depth, -1)
    want = pc.fill_null(want, -1)
    out = pa.nulls(n, _I64)
    for d in range(top + 1):
        last = pc.cumulative_max(pc.if_else(pc.equal(starts_at, d), pos, -1))
        last = pa.concat_arrays([pa.array([-1], _I64), last[:-1]])  # strictly before the row
        take = pc.and_(pc.equal(want, d), pc.greater_equal(last, first))
        out = pc.if_else(take, last, out)
    return out


def _by_sort(thread, is_start, depth, want) -> pa.Array:
    n = len(thread)
    if n >= 1 << _POS_BITS:
        raise ValueError(f"{n} rows in one NVTX sweep (at most {(1 << _POS_BITS) - 1})")
    tix = thread_index(thread)
    span = (pc.max(depth).as_py() or 0) + 2   # depths 0 .. span - 2, and one more for `want`
    if (pc.max(tix).as_py() + 1) * span >= 1 << (63 - _POS_BITS - 1):
        raise ValueError("too many threads and nesting levels in one NVTX sweep")
    pos = positions(n)

    def packed(d: pa.Array, flag: int) -> pa.Array:
        g = pc.add(pc.multiply(tix, span), d.cast(_I64))
        return pc.add(pc.shift_left(g, _POS_BITS + 1), pc.add(pc.shift_left(pos, 1), flag))

    ask = pc.and_(pc.is_valid(want), pc.greater_equal(pc.fill_null(want, -1), 0))
    # a question sorts before a candidate at its own position: answers are strictly earlier
    cand = pc.filter(packed(depth, 1), pc.fill_null(is_start, False))
    qs = pc.filter(packed(pc.fill_null(want, 0), 0), ask)
    keys = pc.sort_indices(pa.concat_arrays([cand, qs]))
    key = pc.take(pa.concat_arrays([cand, qs]), keys)
    is_q = pc.equal(pc.bit_wise_and(key, 1), 0)
    idx = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, _I64), len(key))), 1)
    last = pc.cumulative_max(pc.if_else(is_q, -1, idx))       # the last candidate at or before
    found = pc.take(key, pc.if_else(pc.equal(last, -1), pa.scalar(None, _I64), last))
    same = pc.equal(pc.shift_right(found, _POS_BITS + 1), pc.shift_right(key, _POS_BITS + 1))
    hit = pc.if_else(pc.fill_null(same, False),
                     pc.bit_wise_and(pc.shift_right(found, 1), (1 << _POS_BITS) - 1), pa.scalar(None, _I64))
    q_pos = pc.bit_wise_and(pc.shift_right(key, 1), (1 << _POS_BITS) - 1)
    hit, q_pos = pc.filter(hit, is_q), pc.filter(q_pos, is_q)   # the questions, in (group, position) order
    # back to position order: questions' positions are distinct and a subset of 0 .. n-1
    slot = pc.if_else(ask, pc.subtract(pc.cumulative_sum(ask.cast(_I64)), 1), pa.scalar(None, _I64))
    by_pos = pc.take(hit, pc.sort_indices(q_pos))              # answers in position order
    return pc.take(by_pos, slot)
