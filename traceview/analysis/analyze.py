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
    from ..flops import mfu
    from ..flops.models import resolve
    sec = mfu.flops_section(session, doc["summary"]["step_time_ns"], model=resolve(model, model_config),
                            tokens_per_step=tokens_per_step, peak_tflops=peak_tflops, dtype=dtype)
    if sec.get("method") == "trace":
        sec["by_group"] = mfu.by_group(session, doc["layers"], max(1, len(doc["steps"])))
    return sec
