"""The shape -> FLOP formulas of the matrix and attention ops (table FORMULAS), from their recorded
input shapes; argument positions from native_functions.yaml.

Which ops are counted (the OUTERMOST op with a formula: `aten::linear -> aten::matmul -> aten::mm`
counts once, as the linear) and how their FLOPs go to kernels (split by duration) are the engine
steps traceview/sql/flops_ops.sql and flops_kernels.sql; flops/steps.py applies these formulas.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache

from .peaks import _DTYPES

BWD_FACTOR = 2.5   # flash-attention backward = 5 matmuls of the forward's 2
CAUSAL_FACTOR = 0.5


def _prod(xs) -> int:
    return math.prod(int(x) for x in xs)


def _mm(a, b):
    if len(a) != 2 or len(b) != 2:
        return None
    return 2 * a[0] * a[1] * b[1]


def _bmm(a, b):
    if len(a) != 3 or len(b) != 3:
        return None
    return 2 * a[0] * a[1] * a[2] * b[2]


def _matmul(a, b):
    if not a or not b:
        return None
    if len(a) == 1 and len(b) == 1:
        return 2 * a[0]
    if len(a) == 1:
        return 2 * _prod(b[:-2]) * b[-2] * b[-1]
    if len(b) == 1:
        return 2 * _prod(a[:-1]) * a[-1]
    ba, bb = a[:-2], b[:-2]
    n = max(len(ba), len(bb))
    ba, bb = [1] * (n - len(ba)) + list(ba), [1] * (n - len(bb)) + list(bb)
    return 2 * _prod(max(x, y) for x, y in zip(ba, bb, strict=True)) * a[-2] * a[-1] * b[-1]


def _linear(x, w):
    if not x or len(w) != 2:
        return None
    return 2 * _prod(x[:-1]) * w[1] * w[0]


def _grouped_mm(a, b):
    if len(a) == 2 and len(b) == 3:      # [sum M, K] x [G, K, N], offsets over M
        return 2 * a[0] * a[1] * b[2]
    if len(a) == 3 and len(b) == 3:      # [G, M, K] x [G, K, N]
        return 2 * a[0] * a[1] * a[2] * b[2]
    if len(a) == 3 and len(b) == 2:      # [G, M, K] x [K, sum N], offsets over N
        return 2 * a[1] * a[2] * b[1]
    if len(a) == 2 and len(b) == 2:      # [M, sum K] x [sum K, N], offsets over K
        return 2 * a[0] * a[1] * b[1]
    return None


def _out_k(out, a):
    """K of a GEMM whose output is `out` ([M, N] or [G, M, N]) and whose A operand is `a` ([M, K] or [K, M],
    with a leading G when `out` has one): the dimension of `a` that is not M, or None."""
    m = out[-2]
    a2 = a[-2:]
    if len(a2) != 2:
        return None
    return a2[1] if a2[0] == m else a2[0] if a2[1] == m else None


def _deep_gemm(out_index):
    """DeepGEMM ops, inputs as their Python API orders them: fp8 `(a, sfa), (b, sfb), d, ...`, bf16 `a, b, d`.
    Normal and M-grouped contiguous: d [M, N] (M summed over groups); M-grouped masked: d [G, M_max, N]
    (the masked rows are not in the shapes: upper bound); K-grouped: d [G, M, N], a [M, sum K]."""
    def f(d, ci):
        if len(d) <= out_index:
            return None
        a, out = d[0], d[out_index]
        if len(out) == 2 and len(a) == 2:
            k = _out_k(out, a)
            return 2 * out[0] * out[1] * k if k else None
        if len(out) == 3 and len(a) == 3 and a[0] == out[0]:
            k = _out_k(out, a)
            return 2 * out[0] * out[1] * out[2] * k if k else None
        if len(out) == 3 and len(a) == 2:
            k = _out_k(out, a)
            return 2 * out[1] * out[2] * k if k else None
        return None
    return f


_DEEP_GEMM_FP8 = [f"fp8_gemm_{t}" for t in ("nt", "nn", "tn", "tt")] + [
    "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nn_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous", "k_grouped_fp8_gemm_tn_contiguous",
    "fp8_fp4_gemm_nt", "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nt_masked",
    # DeepGEMM v1 names
    "gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
    "wgrad_gemm_fp8_fp8_fp32_nt", "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt"]
_DEEP_GEMM_BF16 = [f"bf16_gemm_{t}" for t in ("nt", "nn", "tn", "tt")] + [
    "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked"]
DEEP_GEMM_OPS = {f"deep_gemm::{n}": ("fp4" if "fp4" in n and "fp8" not in n else "fp8") for n in _DEEP_GEMM_FP8}
DEEP_GEMM_OPS.update({f"deep_gemm::{n}": "bf16" for n in _DEEP_GEMM_BF16})


def _ints(s) -> list[int] | None:
    """A concrete int-list argument ('[2, 2]', '2') or None when not recorded."""
    if s in (None, ""):
        return None
    try:
        v = json.loads(s) if isinstance(s, str) else s
    except ValueError:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return [v]
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return v
    return None


def _conv(x, w, ci, i_stride, i_pad, i_dil, i_transposed, backward=False):
    """2 * N * (output positions) * numel(weight) (transposed: input positions), per pass.
    Stride/padding/dilation come from concrete inputs where recorded (else 1/0/1)."""
    if len(x) < 3 or len(w) != len(x):
        return None
    k = len(x) - 2
    transposed = (ci[i_transposed] if len(ci) > i_transposed else "") in ("True", "true", "1")

    def arg(i, default):
        v = _ints(ci[i]) if len(ci) > i else None
        return (v * k if v and len(v) == 1 else v) if v else [default] * k
    stride, pad, dil = arg(i_stride, 1), arg(i_pad, 0), arg(i_dil, 1)
    if transposed or backward:
        positions = _prod(x[2:])           # backward: x is grad_output (normal) / input (transposed)
    else:
        positions = _prod((x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(k))
    return 2 * x[0] * max(positions, 0) * _prod(w)


def _conv_backward(d, ci):
    # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, ...)
    if len(d) < 3:
        return None
    transposed = (ci[7] if len(ci) > 7 else "") in ("True", "true", "1")
    x = d[1] if transposed else d[0]
    one = _conv(x, d[2], ci, 4, 5, 6, 7, backward=True)
    return None if one is None else 2 * one  # grad input + grad weight


def _attn(d, ci, qi, layout, causal_idx, backward, mask_type=False):
    """2 * B * H * Sq * Sk * (d_qk + d_v) forward (= 4 B H S S D), x2.5 backward, x0.5 causal."""
    if len(d) < qi + 3:
        return None
    q, k, v = d[qi], d[qi + 1], d[qi + 2]
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None  # varlen/nested layouts: the sequence lengths are not in the shapes
    if layout == "bhsd":
        b, h, sq, dqk = q
        sk, dv = k[2], v[3]
    else:  # bshd
        b, sq, h, dqk = q
        sk, dv = k[1], v[3]
    f = 2 * b * h * sq * sk * (dqk + dv)
    flag = ci[causal_idx] if 0 <= causal_idx < len(ci) else ""
    causal = flag in ("1", "2") if mask_type else flag in ("True", "true", "1")
    if causal:
        f *= CAUSAL_FACTOR
    if backward:
        f *= BWD_FACTOR
    return f


def _two(fn, i=0, j=1):
    return lambda d, ci: fn(d[i], d[j]) if len(d) > max(i, j) else None


# name -> f(input_dims, concrete_inputs) ; argument positions from native_functions.yaml
FORMULAS = {
    "aten::mm": _two(_mm),
    "aten::_scaled_mm": _two(_mm),
    "aten::addmm": _two(_mm, 1, 2),
    "aten::bmm": _two(_bmm),
    "aten::baddbmm": _two(_bmm, 1, 2),
    "aten::linear": _two(_linear),
    "aten::matmul": _two(_matmul),
    "aten::_grouped_mm": _two(_grouped_mm),
    "aten::_scaled_grouped_mm": _two(_grouped_mm),
    "aten::convolution": lambda d, ci: _conv(d[0], d[1], ci, 3, 4, 5, 6) if len(d) > 1 else None,
    "aten::_convolution": lambda d, ci: _conv(d[0], d[1], ci, 3, 4, 5, 6) if len(d) > 1 else None,
    "aten::conv1d": lambda d, ci: _conv(d[0], d[1], ci, 3, 4, 5, 99) if len(d) > 1 else None,
    "aten::conv2d": lambda d, ci: _conv(d[0], d[1], ci, 3, 4, 5, 99) if len(d) > 1 else None,
    "aten::conv3d": lambda d, ci: _conv(d[0], d[1], ci, 3, 4, 5, 99) if len(d) > 1 else None,
    "aten::convolution_backward": _conv_backward,
    # attention: (q index, layout, is_causal index, backward)
    "aten::scaled_dot_product_attention": lambda d, ci: _attn(d, ci, 0, "bhsd", 5, False),
    "aten::_scaled_dot_product_flash_attention": lambda d, ci: _attn(d, ci, 0, "bhsd", 4, False),
    "aten::_scaled_dot_product_efficient_attention": lambda d, ci: _attn(d, ci, 0, "bhsd", 6, False),
    "aten::_scaled_dot_product_cudnn_attention": lambda d, ci: _attn(d, ci, 0, "bhsd", 6, False),
    "aten::_flash_attention_forward": lambda d, ci: _attn(d, ci, 0, "bshd", 8, False),
    "aten::_efficient_attention_forward": lambda d, ci: _attn(d, ci, 0, "bshd", 8, False, mask_type=True),
    "aten::_cudnn_attention_forward": lambda d, ci: _attn(d, ci, 0, "bhsd", 10, False),
    "aten::_scaled_dot_product_flash_attention_backward": lambda d, ci: _attn(d, ci, 1, "bhsd", 11, True),
    "aten::_scaled_dot_product_efficient_attention_backward": lambda d, ci: _attn(d, ci, 1, "bhsd", 11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": lambda d, ci: _attn(d, ci, 1, "bhsd", 14, True),
    "aten::_flash_attention_backward": lambda d, ci: _attn(d, ci, 1, "bshd", 11, True),
    "aten::_efficient_attention_backward": lambda d, ci: _attn(d, ci, 1, "bshd", 14, True, mask_type=True),
    "aten::_cudnn_attention_backward": lambda d, ci: _attn(d, ci, 1, "bhsd", 14, True),
}
FORMULAS.update({name: _deep_gemm(4 if prec != "bf16" else 2) for name, prec in DEEP_GEMM_OPS.items()})


@lru_cache(maxsize=65536)
def shape_flops(name: str, input_dims: str | None, concrete_inputs: str | None) -> float | None:
    """FLOPs of one op from its recorded shapes (JSON text), or None (no formula / no shapes)."""
    fn = FORMULAS.get(name)
    if fn is None or not input_dims:
        return None
    try:
        dims = json.loads(input_dims)
        ci = json.loads(concrete_inputs) if concrete_inputs else []
        dims = [[int(x) for x in s] if isinstance(s, list) else [] for s in dims]
        ci = [c if isinstance(c, str) else json.dumps(c) for c in ci] if isinstance(ci, list) else []
        f = fn(dims, ci)
    except (ValueError, TypeError, IndexError):
        return None
    return None if f is None else float(f)


def op_dtype(input_types: str | None) -> str | None:
    if not input_types:
        return None
    try:
        t = json.loads(input_types)
    except ValueError:
        return None
    return _DTYPES.get(str(t[0]).lower()) if t else None
