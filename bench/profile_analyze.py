#!/usr/bin/env python3
"""Where `traceview analyze` spends its time on one trace: wall time and peak RSS of every engine step
(each SQL and Python step, timed as it is built), the parser and the other stages, and cProfile's top
functions by own time. The profile the speed work is judged by (before/after tables in the closing
notes come from this script).

    python bench/profile_analyze.py TRACE [--top 25] [--no-cprofile] [--save FILE.prof] [-- ANALYZE OPTIONS]

The analysis runs in this process (`analyze TRACE -f json -o <temp> --no-store` unless options are
given after `--`); cProfile slows per-call Python code (parsers, sweeps) more than SQL, so the step
table is also printed without it (`--no-cprofile`) for the true walls.
"""
from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import os
import pstats
import resource
import sys
import tempfile
import time


def rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_now_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


def instrument(rows: list) -> None:
    """Time every step as the engine builds it: SQL steps through Session.materialize_sql, Python steps
    by wrapping their functions in the registry."""
    from traceview.engine import session as session_mod, steps as steps_mod

    def timed(label, fn):
        def run(*a, **k):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **k)
            finally:
                rows.append((label, time.perf_counter() - t0, time.process_time() - c0, rss_now_mb(), rss_peak_mb()))
        return run

    for name, step in list(steps_mod._PYTHON.items()):
        steps_mod._PYTHON[name] = dataclasses.replace(step, run=timed(f"py  {name}", step.run))
    cls = session_mod.Session
    orig_sql = cls.materialize_sql
    orig_arrow = cls.materialize_arrow

    def materialize_sql(self, name, sql, params, disabled_optimizers=(), parallel=False):
        return timed(f"sql {name}", orig_sql)(self, name, sql, params, disabled_optimizers, parallel)

    def materialize_arrow(self, name, table):
        return timed(f"  (copy {name} into DuckDB)", orig_arrow)(self, name, table)
    cls.materialize_sql = materialize_sql  # type: ignore[method-assign]
    cls.materialize_arrow = materialize_arrow  # type: ignore[method-assign]


STAGES = [  # (label, source file): the largest cumulative time of a function in it, under cProfile
    ("analyze (the whole command)", "traceview/cli.py"),
    ("parse (Kineto)", "parsers/kineto.py"),
    ("parse (nsys)", "parsers/nsys.py"),
    ("nsys export", "parsers/nsys_export.py"),
    ("engine build (every step)", "traceview/engine/pipeline.py"),
    ("critical path", "traceview/analysis/critical_path.py"),
    ("stalls", "traceview/analysis/stalls.py"),
    ("document", "traceview/document/assemble.py"),
    ("store", "traceview/store.py"),
    ("output", "traceview/output.py"),
]


def stage_rows(stats: pstats.Stats) -> list:
    out = []
    for label, suffix in STAGES:
        cts = [ct for (file, _line, _name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items()  # type: ignore[attr-defined]
               if file.endswith(suffix)]
        if cts:
            out.append((label, max(cts)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--no-cprofile", action="store_true", help="time the steps only (true walls)")
    ap.add_argument("--save", help="write cProfile's stats to this file (snakeviz, pstats)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    rest = argv[cut + 1:]   # after --: analyze's options
    tmp = tempfile.mkdtemp(prefix="tv-prof-")
    if not rest:
        rest = ["-f", "json", "-o", os.path.join(tmp, "report.json"), "--no-store"]
    rows: list = []
    t0 = time.perf_counter()
    from traceview import cli
    t_import = time.perf_counter() - t0
    instrument(rows)
    sys.argv = ["traceview", "analyze", args.trace, *rest]
    prof = None if args.no_cprofile else cProfile.Profile()
    t1, c1 = time.perf_counter(), time.process_time()
    try:
        if prof is not None:
            prof.enable()
        try:
            cli.main()
        except SystemExit as e:
            if e.code not in (0, None):
                print(f"analyze exited with {e.code}", file=sys.stderr)
        finally:
            if prof is not None:
                prof.disable()
    finally:
        wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    print(f"trace: {args.trace} ({os.path.getsize(args.trace) / 2**20:.1f} MiB)"
          f"{'' if prof is None else '  [under cProfile]'}")
    print(f"import traceview.cli {t_import:.3f} s; analyze wall {wall:.2f} s, cpu {cpu:.2f} s, "
          f"peak RSS {rss_peak_mb():.0f} MiB")
    print(f"\n{'step':44s} {'wall s':>8s} {'cpu s':>8s} {'RSS MiB':>8s} {'peak':>7s}")
    total = 0.0
    for label, w, c, now, peak in rows:
        if not label.startswith("  "):
            total += w
        print(f"{label[:44]:44s} {w:8.3f} {c:8.3f} {now:8.0f} {peak:7.0f}")
    print(f"{'steps in all':44s} {total:8.3f}  ({100 * total / wall:.0f} % of analyze)")
    if prof is not None:
        stats = pstats.Stats(prof)
        print(f"\n{'stage (cumulative, cProfile)':44s} {'s':>8s}")
        for label, ct in stage_rows(stats):
            print(f"{label:44s} {ct:8.2f}")
        if args.save:
            stats.dump_stats(args.save)
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(args.top)
        text = buf.getvalue()
        print("\n" + text[text.find("ncalls") - 6 if "ncalls" in text else 0:].rstrip())


if __name__ == "__main__":
    main()
