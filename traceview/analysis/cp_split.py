"""The critical path's pieces split over the timeline's segments, as whole-column work (pyarrow).

A window's walk gives pieces that tile it (activities on the path and gaps, with a cause); the
segments tile it too (how many compute / comm / memory activities run). `split` cuts the pieces
that depend on what runs beside them (gaps, copies, collectives) at every segment boundary with
one sort of the boundaries of both, classifies every elementary interval by column expressions,
expands the collective intervals into their peer-wait, imbalance and exposed parts, and merges
adjacent equal parts. The rule is the one of the per-piece loop it replaced (kept as the reference
in tests/cp_reference.py): work on the path that is neither a collective nor a copy is compute
whatever runs beside it; a collective is compute where compute runs beside it, else peer wait
(before the last rank arrived), imbalance (uneven split sizes) and exposed time; a gap is compute
where compute (or a copy alone) runs, communication where only a collective runs (the latest one
started that covers it), else the gap's own reason.

Codes (int8 columns of `CodedPath`): category = index in CATEGORIES; cause = index in CAUSES;
extra = index in EXTRAS, or EXTRAS + j for the j-th tuple of host syncs' ids (`extras`).
"""
from __future__ import annotations

from array import array
from bisect import bisect_right

import pyarrow as pa
import pyarrow.compute as pc

CATEGORIES = ("compute_ns", "all_to_all_ns", "other_comm_ns", "launch_bound_ns", "host_sync_ns", "idle_ns")
CAUSES = (None, "idle", "launch_bound", "host_sync", "peer_wait", "imbalance", "exposed_a2a", "exposed_comm")
CAUSE_CODE = {c: i for i, c in enumerate(CAUSES)}
EXTRAS = (None, "overlapped comm", "other stream")
IMBALANCE_MIN = 1.05   # (critical_path.IMBALANCE_MIN)

_COMPUTE, _A2A, _OTHER_COMM, _LAUNCH_CAT, _SYNC_CAT, _IDLE_CAT = range(6)
_IDLE, _LAUNCH, _SYNC, _PEER, _IMB, _EXP_A2A, _EXP_COMM = range(1, 8)
_OVERLAPPED, _OTHER_STREAM = 1, 2
_I64, _I8, _I32 = pa.int64(), pa.int8(), pa.int32()


def lit(v, typ=_I64) -> pa.Scalar:
    """A typed Arrow scalar (a bare Python number given to pyarrow.compute is converted by a path that
    tries to import dateutil each time, a search of sys.path where it is not installed)."""
    return pa.scalar(v, typ)


_TRUE, _FALSE = lit(True, pa.bool_()), lit(False, pa.bool_())
_ONE_TRUE, _ONE_FALSE = pa.array([True], pa.bool_()), pa.array([False], pa.bool_())


def arrow_ints(a) -> pa.Array:
    """An array('q') (or a list of ints) as an int64 Arrow array: a view of the array's memory (no
    copy), so the array cannot grow while the Arrow array (not what is computed from it) lives."""
    if isinstance(a, array) and a.typecode == "q":
        return pa.Array.from_buffers(_I64, len(a), [None, pa.py_buffer(a)])
    return pa.array(a, _I64)


DENSE_SPAN = 4   # positions_in: keys spanning at most this many times their number are placed by their offset


