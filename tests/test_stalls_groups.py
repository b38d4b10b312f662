"""stalls._window_stalls and a2a_exposure (whole-column grouping of a window's path) against the
per-row loops they replaced (cp_reference._window_stalls / a2a_exposure), on random windows: a
path from cp_split over random pieces, activities with layers / phases / stages (the shared
expert among them), launch threads and times, host syncs and collectives matched across ranks
(some where this rank was the late one)."""
from __future__ import annotations

from array import array

import cp_reference as ref
import pyarrow as pa
import pytest
from cp_cases import cases
from hypothesis import given, settings, strategies as st

from traceview.analysis import critical_path as cp, stalls


@st.composite
def windows(draw):
    pieces, segs, acts, comm, ws, we = draw(cases())
    n = len(acts.id)
    attrs = [(None, None, None), (0, "fwd", "attn"), (0, "fwd", "shared_expert"), (1, "fwd", "dispatch"),
             (1, "bwd", "shared_expert")]
    acts.attr = [draw(st.sampled_from(attrs)) for _ in range(n)]
    if draw(st.booleans()):   # coded as a chunk's are (stalls._attr_codes then reads attr_key)
        cols = [pa.chunked_array([pa.array([t[i] for t in acts.attr], typ)], typ)
                for i, typ in enumerate((pa.int32(), pa.string(), pa.string()))]
        acts.attr, acts.attr_key, acts.attr_of_key = cp._attr_columns(*cols)
    acts._name = [f"kernel{k}" for k in range(n)]
    acts.tid = array("q", [draw(st.sampled_from([cp.NULL, 1, 2])) for _ in range(n)])
    acts.ostart = array("q", [draw(st.one_of(st.just(cp.NULL), st.integers(ws - 10, we))) for _ in range(n)])
    acts.rank = 0
    coll_by_id = {}
    for k in range(n):
        if acts.cls[k] == "comm" and draw(st.booleans()):
            coll_by_id[acts.id[k]] = {
                "kind": "all_to_all", "group": "g", "index": k, "straggler": draw(st.sampled_from([0, 1])),
                "skew_ns": draw(st.integers(0, 3)), "wait_ns": {"0": draw(st.integers(0, 9))},
                "imbalance": draw(st.sampled_from([None, {"splits": [1, 3], "max_over_mean": 1.5}]))}
    sync_ids = sorted({h["id"] for p in pieces if p[3] == "host_sync" for h in p[4]})
    syncs = {i: {"id": i, "name": f"cudaStreamSynchronize{i}", "dur_ns": draw(st.integers(0, 5)),
                 "end_ns": draw(st.integers(0, 5)), "start_ns": 0, "op": draw(st.sampled_from([None, "aten::item"])),
                 "parent_op": None, "grandparent_op": None} for i in sync_ids if draw(st.integers(0, 3))}
    path = cp.split(pieces, segs, acts, comm)
    w = {"rank": 0, "step": draw(st.integers(0, 2)), "start_ns": ws, "end_ns": we, "path": path, "acts": acts,
         "segments": segs, "syncs": syncs}
    return w, comm, coll_by_id


@pytest.mark.parametrize("bulk", [True, False], ids=["whole-column", "rows"])
@settings(max_examples=500, deadline=None)
@given(case=windows())
def test_window_stalls_match_the_row_loop(bulk, case):
    w, comm, coll_by_id = case
    got = stalls._window_stalls(w, coll_by_id, bulk=bulk)
    w2 = dict(w)
    w2.pop("_indep", None)
    assert got == ref._window_stalls(w2, coll_by_id)
    assert sum(s["dur_ns"] for s in got) == sum(b - a for a, b, c in zip(w["path"].start, w["path"].end,
                                                                        w["path"].cause, strict=True) if c)


@pytest.mark.parametrize("bulk", [True, False], ids=["whole-column", "rows"])
@settings(max_examples=300, deadline=None)
@given(case=windows())
def test_a2a_exposure_matches_the_row_loop(bulk, case):
    w, comm, _ = case
    was = cp.SPLIT_IN_BULK
    cp.SPLIT_IN_BULK = 0 if bulk else 10 ** 9   # (the window read whole-column, or one row at a time)
    try:
        assert stalls.a2a_exposure([w], comm) == ref.a2a_exposure([w], comm)
        assert stalls.a2a_exposure([w], comm, stalls.a2a_ids(comm)) == ref.a2a_exposure([w], comm)
    finally:
        cp.SPLIT_IN_BULK = was


def test_a_gap_group_by_hand():
    """Two idle gaps (0-2, 4-6) resumed by the same collective (k0, this rank the late one, skew 5),
    compute between: one stall of 4 ns, 2 gaps, 1 activity, the collective named once."""
    acts = cp.Acts()
    acts.id, acts.cls, acts.rank = array("q", [100, 101]), ["comm", "compute"], 0
    acts.start, acts.end = array("q", [0, 2]), array("q", [10, 4])
    acts.attr, acts._name = [(1, "fwd", "dispatch"), (1, "fwd", "attn")], ["a2a", "gemm"]
    acts.tid, acts.ostart = array("q", [1, 1]), array("q", [0, 0])
    segs = cp.Segments(None, tuple(array("q", v) for v in ([0], [6], [0], [0], [0])), 0, 1)
    path = cp.split([(0, 2, 0, "idle", []), (2, 4, 1, None, None), (4, 6, 0, "idle", [])], segs, acts, {})
    coll = {100: {"kind": "all_to_all", "group": "g", "index": 3, "straggler": 0, "skew_ns": 5}}
    w = {"rank": 0, "step": 1, "path": path, "acts": acts, "segments": segs, "syncs": {}}
    (row,) = stalls._window_stalls(w, coll)
    assert (row["cause"], row["layer"], row["stage"], row["start_ns"], row["dur_ns"]) == ("idle", 1, "dispatch", 0, 4)
    assert row["evidence"] == {"pieces": 2, "gaps": 2, "max_gap_ns": 2, "mean_gap_ns": 2, "activities": 1,
                               "last_start_ns": 4, "late_to_collectives": [
                                   {"kind": "all_to_all", "group": "g", "index": 3, "skew_ns": 5}]}


@pytest.mark.parametrize("scale", [1, 2 ** 59], ids=["running-max", "sorted (span too wide to shift)"])
def test_run_max_by_hand(scale):
    """The largest value of each group (rows numbered by group, groups' last rows), both ways:
    a running max over values shifted by their group, and a sort where the shift would overflow."""
    v = pa.array([x * scale for x in [3, -1, 7, 2, 5, 5, -4, 0, 1]], pa.int64())
    group = pa.array([0, 0, 0, 1, 2, 2, 3, 3, 4], pa.int64())
    lasts = pa.array([2, 3, 5, 7, 8], pa.int64())
    assert stalls._run_max(v, group, lasts).to_pylist() == [x * scale for x in [7, 2, 5, 0, 1]]
