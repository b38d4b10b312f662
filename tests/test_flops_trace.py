"""FLOPs from recorded shapes on hand-built canonical tables: every expected number by hand."""
import json

import pyarrow as pa
import pytest
from flops_support import analysis_session, section, trace_tables
from helpers import make_profile

from traceview.flops import models
from traceview.flops.mfu import NO_SHAPES, by_group
from traceview.flops.trace_flops import shape_flops

BF = json.dumps(["c10::BFloat16", "c10::BFloat16"])


def op(id, name, start, end, parent=None, dims=None, ci=None, tid=1, types=BF, kind="op"):
    return {"id": id, "tid": tid, "kind": kind, "name": name, "start_ns": start, "end_ns": end,
            "parent_id": parent, "input_dims": json.dumps(dims) if dims is not None else None,
            "concrete_inputs": json.dumps(ci) if ci is not None else None,
            "input_types": types if dims is not None else None}


def kern(id, op_id, start, end, kind="kernel"):
    return {"id": id, "op_id": op_id, "start_ns": start, "end_ns": end, "kind": kind, "name": f"k{id}", "stream": 7}


QKV = [[2, 4, 16, 8]] * 3
CPU = [
    op(1, "ProfilerStep#1", 0, 1000, kind="annotation"),
    op(2, "aten::linear", 10, 100, 1, [[4, 8, 16], [32, 16], [32]]),      # 2*(4*8)*16*32 = 32768
    op(3, "aten::addmm", 20, 90, 2, [[32], [32, 16], [16, 32]]),           # same work, nested: not counted
    op(4, "aten::matmul", 110, 200, 1, [[2, 4, 8], [8, 6]]),               # 2*2*4*8*6 = 768
    op(5, "aten::mm", 120, 190, 4, [[8, 8], [8, 6]]),                      # nested
    op(6, "autograd::engine::evaluate_function: MmBackward0", 300, 400, 1, tid=2),
    op(7, "aten::mm", 310, 350, 6, [[5, 3], [3, 7]], tid=2),               # 2*5*3*7 = 210
    op(8, "aten::mm", 350, 390, 6, [[3, 5], [5, 7]], tid=2),               # 2*3*5*7 = 210
    op(9, "aten::scaled_dot_product_attention", 500, 600, 1, QKV + [[]] * 5,
       ["", "", "", "", "0.", "True", "", "False"]),                        # 4*2*4*16*16*8 / 2 = 32768
    op(10, "aten::_scaled_dot_product_flash_attention", 510, 590, 9, QKV + [[]] * 4,
       ["", "", "", "0.", "True", "False", ""]),
    op(11, "aten::_scaled_dot_product_flash_attention_backward", 610, 700, 1,
       [[2, 4, 16, 8]] * 5 + [[2, 4, 16]] + [[]] * 9,
       [""] * 11 + ["False"] + [""] * 3),                                   # 4*2*4*16*16*8 * 2.5 = 163840
    op(12, "aten::mm", 710, 720, 1, None),                                  # no shapes: not counted
    op(13, "aten::embedding", 5, 9, 1, [[100, 16], [4, 8], [], [], []],
       types=json.dumps(["c10::BFloat16", "long int"])),
]
TOTAL = 32768 + 768 + 210 + 210 + 32768 + 163840
GPU = [
    kern(100, 3, 1000, 1300), kern(101, 3, 1300, 1400),    # linear via addmm: 3/4 and 1/4 of 32768
    kern(102, 3, 1400, 1410, kind="memset"),                # no FLOPs on copies/sets
    kern(103, 5, 1500, 1600),                               # matmul via mm: 768
    kern(104, 7, 1700, 1700), kern(105, 8, 1800, 1800),     # zero-length kernels still get their op's FLOPs
    kern(106, 10, 1900, 2000),                              # SDPA via its flash child
    kern(107, 11, 2100, 2200),
    kern(108, 12, 2300, 2400),                              # op without shapes
    kern(109, None, 2500, 2600),
]


@pytest.fixture
def prof():
    return make_profile(cpu=CPU, gpu=GPU, gpu_name="NVIDIA H100 80GB HBM3")


