"""Reports of jobs with many ranks: above reports.ranks.PER_RANK_ROWS ranks, per-rank tables are
distributions (nearest-rank min / median / p99 / max, ranks above and below the median named).

The percentile is checked on hand-computed values; on a generated 64-rank MoE job (fixtures/moe_job.py,
written into tmp_path) the text and Markdown name the planted straggler and the slow expert layer's
ranks, and their distribution numbers equal a second computation from the JSON's per-rank rows
(counting: the smallest value with at least p % of the ranks at or below it)."""
from __future__ import annotations

import json
import re

import pytest

from fixtures import moe_job
from traceview.cli import run_cli
from traceview.reports import ranks, render

JOB = moe_job.Job(ranks=64, steps=4, layers=12)


# --- the percentile, by hand ------------------------------------------------------------------------

def test_nearest_rank_by_hand():
    five = [1, 2, 3, 4, 5]
    assert ranks.nearest_rank(five, 50) == 3          # position ceil(2.5) = 3
    assert ranks.nearest_rank(five, 99) == 5          # ceil(4.95) = 5
    assert ranks.nearest_rank(five, 20) == 1          # ceil(1.0) = 1: exactly 20 % at or below
    ten = list(range(1, 11))
    assert ranks.nearest_rank(ten, 50) == 5           # the lower middle value of an even count
    assert ranks.nearest_rank(ten, 99) == 10
    assert ranks.nearest_rank(ten, 90) == 9
    two_hundred = list(range(1, 201))
    assert ranks.nearest_rank(two_hundred, 99) == 198  # ceil(198.0) = 198
    assert ranks.nearest_rank(list(range(1, 1025)), 99) == 1014   # ceil(1013.76)
    with pytest.raises(ValueError):
        ranks.nearest_rank([], 50)


def test_distribution_names_ranks_above_and_below_the_median_by_hand():
    vals = {0: 10.0, 1: 30.0, 2: 10.0, 3: 20.0, 4: 5.0, 5: 10.0, 6: 30.0}
    d = ranks.distribution(vals.items(), worst=2)
    # sorted: 5 10 10 10 20 30 30 -> median at ceil(3.5) = 4: 10; p99 at ceil(6.93) = 7: 30
    assert (d.n, d.min, d.median, d.p99, d.max) == (7, 5.0, 10.0, 30.0, 30.0)
    assert d.above == ((1, 30.0), (6, 30.0)) and d.n_above == 3        # 30, 30, then 20 (left out)
    assert d.below == ((4, 5.0),) and d.n_below == 1
    assert ranks.distribution([]) is None


def test_collective_groups_by_hand():
    doc = {"collectives": [
        {"kind": "all_to_all", "group": "ep", "skew_ns": 100, "straggler": 3, "wait_ns": {"0": 100, "3": 0}},
        {"kind": "all_to_all", "group": "ep", "skew_ns": 300, "straggler": 3, "wait_ns": {"0": 300, "3": 0}},
        {"kind": "all_to_all", "group": "ep", "skew_ns": 200, "straggler": 1, "wait_ns": {"0": 200, "1": 0}},
        {"kind": "all_reduce", "group": "dp", "skew_ns": 50, "straggler": 0, "wait_ns": {"0": 0, "1": 50}},
    ]}
    groups, total = ranks.collective_groups(doc)
    assert total == 2
    a2a, ar = groups
    assert (a2a["kind"], a2a["group"], a2a["count"], a2a["total_skew_ns"], a2a["mean_skew_ns"]) == \
        ("all_to_all", "ep", 3, 600, 200)
    assert (a2a["p99_skew_ns"], a2a["max_skew_ns"], a2a["wait_ns"]) == (300, 300, 600)
    assert a2a["last"] == [(3, 2), (1, 1)]
    assert (ar["count"], ar["total_skew_ns"], ar["wait_ns"], ar["last"]) == (1, 50, 50, [(0, 1)])


