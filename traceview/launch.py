"""The `traceview` command's entry point: a repeated `analyze` whose report the store keeps is
written out at once (replay.py), and a request for help from the kept copy of its text
(help_cache.py), before the command line (typer) is even imported; every other command runs
through cli.main()."""
from __future__ import annotations

import os
import sys


def one_blas_thread() -> None:
    """Where numpy is installed pyarrow loads it, and numpy's OpenBLAS starts its thread pool as it
    loads. traceview does no linear algebra, and a process running a thread of its own cannot fork a
    mapped job's workers (executors.start_pool then falls back to the forkserver, which imports it
    all again): one BLAS thread, unless the user asked for more."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    one_blas_thread()
    argv = sys.argv[1:]
    from . import help_cache
    if help_cache.wanted(argv):
        if help_cache.serve(argv):
            sys.exit(0)
        from . import cli, cli_common
        cli_common.IN_CLI = True
        sys.exit(help_cache.render_and_keep(argv, cli.run_cli))
    from . import replay
    replay.INVOCATION = argv
    rc = replay.try_replay(argv)
    if rc is not None:
        sys.exit(rc)
    from .cli import main as cli_main
    cli_main()
