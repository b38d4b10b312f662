"""`assemble()`: the analyze document of one loaded job, section by section. `analyze`, the API
and each side of `diff` all build their document here (from a profile already loaded: nothing
here opens a file)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from .. import __version__
from ..analysis import breakdown, capture, layers, stalls
from ..analysis.analyze import flops_by_group, flops_totals, inputs_section
from ..budget import Budget, evaluate as evaluate_budget
from ..config import Rules
from ..engine.pipeline import TRANSIENT, build, start_sql, start_steps
from ..engine.session import Session
from ..engine.steps import all_steps
from ..flops import (
    early as flops_early,
    steps as _flops_steps,  # noqa: F401  (declares the FLOPs Python steps prefetched below)
)
from ..heap import give_back
from ..profile import Profile
from .options import AnalyzeOptions

if TYPE_CHECKING:   # (annotations only)
    from .types import ReportDocument

SCHEMA = "traceview.report/1"
RANK_STEPS = ("breakdown", "activity_attribution", "layer_times", "attribution_groups", "comm_ops",
              "comm_exposure", "coll_instances", "cp_host_syncs", "segments",
              "flops_shapes", "flops_ops", "flops_embedding_tokens", "flops_steps", "flops_step_tokens",
              "flops_op_precision", "flops_compute_kernels", "flops_kernels", "flops_shaped_ops", "rank_first_event",
              "top_kernels_rank", "stage_totals_rank", "comm_summary_rank")


# Where the session's steps run on one thread each (Session.one_thread_each: a second core idle):
# ATTRIBUTION begun on a thread once the step rule is chosen (breakdown.prepare's `beside`), while
# the activities are classed and the windows made here (it needs neither); then BESIDE_BREAKDOWN
# begun on a thread while the breakdown's segments are made here, and BESIDE_LAYERS while the
# attribution is taken. The critical paths' walks begin once the segments and the attribution are.
ATTRIBUTION = ("step_ranges", "layer_heads", "layer_blocks", "range_context", "activity_attribution")
BESIDE_BREAKDOWN = ("comm_ops", "cp_host_syncs")
BESIDE_LAYERS = ("activity_spans", "activity_shares", "top_kernels_rank")


def _attribution_beside(session: Session):
    """What breakdown.prepare calls once the step rule is chosen, on a session whose steps run on
    one thread each: the attribution's steps begun on a thread (range_context_raw, begun by
    layers.start, taken first: the thread's reader reads it)."""
    if not session.one_thread_each():
        return None

    def begin(params: dict) -> None:
        build(session, ["range_context_raw"], params)
        start_steps(session, ATTRIBUTION, params, "traceview-attribution")
    return begin


def _more_params(step_params: dict, rules: Rules) -> dict:
    """The parameters of RANK_STEPS beyond the step rule's: the attribution rules, and for the FLOPs
    steps `no_step_ranges` where it is known already (a job with a step rule has step ranges; a job
    without one decides it from step_ranges later, mfu.flops_params)."""
    out = layers.rule_params(rules)
    if not step_params["whole_trace"]:
        out["no_step_ranges"] = False
    return out


def _release(session: Session) -> None:
    """Between sections, on a mapped job: the pages of its tables that the last section's queries
    touched let go."""
    remote = session.profile.remote if session.profile is not None else None
    if remote is not None:
        remote.release_pages()


# Tables only some sections read (range_context for the attribution, the spans and shares for the
# layer times and the comm exposure): a caller done with the session once it has the document
# (`keep_tables=False`: analyze) lets each go once every step analyze builds from it is built, which
# is before or while the critical paths are walked (the run's peak). The a2a export x100: 220 MB of
# DuckDB tables.
SECTIONS_ONLY = ("range_context", "activity_shares", "activity_spans")
OTHER_COMMANDS = frozenset({"diff_syncs", "diff_units", "segment_groups"})   # diff's, the Perfetto export's


def _let_go_ranges(session: Session) -> None:
    """The profile's CPU ranges let go of (Session.let_go_of) once their last readers are built: on
    the nsys a2a export x100 155 MiB of its 245 MiB of canonical tables, held until now through the
    layer rows and the walks (the run's peak). Nothing analyze builds after this reads them (a step
    that did would be refused: engine/pipeline.build), nor does the walks' thread (stalls.WALKS_SKIP).
    Their memory goes back to the system at once (glibc keeps a heap's free pages below its top)."""
    if session.let_go_of("cpu_ranges"):
        give_back()


def _let_go(session: Session) -> None:
    steps = all_steps().values()
    for name in SECTIONS_ONLY:
        if session.materialized(name) and all(
                s.name in session.built for s in steps if name in s.requires and s.name not in OTHER_COMMANDS):
            session.drop(name)


