"""The critical path's walk (critical_path.walk_columns, its candidates compared as scalars over
list columns) against a plain reference of the same rule: at each activity the candidate that
finished last, as the tuple (time, id, k), among the stream predecessor, the wait source and
(without wait records) the other stream's work launched before it; gaps classified by the launch
and the host syncs. Random windows of a few activities on a few streams."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from traceview.analysis import critical_path as cp

NULL = cp.NULL


def _latest(acts, cur, lo, hi, launched_before=NULL):
    ends = list(acts.end)
    best = None
    for i in range(len(ends)):
        if lo < ends[i] <= hi and (cur is None or (i != cur and acts.stream[i] != acts.stream[cur] and (
                launched_before == NULL or acts.ostart[i] < launched_before))):
            best = i if best is None or ends[i] >= ends[best] else best
    return best


def _syncs(syncs_by_tid, acts, cur, lo, hi):
    if not syncs_by_tid or hi == NULL:
        return []
    tid = acts.tid[cur]
    lst = syncs_by_tid.get((acts.rank, None if tid == NULL else tid))
    if not lst:
        return []
    return [h for e, h in zip(*lst, strict=True) if lo <= e <= hi]


def reference(acts, ws, we, syncs_by_tid=None, infer_waits=False):
    out = []
    n = len(acts)
    if we <= ws:
        return out
    if n == 0:
        return [(ws, we, None, "idle", [])]
    end, start = list(acts.end), list(acts.start)
    last = min(k for k in range(n) if end[k] == end[n - 1])
    t, seen, cur = we, set(), last
    if end[last] < we:   # nothing ran after the last activity (which may end at or before ws)
        t = max(end[last], ws)
        out.append((t, we, None, "idle", []))
    while t > ws:
        if cur is None or cur in seen:
            out.append((ws, t, None, "idle", []))
            break
        seen.add(cur)
        s, e = max(start[cur], ws), min(end[cur], t)
        if e > s:
            out.append((s, e, cur, None, None))
        t = min(t, s)
        if t <= ws:
            break
        cands = []
        if acts.prev_k[cur] >= 0:
            cands.append((min(acts.prev_end[cur], t), acts.id[acts.prev_k[cur]], acts.prev_k[cur]))
        if acts.wsrc_k[cur] >= 0:
            cands.append((min(acts.wsrc_end[cur], t), acts.id[acts.wsrc_k[cur]], acts.wsrc_k[cur]))
        if infer_waits:
            lo = ws - 1 if not cands or max(cands)[0] < ws - 1 else max(cands)[0]
            inf = _latest(acts, cur, lo, t, acts.ostart[cur])
            if inf is not None:
                cands.append((end[inf], acts.id[inf], inf))
        g, pred = (max(cands)[0], max(cands)[2]) if cands else (None, None)
        g_eff = ws if g is None or g < ws else g
        if g_eff < t:
            if acts.oend[cur] > g_eff:
                found = _syncs(syncs_by_tid, acts, cur, g_eff, acts.ostart[cur])
                out.append((g_eff, t, cur, "host_sync" if found else "launch_bound", found))
            else:
                inf = _latest(acts, cur, g_eff, t)
                if inf is not None:
                    if end[inf] < t:
                        out.append((end[inf], t, cur, "idle", []))
                    t, cur = end[inf], inf
                    continue
                out.append((g_eff, t, cur, "idle", []))
            t = g_eff
        cur = pred if pred is not None and g > ws - 1 else None
        if cur is None and t > ws:
            inf = _latest(acts, None, ws - 1, t)
            if inf is None:
                out.append((ws, t, None, "idle", []))
                break
            if end[inf] < t:
                out.append((end[inf], t, None, "idle", []))
            t, cur = end[inf], inf
    return out[::-1]


@st.composite
def windows(draw):
    n = draw(st.integers(0, 9))
    dense = draw(st.booleans())   # (ids close together: Acts places them by offset, else by hashing)
    rows = []
    for i in range(n):
        s = draw(st.integers(0, 40))
        d = draw(st.integers(0, 12))
        launch = draw(st.one_of(st.none(), st.integers(-5, 45)))
        rows.append({"id": 100 + (i if dense else draw(st.integers(0, 50)) * 10 + i), "stream": draw(st.integers(0, 2)),
                     "tid": draw(st.sampled_from([None, 1, 2])), "start_ns": s, "end_ns": s + d,
                     "origin_start_ns": launch,
                     "origin_end_ns": None if launch is None else launch + draw(st.integers(0, 10))})
    rows.sort(key=lambda r: (r["end_ns"], r["start_ns"], r["id"]))
    ids = [r["id"] for r in rows]
    for k, r in enumerate(rows):
        same = [j for j in range(k) if rows[j]["stream"] == r["stream"]]
        p = same[-1] if same and draw(st.booleans()) else None
        if p is None and draw(st.integers(0, 4)) == 0:
            r["prev_id"], r["prev_end_ns"] = 999_999, draw(st.integers(0, 40))   # outside the window
        else:
            r["prev_id"] = None if p is None else ids[p]
            r["prev_end_ns"] = None if p is None else rows[p]["end_ns"]
        w = draw(st.one_of(st.none(), st.integers(0, max(0, n - 1)))) if n else None
        r["wait_src_id"] = None if w is None or w == k else ids[w]
        r["wait_src_end_ns"] = None if r["wait_src_id"] is None else rows[w]["end_ns"]
        r.update(rank=0, **{"class": "compute"}, kind="kernel", name=f"k{k}", layer=None, phase=None, stage=None)
    ws = draw(st.integers(-3, 20))
    we = ws + draw(st.integers(0, 50))
    syncs = {}
    for tid in (None, 1, 2):   # (None: the syncs of activities without a launching thread)
        ends = sorted(draw(st.lists(st.integers(-5, 50), max_size=3)))
        if ends:
            syncs[(0, tid)] = (ends, [{"id": 5000 + (tid or 0) * 10 + j, "end_ns": e} for j, e in enumerate(ends)])
    return rows, ws, we, syncs, draw(st.booleans())


def _acts(rows):
    table = pa.Table.from_pylist(rows, schema=pa.schema([
        ("id", pa.int64()), ("stream", pa.int64()), ("tid", pa.int64()), ("start_ns", pa.int64()),
        ("end_ns", pa.int64()), ("origin_start_ns", pa.int64()), ("origin_end_ns", pa.int64()),
        ("prev_id", pa.int64()), ("prev_end_ns", pa.int64()), ("wait_src_id", pa.int64()),
        ("wait_src_end_ns", pa.int64()), ("rank", pa.int32()), ("class", pa.string()), ("kind", pa.string()),
        ("name", pa.string()), ("layer", pa.int32()), ("phase", pa.string()), ("stage", pa.string())]))
    return cp.Acts(table) if rows else cp.Acts()


@settings(max_examples=600, deadline=None)
@given(windows())
def test_walk_in_bulk_matches_the_reference(case):
    """cp_walk (the choices at every activity made at once, then the chain followed), forced on
    these small windows: the same pieces as the reference, with or without stream-wait records."""
    rows, ws, we, syncs, infer = case
    acts = _acts(rows)
    old = cp.WALK_IN_BULK
    cp.WALK_IN_BULK = 0
    try:
        got = cp.walk(acts, ws, we, syncs, infer_waits=infer)
    finally:
        cp.WALK_IN_BULK = old
    assert got == reference(acts, ws, we, syncs, infer)


@settings(max_examples=400, deadline=None)
@given(windows())
def test_walk_matches_the_reference(case):
    rows, ws, we, syncs, infer = case
    table = pa.Table.from_pylist(rows, schema=pa.schema([
        ("id", pa.int64()), ("stream", pa.int64()), ("tid", pa.int64()), ("start_ns", pa.int64()),
        ("end_ns", pa.int64()), ("origin_start_ns", pa.int64()), ("origin_end_ns", pa.int64()),
        ("prev_id", pa.int64()), ("prev_end_ns", pa.int64()), ("wait_src_id", pa.int64()),
        ("wait_src_end_ns", pa.int64()), ("rank", pa.int32()), ("class", pa.string()), ("kind", pa.string()),
        ("name", pa.string()), ("layer", pa.int32()), ("phase", pa.string()), ("stage", pa.string())]))
    acts = cp.Acts(table) if rows else cp.Acts()
    got = cp.walk(acts, ws, we, syncs, infer_waits=infer)
    assert got == reference(acts, ws, we, syncs, infer)
    if we > ws:   # the pieces tile the window
        assert got[0][0] == ws and got[-1][1] == we
        assert all(a[1] == b[0] for a, b in zip(got, got[1:], strict=False))


def test_reference_by_hand():
    """Two streams: b (stream 1, 10-20) waits for a (stream 0, 0-8) recorded as its wait source;
    launched at 15, after a ended: 8-10 is launch-bound, 0-8 a, 10-20 b."""
    rows = [{"id": 1, "stream": 0, "start_ns": 0, "end_ns": 8},
            {"id": 2, "stream": 1, "start_ns": 10, "end_ns": 20, "origin_start_ns": 5, "origin_end_ns": 15,
             "wait_src_id": 1, "wait_src_end_ns": 8}]
    for r in rows:
        r.setdefault("origin_start_ns", None)
        r.setdefault("origin_end_ns", None)
        r.update(rank=0, tid=1, **{"class": "compute"}, kind="kernel", name="x", layer=None, phase=None,
                 stage=None, prev_id=None, prev_end_ns=None)
        r.setdefault("wait_src_id", None)
        r.setdefault("wait_src_end_ns", None)
    acts = cp.Acts(pa.Table.from_pylist(rows))
    want = [(0, 8, 0, None, None), (8, 10, 1, "launch_bound", []), (10, 20, 1, None, None)]
    assert cp.walk(acts, 0, 20) == want
    assert reference(acts, 0, 20) == want


def test_inferred_wait_needs_an_earlier_launch_by_hand():
    """No stream-wait records: a (stream 0, 0-8) and b (stream 1, 10-20) were launched at the same
    time (5), so a was not launched before b and is no candidate for b's wait: 0-10 is b's late
    launch (the call ended at 12), the walk does not reach a. Launched at 4, a is b's wait: 0-8 is
    a, 8-10 still b's late launch."""
    rows = [{"id": 1, "stream": 0, "start_ns": 0, "end_ns": 8, "origin_start_ns": 5, "origin_end_ns": 6},
            {"id": 2, "stream": 1, "start_ns": 10, "end_ns": 20, "origin_start_ns": 5, "origin_end_ns": 12}]
    for r in rows:
        r.update(rank=0, tid=1, **{"class": "compute"}, kind="kernel", name="x", layer=None, phase=None,
                 stage=None, prev_id=None, prev_end_ns=None, wait_src_id=None, wait_src_end_ns=None)
    same = [(0, 10, 1, "launch_bound", []), (10, 20, 1, None, None)]
    rows[0]["origin_start_ns"] = 4
    earlier = [(0, 8, 0, None, None), (8, 10, 1, "launch_bound", []), (10, 20, 1, None, None)]
    for launch, want in ((5, same), (4, earlier)):
        rows[0]["origin_start_ns"] = launch
        acts = _acts(rows)
        old = cp.WALK_IN_BULK
        for bulk in (0, 10 ** 9):
            cp.WALK_IN_BULK = bulk
            try:
                assert cp.walk(acts, 0, 20, {}, infer_waits=True) == want
            finally:
                cp.WALK_IN_BULK = old
        assert reference(acts, 0, 20, {}, True) == want
