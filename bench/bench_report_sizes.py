"""Report size and render time against the number of ranks: generated MoE jobs (fixtures/moe_job.py)
of 64, 256 and 1,024 ranks are analyzed once to JSON, then each format is rendered from that
document in this process.

    python bench/bench_report_sizes.py [--ranks 64 256 1024] [--steps 4] [--layers 12] [--keep DIR]
    python bench/bench_report_sizes.py --reuse DIR       # render the JSON reports --keep left in DIR

Printed per job: the JSON's size, then per format (text, markdown, html) the bytes, the render time
(wall time; html: the second render, once the inlined Vega bundle is loaded, the first is printed
too; then the CPU time of one more render, less disturbed by a busy machine) and
whether the planted straggler rank and slow expert layer's ranks are named; then the ratios of each
format's bytes and render time between the largest and the smallest job, and the peak RSS of this
process (which holds the largest JSON document).
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fixtures import moe_job  # noqa: E402

FORMATS = ("text", "markdown", "html")


def planted_named(body: str, want: dict) -> bool:
    slow = ", ".join(str(r) for r in want["slow_ranks"])
    return (f"layer {want['slow_layer']}" in body and slow in body
            and f"{want['straggler']} ({want['times_last']}x)" in body)


def one_job(ranks: int, steps: int, layers: int, work: Path, reuse: Path | None = None) -> dict:
    from traceview.reports import render
    job = moe_job.Job(ranks=ranks, steps=steps, layers=layers)
    out = work / f"job{ranks}.json"
    analyze_s = 0.0
    if reuse is not None:
        shutil.copy(reuse / f"job{ranks}.json", out)
    else:
        d = work / f"job{ranks}"
        moe_job.write(d, job)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "traceview", "analyze", str(d), "--no-store", "--jobs", "2", "-f",
                        "json", "-o", str(out)], check=True)
        analyze_s = time.perf_counter() - t
        shutil.rmtree(d)
    doc = json.loads(out.read_text())
    want = moe_job.expected(job)
    res: dict = {"ranks": ranks, "json_bytes": out.stat().st_size, "analyze_s": analyze_s}
    for fmt in FORMATS:
        t = time.perf_counter()
        body = render(doc, fmt)
        first = time.perf_counter() - t
        if fmt == "html":
            t = time.perf_counter()
            body = render(doc, fmt)
        wall = time.perf_counter() - t
        c = time.process_time()
        render(doc, fmt)
        res[fmt] = {"bytes": len(body.encode()), "render_s": wall, "first_s": first,
                    "cpu_s": time.process_time() - c, "planted": planted_named(body, want)}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--keep", type=Path, help="keep the JSON reports here")
    ap.add_argument("--reuse", type=Path, help="render the JSON reports kept here (jobN.json) instead of analyzing")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_report_sizes."))
    rows = []
    try:
        for n in a.ranks:
            r = one_job(n, a.steps, a.layers, work, a.reuse)
            rows.append(r)
            print(f"{n:>5} ranks: JSON {r['json_bytes'] / 1e6:,.1f} MB (analyze {r['analyze_s']:.1f} s)")
            for fmt in FORMATS:
                f = r[fmt]
                extra = f" (first {f['first_s']:.2f} s)" if fmt == "html" else ""
                print(f"        {fmt:<8} {f['bytes']:>10,} bytes  render {f['render_s']:6.2f} s wall, "
                      f"{f['cpu_s']:6.2f} s CPU{extra}  "
                      f"planted causes named: {'yes' if f['planted'] else 'NO'}")
            sys.stdout.flush()
        if len(rows) > 1:
            lo, hi = rows[0], rows[-1]
            head = f"{hi['ranks']} vs {lo['ranks']} ranks: JSON x{hi['json_bytes'] / lo['json_bytes']:.1f}; "
            print(head + "; ".join(
                f"{fmt} bytes x{hi[fmt]['bytes'] / lo[fmt]['bytes']:.2f}, render x"
                f"{hi[fmt]['cpu_s'] / max(lo[fmt]['cpu_s'], 1e-9):.1f} (CPU)" for fmt in FORMATS))
        print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            for r in rows:
                shutil.copy(work / f"job{r['ranks']}.json", a.keep / f"job{r['ranks']}.json")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r[f]["planted"] for r in rows for f in FORMATS) else 1


if __name__ == "__main__":
    sys.exit(main())
