"""Precision-aware FLOPs and MFU on a hand-made MoE step: fp8 `_scaled_mm` expert GEMMs of known shapes
beside bf16 attention matmuls (plus a TF32 GEMM and one of unknown precision). Every expected number is
computed here from 2*M*N*K and the H100 SXM datasheet peaks, not read from the program."""
import html
import json
import math

import pytest
from flops_support import section
from helpers import make_profile

from traceview.flops import achieved, precision

F8 = ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float"]
BF = ["c10::BFloat16", "c10::BFloat16"]
FP32 = ["float", "float"]
NVJET_FP8 = "nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_ovscale_TNT"
NVJET_BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
XMMA_TF32 = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel"
SPLITK = ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, float, "
          "__nv_bfloat16, __nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>)")

# (op name, input dims, input types, [(kernel name, duration ns)])
OPS = [
    # four fp8 expert GEMMs (routed tokens x d -> FFN): M, K, N
    ("aten::_scaled_mm", [[512, 2048], [2048, 1408], [], []], F8, [(NVJET_FP8, 20_000), (SPLITK, 2_000)]),
    ("aten::_scaled_mm", [[256, 2048], [2048, 1408], [], []], F8, [(NVJET_FP8, 10_000)]),
    ("aten::_scaled_mm", [[768, 1408], [1408, 2048], [], []], F8, [(NVJET_FP8, 30_000)]),
    ("aten::_scaled_mm", [[64, 2048], [2048, 1408], [], []], F8, [(NVJET_FP8, 5_000)]),     # < 10 us
    # bf16 attention matmuls: Q K^T and P V over 32 batch*heads, S 1024, D 128
    ("aten::bmm", [[32, 1024, 128], [32, 128, 1024]], BF, [(NVJET_BF16, 40_000)]),
    ("aten::bmm", [[32, 1024, 1024], [32, 1024, 128]], BF, [(NVJET_BF16, 50_000)]),
    # fp32 inputs, TF32 math (the kernel says so)
    ("aten::mm", [[1024, 1024], [1024, 512]], FP32, [(XMMA_TF32, 12_000)]),
    # no input types recorded, a kernel that names no dtype: precision unknown
    ("aten::mm", [[256, 256], [256, 256]], None, [("my_fused_gemm_kernel", 3_000)]),
]
F_FP8 = [2 * 512 * 2048 * 1408, 2 * 256 * 2048 * 1408, 2 * 768 * 1408 * 2048, 2 * 64 * 2048 * 1408]
F_BF16 = [2 * 32 * 1024 * 128 * 1024, 2 * 32 * 1024 * 1024 * 128]
F_TF32 = 2 * 1024 * 1024 * 512
F_ASSUMED = 2 * 256 * 256 * 256
TOTAL = sum(F_FP8) + sum(F_BF16) + F_TF32 + F_ASSUMED
# H100 SXM dense peaks, TFLOP/s (NVIDIA H100 datasheet, sparse figures halved)
P_BF16, P_FP8, P_TF32 = 989.5, 1979.0, 494.5
STEP_NS = 2_000_000
T = STEP_NS * 1e-9


def profile_tables():
    cpu = [{"id": 1, "tid": 1, "kind": "annotation", "name": "ProfilerStep#1", "start_ns": 0, "end_ns": 1_000_000}]
    gpu, t = [], 100_000
    for i, (name, dims, types, kernels) in enumerate(OPS):
        oid = 10 + i
        cpu.append({"id": oid, "tid": 1, "kind": "op", "name": name, "start_ns": 1000 + 10_000 * i,
                    "end_ns": 9000 + 10_000 * i, "parent_id": 1, "input_dims": json.dumps(dims),
                    "input_types": json.dumps(types) if types else None})
        for kname, dur in kernels:
            gpu.append({"id": 100 + len(gpu), "op_id": oid, "start_ns": t, "end_ns": t + dur, "kind": "kernel",
                        "name": kname, "stream": 7})
            t += dur + 1000
    return cpu, gpu


@pytest.fixture(scope="module")
def sec():
    cpu, gpu = profile_tables()
    return section(make_profile(cpu=cpu, gpu=gpu, gpu_name="NVIDIA H100 80GB HBM3"), step_time_ns=STEP_NS)


def by_precision(sec):
    return {r["precision"]: r for r in sec["flops_by_precision"]}


