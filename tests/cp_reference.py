"""The per-piece implementations that whole-column code replaced, kept as references for the
property tests: `split` (the path's pieces over the segments, one piece and one segment at a
time; critical_path used it before cp_split) and `composition` (a loop over the path's rows)."""
from __future__ import annotations

from array import array
from bisect import bisect_right

from traceview.analysis import stalls
from traceview.analysis.critical_path import CATEGORIES, IMBALANCE_MIN, NULL, Acts, Segments


class Path:
    """One window's critical path as columns, in time order: start, end, k (the activity's index in
    the window's Acts; -1 for none), category, cause (None on compute) and extra (the host syncs'
    ids of a host_sync gap, or a note). Iterating gives the segments as dicts {start, end,
    category, cause, id, extra}."""

    def __init__(self, acts: Acts):
        self.acts = acts
        self.start, self.end, self.k = array("q"), array("q"), array("q")
        self.category: list = []
        self.cause: list = []
        self.extra: list = []

    def __len__(self) -> int:
        return len(self.start)

    def id(self, j: int):
        k = self.k[j]
        return self.acts.id[k] if k >= 0 else None

    def __iter__(self):
        for j in range(len(self.start)):
            yield {"start": self.start[j], "end": self.end[j], "category": self.category[j],
                   "cause": self.cause[j], "id": self.id(j), "extra": self.extra[j]}


_GAP_CATEGORY = {"host_sync": "host_sync_ns", "launch_bound": "launch_bound_ns"}


def split(pieces, segs: Segments, acts: Acts, comm: dict) -> Path:
    """The path (`Path`, in time order, adjacent equal segments merged); compute segments carry no
    activity (k -1: they merge across activities, only their sums are used).
    comm: id -> {"kind", "wait_until", "imbalance"} for communication activities."""
    out = Path(acts)
    ids, cls = acts.id.tolist(), acts.cls   # (lists: indexing returns their objects)
    p_start, p_end, p_k, p_cat, p_cause, p_extra = out.start, out.end, out.k, out.category, out.cause, out.extra
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
                # work on the path that is neither a collective nor a copy: compute over every
                # segment it spans, whatever runs beside it (`add` inlined: the common piece)
                if pe > ps:
                    if p_end and p_end[-1] == ps and p_cat[-1] == "compute_ns" and p_cause[-1] is None \
                            and p_k[-1] == -1 and p_extra[-1] is None:
                        p_end[-1] = pe
                    else:
                        p_start.append(ps)
                        p_end.append(pe)
                        p_k.append(-1)
                        p_cat.append("compute_ns")
                        p_cause.append(None)
                        p_extra.append(None)
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
    return out


def composition(path: Path, ws: int, we: int) -> dict:
    comp = {k: 0 for k in CATEGORIES}
    peer = imb = overlapped = 0
    for a, b, cat, cause, extra in zip(path.start, path.end, path.category, path.cause, path.extra, strict=True):
        d = b - a
        comp[cat] += d
        if cause == "peer_wait":
            peer += d
        elif cause == "imbalance":
            imb += d
        if extra == "overlapped comm":
            overlapped += d
    comp["peer_wait_ns"], comp["imbalance_ns"], comp["overlapped_comm_ns"] = peer, imb, overlapped
    total = sum(comp[k] for k in CATEGORIES)
    if total != we - ws:
        raise AssertionError(f"critical path does not cover the window: {total} != {we - ws}")
    comp["window_ns"] = we - ws
    return comp


# stalls: the grouping of a window's path into stall rows and their evidence, one path row at a
# time (stalls._window_stalls / a2a_exposure before they were whole-column)
_BY_ACTIVITY = stalls._BY_ACTIVITY
_NO_ATTR = stalls._NO_ATTR
COMM_CAUSES = stalls.COMM_CAUSES
_overlap_compute, _independent, _ops, _nz = stalls._overlap_compute, stalls._independent, stalls._ops, stalls._nz


