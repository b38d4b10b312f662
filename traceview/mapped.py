"""A job of many rank files analyzed with its per-rank work on the executor's workers (`--jobs N`,
Dask) and its per-job work in this process: map per rank, reduce per job.

1. Parse: each file is parsed on a worker into the store (executors.read_all); this process reads
   back only each file's meta table and largest row id (Store.lookup_light).
2. Place: ranks are assigned and row ids renumbered exactly as `load()` does for a whole job
   (load.place / profile.merge), here on the meta-only profiles, which gives each file its rank
   mapping and id offset.
3. The files are cut into contiguous batches. A worker reads a batch's tables from the store,
   places them and writes them as Arrow IPC files into a scratch folder (in RAM for a local pool
   where there is room, else beside the store, which Dask workers see too: scratch_place); this
   process memory-maps them as the job's canonical tables, so its profile costs no copy.
4. Per-rank steps run on the workers: `engine.pipeline.build` hands every per-rank step it needs to
   `Remote.build`, which runs one round of batch tasks (each a session over its batch's tables and
   the steps built before, registered as given) and adopts the steps' tables, memory-mapped, into
   this process's session. `prefetch` asks for many at once (one round). Per-job steps and the
   document run here over those tables. Per-rank steps are unions over ranks (the engine enforces
   their scope; tests/test_engine_scope.py), so the tables, and so the report, are the same as a
   run in one process: the tests compare the bytes.
"""
from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from . import schema
from .errors import TraceError
from .profile import _ID_COLUMNS, Profile, _shift
from .spill import read_spill as _read_spill, spill_folder, spill_tables  # noqa: F401  (mapped.X in tests)

BATCH_BYTES = 256 << 20          # input bytes per batch at most (one rank per batch above it)
BATCH_RANKS = 64                 # ranks per batch at most


@dataclass
class Placement:
    path: str
    mapping: dict[int, int]          # rank as parsed -> rank in the job
    offset: int                      # added to every row id (profile.merge's renumbering)
    meta: pa.Table                   # the file's rows of the job's final meta table
    spill: str | None = None         # where its parse wrote its tables (spill_tables), if it did


