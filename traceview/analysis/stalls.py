"""Stalls: the non-compute time on each step's critical path, with a cause and evidence.

Causes: `exposed_a2a` (an all-to-all with no compute beside it; the evidence says how much of it
compute hid and whether independent work of the same layer — the shared expert — was available),
`exposed_comm` (another collective, exposed), `peer_wait` (the collective ran on this rank before
the last rank arrived: the arrival skew), `imbalance` (uneven split sizes), `host_sync` (the GPU
drained while the host was blocked in a sync; the op that forced it and the sync call are named),
`launch_bound` (the GPU waited for launches while the host was busy), `idle` (the GPU waited with
work queued: GPU-side latency or an unrecorded dependency).

The sum of all stalls equals the non-compute part of the critical paths (asserted).

Entry point: `sections(session, doc, top=10)` (needs breakdown.prepare/step_rows and
layers.prepare to have run in the session). It is the composition of three parts that can run
apart: `job_inputs(session)` (collectives matched across ranks: needs every rank), `rank_part(
session, job, idle, ranks)` (the critical paths and stalls of some ranks: reads only their rows;
a worker's session may hold just them) and `merge(job, parts, top)`.
"""
from __future__ import annotations

import threading
from array import array
from bisect import bisect_right
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from ..document.packed import RowBytes, presorted_row_bytes, row_bytes, sort_rows
from ..engine.pipeline import build
from ..engine.session import Session
from ..later import Later
from . import collectives, cp_split, critical_path
from .matched import ById

COMM_CAUSES = ("exposed_a2a", "exposed_comm", "peer_wait", "imbalance")
INDEPENDENT_STAGES = ("shared_expert",)  # MoE work that does not depend on the dispatch
CAUSES = ("exposed_a2a", "exposed_comm", "peer_wait", "imbalance", "host_sync", "launch_bound", "idle")


def _comm_info(session: Session, coll: dict, ranks: list[int] | None = None) -> dict:
    """Activity id -> {kind, wait_until, imbalance} of the comm instances of `ranks`, read column by
    column (no dict per row of the query: a third of a worker's stall round setup)."""
    t = session.sql("SELECT id, comm_kind, in_split, out_split FROM coll_instances "
                    f"WHERE {_rank_filter(ranks)}", ranks=ranks)
    ids, kinds, ins, outs = (t.column(n).to_pylist() for n in ("id", "comm_kind", "in_split", "out_split"))
    del t
    one: dict = {}                           # (a kind's name held once, as Session.rows holds it)
    until, imbalance_of = coll["wait_until"].get, collectives.imbalance_of
    return {i: {"kind": one.setdefault(k, k), "wait_until": until(i), "imbalance": imbalance_of(a, b)}
            for i, k, a, b in zip(ids, kinds, ins, outs, strict=True)}


def _attribution(session: Session, ranks: list[int] | None = None) -> dict:
    t = session.sql(f"SELECT id, layer, phase, stage FROM activity_attribution WHERE {_rank_filter(ranks)}",
                    ranks=ranks)
    cols = [t.column(n).to_pylist() for n in ("layer", "phase", "stage")]
    return dict(zip(t.column("id").to_pylist(), zip(*cols, strict=True), strict=True))


def _overlap_compute(segs: critical_path.Segments, a: int, b: int) -> int:
    """Time within [a, b) during which a compute kernel ran (segments sorted by start)."""
    st, se, sc = segs.t, segs.e, segs.c
    i = max(0, bisect_right(st, a) - 1)
    tot = 0
    n = len(st)
    while i < n and st[i] < b:
        if sc[i] > 0 and se[i] > a:
            tot += min(b, se[i]) - max(a, st[i])
        i += 1
    return tot


def _hidden(w: dict, a: int, b: int) -> int:
    """_overlap_compute over the window's segments, once per span (an all-to-all's peer wait,
    imbalance and exposed part are groups of their own, and a2a_exposure asks it again)."""
    memo = w.get("_hidden")
    if memo is None:
        memo = w["_hidden"] = {}
    got = memo.get((a, b))
    if got is None:
        got = memo[(a, b)] = _overlap_compute(w["segments"], a, b)
    return got


