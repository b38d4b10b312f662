"""Delivered TFLOP/s per GPU and MFU: conversions and the `flops` report section."""
from __future__ import annotations

from typing import Any

from ..engine.pipeline import build, prefetch
from ..engine.session import Session
from ..errors import UsageError
from . import (
    achieved as ach,
    precision as prec,
    steps as _steps,  # noqa: F401  (declares the Python FLOPs steps)
)
from .convert import TERA
from .models import ModelConfig, param_counts, training_flops_per_token
from .peaks import PEAKS, match_gpu, normalize_dtype, peak_tflops as lookup_peak

NO_SHAPES = "trace has no recorded shapes (record_shapes off): trace-based FLOPs unavailable"


# ---- the trace's FLOPs: engine steps over the analysis session ----------------------------------

STEPS_SQL = "SELECT count(*) AS n, count(DISTINCT step) AS steps FROM step_ranges"
SHAPED_SQL = ("SELECT coalesce(sum(ops), 0)::BIGINT AS ops, coalesce(sum(shaped), 0)::BIGINT AS shaped "
              "FROM flops_shaped_ops")
OPS_SQL = ("SELECT count(*) FILTER (WHERE flops IS NULL) AS unknown, count(*) FILTER (WHERE counted) AS counted "
           "FROM flops_ops")


def flops_params(session: Session) -> dict:
    """The FLOPs steps' parameters in an analysis session: `no_step_ranges` when the job has no step
    ranges (the breakdown's step_ranges is empty): the whole trace is then one step."""
    if "step_ranges" not in session.tables():
        raise UsageError(None, "FLOPs need the analysis' step ranges: run breakdown.prepare on the session first")
    return {"no_step_ranges": session.rows(STEPS_SQL)[0]["n"] == 0}


def _per_rank_medians(rows: list[dict], key: str, whole: type = float) -> list:
    """Per rank the median over its steps of `key` (a list of those medians, by rank)."""
    by: dict[int, list] = {}
    for r in rows:
        by.setdefault(r["rank"], []).append(r[key])
    if not by:
        return []
    import statistics  # (and fractions, decimal: only where there are steps' values)
    return [whole(statistics.median(v)) for _, v in sorted(by.items())]


