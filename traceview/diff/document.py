"""The `traceview.diff/1` document: two runs, the change, the verdict and the explanation."""
from __future__ import annotations

import os
from typing import Mapping, cast

from .. import __version__
from ..document.options import DiffOptions
from ..document.types import DiffDocument
from .decompose import PARTS, Side
from .explain import explain
from .words import stall_status

SCHEMA = "traceview.diff/1"
BREAKDOWN = PARTS + ("overlapped_comm_ns",)


def _side_summary(side: Side) -> dict:
    doc = side.doc
    summary: Mapping[str, float] = doc["summary"]   # type: ignore[assignment]  # read by part name
    bd = {p: summary.get(p, 0) for p in BREAKDOWN}   # analyze's summary step, exactly
    fl = doc.get("flops") or {}
    first = str(side.paths[0]).rstrip("/\\") if side.paths else side.label
    return {
        "label": os.path.basename(first) + (f" (+{len(side.paths) - 1} files)" if len(side.paths) > 1 else ""),
        "paths": [os.path.basename(str(p).rstrip("/\\")) for p in side.paths],  # no absolute paths in reports
        "inputs": [{"file": os.path.basename(i["file"]), "format": i["format"], "rank": i["rank"], "gpu": i["gpu"]}
                   for i in doc.get("inputs", [])],
        "world_size": doc.get("world_size"),
        "ranks": doc["summary"].get("ranks", 0),
        "steps": doc["summary"].get("steps", 0),
        "steps_source": doc.get("steps_source"),
        "step_time_ns": int(side.step_time_ns),
        "step_times_ns": [{"rank": r, "step": s, "step_time_ns": t} for r, s, t in side.samples],
        "median_set": [{"rank": r, "step": s} for r, s in side.median_set],
        "spread": side.noise,
        "breakdown": {p: int(round(v)) for p, v in bd.items()},
        "delivered_tflops": fl.get("delivered_tflops_per_gpu"),
        "mfu": fl.get("mfu"),
        "warnings": list(doc.get("warnings", [])),
    }


def _by_stage(side: Side) -> dict:
    out: dict = {}
    for key, u in side.units.items():
        d = out.setdefault(key.stage, {p: 0.0 for p in BREAKDOWN})
        for p in BREAKDOWN:
            d[p] += u[p]
    return out


def _stage_rows(base: Side, new: Side) -> list[dict]:
    b, n = _by_stage(base), _by_stage(new)
    rows = []
    for st in sorted(set(b) | set(n), key=str):
        bb, nn = b.get(st, {}), n.get(st, {})
        bt = sum(bb.get(p, 0.0) for p in PARTS)
        nt = sum(nn.get(p, 0.0) for p in PARTS)
        rows.append({"stage": st, "base_ns": int(round(bt)), "new_ns": int(round(nt)), "delta_ns": int(round(nt - bt)),
                     "delta_parts_ns": {p: int(round(nn.get(p, 0.0) - bb.get(p, 0.0))) for p in BREAKDOWN}})
    rows.sort(key=lambda r: -abs(r["delta_ns"]))
    return rows


def _group_rows(base: Side, new: Side, top: int) -> list[dict]:
    """Per (layer, phase, stage, region) group of the median step: base, new, change and its parts."""
    def by(side):
        out: dict = {}
        for key, u in side.units.items():
            d = out.setdefault(key.group, {p: 0.0 for p in BREAKDOWN})
            for p in BREAKDOWN:
                d[p] += u[p]
        return out
    b, n = by(base), by(new)
    rows = []
    for g in set(b) | set(n):
        bb, nn = b.get(g, {}), n.get(g, {})
        bt, nt = sum(bb.get(p, 0.0) for p in PARTS), sum(nn.get(p, 0.0) for p in PARTS)
        rows.append({"layer": g[0], "phase": g[1], "stage": g[2], "region": g[3], "base_ns": int(round(bt)),
                     "new_ns": int(round(nt)), "delta_ns": int(round(nt - bt)),
                     "delta_parts_ns": {p: int(round(nn.get(p, 0.0) - bb.get(p, 0.0))) for p in BREAKDOWN}})
    rows.sort(key=lambda r: (-abs(r["delta_ns"]), str(r["layer"]), str(r["phase"]), str(r["stage"])))
    return rows[:top]


def _comm_rows(base: Side, new: Side) -> list[dict]:
    def per(side):
        n = max(1, len(side.samples))
        return {c["kind"]: {"total_ns": c["total_ns"] / n, "exposed_ns": c["exposed_ns"] / n, "count": c["count"] / n}
                for c in side.doc.get("comm", [])}
    b, n = per(base), per(new)
    rows = []
    for k in sorted(set(b) | set(n)):
        bb, nn = b.get(k, {}), n.get(k, {})
        rows.append({"kind": k, "base_total_ns": int(bb.get("total_ns", 0)), "new_total_ns": int(nn.get("total_ns", 0)),
                     "base_exposed_ns": int(bb.get("exposed_ns", 0)), "new_exposed_ns": int(nn.get("exposed_ns", 0)),
                     "base_count": bb.get("count", 0), "new_count": nn.get("count", 0)})
    return rows


