"""Load a run's files and assemble its document: the one place where `analyze`, `diff` and the
API open inputs (traces, the --config rules, the --budget file). Everything below this module
works on loaded profiles, sessions and documents, never on paths."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .document.options import AnalyzeOptions, DiffOptions, check_options

if TYPE_CHECKING:        # the analysis is imported when a run starts (a mapped job: while its workers parse)
    from pathlib import Path

    from .diff.decompose import Side
    from .document.types import DiffDocument, ReportDocument
    from .engine.session import Session
    from .profile import Profile

__all__ = ["AnalyzeOptions", "DiffOptions", "run_job", "run_analyze", "load_side", "run_diff"]


# What a mapped job's analysis imports in this process, before its parse (the workers, forked with
# what they run imported (executors.start_pool), parse meanwhile once the options are checked).
ANALYSIS_MODULES = ("traceview.load", "traceview.mapped", "traceview.store", "traceview.progress",
                    "traceview.document.assemble", "traceview.analysis.stalls",
                    "traceview.analysis.critical_path", "traceview.plain_data")


def _settle() -> None:
    """The command line's objects so far (its modules, typer's, the analysis's imports) moved out
    of the garbage collector's sight (gc.freeze): a full collection would walk them all again,
    0.05-0.2 s each time, for nothing (they live as long as the process). Only in the command
    line's own process: a library user's objects are left alone."""
    from . import cli_common
    if cli_common.IN_CLI:
        import gc
        gc.freeze()


def collect_again() -> None:
    """The garbage collector, which the command line turns off while it starts (launch.main), on
    again before the parse, with what the start made frozen (`_settle`): the imports and the
    session's set-up made no cycles worth a pass. A no-op where it is on (a library user's process)."""
    import gc
    if not gc.isenabled():
        _settle()
        gc.enable()


def _cli_process() -> None:
    """The command line's own process, before it parses: a python-dateutil that is not installed
    is marked absent (parsers/no_dateutil.py), as in the pool's workers. Not in a library
    user's process (its sys.modules is left alone)."""
    from . import cli_common
    if cli_common.IN_CLI:
        from .parsers.no_dateutil import no_dateutil_search
        no_dateutil_search()


def run_job(paths: list[str], opts: AnalyzeOptions, keep_tables: bool = True) -> tuple[ReportDocument, Session]:
    """The document and the DuckDB session it was computed in (its tables stay queryable unless
    `keep_tables` is False: see assemble)."""
    _settle()
    _cli_process()
    from .errors import TraceError
    from .trace_files import expand
    try:
        files, bad = expand([*paths]), None
    except TraceError as e:          # said after the options are checked, as before any work
        files, bad = [], e
    mapped_job = bad is None and _mappable(files)
    started = None
    if mapped_job:
        # the workers start now, forked before this process starts threads, and parse while it
        # checks the options (a trace that cannot be read is said after them, as before)
        from .executors import start_pool
        from .mapped import open_spare, start_job
        start_pool(len(files), open_spare)
        started = start_job(files, opts.nsys)
    forked = _prestart(files[0]) if not mapped_job and bad is None and len(files) == 1 else False
    try:
        if not mapped_job:
            _begin_database(files[0] if forked else None)
        from .engine.session import Session
        session = Session()   # its connection checks the patterns before the work
        if not mapped_job:
            # the job is analyzed in this process: the steps that may use every core use --jobs of them
            # (a mapped job's workers have the cores busy; its sessions keep one thread)
            from .executors import own_threads
            session.step_threads = own_threads()
        check_options(opts, session.con)
        from .budget import load as load_budget
        from .config import load_rules
        rules = load_rules(opts.config, session.con)
        budget = load_budget(opts.budget) if opts.budget is not None else None   # a bad file fails before the work
        if bad is not None:
            raise bad
        if mapped_job:
            import importlib
            for m in ANALYSIS_MODULES:
                importlib.import_module(m)
        early = None
        if mapped_job:       # the step rule's candidates: the workers try them while they place the ranks
            from .analysis.breakdown import step_regexes
            early = {"step_regexes": step_regexes(opts.step_regex, opts.whole_trace)}
        collect_again()
        profile = _load(paths, files, opts.nsys, mapped_job, started, early)
    finally:
        from .load import end_prestarted
        end_prestarted()
    from .document.assemble import assemble
    _settle()
    session.attach(profile)
    return assemble(profile, opts, session, rules, budget, keep_tables=keep_tables), session


def _begin_database(primed: Path | None = None) -> None:
    """The job analyzed in this process: its DuckDB database made on a thread (duck.begin) while
    the analysis's modules are imported here (imported after the load otherwise); the session's
    connection takes it. After `_prestart`, which forks only while no other thread runs."""
    from . import cli_common
    if cli_common.IN_CLI:
        from . import lean_imports
        lean_imports.duckdb()
    from . import duck
    duck.begin()
    if primed is not None:      # the helper forked for it: its first batches cut while the database is made
        from .load import prime_prestarted
        prime_prestarted(primed)
    import importlib
    for m in ("traceview.document.assemble", "traceview.flops.mfu"):
        importlib.import_module(m)


def _prestart(path) -> bool:
    """A single Kineto trace analyzed by the command line: its parser's helper process is forked
    now, before the DuckDB connection starts threads (parsers/kineto_helper.prestart); not in a
    library user's process, which keeps the helper the parser starts itself."""
    from . import cli_common
    if not cli_common.IN_CLI:
        return False
    from .executors import current, stored
    state = current()
    if state is not None and state.settings.store is not None and stored(path, state.settings.store):
        return False     # read from the store: nothing to parse
    from .load import prestart_parse
    return prestart_parse(path)


def _mappable(files) -> bool:
    """Whether the job runs mapped (mapped.eligible: on the run's workers, or in this process where
    it is more than one batch of ranks); a single file never is (nor imports the mapped job)."""
    if len(files) < 2:
        return False
    from .mapped import eligible
    return eligible(files)


def _load(paths: list[str], files, nsys_bin: str | None, mapped_job: bool, started=None,
          early: dict | None = None) -> Profile:
    """The job: its per-rank work on the workers when the run has several (mapped.py), else loaded
    here. `early`: the parameters of the per-rank steps the workers build while placing (mapped.EARLY_STEPS)."""
    if mapped_job:
        from . import mapped
        prof = mapped.load_job(files, nsys_bin, started, early)
        if prof is not None:
            return prof
    from .load import load
    return load([*paths], nsys_bin=nsys_bin)


def run_analyze(paths: list[str], opts: AnalyzeOptions) -> ReportDocument:
    return run_job(paths, opts, keep_tables=False)[0]   # the session goes with the call


def load_side(label: str, paths: list[str], opts: DiffOptions) -> Side:
    """One side of a diff: load and analyze one run (any input `analyze` accepts), keeping the
    session for the per-family decomposition."""
    from .diff.decompose import build_side
    doc, session = run_job(paths, opts)
    return build_side(label, paths, doc, session)


def run_diff(base_paths: list[str], new_paths: list[str], opts: DiffOptions | None = None) -> DiffDocument:
    from .diff.document import diff_sides
    opts = opts or DiffOptions()
    return diff_sides(load_side("base", base_paths, opts), load_side("new", new_paths, opts), opts)
