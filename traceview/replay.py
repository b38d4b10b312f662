"""A repeated `traceview analyze` served before the command line is parsed.

A command whose report the store keeps (job_cache) still paid the start-up of the whole command
line (typer, its pydantic coercion, pyarrow for the probe): about 0.6 s, where the work is copying
a kept file out. So a run whose report was kept also leaves, in the store it used, one small
entry under the identity of its whole invocation:

- the arguments as given, the working directory, the environment variables that can change what
  a run does or writes (every TRACEVIEW_* one, the cache and colour variables, PATH, the locale),
  whether stdin/stdout/stderr are terminals, the interpreter, the code (code_stamp) and the RAM
  (the default --max-input-size follows it);
- the stat (size, mtime, ctime, inode, device) of every trace the run read (as the store judges a
  trace current) and of every directory it was given (a file added to it changes its mtime), and
  the SHA-256 of every file an option named (config, budget, model config: job_cache hashes them
  too), taken before the run and again after it: a file that changed while the run read it leaves
  no entry;
- which kept report it wrote out, where (stdout or -o), and the exit status.

A run that wrote its report to `-o FILE` also leaves a second entry under the identity of its
invocation with that one value masked (`masked`: the same command with any other -o FILE), so
that the same analysis written to another file is a copy of the kept report too (a CI job that
names its report by date, a second copy of a report): the kept report, its checks and exit
status are the same, only the file differs. The mask is positional (the one `-o`/`--output` token
and the value after it, or `--output=VALUE`), and an entry is left under it only where the run's
own output (as the command line read it) is that value: a token that the command line read as
another option's value is never masked.

`try_replay(argv)` looks for an entry of exactly this invocation in the stores the run could have
used (--store, TRACEVIEW_CACHE_DIR, `.traceview/` beside any path argument, the per-user cache),
checks every recorded stat and the kept report's size and CRC-32 (Store.open_kept; for -o FILE as
it is copied, the temporary file renamed into place only when it matched), and writes the report
as the command would have: the same bytes, the same exit status. Anything else (no
entry, a stat that differs, a damaged store, an option that needs the command line: --no-store,
--progress, --out-dir, Dask, --per-rank-rows, --help) returns None and the command runs as usual,
which finds the kept report by its own key. Nothing here imports more than the standard library
and three small modules of traceview.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from pathlib import Path

ENTRY_FORMAT = "traceview.replay/1"
INVOCATION: list[str] | None = None      # set by launch.main(): the arguments of this process's command

_ENV = ("HOME", "XDG_CACHE_HOME", "PATH", "NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS", "LINES", "CI",
        "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONIOENCODING", "PYTHONUTF8")
# options that need the whole command line (or write more than one report, or show progress)
_NOT_REPLAYED = ("--no-store", "--progress", "--out-dir", "--dask", "--dask-scheduler-file",
                 "--per-rank-rows", "--help", "--version")
_NOT_REPLAYED_ENV = ("TRACEVIEW_DASK_SCHEDULER",)


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def invocation(argv: list[str]) -> str:
    """The identity of one command as this process runs it (see the module docstring)."""
    from . import __version__
    from .code_stamp import code_stamp
    env = {k: os.environ.get(k) for k in sorted(set(_ENV) | {k for k in os.environ if k.startswith("TRACEVIEW_")})}
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        ram = None
    ident = {"format": ENTRY_FORMAT, "argv": list(argv), "cwd": os.getcwd(), "env": env,
             "tty": [_isatty(0), _isatty(1), _isatty(2)], "python": sys.executable,
             "version": __version__, "code": code_stamp(), "ram": ram}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode("utf-8", "surrogateescape")).hexdigest()[:40]


MASK = "\x00-o\x00"   # what stands for the output file in a masked invocation (no argument holds NUL)
OUT_FLAGS = ("-o", "--output")   # analyze's output option (analyze_cli.OPTIONS: held equal by tests)


def masked(argv: list[str]) -> tuple[list[str], str] | None:
    """(argv with its output file masked, the output file as given) where argv names exactly one
    output file by `-o VALUE`, `--output VALUE` or `--output=VALUE`; None otherwise."""
    found: list[tuple[int, int, str]] = []     # (first token, tokens, value)
    for i, tok in enumerate(argv):
        if tok in OUT_FLAGS:
            if i + 1 < len(argv):
                found.append((i, 2, argv[i + 1]))
            else:
                return None
        elif tok.startswith("--") and tok.split("=", 1)[0] in OUT_FLAGS and "=" in tok:
            found.append((i, 1, tok.split("=", 1)[1]))
    if len(found) != 1 or not found[0][2]:
        return None
    i, n, value = found[0]
    return [*argv[:i], MASK, *argv[i + n:]], value


def _stat(path: str) -> list | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def snapshot(paths: list[str], named: list[str]) -> dict | None:
    """The stat of every trace of `paths` (a directory: itself and its trace files) and of every
    named file, or None when some cannot be read (then nothing is recorded)."""
    from .trace_files import expand
    try:
        files = [str(f) for f in expand(list[str | Path](paths))]
    except Exception:
        return None
    dirs = [p for p in paths if os.path.isdir(p)]
    got: dict[str, list] = {}
    for p in [*files, *dirs]:
        s = _stat(p)
        if s is None:
            return None
        got[os.path.abspath(p)] = s
    for p in named:            # small files, hashed as job_cache.key hashes them
        h = _content(p)
        if h is None:
            return None
        got[os.path.abspath(p)] = ["sha256", h]
    return got


def _content(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read(16 << 20)).hexdigest()
    except OSError:
        return None


def _same(path: str, recorded) -> bool:
    if isinstance(recorded, list) and len(recorded) == 2 and recorded[0] == "sha256":
        return _content(path) == recorded[1]
    return isinstance(recorded, list) and _stat(path) == recorded


def _entry_path(root: Path, inv: str) -> Path:
    return Path(root) / "replay" / f"{inv}.json"


def record(root: Path, before: dict | None, paths: list[str], named: list[str], kept: tuple[str, str],
           out: str | None, rc: int) -> bool:
    """Leave the entry of this process's command (INVOCATION) in the store at `root`: its report is
    the kept one `kept` = (key, format), written to `out` (None: stdout), exit status `rc`. Only when
    the files the run read are as they were before it (`before`, a snapshot). False: nothing left."""
    if INVOCATION is None or before is None or snapshot(paths, named) != before:
        return False
    entry = {"format": ENTRY_FORMAT, "deps": before, "kept": list(kept), "out": out, "rc": int(rc)}
    if not _put(root, invocation(INVOCATION), entry):
        return False
    got = masked(INVOCATION) if out is not None else None
    if got is not None and str(Path(got[1])) == out:     # the mask is where the command read its -o
        _put(root, "o-" + invocation(got[0]), {**entry, "out": None})
    return True


def _put(root: Path, name: str, entry: dict) -> bool:
    """Entry `name` written into the store at `root` (renamed into place); whether it was."""
    target = _entry_path(root, name)
    tmp = target.with_name(f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(entry, sort_keys=True), encoding="utf-8")
        os.replace(tmp, target)
        return True
    except (OSError, TypeError, ValueError):
        try:
            tmp.unlink()
        except OSError:
            pass
        return False


def _candidates(argv: list[str]) -> list[Path]:
    """Every store this command could have used, first the explicit ones."""
    out: list[Path] = []

    def add(p: Path) -> None:
        if p not in out:
            out.append(p)

    env = os.environ.get("TRACEVIEW_CACHE_DIR")
    if env:
        add(Path(env))
    for tok in argv[1:]:
        value = tok.split("=", 1)[1] if tok.startswith("--") and "=" in tok else tok
        if not value or value.startswith("-"):
            continue
        p = Path(value)
        if p.is_dir():
            add(p)
            add(p / ".traceview")
        elif p.exists():
            add(p.parent / ".traceview")
        if len(out) > 64:
            break
    from .store import user_dir
    add(user_dir())
    return out


def _read_entry(path: Path) -> dict | None:
    try:
        if path.stat().st_size > 64 << 20:
            return None
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(entry, dict) and entry.get("format") == ENTRY_FORMAT and isinstance(entry.get("deps"), dict) \
        and isinstance(entry.get("kept"), list) and len(entry["kept"]) == 2 and isinstance(entry.get("rc"), int) \
        and (entry.get("out") is None or isinstance(entry.get("out"), str))
    return entry if ok else None


def _current(entry: dict) -> bool:
    return all(_same(p, s) for p, s in entry["deps"].items())


def try_replay(argv: list[str]) -> int | None:
    """Write the report of this command from its entry and return its exit status; None: run it."""
    if not argv or argv[0] != "analyze" or any(os.environ.get(k) for k in _NOT_REPLAYED_ENV):
        return None
    if any(t.split("=", 1)[0] in _NOT_REPLAYED for t in argv[1:]):
        return None
    try:
        roots = _candidates(argv)
        names: list[tuple[str, str | None]] = [(invocation(argv), None)]
        other = masked(argv)
        if other is not None:        # the same command written to another file (`masked`)
            names.append(("o-" + invocation(other[0]), other[1]))
        for name, out_given in names:
            for root in roots:
                entry = _read_entry(_entry_path(root, name))
                if entry is None:
                    continue
                if not _current(entry):
                    return None
                return _serve(root, entry, entry["out"] if out_given is None else out_given)
    except Exception:       # an unexpected store or file: the command runs as usual and says what is wrong
        return None
    return None


def _serve(root: Path, entry: dict, out: str | None) -> int | None:
    """The kept report `entry` names written to `out` (None: stdout); its exit status, or None."""
    from .store import Store
    key, fmt = entry["kept"]
    got = Store(root).open_kept(str(key), str(fmt), check=_check(out))   # never whole in memory
    if got is None:
        return None
    try:
        return _write(got, str(fmt), out, entry["rc"])
    finally:
        got.close()


def _check(out: str | None) -> str:
    """How the kept report is checked (Store.open_kept): as it is copied where nothing is put in
    place before the copy is complete (-o FILE: a temporary file renamed over it; one read of the
    kept file instead of two), else before a byte is written (stdout, a pipe, a device)."""
    if out is None:
        return "first"
    from .output import is_special
    return "first" if is_special(Path(out)) else "as read"


def _write(payload, fmt: str, out: str | None, rc: int) -> int | None:
    """As cli_common.write_output writes the report (json: bytes; the others: text). `payload`: the
    kept report's pieces (store.KeptPayload: a 1 GB report is never whole in memory)."""
    if out is not None:
        from .output import Pieces, write_file
        try:
            write_file(Pieces(lambda: iter(payload), holds=payload.holds), Path(out))
        except Exception:     # nothing written (all or nothing): the command runs and says why
            return None
        return rc
    try:
        buffer = getattr(sys.stdout, "buffer", None)
        if fmt == "json" and buffer is not None:
            sys.stdout.flush()
            started = False
            try:
                for piece in payload:
                    buffer.write(piece)
                    started = True
            except OSError as e:
                if isinstance(e, BrokenPipeError) or not started:
                    raise
                # part of it is out already: the command must not write it again after it
                why = e.strerror or type(e).__name__
                sys.stderr.write(f"traceview: the kept report stopped being readable ({why})\n")
                return 2
            buffer.flush()
        else:
            sys.stdout.write(b"".join(payload).decode("utf-8"))
            sys.stdout.flush()
    except BrokenPipeError:
        return 1
    return rc
