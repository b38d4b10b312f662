"""Jobs of many ranks: a generated MoE job (fixtures/moe_job.py) of 64 and 1,024 ranks analyzed with
`--jobs 1` and `--jobs 2`, a first run (empty store) and a second from the store (the same command, and
with --jobs 2 to another -o path); and the 8-rank DLRM job.

    python bench/bench_ranks.py [--ranks 64 1024] [--dlrm] [--keep DIR]

Each analyze runs in a child process (`traceview analyze DIR -f json`, as the command runs); printed
per run: wall time, CPU time (the child and its workers: steadier than wall on a loaded machine),
time per rank, the analyzing process's peak RSS and the largest peak RSS of its worker processes
(its VmHWM; getrusage RUSAGE_CHILDREN), then the ratios side by side: --jobs 2 vs --jobs 1, first
run vs from the store, and 1,024 vs 64 ranks (peak RSS, time per rank). Every run's report must be
byte-identical to the others of that job, and the planted straggler and slow expert layer are
checked against the numbers the generator planted.

    python bench/bench_ranks.py --ranks 64 1024 --cores 1 2 4 8 16 [--rounds 1]

only first runs, one with each --jobs given: how the job's time falls with the cores used (on a
machine of that many cores; `taskset -c 0,1 ...` makes a 2-core machine of a larger one).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fixtures import moe_job  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bytecode  # type: ignore[import-not-found]  # noqa: E402

DLRM = ROOT.parent / "shared" / "traces" / "kineto" / "dlrm_8rank_v100"

# Every process's CPU seconds once the command is done: this one's, its reaped children's (a pool of
# forked workers), and each child still running with what it reaped (a forkserver and the workers it
# forked, which this process never reaps: RUSAGE_CHILDREN alone misses them).
_TREE_CPU = """
def tree_cpu():
    import os, resource, time
    def live_children():
        out = []
        for pid in os.listdir("/proc"):
            try:
                f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if pid.isdigit() and int(f[1]) == os.getpid():
                out.append(f)
        return out
    if live_children():                   # a forkserver reaps its workers when they have exited
        time.sleep(0.3)                   # (only then: the command's wall would carry the wait)
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    tick = os.sysconf("SC_CLK_TCK")
    live = sum(sum(int(x) for x in f[11:15]) / tick for f in live_children())
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, live
"""

_RUNNER = _TREE_CPU + """
import resource, sys, time
t = time.perf_counter()
from traceview import launch
launch.one_blas_thread()            # as the command does first (else numpy's OpenBLAS thread: no fork)
from traceview import replay        # as the `traceview` command runs (launch.main): a repeat is replayed
replay.INVOCATION = sys.argv[1:]
rc = replay.try_replay(sys.argv[1:])
if rc is None:
    try:                            # malloc keeps the pages the run frees, as launch.main does (a newer tree)
        from traceview.heap import keep_heap
        keep_heap()
    except ImportError:
        pass
    from traceview import cli_common
    cli_common.IN_CLI = True        # (cli.main() sets it)
    try:                            # a plain analyze read without typer, as launch.main does (a newer tree)
        from traceview.analyze_cli import run_plain
        rc = run_plain(sys.argv[1:])
    except ImportError:
        pass
if rc is None:
    from traceview.cli import run_cli
    rc = run_cli(sys.argv[1:])
