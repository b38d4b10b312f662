"""Critical path of each step window (per rank), walked backwards from the end of the step.

The dependency graph comes from the canonical tables (`cp_preds`): order on each stream,
cross-stream waits (stream_wait_event records; where a trace records none, an activity on another
stream that ended while this one's stream sat idle with its launch already issued is taken as
the awaited work), launch edges (a kernel starts no earlier than its launch call; when the call
ended after the GPU predecessors had finished, the GPU waited for the host) and host syncs (the
host blocked in a sync call until the GPU drained, so the work launched next could not be queued
ahead). The walk starts at the activity that ends the window; at each activity it follows the
predecessor that finished last. A gap between that predecessor's end and the activity's start is
GPU idle on the path and gets its reason: `host_sync` (the launching thread returned from a host
sync inside the gap), `launch_bound` (the launch call ended after the GPU was ready), else `idle`
(work was queued: GPU-side latency or an unrecorded dependency).

The walk's pieces cover the window exactly (integer ns). Each piece is then split over the
elementary segments of the timeline (`segments`): time with a compute kernel running anywhere
counts as compute (a collective on the path that compute hides is not a stall), time with only
communication running is communication (peer wait before the last rank arrived, imbalance where
split sizes are uneven, else exposed), time with nothing running keeps the gap's reason.
"""
from __future__ import annotations

from bisect import bisect_right

from ..db import Session

CATEGORIES = ("compute_ns", "all_to_all_ns", "other_comm_ns", "launch_bound_ns", "host_sync_ns", "idle_ns")
IMBALANCE_MIN = 1.05  # max/mean split size above which part of an exposed all-to-all is imbalance


def prepare(session: Session) -> None:
    session.materialize("cp_host_syncs")
    session.materialize("cp_preds")


def walk(acts: list[dict], ws: int, we: int, syncs_by_tid: dict | None = None,
         infer_waits: bool = False) -> list[dict]:
    """Backward walk over one window's activities (cp_preds rows). Returns pieces in time order:
    {"start", "end", "kind": "act"|"gap", "id", "cause" (gaps), "syncs" (host_sync gaps)}."""
    if not acts or we <= ws:
        return [] if we <= ws else [{"start": ws, "end": we, "kind": "gap", "id": None, "cause": "idle", "syncs": []}]
    by_id = {a["id"]: a for a in acts}
    order = sorted(acts, key=lambda a: (a["end_ns"], a["start_ns"], a["id"]))
    ends = [a["end_ns"] for a in order]
    cur = max(acts, key=lambda a: (a["end_ns"], -a["start_ns"], -a["id"]))
    t, pieces, seen = we, [], set()
    while t > ws:
        if cur is None or cur["id"] in seen:
            pieces.append({"start": ws, "end": t, "kind": "gap", "id": None, "cause": "idle", "syncs": []})
            break
        seen.add(cur["id"])
        s, e = max(cur["start_ns"], ws), min(cur["end_ns"], t)
        if e > s:
            pieces.append({"start": s, "end": e, "kind": "act", "id": cur["id"]})
        t = min(t, max(s, ws))
        if t <= ws:
            break
        cands = [(cur["prev_end_ns"], cur["prev_id"]), (cur["wait_src_end_ns"], cur["wait_src_id"])]
        cands = [(min(end, t), i) for end, i in cands if end is not None and i in by_id]
        if infer_waits:  # no stream-wait records: the other stream's work that ended last before cur
            lo = max([ws - 1] + [c[0] for c in cands])
            inf = _inferred(order, ends, cur, lo, t, launched_before=cur["origin_start_ns"])
            if inf is not None:
                cands.append((inf["end_ns"], inf["id"]))
        g, pred = max(cands) if cands else (None, None)
        g_eff = ws if g is None else max(g, ws)
        if g_eff < t:
            le = cur["origin_end_ns"]
            if le is not None and le > g_eff:
                ls = cur["origin_start_ns"]
                found = _syncs_in(syncs_by_tid, cur, g_eff, ls)
                cause = "host_sync" if found else "launch_bound"
                pieces.append({"start": g_eff, "end": t, "kind": "gap", "id": cur["id"], "cause": cause,
                               "syncs": found})
            else:
                inf = _inferred(order, ends, cur, g_eff, t)
                if inf is not None:
                    if inf["end_ns"] < t:
                        pieces.append({"start": inf["end_ns"], "end": t, "kind": "gap", "id": cur["id"],
                                       "cause": "idle", "syncs": []})
                    t, cur = inf["end_ns"], inf
                    continue
                pieces.append({"start": g_eff, "end": t, "kind": "gap", "id": cur["id"], "cause": "idle", "syncs": []})
            t = g_eff
        cur = by_id.get(pred) if pred is not None and g is not None and g > ws - 1 else None
        if cur is None and t > ws:
            # no recorded predecessor inside the window: the latest activity that ended by now
            inf = _inferred(order, ends, None, ws - 1, t)
            if inf is None:
                pieces.append({"start": ws, "end": t, "kind": "gap", "id": None, "cause": "idle", "syncs": []})
                break
            if inf["end_ns"] < t:
                pieces.append({"start": inf["end_ns"], "end": t, "kind": "gap", "id": None, "cause": "idle",
                               "syncs": []})
            t, cur = inf["end_ns"], inf
    pieces.reverse()
    return pieces


