"""The HTML report of a generated 64-rank job: distributions instead of per-rank rows, the rank x
step heatmap, the straggler histogram and a timeline of chosen ranks, all rendered offline in headless
Chromium (skipped without it, except in CI), and the planted causes named in the page."""
from __future__ import annotations

import json

import pytest
from test_html_chromium import Urls, assert_renders_offline, open_page
from tools import chromium

from fixtures import moe_job
from traceview.cli import run_cli
from traceview.reports import charts, charts_ranks, html as html_report

JOB = moe_job.Job(ranks=64, steps=4, layers=12)


@pytest.fixture(scope="module")
def doc64(tmp_path_factory):
    d = tmp_path_factory.mktemp("job64html")
    moe_job.write(d / "traces", JOB)
    out = d / "report.json"
    assert run_cli(["analyze", str(d / "traces"), "--no-store", "--jobs", "1", "-f", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def test_charts_of_many_ranks(doc64):
    want = moe_job.expected(JOB)
    specs = dict(charts.specs(doc64))
    assert sorted(specs) == ["layer_phase", "rank_heatmap", "straggler_histogram", "timeline"]
    # the heatmap: one cell per rank and step (64 x 4 is under the cap), the straggler's idle is D per all-to-all
    cells = specs["rank_heatmap"]["data"]["values"]
    assert len(cells) == JOB.ranks * JOB.steps
    idle = {c["rank"]: c["idle"] for c in cells if c["step"] == 1}
    assert idle[want["straggler"]] == JOB.layers * 2 * want["skew_ns"] / 1e6
    assert {v for r, v in idle.items() if r != want["straggler"]} == {0}
    # the histogram: the straggler was last at every all-to-all; every skew is D
    bars, hist = (c["data"]["values"] for c in specs["straggler_histogram"]["hconcat"])
    assert bars == [{"rank": f"rank {want['straggler']}", "times": want["times_last"], "of": want["all_to_alls"],
                     "wait": want["wait_caused_ns"] / 1e6}]
    assert sum(b["count"] for b in hist) == want["all_to_alls"]
    assert [b["count"] for b in hist if b["count"]] == [want["all_to_alls"]]
    # the timeline: the median rank, the straggler and the slow ranks, not 64 lanes
    chosen = charts_ranks.timeline_ranks(doc64)
    assert want["straggler"] in chosen and set(want["slow_ranks"]) <= set(chosen)
    assert doc64["summary"]["rank"] in chosen and len(chosen) <= charts_ranks.TIMELINE_RANKS


def test_page_names_the_planted_causes(doc64):
    want = moe_job.expected(JOB)
    page = html_report.render(doc64)
    slow = ", ".join(str(r) for r in want["slow_ranks"])
    assert f"<td>layer {want['slow_layer']}</td>" in page
    assert f"{slow} ({want['slow_experts_compute_ns'] / 1e6:.3f})" in page
    assert f"{want['straggler']} ({want['times_last']}x)" in page
    assert "Step breakdown across 64 ranks" in page and "<td>rank 5</td>" not in page
    assert page.count("<tr>") < 200


def test_many_rank_page_renders_offline_in_chromium(doc64, tmp_path):
    chromium()
    page = html_report.render(doc64)
    u = Urls()
    u.feed(page)
    assert u.urls == [] and "link" not in u.tags
    result = open_page(page, tmp_path, "many")
    p = assert_renders_offline(result, ["rank_heatmap", "layer_phase", "timeline", "straggler_histogram"])
    assert p.charts["rank_heatmap"]["marks"] >= JOB.ranks * JOB.steps      # one rect per cell and panel
