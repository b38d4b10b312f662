"""PyTorch profiler (Kineto) Chrome-trace JSON (`.json`, `.json.gz`) -> canonical tables.

Decoding uses msgspec with typed structs that keep only the fields traceview needs
(`bench/bench_ingest.py` compares it with orjson: ~4x faster, ~half the memory). The text is
read and cut into batches as it is inflated (`kineto_stream`); on a large trace and a machine with
a second core, a helper process decodes some of the batches meanwhile (`kineto_helper`), their
parts added in file order.
"""
from __future__ import annotations

import gc
import re
from collections import Counter, deque
from itertools import compress, repeat
from operator import attrgetter, is_, is_not, itemgetter, not_
from pathlib import Path
from typing import Any, Sequence

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from traceview import schema
from traceview.errors import TraceError
from traceview.later import Later
from traceview.profile import Profile

from . import bounded_read, json_depth, kineto_helper, kineto_stream
from ._nesting import innermost_container, nest
from .kineto_events import Args, Complete, FlowEnd, FlowStart, Trace, TypedEvent, TypedTrace  # noqa: F401

_EMPTY_RAW = msgspec.Raw(b"")
_CODED = schema.CODED  # strings stored once per distinct value (names, kinds, shapes)

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


_NONE = type(None)
_INT_OR_NONE = {int, _NONE}


def _only(vals: Sequence, types: set) -> bool:
    """Whether every value's exact type is one of `types` (bool is not int here), at C speed."""
    return set(map(type, vals)) <= types


def _opt_ints(vals: list) -> pa.Array:
    """Optional ints column; any value that is not an int (a string, a float, a bool) read by `_int`."""
    if _only(vals, _INT_OR_NONE):
        return pa.array(vals, type=pa.int64())
    return pa.array([_int(v) for v in vals], type=pa.int64())


def _int_or(vals: list, other: list, unreadable_too: bool = False) -> pa.Array:
    """`_int(v)` of each value, or `_int` of the other list's value where the first is None (or,
    with `unreadable_too`, where `_int` cannot read it either)."""
    if _only(vals, {int}):
        return pa.array(vals, type=pa.int64())
    if _only(vals, _INT_OR_NONE) and _only(other, _INT_OR_NONE):
        return pc.coalesce(pa.array(vals, type=pa.int64()), pa.array(other, type=pa.int64()))
    pairs = zip(vals, other, strict=False)
    if unreadable_too:
        return pa.array([_either(v, o) for v, o in pairs], type=pa.int64())
    return pa.array([_int(v) if v is not None else _int(o) for v, o in pairs], type=pa.int64())


def _either(v, other):
    got = _int(v)
    return got if got is not None else _int(other)


def _raws(vals: Sequence) -> list:
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


def _dims_col(vals: Sequence) -> pa.Array:
    """`_dims` of every raw value, with Arrow string kernels when the text is ASCII (it always is:
    lists of ints); one by one otherwise."""
    sep = b"\x1f"  # a control character: never unescaped inside JSON text
    joined = sep.join(vals)
    if not vals or not joined.isascii() or joined.count(sep) != len(vals) - 1:
        return pa.array([_dims(x) for x in vals], type=pa.string())
    arr = pa.array(joined.decode("ascii").split("\x1f"), type=pa.string())
    inner = pc.replace_substring(pc.utf8_slice_codeunits(arr, 1, -1), " ", "")
    return pc.if_else(pc.starts_with(arr, "["), inner, pa.scalar(None, pa.string()))


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
        return pc.multiply(arr.cast(pa.int64()), _THOUSAND)
    arr = arr.cast(pa.float64())
    whole = pc.floor(arr)
    frac_ns = pc.round(pc.multiply(pc.subtract(arr, whole), _THOUSAND_F))
    return pc.add(pc.multiply(whole.cast(pa.int64()), _THOUSAND), frac_ns.cast(pa.int64()))


# typed scalars for the kernels called on every chunk (a bare Python number is converted on each
# call, and pyarrow's conversion tries to import dateutil each time: ~15-36 µs)
_THOUSAND, _THOUSAND_F, _ZERO = pa.scalar(1000, pa.int64()), pa.scalar(1000.0, pa.float64()), pa.scalar(0, pa.int64())


def _number(v) -> bool:
    return type(v) in (int, float)


# --- decoding a chunk of events ----------------------------------------------------------

CHUNK_EVENTS = 1 << 14  # events decoded into Python objects at a time
_AT = re.compile(r"`\$\[(\d+)\]")


def _decode_chunk(path: Path, raws: list, first: int) -> list:
    buf = b"[" + b",".join(raws) + b"]"
    try:
        return msgspec.json.decode(buf, type=list[TypedEvent])
    except msgspec.ValidationError as e:  # e.g. an event that is not an object: name it as in the file
        msg = _AT.sub(lambda m: f"`$.traceEvents[{first + int(m.group(1))}]", str(e))
        raise TraceError(path, f"not a Kineto trace ({msg})") from None
    except msgspec.DecodeError as e:
        raise TraceError(path, f"not valid JSON, truncated or corrupt ({e})") from None


