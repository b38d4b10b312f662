"""Stalls: the non-compute time on each step's critical path, with a cause and evidence.

Causes: `exposed_a2a` (an all-to-all with no compute beside it; the evidence says how much of it
compute hid and whether independent work of the same layer — the shared expert — was available),
`exposed_comm` (another collective, exposed), `peer_wait` (the collective ran on this rank before
the last rank arrived: the arrival skew), `imbalance` (uneven split sizes), `host_sync` (the GPU
drained while the host was blocked in a sync; the op that forced it and the sync call are named),
`launch_bound` (the GPU waited for launches while the host was busy), `idle` (the GPU waited with
work queued: GPU-side latency or an unrecorded dependency).

The sum of all stalls equals the non-compute part of the critical paths (asserted).

Entry point: `sections(session, doc, top=10)` (needs breakdown.prepare/step_rows and
layers.prepare to have run in the session). It is the composition of three parts that can run
apart: `job_inputs(session)` (collectives matched across ranks: needs every rank), `rank_part(
session, job, idle, ranks)` (the critical paths and stalls of some ranks: reads only their rows;
a worker's session may hold just them) and `merge(job, parts, top)`.
"""
from __future__ import annotations

import threading
from bisect import bisect_right

from ..document.packed import row_bytes, sort_rows
from ..engine.pipeline import build
from ..engine.session import Session
from . import collectives, critical_path

COMM_CAUSES = ("exposed_a2a", "exposed_comm", "peer_wait", "imbalance")
INDEPENDENT_STAGES = ("shared_expert",)  # MoE work that does not depend on the dispatch
CAUSES = ("exposed_a2a", "exposed_comm", "peer_wait", "imbalance", "host_sync", "launch_bound", "idle")


def _comm_info(session: Session, coll: dict, ranks: list[int] | None = None) -> dict:
    out = {}
    for r in session.rows("SELECT id, comm_kind, in_split, out_split FROM coll_instances "
                          f"WHERE {_rank_filter(ranks)}", ranks=ranks):
        out[r["id"]] = {"kind": r["comm_kind"], "wait_until": coll["wait_until"].get(r["id"]),
                        "imbalance": collectives.imbalance_of(r["in_split"], r["out_split"])}
    return out


def _attribution(session: Session, ranks: list[int] | None = None) -> dict:
    t = session.sql(f"SELECT id, layer, phase, stage FROM activity_attribution WHERE {_rank_filter(ranks)}",
                    ranks=ranks)
    cols = [t.column(n).to_pylist() for n in ("layer", "phase", "stage")]
    return dict(zip(t.column("id").to_pylist(), zip(*cols, strict=True), strict=True))


def _overlap_compute(segs: critical_path.Segments, a: int, b: int) -> int:
    """Time within [a, b) during which a compute kernel ran (segments sorted by start)."""
    st, se, sc = segs.t, segs.e, segs.c
    i = max(0, bisect_right(st, a) - 1)
    tot = 0
    n = len(st)
    while i < n and st[i] < b:
        if sc[i] > 0 and se[i] > a:
            tot += min(b, se[i]) - max(a, st[i])
        i += 1
    return tot


def _independent(w: dict) -> dict:
    """(layer, phase) -> indices (k) of the compute activities of stages that do not depend on the
    dispatch."""
    if "_indep" not in w:
        out: dict = {}
        acts = w["acts"]
        for k, (c, t) in enumerate(zip(acts.cls, acts.attr, strict=True)):
            if c == "compute" and t[0] is not None and t[2] in INDEPENDENT_STAGES:
                out.setdefault(t[:2], []).append(k)
        w["_indep"] = out
    return w["_indep"]


def _ops(h: dict) -> list[str]:
    return [x for x in (h.get("grandparent_op"), h.get("parent_op"), h.get("op")) if x]


def _group_key(seg: dict, rank: int, step: int, attr: tuple) -> tuple:
    cause = seg["cause"]
    if cause in COMM_CAUSES or cause == "host_sync":
        return (rank, step, cause, seg["id"])
    return (rank, step, cause) + attr


