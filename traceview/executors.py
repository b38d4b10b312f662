"""Where the per-rank work runs: in this process (`--jobs 1`), a local process pool (`--jobs N`), or a
Dask distributed cluster (`--dask ADDRESS`, `--dask-scheduler-file FILE`, TRACEVIEW_DASK_SCHEDULER).

The per-rank task parses one trace file into its canonical tables and writes them to the store
(workers must see the trace paths and the store: a shared filesystem, as on every training cluster);
the parent then reads them from the store. Without a store the task sends the tables back. Whichever
executor ran it, the tables, and so the report, are the same.

A trace that cannot be read is one line naming the file (TraceError), raised before any report; with
`skip_bad_ranks` it is set aside (`RunState.skipped`) and the rest is analyzed. A worker that dies is
retried once (a fresh pool; Dask reschedules it), then its trace is a failed rank.
"""
from __future__ import annotations

import contextlib
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

# concurrent.futures (with `logging`, 3-5 ms of a run's start) and the process pool's module (and
# multiprocessing's with it) are imported where a pool is made or waited for: a run of one trace
# makes none. BrokenExecutor, which concurrent.futures defines at once, is the base of
# BrokenProcessPool, the error of a pool whose worker died: it is what the pools' callers catch.
if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

from .errors import TraceError, UsageError

ENV_SCHEDULER = "TRACEVIEW_DASK_SCHEDULER"


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def own_threads() -> int:
    """Threads the run's own process may use for one job it analyzes itself (the SQL steps that may
    use every core, engine/steps.py): --jobs of a local run (the cores unless given), else the cores."""
    state = current()
    if state is None or state.client is not None:
        return cores()
    return max(1, state.settings.jobs)


@dataclass
class RunSettings:
    store: Path | None = None            # None: nothing is stored or read from a store
    jobs: int = 1
    dask: str | None = None              # scheduler address
    dask_scheduler_file: str | None = None
    skip_bad_ranks: bool = False
    progress: bool = False
    store_explicit: bool = True          # --store DIR given (one that cannot be made is an error)


@dataclass
class RunState:
    settings: RunSettings
    skipped: list[dict] = field(default_factory=list)    # {"file":, "reason":}
    client: Any = None                                  # dask.distributed.Client when connected
    stats: dict = field(default_factory=dict)            # what the last map did (for bench/tests)
    pool: Any = None                                    # the process pool of mapped rounds (map_tasks)
    cleanups: list = field(default_factory=list)         # called when the run ends (scratch folders)
    # called with whether the run's work ended without an exception, before the pool is shut down
    # (a JSON report's long lists still being written by the workers: mapped.start_list_bodies)
    drains: list = field(default_factory=list)


_STATE: RunState | None = None


def current() -> RunState | None:
    return _STATE


@contextmanager
def configured(settings: RunSettings) -> Iterator[RunState]:
    """Run what is inside with these settings (the CLI wraps one command in it). A Dask scheduler is
    connected here, before any work: one that cannot be reached is a usage error."""
    global _STATE
    state = RunState(settings)
    address, sched_file = settings.dask, settings.dask_scheduler_file
    env = os.environ.get(ENV_SCHEDULER)
    if not address and not sched_file and env:      # an address, or the path of a scheduler file
        address, sched_file = (None, env) if Path(env).is_file() else (env, None)
    if address or sched_file:
        state.client = _connect(None if sched_file else address, sched_file)
    if settings.store is not None:
        try:
            Path(settings.store).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            if state.client is not None:
                state.client.close()
            if settings.store_explicit:
                raise UsageError(settings.store, f"cannot use as the store: {e.strerror or e}") from None
            settings.store = None        # the default place is unusable: run without a store
    previous, _STATE = _STATE, state
    ok = False
    try:
        yield state
        ok = True
    finally:
        for drain in state.drains:
            drain(ok)
        from .store import settle
        settle()                         # the store's copies of the tables parsed here, written
        _STATE = previous
        if state.pool is not None:
            state.pool.shutdown(wait=True, cancel_futures=True)
        for undo in reversed(state.cleanups):
            undo()
        if state.client is not None:
            state.client.close()


