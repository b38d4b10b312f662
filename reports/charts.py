"""Altair charts built from the report document (and the diff document).

Every builder takes the document and returns an `alt.Chart` (or layered chart), or None when the
document lacks what the chart needs. `specs(doc)` lists (name, title, Vega-Lite dict) for the HTML
report; `write_images(doc, out_dir)` writes the same charts as SVG and PNG (vl-convert) for the
Markdown report to link. Specs are deterministic: no auto-named parameters, data inlined sorted.
Names from the trace travel as data values; Vega draws them as SVG text (never as markup).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import altair as alt

from traceview.document.types import DiffDocument, DiffSide, Document, ReportDocument, is_diff

from . import palette
from .escape import clip

PARTS = (("compute", "compute_ns"), ("exposed comm", "exposed_comm_ns"),
         ("exposed memory", "exposed_memory_ns"), ("idle", "idle_ns"))
PART_COLORS = tuple(palette.PART_COLORS[p] for p, _ in PARTS)
STAGE_ORDER = ("attention", "router", "dispatch", "experts", "shared_expert", "combine", "other")
WIDTH = 720
TIMELINE_MAX_MARKS = 400  # per lane (collectives, stalls): the longest; the rest are sub-pixel at this width


def _ms(ns) -> float:
    return round((ns or 0) / 1e6, 6)


def _part_color():
    return alt.Color("part:N", title="part", sort=[p for p, _ in PARTS],
                     scale=alt.Scale(domain=[p for p, _ in PARTS], range=list(PART_COLORS)))


def _n_windows(doc: ReportDocument) -> int:
    return max(1, len(doc.get("steps") or []))


# --- analyze ---------------------------------------------------------------------------------------

def step_breakdown(doc: ReportDocument):
    steps = sorted(doc.get("steps") or [], key=lambda s: (s["step"], s["rank"]))
    if not steps:
        return None
    multi = len({s["rank"] for s in steps}) > 1
    rows, order = [], []
    for s in steps:
        label = f"step {s['step']} · rank {s['rank']}" if multi else f"step {s['step']}"
        order.append(label)
        for i, (part, key) in enumerate(PARTS):
            rows.append({"window": label, "rank": s["rank"], "step": s["step"], "part": part, "order": i,
                         "ms": _ms(s.get(key))})
    width = min(WIDTH, max(240, 28 * len(order)))
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("window:N", sort=order, title="step · rank" if multi else "step",
                axis=alt.Axis(labelAngle=-45 if multi else 0, labelLimit=140)),
        y=alt.Y("ms:Q", stack="zero", title="ms"),
        color=_part_color(),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("window:N"), alt.Tooltip("part:N"), alt.Tooltip("ms:Q", format=",.3f")],
    ).properties(width=width, height=260, title="Step breakdown per step and rank (ms)")


def _layer_key(r: Mapping[str, Any]):
    return (r["region"] != "layer", r["layer"] if r["layer"] is not None else -1, r["region"],
            bool(r.get("layer_inferred")))


def _layer_label(r: Mapping[str, Any]) -> str:
    from .text import layer_label
    return layer_label(r)


def layer_phase(doc: ReportDocument):
    layers = doc.get("layers") or []
    if not layers:
        return None
    n = _n_windows(doc)
    agg: dict = {}
    for r in layers:
        k = (_layer_key(r), r["phase"], r["stage"])
        agg[k] = agg.get(k, 0) + (r.get("step_time_ns") or 0)
    phase_rank = {"forward": 0, "backward": 1, "optimizer": 2, "other": 3}
    rows, order = [], []
    for (lk, phase, stage), ns in sorted(agg.items(), key=lambda kv: (kv[0][0], phase_rank.get(kv[0][1], 9),
                                                                       kv[0][1], kv[0][2])):
        label = _layer_label({"region": lk[2], "layer": None if lk[1] < 0 else lk[1], "layer_inferred": lk[3]}) \
            + " · " + phase
        if label not in order:
            order.append(label)
        rows.append({"bar": label, "phase": phase, "stage": stage, "ms": _ms(ns / n),
                     "stage_order": STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)})
    stages = [s for s in STAGE_ORDER if any(r["stage"] == s for r in rows)] + \
             sorted({r["stage"] for r in rows} - set(STAGE_ORDER))
    width = min(WIDTH, max(240, 30 * len(order)))
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("bar:N", sort=order, title="layer · phase", axis=alt.Axis(labelAngle=-40, labelLimit=160)),
        y=alt.Y("ms:Q", stack="zero", title="ms per step (mean over rank-step windows)"),
        color=alt.Color("stage:N", sort=stages, title="MoE stage", scale=palette.scale(stages, palette.STAGE_COLORS)),
        order=alt.Order("stage_order:Q"),
        tooltip=[alt.Tooltip("bar:N", title="layer · phase"), alt.Tooltip("stage:N"),
                 alt.Tooltip("ms:Q", format=",.3f")],
    ).properties(width=width, height=260, title="Per layer × phase, stacked by MoE stage (ms per step)")


def _keyed(value, rank):
    """A per-rank value from a dict keyed by rank (int or str keys) or a list indexed by rank."""
    if isinstance(value, dict):
        return value.get(rank, value.get(str(rank)))
    if isinstance(value, list) and 0 <= rank < len(value):
        return value[rank]
    return None


def timeline_step(doc: ReportDocument):
    """(step number, reason) the timeline shows: most stall time, else the slowest step."""
    steps = doc.get("steps") or []
    if not steps:
        return None, ""
    stalls = doc.get("stalls") or []
    if stalls:
        per: dict = {}
        for s in stalls:
            if s.get("step") is not None:
                per[s["step"]] = per.get(s["step"], 0) + (s.get("dur_ns") or 0)
        if per:
            step = min(per, key=lambda k: (-per[k], k))
            return step, "the step with the most stall time"
    slow: dict = {}
    for row in steps:
        slow[row["step"]] = max(slow.get(row["step"], 0), row["step_time_ns"])
    step = min(slow, key=lambda k: (-slow[k], k))
    return step, "the slowest step"


def timeline(doc: ReportDocument):
    step, why = timeline_step(doc)
    if step is None:
        return None
    windows = {s["rank"]: s for s in doc.get("steps") or [] if s["step"] == step}
    rows: list[dict[str, Any]] = []
    for rank, w in sorted(windows.items()):
        rows.append({"rank": f"rank {rank}", "lane": "step", "what": "step window", "name": f"step {step}",
                     "start": 0.0, "end": _ms(w["step_time_ns"]), "ms": _ms(w["step_time_ns"]), "detail": ""})
    offsets = {}
    for r, info in ((doc.get("clock") or {}).get("ranks") or {}).items():
        if isinstance(info, dict) and isinstance(info.get("offset_ns"), (int, float)):
            offsets[int(r)] = info["offset_ns"]
    for c in doc.get("collectives") or []:
        if c.get("step") is not None and c["step"] != step:
            continue
        for rank, w in windows.items():
            st, du = _keyed(c.get("start_ns"), rank), _keyed(c.get("dur_ns"), rank)
            if st is None or du is None:
                continue
            st = st - offsets.get(rank, 0)      # aligned clock -> this rank's own clock
            if not (w["start_ns"] <= st < w["start_ns"] + w["step_time_ns"]):
                continue
            off = st - w["start_ns"]
            detail = f"group {c.get('group')}, #{c.get('index')}"
            if c.get("straggler") is not None:
                detail += f", straggler rank {c['straggler']}"
            if c.get("skew_ns") is not None:
                detail += f", skew {_ms(c['skew_ns']):,.3f} ms"
            rows.append({"rank": f"rank {rank}", "lane": "collective", "what": f"collective: {c.get('kind')}",
                         "name": clip(str(c.get("kind")), 60), "start": _ms(off), "end": _ms(off + du),
                         "ms": _ms(du), "detail": detail})
    for s in doc.get("stalls") or []:
        win = windows.get(s["rank"])
        if win is None or s.get("step") != step or s.get("start_ns") is None:
            continue
        off = s["start_ns"] - win["start_ns"]
        where = " / ".join(str(s[k]) for k in ("layer", "phase", "stage") if s.get(k) is not None)
        rows.append({"rank": f"rank {s['rank']}", "lane": "stall", "what": f"stall: {s.get('cause')}",
                     "name": clip(where or "stall", 80), "start": _ms(off), "end": _ms(off + (s.get("dur_ns") or 0)),
                     "ms": _ms(s.get("dur_ns")), "detail": s.get("evidence")})
    rows, note = _longest_marks(rows)
    from .markdown import evidence_text
    for r in rows:
        if r["lane"] == "stall":
            r["detail"] = clip(evidence_text(r["detail"]), 160)
    ranks = [f"rank {r}" for r in sorted(windows)]
    whats = sorted({r["what"] for r in rows}, key=lambda w: (w != "step window", not w.startswith("collective"), w))
    base = alt.Chart(alt.Data(values=rows)).encode(
        y=alt.Y("rank:N", sort=ranks, title=None),
        x=alt.X("start:Q", title=f"ms from the start of step {step} (each rank's own window)"),
        x2="end:Q",
        color=alt.Color("what:N", title="", sort=whats, scale=alt.Scale(domain=whats,
                                                                          range=[_what_color(w) for w in whats])),
        tooltip=[alt.Tooltip("rank:N"), alt.Tooltip("what:N"), alt.Tooltip("name:N"),
                 alt.Tooltip("start:Q", format=",.3f"), alt.Tooltip("ms:Q", format=",.3f"), alt.Tooltip("detail:N")],
    )
    layers = [base.transform_filter(alt.datum.lane == "step").mark_bar(size=22, opacity=0.35)]
    if any(r["lane"] == "collective" for r in rows):
        layers.append(base.transform_filter(alt.datum.lane == "collective").mark_bar(size=12))
    n_stalls = sum(1 for r in rows if r["lane"] == "stall")
    if n_stalls:
        # no stroke: on a narrow bar a dark outline would hide the cause's colour
        layers.append(base.transform_filter(alt.datum.lane == "stall").mark_bar(size=8))
    title = f"Timeline of step {step} ({why}): " + (f"{n_stalls} stall(s) marked" if n_stalls else "no stalls found")
    return alt.layer(*layers).properties(width=WIDTH, height=max(60, 34 * len(ranks)), title=title + note)


def _what_color(what: str) -> str:
    """The timeline's colour for a mark: the step window grey, collectives one blue, each stall
    its cause's fixed colour."""
    if what in palette.OTHER_MARKS:
        return palette.OTHER_MARKS[what]
    if what.startswith("collective: "):
        return palette.COLLECTIVE_COLOR
    if what.startswith("stall: "):
        return palette.color(what[len("stall: "):], palette.CAUSE_COLORS)
    return palette.fallback(what)