def test_flops_split_by_precision_as_planted(sec):
    s = by_precision(sec)
    assert sec["flops_per_step"] == TOTAL
    assert s["fp8"]["flops_per_step"] == sum(F_FP8)
    assert s["bf16"]["flops_per_step"] == sum(F_BF16) + F_ASSUMED
    assert s["tf32"]["flops_per_step"] == F_TF32
    assert set(s) == {"fp8", "bf16", "tf32"}
    # how each was decided: the op (_scaled_mm), the inputs (bf16 bmm), the kernel (TF32), assumed
    assert s["fp8"]["sources"] == {"op": sum(F_FP8)}
    assert s["bf16"]["sources"] == {"inputs": sum(F_BF16), "assumed": F_ASSUMED}
    assert s["tf32"]["sources"] == {"kernel": F_TF32}
    assert sec["assumed_bf16_flops_per_step"] == F_ASSUMED
    assert any(f"{F_ASSUMED / TOTAL:.1%} of the FLOPs: assumed bf16" in n for n in sec["notes"])
    assert sum(r["share"] for r in sec["flops_by_precision"]) == pytest.approx(1.0, rel=1e-15)


def test_mfu_per_precision_and_dense_bf16_by_hand(sec):
    s = by_precision(sec)
    mfu8 = sum(F_FP8) / (P_FP8 * 1e12 * T)
    mfu16 = (sum(F_BF16) + F_ASSUMED) / (P_BF16 * 1e12 * T)
    mfu32 = F_TF32 / (P_TF32 * 1e12 * T)
    assert s["fp8"]["peak_tflops"] == P_FP8 and s["bf16"]["peak_tflops"] == P_BF16
    assert s["tf32"]["peak_tflops"] == P_TF32
    assert s["fp8"]["mfu"] == pytest.approx(mfu8, rel=1e-12)
    assert s["bf16"]["mfu"] == pytest.approx(mfu16, rel=1e-12)
    assert s["tf32"]["mfu"] == pytest.approx(mfu32, rel=1e-12)
    assert sec["mfu_precision_weighted"] == pytest.approx(mfu8 + mfu16 + mfu32, rel=1e-12)
    assert sec["mfu_dense_bf16"] == pytest.approx(TOTAL / (P_BF16 * 1e12 * T), rel=1e-12)
    assert sec["peak_tflops_dense_bf16"] == P_BF16
    # the effective denominator: F / sum(F_p / P_p)
    eff = TOTAL / (sum(F_FP8) / P_FP8 + (sum(F_BF16) + F_ASSUMED) / P_BF16 + F_TF32 / P_TF32)
    assert sec["peak_tflops_precision_weighted"] == pytest.approx(eff, rel=1e-12)
    assert sec["mfu_precision_weighted"] == pytest.approx(TOTAL / (eff * 1e12 * T), rel=1e-12)
    # the single-peak MFU keeps its rule: the precision of most FLOPs (bf16 here) and its dense peak
    assert sum(F_BF16) + F_ASSUMED > sum(F_FP8) and sec["dtype"] == "bf16" and sec["mfu"] == pytest.approx(
        sec["mfu_dense_bf16"], rel=1e-12)


def test_achievable_is_the_p95_of_kernels_of_at_least_10us(sec):
    a = {(r["kind"], r["precision"]): r for r in sec["achievable"]}
    # fp8 GEMM kernels >= 10 us: the first three (the 5 us one is left out); the split-K reduce gets no FLOPs
    rates8 = [F_FP8[0] / 20_000 / 1e3, F_FP8[1] / 10_000 / 1e3, F_FP8[2] / 30_000 / 1e3]
    assert a[("gemm", "fp8")]["kernels"] == 3 and a[("gemm", "fp8")]["tflops"] == pytest.approx(max(rates8))
    assert a[("gemm", "bf16")]["tflops"] == pytest.approx(max(F_BF16[0] / 40_000, F_BF16[1] / 50_000) / 1e3)
    assert a[("gemm", "tf32")]["tflops"] == pytest.approx(F_TF32 / 12_000 / 1e3)
    assert ("gemm", "bf16") in a and a[("gemm", "bf16")]["kernels"] == 2   # the 3 us unknown GEMM is too short
    # MFU against the achievable: sum over (kind, precision) of F / (A * T)
    ideal = (sum(F_FP8) / (max(rates8) * 1e12) + (sum(F_BF16) + F_ASSUMED) / (a[("gemm", "bf16")]["tflops"] * 1e12)
             + F_TF32 / (a[("gemm", "tf32")]["tflops"] * 1e12))
    assert sec["mfu_achievable"] == pytest.approx(ideal / T, rel=1e-12)


