#!/usr/bin/env python3
"""Writing a large output file: traceview's writer (direct_io.AdaptiveWriter: through the page cache
or with O_DIRECT, whichever this machine writes faster) against the page cache alone
(TRACEVIEW_DIRECT_IO=0) and O_DIRECT after the first chunk (=1), side by side in one run.

Each command is a whole process that writes SIZE MiB of pieces (a mix of 64 KiB and 4 MiB, as a
report's are) with output.write_file into a new file of a temporary folder on the file system of
--dir, then removes it; the runs are interleaved (A B C A B C ...). Printed: the medians of wall
time and peak RSS, the rate, and the bytes each way went in the writer's last run.

    python bench/bench_write.py [--size 976] [--repeat 5] [--dir /tmp]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, os, sys, tempfile, time
from pathlib import Path
from traceview import direct_io, output
size = int(sys.argv[1]) << 20
block = os.urandom(4 << 20)
def pieces():
    left = size
    while left:
        for n in (64 << 10, 4 << 20):
            n = min(n, left)
            yield memoryview(block)[:n]
            left -= n
            if not left:
                break
seen = {}
real = direct_io.AdaptiveWriter.close
def close(self):
    real(self)
    seen.update({k: v >> 20 for k, v in self.written.items()})
direct_io.AdaptiveWriter.close = close
with tempfile.TemporaryDirectory(dir=sys.argv[2]) as d:
    t = time.perf_counter()
    output.write_file(output.Pieces(pieces), Path(d) / "report.json")
    wall = time.perf_counter() - t
print(json.dumps({"write": wall, "ways": seen}))
"""


def run(env_value: str | None, size: int, folder: str) -> dict:
    env = dict(os.environ)
    env.pop("TRACEVIEW_DIRECT_IO", None)
    if env_value is not None:
        env["TRACEVIEW_DIRECT_IO"] = env_value
    t = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", CHILD, str(size), folder], env=env, capture_output=True, text=True,
                         check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    import json
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got.update(wall=time.perf_counter() - t, sys=after.ru_stime - before.ru_stime, peak=after.ru_maxrss / 1024)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=976, help="MiB written (the 1,024-rank job's report: 976)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="a folder on the file system to write to")
    args = ap.parse_args()
    ways = {"traceview (adaptive)": None, "page cache only (=0)": "0", "O_DIRECT (=1)": "1"}
    runs: dict[str, list[dict]] = {k: [] for k in ways}
    for _ in range(args.repeat):
        for k, v in ways.items():
            runs[k].append(run(v, args.size, args.dir))
    print(f"{time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores; {args.size} MiB into {args.dir}; "
          f"medians of {args.repeat} interleaved runs")
    for k, rs in runs.items():
        w = statistics.median(r["write"] for r in rs)
        wall, sys_s = statistics.median(r["wall"] for r in rs), statistics.median(r["sys"] for r in rs)
        print(f"  {k:22s} write {w:6.3f} s ({args.size / w:7.0f} MiB/s)  process {wall:6.3f} s"
              f"  system {sys_s:6.3f} s  peak RSS "
              f"{statistics.median(r['peak'] for r in rs):5.0f} MiB  last run: {rs[-1]['ways']}")


if __name__ == "__main__":
    main()
