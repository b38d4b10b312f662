"""The `analyze` pipeline: load -> SQL breakdown -> optional sections -> one report document."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..budget import evaluate as evaluate_budget, load as load_budget
from ..config import load_rules
from ..db import Session
from ..load import load
from . import breakdown
from .analyze import analyze


@dataclass
class AnalyzeOptions:
    step_regex: str | None = None
    comm_regex: list[str] = field(default_factory=list)
    config: Path | None = None
    top: int = 10
    model: str | None = None
    model_config: Path | None = None
    tokens_per_step: int | None = None
    peak_tflops: float | None = None
    dtype: str | None = None
    budget: Path | None = None
    nsys: str | None = None
    whole_trace: bool = False


def run_analyze(paths: list[str], opts: AnalyzeOptions) -> dict:
    rules = load_rules(opts.config)
    budget = load_budget(opts.budget) if opts.budget is not None else None   # a bad file fails before the work
    profile = load(paths, nsys_bin=opts.nsys)
    session = Session(profile)
    bopts = breakdown.Options(step_regex=opts.step_regex, comm_regex=opts.comm_regex + rules.comm_regex,
                              top=opts.top, whole_trace=opts.whole_trace)
    fopts = dict(model=opts.model, model_config=opts.model_config, tokens_per_step=opts.tokens_per_step,
                 peak_tflops=opts.peak_tflops, dtype=opts.dtype)
    doc = analyze(profile, bopts, session, rules, fopts)
    if budget is not None:
        doc["budget"] = evaluate_budget(doc, budget)
    return doc
