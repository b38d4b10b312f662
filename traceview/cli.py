"""Command line: `traceview analyze`, `traceview diff`, `traceview mfu`, `traceview export`, `traceview history`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from . import cli_common, run_options
from .analyze_cli import analyze_main
from .cli_common import (  # noqa: F401
    EXIT_INPUT,
    FORMATS,
    MAX_INPUT_HELP,
    check_out,
    check_out_dir,
    fail,
    guarded,
    inside,
    skip_pyarrow_pandas_probe as _skip_pyarrow_pandas_probe,
    write_output,
)
from .cli_params import Command, Group

app = typer.Typer(cls=Group, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Performance-trace analysis for MoE training (Kineto JSON, Nsight Systems).")



def _version(value: bool) -> None:
    if value:
        from . import __version__
        typer.echo(f"traceview {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """traceview: where the GPU time of MoE training went, from a trace."""


def _preset_names() -> list[str]:
    from .flops.models import PRESETS
    return list(PRESETS)


def render(doc: Any, fmt: str, per_rank_rows: Optional[int] = None) -> str:
    from .reports import render as render_any
    return render_any(doc, fmt, per_rank_rows)


@app.command(cls=Command)
def analyze(
    paths: List[Path] = typer.Argument(..., help="Trace files (Kineto .json/.json.gz, nsys .sqlite/.nsys-rep) "
                                                 "or a directory: all are ranks of one job."),
    fmt: str = typer.Option("text", "--format", "-f", help="text, json, markdown or html"),
    out: Optional[Path] = typer.Option(None, "-o", "--output", help="write the report to FILE"),
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="write report.json/.md/.html and charts here"),
    step_regex: Optional[str] = typer.Option(None, "--step-regex", help="regex naming step ranges "
                                             "(first group = step number); "
                                             "default ProfilerStep#N, step_N, iteration N"),
    whole_trace: bool = typer.Option(False, "--whole-trace", help="one window per rank over all GPU activity"),
    comm_regex: List[str] = typer.Option([], "--comm-regex", help="extra regex for communication kernels/ops"),
    config: Optional[Path] = typer.Option(None, "--config", help="traceview.toml with attribution patterns"),
    top: int = typer.Option(10, "--top", help="rows in top-N lists"),
    per_rank_rows: Optional[int] = typer.Option(None, "--per-rank-rows", metavar="N",
                                                help="text/markdown/html: list every rank in per-rank tables up "
                                                     "to N ranks (default 16); above, min/median/p99/max with "
                                                     "the ranks farthest from the median"),
    model: Optional[str] = typer.Option(None, "--model", help="model preset for model-based FLOPs: "
                                        + ", ".join(_preset_names())),
    model_config: Optional[Path] = typer.Option(None, "--model-config", help="model config file (TOML/JSON)"),
    tokens_per_step: Optional[int] = typer.Option(None, "--tokens-per-step", help="tokens per step per GPU"),
    peak_tflops: Optional[float] = typer.Option(None, "--peak-tflops", help="peak TFLOP/s per GPU (override)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="data type for the peak (bf16, fp8, ...)"),
    budget: Optional[Path] = typer.Option(None, "--budget", help="budget TOML: exit 1 when violated"),
    nsys: Optional[str] = typer.Option(None, "--nsys", help="path of the nsys binary for .nsys-rep"),
    max_input_size: Optional[str] = typer.Option(None, "--max-input-size", metavar="SIZE", help=MAX_INPUT_HELP),
    store: Optional[Path] = typer.Option(None, "--store", metavar="DIR", help=run_options.STORE_HELP),
    no_store: bool = typer.Option(False, "--no-store", help=run_options.NO_STORE_HELP),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help=run_options.JOBS_HELP),
    dask: Optional[str] = typer.Option(None, "--dask", metavar="ADDRESS", help=run_options.DASK_HELP),
    dask_scheduler_file: Optional[Path] = typer.Option(None, "--dask-scheduler-file", metavar="FILE",
                                                       help=run_options.DASK_FILE_HELP),
    skip_bad_ranks: bool = typer.Option(False, "--skip-bad-ranks", help=run_options.SKIP_HELP),
    progress: bool = typer.Option(False, "--progress", help=run_options.PROGRESS_HELP),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks"),
):
    """Where each step's GPU time went, per rank (and layer, stage, stall, FLOPs)."""
    if analyze_main(**locals()):
        raise typer.Exit(1)


def _register_commands() -> None:
    """Commands that live in their own modules (each imports only what its --help needs; a broken
    import is an error here, never a command that silently vanishes)."""
    from .diff_cli import diff_command
    from .export_cli import export_command
    from .flops.cli import mfu_command
    from .history_cli import history_command
    app.command("mfu", cls=Command)(mfu_command)
    app.command("diff", cls=Command)(diff_command)
    app.command("export", cls=Command)(export_command)
    app.command("history", cls=Command)(history_command)


_register_commands()


def _click_class(name: str):
    """click's exception class `name`, wherever this typer keeps click (vendored or not)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


def usage_error(e) -> int:
    """A command-line parse error as `traceview: <problem>` and one hint line (exit 2)."""
    from .reports.escape import one_line_controls
    ctx = getattr(e, "ctx", None)
    if type(e).__name__ == "NoArgsIsHelpError":        # bare `traceview`: the help, as typer shows it
        sys.stderr.write(e.format_message() + "\n")
        return e.exit_code
    sys.stderr.write(f"traceview: {one_line_controls(e.format_message())}\n")
    if ctx is not None:
        sys.stderr.write(f"Try '{one_line_controls(ctx.command_path)} --help'.\n")
    return e.exit_code


def run_cli(argv: Optional[List[str]] = None) -> int:
    """Run the command line on argv (sys.argv[1:] by default); returns the exit code."""
    click_exception = _click_class("ClickException")
    try:
        rv = app(args=argv, prog_name="traceview", standalone_mode=False)
    except click_exception as e:
        return usage_error(e) if isinstance(e, _click_class("UsageError")) else _other_click_error(e)
    except typer.Abort:
        sys.stderr.write("traceview: aborted\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("traceview: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1
    return rv if isinstance(rv, int) else 0


def _other_click_error(e) -> int:
    from .reports.escape import one_line_controls
    sys.stderr.write(f"traceview: {one_line_controls(e.format_message())}\n")
    return e.exit_code


def main() -> None:
    cli_common.IN_CLI = True
    sys.exit(run_cli())


if __name__ == "__main__":
    main()
