"""`traceview export --perfetto OUT`: the trace's GPU activities with the analysis as added tracks,
per rank, in the Chrome trace-event JSON format that ui.perfetto.dev and Perfetto's trace
processor open.

One process per rank (pid = rank + 1, named "rank N"), and in it these tracks (threads):

- `steps`: one slice per step window (its breakdown in the args).
- `GPU time class`: the class of each moment of each step window, from the timeline segments of
  the report's breakdown (traceview/sql/segments.sql): `compute`, `exposed communication`,
  `exposed memory`, `idle` at depth 0 (they tile the window, so per step they sum to the report's
  compute_ns, exposed_comm_ns, exposed_memory_ns and idle_ns exactly), and `overlapped
  communication` at depth 1 inside compute (communication running beside compute: per step it
  sums to overlapped_comm_ns).
- `critical path`: the path of each step window (traceview.analysis.critical_path), one slice per
  piece named by its category (compute, all-to-all, other communication, launch-bound, host sync,
  idle) with its cause and the activity it waits on.
- `stalls`: the critical path's non-compute pieces named by cause (exposed_a2a, host_sync,
  launch_bound, peer_wait, imbalance, idle, ...), with layer / phase / stage and the evidence of
  the stall they belong to (the report's `stalls` row).
- `layer / phase / stage`: which group the GPU time of each moment is charged to, as in the
  report's `layers` (a segment belongs to the activities that decide its class; an idle gap to the
  activity that ends it): the layer at depth 0, the phase at depth 1, the stage at depth 2. Where
  several groups share a moment their names are joined with " + ".
- `GPU d stream s`: every GPU activity of the trace (kernels, memcpy, memset), named as in the
  trace, with its id (as in `gpu_activities.id`, for `traceview.open(...).sql`), class, layer,
  phase, stage and step in the args.

Times are the canonical tables' nanoseconds of each rank moved by that rank's clock offset (the
report's `clock.ranks[r].offset_ns`, so that the ranks of a job line up), minus an origin (the
earliest exported time, in `otherData.origin_ns`), written exactly (1 ns resolution). Where intervals of one track would
overlap without nesting (steps whose windows overlap, activities of one stream that overlap in a
broken trace) the later ones go to a second track of the same name with " (2)" appended, so every
track nests properly.
"""
from __future__ import annotations

import os
from typing import Any

from . import __version__
from .engine.pipeline import build as build_steps
from .trace_events import Writer, lanes

CLASS_NAMES = {"compute": "compute", "exposed_comm": "exposed communication", "exposed_memory": "exposed memory",
               "idle": "idle", "overlapped_comm": "overlapped communication"}
CP_NAMES = {"compute_ns": "compute", "all_to_all_ns": "all-to-all", "other_comm_ns": "other communication",
            "launch_bound_ns": "launch-bound", "host_sync_ns": "host sync", "idle_ns": "idle"}
# track order in each process (sort index); stream tracks follow
TRACKS = ("steps", "GPU time class", "critical path", "stalls", "layer / phase / stage")

def _seg_class(c: int, m: int, x: int) -> str:
    if c > 0:
        return "compute"
    if m > 0:
        return "exposed_comm"
    return "exposed_memory" if x > 0 else "idle"


def runs(items, key) -> list[tuple[int, int, Any]]:
    """Maximal runs of contiguous items (start, end, ...) with equal key(item): (start, end, key)."""
    out: list[list] = []
    for it in items:
        k = key(it)
        if k is None:
            continue
        if out and out[-1][2] == k and out[-1][1] == it[0]:
            out[-1][1] = it[1]
        else:
            out.append([it[0], it[1], k])
    return [tuple(r) for r in out]


class _Ranks:
    """Per rank: its pid and the lane of each step window (windows that overlap get lane 1, 2...)."""

    def __init__(self, doc: dict):
        self.gpu = {i["rank"]: i.get("gpu") for i in doc.get("inputs", [])}
        self.lane: dict = {}
        by_rank: dict = {}
        for s in doc["steps"]:
            by_rank.setdefault(s["rank"], []).append((s["start_ns"], s["start_ns"] + s["step_time_ns"], s["step"]))
        for rank, ws in by_rank.items():
            ws.sort()
            for (_, _, step), lane in zip(ws, lanes([(a, b) for a, b, _ in ws]), strict=True):
                self.lane[(rank, step)] = lane

    @staticmethod
    def pid(rank: int) -> int:
        return int(rank) + 1

    def track(self, w: Writer, rank: int, step: int, name: str) -> int:
        lane = self.lane.get((rank, step), 0)
        return w.thread(self.pid(rank), name if lane == 0 else f"{name} ({lane + 1})", TRACKS.index(name))


