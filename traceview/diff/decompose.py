"""One side of a diff (a run), and the exact decomposition of the step-time change.

**The representative step.** A side's step time T is the step time of `analyze`'s summary step:
one real (rank, step) window, the median rank's median step (traceview.analysis.breakdown.
representative). Its *median set* is that one sample, so the diff's breakdown of a side is
exactly the `summary` of `analyze` for the same input. Every per-group number below is that
step's, so Σ over groups = T (up to the rounding of shared segments), and for two sides
ΔT = Σ over units of Δ (no rescaling).

**Units.** A unit is (layer, phase, stage, region, kernel family, class, collective kind) × part,
part ∈ compute, exposed_comm, exposed_memory, idle (the four parts that make up the step window;
overlapped comm is carried along for the text only). Each activity's share of a step window
comes from the same step as `layers[]` (traceview/sql/activity_shares.sql: segments shared equally by
the activities that decide them; an idle gap is charged to the activity that ends it), not
rounded, grouped additionally by kernel family (traceview.diff.families).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import NamedTuple

from ..document.types import ReportDocument, Summary
from ..engine.pipeline import build
from ..engine.session import Session
from .families import family

PARTS = ("compute_ns", "exposed_comm_ns", "exposed_memory_ns", "idle_ns")
EXTRA = ("overlapped_comm_ns", "busy_ns", "count")


class Where(NamedTuple):
    """Where in the model: a (layer, phase, stage) group."""
    layer: int | None
    phase: str
    stage: str


class Unit(NamedTuple):
    """One unit of the decomposition: a group of the step, a kernel family and its class."""
    layer: int | None
    phase: str
    stage: str
    region: str
    family: str
    cls: str

    @property
    def group(self) -> tuple[int | None, str, str, str]:
        """(layer, phase, stage, region): the unit without its kernel family."""
        return (self.layer, self.phase, self.stage, self.region)


class StallKey(NamedTuple):
    cause: str
    layer: int | None
    phase: str | None
    stage: str | None


@dataclass
class Side:
    label: str
    paths: list[str]
    doc: ReportDocument
    step_time_ns: float
    samples: list[tuple[int, int, int]]           # (rank, step, step_time_ns)
    median_set: list[tuple[int, int]]             # (rank, step)
    units: dict = field(default_factory=dict)     # unit key -> {part: mean ns over median set}
    syncs: dict = field(default_factory=dict)     # (layer, phase, stage) -> {n, dur_ns, kinds, op}
    family_time: dict = field(default_factory=dict)  # family key -> busy ns per step (mean, all samples)
    family_count: dict = field(default_factory=dict)
    noise: dict = field(default_factory=dict)
    stalls: dict | None = None      # (cause, layer, phase, stage) -> mean dur_ns over the median set
    critical_path: dict | None = None   # composition field -> mean ns over the median set
    overlaps: dict = field(default_factory=dict)  # comm (layer, phase, stage) -> {compute stage: ns}


def median_set(summary: Summary) -> list[tuple[int, int]]:
    """The (rank, step) of `analyze`'s summary step (empty without steps)."""
    if summary.get("rank") is None or summary.get("step") is None:
        return []
    return [(summary["rank"], summary["step"])]


def spread(samples: list[tuple[int, int, int]]) -> dict:
    """Per-step spread of the step time: per step the median over ranks, then max − min over
    steps (and the MAD); with one step, the spread over ranks instead."""
    by_step: dict = {}
    for _r, st, t in samples:
        by_step.setdefault(st, []).append(t)
    if len(by_step) >= 2:
        vals = [statistics.median(v) for v in by_step.values()]
        how = "per-step (max - min over steps of the median over ranks)"
    else:
        vals = [t for _, _, t in samples]
        how = "per-rank (one step: max - min over ranks)"
    if not vals:
        return {"method": how, "spread_ns": 0, "mad_ns": 0, "n": 0}
    med = statistics.median(vals)
    return {"method": how, "spread_ns": int(max(vals) - min(vals)),
            "mad_ns": int(statistics.median([abs(v - med) for v in vals])), "n": len(vals),
            "min_ns": int(min(vals)), "max_ns": int(max(vals))}