def positions_in(values: pa.Array, keys: pa.Array, absent: int | None = -1) -> pa.Array:
    """For each of `values` (int64) its position in `keys` (int64, no nulls) as int32, `absent`
    where it is not among them or null (None: null; a key that repeats: its first position). Keys
    that lie close together (their span at most DENSE_SPAN times their number, as a window's
    activity ids and a trace's per-rank ids do) and do not repeat are placed by their offset from
    the smallest: where they run up one by one (keys[i] = keys[0] + i) the offset is the position,
    else each key's position is scattered into a table of the span (inverse_permutation) and looked
    up by the values' offsets. Other keys are hashed (index_in)."""
    def filled(pos: pa.Array) -> pa.Array:
        return pos if absent is None else pc.fill_null(pos, lit(absent, _I32))
    n = len(keys)
    if n:
        lo, hi = (v.as_py() for v in pc.min_max(keys).values())
        span = hi - lo + 1
        if span <= DENSE_SPAN * n:
            rel = pc.subtract(values, lit(lo))   # (a value outside the keys' span: null below)
            inside = pc.and_(pc.greater_equal(values, lit(lo)), pc.less_equal(values, lit(hi)))
            if not pc.all(inside).as_py():
                rel = pc.if_else(inside, rel, pa.scalar(None, _I64))
            if span == n and (n == 1 or pc.all(pc.greater(keys.slice(1), keys.slice(0, n - 1))).as_py()):
                return filled(rel.cast(_I32))
            table = pc.inverse_permutation(pc.subtract(keys, lit(lo)), max_index=span - 1, output_type=_I32)
            if table.null_count == span - n:   # (else a key repeats: hashed below)
                return filled(table.take(rel))
    return filled(pc.index_in(values, keys))


def to_q(col: pa.Array | pa.ChunkedArray) -> array:
    """An int64 Arrow column without nulls as array('q')."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if col.type != _I64:
        col = col.cast(_I64)
    out = array("q")
    if len(col):
        out.frombytes(memoryview(col.buffers()[1])[col.offset * 8:(col.offset + len(col)) * 8])
    return out


def _codes(col) -> bytes:
    """An int8 Arrow column without nulls as bytes (indexing gives ints)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return bytes(memoryview(col.buffers()[1])[col.offset:col.offset + len(col)]) if len(col) else b""


class CodedPath:
    """A window's critical path as columns in time order: start, end, k (array('q'); k the
    activity's index in the window's Acts, -1 for none), and the codes of category, cause (bytes)
    and extra (array('q')); see the module's doc. `category`, `cause` and `extra` give them as lists of
    values (built on first use); iterating gives the segments as dicts."""

    def __init__(self, acts, start: array, end: array, k: array, cat: bytes, cause: bytes, extra: array,
                 extras: list):
        self.acts = acts
        self.start, self.end, self.k = start, end, k
        self.cat_code, self.cause_code, self.extra_code = cat, cause, extra
        self.extras = extras   # the host syncs' ids of extra codes len(EXTRAS) + j
        self._lists: dict = {}

    def __len__(self) -> int:
        return len(self.start)

    def _list(self, name: str, codes, values) -> list:
        got = self._lists.get(name)
        if got is None:
            got = self._lists[name] = [values[c] for c in codes]
        return got

    @property
    def category(self) -> list:
        return self._list("category", self.cat_code, CATEGORIES)

    @property
    def cause(self) -> list:
        return self._list("cause", self.cause_code, CAUSES)

    @property
    def extra(self) -> list:
        return self._list("extra", self.extra_code, EXTRAS + tuple(self.extras))

    def extra_at(self, j: int):
        """extra[j] (without building the list)."""
        e = self.extra_code[j]
        return EXTRAS[e] if e < len(EXTRAS) else self.extras[e - len(EXTRAS)]

    def id(self, j: int):
        k = self.k[j]
        return self.acts.id[k] if k >= 0 else None

    def __iter__(self):
        cat, cause, extra = self.category, self.cause, self.extra
        for j in range(len(self.start)):
            yield {"start": self.start[j], "end": self.end[j], "category": cat[j],
                   "cause": cause[j], "id": self.id(j), "extra": extra[j]}


def _piece_columns(pieces) -> tuple:
    """(start, end, k, cause code) as Arrow arrays and the syncs list of the pieces (critical_path.Pieces, or
    tuples (start, end, k or None, cause, syncs))."""
    if hasattr(pieces, "code"):
        return (arrow_ints(pieces.start), arrow_ints(pieces.end), arrow_ints(pieces.k),
                pa.Array.from_buffers(_I8, len(pieces.code), [None, pa.py_buffer(bytes(pieces.code))]), pieces.syncs)
    rows = list(pieces)
    return (pa.array([p[0] for p in rows], _I64), pa.array([p[1] for p in rows], _I64),
            pa.array([-1 if p[2] is None else p[2] for p in rows], _I64),
            pa.array([CAUSE_CODE[p[3]] for p in rows], _I8), [p[4] for p in rows])


