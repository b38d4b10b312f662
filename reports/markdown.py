"""Markdown report: GitHub-flavoured, readable as plain text, made for `$GITHUB_STEP_SUMMARY`.

Contents (analyze): a headline (step time, delivered TFLOP/s per GPU and MFU, exposed communication
%), budget violations, the step breakdown per rank, the per-layer table, per-stage totals, the top
stalls, collectives with the most skew, critical-path composition, communication, FLOPs, top kernels,
links to the charts (when written alongside, see `render(doc, images=...)`), and warnings.
A `traceview.diff/1` document goes to `diff_markdown` when that module exists.

Every name from a trace goes through `escape.md` (one line, `|` escaped, no raw HTML).
"""
from __future__ import annotations

from typing import Any, Mapping

from traceview.document.types import DiffDocument, Document, Flops, ReportDocument, is_diff

from . import rank_tables, ranks
from .escape import md
from .fmt import budget_headline, inputs_words, mb_per, mfu_denominators, ms, pc, tflops
from .labels import OVERLAP_NOTE, PARTS, count, count_per_step, mean_label, words

TOP = 10


def pct(part, whole) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def table(headers: list[str], rows: list[list], aligns: str | None = None) -> list[str]:
    """A GFM table padded to column widths (cells must already be escaped)."""
    aligns = aligns or "l" + "r" * (len(headers) - 1)
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(3, *(len(r[i]) for r in cells)) for i in range(len(headers))]

    def line(vals):
        return "| " + " | ".join(v.ljust(w) if a == "l" else v.rjust(w)
                                 for v, w, a in zip(vals, widths, aligns, strict=False)) + " |"
    sep = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else (":" + "-" * (w + 1))
                         for w, a in zip(widths, aligns, strict=False)) + "|"
    return [line(cells[0]), sep] + [line(r) for r in cells[1:]]


# --- headline --------------------------------------------------------------------------------------

def headline(doc: ReportDocument) -> list[tuple[str, str]]:
    """(label, value) pairs shared by the Markdown and HTML headlines."""
    s = doc["summary"]
    st = s["step_time_ns"]
    out = [("step time", f"{ms(st)} ms: the median of {s['steps']} step(s) (step {s.get('step')})"
            + (f" of the median of {s['ranks']} ranks (rank {s.get('rank')})" if s.get("ranks", 1) > 1 else ""))]
    f = doc.get("flops") or {}
    if f.get("delivered_tflops_per_gpu") is not None:
        mfu = pc(f.get("mfu")) if f.get("mfu") is not None else "n/a (peak unknown)"
        peak = (f" of {f['peak_tflops']:,.1f} peak ({f.get('gpu') or f.get('gpu_name') or 'GPU unknown'}, "
                f"{f.get('dtype')} dense)") if f.get("peak_tflops") else ""
        out.append(("delivered", f"{f['delivered_tflops_per_gpu']:,.1f} TFLOP/s per GPU, MFU {mfu}{peak}"))
        if f.get("mfu_precision_weighted") is not None:
            out.append(("precision-weighted MFU", f"{pc(f['mfu_precision_weighted'])} (effective peak "
                        f"{tflops(f.get('peak_tflops_precision_weighted'))} TFLOP/s: each op at its precision's peak)"))
    else:
        out.append(("delivered", "TFLOP/s unknown (no FLOPs: no shapes in the trace and no --model)"))
    out.append(("exposed communication", f"{pct(s['exposed_comm_ns'], st)} of the step "
                f"({ms(s['exposed_comm_ns'])} ms; {100 * s.get('overlap_ratio', 0):.1f}% of communication overlapped)"))
    out.append(("idle", f"{pct(s['idle_ns'], st)} of the step ({ms(s['idle_ns'])} ms)"))
    return out


def title(doc: ReportDocument) -> str:
    name = inputs_words(doc.get("inputs", []))
    s = doc["summary"]
    return f"traceview: {name} — {s['ranks']} rank(s), {s['steps']} step(s)"


def budget_lines(doc: ReportDocument) -> list[str]:
    b = doc.get("budget")
    if not b:
        return []
    met, head, violated = budget_headline(b, md)
    if met:
        return [f"**{head}.**", ""]
    return ["> [!CAUTION]", f"> **{head}**"] + [f"> - {m}" for m in violated] + [""]


