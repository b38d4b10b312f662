"""Step breakdown: where each step's GPU time went (compute, exposed/overlapped comm, memory, idle)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..db import Session

DEFAULT_STEP_REGEXES = (r"^ProfilerStep#(\d+)$", r"^step[_ #]?(\d+)$", r"^iteration[_ #]?(\d+)$")
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


def prepare(session: Session, opts: Options) -> dict:
    """Materialize activity_origin, activity_class and the step windows. Returns step info."""
    session.materialize("activity_origin")
    session.materialize("activity_class",
                        comm_op_regex=_alt(DEFAULT_COMM_OP_REGEX, opts.comm_regex),
                        comm_kernel_regex=_alt(DEFAULT_COMM_KERNEL_REGEX, opts.comm_regex))
    regexes = [] if opts.whole_trace else [opts.step_regex] if opts.step_regex else list(DEFAULT_STEP_REGEXES)
    source = None
    session.materialize("step_ranges", step_regex=r"^\b$")  # empty unless a regex matches below
    for rx in regexes:
        session.materialize("step_ranges", step_regex=rx)
        windows = session.query("step_windows")
        if windows.num_rows:
            source = rx
            break
    if source is None:
        windows = session.query("whole_windows")
    session.register("windows", windows)
    return {"step_regex": source, "whole_trace": source is None, "steps": windows.num_rows}


def step_rows(session: Session) -> list[dict]:
    """Per (rank, step) breakdown; the four parts are checked to add up to the window exactly."""
    session.materialize("segments")
    session.materialize("activity_spans")
    rows = session.query("breakdown").to_pylist()
    for r in rows:
        parts = r["compute_ns"] + r["exposed_comm_ns"] + r["exposed_memory_ns"] + r["idle_ns"]
        if parts != r["step_time_ns"]:
            raise AssertionError(f"breakdown does not add up for rank {r['rank']} step {r['step']}: "
                                 f"{parts} != {r['step_time_ns']}")
        if r["overlapped_comm_ns"] + r["exposed_comm_ns"] != r["comm_ns"]:
            raise AssertionError(f"comm does not add up for rank {r['rank']} step {r['step']}")
    return rows


def _median(vals: list[int]) -> int:
    return int(round(statistics.median(vals))) if vals else 0


def summarize(rows: list[dict]) -> dict:
    """Medians over steps and ranks of each time field; overlap ratio from the sums."""
    out = {f: _median([r[f] for r in rows]) for f in TIME_FIELDS}
    comm = sum(r["comm_ns"] for r in rows)
    out["overlap_ratio"] = (sum(r["overlapped_comm_ns"] for r in rows) / comm) if comm else 0.0
    out["steps"] = len({r["step"] for r in rows})
    out["ranks"] = len({r["rank"] for r in rows})
    return out


def per_rank(rows: list[dict]) -> list[dict]:
    out = []
    for rank in sorted({r["rank"] for r in rows}):
        mine = [r for r in rows if r["rank"] == rank]
        d = summarize(mine)
        d["rank"] = rank
        out.append(d)
    return out


TOP_KERNELS_SQL = """
SELECT c.name, c.class, c.kind, count(*) AS count, sum(c.end_ns - c.start_ns)::BIGINT AS total_ns
FROM activity_class c
JOIN windows w ON c.rank = w.rank AND c.start_ns >= w.start_ns AND c.end_ns <= w.end_ns
GROUP BY c.name, c.class, c.kind
ORDER BY total_ns DESC, c.name
LIMIT $top
"""


def top_kernels(session: Session, top: int = 10) -> list[dict]:
    return session.rows(TOP_KERNELS_SQL, top=top)
