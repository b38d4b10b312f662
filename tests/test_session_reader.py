"""The session's tables seen from another thread (engine/session.py `reader`, engine/pipeline.py
`start`): each session's step tables live in a schema of its own (two sessions on one thread never
see each other's; a session gone takes its tables with it); a reader sees the steps' tables and the
Arrow tables registered so far; a reader's query never runs while a step of the session runs with
database-wide settings of its own; a Python step begun on a thread is taken by `build`, once, with
the same table and error it would have given in line; a session shared with another's database
changes none of its settings and waits for its steps that do."""
import gc
import threading
import time

import pyarrow as pa
import pytest
from helpers import make_profile

from traceview.engine import pipeline, steps
from traceview.engine.pipeline import build
from traceview.engine.session import PARALLEL_MIN_ROWS, Session
from traceview.engine.steps import StepError, python_step

RUNS: list = []     # (step, thread name) of each run of the Python steps below


def _tr_counts(session, params):
    RUNS.append(("tr_counts", threading.current_thread().name))
    if params["bias"] < 0:
        raise ValueError("a negative bias")
    return session.sql("SELECT rank, (count(*) + $bias)::BIGINT AS n FROM gpu_activities GROUP BY rank",
                       bias=params["bias"])


def _tr_total(session, params):
    return session.sql("SELECT rank, n * 100 AS total FROM tr_counts")


@pytest.fixture(autouse=True)
def _steps(monkeypatch):
    """The two Python steps above, declared for each test only (another test module that builds every
    declared step would not know their parameter)."""
    monkeypatch.setattr(steps, "_PYTHON", dict(steps._PYTHON))
    python_step("tr_counts", scope="rank", requires=("gpu_activities",), produces=("rank", "n"),
                params=("bias",))(_tr_counts)
    python_step("tr_total", scope="rank", requires=("tr_counts",), produces=("rank", "total"))(_tr_total)


def _session() -> Session:
    return Session(make_profile(gpu=[dict(id=1, rank=0, start_ns=0, end_ns=10),
                                     dict(id=2, rank=0, start_ns=10, end_ns=30),
                                     dict(id=3, rank=1, start_ns=5, end_ns=9)]))


def _on_thread(fn):
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e
    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_two_sessions_on_one_thread_keep_their_own_tables_and_take_them_when_gone():
    a, b = _session(), _session()
    assert a.schema != b.schema
    a.materialize_sql("tr_x", "SELECT 1 AS v", {})
    b.materialize_sql("tr_x", "SELECT 2 AS v", {})
    assert a.rows("SELECT v FROM tr_x") == [{"v": 1}] and b.rows("SELECT v FROM tr_x") == [{"v": 2}]
    gone = a.schema
    del a
    gc.collect()
    schemas = {r["s"] for r in b.rows("SELECT database_name || '.' || schema_name AS s FROM duckdb_schemas()")}
    assert gone not in schemas and b.schema in schemas
    assert b.rows("SELECT v FROM tr_x") == [{"v": 2}]
    # closed (as a mapped job's batch sessions are, while still referenced): its tables go at once
    c = _session()
    c.materialize_sql("tr_x", "SELECT 3 AS v", {})
    c.close()
    c.close()                                    # (twice: nothing more)
    schemas = {r["s"] for r in b.rows("SELECT database_name || '.' || schema_name AS s FROM duckdb_schemas()")}
    assert c.schema not in schemas


def test_a_reader_on_another_thread_sees_the_steps_and_registered_tables():
    s = _session()
    s.materialize_sql("tr_sql", "SELECT rank, count(*)::BIGINT AS n FROM gpu_activities GROUP BY rank", {})
    s.materialize_arrow("tr_arrow", pa.table({"k": pa.array([7, 8], pa.int64())}))
    s.register("tr_given", pa.table({"g": pa.array(["x"])}))
    r = s.reader()
    assert r.con is not s.con
    t, out = _on_thread(lambda: (r.rows("SELECT rank, n FROM tr_sql ORDER BY rank"),
                                 r.rows("SELECT k FROM tr_arrow ORDER BY k"), r.rows("SELECT g FROM tr_given"),
                                 r.rows("SELECT count(*) AS n FROM gpu_activities"),
                                 r.rows(f"SELECT count(*) AS n FROM {s.qualified('tr_sql')}")))
    t.join()
    assert "error" not in out
    assert out["value"] == ([{"rank": 0, "n": 2}, {"rank": 1, "n": 1}], [{"k": 7}, {"k": 8}], [{"g": "x"}],
                            [{"n": 3}], [{"n": 2}])
    assert s.qualified("tr_sql") == f"{s.schema}.tr_sql" and s.qualified("tr_arrow") == "temp.main.tr_arrow"
    assert r.attached("gpu_activities") is s.profile.gpu_activities
    r.close()


