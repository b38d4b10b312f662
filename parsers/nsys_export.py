"""Access to Nsight Systems SQLite exports: reading one as Arrow tables (`Export`), and making
one from a report (.nsys-rep, .qdrep) by running `nsys export` (`exported`).

Where the export of a report lies:
- with a store (`nsys_store.exports_in(store)`, which the per-rank task sets under the store's lock on that
  report): in the store, `DIR/exports/<key>.<stamp>.sqlite` (`Store.export_path`), reused while the
  report is unchanged (same size and mtime); exports of earlier versions of it are removed;
- without one (`--no-store`, or `load()` outside a configured run): in a temporary folder, removed
  as soon as the report is read.
`nsys` writes to a temporary file that is renamed into place only after a successful export,
so an interrupted or failed export never leaves a half-written file.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import adbc_driver_manager
import adbc_driver_sqlite
import pyarrow as pa

from traceview.errors import TraceError, UsageError
from traceview.later import Later

from . import nsys_store
from .bounded_read import open_regular

SQLITE_MAGIC = b"SQLite format 3\x00"
EXPORT_TIMEOUT_S = 600  # default limit on one `nsys export`; TRACEVIEW_NSYS_TIMEOUT=SECONDS changes it
TIMEOUT_ENV = "TRACEVIEW_NSYS_TIMEOUT"
# Timestamps outside [-2^61, 2^62] ns are impossible (and their differences could overflow int64).
MIN_TIME_NS, MAX_TIME_NS = -(1 << 61), 1 << 62
PART_MIN_ROWS = 200_000   # rowids of a range of a table read in parts (Export.table_behind)
# Places Nsight Systems installs itself when it is not on PATH.
_NSYS_GLOBS = (
    "/opt/nvidia/nsight-systems*/*/bin/nsys",
    "/opt/nvidia/nsight-systems*/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
)
_HOW = ("install Nsight Systems (Debian: apt-get install nsight-systems from non-free, or NVIDIA's "
        "installer) or pass --nsys PATH, or run `nsys export --type sqlite {name}` on the machine "
        "that has it and pass the .sqlite file")


def find_nsys(report: Path, nsys_bin: str | os.PathLike | None = None) -> str:
    """Path of the nsys executable to use: `nsys_bin` if given, else PATH, else the usual places."""
    if nsys_bin:
        p = Path(nsys_bin)
        if p.is_dir():
            p = p / "nsys"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
        found = shutil.which(str(nsys_bin))
        if found:
            return found
        raise TraceError(report, f"--nsys {nsys_bin}: no such executable; " + _HOW.format(name=report.name))
    found = shutil.which("nsys")
    if found:
        return found
    for pattern in _NSYS_GLOBS:
        for cand in sorted(glob.glob(pattern), reverse=True):
            if os.access(cand, os.X_OK):
                return cand
    raise TraceError(report, "reading an Nsight Systems report needs the `nsys` command, which is not "
                             "installed (not on PATH): " + _HOW.format(name=report.name))


def nsys_version(nsys: str) -> str | None:
    """The installed nsys version, e.g. '2022.4.2.1', or None if it cannot be told."""
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out.stdout + out.stderr)
    return m.group(1) if m else None


def is_sqlite(path: Path) -> bool:
    try:
        with open_regular(path) as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except (OSError, TraceError):
        return False


@contextmanager
def exported(report: Path, nsys_bin: str | os.PathLike | None = None) -> Iterator[Path]:
    """The SQLite export of an Nsight Systems report while inside: the store's (reused, or made now
    with `nsys export`) under `exports_in`, else made in a temporary folder removed on leaving."""
    report = Path(report)
    if not report.is_file():
        raise TraceError(report, "no such file")
    store = nsys_store.current()
    if store is not None:
        out = store.export_path(report)
        if not (out.is_file() and is_sqlite(out)):
            out.parent.mkdir(parents=True, exist_ok=True)
            to_sqlite(report, out, nsys_bin)
        _drop_stale(out, store.export_prefix(report))
        yield out
        return
    with tempfile.TemporaryDirectory(prefix="traceview-nsys-") as tmp:
        yield to_sqlite(report, Path(tmp) / "export.sqlite", nsys_bin)


def to_sqlite(report: Path, out: Path, nsys_bin: str | os.PathLike | None = None) -> Path:
    """Export `report` with `nsys export` to `out` (written whole or not at all); returns `out`."""
    nsys = find_nsys(report, nsys_bin)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp.sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--quiet", "true",
           "--output", str(tmp), str(report)]
    try:
        try:
            res = _run(cmd)
            if res.returncode != 0 and re.search(r"(unrecognized|unknown) option.*quiet",
                                                 res.stderr + res.stdout, re.I):
                res = _run(cmd[:6] + cmd[8:])  # an nsys without --quiet
        except subprocess.TimeoutExpired:
            raise TraceError(report, f"`nsys export` did not finish within {export_timeout():g} s and was stopped "
                                     f"({TIMEOUT_ENV}=SECONDS allows longer; or run `nsys export --type sqlite "
                                     f"{report.name}` yourself and pass the .sqlite)") from None
        except OSError as e:
            raise TraceError(report, f"cannot run {nsys}: {e.strerror or e}") from None
        made = tmp if tmp.is_file() else tmp.with_name(tmp.name + ".sqlite")
        if res.returncode != 0 or not made.is_file() or not is_sqlite(made):
            raise TraceError(report, _failure(report, nsys, res))
        os.replace(made, out)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".sqlite")):
            try:
                leftover.unlink()
            except FileNotFoundError:
                pass
    return out


def export_timeout() -> float:
    """Seconds one `nsys export` may take: $TRACEVIEW_NSYS_TIMEOUT, else EXPORT_TIMEOUT_S."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return EXPORT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1e9):  # also refuses nan and inf
        raise UsageError(None, f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds (e.g. 1800)")
    return value


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run nsys in its own process group, so that on a timeout it and every helper it started
    are stopped (and nothing holds the output pipes open)."""
    timeout = export_timeout()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # the timeout, or an interrupt: stop the whole group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _drop_stale(out: Path, prefix: str) -> None:
    """Remove the other files of the same report in the exports folder: exports of its earlier
    versions, and temporary files an export that was killed left (the caller holds the lock)."""
    for f in out.parent.iterdir():
        if f != out and (f.name.startswith(prefix) or f.name.startswith("." + prefix)):
            try:
                f.unlink()
            except OSError:
                pass


_PROGRESS = re.compile(r"^(Exporting|Processing|Generating|\s*\[|\s*$)")


def _failure(report: Path, nsys: str, res: subprocess.CompletedProcess) -> str:
    """One line saying why `nsys export` failed, naming both versions when nsys is too old."""
    text = (res.stderr or "") + "\n" + (res.stdout or "")
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", text) if not _PROGRESS.match(ln)]
    detail = next((ln for ln in lines if re.search(r"error|invalid|fail|cannot|unable|not supported", ln, re.I)),
                  lines[-1] if lines else f"exit status {res.returncode}, no message")
    detail = detail[:300]
    m = re.search(r"(\d{4})@(\d+)@(\d+)@(\d+)", text)
    newer = m or re.search(r"newer|version number is invalid|unsupported (report )?version|incompatible", text, re.I)
    if newer:
        written = ".".join(m.groups()) if m else None
        have = nsys_version(nsys) or "unknown version"
        by = f"by Nsight Systems {written}, " if written else ""
        need = f"Nsight Systems {written} or newer" if written else "a newer Nsight Systems"
        return (f"this report was written {by}newer than the installed nsys {have} ({nsys}), which cannot "
                f"export it: install {need} (or pass --nsys PATH), or run `nsys export --type sqlite "
                f"{report.name}` where it was recorded and pass the .sqlite [nsys: {detail}]")
    return f"`nsys export` failed (exit status {res.returncode}): {detail}"


class Export:
    """An SQLite export opened read-only; queries come back as Arrow tables (through ADBC).

    A file with a write-ahead log (`-wal`) or a rollback journal (`-journal`) beside it is not
    complete on its own: it and its log are copied to a temporary folder and opened there, so
    that SQLite applies the log (the original files stay untouched)."""

    def __init__(self, path: Path, shown: Path | None = None):
        self.shown = shown or path
        self._tmp = None
        self._behind: list[Later] = []     # reads on threads (table_behind)
        logs = [Path(f"{path}{s}") for s in ("-wal", "-journal")]
        logs = [p for p in logs if p.is_file() and p.stat().st_size > 0]
        if logs:
            self._tmp = tempfile.TemporaryDirectory(prefix="traceview-sqlite-")
            copy = Path(self._tmp.name) / "export.sqlite"
            shutil.copyfile(path, copy)
            for log in logs:
                shutil.copyfile(log, f"{copy}{str(log)[len(str(path)):]}")
            uri = "file:" + urllib.parse.quote(str(copy))
        else:
            uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"
        self._db = self.con = None
        try:
            self._db = adbc_driver_sqlite.connect(uri)
            self.con = adbc_driver_manager.AdbcConnection(self._db)
        except BaseException:
            self.close()
            raise
        self._cols: dict[str, set[str]] = {}
        names = self.fetch("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        self.tables = set(names.column(0).to_pylist())

    def _cleanup(self):
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def close(self):
        for later in self._behind:        # (a read on a thread still uses the database)
            later.wait()
        self._behind = []
        try:
            for h in (self.con, self._db):
                if h is not None:
                    h.close()
        finally:
            self.con = self._db = None
            self._cleanup()

    def fetch(self, sql: str, params: tuple = (), con=None) -> pa.Table:
        """The rows of `sql` (parameters bound as one row) as one Arrow table, read on `con` (this
        export's connection when None). ADBC's low-level statement, not its DB-API layer, whose
        import also imports polars where it is installed (about 0.2 s of a small trace's whole run)."""
        stmt = adbc_driver_manager.AdbcStatement(self.con if con is None else con)
        try:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": "65536"})
            stmt.set_sql_query(sql)
            if params:
                stmt.bind(pa.record_batch([[v] for v in params], names=[str(i) for i in range(len(params))]))
            stream, _ = stmt.execute_query()
            return _valid_utf8(pa.RecordBatchReader._import_from_c(stream.address).read_all())
        finally:
            stmt.close()

    def cols(self, table: str) -> set[str]:
        if table not in self._cols:
            t = self.fetch("SELECT name FROM pragma_table_info(?)", (table,)) if table in self.tables else None
            self._cols[table] = set(t.column(0).to_pylist()) if t is not None else set()
        return self._cols[table]

    def rows(self, table: str) -> bool:
        return table in self.tables and self.fetch(f'SELECT 1 FROM "{table}" LIMIT 1').num_rows > 0

    def table(self, table: str, spec: dict[str, str], where: str = "", params: tuple = (),
              need: tuple[str, ...] = ()) -> pa.Table:
        """Rows of `table` as spec says (output name -> 'column [TYPE]' or '=SQL-expression TYPE'),
        each cast to its type; a column the export lacks reads as NULL, except the columns in
        `need` (refused, naming table and column); a missing table reads as no rows. TYPE TIME is
        a timestamp in ns: NULL unless the value is an integer in [MIN_TIME_NS, MAX_TIME_NS]
        (SQLite would read 'abc' as 0 and 1e300 as 2^63-1). Column names come from this module,
        never from the trace."""
        sql, schema_ = self._table_query(table, spec, where, need)
        return _typed(self.fetch(sql, params) if sql is not None else None, schema_)

    def table_behind(self, table: str, spec: dict[str, str], where: str = "", params: tuple = (),
                     need: tuple[str, ...] = (), parts: int = 0) -> Callable[[], pa.Table]:
        """`table(...)` read on a connection of its own, on a thread, while this one reads on
        (SQLite and Arrow let go of the GIL while they read): returns a function that waits for
        the rows (or raises the read's error). A refused column is said now, as table() says it;
        close() waits for a read still going on before it closes the export.

        `parts` >= 1: the rows in rowid order, `where` a WHERE clause without ORDER BY. With `parts`
        > 1, a table of at least 2 x PART_MIN_ROWS rowids is read as up to `parts` ranges of
        consecutive rowids, each on a connection and thread of its own, and the ranges joined in
        rowid order (one SQLite read decodes its rows on one core)."""
        sql, schema_ = self._table_query(table, spec, where, need)
        if sql is None:
            return lambda: schema_.empty_table()
        if self._db is None:
            raise ValueError("the export is closed")
        if parts < 1:     # (as `where` says)
            reads = [(sql, params)]
        elif parts == 1:  # (in rowid order, one read)
            reads = [(f"{sql} ORDER BY rowid", params)]
        else:
            reads = [(f"{sql} {rng} ORDER BY rowid", params + bounds)
                     for rng, bounds in self._rowid_ranges(table, where, parts)]
        behind = []
        for i, (part_sql, part_params) in enumerate(reads):
            con = adbc_driver_manager.AdbcConnection(self._db)

            def read(q=part_sql, p=part_params, c=con) -> pa.Table:
                try:
                    return self.fetch(q, p, c)
                finally:
                    c.close()
            behind.append(Later(read, name=f"traceview-nsys-{table}" + (f"-{i}" if len(reads) > 1 else "")))
            self._behind.append(behind[-1])   # (each as it starts: close() waits for it)
        if len(behind) == 1:
            return lambda: _typed(behind[0].result(), schema_)

        def joined() -> pa.Table:
            for later in behind:   # (all ended before an error of one is raised)
                later.wait()
            # (each range typed first: one without rows reads with the types SQLite gave it, none)
            return pa.concat_tables([_typed(later.result(), schema_) for later in behind])
        return joined

    def _rowid_ranges(self, table: str, where: str, parts: int) -> list[tuple[str, tuple]]:
        """The clauses and bounds that cut the rows of `where` (a WHERE clause) into up to `parts`
        ranges of consecutive rowids, of at least PART_MIN_ROWS rowids each (one range, the whole
        table, where it is smaller), in rowid order."""
        if not re.search(r"\bWHERE\b", where, re.IGNORECASE) or re.search(r"\bORDER\s+BY\b", where, re.IGNORECASE):
            raise ValueError("a read in parts takes a WHERE clause without ORDER BY")
        got = self.fetch(f'SELECT (SELECT min(rowid) FROM "{table}") AS lo, (SELECT max(rowid) FROM "{table}") AS hi')
        lo, hi = got.column("lo")[0].as_py(), got.column("hi")[0].as_py()
        n = 0 if lo is None else hi - lo + 1
        k = max(1, min(parts, n // PART_MIN_ROWS))
        if k == 1:
            return [("", ())]
        step = -(-n // k)
        return [("AND rowid BETWEEN ? AND ?", (lo + i * step, min(hi, lo + (i + 1) * step - 1))) for i in range(k)]

    def _table_query(self, table: str, spec: dict[str, str], where: str,
                     need: tuple[str, ...]) -> tuple[str | None, pa.Schema]:
        """table()'s query (None for a missing table) and the schema of its rows."""
        have, parts, fields = self.cols(table), [], []
        if table in self.tables:
            for col in need:
                if col not in have:
                    raise TraceError(self.shown, f"table {table} has no column {col!r} (renamed or missing): "
                                                 "not an Nsight Systems export traceview can read")
        for out, colspec in spec.items():
            expr, _, typ = colspec.partition(" ") if not colspec.startswith("=") else colspec[1:].rpartition(" ")
            typ = typ or "INTEGER"
            if not colspec.startswith("="):
                expr = f'"{expr}"' if expr in have else "NULL"
            if typ == "TIME":
                parts.append(f"CASE WHEN typeof({expr}) = 'integer' AND {expr} BETWEEN {MIN_TIME_NS} AND "
                             f'{MAX_TIME_NS} THEN {expr} END AS "{out}"')
            else:
                parts.append(f'CAST({expr} AS {typ}) AS "{out}"')
            fields.append(pa.field(out, pa.string() if typ == "TEXT" else pa.int64()))
        schema_ = pa.schema(fields)
        if table not in self.tables:
            return None, schema_
        return f'SELECT {", ".join(parts)} FROM "{table}" {where}', schema_

    def enum(self, table: str) -> list[tuple[int, str, str]]:
        if not self.rows(table) or not {"id", "name"} <= self.cols(table):
            return []
        lab = "label" if "label" in self.cols(table) else "name"
        t = self.fetch(f'SELECT CAST(id AS INTEGER), IFNULL(name, \'\'), IFNULL({lab}, \'\') FROM "{table}"')
        return list(zip(*(c.to_pylist() for c in t.columns), strict=True))

    def kv(self, table: str, name: str | None = None) -> list[tuple[str, str]]:
        """(name, value) rows of a metadata table (only those called `name` if given)."""
        if not {"name", "value"} <= self.cols(table):
            return []
        t = self.fetch(f'SELECT IFNULL(CAST(name AS TEXT), \'\'), IFNULL(CAST(value AS TEXT), \'\') FROM "{table}"'
                       + (" WHERE name = ?" if name else ""), (name,) if name else ())
        return list(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))


def _typed(t: pa.Table | None, schema_: pa.Schema) -> pa.Table:
    return t.cast(schema_) if t is not None and t.num_rows else schema_.empty_table()


def _valid_utf8(t: pa.Table) -> pa.Table:
    """SQLite does not enforce UTF-8 and ADBC passes bytes through: repair invalid text
    (replacement characters), so names from a damaged export cannot break later steps."""
    for i, f in enumerate(t.schema):
        if pa.types.is_string(f.type):
            try:
                t.column(i).validate(full=True)
            except pa.ArrowInvalid:
                raw = t.column(i).cast(pa.binary()).to_pylist()  # rare: only for damaged text
                fixed = pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw], pa.string())
                t = t.set_column(i, f, fixed)
    return t
