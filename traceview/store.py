"""The store: each trace file's canonical tables as Parquet (zstd), Hive-partitioned by rank, so a
second run over the same job reads them back instead of parsing the trace again.

Layout (STORE_SCHEMA_VERSION 2)::

    DIR/entries/<key>/manifest.json                      source, size, mtime, content hash, format, ...
    DIR/entries/<key>/rank=<r>/<table>.parquet           one file per table and rank of that trace
    DIR/locks/<key>.lock                                 fcntl lock held while a trace is parsed and stored
    DIR/exports/<key>.<stamp>.sqlite                     SQLite export of an Nsight Systems report (.nsys-rep)
    DIR/jobs/<job key>.<what>.kept                       a whole job's document (zstd frames) and rendered reports
    DIR/jobs/<job key>.<what>.payload                    a kept report that is a link of the file it was written to

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
import stat
import threading
import uuid
import zlib
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow is imported where the tables are read or written: a second run served from the kept
# document of its job (job_cache) reads manifests and that document only.

from .code_stamp import code_stamp

STORE_SCHEMA_VERSION = 2     # 2: rank=<r>/<table>.parquet (1: <table>/rank=<r>/part-0.parquet)
KEPT_FORMAT = "traceview.kept/2"    # 2: the payload checked by its CRC-32 (1: its SHA-256)
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
    return user_dir()


def user_dir() -> Path:
    """The per-user cache: $XDG_CACHE_HOME/traceview, else ~/.cache/traceview."""
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


def _hasher():
    """The store's content hash (of a trace, and of each table file)."""
    return hashlib.blake2b(digest_size=20)


def file_hash(path: Path) -> str:
    h = _hasher()
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

    def __reduce__(self):
        # a light one (a worker's answer to the parent of a mapped job, 1,024 of them) travels as
        # its meta table alone: its empty tables come back as the shared ones of this process
        if self.max_id is not None and all(n == "meta" or t.num_rows == 0 and t.schema == _empty(n).schema
                                           for n, t in self.tables.items()):
            return _light_stored, (self.tables.get("meta"), self.warnings, self.max_id, sorted(self.tables))
        return Stored, (self.tables, self.warnings, self.max_id)


def _empty(name: str) -> pa.Table:
    """The canonical empty table `name`, one object per process (tables are immutable)."""
    got = _EMPTIES.get(name)
    if got is None:
        from . import schema
        got = _EMPTIES[name] = schema.empty(name)
    return got


_EMPTIES: dict[str, pa.Table] = {}


def _light_stored(meta, warnings: list[str], max_id: int, names: list[str]) -> Stored:
    return Stored({n: meta if n == "meta" else _empty(n) for n in names}, warnings, max_id)


def _kept_head(f, key: str, what: str) -> tuple[bytes, dict | None]:
    """The header line of an open kept file and its fields, or (line, None) where they do not name
    (key, what) in this format or the size they give is not what follows them (nothing follows a
    linked one's: its payload is a file of its own, `_linked_payload`)."""
    line = f.readline(4096)
    head = json.loads(line)
    if not isinstance(head, dict) or head.get("format") != KEPT_FORMAT or head.get("key") != key \
            or head.get("what") != what or not isinstance(head.get("size"), int):
        return line, None
    head["linked"] = head.get("linked") is True
    follows = os.fstat(f.fileno()).st_size - len(line)
    if follows != (0 if head["linked"] else head["size"]):
        return line, None
    return line, head


def _linked_payload(path: Path, head: dict):
    """The open payload file of a linked kept header (`head`) where it is the size the header
    gives; else None."""
    try:
        f = open(path, "rb")
    except OSError:
        return None
    try:
        if os.fstat(f.fileno()).st_size == head["size"]:
            return f
    except OSError:
        pass
    f.close()
    return None


class KeptChanged(OSError):
    """A kept payload read piece by piece did not have the CRC-32 of its header (Store.open_kept
    with check="as read"): raised when the pieces are all read, before the iteration ends."""


