"""Where a mapped job's scratch folder lies (mapped.start_job): the tables the workers of a local pool
hand to this process (Arrow IPC files, memory-mapped, removed at the end of the run) go to a
RAM-backed folder (`/dev/shm`) when there is one with room, else into the store as before.

The scratch of a job is written once, read once or twice and removed within the run: on a disk it
costs the file system's journal, and on a machine whose disk is slow or busy (a shared node, a VM
whose deletes are discards) the writes and the removal of some thousand files cost more wall time
than the analysis's CPU. In RAM they cost the copy. A Dask run keeps its scratch in the store: its
workers on other nodes must see it.

`TRACEVIEW_SCRATCH_DIR` names the folder to use, made where it is missing (`store`: beside the
store, as before; a folder that cannot be made or written is one line and exit 2). Without it,
`/dev/shm` is used when it is a writable folder whose free space is at least twice the job's
estimated scratch and the estimate is at most a quarter of the memory available (MemAvailable):
the estimate is SCRATCH_PER_BYTE times the input's bytes (GZ_PER_BYTE for gzip-compressed files).
A run that is killed leaves its folder behind: folders of this naming whose process is gone are
removed at the start of the next run (`prune`).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from .errors import UsageError

ENV = "TRACEVIEW_SCRATCH_DIR"
SHM = Path("/dev/shm")
SCRATCH_PER_BYTE = 4       # a job's scratch per input byte (64-rank generated job: 59 MB for 17 MB, 3.5x)
GZ_PER_BYTE = 60           # per byte of a gzip-compressed trace (JSON inflates 10-15x; tables ~4x of that)
PREFIX = "traceview-"
_OURS = re.compile(r"^traceview-(?:run|scratch)-(\d+)-")


def estimate(files: list[Path]) -> int:
    """The job's scratch in bytes at most, from its input files' sizes."""
    total = 0
    for f in files:
        try:
            size = os.stat(f).st_size
        except OSError:
            continue
        total += size * (GZ_PER_BYTE if str(f).endswith(".gz") else SCRATCH_PER_BYTE)
    return total


def mem_available() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 where it cannot be read)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def root(files: list[Path], distributed: bool, shm: Path = SHM) -> Path | None:
    """The folder the job's scratch goes under, or None for the store (its `scratch/` folder)."""
    chosen = os.environ.get(ENV)
    if chosen:
        return None if chosen == "store" else _usable(Path(chosen))
    if distributed or not shm.is_dir() or not os.access(shm, os.W_OK | os.X_OK):
        return None
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    need = estimate(files)
    if 2 * need > st.f_bavail * st.f_frsize or 4 * need > mem_available():
        return None
    prune(shm)
    return shm


def _usable(folder: Path) -> Path:
    """The folder the environment names, made where it is missing; one that cannot be made or
    written is a usage error (one line, exit 2)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable")
    except OSError as e:
        raise UsageError(folder, f"cannot use as the scratch folder ({ENV}): {e.strerror or e}") from None
    return folder


def name(kind: str) -> str:
    """A folder name of this process's (kind: run or scratch), which prune recognizes."""
    return f"{PREFIX}{kind}-{os.getpid()}-"


def prune(folder: Path) -> list[str]:
    """Remove the folders a killed run of traceview left in `folder` (their process is gone);
    the names removed."""
    gone: list[str] = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return gone
    for entry in entries:
        m = _OURS.match(entry)
        if m is None or _alive(int(m.group(1))):
            continue
        shutil.rmtree(folder / entry, ignore_errors=True)
        gone.append(entry)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:             # another user's process: alive
        return True
    return True
