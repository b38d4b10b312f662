"""Benchmark: `traceview export --perfetto` and `traceview.open` (wall time, peak RSS, file size),
and the start-up time of `traceview --help`. Each variant runs in its own process so its peak
memory is its own.

    python bench/bench_perfetto.py [TRACE...]
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "kineto"
DEFAULT = [TRACES / "h200_moe" / "overlap.json.gz", TRACES / "dlrm_8rank_v100"]

CHILD = r'''
import json, os, resource, sys, time
from traceview.cli import _skip_pyarrow_pandas_probe
_skip_pyarrow_pandas_probe()
variant, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
import traceview
job = traceview.open(path)
t1 = time.perf_counter()
res = {"open_s": t1 - t0}
if variant == "export":
    job.export_perfetto(out)
    res["export_s"] = time.perf_counter() - t1
    res["bytes"] = os.path.getsize(out)
res["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(res))
'''


def run(variant: str, path: Path, out: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, variant, str(path), str(out)], capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def startup(n: int = 5) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "traceview", "--help"], capture_output=True, check=True)
        best = min(best, time.perf_counter() - t)
    return best


def main(paths: list[str]) -> None:
    print(f"traceview --help: {startup():.3f} s (best of 5)")
    with tempfile.TemporaryDirectory() as tmp:
        for p in [Path(x) for x in paths] or DEFAULT:
            o = run("open", p, Path(tmp) / "x.json")
            e = run("export", p, Path(tmp) / "x.json")
            print(f"{p.name}: open {o['open_s']:.2f} s, peak RSS {o['peak_rss_mib']:.0f} MiB; "
                  f"open+export {e['open_s'] + e['export_s']:.2f} s (export {e['export_s']:.2f} s), "
                  f"peak RSS {e['peak_rss_mib']:.0f} MiB, file {e['bytes'] / 2**20:.1f} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])