# The kept document's msgpack is written in frames compressed with zstd (level 1): a 1,024-rank
# job's document is some 500 MB of rows whose keys repeat in every row, and writing the pages
# costs more than compressing them (zstd here: about 5 GB/s). A frame: its compressed and
# uncompressed sizes (8 bytes each, little-endian), then the compressed bytes. The kept file's
# CRC-32 and size are those of the frames as written; the header's info names the codec.
FRAMES = "zstd-frames/1"
FRAME_BYTES = 8 << 20        # uncompressed bytes gathered into one frame


def _frame_codec():
    """Arrow's zstd codec at level 1, or None where this pyarrow has none (kept uncompressed)."""
    try:
        import pyarrow as pa
        return pa.Codec("zstd", compression_level=1) if pa.Codec.is_available("zstd") else None
    except Exception:  # noqa: BLE001 - no codec: the document is kept as it is
        return None


def _framed(pieces, codec):
    """The bytes of `pieces` as frames of about FRAME_BYTES each, compressed with `codec`."""
    buf = bytearray()

    def frame() -> bytes:
        packed = codec.compress(buf, asbytes=True)
        return len(packed).to_bytes(8, "little") + len(buf).to_bytes(8, "little") + packed
    for piece in pieces:
        buf += piece
        if len(buf) >= FRAME_BYTES:
            yield frame()
            buf.clear()
    if buf:
        yield frame()


def _frames(view: memoryview):
    """(start of the compressed bytes, their length, the uncompressed length) of each frame."""
    at = 0
    while at < len(view):
        if at + 16 > len(view):
            raise ValueError("a frame's sizes cut short")
        packed, size = int.from_bytes(view[at:at + 8], "little"), int.from_bytes(view[at + 8:at + 16], "little")
        if at + 16 + packed > len(view):
            raise ValueError("a frame cut short")
        yield at + 16, packed, size
        at += 16 + packed


def _unframed(data: bytes) -> bytearray:
    """The bytes _framed compressed, in one buffer of their size (no second copy of a large
    document); ValueError where the frames do not add up."""
    import pyarrow as pa
    codec = pa.Codec("zstd")
    view = memoryview(data)
    out = bytearray(sum(size for _, _, size in _frames(view)))
    pos = 0
    for at, packed, size in _frames(view):
        got = codec.decompress(view[at:at + packed], decompressed_size=size)
        if got.size != size:
            raise ValueError("a frame of another size")
        out[pos:pos + size] = memoryview(got)
        pos += size
    return out


class KeptPayload:
    """A kept payload opened by Store.open_kept: its pieces read from the open file (`for piece
    in payload`, each time from the start), never the whole in memory; `info` as get_kept gives it.
    `crc`: the CRC-32 its pieces must have (checked as they are read: KeptChanged, where they do
    not, after the last piece and before the iteration ends), or None where it was checked when
    opened."""

    PIECE = 1 << 24

    def __init__(self, f, start: int, size: int, info: dict, crc: int | None = None):
        self._f, self._start, self.size, self.info, self._crc = f, start, size, info, crc

    def __iter__(self):
        off, end = self._start, self._start + self.size
        crc = 0
        while off < end:
            piece = os.pread(self._f.fileno(), min(self.PIECE, end - off), off)
            if not piece:
                raise OSError(f"{self._f.name}: shorter than when it was checked")
            off += len(piece)
            if self._crc is not None:
                crc = zlib.crc32(piece, crc)
            yield piece
        if self._crc is not None and crc != self._crc:
            raise KeptChanged(f"{self._f.name}: not what it was when kept")

    def holds(self, path: Path) -> bool:
        """Whether the regular file at `path` is this payload's own file (a JSON report kept by a
        link of the file it was written to: Store.keep_linked), its bytes checked (`check`)."""
        if self._start:
            return False
        try:
            mine, there = os.fstat(self._f.fileno()), os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISREG(there.st_mode) or (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino) \
                or there.st_size != self.size:
            return False
        self.check()
        return True

    def check(self) -> None:
        """Read it once for its CRC-32 where it is to be checked as read (KeptChanged where it is
        not what was kept, OSError where it is shorter); from then on its pieces are given as read."""
        if self._crc is not None:
            for _ in self:
                pass
            self._crc = None

    def close(self) -> None:
        self._f.close()


