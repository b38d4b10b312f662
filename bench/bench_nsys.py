#!/usr/bin/env python3
"""Benchmark: traceview's Nsight Systems loading (+ the step breakdown, where it exists) against
`nsys stats --report cuda_gpu_kern_sum` on the same SQLite export. Each runs in its own process;
wall time is measured around the process, peak RSS from that process's rusage (os.wait4, which
also covers the helpers it waited for, e.g. the Python that `nsys stats` starts).

    python bench/bench_nsys.py                  # largest corpus export with kernels
    python bench/bench_nsys.py --scale 100      # the same export, its activity repeated 100 times
    python bench/bench_nsys.py --file my.sqlite
    python bench/bench_nsys.py --vs-read-once 1,100 --repeat 5   # issue targets, see below

`--vs-read-once SCALES` runs, for h100_2gpu_train_a2a at each scale (or --file), interleaved
repeats of four whole processes: `traceview analyze --no-store -f json` (report to /dev/null), the
nsys parser alone (`parse`: the canonical tables, no analysis), the read-once floor (every table the
nsys parser reads, read once through ADBC into Arrow, `SELECT *`) and the bare imports of analyze
(the fixed RSS of the process); it prints medians of wall, CPU and peak RSS, the ratios analyze /
read-once and parse / read-once (time) and peak / export size (memory, also net of the imports),
so the cost splits between the parser and the analysis, and the us per GPU activity.

`--scale N` builds a temporary copy whose kernels, memcpys, memsets, runtime calls, NVTX ranges and
syncs are repeated N times, shifted in time (and correlation ids) past the original window, so
the file looks like a longer capture of the same job (the sizes of real multi-GB exports).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bytecode  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "traces" / "nsys"
SCALED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from traceview.load import load
t1 = time.perf_counter()
prof = load([sys.argv[1]])
t2 = time.perf_counter()
out = {"import_s": t1 - t0, "load_s": t2 - t1, "ranks": prof.ranks,
       "rows": {n: getattr(prof, n).num_rows for n in ("gpu_activities", "cpu_ranges", "launches", "syncs")}}
try:
    from traceview.document.assemble import assemble
except ImportError:
    assemble = None
if assemble is not None and sys.argv[2] == "1":
    doc = assemble(prof)
    out["breakdown_s"] = time.perf_counter() - t2
    out["steps"] = doc["summary"].get("steps")
print(json.dumps(out))
"""


# every table parsers/nsys.py reads (the ENUM_* tables too, when present)
USED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER", "NVTX_EVENTS",
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "StringIds", "TARGET_INFO_GPU",
        "TARGET_INFO_SESSION_START_TIME", "META_DATA_CAPTURE", "META_DATA_EXPORT", "EXPORT_META_DATA",
        "TARGET_INFO_SYSTEM_ENV", "ENUM_NSYS_EVENT_TYPE", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND",
        "ENUM_CUPTI_SYNC_TYPE", "ENUM_NSYS_EVENT_CLASS")

READ_ONCE = r"""
import sys
import adbc_driver_sqlite.dbapi as db
con = db.connect(f"file:{sys.argv[1]}?mode=ro")
cur = con.cursor()
have = {r[0] for r in cur.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()}
n = 0
for t in sys.argv[2].split(","):
    if t in have:
        cur.execute(f'SELECT * FROM "{t}"')
        n += cur.fetch_arrow_table().num_rows
print(n)
"""

PARSE = "import sys\nfrom traceview.parsers import nsys\nnsys.read(sys.argv[1])\n"

IMPORTS = ("import traceview.cli, traceview.runs, traceview.parsers.nsys, traceview.reports, "
           "traceview.reports.json_report")


