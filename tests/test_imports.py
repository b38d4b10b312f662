"""The import contract: traceview's modules import one way (docs/ARCHITECTURE.md, "Layers").

Every module of the package (traceview/, parsers/ as traceview.parsers, reports/ as traceview.reports:
the package-dir map of pyproject.toml) belongs to one layer (LAYER_OF). A module may import modules of
its own layer and of the layers its layer MAY_IMPORT; that holds for module-level imports and for lazy
(function-level) ones alike: a lazy import is fine for start-up time when it points down, never as a
way up. No module imports itself back through others (circles are found over module-level and lazy
imports together; `if TYPE_CHECKING:` imports, which never run, are direction-checked only).

The imports are read with `ast` from the source, nothing is imported. KNOWN_VIOLATIONS lists what the
code does today against the contract, each with why; the test asserts the found set EQUALS it, so a
new violation fails and a removed one must be taken off the list.
"""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Layers, top (may import most) to bottom. A layer imports only itself and what it MAY_IMPORT.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "entry": frozenset({"ingest", "document", "render", "metrics", "engine", "tables", "base"}),
    "ingest": frozenset({"tables", "base"}),
    "render": frozenset({"document", "tables", "base"}),
    "document": frozenset({"metrics", "engine", "tables", "base"}),
    "metrics": frozenset({"engine", "tables", "base"}),
    "engine": frozenset({"tables", "base"}),
    "tables": frozenset({"base"}),
    "base": frozenset(),
}

# Module -> layer: the longest matching prefix wins ("a.b" matches a.b and a.b.*); "a.b_*" matches a
# module of that name prefix. A module that matches nothing fails test_every_module_has_a_layer.
LAYER_OF: dict[str, str] = {
    # entry: the commands, the Python API, and what only they use (option checks, file writing,
    # the Perfetto exporter, which drives an analyzed job's metric tables)
    "traceview": "entry",                     # the package root: __version__ and the lazy traceview.open facade
    "traceview.__main__": "entry",
    "traceview.launch": "entry",              # the command's entry point: a replay, else cli.main
    "traceview.replay": "entry",              # a repeated analyze written from the store before typer
    "traceview.cli": "entry",
    "traceview.cli_common": "entry",
    "traceview.cli_params": "entry",           # option values converted without typer's pydantic path
    "traceview.cli_values": "entry",           # what pydantic makes of a plain option value (no typer)
    "traceview.*_cli": "entry",               # diff_cli, export_cli, history_cli, ...
    "traceview.flops.cli": "entry",
    "traceview.api": "entry",
    "traceview.options": "entry",
    "traceview.output": "entry",
    "traceview.export_perfetto": "entry",
    "traceview.runs": "entry",                # the one place that opens inputs (traces, --config, --budget)
                                              # and hands loaded jobs to the document layer
    # ingest: what opens trace files and turns them into the canonical tables
    "traceview.parsers": "ingest",
    "traceview.load": "ingest",
    "traceview.trace_files": "ingest",        # which files of the paths given are traces (no table library)
    "traceview.store": "ingest",
    "traceview.executors": "ingest",          # where the per-rank parse runs (in process, a pool, Dask)
    "traceview.spill": "ingest",              # a parsed file's tables written for the place round, read back mapped
    "traceview.scratch_place": "ingest",      # where a mapped job's scratch folder lies (RAM or the store)
    "traceview.progress": "base",
    "traceview.code_stamp": "base",           # the identity of the code (store entries, kept documents)
    "traceview.heap": "base",                 # how glibc's malloc keeps the pages a run frees (command, workers)
    "traceview.run_options": "entry",         # the CLI options of store and executors
    "traceview.job_cache": "entry",           # the kept document of a job, around the analysis call
    "traceview.mapped": "entry",              # a job's per-rank work on the workers, the per-job work here
    # tables: the canonical tables (schema) and the loaded job holding them (Profile); ingest
    # produces them, the engine and the metrics read them
    "traceview.schema": "tables",
    "traceview.profile": "tables",
    # the report document's types (TypedDicts, importing nothing of traceview): the contract the
    # metrics write and the renderers read, as schema is for the canonical tables
    "traceview.document.types": "tables",
    # engine: one DuckDB session, the declared steps, build(), the SQL package, the analysis settings
    "traceview.engine": "engine",
    "traceview.sql": "engine",
    "traceview.config": "engine",
    # metrics: what the steps compute, read back as rows and numbers
    "traceview.analysis": "metrics",
    "traceview.flops": "metrics",
    "traceview.diff": "metrics",
    "traceview.budget": "metrics",
    "traceview.diff.words": "metrics",        # plain-text words shared by cause detection and its sentences
    # document: the one typed report document, assembled from the metrics (analyze, diff, history)
    "traceview.document": "document",         # document.types, document.options, document.assemble
    "traceview.analysis.analyze": "document",
    "traceview.diff.document": "document",
    "traceview.diff.__init__": "document",    # the diff package re-exports diff.document
    "traceview.history": "document",
    # render: text, Markdown, HTML, JSON (and the trace-event writer) from a document
    "traceview.reports": "render",
    "traceview.reports.fmt": "render",        # one ms, clip, table and headline for every renderer
    "traceview.trace_events": "render",
    # base: imports nothing of traceview; anything may import it
    "traceview.errors": "base",
    "traceview.markers": "base",              # training-side markers (NVTX / record_function): no traceview import
    "traceview.document.packed": "base",      # rows held packed (msgpack chunks): made by metrics, read by all
    "traceview.plain_data": "base",           # what a document holds (types, floats): JSON writer and store
    "traceview.forking": "base",              # whether this process may fork now (no thread but the main one)
    "traceview.later": "base",                # a call on a thread of its own: the parsers and the critical path
    "traceview.duck": "base",                 # the thread's DuckDB database: the session's and the nsys parser's
}

