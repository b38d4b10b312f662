"""Markdown report: golden files on corpus traces, escaping of hostile names, sections, budget.

Golden files live in tests/golden/. After a deliberate change to the report, regenerate them with

    TRACEVIEW_REGOLD=1 python -m pytest -q tests/test_reports_markdown.py

and review the diff by eye (`git diff tests/golden/`) before committing.
"""
from __future__ import annotations

import os
import re
import shutil

import pytest
from helpers import ROOT
from reports_support import GEN, HOSTILE_ANNOTATION, HOSTILE_KERNEL, analyze, corpus, with_issue6

from traceview.reports import markdown
from traceview.reports.escape import md

GOLDEN = ROOT / "tests" / "golden"
REGOLD = os.environ.get("TRACEVIEW_REGOLD") == "1"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGOLD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"golden file {path} missing: run with TRACEVIEW_REGOLD=1 and review it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} differs from the golden file (TRACEVIEW_REGOLD=1 to regenerate, then review)"


def table_rows(text: str) -> list[list[str]]:
    """Each GFM table row split into cells on unescaped `|` (the way GitHub splits them)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line)
            rows.append(cells[1:-1])
    return rows


def table_blocks(text: str) -> list[list[str]]:
    blocks, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    return blocks


def assert_tables_intact(text: str) -> None:
    for block in table_blocks(text):
        widths = {len(table_rows(line)[0]) for line in block}
        assert len(widths) == 1, f"table rows with different cell counts: {block}"
        assert re.fullmatch(r"\|(:?-+:?\|)+", block[1]), block[1]


@pytest.mark.parametrize("name,parts", [
    ("h200_moe_overlap", ("kineto", "h200_moe", "overlap.json.gz")),
    ("dlrm_8rank_v100", ("kineto", "dlrm_8rank_v100")),
])
def test_markdown_golden_corpus(name, parts):
    text = markdown.render(analyze(corpus(*parts)))
    assert_tables_intact(text)
    check_golden(f"analyze_{name}.md", text)


def real_diff() -> dict:
    """traceview diff (issue 7) of the H200 corpus pair: blocking (base) vs overlap (new)."""
    from traceview import runs as document
    return document.run_diff([str(corpus("kineto", "h200_moe", "blocking.json.gz"))],
                             [str(corpus("kineto", "h200_moe", "overlap.json.gz"))])


def test_markdown_of_diff_goes_through_diff_markdown():
    """`render(doc, "markdown")` of a diff document is the diff engineer's renderer (its golden files:
    tests/golden/diff_*.md, checked by tests/test_diff_corpus.py); its explanation list is there."""
    doc = real_diff()
    from traceview.reports import diff_markdown
    text = markdown.render(doc)
    assert text == diff_markdown.render(doc)
    assert_tables_intact(text)
    assert sum(it["contribution_ns"] for it in doc["explanation"]) == doc["delta"]["step_time_ns"]
    for it in doc["explanation"]:
        assert f"\n{it['rank']}. " in text


def test_headline_numbers_h200():
    """The headline's numbers, from the document's own fields by independent arithmetic."""
    doc = analyze(corpus("kineto", "h200_moe", "overlap.json.gz"))
    text = markdown.render(doc)
    s, f = doc["summary"], doc["flops"]
    head = text.splitlines()[2]
    assert f"**step time** {s['step_time_ns'] / 1e6:,.3f} ms" in head
    # delivered TFLOP/s = FLOPs per step / step time; MFU = that / peak
    tflops = f["flops_per_step"] / (s["step_time_ns"] * 1e-9) / 1e12
    assert f"{tflops:,.1f} TFLOP/s per GPU, MFU {100 * tflops / f['peak_tflops']:.1f}%" in head
    assert f"**exposed communication** {100 * s['exposed_comm_ns'] / s['step_time_ns']:.1f}% of the step" in head
    # the H200 trace's step time (docs/FLOPS.md: ~300.9 ms median of 3 profiled steps)
    assert 250 < s["step_time_ns"] / 1e6 < 350


def test_hostile_names_markdown(tmp_path):
    """A kernel `<img src=x onerror=alert(1)>`, an annotation with `|` and a newline, and a file name
    with both: tables keep their shape, no raw HTML tag reaches the Markdown."""
    hostile_file = tmp_path / f"a|b{HOSTILE_KERNEL}\nx.json"
    shutil.copy(GEN / "hostile_names.json", hostile_file)
    doc = analyze(hostile_file)
    assert HOSTILE_KERNEL in [k["name"] for k in doc["top_kernels"]]
    doc = with_issue6(doc, stall_evidence=f"{HOSTILE_KERNEL} in {HOSTILE_ANNOTATION}", stall_stage=HOSTILE_ANNOTATION)
    doc["warnings"].append(f"odd name {HOSTILE_KERNEL}\n| not a row |")
    text = markdown.render(doc)
    assert "<img" not in text and "onerror=alert(1)>" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert_tables_intact(text)
    # the annotation stays in its own cell: `|` escaped, newline gone
    stall_rows = [r for r in table_rows(text) if "exposed_a2a" in "|".join(r)]
    assert len(stall_rows) == 1
    assert "stage\\|one second line" in stall_rows[0][5]
    kernel_rows = [r for r in table_rows(text) if "&lt;img" in r[0]]
    assert len(kernel_rows) == 1 and kernel_rows[0][1].strip() == "compute"
    # no line of the document starts a new table row or block from inside a name
    for line in text.splitlines():
        assert not line.startswith("second line") and not line.startswith("x.json")
    assert "| not a row |" not in text


def test_md_escape_units():
    assert md("a|b") == "a\\|b"
    assert md("line one\nline two\r\n\tthree") == "line one line two three"
    assert md("<b>&</b>") == "&lt;b&gt;&amp;&lt;/b&gt;"
    assert md("[click](javascript:x)") == "\\[click\\](javascript:x)"
    assert md("nvjet_sm90_tst") == "nvjet_sm90_tst"           # intraword _ left readable
    assert md("_private_") == "\\_private\\_"
    assert md("*bold* `code`") == "\\*bold\\* \\`code\\`"
    assert md("# heading") == "\\# heading"
    assert md("x" * 50, 10) == "x" * 9 + "…"


def test_issue6_sections_and_budget(tmp_path):
    doc = with_issue6(analyze(corpus("kineto", "dlrm_8rank_v100")))
    from traceview import budget
    (tmp_path / "b.toml").write_text("max_idle_pct = 0.5\nmax_step_time_ms = 100000\n")
    budget.apply(doc, tmp_path / "b.toml")
    text = markdown.render(doc)
    assert_tables_intact(text)
    s = doc["summary"]
    idle = 100 * s["idle_ns"] / s["step_time_ns"]
    assert idle > 0.5
    assert "**Budget b.toml: 1 of 2 threshold(s) violated**" in text
    assert f"overall: idle {idle:.1f}% above the budget maximum 0.5%" in text
    # top stalls, longest first: 0.250 ms then 0.120 ms
    stalls = [r for r in table_rows(text) if len(r) == 9 and r[0].strip() in ("1", "2")]
    assert [r[7].strip() for r in stalls] == ["0.250", "0.120"]
    assert "### Top stalls (2 of 2, 0.370 ms in all)" in text
    ranks = sorted({st["rank"] for st in doc["steps"]})
    assert "### Collectives with the most skew (1 of 1)" in text
    coll = [r for r in table_rows(text) if len(r) == 6 and r[0].strip() == "all_to_all"]
    assert coll and coll[0][4].strip() == str(ranks[-1]) and coll[0][5].strip() == f"{(len(ranks) - 1) / 1000:.3f}"
    # the straggler (highest rank) first: 1 us late per earlier rank -> wait caused = sum of 1..7 us = 28 us
    strag = [r for r in table_rows(text) if len(r) == 6 and r[0].strip().isdigit()]
    assert strag[0][0].strip() == str(ranks[-1]) and strag[0][5].strip() == f"{sum(range(len(ranks))) / 1000:.3f}"
    # critical path: mean over windows of idle / exposed comm / compute+memory, as % of the summed windows
    steps = doc["steps"]
    total = sum(s["step_time_ns"] for s in steps)
    cp = {r[0].strip(): (r[1].strip(), r[2].strip()) for r in table_rows(text) if len(r) == 3}
    idle = sum(s["idle_ns"] for s in steps)
    assert cp["idle"] == (f"{idle / len(steps) / 1e6:,.3f}", f"{100 * idle / total:.1f}%")
    a2a = sum(s["exposed_comm_ns"] for s in steps)
    assert cp["all-to-all"] == (f"{a2a / len(steps) / 1e6:,.3f}", f"{100 * a2a / total:.1f}%")


def test_chart_links_only_when_given():
    doc = analyze(GEN / "tiny_breakdown.json")
    assert "![" not in markdown.render(doc)
    text = markdown.render(doc, images=["charts/step_breakdown.svg", "charts/step_breakdown.png"])
    assert "![Step breakdown per step and rank](charts/step_breakdown.png)" in text


def test_diff_markdown_charts_appended():
    doc = real_diff()
    text = markdown.render(doc, images=["charts/waterfall.svg", "charts/waterfall.png"])
    assert text.rstrip().endswith("![Waterfall of the explanation](charts/waterfall.png)")
    assert text.startswith(markdown.render(doc).rstrip())
