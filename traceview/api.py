"""The Python API: `traceview.open(paths, **options)` -> a `Job` with the analyses as polars DataFrames.

A Job runs exactly the command line's pipeline (`traceview.runs.run_job`, the code
behind `traceview analyze`) once, keeps the report document and the DuckDB session it was computed
in, and serves views of them: `report()` is what `analyze -f json` prints, the DataFrames are its
sections row for row, `sql()` queries the canonical tables (and the analysis tables) of that same
session. Input problems raise `traceview.TraceError` with the message the command line prints.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union, cast

from .document.types import ReportDocument
from .errors import TraceError, UsageError

PathLike = Union[str, Path]

_ALL_KERNELS = 2 ** 62   # top_kernels' LIMIT when every kernel name is wanted


def _paths(paths: PathLike | Iterable[PathLike]) -> list[str]:
    if isinstance(paths, (str, Path)):
        return [str(paths)]
    out = [str(p) for p in paths]
    if not out:
        raise UsageError(None, "no trace paths given")
    return out


def _frame(rows: Sequence[Mapping[str, Any]]):
    import polars as pl
    if not rows:
        return pl.DataFrame()
    return pl.DataFrame(rows, infer_schema_length=None)


class Job:
    """One analyzed job (all ranks of one run). Build it with `traceview.open(...)`."""

    def __init__(self, paths: list[str], options, doc: ReportDocument, session):
        self.paths = paths
        self.options = options
        self._doc = doc
        self._session = session
        self._json: str | None = None

    def __repr__(self) -> str:
        s = self._doc["summary"]
        return (f"<traceview.Job {len(self._doc['inputs'])} file(s), {s['ranks']} rank(s), {s['steps']} step(s), "
                f"median step {s['step_time_ns'] / 1e6:.3f} ms>")

    def close(self) -> None:
        """Close the DuckDB session (the document and the DataFrames of it stay usable)."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def session(self):
        """The DuckDB session (traceview.engine.session.Session) the analysis ran in."""
        if self._session is None:
            raise UsageError(None, "this traceview.Job is closed: its SQL session is gone")
        return self._session

    # --- the document -------------------------------------------------------------------------
    def _json_text(self) -> str:
        if self._json is None:
            from .reports import json_report
            self._json = json_report.render(self._doc)
        return self._json

    def report(self) -> dict:
        """The report document: exactly what `traceview analyze -f json` writes (a fresh copy)."""
        return json.loads(self._json_text())

    def render(self, fmt: str = "text") -> str:
        """The report as `analyze --format FMT` writes it: text, markdown, html or json."""
        from .cli_common import FORMATS
        if fmt not in FORMATS:
            raise UsageError(None, f"unknown --format {fmt!r} (choose from {', '.join(FORMATS)})")
        if fmt == "json":
            return self._json_text()
        from .reports import render
        return render(self._doc, fmt)

    @property
    def summary(self) -> dict:
        """Medians over steps and ranks (the report's `summary`)."""
        return self.report()["summary"]

    @property
    def warnings(self) -> list[str]:
        return list(self._doc.get("warnings", []))

    # --- the sections as DataFrames -------------------------------------------------------------
    def _section(self, key: str):
        rows = cast(Mapping[str, Any], self._doc).get(key) or []   # a list section, by its name
        return _frame(rows)   # polars copies: the document stays as it was

    @property
    def steps(self):
        """One row per (rank, step): the window and its compute / exposed comm / overlapped comm /
        exposed memory / idle parts in ns (the report's `steps`)."""
        return self._section("steps")

    @property
    def per_rank(self):
        return self._section("per_rank")

    @property
    def layers(self):
        """One row per (rank, step, layer, phase, stage, region) (the report's `layers`)."""
        return self._section("layers")

    @property
    def stages(self):
        return self._section("stages")

    @property
    def comm(self):
        """Communication per collective kind: count, bytes, total and exposed ns (the report's `comm`)."""
        return self._section("comm")

    @property
    def collectives(self):
        """Each collective matched across ranks: arrivals per rank, skew, straggler (`collectives`)."""
        return self._section("collectives")

    @property
    def stragglers(self):
        return self._section("stragglers")

    @property
    def critical_path(self):
        """Per (rank, step): the critical path's composition (the report's `critical_path`)."""
        return self._section("critical_path")

    @property
    def stalls(self):
        """Every stall on the critical paths with its cause, layer/phase/stage and evidence."""
        return self._section("stalls")

    @property
    def a2a(self):
        return self._section("a2a")

    @property
    def kernels(self):
        """Every kernel/memcpy/memset name inside the step windows with its class, kind, count and
        total ns, longest first: the report's `top_kernels` query without its --top limit."""
        from .analysis.breakdown import top_kernels
        return _frame(top_kernels(self.session, _ALL_KERNELS))

    @property
    def flops(self):
        """Achieved FLOPs per (layer, phase, stage) per step (the report's `flops.by_group`); the
        job-level figures (delivered TFLOP/s, peak, MFU) are `report()["flops"]`."""
        return _frame((self._doc.get("flops") or {}).get("by_group") or [])

    @property
    def flops_summary(self) -> dict:
        """The job-level FLOPs figures (method, FLOPs per step, delivered TFLOP/s, peak, MFU, ...):
        the report's `flops` section without its per-group rows."""
        return {k: v for k, v in (self.report().get("flops") or {}).items() if k != "by_group"}

    # --- queries and comparisons ----------------------------------------------------------------
    def sql(self, query: str, **params):
        """Run DuckDB SQL over this job's tables and return a polars DataFrame. The canonical tables
        (gpu_activities, cpu_ranges, launches, syncs, meta; docs/TABLES.md) and the analysis tables
        (activity_class, activity_attribution, windows, segments, ...) are there. Pass values as
        named parameters (`$name` in the SQL, `name=value` here), never by formatting them in."""
        import duckdb
        import polars as pl
        try:
            return pl.from_arrow(self.session.sql(query, **params))
        except duckdb.Error as e:
            raise UsageError(None, f"sql: {str(e).splitlines()[0]}") from e

    def export_perfetto(self, out: PathLike) -> Path:
        """Write the Perfetto file of `traceview export --perfetto OUT` (gzip when OUT ends in .gz)."""
        from .export_perfetto import write
        write(cast(dict, self._doc), self.session, out)
        return Path(out)

    def diff(self, other: Job, *, top: int = 8, noise_floor_pct: float = 0.5) -> dict:
        """The diff document of `traceview diff` with this job as the base and `other` as the new run."""
        if not isinstance(other, Job):
            raise UsageError(None, "diff: other must be a traceview.Job (from traceview.open)")
        if top < 1:
            raise UsageError(None, "--top must be at least 1")
        if noise_floor_pct < 0:
            raise UsageError(None, "--noise-floor must not be negative")
        from .diff.decompose import build_side
        from .diff.document import diff_sides
        from .document.options import DiffOptions
        from .reports import render_diff
        opts = DiffOptions(top=top, noise_floor_pct=noise_floor_pct)
        base = build_side("base", self.paths, self._doc, self.session)
        new = build_side("new", other.paths, other._doc, other.session)
        return json.loads(render_diff(diff_sides(base, new, opts), "json"))


