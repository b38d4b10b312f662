"""direct_io.AdaptiveWriter: a large output written through the page cache or with O_DIRECT, chunk by
chunk, whichever writes faster. The file's bytes must be the pieces joined whichever way each part
went; the choice follows the measured rates; a file system without O_DIRECT is written anyway."""
from __future__ import annotations

import errno
import os
import random

import pytest

from traceview import direct_io, output
from traceview.direct_io import ALIGN, CACHE, CHUNK, DIRECT, AdaptiveWriter

needs_direct = pytest.mark.skipif(not getattr(os, "O_DIRECT", 0), reason="no O_DIRECT on this platform")


def _direct_works(folder) -> bool:
    """Whether the file system of `folder` takes an O_DIRECT write (tmpfs before Linux 6.6 does not)."""
    import mmap
    path = os.path.join(folder, "probe")
    buf = mmap.mmap(-1, ALIGN)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    try:
        return os.pwrite(fd, memoryview(buf), 0) == ALIGN
    except OSError:
        return False
    finally:
        os.close(fd)
        os.unlink(path)
        buf.close()


def _need_direct(folder) -> None:
    if not _direct_works(folder):
        pytest.skip(f"the file system of {folder} takes no O_DIRECT write")


def _pieces(total: int, seed: int) -> list[bytes]:
    """Pieces of mixed sizes (a few bytes to several chunks) adding up to `total` bytes."""
    rng = random.Random(seed)
    out, left = [], total
    while left:
        size = min(left, rng.choice([1, 7, 4095, 4097, 65536, CHUNK - 1, CHUNK, CHUNK + 3, 3 * CHUNK + 11]))
        out.append(rng.randbytes(size))
        left -= size
    return out


def _write(path, pieces) -> AdaptiveWriter:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        return direct_io.write_pieces(fd, str(path), pieces)
    finally:
        os.close(fd)


# sizes around the chunk and the block: empty, under a block, a block, a chunk and one byte on
# either side, several chunks and a partial block
SIZES = [0, 1, ALIGN - 1, ALIGN, ALIGN + 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 123, 3 * CHUNK]


@needs_direct
@pytest.mark.parametrize("choice", ["0", "1", ""])
@pytest.mark.parametrize("total", SIZES)
def test_bytes_are_the_pieces_joined(tmp_path, monkeypatch, choice, total):
    monkeypatch.setenv(direct_io.ENV, choice)
    pieces = _pieces(total, seed=total)
    w = _write(tmp_path / "out", pieces)
    assert (tmp_path / "out").read_bytes() == b"".join(pieces)
    assert sum(w.written.values()) >= total                     # (a direct last block is padded)
    if choice == "0":
        assert w.written[DIRECT] == 0
    if choice == "1" and total > CHUNK and _direct_works(tmp_path):   # all but the first write went direct
        assert w.written[DIRECT] >= total - CHUNK


@needs_direct
def test_slow_page_cache_moves_to_direct_and_back(tmp_path, monkeypatch):
    """The rates decide: a page cache timed slow sends the writes to O_DIRECT once PROBE bytes went
    through it; O_DIRECT timed slower than GAIN times the page cache sends them back."""
    monkeypatch.setenv(direct_io.ENV, "")
    _need_direct(tmp_path)
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        w = AdaptiveWriter(fd, str(tmp_path / "out"))
        assert w._way() == CACHE                                 # nothing measured yet
        w.rate[CACHE], w.written[CACHE] = 200e6, direct_io.PROBE - 1
        assert w._way() == CACHE                                 # not enough through it yet
        w.written[CACHE] = direct_io.PROBE
        assert w._way() == DIRECT                                # slow, O_DIRECT untried
        w.rate[CACHE] = direct_io.FAST_ENOUGH
        assert w._way() == CACHE                                 # fast enough: not tried
        w.rate[CACHE], w.rate[DIRECT] = 200e6, 2e9
        assert w._way() == DIRECT
        w._since = direct_io.EXPLORE - 1
        assert w._way() == CACHE                                 # one in EXPLORE through the page cache
        w._since = 0
        w.rate[DIRECT] = 1.4 * 200e6
        assert w._way() == CACHE                                 # O_DIRECT not GAIN times faster
        w.release()
    finally:
        os.close(fd)


