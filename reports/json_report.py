"""JSON report: deterministic bytes for the same input (sorted keys, fixed float formatting).
DEL, C1 controls and U+2028/9 in names are written as \\u escapes (the parsed value is the same).

The bytes are those of the standard library's `json.dumps(doc, indent=2, sort_keys=True,
ensure_ascii=False, allow_nan=False)` (the diff: `indent=1, default=str`), written by msgspec's C
encoder and formatter (tens of times faster than the pure-Python encoder `indent` selects). msgspec
writes the same bytes for the documents a report holds (str keys, str/int/float/bool/None, lists,
tuples, dicts) except for floats outside [1e-4, 1e16) (`0.00001` and `1e16` where Python writes
`1e-05` and `1e+16`): those are given to it as Python writes them. A document holding anything else
(a key that is not a str, a subclass, a type of its own, NaN or infinity) is written by `json.dumps`
itself, so its bytes, or its error, are the standard library's.
"""
from __future__ import annotations

import json
import re

from traceview.document.types import DiffDocument, ReportDocument
from traceview.plain_data import CONTAINERS, HIGH, LOW, Shape, scan

from .escape import json_controls

_RAW_CONTROLS = (b"\x7f", b"\xc2", b"\xe2\x80\xa8", b"\xe2\x80\xa9")
_RAW_CONTROL_UTF8 = re.compile(b"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]")
_NON_ASCII = re.compile("[^\x00-\x7f]")


def render(doc: ReportDocument) -> str:
    fast = _fast(doc, 2)
    if fast is None:
        return _stdlib(doc)
    return fast.decode("utf-8")


def render_bytes(doc: ReportDocument, shape: Shape | None = None) -> bytes:
    """`render(doc)` as UTF-8 bytes (no str copy of a large report); `shape`: scan(doc) when the
    caller has it."""
    fast = _fast(doc, 2, shape)
    return _stdlib(doc).encode("utf-8") if fast is None else fast


def render_diff(doc: DiffDocument) -> str:
    fast = _fast(doc, 1)
    if fast is None:
        return _stdlib_diff(doc)
    text = fast.decode("utf-8")
    if not text.isascii():       # json.dumps's default ensure_ascii: every non-ASCII character escaped
        text = _NON_ASCII.sub(_ascii_escape, text)
    return text


def _stdlib(doc) -> str:
    return json_controls(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)) + "\n"


def _stdlib_diff(doc) -> str:
    return json_controls(json.dumps(doc, indent=1, sort_keys=True, default=str)) + "\n"


def _ascii_escape(m: re.Match) -> str:
    n = ord(m.group(0))
    if n < 0x10000:
        return f"\\u{n:04x}"
    n -= 0x10000
    return f"\\u{0xd800 | (n >> 10):04x}\\u{0xdc00 | (n & 0x3ff):04x}"


def _fast(doc, indent: int, shape: Shape | None = None) -> bytes | None:
    """The document as json.dumps would write it (with the controls escaped and a final newline),
    or None when only json.dumps itself can say."""
    import msgspec
    shape = scan(doc) if shape is None else shape
    if not shape.plain or not shape.finite:
        return None
    try:
        prepared = _with_raw_floats(doc) if shape.exponent_floats else doc
        out = msgspec.json.format(msgspec.json.encode(prepared, order="sorted"), indent=indent)
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
        return None
    if (b"\x7f" in out if out.isascii() else any(c in out for c in _RAW_CONTROLS)) \
            and _RAW_CONTROL_UTF8.search(out):
        out = _RAW_CONTROL_UTF8.sub(lambda m: b"\\u%04x" % ord(m.group(0).decode("utf-8")), out)
    return out + b"\n"


def _with_raw_floats(obj):
    """A copy of the containers holding floats outside [1e-4, 1e16) (and of their parents), those
    floats as msgspec.Raw of Python's repr; every other container shared with `obj`."""
    import msgspec
    t = type(obj)
    if t is float:
        return msgspec.Raw(repr(obj).encode()) if obj and not LOW <= abs(obj) < HIGH else obj
    if t is dict:
        out = None
        for k, v in obj.items():
            if type(v) in CONTAINERS or type(v) is float:
                w = _with_raw_floats(v)
                if w is not v:
                    if out is None:
                        out = dict(obj)
                    out[k] = w
        return obj if out is None else out
    if t is list or t is tuple:
        items = None
        for i, v in enumerate(obj):
            if type(v) in CONTAINERS or type(v) is float:
                w = _with_raw_floats(v)
                if w is not v:
                    if items is None:
                        items = list(obj)
                    items[i] = w
        return obj if items is None else items
    return obj
