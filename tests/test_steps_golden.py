"""A golden test per engine step, Perfetto style: the input rows written here, the step run on
exactly them (steps it requires are given as rows, `given=`), the expected rows computed by hand in
the comments. Canonical tables come from a hand-made profile (helpers.make_profile)."""
import json

import pyarrow as pa
from helpers import make_profile
from steps_golden import run_step

import traceview.flops.steps  # noqa: F401  (declares the FLOPs' Python steps)


def T(rows: list[dict], **types) -> pa.Table:
    """Rows as an Arrow table; a column's type from its first non-null value (string when all null)."""
    def infer(name):
        if name in types:
            return types[name]
        for r in rows:
            v = r.get(name)
            if v is not None:
                return {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}[type(v)]
        return pa.string()
    names = list(rows[0])
    return pa.Table.from_pylist(rows, schema=pa.schema([(n, infer(n)) for n in names]))


def window(rank, step, start, end, name="w", activities=1):
    return {"rank": rank, "step": step, "name": name, "start_ns": start, "end_ns": end, "activities": activities}


def step_range(rank, step, start, end, range_id=0, tid=1, name="s"):
    return {"rank": rank, "step": step, "range_id": range_id, "tid": tid, "cpu_start_ns": start,
            "cpu_end_ns": end, "name": name}


def origin(id, tid=1, start=None, end=None, op_id=None, launch_name=None, rank=0):
    return {"id": id, "rank": rank, "tid": tid, "origin_start_ns": start, "origin_end_ns": end, "op_id": op_id,
            "launch_name": launch_name}


ORIGIN_TYPES = dict(tid=pa.int64(), origin_start_ns=pa.int64(), origin_end_ns=pa.int64(), op_id=pa.int64())


# ---- activity_origin ---------------------------------------------------------------------------

def test_activity_origin():
    prof = make_profile(
        cpu=[{"id": 3, "tid": 2, "kind": "op", "name": "aten::mm", "start_ns": 50, "end_ns": 80}],
        launches=[{"id": 10, "tid": 5, "start_ns": 100, "end_ns": 110, "correlation": 1, "op_id": 7},
                  {"id": 11, "tid": 6, "start_ns": 200, "end_ns": 210, "correlation": 2}],
        gpu=[{"id": 1, "start_ns": 1000, "end_ns": 1100, "name": "k", "launch_id": 10},
             {"id": 2, "start_ns": 1000, "end_ns": 1100, "name": "k", "op_id": 3},
             {"id": 3, "start_ns": 1000, "end_ns": 1100, "name": "k"},
             {"id": 4, "start_ns": 1000, "end_ns": 1100, "name": "k", "launch_id": 11, "op_id": 3}])
    got = run_step("activity_origin", prof, order_by="id")
    assert got == [
        # 1: its launch call: thread 5, [100, 110], the launch's op 7
        {"id": 1, "rank": 0, "tid": 5, "origin_start_ns": 100, "origin_end_ns": 110, "op_id": 7,
         "launch_name": "cudaLaunchKernel"},
        # 2: no launch call: its op 3 (thread 2, [50, 80])
        {"id": 2, "rank": 0, "tid": 2, "origin_start_ns": 50, "origin_end_ns": 80, "op_id": 3, "launch_name": None},
        # 3: neither: no origin
        {"id": 3, "rank": 0, "tid": None, "origin_start_ns": None, "origin_end_ns": None, "op_id": None,
         "launch_name": None},
        # 4: the launch call's time and thread; the launch names no op, so the activity's own op 3
        {"id": 4, "rank": 0, "tid": 6, "origin_start_ns": 200, "origin_end_ns": 210, "op_id": 3,
         "launch_name": "cudaLaunchKernel"},
    ]


def test_activity_origin_of_a_dangling_launch_id():
    # launch_id 99 names no launch call: the activity's origin is its op, as with no launch_id at all
    prof = make_profile(
        cpu=[{"id": 3, "tid": 2, "kind": "op", "name": "aten::mm", "start_ns": 50, "end_ns": 80},
             {"id": 4, "tid": 2, "kind": "op", "name": "aten::add", "start_ns": 90, "end_ns": 95}],
        launches=[{"id": 10, "tid": 5, "start_ns": 100, "end_ns": 110, "correlation": 1}],
        gpu=[{"id": 1, "start_ns": 1000, "end_ns": 1100, "name": "k", "launch_id": 99, "op_id": 3},
             {"id": 2, "start_ns": 1000, "end_ns": 1100, "name": "k", "launch_id": 10, "op_id": 4}])
    got = run_step("activity_origin", prof, order_by="id")
    assert got == [
        {"id": 1, "rank": 0, "tid": 2, "origin_start_ns": 50, "origin_end_ns": 80, "op_id": 3, "launch_name": None},
        # a linked launch: its thread and time, not its op's
        {"id": 2, "rank": 0, "tid": 5, "origin_start_ns": 100, "origin_end_ns": 110, "op_id": 4,
         "launch_name": "cudaLaunchKernel"},
    ]


# ---- activity_class ----------------------------------------------------------------------------

def test_activity_class():
    prof = make_profile(
        cpu=[{"id": 1, "tid": 1, "kind": "op", "name": "c10d::allreduce_", "start_ns": 100, "end_ns": 300},
             {"id": 2, "tid": 1, "kind": "op", "name": "nccl:all_reduce", "start_ns": 150, "end_ns": 250},
             {"id": 3, "tid": 1, "kind": "annotation", "name": "MPI_Send", "domain": "MPI", "start_ns": 500,
              "end_ns": 600},
             {"id": 4, "tid": 1, "kind": "annotation", "name": "forward", "start_ns": 700, "end_ns": 800}],
        gpu=[{"id": 11, "stream": 7, "start_ns": 1000, "end_ns": 1010, "name": "gemm"},
             {"id": 12, "stream": 7, "start_ns": 1020, "end_ns": 1030, "kind": "memcpy", "name": "Memcpy DtoH"},
             {"id": 13, "stream": 7, "start_ns": 1040, "end_ns": 1050, "kind": "memset", "name": "Memset"},
             {"id": 14, "stream": 8, "start_ns": 1060, "end_ns": 1070, "name": "ncclDevKernel_AllReduce"},
             {"id": 15, "stream": 7, "start_ns": 1080, "end_ns": 1090, "name": "gemm2"},
             {"id": 16, "stream": 7, "start_ns": 1100, "end_ns": 1110, "name": "k", "coll_name": "allreduce"},
             {"id": 17, "stream": 7, "start_ns": 1120, "end_ns": 1130, "name": "k"}])
    given = {"activity_origin": T([origin(11, 1, 160, 170), origin(12, 1, 510, 520), origin(13, 1, 710, 720),
                                   origin(14, 2, 160, 170), origin(15, 1, 290, 310), origin(16), origin(17)],
                                  **ORIGIN_TYPES)}
    got = run_step("activity_class", prof, given=given, order_by="id",
                   params={"comm_op_regex": r"^(c10d::|nccl:)", "comm_kernel_regex": r"^nccl"})
    # collective ranges on thread 1: c10d::allreduce_ [100, 300] with nccl:all_reduce [150, 250] inside
    # (one island [100, 300], named by its first range), MPI_Send [500, 600] (domain MPI)
    # (each activity's kind and name stay gpu_activities': its class needs them, its row does not)
    want = [
        (11, 7, 1000, 1010, "comm", "c10d::allreduce_"),   # a gemm kernel launched at [160, 170] inside
        (12, 7, 1020, 1030, "comm", "MPI_Send"),           # a memcpy, [510, 520] in the MPI call
        (13, 7, 1040, 1050, "memory", None),               # a memset, [710, 720]: ends after 600
        (14, 8, 1060, 1070, "comm", None),                 # ncclDevKernel_AllReduce: by its name (thread 2)
        (15, 7, 1080, 1090, "compute", None),              # a kernel, [290, 310] ends after 300
        (16, 7, 1100, 1110, "comm", None),                 # collective metadata
        (17, 7, 1120, 1130, "compute", None),
    ]
    assert got == [{"id": i, "rank": 0, "device": 0, "stream": s, "start_ns": a, "end_ns": b,
                    "class": c, "coll_range": r} for i, s, a, b, c, r in want]