def _longest_marks(rows: list[dict]) -> tuple[list[dict], str]:
    """At most TIMELINE_MAX_MARKS collectives and as many stalls (the longest, then the earliest):
    a capture with thousands of them would draw bars narrower than a pixel and make the chart
    slow to render and the page large. Returns the rows kept and a note for the title."""
    keep, dropped = [], []
    for lane in ("step", "collective", "stall"):
        mine = [r for r in rows if r["lane"] == lane]
        if lane != "step" and len(mine) > TIMELINE_MAX_MARKS:
            mine.sort(key=lambda r: (-r["ms"], r["start"], r["rank"]))
            dropped.append(f"{TIMELINE_MAX_MARKS} longest of {len(mine)} {lane}s shown")
            mine = mine[:TIMELINE_MAX_MARKS]
        keep += mine
    return keep, (" (" + "; ".join(dropped) + ")" if dropped else "")


def straggler_ranks(doc: ReportDocument) -> dict:
    """rank -> a short note, for ranks the others waited for.

    The `stragglers` section lists every rank (times_last, collectives, wait_caused_ns, ...): a rank is
    marked when it arrived last at least once and made others wait. A list of bare ranks or of
    {"rank"} items (no counts) marks each rank named. Without the section, `collectives`' `straggler`
    fields are counted."""
    out: dict = {}
    st = doc.get("stragglers")
    items = st if isinstance(st, list) else (st.get("ranks", []) if isinstance(st, dict) else [])
    for it in items:
        if isinstance(it, dict) and isinstance(it.get("rank"), int):
            if "times_last" in it or "wait_caused_ns" in it:
                if (it.get("times_last") or 0) > 0 and (it.get("wait_caused_ns") or 0) > 0:
                    out[it["rank"]] = (f"last {it['times_last']}"
                                       + (f"/{it['collectives']}" if it.get("collectives") else "")
                                       + f", caused {_ms(it['wait_caused_ns']):,.3f} ms wait")
            else:
                out[it["rank"]] = "straggler"
        elif isinstance(it, int):
            out[it] = "straggler"
    if st is None:
        counts: dict = {}
        for c in doc.get("collectives") or []:
            if isinstance(c.get("straggler"), int) and (c.get("skew_ns") or 0) > 0:
                counts[c["straggler"]] = counts.get(c["straggler"], 0) + 1
        out = {r: f"last in {n} collective(s)" for r, n in counts.items()}
    return out


