"""What every command shares: the one-line failure, guarded execution, output checks and writing.

Commands in their own modules (diff_cli, export_cli, history_cli, flops/cli) import these from here,
never from `cli`, so that `cli` can register them without an import circle.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from .errors import TraceError

EXIT_INPUT = 2
IN_CLI = False           # set by cli.main(): process-wide tweaks (the pandas probe) only for the command line


class CommandExit(Exception):
    """The command ends with exit status `exit_code`: what `fail` raises where typer is not
    imported (a plain `analyze` read by analyze_cli.parse); where typer runs the command, typer's
    own Exit is raised instead, as a command of typer's must."""

    def __init__(self, exit_code: int = 0):
        super().__init__(exit_code)
        self.exit_code = exit_code


def exits() -> tuple[type[Exception], ...]:
    """The exceptions that end a command with a status (typer's Exit once typer is imported)."""
    typer = sys.modules.get("typer")
    return (CommandExit,) if typer is None else (CommandExit, typer.Exit)


def exit_with(code: int) -> Exception:
    typer = sys.modules.get("typer")
    return CommandExit(code) if typer is None else typer.Exit(code)


def fail(message: str, code: int = EXIT_INPUT) -> None:
    """One line on stderr: control characters and line breaks from file or trace names escaped."""
    from .reports.escape import one_line_controls
    sys.stderr.write(f"traceview: {one_line_controls(message)}\n")
    sys.stderr.flush()
    raise exit_with(code)


def write_output(text, out: Optional[Path]) -> None:
    """Print, or write to `out` all or nothing (traceview/output.py: symlinks are written through,
    FIFOs and devices written to in place). `text`: str, bytes or output.Pieces (a large JSON
    report, written piece by piece)."""
    if out is None:
        buffer = getattr(sys.stdout, "buffer", None)
        if not isinstance(text, str) and buffer is not None:     # a large JSON report: no str copy
            sys.stdout.flush()
            for piece in ([text] if isinstance(text, bytes) else text):
                buffer.write(piece)
            buffer.flush()
            return
        if not isinstance(text, (str, bytes)):
            text = text.join()
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
    if IN_CLI:
        skip_pyarrow_pandas_probe()
    from .output import Interrupted
    try:
        return fn(*args, **kwargs)
    except exits():
        raise
    except TraceError as e:
        if debug:
            import traceback
            traceback.print_exc()
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Interrupted as e:   # SIGTERM/SIGINT while writing: the outputs were cleaned up
        fail(f"interrupted ({e})", 128 + e.signum)
    except Exception as e:  # an internal error: say so, short, unless --debug
        if debug:
            import traceback
            traceback.print_exc()
        fail(f"internal error: {type(e).__name__}: {e} (rerun with --debug for a traceback)", 3)


FORMATS = ("text", "json", "markdown", "html")
MAX_INPUT_HELP = ("most bytes of JSON read from one trace file, after gzip inflation (e.g. 16G; "
                  "default: 8G or a quarter of the RAM, whichever is less)")


def skip_pyarrow_pandas_probe() -> None:
    """When pandas is installed, pyarrow imports it (0.2-0.3 s) on its first conversion of a Python
    list. traceview never needs pandas (its tables are Arrow, DuckDB and polars; Altair takes plain
    values), so the command line marks pandas absent for its own process: pyarrow's Python-side
    probe is asked once now, while a finder first on sys.meta_path refuses pandas (the import
    fails before pyarrow imports its `pandas_compat`, as a stand-in module raising on its first
    attribute made it do: 2-4 ms for nothing), and remembers the answer; `import pandas` from C++
    then fails at once on the None entry left in sys.modules. Library users are not affected."""
    from .parsers.no_dateutil import no_dateutil_search
    no_dateutil_search()    # python-dateutil, when not installed, marked absent as in the workers
    if "pandas" in sys.modules:
        return
    from . import lean_imports
    lean_imports.pyarrow()      # without cloudpickle
    import pyarrow as pa

    refuse = _NoPandas()
    sys.meta_path.insert(0, refuse)
    try:
        _ = pa.lib._pandas_api.have_pandas  # the probe runs once per process and remembers the answer
    except ImportError:
        pass
    finally:
        sys.meta_path.remove(refuse)
    sys.modules["pandas"] = None  # type: ignore[assignment]


class _NoPandas:
    """A finder that refuses pandas (skip_pyarrow_pandas_probe)."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not used by traceview's command line")
        return None
