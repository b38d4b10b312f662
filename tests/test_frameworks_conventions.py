"""One generated fixture per framework naming convention (fixtures/frameworks.py), in both formats:
every GPU activity gets the (layer, phase, stage, region) its generator planted."""
import pytest
from frameworks_support import attributed, mismatches

from fixtures import frameworks


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("fw")
    return {fw: frameworks.write(fw, out) for fw in frameworks.NAMES}


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
@pytest.mark.parametrize("fw", frameworks.NAMES)
def test_attributed_as_planted(written, fw, fmt):
    paths, truth = written[fw]
    _, got = attributed(paths[fmt])
    assert mismatches(truth, got) == []


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_megatron_nvtx_layers_are_inferred_and_marked(written, fmt):
    paths, truth = written["megatron_nvtx"]
    _, got = attributed(paths[fmt])
    in_layers = [r for r in got.values() if r["region"] == "layer"]
    assert in_layers and all(r["layer_inferred"] for r in in_layers)
    assert {r["layer"] for r in in_layers} == set(range(frameworks.LAYERS))


@pytest.mark.parametrize("fw", ["hf_mixtral", "torchtitan", "megatron_modules", "hf_mixtral_modules"])
def test_named_layers_are_not_marked_inferred(written, fw):
    paths, _ = written[fw]
    _, got = attributed(paths["kineto"])
    assert not any(r["layer_inferred"] for r in got.values())


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
@pytest.mark.parametrize("fw", ["megatron_nvtx", "megatron_modules", "torchtitan"])
def test_expert_parallel_all_to_alls_counted_as_planted(written, fw, fmt):
    from fixtures.scenario_base import NCCL_A2A
    from traceview.runs import AnalyzeOptions, run_analyze
    paths, truth = written[fw]
    planted = sum(1 for (_, _, name) in truth if name == NCCL_A2A)   # fwd dispatch + combine, their backward
    assert planted == 4 * frameworks.LAYERS
    doc = run_analyze([str(paths[fmt])], AnalyzeOptions())
    a2a = [c for c in doc["comm"] if c["kind"] == "all_to_all"]
    assert [(c["ops"], c["count"]) for c in a2a] == [(planted, planted)]
