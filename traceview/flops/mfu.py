"""Delivered TFLOP/s per GPU and MFU: conversions and the `flops` report section."""
from __future__ import annotations

import statistics
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from ..errors import UsageError
from .convert import TERA
from . import achieved as ach
from . import precision as prec
from . import trace_flops as tf
from .models import ModelConfig, param_counts, training_flops_per_token
from .peaks import PEAKS, match_gpu, normalize_dtype, peak_tflops as lookup_peak

NO_SHAPES = "trace has no recorded shapes (record_shapes off): trace-based FLOPs unavailable"


# ---- trace tables -------------------------------------------------------------------------------

def _tables(source) -> dict[str, pa.Table]:
    """cpu_ranges, gpu_activities, meta from a Profile, a dict of tables or a DuckDB connection."""
    names = ("cpu_ranges", "gpu_activities", "meta")
    if hasattr(source, "profile") and hasattr(source, "con"):  # traceview.db.Session
        source = source.profile
    if isinstance(source, duckdb.DuckDBPyConnection):
        return {n: tf._arrow(source, f"SELECT * FROM {n}") for n in names}
    if isinstance(source, dict):
        return {n: source[n] for n in names if n in source}
    return {n: getattr(source, n) for n in names}


def trace_flops(source) -> tuple[pa.Table, pa.Table]:
    """(per-op FLOPs, per-kernel FLOPs) of a loaded profile; see trace_flops.op_flops/kernel_flops."""
    t = _tables(source)
    ops = tf.op_flops(t["cpu_ranges"])
    return ops, tf.kernel_flops(ops, t["cpu_ranges"], t["gpu_activities"])


def _in_steps(counted: pl.DataFrame, windows: pa.Table) -> pl.DataFrame:
    """Counted ops with the step whose window (same rank) holds their start."""
    w = pl.from_arrow(windows.select(["rank", "step", "start_ns", "end_ns"])).rename(
        {"start_ns": "w_start", "end_ns": "w_end"}).with_columns(pl.col("rank").cast(pl.Int32))
    j = counted.join(w, on="rank")
    return j.filter((pl.col("start_ns") >= pl.col("w_start")) & (pl.col("start_ns") < pl.col("w_end")))


def flops_section(source, step_time_ns: int | None, gpu_name: str | None = None,
                  model: ModelConfig | None = None, tokens_per_step: int | None = None,
                  peak_tflops: float | None = None, dtype: str | None = None,
                  steps: pa.Table | None = None) -> dict[str, Any]:
    """The `flops` report section (JSON-able). `source`: Profile, dict of Arrow tables or DuckDB
    connection or db.Session holding cpu_ranges/gpu_activities/meta (or None: model only).
    `step_time_ns`: median step time. `steps`: optional CPU step windows (rank, step, start_ns,
    end_ns, or the step_ranges query's cpu_start_ns/cpu_end_ns); default: ProfilerStep#N ranges.
    FLOPs per step are per GPU: median over steps, mean over ranks."""
    notes: list[str] = []
    if steps is not None and "cpu_start_ns" in steps.column_names:  # the step_ranges query's columns
        steps = steps.select(["rank", "step", "cpu_start_ns", "cpu_end_ns"]).rename_columns(
            ["rank", "step", "start_ns", "end_ns"])
    out: dict[str, Any] = {"status": "ok", "method": None, "flops_per_step": None}
    t = _tables(source) if source is not None else {}
    cr = t.get("cpu_ranges")
    if gpu_name is None and t.get("meta") is not None and t["meta"].num_rows:
        names = sorted({n for n in t["meta"].column("gpu_name").to_pylist() if n})
        gpu_name = names[0] if names else None
        if len(names) > 1:
            notes.append(f"ranks report different GPUs {names}: peak of {gpu_name}")

    # -- from the trace
    trace_fps = trace_dtype = detail = None
    if cr is not None and cr.num_rows:
        ops_rows = pl.from_arrow(cr.select(["kind", "input_dims"])).filter(pl.col("kind") == "op")
        if ops_rows.height and ops_rows["input_dims"].null_count() == ops_rows.height:
            notes.append(NO_SHAPES)
        else:
            ops = tf.op_flops(cr)
            o = pl.from_arrow(ops)
            counted = o.filter(pl.col("counted"))
            unknown = o.filter(pl.col("flops").is_null()).height
            if unknown:
                notes.append(f"{unknown} matrix/attention ops without usable shapes (not counted)")
            if counted.height == 0:
                notes.append("no matrix or attention ops with recorded shapes: trace-based FLOPs unavailable")
            else:
                windows = steps if steps is not None else tf.step_windows(cr)
                if windows.num_rows == 0:
                    notes.append("no step ranges (ProfilerStep#N): the whole trace counted as one step")
                    inwin = counted.with_columns(step=pl.lit(0, pl.Int64))
                else:
                    inwin = _in_steps(counted, windows)
                    out["trace_steps"] = int(pl.from_arrow(windows)["step"].n_unique())
                if inwin.height == 0:
                    notes.append("no matrix or attention ops inside the step windows: trace-based FLOPs unavailable")
                else:
                    per_step = inwin.group_by("rank", "step").agg(pl.col("flops").sum())
                    trace_fps = float(per_step.group_by("rank").agg(pl.col("flops").median())["flops"].mean())
                    detail = _precision_detail(inwin, cr, ops, t.get("gpu_activities"), trace_fps, per_step.height)
                    by_pr = detail["ops"].group_by("precision").agg(pl.col("flops").sum()).sort(["flops", "precision"])
                    trace_dtype = prec.PEAK_COLUMN.get(by_pr["precision"][-1]) if by_pr.height else None
                    by_op = inwin.group_by("name").agg(pl.col("flops").sum()).sort("name")
                    out["trace_flops_by_op"] = {r["name"]: r["flops"] / per_step.height for r in by_op.to_dicts()}
                    out["trace_ops_counted"] = inwin.height
        if tokens_per_step is None:
            tok = tf.tokens_per_step(cr, steps if steps is not None else tf.step_windows(cr))
            if tok:
                tokens_per_step = round(statistics.mean(tok.values()))
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