def _get(rows, field: str) -> list:
    """One field of many structs (C-speed attribute access)."""
    return list(map(attrgetter(field), rows))


def _take(col: Sequence, idx: list) -> tuple:
    if not idx:
        return ()
    got = itemgetter(*idx)(col)
    return got if len(idx) > 1 else (got,)


# what an event is routed to: 0 nothing, 1-4 a group, 5 a fwdbwd flow candidate
_GROUPS = ("", "gpu", "cpu", "launch", "sync")
_ROUTE = {**{c: 1 for c in _GPU}, **{c: 2 for c in _CPU_KIND}, **{c: 3 for c in _LAUNCH}, "cuda_sync": 4}
_FLOW = 5


def _code(ph, cat) -> int:
    if ph == "X":
        return _ROUTE.get(cat.lower(), 0) if type(cat) is str else 0
    if cat == "fwdbwd" and ph in ("s", "f"):
        return _FLOW
    return 0


def _cat_codes(cat: list) -> tuple[pa.Array, pa.DictionaryArray | None]:
    """`_codes` of complete events (phase X): the route of each by its category alone."""
    try:
        d_cat = pa.array(cat, type=_CODED)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):  # a category that is not a string: one by one
        return pa.array([_code("X", c) for c in cat], type=pa.int8()), None
    cats = d_cat.dictionary.to_pylist() + [None]  # absent: last
    table = pa.array([_code("X", c) for c in cats], type=pa.int8())
    return table.take(d_cat.indices.fill_null(len(cats) - 1) if d_cat.null_count else d_cat.indices), d_cat


def _codes(ph: list, cat: list) -> tuple[pa.Array, pa.DictionaryArray | None]:
    """The route of each event, computed per distinct (ph, cat) and spread at C speed; and the
    categories dictionary-coded (None where a ph or cat is not a string)."""
    try:  # each column's distinct strings, coded in one pass
        d_ph, d_cat = pa.array(ph, type=_CODED), pa.array(cat, type=_CODED)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):  # a ph or cat that is not a string: one by one
        return pa.array([_code(p, c) for p, c in zip(ph, cat, strict=False)], type=pa.int8()), None
    phs, cats = d_ph.dictionary.to_pylist() + [None], d_cat.dictionary.to_pylist() + [None]  # absent: last
    table = pa.array([_code(p, c) for p in phs for c in cats], type=pa.int8())
    i_ph, i_cat = (d.indices.fill_null(len(vals) - 1) if d.null_count else d.indices
                   for d, vals in ((d_ph, phs), (d_cat, cats)))
    pair = pc.add(pc.multiply(i_ph.cast(pa.int64()), pa.scalar(len(cats), pa.int64())), i_cat.cast(pa.int64()))
    return table.take(pair), d_cat


def _kinds(cats: Sequence, table: dict) -> list:
    known = {c: table[c.lower()] for c in set(cats)}
    return list(map(known.__getitem__, cats))


def _kind_col(e: _EvCols, table: dict) -> pa.Array:
    """The group's kind (the table's name for the lower-cased category), dictionary-coded in order of
    first appearance; from the routing's coded categories where it made them (no category read)."""
    if e.cats is None:
        return pa.array(_kinds(e["cat"], table), type=_CODED)
    at, values = e.cats
    seen = pc.unique(at).to_pylist()  # the group's categories, in order of first appearance
    kinds = list(dict.fromkeys(table[values[i].lower()] for i in seen))  # so are their kinds
    remap = [0] * len(values)
    for i in seen:
        remap[i] = kinds.index(table[values[i].lower()])
    return pa.DictionaryArray.from_arrays(pa.array(remap, type=pa.int32()).take(at), pa.array(kinds, type=pa.string()))


def _strs(vals: Sequence) -> pa.Array:
    """Names, dictionary-coded: each distinct string once, in order of first appearance (the
    group's accumulator then only maps those few strings into its column's dictionary)."""
    if set(map(type, vals)) <= {str}:
        return pa.array(vals, type=_CODED)
    return pa.array([str(v) for v in vals], type=_CODED)


def _raw_texts(vals: Sequence) -> pa.Array:
    """Raw JSON slices -> their text (None where absent), dictionary-coded; decoded in one call
    when possible."""
    sep = b"\x1f"  # a control character: never unescaped inside JSON text
    joined = sep.join(vals)
    if not vals:
        return pa.array([], type=_CODED)
    if joined.count(sep) == len(vals) - 1:
        return pa.array([t or None for t in joined.decode("utf-8", "replace").split("\x1f")], type=_CODED)
    return pa.array(_raws(vals), type=_CODED)


def _tids(vals: Sequence) -> pa.Array:
    if set(map(type, vals)) <= {int}:
        return pa.array(vals, type=pa.int64())
    return pa.array([t if type(t) is int else _tid(t) for t in vals], type=pa.int64())