def flops_section(session: Session | None, step_time_ns: int | None, gpu_name: str | None = None,
                  model: ModelConfig | None = None, tokens_per_step: int | None = None,
                  peak_tflops: float | None = None, dtype: str | None = None) -> dict[str, Any]:
    """The `flops` report section (JSON-able). `session`: the analysis session (after
    breakdown.prepare: its step_ranges are the steps), or None (model only). `step_time_ns`: median
    step time. FLOPs per step are per GPU: median over steps, mean over ranks."""
    notes: list[str] = []
    out: dict[str, Any] = {"status": "ok", "method": None, "flops_per_step": None}
    profile = session.profile if session is not None else None
    cr = profile.cpu_ranges if profile is not None else None
    meta = profile.meta if profile is not None else None
    if gpu_name is None and meta is not None and meta.num_rows:
        names = sorted({n for n in meta.column("gpu_name").to_pylist() if n})
        gpu_name = names[0] if names else None
        if len(names) > 1:
            notes.append(f"ranks report different GPUs {names}: peak of {gpu_name}")

    # -- from the trace
    trace_fps = trace_dtype = detail = None
    if session is not None and cr is not None and cr.num_rows:
        params = flops_params(session)
        build(session, ["flops_shaped_ops"])       # per rank (a mapped job: on the workers)
        shaped = session.rows(SHAPED_SQL)[0]
        if shaped["ops"] and shaped["shaped"] == 0:
            notes.append(NO_SHAPES)
        else:
            prefetch(session, ["flops_steps", "flops_op_precision", "flops_compute_kernels", "flops_kernels"]
                     + (["flops_step_tokens"] if tokens_per_step is None else []), params)
            build(session, ["flops_steps"], params)
            counts = session.rows(OPS_SQL)[0]
            if counts["unknown"]:
                notes.append(f"{counts['unknown']} matrix/attention ops without usable shapes (not counted)")
            if counts["counted"] == 0:
                notes.append("no matrix or attention ops with recorded shapes: trace-based FLOPs unavailable")
            else:
                if params["no_step_ranges"]:
                    notes.append("no step ranges (ProfilerStep#N): the whole trace counted as one step")
                else:
                    out["trace_steps"] = session.rows(STEPS_SQL)[0]["steps"]
                per_step = session.table("flops_steps").to_pylist()
                if not per_step:
                    notes.append("no matrix or attention ops inside the step windows: trace-based FLOPs unavailable")
                else:
                    medians = _per_rank_medians(per_step, "flops")
                    trace_fps = float(sum(medians) / len(medians))
                    detail = _precision_detail(session, params, trace_fps, len(per_step))
                    ops = detail["ops"]
                    by_pr = sorted((f, k[0]) for k, f in ops.sums(("precision",)).items())
                    trace_dtype = prec.PEAK_COLUMN.get(by_pr[-1][1]) if by_pr else None
                    by_op = sorted(ops.sums(("name",)).items())
                    out["trace_flops_by_op"] = {k[0]: f / len(per_step) for k, f in by_op}
                    out["trace_ops_counted"] = len(ops)
        if tokens_per_step is None:
            build(session, ["flops_step_tokens"], params)
            tok = _per_rank_medians(session.table("flops_step_tokens").to_pylist(), "tokens", int)
            if tok:
                import statistics
                tokens_per_step = round(statistics.mean(tok))
                out["tokens_per_step_source"] = "trace (aten::embedding input shapes)"
    if tokens_per_step is not None and "tokens_per_step_source" not in out:
        out["tokens_per_step_source"] = "given"
    out["tokens_per_step"] = tokens_per_step

    # -- from the model
    model_fps = None
    if model is not None:
        fpt = training_flops_per_token(model)
        out["model"] = model.name
        out["model_flops_per_token"] = float(fpt)
        pc = param_counts(model)
        out["model_params"] = {k: pc[k] for k in ("total", "active", "active_excl_embedding")}
        if tokens_per_step:
            model_fps = float(fpt * tokens_per_step)
        else:
            notes.append("model-based FLOPs need tokens per step (--tokens-per-step): none given or recorded")
    out["trace_flops_per_step"] = trace_fps
    out["model_flops_per_step"] = model_fps
    if trace_fps and model_fps:
        out["trace_to_model_ratio"] = trace_fps / model_fps
    if trace_fps:
        out["method"], out["flops_per_step"] = "trace", trace_fps
    elif model_fps:
        out["method"], out["flops_per_step"] = "model", model_fps
        if cr is not None and cr.num_rows:
            notes.append("fell back to the model count")
    else:
        out["status"] = "unavailable"
        if model is None:
            notes.append("no FLOPs: trace-based count unavailable and no model given (--model/--model-config)")

    # -- rates and MFU
    out["step_time_ns"] = step_time_ns
    fps = out["flops_per_step"]
    delivered = fps / (step_time_ns * 1e-9) / TERA if fps and step_time_ns else None
    out["delivered_tflops_per_gpu"] = delivered
    if tokens_per_step and step_time_ns:
        out["tokens_per_second_per_gpu"] = tokens_per_step / (step_time_ns * 1e-9)
    if dtype is None and trace_dtype:
        dt, how = trace_dtype, "trace (precision of most matmul FLOPs)"
    else:
        dt, how = normalize_dtype(dtype), ("given" if dtype else "assumed")
        if dtype is None and peak_tflops is None:
            notes.append("data type not known: bf16 assumed (--dtype)")
    out["dtype"], out["dtype_source"] = dt, how
    out["gpu_name"] = gpu_name
    out["gpu"] = match_gpu(gpu_name)
    peak = None
    if peak_tflops is not None:
        peak, out["peak_source"] = float(peak_tflops), "given (--peak-tflops)"
    else:
        try:
            peak, key, _ = lookup_peak(gpu_name, dt)
            out["peak_source"] = f"peak table: {key} {dt} dense"
        except UsageError as e:
            notes.append(e.problem)
            if out["status"] == "ok":
                out["status"] = "no_peak"
    out["peak_tflops"] = peak
    out["mfu"] = delivered / peak if delivered is not None and peak else None
    out.update(_precision_fields(detail if out["method"] == "trace" else None, fps, step_time_ns, out["gpu"], notes))
    out["notes"] = notes
    return out


