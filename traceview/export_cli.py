"""`traceview export --perfetto OUT TRACE...`: the trace with the analysis overlaid, for Perfetto.

Exit codes: 0 (written), 2 (input or usage error: one line on stderr, nothing written), 3
(internal error).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .cli_common import fail, guarded


def export_command(
    paths: List[Path] = typer.Argument(..., help="Trace files or a directory: all are ranks of one job."),
    perfetto: Optional[Path] = typer.Option(None, "--perfetto", metavar="OUT",
                                            help="write a Chrome trace-event JSON file for ui.perfetto.dev "
                                                 "(gzip-compressed when OUT ends in .gz)"),
    step_regex: Optional[str] = typer.Option(None, "--step-regex",
                                             help="regex naming step ranges (first group = step number); "
                                                  "default ProfilerStep#N, step_N, iteration N"),
    whole_trace: bool = typer.Option(False, "--whole-trace", help="one window per rank over all GPU activity"),
    comm_regex: List[str] = typer.Option([], "--comm-regex", help="extra regex for communication kernels/ops"),
    config: Optional[Path] = typer.Option(None, "--config", help="traceview.toml with attribution patterns"),
    nsys: Optional[str] = typer.Option(None, "--nsys", help="path of the nsys binary for .nsys-rep"),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks"),
):
    """Write the GPU activities with the analysis as added tracks per rank (class of each moment,
    critical path, stalls, layer / phase / stage) for Perfetto."""
    if perfetto is None:
        fail("export: choose the output: --perfetto OUT")

    def run():
        from .api import open as open_job  # nothing is written when the input is bad
        assert perfetto is not None
        open_job([str(p) for p in paths], step_regex=step_regex, comm_regex=list(comm_regex), config=config,
                 nsys=nsys, whole_trace=whole_trace).export_perfetto(perfetto)

    guarded(debug, run)