def _times(ts: Sequence, dur: Sequence):
    start = _ns_array(list(ts))
    dur_ns = _ns_array(list(dur), "dur")  # an absent dur is 0
    if dur_ns.null_count:
        dur_ns = dur_ns.fill_null(0)
    end = pc.add(start, pc.max_element_wise(dur_ns, _ZERO))  # both within +-2^62: no overflow
    worst = pc.max(pc.abs(end)).as_py() if len(end) else None
    if worst is not None and worst > MAX_ABS_NS:
        raise OverflowError(f"'ts' + 'dur' of {worst / 1000:g} µs, beyond +-{MAX_ABS_NS / 1000:.3g} µs")
    return start, end


class _ArgCols:
    """The `args` of a group's events (decoded with the events), read one field at a time
    (absent or non-object args: the defaults)."""

    def __init__(self, rows):
        args = _get(rows, "args")
        if not set(map(type, args)) <= {Args}:
            args = [a if type(a) is Args else _NO_ARGS for a in args]
        self.rows = args
        self.cache: dict[str, list] = {}

    def __getitem__(self, field: str) -> list:
        got = self.cache.get(field)
        if got is None:
            got = self.cache[field] = _get(self.rows, field)
        return got


_NO_ARGS = Args()


def _exts(a: _ArgCols) -> pa.Array:
    """`External id` (an int, or a string of one), else the older `external id` (read only where
    some `External id` is not an int)."""
    ext = a["external_id"]
    if _only(ext, {int}):
        return pa.array(ext, type=pa.int64())
    return _int_or(ext, a["external_id_old"], unreadable_too=True)


def _gpu_chunk(e: _EvCols, a: _ArgCols, part: _Part) -> dict:
    corr = a["correlation"]
    if None in corr:
        ext, old = a["external_id"], a["external_id_old"]
        part.no_args += sum(1 for c, x, o in zip(corr, ext, old, strict=False)
                           if c is None and x is None and o is None)
    d = {"kind": _kind_col(e, _GPU), "name": _strs(e["name"]),
         "correlation": _ints(corr), "bytes": _ints(a["bytes"]),
         "grid": _dims_col(a["grid"]), "block": _dims_col(a["block"]),
         "device": _int_or(a["device"], e["pid"]), "stream": _int_or(a["stream"], e["tid"]),
         "ext": _exts(a)}
    d["start_ns"], d["end_ns"] = _times(e["ts"], e["dur"])
    _colls(d, a)
    return d


def _launch_chunk(e: _EvCols, a: _ArgCols, part: _Part) -> dict:
    d = {"pid": _ints(e["pid"]), "tid": _tids(e["tid"]), "name": _strs(e["name"]),
         "api": _kind_col(e, _LAUNCH), "correlation": _ints(a["correlation"]),
         "ext": _exts(a)}
    d["start_ns"], d["end_ns"] = _times(e["ts"], e["dur"])
    return d


def _sync_chunk(e: _EvCols, a: _ArgCols, part: _Part) -> dict:
    waits = _opt_ints(a["wait_on_stream"])
    d = {"kind": pa.array([_SYNC.get(x, "other") for x in a["sync_kind"]], type=_CODED),
         "device": _opt_ints(a["device"]), "stream": _opt_ints(a["stream"]),
         "event_id": _opt_ints(a["wait_event"]),
         "event_stream": pc.if_else(pc.greater_equal(waits, _ZERO), waits, pa.scalar(None, pa.int64())),
         "correlation": _opt_ints(a["correlation"])}
    d["start_ns"], d["end_ns"] = _times(e["ts"], e["dur"])
    return d


def _cpu_chunk(e: _EvCols, a: _ArgCols, part: _Part) -> dict:
    d = {"pid": _ints(e["pid"]), "tid": _tids(e["tid"]),
         "kind": _kind_col(e, _CPU_KIND), "name": _strs(e["name"]),
         "seq": _ints(a["seq"]),
         "input_dims": _raw_texts(a["input_dims"]), "input_types": _raw_texts(a["input_types"]),
         "concrete_inputs": _raw_texts(a["concrete"]), "ext": _exts(a)}
    d["start_ns"], d["end_ns"] = _times(e["ts"], e["dur"])
    _colls(d, a)
    return d


_CHUNK_FN = {1: _gpu_chunk, 2: _cpu_chunk, 3: _launch_chunk, 4: _sync_chunk}


class _Part:
    """What one batch of events gives (its groups' columns, counts, flows), kept apart until it is
    added to the accumulators in file order (`add_part`): a batch may be read by the helper process."""
    __slots__ = ("groups", "dropped", "no_args", "flows")

    def __init__(self):
        self.groups: list[tuple[int, dict]] = []  # (route code, columns)
        self.dropped: Counter = Counter()
        self.no_args = 0
        self.flows: tuple = ([], [], [])


