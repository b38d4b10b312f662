"""The DuckDB session of one analysis: one connection, the profile's canonical tables registered
under their names, the interval macros (traceview/sql/intervals/*.sql) loaded, and the tables the
engine's steps materialized (`build` in engine/pipeline.py is the way to make them). `sql()` and
`rows()` are for one-line lookups; parameters travel as DuckDB named parameters (`$name`), never by
string formatting of trace text. `reader()` is another connection onto the session's tables, for
queries on another thread (engine/pipeline.start, the critical paths' walk).
"""
from __future__ import annotations

import contextlib
import itertools
import weakref

import duckdb
import pyarrow as pa

from .. import duck, schema
from ..profile import Profile
from .settings_lock import SettingsLock


def _macros() -> list[str]:
    from .steps import sql_files
    return [f.read_text(encoding="utf-8") for f in sorted(sql_files("intervals"), key=lambda f: f.name)
            if f.name.endswith(".sql")]


ALLOCATOR_SETTINGS = ("SET allocator_flush_threshold = '32MB'", "SET allocator_background_threads = true")
# A step declared `threads: all` gets `step_threads` only where one of the tables it reads holds at
# least this many rows: two of DuckDB's row groups (122,880 rows each), which is where a scan is
# split between threads at all. Below, a second thread only costs: each change of the thread count
# starts DuckDB's workers afresh, and a new worker's first allocations fault their pages in. Measured
# in one process, the same profile's `assemble` alternating one and two threads for every declared
# step (medians): nsys h100_2gpu_train_a2a (5,299 GPU activities) 0.43 -> 0.55 s and
# hta_df_index_resolver (22,290) 0.73 -> 0.92 s slower on two; overlap x34 (250,920 activities,
# 1,017,654 CPU ranges) 6.68 -> 6.55 s faster.
PARALLEL_MIN_ROWS = 2 * 122_880
# The steps' tables live in the database's compressed catalog (duck.STORE), which DuckDB compresses
# only when it is checkpointed. A table of at least COMPRESS_MIN_ROWS rows counts towards the next
# checkpoint, made once COMPRESS_ROWS rows are counted (on `step_threads`). On nsys
# h100_2gpu_train_a2a x100 (530,000 GPU activities, 1.9 M NVTX ranges; docs/MEMORY.md) four
# checkpoints (0.42 s on two threads) take the whole process's peak from 1,272 to 1,021 MiB, its
# wall from 5.32 to 5.65 s (1,000,000 rows a checkpoint: two, 1,063 MiB, 5.54 s); a trace whose
# tables stay under these sizes is never checkpointed (a checkpoint costs about 17 ns a value on
# one thread, and a scan of a compressed table twice a plain one's).
COMPRESS_MIN_ROWS = 400_000
COMPRESS_ROWS = 500_000
_SCHEMAS = itertools.count(1)   # each session's tables in a schema of its own (Session.schema)


def _create(con, table: str, sql: str, params: dict | None = None) -> int:
    """CREATE OR REPLACE `table` (qualified) AS `sql` on `con`; its row count."""
    got = con.execute(f"CREATE OR REPLACE TABLE {table} AS {sql}", params or None).fetchone()
    return int(got[0]) if got else 0


def _drop_schema(con, schema: str) -> None:
    """A session gone: its tables with it (a schema's tables outlive the connection that made them)."""
    try:
        con.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        con.close()
    except Exception:  # noqa: BLE001 - the database itself may be gone (interpreter exit)
        pass