def open(paths: PathLike | Iterable[PathLike], *, step_regex: str | None = None,  # noqa: A001 - the API's name
         comm_regex: Iterable[str] = (), config: PathLike | None = None, top: int = 10,
         model: str | None = None, model_config: PathLike | None = None, tokens_per_step: int | None = None,
         peak_tflops: float | None = None, dtype: str | None = None, budget: PathLike | None = None,
         nsys: str | None = None, whole_trace: bool = False) -> Job:
    """Load and analyze one job, as `traceview analyze PATHS [options]` does.

    paths: a trace file, a directory of a job's ranks, or a list of them. The keyword options are
    those of `analyze` (`--step-regex` is `step_regex=`, `--comm-regex` a list `comm_regex=`, ...).
    Raises TraceError (one-line message, as the command line prints it) for bad input or options.
    """
    from .document.options import AnalyzeOptions
    from .runs import run_job
    if isinstance(comm_regex, str):
        comm_regex = [comm_regex]
    opts = AnalyzeOptions(step_regex=step_regex, comm_regex=list(comm_regex),
                          config=Path(config) if config is not None else None, top=top, model=model,
                          model_config=Path(model_config) if model_config is not None else None,
                          tokens_per_step=tokens_per_step, peak_tflops=peak_tflops, dtype=dtype,
                          budget=Path(budget) if budget is not None else None, nsys=nsys, whole_trace=whole_trace)
    files = _paths(paths)
    doc, session = run_job(files, opts)
    from .document.packed import plain
    return Job(files, opts, plain(doc), session)      # a user's document holds lists


__all__ = ["open", "Job", "TraceError"]
