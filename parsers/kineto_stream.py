"""Kineto JSON split into batches of events as it is read (inflated), never held whole.

The text arrives in pieces (`bounded_read.pieces`). The top-level object up to the
`"traceEvents": [` key is decoded alone (`Trace`, its events left out); then the array's events are
cut into batches of about `TEXT_BYTES` at a separator `},{` and each batch is decoded by itself
(`[batch]` as `kineto_events.STREAM_EVENTS`, args included; a batch with an event of a phase that
union does not decode as a list of `TypedEvent`, every field of every event); what follows the last
separator (the last events, the `]` and the keys after the array) is decoded at the end as
`{"traceEvents":[` + rest.

A cut at a `},{` that lies inside a string or inside an event (an object in `args`) leaves the
batch invalid JSON (an unterminated string, unbalanced brackets): the decoder refuses it, and the
batch is then cut where a tokenizer (strings skipped, brackets counted) finds a real separator. A
batch that decodes is a run of complete events, and batches joined by the commas between them are
the array itself, so the events are exactly those of a whole-file decode. A batch handed to another
process is handed unchecked, and its decode there refusing it (`HandedRefused`) makes the parse
read the file again with the handed batches checked first (`_checked_text`).

The nesting of a batch is bounded at `BATCH_DEPTH` levels as it is decoded, through the
interpreter's recursion limit where that bounds it exactly (`_bounded_events`), else by counting
its brackets first (`_shape`).

Anything unexpected (no `traceEvents` array, invalid JSON, an event that is not an object, nesting
too deep) raises `Fallback`: the caller reads the file whole, as before, and reports the problem
with the messages it always gave.
"""
from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Generator, Iterator, Optional

import msgspec

from . import bounded_read, json_depth
from .kineto_events import STREAM_EVENTS, DeviceProps, Trace, TypedEvent

# JSON text per batch of events. 2 MiB: a batch, its brackets and its decoded events stay within
# a core's cache more than at 4 MiB (2 MiB of L2 a core on the 2-core machine). Whole process
# against 4 MiB (interleaved pairs, reports byte-identical; docs/SPEED.md): overlap x34 0.957 of
# the wall and a peak 28 MiB lower (6 pairs), x5 0.979 (10), hta_df_index_resolver 0.967 (20);
# 1 MiB was slower than 2 on x34 (1 MiB: 0.994 of 4 MiB's wall).
TEXT_BYTES = 2 << 20
MAX_HELD = 64 << 20  # text held without a cut (before the events, one event, after them): beyond, read whole
_BOM = b"\xef\xbb\xbf"
_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
_SEP = re.compile(rb'\}[ \t\r\n]*,[ \t\r\n]*\{')
# a string (escapes skipped), a lone quote (a string the buffer cuts), or a structural character
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{},]')
_CLOSE = {ord("]"), ord("}")}
_OPEN = {ord("["), ord("{")}


class Fallback(Exception):
    """The stream is not a well-formed Kineto trace (or not one this reader can split): read whole."""


class _Tail(msgspec.Struct):
    """The end of the text: the last events and the top-level keys after the array."""
    traceEvents: Optional[STREAM_EVENTS] = None
    schemaVersion: Any = None
    deviceProperties: Optional[list[DeviceProps]] = None
    distributedInfo: Optional[dict[str, Any]] = None
    baseTimeNanoseconds: Any = None


class _TypedTail(_Tail):
    """The same, its events of every field (where _Tail's union refuses one: `_decode_events`)."""
    traceEvents: Optional[list[TypedEvent]] = None


_TOP = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds")


