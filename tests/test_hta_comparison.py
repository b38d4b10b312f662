"""The README's comparison with Holistic Trace Analysis on `hta_nccl_parser_config/nccl_data.json.gz`,
measured: HTA 0.5.0's get_comm_comp_overlap reports 14.31 %; the three differences between it and
traceview (the last step dropped, the gaps between steps, whole-microsecond events) are each
reproduced here by changing the input or the window, never by changing traceview."""
from __future__ import annotations

import gzip
import json
import math

import pytest
from helpers import TRACES

from traceview.analysis import breakdown
from traceview.engine.session import Session
from traceview.load import load
from traceview.runs import AnalyzeOptions, run_analyze

NCCL = TRACES / "kineto" / "hta_nccl_parser_config" / "nccl_data.json.gz"
HTA_OVERLAP_PCT = 14.31
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
pytestmark = pytest.mark.skipif(not NCCL.exists(), reason="trace corpus not present")


def overlap_pct_without_last_step(path) -> float:
    """traceview's overlap ratio over HTA's span: from the first GPU activity to the start of the
    last ProfilerStep (HTA's include_last_profiler_step=False)."""
    s = Session(load([path]))
    breakdown.prepare(s, breakdown.Options(whole_trace=True))
    last = s.rows("SELECT max(start_ns) AS t FROM cpu_ranges WHERE name LIKE 'ProfilerStep#%'")[0]["t"]
    s.register("windows", s.sql("SELECT rank, 0::BIGINT AS step, min(start_ns) AS start_ns, "
                                "$last::BIGINT AS end_ns FROM gpu_activities GROUP BY rank", last=last))
    r = breakdown.step_rows(s)[0]
    return 100 * r["overlapped_comm_ns"] / r["comm_ns"]


def _events():
    with gzip.open(NCCL) as fh:
        return json.load(fh)


def test_microsecond_rounding_is_the_rest_of_the_gap(tmp_path):
    """HTA's parser moves each event's start up and its end down to whole microseconds
    (ceil(ts), floor(ts + dur)). The same rounding applied to the file brings traceview to HTA's
    14.31 %; unrounded, traceview gives 0.45 points more."""
    exact = overlap_pct_without_last_step(NCCL)
    trace = _events()
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float)):
            start, end = math.ceil(e["ts"]), math.floor(e["ts"] + e["dur"])
            e["ts"], e["dur"] = start, max(0, end - start)      # a sub-microsecond event becomes empty
    rounded = tmp_path / "nccl_data_us.json"
    rounded.write_text(json.dumps(trace))
    hta_like = overlap_pct_without_last_step(rounded)
    assert abs(hta_like - HTA_OVERLAP_PCT) < 0.05, hta_like
    assert abs((exact - hta_like) - 0.45) < 0.05, (exact, hta_like)


def test_last_step_and_gaps_between_steps():
    """Whole trace 15.6 %, without the last step 14.8 %; the step windows leave the gaps between
    steps out (HTA counts them as idle): the span from the first to the last GPU activity, taken
    from the JSON, minus the three step windows."""
    whole = run_analyze([str(NCCL)], AnalyzeOptions(whole_trace=True))["summary"]
    assert round(100 * whole["overlap_ratio"], 1) == 15.6
    assert round(overlap_pct_without_last_step(NCCL), 1) == 14.8
    gpu = [e for e in _events()["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    span_us = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    assert abs(whole["step_time_ns"] / 1e3 - span_us) < 1.0
    steps = run_analyze([str(NCCL)], AnalyzeOptions())["steps"]
    assert len(steps) == 3
    gaps_ms = span_us / 1e3 - sum(s["step_time_ns"] for s in steps) / 1e6
    assert 12.4 < gaps_ms < 12.6, gaps_ms
    assert abs(span_us / 1e3 - 660.55) < 0.01
