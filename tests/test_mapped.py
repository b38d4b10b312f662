"""A job's per-rank work on the workers (traceview/mapped.py): the same bytes as one process, in every
format, for jobs whose ranks the traces record, whose ranks are assigned by file order, and for a
diff; the per-rank steps are built on the workers (one round) and adopted here once each."""
import shutil

import pytest
from helpers import TRACES

from traceview import executors, mapped
from traceview.cli import run_cli
from traceview.load import expand, load
from traceview.runs import AnalyzeOptions, run_job

DLRM = TRACES / "kineto" / "dlrm_8rank_v100"
NO_RANK = TRACES / "kineto" / "param_linear_2080ti" / "linear_kineto.json.gz"
pytestmark = pytest.mark.skipif(not DLRM.exists(), reason="the shared corpus is not beside the checkout")


def _schemas() -> set[str]:
    """The sessions' schemas in this thread's database (each session keeps its tables in one)."""
    from traceview import duck
    con = duck.connect()
    try:
        return {f"{r[0]}.{r[1]}" for r in con.sql("SELECT database_name, schema_name FROM duckdb_schemas()").fetchall()
                if r[1].startswith("tv_s")}
    finally:
        con.close()


def report(tmp_path, fmt, *args):
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.{fmt}"
    assert run_cli(["analyze", *map(str, args), "-f", fmt, "-o", str(out)]) == 0
    return out.read_bytes()


@pytest.mark.parametrize("fmt", ["json", "markdown", "text", "html"])
def test_dlrm_on_two_workers_is_byte_identical_to_one_process(tmp_path, fmt):
    one = report(tmp_path, fmt, DLRM, "--jobs", "1", "--no-store")
    two = report(tmp_path, fmt, DLRM, "--jobs", "2", "--no-store")
    assert one == two


