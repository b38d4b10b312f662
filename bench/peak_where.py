#!/usr/bin/env python3
"""Where the peak RSS of `traceview analyze` is: a thread samples the process's RSS every few ms and,
whenever it reaches a new high, records the main thread's Python stack; the stacks at the peak and
at the highs of each stage are printed with their RSS.

    python bench/peak_where.py TRACE [--interval 0.005] [--frames 4] [-- ANALYZE OPTIONS...]

(e.g. `-- --jobs 2 --store DIR` for a mapped job: the workers' memory is not this process's).
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--interval", type=float, default=0.005)
    ap.add_argument("--frames", type=int, default=4, help="innermost traceview frames shown per high")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="after --: more options of analyze")
    args = ap.parse_args()
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    main_id = threading.get_ident()
    highs: list = []  # (rss, elapsed, innermost frames of traceview code)
    done = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        top = 0.0
        while not done.is_set():
            r = rss_mb()
            if r > top + 8:
                top = r
                frame = sys._current_frames().get(main_id)
                stack = [f"{fs.filename.rsplit('traceview/', 1)[-1]}:{fs.lineno} {fs.name}"
                         for fs in traceback.extract_stack(frame) if "traceview" in fs.filename
                         or "parsers" in fs.filename or "reports" in fs.filename][-args.frames:]
                highs.append((r, time.perf_counter() - t0, stack))
            time.sleep(args.interval)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    from traceview import cli
    sys.argv = ["traceview", "analyze", args.trace, "-f", "json", "-o", "/dev/null", *rest]
    try:
        cli.main()
    except SystemExit:
        pass
    done.set()
    th.join()
    if not highs:
        print("no RSS samples taken")
        return
    peak = max(highs)
    print(f"peak RSS {peak[0]:.0f} MiB at {peak[1]:.1f} s")
    last_where = None
    for r, t, st in highs:
        where = st[-1] if st else "?"
        if where != last_where:
            print(f"  {r:7.0f} MiB  {t:6.1f} s  " + "  <  ".join(reversed(st)))
            last_where = where


if __name__ == "__main__":
    main()
