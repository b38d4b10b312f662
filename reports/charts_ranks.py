"""Charts for jobs with many ranks (above reports.ranks.PER_RANK_ROWS): a rank x step heatmap in
place of one bar per rank-step window, a straggler histogram in place of one bar per rank, and the
timeline of a few chosen ranks instead of every rank's lane. Each keeps a cap on what it draws, so
the page stays the same size at 1,024 ranks as at 64."""
from __future__ import annotations

from typing import Any, Mapping

import altair as alt

from traceview.document.types import ReportDocument

from . import palette, ranks

WIDTH = 720
MAX_LAST_BARS = 32          # ranks shown in "times last" (the most often last)
TIMELINE_RANKS = 12         # ranks in the many-rank timeline

HEATMAPS = (("step_time", "step time"), ("exposed", "exposed comm"), ("idle", "idle"))


def _ms(ns) -> float:
    return round((ns or 0) / 1e6, 6)


def heatmap(doc: ReportDocument):
    """Rank x step heatmaps of step time, exposed comm and idle (ms); buckets of consecutive ranks
    above ranks.HEATMAP_MAX_CELLS cells, each the bucket's max."""
    cells, b = ranks.heatmap_cells(doc)
    if not cells:
        return None
    rows = []
    for c in cells:
        row: dict[str, Any] = {"rank": c["first_rank"], "rank_end": c["last_rank"] + 1, "step": c["step"]}
        if b > 1:
            row["ranks"] = f"{c['first_rank']}-{c['last_rank']}"
        for key, _ in HEATMAPS:
            row[key] = round(c[key] / 1e6, 3)      # ms to the µs, as the tables print them
            if b > 1:
                row[key + "_rank"] = c[key + "_rank"]
        rows.append(row)
    n_steps = len({c["step"] for c in cells})
    what = "each cell one rank" if b == 1 else f"each cell {b} consecutive ranks, their max"
    panels = []
    for key, label in HEATMAPS:
        scheme: Any = "reds" if key != "step_time" else "blues"
        tips = ([alt.Tooltip("ranks:N", title="ranks")] if b > 1 else [alt.Tooltip("rank:Q")]) + [
            alt.Tooltip("step:O"), alt.Tooltip(f"{key}:Q", title=f"{label} ms", format=",.3f")]
        if b > 1:
            tips.append(alt.Tooltip(f"{key}_rank:Q", title="rank with the max"))
        panels.append(alt.Chart().mark_rect().encode(
            x=alt.X("rank:Q", title="rank", scale=alt.Scale(nice=False, zero=False)),
            x2="rank_end:Q",
            y=alt.Y("step:O", title="step"),
            color=alt.Color(f"{key}:Q", title=f"{label} ms", scale=alt.Scale(scheme=scheme)),
            tooltip=tips,
        ).properties(width=WIDTH, height=max(40, min(200, 14 * n_steps)), title=f"{label} (ms; {what})"))
    return alt.vconcat(*panels, data=alt.Data(values=rows)).resolve_scale(color="independent").properties(
        title="Rank x step: step time, exposed comm and idle of every rank's every step")


def straggler_histogram(doc: ReportDocument):
    """How often each rank was last to arrive (the most often last) beside the distribution of
    the collectives' skew."""
    items, total = ranks.stragglers(doc, MAX_LAST_BARS)
    bins = ranks.skew_histogram(doc)
    if not items and not bins:
        return None
    charts = []
    if items:
        rows = [{"rank": f"rank {s['rank']}", "times": s["times_last"], "of": s.get("collectives") or 0,
                 "wait": _ms(s.get("wait_caused_ns"))} for s in items]
        order = [r["rank"] for r in rows]
        shown = f"{len(items)} of {total} ranks" if total > len(items) else f"{total} rank(s)"
        charts.append(alt.Chart(alt.Data(values=rows)).mark_bar(color=palette.CAUSE_COLORS["peer_wait"]).encode(
            x=alt.X("rank:N", sort=order, title=None, axis=alt.Axis(labelAngle=-45)),
            y=alt.Y("times:Q", title="times last to arrive"),
            tooltip=[alt.Tooltip("rank:N"), alt.Tooltip("times:Q", title="times last"),
                     alt.Tooltip("of:Q", title="collectives"), alt.Tooltip("wait:Q", title="wait caused ms",
                                                                          format=",.3f")],
        ).properties(width=min(WIDTH // 2, max(120, 22 * len(rows))), height=220,
                     title=f"Times last to arrive at a collective ({shown})"))
    if bins:
        rows = [{"start": _ms(x["start"]), "end": _ms(x["end"]), "count": x["count"]} for x in bins]
        charts.append(alt.Chart(alt.Data(values=rows)).mark_bar(color=palette.COLLECTIVE_COLOR).encode(
            x=alt.X("start:Q", title="skew, ms (last arrival - first)", scale=alt.Scale(zero=True)),
            x2="end:Q",
            y=alt.Y("count:Q", title="collectives"),
            tooltip=[alt.Tooltip("start:Q", format=",.3f"), alt.Tooltip("end:Q", format=",.3f"),
                     alt.Tooltip("count:Q")],
        ).properties(width=WIDTH // 2 - 40, height=220,
                     title=f"Skew of {sum(x['count'] for x in bins):,} matched collectives"))
    return alt.hconcat(*charts)


def timeline_ranks(doc: ReportDocument, limit: int = TIMELINE_RANKS) -> list[int]:
    """The ranks the many-rank timeline shows: the job's median rank, the ranks most often last,
    then those farthest from the median in step time, idle, exposed comm and compute; at most
    `limit`, in rank order."""
    chosen: list[int] = []

    def add(r) -> None:
        if isinstance(r, int) and r not in chosen and len(chosen) < limit:
            chosen.append(r)
    add(doc["summary"].get("rank"))
    for s in ranks.stragglers(doc, 3)[0]:
        add(s["rank"])
    dists = {label: d for label, _, d in ranks.breakdown(doc)}
    for label in ("step time", "idle", "exposed comm", "compute"):
        d = dists.get(label)
        if d is not None:
            for k, _ in d.above + d.below:
                add(k)
    return sorted(chosen)


def timeline(doc: ReportDocument, timeline_fn):
    """`timeline_fn` (the report's timeline) drawn for the chosen ranks only."""
    chosen = set(timeline_ranks(doc))
    steps: list[Mapping[str, Any]] = [s for s in doc.get("steps") or [] if s["rank"] in chosen]
    view: Any = {**doc, "steps": steps}
    ch = timeline_fn(view)
    if ch is None:
        return None
    n = len(doc.get("per_rank") or [])
    title = ch.title if isinstance(ch.title, str) else ""
    return ch.properties(title=f"{title} — {len(chosen)} of {n} ranks (median, stragglers, outliers)")