def _independent(w: dict) -> dict:
    """(layer, phase) -> indices (k) of the compute activities of stages that do not depend on the
    dispatch."""
    if "_indep" not in w:
        out: dict = {}
        acts = w["acts"]
        key = getattr(acts, "attr_key", None)
        if key is not None and len(key) == len(acts.attr):   # coded: only the rows of those stages visited
            mine = [k for k, t in acts.attr_of_key.items() if t[0] is not None and t[2] in INDEPENDENT_STAGES]
            rows = pc.indices_nonzero(pc.is_in(cp_split.arrow_ints(key), cp_split.arrow_ints(mine))).to_pylist() \
                if mine else []
        else:
            rows = range(len(acts.attr))
        cls, attr = acts.cls, acts.attr
        for k in rows:
            t = attr[k]
            if cls[k] == "compute" and t[0] is not None and t[2] in INDEPENDENT_STAGES:
                out.setdefault(t[:2], []).append(k)
        w["_indep"] = out
    return w["_indep"]


def _ops(h: dict) -> list[str]:
    return [x for x in (h.get("grandparent_op"), h.get("parent_op"), h.get("op")) if x]


def _group_key(seg: dict, rank: int, step: int, attr: tuple) -> tuple:
    cause = seg["cause"]
    if cause in COMM_CAUSES or cause == "host_sync":
        return (rank, step, cause, seg["id"])
    return (rank, step, cause) + attr


_BY_ACTIVITY = frozenset(COMM_CAUSES + ("host_sync",))   # causes grouped per activity (else per layer/phase/stage)
_NO_ATTR = (None, None, None)


def _nz(x: int) -> int:
    """A launch time of the integer columns, null (NULL) read as 0."""
    return 0 if x == critical_path.NULL else x


class _Group:
    """One stall group of a window's path: its rows' first and last index, count, summed and
    largest duration, number of distinct activities and the activities of collectives among them
    (`colls`, in order of first appearance)."""
    __slots__ = ("first", "last", "count", "dur", "max_dur", "acts", "colls")

    def __init__(self, first: int, last: int, count: int, dur: int, max_dur: int, acts: int):
        self.first, self.last, self.count, self.dur, self.max_dur, self.acts = first, last, count, dur, max_dur, acts
        self.colls: list = []


def _head_wait(coll_by_id, i: int, rank: int) -> tuple[dict, int | None] | None:
    """(activity i's collective, the wait of `rank` at it) from a matched.ById (or a dict of the
    same values), or None where i is in no collective."""
    if type(coll_by_id) is ById:
        return coll_by_id.head_wait(i, rank)
    c = coll_by_id.get(i)
    if c is None:
        return None
    waits = c.get("wait_ns")      # (a gap's evidence reads only the head: a hand-made dict may hold no waits)
    return c, (None if waits is None else waits.get(str(rank)))


