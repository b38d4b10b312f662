"""Step breakdown: where each step's GPU time went (compute, exposed/overlapped comm, memory, idle)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from ..engine.pipeline import build, prefetch
from ..engine.session import Session
from ..engine.steps import python_step

DEFAULT_STEP_REGEXES = (r"^ProfilerStep#(\d+)$", r"^step[_ #]?(\d+)$", r"^iteration[_ #]?(\d+)$",
                        r"^Batch[_ #]?(\d+)$")   # NVTX `Batch N` (the nsys tutorials' training loops)
# CPU ranges whose launches are communication (collective ops, their annotations, comm libraries)
DEFAULT_COMM_OP_REGEX = (r"^(c10d::|c10d_functional::|_c10d_functional::|nccl:|gloo:|rccl:|ProcessGroupNCCL|"
                         r"record_param_comms$|deep_ep|dpsk::ep|nvshmem)")
# kernel names that are communication wherever they were launched
DEFAULT_COMM_KERNEL_REGEX = (r"(?i)(^nccl|^rccl|ncclDevKernel|ncclKernel|dpsk::ep|deep_ep|nvshmem|"
                             r"cross_device_reduce|^void (nccl|rccl))")

TIME_FIELDS = ("step_time_ns", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns",
               "exposed_memory_ns", "idle_ns", "comm_ns")


@dataclass
class Options:
    step_regex: str | None = None
    comm_regex: list[str] = field(default_factory=list)
    top: int = 10
    whole_trace: bool = False


def _alt(base: str, extra: list[str]) -> str:
    return base if not extra else "(" + base + ")|" + "|".join(f"({r})" for r in extra)


NO_STEPS_REGEX = r"^\b$"   # matches no range name: the step rule when no step regex is tried


@python_step("windows", scope="rank", requires=("step_windows", "whole_windows"), params=("whole_trace",),
             produces=("rank", "step", "name", "start_ns", "end_ns", "activities"))
def windows(session: Session, params: dict) -> pa.Table:
    """The windows the breakdown partitions: each step's GPU window (step_windows), or with
    `whole_trace` (no step regex named step ranges with GPU work, or --whole-trace) one window per
    rank over all its GPU activity (whole_windows)."""
    return session.table("whole_windows" if params["whole_trace"] else "step_windows")


def step_params(opts: Options) -> dict:
    """The step rule of the job, before any per-rank step: the candidate regexes (--step-regex,
    else the defaults; none with --whole-trace); `step_source` says which name step ranges with
    GPU work, decided once for the whole job (the first in order)."""
    return {"step_regexes": step_regexes(opts.step_regex, opts.whole_trace)}


def step_regexes(step_regex: str | None, whole_trace: bool) -> list[str]:
    """The candidate step regexes of step_params (also for a mapped job's place round, which finds
    step_source_rank while it places the ranks)."""
    return [] if whole_trace else [step_regex] if step_regex else list(DEFAULT_STEP_REGEXES)


def prepare(session: Session, opts: Options, also: tuple[str, ...] = (), also_params=None,
            beside: Callable[[dict], object] | None = None) -> dict:
    """Choose the step rule (step_source), then build activity_class, step_ranges and the windows
    with it. Returns step info. `also`: more per-rank steps that will be built (with the step
    parameters and `also_params`, a dict or a function of the step parameters giving one), asked
    for at once with these (on a mapped job: one round). `beside`: called with those parameters
    once the step rule is chosen, before the rest is built (to begin steps on another thread)."""
    params = step_params(opts)
    build(session, ["step_source"], params)
    tried = session.rows("SELECT step_regex, ranks FROM step_source ORDER BY regex_index")
    source = next((r["step_regex"] for r in tried if r["ranks"]), None)
    # no regex gives windows: the whole trace is one window per rank; step_ranges keeps the ranges
    # of the last regex tried (they name steps, but none has GPU work)
    params.update(step_regex=source or (tried[-1]["step_regex"] if tried else NO_STEPS_REGEX),
                  whole_trace=source is None,
                  comm_op_regex=_alt(DEFAULT_COMM_OP_REGEX, opts.comm_regex),
                  comm_kernel_regex=_alt(DEFAULT_COMM_KERNEL_REGEX, opts.comm_regex))
    more = also_params(params) if callable(also_params) else also_params
    every = {**params, **(more or {})}
    if beside is not None:
        beside(every)
    prefetch(session, ["activity_class", "step_ranges", "windows", "step_ranges_matched", *also], every)
    build(session, ["activity_class", "step_ranges", "windows"], params)
    n = session.rows("SELECT count(*) AS n FROM windows")[0]["n"]
    return {"step_regex": source, "whole_trace": source is None, "steps": n, "params": params,
            "warnings": nested_step_warnings(session, params) if source else []}


def nested_step_warnings(session: Session, params: dict) -> list[str]:
    """Step ranges matched by the regex that lie inside another one (nested or duplicate): kept
    only the outermost (step_ranges.sql); say how many were left out."""
    build(session, ["step_ranges_matched"], params)
    rx = params["step_regex"]
    matched = {r["rank"]: r["n"] for r in session.rows("SELECT rank, n FROM step_ranges_matched")}
    kept = {r["rank"]: r["n"] for r in session.rows("SELECT rank, count(*) AS n FROM step_ranges GROUP BY rank")}
    extra = {r: n - kept.get(r, 0) for r, n in matched.items() if n > kept.get(r, 0)}
    if not extra:
        return []
    total = sum(extra.values())
    ranks = ", ".join(str(r) for r in sorted(extra)[:8]) + (" ..." if len(extra) > 8 else "")
    return [f"{total} range(s) matching {rx} lie inside or duplicate another step range (rank(s) {ranks}): "
            "each step is its outermost range; the inner ones are not steps of their own"]


def step_rows(session: Session) -> list[dict]:
    """Per (rank, step) breakdown; the four parts are checked to add up to the window exactly."""
    build(session, ["breakdown"])
    rows = session.rows("SELECT * FROM breakdown ORDER BY rank, step")
    for r in rows:
        parts = r["compute_ns"] + r["exposed_comm_ns"] + r["exposed_memory_ns"] + r["idle_ns"]
        if parts != r["step_time_ns"]:
            raise AssertionError(f"breakdown does not add up for rank {r['rank']} step {r['step']}: "
                                 f"{parts} != {r['step_time_ns']}")
        if r["overlapped_comm_ns"] + r["exposed_comm_ns"] != r["comm_ns"]:
            raise AssertionError(f"comm does not add up for rank {r['rank']} step {r['step']}")
    return rows


def median_step(rows: list[dict]) -> dict | None:
    """The median step of some rows by step time: sorted by (step_time_ns, step, rank), the
    middle one; for an even count the lower of the two middle ones (a real step, never a mean)."""
    if not rows:
        return None
    s = sorted(rows, key=lambda r: (r["step_time_ns"], r["step"], r["rank"]))
    return s[(len(s) - 1) // 2]


def representative(rows: list[dict]) -> dict | None:
    """The job's representative step: per rank its median step (`median_step`), then the median
    rank by that step's time (sorted by (step_time_ns, rank); the lower middle for an even count)."""
    per = [m for group in _by_rank(rows) if (m := median_step(group)) is not None]
    if not per:
        return None
    per.sort(key=lambda r: (r["step_time_ns"], r["rank"]))
    return per[(len(per) - 1) // 2]


def summarize(rows: list[dict]) -> dict:
    """One real step with its own parts (so they add up to its step time exactly): the median
    rank's median step (`representative`); `rank` and `step` name it."""
    rep = representative(rows)
    out: dict[str, int | float] = {f: int(rep[f]) if rep else 0 for f in TIME_FIELDS}
    out["overlap_ratio"] = (rep["overlapped_comm_ns"] / rep["comm_ns"]) if rep and rep["comm_ns"] else 0.0
    out["steps"] = len({r["step"] for r in rows})
    out["ranks"] = len({r["rank"] for r in rows})
    if rep:
        out["rank"], out["step"] = rep["rank"], rep["step"]
    return out


def per_rank(rows: list[dict]) -> list[dict]:
    """Per rank: that rank's median step (`median_step`) with its parts."""
    return [summarize(group) for group in _by_rank(rows)]


def _by_rank(rows: list[dict]) -> list[list[dict]]:
    """The rows of each rank, in their order, ranks ascending: one pass (a pass over all rows per
    rank, as before, took 1.3 s of a 1,024-rank job's 4,096 step rows)."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(r["rank"], []).append(r)
    return [groups[k] for k in sorted(groups)]


def top_kernels(session: Session, top: int = 10) -> list[dict]:
    build(session, ["top_kernels"])
    return session.rows("SELECT * FROM top_kernels ORDER BY total_ns DESC, name LIMIT $top", top=top)