# --- sections ---------------------------------------------------------------------------------------

def breakdown_lines(doc: ReportDocument) -> list[str]:
    if ranks.many(doc):
        return rank_lines(rank_tables.breakdown(doc))

    def cell(r, key):
        return f"{ms(r[key])} ({pct(r[key], r['step_time_ns'])})"
    rows = [[f"rank {r['rank']}", ms(r["step_time_ns"])] + [cell(r, k) for _, k in PARTS]
            + [ms(r["overlapped_comm_ns"]), f"{100 * r['overlap_ratio']:.1f}%"]
            for r in sorted(doc["per_rank"], key=lambda r: r["rank"])]
    if len(rows) > 1:
        s = doc["summary"]
        rows.append([f"**job** (rank {s.get('rank')}, step {s.get('step')})", ms(s["step_time_ns"])]
                    + [cell(s, k) for _, k in PARTS]
                    + [ms(s["overlapped_comm_ns"]), f"{100 * s['overlap_ratio']:.1f}%"])
    return ["### Step breakdown (each rank's median step; job: the median rank's; ms and % of the step)", ""] + table(
        ["rank", "step", "compute", "exposed comm", "exposed memory", "idle", "overlapped comm", "overlap"],
        rows) + ["", "Compute, exposed comm, exposed memory and idle partition each step window. " + OVERLAP_NOTE
                 + " Overlap = overlapped / total communication.", ""]


def rank_lines(t: rank_tables.Table | None) -> list[str]:
    """A many-rank table (reports/rank_tables.py) as a section: ### title, table, notes; its name
    columns escaped."""
    if t is None:
        return []
    out = [f"### {md(t.title)}", ""]
    if t.rows:
        out += table(t.headers, [[md(c) if i in t.names else c for i, c in enumerate(r)] for r in t.rows],
                     t.aligns) + [""]
    return out + [x for n in t.notes for x in (md(n), "")]


def _layer_groups(doc: ReportDocument) -> list[dict]:
    """Layer x phase groups (mean per rank-step window), shared with the text report."""
    from .text import group_layers
    return group_layers(doc)


def layer_lines(doc: ReportDocument) -> list[str]:
    if not doc.get("layers"):
        return []
    from .text import part_cells
    n = max(1, len(doc.get("steps") or []))
    rows = [[md(g["label"]), md(g["phase"]), *part_cells(g), ms(g["overlapped_comm_ns"]), md(g["top_stage"])]
            for g in _layer_groups(doc)]
    lines = [f"### Per layer and phase (ms, {mean_label(n)})", ""]
    lines += table(LAYER_HEADERS, rows, "llrrrrrrl") + [""]
    if doc.get("stages"):
        srows = [[md(s["stage"]), *part_cells(s, n), ms(s["overlapped_comm_ns"] / n)] for s in doc["stages"]]
        lines += [f"### Per MoE stage (ms, {mean_label(n)}; all layers and phases)", ""]
        lines += table(["stage"] + LAYER_HEADERS[2:-1], srows) + [""]
    lines += ["Compute, exposed comm, exposed memory and idle add up to the total. " + OVERLAP_NOTE, ""]
    a = doc.get("attribution")
    if a:
        from .text import attribution_sentence
        lines += [md(attribution_sentence(a)) + ".", ""]
    return lines


LAYER_HEADERS = ["layer", "phase", "total", "compute", "exposed comm", "exposed memory", "idle",
                 "overlapped comm", "top stage"]


def _num(key: str, v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)) and key.endswith("_ns"):
        return f"{v / 1e6:,.3f} ms"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def evidence_text(ev, depth: int = 0) -> str:
    """A stall's evidence (a string, or a dict/list) as one short line: `*_ns` in ms."""
    if ev is None:
        return ""
    if isinstance(ev, dict):
        parts = []
        for k in sorted(ev):
            v = ev[k]
            if v is None or v == "" or v == [] or v == {} or k.endswith(("start_ns", "end_ns")):
                continue            # absolute times say nothing in a report
            label = words(k[:-3] if k.endswith("_ns") else k)
            if isinstance(v, (dict, list)):
                parts.append(f"{label}: ({evidence_text(v, depth + 1)})" if depth < 2 else f"{label}: …")
            else:
                parts.append(f"{label}: {_num(k, v)}")
        return "; ".join(parts)
    if isinstance(ev, list):
        items = [evidence_text(x, depth + 1) if isinstance(x, (dict, list)) else str(x) for x in ev[:4]]
        return ", ".join(items) + (f", … ({len(ev)} in all)" if len(ev) > 4 else "")
    return str(ev)