def _evidence(cause: str, g: _Group, w: dict, coll_by_id) -> dict:
    """Evidence of one stall: the path rows of one group `g`."""
    acts, path = w["acts"], w["path"]
    k = path.k[g.first]
    ref = k if k >= 0 else None
    ev: dict = {"activity": acts.name(k) if ref is not None else None, "pieces": g.count}
    if cause in COMM_CAUSES and ref is not None:
        a, b, rid = acts.start[k], acts.end[k], acts.id[k]
        hidden = _hidden(w, a, b)
        ev.update(comm_dur_ns=b - a, hidden_ns=hidden, hidden_share=hidden / max(1, b - a))
        hw = _head_wait(coll_by_id, rid, w["rank"])
        if hw is not None:
            c, wait = hw
            ev.update(collective={"kind": c["kind"], "group": c["group"], "index": c["index"]},
                      straggler=c["straggler"], skew_ns=c["skew_ns"], wait_ns=wait)
            if cause == "imbalance" and c.get("imbalance"):
                ev.update(splits=c["imbalance"]["splits"], max_over_mean=c["imbalance"]["max_over_mean"])
        if cause in ("exposed_a2a", "exposed_comm"):
            layer, phase, _ = acts.attr[k]
            o0 = _nz(acts.ostart[k])
            indep = [i for i in _independent(w).get((layer, phase), []) if _nz(acts.ostart[i]) >= o0]
            starts, ends = acts.start, acts.end
            work = sum(ends[i] - starts[i] for i in indep)
            after = sum(ends[i] - max(starts[i], b) for i in indep if ends[i] > b)
            ev.update(independent_work_ns=work, independent_work_available=work > 0,
                      independent_work_after_ns=after,
                      independent_stages=sorted({acts.attr[i][2] for i in indep}))
    elif cause == "host_sync":
        ids = path.extra_at(g.first) or ()
        sync_by_id = w["syncs"]
        calls = [sync_by_id[i] for i in ids if i in sync_by_id]
        if calls:
            main = max(calls, key=lambda h: (h["dur_ns"], h["end_ns"]))
            ops = _ops(main)
            ev.update(sync_call=main["name"], sync_ns=main["dur_ns"], sync_start_ns=main["start_ns"],
                      op=ops[0] if ops else None, ops=ops,
                      calls=[{"name": h["name"], "dur_ns": h["dur_ns"], "ops": _ops(h)} for h in calls])
        ev["resumed_by"] = ev.pop("activity")
    elif cause in ("launch_bound", "idle"):
        ev.update(gaps=g.count, max_gap_ns=g.max_dur, mean_gap_ns=g.dur // g.count,
                  activities=g.acts, last_start_ns=path.start[g.last])
        ev.pop("activity")
        if cause == "launch_bound" and ref is not None:
            tid = acts.tid[k]
            ev["thread"] = None if tid == critical_path.NULL else tid
        rank = w["rank"]
        late = []
        for kk in g.colls:
            hw = _head_wait(coll_by_id, acts.id[kk], rank)
            if hw is not None and hw[0]["straggler"] == rank and hw[0]["skew_ns"] > 0:
                late.append(hw[0])
        if late:  # the gap delayed this rank's arrival at a collective where it was the last rank
            ev["late_to_collectives"] = [{"kind": c["kind"], "group": c["group"], "index": c["index"],
                                          "skew_ns": c["skew_ns"]} for c in late]
    return ev


_BY_ACTIVITY_CODES = pa.array([cp_split.CAUSE_CODE[c] for c in _BY_ACTIVITY], pa.int8())


def _coll_ids(coll_by_id) -> pa.Array:
    """The activity ids of coll_by_id (a matched.ById or a dict) as an Arrow array."""
    ids = getattr(coll_by_id, "ids", None)
    return cp_split.arrow_ints(ids if ids is not None else list(coll_by_id))


def _attr_codes(acts) -> pa.Array:
    """Per activity the code of its (layer, phase, stage); one more entry, for k = -1, (None, None, None)."""
    key = getattr(acts, "attr_key", None)
    if key is not None and len(key) == len(acts.attr):   # (coded with the chunk: 0 is (None, None, None))
        return cp_split.arrow_ints(key + array("q", [0]))
    memo: dict = {}
    codes = array("q", [memo.setdefault(t, len(memo)) for t in acts.attr])
    codes.append(memo.setdefault(_NO_ATTR, len(memo)))
    return cp_split.arrow_ints(codes)