def _connect(address: str | None, scheduler_file: str | None):
    try:
        from distributed import Client
    except ImportError:
        raise UsageError(None, "--dask needs Dask distributed: pip install 'traceview[dask]'") from None
    if scheduler_file and not Path(scheduler_file).is_file():
        raise UsageError(scheduler_file, "no such Dask scheduler file")
    where = address or scheduler_file
    try:
        if scheduler_file:
            return Client(scheduler_file=scheduler_file, timeout="10s")
        return Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as e:
        why = " ".join("".join(c if c.isprintable() else " " for c in str(e)).split())
        raise UsageError(None, f"cannot reach the Dask scheduler at {where}: {why or type(e).__name__}") from None


# -- the per-rank task ---------------------------------------------------------------------------

def timed(fn, *args):
    """fn(*args), printing to stderr (under TRACEVIEW_BENCH_STATS, for bench/bench_ranks.py --split)
    the CPU and wall seconds it took in the process that ran it."""
    import sys
    w, c = time.perf_counter(), time.process_time()
    where = os.environ.get("TRACEVIEW_BENCH_PROFILE")      # a folder: each task's cProfile (CPU time) there
    if where:
        import cProfile
        prof = cProfile.Profile(time.process_time)
        out = prof.runcall(fn, *args)
        prof.dump_stats(os.path.join(where, f"{fn.__name__}-{os.getpid()}-{time.time_ns()}.prof"))
    else:
        out = fn(*args)
    print(f"TRACEVIEW_TASK {fn.__name__} pid {os.getpid()} cpu {time.process_time() - c:.3f} "
          f"wall {time.perf_counter() - w:.3f} start {w:.3f}", file=sys.stderr, flush=True)
    return out


def _task(fn, args: tuple) -> tuple:
    """What to submit for fn(*args): the call, timed where the bench asks for it (a function that
    times what it calls itself, as mapped.claimed, is not)."""
    timing = os.environ.get("TRACEVIEW_BENCH_STATS") and not getattr(fn, "times_itself", False)
    return (timed, fn, *args) if timing else (fn, *args)


def parse_task(parse, path: str, nsys_bin: str | None, store_root: str | None, max_input: int | None,
               fault: str | None = None, light: bool = False, spill: str | None = None, give: bool = False):
    """Parse one trace (in whichever process runs it). Returns (kind, value, peak RSS KiB of the
    process that ran it): ("stored", None) when its tables went to the store (`light`: ("stored",
    its meta, warnings and largest id), as Store.lookup_light), ("tables", Stored) when they come
    back by value, ("bad", message) for bad input. `spill`: a folder where the tables parsed and
    stored are also written as read back from the store, uncompressed (mapped.spill: a mapped
    job's batch task reads them there instead of decoding the Parquet again). `give`: the tables
    stored come back too, as the store would give them back (store.as_read_back), in place of
    ("stored", None): for the run's own process, which would otherwise read them back."""
    import resource
    kind, value = _parse(parse, path, nsys_bin, store_root, max_input, fault, light, spill, give)
    return kind, value, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _parse(parse, path: str, nsys_bin: str | None, store_root: str | None, max_input: int | None,
           fault: str | None, light: bool = False, spill: str | None = None, give: bool = False):
    from .parsers import bounded_read
    from .parsers.nsys_store import exports_in
    from .store import Store, Stored, as_read_back, file_hash, light as light_of
    if max_input is not None:
        bounded_read.set_max_input_size(max_input)
    p = Path(path)
    _fault_injection(p, fault)
    try:
        if store_root is None:
            prof = parse(p, nsys_bin)
            return "tables", Stored(prof.tables(), list(prof.warnings))
        store = Store(Path(store_root))
        with contextlib.ExitStack() as held:
            held.enter_context(store.lock(p))
            if not _reread() and (hit := (store.lookup_light(p) if light else store.lookup(p))) is not None:
                return "stored", hit if light or give else None     # another run stored it meanwhile
            before = p.stat()
            with exports_in(store):                 # an nsys report's SQLite export lies in the store
                prof = parse(p, nsys_bin)
            if give:
                # the tables go on as the store gives them back, and are stored on a thread of
                # their own while the analysis goes on (the lock is let go when they are)
                got = Stored({n: as_read_back(n, t) for n, t in prof.tables().items()}, list(prof.warnings))
                del prof
                store.put_behind(p, got, before, held.pop_all())
                return "stored", Stored(got.tables, list(got.warnings))
            # hashed after the parse, which refuses a file over the input size limit before reading it
            # (put() keeps nothing when the file's stat moved since `before`)
            content_hash = file_hash(p)
            got = Stored(prof.tables(), list(prof.warnings))
            del prof
            if store.put(p, got, before, content_hash):
                if spill is not None:
                    from .spill import spill_tables
                    spill_tables(Path(spill), got.tables)
                return "stored", light_of(got) if light else None
            return "tables", got
    except TraceError as e:
        return "bad", e.problem


