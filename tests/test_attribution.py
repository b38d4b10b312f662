"""Per-layer / phase / stage attribution: golden SQL test, H200 done-when, DeepSeek naming, paired formats."""
import collections
import subprocess
import sys

import pytest
from helpers import TRACES, make_profile

from fixtures import scenarios
from traceview.analysis import breakdown, layers
from traceview.config import Rules
from traceview.engine.session import Session
from traceview.runs import AnalyzeOptions, run_analyze


def golden_profile():
    # main thread 1: ProfilerStep#1 > forward > layer_02/moe/dispatch > c10d::alltoall_base_ (seq 5)
    #                                         > layer_02/attention > aten::mm (seq 7)
    #                                         > aten::embedding (seq 3)        (outside layers)
    #                optimizer > Optimizer.step#AdamW.step
    # autograd thread 2: evaluate_function: MmBackward0 (seq 7) > aten::mm
    #                    evaluate_function: AccumulateGrad (seq 99: no forward op)
    #                    combine(B) (DeepSeek backward annotation, no layer) > aten::add
    cpu = [
        dict(id=1, tid=1, start_ns=0, end_ns=10_000, name="ProfilerStep#1"),
        dict(id=2, tid=1, start_ns=10, end_ns=5_000, name="forward", depth=1, parent_id=1),
        dict(id=3, tid=1, start_ns=20, end_ns=100, name="layer_02/moe/dispatch", depth=2, parent_id=2),
        dict(id=4, tid=1, start_ns=30, end_ns=90, name="c10d::alltoall_base_", kind="op", seq=5, depth=3, parent_id=3),
        dict(id=5, tid=1, start_ns=200, end_ns=300, name="layer_02/attention", depth=2, parent_id=2),
        dict(id=6, tid=1, start_ns=210, end_ns=290, name="aten::mm", kind="op", seq=7, depth=3, parent_id=5),
        dict(id=7, tid=1, start_ns=400, end_ns=500, name="aten::embedding", kind="op", seq=3, depth=2, parent_id=2),
        dict(id=8, tid=1, start_ns=6_000, end_ns=7_000, name="optimizer", depth=1, parent_id=1),
        dict(id=9, tid=1, start_ns=6_100, end_ns=6_900, name="Optimizer.step#AdamW.step", depth=2, parent_id=8),
        dict(id=10, tid=2, start_ns=5_100, end_ns=5_300, name="autograd::engine::evaluate_function: MmBackward0",
             kind="op", seq=7),
        dict(id=11, tid=2, start_ns=5_110, end_ns=5_290, name="aten::mm", kind="op", depth=1, parent_id=10),
        dict(id=12, tid=2, start_ns=5_400, end_ns=5_500,
             name="autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", kind="op", seq=99),
        dict(id=13, tid=2, start_ns=5_600, end_ns=5_700, name="combine(B)"),
        dict(id=14, tid=2, start_ns=5_610, end_ns=5_690, name="aten::add", kind="op", depth=1, parent_id=13),
    ]
    launch_ops = {41: (1, 40, 4), 42: (1, 220, 6), 43: (1, 410, 7), 44: (1, 6_200, 9), 45: (2, 5_120, 11),
                  46: (2, 5_410, 12), 47: (2, 5_620, 14), 48: (2, 9_000, None)}
    launches = [dict(id=i, tid=t, start_ns=s, end_ns=s + 5, correlation=i, op_id=op)
                for i, (t, s, op) in launch_ops.items()]
    gpu = [dict(id=100 + i, stream=7, start_ns=20_000 + 100 * i, end_ns=20_050 + 100 * i, name=f"k{i}",
                correlation=i, launch_id=i) for i in launch_ops]
    gpu[0]["kind"], gpu[0]["name"] = "memcpy", "Memcpy DtoD (Device -> Device)"
    return make_profile(cpu, launches, gpu)


def attribution(profile, rules=None):
    s = Session(profile)
    breakdown.prepare(s, breakdown.Options())
    layers.prepare(s, rules or Rules())
    return s, {r["id"]: r for r in s.rows("SELECT * FROM activity_attribution")}


def test_activity_attribution_golden():
    _, got = attribution(golden_profile())
    want = {  # id: (layer, phase, stage, region, linked)
        141: (2, "forward", "dispatch", "layer", False),
        142: (2, "forward", "attention", "layer", False),
        143: (None, "forward", "other", "outside", False),       # embedding, inside `forward`
        144: (None, "optimizer", "other", "outside", False),
        145: (2, "backward", "attention", "layer", True),         # MmBackward0 seq 7 -> forward aten::mm
        146: (None, "backward", "other", "unattributed", False),  # AccumulateGrad: no forward op with seq 99
        147: (None, "backward", "combine", "layer_unknown", False),  # combine(B): a stage, no layer number
        148: (None, "other", "other", "unattributed", False),     # launched outside any range, step 1
    }
    for i, (layer, phase, stage, region, linked) in want.items():
        r = got[i]
        row = (r["layer"], r["phase"], r["stage"], r["region"], r["linked"])
        assert row == (layer, phase, stage, region, linked), i
        assert r["step"] == 1


