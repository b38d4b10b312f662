"""Terminal rendering of a `traceview.diff/1` document (fits 100 columns)."""
from __future__ import annotations

import textwrap
from typing import Any, Mapping

from traceview.document.types import DeltaCriticalPathPart, DiffDocument, DiffSide

from .fmt import clip, latent_headline, ms, one_line, signed_ms, table, verdict_words
from .labels import CP_MEASURES, CP_PARTS, count, words

PARTS = (("compute", "compute_ns"), ("exposed comm", "exposed_comm_ns"), ("exposed memory", "exposed_memory_ns"),
         ("idle", "idle_ns"), ("overlapped comm", "overlapped_comm_ns"))
WIDTH = 100
FAMILY_COUNT = "calls per step"
DELTA_PARTS = ("compute_ns", "exposed_comm_ns", "exposed_memory_ns", "idle_ns")


def cp_rows(cp: Mapping[str, DeltaCriticalPathPart]) -> list[tuple[str, DeltaCriticalPathPart]]:
    """The critical-path entries of a diff in reading order, as (reader's name, {base_ns, new_ns,
    delta_ns}): the parts that add up to the window first, then the window and the measures beside it."""
    known = [k for k in CP_PARTS + CP_MEASURES if k in cp]
    rest = sorted(k for k in cp if k not in known)
    return [(words(k, None), cp[k]) for k in known + rest
            if cp[k].get("base_ns") or cp[k].get("new_ns")]


def family_counts(r: Mapping[str, Any], arrow: str = "->") -> str:
    """Calls per step (a mean over the rank-steps): whole numbers, "~N" for a mean that is not whole."""
    return f"{count(r['base_count'])} {arrow} {count(r['new_count'])}"


def _part(r: Mapping[str, Any], k: str) -> float | None:
    """One part of a row's change (`delta_parts_ns`), None when the row has none."""
    return (r.get("delta_parts_ns") or {}).get(k)


def side_line(label: str, s: DiffSide) -> str:
    files = ", ".join(sorted({f"{i['format']}: {i['file']}" for i in s["inputs"]}))
    return "  " + clip(f"{label:4s} {ms(s['step_time_ns'])} ms per step  ({s['steps']} steps x {s['ranks']} ranks; "
                       f"{files})", WIDTH - 2)


def _layer(x) -> str:
    return "outside layers" if x is None else f"layer {x}"