def stragglers_chart(doc: ReportDocument):
    per_rank = doc.get("per_rank") or []
    if len(per_rank) < 2:          # a straggler is a rank the others wait for: one rank has none
        return None
    flagged = straggler_ranks(doc)
    rows, order = [], []
    for r in sorted(per_rank, key=lambda r: r["rank"]):
        label = f"rank {r['rank']}" + (f" ◀ {flagged[r['rank']]}" if r["rank"] in flagged else "")
        order.append(label)
        busy = (r.get("compute_ns") or 0) + (r.get("exposed_memory_ns") or 0)
        wait = (r.get("exposed_comm_ns") or 0) + (r.get("idle_ns") or 0)
        rows += [{"rank": label, "part": "busy (compute + exposed memory)", "order": 0, "ms": _ms(busy)},
                 {"rank": label, "part": "waiting (exposed comm + idle)", "order": 1, "ms": _ms(wait)}]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("rank:N", sort=order, title=None, axis=alt.Axis(labelLimit=320)),
        x=alt.X("ms:Q", stack="zero", title="ms in each rank's median step"),
        color=alt.Color("part:N", title="", sort=["busy (compute + exposed memory)", "waiting (exposed comm + idle)"],
                        scale=alt.Scale(range=[palette.PART_COLORS["compute"], palette.PART_COLORS["exposed comm"]])),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("rank:N"), alt.Tooltip("part:N"), alt.Tooltip("ms:Q", format=",.3f")],
    ).properties(width=WIDTH, height=max(60, 26 * len(order)),
                 title="Per rank: busy vs waiting — a straggler is busy while the others wait")