def first_of_runs(keys: list) -> pa.Array:
    """Mask of the rows whose keys differ from the row before (the first row: true)."""
    n = len(keys[0])
    if n == 0:
        return pa.array([], pa.bool_())
    diff = None
    for c in keys:
        d = pc.not_equal(c.slice(1), c.slice(0, n - 1))
        diff = d if diff is None else pc.or_(diff, d)
    return pa.concat_arrays([_ONE_TRUE, diff])


def split(pieces, segs, acts, comm: dict) -> CodedPath:
    """The path of one window (`CodedPath`, adjacent equal parts merged) from the walk's pieces (in time
    order, tiling the window), the window's segments (critical_path.Segments: t, e, c, m, x sorted by t)
    and activities (Acts: id, start, end, cls); compute parts carry no activity (k -1).
    comm: id -> {"kind", "wait_until", "imbalance"} for communication activities."""
    ps, pe, pk, pcause, psyncs = _piece_columns(pieces)
    keep = pc.greater(pe, ps)
    if len(ps) and not pc.all(keep).as_py():
        idx = pc.indices_nonzero(keep)
        ps, pe, pk, pcause = ps.take(idx), pe.take(idx), pk.take(idx), pcause.take(idx)
        psyncs = [psyncs[i] for i in idx.to_pylist()]
    n_act = len(acts.id)
    ids = acts.id
    # per activity: 1 a copy, 2 a collective with comm info, else 0; one more entry (0) for k = -1
    by_class = getattr(acts, "cls_code", None)   # (a chunk's: 1 memory, 2 comm; else from the class names)
    comm_ks = []
    if by_class is not None and len(by_class) == n_act == len(acts.cls):
        act_code = bytearray(by_class)
        act_code.append(0)
        classes = pa.Array.from_buffers(_I8, n_act, [None, pa.py_buffer(by_class)])
        for k in pc.indices_nonzero(pc.equal(classes, lit(2, _I8))).to_pylist():
            if ids[k] in comm:
                comm_ks.append(k)
            else:
                act_code[k] = 0
    else:
        act_code = bytearray(n_act + 1)
        for k, c in enumerate(acts.cls):
            if c == "memory":
                act_code[k] = 1
            elif c == "comm" and ids[k] in comm:
                act_code[k] = 2
                comm_ks.append(k)
    code_of_act = pa.Array.from_buffers(_I8, n_act + 1, [None, pa.py_buffer(bytes(act_code))])
    pcode = code_of_act.take(pc.if_else(pc.less(pk, lit(0)), lit(n_act), pk))
    split_me = pc.or_(pc.not_equal(pcause, lit(0, _I8)), pc.not_equal(pcode, lit(0, _I8)))
    plain = pc.indices_nonzero(pc.invert(split_me))   # plain work: compute over its whole span
    n = len(plain)
    parts = [(ps.take(plain), pe.take(plain), _const(n, _COMPUTE, _I8), _const(n, 0, _I8), _const(n, -1, _I64),
              _const(n, 0, _I32))]
    extras: list = []
    b_idx = pc.indices_nonzero(split_me)
    if len(b_idx):
        extra_of_piece, extras = _extras_of(pcause, psyncs)
        sub = _elementary(b_idx, ps, pe, segs)
        parts += _classify(sub, pk, pcause, pcode, extra_of_piece, acts, comm, comm_ks)
    return _assemble(acts, parts, extras)


def _const(n: int, v: int, typ) -> pa.Array:
    return pa.repeat(pa.scalar(v, typ), n)


