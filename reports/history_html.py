"""HTML for the `traceview.history/1` document: one self-contained page (the analyze report's page
frame: inlined Vega bundle, Content-Security-Policy forbidding every fetch) with two charts over
the nights, the headline metrics and the stage times (one panel each, the noise band each night
was judged against shaded), changes marked in red, and
the tables of `history_tables`.
"""
from __future__ import annotations

import altair as alt

from . import history_tables as tables
from .escape import html as h
from .html import _page, _table

WIDTH = 720
CHANGE_COLOR = "#d62728"
BAND_COLOR = "#d0d7de"      # the noise band each night was judged against


def _label(m: dict) -> str:
    return m["label"] + ("" if m["unit"] == "TFLOP/s" else f" ({m['unit']})")


def _rows(doc: dict, metrics: list[dict]) -> list[dict]:
    changes = {(c["night"], c["metric"]): c for c in doc["changes"]}
    rows = []
    for n in doc["nights"]:
        for m in metrics:
            v = n["values"].get(m["key"])
            if v is None:
                continue
            c = changes.get((n["night"], m["key"]))
            band = (n.get("bands") or {}).get(m["key"])
            rows.append({"t": n["capture_epoch_ns"] // 1_000_000, "night": n["night"], "captured": n["capture_time"],
                         "file": n["file"], "metric": _label(m), "value": round(v, 6),
                         "low": None if band is None else round(band[0], 6),
                         "high": None if band is None else round(band[1], 6),
                         "change": tables.change_text(c) if c else ""})
    return rows


def _panels(name: str, metrics: list[dict], title: str, height: int):
    """One panel per metric (own y scale), the nights on a shared UTC time axis, changes as red diamonds."""
    x = alt.X("t:T", title="capture time (UTC)", scale=alt.Scale(type="utc"))
    tips = [alt.Tooltip("night:Q"), alt.Tooltip("captured:N"), alt.Tooltip("file:N"), alt.Tooltip("metric:N"),
            alt.Tooltip("value:Q", format=",.3f"), alt.Tooltip("change:N")]
    y = alt.Y("value:Q", title=None, scale=alt.Scale(zero=False))
    area = alt.Chart().mark_area(color=BAND_COLOR, opacity=0.6).encode(
        x=x, y=alt.Y("low:Q", title=None, scale=alt.Scale(zero=False)), y2="high:Q")
    line = alt.Chart().mark_line(point=alt.OverlayMarkDef(size=18)).encode(x=x, y=y, tooltip=tips)
    # every night gets a diamond, visible only on a change (a filtered, empty layer would give Vega
    # an infinite y extent in the panels without a change)
    marks = alt.Chart().mark_point(shape="diamond", size=140, filled=True, color=CHANGE_COLOR).encode(
        x=x, y=y, tooltip=tips, opacity=alt.condition(alt.datum.change != "", alt.value(1), alt.value(0)))
    header = alt.Header(labelAngle=0, labelAlign="left", labelOrient="top", labelFontWeight="bold")
    return alt.layer(area, line, marks).properties(width=WIDTH, height=height).facet(
        row=alt.Row("metric:N", sort=[_label(m) for m in metrics], title=None, header=header),
        data=alt.NamedData(name=name),
    ).resolve_scale(y="independent").properties(title=title)


def headline_chart(doc: dict):
    metrics = [m for m in doc["metrics"] if not m["key"].startswith("stage:")]
    rows = _rows(doc, metrics)
    if not rows:
        return None
    title = "Headline metrics over the nights (grey: the noise band; red: a change)"
    return _panels("history_headline", metrics, title, 130), rows


def stage_chart(doc: dict):
    metrics = [m for m in doc["metrics"] if m["key"].startswith("stage:")]
    rows = _rows(doc, metrics)
    if not rows:
        return None
    title = "Stage times over the nights (ms per step; grey: the noise band; red: a change)"
    return _panels("history_stages", metrics, title, 90), rows


def specs(doc: dict) -> list[tuple[str, dict]]:
    """(name, Vega-Lite spec): the chart is built on a named data set and the rows are added to the
    spec's `datasets` afterwards (Altair would walk every row of inlined values: seconds for a year)."""
    out = []
    for name, build in (("history_headline", headline_chart), ("history_stages", stage_chart)):
        built = build(doc)
        if built is not None:
            chart, rows = built
            spec = chart.to_dict(validate=False)
            spec["datasets"] = {name: rows}
            out.append((name, spec))
    return out


TITLES = {"history_headline": "Headline metrics", "history_stages": "Stage times"}


def render(doc: dict) -> str:
    specs_ = specs(doc)
    title = "traceview history"
    body = [f"<h1>{h(title)}</h1>", f'<p class="sub">{h(tables._span(doc))}</p>',
            f'<p class="sub">Rule: {h(doc["rule"]["text"])}.</p>']
    groups = tables._grouped(doc)
    if groups:
        items = "".join(f"<li><b>night {n['night']}</b> ({h(tables._when(n))} UTC, {h(n['file'])}): "
                        + "; ".join(h(tables.change_text(c)) for c in cs) + "</li>" for n, cs in groups)
        body.append(f'<div class="violations"><b>{len(groups)} night(s) with a change</b><ul>{items}</ul></div>')
    else:
        body.append('<div class="ok"><b>No changes: every metric stayed within its noise band.</b></div>')
    if tables.latest_text(doc):
        body.append(f"<p>Newest: {h(tables.latest_text(doc))}.</p>")
    for name, _ in specs_:
        body.append(f"<h2>{h(TITLES[name])}</h2>")
        body.append(f'<div class="chart" id="chart-{h(name)}" data-chart="{h(name)}"></div>')
    hm = [m for m in doc["metrics"] if not m["key"].startswith("stage:")]
    sm = [m for m in doc["metrics"] if m["key"].startswith("stage:")]

    def mark(v, changed):
        return v + " ◆" if changed else v
    rows = [[n["night"], tables._when(n)] + tables._cells(n, hm, mark) + [n["file"]] for n in doc["nights"]]
    body += ["<h2>Nights (◆ outside the noise band)</h2>",
             _table(["night", "captured (UTC)"] + [m["label"] + f" ({m['unit']})" for m in hm] + ["file"], rows,
                    "rl" + "r" * len(hm) + "l", name_cols=(len(hm) + 2,))]
    if sm:
        rows = [[n["night"]] + tables._cells(n, sm, mark) for n in doc["nights"]]
        body += ["<h2>Stage times (ms per step)</h2>", _table(["night"] + [m["key"][6:] for m in sm], rows)]
    if doc.get("warnings"):
        body += ["<h2>Warnings</h2>", "<ul>" + "".join(f'<li class="warn">{h(w)}</li>' for w in doc["warnings"])
                 + "</ul>"]
    return _page(title, body, specs_)
