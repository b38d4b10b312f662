"""The lock of a database's settings (Session.settings_lock): held alone by whoever changes a
setting of the whole database (a step's threads or optimizers, a checkpoint), held shared by the
queries of readers, any number of them at once, which must not run under another query's settings
but need not wait for each other (DuckDB runs two connections' queries side by side, each on the
thread that asked for it where the database has one thread)."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class SettingsLock:
    """`acquire`/`release` (or `with lock:`): the lock alone, once no query holds it shared;
    `shared()`: held beside other shared holders, never while it is held alone. A holder waiting
    to hold it alone goes before shared holders that come after it (no reader can keep it waiting
    forever). Neither is re-entrant: a thread that holds it does not ask for it again."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0        # queries holding it now
        self._alone = False     # a holder of the lock alone
        self._waiting = 0       # holders waiting to hold it alone

    def acquire(self, blocking: bool = True) -> bool:
        with self._cond:
            if self._alone or self._shared:
                if not blocking:
                    return False
                self._waiting += 1
                try:
                    while self._alone or self._shared:
                        self._cond.wait()
                finally:
                    self._waiting -= 1
            self._alone = True
            return True

    def release(self) -> None:
        with self._cond:
            if not self._alone:
                raise RuntimeError("release of a settings lock not held alone")
            self._alone = False
            self._cond.notify_all()

    def __enter__(self) -> SettingsLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def locked(self) -> bool:
        """Whether it is held, alone or shared."""
        with self._cond:
            return self._alone or self._shared > 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._alone or self._waiting:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                if not self._shared:
                    self._cond.notify_all()
