#!/usr/bin/env python3
"""Speed and memory of whole-process `traceview analyze -f json` against its floor and its peers,
side by side in one run, on traces from 1x to 50x (the real traces' steps replicated).

Kineto (h200_moe/overlap replicated FACTOR times, bench/replicate.py):
  traceview  `traceview analyze TRACE --no-store -f json -o /dev/null` (whole process; without the store,
             whose kept document would answer every run after the first)
  parse      the Kineto parser alone (kineto.read), whole process
  floor      gunzip (the parser's inflater) + typed msgspec decode of every event into the fields traceview
             reads (kineto_events.TypedTrace, all events at once), whole process
  hta        Holistic Trace Analysis: load + temporal breakdown + comm/comp overlap, whole process, run with
             the interpreter given by --hta-python (a venv with `holistictraceanalysis` and pandas<3); skipped
             when absent
nsys (h100_2gpu_train_a2a, x1 and x100, bench/bench_nsys.py's scaled copy):
  traceview  as above
  read-once  every table traceview uses read once through ADBC into Arrow, whole process

Kineto hta_df_index_resolver: traceview against HTA, whole processes. `traceview --help`: whole process.

Memory is the larger of the largest process's peak RSS and the whole process tree's peak (RSS summed
over every process, shared library pages once per process, plus what it put in /dev/shm, sampled
every 20 ms): work split over processes is
charged in full.

Each command runs --repeat times, interleaved (A B C A B C ...), every Kineto factor's commands in one
round (the cost per GPU activity compares factors: a host drifting in speed over the run weighs on all
alike); the medians are printed with the ratios and the microseconds per GPU activity, then the targets
side by side (issue "Done when"): the Kineto ones after the Kineto runs, the nsys ones (analyze within
2x of the read-once, a peak of at most 2x the export) at the end. The comparisons with HTA are printed
twice: the ratio of the two medians, and the median of the rounds' own ratios (each round's HTA run
over the traceview run beside it: a machine whose speed drifts between rounds weighs on the first,
not on the second).

    python bench/bench_speed.py [--factors 5,10,25,34,50] [--target 34] [--hta-factors 34] [--nsys-scales 1,100]
                                [--hta-python PY] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Hashable, TypeVar

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRACES = ROOT.parent / "shared" / "traces"
sys.path.insert(0, str(HERE))
import bench_nsys  # type: ignore[import-not-found]  # noqa: E402
import bytecode  # type: ignore[import-not-found]  # noqa: E402
import replicate  # type: ignore[import-not-found]  # noqa: E402

K = TypeVar("K", bound=Hashable)

FLOOR_KINETO = r"""
import sys, msgspec
from traceview.parsers import bounded_read, kineto_events
raw = bounded_read.read_bytes(sys.argv[1])  # gunzip with the parser's inflater (ISA-L where installed)
n = len(msgspec.json.decode(raw, type=kineto_events.TypedTrace).traceEvents)  # every event, fields used
print(n)
"""

PARSE_KINETO = r"""
import sys
from traceview.parsers import kineto_helper
kineto_helper.note_start()  # a core idle for the helper judged as the command judges it (since its start),
# not by the last minute's load average, which the bench's own runs keep near 2: the parse then ran on one core
from traceview.parsers import kineto
p = kineto.read(sys.argv[1])  # the parser alone: streamed inflate + decode into the canonical tables
print(p.gpu_activities.num_rows)
"""

HTA = r"""
import os, shutil, sys, tempfile, warnings
warnings.filterwarnings("ignore")
d = tempfile.mkdtemp()
os.symlink(os.path.abspath(sys.argv[1]), os.path.join(d, "rank0.json.gz"))
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=d)
ta.get_temporal_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
print("ok")
"""

READ_ONCE = r"""
import sys
import adbc_driver_sqlite.dbapi as db
con = db.connect(f"file:{sys.argv[1]}?mode=ro")
cur = con.cursor()
tables = [r[0] for r in cur.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()]
want = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "StringIds",
        "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE", "ThreadNames", "META_DATA_CAPTURE"]
n = 0
for t in want:
    if t in tables:
        cur.execute(f"SELECT * FROM {t}")
        n += cur.fetch_arrow_table().num_rows
