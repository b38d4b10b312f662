"""Conventions of the real Nsight Systems reports in ../shared/traces/nsys_reports/ (exported by the
installed nsys): NVTX `Batch N` ranges are steps (the two A100 MNIST runs, 59 batches each, a real
before/after pair for diff), and the copies launched inside MPI calls (nsys's `MPI` NVTX domain) are
communication (the V100 Jacobi rank). Every expected number is computed straight from the SQLite
export with SQL of its own, not from traceview.

The reports are copied into a temporary folder first and exported there once (by the real nsys) for
the independent figures; analyze, outside a store, exports to a temporary folder of its own: nothing
is written under ../shared."""
import os
import shutil
import sqlite3
import statistics

import pytest
from helpers import TRACES

REPORTS = TRACES / "nsys_reports"
BASE, AMP = "a100_mnist_train_2022.2.nsys-rep", "a100_mnist_train_amp_gpumetrics_2022.2.nsys-rep"
JACOBI = "v100_jacobi_mpi_rank3_2020.5.qdrep"


def _nsys_or_fail():
    if shutil.which("nsys") is None:
        if os.environ.get("CI"):
            pytest.fail("nsys is not installed but CI is set: run .ci/install-nsys.sh")
        pytest.skip("nsys (Nsight Systems CLI) not installed; run .ci/install-nsys.sh")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    _nsys_or_fail()
    if not REPORTS.is_dir():
        pytest.skip(f"reports missing: {REPORTS}")
    root = tmp_path_factory.mktemp("nsys_reports")
    for name in (BASE, AMP, JACOBI):
        shutil.copy(REPORTS / name, root / name)
    return root


_EXPORTS: dict = {}


def _export(report):
    """The report's SQLite export, made once by `nsys export` beside the copy (for the expected figures)."""
    from traceview.parsers.nsys_export import to_sqlite
    if report not in _EXPORTS:
        _EXPORTS[report] = to_sqlite(report, report.with_name(report.name + ".expected.sqlite"))
    return _EXPORTS[report]


def _acts(con):
    """{correlation id: [(start, end)]} of every kernel, copy and set."""
    out = {}
    for t in ("KERNEL", "MEMCPY", "MEMSET"):
        for c, st, en in con.execute(f'SELECT correlationId, start, "end" FROM CUPTI_ACTIVITY_KIND_{t}'):
            out.setdefault(c, []).append((st, en))
    return out


def _launched_inside(con, ranges):
    """Per range (start, end, tid or None): the GPU activities whose runtime call starts inside it."""
    acts = _acts(con)
    calls = sorted(con.execute('SELECT start, correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME'))
    import bisect
    starts = [c[0] for c in calls]
    out = []
    for s, e, tid in ranges:
        got = []
        for _, corr, t in calls[bisect.bisect_left(starts, s):bisect.bisect_left(starts, e)]:
            if tid is None or t == tid:
                got += acts.get(corr, [])
        out.append(got)
    return out


def _batch_windows(db):
    """{batch number: GPU window ns}: first start to last end of the GPU work launched (runtime
    call start) inside each `Batch N` NVTX range."""
    con = sqlite3.connect(db)
    b = con.execute("""SELECT n.start, n."end", coalesce(n.text, s.value) FROM NVTX_EVENTS n
                       LEFT JOIN StringIds s ON s.id = n.textId
                       WHERE n.eventType = 59 AND coalesce(n.text, s.value) LIKE 'Batch %'""").fetchall()
    acts = _launched_inside(con, [(s, e, None) for s, e, _ in b])
    return {int(name.split()[1]): max(x[1] for x in a) - min(x[0] for x in a)
            for (_, _, name), a in zip(b, acts, strict=True) if a}


@pytest.mark.parametrize("name", [BASE, AMP])
def test_mnist_batches_are_the_steps(reports, name):
    from traceview.runs import AnalyzeOptions, run_analyze
    doc = run_analyze([str(reports / name)], AnalyzeOptions())
    want = _batch_windows(_export(reports / name))
    assert len(want) == 59 and sorted(want) == list(range(59))
    assert doc["summary"]["steps"] == 59 and "Batch" in doc["steps_source"]
    assert {s["step"]: s["step_time_ns"] for s in doc["steps"]} == want
    assert doc["summary"]["step_time_ns"] == statistics.median_low(want.values())
    assert not any(w.startswith("no step ranges") for w in doc["warnings"])


def test_mnist_diff_compares_median_steps(reports):
    from traceview.runs import DiffOptions, run_diff
    doc = run_diff([str(reports / BASE)], [str(reports / AMP)], DiffOptions())
    wb = _batch_windows(_export(reports / BASE))
    wn = _batch_windows(_export(reports / AMP))
    mb, mn = statistics.median_low(wb.values()), statistics.median_low(wn.values())
    assert doc["base"]["step_time_ns"] == mb and doc["new"]["step_time_ns"] == mn
    (b,), (n,) = doc["base"]["median_set"], doc["new"]["median_set"]
    assert wb[b["step"]] == mb and wn[n["step"]] == mn
    assert doc["delta"]["step_time_ns"] == mn - mb
    assert sum(it["contribution_ns"] for it in doc["explanation"]) == mn - mb
    assert doc["base"]["steps"] == doc["new"]["steps"] == 59
    # mixed precision: fp16 kernels appear in the new run
    assert any("fp16" in r["family"] for r in doc["delta"]["families"]["appeared"])


def test_jacobi_mpi_copies_are_communication(reports):
    from traceview.runs import AnalyzeOptions, run_analyze
    db = _export(reports / JACOBI)
    con = sqlite3.connect(db)
    mpi = con.execute("""SELECT n.start, n."end", n.globalTid FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                         WHERE n.eventType = 59 AND s.value LIKE 'MPI^_%' ESCAPE '^' AND n.domainId IN
                           (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'MPI')""").fetchall()
    under = [x for a in _launched_inside(con, mpi) for x in a]
    n, total = len(under), sum(e - s for s, e in under)
    assert n == 1000 and total > 0      # the halo exchange: one copy per MPI_Sendrecv pair of iterations
    doc = run_analyze([str(reports / JACOBI)], AnalyzeOptions())
    (c,) = doc["comm"]
    assert c["kind"] == "send_recv" and c["count"] == n and c["total_ns"] == total
    s = doc["summary"]
    assert s["comm_ns"] == total and s["exposed_comm_ns"] + s["overlapped_comm_ns"] == total
