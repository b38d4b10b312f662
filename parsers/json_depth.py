"""How deeply a JSON text nests its arrays and objects, without parsing it (and without recursion).

Real Kineto traces nest at most 7 levels (the top object, `traceEvents`, an event, its `args`,
`Input Dims` lists of lists); `MAX_DEPTH` leaves ample room. A deeper file is refused before
decoding: the decoder recurses once per level (a RecursionError at about a thousand), and it
parses even the values of keys it skips.

The count works on bytes with C-speed operations: strings are taken out (escaped quotes first),
only brackets are kept, and innermost `[]`/`{}` pairs are removed one level per round; the
number of rounds is the depth. Memory beyond the text: a few percent of it (its brackets and
quotes), built chunk by chunk.
"""
from __future__ import annotations

import re

MAX_DEPTH = 64
_CHUNK = 1 << 22
_WHOLE = 1 << 28  # texts up to this size without backslashes are scanned whole (output: a few %)
_BRACKETS_AND_QUOTES = b'[]{}"'
_DROP = bytes(b for b in range(256) if b not in _BRACKETS_AND_QUOTES)
_STRING = re.compile(rb'"[^"]*"')


def _skeleton(data) -> bytes:
    """The text's brackets and quotes in order; escaped quotes dropped, and adjacent quote pairs
    (strings without brackets) too, which keeps the parity of the quotes before every bracket."""
    if isinstance(data, (bytes, bytearray)) and len(data) <= _WHOLE and b"\\" not in data:  # one pass, no copy
        return bytes(data.translate(None, _DROP).replace(b'""', b""))
    view = memoryview(data)
    parts, i, n = [], 0, len(data)
    while i < n:
        j = min(n, i + _CHUNK)
        while j < n and view[j - 1] == 0x5C:  # never part a backslash from what it escapes
            j += 1
        chunk = bytes(view[i:j])
        if b"\\" in chunk:
            chunk = chunk.replace(b"\\\\", b"").replace(b'\\"', b"")
        parts.append(chunk.translate(None, _DROP).replace(b'""', b""))
        i = j
    return b"".join(parts)


def _peel(brackets: bytes) -> bytes:
    """Remove the innermost level: the pairs that are empty now (a marker keeps a pair emptied
    in this round from matching in the same round)."""
    return brackets.replace(b"[]", b"\x00").replace(b"{}", b"\x00").replace(b"\x00", b"")


def depth_exceeds(data, limit: int = MAX_DEPTH) -> bool:
    """True when the text nests more than `limit` levels. A text whose brackets do not pair up
    (not valid JSON) counts only as deep as the levels found; the decoder reports the rest."""
    brackets = _STRING.sub(b"", _skeleton(data))
    for _ in range(limit):
        if not brackets:
            return False
        fewer = _peel(brackets)
        if len(fewer) == len(brackets):  # unbalanced: no pair left to remove
            return False
        brackets = fewer
    return len(_peel(brackets)) < len(brackets)


def depth(data, cap: int = 1 << 20) -> int:
    """The nesting depth (rounds of pair removal), at most `cap` (tests and diagnostics)."""
    brackets = _STRING.sub(b"", _skeleton(data))
    d = 0
    while brackets and d < cap:
        fewer = _peel(brackets)
        if len(fewer) == len(brackets):
            break
        brackets, d = fewer, d + 1
    return d