_BY_ACTIVITY = frozenset(COMM_CAUSES + ("host_sync",))   # causes grouped per activity (else per layer/phase/stage)
_NO_ATTR = (None, None, None)


def _nz(x: int) -> int:
    """A launch time of the integer columns, null (NULL) read as 0."""
    return 0 if x == critical_path.NULL else x


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
            ev["thread"] = None if tid == critical_path.NULL else tid
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


def stall_rows(paths: list[dict], coll_by_id: dict) -> list[dict]:
    out = [row for w in paths for row in _window_stalls(w, coll_by_id)]
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


def job_inputs(session: Session) -> dict:
    """The per-job part, which needs every rank: the collectives matched across ranks (with the
    wait_until of each comm activity id and `by_id`: activity id -> its collective), stragglers,
    clock and warnings (collectives.match). Proportional to the number of collectives; picklable."""
    return collectives.match(session)


def _rank_filter(ranks: list[int] | None, col: str = "rank") -> str:
    """A WHERE condition restricting `col` to the parameter $ranks (true when ranks is None)."""
    return "TRUE" if ranks is None else f"list_contains($ranks, {col})"


def rank_part(session: Session, job: dict, idle: dict, ranks: list[int] | None = None) -> dict:
    """Critical path rows, stall rows, all-to-all rows and the non-compute total of the ranks in
    `ranks` (every rank in the session when None), read from those ranks' rows only. `job` is
    job_inputs(); `idle`: (rank, step) -> GPU idle ns of the breakdown. The session may hold only
    these ranks' tables (activity ids as in the whole job). Picklable output; `merge` combines parts."""
    ranks, comm, data = _rank_inputs(session, job, ranks)
    return _walk_part(session, job, idle, ranks, comm, data)


def start_rank_part(session: Session, job: dict, idle: dict):
    """`rank_part` over every rank of the session, started now: returns a function that gives
    [the part]. Its queries run here, at once; where the windows' activities are one chunk (one
    trace, or a few small ones) the walk, which is Python only, then runs on a thread while the
    caller goes on with its own queries (DuckDB lets go of the GIL while a query runs), else
    when the function is called. The part is the same either way (the walk reads only what was
    fetched here); an error of the walk is raised by the function."""
    ranks, comm, data = _rank_inputs(session, job, None)
    if len(data["chunks"]) != 1:
        return lambda: [_walk_part(session, job, idle, ranks, comm, data)]
    out: dict = {}

    def walk(fetched: dict) -> None:
        try:
            out["part"] = _walk_part(None, job, idle, ranks, comm, data, fetched)
        except BaseException as e:   # raised again by wait(), in the caller's thread
            out["error"] = e
    thread = threading.Thread(target=walk, args=(critical_path.fetch_chunk(session, data),),
                              name="traceview-critical-path", daemon=True)
    thread.start()

    def wait() -> list[dict]:
        thread.join()
        if "error" in out:
            raise out.pop("error")
        return [out.pop("part")]
    return wait


def _rank_inputs(session: Session, job: dict, ranks: list[int] | None) -> tuple:
    """What the walks of `ranks` read from the session besides the chunks' rows: (ranks sorted,
    the comm info of their collectives, windows_data)."""
    ranks = None if ranks is None else sorted(int(r) for r in ranks)
    build(session, ["coll_instances"])
    comm = _comm_info(session, job, ranks)
    critical_path.prepare(session)
    return ranks, comm, critical_path.windows_data(session, ranks)


