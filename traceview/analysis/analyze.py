"""Sections of the analyze document that are not one query's rows: the inputs and the FLOPs
(traceview.document.assemble puts them together with the others)."""
from __future__ import annotations

import os
from pathlib import Path

from ..db import Session
from ..profile import Profile


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


def flops_sections(session: Session, doc: dict, *, model: str | None = None, model_config: Path | None = None,
                   tokens_per_step: int | None = None, peak_tflops: float | None = None,
                   dtype: str | None = None) -> dict:
    """The `flops` section: delivered TFLOP/s, peak, MFU, and achieved TFLOP/s per layer/stage."""
    import pyarrow as pa
    from ..flops import mfu
    from ..flops.models import resolve
    sec = mfu.flops_section(session, doc["summary"]["step_time_ns"], model=resolve(model, model_config),
                            tokens_per_step=tokens_per_step, peak_tflops=peak_tflops,
                            dtype=dtype, steps=session.table("step_ranges"))
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