@dataclass
class Remote:
    """This process's side of a mapped job: the scratch folder, the batches, the steps built."""
    scratch: Path
    batches: list[list[Placement]]
    given: dict[str, dict] = field(default_factory=dict)      # step -> its parameters, in build order
    rounds: int = 0
    early: list[str] = field(default_factory=list)            # built while placing, not yet adopted
    early_params: dict = field(default_factory=dict)           # what they were built with
    maps: list[mmap.mmap] = field(default_factory=list)       # every table file this process mapped
    keep: bool = False            # the workers keep each batch's session between rounds (_KEPT)
    # the batches' layer rows packed by the workers (steps_task: _layer_part), in batch order
    layer_parts: list | None = None

    def _adopt(self, session, name: str, own: dict) -> None:
        session.adopt(name, _concat([_read(self.scratch, b, name, self.maps) for b in range(len(self.batches))]), own)
        self.given[name] = own

    def release_pages(self) -> None:
        """Let go of the mapped tables' pages that queries touched (they count in this process's
        RSS until then; a later query reads them again from the page cache) and of the Arrow
        pool's unused memory: called after each section of the document."""
        for mm in self.maps:
            mm.madvise(mmap.MADV_DONTNEED)
        pa.default_memory_pool().release_unused()

    def build(self, session, names: list[str], params: dict) -> list[str]:
        """Build per-rank steps `names` (and what they need) on the workers, one round; adopt them."""
        adopted = []
        from .engine.steps import lookup
        for name in self.early:                  # the steps built while placing
            if name not in session.built:
                step = lookup(name)
                assert step is not None
                self._adopt(session, name, {p: self.early_params[p] for p in step.params})
                adopted.append(name)
        self.early = []
        todo = [n for n in names if n not in session.built]
        if not todo:
            return adopted
        given = list(self.given.items())
        args = [(str(self.scratch), b, given, todo, dict(params), self.keep) for b in range(len(self.batches))]
        t0 = time.perf_counter()
        results = _map(self.scratch, steps_task, args, self.keep)
        self.rounds += 1
        _stat(f"round {self.rounds}: {len(args)} batches, {','.join(todo)}", t0)
        built = results[0]["built"]
        for r in results[1:]:
            if r["built"] != built:
                raise AssertionError(f"batches built different steps: {built} != {r['built']}")
        if "layer_times" in built:
            self.layer_parts = [r.get("layers") for r in results]
        for name in built:
            step = lookup(name)
            assert step is not None
            self._adopt(session, name, {p: params[p] for p in step.params})
        return adopted + built


    def presorted_order(self, parts: list) -> tuple | None:
        """The (part, row) order of presorted spilled parts (packed.sort_rows' `order`), found by a
        worker of the run's pool, idle once the stall parts are in, and memory-mapped here; None
        where there is no pool or the task fails (then this process finds it)."""
        from . import executors
        from .document.packed import mapped_order, presorted_order_files
        state = executors.current()
        if state is None or state.client is not None or state.pool is None:
            return None
        out = str(self.scratch / f"order-{uuid.uuid4().hex[:8]}")
        args = ([(p.path if len(p) else None, len(p)) for p in parts], out)
        try:
            n = state.pool.submit(*executors._task(presorted_order_files, args)).result()
        except Exception:
            return None
        return None if n is None else mapped_order(out, n, self.maps)

    def stall_parts(self, session, job: dict, idle: dict) -> list[dict]:
        """stalls.rank_part of every batch, on the workers, each given the part of `job` and `idle`
        that concerns its ranks (its activity ids lie in one range: ids are renumbered by file)."""
        return self.start_stall_parts(session, job, idle)()

    def start_stall_parts(self, session, job: dict, idle: dict):
        """stall_parts started on the workers: a function that waits for the parts and returns them
        (this process computes the document's other sections meanwhile)."""
        from .analysis import critical_path
        from .engine.pipeline import build
        build(session, ["coll_instances", "activity_attribution", "segments"])   # what rank_part reads
        critical_path.prepare(session)              # (built on the workers where the prefetch did not)
        given = list(self.given.items())
        args = []
        for b, batch in enumerate(self.batches):
            lo = batch[0].offset
            hi = self.batches[b + 1][0].offset if b + 1 < len(self.batches) else None
            ranks = {r for p in batch for r in p.meta.column("rank").to_pylist()}
            part = {"by_id": _id_range(job["by_id"], lo, hi), "wait_until": _id_range(job["wait_until"], lo, hi)}
            args.append((str(self.scratch), b, given, part, {k: v for k, v in idle.items() if k[0] in ranks},
                         self.keep))
        t0 = time.perf_counter()
        pending = _submit(self.scratch, stalls_task, args, self.keep)
        if _in_this_process():
            # run in this process (--jobs 1, beyond_one_batch): the batches' walks on a thread of
            # their own while the caller computes the other sections, as a job loaded whole walks
            # its critical paths (stalls.start_rank_part); their queries let go of the GIL
            from .later import Later
            pending = Later(pending, name="traceview-stall-parts").result
        self.rounds += 1
        n = self.rounds

        def gather() -> list[dict]:
            parts = pending()
            from .document.packed import RowBytes
            self.maps += [mm for p in parts for v in p.values() if type(v) is RowBytes for mm in v.mapped()]
            _stat(f"round {n}: {len(args)} batches, critical paths and stalls", t0)
            return parts
        return gather


def _id_range(by_id, lo: int, hi: int | None):
    """The entries of an activity-id map whose id lies in [lo, hi) (hi None: no upper bound): its
    own `range` where it has one (analysis/matched.py: arrays cut, not a dict per batch)."""
    if hasattr(by_id, "range"):
        return by_id.range(lo, hi)
    return {i: v for i, v in by_id.items() if lo <= i and (hi is None or i < hi)}


def eligible(files: list[Path]) -> bool:
    """Whether the job of `files` runs mapped: on the run's workers (executors.mappable), or in this
    process where it is more than one batch (beyond_one_batch)."""
    from . import executors
    return executors.mappable(files) or beyond_one_batch(files)


def beyond_one_batch(files: list[Path]) -> bool:
    """Whether a --jobs 1 job of `files` runs mapped in this process: where its input is more than
    one batch's bytes (BATCH_BYTES), each batch's per-rank work then runs in turn over that batch's
    tables alone, so that the process holds one batch's session at a time and the job's canonical
    tables memory-mapped (the generated 1,024-rank job, 1.1 GB, loaded whole peaked at 3.4 GB, 3.1x
    its input, and grows with it; mapped: 0.56 GB). Below, a job is loaded whole (load()) as before:
    its peak is then no larger than a batch's session and it is not slowed by the rounds."""
    if not _in_this_process() or len(files) < 2:
        return False
    total = 0
    for f in files:
        try:
            total += os.stat(f).st_size
        except OSError:
            return False          # said where it is read
    return total > BATCH_BYTES


