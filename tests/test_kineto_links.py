"""The Kineto parser's links after the read, held to the per-row implementations they replaced
(kept here as references): the fwdbwd flows' pairing and backward -> forward links (a dict of the
last start per id, a loop writing each backward op's forward op, the last flow winning), and the
External id / correlation lookups (the first row that carries a key), on random inputs with
repeated ids, ids of mixed types, flows outside every op and several flows into one op."""
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from traceview.later import Later
from traceview.parsers import kineto
from traceview.parsers._nesting import innermost_container

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


def _fwd_reference(cpu: dict, flows_s: list, flows_f: list) -> list:
    """The implementation before the links ran in Arrow kernels (row by row)."""
    n_c = len(cpu["id"])
    fwd = [None] * n_c
    s_by_id = {f[0]: f for f in flows_s}
    pairs = [(s_by_id[f[0]], f) for f in flows_f if f[0] in s_by_id]
    if not pairs:
        return fwd
    pts = [p[0] for p in pairs] + [p[1] for p in pairs]
    tids = [kineto._tid(f[1]) for f in pts]
    ts = kineto._ns_array([f[2] for f in pts])
    ops = pc.indices_nonzero(pc.equal(cpu["kind"], "op")).cast(pa.int64())
    first = cpu["id"][0].as_py() if n_c else 0
    o_tid, o_start, o_end = (cpu[k].take(ops) for k in ("tid", "start_ns", "end_ns"))
    found = innermost_container(o_tid, o_start, o_end, pc.add(ops, first), tids, ts, ts).to_pylist()
    n = len(pairs)
    for j in range(n):
        f_op, b_op = found[j], found[n + j]
        if f_op is not None and b_op is not None and f_op != b_op:
            fwd[b_op - first] = f_op
    return fwd


def _first_reference(keys: list, vals: list, query: list) -> list:
    """The value of the first row carrying each query key (None where none, or the key is None)."""
    first: dict = {}
    for k, v in zip(keys, vals, strict=True):
        if k is not None and k not in first:
            first[k] = v
    return [first.get(q) if q is not None else None for q in query]


def _cpu(ranges: list, first_id: int) -> dict:
    """CPU range columns as the parser has them: kind (dictionary), tid, start/end ns, ids."""
    kinds = [r[0] for r in ranges]
    return {"kind": pa.array(kinds, type=pa.dictionary(pa.int32(), pa.string())),
            "tid": pa.array([r[1] for r in ranges], type=pa.int64()),
            "start_ns": pa.array([r[2] for r in ranges], type=pa.int64()),
            "end_ns": pa.array([r[2] + r[3] for r in ranges], type=pa.int64()),
            "id": kineto._ids(first_id, len(ranges))}


_range = st.tuples(st.sampled_from(["op", "op", "annotation"]), st.integers(0, 2),
                   st.integers(0, 60).map(lambda v: v * 1000), st.integers(0, 40).map(lambda v: v * 1000))
_int_ids = st.integers(0, 6)
_mixed_ids = st.one_of(st.integers(0, 4), st.floats(0, 4).map(float), st.sampled_from(["1", "2", "a"]),
                       st.booleans())
_tid = st.one_of(st.integers(0, 2), st.sampled_from(["0", "x"]))
_ts = st.one_of(st.integers(0, 100), st.floats(0, 100, allow_nan=False).map(lambda v: round(v, 3)))


_int_tid = st.integers(0, 2)


def _flow(ids, tids=_int_tid):
    return st.tuples(ids, tids, _ts)


@settings(max_examples=400, deadline=None)
@given(st.lists(_range, max_size=25), st.integers(0, 1000), st.lists(_flow(_int_ids), max_size=12),
       st.lists(_flow(_int_ids), max_size=12))
def test_fwd_links_match_the_row_loop_int_ids(ranges, first_id, starts, ends):
    cpu = _cpu(ranges, first_id)
    got = kineto._fwd_links(cpu, starts, ends)
    assert got.type == pa.int64() and len(got) == len(ranges)
    assert got.to_pylist() == _fwd_reference(cpu, starts, ends)


@settings(max_examples=400, deadline=None)
@given(st.lists(_range, max_size=20), st.lists(_flow(_mixed_ids, _tid), max_size=10),
       st.lists(_flow(_mixed_ids, _tid), max_size=10))
def test_fwd_links_match_the_row_loop_mixed_ids(ranges, starts, ends):
    # strings, floats and bools as ids (1 == 1.0 == True in a dict), strings as thread ids
    cpu = _cpu(ranges, 7)
    assert kineto._fwd_links(cpu, starts, ends).to_pylist() == _fwd_reference(cpu, starts, ends)


def test_fwd_links_by_hand():
    # forward op 0 [0,10) on thread 1; backward ops 1 [20,30) and 2 [40,50) on thread 2; an annotation
    # 3 [20,30) on thread 2 (not an op: never linked). Flow 5: start at 5 (in op 0), end at 25 (in op 1).
    # Flow 6 starts twice (the last start, at 45 in op 2, counts) and ends at 22 (in op 1): op 1's last
    # flow is flow 6, so its forward op is op 2. Flow 7 ends in op 2 but starts in no op: no link.
    # Flow 8 starts and ends in op 2: the same op, no link. Flow 9 has no start.
    cpu = _cpu([("op", 1, 0, 10), ("op", 2, 20, 10), ("op", 2, 40, 10), ("annotation", 2, 20, 10)], 100)
    starts = [(5, 1, 0.005), (6, 1, 0.001), (6, 2, 0.045), (7, 1, 0.015), (8, 2, 0.041)]
    ends = [(5, 2, 0.025), (6, 2, 0.022), (7, 2, 0.042), (8, 2, 0.049), (9, 2, 0.021)]
    # ts in µs -> ns: 5 ns, 45 ns ... inside ranges given in ns
    got = kineto._fwd_links(cpu, starts, ends).to_pylist()
    assert got == [None, 102, None, None]


def test_fwd_links_without_pairs_are_null():
    cpu = _cpu([("op", 1, 0, 10)], 3)
    assert kineto._fwd_links(cpu, [(1, 1, 0)], [(2, 1, 0)]).to_pylist() == [None]
    assert kineto._fwd_links(cpu, [], []).to_pylist() == [None]


def test_flow_pairs_ids_beyond_int64_take_the_dict_path():
    big = 1 << 70
    starts = [(big, 1, 1), (2, 1, 2)]
    ends = [(big, 1, 3), (3, 1, 4)]
    assert kineto._flow_pairs(starts, ends) == ([(big, 1, 1)], [(big, 1, 3)])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 8)), max_size=30),
       st.lists(st.one_of(st.none(), st.integers(0, 8)), max_size=30))
def test_first_row_lookup_matches_the_dict(keys, query):
    # what _read does for External ids and correlations: index_in gives a key's first position
    vals = list(range(100, 100 + len(keys)))
    got = pa.array(vals, type=pa.int64()).take(
        pc.index_in(pa.array(query, type=pa.int64()), value_set=pa.array(keys, type=pa.int64()), skip_nulls=True))
    assert got.to_pylist() == _first_reference(keys, vals, query)


def test_later_runs_in_a_thread_and_hands_back_value_or_error():
    assert Later(lambda a, b: a + b, 2, 3, threaded=True).result() == 5
    assert Later(lambda a, b: a + b, 2, 3, threaded=False).result() == 5

    def boom():
        raise OverflowError("x")

    job = Later(boom, threaded=True)
    job.wait()
    with pytest.raises(OverflowError):
        job.result()
