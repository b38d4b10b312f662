"""traceview.markers: names that the default attribution reads, emitted to NVTX and record_function."""
import sys
import types

import pytest
from helpers import make_profile

from traceview import markers
from traceview.analysis import breakdown, layers
from traceview.config import Rules
from traceview.engine.session import Session


def test_names():
    assert markers.layer_name(3, "dispatch") == "layer_03/moe/dispatch"
    assert markers.layer_name(12, "attention") == "layer_12/attention"
    assert markers.layer_name(0) == "layer_00"
    with pytest.raises(ValueError):
        markers.layer_name(1, "mlp")
    with pytest.raises(ValueError):
        markers.phase("warmup")


def test_marker_names_are_attributed_by_default_rules():
    stages = list(markers.STAGES)
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=10_000, name="step_7"),
           dict(id=2, tid=1, start_ns=1, end_ns=9_000, name="forward", depth=1, parent_id=1)]
    launches, gpu = [], []
    for i, stage in enumerate(stages):
        rid = 10 + i
        cpu.append(dict(id=rid, tid=1, start_ns=100 * i + 10, end_ns=100 * i + 90,
                        name=markers.layer_name(5, stage), depth=2, parent_id=2))
        launches.append(dict(id=100 + i, tid=1, start_ns=100 * i + 20, end_ns=100 * i + 25, correlation=i, op_id=rid))
        gpu.append(dict(id=200 + i, stream=7, start_ns=1000 + 10 * i, end_ns=1005 + 10 * i, name=f"k{i}",
                        correlation=i, launch_id=100 + i))
    s = Session(make_profile(cpu, launches, gpu))
    info = breakdown.prepare(s, breakdown.Options())
    assert info["step_regex"] is not None and s.rows("SELECT step FROM windows") == [{"step": 7}]
    layers.prepare(s, Rules())
    got = {r["id"]: (r["layer"], r["phase"], r["stage"]) for r in s.rows("SELECT * FROM activity_attribution")}
    assert got == {200 + i: (5, "forward", stage) for i, stage in enumerate(stages)}


def test_ranges_go_to_nvtx_and_record_function(monkeypatch):
    events = []
    monkeypatch.setattr(markers.nvtx, "push_range", lambda name: events.append(("push", name)))
    monkeypatch.setattr(markers.nvtx, "pop_range", lambda: events.append(("pop",)))

    class RecordFunction:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            events.append(("rf enter", self.name))

        def __exit__(self, *exc):
            events.append(("rf exit", self.name))

    fake = types.ModuleType("torch")
    fake.profiler = types.SimpleNamespace(record_function=RecordFunction)
    monkeypatch.setitem(sys.modules, "torch", fake)
    with markers.step(2):
        with markers.layer(1, "combine"):
            pass
    assert events == [("push", "step_2"), ("rf enter", "step_2"), ("push", "layer_01/moe/combine"),
                      ("rf enter", "layer_01/moe/combine"), ("rf exit", "layer_01/moe/combine"), ("pop",),
                      ("rf exit", "step_2"), ("pop",)]


def test_pop_even_when_the_body_raises(monkeypatch):
    events = []
    monkeypatch.setattr(markers.nvtx, "push_range", lambda name: events.append("push"))
    monkeypatch.setattr(markers.nvtx, "pop_range", lambda: events.append("pop"))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    with pytest.raises(RuntimeError):
        with markers.layer(0, "router"):
            raise RuntimeError("boom")
    assert events == ["push", "pop"]


def test_under_the_real_pytorch_profiler(tmp_path):
    torch = pytest.importorskip("torch")
    import json
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with markers.step(1):
            with markers.layer(0, "experts"):
                torch.ones(4) @ torch.ones(4)
    out = tmp_path / "t.json"
    prof.export_chrome_trace(str(out))
    names = {e["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "user_annotation"}
    assert {"step_1", "layer_00/moe/experts"} <= names