@dataclass
class Started:
    """A mapped job's parse, started (start_job): its scratch folder and the parse's results to take."""
    scratch: Path
    finish: Any                      # executors.start_read's function


def start_job(files: list[Path], nsys_bin: str | None) -> Started:
    """The parse of a mapped job started on the run's pool (the parent checks the options and
    imports the analysis meanwhile: the workers forked by executors.start_pool would otherwise wait
    for it); load_job takes the results, where a bad trace is said."""
    from . import executors, scratch_place
    from .load import parse_checked
    state = executors.current()
    assert state is not None
    fast = scratch_place.root(files, state.client is not None)     # RAM-backed where there is room
    if state.settings.store is None:          # --no-store: a store of this run only, removed at its end
        tmp = Path(tempfile.mkdtemp(prefix=scratch_place.name("run"), dir=fast))
        state.cleanups.append(lambda: shutil.rmtree(tmp, ignore_errors=True))
        state.settings.store = tmp
        state.cleanups.append(lambda: setattr(state.settings, "store", None))
    if fast is None:
        scratch = Path(state.settings.store) / "scratch" / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    else:
        scratch = fast / f"{scratch_place.name('scratch')}{uuid.uuid4().hex[:12]}"
    scratch.mkdir(parents=True)
    state.cleanups.append(lambda: shutil.rmtree(scratch, ignore_errors=True))
    return Started(scratch, executors.start_read(files, nsys_bin, parse_checked, light=True, spill=scratch / "files"))


def load_job(files: list[Path], nsys_bin: str | None, started: Started | None = None,
             early: dict | None = None) -> Profile | None:
    """The job's profile with its canonical tables memory-mapped from the scratch folder and
    `profile.remote` set for the session (None when the files cannot be mapped: then load() runs).
    `started`: its parse, started by start_job (else started here). `early`: parameters for
    EARLY_STEPS (without them, only the steps that take none are built while placing)."""
    from . import executors
    from .load import join, place
    state = executors.current()
    assert state is not None
    started = started or start_job(files, nsys_bin)
    scratch = started.scratch
    got = started.finish()
    index = {str(f): i for i, f in enumerate(files)}
    if not got:
        raise TraceError(files[0].parent, "no trace could be read (every one was skipped)")
    if any(s.max_id is None for _, s in got):       # a trace came back by value (it changed while stored)
        return None
    kept = [f for f, _ in got]
    light = [Profile(**s.tables, warnings=list(s.warnings)) for _, s in got]
    before = [p.meta.column("rank").to_pylist() for p in light]
    placed = place(kept, light)
    job = join(kept, placed)                  # meta and warnings of the job; its other tables are empty
    placements, offset = [], 0
    row_of = {r: i for i, r in enumerate(job.meta.column("rank").to_pylist())}    # (ranks are unique: join)
    # one chunk: the joined meta holds a chunk per file, and a take walks every chunk (1,024 takes
    # over 1,024 chunks: 1.7 s of this process's time between the parse and the place round)
    meta = job.meta.combine_chunks()
    for f, p, old, (_, s) in zip(kept, placed, before, got, strict=True):
        new = p.meta.column("rank").to_pylist()
        mapping = {a: b for a, b in zip(old, new, strict=True) if a != b}
        # the file's rows of the job's meta, in its order (a filter per file was 1.1 s at 1,024 files)
        mine = meta.take(pa.array(sorted(row_of[r] for r in new), pa.int64()))
        placements.append(Placement(str(f), mapping, offset, mine, str(spill_folder(scratch / "files", index[str(f)]))))
        offset += (s.max_id if s.max_id is not None else -1) + 1
    batches = _batches(placements, executors.parallel(state))
    keep = executors.keeps_sessions(state, len(batches))
    root = str(state.settings.store)
    t0 = time.perf_counter()
    params = dict(early or {})
    built = _map(scratch, place_task, [(str(scratch), b, _sent(batch), root, keep, _batch_meta(batch), params)
                                       for b, batch in enumerate(batches)], keep)
    _stat(f"placed {len(placements)} files in {len(batches)} batches", t0)
    maps: list[mmap.mmap] = []
    tables = {name: _concat([_read(scratch, b, name, maps) for b in range(len(batches))])
              for name in schema.TABLES if name != "meta"}
    remote = Remote(scratch, batches, maps=maps, keep=keep)
    remote.early, remote.early_params = built[0], params
    return Profile(**tables, meta=job.meta, warnings=job.warnings, remote=remote)


