"""Performance budgets: thresholds from a TOML file checked against the report document.

    # budget.toml -- top-level keys apply to the whole job (the report's summary: the median rank's median step)
    min_mfu = 0.35                      # model FLOPs utilisation, a fraction (0.35 = 35 %)
    max_exposed_comm_pct = 10           # exposed communication, % of step time
    max_idle_pct = 15                   # GPU idle, % of step time
    max_step_time_ms = 320              # median step time
    max_a2a_exposed_ms_per_layer = 1.5  # exposed all-to-all (dispatch + combine) per layer and step

    [per_rank]                          # the same keys, checked for every rank
    max_step_time_ms = 330

    [rank.3]                            # the same keys, for one rank (overrides [per_rank])
    max_idle_pct = 25

Metrics (each from the document, never re-measured):
- step time, exposed comm %, idle %: `summary` (overall) or `per_rank` (each rank's median step).
- MFU: `flops.mfu` overall; per rank, `flops.flops_per_step / rank step time / flops.peak_tflops`.
  An MFU that cannot be computed (no FLOPs or no peak) is a violation when a minimum is set.
- all-to-all exposed per layer: the exposed communication of the MoE dispatch and combine stages,
  summed over phases, averaged over the rank-step windows (all ranks overall, one rank per rank);
  the value is that of the layer with the most.

`apply(doc, path)` adds `doc["budget"] = {"file", "violations", "checked"}`; the CLI exits 1 when
`violations` is non-empty. A bad file raises UsageError (one line, exit 2).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from .config import read_toml
from .errors import UsageError

METRICS = {
    # key: (direction, unit, description)
    "min_mfu": ("min", "", "MFU"),
    "max_exposed_comm_pct": ("max", "%", "exposed communication"),
    "max_idle_pct": ("max", "%", "idle"),
    "max_step_time_ms": ("max", " ms", "step time"),
    "max_a2a_exposed_ms_per_layer": ("max", " ms", "exposed all-to-all per layer"),
}
A2A_STAGES = ("dispatch", "combine")


@dataclass
class Budget:
    file: str
    overall: dict = field(default_factory=dict)
    per_rank: dict = field(default_factory=dict)
    ranks: dict = field(default_factory=dict)     # rank -> {metric: limit}


def _limits(path, table: dict, where: str) -> dict:
    out = {}
    for key, value in table.items():
        if key not in METRICS:
            raise UsageError(path, f"unknown budget key {where}{key!r} (known: {', '.join(METRICS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UsageError(path, f"budget key {where}{key} must be a number, not {value!r}")
        if value < 0:
            raise UsageError(path, f"budget key {where}{key} must not be negative ({value})")
        out[key] = float(value)
    return out


def load(path) -> Budget:
    """Read and validate a budget TOML file (UsageError naming the file and problem otherwise)."""
    path = Path(path)
    data = read_toml(path, "budget file")
    b = Budget(file=os.path.basename(str(path)))
    top = {k: v for k, v in data.items() if k not in ("per_rank", "rank")}
    b.overall = _limits(path, top, "")
    if "per_rank" in data:
        if not isinstance(data["per_rank"], dict):
            raise UsageError(path, "[per_rank] must be a table")
        b.per_rank = _limits(path, data["per_rank"], "per_rank.")
    if "rank" in data:
        if not isinstance(data["rank"], dict):
            raise UsageError(path, "[rank.N] must be tables, one per rank")
        for r, table in data["rank"].items():
            if not str(r).isdigit():
                raise UsageError(path, f"[rank.{r}]: rank must be a non-negative integer")
            if not isinstance(table, dict):
                raise UsageError(path, f"rank.{r} must be a table ([rank.{r}])")
            b.ranks[int(r)] = _limits(path, table, f"rank.{r}.")
    if not (b.overall or b.per_rank or b.ranks):
        raise UsageError(path, "budget file sets no thresholds (keys: " + ", ".join(METRICS) + ")")
    return b


def _pct(part, whole):
    return 100.0 * part / whole if whole else None


def _mfu(doc: dict, step_time_ns) -> float | None:
    f = doc.get("flops") or {}
    flops, peak = f.get("flops_per_step"), f.get("peak_tflops")
    if not flops or not peak or not step_time_ns:
        return None
    return flops / (step_time_ns / 1e9) / (peak * 1e12)


def _a2a_per_layer(doc: dict, rank: int | None) -> float | None:
    """Largest per-layer exposed dispatch+combine communication, ms per rank-step window."""
    rows = [r for r in doc.get("layers") or [] if r.get("region") == "layer" and r.get("stage") in A2A_STAGES
            and (rank is None or r.get("rank") == rank)]
    windows = {(s["rank"], s["step"]) for s in doc.get("steps") or [] if rank is None or s["rank"] == rank}
    if not windows:
        return None
    per_layer: dict = {}
    for r in rows:
        per_layer[r["layer"]] = per_layer.get(r["layer"], 0) + r["exposed_comm_ns"]
    if not per_layer:
        return 0.0
    return max(per_layer.values()) / len(windows) / 1e6


def metric_value(doc: dict, metric: str, rank: int | None):
    """The measured value of `metric` for the job (rank None) or one rank; None when unknown."""
    if rank is None:
        src = doc.get("summary") or {}
    else:
        src = next((r for r in doc.get("per_rank") or [] if r["rank"] == rank), None)
        if src is None:
            return None
    st = src.get("step_time_ns")
    if metric == "max_step_time_ms":
        return st / 1e6 if st is not None else None
    if metric == "max_exposed_comm_pct":
        return _pct(src.get("exposed_comm_ns", 0), st)
    if metric == "max_idle_pct":
        return _pct(src.get("idle_ns", 0), st)
    if metric == "min_mfu":
        if rank is None and (doc.get("flops") or {}).get("mfu") is not None:
            return doc["flops"]["mfu"]
        return _mfu(doc, st)
    if metric == "max_a2a_exposed_ms_per_layer":
        return _a2a_per_layer(doc, rank)
    raise KeyError(metric)


def _fmt(metric: str, v: float) -> str:
    unit = METRICS[metric][1]
    if metric == "min_mfu":
        return f"{100 * v:.1f}%"
    return f"{v:,.3f}{unit}" if unit == " ms" else f"{v:.1f}{unit}"


def _check(doc: dict, metric: str, limit: float, rank: int | None) -> dict:
    direction, _, label = METRICS[metric]
    value = metric_value(doc, metric, rank)
    scope = "overall" if rank is None else f"rank {rank}"
    bound = "minimum" if direction == "min" else "maximum"
    if value is None:
        ok = False
        why = ("rank not in the trace" if rank is not None and
               not any(r["rank"] == rank for r in doc.get("per_rank") or []) else "cannot be computed")
        message = f"{scope}: {label} unknown ({why}); budget {bound} {_fmt(metric, limit)}"
    else:
        ok = value >= limit if direction == "min" else value <= limit
        rel = "within" if ok else ("below" if direction == "min" else "above")
        message = f"{scope}: {label} {_fmt(metric, value)} {rel} the budget {bound} {_fmt(metric, limit)}"
    return {"metric": metric, "scope": "overall" if rank is None else "rank", "rank": rank,
            "value": value, "limit": limit, "ok": ok, "message": message}


def evaluate(doc: dict, budget: Budget) -> dict:
    checked = [_check(doc, m, lim, None) for m, lim in budget.overall.items()]
    ranks = sorted({r["rank"] for r in doc.get("per_rank") or []} | set(budget.ranks))
    for rank in ranks:
        limits = dict(budget.per_rank)
        limits.update(budget.ranks.get(rank, {}))
        checked += [_check(doc, m, lim, rank) for m, lim in limits.items()]
    return {"file": budget.file, "violations": [c for c in checked if not c["ok"]], "checked": checked}


def apply(doc: dict, path) -> dict:
    """Load the budget at `path`, evaluate it against `doc`, store and return doc["budget"]."""
    doc["budget"] = evaluate(doc, load(path))
    return doc["budget"]

