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

from bisect import bisect_right

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
    while i < len(st) and st[i] < b:
        if sc[i] > 0 and se[i] > a:
            tot += min(b, se[i]) - max(a, st[i])
        i += 1
    return tot


def _independent(w: dict, attr: dict) -> dict:
    """(layer, phase) -> compute activities of stages that do not depend on the dispatch."""
    if "_indep" not in w:
        out: dict = {}
        acts = w["acts"]
        for k, (i, c) in enumerate(zip(acts.id, acts.cls, strict=True)):
            t = attr.get(i) if c == "compute" else None
            if t and t[0] is not None and t[2] in INDEPENDENT_STAGES:
                out.setdefault(t[:2], []).append(acts.row(k))
        w["_indep"] = out
    return w["_indep"]


def _ops(h: dict) -> list[str]:
    return [x for x in (h.get("grandparent_op"), h.get("parent_op"), h.get("op")) if x]


def _group_key(seg: dict, rank: int, step: int, attr: tuple) -> tuple:
    cause = seg["cause"]
    if cause in COMM_CAUSES or cause == "host_sync":
        return (rank, step, cause, seg["id"])
    return (rank, step, cause) + attr


def _evidence(cause: str, segs: list[dict], w: dict, data: dict, attr: dict, coll_by_id: dict) -> dict:
    acts = w["acts"]
    ref = acts.get(segs[0]["id"])
    ev: dict = {"activity": ref["name"] if ref else None, "pieces": len(segs)}
    if cause in COMM_CAUSES and ref is not None:
        hidden = _overlap_compute(w["segments"], ref["start_ns"], ref["end_ns"])
        ev.update(comm_dur_ns=ref["end_ns"] - ref["start_ns"], hidden_ns=hidden,
                  hidden_share=hidden / max(1, ref["end_ns"] - ref["start_ns"]))
        c = coll_by_id.get(ref["id"])
        if c is not None:
            ev.update(collective={"kind": c["kind"], "group": c["group"], "index": c["index"]},
                      straggler=c["straggler"], skew_ns=c["skew_ns"], wait_ns=c["wait_ns"].get(str(w["rank"])))
            if cause == "imbalance" and c.get("imbalance"):
                ev.update(splits=c["imbalance"]["splits"], max_over_mean=c["imbalance"]["max_over_mean"])
        if cause in ("exposed_a2a", "exposed_comm"):
            layer, phase, _ = attr.get(ref["id"], (None, None, None))
            indep = [a for a in _independent(w, attr).get((layer, phase), [])
                     if (a["origin_start_ns"] or 0) >= (ref["origin_start_ns"] or 0)]
            work = sum(a["end_ns"] - a["start_ns"] for a in indep)
            after = sum(a["end_ns"] - max(a["start_ns"], ref["end_ns"]) for a in indep if a["end_ns"] > ref["end_ns"])
            ev.update(independent_work_ns=work, independent_work_available=work > 0,
                      independent_work_after_ns=after,
                      independent_stages=sorted({attr[a["id"]][2] for a in indep}))
    elif cause == "host_sync":
        ids = segs[0]["extra"] or ()
        calls = [data["sync_by_id"][i] for i in ids if i in data["sync_by_id"]]
        if calls:
            main = max(calls, key=lambda h: (h["dur_ns"], h["end_ns"]))
            ops = _ops(main)
            ev.update(sync_call=main["name"], sync_ns=main["dur_ns"], sync_start_ns=main["start_ns"],
                      op=ops[0] if ops else None, ops=ops,
                      calls=[{"name": h["name"], "dur_ns": h["dur_ns"], "ops": _ops(h)} for h in calls])
        ev["resumed_by"] = ev.pop("activity")
    elif cause in ("launch_bound", "idle"):
        gaps = [s["end"] - s["start"] for s in segs]
        ev.update(gaps=len(gaps), max_gap_ns=max(gaps), mean_gap_ns=sum(gaps) // len(gaps),
                  activities=len({s["id"] for s in segs}), last_start_ns=segs[-1]["start"])
        ev.pop("activity")
        if cause == "launch_bound" and ref is not None:
            ev["thread"] = ref["tid"]
        late = [coll_by_id[i] for i in dict.fromkeys(x["id"] for x in segs) if i in coll_by_id
                and coll_by_id[i]["straggler"] == w["rank"] and coll_by_id[i]["skew_ns"] > 0]
        if late:  # the gap delayed this rank's arrival at a collective where it was the last rank
            ev["late_to_collectives"] = [{"kind": c["kind"], "group": c["group"], "index": c["index"],
                                          "skew_ns": c["skew_ns"]} for c in late]
    return ev