def test_heatmap_buckets_ranks_and_keeps_the_max():
    steps = [{"rank": r, "step": s, "step_time_ns": 10 + (100 if r == 5 else 0), "exposed_comm_ns": r,
              "idle_ns": 0} for r in range(8) for s in range(2)]
    cells, b = ranks.heatmap_cells({"steps": steps}, max_cells=4)      # 16 windows -> buckets of 4 ranks
    assert b == 4 and len(cells) == 4
    c = next(c for c in cells if c["first_rank"] == 4 and c["step"] == 0)
    assert (c["last_rank"], c["step_time"], c["step_time_rank"], c["exposed"], c["exposed_rank"]) == (7, 110, 5, 7, 7)


# --- a generated 64-rank job ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def job64(tmp_path_factory):
    d = tmp_path_factory.mktemp("job64")
    moe_job.write(d / "traces", JOB)
    out = d / "report.json"
    assert run_cli(["analyze", str(d / "traces"), "--no-store", "--jobs", "1", "-f", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    return {"doc": doc, "want": moe_job.expected(JOB), "dir": d,
            "text": render(doc, "text"), "markdown": render(doc, "markdown")}


def counted_percentile(values, p):
    """Second method: the smallest value with at least p % of the values at or below it."""
    n = len(values)
    for v in sorted(set(values)):
        if 100 * sum(1 for x in values if x <= v) >= p * n:
            return v
    raise AssertionError("unreachable")


def expected_row(rows, key):
    vals = [r[key] for r in rows]
    return [min(vals), counted_percentile(vals, 50), counted_percentile(vals, 99), max(vals)]


def ms(ns):
    return f"{ns / 1e6:,.3f}"


def section(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(title))
    out = []
    for ln in lines[i + 1:]:
        if not ln.strip():
            break
        out.append(ln)
    return out


def text_row(lines, first: str) -> list[str]:
    row = next(ln for ln in lines if ln.startswith(first + " "))
    return re.split(r"\s{2,}", row.strip())


def md_row(text, title, first):
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("### " + title))
    for ln in lines[i + 1:]:
        if ln.startswith("### "):
            break
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} under {title!r}")


BREAKDOWN = (("step time", "step_time_ns"), ("compute", "compute_ns"), ("exposed comm", "exposed_comm_ns"),
             ("idle", "idle_ns"), ("total comm", "comm_ns"))


@pytest.mark.parametrize("label,key", BREAKDOWN)
def test_breakdown_distribution_equals_a_second_computation(job64, label, key):
    per_rank = job64["doc"]["per_rank"]
    want = [ms(v) for v in expected_row(per_rank, key)]
    t = text_row(section(job64["text"], "Step breakdown across 64 ranks"), label)
    assert t[1:5] == want
    m = md_row(job64["markdown"], "Step breakdown across 64 ranks", label)
    assert m[1:5] == want
    # the ranks named above the median: every rank whose value is greater, largest first (5 at most)
    med = counted_percentile([r[key] for r in per_rank], 50)
    above = sorted((r for r in per_rank if r[key] > med), key=lambda r: (-r[key], r["rank"]))[:5]
    named = [int(x) for x in re.findall(r"(\d+)(?:,|\s\()", m[5])] if m[5] != "-" else []
    assert named == [r["rank"] for r in above]