class EventStream:
    """Iterate for batches of events (`_decode_events`, in file order); afterwards `top`
    holds the top-level fields (a `Trace` without its events).

    `hand_off`, when set, is asked before each batch is decoded: True makes that batch come out as
    its JSON text (`[` events `]`, a `bytes`, its cut, syntax, depth and events checked where it is
    decoded, `decode_text`; with `checked`, its cut and depth checked here first) instead of
    decoded events, for another process to decode."""

    def __init__(self, path: Path, text_bytes: int | None = None, piece: int | None = None,
                 hand_off: Callable[[], bool] | None = None, checked: bool = False):
        self.path = Path(path)
        self.hand_off = hand_off
        self.checked = checked     # the batches handed over checked here first (`_checked_text`)
        self.text_bytes = TEXT_BYTES if text_bytes is None else text_bytes
        self.piece = bounded_read.CHUNK if piece is None else piece
        self.max_held = max(MAX_HELD, 4 * self.text_bytes)
        self.top: Trace | None = None

    def __iter__(self) -> Generator[list | bytes, None, None]:
        src = bounded_read.pieces(self.path, size=self.piece)
        try:
            yield from self._batches(src)
        finally:
            src.close()

    def _batches(self, src) -> Iterator[list | bytes]:
        buf = bytearray()
        eof = False

        def more() -> bool:
            nonlocal eof
            if len(buf) > self.max_held:  # no place to cut (not a trace, a bomb): the whole read decides
                raise Fallback
            for p in src:
                buf.extend(p)
                return True
            eof = True
            return False

        head, start = self._head(buf, more)
        del buf[:start - 1]  # buf starts with the array's "[": a batch is buf[:cut] and a "]", one copy
        ended = False  # the array's closing bracket is in buf (found by the tokenizer)
        want = self.text_bytes  # bytes in buf before the next cut is tried
        while not eof:
            if ended or len(buf) < want:
                more()
                continue
            cut = _last_sep(buf)
            if cut is None:  # no separator yet (one long event): try again once buf has doubled
                want = 2 * len(buf)
                continue
            decode: Callable[[bytearray, int], Any] = (
                (_checked_text if self.checked else _batch_text) if self.hand_off is not None and self.hand_off()
                else _decode_batch)
            evs = decode(buf, cut)
            if evs is None:  # a cut inside a string or an event: cut where the tokenizer says
                cut, ended = _exact_cut(buf)
                if cut is None:
                    want = 2 * len(buf)
                    continue
                evs = decode(buf, cut)
                if evs is None:
                    raise Fallback
            del buf[:cut]
            buf[0] = 0x5B  # the comma after the batch becomes the next batch's "["
            want = self.text_bytes
            if type(evs) is tuple:  # (text,) for another process
                yield evs[0]
            elif evs:
                yield evs
        tail = _decode_tail(buf)
        buf.clear()
        if tail.traceEvents:
            yield tail.traceEvents
        tail.traceEvents = None
        for k in _TOP:
            if getattr(tail, k) is not None:
                setattr(head, k, getattr(tail, k))
        self.top = head

    def _head(self, buf: bytearray, more) -> tuple[Trace, int]:
        """The top-level keys before the events, and where the first event starts in buf."""
        scan = 0
        while True:
            if buf[:3] == _BOM:
                del buf[:3]
            m = _KEY.search(buf, scan)
            while m:
                top = _try_head(buf, m.start())
                if top is not None:
                    return top, m.end()
                m = _KEY.search(buf, m.start() + 1)
            last = buf.rfind(b'"traceEvents"')
            scan = last if last >= 0 else max(0, len(buf) - 16)
            if not more():
                raise Fallback


def _try_head(buf: bytearray, end: int) -> Trace | None:
    text = bytes(buf[:end])
    if json_depth.depth_exceeds(text):
        raise Fallback
    try:
        return msgspec.json.decode(text + b'"traceEvents":null}', type=Trace)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _last_sep(buf: bytearray) -> int | None:
    """Position of the comma of the last `},{` in buf (None when there is none)."""
    n = len(buf)
    w = 1 << 16
    while True:
        lo = max(0, n - w)
        last = None
        for m in _SEP.finditer(buf, lo):
            last = m
        if last is not None:
            return buf.index(b",", last.start())
        if lo == 0:
            return None
        w *= 4


# brackets of either kind as ( and ), quotes kept, everything else dropped
_PARENS = bytes.maketrans(b"[{]}", b"(())")
_DROP = bytes(b for b in range(256) if b not in b'[]{}"')
_STRING = re.compile(rb'"[^"]*"')


def too_deep(text: bytes, limit: int) -> bool:
    """Whether a text nests more than `limit` levels: the answer of `json_depth.depth_exceeds` for
    valid JSON, in fewer passes (both bracket kinds kept as one and peeled one level per pass).
    For a text that is not valid JSON it may say True where the exact count says False (brackets
    of different kinds paired): the caller then reads the file whole, whose exact check and
    decoder report it."""
    return _shape(text, limit, fast=False) == _DEEP