def test_outermost_op_with_a_formula_counts_once(prof):
    ops, _ = trace_tables(prof)
    rows = {r["id"]: r for r in ops}
    counted = {i: r["flops"] for i, r in rows.items() if r["counted"]}
    assert counted == {2: 32768, 4: 768, 7: 210, 8: 210, 9: 32768, 11: 163840}
    assert rows[3]["flops"] == 32768 and not rows[3]["counted"]
    assert rows[10]["flops"] == 65536 / 2 and not rows[10]["counted"]
    assert rows[12]["flops"] is None and not rows[12]["counted"]
    assert rows[2]["dtype"] == "bf16"


def test_kernels_get_their_ops_flops(prof):
    _, kernels = trace_tables(prof)
    k = {r["id"]: r["flops"] for r in kernels}
    assert k == {100: 32768 * 3 / 4, 101: 32768 / 4, 103: 768, 104: 210, 105: 210, 106: 32768, 107: 163840}
    assert {r["id"]: r["op_id"] for r in kernels}[100] == 2
    assert sum(k.values()) == TOTAL


def test_shape_formulas_by_hand():
    f = shape_flops
    assert f("aten::mm", "[[3, 4], [4, 5]]", None) == 2 * 3 * 4 * 5
    assert f("aten::bmm", "[[2, 3, 4], [2, 4, 5]]", None) == 2 * 2 * 3 * 4 * 5
    assert f("aten::baddbmm", "[[2, 3, 5], [2, 3, 4], [2, 4, 5]]", None) == 2 * 2 * 3 * 4 * 5
    assert f("aten::matmul", "[[7, 1, 3, 4], [2, 4, 5]]", None) == 2 * 7 * 2 * 3 * 4 * 5   # broadcast batch
    assert f("aten::matmul", "[[4], [4, 5]]", None) == 2 * 4 * 5
    assert f("aten::_scaled_mm", "[[16, 32], [32, 8], [], []]", None) == 2 * 16 * 32 * 8
    assert f("aten::_grouped_mm", "[[100, 16], [4, 16, 32], [4]]", None) == 2 * 100 * 16 * 32
    assert f("aten::_grouped_mm", "[[4, 10, 16], [4, 16, 32]]", None) == 2 * 4 * 10 * 16 * 32
    # conv2d 3x3, stride 1, padding 1 on 8x8: 64 output positions; weight 16*3*3*3
    assert f("aten::conv2d", "[[2, 3, 8, 8], [16, 3, 3, 3], [16], [], [], [], []]",
             '["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]') == 2 * 2 * 64 * (16 * 3 * 3 * 3)
    # stride 2, no padding: (8 - 3) // 2 + 1 = 3 per side
    assert f("aten::convolution", "[[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], [], [], []]",
             '["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]') == 2 * 9 * (4 * 27)
    # MLA-shaped attention (d_qk 192, d_v 128), flash layout [B, S, H, D], causal
    assert f("aten::_flash_attention_forward", "[[1, 64, 2, 192], [1, 64, 2, 192], [1, 64, 2, 128]]",
             '["", "", "", "", "", "64", "64", "0.", "True"]') == 2 * 1 * 2 * 64 * 64 * (192 + 128) / 2
    assert f("aten::_cudnn_attention_backward", json.dumps([[1, 2, 32, 8]] * 5 + [[1, 2, 32, 1]] + [[]] * 10),
             json.dumps([""] * 14 + ["True", ""])) == 4 * 2 * 32 * 32 * 8 * 2.5 / 2
    assert f("aten::add", "[[3, 4], [3, 4]]", None) is None
    assert f("aten::mm", "[[3, 4, 5], [4, 5]]", None) is None


def test_steps_and_tokens_are_the_breakdowns(prof):
    """The FLOPs count in the breakdown's steps (its step_ranges), not a rule of their own."""
    s = analysis_session(prof)
    assert s.rows("SELECT rank, step, cpu_start_ns, cpu_end_ns FROM step_ranges") == [
        {"rank": 0, "step": 1, "cpu_start_ns": 0, "cpu_end_ns": 1000}]
    sec = section(prof, step_time_ns=2_000_000)
    assert sec["trace_steps"] == 1 and sec["tokens_per_step"] == 32   # embedding [4, 8] inside step 1


