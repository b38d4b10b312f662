"""Terminal lines for the critical path, stalls, all-to-all exposure and cross-rank collectives
(tables fit 100 columns). `lines(doc)` reads the sections written by
traceview.analysis.stalls.sections: critical_path, stalls, stall_summary, a2a, collectives,
stragglers, clock."""
from __future__ import annotations

import textwrap
from typing import Any, Mapping

from traceview.document.types import ReportDocument

from . import ranks
from .fmt import clip, ms, table

MAX_CP_ROWS = 24
EVIDENCE_WIDTH = 44
PHASE = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


def _field(row: Mapping[str, Any], key: str) -> float:
    """A time field of a row by its name."""
    return row[key]


def where(s: Mapping[str, Any]) -> str:
    layer = f"L{s['layer']}" if s.get("layer") is not None else "-"
    phase = s.get("phase")
    return f"{layer} {PHASE.get(phase, phase or '-') if phase is not None else '-'} {s.get('stage') or '-'}"


def us(ns: int | float) -> str:
    return f"{ns / 1e3:,.1f} us"


def evidence_text(s: Mapping[str, Any]) -> str:
    ev, cause = s.get("evidence") or {}, s["cause"]
    if cause == "host_sync":
        if ev.get("sync_call"):
            return (f"{ev.get('op') or '?'} -> {ev['sync_call']} blocked the host {ms(ev['sync_ns'])} ms; "
                    f"then {ev.get('resumed_by') or '?'}")
        return "host sync"
    if cause in ("exposed_a2a", "exposed_comm"):
        out = f"{ms(ev.get('comm_dur_ns', 0))} ms long, {ms(ev.get('hidden_ns', 0))} ms hidden"
        if ev.get("independent_work_available"):
            out += f"; {ms(ev['independent_work_ns'])} ms independent work ({', '.join(ev['independent_stages'])})"
        elif "independent_work_available" in ev:
            out += "; no independent work left"
        return out
    if cause == "peer_wait":
        return f"rank {ev.get('straggler')} arrived last, skew {us(ev.get('skew_ns', 0))}"
    if cause == "imbalance":
        return f"split sizes max/mean {ev.get('max_over_mean', 0):.2f}"
    late = ev.get("late_to_collectives")
    if late and cause in ("launch_bound", "idle"):
        c = late[0]
        return f"last to arrive at {c['kind']} #{c['index']}: +{us(c['skew_ns'])}"
    if cause == "launch_bound":
        return f"{ev.get('gaps')} gaps between launches, max {us(ev.get('max_gap_ns', 0))}"
    if cause == "idle":
        return f"{ev.get('gaps')} gaps with work queued, max {us(ev.get('max_gap_ns', 0))}"
    return ""


def cp_lines(doc: ReportDocument) -> list[str]:
    cps = doc.get("critical_path") or []
    if not cps:
        return []
    if ranks.many(doc):
        from . import text_ranks
        return text_ranks.cp_lines(doc)
    rows = [[c["rank"], c["step"], ms(c["window_ns"]), ms(c["compute_ns"]), ms(c["all_to_all_ns"]),
             ms(c["other_comm_ns"]), ms(c["launch_bound_ns"]), ms(c["host_sync_ns"]), ms(c["idle_ns"]),
             ms(c["peer_wait_ns"])] for c in cps[:MAX_CP_ROWS]]
    out = ["Critical path per step (ms; a2a = all-to-all, comm = other communication, launch = launch-bound,",
           "sync = host sync; compute to idle add up to the window; a2a and comm include the peer wait)"]
    out += table(["rank", "step", "window", "compute", "a2a", "comm", "launch", "sync", "idle", "peer wait"], rows)
    if len(cps) > MAX_CP_ROWS:
        out.append(f"... and {len(cps) - MAX_CP_ROWS} more windows (JSON: critical_path)")
    total = sum(c["window_ns"] for c in cps)
    if total:
        names = (("compute", "compute_ns"), ("a2a", "all_to_all_ns"), ("comm", "other_comm_ns"),
                 ("launch", "launch_bound_ns"), ("sync", "host_sync_ns"), ("idle", "idle_ns"))
        out += textwrap.wrap("share of all windows: " + ", ".join(
            f"{n} {100 * sum(_field(c, k) for c in cps) / total:.1f}%" for n, k in names), 100)
    return out + [""]


