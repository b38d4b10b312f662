"""Bounded reading: what the size ceiling and the nesting scan cost on a real trace, and the time
and peak RSS of refusing a gzip bomb.

    python bench/bench_bounded_read.py [TRACE.json.gz] [--bomb-gib 20] [--rounds 5]

Prints, for TRACE: the old one-call inflate (zlib.decompress into the size the trailer records),
the bounded inflate (`bounded_read.read_bytes`), the nesting scan and the msgspec decode (median
and min of ROUNDS); then a multi-member gzip bomb of BOMB GiB of zeros, refused by
`traceview analyze` in a child process: wall time and the child's peak RSS.
"""
from __future__ import annotations

import argparse
import gzip
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from traceview.parsers import bounded_read, json_depth, kineto

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "traces" / "kineto" / "h200_moe" / "overlap.json.gz"


def timed(label: str, fn, rounds: int):
    ts, out = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    print(f"  {label:34s} median {statistics.median(ts) * 1e3:8.1f} ms   min {min(ts) * 1e3:8.1f} ms")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--bomb-gib", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    comp = a.trace.read_bytes()
    print(f"{a.trace} ({len(comp) / 1e6:.1f} MB compressed)")
    timed("zlib.decompress, trailer-sized", lambda: zlib.decompress(comp, 31, int.from_bytes(comp[-4:], "little")),
          a.rounds)
    raw = timed("bounded_read.read_bytes", lambda: bounded_read.read_bytes(a.trace), a.rounds)
    print(f"  ({len(raw) / 1e6:.1f} MB of JSON, nesting depth {json_depth.depth(raw)})")
    timed("json_depth.depth_exceeds", lambda: json_depth.depth_exceeds(raw), a.rounds)
    timed("msgspec decode (typed)", lambda: kineto.msgspec.json.decode(raw, type=kineto.TypedTrace), a.rounds)
    with tempfile.TemporaryDirectory() as d:
        bomb = Path(d) / "bomb.json.gz"
        member = gzip.compress(bytes(64 << 20), compresslevel=9)
        with open(bomb, "wb") as fh:
            for _ in range(a.bomb_gib * 16):
                fh.write(member)
        print(f"bomb: {bomb.stat().st_size / 1e6:.1f} MB inflating to {a.bomb_gib} GiB; ceiling "
              f"{bounded_read.format_size(bounded_read.default_max_input_size())}")
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(bomb)], capture_output=True, text=True)
        wall = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"  exit {r.returncode} in {wall:.1f} s, child peak RSS {peak:.0f} MiB: {r.stderr.strip()}")


if __name__ == "__main__":
    main()