class Session:
    """One DuckDB connection with the profile's tables registered under their canonical names.

    The connection opens before the profile is loaded (`Session()` then `attach(profile)`), so
    that checks of user patterns, which must compile in DuckDB, run on it before any work."""

    def __init__(self, profile: Profile | None = None, threads: int = 1, share: Session | None = None):
        self.profile: Profile | None = None
        # `share`: a session of another thread's database, this one a second connection onto it
        # (`shared`), for steps built on a thread of its own beside that session's: its queries wait
        # for that session's steps with settings of their own (the settings lock, as a reader's),
        # and it changes no setting of the database.
        self.shared = share is not None
        self.con: duckdb.DuckDBPyConnection = share.con.cursor() if share is not None else duck.connect()
        # The steps' tables live in a schema of the session's own (not temp tables, which only
        # their connection sees): a reader on another connection (`reader`) queries them from
        # another thread while this one goes on. Names resolve there first, then in temp (the
        # registered Arrow tables) and main (the interval macros).
        self.schema = f"{duck.STORE}.tv_s{next(_SCHEMAS)}"
        self.con.execute(f"CREATE SCHEMA {self.schema}")
        self.con.execute(f"SET search_path = '{self.schema},main'")
        # its tables go when the session does (`close`, or when no longer referenced): closing its
        # connection alone would leave them in the database
        self._gone = weakref.finalize(self, _drop_schema, self.con.cursor(), self.schema)
        self._gone.atexit = False
        # Held alone while a step runs with database-wide settings of its own (threads, optimizers),
        # which a reader's query on another thread must not run under (its plan and order as on
        # this one); held shared by readers' queries, which run beside each other
        self.settings_lock: SettingsLock = share.settings_lock if share is not None else SettingsLock()
        # One thread by default: floating-point sums then run in one order, so the same input
        # gives byte-identical reports (and on traces of this size it is not slower: measured).
        self.threads: int = share.threads if share is not None else max(1, int(threads))
        if share is None:
            self.con.execute(f"SET threads = {self.threads}")
        # Steps declared `threads: all` (engine/steps.py) run on this many threads: their tables are
        # the same on any number. A run that analyzes its job in this process gives it --jobs (the
        # cores by default: runs.run_job); a mapped job's sessions keep one (the workers use the cores).
        self.step_threads = self.threads
        self.parallel_min_rows = PARALLEL_MIN_ROWS   # (tests set 0: every declared step on step_threads)
        self._rows: dict[str, int] = {}   # rows of the tables materialized or registered here
        self._arrow: dict[str, pa.Table] = {}   # Python steps' tables kept as Arrow (materialize_arrow)
        # Memory a query freed goes back to the system when it is done (the steps' tables stay):
        # without these, the allocator kept the peak of every large query (measured on a 644 MiB
        # Kineto trace: the process peak 1,019 MiB -> 942 MiB, the same CPU time).
        for text in (ALLOCATOR_SETTINGS + tuple(_macros())) if share is None else ():
            self.con.execute(text)
        self._views: set[str] = set()
        self._registered: set[str] = set()
        self._given: dict[str, pa.Table] = {}    # the tables of `_registered` (a reader registers them too)
        self.built: dict[str, dict] = {}          # step -> the parameters it was built with (engine/pipeline.py)
        self.build_counts: dict[str, int] = {}    # step -> times materialized (a test holds it at 1)
        self._strings: dict[str, str] = {}         # rows(): one object per distinct string
        self.freed: set[str] = set()               # steps whose tables were dropped after their last use
        self.started: dict[str, tuple] = {}        # Python steps begun on threads (engine/pipeline.start)
        self.uncompressed = 0                      # rows counted towards the next checkpoint (_made)
        self.let_go: set[str] = set()              # the profile's tables let go (let_go_of)
        self.short_lived: frozenset[str] = frozenset()   # steps whose tables are not counted (_made)
        self.checkpoints = 0                       # checkpoints of the tables' catalog made (tests)
        if profile is not None:
            self.attach(profile)

    def attach(self, profile: Profile) -> None:
        """Register the profile's canonical tables (once per session)."""
        if self.profile is not None:
            raise RuntimeError("this session already holds a profile")
        self.profile = profile
        for name in schema.TABLES:
            self.con.register(name, getattr(profile, name))

    def let_go_of(self, name: str) -> bool:
        """Let go of the profile's table `name` once no step still to be built reads it (a command
        done with the profile once it has the document: document/assemble.py): unregistered here,
        and the profile's field emptied (None), so that its memory goes back; its row count stays
        known (`rows_in`), and a step that reads it is refused from then on (engine/pipeline.build).
        False where the session does not hold it as the profile's own (a mapped job's, a table a
        caller registered in its place, one let go already). A reader made before (`reader`) keeps
        its own hold unless it was made `without` it."""
        profile = self.profile
        if profile is None or name not in schema.TABLES or name in self._registered or name in self.let_go \
                or getattr(profile, "remote", None) is not None:
            return False
        self._rows[name] = getattr(profile, name).num_rows
        self.con.unregister(name)
        self.let_go.add(name)
        setattr(profile, name, None)
        return True

    def release_pages(self) -> None:
        """A mapped job (mapped.Remote): let go of the pages of its memory-mapped tables that queries
        touched so far (they count in this process's RSS until then); a no-op otherwise."""
        remote = getattr(self.profile, "remote", None) if self.profile is not None else None
        if remote is not None:
            remote.release_pages()

    def tables(self) -> set[str]:
        """Names queryable now: canonical tables, registered Arrow tables, materialized steps."""
        return (set(schema.TABLES) - self.let_go) | self._registered | self._views

    def attached(self, name: str) -> pa.Table | None:
        """The profile's Arrow table `name` where the session queries it as attached (not replaced
        by `register`), else None: a step may read its coded columns without a query."""
        if self.profile is None or name not in schema.TABLES or name in self._registered or name in self.let_go:
            return None
        return getattr(self.profile, name)

    def qualified(self, name: str) -> str:
        """Table `name` by its full name (a query that shadows it with a CTE of that name reads it so):
        a step's table in the session's schema, a registered Arrow table in temp."""
        if name in self._views and name not in self._arrow:
            return f"{self.schema}.{name}"
        return f"temp.main.{name}"

    def columns(self, name: str) -> list[str]:
        """The column names of table `name` (a relation's, bound without running a query: a
        quarter of DESCRIBE's cost, paid once per step built)."""
        return list(self.con.table(name).columns)

    def rows_in(self, name: str) -> int | None:
        """The rows of table `name` as this session holds it (a step's table, a registered one, or
        the profile's), without a query; None where the session does not know (a mapped job's
        tables, kept by its workers)."""
        if name in self._rows:
            return self._rows[name]
        if self.profile is not None and name in schema.TABLES and name not in self._registered:
            table = getattr(self.profile, name, None)
            return table.num_rows if isinstance(table, pa.Table) else None
        return None

    def one_thread_each(self) -> bool:
        """Whether every step of this session runs on one thread although more are given: no table
        of the profile holds `parallel_min_rows` rows, so a second core is idle while a step runs
        unless work is begun beside it (engine/pipeline.start_sql, flops/early.start_small)."""
        return self.profile is not None and getattr(self.profile, "remote", None) is None \
            and self.step_threads > self.threads \
            and not any((self.rows_in(t) or 0) >= self.parallel_min_rows for t in schema.TABLES)

    def worth_threads(self, names) -> bool:
        """Whether a step declared `threads: all` that reads the tables `names` runs on `step_threads`:
        where it has more than one and one of the tables holds `parallel_min_rows` rows or more."""
        return self.step_threads > self.threads and self.large(names)

    def large(self, names) -> bool:
        """Whether one of the tables `names` holds `parallel_min_rows` rows or more."""
        return any((self.rows_in(n) or 0) >= self.parallel_min_rows for n in names)

    def optimizers_off(self, step) -> tuple[str, ...]:
        """The DuckDB optimizers `step` turns off while it runs here: those its header names where
        one of the tables it reads is large (`large`), none otherwise. The header corrects the
        optimizer's choices on large tables (comm_ops: the join sides it picks by estimates of tens
        of millions of rows); on small ones its own choice costs little (hta_df_index_resolver's
        comm_ops 17-19 against 20-25 ms, the same table), and a step that changes no setting of
        the database runs beside a reader's queries, or on a reader itself."""
        return step.disabled_optimizers if step.disabled_optimizers and self.large(step.requires) else ()

    def _replace(self, name: str) -> None:
        if name in self._registered:
            self.con.unregister(name)
            self._registered.discard(name)

    def materialize_sql(self, name: str, sql: str, params: dict,
                        disabled_optimizers: tuple[str, ...] = (), parallel: bool = False) -> None:
        """Keep the result of a step's SQL inside DuckDB as table `name` of the session's schema
        (engine/pipeline.py), with the DuckDB optimizers its header names off while it runs (names
        checked by steps.parse_header), on `step_threads` threads where the step is `parallel`."""
        self._replace(name)
        if self.shared and disabled_optimizers:
            raise RuntimeError(f"step {name} sets optimizers of the database: not built on a shared session")
        threads = self.step_threads if parallel and not self.shared else self.threads
        # Settings of the database's, not of this connection's: changed only while no reader's
        # query runs (the lock); a step declared `threads: all` (the same table on any number)
        # that would wait for one runs on the session's threads instead. A shared session's steps
        # hold the lock shared, as a reader's queries do (`_guard`: it sets nothing, refused above).
        own = bool(disabled_optimizers)
        if own:
            self.settings_lock.acquire()
        elif threads != self.threads:
            own = self.settings_lock.acquire(blocking=False)
            threads = threads if own else self.threads
        try:
            with self._guard():
                if disabled_optimizers:
                    self.con.execute(f"SET disabled_optimizers = '{','.join(disabled_optimizers)}'")
                try:
                    with self._on_threads(threads):
                        self._rows[name] = _create(self.con, f"{self.schema}.{name}", sql, params)
                finally:
                    if disabled_optimizers:
                        self.con.execute("RESET disabled_optimizers")
        finally:
            if own:
                self.settings_lock.release()
        self._views.add(name)
        self._made(name, self._rows[name])

    def adopt_made(self, name: str, rows: int) -> None:
        """Take table `name`, made in this session's schema by a reader (engine/pipeline.start_sql),
        as a step's table materialized here."""
        self._replace(name)
        self._rows[name] = rows
        self._views.add(name)
        self._made(name, rows)

    def _made(self, name: str, rows: int) -> None:
        """Table `name` of `rows` rows made in the session's schema: a large one counts towards a
        checkpoint of the compressed catalog (COMPRESS_ROWS), made here once enough are counted;
        one of `short_lived` (dropped soon after: compressing it would cost more than it saves)
        does not count (a checkpoint still compresses it where it is there then)."""
        if self.shared or rows < COMPRESS_MIN_ROWS or name in self.short_lived:
            return
        self.uncompressed += rows
        self._compress_due()

    def _compress_due(self) -> None:
        """Checkpoint where COMPRESS_ROWS rows are counted and no large table of `short_lived` is
        there (it would be compressed for nothing: the checkpoint waits for its drop, `drop`)."""
        if self.uncompressed >= COMPRESS_ROWS and not any(
                n in self._views and n not in self._arrow and self._rows.get(n, 0) >= COMPRESS_MIN_ROWS
                for n in self.short_lived):
            self.compress()

    def compress(self) -> bool:
        """Checkpoint the compressed catalog (duck.STORE): the tables made since the last checkpoint
        are compressed, on `step_threads` threads. Only while no reader's query runs (the settings
        lock, not waited for) and no other connection writes (DuckDB refuses the checkpoint then):
        otherwise it is left for the next large table. Whether it was made."""
        if self.shared or not self.settings_lock.acquire(blocking=False):
            return False
        try:
            with self._on_threads(self.step_threads):
                self.con.execute(f"CHECKPOINT {duck.STORE}")
        except duckdb.TransactionException:
            return False
        finally:
            self.settings_lock.release()
        self.uncompressed = 0
        self.checkpoints += 1
        return True

    @contextlib.contextmanager
    def _on_threads(self, threads: int):
        """The database on `threads` threads while the block runs, the session's given back after
        (a setting of the database: the caller holds the settings lock where it differs)."""
        if threads == self.threads:
            yield
            return
        self.con.execute(f"SET threads = {threads}")
        try:
            yield
        finally:
            self.con.execute(f"SET threads = {self.threads}")

    def materialized(self, name: str) -> bool:
        """Whether `name` is a step's table materialized here (a table of the session's schema, or a
        Python step's Arrow table kept as it is), not a table a caller registered."""
        return name in self._views

    def drop(self, name: str) -> None:
        """Free the table of step `name` (built here; engine/pipeline.py after its last use):
        it stays counted as built (its consumers are), but is no longer queryable."""
        if name not in self._views:
            raise KeyError(name)
        self._drop(name)
        self._views.discard(name)
        self._rows.pop(name, None)
        self.freed.add(name)
        if self.uncompressed and name in self.short_lived:
            self._compress_due()

    def _drop(self, name: str) -> None:
        if self._arrow.pop(name, None) is not None:
            self.con.unregister(name)
            pa.default_memory_pool().release_unused()   # its memory back to the system (Arrow's pool keeps it)
        else:
            self.con.execute(f"DROP TABLE IF EXISTS {self.schema}.{name}")

    def materialize_arrow(self, name: str, table: pa.Table | pa.RecordBatchReader) -> None:
        """Keep a Python step's Arrow result as step table `name` (engine/pipeline.py). A table is
        kept as it is, DuckDB reading it in place (no copy: range_context_raw at x34, 1,017,654 rows,
        took 0.14 s to copy); a reader of batches (read once) is copied into a table, each batch
        let go once copied."""
        self._replace(name)
        if isinstance(table, pa.Table):
            self.con.register(name, table)
            self._arrow[name] = table
            self._rows[name] = table.num_rows
            self._views.add(name)
            return
        self.con.register("__step_result", table)
        with self._guard():
            self._rows[name] = _create(self.con, f"{self.schema}.{name}", "SELECT * FROM __step_result")
        self.con.unregister("__step_result")
        self._views.add(name)
        self._made(name, self._rows[name])

    def adopt(self, name: str, table: pa.Table, params: dict) -> None:
        """Take a step's table built elsewhere (a worker of a mapped job, traceview/mapped.py) as
        built here with `params`."""
        self.register(name, table)
        self.built[name] = dict(params)
        self.build_counts[name] = self.build_counts.get(name, 0) + 1

    def register(self, name: str, table: pa.Table) -> None:
        """Make an Arrow table queryable under `name` (replacing a table of that name): the rows a
        golden test gives a step."""
        if name in self._views:
            self._drop(name)
            self._views.discard(name)
        self.con.register(name, table)
        self._registered.add(name)
        self._given[name] = table
        self._rows[name] = table.num_rows

    def close(self) -> None:
        """Drop the session's tables and close its connection (the session is done with)."""
        self._gone()
        self.con.close()

    def reader(self, without: tuple[str, ...] = ()) -> Reader:
        """Another connection onto this session's tables, for queries on another thread while this
        one goes on (DuckDB lets go of the GIL while a query runs): it sees the steps' tables and
        the Arrow tables registered here so far, less the profile's tables named in `without` (which
        it never reads: the session may let go of them while it runs, `let_go_of`). Close it when done."""
        return Reader(self, without)

    def sql(self, sql: str, **params) -> pa.Table:
        params = {k: v for k, v in params.items() if f"${k}" in sql}
        with self._guard():
            return duck.arrow_table(self.con, sql, params)

    def _guard(self):
        """What a query of this session holds: the settings lock where the session is shared."""
        return self.settings_lock.shared() if self.shared else contextlib.nullcontext()

    def table(self, name: str) -> pa.Table:
        return self.sql(f"SELECT * FROM {name}")

    def arrow(self, name: str) -> pa.Table:
        """Table `name` as Arrow: a Python step's table as it is kept (no copy), else `table`."""
        kept = self._arrow.get(name)
        return kept if kept is not None else self.table(name)

    def rows(self, sql: str, **params) -> list[dict]:
        """The rows as dicts; equal strings are one object (a name repeated over a large job's rows
        is held once, not once per row)."""
        t = self.sql(sql, **params)
        names = t.column_names
        memo = self._strings
        cols = []
        for col in t.columns:
            vals = col.to_pylist()
            if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                vals = [v if v is None else memo.setdefault(v, v) for v in vals]
            cols.append(vals)
        return [dict(zip(names, vs, strict=True)) for vs in zip(*cols, strict=True)] if cols else \
            [{} for _ in range(t.num_rows)]


