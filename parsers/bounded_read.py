"""Reading an input file with bounded memory: regular files only, and a ceiling on the bytes read.

- Only regular files are read (a symlink is followed first): a FIFO, character or block device
  (a link to /dev/zero), socket or directory is refused at once, before anything blocks on it.
- A ceiling applies to the bytes a parser holds in memory: a plain file larger than it, or a
  gzip file that inflates past it, is refused in one line. The default is the smaller of 8 GiB
  and a quarter of the machine's physical memory (decoding needs several times the JSON's size);
  `--max-input-size SIZE` changes it (`set_max_input_size`).
- gzip is inflated with ISA-L (`isal`, the optional `fast` extra) where installed, else with zlib,
  as a stream, one member after another (multi-member files are valid gzip),
  with each member's CRC and length checked by zlib. Up to `ONE_PASS_BYTES` of output is kept
  from the first pass; a larger stream is first measured (inflated again without keeping the
  output) and only then inflated into one buffer of the exact size, so a bomb is refused before
  its output is held, and a large trace is never held twice (no buffer regrowth).
- `pieces` gives the same bytes a piece at a time, under the same refusals, for a reader that
  decodes as it goes (the Kineto parser) and so never holds the whole text.
"""
from __future__ import annotations

import math
import os
import re
import stat
import types
import zlib
from pathlib import Path

from traceview.errors import TraceError, UsageError

_inflater: types.ModuleType
try:  # ISA-L's inflater, about twice as fast as zlib's (bench/bench_bounded_read.py); the same gzip checks
    from isal import isal_zlib as _inflater
except ImportError:  # pragma: no cover - the standard library's
    _inflater = zlib
_GZIP_ERRORS: tuple[type[BaseException], ...] = (zlib.error, _inflater.error)

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20                  # compressed bytes read, and inflated bytes produced, per step
ONE_PASS_BYTES = 256 << 20       # inflated output kept from the first pass (larger: measure first)
_CAP = 8 << 30


def default_max_input_size() -> int:
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return _CAP
    return min(_CAP, phys // 4) if phys > 0 else _CAP


_limit: dict[str, int | None] = {"bytes": None}


def max_input_size() -> int:
    return _limit["bytes"] if _limit["bytes"] is not None else default_max_input_size()


def ceiling_was_set() -> bool:
    """Whether this process runs under a ceiling other than the default (--max-input-size)."""
    return _limit["bytes"] is not None and _limit["bytes"] != default_max_input_size()


def set_max_input_size(n: int | None) -> None:
    """The ceiling for this process (None: back to the default)."""
    _limit["bytes"] = n


def apply_option(text: str | None) -> None:
    """`--max-input-size SIZE` from the command line (None: keep the default)."""
    if text is not None:
        set_max_input_size(parse_size(text))


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)


