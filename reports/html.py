"""HTML report: one self-contained file that works with no network.

Vega, Vega-Lite and vega-embed are inlined (vl-convert's bundle of the versions Altair uses); the
charts' data is inlined in their specs; a Content-Security-Policy forbids every fetch
(`default-src 'none'`), so opening the file never touches the network. Charts render as SVG.

`render(doc)` writes the analyze report (headline, budget, charts, then the same tables as the
Markdown report); `render_diff_html(doc)` the diff report with the waterfall of the explanation.
Names from a trace are HTML-escaped (`escape.html`) in text and go into the chart specs as
`<script>`-safe JSON (`escape.script_json`); Vega draws them as SVG text, never as markup.
"""
from __future__ import annotations

import functools
from typing import Any, Mapping

from traceview.document.types import DiffDocument, Document, Flops, ReportDocument, is_diff

from . import charts as charts_mod, markdown as mdr, rank_tables, ranks
from .escape import html as h, script_json
from .fmt import budget_headline, latent_headline, mb_per, mfu_denominators, ms, pc, tflops, verdict_words
from .labels import OVERLAP_NOTE, count, count_per_step, mean_label, words

CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
       "img-src data:; font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'")

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 24px auto; max-width: 1100px; padding: 0 16px; color: #1f2328; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #d0d7de; }
.sub { color: #59636e; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 14px; min-width: 180px; }
.card .k { color: #59636e; font-size: 12px; text-transform: uppercase; } .card .v { font-size: 20px; font-weight: 600; }
.card .d { color: #59636e; font-size: 12px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; vertical-align: top; }
th { background: #f6f8fa; } td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
td.name { max-width: 560px; overflow-wrap: anywhere; font-family: ui-monospace, monospace; font-size: 12px; }
.violations { border: 1px solid #cf222e; background: #ffebe9; border-radius: 6px; padding: 8px 14px; }
.ok { border: 1px solid #1a7f37; background: #dafbe1; border-radius: 6px; padding: 8px 14px; }
.chart { margin: 8px 0 20px; min-height: 40px; } .chart-error { color: #cf222e; }
.warn { color: #9a6700; }
"""

# Renders every chart; marks each container (data-rendered / chart-error) so a person or a test sees it.
EMBED = """
(function () {
  var specs = JSON.parse(document.getElementById('tv-specs').textContent);
  var names = Object.keys(specs).sort();
  var done = 0;
  names.forEach(function (name) {
    var el = document.getElementById('chart-' + name);
    vegaEmbed(el, specs[name], {renderer: 'svg', actions: false}).then(function () {
      el.setAttribute('data-rendered', '1');
    }).catch(function (err) {
      el.classList.add('chart-error');
      el.textContent = 'chart failed: ' + err;
      console.error(err);
    }).finally(function () {
      done += 1;
      if (done === names.length) { document.body.setAttribute('data-charts-done', String(done)); }
    });
  });
  if (!names.length) { document.body.setAttribute('data-charts-done', '0'); }
})();
"""


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """vega + vega-lite + vega-embed as one classic script (defines window.vegaEmbed)."""
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert
    js = vlc.javascript_bundle(vl_version=vl_version_for_vl_convert())  # type: ignore[call-arg]  # stub lags
    # the bundle must not be able to end its <script> element early
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def _table(headers, rows, aligns=None, name_cols=()) -> str:
    aligns = aligns or "l" + "r" * (len(headers) - 1)

    def cls(i, head=False):
        if aligns[i] == "r":
            return ' class="r"'
        return ' class="name"' if i in name_cols and not head else ""
    out = ["<table><thead><tr>" + "".join(f"<th{cls(i, True)}>{h(x)}</th>" for i, x in enumerate(headers))
           + "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td{cls(i)}>{h(v)}</td>" for i, v in enumerate(r)) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _rank_html(t: rank_tables.Table | None) -> list[str]:
    """A many-rank table (reports/rank_tables.py): <h2>, the table (every cell escaped), notes."""
    if t is None:
        return []
    out = [f"<h2>{h(t.title)}</h2>"]
    if t.rows:
        out.append(_table(t.headers, t.rows, t.aligns, name_cols=t.names))
    return out + [f"<p>{h(n)}</p>" for n in t.notes]


def _page(title: str, body: list[str], specs: list[tuple[str, dict]]) -> str:
    spec_map = {name: spec for name, spec in specs}
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',  # a constant with no double quote
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{h(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>"]
    parts += body
    parts.append(f'<script type="application/json" id="tv-specs">{script_json(spec_map)}</script>')
    if specs:
        parts.append(f"<script>{vega_bundle()}</script>")
    parts.append(f"<script>{EMBED}</script>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


def _chart_divs(specs: list[tuple[str, dict]]) -> list[str]:
    out = []
    for name, _ in specs:
        out.append(f"<h2>{h(mdr.CHART_TITLES.get(name, name))}</h2>")
        out.append(f'<div class="chart" id="chart-{h(name)}" data-chart="{h(name)}"></div>')
    return out


def _budget_html(doc: ReportDocument) -> list[str]:
    b = doc.get("budget")
    if not b:
        return []
    met, head, violated = budget_headline(b, h)
    if met:
        return [f'<div class="ok"><b>{head}.</b></div>']
    items = "".join(f"<li>{m}</li>" for m in violated)
    return [f'<div class="violations"><b>{head}</b><ul>{items}</ul></div>']


def _layers_html(doc: ReportDocument) -> list[str]:
    if not doc.get("layers"):
        return []
    from .text import part_cells
    n = max(1, len(doc.get("steps") or []))
    rows = [[g["label"], g["phase"], *part_cells(g), ms(g["overlapped_comm_ns"]), g["top_stage"]]
            for g in mdr._layer_groups(doc)]
    out = [f"<h2>Per layer and phase (ms, {h(mean_label(n))})</h2>", _table(mdr.LAYER_HEADERS, rows, "llrrrrrrl")]
    if doc.get("stages"):
        srows = [[s["stage"], *part_cells(s, n), ms(s["overlapped_comm_ns"] / n)] for s in doc["stages"]]
        out += [f"<h2>Per MoE stage (ms, {h(mean_label(n))}; all layers and phases)</h2>",
                _table(["stage"] + mdr.LAYER_HEADERS[2:-1], srows)]
    out.append(f"<p>Compute, exposed comm, exposed memory and idle add up to the total. {h(OVERLAP_NOTE)}"
               "</p>")
    if doc.get("attribution"):
        from .text import attribution_sentence
        out.append(f"<p>{h(attribution_sentence(doc['attribution']))}.</p>")
    if ranks.many(doc):
        out += _rank_html(rank_tables.layer_compute(doc))
    return out


def _flops_html(f: Flops) -> list[str]:
    """FLOPs by precision (MFU against both denominators), achievable TFLOP/s and per-family rates."""
    out = []
    if f.get("flops_by_precision"):
        rows = [[r["precision"], f"{r['flops_per_step'] / 1e12:,.2f}", f"{100 * r['share']:.1f}%",
                 ", ".join(("assumed bf16" if k == "assumed" else k) for k in r["sources"]),
                 tflops(r.get("peak_tflops")), pc(r.get("mfu"))] for r in f["flops_by_precision"]]
        out += ["<h2>FLOPs by precision (per step per GPU)</h2>", f"<p>{h(mfu_denominators(f))}.</p>",
                _table(["precision", "TFLOP per step", "share", "precision from", "dense peak TFLOP/s", "MFU"], rows,
                       "lrrlrr")]
    if f.get("achievable"):
        out.append(f"<p>Achievable in this trace ({h(f.get('achievable_definition') or '')}): " + h("; ".join(
            f"{a['kind']} {a['precision']} {tflops(a['tflops'])} TFLOP/s ({a['kernels']} kernels)"
            for a in f["achievable"])) + ".</p>")
    fams = (f.get("by_family") or [])[:12]
    if fams:
        frows = [[mdr.printable(r["family"]), r["precision"], f"{r['flops_per_step'] / 1e12:,.2f}",
                  ms(r["kernel_ns_per_step"]),
                  tflops(r.get("achieved_tflops")), pc(r.get("ratio_to_achievable")),
                  pc(r.get("ratio_to_peak"))] for r in fams]
        out += ["<h2>Achieved TFLOP/s by kernel family</h2>",
                _table(["kernel family", "precision", "TFLOP per step", "kernel ms per step", "TFLOP/s",
                        "of achievable", "of peak"], frows, "llrrrrr", name_cols=(0,))]
    return out


def _stalls_html(doc: ReportDocument) -> list[str]:
    stalls = doc.get("stalls")
    if stalls is None:
        return []
    if not stalls:
        return ["<h2>Top stalls</h2>", "<p>No stalls found.</p>"]
    top = sorted(stalls, key=lambda s: (-(s.get("dur_ns") or 0), s.get("rank", 0), s.get("step", 0),
                                        s.get("start_ns") or 0))[:mdr.TOP]
    def opt(v):
        return "-" if v is None else v
    rows = [[i, opt(s.get("rank")), opt(s.get("step")), opt(s.get("layer")), opt(s.get("phase")), opt(s.get("stage")),
             opt(s.get("cause")), ms(s.get("dur_ns")), mdr._evidence(s.get("evidence"))]
            for i, s in enumerate(top, 1)]
    return [f"<h2>Top stalls ({len(top)} of {len(stalls)})</h2>",
            _table(["#", "rank", "step", "layer", "phase", "stage", "cause", "ms", "evidence"], rows, "rrrrlllrl",
                   name_cols=(8,))]


def _collectives_html(doc: ReportDocument) -> list[str]:
    out = []
    headers, rows = mdr.straggler_rows(doc)
    if ranks.many(doc):
        out += _rank_html(rank_tables.stragglers(doc))
        out += _rank_html(rank_tables.collective_groups(doc))
    elif rows:
        out += ["<h2>Stragglers (ranks the others waited for)</h2>", _table(headers, rows)]
    cols = doc.get("collectives")
    if cols:
        top = sorted(cols, key=lambda c: (-(c.get("skew_ns") or 0), str(c.get("kind")), str(c.get("group")),
                                          c.get("index") or 0))[:mdr.TOP]
        opt = lambda v: "-" if v is None else v  # noqa: E731
        rows = [[c.get("kind"), opt(c.get("group")), opt(c.get("index")), opt(c.get("step")), opt(c.get("straggler")),
                 ms(c.get("skew_ns"))] for c in top]
        out += [f"<h2>Collectives with the most skew ({len(top)} of {len(cols)})</h2>",
                _table(["collective", "group", "index", "step", "straggler rank", "skew ms"], rows, "llrrrr")]
    cp = doc.get("critical_path")
    if cp:
        sums: dict = {}
        total = 0.0
        for c in cp:
            t, comp = mdr.cp_composition(c)
            total += t or 0
            for k, v in comp.items():
                sums[k] = sums.get(k, 0) + v
        rows = [[words(k), ms(v / len(cp)), mdr.pct(v, total)]
                for k, v in sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))]
        out += [f"<h2>Critical path composition (mean over {len(cp)} rank-step window(s))</h2>",
                _table(["part", "ms per step", "% of path"], rows)]
        if ranks.many(doc):
            out += _rank_html(rank_tables.critical_path(doc))
            out += _rank_html(rank_tables.stall_causes(doc))
    return out


def render(doc: Document) -> str:
    if is_diff(doc):
        return render_diff_html(doc)
    s = doc["summary"]
    specs = charts_mod.specs(doc)
    body = [f"<h1>{h(mdr.title(doc))}</h1>",
            f'<p class="sub">traceview {h(doc["tool"]["version"])} · steps: {h(doc["steps_source"])}</p>']
    cards = []
    f = doc.get("flops") or {}
    st = s["step_time_ns"]
    cards.append(("step time", f"{ms(st)} ms", f"the median of {s['steps']} step(s) (step {s.get('step')})"
                  + (f" of the median of {s['ranks']} ranks (rank {s.get('rank')})" if s.get("ranks", 1) > 1 else "")))
    if f.get("delivered_tflops_per_gpu") is not None:
        cards.append(("delivered per GPU", f"{f['delivered_tflops_per_gpu']:,.1f} TFLOP/s",
                      f"{f.get('method')}-based FLOPs"))
        cards.append(("MFU", pc(f.get("mfu")),
                      f"of {f['peak_tflops']:,.1f} TFLOP/s "
                      f"({f.get('gpu') or f.get('gpu_name')}, {f.get('dtype')} dense)"
                      if f.get("peak_tflops") else "peak unknown"))
        if f.get("mfu_precision_weighted") is not None or f.get("mfu_dense_bf16") is not None:
            cards.append(("MFU by denominator", f"{pc(f.get('mfu_dense_bf16'))} bf16 · "
                          f"{pc(f.get('mfu_precision_weighted'))} precision-weighted", mfu_denominators(f)))
    else:
        cards.append(("delivered per GPU", "unknown", "no FLOPs (no shapes, no --model)"))
    cards.append(("exposed communication", mdr.pct(s["exposed_comm_ns"], st),
                  f"{ms(s['exposed_comm_ns'])} ms; {100 * s.get('overlap_ratio', 0):.1f}% of comm overlapped"))
    cards.append(("idle", mdr.pct(s["idle_ns"], st), f"{ms(s['idle_ns'])} ms"))
    body.append('<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{h(k)}</div><div class="v">{h(v)}</div><div class="d">{h(d)}</div></div>'
        for k, v, d in cards) + "</div>")
    body += _budget_html(doc)

    body += _breakdown_html(doc) + _chart_divs(specs)
    body += _layers_html(doc) + _flops_html(f) + _stalls_html(doc) + _collectives_html(doc)
    body += _comm_html(doc)
    if doc.get("top_kernels"):
        from .text import kernel_scope
        krow = [[k["name"], k["class"], count(k["count"]), ms(k["total_ns"])] for k in doc["top_kernels"]]
        body += [f"<h2>Top kernels by GPU time ({h(kernel_scope(doc))})</h2>",
                 _table(["kernel", "class", "calls", "total ms"], krow, "llrr", name_cols=(0,))]
    body += _inputs_html(doc)
    if doc.get("warnings"):
        body += ["<h2>Warnings</h2>", "<ul>" + "".join(f'<li class="warn">{h(w)}</li>' for w in doc["warnings"])
                 + "</ul>"]
    if doc.get("skipped_ranks"):
        body += ["<h2>Skipped ranks</h2>", "<ul>" + "".join(f'<li class="warn">{h(s["file"])}: {h(s["reason"])}</li>'
                                                            for s in doc["skipped_ranks"]) + "</ul>"]
    return _page(mdr.title(doc), body, specs)


INPUT_ROWS = 16      # inputs listed one by one in a many-rank report (first and last ranks)


def _inputs_html(doc: ReportDocument) -> list[str]:
    inputs = doc.get("inputs") or []
    if not inputs:
        return []
    shown = list(inputs)
    note = []
    if ranks.many(doc) and len(inputs) > INPUT_ROWS:
        half = INPUT_ROWS // 2
        shown = shown[:half] + shown[-half:]
        kinds: dict = {}
        for i in inputs:
            k = (i["format"], i.get("gpu") or "unknown")
            kinds[k] = kinds.get(k, 0) + 1
        what = "; ".join(f"{n:,} {f} on {g}" for (f, g), n in sorted(kinds.items()))
        note = [f"<p>{len(inputs):,} inputs: {h(what)}; the first and last {half} listed (JSON: inputs).</p>"]
    irow = [[i["rank"], i["file"], i["format"], i.get("gpu") or "unknown"] for i in shown]
    return ["<h2>Inputs</h2>"] + note + [_table(["rank", "file", "format", "GPU"], irow, "rlll", name_cols=(1,))]


def _comm_html(doc: ReportDocument) -> list[str]:
    if not doc.get("comm"):
        return []
    n = max(1, len(doc.get("steps") or []))
    crow = [[c["kind"], count_per_step(c.get("ops", c["count"]), n), count_per_step(c["count"], n),
             mb_per(c.get("bytes"), n),
             ms(c["total_ns"] / n), ms(c["exposed_ns"] / n)] for c in doc["comm"]]
    return [f"<h2>Communication by collective ({h(mean_label(n))})</h2>",
            _table(["collective", "ops", "kernels", "MB", "total ms", "exposed ms"], crow),
            "<p>Means per step, so they can differ from the median step of the breakdown. Ops: collectives or "
            "dispatch/combine operations; kernels: their GPU activities.</p>"]


def _breakdown_html(doc: ReportDocument) -> list[str]:
    if ranks.many(doc):
        return _rank_html(rank_tables.breakdown(doc))
    s = doc["summary"]

    def cell(r, key):
        return f"{ms(r[key])} ({mdr.pct(r[key], r['step_time_ns'])})"
    rows = [[f"rank {r['rank']}", ms(r["step_time_ns"])] + [cell(r, k) for _, k in mdr.PARTS]
            + [ms(r["overlapped_comm_ns"]), f"{100 * r['overlap_ratio']:.1f}%"]
            for r in sorted(doc["per_rank"], key=lambda r: r["rank"])]
    if len(rows) > 1:
        rows.append([f"job (rank {s.get('rank')}, step {s.get('step')})", ms(s["step_time_ns"])]
                    + [cell(s, k) for _, k in mdr.PARTS]
                    + [ms(s["overlapped_comm_ns"]), f"{100 * s['overlap_ratio']:.1f}%"])
    return ["<h2>Step breakdown (each rank's median step; job: the median rank's; ms and % of the step)</h2>",
            _table(["rank", "step", "compute", "exposed comm", "exposed memory", "idle", "overlapped comm",
                    "overlap"], rows),
            "<p>Compute, exposed comm, exposed memory and idle partition each step window. "
            f"{h(OVERLAP_NOTE)} Overlap = overlapped / total "
            "communication.</p>"]


# --- diff -------------------------------------------------------------------------------------------

def _scalar(v) -> str:
    if isinstance(v, float):
        return f"{v:,.6g}"
    if isinstance(v, (dict, list)):
        import json
        return json.dumps(v, sort_keys=True, ensure_ascii=False)[:300]
    return str(v)


def _side_label(side) -> str:
    if not isinstance(side, dict):
        return _scalar(side)
    for k in ("label", "name", "file", "files", "inputs", "paths"):
        if side.get(k):
            v = side[k]
            if isinstance(v, list):
                v = ", ".join((x.get("file") if isinstance(x, dict) else str(x)) or "" for x in v)
            return str(v)
    return ""


def render_diff_html(doc: DiffDocument) -> str:
    """The `traceview.diff/1` report: verdict, base vs new, the waterfall, the explanation list."""
    specs = charts_mod.specs(doc)
    base, new = doc.get("base"), doc.get("new")
    verdict = doc.get("verdict")
    verdict_text = verdict_words(doc) if isinstance(verdict, str) else _scalar(verdict)
    title = f"traceview diff: {_side_label(base) or 'base'} → {_side_label(new) or 'new'}"
    body = [f"<h1>{h(title)}</h1>", f'<p class="sub">traceview {h((doc.get("tool") or {}).get("version", ""))}</p>',
            f'<div class="cards"><div class="card"><div class="k">verdict</div><div class="v">{h(verdict_text)}</div>'
            "</div>"]
    b_ns, n_ns = charts_mod._step_ns(base), charts_mod._step_ns(new)
    if b_ns is not None and n_ns is not None:
        body[-1] += (f'<div class="card"><div class="k">step time</div><div class="v">{ms(b_ns)} → {ms(n_ns)} ms'
                     f'</div><div class="d">{(n_ns - b_ns) / 1e6:+,.3f} ms ({mdr.pct(n_ns - b_ns, b_ns)})</div></div>')
    body[-1] += "</div>"
    setup = [w for w in doc.get("setup_differences") or [] if isinstance(w, str)]
    if setup:
        body.append("<p><strong>Different setups</strong>: " + "; ".join(h(w) for w in setup) + ".</p>")
    for w in doc.get("warnings") or []:
        if isinstance(w, str):
            body.append(f"<p><strong>Warning</strong>: {h(w)}</p>")
    lh = latent_headline(doc)
    if lh:
        body += [f"<h2>{h(lh.split(':', 1)[0].capitalize())}</h2>", f"<p>{h(lh)}</p>",
                 "<ol>" + "".join(f"<li>{h(it.get('text', ''))}</li>" for it in doc["latent"]) + "</ol>"]
    body += _chart_divs(specs)
    expl = doc.get("explanation") or []
    if expl:
        rows = [[i, f"{(e.get('contribution_ns') or 0) / 1e6:+,.3f}", e.get("text", "")] for i, e in enumerate(expl, 1)]
        body += ["<h2>Explanation</h2>", _table(["#", "contribution ms", "explanation"], rows, "rrl", name_cols=())]
    body += _diff_details(doc)
    return _page(title, body, specs)


def _sms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:+,.3f}"


def _layer_name(x) -> str:
    return "outside layers" if x is None else f"layer {x}"


def _diff_details(doc: DiffDocument) -> list[str]:
    """The rest of a diff document, in the same words as the text and Markdown diffs: noise,
    breakdown, stages, layers, collectives, kernel families, stalls, critical path."""
    from .diff_text import DELTA_PARTS, FAMILY_COUNT, PARTS as DIFF_PARTS, cp_rows, family_counts
    out = []
    # read defensively: a document from elsewhere may lack a section (each is then left out)
    base: Mapping[str, Any] = doc.get("base") or {}
    new: Mapping[str, Any] = doc.get("new") or {}
    delta: Mapping[str, Any] = doc.get("delta") or {}
    nz = doc.get("noise")
    if isinstance(nz, dict) and nz.get("threshold_ns") is not None:
        out.append(f"<p>Noise: the change is {'within' if nz.get('within_noise') else 'outside'} the noise threshold "
                   f"of {h(ms(nz['threshold_ns']))} ms ({h(nz.get('threshold_from', ''))}).</p>")
    bb, nb = base.get("breakdown"), new.get("breakdown")
    if isinstance(bb, dict) and isinstance(nb, dict):
        rows = [["step time", ms(base.get("step_time_ns")), ms(new.get("step_time_ns")),
                 _sms(delta.get("step_time_ns"))]]
        rows += [[label, ms(bb.get(k)), ms(nb.get(k)), _sms((nb.get(k) or 0) - (bb.get(k) or 0))]
                 for label, k in DIFF_PARTS if k in bb or k in nb]
        out += ["<h2>Breakdown of the median step (ms)</h2>", _table(["", "base", "new", "change"], rows),
                f"<p>{h(OVERLAP_NOTE)}</p>"]
    if isinstance(delta.get("flops"), dict):
        f = delta["flops"]
        out.append(f"<p>Delivered TFLOP/s per GPU: {_cell('', f.get('base_tflops'))} → {_cell('', f.get('new_tflops'))}"
                   f" ({_cell('', f.get('delta_tflops'))}).</p>")
    part_heads = ["change: compute", "exposed comm", "exposed memory", "idle"]

    def parts(r):
        dp = r.get("delta_parts_ns") or {}
        return [_sms(dp.get(k)) for k in DELTA_PARTS]
    stages = [r for r in delta.get("stages") or [] if isinstance(r, dict)][:12]
    if stages:
        out += ["<h2>Stages (ms per median step)</h2>",
                _table(["stage", "base", "new", "change"] + part_heads,
                       [[r.get("stage"), ms(r.get("base_ns")), ms(r.get("new_ns")), _sms(r.get("delta_ns"))]
                        + parts(r) for r in stages])]
    layers = [r for r in delta.get("layers") or [] if isinstance(r, dict) and r.get("delta_ns")][:10]
    if layers:
        out += ["<h2>Largest changes by layer, phase and stage (ms per median step)</h2>",
                _table(["layer", "phase", "stage", "base", "new", "change"] + part_heads,
                       [[_layer_name(r.get("layer")), r.get("phase"), r.get("stage"), ms(r.get("base_ns")),
                         ms(r.get("new_ns")), _sms(r.get("delta_ns"))] + parts(r) for r in layers], "lll" + "r" * 7)]
    comm = [r for r in delta.get("comm") or [] if isinstance(r, dict)]
    if comm:
        out += ["<h2>Collectives (ms, mean per rank-step)</h2>",
                _table(["collective", "calls per step", "base", "new", "exposed base", "exposed new"],
                       [[r.get("kind"), family_counts(r, "→"), ms(r.get("base_total_ns")), ms(r.get("new_total_ns")),
                         ms(r.get("base_exposed_ns")), ms(r.get("new_exposed_ns"))] for r in comm])]
    fam = delta.get("families")
    if isinstance(fam, dict):
        for key in ("changed", "appeared", "vanished"):
            frows = [r for r in fam.get(key) or [] if isinstance(r, dict)][:12]
            if frows:
                out += [f"<h2>Kernel families {key} (kernel time, ms, mean per rank-step)</h2>",
                        _table(["family", "base", "new", "change", FAMILY_COUNT],
                               [[r.get("family"), ms(r.get("base_ns")), ms(r.get("new_ns")),
                                 _sms(r.get("delta_ns")), family_counts(r, "→")] for r in frows], "lrrrr",
                               name_cols=(0,))]
    stalls = [r for r in delta.get("stalls") or [] if isinstance(r, dict) and r.get("status") != "same"][:12]
    if stalls:
        out += ["<h2>Stalls that changed (critical path, ms per median step)</h2>",
                _table(["cause", "where", "base", "new", "change", "status"],
                       [[r.get("cause"), f"{_layer_name(r.get('layer'))} {r.get('phase')} {r.get('stage')}",
                         ms(r.get("base_ns")), ms(r.get("new_ns")), _sms(r.get("delta_ns")), r.get("status")]
                        for r in stalls], "llrrrl")]
    if isinstance(delta.get("critical_path"), dict):
        out += ["<h2>Critical path (ms per median step; compute to idle add up to the step window)</h2>",
                _table(["part", "base", "new", "change"],
                       [[k, ms(v.get("base_ns")), ms(v.get("new_ns")), _sms(v.get("delta_ns"))]
                        for k, v in cp_rows(delta["critical_path"])])]
    st = delta.get("straggler")
    if isinstance(st, dict) and st.get("rank") is not None:
        out.append(f"<p>Straggler: rank {h(st['rank'])} ({h(st.get('source', ''))}).</p>")
    return out


def _cell(key: str, v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.4g}"
    return str(v)
