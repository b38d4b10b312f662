"""Critical path of each step window (per rank), walked backwards from the end of the step.

The dependency graph comes from the canonical tables (`cp_preds`): order on each stream,
cross-stream waits (stream_wait_event records; where a trace records none, an activity on another
stream that ended while this one's stream sat idle with its launch already issued is taken as
the awaited work), launch edges (a kernel starts no earlier than its launch call; when the call
ended after the GPU predecessors had finished, the GPU waited for the host) and host syncs (the
host blocked in a sync call until the GPU drained, so the work launched next could not be queued
ahead). The walk starts at the activity that ends the window; at each activity it follows the
predecessor that finished last. A gap between that predecessor's end and the activity's start is
GPU idle on the path and gets its reason: `host_sync` (the launching thread returned from a host
sync inside the gap), `launch_bound` (the launch call ended after the GPU was ready), else `idle`
(work was queued: GPU-side latency or an unrecorded dependency).

The walk's pieces cover the window exactly (integer ns). Each piece is then split over the
elementary segments of the timeline (`segments`): time with a compute kernel running anywhere
counts as compute (a collective on the path that compute hides is not a stall), time with only
communication running is communication (peer wait before the last rank arrived, imbalance where
split sizes are uneven, else exposed), time with nothing running keeps the gap's reason.
"""
from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from ..engine.pipeline import build
from ..engine.session import Session
from ..engine.steps import lookup
from . import cp_rows, cp_split, cp_walk

CATEGORIES = cp_split.CATEGORIES
IMBALANCE_MIN = cp_split.IMBALANCE_MIN  # max/mean split size above which part of an exposed all-to-all is imbalance
NULL = -(2 ** 63)     # a null time / id in the integer columns (below every real value)
WALK_IN_BULK = 2_000  # activities of a window from which cp_walk walks it
SPLIT_IN_BULK = 2_000  # activities of a window from which cp_split splits its path (below: cp_rows' loop)
RELEASE_AFTER = 100_000  # activities / pieces of a window after whose walk / split Arrow's unused memory is released
CHUNK_ROWS = 250_000  # the GPU activities of the ranks fetched together (a rank is never cut)
# shadowed by a rank filter in the per-chunk query (cp_preds' inputs and the attribution)
_CHUNK_INPUTS = ("activity_class", "syncs", "launches", "windows", "activity_origin",
                 "activity_attribution")


def prepare(session: Session, syncs: bool = True) -> None:
    """Build what the per-chunk critical-path query reads (cp_preds itself is never materialized
    for every rank at once: `iter_paths` runs its SQL per chunk of ranks), and the host syncs the
    walks read besides (cp_host_syncs; `syncs` False: not yet, for chunks fetched without them)."""
    build(session, (["cp_host_syncs"] if syncs else []) + ["activity_class", "windows", "activity_origin"])


def _ints(col, null: int = NULL) -> array:
    """An integer Arrow column as array('q') (8 bytes a value, no Python objects), nulls as `null`."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if col.type != pa.int64():
        col = col.cast(pa.int64())
    if col.null_count:
        col = pc.fill_null(col, null)
    out = array("q")
    if len(col):
        out.frombytes(memoryview(col.buffers()[1])[col.offset * 8:(col.offset + len(col)) * 8])
    return out


def _shared_strings(col) -> list:
    """A string column as a list whose equal values are one object (a window's class or stage
    repeats a few values over hundreds of thousands of rows)."""
    if pa.types.is_dictionary(col.type):   # already coded (a trace's names): per chunk, no hashing
        memo: dict = {}
        out: list = []
        for ch in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
            values = [v if v is None else memo.setdefault(v, v) for v in ch.dictionary.to_pylist()] + [None]
            out += [values[i] for i in _ints(ch.indices, -1)]
        return out
    enc = col.dictionary_encode() if len(col) else None
    if enc is None:
        return []
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks() if enc.num_chunks != 1 else enc.chunk(0)
    values = enc.dictionary.to_pylist() + [None]
    idx = _ints(enc.indices, -1)
    return [values[i] for i in idx]


class _Columns:
    """A chunk's activity rows (sorted by rank, step, end, start, id) as Python columns, converted
    once: integers as array('q') (nulls NULL), strings as lists of shared objects, attr the
    (layer, phase, stage) tuples (one object per distinct value)."""

    def __init__(self, table: pa.Table):
        self.rows = table.num_rows
        c = table.column
        self.id, self.stream, self.tid = _ints(c("id")), _ints(c("stream")), _ints(c("tid"))
        self.start, self.end = _ints(c("start_ns")), _ints(c("end_ns"))
        self.ostart, self.oend = _ints(c("origin_start_ns")), _ints(c("origin_end_ns"))
        self.prev_id, self.prev_end = _ints(c("prev_id")), _ints(c("prev_end_ns"))
        self.wsrc_id, self.wsrc_end = _ints(c("wait_src_id")), _ints(c("wait_src_end_ns"))
        self.cls = _shared_strings(table.column("class"))
        self.cls_code = _class_codes(table.column("class"))
        self.kind = _shared_strings(table.column("kind"))
        self.name = _shared_strings(table.column("name"))
        attr = _attr_columns(*(table.column(n) for n in ("layer", "phase", "stage")))
        self.attr, self.attr_key, self.attr_of_key = attr


_CLASS_CODE = {"memory": 1, "comm": 2}   # (cp_split.split's codes of an activity's class; other classes 0)


def _class_codes(col) -> array:
    """A class column's codes (_CLASS_CODE, 0 for another class or none) as array('b')."""
    codes, values = _codes(col)
    table = pa.array([_CLASS_CODE.get(v, 0) for v in values] + [0], pa.int8())   # (the last: none)
    got = table.take(pc.if_else(pc.less(codes, pa.scalar(0, pa.int64())), pa.scalar(len(values), pa.int64()), codes))
    out = array("b")
    out.frombytes(memoryview(got.buffers()[1])[got.offset:got.offset + len(got)])
    return out