def _groups(w: dict, coll_by_id) -> list[tuple[tuple, _Group]]:
    """The stall groups of a window's path, whole-column: the rows with a cause grouped by (cause,
    activity) for the causes of one activity, else by (cause, layer, phase, stage) of the activity.
    Returns ((cause code, activity index or attribute code), group) in no particular order."""
    path, acts = w["path"], w["acts"]
    cause = pa.Array.from_buffers(pa.int8(), len(path), [None, pa.py_buffer(path.cause_code)])
    rows = pc.indices_nonzero(pc.not_equal(cause, cp_split.lit(0, pa.int8())))
    if not len(rows):
        return []
    k = cp_split.arrow_ints(path.k).take(rows)
    c = cause.take(rows)
    d = pc.subtract(cp_split.arrow_ints(path.end), cp_split.arrow_ints(path.start)).take(rows)
    n_act = len(acts.id)
    zero = cp_split.lit(0)
    k_or_last = pc.if_else(pc.less(k, zero), cp_split.lit(n_act), k)
    key = pc.if_else(pc.is_in(c, _BY_ACTIVITY_CODES), k, _attr_codes(acts).take(k_or_last))
    # one sort by (cause, key, activity, row): each group's rows are a run, its activities runs in it
    order = pc.sort_indices(pa.table({"c": c, "key": key, "k": k, "j": rows}),
                            [("c", "ascending"), ("key", "ascending"), ("k", "ascending"), ("j", "ascending")])
    c_s, key_s, k_s = c.take(order), key.take(order), k.take(order)
    j_s, d_s = rows.take(order).cast(pa.int64()), d.take(order)
    n = len(order)
    is_first = cp_split.first_of_runs([c_s, key_s])
    starts = pc.indices_nonzero(is_first).cast(pa.int64())
    lasts = pc.subtract(pa.concat_arrays([starts.slice(1), pa.array([n], pa.int64())]), cp_split.lit(1))
    group = pc.subtract(pc.cumulative_sum(is_first.cast(pa.int64())), cp_split.lit(1))   # (each row's)

    def summed(v: pa.Array) -> pa.Array:   # (a group's sum: the running sum at its last row less before its first)
        upto = pc.cumulative_sum(v)
        return pc.subtract(upto.take(lasts), pa.concat_arrays(
            [pa.array([0], pa.int64()), upto.take(pc.subtract(starts.slice(1), cp_split.lit(1)))]))
    sums = summed(d_s)
    acts_in = summed(cp_split.first_of_runs([c_s, key_s, k_s]).cast(pa.int64()))   # (distinct activities)
    first_j = pc.negate(_run_max(pc.negate(j_s), group, lasts))   # (the group's rows in path order: first, last)
    last_j = _run_max(j_s, group, lasts)
    # the gaps' evidence: the longest and the activities
    gap_group = pc.invert(pc.is_in(c_s.take(starts), _BY_ACTIVITY_CODES))
    mx = pc.if_else(gap_group, _run_max(d_s, group, lasts), zero)
    na = pc.if_else(gap_group, acts_in, zero)
    out = []
    for cc, kk, a, b, cnt, sm, mxg, nag in zip(
            c_s.take(starts).to_pylist(), key_s.take(starts).to_pylist(), first_j.to_pylist(), last_j.to_pylist(),
            pc.add(pc.subtract(lasts, starts), cp_split.lit(1)).to_pylist(), sums.to_pylist(), mx.to_pylist(),
            na.to_pylist(), strict=True):
        out.append(((cc, kk), _Group(a, b, cnt, sm, mxg, nag)))
    # the activities of collectives among a launch_bound / idle group's rows, in path order
    gap = pc.and_(pc.invert(pc.is_in(c, _BY_ACTIVITY_CODES)), pc.greater_equal(k, zero))
    ids = cp_split.arrow_ints(acts.id).take(pc.if_else(pc.less(k, zero), zero, k))   # (k -1: masked by gap)
    coll = pc.and_(gap, pc.is_in(ids, _coll_ids(coll_by_id)))
    sel = pc.indices_nonzero(coll)
    if len(sel):
        by_key = {key: g for key, g in out}
        seen: set = set()
        for cc, kk, key2 in zip(c.take(sel).to_pylist(), k.take(sel).to_pylist(), key.take(sel).to_pylist(),
                                strict=True):
            if (cc, key2, kk) not in seen:
                seen.add((cc, key2, kk))
                by_key[(cc, key2)].colls.append(kk)
    return out


def _run_max(v: pa.Array, group: pa.Array, lasts: pa.Array) -> pa.Array:
    """The largest of v (int64) in each group of rows (group: each row's, runs numbered up from 0;
    lasts: each group's last row): a running max of v raised by its group times a bound above v's
    span, so that no group's values reach into the next one's."""
    lo, hi = (x.as_py() for x in pc.min_max(v).values())
    span = hi - lo + 1
    n_groups = len(lasts)
    if n_groups * span < 2 ** 62:
        shift = pc.multiply(group, cp_split.lit(span))
        top = pc.cumulative_max(pc.add(pc.subtract(v, cp_split.lit(lo)), shift)).take(lasts)
        return pc.add(pc.subtract(top, shift.take(lasts)), cp_split.lit(lo))
    order = pc.sort_indices(pa.table({"g": group, "v": v}), [("g", "ascending"), ("v", "ascending")])
    return v.take(order).take(lasts)