wall = time.perf_counter() - t
# this process's own peak: VmHWM, the high-water mark of the memory it has since exec. Not ru_maxrss:
# Linux carries into it the peak of the process that forked (or vforked) this one before its exec,
# and that was the bench's own process, holding an earlier run's 1 GB report (1,024 ranks)
me = next((int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:")),
          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
own, reaped, live = tree_cpu()
print(f"BENCH {rc} {wall:.3f} {me} {kids} {own:.3f} {reaped + live:.3f}", file=sys.stderr)
getattr(launch, "exit_now", sys.exit)(rc)   # as the command ends (launch.main; an older tree: sys.exit)
"""


# --split: the same command with its stages timed in the analyzing process (wall and CPU seconds
# of this process) and every worker task's CPU (executors.timed); nothing of the tool is changed.
_SPLIT_RUNNER = _TREE_CPU + """
import time, sys
T0, C0 = time.perf_counter(), time.process_time()
from traceview import launch
launch.one_blas_thread()            # as the command does first (launch.main)
try:                                # malloc keeps the pages the run frees, as launch.main does (a newer tree)
    from traceview.heap import keep_heap
    keep_heap()
except ImportError:
    pass
SPANS = []
def span(name, fn):
    def wrapped(*a, **k):
        w, c = time.perf_counter(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            SPANS.append((name, w - T0, time.perf_counter() - w, time.process_time() - c, c - C0))
    return wrapped
from traceview import cli_common
from traceview.cli import run_cli
SPANS.append(("imports (cli)", 0.0, time.perf_counter() - T0, time.process_time() - C0, 0.0))
from traceview import executors, mapped, plain_data, store
from traceview.analysis import breakdown
import traceview.reports.json_report as jr
import traceview.document.assemble as asm
map_tasks = executors.map_tasks
def _round_name(fn, args):          # a round of mapped.claimed tasks is named for what they run
    return args[0][0].__name__ if fn.__name__ == "claimed" and args else fn.__name__
executors.map_tasks = lambda fn, args, **kw: span("round " + _round_name(fn, args), map_tasks)(fn, args, **kw)
submit_tasks = executors.submit_tasks
def _submitted(fn, args, **kw):     # a round started, its results taken later: the wait is a span
    name = _round_name(fn, args)
    gather = span("started " + name, submit_tasks)(fn, args, **kw)
    return span("round " + name + " (wait)", gather)
executors.submit_tasks = _submitted
executors.read_all = span("parse (read_all)", executors.read_all)
if hasattr(mapped, "start_list_bodies"):   # a JSON report's long lists, written by the workers
    start_bodies = mapped.start_list_bodies
    def _bodies(doc):
        take = span("started list_body_file", start_bodies)(doc)
        return None if take is None else span("list_body_file taken (the report's writing waits)", take)
    mapped.start_list_bodies = _bodies
mapped.load_job = span("load_job (parse + place)", mapped.load_job)
import traceview.load as ld
ld.load = span("load (in process)", ld.load)
asm.assemble = span("assemble (document)", asm.assemble)
breakdown.prepare = span("breakdown.prepare", breakdown.prepare)
jr.render_bytes = span("JSON render", jr.render_bytes)
plain_data.scan = span("plain_data.scan", plain_data.scan)
store.Store.put_document = span("kept document", store.Store.put_document)
store.Store.put_kept = span("kept report", store.Store.put_kept)
cli_common.IN_CLI = True
rc = run_cli(sys.argv[1:])
SPANS.append(("total", 0.0, time.perf_counter() - T0, time.process_time() - C0, 0.0))
for name, at, wall, cpu, cpu_at in sorted(SPANS, key=lambda s: s[1]):
    print(f"SPAN {at:.3f} {wall:.3f} {cpu:.3f} {cpu_at:.3f} {name}", file=sys.stderr)
own, reaped, live = tree_cpu()
print(f"TREE {own:.3f} {reaped + live:.3f}", file=sys.stderr)
print(f"BENCH {rc}", file=sys.stderr)
getattr(launch, "exit_now", sys.exit)(rc)
"""


def split(path: Path, work: Path, jobs: int) -> dict:
    """One first run (empty store) of `path` with --jobs `jobs`, its stages timed (see _SPLIT_RUNNER);
    prints them and returns the CPU totals: the parent's outside the rounds it waits on, the
    workers' per kind of task, and the bound of the run's time on `jobs` idle cores."""
    store = work / f"store-split-{jobs}"
    shutil.rmtree(store, ignore_errors=True)
    cmd = [PYTHON, "-c", _SPLIT_RUNNER, "analyze", str(path), "-f", "json", "-o",
           str(work / f"split-{jobs}.json"), "--jobs", str(jobs), "--store", str(store)]
    t, c = time.perf_counter(), _children_cpu()
    p = _run(cmd)
    wall, cpu = time.perf_counter() - t, _children_cpu() - c
    if p.returncode != 0 or "BENCH 0" not in p.stderr:
        raise SystemExit(f"bench_ranks: analyze failed: {' '.join(cmd)}\n{p.stderr[-3000:]}")
    print(f"--jobs {jobs}: wall {wall:.2f} s, CPU of the command and its reaped children {cpu:.2f} s")
    spans = []
    for ln in p.stderr.splitlines():
        if ln.startswith("SPAN "):
            _, f_at, f_wall, f_cpu, f_cpu_at, name = ln.split(" ", 5)
            spans.append((name, float(f_at), float(f_wall), float(f_cpu), float(f_cpu_at)))
    tasks: dict[str, list[tuple[int, float]]] = {}
    for ln in p.stderr.splitlines():
        if ln.startswith("TRACEVIEW_TASK "):
            f = ln.split()
            tasks.setdefault(f[1], []).append((int(f[3]), float(f[5])))
    for name, at, span_wall, span_cpu, cpu_at in spans:
        print(f"    parent {name:28s} at {at:7.2f} s (CPU {cpu_at:5.2f} s)  "
              f"wall {span_wall:7.2f} s  CPU {span_cpu:7.2f} s")
    total = next(x for n, _, _, x, _ in spans if n == "total")
    waited = sum(x for n, _, _, x, _ in spans if n.startswith("round ") or n == "parse (read_all)")
    serial = total - waited
    print(f"    parent CPU {total:.2f} s, of which outside the worker rounds (serial) {serial:.2f} s")
    bound = serial
    # a round started before its wait (submit_tasks): the parent's CPU between the two overlaps the
    # round's tasks, and only what the largest task takes beyond it lengthens the run
    overlap: dict[str, float] = {}
    for name, _, _, _, cpu_at in spans:
        if name.startswith("started "):
            kind = name.split(" ", 1)[1]
            wait = next((c for n, _, _, _, c in spans if n == f"round {kind} (wait)"), cpu_at)
            overlap[kind] = max(0.0, wait - cpu_at)
    for kind, ts in tasks.items():
        per: dict[int, float] = {}
        for pid, task_cpu in ts:
            per[pid] = per.get(pid, 0.0) + task_cpu
        print(f"    workers {kind:12s} {len(ts):3d} tasks, CPU {sum(c for _, c in ts):6.2f} s "
              f"(per worker {', '.join(f'{v:.2f}' for v in per.values())}; largest task {max(c for _, c in ts):.2f} s)")
        # the parse is one task per file, taken by whichever worker is free: its share; the later
        # rounds are one task per batch (or per long list): the busiest worker's
        bound += max(sum(c for _, c in ts) / jobs, max(c for _, c in ts)) if kind == "parse_task" \
            else max(0.0, max(per.values()) - overlap.get(kind, 0.0))
    tree = next((ln.split()[1:] for ln in p.stderr.splitlines() if ln.startswith("TREE ")), None)
    own, others = (float(tree[0]), float(tree[1])) if tree else (total, 0.0)
    in_tasks = sum(c for ts in tasks.values() for _, c in ts)
    print(f"    all processes' CPU {own + others:.2f} s (this process {own:.2f} s, the others {others:.2f} s, "
          f"of which outside the tasks, e.g. a forkserver's imports: {others - in_tasks:.2f} s); "
          f"idle core-seconds on {jobs} cores: {jobs * wall - own - others:.2f} s")
    if tasks:
        everything = max(total + in_tasks, own + others)
        print(f"    bound on {jobs} idle cores: parent serial + the parse's CPU / {jobs} + the largest task "
              f"of each later round (less the parent's CPU while it runs: "
              f"{', '.join(f'{k} {v:.2f} s' for k, v in overlap.items()) or 'none'}) = {bound:.2f} s; "
              f"all CPU (parent and tasks) / {jobs} = {everything / jobs:.2f} s")
        bound = max(bound, everything / jobs)
    else:
        bound = total
    return {"cpu": cpu, "parent": total, "serial": serial, "bound": bound, "all_cpu": own + others, "wall": wall}


PYTHON = sys.executable           # --ab: the interpreter (a checkout's venv) each run uses in turn
WORK: Path | None = None          # the runs' working directory (not a checkout: '' on sys.path would
                                  # import that checkout's traceview before the interpreter's own)


def _env() -> dict:
    import os
    env = {**os.environ, "TRACEVIEW_BENCH_STATS": "1"}
    env.pop("PYTHONPATH", None)
    return env


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=WORK)


# What two cores of this machine give at the moment, beside the runs: a CPU-bound loop of Python in
# one process alone, then the same in two processes at once. On a machine whose two cores are
# shared with other guests (this project's: 1.34x to 2.13x over six rounds of one minute), the
# best --jobs 2 / --jobs 1 ratio there can be is bounded by this, not by traceview.
_SPIN = "x = 0\nfor i in range(6_000_000):\n    x += i * i\n"


def capacity() -> float:
    """2 x (one loop alone) / (two loops at once): 2.0 where two cores run two processes as fast as
    one runs one, 1.0 where they run them no faster than one after the other."""
    cmd = [sys.executable, "-c", _SPIN]
    t = time.perf_counter()
    subprocess.run(cmd, check=True)
    alone = time.perf_counter() - t
    t = time.perf_counter()
    procs = [subprocess.Popen(cmd) for _ in range(2)]
    for pr in procs:
        pr.wait()
    return 2 * alone / (time.perf_counter() - t)


def halves_at_once(path: Path, work: Path) -> tuple[float, float, float, float]:
    """The job's own work on the two cores, with nothing of --jobs in it: its rank files in two
    halves (alternate files), each analyzed by a process of its own (--jobs 1, an empty store):
    the two halves one after the other, then both at once. Returns (one after the other) / (at
    once) -- 2.0 where two cores run two such processes as fast as one runs one --, the processes'
    CPU time at once against one after the other (1.0 where running beside another process costs
    a process nothing), and the two walls (s). --jobs 2 on the whole job has the same per-rank work
    on the same cores, with one start-up and one reduce where the halves have two: its wall is the
    one to set beside "at once"."""
    files = sorted(p for p in path.iterdir() if p.is_file())
    dirs = []
    for i, part in enumerate((files[0::2], files[1::2])):
        d = work / f"half-{i}"
        if not d.is_dir() or len(list(d.iterdir())) != len(part):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            for f in part:
                shutil.copy(f, d / f.name)
        dirs.append(d)

    def cmd(i: int) -> list[str]:
        store = work / f"store-half-{i}"
        shutil.rmtree(store, ignore_errors=True)
        return [PYTHON, "-c", _RUNNER, "analyze", str(dirs[i]), "-f", "json", "-o", os.devnull, "--jobs", "1",
                "--store", str(store)]

    c0 = _children_cpu()
    t = time.perf_counter()
    for i in (0, 1):
        p = _run(cmd(i))
        if p.returncode:
            raise SystemExit(f"bench_ranks: a half of the job failed: {p.stderr[-2000:]}")
    alone, c1 = time.perf_counter() - t, _children_cpu()
    t = time.perf_counter()
    procs = [subprocess.Popen(cmd(i), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=WORK)
             for i in (0, 1)]
    if any(p.wait() for p in procs):
        raise SystemExit("bench_ranks: a half of the job failed (run at once)")
    both, c2 = time.perf_counter() - t, _children_cpu()
    return alone / both, (c2 - c1) / (c1 - c0), alone, both


def ab(path: Path, n: int, work: Path, pythons: list[Path], rounds: int) -> None:
    """--ab: first runs (empty store) with --jobs 1 and --jobs 2 with each interpreter (a
    checkout's venv: its editable traceview) in turn, `rounds` times (interleaved: the machine's
    load falls on both alike); each round's ratio, and the median."""
    global PYTHON
    import statistics
    for py in pythons:
        where = subprocess.run([str(py), "-c", "import traceview.mapped as m; print(m.__file__)"],
                               capture_output=True, text=True, env=_env(), cwd=WORK).stdout.strip()
        print(f"  {py}: traceview from {where}")
        PYTHON = str(py)
        analyze(path, work / "ab-warm.json", "--jobs", "1", "--store", str(work / f"store-ab-warm-{pythons.index(py)}"))
    got: dict[str, list[tuple[float, float, float, float]]] = {str(t): [] for t in pythons}
    caps, halves = [], []
    for r in range(rounds):
        caps.append(capacity())
        print(f"  round {r + 1}: two cores ran two CPU-bound processes at {caps[-1]:.2f}x one", flush=True)
        PYTHON = str(pythons[-1])
        halves.append(halves_at_once(path, work))
        print(f"  round {r + 1}: the job's two halves, one process each (--jobs 1): one after the other "
              f"{halves[-1][2]:.2f} s, at once {halves[-1][3]:.2f} s ({halves[-1][0]:.2f}x), with "
              f"{halves[-1][1]:.2f}x the CPU time ({PYTHON})", flush=True)
        for py in pythons:
            PYTHON = str(py)
            stores = {jobs: work / f"store-ab-{r}-{pythons.index(py)}-{jobs}" for jobs in (1, 2)}
            for st in stores.values():     # first runs: a store left in a --keep folder would serve them
                shutil.rmtree(st, ignore_errors=True)
            one, two = (analyze(path, work / f"ab-{jobs}.json", "--jobs", str(jobs), "--store", str(stores[jobs]))
                        for jobs in (1, 2))
            same = (work / "ab-1.json").read_bytes() == (work / "ab-2.json").read_bytes()
            got[str(py)].append((one["wall_s"], two["wall_s"], one["tree_cpu_s"], two["tree_cpu_s"]))
            print(f"  round {r + 1} {str(py):32s} --jobs 1 {one['wall_s']:6.2f} s (CPU {one['tree_cpu_s']:5.2f} s), "
                  f"--jobs 2 {two['wall_s']:6.2f} s (CPU {two['tree_cpu_s']:5.2f} s): "
                  f"{one['wall_s'] / two['wall_s']:.2f}x"
                  f"{'' if same else '  REPORTS DIFFER'}", flush=True)
    PYTHON = sys.executable
    for label, rows in got.items():
        med = [statistics.median(x[i] for x in rows) for i in range(4)]
        print(f"  {n} ranks {label}: median --jobs 1 {med[0]:.2f} s, --jobs 2 {med[1]:.2f} s, ratio "
              f"{statistics.median(x[0] / x[1] for x in rows):.2f}x "
              f"(rounds {', '.join(f'{x[0] / x[1]:.2f}' for x in rows)}); "
              f"all processes' CPU --jobs 1 {med[2]:.2f} s, --jobs 2 {med[3]:.2f} s")
    print(f"  the machine's capacity over the rounds (two processes against one, see capacity()): median "
          f"{statistics.median(caps):.2f}x ({', '.join(f'{c:.2f}' for c in caps)})")
    print(f"  the job's halves at once against one after the other (halves_at_once()): median "
          f"{statistics.median(h[0] for h in halves):.2f}x ({', '.join(f'{h[0]:.2f}' for h in halves)}); "
          f"CPU time at once / one after the other: median {statistics.median(h[1] for h in halves):.2f}x; "
          f"at once: median {statistics.median(h[3] for h in halves):.2f} s")


def _children_cpu() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def analyze(path: Path, out: Path, *args: str) -> dict:
    cmd = [PYTHON, "-c", _RUNNER, "analyze", str(path), "-f", "json", "-o", str(out), *args]
    t, c = time.perf_counter(), _children_cpu()
    p = _run(cmd)
    total, cpu = time.perf_counter() - t, _children_cpu() - c
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("BENCH ")]
    if p.returncode != 0 or not line or line[-1].split()[1] != "0":
        raise SystemExit(f"bench_ranks: analyze failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    _, rc, wall, me, kids, own, others = line[-1].split()
    stats = [json.loads(ln.split(" ", 1)[1]) for ln in p.stderr.splitlines() if ln.startswith("TRACEVIEW_STATS ")]
    workers = max([st.get("worker_peak_rss_kib", 0) for st in stats] + [int(kids)])
    return {"wall_s": total, "analyze_s": float(wall), "rss_mb": int(me) / 1024, "kids_rss_mb": workers / 1024,
            "parse_s": sum(st["seconds"] for st in stats), "cpu_s": cpu,
            "tree_cpu_s": float(own) + float(others)}


# "jobs2 other": from the store as "jobs2 store", to another -o path (the kept report copied there,
# not the first run's own file, which the store keeps by a link and a repeat leaves as it is)
RUNS = ("jobs1 first", "jobs2 first", "jobs2 store", "jobs1 store", "jobs2 other")


def run_job(name: str, path: Path, n: int, work: Path, want: dict | None, only=RUNS) -> dict:
    store = work / f"store-{name}"
    runs = {}
    reports = {}
    for label, args in (("jobs1 first", ["--jobs", "1", "--store", str(store) + "-1"]),
                        ("jobs2 first", ["--jobs", "2", "--store", str(store) + "-2"]),
                        ("jobs2 store", ["--jobs", "2", "--store", str(store) + "-2"]),
                        ("jobs1 store", ["--jobs", "1", "--store", str(store) + "-1"]),
                        ("jobs2 other", ["--jobs", "2", "--store", str(store) + "-2"])):
        if label not in only:
            continue
        if label.endswith("first"):     # an empty store: one left in a --keep folder would serve the run
            shutil.rmtree(args[-1], ignore_errors=True)
        out = work / f"{name}-{label.split()[0]}.json"     # a run from the store repeats the first's command
        if label.endswith("other"):
            out = work / f"{name}-other.json"
            out.unlink(missing_ok=True)
        r = analyze(path, out, *args)
        r["per_rank_ms"] = r["wall_s"] / n * 1e3
        runs[label] = r
        reports[label] = _digest(out)    # (not the bytes: this process stays small)
        print(f"  {name:10s} {label:12s} wall {r['wall_s']:8.2f} s  CPU {r['cpu_s']:8.2f} s  "
              f"per rank {r['per_rank_ms']:8.1f} ms  all processes' CPU {r['tree_cpu_s']:7.2f} s  "
              f"(ranks read/parsed {r['parse_s']:7.2f} s)  "
              f"parent peak RSS {r['rss_mb']:8.1f} MB  workers' peak RSS {r['kids_rss_mb']:7.1f} MB", flush=True)
    same = len(set(reports.values())) == 1
    print(f"  {name:10s} reports byte-identical across the {len(reports)} runs: {same}")
    first = next(label for label in RUNS if label in reports)
    growth(name, work / f"{name}-{first.split()[0]}.json", Path(f"{store}-{first[4]}"))
    if want is not None:
        planted(name, work / f"{name}-{first.split()[0]}.json", want)
    return runs


def planted(name: str, report: Path, want: dict) -> None:
    """The report's straggler and slow expert layer against what the generator planted."""
    doc = json.loads(report.read_bytes())
    top = doc["stragglers"][0]
    got = (top["rank"], top["times_last"], top["total_skew_ns"], top["wait_caused_ns"])
    exp = (want["straggler"], want["times_last"], want["total_skew_ns"], want["wait_caused_ns"])
    slow = sorted({r["rank"] for r in doc["layers"] if r["stage"] == "experts" and r["layer"] == want["slow_layer"]
                   and r["compute_ns"] == want["slow_experts_compute_ns"]})
    print(f"  {name:10s} straggler (rank, times last, total skew, wait caused) {got} planted {exp}: "
          f"{'exact' if got == exp else 'DIFFERENT'}")
    print(f"  {name:10s} slow expert layer {want['slow_layer']} on ranks {slow} planted {want['slow_ranks']}: "
          f"{'exact' if slow == want['slow_ranks'] else 'DIFFERENT'}")


def cores(name: str, path: Path, n: int, work: Path, want: dict | None, jobs_list: list[int], rounds: int) -> None:
    """--cores: first runs (empty store) of the job with each --jobs in `jobs_list`, `rounds` times over
    (interleaved: the machine's load falls on all alike); per run wall, CPU of all processes and the
    parent's peak RSS; then the median wall of each and its speed-up over the first --jobs given.
    Every report must be byte-identical to the others, and the planted causes the generator's.
    With --jobs 1 and 2 among them, each round also measures what two cores give at the moment
    (capacity()) and prints the bound that sets on --jobs 2 for the CPU it spent: --jobs 1's wall
    over --jobs 2's CPU spread over `capacity` cores."""
    import statistics
    walls: dict[int, list[float]] = {j: [] for j in jobs_list}
    cpus: dict[int, list[float]] = {j: [] for j in jobs_list}
    pair = 1 in jobs_list and 2 in jobs_list
    caps: list[float] = []
    digests = set()
    for r in range(rounds):
        if pair:
            caps.append(capacity())
        for jobs in jobs_list:
            store = work / f"store-{name}-cores-{jobs}"
            shutil.rmtree(store, ignore_errors=True)
            out = work / f"{name}-cores-{jobs}.json"
            got = analyze(path, out, "--jobs", str(jobs), "--store", str(store))
            digests.add(_digest(out))
            walls[jobs].append(got["wall_s"])
            cpus[jobs].append(got["tree_cpu_s"])
            print(f"  {name:10s} round {r + 1} --jobs {jobs:3d}: wall {got['wall_s']:8.2f} s  "
                  f"all processes' CPU {got['tree_cpu_s']:8.2f} s  per rank {got['wall_s'] / n * 1e3:7.1f} ms  "
                  f"parent peak RSS {got['rss_mb']:7.1f} MB  workers' peak RSS {got['kids_rss_mb']:7.1f} MB",
                  flush=True)
    base = statistics.median(walls[jobs_list[0]])
    for jobs in jobs_list:
        med = statistics.median(walls[jobs])
        print(f"  {name:10s} --jobs {jobs:3d}: median wall {med:8.2f} s, {base / med:5.2f}x --jobs {jobs_list[0]} "
              f"(rounds {', '.join(f'{w:.2f}' for w in walls[jobs])})")
    if pair:
        ratios = [a / b for a, b in zip(walls[1], walls[2], strict=True)]
        bounds = [a / (c / min(k, 2.0)) for a, c, k in zip(walls[1], cpus[2], caps, strict=True)]
        for r in range(rounds):
            print(f"  {name:10s} round {r + 1}: --jobs 1 / --jobs 2 {ratios[r]:.2f}x; two CPU-bound processes ran "
                  f"at {caps[r]:.2f}x one; bound for --jobs 2's CPU ({cpus[2][r]:.2f} s) on such cores "
                  f"{bounds[r]:.2f}x; reached {ratios[r] / bounds[r]:.2f}")
        print(f"  {name:10s} medians: --jobs 1 / --jobs 2 {statistics.median(ratios):.2f}x, capacity "
              f"{statistics.median(caps):.2f}x, bound {statistics.median(bounds):.2f}x, CPU --jobs 1 "
              f"{statistics.median(cpus[1]):.2f} s, --jobs 2 {statistics.median(cpus[2]):.2f} s")
    print(f"  {name:10s} reports byte-identical across the {rounds * len(jobs_list)} runs: {len(digests) == 1}")
    if want is not None:
        planted(name, work / f"{name}-cores-{jobs_list[-1]}.json", want)


def _digest(path: Path) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def growth(name: str, report: Path, store: Path) -> None:
    """What grows with ranks: the document's sections (JSON bytes) and the stored tables (rows, bytes)."""
    doc = json.loads(report.read_bytes())
    sections = sorted(((len(json.dumps(v)), k) for k, v in doc.items()), reverse=True)[:6]
    print(f"  {name:10s} report {report.stat().st_size / 1e6:.1f} MB; largest sections: "
          + ", ".join(f"{k} {b / 1e6:.2f} MB" for b, k in sections))
    rows: dict[str, int] = {}
    size = 0
    for man in store.glob("entries/*/manifest.json"):
        for table, parts in json.loads(man.read_text())["tables"].items():
            rows[table] = rows.get(table, 0) + sum(p["rows"] for p in parts)
            size += sum(p["size"] for p in parts)
    print(f"  {name:10s} stored tables {size / 1e6:.1f} MB (Parquet): "
          + ", ".join(f"{t} {n:,} rows" for t, n in sorted(rows.items())))


def ratios(name: str, runs: dict) -> None:
    def vs(a: str, b: str) -> str:
        ra, rb = runs[a], runs[b]
        return f"{ra['wall_s'] / rb['wall_s']:.2f}x wall ({ra['wall_s']:.2f} / {rb['wall_s']:.2f} s), " \
               f"{ra['cpu_s'] / rb['cpu_s']:.2f}x CPU ({ra['cpu_s']:.2f} / {rb['cpu_s']:.2f} s)"
    for jobs in ("1", "2"):
        if f"jobs{jobs} first" in runs and f"jobs{jobs} store" in runs:
            print(f"  {name:10s} first run / second from the store (--jobs {jobs}): "
                  f"{vs(f'jobs{jobs} first', f'jobs{jobs} store')}")
    if "jobs2 first" in runs and "jobs2 other" in runs:
        print(f"  {name:10s} first run / second from the store to another -o path (--jobs 2): "
              f"{vs('jobs2 first', 'jobs2 other')}")
    if "jobs1 first" in runs and "jobs2 first" in runs:
        print(f"  {name:10s} --jobs 1 / --jobs 2 (first run): {vs('jobs1 first', 'jobs2 first')}; "
              f"the machine ran two CPU-bound processes at {capacity():.2f}x one just after")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="*", default=[64, 1024])
    ap.add_argument("--steps", type=int, default=moe_job.Job.steps)
    ap.add_argument("--layers", type=int, default=moe_job.Job.layers)
    ap.add_argument("--dlrm", action="store_true", help="also the 8-rank DLRM job of the corpus")
    ap.add_argument("--dlrm-dir", type=Path, default=DLRM, help="where the DLRM job is (default: the corpus)")
    ap.add_argument("--runs", nargs="*", default=list(RUNS), choices=RUNS, help="which runs of each job")
    ap.add_argument("--keep", type=Path, help="work here (and keep it) instead of a temporary folder")
    ap.add_argument("--split", action="store_true",
                    help="only a first run of each MoE job with --jobs 1 and 2, its stages timed (CPU per process)")
    ap.add_argument("--ab", type=Path, nargs="+", metavar="PYTHON",
                    help="only first runs, --jobs 1 and 2, with each interpreter in turn (a checkout's venv, "
                         "e.g. /work/venvs/base/bin/python: its traceview; A/B, interleaved)")
    ap.add_argument("--bytecode-cache", action="store_true",
                    help="compile traceview's modules before the runs and let the runs keep them (each "
                         "--ab interpreter's too), as an installed traceview has them, even where "
                         "PYTHONDONTWRITEBYTECODE is set (bench/bytecode.py)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="--ab: rounds over the interpreters (with --split too); --cores: rounds over the --jobs")
    ap.add_argument("--cores", type=int, nargs="+", metavar="JOBS",
                    help="only first runs, one with each --jobs given (e.g. 1 2 4 8 16 on a machine of 16 "
                         "cores), --rounds times, interleaved; the speed-up over the first")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="bench-ranks-"))
    work.mkdir(parents=True, exist_ok=True)
    global WORK
    WORK = work.resolve()
    if a.bytecode_cache:   # as an installed traceview runs: its modules compiled once, not per run
        for interp in dict.fromkeys([sys.executable, *(str(t.absolute()) for t in a.ab or [])]):
            print(bytecode.prepare(interp))
    elif os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set: every run compiles traceview's modules again "
              "(--bytecode-cache keeps them, as an installed traceview has them)")
    all_runs = {}
    try:
        if a.dlrm:
            print("DLRM 8 ranks (corpus)")
            all_runs["dlrm"] = run_job("dlrm", a.dlrm_dir, 8, work, None, a.runs)
            ratios("dlrm", all_runs["dlrm"])
        for n in a.ranks:
            job = moe_job.Job(ranks=n, steps=a.steps, layers=a.layers)
            d = work / f"job{n}"
            t = time.perf_counter()
            paths = moe_job.write(d, job)
            size = sum(p.stat().st_size for p in paths)
            print(f"MoE job of {n} ranks: generated in {time.perf_counter() - t:.1f} s, "
                  f"{size / 1e6:.0f} MB ({size / n / 1e6:.2f} MB per rank)", flush=True)
            if a.cores:
                cores(f"{n} ranks", d, n, work, moe_job.expected(job), a.cores, a.rounds)
                continue
            if a.ab and not a.split:
                ab(d, n, work, [t.absolute() for t in a.ab], a.rounds)
                continue
            if a.split:
                global PYTHON
                bounds: dict[str, list[tuple[float, float]]] = {}
                for _ in range(a.rounds if a.ab else 1):
                    for py in [t.absolute() for t in a.ab] if a.ab else [Path(sys.executable)]:
                        PYTHON = str(py)
                        print(f"{py}:")
                        one, two = split(d, work, 1), split(d, work, 2)
                        same = (work / "split-1.json").read_bytes() == (work / "split-2.json").read_bytes()
                        print(f"  {n} ranks: reports byte-identical: {same}; --jobs 1 CPU {one['all_cpu']:.2f} s / "
                              f"--jobs 2 bound {two['bound']:.2f} s = {one['all_cpu'] / two['bound']:.2f}x at most "
                              "on 2 idle cores (all processes' CPU: --jobs 1 "
                              f"{one['all_cpu']:.2f} s, --jobs 2 {two['all_cpu']:.2f} s)", flush=True)
                        bounds.setdefault(str(py), []).append((one["all_cpu"], two["bound"]))
                PYTHON = sys.executable
                if a.ab:
                    import statistics
                    for py, got in bounds.items():
                        print(f"  {py}: median --jobs 1 CPU {statistics.median(x for x, _ in got):.2f} s, --jobs 2 "
                              f"bound {statistics.median(y for _, y in got):.2f} s, ratio "
                              f"{statistics.median(x / y for x, y in got):.2f}x "
                              f"(rounds {', '.join(f'{x / y:.2f}' for x, y in got)})")
                continue
            all_runs[n] = run_job(f"{n} ranks", d, n, work, moe_job.expected(job), a.runs)
            ratios(f"{n} ranks", all_runs[n])
        ns = [n for n in a.ranks if n in all_runs]
        if len(ns) >= 2:
            lo, hi = min(ns), max(ns)
            for label in [x for x in RUNS if x in all_runs[lo] and x in all_runs[hi]]:
                r_lo, r_hi = all_runs[lo][label], all_runs[hi][label]
                print(f"{hi} vs {lo} ranks, {label}: parent peak RSS {r_hi['rss_mb'] / r_lo['rss_mb']:.2f}x "
                      f"({r_lo['rss_mb']:.0f} -> {r_hi['rss_mb']:.0f} MB), time per rank "
                      f"{r_hi['per_rank_ms'] / r_lo['per_rank_ms']:.2f}x "
                      f"({r_lo['per_rank_ms']:.1f} -> {r_hi['per_rank_ms']:.1f} ms)")
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
