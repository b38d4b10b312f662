"""engine/pipeline.build: dependency order, each step once per session, declared columns checked,
scope rules enforced; steps/parse_header reads the .sql headers."""
import pyarrow as pa
import pytest
from helpers import make_profile

import traceview.flops.steps  # noqa: F401  (declares the FLOPs' Python steps)
from traceview.engine import steps
from traceview.engine.pipeline import build, plan
from traceview.engine.session import Session
from traceview.engine.steps import StepError, parse_header, python_step


def _session():
    return Session(make_profile(gpu=[dict(id=1, rank=0, start_ns=0, end_ns=10)]))


@python_step("t_base", scope="rank", requires=("gpu_activities",), produces=("rank", "n"))
def _t_base(session, params):
    return session.sql("SELECT rank, count(*)::BIGINT AS n FROM gpu_activities GROUP BY rank")


@python_step("t_twice", scope="rank", requires=("t_base",), params=("k",), produces=("rank", "m"))
def _t_twice(session, params):
    return session.sql("SELECT rank, n * $k AS m FROM t_base", k=params["k"])


@python_step("t_job", scope="job", requires=("t_twice",), produces=("total",))
def _t_job(session, params):
    return session.sql("SELECT sum(m)::BIGINT AS total FROM t_twice")


@python_step("t_bad_rank", scope="rank", requires=("t_job",), produces=("rank",))
def _t_bad_rank(session, params):
    return session.sql("SELECT 0 AS rank")


@python_step("t_wrong_cols", scope="job", requires=(), produces=("a", "b"))
def _t_wrong(session, params):
    return pa.table({"a": [1]})


def test_dependencies_first_each_once():
    s = _session()
    assert [st.name for st in plan(["t_job"])] == ["t_base", "t_twice", "t_job"]
    assert build(s, ["t_job"], {"k": 3}) == ["t_base", "t_twice", "t_job"]
    assert s.rows("SELECT total FROM t_job") == [{"total": 3}]       # 1 activity x 3
    assert build(s, ["t_job", "t_twice"], {"k": 3}) == []              # already built: nothing again
    assert s.build_counts == {"t_base": 1, "t_twice": 1, "t_job": 1}


def test_other_parameters_in_one_session_are_an_error():
    s = _session()
    build(s, ["t_twice"], {"k": 2})
    with pytest.raises(StepError, match="t_twice was built in this session"):
        build(s, ["t_twice"], {"k": 5})
    with pytest.raises(StepError, match="needs parameter 'k'"):
        build(_session(), ["t_twice"], {})


def test_scope_and_columns_are_enforced():
    with pytest.raises(StepError, match="per-rank step t_bad_rank requires per-job step t_job"):
        plan(["t_bad_rank"])
    with pytest.raises(StepError, match=r"produced columns \['a'\], declares \['a', 'b'\]"):
        build(_session(), ["t_wrong_cols"])
    with pytest.raises(StepError, match="unknown step or table 'nope'"):
        plan(["nope"])


def test_sql_step_columns_checked_where_asked(monkeypatch):
    """An SQL step's columns are checked where TRACEVIEW_CHECK_STEPS is set (the test suite sets it,
    so every golden test checks every step); a run outside the tests does not bind each new table."""
    wrong = steps.Step(name="t_sql_wrong", scope="job", requires=("gpu_activities",), params=(),
                       produces=("a", "b"), sql="SELECT count(*) AS a FROM gpu_activities")
    monkeypatch.setitem(steps._PYTHON, "t_sql_wrong", wrong)
    with pytest.raises(StepError, match=r"produced columns \['a'\], declares \['a', 'b'\]"):
        build(_session(), ["t_sql_wrong"])
    monkeypatch.delenv("TRACEVIEW_CHECK_STEPS")
    s = _session()
    asked: list = []
    monkeypatch.setattr(s, "columns", lambda name: asked.append(name) or [])
    assert build(s, ["t_sql_wrong"]) == ["t_sql_wrong"]
    assert asked == []
    assert s.rows("SELECT a FROM t_sql_wrong") == [{"a": 1}]


def test_header_parsing():
    st = parse_header("x", "-- step: x\n-- scope: job\n-- requires: a, b\n-- params: rx\n"
                           "-- produces: c1,\n-- produces: c2\nSELECT 1 WHERE $rx")
    assert (st.scope, st.requires, st.params, st.produces) == ("job", ("a", "b"), ("rx",), ("c1", "c2"))
    with pytest.raises(StepError, match="never uses"):
        parse_header("x", "-- step: x\n-- scope: job\n-- requires: a\n-- params: rx\n-- produces: c\nSELECT 1")
    with pytest.raises(StepError, match="names step"):
        parse_header("x", "-- step: y\n-- scope: job\n-- requires: a\n-- produces: c\nSELECT 1")
    with pytest.raises(StepError, match="scope 'node'"):
        parse_header("x", "-- step: x\n-- scope: node\n-- requires: a\n-- produces: c\nSELECT 1")


def test_disabled_optimizers_header(monkeypatch):
    """A step's `-- disabled_optimizers:` are off while its SQL runs where a table it reads is
    large (DuckDB reports the setting inside the query) and back on after it, and left on where
    every table it reads is small (Session.optimizers_off); a name that is not an optimizer's is
    refused."""
    text = ("-- step: t_sql_opt\n-- scope: rank\n-- requires: gpu_activities\n-- produces: rank, v\n"
            "-- disabled_optimizers: build_side_probe_side, join_order\n"
            "SELECT rank, current_setting('disabled_optimizers') AS v FROM gpu_activities")
    st = parse_header("t_sql_opt", text)
    assert st.disabled_optimizers == ("build_side_probe_side", "join_order")
    assert parse_header("x", "-- step: x\n-- scope: job\n-- requires: a\n-- produces: c\nSELECT 1"
                        ).disabled_optimizers == ()
    with pytest.raises(StepError, match="not an optimizer name"):
        parse_header("x", "-- step: x\n-- scope: job\n-- requires: a\n-- produces: c\n"
                          "-- disabled_optimizers: join_order'; SELECT 1; --\nSELECT 1")
    real = steps.sql_steps()
    monkeypatch.setattr(steps, "sql_steps", lambda: {**real, "t_sql_opt": st})
    s = _session()
    s.parallel_min_rows = 1          # its one GPU activity a large table
    before = s.rows("SELECT current_setting('disabled_optimizers') AS v")[0]["v"]
    build(s, ["t_sql_opt"])
    inside = s.rows("SELECT v FROM t_sql_opt")[0]["v"]
    assert set(inside.replace(" ", "").split(",")) == {"build_side_probe_side", "join_order"}
    assert s.rows("SELECT current_setting('disabled_optimizers') AS v")[0]["v"] == before == ""
    small = _session()               # (parallel_min_rows as it is: 245,760 rows)
    build(small, ["t_sql_opt"])
    assert small.rows("SELECT v FROM t_sql_opt")[0]["v"] == ""


def test_every_declared_step_is_well_formed():
    import traceview.analysis.breakdown
    import traceview.analysis.layers  # noqa: F401  (they declare Python steps)
    assert {"windows", "layer_blocks"} <= set(steps.all_steps())
    for name, st in steps.all_steps().items():
        if name.startswith("t_"):
            continue                            # this file's own test steps
        assert st.name == name and st.produces
        plan([name])                            # requirements resolve, no circle, scope rules hold
        if st.scope == "rank":
            assert "rank" in st.produces, name