def _inferred(order: list[dict], ends: list[int], cur: dict | None, lo: int, hi: int,
              launched_before: int | None = None) -> dict | None:
    """The activity (another stream than cur's; launched before `launched_before` if given) that
    ended last within (lo, hi]."""
    i = bisect_right(ends, hi) - 1
    while i >= 0 and ends[i] > lo:
        a = order[i]
        if cur is None or (a["id"] != cur["id"] and a["stream"] != cur["stream"]
                           and (launched_before is None or a["origin_start_ns"] is None
                                or a["origin_start_ns"] < launched_before)):
            return a
        i -= 1
    return None


def _syncs_in(syncs_by_tid: dict | None, cur: dict, lo: int, hi: int | None) -> list[dict]:
    """Host syncs on the launching thread that returned after the GPU was ready (lo) and before the launch."""
    if not syncs_by_tid or hi is None:
        return []
    lst = syncs_by_tid.get((cur["rank"], cur["tid"]))
    if not lst:
        return []
    ends = lst[0]
    i = bisect_right(ends, hi) - 1
    out = []
    while i >= 0 and ends[i] >= lo:
        out.append(lst[1][i])
        i -= 1
    return out[::-1]


def _overlay(pieces: list[dict], segs: list[tuple]):
    """Yield (a, b, piece, seg) for every intersection of the pieces with the timeline segments."""
    j = 0
    for p in pieces:
        a = p["start"]
        while j < len(segs) and segs[j][1] <= a:
            j += 1
        k = j
        while a < p["end"]:
            if k >= len(segs) or segs[k][0] > a:  # not covered by a segment (cannot happen in a window)
                b = min(p["end"], segs[k][0]) if k < len(segs) else p["end"]
                yield a, b, p, None
                a = b
                continue
            b = min(p["end"], segs[k][1])
            yield a, b, p, segs[k]
            a = b
            if a >= segs[k][1]:
                k += 1


def split(pieces: list[dict], segs: list[tuple], acts: dict, comm: dict, comm_list: list[dict]) -> list[dict]:
    """Path segments: {start, end, category, cause, id} in time order (adjacent equal ones merged).
    comm: id -> {"kind", "wait_until", "imbalance"} for communication activities."""
    out: list[dict] = []

    def add(a, b, category, cause, ref, extra=None):
        if b <= a:
            return
        last = out[-1] if out else None
        if last and last["end"] == a and last["category"] == category and last["cause"] == cause \
                and last["id"] == ref and last.get("extra") == extra:
            last["end"] = b
            return
        out.append({"start": a, "end": b, "category": category, "cause": cause, "id": ref, "extra": extra})

    def comm_part(a, b, cid):
        info = comm[cid]
        cat = "all_to_all_ns" if info["kind"] == "all_to_all" else "other_comm_ns"
        wu = info.get("wait_until")
        if wu is not None and wu > a:
            m = min(b, wu)
            add(a, m, cat, "peer_wait", cid)
            a = m
        if b <= a:
            return
        ratio = (info.get("imbalance") or {}).get("max_over_mean", 1.0)
        exposed = "exposed_a2a" if info["kind"] == "all_to_all" else "exposed_comm"
        if ratio > IMBALANCE_MIN:
            imb = int(round((b - a) * (1.0 - 1.0 / ratio)))
            add(a, a + imb, cat, "imbalance", cid)
            a += imb
        add(a, b, cat, exposed, cid)

    for a, b, p, seg in _overlay(pieces, segs):
        c, m, x = (seg[2], seg[3], seg[4]) if seg else (0, 0, 0)
        if p["kind"] == "act":
            act = acts[p["id"]]
            if act["class"] == "memory" and c == 0 and m > 0:  # a copy beside a collective: comm time
                p = {"kind": "gap", "id": p["id"], "cause": "idle", "syncs": []}
            elif act["class"] != "comm" or p["id"] not in comm:
                add(a, b, "compute_ns", None, p["id"])
                continue
            elif c > 0:
                add(a, b, "compute_ns", None, p["id"], "overlapped comm")
                continue
            else:
                comm_part(a, b, p["id"])
                continue
        if c > 0 or (x > 0 and m == 0):
            add(a, b, "compute_ns", None, p["id"], "other stream")
        elif m > 0:
            running = [q for q in comm_list if q["start_ns"] <= a and q["end_ns"] >= b and q["id"] in comm]
            if running:
                comm_part(a, b, max(running, key=lambda q: (q["start_ns"], q["id"]))["id"])
            else:
                add(a, b, "other_comm_ns", "exposed_comm", p["id"])
        else:
            cat = {"host_sync": "host_sync_ns", "launch_bound": "launch_bound_ns"}.get(p["cause"], "idle_ns")
            extra = tuple(s["id"] for s in p["syncs"]) if p["cause"] == "host_sync" else None
            add(a, b, cat, p["cause"], p["id"], extra)
    return out