def _family_rows(base: Side, new: Side, top: int) -> dict:
    rows = []
    for f in set(base.family_time) | set(new.family_time):
        bt, nt = base.family_time.get(f, 0.0), new.family_time.get(f, 0.0)
        bc, nc = base.family_count.get(f, 0.0), new.family_count.get(f, 0.0)
        rows.append({"family": f, "base_ns": int(round(bt)), "new_ns": int(round(nt)), "delta_ns": int(round(nt - bt)),
                     "base_count": round(bc, 2), "new_count": round(nc, 2)})
    rows.sort(key=lambda r: (-abs(r["delta_ns"]), r["family"]))
    return {"per": "busy time per step (mean over ranks and steps)",
            "changed": [r for r in rows if r["base_count"] > 0 and r["new_count"] > 0 and r["delta_ns"]][:top],
            "appeared": [r for r in rows if r["base_count"] == 0 and r["new_count"] > 0],
            "vanished": [r for r in rows if r["base_count"] > 0 and r["new_count"] == 0]}


def stall_rows(base: Side, new: Side) -> list[dict] | None:
    """Stalls per (cause, layer, phase, stage), mean over the median set, with status
    new / grown / shrunk / gone."""
    if base.stalls is None and new.stalls is None:
        return None
    b, n = base.stalls or {}, new.stalls or {}
    rows = []
    for k in set(b) | set(n):
        bv, nv = b.get(k, 0.0), n.get(k, 0.0)
        rows.append({"cause": k.cause, "layer": k.layer, "phase": k.phase, "stage": k.stage, "base_ns": int(round(bv)),
                     "new_ns": int(round(nv)), "delta_ns": int(round(nv - bv)), "status": stall_status(bv, nv)})
    rows.sort(key=lambda r: (-abs(r["delta_ns"]), str(r["cause"]), str(r["stage"]), str(r["layer"])))
    return [r for r in rows if r["base_ns"] or r["new_ns"]]


def critical_path_rows(base: Side, new: Side) -> dict | None:
    """Critical-path composition: mean over the median set of every *_ns field."""
    if base.critical_path is None or new.critical_path is None:
        return None
    b, n = base.critical_path, new.critical_path
    return {k: {"base_ns": int(round(b.get(k, 0))), "new_ns": int(round(n.get(k, 0))),
                "delta_ns": int(round(n.get(k, 0) - b.get(k, 0)))} for k in sorted(set(b) | set(n))}


def _straggler(s: dict | None) -> dict | None:
    if not s:
        return None
    g = s.get("comm_growth_ns") or {}
    return {"rank": s["rank"], "source": s["source"],
            "comm_growth_ns": [{"rank": r, "delta_ns": int(v)} for r, v in sorted(g.items())]}


def noise_section(base: Side, new: Side, dT: float, floor_pct: float) -> dict:
    bs, ns = base.noise.get("spread_ns", 0), new.noise.get("spread_ns", 0)
    floor = floor_pct / 100.0 * base.step_time_ns
    threshold = max(bs, ns, floor)
    within = abs(dT) <= threshold
    why = max((bs, "the base's step-to-step spread"), (ns, "the new run's step-to-step spread"),
              (floor, f"the {floor_pct:g}% noise floor"))[1]
    return {"threshold_ns": int(round(threshold)), "base_spread_ns": bs, "new_spread_ns": ns,
            "floor_pct": floor_pct, "floor_ns": int(round(floor)), "method_base": base.noise.get("method"),
            "method_new": new.noise.get("method"), "within_noise": within, "threshold_from": why}


GPU_WORK = ("compute_ns", "exposed_comm_ns", "exposed_memory_ns")


def whole_capture(side: Side) -> bool:
    return str(side.doc.get("steps_source") or "").startswith("whole trace")


def gpu_work_section(bsum: dict, nsum: dict, dT: int, threshold: float) -> dict:
    """GPU work of the summary step = step time − idle (compute + exposed comm + exposed memory),
    its change, and how much of it the step time did not show (`hidden_ns`: absorbed by idle).
    `latent`: the work grew beyond the noise threshold and that growth is hidden from the step
    time by more than the threshold too."""
    b = sum(bsum["breakdown"][p] for p in GPU_WORK)
    n = sum(nsum["breakdown"][p] for p in GPU_WORK)
    dw = n - b
    hidden = dw - max(dT, 0)
    return {"base_ns": int(b), "new_ns": int(n), "delta_ns": int(dw),
            "pct": (100.0 * dw / b) if b else None, "hidden_ns": int(max(hidden, 0)),
            "outside_noise": abs(dw) > threshold,
            "latent": dw > threshold and hidden > threshold,
            "definition": "compute + exposed communication + exposed memory of the summary step "
                          "(the step time less its idle time)"}