_DEEP, _CLOSED, _OPEN_OR_UNKNOWN = "deep", "closed", "open"


def _shape(text: bytes, limit: int, fast: bool = True) -> str:
    """_DEEP: more than `limit` levels (as `too_deep`); _CLOSED: one value of at most `limit`
    levels, every bracket and string in it closed (both kinds of bracket counted as one), as a
    batch `[` events `]` is; _OPEN_OR_UNKNOWN: neither (a string or bracket left open, as where a
    cut falls inside a string or an event; or more than one value, as where it falls after the
    array), or, for a text with escapes, not known.

    `fast` (a batch's check): _CLOSED at once where `_closed_fast` says so, the strings' brackets
    counted with the others (see there); the exact count only where it does not."""
    if b"\\" in text:  # escapes inside strings: the exact count
        return _DEEP if json_depth.depth_exceeds(text, limit) else _OPEN_OR_UNKNOWN
    marks = text.translate(_PARENS, _DROP)
    if fast and _closed_fast(marks, limit):
        return _CLOSED
    marks = marks.replace(b'""', b"")  # strings without brackets gone
    if 0x22 in marks:
        marks = _STRING.sub(b"", marks)  # the strings that hold brackets (a lone quote: one left open)
    return _peeled(marks, limit)


def _peeled(parens: bytes, limit: int) -> str:
    """The shape of a run of brackets written as ( and ) (no strings left in it): _CLOSED, one
    value of at most `limit` levels; _DEEP, more levels; _OPEN_OR_UNKNOWN, neither. Peeled one
    level per pass."""
    for _ in range(limit):
        if parens == b"()":  # one value, every level closed (this one the last of at most `limit`)
            return _CLOSED
        fewer = parens.replace(b"()", b"")  # one level: a pair it empties is not matched in the same pass
        if len(fewer) == len(parens) or not fewer:  # unbalanced (a cut inside an event), or several values
            return _OPEN_OR_UNKNOWN
        parens = fewer
    return _DEEP if len(parens.replace(b"()", b"")) < len(parens) else _OPEN_OR_UNKNOWN


def _closed_fast(marks: bytes, limit: int) -> bool:
    """Whether a text's quotes and brackets (`marks`: both bracket kinds as ( and ), quotes kept;
    no escapes) pair up as one value of at most `limit` levels, the brackets inside strings counted
    with the others: the quotes even in number, and their brackets so, peeled one level per pass.

    About 60-70 % of the time of `_shape`'s exact count on a batch of 4 MiB (2.7 against 4.4 ms, 4.0
    against 5.9 on h200_moe/overlap): it leaves the quotes and the strings'
    brackets in place of removing every string (hundreds of thousands of them), the part of the
    exact count that costs most. Where no string holds brackets that do not pair up among
    themselves (a kernel's `{lambda()#1}` does), the answer is the exact count's: a string's own
    balanced brackets change neither the pairing nor the levels outside it; a cut inside a string
    leaves its quotes odd. Otherwise (strings such as "}}" or "a[") True may be said where the
    exact count says no: for a cut inside an event whose open brackets the strings' happen to
    close (its decode then fails, and the file is read whole: the same tables, as for any batch
    the decoder refuses), or for more levels than `limit` that such strings hide: the decoder then
    nests them, where the whole read would refuse the file for its nesting (a crafted file only),
    and past its own limit (about a thousand levels: a RecursionError, not a crash) refuses them,
    and the file is read whole, which refuses it. False only sends the text to the exact count."""
    if marks.count(b'"') & 1:   # a string left open (a cut inside one)
        return False
    return _peeled(marks.translate(None, b'"'), limit) == _CLOSED


def _batch_copy(buf: bytearray, cut: int) -> bytes:
    """buf[:cut] (it starts with "[") as one JSON array, copied once: "[" events "]"."""
    comma = buf[cut]
    buf[cut] = 0x5D
    text = bytes(memoryview(buf)[:cut + 1])
    buf[cut] = comma
    return text


