#!/usr/bin/env python3
"""The critical-path and stalls stage (`stalls.sections`) alone: its wall and CPU time and the RSS it
adds. The trace (file or folder of ranks) is loaded and the breakdown / layers prepared first, as
`analyze` does; then a thread samples the RSS every 2 ms while the stage runs.

    python bench/bench_stalls.py TRACE [TRACE ...] [--split] [--profile 25]

Prints one JSON line: load_s, prepare_s, stage_s, stage_cpu_s, rss_before_mib (after prepare),
stage_peak_mib (highest RSS sampled during the stage), stage_added_mib (peak - before),
stage_peak_where (the innermost traceview frames when the peak was sampled),
process_peak_mib (ru_maxrss: the whole process, parse included), stalls, windows, gpu_activities.
`--split` runs the stage as the workers will: job_inputs, rank_part per rank, merge (and checks
that it equals sections). `--profile N` prints the stage's cProfile top N (cumulative) to stderr.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
import traceback


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


class Peak:
    """Highest RSS sampled while the block runs."""

    def __init__(self, interval: float = 0.002):
        self.interval, self.top, self._done = interval, 0.0, threading.Event()
        self.where = ""
        self._main = threading.get_ident()

    def __enter__(self):
        self.top = rss_mib()
        self._th = threading.Thread(target=self._run, daemon=True)
        self._th.start()
        return self

    def _run(self):
        while not self._done.is_set():
            r = rss_mib()
            if r > self.top:
                self.top = r
                frame = sys._current_frames().get(self._main)
                stack = [f"{fs.name}:{fs.lineno}" for fs in traceback.extract_stack(frame)
                         if "traceview" in fs.filename]
                self.where = " < ".join(reversed(stack[-3:]))
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._done.set()
        self._th.join()
        self.top = max(self.top, rss_mib())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--split", action="store_true", help="job_inputs + rank_part per rank + merge")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile top N of the stage")
    args = ap.parse_args()
    from traceview.analysis import breakdown, layers, stalls
    from traceview.config import Rules
    from traceview.engine.session import Session
    from traceview.load import load
    t0 = time.perf_counter()
    profile = load(args.traces)
    t1 = time.perf_counter()
    s = Session(profile)
    breakdown.prepare(s, breakdown.Options())
    rows = breakdown.step_rows(s)
    layers.prepare(s, Rules())
    doc = {"steps": rows}
    t2 = time.perf_counter()
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
    before = rss_mib()
    c0 = time.process_time()
    with Peak() as peak:
        t3 = time.perf_counter()
        if prof:
            prof.enable()
        if args.split:
            job = stalls.job_inputs(s)
            idle = {(r["rank"], r["step"]): r["idle_ns"] for r in rows}
            sec = stalls.merge(job, [stalls.rank_part(s, job, idle, [r]) for r in profile.ranks])
        else:
            sec = stalls.sections(s, doc)
        if prof:
            prof.disable()
        t4 = time.perf_counter()
    c1 = time.process_time()
    if args.split:
        assert sec == stalls.sections(s, doc), "split stage differs from sections"
    if prof:
        import pstats
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
    print(json.dumps({
        "traces": args.traces if len(args.traces) < 4 else f"{len(args.traces)} files",
        "mode": "split" if args.split else "sections",
        "load_s": round(t1 - t0, 3), "prepare_s": round(t2 - t1, 3),
        "stage_s": round(t4 - t3, 3), "stage_cpu_s": round(c1 - c0, 3),
        "rss_before_mib": round(before), "stage_peak_mib": round(peak.top),
        "stage_added_mib": round(peak.top - before), "stage_peak_where": peak.where,
        "process_peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "stalls": len(sec["stalls"]), "windows": len(sec["critical_path"]),
        "gpu_activities": profile.gpu_activities.num_rows}))


if __name__ == "__main__":
    main()