def add_part(part: _Part, accs: dict, dropped: Counter, flows: tuple) -> None:
    for code, d in part.groups:
        accs[code].add(d)
    dropped.update(part.dropped)
    accs[1].no_args += part.no_args
    for mine, got in zip(flows, part.flows, strict=True):
        mine.extend(got)


def route_part(evs: list) -> _Part:
    """A batch of the stream's events (kineto_stream._decode_events: the union of
    kineto_events.STREAM_EVENTS, or TypedEvent where that refused one), routed chunk by chunk into
    one part."""
    part = _Part()
    route = _route_chunk if evs and type(evs[0]) is TypedEvent else _route_stream
    for i in range(0, len(evs), CHUNK_EVENTS):
        route(evs[i:i + CHUNK_EVENTS], part)
    return part


class _Acc:
    """One group's columns, as Arrow arrays per chunk. The string columns the table types as
    dictionaries (names, kinds, shapes: few distinct values, repeated on every event) are kept as
    int32 codes into one dictionary per column, in order of first appearance in the file."""

    def __init__(self, table: str):
        self.parts: dict[str, list] = {}
        self.n = 0
        self.no_args = 0
        self.coded = {f.name for f in schema.TABLES[table] if pa.types.is_dictionary(f.type)}
        self.dicts: dict[str, dict] = {k: {} for k in self.coded}

    def add(self, d: dict) -> None:
        for k, v in d.items():
            self.parts.setdefault(k, []).append(self._code(k, v) if k in self.coded else v)
        self.n += len(d["start_ns"])

    def _code(self, k: str, arr: pa.Array) -> pa.Array:
        """A chunk's strings (dictionary-coded by the chunk, in order of first appearance) -> codes
        in the column's dictionary (the chunk's distinct values looked up once)."""
        enc = arr if pa.types.is_dictionary(arr.type) else arr.dictionary_encode()
        known = self.dicts[k]
        remap = pa.array([known.setdefault(v, len(known)) for v in enc.dictionary.to_pylist()], type=pa.int32())
        return remap.take(enc.indices)

    def columns(self) -> dict:
        """The concatenated columns (each chunk list let go once its column is built)."""
        out = {}
        for k in list(self.parts):
            v = self.parts.pop(k)
            col = pa.concat_arrays(v) if len(v) > 1 else v[0]
            del v
            if k in self.coded:
                col = pa.DictionaryArray.from_arrays(col, pa.array(list(self.dicts.pop(k)), type=pa.string()))
            out[k] = col
        return out


class _EvCols:
    """A group's events read one field at a time (each field extracted once). `cats`, where the
    routing coded the categories: each row's position in `cat_values` (int32) and those values."""

    def __init__(self, rows, cats: tuple | None = None):
        self.rows = rows
        self.cache: dict[str, list] = {}
        self.cats = cats

    def __getitem__(self, field: str) -> list:
        got = self.cache.get(field)
        if got is None:
            got = self.cache[field] = _get(self.rows, field)
        return got


def _route_chunk(evs: list, part: _Part) -> None:
    """A chunk of TypedEvent (the whole read's: every field of every event), routed into `part`."""
    codes, cat = _codes(_get(evs, "ph"), _get(evs, "cat"))
    _add_groups(evs, codes, cat, part)


# the stream's events by class: 1 a complete event (routed by its category), 2 a flow; 0 the rest
_STREAM_KIND: dict[type, int] = {Complete: 1, FlowStart: 2, FlowEnd: 2}


def _route_stream(evs: list, part: _Part) -> None:
    """`_route_chunk` of a chunk of the stream's events (kineto_events.STREAM_EVENTS): the complete
    events routed by their category, the flows of category fwdbwd kept; the events of every other
    phase were decoded into nothing."""
    kinds = pa.array(list(map(_STREAM_KIND.get, map(type, evs), repeat(0))), type=pa.int8())
    complete = _take(evs, pc.indices_nonzero(pc.equal(kinds, 1)).to_pylist())
    if complete:
        codes, cat = _cat_codes(_get(complete, "cat"))
        _add_groups(complete, codes, cat, part)
    flows = [ev for ev in _take(evs, pc.indices_nonzero(pc.equal(kinds, 2)).to_pylist()) if ev.cat == "fwdbwd"]
    if flows:
        _add_flows(flows, list(map(is_, map(type, flows), repeat(FlowStart))), part.flows)


def _add_groups(evs: Sequence, codes: pa.Array, cat: pa.DictionaryArray | None, part: _Part) -> None:
    """The events of each route code of `codes` (`_codes`: 1-4 a group's, 5 a fwdbwd flow) added to
    `part` as their group's columns or as flows. `cat`: the events' categories, dictionary-coded."""
    for code in pc.unique(codes).to_pylist():
        if not code:
            continue
        at = pc.indices_nonzero(pc.equal(codes, code))
        idx = at.to_pylist()
        rows: Sequence = _take(evs, idx)
        if code == _FLOW:
            _add_flows(rows, list(map("s".__eq__, _get(rows, "ph"))), part.flows)
            continue
        cols = _EvCols(rows, (cat.indices.take(at), cat.dictionary.to_pylist()) if cat is not None else None)
        if None in cols["ts"] or None in cols["name"]:  # events without ts or name: dropped, counted
            keep = [ev for ev in rows if ev.ts is not None and ev.name is not None]
            part.dropped[_GROUPS[code]] += len(rows) - len(keep)
            rows = keep
            if not rows:
                continue
            cols = _EvCols(rows)
        part.groups.append((code, _CHUNK_FN[code](cols, _ArgCols(rows), part)))