_BY_ACTIVITY_CODE_SET = frozenset(cp_split.CAUSE_CODE[c] for c in _BY_ACTIVITY)


def _groups_rows(w: dict, coll_by_id) -> list[tuple[tuple, _Group]]:
    """_groups one path row at a time (a short path: Arrow's per-call cost would be all of it)."""
    path, acts = w["path"], w["acts"]
    attr, ids = acts.attr, acts.id
    pk, ps, pe = path.k, path.start, path.end
    groups: dict = {}
    gap_acts: dict = {}   # key of a gap group -> its activities (dict: insertion order)
    for j, cc in enumerate(path.cause_code):
        if not cc:
            continue
        k = pk[j]
        d = pe[j] - ps[j]
        if cc in _BY_ACTIVITY_CODE_SET:
            key: tuple = (cc, k)
        else:
            key = (cc, attr[k] if k >= 0 else _NO_ATTR)
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Group(j, j, 0, 0, 0, 0)
            if cc not in _BY_ACTIVITY_CODE_SET:
                gap_acts[key] = {}
        g.last = j
        g.count += 1
        g.dur += d
        acts_of = gap_acts.get(key)
        if acts_of is not None:   # (the gaps' evidence: the longest, the activities, the collectives among them)
            g.max_dur = max(g.max_dur, d)
            if k not in acts_of:
                acts_of[k] = None
                if k >= 0 and ids[k] in coll_by_id:
                    g.colls.append(k)
    for key, acts_of in gap_acts.items():
        groups[key].acts = len(acts_of)
    return list(groups.items())


def _window_stalls(w: dict, coll_by_id, bulk: bool | None = None) -> list[dict]:
    """The stall rows of one window (its path's non-compute segments grouped), sorted. `bulk`: group
    them whole-column (`_groups`) or one row at a time (`_groups_rows`); by default the former for
    a path of critical_path.SPLIT_IN_BULK rows or more."""
    path, attr = w["path"], w["acts"].attr
    rank, step = w["rank"], w["step"]
    if bulk is None:
        bulk = len(path) >= critical_path.SPLIT_IN_BULK
    out = []
    for (cc, _), g in (_groups if bulk else _groups_rows)(w, coll_by_id):
        cause = cp_split.CAUSES[cc]
        assert cause is not None   # (the rows without a cause are not grouped)
        k = path.k[g.first]
        a = attr[k] if k >= 0 else _NO_ATTR
        out.append({"rank": rank, "step": step, "layer": a[0], "phase": a[1], "stage": a[2],
                    "cause": cause, "start_ns": path.start[g.first], "dur_ns": g.dur,
                    "evidence": _evidence(cause, g, w, coll_by_id)})
    out.sort(key=lambda s: (-s["dur_ns"], s["rank"], s["step"], s["start_ns"], s["cause"]))
    return out


def stall_rows(paths: list[dict], coll_by_id: dict) -> list[dict]:
    out = [row for w in paths for row in _window_stalls(w, coll_by_id)]
    out.sort(key=lambda s: (-s["dur_ns"], s["rank"], s["step"], s["start_ns"], s["cause"]))
    return out


def a2a_ids(comm: dict) -> pa.Array:
    """The activity ids of the all-to-alls in `comm` (a2a_exposure finds them in a large window by them)."""
    return cp_split.arrow_ints([i for i, info in comm.items() if info["kind"] == "all_to_all"])


