"""The matched collectives held as arrays (analysis/matched.py): the document's `collectives` as
PackedRows encoded from them when read give the dicts of the matching written over one dict per
row (test_collectives_columns.reference), a few collectives a chunk; the JSON written from them
is the bytes written from the plain list; by_id and wait_until cut to a batch's range and
pickled answer as the whole maps do."""
from __future__ import annotations

import pickle

import pytest
from test_collectives_columns import given_instances, random_job, reference, session_of  # noqa: F401

from reports import json_report
from traceview.analysis import collectives, matched
from traceview.document.packed import PackedRows, plain


@pytest.fixture
def always_packed(monkeypatch):
    monkeypatch.setattr(matched, "MIN_ROWS", 0)
    monkeypatch.setattr(matched, "ENTRIES_PER_CHUNK", 10)      # a few collectives a chunk


@pytest.mark.parametrize("seed", range(12))
def test_packed_collectives_are_the_reference_dicts(seed, always_packed):
    rows, meta = random_job(seed)
    want = reference(rows, meta)
    got = collectives.match(session_of(rows, meta))
    if len(meta) < 2 or not want["collectives"]:
        return
    colls = got["collectives"]
    assert type(colls) is PackedRows and len(colls) == len(want["collectives"])
    widest = max(c["ranks"] for c in want["collectives"])
    assert len(list(colls.chunks())) == -(-len(want["collectives"]) // max(1, 10 // widest))
    assert list(colls) == want["collectives"]
    assert colls[len(colls) - 1] == want["collectives"][-1] and colls[1:3] == want["collectives"][1:3]
    assert pickle.loads(pickle.dumps(colls)) == want["collectives"]
    # the report's bytes: the same whether the rows are packed or a list (streamed or not)
    doc = {"collectives": colls, "schema": "x", "stragglers": got["stragglers"]}
    assert json_report.render_bytes(doc) == json_report.render_bytes(
        {**doc, "collectives": want["collectives"]}) == json_report.render_bytes(plain(doc))


def test_id_maps_cut_and_pickled_answer_as_the_whole(always_packed):
    rows, meta = random_job(3)
    got = collectives.match(session_of(rows, meta))
    want = reference(rows, meta)
    ids = sorted(want["wait_until"])
    lo, hi = ids[len(ids) // 3], ids[2 * len(ids) // 3]
    by_id = pickle.loads(pickle.dumps(got["by_id"].range(lo, hi)))
    until = pickle.loads(pickle.dumps(got["wait_until"].range(lo, hi)))
    inside = [i for i in ids if lo <= i < hi]
    assert sorted(by_id) == sorted(until) == inside
    assert {i: until[i] for i in inside} == {i: want["wait_until"][i] for i in inside}
    assert all(by_id[i] == got["by_id"][i] for i in inside)
    assert until.get(hi) is None and by_id.get(ids[0] if ids[0] < lo else -1) is None
    # head_wait (a stall's evidence) and `in`: the values of by_id[i], without building it
    for i in inside:
        c = by_id[i]
        ((r, w),) = c["wait_ns"].items()
        assert i in by_id and by_id.head_wait(i, int(r)) == ({k: v for k, v in c.items() if k != "wait_ns"}, w)
        assert by_id.head_wait(i, int(r) + 1000)[1] is None
    assert hi not in by_id and by_id.head_wait(hi, 0) is None and by_id.get(hi, 5) == 5
    assert "_at" not in pickle.loads(pickle.dumps(got["by_id"])).__dict__     # the lookup dict stays behind


def test_a_collective_by_hand_packed(always_packed):
    """3 ranks, arrivals 40, 40, 10 at offsets 0: wait 0, 0, 30; the rank of the lowest id named."""
    rows = [{"id": i + 1, "rank": r, "comm_kind": "all_to_all", "grp": "", "idx": 0, "arrival_ns": a, "end_ns": 100,
             "bytes": 0, "stream": 7, "in_split": None, "out_split": None, "group_size": 3, "step": 0,
             "layer": None, "phase": None, "stage": None}
            for i, (r, a) in enumerate([(5, 40), (2, 40), (9, 10)])]
    got = collectives.match(session_of(rows, {2: 0, 5: 0, 9: 0}))
    (c,) = got["collectives"]
    assert type(got["collectives"]) is PackedRows
    assert c["start_ns"] == {"2": 40, "5": 40, "9": 10} and c["dur_ns"] == {"2": 60, "5": 60, "9": 90}
    assert c["wait_ns"] == {"2": 0, "5": 0, "9": 30} and (c["straggler"], c["skew_ns"]) == (2, 30)
    assert got["by_id"][3]["wait_ns"] == {"9": 30} and got["by_id"][1]["wait_ns"] == {"5": 0}
    (s2, *_) = got["stragglers"]
    assert (s2["rank"], s2["times_last"], s2["wait_caused_ns"], s2["max_skew_ns"]) == (2, 1, 30, 30)
