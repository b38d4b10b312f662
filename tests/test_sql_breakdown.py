"""Golden tests of the named SQL queries on a hand-made profile (numbers computed by hand)."""
from helpers import make_profile

from traceview.analysis import breakdown
from traceview.engine.pipeline import build
from traceview.engine.session import Session


def golden_profile():
    # thread 1: ProfilerStep#1 [0, 1000); collective ops around some launches
    cpu = [
        dict(id=1, tid=1, start_ns=0, end_ns=1000, name="ProfilerStep#1"),
        dict(id=2, tid=1, start_ns=25, end_ns=40, name="c10d::allreduce_", kind="op", depth=1, parent_id=1),
        dict(id=3, tid=1, start_ns=55, end_ns=70, name="c10d::alltoall_base_", kind="op", depth=1, parent_id=1),
        dict(id=4, tid=1, start_ns=2000, end_ns=3000, name="ProfilerStep#2"),
    ]
    launches = [
        dict(id=11, tid=1, start_ns=10, end_ns=12, correlation=1),
        dict(id=12, tid=1, start_ns=20, end_ns=22, correlation=2),
        dict(id=13, tid=1, start_ns=30, end_ns=32, correlation=3, op_id=2),
        dict(id=14, tid=1, start_ns=50, end_ns=52, correlation=4, name="cudaMemcpyAsync"),
        dict(id=15, tid=1, start_ns=60, end_ns=62, correlation=5, name="cudaMemcpyAsync", op_id=3),
        dict(id=16, tid=1, start_ns=80, end_ns=82, correlation=6),
        dict(id=17, tid=1, start_ns=1500, end_ns=1502, correlation=7),   # outside both steps
        dict(id=18, tid=1, start_ns=2100, end_ns=2102, correlation=8),   # step 2
        dict(id=19, tid=1, start_ns=2200, end_ns=2202, correlation=9),   # step 2, DeepEP by name
    ]
    gpu = [
        dict(id=21, stream=7, start_ns=100, end_ns=300, name="sm90_xmma_gemm_bf16", correlation=1, launch_id=11),
        dict(id=22, stream=7, start_ns=300, end_ns=400, name="vectorized_elementwise", correlation=2, launch_id=12),
        dict(id=23, stream=20, start_ns=250, end_ns=500, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
             correlation=3, launch_id=13),
        dict(id=24, stream=7, start_ns=600, end_ns=650, kind="memcpy", name="Memcpy HtoD (Pinned -> Device)",
             correlation=4, launch_id=14),
        dict(id=25, stream=20, start_ns=640, end_ns=700, kind="memcpy", name="Memcpy DtoD (Device -> Device)",
             correlation=5, launch_id=15),
        dict(id=26, stream=7, start_ns=800, end_ns=900, name="<img src=x>", correlation=6, launch_id=16),
        dict(id=27, stream=7, start_ns=1600, end_ns=1700, name="late_kernel", correlation=7, launch_id=17),
        dict(id=28, stream=7, start_ns=2300, end_ns=2400, name="gemm", correlation=8, launch_id=18),
        dict(id=29, stream=9, start_ns=2350, end_ns=2500, name="void dpsk::ep::internode::dispatch<8>(int)",
             correlation=9, launch_id=19),
    ]
    return make_profile(cpu, launches, gpu)


def run(profile, **kw):
    s = Session(profile)
    breakdown.prepare(s, breakdown.Options(**kw))
    return s


def test_activity_class_golden():
    s = run(golden_profile())
    got = {r["id"]: r["class"] for r in s.rows("SELECT id, class FROM activity_class")}
    assert got == {21: "compute", 22: "compute", 23: "comm", 24: "memory", 25: "comm",
                   26: "compute", 27: "compute", 28: "compute", 29: "comm"}


def test_comm_regex_extends_patterns():
    s = run(golden_profile(), comm_regex=[r"^vectorized_elementwise$"])
    got = {r["id"]: r["class"] for r in s.rows("SELECT id, class FROM activity_class")}
    assert got[22] == "comm"


def test_step_windows_golden():
    s = run(golden_profile())
    rows = s.rows("SELECT rank, step, start_ns, end_ns, activities FROM windows ORDER BY step")
    assert rows == [dict(rank=0, step=1, start_ns=100, end_ns=900, activities=6),
                    dict(rank=0, step=2, start_ns=2300, end_ns=2500, activities=2)]


