"""The `analyze` pipeline: load -> SQL breakdown -> optional sections -> one report document."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..budget import evaluate as evaluate_budget, load as load_budget
from ..config import check_pattern_options, load_rules
from ..errors import UsageError
from ..engine.session import Session
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


def check_options(opts: AnalyzeOptions, con=None) -> None:
    """Usage errors in the options, before any work."""
    if opts.top < 0:
        raise UsageError(None, "--top must be 0 or more")
    if opts.tokens_per_step is not None and opts.tokens_per_step <= 0:
        raise UsageError(None, "--tokens-per-step must be positive")
    if opts.peak_tflops is not None and not opts.peak_tflops > 0:
        raise UsageError(None, "--peak-tflops must be positive")
    check_pattern_options(opts.step_regex, opts.comm_regex, con)


def run_analyze(paths: list[str], opts: AnalyzeOptions) -> dict:
    return run_job(paths, opts)[0]


def run_job(paths: list[str], opts: AnalyzeOptions) -> tuple[dict, Session]:
    """The document and the DuckDB session it was computed in (its tables stay queryable)."""
    session = Session()   # its connection checks the patterns before the work
    check_options(opts, session.con)
    rules = load_rules(opts.config, session.con)
    budget = load_budget(opts.budget) if opts.budget is not None else None   # a bad file fails before the work
    profile = load(paths, nsys_bin=opts.nsys)
    session.attach(profile)
    bopts = breakdown.Options(step_regex=opts.step_regex, comm_regex=opts.comm_regex + rules.comm_regex,
                              top=opts.top, whole_trace=opts.whole_trace)
    fopts = dict(model=opts.model, model_config=opts.model_config, tokens_per_step=opts.tokens_per_step,
                 peak_tflops=opts.peak_tflops, dtype=opts.dtype)
    doc = analyze(profile, bopts, session, rules, fopts)
    if budget is not None:
        doc["budget"] = evaluate_budget(doc, budget)
    return doc, session