class Reader:
    """A session's tables queried from another thread (Session.reader): its own connection onto the
    session's database, the session's Arrow tables registered on it as they are when it is made.
    Each query holds the session's `settings_lock` shared: never while a step of the session runs
    with database-wide settings of its own, so its plan and threads are those the session's own
    query would have had, but beside other readers' queries."""

    def __init__(self, session: Session, without: tuple[str, ...] = ()):
        self.profile = session.profile
        self._registered = set(session._registered)
        self._strings: dict[str, str] = {}
        self.qualified = session.qualified
        self.shared, self.settings_lock = True, session.settings_lock   # (its queries hold the lock: _guard)
        self.schema = session.schema
        self.con = session.con.cursor()
        self.con.execute(f"SET search_path = '{session.schema},main'")
        self.let_go = set(session.let_go) | set(without)
        for name in schema.TABLES:
            if name not in self._registered and name not in self.let_go and self.profile is not None:
                self.con.register(name, getattr(self.profile, name))
        for name, table in {**session._given, **session._arrow}.items():
            self.con.register(name, table)

    def create(self, name: str, sql: str, params: dict) -> int:
        """Make table `name` of the session's schema from a step's SQL (engine/pipeline.start_sql),
        on the session's threads and settings (it holds the lock, as every query of a reader does);
        returns its row count."""
        with self.settings_lock.shared():
            return _create(self.con, f"{self.schema}.{name}", sql, params)

    attached = Session.attached
    rows = Session.rows
    sql = Session.sql
    _guard = Session._guard

    def close(self) -> None:
        self.con.close()
