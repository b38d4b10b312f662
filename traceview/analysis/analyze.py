"""`analyze`: assemble the report document from a loaded profile (each section a small function)."""
from __future__ import annotations

import os

from .. import __version__
from ..db import Session
from ..profile import Profile
from ..config import Rules
from . import breakdown, layers

SCHEMA = "traceview.report/1"


def inputs_section(profile: Profile) -> list[dict]:
    from .capture import capture_fields
    captured = capture_fields(profile)
    out = []
    for m in sorted(profile.meta.to_pylist(), key=lambda m: m["rank"]):
        out.append({
            "rank": m["rank"],
            "file": os.path.basename(m["source_file"]),
            "format": m["source_format"],
            "version": m["source_version"],
            "gpu": m["gpu_name"],
            "sm_count": m["sm_count"],
            "rank_source": m["rank_source"],
            **captured[m["rank"]],
        })
    return out


def flops_sections(session: Session, doc: dict, fopts: dict) -> dict:
    """The `flops` section: delivered TFLOP/s, peak, MFU, and achieved TFLOP/s per layer/stage."""
    import pyarrow as pa
    from ..flops import mfu
    from ..flops.models import resolve
    model = resolve(fopts.get("model"), fopts.get("model_config"))
    sec = mfu.flops_section(session, doc["summary"]["step_time_ns"], model=model,
                            tokens_per_step=fopts.get("tokens_per_step"), peak_tflops=fopts.get("peak_tflops"),
                            dtype=fopts.get("dtype"), steps=session.table("step_ranges"))
    if sec.get("method") == "trace":
        _, kernels = mfu.trace_flops(session)
        groups = session.table("activity_attribution")
        n = max(1, len(doc["steps"]))
        comp: dict = {}
        for r in doc["layers"]:
            k = (r["layer"], r["phase"], r["stage"])
            comp[k] = comp.get(k, 0) + r["compute_ns"]
        ct = pa.table({"layer": pa.array([k[0] for k in comp], pa.int32()), "phase": [k[1] for k in comp],
                       "stage": [k[2] for k in comp], "time_ns": list(comp.values())})
        rows = mfu.group_tflops(kernels, groups.filter(pa.compute.is_valid(groups.column("step"))), ct).to_pylist()
        sec["by_group"] = [{"layer": r["layer"], "phase": r["phase"], "stage": r["stage"],
                            "flops_per_step": r["flops"] / n, "compute_ns_per_step": (r["time_ns"] or 0) / n,
                            "achieved_tflops": r["tflops"]} for r in rows if r["flops"]]
    return sec


def analyze(profile: Profile, opts: breakdown.Options | None = None, session: Session | None = None,
            rules: Rules | None = None, fopts: dict | None = None) -> dict:
    opts = opts or breakdown.Options()
    rules = rules or Rules()
    session = session or Session(profile)
    info = breakdown.prepare(session, opts)
    rows = breakdown.step_rows(session)
    layers.prepare(session, rules)
    layer_rows = layers.layer_rows(session)
    doc = {
        "schema": SCHEMA,
        "tool": {"name": "traceview", "version": __version__},
        "inputs": inputs_section(profile),
        "world_size": profile.world_size,
        "steps_source": (("whole trace (--whole-trace)" if opts.whole_trace else "whole trace (no step ranges found)")
                         if info["whole_trace"]
                         else f"CPU ranges matching {info['step_regex']}"),
        "summary": breakdown.summarize(rows),
        "per_rank": breakdown.per_rank(rows),
        "steps": rows,
        "top_kernels": breakdown.top_kernels(session, opts.top),
        "layers": layer_rows,
        "stages": layers.stage_totals(layer_rows),
        "attribution": layers.attribution_summary(session),
        "comm": layers.comm_rows(session),
        "warnings": list(profile.warnings) + info.get("warnings", []),
    }
    if opts.step_regex and info["whole_trace"] and not opts.whole_trace:
        doc["warnings"].append(f"--step-regex '{opts.step_regex}' matched no step range with GPU work: "
                               "the whole trace is one window per rank")
    doc["flops"] = flops_sections(session, doc, fopts or {})
    fl = doc["flops"]
    if fl.get("mfu") is not None and fl["mfu"] > 1:
        doc["warnings"].append(f"delivered {fl['delivered_tflops_per_gpu']:,.1f} TFLOP/s per GPU is above the peak of "
                               f"{fl['peak_tflops']:,.1f} (MFU {fl['mfu']:.2f} > 1): check --peak-tflops, --dtype, "
                               "--tokens-per-step or the model")
    from . import stalls
    sec = stalls.sections(session, doc, top=opts.top)
    doc["warnings"] += sec.pop("collective_warnings")
    doc.update(sec)
    return doc

