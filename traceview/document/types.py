"""The typed sections of the two report documents: `traceview.report/1` (ReportDocument, what
`analyze` writes) and `traceview.diff/1` (DiffDocument, what `diff` writes).

TypedDicts, so a document is still the plain dict that is written as JSON (byte for byte the
same) while mypy checks every key a renderer or the diff reads. The JSON Schemas in
traceview/data/ stay the public contract (the tests validate every report against them); these
types follow them field for field: a required property is a plain key, an optional one
NotRequired, `["integer", "null"]` is `int | None`. Time fields (`*_ns`) that the schema allows
to be fractional are `float` (an int is a float to mypy).
"""
from __future__ import annotations

from typing import Any

from typing_extensions import NotRequired, TypedDict, TypeIs

# --- traceview.report/1 ---------------------------------------------------------------------------

class Breakdown(TypedDict):
    step_time_ns: float
    compute_ns: float
    exposed_comm_ns: float
    exposed_memory_ns: float
    idle_ns: float
    overlapped_comm_ns: float
    comm_ns: float


class BudgetCheck(TypedDict):
    metric: str
    scope: str
    rank: int | None
    value: float | None
    limit: float
    ok: bool
    message: str


class Tool(TypedDict):
    name: str
    version: str


class Input(TypedDict):
    rank: int
    file: str
    format: str
    version: NotRequired[str | None]
    gpu: NotRequired[str | None]
    sm_count: NotRequired[int | None]
    rank_source: NotRequired[str | None]
    capture_time: NotRequired[str | None]
    capture_epoch_ns: NotRequired[int | None]
    capture_source: NotRequired[str | None]


class Summary(Breakdown):
    """The job's representative step, one real (rank, step) window with its own parts: per rank t"""
    ranks: int
    steps: int
    overlap_ratio: float
    rank: NotRequired[int]
    step: NotRequired[int]


class RankSummary(Breakdown):
    rank: int
    steps: int
    ranks: NotRequired[int]
    overlap_ratio: float
    step: NotRequired[int]


class StepRow(Breakdown):
    rank: int
    step: int
    start_ns: int


TopKernel = TypedDict("TopKernel", {   # `class` is a Python keyword: the functional form
    "name": str,
    "class": str,
    "kind": NotRequired[str],
    "count": int,
    "total_ns": float,
})


class LayerRow(Breakdown):
    rank: int
    step: int
    region: str
    layer: int | None
    phase: str
    stage: str
    activities: NotRequired[int]
    layer_inferred: NotRequired[bool]


class StageRow(Breakdown):
    stage: str


class CrossThread(TypedDict):
    """work launched by a thread with no annotation (autograd engine, comm or data-loader thread)"""
    count: int
    busy_ns: int
    share: float
    ambiguous_count: int


class Attribution(TypedDict):
    """optional"""
    activities: NotRequired[int]
    in_layers_share: float
    outside_layers_share: float
    unattributed_count: int
    unattributed_share: float
    backward_linked_share: NotRequired[float | None]
    layer_unknown_share: NotRequired[float]
    inferred_layer_share: NotRequired[float]
    cross_thread: NotRequired[CrossThread]


class CommKind(TypedDict):
    kind: str
    count: int
    bytes: NotRequired[int | None]
    total_ns: float
    exposed_ns: float
    ops: NotRequired[int]


class FlopsGroup(TypedDict):
    layer: int | None
    phase: str
    stage: str
    flops_per_step: float
    compute_ns_per_step: NotRequired[float]
    achieved_tflops: NotRequired[float | None]


class ModelParams(TypedDict):
    """parameter counts of the model given (--model/--model-config)"""
    total: int
    active: int
    active_excl_embedding: int


class PrecisionSources(TypedDict):
    """FLOPs per step by what decided the precision"""
    op: NotRequired[float]
    kernel: NotRequired[float]
    inputs: NotRequired[float]
    assumed: NotRequired[float]


class PrecisionFlops(TypedDict):
    precision: str
    flops_per_step: float
    share: float
    sources: PrecisionSources
    peak_tflops: NotRequired[float | None]
    mfu: NotRequired[float | None]
    peak_source: NotRequired[str | None]