def _evidence(cause: str, js: list[int], w: dict, coll_by_id: dict) -> dict:
    """Evidence of one stall: the path segments js (indices into the window's Path) of one group."""
    acts, path = w["acts"], w["path"]
    k = path.k[js[0]]
    ref = k if k >= 0 else None
    ev: dict = {"activity": acts.name(k) if ref is not None else None, "pieces": len(js)}
    if cause in COMM_CAUSES and ref is not None:
        a, b, rid = acts.start[k], acts.end[k], acts.id[k]
        hidden = _overlap_compute(w["segments"], a, b)
        ev.update(comm_dur_ns=b - a, hidden_ns=hidden, hidden_share=hidden / max(1, b - a))
        c = coll_by_id.get(rid)
        if c is not None:
            ev.update(collective={"kind": c["kind"], "group": c["group"], "index": c["index"]},
                      straggler=c["straggler"], skew_ns=c["skew_ns"], wait_ns=c["wait_ns"].get(str(w["rank"])))
            if cause == "imbalance" and c.get("imbalance"):
                ev.update(splits=c["imbalance"]["splits"], max_over_mean=c["imbalance"]["max_over_mean"])
        if cause in ("exposed_a2a", "exposed_comm"):
            layer, phase, _ = acts.attr[k]
            o0 = _nz(acts.ostart[k])
            indep = [i for i in _independent(w).get((layer, phase), []) if _nz(acts.ostart[i]) >= o0]
            starts, ends = acts.start, acts.end
            work = sum(ends[i] - starts[i] for i in indep)
            after = sum(ends[i] - max(starts[i], b) for i in indep if ends[i] > b)
            ev.update(independent_work_ns=work, independent_work_available=work > 0,
                      independent_work_after_ns=after,
                      independent_stages=sorted({acts.attr[i][2] for i in indep}))
    elif cause == "host_sync":
        ids = path.extra[js[0]] or ()
        sync_by_id = w["syncs"]
        calls = [sync_by_id[i] for i in ids if i in sync_by_id]
        if calls:
            main = max(calls, key=lambda h: (h["dur_ns"], h["end_ns"]))
            ops = _ops(main)
            ev.update(sync_call=main["name"], sync_ns=main["dur_ns"], sync_start_ns=main["start_ns"],
                      op=ops[0] if ops else None, ops=ops,
                      calls=[{"name": h["name"], "dur_ns": h["dur_ns"], "ops": _ops(h)} for h in calls])
        ev["resumed_by"] = ev.pop("activity")
    elif cause in ("launch_bound", "idle"):
        ps, pe = path.start, path.end
        gaps = [pe[j] - ps[j] for j in js]
        ev.update(gaps=len(gaps), max_gap_ns=max(gaps), mean_gap_ns=sum(gaps) // len(gaps),
                  activities=len({path.k[j] for j in js}), last_start_ns=ps[js[-1]])
        ev.pop("activity")
        if cause == "launch_bound" and ref is not None:
            tid = acts.tid[k]
            ev["thread"] = None if tid == NULL else tid
        rank = w["rank"]
        late = []
        for kk in dict.fromkeys(path.k[j] for j in js):
            c = coll_by_id.get(acts.id[kk]) if kk >= 0 else None
            if c is not None and c["straggler"] == rank and c["skew_ns"] > 0:
                late.append(c)
        if late:  # the gap delayed this rank's arrival at a collective where it was the last rank
            ev["late_to_collectives"] = [{"kind": c["kind"], "group": c["group"], "index": c["index"],
                                          "skew_ns": c["skew_ns"]} for c in late]
    return ev


def _window_stalls(w: dict, coll_by_id: dict) -> list[dict]:
    """The stall rows of one window (its path's non-compute segments grouped), sorted."""
    path, attr = w["path"], w["acts"].attr
    rank, step = w["rank"], w["step"]
    groups: dict = {}
    pk, pc_ = path.k, path.cause
    for j in range(len(pk)):
        cause = pc_[j]
        if cause is None:
            continue
        k = pk[j]
        if cause in _BY_ACTIVITY:
            key = (cause, k)
        else:
            key = (cause,) + (attr[k] if k >= 0 else _NO_ATTR)
        lst = groups.get(key)
        if lst is None:
            groups[key] = [j]
        else:
            lst.append(j)
    out = []
    ps, pe = path.start, path.end
    for key, js in groups.items():
        cause = key[0]
        k = pk[js[0]]
        a = attr[k] if k >= 0 else _NO_ATTR
        out.append({"rank": rank, "step": step, "layer": a[0], "phase": a[1], "stage": a[2],
                    "cause": cause, "start_ns": ps[js[0]],
                    "dur_ns": sum(pe[j] - ps[j] for j in js),
                    "evidence": _evidence(cause, js, w, coll_by_id)})
    out.sort(key=lambda s: (-s["dur_ns"], s["rank"], s["step"], s["start_ns"], s["cause"]))
    return out


def a2a_exposure(paths: list[dict], comm: dict) -> list[dict]:
    """Per all-to-all in a window: duration, time hidden by compute, exposed time on the critical path."""
    out = []
    for w in paths:
        acts, path = w["acts"], w["path"]
        on_path: dict = {}
        for k, cat, a, b in zip(path.k, path.category, path.start, path.end, strict=True):
            if cat == "all_to_all_ns":
                on_path[k] = on_path.get(k, 0) + b - a
        for k, i in enumerate(acts.id):
            info = comm.get(i)
            if info is None or info["kind"] != "all_to_all":
                continue
            layer, phase, stage = acts.attr[k]
            a, b = acts.start[k], acts.end[k]
            out.append({"rank": w["rank"], "step": w["step"], "layer": layer, "phase": phase, "stage": stage,
                        "start_ns": a, "dur_ns": b - a, "hidden_ns": _overlap_compute(w["segments"], a, b),
                        "exposed_on_path_ns": on_path.get(k, 0)})
    return sorted(out, key=lambda d: (d["rank"], d["step"], d["start_ns"]))
