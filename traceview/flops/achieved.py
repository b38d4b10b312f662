"""Achieved TFLOP/s per kernel family, and what this GPU sustains on the same kind of op in the same trace.

Sustained ("achievable") TFLOP/s of a (kind, precision) pair: the 95th percentile, nearest rank, of
per-kernel TFLOP/s over the compute kernels of that kind (gemm / attention / conv: the kind of the op
that launched them) and precision (the op's) that last at least MIN_KERNEL_NS inside the step windows.
Compute kernels and their FLOPs: the engine step flops_compute_kernels. Nearest rank: the sorted
rates x_1 <= ... <= x_n give x_ceil(0.95 n); below 20 kernels that is the best one. Per-kernel FLOPs:
the op's FLOPs split over its compute kernels by duration.
"""
from __future__ import annotations

import math

MIN_KERNEL_NS = 10_000
PERCENTILE = 0.95
DEFINITION = (f"sustained = p95 (nearest rank) of per-kernel TFLOP/s over the compute kernels of the same kind and "
              f"precision lasting at least {MIN_KERNEL_NS // 1000} us in the step windows")


def nearest_rank(values: list[float], q: float = PERCENTILE) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    return xs[max(1, math.ceil(q * len(xs))) - 1]


def sustained(ck: list[dict]) -> list[dict]:
    """Achievable TFLOP/s per (kind, precision), see the module doc. `ck`: flops_compute_kernels rows."""
    groups: dict[tuple, list[float]] = {}
    for r in ck:
        if r["dur_ns"] >= MIN_KERNEL_NS and r["flops"] > 0:
            # FLOP/ns x 1e-3 = TFLOP/s (multiplied, not divided by 1e3: the reports' rates stay bit-identical)
            groups.setdefault((r["kind"], r["precision"]), []).append(r["flops"] / r["dur_ns"] * 1e-3)
    return [{"kind": kind, "precision": prec, "tflops": nearest_rank(rates), "kernels": len(rates),
             "best_tflops": max(rates)} for (kind, prec), rates in sorted(groups.items())]


def by_family(ck: list[dict], n_steps: int, achievable: list[dict], peaks: dict[str, float | None]) -> list[dict]:
    """Per (family, kind, precision): FLOPs and kernel time per step, achieved TFLOP/s (FLOPs / kernel
    time) and its ratios to the achievable of its kind and precision and to its precision's peak."""
    ach = {(a["kind"], a["precision"]): a["tflops"] for a in achievable}
    g: dict[tuple, list] = {}
    for r in ck:
        g.setdefault((r["family"], r["kind"], r["precision"]), []).append(r)
    # FLOPs summed exactly (math.fsum: correctly rounded, whatever the kernels' order)
    sums = {k: (math.fsum(r["flops"] for r in rs), sum(r["dur_ns"] for r in rs), len(rs)) for k, rs in g.items()}
    out = []
    for (fam, kind, prec), (flops, dur, n) in sorted(sums.items(), key=lambda kv: (-kv[1][0], kv[0][0])):
        t = flops / dur / 1e3 if dur else None
        a = ach.get((kind, prec))
        pk = peaks.get(prec)
        out.append({"family": fam, "kind": kind, "precision": prec,
                    "flops_per_step": flops / n_steps, "kernel_ns_per_step": dur / n_steps,
                    "kernels_per_step": n / n_steps, "achieved_tflops": t, "achievable_tflops": a,
                    "ratio_to_achievable": t / a if t is not None and a else None, "peak_tflops": pk,
                    "ratio_to_peak": t / pk if t is not None and pk else None})
    return out
