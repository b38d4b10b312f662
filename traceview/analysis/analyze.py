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
        })
    return out


def analyze(profile: Profile, opts: breakdown.Options | None = None, session: Session | None = None,
            rules: Rules | None = None) -> dict:
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
        "warnings": list(profile.warnings),
    }
    return doc
