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


@python_step("tf_ranges", scope="rank", requires=("cpu_ranges",), produces=("rank", "n"))
def _tf_ranges(session, params):
    return session.sql("SELECT rank, count(*)::BIGINT AS n FROM cpu_ranges GROUP BY rank")


def _ranges_session():
    return Session(make_profile(cpu=[dict(id=1, tid=7, start_ns=0, end_ns=10, name="a"),
                                     dict(id=2, tid=7, start_ns=2, end_ns=5, name="b", depth=1, parent_id=1),
                                     dict(id=3, tid=7, start_ns=20, end_ns=30, name="c")],
                                gpu=[dict(id=1, rank=0, start_ns=0, end_ns=10)]))


def test_let_go_of_a_profile_table():
    import duckdb
    s = _ranges_session()
    before = s.reader()                              # holds the ranges as the session had them
    walks = s.reader(without=("cpu_ranges",))        # a reader that never reads them
    assert s.attached("cpu_ranges").num_rows == 3 and "cpu_ranges" in s.tables()
    assert s.let_go_of("cpu_ranges")
    assert s.profile.cpu_ranges is None and s.let_go == {"cpu_ranges"}
    assert s.rows_in("cpu_ranges") == 3             # (the count stays known: one_thread_each, large)
    assert s.attached("cpu_ranges") is None and "cpu_ranges" not in s.tables()
    with pytest.raises(duckdb.CatalogException):
        s.sql("SELECT count(*) FROM cpu_ranges")
    # a step that reads them is refused, in one line naming both
    with pytest.raises(pipeline.StepError, match="tf_ranges reads cpu_ranges, which this session let go of"):
        build(s, ["tf_ranges"])
    assert "tf_ranges" not in s.built
    assert not s.let_go_of("cpu_ranges")            # once
    assert s.rows("SELECT count(*) AS n FROM gpu_activities") == [{"n": 1}]   # the other tables stay
    assert before.rows("SELECT count(*) AS n FROM cpu_ranges") == [{"n": 3}]
    for r in (walks, s.reader()):                     # made without them, or after they went
        with pytest.raises(duckdb.CatalogException):
            r.sql("SELECT count(*) FROM cpu_ranges")
        assert r.attached("cpu_ranges") is None
        r.close()
    before.close()


def test_let_go_of_refuses_what_is_not_the_profiles():
    s = _ranges_session()
    s.register("cpu_ranges", s.profile.cpu_ranges.slice(0, 1))   # a caller's table in its place
    assert not s.let_go_of("cpu_ranges") and s.profile.cpu_ranges.num_rows == 3
    assert not s.let_go_of("tf_raw") and not Session().let_go_of("cpu_ranges")


def test_analyze_lets_the_cpu_ranges_go_before_the_layer_rows(monkeypatch):
    """keep_tables=False (analyze) lets go of the profile's CPU ranges once their last readers are
    built (the capture times and the FLOPs, made before the layer rows there): none of the session,
    the walks' thread or the profile holds them while the layer rows are made, and the document is
    the one a run that keeps them makes."""
    import weakref
    path = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
    if not path.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    import gc

    from traceview.analysis import layers
    from traceview.engine.session import Session as S
    from traceview.runs import AnalyzeOptions, run_job
    held: list = []
    attach = S.attach

    def attach_spied(self, profile):   # a weak reference to the ranges the session is given
        held.append(weakref.ref(profile.cpu_ranges))
        attach(self, profile)
    seen: list = []
    rows_of = layers.layer_rows

    def layer_rows_spied(session, *a, **k):
        gc.collect()
        seen.append((set(session.let_go), held[-1]() is None))
        return rows_of(session, *a, **k)
    monkeypatch.setattr(S, "attach", attach_spied)
    monkeypatch.setattr(layers, "layer_rows", layer_rows_spied)
    kept_doc, kept = run_job([str(path)], AnalyzeOptions())
    doc, session = run_job([str(path)], AnalyzeOptions(), keep_tables=False)
    assert seen == [(set(), False), ({"cpu_ranges"}, True)]
    assert doc == kept_doc
    assert kept.profile.cpu_ranges is not None and session.profile.cpu_ranges is None
    assert doc["flops"]["status"] == kept_doc["flops"]["status"] and doc["inputs"] == kept_doc["inputs"]
