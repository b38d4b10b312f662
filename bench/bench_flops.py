"""The FLOPs section's cost inside one analysis: time of `flops_sections` (the trace count, precision
split, achievable and per-group rates) after the breakdown and layers, and the DuckDB connections
the whole analyze opens.

    python bench/bench_flops.py [TRACE ...] [--rounds 3]

Each round loads the trace once, runs the breakdown and layers in a fresh session, then times the
FLOPs part alone (median and min of ROUNDS); prints the connections one `analyze` opened and the
process's peak RSS (it uses analysis.analyze.flops_sections, document.assemble.assemble and
Session).
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import duckdb

from traceview.analysis import breakdown, layers
from traceview.analysis.analyze import flops_sections
from traceview.config import Rules
from traceview.document.assemble import assemble
from traceview.engine.session import Session
from traceview.load import load

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "traces" / "kineto" / "h200_moe" / "overlap.json.gz"


def connections_of_one_analyze(profile) -> int:
    n, orig = [0], duckdb.connect

    def counting(*a, **k):
        n[0] += 1
        return orig(*a, **k)
    duckdb.connect = counting
    try:
        assemble(profile)
    finally:
        duckdb.connect = orig
    return n[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="*", default=[str(DEFAULT)])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for path in a.traces:
        profile = load([path])
        ts = []
        for _ in range(a.rounds):
            s = Session(profile)
            breakdown.prepare(s, breakdown.Options())
            rows = breakdown.step_rows(s)
            layers.prepare(s, Rules())
            doc = {"summary": breakdown.summarize(rows), "steps": rows, "layers": layers.layer_rows(s)}
            t = time.perf_counter()
            sec = flops_sections(s, doc)
            ts.append(time.perf_counter() - t)
        print(f"{Path(path).name}: flops section median {statistics.median(ts):.3f} s, min {min(ts):.3f} s "
              f"({a.rounds} rounds; method {sec.get('method')}, {len(sec.get('by_group') or [])} groups); "
              f"one analyze opens {connections_of_one_analyze(profile)} DuckDB connection(s); "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
