"""What the store keeps of a whole job: its finished document, and its report in each format it was
asked for. A second `analyze` of the same traces with the same options copies the kept report out
(the document is not even read) or renders the kept document; nothing is analyzed again.

The key is the traceview version, the options, the paths as given and the content hash of every
trace (from the store's manifests: a trace the store does not hold current means no key; a trace
whose size and mtime are those of its manifest is not hashed again), and the content of every file
the options name. Nothing here imports the analysis or a table library: a run served from the
store imports only what it renders.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable, cast

from .store import STORE_SCHEMA_VERSION, KeptPayload, Store

if TYPE_CHECKING:   # (annotations only)
    from .document.types import ReportDocument

# formats whose report is a function of the document and traceview's own code alone (HTML embeds
# the chart library's bundle, which follows its installed version: it is rendered from the kept
# document instead)
KEPT_FORMATS = ("json", "markdown", "text")


def key(paths: list[str], fields: dict, store: Store) -> str | None:
    """The identity of one analysis: None when some trace is not current in the store."""
    from . import __version__
    from .parsers import bounded_read
    from .trace_files import expand
    try:
        files = expand(list[str | Path](paths))
    except Exception:
        return None
    hashes = []
    for f in files:
        h = store.source_hash(f)
        if h is None:
            return None
        hashes.append(h)
    named = {}
    for name, value in fields.items():
        if isinstance(value, Path):
            try:
                named[name] = hashlib.sha256(value.read_bytes()).hexdigest()
            except OSError:
                return None
    from .code_stamp import code_stamp
    ident = {"traceview": __version__, "code": code_stamp(), "store": STORE_SCHEMA_VERSION,
             "paths": [str(f) for f in files],
             "hashes": hashes, "options": {k: repr(v) for k, v in sorted(fields.items())}, "named_files": named,
             "max_input_size": bounded_read.max_input_size()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:40]


def _budget_violated(doc: dict) -> bool:
    return bool((doc.get("budget") or {}).get("violations"))


class Job:
    """One job's analysis: its document (analyzed now or kept) and its report in a format (kept
    bytes when the store holds them, else rendered, and kept when the job may be)."""

    def __init__(self, paths: list[str], run: Callable[[list[str]], dict], doc: dict | None = None,
                 store: Store | None = None, key: str | None = None,
                 report: tuple[str, bytes | KeptPayload, dict] | None = None,
                 shape=None, from_store: bool = False, formatted: dict | None = None):
        self._paths, self._run, self._doc = paths, run, doc
        self._formatted = formatted     # the JSON of long lists, written by a mapped job's workers
        self._store, self._key, self._report = store, key, report
        self._shape = shape             # plain_data.scan of the document, when it was taken
        self.from_store = from_store    # the document or the report was kept: nothing analyzed
        self._kept_fmt: str | None = None   # the format render() or output() last kept

    @property
    def document(self) -> dict:
        if self._doc is None:
            doc = self._store.get_document(self._key) if self._store is not None and self._key else None
            # the kept report was there but the document is not (removed or damaged since): analyze
            self._doc = _packed(doc if doc is not None else self._run(self._paths))
        return self._doc

    @property
    def kept(self) -> tuple[str, str] | None:
        """(key, format) of the report the store keeps of this job (the one rendered last), or None."""
        if self._store is None or not self._key:
            return None
        if self._report is not None:
            return self._key, self._report[0]
        return (self._key, self._kept_fmt) if self._kept_fmt else None

    @property
    def budget_violated(self) -> bool:
        if self._doc is None and self._report is not None:
            return bool(self._report[2].get("budget_violated"))
        return _budget_violated(self.document)

    def render(self, fmt: str, per_rank_rows: int | None = None) -> str | bytes:
        """The report in `fmt` (json: UTF-8 bytes; the others: str), as reports.render writes it
        (`per_rank_rows` other than the default: rendered, never kept)."""
        if self._report is not None and self._report[0] == fmt and per_rank_rows is None:
            data = self._report[1]
            if isinstance(data, KeptPayload):         # asked whole (output() gives it in pieces)
                data = b"".join(data)
            return data if fmt == "json" else data.decode("utf-8")
        doc = self.document
        if fmt == "json":
            from .reports import json_report
            out: str | bytes = json_report.render_bytes(cast("ReportDocument", doc), self._shape)
        else:
            from .reports import render
            out = render(cast("ReportDocument", doc), fmt, per_rank_rows)
        if self._store is not None and self._key and fmt in KEPT_FORMATS and per_rank_rows is None:
            data = out if isinstance(out, bytes) else out.encode("utf-8")
            if self._store.put_kept(self._key, fmt, data, {"budget_violated": _budget_violated(doc)}):
                self._kept_fmt = fmt
        return out

    def output(self, fmt: str, per_rank_rows: int | None = None):
        """`render(fmt, per_rank_rows)` for writing out: the JSON report as output.Pieces, written
        a piece at a time, never whole in memory, and kept in the store: by a link of the file it
        was written to where that file is on the store's filesystem (Store.keep_linked), else as
        it is written out (a copy beside, `_teed`)."""
        if self._report is not None and self._report[0] == fmt and per_rank_rows is None \
                and isinstance(self._report[1], KeptPayload):
            from .output import Pieces
            return Pieces(self._report[1].__iter__, holds=self._report[1].holds)
        if fmt != "json" or (self._report is not None and self._report[0] == fmt and per_rank_rows is None):
            return self.render(fmt, per_rank_rows)
        doc = self.document
        from .output import Pieces
        from .reports import json_report
        store, key, shape, formatted = self._store, self._key, self._shape, self._formatted
        linking: dict = {}       # the pieces' size and CRC-32 where the report is kept by a link of its file

        def make():
            pieces = json_report.pieces(cast("ReportDocument", doc), shape, formatted)
            if store is None or not key or per_rank_rows is not None:
                return pieces
            linking.clear()
            if out.to_folder is not None and store.can_link(out.to_folder):
                return _summed(pieces, linking)
            return _teed(pieces, store.kept_writer(key, fmt, {"budget_violated": _budget_violated(doc)}), kept)

        def kept() -> None:
            self._kept_fmt = fmt

        def written(path: Path) -> None:
            """The report is all in the file at `path` (output.write_file): kept by a link of it
            (Store.keep_file)."""
            if "crc32" not in linking or store is None or not key:
                return
            try:
                if store.keep_file(key, fmt, path, linking["size"], linking["crc32"],
                                   {"budget_violated": _budget_violated(doc)}):
                    kept()
            except Exception:  # noqa: BLE001 - keeping is never worth failing the command's output
                pass
        out = Pieces(make, written)
        return out


# the document's per-rank row lists (hundreds of thousands of rows at 1,024 ranks): held packed
PACKED_SECTIONS = ("stalls", "layers", "a2a", "critical_path", "steps")


def _packed(doc):
    from .document.packed import pack_lists
    return pack_lists(doc, PACKED_SECTIONS) if isinstance(doc, dict) else doc


# A report this large or larger is kept by a thread of its own, each piece written to the store's
# copy while the caller writes it out (the writes release the interpreter's lock: the two copies
# are written side by side, as on two cores; a 59 MB report of a 64-rank job 0.27 -> 0.15 s)
TEE_THREAD_BYTES = 4 << 20


def _summed(pieces, into: dict):
    """`pieces` as they come, their size and CRC-32 put in `into` once they all came (the report
    then kept by a link of the file they were written to: Job.output)."""
    import zlib
    crc = size = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
        size += memoryview(piece).nbytes
        yield piece
    into.update(size=size, crc32=crc)


def _teed(pieces, writer, on_kept: Callable[[], None]):
    """`pieces` as they come, each also given to the store's `writer` (kept when all came:
    then on_kept()). Past TEE_THREAD_BYTES, a piece goes to the writer on a thread while the
    caller has it; the next piece is made only once both are done with it (a piece may be a
    view of memory its maker lets go next)."""
    done = False
    seen = 0
    side = None
    pending = None
    try:
        for piece in pieces:
            if side is None:
                writer.write(piece)
                seen += memoryview(piece).nbytes
                if seen >= TEE_THREAD_BYTES:
                    from concurrent.futures import ThreadPoolExecutor
                    side = ThreadPoolExecutor(1, thread_name_prefix="traceview-kept")
                yield piece
            else:
                pending = side.submit(writer.write, piece)
                yield piece
                pending.result()
                pending = None
        done = True
    finally:
        if pending is not None:
            pending.exception()          # the writer is done with the piece before it is closed
        if side is not None:
            side.shutdown(wait=True)
        if done:
            if writer.commit():
                on_kept()
        else:
            writer.abort()


def open_job(paths: list[str], fields: dict, run: Callable[[list[str]], dict], fmt: str | None = None) -> Job:
    """The job of `paths` analyzed with the options `fields` (run(paths) -> document), or what the
    store keeps of it. `fmt`: the one format the caller will render; when the store keeps that
    report of this job, the document is not read (Job.document reads it when asked)."""
    from .executors import current
    state = current()
    if state is None or state.settings.store is None:
        doc = _packed(run(paths))
        bodies = _start_bodies(doc, fmt)
        return Job(paths, run, doc, formatted=bodies() if bodies is not None else None)
    store = Store(state.settings.store)
    k = key(paths, fields, store)
    if k is not None:
        if fmt in KEPT_FORMATS:
            # a kept JSON report (59 MB at 64 ranks, 932 MB at 1,024) is checked here and copied
            # out in pieces when written (Job.output), never whole in memory
            got = _open_kept(store, k) if fmt == "json" else store.get_kept(k, fmt)
            if got is not None:
                state.stats = {**state.stats, "document_from_store": True, "report_from_store": True}
                return Job(paths, run, None, store, k, (fmt, got[0], got[1]), from_store=True)
        doc = store.get_document(k)
        if doc is not None:
            doc = _packed(doc)
            state.stats = {**state.stats, "document_from_store": True}
            return Job(paths, run, doc, store, k, from_store=True)
    doc = _packed(run(paths))
    bodies = _start_bodies(doc, fmt)
    if state.skipped:                      # not the job's whole answer: nothing kept
        return Job(paths, run, doc, formatted=bodies() if bodies is not None else None)
    k = key(paths, fields, store)          # the traces are in the store now
    if k is None:
        return Job(paths, run, doc, formatted=bodies() if bodies is not None else None)
    from .plain_data import scan
    shape = scan(doc)                      # once, for the store and the JSON writer
    # kept while a mapped job's workers write the report's long lists (not on a thread beside the
    # report's own writing: the two then took turns at the interpreter's lock, a piece at a time)
    store.put_document(k, doc, shape=shape)    # (not when msgpack would not give it back exactly)
    return Job(paths, run, doc, store, k, shape=shape, formatted=bodies() if bodies is not None else None)


def _open_kept(store: Store, k: str):
    """(format, payload, info) of the JSON report the store keeps under `k`, checked (its size and
    CRC-32) but not read (Store.open_kept; the file stays open while the Job lives), or None."""
    got = store.open_kept(k, "json")
    if got is None:
        return None
    import weakref
    weakref.finalize(got, got.close)
    return got, got.info


def _start_bodies(doc, fmt: str | None):
    """A mapped job whose report is JSON: its long lists' JSON written by the idle workers while
    this process keeps the document (mapped.start_list_bodies); what to call for them, or None."""
    if fmt != "json" or not isinstance(doc, dict):
        return None
    from .executors import current
    state = current()
    if state is None or state.pool is None:     # no pool of this process's to write them (a job in one process)
        return None
    from .mapped import start_list_bodies
    return start_list_bodies(doc)


def analyze(paths: list[str], fields: dict, run: Callable[[list[str]], dict]) -> dict:
    """run(paths) -> document (the analysis with the options `fields`), or the stored document of
    this job when there is one."""
    from .document.packed import plain
    return plain(open_job(paths, fields, run).document)
