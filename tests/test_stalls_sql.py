"""Golden tests of the critical-path / stall / collective queries on hand-made profiles.
Every expected number is worked out by hand in the comments."""
import json

import pytest
from helpers import make_profile

from traceview import schema
from traceview.analysis import breakdown, collectives, critical_path, layers, stalls
from traceview.config import Rules
from traceview.engine.pipeline import build
from traceview.engine.session import Session


def one_rank():
    # thread 1; ProfilerStep#1 [0, 10000). Stream 7 compute, stream 20 an all-to-all.
    cpu = [
        dict(id=1, tid=1, start_ns=0, end_ns=10000, name="ProfilerStep#1"),
        dict(id=2, tid=1, start_ns=3000, end_ns=4200, name="aten::item", kind="op", depth=1, parent_id=1),
        dict(id=3, tid=1, start_ns=3050, end_ns=4150, name="aten::_local_scalar_dense", kind="op", depth=2,
             parent_id=2),
        dict(id=4, tid=1, start_ns=250, end_ns=450, name="c10d::alltoall_base_", kind="op", depth=1, parent_id=1),
    ]
    launches = [
        dict(id=11, tid=1, start_ns=100, end_ns=200, correlation=1),
        dict(id=12, tid=1, start_ns=300, end_ns=400, correlation=2, op_id=4),
        dict(id=13, tid=1, start_ns=500, end_ns=600, correlation=3, name="cudaEventRecord"),
        dict(id=14, tid=1, start_ns=700, end_ns=800, correlation=4, name="cudaStreamWaitEvent"),
        dict(id=15, tid=1, start_ns=900, end_ns=1000, correlation=5),
        dict(id=16, tid=1, start_ns=3100, end_ns=3200, correlation=6, name="cudaMemcpyAsync", op_id=3),
        dict(id=17, tid=1, start_ns=3250, end_ns=4100, correlation=7, name="cudaStreamSynchronize", op_id=3),
        dict(id=18, tid=1, start_ns=4500, end_ns=4600, correlation=8),
        dict(id=19, tid=1, start_ns=5050, end_ns=5100, correlation=9),
        dict(id=20, tid=1, start_ns=5400, end_ns=6000, correlation=10, name="cudaMemcpyAsync"),
        dict(id=26, tid=1, start_ns=6100, end_ns=6200, correlation=11),
    ]
    gpu = [
        dict(id=21, stream=7, start_ns=1000, end_ns=2000, name="gemm", correlation=1, launch_id=11),
        dict(id=22, stream=20, start_ns=2500, end_ns=2800, name="ncclDevKernel_SendRecv", correlation=2,
             launch_id=12, op_id=4),
        dict(id=23, stream=7, start_ns=2900, end_ns=3100, name="gemm2", correlation=5, launch_id=15),
        dict(id=24, stream=7, start_ns=3200, end_ns=3300, kind="memcpy", name="Memcpy DtoH (Device -> Pinned)",
             correlation=6, launch_id=16, op_id=3),
        dict(id=25, stream=7, start_ns=4700, end_ns=5000, name="expert0", correlation=8, launch_id=18),
        dict(id=27, stream=7, start_ns=5200, end_ns=5300, name="expert1", correlation=9, launch_id=19),
        dict(id=28, stream=7, start_ns=5500, end_ns=5900, kind="memcpy", name="Memcpy DtoH (Device -> Pageable)",
             correlation=10, launch_id=20),
        dict(id=29, stream=7, start_ns=6300, end_ns=6400, name="cat", correlation=11, launch_id=26),
    ]
    syncs = [
        dict(id=41, start_ns=700, end_ns=800, kind="stream_wait_event", stream=7, event_stream=20, correlation=4),
        dict(id=42, start_ns=3250, end_ns=4100, kind="stream_sync", stream=7, correlation=7),
    ]
    return make_profile(cpu, launches, gpu, syncs)