def test_a_readers_query_waits_for_a_step_with_settings_of_its_own():
    s = _session()
    r = s.reader()
    s.settings_lock.acquire()       # as a step with optimizers of its own holds it while it runs
    t, out = _on_thread(lambda: r.rows("SELECT count(*) AS n FROM gpu_activities"))
    time.sleep(0.2)
    assert out == {} and t.is_alive()           # waiting
    s.settings_lock.release()
    t.join()
    assert out["value"] == [{"n": 3}]
    r.close()


def test_a_parallel_step_runs_on_the_sessions_threads_while_a_reader_queries():
    s = _session()
    s.step_threads, s.parallel_min_rows = 2, 0
    sql = "SELECT current_setting('threads')::BIGINT AS n"
    s.materialize_sql("tr_free", sql, {}, parallel=True)
    assert s.rows("SELECT n FROM tr_free") == [{"n": 2}]        # the lock free: on step_threads
    s.settings_lock.acquire()                                  # a reader's query going on
    try:
        s.materialize_sql("tr_held", sql, {}, parallel=True)
    finally:
        s.settings_lock.release()
    assert s.rows("SELECT n FROM tr_held") == [{"n": 1}]        # on the session's one thread
    assert s.rows(sql) == [{"n": 1}]                           # and the setting given back


def test_a_step_with_optimizers_of_its_own_waits_for_a_readers_query():
    s = _session()
    s.settings_lock.acquire()       # a reader's query going on
    t, out = _on_thread(lambda: s.materialize_sql("tr_opt", "SELECT 1 AS v", {}, ("build_side_probe_side",)))
    time.sleep(0.2)
    assert t.is_alive()
    s.settings_lock.release()
    t.join()
    assert "error" not in out and s.rows("SELECT v FROM tr_opt") == [{"v": 1}]
    assert s.rows("SELECT current_setting('disabled_optimizers') AS d") == [{"d": ""}]


def test_a_step_begun_on_a_thread_is_taken_by_build_once():
    RUNS.clear()
    s, ref = _session(), _session()
    assert pipeline.start(s, "tr_counts", {"bias": 5})
    assert not pipeline.start(s, "tr_counts", {"bias": 5})      # begun already: not again
    assert build(s, ["tr_total"], {"bias": 5}) == ["tr_counts", "tr_total"]
    build(ref, ["tr_total"], {"bias": 5})                       # the reference: in line
    assert s.rows("SELECT * FROM tr_total ORDER BY rank") == ref.rows("SELECT * FROM tr_total ORDER BY rank") \
        == [{"rank": 0, "total": 700}, {"rank": 1, "total": 600}]
    assert s.build_counts["tr_counts"] == 1 and not s.started
    assert RUNS[0] == ("tr_counts", "traceview-step-tr_counts") and RUNS[1] == ("tr_counts", "MainThread")
    assert len(RUNS) == 2
    assert not pipeline.start(s, "tr_counts", {"bias": 5})      # built: nothing begun


def test_a_step_begun_with_other_parameters_is_built_anew():
    RUNS.clear()
    s = _session()
    pipeline.start(s, "tr_counts", {"bias": 1})
    build(s, ["tr_counts"], {"bias": 2})
    assert s.rows("SELECT n FROM tr_counts ORDER BY rank") == [{"n": 4}, {"n": 3}]
    assert [r[1] for r in RUNS] == ["traceview-step-tr_counts", "MainThread"] and not s.started


