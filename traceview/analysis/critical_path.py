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

import pyarrow as pa

from ..engine.pipeline import build
from ..engine.session import Session

CATEGORIES = ("compute_ns", "all_to_all_ns", "other_comm_ns", "launch_bound_ns", "host_sync_ns", "idle_ns")
IMBALANCE_MIN = 1.05  # max/mean split size above which part of an exposed all-to-all is imbalance
_ACT_COLUMNS = ("id", "rank", "stream", "start_ns", "end_ns", "class", "kind", "name", "tid",
                "origin_start_ns", "origin_end_ns", "prev_id", "prev_end_ns", "wait_src_id", "wait_src_end_ns",
                "sync_id", "sync_end_ns")


def prepare(session: Session) -> None:
    build(session, ["cp_host_syncs", "cp_preds"])


class Acts:
    """One window's activities (cp_preds rows) as column lists in (end, start, id) order; `pos`
    maps an activity id to its index. Rows as dicts only on request (`get`, `row`): a window of a
    large export holds hundreds of thousands of activities."""

    def __init__(self, table: pa.Table | None = None):
        cols = {n: (table.column(n).to_pylist() if table is not None else []) for n in _ACT_COLUMNS}
        self.cols = cols
        self.id, self.rank, self.stream = cols["id"], cols["rank"], cols["stream"]
        self.start, self.end, self.cls = cols["start_ns"], cols["end_ns"], cols["class"]
        self.tid, self.ostart, self.oend = cols["tid"], cols["origin_start_ns"], cols["origin_end_ns"]
        self.pos = {i: k for k, i in enumerate(self.id)}

    def __len__(self) -> int:
        return len(self.id)

    def row(self, k: int) -> dict:
        return {n: v[k] for n, v in self.cols.items()}

    def get(self, i) -> dict | None:
        k = self.pos.get(i)
        return None if k is None else self.row(k)


class Segments:
    """One window's timeline segments (`segments` rows) as column lists, sorted by start:
    t, t_end and the number of compute (c), comm (m) and memory (x) activities running."""

    def __init__(self, table: pa.Table | None = None):
        col = (lambda n: table.column(n).to_pylist()) if table is not None else (lambda n: [])
        self.t, self.e, self.c, self.m, self.x = (col(n) for n in ("t", "t_end", "c", "m", "x"))

    def __len__(self) -> int:
        return len(self.t)


def walk(acts: Acts, ws: int, we: int, syncs_by_tid: dict | None = None,
         infer_waits: bool = False) -> list[tuple]:
    """Backward walk over one window's activities. Returns pieces in time order, as tuples
    (start, end, k, cause, syncs): k the activity's index in `acts` (None for window-level gaps),
    cause None for an activity on the path, else the gap's reason (syncs: the host syncs of a
    `host_sync` gap)."""
    if we <= ws:
        return []
    n = len(acts)
    if n == 0:
        return [(ws, we, None, "idle", [])]
    pos, start, end, ostart, oend = acts.pos, acts.start, acts.end, acts.ostart, acts.oend
    ids, prev_id, prev_end = acts.id, acts.cols["prev_id"], acts.cols["prev_end_ns"]
    wsrc_id, wsrc_end = acts.cols["wait_src_id"], acts.cols["wait_src_end_ns"]
    last = n - 1  # the activity ending last (earliest start, then lowest id, among ties)
    while last > 0 and end[last - 1] == end[n - 1]:
        last -= 1
    # (start, end, k, cause, syncs): see above
    pieces: list[tuple[int, int, int | None, str | None, list[dict] | None]] = []
    t, seen = we, bytearray(n)
    if ws < end[last] < we:  # the window ends with zero-length work (not among acts): nothing ran after it
        pieces.append((end[last], we, None, "idle", []))
        t = end[last]
    cur: int | None = last
    while t > ws:
        if cur is None or seen[cur]:
            pieces.append((ws, t, None, "idle", []))
            break
        seen[cur] = 1
        s, e = max(start[cur], ws), min(end[cur], t)
        if e > s:
            pieces.append((s, e, cur, None, None))
        t = min(t, max(s, ws))
        if t <= ws:
            break
        cands = []
        for pe, pi in ((prev_end[cur], prev_id[cur]), (wsrc_end[cur], wsrc_id[cur])):
            if pe is not None:
                k = pos.get(pi)
                if k is not None:
                    cands.append((min(pe, t), pi, k))
        if infer_waits:  # no stream-wait records: the other stream's work that ended last before cur
            lo = max([ws - 1] + [c[0] for c in cands])
            inf = _inferred(acts, cur, lo, t, launched_before=ostart[cur])
            if inf is not None:
                cands.append((end[inf], ids[inf], inf))
        g, _, pred = max(cands) if cands else (None, None, None)
        g_eff = ws if g is None else max(g, ws)
        if g_eff < t:
            le = oend[cur]
            if le is not None and le > g_eff:
                found = _syncs_in(syncs_by_tid, acts, cur, g_eff, ostart[cur])
                pieces.append((g_eff, t, cur, "host_sync" if found else "launch_bound", found))
            else:
                inf = _inferred(acts, cur, g_eff, t)
                if inf is not None:
                    if end[inf] < t:
                        pieces.append((end[inf], t, cur, "idle", []))
                    t, cur = end[inf], inf
                    continue
                pieces.append((g_eff, t, cur, "idle", []))
            t = g_eff
        cur = pred if pred is not None and g is not None and g > ws - 1 else None
        if cur is None and t > ws:
            # no recorded predecessor inside the window: the latest activity that ended by now
            inf = _inferred(acts, None, ws - 1, t)
            if inf is None:
                pieces.append((ws, t, None, "idle", []))
                break
            if end[inf] < t:
                pieces.append((end[inf], t, None, "idle", []))
            t, cur = end[inf], inf
    pieces.reverse()
    return pieces


