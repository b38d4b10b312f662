"""The Python API (`traceview.open`) gives the command line's figures, as DataFrames and documents."""
import doctest
import gzip
import json
import os
import subprocess
import sys

import polars as pl
import pytest
from helpers import ROOT, TRACES

import traceview

FIXTURE = ROOT / "fixtures" / "h200_moe_overlap.json.gz"
DLRM = TRACES / "kineto" / "dlrm_8rank_v100"
BLOCKING = TRACES / "kineto" / "h200_moe" / "blocking.json.gz"
PARTS = ("compute_ns", "exposed_comm_ns", "exposed_memory_ns", "idle_ns")


def cli(*args, store=None) -> subprocess.CompletedProcess:
    env = None if store is None else {**os.environ, "TRACEVIEW_CACHE_DIR": str(store)}
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env=env)


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory):
    if not DLRM.exists():
        pytest.skip("shared DLRM traces not available")
    # a module fixture runs before the per-test temporary store is set: it names its own
    r = cli("analyze", DLRM, "-f", "json", store=tmp_path_factory.mktemp("store"))
    assert r.returncode == 0, r.stderr
    return traceview.open(DLRM), json.loads(r.stdout)


@pytest.fixture(scope="module")
def fixture_job():
    return traceview.open(FIXTURE)


def rows(df: pl.DataFrame) -> list[dict]:
    return df.to_dicts()


def same(got, want) -> bool:
    """Equal, except that a polars struct column holds the union of its rows' keys: a key a report
    row lacks must be null in the DataFrame row (and every key the report has must be equal)."""
    if isinstance(want, dict):
        return (isinstance(got, dict) and set(want) <= set(got)
                and all(got[k] is None for k in set(got) - set(want))
                and all(same(got[k], want[k]) for k in want))
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    return got == want and type(got) is type(want)


def test_dlrm_dataframes_equal_the_cli_json_report(dlrm):
    job, report = dlrm
    assert job.report() == report                       # the whole document, as `analyze -f json` writes it
    steps = rows(job.steps)
    assert len(steps) == len(report["steps"]) == 8      # 8 ranks x 1 step
    for got, want in zip(steps, report["steps"], strict=True):
        assert got == want
        # and each row's parts make up its window (the DataFrame carries the figures, not copies of a sum)
        assert sum(got[p] for p in PARTS) == got["step_time_ns"]
        assert got["exposed_comm_ns"] + got["overlapped_comm_ns"] == got["comm_ns"]
    assert rows(job.layers) == report["layers"] and len(report["layers"]) > 0
    assert rows(job.collectives) == report["collectives"] and len(report["collectives"]) == 8
    assert same(rows(job.stalls), report["stalls"]) and len(report["stalls"]) > 0
    assert rows(job.flops) == report["flops"]["by_group"]
    assert job.flops_summary == {k: v for k, v in report["flops"].items() if k != "by_group"}
    assert job.flops_summary["method"] == "trace" and "by_group" not in job.flops_summary
    assert rows(job.comm) == report["comm"]
    assert rows(job.critical_path) == report["critical_path"]


def test_dlrm_kernels_extend_the_reports_top_kernels(dlrm):
    job, report = dlrm
    k = job.kernels
    top = report["top_kernels"]
    assert len(top) == 10 and k.height > 10
    assert rows(k.head(len(top))) == top                # the report's top-N is the head of the full table
    assert k["total_ns"].to_list() == sorted(k["total_ns"].to_list(), reverse=True)
    # a second method: count the GPU activities inside the step windows with polars, not SQL
    acts = job.sql("SELECT rank, start_ns, end_ns FROM gpu_activities")
    windows = job.steps.select("rank", "start_ns", (pl.col("start_ns") + pl.col("step_time_ns")).alias("end_w"))
    inside = acts.join(windows, on="rank", suffix="_w").filter(
        (pl.col("start_ns") >= pl.col("start_ns_w")) & (pl.col("end_ns") <= pl.col("end_w")))
    assert int(k["count"].sum()) == inside.height
    assert int(k["total_ns"].sum()) == int((inside["end_ns"] - inside["start_ns"]).sum())


