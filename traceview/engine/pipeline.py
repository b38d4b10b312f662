"""`build(session, targets, params)`: materialize what the targets need, in dependency order, each
step once per session, and check that each produced exactly the columns it declares (an SQL step's
where `check_sql_columns`).

A step's result is a DuckDB table of the step's name in the session's schema (a Python step's
Arrow table is registered under that name instead, read in place). Building a step that the session already
holds is free when its parameters are the same and an error when they differ (a session answers one
question; ask another in another session); a later `build` may leave out the parameters of
steps already built. Scope is enforced: a per-rank step may require canonical
tables and per-rank steps only, and produces a `rank` column, so the scale work can run it on each
rank's data alone."""
from __future__ import annotations

import os
import threading
from typing import Callable, Iterable, Mapping, cast

import pyarrow as pa

from .. import schema
from ..later import Later
from .steps import Step, StepError, all_steps, lookup

# Steps whose tables only other steps read (no analysis, report or API user queries them): dropped
# once every step that requires them is built in the session, at the next `build` (a caller still
# reads what one `build` returned, as a mapped job's worker does).
TRANSIENT = frozenset({"name_tags", "range_context_raw", "layer_heads", "layer_blocks"})


def check_sql_columns() -> bool:
    """Whether an SQL step's table is checked, as it is built, for the columns its header declares.
    A Python step's always is (from its Arrow result, for nothing). An SQL step's columns are a
    property of its text, which the golden tests build for every step; checking them costs a bind
    of the new table (0.2-0.3 ms a step beside the tables a run makes: 9 ms of
    hta_df_index_resolver's run, 13 of overlap x5's, about 1 % of each). Checked where
    TRACEVIEW_CHECK_STEPS is set to anything but 0 or empty (the test suite sets it: tests/conftest.py)."""
    return os.environ.get("TRACEVIEW_CHECK_STEPS", "") not in ("", "0")


def plan(targets: Iterable[str], given: Iterable[str] = ()) -> list[Step]:
    """The steps needed for `targets`, dependencies first (a stable depth-first order). Names in
    `given` (tables a caller registered, e.g. a golden test's input rows) are taken as they are."""
    have = set(given) | set(schema.TABLES)
    order: list[Step] = []
    seen: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in seen or name in have:
            return
        if name in path:
            raise StepError("steps require each other in a circle: " + " -> ".join(path + (name,)))
        step = lookup(name)
        if step is None:
            raise StepError(f"unknown step or table {name!r}" + (f" (required by {path[-1]})" if path else ""))
        for req in step.requires:
            visit(req, path + (name,))
            dep = lookup(req)
            if step.scope == "rank" and dep is not None and dep.scope == "job":
                raise StepError(f"per-rank step {name} requires per-job step {req}")
        seen.add(name)
        order.append(step)
    for t in targets:
        visit(t, ())
    return order


def _remote(session):
    """The mapped job's builder when the session's per-rank steps run on workers (traceview/mapped.py
    attaches it to the profile; the engine only calls it), else None."""
    profile = getattr(session, "profile", None)
    return getattr(profile, "remote", None) if profile is not None else None


def prefetch(session, targets: Iterable[str], params: Mapping[str, object]) -> None:
    """Build at once the per-rank steps among `targets` and what they need whose parameters are all
    in `params`: on a mapped job one round of the workers instead of one per later `build`; a
    no-op otherwise (the steps are then built when asked for)."""
    remote = _remote(session)
    if remote is None:
        return
    targets = list(targets)
    ok: set[str] = set()
    for step in plan(targets, session.tables() - set(session.built)):
        if step.name in session.built:
            continue
        if step.scope == "rank" and all(p in params for p in step.params) \
                and all(r in ok or r in schema.TABLES or r in session.built for r in step.requires):
            ok.add(step.name)
    names = [t for t in targets if t in ok]
    if names:
        remote.build(session, names, dict(params))


