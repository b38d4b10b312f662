"""Peak table: GPU names as traces record them, dtypes, and no silent guesses."""
import pytest

from traceview.errors import UsageError
from traceview.flops.peaks import PEAKS, match_gpu, normalize_dtype, peak_tflops


@pytest.mark.parametrize("recorded,key", [
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H800", "H800 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
    ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI355X", "MI355X"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA B300 SXM6 AC", "B300"),
    ("NVIDIA GB300", "GB300"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("H200 NVL", "H200 NVL"),
])
def test_recorded_names(recorded, key):
    assert match_gpu(recorded) == key


def test_dense_values_from_datasheets():
    # H200 SXM datasheet: BF16 1,979 TFLOPS with sparsity -> 989.5 dense
    assert peak_tflops("NVIDIA H200", "bf16")[0] == 1979 / 2
    assert peak_tflops("NVIDIA H200", "fp16")[0] == 1979 / 2
    assert peak_tflops("NVIDIA H200", "fp8")[0] == 3958 / 2
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "bf16")[0] == 312
    assert peak_tflops("AMD Instinct MI300X", "bfloat16")[0] == 1307.4
    assert peak_tflops("NVIDIA GB300", "bf16")[0] == 360_000 / 72 / 2   # NVL72: 360 PF sparse
    for part in ("A100 SXM", "A100 PCIe", "H100 SXM", "H100 PCIe", "H800 SXM", "H200 SXM", "B200", "B300",
                 "GB200", "GB300", "MI300X", "MI355X"):
        assert {"bf16", "fp32"} <= set(PEAKS[part])
    for part in ("B200", "B300", "GB200", "GB300", "MI355X"):
        assert PEAKS[part]["fp4"] > PEAKS[part]["fp8"] > PEAKS[part]["bf16"]


def test_unknown_gpu_is_never_guessed():
    with pytest.raises(UsageError) as e:
        peak_tflops("NVIDIA GeForce RTX 4090")
    assert "not in the peak table" in e.value.problem and "--peak-tflops" in e.value.problem
    with pytest.raises(UsageError) as e:
        peak_tflops(None)
    assert "--peak-tflops" in e.value.problem
    with pytest.raises(UsageError):
        peak_tflops("NVIDIA A100-SXM4-80GB", "fp8")   # A100 has no FP8 tensor cores
    with pytest.raises(UsageError):
        normalize_dtype("int3")
    assert match_gpu("Tesla V100") is None