def _steps(w: Writer, doc: dict, rk: _Ranks) -> None:
    fields = ("step_time_ns", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns",
              "idle_ns", "comm_ns")
    for s in doc["steps"]:
        tid = rk.track(w, s["rank"], s["step"], "steps")
        w.slice(rk.pid(s["rank"]), tid, s["start_ns"], s["start_ns"] + s["step_time_ns"], f"step {s['step']}",
                "traceview.step", {"step": s["step"], **{f: s[f] for f in fields}})


def _classes(w: Writer, session, rk: _Ranks) -> None:
    per: dict = {}
    for r in session.rows("SELECT rank, step, t, t_end, c, m, x FROM segments "
                          "WHERE t_end IS NOT NULL AND t_end > t ORDER BY rank, step, t"):
        per.setdefault((r["rank"], r["step"]), []).append((r["t"], r["t_end"], r["c"], r["m"], r["x"]))
    for (rank, step), segs in per.items():
        tid = rk.track(w, rank, step, "GPU time class")
        pid = rk.pid(rank)
        for a, b, cls in runs(segs, lambda s: _seg_class(s[2], s[3], s[4])):
            w.slice(pid, tid, a, b, CLASS_NAMES[cls], "traceview.class", {"class": cls, "step": step})
        for a, b, _ in runs(segs, lambda s: "overlapped_comm" if s[2] > 0 and s[3] > 0 else None):
            w.slice(pid, tid, a, b, CLASS_NAMES["overlapped_comm"], "traceview.class",
                    {"class": "overlapped_comm", "step": step})


def _joined(vals) -> str:
    return " + ".join(str(v) for v in vals if v is not None) or "?"


def _layers(w: Writer, session, rk: _Ranks) -> None:
    per: dict = {}
    build_steps(session, ["segment_groups"])
    for r in session.rows("SELECT * FROM segment_groups ORDER BY rank, step, t"):
        per.setdefault((r["rank"], r["step"]), []).append(
            (r["t"], r["t_end"], _joined(r["layers"]), _joined(r["phases"]), _joined(r["stages"])))
    for (rank, step), segs in per.items():
        tid = rk.track(w, rank, step, "layer / phase / stage")
        pid = rk.pid(rank)
        for depth in (1, 2, 3):
            for a, b, key in runs(segs, lambda s, d=depth: s[2:2 + d]):
                args = {"step": step, "layer": key[0]}
                if depth > 1:
                    args["phase"] = key[1]
                if depth > 2:
                    args["stage"] = key[2]
                w.slice(pid, tid, a, b, key[-1], ("traceview.layer", "traceview.phase", "traceview.stage")[depth - 1],
                        args)


def _critical_path(w: Writer, session, doc: dict, rk: _Ranks) -> None:
    from .analysis import collectives, critical_path, stalls
    coll = collectives.match(session)
    comm = stalls._comm_info(session, coll)
    data = critical_path.windows_data(session)
    attr = stalls._attribution(session)
    rows = {(s["rank"], s["step"], s["cause"], s["start_ns"]): s for s in doc.get("stalls", [])}
    for p in critical_path.iter_paths(session, comm, data):
        rank, step, acts = p["rank"], p["step"], p["acts"]
        pid = rk.pid(rank)
        cp_tid = rk.track(w, rank, step, "critical path")
        first: dict = {}
        for seg in p["path"]:
            a = acts.get(seg["id"]) if seg["id"] is not None else None
            layer, phase, stage = attr.get(seg["id"], (None, None, None))
            args = {"step": step, "category": seg["category"][:-3], "cause": seg["cause"]}
            if a is not None:
                args.update(activity=a["name"], activity_id=a["id"], activity_kind=a["kind"], stream=a["stream"])
            if seg["extra"] is not None:
                args["note"] = seg["extra"] if isinstance(seg["extra"], str) else list(seg["extra"])
            w.slice(pid, cp_tid, seg["start"], seg["end"], CP_NAMES[seg["category"]], "traceview.critical_path", args)
            if seg["cause"] is None:
                continue
            key = stalls._group_key(seg, rank, step, (layer, phase, stage))
            first.setdefault(key, seg["start"])
            row = rows.get((rank, step, seg["cause"], first[key]), {})
            st_args = {"step": step, "cause": seg["cause"], "layer": layer, "phase": phase, "stage": stage,
                       "stall_start_ns": first[key], "stall_ns": row.get("dur_ns")}
            if a is not None:
                st_args.update(activity=a["name"], activity_id=a["id"])
            if row.get("evidence"):
                st_args["evidence"] = row["evidence"]
            w.slice(pid, rk.track(w, rank, step, "stalls"), seg["start"], seg["end"], seg["cause"],
                    "traceview.stall", st_args)
        del p


