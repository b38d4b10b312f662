"""The critical path's backward walk over a large window, its choices made for every activity at once.

critical_path.walk_columns follows, from the activity that ends the window, the predecessor that
finished last, one activity at a time. Where the walk reaches an activity k at or after k's start
(the usual case: the time it arrives at is its successor's start or an end no earlier than k's
start), what happens there depends on k alone: the candidate predecessors cut at k's start, the
gap before k and its reason, the activity of another stream that ended in that gap, the next
activity and time. `walk` computes these for all activities with whole-column work (pyarrow;
sorted searches in bulk), then follows the chain with a loop that only records which activity was
reached at what time; an arrival before an activity's start (overlapping work) takes the one-step
rule (`_step`). The pieces are then built from the recorded visits, again in bulk; the gaps before
launch calls that ended late are classified by the host syncs one by one (they are few).

Without stream-wait records (infer_waits), another stream's activity launched before k that
ended last is a candidate too: the latest one not on k's stream where it was launched before k,
else searched one activity at a time below it.
"""
from __future__ import annotations

from array import array
from bisect import bisect_right

import pyarrow as pa
import pyarrow.compute as pc

from .cp_split import CAUSE_CODE, arrow_ints, lit, to_q

_I64, _I8 = pa.int64(), pa.int8()
_NULL = -(2 ** 63)   # a null time (critical_path.NULL)
_EMPTY: list = []   # the syncs of a gap without host syncs (shared: never changed)
_IDLE, _LAUNCH, _SYNC = CAUSE_CODE["idle"], CAUSE_CODE["launch_bound"], CAUSE_CODE["host_sync"]


def searchsorted_right(hay: pa.Array, x: pa.Array) -> pa.Array:
    """For each value v of x: bisect_right(hay, v), the number of values of hay (sorted) at most v."""
    nh, nx = len(hay), len(x)
    if nx == 0:
        return pa.array([], _I64)
    tag = pa.concat_arrays([pa.repeat(pa.scalar(0, _I8), nh), pa.repeat(pa.scalar(1, _I8), nx)])
    order = pc.sort_indices(pa.table({"v": pa.concat_arrays([hay, x]), "tag": tag}),
                            [("v", "ascending"), ("tag", "ascending")])   # (hay first among equals)
    is_x = tag.take(order)
    hay_before = pc.cumulative_sum(pc.subtract(pa.scalar(1, _I64), is_x.cast(_I64)))
    at = pc.indices_nonzero(is_x)
    got = hay_before.take(at)
    orig = pc.subtract(order.take(at).cast(_I64), lit(nh))
    return got.take(pc.sort_indices(orig))   # (back to x's order: orig is a permutation)


def _run_starts(col: pa.Array) -> pa.Array:
    """For each row, the first row of the run of equal values it is in."""
    n = len(col)
    change = pa.concat_arrays([pa.array([True], pa.bool_()), pc.not_equal(col.slice(1), col.slice(0, n - 1))])
    return pc.fill_null_forward(pc.replace_with_mask(pa.nulls(n, _I64), change,
                                                     pc.indices_nonzero(change).cast(_I64)))