def test_activity_class_rules_apply_to_every_range_and_activity_of_a_name():
    # the regexes are matched once per distinct name: each name's verdict reaches all its rows
    prof = make_profile(
        cpu=[{"id": 1, "tid": 1, "kind": "op", "name": "c10d::broadcast_", "start_ns": 100, "end_ns": 200},
             {"id": 2, "tid": 2, "kind": "op", "name": "c10d::broadcast_", "start_ns": 300, "end_ns": 400},
             {"id": 3, "tid": 1, "kind": "op", "name": "aten::mm", "start_ns": 500, "end_ns": 600}],
        gpu=[{"id": 11, "stream": 7, "start_ns": 1000, "end_ns": 1010, "name": "gemm"},
             {"id": 12, "stream": 7, "start_ns": 1020, "end_ns": 1030, "name": "gemm"},
             {"id": 13, "stream": 7, "start_ns": 1040, "end_ns": 1050, "name": "gemm"},
             {"id": 14, "stream": 8, "start_ns": 1060, "end_ns": 1070, "name": "ncclKernel_Broadcast"},
             {"id": 15, "stream": 8, "start_ns": 1080, "end_ns": 1090, "name": "ncclKernel_Broadcast"}])
    given = {"activity_origin": T([origin(11, 1, 110, 120), origin(12, 2, 310, 320), origin(13, 1, 510, 520),
                                   origin(14, 1, 510, 520), origin(15)], **ORIGIN_TYPES)}
    got = run_step("activity_class", prof, given=given, order_by="id",
                   params={"comm_op_regex": r"^c10d::", "comm_kernel_regex": r"^nccl"})
    assert [(r["id"], r["class"], r["coll_range"]) for r in got] == [
        (11, "comm", "c10d::broadcast_"),      # launched in the broadcast on thread 1
        (12, "comm", "c10d::broadcast_"),      # ... and in the one of the same name on thread 2
        (13, "compute", None),                 # launched in aten::mm
        (14, "comm", None),                    # by its name, launched in aten::mm
        (15, "comm", None),                    # by its name, no origin
    ]


def test_activity_class_islands_of_touching_tied_and_empty_collective_ranges():
    # collective ranges on thread 1 (ids in brackets):
    #   a[1] [100,200) and b[2] [200,300) touch: one island [100,300), named by a (the earliest start)
    #   c[3] [400,400) is empty and lies in no other: no island
    #   e[4] [500,550) and d[5] [500,600) start together: island [500,600), named by e (the lower id);
    #   f[6] [600,600), empty, at its end: in it, and names nothing (it starts later)
    #   g[7] [700,700), empty, and h[8] [700,750) start together: island [700,750), named by g (lower id)
    names = "abcedfgh"
    spans = [(100, 200), (200, 300), (400, 400), (500, 550), (500, 600), (600, 600), (700, 700), (700, 750)]
    prof = make_profile(
        cpu=[{"id": i + 1, "tid": 1, "kind": "op", "name": f"c10d::{n}", "start_ns": s, "end_ns": e}
             for i, (n, (s, e)) in enumerate(zip(names, spans, strict=True))],
        gpu=[{"id": i, "stream": 7, "start_ns": 1000 + 10 * i, "end_ns": 1005 + 10 * i, "name": "k"}
             for i in range(11, 18)])
    given = {"activity_origin": T([origin(11, 1, 150, 160), origin(12, 1, 250, 300), origin(13, 1, 400, 400),
                                   origin(14, 1, 520, 530), origin(15, 1, 600, 600), origin(16, 1, 710, 720),
                                   origin(17, 1, 290, 310)], **ORIGIN_TYPES)}
    got = run_step("activity_class", prof, given=given, order_by="id",
                   params={"comm_op_regex": r"^c10d::", "comm_kernel_regex": r"^nccl"})
    assert [(r["id"], r["class"], r["coll_range"]) for r in got] == [
        (11, "comm", "c10d::a"),      # [150,160] in [100,300)
        (12, "comm", "c10d::a"),      # [250,300] ends at the island's end
        (13, "compute", None),        # [400,400]: c is no island
        (14, "comm", "c10d::e"),      # [520,530] in [500,600)
        (15, "comm", "c10d::e"),      # [600,600] at its end
        (16, "comm", "c10d::g"),      # [710,720] in [700,750)
        (17, "compute", None),        # [290,310] ends after 300
    ]


# ---- step_ranges, step_windows, whole_windows ----------------------------------------------------

def test_step_ranges():
    def r(id, name, start, end, depth=0, rank=0):
        return {"id": id, "rank": rank, "tid": 1, "kind": "annotation", "name": name, "start_ns": start,
                "end_ns": end, "depth": depth}
    prof = make_profile(cpu=[
        r(1, "ProfilerStep#3", 0, 100), r(2, "ProfilerStep#3", 0, 100, depth=1),   # a duplicate, deeper
        r(3, "ProfilerStep#4", 100, 200), r(4, "ProfilerStep#5", 120, 150, depth=1),  # 4 nested in 3
        r(5, "ProfilerStep#x", 300, 400),                                         # no number: no match
        r(8, "ProfilerStep#4", 500, 600),                                         # step 4 again, later
        r(7, "ProfilerStep#3", 0, 50, rank=1)], ranks=(0, 1))
    got = run_step("step_ranges", prof, params={"step_regex": r"^ProfilerStep#(\d+)$"}, order_by="rank, step")
    # kept: the outermost of each nest (1 over its duplicate 2, 3 over 4), one range per step number
    # (the earliest: 3, not 8); rank 1 on its own
    assert got == [step_range(0, 3, 0, 100, range_id=1, name="ProfilerStep#3"),
                   step_range(0, 4, 100, 200, range_id=3, name="ProfilerStep#4"),
                   step_range(1, 3, 0, 50, range_id=7, name="ProfilerStep#3")]


def test_step_windows():
    prof = make_profile(gpu=[{"id": 1, "start_ns": 1000, "end_ns": 1100}, {"id": 2, "start_ns": 1050, "end_ns": 1300},
                             {"id": 3, "start_ns": 1400, "end_ns": 1500}, {"id": 4, "start_ns": 2000, "end_ns": 2100},
                             {"id": 5, "rank": 1, "start_ns": 10, "end_ns": 20}], ranks=(0, 1))
    given = {"step_ranges": T([step_range(0, 1, 0, 100, name="S1"), step_range(0, 2, 100, 200, name="S2"),
                               step_range(0, 3, 200, 300, name="S3")]),
             "activity_origin": T([origin(1, start=10), origin(2, start=50), origin(3, start=100),
                                   origin(4, start=300), origin(5, start=10, rank=1)], **ORIGIN_TYPES)}
    got = run_step("step_windows", prof, given=given, order_by="rank, step")
    # launched in [0, 100): 1 and 2 -> GPU [1000, 1300]; in [100, 200): 3 (at its start) -> [1400, 1500];
    # step 3 launched nothing (4 at 300 is past its end): no window; rank 1 has no step ranges
    assert got == [window(0, 1, 1000, 1300, "S1", 2), window(0, 2, 1400, 1500, "S2", 1)]


def test_whole_windows():
    prof = make_profile(gpu=[{"id": 1, "start_ns": 100, "end_ns": 200}, {"id": 2, "start_ns": 150, "end_ns": 400},
                             {"id": 3, "rank": 1, "start_ns": 50, "end_ns": 60}], ranks=(0, 1))
    got = run_step("whole_windows", prof, order_by="rank")
    assert got == [window(0, 0, 100, 400, "whole trace", 2), window(1, 0, 50, 60, "whole trace", 1)]


# ---- segments, activity_spans, breakdown ---------------------------------------------------------

CLASSED = [  # id, class, start, end (window [0, 100])
    (1, "compute", 10, 50), (2, "comm", 30, 70), (3, "memory", 60, 120), (4, "compute", -10, 5),
    (5, "compute", 200, 300)]


def classed():
    return T([{"id": i, "rank": 0, "device": 0, "stream": 7, "start_ns": s, "end_ns": e, "kind": "kernel",
               "name": "k", "class": c, "coll_range": None} for i, c, s, e in CLASSED])


# boundary points in [0, 100] after clipping: 0 (+c), 5 (-c), 10 (+c), 30 (+m), 50 (-c), 60 (+x), 70 (-m),
# 100 (-x; the memory activity clipped at the window's end); activity 5 lies outside
SEGMENTS = [  # t, seg, t_end, c, m, x
    (0, 0, 5, 1, 0, 0), (5, 1, 10, 0, 0, 0), (10, 2, 30, 1, 0, 0), (30, 3, 50, 1, 1, 0),
    (50, 4, 60, 0, 1, 0), (60, 5, 70, 0, 1, 1), (70, 6, 100, 0, 0, 1), (100, 7, None, 0, 0, 0)]


