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


@functools.lru_cache(maxsize=None)
def schema(name: str = "report.schema.json") -> dict:
    return json.loads(resources.files("traceview.data").joinpath(name).read_text(encoding="utf-8"))


def validate(doc: dict) -> dict:
    """Raise jsonschema.ValidationError unless `doc` matches its schema (report or diff)."""
    import jsonschema
    name = "diff.schema.json" if str(doc.get("schema", "")).startswith("traceview.diff/") else "report.schema.json"
    jsonschema.Draft202012Validator(schema(name)).validate(doc)
    return doc


@functools.lru_cache(maxsize=None)
def _analyze_json(paths: tuple[str, ...]) -> str:
    from traceview.analysis.pipeline import AnalyzeOptions, run_analyze
    from traceview.reports import json_report
    return json_report.render(run_analyze(list(paths), AnalyzeOptions()))


def analyze(*paths) -> dict:
    """The report document of `paths` (a fresh copy each call, validated against the schema)."""
    return validate(json.loads(_analyze_json(tuple(str(p) for p in paths))))


def with_issue6(doc: dict, stall_evidence: str = "", stall_stage: str = "dispatch") -> dict:
    """Hand-made issue-6 sections (critical_path, stalls, collectives, stragglers) over doc's own steps.

    Stall 1: rank of the first step window, 0.100 ms into it, 0.250 ms long; stall 2: same rank,
    0.900 ms in, 0.120 ms long. Collective 0: every rank of that step, 0.050 ms + 1 us * rank in,
    0.300 ms - 1 us * rank long, straggler = highest rank, skew = 1 us * (ranks - 1)."""
    doc = copy.deepcopy(doc)
    steps = doc["steps"]
    first = sorted(steps, key=lambda s: (s["step"], s["rank"]))[0]
    ranks = sorted({s["rank"] for s in steps if s["step"] == first["step"]})
    window = {s["rank"]: s for s in steps if s["step"] == first["step"]}
    doc["critical_path"] = [{"rank": s["rank"], "step": s["step"],
                             "composition": {"compute": s["compute_ns"], "exposed_comm": s["exposed_comm_ns"],
                                             "idle": s["idle_ns"]}} for s in steps]
    doc["stalls"] = [
        {"rank": first["rank"], "step": first["step"], "layer": 1, "phase": "forward", "stage": stall_stage,
         "cause": "all_to_all wait", "start_ns": first["start_ns"] + 100_000, "dur_ns": 250_000,
         "evidence": stall_evidence or "waited for rank 3"},
        {"rank": first["rank"], "step": first["step"], "layer": None, "phase": "optimizer", "stage": "other",
         "cause": "host sync", "start_ns": first["start_ns"] + 900_000, "dur_ns": 120_000,
         "evidence": {"op": "cudaStreamSynchronize"}},
    ]
    doc["collectives"] = [{"kind": "all_to_all", "group": "ep", "index": 0,
                           "start_ns": {str(r): window[r]["start_ns"] + 50_000 + 1_000 * r for r in ranks},
                           "dur_ns": {str(r): 300_000 - 1_000 * r for r in ranks},
                           "straggler": ranks[-1], "skew_ns": 1_000 * (len(ranks) - 1)}]
    doc["stragglers"] = [{"rank": ranks[-1], "collectives": 1, "skew_ns": 1_000 * (len(ranks) - 1)}]
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