def build(session, targets: Iterable[str], params: Mapping[str, object] | None = None) -> list[str]:
    """Materialize `targets` and what they need in `session`; returns the names built by this call.
    On a mapped job (`_remote`) the per-rank steps are built on the workers, in one round."""
    params = dict(params or {})
    free_transient(session)
    built_now = []
    steps = plan(targets, session.tables() - set(session.built))
    remote = _remote(session)
    if remote is not None:
        todo = [s.name for s in steps if s.scope == "rank" and s.name not in session.built]
        if todo:
            built_now += remote.build(session, todo, params)
    for step in steps:
        done = session.built.get(step.name)
        if done is not None:   # built before: the parameters given now (if any) must be the same
            asked = {p: params[p] for p in step.params if p in params}
            if any(done[p] != v for p, v in asked.items()):
                raise StepError(f"step {step.name} was built in this session with {done}, now asked with {asked}")
            continue
        gone = getattr(session, "let_go", None)
        if gone and not gone.isdisjoint(step.requires):
            raise StepError(f"step {step.name} reads {', '.join(sorted(gone.intersection(step.requires)))}, "
                            "which this session let go of")
        own = {}
        for p in step.params:
            if p not in params:
                raise StepError(f"step {step.name} needs parameter {p!r}")
            own[p] = params[p]
        begun = _begun(session, step, own)   # made on a thread (start, start_sql), else None
        if step.sql is not None:
            if begun is not None:
                session.adopt_made(step.name, begun)
            else:
                parallel = step.parallel and session.worth_threads(step.requires)
                session.materialize_sql(step.name, step.sql, own, session.optimizers_off(step), parallel)
        elif step.run is not None:
            result = begun if begun is not None else step.run(session, own)
            got = list(result.schema.names)
            session.materialize_arrow(step.name, result)
            pa.default_memory_pool().release_unused()    # what the step freed (its arrays on the way)
        else:
            raise StepError(f"step {step.name} has neither SQL nor a Python function")
        if step.sql is not None:
            got = session.columns(step.name) if check_sql_columns() else list(step.produces)
        if tuple(got) != step.produces:
            raise StepError(f"step {step.name} produced columns {got}, declares {list(step.produces)}")
        if step.scope == "rank" and "rank" not in got:
            raise StepError(f"per-rank step {step.name} produces no rank column")
        session.built[step.name] = own
        session.build_counts[step.name] = session.build_counts.get(step.name, 0) + 1
        built_now.append(step.name)
    return built_now


def start(session, name: str, params: Mapping[str, object], chain: bool = False) -> bool:
    """Begin Python step `name` on a thread of its own, its requirements built here first: it reads
    them through a reader of the session (another connection), and `build` takes its table when the
    step is asked for with the same parameters (else builds it anew). With `chain`, requirements
    that are SQL steps a reader can make (`_chainable`: all of them, or none) are made on that
    thread first instead, and `build` takes them as it takes the step. Where it may: a session with
    readers, the step not built or begun already, not on a mapped job's workers. Returns whether
    it began."""
    step = lookup(name)
    if step is None or step.run is None:
        raise StepError(f"{name} is not a Python step")
    started = getattr(session, "started", None)
    if started is None or _remote(session) is not None or name in session.built or name in started:
        return False
    needs = [r for r in step.requires if r not in schema.TABLES]
    ahead = _chainable(session, plan(needs, session.tables() - set(session.built)), params) if chain else None
    if ahead is None:
        build(session, needs, params)
        ahead = []
    _begin_chain(session, ahead + [(step, {p: params[p] for p in step.params})], f"traceview-step-{name}")
    return True


def _readable(session, step: Step, params: Mapping[str, object], ahead: set[str], python: bool = False) -> bool:
    """Whether a reader of `session` can make SQL step `step` (or with `python` a Python step too)
    after the steps `ahead` (start_sql, start's chain, start_steps): neither built nor begun,
    setting no optimizers of the database (which the session's own queries would run under), its
    parameters given, its requirements canonical, materialized here or in `ahead`."""
    return (step.sql is not None or (python and step.run is not None)) \
        and step.name not in session.built and step.name not in session.started \
        and not session.optimizers_off(step) and all(p in params for p in step.params) \
        and all(r in schema.TABLES or r in ahead or (r in session.built and session.materialized(r))
                for r in step.requires)


def _chainable(session, steps: list[Step], params: Mapping[str, object]) -> list[tuple[Step, dict]] | None:
    """`steps` (in plan order) not built yet with their parameters, where a reader can make each
    after the ones before it (`_readable`); None where one of them cannot be made so."""
    todo: list[tuple[Step, dict]] = []
    ahead: set[str] = set()
    for step in steps:
        if step.name in session.built:
            continue
        if not _readable(session, step, params, ahead):
            return None
        todo.append((step, {p: params[p] for p in step.params}))
        ahead.add(step.name)
    return todo


def _begin_chain(session, todo: list[tuple[Step, dict]], name: str) -> None:
    """`todo` (steps and their parameters) made one after another on a thread named `name`, each
    noted in the session's `started` for `build` to take."""
    chain = _Chain(session.reader(), todo, name=name)
    for step, own in todo:
        session.started[step.name] = (own, chain)


