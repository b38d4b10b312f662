"""Distributions over ranks for the reports of jobs with many ranks.

Up to `PER_RANK_ROWS` ranks the text, Markdown and HTML reports list every rank; above it each
per-rank table becomes one row per measure: min, median, p99 and max over the ranks, and the ranks
farthest above and below the median, named (at most `WORST` each). Everything here is computed from
the document's rows (only iterated, never changed); JSON keeps the per-rank detail.

Percentiles are nearest-rank: the p-th percentile of n values sorted ascending is the value at
1-based position ceil(p * n / 100), so every number shown is one rank's own value (the median is
the lower middle value for an even n, as the report's median step is). A rank is named "above" when
its value is greater than the median (largest first, ties by rank), "below" when less.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping, Sequence

from traceview.document.types import ReportDocument

PER_RANK_ROWS = 16     # up to this many ranks every rank gets its row (every corpus job has at most 8)
WORST = 5              # ranks named above / below the median in a distribution row
TOP_GROUPS = 10        # rows of the per-layer imbalance and per-collective-group tables


_LIMIT: contextvars.ContextVar[int] = contextvars.ContextVar("per_rank_rows", default=PER_RANK_ROWS)


@contextlib.contextmanager
def per_rank_rows(n: int | None):
    """Within the block, per-rank tables list every rank up to n ranks (None: as outside the block,
    PER_RANK_ROWS at first)."""
    token = _LIMIT.set(_LIMIT.get() if n is None else n)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def many(doc: ReportDocument) -> bool:
    """Whether the document has more ranks than per-rank tables list (then they become distributions)."""
    return len(doc.get("per_rank") or []) > _LIMIT.get()


def nearest_rank(sorted_values: Sequence[float], p: float) -> float:
    """The p-th percentile (0 < p <= 100) of values sorted ascending, nearest-rank definition."""
    if not sorted_values:
        raise ValueError("no values")
    k = max(1, math.ceil(p * len(sorted_values) / 100 - 1e-9))
    return sorted_values[min(k, len(sorted_values)) - 1]


@dataclass(frozen=True)
class Dist:
    """A distribution over n named values (a name is a rank, or a (rank, step) window)."""
    n: int
    min: float
    median: float
    p99: float
    max: float
    above: tuple[tuple[Any, float], ...]    # farthest above the median first, at most `worst`
    below: tuple[tuple[Any, float], ...]    # farthest below the median first
    n_above: int
    n_below: int


def distribution(items: Iterable[tuple[Hashable, float | None]], worst: int = WORST) -> Dist | None:
    """The distribution of (name, value) pairs; None when there are none."""
    pairs: list[tuple[Any, float]] = [(k, v) for k, v in items if v is not None]
    if not pairs:
        return None
    vals = sorted(v for _, v in pairs)
    med = nearest_rank(vals, 50)
    up = sorted(((k, v) for k, v in pairs if v > med), key=lambda kv: (-kv[1], kv[0]))
    down = sorted(((k, v) for k, v in pairs if v < med), key=lambda kv: (kv[1], kv[0]))
    return Dist(len(vals), vals[0], med, nearest_rank(vals, 99), vals[-1],
                tuple(up[:worst]), tuple(down[:worst]), len(up), len(down))


# --- the measures of a job ---------------------------------------------------------------------------

BREAKDOWN = (("step time", "step_time_ns"), ("compute", "compute_ns"), ("exposed comm", "exposed_comm_ns"),
             ("exposed memory", "exposed_memory_ns"), ("idle", "idle_ns"),
             ("overlapped comm", "overlapped_comm_ns"), ("total comm", "comm_ns"))

CP_PARTS = (("compute", "compute_ns"), ("all-to-all", "all_to_all_ns"), ("other comm", "other_comm_ns"),
            ("launch-bound", "launch_bound_ns"), ("host sync", "host_sync_ns"), ("idle", "idle_ns"),
            ("peer wait", "peer_wait_ns"), ("window", "window_ns"))


def breakdown(doc: ReportDocument, worst: int = WORST) -> list[tuple[str, str, Dist]]:
    """(measure, unit, distribution over ranks) of each rank's median step: its parts in ns ("ns")
    and the overlap ratio ("ratio")."""
    rows: list[Mapping[str, Any]] = list(doc.get("per_rank") or [])
    out = []
    for label, key in BREAKDOWN:
        d = distribution(((r["rank"], r.get(key)) for r in rows), worst)
        if d is not None:
            out.append((label, "ns", d))
    d = distribution(((r["rank"], r.get("overlap_ratio")) for r in rows), worst)
    if d is not None:
        out.append(("overlap", "ratio", d))
    return out


def _cp_window_ns(c: Mapping[str, Any]) -> float | None:
    if c.get("window_ns") is not None:
        return c["window_ns"]
    if c.get("end_ns") is not None and c.get("start_ns") is not None:
        return c["end_ns"] - c["start_ns"]
    return None


def stall_causes(doc: ReportDocument, worst: int = WORST) -> list[tuple[str, Dist]]:
    """(cause, distribution over ranks of the stall time per step of that cause): each rank's
    `stalls_by_cause` summed over its critical-path windows, divided by its number of windows.
    Causes no rank has are left out."""
    per: dict[int, dict[str, float]] = {}
    windows: dict[int, int] = {}
    for c in doc.get("critical_path") or []:
        r = c["rank"]
        windows[r] = windows.get(r, 0) + 1
        acc = per.setdefault(r, {})
        for cause, ns in (c.get("stalls_by_cause") or {}).items():
            acc[cause] = acc.get(cause, 0) + (ns or 0)
    causes = sorted({k for acc in per.values() for k, v in acc.items() if v})
    out = []
    for cause in causes:
        d = distribution(((r, per[r].get(cause, 0) / windows[r]) for r in sorted(per)), worst)
        if d is not None:
            out.append((cause, d))
    return out


def critical_path(doc: ReportDocument, worst: int = WORST) -> list[tuple[str, Dist]]:
    """(part, distribution over rank-step windows) of the critical path; names are (rank, step)."""
    cps: list[Mapping[str, Any]] = list(doc.get("critical_path") or [])
    out = []
    for label, key in CP_PARTS:
        if key == "window_ns":
            d = distribution((((c["rank"], c["step"]), _cp_window_ns(c)) for c in cps), worst)
        else:
            d = distribution((((c["rank"], c["step"]), c.get(key)) for c in cps if key in c), worst)
        if d is not None:
            out.append((label, d))
    return out


def layer_compute(doc: ReportDocument, top: int = TOP_GROUPS, worst: int = WORST) -> tuple[list[dict], int]:
    """Compute per (layer, phase, stage) across ranks: each rank's compute there per step (its
    total over its steps / its step count), as a distribution. Only groups where some rank computes
    more than the median, largest excess (max - median) first; at most `top` of them, and how many
    such groups there are in all."""
    steps = {r["rank"]: max(1, r.get("steps") or 1) for r in doc.get("per_rank") or []}
    acc: dict[tuple, dict[int, float]] = {}
    for r in doc.get("layers") or []:
        key = (r["region"] != "layer", r["layer"] if r["layer"] is not None else -1, r["region"],
               bool(r.get("layer_inferred")), r["phase"], r["stage"])
        g = acc.setdefault(key, {})
        g[r["rank"]] = g.get(r["rank"], 0) + (r.get("compute_ns") or 0)
    ranks = sorted(steps)
    out: list[dict[str, Any]] = []
    for key, g in acc.items():
        d = distribution(((rk, g.get(rk, 0) / steps[rk]) for rk in ranks), worst)
        if d is not None and d.max > d.median:
            out.append({"region": key[2], "layer": None if key[1] < 0 else key[1], "layer_inferred": key[3],
                        "phase": key[4], "stage": key[5], "dist": d, "sort": key})
    out.sort(key=lambda x: (-(x["dist"].max - x["dist"].median), x["sort"]))
    return out[:top], len(out)


def collective_groups(doc: ReportDocument, top: int = TOP_GROUPS) -> tuple[list[dict], int]:
    """Matched collectives per (kind, process group): count, total / mean / p99 / max skew, the
    wait they imposed (every rank's wait but the last one's) and the ranks most often last (rank,
    times), most total skew first; at most `top` groups, and how many there are."""
    groups: dict[tuple[str, str], dict] = {}
    for c in doc.get("collectives") or []:
        key = (str(c.get("kind")), "" if c.get("group") is None else str(c.get("group")))
        g = groups.setdefault(key, {"kind": key[0], "group": key[1], "skews": [], "last": {}, "wait_ns": 0.0})
        g["skews"].append(c.get("skew_ns") or 0)
        s = c.get("straggler")
        if s is not None and (c.get("skew_ns") or 0) > 0:
            g["last"][s] = g["last"].get(s, 0) + 1
        waits = c.get("wait_ns") or {}
        items = waits.items() if isinstance(waits, dict) else enumerate(waits)
        g["wait_ns"] += sum(v or 0 for k, v in items if str(k) != str(s))
    out = []
    for g in groups.values():
        sk = sorted(g.pop("skews"))
        last = g.pop("last")
        out.append({**g, "count": len(sk), "total_skew_ns": sum(sk), "mean_skew_ns": sum(sk) / len(sk),
                    "p99_skew_ns": nearest_rank(sk, 99), "max_skew_ns": sk[-1],
                    "last": sorted(last.items(), key=lambda kv: (-kv[1], kv[0]))[:3], "ranks_last": len(last)})
    out.sort(key=lambda g: (-g["total_skew_ns"], g["kind"], g["group"]))
    return out[:top], len(out)


def worst_collectives(doc: ReportDocument, k: int = TOP_GROUPS) -> list[Mapping[str, Any]]:
    """The k matched collectives with the most skew (then kind, group, index)."""
    cols: list[Mapping[str, Any]] = list(doc.get("collectives") or [])
    return sorted(cols, key=lambda c: (-(c.get("skew_ns") or 0), str(c.get("kind")), str(c.get("group")),
                                       c.get("index") or 0))[:k]


def stragglers(doc: ReportDocument, top: int = TOP_GROUPS) -> tuple[list[Mapping[str, Any]], int]:
    """Ranks that arrived last at least once, most times last first (then wait caused, rank): at
    most `top`, and how many there are."""
    items: list[Mapping[str, Any]] = [s for s in doc.get("stragglers") or [] if s.get("times_last")]
    items.sort(key=lambda s: (-s["times_last"], -(s.get("wait_caused_ns") or 0), s["rank"]))
    return items[:top], len(items)


# --- chart data -----------------------------------------------------------------------------------------

HEATMAP_MAX_CELLS = 1024     # 256 ranks x 4 steps one cell each; more ranks share cells


def heatmap_cells(doc: ReportDocument, max_cells: int = HEATMAP_MAX_CELLS) -> tuple[list[dict], int]:
    """Rank x step cells of step time, exposed comm and idle (ns). Above `max_cells` consecutive
    ranks share a cell (a bucket of b ranks); each value is the bucket's max, with the rank that
    has it. Returns (cells, b)."""
    steps: list[Mapping[str, Any]] = list(doc.get("steps") or [])
    if not steps:
        return [], 1
    ranks = sorted({s["rank"] for s in steps})
    n_steps = len({s["step"] for s in steps})
    b = max(1, math.ceil(len(ranks) * n_steps / max_cells))
    bucket = {r: i // b for i, r in enumerate(ranks)}
    first: dict[int, int] = {}
    for r in ranks:
        first.setdefault(bucket[r], r)
    cells: dict[tuple[int, int], dict] = {}
    for s in steps:
        key = (bucket[s["rank"]], s["step"])
        c = cells.setdefault(key, {"bucket": key[0], "first_rank": first[key[0]], "step": s["step"]})
        c["last_rank"] = max(c.get("last_rank", s["rank"]), s["rank"])
        for name, field in (("step_time", "step_time_ns"), ("exposed", "exposed_comm_ns"), ("idle", "idle_ns")):
            v = s.get(field) or 0
            if name not in c or v > c[name] or (v == c[name] and s["rank"] < c[name + "_rank"]):
                c[name], c[name + "_rank"] = v, s["rank"]
    return [cells[k] for k in sorted(cells)], b


def skew_histogram(doc: ReportDocument, bins: int = 20) -> list[dict]:
    """Matched collectives by skew: `bins` equal bins from 0 to the largest skew (ns): start, end,
    count. One bin when every skew is the same."""
    skews = [c.get("skew_ns") or 0 for c in doc.get("collectives") or []]
    if not skews:
        return []
    hi = max(skews)
    if hi <= 0:
        return [{"start": 0, "end": 0, "count": len(skews)}]
    width = hi / bins
    counts = [0] * bins
    for s in skews:
        counts[min(bins - 1, int(s / width))] += 1
    return [{"start": i * width, "end": (i + 1) * width, "count": n} for i, n in enumerate(counts)]