def a2a_exposure(paths: list[dict], comm: dict, a2a: pa.Array | None = None) -> list[dict]:
    """Per all-to-all in a window: duration, time hidden by compute, exposed time on the critical path.
    a2a: a2a_ids(comm), where the caller made it once for many windows."""
    out = []
    for w in paths:   # (linear in each window's activities: rank_part calls it window by window)
        acts, path = w["acts"], w["path"]
        if len(acts.id) >= critical_path.SPLIT_IN_BULK:   # (whole-column: one is_in, not a loop over them)
            a2a = a2a_ids(comm) if a2a is None else a2a
            mine = pc.indices_nonzero(pc.is_in(cp_split.arrow_ints(acts.id), a2a)).to_pylist()
        else:
            mine = [k for k, i in enumerate(acts.id)
                    if (info := comm.get(i)) is not None and info["kind"] == "all_to_all"]
        if not mine:
            continue
        on_path: dict = {}
        if len(path) >= critical_path.SPLIT_IN_BULK:
            cat = pa.Array.from_buffers(pa.int8(), len(path), [None, pa.py_buffer(path.cat_code)])
            rows = pc.indices_nonzero(pc.equal(cat, cp_split.lit(_A2A_CAT, pa.int8()))).to_pylist()
        else:
            rows = [j for j, c in enumerate(path.cat_code) if c == _A2A_CAT]
        pk, ps, pe = path.k, path.start, path.end
        for j in rows:
            on_path[pk[j]] = on_path.get(pk[j], 0) + pe[j] - ps[j]
        for k in mine:
            layer, phase, stage = acts.attr[k]
            a, b = acts.start[k], acts.end[k]
            out.append({"rank": w["rank"], "step": w["step"], "layer": layer, "phase": phase, "stage": stage,
                        "start_ns": a, "dur_ns": b - a, "hidden_ns": _hidden(w, a, b),
                        "exposed_on_path_ns": on_path.get(k, 0)})
    return sorted(out, key=lambda d: (d["rank"], d["step"], d["start_ns"]))


_A2A_CAT = cp_split.CATEGORIES.index("all_to_all_ns")


def job_inputs(session: Session) -> dict:
    """The per-job part, which needs every rank: the collectives matched across ranks (with the
    wait_until of each comm activity id and `by_id`: activity id -> its collective), stragglers,
    clock and warnings (collectives.match). Proportional to the number of collectives; picklable."""
    return collectives.match(session)


def _rank_filter(ranks: list[int] | None, col: str = "rank") -> str:
    """A WHERE condition restricting `col` to the parameter $ranks (true when ranks is None)."""
    return "TRUE" if ranks is None else f"list_contains($ranks, {col})"


def rank_part(session: Session, job: dict, idle: dict, ranks: list[int] | None = None,
              presorted: bool = False) -> dict:
    """Critical path rows, stall rows, all-to-all rows and the non-compute total of the ranks in
    `ranks` (every rank in the session when None), read from those ranks' rows only. `job` is
    job_inputs(); `idle`: (rank, step) -> GPU idle ns of the breakdown. The session may hold only
    these ranks' tables (activity ids as in the whole job). Picklable output; `merge` combines parts.
    `presorted`: each section's rows packed in merge's order with their keys (packed.presort's
    part) and the stalls summed (`stall_sums`), as a mapped job's worker sends its part."""
    ranks, comm, data = _rank_inputs(session, job, ranks)
    return _walk_part(session, job, idle, ranks, comm, data, presorted=presorted)


def start_rank_part(session: Session, job: dict, idle: dict) -> Callable[[], list[dict]]:
    """`rank_part` over every rank of the session, started now: returns a function that gives its
    parts (one per chunk of ranks: `merge` gives the same sections as from one part). The chunks
    are fetched and walked one after the other on a thread of their own while the caller goes on
    with its own queries: the fetch through a reader of the session (another connection onto its
    tables: DuckDB lets go of the GIL while a query runs), the walk in Python; one chunk's rows
    live at a time. An error of a fetch or a walk is raised by the function."""
    return begin_rank_part(session, idle).walk(job)


WALKS_SKIP = ("cpu_ranges",)   # the profile's tables the walks' thread never reads (Begun)


class Begun:
    """start_rank_part in two halves (begin_rank_part): the first chunk's rows are fetched on the
    thread from the start, while the caller matches the job's collectives (job_inputs, which the
    walks need and the fetch does not); `walk(job)` hands them over and returns what
    start_rank_part returns. `cancel()` ends the thread where the job never comes (the caller's
    error)."""

    def __init__(self, session: Session, idle: dict, data: dict):
        self._session, self._idle, self._data = session, idle, data
        self._given: list = []
        self._go = threading.Event()
        # (the walks read no CPU range: the session may let go of them while they run, assemble)
        self._walks = Later(_walk_chunks, session.reader(without=WALKS_SKIP), self._take, idle, data,
                            name="traceview-critical-path") if data["chunks"] else None

    def _take(self) -> tuple | None:
        self._go.wait()
        return self._given[0]

    def walk(self, job: dict) -> Callable[[], list[dict]]:
        try:
            build(self._session, ["coll_instances"])
            comm = _comm_info(self._session, job, None)
        except BaseException:
            self.cancel()
            raise
        if self._walks is None:     # no chunk: nothing to fetch (walked here, in line)
            part = _walk_part(self._session, job, self._idle, None, comm, self._data)
            return lambda: [part]
        self._given.append((job, comm))
        self._go.set()
        return self._walks.result

    def cancel(self) -> None:
        if self._walks is not None and not self._go.is_set():
            self._given.append(None)
            self._go.set()
            self._walks.wait()


