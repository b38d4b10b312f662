"""collectives.match reads coll_instances as columns; here it is checked against a second method:
the matching written over one dict per row (as it was first written), on random jobs with
recorded, epoch and missing clock offsets, uneven issue counts, one-rank collectives and ties."""
from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from traceview import schema
from traceview.analysis import collectives
from traceview.engine.session import Session
from traceview.profile import Profile


def _median(vals):
    v = sorted(vals)
    n = len(v)
    return 0 if not n else v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) // 2


def reference(rows: list[dict], meta: dict[int, int | None]) -> dict:
    """The matching over row dicts: by_key (kind, group, index) -> {rank: row}."""
    rows = sorted(rows, key=lambda r: (r["rank"], r["comm_kind"], r["grp"], r["idx"]))
    ranks = sorted(meta)
    by_key: dict = {}
    for r in rows:
        by_key.setdefault((r["comm_kind"], r["grp"], r["idx"]), {})[r["rank"]] = r
    first: dict = {}
    for r in rows:
        first.setdefault(r["rank"], r["arrival_ns"])
    offsets: dict = {}
    for rank, off in meta.items():
        if off is not None:
            offsets[rank] = (off, "recorded clock offset")
        elif first.get(rank, 0) >= collectives.EPOCH_MIN_NS:
            offsets[rank] = (0, "timestamps are epoch times")
        else:
            offsets[rank] = (None, "")
    known = [r for r, (o, _) in offsets.items() if o is not None]
    for rank, (off, _) in list(offsets.items()):
        if off is not None:
            continue
        diffs = [_median([inst[k]["end_ns"] + offsets[k][0] for k in known if k in inst]) - inst[rank]["end_ns"]
                 for inst in by_key.values() if rank in inst and any(k in inst for k in known)]
        offsets[rank] = (_median(diffs), "estimated from collective ends") if diffs else (0, "unknown (not aligned)")
        known.append(rank)
    warnings = []
    counts: dict = {}
    for (kind, grp, _), inst in by_key.items():
        for rank in inst:
            c = counts.setdefault((kind, grp), {})
            c[rank] = c.get(rank, 0) + 1
    for (kind, grp), c in sorted(counts.items()):
        if len(set(c.values())) > 1 or len(c) != len(ranks):
            warnings.append((kind, grp, sorted(c.items())))
    resid: dict = {r: [] for r in ranks}
    colls, wait_until, by_id = [], {}, {}
    for (kind, grp, idx), inst in sorted(by_key.items()):
        if len(inst) < 2:
            continue
        arr = {k: v["arrival_ns"] + offsets[k][0] for k, v in inst.items()}
        ends = {k: v["end_ns"] + offsets[k][0] for k, v in inst.items()}
        mid = _median(list(ends.values()))
        for k, e in ends.items():
            resid[k].append(e - mid)
        latest, earliest = max(arr.values()), min(arr.values())
        low = inst[min(inst)]
        for k, v in inst.items():
            wait_until[v["id"]] = latest - offsets[k][0]
            by_id[v["id"]] = len(colls)
        colls.append({"kind": kind, "group": grp, "index": idx, "step": low["step"], "layer": low["layer"],
                      "phase": low["phase"], "stage": low["stage"], "ranks": len(inst),
                      "start_ns": {str(k): arr[k] for k in sorted(arr)},
                      "dur_ns": {str(k): inst[k]["end_ns"] - inst[k]["arrival_ns"] for k in sorted(inst)},
                      "wait_ns": {str(k): latest - arr[k] for k in sorted(arr)},
                      "earliest_rank": min(k for k, a in arr.items() if a == earliest),
                      "earliest_ns": earliest, "latest_ns": latest,
                      "straggler": min(k for k, a in arr.items() if a == latest), "skew_ns": latest - earliest,
                      "imbalance": collectives.imbalance_of(low["in_split"], low["out_split"])})
    residual = {str(k): _median(v) for k, v in sorted(resid.items()) if v}
    return {"offsets": {str(k): {"offset_ns": v[0], "method": v[1]} for k, v in sorted(offsets.items())},
            "collectives": colls, "wait_until": wait_until, "by_id": by_id, "residual": residual,
            "warnings": warnings}