def segment_rows(step=1, rows=SEGMENTS):
    return [{"rank": 0, "step": step, "t": t, "seg": s, "t_end": te, "c": c, "m": m, "x": x}
            for t, s, te, c, m, x in rows]


def test_segments():
    got = run_step("segments", given={"windows": T([window(0, 1, 0, 100)]), "activity_class": classed()},
                   order_by="rank, step, seg")
    assert got == segment_rows()


def test_segments_of_several_windows_and_ranks():
    # rank 0: windows step 1 [0, 100] and step 2 [80, 150] (overlapping); rank 1: step 1 [0, 50]
    windows = T([window(0, 1, 0, 100), window(0, 2, 80, 150), window(1, 1, 0, 50)])
    acts = T([{"id": i, "rank": r, "device": 0, "stream": 7, "start_ns": a, "end_ns": b, "kind": "kernel",
               "name": "k", "class": c, "coll_range": None}
              for i, r, c, a, b in [(1, 0, "compute", 10, 90), (2, 0, "comm", 90, 120),
                                    (3, 1, "memory", 20, 60), (4, 1, "compute", 0, 10)]])
    got = run_step("segments", given={"windows": windows, "activity_class": acts}, order_by="rank, step, seg")
    # (0, 1): 1 clipped to [10, 90], 2 to [90, 100]; points 0, 10, 90, 100
    # (0, 2): 1 clipped to [80, 90], 2 to [90, 120]; points 80, 90, 120, 150 (the window's end)
    # (1, 1): 4 at [0, 10], 3 clipped to [20, 50]; points 0, 10, 20, 50
    # each window's points numbered from 0, its last one without an end, its counts from 0
    want = [(0, 1, 0, 0, 10, 0, 0, 0), (0, 1, 10, 1, 90, 1, 0, 0), (0, 1, 90, 2, 100, 0, 1, 0),
            (0, 1, 100, 3, None, 0, 0, 0),
            (0, 2, 80, 0, 90, 1, 0, 0), (0, 2, 90, 1, 120, 0, 1, 0), (0, 2, 120, 2, 150, 0, 0, 0),
            (0, 2, 150, 3, None, 0, 0, 0),
            (1, 1, 0, 0, 10, 1, 0, 0), (1, 1, 10, 1, 20, 0, 0, 0), (1, 1, 20, 2, 50, 0, 0, 1),
            (1, 1, 50, 3, None, 0, 0, 0)]
    assert got == [{"rank": r, "step": st, "t": t, "seg": sg, "t_end": te, "c": c, "m": m, "x": x}
                   for r, st, t, sg, te, c, m, x in want]


def test_segments_of_many_windows():
    # more than 8 windows (the running sum then runs over all windows in one order): rank 0, windows
    # k = 0..9 at [100k, 100k + 50], a compute kernel at [100k + 10, 100k + 20] in each, and a comm
    # kernel [340, 410] that ends after window 3 and starts before window 4
    windows = T([window(0, k, 100 * k, 100 * k + 50) for k in range(10)])
    acts = [(k, "compute", 100 * k + 10, 100 * k + 20) for k in range(10)] + [(99, "comm", 340, 410)]
    got = run_step("segments", given={"windows": windows, "activity_class": T(
        [{"id": i, "rank": 0, "device": 0, "stream": 7, "start_ns": a, "end_ns": b, "kind": "kernel", "name": "k",
          "class": c, "coll_range": None} for i, c, a, b in acts])}, order_by="rank, step, seg")
    want = []
    for k in range(10):   # points 100k, +10 (compute starts), +20 (ends), +50 (the window's end)
        want += [(k, 100 * k, 0, 100 * k + 10, 0, 0), (k, 100 * k + 10, 1, 100 * k + 20, 1, 0),
                 (k, 100 * k + 20, 2, 100 * k + 50, 0, 0), (k, 100 * k + 50, 3, None, 0, 0)]
    # window 3 also has the comm kernel's clipped [340, 350]: points 300, 310, 320, 340, 350
    want[12:16] = [(3, 300, 0, 310, 0, 0), (3, 310, 1, 320, 1, 0), (3, 320, 2, 340, 0, 0), (3, 340, 3, 350, 0, 1),
                   (3, 350, 4, None, 0, 0)]
    # window 4 has it clipped to [400, 410], under the compute kernel [410, 420] from 410 on: no overlap
    want[17:21] = [(4, 400, 0, 410, 0, 1), (4, 410, 1, 420, 1, 0), (4, 420, 2, 450, 0, 0), (4, 450, 3, None, 0, 0)]
    assert got == [{"rank": 0, "step": k, "t": t, "seg": sg, "t_end": te, "c": c, "m": m, "x": 0}
                   for k, t, sg, te, c, m in want]


def test_activity_spans():
    given = {"windows": T([window(0, 1, 0, 100)]), "activity_class": classed(),
             "segments": T(segment_rows(), t_end=pa.int64(), c=pa.int32(), m=pa.int32(), x=pa.int32())}
    got = run_step("activity_spans", given=given, order_by="id")
    # each activity clipped to [0, 100], with the segments [i0, i1) between its clipped ends
    assert got == [
        {"rank": 0, "step": 1, "id": 1, "class": "compute", "s": 10, "e": 50, "i0": 2, "i1": 4},
        {"rank": 0, "step": 1, "id": 2, "class": "comm", "s": 30, "e": 70, "i0": 3, "i1": 6},
        {"rank": 0, "step": 1, "id": 3, "class": "memory", "s": 60, "e": 100, "i0": 5, "i1": 7},
        {"rank": 0, "step": 1, "id": 4, "class": "compute", "s": 0, "e": 5, "i0": 0, "i1": 1},
    ]


def test_breakdown():
    segs = segment_rows() + segment_rows(2, [(200, 0, 300, 0, 0, 0), (300, 1, None, 0, 0, 0)])
    given = {"windows": T([window(0, 1, 0, 100), window(0, 2, 200, 300)]),
             "segments": T(segs, t_end=pa.int64(), c=pa.int32(), m=pa.int32(), x=pa.int32())}
    got = run_step("breakdown", given=given, order_by="rank, step")
    # step 1: compute [0,5] + [10,30] + [30,50] = 45; exposed comm [50,60] + [60,70] = 20 (comm with
    # memory is still exposed comm); overlapped [30,50] = 20; exposed memory [70,100] = 30; idle [5,10] = 5;
    # comm 20 + 20 = 40; 45 + 20 + 30 + 5 = 100. Step 2: one empty segment, all idle.
    assert got == [
        {"rank": 0, "step": 1, "start_ns": 0, "step_time_ns": 100, "compute_ns": 45, "exposed_comm_ns": 20,
         "overlapped_comm_ns": 20, "exposed_memory_ns": 30, "idle_ns": 5, "comm_ns": 40},
        {"rank": 0, "step": 2, "start_ns": 200, "step_time_ns": 100, "compute_ns": 0, "exposed_comm_ns": 0,
         "overlapped_comm_ns": 0, "exposed_memory_ns": 0, "idle_ns": 100, "comm_ns": 0},
    ]


# ---- comm_ops, coll_instances ---------------------------------------------------------------------

