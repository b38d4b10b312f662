"""engine/pipeline.free_transient: a TRANSIENT step's table is dropped once every step that
requires it is built (at the next `build`), never before, and never a table someone still reads."""
import pytest
from helpers import TRACES, make_profile

from traceview.engine import pipeline
from traceview.engine.pipeline import build
from traceview.engine.session import Session
from traceview.engine.steps import python_step

# the tables a session still holds: those of its schema, and views (a Python step's Arrow table is registered as one)
_LEFT = ("SELECT table_name AS name FROM duckdb_tables() WHERE temporary OR schema_name = current_schema() "
         "UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT internal")


@python_step("tf_raw", scope="rank", requires=("gpu_activities",), produces=("rank", "n"))
def _tf_raw(session, params):
    return session.sql("SELECT rank, count(*)::BIGINT AS n FROM gpu_activities GROUP BY rank")


@python_step("tf_a", scope="rank", requires=("tf_raw",), produces=("rank", "a"))
def _tf_a(session, params):
    return session.sql("SELECT rank, n + 1 AS a FROM tf_raw")


@python_step("tf_b", scope="rank", requires=("tf_raw",), produces=("rank", "b"))
def _tf_b(session, params):
    return session.sql("SELECT rank, n * 10 AS b FROM tf_raw")


def _session():
    return Session(make_profile(gpu=[dict(id=1, rank=0, start_ns=0, end_ns=10),
                                     dict(id=2, rank=0, start_ns=10, end_ns=30)]))


def test_dropped_after_its_last_consumer(monkeypatch):
    monkeypatch.setattr(pipeline, "TRANSIENT", frozenset({"tf_raw"}))
    s = _session()
    assert build(s, ["tf_a"]) == ["tf_raw", "tf_a"]
    assert s.materialized("tf_raw")            # tf_b, which reads it too, is not built yet
    build(s, ["tf_a"])
    assert s.materialized("tf_raw")
    assert build(s, ["tf_b"]) == ["tf_b"]      # still there for tf_b: 2 activities * 10
    assert s.rows("SELECT b FROM tf_b") == [{"b": 20}]
    assert s.materialized("tf_raw")            # what one build returned stays readable after it
    assert pipeline.free_transient(s) == ["tf_raw"]
    assert not s.materialized("tf_raw") and "tf_raw" not in s.tables()
    assert s.rows("SELECT a FROM tf_a") == [{"a": 3}]
    # counted as built: asking again for its consumers builds nothing, it is not made again
    assert build(s, ["tf_a", "tf_b"]) == [] and s.build_counts == {"tf_raw": 1, "tf_a": 1, "tf_b": 1}


def test_not_transient_is_kept(monkeypatch):
    monkeypatch.setattr(pipeline, "TRANSIENT", frozenset())
    s = _session()
    build(s, ["tf_a", "tf_b"])
    build(s, ["tf_a"])
    assert s.materialized("tf_raw")


def test_registered_tables_are_not_dropped(monkeypatch):
    monkeypatch.setattr(pipeline, "TRANSIENT", frozenset({"tf_raw"}))
    s = _session()
    import pyarrow as pa
    s.register("tf_raw", pa.table({"rank": pa.array([0], pa.int32()), "n": pa.array([5], pa.int64())}))
    build(s, ["tf_a", "tf_b"])
    assert pipeline.free_transient(s) == []
    assert s.rows("SELECT n FROM tf_raw") == [{"n": 5}]


def test_analyze_frees_the_layer_intermediates():
    path = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"
    if not path.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    from traceview.runs import AnalyzeOptions, run_job
    doc, session = run_job([str(path)], AnalyzeOptions())
    assert session.freed == {"name_tags", "range_context_raw", "layer_heads", "layer_blocks"}
    left = {r["name"] for r in session.rows(_LEFT)}
    assert not left & session.freed and {"range_context", "activity_attribution"} <= left


def test_analyze_lets_the_sections_tables_go_before_the_walk(monkeypatch):
    """keep_tables=False (analyze: the session goes with the document) drops SECTIONS_ONLY once the
    steps analyze builds from them are, and the document is the one a run that keeps them makes."""
    path = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
    if not path.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    from traceview.analysis import stalls
    from traceview.document import assemble
    from traceview.runs import AnalyzeOptions, run_job
    seen: list = []
    begin = stalls.begin_rank_part

    def spy(session, *a, **k):   # the tables there when the walk starts and when its part is awaited
        seen.append(session.materialized("range_context"))
        begun = begin(session, *a, **k)
        walk = begun.walk

        def walk_spied(job):
            pending = walk(job)

            def wait():
                seen.append({n: session.materialized(n) for n in assemble.SECTIONS_ONLY})
                return pending()
            return wait
        begun.walk = walk_spied
        return begun
    monkeypatch.setattr(stalls, "begin_rank_part", spy)
    kept_doc, kept = run_job([str(path)], AnalyzeOptions())
    doc, session = run_job([str(path)], AnalyzeOptions(), keep_tables=False)
    # range_context goes before the walk starts (its only reader, the attribution, is built), the
    # spans and shares before the walk's part is awaited
    assert seen == [True, dict.fromkeys(assemble.SECTIONS_ONLY, True),
                    False, dict.fromkeys(assemble.SECTIONS_ONLY, False)]
    assert doc == kept_doc
    left = {r["name"] for r in session.rows(_LEFT)}
    assert not left & set(assemble.SECTIONS_ONLY) and set(assemble.SECTIONS_ONLY) <= session.freed
    still = {r["name"] for r in kept.rows(_LEFT)}
    assert set(assemble.SECTIONS_ONLY) <= still


def test_layer_intermediates_are_gone_before_the_attribution_query():
    # layers.prepare builds in three calls: name_tags is dropped before the layer heads are
    # made and range_context_raw before activity_attribution runs (its largest neighbour)
    path = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"
    if not path.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    from traceview.analysis import breakdown, layers
    from traceview.config import Rules
    from traceview.load import load
    s = Session(load([str(path)]))
    breakdown.prepare(s, breakdown.Options())
    held: dict = {}
    orig = s.materialize_sql

    def spy(name, sql, params, disabled_optimizers=(), parallel=False):
        held[name] = {t for t in pipeline.TRANSIENT if s.materialized(t)}
        orig(name, sql, params, disabled_optimizers, parallel)
    s.materialize_sql = spy
    layers.prepare(s, Rules())
    assert "name_tags" not in held["layer_heads"] and "name_tags" not in held["range_context"]
    assert held["activity_attribution"] == set()
    assert s.rows("SELECT count(*) AS n FROM activity_attribution")[0]["n"] == \
        s.rows("SELECT count(*) AS n FROM gpu_activities")[0]["n"]
