"""Step declarations: each SQL step is one `traceview/sql/<name>.sql` file whose header says

    -- step: comm_ops
    -- scope: rank                      rank: reads one rank's rows only; job: across ranks
    -- requires: activity_class, activity_origin, gpu_activities, cpu_ranges
    -- params: comm_regex               (optional) DuckDB named parameters ($comm_regex) it uses
    -- produces: rank, id, op_key, kind, bytes
    -- disabled_optimizers: build_side_probe_side   (optional) DuckDB optimizers off while it runs
    -- threads: all                     (optional) may run on every core (see PARALLEL below)

(`produces` may continue on further `-- produces:` lines). Requirements are canonical tables
(traceview/schema.py) or other steps. A Python step (a computation SQL does not express well, such
as choosing the step windows or inferring layer ordinals) declares the same fields with
`@python_step` and returns an Arrow table (or a RecordBatchReader of its batches, read once: a
large result can then go into DuckDB a batch at a time). Steps are data: `build` (pipeline.py)
schedules them."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Callable

SCOPES = ("rank", "job")
_FIELDS = ("step", "scope", "requires", "params", "produces", "disabled_optimizers", "threads")
_HEADER = re.compile(r"^--\s*(step|scope|requires|params|produces|disabled_optimizers|threads)\s*:(.*)$")
# `threads: all` declares that the step's table, its rows and their order, is the same on any
# number of DuckDB threads: no floating-point sum, no aggregate or row number that picks among
# ties, and a final ORDER BY on a key (without one, threads interleave the rows of an input held in
# several Arrow chunks even where the plan keeps insertion order: seen on 8 ranks of DLRM).
# tests/test_step_threads.py builds every such step on one and on two threads and compares the
# tables row by row. Without it, a step runs on one thread; with it, on more only where one of its
# inputs is large (Session.worth_threads).
PARALLEL = "all"
_OPTIMIZER = re.compile(r"^[a-z_]+$")   # a DuckDB optimizer's name (the SET statement quotes it)


class StepError(Exception):
    """A step is declared wrongly, is unknown, or produced other columns than it declares."""


@dataclass(frozen=True)
class Step:
    name: str
    scope: str
    requires: tuple[str, ...]
    params: tuple[str, ...]
    produces: tuple[str, ...]
    sql: str | None = None                                  # SQL steps
    run: Callable | None = None                             # Python steps: run(session, params) -> pa.Table
    disabled_optimizers: tuple[str, ...] = ()               # SQL steps: DuckDB optimizers off while it runs
    parallel: bool = False                                  # SQL steps: `threads: all` (every core)

    @property
    def kind(self) -> str:
        return "sql" if self.sql is not None else "python"


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def parse_header(name: str, text: str) -> Step:
    """The Step a .sql file declares (its leading `-- field:` lines; other comments are free text)."""
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = _HEADER.match(line.strip())
        if m:
            fields.setdefault(m.group(1), []).append(m.group(2).strip())
    missing = [f for f in ("step", "scope", "requires", "produces") if f not in fields]
    if missing:
        raise StepError(f"sql/{name}.sql: header lacks {', '.join(missing)}")
    if fields["step"] != [name]:
        raise StepError(f"sql/{name}.sql: header names step {fields['step']!r}, not {name!r}")
    scope = fields["scope"][0]
    if scope not in SCOPES:
        raise StepError(f"sql/{name}.sql: scope {scope!r} is not one of {', '.join(SCOPES)}")
    if any(t != PARALLEL for t in fields.get("threads", [])):
        raise StepError(f"sql/{name}.sql: threads {fields['threads']!r}: the only value is {PARALLEL!r}")
    step = Step(name=name, scope=scope,
                requires=_names(",".join(fields["requires"])),
                params=_names(",".join(fields.get("params", []))),
                produces=_names(",".join(fields["produces"])), sql=text,
                disabled_optimizers=_names(",".join(fields.get("disabled_optimizers", []))),
                parallel="threads" in fields)
    bad = [o for o in step.disabled_optimizers if not _OPTIMIZER.match(o)]
    if bad:
        raise StepError(f"sql/{name}.sql: {', '.join(map(repr, bad))} is not an optimizer name")
    for p in step.params:
        if f"${p}" not in _body(text):
            raise StepError(f"sql/{name}.sql: declares parameter {p} but never uses ${p}")
    return step


def _body(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


_PYTHON: dict[str, Step] = {}


def python_step(name: str, *, scope: str, requires: tuple[str, ...], produces: tuple[str, ...],
                params: tuple[str, ...] = ()):
    """Declare a Python step: `fn(session, params) -> pa.Table` (params holds only the declared ones)."""
    if scope not in SCOPES:
        raise StepError(f"step {name}: scope {scope!r} is not one of {', '.join(SCOPES)}")

    def register(fn: Callable) -> Callable:
        if name in _PYTHON and _PYTHON[name].run is not fn:
            raise StepError(f"step {name} is declared twice")
        _PYTHON[name] = Step(name=name, scope=scope, requires=tuple(requires), params=tuple(params),
                             produces=tuple(produces), run=fn)
        return fn
    return register


def sql_files(sub: str | None = None) -> list:
    """The files of the package traceview.sql (or of its folder `sub`), each with `name` and
    `read_text`: read from its folder where it is one on disk (as pip installs it), else through
    importlib.resources (which, with its readers and zipfile, costs a run 3-5 ms of imports)."""
    from pathlib import Path

    from .. import sql
    where = [Path(p) for p in getattr(sql, "__path__", ())]
    if len(where) == 1 and where[0].is_dir():
        return list((where[0] / sub if sub else where[0]).iterdir())
    from importlib import resources
    folder = resources.files("traceview.sql")
    return list((folder.joinpath(sub) if sub else folder).iterdir())


@cache
def sql_steps() -> dict[str, Step]:
    """Every SQL step of the package, by name."""
    out = {}
    for f in sorted(sql_files(), key=lambda f: f.name):
        if f.name.endswith(".sql"):
            text = f.read_text(encoding="utf-8")
            if _HEADER.match(text.lstrip().splitlines()[0] if text.strip() else ""):
                out[f.name[:-4]] = parse_header(f.name[:-4], text)
    return out


def lookup(name: str) -> Step | None:
    return _PYTHON.get(name) or sql_steps().get(name)


def all_steps() -> dict[str, Step]:
    return {**sql_steps(), **_PYTHON}