def begin_rank_part(session: Session, idle: dict) -> Begun:
    """The critical paths' first chunk fetched from now on a thread (Begun): what they read of the
    session is built first (critical_path.prepare); the collectives are not needed before
    `walk(job)`."""
    # the first chunk is fetched without its host syncs: cp_host_syncs is built here while it is
    # fetched, and read by the thread once the job comes
    critical_path.prepare(session, syncs=False)
    begun = Begun(session, idle, critical_path.windows_data(session, None))
    try:
        build(session, ["cp_host_syncs"])
    except BaseException:
        begun.cancel()
        raise
    return begun


def _walk_chunks(reader, take: Callable[[], tuple | None], idle: dict, data: dict) -> list[dict]:
    """start_rank_part's parts: each chunk's rows fetched through `reader` (closed at the end), then
    walked, before the next chunk is fetched; the walks wait for `take()`, the job and its comm
    info (None: cancelled, nothing walked)."""
    try:
        parts: list[dict] = []
        for i, chunk in enumerate(data["chunks"]):
            if len(data["chunks"]) > 1:
                # a large job's: the pages DuckDB's allocator keeps for a second after they are
                # freed (the steps made before, the last chunk's fetch), given back before this
                # fetch allocates beside the steps still being made: on the a2a export x100 each
                # fetch came with 120-180 MiB of them, the run's peak (docs/MEMORY.md)
                duck.release_unused()
            fetched = critical_path.fetch_chunk(reader, data, i, syncs=i > 0)
            given = take()
            if given is None:
                return parts
            if i == 0:   # (begin_rank_part built cp_host_syncs before it gave the job)
                critical_path.add_syncs(reader, fetched, chunk)
            job, comm = given
            parts.append(_walk_part(None, job, idle, None, comm, {**data, "chunks": [chunk]}, fetched))
            del fetched
        return parts
    finally:
        reader.close()


def _rank_inputs(session: Session, job: dict, ranks: list[int] | None) -> tuple:
    """What the walks of `ranks` read from the session besides the chunks' rows: (ranks sorted,
    the comm info of their collectives, windows_data)."""
    ranks = None if ranks is None else sorted(int(r) for r in ranks)
    build(session, ["coll_instances"])
    comm = _comm_info(session, job, ranks)
    critical_path.prepare(session)
    return ranks, comm, critical_path.windows_data(session, ranks)


def _walk_part(session: Session | None, job: dict, idle: dict, ranks: list[int] | None, comm: dict, data: dict,
               fetched: dict | None = None, presorted: bool = False) -> dict:
    """rank_part's rows from its inputs (`_rank_inputs`; `fetched`: critical_path.iter_paths)."""
    cp, stalls, a2a = [], [], []
    non_compute = 0
    # one window at a time: its activity columns and path are dropped before the next is walked
    a2a_of = a2a_ids(comm)
    for w in critical_path.iter_paths(session, comm, data, fetched=fetched):
        mine = _window_stalls(w, job["by_id"])
        a2a += a2a_exposure([w], comm, a2a_of)
        stalls += mine
        comp = w["composition"]
        nc = comp["window_ns"] - comp["compute_ns"]
        non_compute += nc
        by_cause = dict.fromkeys(CAUSES, 0)
        for st in mine:
            by_cause[st["cause"]] += st["dur_ns"]
        if sum(by_cause.values()) != nc:
            raise AssertionError(f"stalls ({sum(by_cause.values())}) != non-compute critical path ({nc}) "
                                 f"for rank {w['rank']} step {w['step']}")
        cp.append({"rank": w["rank"], "step": w["step"], "start_ns": w["start_ns"], "end_ns": w["end_ns"],
                   **comp, "stall_ns": nc, "stalls_by_cause": by_cause,
                   "share": {k[:-3]: comp[k] / comp["window_ns"] for k in critical_path.CATEGORIES}
                   if comp["window_ns"] else {},
                   "gpu_idle_ns": idle.get((w["rank"], w["step"])),
                   "idle_assigned_ns": comp["host_sync_ns"] + comp["launch_bound_ns"] + comp["idle_ns"]})
        del w, mine
    pa.default_memory_pool().release_unused()   # (the walks' Arrow memory, back to the system)
    if not presorted:
        return {"ranks": ranks, "critical_path": row_bytes(cp), "stalls": row_bytes(stalls), "a2a": row_bytes(a2a),
                "non_compute_ns": non_compute}
    out: dict = {"ranks": ranks, "non_compute_ns": non_compute}
    for k, rows in (("critical_path", cp), ("stalls", stalls), ("a2a", a2a)):
        out[k], rows = presorted_row_bytes(rows, MERGE_ORDER[k])
        if k == "stalls" and type(out[k]) is RowBytes:
            out["stall_sums"] = stall_sums(rows)
        del rows
    return out