def _choices(acts, ws: int, infer_waits: bool) -> dict:
    """What the walk does at each activity k when it arrives at or after k's start (all columns of n
    rows, int64): S (the start, at least ws: the time after k), NC / NT (the next activity, -1 for
    none, and the time then; NT <= ws: the walk ends), gap A (before k: from A0 to S, kind LB 1 a
    late launch, 0 idle; where HA), gap B (no recorded predecessor: from B0 to NT... before the
    activity that ended last, no activity; where HB, ending at G)."""
    n = len(acts)
    start, end, ids, stream = (arrow_ints(c) for c in (acts.start, acts.end, acts.id, acts.stream))
    oend, prev_k, prev_end = arrow_ints(acts.oend), arrow_ints(acts.prev_k), arrow_ints(acts.prev_end)
    wsrc_k, wsrc_end = arrow_ints(acts.wsrc_k), arrow_ints(acts.wsrc_end)
    wsa = pa.scalar(ws, _I64)
    s = pc.max_element_wise(start, wsa)
    # the candidates cut at s: the stream predecessor and the wait source, the later (time, id, k)
    zero, one = lit(0), lit(1)
    has1, has2 = pc.greater_equal(prev_k, zero), pc.greater_equal(wsrc_k, zero)
    k1, k2 = pc.max_element_wise(prev_k, zero), pc.max_element_wise(wsrc_k, zero)
    g1, g2 = pc.min_element_wise(prev_end, s), pc.min_element_wise(wsrc_end, s)
    id1, id2 = ids.take(k1), ids.take(k2)
    later2 = pc.or_(pc.greater(g2, g1), pc.and_(pc.equal(g2, g1), pc.or_(
        pc.greater(id2, id1), pc.and_(pc.equal(id2, id1), pc.greater(wsrc_k, prev_k)))))
    choose2 = pc.and_(has2, pc.or_(pc.invert(has1), later2))
    has_pred = pc.or_(has1, has2)
    g = pc.if_else(choose2, g2, g1)
    pred = pc.if_else(choose2, wsrc_k, prev_k)
    # another stream's activity that ended last by s (the latest one by end order not on k's stream)
    i0 = pc.subtract(searchsorted_right(end, s), one)
    i0c = pc.max_element_wise(i0, zero)
    other = pc.if_else(pc.not_equal(stream.take(i0c), stream), i0, pc.subtract(_run_starts(stream).take(i0c), one))
    other_c = pc.max_element_wise(other, zero)
    other_end = end.take(other_c)
    has_other = pc.and_(pc.greater_equal(i0, zero), pc.greater_equal(other, zero))
    if infer_waits:   # no stream-wait records: that activity, where launched before k, is a candidate too
        g, pred, has_pred = _inferred_waits(acts, ws, s, g, pred, has_pred, ids, end, other, other_end, has_other)
    reached = pc.and_(has_pred, pc.greater_equal(g, wsa))      # (g > ws - 1)
    geff = pc.if_else(reached, g, wsa)
    neg = pa.scalar(-1, _I64)
    term = pc.less_equal(s, wsa)          # k starts at or before ws: the walk ends after it
    gap = pc.and_(pc.invert(term), pc.less(geff, s))
    late = pc.and_(gap, pc.greater(oend, geff))      # the launch call ended after the GPU was ready
    found = pc.and_(has_other, pc.greater(other_end, geff))
    jump = pc.and_(pc.and_(gap, pc.invert(late)), found)
    # after the gap: the predecessor, else the activity that ended last by geff (none: idle to ws)
    on = pc.and_(pc.invert(term), pc.invert(jump))
    to_pred = pc.and_(on, reached)
    any_ = pc.and_(pc.and_(on, pc.invert(reached)), pc.greater(geff, wsa))
    # (few rows: searched for those alone)
    at = pc.indices_nonzero(any_)
    i1 = pc.replace_with_mask(pa.repeat(neg, n), any_, pc.subtract(searchsorted_right(end, geff.take(at)), one))
    i1c = pc.max_element_wise(i1, zero)
    i1_end = end.take(i1c)
    any_ok = pc.and_(any_, pc.and_(pc.greater_equal(i1, zero), pc.greater(i1_end, lit(ws - 1))))
    any_none = pc.and_(any_, pc.invert(any_ok))
    nc = pc.if_else(jump, other, pc.if_else(to_pred, pred, pc.if_else(any_ok, i1, neg)))
    nt = pc.if_else(term, wsa, pc.if_else(jump, other_end, pc.if_else(any_ok, i1_end,
                                                                      pc.if_else(any_none, wsa, geff))))
    a0 = pc.if_else(jump, other_end, geff)
    ha = pc.and_(gap, pc.less(a0, s))
    hb = pc.or_(pc.and_(any_ok, pc.less(i1_end, geff)), any_none)
    b0 = pc.if_else(any_ok, i1_end, wsa)
    return {"S": s, "NC": nc, "NT": nt, "HA": ha, "A0": a0, "LATE": late, "HB": hb, "B0": b0, "G": geff,
            "end": end}


