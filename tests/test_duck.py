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
