"""Sections of the analyze document that are not one query's rows: the inputs and the FLOPs
(traceview.document.assemble puts them together with the others)."""
from __future__ import annotations

import os
from pathlib import Path

from ..engine.session import Session
from ..profile import Profile


def inputs_section(profile: Profile, first: dict[int, int] | None = None) -> list[dict]:
    """One row per rank (`first`: capture.first_event_ns of the profile, where known)."""
    from .capture import capture_fields
    captured = capture_fields(profile, first)
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
    sec = flops_totals(session, doc["summary"]["step_time_ns"], model=model, model_config=model_config,
                       tokens_per_step=tokens_per_step, peak_tflops=peak_tflops, dtype=dtype)
    return flops_by_group(session, sec, doc["layers"], len(doc["steps"]))


def flops_totals(session: Session, step_time_ns: int | None, *, model: str | None = None,
                 model_config: Path | None = None, tokens_per_step: int | None = None,
                 peak_tflops: float | None = None, dtype: str | None = None) -> dict:
    """The `flops` section less its per-group rows (`flops_by_group`, which needs the layer rows):
    every step it reads of the profile's tables is built here, flops_groups included (it reads
    only built steps), so that the profile's CPU ranges may be let go in between (assemble)."""
    from ..engine.pipeline import build
    from ..flops import mfu
    from ..flops.models import resolve
    sec = mfu.flops_section(session, step_time_ns, model=resolve(model, model_config),
                            tokens_per_step=tokens_per_step, peak_tflops=peak_tflops, dtype=dtype)
    if sec.get("method") == "trace":
        build(session, ["flops_groups"])
    return sec


def flops_by_group(session: Session, sec: dict, layer_rows: list[dict], n_steps: int) -> dict:
    """`sec` (flops_totals) with its achieved TFLOP/s per layer/stage, where the FLOPs came from the trace."""
    if sec.get("method") == "trace":
        from ..flops import mfu
        sec["by_group"] = mfu.by_group(session, layer_rows, max(1, n_steps))
    return sec
