"""Words and number formats shared by the text, Markdown and HTML reports.

One place says what each aggregate is (the median step, a mean per step, a total over N steps),
turns the document's keys into column names a reader understands (`wait_caused_ns` -> "wait
caused (ms)"), prints counts as whole numbers, and rounds a row's parts so that the printed parts
add up to the printed total.
"""
from __future__ import annotations

PARTS = (("compute", "compute_ns"), ("exposed comm", "exposed_comm_ns"),
         ("exposed memory", "exposed_memory_ns"), ("idle", "idle_ns"))
PART_KEYS = tuple(k for _, k in PARTS)

OVERLAP_NOTE = ("Overlapped comm is communication that ran while compute ran: that time is already counted "
                "as compute (of whichever group was computing), so it is not one of the parts and can exceed "
                "a row's total.")

WORDS = {
    "times_last": "times last", "collectives": "collectives", "wait_caused_ns": "wait caused (ms)",
    "max_skew_ns": "max skew (ms)", "total_skew_ns": "total skew (ms)", "skew_ns": "skew (ms)",
    "all_to_all": "all-to-all", "all_to_all_ns": "all-to-all", "other_comm": "other comm",
    "other_comm_ns": "other comm", "launch_bound": "launch-bound", "launch_bound_ns": "launch-bound",
    "host_sync": "host sync", "host_sync_ns": "host sync", "peer_wait": "peer wait", "peer_wait_ns": "peer wait",
    "imbalance_ns": "imbalance", "compute_ns": "compute", "idle_ns": "idle", "exposed_comm_ns": "exposed comm",
    "exposed_memory_ns": "exposed memory", "overlapped_comm_ns": "overlapped comm",
    "gpu_idle_ns": "GPU idle (all of it)", "idle_assigned_ns": "idle charged to the path",
    "stall_ns": "stalls (non-compute path)", "window_ns": "step window",
    "comm_dur_ns": "comm duration", "hidden_ns": "hidden", "independent_work_ns": "independent work",
    "independent_work_available": "independent work available", "independent_stages": "independent stages",
    "sync_call": "sync call", "sync_ns": "sync", "resumed_by": "resumed by", "max_gap_ns": "max gap",
    "mean_gap_ns": "mean gap", "late_to_collectives": "late to collectives", "max_over_mean": "max / mean",
}

# critical-path parts (they add up to the window) and the measures beside them, in reading order
CP_PARTS = ("compute_ns", "all_to_all_ns", "other_comm_ns", "launch_bound_ns", "host_sync_ns", "idle_ns")
CP_MEASURES = ("window_ns", "stall_ns", "peer_wait_ns", "imbalance_ns", "gpu_idle_ns", "idle_assigned_ns",
               "overlapped_comm_ns")


def words(key: str, unit: str | None = "ms") -> str:
    """A document key as a column name: known keys by name, else `_` -> space; `*_ns` keys get
    "(ms)" (no unit with unit=None)."""
    w = WORDS.get(key) or (key[:-3] if key.endswith("_ns") else key).replace("_", " ")
    if unit is None:
        return w.replace(" (ms)", "")
    return f"{w} ({unit})" if key.endswith("_ns") and "(" not in w else w


def count(v) -> str:
    """A count: whole numbers as such; a mean that is not whole as "~N" ("<1" below one)."""
    if v is None:
        return "-"
    if float(v) == int(v):
        return f"{int(v):,}"
    return "<1" if 0 < v < 1 else f"~{round(v):,}"


def count_per_step(total, windows: int) -> str:
    """Calls per step from a total over `windows` rank-step windows (whole when it divides)."""
    return count(total / windows if windows else total)


def mean_label(windows: int) -> str:
    return f"mean per step over {windows} rank-step window{'s' if windows != 1 else ''}"


def total_label(steps: int, ranks: int) -> str:
    return f"total over {steps} step{'s' if steps != 1 else ''}" + (f" x {ranks} ranks" if ranks > 1 else "")


def rounded_parts(parts: list[float], scale: float = 1e3) -> tuple[list[float], float]:
    """Round ns values to µs (ms with 3 decimals) so that the rounded parts add up to the rounded
    total: largest remainders get the spare units. Returns (parts in ms, total in ms)."""
    units = [p / scale for p in parts]
    total = round(sum(units))
    floors = [int(u // 1) for u in units]
    spare = total - sum(floors)
    order = sorted(range(len(units)), key=lambda i: (-(units[i] - floors[i]), i))
    for i in order[:max(0, spare)]:
        floors[i] += 1
    return [f * scale / 1e6 for f in floors], total * scale / 1e6
