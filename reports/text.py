"""Terminal report: readable tables that fit 100 columns."""
from __future__ import annotations

import textwrap
from typing import Any, Mapping

from traceview.document.types import Attribution, Flops, ReportDocument

from . import ranks
from .fmt import budget_headline, clip, inputs_words, mb_per, mfu_denominators, ms, pc, table, tflops
from .labels import PARTS as BREAKDOWN, count, count_per_step, mean_label, rounded_parts, total_label

OVERLAP_LEGEND = ("exp = exposed (nothing else ran beside it); ovl comm = overlapped communication, which ran "
                  "beside compute: that time is counted as compute, so it is not a part and can exceed the total.")


def pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "   - "


def breakdown_lines(doc: ReportDocument) -> list[str]:
    if ranks.many(doc):
        from . import text_ranks
        return text_ranks.breakdown_lines(doc)
    if len(doc["per_rank"]) > 1:
        rows = [[r["rank"], ms(r["step_time_ns"]), ms(r["compute_ns"]), ms(r["exposed_comm_ns"]),
                 ms(r["exposed_memory_ns"]), ms(r["idle_ns"]), ms(r["overlapped_comm_ns"]),
                 f"{100 * r['overlap_ratio']:.1f}%"] for r in doc["per_rank"]]
        s = doc["summary"]
        rows.append([f"job: rank {s.get('rank')} step {s.get('step')}", ms(s["step_time_ns"]), ms(s["compute_ns"]),
                     ms(s["exposed_comm_ns"]),
                     ms(s["exposed_memory_ns"]), ms(s["idle_ns"]), ms(s["overlapped_comm_ns"]),
                     f"{100 * s['overlap_ratio']:.1f}%"])
        return (["Step breakdown per rank (each rank's median step, ms; job: the median rank's median step)"] + table(
            ["rank", "step", "compute", "exp comm", "exp mem", "idle", "ovl comm", "overlap"], rows)
            + [""] + textwrap.wrap(OVERLAP_LEGEND + " Compute, exp comm, exp mem and idle partition each step "
                                   "window. overlap = overlapped / total comm.", 100) + [""])
    lines = []
    for r in doc["per_rank"]:
        st = r["step_time_ns"]
        lines.append(f"rank {r['rank']}: median step {ms(st)} ms (step {r.get('step')}; {r['steps']} step(s)); "
                     f"overlap ratio {100 * r['overlap_ratio']:.1f}% (overlapped / total comm)")
        parts: Mapping[str, float] = r   # type: ignore[assignment]  # read by key name below
        rows = [[name, ms(parts[key]), pct(parts[key], st)] for name, key in BREAKDOWN]
        rows.append(["step time", ms(st), pct(st, st)])
        rows.append(["", "", ""])
        rows.append(["overlapped comm", ms(r["overlapped_comm_ns"]), pct(r["overlapped_comm_ns"], st)])
        rows.append(["total comm", ms(r["comm_ns"]), pct(r["comm_ns"], st)])
        lines += ["  " + x if x else "" for x in table(["part of the median step", "ms", "% step"], rows)]
        lines += textwrap.wrap("overlapped comm ran beside compute (counted as compute, not a part); "
                               "total comm = exposed + overlapped", 100, initial_indent="  ", subsequent_indent="  ")
        lines.append("")
    return lines


def top_kernel_lines(doc: ReportDocument) -> list[str]:
    rows = [[clip(k["name"], 60), k["class"], count(k["count"]), ms(k["total_ns"])] for k in doc["top_kernels"]]
    return [f"Top kernels by GPU time ({kernel_scope(doc)})"] + table(
        ["kernel", "class", "calls", "total ms"], rows, "llrr") + [""]


def kernel_scope(doc: ReportDocument) -> str:
    """What the top-kernel totals cover: every step window of every rank."""
    s = doc["summary"]
    return f"{total_label(s['steps'], s['ranks'])}, inside step windows"


