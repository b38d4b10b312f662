"""Across ranks: align the ranks' clocks, match each collective across ranks, find stragglers.

A collective is matched across ranks by (kind, process group, order of issue) — `coll_instances`.
Clocks: each rank's times are moved to UNIX epoch ns with `meta.clock_offset_ns` (Kineto
`baseTimeNanoseconds`, nsys session start); a rank whose trace records no offset but whose times
already read as epoch times (old Kineto: epoch µs) keeps them; otherwise its offset is estimated
from the collectives (their ends coincide on all ranks). The check: a collective finishes at
about the same moment on every rank, so per rank the median over matched collectives of
(end on this rank − median end over ranks) is the residual clock skew, reported per rank.

Per collective: arrival (GPU start) per rank, the straggler (last to arrive), the skew (latest −
earliest arrival) and the wait it imposed on every other rank (latest arrival − own arrival).
"""
from __future__ import annotations

import json
from array import array
from typing import Any

import pyarrow as pa

from ..engine.pipeline import build
from ..engine.session import Session
from .matched import Matched

EPOCH_MIN_NS = 10 ** 17  # times above this already read as epoch ns (1973+)


def _median(vals: list[int]) -> int:
    """Median of integers, exact (no float rounding of epoch ns); the lower middle's mean rounded down."""
    if not vals:
        return 0
    v = sorted(vals)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) // 2


def _splits(s: str | None) -> list[int] | None:
    if not s:
        return None
    try:
        v = json.loads(s)
    except ValueError:
        return None
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return [int(x) for x in v]
    return None


def imbalance_of(in_split: str | None, out_split: str | None) -> dict | None:
    """max/mean of the split sizes (all-to-all-v), where the comm metadata records them."""
    best: dict[str, Any] | None = None
    for name, s in (("in_split", in_split), ("out_split", out_split)):
        v = _splits(s)
        if not v or sum(v) <= 0:
            continue
        mean = sum(v) / len(v)
        ratio = max(v) / mean
        if best is None or ratio > best["max_over_mean"]:
            best = {"which": name, "splits": v, "max_over_mean": ratio}
    return best


def _offsets(session: Session) -> dict:
    """Per rank: offset to epoch ns and how it was found."""
    meta = {m["rank"]: m["clock_offset_ns"] for m in session.rows("SELECT rank, clock_offset_ns FROM meta")}
    # each rank's arrival at its first collective in (kind, group, order of issue)
    # (arg_min over one integer per instance, its collective's place in that order: no sort)
    first = {r["rank"]: r["arrival_ns"] for r in session.rows(
        f"WITH {_KIND_GROUPS} SELECT c.rank, arg_min(c.arrival_ns, g.k * {_IDX_SPAN} + c.idx) AS arrival_ns "
        f"FROM coll_instances c JOIN kg g ON {_KG_JOIN} GROUP BY c.rank")}
    out: dict[int, tuple[int | None, str]] = {}
    for rank, off in meta.items():
        if off is not None:
            out[rank] = (int(off), "recorded clock offset")
        elif first.get(rank, 0) >= EPOCH_MIN_NS:
            out[rank] = (0, "timestamps are epoch times")
        else:
            out[rank] = (None, "")
    return out


def _estimate_missing(offsets: dict, insts: Instances) -> None:
    """Ranks without a usable offset: align their collective ends with the others'."""
    if all(o is not None for o, _ in offsets.values()):
        return
    by_key = [dict(zip(insts.rank[a:b].tolist(), insts.end[a:b].tolist(), strict=True))
              for a, b in insts.bounds()]
    known = [r for r, (o, _) in offsets.items() if o is not None]
    for rank, (off, _) in list(offsets.items()):
        if off is not None:
            continue
        diffs = []
        for inst in by_key:
            if rank in inst and any(k in inst for k in known):
                ref = _median([inst[k] + offsets[k][0] for k in known if k in inst])
                diffs.append(ref - inst[rank])
        offsets[rank] = (_median(diffs), "estimated from collective ends") if diffs else (0, "unknown (not aligned)")
        known.append(rank)