def prepared(profile):
    s = Session(profile)
    breakdown.prepare(s, breakdown.Options())
    rows = breakdown.step_rows(s)
    layers.prepare(s, Rules())
    return s, rows


@pytest.fixture(scope="module")
def one():
    s, rows = prepared(one_rank())
    sec = stalls.sections(s, {"steps": rows})
    return s, rows, sec


def test_cp_host_syncs_golden(one):
    s, _, _ = one
    got = {r["id"]: r for r in s.rows("SELECT * FROM cp_host_syncs")}
    # 17: a synchronize API (and a stream_sync record); 20: blocking copy to pageable memory that
    # returned (6000) after its copy ended (5900). 16 is an async copy that returned before its copy
    # ended (3200 < 3300) and 14 is a stream wait (no host blocking).
    assert sorted(got) == [17, 20]
    assert (got[17]["dur_ns"], got[17]["op"], got[17]["parent_op"], got[17]["grandparent_op"]) == \
        (850, "aten::_local_scalar_dense", "aten::item", None)   # ProfilerStep#1 is an annotation
    assert (got[20]["dur_ns"], got[20]["op"]) == (600, None)


def test_cp_preds_golden(one):
    s, _, _ = one
    build(s, ["cp_preds"])   # the walks run its SQL per chunk of ranks: the step is built only on request
    got = {r["id"]: (r["prev_id"], r["prev_end_ns"], r["wait_src_id"], r["wait_src_end_ns"], r["sync_id"])
           for r in s.rows("SELECT * FROM cp_preds")}
    assert got == {
        21: (None, None, None, None, None),
        22: (None, None, None, None, None),    # first on stream 20; the wait concerns stream 7
        23: (21, 2000, 22, 2800, None),        # first on 7 launched after the wait (700): waits for 22
        24: (23, 3100, None, None, None),
        25: (24, 3300, None, None, 17),        # sync 17 ended at 4100 <= launch 4500
        27: (25, 5000, None, None, 17),
        28: (27, 5300, None, None, 17),
        29: (28, 5900, None, None, 20),        # blocking copy ended at 6000 <= launch 6100
    }


def test_walk_golden(one):
    # Window [1000, 6400). Backwards from 29 (cat): pred 28 ends 5900, launch ends 6200 > 5900 and the
    # blocking copy returned at 6000 in [5900, 6100] -> host_sync [5900, 6300). 28: pred 27 (5300),
    # launch ends 6000 -> no sync returned in [5300, 5400] -> launch_bound [5300, 5500). 27: pred 25
    # (5000), launch end 5100 -> launch_bound [5000, 5200). 25: pred 24 (3300), launch end 4600, sync
    # 17 returned at 4100 -> host_sync [3300, 4700). 24: pred 23 (3100), launch end 3200 ->
    # launch_bound [3100, 3200). 23: preds 21 (2000) and the wait source 22 (2800) -> 22; launch end
    # 1000 <= 2800 -> GPU-side idle [2800, 2900). 22: no recorded pred; 21 ended last (2000) -> idle
    # [2000, 2500). 21 starts the window.
    _, _, sec = one
    (cp,) = sec["critical_path"]
    assert cp["window_ns"] == 5400
    assert (cp["compute_ns"], cp["all_to_all_ns"], cp["other_comm_ns"]) == (1000 + 200 + 100 + 300 + 100 + 400 + 100,
                                                                            300, 0)
    assert (cp["launch_bound_ns"], cp["host_sync_ns"], cp["idle_ns"]) == (100 + 200 + 200, 1400 + 400, 500 + 100)
    # GPU idle per the breakdown = the idle parts of the path
    assert cp["gpu_idle_ns"] == cp["idle_assigned_ns"] == 2900