@needs_direct
def test_rates_measured_from_the_writes(tmp_path, monkeypatch):
    """Each write's rate is its bytes over the time inside the call (a clock stepping 1 s per call:
    8 MiB/s), weighted into the way's rate."""
    monkeypatch.setenv(direct_io.ENV, "0")
    ticks = iter(range(1000))
    monkeypatch.setattr(direct_io.time, "perf_counter", lambda: float(next(ticks)))
    w = _write(tmp_path / "out", [b"x" * (3 * CHUNK)])
    assert w.written == {CACHE: 3 * CHUNK, DIRECT: 0}
    assert w.rate[CACHE] == pytest.approx(CHUNK)                 # every write CHUNK bytes in 1 s
    assert (tmp_path / "out").stat().st_size == 3 * CHUNK


@needs_direct
@pytest.mark.parametrize("refuse", ["open", "write"])
def test_no_direct_io_on_this_file_system(tmp_path, monkeypatch, refuse):
    """O_DIRECT refused at the open or at a write (EINVAL): every byte goes through the page cache,
    the refused chunk again at its place."""
    monkeypatch.setenv(direct_io.ENV, "1")
    real_open, real_pwrite = os.open, os.pwrite
    direct_fds: set[int] = set()

    def fake_open(path, flags, *a):
        if flags & os.O_DIRECT:
            if refuse == "open":
                raise OSError(errno.EINVAL, "no O_DIRECT here")
            fd = real_open(path, flags, *a)
            direct_fds.add(fd)
            return fd
        return real_open(path, flags, *a)

    def fake_pwrite(fd, data, off):
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "no O_DIRECT here")
        return real_pwrite(fd, data, off)
    monkeypatch.setattr(direct_io.os, "open", fake_open)
    monkeypatch.setattr(direct_io.os, "pwrite", fake_pwrite)
    pieces = _pieces(4 * CHUNK + 5, seed=3)
    w = _write(tmp_path / "out", pieces)
    assert (tmp_path / "out").read_bytes() == b"".join(pieces)
    assert w.written[DIRECT] == 0 and w.written[CACHE] == 4 * CHUNK + 5
    assert w.direct_ok is False and w.dfd is None


@needs_direct
def test_write_file_takes_it_for_pieces(tmp_path, monkeypatch):
    """write_file writes a Pieces output with the writer (O_DIRECT forced: the same bytes, no
    descriptor left open), a bundle's report too, and other outputs as before."""
    monkeypatch.setenv(direct_io.ENV, "1")
    pieces = _pieces(3 * CHUNK + 17, seed=5)
    made: list = []
    real = direct_io.AdaptiveWriter.__init__

    def spy(self, fd, path):
        made.append(path)
        real(self, fd, path)
    monkeypatch.setattr(direct_io.AdaptiveWriter, "__init__", spy)
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    output.write_file(output.Pieces(lambda: iter(pieces)), tmp_path / "r.json")
    assert (tmp_path / "r.json").read_bytes() == b"".join(pieces)
    output.write_tree([("report.json", output.Pieces(lambda: iter(pieces))), ("report.md", "# x\n")],
                      tmp_path / "bundle")
    assert (tmp_path / "bundle" / "report.json").read_bytes() == b"".join(pieces)
    assert (tmp_path / "bundle" / "report.md").read_text() == "# x\n"
    output.write_file("text\n", tmp_path / "t.md")
    assert (tmp_path / "t.md").read_text() == "text\n"
    assert len(made) == 2                                       # the two Pieces outputs, not the text
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds            # no descriptor left open


def test_released_without_writing_what_is_staged(tmp_path):
    """An interrupted write (the caller's error): release() lets go without writing the staged bytes."""
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        w = AdaptiveWriter(fd, str(tmp_path / "out"))
        w.write(b"a" * 100)
        w.release()
        assert w.buf is None and w.dfd is None
    finally:
        os.close(fd)
    assert (tmp_path / "out").stat().st_size == 0


@needs_direct
def test_direct_after_a_large_piece_through_the_page_cache(tmp_path, monkeypatch):
    """A large piece written from where it lies through the page cache keeps the offset a multiple
    of ALIGN, so O_DIRECT takes the next write (no refusal, no way back)."""
    monkeypatch.setenv(direct_io.ENV, "1")
    _need_direct(tmp_path)
    pieces = [os.urandom(CHUNK + 5), os.urandom(2 * CHUNK + 1)]
    w = _write(tmp_path / "out", pieces)
    assert (tmp_path / "out").read_bytes() == b"".join(pieces)
    assert w.written[CACHE] == CHUNK and w.direct_ok
    assert w.written[DIRECT] == -(-(2 * CHUNK + 6) // ALIGN) * ALIGN   # the rest, its last block padded
