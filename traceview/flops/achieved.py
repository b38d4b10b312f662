"""Achieved TFLOP/s per kernel family, and what this GPU sustains on the same kind of op in the same trace.

Sustained ("achievable") TFLOP/s of a (kind, precision) pair: the 95th percentile, nearest rank, of
per-kernel TFLOP/s over the compute kernels of that kind (gemm / attention / conv: the kind of the op
that launched them) and precision (the op's) that last at least MIN_KERNEL_NS inside the step windows.
Nearest rank: the sorted rates x_1 <= ... <= x_n give x_ceil(0.95 n); below 20 kernels that is the
best one. Per-kernel FLOPs: the op's FLOPs split over its compute kernels by duration.
"""
from __future__ import annotations

import math

import polars as pl

MIN_KERNEL_NS = 10_000
PERCENTILE = 0.95
DEFINITION = (f"sustained = p95 (nearest rank) of per-kernel TFLOP/s over the compute kernels of the same kind and "
              f"precision lasting at least {MIN_KERNEL_NS // 1000} us in the step windows")


def nearest_rank(values: list[float], q: float = PERCENTILE) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    return xs[max(1, math.ceil(q * len(xs))) - 1]


def compute_kernels(kern: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Kernels of the classified ops with each op's FLOPs re-split over its compute kernels by duration
    (equally when they all last 0 ns); ops without a compute kernel keep their kernels' duration split.
    Columns: id, op_id, family, kind, precision, dur_ns, flops."""
    k = kern.join(ops.select(pl.col("id").alias("op_id"), pl.col("flops").alias("op_flops"), "kind", "precision"),
                  on="op_id", how="inner")
    k = k.with_columns(comp=pl.col("category").is_not_null())
    k = k.with_columns(has_comp=pl.col("comp").any().over("op_id"))
    k = k.filter(pl.col("comp") | ~pl.col("has_comp"))
    k = k.with_columns(csum=pl.col("dur_ns").sum().over("op_id"), cn=pl.len().over("op_id"))
    k = k.with_columns(flops=pl.when(~pl.col("has_comp")).then(pl.col("flops"))
                       .when(pl.col("csum") > 0).then(pl.col("op_flops") * pl.col("dur_ns") / pl.col("csum"))
                       .otherwise(pl.col("op_flops") / pl.col("cn")))
    return k.select("id", "op_id", "family", "kind", "precision", "dur_ns", "flops")


def sustained(ck: pl.DataFrame) -> list[dict]:
    """Achievable TFLOP/s per (kind, precision), see the module doc."""
    q = ck.filter((pl.col("dur_ns") >= MIN_KERNEL_NS) & (pl.col("flops") > 0)).with_columns(
        tflops=pl.col("flops") / pl.col("dur_ns") / 1e3)
    out = []
    for (kind, prec), g in sorted(q.group_by("kind", "precision"), key=lambda kv: kv[0]):
        rates = g["tflops"].to_list()
        out.append({"kind": kind, "precision": prec, "tflops": nearest_rank(rates), "kernels": len(rates),
                    "best_tflops": max(rates)})
    return out


def by_family(ck: pl.DataFrame, n_steps: int, achievable: list[dict], peaks: dict[str, float | None]) -> list[dict]:
    """Per (family, kind, precision): FLOPs and kernel time per step, achieved TFLOP/s (FLOPs / kernel
    time) and its ratios to the achievable of its kind and precision and to its precision's peak."""
    ach = {(a["kind"], a["precision"]): a["tflops"] for a in achievable}
    g = ck.group_by("family", "kind", "precision").agg(pl.col("flops").sum(), pl.col("dur_ns").sum(),
                                                       pl.len().alias("n"))
    out = []
    for r in g.sort(["flops", "family"], descending=[True, False]).to_dicts():
        t = r["flops"] / r["dur_ns"] / 1e3 if r["dur_ns"] else None
        a = ach.get((r["kind"], r["precision"]))
        pk = peaks.get(r["precision"])
        out.append({"family": r["family"], "kind": r["kind"], "precision": r["precision"],
                    "flops_per_step": r["flops"] / n_steps, "kernel_ns_per_step": r["dur_ns"] / n_steps,
                    "kernels_per_step": r["n"] / n_steps, "achieved_tflops": t, "achievable_tflops": a,
                    "ratio_to_achievable": t / a if t is not None and a else None, "peak_tflops": pk,
                    "ratio_to_peak": t / pk if t is not None and pk else None})
    return out
