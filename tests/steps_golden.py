"""Perfetto-style golden tests of one step: input rows written in the test, the step, expected rows
computed by hand. `run_step` builds `name` in a session over a hand-made profile; the steps it
requires are built too unless the test gives their rows itself (`given`), which is how a test feeds a
step exactly the input it is about."""
from __future__ import annotations

import pyarrow as pa
from helpers import make_profile

from traceview.engine.pipeline import build


def session_for(profile=None, given: dict | None = None):
    from traceview.engine.session import Session
    s = Session(profile if profile is not None else make_profile())
    for name, rows in (given or {}).items():
        s.register(name, rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows))
    return s


def run_step(name: str, profile=None, given: dict | None = None, params: dict | None = None,
             order_by: str | None = None) -> list[dict]:
    """The rows `name` produces (ordered by `order_by`, default its declared key order as built)."""
    s = session_for(profile, given)
    build(s, [name], params or {})
    sql = f"SELECT * FROM {name}" + (f" ORDER BY {order_by}" if order_by else "")
    return s.rows(sql)