_evidence = evidence_text

CP_NOT_PARTS = {"start_ns", "end_ns", "window_ns", "total_ns", "stall_ns", "gpu_idle_ns", "idle_assigned_ns",
                "peer_wait_ns", "imbalance_ns", "overlapped_comm_ns"}


def cp_composition(entry: Mapping[str, Any]) -> tuple[float, dict]:
    """(window length ns, {part: ns}) of one critical_path entry: a `composition` dict, or flat
    `*_ns` parts (compute_ns, all_to_all_ns, other_comm_ns, launch_bound_ns, host_sync_ns, idle_ns)."""
    comp = entry.get("composition")
    if not isinstance(comp, dict):
        comp = {k: v for k, v in entry.items() if k.endswith("_ns") and k not in CP_NOT_PARTS
                and isinstance(v, (int, float)) and not isinstance(v, bool)}
    comp = {(k[:-3] if k.endswith("_ns") else k): v for k, v in comp.items() if isinstance(v, (int, float))}
    total = entry.get("window_ns") or entry.get("total_ns")
    if total is None and entry.get("end_ns") is not None and entry.get("start_ns") is not None:
        total = entry["end_ns"] - entry["start_ns"]
    if total is None:
        total = sum(comp.values())
    return total, comp


def straggler_rows(doc: ReportDocument) -> tuple[list[str], list[list[str]]]:
    """The `stragglers` section as (headers, rows): rank first, `*_ns` as ms, most wait caused first."""
    items: list[Mapping[str, Any]] = list(doc.get("stragglers") or [])
    if not items:
        return [], []
    keys = sorted({k for it in items for k in it if not isinstance(it[k], (dict, list))} - {"rank"})
    headers = ["rank"] + [words(k) for k in keys]
    rows = []
    for it in items[:TOP]:
        rows.append([str(it.get("rank", "-"))] + [
            ("-" if it.get(k) is None else (ms(it[k]) if k.endswith("_ns") else _num(k, it[k]))) for k in keys])
    return headers, rows


def _opt(v) -> str:
    return "-" if v is None else md(v)


def stall_lines(doc: ReportDocument) -> list[str]:
    stalls = doc.get("stalls")
    if stalls is None:
        return []
    if not stalls:
        return ["### Top stalls", "", "No stalls found.", ""]
    top = sorted(stalls, key=lambda s: (-(s.get("dur_ns") or 0), s.get("rank", 0), s.get("step", 0),
                                        s.get("start_ns") or 0))[:TOP]
    rows = [[i, _opt(s.get("rank")), _opt(s.get("step")), _opt(s.get("layer")), _opt(s.get("phase")),
             _opt(s.get("stage")), _opt(s.get("cause")), ms(s.get("dur_ns")), md(_evidence(s.get("evidence")))]
            for i, s in enumerate(top, 1)]
    total = sum(s.get("dur_ns") or 0 for s in stalls)
    return [f"### Top stalls ({min(TOP, len(stalls))} of {len(stalls)}, {ms(total)} ms in all)", ""] + table(
        ["#", "rank", "step", "layer", "phase", "stage", "cause", "ms", "evidence"], rows, "rrrrlllrl") + [""]


def collective_lines(doc: ReportDocument) -> list[str]:
    lines = []
    headers, rows = straggler_rows(doc)
    if ranks.many(doc):
        lines += rank_lines(rank_tables.stragglers(doc))
        lines += rank_lines(rank_tables.collective_groups(doc))
    elif rows:
        lines += ["### Stragglers (ranks the others waited for)", ""]
        lines += table([md(h) for h in headers], [[md(c) for c in r] for r in rows]) + [""]
    cols = doc.get("collectives")
    if cols:
        top = sorted(cols, key=lambda c: (-(c.get("skew_ns") or 0), str(c.get("kind")), str(c.get("group")),
                                          c.get("index") or 0))[:TOP]
        rows = [[md(c.get("kind"), 40), _opt(c.get("group")), _opt(c.get("index")), _opt(c.get("step")),
                 _opt(c.get("straggler")), ms(c.get("skew_ns"))] for c in top]
        lines += [f"### Collectives with the most skew ({len(top)} of {len(cols)})", ""]
        lines += table(["collective", "group", "index", "step", "straggler rank", "skew ms"], rows, "llrrrr") + [""]
    return lines