def test_the_error_of_a_step_begun_on_a_thread_is_raised_by_build():
    s = _session()
    assert pipeline.start(s, "tr_counts", {"bias": -1})          # begun: its error not raised here
    with pytest.raises(ValueError, match="negative bias"):
        build(s, ["tr_counts"], {"bias": -1})
    assert "tr_counts" not in s.built


def test_only_a_python_step_is_begun():
    with pytest.raises(StepError, match="not a Python step"):
        pipeline.start(_session(), "activity_origin", {})


def test_a_shared_session_changes_no_setting_and_waits_for_the_lock():
    parent = _session()
    parent.materialize_sql("tr_parent", "SELECT 1 AS v", {})
    parent.con.execute("SET threads = 3")        # a step of the parent's with threads of its own
    s = Session(parent.profile, share=parent)
    assert s.con is not parent.con and s.schema != parent.schema
    assert parent.rows("SELECT current_setting('threads')::BIGINT AS n") == [{"n": 3}]   # left as it was
    parent.con.execute(f"SET threads = {parent.threads}")
    build(s, ["tr_total"], {"bias": 0})          # its own steps, in its own schema
    assert s.rows("SELECT total FROM tr_total ORDER BY rank") == [{"total": 200}, {"total": 100}]
    assert "tr_total" not in parent.tables()
    parent.settings_lock.acquire()
    t, out = _on_thread(lambda: s.materialize_sql("tr_later", "SELECT 2 AS v", {}))
    time.sleep(0.2)
    assert t.is_alive()                          # waits for the parent's step
    parent.settings_lock.release()
    t.join()
    assert "error" not in out and s.rows("SELECT v FROM tr_later") == [{"v": 2}]
    with pytest.raises(RuntimeError, match="optimizers"):
        s.materialize_sql("tr_opt", "SELECT 1 AS v", {}, ("build_side_probe_side",))


def _sql_step(name: str, sql: str, requires: tuple, produces: tuple, params: tuple = (),
              optimizers: tuple = ()) -> steps.Step:
    return steps.Step(name=name, scope="rank", requires=requires, params=params, produces=produces, sql=sql,
                      disabled_optimizers=optimizers)


@pytest.fixture
def sql_steps(monkeypatch):
    """SQL steps declared for one test (engine/pipeline.start_sql), and the thread each table of a
    reader was made on."""
    declared = {s.name: s for s in (
        _sql_step("tq_counts", "SELECT rank, (count(*) + $bias)::BIGINT AS n FROM gpu_activities GROUP BY rank",
                  ("gpu_activities",), ("rank", "n"), ("bias",)),
        _sql_step("tq_total", "SELECT rank, n * 100 AS total FROM tq_counts", ("tq_counts",), ("rank", "total")),
        _sql_step("tq_bad", "SELECT rank, error('a broken step')::BIGINT AS n FROM gpu_activities",
                  ("gpu_activities",), ("rank", "n")),
        _sql_step("tq_after_bad", "SELECT rank, n FROM tq_bad", ("tq_bad",), ("rank", "n")),
        _sql_step("tq_opt", "SELECT rank, 1 AS v FROM gpu_activities", ("gpu_activities",), ("rank", "v"),
                  optimizers=("build_side_probe_side",)),
    )}
    everything = dict(steps.sql_steps())
    monkeypatch.setattr(steps, "sql_steps", lambda: {**everything, **declared})
    made: list = []
    from traceview.engine.session import Reader
    create = Reader.create
    monkeypatch.setattr(Reader, "create", lambda self, name, *a: made.append((name, threading.current_thread().name))
                        or create(self, name, *a))
    return made


def test_sql_steps_begun_on_a_thread_are_taken_by_build_once(sql_steps):
    s, ref = _session(), _session()
    assert pipeline.start_sql(s, ["tq_counts", "tq_total"], {"bias": 5}) == ["tq_counts", "tq_total"]
    assert pipeline.start_sql(s, ["tq_counts"], {"bias": 5}) == []          # begun already
    assert build(s, ["tq_total"], {"bias": 5}) == ["tq_counts", "tq_total"]
    assert build(ref, ["tq_total"], {"bias": 5}) == ["tq_counts", "tq_total"]   # the reference: in line
    # gpu rows: rank 0 two, rank 1 one; n = rows + 5, total = n * 100
    assert s.rows("SELECT * FROM tq_total ORDER BY rank") == ref.rows("SELECT * FROM tq_total ORDER BY rank") \
        == [{"rank": 0, "total": 700}, {"rank": 1, "total": 600}]
    assert sql_steps == [("tq_counts", "traceview-steps"), ("tq_total", "traceview-steps")]   # made there only
    assert s.build_counts == {"tq_counts": 1, "tq_total": 1} and not s.started
    assert s.materialized("tq_total") and s.rows_in("tq_counts") == 2
    s.drop("tq_counts")                            # a table taken so is the session's, as one built here
    assert not s.materialized("tq_counts")