def _extras_of(pcause: pa.Array, psyncs: list) -> tuple[pa.Array, list]:
    """Per piece the extra code of its host_sync parts (the host syncs' ids as a tuple, coded), and the tuples."""
    extra = [0] * len(pcause)
    tuples: dict = {}
    for i in pc.indices_nonzero(pc.equal(pcause, lit(_SYNC, _I8))).to_pylist():
        t = tuple(h["id"] for h in psyncs[i])
        extra[i] = len(EXTRAS) + tuples.setdefault(t, len(tuples))
    return pa.array(extra, _I32), list(tuples)


def _ends_needed(starts: pa.Array, ends: pa.Array, follows: pa.Array | None = None) -> pa.Array:
    """Indices of the intervals (sorted, disjoint) whose end is no start of the next one (`follows`:
    whether the next one is among them, where the intervals are a subset of a tiling)."""
    n = len(starts)
    if n == 0:
        return pa.array([], _I64)
    meets = pc.equal(ends.slice(0, n - 1), starts.slice(1))
    if follows is not None:
        meets = pc.and_(meets, follows)
    return pc.indices_nonzero(pa.concat_arrays([pc.invert(meets), _ONE_TRUE])).cast(_I64)


def _elementary(b_idx: pa.Array, ps: pa.Array, pe: pa.Array, segs) -> tuple:
    """The pieces b_idx cut at every boundary of the (non-empty) segments: (a, b, piece, the
    segments' c, m, x there, 0 where no segment covers it)."""
    st, se = arrow_ints(segs.t), arrow_ints(segs.e)
    qs = pc.indices_nonzero(pc.greater(se, st)).cast(_I32)   # (an empty segment covers nothing)
    st_q, se_q = st.take(qs), se.take(qs)
    bs, be = ps.take(b_idx), pe.take(b_idx)
    # (whether piece i + 1, the next of b_idx's piece i where it meets it, is split too)
    nxt = pc.add(b_idx.slice(0, max(0, len(b_idx) - 1)), lit(1, b_idx.type))
    follows = pc.equal(b_idx.slice(1), nxt) if len(b_idx) else None
    b_end = _ends_needed(bs, be, follows)
    q_end = _ends_needed(st_q, se_q)
    del nxt, follows
    nb, nq, nbe, nqe = len(b_idx), len(qs), len(b_end), len(q_end)
    # boundaries: a piece's start sets the piece, its end (where no split piece starts) clears it
    # (-1), likewise the segments; at one time the clearing sorts first, so the last row of a time
    # holds the state after it
    t = pa.concat_arrays([bs, be.take(b_end), st_q, se_q.take(q_end)])
    order = pc.sort_indices(pa.table({"t": t, "o": pa.concat_arrays([_const(nb, 1, _I8), _const(nbe, 0, _I8),
                                                                     _const(nq, 1, _I8), _const(nqe, 0, _I8)])}),
                            [("t", "ascending"), ("o", "ascending")])
    del bs, be, st_q, se_q
    t = t.take(order)
    n = len(t)
    last = pc.indices_nonzero(pa.concat_arrays([pc.not_equal(t.slice(0, n - 1), t.slice(1)), _ONE_TRUE]))
    p = pc.fill_null_forward(pa.concat_arrays([b_idx.cast(_I32), _const(nbe, -1, _I32),
                                               pa.nulls(nq + nqe, _I32)]).take(order)).take(last)
    s = pc.fill_null_forward(pa.concat_arrays([pa.nulls(nb + nbe, _I32), qs, _const(nqe, -1, _I32)])
                             .take(order)).take(last)
    t = t.take(last)
    del order, last
    n = len(t)
    inside = pc.indices_nonzero(pc.fill_null(pc.greater_equal(p.slice(0, n - 1), lit(0, _I32)), _FALSE))
    a, b, i, q = t.take(inside), t.slice(1).take(inside), p.take(inside), s.take(inside)
    q = pc.if_else(pc.fill_null(pc.less(q, lit(0, _I32)), _TRUE), pa.scalar(None, _I32), q)
    return (a, b, i, pc.fill_null(arrow_ints(segs.c).take(q), lit(0)), pc.fill_null(arrow_ints(segs.m).take(q), lit(0)),
            pc.fill_null(arrow_ints(segs.x).take(q), lit(0)))


