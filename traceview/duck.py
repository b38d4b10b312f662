"""The thread's DuckDB database: one in-memory database that the connections a thread opens share
(the analysis session's, the nsys parser's), each connection with its own temp tables and
registered tables, which go when it is closed.

A database costs about 15-20 ms to make (its catalog of built-in functions) and its first queries
warm it up again; a connection onto one costs about 0.1 ms. An nsys export analyzed whole made two
(the parser's and the session's). With one, whole-process `analyze` of h100_2gpu_train_a2a (2.6 MiB)
against the tree before, paired medians of interleaved runs: 0.105 s less wall (12 pairs, 0.81 ->
0.70 s) and, the host slower, 0.045 s less (16 pairs, 0.94 -> 0.88 s; CPU 0.98 -> 0.91 s).

One database per thread, not per process: settings such as `threads` belong to the database, and a
session changes them around a step and sets them back, which is safe only where no other thread
queries the same database meanwhile (a Dask worker runs tasks on several threads; a session's own
readers, which query its tables from other threads, wait for such a step: engine/session.py
`settings_lock`). The parser sets the threads it uses while it runs and gives the session's back
(parsers/nsys.py). A process forked
from one that made a database (a pool worker) makes its own: DuckDB's threads do not survive a fork.

Each database has a second in-memory catalog attached, `STORE`, whose tables DuckDB compresses when
it is checkpointed (`ATTACH ':memory:' ... (COMPRESS)`): the analysis sessions' step tables live
there (engine/session.py checkpoints it once large tables have been made; docs/MEMORY.md)."""
from __future__ import annotations

import os
import threading

import duckdb

_local = threading.local()
STORE = "tv_tables"   # the compressed catalog of the steps' tables


def _make() -> duckdb.DuckDBPyConnection:
    """A new in-memory database with the compressed catalog `STORE` attached, and no automatic
    checkpoints: DuckDB would checkpoint (compress) it whenever the tables committed since the last
    one pass `checkpoint_threshold` (16 MiB), costing a small trace's whole run about 4 % (overlap
    x5, 10 interleaved pairs: 1.120 -> 1.162 s, and 1.004x with the threshold out of reach); the
    session checkpoints it where large tables make it worth it (engine/session.py `compress`)."""
    db = duckdb.connect(":memory:")
    try:
        db.execute(f"ATTACH ':memory:' AS {STORE} (COMPRESS)")
    except duckdb.Error:   # a DuckDB before 1.4 compresses no in-memory catalog: a plain one
        db.execute(f"ATTACH ':memory:' AS {STORE}")
    db.execute("SET checkpoint_threshold = '1TB'")
    return db


def connect() -> duckdb.DuckDBPyConnection:
    """A new connection onto this thread's in-memory database (made on the thread's first call, or
    taken from `begin`)."""
    db = getattr(_local, "db", None)
    if db is None or _local.pid != os.getpid():
        making, _local.making = getattr(_local, "making", None), None
        db = making[1].result() if making is not None and making[0] == os.getpid() else _make()
        _local.db, _local.pid = db, os.getpid()
    return db.cursor()


def begin() -> None:
    """Start making this thread's database on a thread of its own, for `connect` to take: DuckDB
    lets go of the GIL while it builds its catalog (15-20 ms), so the caller's imports go on
    meanwhile (runs.run_job). A no-op where the database is made or begun."""
    if getattr(_local, "db", None) is not None and _local.pid == os.getpid():
        return
    if getattr(_local, "making", None) is not None and _local.making[0] == os.getpid():
        return
    from .later import Later
    _local.making = (os.getpid(), Later(_make, name="traceview-database"))


_PURGE: list = []   # [the allocator's mallctl, or None where there is none to call] (found once)
_ARENAS_ALL = 4096   # jemalloc's MALLCTL_ARENAS_ALL: "arena.4096.purge" purges every arena


def release_unused() -> bool:
    """The pages DuckDB's allocator keeps after its memory is freed, given back to the system now;
    whether that could be asked. DuckDB's Linux builds allocate with jemalloc, linked in with its
    symbols prefixed (`duckdb_je_`), which keeps freed pages for a second (`dirty_decay_ms`) and
    gives them back only while DuckDB allocates or frees: through a stretch of Python after a large
    query (the critical-path walk after its chunk's fetch; the nsys parse's NVTX sweep after its
    sort), 100-300 MiB freed by DuckDB stayed resident beside what the Python allocated
    (docs/MEMORY.md). Elsewhere (another platform, another allocator or build) nothing is called.
    Purged pages are zero-filled when DuckDB allocates again, so this is for the large cases only."""
    if not _PURGE:
        fn = None
        try:
            import ctypes
            import sys
            ext = sys.modules.get("_duckdb") or sys.modules.get("duckdb.duckdb")
            path = getattr(ext, "__file__", None)
            if path and sys.platform.startswith("linux"):
                fn = ctypes.CDLL(path).duckdb_je_mallctl
                fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
                fn.restype = ctypes.c_int
        except (OSError, AttributeError):   # not loadable this way, or built without jemalloc
            fn = None
        _PURGE.append(fn)
    fn = _PURGE[0]
    return fn is not None and fn(f"arena.{_ARENAS_ALL}.purge".encode(), None, None, None, 0) == 0


