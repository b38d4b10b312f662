"""Benchmark: ingest + step breakdown of the largest Kineto trace in the corpus.

Prints wall time, throughput (events/s) and peak RSS of each variant, each run in its own
process so peak memory is its own. Holistic Trace Analysis runs too when it is installed
(`pip install holistictraceanalysis`; not a dependency of traceview).

    python bench/bench_ingest.py [TRACE]
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "traces" / "kineto" / "hta_df_index_resolver" / "df_index_resolver.json.gz"

CHILD = r'''
import json, resource, sys, time
t0 = time.perf_counter()
variant, path = sys.argv[1], sys.argv[2]
out = {}
if variant == "traceview":
    from traceview.cli import _skip_pyarrow_pandas_probe  # as `traceview analyze` does
    _skip_pyarrow_pandas_probe()
    from traceview.load import load
    from traceview.engine.session import Session
    from traceview.analysis import breakdown
    t_imp = time.perf_counter()
    prof = load([path])
    t_load = time.perf_counter()
    s = Session(prof)
    breakdown.prepare(s, breakdown.Options())
    rows = breakdown.step_rows(s)
    t_end = time.perf_counter()
    out = dict(imports=t_imp - t0, load=t_load - t_imp, breakdown=t_end - t_load, total=t_end - t_imp,
               steps=len(rows), gpu=prof.gpu_activities.num_rows)
elif variant in ("msgspec", "orjson"):
    import gzip
    raw = gzip.open(path).read()
    t_imp = time.perf_counter()
    if variant == "orjson":
        import orjson
        n = len(orjson.loads(raw)["traceEvents"])
    else:
        from traceview.parsers import kineto
        import msgspec
        n = len(msgspec.json.decode(raw, type=kineto.TypedTrace).traceEvents)
    out = dict(decode=time.perf_counter() - t_imp, events=n)
elif variant == "hta":
    import os, shutil, tempfile
    d = tempfile.mkdtemp()
    shutil.copy(path, os.path.join(d, os.path.basename(path)))
    from hta.trace_analysis import TraceAnalysis
    t_imp = time.perf_counter()
    ta = TraceAnalysis(trace_dir=d)
    t_load = time.perf_counter()
    ta.get_temporal_breakdown(visualize=False)
    t_end = time.perf_counter()
    out = dict(imports=t_imp - t0, load=t_load - t_imp, breakdown=t_end - t_load, total=t_end - t_imp)
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
'''


def run(variant: str, path: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, variant, str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    import gzip
    with gzip.open(path) if path.suffix == ".gz" else open(path, "rb") as fh:
        n_events = fh.read().count(b'"ph"')
    print(f"trace: {path.name}  ({path.stat().st_size / 1e6:.1f} MB compressed, {n_events:,} events)")
    results: dict[str, dict] = {}
    for variant in ("traceview", "msgspec", "orjson", "hta"):
        results[variant] = res = run(variant, path)
        if "error" in res:
            print(f"  {variant:10s} unavailable: {res['error'][:100]}")
            continue
        parts = "  ".join(f"{k}={v:.3f}s" for k, v in res.items() if isinstance(v, float) and k != "peak_rss_mb")
        print(f"  {variant:10s} {parts}  peak RSS {res['peak_rss_mb']:.0f} MB")
    tv = results["traceview"]
    if "error" not in tv:
        print(f"traceview: ingest + breakdown {tv['total']:.3f} s = {n_events / tv['total']:,.0f} events/s, "
              f"peak RSS {tv['peak_rss_mb']:.0f} MB (interpreter start-up and imports excluded: {tv['imports']:.2f} s)")
    hta = results.get("hta") or {}
    if "error" in tv:
        return
    if "error" in hta:
        print("vs HTA: not run in this run (install holistictraceanalysis with pandas<3 in this interpreter); "
              "no ratio is printed from figures measured elsewhere")
        return
    print(f"vs HTA measured in this run: {hta['total'] / tv['total']:.1f}x faster, "
          f"{tv['peak_rss_mb'] / hta['peak_rss_mb']:.2f}x the memory")

if __name__ == "__main__":
    main()
