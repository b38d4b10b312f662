"""Dask distributed: a real LocalCluster (two worker processes) gives the byte-identical JSON report
of `--jobs 1`, on the 8-rank DLRM job and on a generated 64-rank MoE job."""
import os

import pytest
from helpers import TRACES

from fixtures import moe_job
from traceview.cli import run_cli

if os.environ.get("CI"):       # CI installs traceview[dask]: there the tests must run, never skip
    import distributed
else:
    distributed = pytest.importorskip("distributed", reason="the optional extra traceview[dask] is not installed")

DLRM = TRACES / "kineto" / "dlrm_8rank_v100"
JOB64 = moe_job.Job(ranks=64, steps=2, layers=4)


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as c:
        yield c


def report(tmp_path, *args) -> bytes:
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    assert run_cli(["analyze", *map(str, args), "-f", "json", "-o", str(out)]) == 0
    return out.read_bytes()


@pytest.mark.parametrize("store", [True, False])
def test_dlrm_on_dask_is_byte_identical_to_one_process(tmp_path, cluster, store):
    where = ["--store", str(tmp_path / "s")] if store else ["--no-store"]
    assert report(tmp_path, DLRM, "--dask", cluster.scheduler_address, *where) == \
        report(tmp_path, DLRM, "--jobs", "1", "--no-store")


def test_generated_64_ranks_on_dask_is_byte_identical_and_finds_the_planted_causes(tmp_path, cluster):
    job = tmp_path / "job"
    moe_job.write(job, JOB64)
    one = report(tmp_path, job, "--jobs", "1", "--no-store")
    sched = tmp_path / "scheduler.json"
    import json
    sched.write_text(json.dumps({"type": "Scheduler", "address": cluster.scheduler_address}))
    on_dask = report(tmp_path, job, "--dask-scheduler-file", sched, "--store", tmp_path / "s")
    assert on_dask == one
    want = moe_job.expected(JOB64)
    top = json.loads(one)["stragglers"][0]
    assert (top["rank"], top["times_last"], top["wait_caused_ns"]) == \
        (want["straggler"], want["times_last"], want["wait_caused_ns"])


def test_a_dask_worker_that_dies_is_rescheduled(tmp_path, cluster, monkeypatch):
    marker = tmp_path / "die"
    marker.write_text(sorted(DLRM.iterdir())[3].name)
    monkeypatch.setenv("TRACEVIEW_FAULT_DIE_ONCE", str(marker))
    got = report(tmp_path, DLRM, "--dask", cluster.scheduler_address, "--no-store")
    assert not marker.exists()          # a worker died on it, and the task ran again elsewhere
    monkeypatch.delenv("TRACEVIEW_FAULT_DIE_ONCE")
    assert got == report(tmp_path, DLRM, "--jobs", "1", "--no-store")
