"""Transparent huge pages turned off for a process that reads a large trace.

pyarrow's allocator (mimalloc) asks the kernel for huge pages (2 MiB) for its memory. The parse and
the steps after it build Arrow arrays, free them, hand the freed pages back to the system
(`release_unused`) and build again: on a large trace each reuse of a region handed back is a fresh
2 MiB page that the kernel zeroes whole. On overlap_x34 (644 MB of JSON) that zeroing was 8 % of the
CPU samples of an analysis (`perf`: `clear_page_erms` under `do_huge_pmd_anonymous_page`) and 1.2 %
with pages of 4 KiB; the command's system time fell ~2.1 -> ~1.4 s and its peak RSS ~895 -> ~860 MB
(8 interleaved pairs). A job of many small ranks is the other way round (fewer, larger faults for the
little memory it uses: ~0.1 s more CPU on the 64-rank generated job without them), so only a process
that reads a trace of at least `MIN_TEXT` of JSON, or an Nsight Systems SQLite export of at least
`MIN_EXPORT`, turns them off, for itself, from then on (`prctl(PR_SET_THP_DISABLE)`, Linux; it
applies to the mappings it already has too). A user's own `MIMALLOC_ALLOW_THP` (mimalloc's switch,
read as pyarrow loads) is left to decide.

nsys (h100_2gpu_train_a2a repeated, whole-process `analyze`, huge pages on / off interleaved, medians):
x100 (230 MiB) 10.45 -> 9.60 s wall, 14.5 -> 13.3 s CPU, peak 1,201 -> 1,152 MiB (4 pairs; `perf`:
`clear_page_erms` 10 % of the samples, 8 % under `folio_zero_user`); x60 (138 MiB) 6.07 -> 5.55 s;
x30 (69 MiB), x10 and x1: no difference beyond the noise (5 pairs each).

Kineto from 32 MiB of JSON (64 before; 2026-12-06, whole process, interleaved pairs, medians):
hta_df_index_resolver (51 MiB estimated) with them off against on, three runs of 20-24 pairs:
0.960, 0.994 and 0.991 of the wall, peaks 254 / 268, 255 / 264 and 247 / 261 MiB; h200_moe/overlap
(21 MiB): 1.012 of the wall off against on (20 pairs), no gain, so the threshold lies between.
"""
from __future__ import annotations

import os
import sys

MIN_TEXT = 32 << 20  # JSON text (estimated, kineto_helper._estimated_text) from which they are turned off
MIN_EXPORT = 100 << 20  # the size of an nsys SQLite export from which they are turned off
_PR_SET_THP_DISABLE = 41
_done: list[bool] = []  # once per process: [whether they were turned off]


def turn_off() -> bool:
    """Huge pages off for this process (tried once); whether they are off by this call or an earlier one."""
    if _done:
        return _done[0]
    ok = False
    if sys.platform.startswith("linux") and os.environ.get("MIMALLOC_ALLOW_THP") is None:
        try:
            import ctypes
            ul = ctypes.c_ulong
            ok = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_THP_DISABLE, ul(1), ul(0), ul(0), ul(0)) == 0
        except (OSError, AttributeError):  # no C library to call, or no prctl in it
            ok = False
    _done.append(ok)
    return ok
