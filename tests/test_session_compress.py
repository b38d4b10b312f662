"""The steps' tables in the database's compressed catalog (traceview/duck.py `STORE`,
engine/session.py `compress`): every database has it attached and a session's schema lives there;
only tables of at least COMPRESS_MIN_ROWS rows count towards a checkpoint, made once COMPRESS_ROWS
rows are counted and no large table dropped soon after is there (then at its drop); a checkpoint is
not made while another thread holds the settings lock or another connection writes (it is left for
the next large table); after one, DuckDB stores the tables compressed; and a report computed with
checkpoints after every table is byte for byte the one computed with none."""
from __future__ import annotations

import threading
from pathlib import Path

from helpers import analyze_paths, make_profile

from traceview import duck
from traceview.engine import session as session_mod
from traceview.engine.session import Session
from traceview.reports import json_report

BUNDLED = Path(__file__).resolve().parent.parent / "fixtures" / "h200_moe_overlap.json.gz"


def _session() -> Session:
    return Session(make_profile(gpu=[dict(id=1, rank=0, start_ns=0, end_ns=10)]))


def _compressions(s: Session, table: str) -> set[str]:
    rows = s.con.execute(f"SELECT DISTINCT compression FROM pragma_storage_info('{s.schema}.{table}')").fetchall()
    return {r[0] for r in rows}


def test_the_sessions_schema_is_in_the_compressed_catalog():
    s = _session()
    catalogs = {r[0] for r in s.con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    assert duck.STORE in catalogs
    assert s.schema.startswith(f"{duck.STORE}.")
    s.materialize_sql("made", "SELECT range AS i FROM range(5)", {})
    assert s.sql("SELECT count(*) AS n FROM made").column("n").to_pylist() == [5]   # found by name
    n = s.con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = $db AND table_name = 'made'",
                      {"db": duck.STORE}).fetchone()[0]
    assert n == 1
    s.close()


def test_large_tables_count_towards_a_checkpoint(monkeypatch):
    monkeypatch.setattr(session_mod, "COMPRESS_MIN_ROWS", 3)
    monkeypatch.setattr(session_mod, "COMPRESS_ROWS", 5)
    s = _session()
    s.materialize_sql("small", "SELECT range AS i FROM range(2)", {})   # under 3 rows: not counted
    assert (s.uncompressed, s.checkpoints) == (0, 0)
    s.materialize_sql("first", "SELECT range AS i FROM range(3)", {})   # 3 < 5: counted, no checkpoint
    assert (s.uncompressed, s.checkpoints) == (3, 0)
    s.materialize_sql("second", "SELECT range AS i FROM range(4)", {})  # 3 + 4 >= 5: a checkpoint
    assert (s.uncompressed, s.checkpoints) == (0, 1)
    s.adopt_made("second", 6)             # a table a reader made counts as well (6 >= 5)
    assert (s.uncompressed, s.checkpoints) == (0, 2)
    s.close()


def test_a_checkpoint_compresses_the_tables():
    s = _session()
    # 300,000 rows of a slowly rising integer: stored plainly until a checkpoint compresses it
    s.materialize_sql("steps", "SELECT range // 1000 AS step FROM range(300000)", {})
    assert s.checkpoints == 0 and _compressions(s, "steps") == {"Uncompressed"}
    assert s.compress() and s.checkpoints == 1
    assert "Uncompressed" not in _compressions(s, "steps")
    got = s.sql("SELECT count(*) AS n, sum(step) AS total, max(step) AS top FROM steps")
    # 300 steps of 1,000 rows each: sum of 0..299 times 1,000
    assert got.to_pylist() == [{"n": 300_000, "total": 1000 * 299 * 300 // 2, "top": 299}]
    s.close()


def test_a_checkpoint_waits_for_a_large_short_lived_table_to_go(monkeypatch):
    monkeypatch.setattr(session_mod, "COMPRESS_MIN_ROWS", 3)
    monkeypatch.setattr(session_mod, "COMPRESS_ROWS", 3)
    s = _session()
    s.short_lived = frozenset({"scratch", "tiny"})
    s.materialize_sql("tiny", "SELECT range AS i FROM range(2)", {})      # short-lived and small
    s.materialize_sql("scratch", "SELECT range AS i FROM range(5)", {})   # short-lived: not counted
    assert (s.uncompressed, s.checkpoints) == (0, 0)
    s.materialize_sql("kept", "SELECT range AS i FROM range(4)", {})      # due, but scratch is there
    assert (s.uncompressed, s.checkpoints) == (4, 0)
    s.drop("tiny")                                                         # scratch still there
    assert (s.uncompressed, s.checkpoints) == (4, 0)
    s.drop("scratch")                                                      # gone: the checkpoint is made
    assert (s.uncompressed, s.checkpoints) == (0, 1)
    s.close()


def test_no_checkpoint_while_the_lock_is_held_or_another_connection_writes(monkeypatch):
    monkeypatch.setattr(session_mod, "COMPRESS_MIN_ROWS", 1)
    monkeypatch.setattr(session_mod, "COMPRESS_ROWS", 10)
    s = _session()
    s.materialize_sql("a", "SELECT range AS i FROM range(6)", {})
    held, release = threading.Event(), threading.Event()

    def holder():
        with s.settings_lock:             # as a reader's query holds it
            held.set()
            release.wait(10)
    t = threading.Thread(target=holder)
    t.start()
    held.wait(10)
    s.materialize_sql("b", "SELECT range AS i FROM range(6)", {})   # 12 >= 10, but the lock is held
    assert (s.uncompressed, s.checkpoints) == (12, 0)
    release.set()
    t.join()
    other = s.con.cursor()
    other.execute("BEGIN")
    other.execute(f"CREATE TABLE {s.schema}.writing AS SELECT 1 AS x")   # a write not yet committed
    assert not s.compress() and s.checkpoints == 0                       # refused by DuckDB: left
    other.execute("COMMIT")
    other.close()
    s.materialize_sql("c", "SELECT range AS i FROM range(1)", {})      # the next table: made now
    assert (s.uncompressed, s.checkpoints) == (0, 1)
    s.close()


def _report(monkeypatch, every: bool) -> tuple[bytes, int]:
    counts: list[int] = []
    real = Session.compress

    def spy(self):
        made = real(self)
        counts.append(made)
        return made
    monkeypatch.setattr(Session, "compress", spy)
    monkeypatch.setattr(session_mod, "COMPRESS_MIN_ROWS", 1 if every else 10**15)
    monkeypatch.setattr(session_mod, "COMPRESS_ROWS", 1 if every else 10**15)
    doc = analyze_paths([BUNDLED])
    return json_report.render_bytes(doc), sum(counts)


def test_a_report_is_the_same_with_its_tables_compressed(monkeypatch):
    plain, none_made = _report(monkeypatch, every=False)
    compressed, made = _report(monkeypatch, every=True)
    assert none_made == 0 and made > 0
    assert compressed == plain