FAULT_ENV = "TRACEVIEW_FAULT_DIE_ONCE"


def _fault_injection(p: Path, marker: str | None) -> None:
    """Tests of worker death: when FAULT_ENV (read by the parent, passed with the task) names a marker
    file holding this trace's file name, the worker process dies (once: the marker is removed first;
    `always:NAME` every time)."""
    import multiprocessing as mp
    if not marker or mp.parent_process() is None:    # never the parent process itself
        return
    try:
        text = Path(marker).read_text(encoding="utf-8").strip()
        if text == f"always:{p.name}":                   # dies every time: a rank that kills its worker
            os._exit(86)
        if text == p.name:
            Path(marker).unlink()
            os._exit(86)
    except OSError:
        return


# -- the map -------------------------------------------------------------------------------------

def stored(path: Path, store_root) -> bool:
    """Whether read_all would take `path` from the store at `store_root` without parsing it."""
    from .store import Store
    return not _reread() and Store(Path(store_root)).holds(path)


def _reread() -> bool:
    """Under a --max-input-size ceiling every input is read again (a stored entry would skip the check)."""
    from .parsers import bounded_read
    return bounded_read.ceiling_was_set()


def read_all(files: list[Path], nsys_bin: str | None, parse, light: bool = False,
             spill: Path | None = None) -> list[tuple[Path, Any]]:
    """(file, Stored) for each file, in file order, under the configured run (files set aside as bad
    are left out, with the state's `skipped` saying why). `light`: only each file's meta table,
    warnings and largest id (Store.lookup_light), for a mapped run whose workers read the tables;
    `spill`: a folder where the tables of each file parsed now are also written (parse_task),
    file i's in spill.spill_folder(spill, i)."""
    return start_read(files, nsys_bin, parse, light, spill)()


def start_read(files: list[Path], nsys_bin: str | None, parse, light: bool = False,
               spill: Path | None = None) -> Callable[[], list[tuple[Path, Any]]]:
    """read_all started: on the run's process pool the parse tasks are submitted now, and this
    process works on (a mapped job checks its options meanwhile); the function returned takes
    their results (a bad trace is said there, never before) and returns read_all's list. Dask and
    this process itself (--jobs 1) parse when it is called."""
    state = current()
    assert state is not None
    from .store import Store
    s = state.settings
    store = Store(s.store) if s.store is not None else None
    results: dict[int, object] = {}
    t0 = time.perf_counter()
    misses = []
    for i, f in enumerate(files):
        hit = (store.lookup_light(f) if light else store.lookup(f)) if store is not None and not _reread() else None
        if hit is not None:
            results[i] = hit
        else:
            misses.append(i)
    hits = len(files) - len(misses)
    root = str(s.store) if store is not None else None
    from .parsers import bounded_read
    limit = bounded_read.max_input_size()
    fault = os.environ.get(FAULT_ENV)
    from .spill import spill_folder
    args = [(parse, str(files[i]), nsys_bin, root, limit, fault, light,
             None if spill is None or root is None else str(spill_folder(spill, i))) for i in misses]
    pooled = bool(misses) and state.client is None and s.jobs > 1 and len(misses) > 1
    submitted = _submit_pool(min(s.jobs, len(misses)), misses, args) if pooled else None

    def finish() -> list[tuple[Path, Any]]:
        return _finish_read(state, store, files, results, t0, misses, hits, args, submitted)
    return finish