def test_stalls_golden(one):
    _, _, sec = one
    by = {}
    for st in sec["stalls"]:
        by.setdefault(st["cause"], []).append(st)
    assert sum(s["dur_ns"] for s in sec["stalls"]) == 5400 - 2200
    assert [s["dur_ns"] for s in by["host_sync"]] == [1400, 400]
    ev = by["host_sync"][0]["evidence"]
    assert (ev["sync_call"], ev["sync_ns"], ev["op"], ev["ops"], ev["resumed_by"]) == \
        ("cudaStreamSynchronize", 850, "aten::item", ["aten::item", "aten::_local_scalar_dense"], "expert0")
    assert (by["host_sync"][1]["evidence"]["sync_call"], by["host_sync"][1]["evidence"]["sync_ns"]) == \
        ("cudaMemcpyAsync", 600)
    (a2a,) = by["exposed_a2a"]
    assert (a2a["dur_ns"], a2a["evidence"]["hidden_ns"], a2a["start_ns"]) == (300, 0, 2500)
    (lb,) = by["launch_bound"]                 # same (layer, phase, stage): one group of 3 gaps
    assert (lb["dur_ns"], lb["evidence"]["gaps"], lb["evidence"]["max_gap_ns"]) == (500, 3, 200)
    (idle,) = by["idle"]
    assert (idle["dur_ns"], idle["evidence"]["gaps"]) == (600, 2)
    assert sec["collectives"] == [] and sec["stragglers"] == []


E = 1_700_000_000_000_000_000


def two_ranks():
    """Rank 0 clock = epoch - E; rank 1 clock = epoch - E + 5000. Collective A: rank 0 arrives at
    epoch E+1000, rank 1 at E+1300, both end at E+2000. Collective B: rank 1 arrives E+3000, rank 0
    E+3200, both end E+3500. Rank 0's A records uneven splits [100, 300]."""
    cpu, launches, gpu = [], [], []
    for r, d in ((0, 0), (1, 5000)):
        b = 100 * r   # ids per rank
        cpu += [dict(id=b + 1, rank=r, tid=1, start_ns=d, end_ns=d + 9000, name="ProfilerStep#1"),
                dict(id=b + 2, rank=r, tid=1, start_ns=d + 250, end_ns=d + 450, name="c10d::alltoall_base_",
                     kind="op", depth=1, parent_id=b + 1)]
        a_start = 1000 if r == 0 else 6300
        b_start, b_launch = (3200, 2900) if r == 0 else (8000, 7900)
        cpu.append(dict(id=b + 3, rank=r, tid=1, start_ns=b_launch - 10, end_ns=b_launch + 200,
                        name="c10d::alltoall_base_", kind="op", depth=1, parent_id=b + 1))
        launches += [dict(id=b + 11, rank=r, tid=1, start_ns=d + 100, end_ns=d + 200, correlation=1),
                     dict(id=b + 12, rank=r, tid=1, start_ns=d + 300, end_ns=d + 400, correlation=2, op_id=b + 2),
                     dict(id=b + 13, rank=r, tid=1, start_ns=b_launch, end_ns=b_launch + (100 if r == 0 else 50),
                          correlation=3, op_id=b + 3)]
        gpu += [dict(id=b + 21, rank=r, stream=7, start_ns=d + 500, end_ns=d + 1000, name="gemm", correlation=1,
                     launch_id=b + 11),
                dict(id=b + 22, rank=r, stream=20, start_ns=a_start, end_ns=d + 2000, name="ncclDevKernel_SendRecv",
                     correlation=2, launch_id=b + 12, op_id=b + 2,
                     coll_in_split=json.dumps([100, 300]) if r == 0 else None),
                dict(id=b + 23, rank=r, stream=20, start_ns=b_start, end_ns=d + 3500, name="ncclDevKernel_SendRecv",
                     correlation=3, launch_id=b + 13)]
    p = make_profile(cpu, launches, gpu, ranks=(0, 1))
    meta = p.meta.to_pydict()
    meta["clock_offset_ns"] = [E, E - 5000]
    p.meta = schema.from_pydict("meta", meta)
    return p


