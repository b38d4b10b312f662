"""The `traceview` command's entry point: a repeated `analyze` whose report the store keeps is
written out at once (replay.py), and a request for help from the kept copy of its text
(help_cache.py), before the command line (typer) is even imported; a plain `analyze` is read
without typer (analyze_cli.run_plain); every other command runs through the command line
(cli.run_cli); all end with `exit_now`."""
from __future__ import annotations

import os
import sys
from typing import NoReturn


def one_blas_thread() -> None:
    """Where numpy is installed pyarrow loads it, and numpy's OpenBLAS starts its thread pool as it
    loads. traceview does no linear algebra, and a process running a thread of its own cannot fork a
    mapped job's workers (executors.start_pool then falls back to the forkserver, which imports it
    all again): one BLAS thread, unless the user asked for more."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    # no collector passes while the command starts (its imports, typer's, the analysis's: some 70
    # passes and 10 ms before a Kineto parse begins); runs.collect_again turns it back on before the
    # parse, with every object made so far frozen (gc.freeze), and any other command does below
    import gc
    gc.disable()
    from .parsers import kineto_helper
    kineto_helper.note_start()   # how busy the other cores are is measured from now (a large Kineto parse)
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
    from . import heap
    heap.keep_heap()                      # before the work: the pages it frees are kept for it
    from . import analyze_cli, cli_common
    cli_common.IN_CLI = True
    rc = analyze_cli.run_plain(argv)      # a plain `analyze`, read without typer
    if rc is not None:
        exit_now(rc)
    gc.enable()
    from . import cli
    exit_now(cli.run_cli(argv))


def exit_now(code: int) -> NoReturn:
    """End the command with exit status `code` without the interpreter's teardown, which frees
    every object an analysis left (its tables, rows, modules) one at a time: some 0.1 s of CPU
    after the report is written. What a normal exit does that matters is done first: the atexit
    functions run (temporary folders, a forkserver, logging) and stdout and stderr are flushed.
    Where a thread that a normal exit would wait for still runs, or a flush fails (a closed
    pipe: Python's own exit reports it), the normal exit."""
    import atexit
    import threading
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)
