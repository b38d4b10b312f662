"""Writing outputs all or nothing: `-o FILE` and the `--out-dir` bundle.

- `write_file(data, path)`: a regular file (or a new one) is written to a temporary file beside it
  and renamed over it, keeping an existing file's permissions. A symlink is written through: the
  file it points to is replaced the same way and the link stays. Pieces that are a file's bytes
  (a kept report) are not written where the file is that very file (`Pieces.holds`: a JSON report
  the store keeps by a link of the file it was written to, asked for again at the same place): its
  modification time is set to now, as a write would. A FIFO, character device or
  socket (`/dev/null`, a named pipe, a terminal), and a file descriptor's name (`/dev/stdout`,
  `/dev/fd/N`, anything under /proc), is opened and written to (appending), never replaced.
- `write_tree(files, out_dir)`: the bundle is written into a temporary folder beside `out_dir`,
  then swapped in (the old bundle renamed aside, the new one renamed in, the old one removed), so
  a failed or interrupted run leaves the previous bundle as it was and no temporary files. A
  directory that also holds files traceview did not write keeps them: there every staged file is
  renamed into place, one after the other with signals held, and the earlier run's charts that
  this run did not draw are removed.
- A file's pieces (`Pieces`: a JSON report) are written by direct_io.AdaptiveWriter, through the
  page cache or around it (O_DIRECT), whichever this machine writes faster; other outputs through
  a buffered file.
- SIGTERM and SIGINT during the write raise `Interrupted` (after the temporary files are removed);
  during the renames of the swap they are held until the swap is complete.
- `check_file_target` / `check_dir_target` refuse a location that cannot be written before any
  analysis starts.

TRACEVIEW_TEST_WRITE_DELAY=SECONDS sleeps in the middle of the write (tests interrupt it there).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from .errors import UsageError

BUNDLE_TOP = ("report.json", "report.md", "report.html", "charts")


class Pieces:
    """An output written piece by piece (a large JSON report: no whole copy in memory). `make()`
    gives an iterator of bytes-like pieces each time it is called; iterating a Pieces calls it.
    `write_file`, writing it to a regular file, sets `to_folder` (the folder the file goes to)
    before iterating it and calls `written(path)` once the pieces are all in the file at `path`,
    before it is renamed into place: a JSON report is kept in the store by a link of that file
    (job_cache). Neither is done for standard output, a pipe or a device. `holds(path)`, where
    given, says whether the regular file at `path` is already these bytes (the file they are read
    from, checked): write_file then writes nothing there."""

    def __init__(self, make, written=None, holds=None):
        self._make = make
        self.to_folder: Path | None = None
        self.written = written
        self.holds = holds      # holds(path): whether the file at `path` already has exactly these bytes

    def __iter__(self):
        return iter(self._make())

    def join(self) -> bytes:
        return b"".join(self)


def _chunks(data: str | bytes | Pieces):
    if isinstance(data, Pieces):
        return data
    return [data.encode("utf-8") if isinstance(data, str) else data]


def _write_all(fh, data) -> None:
    for piece in _chunks(data):
        fh.write(piece)


def _write_new(fd: int, path: str, data) -> None:
    """`data` into the new regular file open as `fd` at `path` (closed here): the pieces of a
    large output by direct_io.AdaptiveWriter (through the page cache or around it, whichever this
    machine writes faster), anything else (or on a platform without `os.pwrite`) through a
    buffered file."""
    if not isinstance(data, Pieces) or not hasattr(os, "pwrite"):
        with os.fdopen(fd, "wb") as fh:
            _write_all(fh, data)
        return
    from .direct_io import write_pieces
    try:
        write_pieces(fd, path, data)
    finally:
        os.close(fd)


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived while outputs were being written (they were cleaned up)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


_state: dict[str, Any] = {"hold": 0, "pending": None}


def _on_signal(signum, frame):
    if _state["hold"]:
        _state["pending"] = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_raise():
    """SIGTERM/SIGINT raise Interrupted inside the block (main thread only)."""
    try:
        old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:          # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _signals_held():
    """A signal arriving inside the block is acted on when the block is done."""
    _state["hold"] += 1
    try:
        yield
    finally:
        _state["hold"] -= 1
        pending, _state["pending"] = _state["pending"], None
        if pending is not None and not _state["hold"]:
            raise Interrupted(pending)


def _test_delay() -> None:
    delay = os.environ.get("TRACEVIEW_TEST_WRITE_DELAY")
    if delay:
        time.sleep(float(delay))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def is_special(path: Path) -> bool:
    """A target that is written to in place: not a regular file, or a file descriptor's name
    (/dev/stdout, /dev/fd/N, /proc/...: stdout redirected to a file must not be replaced)."""
    absolute = os.path.abspath(path)
    if absolute in ("/dev/stdout", "/dev/stderr") or absolute.startswith(("/dev/fd/", "/proc/")) \
            or os.path.realpath(path).startswith("/proc/"):
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False
    return not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


def check_file_target(path: Path, flag: str = "-o") -> None:
    """Refuse an output file that cannot be written (before any work)."""
    path = Path(path)
    if is_special(path):
        if not os.path.exists(path):
            raise UsageError(path, f"{flag}: no such file or device")
        if not os.access(path, os.W_OK):
            raise UsageError(path, f"{flag}: not writable")
        return
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise UsageError(path, f"{flag}: is a directory")
    _check_dir_chain(target.parent, path, flag)


def _check_dir_chain(directory: Path, shown: Path, flag: str) -> None:
    p = directory
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise UsageError(shown, f"{flag}: {p} is not a directory")
    try:                       # a real probe: access() says yes to root, and /proc lies
        os.rmdir(tempfile.mkdtemp(prefix=".traceview-probe.", dir=p))
    except OSError as e:
        raise UsageError(shown, f"{flag}: cannot create files in {p} ({_reason(e)})") from None


def write_file(data: str | bytes | Pieces, path: Path) -> None:
    """Write `data` to `path` as described in the module docstring (UsageError when it cannot)."""
    path = Path(path)
    with _signals_raise():
        if is_special(path):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                with os.fdopen(fd, "wb") as fh:
                    _write_all(fh, data)
            except OSError as e:
                raise UsageError(path, f"cannot write output ({_reason(e)})") from e
            return
        target = Path(os.path.realpath(path))     # a symlink: write through to the file it names
        if isinstance(data, Pieces) and data.holds is not None and data.holds(target):
            with contextlib.suppress(OSError):
                os.utime(target)                  # (written now, as far as its reader can tell)
            return
        tmp = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                mode = stat.S_IMODE(os.stat(target).st_mode)
            except FileNotFoundError:
                mode = 0o666 & ~_umask()
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            if isinstance(data, Pieces):
                data.to_folder = target.parent
            _write_new(fd, tmp, data)
            os.chmod(tmp, mode)
            if isinstance(data, Pieces) and data.written is not None:
                data.written(Path(tmp))
            _test_delay()
            with _signals_held():
                os.replace(tmp, target)
                tmp = None
        except OSError as e:
            raise UsageError(path, f"cannot write output ({_reason(e)})") from e
        finally:
            with _signals_held():
                if tmp is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)


def _bundle_leftovers(directory: Path, also: set[str]) -> list[str]:
    """Files in an existing --out-dir that traceview would not have written there."""
    out = []
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        top = rel.split("/", 1)[0]
        if rel in also or (p.is_dir() and rel == "charts"):
            continue
        if top == "charts" and p.is_file() and p.suffix in (".svg", ".png") and rel.count("/") == 1:
            continue
        if top in BUNDLE_TOP[:3] and p.is_file():
            continue
        out.append(rel)
    return out


def check_dir_target(out_dir: Path, also: tuple[str, ...] = ()) -> None:
    """Refuse an --out-dir that cannot become a bundle before any work is done: a file, or a
    location below a file or where no files can be created. `also`: other files this run writes
    inside it (an -o FILE there)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(out_dir, "--out-dir: is not a directory")
    _check_dir_chain(Path(os.path.realpath(out_dir)), out_dir, "--out-dir")
    real = Path(os.path.realpath(out_dir))
    if real.is_dir():
        if real == real.parent:
            raise UsageError(out_dir, "--out-dir: cannot replace the root directory")
        _check_dir_chain(real.parent, out_dir, "--out-dir")