def test_ranks_assigned_by_file_order_are_placed_as_load_places_them(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for i in range(3):                      # no rank recorded: ranks 0, 1, 2 by file order, ids renumbered
        shutil.copy(NO_RANK, job / f"part{i}.json.gz")
    one = report(tmp_path, "json", job, "--jobs", "1", "--no-store")
    two = report(tmp_path, "json", job, "--jobs", "2", "--store", tmp_path / "s")
    assert one == two and b"assigned rank 2 by file order" in one


def test_diff_on_two_workers_is_byte_identical(tmp_path):
    base, new = TRACES / "kineto" / "dlrm_8rank_v100", TRACES / "kineto" / "dlrm_8rank_v100"
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"d{jobs}.json"
        assert run_cli(["diff", str(base), str(new), "--jobs", jobs, "--no-store", "-f", "json", "-o", str(out)]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_steps_are_built_on_the_workers_and_adopted_once(tmp_path):
    files = expand([DLRM])
    with executors.configured(executors.RunSettings(store=tmp_path / "s", jobs=2)):
        assert mapped.eligible(files)
        doc, session = run_job([str(DLRM)], AnalyzeOptions())
        remote = session.profile.remote
        assert remote is not None and remote.rounds == 2        # the per-rank steps, the critical paths
        assert set(session.build_counts.values()) == {1}
        assert "cp_host_syncs" in remote.given and "layer_times" in remote.given
        # the canonical tables are those load() makes of the job (ranks, renumbered ids)
        whole = load([DLRM])
        for name in ("gpu_activities", "cpu_ranges", "launches", "syncs", "meta"):
            got, want = getattr(session.profile, name), getattr(whole, name)
            # the same schema and rows (a dictionary column's codes may differ: its values may not)
            assert got.schema.equals(want.schema) and got.to_pylist() == want.to_pylist(), name
    assert not (tmp_path / "s" / "scratch").exists() or not any((tmp_path / "s" / "scratch").iterdir())


def test_one_process_and_a_single_file_are_not_mapped(tmp_path):
    with executors.configured(executors.RunSettings(store=None, jobs=1)):
        assert not mapped.eligible(expand([DLRM]))
    with executors.configured(executors.RunSettings(store=None, jobs=2)):
        assert not mapped.eligible([NO_RANK])
        assert mapped.eligible(expand([DLRM]))


def _reversed_dlrm(tmp_path):
    """DLRM's 8 files named so that file order is rank order reversed (each trace records its rank)."""
    job = tmp_path / "reversed"
    job.mkdir()
    for f in DLRM.iterdir():
        k = int(f.name.split("_")[0].removeprefix("worker"))
        shutil.copy(f, job / f"part{7 - k}.pt.trace.json.gz")
    return job


def test_layer_rows_are_in_report_order_whatever_the_order_of_the_files(tmp_path, monkeypatch):
    """layer_rows reads layer_times as it lies where its ranks are in order (each batch's rows are
    built in order) and sorts it where they are not (files whose ranks come in another order): both
    give the rows of the same query with an ORDER BY, the second method (packed, as a long list is:
    DLRM's 41 rows are a long list here)."""
    from traceview.analysis import layers
    from traceview.document import packed
    monkeypatch.setattr(packed, "MIN_ROWS", 16)
    for job, in_order in ((DLRM, True), (_reversed_dlrm(tmp_path), False)):
        with executors.configured(executors.RunSettings(store=tmp_path / f"s{in_order}", jobs=2)):
            doc, session = run_job([str(job)], AnalyzeOptions())
            assert session.profile.remote is not None               # mapped: the batches' rows concatenated
            assert layers._in_rank_order(session) is in_order
            want = session.rows(f"SELECT * FROM layer_times ORDER BY {layers.LAYER_ORDER}")
            got = layers.layer_rows(session)
            assert type(got) is packed.PackedRows and len(want) == 41
            assert list(got) == want == list(doc["layers"])
            # in rank order the workers' packed parts are joined (mapped._layer_part: nothing packed
            # here); out of it they cannot be, and the rows are sorted here
            parts = session.profile.remote.layer_parts
            assert parts is not None and len(parts) == len(session.profile.remote.batches) >= 2
            joined = layers._joined_parts(session)
            assert (joined is not None) is in_order
            assert (type(got._chunks) is packed._MergedChunks) is in_order
            if in_order:
                assert [r for rb in parts for r in rb] == want


def test_files_whose_ranks_come_in_another_order_give_the_same_bytes_on_two_workers(tmp_path):
    job = _reversed_dlrm(tmp_path)
    one = report(tmp_path, "json", job, "--jobs", "1", "--no-store")
    two = report(tmp_path, "json", job, "--jobs", "2", "--no-store")
    assert one == two


def test_a_job_with_long_stall_lists_on_two_workers_with_a_store_gives_the_same_bytes(tmp_path):
    """Long lists whose rows, ends and sort keys come back from the workers as files (RowBytes.spill)
    and are written by the workers into the JSON (mapped.start_list_bodies): a first run with a
    store, its repeat from the store and one process give the same bytes, and every run succeeds."""
    job = _long_list_job(tmp_path)
    one = report(tmp_path, "json", job, "--jobs", "1", "--no-store")
    assert one.count(b'"cause"') > 4096              # more stall rows than a short list holds
    two = report(tmp_path, "json", job, "--jobs", "2", "--store", tmp_path / "s")
    again = report(tmp_path, "json", job, "--jobs", "2", "--store", tmp_path / "s")
    assert one == two == again


def _long_list_job(tmp_path):
    from fixtures import moe_job
    job = moe_job.Job(ranks=24, steps=4, layers=12)
    moe_job.write(tmp_path / "job", job)
    return tmp_path / "job"


def test_long_lists_whose_tasks_fail_are_written_here_alike(tmp_path, monkeypatch):
    """The workers write a JSON report's long lists in ranges (mapped.start_list_bodies); where
    their tasks fail (here: a function no worker can be given), each range is written by this
    process from the same rows as the report is written (json_report.list_body_of): the bytes of
    one process. (A failed range among written ones: test_json_writer.)"""
    from traceview.reports import json_report
    job = _long_list_job(tmp_path)
    one = report(tmp_path, "json", job, "--jobs", "1", "--no-store")
    real_here = json_report.list_body_of
    here = []
    monkeypatch.setattr(json_report, "list_body_file", lambda *a: pytest.fail("run"))   # not picklable
    monkeypatch.setattr(json_report, "list_body_of", lambda *a: here.append(a[1:]) or real_here(*a))
    assert report(tmp_path, "json", job, "--jobs", "2", "--no-store") == one
    assert here                                # every range, written here


@pytest.mark.parametrize("tasks_fail", [False, True])
def test_long_lists_not_written_out_during_the_run_are_taken_at_its_end(tmp_path, monkeypatch, tasks_fail):
    """A job's report asked for after its run ended (the pool and the scratch folder gone): the
    ranges the workers wrote were taken as the run ended (RunState.drains), and those whose task
    failed were written here then, from rows that lie in the scratch folder: the same bytes."""
    from traceview.job_cache import open_job
    from traceview.reports import json_report
    job = _long_list_job(tmp_path)
    if tasks_fail:
        monkeypatch.setattr(json_report, "list_body_file", lambda *a: pytest.fail("run"))   # not picklable

    def run(p):
        return run_job(p, AnalyzeOptions())[0]
    with executors.configured(executors.RunSettings(store=None, jobs=1)):
        want = b"".join(open_job([str(job)], {}, run, "json").output("json"))
    with executors.configured(executors.RunSettings(store=tmp_path / "s", jobs=2)) as state:
        j = open_job([str(job)], {}, run, "json")
        assert j._formatted and state.drains              # the long lists, by the workers
    assert executors.current() is None
    assert b"".join(j.output("json")) == want


def test_one_process_maps_a_job_beyond_one_batch_in_turn(tmp_path, monkeypatch):
    """--jobs 1 on a job whose input is more than one batch's bytes runs mapped in this process
    (mapped.beyond_one_batch): its batches one after the other, its critical paths on a thread;
    the report is the bytes of the job loaded whole, in every format checked."""
    from traceview.document import packed
    monkeypatch.setattr(packed, "MIN_ROWS", 16)           # DLRM's 41 layer rows a long list: packed, joined
    whole = {fmt: report(tmp_path, fmt, DLRM, "--jobs", "1", "--no-store") for fmt in ("json", "markdown")}
    files = expand([DLRM])
    size = sum(f.stat().st_size for f in files)
    with executors.configured(executors.RunSettings(store=None, jobs=1)):
        assert not mapped.eligible(files)                 # 0.5 MB: one batch, loaded whole
    monkeypatch.setattr(mapped, "BATCH_BYTES", size // 3)  # three batches' bytes or more
    with executors.configured(executors.RunSettings(store=tmp_path / "s", jobs=1)):
        assert mapped.eligible(files)
        before = _schemas()
        doc, session = run_job([str(DLRM)], AnalyzeOptions())
        # the batches' sessions, done with, took their tables with them: only the job's is left
        assert _schemas() - before == {session.schema}
        remote = session.profile.remote
        assert remote is not None and len(remote.batches) >= 3 and remote.rounds == 2
        assert executors.current().pool is None           # no process started: all ran here
        # the batches' layer rows, packed by their tasks here and mapped from their files, joined
        assert type(doc["layers"]) is packed.PackedRows and type(doc["layers"]._chunks) is packed._MergedChunks
        assert [len(p) for p in remote.layer_parts if p.path] and \
            all(p.maps for p in remote.layer_parts if len(p))
    with executors.configured(executors.RunSettings(store=None, jobs=2)):
        assert not mapped.beyond_one_batch(files)         # a pool's job is mapped on the pool instead
    loaded = []
    real = mapped.load_job
    monkeypatch.setattr(mapped, "load_job", lambda *a, **k: loaded.append(1) or real(*a, **k))
    for fmt, want in whole.items():
        assert report(tmp_path, fmt, DLRM, "--jobs", "1", "--no-store") == want, fmt
    assert report(tmp_path, "json", DLRM, "--jobs", "1", "--store", tmp_path / "s2") == whole["json"]
    assert len(loaded) == 3                               # each of the three runs was mapped
    # the ranks were stored on threads while the next was parsed (Store.put_behind): all of them, whole
    from traceview.store import Store
    s2 = Store(tmp_path / "s2")
    assert s2.check() == [] and all(s2.lookup(f) is not None for f in files)
