"""Random windows for the property tests of the critical path's whole-column code against the
per-row references (tests/cp_reference.py): a few activities (compute, copies, collectives with
peer waits and uneven splits), pieces tiling the window (activities and gaps with their causes and
host syncs) and segments tiling it with holes and empty segments."""
from __future__ import annotations

from array import array

import pyarrow as pa
from hypothesis import strategies as st

from traceview.analysis import critical_path as cp


def _tiling(draw, ws: int, we: int, max_parts: int) -> list[int]:
    """Sorted cut points from ws to we (both included; repeated points allowed)."""
    cuts = sorted(draw(st.lists(st.integers(ws, we), max_size=max_parts)))
    return [ws, *cuts, we]


@st.composite
def cases(draw):
    ws = draw(st.integers(-5, 20))
    we = ws + draw(st.integers(1, 60))
    n = draw(st.integers(1, 8))
    acts = cp.Acts()
    acts.id = array("q", [100 + 7 * k for k in range(n)])
    acts.cls = [draw(st.sampled_from(["compute", "comm", "memory", "other"])) for _ in range(n)]
    if draw(st.booleans()):   # (the class codes a chunk's activities carry: split reads them, not the names)
        acts.cls_code = cp._class_codes(pa.array(acts.cls, pa.string()))
    starts = [draw(st.integers(ws - 5, we + 5)) for _ in range(n)]
    acts.start = array("q", starts)
    acts.end = array("q", [s + draw(st.integers(0, 40)) for s in starts])
    comm = {}
    for k in range(n):
        if acts.cls[k] == "comm" and draw(st.integers(0, 4)):
            ratio = draw(st.one_of(st.just(1.0), st.floats(1.0, 4.0), st.sampled_from([1.05, 1.5, 2.0, 4.0 / 3])))
            comm[acts.id[k]] = {"kind": draw(st.sampled_from(["all_to_all", "all_reduce"])),
                                "wait_until": draw(st.one_of(st.none(), st.integers(ws - 5, we + 5))),
                                "imbalance": draw(st.sampled_from([None, {}, {"max_over_mean": ratio}]))}
    cuts = _tiling(draw, ws, we, 8)
    pieces = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        if b <= a:
            continue
        cause = draw(st.sampled_from([None, None, "idle", "launch_bound", "host_sync"]))
        k = draw(st.integers(0, n - 1)) if cause is None else draw(st.one_of(st.none(), st.integers(0, n - 1)))
        syncs = None if cause is None else []
        if cause == "host_sync":
            syncs = [{"id": 5000 + draw(st.integers(0, 3))} for _ in range(draw(st.integers(1, 2)))]
        pieces.append((a, b, k, cause, syncs))
    bounds = _tiling(draw, ws, we, 10)
    segs = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        if draw(st.integers(0, 5)) == 0:
            continue   # a hole
        segs.append((a, b, draw(st.integers(0, 2)), draw(st.integers(0, 2)), draw(st.integers(0, 1))))
    cols = tuple(array("q", [s[j] for s in segs]) for j in range(5))
    return pieces, cp.Segments(None, cols, 0, len(segs)), acts, comm, ws, we