def _add_flows(rows: Sequence, starts: list, flows: tuple) -> None:
    """Flow events kept as (id, tid, ts) (the event itself, and its raw args, let go): the starts
    (`starts`: whether each is one) in flows[0], the ends in flows[1], and None in flows[2] for one
    whose id or ts has no usable type. At C speed where every id and ts has a usable type."""
    ids, ts = _get(rows, "id"), _get(rows, "ts")
    if set(map(type, ids)) <= _FLOW_ID and set(map(type, ts)) <= _NUMBER:
        trip = list(zip(ids, _get(rows, "tid"), ts, strict=True))
        flows[0].extend(compress(trip, starts))
        flows[1].extend(compress(trip, map(not_, starts)))
        return
    for ev, start in zip(rows, starts, strict=True):
        if type(ev.id) in (int, str, float) and _number(ev.ts):
            (flows[0] if start else flows[1]).append((ev.id, ev.tid, ev.ts))
        else:
            flows[2].append(None)


_FLOW_ID = {int, str, float}
_NUMBER = {int, float}


def read(path: Path) -> Profile:
    path = Path(path)
    # no collector passes while the events are read, as in the helper process (kineto_helper_serve):
    # the events are untracked structs and what the parse keeps (flow tuples, lists of fields, Arrow
    # arrays) holds no cycles, but each young pass walked the batch's big fresh lists (x34: 207
    # passes, 0.17 s of CPU)
    collecting = gc.isenabled()
    gc.disable()
    from . import huge_pages
    if kineto_helper._estimated_text(path) >= huge_pages.MIN_TEXT:
        huge_pages.turn_off()
    try:
        profile = _read(path)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        # values of the wrong type or out of range (e.g. "ts": "abc", or a timestamp past int64 ns)
        msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise TraceError(path, f"event fields of the wrong type or out of range ({msg})") from None
    finally:
        if collecting:
            gc.enable()
    # the chunks' columns and the link lookups are freed: hand their pages back to the system, so
    # that what comes next (DuckDB, another allocator) starts from the tables alone
    pa.default_memory_pool().release_unused()
    return profile


def _ingest_stream(path: Path, checked: bool = False) -> tuple:
    """The events routed into column groups as the text is read: a batch of text at a time; on a
    large trace some batches decoded by a helper process meanwhile (`kineto_helper`). The batches
    handed over go unchecked unless `checked` (kineto_stream._batch_text): the decoder's refusal of
    one (kineto_stream.decode_text) raises HandedRefused in its turn, and the caller reads again,
    `checked`."""
    accs, dropped, flows = _sinks()
    helper = _helper(path)
    if checked and helper is not None and helper.begun is not None:   # primed unchecked: not for this read
        helper.close()
        helper = None
    begun = helper.begun if helper is not None else None
    if begun is not None:       # its first batches handed over already (prime)
        helper.begun = None
    stream, items, waiting = begun if begun is not None else _stream(path, helper, checked)
    if helper is None:
        for evs in items:
            assert not isinstance(evs, bytes)  # without a helper, every batch comes decoded
            part = route_part(evs)
            del evs
            add_part(part, accs, dropped, flows)
        return stream.top, accs, dropped, flows

    def redo(text: bytes) -> _Part:
        return route_part(kineto_stream.decode_text(text))

    def drain(wait: bool) -> None:
        while waiting and (waiting[0] is not None or wait or helper.answered()):
            got = waiting.popleft()
            add_part(got if got is not None else helper.take(redo), accs, dropped, flows)

    def finish() -> None:
        """drain(wait=True) once the text has ended, except that while the helper has not answered
        the oldest of its batches and holds two or more, the newest of them is decoded here instead
        of waited for (the helper's answer to it is never read): the two processes end together. A
        batch decoded so whose decode fails raises when its turn comes, as in one process."""
        while waiting:
            got = waiting[0]
            if got is None and helper.pending() >= 2 and not helper.answered():
                text = helper.steal()
                last = max(i for i, w in enumerate(waiting) if w is None)
                try:
                    waiting[last] = redo(text)
                except Exception as e:  # noqa: BLE001 - raised in its turn
                    waiting[last] = _Failed(e)
                continue
            waiting.popleft()
            if type(got) is _Failed:
                raise got.error
            add_part(got if got is not None else helper.take(redo), accs, dropped, flows)

    ended = False
    try:
        try:
            for item in items:
                if isinstance(item, bytes):
                    helper.send(item)
                    waiting.append(None)
                else:
                    waiting.append(route_part(item))
                    del item
                drain(wait=False)
        except BaseException:
            drain(wait=True)  # an earlier batch's error is the one a read in one process gives
            raise
        finish()
        ended = True
    finally:
        helper.close(wait=not ended)   # every batch answered: its end waited for on a thread
    return stream.top, accs, dropped, flows


