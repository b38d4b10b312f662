"""Command line: `traceview analyze`, `traceview diff`, `traceview mfu`, `traceview export`, `traceview history`."""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import List, Optional

import typer

from .errors import TraceError
from .output import Interrupted

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Performance-trace analysis for MoE training (Kineto JSON, Nsight Systems).")

EXIT_INPUT = 2
_IN_CLI = False          # set by main(): process-wide tweaks (the pandas probe) only for the command line


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


def fail(message: str, code: int = EXIT_INPUT) -> None:
    """One line on stderr: control characters and line breaks from file or trace names escaped."""
    from .reports.escape import one_line_controls
    sys.stderr.write(f"traceview: {one_line_controls(message)}\n")
    sys.stderr.flush()
    raise typer.Exit(code)


def write_output(text: str | bytes, out: Optional[Path]) -> None:
    """Print, or write to `out` all or nothing (traceview/output.py: symlinks are written through,
    FIFOs and devices written to in place)."""
    if out is None:
        sys.stdout.write(text if isinstance(text, str) else text.decode("utf-8"))
        return
    from .output import write_file
    write_file(text, out)


def check_out_dir(out_dir: Path, also: tuple[str, ...] = ()) -> None:
    """Refuse an --out-dir that cannot become a bundle directory before any work is done."""
    from .output import check_dir_target
    check_dir_target(out_dir, also)


def check_out(out: Optional[Path]) -> None:
    """Refuse an -o FILE that cannot be written before any work is done."""
    if out is not None:
        from .output import check_file_target
        check_file_target(out)


def inside(path: Path, directory: Path) -> Optional[str]:
    """`path` relative to `directory` when it lies inside it (as a POSIX path), else None."""
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(directory))
    except ValueError:
        return None
    return rel.as_posix() if str(rel) != "." else None


def guarded(debug: bool, fn, *args, **kwargs):
    """Run fn; input problems become one line on stderr and exit 2 (traceback only with --debug)."""
    _skip_pyarrow_pandas_probe()
    try:
        return fn(*args, **kwargs)
    except typer.Exit:
        raise
    except TraceError as e:
        if debug:
            traceback.print_exc()
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Interrupted as e:   # SIGTERM/SIGINT while writing: the outputs were cleaned up
        fail(f"interrupted ({e})", 128 + e.signum)
    except Exception as e:  # an internal error: say so, short, unless --debug
        if debug:
            traceback.print_exc()
        fail(f"internal error: {type(e).__name__}: {e} (rerun with --debug for a traceback)", 3)


FORMATS = ("text", "json", "markdown", "html")
MAX_INPUT_HELP = ("most bytes of JSON read from one trace file, after gzip inflation (e.g. 16G; "
                  "default: 8G or a quarter of the RAM, whichever is less)")


def render(doc: dict, fmt: str) -> str:
    from .reports import render as render_any
    return render_any(doc, fmt)


