"""Shared by the report tests: schema validation, documents from fixtures, a hand-made issue-6 section set."""
from __future__ import annotations

import copy
import functools
import json
from importlib import resources

from helpers import ROOT, TRACES

GEN = ROOT / "fixtures" / "generated"
HOSTILE_KERNEL = "<img src=x onerror=alert(1)>"
HOSTILE_ANNOTATION = "stage|one\nsecond line"


@functools.cache
def schema(name: str = "report.schema.json") -> dict:
    return json.loads(resources.files("traceview.data").joinpath(name).read_text(encoding="utf-8"))


def validate(doc: dict) -> dict:
    """Raise jsonschema.ValidationError unless `doc` matches its schema (report or diff)."""
    import jsonschema
    name = "diff.schema.json" if str(doc.get("schema", "")).startswith("traceview.diff/") else "report.schema.json"
    jsonschema.Draft202012Validator(schema(name)).validate(doc)
    return doc


@functools.cache
def _analyze_json(paths: tuple[str, ...]) -> str:
    from traceview.reports import json_report
    from traceview.runs import AnalyzeOptions, run_analyze
    return json_report.render(run_analyze(list(paths), AnalyzeOptions()))


def analyze(*paths) -> dict:
    """The report document of `paths` (a fresh copy each call, validated against the schema)."""
    return validate(json.loads(_analyze_json(tuple(str(p) for p in paths))))


def with_issue6(doc: dict, stall_evidence: str = "", stall_stage: str = "dispatch") -> dict:
    """Hand-made stall, collective and critical-path sections over doc's own steps, in the shapes
    traceview/analysis/stalls.py writes.

    Stall 1: the first step window's rank, 0.100 ms into it, 0.250 ms long, cause exposed_a2a;
    stall 2: same rank, 0.900 ms in, 0.120 ms long, host_sync. Collective 0 of that step: rank r
    arrives 0.050 ms + 1 us * r into its window and takes 0.300 ms - 1 us * r; the highest rank is
    the straggler, skew 1 us * (ranks - 1). Critical path per window: compute_ns + idle_ns +
    all_to_all_ns (the exposed comm) = the step time."""
    doc = copy.deepcopy(doc)
    for key in ("clock", "a2a", "stall_summary", "collective_warnings"):   # the real sections, if any
        doc.pop(key, None)
    steps = doc["steps"]
    first = sorted(steps, key=lambda s: (s["step"], s["rank"]))[0]
    ranks = sorted({s["rank"] for s in steps if s["step"] == first["step"]})
    window = {s["rank"]: s for s in steps if s["step"] == first["step"]}
    doc["critical_path"] = [{"rank": s["rank"], "step": s["step"], "start_ns": s["start_ns"],
                             "end_ns": s["start_ns"] + s["step_time_ns"], "window_ns": s["step_time_ns"],
                             "compute_ns": s["compute_ns"] + s["exposed_memory_ns"],
                             "all_to_all_ns": s["exposed_comm_ns"], "idle_ns": s["idle_ns"],
                             "stall_ns": s["step_time_ns"] - s["compute_ns"] - s["exposed_memory_ns"]}
                            for s in steps]
    doc["stalls"] = [
        {"rank": first["rank"], "step": first["step"], "layer": 1, "phase": "forward", "stage": stall_stage,
         "cause": "exposed_a2a", "start_ns": first["start_ns"] + 100_000, "dur_ns": 250_000,
         "evidence": {"activity": stall_evidence or "ncclDevKernel_SendRecv", "pieces": 1, "skew_ns": 2_000,
                      "collective": {"kind": "all_to_all", "group": "ep", "index": 0}}},
        {"rank": first["rank"], "step": first["step"], "layer": None, "phase": "optimizer", "stage": "other",
         "cause": "host_sync", "start_ns": first["start_ns"] + 900_000, "dur_ns": 120_000,
         "evidence": {"sync_call": "cudaStreamSynchronize", "sync_ns": 118_000, "ops": ["aten::item"]}},
    ]
    doc["collectives"] = [{"kind": "all_to_all", "group": "ep", "index": 0, "step": first["step"],
                           "ranks": len(ranks),
                           "start_ns": {str(r): window[r]["start_ns"] + 50_000 + 1_000 * r for r in ranks},
                           "dur_ns": {str(r): 300_000 - 1_000 * r for r in ranks},
                           "straggler": ranks[-1], "skew_ns": 1_000 * (len(ranks) - 1)}]
    last = ranks[-1]
    doc["stragglers"] = sorted(
        [{"rank": r, "times_last": int(r == last and len(ranks) > 1), "collectives": 1,
          "total_skew_ns": 1_000 * (len(ranks) - 1) if r == last else 0,
          "wait_caused_ns": sum(1_000 * (last - k) for k in ranks) if r == last else 0,
          "max_skew_ns": 1_000 * (len(ranks) - 1) if r == last else 0} for r in ranks],
        key=lambda d: (-d["wait_caused_ns"], d["rank"]))
    return doc


def diff_doc(base_ms: float = 300.0, new_ms: float = 320.0) -> dict:
    """A hand-made traceview.diff/1 document: +15 ms a2a, +8 ms idle, -3 ms compute (sum 20 ms)."""
    return {
        "schema": "traceview.diff/1",
        "tool": {"name": "traceview", "version": "0.1.0"},
        "base": {"label": "base.json", "step_time_ns": int(base_ms * 1e6)},
        "new": {"label": "new.json", "step_time_ns": int(new_ms * 1e6)},
        "delta": {"step_time_ns": int((new_ms - base_ms) * 1e6)},
        "verdict": "slower",
        "explanation": [
            {"contribution_ns": 15_000_000, "text": "exposed all-to-all in layer 2 dispatch grew"},
            {"contribution_ns": 8_000_000, "text": f"idle before kernel {HOSTILE_KERNEL} | after {HOSTILE_ANNOTATION}"},
            {"contribution_ns": -3_000_000, "text": "compute in experts shrank"},
        ],
    }


def corpus(*parts):
    return TRACES.joinpath(*parts)
