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
"""
from __future__ import annotations

import html as _html
import json
import re

_WS = re.compile(r"\s+")
# backslash-escaped in Markdown: \ ` * [ ] | ~ and ( ) ! # + - only where they matter is hard to
# know inside a cell, so the set below is always escaped; _ is escaped unless inside a word.
_MD_ALWAYS = set("\\`*[]|~")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def one_line(s) -> str:
    """All white space (newlines, tabs, runs) as single spaces, trimmed."""
    return _WS.sub(" ", str(s)).strip()


def clip(s, n: int) -> str:
    s = one_line(s)
    return s if len(s) <= n else s[: max(1, n - 1)] + "…"


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