def test_section_from_trace(prof):
    sec = section(prof, step_time_ns=2_000_000)
    assert sec["method"] == "trace" and sec["status"] == "ok"
    assert sec["flops_per_step"] == TOTAL
    assert sec["tokens_per_step"] == 32
    assert sec["delivered_tflops_per_gpu"] == pytest.approx(TOTAL / 2e-3 / 1e12, rel=1e-12)
    assert sec["peak_tflops"] == 989.5 and sec["dtype"] == "bf16"
    assert sec["mfu"] == pytest.approx(TOTAL / 2e-3 / 1e12 / 989.5, rel=1e-12)
    assert any("1 matrix/attention ops without usable shapes" in n for n in sec["notes"])
    json.dumps(sec)


def test_median_over_steps_and_step_ranges_input():
    cpu = [op(1, "ProfilerStep#1", 0, 100, kind="annotation"), op(2, "aten::mm", 10, 20, 1, [[10, 10], [10, 10]]),
           op(3, "ProfilerStep#2", 100, 200, kind="annotation"), op(4, "aten::mm", 110, 120, 3, [[10, 10], [10, 20]]),
           op(5, "aten::mm", 130, 140, 3, [[10, 10], [10, 20]]),
           op(6, "ProfilerStep#3", 200, 300, kind="annotation"), op(7, "aten::mm", 210, 220, 6, [[10, 10], [10, 30]])]
    gpu = [kern(100 + i, i, 1000 + 100 * i, 1050 + 100 * i) for i in (2, 4, 5, 7)]   # each step has GPU work
    p = make_profile(cpu=cpu, gpu=gpu)
    sec = section(p, step_time_ns=10**6)
    assert sec["flops_per_step"] == 6000     # steps: 2000, 8000, 6000 -> median 6000
    assert sec["trace_steps"] == 3
    # step ranges given (only steps 1 and 2) -> median of 2000 and 8000
    ranges = pa.table({"rank": pa.array([0, 0], pa.int32()), "step": [1, 2], "cpu_start_ns": [0, 100],
                       "cpu_end_ns": [100, 200]})
    assert section(p, 10**6, step_ranges=ranges)["flops_per_step"] == 5000
    # no step ranges at all: the whole trace is one step, 2000 + 8000 + 6000
    sec = section(make_profile(cpu=[dict(c, name="x") if c["kind"] == "annotation" else c for c in cpu], gpu=gpu),
                  10**6)
    assert sec["flops_per_step"] == 16000 and "trace_steps" not in sec
    assert any("whole trace counted as one step" in n for n in sec["notes"])


def test_no_shapes_falls_back_to_model():
    cpu = [dict(c, input_dims=None, concrete_inputs=None, input_types=None) for c in CPU]
    p = make_profile(cpu=cpu, gpu=GPU, gpu_name="NVIDIA H100 80GB HBM3")
    tiny = models.config_from_dict(dict(name="tiny", layers=1, hidden=4, heads=1, vocab=10, seq_len=8,
                                        dense_ffn=8, gated_ffn=False))
    # q,k,v,o 4x4 each = 64; FFN 2*4*8 = 64; head 10*4 = 40 -> 168 matmul weights
    # forward 2*168 + attention 2*1*8*(4+4)/2 = 400; training 1200 per token
    sec = section(p, step_time_ns=1_000_000, model=tiny, tokens_per_step=100)
    assert NO_SHAPES in sec["notes"]
    assert sec["method"] == "model" and sec["trace_flops_per_step"] is None
    assert sec["flops_per_step"] == 1200 * 100
    assert sec["delivered_tflops_per_gpu"] == pytest.approx(1.2e5 / 1e-3 / 1e12)
    assert sec["mfu"] == pytest.approx(1.2e5 / 1e-3 / 1e12 / 989.5)
    # no model either: unavailable, says why
    sec = section(p, step_time_ns=1_000_000)
    assert sec["status"] == "unavailable" and sec["mfu"] is None and NO_SHAPES in sec["notes"]


