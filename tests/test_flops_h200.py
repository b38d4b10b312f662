"""Done-when numbers on the recorded H200 MoE trace (overlap mode; config in overlap.meta.json,
model in shared/tracegen/moe_step.py): trace-based and model-based FLOPs per step, MFU vs H200."""
import json

import pytest
from flops_support import section, trace_tables
from helpers import TRACES

from traceview.flops import models

PATH = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"
META = json.loads((TRACES / "kineto" / "h200_moe" / "overlap.meta.json").read_text())

# by hand from moe_step.py: d=2048, 16 heads of 128, 4 layers, 16 experts top-4 FFN 2816 (w1,w3,w2),
# shared expert FFN 5632 (gated), vocab 32000 (untied head), batch 8 x seq 4096
D, S, TOKENS = 2048, 4096, 8 * 4096
LAYER_MATMUL = 3 * D * D + D * D + D * 16 + 4 * 3 * D * 2816 + 3 * D * 5632
MATMUL = 4 * LAYER_MATMUL + D * 32000
ATTN_FWD_PER_TOKEN = 4 * (4 * S * D) // 2          # 4 layers, QK^T + PV, causal half
MODEL_PER_STEP = 3 * (2 * MATMUL + ATTN_FWD_PER_TOKEN) * TOKENS
# what the trace should show: every linear forward (2*W per token), two backward mms (4*W),
# SDPA forward and its backward at 2.5x
TRACE_PER_STEP = 3 * 2 * MATMUL * TOKENS + 3.5 * ATTN_FWD_PER_TOKEN * TOKENS


@pytest.fixture(scope="module")
def profile():
    try:
        from traceview.load import load
        return load([PATH])
    except ImportError as e:  # only while the parsers are being written
        pytest.skip(f"traceview.load unavailable: {e}")


def overlap_model():
    return models.config_from_dict(dict(name="moe_step overlap", layers=META["layers"], hidden=META["d_model"],
                                        heads=META["heads"], vocab=32000, seq_len=META["seq"],
                                        moe_ffn=META["ffn"], n_routed_experts=META["experts"], top_k=META["topk"],
                                        n_shared_experts=1, shared_ffn=2 * META["ffn"]))


def test_trace_and_model_flops_agree(profile):
    step_ns = 300_000_000
    sec = section(profile, step_time_ns=step_ns, model=overlap_model())
    assert sec["method"] == "trace" and sec["status"] == "ok", sec["notes"]
    assert sec["tokens_per_step"] == TOKENS and sec["trace_steps"] == 3
    assert sec["model_flops_per_step"] == MODEL_PER_STEP
    assert sec["trace_flops_per_step"] == TRACE_PER_STEP
    assert abs(sec["trace_to_model_ratio"] - 1) < 0.05
    assert sec["gpu"] == "H200 SXM" and sec["dtype"] == "bf16" and sec["peak_tflops"] == 989.5
    assert sec["delivered_tflops_per_gpu"] == pytest.approx(TRACE_PER_STEP / 0.3 / 1e12, rel=1e-12)
    assert sec["mfu"] == pytest.approx(TRACE_PER_STEP / 0.3 / 1e12 / 989.5, rel=1e-12)


def test_every_counted_flop_lands_on_a_kernel_once(profile):
    ops, ks = trace_tables(profile)
    counted = sum(r["flops"] for r in ops if r["counted"])
    assert counted == pytest.approx(3 * TRACE_PER_STEP, rel=1e-12)
    assert len({r["id"] for r in ks}) == len(ks)
    assert sum(r["flops"] for r in ks) == pytest.approx(counted, rel=1e-12)


def test_without_shapes_the_model_count_is_used(profile):
    import dataclasses

    import pyarrow as pa
    cr = profile.cpu_ranges
    i = cr.schema.get_field_index("input_dims")
    bare = cr.set_column(i, cr.schema.field(i), pa.nulls(cr.num_rows, cr.schema.field(i).type))
    sec = section(dataclasses.replace(profile, cpu_ranges=bare),
                        step_time_ns=300_000_000, model=overlap_model(), tokens_per_step=TOKENS)
    assert sec["method"] == "model" and sec["flops_per_step"] == MODEL_PER_STEP
    assert any("record_shapes off" in n for n in sec["notes"])