def test_only_sql_steps_whose_inputs_are_there_and_that_set_no_optimizer_are_begun(sql_steps):
    s = _session()
    assert pipeline.start_sql(s, ["tq_total"], {}) == []                  # tq_counts neither built nor begun
    assert pipeline.start_sql(s, ["tq_counts"], {}) == []                 # its parameter not given
    s.parallel_min_rows = 1                                               # (its input large: they apply)
    assert pipeline.start_sql(s, ["tq_opt"], {}) == []                    # optimizers of the database's
    s.parallel_min_rows = PARALLEL_MIN_ROWS
    with pytest.raises(StepError, match="not a SQL step"):
        pipeline.start_sql(s, ["tr_counts"], {"bias": 0})
    build(s, ["tq_counts"], {"bias": 0})
    assert pipeline.start_sql(s, ["tq_counts", "tq_total"], {"bias": 0}) == ["tq_total"]   # built: not again
    assert build(s, ["tq_total"]) == ["tq_total"] and sql_steps == [("tq_total", "traceview-steps")]


def test_the_error_of_a_sql_step_begun_on_a_thread_is_raised_by_build_in_its_turn(sql_steps):
    s = _session()
    assert pipeline.start_sql(s, ["tq_bad", "tq_after_bad"], {}) == ["tq_bad", "tq_after_bad"]
    with pytest.raises(Exception, match="a broken step"):      # the step after it is not made: built
        build(s, ["tq_after_bad"])                             # here, its input first, which fails again
    assert "tq_bad" not in s.built and "tq_after_bad" not in s.built
    assert [n for n, _ in sql_steps] == ["tq_bad"]


def test_a_sql_step_begun_with_other_parameters_is_built_anew(sql_steps):
    s = _session()
    pipeline.start_sql(s, ["tq_counts"], {"bias": 1})
    build(s, ["tq_counts"], {"bias": 2})
    assert s.rows("SELECT n FROM tq_counts ORDER BY rank") == [{"n": 4}, {"n": 3}] and not s.started


def test_a_python_step_begun_with_chain_makes_its_sql_requirements_on_its_thread(sql_steps):
    python_step("tr_from_q", scope="rank", requires=("tq_counts",), produces=("rank", "total"))(
        lambda session, params: session.sql("SELECT rank, n * 10 AS total FROM tq_counts"))
    python_step("tr_from_opt", scope="rank", requires=("tq_opt",), produces=("rank", "v"))(
        lambda session, params: session.sql("SELECT rank, v FROM tq_opt"))
    s, ref = _session(), _session()
    assert pipeline.start(s, "tr_from_q", {"bias": 5}, chain=True)
    assert set(s.started) == {"tq_counts", "tr_from_q"} and "tq_counts" not in s.built   # not built here
    assert build(s, ["tr_from_q"], {"bias": 5}) == ["tq_counts", "tr_from_q"]
    build(ref, ["tr_from_q"], {"bias": 5})                   # the reference: in line
    # gpu rows: rank 0 two, rank 1 one; n = rows + 5, total = n * 10
    assert s.rows("SELECT * FROM tr_from_q ORDER BY rank") == ref.rows("SELECT * FROM tr_from_q ORDER BY rank") \
        == [{"rank": 0, "total": 70}, {"rank": 1, "total": 60}]
    assert sql_steps == [("tq_counts", "traceview-step-tr_from_q")]
    assert s.build_counts == {"tq_counts": 1, "tr_from_q": 1} and not s.started
    assert s.rows("SELECT n FROM tq_counts ORDER BY rank") == [{"n": 7}, {"n": 6}]   # the session's table
    # a requirement a reader cannot make (optimizers of the database's): built here, as without chain
    sql_steps.clear()
    t = _session()
    t.parallel_min_rows = 1                  # (its input large: its optimizers apply)
    assert pipeline.start(t, "tr_from_opt", {}, chain=True)
    assert "tq_opt" in t.built and set(t.started) == {"tr_from_opt"} and sql_steps == []
    assert build(t, ["tr_from_opt"]) == ["tr_from_opt"]
    assert t.rows("SELECT * FROM tr_from_opt ORDER BY rank") == [{"rank": 0, "v": 1}, {"rank": 0, "v": 1},
                                                                 {"rank": 1, "v": 1}]


