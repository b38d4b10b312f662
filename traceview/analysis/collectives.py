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
from typing import Any

from ..engine.pipeline import build
from ..engine.session import Session

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


def _offsets(session: Session, rows: list[dict]) -> dict:
    """Per rank: offset to epoch ns and how it was found."""
    meta = {m["rank"]: m["clock_offset_ns"] for m in session.rows("SELECT rank, clock_offset_ns FROM meta")}
    first: dict[int, int] = {}
    for r in rows:
        first.setdefault(r["rank"], r["arrival_ns"])
    out: dict[int, tuple[int | None, str]] = {}
    for rank, off in meta.items():
        if off is not None:
            out[rank] = (int(off), "recorded clock offset")
        elif first.get(rank, 0) >= EPOCH_MIN_NS:
            out[rank] = (0, "timestamps are epoch times")
        else:
            out[rank] = (None, "")
    return out


def _estimate_missing(offsets: dict, by_key: dict) -> None:
    """Ranks without a usable offset: align their collective ends with the others'."""
    known = [r for r, (o, _) in offsets.items() if o is not None]
    for rank, (off, _) in list(offsets.items()):
        if off is not None:
            continue
        diffs = []
        for inst in by_key.values():
            if rank in inst and any(k in inst for k in known):
                ref = _median([inst[k]["end_ns"] + offsets[k][0] for k in known if k in inst])
                diffs.append(ref - inst[rank]["end_ns"])
        offsets[rank] = (_median(diffs), "estimated from collective ends") if diffs else (0, "unknown (not aligned)")
        known.append(rank)


def match(session: Session) -> dict:
    """Match collectives across ranks. Returns {"collectives", "stragglers", "clock", "wait_until"}.

    wait_until maps a comm activity id to the latest arrival over the ranks of its collective, on
    that activity's rank clock (time before it on this rank is waiting for peers)."""
    build(session, ["coll_instances"])
    rows = session.rows("SELECT * FROM coll_instances ORDER BY rank, comm_kind, grp, idx")
    ranks = sorted({r["rank"] for r in session.rows("SELECT rank FROM meta")})
    by_key: dict = {}
    for r in rows:
        by_key.setdefault((r["comm_kind"], r["grp"], r["idx"]), {})[r["rank"]] = r
    offsets = _offsets(session, rows)
    _estimate_missing(offsets, by_key)
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
    for (kind, grp, _), inst in by_key.items():
        for rank in inst:
            counts.setdefault((kind, grp), {}).setdefault(rank, 0)
            counts[(kind, grp)][rank] += 1
    for (kind, grp), c in sorted(counts.items()):
        if len(set(c.values())) > 1 or len(c) != len(ranks):
            out["warnings"].append(f"collectives {kind} {grp or '(default group)'}: ranks issued different numbers "
                                   f"({', '.join(f'rank {k}: {v}' for k, v in sorted(c.items()))}); "
                                   f"matched in order of issue")
    resid: dict = {r: [] for r in ranks}
    colls = []
    for (kind, grp, idx), inst in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        if len(inst) < 2:
            continue
        arr = {k: v["arrival_ns"] + offsets[k][0] for k, v in inst.items()}
        ends = {k: v["end_ns"] + offsets[k][0] for k, v in inst.items()}
        mid = _median(list(ends.values()))
        for k, e in ends.items():
            resid[k].append(e - mid)
        latest = max(arr.values())
        straggler = min(k for k, a in arr.items() if a == latest)
        first = min(arr.values())
        any_row = inst[min(inst)]
        for k, v in inst.items():
            out["wait_until"][v["id"]] = latest - offsets[k][0]
        colls.append(coll := {
            "kind": kind, "group": grp, "index": idx,
            "step": any_row["step"], "layer": any_row["layer"], "phase": any_row["phase"], "stage": any_row["stage"],
            "ranks": len(inst),
            "start_ns": {str(k): arr[k] for k in sorted(arr)},
            "dur_ns": {str(k): inst[k]["end_ns"] - inst[k]["arrival_ns"] for k in sorted(inst)},
            "wait_ns": {str(k): latest - arr[k] for k in sorted(arr)},
            "earliest_rank": min(k for k, a in arr.items() if a == first),
            "earliest_ns": first, "latest_ns": latest,
            "straggler": straggler, "skew_ns": latest - first,
            "imbalance": imbalance_of(any_row["in_split"], any_row["out_split"]),
        })
        for v in inst.values():
            out["by_id"][v["id"]] = coll
    out["collectives"] = colls
    clock["residual_skew_ns"] = {str(k): _median(v) for k, v in sorted(resid.items()) if v}
    clock["max_abs_residual_ns"] = max((abs(x) for x in clock["residual_skew_ns"].values()), default=0)
    out["stragglers"] = stragglers(colls, ranks)
    return out


def stragglers(colls: list[dict], ranks: list[int]) -> list[dict]:
    """Per rank: how often it arrived last, and the total wait that imposed on the other ranks."""
    out = []
    for rank in ranks:
        mine = [c for c in colls if c["straggler"] == rank and c["skew_ns"] > 0]
        caused = sum(sum(w for k, w in c["wait_ns"].items() if k != str(rank)) for c in mine)
        out.append({"rank": rank, "times_last": len(mine), "collectives": len(colls),
                    "total_skew_ns": sum(c["skew_ns"] for c in mine), "wait_caused_ns": caused,
                    "max_skew_ns": max((c["skew_ns"] for c in mine), default=0)})
    return sorted(out, key=lambda d: (-d["wait_caused_ns"], d["rank"]))
