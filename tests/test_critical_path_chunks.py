"""The critical path's chunk columns: class, attribution and names taken coded from the attached gpu_activities (or by a
query where a test registered its own rows), coded strings turned into shared Python objects,
and the compute pieces of `split` that skip the segments."""
from __future__ import annotations

from array import array

import pyarrow as pa
import pyarrow.compute as pc
from helpers import make_profile

from traceview.analysis import critical_path as cp
from traceview.engine.session import Session


def _profile():
    gpu = [{"id": 10, "start_ns": 0, "end_ns": 5, "name": "gemm", "stream": 7},
           {"id": 11, "start_ns": 5, "end_ns": 9, "name": "ncclDevKernel_AllReduce", "stream": 7},
           {"id": 12, "start_ns": 1, "end_ns": 2, "kind": "memcpy", "name": "Memcpy HtoD", "stream": 8},
           {"id": 20, "rank": 1, "start_ns": 0, "end_ns": 3, "name": "other_rank", "stream": 7}]
    return make_profile(gpu=gpu, ranks=(0, 1))


def test_shared_strings_of_coded_chunks_with_their_own_dictionaries():
    a = pa.DictionaryArray.from_arrays(pa.array([1, 0, 1], pa.int32()), pa.array(["x", "y"]))
    b = pa.DictionaryArray.from_arrays(pa.array([0, None], pa.int32()), pa.array(["y"]))
    out = cp._shared_strings(pa.chunked_array([a, b]))
    assert out == ["y", "x", "y", "y", None]
    assert out[0] is out[2] is out[3]          # one object per distinct value, across chunks
    plain = cp._shared_strings(pa.chunked_array([pa.array(["p", "q", "p"])]))
    assert plain == ["p", "q", "p"] and plain[0] is plain[2]


def test_names_come_from_the_attached_table_or_from_a_registered_one():
    prof = _profile()
    s = Session(prof)
    # the class and attribution rows as the steps would give them (by hand; 12 has no attribution row)
    s.register("activity_class", pa.table({"id": [10, 11, 12, 20], "rank": [0, 0, 0, 1],
                                           "class": ["compute", "comm", "memory", "compute"]}))
    s.register("activity_attribution", pa.table({"id": [11, 10, 20], "rank": [0, 0, 1],
                                                 "layer": pa.array([3, 3, 4], pa.int32()),
                                                 "phase": ["fwd", "fwd", "bwd"], "stage": ["a2a", None, "mlp"]}))
    assert s.attached("gpu_activities") is prof.gpu_activities
    assert s.attached("windows") is None
    acts = pa.table({"id": pa.array([12, 10, 11], pa.int64())})
    got = cp._with_strings(s, acts, [0])
    assert [str(v) for v in got.column("name").to_pylist()] == ["Memcpy HtoD", "gemm", "ncclDevKernel_AllReduce"]
    assert got.column("kind").to_pylist() == ["memcpy", "kernel", "kernel"]
    # the class and the attribution of each id (none for 12), strings coded
    assert got.column("class").to_pylist() == ["memory", "compute", "comm"]
    assert [got.column(n).to_pylist() for n in ("layer", "phase", "stage")] == \
        [[None, 3, 3], [None, "fwd", "fwd"], [None, None, "a2a"]]
    assert pa.types.is_dictionary(got.column("class").type) and pa.types.is_dictionary(got.column("stage").type)
    # a test's own rows replace the attached table: the names are then read through the session
    mine = prof.gpu_activities.filter(pc.equal(prof.gpu_activities.column("id"), 10))
    s.register("gpu_activities", mine)
    assert s.attached("gpu_activities") is None
    got = cp._with_strings(s, acts, [0])
    assert got.column("name").to_pylist() == [None, "gemm", None]


def test_split_compute_pieces_ignore_the_segments_but_copies_and_gaps_do_not():
    # activities: k0 compute 0-4, k1 memory 4-6 (beside a collective on another stream), gap 6-8
    acts = cp.Acts()
    acts.id, acts.cls = array("q", [1, 2, 3]), ["compute", "memory", "comm"]
    acts.start, acts.end = array("q", [0, 4, 3]), array("q", [4, 6, 7])
    segs = cp.Segments(None, (array("q", [0, 3, 4, 6, 7]), array("q", [3, 4, 6, 7, 8]),
                              array("q", [1, 1, 0, 0, 0]), array("q", [0, 1, 1, 1, 0]),
                              array("q", [0, 0, 1, 0, 0])), 0, 5)
    pieces = [(0, 4, 0, None, None), (4, 6, 1, None, None), (6, 8, None, "idle", [])]
    path = cp.split(pieces, segs, acts, comm={})
    # 0-4 compute (one piece over two segments); 4-6 the copy beside a collective: comm time
    # (exposed, no collective info); 6-7 a collective runs alone in the gap: comm; 7-8 idle
    assert list(zip(path.start, path.end, path.category, path.cause, strict=True)) == [
        (0, 4, "compute_ns", None), (4, 6, "other_comm_ns", "exposed_comm"),
        (6, 7, "other_comm_ns", "exposed_comm"), (7, 8, "idle_ns", "idle")]


def test_positions_by_subtraction_where_keys_run_densely_else_by_hashing():
    ids = pa.chunked_array([pa.array([12, 10, None, 15, 9, 11], pa.int64())])
    dense = pa.chunked_array([pa.array([9, 10], pa.int64()), pa.array([11, 12], pa.int64())])   # 9..12
    assert cp._positions(ids, dense).to_pylist() == [3, 1, None, None, 0, 2]
    # not dense (a hole), not in order, a null key, another type: the same answers by hashing
    for keys in ([9, 10, 12, 13], [10, 9, 11, 12], [9, 10, None, 12]):
        want = [keys.index(i) if i in keys else None for i in ids.to_pylist()]
        assert cp._positions(ids, pa.array(keys, pa.int64())).to_pylist() == want
    assert cp._positions(ids, pa.array([9, 10, 11, 12], pa.int32())).to_pylist() == [3, 1, None, None, 0, 2]
    assert cp._positions(ids, pa.array([], pa.int64())).to_pylist() == [None] * 6


def test_attr_columns_share_tuples_and_key_equal_tuples_alike():
    layer = pa.chunked_array([pa.array([1, 1, None, 2], pa.int32()), pa.array([None, 1], pa.int32())])
    phase = pa.chunked_array([pa.array(["fwd", "fwd", None, "bwd"]), pa.array([None, "bwd"])])
    stage = pa.chunked_array([pa.array(["a2a", "a2a", None, None]), pa.array([None, "a2a"])]).dictionary_encode()
    attr, key, of_key = cp._attr_columns(layer, phase, stage)
    assert attr == [(1, "fwd", "a2a"), (1, "fwd", "a2a"), (None, None, None), (2, "bwd", None),
                    (None, None, None), (1, "bwd", "a2a")]
    assert attr[0] is attr[1] and attr[2] is attr[4]
    assert key[2] == key[4] == 0 and key[0] == key[1]
    assert len({key[0], key[2], key[3], key[5]}) == 4
    assert of_key == {key[0]: (1, "fwd", "a2a"), 0: (None, None, None), key[3]: (2, "bwd", None),
                      key[5]: (1, "bwd", "a2a")}
