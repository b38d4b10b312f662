"""A strict reader of the Chrome trace-event JSON format, written from the format's specification
(the "Trace Event Format" document: JSON Array / Object formats, the common fields, the phases
and their required fields, metadata events) plus the one rule Perfetto's JSON importer adds
(slices of one thread must nest). Independent of traceview's writer: it knows nothing of it.

`read(path)` parses a file (.json or .json.gz) exactly (numbers as Decimal, NaN/Infinity and raw
control characters rejected, strings checked as UTF-8) and `check(obj)` returns a list of
problems (empty when the trace is well-formed). `slices(obj)` gives the complete/duration slices
per (pid, tid) with exact times in nanoseconds, and `thread_names(obj)` the names of the tracks.
"""
from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

PHASES = set("BEXiICbnestfPONDMVvRc()")
METADATA = {"process_name": ("name", str), "process_labels": ("labels", str),
            "process_sort_index": ("sort_index", int), "thread_name": ("name", str),
            "thread_sort_index": ("sort_index", int)}
TOP_KEYS = {"traceEvents", "displayTimeUnit", "systemTraceEvents", "otherData", "stackFrames", "samples",
            "controllerTraceDataKey", "powerTraceAsString", "metadata"}


def _no_constants(name):
    raise ValueError(f"non-standard JSON constant {name}")


def read(path) -> object:
    raw = Path(path).read_bytes()
    if str(path).endswith(".gz"):
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8")           # strict: invalid UTF-8 raises
    return json.loads(text, parse_float=Decimal, parse_int=int, parse_constant=_no_constants)  # strict=True


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return (_is_int(v) or isinstance(v, (float, Decimal))) and not isinstance(v, bool) and \
        (not isinstance(v, Decimal) or v.is_finite())


def _strings_ok(obj, where: str, out: list) -> None:
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            out.append(f"{where}: string is not valid Unicode (lone surrogate)")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _strings_ok(k, where, out)
            _strings_ok(v, where, out)
    elif isinstance(obj, list):
        for v in obj:
            _strings_ok(v, where, out)


def events_of(obj) -> list:
    return obj if isinstance(obj, list) else obj.get("traceEvents", [])


def _check_event(i: int, e, out: list) -> None:
    where = f"event {i}"
    if not isinstance(e, dict):
        out.append(f"{where}: not an object")
        return
    ph = e.get("ph")
    if not isinstance(ph, str) or len(ph) != 1 or ph not in PHASES:
        out.append(f"{where}: ph {ph!r} is not a trace-event phase")
        return
    if ph != "E" and not isinstance(e.get("name"), str):
        out.append(f"{where}: name missing or not a string")
    if "cat" in e and not isinstance(e["cat"], str):
        out.append(f"{where}: cat is not a string")
    for k in ("pid", "tid"):
        if k not in e:
            if not (ph == "M" and k == "tid" and str(e.get("name", "")).startswith("process_")):
                out.append(f"{where}: {k} missing")
        elif not _is_int(e[k]):
            out.append(f"{where}: {k} is not an integer")
    if ph != "M":
        if "ts" not in e or not _is_num(e["ts"]):
            out.append(f"{where}: ts missing or not a number")
    elif "ts" in e and not _is_num(e["ts"]):
        out.append(f"{where}: ts is not a number")
    if "args" in e and not isinstance(e["args"], dict):
        out.append(f"{where}: args is not an object")
    if ph == "X":
        if "dur" not in e or not _is_num(e["dur"]):
            out.append(f"{where}: complete event without a numeric dur")
        elif e["dur"] < 0:
            out.append(f"{where}: complete event with negative dur")
        if "tdur" in e and (not _is_num(e["tdur"]) or e["tdur"] < 0):
            out.append(f"{where}: tdur is not a non-negative number")
    elif ph == "M":
        spec = METADATA.get(e.get("name"))
        if spec is None:
            out.append(f"{where}: unknown metadata event {e.get('name')!r}")
        else:
            key, typ = spec
            v = (e.get("args") or {}).get(key)
            if not (isinstance(v, str) if typ is str else _is_int(v)):
                out.append(f"{where}: {e['name']} needs args.{key} of type {typ.__name__}")
    elif ph in "iI":
        if "s" in e and e["s"] not in ("g", "p", "t"):
            out.append(f"{where}: instant scope {e['s']!r} is not g, p or t")
    elif ph == "C":
        if not isinstance(e.get("args"), dict) or not all(_is_num(v) for v in e["args"].values()):
            out.append(f"{where}: counter args must be numbers")
    elif ph in "bne":
        if "id" not in e and "id2" not in e:
            out.append(f"{where}: async event without id")
        if "cat" not in e:
            out.append(f"{where}: async event without cat")
    elif ph in "stf":
        if "id" not in e:
            out.append(f"{where}: flow event without id")