def test_ops_name_no_stage():
    """aten::topk is an op, not an annotation: it must not make its work a `router` stage."""
    p = golden_profile()
    s, got = attribution(p)
    ctx = {r["id"]: r for r in s.rows("SELECT * FROM range_context")}
    assert ctx[6]["stage"] == "attention" and ctx[4]["stage"] == "dispatch"


def test_config_file_extends_rules(tmp_path):
    cfg = tmp_path / "traceview.toml"
    cfg.write_text("[attribution]\nlayer = ['^blk(\\d+)$']\nstage = [['^moe_a2a$', 'dispatch']]\n")
    from traceview.config import load_rules
    rules = load_rules(cfg)
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=1000, name="ProfilerStep#1"),
           dict(id=2, tid=1, start_ns=10, end_ns=900, name="blk7", depth=1, parent_id=1),
           dict(id=3, tid=1, start_ns=20, end_ns=100, name="moe_a2a", depth=2, parent_id=2)]
    p = make_profile(cpu, [dict(id=9, tid=1, start_ns=30, end_ns=35, correlation=9, op_id=3)],
                     [dict(id=10, stream=7, start_ns=200, end_ns=300, name="k", correlation=9, launch_id=9)])
    _, got = attribution(p, rules)
    assert (got[10]["layer"], got[10]["stage"]) == (7, "dispatch")


def test_bad_config_is_one_line_exit_2(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[attribution]\nstage = [['x', 'not_a_stage']]\n")
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(TRACES / "kineto" / "hta_trace_compare_base"),
                        "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown stage" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def h200():
    return run_analyze([str(TRACES / "kineto" / "h200_moe" / "overlap.json.gz")], AnalyzeOptions())


def test_h200_layers_phases_and_stages(h200):
    rows = [r for r in h200["layers"] if r["region"] == "layer"]
    assert {(r["layer"], r["phase"]) for r in rows} == \
        {(layer, p) for layer in range(4) for p in ("forward", "backward")}
    six = {"attention", "router", "dispatch", "experts", "shared_expert", "combine"}
    for step in (1, 2, 3):
        for layer in range(4):
            stages = {r["stage"] for r in rows if r["step"] == step and r["layer"] == layer and r["phase"] == "forward"}
            assert six <= stages, (step, layer, stages)


def test_h200_a2a_copies_are_all_to_all_in_their_layer(h200):
    # moe_step.py: per layer and step, one dispatch and one combine all_to_all_single forward and one of
    # each in backward (A2AStart.backward): 4 per layer x 4 layers x 3 steps = 48 device-to-device copies
    assert [(c["kind"], c["count"]) for c in h200["comm"]] == [("all_to_all", 48)]
    comm = [r for r in h200["layers"] if r["comm_ns"] > 0]
    assert {(r["region"], r["stage"]) for r in comm} == {("layer", "dispatch"), ("layer", "combine")}
    for layer in range(4):
        for phase in ("forward", "backward"):
            for stage in ("dispatch", "combine"):
                assert any(r["layer"] == layer and r["phase"] == phase and r["stage"] == stage and r["comm_ns"] > 0
                           for r in comm), (layer, phase, stage)


def test_h200_backward_linked_and_outside_named(h200):
    a = h200["attribution"]
    assert a["backward_linked_share"] >= 0.90
    outside = {r["phase"] for r in h200["layers"] if r["region"] == "outside"}
    assert {"forward", "backward", "optimizer"} <= outside
    from traceview.reports import text
    out = text.render(h200)
    assert "outside layers" in out and "unattributed" in out


STAGE_OF_DEEPSEEK = {"router": "attention", "shared_expert": "experts"}  # attn(F) holds the gate, mlp(F) both MLPs


@pytest.mark.parametrize("naming", ["traceview", "deepseek"])
def test_paired_fixture_attributes_as_planted_in_both_formats(tmp_path, naming):
    s = scenarios.moe_step(naming=naming, world_size=2)
    paths = s.write(tmp_path)
    want = collections.Counter()
    for x in s.expected["stages"]:
        stage = STAGE_OF_DEEPSEEK.get(x["stage"], x["stage"]) if naming == "deepseek" else x["stage"]
        phase = {"fwd": "forward", "bwd": "backward"}[x["phase"]]
        want[(x["rank"], x["step"], x["layer"], phase, stage)] += x["n_activities"]
    docs = {}
    for fmt in ("kineto", "nsys"):
        doc = docs[fmt] = run_analyze([str(paths[fmt])], AnalyzeOptions())
        got = {(r["rank"], r["step"], r["layer"], r["phase"], r["stage"]): r["activities"]
               for r in doc["layers"] if r["region"] == "layer"}
        assert got == dict(want), fmt
        n_a2a = len(s.expected["collectives"])
        assert [(c["kind"], c["count"]) for c in doc["comm"]] == [("all_to_all", n_a2a)]
    for key in ("layers", "stages", "attribution", "steps", "summary"):
        assert docs["kineto"][key] == docs["nsys"][key], key