def test_nearest_rank_percentile_by_hand():
    xs = [float(i) for i in range(40, 0, -1)]          # 1..40 in any order
    assert achieved.nearest_rank(xs) == 38.0             # ceil(0.95 * 40) = 38th smallest
    assert achieved.nearest_rank([3.0, 1.0, 2.0]) == 3.0  # under 20 kernels: the best
    assert achieved.nearest_rank([float(i) for i in range(1, 21)]) == 19.0
    assert achieved.nearest_rank([]) is None


def test_per_family_rates_and_ratios(sec):
    fam = {(r["family"], r["precision"]): r for r in sec["by_family"]}
    f8 = fam[("gemm:nvjet fp8", "fp8")]
    t8 = 20_000 + 10_000 + 30_000 + 5_000          # the GEMM kernels only: the split-K reduce carries no FLOPs
    assert f8["flops_per_step"] == pytest.approx(sum(F_FP8)) and f8["kernel_ns_per_step"] == t8
    assert f8["achieved_tflops"] == pytest.approx(sum(F_FP8) / t8 / 1e3)
    best8 = max(F_FP8[0] / 20_000, F_FP8[1] / 10_000, F_FP8[2] / 30_000) / 1e3
    assert f8["ratio_to_achievable"] == pytest.approx(sum(F_FP8) / t8 / 1e3 / best8)
    assert f8["ratio_to_peak"] == pytest.approx(sum(F_FP8) / t8 / 1e3 / P_FP8)
    bf = fam[("gemm:nvjet bf16", "bf16")]
    assert bf["achieved_tflops"] == pytest.approx(sum(F_BF16) / 90_000 / 1e3)
    assert fam[("gemm:xmma tf32", "tf32")]["ratio_to_peak"] == pytest.approx(F_TF32 / 12_000 / 1e3 / P_TF32)
    unknown = fam[("kernel:my_fused_gemm_kernel", "bf16")]
    assert unknown["achieved_tflops"] == pytest.approx(F_ASSUMED / 3_000 / 1e3)
    assert not any(r["family"].startswith("gemm:splitk") for r in sec["by_family"])
    assert sum(r["flops_per_step"] for r in sec["by_family"]) == pytest.approx(TOTAL, rel=1e-12)


@pytest.mark.parametrize("name,inputs,kernel,expected", [
    ("aten::_scaled_mm", "fp8", "fp8", ("fp8", "op")),
    ("aten::_scaled_mm", None, None, ("fp8", "op")),               # the op alone says fp8
    ("aten::_scaled_grouped_mm", "fp4", None, ("fp4", "op")),
    ("aten::mm", "fp32", "tf32", ("tf32", "kernel")),             # TF32 math on fp32 storage
    ("aten::mm", "bf16", "fp16", ("bf16", "inputs")),             # cuDNN/CUTLASS say f16 for bf16 too
    ("aten::mm", "fp32", "fp32", ("fp32", "inputs")),
    ("aten::mm", None, "fp16", ("fp16", "kernel")),
    ("aten::mm", None, None, ("bf16", "assumed")),
])
def test_precedence(name, inputs, kernel, expected):
    assert precision.op_precision(name, inputs, kernel) == expected


def test_input_types_as_recorded():
    ip = precision.input_precision
    assert ip(json.dumps(F8)) == "fp8" and ip(json.dumps(BF)) == "bf16" and ip('["c10::Half", "c10::Half"]') == "fp16"
    assert ip('["", "c10::BFloat16", "c10::BFloat16"]') == "bf16"   # addmm: no bias recorded
    assert ip('["float", "float"]') == "fp32" and ip(None) is None and ip("not json") is None