def ns(v) -> Decimal:
    """A ts/dur in microseconds as exact nanoseconds."""
    return Decimal(v) * 1000


def slices(obj) -> dict:
    """{(pid, tid): [(start_ns, end_ns, name, event), ...]} for X events and matched B/E pairs, exact."""
    out: dict = {}
    stacks: dict = {}
    for e in events_of(obj):
        if not isinstance(e, dict):
            continue
        key = (e.get("pid"), e.get("tid"))
        if e.get("ph") == "X":
            s = ns(e["ts"])
            out.setdefault(key, []).append((s, s + ns(e["dur"]), e.get("name"), e))
        elif e.get("ph") == "B":
            stacks.setdefault(key, []).append(e)
        elif e.get("ph") == "E" and stacks.get(key):
            b = stacks[key].pop()
            out.setdefault(key, []).append((ns(b["ts"]), ns(e["ts"]), b.get("name"), b))
    return out


def _check_begin_end(obj, out: list) -> None:
    stacks: dict = {}
    last: dict = {}
    for i, e in enumerate(events_of(obj)):
        if not isinstance(e, dict) or e.get("ph") not in ("B", "E"):
            continue
        key = (e.get("pid"), e.get("tid"))
        if key in last and e["ts"] < last[key]:
            out.append(f"event {i}: B/E events of thread {key} out of time order")
        last[key] = e["ts"]
        if e["ph"] == "B":
            stacks.setdefault(key, []).append(e)
        elif not stacks.get(key):
            out.append(f"event {i}: E without a matching B on thread {key}")
        else:
            b = stacks[key].pop()
            if "name" in e and e["name"] != b.get("name"):
                out.append(f"event {i}: E named {e['name']!r} closes B named {b.get('name')!r}")
    for key, st in stacks.items():
        if st:
            out.append(f"thread {key}: {len(st)} B event(s) never ended")


def _check_nesting(obj, out: list) -> None:
    for key, sl in slices(obj).items():
        stack: list = []
        for s, e, name, _ in sorted(sl, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1][1] <= s:
                stack.pop()
            if stack and e > stack[-1][1]:
                out.append(f"thread {key}: slice {name!r} [{s}, {e}) ns overlaps {stack[-1][2]!r} "
                           f"[{stack[-1][0]}, {stack[-1][1]}) without nesting")
                if len(out) > 50:
                    return
                continue
            stack.append((s, e, name))


def _check_names(obj, out: list) -> None:
    seen: dict = {}
    for i, e in enumerate(events_of(obj)):
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            key = (e["name"], e.get("pid"), e.get("tid") if e["name"] == "thread_name" else None)
            v = (e.get("args") or {}).get("name")
            if key in seen and seen[key] != v:
                out.append(f"event {i}: {key} renamed from {seen[key]!r} to {v!r}")
            seen[key] = v


def check(obj) -> list[str]:
    out: list[str] = []
    if isinstance(obj, dict):
        if not isinstance(obj.get("traceEvents"), list):
            out.append("JSON Object Format without a traceEvents array")
            return out
        for k in obj:
            if k not in TOP_KEYS:
                out.append(f"unknown top-level key {k!r}")
        if "displayTimeUnit" in obj and obj["displayTimeUnit"] not in ("ms", "ns"):
            out.append(f"displayTimeUnit {obj['displayTimeUnit']!r} is not ms or ns")
        if "otherData" in obj and not isinstance(obj["otherData"], dict):
            out.append("otherData is not an object")
    elif not isinstance(obj, list):
        return ["neither the JSON Array Format nor the JSON Object Format"]
    _strings_ok(obj, "trace", out)
    for i, e in enumerate(events_of(obj)):
        _check_event(i, e, out)
    if out:
        return out
    _check_begin_end(obj, out)
    _check_nesting(obj, out)
    _check_names(obj, out)
    return out


def thread_names(obj) -> dict:
    """{(pid, tid): name} from thread_name metadata; {(pid, None): name} from process_name."""
    out = {}
    for e in events_of(obj):
        if isinstance(e, dict) and e.get("ph") == "M":
            if e.get("name") == "thread_name":
                out[(e["pid"], e["tid"])] = e["args"]["name"]
            elif e.get("name") == "process_name":
                out[(e["pid"], None)] = e["args"]["name"]
    return out