def _int_column(t: pa.Table, name: str) -> memoryview:
    """An int64 column as a memoryview of its values (no Python object per value)."""
    c = t.column(name)
    if c.null_count:
        raise AssertionError(f"coll_instances.{name} has nulls")
    a = c.combine_chunks() if c.num_chunks != 1 else c.chunk(0)
    a = a.cast(pa.int64())
    if len(a) == 0:
        return memoryview(array("q"))
    return memoryview(a.buffers()[1]).cast("q")[a.offset:a.offset + len(a)]


# each (kind, group) of the job's collectives numbered in their order (NULLs last): the instances
# are then ordered by integers, not by their kind and group names (the sort of some 800k instances
# of a 1,024-rank job held a copy of both names per row)
_KIND_GROUPS = ("kg AS (SELECT comm_kind, grp, row_number() OVER (ORDER BY comm_kind, grp) - 1 AS k "
                "FROM (SELECT DISTINCT comm_kind, grp FROM coll_instances))")
_KG_JOIN = "c.comm_kind IS NOT DISTINCT FROM g.comm_kind AND c.grp IS NOT DISTINCT FROM g.grp"
_IDX_SPAN = 1 << 40          # more collectives than any rank issues of one kind and group


class Instances:
    """Every row of coll_instances as columns, ordered by collective (kind, group, order of issue)
    then rank: the collectives' rows are contiguous, `info` has one row per collective (its
    kind, group, index, number of ranks and the lowest rank's attribution and splits: arg_min_null,
    which, unlike a list of the rows in rank order, holds one row per collective while it runs; a
    rank issues each collective once, so the lowest rank's row is one row)."""

    def __init__(self, session: Session):
        self._t = t = session.sql(f"WITH {_KIND_GROUPS} SELECT c.rank, c.arrival_ns, c.end_ns, c.id "
                                  f"FROM coll_instances c JOIN kg g ON {_KG_JOIN} ORDER BY g.k, c.idx, c.rank")
        self.rank, self.arrival, self.end, self.id = (_int_column(t, n) for n in ("rank", "arrival_ns", "end_ns", "id"))
        session.release_pages()      # (each query here reads a column of every rank's instances)
        self.info = session.rows(
            "SELECT comm_kind, grp, idx, count(*) AS n, "
            "arg_min_null(step, rank) AS step, arg_min_null(layer, rank) AS layer, "
            "arg_min_null(phase, rank) AS phase, arg_min_null(stage, rank) AS stage, "
            "arg_min_null(in_split, rank) AS in_split, arg_min_null(out_split, rank) AS out_split "
            "FROM coll_instances GROUP BY comm_kind, grp, idx ORDER BY comm_kind, grp, idx")
        session.release_pages()

    def bounds(self):
        a = 0
        for i in self.info:
            yield a, a + i["n"]
            a += i["n"]