def _batch_text(buf: bytearray, cut: int) -> tuple[bytes] | None:
    """The text of the events of buf[:cut] as a JSON array, for another process to decode, handed
    over unchecked: where it is decoded (`decode_text`) the decoder refuses a cut that fell inside
    a string or an event, as any text that is not valid JSON (HandedRefused, which the parse answers
    by reading the file again with every batch checked here first: `_checked_text`, kineto._read),
    and the nesting is bounded there (`_checked_decode`: Fallback). No such cut was found in
    the traces of ../shared/traces cut at every 8 KiB (61,674 cuts; docs/SPEED.md); the check costs
    a pass over every batch's text (about a tenth of the parse's CPU)."""
    return (_batch_copy(buf, cut),)


def _checked_text(buf: bytearray, cut: int) -> tuple[bytes] | None:
    """`_batch_text`, checked here first: None when the text is not a run of complete values (a cut
    inside a string or an event: the tokenizer then cuts again), Fallback where it nests deeper
    than BATCH_DEPTH. Where every string and bracket is closed (`_shape`) it is handed over as it
    is: a value that is not valid JSON or not an event is then refused where it is decoded
    (`decode_text`: Fallback, as here); otherwise (escapes in strings) the decoder checks it first."""
    text = _batch_copy(buf, cut)
    shape = _shape(text, BATCH_DEPTH)
    if shape == _DEEP:
        raise Fallback
    if shape == _CLOSED:
        return (text,)
    try:
        msgspec.json.decode(text, type=msgspec.Raw)
    except msgspec.DecodeError:
        return None
    except RecursionError:
        raise Fallback from None
    return (text,)


class HandedRefused(Fallback):
    """A batch handed over was not valid JSON where it was decoded (`decode_text`): where it went
    unchecked (`_batch_text`), the cut may have fallen inside a string or an event, and the parse
    reads the file again, the batches checked before they are handed over (`EventStream.checked`);
    where it was checked, the file is read whole, as for any Fallback."""


_EVENTS = msgspec.json.Decoder(STREAM_EVENTS)
_TYPED = msgspec.json.Decoder(list[TypedEvent])


def _decode_events(text: bytes) -> list:
    """The events of a batch (`[` events `]`) as the union of the stream's events (STREAM_EVENTS);
    where msgspec refuses an event of it (a phase the union does not name, or one that is not a
    string), every field of every event of the batch (TypedEvent: as the whole read decodes them;
    kineto.route_part routes either). ValidationError where that refuses an event too (one that
    is not an object)."""
    try:
        return _EVENTS.decode(text)
    except msgspec.ValidationError:
        return _TYPED.decode(text)


# A batch nests one level less than its file (`[` events `]` in place of the top object's array).
BATCH_DEPTH = json_depth.MAX_DEPTH - 1
# The recursion limit that bounds msgspec's nesting at BATCH_DEPTH lies this many frames above the
# decoding one (`_frames`), and more where C calls lie between the frames (each counts too): each
# decode finds it (`_bounded_events`) from the last one's distance, within _TRIES steps.
_ABOVE = [BATCH_DEPTH - 1]
_TRIES = 64
_INEXACT: list[bool] = []   # [True] once no limit bounded the nesting exactly (as from Python 3.12 on)


def _frames() -> int:
    """The frames on this thread's stack, this one's included."""
    f: FrameType | None = sys._getframe()
    n = 0
    while f is not None:
        n += 1
        f = f.f_back
    return n


def _probe_text(depth: int, ph: str = '"X"') -> bytes:
    """A batch of one event nesting `depth` levels in all (the array the first), its args holding
    the deepest; `ph` a JSON value for its phase (a number: the union refuses it, TypedEvent not)."""
    value = "[" * (depth - 3) + "1" + "]" * (depth - 3)
    return (f'[{{"ph": {ph}, "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
            f'"args": {{"x": {value}}}}}]').encode()


_FITS, _TOO_DEEP = _probe_text(BATCH_DEPTH), _probe_text(BATCH_DEPTH + 1)
_UNBOUNDED = object()


