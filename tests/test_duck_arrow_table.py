"""duck.arrow_table: a query's rows as Arrow, submitted once through DuckDB's own submit function
where it has one (DuckDB 2), else through the relational API; both give the same table, a query's
error is raised as DuckDB's, and a submit function of another shape is not used."""
from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from traceview import duck

QUERIES = [
    ("SELECT range AS i, CASE WHEN range % 3 = 0 THEN NULL ELSE 'n' || range END AS s FROM range(10) ORDER BY i", None),
    ("SELECT i, s FROM t WHERE i >= $lo AND s <> $skip ORDER BY i", {"lo": 2, "skip": "b"}),
    ("SELECT i FROM t WHERE i > $lo", {"lo": 100}),                    # no rows
]


@pytest.fixture()
def con():
    c = duckdb.connect()
    c.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, NULL)) v(i, s)")
    yield c
    c.close()


def _expected(con, sql, params):
    # the relational API, by hand: what the function must equal
    return con.sql(sql, params=params).to_arrow_table()


@pytest.mark.parametrize("sql,params", QUERIES)
def test_the_same_table_as_the_relational_api(con, sql, params):
    got = duck.arrow_table(con, sql, params)
    assert isinstance(got, pa.Table)
    assert got.equals(_expected(con, sql, params))


def test_the_rows_by_hand(con):
    got = duck.arrow_table(con, "SELECT i, s FROM t WHERE i >= $lo ORDER BY i", {"lo": 2})
    assert got.to_pydict() == {"i": [2, 3, 4], "s": ["b", "c", None]}


@pytest.mark.parametrize("sql,params", QUERIES)
def test_without_a_submit_function_the_api(con, sql, params, monkeypatch):
    monkeypatch.setattr(duck, "_SUBMIT", None)
    assert duck.arrow_table(con, sql, params).equals(_expected(con, sql, params))


def test_a_submit_function_that_refuses_its_arguments_leaves_it_to_the_api(con, monkeypatch):
    calls = []

    def refuses(*a):
        calls.append(a)
        raise TypeError("takes 4 positional arguments")
    monkeypatch.setattr(duck, "_SUBMIT", refuses)
    monkeypatch.setattr(duck, "_PROBED", True)
    assert duck.arrow_table(con, "SELECT i FROM t ORDER BY i").to_pydict() == {"i": [1, 2, 3, 4]}
    assert len(calls) == 1


@pytest.mark.parametrize("wrong", ["raises", "other rows", "not a table"])
def test_a_submit_function_that_answers_the_probe_wrong_is_not_used_again(con, monkeypatch, wrong):
    # a DuckDB whose function takes the same arguments but does something else with them: the
    # first query's probe finds it out, and every query goes through the API from then on
    calls = []

    def other(con, sql, params):
        calls.append(sql)
        if wrong == "raises":
            raise duckdb.InvalidInputException("unknown format 'arrow'")
        if wrong == "other rows":
            return pa.table({"x": [0]})
        return [(42, "a")]
    monkeypatch.setattr(duck, "_SUBMIT", other)
    monkeypatch.setattr(duck, "_PROBED", False)
    for _ in range(2):
        assert duck.arrow_table(con, "SELECT i FROM t ORDER BY i").to_pydict() == {"i": [1, 2, 3, 4]}
    assert calls == [duck._PROBE]          # the probe only
    assert duck._SUBMIT is None


def test_the_probe_runs_once_and_keeps_a_right_function(con, monkeypatch):
    calls = []
    real = duck._seam_submit()
    if real is None:
        pytest.skip("no submit function in this DuckDB")

    def counted(con, sql, params):
        calls.append(sql)
        return real(con, sql, params)
    monkeypatch.setattr(duck, "_SUBMIT", counted)
    monkeypatch.setattr(duck, "_PROBED", False)
    for _ in range(3):
        assert duck.arrow_table(con, "SELECT i FROM t WHERE i > $lo ORDER BY i", {"lo": 3}).to_pydict() == {"i": [4]}
    assert calls[0] == duck._PROBE and len(calls) == 4 and duck._SUBMIT is counted


def test_a_query_error_is_duckdbs(con):
    with pytest.raises(duckdb.Error, match="no_such_table"):
        duck.arrow_table(con, "SELECT * FROM no_such_table")
    with pytest.raises(duckdb.Error):
        duck.arrow_table(con, "SELECT i FROM t WHERE i > $lo", {})   # a parameter not given


def test_a_submit_function_of_another_shape_is_not_used(monkeypatch):
    seam = pytest.importorskip("duckdb._seam")

    def other(con, sql, values, batch_size=1):    # (no format argument)
        raise AssertionError("not to be called")
    monkeypatch.setattr(seam, "submit", other)
    assert duck._seam_submit() is None
    monkeypatch.delattr(seam, "submit")
    assert duck._seam_submit() is None


def test_duckdb_2_has_the_submit_function():
    # the DuckDB this project installs (2.x) has it: the function is in use, not only the fallback
    if int(duckdb.__version__.split(".")[0]) < 2:
        pytest.skip(f"DuckDB {duckdb.__version__}: the relational API only")
    assert duck._SUBMIT is not None


def _batches(reader):
    return [(b.num_rows, b.to_pydict()) for b in reader]


@pytest.mark.parametrize("rows", [1, 3, 1000])
def test_query_reader_gives_the_relational_apis_batches(con, rows):
    sql = "SELECT range AS i, 'n' || range AS s FROM range(10) ORDER BY i"
    got = _batches(duck.query_reader(con, sql, rows))
    assert got == _batches(duck.arrow_reader(con.sql(sql), rows))
    assert [n for n, _ in got] == ([1] * 10 if rows == 1 else [3, 3, 3, 1] if rows == 3 else [10])
    assert sum((b["i"] for _, b in got), []) == list(range(10))


def test_query_reader_without_a_trusted_submit_function_the_api(con, monkeypatch):
    called = []
    monkeypatch.setattr(duck, "_SUBMIT", None)          # none, or the probe found it wrong
    monkeypatch.setattr(duck, "_STREAM", lambda *a: called.append(a))
    got = _batches(duck.query_reader(con, "SELECT i FROM t ORDER BY i", 2))
    assert got == [(2, {"i": [1, 2]}), (2, {"i": [3, 4]})] and called == []


def test_a_stream_function_that_refuses_its_arguments_leaves_it_to_the_api(con, monkeypatch):
    def refuses(*a):
        raise TypeError("takes 4 positional arguments")
    monkeypatch.setattr(duck, "_STREAM", refuses)
    monkeypatch.setattr(duck, "_PROBED", True)
    assert _batches(duck.query_reader(con, "SELECT i FROM t ORDER BY i", 10)) == [(4, {"i": [1, 2, 3, 4]})]
