"""One updating progress line on stderr (ranks done / total, MB/s, time left): on a terminal only,
for jobs of several traces, never on a pipe or in CI logs unless forced (`--progress`)."""
from __future__ import annotations

import os
import sys
import time


def wanted(stream, force: bool) -> bool:
    if force:
        return True
    if os.environ.get("CI"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    def __init__(self, total: int, total_bytes: int, force: bool = False, stream=None, every_s: float = 0.2):
        self.stream = stream if stream is not None else sys.stderr
        # a job of one trace has nothing to count: the line is for jobs of several ranks (or forced)
        self.on = wanted(self.stream, force) and (total > 1 or force)
        self.total, self.total_bytes = total, total_bytes
        self.done = self.bytes = 0
        self.t0 = time.perf_counter()
        self.every_s, self._last = every_s, 0.0
        self._shown = False
        self._tty = wanted(self.stream, False)

    def line(self) -> str:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        mbs = self.bytes / dt / 1e6
        left = ""
        if 0 < self.bytes < self.total_bytes:
            secs = (self.total_bytes - self.bytes) / (self.bytes / dt)
            left = f", {secs:.0f} s left"
        return f"traceview: ranks {self.done}/{self.total}, {mbs:.1f} MB/s{left}"

    def advance(self, nbytes: int) -> None:
        self.done += 1
        self.bytes += nbytes
        if not self.on:
            return
        now = time.perf_counter()
        if now - self._last >= self.every_s or self.done == self.total:
            self._last = now
            self._write(self.line())

    def _write(self, text: str) -> None:
        if self._tty:
            self.stream.write("\r\x1b[2K" + text)
        else:                                   # forced on a pipe: whole lines, no control codes
            self.stream.write(text + "\n")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self.on and self._shown and self._tty:
            self.stream.write("\n")
            self.stream.flush()
        self._shown = False