def _inferred_waits(acts, ws: int, s, g, pred, has_pred, ids, end, other, other_end, has_other) -> tuple:
    """The candidates (g, pred, has_pred) with, at each k, the activity of another stream launched
    before k (launch start below k's, or k's unknown) that ended last in (lo, s], lo the candidate's
    time (at least ws - 1): the latest other stream's activity where it was launched before k, else
    searched one activity at a time below it."""
    zero, wm1 = lit(0), lit(ws - 1)
    ostart = arrow_ints(acts.ostart)
    lo = pc.if_else(pc.and_(has_pred, pc.greater_equal(g, wm1)), g, wm1)
    lb_none = pc.equal(ostart, lit(_NULL))
    inside = pc.and_(has_other, pc.greater(other_end, lo))
    before = pc.or_(lb_none, pc.less(ostart.take(pc.max_element_wise(other, zero)), ostart))
    inf = pc.if_else(pc.and_(inside, before), other, lit(-1))
    scan = pc.and_(inside, pc.invert(before))
    rows = pc.indices_nonzero(scan)
    if len(rows):
        ends, streams, ostarts = acts.end, acts.stream, acts.ostart
        got = []
        for k, i, low in zip(rows.to_pylist(), other.take(rows).to_pylist(), lo.take(rows).to_pylist(), strict=True):
            cs, lb = streams[k], ostarts[k]
            i -= 1
            while i >= 0 and ends[i] > low and (streams[i] == cs or ostarts[i] >= lb):
                i -= 1
            got.append(i if i >= 0 and ends[i] > low else -1)
        inf = pc.replace_with_mask(inf, scan, pa.array(got, _I64))
    has_inf = pc.greater_equal(inf, zero)
    inf_c = pc.max_element_wise(inf, zero)
    inf_end, inf_id, bid = end.take(inf_c), ids.take(inf_c), ids.take(pc.max_element_wise(pred, zero))
    better = pc.or_(pc.invert(has_pred), pc.or_(pc.greater(inf_end, g), pc.and_(pc.equal(inf_end, g), pc.or_(
        pc.greater(inf_id, bid), pc.and_(pc.equal(inf_id, bid), pc.greater(inf, pred))))))
    take = pc.and_(has_inf, better)
    return pc.if_else(take, inf_end, g), pc.if_else(take, inf, pred), pc.or_(has_pred, has_inf)