def _walk_part(session: Session | None, job: dict, idle: dict, ranks: list[int] | None, comm: dict, data: dict,
               fetched: dict | None = None) -> dict:
    """rank_part's rows from its inputs (`_rank_inputs`; `fetched`: critical_path.iter_paths)."""
    cp, stalls, a2a = [], [], []
    non_compute = 0
    # one window at a time: its activity columns and path are dropped before the next is walked
    for w in critical_path.iter_paths(session, comm, data, fetched=fetched):
        mine = _window_stalls(w, job["by_id"])
        a2a += a2a_exposure([w], comm)
        stalls += mine
        comp = w["composition"]
        nc = comp["window_ns"] - comp["compute_ns"]
        non_compute += nc
        by_cause = dict.fromkeys(CAUSES, 0)
        for st in mine:
            by_cause[st["cause"]] += st["dur_ns"]
        if sum(by_cause.values()) != nc:
            raise AssertionError(f"stalls ({sum(by_cause.values())}) != non-compute critical path ({nc}) "
                                 f"for rank {w['rank']} step {w['step']}")
        cp.append({"rank": w["rank"], "step": w["step"], "start_ns": w["start_ns"], "end_ns": w["end_ns"],
                   **comp, "stall_ns": nc, "stalls_by_cause": by_cause,
                   "share": {k[:-3]: comp[k] / comp["window_ns"] for k in critical_path.CATEGORIES}
                   if comp["window_ns"] else {},
                   "gpu_idle_ns": idle.get((w["rank"], w["step"])),
                   "idle_assigned_ns": comp["host_sync_ns"] + comp["launch_bound_ns"] + comp["idle_ns"]})
        del w, mine
    return {"ranks": ranks, "critical_path": row_bytes(cp), "stalls": row_bytes(stalls), "a2a": row_bytes(a2a),
            "non_compute_ns": non_compute}


# merge's order of each section's rows: a stable sort of the parts' rows by these keys (a worker of
# a mapped job sorts its part by them first, and sums its stalls by cause: mapped.stalls_task)
MERGE_ORDER = {"critical_path": lambda r: (r["rank"], r["step"]),
               "stalls": lambda s: (-s["dur_ns"], s["rank"], s["step"], s["start_ns"], s["cause"]),
               "a2a": lambda d: (d["rank"], d["step"], d["start_ns"])}


def stall_sums(rows) -> dict:
    """The total and the per-cause sums of some stall rows (what merge adds up over the parts)."""
    by_cause = dict.fromkeys(CAUSES, 0)
    total = 0
    for s in rows:
        total += s["dur_ns"]
        if s["cause"] in by_cause:
            by_cause[s["cause"]] += s["dur_ns"]
    return {"total": total, "by_cause": by_cause}


def merge(job: dict, parts: list[dict], top: int = 10) -> dict:
    """The report's sections from the per-rank parts (any order; disjoint ranks) and the job part:
    exactly what `sections` returns. A part may hold its stalls' sums (`stall_sums`, summed where
    it was made) and its rows presorted (document.packed.presort): then no row is decoded here."""
    # one stable sort of the parts' rows in part order (their keys hold (rank, step), the windows'
    # order): long lists come back packed (document/packed.py)
    cp, _ = sort_rows([p["critical_path"] for p in parts], MERGE_ORDER["critical_path"], keys=False)
    stalls, _ = sort_rows([p["stalls"] for p in parts], MERGE_ORDER["stalls"], keys=False)
    a2a, _ = sort_rows([p["a2a"] for p in parts], MERGE_ORDER["a2a"], keys=False)
    by_cause = dict.fromkeys(CAUSES, 0)
    total = 0
    for p in parts:                              # the rows of each part, one at a time
        sums = p.get("stall_sums") or stall_sums(p["stalls"])
        total += sums["total"]
        for c, v in sums["by_cause"].items():
            by_cause[c] += v
    if total != sum(p["non_compute_ns"] for p in parts):
        raise AssertionError(f"stalls ({total}) != non-compute critical path "
                             f"({sum(p['non_compute_ns'] for p in parts)})")
    summary = {"top": top, "total_ns": total, "by_cause": by_cause}
    return {"critical_path": cp, "stalls": stalls, "stall_summary": summary,
            "a2a": a2a,
            "collectives": job["collectives"], "stragglers": job["stragglers"], "clock": job["clock"],
            "collective_warnings": job["warnings"]}


def sections(session: Session, doc: dict | None = None, top: int = 10) -> dict:
    """critical_path, stalls, collectives, stragglers, clock (+ stall_summary, a2a) for the report:
    merge(job_inputs, [rank_part over every rank of the session])."""
    job = job_inputs(session)
    idle = {(r["rank"], r["step"]): r["idle_ns"] for r in (doc or {}).get("steps", [])}
    return merge(job, [rank_part(session, job, idle)], top)