def test_text_and_markdown_name_the_straggler(job64):
    want = job64["want"]
    s = want["straggler"]
    # idle: the straggler's GPU sits idle D before each of its 2 x layers all-to-alls a step
    idle = JOB.layers * 2 * want["skew_ns"]
    assert text_row(section(job64["text"], "Step breakdown across 64 ranks"), "idle")[4:] == \
        [ms(idle), f"high {s} ({ms(idle)})"]
    assert md_row(job64["markdown"], "Step breakdown across 64 ranks", "idle")[4:6] == [ms(idle), f"{s} ({ms(idle)})"]
    # collectives per kind and group: every all-to-all has skew D and the straggler is last at all of them
    n = want["all_to_alls"]
    row = [ms(want["total_skew_ns"]), ms(want["skew_ns"]), ms(want["skew_ns"]), ms(want["skew_ns"]),
           ms(want["wait_caused_ns"]), f"{s} ({n}x)"]
    assert text_row(section(job64["text"], "Collectives per kind and process group"), "all_to_all")[3:] == row
    assert md_row(job64["markdown"], "Collectives per kind and process group", "all_to_all")[3:] == row
    strag = [str(s), str(want["times_last"]), str(n), ms(want["wait_caused_ns"]), ms(want["skew_ns"])]
    assert text_row(section(job64["text"], "Stragglers: ranks last"), "  " + str(s)) == strag
    assert md_row(job64["markdown"], "Stragglers: ranks last", str(s)) == strag


def test_text_and_markdown_name_the_slow_layer(job64):
    want = job64["want"]
    slow = ", ".join(str(r) for r in want["slow_ranks"])
    cells = ["forward", "experts", ms(want["experts_compute_ns"]), ms(want["experts_compute_ns"]),
             ms(want["slow_experts_compute_ns"]), ms(want["slow_experts_compute_ns"]),
             f"{slow} ({ms(want['slow_experts_compute_ns'])})"]
    title = "Compute imbalance across ranks"
    lines = section(job64["text"], title)
    rows = [ln for ln in lines if re.match(r"layer \d", ln)]
    assert len(rows) == 1            # the only group where a rank computes more than the median
    assert re.split(r"\s{2,}", rows[0].strip()) == [f"layer {want['slow_layer']}"] + cells
    assert md_row(job64["markdown"], title, f"layer {want['slow_layer']}")[1:] == cells


def test_layer_imbalance_equals_a_second_computation(job64):
    doc = job64["doc"]
    want = job64["want"]
    per = {}
    for r in doc["layers"]:
        if r["layer"] == want["slow_layer"] and r["stage"] == "experts":
            per[r["rank"]] = per.get(r["rank"], 0) + r["compute_ns"]
    vals = [v / JOB.steps for _, v in sorted(per.items())]
    got = md_row(job64["markdown"], "Compute imbalance across ranks", f"layer {want['slow_layer']}")
    assert got[3:7] == [ms(min(vals)), ms(counted_percentile(vals, 50)), ms(counted_percentile(vals, 99)),
                        ms(max(vals))]


def test_per_rank_rows_threshold(job64):
    """With the limit raised to the job's ranks every rank gets its row again."""
    doc = job64["doc"]
    with ranks.per_rank_rows(64):
        full = render(doc, "text")
    assert "Step breakdown per rank" in full and "Step breakdown across" not in full
    assert len([ln for ln in section(full, "Step breakdown per rank") if re.match(r"^\d+\s", ln)]) == 64


def test_names_are_escaped(job64):
    doc = dict(job64["doc"])
    bad = "a|b<img src=x>\x1b[31m"
    doc["collectives"] = [{**c, "kind": bad, "group": bad} for c in doc["collectives"]]
    md = render(doc, "markdown")
    rows = [ln for ln in md.splitlines() if ln.startswith("| a\\|b")]
    assert len(rows) == 1 + 10            # the kind-and-group row and the 10 worst instances
    mine, theirs = (re.split(r"(?<!\\)\|", r)[1].strip() for r in rows[:2])
    assert mine == theirs and mine.startswith("a\\|b&lt;img src=x&gt;") and "<img" not in md
    assert "\x1b" not in md
    text = render(doc, "text")
    assert "\x1b" not in text and "a|b<img src=x>\\x1b[31m"[:20] in text
    html = render(doc, "html")
    assert "<img src=x>" not in html and "a|b&lt;img src=x&gt;" in html


# --- size: flat in the number of ranks --------------------------------------------------------------