print(n)
"""


def _tree(pid: int) -> list[int]:
    """pid and every process descended from it (threads' children included)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return out


def _rss_mib(pid: int) -> float:
    """A process's resident set now (/proc/PID/statm: cheap to read, unlike smaps' PSS, whose page
    walk of a GB-sized process every few ms would take a core from the command measured)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def _shm_used_mib() -> float:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return 0.0
    return (st.f_blocks - st.f_bfree) * st.f_frsize / 2**20


def measure(cmd: list[str]) -> dict:
    """Wall, CPU (the process and its children) and memory of one command. Memory two ways: `rss`, the
    largest process's peak RSS (ru_maxrss); `tree`, the peak of the whole process tree's RSS summed
    plus what it put in /dev/shm, sampled every 20 ms (a command that works in several processes, or
    keeps data in memory-backed files, is charged for all of it; pages the processes share, such as
    their libraries, are counted once per process: an upper bound). `mem` is the larger."""
    t = time.perf_counter()
    shm0 = _shm_used_mib()
    peak = [0.0]
    done = threading.Event()
    with tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fe, stdin=subprocess.DEVNULL)

        def sample() -> None:
            while not done.wait(0.02):
                used = sum(_rss_mib(q) for q in _tree(p.pid)) + max(0.0, _shm_used_mib() - shm0)
                peak[0] = max(peak[0], used)
        th = threading.Thread(target=sample, daemon=True)
        th.start()
        _, status, ru = os.wait4(p.pid, 0)
        done.set()
        th.join()
        fe.seek(0)
        err = fe.read().decode(errors="replace").strip().splitlines()
    rss = ru.ru_maxrss / 1024
    return {"wall": time.perf_counter() - t, "cpu": ru.ru_utime + ru.ru_stime, "rss": rss, "tree": peak[0],
            "mem": max(rss, peak[0]), "rc": os.waitstatus_to_exitcode(status), "err": err[-1][:160] if err else ""}


def interleaved(cmds: dict[K, list[str]], repeat: int) -> dict[K, dict]:
    runs: dict[K, list[dict]] = {k: [] for k in cmds}
    for _ in range(repeat):
        for k, c in cmds.items():
            runs[k].append(measure(c))
    out: dict[K, dict] = {}
    for k, rs in runs.items():
        ok = [r for r in rs if r["rc"] == 0]
        if not ok:
            out[k] = {"error": f"rc {rs[0]['rc']}: {rs[0]['err']}"}
            continue
        out[k] = {m: statistics.median(r[m] for r in ok) for m in ("wall", "cpu", "rss", "tree", "mem")}
        out[k]["walls"] = [r["wall"] if r["rc"] == 0 else None for r in rs]   # in run order (paired)
    return out


def show(label: str, res: dict[str, dict], base: str, n_gpu: int, extra: str = "") -> None:
    print(f"{label}{extra}")
    b = res.get(base, {})
    for k, r in res.items():
        if "error" in r:
            print(f"  {k:10s} unavailable ({r['error']})")
            continue
        line = (f"  {k:10s} wall {r['wall']:7.2f} s  cpu {r['cpu']:7.2f} s  memory {r['mem']:6.0f} MiB "
                f"(largest RSS {r['rss']:5.0f}, tree {r['tree']:5.0f})")
        if k == base:
            if n_gpu:
                line += (f"  {r['wall'] / n_gpu * 1e6:7.2f} us (cpu {r['cpu'] / n_gpu * 1e6:6.2f} us) "
                         "per GPU activity")
        elif "error" not in b:
            line += f"  traceview / {k}: time {b['wall'] / r['wall']:5.2f}x, memory {b['mem'] / r['mem']:4.2f}x"
        print(line)


def _ratio(a: dict, b: dict, m: str) -> float | None:
    if not a or not b or "error" in a or "error" in b:
        return None
    return a[m] / b[m]


def paired(a: dict | None, b: dict | None) -> float | None:
    """The median over the rounds of an interleaved run of a's wall over b's in the same round (the
    rounds where both ran): each pair ran side by side, so a drift of the machine's speed between
    rounds cancels in it, where the ratio of the two medians keeps it."""
    if not a or not b or "error" in a or "error" in b:
        return None
    got = [x / y for x, y in zip(a.get("walls", []), b.get("walls", []), strict=False) if x and y]
    return statistics.median(got) if got else None


def linearity(points: dict[int, tuple[int, float, float]], within: float = 1.3) -> dict:
    """How the Kineto runs grow with the trace: `points` {factor: (GPU activities, wall s, cpu s)}.
    Returns, over the factors from 5 up:
      - `steps`: the marginal cost of each step between consecutive factors, us per added GPU
        activity (wall, cpu): the time the larger trace took beyond the smaller one over the
        activities it added; their max/min (`step_ratio_wall`, `step_ratio_cpu`) is linearity read
        without the process's fixed cost;
      - `fixed_s`, `slope_us`: the least-squares line wall = fixed + slope x activities;
      - `fixed_allowed_s`: the fixed cost at which that line's wall per activity would be flat within
        `within` between the smallest and the largest trace (F/N_min + s <= within x (F/N_max + s)).
    Empty where fewer than two factors of 5 and up were measured."""
    pts = sorted((n, w, c) for f, (n, w, c) in points.items() if f >= 5)
    if len(pts) < 2:
        return {}
    steps = [((w1 - w0) / (n1 - n0) * 1e6, (c1 - c0) / (n1 - n0) * 1e6)
             for (n0, w0, c0), (n1, w1, c1) in zip(pts, pts[1:], strict=False) if n1 > n0]
    ns, ws = [p[0] for p in pts], [p[1] for p in pts]
    mn, mw = sum(ns) / len(ns), sum(ws) / len(ws)
    sxx = sum((n - mn) ** 2 for n in ns)
    slope = sum((n - mn) * (w - mw) for n, w in zip(ns, ws, strict=True)) / sxx if sxx else float("nan")
    fixed = mw - slope * mn
    lo, hi = ns[0], ns[-1]
    room = 1 / lo - within / hi
    out = {"steps": steps, "fixed_s": fixed, "slope_us": slope * 1e6,
           "fixed_allowed_s": (within - 1) * slope / room if room > 0 else float("inf")}
    walls, cpus = [x[0] for x in steps], [x[1] for x in steps]
    if steps and min(walls) > 0:
        out["step_ratio_wall"] = max(walls) / min(walls)
    if steps and min(cpus) > 0:
        out["step_ratio_cpu"] = max(cpus) / min(cpus)
    return out


def show_linearity(points: dict[int, tuple[int, float, float]]) -> None:
    got = linearity(points)
    if not got:
        return
    facs = sorted(f for f in points if f >= 5)
    print("linearity (Kineto, the factors from x5):")
    for (f0, f1), (w, c) in zip(zip(facs, facs[1:], strict=False), got["steps"], strict=False):
        print(f"  x{f0} -> x{f1}: {w:6.2f} us (cpu {c:6.2f} us) per added GPU activity")
    if "step_ratio_wall" in got:
        print(f"  marginal cost max/min: wall {got['step_ratio_wall']:.2f}, "
              f"cpu {got.get('step_ratio_cpu', float('nan')):.2f}")
    print(f"  least squares: wall = {got['fixed_s']:.3f} s + {got['slope_us']:.2f} us x GPU activities; "
          f"wall per activity within 1.3x over x{facs[0]}..x{facs[-1]} needs a fixed cost of at most "
          f"{got['fixed_allowed_s']:.3f} s")


def targets(summary: dict) -> None:
    """The Kineto targets side by side: figure reached, target, met or not."""
    rows = []
    if "target" in summary:
        f, gz, raw_mb, res = summary["target"]
        tv, fl, hta = res.get("traceview"), res.get("floor"), res.get("hta")
        rows.append((f"x{f} ({gz:.0f} MiB gz): analyze / floor (wall)", _ratio(tv, fl, "wall"), "<= 3",
                     lambda v: v <= 3))
        rows.append((f"x{f}: HTA / analyze (wall)", _ratio(hta, tv, "wall"), ">= 10", lambda v: v >= 10))
        rows.append((f"x{f}: HTA / analyze (wall), median of the rounds' pairs", paired(hta, tv), ">= 10",
                     lambda v: v >= 10))
        rows.append((f"x{f}: analyze memory / HTA memory", _ratio(tv, hta, "mem"), "<= 0.5", lambda v: v <= 0.5))
        per_json = tv["mem"] / raw_mb if tv and "error" not in tv else None
        rows.append((f"x{f}: analyze memory / decompressed JSON", per_json, "<= 1.5", lambda v: v <= 1.5))
    if "df" in summary:
        df = summary["df"]
        rows.append(("hta_df_index_resolver: HTA / analyze (wall)", _ratio(df.get("hta"), df.get("traceview"), "wall"),
                     ">= 5", lambda v: v >= 5))
        rows.append(("hta_df_index_resolver: the same, median of the rounds' pairs",
                     paired(df.get("hta"), df.get("traceview")), ">= 5", lambda v: v >= 5))
    points = {f: p for f, p in summary.get("points", {}).items() if f >= 5}   # (activities, wall, cpu)
    per = {f: w / n * 1e6 for f, (n, w, _) in points.items()}
    if len(per) > 1:
        rows.append((f"us per GPU activity, max/min over x{min(per)}..x{max(per)}",
                     max(per.values()) / min(per.values()), "<= 1.3", lambda v: v <= 1.3))
    per_cpu = {f: c / n * 1e6 for f, (n, _, c) in points.items()}
    if len(per_cpu) > 1:
        rows.append((f"cpu us per GPU activity, max/min over x{min(per_cpu)}..x{max(per_cpu)}",
                     max(per_cpu.values()) / min(per_cpu.values()), "<= 1.3", lambda v: v <= 1.3))
    rows.append(("traceview --help (s)", summary.get("help"), "< 0.2", lambda v: v < 0.2))
    _print_targets("targets:", rows)


def _print_targets(title: str, rows: list) -> None:
    print(title)
    for label, v, want, ok in rows:
        shown = "n/a" if v is None else f"{v:.2f}"
        verdict = "" if v is None else ("met" if ok(v) else "NOT met")
        print(f"  {label:58s} {shown:>7s}  target {want:7s} {verdict}")


def nsys_target_rows(nsys: dict) -> list:
    """The nsys targets of each scale of the export ({scale: (its runs, the export's MiB)}): analyze
    within 2x of the read-once's wall, and a peak of at most 2x the export's size; rows of
    (label, figure or None, target, test)."""
    rows = []
    for s, (res, size_mb) in sorted(nsys.items()):
        tv = res.get("traceview")
        rows.append((f"nsys x{s}: analyze / read-once (wall)", _ratio(tv, res.get("read-once"), "wall"), "<= 2",
                     lambda v: v <= 2))
        per_export = tv["mem"] / size_mb if tv and "error" not in tv and size_mb else None
        rows.append((f"nsys x{s}: analyze memory / export size", per_export, "<= 2", lambda v: v <= 2))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--factors", default="5,10,25,34,50")
    ap.add_argument("--target", type=int, default=34, help="the factor of the ~50 MB-gz trace the targets use")
    ap.add_argument("--hta-factors", default="34", help="factors HTA also runs on (it is slow)")
    ap.add_argument("--no-df", action="store_true", help="skip hta_df_index_resolver")
    ap.add_argument("--nsys-scales", default="1,100")
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", ""))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="folder to keep (and reuse) the generated traces in")
    args = ap.parse_args()
    tv = shutil.which("traceview") or sys.exit("traceview not on PATH")
    src = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"
    tmpctx = tempfile.TemporaryDirectory(prefix="bench-speed-")
    work = args.keep or Path(tmpctx.name)
    work.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores; medians of {args.repeat} interleaved runs")
    hta_factors = {int(x) for x in args.hta_factors.split(",") if x}
    summary: dict = {}
    n_help = max(args.repeat, 10)
    # the kept copy of the help text (help_cache.py; its first run renders it), the rendering itself
    # (a cache folder below a plain file can be neither read nor written), and the interpreter's
    # own start-up with its site-packages, for scale
    blocker = work / "help-cache-blocker"
    blocker.write_text("")
    with open(tv, "rb") as fh:
        first = fh.readline().decode(errors="replace")
    interp = first[2:].strip() if first.startswith("#!") and " " not in first[2:].strip() else sys.executable
    print(bytecode.prepare(interp))
    help_all = interleaved({"help": [tv, "--help"],
                            "rendered": ["env", f"TRACEVIEW_CACHE_DIR={blocker}/x", tv, "--help"],
                            "python": [interp, "-c", "pass"]}, n_help)
    help_res = help_all["help"]
    summary["help"] = help_res.get("wall")
    nan = float("nan")
    for k, label in (("help", "traceview --help"), ("rendered", "  rendered (no copy)"),
                     ("python", "  python -c pass")):
        r = help_all[k]
        print(f"{label}: wall {r.get('wall', nan):.3f} s, cpu {r.get('cpu', nan):.3f} s")
    print(f"  (medians of {n_help}; wall is cpu plus waiting for a core on a busy machine)")
    # Every factor's commands run in one interleaved round (x5's, x10's, ... then again): the cost per
    # GPU activity compares the factors, and a host whose speed drifts over the run (it does, by a
    # third) then weighs on every factor alike instead of on the factors measured last.
    factors = [int(x) for x in args.factors.split(",") if x]
    paths: dict[int, Path] = {}
    counts: dict[int, dict] = {}
    kcmds: dict[tuple[int, str], list[str]] = {}
    for f in factors:
        path = paths[f] = work / f"overlap_x{f}.json.gz"
        got = replicate.replicate(src, f, path) if not path.exists() else None
        counts[f] = got if got is not None else {"gpu_activities": 7380 * f}
        kcmds[(f, "traceview")] = [tv, "analyze", str(path), "--no-store", "-f", "json", "-o", os.devnull]
        kcmds[(f, "parse")] = [sys.executable, "-c", PARSE_KINETO, str(path)]
        kcmds[(f, "floor")] = [sys.executable, "-c", FLOOR_KINETO, str(path)]
        if args.hta_python and f in hta_factors:
            kcmds[(f, "hta")] = [args.hta_python, "-c", HTA, str(path)]
    every = interleaved(kcmds, args.repeat)
    for f in factors:
        path = paths[f]
        res = {name: r for (g, name), r in every.items() if g == f}
        with replicate.gzip.open(path, "rb") as fh:
            raw_mb = sum(len(b) for b in iter(lambda: fh.read(1 << 24), b"")) / 2**20
        show(f"kineto h200_moe/overlap x{f}", res, "traceview", counts[f]["gpu_activities"],
             f" ({path.stat().st_size / 2**20:.1f} MiB gz, {raw_mb:.0f} MiB JSON, "
             f"{counts[f]['gpu_activities']:,} GPU activities)")
        if "error" not in res["traceview"]:
            print(f"  traceview memory / decompressed JSON: {res['traceview']['mem'] / raw_mb:.2f}")
        if "error" not in res["parse"]:
            print(f"  parser memory / decompressed JSON: {res['parse']['mem'] / raw_mb:.2f}")
            summary.setdefault("points", {})[f] = (counts[f]["gpu_activities"], res["traceview"]["wall"],
                                                   res["traceview"]["cpu"])
            if f == args.target:
                summary["target"] = (f, path.stat().st_size / 2**20, raw_mb, res)
    if not args.no_df:
        df = TRACES / "kineto" / "hta_df_index_resolver" / "df_index_resolver.json.gz"
        cmds = {"traceview": [tv, "analyze", str(df), "--no-store", "-f", "json", "-o", os.devnull]}
        if args.hta_python:
            cmds["hta"] = [args.hta_python, "-c", HTA, str(df)]
        res = interleaved(cmds, args.repeat)
        show("kineto hta_df_index_resolver", res, "traceview", 0)
        summary["df"] = res
    show_linearity(summary.get("points", {}))
    targets(summary)
    a2a = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
    nsys: dict = {}
    for s in [int(x) for x in args.nsys_scales.split(",") if x]:
        if not a2a.exists():
            print(f"nsys: {a2a} missing")
            break
        bench_nsys._N0.clear()
        db = bench_nsys.scaled_copy(a2a, s, work) if s > 1 else a2a
        n = bench_nsys.kernel_count(db)
        # --no-store as for Kineto: with a store, every run after the first is served its kept report
        env_cache = tempfile.mkdtemp(prefix="tv-cache-", dir=work)
        cmds = {"traceview": ["env", f"TRACEVIEW_CACHE_DIR={env_cache}", tv, "analyze", str(db), "--no-store",
                              "-f", "json", "-o", os.devnull],
                "read-once": [sys.executable, "-c", READ_ONCE, str(db)]}
        res = interleaved(cmds, args.repeat)
        show(f"nsys h100_2gpu_train_a2a x{s}", res, "traceview", n,
             f" ({db.stat().st_size / 2**20:.1f} MiB export, {n:,} kernels)")
        if "error" not in res["traceview"]:
            print(f"  traceview memory / export size: {res['traceview']['mem'] / (db.stat().st_size / 2**20):.2f}")
        nsys[s] = (res, db.stat().st_size / 2**20)
    if nsys:
        _print_targets("nsys targets:", nsys_target_rows(nsys))
    tmpctx.cleanup()


if __name__ == "__main__":
    main()