def _step(acts, cur: int, t: int, ws: int, syncs_by_tid: dict | None, infer_waits: bool, syncs_in,
          inferred) -> tuple:
    """One step of the walk at activity cur reached at time t: its pieces (backwards) and the next
    (activity or -1, time)."""
    out: list = []
    start, end = acts.start, acts.end
    s, e = max(start[cur], ws), min(end[cur], t)
    if e > s:
        out.append((s, e, cur, None, None))
    t = min(t, s)
    if t <= ws:
        return out, -1, t
    cands = []
    if acts.prev_k[cur] >= 0:
        pk = acts.prev_k[cur]
        cands.append((min(acts.prev_end[cur], t), acts.id[pk], pk))
    if acts.wsrc_k[cur] >= 0:
        wk = acts.wsrc_k[cur]
        cands.append((min(acts.wsrc_end[cur], t), acts.id[wk], wk))
    if infer_waits:
        lo = ws - 1 if not cands or max(cands)[0] < ws - 1 else max(cands)[0]
        inf = inferred(acts, cur, lo, t, acts.ostart[cur])
        if inf is not None:
            cands.append((end[inf], acts.id[inf], inf))
    g, pred = (max(cands)[0], max(cands)[2]) if cands else (None, None)
    g_eff = ws if g is None or g < ws else g
    if g_eff < t:
        if acts.oend[cur] > g_eff:
            found = syncs_in(syncs_by_tid, acts, cur, g_eff, acts.ostart[cur])
            out.append((g_eff, t, cur, "host_sync" if found else "launch_bound", found or _EMPTY))
        else:
            inf = inferred(acts, cur, g_eff, t)
            if inf is not None:
                if end[inf] < t:
                    out.append((end[inf], t, cur, "idle", _EMPTY))
                return out, inf, end[inf]
            out.append((g_eff, t, cur, "idle", _EMPTY))
        t = g_eff
    if pred is not None and g is not None and g > ws - 1:
        return out, pred, t
    if t <= ws:
        return out, -1, t
    i = bisect_right(end, t) - 1
    if i < 0 or end[i] <= ws - 1:
        out.append((ws, t, None, "idle", _EMPTY))
        return out, -1, ws
    if end[i] < t:
        out.append((end[i], t, None, "idle", _EMPTY))
    return out, i, end[i]


def walk(acts, ws: int, we: int, last: int, syncs_by_tid: dict | None, infer_waits: bool, pieces, syncs_in,
         inferred) -> None:
    """The walk of a window (we > ws, acts not empty) from `last` (the activity ending last), its
    pieces added to `pieces` (critical_path.Pieces) in time order. syncs_in, inferred:
    critical_path's searches of the host syncs and of another stream's activity."""
    ch = _choices(acts, ws, infer_waits)
    end = acts.end
    first: list = []   # the pieces the loop adds itself, backwards
    t = we
    if end[last] < we:   # the window ends with zero-length work (not among acts): nothing ran after it
        t = max(end[last], ws)
        first.append((t, we, None, "idle", _EMPTY))
    s_of, nc_of, nt_of = to_q(ch["S"]), to_q(ch["NC"]), to_q(ch["NT"])   # (arrays: no int objects kept)
    seen = bytearray(len(acts))
    vk, vt = array("q"), array("q")
    cur = last
    while t > ws:
        if cur < 0 or seen[cur]:
            first.append((ws, t, None, "idle", _EMPTY))
            break
        seen[cur] = 1
        if t >= s_of[cur]:
            vk.append(cur)
            vt.append(t)
            t, cur = nt_of[cur], nc_of[cur]
        else:
            got, cur, t = _step(acts, cur, t, ws, syncs_by_tid, infer_waits, syncs_in, inferred)
            first += got
    del s_of, nc_of, nt_of, seen
    _build(acts, ch, arrow_ints(vk), arrow_ints(vt), first, syncs_by_tid, pieces)


