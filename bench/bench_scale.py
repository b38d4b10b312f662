#!/usr/bin/env python3
"""Benchmark: how `traceview analyze` (load + breakdown + layers + FLOPs + critical path and
stalls) scales with ranks and steps, on synthetic MoE jobs from the fixture generator
(fixtures/moe_sim.py: forward + backward with all-to-alls, host syncs, one Kineto file per rank).

Each size runs in its own process (wall time, peak RSS from rusage). The last column is wall time
per GPU activity: flat when the analysis is linear, growing when a pass is quadratic somewhere.
Generating the traces takes longer than analyzing them (the simulator is not built for size:
8x32 takes minutes).

    python bench/bench_scale.py                       # ranks x steps grid: 1x2 .. 8x16
    python bench/bench_scale.py --sizes 4x4 8x24       # chosen sizes (RANKSxSTEPS)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from traceview.load import load
from traceview.document.assemble import assemble
prof = load([sys.argv[1]])
t1 = time.perf_counter()
doc = assemble(prof)
t2 = time.perf_counter()
print(json.dumps({"load_s": t1 - t0, "analyze_s": t2 - t1, "gpu": prof.gpu_activities.num_rows,
                  "cpu": prof.cpu_ranges.num_rows, "windows": len(doc["critical_path"]),
                  "stalls": len(doc["stalls"])}))
"""


def generate(ranks: int, steps: int, out: Path) -> Path:
    from fixtures.moe_sim import moe_step
    from fixtures.synth_writers import write_kineto
    sc = moe_step(layers=8, world_size=ranks, steps=steps, experts=8)
    d = out / f"r{ranks}s{steps}"
    d.mkdir()
    for rt in sc.ranks:
        write_kineto(rt, d / f"rank{rt.meta.rank}.json")
    return d


def run(path: Path) -> dict:
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    out, err = p.communicate()
    if status != 0:
        sys.exit(f"analyze failed on {path}: {err.strip().splitlines()[-1] if err.strip() else status}")
    return {**json.loads(out.strip().splitlines()[-1]), "wall_s": wall, "maxrss_mib": usage.ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="*", default=["1x2", "2x4", "4x8", "8x8", "8x16"],
                    help="RANKSxSTEPS; the generator simulates at most 8 ranks")
    args = ap.parse_args()
    print(f"{'ranks x steps':>13}  {'GPU acts':>9}  {'CPU ranges':>10}  {'windows':>7}  {'wall s':>7}  "
          f"{'load s':>6}  {'analyze s':>9}  {'peak MiB':>8}  {'us/GPU act':>10}")
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for size in args.sizes:
            ranks, steps = (int(x) for x in size.lower().split("x"))
            r = run(generate(ranks, steps, Path(tmp)))
            print(f"{ranks:>6} x {steps:<4}  {r['gpu']:>9,}  {r['cpu']:>10,}  {r['windows']:>7}  "
                  f"{r['wall_s']:>7.2f}  {r['load_s']:>6.2f}  {r['analyze_s']:>9.2f}  {r['maxrss_mib']:>8.0f}  "
                  f"{1e6 * r['wall_s'] / r['gpu']:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
