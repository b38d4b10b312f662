"""A call run on a thread of its own while the caller goes on (the parsers' reads and nesting, the
critical path's walk: Python that waits on C which lets go of the GIL, or the other way round)."""
from __future__ import annotations

import threading
from typing import Any, Callable


class Later:
    """`fn(*args)` run on a thread of its own (or at once, when not `threaded`); `result()` waits for
    it and gives its value or raises its exception, `wait()` only waits."""

    def __init__(self, fn: Callable, *args, threaded: bool = True, name: str = "traceview-later"):
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        if not threaded:
            self._run(fn, args)
            return
        self.thread = threading.Thread(target=self._run, args=(fn, args), name=name, daemon=True)
        self.thread.start()

    def _run(self, fn: Callable, args: tuple) -> None:
        try:
            self.value = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
            self.error = e

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def result(self):
        self.wait()
        if self.error is not None:
            raise self.error
        value, self.value = self.value, None     # (the caller holds it now: not kept here too)
        return value
