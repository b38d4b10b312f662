"""Dense peak TFLOP/s per GPU and data type (no structured sparsity).

Vendors quote tensor-core peaks "with sparsity" (2:4); the dense peak is half of that. Every
number below is the dense one, per GPU, at the boost clock, from the vendor document named in
its comment. `fp32` is the FP32 peak (NVIDIA: CUDA cores; AMD: matrix cores); `tf32` the dense
TF32 tensor peak. bf16 and fp16 peaks are equal on every part listed, so they share `bf16`.
"""
from __future__ import annotations

import re

from ..errors import UsageError

PEAKS: dict[str, dict[str, float]] = {
    # NVIDIA A100 Tensor Core GPU datasheet: BF16/FP16 312, TF32 156, FP32 19.5 (dense; SXM and PCIe alike)
    "A100 SXM": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "A100 PCIe": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: BF16 1,979*, FP8 3,958*, TF32 989* (*sparse), FP32 67
    "H100 SXM": {"bf16": 989.5, "fp8": 1979.0, "tf32": 494.5, "fp32": 67.0},
    # same datasheet, H100 PCIe: BF16 1,513*, FP8 3,026*, TF32 756*, FP32 51
    "H100 PCIe": {"bf16": 756.5, "fp8": 1513.0, "tf32": 378.0, "fp32": 51.0},
    # same datasheet, H100 NVL (per GPU): BF16 1,671*, FP8 3,341*, TF32 835*, FP32 60
    "H100 NVL": {"bf16": 835.5, "fp8": 1670.5, "tf32": 417.5, "fp32": 60.0},
    # NVIDIA H800 product brief: tensor-core peaks of H100 SXM (NVLink and FP64 reduced)
    "H800 SXM": {"bf16": 989.5, "fp8": 1979.0, "tf32": 494.5, "fp32": 67.0},
    # NVIDIA H800 PCIe product brief: tensor-core peaks of H100 PCIe
    "H800 PCIe": {"bf16": 756.5, "fp8": 1513.0, "tf32": 378.0, "fp32": 51.0},
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: BF16 1,979*, FP8 3,958*, TF32 989*, FP32 67
    "H200 SXM": {"bf16": 989.5, "fp8": 1979.0, "tf32": 494.5, "fp32": 67.0},
    # same datasheet, H200 NVL: BF16 1,671*, FP8 3,341*, TF32 835*, FP32 60
    "H200 NVL": {"bf16": 835.5, "fp8": 1670.5, "tf32": 417.5, "fp32": 60.0},
    # NVIDIA GH200 Grace Hopper Superchip datasheet: the H100/H200 GPU of the superchip, SXM peaks
    "GH200": {"bf16": 989.5, "fp8": 1979.0, "tf32": 494.5, "fp32": 67.0},
    # NVIDIA HGX B200 datasheet (8 GPUs): FP4 144 PF*, FP8 72 PF*, BF16 36 PF*, TF32 18 PF*, FP32 600 TF; /8, /2
    "B200": {"bf16": 2250.0, "fp8": 4500.0, "fp4": 9000.0, "tf32": 1125.0, "fp32": 75.0},
    # NVIDIA GB200 NVL72 datasheet (per GB200 = 2 GPUs): FP4 40 PF*, FP8 20 PF*, BF16 10 PF*, TF32 5 PF*, FP32 180 TF
    "GB200": {"bf16": 2500.0, "fp8": 5000.0, "fp4": 10000.0, "tf32": 1250.0, "fp32": 90.0},
    # NVIDIA HGX B300 datasheet (8 GPUs): FP4 108 PF dense, FP8 72 PF*, BF16 36 PF*, TF32 18 PF*, FP32 600 TF
    "B300": {"bf16": 2250.0, "fp8": 4500.0, "fp4": 13500.0, "tf32": 1125.0, "fp32": 75.0},
    # NVIDIA GB300 NVL72 datasheet (72 GPUs): FP4 1,080 PF dense, FP8 720 PF*, BF16 360 PF*, TF32 180 PF*, FP32 6 PF
    "GB300": {"bf16": 2500.0, "fp8": 5000.0, "fp4": 15000.0, "tf32": 1250.0, "fp32": 83.3},
    # AMD Instinct MI300X datasheet: FP16/BF16 1,307.4, FP8 2,614.9, TF32 653.7, FP32 163.4 (matrix, dense)
    "MI300X": {"bf16": 1307.4, "fp8": 2614.9, "tf32": 653.7, "fp32": 163.4},
    # AMD Instinct MI325X datasheet: same compute as MI300X
    "MI325X": {"bf16": 1307.4, "fp8": 2614.9, "tf32": 653.7, "fp32": 163.4},
    # AMD Instinct MI355X datasheet: FP16/BF16 2,516.6, FP8 5,033.2, MXFP4/FP6 10,066.3, FP32 157.3 (dense)
    "MI355X": {"bf16": 2516.6, "fp8": 5033.2, "fp4": 10066.3, "fp32": 157.3},
    # AMD Instinct MI350X datasheet: FP16/BF16 2,306.9, FP8 4,613.7, MXFP4/FP6 9,227.5, FP32 144.2 (dense)
    "MI350X": {"bf16": 2306.9, "fp8": 4613.7, "fp4": 9227.5, "fp32": 144.2},
}