class KeptWriter:
    """What Store.kept_writer gives: the pieces go to a file beside the kept one after a header
    line of fixed width (blank until commit, which writes the size and CRC-32 taken as the pieces
    came, padded with spaces, over it), and the file is then renamed into place. A write that
    fails keeps nothing (commit says False), and never fails the caller."""

    HEAD = 2048                      # bytes of the header line, its newline included

    def __init__(self, store: Store, key: str, what: str, info: dict | None):
        self._store, self._key, self._what, self._info = store, key, what, info or {}
        self._folder = store.root / "jobs"
        self._tmp = self._folder / f".tmp-{key}.{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._crc, self._size = 0, 0
        self._f: BinaryIO | None = None
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            self._f = open(self._tmp, "wb")
            self._f.write(b" " * (self.HEAD - 1) + b"\n")
        except OSError:
            self.abort()

    def write(self, piece) -> None:
        if self._f is None:
            return
        try:
            self._crc = zlib.crc32(piece, self._crc)
            self._size += memoryview(piece).nbytes
            self._f.write(piece)
        except (OSError, TypeError, ValueError):
            self.abort()

    def abort(self) -> None:
        if self._f is not None:
            with suppress(OSError):
                self._f.close()
            self._f = None
        with suppress(OSError):
            self._tmp.unlink()

    def commit(self, expect: tuple[int, int] | None = None) -> bool:
        """Keep what was written (renamed into place); `expect`: the (size, CRC-32) it must have,
        else nothing is kept."""
        if self._f is None or expect is not None and (self._size, self._crc) != expect:
            self.abort()
            return False
        try:
            head = {"format": KEPT_FORMAT, "key": self._key, "what": self._what, "size": self._size,
                    "crc32": self._crc, "info": self._info}
            line = json.dumps(head, sort_keys=True).encode()
            if len(line) >= self.HEAD:
                return False
            self._f.seek(0)
            self._f.write(line.ljust(self.HEAD - 1) + b"\n")
            self._f.close()
            self._f = None
            os.replace(self._tmp, self._store._kept_path(self._key, self._what))
            with suppress(OSError):     # a linked payload kept before under this name: not needed now
                self._store._payload_path(self._key, self._what).unlink()
            return True
        except (OSError, TypeError, ValueError):
            return False
        finally:
            self.abort()


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
        trace as it is now, else None (the Parquet files are checked when they are read). A put of
        `path` still under way in this process (put_behind) is waited for first."""
        settle(path)
        entry = self.entries / self.key(path)
        try:
            man = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(man, dict) or man.get("store_schema_version") != STORE_SCHEMA_VERSION \
                or man.get("traceview_version") != _version() or man.get("code") != code_stamp() \
                or not self._source_matches(path, man, entry):
            return None
        return entry, man

    def holds(self, path: Path) -> bool:
        """Whether the store holds `path` as it is now (its manifest only: the tables are checked
        when they are read)."""
        return self._current(path) is not None

    def lookup(self, path: Path) -> Stored | None:
        """The stored tables of `path`, or None when absent, stale, of another version or damaged."""
        current = self._current(path)
        if current is None:
            return None
        entry, man = current
        import pyarrow as pa
        import pyarrow.parquet as pq

        from . import schema
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
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from . import schema
        tables = {name: _empty(name) for name in schema.TABLES}
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
                            m = pc.max(ids).as_py()
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

    # -- what is kept of a whole job: its document and its rendered reports ----------------------
    # DIR/jobs/<key>.<what>.kept: one header line (JSON: key, what, size and CRC-32 of the payload,
    # what the caller attached), then the payload; written beside and renamed into place. `what` is
    # "document" (msgpack of the document, its dict order kept, in zstd frames: FRAMES) or a report
    # format (the bytes written out). A file whose header, size or hash does not match is not read (absent).
    #
    # A report written to a file on the store's filesystem is kept as a link of that file, not a
    # second copy (`keep_linked`): the header alone in <key>.<what>.kept ("linked": true, the
    # payload's size and CRC-32) and the payload in <key>.<what>.payload, the very file the user
    # has. Where that file is changed in place since, it is no longer what its CRC-32 says and is
    # not read (absent), as a damaged kept file is not; one removed, or replaced by a rename (as
    # every write of traceview's replaces a file), leaves the kept link as it was.
    def _kept_path(self, key: str, what: str) -> Path:
        return self.root / "jobs" / f"{key}.{what}.kept"

    def _payload_path(self, key: str, what: str) -> Path:
        return self.root / "jobs" / f"{key}.{what}.payload"

    def _open_payload(self, key: str, what: str) -> tuple | None:
        """(open file, where the payload starts in it, header) of what is kept under (key, what):
        the kept file after its header, or a linked one's payload file; None where the header or
        the size does not match (not checked: the CRC-32, which get_kept and open_kept check)."""
        try:
            f = open(self._kept_path(key, what), "rb")
        except OSError:
            return None
        try:
            line, head = _kept_head(f, key, what)
            if head is None:
                f.close()
                return None
            if not head["linked"]:
                return f, len(line), head
            f.close()
            pf = _linked_payload(self._payload_path(key, what), head)
            return None if pf is None else (pf, 0, head)
        except (OSError, ValueError, TypeError):
            f.close()
            return None

    def get_kept(self, key: str, what: str) -> tuple[bytes, dict] | None:
        """(payload, attached info) of what is kept under `key`, or None (absent or damaged)."""
        got = self._open_payload(key, what)
        if got is None:
            return None
        f, start, head = got
        try:
            with f:
                f.seek(start)
                payload = f.read(head["size"])      # (read() would join chunks: twice the size at its peak)
        except (OSError, ValueError, TypeError):
            return None
        if len(payload) != head["size"] or zlib.crc32(payload) != head.get("crc32"):
            return None
        info = head.get("info")
        return payload, info if isinstance(info, dict) else {}

    def open_kept(self, key: str, what: str, check: str = "first") -> KeptPayload | None:
        """What get_kept gives, checked the same way (its size and CRC-32) but not read into memory:
        a KeptPayload reads it piece by piece from the file opened here (a kept file is only ever
        replaced by a rename, so that file keeps what was checked). `check`: "first" reads it once
        here to check it; "as read" checks its size here and its CRC-32 as its pieces are read
        (KeptChanged once they are all read, before the iteration ends: for a writer that puts
        nothing in place until it has them all, one pass instead of two). None: absent or damaged.
        The caller closes it."""
        got = self._open_payload(key, what)
        if got is None:
            return None
        f, start, head = got
        try:
            if not isinstance(head.get("crc32"), int):
                f.close()
                return None
            info = head.get("info")
            payload = KeptPayload(f, start, head["size"], info if isinstance(info, dict) else {},
                                  crc=head["crc32"])
            if check != "as read":
                payload.check()
            return payload
        except (OSError, ValueError, TypeError):
            f.close()
            return None

    def put_kept(self, key: str, what: str, payload: bytes, info: dict | None = None) -> bool:
        """Keep `payload` under (key, what), replacing what was there; False when it cannot be written."""
        return self.put_kept_pieces(key, what, [payload], info)

    def put_kept_pieces(self, key: str, what: str, pieces, info: dict | None = None) -> bool:
        """put_kept of b"".join(pieces) (an iterable of bytes-like pieces), never joined in memory."""
        w = self.kept_writer(key, what, info)
        try:
            for piece in pieces:
                w.write(piece)
        except BaseException:
            w.abort()
            raise
        return w.commit()

    def can_link(self, folder: Path) -> bool:
        """Whether a file written in `folder` may be kept by a link of it (`keep_linked`): the
        store's jobs folder can be made and lies on the same filesystem."""
        try:
            jobs = self.root / "jobs"
            jobs.mkdir(parents=True, exist_ok=True)
            return os.stat(jobs).st_dev == os.stat(folder).st_dev
        except OSError:
            return False

    def keep_linked(self, key: str, what: str, src: Path, size: int, crc: int, info: dict | None = None) -> bool:
        """Keep the file `src` (`size` bytes of CRC-32 `crc`, as they were written to it) under
        (key, what) by a link of it, not a copy; False, and nothing kept, where it cannot be linked
        or is not that size. The payload goes in place first, then the header naming it: a reader
        between the two finds a header and a payload that do not match (absent)."""
        jobs = self.root / "jobs"
        stamp = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp_payload = jobs / f".tmp-{key}.{what}-{stamp}.payload"
        tmp_head = jobs / f".tmp-{key}.{what}-{stamp}.head"
        try:
            jobs.mkdir(parents=True, exist_ok=True)
            os.link(src, tmp_payload)
            if os.stat(tmp_payload).st_size != size:
                return False
            head = {"format": KEPT_FORMAT, "key": key, "what": what, "size": size, "crc32": crc,
                    "info": info or {}, "linked": True}
            with open(tmp_head, "wb") as f:
                f.write(json.dumps(head, sort_keys=True).encode() + b"\n")
            os.replace(tmp_payload, self._payload_path(key, what))
            os.replace(tmp_head, self._kept_path(key, what))
            return True
        except (OSError, TypeError, ValueError):
            return False
        finally:
            for t in (tmp_payload, tmp_head):
                with suppress(OSError):
                    t.unlink()

    def keep_file(self, key: str, what: str, src: Path, size: int, crc: int, info: dict | None = None) -> bool:
        """Keep the file `src` (`size` bytes of CRC-32 `crc`, as they were written to it) under
        (key, what): by a link of it (`keep_linked`), else by a copy read back from it (a
        filesystem without links), kept only where it is still that size and CRC-32."""
        if self.keep_linked(key, what, src, size, crc, info):
            return True
        w = self.kept_writer(key, what, info)
        try:
            with open(src, "rb") as f:
                while piece := f.read(_CHUNK << 4):
                    w.write(piece)
        except OSError:
            w.abort()
            return False
        return w.commit(expect=(size, crc))

    def kept_writer(self, key: str, what: str, info: dict | None = None) -> KeptWriter:
        """A writer of what is kept under (key, what), piece by piece (`write`), kept by `commit`
        (`abort` keeps nothing): a JSON report is kept as it is written out."""
        return KeptWriter(self, key, what, info)

    def get_document(self, key: str) -> dict | None:
        """The document kept under `key` (put_document), or None."""
        import msgspec
        got = self.get_kept(key, "document")
        if got is None:
            return None
        codec = got[1].get("codec")
        try:
            if codec == FRAMES:
                doc = msgspec.msgpack.decode(_unframed(got[0]))
            elif codec is None:
                doc = msgspec.msgpack.decode(got[0])
            else:
                return None
        except (msgspec.DecodeError, ValueError, TypeError, OSError):
            return None
        return doc if isinstance(doc, dict) else None

    def put_document(self, key: str, doc: dict, info: dict | None = None, shape=None) -> bool:
        """Keep the finished document of a job when msgpack gives it back exactly: plain data of
        exactly dict/list/str/int/float/bool/None (a tuple would come back a list, a subclass or
        another type as something else; rows held packed count as the lists they hold). False,
        and nothing kept, otherwise. `shape`: plain_data.scan(doc) when the caller has it. Written
        a top-level value at a time (document.packed.msgpack_pieces): no whole copy in memory."""
        from .document.packed import msgpack_pieces
        from .plain_data import scan
        shape = scan(doc) if shape is None else shape
        if not shape.plain or shape.tuples or shape.wide_ints or not isinstance(doc, dict):
            return False
        pieces = msgpack_pieces(doc)
        codec = _frame_codec()
        if codec is not None:      # (the msgpack in compressed frames: the info says so)
            pieces, info = _framed(pieces, codec), {**(info or {}), "codec": FRAMES}
        return self.put_kept_pieces(key, "document", pieces, info)

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
        import pyarrow as pa

        from . import schema
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
                "code": code_stamp(),
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

    def put_behind(self, path: Path, stored: Stored, before: os.stat_result, then) -> None:
        """put() (the trace's content hash included) on a thread of its own, while the caller goes
        on: its Parquet encoding and hashing let go of the GIL, so a run's analysis and the store's
        copy of its tables share the cores. `then` (the trace's lock: an ExitStack) is closed when it
        is done. A read of this trace's entry in this process waits for it (_current), and so does
        the end of the run (settle, from executors.configured); nothing is stored where it fails,
        as with put()."""
        key = str(Path(path).resolve())
        _PUT_SLOTS.acquire()            # (a job of many ranks parsed here: a few puts at a time)

        def work() -> None:
            try:
                self.put(path, stored, before, file_hash(path))
            except Exception:          # (put() itself says False for what it expects)
                pass
            finally:
                then.close()
                _PUT_SLOTS.release()
        thread = threading.Thread(target=work, name="traceview-store-put")
        try:
            thread.start()
        except RuntimeError:            # no thread to be had: stored here and now
            work()
            return
        with _PUTTING_LOCK:
            _PUTTING.setdefault(key, []).append(thread)

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
        import pyarrow as pa
        import pyarrow.parquet as pq
        problems: list[str] = []
        if not self.entries.exists():
            return self._check_kept()
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
        return problems + self._check_kept()

    def _check_kept(self) -> list[str]:
        problems = []
        for f in sorted((self.root / "jobs").glob("*")) if (self.root / "jobs").is_dir() else []:
            if f.name.startswith("."):
                problems.append(f"{f}: leftover temporary file")
                continue
            if f.name.endswith(".payload"):      # a linked report's: checked with the header naming it
                key, _, what = f.name.removesuffix(".payload").partition(".")
                if not self._kept_path(key, what).is_file():
                    problems.append(f"{f}: a linked payload without its header")
                continue
            key, _, what = f.name.removesuffix(".kept").partition(".")
            if not f.name.endswith(".kept") or self.get_kept(key, what) is None:
                problems.append(f"{f}: not a whole kept file")
        return problems


