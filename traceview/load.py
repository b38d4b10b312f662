"""Load one job from paths: files of any supported format, or directories of them (ranks of one job)."""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .errors import TraceError
from .profile import Profile, merge
from .trace_files import KINETO_SUFFIXES, NSYS_SUFFIXES, expand  # noqa: F401 - expand: part of this module's interface

_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def read_one(path: Path, nsys_bin: str | None = None) -> Profile:
    # parsers imported where used: keeps CLI start-up light, and an nsys run without the Kineto parser
    name = path.name.lower()
    if name.endswith(KINETO_SUFFIXES):
        from .parsers import kineto
        return kineto.read(path)
    if name.endswith(NSYS_SUFFIXES):
        from .parsers import nsys
        return nsys.read(path, nsys_bin=nsys_bin) if name.endswith((".nsys-rep", ".qdrep")) else nsys.read(path)
    if path.stat().st_size == 0:
        raise TraceError(path, "file is empty")
    from .parsers import kineto
    if kineto.sniff(path):
        return kineto.read(path)
    from .parsers import nsys
    if nsys.sniff(path):
        return nsys.read(path)
    raise TraceError(path, "unknown trace format (expected Kineto .json/.json.gz or Nsight Systems .sqlite/.nsys-rep)")


def prestart_parse(path: Path) -> bool:
    """Fork the Kineto parser's helper for `path` now (parsers/kineto_helper.prestart: where the
    trace is large enough and no thread runs yet); the parse of `path` takes it, its first batches
    handed over by `prime_prestarted`. Returns whether it forked."""
    if path.name.lower().endswith(KINETO_SUFFIXES):    # (a trace named otherwise keeps the parser's own helper)
        from .parsers import kineto_helper
        if kineto_helper.fork_wanted(path):
            from .parsers import kineto, kineto_helper_serve  # noqa: F401  (what the helper runs: imported before the fork)
            return kineto_helper.prestart(path, kineto_helper_serve._serve)
    return False


def prime_prestarted(path: Path) -> None:
    """The prestarted helper's first batches handed over now: decoded while this process imports
    the analysis, opens its connection and checks the options (the parse goes on from there)."""
    from .parsers import kineto
    kineto.prime(path)


def end_prestarted() -> None:
    """Close a prestarted helper that no parse took (the trace came from the store, or an error came first)."""
    import sys
    helper = sys.modules.get("traceview.parsers.kineto_helper")
    if helper is not None:
        helper.discard()


_REVERSED = {"gpu_activities": "GPU activities", "cpu_ranges": "CPU ranges", "launches": "API calls",
             "syncs": "sync records"}


def clamp_reversed(prof: Profile, path: Path) -> Profile:
    """Rows that end before they start (a broken export or clock glitch) become zero-length at their
    start, with a warning: the interval algebra after the parsers needs end >= start."""
    import pyarrow.compute as pc
    for name, label in _REVERSED.items():
        t = getattr(prof, name)
        start, end = t.column("start_ns"), t.column("end_ns")
        bad = pc.less(end, start)
        n = pc.sum(bad).as_py() or 0
        if n:
            i = t.schema.get_field_index("end_ns")
            setattr(prof, name, t.set_column(i, t.schema.field(i), pc.if_else(bad, start, end)))
            prof.warnings.append(f"{path}: {n} {label} end before they start: taken as zero-length")
    return prof


MAX_PLAUSIBLE_SPAN_NS = 24 * 3600 * 10**9


def _flag_time_span(prof: Profile, path: Path) -> Profile:
    """No profiler capture spans a day of GPU time: a longer span means a corrupt timestamp, and
    the step window resting on it is wrong. Flagged with the extremes, so the report says so."""
    g = prof.gpu_activities
    if not g.num_rows:
        return prof
    first, last = pc.min(g.column("start_ns")).as_py(), pc.max(g.column("end_ns")).as_py()
    if first is not None and last is not None and last - first > MAX_PLAUSIBLE_SPAN_NS:
        prof.warnings.append(f"{path}: GPU activity spans {(last - first) / 3.6e12:.3g} h (from {first} to {last} ns): "
                             "a corrupt timestamp is likely, and a step window resting on it is wrong")
    return prof


def _warn_several_devices(prof: Profile, path: Path) -> Profile:
    """One rank's GPU work on several devices (one process driving two GPUs): analyzed as one
    timeline over all of them, which the report should say."""
    # the distinct (rank, device) with a device, as one int64 rank * 2^32 + device + 2^31 (both int32;
    # null where either is): a unique of one column (Table.group_by would import Arrow's Acero, ~20 ms)
    rank, device = prof.gpu_activities.column("rank"), prof.gpu_activities.column("device")
    key = pc.add(pc.multiply(rank.cast(pa.int64()), 1 << 32), pc.add(device.cast(pa.int64()), 1 << 31))
    per_rank: dict = {}
    for k in pc.unique(key).to_pylist():
        if k is not None:
            r, d = divmod(k, 1 << 32)
            per_rank.setdefault(r, set()).add(d - (1 << 31))
    if rank.null_count:   # no rank (not from the parsers): those rows' devices
        no_rank = pc.unique(pc.filter(device, pc.is_null(rank))).to_pylist()
        if any(d is not None for d in no_rank):
            per_rank[None] = {d for d in no_rank if d is not None}
    for _, devs in sorted(per_rank.items(), key=lambda kv: (kv[0] is None, kv[0])):
        if len(devs) > 1:
            prof.warnings.append(f"{path}: GPU activity on {len(devs)} devices ({', '.join(map(str, sorted(devs)))}) "
                                 "in one process: its step breakdown is one timeline over all of them")
    return prof


