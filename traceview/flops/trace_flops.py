"""FLOPs of the matrix and attention ops of a trace, from their recorded input shapes.

Counting rule: an op is counted when it has a formula (table FORMULAS), its shapes give a value,
and no enclosing range (parent chain) is itself such an op: the OUTERMOST op with a formula wins,
so `aten::linear -> aten::matmul -> aten::mm` is counted once, as the linear. Backward matmuls
(`MmBackward0 -> aten::mm`) have no formula on the autograd node, so their `aten::mm` children count.
A counted op's FLOPs go to the GPU kernels it or its descendants launched, split in proportion
to kernel duration (kind 'kernel' only).
"""
from __future__ import annotations

import json
import math
from functools import lru_cache

import duckdb
import polars as pl
import pyarrow as pa

from .peaks import _DTYPES

BWD_FACTOR = 2.5   # flash-attention backward = 5 matmuls of the forward's 2
CAUSAL_FACTOR = 0.5


def _arrow(con, sql: str) -> pa.Table:
    """A DuckDB query's result as an Arrow table (DuckDB 2 names it to_arrow_table, 1.x arrow)."""
    rel = con.sql(sql)
    out = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
    return out.read_all() if isinstance(out, pa.RecordBatchReader) else out


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
    return 2 * _prod(max(x, y) for x, y in zip(ba, bb)) * a[-2] * a[-1] * b[-1]


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


def _dtype(input_types: str | None) -> str | None:
    if not input_types:
        return None
    try:
        t = json.loads(input_types)
    except ValueError:
        return None
    return _DTYPES.get(str(t[0]).lower()) if t else None


def op_flops(cpu_ranges: pa.Table) -> pa.Table:
    """Ops with a formula: id, rank, tid, name, start_ns, end_ns, flops (null: shapes missing or not
    understood), dtype, counted (outermost with FLOPs: these are the ones summed)."""
    cr = pl.from_arrow(cpu_ranges.select(["id", "rank", "tid", "name", "start_ns", "end_ns", "parent_id",
                                          "input_dims", "concrete_inputs", "input_types"]))
    ops = cr.filter(pl.col("name").is_in(list(FORMULAS)))
    sig = ops.select("name", "input_dims", "concrete_inputs", "input_types").unique()
    # (computed on the unique shape signatures: a few hundred, even for big traces)
    sig = sig.with_columns(
        pl.Series("flops", [shape_flops(n, d, c) for n, d, c in
                            zip(sig["name"], sig["input_dims"], sig["concrete_inputs"])], dtype=pl.Float64),
        pl.Series("dtype", [_dtype(t) for t in sig["input_types"]], dtype=pl.Utf8))
    keys = ["name", "input_dims", "concrete_inputs", "input_types"]
    fill = [pl.col(k).fill_null("") for k in keys[1:]]
    ops = ops.with_columns(fill).join(sig.with_columns(fill), on=keys, how="left")
    has = ops.filter(pl.col("flops").is_not_null()).select("id", "parent_id")
    con = duckdb.connect()
    con.register("cr", cr.select("id", "parent_id").to_arrow())
    con.register("has", has.to_arrow())
    nested = _arrow(con, """
        WITH RECURSIVE up(op, anc, n) AS (
            SELECT id, parent_id, 0 FROM has WHERE parent_id IS NOT NULL
            UNION ALL
            SELECT up.op, cr.parent_id, up.n + 1 FROM up JOIN cr ON cr.id = up.anc
            WHERE cr.parent_id IS NOT NULL AND up.n < 512)
        SELECT DISTINCT up.op AS id FROM up JOIN has ON has.id = up.anc""")
    nested = pl.from_arrow(nested)
    con.close()
    ops = ops.with_columns(counted=pl.col("flops").is_not_null() & ~pl.col("id").is_in(nested["id"].implode()))
    return ops.select("id", "rank", "tid", "name", "start_ns", "end_ns", "flops", "dtype", "counted").to_arrow()