def _inferred(acts: Acts, cur: int | None, lo: int, hi: int, launched_before: int | None = None) -> int | None:
    """The activity (another stream than cur's; launched before `launched_before` if given) that
    ended last within (lo, hi]."""
    ends = acts.end
    i = bisect_right(ends, hi) - 1
    if cur is None:
        return i if i >= 0 and ends[i] > lo else None
    stream, ostart, cs = acts.stream, acts.ostart, acts.stream[cur]
    while i >= 0 and ends[i] > lo:
        if i != cur and stream[i] != cs and (launched_before is None or ostart[i] is None
                                             or ostart[i] < launched_before):
            return i
        i -= 1
    return None


def _syncs_in(syncs_by_tid: dict | None, acts: Acts, cur: int, lo: int, hi: int | None) -> list[dict]:
    """Host syncs on the launching thread that returned after the GPU was ready (lo) and before the launch."""
    if not syncs_by_tid or hi is None:
        return []
    lst = syncs_by_tid.get((acts.rank[cur], acts.tid[cur]))
    if not lst:
        return []
    ends = lst[0]
    i = bisect_right(ends, hi) - 1
    out = []
    while i >= 0 and ends[i] >= lo:
        out.append(lst[1][i])
        i -= 1
    return out[::-1]


def split(pieces: list[tuple], segs: Segments, acts: Acts, comm: dict) -> list[dict]:
    """Path segments: {start, end, category, cause, id, extra} in time order, adjacent equal ones
    merged; compute segments carry no id (they merge across activities: only their sums are used).
    comm: id -> {"kind", "wait_until", "imbalance"} for communication activities."""
    out: list[dict] = []
    ids, cls = acts.id, acts.cls
    comm_list = [(acts.start[k], i, acts.end[k]) for k, i in enumerate(ids) if cls[k] == "comm" and i in comm]

    def add(a, b, category, cause, ref, extra=None):
        if b <= a:
            return
        if out:
            last = out[-1]
            if last["end"] == a and last["category"] == category and last["cause"] == cause \
                    and last["id"] == ref and last["extra"] == extra:
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

    st, se, sc, sm, sx = segs.t, segs.e, segs.c, segs.m, segs.x
    nseg, j = len(st), 0
    for ps, pe, k, cause, syncs in pieces:
        ref = ids[k] if k is not None else None
        while j < nseg and se[j] <= ps:
            j += 1
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
                kc = cls[k]
                if kc == "memory" and c == 0 and m > 0:  # a copy beside a collective: comm time
                    gap, gcause = True, "idle"
                elif kc != "comm" or ref not in comm:
                    add(a, b, "compute_ns", None, None)
                elif c > 0:
                    add(a, b, "compute_ns", None, None, "overlapped comm")
                else:
                    comm_part(a, b, ref)
            if gap:
                if c > 0 or (x > 0 and m == 0):
                    add(a, b, "compute_ns", None, None, "other stream")
                elif m > 0:
                    running = [r for r in comm_list if r[0] <= a and r[2] >= b]
                    if running:
                        comm_part(a, b, max(running)[1])
                    else:
                        add(a, b, "other_comm_ns", "exposed_comm", ref)
                else:
                    cat = {"host_sync": "host_sync_ns", "launch_bound": "launch_bound_ns"}.get(gcause, "idle_ns")
                    extra = tuple(h["id"] for h in syncs) if gcause == "host_sync" else None
                    add(a, b, cat, gcause, ref, extra)
            a = b
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