def assemble(profile: Profile, opts: AnalyzeOptions | None = None, session: Session | None = None,
             rules: Rules | None = None, budget: Budget | None = None, keep_tables: bool = True) -> ReportDocument:
    """The `traceview.report/1` document of `profile`, computed in `session` (a new one when not
    given; its tables stay queryable unless `keep_tables` is False: then SECTIONS_ONLY are dropped
    once used and, where the job runs in this process, the profile's CPU ranges are let go once
    their last readers are built, its `cpu_ranges` then None: `_let_go_ranges`), with attribution
    `rules` and, when given, a `budget`."""
    opts = opts or AnalyzeOptions()
    rules = rules or Rules()
    session = session or Session(profile)
    # tables dropped soon after they are made are not compressed for their own sake (Session._made)
    session.short_lived = TRANSIENT | (frozenset() if keep_tables else frozenset(SECTIONS_ONLY))
    bopts = breakdown.Options(step_regex=opts.step_regex, comm_regex=list(opts.comm_regex) + rules.comm_regex,
                              top=opts.top, whole_trace=opts.whole_trace)
    layers.start(session, rules)    # (on a thread while the breakdown is computed)
    # on a small trace, the early FLOPs steps too (below for a large one: flops/early.py)
    early = flops_early.start_small(session, tokens=opts.tokens_per_step is None)
    # the per-rank steps the sections below build are asked for with the step rule's (on a mapped
    # job: one round of the workers)
    info = breakdown.prepare(session, bopts, also=RANK_STEPS, also_params=lambda p: _more_params(p, rules),
                             beside=_attribution_beside(session))
    if session.one_thread_each():
        # a second core idle (above: ATTRIBUTION): comm_ops (its optimizers its own on a small
        # trace: Session.optimizers_off) and the host syncs beside the segments
        start_sql(session, BESIDE_BREAKDOWN, {})
        build(session, ["segments", "breakdown"])
        start_sql(session, BESIDE_LAYERS, {}, "traceview-beside-layers")
        layers.prepare(session, rules)
        rows = breakdown.step_rows(session)
    else:
        rows = breakdown.step_rows(session)
        _release(session)
        layers.prepare(session, rules)
    # the FLOPs steps that read only the profile's tables, built on a thread while the critical
    # paths and the later sections are computed here (where a second core is given and the trace
    # is large: flops/early.py)
    early = early or flops_early.start(session, tokens=opts.tokens_per_step is None)
    if not keep_tables:
        _let_go(session)
    # the critical paths and stalls need the job's collectives and the steps' idle time: on a
    # mapped job the workers compute them while the sections below are computed here; in this
    # process the first chunk's rows are fetched on the walks' thread while the collectives are
    # matched (comm_ops first: a step with optimizers of its own would wait for the fetch)
    idle = {(r["rank"], r["step"]): r["idle_ns"] for r in rows}

    def flops_of(step_time_ns: int | None) -> dict:
        return flops_totals(session, step_time_ns, model=opts.model, model_config=opts.model_config,
                            tokens_per_step=opts.tokens_per_step, peak_tflops=opts.peak_tflops, dtype=opts.dtype)
    inputs: list[dict] | None = None
    flops: dict | None = None
    remote = session.profile.remote if session.profile is not None else None
    if remote is None:
        build(session, ["comm_ops"])
        begun = stalls.begin_rank_part(session, idle)
        try:
            job = stalls.job_inputs(session)
        except BaseException:
            begun.cancel()
            raise
        pending = begun.walk(job)
        if not keep_tables:
            # the CPU ranges' last readers (the capture times, the FLOPs) now, and the ranges let go
            # before the layer rows, which are made here while the paths are walked (the run's peak)
            inputs = inputs_section(profile, capture.first_events(session))
            if early is not None:
                early.adopt(session)
                early = None
            flops = flops_of(breakdown.summarize(rows)["step_time_ns"])
            _let_go_ranges(session)
    else:
        job = stalls.job_inputs(session)
        _release(session)
        pending = remote.start_stall_parts(session, job, idle)
    # a mapped job's long layer rows are written to its scratch folder as they are packed
    layer_rows = layers.layer_rows(session, *((str(remote.scratch / "doc-layers.rows"), remote.maps,
                                               remote.release_pages) if remote is not None else ()))
    _release(session)
    if not keep_tables:
        _let_go(session)
    if inputs is None:
        inputs = inputs_section(profile, capture.first_events(session))
    _release(session)
    top_kernels = breakdown.top_kernels(session, opts.top)
    _release(session)
    # the metrics return plain rows; this is where they become the typed document
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "tool": {"name": "traceview", "version": __version__},
        "inputs": inputs,
        "world_size": profile.world_size,
        "steps_source": (("whole trace (--whole-trace)" if opts.whole_trace else "whole trace (no step ranges found)")
                         if info["whole_trace"]
                         else f"CPU ranges matching {info['step_regex']}"),
        "summary": breakdown.summarize(rows),
        "per_rank": breakdown.per_rank(rows),
        "steps": rows,
        "top_kernels": top_kernels,
        "layers": layer_rows,
        "stages": layers.stage_totals(session),
        "attribution": layers.attribution_summary(session),
        "comm": layers.comm_rows(session),
        "warnings": list(profile.warnings) + info.get("warnings", []),
    }
    if opts.step_regex and info["whole_trace"] and not opts.whole_trace:
        doc["warnings"].append(f"--step-regex '{opts.step_regex}' matched no step range with GPU work: "
                               "the whole trace is one window per rank")
    if early is not None:
        early.adopt(session)
    if flops is None:
        flops = flops_of(doc["summary"]["step_time_ns"])
    fl = doc["flops"] = flops_by_group(session, flops, doc["layers"], len(doc["steps"]))
    if fl.get("mfu") is not None and fl["mfu"] > 1:
        doc["warnings"].append(f"delivered {fl['delivered_tflops_per_gpu']:,.1f} TFLOP/s per GPU is above the peak of "
                               f"{fl['peak_tflops']:,.1f} (MFU {fl['mfu']:.2f} > 1): check --peak-tflops, --dtype, "
                               "--tokens-per-step or the model")
    _release(session)
    if not keep_tables:
        _let_go(session)
    parts = pending()
    _release(session)
    sec = stalls.merge(job, parts, opts.top, remote.presorted_order if remote is not None else None)
    del parts, job
    doc["warnings"] += sec.pop("collective_warnings")
    doc.update(sec)
    if budget is not None:
        doc["budget"] = evaluate_budget(doc, budget)
    return cast("ReportDocument", doc)