class Achievable(TypedDict):
    kind: str
    precision: str
    tflops: float | None
    best_tflops: NotRequired[float]
    kernels: int
    min_kernel_ns: NotRequired[int]


class FlopsFamily(TypedDict):
    family: str
    kind: str
    precision: str
    flops_per_step: float
    kernel_ns_per_step: float
    kernels_per_step: NotRequired[float]
    achieved_tflops: NotRequired[float | None]
    achievable_tflops: NotRequired[float | None]
    ratio_to_achievable: NotRequired[float | None]
    peak_tflops: NotRequired[float | None]
    ratio_to_peak: NotRequired[float | None]


class Flops(TypedDict):
    """optional: FLOPs, delivered TFLOP/s per GPU, peak, MFU"""
    trace_flops_per_step: NotRequired[float | None]
    model_flops_per_step: NotRequired[float | None]
    trace_to_model_ratio: NotRequired[float | None]
    trace_steps: NotRequired[int]
    trace_flops_by_op: NotRequired[dict[str, float]]
    trace_ops_counted: NotRequired[int]
    tokens_per_step_source: NotRequired[str]
    tokens_per_second_per_gpu: NotRequired[float]
    peak_source: NotRequired[str]
    status: NotRequired[str]
    method: NotRequired[str | None]
    flops_per_step: NotRequired[float | None]
    delivered_tflops_per_gpu: NotRequired[float | None]
    peak_tflops: NotRequired[float | None]
    mfu: NotRequired[float | None]
    dtype: NotRequired[str | None]
    gpu: NotRequired[str | None]
    gpu_name: NotRequired[str | None]
    step_time_ns: NotRequired[float | None]
    tokens_per_step: NotRequired[int | None]
    notes: NotRequired[list[str]]
    by_group: NotRequired[list[FlopsGroup]]
    model: NotRequired[str | None]
    model_params: NotRequired[ModelParams]
    dtype_source: NotRequired[str | None]
    flops_by_precision: NotRequired[list[PrecisionFlops]]
    assumed_bf16_flops_per_step: NotRequired[float | None]
    peak_tflops_dense_bf16: NotRequired[float | None]
    mfu_dense_bf16: NotRequired[float | None]
    peak_tflops_precision_weighted: NotRequired[float | None]
    mfu_precision_weighted: NotRequired[float | None]
    mfu_achievable: NotRequired[float | None]
    achievable_definition: NotRequired[str]
    achievable: NotRequired[list[Achievable]]
    by_family: NotRequired[list[FlopsFamily]]


class CriticalPathWindow(TypedDict):
    rank: int
    step: int
    start_ns: NotRequired[int]
    end_ns: NotRequired[int]
    window_ns: NotRequired[float]
    composition: NotRequired[dict[str, float]]
    stalls_by_cause: NotRequired[dict[str, float]]
    # the parts of the path (they add up to window_ns) and the measures beside them, flat in the
    # entry as `analyze` writes them (the schema's description lists them)
    compute_ns: NotRequired[float]
    all_to_all_ns: NotRequired[float]
    other_comm_ns: NotRequired[float]
    launch_bound_ns: NotRequired[float]
    host_sync_ns: NotRequired[float]
    idle_ns: NotRequired[float]
    overlapped_comm_ns: NotRequired[float]
    peer_wait_ns: NotRequired[float]
    imbalance_ns: NotRequired[float]
    stall_ns: NotRequired[float]
    gpu_idle_ns: NotRequired[float | None]
    idle_assigned_ns: NotRequired[float]
    share: NotRequired[dict[str, float]]


class Stall(TypedDict):
    rank: int
    step: int | None
    layer: NotRequired[int | None]
    phase: NotRequired[str | None]
    stage: NotRequired[str | None]
    cause: str
    start_ns: int
    dur_ns: float
    evidence: NotRequired[Any]