def _classify(sub: tuple, pk, pcause, pcode, extra_of_piece, acts, comm: dict, comm_ks: list) -> list:
    """The parts (start, end, category, cause, k, extra) of the elementary intervals `sub`."""
    a, b, i, c, m, x = sub
    k, cause, code = pk.take(i), pcause.take(i), pcode.take(i)
    is_act = pc.equal(cause, lit(0, _I8))
    c0, m_pos = pc.equal(c, lit(0)), pc.greater(m, lit(0))
    # a copy beside a collective alone is a gap (idle unless a collective covers it)
    mem_gap = pc.and_(pc.and_(is_act, pc.equal(code, lit(1, _I8))), pc.and_(c0, m_pos))
    gap = pc.or_(pc.invert(is_act), mem_gap)
    gcause = pc.if_else(is_act, pa.scalar(_IDLE, _I8), cause)
    # gaps: compute where compute (or a copy alone) runs, a collective where one runs alone, else the reason
    g_compute = pc.and_(gap, pc.or_(pc.invert(c0), pc.and_(pc.greater(x, lit(0)), pc.invert(m_pos))))
    g_comm = pc.and_(pc.and_(gap, pc.invert(g_compute)), m_pos)
    g_own = pc.and_(gap, pc.invert(pc.or_(g_compute, g_comm)))
    # activities: a copy is compute; a collective is compute where compute runs beside it
    a_comm = pc.and_(pc.invert(gap), pc.equal(code, lit(2, _I8)))
    a_overlap = pc.and_(a_comm, pc.invert(c0))
    is_launch, is_sync = pc.equal(gcause, lit(_LAUNCH, _I8)), pc.equal(gcause, lit(_SYNC, _I8))
    own_cat = pc.if_else(is_sync, pa.scalar(_SYNC_CAT, _I8),
                         pc.if_else(is_launch, pa.scalar(_LAUNCH_CAT, _I8), pa.scalar(_IDLE_CAT, _I8)))
    cat = pc.if_else(g_own, own_cat, pa.scalar(_COMPUTE, _I8))
    out_cause = pc.if_else(g_own, gcause, pa.scalar(0, _I8))
    out_k = pc.if_else(g_own, k, pa.scalar(-1, _I64))
    extra = pc.if_else(pc.and_(g_own, is_sync), extra_of_piece.take(i), pa.scalar(0, _I32))
    extra = pc.if_else(g_compute, pa.scalar(_OTHER_STREAM, _I32), extra)
    extra = pc.if_else(a_overlap, pa.scalar(_OVERLAPPED, _I32), extra)
    # the collective whose parts an interval gets: its own, or the latest-started one covering a gap
    ck = pc.if_else(pc.and_(a_comm, c0), k, pa.scalar(None, _I64))
    run_idx = pc.indices_nonzero(g_comm)
    if len(run_idx):
        got = pa.array(_running(acts, comm_ks, a.take(run_idx).to_pylist(), b.take(run_idx).to_pylist()), _I64)
        ck = pc.replace_with_mask(ck, g_comm, got)
        alone = pc.and_(g_comm, pc.is_null(ck))    # none covers it: exposed communication
        cat = pc.if_else(alone, pa.scalar(_OTHER_COMM, _I8), cat)
        out_cause = pc.if_else(alone, pa.scalar(_EXP_COMM, _I8), out_cause)
        out_k = pc.if_else(alone, k, out_k)
    simple = pc.indices_nonzero(pc.is_null(ck))
    parts = [(a.take(simple), b.take(simple), cat.take(simple), out_cause.take(simple), out_k.take(simple),
              extra.take(simple))]
    cj = pc.indices_nonzero(pc.is_valid(ck))
    if len(cj):
        parts += _comm_parts(a.take(cj), b.take(cj), ck.take(cj), comm, comm_ks, acts.id)
    return parts