def diff_sides(base: Side, new: Side, opts: DiffOptions | None = None) -> DiffDocument:
    opts = opts or DiffOptions()
    dT = int(round(new.step_time_ns - base.step_time_ns))
    noise = noise_section(base, new, dT, opts.noise_floor_pct)
    bsum, nsum = _side_summary(base), _side_summary(new)
    work = gpu_work_section(bsum, nsum, dT, noise["threshold_ns"])
    warnings = []
    if whole_capture(base) or whole_capture(new):
        # no step markers: the window is the capture, whose length says when profiling stopped,
        # not how long the work took; compare the GPU work instead
        which = " and ".join(s for s, side in (("base", base), ("new", new)) if whole_capture(side))
        warnings.append(f"no step ranges in {which}: the window is the whole capture, so its length is not a "
                        "step time; the verdict compares GPU work (compute + exposed communication + exposed "
                        "memory) instead")
        wfloor = opts.noise_floor_pct / 100.0 * work["base_ns"]
        work["outside_noise"] = abs(work["delta_ns"]) > wfloor
        work["latent"] = False
        noise["compared"] = "gpu_work"
        noise["within_noise"] = not work["outside_noise"]
        verdict = "noise" if noise["within_noise"] else ("regression" if work["delta_ns"] > 0 else "improvement")
    else:
        noise["compared"] = "step_time"
        verdict = "noise" if noise["within_noise"] else ("regression" if dT > 0 else "improvement")
    items, details = explain(base, new, threshold=noise["threshold_ns"], top=opts.top,
                             moved_min_ns=2 * noise["floor_ns"])
    latent = details["latent"][:opts.top] if work["latent"] else []
    for i, it in enumerate(items, 1):
        it["rank"] = i
    fl = None
    if bsum["delivered_tflops"] and nsum["delivered_tflops"]:
        fl = {"base_tflops": bsum["delivered_tflops"], "new_tflops": nsum["delivered_tflops"],
              "delta_tflops": nsum["delivered_tflops"] - bsum["delivered_tflops"],
              "base_mfu": bsum["mfu"], "new_mfu": nsum["mfu"]}
    delta = {
        "step_time_ns": dT,
        "step_time_pct": (100.0 * dT / base.step_time_ns) if base.step_time_ns else None,
        "breakdown": {p: nsum["breakdown"][p] - bsum["breakdown"][p] for p in BREAKDOWN},
        "stages": _stage_rows(base, new),
        "layers": _group_rows(base, new, 3 * opts.families),
        "comm": _comm_rows(base, new),
        "families": _family_rows(base, new, opts.families),
        "flops": fl,
        "stalls": stall_rows(base, new),
        "critical_path": critical_path_rows(base, new),
        "straggler": _straggler(details.get("straggler")),
        "gpu_work": work,
    }
    return cast(DiffDocument, {   # the sections above are built as plain dicts
        "schema": SCHEMA,
        "tool": {"name": "traceview", "version": __version__},
        "setup_differences": setup_differences(bsum, nsum),
        "method": ("step time = the summary step of analyze: per rank the median step by step time (the lower "
                   "middle for an even count), then the median rank's; the explanation decomposes the change of "
                   "that step over layer x phase x stage x kernel family x part, so the items sum to "
                   "delta.step_time_ns exactly"),
        "base": bsum,
        "new": nsum,
        "delta": delta,
        "noise": noise,
        "verdict": verdict,
        "latent": latent,
        "explanation": items,
        "warnings": warnings,
    })


def setup_differences(b: dict, n: dict) -> list[str]:
    """What differs between the two runs besides their performance (world size, GPU model, how
    steps were found): the explanation then compares different setups, not a regression."""
    out = []
    if b.get("world_size") != n.get("world_size"):
        out.append(f"world size differs: base {b.get('world_size')} rank(s), new {n.get('world_size')}")
    gb = sorted({str(i["gpu"]) for i in b["inputs"] if i.get("gpu")})
    gn = sorted({str(i["gpu"]) for i in n["inputs"] if i.get("gpu")})
    if gb and gn and gb != gn:
        out.append(f"GPU differs: base {', '.join(gb)}; new {', '.join(gn)}")
    if b.get("steps_source") != n.get("steps_source"):
        out.append(f"steps found differently: base {b.get('steps_source')}; new {n.get('steps_source')}")
    return out