def render(doc: DiffDocument) -> str:
    d, b, n, nz = doc["delta"], doc["base"], doc["new"], doc["noise"]
    pct = d["step_time_pct"]
    out = [f"traceview diff: {verdict_words(doc).upper()}  {signed_ms(d['step_time_ns'])} ms per step"
           + (f" ({pct:+.1f}%)" if pct is not None else ""), ""]
    out += [side_line("base", b), side_line("new", n)]
    for w in doc.get("setup_differences") or []:
        out += ["  " + ln for ln in textwrap.wrap(one_line(f"note: {w}"), WIDTH - 4, subsequent_indent="  ")]
    noise = (f"noise: |change| {ms(abs(d['step_time_ns']))} ms vs threshold {ms(nz['threshold_ns'])} ms "
             f"({nz['threshold_from']}); spread base {ms(nz['base_spread_ns'])} ms, "
             f"new {ms(nz['new_spread_ns'])} ms ({nz['method_base']})")
    out += ["  " + ln for ln in textwrap.wrap(one_line(noise), WIDTH - 4, subsequent_indent="  ")]
    for w in doc.get("warnings") or []:
        out += ["  " + ln for ln in textwrap.wrap(one_line(f"warning: {w}"), WIDTH - 4, subsequent_indent="  ")]
    out.append("")
    lh = latent_headline(doc)
    if lh:
        out += textwrap.wrap(one_line(lh[0].upper() + lh[1:]), WIDTH)
        for i, it in enumerate(doc["latent"], 1):
            lines = textwrap.wrap(one_line(it["text"]), WIDTH - 8) or [""]
            out.append(f"  {i:2d}.  {lines[0]}")
            out += [" " * 8 + ln for ln in lines[1:]]
        out.append("")
    if doc["verdict"] == "noise":
        out.append("The change is within the noise. What moved (contributions sum to the change):")
    else:
        out.append("Why (contributions sum to the change):")
    for item in doc["explanation"]:
        frac = item.get("share")
        share = f"{100 * frac:6.1f}%" if frac is not None and doc["verdict"] != "noise" else "       "
        tag = " [moved between categories]" if item.get("moved") else ""
        lines = textwrap.wrap(one_line(item["text"]) + tag, WIDTH - 15) or [""]
        out.append(f"  {item['rank']:2d}. {share}  {lines[0]}")
        out += [" " * 15 + ln for ln in lines[1:]]
    total = sum(it["contribution_ns"] for it in doc["explanation"])
    out.append(f"      sum of the items {total / 1e6:+,.6f} ms = change {d['step_time_ns'] / 1e6:+,.6f} ms")
    out += ["", "Breakdown of the median step (ms)"]
    rows = [["step time", ms(b["step_time_ns"]), ms(n["step_time_ns"]), signed_ms(d["step_time_ns"])]]
    bb: Mapping[str, int] = b["breakdown"]   # type: ignore[assignment]  # read by part name
    nb: Mapping[str, int] = n["breakdown"]   # type: ignore[assignment]
    db: Mapping[str, int] = d["breakdown"]   # type: ignore[assignment]
    rows += [[lab, ms(bb[k]), ms(nb[k]), signed_ms(db[k])] for lab, k in PARTS]
    out += table(["", "base", "new", "change"], rows)
    st = [r for r in d["stages"] if r["delta_ns"] or r["base_ns"] or r["new_ns"]][:10]
    if st:
        out += ["", "Stages (ms per median step; the change split into compute, exposed comm, exposed memory, idle)"]
        out += table(["stage", "base", "new", "change", "compute", "exp comm", "exp mem", "idle"],
                     [[clip(r["stage"], 24), ms(r["base_ns"]), ms(r["new_ns"]), signed_ms(r["delta_ns"])]
                      + [signed_ms(_part(r, k)) for k in DELTA_PARTS] for r in st])
    lr = [r for r in d.get("layers", []) if r["delta_ns"]][:10]
    if lr:
        out += ["", "Largest changes by layer, phase and stage (ms per median step)"]
        out += ["  (the change split into its parts: compute, exposed comm, exposed memory and idle add up to it)"]
        out += table(["layer", "phase", "stage", "base", "new", "change", "compute", "exp comm", "exp mem", "idle"],
                     [[_layer(r["layer"]), clip(r["phase"], 10), clip(r["stage"], 16), ms(r["base_ns"]),
                       ms(r["new_ns"]), signed_ms(r["delta_ns"])]
                      + [signed_ms(_part(r, k)) for k in DELTA_PARTS]
                      for r in lr], aligns="lll" + "r" * 7)
    if d["comm"]:
        out += ["", "Collectives (ms, mean per rank-step)"]
        out += table(["kind", "calls per step", "base", "new", "exposed base", "exposed new"],
                     [[clip(r["kind"], 24), family_counts(r), ms(r["base_total_ns"]), ms(r["new_total_ns"]),
                       ms(r["base_exposed_ns"]), ms(r["new_exposed_ns"])] for r in d["comm"]])
    fam = d["families"]
    for title, frows in (("Kernel families that changed", fam["changed"][:12]), ("Appeared", fam["appeared"][:12]),
                        ("Vanished", fam["vanished"][:12])):
        if frows:
            out += ["", f"{title} (kernel time, ms, mean per rank-step)"]
            out += table(["family", "base", "new", "change", FAMILY_COUNT],
                         [[clip(r["family"], 40), ms(r["base_ns"]), ms(r["new_ns"]), signed_ms(r["delta_ns"]),
                           family_counts(r)] for r in frows])
    f = d.get("flops")
    if f:
        out += ["", f"Delivered TFLOP/s per GPU: {f['base_tflops']:.1f} -> {f['new_tflops']:.1f} "
                    f"({f['delta_tflops']:+.1f})"]
    stalls = [r for r in d.get("stalls") or [] if r["status"] != "same"][:10]
    if stalls:
        out += ["", "Stalls that changed (ms per median step)"]
        out += table(["cause", "where", "base", "new", "status"],
                     [[clip(r["cause"], 16), clip(f"{_layer(r['layer'])} {r['phase']} {r['stage']}", 40),
                       ms(r["base_ns"]),
                       ms(r["new_ns"]), r["status"]] for r in stalls], aligns="llrrl")
    cp = d.get("critical_path")
    if cp:
        out += ["", "Critical path (ms per median step; compute to idle add up to the step window)"]
        out += table(["part", "base", "new", "change"],
                     [[k, ms(v["base_ns"]), ms(v["new_ns"]), signed_ms(v["delta_ns"])]
                      for k, v in cp_rows(cp)])
    for lab, s in (("base", b), ("new", n)):
        for w in s.get("warnings", [])[:5]:
            out.append(clip(f"warning ({lab}): {w}", WIDTH))
    return "\n".join(out) + "\n"