def start_sql(session, names: Iterable[str], params: Mapping[str, object],
              name: str = "traceview-steps") -> list[str]:
    """Begin SQL steps `names` on one thread of their own (named `name`), one after another in that
    order, each table made by a reader of the session (another connection) in the session's schema,
    while this thread goes on; `build` takes each when it is asked for with the same parameters
    (waiting for it). Begun are the steps whose requirements are built here already or begun before
    them in `names`, that are neither built nor begun, and that set no optimizers of the database
    (which the session's own queries would run under); none on a mapped job's workers. Returns the
    names begun (in order)."""
    return _begin_steps(session, names, params, name, mixed=False)


def start_steps(session, names: Iterable[str], params: Mapping[str, object], name: str) -> list[str]:
    """Begin steps `names`, SQL and Python, one after another in that order on one thread named
    `name`, through a reader of the session: a SQL step's table made in the session's schema, a
    Python step's table registered on the reader for the steps after it that read it. `build` takes
    each when it is asked for with the same parameters (waiting for it). Begun are the steps up to
    the first that a reader cannot make after those before it (`_readable`); none on a mapped job's
    workers. Returns the names begun (in order)."""
    return _begin_steps(session, names, params, name, mixed=True)


def _begin_steps(session, names: Iterable[str], params: Mapping[str, object], name: str, mixed: bool) -> list[str]:
    """start_sql (`mixed` False: SQL steps only, those a reader cannot make passed over) and
    start_steps (`mixed`: Python steps too, the first a reader cannot make ending the chain)."""
    started = getattr(session, "started", None)
    if started is None or _remote(session) is not None:
        return []
    todo: list[tuple[Step, dict]] = []
    ahead: set[str] = set()
    for n in names:
        step = lookup(n)
        if step is None or (not mixed and step.sql is None):
            raise StepError(f"no step {n}" if step is None and mixed else f"{n} is not a SQL step")
        if not _readable(session, step, params, ahead, python=mixed):
            if mixed:
                break
            continue
        todo.append((step, {p: params[p] for p in step.params}))
        ahead.add(n)
    if todo:
        _begin_chain(session, todo, name)
    return [step.name for step, _ in todo]


class _Chain:
    """Steps built one after another on a thread through a reader of the session (`start`: one
    Python step; `start_sql`: SQL steps, each table made in the session's schema). `result(name)`
    waits for that step and gives its Arrow table (a Python step) or row count (a SQL step), or
    raises its error; None where it was not made (a step before it failed: `build` then builds
    both again, and raises that error in its turn)."""

    def __init__(self, reader, steps: list[tuple[Step, dict]], name: str):
        self._done = {step.name: threading.Event() for step, _ in steps}
        self._made: dict[str, object] = {}
        self._errors: dict[str, BaseException] = {}
        self._later = Later(self._run, reader, steps, name=name)

    def _run(self, reader, steps: list[tuple[Step, dict]]) -> None:
        try:
            for step, own in steps:
                try:
                    made = self._made[step.name] = reader.create(step.name, step.sql, own) \
                        if step.sql is not None else cast(Callable, step.run)(reader, own)
                    if isinstance(made, pa.Table):   # (a Python step's table: the steps after it read it)
                        reader.con.register(step.name, made)
                except BaseException as e:  # noqa: BLE001 - raised by build, in its turn
                    self._errors[step.name] = e
                    return
                finally:
                    self._done[step.name].set()
        finally:
            for done in self._done.values():
                done.set()
            reader.close()

    def result(self, name: str):
        self._done[name].wait()
        error = self._errors.pop(name, None)
        if error is not None:
            raise error
        return self._made.pop(name, None)    # (the caller holds it now: not kept here too)

    def wait(self) -> None:
        self._later.wait()


def _begun(session, step: Step, params: dict):
    """What `start` or `start_sql` made of `step` with `params` (waited for): a Python step's table,
    a SQL step's row count (its table made in the session's schema); None where it was not begun,
    or with other parameters (waited for, then made anew here), or not made."""
    started = getattr(session, "started", None)
    begun = started.pop(step.name, None) if started else None
    if begun is None:
        return None
    if begun[0] != params:
        begun[1].wait()
        return None
    return begun[1].result(step.name)


def free_transient(session) -> list[str]:
    """Drop the TRANSIENT tables materialized in `session` whose consumers (the steps that require
    them) are all built; returns their names."""
    drop = getattr(session, "drop", None)
    if drop is None:
        return []
    done = [name for name in sorted(TRANSIENT) if session.materialized(name)
            and all(s.name in session.built for s in all_steps().values() if name in s.requires)]
    for name in done:
        drop(name)
    return done