def kernel_flops(ops: pa.Table, cpu_ranges: pa.Table, gpu_activities: pa.Table) -> pa.Table:
    """Per GPU kernel: id (gpu_activities.id), rank, op_id (the counted op), flops. Kernels that no
    counted op launched are absent. An op's FLOPs are split over its kernels by duration."""
    counted = pl.from_arrow(ops).filter(pl.col("counted")).select("id", "flops")
    con = duckdb.connect()
    con.register("cr", cpu_ranges.select(["id", "parent_id"]))
    con.register("g", gpu_activities.select(["id", "rank", "op_id", "kind", "start_ns", "end_ns"]))
    con.register("counted", counted.to_arrow())
    out = _arrow(con, """
        WITH RECURSIVE up(act, anc, n) AS (
            SELECT id, op_id, 0 FROM g WHERE op_id IS NOT NULL AND kind = 'kernel'
            UNION ALL
            SELECT up.act, cr.parent_id, up.n + 1 FROM up JOIN cr ON cr.id = up.anc
            WHERE cr.parent_id IS NOT NULL AND up.n < 512),
        k AS (
            SELECT g.id, g.rank, c.id AS op_id, c.flops, greatest(g.end_ns - g.start_ns, 0) AS dur
            FROM up JOIN counted c ON c.id = up.anc JOIN g ON g.id = up.act),
        tot AS (SELECT op_id, sum(dur) AS s, count(*) AS n FROM k GROUP BY op_id)
        SELECT k.id, k.rank, k.op_id,
               CASE WHEN tot.s > 0 THEN k.flops * k.dur / tot.s ELSE k.flops / tot.n END AS flops
        FROM k JOIN tot USING (op_id) ORDER BY k.id""")
    con.close()
    return out.cast(pa.schema([("id", pa.int64()), ("rank", pa.int32()), ("op_id", pa.int64()), ("flops", pa.float64())]))


def step_windows(cpu_ranges: pa.Table) -> pa.Table:
    """rank, step, start_ns, end_ns of the profiler's `ProfilerStep#N` ranges (empty if none)."""
    cr = pl.from_arrow(cpu_ranges.select(["rank", "name", "start_ns", "end_ns"]))
    w = (cr.filter(pl.col("name").str.contains(r"^ProfilerStep#\d+$"))
         .with_columns(step=pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64))
         .group_by("rank", "step").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
         .sort("rank", "step"))
    return w.select("rank", "step", "start_ns", "end_ns").to_arrow()


def tokens_per_step(cpu_ranges: pa.Table, windows: pa.Table | None = None) -> dict[int, int]:
    """Tokens per step per rank from `aten::embedding` inputs ([vocab, d], [B, T] -> B*T), summed
    over the embedding calls of each step, median over steps. Ranks without embedding are absent."""
    cr = pl.from_arrow(cpu_ranges.select(["rank", "name", "start_ns", "input_dims"]))
    emb = cr.filter((pl.col("name") == "aten::embedding") & pl.col("input_dims").is_not_null())
    if emb.height == 0:
        return {}
    emb = emb.with_columns(tok=pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64)))
                           .list.get(1, null_on_oob=True).list.eval(pl.element().product()).list.first())
    emb = emb.filter(pl.col("tok").is_not_null())
    if windows is None or windows.num_rows == 0:
        per = emb.group_by("rank").agg(pl.col("tok").max().alias("t"))   # one call = one step's batch
        return {int(r): int(t) for r, t in zip(per["rank"], per["t"])}
    w = pl.from_arrow(windows.select(["rank", "step", "start_ns", "end_ns"])).with_columns(pl.col("rank").cast(pl.Int32))
    j = emb.with_columns(pl.col("rank").cast(pl.Int32)).join(w, on="rank").filter((pl.col("start_ns") >= pl.col("start_ns_right")) & (pl.col("start_ns") < pl.col("end_ns")))
    per = j.group_by("rank", "step").agg(pl.col("tok").sum()).group_by("rank").agg(pl.col("tok").median())
    return {int(r): int(t) for r, t in zip(per["rank"], per["tok"])}