def test_comm_ops():
    prof = make_profile(
        cpu=[{"id": 1, "tid": 1, "kind": "op", "name": "c10d::allreduce_", "start_ns": 0, "end_ns": 100},
             {"id": 2, "tid": 1, "kind": "op", "name": "record_param_comms", "parent_id": 1, "start_ns": 10,
              "end_ns": 90},
             {"id": 3, "tid": 1, "kind": "op", "name": "nccl:all_reduce", "parent_id": 2, "start_ns": 20,
              "end_ns": 80},
             {"id": 10, "tid": 1, "kind": "annotation", "name": "moe_dispatch", "start_ns": 200, "end_ns": 300},
             {"id": 11, "tid": 1, "kind": "op", "name": "some_op", "parent_id": 10, "start_ns": 210, "end_ns": 220}],
        gpu=[{"id": 101, "start_ns": 1000, "end_ns": 1100, "name": "ncclDevKernel_AllReduce_Sum_bf16",
              "coll_in_nelems": 1000, "coll_dtype": "BFloat16"},
             {"id": 102, "start_ns": 1200, "end_ns": 1300, "name": "deep_ep::intranode::dispatch<8>"},
             {"id": 103, "kind": "memcpy", "start_ns": 1400, "end_ns": 1500, "name": "Memcpy DtoD", "bytes": 4096,
              "coll_name": "all_to_allv"},
             {"id": 104, "start_ns": 1600, "end_ns": 1700, "name": "gemm"},
             {"id": 105, "start_ns": 1800, "end_ns": 1900, "name": "ncclKernel_SendRecv"}])
    cls = [(101, "comm", "c10d::allreduce_"), (102, "comm", None), (103, "comm", None), (104, "compute", None),
           (105, "comm", None)]
    g = {r["id"]: r for r in prof.gpu_activities.to_pylist()}
    given = {"activity_class": T([{"id": i, "rank": 0, "device": 0, "stream": 7, "start_ns": g[i]["start_ns"],
                                   "end_ns": g[i]["end_ns"], "kind": g[i]["kind"], "name": g[i]["name"], "class": c,
                                   "coll_range": r} for i, c, r in cls]),
             "activity_origin": T([origin(101, op_id=3), origin(102, op_id=11), origin(103), origin(104),
                                   origin(105)], **ORIGIN_TYPES)}
    got = run_step("comm_ops", prof, given=given, order_by="id")
    assert got == [
        # launched by nccl:all_reduce < record_param_comms < c10d::allreduce_, the collective range
        # (coll_range) outermost: op c1; kind from that range's name; 1000 bf16 elements = 2000 bytes
        {"id": 101, "rank": 0, "start_ns": 1000, "end_ns": 1100, "name": "ncclDevKernel_AllReduce_Sum_bf16",
         "comm_kind": "all_reduce", "bytes": 2000, "op_key": "c1"},
        # DeepEP: all_to_all by the kernel name; no collective range: the innermost annotation (10)
        # around its launch, as its dispatch role; no size recorded
        {"id": 102, "rank": 0, "start_ns": 1200, "end_ns": 1300, "name": "deep_ep::intranode::dispatch<8>",
         "comm_kind": "all_to_all", "bytes": None, "op_key": "a10:dispatch"},
        # the copy's own collective metadata (all_to_allv) and bytes; no launching range: itself
        {"id": 103, "rank": 0, "start_ns": 1400, "end_ns": 1500, "name": "Memcpy DtoD",
         "comm_kind": "all_to_all", "bytes": 4096, "op_key": "k103"},
        # (104 is compute: not here) an NCCL kernel with no range: send_recv by its name, one op itself
        {"id": 105, "rank": 0, "start_ns": 1800, "end_ns": 1900, "name": "ncclKernel_SendRecv",
         "comm_kind": "send_recv", "bytes": None, "op_key": "k105"},
    ]


def test_coll_instances():
    prof = make_profile(
        cpu=[{"id": 9, "tid": 1, "kind": "op", "name": "c10d::allreduce_", "start_ns": 0, "end_ns": 50,
              "coll_pg": "1", "coll_group_size": 8, "coll_in_split": "[1, 2]"}],
        gpu=[{"id": 1, "stream": 7, "start_ns": 100, "end_ns": 200, "coll_pg": "0", "coll_group_size": 2},
             {"id": 2, "stream": 7, "start_ns": 50, "end_ns": 80},
             {"id": 3, "stream": 8, "start_ns": 300, "end_ns": 400},
             {"id": 4, "stream": 9, "start_ns": 20, "end_ns": 90, "coll_pg": "0", "coll_out_split": "[3]"}])
    ops = [(1, "all_reduce", 100, 200, 10), (2, "all_reduce", 50, 80, 10), (3, "all_to_all", 300, 400, None),
           (4, "all_reduce", 20, 90, 10)]
    given = {
        "comm_ops": T([{"id": i, "rank": 0, "start_ns": s, "end_ns": e, "name": "k", "comm_kind": k, "bytes": b,
                        "op_key": f"k{i}"} for i, k, s, e, b in ops], bytes=pa.int64()),
        "activity_origin": T([origin(1, start=10), origin(2, start=20, op_id=9), origin(4, start=15)],
                             **ORIGIN_TYPES),
        "activity_attribution": T([{"id": 1, "rank": 0, "step": 1, "layer": 0, "phase": "forward",
                                    "stage": "attention"},
                                   {"id": 2, "rank": 0, "step": 1, "layer": None, "phase": "other", "stage": "other"}],
                                  layer=pa.int64())}
    got = run_step("coll_instances", prof, given=given, order_by="rank, comm_kind, grp, idx")

    def row(i, kind, grp, idx, start, end, nbytes, stream, ins=None, outs=None, size=None, step=None, layer=None,
            phase=None, stage=None):
        return {"id": i, "rank": 0, "comm_kind": kind, "grp": grp, "idx": idx, "arrival_ns": start, "end_ns": end,
                "bytes": nbytes, "stream": stream, "in_split": ins, "out_split": outs, "group_size": size,
                "step": step, "layer": layer, "phase": phase, "stage": stage}
    assert got == [
        # group '0' (the activities' coll_pg): issued at 10 (1) and 15 (4): 1 first though 4 ran first on the GPU
        row(1, "all_reduce", "0", 0, 100, 200, 10, 7, size=2, step=1, layer=0, phase="forward", stage="attention"),
        row(4, "all_reduce", "0", 1, 20, 90, 10, 9, outs="[3]"),
        # group '1' and its splits and size from the launching collective range (op 9)
        row(2, "all_reduce", "1", 0, 50, 80, 10, 7, ins="[1, 2]", size=8, step=1, phase="other", stage="other"),
        # no group recorded: ''; no origin: ordered by its GPU start
        row(3, "all_to_all", "", 0, 300, 400, None, 8),
    ]


# ---- critical path: cp_host_syncs, cp_preds ------------------------------------------------------

def test_cp_host_syncs():
    prof = make_profile(
        cpu=[{"id": 3, "tid": 1, "kind": "op", "name": "aten::to", "start_ns": 90, "end_ns": 250},
             {"id": 4, "tid": 1, "kind": "op", "name": "aten::_to_copy", "parent_id": 3, "start_ns": 95,
              "end_ns": 240},
             {"id": 5, "tid": 1, "kind": "op", "name": "aten::copy_", "parent_id": 4, "start_ns": 98, "end_ns": 230},
             {"id": 7, "tid": 1, "kind": "annotation", "name": "ProfilerStep#1", "start_ns": 0, "end_ns": 2000},
             {"id": 6, "tid": 1, "kind": "op", "name": "aten::item", "parent_id": 7, "start_ns": 990,
              "end_ns": 1110}],
        launches=[{"id": 1, "tid": 1, "start_ns": 100, "end_ns": 200, "name": "cudaStreamSynchronize",
                   "correlation": 1, "op_id": 5},
                  {"id": 2, "tid": 1, "start_ns": 300, "end_ns": 400, "name": "cudaMemcpyAsync", "correlation": 2},
                  {"id": 3, "tid": 1, "start_ns": 500, "end_ns": 600, "name": "cudaMemcpyAsync", "correlation": 3},
                  {"id": 4, "tid": 1, "start_ns": 700, "end_ns": 710, "name": "cudaLaunchKernel", "correlation": 99},
                  {"id": 5, "tid": 1, "start_ns": 800, "end_ns": 810, "name": "cudaMemcpy", "correlation": 5},
                  {"id": 6, "tid": 1, "start_ns": 1000, "end_ns": 1100, "name": "cudaDeviceSynchronize",
                   "correlation": 6, "op_id": 6}],
        gpu=[{"id": 21, "kind": "memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "start_ns": 350,
              "end_ns": 390, "launch_id": 2},
             {"id": 22, "kind": "memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "start_ns": 520, "end_ns": 550,
              "launch_id": 3},
             {"id": 23, "kind": "memcpy", "name": "Memcpy HtoD", "start_ns": 805, "end_ns": 900, "launch_id": 5}],
        syncs=[{"id": 1, "kind": "event_sync", "start_ns": 700, "end_ns": 710, "correlation": 99}])
    got = run_step("cp_host_syncs", prof, order_by="rank, tid, end_ns, id")

    def row(i, start, end, name, op=None, parent=None, grand=None):
        return {"id": i, "rank": 0, "tid": 1, "start_ns": start, "end_ns": end, "dur_ns": end - start, "name": name,
                "op": op, "parent_op": parent, "grandparent_op": grand}
    assert got == [
        row(1, 100, 200, "cudaStreamSynchronize", "aten::copy_", "aten::_to_copy", "aten::to"),   # by name
        row(2, 300, 400, "cudaMemcpyAsync"),       # returned after its pageable copy ended (390 <= 400)
        # 3: async to pinned memory: not blocking; 5: returned (810) before its copy ended (900)
        row(4, 700, 710, "cudaLaunchKernel"),      # an event_sync record names it
        row(6, 1000, 1100, "cudaDeviceSynchronize", "aten::item"),   # parent is an annotation: no parent op
    ]