class Collective(TypedDict):
    kind: str
    group: NotRequired[Any]
    index: NotRequired[int | None]
    start_ns: dict[str, float | None] | list[float | None]
    dur_ns: dict[str, float | None] | list[float | None]
    straggler: NotRequired[int | None]
    skew_ns: NotRequired[float | None]
    step: NotRequired[int | None]
    wait_ns: NotRequired[dict[str, float | None] | list[float | None]]
    ranks: NotRequired[int]
    # where the collective ran and who arrived first, as analyze writes them beside the schema's fields
    layer: NotRequired[int | None]
    phase: NotRequired[str | None]
    stage: NotRequired[str | None]
    earliest_rank: NotRequired[int]
    earliest_ns: NotRequired[float]
    latest_ns: NotRequired[float]
    imbalance: NotRequired[dict[str, Any] | None]


class Straggler(TypedDict):
    rank: int
    times_last: NotRequired[int]
    collectives: NotRequired[int]
    total_skew_ns: NotRequired[float]
    wait_caused_ns: NotRequired[float]
    max_skew_ns: NotRequired[float]


class Budget(TypedDict):
    """optional: present with --budget FILE"""
    file: str
    violations: list[BudgetCheck]
    checked: list[BudgetCheck]


class SkippedRank(TypedDict):
    """a trace file --skip-bad-ranks left out, and why"""
    file: str
    reason: str


class ReportDocument(TypedDict):
    """The document `traceview analyze -f json` writes"""
    schema: str
    tool: Tool
    inputs: list[Input]
    world_size: int
    steps_source: str
    summary: Summary
    per_rank: list[RankSummary]
    steps: list[StepRow]
    top_kernels: list[TopKernel]
    layers: NotRequired[list[LayerRow]]
    stages: NotRequired[list[StageRow]]
    attribution: NotRequired[Attribution]
    comm: NotRequired[list[CommKind]]
    flops: NotRequired[Flops]
    critical_path: NotRequired[list[CriticalPathWindow]]
    stalls: NotRequired[list[Stall]]
    stall_summary: NotRequired[dict[str, Any]]
    a2a: NotRequired[list[dict[str, Any]]]
    collectives: NotRequired[list[Collective]]
    stragglers: NotRequired[list[Straggler]]
    clock: NotRequired[dict[str, Any]]
    collective_warnings: NotRequired[list[str]]
    budget: NotRequired[Budget]
    skipped_ranks: NotRequired[list[SkippedRank]]
    warnings: list[str]



# --- traceview.diff/1 -----------------------------------------------------------------------------


class DiffInput(TypedDict):
    file: str
    format: str
    rank: int
    gpu: NotRequired[str | None]


class DiffStepTime(TypedDict):
    rank: int
    step: int
    step_time_ns: int


class DiffMedianStep(TypedDict):
    rank: int
    step: int


class DiffSpread(TypedDict):
    method: str
    spread_ns: int
    mad_ns: NotRequired[int]
    n: NotRequired[int]
    min_ns: NotRequired[int]
    max_ns: NotRequired[int]


class DiffSideBreakdown(TypedDict):
    """The median step's parts (ns): compute, exposed comm, exposed memory and idle add up to ste"""
    compute_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int
    overlapped_comm_ns: int


class DiffSide(TypedDict):
    paths: list[str]
    inputs: list[DiffInput]
    world_size: NotRequired[int | None]
    ranks: int
    steps: int
    steps_source: NotRequired[str | None]
    step_time_ns: int
    step_times_ns: list[DiffStepTime]
    median_set: list[DiffMedianStep]
    spread: DiffSpread
    breakdown: DiffSideBreakdown
    delivered_tflops: NotRequired[float | None]
    mfu: NotRequired[float | None]
    warnings: NotRequired[list[str]]
    label: NotRequired[str]


class ExplanationItem(TypedDict):
    rank: int
    kind: str
    contribution_ns: int
    gross_ns: NotRequired[int]
    share: NotRequired[float | None]
    text: str
    parts_ns: NotRequired[dict[str, int]]
    layers: NotRequired[list[int]]
    phases: NotRequired[list[str]]
    moved: NotRequired[bool]


class DiffFamily(TypedDict):
    family: str
    base_ns: int
    new_ns: int
    delta_ns: int
    base_count: float
    new_count: float


class DiffTool(TypedDict):
    name: str
    version: str


class DeltaBreakdown(TypedDict):
    compute_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int
    overlapped_comm_ns: int


