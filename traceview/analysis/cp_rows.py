"""The critical path's pieces split over the timeline's segments one piece and one segment at a
time: the same rule and the same `CodedPath` as cp_split's whole-column split, for small windows.

cp_split pays a fixed cost per Arrow call (some 50 calls a window, 1-2 ms in all), which is the
whole cost of a window of a few hundred activities: a job of 64 ranks x 4 steps (256 windows of
about 170 activities) spent 0.36 s in cp_split against 0.09 s here. critical_path.split takes
this loop below SPLIT_IN_BULK activities; tests/test_cp_split.py holds both to the same paths on
random windows.
"""
from __future__ import annotations

from array import array
from bisect import bisect_right

from .cp_split import CATEGORIES, CAUSE_CODE, EXTRAS, IMBALANCE_MIN, CodedPath

_CATEGORY_CODE = {c: i for i, c in enumerate(CATEGORIES)}
_EXTRA_CODE = {e: i for i, e in enumerate(EXTRAS)}
_GAP_CATEGORY = {"host_sync": "host_sync_ns", "launch_bound": "launch_bound_ns"}


def split(pieces, segs, acts, comm: dict) -> CodedPath:
    """The path of one window (as cp_split.split: adjacent equal parts merged, compute parts without
    an activity) from the walk's pieces (critical_path.Pieces, or tuples (start, end, k or None,
    cause, syncs)), the window's segments and activities. comm: id -> {"kind", "wait_until",
    "imbalance"} for communication activities."""
    ids, cls = acts.id.tolist(), acts.cls   # (lists: indexing returns their objects)
    p_start, p_end, p_k = array("q"), array("q"), array("q")
    p_cat: list = []
    p_cause: list = []
    p_extra: list = []
    comm_list = [(acts.start[k], i, acts.end[k], k) for k, i in enumerate(ids) if cls[k] == "comm" and i in comm]

    def add(a, b, category, cause, ref, extra=None):
        if b <= a:
            return
        if p_end and p_end[-1] == a and p_cat[-1] == category and p_cause[-1] == cause \
                and p_k[-1] == ref and p_extra[-1] == extra:
            p_end[-1] = b
            return
        p_start.append(a)
        p_end.append(b)
        p_k.append(ref)
        p_cat.append(category)
        p_cause.append(cause)
        p_extra.append(extra)

    def comm_part(a, b, ck):
        info = comm[ids[ck]]
        cat = "all_to_all_ns" if info["kind"] == "all_to_all" else "other_comm_ns"
        wu = info.get("wait_until")
        if wu is not None and wu > a:
            m = min(b, wu)
            add(a, m, cat, "peer_wait", ck)
            a = m
        if b <= a:
            return
        ratio = (info.get("imbalance") or {}).get("max_over_mean", 1.0)
        exposed = "exposed_a2a" if info["kind"] == "all_to_all" else "exposed_comm"
        if ratio > IMBALANCE_MIN:
            imb = int(round((b - a) * (1.0 - 1.0 / ratio)))
            add(a, a + imb, cat, "imbalance", ck)
            a += imb
        add(a, b, cat, exposed, ck)

    st, se, sc, sm, sx = segs.t.tolist(), segs.e.tolist(), segs.c.tolist(), segs.m.tolist(), segs.x.tolist()
    if any(map(int.__ge__, st, se)):   # an empty segment covers nothing (as in cp_split): no cut there
        full = [q for q in range(len(st)) if se[q] > st[q]]
        st, se, sc, sm, sx = ([col[q] for q in full] for col in (st, se, sc, sm, sx))
    nseg, j = len(st), 0
    src = ((a, b, -1 if k is None else k, c, y)
           for a, b, k, c, y in (pieces.tuples() if hasattr(pieces, "tuples") else pieces))
    for ps, pe, k, cause, syncs in src:   # (k: -1 for none)
        if cause is None:
            ck = cls[k]
            if ck != "memory" and (ck != "comm" or ids[k] not in comm):
                add(ps, pe, "compute_ns", None, -1)   # plain work: compute over its whole span
                continue
        ref = k
        is_comm = k >= 0 and cls[k] == "comm" and ids[k] in comm
        j = bisect_right(se, ps, j)   # the first segment ending after ps (segments tile the window)
        q, a = j, ps
        while a < pe:
            if q >= nseg or st[q] > a:  # not covered by a segment (cannot happen in a window)
                b = min(pe, st[q]) if q < nseg else pe
                c = m = x = 0
            else:
                b = min(pe, se[q])
                c, m, x = sc[q], sm[q], sx[q]
                if b >= se[q]:
                    q += 1
            gap, gcause = cause is not None, cause
            if not gap:
                if cls[k] == "memory" and c == 0 and m > 0:  # a copy beside a collective: comm time
                    gap, gcause = True, "idle"
                elif not is_comm:
                    add(a, b, "compute_ns", None, -1)
                elif c > 0:
                    add(a, b, "compute_ns", None, -1, "overlapped comm")
                else:
                    comm_part(a, b, k)
            if gap:
                if c > 0 or (x > 0 and m == 0):
                    add(a, b, "compute_ns", None, -1, "other stream")
                elif m > 0:
                    running = [r for r in comm_list if r[0] <= a and r[2] >= b]
                    if running:
                        comm_part(a, b, max(running)[3])
                    else:
                        add(a, b, "other_comm_ns", "exposed_comm", ref)
                else:
                    cat = _GAP_CATEGORY.get(gcause, "idle_ns")
                    extra = tuple(h["id"] for h in syncs) if gcause == "host_sync" else None
                    add(a, b, cat, gcause, ref, extra)
            a = b
    tuples: dict = {}
    extra_code = array("q", [_EXTRA_CODE[e] if e is None or type(e) is str
                             else len(EXTRAS) + tuples.setdefault(e, len(tuples)) for e in p_extra])
    return CodedPath(acts, p_start, p_end, p_k, bytes(_CATEGORY_CODE[c] for c in p_cat),
                     bytes(CAUSE_CODE[c] for c in p_cause), extra_code, list(tuples))
