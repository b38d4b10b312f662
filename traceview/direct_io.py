"""Writing a large output file through the page cache or around it, whichever this machine writes faster.

A buffered write of a new file costs the kernel a page-cache page for every 4 KiB. Where that page
is memory the machine must first be given back (a virtual machine whose guest hands its free pages
to the host: `balloon` free-page reporting, as on this project's machines), each such page costs a
fault in the host: 64 MiB took 0.32-0.42 s to write here (160-210 MB/s), the same bytes written
with O_DIRECT (from an aligned buffer straight to the device, no page cache) 35-44 ms. How
dear a page is changes within one write: memory freed a moment ago is cheap, the rest is not (a
976 MB report: its first 16 MiB at 5 GB/s, the next 286 MiB at 250 MB/s). On a bare-metal machine
a buffered write runs at memory speed, and a slow device (a hard disk, a network file system) would
make O_DIRECT the slower way. So `AdaptiveWriter` measures as it goes:

- each write is timed (the time inside the call) and each way's rate kept (RATE_WEIGHT: the last
  writes count most); a write is a CHUNK (8 MiB) of bytes or more, at an offset that is a multiple
  of ALIGN, so either way can take the next one;
- the page cache is the way while it writes at FAST_ENOUGH or faster, and at first (until PROBE
  bytes have gone that way); O_DIRECT is tried once it is slower, and kept while it writes at
  least GAIN times as fast; while on O_DIRECT, one write in EXPLORE (32) goes through the page cache
  again, so that the writer comes back to it where it became fast again;
- through the page cache a large piece is written from where it lies (no copy); O_DIRECT writes
  from a page-aligned staging buffer, its last partial block padded with zeros and the file then
  cut to its length (`ftruncate`).

A file system without O_DIRECT (it refuses the open, or a write with EINVAL) is written through the
page cache, the refused bytes again at the same place. The file's bytes are the same whichever way
each part went. TRACEVIEW_DIRECT_IO=0 keeps every write in the page cache; =1 takes O_DIRECT for
every write after the first (tests).
"""
from __future__ import annotations

import mmap
import os
import time

CHUNK = 8 << 20          # what one write carries (but the last): the staging buffer's size, and a sample
ALIGN = 4096             # O_DIRECT's alignment of buffer, offset and length (a logical block, at most a page)
PROBE = 16 << 20         # bytes through the page cache before O_DIRECT may be tried
FAST_ENOUGH = 1 << 30    # bytes/s through the page cache at which O_DIRECT is not tried
GAIN = 1.5               # how much faster O_DIRECT must write to be taken
EXPLORE = 32             # while on O_DIRECT, one write in this many through the page cache (256 MiB)
RATE_WEIGHT = 0.5        # weight of the newest write in a way's rate
ENV = "TRACEVIEW_DIRECT_IO"
_DIRECT = getattr(os, "O_DIRECT", 0)
CACHE, DIRECT = "page cache", "direct"