def test_cp_preds():
    acts = [(1, 1, 100, 200), (2, 1, 250, 300), (3, 2, 150, 400), (4, 1, 2000, 2100)]   # id, stream, start, end
    prof = make_profile(
        launches=[{"id": 50, "tid": 9, "start_ns": 24, "end_ns": 26, "name": "cudaStreamWaitEvent", "correlation": 88}],
        syncs=[{"id": 500, "kind": "stream_wait_event", "start_ns": 27, "end_ns": 28, "stream": 1, "event_stream": 2,
                "correlation": 88}],
        # (each activity's kind and name: the profile's, not activity_class's)
        gpu=[{"id": i, "stream": s, "start_ns": a, "end_ns": b, "name": f"k{i}"} for i, s, a, b in acts])
    given = {
        "activity_class": T([{"id": i, "rank": 0, "device": 0, "stream": s, "start_ns": a, "end_ns": b,
                              "class": "compute", "coll_range": None}
                             for i, s, a, b in acts]),
        "activity_origin": T([origin(1, 1, 10, 12, launch_name="cudaLaunchKernel"),
                              origin(2, 1, 30, 32, launch_name="cudaLaunchKernel"),
                              origin(3, 1, 20, 22, op_id=77),                    # its op's time, no launch call
                              origin(4, 1, 1500, 1502, launch_name="cudaLaunchKernel")], **ORIGIN_TYPES),
        "cp_host_syncs": T([{"id": 900, "rank": 0, "tid": 1, "start_ns": 22, "end_ns": 25, "dur_ns": 3,
                             "name": "cudaStreamSynchronize", "op": None, "parent_op": None, "grandparent_op": None}]),
        "windows": T([window(0, 1, 0, 1000)])}
    got = run_step("cp_preds", prof, given=given, order_by="rank, step, end_ns, id")

    def row(i, stream, start, end, o_start, o_end, prev=None, prev_end=None, src=None, src_end=None, sync=None,
            sync_end=None):
        return {"rank": 0, "step": 1, "id": i, "stream": stream, "start_ns": start, "end_ns": end, "class": "compute",
                "kind": "kernel", "name": f"k{i}", "tid": 1, "origin_start_ns": o_start, "origin_end_ns": o_end,
                "prev_id": prev, "prev_end_ns": prev_end, "wait_src_id": src, "wait_src_end_ns": src_end,
                "sync_id": sync, "sync_end_ns": sync_end}
    # the wait (stream 1 waits for stream 2) is cut at its launch call's start, 24: the first activity
    # launched on stream 1 after it is 2 (launched at 30), the last launched on stream 2 before it is 3
    # (at 20). The host sync on thread 1 ended at 25: the last before 2's launch (30); 1 (10) and 3 (20)
    # were launched before it ended. 4 runs outside the window.
    assert got == [
        row(1, 1, 100, 200, 10, 12),
        row(2, 1, 250, 300, 30, 32, prev=1, prev_end=200, src=3, src_end=400, sync=900, sync_end=25),
        row(3, 2, 150, 400, 20, None),          # no launch call: origin_end_ns unknown
    ]


# ---- activity_attribution (range_context given as rows) -----------------------------------------

def test_activity_attribution():
    def r(id, tid, kind, name, start, end, parent=None, depth=0, seq=None):
        return {"id": id, "tid": tid, "kind": kind, "name": name, "start_ns": start, "end_ns": end,
                "parent_id": parent, "depth": depth, "seq": seq}
    prof = make_profile(cpu=[
        r(1, 1, "annotation", "ProfilerStep#1", 0, 1000),
        r(2, 1, "annotation", "layer_3.attention", 10, 400, 1, 1),
        r(3, 1, "op", "aten::mm", 20, 30, 2, 2, seq=42),                        # forward op, autograd seq 42
        r(4, 2, "op", "autograd::engine::evaluate_function: MmBackward0", 500, 600, seq=42),
        r(5, 2, "op", "aten::mm", 510, 520, 4, 1),
        r(6, 1, "annotation", "moe", 700, 900, 1, 1),                          # a stage, no layer number
        r(7, 3, "op", "nccl:all_to_all", 750, 760),                            # on a comm thread
        r(8, 1, "op", "aten::add", 1100, 1200)])                               # after the step
    ctx = {  # id -> (tid, layer, stage, anchor, names_stage): what range_context says
        1: (1, None, None, None, False), 2: (1, 3, "attention", None, True), 3: (1, 3, "attention", None, False),
        4: (2, None, None, 4, False), 5: (2, None, None, 4, False), 6: (1, None, "moe", None, True),
        7: (3, None, None, None, False), 8: (1, None, None, None, False)}
    given = {
        "range_context": T([{"id": i, "rank": 0, "tid": t, "layer": layer, "stage": stage, "phase": None,
                             "anchor": a, "names_stage": n, "head": None, "layer_inferred": False}
                            for i, (t, layer, stage, a, n) in ctx.items()],
                           layer=pa.int32(), anchor=pa.int64(), head=pa.int64()),
        "step_ranges": T([step_range(0, 1, 0, 1000, range_id=1, name="ProfilerStep#1")]),
        "activity_origin": T([origin(11, 1, 25, 26, op_id=3), origin(12, 2, 515, 516, op_id=5),
                              origin(13, 3, 755, 756, op_id=7), origin(14, 1, 1150, 1151, op_id=8),
                              origin(15, None)], **ORIGIN_TYPES)}
    got = run_step("activity_attribution", prof, given=given, order_by="id")

    # is_backward is `anchor IS NOT NULL OR phase = 'backward'` in SQL's three-valued logic: with no
    # anchor and no phase named (null) it is null, not false (readers take null as not backward)
    def row(i, step, layer, phase, stage, region, bwd=None, linked=False, cross=False):
        return {"id": i, "rank": 0, "step": step, "layer": layer, "phase": phase, "stage": stage, "region": region,
                "is_backward": bwd, "linked": linked, "layer_inferred": False, "cross_thread": cross,
                "cross_ambiguous": False}
    assert got == [
        # launched in layer_3.attention: forward work of layer 3
        row(11, 1, 3, "forward", "attention", "layer"),
        # inside MmBackward0 (anchor 4, seq 42): linked to the forward op 3 of seq 42, its layer and stage
        row(12, 1, 3, "backward", "attention", "layer", bwd=True, linked=True),
        # the comm thread names nothing at 755; the training thread (the step's, 1) has `moe` open: its stage
        row(13, 1, None, "other", "moe", "layer_unknown", cross=True),
        # after the step range: no step; its own thread names nothing (other threads only are asked)
        row(14, None, None, "other", "other", "outside"),
        # no launching op at all
        row(15, None, None, "other", "other", "unattributed"),
    ]


def test_activity_attribution_fwd_id_before_seq():
    # a backward node's forward op is its fwd_id where it has one, else the first forward op with its
    # sequence number; two nodes of sequence number 7 here: node 5 names op 4 by fwd_id, node 7 none
    def r(id, tid, kind, name, start, end, parent=None, seq=None, fwd_id=None):
        return {"id": id, "tid": tid, "kind": kind, "name": name, "start_ns": start, "end_ns": end,
                "parent_id": parent, "seq": seq, "fwd_id": fwd_id}
    prof = make_profile(cpu=[
        r(1, 1, "annotation", "layer_1", 0, 100), r(2, 1, "op", "aten::mm", 10, 20, 1, seq=7),
        r(3, 1, "annotation", "layer_2", 200, 300), r(4, 1, "op", "aten::mm", 210, 220, 3, seq=8),
        r(5, 2, "op", "MmBackward0", 400, 500, seq=7, fwd_id=4), r(6, 2, "op", "aten::mm", 410, 420, 5),
        r(7, 2, "op", "MmBackward0", 600, 700, seq=7), r(8, 2, "op", "aten::mm", 610, 620, 7)])
    ctx = {  # id -> (tid, layer, stage, anchor)
        1: (1, 1, "attention", None), 2: (1, 1, "attention", None), 3: (1, 2, "experts", None),
        4: (1, 2, "experts", None), 5: (2, None, None, 5), 6: (2, None, None, 5), 7: (2, None, None, 7),
        8: (2, None, None, 7)}
    given = {
        "range_context": T([{"id": i, "rank": 0, "tid": t, "layer": layer, "stage": stage, "phase": None,
                             "anchor": a, "names_stage": stage is not None, "head": None, "layer_inferred": False}
                            for i, (t, layer, stage, a) in ctx.items()],
                           layer=pa.int32(), stage=pa.string(), anchor=pa.int64(), head=pa.int64()),
        "step_ranges": T([step_range(1, 1, 0, 1000)]),    # another rank's: rank 0 is one step, 0
        "activity_origin": T([origin(21, 2, 415, 416, op_id=6), origin(22, 2, 615, 616, op_id=8)], **ORIGIN_TYPES)}
    got = run_step("activity_attribution", prof, given=given, order_by="id")
    common = {"rank": 0, "step": 0, "phase": "backward", "region": "layer", "is_backward": True, "linked": True,
              "layer_inferred": False, "cross_thread": False, "cross_ambiguous": False}
    assert got == [
        {"id": 21, **common, "layer": 2, "stage": "experts"},     # node 5: fwd_id 4 (layer_2), not seq 7's op 2
        {"id": 22, **common, "layer": 1, "stage": "attention"},   # node 7: seq 7's forward op, 2 (layer_1)
    ]