def _finish_read(state: RunState, store, files: list[Path], results: dict, t0: float, misses: list[int],
                 hits: int, args: list[tuple], submitted) -> list[tuple[Path, Any]]:
    s = state.settings
    from .progress import Progress
    progress = Progress(len(files), sum(_size(f) for f in files), force=s.progress)
    for i in results:                      # the files the store held
        progress.advance(_size(files[i]))
    bad: dict[int, str] = {}
    peak = [0]                   # the largest worker's peak RSS (KiB), pool workers only

    def take(i: int, outcome) -> None:
        kind, value, *rss = outcome
        if rss and submitted is not None:          # a pool worker's peak
            peak[0] = max(peak[0], rss[0])
        if kind == "bad":
            if not s.skip_bad_ranks:
                progress.close()
                raise TraceError(files[i], value)
            bad[i] = value
        elif kind == "stored":
            got = value if value is not None else store.lookup(files[i]) if store is not None else None
            if got is None:
                raise TraceError(files[i], "its stored tables could not be read back from the store "
                                           f"{s.store}")
            results[i] = got
        else:
            results[i] = value
        progress.advance(_size(files[i]))

    try:
        if not misses:
            pass
        elif state.client is not None:
            _map_dask(state.client, misses, args, take, bad)
        elif submitted is not None:
            _collect_pool(submitted, take)
        else:
            for i, (fn, path, nsys, root, limit, fault, lt, spill) in zip(misses, args, strict=False):
                # the tables parsed here are given back, not read back from the store
                take(i, parse_task(fn, path, nsys, root, limit, fault, lt, spill, give=not lt))
    finally:
        progress.close()
    for i in sorted(bad):
        state.skipped.append({"file": str(files[i]), "reason": bad[i]})
    state.stats = {"files": len(files), "from_store": hits, "parsed": len(misses) - len(bad),
                   "skipped": len(bad), "seconds": time.perf_counter() - t0, "worker_peak_rss_kib": peak[0]}
    if os.environ.get("TRACEVIEW_BENCH_STATS"):        # bench/bench_ranks.py reads this line
        import json
        import sys
        print("TRACEVIEW_STATS " + json.dumps(state.stats), file=sys.stderr)
    return [(files[i], results[i]) for i in range(len(files)) if i in results]


def _size(f: Path) -> int:
    try:
        return f.stat().st_size
    except OSError:
        return 0


# What the pool's workers run (parse, place, per-rank steps, stalls), imported once in the
# forkserver that forks them, not in every worker.
WORKER_MODULES = ["traceview.load", "traceview.parsers.kineto", "traceview.store", "traceview.mapped",
                  "duckdb", "traceview.engine.session", "traceview.engine.pipeline", "traceview.analysis.breakdown",
                  "traceview.analysis.layers", "traceview.analysis.stalls", "traceview.analysis.critical_path",
                  "traceview.flops.steps", "traceview.parsers.nsys_store", "pyarrow.parquet", "traceview.sql"]


def _table_from_ipc(data: bytes):
    import pyarrow as pa
    return pa.ipc.open_stream(data).read_all()


def _table_reduce(table):
    """How the pool sends an Arrow table: as its IPC stream (about 0.05 ms for a trace's meta
    table, against 0.2-0.5 ms to pickle it and as long again to unpickle: a mapped job sends
    one per rank file). The same table comes back: schema and field metadata, chunks,
    dictionaries. One that IPC would not give back chunk for chunk (no rows, an empty chunk,
    columns chunked unlike each other), or cannot write, is pickled as before."""
    import pyarrow as pa
    layouts = {tuple(len(c) for c in col.chunks) for col in table.columns}
    if table.num_rows == 0 or len(layouts) != 1 or 0 in next(iter(layouts)):
        return table.__reduce__()
    try:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        return _table_from_ipc, (sink.getvalue().to_pybytes(),)
    except (pa.ArrowException, ValueError, TypeError):
        return table.__reduce__()


def tables_as_ipc() -> None:
    """Arrow tables travel through the pool's queues as IPC (_table_reduce): called in the
    process that makes the pool, before its workers start (a forked one inherits it; a
    forkserver's calls it in worker_init)."""
    from multiprocessing.reduction import ForkingPickler

    import pyarrow as pa
    ForkingPickler.register(pa.Table, _table_reduce)


def _context():
    import multiprocessing as mp
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(WORKER_MODULES)
    return ctx


def warm() -> None:
    """Start the forkserver of the run's pool now, without waiting for it: its imports
    (WORKER_MODULES) then run beside this process's own start-up instead of after it. Only for a
    run with a local pool (--jobs N > 1)."""
    state = current()
    if state is None or state.client is not None or state.settings.jobs <= 1:
        return
    from multiprocessing import forkserver
    _context()
    forkserver.ensure_running()


