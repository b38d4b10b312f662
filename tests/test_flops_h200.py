"""Done-when numbers on the recorded H200 MoE trace (overlap mode; config in overlap.meta.json,
model in shared/tracegen/moe_step.py): trace-based and model-based FLOPs per step, MFU vs H200."""
import json

import pytest
from helpers import TRACES

from traceview.flops import models
from traceview.flops.mfu import flops_section, trace_flops

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
    sec = flops_section(profile, step_time_ns=step_ns, model=overlap_model())
    assert sec["method"] == "trace" and sec["status"] == "ok", sec["notes"]
    assert sec["tokens_per_step"] == TOKENS and sec["trace_steps"] == 3
    assert sec["model_flops_per_step"] == MODEL_PER_STEP
    assert sec["trace_flops_per_step"] == TRACE_PER_STEP
    assert abs(sec["trace_to_model_ratio"] - 1) < 0.05
    assert sec["gpu"] == "H200 SXM" and sec["dtype"] == "bf16" and sec["peak_tflops"] == 989.5
    assert sec["delivered_tflops_per_gpu"] == pytest.approx(TRACE_PER_STEP / 0.3 / 1e12, rel=1e-12)
    assert sec["mfu"] == pytest.approx(TRACE_PER_STEP / 0.3 / 1e12 / 989.5, rel=1e-12)


def test_every_counted_flop_lands_on_a_kernel_once(profile):
    ops, kernels = trace_flops(profile)
    counted = sum(r["flops"] for r in ops.to_pylist() if r["counted"])
    assert counted == pytest.approx(3 * TRACE_PER_STEP, rel=1e-12)
    ks = kernels.to_pylist()
    assert len({r["id"] for r in ks}) == len(ks)
    assert sum(r["flops"] for r in ks) == pytest.approx(counted, rel=1e-12)


def test_without_shapes_the_model_count_is_used(profile):
    import pyarrow as pa
    cr = profile.cpu_ranges
    i = cr.schema.get_field_index("input_dims")
    bare = cr.set_column(i, cr.schema.field(i), pa.nulls(cr.num_rows, pa.string()))
    sec = flops_section({"cpu_ranges": bare, "gpu_activities": profile.gpu_activities, "meta": profile.meta},
                        step_time_ns=300_000_000, model=overlap_model(), tokens_per_step=TOKENS)
    assert sec["method"] == "model" and sec["flops_per_step"] == MODEL_PER_STEP
    assert any("record_shapes off" in n for n in sec["notes"])


def test_analyze_with_model_config_end_to_end():
    """`traceview analyze --model-config`: both counts, their ratio within 5 %, MFU vs the H200 bf16 peak."""
    import subprocess
    import sys
    from helpers import ROOT
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(ROOT / "fixtures" / "h200_moe_overlap.json.gz"),
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
