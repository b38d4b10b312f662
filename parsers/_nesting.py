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


def nest(tids, starts, ends, ids, qtids=(), qstarts=(), qends=()):
    """Depth and parent id of each range among ranges on the same thread (by containment).
    With query intervals (q*), also returns, in the same sweep, the innermost range that
    contains each query (see innermost_container)."""
    n, nq = len(ids), len(qtids)
    parent_ix = [-1] * n
    found = [None] * nq
    all_t = list(tids) + list(qtids) if nq else tids
    all_s = list(starts) + list(qstarts) if nq else starts
    neg_e = [-e for e in ends] + ([-e for e in qends] if nq else [])
    typ = [0] * n + [1] * nq
    order = _order(all_t, all_s, typ, neg_e) if nq else _order(tids, starts, neg_e, range(n))
    stack: list[int] = []
    cur_tid = object()
    for i in order:
        t, s = all_t[i], all_s[i]
        if t != cur_tid:
            stack.clear()
            cur_tid = t
        if i < n:
            e = ends[i]
            while stack and ends[stack[-1]] <= s and not (ends[stack[-1]] == s == starts[stack[-1]]):
                stack.pop()
            for j in range(len(stack) - 1, -1, -1):
                if ends[stack[j]] >= e:
                    parent_ix[i] = stack[j]
                    break
            stack.append(i)
        else:  # a query: no popping; ranges that ended before it fail the containment test
            e = qends[i - n]
            for j in range(len(stack) - 1, -1, -1):
                if ends[stack[j]] >= e and starts[stack[j]] <= s:
                    found[i - n] = ids[stack[j]]
                    break
    depth = [0] * n
    for i in order:  # parents come before their children in sweep order
        if i < n and parent_ix[i] >= 0:
            depth[i] = depth[parent_ix[i]] + 1
    parent = [ids[p] if p >= 0 else None for p in parent_ix]
    return (depth, parent, found) if nq else (depth, parent)


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