def composition(path: list[dict], ws: int, we: int) -> dict:
    comp = {k: 0 for k in CATEGORIES}
    for s in path:
        comp[s["category"]] += s["end"] - s["start"]
    comp["peer_wait_ns"] = sum(s["end"] - s["start"] for s in path if s["cause"] == "peer_wait")
    comp["imbalance_ns"] = sum(s["end"] - s["start"] for s in path if s["cause"] == "imbalance")
    comp["overlapped_comm_ns"] = sum(s["end"] - s["start"] for s in path if s.get("extra") == "overlapped comm")
    total = sum(comp[k] for k in CATEGORIES)
    if total != we - ws:
        raise AssertionError(f"critical path does not cover the window: {total} != {we - ws}")
    comp["window_ns"] = we - ws
    return comp


def windows_data(session: Session) -> dict:
    """Everything the walks need, fetched once: per (rank, step) activities, segments, window."""
    win = {(w["rank"], w["step"]): (w["start_ns"], w["end_ns"]) for w in
           session.rows("SELECT rank, step, start_ns, end_ns FROM windows")}
    acts: dict = {}
    for r in session.table("cp_preds").to_pylist():
        acts.setdefault((r["rank"], r["step"]), []).append(r)
    segs: dict = {}
    for r in session.rows("SELECT rank, step, t, t_end, c, m, x FROM segments "
                          "WHERE t_end IS NOT NULL ORDER BY rank, step, t"):
        segs.setdefault((r["rank"], r["step"]), []).append((r["t"], r["t_end"], r["c"], r["m"], r["x"]))
    syncs: dict = {}
    for h in session.table("cp_host_syncs").to_pylist():
        e = syncs.setdefault((h["rank"], h["tid"]), ([], []))
        e[0].append(h["end_ns"])
        e[1].append(h)
    wait_ranks = {r["rank"] for r in session.rows("SELECT DISTINCT rank FROM syncs WHERE kind = 'stream_wait_event'")}
    return {"windows": win, "acts": acts, "segments": segs, "syncs": syncs, "wait_ranks": wait_ranks}


def paths(session: Session, comm: dict, data: dict | None = None) -> list[dict]:
    """Critical path of every (rank, step) window: {rank, step, start_ns, end_ns, composition, path, acts}."""
    data = data or windows_data(session)
    out = []
    for (rank, step), (ws, we) in sorted(data["windows"].items()):
        acts = data["acts"].get((rank, step), [])
        pieces = walk(acts, ws, we, data["syncs"], infer_waits=rank not in data["wait_ranks"])
        by_id = {a["id"]: a for a in acts}
        comm_list = [a for a in acts if a["class"] == "comm"]
        path = split(pieces, data["segments"].get((rank, step), []), by_id, comm, comm_list)
        out.append({"rank": rank, "step": step, "start_ns": ws, "end_ns": we,
                    "composition": composition(path, ws, we), "path": path, "acts": by_id})
    return out
