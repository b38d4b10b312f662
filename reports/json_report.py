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
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from traceview.document.packed import PackedRows, plain
from traceview.plain_data import CONTAINERS, HIGH, LOW, Shape, scan

from .escape import json_controls

if TYPE_CHECKING:   # (annotations only)
    from traceview.document.types import DiffDocument, ReportDocument

_RAW_CONTROLS = (b"\x7f", b"\xc2", b"\xe2\x80\xa8", b"\xe2\x80\xa9")
_RAW_CONTROL_UTF8 = re.compile(b"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]")
_NON_ASCII = re.compile("[^\x00-\x7f]")


def render(doc: ReportDocument) -> str:
    try:
        return render_bytes(doc).decode("utf-8")
    except UnicodeEncodeError:      # a lone surrogate (a file name that is not UTF-8): json.dumps's str
        return _stdlib(plain(doc))


def render_bytes(doc: ReportDocument, shape: Shape | None = None) -> bytes:
    """`render(doc)` as UTF-8 bytes (no str copy of a large report); `shape`: scan(doc) when the
    caller has it."""
    return b"".join(pieces(doc, shape))


STREAM_ROWS = 1024          # a long list's elements written together


def pieces(doc: ReportDocument, shape: Shape | None = None, formatted: dict | None = None) -> Iterator[bytes]:
    """The bytes of `render_bytes(doc)` in pieces, written as they come: the document's top-level
    values one after the other and a long list of them (a list or PackedRows of more than
    STREAM_ROWS elements) STREAM_ROWS elements at a time, so no whole copy of a large report is
    ever in memory. Each piece is msgspec's formatted JSON of one value, indented to its depth
    (a JSON string holds no raw line break: every line break of a formatted value is one of
    its layout). `formatted`: key -> a function giving the pieces of list_body of that key's long
    list, written already (list_body_file), used where the document is written with msgspec."""
    shape = scan(doc) if shape is None else shape
    if not shape.plain or not shape.finite or shape.wide_ints or not shape.str_keys or type(doc) is not dict:
        yield _stdlib(plain(doc)).encode("utf-8")
        return
    keys = sorted(doc)
    if not keys:
        yield b"{}\n"
        return
    raw = shape.exponent_floats
    import msgspec
    try:        # the values not streamed first: one msgspec cannot write goes to json.dumps whole
        small = {k: _formatted(plain(v), raw).replace(b"\n", b"\n  ") for k, v in doc.items()
                 if not _streamed(v)}
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
        yield _stdlib(plain(doc)).encode("utf-8")
        return
    yield b"{\n"
    for i, k in enumerate(keys):
        v = cast(dict, doc)[k]
        yield b"  " + _fix_controls(_json().encode(k)) + b": "
        if k in small:
            yield small.pop(k)
        else:
            yield b"[\n"
            ready = (formatted or {}).get(k)
            if ready is not None:           # written by another process from the same rows (list_body)
                yield from ready()
            else:
                yield from list_body(v, raw)
            yield b"\n  ]"
        yield b",\n" if i < len(keys) - 1 else b"\n}\n"


def list_body(v, raw: bool, lo: int = 0, hi: int | None = None) -> Iterator[bytes]:
    """The elements of a long list (or PackedRows) as `pieces` writes them inside its brackets:
    STREAM_ROWS elements formatted at a time, at depth 2, separated by ",\n". `raw`: floats
    outside [1e-4, 1e16) are given as Python writes them (the document has some; a list that holds
    none is written the same either way). A PackedRows' chunks lo to hi only, where given: the
    bodies of consecutive ranges joined by ",\n" are the body of the whole."""
    batches = v.chunks(lo, hi) if type(v) is PackedRows else \
        (v[j:j + STREAM_ROWS] for j in range(0, len(v), STREAM_ROWS))
    first = True
    for batch in batches:
        if not first:
            yield b",\n"
        first = False
        text = _formatted(batch, raw)      # "[\n  e1,\n  e2\n]": the elements at depth 2
        yield b"  " + text[2:-2].replace(b"\n", b"\n  ")


def list_body_file(source, path: str, lo: int = 0, hi: int | None = None) -> int:
    """list_body of the PackedRows `source` describes (PackedRows.source; run by a mapped job's
    worker while the parent keeps the document), its chunks lo to hi where given, written to the
    file `path`; its size. Only what `pieces` would write itself: the caller uses it where the
    document's shape lets `pieces` write its values with msgspec (raw floats where the rows hold
    some: the same bytes)."""
    tmp = f"{path}.tmp"
    size = 0
    with open(tmp, "wb") as fh:
        for piece in list_body_of(source, lo, hi):
            size += fh.write(piece)
    import os
    os.replace(tmp, path)
    return size


def list_body_of(source, lo: int = 0, hi: int | None = None) -> Iterator[bytes]:
    """The pieces list_body_file writes (in this process: a range whose task failed)."""
    from traceview.document.packed import from_source
    rows = from_source(source)
    yield from list_body(rows, rows.shape.exponent_floats, lo, hi)


def _streamed(v) -> bool:
    return type(v) is PackedRows or (type(v) is list and len(v) > STREAM_ROWS)


def _json():
    import msgspec
    return msgspec.json


def _formatted(value, raw: bool) -> bytes:
    js = _json()
    return _fix_controls(js.format(js.encode(_with_raw_floats(value) if raw else value, order="sorted"), indent=2))


def _fix_controls(out: bytes) -> bytes:
    if (b"\x7f" in out if out.isascii() else any(c in out for c in _RAW_CONTROLS)) \
            and _RAW_CONTROL_UTF8.search(out):
        out = _RAW_CONTROL_UTF8.sub(lambda m: b"\\u%04x" % ord(m.group(0).decode("utf-8")), out)
    return out


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
    return json_controls(json.dumps(doc, indent=1, sort_keys=True, default=_packed_list_or_str)) + "\n"


def _packed_list(obj):
    if type(obj) is PackedRows:
        return list(obj)
    raise TypeError(f"not JSON: {type(obj).__name__}")


def _packed_list_or_str(obj):
    return list(obj) if type(obj) is PackedRows else str(obj)


def _ascii_escape(m: re.Match) -> str:
    n = ord(m.group(0))
    if n < 0x10000:
        return f"\\u{n:04x}"
    n -= 0x10000
    return f"\\u{0xd800 | (n >> 10):04x}\\u{0xdc00 | (n & 0x3ff):04x}"


def _fast(doc, indent: int, shape: Shape | None = None) -> bytes | None:
    """The document as json.dumps would write it (with the controls escaped and a final newline),
    or None when only json.dumps itself can say (the diff's writer)."""
    import msgspec
    shape = scan(doc) if shape is None else shape
    if not shape.plain or not shape.finite:
        return None
    try:
        prepared = _with_raw_floats(doc) if shape.exponent_floats else doc
        out = msgspec.json.format(msgspec.json.encode(prepared, order="sorted", enc_hook=_packed_list),
                                  indent=indent)
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
    if t is PackedRows:
        obj, t = list(obj), list
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