def _activities(w: Writer, session, rk: _Ranks) -> None:
    build_steps(session, ["activity_timeline"])
    rows = session.rows("SELECT * FROM activity_timeline ORDER BY rank, device NULLS FIRST, stream NULLS FIRST, "
                        "start_ns, end_ns DESC, id")
    by_stream: dict = {}
    for r in rows:
        by_stream.setdefault((r["rank"], r["device"], r["stream"]), []).append(r)
    devices: dict = {}
    for (rank, dev, _) in by_stream:
        devices.setdefault(rank, set()).add(dev)
    for (rank, dev, stream), acts in by_stream.items():
        base = f"GPU {dev if dev is not None else '?'} stream {stream if stream is not None else '?'}"
        order = len(TRACKS) + (stream if isinstance(stream, int) and stream >= 0 else 0)
        pid = rk.pid(rank)
        for r, lane in zip(acts, lanes([(r["start_ns"], r["end_ns"]) for r in acts]), strict=True):
            tid = w.thread(pid, base if lane == 0 else f"{base} ({lane + 1})", order)
            args = {"id": r["id"], "class": r["class"], "kind": r["kind"], "step": r["step"], "layer": r["layer"],
                    "phase": r["phase"], "stage": r["stage"], "region": r["region"]}
            w.slice(pid, tid, r["start_ns"], r["end_ns"], r["name"] or "", f"gpu.{r['kind']}",
                    {k: v for k, v in args.items() if v is not None})


def build(doc: dict, session) -> str:
    """The trace-event JSON text of an analyzed job (document and the session it was computed in)."""
    offsets = {int(r): int(v.get("offset_ns") or 0) for r, v in (doc.get("clock") or {}).get("ranks", {}).items()}
    starts = [r["t"] + offsets.get(r["rank"], 0) for r in
              session.rows("SELECT rank, min(start_ns) AS t FROM gpu_activities GROUP BY rank")]
    starts += [s["start_ns"] + offsets.get(s["rank"], 0) for s in doc["steps"]]
    origin = min(starts) if starts else 0
    w = Writer(origin, {"traceview_version": __version__, "origin_ns": str(origin), "time_resolution_ns": "1",
                        "clock": "each rank's times moved by its clock offset (report clock.ranks), then origin_ns "
                                 "subtracted",
                        "inputs": ", ".join(os.path.basename(i["file"]) for i in doc.get("inputs", [])),
                        "steps_source": doc.get("steps_source", "")},
               shift={_Ranks.pid(r): off for r, off in offsets.items()})
    rk = _Ranks(doc)
    for rank in sorted({i["rank"] for i in doc.get("inputs", [])} | {s["rank"] for s in doc["steps"]}):
        gpu = rk.gpu.get(rank)
        w.process(rk.pid(rank), f"rank {rank}" + (f" ({gpu})" if gpu else ""), rank)
    _steps(w, doc, rk)
    _classes(w, session, rk)
    _critical_path(w, session, doc, rk)
    _layers(w, session, rk)
    _activities(w, session, rk)
    return w.text()


def write(doc: dict, session, out) -> None:
    """Write the file (gzip-compressed when its name ends in .gz), atomically."""
    from .cli_common import write_output
    text = build(doc, session)
    data: str | bytes = text
    if str(out).endswith(".gz"):
        import gzip
        data = gzip.compress(text.encode("ascii"), mtime=0)
    write_output(data, out)