# Where each row's figures were last checked. "datasheet, from memory": written from the vendor document
# named in the row's comment and not re-checked against it since; "checked": compared in this project
# with a published copy of the figures (named), all columns of the row agreeing.
PROVENANCE: dict[str, str] = {k: "datasheet, from memory" for k in PEAKS}
PROVENANCE.update({
    "H100 SXM": "checked: dense BF16 989.4, FP8 1978.9, TF32 494.7, FP32 66.9 (glennklockwood.com H100 page)",
    "H200 SXM": "checked: same compute as H100 SXM (H200 datasheet FP8 3,958* = H100's)",
    "H800 SXM": "datasheet, from memory (H100 SXM tensor peaks)",
    "MI300X": "checked: matrix FP16/BF16 1,307.4, FP8 2,614.9, FP32 163.4 (ROCm MI300 docs)",
    "GB200": "datasheet, from memory; FP32 uncertain (NVIDIA's later per-GPU table says 80 TFLOP/s, "
             "the earlier 180 per superchip gives 90)",
})
# fp16 has no column: its dense peak equals bf16's on every part above
COLUMN = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp4", "tf32": "tf32", "fp32": "fp32"}

# (regex on the lower-cased recorded name, table key); first match wins: most specific first
_MATCH: list[tuple[str, str]] = [
    (r"gb300", "GB300"), (r"b300", "B300"), (r"gb200", "GB200"), (r"b200", "B200"),
    (r"gh200", "GH200"), (r"h200.*nvl", "H200 NVL"), (r"h200", "H200 SXM"),
    (r"h800.*pcie", "H800 PCIe"), (r"h800", "H800 SXM"),
    (r"h100.*pcie", "H100 PCIe"), (r"h100.*nvl", "H100 NVL"), (r"h100", "H100 SXM"),
    (r"a100.*pcie", "A100 PCIe"), (r"a100", "A100 SXM"),
    (r"mi355", "MI355X"), (r"mi350", "MI350X"), (r"mi325", "MI325X"), (r"mi300x", "MI300X"),
]

_DTYPES = {
    "bf16": "bf16", "bfloat16": "bf16", "fp16": "bf16", "float16": "bf16", "half": "bf16",
    "c10::bfloat16": "bf16", "c10::half": "bf16",
    "fp8": "fp8", "float8": "fp8", "e4m3": "fp8", "e5m2": "fp8", "mxfp8": "fp8",
    "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8",
    "c10::float8_e4m3fnuz": "fp8", "c10::float8_e5m2fnuz": "fp8",
    "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4",
    "tf32": "tf32", "fp32": "fp32", "float32": "fp32", "float": "fp32",
}


def normalize_dtype(dtype: str | None) -> str:
    """'bf16' for None; one of bf16 (= fp16), fp8, fp4, tf32, fp32."""
    if dtype is None:
        return "bf16"
    k = _DTYPES.get(dtype.strip().lower())
    if k is None:
        raise UsageError(None, f"unknown data type {dtype!r} (use bf16, fp16, fp8, fp4, tf32 or fp32)")
    return k


def match_gpu(name: str | None) -> str | None:
    """Table key of a GPU name as recorded ('NVIDIA H100 80GB HBM3' -> 'H100 SXM'), or None."""
    if not name:
        return None
    low = name.strip().lower()
    for key in PEAKS:  # a table key itself ('H100 PCIe', 'mi300x') matches exactly
        if low == key.lower():
            return key
    for pat, key in _MATCH:
        if re.search(pat, low):
            return key
    return None


def peak_tflops(gpu_name: str | None, dtype: str | None = None) -> tuple[float, str, str]:
    """(dense peak TFLOP/s, table key, dtype key). Raises UsageError when unknown: never guesses."""
    dt = normalize_dtype(dtype)
    key = match_gpu(gpu_name)
    if key is None:
        what = f"GPU {gpu_name!r} is not in the peak table" if gpu_name else "GPU model unknown (not recorded)"
        raise UsageError(None, f"{what}: pass --peak-tflops (dense TFLOP/s per GPU)")
    if dt not in PEAKS[key]:
        raise UsageError(None, f"{key} has no {dt} tensor peak in the table: pass --peak-tflops")
    return PEAKS[key][dt], key, dt