def prime(path: Path, batches: int = kineto_helper.MAX_IN_FLIGHT) -> bool:
    """Begin the parse of `path` with its prestarted helper (kineto_helper.prestart): the first
    `batches` batches of text are read and handed over now, so that the helper decodes them while
    this process goes on with its start (the command line: DuckDB's import and connection, the
    options' checks); the parse (`_ingest_stream`) goes on from there. Only what it cuts and hands
    over is done here: a batch that this process would decode, or anything unexpected (the text
    not a trace it can split, the helper not up), ends the priming and closes the helper (the
    parse then starts afresh, as without). Returns whether it primed."""
    helper = kineto_helper.started(path)
    if helper is None or helper.begun is not None or not helper.up(PRIME_WAIT_S):
        return False
    stream, items, waiting = _stream(path, helper)
    try:
        while helper.pending() < batches:
            item = next(items)
            if not isinstance(item, bytes):   # (the helper not wanting it, or the events' end)
                raise kineto_stream.Fallback
            helper.send(item)
            waiting.append(None)
    except Exception:  # noqa: BLE001 - the parse says what is wrong with the file, in its turn
        items.close()
        kineto_helper.discard()
        return False
    helper.begun = (stream, items, waiting)
    return True


def _stream(path: Path, helper, checked: bool = False) -> tuple:
    """A parse's stream of `path` (its batches of text handed to `helper` where it wants them,
    `checked` first or not), the stream's iterator, and the parts waiting (in file order; None: the
    helper's answer, not yet taken)."""
    stream = kineto_stream.EventStream(path, hand_off=helper.wants if helper is not None else None,
                                       checked=checked)
    waiting: deque = deque()
    return stream, iter(stream), waiting


PRIME_WAIT_S = 0.1   # how long prime waits for the forked helper's first word (a fork: about a millisecond)


class _Failed:
    """A batch's decode error, raised when that batch's turn comes (_ingest_stream's finish)."""
    __slots__ = ("error",)

    def __init__(self, error: Exception):
        self.error = error


def _helper(path: Path):
    early = kineto_helper.take(path)  # forked by the command line before its DuckDB threads
    if early is not None:
        return early
    if not kineto_helper.wanted(path):
        return None
    try:
        return kineto_helper.Helper()
    except OSError:  # no process can be started here: one process reads it all
        return None


def _ingest_whole(path: Path) -> tuple:
    """The same from the whole text held at once (a file the stream cannot split: its problem is
    reported here, with the decoder's message about the whole file)."""
    trace = _decode(path, bounded_read.read_bytes(path))
    events = trace.traceEvents
    if events is None:
        raise TraceError(path, "not a Kineto trace: no 'traceEvents' list")
    trace.traceEvents = None
    accs, dropped, flows = _sinks()
    for first in range(0, len(events), CHUNK_EVENTS):
        evs = _decode_chunk(path, events[first:first + CHUNK_EVENTS], first)
        part = _Part()
        _route_chunk(evs, part)
        add_part(part, accs, dropped, flows)
    return trace, accs, dropped, flows


_TABLE = {1: "gpu_activities", 2: "cpu_ranges", 3: "launches", 4: "syncs"}


def _sinks() -> tuple:
    accs = {c: _Acc(_TABLE[c]) for c in _CHUNK_FN}
    dropped: Counter = Counter()  # events of a routed category without ts or name, per group
    flows: tuple = ([], [], [])  # fwdbwd flow starts, ends, and those with an id or ts of the wrong type
    return accs, dropped, flows