def parse_size(text: str, option: str = "--max-input-size") -> int:
    """'8G', '512MiB', '1.5g', '1000000' -> bytes (K, M, G, T are powers of 1024)."""
    m = _SIZE.fullmatch(str(text))
    if not m:
        raise UsageError(None, f"{option}: {text!r} is not a size (e.g. 8G, 512M, 1000000)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(value) or value < 1 or value > (1 << 62):
        raise UsageError(None, f"{option}: {text!r} is out of range (1 byte to 4 EiB)")
    return int(value)


def format_size(n: int) -> str:
    """'8 GiB' for a round size, else '5.7 GiB (6171234304 bytes)'; '11238 bytes' below 1 MiB."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
        if n >= size and size >= 1 << 20:
            return f"{n / size:.1f} {unit} ({n} bytes)"
    return f"{n} bytes"


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def not_regular(mode: int) -> str | None:
    """What a file of this st_mode is when it is not a regular file (None when it is)."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def check_regular(path: Path) -> os.stat_result:
    """stat() of `path` (links followed), refusing anything but a regular file."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise TraceError(path, f"cannot read file ({e.strerror or e})") from None
    what = not_regular(st.st_mode)
    if what:
        raise TraceError(path, f"{what}, not a regular file: only trace files can be read")
    return st


def open_regular(path: Path):
    """A binary file object for `path`, refused unless it is a regular file. Opened without
    blocking (a FIFO swapped in after a stat() cannot hang the open) and checked on the open
    descriptor."""
    check_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise TraceError(path, f"cannot read file ({e.strerror or e})") from None
    what = not_regular(os.fstat(fd).st_mode)
    if what:
        os.close(fd)
        raise TraceError(path, f"{what}, not a regular file: only trace files can be read")
    return os.fdopen(fd, "rb", buffering=0)


def head(path: Path, n: int = 4096) -> bytes:
    """The first n bytes of the file, inflated when it is gzip (for format sniffing)."""
    with open_regular(path) as fh:
        data = fh.read(n if n > 64 else 64)
        if data[:2] != GZIP_MAGIC:
            return data[:n]
        d = _inflater.decompressobj(31)
        out = b""
        try:
            while len(out) < n and data:
                out += d.decompress(data, n - len(out))
                if d.eof or len(out) >= n:
                    break
                data = d.unconsumed_tail or fh.read(CHUNK)
        except _GZIP_ERRORS as e:
            raise TraceError(path, f"truncated or corrupt gzip ({e})") from None
        return out[:n]


def _too_big(path: Path, limit: int, what: str) -> TraceError:
    return TraceError(path, f"{what} more than {format_size(limit)}, the input size limit "
                            "(--max-input-size SIZE raises it)")


def read_bytes(path: Path, limit: int | None = None):
    """The whole content of `path` (gzip inflated), at most `limit` bytes (default: the ceiling).
    Returns bytes or a bytearray (both are read by msgspec without a copy)."""
    limit = max_input_size() if limit is None else limit
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        magic = fh.read(2)
        if magic != GZIP_MAGIC:
            if size > limit:
                raise _too_big(path, limit, f"file of {format_size(size)}:")
            fh.seek(0)
            return _read_all(fh, size, path)
        if size > limit:
            raise _too_big(path, limit, f"gzip file of {format_size(size)}:")
        return _inflate(path, fh, limit)


def _read_all(fh, size: int, path: Path) -> bytearray:
    """The file's `size` bytes into one buffer of that size (a single read() returns at most
    about 2 GiB on Linux, so read until full)."""
    buf = bytearray(size)
    view, n = memoryview(buf), 0
    try:
        while n < size:
            got = fh.readinto(view[n:])
            if not got:
                break
            n += got
        grew = fh.read(1)
    except OSError as e:
        raise TraceError(path, f"cannot read file ({e.strerror or e})") from None
    del view
    if n != size or grew:
        raise TraceError(path, "file changed while being read")
    return buf


class _Sink:
    """Where inflated bytes go: kept in a buffer while they fit under `keep_up_to`, then only
    counted (the buffer is released: the caller inflates again into a buffer of the exact size)."""

    def __init__(self, keep_up_to: int, size_hint: int = 0):
        self.keep_up_to = keep_up_to
        self.buf: bytearray | None = bytearray(min(size_hint, keep_up_to))
        self.n = 0

    def add(self, piece: bytes) -> None:
        end = self.n + len(piece)
        if self.buf is not None:
            if end > self.keep_up_to:
                self.buf = None
            else:
                self.buf[self.n:end] = piece  # in place while within the preallocated size
        self.n = end


def _one_call(path: Path, fh, size: int, limit: int) -> bytes | None:
    """A single-member file of modest size, inflated in one zlib call with its output capped
    (the common case, as fast as an uncapped inflate); None when that is not enough."""
    if size > ONE_PASS_BYTES:
        return None
    fh.seek(0)
    d = _inflater.decompressobj(31)
    try:
        out = d.decompress(fh.read(size + 1), min(limit, ONE_PASS_BYTES) + 1)
    except _GZIP_ERRORS as e:
        raise TraceError(path, f"truncated or corrupt gzip ({e})") from None
    if d.eof and not d.unused_data.strip(b"\x00") and len(out) <= limit:
        return out
    return None


def _inflate(path: Path, fh, limit: int):
    size = os.fstat(fh.fileno()).st_size
    out = _one_call(path, fh, size, limit)
    if out is not None:
        return out
    hint = _trailer_size(fh)
    fh.seek(0)
    sink = _Sink(min(limit, ONE_PASS_BYTES), hint)
    _stream(path, fh, sink, limit)  # refuses past the limit
    if sink.buf is not None:
        del sink.buf[sink.n:]
        return sink.buf
    n = sink.n
    del sink
    fh.seek(0)
    exact = _Sink(n, n)
    _stream(path, fh, exact, limit)
    if exact.buf is None or exact.n != n:
        raise TraceError(path, "file changed while being read")
    return exact.buf


def _trailer_size(fh) -> int:
    """The size the last gzip trailer records (inflated size mod 2^32): a hint for one member."""
    try:
        fh.seek(-4, os.SEEK_END)
        return int.from_bytes(fh.read(4), "little")
    except OSError:
        return 0


def _stream(path: Path, fh, sink: _Sink, limit: int) -> None:
    """Inflate every gzip member of the file into `sink`, refusing past `limit`, a corrupt
    stream, or a truncated last member."""
    for piece in _inflated(path, fh, limit):
        sink.add(piece)


def pieces(path: Path, limit: int | None = None, size: int = CHUNK):
    """The content of `path` (gzip inflated) as consecutive pieces of at most about `size` bytes,
    read as they are consumed: the same refusals as `read_bytes` (not a regular file, larger than
    `limit`, inflating past it, corrupt or truncated gzip, a file that changes while read), raised
    when the piece where they show would be read."""
    limit = max_input_size() if limit is None else limit
    with open_regular(path) as fh:
        total = os.fstat(fh.fileno()).st_size
        magic = fh.read(2)
        if total > limit:
            raise _too_big(path, limit, f"{'gzip file' if magic == GZIP_MAGIC else 'file'} of {format_size(total)}:")
        fh.seek(0)
        if magic == GZIP_MAGIC:
            yield from _inflated(path, fh, limit, size)
            return
        n = 0
        try:
            while True:
                data = fh.read(size)
                if not data:
                    break
                n += len(data)
                if n > total:
                    break
                yield data
        except OSError as e:
            raise TraceError(path, f"cannot read file ({e.strerror or e})") from None
        if n != total:
            raise TraceError(path, "file changed while being read")


def _inflated(path: Path, fh, limit: int, size: int = CHUNK):
    """The inflated bytes of every gzip member of the file, `size` at a time, refusing past
    `limit`, a corrupt stream, or a truncated last member."""
    d = _inflater.decompressobj(31)
    member_done = False
    n = 0

    def take(piece: bytes) -> bytes:
        nonlocal n
        n += len(piece)
        if n > limit:
            raise _too_big(path, limit, "gzip inflates to")
        return piece

    try:
        while True:
            data = fh.read(CHUNK)
            if not data:
                break
            while data:
                if member_done:  # bytes after a complete member: another member, or zero padding
                    data = data.lstrip(b"\x00")
                    if not data:
                        break
                    d, member_done = _inflater.decompressobj(31), False
                piece = take(d.decompress(data, size))
                if piece:
                    yield piece
                if d.eof:
                    data, member_done = d.unused_data, True
                else:
                    data = d.unconsumed_tail
        while not member_done:  # the input is consumed: output zlib still holds, then the end
            piece = take(d.decompress(b"", size))
            if piece:
                yield piece
            if d.eof:
                member_done = True
            elif not piece:
                raise TraceError(path, "truncated or corrupt gzip (incomplete or truncated stream)")
    except _GZIP_ERRORS as e:
        raise TraceError(path, f"truncated or corrupt gzip ({e})") from None
    except OSError as e:
        raise TraceError(path, f"cannot read file ({e.strerror or e})") from None
