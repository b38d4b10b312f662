"""Critical path and stalls on the real traces of the corpus (skipped where the corpus is absent):
the H200 MoE step (blocking vs overlap dispatch, the token-count host sync) and the 8-rank DLRM job
(every collective matched across ranks). Expectations are recomputed from the raw files or from
the other sections of the report, never copied from this module's output."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from helpers import TRACES, analyze_paths

from traceview.reports import text_stalls

H200 = TRACES / "kineto" / "h200_moe"
DLRM = TRACES / "kineto" / "dlrm_8rank_v100"
pytestmark = pytest.mark.skipif(not H200.exists() or not DLRM.exists(), reason="trace corpus not present")


def run(paths) -> dict:
    return analyze_paths(paths)


@pytest.fixture(scope="module")
def h200():
    return {mode: run([H200 / f"{mode}.json.gz"]) for mode in ("blocking", "overlap")}


@pytest.fixture(scope="module")
def dlrm():
    return run([DLRM])


@pytest.mark.parametrize("mode", ("blocking", "overlap"))
def test_h200_idle_fully_assigned(h200, mode):
    doc = h200[mode]
    idle = {(r["rank"], r["step"]): r["idle_ns"] for r in doc["steps"]}
    assert len(doc["critical_path"]) == 3
    for cp in doc["critical_path"]:
        # the GPU idle time of the step (breakdown sweep) is all on the path, with a cause
        assert cp["idle_assigned_ns"] == idle[(cp["rank"], cp["step"])] > 0
        mine = [s for s in doc["stalls"] if (s["rank"], s["step"]) == (cp["rank"], cp["step"])]
        assert sum(s["dur_ns"] for s in mine) == cp["window_ns"] - cp["compute_ns"]
        assert sum(s["dur_ns"] for s in mine if s["cause"] in ("host_sync", "launch_bound", "idle")) == \
            idle[(cp["rank"], cp["step"])]


@pytest.mark.parametrize("mode", ("blocking", "overlap"))
def test_h200_experts_token_count_sync(h200, mode):
    doc = h200[mode]
    for step in (1, 2, 3):
        for layer in range(4):
            mine = sorted((s for s in doc["stalls"] if (s["step"], s["layer"], s["phase"], s["stage"])
                           == (step, layer, "forward", "experts")), key=lambda s: s["start_ns"])
            syncs = [s for s in mine if s["cause"] == "host_sync"]
            assert len(syncs) == 1, (step, layer)
            ev = syncs[0]["evidence"]
            # .tolist() of the token counts: a blocking device-to-host copy (aten::to > _to_copy >
            # copy_) that held the host for milliseconds, then cudaStreamSynchronize
            assert ev["ops"] == ["aten::to", "aten::_to_copy", "aten::copy_"]
            assert [c["name"] for c in ev["calls"]] == ["cudaMemcpyAsync", "cudaStreamSynchronize"]
            assert ev["sync_ns"] > 1_000_000
            # ... followed by launch-bound idle in the same stage
            lb = [s for s in mine if s["cause"] == "launch_bound"]
            assert len(lb) == 1 and lb[0]["evidence"]["last_start_ns"] > syncs[0]["start_ns"]


def test_h200_blocking_dispatch_exposed(h200):
    doc = h200["blocking"]
    fwd = [a for a in doc["a2a"] if (a["phase"], a["stage"]) == ("forward", "dispatch")]
    assert len(fwd) == 12
    # stream 7 waits for the dispatch: nothing runs beside it, all of it is on the path
    assert all(a["hidden_ns"] == 0 and a["exposed_on_path_ns"] == a["dur_ns"] > 0 for a in fwd)
    st = [s for s in doc["stalls"] if (s["phase"], s["stage"], s["cause"]) == ("forward", "dispatch", "exposed_a2a")]
    assert sorted((s["step"], s["layer"], s["dur_ns"]) for s in st) == \
        sorted((a["step"], a["layer"], a["dur_ns"]) for a in fwd)
    for s in st:   # the shared expert of the layer did not depend on it and ran after it
        ev = s["evidence"]
        assert ev["independent_work_available"] and ev["independent_stages"] == ["shared_expert"]
        assert ev["independent_work_after_ns"] == ev["independent_work_ns"] > 1_000_000


def test_h200_overlap_dispatch_partly_hidden(h200):
    doc = h200["overlap"]
    fwd = [a for a in doc["a2a"] if (a["phase"], a["stage"]) == ("forward", "dispatch")]
    assert len(fwd) == 12
    for a in fwd:   # the shared expert hides part of each dispatch; the rest is exposed on the path
        assert 0 < a["hidden_ns"] < a["dur_ns"] and 0 < a["exposed_on_path_ns"] < a["dur_ns"]
        assert a["hidden_ns"] + a["exposed_on_path_ns"] == a["dur_ns"]
    lines = text_stalls.lines(doc)
    assert any(x.startswith("L0 fwd dispatch") for x in lines)
    assert max(len(x) for x in lines) <= 100


def raw_collectives() -> dict:
    """From the raw JSON: per rank, NCCL kernels in time order, epoch ns (timestamps are epoch µs)."""
    out = {}
    for f in sorted(DLRM.glob("*.json.gz")):
        d = json.loads(gzip.open(f).read())
        rank = d["distributedInfo"]["rank"]
        k = defaultdict(list)
        for e in d["traceEvents"]:
            if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_"):
                kind = "all_to_all" if "SendRecv" in e["name"] else "all_reduce" if "AllReduce" in e["name"] else None
                k[kind].append(round(e["ts"] * 1000))
        out[rank] = {kind: sorted(v) for kind, v in k.items()}
    return out


def test_dlrm_collectives_matched(dlrm):
    raw = raw_collectives()
    assert sorted(raw) == list(range(8))
    assert {k: len(v) for k, v in raw[0].items()} == {"all_to_all": 5, "all_reduce": 3}
    colls = {(c["kind"], c["index"]): c for c in dlrm["collectives"]}
    assert len(colls) == 8 and all(c["ranks"] == 8 for c in colls.values())
    for (kind, idx), c in colls.items():
        starts = {r: raw[r][kind][idx] for r in range(8)}
        latest = max(starts.values())
        assert c["start_ns"] == {str(r): v for r, v in starts.items()}
        assert c["straggler"] == min(r for r, v in starts.items() if v == latest)
        assert c["skew_ns"] == latest - min(starts.values())
        assert c["wait_ns"] == {str(r): latest - v for r, v in starts.items()}
    # clocks: epoch timestamps; the collectives end together on every rank within the µs resolution
    assert {v["method"] for v in dlrm["clock"]["ranks"].values()} == {"timestamps are epoch times"}
    assert dlrm["clock"]["max_abs_residual_ns"] <= 1000
    last = defaultdict(int)
    for c in colls.values():
        last[c["straggler"]] += 1
    assert {s["rank"]: s["times_last"] for s in dlrm["stragglers"] if s["times_last"]} == dict(last)


def test_dlrm_peer_wait_matches_collective_waits(dlrm):
    # peer wait on the path never exceeds the wait the collective imposed on that rank
    imposed = defaultdict(int)
    for c in dlrm["collectives"]:
        for r, w in c["wait_ns"].items():
            imposed[int(r)] += w
    got = defaultdict(int)
    for s in dlrm["stalls"]:
        if s["cause"] == "peer_wait":
            got[s["rank"]] += s["dur_ns"]
    assert got and all(0 < got[r] <= imposed[r] for r in got)
    lines = text_stalls.lines(dlrm)
    assert max(len(x) for x in lines) <= 100
    assert any(x.startswith("Stragglers") for x in lines)
