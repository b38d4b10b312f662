"""Nsight Systems SQLite exports (schema 2.9 .. 3.25) -> the canonical tables.

`.nsys-rep`/`.qdrep` reports are first exported with the `nsys` CLI (`nsys_export`).
Rows move from SQLite to Arrow through ADBC (no Python row loops); names, enums, ranks,
NVTX nesting and the projection of NVTX ranges onto launches and kernels are DuckDB SQL
over those Arrow tables.

Mapping (see traceview/schema.py for the columns):
- gpu_activities: CUPTI kernels (demangled name, else short name), memcpys and memsets (named
  like Kineto: `Memcpy HtoD (Pageable -> Device)`, `Memset (Device)`).
- launches: CUPTI_ACTIVITY_KIND_RUNTIME (runtime and driver calls; `_v7000`-style suffixes cut).
- cpu_ranges: NVTX push/pop and start/end ranges. `torch.autograd.profiler.emit_nvtx` names
  (`aten::mm, seq = 3, op_id = 7[, sizes = [[..]]]`) become kind 'op'; others 'annotation'.
- A launch's op_id is the innermost NVTX push/pop range open on its thread at the call; a GPU
  activity inherits launch_id and op_id from the call with its correlation id in its process.
- Ranks: every process with GPU activity is one rank. One such process: its rank comes from the
  captured environment (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMI_RANK), else -1 (the
  loader assigns). Several: ranks in pid order (the export records no rank per process).
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from traceview import duck, schema
from traceview.errors import TraceError
from traceview.executors import cores as _cores
from traceview.later import Later
from traceview.profile import Profile

from . import huge_pages, nsys_export, nsys_nesting

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
NO_KERNELS = ("no CUDA kernel records (capture with `nsys profile -t cuda`; note that an Nsight Systems "
              "older than the program's CUDA records none)")
_RANK_ENV = (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
             ("SLURM_PROCID", "SLURM_NTASKS"), ("PMI_RANK", "PMI_SIZE"))
# Built-in enum values, used where an export lacks its ENUM_* tables (nsys numbering, not CUPTI's).
_COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
              7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD"}
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static", 7: "Unknown"}
_SYNC_KIND = {0: "other", 1: "event_sync", 2: "stream_wait_event", 3: "stream_sync", 4: "context_sync"}
_SYNC_NAMES = (("STREAM_WAIT_EVENT", "stream_wait_event"), ("EVENT_SYNCHRONIZE", "event_sync"),
               ("STREAM_SYNCHRONIZE", "stream_sync"), ("CONTEXT_SYNCHRONIZE", "context_sync"))
_EVENT_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}
_PID = "((({c}) >> 24) & 16777215)"
_K = 1 << 56  # the nesting sweep's sort key: kind * _K + id


# kind, name, seq, input_dims of each name (rows of `table`, in their order)
_PARSE_NAMES = """
    WITH p AS (SELECT name AS raw, strpos(name, ', seq = ') AS ps, strpos(name, ', op_id = ') AS po,
                      strpos(name, ', sizes = ') AS pz, strpos(name, ', input_op_ids = ') AS pi FROM {table})
    SELECT CASE WHEN ps > 0 OR po > 0 THEN 'op' ELSE 'annotation' END AS kind,
           CASE WHEN ps > 0 OR po > 0 THEN left(raw, least(nullif(ps, 0), nullif(po, 0)) - 1)
                ELSE raw END AS name,
           CASE WHEN ps > 0 THEN TRY_CAST(split_part(substr(raw, ps + 8), ',', 1) AS BIGINT) END AS seq,
           CASE WHEN pz > 0 AND (ps > 0 OR po > 0)
                THEN substr(raw, pz + 10, CASE WHEN pi > pz THEN pi - pz - 10 ELSE length(raw) END)
           END AS input_dims
    FROM p"""


def _flat(col: pa.ChunkedArray) -> pa.Array:
    """One array of a column (its one chunk as it is: combine_chunks copies even that)."""
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _coded(col: pa.ChunkedArray) -> pa.Array:
    """A string column as one dictionary array (schema.CODED: int32 codes, each value once)."""
    enc = pc.dictionary_encode(col)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    return enc.cast(schema.CODED)


def _conformed(name: str, t: pa.Table) -> pa.Table:
    """schema.conform, with every column that holds only nulls (those the export has no data for:
    collective metadata, fwd_id, ...; and those null on every row read, e.g. seq where no name has
    one) null over one shared zeroed buffer: pa.nulls allocates and zeroes one per column (about
    150 MB of zeros at 2M NVTX ranges). The buffer comes from calloc, so its pages take no memory
    until written, and nothing writes to an Arrow buffer."""
    n = t.num_rows
    fields = [f for f in schema.TABLES[name]
              if f.name not in t.column_names or t.column(f.name).null_count == n]
    if n and fields:
        zeros = pa.py_buffer(bytes(8 * n + 8))   # validity bits, values up to 8 bytes, n + 1 offsets
        for f in fields:
            col = _nulls(f.type, n, zeros)
            if f.name in t.column_names:
                t = t.set_column(t.schema.get_field_index(f.name), t.schema.field(f.name).with_type(f.type), col)
            else:
                t = t.append_column(f, col)
    return schema.conform(name, t)


def _nulls(typ: pa.DataType, n: int, zeros: pa.Buffer) -> pa.Array:
    """n nulls of `typ` over slices of `zeros` (at least 8 n + 8 bytes), with the buffer sizes
    pa.nulls gives (so that an Arrow IPC file of the table is byte for byte the same)."""
    bits = zeros[:(n + 7) // 8]
    if pa.types.is_dictionary(typ) and pa.types.is_string(typ.value_type) and typ.index_type == pa.int32():
        codes = pa.Array.from_buffers(typ.index_type, n, [bits, zeros[:4 * n + 4]], null_count=n)
        empty = pa.Array.from_buffers(typ.value_type, 0, [None, zeros[:4], zeros[:4]])
        return pa.DictionaryArray.from_arrays(codes, empty)
    if pa.types.is_string(typ):
        return pa.Array.from_buffers(typ, n, [bits, zeros[:4 * n + 4], zeros[:4 * n + 4]], null_count=n)
    if (pa.types.is_integer(typ) or pa.types.is_floating(typ)) and typ.bit_width in (8, 16, 32, 64):
        return pa.Array.from_buffers(typ, n, [bits, zeros[:typ.bit_width // 8 * n]], null_count=n)
    return pa.nulls(n, typ)


def sniff(path) -> bool:
    return nsys_export.is_sqlite(Path(path))


def read(path, nsys_bin=None) -> Profile:
    """Parse one Nsight Systems SQLite export or report (all processes with GPU activity)."""
    path = Path(path)
    if path.name.lower().endswith(REPORT_SUFFIXES):
        with nsys_export.exported(path, nsys_bin) as db:
            return _read_db(db, path)
    return _read_db(path, path)


def _read_db(db: Path, path: Path) -> Profile:
    if not db.is_file():
        raise TraceError(path, "no such file")
    if not nsys_export.is_sqlite(db):
        raise TraceError(path, "not an SQLite file (expected an Nsight Systems SQLite export or .nsys-rep report)")
    size = db.stat().st_size
    if size >= huge_pages.MIN_EXPORT:
        huge_pages.turn_off()   # a large export: the reuse of freed memory costs less in small pages
    try:
        src = nsys_export.Export(db, path)
    except (nsys_export.adbc_driver_manager.Error, OSError) as e:
        raise TraceError(path, f"cannot open the SQLite file: {_line(e)}") from None
    reader = None
    try:
        reader = _Reader(src, path, size)
        return reader.run()
    except TraceError:
        raise
    except (nsys_export.adbc_driver_manager.Error, duckdb.Error, OSError, ValueError, pa.ArrowException) as e:
        raise TraceError(path, f"cannot read this Nsight Systems export: {_line(e)}") from None
    finally:
        if reader is not None:
            reader.close()  # its temp tables go now, before the analysis allocates
        src.close()


def _line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


# An export from which the parse's queries run on every core (DuckDB's default threads) rather than
# on the threads the thread's database was given (the analysis session's one; traceview/duck.py):
# h100_2gpu_train_a2a repeated, whole-process analyze, interleaved pairs (paired medians): x1 19 ms
# faster on one thread (12 pairs), x10 and x30 within the noise (6 and 4 pairs), x100 0.25 s slower
# on one (3 pairs). The sorts of the GPU activities are split between threads from two of DuckDB's
# row groups (245,760 rows), about x46 of that export (106 MiB).
PARALLEL_MIN_BYTES = 64 << 20
# NVTX_EVENTS, most of a framework's export, is read in up to this many ranges of rowids, each on a
# thread (one per core), beside the other tables read here (nsys_export.Export.table_behind): the a2a
# export x100 (1,911,800 NVTX rows), 2 cores: its tables read in 1.0-1.1 s instead of 1.2 s (the
# NVTX read alone, on one thread, 1.14 s); analyze 8 interleaved pairs, A/B wall 0.982.
READ_PARTS = 4
# The nesting sweep of an export of at least 2 x SWEEP_BLOCK_MIN push/pop ranges goes in blocks of
# whole threads, one a core (_Reader.sweep_blocks): the a2a export x100 (1,911,800 ranges on two
# threads) swept and nested in two blocks on two cores, `ranges` 1.22 s instead of 1.40-1.47 s;
# analyze (with the NVTX read in ranges) 8 interleaved pairs against the tree before both, A/B wall
# 0.952 (7.85 / 8.21 s), peak 1,023 / 1,068 MiB.
SWEEP_BLOCK_MIN = 100_000
# A large export's numbered tables (the GPU rows, the API calls, the NVTX ranges: `numbered`) are made
# in a schema of the database's compressed catalog (duck.STORE), not as temp tables, and one of at
# least COMPRESS_MIN_ROWS rows is compressed as soon as it is made (a checkpoint of the catalog):
# they are held through the NVTX sweep and the parse's last queries, the parse's peak. On the a2a
# export x100 (529,900 GPU rows, 746,600 calls, 1,911,800 ranges) the whole process's peak went
# 827 -> 774 MiB (8 interleaved pairs, wall A/B 1.053 in a noisy hour; docs/MEMORY.md, "Landed: the
# parse's numbered tables compressed").
COMPRESS_MIN_BYTES = PARALLEL_MIN_BYTES
COMPRESS_MIN_ROWS = 400_000
_PARSES = itertools.count(1)   # each parse's schema of the compressed catalog named apart
RELEASE_AFTER = 100_000   # rows of the NVTX sweep from which DuckDB's freed pages are given back before it

_GPU = {"start_ns": "start TIME", "end_ns": "end TIME", "device": "deviceId", "stream": "streamId",
        "correlation": "correlationId", "gpid": "globalPid"}
_NEED_GPU = ("start", "end", "globalPid")  # a table without them cannot be placed on a timeline


def _thread_groups(counts: list[tuple[int, int]], parts: int) -> list[list[int]]:
    """Threads (gtid, rows), in gtid order, cut into at most `parts` runs of consecutive threads of
    about equal rows: a run ends before the thread whose middle lies past the run's share."""
    total = sum(n for _, n in counts)
    groups: list[list[int]] = [[]]
    acc = 0
    for gtid, n in counts:
        if groups[-1] and len(groups) < parts and acc + n / 2 > total * len(groups) / parts:
            groups.append([])
        groups[-1].append(int(gtid))
        acc += n
    return groups if groups[0] else []


