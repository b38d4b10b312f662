"""`traceview analyze`: its work (`analyze_main`, which the typer command of cli.py calls), and its
command line read without typer where that is plain (`parse`, `run_plain`).

Importing typer and building the command line costs about 0.08 s of CPU in every run (typer,
its vendored click, inspect and ast), paid before a mapped job's workers can fork. launch.main
first hands `traceview analyze ...` to `parse`, which reads it as typer would only where that is
plain: every token a known option of analyze (OPTIONS, held equal to typer's parameters by
tests/test_analyze_cli.py), a value after each option that takes one (or after `=`), each option
at most once (--comm-regex: any number of times), the trace paths, and every value one
cli_values.plain converts (a path that exists: readable, as typer checks). Anything else (--help,
--version, an unknown or repeated option, `--`, `-`, a missing value or path, a value that
starts with `-`, text that is not valid Unicode, " 12", "1e3", a shell-completion request) returns
None and the command runs through typer, which says what is wrong in its own words.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, List, Optional, cast

from . import run_options
from .cli_common import FORMATS, check_out, check_out_dir, exits, fail, guarded, inside, write_output
from .cli_values import UNSURE, plain

# analyze's parameters as typer builds them from cli.analyze: (name, option strings, type, default);
# type bool: a flag; List[str]: an option given any number of times
OPTIONS: tuple[tuple[str, tuple[str, ...], Any, Any], ...] = (
    ("fmt", ("--format", "-f"), str, "text"),
    ("out", ("-o", "--output"), Path, None),
    ("out_dir", ("--out-dir",), Path, None),
    ("step_regex", ("--step-regex",), str, None),
    ("whole_trace", ("--whole-trace",), bool, False),
    ("comm_regex", ("--comm-regex",), List[str], []),
    ("config", ("--config",), Path, None),
    ("top", ("--top",), int, 10),
    ("per_rank_rows", ("--per-rank-rows",), int, None),
    ("model", ("--model",), str, None),
    ("model_config", ("--model-config",), Path, None),
    ("tokens_per_step", ("--tokens-per-step",), int, None),
    ("peak_tflops", ("--peak-tflops",), float, None),
    ("dtype", ("--dtype",), str, None),
    ("budget", ("--budget",), Path, None),
    ("nsys", ("--nsys",), str, None),
    ("max_input_size", ("--max-input-size",), str, None),
    ("store", ("--store",), Path, None),
    ("no_store", ("--no-store",), bool, False),
    ("jobs", ("--jobs", "-j"), int, None),
    ("dask", ("--dask",), str, None),
    ("dask_scheduler_file", ("--dask-scheduler-file",), Path, None),
    ("skip_bad_ranks", ("--skip-bad-ranks",), bool, False),
    ("progress", ("--progress",), bool, False),
    ("debug", ("--debug",), bool, False),
)
_BY_FLAG = {flag: (name, kind, default) for name, flags, kind, default in OPTIONS for flag in flags}


def _path(text: str) -> Any:
    """A path as typer gives it (Path(text)), or UNSURE where typer's checks could refuse it."""
    p = plain(Path, text)
    if p is UNSURE:
        return UNSURE
    try:
        os.stat(p)
    except (OSError, ValueError):
        return p
    return p if os.access(p, os.R_OK) else UNSURE


def _value(kind: Any, text: str) -> Any:
    return _path(text) if kind is Path else plain(kind, text)


def parse(args: list[str]) -> dict[str, Any] | None:
    """analyze's keyword arguments from the tokens after `analyze`, as typer would give them, or
    None (typer decides)."""
    if any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return None                    # a shell-completion request: click's
    got: dict[str, Any] = {}
    paths: list[Path] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-"):
            p = _path(tok)
            if p is UNSURE:
                return None
            paths.append(p)
            continue
        flag, eq, attached = tok.partition("=")
        spec = _BY_FLAG.get(flag)
        if spec is None or (eq and not flag.startswith("--")):
            return None
        name, kind, _ = spec
        if name in got and kind is not List[str]:
            return None
        if kind is bool:
            if eq:
                return None
            got[name] = True
            continue
        if not eq:
            if i >= len(args):
                return None
            attached = args[i]
            i += 1
        if attached.startswith("-"):
            return None
        if kind is List[str]:
            v = plain(str, attached)
            if v is UNSURE:
                return None
            got.setdefault(name, []).append(v)
            continue
        v = _value(kind, attached)
        if v is UNSURE:
            return None
        got[name] = v
    if not paths:
        return None
    params: dict[str, Any] = {"paths": paths}
    for name, _flags, _kind, default in OPTIONS:
        params[name] = got.get(name, list(default) if isinstance(default, list) else default)
    return params


