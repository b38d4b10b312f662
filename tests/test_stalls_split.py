"""stalls.sections = merge(job_inputs, [rank_part of each rank]): the per-rank part computed for one
rank alone (a session over the whole job restricted with ranks=[r], and a session that holds only
rank r's canonical tables, ids unchanged) merges into exactly the sections of the whole job."""
import pickle
import random

import pyarrow.compute as pc
import pytest
from helpers import TRACES

from fixtures import moe_job
from traceview import schema
from traceview.analysis import breakdown, layers, stalls
from traceview.config import Rules
from traceview.document import packed
from traceview.engine.pipeline import build
from traceview.engine.session import Session
from traceview.load import load
from traceview.profile import Profile

DLRM = TRACES / "kineto" / "dlrm_8rank_v100"
MOE8 = moe_job.Job(ranks=8, steps=2, layers=3)


def _prepared(profile: Profile, params: dict | None = None):
    """A session with what stalls needs; params: the whole job's step rule (a rank's session gets it
    from the job, as a worker would) or None to choose it here."""
    s = Session(profile)
    if params is None:
        params = breakdown.prepare(s, breakdown.Options())["params"]
    else:
        build(s, ["activity_class", "step_ranges", "windows"], params)
    rows = breakdown.step_rows(s)
    layers.prepare(s, Rules())
    return s, rows, params


def _only_rank(p: Profile, rank: int) -> Profile:
    return Profile(**{n: getattr(p, n).filter(pc.equal(getattr(p, n).column("rank"), rank))
                      for n in schema.TABLES}, warnings=list(p.warnings))


def _idle(rows):
    return {(r["rank"], r["step"]): r["idle_ns"] for r in rows}


@pytest.fixture(scope="module", params=["dlrm", "moe8"])
def job(request, tmp_path_factory):
    if request.param == "dlrm":
        paths = sorted(DLRM.glob("*.json*"))
        if not paths:
            pytest.skip("the shared traces are not here")
    else:
        paths = moe_job.write(tmp_path_factory.mktemp("moe8"), MOE8)
    profile = load([str(x) for x in paths])
    s, rows, params = _prepared(profile)
    whole = stalls.sections(s, {"steps": rows}, top=10)
    return request.param, profile, s, rows, params, whole


def test_the_job_is_worth_splitting(job):
    name, profile, _, _, _, whole = job
    assert len(profile.ranks) == 8
    assert {c["rank"] for c in whole["critical_path"]} == set(profile.ranks)
    assert whole["stalls"] and whole["collectives"]
    if name == "moe8":  # every all-to-all of the job matched over the 8 ranks
        assert len(whole["collectives"]) == MOE8.steps * MOE8.layers * 2
        assert all(c["ranks"] == 8 for c in whole["collectives"])


def test_merge_of_restricted_rank_parts_equals_sections(job):
    _, profile, s, rows, _, whole = job
    inputs = stalls.job_inputs(s)
    parts = [stalls.rank_part(s, inputs, _idle(rows), [r]) for r in profile.ranks]
    for r, part in zip(profile.ranks, parts, strict=True):
        assert {c["rank"] for c in part["critical_path"]} == {r}
        assert {x["rank"] for x in part["stalls"]} <= {r}
        assert part["non_compute_ns"] == sum(c["stall_ns"] for c in part["critical_path"])
    random.Random(7).shuffle(parts)          # the order workers finish in does not matter
    assert stalls.merge(inputs, parts, top=10) == whole


def test_merge_of_rank_parts_from_one_rank_sessions_equals_sections(job):
    _, profile, s, _, params, whole = job
    inputs = pickle.loads(pickle.dumps(stalls.job_inputs(s)))    # as a worker receives it
    parts = []
    for r in profile.ranks:
        sr, rows_r, _ = _prepared(_only_rank(profile, r), params)
        assert sr.rows("SELECT DISTINCT rank FROM gpu_activities") == [{"rank": r}]
        part = stalls.rank_part(sr, inputs, _idle(rows_r))
        parts.append(pickle.loads(pickle.dumps(part)))           # as the reducer receives it
    assert stalls.merge(inputs, parts, top=10) == whole


def test_job_inputs_are_small(job):
    _, _, s, _, _, whole = job
    inputs = stalls.job_inputs(s)
    n = len(whole["collectives"])
    # proportional to the collectives (their per-rank arrivals), not to the activities
    assert len(pickle.dumps(inputs)) < 4096 + 2000 * n * 8


def test_chunks_of_one_rank_give_the_same_sections(job, monkeypatch):
    """The activities are fetched a chunk of ranks at a time (CHUNK_ROWS); one rank a chunk gives
    the same sections as every rank in one chunk."""
    from traceview.analysis import critical_path
    _, profile, s, rows, _, whole = job
    assert len(critical_path.windows_data(s)["chunks"]) == 1      # the fixture's job fits one chunk
    monkeypatch.setattr(critical_path, "CHUNK_ROWS", 1)
    assert critical_path.windows_data(s)["chunks"] == [[r] for r in profile.ranks]
    assert stalls.sections(s, {"steps": rows}, top=10) == whole


def test_window_columns_match_the_cp_preds_step(job):
    """The per-chunk rows (Acts) hold what the cp_preds step holds: the same activities per window
    in (end, start, id) order, and prev_k / wsrc_k point at the rows of prev_id / wait_src_id."""
    from traceview.analysis import critical_path
    _, _, s, _, _, _ = job
    build(s, ["cp_preds"])
    want: dict = {}
    for r in s.rows("SELECT * FROM cp_preds ORDER BY rank, step, end_ns, start_ns, id"):
        want.setdefault((r["rank"], r["step"]), []).append(r)
    seen = 0
    for w in critical_path.iter_paths(s, {}):
        acts, rows = w["acts"], want.get((w["rank"], w["step"]), [])
        assert list(acts.id) == [r["id"] for r in rows]
        pos = {r["id"]: k for k, r in enumerate(rows)}
        assert list(acts.prev_k) == [pos.get(r["prev_id"], -1) for r in rows]
        assert list(acts.wsrc_k) == [pos.get(r["wait_src_id"], -1) for r in rows]
        assert [acts.row(k)["name"] for k in range(len(acts))] == [r["name"] for r in rows]
        seen += len(rows)
    assert seen == sum(len(v) for v in want.values()) > 0


def test_a_presorted_rank_part_is_the_presort_of_the_rank_part(job):
    """rank_part(presorted=True), what a mapped job's worker sends, packs each section in merge's
    order as it packs it: the part that packed.presort of rank_part's sections gives (the same
    bytes, row ends and sort keys), the stalls summed as stall_sums sums them; merged, the same
    sections."""
    _, _, s, rows, _, whole = job
    inputs = stalls.job_inputs(s)
    plain = stalls.rank_part(s, inputs, _idle(rows))
    pre = stalls.rank_part(s, inputs, _idle(rows), presorted=True)
    for k, key in stalls.MERGE_ORDER.items():
        assert type(plain[k]) is packed.RowBytes and len(plain[k])
        want, decoded = packed.presort(plain[k], key)
        got = pre[k]
        assert bytes(got.data) == bytes(want.data) and list(got.ends) == list(want.ends)
        assert got.keys is not None and got.keys.equals(want.keys)
        assert list(got) == decoded
    assert pre["stall_sums"] == stalls.stall_sums(list(plain["stalls"]))
    assert "stall_sums" not in plain and pre["non_compute_ns"] == plain["non_compute_ns"]
    assert stalls.merge(inputs, [pre], top=10) == whole