def _running(acts, comm_ks: list, lo: list, hi: list) -> list:
    """For each interval [lo, hi): the collective (index k) that covers it and started last (then by
    id, end, k), or None."""
    ids, start, end = acts.id, acts.start, acts.end
    rows = sorted((start[k], ids[k], end[k], k) for k in comm_ks)
    starts = [r[0] for r in rows]
    out: list = []
    for a, b in zip(lo, hi, strict=True):
        j = bisect_right(starts, a) - 1
        while j >= 0 and rows[j][2] < b:
            j -= 1
        out.append(rows[j][3] if j >= 0 else None)
    return out


def _comm_parts(a, b, ck, comm: dict, comm_ks: list, ids) -> list:
    """A collective's part of [a, b): peer wait before its wait_until, then imbalance (the share
    1 - 1/ratio of the rest, where the split sizes' max/mean ratio exceeds IMBALANCE_MIN), then
    exposed time."""
    a2a, wu, ratio = [], [], []
    for k in comm_ks:
        info = comm[ids[k]]
        a2a.append(info["kind"] == "all_to_all")
        wu.append(info.get("wait_until"))
        ratio.append(float((info.get("imbalance") or {}).get("max_over_mean", 1.0)))
    pos = pc.index_in(ck, pa.array(comm_ks, _I64))
    is_a2a = pa.array(a2a, pa.bool_()).take(pos)
    wu_a, ratio_a = pa.array(wu, _I64).take(pos), pa.array(ratio, pa.float64()).take(pos)
    cat = pc.if_else(is_a2a, pa.scalar(_A2A, _I8), pa.scalar(_OTHER_COMM, _I8))
    exposed = pc.if_else(is_a2a, pa.scalar(_EXP_A2A, _I8), pa.scalar(_EXP_COMM, _I8))
    peer_end = pc.if_else(pc.fill_null(pc.greater(wu_a, a), _FALSE), pc.min_element_wise(b, wu_a), a)
    rest = pc.subtract(b, peer_end)
    one = lit(1.0, pa.float64())
    share = pc.subtract(one, pc.divide(one, ratio_a))
    imb = pc.round(pc.multiply(rest.cast(pa.float64()), share), 0, "half_to_even").cast(_I64)
    uneven = pc.and_(pc.greater(ratio_a, lit(IMBALANCE_MIN, pa.float64())), pc.greater(rest, lit(0)))
    imb = pc.if_else(uneven, imb, lit(0))
    imb_end = pc.add(peer_end, imb)
    n = len(a)
    no_extra = _const(n, 0, _I32)
    out = []
    for part in ((a, peer_end, cat, _const(n, _PEER, _I8), ck, no_extra),
                 (peer_end, imb_end, cat, _const(n, _IMB, _I8), ck, no_extra),
                 (imb_end, b, cat, exposed, ck, no_extra)):
        keep = pc.indices_nonzero(pc.greater(part[1], part[0]))   # (the empty ones dropped)
        out.append(tuple(col.take(keep) for col in part))
    return out


def _assemble(acts, parts: list, extras: list) -> CodedPath:
    """The parts (disjoint, tiling the window; each part's rows in time order) in time order,
    adjacent equal ones merged. Column by column, each sorted as it is concatenated (the largest
    window's parts are a few million rows)."""
    order = pc.sort_indices(pa.concat_arrays([p[0] for p in parts]))
    start, end, cat, cause, k, extra = (pa.concat_arrays([p[j] for p in parts]).take(order) for j in range(6))
    del order
    n = len(start)
    if n:
        first = first_of_runs([cat, cause, k, extra])
        first = pc.or_(first, pa.concat_arrays([_ONE_FALSE, pc.not_equal(start.slice(1), end.slice(0, n - 1))]))
        runs = pc.indices_nonzero(first)
        ends = pc.subtract(pa.concat_arrays([runs.slice(1).cast(_I64), pa.array([n], _I64)]), lit(1))
        start, cat, cause, k, extra = (col.take(runs) for col in (start, cat, cause, k, extra))
        end = end.take(ends)
    path = CodedPath(acts, to_q(start), to_q(end), to_q(k), _codes(cat), _codes(cause), to_q(extra), extras)
    del start, end, cat, cause, k, extra
    return path
