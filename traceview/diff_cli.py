"""`traceview diff BASE NEW`: explain the change in step time between two runs.

BASE and NEW are each one path: a trace file (Kineto .json/.json.gz, nsys .sqlite/.nsys-rep) or a
directory holding the ranks of one job (every trace file in it). The two sides may differ in
format. A side made of several files that are not alone in a directory: repeat `--base-also FILE`
/ `--new-also FILE` to add files to that side.

Exit codes: 0 (done; or not slower than --fail-if-slower / --fail-if-gpu-slower allow), 1
(--fail-if-slower PCT: the step time grew by more than PCT % and the change is outside the noise;
--fail-if-gpu-slower PCT: the GPU work of the step grew by more than PCT % and outside the noise,
whether the step time showed it or idle time absorbed it), 2 (input or usage error:
one line on stderr, nothing written), 3 (internal error).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from . import run_options
from .cli_common import MAX_INPUT_HELP, check_out, fail, guarded, write_output

if TYPE_CHECKING:  # annotations only (typing_extensions and the TypedDicts stay unloaded for --help)
    from .document.types import DiffDocument

DIFF_FORMATS = ("text", "json", "markdown", "html")


def render_diff(doc: DiffDocument, fmt: str) -> str:
    from .reports import render_diff as render_any
    return render_any(doc, fmt)


def slower_than(doc: DiffDocument, pct: float | None) -> bool:
    """True when --fail-if-slower PCT should fail: a regression (outside the noise) > PCT %."""
    if pct is None:
        return False
    d = doc["delta"]
    return doc["verdict"] == "regression" and d["step_time_pct"] is not None and d["step_time_pct"] > pct


def gpu_slower_than(doc: DiffDocument, pct: float | None) -> bool:
    """True when --fail-if-gpu-slower PCT should fail: GPU work (step time less idle) grew by more
    than PCT % and by more than the noise threshold, latent or not."""
    if pct is None:
        return False
    w = doc["delta"]["gpu_work"]
    return bool(w["outside_noise"]) and w["pct"] is not None and w["pct"] > pct


def diff_command(
    base: Path = typer.Argument(..., help="the earlier run: a trace file or a directory of ranks"),
    new: Path = typer.Argument(..., help="the later run: a trace file or a directory of ranks"),
    fmt: str = typer.Option("text", "--format", "-f", help="text, json, markdown or html"),
    out: Optional[Path] = typer.Option(None, "-o", "--output", help="write to FILE"),
    fail_if_slower: Optional[float] = typer.Option(None, "--fail-if-slower", metavar="PCT",
                                                   help="exit 1 when the step time grew by more than PCT % "
                                                        "and the change is outside the noise"),
    fail_if_gpu_slower: Optional[float] = typer.Option(None, "--fail-if-gpu-slower", metavar="PCT",
                                                       help="exit 1 when the GPU work of the step (compute + "
                                                            "exposed comm + exposed memory) grew by more than "
                                                            "PCT % and outside the noise, even when idle time "
                                                            "hid it from the step time (a latent regression)"),
    step_regex: Optional[str] = typer.Option(None, "--step-regex", help="regex naming step ranges (both sides)"),
    whole_trace: bool = typer.Option(False, "--whole-trace", help="one window per rank over all GPU activity"),
    comm_regex: List[str] = typer.Option([], "--comm-regex", help="extra regex for communication kernels/ops"),
    config: Optional[Path] = typer.Option(None, "--config", help="traceview.toml with attribution patterns"),
    top: int = typer.Option(8, "--top", help="explanation items before the remainder line"),
    noise_floor: float = typer.Option(0.5, "--noise-floor", metavar="PCT",
                                      help="changes below PCT % of the base step time are noise "
                                           "(besides the per-step spread of either side)"),
    base_also: List[Path] = typer.Option([], "--base-also", help="another file of the base run"),
    new_also: List[Path] = typer.Option([], "--new-also", help="another file of the new run"),
    nsys: Optional[str] = typer.Option(None, "--nsys", help="path of the nsys binary for .nsys-rep"),
    max_input_size: Optional[str] = typer.Option(None, "--max-input-size", metavar="SIZE", help=MAX_INPUT_HELP),
    store: Optional[Path] = typer.Option(None, "--store", metavar="DIR", help=run_options.STORE_HELP),
    no_store: bool = typer.Option(False, "--no-store", help=run_options.NO_STORE_HELP),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help=run_options.JOBS_HELP),
    dask: Optional[str] = typer.Option(None, "--dask", metavar="ADDRESS", help=run_options.DASK_HELP),
    dask_scheduler_file: Optional[Path] = typer.Option(None, "--dask-scheduler-file", metavar="FILE",
                                                       help=run_options.DASK_FILE_HELP),
    progress: bool = typer.Option(False, "--progress", help=run_options.PROGRESS_HELP),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks"),
):
    """Explain a change in step time between two runs: ranked causes that add up to it."""
    if fmt not in DIFF_FORMATS:
        fail(f"unknown --format {fmt!r} (choose from {', '.join(DIFF_FORMATS)})")

    def run():
        from .options import MAX_COUNT, count, finite
        count(top, "--top", 1, MAX_COUNT)
        finite(noise_floor, "--noise-floor", at_least=0)
        finite(fail_if_slower, "--fail-if-slower")
        finite(fail_if_gpu_slower, "--fail-if-gpu-slower", at_least=0)
        check_out(out)
        from .config import check_pattern_options
        from .parsers import bounded_read
        bounded_read.apply_option(max_input_size)
        from .document.options import DiffOptions
        from .runs import run_diff
        check_pattern_options(step_regex, comm_regex)
        opts = DiffOptions(step_regex=step_regex, comm_regex=list(comm_regex), config=config, nsys=nsys,
                           whole_trace=whole_trace, top=top, noise_floor_pct=noise_floor)
        from .executors import configured
        rs = run_options.settings([base, new], store, no_store, jobs, dask, dask_scheduler_file, False, progress)
        with configured(rs):
            doc = run_diff([str(base)] + [str(p) for p in base_also], [str(new)] + [str(p) for p in new_also], opts)
        write_output(render_diff(doc, fmt), out)
        return doc

    doc = guarded(debug, run)
    if slower_than(doc, fail_if_slower) or gpu_slower_than(doc, fail_if_gpu_slower):
        raise typer.Exit(1)