def match(session: Session) -> dict:
    """Match collectives across ranks. Returns {"collectives", "stragglers", "clock", "wait_until",
    "by_id", "warnings"}.

    wait_until maps a comm activity id to the latest arrival over the ranks of its collective, on
    that activity's rank clock (time before it on this rank is waiting for peers); by_id maps it to
    its collective (kind, group, index, straggler, skew_ns, imbalance and wait_ns of the id's rank).
    At 1,024 ranks a job has some 10^5 rows: they are read as columns and kept as arrays, the
    per-rank maps of each collective (start_ns, dur_ns, wait_ns) are written from them when the
    document's `collectives` are read (matched.Matched), never held as dicts."""
    build(session, ["coll_instances"])
    ranks = sorted({r["rank"] for r in session.rows("SELECT rank FROM meta")})
    insts = Instances(session)
    offsets = _offsets(session)
    session.release_pages()
    _estimate_missing(offsets, insts)
    clock: dict[str, Any] = {"ranks": {str(k): {"offset_ns": v[0], "method": v[1]} for k, v in sorted(offsets.items())}}
    out: dict[str, Any] = {"collectives": [], "stragglers": [], "clock": clock, "wait_until": {}, "by_id": {},
                           "warnings": []}
    unknown = [k for k, v in sorted(offsets.items()) if v[1] == "unknown (not aligned)"]
    if unknown and len(ranks) > 1:
        out["warnings"].append(f"ranks {', '.join(map(str, unknown))}: clock offset unknown and no collective to "
                               f"align with; arrival skews across ranks may be wrong")
    if len(ranks) < 2:
        clock["residual_skew_ns"] = {}
        clock["max_abs_residual_ns"] = 0
        return out
    counts: dict[tuple, dict[int, int]] = {}
    for r in session.rows("SELECT comm_kind, grp, rank, count(*) AS n FROM coll_instances "
                          "GROUP BY comm_kind, grp, rank ORDER BY comm_kind, grp, rank"):
        counts.setdefault((r["comm_kind"], r["grp"]), {})[r["rank"]] = r["n"]
    for (kind, grp), c in counts.items():
        if len(set(c.values())) > 1 or len(c) != len(ranks):
            out["warnings"].append(f"collectives {kind} {grp or '(default group)'}: ranks issued different numbers "
                                   f"({', '.join(f'rank {k}: {v}' for k, v in sorted(c.items()))}); "
                                   f"matched in order of issue")
    off_of = {k: v[0] for k, v in offsets.items()}
    resid: dict[int, array] = {r: array("q") for r in ranks}
    m = Matched()
    ids_of: list = []
    for info, (a, b) in zip(insts.info, insts.bounds(), strict=True):
        if b - a < 2:
            continue
        rk = insts.rank[a:b].tolist()          # ascending
        off = [off_of[k] for k in rk]
        start, end = insts.arrival[a:b].tolist(), insts.end[a:b].tolist()
        arr = [x + o for x, o in zip(start, off, strict=True)]
        ends = [x + o for x, o in zip(end, off, strict=True)]
        mid = _median(ends)
        for k, e in zip(rk, ends, strict=True):
            resid[k].append(e - mid)
        latest, first = max(arr), min(arr)
        waits = [latest - x for x in arr]
        m.add({"kind": info["comm_kind"], "group": info["grp"], "index": info["idx"],
               "step": info["step"], "layer": info["layer"], "phase": info["phase"], "stage": info["stage"],
               "ranks": b - a,
               "earliest_rank": rk[arr.index(first)],          # the first of equals: the lowest rank
               "earliest_ns": first, "latest_ns": latest,
               "straggler": rk[arr.index(latest)], "skew_ns": latest - first,
               "imbalance": imbalance_of(info["in_split"], info["out_split"])},
              rk, arr, [e - s for s, e in zip(start, end, strict=True)], waits,
              [latest - o for o in off])
        ids_of.append(insts.id[a:b])
    m.index_ids(ids_of)
    del ids_of, insts
    out["collectives"] = m.rows()
    out["wait_until"], out["by_id"] = m.wait_until(), m.by_id()
    clock["residual_skew_ns"] = {str(k): _median(list(v)) for k, v in sorted(resid.items()) if v}
    clock["max_abs_residual_ns"] = max((abs(x) for x in clock["residual_skew_ns"].values()), default=0)
    out["stragglers"] = m.stragglers(ranks)
    return out


def stragglers(colls: list[dict], ranks: list[int]) -> list[dict]:
    """Per rank: how often it arrived last, and the total wait that imposed on the other ranks
    (over the collectives' dicts; match computes the same from its arrays: Matched.stragglers)."""
    out = []
    for rank in ranks:
        mine = [c for c in colls if c["straggler"] == rank and c["skew_ns"] > 0]
        caused = sum(sum(w for k, w in c["wait_ns"].items() if k != str(rank)) for c in mine)
        out.append({"rank": rank, "times_last": len(mine), "collectives": len(colls),
                    "total_skew_ns": sum(c["skew_ns"] for c in mine), "wait_caused_ns": caused,
                    "max_skew_ns": max((c["skew_ns"] for c in mine), default=0)})
    return sorted(out, key=lambda d: (-d["wait_caused_ns"], d["rank"]))
