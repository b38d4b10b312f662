"""Fixed colours, the same in every report: one per part of the step (compute, exposed comm,
exposed memory, idle), one per MoE stage, one per stall cause. A name not listed gets a colour
from a spare list chosen by a stable hash of the name (the same in every run and every report).

Exposed communication is red; no stage uses red or the part colours, so a stage never reads as a
part. Stall causes reuse the colour of the part they stand for (exposed all-to-all red, idle grey)."""
from __future__ import annotations

import hashlib

PART_COLORS = {"compute": "#4c78a8", "exposed comm": "#e45756", "exposed memory": "#f58518", "idle": "#bab0ac"}

STAGE_COLORS = {
    "attention": "#72b7b2",      # teal
    "router": "#b279a2",         # mauve
    "dispatch": "#9d755d",       # brown
    "experts": "#54a24b",        # green
    "shared_expert": "#eeca3b",  # yellow
    "combine": "#2f5f8a",        # dark blue
    "other": "#8c8c8c",          # grey
}

CAUSE_COLORS = {
    "exposed_a2a": "#e45756",    # red, as exposed comm
    "exposed_comm": "#ff9da6",   # pink
    "peer_wait": "#b07aa1",      # purple
    "imbalance": "#9c755f",      # brown
    "host_sync": "#f28e2b",      # orange
    "launch_bound": "#edc948",   # amber
    "idle": "#79706e",           # dark grey
}

OTHER_MARKS = {"step window": "#d9d9d9"}
COLLECTIVE_COLOR = "#4e79a7"

SPARE = ("#17becf", "#bcbd22", "#8c564b", "#e377c2", "#7f7f7f", "#aec7e8", "#98df8a", "#c5b0d5", "#c49c94",
         "#dbdb8d")


def fallback(name: str) -> str:
    """A colour for a name no table lists: stable across runs (not Python's salted hash)."""
    return SPARE[int(hashlib.sha1(name.encode("utf-8")).hexdigest(), 16) % len(SPARE)]


def color(name: str, table: dict) -> str:
    return table.get(name) or fallback(name)


def scale(names, table: dict):
    """An Altair scale that pins each of `names` to its colour."""
    import altair as alt
    names = list(names)
    return alt.Scale(domain=names, range=[color(n, table) for n in names])