def run_plain(argv: list[str]) -> int | None:
    """Run `traceview analyze ...` (argv: the command's arguments) without typer when `parse` reads
    it, as cli.run_cli would; None: it needs typer."""
    if not argv or argv[0] != "analyze":
        return None
    params = parse(argv[1:])
    if params is None:
        return None
    try:
        return analyze_main(**params)
    except exits() as e:
        return cast(Any, e).exit_code
    except KeyboardInterrupt:
        sys.stderr.write("traceview: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1


def analyze_main(paths: List[Path], fmt: str, out: Optional[Path], out_dir: Optional[Path],
                 step_regex: Optional[str], whole_trace: bool, comm_regex: List[str], config: Optional[Path],
                 top: int, per_rank_rows: Optional[int], model: Optional[str], model_config: Optional[Path],
                 tokens_per_step: Optional[int], peak_tflops: Optional[float], dtype: Optional[str],
                 budget: Optional[Path], nsys: Optional[str], max_input_size: Optional[str], store: Optional[Path],
                 no_store: bool, jobs: Optional[int], dask: Optional[str], dask_scheduler_file: Optional[Path],
                 skip_bad_ranks: bool, progress: bool, debug: bool) -> int:
    """The command's work; its exit status (1: a budget violated). Input problems: one line, `fail`."""
    if fmt not in FORMATS:
        fail(f"unknown --format {fmt!r} (choose from {', '.join(FORMATS)})")
    staged = inside(out, out_dir) if out is not None and out_dir is not None else None

    def run():
        from .options import MAX_COUNT, MAX_TOKENS, count, finite
        count(top, "--top", 0, MAX_COUNT, "--top must be 0 or more")
        count(per_rank_rows, "--per-rank-rows", 0, MAX_COUNT, "--per-rank-rows must be 0 or more")
        count(tokens_per_step, "--tokens-per-step", 1, MAX_TOKENS, "--tokens-per-step must be positive")
        finite(peak_tflops, "--peak-tflops", positive=True)
        from .parsers import bounded_read
        bounded_read.apply_option(max_input_size)
        if out_dir is not None:
            check_out_dir(out_dir, (staged,) if staged else ())
        if staged is None:
            check_out(out)
        fields: dict[str, Any] = dict(step_regex=step_regex, comm_regex=list(comm_regex), config=config, top=top,
                      model=model, model_config=model_config, tokens_per_step=tokens_per_step,
                      peak_tflops=peak_tflops, dtype=dtype, budget=budget, nsys=nsys, whole_trace=whole_trace)

        def compute(inputs: list[str]) -> Any:   # the analysis engine is imported only when it runs
            from .document.options import AnalyzeOptions
            from .runs import run_analyze
            return run_analyze(inputs, AnalyzeOptions(**fields))
        from .executors import configured
        rs = run_options.settings(paths, store, no_store, jobs, dask, dask_scheduler_file, skip_bad_ranks, progress)
        from . import replay
        named = [str(v) for v in fields.values() if isinstance(v, Path)]
        replayable = replay.INVOCATION is not None and rs.store is not None and out_dir is None \
            and per_rank_rows is None
        before = replay.snapshot([str(p) for p in paths], named) if replayable else None
        # the report is written while the run's workers are there: a mapped job's long lists are
        # written out as the workers' tasks give them (mapped.start_list_bodies)
        with configured(rs) as state:
            from .job_cache import open_job  # the store may keep this job's document and report
            job = open_job([str(p) for p in paths], fields, compute,
                           fmt if out_dir is None and per_rank_rows is None else None)
            # the garbage collector, off while the command starts (launch.main), on for the output
            # (a job the store kept ran nothing that turned it on: runs.collect_again)
            import gc
            gc.enable()
            if state.skipped:
                job.document["skipped_ranks"] = state.skipped
            text = job.output(fmt, per_rank_rows)
            if out_dir is not None:
                from .output import write_tree
                from .reports import bundle_files
                files: list[tuple[str, Any]] = list(bundle_files(cast(Any, job.document), per_rank_rows))
                if staged:                  # -o inside the bundle: written with it, all or nothing
                    files = [f for f in files if f[0] != staged] + [(staged, text)]
                write_tree(files, out_dir)
            coloured = False
            if fmt == "text" and out is None:
                from .reports.tty import colorize, want_color
                if want_color(sys.stdout) and isinstance(text, str):
                    text, coloured = colorize(text), True
            if staged is None and (out_dir is None or out is not None or fmt == "text"):
                write_output(text, out)
        violated = job.budget_violated
        kept = job.kept
        if before is not None and rs.store is not None and kept is not None and not coloured and not state.skipped:
            # the next run of this very command writes the kept report before parsing its arguments
            replay.record(rs.store, before, [str(p) for p in paths], named, kept,
                          None if out is None else str(out), 1 if violated else 0)
        return violated

    return 1 if guarded(debug, run) else 0
