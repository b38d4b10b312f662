"""GitHub-flavoured Markdown for a `traceview.diff/1` document (a PR comment or CI step summary).

Every string that comes from a trace or a path (kernel families, stage and collective names, file
names, the explanation texts that quote them) goes through `esc` (reports/escape.py `md`): one line,
Markdown punctuation backslash-escaped, `& < >` as entities, so no name can open a table cell, a
link, emphasis, code or raw HTML.
"""
from __future__ import annotations

from typing import Mapping

from traceview.document.types import DiffDocument

from .diff_text import DELTA_PARTS, FAMILY_COUNT, _part, cp_rows, family_counts
from .escape import md
from .fmt import latent_headline, ms, signed_ms as sms, verdict_words

PARTS = (("compute", "compute_ns"), ("exposed comm", "exposed_comm_ns"), ("exposed memory", "exposed_memory_ns"),
         ("idle", "idle_ns"), ("overlapped comm", "overlapped_comm_ns"))


def esc(s, limit: int | None = None) -> str:
    """One line of Markdown-safe text (the shared escaper of reports/escape.py)."""
    return md(s, limit)


def table(headers: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---" if i < right_from else "--:" for i in range(len(headers))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _layer(x) -> str:
    return "outside layers" if x is None else f"layer {x}"


def render(doc: DiffDocument) -> str:
    d, b, n, nz = doc["delta"], doc["base"], doc["new"], doc["noise"]
    pct = d["step_time_pct"]
    pct_s = f" ({pct:+.1f} %)" if pct is not None else ""
    out = [f"### traceview diff: {verdict_words(doc)}, {sms(d['step_time_ns'])} ms per step{pct_s}", ""]
    def files(s):   # one nsys file may hold several ranks: each file once
        u = list(dict.fromkeys(f"{i['file']} ({i['format']})" for i in s["inputs"]))
        return ", ".join(esc(x) for x in u[:4]) + (f" and {len(u) - 4} more" if len(u) > 4 else "")
    out += [f"Base: {files(b)}, {b['steps']} steps x {b['ranks']} ranks.  ",
            f"New: {files(n)}, {n['steps']} steps x {n['ranks']} ranks.", ""]
    if doc.get("setup_differences"):
        out += ["> **Different setups**: " + "; ".join(esc(w) for w in doc["setup_differences"]) + ".", ""]
    out.append(f"> Noise: the change ({ms(abs(d['step_time_ns']))} ms) is "
               f"{'within' if nz['within_noise'] else 'outside'} the noise threshold of {ms(nz['threshold_ns'])} ms "
               f"({esc(nz['threshold_from'])}; per-step spread: base {ms(nz['base_spread_ns'])} ms, "
               f"new {ms(nz['new_spread_ns'])} ms).")
    out += [f"> **Warning**: {esc(w)}" for w in doc.get("warnings") or []]
    out.append("")
    lh = latent_headline(doc)
    if lh:
        out += ["> [!WARNING]", f"> **{esc(lh[0].upper() + lh[1:])}**"]
        out += [f"> {i}. {esc(it['text'])}" for i, it in enumerate(doc["latent"], 1)]
        out.append("")
    out.append("**Why** (contributions add up to the change):" if doc["verdict"] != "noise"
               else "**What moved** (within the noise; contributions add up to the change):")
    out.append("")
    for it in doc["explanation"]:
        frac = it.get("share")
        share = f" ({100 * frac:.1f} %)" if frac is not None and doc["verdict"] != "noise" else ""
        moved = " *(moved between categories, no step-time effect)*" if it.get("moved") else ""
        out.append(f"{it['rank']}. {esc(it['text'])}{share}{moved}")
    total = sum(it["contribution_ns"] for it in doc["explanation"])
    out += ["", f"Sum of the items: {total / 1e6:+,.6f} ms; step-time change: {d['step_time_ns'] / 1e6:+,.6f} ms.", ""]
    rows = [["step time (median)", ms(b["step_time_ns"]), ms(n["step_time_ns"]), sms(d["step_time_ns"])]]
    bb: Mapping[str, int] = b["breakdown"]   # type: ignore[assignment]  # read by part name
    nb: Mapping[str, int] = n["breakdown"]   # type: ignore[assignment]
    db: Mapping[str, int] = d["breakdown"]   # type: ignore[assignment]
    rows += [[lab, ms(bb[k]), ms(nb[k]), sms(db[k])] for lab, k in PARTS]
    out += table(["ms per step", "base", "new", "change"], rows)
    f = d.get("flops")
    if f:
        out += ["", f"Delivered TFLOP/s per GPU: {f['base_tflops']:.1f} → {f['new_tflops']:.1f} "
                    f"({f['delta_tflops']:+.1f})."]
    out += ["", "<details><summary>Stages, collectives and kernel families</summary>", ""]
    st = [r for r in d["stages"] if r["delta_ns"]][:12]
    if st:
        out += table(["stage", "base ms", "new ms", "change ms", "change: compute ms", "exposed comm ms",
                      "exposed memory ms", "idle ms"],
                     [[esc(r["stage"], 40), ms(r["base_ns"]), ms(r["new_ns"]), sms(r["delta_ns"])]
                      + [sms(_part(r, k)) for k in DELTA_PARTS] for r in st])
        out.append("")
    lr = [r for r in d.get("layers", []) if r["delta_ns"]][:10]
    if lr:
        out += table(["layer", "phase", "stage", "base ms", "new ms", "change ms", "change: compute ms",
                      "exposed comm ms", "exposed memory ms", "idle ms"],
                     [[esc(_layer(r["layer"])), esc(r["phase"]), esc(r["stage"], 40), ms(r["base_ns"]), ms(r["new_ns"]),
                       sms(r["delta_ns"])] + [sms(_part(r, k)) for k in DELTA_PARTS] for r in lr],
                     right_from=3)
        out.append("")
    if d["comm"]:
        out += table(["collective (mean per rank-step)", "calls per step", "base ms", "new ms", "exposed base ms",
                      "exposed new ms"],
                     [[esc(r["kind"], 30), family_counts(r, "→"), ms(r["base_total_ns"]), ms(r["new_total_ns"]),
                       ms(r["base_exposed_ns"]), ms(r["new_exposed_ns"])] for r in d["comm"]])
        out.append("")
    fam = d["families"]
    for title, frows in (("changed", fam["changed"][:12]), ("appeared", fam["appeared"][:12]),
                        ("vanished", fam["vanished"][:12])):
        if frows:
            out += table([f"kernel family ({title}; mean per rank-step)", "base ms", "new ms", "change ms",
                          FAMILY_COUNT],
                         [[esc(r["family"], 60), ms(r["base_ns"]), ms(r["new_ns"]), sms(r["delta_ns"]),
                           family_counts(r, "→")] for r in frows])
            out.append("")
    stalls = [r for r in d.get("stalls") or [] if r["status"] != "same"][:12]
    if stalls:
        out += table(["stall (critical path)", "where", "base ms", "new ms", "status"],
                     [[esc(r["cause"]), esc(f"{_layer(r['layer'])} {r['phase']} {r['stage']}", 60), ms(r["base_ns"]),
                       ms(r["new_ns"]), esc(r["status"])] for r in stalls], right_from=2)
        out.append("")
    cp = d.get("critical_path")
    if cp:
        out += table(["critical path (median step)", "base ms", "new ms", "change ms"],
                     [[esc(k), ms(v["base_ns"]), ms(v["new_ns"]), sms(v["delta_ns"])]
                      for k, v in cp_rows(cp)])
        out.append("")
    out += ["</details>", ""]
    return "\n".join(out)
