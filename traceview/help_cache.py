"""`traceview --help` and `traceview COMMAND --help` served from a copy of the text the command line
printed the last time, before the command line (typer) is imported.

The help text is a pure function of the code and of what click reads to lay it out: the arguments,
the terminal's width (COLUMNS, else the size of the terminal on stdout), the locale and stdout's
encoding. Rendering it costs the import of typer and of every command's options (about 0.13 s,
as much as the interpreter's own start-up); the copy costs a hash of those inputs and one read.

The copy lives in the per-user cache (TRACEVIEW_CACHE_DIR, else $XDG_CACHE_HOME/traceview) under
`help/<key>.txt`, written by a temp file and a rename, under a key of: the arguments, the
version, code_stamp (a checkout whose code changed never prints an old text), the interpreter,
the environment variables that can change the layout or a default, whether stdout is a terminal
and its size, the RAM and the number of cores (the defaults of --max-input-size and --jobs).
A cache folder that cannot be written, or a copy that cannot be read, only costs the rendering.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys

HELP_FORMAT = "traceview.help/1"
_ENV_PREFIXES = ("TERM", "COLORTERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR",
                 "TYPER", "_TYPER", "LANG", "LC_", "PYTHONIOENCODING", "PYTHONUTF8", "TRACEVIEW_",
                 "HOME", "XDG_CACHE_HOME")


def wanted(argv: list[str]) -> bool:
    """Only a plain request for help: `--help` after zero or one command name."""
    if not argv or argv[-1] != "--help" or len(argv) > 2:
        return False
    return all(a and a[0].isalpha() and a.replace("-", "").isalnum() and a.isascii() for a in argv[:-1])


def _terminal() -> list | None:
    try:
        if not os.isatty(1):
            return None
        size = os.get_terminal_size(1)
        return [size.columns, size.lines]
    except (OSError, ValueError):
        return None


def _folder() -> str:
    base = os.environ.get("TRACEVIEW_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = os.path.join(xdg if xdg else os.path.join(os.path.expanduser("~"), ".cache"), "traceview")
    return os.path.join(base, "help")


def key(argv: list[str]) -> str:
    from . import __version__
    from .code_stamp import code_stamp
    env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        ram = None
    ident = {"format": HELP_FORMAT, "argv": argv, "version": __version__, "code": code_stamp(),
             "python": sys.executable, "env": env, "terminal": _terminal(),
             "ram": ram, "cpus": os.cpu_count(),   # defaults the help states follow them
             "encoding": [getattr(sys.stdout, "encoding", None), getattr(sys.stdout, "errors", None)]}
    blob = json.dumps(ident, sort_keys=True).encode("utf-8", "surrogateescape")
    return hashlib.sha256(blob).hexdigest()[:40]


def serve(argv: list[str]) -> bool:
    """Write the kept help text of this exact request to stdout; False when there is none."""
    try:
        path = os.path.join(_folder(), key(argv) + ".txt")
        with open(path, "rb") as f:
            data = f.read()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if not text.endswith("\n"):           # a copy always ends as click's help does: not a copy of ours
        return False
    sys.stdout.write(text)
    sys.stdout.flush()
    return True


def _keep(argv: list[str], text: str) -> None:
    folder = _folder()
    try:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, key(argv) + ".txt")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(text.encode("utf-8"))
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass


def render_and_keep(argv: list[str], run) -> int:
    """Run the command line (`run()` returns its exit status) with stdout captured; write what it
    printed, and keep it when it was the help (status 0)."""
    real = sys.stdout
    buf = io.StringIO()
    sys.stdout = buf
    try:
        rc = run()
    finally:
        sys.stdout = real
    text = buf.getvalue()
    real.write(text)
    real.flush()
    if rc == 0 and text.endswith("\n"):
        _keep(argv, text)
    return rc
