"""Steps declared `threads: all` (engine/steps.py) run on every core of a run's only process, and
their tables are the same on one thread and on two, row by row (values and order): every such
step is built on real traces with one and with two threads and the tables are compared. The
session runs such a step on `step_threads` threads where one of its inputs holds at least
`parallel_min_rows` rows, and every other step, before and after it, on one; the header takes only
`all`; a run that analyzes its job in its own process gives the session
--jobs threads (the cores by default), and a mapped job's parent keeps one."""
import pyarrow as pa
import pytest
from helpers import ROOT, TRACES

from traceview import executors, runs
from traceview.document.assemble import assemble
from traceview.document.options import AnalyzeOptions
from traceview.engine import steps
from traceview.engine.session import PARALLEL_MIN_ROWS, Reader, Session
from traceview.load import load

FIXTURE = ROOT / "fixtures" / "h200_moe_overlap.json.gz"
PARALLEL = sorted(s.name for s in steps.sql_steps().values() if s.parallel)
INPUTS = {
    "fixture": [FIXTURE],
    "nsys_a2a": [TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"],
    "nccl": [TRACES / "kineto" / "hta_nccl_parser_config" / "nccl_data.json.gz"],
    "dlrm_8_ranks": sorted((TRACES / "kineto" / "dlrm_8rank_v100").glob("*.json.gz")),
}


class _Kept(Session):
    """A session that keeps a copy of each parallel step's table as it is built (a table may be
    dropped after its last use)."""
    def __init__(self, profile):
        super().__init__(profile)
        self.kept: dict[str, pa.Table] = {}

    def materialize_sql(self, name, sql, params, disabled_optimizers=(), parallel=False):
        super().materialize_sql(name, sql, params, disabled_optimizers, parallel)
        if name in PARALLEL:
            self.kept[name] = self.con.sql(f"SELECT * FROM {name}").to_arrow_table()


def _tables(profile, threads: int) -> dict[str, pa.Table]:
    s = _Kept(profile)
    s.step_threads = threads
    s.parallel_min_rows = 0   # every declared step on `threads`, however few rows these traces hold
    assemble(profile, session=s)
    return s.kept


def test_some_steps_are_parallel_and_the_rest_not():
    # the steps that gain most from a second core (x34 Kineto, nsys x100) are declared; a step
    # with a floating-point sum is not
    assert {"activity_class", "activity_attribution", "segments", "range_context"} <= set(PARALLEL)
    assert "activity_shares" not in PARALLEL and "flops_ops" not in PARALLEL


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_parallel_steps_give_the_same_rows_in_the_same_order(name):
    paths = INPUTS[name]
    if not paths or not all(p.exists() for p in paths):
        pytest.skip("the shared corpus is not beside the checkout")
    profile = load([str(p) for p in paths])
    one = _tables(profile, 1)
    assert set(one) == set(PARALLEL)   # every declared step is built (and so compared) here
    assert sum(t.num_rows for t in one.values()) > 0
    for attempt in range(2):          # two runs on two threads: an order left to the threads differs between runs
        two = _tables(profile, 2)
        for step in PARALLEL:
            assert two[step].schema == one[step].schema, step
            assert two[step].equals(one[step]), f"{step} differs on two threads (attempt {attempt})"


def _threads_step(tmp_name: str, parallel: bool) -> steps.Step:
    sql = (f"-- step: {tmp_name}\n-- scope: job\n-- requires: gpu_activities\n-- produces: n\n"
           + ("-- threads: all\n" if parallel else "") + "SELECT current_setting('threads')::BIGINT AS n")
    return steps.parse_header(tmp_name, sql)


def test_session_runs_only_parallel_steps_on_step_threads():
    s = Session()
    s.step_threads = 3
    for name, parallel, want in (("t_par", True, 3), ("t_one", False, 1)):
        step = _threads_step(name, parallel)
        assert step.parallel is parallel
        s.materialize_sql(step.name, step.sql, {}, step.disabled_optimizers, step.parallel)
        assert s.rows(f"SELECT n FROM {name}") == [{"n": want}]
        assert s.rows("SELECT current_setting('threads')::BIGINT AS n") == [{"n": 1}]   # back to one


class _Spy(Session):
    """A session that notes whether each step it materializes runs on step_threads."""
    def __init__(self, profile):
        super().__init__(profile)
        self.parallel: dict[str, bool] = {}

    def materialize_sql(self, name, sql, params, disabled_optimizers=(), parallel=False):
        self.parallel[name] = parallel
        super().materialize_sql(name, sql, params, disabled_optimizers, parallel)


def test_declared_steps_get_step_threads_only_where_an_input_is_large(monkeypatch):
    profile = load([str(FIXTURE)])
    big = max(profile.gpu_activities.num_rows, profile.cpu_ranges.num_rows)
    assert big < PARALLEL_MIN_ROWS                      # the fixture is small: every step on one thread
    # a small trace's steps made on a thread beside the main one (document/assemble.py): by a reader,
    # on the threads of the database the reader's query finds (the session's own, one)
    by_reader: dict[str, int] = {}
    create = Reader.create

    def creating(self, name, *a):
        by_reader[name] = self.con.execute("SELECT current_setting('threads') AS t").fetchone()[0]
        return create(self, name, *a)
    monkeypatch.setattr(Reader, "create", creating)
    s = _Spy(profile)
    s.step_threads = 2
    assemble(profile, session=s)
    assert {"name_tags", "step_ranges", "layer_heads", "range_context", "activity_attribution", "comm_ops",
            "cp_host_syncs", "activity_spans"} <= set(by_reader) and set(by_reader.values()) == {1}
    assert set(PARALLEL) <= set(s.parallel) | set(by_reader) and not any(s.parallel.values())
    monkeypatch.setattr(Reader, "create", create)
    s = _Spy(profile)                                   # a threshold the CPU ranges reach, not the GPU activities
    s.step_threads = 2
    s.parallel_min_rows = big
    assemble(profile, session=s)
    on = {n for n, p in s.parallel.items() if p}
    assert on and on <= set(PARALLEL)
    assert {"name_tags", "step_source_rank"} <= on      # they read cpu_ranges
    assert "step_windows" not in on                     # gpu_activities, step_ranges, activity_origin: fewer rows
    assert s.rows_in("cpu_ranges") == profile.cpu_ranges.num_rows
    assert s.rows_in("activity_origin") == s.rows("SELECT count(*) AS n FROM activity_origin")[0]["n"]


def test_worth_threads_threshold():
    s = Session()
    s.step_threads = 2
    s.register("t", pa.table({"x": pa.array(range(10))}))
    s.parallel_min_rows = 10
    assert s.worth_threads(("t",)) and s.worth_threads(("unknown", "t"))
    s.parallel_min_rows = 11
    assert not s.worth_threads(("t",)) and not s.worth_threads(("unknown",))
    s.parallel_min_rows = 0
    s.step_threads = 1                                  # one thread to give: never
    assert not s.worth_threads(("t",))


def test_threads_header_takes_only_all():
    with pytest.raises(steps.StepError, match="only value"):
        steps.parse_header("x", "-- step: x\n-- scope: job\n-- requires: gpu_activities\n-- produces: n\n"
                                "-- threads: 4\nSELECT 1 AS n")


def _threads_of(paths, jobs) -> int:
    with executors.configured(executors.RunSettings(store=None, jobs=jobs)):
        return runs.run_job([str(p) for p in paths], AnalyzeOptions())[1].step_threads


def test_analyze_gives_its_own_job_the_jobs_threads_and_a_mapped_job_one():
    assert _threads_of([FIXTURE], 3) == 3              # one trace: --jobs (the cores by default)
    assert _threads_of([FIXTURE], 1) == 1              # --jobs 1: one thread
    assert runs.run_job([str(FIXTURE)], AnalyzeOptions())[1].step_threads == executors.cores()   # the API
    dlrm = INPUTS["dlrm_8_ranks"]
    if not dlrm:
        pytest.skip("the shared corpus is not beside the checkout")
    assert _threads_of(dlrm[:2], 1) == 1               # two ranks in this process (--jobs 1)
    assert _threads_of(dlrm[:2], 2) == 1               # mapped: the parent keeps one
