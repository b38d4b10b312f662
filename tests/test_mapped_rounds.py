"""The rounds of a mapped job (traceview/mapped.py): the batch sessions its pool workers keep
between rounds, the claims that send each batch to the worker holding its session, the tables the
parse writes for the place round (spill), and the stall round that runs while the parent works."""
import os

import pyarrow as pa
import pytest
from helpers import TRACES

from fixtures import moe_job
from traceview import executors, mapped, schema
from traceview.cli import run_cli
from traceview.engine.session import Session
from traceview.profile import Profile
from traceview.runs import AnalyzeOptions, run_job
from traceview.store import Store

DLRM = TRACES / "kineto" / "dlrm_8rank_v100"


def _echo(tag, b):
    return (tag, b, os.getpid())


def test_every_batch_is_claimed_once_and_the_kept_ones_first(tmp_path, monkeypatch):
    scratch = str(tmp_path)
    args = [("t", b) for b in range(4)]
    # this process "keeps" batch 2's session: its first task takes batch 2, then 0, 1, 3 in order
    monkeypatch.setitem(mapped._KEPT, (scratch, 2), object())
    got = [mapped.claimed(_echo, scratch, "r1", args) for _ in range(4)]
    assert [b for b, _ in got] == [2, 0, 1, 3]
    assert all(r[:2] == ("t", b) for b, r in got)          # each ran with its own batch's arguments
    with pytest.raises(AssertionError):                     # a fifth task finds nothing left
        mapped.claimed(_echo, scratch, "r1", args)
    # another round (a retry has a new name) claims anew
    assert mapped.claimed(_echo, scratch, "r2", args)[0] == 2
    monkeypatch.delitem(mapped._KEPT, (scratch, 2))


def test_a_kept_session_is_given_the_steps_another_worker_built(tmp_path, monkeypatch):
    """A worker that held batch 0 while another ran a round on it takes that round's steps from
    the scratch folder; a step it holds with other parameters makes it start afresh."""
    tables = {n: schema.empty(n) for n in schema.TABLES}
    for n, t in tables.items():
        mapped._write(tmp_path, 0, n, t)
    done = pa.table({"rank": pa.array([3], pa.int32()), "x": [7]})
    mapped._write(tmp_path, 0, "made_elsewhere", done)
    kept = Session(Profile(**tables))
    kept.built["mine"] = {"a": 1}
    monkeypatch.setitem(mapped._KEPT, (str(tmp_path), 0), kept)
    s = mapped._batch_session(tmp_path, 0, [("mine", {"a": 1}), ("made_elsewhere", {})], keep=True)
    assert s is kept and s.built["made_elsewhere"] == {}
    assert s.rows("SELECT rank, x FROM made_elsewhere") == [{"rank": 3, "x": 7}]
    mapped._write(tmp_path, 0, "mine", done)
    fresh = mapped._batch_session(tmp_path, 0, [("mine", {"a": 2})], keep=True)
    assert fresh is not kept and fresh.built["mine"] == {"a": 2}
    assert mapped._KEPT[(str(tmp_path), 0)] is fresh
    mapped._drop(str(tmp_path), 0)


def test_spilled_tables_are_the_stored_ones(tmp_path):
    """What the place round reads instead of the Parquet: the same schema and rows as the store
    gives back for the file."""
    f = sorted(DLRM.iterdir())[0]
    root = tmp_path / "s"
    kind, _, _ = executors.parse_task(_parse_checked(), str(f), None, str(root), None, None, True,
                                      str(tmp_path / "spill"))
    assert kind == "stored"
    spilled = mapped._read_spill(tmp_path / "spill")
    stored = Store(root).lookup(f)
    assert spilled is not None and stored is not None
    for name in schema.TABLES:
        got, want = spilled[name], stored.tables[name]
        assert got.schema.equals(want.schema), name
        assert got.num_rows == want.num_rows and got.to_pylist() == want.to_pylist(), name
    mapped.spill_tables(tmp_path / "spill", {})            # written once: a second attempt keeps it
    assert mapped._read_spill(tmp_path / "spill")["gpu_activities"].num_rows == stored.tables["gpu_activities"].num_rows


def _parse_checked():
    from traceview.load import parse_checked
    return parse_checked


def test_a_job_keeps_sessions_on_its_workers_and_gives_the_bytes_of_one_process(tmp_path):
    """16 ranks on 2 workers: 2 batches, each batch's later rounds on the worker that holds its
    session; every round of each batch ran exactly once; the report is that of --jobs 1."""
    d = tmp_path / "job"
    moe_job.write(d, moe_job.Job(ranks=16, steps=2, layers=4))
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}.json"
        assert run_cli(["analyze", str(d), "--jobs", jobs, "--store", str(tmp_path / f"s{jobs}"),
                        "-f", "json", "-o", str(out)]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    with executors.configured(executors.RunSettings(store=tmp_path / "s3", jobs=2)):
        doc, session = run_job([str(d)], AnalyzeOptions())
        remote = session.profile.remote
        assert remote.keep and len(remote.batches) == 2
        claims = sorted(p.name for p in (remote.scratch / "claims").iterdir())
        rounds = {c.split("-")[0] for c in claims}
        assert len(rounds) == 3 and len(claims) == 6      # place, steps, stalls: each batch once a round
        assert [c.split("-")[1] for c in claims].count("00000") == 3
        # every file was spilled by its parse and the spill removed once its batch was placed
        assert (remote.scratch / "files").is_dir() and not any((remote.scratch / "files").iterdir())


def test_many_batches_are_not_kept(tmp_path):
    state = executors.RunState(executors.RunSettings(store=tmp_path, jobs=2))
    assert executors.keeps_sessions(state, 2)
    assert not executors.keeps_sessions(state, 3)         # more batches than workers
    assert not executors.keeps_sessions(state, 1)         # one batch runs in this process
    one = executors.RunState(executors.RunSettings(store=tmp_path, jobs=1))
    assert not executors.keeps_sessions(one, 2)


def test_started_tasks_run_while_this_process_works_and_come_back_in_order(tmp_path):
    with executors.configured(executors.RunSettings(store=tmp_path, jobs=2)):
        pending = executors.submit_tasks(_echo, [("x", b) for b in range(5)])
        got = pending()
        assert [r[:2] for r in got] == [("x", b) for b in range(5)]
        assert all(pid != os.getpid() for _, _, pid in got)
    with executors.configured(executors.RunSettings(store=tmp_path, jobs=1)):
        assert [r[2] for r in executors.submit_tasks(_echo, [("x", 0), ("x", 1)])()] == [os.getpid()] * 2
