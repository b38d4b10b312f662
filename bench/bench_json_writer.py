"""The JSON writer alone: the standard library (`json.dumps(indent=2, sort_keys=True, ...)`, the
pure-Python encoder) against reports/json_report.render_bytes (msgspec), on one report document.

    python bench/bench_json_writer.py REPORT.json [--repeat 3]
    python bench/bench_json_writer.py --ranks 1024 [--keep DIR]   # a generated job, analyzed first

The document is the report read back (json.loads) in a fresh child process per writer, so each
writer's peak RSS is its own: printed per writer are the CPU and wall seconds of the rendering
(best of --repeat), the process's RSS before it and its peak RSS while rendering (VmHWM, reset
after the document is read, so reading it does not count), the output's size, and whether the
bytes are identical to the standard library's.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_CHILD = r"""
import gc, hashlib, json, sys, time
def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
which, path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, "rb") as f:
    doc = json.loads(f.read())
from traceview.reports import json_report
from traceview.plain_data import scan
gc.collect()
before = rss_kib()
with open("/proc/self/clear_refs", "w") as f:     # the peak so far (reading the document) forgotten
    f.write("5")
if which == "stdlib":
    fn = lambda: json_report._stdlib(doc).encode("utf-8")
elif which == "scan":
    fn = lambda: scan(doc)
else:
    fn = lambda: json_report.render_bytes(doc)
best_cpu = best_wall = float("inf")
for _ in range(repeat):
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    best_cpu, best_wall = min(best_cpu, time.process_time() - c), min(best_wall, time.perf_counter() - w)
    digest = hashlib.sha256(out).hexdigest() if isinstance(out, bytes) else ""
    size = len(out) if isinstance(out, bytes) else 0
    del out
with open("/proc/self/status") as f:              # VmHWM: the peak since clear_refs
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(json.dumps({"cpu_s": best_cpu, "wall_s": best_wall, "rss_before_mb": before / 1024, "peak_mb": peak / 1024,
                  "size": size, "sha256": digest}))
"""


def child(which: str, report: Path, repeat: int) -> dict:
    p = subprocess.run([sys.executable, "-c", _CHILD, which, str(report), str(repeat)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench_json_writer: {which} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def generated_report(ranks: int, work: Path) -> Path:
    from fixtures import moe_job
    d = work / f"job{ranks}"
    moe_job.write(d, moe_job.Job(ranks=ranks))
    out = work / f"report{ranks}.json"
    p = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(d), "-f", "json", "-o", str(out),
                        "--no-store", "--jobs", "2"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench_json_writer: analyze failed:\n{p.stderr[-2000:]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", nargs="?", type=Path, help="a JSON report (else --ranks generates one)")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="work here (generated job and report) instead of a temporary folder")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="bench-json-"))
    work.mkdir(parents=True, exist_ok=True)
    report = a.report or generated_report(a.ranks, work)
    size = report.stat().st_size
    file_sha = hashlib.sha256(report.read_bytes()).hexdigest()
    print(f"document: {report} ({size / 1e6:.1f} MB of JSON)")
    got = {}
    for which in ("stdlib", "msgspec", "scan"):
        r = got[which] = child(which, report, a.repeat if which != "stdlib" else max(1, a.repeat // 2))
        same = "" if which == "scan" else f"  identical to the report file: {r['sha256'] == file_sha}"
        print(f"  {which:8s} cpu {r['cpu_s']:7.3f} s  wall {r['wall_s']:7.3f} s  "
              f"RSS before {r['rss_before_mb']:7.1f} MB"
              f"  peak {r['peak_mb']:7.1f} MB (+{r['peak_mb'] - r['rss_before_mb']:.1f} MB){same}", flush=True)
    s, m = got["stdlib"], got["msgspec"]
    print(f"  msgspec writer vs stdlib: {s['cpu_s'] / m['cpu_s']:.1f}x less CPU, {s['wall_s'] / m['wall_s']:.1f}x "
          f"faster; memory above the document {s['peak_mb'] - s['rss_before_mb']:.0f} MB -> "
          f"{m['peak_mb'] - m['rss_before_mb']:.0f} MB; the scan is {got['scan']['cpu_s'] / m['cpu_s'] * 100:.0f}% "
          "of the writer's CPU")


if __name__ == "__main__":
    main()