def _n_windows(doc: ReportDocument) -> int:
    return max(1, len(doc["steps"]))


def layer_label(r: Mapping[str, Any]) -> str:
    if r["region"] == "layer":
        return f"layer {r['layer']}" + (" (inferred)" if r.get("layer_inferred") else "")
    return {"outside": "outside layers", "layer_unknown": "layer unknown"}.get(r["region"], "unattributed")


def attribution_sentence(a: Attribution) -> str:
    """The attribution summary in one sentence (text and Markdown reports)."""
    linked = a.get("backward_linked_share")
    s = (f"Attribution: {100 * a['in_layers_share']:.1f}% of GPU busy time in layers"
         + (f" ({100 * a['inferred_layer_share']:.1f}% with layer numbers inferred from repeating annotation blocks)"
            if a.get("inferred_layer_share") else "")
         + (f", {100 * a['layer_unknown_share']:.1f}% in a stage of an unknown layer"
            if a.get("layer_unknown_share") else "")
         + f", {100 * a['outside_layers_share']:.1f}% outside them (embedding, head, loss, optimizer), "
         f"{a['unattributed_count']} activities unattributed ({100 * a['unattributed_share']:.1f}%)"
         + (f"; backward linked to forward ops: {100 * linked:.1f}%" if linked is not None else ""))
    x: Mapping[str, Any] = a.get("cross_thread") or {}
    if x.get("count") or x.get("ambiguous_count"):
        s += (f"; attributed across threads (launched by a thread without annotations, named by the training "
              f"thread's annotation open at launch): {x['count']} activities, {x['busy_ns'] / 1e6:,.3f} ms busy "
              f"({100 * x['share']:.1f}%)"
              + (f", {x['ambiguous_count']} left unattributed (annotations open on several training threads)"
                 if x.get("ambiguous_count") else ""))
    return s


def group_layers(doc: ReportDocument) -> list[dict]:
    """Layer x phase groups (mean per step and rank) with the stage that dominates each."""
    n = _n_windows(doc)
    groups: dict = {}
    for r in doc.get("layers", []):
        key = (r["region"] != "layer", r["layer"] if r["layer"] is not None else -1, r["region"],
               bool(r.get("layer_inferred")), r["phase"])
        g = groups.setdefault(key, {"label": layer_label(r), "phase": r["phase"], "stages": {},
                                    **{f: 0.0 for f in ("step_time_ns", "compute_ns", "exposed_comm_ns",
                                                        "overlapped_comm_ns", "idle_ns", "exposed_memory_ns")}})
        for f in ("step_time_ns", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "idle_ns",
                  "exposed_memory_ns"):
            g[f] += r[f] / n
        g["stages"][r["stage"]] = g["stages"].get(r["stage"], 0) + r["step_time_ns"]
    out = []
    for key in sorted(groups):
        g = groups[key]
        g["top_stage"] = max(g["stages"].items(), key=lambda kv: (kv[1], kv[0]))[0] if g["stages"] else "-"
        out.append(g)
    return out


def part_cells(r: Mapping[str, Any], n: int = 1) -> list[str]:
    """[total, compute, exposed comm, exposed memory, idle] of a row (values / n) in ms, rounded so
    that the printed parts add up to the printed total."""
    parts, total = rounded_parts([r[k] / n for _, k in BREAKDOWN])
    return [f"{total:,.3f}"] + [f"{p:,.3f}" for p in parts]