def random_job(seed: int) -> tuple[list[dict], dict]:
    rnd = random.Random(seed)
    ranks = rnd.sample(range(40), rnd.randint(2, 9))
    meta = {}
    for r in ranks:
        meta[r] = rnd.choice([None, None, 1_700_000_000_000_000_000 + rnd.randint(0, 10 ** 9), 0])
    epoch = {r for r in ranks if meta[r] is None and rnd.random() < 0.3}
    rows, rid = [], 0
    for kind in ("all_to_all", "allreduce"):
        for grp in ("", "ep0"):
            n = rnd.randint(0, 6)
            for r in ranks:
                base = collectives.EPOCH_MIN_NS if r in epoch else 0
                for idx in range(n - (1 if rnd.random() < 0.2 else 0)):
                    start = base + 1000 * idx + rnd.choice([0, 5, 5, 17, rnd.randint(0, 900)])
                    rid += 1
                    rows.append({"id": rid * 3 + 1, "rank": r, "comm_kind": kind, "grp": grp, "idx": idx,
                                 "arrival_ns": start, "end_ns": start + rnd.randint(1, 400), "bytes": 8,
                                 "stream": 7, "in_split": json.dumps([rnd.randint(1, 9) for _ in range(3)])
                                 if rnd.random() < 0.5 else None, "out_split": None, "group_size": len(ranks),
                                 "step": rnd.choice([0, 1, None]), "layer": rnd.choice([None, 2]),
                                 "phase": rnd.choice(["forward", None]), "stage": rnd.choice(["dispatch", None])})
    rnd.shuffle(rows)
    return rows, meta


@pytest.fixture(autouse=True)
def given_instances(monkeypatch):
    """coll_instances is given as a table (its dependencies are not built)."""
    monkeypatch.setattr(collectives, "build", lambda session, targets, params=None: None)


def session_of(rows: list[dict], meta: dict) -> Session:
    tables = {name: schema.empty(name) for name in schema.TABLES}
    tables["meta"] = schema.conform("meta", pa.table({
        "rank": pa.array(list(meta), pa.int32()),
        "clock_offset_ns": pa.array(list(meta.values()), pa.int64()),
        "source_file": [f"r{r}.json" for r in meta], "source_format": ["kineto"] * len(meta)}))
    s = Session(Profile(**tables, warnings=[]))
    cols = ("id", "rank", "comm_kind", "grp", "idx", "arrival_ns", "end_ns", "bytes", "stream", "in_split",
            "out_split", "group_size", "step", "layer", "phase", "stage")
    types = {c: pa.int32() for c in ("rank", "step", "layer", "stream", "group_size")}
    t = pa.table({c: pa.array([r[c] for r in rows], types.get(c, pa.string() if c in (
        "comm_kind", "grp", "in_split", "out_split", "phase", "stage") else pa.int64())) for c in cols})
    s.adopt("coll_instances", t, {})
    return s


@pytest.mark.parametrize("seed", range(40))
def test_match_equals_the_dict_per_row_matching(seed):
    rows, meta = random_job(seed)
    want = reference(rows, meta)
    got = collectives.match(session_of(rows, meta))
    assert got["clock"]["ranks"] == want["offsets"]
    ranks = sorted(meta)
    if len(ranks) < 2:
        return
    assert got["collectives"] == want["collectives"]
    assert got["wait_until"] == want["wait_until"]
    by_id = got["by_id"]
    assert sorted(by_id) == sorted(want["by_id"])
    assert {i: by_id.collective(i) for i in by_id} == want["by_id"]
    rank_of = {r["id"]: r["rank"] for r in rows}
    for i, j in want["by_id"].items():      # the collective's fields, wait_ns of the id's own rank
        c, w = by_id[i], want["collectives"][j]
        assert c == {**{k: v for k, v in w.items() if k not in ("start_ns", "dur_ns", "wait_ns")},
                     "wait_ns": {str(rank_of[i]): w["wait_ns"][str(rank_of[i])]}}
    lo = sorted(want["by_id"])[len(want["by_id"]) // 2]        # a batch's range of ids
    assert dict(by_id.range(lo, None).items()) == {i: by_id[i] for i in by_id if i >= lo}
    assert dict(got["wait_until"].range(0, lo)) == {i: v for i, v in want["wait_until"].items() if i < lo}
    assert got["clock"]["residual_skew_ns"] == want["residual"]
    assert got["clock"]["max_abs_residual_ns"] == max((abs(v) for v in want["residual"].values()), default=0)
    uneven = [w for w in got["warnings"] if "issued different numbers" in w]
    assert uneven == [f"collectives {k} {g or '(default group)'}: ranks issued different numbers "
                      f"({', '.join(f'rank {r}: {n}' for r, n in c)}); matched in order of issue"
                      for k, g, c in want["warnings"]]
    assert got["stragglers"] == collectives.stragglers(want["collectives"], ranks)


def test_a_tie_names_the_lowest_rank_by_hand():
    rows = [{"id": i + 1, "rank": r, "comm_kind": "all_to_all", "grp": "", "idx": 0, "arrival_ns": a, "end_ns": 100,
             "bytes": 0, "stream": 7, "in_split": None, "out_split": None, "group_size": 3, "step": 0,
             "layer": None, "phase": None, "stage": None}
            for i, (r, a) in enumerate([(5, 40), (2, 40), (9, 10)])]
    got = collectives.match(session_of(rows, {2: 0, 5: 0, 9: 0}))
    (c,) = got["collectives"]
    assert (c["straggler"], c["earliest_rank"], c["skew_ns"]) == (2, 9, 30)
    assert c["wait_ns"] == {"2": 0, "5": 0, "9": 30} and got["wait_until"] == {1: 40, 2: 40, 3: 40}