def _sent(batch: list[Placement]) -> list[Placement]:
    """A batch's placements as a place task is given them: without their meta tables (a pickled
    Arrow table costs some 0.5 ms; the task is given the batch's meta whole, _batch_meta)."""
    return [Placement(p.path, p.mapping, p.offset, None, p.spill) for p in batch]


def _batch_meta(batch: list[Placement]) -> pa.Table:
    """The batch's rows of the job's meta table, its files' one after the other."""
    return pa.concat_tables([p.meta for p in batch]) if len(batch) > 1 else batch[0].meta


def _stat(what: str, t0: float) -> None:
    if os.environ.get("TRACEVIEW_BENCH_STATS"):
        import sys
        print(f"TRACEVIEW_MAPPED {time.perf_counter() - t0:.3f}s {what}", file=sys.stderr)


def _batches(placements: list[Placement], workers: int) -> list[list[Placement]]:
    """Contiguous groups of files (file order is the job's row order): as few as keep every worker
    busy (a batch's session has a fixed cost per step, some 0.5 s for the whole analysis, that small
    ranks would pay many times over), and more where a batch would exceed BATCH_RANKS files or
    BATCH_BYTES of input."""
    n = len(placements)
    sizes = []
    for p in placements:
        try:
            sizes.append(os.stat(p.path).st_size)
        except OSError:
            sizes.append(0)
    count = max(workers or 8, -(-n // BATCH_RANKS), -(-sum(sizes) // BATCH_BYTES))
    per = max(1, -(-n // count))
    out: list[list[Placement]] = []
    cur: list[Placement] = []
    size = 0
    for p, b in zip(placements, sizes, strict=True):
        if cur and (len(cur) >= per or size + b > BATCH_BYTES):
            out.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += b
    if cur:
        out.append(cur)
    return out


# -- the scratch folder: one Arrow IPC file per batch and table ----------------------------------

def _file(scratch: Path, batch: int, name: str) -> Path:
    return scratch / f"b{batch:05d}" / f"{name}.arrow"


def _write(scratch: Path, batch: int, name: str, table: pa.Table) -> None:
    f = _file(scratch, batch, name)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_name(f".{f.name}.{uuid.uuid4().hex[:8]}")
    # an IPC file holds one dictionary per column; one record batch: the parent reads a batch's
    # tables as they are written, and each record batch of a file is objects of its own there (a
    # batch of 64 files' tables came in a chunk per file and parse chunk: at 1,024 ranks some 30 MiB)
    table = table.unify_dictionaries().combine_chunks()
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, f)


def _read(scratch: Path, batch: int, name: str, maps: list[mmap.mmap] | None = None) -> pa.Table:
    """Memory-mapped: no copy; pages are read when a query touches them. With `maps`, the mapping
    is added to it and the pages the read itself touched (the footer and every batch's header,
    with the kernel's fault-around) are let go at once: see Remote.release_pages."""
    fd = os.open(_file(scratch, batch, name), os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    table = pa.ipc.open_file(pa.py_buffer(mm)).read_all()
    if maps is not None:
        mm.madvise(mmap.MADV_DONTNEED)
        maps.append(mm)
    return table


def _concat(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


# -- the tasks (run on workers; module-level functions pickle by name) ---------------------------

# per-rank steps built while placing, where their parameters are known before the analysis starts:
# step_source_rank is what the parent's step_source counts to choose the job's step rule, and
# would otherwise be a round of its own (or, built here, a scan of every rank's ranges and launches)
EARLY_STEPS = ["activity_origin", "step_source_rank"]


def place_task(scratch: str, batch: int, files: list[Placement], store_root: str, keep: bool = False,
               meta: pa.Table | None = None, params: dict | None = None) -> list[str]:
    """Read a batch's files from the store, place them in the job (ranks, ids), write them, and
    build and write the EARLY_STEPS whose parameters `params` holds over them. Returns the steps
    built. `keep`: the session stays in this worker for the batch's later rounds (_KEPT). `meta`:
    the batch's meta table (_batch_meta), where the placements come without theirs (_sent)."""
    from .engine.pipeline import build
    from .store import Store
    store = Store(Path(store_root))
    parts: dict[str, list[pa.Table]] = {name: [] for name in schema.TABLES}
    for p in files:
        got = _read_spill(Path(p.spill)) if p.spill else None
        if got is None:
            stored = store.lookup(Path(p.path))
            if stored is None:
                raise TraceError(p.path, f"its stored tables could not be read back from the store {store_root}")
            got = stored.tables
        prof = Profile(**got, warnings=[])
        if p.mapping:
            prof = prof.map_ranks(p.mapping)
        for name in schema.TABLES:
            if name == "meta" and meta is not None:
                continue
            t = p.meta if name == "meta" else getattr(prof, name)
            if name in _ID_COLUMNS:
                t = _shift(t, _ID_COLUMNS[name], p.offset)
            parts[name].append(t)
    if meta is not None:
        parts["meta"] = [meta]
    tables = {name: pa.concat_tables(ts) if len(ts) > 1 else ts[0] for name, ts in parts.items()}
    for name, t in tables.items():
        _write(Path(scratch), batch, name, t)
    # the session queries the tables as written (memory-mapped, one dictionary per column), as a
    # later round's session over the scratch folder does; the copies read from the store go
    session = _session_over(Profile(**{name: _read(Path(scratch), batch, name) for name in tables}, warnings=[]))
    del tables, parts
    for p in files:                 # placed: the spilled copies are not read again (a retry reads the store)
        if p.spill:
            shutil.rmtree(p.spill, ignore_errors=True)
    from .engine.steps import lookup
    params = params or {}
    early = [n for n in EARLY_STEPS if all(p in params for p in lookup(n).params)]   # type: ignore[union-attr]
    built = build(session, early, params)
    for name in built:
        _write(Path(scratch), batch, name, session.table(name))
    if keep:
        _keep(scratch, batch, session)
    else:
        session.close()
    return built


def _batch_session(scratch: Path, batch: int, given: list[tuple[str, dict]], keep: bool = False):
    """The batch's session with the steps `given` built: the one this worker kept from an earlier
    round where it has it (given the steps it lacks: another worker built them), else one over the
    batch's tables and steps as written (kept from now on where `keep`)."""
    session = _KEPT.get((str(scratch), batch)) if keep else None
    if session is not None and any(n in session.built and session.built[n] != p for n, p in given):
        _drop(str(scratch), batch)               # (never expected: a step asked with other parameters)
        session = None
    if session is None:
        tables = {name: _read(scratch, batch, name) for name in schema.TABLES}
        session = _session_over(Profile(**tables, warnings=[]))
        if keep:
            _keep(str(scratch), batch, session)
    for name, params in given:
        if name not in session.built:
            session.adopt(name, _read(scratch, batch, name), params)
    return session


def steps_task(scratch: str, batch: int, given: list[tuple[str, dict]], targets: list[str], params: dict,
               keep: bool = False) -> dict:
    """Build per-rank steps over one batch (the steps built before given) and write them."""
    from .analysis import breakdown, capture, layers  # noqa: F401  (they declare the Python steps)
    from .engine.pipeline import build
    from .flops import steps as flops_steps  # noqa: F401
    t0 = time.perf_counter()
    session = _batch_session(Path(scratch), batch, given, keep)
    t1 = time.perf_counter()
    built = build(session, targets, params)
    t2 = time.perf_counter()
    for name in built:
        _write(Path(scratch), batch, name, session.table(name))
    out: dict = {"built": built}
    if "layer_times" in built:
        out["layers"] = _layer_part(session, Path(scratch), batch)
    if not keep:
        session.close()
    _stat(f"  batch {batch}: session {t1 - t0:.3f}s, build {t2 - t1:.3f}s, write", t2)
    return out


def _layer_part(session, scratch: Path, batch: int):
    """The batch's layer rows as the document holds them (each row's msgpack, in the order the
    parent reads layer_times: as it lies), written to the scratch folder, or None where they cannot
    be packed. The parent joins the batches' parts (layers.layer_rows) instead of packing every row
    itself (at 1,024 ranks some 6 s of its own time that no other core could share)."""
    from .document.packed import CHUNK, reader_row_bytes
    from .duck import query_reader
    rows = reader_row_bytes(query_reader(session.con, "SELECT * FROM layer_times", CHUNK))
    if rows is not None and len(rows):
        rows.spill(str(_file(scratch, batch, "part-layers").with_suffix(".rows")))
        if _in_this_process():     # (run in the parent itself: the part mapped as a worker's comes)
            rows = rows.spilled()
    return rows


def stalls_task(scratch: str, batch: int, given: list[tuple[str, dict]], job: dict, idle: dict,
                keep: bool = False) -> dict:
    """The critical paths, stalls and all-to-alls of one batch's ranks (stalls.rank_part). The
    job's last round: a kept session is let go."""
    from .analysis import stalls
    session = _batch_session(Path(scratch), batch, given, keep)
    _KEPT.pop((scratch, batch), None)
    # each section's rows sorted here in merge's order as they are packed, their keys beside them,
    # and the stalls summed: the parent merges the parts from the keys and decodes no row (stalls.merge)
    part = stalls.rank_part(session, job, idle, presorted=True)
    session.close()
    from .document.packed import RowBytes
    here = _in_this_process()
    for k, v in part.items():     # the long row lists go back as files, which the parent maps
        if type(v) is RowBytes and len(v):
            v.spill(str(_file(Path(scratch), batch, f"part-{k}").with_suffix(".rows")))
            if here:              # (run in the parent itself: the part mapped as a worker's comes)
                part[k] = v.spilled()
    return _share_strings(part, {})


# -- a session opened before the worker's first batch comes -------------------------------------
#
# Opening a DuckDB session (the connection, its settings, the interval macros) costs some 0.09 s,
# in the round that places the batches. A forked pool worker opens one as it starts
# (executors.start_pool), while this process still checks the options and before the ranks are
# parsed; its first batch takes it. The same session as one opened then: the answer is the same.

_SPARE: list = []                 # Session objects opened ahead, in a worker process


def open_spare() -> None:
    from .engine.session import Session
    _SPARE.append(Session())


def _session_over(profile: Profile):
    """A session over `profile`: the one opened ahead where there is one, else a new one."""
    from .engine.session import Session
    if _SPARE:
        session = _SPARE.pop()
        session.attach(profile)
        return session
    return Session(profile)


# -- the batch sessions a pool worker keeps between a job's rounds -------------------------------
#
# Each round's batch task would otherwise open a DuckDB session over the batch's tables as written
# and register the steps built before (the session, its macros, the tables read back: some 0.2 s
# a batch and round). Where a job has no more batches than workers (executors.keeps_sessions), each
# worker keeps the sessions of the batches it ran; a round's tasks then claim batches (a file
# created exclusively in the scratch folder, one per round and batch), each first a batch whose
# session it holds, so each batch runs where its session is whenever that worker is free. A task
# that claims a batch it does not hold builds the session as before: the answer is the same.

_KEPT: dict[tuple[str, int], Any] = {}          # (scratch, batch) -> Session, in a worker process


def _keep(scratch: str, batch: int, session) -> None:
    for key in [k for k in _KEPT if k[0] != scratch]:      # another job's (its run ended)
        _drop(*key)
    old = _KEPT.get((scratch, batch))
    if old is not None and old is not session:
        _drop(scratch, batch)
    _KEPT[(scratch, batch)] = session


def _drop(scratch: str, batch: int) -> None:
    old = _KEPT.pop((scratch, batch), None)
    if old is not None:
        old.close()


def _claim(scratch: str, rnd: str, batch: int) -> bool:
    folder = Path(scratch) / "claims"
    folder.mkdir(exist_ok=True)
    try:
        os.close(os.open(folder / f"{rnd}-{batch:05d}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def claimed(fn, scratch: str, rnd: str, args: list[tuple]) -> tuple[int, object]:
    """One of a round's len(args) tasks: fn(*args[b]) for a batch b no other task of the round
    claimed, one whose session this worker keeps where it can; (b, the result)."""
    mine = sorted(b for s, b in _KEPT if s == scratch)
    for b in [*mine, *range(len(args))]:
        if _claim(scratch, rnd, b):
            if os.environ.get("TRACEVIEW_BENCH_STATS"):
                from .executors import timed
                _stat(f"  batch {b} {fn.__name__}: {'its kept session' if b in mine else 'no kept session'}",
                      time.perf_counter())
                return b, timed(fn, *args[b])
            return b, fn(*args[b])
    raise AssertionError(f"every batch of round {rnd} was claimed: more tasks than batches")


# executors._task: a claimed task is timed as the fn it runs, not as itself
claimed.times_itself = True  # type: ignore[attr-defined]


def _map(scratch: Path, fn, args: list[tuple], keep: bool) -> list:
    """A round of `fn` over the batches (args in batch order), results in batch order: through
    `claimed` where the workers keep sessions."""
    return _submit(scratch, fn, args, keep)()


def _in_this_process() -> bool:
    """Whether the run's tasks run in this process itself (--jobs 1: executors.submit_tasks)."""
    from . import executors
    state = executors.current()
    return state is not None and state.client is None and state.settings.jobs <= 1


def _submit(scratch: Path, fn, args: list[tuple], keep: bool):
    """_map started: a function that waits for the results (executors.submit_tasks)."""
    from . import executors
    if not keep:
        return executors.submit_tasks(fn, args)

    def tasks() -> list[tuple]:            # a fresh round name for each attempt (a retry claims anew)
        rnd = uuid.uuid4().hex[:12]
        return [(fn, str(scratch), rnd, args)] * len(args)
    pending = executors.submit_tasks(claimed, tasks(), again=tasks)

    def gather() -> list:
        out: list = [None] * len(args)
        for b, r in pending():
            out[b] = r
        return out
    return gather


def _share_strings(obj, memo: dict):
    """`obj` with equal strings made one object, so that its pickle (and the rows unpickled in the
    parent) holds each name once. Plain lists and dicts are walked (rows: dicts of scalars, walked
    without a call per value); anything else is kept as it is."""
    t = type(obj)
    if t is str:
        return memo.setdefault(obj, obj)
    if t is dict:
        return {k: memo.setdefault(v, v) if type(v) is str else v if type(v) in _LEAVES else _share_strings(v, memo)
                for k, v in obj.items()}
    if t is list:
        return [memo.setdefault(v, v) if type(v) is str else v if type(v) in _LEAVES else _share_strings(v, memo)
                for v in obj]
    return obj


_LEAVES = frozenset({int, float, bool, type(None), bytes})


# -- the JSON report's long lists, written by the pool's workers ---------------------------------
#
# A mapped job's document holds its long row lists (stalls, layers, all-to-alls) in files of the
# scratch folder (document/packed.py). When the report is JSON, the workers, idle once the stall
# parts are merged, write each list's JSON (json_report.list_body_file, the code and bytes of the
# report's own writer) in ranges, in the order the report holds them, while this process keeps the
# document in the store and then writes the report, each range as soon as its task is done, beside
# the workers instead of after them (on two cores no gain measurable at 1,024 ranks: the list tasks
# then share the cores with the writing; docs/SCALE.md).

def start_list_bodies(doc: dict):
    """The JSON of `doc`'s long lists whose rows lie in files, started on the run's pool: a
    function that returns {key: a function giving that list's body in pieces} (what
    json_report.pieces takes) without waiting: each range's pieces wait for its task there; a
    range whose task failed is written here from the same rows (the same bytes, or the same
    error). Ranges not written out by the time the run ends are taken then, before the pool and
    the scratch folder go (executors.configured: RunState.drains). None where there is no local
    pool or no such list."""
    from concurrent.futures import BrokenExecutor  # a broken pool's error (the pool module not imported)

    from . import executors
    from .document.packed import PackedRows
    from .reports.json_report import list_body_file
    state = executors.current()
    if state is None or state.client is not None or state.pool is None:
        return None
    # in the order the report writes them (json_report.pieces: sorted keys), each list's ranges in
    # order: the report is written as the tasks end
    todo = sorted((k, src) for k, v in doc.items() if type(v) is PackedRows and (src := v.source()) is not None)
    if not todo:
        return None
    folder = Path(_first_file(todo[0][1])).parent
    stamp = uuid.uuid4().hex[:8]
    tasks = _body_ranges(todo, executors.parallel(state))
    paths = [str(folder / f"json-{stamp}-{i}.body") for i in range(len(tasks))]
    try:
        futs = [state.pool.submit(*executors._task(list_body_file, (src, path, lo, hi)))
                for (_, src, lo, hi), path in zip(tasks, paths, strict=True)]
    except (BrokenExecutor, RuntimeError):
        return None
    bodies = _Bodies(tasks, paths, futs)
    state.drains.append(bodies.drain)

    def take() -> dict:
        by_key: dict[str, list[int]] = {}
        for i, (k, _, _, _) in enumerate(tasks):
            by_key.setdefault(k, []).append(i)
        return {k: _joined_pieces([bodies.lazy(i) for i in idx]) for k, idx in by_key.items()}
    return take


class _Bodies:
    """The ranges of a JSON report's long lists being written by the pool's tasks (start_list_bodies):
    each range's pieces come from its task's file once it is done, or are written here."""

    def __init__(self, tasks: list, paths: list[str], futs: list):
        self.tasks, self.paths, self.futs = tasks, paths, futs
        self.fns: list = [None] * len(tasks)
        self.here: set[int] = set()          # the ranges whose task failed

    def pieces(self, i: int):
        """The function giving range i's pieces: its task's file, memory-mapped (it outlives the
        scratch folder), once the task is done; where the task failed, list_body here."""
        if self.fns[i] is None:
            try:
                self.fns[i] = _file_pieces(self.paths[i], self.futs[i].result())
            except Exception:
                _, src, lo, hi = self.tasks[i]
                from .reports.json_report import list_body_of
                self.fns[i] = lambda: list_body_of(src, lo, hi)
                self.here.add(i)
        return self.fns[i]

    def lazy(self, i: int):
        """A function giving range i's pieces, which waits for its task only when called."""
        return lambda: self.pieces(i)()

    def drain(self, ok: bool) -> None:
        """The run ends (executors.configured): where it ended well, every range not taken yet is
        taken now, while the pool and the scratch folder are there (a caller may write the report
        after); otherwise the pool's shutdown cancels what has not started."""
        if ok:
            for i in range(len(self.tasks)):
                self.pieces(i)
            for i in self.here:         # written here from rows in the scratch folder: now, while it is there
                got = list(self.fns[i]())
                self.fns[i] = lambda got=got: iter(got)


BODY_TASKS_PER_WORKER = 3         # a JSON report's long lists in about this many ranges per worker
BODY_MIN_CHUNKS = 16              # (of CHUNK rows) a range at least


def _body_ranges(todo: list[tuple[str, Any]], workers: int) -> list[tuple[str, Any, int, int | None]]:
    """The long lists' chunks in ranges of about one size, each a task: (key, source, lo, hi), a
    list's ranges in order, the largest list's first. One task a list left the workers waiting on
    the largest (at 1,024 ranks the stall rows, some half of all: 6.4 s for 8.6 s of CPU on two
    workers). A merged source is cut to the range's rows (its order arrays: 12 bytes a row, not
    pickled whole to every task); a file's by the chunks the task writes."""
    from .document.packed import source_chunks, source_range
    counts = [source_chunks(src) for _, src in todo]
    size = max(BODY_MIN_CHUNKS, -(-sum(counts) // max(1, workers * BODY_TASKS_PER_WORKER)))
    out: list[tuple[str, Any, int, int | None]] = []
    for (k, src), n in zip(todo, counts, strict=True):
        cuts = list(range(0, n, size)) + [n]
        if len(cuts) <= 2:
            out.append((k, src, 0, None))
            continue
        out += [(k, *source_range(src, lo, hi)) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)]
    return out


def _joined_pieces(fns: list):
    """The pieces of a list's ranges' bodies one after the other, joined as list_body joins chunks."""
    if len(fns) == 1:
        return fns[0]

    def gen():
        for i, fn in enumerate(fns):
            if i:
                yield b",\n"
            yield from fn()
    return gen


def _first_file(src) -> str:
    return src[1] if src[0] == "file" else next(p for p, _, _ in src[1] if p is not None)


def _file_pieces(path: str, size: int, piece: int = 1 << 20):
    """A function giving the file's bytes in pieces, memory-mapped now (the scratch folder is
    removed before the report is written; a mapping outlives the name), each piece's pages let go
    once it is given."""
    if size == 0:
        return lambda: iter(())
    fd = os.open(path, os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    finally:
        os.close(fd)

    def gen():
        view = memoryview(mm)
        for a in range(0, size, piece):          # (a piece starts at a multiple of the page size)
            yield view[a:min(size, a + piece)]
            mm.madvise(mmap.MADV_DONTNEED, a, min(size, a + piece) - a)
    return gen
