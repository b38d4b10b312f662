"""The store: each trace file's canonical tables as Parquet (zstd), Hive-partitioned by rank, so a
second run over the same job reads them back instead of parsing the trace again.

Layout (STORE_SCHEMA_VERSION 1)::

    DIR/entries/<key>/manifest.json                      source, size, mtime, content hash, format, ...
    DIR/entries/<key>/<table>/rank=<r>/part-0.parquet    one file per table and rank of that trace
    DIR/locks/<key>.lock                                 fcntl lock held while a trace is parsed and stored
    DIR/exports/<key>.<stamp>.sqlite                     SQLite export of an Nsight Systems report (.nsys-rep)

An entry is written into a temporary folder and renamed into place (atomic); the manifest records the
size and hash of every Parquet file, so a truncated or altered entry is never read as a smaller
answer: it is parsed again and rebuilt. A trace whose size, mtime or content changed is parsed again;
an entry of another store schema version or traceview version is rebuilt.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from . import schema

STORE_SCHEMA_VERSION = 1
ENV_DIR = "TRACEVIEW_CACHE_DIR"
_CHUNK = 1 << 20


def default_dir(inputs: list[Path]) -> Path:
    """TRACEVIEW_CACHE_DIR when set; else `.traceview/` beside the first input when that folder is
    writable; else the per-user cache ($XDG_CACHE_HOME/traceview, ~/.cache/traceview)."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    if inputs:
        first = Path(inputs[0])
        parent = first if first.is_dir() else first.parent
        if _writable(parent):
            return parent / ".traceview"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "traceview"


def _writable(folder: Path) -> bool:
    """Writable for this user, by the permission bits too (root passes os.access everywhere: a
    folder nobody may write to is not taken as writable)."""
    try:
        st = folder.stat()
    except OSError:
        return False
    return os.access(folder, os.W_OK) and bool(st.st_mode & 0o222)


def file_hash(path: Path) -> str:
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _version() -> str:
    from . import __version__
    return __version__


@dataclass
class Stored:
    """One trace file's tables and warnings, as parsed (before ranks are assigned across files)."""
    tables: dict[str, pa.Table]
    warnings: list[str]
    max_id: int | None = None        # lookup_light: the largest row id (the other tables are left empty)


