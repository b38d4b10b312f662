"""cp_split.split (the path's pieces over the segments, whole-column) and cp_rows.split (one piece at a
time, in production for small windows) against the per-piece loop cp_split replaced
(cp_reference.split), and critical_path.composition (whole-column and row by row) against the
reference's row loop:
random windows of a few activities (compute, copies, collectives with peer waits and uneven
splits), pieces tiling the window (activities and gaps with their causes and host syncs) and
segments tiling it with holes and empty segments."""
from __future__ import annotations

from array import array

import cp_reference as ref
import pyarrow as pa
import pytest
from cp_cases import cases
from hypothesis import given, settings, strategies as st

from traceview.analysis import cp_rows, cp_split, critical_path as cp


@pytest.mark.parametrize("split", [cp_split.split, cp_rows.split], ids=["whole-column", "rows"])
@settings(max_examples=600, deadline=None)
@given(case=cases())
def test_split_matches_the_per_piece_loop(split, case):
    pieces, segs, acts, comm, ws, we = case
    got = split(pieces, segs, acts, comm)
    want = ref.split(pieces, segs, acts, comm)
    assert list(zip(got.start, got.end, got.k, got.category, got.cause, got.extra, strict=True)) == \
        list(zip(want.start, want.end, want.k, want.category, want.cause, want.extra, strict=True))
    assert [s["id"] for s in got] == [s["id"] for s in want]
    assert cp.composition(got, ws, we) == ref.composition(want, ws, we)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_composition_row_by_row_is_the_whole_column_one(case):
    pieces, segs, acts, comm, ws, we = case
    path = cp_split.split(pieces, segs, acts, comm)
    rows = cp._composition_rows(path, ws, we)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cp, "SPLIT_IN_BULK", 0)   # (composition: whole-column whatever the length)
        assert cp.composition(path, ws, we) == rows
    want = ref.composition(ref.split(pieces, segs, acts, comm), ws, we)
    assert rows == want and list(rows) == list(want)   # (the keys in the same order too)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_split_of_the_walks_columns_is_the_split_of_its_tuples(case):
    pieces, segs, acts, comm, _, _ = case
    cols = cp.Pieces()
    for p in pieces:
        cols.add(p)
    got, want = cp.split(cols, segs, acts, comm), cp.split(pieces, segs, acts, comm)
    assert (list(got.start), got.category, got.cause, got.extra) == (list(want.start), want.category,
                                                                    want.cause, want.extra)
    assert list(cols.tuples()) == pieces


def test_a_collective_by_hand():
    """An all-to-all 0-10 on the path, its peers arrived at 3, split sizes max/mean 2; compute runs
    beside it from 8 (the segments), so 8-10 is overlapped comm (compute). 0-8: peer wait 0-3, then
    half of the remaining 5 ns imbalance, rounded half to even as Python's round (2.5 -> 2: 3-5),
    the rest exposed (5-8)."""
    acts = cp.Acts()
    acts.id, acts.cls = array("q", [1]), ["comm"]
    acts.start, acts.end = array("q", [0]), array("q", [10])
    comm = {1: {"kind": "all_to_all", "wait_until": 3, "imbalance": {"max_over_mean": 2.0}}}
    segs = cp.Segments(None, (array("q", [0, 8]), array("q", [8, 10]), array("q", [0, 1]), array("q", [1, 1]),
                              array("q", [0, 0])), 0, 2)
    path = cp.split([(0, 10, 0, None, None)], segs, acts, comm)
    assert list(zip(path.start, path.end, path.category, path.cause, path.extra, strict=True)) == [
        (0, 3, "all_to_all_ns", "peer_wait", None), (3, 5, "all_to_all_ns", "imbalance", None),
        (5, 8, "all_to_all_ns", "exposed_a2a", None), (8, 10, "compute_ns", None, "overlapped comm")]
    comp = cp.composition(path, 0, 10)
    assert (comp["all_to_all_ns"], comp["compute_ns"], comp["peer_wait_ns"], comp["imbalance_ns"],
            comp["overlapped_comm_ns"]) == (8, 2, 3, 2, 2)


