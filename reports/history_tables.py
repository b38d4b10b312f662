"""Text and Markdown for the `traceview.history/1` document: the changes named first (metric,
from, to, %), then one row per night (values outside their band marked), then the stage times.

File names are untrusted: in text, control characters and line breaks are shown as escapes by the
shared `escape.one_line_controls` (a name cannot move the cursor or colour the terminal); in
Markdown they go through `escape.md`.
"""
from __future__ import annotations

import textwrap

from . import markdown as mdr, text as txt
from .escape import md, one_line_controls as term  # control characters and line breaks as escapes


def value(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v:,.3f}"
    if unit == "%":
        return f"{v:.2f}"
    return f"{v:,.1f}"


def change_text(c: dict) -> str:
    pct = "" if c["pct"] is None else f"{c['pct']:+.1f} %, "
    unit = f" {c['unit']}"
    return (f"{c['label']}: {value(c['from'], c['unit'])}{unit} → {value(c['to'], c['unit'])}{unit} "
            f"({pct}{c['kind']}; band ±{value(c['band'], c['unit'])})")


def latest_text(doc: dict) -> str | None:
    """`night N vs N-1: step time 301.204 → 325.391 ms (+8.0 %); ...` (None with one night)."""
    lt = doc.get("latest")
    if not lt:
        return None
    parts = []
    for d in lt["deltas"]:
        if d["from"] is None or d["to"] is None:
            continue
        pct = "" if d["pct"] is None else f" ({d['pct']:+.1f} %)"
        parts.append(f"{d['label']} {value(d['from'], d['unit'])} → {value(d['to'], d['unit'])} {d['unit']}{pct}")
    return f"night {lt['night']} vs night {lt['previous']}: " + "; ".join(parts)


def _when(n: dict) -> str:
    t = n.get("capture_time") or ""
    return t[:16].replace("T", " ")


def _span(doc: dict) -> str:
    ns = doc["nights"]
    return f"{len(ns)} night(s), {_when(ns[0])} .. {_when(ns[-1])} UTC (ordered by capture time)"


def _headline_metrics(doc: dict) -> list[dict]:
    return [m for m in doc["metrics"] if not m["key"].startswith("stage:")]


def _stage_metrics(doc: dict) -> list[dict]:
    return [m for m in doc["metrics"] if m["key"].startswith("stage:")]


_SHORT = {"step_time_ms": "step ms", "tflops_per_gpu": "TFLOP/s", "mfu_pct": "MFU %",
          "exposed_comm_ms": "exp. comm ms"}


def _cells(n: dict, metrics: list[dict], mark) -> list[str]:
    return [mark(value(n["values"].get(m["key"]), m["unit"]), m["key"] in n["changed"]) for m in metrics]


def _grouped(doc: dict) -> list[tuple[dict, list[dict]]]:
    by: dict[int, list[dict]] = {}
    for c in doc["changes"]:
        by.setdefault(c["night"], []).append(c)
    return [(doc["nights"][k - 1], v) for k, v in sorted(by.items())]


def render_text(doc: dict) -> str:
    out = [f"traceview history — {_span(doc)}", f"rule: {doc['rule']['text']}", ""]
    groups = _grouped(doc)
    if groups:
        out.append(f"Changes ({len(groups)} night(s), {len(doc['changes'])} metric change(s))")
        for n, cs in groups:
            out.append(f"  night {n['night']}  {_when(n)}  {term(txt.clip(n['file'], 60))}")
            out += [f"    {term(change_text(c))}" for c in cs]
    else:
        out.append("No changes: every metric stayed within its noise band.")
    if latest_text(doc):
        out += [""] + textwrap.wrap(f"Newest: {term(latest_text(doc))}", 100, subsequent_indent="  ")
    out.append("")
    hm = _headline_metrics(doc)

    def mark(v, changed):
        return v + ("*" if changed else " ")
    rows = [[n["night"], _when(n)] + _cells(n, hm, mark)
            + ["yes" if n["changed"] else "", term(txt.clip(n["file"], 48))]
            for n in doc["nights"]]
    out.append("Nights (* = outside the noise band)")
    out += txt.table(["night", "captured (UTC)"] + [_SHORT.get(m["key"], m["label"]) for m in hm] + ["change", "file"],
                     rows, "rl" + "r" * len(hm) + "ll")
    sm = _stage_metrics(doc)
    if sm:
        out += ["", "Stage times (ms per step, * = outside the noise band)"]
        rows = [[n["night"]] + _cells(n, sm, mark) for n in doc["nights"]]
        out += txt.table(["night"] + [m["key"][6:] for m in sm], rows)
    for w in doc.get("warnings") or []:
        out.append(f"warning: {term(w)}")
    return "\n".join(out).rstrip() + "\n"


def render_markdown(doc: dict) -> str:
    out = ["# traceview history", "", f"{md(_span(doc))}.", "", f"Rule: {md(doc['rule']['text'])}.", ""]
    groups = _grouped(doc)
    if groups:
        out += [f"## Changes ({len(groups)} night(s))", ""]
        for n, cs in groups:
            out.append(f"- **night {n['night']}** ({md(_when(n))} UTC, {md(n['file'])}):")
            out += [f"  - {md(change_text(c))}" for c in cs]
    else:
        out.append("No changes: every metric stayed within its noise band.")
    if latest_text(doc):
        out += ["", f"Newest: {md(latest_text(doc))}."]
    out.append("")
    hm = _headline_metrics(doc)

    def mark(v, changed):
        return f"**{v}**" if changed else v
    rows = [[n["night"], md(_when(n))] + _cells(n, hm, mark) + ["**yes**" if n["changed"] else "", md(n["file"])]
            for n in doc["nights"]]
    out += ["## Nights (bold: outside the noise band)", ""]
    out += mdr.table(["night", "captured (UTC)"] + [md(m["label"] + ("" if m["unit"] in ("TFLOP/s",) else
                                                                      f" ({m['unit']})")) for m in hm]
                     + ["change", "file"], rows, "rl" + "r" * len(hm) + "ll")
    sm = _stage_metrics(doc)
    if sm:
        out += ["", "## Stage times (ms per step)", ""]
        out += mdr.table(["night"] + [md(m["key"][6:]) for m in sm], [[n["night"]] + _cells(n, sm, mark)
                                                                       for n in doc["nights"]])
    if doc.get("warnings"):
        out += ["", "## Warnings", ""] + [f"- {md(w)}" for w in doc["warnings"]]
    return "\n".join(out).rstrip() + "\n"