# --- diff ------------------------------------------------------------------------------------------

def _step_ns(side: DiffSide | None) -> float | None:
    """A side's step time (None when the side or its number is missing)."""
    v = side.get("step_time_ns") if isinstance(side, dict) else None
    return v if isinstance(v, (int, float)) else None


def waterfall(doc: DiffDocument):
    """Base step time, each explanation's contribution, the unexplained rest, the new step time."""
    expl = doc.get("explanation") or []
    base, new = _step_ns(doc.get("base")), _step_ns(doc.get("new"))
    rows, running = [], base or 0.0
    order = []

    def add(label, start, end, kind, text):
        order.append(label)
        rows.append({"item": label, "start": _ms(start), "end": _ms(end), "ms": _ms(end - start),
                     "kind": kind, "text": text})
    if base is not None:
        add("base", 0, base, "step time", "base step time")
    for i, e in enumerate(expl, 1):
        c = e.get("contribution_ns") or 0
        add(f"{i}. {clip(e.get('text', ''), 40)}", running, running + c,
            "slower" if c > 0 else "faster", clip(e.get("text", ""), 300))
        running += c
    if base is not None and new is not None and abs(new - running) >= 1:
        add("unexplained", running, new, "slower" if new > running else "faster", "rest of the difference")
        running = new
    if new is not None:
        add("new", 0, new, "step time", "new step time")
    if not rows:
        return None
    # the totals start from a floor below the lowest running total, so that changes of a few % show
    levels = [r["end"] for r in rows] + [r["start"] for r in rows if r["kind"] != "step time"]
    lo, hi = min(levels), max(levels)
    floor = 0.0 if base is None else round(max(0.0, lo - max(0.5 * (hi - lo), 0.02 * hi)), 6)
    for r in rows:
        if r["kind"] == "step time":
            r["start"] = floor
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("item:N", sort=order, title=None, axis=alt.Axis(labelAngle=-30, labelLimit=260)),
        y=alt.Y("start:Q", title="step time, ms" + (f" (axis from {floor:,.3f})" if floor else ""),
                scale=alt.Scale(zero=False, domain=[floor, round(hi + 0.05 * (hi - floor), 6)], clamp=True)),
        y2="end:Q",
        color=alt.Color("kind:N", title="", sort=["step time", "slower", "faster"],
                        scale=alt.Scale(domain=["step time", "slower", "faster"],
                                        range=["#9e9e9e", "#e45756", "#54a24b"])),
        tooltip=[alt.Tooltip("item:N"), alt.Tooltip("text:N"), alt.Tooltip("ms:Q", format="+,.3f")],
    ).properties(width=min(WIDTH, max(300, 70 * len(order))), height=300,
                 title="Where the step-time difference comes from (waterfall, ms)")