def stall_rows(paths: list[dict], data: dict, attr: dict, coll_by_id: dict) -> list[dict]:
    out = []
    for w in paths:
        groups: dict = {}
        for seg in w["path"]:
            if seg["cause"] is None:
                continue
            a = attr.get(seg["id"], (None, None, None))
            groups.setdefault(_group_key(seg, w["rank"], w["step"], a), []).append(seg)
        for key, segs in groups.items():
            cause = key[2]
            a = attr.get(segs[0]["id"], (None, None, None))
            out.append({"rank": w["rank"], "step": w["step"], "layer": a[0], "phase": a[1], "stage": a[2],
                        "cause": cause, "start_ns": segs[0]["start"],
                        "dur_ns": sum(s["end"] - s["start"] for s in segs),
                        "evidence": _evidence(cause, segs, w, data, attr, coll_by_id)})
    out.sort(key=lambda s: (-s["dur_ns"], s["rank"], s["step"], s["start_ns"], s["cause"]))
    return out


def a2a_exposure(paths: list[dict], data: dict, attr: dict) -> list[dict]:
    """Per all-to-all in a window: duration, time hidden by compute, exposed time on the critical path."""
    out = []
    for w in paths:
        on_path: dict = {}
        for s in w["path"]:
            if s["category"] == "all_to_all_ns":
                on_path[s["id"]] = on_path.get(s["id"], 0) + s["end"] - s["start"]
        acts, comm = w["acts"], data["comm"]
        for k, i in enumerate(acts.id):
            if i not in comm or comm[i]["kind"] != "all_to_all":
                continue
            layer, phase, stage = attr.get(i, (None, None, None))
            a, b = acts.start[k], acts.end[k]
            out.append({"rank": w["rank"], "step": w["step"], "layer": layer, "phase": phase, "stage": stage,
                        "start_ns": a, "dur_ns": b - a, "hidden_ns": _overlap_compute(w["segments"], a, b),
                        "exposed_on_path_ns": on_path.get(i, 0)})
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
    ranks = None if ranks is None else sorted(int(r) for r in ranks)
    build(session, ["coll_instances"])
    comm = _comm_info(session, job, ranks)
    critical_path.prepare(session)
    data = critical_path.windows_data(session, ranks)
    data["comm"] = comm
    data["sync_by_id"] = {h["id"]: h for lst in data["syncs"].values() for h in lst[1]}
    attr = _attribution(session, ranks)
    cp, stalls, a2a = [], [], []
    non_compute = 0
    # one window at a time: its activity columns and path are dropped before the next is walked
    for w in critical_path.iter_paths(session, comm, data):
        mine = stall_rows([w], data, attr, job["by_id"])
        a2a += a2a_exposure([w], data, attr)
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
    return {"ranks": ranks, "critical_path": cp, "stalls": stalls, "a2a": a2a, "non_compute_ns": non_compute}


def merge(job: dict, parts: list[dict], top: int = 10) -> dict:
    """The report's sections from the per-rank parts (any order; disjoint ranks) and the job part:
    exactly what `sections` returns."""
    def by_window(key):  # rows in (rank, step) order, each window's rows in the order its part made them
        return sorted((r for p in parts for r in p[key]), key=lambda r: (r["rank"], r["step"]))
    cp = by_window("critical_path")
    stalls = by_window("stalls")
    a2a = by_window("a2a")
    stalls.sort(key=lambda s: (-s["dur_ns"], s["rank"], s["step"], s["start_ns"], s["cause"]))
    a2a.sort(key=lambda d: (d["rank"], d["step"], d["start_ns"]))
    total = sum(s["dur_ns"] for s in stalls)
    if total != sum(p["non_compute_ns"] for p in parts):
        raise AssertionError(f"stalls ({total}) != non-compute critical path "
                             f"({sum(p['non_compute_ns'] for p in parts)})")
    summary = {"top": top, "total_ns": total,
               "by_cause": {c: sum(s["dur_ns"] for s in stalls if s["cause"] == c) for c in CAUSES}}
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