@pytest.fixture(scope="module")
def two():
    s, rows = prepared(two_ranks())
    return s, stalls.sections(s, {"steps": rows})


def test_coll_instances_golden(two):
    s, _ = two
    got = [(r["rank"], r["comm_kind"], r["grp"], r["idx"], r["arrival_ns"])
           for r in s.rows("SELECT * FROM coll_instances")]
    assert got == [(0, "all_to_all", "", 0, 1000), (0, "all_to_all", "", 1, 3200),
                   (1, "all_to_all", "", 0, 6300), (1, "all_to_all", "", 1, 8000)]


def test_collectives_matched(two):
    _, sec = two
    a, b = sec["collectives"]
    assert (a["index"], a["straggler"], a["skew_ns"], a["wait_ns"]) == (0, 1, 300, {"0": 300, "1": 0})
    assert a["start_ns"] == {"0": E + 1000, "1": E + 1300} and a["dur_ns"] == {"0": 1000, "1": 700}
    assert (b["index"], b["straggler"], b["skew_ns"], b["wait_ns"]) == (1, 0, 200, {"0": 0, "1": 200})
    assert sec["clock"]["max_abs_residual_ns"] == 0      # both collectives end together in epoch time
    strag = {x["rank"]: (x["times_last"], x["wait_caused_ns"]) for x in sec["stragglers"]}
    assert strag == {0: (1, 200), 1: (1, 300)}


def test_peer_wait_and_imbalance(two):
    # rank 0, window [500, 3500): A [1000, 2000) waits until rank 1 arrives (1300): peer_wait 300;
    # the rest 700 with splits max/mean 300/200 = 1.5: imbalance round(700 * (1 - 1/1.5)) = 233,
    # exposed 467. B [3200, 3500): rank 0 is last, exposed 300; before it [2000, 3200) the launch
    # (ends 3000) came after A ended: launch_bound 1200. Compute: gemm 500.
    # rank 1, window [5500, 8500): B' [8000, 8500) waits until 8200 (rank 0's arrival on rank 1's
    # clock): peer_wait 200, exposed 300; [7000, 8000) launch_bound; A' [6300, 7000) exposed 700;
    # [6000, 6300) idle (launched at 5400, nothing recorded held it); gemm 500.
    _, sec = two
    got = {}
    for st in sec["stalls"]:
        got[(st["rank"], st["cause"])] = got.get((st["rank"], st["cause"]), 0) + st["dur_ns"]
    assert got == {(0, "peer_wait"): 300, (0, "imbalance"): 233, (0, "exposed_a2a"): 467 + 300,
                   (0, "launch_bound"): 1200,
                   (1, "peer_wait"): 200, (1, "exposed_a2a"): 300 + 700, (1, "launch_bound"): 1000, (1, "idle"): 300}
    cp = {c["rank"]: c for c in sec["critical_path"]}
    assert (cp[0]["compute_ns"], cp[0]["all_to_all_ns"], cp[0]["peer_wait_ns"], cp[0]["imbalance_ns"]) == \
        (500, 1300, 300, 233)
    imb = next(s for s in sec["stalls"] if s["cause"] == "imbalance")
    assert imb["evidence"]["splits"] == [100, 300] and imb["evidence"]["max_over_mean"] == 1.5
    pw = next(s for s in sec["stalls"] if s["cause"] == "peer_wait" and s["rank"] == 1)
    assert (pw["evidence"]["straggler"], pw["evidence"]["skew_ns"]) == (0, 200)


def test_missing_offset_estimated_from_collectives():
    p = two_ranks()
    meta = p.meta.to_pydict()
    meta["clock_offset_ns"] = [E, None]
    p.meta = schema.from_pydict("meta", meta)
    s, _ = prepared(p)
    layers.comm_rows(s)
    out = collectives.match(s)
    # rank 1's ends (7000, 8500) vs rank 0's epoch ends (E+2000, E+3500): offset E - 5000
    assert out["clock"]["ranks"]["1"] == {"offset_ns": E - 5000, "method": "estimated from collective ends"}
    assert [c["skew_ns"] for c in out["collectives"]] == [300, 200]


