"""The precision each counted matrix/attention op ran in, and the step's FLOPs split by precision.

An op's precision is read, in this order (the first that says something wins; docs/FLOPS.md):
1. the op: `aten::_scaled_mm` / `aten::_scaled_grouped_mm` are fp8 (fp4 when their inputs are fp4), DeepGEMM's
   `deep_gemm::*fp8*` ops fp8 and `deep_gemm::*bf16*` ops bf16;
2. its compute kernel, when the kernel names a math type the inputs cannot show: fp8, fp4, tf32,
   int8, fp64 (cuBLASLt `xmma_gemm_f32f32_tf32f32`, CUTLASS `s1688gemm`, nvjet `qq`, DeepGEMM fp8);
3. the op's recorded input dtype (`Input type` in Kineto args): bf16, fp16, fp32, fp8, ...;
4. the kernel's name (bf16 / fp16 / fp32) when no input types were recorded;
5. otherwise "assumed bf16".
"Compute kernel": the longest-running GEMM / attention / convolution kernel the op launched
(families of traceview/diff/families.py), not its split-K reduce or elementwise epilogue.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from . import peaks as _peaks
from .trace_flops import DEEP_GEMM_OPS

ASSUMED = "assumed"
SCALED_OPS = ("aten::_scaled_mm", "aten::_scaled_grouped_mm")
# math types a kernel name can show that the op's input dtype cannot (or shows differently)
KERNEL_ONLY = ("fp8", "fp4", "tf32", "int8", "fp64")
# peak-table column of each precision (fp16 and bf16 share one: equal on every GPU in peaks.py)
PEAK_COLUMN = _peaks.COLUMN
_INPUT_T = {
    "c10::bfloat16": "bf16", "bfloat16": "bf16", "c10::half": "fp16", "half": "fp16", "float": "fp32",
    "double": "fp64", "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8", "c10::float8_e4m3fnuz": "fp8",
    "c10::float8_e5m2fnuz": "fp8", "c10::float4_e2m1fn_x2": "fp4", "signed char": "int8", "c10::qint8": "int8",
}
COMPUTE_CATEGORIES = ("gemm", "attention", "conv")


def input_precision(input_types: str | None) -> str | None:
    """Precision of the first matrix input among the first three recorded types (bias or not), or None."""
    if not input_types:
        return None
    try:
        t = json.loads(input_types)
    except ValueError:
        return None
    if not isinstance(t, list):
        return None
    for x in t[:3]:
        p = _INPUT_T.get(str(x).strip().lower())
        if p:
            return p
    return None


@lru_cache(maxsize=65536)
def kernel_precision(name: str) -> tuple[str | None, str | None]:
    """(category, dtype) of a kernel when it is a compute kernel (GEMM/attention/conv), else (None, None)."""
    from ..diff.families import family  # (its patterns compiled only where a kernel is classified)
    f = family(name or "")
    if f.category not in COMPUTE_CATEGORIES or f.family == "gemm:splitk-reduce":
        return None, None
    return f.category, f.dtype


def op_precision(op_name: str, inputs: str | None, kernel: str | None) -> tuple[str, str]:
    """(precision, source) of one op: source is 'op', 'kernel', 'inputs' or 'assumed' (precision bf16)."""
    if op_name in SCALED_OPS:
        return ("fp4" if inputs == "fp4" else "fp8"), "op"
    if op_name in DEEP_GEMM_OPS:
        return DEEP_GEMM_OPS[op_name], "op"
    if kernel in KERNEL_ONLY:
        return kernel, "kernel"
    if inputs:
        return inputs, "inputs"
    if kernel:
        return kernel, "kernel"
    return "bf16", ASSUMED


def op_kind(op_name: str) -> str:
    """The kind of work of a counted op: 'attention', 'conv' or 'gemm'."""
    if "attention" in op_name:
        return "attention"
    if "conv" in op_name:
        return "conv"
    return "gemm"


class OpColumns:
    """The counted ops (flops_op_precision): the exact FLOPs sums that split() and the FLOPs
    section read, by group (Arrow groups them; each group's terms are summed exactly)."""

    def __init__(self, table):
        self.table = table

    @classmethod
    def of(cls, table, keys: tuple[str, ...]) -> OpColumns:
        """The `flops` column and the grouping columns `keys` of an Arrow table of ops."""
        return cls(table.select(["flops", *keys]))

    def __len__(self) -> int:
        return self.table.num_rows

    def total(self) -> float:
        return math.fsum(self.table.column("flops").to_pylist())

    def sums(self, keys: tuple[str, ...]) -> dict[tuple, float]:
        """Sum of `flops` per distinct `keys` (a null key a value like any other), in the order the
        groups first appear, exact (math.fsum). Grouped by compute kernels (dictionary codes and a
        stable sort), not by `Table.group_by`, whose engine (pyarrow.acero) took some 11 ms to
        import, a fixed cost of every analysis of a trace with counted ops."""
        t = self.table
        n = t.num_rows
        if not n:
            return {}
        code = None
        for k in keys:   # one code per distinct combination of the keys so far, as they first appear
            col = t.column(k).combine_chunks()
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            enc = pc.dictionary_encode(col, null_encoding="encode")
            idx = enc.indices.cast(pa.int64())
            code = idx if code is None else \
                pc.dictionary_encode(pc.add(pc.multiply(code, len(enc.dictionary)), idx)).indices.cast(pa.int64())
        assert code is not None
        order = pc.sort_indices(code)          # stable: a group's rows keep their order, its first row first
        grouped = pc.take(code, order)
        cuts = pc.indices_nonzero(pc.not_equal(grouped.slice(1), grouped.slice(0, n - 1))).to_pylist()
        starts = [0, *(i + 1 for i in cuts)]
        ends = [*starts[1:], n]
        first = pc.take(order, pa.array(starts, pa.int64()))
        names = zip(*(pc.take(t.column(k), first).to_pylist() for k in keys), strict=True)
        flops = pc.take(t.column("flops"), order).to_pylist()
        return {key: math.fsum(flops[a:b]) for key, a, b in zip(names, starts, ends, strict=True)}


def split(ops: OpColumns, flops_per_step: float) -> list[dict]:
    """FLOPs per step by precision: `flops_per_step` (the median-step total) split in the proportions of
    the counted ops of all steps (columns precision, precision_source, flops); with the part each
    source (op, kernel, inputs, assumed) decided."""
    total = ops.total()
    if not total:
        return []
    by_source = ops.sums(("precision", "precision_source"))
    out = []
    for (p,), fp in ops.sums(("precision",)).items():
        src = {s: f for (q, s), f in by_source.items() if q == p}
        out.append({"precision": p, "flops_per_step": flops_per_step * fp / total, "share": fp / total,
                    "sources": {s: flops_per_step * float(f) / total for s, f in sorted(src.items())}})
    return sorted(out, key=lambda r: (-r["share"], r["precision"]))


def mfu_fields(split_rows: list[dict], flops_per_step: float | None, step_time_ns: int | None,
               gpu_key: str | None, peaks: dict[str, dict[str, float]]) -> tuple[dict, list[str]]:
    """Dense-bf16 MFU and precision-weighted MFU with their denominators (docs/FLOPS.md):

        MFU_bf16 = F / (P_bf16 * T)        MFU_pw = sum_p F_p / (P_p * T) = F / (P_eff * T),
        P_eff = F / sum_p (F_p / P_p)      (the FLOP-weighted harmonic mean of the peaks)

    F FLOPs per step, F_p those of precision p, P_p the dense peak of p, T the step time."""
    notes: list[str] = []
    pk = peaks.get(gpu_key, {}) if gpu_key else {}
    t = step_time_ns * 1e-9 if step_time_ns else None
    out: dict = {"peak_tflops_dense_bf16": pk.get("bf16"), "mfu_dense_bf16": None,
                 "peak_tflops_precision_weighted": None, "mfu_precision_weighted": None}
    if flops_per_step and t and pk.get("bf16"):
        out["mfu_dense_bf16"] = flops_per_step / (pk["bf16"] * 1e12 * t)
    if not split_rows:
        return out, notes
    ideal, missing = 0.0, []
    provenance = _peaks.PROVENANCE.get(gpu_key, "") if gpu_key else ""
    for r in split_rows:
        p = pk.get(PEAK_COLUMN.get(r["precision"], ""))
        r["peak_tflops"] = p
        r["peak_source"] = (f"peak table: {gpu_key} {PEAK_COLUMN[r['precision']]} dense "
                            f"({provenance})") if p else None
        r["mfu"] = r["flops_per_step"] / (p * 1e12 * t) if p and t else None
        if p:
            ideal += r["flops_per_step"] / (p * 1e12)
        elif r["flops_per_step"]:
            missing.append(r["precision"])
    if missing and gpu_key:
        notes.append(f"{gpu_key} has no {'/'.join(missing)} peak in the table: precision-weighted MFU not computed")
    if not missing and ideal and flops_per_step:
        out["peak_tflops_precision_weighted"] = flops_per_step / ideal / 1e12
        if t:
            out["mfu_precision_weighted"] = ideal / t
    return out, notes