def test_activity_attribution_reads_a_range_without_a_context_row_as_without_context():
    # range_context has no row for a range that inherits nothing (range_tree): op 1 here. Backward
    # node 2 (seq 9, no fwd_id) still finds op 1 as its forward op by sequence number, and op 1's own
    # work reads as launched outside any annotation: the same rows as with op 1's empty row given
    def r(id, tid, kind, name, start, end, parent=None, seq=None):
        return {"id": id, "tid": tid, "kind": kind, "name": name, "start_ns": start, "end_ns": end,
                "parent_id": parent, "seq": seq}
    prof = make_profile(cpu=[
        r(1, 1, "op", "aten::mm", 10, 20, seq=9), r(2, 2, "op", "MmBackward0", 400, 500, seq=9),
        r(3, 2, "op", "aten::mm", 410, 420, 2)])

    def ctx(ids):
        rows = {1: (1, None), 2: (2, 2), 3: (2, 2)}   # id -> (tid, anchor)
        return T([{"id": i, "rank": 0, "tid": rows[i][0], "layer": None, "stage": None, "phase": None,
                   "anchor": rows[i][1], "names_stage": False, "head": None, "layer_inferred": False} for i in ids],
                 layer=pa.int32(), stage=pa.string(), phase=pa.string(), anchor=pa.int64(), head=pa.int64())
    given = {"step_ranges": T([step_range(1, 1, 0, 1000)]),    # another rank's: rank 0 is one step, 0
             "activity_origin": T([origin(21, 2, 415, 416, op_id=3), origin(22, 1, 15, 16, op_id=1)], **ORIGIN_TYPES)}
    sparse = run_step("activity_attribution", prof, given={**given, "range_context": ctx([2, 3])}, order_by="id")
    dense = run_step("activity_attribution", prof, given={**given, "range_context": ctx([1, 2, 3])}, order_by="id")
    common = {"rank": 0, "step": 0, "layer": None, "stage": "other", "region": "outside", "layer_inferred": False,
              "cross_thread": False, "cross_ambiguous": False}
    assert sparse == dense == [
        # inside MmBackward0 (anchor 2): linked to op 1 (seq 9), which names nothing
        {"id": 21, **common, "phase": "backward", "is_backward": True, "linked": True},
        # op 1's own kernel: no anchor, no phase (is_backward null, as in test_activity_attribution)
        {"id": 22, **common, "phase": "other", "is_backward": None, "linked": False},
    ]


# ---- FLOPs ---------------------------------------------------------------------------------------

BF = json.dumps(["c10::BFloat16", "c10::BFloat16"])
MM = "[[2, 3], [3, 4]]"


def op(id, name, start=0, end=10, parent=None, dims=None, types=None, rank=0, tid=1):
    return {"id": id, "rank": rank, "tid": tid, "kind": "op", "name": name, "start_ns": start, "end_ns": end,
            "parent_id": parent, "input_dims": dims, "input_types": types}


def test_flops_shapes():
    prof = make_profile(cpu=[
        op(1, "aten::mm", dims=MM, types=BF), op(2, "aten::mm", dims=MM, types=BF),   # one signature
        op(3, "aten::mm"),                                                            # no shapes
        op(4, "aten::add", dims="[[2, 3], [2, 3]]", types=BF),                        # no formula: absent
        op(5, "aten::mm", dims=MM, types=BF, rank=1),
        op(6, "aten::linear", dims="[[4, 8, 16], [32, 16], [32]]", types=json.dumps(["float"] * 3)),
        op(7, "aten::bmm", dims="[[2, 3]]")], ranks=(0, 1))                           # one input only
    got = run_step("flops_shapes", prof)
    sig = ("rank", "name", "input_dims", "concrete_inputs", "input_types", "flops", "dtype")
    assert got == [dict(zip(sig, r, strict=True)) for r in [
        (0, "aten::bmm", "[[2, 3]]", "", "", None, None),
        (0, "aten::linear", "[[4, 8, 16], [32, 16], [32]]", "", json.dumps(["float"] * 3), 2 * 32 * 16 * 32, "fp32"),
        (0, "aten::mm", "", "", "", None, None),
        (0, "aten::mm", MM, "", BF, 2 * 2 * 3 * 4, "bf16"),                           # 2 M K N = 48
        (1, "aten::mm", MM, "", BF, 48.0, "bf16")]]


def shapes(*rows):
    return T([{"rank": 0, "name": n, "input_dims": d, "concrete_inputs": "", "input_types": "", "flops": f,
               "dtype": "bf16" if f else None} for n, d, f in rows], flops=pa.float64())


def test_flops_ops():
    prof = make_profile(cpu=[
        {"id": 1, "tid": 1, "kind": "annotation", "name": "ProfilerStep#1", "start_ns": 0, "end_ns": 1000},
        op(2, "aten::linear", 10, 100, 1, "L"), op(3, "aten::addmm", 20, 90, 2, "A"),
        op(7, "aten::mm", 30, 40, 3, "M"),                                  # two levels under the linear
        op(4, "aten::mm", 110, 200, 1), op(5, "aten::mm", 120, 190, 4, "M"),  # under an op without shapes
        op(6, "aten::add", 300, 310, 1, "X")])
    given = {"flops_shapes": shapes(("aten::linear", "L", 1000.0), ("aten::addmm", "A", 1000.0),
                                    ("aten::mm", "M", 90.0), ("aten::mm", "", None))}
    got = run_step("flops_ops", prof, given=given, order_by="id")

    def row(i, name, start, end, flops, counted):
        return {"id": i, "rank": 0, "tid": 1, "name": name, "start_ns": start, "end_ns": end, "flops": flops,
                "dtype": "bf16" if flops else None, "counted": counted}
    assert got == [
        row(2, "aten::linear", 10, 100, 1000.0, True),     # outermost with FLOPs
        row(3, "aten::addmm", 20, 90, 1000.0, False),      # inside the linear
        row(4, "aten::mm", 110, 200, None, False),         # no shapes: no FLOPs, not counted
        row(5, "aten::mm", 120, 190, 90.0, True),          # its parent has no FLOPs: it counts
        row(7, "aten::mm", 30, 40, 90.0, False),           # inside addmm inside linear
    ]                                                      # 6 (aten::add) has no formula: absent


def flops_op(i, flops, counted, start=0, rank=0, name="aten::mm"):
    return {"id": i, "rank": rank, "tid": 1, "name": name, "start_ns": start, "end_ns": start + 5, "flops": flops,
            "dtype": "bf16", "counted": counted}


def test_flops_kernels():
    prof = make_profile(
        cpu=[{"id": 1, "tid": 1, "name": "ProfilerStep#1", "start_ns": 0, "end_ns": 1000},
             op(2, "aten::linear", parent=1), op(3, "aten::addmm", parent=2), op(4, "aten::mm", parent=1),
             op(5, "aten::mm", parent=4)],
        gpu=[{"id": 10, "start_ns": 0, "end_ns": 300, "op_id": 3},
             {"id": 11, "start_ns": 300, "end_ns": 400, "op_id": 2},
             {"id": 12, "kind": "memcpy", "start_ns": 400, "end_ns": 500, "op_id": 3},
             {"id": 13, "start_ns": 500, "end_ns": 500, "op_id": 5},
             {"id": 14, "start_ns": 600, "end_ns": 600, "op_id": 5},
             {"id": 15, "start_ns": 700, "end_ns": 800, "op_id": 4}, {"id": 16, "start_ns": 800, "end_ns": 900}])
    given = {"flops_ops": T([flops_op(2, 1000.0, True), flops_op(3, 1000.0, False), flops_op(4, None, False),
                             flops_op(5, 90.0, True)], flops=pa.float64())}
    got = run_step("flops_kernels", prof, given=given, order_by="id")
    # op 2's 1000 over its kernels 10 (300 ns, launched by its child addmm) and 11 (100 ns): 750 and 250;
    # the memcpy 12 gets none. Op 5's 90 over two 0 ns kernels: 45 each. 15 (under op 4, no FLOPs up its
    # chain) and 16 (no op) are absent.
    assert got == [{"id": 10, "rank": 0, "op_id": 2, "flops": 750.0}, {"id": 11, "rank": 0, "op_id": 2, "flops": 250.0},
                   {"id": 13, "rank": 0, "op_id": 5, "flops": 45.0}, {"id": 14, "rank": 0, "op_id": 5, "flops": 45.0}]