def kernel_count(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        con.close()


def largest_with_kernels() -> Path:
    files = sorted(CORPUS.glob("*.sqlite"), key=lambda p: p.stat().st_size, reverse=True)
    for f in files:
        if kernel_count(f):
            return f
    sys.exit(f"no export with kernels under {CORPUS}")


def scaled_copy(src: Path, n: int, workdir: Path) -> Path:
    """A copy of `src` with its activity repeated n times (SQL INSERT ... SELECT, in SQLite)."""
    dst = workdir / f"{src.stem}.x{n}.sqlite"
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    lo, hi, corr = None, None, 0
    for t in SCALED:
        if t in tables:
            a, b = con.execute(f'SELECT min(start), max(coalesce("end", start)) FROM {t}').fetchone()
            if a is not None:
                lo, hi = min(a, lo if lo is not None else a), max(b, hi if hi is not None else b)
            if "correlationId" in {r[1] for r in con.execute(f"PRAGMA table_info({t})")}:
                corr = max(corr, con.execute(f"SELECT coalesce(max(correlationId), 0) FROM {t}").fetchone()[0])
    if lo is None or hi is None:
        sys.exit(f"{src}: no timed rows to repeat")
    span, corr = hi - lo + 1, corr + 1
    for t in SCALED:
        if t not in tables:
            continue
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({t})")]
        shift = {"start": "start + {k} * :span", "end": '"end" + {k} * :span',
                 "correlationId": "correlationId + {k} * :corr"}
        quoted = ", ".join(f'"{c}"' for c in cols)
        for k in range(1, n):
            sel = ", ".join(shift[c].format(k=k) if c in shift else f'"{c}"' for c in cols)
            con.execute(f"INSERT INTO {t} ({quoted}) SELECT {sel} FROM {t} WHERE rowid <= :n0",
                        {"span": span, "corr": corr, "n0": _rows0(con, t)})
    con.commit()
    con.close()
    return dst


_N0: dict[str, int] = {}


def _rows0(con, t):
    if t not in _N0:
        _N0[t] = con.execute(f"SELECT max(rowid) FROM {t}").fetchone()[0] or 0
    return _N0[t]


def run(cmd: list[str]) -> dict:
    """Run one process; reap it with wait4 to get its own rusage (peak RSS)."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t
        fo.seek(0)
        fe.seek(0)
        return {"wall_s": wall, "rc": p.returncode, "maxrss_mib": ru.ru_maxrss / 1024,
                "stdout": fo.read().decode(errors="replace"), "stderr": fe.read().decode(errors="replace")}


def gpu_count(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    n = 0
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        try:
            n += con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        except sqlite3.Error:
            pass
    con.close()
    return n


def measure(cmd: list[str]) -> dict:
    """One whole process: wall, CPU (user + sys) and peak RSS (MiB) from its rusage."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fe, stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        fe.seek(0)
        err = fe.read().decode(errors="replace").strip().splitlines()
    return {"wall": time.perf_counter() - t, "cpu": ru.ru_utime + ru.ru_stime, "rss": ru.ru_maxrss / 1024,
            "rc": os.waitstatus_to_exitcode(status), "err": err[-1][:160] if err else ""}


def vs_read_once(src: Path, scales: list[int], repeat: int, workdir: Path) -> None:
    """The issue's nsys targets: analyze <= 2x the read-once, peak RSS <= 2x the export."""
    import statistics
    for scale in scales:
        _N0.clear()
        db = scaled_copy(src, scale, workdir) if scale > 1 else src
        size = db.stat().st_size / 2**20
        n_gpu = gpu_count(db)
        cmds = {"analyze": [sys.executable, "-m", "traceview", "analyze", "--no-store", "-f", "json", str(db)],
                "parse": [sys.executable, "-c", PARSE, str(db)],
                "read-once": [sys.executable, "-c", READ_ONCE, str(db), ",".join(USED)],
                "imports": [sys.executable, "-c", IMPORTS]}
        runs: dict[str, list[dict]] = {k: [] for k in cmds}
        for _ in range(repeat):  # interleaved: each round runs every command once
            for k, c in cmds.items():
                runs[k].append(measure(c))
        med = {}
        for k, rs in runs.items():
            ok = [r for r in rs if r["rc"] == 0]
            if not ok:
                sys.exit(f"{k} failed on {db}: rc {rs[0]['rc']}: {rs[0]['err']}")
            med[k] = {m: statistics.median(r[m] for r in ok) for m in ("wall", "cpu", "rss")}
        print(f"{src.name} x{scale}: {size:.1f} MiB export, {n_gpu} GPU activities; medians of {repeat} "
              "interleaved runs")
        for k, r in med.items():
            print(f"  {k:10s} wall {r['wall']:7.2f} s  cpu {r['cpu']:7.2f} s  peak RSS {r['rss']:7.0f} MiB")
        a, ro, imp, pa_ = med["analyze"], med["read-once"], med["imports"], med["parse"]
        for name, r in (("analyze", a), ("parse", pa_)):
            print(f"  {name} / read-once: wall {r['wall'] / ro['wall']:.2f}x, cpu {r['cpu'] / ro['cpu']:.2f}x "
                  "(target for analyze <= 2x)")
        for name, r in (("analyze", a), ("parse", pa_)):
            print(f"  {name} peak RSS / export size: {r['rss'] / size:.2f}x; net of the imports "
                  f"({imp['rss']:.0f} MiB): {(r['rss'] - imp['rss']) / size:.2f}x (target for analyze <= 2x)")
        print(f"  analysis after the parse: cpu {a['cpu'] - pa_['cpu']:.2f} s of {a['cpu']:.2f} s")
        print(f"  analyze {a['wall'] / max(n_gpu, 1) * 1e6:.2f} us wall per GPU activity")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", type=Path, help="SQLite export (default: largest corpus export with kernels)")
    ap.add_argument("--scale", type=int, default=1, help="repeat the export's activity N times")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command (best wall time kept)")
    ap.add_argument("--no-breakdown", action="store_true", help="time the load only")
    ap.add_argument("--vs-read-once", metavar="SCALES",
                    help="comma-separated scales (e.g. 1,100): analyze vs the read-once floor, interleaved")
    args = ap.parse_args()
    print(bytecode.prepare(sys.executable))
    if args.vs_read_once:
        src = args.file or CORPUS / "h100_2gpu_train_a2a_2026.2.sqlite"
        with tempfile.TemporaryDirectory(prefix="bench-nsys-") as tmp:
            vs_read_once(src, [int(x) for x in args.vs_read_once.split(",") if x], args.repeat, Path(tmp))
        return
    src = args.file or largest_with_kernels()
    with tempfile.TemporaryDirectory(prefix="bench-nsys-") as tmp:
        db = scaled_copy(src, args.scale, Path(tmp)) if args.scale > 1 else src
        size = db.stat().st_size / 2**20
        print(f"file: {db.name}  ({size:.1f} MiB, {kernel_count(db)} kernels; from {src})")
        results = {}
        tv = [sys.executable, "-c", CHILD, str(db), "0" if args.no_breakdown else "1"]
        results["traceview"] = best([run(tv) for _ in range(args.repeat)])
        nsys = shutil.which("nsys")
        if nsys is None:
            print("nsys stats: not run (nsys not installed; .ci/install-nsys.sh)")
        else:
            version = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip()
            for report in ("cuda_gpu_kern_sum", "gpukernsum"):  # 'gpukernsum' is the pre-2023 name
                cmd = [nsys, "stats", "--report", report, "--format", "csv", "--output", "-", str(db)]
                r = best([run(cmd) for _ in range(args.repeat)])
                ok = r["rc"] == 0 and "could not be found" not in r["stdout"] + r["stderr"]
                if ok:
                    results[f"nsys stats {report}"] = r
                    break
                print(f"nsys stats --report {report}: cannot ({version}): "
                      + _last_line(r["stderr"] + "\n" + r["stdout"]))
        for name, r in results.items():
            line = f"{name:32s} wall {r['wall_s']:7.2f} s   peak RSS {r['maxrss_mib']:8.1f} MiB   rc {r['rc']}"
            if name == "traceview" and r["rc"] == 0:
                info = json.loads(r["stdout"].strip().splitlines()[-1])
                line += (f"   (import {info['import_s']:.2f} s, load {info['load_s']:.2f} s"
                         + (f", breakdown {info['breakdown_s']:.2f} s" if "breakdown_s" in info else "")
                         + f"; rows {info['rows']})")
            elif r["rc"] != 0:
                line += "   " + _last_line(r["stderr"])
            print(line)


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: (r["rc"] != 0, r["wall_s"]))


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if "error" in ln.lower()]
    return (errs or lines or ["(no output)"])[-1][:200]


if __name__ == "__main__":
    main()