class AdaptiveWriter:
    """A file-like `write(piece)` onto the empty regular file open for writing as `fd`, whose path
    is `path` (opened again with O_DIRECT where that is tried). `close()` writes what is staged and
    cuts the file to its length; `release()` lets go of what the writer holds; the caller closes
    `fd`. `written` says how many bytes went each way (tests, benchmarks)."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path
        self.dfd: int | None = None
        self.off = 0                      # file offset where the staged bytes go (a multiple of ALIGN)
        self.n = 0                        # bytes staged
        self.buf: mmap.mmap | None = None
        choice = os.environ.get(ENV, "")
        self.direct_ok = bool(_DIRECT) and choice != "0"
        self.forced = choice == "1"
        self.rate: dict[str, float | None] = {CACHE: None, DIRECT: None}
        self.written = {CACHE: 0, DIRECT: 0}
        self._since = 0                   # writes on O_DIRECT since the last through the page cache

    # -- the caller's side ----------------------------------------------------------------------

    def write(self, piece) -> None:
        view = memoryview(piece).cast("B")
        while len(view):
            if self.n == 0 and len(view) >= CHUNK and self._way() == CACHE:
                self._write(CACHE, view[:CHUNK])   # from where it lies (CHUNK keeps the offset aligned)
                view = view[CHUNK:]
                continue
            buf = self._buffer()
            k = min(len(view), CHUNK - self.n)
            buf[self.n:self.n + k] = view[:k]
            self.n += k
            view = view[k:]
            if self.n == CHUNK:
                self._flush()

    def close(self) -> None:
        """Write what is staged (a direct write's last block padded, the file cut to its length)."""
        if self.n:
            self._flush()
        self.release()

    def release(self) -> None:
        """Let go of the O_DIRECT descriptor and the buffer (what is staged is not written)."""
        if self.dfd is not None:
            os.close(self.dfd)
            self.dfd = None
        if self.buf is not None:
            self.buf.close()
            self.buf = None

    # -- the writes -----------------------------------------------------------------------------

    def _buffer(self) -> mmap.mmap:
        if self.buf is None:
            self.buf = mmap.mmap(-1, CHUNK)    # anonymous: page-aligned, as O_DIRECT needs
        return self.buf

    def _flush(self) -> None:
        """Write the staged bytes (a whole CHUNK, or the last ones) the way `_way` says."""
        assert self.buf is not None
        n, way = self.n, self._way()
        with memoryview(self.buf) as view:
            if way == DIRECT:
                padded = -(-n // ALIGN) * ALIGN
                if padded > n:
                    view[n:padded] = bytes(padded - n)
                if self._write(DIRECT, view[:padded], n):
                    if padded > n:
                        os.ftruncate(self.fd, self.off)
                    self.n = 0
                    return
            self._write(CACHE, view[:n])
        self.n = 0

    def _write(self, way: str, view: memoryview, length: int | None = None) -> bool:
        """Write `view` at the offset (`length` of its bytes count: a padded last block), timed;
        False where O_DIRECT refused it (EINVAL: the caller writes it through the page cache)."""
        fd = self.dfd if way == DIRECT else self.fd
        assert fd is not None
        t = time.perf_counter()
        try:
            _pwrite_all(fd, view, self.off)
        except OSError as e:
            if way != DIRECT or e.errno != 22:
                raise
            self._no_direct()
            return False
        seconds = time.perf_counter() - t
        size = len(view)
        rate = size / max(seconds, 1e-9)
        old = self.rate[way]
        self.rate[way] = rate if old is None else RATE_WEIGHT * rate + (1 - RATE_WEIGHT) * old
        self.written[way] += size
        self.off += size if length is None else length
        self._since = self._since + 1 if way == DIRECT else 0
        return True

    def _way(self) -> str:
        """The way of the next write (module docstring)."""
        if not self.direct_ok:
            return CACHE
        if self.forced:
            return DIRECT if self.written[CACHE] and self._open_direct() else CACHE
        cache, direct = self.rate[CACHE], self.rate[DIRECT]
        if cache is None or self.written[CACHE] < PROBE or cache >= FAST_ENOUGH:
            return CACHE
        if direct is None:
            return DIRECT if self._open_direct() else CACHE
        if direct < GAIN * cache:
            return CACHE
        if self._since >= EXPLORE - 1:
            return CACHE
        return DIRECT if self._open_direct() else CACHE

    def _open_direct(self) -> bool:
        if self.dfd is None and self.direct_ok:
            try:
                self.dfd = os.open(self.path, os.O_WRONLY | _DIRECT)
            except OSError:                   # a file system that takes no O_DIRECT
                self._no_direct()
        return self.dfd is not None

    def _no_direct(self) -> None:
        self.direct_ok = False
        if self.dfd is not None:
            os.close(self.dfd)
            self.dfd = None


def write_pieces(fd: int, path: str, pieces) -> AdaptiveWriter:
    """`pieces` written by an AdaptiveWriter into the empty regular file open as `fd` at `path`
    (the caller closes `fd`); the writer, whose `written` says which way the bytes went."""
    writer = AdaptiveWriter(fd, path)
    try:
        for piece in pieces:
            writer.write(piece)
        writer.close()
    finally:
        writer.release()
    return writer


def _pwrite_all(fd: int, view: memoryview, off: int) -> None:
    while len(view):
        k = os.pwrite(fd, view, off)
        if k <= 0:
            raise OSError(28, "no room left to write")
        view, off = view[k:], off + k
