"""The summary is one real step (the median rank's median step) on every corpus trace: its parts add
up to its step time exactly, and `diff` of a file with itself shows the same breakdown as `analyze`."""
import re
import statistics

import pytest
from helpers import TRACES

from traceview.analysis import breakdown
from traceview.errors import TraceError

PARTS = ("compute_ns", "exposed_comm_ns", "exposed_memory_ns", "idle_ns")
FIELDS = PARTS + ("overlapped_comm_ns", "comm_ns", "step_time_ns")
FILES = sorted((TRACES / "kineto").glob("*/*.json.gz")) + sorted((TRACES / "nsys").glob("*.sqlite"))


def _rows(rank_step_times):
    return [{"rank": r, "step": s, "step_time_ns": t, "compute_ns": t, "exposed_comm_ns": 0, "exposed_memory_ns": 0,
             "idle_ns": 0, "overlapped_comm_ns": 0, "comm_ns": 0} for r, s, t in rank_step_times]


def test_median_step_rule_by_hand():
    # one rank, 4 steps of 10, 40, 20, 30: sorted 10 20 30 40 -> the lower middle is 20 (step 3)
    s = breakdown.summarize(_rows([(0, 1, 10), (0, 2, 40), (0, 3, 20), (0, 4, 30)]))
    assert (s["rank"], s["step"], s["step_time_ns"]) == (0, 3, 20)
    # odd count: the middle one
    s = breakdown.summarize(_rows([(0, 1, 50), (0, 2, 10), (0, 3, 30)]))
    assert (s["step"], s["step_time_ns"]) == (3, 30)
    # ranks: rank medians 20 (rank 0), 35 (rank 1), 5 (rank 2) -> median rank is rank 0 with its step 2
    rows = _rows([(0, 1, 10), (0, 2, 20), (0, 3, 30), (1, 1, 35), (1, 2, 36), (1, 3, 34), (2, 1, 5), (2, 2, 4),
                  (2, 3, 6)])
    s = breakdown.summarize(rows)
    assert (s["rank"], s["step"], s["step_time_ns"]) == (0, 2, 20)
    per = {r["rank"]: (r["step"], r["step_time_ns"]) for r in breakdown.per_rank(rows)}
    assert per == {0: (2, 20), 1: (1, 35), 2: (1, 5)}


def test_ranks_interleaved_and_tied_pick_what_a_pass_per_rank_picks():
    """Rows of many ranks in no order, with ties of step time inside and across ranks: per_rank and
    the representative step are what a pass over all rows for each rank gives (the definition,
    written out here; the code groups the rows once)."""
    import random
    rnd = random.Random(5)
    rows = _rows([(r, s, rnd.choice([10, 20, 20, 30, 40])) for s in range(5) for r in rnd.sample(range(40), 40)])
    rnd.shuffle(rows)

    def by_pass(rank):
        return breakdown.median_step([x for x in rows if x["rank"] == rank])
    ranks = sorted({x["rank"] for x in rows})
    assert breakdown.per_rank(rows) == [breakdown.summarize([x for x in rows if x["rank"] == r]) for r in ranks]
    meds = sorted((by_pass(r) for r in ranks), key=lambda x: (x["step_time_ns"], x["rank"]))
    want = meds[(len(meds) - 1) // 2]
    s = breakdown.summarize(rows)
    assert (s["rank"], s["step"]) == (want["rank"], want["step"])


def test_summary_parts_are_the_chosen_steps_own():
    rows = [{"rank": 0, "step": 1, "step_time_ns": 100, "compute_ns": 60, "exposed_comm_ns": 10,
             "exposed_memory_ns": 5, "idle_ns": 25, "overlapped_comm_ns": 7, "comm_ns": 17},
            {"rank": 0, "step": 2, "step_time_ns": 110, "compute_ns": 50, "exposed_comm_ns": 40,
             "exposed_memory_ns": 0, "idle_ns": 20, "overlapped_comm_ns": 1, "comm_ns": 41}]
    s = breakdown.summarize(rows)      # the lower middle of two: step 1, all its parts, none mixed in
    assert {k: s[k] for k in FIELDS} == {k: rows[0][k] for k in FIELDS}
    assert s["overlap_ratio"] == 7 / 17


def _independent_summary(steps):
    """The representative step by a second method: statistics.median_low per rank, then over ranks."""
    per_rank = {}
    for r in {s["rank"] for s in steps}:
        per_rank[r] = statistics.median_low([s["step_time_ns"] for s in steps if s["rank"] == r])
    return statistics.median_low(list(per_rank.values())), per_rank


def _printed_breakdown(text, diff=False):
    """name -> value in ms as printed (the analyze text's part table, the base column of diff's)."""
    out = {}
    names = ("compute", "exposed comm", "exposed memory", "idle", "overlapped comm")
    for line in text.splitlines():
        for n in names:
            m = re.match(rf"^\s*{n}\s+(-?[\d,]+\.\d+)(\s|$)", line)
            if m and n not in out:
                out[n] = m.group(1)
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name + "/" + p.name[:24])
def test_headline_is_one_step_and_diff_agrees(path):
    from reports import diff_text, text
    from traceview.diff.document import DiffOptions, diff_sides
    from traceview.runs import load_side
    try:
        side = load_side("base", [str(path)], DiffOptions())
    except TraceError:
        pytest.skip("refused input (tested by the corpus tests)")
    doc = side.doc
    s = doc["summary"]
    assert sum(s[p] for p in PARTS) == s["step_time_ns"]
    assert s["overlapped_comm_ns"] + s["exposed_comm_ns"] == s["comm_ns"]
    want, per_rank = _independent_summary(doc["steps"])
    assert s["step_time_ns"] == want
    (row,) = [r for r in doc["steps"] if (r["rank"], r["step"]) == (s["rank"], s["step"])]
    assert {k: row[k] for k in FIELDS} == {k: s[k] for k in FIELDS}
    assert per_rank[s["rank"]] == want
    for pr in doc["per_rank"]:
        assert pr["step_time_ns"] == per_rank[pr["rank"]]
        assert sum(pr[p] for p in PARTS) == pr["step_time_ns"]
    d = diff_sides(side, side, DiffOptions())
    for k in ("base", "new"):
        assert d[k]["step_time_ns"] == s["step_time_ns"]
        assert d[k]["breakdown"] == {p: s[p] for p in PARTS + ("overlapped_comm_ns",)}
        assert d[k]["median_set"] == [{"rank": s["rank"], "step": s["step"]}]
    if len(doc["per_rank"]) == 1:     # the printed figures (multi-rank text prints a per-rank table)
        a, b = _printed_breakdown(text.render(doc)), _printed_breakdown(diff_text.render(d))
        assert len(a) == 5 and a == b
