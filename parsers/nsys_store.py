"""Which store the SQLite exports of Nsight Systems reports go to while a trace is parsed (none:
a temporary folder). Imports nothing heavy: the per-rank task of every executor sets it."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceview.store import Store

_STORE: ContextVar[Store | None] = ContextVar("nsys_export_store", default=None)


@contextmanager
def exports_in(store: Store | None) -> Iterator[None]:
    """Exports of reports made inside go to (and are reused from) `store`'s exports folder. The
    caller holds the store's lock on the report being read (`Store.lock`)."""
    token = _STORE.set(store)
    try:
        yield
    finally:
        _STORE.reset(token)


def current() -> Store | None:
    return _STORE.get()