STEP_RANGES = [step_range(0, 1, 0, 100), step_range(0, 2, 100, 200), step_range(1, 4, 0, 50)]


def test_flops_step_ops():
    ops = T([flops_op(2, 1000.0, True, start=10, name="aten::linear"), flops_op(3, 1000.0, False, start=20),
             flops_op(5, 90.0, True, start=100), flops_op(8, 7.0, True, start=250),
             flops_op(9, 5.0, True, start=10, rank=1)], flops=pa.float64())
    given = {"flops_ops": ops, "step_ranges": T(STEP_RANGES)}
    got = run_step("flops_step_ops", given=given, params={"no_step_ranges": False}, order_by="rank, step, id")

    def row(rank, step, i, flops, name="aten::mm"):
        return {"rank": rank, "step": step, "id": i, "name": name, "flops": flops}
    # counted ops by their start: 2 (10) in [0, 100); 5 (100) in [100, 200); 8 (250) in no step; 3 is not
    # counted; rank 1's 9 (10) in its own step 4
    assert got == [row(0, 1, 2, 1000.0, "aten::linear"), row(0, 2, 5, 90.0), row(1, 4, 9, 5.0)]
    # a job without step ranges: every counted op, step 0
    got = run_step("flops_step_ops", given=given, params={"no_step_ranges": True}, order_by="rank, step, id")
    assert got == [row(0, 0, 2, 1000.0, "aten::linear"), row(0, 0, 5, 90.0), row(0, 0, 8, 7.0), row(1, 0, 9, 5.0)]


def test_flops_steps():
    rows = [(0, 1, 2, 1000.0), (0, 1, 3, 24.0), (0, 2, 5, 90.0), (1, 4, 9, 5.0)]
    given = {"flops_step_ops": T([{"rank": r, "step": s, "id": i, "name": "aten::mm", "flops": f}
                                  for r, s, i, f in rows])}
    got = run_step("flops_steps", given=given, order_by="rank, step")
    assert got == [{"rank": 0, "step": 1, "flops": 1024.0, "ops": 2}, {"rank": 0, "step": 2, "flops": 90.0, "ops": 1},
                   {"rank": 1, "step": 4, "flops": 5.0, "ops": 1}]


def test_flops_steps_sum_exactly_whatever_the_row_order():
    """1e16 + 1 - 1e16 is 0.0 summed left to right in floats and 1.0 exactly: the step gives 1.0 in
    every order of its rows (so one process and the workers of a mapped job give the same float)."""
    for terms in ([1e16, 1.0, -1e16], [1.0, 1e16, -1e16], [-1e16, 1e16, 1.0]):
        given = {"flops_step_ops": T([{"rank": 0, "step": 1, "id": i, "name": "aten::mm", "flops": f}
                                      for i, f in enumerate(terms)])}
        assert run_step("flops_steps", given=given) == [{"rank": 0, "step": 1, "flops": 1.0, "ops": 3}]


def test_flops_embedding_tokens():
    emb = "aten::embedding"
    prof = make_profile(cpu=[
        op(1, emb, 5, dims="[[100, 16], [4, 8], [], [], []]"),        # [B, T] = [4, 8]: 32 tokens
        op(2, emb, 50, dims="[[100, 16], [6]]"),                      # a flat index list of 6
        op(3, emb, 60), op(4, emb, 70, dims="[[100, 16]]"), op(5, emb, 80, dims="not json"),   # no count
        op(6, "aten::mm", 90, dims=MM),
        op(7, emb, 5, dims="[[100, 16], [2, 3, 4]]", rank=1)], ranks=(0, 1))
    got = run_step("flops_embedding_tokens", prof, order_by="rank, id")
    assert got == [{"rank": 0, "id": 1, "start_ns": 5, "tokens": 32}, {"rank": 0, "id": 2, "start_ns": 50, "tokens": 6},
                   {"rank": 1, "id": 7, "start_ns": 5, "tokens": 24}]


def test_flops_shaped_ops():
    prof = make_profile(cpu=[
        op(1, "aten::mm", dims=MM), op(2, "aten::mm"), op(3, "aten::add", dims="[[2], [2]]"),   # rank 0: 2 of 3
        {**op(4, "fwd"), "kind": "user"},                                                  # not an op
        op(5, "aten::mm", rank=1)], ranks=(0, 1, 2))                # rank 1: one op, unshaped; rank 2: none
    assert run_step("flops_shaped_ops", prof) == [{"rank": 0, "ops": 3, "shaped": 2},
                                                  {"rank": 1, "ops": 1, "shaped": 0}]


def test_flops_step_tokens():
    calls = [(0, 1, 5, 32), (0, 2, 50, 6), (0, 3, 150, 32), (0, 4, 300, 100), (1, 7, 5, 24)]
    given = {"flops_embedding_tokens": T([{"rank": r, "id": i, "start_ns": s, "tokens": t} for r, i, s, t in calls]),
             "step_ranges": T([step_range(0, 1, 0, 100), step_range(0, 2, 100, 200), step_range(1, 1, 0, 100)])}
    got = run_step("flops_step_tokens", given=given, params={"no_step_ranges": False}, order_by="rank, step")
    # step 1: 32 + 6; step 2: 32; the call at 300 is in no step; rank 1: 24
    assert got == [{"rank": 0, "step": 1, "tokens": 38}, {"rank": 0, "step": 2, "tokens": 32},
                   {"rank": 1, "step": 1, "tokens": 24}]
    got = run_step("flops_step_tokens", given=given, params={"no_step_ranges": True}, order_by="rank, step")
    # without step ranges one call is one step's batch: the largest
    assert got == [{"rank": 0, "step": 0, "tokens": 100}, {"rank": 1, "step": 0, "tokens": 24}]


def test_flops_groups():
    kernels = [(10, 0, 750.0), (11, 0, 250.0), (13, 0, 45.0), (14, 1, 45.0), (15, 0, 8.0)]
    attr = [(10, 0, 1, 0, "forward", "attention"), (11, 0, 2, 0, "forward", "attention"),
            (13, 0, 1, None, "other", "other"), (14, 1, 1, None, "other", "other"),
            (15, 0, None, 0, "forward", "attention"),          # outside every step
            (16, 0, 1, 1, "forward", "moe")]                   # no FLOPs
    given = {"flops_kernels": T([{"id": i, "rank": r, "op_id": 1, "flops": f} for i, r, f in kernels]),
             "activity_attribution": T([{"id": i, "rank": r, "step": s, "layer": layer, "phase": p, "stage": st}
                                        for i, r, s, layer, p, st in attr], step=pa.int64(), layer=pa.int64())}
    got = run_step("flops_groups", given=given)
    # layer 0 forward attention: 750 + 250 (steps 1 and 2; 15 is outside the steps); the unlayered
    # 'other' group, both ranks: 45 + 45; groups without kernel FLOPs are absent; layers first, null last
    assert got == [{"layer": 0, "phase": "forward", "stage": "attention", "flops": 1000.0},
                   {"layer": None, "phase": "other", "stage": "other", "flops": 90.0}]


def test_every_declared_step_has_a_golden_test():
    """Each step of the package has a test named after it, here or in test_steps_golden_engine.py
    (`test_<step>` or `test_<step>_<what it checks>`)."""
    import test_steps_golden_engine as engine_goldens

    from traceview.engine import steps
    ours = {n for n, st in steps.all_steps().items()          # the package's steps (tests declare toy ones)
            if st.run is None or st.run.__module__.startswith("traceview.")}
    tests = [n for n, f in {**vars(engine_goldens), **globals()}.items() if n.startswith("test_") and callable(f)]
    missing = sorted(n for n in ours if not any(t == f"test_{n}" or t.startswith(f"test_{n}_") for t in tests))
    assert not missing, f"steps without a golden test: {missing}"