@app.command()
def analyze(
    paths: List[Path] = typer.Argument(..., help="Trace files (Kineto .json/.json.gz, nsys .sqlite/.nsys-rep) "
                                                 "or a directory: all are ranks of one job."),
    fmt: str = typer.Option("text", "--format", "-f", help="text, json, markdown or html"),
    out: Optional[Path] = typer.Option(None, "-o", "--output", help="write the report to FILE"),
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="write report.json/.md/.html and charts here"),
    step_regex: Optional[str] = typer.Option(None, "--step-regex", help="regex naming step ranges "
                                             "(first group = step number); default ProfilerStep#N, step_N, iteration N"),
    whole_trace: bool = typer.Option(False, "--whole-trace", help="one window per rank over all GPU activity"),
    comm_regex: List[str] = typer.Option([], "--comm-regex", help="extra regex for communication kernels/ops"),
    config: Optional[Path] = typer.Option(None, "--config", help="traceview.toml with attribution patterns"),
    top: int = typer.Option(10, "--top", help="rows in top-N lists"),
    model: Optional[str] = typer.Option(None, "--model", help="model preset for model-based FLOPs: "
                                        + ", ".join(_preset_names())),
    model_config: Optional[Path] = typer.Option(None, "--model-config", help="model config file (TOML/JSON)"),
    tokens_per_step: Optional[int] = typer.Option(None, "--tokens-per-step", help="tokens per step per GPU"),
    peak_tflops: Optional[float] = typer.Option(None, "--peak-tflops", help="peak TFLOP/s per GPU (override)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="data type for the peak (bf16, fp8, ...)"),
    budget: Optional[Path] = typer.Option(None, "--budget", help="budget TOML: exit 1 when violated"),
    nsys: Optional[str] = typer.Option(None, "--nsys", help="path of the nsys binary for .nsys-rep"),
    max_input_size: Optional[str] = typer.Option(None, "--max-input-size", metavar="SIZE", help=MAX_INPUT_HELP),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks"),
):
    """Where each step's GPU time went, per rank (and layer, stage, stall, FLOPs)."""
    if fmt not in FORMATS:
        fail(f"unknown --format {fmt!r} (choose from {', '.join(FORMATS)})")
    staged = inside(out, out_dir) if out is not None and out_dir is not None else None

    def run():
        from .options import MAX_COUNT, MAX_TOKENS, count, finite
        count(top, "--top", 0, MAX_COUNT, "--top must be 0 or more")
        count(tokens_per_step, "--tokens-per-step", 1, MAX_TOKENS, "--tokens-per-step must be positive")
        finite(peak_tflops, "--peak-tflops", positive=True)
        from .parsers import bounded_read
        bounded_read.apply_option(max_input_size)
        if out_dir is not None:
            check_out_dir(out_dir, (staged,) if staged else ())
        if staged is None:
            check_out(out)
        from .analysis.pipeline import AnalyzeOptions, run_analyze
        opts = AnalyzeOptions(step_regex=step_regex, comm_regex=list(comm_regex), config=config, top=top,
                              model=model, model_config=model_config, tokens_per_step=tokens_per_step,
                              peak_tflops=peak_tflops, dtype=dtype, budget=budget, nsys=nsys,
                              whole_trace=whole_trace)
        doc = run_analyze([str(p) for p in paths], opts)
        text = render(doc, fmt)
        if out_dir is not None:
            from .output import write_tree
            from .reports import bundle_files
            files = bundle_files(doc)
            if staged:                  # -o inside the bundle: written with it, all or nothing
                files = [f for f in files if f[0] != staged] + [(staged, text)]
            write_tree(files, out_dir)
        if fmt == "text" and out is None:
            from .reports.tty import colorize, want_color
            if want_color(sys.stdout):
                text = colorize(text)
        if staged is None and (out_dir is None or out is not None or fmt == "text"):
            write_output(text, out)
        return doc

    doc = guarded(debug, run)
    if doc.get("budget", {}).get("violations"):
        raise typer.Exit(1)


def _register_commands() -> None:
    """Commands that live in their own modules (each imports only what its --help needs; a broken
    import is an error here, never a command that silently vanishes)."""
    from .diff_cli import diff_command
    from .export_cli import export_command
    from .flops.cli import mfu_command
    from .history_cli import history_command
    app.command("mfu")(mfu_command)
    app.command("diff")(diff_command)
    app.command("export")(export_command)
    app.command("history")(history_command)


_register_commands()


def _skip_pyarrow_pandas_probe() -> None:
    """When pandas is installed, pyarrow imports it (0.2-0.3 s) on its first conversion of a Python
    list. traceview never needs pandas (its tables are Arrow, DuckDB and polars; Altair takes plain
    values), so the command line marks pandas absent for its own process: pyarrow's Python-side
    probe is answered once by a stub that raises ImportError, and `import pandas` from C++ then
    fails at once on the None entry. Library users are not affected."""
    if "pandas" in sys.modules or not _IN_CLI:
        return
    import types

    import pyarrow as pa

    class _Absent(types.ModuleType):
        def __getattr__(self, name):
            raise ImportError("pandas is not used by traceview's command line")

    sys.modules["pandas"] = _Absent("pandas")
    try:
        pa.lib._pandas_api.have_pandas  # the probe runs once per process and remembers the answer
    except ImportError:
        pass
    sys.modules["pandas"] = None  # type: ignore[assignment]


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
    global _IN_CLI
    _IN_CLI = True
    sys.exit(run_cli())


if __name__ == "__main__":
    main()
