"""Compiled modules for the timed runs, as an installed traceview has them.

`pip install` compiles every module of a package when it installs it, so a user's `traceview` never
compiles its own source. A checkout installed in editable mode compiles a module on its first import
and keeps the result, unless PYTHONDONTWRITEBYTECODE is set (as on the development machines): then
every timed run compiles every module changed since the last compiled copy (measured: about 90 ms
of `analyze`'s start-up, 145 ms of imports instead of 50). `prepare(interpreter)` compiles the
package's modules once, before the runs, and lets the runs keep what they compile."""
from __future__ import annotations

import os
import subprocess

_DIRS = ("import os, traceview, traceview.parsers, traceview.reports; "
         "print('\\n'.join(os.path.dirname(m.__file__) for m in (traceview, traceview.parsers, traceview.reports)))")


def prepare(interpreter: str) -> str:
    """Compile traceview's modules with `interpreter` (the one its console script runs) and let the
    benchmark's child processes write compiled modules; returns a line saying so."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    dirs = subprocess.run([interpreter, "-c", _DIRS], capture_output=True, text=True)
    if dirs.returncode != 0:
        return "note: traceview's modules not compiled beforehand (its package was not found)"
    # the parsers and reports folders are links inside the package: compileall does not follow links
    # below a folder it is given, so each is given itself
    folders = dirs.stdout.split()
    subprocess.run([interpreter, "-m", "compileall", "-q", *folders], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return f"traceview's modules compiled beforehand, as pip install does ({', '.join(folders)})"