# kernel names whose families tests/test_diff_families.py states
GEMM = "volta_s884gemm_fp16_128x128_ldg8_f2f_nn"                                   # gemm:tensorop fp16
SPLITK = ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, float, "
          "__nv_bfloat16, __nv_bfloat16, true, false, false>"
          "(cublasLt::cublasSplitKParams<float>)")   # gemm:splitk-reduce
FLASH = ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, "
         "false, true>(flash::Flash_fwd_params)")                                   # attention bf16
ELEM = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")


def kernel_rows(rows):
    return T([{"id": i, "rank": r, "op_id": o, "flops": f} for i, r, o, f in rows], flops=pa.float64())


INFO = [(0, SPLITK, "gemm:splitk-reduce bf16", None, None), (0, FLASH, "attention bf16", "attention", "bf16"),
        (0, GEMM, "gemm:tensorop fp16", "gemm", "fp16"), (1, ELEM, "elementwise bf16", None, None)]


def test_flops_kernel_info():
    prof = make_profile(gpu=[{"id": 1, "name": GEMM, "start_ns": 0, "end_ns": 1},
                             {"id": 2, "name": SPLITK, "start_ns": 0, "end_ns": 1},
                             {"id": 3, "name": FLASH, "start_ns": 0, "end_ns": 1},
                             {"id": 4, "rank": 1, "name": ELEM, "start_ns": 0, "end_ns": 1},
                             {"id": 5, "name": GEMM, "start_ns": 0, "end_ns": 1}], ranks=(0, 1))
    given = {"flops_kernels": kernel_rows([(1, 0, 5, 1.0), (2, 0, 5, 1.0), (3, 0, 6, 1.0), (4, 1, 7, 1.0),
                                           (5, 0, 6, 1.0)])}
    got = run_step("flops_kernel_info", prof, given=given)
    # one row per distinct (rank, name), by rank and name; the split-K reduce is a GEMM family but not a
    # compute kernel (no category, no math type), nor is the elementwise add
    assert got == [dict(zip(("rank", "name", "family", "category", "kdtype"), r, strict=True)) for r in INFO]


def test_flops_op_kernels():
    prof = make_profile(gpu=[{"id": 1, "name": GEMM, "start_ns": 0, "end_ns": 300},
                             {"id": 2, "name": SPLITK, "start_ns": 300, "end_ns": 400},
                             {"id": 3, "name": FLASH, "start_ns": 500, "end_ns": 400}])     # reversed: 0 ns
    given = {"flops_kernels": kernel_rows([(1, 0, 5, 75.0), (2, 0, 5, 25.0), (3, 0, 6, 10.0)]),
             "flops_kernel_info": T([dict(zip(("rank", "name", "family", "category", "kdtype"), r, strict=True))
                                     for r in INFO])}
    got = run_step("flops_op_kernels", prof, given=given, order_by="id")
    cols = ("id", "rank", "op_id", "name", "family", "category", "kdtype", "dur_ns", "flops")
    assert got == [dict(zip(cols, r, strict=True)) for r in [
        (1, 0, 5, GEMM, "gemm:tensorop fp16", "gemm", "fp16", 300, 75.0),
        (2, 0, 5, SPLITK, "gemm:splitk-reduce bf16", None, None, 100, 25.0),
        (3, 0, 6, FLASH, "attention bf16", "attention", "bf16", 0, 10.0)]]


def op_kernel(i, op_id, category, kdtype, dur, flops=1.0, family="f"):
    return {"id": i, "rank": 0, "op_id": op_id, "name": f"k{i}", "family": family, "category": category,
            "kdtype": kdtype, "dur_ns": dur, "flops": flops}


SDPA = "aten::_scaled_dot_product_flash_attention"
F32 = json.dumps(["float", "float"])


def test_flops_op_inputs():
    prof = make_profile(cpu=[op(5, "aten::mm", types=BF), op(6, SDPA), op(7, "aten::mm", types=F32)])
    given = {
        "flops_step_ops": T([{"rank": 0, "step": s, "id": i, "name": n, "flops": f}
                             for s, i, n, f in [(1, 5, "aten::mm", 100.0), (1, 6, SDPA, 10.0),
                                                (2, 7, "aten::mm", 8.0)]]),
        "flops_op_kernels": T([op_kernel(1, 5, "gemm", "fp16", 300), op_kernel(2, 5, None, None, 500),
                               op_kernel(8, 5, "gemm", "tf32", 300), op_kernel(3, 6, "attention", "bf16", 0),
                               op_kernel(4, 7, None, None, 50)])}
    got = run_step("flops_op_inputs", prof, given=given, order_by="rank, step, id")
    cols = ("rank", "step", "id", "name", "flops", "input_types", "kernel_precision")
    # op 5: its longest compute kernels are 1 and 8 (300 ns; the 500 ns split-K reduce is no compute
    # kernel): the lower id, 1, says fp16. Op 6: its one attention kernel, bf16. Op 7: no compute kernel.
    assert got == [dict(zip(cols, r, strict=True)) for r in [
        (0, 1, 5, "aten::mm", 100.0, BF, "fp16"), (0, 1, 6, SDPA, 10.0, None, "bf16"),
        (0, 2, 7, "aten::mm", 8.0, F32, None)]]


def test_flops_op_precision():
    rows = [(1, 5, "aten::mm", 100.0, BF, "fp16"), (1, 6, SDPA, 10.0, None, "bf16"),
            (2, 7, "aten::mm", 8.0, F32, "tf32"),
            (2, 9, "aten::_scaled_mm", 4.0, BF, None), (2, 10, "aten::conv2d", 2.0, None, None)]
    given = {"flops_op_inputs": T([{"rank": 0, "step": s, "id": i, "name": n, "flops": f, "input_types": t,
                                    "kernel_precision": k} for s, i, n, f, t, k in rows])}
    got = run_step("flops_op_precision", given=given, order_by="rank, step, id")
    cols = ("rank", "step", "id", "name", "flops", "precision", "precision_source", "kind", "kernel_precision")
    assert got == [dict(zip(cols, r, strict=True)) for r in [
        (0, 1, 5, "aten::mm", 100.0, "bf16", "inputs", "gemm", "fp16"),      # bf16 inputs before a fp16 kernel name
        (0, 1, 6, SDPA, 10.0, "bf16", "kernel", "attention", "bf16"),        # no input types: the kernel
        (0, 2, 7, "aten::mm", 8.0, "tf32", "kernel", "gemm", "tf32"),        # TF32 math the fp32 inputs cannot show
        (0, 2, 9, "aten::_scaled_mm", 4.0, "fp8", "op", "gemm", None),        # the op itself is fp8
        (0, 2, 10, "aten::conv2d", 2.0, "bf16", "assumed", "conv", None)]]   # nothing says: assumed bf16


def test_flops_compute_kernels():
    given = {
        "flops_op_kernels": T([op_kernel(1, 5, "gemm", "fp16", 300, 60.0, "g"),
                               op_kernel(2, 5, None, None, 100, 20.0, "r"),
                               op_kernel(8, 5, "gemm", "fp16", 100, 20.0, "g"),
                               op_kernel(3, 6, "attention", "bf16", 0, 5.0, "a"),
                               op_kernel(4, 6, "attention", "bf16", 0, 5.0, "a"),
                               op_kernel(5, 7, None, None, 50, 8.0, "e"),
                               op_kernel(6, 11, "gemm", "bf16", 10, 1.0, "g")]),
        "flops_op_precision": T([{"rank": 0, "step": 1, "id": i, "name": "x", "flops": f, "precision": p,
                                  "precision_source": "inputs", "kind": k, "kernel_precision": None}
                                 for i, f, p, k in [(5, 100.0, "bf16", "gemm"), (6, 10.0, "bf16", "attention"),
                                                    (7, 8.0, "tf32", "gemm")]])}
    got = run_step("flops_compute_kernels", given=given, order_by="id, op_id")
    cols = ("id", "rank", "op_id", "family", "kind", "precision", "dur_ns", "flops")
    # op 5's 100 over its compute kernels 1 (300 ns) and 8 (100 ns): 75 and 25 (the reduce 2 drops out);
    # op 6's 10 over two 0 ns kernels: 5 each; op 7 has no compute kernel: its kernel keeps its 8;
    # op 11 is in no step: absent
    assert got == [dict(zip(cols, r, strict=True)) for r in [
        (1, 0, 5, "g", "gemm", "bf16", 300, 75.0), (3, 0, 6, "a", "attention", "bf16", 0, 5.0),
        (4, 0, 6, "a", "attention", "bf16", 0, 5.0), (5, 0, 7, "e", "gemm", "tf32", 50, 8.0),
        (8, 0, 5, "g", "gemm", "bf16", 100, 25.0)]]