# merge's order of each section's rows: a stable sort of the parts' rows by these keys (a worker of
# a mapped job sorts its part by them first, and sums its stalls by cause: mapped.stalls_task)
MERGE_ORDER = {"critical_path": lambda r: (r["rank"], r["step"]),
               "stalls": lambda s: (-s["dur_ns"], s["rank"], s["step"], s["start_ns"], s["cause"]),
               "a2a": lambda d: (d["rank"], d["step"], d["start_ns"])}


def stall_sums(rows) -> dict:
    """The total and the per-cause sums of some stall rows (what merge adds up over the parts)."""
    by_cause = dict.fromkeys(CAUSES, 0)
    total = 0
    for s in rows:
        total += s["dur_ns"]
        if s["cause"] in by_cause:
            by_cause[s["cause"]] += s["dur_ns"]
    return {"total": total, "by_cause": by_cause}


def merge(job: dict, parts: list[dict], top: int = 10, order=None) -> dict:
    """The report's sections from the per-rank parts (any order; disjoint ranks) and the job part:
    exactly what `sections` returns. A part may hold its stalls' sums (`stall_sums`, summed where
    it was made) and its rows presorted (document.packed.presort): then no row is decoded here.
    `order`: where presorted parts' order is found (packed.sort_rows)."""
    # one stable sort of the parts' rows in part order (their keys hold (rank, step), the windows'
    # order): long lists come back packed (document/packed.py)
    cp, _ = sort_rows([p["critical_path"] for p in parts], MERGE_ORDER["critical_path"], keys=False, order=order)
    stalls, _ = sort_rows([p["stalls"] for p in parts], MERGE_ORDER["stalls"], keys=False, order=order)
    a2a, _ = sort_rows([p["a2a"] for p in parts], MERGE_ORDER["a2a"], keys=False, order=order)
    by_cause = dict.fromkeys(CAUSES, 0)
    total = 0
    for p in parts:                              # the rows of each part, one at a time
        sums = p.get("stall_sums") or stall_sums(p["stalls"])
        total += sums["total"]
        for c, v in sums["by_cause"].items():
            by_cause[c] += v
    if total != sum(p["non_compute_ns"] for p in parts):
        raise AssertionError(f"stalls ({total}) != non-compute critical path "
                             f"({sum(p['non_compute_ns'] for p in parts)})")
    summary = {"top": top, "total_ns": total, "by_cause": by_cause}
    return {"critical_path": cp, "stalls": stalls, "stall_summary": summary,
            "a2a": a2a,
            "collectives": job["collectives"], "stragglers": job["stragglers"], "clock": job["clock"],
            "collective_warnings": job["warnings"]}


def sections(session: Session, doc: dict | None = None, top: int = 10) -> dict:
    """critical_path, stalls, collectives, stragglers, clock (+ stall_summary, a2a) for the report:
    merge(job_inputs, [rank_part over every rank of the session])."""
    job = job_inputs(session)
    idle = {(r["rank"], r["step"]): r["idle_ns"] for r in (doc or {}).get("steps", [])}
    return merge(job, [rank_part(session, job, idle)], top)