def start_pool(files: int, on_start: Callable[[], None] | None = None) -> None:
    """Start the run's pool for a mapped job of `files` files now (--jobs N > 1, no Dask): this
    process imports what the workers run (WORKER_MODULES) and forks them, so that they start with
    it imported and no process imports it a second time (a forkserver's preload: some 0.5 s of CPU
    on a 2-core machine, which the job's ranks then wait for). Forking is safe only while this
    process runs no thread of its own (before its DuckDB connection: DuckDB starts threads; the
    jemalloc background thread pyarrow starts is fork-safe, as in the forkserver, which forks its
    workers the same way); otherwise, and where there is no fork, the forkserver is started
    (warm) and the pool is made when the first tasks come. Each forked worker runs `on_start` as it
    starts (the mapped job opens its first batch's session ahead: mapped.open_spare)."""
    state = current()
    if state is None or state.client is not None or state.settings.jobs <= 1 or state.pool is not None:
        return
    import importlib
    import multiprocessing as mp
    import sys
    for name in WORKER_MODULES:
        importlib.import_module(name)
    tables_as_ipc()
    if "fork" not in mp.get_all_start_methods() or not _fork_safe():
        warm()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    n = max(1, min(state.settings.jobs, files))
    from concurrent.futures import ProcessPoolExecutor
    pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork"),
                              initializer=forked_worker_init, initargs=(on_start,))
    # the workers are forked with every object there is now frozen (gc.freeze, as the gc module's
    # documentation advises before a fork): their collections never walk what they inherited (a
    # walk touches each object, so its page would be copied) and cost only what they make
    import gc
    frozen = gc.get_freeze_count()
    gc.freeze()
    pool.submit(os.getpid)           # a pool of forked workers forks them all at its first task
    if not frozen:
        gc.unfreeze()                # this process as it was (the command line keeps them frozen: runs.py)
    state.pool = pool


def _fork_safe() -> bool:
    from .forking import fork_safe
    return fork_safe()


def _pool(n: int) -> ProcessPoolExecutor:
    """A pool whose workers the forkserver forks (a fresh pool after a worker died, or one made
    after this process started threads)."""
    tables_as_ipc()
    from concurrent.futures import ProcessPoolExecutor
    return ProcessPoolExecutor(max_workers=n, mp_context=_context(), initializer=worker_init)


def worker_init() -> None:
    """Each pool worker, before its first task: the garbage collector on (a worker forked while the
    command line starts inherits it turned off: launch.main); a python-dateutil that is not
    installed marked absent (parsers/no_dateutil.py); malloc keeps the pages the worker frees
    (heap.py: a worker is traceview's own process, whoever started the pool)."""
    global _STATE
    _STATE = None                    # (a forked worker: the parent's run is not its own)
    import gc
    gc.enable()
    from .heap import keep_heap
    keep_heap()
    tables_as_ipc()
    from .parsers.no_dateutil import no_dateutil_search
    no_dateutil_search()


def forked_worker_init(on_start: Callable[[], None] | None) -> None:
    """A worker of start_pool's pool: worker_init, then the caller's `on_start` (a mapped job opens
    the DuckDB session of its first batch now, while the parent checks the options, not in the
    round that places the batches after the parse). Passed by fork, not pickled."""
    worker_init()
    if on_start is not None:
        on_start()


def _map_pool(n: int, idx: list[int], args: list[tuple], take, bad: dict) -> None:
    """All ranks on a pool of n; the ranks of a pool that broke (a worker died: every task in flight
    fails with it) are retried once each, one at a time, so a rank that kills its worker again is
    known to be the one, and only it is a failed rank."""
    _collect_pool(_submit_pool(n, idx, args), take)


def _submit_pool(n: int, idx: list[int], args: list[tuple]) -> dict[Future, tuple]:
    """The parse tasks submitted to the run's pool (made now where there is none): future -> (i, args)."""
    state = current()
    assert state is not None
    # the run's pool: the later rounds of a mapped job (map_tasks) reuse its processes
    pool = state.pool if state.pool is not None else _pool(max(n, state.settings.jobs))
    state.pool = pool
    return {pool.submit(*_task(parse_task, a)): (i, a) for i, a in zip(idx, args, strict=False)}


def _collect_pool(futs: dict[Future, tuple], take) -> None:
    """_map_pool's results as they complete (see there)."""
    from concurrent.futures import BrokenExecutor, as_completed
    crashed = []
    state = current()
    assert state is not None
    pool = state.pool
    try:
        for fut in as_completed(futs):
            i, a = futs[fut]
            try:
                outcome = fut.result()
            except BrokenExecutor:
                crashed.append((i, a))
                continue
            take(i, outcome)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        state.pool = None
        raise
    if crashed:                     # a broken pool takes no more tasks
        pool.shutdown(wait=True, cancel_futures=True)
        state.pool = None
    retry: ProcessPoolExecutor | None = None
    try:
        for i, a in sorted(crashed):
            retry = retry or _pool(1)
            try:
                outcome = retry.submit(parse_task, *a).result()
            except BrokenExecutor:
                retry.shutdown(wait=True)
                retry = None
                outcome = ("bad", "the worker parsing it died twice (out of memory or killed)")
            take(i, outcome)
    finally:
        if retry is not None:
            retry.shutdown(wait=True)