def _build(acts, ch: dict, vk: pa.Array, vt: pa.Array, first: list, syncs_by_tid, pieces) -> None:
    """The pieces of the visits (vk reached at vt) and of the one-step pieces `first`, in time order."""
    s = ch["S"].take(vk)
    e = pc.min_element_wise(ch["end"].take(vk), vt)
    act = pc.indices_nonzero(pc.greater(e, s))
    ha = pc.indices_nonzero(ch["HA"].take(vk))
    hb = pc.indices_nonzero(ch["HB"].take(vk))
    ka, kb = vk.take(ha), vk.take(hb)
    na, nb, nf = len(ha), len(hb), len(first)
    late = ch["LATE"].take(ka)
    starts = pa.concat_arrays([s.take(act), ch["A0"].take(ka), ch["B0"].take(kb),
                               pa.array([p[0] for p in first], _I64)])
    ends = pa.concat_arrays([e.take(act), ch["S"].take(ka), ch["G"].take(kb), pa.array([p[1] for p in first], _I64)])
    ks = pa.concat_arrays([vk.take(act), ka, pa.repeat(pa.scalar(-1, _I64), nb),
                           pa.array([-1 if p[2] is None else p[2] for p in first], _I64)])
    codes = pa.concat_arrays([pa.repeat(pa.scalar(0, _I8), len(act)),
                              pc.if_else(late, pa.scalar(_LAUNCH, _I8), pa.scalar(_IDLE, _I8)),
                              pa.repeat(pa.scalar(_IDLE, _I8), nb),
                              pa.array([CAUSE_CODE[p[3]] for p in first], _I8)])
    order = pc.sort_indices(starts)
    n_act = len(act)
    # where each row went: the one-step pieces keep their syncs, the late launches get theirs
    pos = pc.inverse_permutation(order.cast(_I64))     # (row -> its place in time order)
    pieces.start, pieces.end, pieces.k = to_q(starts.take(order)), to_q(ends.take(order)), to_q(ks.take(order))
    codes = codes.take(order)
    code = array("b", bytes(memoryview(codes.buffers()[1])[codes.offset:codes.offset + len(codes)]))
    found_at: dict = {}
    lates = pc.indices_nonzero(late)
    if len(lates) and syncs_by_tid:   # (the late launches' gaps from A0: host_sync where a sync ended in them)
        got = _late_syncs(acts, syncs_by_tid, ka.take(lates), ch["A0"].take(ka.take(lates)))
        if got:
            at = pos.slice(n_act, na).take(lates).take(pa.array([i for i, _ in got], _I64)).to_pylist()
            for j, (_, found) in zip(at, got, strict=True):
                code[j], found_at[j] = _SYNC, found
    for j, p in zip(pos.slice(n_act + na + nb, nf).to_pylist(), first, strict=True):
        if p[4]:
            found_at[j] = p[4]
    pieces.code, pieces.syncs = code, SparseSyncs(code, found_at)


def _late_syncs(acts, syncs_by_tid: dict, ks: pa.Array, los: pa.Array) -> list[tuple[int, list]]:
    """critical_path._syncs_in for many late launches at once: for the i-th (activity ks[i], its gap
    from los[i]) the host syncs on its launching thread that ended from los[i] to the launch call's
    start, in end order; (i, syncs) where there are any. Each thread's syncs (sorted by end) are
    searched in bulk for the launches of that thread."""
    rank = acts.rank
    threads = [(tid, v) for (r, tid), v in syncs_by_tid.items() if r == rank and v[0]]
    if not threads:
        return []
    tid_q, hi = arrow_ints(acts.tid).take(ks), arrow_ints(acts.ostart).take(ks)
    known = pc.not_equal(hi, lit(_NULL))   # (a launch without a start: none, as _syncs_in says)
    out: list = []
    for tid, (ends, rows) in threads:
        mine = pc.indices_nonzero(pc.and_(known, pc.equal(tid_q, lit(_NULL if tid is None else tid))))
        if not len(mine):
            continue
        e = arrow_ints(ends)
        upper = searchsorted_right(e, hi.take(mine))                         # ends at most the launch
        lower = searchsorted_right(e, pc.subtract(los.take(mine), lit(1)))  # ends before the gap
        has = pc.indices_nonzero(pc.greater(upper, lower))
        out += [(i, rows[a:b]) for i, a, b in zip(mine.take(has).to_pylist(), lower.take(has).to_pylist(),
                                                  upper.take(has).to_pylist(), strict=True)]
    return out


class SparseSyncs:
    """The syncs column of pieces (a sequence): None for an activity (code 0), the host syncs of a
    host_sync gap (`found`: piece -> list), else an empty list (shared)."""

    def __init__(self, code: array, found: dict):
        self._code, self._found = code, found

    def __len__(self) -> int:
        return len(self._code)

    def __getitem__(self, j: int):
        got = self._found.get(j)
        if got is not None:
            return got
        return None if self._code[j] == 0 else _EMPTY

    def __iter__(self):
        return (self[j] for j in range(len(self._code)))