# Edge: (importer, imported, how): how is "module" (runs on import) or "lazy" (inside a function).
# A circle: ("circle", m1, m2, ...), its modules sorted.
KNOWN_VIOLATIONS: dict[tuple[str, ...], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    how: str            # "module", "lazy" or "typing" (under `if TYPE_CHECKING:`)
    line: int


def package_files() -> dict[str, Path]:
    """Module name -> source file, from pyproject's [tool.setuptools] package-dir map."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    pkg_dir = conf.get("package-dir", {})
    out: dict[str, Path] = {}
    for pkg in conf["packages"]:
        top = pkg.split(".")[0]
        if pkg in pkg_dir:
            folder = ROOT / pkg_dir[pkg]
        elif top in pkg_dir and pkg != top:
            folder = ROOT / pkg_dir[top] / Path(*pkg.split(".")[1:])
        else:
            folder = ROOT / Path(*pkg.split("."))
        for f in sorted(folder.glob("*.py")):
            name = pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"
            out[name] = f
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(module: str, path: Path, modules: set[str]) -> list[Import]:
    """The traceview modules `module` imports (each `from X import a, b` names X, or X.a where X.a is
    a module). Importing only `__version__` from the package root is a constant, not an edge."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def target(name: str) -> str | None:
        while name not in modules and "." in name:
            name = name.rpartition(".")[0]
        return name if name in modules else None

    def add(name: str | None, how: str, line: int) -> None:
        if name is not None and name != module:
            found.append(Import(module, name, how, line))

    def visit_one(child: ast.AST, how: str) -> None:
        if isinstance(child, ast.Import):
            for alias in child.names:
                if alias.name.split(".")[0] == "traceview":
                    add(target(alias.name), how, child.lineno)
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = package.split(".")
                base = base[:len(base) - (child.level - 1)]
                source = ".".join(base + ([child.module] if child.module else []))
            else:
                source = child.module or ""
            if source.split(".")[0] != "traceview":
                return
            names = [a.name for a in child.names]
            if source == "traceview" and names == ["__version__"]:
                return
            for n in names:
                sub = f"{source}.{n}"
                add(sub if sub in modules else target(source), how, child.lineno)
        inner = how
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and how == "module":
            inner = "lazy"
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.body:
                visit_one(sub, "typing")
            for sub in child.orelse:
                visit_one(sub, how)
            return
        for grandchild in ast.iter_child_nodes(child):
            visit_one(grandchild, inner)

    for top in tree.body:
        visit_one(top, "module")
    return found


def layer_of(module: str) -> str | None:
    best, layer = -1, None
    for pattern, lay in LAYER_OF.items():
        if pattern.endswith(".__init__"):
            hit = module == pattern[: -len(".__init__")]
            size = len(pattern)
        elif pattern.endswith("*"):
            hit = module.startswith(pattern[:-1]) and "." not in module[len(pattern) - 1:]
            size = len(pattern) - 1
        else:
            hit = module == pattern or module.startswith(pattern + ".")
            size = len(pattern)
        if hit and size > best:
            best, layer = size, lay
    return layer


def all_imports() -> list[Import]:
    files = package_files()
    modules = set(files)
    return [imp for m, f in files.items() for imp in imports_of(m, f, modules)]


def circles(edges: list[Import]) -> list[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.how != "typing":
            graph.setdefault(e.importer, set()).add(e.imported)
            graph.setdefault(e.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[tuple[str, ...]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return sorted(out)


def violations(edges: list[Import]) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for e in edges:
        a, b = layer_of(e.importer), layer_of(e.imported)
        if a is None or b is None or a == b or b in MAY_IMPORT[a]:
            continue
        found.add((e.importer, e.imported, "lazy" if e.how == "typing" else e.how))
    # an import that is both module-level and lazy somewhere counts once, as module-level
    found -= {(a, b, "lazy") for a, b, how in list(found) if how == "module"}
    found |= {("circle", *c) for c in circles(edges)}
    return found


# ---------------------------------------------------------------------------------------------------


def test_every_module_has_a_layer():
    missing = sorted(m for m in package_files() if layer_of(m) is None)
    assert not missing, f"modules with no layer in LAYER_OF (place them, and in docs/ARCHITECTURE.md): {missing}"
    assert set(MAY_IMPORT) == set(LAYER_OF.values())


def test_layers_form_no_circle():
    # the layer relation itself points one way: no layer may (transitively) import itself
    def reach(layer: str, seen: frozenset[str]) -> None:
        for lower in MAY_IMPORT[layer]:
            assert lower not in seen, f"layers import each other: {' -> '.join(seen)} -> {lower}"
            reach(lower, seen | {lower})
    for layer in MAY_IMPORT:
        reach(layer, frozenset({layer}))


def test_imports_keep_the_layers():
    found = violations(all_imports())
    new = sorted(found - set(KNOWN_VIOLATIONS))
    fixed = sorted(set(KNOWN_VIOLATIONS) - found)
    assert not new, "imports against the layers or circles (fix them; see docs/ARCHITECTURE.md):\n" + "\n".join(
        map(str, new))
    assert not fixed, "no longer violated: remove from KNOWN_VIOLATIONS:\n" + "\n".join(map(str, fixed))
    assert all(why for why in KNOWN_VIOLATIONS.values()), "each known violation says why"


# --- the checker itself, on hand-written sources ------------------------------------------------------


def _edges_of(tmp_path: Path, sources: dict[str, str]) -> list[Import]:
    files = {}
    for module, text in sources.items():
        f = tmp_path / (module.replace(".", "_") + ("__init__.py" if module.endswith("pkg") else ".py"))
        f.write_text(text)
        files[module] = f
    return [imp for m, f in files.items() for imp in imports_of(m, f, set(files))]


def test_reader_sees_every_kind_of_import(tmp_path):
    edges = _edges_of(tmp_path, {
        "traceview": "",
        "traceview.reports.pkg": "from . import text\n",
        "traceview.reports.text": (
            "from __future__ import annotations\nimport json\nfrom typing import TYPE_CHECKING\n"
            "from .. import __version__\n"                     # a constant of the root: no edge
            "from ..errors import TraceError\n"
            "import traceview.schema as s\n"
            "if TYPE_CHECKING:\n    from traceview.document import types\n"
            "def f():\n    from traceview.cli import app\n"
            "    class C:\n        def g(self):\n            from ..analysis import breakdown, layers\n"),
        "traceview.errors": "", "traceview.schema": "", "traceview.document": "", "traceview.document.types": "",
        "traceview.cli": "", "traceview.analysis": "", "traceview.analysis.breakdown": "",
        "traceview.analysis.layers": "",
    })
    got = {(e.importer, e.imported, e.how) for e in edges}
    assert got == {
        ("traceview.reports.pkg", "traceview.reports.text", "module"),
        ("traceview.reports.text", "traceview.errors", "module"),
        ("traceview.reports.text", "traceview.schema", "module"),
        ("traceview.reports.text", "traceview.document.types", "typing"),
        ("traceview.reports.text", "traceview.cli", "lazy"),
        ("traceview.reports.text", "traceview.analysis.breakdown", "lazy"),
        ("traceview.reports.text", "traceview.analysis.layers", "lazy"),
    }


def test_checker_flags_upward_imports_and_circles():
    e = [Import("traceview.reports.text", "traceview.cli", "lazy", 1),             # render -> entry
         Import("traceview.analysis.layers", "traceview.parsers.kineto", "module", 1),  # metrics -> ingest
         Import("traceview.analysis.layers", "traceview.engine.session", "module", 2),  # metrics -> engine: fine
         Import("traceview.cli", "traceview.reports", "lazy", 3),                  # entry -> render: fine
         Import("traceview.a", "traceview.b", "module", 1), Import("traceview.b", "traceview.c", "lazy", 1),
         Import("traceview.c", "traceview.a", "lazy", 1),                          # a circle through lazy imports
         Import("traceview.d", "traceview.a", "typing", 1), Import("traceview.a", "traceview.d", "module", 1)]
    assert violations(e) == {("traceview.reports.text", "traceview.cli", "lazy"),
                             ("traceview.analysis.layers", "traceview.parsers.kineto", "module"),
                             ("circle", "traceview.a", "traceview.b", "traceview.c")}
    assert layer_of("traceview.diff.document") == "document" and layer_of("traceview.diff.explain") == "metrics"
    assert layer_of("traceview.diff") == "document" and layer_of("traceview.history_cli") == "entry"
    assert layer_of("traceview.history") == "document" and layer_of("traceview.flops.cli") == "entry"
    assert layer_of("traceview.parsers.kineto") == "ingest" and layer_of("traceview.reports.text") == "render"
    assert layer_of("traceview.runs") == "entry" and layer_of("traceview.document.types") == "tables"
    assert layer_of("traceview.reports.fmt") == "render" and layer_of("traceview.diff.words") == "metrics"


# --- no vanished command ------------------------------------------------------------------------------------

COMMANDS = {"analyze", "diff", "mfu", "export", "history"}


def command_modules() -> list[str]:
    return sorted(m for m in package_files() if m == "traceview.cli" or m.endswith("_cli") or m.endswith(".cli"))


def test_every_command_module_imports_and_every_command_is_registered():
    mods = command_modules()
    assert {"traceview.cli", "traceview.diff_cli", "traceview.export_cli", "traceview.history_cli",
            "traceview.flops.cli"} <= set(mods)
    for m in mods:          # each on its own, in a fresh interpreter: its imports resolve
        r = subprocess.run([sys.executable, "-c", f"import {m}"], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, f"{m} does not import:\n{r.stderr}"
    from typer.main import get_command

    from traceview.cli import app
    assert set(get_command(app).commands) == COMMANDS      # type: ignore[attr-defined]
    registered = {c.callback for c in app.registered_commands}
    for m in mods:          # every *_command function of a command module is on the command line
        mod = importlib.import_module(m)
        for name in dir(mod):
            if name.endswith("_command") and callable(getattr(mod, name)):
                assert getattr(mod, name) in registered, f"{m}.{name} is not a registered command"


@pytest.mark.parametrize("module", ["traceview.diff_cli", "traceview.history_cli", "traceview.flops.cli"])
def test_a_broken_command_module_is_an_error_not_a_vanished_command(module):
    code = f"import sys; sys.modules[{module!r}] = None\nimport traceview.cli"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0 and f"import of {module} halted" in r.stderr   # ModuleNotFoundError, raised


# --- the checks stay on ----------------------------------------------------------------------------------


def test_lint_and_type_checks_stay_configured_and_run_in_ci():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert {"E", "W", "F", "I", "B", "UP"} <= set(conf["ruff"]["lint"]["select"])
    assert conf["ruff"]["line-length"] == 120
    assert set(conf["ruff"]["lint"].get("per-file-ignores", {})) <= {"fixtures/nsys_schema.py"}
    assert conf["mypy"]["check_untyped_defs"] is True
    assert "bash .ci/lint" in (ROOT / ".ci" / "run").read_text()
    lint = (ROOT / ".ci" / "lint").read_text()
    assert "ruff check ." in lint and "mypy --config-file" in lint