def widened(doc: dict, k: int) -> dict:
    """The document of a job k times as wide: every rank's rows repeated as ranks r + 64 i (the
    per-rank detail grows k-fold, the report must not)."""
    n = len(doc["per_rank"])

    def rep(rows, also=()):
        out = []
        for i in range(k):
            for r in rows:
                x = {**r, "rank": r["rank"] + n * i}
                out.append(x)
        return out

    def keyed(m):
        return {str(int(r) + n * i): v for i in range(k) for r, v in m.items()}
    wide = dict(doc)
    for key in ("per_rank", "steps", "layers", "critical_path", "stalls", "a2a", "inputs"):
        wide[key] = rep(doc.get(key) or [])
    wide["stragglers"] = rep(doc["stragglers"])
    wide["collectives"] = [{**c, "start_ns": keyed(c["start_ns"]), "dur_ns": keyed(c["dur_ns"]),
                            "wait_ns": keyed(c["wait_ns"]), "ranks": c["ranks"] * k} for c in doc["collectives"]]
    wide["clock"] = {**doc["clock"], "ranks": keyed(doc["clock"]["ranks"])}
    wide["summary"] = {**doc["summary"], "ranks": n * k}
    return wide


def test_report_size_is_flat_in_ranks(job64):
    doc = job64["doc"]
    wide = widened(doc, 16)          # 1,024 ranks
    assert len(wide["per_rank"]) == 1024
    for fmt in ("text", "markdown"):
        small, big = len(job64[fmt]), len(render(wide, fmt))
        assert big < 1.1 * small + 2000, (fmt, small, big)
    small, big = len(render(doc, "html")), len(render(wide, "html"))
    # the page is mostly the inlined Vega bundle (0.9 MB); what grows is the heatmap up to its cap
    # of ranks.HEATMAP_MAX_CELLS cells and the timeline up to charts_ranks.TIMELINE_RANKS ranks
    assert big - small < 250_000, ("html", small, big)
    # and the per-rank layout would not have been flat: control
    with ranks.per_rank_rows(10_000):
        assert len(render(wide, "text")) > 2 * len(job64["text"])


# --- escaping stays exact, and a clean document is not copied ----------------------------------------

def test_control_check_agrees_with_the_walk():
    from traceview.reports import escape
    for c in range(0x3000):
        ch = chr(c)
        want = bool(escape._CONTROL.search(ch))
        assert escape._has_controls({"k": ["x" + ch + "\\"]}) == want, hex(c)
        assert escape._has_controls({ch + "\\": 1}) == want, hex(c)
    assert not escape._has_controls(["\\b", "a\\\\r", "\\u0001", "C:\\run\\file"])   # backslashes, no control
    assert escape._has_controls(["\\\x08"])
    doc = {"a": [{"name": "ok", "n": 1}], "b": {"0": 1.5}}
    assert escape.neutralize(doc) is doc
    hostile = {"a": [{"name": "x\x1b[31m", "n": 1}], "b": {"0": 1.5}}
    out = escape.neutralize(hostile)
    assert out["a"][0]["name"] == "x\\x1b[31m" and hostile["a"][0]["name"] == "x\x1b[31m"
    assert out["b"] is hostile["b"]


# --- the option -------------------------------------------------------------------------------------

def test_per_rank_rows_option(tmp_path, capsys):
    job = moe_job.Job(ranks=4, steps=2, layers=2)
    moe_job.write(tmp_path / "t", job)
    out = tmp_path / "r.txt"
    base = ["analyze", str(tmp_path / "t"), "--no-store", "--jobs", "1", "-f", "text", "-o", str(out)]
    assert run_cli(base) == 0
    assert "Step breakdown per rank" in out.read_text()               # 4 ranks: under the default
    assert run_cli(base + ["--per-rank-rows", "3"]) == 0
    text = out.read_text()
    assert "Step breakdown across 4 ranks" in text and "Step breakdown per rank" not in text
    capsys.readouterr()
    assert run_cli(base[:-2] + ["-o", str(tmp_path / "x.txt"), "--per-rank-rows", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--per-rank-rows" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "x.txt").exists()
