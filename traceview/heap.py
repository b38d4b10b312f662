"""How glibc's malloc keeps the memory a command frees: set once as the command starts.

glibc hands a block of more than `mmap_threshold` bytes straight to the kernel (mmap) and gives
it back when freed (munmap); it starts at 128 KiB and rises, block by block, to the largest one
freed. Memory freed at the top of a heap beyond `trim_threshold` is given back too. Every page
given back and asked for again is a page fault, each a few microseconds on the virtual machines
traceview is run on (the 2-core development machine: 1 GiB of fresh pages costs 0.5-1.9 s of
system time). An analysis frees and makes again blocks of every size from a few hundred KiB to
tens of MiB, rank after rank: on the 64-rank benchmark job a third of its page faults
(240,000 -> 150,000) were the same pages given back and faulted again.

`keep_heap()` sets the threshold to what it rises to anyway (32 MiB, glibc's most), keeps 16 MiB
at the top of a heap and asks the kernel for 8 MiB more than needed when a heap grows. Processes
forked after it (a parse helper) inherit it, and a pool's workers set it as they start
(executors.worker_init: traceview's own processes). Otherwise only for the command (launch.main):
a program that imports traceview keeps its own settings. Where GLIBC_TUNABLES names a glibc.malloc
setting the user chose theirs, and nothing is set; where the C library is not glibc, nothing is
asked.
"""
from __future__ import annotations

import os
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3      # glibc's <malloc.h>
SETTINGS = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 16 << 20), (M_TOP_PAD, 8 << 20))


def _glibc():
    """glibc as a ctypes library, or None (another platform or C library)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        # glibc's own function: musl and the others have none
        return libc if hasattr(libc, "gnu_get_libc_version") else None
    except OSError:
        return None


def keep_heap() -> bool:
    """Set SETTINGS in this process's malloc; False where nothing was set (see the module)."""
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    libc = _glibc()
    if libc is None:
        return False
    done = True
    for option, value in SETTINGS:
        done = libc.mallopt(option, value) == 1 and done
    return done


def give_back() -> bool:
    """glibc's free memory, wherever it lies in its heaps, given back to the system now
    (`malloc_trim(0)`): for a large table let go of in the middle of a run (its blocks under
    `mmap_threshold` are in a heap, whose pages above them stay in use). Whether glibc gave any
    back (`malloc_trim`'s answer); False where the C library is not glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
