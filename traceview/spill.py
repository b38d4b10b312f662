"""A parsed file's canonical tables written uncompressed beside a mapped job's scratch folder by
the parse task (executors.py), and read back, memory-mapped, by the place round (mapped.py): the
place round then needs neither the store's Parquet nor a decode of it."""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa

from . import schema


def spill_folder(spill: Path, index: int) -> Path:
    return spill / f"{index:06d}"


def spill_tables(folder: Path, tables: dict[str, pa.Table]) -> None:
    """A parsed file's canonical tables as Arrow IPC files in `folder`, each as the store gives it
    back (its schema's types, one chunk: store._restore), the folder renamed into place whole. A
    folder there already (an earlier attempt at the same file) is kept."""
    if folder.exists():
        return
    tmp = folder.with_name(f".{folder.name}.{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    from .store import as_read_back
    for name in schema.TABLES:
        t = as_read_back(name, tables[name])
        with pa.OSFile(str(tmp / f"{name}.arrow"), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
            w.write_table(t)
    try:
        os.replace(tmp, folder)
    except OSError:                      # another attempt renamed its folder first
        shutil.rmtree(tmp, ignore_errors=True)


def read_spill(folder: Path) -> dict[str, pa.Table] | None:
    """The tables spill_tables wrote in `folder` (memory-mapped), or None where there are none."""
    if not folder.is_dir():
        return None
    return {name: pa.ipc.open_file(pa.memory_map(str(folder / f"{name}.arrow"))).read_all()
            for name in schema.TABLES}