def stall_lines(doc: ReportDocument) -> list[str]:
    st = doc.get("stalls") or []
    if not st:
        return []
    summ = doc.get("stall_summary") or {}
    top = summ.get("top", 10)
    total = summ.get("total_ns", sum(s["dur_ns"] for s in st))
    by = ", ".join(f"{k} {ms(v)}" for k, v in sorted((summ.get("by_cause") or {}).items(), key=lambda kv: -kv[1]) if v)
    out = textwrap.wrap(f"Top stalls ({min(top, len(st))} of {len(st)}; all stalls {ms(total)} ms = the "
                        f"non-compute critical path)", 100)
    out += textwrap.wrap(f"  by cause (ms): {by}", 100, subsequent_indent="    ")
    rows = []
    for s in st[:top]:
        ev = textwrap.wrap(evidence_text(s), EVIDENCE_WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
        rows.append([s["rank"], s["step"], clip(where(s), 24), s["cause"], ms(s["dur_ns"]), ev[0]])
        rows += [["", "", "", "", "", more] for more in ev[1:]]      # the evidence wraps onto its own lines
    out += table(["rank", "step", "where", "cause", "ms", "evidence"], rows, "rrllrl")
    return out + [""]


def a2a_lines(doc: ReportDocument) -> list[str]:
    a2a = doc.get("a2a") or []
    if not a2a:
        return []
    groups: dict = {}
    for a in a2a:
        g = groups.setdefault((a["layer"] if a["layer"] is not None else -1, a["phase"] or "", a["stage"] or ""),
                              {"n": 0, "dur": 0, "hidden": 0, "exposed": 0, "a": a})
        g["n"] += 1
        g["dur"] += a["dur_ns"]
        g["hidden"] += a["hidden_ns"]
        g["exposed"] += a["exposed_on_path_ns"]
    rows = []
    for key in sorted(groups):
        g = groups[key]
        rows.append([clip(where(g["a"]), 26), g["n"], ms(g["dur"] / g["n"]), ms(g["hidden"] / g["n"]),
                     ms(g["exposed"] / g["n"]), f"{100 * g['hidden'] / g['dur']:.0f}%" if g["dur"] else "-"])
    return (["All-to-all exposure (mean per all-to-all, ms; hidden = compute ran beside it)"]
            + table(["where", "count", "a2a", "hidden", "exposed", "hidden %"], rows, "lrrrrr") + [""])


def collective_lines(doc: ReportDocument) -> list[str]:
    colls = doc.get("collectives") or []
    if not colls:
        return []
    clock = doc.get("clock") or {}
    methods = sorted({v["method"] for v in (clock.get("ranks") or {}).values()})
    out = textwrap.wrap(f"Collectives across ranks: {len(colls)} matched; clocks: {', '.join(methods)}; "
                        f"residual skew (collective ends) max {us(clock.get('max_abs_residual_ns', 0))}", 100)
    matched: list[Mapping[str, Any]] = list(colls)   # skew and waits are set on every matched collective
    worst = sorted(matched, key=lambda c: (-c["skew_ns"], c["kind"], c["index"]))[:10]
    rows = [[c["kind"], c["index"], clip(where(c), 24), c["ranks"], c["straggler"], us(c["skew_ns"]),
             us(sum(v for k, v in c["wait_ns"].items() if k != str(c["straggler"])))] for c in worst]
    if ranks.many(doc):
        from . import text_ranks
        out += [f"The {len(worst)} with the most skew:"]
    out += table(["collective", "#", "where", "ranks", "last", "skew", "wait imposed"], rows, "lrlrrrr")
    if ranks.many(doc):
        return out + [""] + text_ranks.collective_lines(doc) + text_ranks.straggler_lines(doc)
    strag = [s for s in doc.get("stragglers") or [] if s["times_last"]]
    if strag:
        out += ["", "Stragglers (rank that arrived last at a collective)"]
        out += table(["rank", "times last", "of", "wait caused", "max skew"],
                     [[s["rank"], s["times_last"], s["collectives"], us(s["wait_caused_ns"]), us(s["max_skew_ns"])]
                      for s in strag])
    return out + [""]


def lines(doc: ReportDocument) -> list[str]:
    return cp_lines(doc) + stall_lines(doc) + a2a_lines(doc) + collective_lines(doc)