def test_breakdown_golden():
    s = run(golden_profile())
    rows = breakdown.step_rows(s)
    # step 1, window [100, 900) = 800 ns; segments worked out by hand:
    # [100,250) compute | [250,400) compute+comm | [400,500) comm | [500,600) idle
    # [600,640) memcpy | [640,650) memcpy+comm | [650,700) comm | [700,800) idle | [800,900) compute
    assert rows[0] == dict(rank=0, step=1, start_ns=100, step_time_ns=800, compute_ns=400,
                           exposed_comm_ns=160, overlapped_comm_ns=150, exposed_memory_ns=40,
                           idle_ns=200, comm_ns=310)
    # step 2, window [2300, 2500): gemm [2300,2400) overlaps DeepEP [2350,2500)
    assert rows[1] == dict(rank=0, step=2, start_ns=2300, step_time_ns=200, compute_ns=100,
                           exposed_comm_ns=100, overlapped_comm_ns=50, exposed_memory_ns=0,
                           idle_ns=0, comm_ns=150)


def test_whole_trace_window_when_no_steps():
    p = golden_profile()
    s = run(p, step_regex=r"^no_such_step_(\d+)$")
    rows = breakdown.step_rows(s)
    assert len(rows) == 1 and rows[0]["step_time_ns"] == 2500 - 100


def test_step_regex_names_other_ranges():
    s = run(golden_profile(), step_regex=r"^c10d::(allreduce)_$")
    # the group is not a number: steps are numbered by time order
    assert s.rows("SELECT step, cpu_start_ns FROM step_ranges") == [dict(step=1, cpu_start_ns=25)]


def test_summary_is_the_median_step_with_its_own_parts():
    rows = [dict(rank=0, step=i, step_time_ns=t, compute_ns=c, exposed_comm_ns=e, overlapped_comm_ns=o,
                 exposed_memory_ns=0, idle_ns=t - c - e, comm_ns=e + o)
            for i, (t, c, e, o) in enumerate([(100, 50, 10, 30), (300, 200, 20, 10),
                                              (200, 100, 0, 0), (250, 100, 30, 10)])]
    s = breakdown.summarize(rows)
    # by hand: sorted 100 (step 0), 200 (step 2), 250 (step 3), 300 (step 1): the lower middle of
    # four is step 2, with its own parts (a field-by-field median would give exposed comm 15)
    assert (s["step"], s["step_time_ns"], s["compute_ns"], s["exposed_comm_ns"], s["idle_ns"]) == (2, 200, 100, 0, 100)
    assert s["overlap_ratio"] == 0.0
    rows[2].update(step_time_ns=260, idle_ns=160)      # now step 3 (250) is the lower middle
    s = breakdown.summarize(rows)
    assert (s["step"], s["exposed_comm_ns"], s["overlapped_comm_ns"]) == (3, 30, 10)
    assert s["overlap_ratio"] == 10 / 40


def test_segments_and_activity_spans_golden():
    s = run(golden_profile())
    build(s, ["segments", "activity_spans"])
    pts = s.rows("SELECT t, seg, t_end, c, m, x FROM segments WHERE step = 1 ORDER BY seg")
    # boundaries of step 1 by hand: 100 250 300 400 500 600 640 650 700 800 900
    assert [p["t"] for p in pts] == [100, 250, 300, 400, 500, 600, 640, 650, 700, 800, 900]
    assert [(int(p["c"]), int(p["m"]), int(p["x"])) for p in pts[:-1]] == [
        (1, 0, 0), (1, 1, 0), (1, 1, 0), (0, 1, 0), (0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 0), (0, 0, 0), (1, 0, 0)]
    assert pts[-1]["t_end"] is None
    spans = {r["id"]: (r["i0"], r["i1"]) for r in s.rows("SELECT id, i0, i1 FROM activity_spans WHERE step = 1")}
    # K1 [100,300) -> segments 0..1; NCCL [250,500) -> 1..3; M2 [640,700) -> 6..7; K4 [800,900) -> 9
    assert spans == {21: (0, 2), 22: (2, 3), 23: (1, 4), 24: (5, 7), 25: (6, 8), 26: (9, 10)}