def _codes(col) -> tuple[pa.Array, list]:
    """A column's dictionary codes (int64, null -1) and its values (a coded column's own
    dictionary, else the values in order of first appearance)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    return pc.fill_null(col.indices.cast(pa.int64()), -1), col.dictionary.to_pylist()


def _attr_columns(layer, phase, stage) -> tuple[list, array, dict]:
    """Per row the (layer, phase, stage) tuple (one object per distinct value) and its key: an
    integer equal for equal tuples, 0 for (None, None, None) (stalls._attr_codes groups by it);
    and each key's tuple."""
    (lc, lv), (pcode, pv), (sc, sv) = _codes(layer), _codes(phase), _codes(stage)
    n_p, n_s = len(pv) + 1, len(sv) + 1

    def plus(x, y):
        return pc.add(x, pa.scalar(y, pa.int64()))

    def times(x, y):
        return pc.multiply(x, pa.scalar(y, pa.int64()))
    key = plus(pc.add(times(plus(pc.add(times(plus(lc, 1), n_p), pcode), 1), n_s), sc), 1)
    enc = key.dictionary_encode()
    lv, pv, sv = lv + [None], pv + [None], sv + [None]   # (code -1: the last, None)
    keys = enc.dictionary.to_pylist()
    tuples = [(lv[k // n_s // n_p - 1], pv[k // n_s % n_p - 1], sv[k % n_s - 1]) for k in keys]
    return [tuples[i] for i in _ints(enc.indices)], _ints(key), dict(zip(keys, tuples, strict=True))


class Acts:
    """One window's activities as columns in (end, start, id) order (k: the index of an activity):
    integer columns as array('q') with nulls as NULL, prev_k / wsrc_k the index of the stream
    predecessor / wait source in this window (-1: none here), cls the class, attr the (layer,
    phase, stage) of each activity (one tuple object per distinct value) and attr_key its key (equal
    for equal tuples, 0 for (None, None, None); None where attr was set by hand; attr_of_key: the
    tuple of each key, the chunk's: a superset of the window's). Rows as dicts
    only on request (`row`, `get`): a window of a large export holds hundreds of thousands of
    activities."""

    def __init__(self, table: pa.Table | None = None, cols: _Columns | None = None, lo: int = 0,
                 hi: int | None = None, rank: int | None = None):
        """From the rows of one window (`table`: cp_preds rows with layer, phase, stage; the rows of
        the chunk `cols` from lo to hi; or nothing)."""
        if cols is None and table is not None and table.num_rows:
            cols, lo, hi, rank = _Columns(table), 0, table.num_rows, table.column("rank")[0].as_py()
        self.rank = rank
        if cols is None or hi is None or hi <= lo:
            e = array("q")
            self.id = self.stream = self.start = self.end = self.tid = e
            self.ostart = self.oend = self.prev_k = self.prev_end = self.wsrc_k = self.wsrc_end = e
            self.cls, self.attr, self._name, self._kind, self._ids = [], [], [], [], (array("q"), array("q"))
            self.cls_code = array("b")
            self.attr_key: array | None = None
            self.attr_of_key: dict = {}
            self._pos: dict | None = {}
            return
        if lo == 0 and hi == cols.rows:   # the window is the whole chunk: share its columns
            self.id, self.stream, self.tid, self.start, self.end = cols.id, cols.stream, cols.tid, cols.start, cols.end
            self.ostart, self.oend, self.prev_end, self.wsrc_end = cols.ostart, cols.oend, cols.prev_end, cols.wsrc_end
            self.cls, self.attr, self._name, self.attr_key = cols.cls, cols.attr, cols.name, cols.attr_key
            self.cls_code = cols.cls_code
            self.attr_of_key = cols.attr_of_key
            prev_id, wsrc_id = cols.prev_id, cols.wsrc_id
            self._kind = cols.kind
        else:
            self.id, self.stream, self.tid = cols.id[lo:hi], cols.stream[lo:hi], cols.tid[lo:hi]
            self.start, self.end = cols.start[lo:hi], cols.end[lo:hi]
            self.ostart, self.oend = cols.ostart[lo:hi], cols.oend[lo:hi]
            self.prev_end, self.wsrc_end = cols.prev_end[lo:hi], cols.wsrc_end[lo:hi]
            self.cls, self.attr, self._name = cols.cls[lo:hi], cols.attr[lo:hi], cols.name[lo:hi]
            self.cls_code = cols.cls_code[lo:hi]
            self.attr_key, self.attr_of_key = cols.attr_key[lo:hi], cols.attr_of_key
            prev_id, wsrc_id = cols.prev_id[lo:hi], cols.wsrc_id[lo:hi]
            self._kind = cols.kind[lo:hi]
        self._ids = (prev_id, wsrc_id)
        ids = cp_split.arrow_ints(self.id)   # (ids are unique in a window)
        self.prev_k = cp_split.to_q(cp_split.positions_in(cp_split.arrow_ints(prev_id), ids))
        self.wsrc_k = cp_split.to_q(cp_split.positions_in(cp_split.arrow_ints(wsrc_id), ids))
        del ids
        self._pos = None   # built on request (`index`): the walk needs none

    def __len__(self) -> int:
        return len(self.id)

    def name(self, k: int) -> str | None:
        return self._name[k]

    def row(self, k: int) -> dict:
        def v(x):
            return None if x == NULL else x
        return {"id": self.id[k], "rank": self.rank, "stream": v(self.stream[k]), "start_ns": self.start[k],
                "end_ns": self.end[k], "class": self.cls[k], "kind": self._kind[k], "name": self._name[k],
                "tid": v(self.tid[k]), "origin_start_ns": v(self.ostart[k]), "origin_end_ns": v(self.oend[k]),
                "prev_id": v(self._ids[0][k]), "prev_end_ns": v(self.prev_end[k]),
                "wait_src_id": v(self._ids[1][k]), "wait_src_end_ns": v(self.wsrc_end[k])}

    def index(self, i) -> int | None:
        """k of activity id i (None when it is not in the window)."""
        if self._pos is None:
            self._pos = {v: k for k, v in enumerate(self.id)}
        return self._pos.get(i)

    def get(self, i) -> dict | None:
        k = self.index(i)
        return None if k is None else self.row(k)


class Segments:
    """One window's timeline segments (`segments` rows) as array('q') columns, sorted by start:
    t, t_end and the number of compute (c), comm (m) and memory (x) activities running. From a
    table of them, or rows lo to hi of a chunk's columns (`cols`)."""

    NAMES = ("t", "t_end", "c", "m", "x")

    def __init__(self, table: pa.Table | None = None, cols: tuple | None = None, lo: int = 0, hi: int = 0):
        if cols is None:
            cols = tuple(_ints(table.column(n)) if table is not None else array("q") for n in self.NAMES)
            lo, hi = 0, len(cols[0])
        full = lo == 0 and hi == len(cols[0])
        self.t, self.e, self.c, self.m, self.x = (c if full else c[lo:hi] for c in cols)

    def __len__(self) -> int:
        return len(self.t)


Path = cp_split.CodedPath   # (a window's critical path: columns in time order)


def walk(acts: Acts, ws: int, we: int, syncs_by_tid: dict | None = None,
         infer_waits: bool = False) -> list[tuple]:
    """Backward walk over one window's activities. Returns pieces in time order, as tuples
    (start, end, k, cause, syncs): k the activity's index in `acts` (None for window-level gaps),
    cause None for an activity on the path, else the gap's reason (syncs: the host syncs of a
    `host_sync` gap)."""
    return list(walk_columns(acts, ws, we, syncs_by_tid, infer_waits).tuples())


class Pieces:
    """The walk's pieces as columns (start, end, k with -1 for none, code: the cause's code in
    cp_split.CAUSES, syncs)."""

    def __init__(self):
        self.start, self.end, self.k = array("q"), array("q"), array("q")
        self.code = array("b")
        self.syncs: list = []

    def add(self, p: tuple) -> None:
        self.start.append(p[0])
        self.end.append(p[1])
        self.k.append(-1 if p[2] is None else p[2])
        self.code.append(_CAUSE_CODE[p[3]])
        self.syncs.append(p[4])

    @property
    def cause(self) -> list:
        return [_CAUSES[c] for c in self.code]

    def reverse(self) -> None:
        for c in (self.start, self.end, self.k, self.code, self.syncs):
            c.reverse()

    def tuples(self):
        return ((a, b, None if k < 0 else k, _CAUSES[c], y)
                for a, b, k, c, y in zip(self.start, self.end, self.k, self.code, self.syncs, strict=True))


_CAUSES, _CAUSE_CODE = cp_split.CAUSES, cp_split.CAUSE_CODE
_EMPTY: list = []   # the syncs of a gap without host syncs (shared: never changed)


def walk_columns(acts: Acts, ws: int, we: int, syncs_by_tid: dict | None = None,
                 infer_waits: bool = False) -> Pieces:
    """`walk`, its pieces as columns (a window of a large export has hundreds of thousands)."""
    pieces = Pieces()
    if we <= ws:
        return pieces
    n = len(acts)
    if n == 0:
        pieces.add((ws, we, None, "idle", _EMPTY))
        return pieces
    if n >= WALK_IN_BULK:   # (cp_walk: the choices at every activity made at once)
        last = n - 1
        while last > 0 and acts.end[last - 1] == acts.end[n - 1]:
            last -= 1
        cp_walk.walk(acts, ws, we, last, syncs_by_tid, infer_waits, pieces, _syncs_in, _inferred)
        if n >= RELEASE_AFTER:   # (the walk's Arrow memory, back to the system)
            pa.default_memory_pool().release_unused()
        return pieces
    # the columns as lists: indexing one returns its objects (an array makes a new int each time)
    start, end, ostart, oend = acts.start.tolist(), acts.end.tolist(), acts.ostart.tolist(), acts.oend.tolist()
    ids, stream = acts.id.tolist(), acts.stream.tolist()
    prev_k, prev_end = acts.prev_k.tolist(), acts.prev_end.tolist()
    wsrc_k, wsrc_end = acts.wsrc_k.tolist(), acts.wsrc_end.tolist()
    last = n - 1  # the activity ending last (earliest start, then lowest id, among ties)
    while last > 0 and end[last - 1] == end[n - 1]:
        last -= 1
    # (start, end, k, cause, syncs): see above
    append = pieces.add
    p_start, p_end, p_k, p_code, p_syncs = pieces.start, pieces.end, pieces.k, pieces.code, pieces.syncs
    t, seen = we, bytearray(n)
    if end[last] < we:  # the window ends with zero-length work (not among acts): nothing ran after it
        t = end[last] if end[last] > ws else ws
        append((t, we, None, "idle", _EMPTY))
    cur: int | None = last
    wm1 = ws - 1
    while t > ws:
        if cur is None or seen[cur]:
            append((ws, t, None, "idle", _EMPTY))
            break
        seen[cur] = 1
        s, e = start[cur], end[cur]
        if s < ws:
            s = ws
        if e > t:
            e = t
        if e > s:   # (pieces.add inlined: once per activity on the path)
            p_start.append(s)
            p_end.append(e)
            p_k.append(cur)
            p_code.append(0)
            p_syncs.append(None)
        if s < t:
            t = s
        if t <= ws:
            break
        # the candidate that finished last (time, then id, then k): the stream predecessor, the
        # wait source (where in the window) and, without wait records, the inferred wait
        g: Any = None               # (an int once pred is set; every comparison checks pred first)
        b_id: Any = None
        pred = None
        pk = prev_k[cur]
        if pk >= 0:
            g = prev_end[cur]
            if g > t:
                g = t
            pred, b_id = pk, ids[pk]
        wk = wsrc_k[cur]
        if wk >= 0:
            pe = wsrc_end[cur]
            if pe > t:
                pe = t
            if pred is None or pe > g or (pe == g and (ids[wk] > b_id or (ids[wk] == b_id and wk > pred))):
                g, pred, b_id = pe, wk, ids[wk]
        if infer_waits:  # no stream-wait records: the other stream's work that ended last before cur
            lo = wm1 if pred is None or g < wm1 else g
            # (`_inferred` with launched_before = ostart[cur], inlined: once per activity on the path)
            lb, cs = ostart[cur], stream[cur]
            i = bisect_right(end, t) - 1
            while i >= 0 and end[i] > lo:
                # a null launch start (NULL) is below every launch: it passes the test, as it always did
                if i != cur and stream[i] != cs and (lb == NULL or ostart[i] < lb):
                    pe = end[i]
                    if pred is None or pe > g or (pe == g and (ids[i] > b_id or (ids[i] == b_id and i > pred))):
                        g, pred, b_id = pe, i, ids[i]
                    break
                i -= 1
        g_eff = ws if g is None or g < ws else g
        if g_eff < t:
            if oend[cur] > g_eff:  # (a null launch end is NULL, below every time)
                found = _syncs_in(syncs_by_tid, acts, cur, g_eff, ostart[cur])
                append((g_eff, t, cur, "host_sync" if found else "launch_bound", found or _EMPTY))
            else:
                inf = _inferred(acts, cur, g_eff, t, ends=end, streams=stream)
                if inf is not None:
                    if end[inf] < t:
                        append((end[inf], t, cur, "idle", _EMPTY))
                    t, cur = end[inf], inf
                    continue
                append((g_eff, t, cur, "idle", _EMPTY))
            t = g_eff
        cur = pred if pred is not None and g is not None and g > wm1 else None
        if cur is None and t > ws:
            # no recorded predecessor inside the window: the latest activity that ended by now
            i = bisect_right(end, t) - 1
            inf = i if i >= 0 and end[i] > wm1 else None
            if inf is None:
                append((ws, t, None, "idle", _EMPTY))
                break
            if end[inf] < t:
                append((end[inf], t, None, "idle", _EMPTY))
            t, cur = end[inf], inf
    pieces.reverse()
    return pieces


def _inferred(acts: Acts, cur: int | None, lo: int, hi: int, launched_before: int = NULL,
              ends=None, streams=None) -> int | None:
    """The activity (another stream than cur's; launched before `launched_before` unless that is
    NULL) that ended last within (lo, hi]. ends, streams: acts.end, acts.stream as lists."""
    ends = acts.end if ends is None else ends
    i = bisect_right(ends, hi) - 1
    if cur is None:
        return i if i >= 0 and ends[i] > lo else None
    stream, ostart = acts.stream if streams is None else streams, acts.ostart
    cs = stream[cur]
    while i >= 0 and ends[i] > lo:
        # a null launch start (NULL) is below every launch: it passes the test, as it always did
        if i != cur and stream[i] != cs and (launched_before == NULL or ostart[i] < launched_before):
            return i
        i -= 1
    return None


def _syncs_in(syncs_by_tid: dict | None, acts: Acts, cur: int, lo: int, hi: int) -> list[dict]:
    """Host syncs on the launching thread that returned after the GPU was ready (lo) and before the launch."""
    if not syncs_by_tid or hi == NULL:
        return []
    tid = acts.tid[cur]
    lst = syncs_by_tid.get((acts.rank, None if tid == NULL else tid))
    if not lst:
        return []
    ends = lst[0]
    i = bisect_right(ends, hi) - 1
    out = []
    while i >= 0 and ends[i] >= lo:
        out.append(lst[1][i])
        i -= 1
    return out[::-1]


def split(pieces, segs: Segments, acts: Acts, comm: dict) -> Path:
    """The path (`Path`, in time order, adjacent equal segments merged); compute segments carry no
    activity (k -1: they merge across activities, only their sums are used).
    comm: id -> {"kind", "wait_until", "imbalance"} for communication activities (cp_split.split)."""
    if len(acts.id) >= SPLIT_IN_BULK:
        return cp_split.split(pieces, segs, acts, comm)
    return cp_rows.split(pieces, segs, acts, comm)   # (a small window: Arrow's per-call cost would be all of it)


def composition(path: Path, ws: int, we: int) -> dict:
    """The time of each category on the path, and of peer wait, imbalance and overlapped comm."""
    if len(path) < SPLIT_IN_BULK:
        return _composition_rows(path, ws, we)
    d = pc.subtract(cp_split.arrow_ints(path.end), cp_split.arrow_ints(path.start))
    cat = pa.Array.from_buffers(pa.int8(), len(path.cat_code), [None, pa.py_buffer(path.cat_code)])
    cause = pa.Array.from_buffers(pa.int8(), len(path.cause_code), [None, pa.py_buffer(path.cause_code)])

    def total(mask) -> int:
        return pc.sum(pc.filter(d, mask)).as_py() or 0
    i8 = pa.int8()
    comp = {name: total(pc.equal(cat, cp_split.lit(code, i8))) for code, name in enumerate(cp_split.CATEGORIES)}
    comp["peer_wait_ns"] = total(pc.equal(cause, cp_split.lit(cp_split.CAUSE_CODE["peer_wait"], i8)))
    comp["imbalance_ns"] = total(pc.equal(cause, cp_split.lit(cp_split.CAUSE_CODE["imbalance"], i8)))
    comp["overlapped_comm_ns"] = total(pc.equal(cp_split.arrow_ints(path.extra_code), cp_split.lit(1)))
    tot = sum(comp[k] for k in CATEGORIES)
    if tot != we - ws:
        raise AssertionError(f"critical path does not cover the window: {tot} != {we - ws}")
    comp["window_ns"] = we - ws
    return comp


_PEER, _IMBALANCE = cp_split.CAUSE_CODE["peer_wait"], cp_split.CAUSE_CODE["imbalance"]


def _composition_rows(path: Path, ws: int, we: int) -> dict:
    """composition one row at a time (a short path: Arrow's per-call cost would be all of it)."""
    by_cat = [0] * len(CATEGORIES)
    peer = imb = overlapped = 0
    for a, b, cat, cause, extra in zip(path.start, path.end, path.cat_code, path.cause_code, path.extra_code,
                                       strict=True):
        d = b - a
        by_cat[cat] += d
        if cause == _PEER:
            peer += d
        elif cause == _IMBALANCE:
            imb += d
        if extra == 1:   # (EXTRAS[1], overlapped comm)
            overlapped += d
    comp = dict(zip(CATEGORIES, by_cat, strict=True))
    comp["peer_wait_ns"], comp["imbalance_ns"], comp["overlapped_comm_ns"] = peer, imb, overlapped
    if sum(by_cat) != we - ws:
        raise AssertionError(f"critical path does not cover the window: {sum(by_cat)} != {we - ws}")
    comp["window_ns"] = we - ws
    return comp


def _rank_filter(ranks: list[int] | None) -> str:
    return "TRUE" if ranks is None else "list_contains($ranks, rank)"


def windows_data(session: Session, ranks: list[int] | None = None) -> dict:
    """What the walks need besides each chunk's rows, for the ranks in `ranks` (all when None):
    window bounds, the ranks whose traces record stream waits, and the chunks of ranks whose
    activities are fetched together (at most CHUNK_ROWS activities, or one rank)."""
    f, p = _rank_filter(ranks), {"ranks": ranks}
    win = {(w["rank"], w["step"]): (w["start_ns"], w["end_ns"]) for w in
           session.rows(f"SELECT rank, step, start_ns, end_ns FROM windows WHERE {f}", **p)}
    wait_ranks = {r["rank"] for r in session.rows("SELECT DISTINCT rank FROM syncs WHERE kind = 'stream_wait_event' "
                                                  f"AND {f}", **p)}
    chunks: list[list[int]] = []
    n = 0
    for r in session.rows(f"SELECT rank, count(*) AS n FROM activity_class WHERE {f} GROUP BY rank ORDER BY rank", **p):
        if not chunks or n + r["n"] > CHUNK_ROWS:
            chunks.append([])
            n = 0
        chunks[-1].append(r["rank"])
        n += r["n"]
    rest = sorted({r for r, _ in win} - {r for c in chunks for r in c})
    if rest:  # windows of ranks without GPU activity
        chunks.append(rest)
    return {"windows": win, "wait_ranks": wait_ranks, "chunks": chunks}


def _chunk_sql(session) -> str:
    """cp_preds' CTEs (its step's SQL less last_sync and the final SELECT: the walk reads the host
    syncs itself) over the ranks $ranks only, each input shadowed by its rows of those ranks, and
    the integer columns of its rows in (rank, step, end, start, id) order. The strings (class,
    kind, name, attribution) are left out (`_with_strings` adds them, coded): carried through the
    query's joins and sort they were most of its cost."""
    step = lookup("cp_preds")
    sql = (step.sql if step else None) or ""
    head, cut = sql.find("WITH acts AS ("), sql.find("\nlast_sync AS (")
    if head < 0 or cut < head:
        raise RuntimeError("cp_preds.sql no longer opens with the acts CTE and holds last_sync after the others")
    ctes = sql[head + len("WITH "):cut].rstrip()
    if not ctes.endswith(","):
        raise RuntimeError("cp_preds.sql: last_sync no longer follows the other CTEs")
    shadows = ",\n".join(f"{n} AS (SELECT * FROM {session.qualified(n)} WHERE list_contains($ranks, rank))"
                          for n in _CHUNK_INPUTS)
    return f"""WITH {shadows},
{ctes}
cp AS (
    SELECT w.rank, w.step, a.id, a.stream, a.start_ns, a.end_ns, a.tid, a.origin_start_ns, a.origin_end_ns,
           a.prev_id, a.prev_end_ns, b.wait_src_id, b.wait_src_end_ns
    FROM acts a
    JOIN windows w ON a.rank = w.rank AND a.end_ns > w.start_ns AND a.start_ns < w.end_ns
    LEFT JOIN best_wait b ON b.waiter_id = a.id
)
SELECT * FROM cp ORDER BY rank, step, end_ns, start_ns, id"""


def _bounds(table: pa.Table) -> dict:
    """(rank, step) -> (first row, end row) of each window in `table` (sorted by rank, step)."""
    n = table.num_rows
    if not n:
        return {}
    r, st = table.column("rank"), table.column("step")
    change = pc.or_(pc.not_equal(r.slice(1), r.slice(0, n - 1)), pc.not_equal(st.slice(1), st.slice(0, n - 1)))
    starts = [0] + [i + 1 for i in pc.indices_nonzero(change).to_pylist()]
    keys = zip(r.take(starts).to_pylist(), st.take(starts).to_pylist(), strict=True)
    ends = starts[1:] + [n]
    return {key: (starts[i], ends[i]) for i, key in enumerate(keys)}


def _coded(col):
    """A string column dictionary-coded (a coded one as it is)."""
    return col if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)


def _positions(ids, keys) -> pa.Array:
    """The position in `keys` (unique) of each of `ids`, null where absent (cp_split.positions_in:
    by offset where the keys lie close together, as a trace's ids are read and its per-rank steps
    keep them; else by hashing, most of the cost of taking a chunk's strings)."""
    ids, keys = ((c.chunk(0) if c.num_chunks == 1 else c.combine_chunks()) if isinstance(c, pa.ChunkedArray) else c
                 for c in (ids, keys))
    if keys.null_count or not pa.types.is_integer(keys.type):
        return pc.index_in(ids, keys)
    return cp_split.positions_in(ids.cast(pa.int64()), keys.cast(pa.int64()), absent=None)


def _with_strings(session: Session, acts: pa.Table, ranks: list[int]) -> pa.Table:
    """`acts` with the class, kind, name, layer, phase and stage of each activity, coded: kind and
    name taken from the session's gpu_activities rows of those ranks (attached: already coded),
    class from activity_class, the attribution from activity_attribution (null where none)."""
    src = session.attached("gpu_activities")
    if src is None:
        src = session.sql("SELECT id, kind, name FROM gpu_activities WHERE list_contains($ranks, rank)", ranks=ranks)
    else:
        mine = pc.is_in(src.column("rank"), pa.array(ranks, src.schema.field("rank").type))
        src = src.select(["id", "rank", "kind", "name"]).filter(mine)
    ids = acts.column("id")

    def add(t: pa.Table, names: tuple) -> pa.Table:
        idx = _positions(ids, t.column("id"))
        out = acts
        for n in names:
            col = t.column(n)
            out = out.append_column(n, (col if n == "layer" else _coded(col)).take(idx))
        return out
    # one source at a time (each let go before the next is read)
    acts = add(src, ("kind", "name"))
    del src
    acts = add(session.sql("SELECT id, class FROM activity_class WHERE list_contains($ranks, rank)", ranks=ranks),
               ("class",))
    acts = add(session.sql("SELECT id, layer, phase, stage FROM activity_attribution "
                           "WHERE list_contains($ranks, rank)", ranks=ranks), ("layer", "phase", "stage"))
    return acts


def fetch_chunk(session: Session, data: dict, i: int = 0, syncs: bool = True) -> dict:
    """The rows of chunk `i` of ranks of `windows_data`'s `data`, for `iter_paths` (`syncs` False:
    without the host syncs, for a chunk fetched before cp_host_syncs is built: `add_syncs`)."""
    return _chunk(session, data["chunks"][i], syncs)


def add_syncs(session: Session, fetched: dict, ranks: list[int]) -> None:
    """The host syncs of a chunk fetched without them (`fetch_chunk`), read now."""
    fetched["syncs"] = _host_syncs(session, ranks)


def _host_syncs(session: Session, ranks: list[int]) -> dict:
    """(rank, tid) -> (end times, rows) of the host syncs of `ranks`, by end."""
    syncs: dict = {}
    for h in session.rows("SELECT * FROM cp_host_syncs WHERE list_contains($ranks, rank) "
                          "ORDER BY rank, tid, end_ns, id", ranks=ranks):
        e = syncs.setdefault((h["rank"], h["tid"]), ([], []))
        e[0].append(h["end_ns"])
        e[1].append(h)
    return syncs


def _chunk(session: Session, ranks: list[int], syncs: bool = True) -> dict:
    """One chunk of ranks: its activities (columns) and segments, each window's rows (bounds), the
    host syncs (None where `syncs` is False)."""
    acts = session.sql(_chunk_sql(session), ranks=ranks)
    if acts.num_rows >= RELEASE_AFTER:   # the pages of the query's joins and sort, given back before the
        duck.release_unused()            # rows are coded and copied here (a large chunk's peak)
    acts = _with_strings(session, acts, ranks)
    cols, act_bounds = _Columns(acts), _bounds(acts)
    del acts   # (before the segments are read: one chunk's Arrow rows at a time)
    segs = session.sql("SELECT rank, step, t, t_end, c::BIGINT AS c, m::BIGINT AS m, x::BIGINT AS x FROM segments "
                       "WHERE t_end IS NOT NULL AND list_contains($ranks, rank) ORDER BY rank, step, t", ranks=ranks)
    seg_cols, seg_bounds = tuple(_ints(segs.column(n)) for n in Segments.NAMES), _bounds(segs)
    del segs
    host_syncs = _host_syncs(session, ranks) if syncs else None
    pa.default_memory_pool().release_unused()   # (the fetch's Arrow memory, back to the system)
    if cols.rows >= RELEASE_AFTER:   # (and the pages DuckDB's allocator keeps of the fetch's query: the walk
        duck.release_unused()        # that follows is Python, which allocates elsewhere)
    return {"acts": cols, "act_bounds": act_bounds, "segments": seg_cols, "seg_bounds": seg_bounds, "syncs": host_syncs}


def iter_paths(session: Session | None, comm: dict, data: dict | None = None, ranks: list[int] | None = None,
               fetched: dict | None = None):
    """Critical path of each (rank, step) window in order, one at a time: {rank, step, start_ns,
    end_ns, composition, path (Path), acts (Acts), segments (Segments), syncs (host sync id ->
    row)}. Activities are fetched a chunk of ranks at a time and a window's columns are built when
    it is walked, so only one window's Python objects (and one chunk's Arrow rows) live at once.
    `fetched`: the one chunk of `data`, fetched already (`fetch_chunk`): the walk then runs no
    query (session may be None), so it can run on a thread beside the session's queries."""
    if session is None and (data is None or fetched is None or len(data["chunks"]) != 1):
        raise ValueError("iter_paths without a session walks the one chunk of `data`, fetched")
    if data is None:
        assert session is not None
        data = windows_data(session, ranks)
    win = data["windows"]
    for chunk_ranks in data["chunks"]:
        if fetched is not None:
            chunk, fetched = fetched, None
        else:
            assert session is not None
            chunk = _chunk(session, chunk_ranks)
        sync_by_id = {h["id"]: h for lst in chunk["syncs"].values() for h in lst[1]}
        mine = set(chunk_ranks)
        for (rank, step), (ws, we) in sorted(kv for kv in win.items() if kv[0][0] in mine):
            lo, hi = chunk["act_bounds"].get((rank, step), (0, 0))
            acts = Acts(cols=chunk["acts"], lo=lo, hi=hi, rank=rank)
            segs = Segments(None, chunk["segments"], *chunk["seg_bounds"].get((rank, step), (0, 0)))
            pieces = walk_columns(acts, ws, we, chunk["syncs"], infer_waits=rank not in data["wait_ranks"])
            path = split(pieces, segs, acts, comm)
            if len(pieces.start) >= RELEASE_AFTER:   # (the split's Arrow memory, back to the system)
                pa.default_memory_pool().release_unused()
            del pieces
            yield {"rank": rank, "step": step, "start_ns": ws, "end_ns": we,
                   "composition": composition(path, ws, we), "path": path, "acts": acts, "segments": segs,
                   "syncs": sync_by_id}
            del acts, segs, path  # before the next window is built
        del chunk, sync_by_id