def _read(path: Path) -> Profile:
    try:
        try:
            trace, accs, dropped, flows = _ingest_stream(path)
        except kineto_stream.HandedRefused:   # a batch handed over unchecked was refused: again, checked
            trace, accs, dropped, flows = _ingest_stream(path, checked=True)
    except kineto_stream.Fallback:
        trace, accs, dropped, flows = _ingest_whole(path)
    if not accs[1].n:
        if dropped["gpu"]:
            raise TraceError(path, f"no usable GPU activity: all {dropped['gpu']} kernels, memcpys and memsets "
                                   "lack 'ts' or 'name'")
        if accs[2].n:
            raise TraceError(path, "no GPU activity (kernels, memcpy, memset): a CPU-only trace; "
                                   "record with ProfilerActivity.CUDA to analyze GPU time")
        raise TraceError(path, "no GPU activity and no CPU events: nothing to analyze")
    gpu, cpu, lau, syn = (_finish(accs[c], name) for c, name in
                          ((1, "gpu_activities"), (2, "cpu_ranges"), (3, "launches"), (4, "syncs")))
    # ids in the order: GPU activities, API calls, sync records, CPU ranges
    n_g, n_l, n_s, n_c = (len(d["start_ns"]) for d in (gpu, lau, syn, cpu))
    gpu["id"], lau["id"], syn["id"], cpu["id"] = (_ids(a, n) for a, n in
                                                  ((0, n_g), (n_g, n_l), (n_g + n_l, n_s), (n_g + n_l + n_s, n_c)))
    gpu_ext, lau_ext, cpu_ext = (d.pop("ext") for d in (gpu, lau, cpu))

    # --- links (Arrow lookups; the nesting sweep reads the columns' buffers in place) -----------
    # the fwdbwd flows' ops (a second nesting, over the ops alone) are found meanwhile in a thread:
    # Arrow's kernels let go of the interpreter, so the two sweeps share the machine's cores
    fwd_job = Later(_fwd_links, cpu, flows[0], flows[1], threaded=n_c >= THREAD_MIN_RANGES,
                    name="traceview-fwd-links")
    try:
        # External id -> the first CPU range that carries it (index_in: a key's first position),
        # for the launches and the GPU activities in one lookup
        n_lq = len(lau_ext)
        by_ext = cpu["id"].take(pc.index_in(_nonzero(pa.concat_arrays([lau_ext, gpu_ext])),
                                             value_set=cpu_ext, skip_nulls=True))
        op_of_launch, gpu_by_ext = by_ext[:n_lq], by_ext[n_lq:]
        del by_ext
        # launches whose External id names no op: the innermost range around them, found in the same sweep
        missing = pc.indices_nonzero(pc.is_null(op_of_launch)) if op_of_launch.null_count else None
        queries = [lau[k].take(missing) for k in ("tid", "start_ns", "end_ns")] if missing is not None else [(), (), ()]
        depth, parent, *rest = nest(cpu["tid"], cpu["start_ns"], cpu["end_ns"], cpu["id"], *queries)
        if missing is not None:
            op_of_launch = pc.replace_with_mask(op_of_launch, pc.is_null(op_of_launch), rest[0])
        # correlation -> the first launch that carries it
        li = pc.index_in(gpu["correlation"], value_set=lau["correlation"], skip_nulls=True).cast(pa.int64())
        g_launch = pc.add(li, pa.scalar(n_g, pa.int64()))
        g_op = pc.if_else(pc.is_valid(li), op_of_launch.take(li), gpu_by_ext)
    except BaseException:
        fwd_job.wait()  # this error first, as in one thread: the links above come before the flows'
        raise
    fwd = fwd_job.result()

    meta_info = _meta(path, trace, most_common(gpu["device"]))
    rank = meta_info["rank"]
    cpu.update(rank=pa.repeat(rank, n_c), depth=depth, parent_id=parent, fwd_id=fwd)
    lau.update(rank=pa.repeat(rank, n_l), op_id=op_of_launch)
    gpu.update(rank=pa.repeat(rank, n_g), launch_id=g_launch, op_id=g_op)
    syn.update(rank=pa.repeat(rank, n_s))
    return Profile(
        warnings=_warnings(path, dropped, accs[1].no_args, len(flows[2])),
        gpu_activities=schema.from_pydict("gpu_activities", gpu),
        cpu_ranges=schema.from_pydict("cpu_ranges", cpu),
        launches=schema.from_pydict("launches", lau),
        syncs=schema.from_pydict("syncs", syn),
        meta=schema.from_pydict("meta", {k: [v] for k, v in meta_info.items()}),
    )


def _ids(first: int, n: int) -> pa.Array:
    if not n:
        return pa.array([], type=pa.int64())
    return pc.add(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), first - 1)


def _nonzero(col: pa.Array) -> pa.Array:
    """External ids with 0 (no id) made null."""
    return pc.if_else(pc.not_equal(col, pa.scalar(0, col.type)), col, pa.scalar(None, type=col.type))


THREAD_MIN_RANGES = 1 << 16  # CPU ranges from which the flows' nesting runs in a thread (~0.1 s and more)


def _finish(acc: _Acc, table: str) -> dict:
    """A group's concatenated columns; an empty group gets empty columns of the table's types."""
    if acc.n:
        return acc.columns()
    sch = schema.TABLES[table]
    return {f.name: pa.array([], type=f.type) for f in sch} | {"ext": pa.array([], type=pa.int64())}


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


_COLL = (("coll_name", "coll_name"), ("coll_in_nelems", "in_nelems"), ("coll_out_nelems", "out_nelems"),
         ("coll_dtype", "dtype"), ("coll_group_size", "group_size"), ("coll_pg", "pg_name"),
         ("coll_in_split", "in_split"), ("coll_out_split", "out_split"))
_COLL_TYPE = {"coll_name": pa.string(), "coll_in_nelems": pa.int64(), "coll_out_nelems": pa.int64(),
              "coll_dtype": pa.string(), "coll_group_size": pa.int64(), "coll_pg": pa.string(),
              "coll_in_split": pa.string(), "coll_out_split": pa.string()}