def critical_path_lines(doc: ReportDocument) -> list[str]:
    cp = doc.get("critical_path")
    if not cp:
        return []
    sums: dict = {}
    total = 0.0
    for c in cp:
        t, comp = cp_composition(c)
        total += t or 0
        for k, v in comp.items():
            sums[k] = sums.get(k, 0) + v
    n = len(cp)
    rows = [[md(words(k)), ms(v / n), pct(v, total)] for k, v in sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))]
    many = []
    if ranks.many(doc):
        many = rank_lines(rank_tables.critical_path(doc)) + rank_lines(
            rank_tables.stall_causes(doc))
    return [f"### Critical path composition (mean over {n} rank-step window(s))", ""] + table(
        ["part", "ms per step", "% of path"], rows) + [""] + many


def comm_lines(doc: ReportDocument) -> list[str]:
    if not doc.get("comm"):
        return []
    n = max(1, len(doc.get("steps") or []))
    rows = [[md(c["kind"]), count_per_step(c.get("ops", c["count"]), n), count_per_step(c["count"], n),
             mb_per(c.get("bytes"), n),
             ms(c["total_ns"] / n), ms(c["exposed_ns"] / n)] for c in doc["comm"]]
    return [f"### Communication by collective ({mean_label(n)})", ""] + table(
        ["collective", "ops", "kernels", "MB", "total ms", "exposed ms"], rows) + [
        "", "Means per step, so they can differ from the median step of the breakdown. Ops: collectives or "
        "dispatch/combine operations; kernels: their GPU activities.", ""]


def flops_lines(doc: ReportDocument) -> list[str]:
    f = doc.get("flops")
    if not f or not f.get("flops_per_step"):
        return []
    fps = f["flops_per_step"] or 0
    lines = ["### FLOPs", "",
             f"{fps / 1e12:,.2f} TFLOP per step per GPU ({md(f.get('method') or 'unknown')}-based)"
             + (f"; {f['tokens_per_step']:,} tokens per step" if f.get("tokens_per_step") else "") + ".", ""]
    lines += precision_lines(f)
    groups = sorted(f.get("by_group") or [], key=lambda g: (-g["flops_per_step"], str(g["layer"]), g["phase"],
                                                              g["stage"]))[:8]
    if groups:
        rows = [[f"layer {g['layer']}" if g["layer"] is not None else "outside", md(g["phase"]), md(g["stage"]),
                 f"{g['flops_per_step'] / 1e12:,.2f}", ms(g["compute_ns_per_step"]),
                 f"{g['achieved_tflops']:,.0f}" if g.get("achieved_tflops") else "-"] for g in groups]
        lines += [f"By group ({mean_label(max(1, len(doc.get('steps') or [])))}):", ""]
        lines += table(["layer", "phase", "stage", "TFLOP", "compute ms", "TFLOP/s"], rows, "lllrrr") + [""]
    for n in f.get("notes") or []:
        lines += [f"- note: {md(n)}"]
    return lines + ([""] if f.get("notes") else [])


def printable(s) -> str:
    """Control characters of a trace-derived name shown as '?' (before the format's own escaping)."""
    return "".join(c if c.isprintable() else "?" for c in str(s))