def _precision_detail(session: Session, params: dict, flops_per_step: float, n_steps: int) -> dict:
    """Counted in-step ops with their precision (flops_op_precision), their compute kernels
    (flops_compute_kernels; None without GPU activity) and the precision split."""
    build(session, ["flops_op_precision", "flops_compute_kernels"], params)
    ops = prec.OpColumns.of(session.table("flops_op_precision"), ("name", "kind", "precision", "precision_source"))
    gpu = session.profile.gpu_activities if session.profile is not None else None
    ck = session.table("flops_compute_kernels").to_pylist() if gpu is not None and gpu.num_rows else None
    return {"ops": ops, "kernels": ck, "split": prec.split(ops, flops_per_step),
            "n_steps": max(1, n_steps), "flops_per_step": flops_per_step}


def _precision_fields(detail: dict | None, fps: float | None, step_time_ns: int | None, gpu_key: str | None,
                      notes: list[str]) -> dict:
    """FLOPs per precision, dense-bf16 and precision-weighted MFU, achievable TFLOP/s, per-family rates."""
    rows = detail["split"] if detail else []
    out, more = prec.mfu_fields(rows, fps, step_time_ns, gpu_key, PEAKS)
    notes += more
    if detail is None:
        return out
    out["flops_by_precision"] = rows
    assumed = sum(r["sources"].get(prec.ASSUMED, 0.0) for r in rows)
    out["assumed_bf16_flops_per_step"] = assumed
    if assumed:
        notes.append(f"precision not visible for {assumed / fps:.1%} of the FLOPs: assumed bf16")
    ck = detail["kernels"]
    if not ck:
        return out
    achievable = ach.sustained(ck)
    for a in achievable:
        a["min_kernel_ns"] = ach.MIN_KERNEL_NS
    out["achievable"], out["achievable_definition"] = achievable, ach.DEFINITION
    peaks = {r["precision"]: r.get("peak_tflops") for r in rows}
    out["by_family"] = ach.by_family(ck, detail["n_steps"], achievable, peaks)
    # MFU against the achievable: sum over (kind, precision) of F / (A * T)
    a = {(x["kind"], x["precision"]): x["tflops"] for x in achievable}
    ops = detail["ops"]
    total = ops.total()
    by = [{"kind": k, "precision": p, "flops": f} for (k, p), f in ops.sums(("kind", "precision")).items()]
    lacking = sorted(f"{r['kind']} {r['precision']}" for r in by
                     if r["flops"] and not a.get((r["kind"], r["precision"])))
    out["mfu_achievable"] = None
    if lacking:
        notes.append(f"no kernel of {', '.join(lacking)} lasts {ach.MIN_KERNEL_NS // 1000} us: "
                     "MFU against the achievable not computed")
    elif step_time_ns and total:
        ideal = sum(fps * r["flops"] / total / (a[(r["kind"], r["precision"])] * 1e12) for r in by if r["flops"])
        out["mfu_achievable"] = ideal / (step_time_ns * 1e-9)
    return out


def by_group(session: Session, layer_rows: list[dict], n_steps: int) -> list[dict]:
    """Achieved TFLOP/s per (layer, phase, stage) per step: the kernel FLOPs the attribution gives
    each group (flops_groups) over the group's compute time (the layer rows' compute_ns, summed)."""
    build(session, ["flops_groups"])
    time: dict[tuple, int] = {}
    for r in layer_rows:
        k = (r["layer"], r["phase"], r["stage"])
        time[k] = time.get(k, 0) + r["compute_ns"]
    out = []
    for r in session.table("flops_groups").to_pylist():
        if not r["flops"]:
            continue
        t = time.get((r["layer"], r["phase"], r["stage"]))
        out.append({"layer": r["layer"], "phase": r["phase"], "stage": r["stage"],
                    "flops_per_step": r["flops"] / n_steps,
                    "compute_ns_per_step": (t or 0) / n_steps,
                    "achieved_tflops": r["flops"] / (t * 1e-9) / 1e12 if t is not None and t > 0 else None})
    return out