def _colls(d: dict, a: _ArgCols) -> None:
    """Collective metadata columns of a chunk (null where an event has no collective name)."""
    names = a["coll_name"]
    n = len(names)
    if names.count(None) == n:
        for k, _ in _COLL:
            d[k] = pa.nulls(n, _COLL_TYPE[k])
        return
    cols: dict[str, list[Any]] = {k: [None] * n for k, _ in _COLL}
    for i in compress(range(n), map(is_not, names, repeat(None))):
        r = a.rows[i]
        cols["coll_name"][i] = str(r.coll_name)
        cols["coll_in_nelems"][i] = _int(r.in_nelems)
        cols["coll_out_nelems"][i] = _int(r.out_nelems)
        cols["coll_dtype"][i] = None if r.dtype is None else str(r.dtype)
        cols["coll_group_size"][i] = _int(r.group_size)
        cols["coll_pg"][i] = None if r.pg_name is None else str(r.pg_name)
        cols["coll_in_split"][i] = _split(r.in_split)
        cols["coll_out_split"][i] = _split(r.out_split)
    for k, v in cols.items():
        d[k] = pa.array(v, type=_COLL_TYPE[k])


def _tid(t):
    v = _int(t)
    if v is None and t is not None:
        return abs(hash(str(t))) % (1 << 31)
    return v if v is not None else 0


def _flow_pairs(flows_s: list, flows_f: list) -> tuple[Sequence, Sequence]:
    """The flows' (start, end) pairs, as two lists in the ends' order: each end whose id some start
    has, with the last start of that id."""
    s_ids, f_ids = [f[0] for f in flows_s], [f[0] for f in flows_f]
    if _only(s_ids, {int}) and _only(f_ids, {int}):
        try:  # at C speed: an end's start is the first of its id among the starts taken backwards
            starts, ends = pa.array(s_ids, type=pa.int64()), pa.array(f_ids, type=pa.int64())
        except OverflowError:
            pass
        else:
            hit = pc.index_in(ends, value_set=starts[::-1])
            if not (len(hit) - hit.null_count):
                return (), ()
            s_at = pc.subtract(pa.scalar(len(starts) - 1, pa.int64()), hit.drop_null().cast(pa.int64()))
            return _take(flows_s, s_at.to_pylist()), _take(flows_f, pc.indices_nonzero(pc.is_valid(hit)).to_pylist())
    # ids of other types (strings, floats; 1 and 1.0 are one id): a dict, as ever
    s_by_id = {f[0]: f for f in flows_s}
    pairs = [(s_by_id[f[0]], f) for f in flows_f if f[0] in s_by_id]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _fwd_links(cpu: dict, flows_s: list, flows_f: list) -> pa.Array:
    """fwd_id for backward ops from `fwdbwd` flows ((id, tid, ts) each): the flow starts at the
    forward op and ends inside the backward op (binding point 'e': the enclosing slice). Where
    several flows end in one backward op, the last one's forward op."""
    n_c = len(cpu["id"])
    fwd_pts, bwd_pts = _flow_pairs(flows_s, flows_f)
    n = len(fwd_pts)
    if not n:
        return pa.nulls(n_c, pa.int64())
    pts = [*fwd_pts, *bwd_pts]
    tids = [f[1] for f in pts]
    tids = tids if _only(tids, {int}) else [_tid(t) for t in tids]
    ts = _ns_array([f[2] for f in pts])
    ops = pc.indices_nonzero(pc.equal(cpu["kind"], pa.scalar("op"))).cast(pa.int64())
    first = cpu["id"][0].as_py() if n_c else 0
    o_tid, o_start, o_end = (cpu[k].take(ops) for k in ("tid", "start_ns", "end_ns"))
    found = innermost_container(o_tid, o_start, o_end, ops, pa.array(tids, type=pa.int64()), ts, ts)
    f_op, b_op = found[:n], found[n:]  # positions of the ops among the CPU ranges
    linked = pc.fill_null(pc.not_equal(f_op, b_op), False)
    # each backward op's last flow: the first among the links taken backwards
    f_op, b_op = f_op.filter(linked)[::-1], b_op.filter(linked)[::-1]
    at = pc.index_in(_ids(0, n_c), value_set=b_op)
    return pc.add(f_op.take(at), pa.scalar(first, pa.int64()))


def most_common(values: pa.Array):
    """The most frequent non-null value (of those as frequent, the first to appear; None when
    there is none): `Counter(...).most_common(1)` at C speed."""
    counts = pc.value_counts(values.drop_null())  # in order of first appearance
    if not len(counts):
        return None
    n = counts.field("counts")
    return counts.field("values")[pc.index(n, pc.max(n)).as_py()].as_py()


def _meta(path: Path, trace: Trace, device) -> dict:
    di = trace.distributedInfo or {}
    rank = _int(di.get("rank"))
    ws = _int(di.get("world_size"))
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
