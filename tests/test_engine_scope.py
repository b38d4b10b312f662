"""Scope is real: every per-rank step, built on a job of several ranks, gives exactly the union of
building it on each rank's rows alone (so the scale work may run it on workers, one rank each).
On a hand-made 2-rank job for every per-rank step (rank 1 has no step ranges, rank 0 does), and on
the 8-rank DLRM job for the steps of the breakdown, layers and collectives."""
import pyarrow.compute as pc
import pytest
from helpers import TRACES, make_profile

import traceview.analysis.breakdown as breakdown
import traceview.analysis.layers as layers
import traceview.flops.steps  # noqa: F401  (declares the FLOPs Python steps)
from traceview.config import Rules
from traceview.engine import steps
from traceview.engine.pipeline import build
from traceview.engine.session import Session
from traceview.profile import Profile


def _rank_alone(profile: Profile, rank: int) -> Profile:
    return Profile(**{n: t.filter(pc.equal(t.column("rank"), rank)) for n, t in profile.tables().items()})


def _params(step_regex=r"^ProfilerStep#(\d+)$") -> dict:
    return {"step_regex": step_regex, "step_regexes": list(breakdown.DEFAULT_STEP_REGEXES),
            "whole_trace": False, "no_step_ranges": False,
            "comm_op_regex": breakdown.DEFAULT_COMM_OP_REGEX, "comm_kernel_regex": breakdown.DEFAULT_COMM_KERNEL_REGEX,
            **layers.rule_params(Rules())}


def _rows(profile: Profile, name: str, params: dict) -> list:
    s = Session(profile)
    build(s, [name], params)
    return sorted(repr(tuple(r.values())) for r in s.rows(f"SELECT * FROM {name}"))


def _one_rank(r: int, with_steps: bool) -> dict:
    o = 1000 * r            # ids unique over the job
    cpu = [dict(id=o + 2, tid=1, start_ns=10, end_ns=300, name="layer_0/attn", depth=1),
           dict(id=o + 3, tid=1, start_ns=20, end_ns=30, name="aten::mm", kind="op", parent_id=o + 2, depth=2),
           dict(id=o + 4, tid=1, start_ns=100, end_ns=120, name="nccl:all_reduce", kind="op", depth=1),
           dict(id=o + 5, tid=1, start_ns=400, end_ns=450, name="dispatch(F)", depth=1),
           dict(id=o + 6, tid=1, start_ns=450, end_ns=500, name="combine(F)", depth=1),
           dict(id=o + 7, tid=1, start_ns=500, end_ns=550, name="dispatch(F)", depth=1),
           dict(id=o + 8, tid=1, start_ns=550, end_ns=600, name="combine(F)", depth=1),
           dict(id=o + 9, tid=2, start_ns=800, end_ns=850, name="autograd::engine::evaluate_function: MmBackward0",
                kind="op", seq=1),
           dict(id=o + 10, tid=1, start_ns=900, end_ns=950, name="aten::item", kind="op", depth=1)]
    if with_steps:
        cpu.append(dict(id=o + 1, tid=1, start_ns=0, end_ns=1000, name="ProfilerStep#1"))
    launch = lambda i, s, op, corr, name="cudaLaunchKernel": dict(  # noqa: E731
        id=o + i, tid=1 if op != o + 9 else 2, start_ns=s, end_ns=s + 2, name=name, correlation=o + corr, op_id=op)
    launches = [launch(20, 21, o + 3, 1), launch(21, 101, o + 4, 2), launch(22, 401, o + 5, 3),
                launch(23, 451, o + 6, 4), launch(24, 501, o + 7, 5), launch(25, 551, o + 8, 6),
                launch(26, 801, o + 9, 7), launch(27, 901, o + 10, 8, "cudaStreamSynchronize")]
    gpu = lambda i, s, e, name, stream, launch_id, kind="kernel", **kw: dict(  # noqa: E731
        id=o + i, start_ns=s, end_ns=e, name=name, stream=stream, launch_id=o + launch_id, kind=kind, **kw)
    acts = [gpu(30, 100, 400, "gemm", 7, 20), gpu(31, 300, 600, "ncclDevKernel_AllReduce_Sum_f32", 8, 21, bytes=64),
            gpu(32, 420, 440, "dispatch_kernel", 7, 22), gpu(33, 460, 470, "combine_kernel", 7, 23),
            gpu(34, 520, 530, "dispatch_kernel", 7, 24), gpu(35, 650, 700, "Memcpy DtoH", 9, 25, "memcpy", bytes=8),
            gpu(36, 810, 900, "gemm_bwd", 7, 26)]
    syncs = [dict(id=o + 40, kind="stream_sync", start_ns=901, end_ns=940, correlation=o + 8, stream=7),
             dict(id=o + 41, kind="stream_wait_event", start_ns=450, end_ns=451, correlation=o + 4, stream=7,
                  event_stream=8)]
    for t in (cpu, launches, acts, syncs):
        for x in t:
            x["rank"] = r
    return dict(cpu=cpu, launches=launches, gpu=acts, syncs=syncs)


def _two_rank_job() -> Profile:
    a, b = _one_rank(0, True), _one_rank(1, False)
    return make_profile(**{k: a[k] + b[k] for k in a}, ranks=(0, 1))


RANK_STEPS = sorted(n for n, st in steps.all_steps().items() if st.scope == "rank" and not n.startswith("t_"))


def test_the_hand_made_job_exercises_the_steps():
    s = Session(_two_rank_job())
    build(s, RANK_STEPS, _params())
    assert s.rows("SELECT count(*) AS n FROM windows")[0]["n"] == 1            # rank 0's step only
    assert s.rows("SELECT count(*) AS n FROM comm_ops")[0]["n"] >= 2          # an NCCL kernel per rank
    assert s.rows("SELECT count(*) AS n FROM cp_host_syncs")[0]["n"] == 2
    assert s.rows("SELECT count(*) AS n FROM layer_blocks")[0]["n"] == 8       # 2 blocks x 2 stages x 2 ranks
    assert {r["step"] for r in s.rows("SELECT step FROM activity_attribution")} == {0, 1}


@pytest.mark.parametrize("name", RANK_STEPS)
def test_per_rank_step_is_the_union_over_ranks_alone(name):
    job = _two_rank_job()
    whole = _rows(job, name, _params())
    alone = sorted(_rows(_rank_alone(job, 0), name, _params()) + _rows(_rank_alone(job, 1), name, _params()))
    assert whole == alone


DLRM = sorted((TRACES / "kineto" / "dlrm_8rank_v100").glob("*.json*"))


@pytest.mark.skipif(not DLRM, reason="the shared corpus is not beside the checkout")
def test_dlrm_8_ranks_per_rank_steps_are_the_union_over_ranks():
    from traceview.load import load
    job = load([str(p) for p in DLRM])
    names = ["activity_class", "step_ranges", "windows", "segments", "breakdown", "layer_times", "comm_ops",
             "coll_instances", "cp_preds", "step_source_rank", "stage_totals_rank", "comm_summary_rank"]
    s = Session(job)
    build(s, names, _params())
    whole = {n: sorted(repr(tuple(r.values())) for r in s.rows(f"SELECT * FROM {n}")) for n in names}
    assert len(whole["breakdown"]) >= 8 and whole["coll_instances"]
    alone = {n: [] for n in names}
    for rank in job.ranks:
        a = Session(_rank_alone(job, rank))
        build(a, names, _params())
        for n in names:
            alone[n] += [repr(tuple(r.values())) for r in a.rows(f"SELECT * FROM {n}")]
    for n in names:
        assert whole[n] == sorted(alone[n]), n
