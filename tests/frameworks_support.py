"""Shared checks for the framework-convention fixtures: per-activity attribution against the truth
planted by fixtures/trace_builder.Builder (matched by GPU start, end and name)."""
from __future__ import annotations

from traceview.analysis import breakdown, layers
from traceview.config import Rules
from traceview.engine.session import Session
from traceview.load import load


def attributed(path):
    """(session, {(start_ns, end_ns, name): attribution row}) for one trace file."""
    s = Session(load([str(path)]))
    breakdown.prepare(s, breakdown.Options())
    layers.prepare(s, Rules())
    rows = s.rows("""SELECT a.start_ns, a.end_ns, a.name, t.* FROM activity_attribution t
                     JOIN gpu_activities a ON a.id = t.id""")
    return s, {(r["start_ns"], r["end_ns"], r["name"]): r for r in rows}


def mismatches(truth: dict, got: dict) -> list:
    """Activities whose (layer, phase, stage, region) differ from the planted ones."""
    assert set(truth) == set(got), (len(truth), len(got))
    bad = []
    for key, want in truth.items():
        r = got[key]
        have = (r["layer"], r["phase"], r["stage"], r["region"])
        if have != (want.layer, want.phase, want.stage, want.region):
            bad.append((key[2][:50], have, (want.layer, want.phase, want.stage, want.region)))
    return bad