def _by_window(table: pa.Table, sizes: list[dict]) -> dict:
    """`table` (sorted by rank, step, ...) cut into one slice per (rank, step) window; the slice
    sizes (`sizes`: rank, step, n in the same order) come from a GROUP BY in DuckDB, not from a
    pass over the rows."""
    out, off = {}, 0
    for r in sizes:
        out[(r["rank"], r["step"])] = table.slice(off, r["n"])
        off += r["n"]
    return out


def windows_data(session: Session, ranks: list[int] | None = None) -> dict:
    """Everything the walks need, fetched once: per (rank, step) activities (Acts), timeline
    segments (Segments), window bounds and host syncs; of the ranks in `ranks` only (all when None)."""
    p = {"ranks": ranks}
    f = "TRUE" if ranks is None else "list_contains($ranks, rank)"
    win = {(w["rank"], w["step"]): (w["start_ns"], w["end_ns"]) for w in
           session.rows(f"SELECT rank, step, start_ns, end_ns FROM windows WHERE {f}", **p)}
    acts = _by_window(session.sql(f"SELECT * FROM cp_preds WHERE {f} ORDER BY rank, step, end_ns, start_ns, id", **p),
                      session.rows(f"SELECT rank, step, count(*) AS n FROM cp_preds WHERE {f} "
                                   "GROUP BY ALL ORDER BY rank, step", **p))
    segs = _by_window(session.sql(f"SELECT rank, step, t, t_end, c, m, x FROM segments WHERE t_end IS NOT NULL "
                                  f"AND {f} ORDER BY rank, step, t", **p),
                      session.rows(f"SELECT rank, step, count(*) AS n FROM segments WHERE t_end IS NOT NULL "
                                   f"AND {f} GROUP BY ALL ORDER BY rank, step", **p))
    syncs: dict = {}
    for h in session.sql(f"SELECT * FROM cp_host_syncs WHERE {f} ORDER BY rank, tid, end_ns, id", **p).to_pylist():
        e = syncs.setdefault((h["rank"], h["tid"]), ([], []))
        e[0].append(h["end_ns"])
        e[1].append(h)
    wait_ranks = {r["rank"] for r in session.rows("SELECT DISTINCT rank FROM syncs WHERE kind = 'stream_wait_event' "
                                                  f"AND {f}", **p)}
    return {"windows": win, "acts": acts, "segments": segs, "syncs": syncs,
            "wait_ranks": wait_ranks}


def iter_paths(session: Session, comm: dict, data: dict | None = None):
    """Critical path of each (rank, step) window in order, one at a time: {rank, step, start_ns,
    end_ns, composition, path, acts (Acts), segments (Segments)}. A window's columns are built when
    it is walked, so only one window's Python objects live at once."""
    data = data or windows_data(session)
    for (rank, step), (ws, we) in sorted(data["windows"].items()):
        acts = Acts(data["acts"].get((rank, step)))
        segs = Segments(data["segments"].get((rank, step)))
        pieces = walk(acts, ws, we, data["syncs"], infer_waits=rank not in data["wait_ranks"])
        path = split(pieces, segs, acts, comm)
        del pieces
        yield {"rank": rank, "step": step, "start_ns": ws, "end_ns": we,
               "composition": composition(path, ws, we), "path": path, "acts": acts, "segments": segs}
