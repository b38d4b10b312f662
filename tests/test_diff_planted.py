"""`traceview diff` on fixture pairs with one planted change each (fixtures/scenarios.py
`regression_pairs()`): the planted cause must come first, with the planted size within 5 %,
and the noise pair must be called noise. The planted deltas are fixed by construction (the
fixture simulator's `expected['step_time_ns']`), never read back from traceview."""
import json

import pytest

from fixtures.scenarios import regression_pairs
from traceview.diff.document import DiffOptions, diff_sides
from traceview.runs import load_side

PAIRS = {p["name"]: p for p in regression_pairs()}
# planted cause kind -> the explanation item kind that names it, and words its text must hold
EXPECT = {
    "kernel_slowdown": ("swap", ["fp32", "gemm:sgemm fp32", "gemm:nvjet bf16", "experts", "layer 1"]),
    "comm_exposed": ("comm", ["dispatch", "all-to-all", "no longer overlaps the shared expert"]),
    "host_sync": ("host_sync", ["new host sync", "experts", "aten::_local_scalar_dense"]),
    "straggler": ("straggler", ["rank 1", "straggler"]),
}


def summary_step(scn) -> int:
    """The summary step of a side by the simulator's own step windows: per rank the lower median,
    then the lower median over ranks."""
    per_rank = []
    for r in sorted({s["rank"] for s in scn.expected["steps"]}):
        w = sorted(s["window_ns"] for s in scn.expected["steps"] if s["rank"] == r)
        per_rank.append(w[(len(w) - 1) // 2])
    return sorted(per_rank)[(len(per_rank) - 1) // 2]


def noise_delta() -> int:
    """The jittered pair's steps differ: its change is that of the summary steps (not the mean)."""
    return summary_step(PAIRS["noise"]["new"]) - summary_step(PAIRS["noise"]["base"])


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    root = tmp_path_factory.mktemp("pairs")
    for name, p in PAIRS.items():
        out[name] = (p["base"].write(root / name, "base"), p["new"].write(root / name, "new"))
    return out


@pytest.fixture(scope="module")
def diffs(written):
    opts = DiffOptions()
    res = {}
    for name, (b, n) in written.items():
        res[name] = diff_sides(load_side("base", [str(b["kineto"])], opts),
                               load_side("new", [str(n["kineto"])], opts), opts)
    return res


@pytest.mark.parametrize("name", [n for n in PAIRS if n != "noise"])
def test_planted_cause_first_and_sized(diffs, name):
    pair, doc = PAIRS[name], diffs[name]
    planted = pair["step_time_delta_ns"]
    assert planted > 0
    assert doc["delta"]["step_time_ns"] == pytest.approx(planted, abs=1)
    assert doc["verdict"] == "regression"
    first = doc["explanation"][0]
    kind, words = EXPECT[pair["cause"]["kind"]]
    assert first["kind"] == kind, first["text"]
    for w in words:
        assert w in first["text"], (w, first["text"])
    assert abs(first["contribution_ns"] - planted) <= 0.05 * planted, (first["contribution_ns"], planted)
    assert sum(it["contribution_ns"] for it in doc["explanation"]) == doc["delta"]["step_time_ns"]


def test_kernel_swap_details(diffs):
    doc, cause = diffs["expert_gemm_fp32"], PAIRS["expert_gemm_fp32"]["cause"]
    first = doc["explanation"][0]
    assert first["layers"] == [cause["layer"]]
    assert first["phases"] == ["backward", "forward"]
    assert f"{cause['factor']:.1f}x the time" in first["text"]
    fam = doc["delta"]["families"]
    assert [r["family"] for r in fam["appeared"]] == ["gemm:sgemm fp32"]
    assert fam["vanished"] == []          # nvjet still runs in the other layers
    # by the simulator's rules: `experts` expert GEMMs of 4 us each, factor x longer; forward one
    # GEMM per expert, backward two (dgrad, wgrad) of the forward's duration
    n_exp = PAIRS["expert_gemm_fp32"]["base"].expected["params"]["experts"]
    extra = int(4_000 * (cause["factor"] - 1))
    rows = {(r["layer"], r["phase"], r["stage"]): r for r in doc["delta"]["layers"]}
    assert rows[(1, "forward", "experts")]["delta_parts_ns"]["compute_ns"] == n_exp * extra
    assert rows[(1, "backward", "experts")]["delta_parts_ns"]["compute_ns"] == 2 * n_exp * extra
    assert all(r["delta_parts_ns"]["compute_ns"] == 0 for k, r in rows.items() if k[0] != 1 or k[2] != "experts")
    # the extra kernel time beyond the step-time change only filled idle time (the host was slower)
    filled = 3 * n_exp * extra - PAIRS["expert_gemm_fp32"]["step_time_delta_ns"]
    assert filled > 0 and f"{filled / 1e3:.1f} us of the extra kernel time only filled idle time" in first["text"]


def test_straggler_names_the_late_rank(diffs):
    s = diffs["straggler"]["delta"]["straggler"]
    assert s["rank"] == PAIRS["straggler"]["cause"]["rank"]
    growth = {g["rank"]: g["delta_ns"] for g in s["comm_growth_ns"]}
    # from the collectives section: the wait rank 1 causes per step is `delay` in each of the 8
    # all-to-alls per step (2 layers x forward/backward x dispatch/combine), for the 1 other rank
    assert s["source"].startswith("collectives")
    assert growth == {0: 0, 1: 8 * PAIRS["straggler"]["cause"]["delay_ns"]}


def test_noise_pair_is_noise(diffs):
    doc = diffs["noise"]
    assert doc["verdict"] == "noise"
    assert doc["noise"]["within_noise"] is True
    assert abs(doc["delta"]["step_time_ns"]) <= doc["noise"]["threshold_ns"]
    assert doc["delta"]["step_time_ns"] == noise_delta()
    assert sum(it["contribution_ns"] for it in doc["explanation"]) == doc["delta"]["step_time_ns"]


def test_regressions_are_outside_the_noise(diffs):
    for name, doc in diffs.items():
        if name != "noise":
            assert abs(doc["delta"]["step_time_ns"]) > doc["noise"]["threshold_ns"]


def test_reverse_direction_is_an_improvement(written):
    b, n = written["a2a_exposed"]
    opts = DiffOptions()
    doc = diff_sides(load_side("base", [str(n["kineto"])], opts), load_side("new", [str(b["kineto"])], opts), opts)
    planted = PAIRS["a2a_exposed"]["step_time_delta_ns"]
    assert doc["verdict"] == "improvement"
    first = doc["explanation"][0]
    assert first["kind"] == "comm" and "now overlaps the shared expert" in first["text"]
    assert abs(first["contribution_ns"] + planted) <= 0.05 * planted


def test_formats_may_differ(written):
    """Base from the Kineto file, new from the nsys export of the same scenario."""
    b, n = written["expert_gemm_fp32"]
    opts = DiffOptions()
    doc = diff_sides(load_side("base", [str(b["kineto"])], opts), load_side("new", [str(n["nsys"])], opts), opts)
    planted = PAIRS["expert_gemm_fp32"]["step_time_delta_ns"]
    assert {i["format"] for i in doc["base"]["inputs"]} == {"kineto"}
    assert {i["format"] for i in doc["new"]["inputs"]} == {"nsys"}
    first = doc["explanation"][0]
    assert first["kind"] == "swap"
    assert abs(first["contribution_ns"] - planted) <= 0.05 * planted


def test_document_matches_schema(diffs):
    from importlib import resources

    import jsonschema
    schema = json.loads(resources.files("traceview.data").joinpath("diff.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for doc in diffs.values():
        jsonschema.validate(json.loads(json.dumps(doc)), schema, cls=jsonschema.Draft202012Validator)


def test_new_stalls_are_named(diffs):
    """With the stalls section (issue 6): the planted syncs show up as new host_sync stalls in the
    experts stage of exactly the layers that got a sync, and the first item names them."""
    doc = diffs["new_host_sync"]
    planted_layers = sorted({h["layer"] for h in PAIRS["new_host_sync"]["new"].expected["host_syncs"]})
    rows = [r for r in doc["delta"]["stalls"] if r["cause"] == "host_sync"]
    assert sorted(r["layer"] for r in rows) == planted_layers
    assert all(r["status"] == "new" and r["stage"] == "experts" and r["base_ns"] == 0 for r in rows)
    assert "new host_sync stall" in doc["explanation"][0]["text"]
    cp = doc["delta"]["critical_path"]
    assert cp["window_ns"]["delta_ns"] == doc["delta"]["step_time_ns"]


def test_works_without_stalls(written):
    """Without the stalls section the explanation is the same (it only adds the stall notes)."""
    from traceview.diff.decompose import build_side
    from traceview.runs import run_job

    def side(label, path, opts):   # a document without the stall and collective sections
        doc, session = run_job([str(path)], opts)
        for k in ("stalls", "critical_path", "stragglers", "stall_summary", "collectives", "a2a", "clock"):
            doc.pop(k, None)
        return build_side(label, [str(path)], doc, session)
    for name in ("new_host_sync", "straggler"):
        b, n = written[name]
        opts = DiffOptions()
        doc = diff_sides(side("base", b["kineto"], opts), side("new", n["kineto"], opts), opts)
        planted = PAIRS[name]["step_time_delta_ns"]
        assert doc["delta"]["stalls"] is None and doc["delta"]["critical_path"] is None
        first = doc["explanation"][0]
        assert first["kind"] == EXPECT[PAIRS[name]["cause"]["kind"]][0]
        assert "critical path" not in first["text"]
        if name == "straggler":   # fallback evidence: per-rank comm time; rank 0 waits 8 x delay
            s = doc["delta"]["straggler"]
            assert s["rank"] == 1 and s["source"] == "per-rank comm time"
            assert {g["rank"]: g["delta_ns"] for g in s["comm_growth_ns"]} == {
                0: 8 * PAIRS[name]["cause"]["delay_ns"], 1: 0}
        assert abs(first["contribution_ns"] - planted) <= 0.05 * planted


def test_same_explanations_from_nsys_exports(written, diffs):
    """Both sides from the nsys exports of the same scenarios (the multi-rank pair as one file
    with a process per rank): the same first cause and size, the noise pair is noise."""
    opts = DiffOptions()
    for name, (b, n) in written.items():
        doc = diff_sides(load_side("base", [str(b["nsys"])], opts), load_side("new", [str(n["nsys"])], opts), opts)
        planted = noise_delta() if name == "noise" else PAIRS[name]["step_time_delta_ns"]
        assert doc["delta"]["step_time_ns"] == pytest.approx(planted, abs=1)
        assert sum(it["contribution_ns"] for it in doc["explanation"]) == doc["delta"]["step_time_ns"]
        if name == "noise":
            assert doc["verdict"] == "noise"
            continue
        first = doc["explanation"][0]
        assert first["kind"] == EXPECT[PAIRS[name]["cause"]["kind"]][0]
        assert abs(first["contribution_ns"] - planted) <= 0.05 * planted
        assert first["text"] == diffs[name]["explanation"][0]["text"]