def _bounded_events(text: bytes):
    """`_decode_events(text)` with the decoder's nesting bounded at BATCH_DEPTH: RecursionError
    beyond; _UNBOUNDED where no recursion limit bounds it exactly.

    msgspec counts every level of the value it decodes against the interpreter's recursion limit
    (typed, `Any` and skipped fields alike, the union's and TypedEvent's decoders the same), on top
    of the thread's recursion depth, which counts this stack's frames and some of the C calls
    between them. So the limit is found here, in the frame that decodes: from `_frames` and the
    distance the last decode found (_ABOVE), raised while a batch of BATCH_DEPTH levels is refused
    and lowered while one of a level more is not (each probe a few microseconds; a batch's decode,
    milliseconds). An interpreter whose C recursion does not follow the limit (Python 3.12 and
    later) finds none. The limit is the process's: only where no other thread runs Python
    (`_checked_decode`); it is put back before this returns."""
    old = sys.getrecursionlimit()
    frames = _frames()
    limit = frames + _ABOVE[0]
    try:
        for _ in range(_TRIES):
            try:
                sys.setrecursionlimit(limit)
            except RecursionError:    # below this thread's depth
                return _UNBOUNDED
            try:
                _EVENTS.decode(_FITS)
            except RecursionError:
                limit += 1
                continue
            try:
                _EVENTS.decode(_TOO_DEEP)
            except RecursionError:
                break                 # this limit refuses one level more than the bound, and no fewer
            limit -= 1
        else:
            return _UNBOUNDED
        _ABOVE[0] = limit - frames
        try:
            return _EVENTS.decode(text)
        except msgspec.ValidationError:
            return _TYPED.decode(text)
    finally:
        sys.setrecursionlimit(old)


def _checked_decode(text: bytes) -> list:
    """`_decode_events(text)`, Fallback where the batch nests deeper than BATCH_DEPTH (the whole
    read then refuses the file with its message): bounded by the recursion limit where no other
    thread runs Python here (`_bounded_events`), else counted first (`_shape`: a pass over the
    text's brackets and quotes, about a tenth of the parse's CPU, docs/SPEED.md). msgspec's
    DecodeError and ValidationError are the caller's."""
    if not _INEXACT and threading.active_count() == 1:
        try:
            got = _bounded_events(text)
        except RecursionError:
            raise Fallback from None
        if got is not _UNBOUNDED:
            return got
        _INEXACT.append(True)
    if _shape(text, BATCH_DEPTH) == _DEEP:
        raise Fallback
    return _decode_events(text)


def decode_text(text: bytes) -> list:
    """The events of a batch's text from `_batch_text`: HandedRefused where it is not valid JSON (as
    a cut inside a string or an event leaves it), Fallback where the decode would fall back."""
    try:
        return _checked_decode(text)
    except (msgspec.ValidationError, RecursionError):   # (a ValidationError is a DecodeError too)
        raise Fallback from None
    except msgspec.DecodeError:
        raise HandedRefused from None


def _decode_batch(buf: bytearray, cut: int) -> list | None:
    """The events of buf[:cut] (None when that is not a run of complete events)."""
    text = _batch_copy(buf, cut)
    try:
        return _checked_decode(text)
    except (msgspec.ValidationError, RecursionError):  # an event that is not an object: reported by the whole read
        raise Fallback from None                        # (caught first: a ValidationError is a DecodeError too)
    except msgspec.DecodeError:
        return None


def _exact_cut(buf: bytearray) -> tuple[int | None, bool]:
    """The last comma between events in buf (after its leading "[") by a tokenizer (strings
    skipped, brackets counted), and whether the array's closing bracket was reached (nothing after
    it is an event)."""
    depth, cut = 0, None
    for m in _TOKEN.finditer(buf, 1):
        c = buf[m.start()]
        if c == 0x22:  # a string, or a quote whose string the buffer cuts: stop there
            if m.end() - m.start() == 1:
                return cut, False
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            if depth == 0:
                return cut, True
            depth -= 1
        elif depth == 0:  # a comma between two events
            cut = m.start()
    return cut, False


def _decode_tail(buf: bytearray) -> _Tail:
    text = b'{"traceEvents":' + bytes(buf)  # buf starts with the array's "["
    if json_depth.depth_exceeds(text):
        raise Fallback
    try:
        try:
            return msgspec.json.decode(text, type=_Tail)
        except msgspec.ValidationError:   # (as `_decode_events`)
            return msgspec.json.decode(text, type=_TypedTail)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Fallback from None
