"""traceview/heap.py: glibc's malloc told at the command's start to keep the pages a run frees."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from traceview import heap

GLIBC = heap._glibc() is not None


class FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, option, value):
        self.calls.append((option, value))
        return 1


def test_sets_each_setting_once(monkeypatch):
    fake = FakeLibc()
    monkeypatch.setattr(heap, "_glibc", lambda: fake)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert heap.keep_heap() is True
    # glibc's option numbers (<malloc.h>) and the values the module gives
    assert fake.calls == [(-3, 32 * 1024 * 1024), (-1, 16 * 1024 * 1024), (-2, 8 * 1024 * 1024)]


def test_the_users_tunables_and_other_c_libraries_are_left_alone(monkeypatch):
    fake = FakeLibc()
    monkeypatch.setattr(heap, "_glibc", lambda: fake)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=512:glibc.malloc.top_pad=0")
    assert heap.keep_heap() is False and fake.calls == []
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=512")     # not malloc's: set
    assert heap.keep_heap() is True and len(fake.calls) == 3
    monkeypatch.setattr(heap, "_glibc", lambda: None)
    assert heap.keep_heap() is False
    monkeypatch.setattr(heap.sys, "platform", "darwin")
    assert heap._glibc() is None


def test_a_refused_setting_says_false(monkeypatch):
    fake = FakeLibc()
    fake.mallopt = lambda option, value: 0 if option == -2 else 1
    monkeypatch.setattr(heap, "_glibc", lambda: fake)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert heap.keep_heap() is False


# A block of 1 MiB, touched, freed and asked for again, in a fresh process: glibc's default gives the
# first one from mmap and back at its free (the threshold starts at 128 KiB), so the second is new pages
# (about 256 page faults); kept, the second is the first one's pages, faulted once.
_PROBE = textwrap.dedent("""
    import ctypes, resource, sys
    if sys.argv[1] == "kept":
        from traceview.heap import keep_heap
        assert keep_heap()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    def round_trip():
        p = libc.malloc(1 << 20)
        ctypes.memset(p, 1, 1 << 20)
        libc.free(p)
    round_trip()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    round_trip()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only (this C library is another)")
def test_settings_take_effect_a_freed_block_is_not_faulted_again():
    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                             timeout=60, env={"PATH": "/usr/bin:/bin"}, check=True)
        return int(out.stdout)
    default, kept = faults("default"), faults("kept")
    assert default >= 200, default      # 256 pages of 4 KiB, faulted again
    assert kept <= 20, kept
