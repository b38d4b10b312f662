"""The document's per-stage totals (layers.stage_totals, summed in SQL) against a second method:
the same sums taken here, in Python, over the document's own layer rows, in their order."""
from pathlib import Path

import pytest
from helpers import TRACES, analyze_paths

from traceview.analysis.layers import LAYER_FIELDS

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "h200_moe_overlap.json.gz"


def by_hand(layer_rows) -> list[dict]:
    out: dict = {}
    for r in layer_rows:                     # first come, first listed among equal step times
        d = out.setdefault(r["stage"], {"stage": r["stage"], **{f: 0 for f in LAYER_FIELDS}})
        for f in LAYER_FIELDS:
            d[f] += r[f]
    return sorted(out.values(), key=lambda d: -d["step_time_ns"])


@pytest.mark.parametrize("paths", [[FIXTURE], [TRACES / "kineto" / "dlrm_8rank_v100"]], ids=["h200-moe", "dlrm-8"])
def test_stage_totals_are_the_sums_of_the_layer_rows(paths):
    doc = analyze_paths(paths)
    rows = list(doc["layers"])
    assert rows, "a trace with layer rows"
    got = doc["stages"]
    assert got == by_hand(rows)
    assert sum(s["step_time_ns"] for s in got) == sum(r["step_time_ns"] for r in rows)
    assert [list(s) for s in got] == [["stage", *LAYER_FIELDS]] * len(got)      # the keys, in order
