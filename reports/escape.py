"""Escaping for names that come from a trace (kernel, NVTX range, annotation, file name).

Every such string is hostile until escaped for the format it is written into:

- `md(s)`: inline Markdown text and GitHub table cells. Newlines and runs of white space become one
  space (a newline would end a table row), `|` is backslash-escaped (a cell boundary otherwise),
  Markdown punctuation that could start emphasis, links, code or headings is backslash-escaped, and
  `& < >` become entities, so no raw HTML tag (`<img ...>`) reaches GitHub's renderer. The result
  still reads as plain text (`_` inside words is left alone).
- `html(s)`: HTML text and attribute values (`& < > " '` as entities).
- `script_json(obj)`: JSON to put inside a `<script>` element: `<`, `>`, `&`, U+2028/U+2029
  as \\u escapes, so `</script>` or `<!--` in a name cannot end the script.
- `clip(s, n)`: one line of at most n characters (before escaping).
- `controls(s)` / `neutralize(doc)`: control characters shown as escapes (`\\x1b`) for terminal text,
  Markdown and HTML; `strip_controls` removes them for the SVG/PNG charts; `one_line_controls` for
  the one-line error (line breaks escaped too); `json_controls` for DEL and C1 in JSON.
"""
from __future__ import annotations

import html as _html
import json
import re

from .fmt import clip, one_line  # noqa: F401 - part of this module's interface

# backslash-escaped in Markdown: \ ` * [ ] | ~ and ( ) ! # + - only where they matter is hard to
# know inside a cell, so the set below is always escaped; _ is escaped unless inside a word.
_MD_ALWAYS = set("\\`*[]|~")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md(s, limit: int | None = None) -> str:
    """Escape a trace-derived string for inline Markdown or a GFM table cell (one line)."""
    s = clip(s, limit) if limit else one_line(s)
    out = []
    for i, ch in enumerate(s):
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in _MD_ALWAYS:
            out.append("\\" + ch)
        elif ch == "_":
            before = s[i - 1] if i > 0 else " "
            after = s[i + 1] if i + 1 < len(s) else " "
            out.append("_" if before.isalnum() and after.isalnum() else "\\_")
        elif ch in "#+-!>" and i == 0:
            out.append("\\" + ch)      # would start a heading, list, image or quote
        else:
            out.append(ch)
    return "".join(out)


def md_code(s, limit: int | None = None) -> str:
    """Alias kept for callers that want a name set off; same escaping as `md` (no raw HTML)."""
    return md(s, limit)


def html(s, limit: int | None = None) -> str:
    """Escape for HTML text or a quoted attribute value."""
    s = clip(s, limit) if limit else str(s)
    return _html.escape(s, quote=True)


def html_block(s) -> str:
    """Escape multi-line text for HTML, keeping line breaks as <br>."""
    return "<br>".join(_html.escape(line, quote=True) for line in str(s).splitlines())


def script_json(obj, **kw) -> str:
    """JSON safe to embed in an inline <script> (no `</script>`, `<!--`, or line separators)."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), **kw)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


# ---------------------------------------------------------------------------------------------
# Control characters: C0 (below 0x20) except tab and newline, DEL and the C1 range (0x80-0x9f).
# A terminal acts on them (ESC starts a sequence, CR rewinds the line, C1 CSI is ESC[ on some
# terminals), XML/SVG cannot hold most of them and the PNG renderer rejects them.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_OR_BREAK = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_JSON_RAW_CONTROL = re.compile("[\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _show(m: re.Match) -> str:
    ch = m.group(0)
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def controls(s) -> str:
    """Control characters shown as escapes (`ESC` as `\\x1b`); tab and newline kept."""
    s = str(s)
    return _CONTROL.sub(_show, s) if _CONTROL.search(s) else s


def one_line_controls(s) -> str:
    """For an error line: every control character and line break shown as an escape (`\\n`)."""
    s = str(s)
    return _CONTROL_OR_BREAK.sub(_show, s) if _CONTROL_OR_BREAK.search(s) else s


def strip_controls(s) -> str:
    """Control characters removed (for the SVG/PNG charts, which cannot hold them)."""
    s = str(s)
    return _CONTROL.sub("", s) if _CONTROL.search(s) else s


def json_controls(text: str) -> str:
    """Rendered JSON with DEL, C1 controls and U+2028/9 as \\u escapes (json.dumps leaves them raw;
    they only occur inside strings, so the parsed value is unchanged)."""
    return _JSON_RAW_CONTROL.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


# A control character as the JSON encoder writes it (ensure_ascii=False): C0 as an escape (\b, \f,
# \r or \u00XX, after an odd run of backslashes; tab and newline are kept by `controls`), DEL and C1 raw.
_RAW_CONTROLS = tuple(chr(c) for c in range(0x7f, 0xa0))
_JSON_HAS_CONTROL = re.compile(r"(?<!\\)(?:\\\\)*\\(?:[bfr]|u00(?:0[0-8bcdef]|1[0-9a-f]))|[\x7f-\x9f]")


def _has_controls(obj) -> bool:
    """Whether any string of a document (keys included) may hold a control character: one pass of
    the C JSON encoder over the document instead of a Python call per string (a 1,024-rank document
    holds millions). True when the document cannot be encoded, so the walk decides."""
    try:
        text = json.dumps(obj, ensure_ascii=False, check_circular=False, default=_packed_list)
    except (TypeError, ValueError):
        return True
    if "\x7f" in text or (not text.isascii() and any(c in text for c in _RAW_CONTROLS)):
        return True                 # DEL or C1 (isascii is known without a scan)
    if not any(e in text for e in ("\\b", "\\f", "\\r", "\\u00")):   # substring scans, fast
        return False
    return _JSON_HAS_CONTROL.search(text) is not None


def _packed_list(obj):
    from traceview.document.packed import PackedRows
    if type(obj) is PackedRows:
        return list(obj)
    raise TypeError(f"not JSON: {type(obj).__name__}")


def neutralize(obj, fn=controls):
    """A copy of a report document with `fn` applied to every string (keys included); the same
    object back when nothing needs changing, so valid traces render exactly as before."""
    if fn in (controls, strip_controls) and not isinstance(obj, str) and not _has_controls(obj):
        return obj          # both only change control characters: none anywhere, nothing to copy
    return _neutralize(obj, fn)


def _neutralize(obj, fn):
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        out = {}
        changed = False
        for k, v in obj.items():
            k2 = fn(k) if isinstance(k, str) else k
            v2 = _neutralize(v, fn)
            changed = changed or k2 is not k or v2 is not v
            out[k2] = v2
        return out if changed else obj
    from traceview.document.packed import PackedRows
    if type(obj) is PackedRows:
        return obj.map(lambda row: _neutralize(row, fn))
    if isinstance(obj, (list, tuple)):
        items = [_neutralize(v, fn) for v in obj]
        if all(a is b for a, b in zip(items, obj, strict=False)):
            return obj
        return type(obj)(items) if isinstance(obj, list) else tuple(items)
    return obj