class DeltaStageParts(TypedDict):
    compute_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int
    overlapped_comm_ns: int


class DeltaStage(TypedDict):
    stage: str | None
    base_ns: int
    new_ns: int
    delta_ns: int
    delta_parts_ns: NotRequired[DeltaStageParts]


class DeltaComm(TypedDict):
    kind: str | None
    base_total_ns: int
    new_total_ns: int
    base_exposed_ns: int
    new_exposed_ns: int
    base_count: NotRequired[float]
    new_count: NotRequired[float]


class DeltaFamilies(TypedDict):
    """Kernel families: busy time (ns) and launches, means per rank-step window (`per` says so)"""
    per: NotRequired[str]
    changed: list[DiffFamily]
    appeared: list[DiffFamily]
    vanished: list[DiffFamily]


class DeltaFlops(TypedDict):
    base_tflops: float
    new_tflops: float
    delta_tflops: float
    base_mfu: NotRequired[float | None]
    new_mfu: NotRequired[float | None]


class DeltaStall(TypedDict):
    cause: str | None
    layer: NotRequired[int | None]
    phase: NotRequired[str | None]
    stage: NotRequired[str | None]
    base_ns: int
    new_ns: int
    delta_ns: int
    status: str


class DeltaCriticalPathPart(TypedDict):
    base_ns: int
    new_ns: int
    delta_ns: int


class DeltaCommGrowth(TypedDict):
    rank: int
    delta_ns: int


class DeltaStraggler(TypedDict):
    rank: int
    source: str
    comm_growth_ns: NotRequired[list[DeltaCommGrowth]]


class DeltaLayerParts(TypedDict):
    compute_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int
    overlapped_comm_ns: int


class DeltaLayer(TypedDict):
    layer: int | None
    phase: str | None
    stage: str | None
    region: str | None
    base_ns: int
    new_ns: int
    delta_ns: int
    delta_parts_ns: DeltaLayerParts


class GpuWork(TypedDict):
    """GPU work of the summary step (step time less idle: compute + exposed comm + exposed memory"""
    base_ns: int
    new_ns: int
    delta_ns: int
    pct: NotRequired[float | None]
    hidden_ns: int
    outside_noise: NotRequired[bool]
    latent: bool
    definition: NotRequired[str]


class Delta(TypedDict):
    step_time_ns: int
    step_time_pct: float | None
    breakdown: DeltaBreakdown
    stages: list[DeltaStage]
    comm: list[DeltaComm]
    families: DeltaFamilies
    flops: NotRequired[None | DeltaFlops]
    stalls: NotRequired[None | list[DeltaStall]]
    critical_path: NotRequired[None | dict[str, DeltaCriticalPathPart]]
    straggler: NotRequired[None | DeltaStraggler]
    layers: list[DeltaLayer]
    gpu_work: NotRequired[GpuWork]


class Noise(TypedDict):
    threshold_ns: int
    base_spread_ns: int
    new_spread_ns: int
    floor_pct: float
    floor_ns: NotRequired[int]
    method_base: NotRequired[str | None]
    method_new: NotRequired[str | None]
    within_noise: bool
    threshold_from: NotRequired[str]
    compared: NotRequired[str]


class LatentItem(TypedDict):
    kind: str
    cost_ns: int
    parts_ns: NotRequired[dict[str, int]]
    layers: NotRequired[list[int]]
    phases: NotRequired[list[str]]
    text: str


class DiffDocument(TypedDict):
    """traceview diff BASE NEW: two runs, the change in step time, the verdict and the ranked exp"""
    schema: str
    tool: DiffTool
    setup_differences: NotRequired[list[str]]
    method: NotRequired[str]
    base: DiffSide
    new: DiffSide
    delta: Delta
    noise: Noise
    verdict: str
    explanation: list[ExplanationItem]
    latent: list[LatentItem]
    warnings: list[str]



Document = ReportDocument | DiffDocument
"""Either document: what the renderers that serve both (Markdown, HTML, charts) accept."""


def is_diff(doc: Document) -> TypeIs[DiffDocument]:
    """True for a `traceview.diff/1` document (by its schema name)."""
    return str(doc.get("schema", "")).startswith("traceview.diff/")