def load(paths: list[str | Path], nsys_bin: str | None = None) -> Profile:
    """Read every file and merge them into one job, assigning ranks where files do not record them."""
    files = expand(paths)
    files, profiles = read_ranks(files, nsys_bin)
    return join(files, place(files, profiles))


def place(files: list[Path], profiles: list[Profile]) -> list[Profile]:
    """The ranks of a job's files: numbers assigned where files record none (by file name or order),
    renumbered where several files numbered their processes alike. Works on whole profiles and on
    the meta-only ones of a mapped run (mapped.py) alike."""
    if len(profiles) > 1 or any(-1 in p.ranks for p in profiles):
        profiles = _assign_ranks(files, profiles)
        profiles = _separate_pid_order_ranks(files, profiles)
    return profiles


def join(files: list[Path], profiles: list[Profile]) -> Profile:
    """The placed profiles as one job (ids renumbered), its ranks checked and world size filled."""
    prof = merge(profiles)
    ranks = prof.ranks
    if len(set(ranks)) != len(ranks):
        raise TraceError(files[0].parent,
                         f"several traces claim the same rank ({sorted(ranks)}); pass the files of one job")
    _fill_world_size(prof)
    return prof


def parse_checked(f: Path, nsys_bin: str | None = None) -> Profile:
    """One trace file parsed and checked on its own: the per-rank task of every executor."""
    return _warn_several_devices(_flag_time_span(clamp_reversed(read_one(f, nsys_bin=nsys_bin), f), f), f)


def read_ranks(files: list[Path], nsys_bin: str | None = None) -> tuple[list[Path], list[Profile]]:
    """The files kept and each one's Profile, in order: parsed here, or (inside
    `executors.configured`) read from the store and parsed on the configured executor; files set
    aside by --skip-bad-ranks are left out."""
    from . import executors
    if executors.current() is None:
        return files, [parse_checked(f, nsys_bin) for f in files]
    got = executors.read_all(files, nsys_bin, parse_checked)   # a top-level function: it pickles by name
    if not got:
        raise TraceError(files[0].parent if len(files) > 1 else files[0],
                         "no trace could be read (every one was skipped)")
    return [f for f, _ in got], [Profile(**s.tables, warnings=list(s.warnings)) for _, s in got]


def _assign_ranks(files: list[Path], profiles: list[Profile]) -> list[Profile]:
    out = []
    used: set[int] = set()
    for p in profiles:
        used.update(r for r in p.ranks if r >= 0)
    by_name: dict[int, int] = {}
    for i, (f, p) in enumerate(zip(files, profiles, strict=True)):
        if -1 in p.ranks:
            m = _RANK_IN_NAME.search(f.name)
            if m and len(p.ranks) == 1:
                by_name[i] = int(m.group(1))
    name_ranks = list(by_name.values())
    names_ok = len(set(name_ranks)) == len(name_ranks) and not (set(name_ranks) & used)
    nxt = 0
    for i, (f, p) in enumerate(zip(files, profiles, strict=True)):
        for r in p.ranks:
            if r != -1:
                continue
            if names_ok and i in by_name:
                new, how = by_name[i], "file name"
            else:
                while nxt in used:
                    nxt += 1
                new, how = nxt, "order"
                p.warnings.append(f"{f}: no rank recorded; assigned rank {new} by file order")
            used.add(new)
            p = p.with_rank(-1, new)
            p.meta = _set_meta(p.meta, new, how)
            break
        out.append(p)
    return out


def _separate_pid_order_ranks(files: list[Path], profiles: list[Profile]) -> list[Profile]:
    """Several multi-process files each number their processes 0..n-1 when no rank is recorded:
    then number all ranks consecutively in file order (and say so)."""
    seen = [r for p in profiles for r in p.ranks]
    guessed = any(src and ("pid order" in src or src == "order")
                  for p in profiles for src in p.meta.column("rank_source").to_pylist())
    if len(seen) == len(set(seen)) or not guessed:
        return profiles
    out, nxt = [], 0
    for f, p in zip(files, profiles, strict=True):
        mapping = {r: nxt + i for i, r in enumerate(p.ranks)}
        nxt += len(mapping)
        q = p.map_ranks(mapping)
        q.warnings.append(f"{f}: ranks renumbered {min(mapping.values())}..{max(mapping.values())} "
                          "(no rank recorded; several files numbered their processes alike)")
        out.append(q)
    return out


def _set_meta(meta: pa.Table, rank: int, how: str) -> pa.Table:
    mask = pc.equal(meta.column("rank"), rank)
    i = meta.schema.get_field_index("rank_source")
    col = pc.if_else(mask, pa.scalar(how), meta.column("rank_source"))
    return meta.set_column(i, meta.schema.field("rank_source"), col)


def _fill_world_size(prof: Profile) -> None:
    ws = prof.world_size
    i = prof.meta.schema.get_field_index("world_size")
    col = pc.fill_null(prof.meta.column("world_size"), pa.scalar(ws, pa.int32()))
    prof.meta = prof.meta.set_column(i, prof.meta.schema.field("world_size"), col)