def layer_lines(doc: ReportDocument) -> list[str]:
    if not doc.get("layers"):
        return []
    n = _n_windows(doc)
    rows = [[clip(g["label"], 20), g["phase"], *part_cells(g), ms(g["overlapped_comm_ns"]), g["top_stage"]]
            for g in group_layers(doc)]
    lines = [f"Per layer and phase (ms, {mean_label(n)})"]
    lines += table(["layer", "phase", "total", "compute", "exp comm", "exp mem", "idle", "ovl comm", "top stage"],
                   rows, "llrrrrrrl")
    srows = [[s["stage"], *part_cells(s, n), ms(s["overlapped_comm_ns"] / n)] for s in doc.get("stages", [])]
    lines += ["", f"Per MoE stage (ms, {mean_label(n)}; all layers and phases)"]
    lines += table(["stage", "total", "compute", "exp comm", "exp mem", "idle", "ovl comm"], srows)
    lines += [""] + textwrap.wrap(OVERLAP_LEGEND + " Compute, exp comm, exp mem and idle add up to the total.", 100)
    a = doc.get("attribution")
    if a:
        lines.append("")
        lines += textwrap.wrap(attribution_sentence(a), 100)
    return lines + [""]


def comm_lines(doc: ReportDocument) -> list[str]:
    if not doc.get("comm"):
        return []
    n = _n_windows(doc)
    rows = [[c["kind"], count_per_step(c.get("ops", c["count"]), n), count_per_step(c["count"], n),
             mb_per(c.get("bytes"), n),
             ms(c["total_ns"] / n), ms(c["exposed_ns"] / n)] for c in doc["comm"]]
    return textwrap.wrap(f"Communication by collective ({mean_label(n)}; the breakdown above is the median "
                         "step; ops: collectives or dispatch/combine operations, kernels: their GPU activities)",
                         100) + table(["collective", "ops", "kernels", "MB", "total ms", "exposed ms"], rows) + [""]


def flops_lines(doc: ReportDocument) -> list[str]:
    f = doc.get("flops")
    if not f:
        return []
    lines = ["FLOPs"]
    fps = f.get("flops_per_step")
    if fps:
        lines.append(f"  {fps / 1e12:,.2f} TFLOP per step per GPU ({f['method']}-based)"
                     + (f"; {f['tokens_per_step']:,} tokens per step" if f.get("tokens_per_step") else ""))
    if f.get("delivered_tflops_per_gpu") is not None:
        peak = f"{f['peak_tflops']:,.1f}" if f.get("peak_tflops") else "unknown"
        mfu = pc(f.get("mfu"))
        lines.append(f"  delivered {f['delivered_tflops_per_gpu']:,.1f} TFLOP/s per GPU; peak {peak} "
                     f"({f.get('gpu') or f.get('gpu_name') or 'GPU unknown'}, {f['dtype']} dense); MFU {mfu}")
    lines += precision_lines(f, "  ")
    if f.get("model_params"):
        mp = f["model_params"]
        lines.append(f"  model {f.get('model')}: {mp['total'] / 1e9:,.2f}B parameters, "
                     f"{mp['active'] / 1e9:,.2f}B active "
                     f"({mp['active_excl_embedding'] / 1e9:,.2f}B without the embedding table)")
    trace_fps, model_fps = f.get("trace_flops_per_step"), f.get("model_flops_per_step")
    if trace_fps and model_fps:
        lines.append(f"  trace {trace_fps / 1e12:,.2f} vs model {model_fps / 1e12:,.2f}"
                     f" TFLOP per step (ratio {f['trace_to_model_ratio']:.3f})")
    groups = sorted(f.get("by_group", []), key=lambda g: -g["flops_per_step"])[:8]
    if groups:
        rows = [[(f"layer {g['layer']}") if g["layer"] is not None else "outside", g["phase"], g["stage"],
                 f"{g['flops_per_step'] / 1e12:,.2f}", ms(g["compute_ns_per_step"]),
                 f"{g['achieved_tflops']:,.0f}" if g.get("achieved_tflops") else "-"] for g in groups]
        lines.append(f"  by group ({mean_label(_n_windows(doc))})")
        lines += ["  " + x for x in table(["layer", "phase", "stage", "TFLOP", "compute ms", "TFLOP/s"], rows,
                                          "lllrrr")]
    for n in f.get("notes", []):
        lines += textwrap.wrap(f"  note: {n}", 100, subsequent_indent="    ")
    return lines + [""]


