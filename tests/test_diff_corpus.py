"""`traceview diff` on real traces of the corpus (../shared/traces): the explanation items sum to
the step-time change (within 1 %; by construction exactly), in both directions, and the change
itself equals the one computed independently from the Kineto JSON (tests/independent.py).

Golden Markdown: tests/golden/diff_h200_overlap_vs_blocking.md. Regenerate only with
    TRACEVIEW_REGEN_GOLDEN=1 python -m pytest tests/test_diff_corpus.py -k golden
and review the new file by eye (git diff) before committing it.
"""
import os
import statistics
from pathlib import Path

import pytest

from tests import independent
from traceview.diff.decompose import load_side
from traceview.diff.document import DiffOptions, diff_sides

ROOT = Path(__file__).resolve().parents[1]
K = ROOT.parent / "shared" / "traces" / "kineto"
GOLDEN = ROOT / "tests" / "golden" / "diff_h200_overlap_vs_blocking.md"
TRACES = {
    "overlap": K / "h200_moe" / "overlap.json.gz",
    "blocking": K / "h200_moe" / "blocking.json.gz",
    "hta_base": K / "hta_trace_compare_base" / "base.json.gz",
    "hta_test": K / "hta_trace_compare_test" / "test.json.gz",
}
pytestmark = pytest.mark.skipif(not all(p.exists() for p in TRACES.values()), reason="trace corpus not present")


@pytest.fixture(scope="module")
def sides():
    opts = DiffOptions()
    return {name: load_side(name, [str(p)], opts) for name, p in TRACES.items()}


# hta_trace_compare_*: sampled traces, by hand: in `base` ProfilerStep#1009 and #1010 each launch
# one 4 us elementwise kernel (correlations 1954286, 1972583); in `test` only #1009 keeps its
# launch (#1010 has no GPU work, so it is no step). Median step time 4000 ns on both sides.
BY_HAND_MEDIAN = {"hta_base": 4000, "hta_test": 4000}


def independent_median(name) -> float:
    if name in BY_HAND_MEDIAN:
        return BY_HAND_MEDIAN[name]
    steps = independent.breakdown(TRACES[name])
    return statistics.median(v["step_time_ns"] for v in steps.values())


PAIRS = [("hta_base", "hta_test"), ("overlap", "blocking"), ("blocking", "overlap")]


@pytest.mark.parametrize("a,b", PAIRS)
def test_items_sum_to_the_change(sides, a, b):
    doc = diff_sides(sides[a], sides[b], DiffOptions())
    change = doc["delta"]["step_time_ns"]
    assert change == pytest.approx(independent_median(b) - independent_median(a), abs=1)
    total = sum(it["contribution_ns"] for it in doc["explanation"])
    assert abs(total - change) <= 0.01 * abs(change)
    assert total == change                      # exact by construction (remainder line included)
    assert all(it["text"] for it in doc["explanation"])
    if doc["explanation"] and doc["explanation"][-1]["kind"] == "remainder":
        assert doc["explanation"][-1]["contribution_ns"] == change - sum(
            it["contribution_ns"] for it in doc["explanation"][:-1])


def test_directions_are_opposite(sides):
    ab = diff_sides(sides["overlap"], sides["blocking"], DiffOptions())
    ba = diff_sides(sides["blocking"], sides["overlap"], DiffOptions())
    assert ab["delta"]["step_time_ns"] == -ba["delta"]["step_time_ns"]
    for k, v in ab["delta"]["breakdown"].items():
        assert v == -ba["delta"]["breakdown"][k]
    top_ab, top_ba = ab["explanation"][0], ba["explanation"][0]
    assert (top_ab["kind"], top_ab["layers"]) == (top_ba["kind"], top_ba["layers"])
    assert top_ab["contribution_ns"] == -top_ba["contribution_ns"]


def test_identical_traces_are_noise(sides):
    doc = diff_sides(sides["hta_base"], sides["hta_base"], DiffOptions())
    assert doc["delta"]["step_time_ns"] == 0 and doc["verdict"] == "noise"
    assert sum(it["contribution_ns"] for it in doc["explanation"]) == 0


def test_blocking_dispatch_exposes_more_comm(sides):
    """In `blocking` the compute stream waits for the dispatch: its exposed comm per step grows.
    Checked against the independent breakdown's exposed comm of the median step."""
    doc = diff_sides(sides["overlap"], sides["blocking"], DiffOptions())
    ind = {}
    for name in ("overlap", "blocking"):
        steps = independent.breakdown(TRACES[name])
        med = sorted(steps.values(), key=lambda v: v["step_time_ns"])[len(steps) // 2]
        ind[name] = med["exposed_comm_ns"]
    assert doc["delta"]["breakdown"]["exposed_comm_ns"] == pytest.approx(ind["blocking"] - ind["overlap"], abs=2)
    assert doc["base"]["breakdown"]["overlapped_comm_ns"] > 0 and doc["new"]["breakdown"]["overlapped_comm_ns"] == 0


def test_markdown_golden(sides):
    from traceview.reports import diff_markdown
    doc = diff_sides(sides["overlap"], sides["blocking"], DiffOptions())
    text = diff_markdown.render(doc)
    if os.environ.get("TRACEVIEW_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_corpus_document_matches_schema(sides):
    import json
    from importlib import resources

    import jsonschema

    from traceview.diff_cli import render_diff
    schema = json.loads(resources.files("traceview.data").joinpath("diff.schema.json").read_text())
    for a, b in PAIRS:
        doc = json.loads(render_diff(diff_sides(sides[a], sides[b], DiffOptions()), "json"))
        jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
        assert doc["schema"] == "traceview.diff/1" and doc["verdict"] in ("regression", "improvement", "noise")