def arrow_reader(rel: duckdb.DuckDBPyRelation, batch_rows: int):
    """The relation's result as a reader of Arrow record batches of `batch_rows` rows (a newer
    DuckDB names it to_arrow_reader and warns that fetch_arrow_reader is deprecated)."""
    read = rel.to_arrow_reader if hasattr(rel, "to_arrow_reader") else rel.fetch_arrow_reader
    return read(batch_rows)


def _seam_function():
    """DuckDB's own function that runs one statement to the format asked for (`duckdb._seam.submit`,
    DuckDB 2) and its default batch size, where it takes (con, sql, values, format, batch size);
    else None."""
    try:
        from duckdb import _seam
        submit = _seam.submit
        batch = int(_seam.DEFAULT_BATCH_SIZE)
        code = submit.__code__
        names = code.co_varnames[:code.co_argcount]
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    if names[:5] != ("con", "sql", "values", "format", "batch_size"):
        return None
    return submit, batch


def _seam_submit():
    """A query's rows as an Arrow table through `_seam_function` (con, sql, params), or None."""
    found = _seam_function()
    if found is None:
        return None
    submit, batch = found
    return lambda con, sql, params: submit(con, sql, params, "arrow", batch).arrow_table()


def _seam_stream():
    """A query's rows as a reader of Arrow batches through `_seam_function` (con, sql, rows a
    batch), or None."""
    found = _seam_function()
    if found is None:
        return None
    submit = found[0]
    return lambda con, sql, rows: submit(con, sql, None, "stream", int(rows)).arrow_reader()


_SUBMIT = _seam_submit()
_STREAM = _seam_stream()   # trusted as _SUBMIT is (_probe)
_PROBED = False   # whether _SUBMIT has given a known answer once (arrow_table's first call)
_PROBE, _ANSWER = "SELECT 42::INTEGER AS x, 'a' AS y", {"x": [42], "y": ["a"]}


def _probe(con: duckdb.DuckDBPyConnection) -> None:
    """On the first query: _SUBMIT kept only where it gives a known query's rows (a DuckDB whose
    function takes the same arguments but means something else by them is not trusted)."""
    global _SUBMIT, _STREAM, _PROBED
    _PROBED = True
    try:
        ok = _SUBMIT(con, _PROBE, None).to_pydict() == _ANSWER
    except Exception:  # noqa: BLE001 - any failure: the API from now on
        ok = False
    if not ok:
        _SUBMIT = _STREAM = None


def arrow_table(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None):
    """The rows of one query (`$name` parameters from `params`) as an Arrow table. DuckDB 2's
    relational API (`con.sql(...).to_arrow_table()`) parses the query's text and binds it (its
    output's names and types, for a relation that may be composed further) before it runs it,
    which parses and plans it again: a query whose rows are all that is wanted is submitted once,
    through the function that API itself ends in (`_seam_submit`), once it has answered a known
    query right (`_probe`). Where a DuckDB has none, or it refuses (its arguments changed), the API."""
    if _SUBMIT is not None and not _PROBED:
        _probe(con)
    submit = _SUBMIT
    if submit is not None:
        try:
            return submit(con, sql, params or None)
        except (TypeError, AttributeError):   # not the function this was written for: the API
            pass
    return con.sql(sql, params=params or None).to_arrow_table()


def query_reader(con: duckdb.DuckDBPyConnection, sql: str, batch_rows: int):
    """The rows of one query as a reader of Arrow record batches of `batch_rows` rows, submitted
    once as `arrow_table` submits it, not through the relational API (which the command line
    leaves out until it is used: lean_imports); through it where `arrow_table` would use it."""
    if _SUBMIT is not None and not _PROBED:
        _probe(con)
    stream = _STREAM if _SUBMIT is not None else None
    if stream is not None:
        try:
            return stream(con, sql, batch_rows)
        except (TypeError, AttributeError):   # (as arrow_table)
            pass
    return arrow_reader(con.sql(sql), batch_rows)