class Store:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.entries = self.root / "entries"
        self.locks = self.root / "locks"

    # -- keys ------------------------------------------------------------------------------------
    @staticmethod
    def key(path: Path) -> str:
        full = str(Path(path).resolve())
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in Path(path).name)[:48]
        return f"{hashlib.sha256(full.encode('utf-8', 'surrogateescape')).hexdigest()[:20]}-{safe}"

    def _ensure(self) -> None:
        self.entries.mkdir(parents=True, exist_ok=True)
        self.locks.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def lock(self, path: Path):
        """Exclusive lock on one trace's entry (another run parsing the same trace waits, then reads)."""
        self._ensure()
        with open(self.locks / f"{self.key(path)}.lock", "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    # -- read ------------------------------------------------------------------------------------
    def _current(self, path: Path) -> tuple[Path, dict] | None:
        """(entry folder, manifest) of `path` when the manifest is of this version and describes the
        trace as it is now, else None (the Parquet files are checked when they are read)."""
        entry = self.entries / self.key(path)
        try:
            man = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(man, dict) or man.get("store_schema_version") != STORE_SCHEMA_VERSION \
                or man.get("traceview_version") != _version() or not self._source_matches(path, man, entry):
            return None
        return entry, man

    def lookup(self, path: Path) -> Stored | None:
        """The stored tables of `path`, or None when absent, stale, of another version or damaged."""
        current = self._current(path)
        if current is None:
            return None
        entry, man = current
        tables = {}
        try:
            for name, parts in man["tables"].items():
                pieces = []
                for part in parts:
                    f = entry / part["file"]
                    if f.stat().st_size != part["size"] or file_hash(f) != part["hash"]:
                        return None
                    t = pq.read_table(f)
                    if t.num_rows != part["rows"]:
                        return None
                    pieces.append(t)
                tables[name] = _restore(name, pieces)
        except (OSError, KeyError, TypeError, ValueError, pa.ArrowException):
            return None
        if set(tables) != set(schema.TABLES):
            return None
        as_given = man.get("path_as_given")
        warnings = [w.replace(as_given, str(path)) if as_given and as_given != str(path) else w
                    for w in man.get("warnings", [])]
        return Stored(tables, warnings)

    def lookup_light(self, path: Path) -> Stored | None:
        """The stored meta table and warnings of `path` with its other tables empty, and the largest
        row id it holds (`Stored.max_id`), reading only the meta and id columns: what the parent of a
        mapped run needs to place the trace in its job (the worker that reads the tables checks them)."""
        current = self._current(path)
        if current is None:
            return None
        entry, man = current
        tables = {name: schema.empty(name) for name in schema.TABLES}
        try:
            meta = [pq.read_table(entry / part["file"]) for part in man["tables"]["meta"]]
            tables["meta"] = _restore("meta", meta)
            max_id = man.get("max_id")
            if not isinstance(max_id, int):         # an entry written before the manifest kept it
                max_id = -1
                for name in _ID_TABLES:
                    for part in man["tables"][name]:
                        if part["rows"]:
                            ids = pq.read_table(entry / part["file"], columns=["id"]).column("id")
                            m = pa.compute.max(ids).as_py()
                            max_id = max(max_id, -1 if m is None else m)
        except (OSError, KeyError, TypeError, ValueError, pa.ArrowException):
            return None
        as_given = man.get("path_as_given")
        warnings = [w.replace(as_given, str(path)) if as_given and as_given != str(path) else w
                    for w in man.get("warnings", [])]
        return Stored(tables, warnings, max_id)

    def source_hash(self, path: Path) -> str | None:
        """The content hash of `path` when the store holds its current tables (by the manifest;
        the Parquet files are checked when they are read), else None."""
        current = self._current(path)
        return None if current is None else current[1]["source"].get("hash")

    # -- finished documents of a whole job -------------------------------------------------------
    def get_document(self, key: str) -> dict | None:
        try:
            got = json.loads((self.root / "jobs" / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return got.get("document") if isinstance(got, dict) and got.get("key") == key else None

    def put_document(self, key: str, doc: dict) -> bool:
        """Keep the finished document of a job, when JSON gives it back exactly (else nothing)."""
        try:
            text = json.dumps({"key": key, "document": doc}, sort_keys=False)
            if json.loads(text)["document"] != doc:
                return False
            folder = self.root / "jobs"
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, folder / f"{key}.json")
            return True
        except (OSError, TypeError, ValueError):
            return False

    def _source_matches(self, path: Path, man: dict, entry: Path) -> bool:
        try:
            st = Path(path).stat()
        except OSError:
            return False
        src = man.get("source", {})
        if src.get("path") != str(Path(path).resolve()) or src.get("size") != st.st_size:
            return False
        if src.get("mtime_ns") == st.st_mtime_ns:
            return True
        # touched but maybe not changed: the content hash decides (and the manifest learns the mtime)
        if file_hash(Path(path)) != src.get("hash"):
            return False
        src["mtime_ns"] = st.st_mtime_ns
        self._write_manifest(entry, man)
        return True

    # -- write -----------------------------------------------------------------------------------
    def put(self, path: Path, stored: Stored, before: os.stat_result, content_hash: str) -> bool:
        """Store the tables parsed from `path` (stat taken before parsing). Nothing is stored when the
        trace changed while it was parsed. True when stored."""
        try:
            after = Path(path).stat()
        except OSError:
            return False
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            return False
        self._ensure()
        key = self.key(path)
        tmp = self.entries / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            tmp.mkdir()
            tables = {name: _write_partitions(tmp, name, stored.tables[name]) for name in schema.TABLES}
            meta = stored.tables["meta"]
            man = {
                "store_schema_version": STORE_SCHEMA_VERSION,
                "traceview_version": _version(),
                "source": {"path": str(Path(path).resolve()), "size": before.st_size,
                           "mtime_ns": before.st_mtime_ns, "hash": content_hash},
                "path_as_given": str(path),
                "format": sorted(set(meta.column("source_format").to_pylist())),
                "ranks": meta.column("rank").to_pylist(),
                "clock_offset_ns": meta.column("clock_offset_ns").to_pylist(),
                "warnings": list(stored.warnings),
                "max_id": max_id(stored.tables),
                "tables": tables,
            }
            self._write_manifest(tmp, man)
            self._publish(tmp, self.entries / key)
            return True
        except (OSError, ValueError, TypeError, pa.ArrowException):
            shutil.rmtree(tmp, ignore_errors=True)
            return False

    @staticmethod
    def _write_manifest(entry: Path, man: dict) -> None:
        tmp = entry / f".manifest-{uuid.uuid4().hex[:8]}"
        tmp.write_text(json.dumps(man, indent=1), encoding="utf-8")
        os.replace(tmp, entry / "manifest.json")

    @staticmethod
    def _publish(tmp: Path, final: Path) -> None:
        if final.exists():
            old = final.with_name(f".old-{final.name}-{uuid.uuid4().hex[:8]}")
            os.rename(final, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, final)

    # -- SQLite exports of Nsight Systems reports ------------------------------------------------
    @property
    def exports(self) -> Path:
        return self.root / "exports"

    def export_prefix(self, report: Path) -> str:
        """The start of the name of every export of `report` (whatever its version)."""
        return f"{self.key(report)}."

    def export_path(self, report: Path) -> Path:
        """Where the SQLite export of `report` as it is now (size, mtime) lies or will lie. It is made
        (atomically, by the nsys parser) while the store's lock on `report` is held."""
        st = Path(report).stat()
        stamp = hashlib.sha256(f"{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
        return self.exports / f"{self.export_prefix(report)}{stamp}.sqlite"

    # -- housekeeping ----------------------------------------------------------------------------
    def check(self) -> list[str]:
        """Problems found in the store (empty when every entry is whole): for tests and `--debug`."""
        problems: list[str] = []
        if not self.entries.exists():
            return problems
        for entry in sorted(self.entries.iterdir()):
            if entry.name.startswith("."):
                problems.append(f"{entry}: leftover temporary folder")
                continue
            try:
                man = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
                for parts in man["tables"].values():
                    for part in parts:
                        f = entry / part["file"]
                        if f.stat().st_size != part["size"] or file_hash(f) != part["hash"]:
                            problems.append(f"{f}: does not match the manifest")
                        elif pq.read_metadata(f).num_rows != part["rows"]:
                            problems.append(f"{f}: row count differs from the manifest")
            except (OSError, KeyError, ValueError, pa.ArrowException) as e:
                problems.append(f"{entry}: {e}")
        return problems


_ID_TABLES = ("gpu_activities", "cpu_ranges", "launches", "syncs")


def max_id(tables: dict[str, pa.Table]) -> int:
    """The largest row id over the tables with ids (-1 when they are empty): where profile.merge
    starts the next file's ids."""
    m = -1
    for name in _ID_TABLES:
        t = tables[name]
        if t.num_rows:
            v = pa.compute.max(t.column("id")).as_py()
            m = max(m, -1 if v is None else v)
    return m


def light(stored: Stored) -> Stored:
    """`stored` as lookup_light gives it: the meta table, warnings and largest id."""
    return Stored({name: stored.tables[name] if name == "meta" else schema.empty(name) for name in schema.TABLES},
                  list(stored.warnings), max_id(stored.tables))


_ORDER = "__traceview_row"


def _write_partitions(entry: Path, name: str, table: pa.Table) -> list[dict]:
    """One Parquet file per rank (Hive-style folders rank=<r>); the row order of the whole table is
    kept (a multi-rank file may interleave ranks) by a row-number column when the ranks are not
    already in order."""
    ranks = table.column("rank").to_pylist()
    distinct = sorted(set(ranks)) or [None]
    ordered = all(a <= b for a, b in zip(ranks, ranks[1:], strict=False))
    if not ordered:
        table = table.append_column(_ORDER, pa.array(range(table.num_rows), pa.int64()))
    out = []
    import pyarrow.compute as pc
    for r in distinct:
        part = table if r is None or len(distinct) == 1 else table.filter(pc.equal(table.column("rank"), r))
        rel = f"{name}/rank={'none' if r is None else r}/part-0.parquet"
        f = entry / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, f, compression="zstd")
        out.append({"file": rel, "rows": part.num_rows, "size": f.stat().st_size, "hash": file_hash(f)})
    return out


def _restore(name: str, pieces: list[pa.Table]) -> pa.Table:
    t = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
    if _ORDER in t.column_names:
        import pyarrow.compute as pc
        t = t.take(pc.sort_indices(t.column(_ORDER))).drop_columns([_ORDER])
    want = schema.TABLES[name]
    if not t.schema.equals(want, check_metadata=True):
        t = t.cast(want)
    return t.combine_chunks()
