"""Interval nesting on one thread: parents of ranges and the innermost range around a point/interval.

One sort and one stack sweep per call (O(n log n)); shared by the parsers, which must resolve
nesting from raw begin/end times.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def _order(*keys) -> list[int]:
    """Indices sorting by the given columns (ascending), using Arrow's sort (C speed)."""
    t = pa.table({f"k{i}": pa.array(k, type=pa.int64()) for i, k in enumerate(keys)})
    return pc.sort_indices(t, sort_keys=[(f"k{i}", "ascending") for i in range(len(keys))]).to_pylist()


def nest(tids, starts, ends, ids):
    """Depth and parent id of each range among ranges on the same thread (by containment)."""
    n = len(ids)
    depth = [0] * n
    parent = [None] * n
    order = _order(tids, starts, [-e for e in ends], range(n))
    stack: list[int] = []
    cur_tid = object()
    for i in order:
        t, s, e = tids[i], starts[i], ends[i]
        if t != cur_tid:
            stack.clear()
            cur_tid = t
        while stack and ends[stack[-1]] <= s and not (ends[stack[-1]] == s == starts[stack[-1]]):
            stack.pop()
        for j in range(len(stack) - 1, -1, -1):
            if ends[stack[j]] >= e:
                parent[i] = ids[stack[j]]
                depth[i] = j + 1 if j == len(stack) - 1 else _depth_of(stack, j)
                break
        stack.append(i)
    # recompute depths from parents (robust to skipped non-containing stack entries)
    pos = {ids[i]: i for i in range(n)}
    for i in order:
        p = parent[i]
        depth[i] = 0 if p is None else depth[pos[p]] + 1
    return depth, parent


def _depth_of(stack, j):
    return j + 1


def innermost_container(ctids, cstarts, cends, cids, qtids, qstarts, qends):
    """For each query interval, the id of the innermost container on the same thread
    (container.start <= q.start and q.end <= container.end), or None."""
    nc, nq = len(cids), len(qtids)
    all_t = list(ctids) + list(qtids)
    all_s = list(cstarts) + list(qstarts)
    all_e = list(cends) + list(qends)
    typ = [0] * nc + [1] * nq
    out = [None] * nq
    stack: list[int] = []
    cur_tid = object()
    for i in _order(all_t, all_s, typ, [-e for e in all_e]):
        t = all_t[i]
        if t != cur_tid:
            stack.clear()
            cur_tid = t
        s = all_s[i]
        while stack and cends[stack[-1]] < s:
            stack.pop()
        if i < nc:
            stack.append(i)
        else:
            e = all_e[i]
            for j in range(len(stack) - 1, -1, -1):
                if cends[stack[j]] >= e:
                    out[i - nc] = cids[stack[j]]
                    break
    return out