_ID_TABLES = ("gpu_activities", "cpu_ranges", "launches", "syncs")


def max_id(tables: dict[str, pa.Table]) -> int:
    """The largest row id over the tables with ids (-1 when they are empty): where profile.merge
    starts the next file's ids (the same rule, profile.max_id)."""
    from .profile import max_id as of_tables
    return of_tables(tables)


def light(stored: Stored) -> Stored:
    """`stored` as lookup_light gives it: the meta table, warnings and largest id."""
    from . import schema
    return Stored({name: stored.tables[name] if name == "meta" else _empty(name) for name in schema.TABLES},
                  list(stored.warnings), max_id(stored.tables))


_ORDER = "__traceview_row"

# the puts under way on threads of this process (Store.put_behind), by the trace's resolved path
_PUTTING: dict[str, list[threading.Thread]] = {}
_PUTTING_LOCK = threading.Lock()
_PUT_SLOTS = threading.BoundedSemaphore(max(2, os.cpu_count() or 2))     # puts under way at most


def settle(path: Path | None = None) -> None:
    """Wait for the puts under way in this process (put_behind): those of `path`, or all."""
    if not _PUTTING:
        return
    with _PUTTING_LOCK:
        if path is None:
            threads = [t for ts in _PUTTING.values() for t in ts]
            _PUTTING.clear()
        else:
            threads = _PUTTING.pop(str(Path(path).resolve()), [])
    for t in threads:
        if t is not threading.current_thread():
            t.join()


