"""Load a run's files and assemble its document: the one place where `analyze`, `diff` and the
API open inputs (traces, the --config rules, the --budget file). Everything below this module
works on loaded profiles, sessions and documents, never on paths."""
from __future__ import annotations

from . import mapped
from .budget import load as load_budget
from .config import load_rules
from .diff.decompose import Side, build_side
from .diff.document import diff_sides
from .document.assemble import assemble
from .document.options import AnalyzeOptions, DiffOptions, check_options
from .document.types import DiffDocument, ReportDocument
from .engine.session import Session
from .load import expand, load
from .profile import Profile

__all__ = ["AnalyzeOptions", "DiffOptions", "run_job", "run_analyze", "load_side", "run_diff"]


def run_job(paths: list[str], opts: AnalyzeOptions) -> tuple[ReportDocument, Session]:
    """The document and the DuckDB session it was computed in (its tables stay queryable)."""
    session = Session()   # its connection checks the patterns before the work
    check_options(opts, session.con)
    rules = load_rules(opts.config, session.con)
    budget = load_budget(opts.budget) if opts.budget is not None else None   # a bad file fails before the work
    profile = _load(paths, opts.nsys)
    session.attach(profile)
    return assemble(profile, opts, session, rules, budget), session


def _load(paths: list[str], nsys_bin: str | None) -> Profile:
    """The job: its per-rank work on the workers when the run has several (mapped.py), else loaded here."""
    files = expand([*paths])
    if mapped.eligible(files):
        prof = mapped.load_job(files, nsys_bin)
        if prof is not None:
            return prof
    return load([*paths], nsys_bin=nsys_bin)


def run_analyze(paths: list[str], opts: AnalyzeOptions) -> ReportDocument:
    return run_job(paths, opts)[0]


def load_side(label: str, paths: list[str], opts: DiffOptions) -> Side:
    """One side of a diff: load and analyze one run (any input `analyze` accepts), keeping the
    session for the per-family decomposition."""
    doc, session = run_job(paths, opts)
    return build_side(label, paths, doc, session)


def run_diff(base_paths: list[str], new_paths: list[str], opts: DiffOptions | None = None) -> DiffDocument:
    opts = opts or DiffOptions()
    return diff_sides(load_side("base", base_paths, opts), load_side("new", new_paths, opts), opts)
