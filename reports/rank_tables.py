"""The many-rank tables (distributions over ranks, collectives per kind and process group) as
plain cells, shared by the text, Markdown and HTML reports: each format lays a `Table` out and
escapes its name columns (`names`) its own way; numbers and rank lists need no escaping.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from traceview.document.types import ReportDocument

from . import ranks
from .fmt import ms
from .ranks import Dist

DIST_HEADERS = ["min", "median", "p99", "max"]
PERCENTILES = "nearest-rank percentiles: every number is one rank's own value"


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    aligns: str
    names: tuple[int, ...] = ()           # columns holding names from the trace
    notes: list[str] = field(default_factory=list)
    key: str = ""                         # what it replaces / where it goes


def _ratio(v: float) -> str:
    return f"{100 * v:.1f}%"


def _rank(k: Any) -> str:
    return f"{k[0]}/{k[1]}" if isinstance(k, tuple) else str(k)


def named(pairs: tuple[tuple[Any, float], ...], total: int, fmt: Callable[[float], str]) -> str:
    """'1, 17, 33, 49 (3.440); 21 (3.100) +2 more': names with their value, equal values grouped."""
    if not pairs:
        return "-"
    parts, i = [], 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][1] == pairs[i][1]:
            j += 1
        parts.append(", ".join(_rank(k) for k, _ in pairs[i:j + 1]) + f" ({fmt(pairs[i][1])})")
        i = j + 1
    more = total - len(pairs)
    return "; ".join(parts) + (f" +{more} more" if more > 0 else "")


def dist_cells(d: Dist, fmt: Callable[[float], str] = ms) -> list[str]:
    return [fmt(d.min), fmt(d.median), fmt(d.p99), fmt(d.max),
            named(d.above, d.n_above, fmt), named(d.below, d.n_below, fmt)]


def breakdown(doc: ReportDocument) -> Table:
    n = len(doc.get("per_rank") or [])
    rows = [[label] + dist_cells(d, ms if unit == "ns" else _ratio) for label, unit, d in ranks.breakdown(doc)]
    s = doc["summary"]
    job = (f"job: rank {s.get('rank')} step {s.get('step')} (the median rank's median step): step "
           f"{ms(s['step_time_ns'])}, compute {ms(s['compute_ns'])}, exposed comm {ms(s['exposed_comm_ns'])}, "
           f"exposed memory {ms(s['exposed_memory_ns'])}, idle {ms(s['idle_ns'])} ms")
    return Table(f"Step breakdown across {n} ranks (each rank's median step, ms; {PERCENTILES})",
                 ["measure"] + DIST_HEADERS + ["ranks above the median", "ranks below the median"], rows,
                 "lrrrrll", notes=[job], key="breakdown")


def stall_causes(doc: ReportDocument) -> Table | None:
    rows = [[cause] + dist_cells(d) for cause, d in ranks.stall_causes(doc)]
    if not rows:
        return None
    n = len({c["rank"] for c in doc.get("critical_path") or []})
    return Table(f"Stalls per rank by cause (ms per step, each rank's critical-path windows; {n} ranks)",
                 ["cause"] + DIST_HEADERS + ["ranks above the median", "ranks below the median"], rows,
                 "lrrrrll", names=(0,), key="stall_causes")


def critical_path(doc: ReportDocument) -> Table | None:
    cps = doc.get("critical_path") or []
    rows = [[label] + dist_cells(d) for label, d in ranks.critical_path(doc)]
    if not rows:
        return None
    return Table(f"Critical path across {len(cps)} rank-step windows (ms; windows named rank/step; a2a and other "
                 "comm include the peer wait)",
                 ["part"] + DIST_HEADERS + ["windows above the median", "windows below the median"], rows,
                 "lrrrrll", key="critical_path")


def _layer_label(g: dict) -> str:
    if g["region"] == "layer":
        return f"layer {g['layer']}" + (" (inferred)" if g.get("layer_inferred") else "")
    return {"outside": "outside layers", "layer_unknown": "layer unknown"}.get(g["region"], "unattributed")


def layer_compute(doc: ReportDocument) -> Table | None:
    groups, total = ranks.layer_compute(doc)
    if not doc.get("layers"):
        return None
    rows = [[_layer_label(g), g["phase"], g["stage"]] + dist_cells(g["dist"])[:5] for g in groups]
    title = (f"Compute imbalance across ranks by layer, phase and stage (ms per step; {len(groups)} of {total} "
             "group(s) where a rank computes more than the median, largest excess first)")
    t = Table(title, ["layer", "phase", "stage"] + DIST_HEADERS + ["ranks above the median"], rows, "lllrrrrl",
              names=(1, 2), key="layer_compute")
    if not rows:
        t.notes.append("Every rank computes the same in every layer, phase and stage.")
    return t


def collective_groups(doc: ReportDocument) -> Table | None:
    groups, total = ranks.collective_groups(doc)
    if not groups:
        return None
    rows = [[g["kind"], g["group"] or "(none)", f"{g['count']:,}", ms(g["total_skew_ns"]), ms(g["mean_skew_ns"]),
             ms(g["p99_skew_ns"]), ms(g["max_skew_ns"]), ms(g["wait_ns"]),
             ("; ".join(f"{r} ({n}x)" for r, n in g["last"])
              + (f" +{g['ranks_last'] - len(g['last'])} more" if g["ranks_last"] > len(g["last"]) else "")) or "-"]
            for g in groups]
    return Table(f"Collectives per kind and process group ({len(groups)} of {total}; skew and wait in ms, most "
                 "total skew first; last: the ranks most often last to arrive, times)",
                 ["collective", "group", "count", "total skew", "mean skew", "p99 skew", "max skew",
                  "wait imposed", "last most often"], rows, "llrrrrrrl", names=(0, 1), key="collective_groups")


def stragglers(doc: ReportDocument) -> Table | None:
    items, total = ranks.stragglers(doc)
    if not items:
        return None
    rows = [[str(s["rank"]), f"{s['times_last']:,}", f"{s.get('collectives', 0):,}", ms(s.get("wait_caused_ns")),
             ms(s.get("max_skew_ns"))] for s in items]
    return Table(f"Stragglers: ranks last to arrive at a collective ({len(items)} of {total}, most times last "
                 "first; ms)", ["rank", "times last", "of", "wait caused", "max skew"], rows, "rrrrr",
                 key="stragglers")

