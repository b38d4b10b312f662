"""duck.connect: the connections a thread opens share one in-memory database (a table made on one is
seen by the others), another thread's are onto a database of their own (so that a setting such as
`threads`, which belongs to the database, never changes under another thread's queries), and a
process forked from one that made a database makes its own."""
from __future__ import annotations

import threading

from traceview import duck


def _tables(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()}


def test_one_database_per_thread(monkeypatch):
    monkeypatch.setattr(duck, "_local", threading.local())
    a, b = duck.connect(), duck.connect()
    a.execute("CREATE TABLE made_on_a AS SELECT 1 AS x")
    assert "made_on_a" in _tables(b)                  # the same database
    a.execute("SET threads = 1")
    seen = {}

    def other():
        c = duck.connect()
        seen["tables"] = _tables(c)
        c.execute("SET threads = 2")
        c.close()
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert "made_on_a" not in seen["tables"]          # another thread: a database of its own
    assert b.execute("SELECT current_setting('threads')").fetchone()[0] == 1   # its setting left alone
    a.close()
    b.close()


def test_a_forked_process_makes_its_own(monkeypatch):
    monkeypatch.setattr(duck, "_local", threading.local())
    a = duck.connect()
    a.execute("CREATE TABLE made_before AS SELECT 1 AS x")
    monkeypatch.setattr(duck._local, "pid", -1)       # as in a child forked after the database was made
    b = duck.connect()
    assert "made_before" not in _tables(b)
    a.close()
    b.close()


def test_a_database_begun_on_a_thread_is_the_one_connect_takes(monkeypatch):
    monkeypatch.setattr(duck, "_local", threading.local())
    made: list = []
    real = duck.duckdb.connect
    monkeypatch.setattr(duck.duckdb, "connect", lambda *a, **k: made.append(threading.current_thread().name)
                        or real(*a, **k))
    duck.begin()
    duck.begin()                                      # begun already: not again
    a, b = duck.connect(), duck.connect()
    a.execute("CREATE TABLE made_on_a AS SELECT 1 AS x")
    assert "made_on_a" in _tables(b)                  # one database, this thread's
    assert made == ["traceview-database"]             # made once, on its own thread
    duck.begin()                                      # made: nothing begun
    assert made == ["traceview-database"] and duck._local.making is None
    a.close()
    b.close()


def test_a_database_begun_before_a_fork_is_not_the_childs(monkeypatch):
    monkeypatch.setattr(duck, "_local", threading.local())
    duck.begin()
    pid, making = duck._local.making
    monkeypatch.setattr(duck._local, "making", (-1, making))   # as in a child forked after begin
    a = duck.connect()
    a.execute("CREATE TABLE made_here AS SELECT 1 AS x")
    theirs = making.result().cursor()
    assert "made_here" not in _tables(theirs)          # the child made its own
    a.close()
    theirs.close()


def test_a_duckdb_without_compressed_in_memory_catalogs_gets_a_plain_one(monkeypatch):
    """DuckDB before 1.4 refuses `ATTACH ':memory:' ... (COMPRESS)` (a binder error, checked with
    1.1.3): the catalog is then attached plain, under the same name, and sessions work as before."""
    real = duck.duckdb.connect

    class Old:       # a database of a DuckDB that knows no COMPRESS option
        def __init__(self, db):
            self.db = db

        def execute(self, sql, *a):
            if "(COMPRESS)" in sql:
                raise duck.duckdb.BinderException('Binder Error: Unrecognized option for attach "compress"')
            return self.db.execute(sql, *a)

        def __getattr__(self, name):
            return getattr(self.db, name)
    monkeypatch.setattr(duck, "_local", threading.local())
    monkeypatch.setattr(duck.duckdb, "connect", lambda *a, **k: Old(real(*a, **k)))
    con = duck.connect()
    catalogs = {r[0] for r in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    assert duck.STORE in catalogs
    con.execute(f"CREATE SCHEMA {duck.STORE}.tv_old")
    con.execute(f"CREATE TABLE {duck.STORE}.tv_old.t AS SELECT 41 + 1 AS x")
    con.execute(f"CHECKPOINT {duck.STORE}")
    assert con.execute(f"SELECT x FROM {duck.STORE}.tv_old.t").fetchall() == [(42,)]
    con.close()