def test_walk_empty_and_no_activity():
    assert critical_path.walk(critical_path.Acts(), 0, 100) == [(0, 100, None, "idle", [])]
    assert critical_path.walk(critical_path.Acts(), 100, 100) == []
    s, rows = prepared(make_profile())
    sec = stalls.sections(s, {"steps": rows})
    assert sec["critical_path"] == [] and sec["stalls"] == [] and sec["collectives"] == []


def test_imbalance_of_untrusted_splits():
    assert collectives.imbalance_of("[1, 1, 2]", None)["max_over_mean"] == 1.5
    for bad in ("not json", "{}", "[]", '["a"]', "[true]", "[0, 0]"):
        assert collectives.imbalance_of(bad, None) is None


def test_unaligned_clock_warns():
    # rank 1: no offset, local times not epoch, and no collective in common with rank 0 (a second
    # process group name on its collectives) -> offset unknown, a warning
    p = two_ranks()
    meta = p.meta.to_pydict()
    meta["clock_offset_ns"] = [E, None]
    p.meta = schema.from_pydict("meta", meta)
    g = p.gpu_activities.to_pydict()
    g["coll_pg"] = [("other" if r == 1 else None) for r in g["rank"]]
    p.gpu_activities = schema.from_pydict("gpu_activities", g)
    s, _ = prepared(p)
    layers.comm_rows(s)
    out = collectives.match(s)
    assert out["clock"]["ranks"]["1"]["method"] == "unknown (not aligned)"
    assert any("clock offset unknown" in w for w in out["warnings"])
    assert out["collectives"] == []


def test_text_lines(two):
    from traceview.reports import text_stalls
    _, sec = two
    lines = text_stalls.lines(sec)
    assert max(len(x) for x in lines) <= 100
    text = "\n".join(lines)
    assert "share of all windows: compute " in text
    # rank 0 window 3000: compute 500 -> 16.7%; rank 1 window 3000: compute 500 -> 16.7%
    assert "compute 16.7%" in text
    assert "rank 1 arrived last, skew 0.3 us" in text          # rank 0's peer wait at collective A
    i = lines.index("Stragglers (rank that arrived last at a collective)")
    # most wait caused first: rank 1 (300 ns imposed on rank 0), then rank 0 (200 ns)
    assert [x.split() for x in lines[i + 3:i + 5]] == [["1", "1", "2", "0.3", "us", "0.3", "us"],
                                                        ["0", "1", "2", "0.2", "us", "0.2", "us"]]


def test_window_ending_with_a_zero_length_activity():
    """A zero-length kernel (start = end) last in the step sets the window's end but runs in no
    segment: the path ends with idle from the last real activity to the window's end."""
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=10_000, name="ProfilerStep#1")]
    launches = [dict(id=11, tid=1, start_ns=100, end_ns=200, correlation=1),
                dict(id=12, tid=1, start_ns=300, end_ns=400, correlation=2)]
    gpu = [dict(id=21, start_ns=1000, end_ns=2000, name="gemm", stream=7, correlation=1, launch_id=11),
           dict(id=22, start_ns=3000, end_ns=3000, name="empty", stream=7, correlation=2, launch_id=12)]
    s, rows = prepared(make_profile(cpu=cpu, launches=launches, gpu=gpu))
    (row,) = rows
    assert row["step_time_ns"] == 2000 and row["compute_ns"] == 1000 and row["idle_ns"] == 1000
    (cp,) = stalls.sections(s, {"steps": rows})["critical_path"]
    assert (cp["window_ns"], cp["compute_ns"], cp["idle_ns"]) == (2000, 1000, 1000)