def _precision_detail(inwin: pl.DataFrame, cr: pa.Table, ops: pa.Table, gpu: pa.Table | None,
                      flops_per_step: float, n_steps: int) -> dict:
    """Counted in-window ops with their precision, their compute kernels and the precision split."""
    kern = None
    if gpu is not None and gpu.num_rows:
        kern = prec.kernels_of_ops(tf.kernel_flops(ops, cr, gpu), gpu)
    classified = prec.classify_ops(inwin.select("id", "name", "flops"), cr, kern)
    ck = ach.compute_kernels(kern, classified) if kern is not None else None
    return {"ops": classified, "kernels": ck, "split": prec.split(classified, flops_per_step),
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
    if ck is None or ck.height == 0:
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
    total = float(ops["flops"].sum())
    by = ops.group_by("kind", "precision").agg(pl.col("flops").sum()).to_dicts()
    lacking = sorted(f"{r['kind']} {r['precision']}" for r in by if r["flops"] and not a.get((r["kind"], r["precision"])))
    out["mfu_achievable"] = None
    if lacking:
        notes.append(f"no kernel of {', '.join(lacking)} lasts {ach.MIN_KERNEL_NS // 1000} us: "
                     "MFU against the achievable not computed")
    elif step_time_ns and total:
        ideal = sum(fps * r["flops"] / total / (a[(r["kind"], r["precision"])] * 1e12) for r in by if r["flops"])
        out["mfu_achievable"] = ideal / (step_time_ns * 1e-9)
    return out


def group_tflops(kernel_flops: pa.Table, groups: pa.Table, compute_time: pa.Table | None = None,
                 gpu_activities: pa.Table | None = None) -> pa.Table:
    """Achieved TFLOP/s per (layer, phase, stage). `groups`: id (gpu activity), layer, phase, stage.
    `compute_time`: layer, phase, stage, time_ns; if None, the summed duration of the group's
    kernels in `gpu_activities`. Returns layer, phase, stage, flops, time_ns, tflops."""
    con = duckdb.connect()
    con.register("kf", kernel_flops.select(["id", "flops"]))
    con.register("grp", groups.select(["id", "layer", "phase", "stage"]))
    if compute_time is None:
        if gpu_activities is None:
            raise UsageError(None, "group_tflops needs compute_time or gpu_activities")
        con.register("g", gpu_activities.select(["id", "kind", "start_ns", "end_ns"]))
        time_sql = """SELECT layer, phase, stage, sum(g.end_ns - g.start_ns) AS time_ns
                      FROM grp JOIN g USING (id) WHERE g.kind = 'kernel' GROUP BY ALL"""
    else:
        con.register("ct", compute_time.select(["layer", "phase", "stage", "time_ns"]))
        time_sql = "SELECT layer, phase, stage, time_ns FROM ct"
    out = tf._arrow(con, f"""
        WITH f AS (SELECT layer, phase, stage, sum(kf.flops) AS flops FROM grp JOIN kf USING (id) GROUP BY ALL),
             t AS ({time_sql}),
             k AS (SELECT layer, phase, stage FROM f UNION SELECT layer, phase, stage FROM t)
        SELECT k.layer, k.phase, k.stage, coalesce(f.flops, 0.0) AS flops, t.time_ns,
               CASE WHEN t.time_ns > 0 THEN coalesce(f.flops, 0.0) / (t.time_ns * 1e-9) / 1e12 END AS tflops
        FROM k
        LEFT JOIN f ON f.layer IS NOT DISTINCT FROM k.layer AND f.phase IS NOT DISTINCT FROM k.phase
                   AND f.stage IS NOT DISTINCT FROM k.stage
        LEFT JOIN t ON t.layer IS NOT DISTINCT FROM k.layer AND t.phase IS NOT DISTINCT FROM k.phase
                   AND t.stage IS NOT DISTINCT FROM k.stage
        ORDER BY k.layer NULLS LAST, k.phase, k.stage""")
    con.close()
    return out