def _map_dask(client, idx: list[int], args: list[tuple], take, bad: dict) -> None:
    from distributed import as_completed as dask_completed
    from distributed.scheduler import KilledWorker
    cols = list(zip(*args, strict=False))
    futs = client.map(parse_task, *cols, pure=False, retries=1,
                      key=[f"traceview-parse-{i}-{os.getpid()}-{time.time_ns()}" for i in idx])
    where = {f.key: i for f, i in zip(futs, idx, strict=False)}
    try:
        for fut in dask_completed(futs):
            i = where[fut.key]
            try:
                outcome = fut.result()
            except (KilledWorker, OSError) as e:  # its workers died, a lost connection: a failed rank
                outcome = ("bad", f"the Dask workers parsing it died ({type(e).__name__})")
            take(i, outcome)
    except BaseException:
        client.cancel(futs)
        raise


def mappable(files: list) -> bool:
    """Whether a job of `files` runs mapped (mapped.py) under the configured run: two files or more,
    and a local pool (--jobs N > 1) or Dask with a store (its workers see the store, not a local
    temporary folder)."""
    state = current()
    if state is None or len(files) < 2:
        return False
    if state.client is not None:
        return state.settings.store is not None
    return state.settings.jobs > 1


# -- rounds of per-rank tasks (mapped.py) --------------------------------------------------------

def parallel(state: RunState) -> int:
    """How many tasks run at once under `state`: the Dask cluster's, else --jobs."""
    return 0 if state.client is not None else max(1, state.settings.jobs)


def keeps_sessions(state: RunState, batches: int) -> bool:
    """Whether the workers of a mapped job keep each batch's session between rounds (mapped.py):
    on the run's own pool, where there are no more batches than workers (each worker then keeps
    what it ran; above, a worker would hold many batches' tables for nothing)."""
    return state.client is None and state.settings.jobs > 1 and 1 < batches <= state.settings.jobs


def map_tasks(fn, args: list[tuple], again=None) -> list:
    """fn(*a) for each a, results in order, on the configured executor: the run's process pool
    (kept for the whole run, so a job's rounds start no new processes), Dask, or this process
    (--jobs 1). A pool that breaks (a worker died) runs the round once more in a fresh pool (with
    the arguments `again()` gives, where given)."""
    return submit_tasks(fn, args, again)()


def submit_tasks(fn, args: list[tuple], again=None):
    """map_tasks started now: a function that waits for the results and returns them (this process
    works on meanwhile; in this process itself, --jobs 1, the tasks run when it is called)."""
    state = current()
    assert state is not None
    if state.client is not None:
        cols = list(zip(*args, strict=True))
        stamp = f"{os.getpid()}-{time.time_ns()}"
        client = state.client
        futs = client.map(fn, *cols, pure=False, retries=1,
                          key=[f"traceview-{fn.__name__}-{i}-{stamp}" for i in range(len(args))])
        return lambda: client.gather(futs)
    if state.settings.jobs <= 1 or len(args) <= 1:
        return lambda: [fn(*a) for a in args]
    from concurrent.futures import BrokenExecutor
    if state.pool is None:
        state.pool = _pool(state.settings.jobs)
    try:
        first = [state.pool.submit(*_task(fn, a)) for a in args]
    except BrokenExecutor:
        first = None

    def gather() -> list:
        futs = first
        for attempt in (1, 2):
            try:
                if futs is None:
                    if state.pool is None:
                        state.pool = _pool(state.settings.jobs)
                    futs = [state.pool.submit(*_task(fn, a)) for a in (again() if again is not None else args)]
                return [f.result() for f in futs]
            except BrokenExecutor:
                state.pool.shutdown(wait=True, cancel_futures=True)
                state.pool = None
                futs = None
                if attempt == 2:
                    raise TraceError(None, "a worker process died twice while analyzing the job's ranks "
                                           "(out of memory or killed)") from None
        raise AssertionError("unreachable")
    return gather