def unit_key(row: dict) -> Unit:
    fam = family(row["name"]).key
    if row["class"] == "comm":
        fam = f"comm:{row['comm_kind'] or 'other'}"
    return Unit(row["layer"], row["phase"], row["stage"], row["region"], fam, row["class"])


def build_side(label: str, paths: list[str], doc: ReportDocument, session: Session) -> Side:
    samples = [(r["rank"], r["step"], int(r["step_time_ns"])) for r in doc["steps"]]
    T = float(doc["summary"]["step_time_ns"])
    mset = median_set(doc["summary"])
    side = Side(label=label, paths=paths, doc=doc, step_time_ns=T, samples=samples, median_set=mset)
    side.noise = spread(samples)
    build(session, ["diff_units", "diff_overlaps", "diff_syncs"])
    rows = session.rows("SELECT * FROM diff_units") if samples else []
    ms = set(mset)
    k = max(1, len(mset))
    nsteps = max(1, len(samples))
    for r in rows:
        key = unit_key(r)
        if (r["rank"], r["step"]) in ms:
            d = side.units.setdefault(key, {p: 0.0 for p in PARTS + EXTRA})
            for p in PARTS + EXTRA:
                d[p] += (r[p] or 0) / k
        fk = key.family
        side.family_time[fk] = side.family_time.get(fk, 0.0) + (r["busy_ns"] or 0) / nsteps
        side.family_count[fk] = side.family_count.get(fk, 0.0) + (r["count"] or 0) / nsteps
    _stall_means(side)
    orows = session.rows("SELECT * FROM diff_overlaps") if samples else []
    for r in orows:
        if (r["rank"], r["step"]) in ms:
            d = side.overlaps.setdefault(Where(r["layer"], r["phase"], r["stage"]), {})
            d[r["with_stage"]] = d.get(r["with_stage"], 0.0) + r["overlap_ns"] / k
    srows = session.rows("SELECT * FROM diff_syncs")
    for r in srows:
        if (r["rank"], r["step"]) not in ms:
            continue
        g = side.syncs.setdefault(Where(r["layer"], r["phase"], r["stage"]), {"n": 0.0, "dur_ns": 0.0, "ops": set()})
        g["n"] += r["n"] / k
        g["dur_ns"] += r["dur_ns"] / k
        if r["op"]:
            g["ops"].add(r["op"])
    return side


def _stall_means(side: Side) -> None:
    """The stalls and critical-path sections, as means over the median set."""
    ms = set(side.median_set)
    k = max(1, len(ms))
    stalls = side.doc.get("stalls")
    if stalls is not None:
        side.stalls = {}
        for s in stalls:
            if (s["rank"], s["step"]) in ms:
                key = StallKey(s["cause"], s.get("layer"), s.get("phase"), s.get("stage"))
                side.stalls[key] = side.stalls.get(key, 0.0) + (s["dur_ns"] or 0) / k
    windows = side.doc.get("critical_path")
    if windows is not None:
        side.critical_path = {}
        for e in windows:
            if (e["rank"], e["step"]) not in ms:
                continue
            for f, v in e.items():   # the composition's parts and the measures beside them
                if f.endswith("_ns") and isinstance(v, (int, float)) and f not in ("start_ns", "end_ns"):
                    side.critical_path[f] = side.critical_path.get(f, 0.0) + v / k


def unit_deltas(base: Side, new: Side) -> dict:
    """{unit key: {part: new − base}} over the union of units (missing = 0)."""
    out = {}
    for key in set(base.units) | set(new.units):
        b = base.units.get(key, {})
        n = new.units.get(key, {})
        out[key] = {p: n.get(p, 0.0) - b.get(p, 0.0) for p in PARTS + EXTRA}
        out[key]["base"] = b
        out[key]["new"] = n
    return out


def total(side: Side) -> float:
    return sum(sum(u[p] for p in PARTS) for u in side.units.values())