def _sweep(ev: pa.Table, ends: pa.Array) -> dict:
    """One block of the nesting sweep (`_Reader.ranges`: the rows of whole threads, in (gtid, t, kid)
    order; `ends`: every range's end, by id): the running open-range count, then, from the starts and
    calls, each start's id, depth, parent (the latest earlier start one level up on its thread) and
    whether it ends after its parent (in sweep order), and each call's innermost open range (table
    id, op_id). Columns are freed as they are used (the sweep has 2.5 rows a range)."""
    cols = {c: ev.column(c) for c in ("gtid", "t", "kid")}
    del ev
    cols["kind"] = pc.divide(cols["kid"], _K).cast(pa.int8())
    is_start, is_call = pc.equal(cols["kind"], 1), pc.equal(cols["kind"], 3)
    cols["run"] = pc.cumulative_sum(pc.if_else(is_start, 1, pc.if_else(is_call, 0, -1)).cast(pa.int32()))
    keep = pc.or_(is_start, is_call)
    del is_start, is_call
    sw = {c: _flat(pc.filter(cols.pop(c), keep)) for c in ("gtid", "t", "kid", "kind", "run")}
    del keep
    kind, run = sw.pop("kind"), sw.pop("run").cast(pa.int64())
    is_start = pc.equal(kind, 1)
    del kind
    null = pa.scalar(None, pa.int64())
    depth = pc.if_else(is_start, pc.subtract(run, 1), null)
    want = pc.subtract(run, pc.if_else(is_start, 2, 1).cast(pa.int64()))
    del run
    hit = nsys_nesting.last_at_depth(sw.pop("gtid"), is_start, depth, want)
    del want
    ident = pc.bit_wise_and(sw.pop("kid"), _K - 1)   # kid = kind * _K + id, ids < _K
    end = pc.if_else(is_start, pc.take(ends, pc.if_else(is_start, ident, null)), null)
    up_id, up_end = pc.take(ident, hit), pc.take(end, hit)
    del hit
    is_call = pc.invert(is_start)
    open_ = pc.fill_null(pc.greater(up_end, sw.pop("t")), False)
    op = pa.table({"id": pc.filter(ident, is_call),
                   "op_id": pc.filter(pc.if_else(open_, up_id, null), is_call)})
    del open_, is_call
    return {"s_id": pc.filter(ident, is_start), "op": op,
            "cols": [pc.filter(c, is_start) for c in (depth, up_id, pc.less(up_end, end))]}


