"""Benchmark: `traceview history` over 365 nightly reports.

Makes the real report of fixtures/h200_moe_overlap.json.gz (`analyze -f json`, 0.25 MB), perturbs
it into N nights (fixtures/nightly.py: noise, an 8 % regression on the night 0.7 N) in a temporary
folder, then measures, each in its own process so that peak memory is its own:

- in-process: reading + ordering + the change-point rule (`history.build`), and each renderer;
- the whole command `traceview history DIR -f FORMAT -o FILE` (Python start and imports included).

Prints wall time and peak RSS of each.

    python bench/bench_history.py [NIGHTS]
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "h200_moe_overlap.json.gz"

CHILD = r'''
import json, resource, sys, time
def rss():   # VmHWM: this process's own peak (ru_maxrss would include the forking parent's pages)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
from traceview.history import build
from traceview.history_cli import render_history
t_imp = time.perf_counter()
c0 = time.process_time()
doc = build([sys.argv[1]])
t_build, c_build = time.perf_counter(), time.process_time()
out = {"imports_s": t_imp - t0, "build_s": t_build - t_imp, "build_cpu_s": c_build - c0, "rss_after_build_mb": rss(),
       "nights": len(doc["nights"]), "changes": sorted({c["night"] for c in doc["changes"]})}
from reports.html import vega_bundle
t = time.perf_counter()
vega_bundle()                      # the inlined Vega/Vega-Lite bundle (vl-convert), shared with analyze's HTML
out["vega_bundle_s"] = time.perf_counter() - t
for fmt in ("text", "markdown", "json", "html"):
    t, c = time.perf_counter(), time.process_time()
    n = len(render_history(doc, fmt))
    out[fmt + "_s"], out[fmt + "_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    out[fmt + "_bytes"] = n
out["peak_rss_mb"] = rss()
print(json.dumps(out))
'''

TIMED = r'''
import resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], check=True)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024)
'''


def main() -> None:
    nights = int(sys.argv[1]) if len(sys.argv) > 1 else 365
    sys.path.insert(0, str(ROOT))
    from fixtures import nightly
    from traceview.reports import json_report
    from traceview.runs import AnalyzeOptions, run_analyze
    report = json.loads(json_report.render(run_analyze([str(FIXTURE)], AnalyzeOptions())))
    with tempfile.TemporaryDirectory(prefix="tv-history-") as tmp:
        folder = Path(tmp) / "nights"
        docs = nightly.series(report, nights=nights, planted=nightly.Planted(night=int(0.7 * nights)), seed=0)
        nightly.write(docs, folder)
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{nights} reports, {size / 1e6:.1f} MB in {folder}")
        for _ in range(2):                      # first pass warms the page cache
            r = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, check=True)
        res = json.loads(r.stdout)
        print(f"in-process: imports {res['imports_s']:.3f} s; build (read {nights} reports, order, rule) "
              f"{res['build_s']:.3f} s wall, {res['build_cpu_s']:.3f} s CPU, "
              f"peak RSS {res['rss_after_build_mb']:.0f} MB"
              f" after it; changes on night(s) {res['changes']}")
        for fmt in ("text", "markdown", "json", "html"):
            print(f"  render {fmt:8s} {res[fmt + '_s']:.3f} s wall, {res[fmt + '_cpu_s']:.3f} s CPU "
                  f"({res[fmt + '_bytes'] / 1e3:,.0f} kB)")
        print(f"  (the inlined Vega bundle alone, before the renders: {res['vega_bundle_s']:.3f} s)")
        print(f"  peak RSS {res['peak_rss_mb']:.0f} MB")
        exe = Path(sys.executable).with_name("traceview")
        for fmt in ("text", "json", "html"):
            r = subprocess.run([sys.executable, "-c", TIMED, str(exe), "history", str(folder), "-f", fmt,
                                "-o", str(Path(tmp) / f"h.{fmt}")], capture_output=True, text=True, check=True)
            wall, cpu, peak = map(float, r.stdout.split())
            print(f"command `traceview history DIR -f {fmt}`: {wall:.3f} s wall, {cpu:.3f} s CPU, "
                  f"peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()
