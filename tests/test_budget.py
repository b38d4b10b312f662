"""Budgets: TOML thresholds against the report; violations in every format; exit codes 0/1/2."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT
from reports_support import GEN, validate

from traceview import budget
from traceview.errors import UsageError


def hand_doc() -> dict:
    """Two ranks, one step each, numbers chosen by hand.

    rank 0: step 100 ms = compute 70 + exposed comm 12 + exposed memory 3 + idle 15
    rank 1: step 120 ms = compute 70 + exposed comm 30 + exposed memory 0 + idle 20
    summary (median of the two): step 110 ms, exposed comm 21 ms, idle 17.5 ms
    FLOPs 55e12 per step per GPU, peak 1000 TFLOP/s -> MFU 0.5 overall (55e12 / 0.110 s / 1e15);
    rank 0: 0.55, rank 1: 0.4583...
    Layer rows (exposed comm, ns): layer 0 dispatch r0 2e6, combine r0 1e6, dispatch r1 4e6;
    layer 1 dispatch r0 0.5e6, attention r1 9e6 (not dispatch/combine: ignored).
    -> all ranks: layer 0 (2+1+4)/2 windows = 3.5 ms, layer 1 0.25 ms -> 3.5 ms
    -> rank 0: layer 0 3 ms; rank 1: layer 0 4 ms.
    """
    def bd(step, comp, comm, mem, idle, **kw):
        return {"step_time_ns": step, "compute_ns": comp, "exposed_comm_ns": comm, "exposed_memory_ns": mem,
                "idle_ns": idle, "overlapped_comm_ns": 0, "comm_ns": comm, **kw}
    r0 = bd(100_000_000, 70_000_000, 12_000_000, 3_000_000, 15_000_000)
    r1 = bd(120_000_000, 70_000_000, 30_000_000, 0, 20_000_000)

    def layer(rank, layer_, stage, exposed):
        return {**bd(exposed, 0, exposed, 0, 0), "rank": rank, "step": 1, "region": "layer", "layer": layer_,
                "phase": "forward", "stage": stage, "activities": 1}
    return {
        "schema": "traceview.report/1", "tool": {"name": "traceview", "version": "0"},
        "inputs": [{"rank": 0, "file": "r0.json", "format": "kineto"},
                   {"rank": 1, "file": "r1.json", "format": "kineto"}],
        "world_size": 2, "steps_source": "hand",
        "summary": bd(110_000_000, 70_000_000, 21_000_000, 1_500_000, 17_500_000, ranks=2, steps=1, overlap_ratio=0.0),
        "per_rank": [{**r0, "rank": 0, "steps": 1, "overlap_ratio": 0.0},
                     {**r1, "rank": 1, "steps": 1, "overlap_ratio": 0.0}],
        "steps": [{**r0, "rank": 0, "step": 1, "start_ns": 0}, {**r1, "rank": 1, "step": 1, "start_ns": 0}],
        "top_kernels": [],
        "layers": [layer(0, 0, "dispatch", 2_000_000), layer(0, 0, "combine", 1_000_000),
                   layer(1, 0, "dispatch", 4_000_000), layer(0, 1, "dispatch", 500_000),
                   layer(1, 1, "attention", 9_000_000)],
        "flops": {"flops_per_step": 55e12, "peak_tflops": 1000.0, "mfu": 0.5, "delivered_tflops_per_gpu": 500.0},
        "warnings": [],
    }


def write(tmp_path, text, name="budget.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def by_key(b):
    return {(c["metric"], c["rank"]): c for c in b["checked"]}


def test_overall_thresholds(tmp_path):
    doc = hand_doc()
    b = budget.apply(doc, write(tmp_path, "min_mfu = 0.6\nmax_exposed_comm_pct = 20\nmax_idle_pct = 15\n"
                                          "max_step_time_ms = 110\nmax_a2a_exposed_ms_per_layer = 3\n"))
    validate(doc)
    c = by_key(b)
    assert c[("min_mfu", None)]["value"] == pytest.approx(0.5) and not c[("min_mfu", None)]["ok"]
    assert c[("max_exposed_comm_pct", None)]["value"] == pytest.approx(100 * 21 / 110)     # 19.09 <= 20
    assert c[("max_exposed_comm_pct", None)]["ok"]
    assert c[("max_idle_pct", None)]["value"] == pytest.approx(100 * 17.5 / 110)           # 15.9 > 15
    assert not c[("max_idle_pct", None)]["ok"]
    assert c[("max_step_time_ms", None)]["value"] == pytest.approx(110) and c[("max_step_time_ms", None)]["ok"]
    assert c[("max_a2a_exposed_ms_per_layer", None)]["value"] == pytest.approx(3.5)
    assert not c[("max_a2a_exposed_ms_per_layer", None)]["ok"]
    assert [v["metric"] for v in b["violations"]] == ["min_mfu", "max_idle_pct", "max_a2a_exposed_ms_per_layer"]
    assert b["file"] == "budget.toml"
    assert b["violations"][0]["message"] == "overall: MFU 50.0% below the budget minimum 60.0%"


def test_per_rank_and_rank_override(tmp_path):
    doc = hand_doc()
    b = budget.apply(doc, write(tmp_path, "[per_rank]\nmax_step_time_ms = 110\nmin_mfu = 0.5\n"
                                          "max_a2a_exposed_ms_per_layer = 3.5\n"
                                          "[rank.1]\nmax_step_time_ms = 125\n"))
    c = by_key(b)
    assert c[("max_step_time_ms", 0)]["ok"] and c[("max_step_time_ms", 0)]["limit"] == 110
    assert c[("max_step_time_ms", 1)]["ok"] and c[("max_step_time_ms", 1)]["limit"] == 125    # override
    assert c[("min_mfu", 0)]["value"] == pytest.approx(55e12 / 0.100 / 1e15) and c[("min_mfu", 0)]["ok"]
    assert c[("min_mfu", 1)]["value"] == pytest.approx(55e12 / 0.120 / 1e15) and not c[("min_mfu", 1)]["ok"]
    assert c[("max_a2a_exposed_ms_per_layer", 0)]["value"] == pytest.approx(3.0)
    assert c[("max_a2a_exposed_ms_per_layer", 1)]["value"] == pytest.approx(4.0)
    assert sorted((v["metric"], v["rank"]) for v in b["violations"]) == [
        ("max_a2a_exposed_ms_per_layer", 1), ("min_mfu", 1)]
    assert [v["scope"] for v in b["violations"]] == ["rank", "rank"]


def test_missing_rank_and_unknown_mfu_are_violations(tmp_path):
    doc = hand_doc()
    doc["flops"] = {"flops_per_step": None, "peak_tflops": None, "mfu": None}
    b = budget.apply(doc, write(tmp_path, "min_mfu = 0.1\n[rank.7]\nmax_idle_pct = 50\n"))
    msgs = [v["message"] for v in b["violations"]]
    assert msgs == ["overall: MFU unknown (cannot be computed); budget minimum 10.0%",
                    "rank 7: idle unknown (rank not in the trace); budget maximum 50.0%"]


@pytest.mark.parametrize("text,problem", [
    ("min_mfu = [", "not valid TOML"),
    ("max_idle = 3\n", "unknown budget key 'max_idle'"),
    ("max_idle_pct = 'ten'\n", "must be a number"),
    ("max_idle_pct = true\n", "must be a number"),
    ("max_idle_pct = -1\n", "must not be negative"),
    ("[rank.x]\nmax_idle_pct = 1\n", "rank must be a non-negative integer"),
    ("per_rank = 3\n", "[per_rank] must be a table"),
    ("[per_rank]\nmin_mfu_pct = 3\n", "unknown budget key per_rank.'min_mfu_pct'"),
    ("# nothing\n", "sets no thresholds"),
])
def test_bad_budget_files(tmp_path, text, problem):
    p = write(tmp_path, text)
    with pytest.raises(UsageError) as e:
        budget.load(p)
    assert problem in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)


def test_missing_budget_file(tmp_path):
    with pytest.raises(UsageError, match="budget file not found"):
        budget.load(tmp_path / "nope.toml")


def test_violations_in_every_format(tmp_path):
    from traceview.reports import html, json_report, markdown, text
    doc = hand_doc()
    budget.apply(doc, write(tmp_path, "max_idle_pct = 15\n"))
    msg = "overall: idle 15.9% above the budget maximum 15.0%"
    assert msg in markdown.render(doc)
    assert msg in html.render(doc)
    assert json.loads(json_report.render(doc))["budget"]["violations"][0]["message"] == msg
    assert "  VIOLATED " + msg in text.budget_lines(doc)


# --- through the command line ----------------------------------------------------------------------

def tv(*args):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_cli_exit_codes(tmp_path):
    """tiny_breakdown: idle % from the generator's own expected numbers decides pass (0) or fail (1)."""
    exp = json.loads((GEN / "tiny_breakdown.expected.json").read_text())
    idle = sorted(100 * s["idle_ns"] / s["window_ns"] for s in exp["steps"])
    median = idle[len(idle) // 2] if len(idle) % 2 else (idle[len(idle) // 2 - 1] + idle[len(idle) // 2]) / 2
    trace = GEN / "tiny_breakdown.json"
    ok = tv("analyze", trace, "-f", "json", "--budget",
            write(tmp_path, f"max_idle_pct = {median + 5:.3f}\n", "ok.toml"))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["budget"]["violations"] == []
    bad = tv("analyze", trace, "-f", "markdown", "--budget",
             write(tmp_path, f"max_idle_pct = {max(0.0, median - 5):.3f}\n", "bad.toml"))
    assert bad.returncode == 1, bad.stderr
    assert "threshold(s) violated" in bad.stdout and "overall: idle" in bad.stdout
    broken = tv("analyze", trace, "--budget", write(tmp_path, "max_idle = 1\n", "broken.toml"))
    assert broken.returncode == 2 and broken.stdout == ""
    assert broken.stderr.count("\n") == 1 and "unknown budget key 'max_idle'" in broken.stderr