def test_unknown_gpu_reports_instead_of_guessing(prof):
    p = make_profile(cpu=CPU, gpu=GPU, gpu_name="NVIDIA GeForce RTX 4090")
    sec = section(p, step_time_ns=2_000_000)
    assert sec["status"] == "no_peak" and sec["mfu"] is None and sec["peak_tflops"] is None
    assert any("--peak-tflops" in n for n in sec["notes"])
    sec = section(p, step_time_ns=2_000_000, peak_tflops=100.0)
    assert sec["mfu"] == pytest.approx(TOTAL / 2e-3 / 1e12 / 100)


def test_achieved_tflops_per_group(prof):
    """by_group: the kernel FLOPs of each attributed (layer, phase, stage) over its compute time."""
    s = analysis_session(prof)
    s.register("activity_attribution", pa.Table.from_pylist([
        {"id": i, "step": 1, "layer": layer, "phase": phase, "stage": stage}
        for i, layer, phase, stage in [(100, 0, "fwd", "attention"), (101, 0, "fwd", "attention"),
                                       (103, 0, "fwd", "moe"), (106, 1, "fwd", "attention"),
                                       (107, 1, "bwd", "attention"), (109, None, "fwd", "other")]]))
    layers = [{"layer": 0, "phase": "fwd", "stage": "attention", "compute_ns": 300},
              {"layer": 0, "phase": "fwd", "stage": "attention", "compute_ns": 100},
              {"layer": 1, "phase": "bwd", "stage": "attention", "compute_ns": 100},
              {"layer": 1, "phase": "fwd", "stage": "attention", "compute_ns": 0}]
    got = {(r["layer"], r["phase"], r["stage"]): r for r in by_group(s, layers, n_steps=2)}
    # kernel 109 has no FLOPs (no op): no row; moe has FLOPs but no compute time: no rate
    assert list(got) == [(0, "fwd", "attention"), (0, "fwd", "moe"), (1, "bwd", "attention"), (1, "fwd", "attention")]
    assert got[(0, "fwd", "attention")] == {"layer": 0, "phase": "fwd", "stage": "attention",
                                            "flops_per_step": 32768 / 2, "compute_ns_per_step": 200.0,
                                            "achieved_tflops": 32768 / 400e-9 / 1e12}
    assert got[(1, "bwd", "attention")]["achieved_tflops"] == pytest.approx(163840 / 100e-9 / 1e12)
    assert got[(0, "fwd", "moe")]["flops_per_step"] == 768 / 2 and got[(0, "fwd", "moe")]["achieved_tflops"] is None
    assert got[(1, "fwd", "attention")]["achieved_tflops"] is None      # 0 ns of compute


def test_analyze_counts_flops_in_its_own_session_once(prof, monkeypatch):
    """The FLOPs are steps of the analysis session: one analyze opens one DuckDB database (the
    session's) and builds each FLOPs step once."""
    import threading

    import duckdb

    from traceview import duck
    from traceview.document.assemble import assemble
    from traceview.engine.session import Session
    opened = []
    real = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: opened.append(a) or real(*a, **k))
    monkeypatch.setattr(duck, "_local", threading.local())   # the thread's database made afresh (traceview/duck.py)
    s = Session(prof)
    doc = assemble(prof, session=s)
    assert len(opened) == 1
    assert doc["flops"]["method"] == "trace" and doc["flops"]["flops_per_step"] == TOTAL
    flops_steps = {n: c for n, c in s.build_counts.items() if n.startswith("flops_")}
    assert set(flops_steps) == {"flops_shapes", "flops_ops", "flops_kernels", "flops_step_ops", "flops_steps",
                                "flops_embedding_tokens", "flops_step_tokens", "flops_kernel_info",
                                "flops_op_kernels", "flops_op_inputs", "flops_op_precision",
                                "flops_compute_kernels", "flops_groups", "flops_shaped_ops"}
    assert set(flops_steps.values()) == {1}
