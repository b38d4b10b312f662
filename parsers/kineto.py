"""PyTorch profiler (Kineto) Chrome-trace JSON (`.json`, `.json.gz`) -> canonical tables.

Decoding uses msgspec with typed structs that keep only the fields traceview needs
(`bench/bench_ingest.py` compares it with orjson: ~4x faster, ~half the memory).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

import msgspec

from traceview import schema
from traceview.errors import TraceError
from traceview.profile import Profile

import pyarrow as pa
import pyarrow.compute as pc

from . import bounded_read, json_depth
from ._nesting import innermost_container, nest
from .kineto_events import CpuArgs, GpuArgs, LaunchArgs, SyncArgs, Trace

_CPU_KIND = {"cpu_op": "op", "operator": "op", "user_annotation": "annotation", "python_function": "python"}
_LAUNCH = {"cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "driver"}
_GPU = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
_SYNC = {"Stream Wait Event": "stream_wait_event", "Event Sync": "event_sync",
         "Stream Sync": "stream_sync", "Context Sync": "context_sync"}


def sniff(path: Path) -> bool:
    try:
        head = bounded_read.head(path, 4096).removeprefix(b"\xef\xbb\xbf").lstrip()
    except TraceError:
        return False
    return head[:1] == b"{"


def _decode(path: Path, raw) -> Trace:
    if bytes(raw[:3]) == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark (some editors and tools write one)
        raw = memoryview(raw)[3:]
    if not bytes(raw[:4096]).strip():
        raise TraceError(path, "file is empty")
    if json_depth.depth_exceeds(raw):
        raise TraceError(path, f"JSON nested more than {json_depth.MAX_DEPTH} levels deep (real traces need "
                               "fewer than 10): not a trace")
    try:
        return msgspec.json.decode(raw, type=Trace)
    except RecursionError:  # not expected after the depth check; kept as a guard
        raise TraceError(path, "JSON nested too deeply to decode: not a trace") from None
    except msgspec.ValidationError as e:
        if bytes(raw[:4096]).lstrip()[:1] == b"[":
            raise TraceError(path, "legacy autograd-profiler export (a bare JSON list of events): "
                                   "re-record with torch.profiler and export_chrome_trace") from e
        raise TraceError(path, f"not a Kineto trace ({e})") from e
    except msgspec.DecodeError as e:
        raise TraceError(path, f"not valid JSON, truncated or corrupt ({e})") from e


def _ns(v) -> int:
    if type(v) is int:
        return v * 1000
    return int(round(float(v) * 1000.0))


def _int(v):
    if type(v) is int:
        return v
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _ints(vals: list):
    """A column of optional ints (C-speed when they already are ints; slow path for strings)."""
    try:
        return pa.array(vals, type=pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([_int(v) for v in vals], type=pa.int64())


def _raws(vals: list) -> list:
    return [bytes(r).decode("utf-8", "replace") if r is not None and len(r) else None for r in vals]


def _raw(r) -> str | None:
    if r is None or not len(r):
        return None
    s = bytes(r).decode("utf-8", "replace")
    return s


def _split(r) -> str | None:
    """Split sizes as JSON list text; some PyTorch versions write the list as a JSON string."""
    text = _raw(r)
    if text and text.startswith('"'):
        try:
            text = msgspec.json.decode(text)
        except msgspec.DecodeError:
            return None
    return text or None


def _dims(r) -> str | None:
    if r is None or not len(r):
        return None
    b = bytes(r)
    if b[:1] != b"[":
        return None
    return b[1:-1].replace(b" ", b"").decode("ascii", "replace")


# Timestamps are kept as int64 ns; beyond +-2^62 ns (about 146 years from the epoch) sums and
# differences of two of them could overflow, and no profiler records such a time.
MAX_ABS_NS = 1 << 62


def _ns_array(vals: list, what: str = "ts") -> pa.Array:
    """µs timestamps (int or float) -> int64 ns, exact for ints, nearest ns for floats.
    Values beyond +-MAX_ABS_NS raise OverflowError naming the largest."""
    arr = pa.array(vals)
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), pa.int64())
    if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
        raise pa.ArrowTypeError(f"'{what}' holds {arr.type} values, not numbers")
    worst = pc.max(pc.abs_checked(arr)).as_py() if len(arr) else None
    if worst is not None and not worst * 1000 <= MAX_ABS_NS:  # also catches inf and nan
        raise OverflowError(f"'{what}' of {worst:g} µs, beyond +-{MAX_ABS_NS / 1000:.3g} µs")
    if pa.types.is_integer(arr.type):
        return pc.multiply(arr.cast(pa.int64()), 1000)
    arr = arr.cast(pa.float64())
    whole = pc.floor(arr)
    frac_ns = pc.round(pc.multiply(pc.subtract(arr, whole), 1000.0))
    return pc.add(pc.multiply(whole.cast(pa.int64()), 1000), frac_ns.cast(pa.int64()))


def _number(v) -> bool:
    return type(v) in (int, float)


_NULL = b"null"


def _args(events: list, typ) -> list:
    """Decode the raw `args` of many events in one call (args were kept raw while decoding)."""
    if not events:
        return []
    buf = b"[" + b",".join([e.args if len(e.args) else _NULL for e in events]) + b"]"
    try:
        return msgspec.json.decode(buf, type=list[Optional[typ]])
    except msgspec.ValidationError:  # a field of an unexpected shape: decode one by one, leniently
        out = []
        for e in events:
            try:
                out.append(msgspec.json.decode(e.args, type=typ) if len(e.args) else None)
            except msgspec.ValidationError:
                out.append(None)
        return out


def _col(args: list, attr: str) -> list:
    return [getattr(a, attr) if a is not None else None for a in args]


def read(path: Path) -> Profile:
    path = Path(path)
    try:
        return _read(path)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        # values of the wrong type or out of range (e.g. "ts": "abc", or a timestamp past int64 ns)
        msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise TraceError(path, f"event fields of the wrong type or out of range ({msg})") from None


def _read(path: Path) -> Profile:
    trace = _decode(path, bounded_read.read_bytes(path))
    events = trace.traceEvents
    if events is None:
        raise TraceError(path, "not a Kineto trace: no 'traceEvents' list")
    groups: dict[str, list] = {"gpu": [], "cpu": [], "launch": [], "sync": []}
    flows_s, flows_f = [], []
    dropped: Counter = Counter()  # events of a routed category without ts or name, per group
    odd_flows = 0
    route = {**{c: "gpu" for c in _GPU}, **{c: "cpu" for c in _CPU_KIND},
             **{c: "launch" for c in _LAUNCH}, "cuda_sync": "sync"}
    lower: dict = {}
    for ev in events:
        ph = ev.ph
        if ph == "X":
            cat = ev.cat
            g = lower.get(cat) if type(cat) is str else ""
            if g is None:
                g = lower[cat] = route.get(cat.lower(), "")
            if g:
                if ev.ts is not None and ev.name is not None:
                    groups[g].append(ev)
                else:
                    dropped[g] += 1
        elif ev.cat == "fwdbwd" and ph in ("s", "f"):
            if type(ev.id) in (int, str, float) and _number(ev.ts):
                (flows_s if ph == "s" else flows_f).append(ev)
            else:
                odd_flows += 1
    del events
    trace.traceEvents = None
    if not groups["gpu"]:
        if dropped["gpu"]:
            raise TraceError(path, f"no usable GPU activity: all {dropped['gpu']} kernels, memcpys and memsets "
                                   "lack 'ts' or 'name'")
        if groups["cpu"]:
            raise TraceError(path, "no GPU activity (kernels, memcpy, memset): a CPU-only trace; "
                                   "record with ProfilerActivity.CUDA to analyze GPU time")
        raise TraceError(path, "no GPU activity and no CPU events: nothing to analyze")

    next_id = [0]

    def ids(n: int) -> list:
        first = next_id[0]
        next_id[0] += n
        return list(range(first, first + n))

    def times(evs):
        start = _ns_array([e.ts for e in evs])
        dur = _ns_array([e.dur if e.dur is not None else 0 for e in evs], "dur")
        end = pc.add(start, pc.max_element_wise(dur, 0))  # both within +-2^62: no overflow
        worst = pc.max(pc.abs(end)).as_py() if len(end) else None
        if worst is not None and worst > MAX_ABS_NS:
            raise OverflowError(f"'ts' + 'dur' of {worst / 1000:g} µs, beyond +-{MAX_ABS_NS / 1000:.3g} µs")
        return start, end

    # Each group is turned into columns and then released, so that the decoded events,
    # the file's bytes they point into, and the new columns are not all alive at once.
    gpu_ev = groups.pop("gpu")
    ga = _args(gpu_ev, GpuArgs)
    no_args = sum(1 for a in ga if a is None or (a.correlation is None and a.external_id is None
                                                 and a.external_id_old is None))
    gpu = {"id": ids(len(gpu_ev)), "kind": [_GPU[e.cat.lower()] for e in gpu_ev], "name": [str(e.name) for e in gpu_ev],
           "correlation": _ints(_col(ga, "correlation")), "bytes": _ints(_col(ga, "bytes")),
           "grid": [_dims(x) for x in _col(ga, "grid")], "block": [_dims(x) for x in _col(ga, "block")],
           "device": [_int(d) if d is not None else _int(e.pid) for d, e in zip(_col(ga, "device"), gpu_ev)],
           "stream": [_int(x) if x is not None else _int(e.tid) for x, e in zip(_col(ga, "stream"), gpu_ev)]}
    gpu["start_ns"], gpu["end_ns"] = times(gpu_ev)
    _colls(gpu, ga)
    gpu_ext = _exts(ga)
    del gpu_ev, ga

    lau_ev = groups.pop("launch")
    la = _args(lau_ev, LaunchArgs)
    lau = {"id": ids(len(lau_ev)), "pid": _ints([e.pid for e in lau_ev]), "tid": [e.tid if type(e.tid) is int else _tid(e.tid) for e in lau_ev],
           "name": [str(e.name) for e in lau_ev], "api": [_LAUNCH[e.cat.lower()] for e in lau_ev],
           "correlation": _ints(_col(la, "correlation"))}
    lau["start_ns"], lau["end_ns"] = times(lau_ev)
    lau_ext = _exts(la)
    del lau_ev, la

    syn_ev = groups.pop("sync")
    sa = _args(syn_ev, SyncArgs)
    syn = {"id": ids(len(syn_ev)),
           "kind": [_SYNC.get(x, "other") for x in _col(sa, "sync_kind")],
           "device": [_int(x) for x in _col(sa, "device")], "stream": [_int(x) for x in _col(sa, "stream")],
           "event_id": [_int(x) for x in _col(sa, "wait_event")],
           "event_stream": [w if w is not None and w >= 0 else None
                            for w in (_int(x) for x in _col(sa, "wait_on_stream"))],
           "correlation": [_int(x) for x in _col(sa, "correlation")]}
    syn["start_ns"], syn["end_ns"] = times(syn_ev)
    del syn_ev, sa

    cpu_ev = groups.pop("cpu")
    ca = _args(cpu_ev, CpuArgs)
    cpu = {"id": ids(len(cpu_ev)), "pid": _ints([e.pid for e in cpu_ev]), "tid": [e.tid if type(e.tid) is int else _tid(e.tid) for e in cpu_ev],
           "kind": [_CPU_KIND[e.cat.lower()] for e in cpu_ev], "name": [str(e.name) for e in cpu_ev],
           "seq": _ints(_col(ca, "seq")),
           "input_dims": _raws(_col(ca, "input_dims")), "input_types": _raws(_col(ca, "input_types")),
           "concrete_inputs": _raws(_col(ca, "concrete"))}
    cpu["start_ns"], cpu["end_ns"] = times(cpu_ev)
    _colls(cpu, ca)
    cpu_ext = _exts(ca)
    del cpu_ev, ca

    # --- links -------------------------------------------------------------------------
    c_start, c_end = cpu["start_ns"].to_pylist(), cpu["end_ns"].to_pylist()
    by_ext: dict = {}
    for cid, x in zip(cpu["id"], cpu_ext):
        if x is not None and x not in by_ext:
            by_ext[x] = cid
    op_of_launch = [by_ext.get(x) if x else None for x in lau_ext]
    # launches whose External id names no op: the innermost range around them, found in the same sweep
    missing = [i for i, op in enumerate(op_of_launch) if op is None]
    l_start, l_end = (lau["start_ns"].to_pylist(), lau["end_ns"].to_pylist()) if missing else ([], [])
    depth, parent, *rest = nest(cpu["tid"], c_start, c_end, cpu["id"], [lau["tid"][i] for i in missing],
                                [l_start[i] for i in missing], [l_end[i] for i in missing])
    for i, op in zip(missing, rest[0] if rest else []):
        op_of_launch[i] = op
    launch_of_corr: dict = {}
    for i, c in enumerate(lau["correlation"].to_pylist()):
        if c is not None and c not in launch_of_corr:
            launch_of_corr[c] = i
    g_launch, g_op = [], []
    for c, x in zip(gpu["correlation"].to_pylist(), gpu_ext):
        li = launch_of_corr.get(c) if c is not None else None
        if li is not None:
            g_launch.append(lau["id"][li])
            g_op.append(op_of_launch[li])
        else:
            g_launch.append(None)
            g_op.append(by_ext.get(x) if x else None)
    fwd = _fwd_links(cpu, c_start, c_end, flows_s, flows_f)

    meta_info = _meta(path, trace, gpu)
    rank = meta_info["rank"]
    cpu.update(rank=[rank] * len(cpu["id"]), depth=depth, parent_id=parent, fwd_id=fwd)
    lau.update(rank=[rank] * len(lau["id"]), op_id=op_of_launch)
    gpu.update(rank=[rank] * len(gpu["id"]), launch_id=g_launch, op_id=g_op)
    syn.update(rank=[rank] * len(syn["id"]))
    return Profile(
        warnings=_warnings(path, dropped, no_args, odd_flows),
        gpu_activities=schema.from_pydict("gpu_activities", gpu),
        cpu_ranges=schema.from_pydict("cpu_ranges", cpu),
        launches=schema.from_pydict("launches", lau),
        syncs=schema.from_pydict("syncs", syn),
        meta=schema.from_pydict("meta", {k: [v] for k, v in meta_info.items()}),
    )


_GROUP = {"gpu": "GPU activities (kernels, memcpy, memset)", "cpu": "CPU ranges", "launch": "CUDA API calls",
          "sync": "sync records"}


def _warnings(path: Path, dropped: Counter, no_args: int, odd_flows: int) -> list[str]:
    """Events that were left out or could not be linked, counted (nothing is lost silently)."""
    out = [f"{path}: {n} {_GROUP[g]} without 'ts' or 'name' dropped" for g, n in sorted(dropped.items())]
    if no_args:
        out.append(f"{path}: {no_args} GPU activities without a correlation or External id in 'args': "
                   "linked to no launch, so outside every step window")
    if odd_flows:
        out.append(f"{path}: {odd_flows} fwdbwd flow events with an 'id' or 'ts' of the wrong type ignored")
    return out


def _colls(d: dict, args: list) -> None:
    names = _col(args, "coll_name")
    has = [i for i, x in enumerate(names) if x is not None]
    keys = ("coll_name", "coll_in_nelems", "coll_out_nelems", "coll_dtype", "coll_group_size",
            "coll_pg", "coll_in_split", "coll_out_split")
    for k in keys:
        d[k] = [None] * len(args)
    for i in has:
        a = args[i]
        d["coll_name"][i] = str(a.coll_name)
        d["coll_in_nelems"][i] = _int(a.in_nelems)
        d["coll_out_nelems"][i] = _int(a.out_nelems)
        d["coll_dtype"][i] = None if a.dtype is None else str(a.dtype)
        d["coll_group_size"][i] = _int(a.group_size)
        d["coll_pg"][i] = None if a.pg_name is None else str(a.pg_name)
        d["coll_in_split"][i] = _split(a.in_split)
        d["coll_out_split"][i] = _split(a.out_split)


def _tid(t):
    v = _int(t)
    if v is None and t is not None:
        return abs(hash(str(t))) % (1 << 31)
    return v if v is not None else 0


def _exts(args: list) -> list:
    return [a.external_id if a is not None and type(a.external_id) is int else _ext(a) for a in args]


def _ext(a):
    if a is None:
        return None
    x = _int(a.external_id)
    return x if x is not None else _int(a.external_id_old)


def _fwd_links(cpu: dict, c_start: list, c_end: list, flows_s: list, flows_f: list) -> list:
    """fwd_id for backward ops from `fwdbwd` flows: the flow starts at the forward op and
    ends inside the backward op (binding point 'e': the enclosing slice)."""
    fwd = [None] * len(cpu["id"])
    s_by_id = {e.id: e for e in flows_s}
    pairs = [(s_by_id[e.id], e) for e in flows_f if e.id in s_by_id]
    if not pairs:
        return fwd
    pts = [p[0] for p in pairs] + [p[1] for p in pairs]
    tids = [_tid(e.tid) for e in pts]
    ts = _ns_array([e.ts for e in pts]).to_pylist()
    ops = [i for i, k in enumerate(cpu["kind"]) if k == "op"]
    found = innermost_container([cpu["tid"][i] for i in ops], [c_start[i] for i in ops], [c_end[i] for i in ops],
                                [cpu["id"][i] for i in ops], tids, ts, ts)
    first = cpu["id"][0] if cpu["id"] else 0
    n = len(pairs)
    for j in range(n):
        f_op, b_op = found[j], found[n + j]
        if f_op is not None and b_op is not None and f_op != b_op:
            fwd[b_op - first] = f_op
    return fwd


def _meta(path: Path, trace: Trace, gpu: dict) -> dict:
    di = trace.distributedInfo or {}
    rank = _int(di.get("rank"))
    ws = _int(di.get("world_size"))
    dev = Counter(d for d in gpu["device"] if d is not None).most_common(1)
    device = dev[0][0] if dev else None
    gpu_name = sm = None
    for p in trace.deviceProperties or []:
        if _int(p.id) == device or gpu_name is None:
            gpu_name, sm = (str(p.name) if p.name is not None else None), _int(p.numSms)
    base = _int(trace.baseTimeNanoseconds)
    version = f"schemaVersion {trace.schemaVersion}" if trace.schemaVersion is not None else "unversioned"
    return {
        "rank": rank if rank is not None else -1,
        "world_size": ws,
        "source_format": "kineto",
        "source_version": version,
        "source_file": str(path),
        "device": device,
        "gpu_name": gpu_name,
        "sm_count": sm,
        "clock_offset_ns": base if base is not None else None,
        "rank_source": "distributedInfo" if rank is not None else None,
    }
