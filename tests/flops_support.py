"""The FLOPs section and tables as the analysis computes them: in an analysis session whose step
ranges are the breakdown's (breakdown.prepare), or ranges a test gives."""
from __future__ import annotations

import pyarrow as pa

from traceview.analysis import breakdown
from traceview.engine.pipeline import build
from traceview.engine.session import Session
from traceview.flops.mfu import flops_params, flops_section


def analysis_session(profile, step_ranges: pa.Table | None = None) -> Session:
    s = Session(profile)
    if step_ranges is None:
        breakdown.prepare(s, breakdown.Options())
    else:
        s.register("step_ranges", step_ranges)
    return s


def section(profile, step_time_ns, step_ranges: pa.Table | None = None, **kw) -> dict:
    return flops_section(analysis_session(profile, step_ranges), step_time_ns, **kw)


def trace_tables(profile) -> tuple[list[dict], list[dict]]:
    """(flops_ops rows, flops_kernels rows) of a profile."""
    s = analysis_session(profile)
    build(s, ["flops_ops", "flops_kernels"], flops_params(s))
    return s.table("flops_ops").to_pylist(), s.table("flops_kernels").to_pylist()
