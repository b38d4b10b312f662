"""The `traceview` command's entry point: a repeated `analyze` whose report the store keeps is
written out at once (replay.py), before the command line (typer) is even imported; every other
command runs through cli.main()."""
from __future__ import annotations

import sys


def main() -> None:
    from . import replay
    argv = sys.argv[1:]
    replay.INVOCATION = argv
    rc = replay.try_replay(argv)
    if rc is not None:
        sys.exit(rc)
    from .cli import main as cli_main
    cli_main()