def precision_lines(f: Flops) -> list[str]:
    """FLOPs by precision, MFU against both denominators, achievable TFLOP/s, per-family rates."""
    lines = []
    if f.get("mfu_dense_bf16") is not None or f.get("mfu_precision_weighted") is not None:
        lines += [mfu_denominators(f) + ".", ""]
    rows = [[r["precision"], f"{r['flops_per_step'] / 1e12:,.2f}", f"{100 * r['share']:.1f}%",
             ", ".join(("assumed bf16" if k == "assumed" else k) for k in r["sources"]),
             tflops(r.get("peak_tflops")), pc(r.get("mfu"))] for r in f.get("flops_by_precision") or []]
    if rows:
        lines += table(["precision", "TFLOP per step", "share", "precision from", "dense peak TFLOP/s", "MFU"],
                       rows, "lrrlrr") + [""]
    ach = f.get("achievable") or []
    if ach:
        lines += [f"Achievable in this trace ({md(f.get('achievable_definition') or '')}): " + "; ".join(
            f"{a['kind']} {a['precision']} {tflops(a['tflops'])} TFLOP/s ({a['kernels']} kernels)"
            for a in ach) + ".", ""]
    fams = (f.get("by_family") or [])[:8]
    if fams:
        frows = [[md(printable(r["family"]), 60), r["precision"], f"{r['flops_per_step'] / 1e12:,.2f}",
                  ms(r["kernel_ns_per_step"]), tflops(r.get("achieved_tflops")), pc(r.get("ratio_to_achievable")),
                  pc(r.get("ratio_to_peak"))] for r in fams]
        lines += table(["kernel family", "precision", "TFLOP per step", "kernel ms per step", "TFLOP/s",
                        "of achievable", "of peak"], frows, "llrrrrr") + [""]
    return lines


def kernel_lines(doc: ReportDocument) -> list[str]:
    if not doc.get("top_kernels"):
        return []
    from .text import kernel_scope
    rows = [[md(k["name"], 90), md(k["class"]), count(k["count"]), ms(k["total_ns"])] for k in doc["top_kernels"]]
    return [f"### Top kernels by GPU time ({kernel_scope(doc)})", ""] + table(
        ["kernel", "class", "calls", "total ms"], rows, "llrr") + [""]


CHART_TITLES = {"step_breakdown": "Step breakdown per step and rank", "layer_phase": "Per layer × phase",
                "timeline": "Timeline of one step, stalls marked", "stragglers": "Per-rank stragglers",
                "waterfall": "Waterfall of the explanation", "rank_heatmap": "Rank × step heatmap",
                "straggler_histogram": "Stragglers and collective skew"}


def chart_lines(images: list[str] | None) -> list[str]:
    pngs = [p for p in images or [] if p.endswith(".png")]
    if not pngs:
        return []
    lines = ["### Charts", ""]
    for p in pngs:
        name = p.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        lines.append(f"![{md(CHART_TITLES.get(name, name))}]({p})")
    return lines + [""]


def render(doc: Document, images: list[str] | None = None) -> str:
    """The Markdown report. `images`: chart paths relative to the report (from charts.write_images)."""
    if is_diff(doc):
        return render_diff(doc, images)
    lines = [f"## {md(title(doc))}", ""]
    lines += [" · ".join(f"**{label}** {md(value)}" for label, value in headline(doc)), ""]
    lines += budget_lines(doc)
    lines += breakdown_lines(doc) + layer_lines(doc)
    if ranks.many(doc):
        lines += rank_lines(rank_tables.layer_compute(doc))
    lines += stall_lines(doc) + collective_lines(doc)
    lines += critical_path_lines(doc) + comm_lines(doc) + flops_lines(doc) + kernel_lines(doc)
    lines += chart_lines(images)
    if doc.get("warnings"):
        lines += ["### Warnings", ""] + [f"- {md(w, 300)}" for w in doc["warnings"]] + [""]
    if doc.get("skipped_ranks"):
        lines += ["### Skipped ranks", ""] + [f"- {md(s['file'], 200)}: {md(s['reason'], 200)}"
                                              for s in doc["skipped_ranks"]] + [""]
    ins = ", ".join(f"rank {i['rank']}: {i['file']} ({i['format']}, {i.get('gpu') or 'GPU unknown'})"
                    for i in doc.get("inputs", [])[:8])
    more = f" and {len(doc['inputs']) - 8} more" if len(doc.get("inputs", [])) > 8 else ""
    lines += [f"<sub>traceview {md(doc['tool']['version'])}; steps: {md(doc['steps_source'])}; "
              f"inputs: {md(ins)}{more}</sub>"]
    return "\n".join(lines).rstrip() + "\n"


# --- diff ---------------------------------------------------------------------------------------------

def render_diff(doc: DiffDocument, images: list[str] | None = None) -> str:
    """`traceview.diff/1` (reports/diff_markdown.py), with links to its charts."""
    from . import diff_markdown
    text = diff_markdown.render(doc)
    extra = chart_lines(images)
    return text if not extra else text.rstrip() + "\n\n" + "\n".join(extra).rstrip() + "\n"