def parquet_options(schema: pa.Schema) -> dict:
    """How the store encodes a table: zstd; dictionary encoding for the columns that are dictionaries
    in Arrow (kernel and op names, kinds: few values, read back as dictionaries) and for no other
    column (ids, times, counts are mostly distinct: a dictionary page of as many values, then
    indices, where plain values compress better under zstd); no column statistics (each entry is
    read whole, never filtered by them). Against pyarrow's defaults (a dictionary for every column,
    statistics), bench/bench_store.py on 32 ranks of the generated 64-rank job: 0.65x the CPU to
    encode, the same to decode, 0.61x the bytes (the bundled h200_moe trace: 0.47x, 0.56x)."""
    import pyarrow as pa
    return {"compression": "zstd", "write_statistics": False,
            "use_dictionary": [f.name for f in schema if pa.types.is_dictionary(f.type)]}


def _write_partitions(entry: Path, name: str, table: pa.Table) -> list[dict]:
    """One Parquet file per rank (Hive-style folders rank=<r>, one for all of a rank's tables); the
    row order of the whole table is kept (a multi-rank file may interleave ranks) by a row-number
    column when the ranks are not already in order."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    rank = table.column("rank")
    n = table.num_rows
    distinct = sorted(pc.unique(rank).to_pylist()) or [None]
    # (in Arrow kernels: a Python pass over the rank column took some 0.5 s for 3.2M rows)
    ordered = n < 2 or bool(pc.all(pc.less_equal(rank.slice(0, n - 1), rank.slice(1))).as_py())
    if not ordered:
        table = table.append_column(_ORDER, pa.array(range(table.num_rows), pa.int64()))
        parts = {r: table.filter(pc.equal(table.column("rank"), r)) for r in distinct} if len(distinct) > 1 else {}
    elif len(distinct) > 1:             # ranks in order: each rank's rows are one run, sliced (no copy)
        runs = pc.value_counts(rank)    # (in order of first appearance: ascending here)
        parts, at = {}, 0
        for r, count in zip(runs.field("values").to_pylist(), runs.field("counts").to_pylist(), strict=True):
            parts[r] = table.slice(at, count)
            at += count
    else:
        parts = {}
    out = []
    options = parquet_options(table.schema)
    for r in distinct:
        part = parts.get(r, table)
        rel = f"rank={'none' if r is None else r}/{name}.parquet"
        f = entry / rel
        f.parent.mkdir(exist_ok=True)
        # encoded in memory and hashed there, then written: the file is not opened again to be
        # hashed (file_hash gives the same digest of the file)
        sink = pa.BufferOutputStream()
        pq.write_table(part, sink, **options)
        data = memoryview(sink.getvalue())
        with open(f, "wb") as fh:
            fh.write(data)
        h = _hasher()
        h.update(data)
        out.append({"file": rel, "rows": part.num_rows, "size": len(data), "hash": h.hexdigest()})
    return out


def _restore(name: str, pieces: list[pa.Table]) -> pa.Table:
    import pyarrow as pa
    t = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
    if _ORDER in t.column_names:
        import pyarrow.compute as pc
        t = t.take(pc.sort_indices(t.column(_ORDER))).drop_columns([_ORDER])
    return as_read_back(name, t)


def as_read_back(name: str, table: pa.Table) -> pa.Table:
    """Table `name` in the form lookup() gives it back: its canonical schema's types and one chunk
    (its rows, in their order, are what was stored). The parse's own tables in this form serve
    where the store's copy would be read back (a parse in the run's own process; a mapped job's
    spill): the same values, without a Parquet decode."""
    from . import schema
    want = schema.TABLES[name]
    if not table.schema.equals(want, check_metadata=True):
        table = table.cast(want)
    return table.combine_chunks()