def test_sql_over_the_canonical_tables(fixture_job):
    raw = json.load(gzip.open(FIXTURE))
    gpu = [e for e in raw["traceEvents"]
           if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    df = fixture_job.sql("SELECT kind, count(*) AS n FROM gpu_activities GROUP BY kind ORDER BY kind")
    assert isinstance(df, pl.DataFrame)
    by_kind = dict(zip(df["kind"], df["n"], strict=True))
    assert by_kind == {"kernel": sum(e["cat"] == "kernel" for e in gpu),
                       "memcpy": sum(e["cat"] == "gpu_memcpy" for e in gpu),
                       "memset": sum(e["cat"] == "gpu_memset" for e in gpu)}
    # named parameters, never formatted into the SQL text
    name = "Memset (Device)"
    n = fixture_job.sql("SELECT count(*) AS n FROM gpu_activities WHERE name = $name", name=name)["n"][0]
    assert n == sum(e["name"] == name for e in gpu) > 0
    for t in ("cpu_ranges", "launches", "syncs", "meta", "activity_class", "activity_attribution", "windows"):
        assert fixture_job.sql(f"SELECT count(*) AS n FROM {t}")["n"][0] >= 0
    with pytest.raises(traceview.TraceError, match="^sql: "):
        fixture_job.sql("SELECT * FROM no_such_table")


def test_render_is_the_cli_output(fixture_job, tmp_path):
    r = cli("analyze", FIXTURE, "--out-dir", tmp_path, "-f", "text")   # text on stdout, json + html files
    assert r.returncode == 0, r.stderr
    assert fixture_job.render("text") == r.stdout
    assert fixture_job.render("json") == (tmp_path / "report.json").read_text()
    assert fixture_job.render("html") == (tmp_path / "report.html").read_text()
    r = cli("analyze", FIXTURE, "-f", "markdown")
    assert r.returncode == 0, r.stderr
    assert fixture_job.render("markdown") == r.stdout
    with pytest.raises(traceview.TraceError, match="unknown --format 'pdf'"):
        fixture_job.render("pdf")


def test_errors_raise_trace_error_with_the_cli_message(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    cases = [([tmp_path / "missing.json"], {}, ["analyze", tmp_path / "missing.json"]),
             ([empty], {}, ["analyze", empty]),
             ([FIXTURE], {"step_regex": "("}, ["analyze", FIXTURE, "--step-regex", "("]),
             ([FIXTURE], {"top": -1}, ["analyze", FIXTURE, "--top", "-1"])]
    for paths, opts, args in cases:
        with pytest.raises(traceview.TraceError) as e:
            traceview.open(paths, **opts)
        r = cli(*args)
        assert r.returncode == 2
        assert r.stderr == f"traceview: {e.value}\n"
    with pytest.raises(traceview.TraceError, match="no trace paths given"):
        traceview.open([])


def test_options_are_analyzes(fixture_job):
    whole = traceview.open(FIXTURE, whole_trace=True, top=3)
    rep = whole.report()
    assert rep["steps_source"].startswith("whole trace") and len(rep["steps"]) == 1
    assert whole.kernels.height == fixture_job.kernels.height and len(rep["top_kernels"]) == 3
    # the whole-trace window spans all GPU activity: check against the canonical table
    span = whole.sql("SELECT max(end_ns) - min(start_ns) AS t FROM gpu_activities")["t"][0]
    assert rep["steps"][0]["step_time_ns"] == span
    # a different (valid) step regex: the script's own `step_N` annotations give 3 windows too
    assert traceview.open(FIXTURE, step_regex=r"^step_(\d+)$").steps.height == 3


def test_diff_equals_the_cli_diff(fixture_job):
    if not BLOCKING.exists():
        pytest.skip("shared H200 traces not available")
    other = traceview.open(BLOCKING)
    r = cli("diff", FIXTURE, BLOCKING, "-f", "json")
    assert r.returncode == 0, r.stderr
    got = fixture_job.diff(other)
    assert got == json.loads(r.stdout)
    assert got["base"]["step_time_ns"] == fixture_job.summary["step_time_ns"]
    assert got["new"]["step_time_ns"] == other.summary["step_time_ns"]
    assert got["delta"]["step_time_ns"] == other.summary["step_time_ns"] - fixture_job.summary["step_time_ns"]
    with pytest.raises(traceview.TraceError):
        fixture_job.diff("not a job")


def test_close_keeps_the_document():
    with traceview.open(FIXTURE, whole_trace=True) as job:
        n = job.sql("SELECT count(*) AS n FROM gpu_activities")["n"][0]
    assert n == 7380 and job.steps.height == 1 and job.report()["steps"][0]["step"] == 0
    with pytest.raises(traceview.TraceError, match="closed"):
        job.sql("SELECT 1")
    job.close()   # twice is fine


def test_import_is_lazy():
    code = "import sys, traceview; assert 'traceview.api' not in sys.modules and 'duckdb' not in sys.modules; " \
           "assert 'open' in dir(traceview); traceview.open; assert 'traceview.api' in sys.modules"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_api_doc_examples_run(monkeypatch):
    """docs/API.md's walkthrough runs as doctests (in the default `python -m pytest -q`)."""
    monkeypatch.chdir(ROOT)
    res = doctest.testfile(str(ROOT / "docs" / "API.md"), module_relative=False,
                           optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.attempted >= 10 and res.failed == 0