def test_no_fp8_peak_is_said_not_guessed():
    cpu, gpu = profile_tables()
    sec = section(make_profile(cpu=cpu, gpu=gpu, gpu_name="NVIDIA A100-SXM4-80GB"), step_time_ns=STEP_NS)
    assert sec["mfu_precision_weighted"] is None and sec["peak_tflops_precision_weighted"] is None
    assert by_precision(sec)["fp8"]["peak_tflops"] is None
    assert "A100 SXM has no fp8 peak in the table: precision-weighted MFU not computed" in sec["notes"]
    assert sec["mfu_dense_bf16"] == pytest.approx(TOTAL / (312e12 * T), rel=1e-12)


def test_finite_and_json(sec):
    json.dumps(sec, allow_nan=False)
    assert all(math.isfinite(r["flops_per_step"]) for r in sec["flops_by_precision"])


# ---- the same step as a Kineto trace, through `traceview analyze` --------------------------------

def kineto_doc() -> dict:
    """OPS as a PyTorch-profiler trace: one ProfilerStep, each op on the main thread launching its kernels."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1000.0,
           "args": {}}]
    t, corr = 100.0, 1
    for i, (name, dims, types, kernels) in enumerate(OPS):
        ts = 1.0 + 10.0 * i
        args = {"Input Dims": dims, "External id": i + 1}
        if types:
            args["Input type"] = types
        ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 8.0, "args": args})
        for j, (kname, dur) in enumerate(kernels):
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": ts + 1.0 + j, "dur": 0.5, "args": {"correlation": corr, "External id": i + 1}})
            ev.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": t, "dur": dur / 1000,
                       "args": {"correlation": corr, "stream": 7, "device": 0, "External id": i + 1}})
            t += dur / 1000 + 1.0
            corr += 1
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "traceEvents": ev}


@pytest.fixture(scope="module")
def kineto_reports(tmp_path_factory):
    import subprocess
    import sys
    d = tmp_path_factory.mktemp("prec")
    path = d / "fp8_step.json"
    path.write_text(json.dumps(kineto_doc()))
    out = {}
    for fmt in ("json", "text", "markdown", "html"):
        r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(path), "-f", fmt], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        out[fmt] = r.stdout
    return out


def test_kineto_trace_gives_the_same_split_and_both_denominators(kineto_reports):
    from reports_support import validate
    doc = json.loads(kineto_reports["json"])
    validate(doc)
    f = doc["flops"]
    s = by_precision(f)
    assert s["fp8"]["flops_per_step"] == sum(F_FP8) and s["tf32"]["flops_per_step"] == F_TF32
    assert s["bf16"]["flops_per_step"] == sum(F_BF16) + F_ASSUMED
    t = doc["summary"]["step_time_ns"] * 1e-9
    pw = (sum(F_FP8) / P_FP8 + (sum(F_BF16) + F_ASSUMED) / P_BF16 + F_TF32 / P_TF32) / 1e12 / t
    assert f["mfu_precision_weighted"] == pytest.approx(pw, rel=1e-9)
    assert f["mfu_dense_bf16"] == pytest.approx(TOTAL / (P_BF16 * 1e12 * t), rel=1e-9)
    eff = TOTAL / (sum(F_FP8) / P_FP8 + (sum(F_BF16) + F_ASSUMED) / P_BF16 + F_TF32 / P_TF32)
    # every format prints both MFUs with their denominators
    want = [f"MFU {100 * f['mfu_dense_bf16']:.1f}% against the dense bf16 peak (989.5 TFLOP/s)",
            f"precision-weighted MFU {100 * pw:.1f}% against each op's own precision",
            f"(effective peak {eff:,.1f} TFLOP/s)"]
    for fmt in ("text", "markdown", "html"):
        body = " ".join(kineto_reports[fmt].split())
        body = html.unescape(body) if fmt == "html" else body
        for w in want:
            assert w in body, (fmt, w)
        assert "fp8" in body and "assumed bf16" in body and "gemm:nvjet fp8" in body


def test_peak_rows_say_where_they_come_from():
    from traceview.flops.peaks import COLUMN, PEAKS, PROVENANCE
    assert set(PROVENANCE) == set(PEAKS)
    assert all(v.startswith(("checked:", "datasheet, from memory")) for v in PROVENANCE.values())
    # the rows marked checked agree with the published dense figures quoted in them (to 0.2 TFLOP/s)
    for key, quoted in {"H100 SXM": {"bf16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 66.9},
                        "H200 SXM": {"fp8": 3958 / 2},
                        "MI300X": {"bf16": 1307.4, "fp8": 2614.9, "fp32": 163.4}}.items():
        for col, v in quoted.items():
            assert abs(PEAKS[key][col] - v) <= 0.2, (key, col)
    assert COLUMN["fp16"] == "bf16" and all(PEAKS[k].get("bf16") for k in PEAKS)


def test_peak_source_is_reported(sec):
    s = by_precision(sec)
    assert s["fp8"]["peak_source"].startswith("peak table: H100 SXM fp8 dense (checked:")


def test_deep_gemm_ops_by_hand():
    """DeepGEMM's ops as Kineto records their Python-API arguments: fp8 `(a, sfa), (b, sfb), d, ...`."""
    from traceview.flops.trace_flops import shape_flops as f
    M, K, N, G = 8192, 7168, 4096, 4
    # normal: a [M, K], d [M, N]
    assert f("deep_gemm::fp8_gemm_nt", json.dumps([[M, K], [M, K // 128], [N, K], [N // 128, K // 128], [M, N]]),
             None) == 2 * M * N * K
    # M-grouped contiguous: a [sum M, K], b [G, N, K], d [sum M, N], m_indices
    assert f("deep_gemm::m_grouped_fp8_gemm_nt_contiguous",
             json.dumps([[M, K], [M, K // 128], [G, N, K], [G, N // 128, K // 128], [M, N], [M]]),
             None) == 2 * M * N * K
    # M-grouped masked: a [G, M_max, K], d [G, M_max, N] (upper bound: the mask is not in the shapes)
    assert f("deep_gemm::m_grouped_fp8_gemm_nt_masked",
             json.dumps([[G, 256, K], [G, 256, K // 128], [G, N, K], [G, N // 128, K // 128], [G, 256, N], [G], []]),
             None) == 2 * G * 256 * N * K
    # K-grouped (MoE weight gradient): a [N_out, sum K], b [K_in, sum K], d [G, N_out, K_in]
    assert f("deep_gemm::k_grouped_fp8_gemm_nt_contiguous",
             json.dumps([[N, M], [N, M // 128], [K, M], [K, M // 128], [G, N, K]]), None) == 2 * M * N * K
    # bf16: a, b, d
    assert f("deep_gemm::bf16_gemm_nt", json.dumps([[M, K], [N, K], [M, N]]), None) == 2 * M * N * K
    assert f("deep_gemm::fp8_gemm_nt", json.dumps([[M, K], [M, K // 128], [N, K]]), None) is None   # no output
    assert precision.op_precision("deep_gemm::fp8_gemm_nt", None, None) == ("fp8", "op")
    assert precision.op_precision("deep_gemm::bf16_gemm_nt", None, "bf16") == ("bf16", "op")


def test_deepseek_fixture_split_exactly_as_planted(tmp_path):
    """The DeepSeek-structured fixture (fixtures/deepseek.py, from the framework-conventions work), when
    present: FLOPs split fp8/bf16 exactly as planted in both formats, MFU against both denominators."""
    deepseek = pytest.importorskip("fixtures.deepseek")
    from traceview.load import load
    paths, truth = deepseek.write(tmp_path)
    for fmt in ("kineto", "nsys"):
        sec = section(load([str(paths[fmt])]), step_time_ns=STEP_NS)
        s = by_precision(sec)
        assert set(s) == set(truth["flops_per_step"]), fmt
        for p, want in truth["flops_per_step"].items():
            assert s[p]["flops_per_step"] == want, (fmt, p)
        gpu = sec["gpu"]
        from traceview.flops.peaks import PEAKS
        pk = PEAKS[gpu]
        total = sum(truth["flops_per_step"].values())
        assert sec["mfu_dense_bf16"] == pytest.approx(total / (pk["bf16"] * 1e12 * T), rel=1e-12)
        assert sec["mfu_precision_weighted"] == pytest.approx(
            sum(f / (pk[precision.PEAK_COLUMN[p]] * 1e12 * T) for p, f in truth["flops_per_step"].items()), rel=1e-12)


def test_family_names_from_kernels_are_escaped_in_every_format():
    """A kernel name is untrusted text: as a family name ('kernel:<name>') it is escaped for the terminal,
    Markdown and HTML (a GEMM with no recognised compute kernel keeps its own kernel's family)."""
    from traceview.document.assemble import assemble
    from traceview.engine.session import Session
    from traceview.reports import html as html_r, markdown as md_r, text as text_r
    evil = "evil<x>|*_&\x1b[31m"            # the family drops the <...> part as template arguments
    cpu, gpu = profile_tables()
    gpu[-1]["name"] = evil
    prof = make_profile(cpu=cpu, gpu=gpu, gpu_name="NVIDIA H100 80GB HBM3")
    doc = assemble(prof, session=Session(prof))
    fams = [r["family"] for r in doc["flops"]["by_family"]]
    assert "kernel:evil|*_&\x1b[31m" in fams               # the JSON keeps the name as it is
    # (only the FLOPs sections are checked here: the kernel tables elsewhere print raw kernel names)
    t = text_r.render(doc).split("\nFLOPs\n", 1)[1].split("\n\n", 1)[0]
    assert "\x1b" not in t and "kernel:evil|*_&?[31m" in t
    m = md_r.render(doc).split("### FLOPs", 1)[1].split("###", 1)[0]
    assert "\x1b" not in m and "kernel:evil\\|\\*\\_&amp;?\\[31m" in m
    h = html_r.render(doc).split("<h2>Achieved TFLOP/s by kernel family</h2>", 1)[1].split("</table>", 1)[0]
    assert "\x1b" not in h and "kernel:evil|*_&amp;?[31m" in h


def _sums_by_group_by(table, keys):
    """The same sums by Arrow's hash aggregation (Table.group_by), a second method for
    OpColumns.sums (its groups' order is not always the order they first appear in)."""
    g = table.group_by(list(keys), use_threads=False).aggregate([("flops", "list")])
    names = zip(*(g.column(k).to_pylist() for k in keys), strict=True)
    return {k: math.fsum(v) for k, v in zip(names, g.column("flops_list").to_pylist(), strict=True)}


@pytest.mark.parametrize("seed", range(6))
def test_op_sums_equal_arrows_hash_aggregation(seed):
    import random

    import pyarrow as pa
    rng = random.Random(seed)
    n = rng.choice([1, 2, 7, 300, 5000])
    names = [rng.choice(["aten::mm", "aten::bmm", "aten::_scaled_mm", None]) for _ in range(n)]
    kinds = [rng.choice(["gemm", "attention", None]) for _ in range(n)]
    precs = [rng.choice(["bf16", "fp8", "tf32", None]) for _ in range(n)]
    flops = [rng.choice([0.0, 1e-3, 2.5e12, 1e30, rng.random() * 1e12]) for _ in range(n)]
    cut = n // 3   # two chunks, the precision column dictionary-coded in one of the tables
    cols = {"name": names, "kind": kinds, "precision": precs, "flops": flops}
    table = pa.Table.from_batches([pa.record_batch({k: v[:cut] for k, v in cols.items()}),
                                   pa.record_batch({k: v[cut:] for k, v in cols.items()})]) if cut else pa.table(cols)
    coded = table.set_column(2, "precision", table.column("precision").dictionary_encode())
    for t in (table, coded):
        ops = precision.OpColumns(t)
        for keys in (("precision",), ("kind", "precision"), ("name", "kind", "precision")):
            got = ops.sums(keys)
            assert got == _sums_by_group_by(table, keys)     # the same groups and the same exact sums
            first: list = []                                  # in the order they first appear
            for row in zip(*(cols[k] for k in keys), strict=True):
                if row not in first:
                    first.append(row)
            assert list(got) == first
    assert precision.OpColumns(table.slice(0, 0)).sums(("precision",)) == {}


def test_an_analysis_does_not_import_arrows_query_engine(tmp_path):
    """OpColumns.sums groups without Table.group_by: pyarrow.acero (~11 ms to import) stays out of
    an analysis of a trace with counted ops."""
    import subprocess
    import sys
    from pathlib import Path
    trace = Path(__file__).resolve().parents[1] / "fixtures" / "h200_moe_overlap.json.gz"
    code = ("import sys; from traceview.runs import AnalyzeOptions, run_analyze; "
            f"doc = run_analyze([{str(trace)!r}], AnalyzeOptions()); "
            "assert doc['flops'].get('flops_by_precision'), 'no counted ops'; "
            "print('pyarrow.acero' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__('os').environ, "TRACEVIEW_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