def _move_files_in(tmp: Path, target: Path, files, old_own: list[str]) -> None:
    """The directory holds files traceview did not write: keep them, rename each staged file into
    place and remove the bundle files of an earlier run that this one did not write."""
    new = {rel for rel, _ in files}
    for rel, _ in files:
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / rel, target / rel)
    for rel in old_own:
        if rel not in new and (target / rel).is_file():
            os.unlink(target / rel)


def _own_files(directory: Path) -> list[str]:
    """Files in an existing bundle directory that traceview writes (report.*, charts/*.svg|png)."""
    out = []
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if p.is_file() and (rel in BUNDLE_TOP[:3] or (rel.startswith("charts/") and rel.count("/") == 1
                                                       and p.suffix in (".svg", ".png"))):
            out.append(rel)
    return out


def write_tree(files: list[tuple[str, str | bytes | Pieces]], out_dir: Path) -> None:
    """Write (relative path, content) pairs as the directory `out_dir`, all or nothing."""
    out_dir = Path(out_dir)
    target = Path(os.path.realpath(out_dir))      # a symlink to a directory: replace what it names
    tmp = old = None
    with _signals_raise():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
            mode = stat.S_IMODE(os.stat(target).st_mode) if target.is_dir() else 0o777 & ~_umask()
            fmode = 0o666 & ~_umask()
            for i, (rel, data) in enumerate(files):
                p = tmp / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                _write_new(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), str(p), data)
                os.chmod(p, fmode)
                if i == 0:
                    _test_delay()
            for d in [tmp, *(q for q in tmp.rglob("*") if q.is_dir())]:
                os.chmod(d, mode)
            with _signals_held():
                foreign = _bundle_leftovers(target, {rel for rel, _ in files}) if target.is_dir() else []
                if foreign:
                    _move_files_in(tmp, target, files, _own_files(target))
                elif target.exists():
                    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
                    os.rename(target, old / "bundle")
                    try:
                        os.rename(tmp, target)
                    except OSError:
                        os.rename(old / "bundle", target)      # put the previous bundle back
                        raise
                else:
                    os.rename(tmp, target)
                if not foreign:
                    tmp = None         # moved in whole (else the emptied staging folder is removed)
        except OSError as e:
            raise UsageError(out_dir, f"cannot write output ({_reason(e)})") from e
        finally:
            with _signals_held():
                for leftover in (tmp, old):
                    if leftover is not None:
                        shutil.rmtree(leftover, ignore_errors=True)