class _Reader:
    def __init__(self, src: nsys_export.Export, path: Path, size: int = 0):
        self.src, self.path = src, path
        self.warnings: list[str] = []
        # a connection onto the thread's database (the analysis session's, where there is one:
        # traceview/duck.py); a large export is parsed on DuckDB's default threads (every core),
        # and close() gives back the threads it found (a setting of the database, not the connection)
        self.db = duck.connect()
        self.threads: int | None = None   # the threads found, where they were changed
        # a large export's NVTX rows are read, and their nesting swept, in parts (one a core)
        self.parts = min(READ_PARTS, _cores()) if size >= PARALLEL_MIN_BYTES else 1
        if size >= PARALLEL_MIN_BYTES:
            self.threads = int(self.one("SELECT current_setting('threads')")[0])
            self.db.execute("RESET threads")
        self.db.execute("SET enable_progress_bar = false")  # a long query writes nothing on stderr
        self.registered: set[str] = set()
        self.views: set[str] = set()  # numbered(): a view over a sorted table
        # where a large export's numbered tables go: a schema of the compressed catalog, made at the
        # first (numbered); None: temp tables
        self.store: str | None = None
        self.compress = size >= COMPRESS_MIN_BYTES
        self.devices: dict = {}  # pid -> its most used GPU (run(), for meta())
        self.nesting: tuple[pa.Array, pa.Array] | None = None   # the ranges' depths and parents (ranges())

    def close(self) -> None:
        """The connection closed (its temp tables go) and the threads found given back, on a fresh
        connection (this one may have stopped in the middle of a query that failed), which also drops
        the schema of the numbered tables in the compressed catalog, where there is one."""
        self.db.close()
        if self.threads is not None or self.store is not None:
            other = duck.connect()     # onto the same database: this thread's
            try:
                if self.store is not None:
                    other.execute(f"DROP SCHEMA IF EXISTS {self.store} CASCADE")
                if self.threads is not None:
                    other.execute(f"SET threads = {self.threads}")
            finally:
                other.close()

    def warn(self, msg: str) -> None:
        self.warnings.append(f"{self.path}: {msg}")

    def reg(self, name: str, table: pa.Table) -> None:
        self.db.register(name, table)
        self.registered.add(name)

    def q(self, sql: str) -> pa.Table:
        return duck.arrow_table(self.db, sql)   # (submitted once: duck.arrow_table)

    def drop(self, *names: str) -> None:
        """Free what later steps no longer need (temp tables and registered Arrow tables)."""
        for n in names:
            if n in self.registered:
                self.db.unregister(n)
                self.registered.discard(n)
            elif n in self.views:
                self.db.execute(f"DROP VIEW {n}")
                self.db.execute(f"DROP TABLE {self._rows_table(n)}")
                self.views.discard(n)
            else:
                self.db.execute(f"DROP TABLE IF EXISTS {n}")

    def numbered(self, name: str, sql: str, parts: list[str] | None = None) -> None:
        """`name`: the rows of `sql` (which ends in ORDER BY) with `id` = their position in that order.
        A sorted table's rowids are that position (DuckDB keeps insertion order), so the ids cost one
        sort, not a row_number() window (which sorts at about twice the cost) nor a copy.
        `parts`: where the order's leading keys split the rows into runs (e.g. one a rank), a
        condition for each run in that order; `sql` holds `{part}` in its WHERE. The runs are sorted
        and appended one at a time (rowids go on in insertion order): the same ids, a run's sort
        buffers at a time instead of all the rows'.
        A large export's (`compress`) goes into the compressed catalog, compressed at once where it
        has COMPRESS_MIN_ROWS rows or more (its rows keep their rowids)."""
        if self.compress and self.store is None:
            self.store = f"{duck.STORE}.tv_parse_{next(_PARSES)}"
            self.db.execute(f"CREATE SCHEMA {self.store}")
        table = self._rows_table(name)
        runs = [sql.replace("{part}", p) for p in parts] if parts else [sql]   # (not format: SQL may hold braces)
        rows = self.db.execute(f"CREATE {'TABLE' if self.store else 'TEMP TABLE'} {table} AS {runs[0]}").fetchall()
        n = rows[0][0] if rows else 0
        for run in runs[1:]:
            if self.store is not None:
                duck.release_unused()   # the last run's sort pages, before the next sorts
            n += self.db.execute(f"INSERT INTO {table} {run}").fetchall()[0][0]
        self.db.execute(f"CREATE TEMP VIEW {name} AS SELECT rowid::BIGINT AS id, * FROM {table}")
        self.views.add(name)
        if self.store is not None and n >= COMPRESS_MIN_ROWS:
            try:
                self.db.execute(f"CHECKPOINT {duck.STORE}")
            except duckdb.TransactionException:   # another connection writes: left uncompressed
                pass
            duck.release_unused()   # (the pages of its sort and of its rows before they were compressed)

    def _rows_table(self, name: str) -> str:
        """The table behind numbered view `name`."""
        return f"{self.store}.{name}_rows" if self.store else f"{name}_rows"

    def one(self, sql: str):
        return self.db.execute(sql).fetchall()[0]

    # ---------------------------------------------------------------- raw rows from SQLite
    def load_raw(self) -> None:
        s = self.src
        if not s.tables & {"StringIds", "TARGET_INFO_SESSION_START_TIME", "CUPTI_ACTIVITY_KIND_KERNEL",
                           "NVTX_EVENTS", "ThreadNames"}:
            raise TraceError(self.path, "not an Nsight Systems export (none of its tables, e.g. StringIds, "
                                        "is in this SQLite file)")
        types = self.event_types()
        # the NVTX rows, most of the export's rows where a framework marks its work, are read on a
        # thread of their own while the tables below are read and checked here
        nv_rows = s.table_behind("NVTX_EVENTS", {
            "start_ns": "start TIME", "end_ns": "end TIME", "event_type": "eventType", "gtid": "globalTid",
            "domain_id": "domainId", "name": f"={self.nvtx_name_sql()} TEXT"},
            # in rowid order (a plain scan, which the ORDER BY costs nothing on): a row's position is
            # its place in the file, the ranges' last tie-break; a large table in ranges of rowids
            # read on as many threads (the cores, up to READ_PARTS)
            "NOT INDEXED WHERE eventType IN (?, ?, ?)", tuple(types[n] for n in _EVENT_TYPES),
            need=("start", "eventType", "globalTid"), parts=self.parts)
        k_all = s.table("CUPTI_ACTIVITY_KIND_KERNEL", {
            **_GPU, "name_id": "demangledName", "short_id": "shortName", "gx": "gridX", "gy": "gridY", "gz": "gridZ",
            "bx": "blockX", "by": "blockY", "bz": "blockZ"}, need=_NEED_GPU)
        k = self.timed("kernels", k_all)
        if not k.num_rows:
            raise TraceError(self.path, f"none of the {k_all.num_rows} kernel records has a valid start and end "
                                        "(integer ns)" if k_all.num_rows else NO_KERNELS)
        del k_all
        self.reg("k", k)
        self.reg("mc", self.timed("memcpys", s.table("CUPTI_ACTIVITY_KIND_MEMCPY", {
            **_GPU, "bytes": "bytes", "copy_kind": "copyKind", "src_kind": "srcKind", "dst_kind": "dstKind"},
            need=_NEED_GPU)))
        self.reg("ms", self.timed("memsets", s.table("CUPTI_ACTIVITY_KIND_MEMSET", {
            **_GPU, "bytes": "bytes", "mem_kind": "memKind"}, need=_NEED_GPU)))
        api = {"start_ns": "start TIME", "end_ns": "end TIME", "gtid": "globalTid", "correlation": "correlationId",
               "name_id": "nameId", "event_class": "eventClass"}
        parts = []
        for t, v in (("CUPTI_ACTIVITY_KIND_RUNTIME", None), ("CUPTI_ACTIVITY_KIND_DRIVER", "driver")):
            part = s.table(t, api, need=("start", "end", "globalTid"))
            n = part.num_rows   # the table's API, a constant added here (not a column read through ADBC)
            part = part.append_column(pa.field("table_api", pa.string()), pa.repeat(pa.scalar(v, pa.string()), n))
            parts.append(part)
        self.reg("rt", self.timed("CUDA API calls", pa.concat_tables(parts)))
        del parts, part
        self.strs = s.table("StringIds", {"id": "id", "value": "=IFNULL(CAST(value AS TEXT), '') TEXT"},
                            need=("id", "value"))
        self.reg("strs", self.strs)
        nv = nv_rows()
        ranges = pc.is_in(nv.column("event_type"), pa.array([types["NvtxPushPopRange"], types["NvtxStartEndRange"]]))
        n_bad = pc.sum(pc.and_(ranges, pc.is_null(nv.column("start_ns")))).as_py() or 0
        if n_bad:
            self.warn(f"{n_bad} NVTX ranges with a missing, non-integer or out-of-range start dropped")
        self.nv = nv.append_column("pos", nsys_nesting.positions(nv.num_rows))
        del nv
        self.reg("nv", self.nv)
        self.reg("sy", self.timed("sync records", s.table("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {
            **_GPU, "sync_type": "syncType", "event_id": "eventId", "event_sync_id": "eventSyncId"}, need=_NEED_GPU)))
        self.reg("ce", s.table("CUPTI_ACTIVITY_KIND_CUDA_EVENT", {"correlation": "correlationId", "gpid": "globalPid",
                               "event_id": "eventId", "stream": "streamId", "event_sync_id": "eventSyncId"}))
        self.event_types_used = types

    def nvtx_name_sql(self) -> str:
        """SQLite expression of an NVTX_EVENTS row's name: its inline text, else its StringIds entry
        (looked up in SQLite, by the table's key, for the rows that have no text), else ''."""
        have, strs = self.src.cols("NVTX_EVENTS"), "StringIds" in self.src.tables
        tid = 'CAST("textId" AS INTEGER)'
        found = f'(SELECT IFNULL(CAST(value AS TEXT), \'\') FROM StringIds WHERE id = {tid} LIMIT 1)' if strs \
            else "NULL"
        by_id = (f"CASE WHEN \"textId\" IS NULL THEN '' ELSE COALESCE({found}, '<unknown string ' || {tid} || '>') END"
                 if "textId" in have else "''")
        return f'CASE WHEN "text" IS NOT NULL THEN CAST("text" AS TEXT) ELSE {by_id} END' if "text" in have else by_id

    def timed(self, label: str, t: pa.Table) -> pa.Table:
        """Rows whose start or end is missing, not an integer or impossible are dropped, counted."""
        ok = pc.and_(pc.is_valid(t.column("start_ns")), pc.is_valid(t.column("end_ns")))
        n_bad = t.num_rows - (pc.sum(ok).as_py() or 0)
        if not n_bad:
            return t
        self.warn(f"{n_bad} {label} with a missing, non-integer or out-of-range start or end "
                  "(allowed: integer ns within -2^61 .. 2^62) dropped")
        return t.filter(ok)

    def event_types(self) -> dict[str, int]:
        found = {name: i for i, name, _ in self.src.enum("ENUM_NSYS_EVENT_TYPE") if name in _EVENT_TYPES}
        return {**_EVENT_TYPES, **found}

    def load_enums(self) -> None:
        copy = dict(_COPY_KIND)
        for i, name, _ in self.src.enum("ENUM_CUDA_MEMCPY_OPER"):
            m = re.search(r"(UVM_)?([A-Z])TO([A-Z])$", name)
            copy[i] = (("UVM " if m.group(1) else "") + f"{m.group(2)}to{m.group(3)}") if m else "Unknown"
        mem = dict(_MEM_KIND)
        mem.update({i: label for i, _, label in self.src.enum("ENUM_CUDA_MEM_KIND") if label})
        sync = dict(_SYNC_KIND)
        for i, name, _ in self.src.enum("ENUM_CUPTI_SYNC_TYPE"):
            sync[i] = next((kind for key, kind in _SYNC_NAMES if key in name), "other")
        api = {}
        for i, name, _ in self.src.enum("ENUM_NSYS_EVENT_CLASS"):
            api[i] = "runtime" if name.endswith("CUDA_RUNTIME") else "driver" if name.endswith("CUDA_DRIVER") else None
        for tname, d in (("e_copy", copy), ("e_mem", mem), ("e_sync", sync), ("e_api", api)):
            self.reg(tname, pa.table({"id": pa.array(list(d), pa.int64()),
                                      "v": pa.array(list(d.values()), pa.string())}))

    # ---------------------------------------------------------------- ranks and meta
    def env(self) -> dict[str, str]:
        """Captured environment: the launched process's (META_DATA_CAPTURE), then nsys's own."""
        out: dict[str, str] = {}
        for name, value in self.src.kv("META_DATA_CAPTURE"):
            if name.endswith(":ENVIRONMENT_VARIABLE") and "=" in value:
                k, v = value.split("=", 1)
                out.setdefault(k.strip(), v.strip().strip('"'))
        for _, value in self.src.kv("TARGET_INFO_SYSTEM_ENV", "DeviceEnvironment"):
            for item in value.split(";"):
                k, _, v = item.partition("=")
                out.setdefault(k.strip(), v.strip().strip('"'))
        return out

    def assign_ranks(self) -> list[tuple[int, int, str | None, int | None]]:
        """(pid, rank, rank_source, world_size) for each process with GPU activity."""
        pids = [r[0] for r in self.db.execute(
            "SELECT DISTINCT pid FROM gpu0 ORDER BY pid").fetchall()]
        env = self.env()
        if len(pids) == 1:
            for rk, ws in _RANK_ENV:
                if env.get(rk, "").isdigit():
                    size = env.get(ws, "")
                    return [(pids[0], int(env[rk]), f"env {rk}", int(size) if size.isdigit() else None)]
            return [(pids[0], -1, None, int(env["WORLD_SIZE"]) if env.get("WORLD_SIZE", "").isdigit() else None)]
        self.warn(f"{len(pids)} processes with GPU activity in one file and no rank recorded per process: "
                  "ranks assigned in pid order (" + ", ".join(f"pid {p} -> rank {i}" for i, p in enumerate(pids)) + ")")
        return [(p, i, "pid order", None) for i, p in enumerate(pids)]

    def meta(self, ranks) -> pa.Table:
        s = self.src
        exp = dict(s.kv("META_DATA_EXPORT") or s.kv("EXPORT_META_DATA"))
        ver = exp.get("EXPORT_PRODUCT_VERSION") or "unknown version"
        sv = exp.get("EXPORT_SCHEMA_VERSION")
        version = f"{ver} (schema {sv})" if sv else ver
        gpus: dict = {}
        if s.rows("TARGET_INFO_GPU"):
            g = s.table("TARGET_INFO_GPU", {"id": "id", "name": "name TEXT", "sm": "smCount"})
            rows = list(zip(*(c.to_pylist() for c in g.columns), strict=True))
            gpus = {r[0]: r for r in rows}
            if len(rows) == 1:
                gpus[None] = rows[0]
        offset = None
        if s.rows("TARGET_INFO_SESSION_START_TIME") and "utcEpochNs" in s.cols("TARGET_INFO_SESSION_START_TIME"):
            offset = s.fetch("SELECT CAST(utcEpochNs AS INTEGER) FROM TARGET_INFO_SESSION_START_TIME LIMIT 1"
                             )[0][0].as_py()
        dev = self.devices   # pid -> its most used device (run)
        cols: dict[str, list] = {k: [] for k in ("rank", "world_size", "source_format", "source_version", "source_file",
                                                 "device", "gpu_name", "sm_count", "clock_offset_ns", "rank_source")}
        for pid, rank, how, ws in ranks:
            d = dev.get(pid)
            g = gpus.get(d) or gpus.get(None) or (None, None, None)
            for k, v in (("rank", rank), ("world_size", ws), ("source_format", "nsys"), ("source_version", version),
                         ("source_file", str(self.path)), ("device", d), ("gpu_name", g[1]), ("sm_count", g[2]),
                         ("clock_offset_ns", offset), ("rank_source", how)):
                cols[k].append(v)
        return schema.from_pydict("meta", cols)

    # ---------------------------------------------------------------- the tables
    # Heavy steps work on narrow integer tables; strings are joined in by key at the end.
    def run(self) -> Profile:
        self.load_raw()
        self.load_enums()
        x = self.db.execute
        pid = _PID.format(c="gpid")
        # GPU activities; a, b, c: the name key (kernel: name ids; memcpy: copy/src/dst kinds; memset: kind)
        x(f"""CREATE TEMP VIEW gpu0 AS
            SELECT 'kernel' AS kind, start_ns, end_ns, device, stream, correlation, {pid} AS pid,
                   COALESCE(name_id, -1) AS a, COALESCE(short_id, -1) AS b, -1 AS c, NULL::BIGINT AS bytes,
                   gx || ',' || gy || ',' || gz AS grid, bx || ',' || "by" || ',' || bz AS block FROM k
            UNION ALL SELECT 'memcpy', start_ns, end_ns, device, stream, correlation, {pid}, COALESCE(copy_kind, -1),
                   COALESCE(src_kind, -1), COALESCE(dst_kind, -1), bytes, NULL, NULL FROM mc
            UNION ALL SELECT 'memset', start_ns, end_ns, device, stream, correlation, {pid}, COALESCE(mem_kind, -1),
                   -1, -1, bytes, NULL, NULL FROM ms""")
        ranks = self.assign_ranks()
        self.reg("ranks", pa.table({"pid": pa.array([r[0] for r in ranks], pa.int64()),
                                    "rank": pa.array([r[1] for r in ranks], pa.int32())}))
        self.devices = dict(self.db.execute("SELECT pid, mode(device) FROM gpu0 GROUP BY pid").fetchall())
        # the GPU rows go into DuckDB once, numbered; the Arrow rows go as soon as they are copied
        self.numbered("g", """SELECT r.rank, g.* FROM gpu0 g JOIN ranks r USING (pid)
            ORDER BY r.rank, g.start_ns, g.end_ns, g.device, g.stream, g.kind, g.a, g.b, g.c""")
        x("DROP VIEW gpu0")
        self.drop("k", "mc", "ms")
        x("""CREATE TEMP TABLE gname AS
            SELECT kind, a, b, c, CASE kind
                WHEN 'kernel' THEN COALESCE(d.value, s.value,
                                            '<unknown string ' || CASE WHEN a >= 0 THEN a ELSE b END || '>')
                WHEN 'memcpy' THEN 'Memcpy ' || COALESCE(ck.v, 'Unknown') || ' (' || COALESCE(sk.v, 'Unknown') || ' -> '
                                   || COALESCE(dk.v, 'Unknown') || ')'
                ELSE 'Memset (' || COALESCE(mk.v, 'Unknown') || ')' END AS name
            FROM (SELECT DISTINCT kind, a, b, c FROM g) g
            LEFT JOIN strs d ON kind = 'kernel' AND d.id = a LEFT JOIN strs s ON kind = 'kernel' AND s.id = b
            LEFT JOIN e_copy ck ON kind = 'memcpy' AND ck.id = a LEFT JOIN e_mem sk ON kind = 'memcpy' AND sk.id = b
            LEFT JOIN e_mem dk ON kind = 'memcpy' AND dk.id = c LEFT JOIN e_mem mk ON kind = 'memset' AND mk.id = a""")
        n_other = self.one(f"SELECT count(*) FROM rt WHERE {_PID.format(c='gtid')} NOT IN (SELECT pid FROM ranks)")[0]
        if n_other:
            self.warn(f"{n_other} CUDA API calls of processes without GPU activity dropped")
        self.numbered("l0", f"""SELECT r.rank, rt.* FROM rt JOIN ranks r ON r.pid = {_PID.format(c='rt.gtid')}
            ORDER BY r.rank, rt.start_ns, rt.end_ns, rt.gtid & 16777215, rt.correlation""")
        x("""CREATE TEMP TABLE lname AS
            SELECT (row_number() OVER (ORDER BY ids.name_id) - 1)::BIGINT AS li, ids.name_id,  -- codes in one order
                   regexp_replace(COALESCE(s.value, '<unknown string ' || ids.name_id || '>'),
                                  '_v[0-9]{4,}$', '') AS name
            FROM (SELECT DISTINCT name_id FROM rt) ids LEFT JOIN strs s ON s.id = ids.name_id""")
        last = self.one("SELECT (SELECT max(end_ns) FROM g), (SELECT max(end_ns) FROM rt)")
        self.drop("rt")
        self.ranges(*last)
        launches = self.launches()
        self.drop("ops", "l0", "lname")
        syncs, meta = self.syncs(), self.meta(ranks)
        names = self.q("SELECT kind, a, b, c, name FROM gname ORDER BY kind, a, b, c")  # codes in one order
        self.drop("gname")
        self.reg("gk", names.drop_columns(["name"]).append_column("gi", nsys_nesting.positions(names.num_rows)))
        # the rows in id order as numbered (a scan), and the looked-up columns sorted back to it
        # apart: the sort after the joins carries three integers, not the strings
        gpu = self.q("""SELECT id, rank, device, stream, start_ns, end_ns, kind, correlation, bytes, grid, block
                        FROM g""")
        found = self.q("""
            WITH l AS (SELECT pid, correlation, min(id) AS id, arg_min(op_id, id) AS op_id
                       FROM launches WHERE correlation IS NOT NULL GROUP BY pid, correlation)
            SELECT g.id, n.gi, l.id AS launch_id, l.op_id
            FROM g JOIN gk n USING (kind, a, b, c) LEFT JOIN l ON l.pid = g.pid AND l.correlation = g.correlation
            ORDER BY g.id""")
        self.drop("gk", "g", "launches", "rec")
        if self.compress:   # (a large export) the pages of the parse's tables, given back before the
            duck.release_unused()   # canonical tables are conformed: the parse's last peak
        if not found.column("id").equals(gpu.column("id")):
            raise ValueError("GPU activities and their names out of step")
        for f in ("gi", "launch_id", "op_id"):
            gpu = gpu.append_column(f, found.column(f))
        del found
        gpu = gpu.append_column("name", pc.take(_coded(names.column("name")), gpu.column("gi"))).drop_columns(["gi"])
        del names
        cpu_ranges = _conformed("cpu_ranges", self.range_rows())
        return Profile(gpu_activities=_conformed("gpu_activities", gpu),
                       cpu_ranges=cpu_ranges,
                       launches=_conformed("launches", launches),
                       syncs=_conformed("syncs", syncs), meta=meta, warnings=self.warnings)

    def ranges(self, last_gpu, last_call) -> None:
        """The ranges numbered (r0) and their nesting sweep over ranges and calls: the ops table that
        launches() uses, and the depths and parents that range_rows() gives cpu_ranges."""
        x, t = self.db.execute, self.event_types_used
        pp, se, dc = t["NvtxPushPopRange"], t["NvtxStartEndRange"], t["NvtxDomainCreate"]
        pid, rngs = _PID.format(c="n.gtid"), f"n.event_type IN ({pp}, {se}) AND n.start_ns IS NOT NULL"
        x(f"""CREATE TEMP TABLE dom AS SELECT n.domain_id, any_value(n.name) AS name FROM nv n
              WHERE n.event_type = {dc} AND n.domain_id IS NOT NULL GROUP BY ALL""")
        self.names = self.parse_names()
        n_open, n_other, end = self.one(f"""
            SELECT count(*) FILTER (n.end_ns IS NULL), count(*) FILTER ({pid} NOT IN (SELECT pid FROM ranks)),
                   greatest(max(n.end_ns), max(n.start_ns), {int(last_gpu or 0)},
                            {"NULL" if last_call is None else int(last_call)}::BIGINT)
            FROM nv n WHERE {rngs}""")
        if n_open:
            self.warn(f"{n_open} NVTX ranges were never closed; clipped to the end of the capture ({end} ns)")
        if n_other:
            self.warn(f"{n_other} NVTX ranges of processes without GPU activity dropped")
        # a large export's ranges sorted a rank at a time (`numbered`'s parts): the sort's buffers
        # are the NVTX rows' largest at 1.9 M ranges; otherwise one part, every rank
        ranks = [int(k) for k, in self.db.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
        parts = [f"r.rank = {k}" for k in ranks] if self.compress and len(ranks) > 1 else ["true"]
        self.numbered("r0", f"""
            SELECT n.pos, n.domain_id, r.rank, n.gtid, n.start_ns, e AS end_ns, n.event_type = {pp} AS pushpop
            FROM (SELECT *, COALESCE(end_ns, {int(end or 0)}) AS e FROM nv) n JOIN ranks r ON r.pid = {pid}
            WHERE {rngs} AND {{part}}
            ORDER BY r.rank, n.start_ns, e DESC, n.gtid & 16777215, n.pos""", parts)
        self.drop("nv")
        self.nv = None
        # One sweep per thread over push/pop range starts (+1) and ends (-1) and CUDA calls (0): the
        # running sum is the open-range count. Ends at t come before starts at t (end exclusive), the
        # end of a zero-length range after its start, and a call after everything at its time.
        # The sort key packs the kind above the id (ids < 2^56), so the sweep sorts two columns.
        # DuckDB sorts (a plain ORDER BY), Arrow sums: every range adds one start and one end on its
        # thread, so a thread's sum is 0 and the running sum over all threads in (gtid, t, kid)
        # order is each thread's own (no window operator, which costs about twice the sort).
        # A large sweep goes in blocks of whole threads (`sweep_blocks`, in gtid order), one a core:
        # each block sorted here, then swept and nested on a thread of its own (Arrow's kernels let
        # go of the GIL) while the next is sorted; the blocks' rows, joined in block order, are the
        # one sweep's.
        ends = _flat(self.q("SELECT end_ns FROM r0").column("end_ns"))   # by id (r0's rows are in id order)
        blocks = self.sweep_blocks()
        swept: list[Later] = []
        for i, cond in enumerate(blocks):
            ev = self.q(f"""
                SELECT gtid, t, kid FROM (SELECT gtid, start_ns AS t, id + {_K} AS kid FROM r0 WHERE pushpop AND {cond}
                      UNION ALL SELECT gtid, end_ns, id + CASE WHEN end_ns > start_ns THEN 0 ELSE {2 * _K} END FROM r0
                                WHERE pushpop AND {cond}
                      UNION ALL SELECT gtid, start_ns, id + {3 * _K} FROM l0
                                WHERE {cond} AND gtid IN (SELECT DISTINCT gtid FROM r0 WHERE pushpop))
                ORDER BY gtid, t, kid""")
            if ev.num_rows >= RELEASE_AFTER:   # the sort's pages that DuckDB's allocator keeps, back to the system
                duck.release_unused()          # before the sweep allocates (Arrow's, elsewhere): ~40 MiB off the peak
            last = i + 1 == len(blocks)
            swept.append(Later(_sweep, ev, ends, threaded=not last, name=f"traceview-nsys-sweep-{i}"))
            del ev
        del ends
        depth, parent_id, crosses, op = self.nest([later.result() for later in swept])
        del swept
        # the sweep's arrays (up to 321 MiB of Arrow's pool at 1.9 M ranges) back to the system: the
        # pool would keep them through the analysis, which allocates elsewhere (docs/MEMORY.md)
        pa.default_memory_pool().release_unused()
        crossing = pc.sum(crosses).as_py() or 0
        if crossing:
            self.warn(f"{crossing} NVTX push/pop ranges end after their enclosing range (not properly nested)")
        del crosses
        self.reg("ops", op)
        del op
        self.nesting = (depth, parent_id)

    def range_rows(self) -> pa.Table:
        """cpu_ranges' rows, from r0 and the sweep's nesting (`ranges`). Built after the GPU rows'
        joins and sort (`run`): the largest of the profile's tables is not held through them."""
        nesting, self.nesting = self.nesting, None
        if nesting is None:
            raise RuntimeError("range_rows() before ranges()")
        depth, parent_id = nesting
        # Integer columns in id order first; the names (parsed and coded in file order) are then
        # gathered by position (a take of dictionary codes, no sort of strings).
        # The rows are r0's in its order (a scan: no sort), the domain names looked up per distinct id.
        rows = self.q(f"""SELECT id, rank, {_PID.format(c='gtid')} AS pid, gtid & 16777215 AS tid, start_ns, end_ns,
                                 domain_id, pos FROM r0""")
        doms = self.q("""
            SELECT r.domain_id, CASE WHEN r.domain_id IS NULL OR r.domain_id = 0 THEN NULL
                                     ELSE COALESCE(d.name, '<unknown domain ' || r.domain_id || '>') END AS domain
            FROM (SELECT DISTINCT domain_id FROM r0) r LEFT JOIN dom d ON d.domain_id = r.domain_id""")
        self.drop("r0")
        at = pc.index_in(rows.column("domain_id"), value_set=_flat(doms.column("domain_id")))
        rows = rows.drop_columns(["domain_id"]).append_column("domain", pc.take(_flat(doms.column("domain")), at))
        del doms, at
        rows = rows.append_column("depth", depth).append_column("parent_id", parent_id)
        del depth, parent_id
        pos = rows.column("pos")
        names = self.names
        self.names = {}           # the text goes with it
        rows = rows.drop_columns(["pos"])
        for f, col in names.items():
            rows = rows.append_column(f, pc.take(col, pos))
        del names, pos
        return rows

    def sweep_blocks(self) -> list[str]:
        """The nesting sweep's blocks, as conditions on r0's and l0's `gtid`: contiguous runs of
        threads in gtid order of about equal push/pop ranges, one a core (up to READ_PARTS); one
        block (all threads) where one core is given or the ranges are fewer than 2 x SWEEP_BLOCK_MIN."""
        parts = self.parts
        if parts < 2:
            return ["TRUE"]
        counts = self.db.execute("SELECT gtid, count(*) FROM r0 WHERE pushpop GROUP BY gtid ORDER BY gtid").fetchall()
        if sum(n for _, n in counts) < 2 * SWEEP_BLOCK_MIN:
            return ["TRUE"]
        groups = _thread_groups(counts, parts)
        return ["TRUE"] if len(groups) < 2 else [f"gtid BETWEEN {g[0]} AND {g[-1]}" for g in groups]

    def nest(self, blocks: list[dict]):
        """From the swept blocks (`_sweep`, in block order; the list is emptied as they are joined):
        depth, parent id and whether it ends after its parent, of every range (in id order; null
        where not push/pop), and the innermost open range of each call (table id, op_id)."""
        def joined(get):
            got = [get(b) for b in blocks]
            return got[0] if len(got) == 1 else pa.concat_arrays(got)
        s_id = joined(lambda b: b["s_id"])
        cols = [joined(lambda b, j=j: b["cols"][j]) for j in range(3)]
        op = blocks[0]["op"] if len(blocks) == 1 else pa.concat_tables([b["op"] for b in blocks])
        blocks.clear()
        # the starts in id order: each range's place among them (its start's), null for a start/end
        # range (no depth, no parent). A block's starts run up by id on each thread: inverting the
        # permutation is linear where a sort of the merged runs is not (1.9 M starts: 6 ms, 195).
        n_ranges = self.one("SELECT count(*) FROM r0")[0]
        if n_ranges:
            at = pc.inverse_permutation(s_id, max_index=n_ranges - 1)
            cols = [pc.take(c, at) for c in cols]
            del at
        return cols[0].cast(pa.int32()), cols[1], pc.fill_null(cols[2], False), op

    def parse_names(self) -> dict[str, pa.Array]:
        """kind, name, seq, input_dims of every NVTX_EVENTS row read, in file order (positions `pos`);
        the strings dictionary-coded, so that the text goes now and ranges gather only codes.
        emit_nvtx names: 'aten::mm, seq = 12, op_id = 5, sizes = [[2, 3]], input_op_ids = [...]'.
        A name repeats over many rows: each distinct name is parsed once, and the rows take their
        fields by code. The codes come out as `_coded` over the rows would give them (each value
        coded in order of first appearance: a field's first row is the first row of the first
        distinct name, in that order, that gives the value)."""
        raw = self.nv.column("name")
        if raw.null_count:   # not from the reader (which gives '' for no text); parsed row by row
            return self._parse_rows()
        enc = pc.dictionary_encode(raw)
        enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
        del raw
        self.drop("nv")  # the text goes: the sweep needs the integer columns only
        self.nv = self.nv.drop_columns(["name"])
        self.reg("nv", self.nv)
        rows = enc.indices
        n_names = len(enc.dictionary)
        self.reg("nv_names", pa.table({"name": enc.dictionary}))
        del enc
        parsed = self.q(_PARSE_NAMES.format(table="nv_names"))
        self.drop("nv_names")
        if parsed.num_rows != n_names:
            raise ValueError("NVTX names and their fields out of step")
        out = {}
        for f in parsed.column_names:
            col = parsed.column(f).combine_chunks()
            if f == "seq":
                out[f] = pc.take(col, rows)
            else:
                e = pc.dictionary_encode(col)
                out[f] = pa.DictionaryArray.from_arrays(pc.take(e.indices, rows), e.dictionary).cast(schema.CODED)
            parsed = parsed.drop_columns([f])
        return out

    def _parse_rows(self) -> dict[str, pa.Array]:
        parsed = self.q(_PARSE_NAMES.format(table="nv"))
        if parsed.num_rows != self.nv.num_rows:
            raise ValueError("NVTX names and rows out of step")
        self.drop("nv")  # the text goes: the sweep needs the integer columns only
        self.nv = self.nv.drop_columns(["name"])
        self.reg("nv", self.nv)
        out = {}
        for f in parsed.column_names:
            col = parsed.column(f)
            out[f] = col.combine_chunks() if f == "seq" else _coded(col)
            parsed = parsed.drop_columns([f])  # each string column goes once coded
        return out

    def launches(self) -> pa.Table:
        x = self.db.execute
        # innermost open push/pop range at the call: the open-range count at its start gives the depth,
        # the latest range at that depth that started before the call is the one.
        x(f"""CREATE TEMP TABLE launches AS
            SELECT l0.*, {_PID.format(c='l0.gtid')} AS pid, o.op_id FROM l0 LEFT JOIN ops o USING (id)""")
        # the name as a code into the distinct names (gathered, not a string per call)
        out = self.q("""
            SELECT l.id, l.rank, l.pid, l.gtid & 16777215 AS tid, l.start_ns, l.end_ns, n.li,
                   COALESCE(l.table_api, a.v, CASE WHEN n.name LIKE 'cuda%' THEN 'runtime'
                                                   WHEN n.name LIKE 'cu%' THEN 'driver' ELSE 'runtime' END) AS api,
                   l.correlation, l.op_id
            FROM launches l LEFT JOIN lname n ON n.name_id IS NOT DISTINCT FROM l.name_id
                            LEFT JOIN e_api a ON a.id = l.event_class
            ORDER BY l.id""")
        names = _coded(self.q("SELECT name FROM lname ORDER BY li").column("name"))
        return out.append_column("name", pc.take(names, out.column("li"))).drop_columns(["li"])

    def syncs(self) -> pa.Table:
        pid = _PID.format(c="sy.gpid")
        # the stream an awaited event was recorded on: the CUDA event record with the same sync id
        # (newer exports), else the latest record of the same event id before the wait
        by_sync = "eventSyncId" in self.src.cols("CUPTI_ACTIVITY_KIND_CUDA_EVENT") and \
            "eventSyncId" in self.src.cols("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
        self.db.execute(f"""CREATE TEMP TABLE rec AS
            SELECT {_PID.format(c='ce.gpid')} AS pid, ce.event_id, ce.event_sync_id, ce.stream, l.start_ns AS t
            FROM ce LEFT JOIN launches l ON l.pid = {_PID.format(c='ce.gpid')} AND l.correlation = ce.correlation""")
        join = ("LEFT JOIN (SELECT pid, event_sync_id, any_value(stream) AS stream FROM rec GROUP BY ALL) e "
                "ON e.pid = s.pid AND e.event_sync_id = s.event_sync_id") if by_sync else \
               ("ASOF LEFT JOIN (SELECT * FROM rec WHERE t IS NOT NULL) e "
                "ON e.pid = s.pid AND e.event_id = s.event_id AND e.t <= s.start_ns")
        return self.q(f"""
            SELECT (row_number() OVER (ORDER BY s.rank, s.start_ns, s.end_ns, s.stream, s.correlation) - 1)::BIGINT
                       AS id,
                   s.rank, s.start_ns, s.end_ns, COALESCE(k.v, 'other') AS kind, s.device,
                   CASE WHEN s.stream = 4294967295 THEN NULL ELSE s.stream END AS stream,
                   s.event_id, e.stream AS event_stream, s.correlation
            FROM (SELECT sy.*, r.rank, {pid} AS pid FROM sy JOIN ranks r ON r.pid = {pid}) s
            LEFT JOIN e_sync k ON k.id = s.sync_type {join}
            ORDER BY id""")