# --- all charts of a document ----------------------------------------------------------------------

ANALYZE_CHARTS = (
    ("step_breakdown", step_breakdown),
    ("layer_phase", layer_phase),
    ("timeline", timeline),
    ("stragglers", stragglers_chart),
)
DIFF_CHARTS = (("waterfall", waterfall),)


def _many_rank_charts(doc: ReportDocument) -> list[tuple[str, Any]]:
    """Above ranks.PER_RANK_ROWS ranks: a heatmap for the per-window bars, the timeline of chosen
    ranks, a straggler histogram for the per-rank bars."""
    from . import charts_ranks as cr
    return [("rank_heatmap", cr.heatmap(doc)), ("layer_phase", layer_phase(doc)),
            ("timeline", cr.timeline(doc, timeline)), ("straggler_histogram", cr.straggler_histogram(doc))]


def charts(doc: Document) -> list[tuple[str, alt.TopLevelMixin]]:
    from . import ranks
    if is_diff(doc):
        made = [(name, fn(doc)) for name, fn in DIFF_CHARTS]
    elif ranks.many(doc):
        made = _many_rank_charts(doc)
    else:
        made = [(name, fn(doc)) for name, fn in ANALYZE_CHARTS]
    return [(name, ch) for name, ch in made if ch is not None]


def specs(doc: Document) -> list[tuple[str, dict]]:
    """(name, Vega-Lite spec) for each chart the document supports."""
    return [(name, ch.to_dict(validate=False)) for name, ch in charts(doc)]


def render_images(doc: Document, formats=("svg", "png")) -> list[tuple[str, bytes]]:
    """Each chart as (charts/<name>.<fmt>, bytes), rendered with vl-convert; nothing written."""
    import vl_convert as vlc
    out = []
    for name, spec in specs(doc):
        for fmt in formats:
            data = (vlc.vegalite_to_svg(spec).encode("utf-8") if fmt == "svg"
                    else vlc.vegalite_to_png(spec, scale=1))
            out.append((f"charts/{name}.{fmt}", data))
    return out


def write_images(doc: Document, out_dir, formats=("svg", "png")) -> list[str]:
    """Write each chart as charts/<name>.svg and .png under out_dir; returns the relative paths."""
    out_dir = Path(out_dir)
    (out_dir / "charts").mkdir(parents=True, exist_ok=True)
    written = []
    for rel, data in render_images(doc, formats):
        (out_dir / rel).write_bytes(data)
        written.append(rel)
    return written