def test_steps_begun_with_a_python_step_between_sql_steps_read_its_table_on_the_thread(sql_steps, monkeypatch):
    """pipeline.start_steps: SQL and Python steps made one after another on one thread, the SQL step
    after the Python one reading its table there; build takes each once, and they equal the steps
    built in line. It stops at the first step a reader cannot make."""
    _sql_step_after = _sql_step("tq_after_py", "SELECT rank, n * 3 AS m FROM tr_counts", ("tr_counts",),
                                ("rank", "m"))
    real = steps.sql_steps()
    monkeypatch.setattr(steps, "sql_steps", lambda: {**real, "tq_after_py": _sql_step_after})
    s, ref = _session(), _session()
    begun = pipeline.start_steps(s, ["tq_counts", "tr_counts", "tq_after_py", "tq_total"], {"bias": 2}, "tv-x")
    assert begun == ["tq_counts", "tr_counts", "tq_after_py", "tq_total"]
    assert sorted(build(s, ["tq_after_py", "tq_total"], {"bias": 2})) == ["tq_after_py", "tq_counts", "tq_total",
                                                                          "tr_counts"]
    build(ref, ["tq_after_py", "tq_total"], {"bias": 2})
    # gpu rows: rank 0 two, rank 1 one; n = rows + 2: 4 and 3; m = 3n; total = 100 (rows + 2)
    for name, col in (("tq_after_py", "m"), ("tq_total", "total")):
        got = s.rows(f"SELECT rank, {col} FROM {name} ORDER BY rank")
        assert got == ref.rows(f"SELECT rank, {col} FROM {name} ORDER BY rank")
    assert s.rows("SELECT m FROM tq_after_py ORDER BY rank") == [{"m": 12}, {"m": 9}]
    assert [n for n, t in sql_steps] == ["tq_counts", "tq_after_py", "tq_total"] and \
        {t for _, t in sql_steps} == {"tv-x"}
    assert ("tr_counts", "tv-x") in RUNS and not s.started
    assert s.build_counts == {"tq_counts": 1, "tq_total": 1, "tr_counts": 1, "tq_after_py": 1}
    # the first step a reader cannot make ends what is begun
    t = _session()
    t.parallel_min_rows = 1                  # (its input large: its optimizers apply)
    assert pipeline.start_steps(t, ["tq_counts", "tq_opt", "tq_total"], {"bias": 0}, "tv-y") == ["tq_counts"]
    with pytest.raises(StepError, match="no step"):
        pipeline.start_steps(t, ["tq_nowhere"], {}, "tv-z")


def test_a_step_whose_inputs_are_small_runs_with_the_optimizers_on_and_so_on_a_reader(sql_steps):
    """Session.optimizers_off: a step's header's optimizers apply where one of its inputs holds
    parallel_min_rows rows; below, none do, and a reader may make the step."""
    s = _session()
    opt = steps.sql_steps()["tq_opt"]
    assert s.optimizers_off(opt) == ()
    assert pipeline.start_sql(s, ["tq_opt"], {}) == ["tq_opt"]
    assert build(s, ["tq_opt"]) == ["tq_opt"] and sql_steps == [("tq_opt", "traceview-steps")]
    s.parallel_min_rows = 3                  # the three GPU activities: large
    assert s.optimizers_off(opt) == ("build_side_probe_side",)
    s.parallel_min_rows = 4
    assert s.optimizers_off(opt) == ()