def _term(s, n: int) -> str:
    """A trace-derived name for the terminal: one line, clipped, control characters shown as '?'."""
    return "".join(c if c.isprintable() else "?" for c in clip(s, n))


def precision_lines(f: Flops, ind: str) -> list[str]:
    """MFU against each denominator, FLOPs by precision, achievable TFLOP/s, per-family rates."""
    lines = []
    if f.get("mfu_dense_bf16") is not None or f.get("mfu_precision_weighted") is not None:
        lines += textwrap.wrap(ind + mfu_denominators(f), 100, subsequent_indent=ind + "  ")
    rows = [[r["precision"], f"{r['flops_per_step'] / 1e12:,.2f}", f"{100 * r['share']:.1f}%",
             ", ".join(("assumed bf16" if k == "assumed" else k) for k in r["sources"]),
             tflops(r.get("peak_tflops")), pc(r.get("mfu"))] for r in f.get("flops_by_precision") or []]
    if rows:
        lines += [ind + x for x in table(["precision", "TFLOP/step", "share", "precision from", "peak TFLOP/s",
                                          "MFU"], rows, "lrrlrr")]
    ach = f.get("achievable") or []
    if ach:
        lines += textwrap.wrap(f"{ind}achievable = sustained in this trace (p95 of per-kernel TFLOP/s, kernels of at "
                               f"least {ach[0].get('min_kernel_ns', 0) // 1000} us): " + "; ".join(
            f"{a['kind']} {a['precision']} {tflops(a['tflops'])} TFLOP/s ({a['kernels']} kernels)" for a in ach),
            100, subsequent_indent=ind + "  ")
    fams = (f.get("by_family") or [])[:8]
    if fams:
        frows = [[_term(r["family"], 30), r["precision"], f"{r['flops_per_step'] / 1e12:,.2f}",
                  ms(r["kernel_ns_per_step"]), tflops(r.get("achieved_tflops")), pc(r.get("ratio_to_achievable")),
                  pc(r.get("ratio_to_peak"))] for r in fams]
        lines += [ind + x for x in table(["kernel family", "precision", "TFLOP/step", "kernel ms", "TFLOP/s",
                                          "of achievable", "of peak"], frows, "llrrrrr")]
    return lines


def budget_lines(doc: ReportDocument) -> list[str]:
    """The budget's headline and violations, first in the report (nothing without a budget)."""
    b = doc.get("budget")
    if not b:
        return []
    _, head, violated = budget_headline(b)
    return [head] + [f"  VIOLATED {m}" for m in violated] + [""]


def render(doc: ReportDocument) -> str:
    s = doc["summary"]
    head = textwrap.wrap(f"traceview {doc['tool']['version']} — {inputs_words(doc['inputs'])}, "
                         f"{s['ranks']} rank(s), {s['steps']} step(s); steps: {clip(doc['steps_source'], 120)}",
                         100, subsequent_indent="  ")
    for i in doc["inputs"][:8]:
        head.append(f"  rank {i['rank']}: {clip(i['file'], 50)} ({i['format']}, {i['gpu'] or 'GPU unknown'})")
    if len(doc["inputs"]) > 8:
        head.append(f"  ... and {len(doc['inputs']) - 8} more")
    head.append("")
    from .text_stalls import lines as stall_lines
    many = []
    if ranks.many(doc):
        from . import text_ranks
        many = text_ranks.layer_lines(doc)
    lines = (head + budget_lines(doc) + breakdown_lines(doc) + flops_lines(doc) + layer_lines(doc) + many
             + comm_lines(doc) + stall_lines(doc) + top_kernel_lines(doc))
    for w in doc.get("warnings", []):
        lines += textwrap.wrap(f"warning: {clip(w, 300)}", 100)
    for sk in doc.get("skipped_ranks", []):
        lines += textwrap.wrap(f"skipped: {clip(sk['file'], 200)}: {clip(sk['reason'], 200)}", 100)
    return "\n".join(lines).rstrip() + "\n"