@pytest.mark.parametrize("split", [cp_split.split, cp_rows.split, ref.split], ids=["whole-column", "rows", "reference"])
def test_an_empty_segment_cuts_no_collective(split):
    """Found by the property tests: an all-to-all 0-2 on the path (split sizes max/mean 2, no peer
    wait) where no segment covers it but an empty one at 1. An empty segment covers nothing, so the
    collective is not cut there: half of its 2 ns is imbalance (0-1), the rest exposed (1-2). Cut at
    1, each 1 ns half would round to 0 (half to even) and the imbalance would vanish."""
    acts = cp.Acts()
    acts.id, acts.cls = array("q", [1]), ["comm"]
    acts.start, acts.end = array("q", [0]), array("q", [0])
    comm = {1: {"kind": "all_to_all", "wait_until": None, "imbalance": {"max_over_mean": 2.0}}}
    segs = cp.Segments(None, tuple(array("q", [v]) for v in (1, 1, 0, 0, 0)), 0, 1)
    path = split([(0, 2, 0, None, None)], segs, acts, comm)
    assert list(zip(path.start, path.end, path.category, path.cause, strict=True)) == [
        (0, 1, "all_to_all_ns", "imbalance"), (1, 2, "all_to_all_ns", "exposed_a2a")]
    comp = (cp.composition if split is not ref.split else ref.composition)(path, 0, 2)
    assert (comp["all_to_all_ns"], comp["imbalance_ns"], comp["window_ns"]) == (2, 1, 2)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=30), st.integers(-2, 3),
       st.lists(st.one_of(st.just(cp.NULL), st.integers(-5, 70)), max_size=40))
def test_positions_in_is_list_index(keys, scale, values):
    """positions_in (keys close together: placed by offset; else hashed) against list.index (a key
    that repeats: its first position), -1 for a value not among the keys or null (NULL)."""
    keys = [k * (10 ** scale if scale > 0 else 1) + (10 ** 12 if scale < 0 else 0) for k in keys]
    values = [v if v == cp.NULL else v * (10 ** scale if scale > 0 else 1) + (10 ** 12 if scale < 0 else 0)
              for v in values]
    got = cp_split.positions_in(pa.array(values, pa.int64()), pa.array(keys, pa.int64())).to_pylist()
    assert got == [keys.index(v) if v in keys else -1 for v in values]


def test_positions_in_by_hand():
    keys = pa.array([7, 5, 6, 9], pa.int64())        # span 5 over 4 keys: by offset
    vals = pa.array([5, 9, 8, 4, 10, cp.NULL, 7], pa.int64())
    assert cp_split.positions_in(vals, keys).to_pylist() == [1, 3, -1, -1, -1, -1, 0]
    keys = pa.array([1_000_000, 3, 70], pa.int64())   # spread out: hashed
    assert cp_split.positions_in(pa.array([70, 3, 4], pa.int64()), keys).to_pylist() == [2, 1, -1]
    assert cp_split.positions_in(pa.array([1], pa.int64()), pa.array([], pa.int64())).to_pylist() == [-1]
    keys = pa.array([6, 5, 6, 7], pa.int64())          # close together but 6 repeats: its first position
    assert cp_split.positions_in(pa.array([6, 7, 5], pa.int64()), keys).to_pylist() == [0, 3, 1]


def test_class_codes_by_hand():
    """A chunk's class column (coded, with a null) as split's codes: 1 memory, 2 comm, else 0."""
    coded = pa.chunked_array([pa.array(["comm", "compute", None], pa.string()).dictionary_encode(),
                              pa.array(["memory", "comm", "comm"], pa.string()).dictionary_encode()])
    assert list(cp._class_codes(coded)) == [2, 0, 0, 1, 2, 2]
    assert list(cp._class_codes(pa.array(["other", "memory"], pa.string()))) == [0, 1]