def test_analyze_with_model_config_end_to_end():
    """`traceview analyze --model-config`: both counts, their ratio within 5 %, MFU vs the H200 bf16 peak."""
    import subprocess
    import sys

    from helpers import ROOT
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze",
                        str(ROOT / "fixtures" / "h200_moe_overlap.json.gz"),
                        "--model-config", str(ROOT / "fixtures" / "h200_moe.model.toml"), "-f", "json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    f = json.loads(r.stdout)["flops"]
    assert f["model_flops_per_step"] == MODEL_PER_STEP and f["trace_flops_per_step"] == TRACE_PER_STEP
    assert abs(f["trace_to_model_ratio"] - 1) < 0.05
    assert f["peak_tflops"] == 989.5 and f["dtype"] == "bf16"
    step = json.loads(r.stdout)["summary"]["step_time_ns"]
    assert f["mfu"] == pytest.approx(TRACE_PER_STEP / (step * 1e-9) / 1e12 / 989.5, rel=1e-9)
    # parameter counts of the model: torch's own count from the recording (overlap.meta.json)
    meta = json.loads((ROOT / "fixtures" / "h200_moe_overlap.meta.json").read_text())
    assert (f["model_params"]["total"], f["model_params"]["active"]) == (meta["params"], meta["active_params"])
    assert f["model_params"]["active_excl_embedding"] == meta["active_params"] - 32000 * 2048


def test_every_matmul_is_bf16_so_both_mfus_agree(profile):
    """moe_step.py trains in bf16: all counted FLOPs come out bf16 (from the recorded input types), so the
    precision-weighted MFU equals the dense-bf16 one, 38.8 % at the step breakdown's 300.90 ms."""
    step_ns = 300_900_000
    sec = section(profile, step_time_ns=step_ns)
    assert [(r["precision"], r["sources"]) for r in sec["flops_by_precision"]] == [("bf16", {"inputs": TRACE_PER_STEP})]
    mfu = TRACE_PER_STEP / (989.5e12 * step_ns * 1e-9)
    assert sec["mfu_dense_bf16"] == pytest.approx(mfu, rel=1e-12)
    assert sec["mfu_precision_weighted"] == pytest.approx(mfu, rel=1e-12) and f"{100 * mfu:.1f}" == "38.8"
    assert sec["peak_tflops_precision_weighted"] == pytest.approx(989.5, rel=1e-12)
    assert sec["assumed_bf16_flops_per_step"] == 0
    # the GEMMs run on cuBLASLt nvjet kernels, attention on cuDNN: both families carry all the FLOPs
    fam = {r["family"]: r for r in sec["by_family"]}
    assert set(fam) == {"gemm:nvjet bf16", "attention fp16"}
    assert sum(r["flops_per_step"] for r in sec["by_family"]) == pytest.approx(TRACE_PER_STEP, rel=1e-9)
    for r in sec["by_family"]:
        assert 0 < r["ratio_to_achievable"] <= 1.0 + 1e-12 and r["ratio_to_peak"] < 1


def test_family_rates_and_sustained_attention_from_the_raw_json(profile):
    """A second method, from the Kineto JSON itself: kernel times of the nvjet GEMMs and the cuDNN SDPA
    kernels launched inside the ProfilerStep windows, FLOPs from the model's shapes by hand (each layer's
    SDPA forward is one fprop kernel of ATTN/4 FLOPs, its backward one bprop kernel of 2.5 x that)."""
    import gzip
    import math
    events = json.load(gzip.open(PATH))["traceEvents"]
    ns = lambda v: round(v * 1000)  # noqa: E731
    steps = [(ns(e["ts"]), ns(e["ts"] + e["dur"])) for e in events
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: ns(e["ts"]) for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    kern = [(e["name"], ns(e["dur"])) for e in events if e.get("cat") == "kernel"
            and any(a <= launch.get(e["args"].get("correlation"), -1) < b for a, b in steps)]
    nvjet = sum(d for n, d in kern if n.startswith("nvjet_")) / len(steps)
    attn = ATTN_FWD_PER_TOKEN * TOKENS                         # forward attention FLOPs per step, 4 layers
    fwd = [attn / 4 / d / 1e3 for n, d in kern if "sdpa" in n and "fprop" in n]
    bwd = [2.5 * attn / 4 / d / 1e3 for n, d in kern if "sdpa" in n and "bprop" in n]
    assert len(fwd) == len(bwd) == 4 * len(steps)
    sec = section(profile, step_time_ns=300_900_000)
    fam = {r["family"]: r for r in sec["by_family"]}
    g = fam["gemm:nvjet bf16"]
    assert g["kernel_ns_per_step"] == pytest.approx(nvjet, rel=1e-9)
    assert g["achieved_tflops"] == pytest.approx(6 * MATMUL * TOKENS / nvjet / 1e3, rel=1e-9)
    rates = sorted(fwd + bwd)
    p95 = rates[math.ceil(0.95 * len(rates)) - 1]
    a = {(x["kind"], x["precision"]): x for x in sec["achievable"]}
    assert a[("attention", "bf16")]["tflops"] == pytest.approx(p95, rel=1e-9)
    sdpa_ns = sum(d for n, d in kern if "sdpa" in n)
    assert fam["attention fp16"]["achieved_tflops"] == pytest.approx(3.5 * attn * len(steps) / sdpa_ns / 1e3, rel=1e-9)
    assert fam["attention fp16"]["ratio_to_achievable"] == pytest.approx(
        3.5 * attn * len(steps) / sdpa_ns / 1e3 / p95, rel=1e-9)
