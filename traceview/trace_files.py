"""Which files of the paths given are traces, in a stable order (a directory means every trace file
in it). Imports no table library: the kept document of a job (job_cache) is found from these
paths before anything else is imported."""
from __future__ import annotations

from pathlib import Path

from .errors import TraceError
from .parsers.bounded_read import check_regular

KINETO_SUFFIXES = (".json", ".json.gz")
NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")


def is_trace_file(p: Path) -> bool:
    n = p.name.lower()
    if n.endswith(".meta.json"):
        return False
    return n.endswith(KINETO_SUFFIXES) or n.endswith(NSYS_SUFFIXES)


def expand(paths: list[str | Path]) -> list[Path]:
    """Files to read, in a stable order. A directory means every trace file in it."""
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise TraceError(p, "no such file or directory")
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and is_trace_file(f))
            # prefer the SQLite export over a report when both exist for the same capture
            stems = {f.name[: -len(".sqlite")] for f in found if f.name.endswith(".sqlite")}
            found = [f for f in found if not (f.suffix in (".nsys-rep", ".qdrep") and f.stem in stems)]
            if not found:
                raise TraceError(p, "directory holds no trace files (.json, .json.gz, .sqlite, .nsys-rep)")
            files.extend(found)
        else:
            check_regular(p)  # a FIFO, device or socket is refused before anything reads it
            files.append(p)
    return files
