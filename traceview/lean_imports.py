"""pyarrow and DuckDB imported without what they import only for what the command line never does:
a fixed cost of every run, which a small trace pays in full (docs/SPEED.md, "The fixed cost").
Only in the command line's own process (cli_common.skip_pyarrow_pandas_probe,
runs._begin_database): a library user's sys.modules is left alone.

- pyarrow imports cloudpickle where it is installed (Dask needs it), as the pickler of its Python
  extension types; the standard pickle otherwise. cloudpickle (with `logging`, `dataclasses`'
  `inspect` and more) is marked absent while pyarrow is imported, and the mark taken away after:
  Dask, imported later by a mapped job, imports it as usual.
- pyarrow.compute writes a docstring for each of its ~290 functions as it is imported, parsing the
  numpydoc text of their options' classes (`pyarrow.vendored.docscrape`, which imports `pydoc`).
  The command line never shows those docstrings: while pyarrow.compute is imported, `docscrape` is
  a stand-in whose parser finds no parameters (the functions' docstrings then leave the options'
  parameters out), taken out of sys.modules after.
- DuckDB looks up its own version at import through `importlib.metadata`, which imports `email`,
  `zipfile`, `csv` and scans the entries of sys.path. It is given the version read from its own
  `METADATA` file beside the package instead, through a stand-in `importlib.metadata` that answers
  `version` for DuckDB and hands anything else to the real module (imported then). The stand-in is
  taken out of sys.modules once DuckDB is imported. Where the package's METADATA is not found (more
  than one, or none), DuckDB is imported as it is.
- DuckDB 2 writes its relational API (`con.sql(...)`, `duckdb.sql`, relations) in Python, in
  `duckdb._relation`: 4,600 lines and 36 dataclasses, imported by `duckdb/__init__` whether or
  not a relation is ever made. A run of one trace makes none: its queries run through
  `con.execute` and DuckDB's own `_seam.submit` (duck.arrow_table, duck.query_reader). While
  DuckDB is imported a stand-in (`_LazyRelation`) stands in that module's place with what the
  package takes from it as it loads: the names of the connection's methods it adds (read off
  the module's source), forwarders for them and for its module-level functions, and a
  placeholder for the relation class. The first use of any of them imports the real module,
  which then takes every place the stand-in held (see `_LazyRelation.load`).

In a fresh interpreter (5 runs each, 2026-12-06): pyarrow and pyarrow.compute 75-86 ms -> 57-72 ms,
DuckDB 54-58 -> 46-62 ms. The relational API left out (2026-12-07, 4 runs each after pyarrow):
DuckDB 69-84 -> 46-53 ms.
"""
from __future__ import annotations

import re
import sys
import threading
import types
from pathlib import Path
from typing import Any


def pyarrow() -> None:
    """pyarrow imported with cloudpickle marked absent (it falls back to the standard pickle), then
    pyarrow.compute without its options' docstrings parsed."""
    if "pyarrow" not in sys.modules and "cloudpickle" not in sys.modules:
        sys.modules["cloudpickle"] = None  # type: ignore[assignment]
        try:
            import pyarrow  # noqa: F401
        finally:
            if sys.modules.get("cloudpickle", 0) is None:
                del sys.modules["cloudpickle"]
    if "pyarrow.compute" in sys.modules or _DOCSCRAPE in sys.modules:
        return
    stand_in = types.ModuleType(_DOCSCRAPE)
    stand_in.NumpyDocString = _NoDoc  # type: ignore[attr-defined]
    sys.modules[_DOCSCRAPE] = stand_in
    try:
        import pyarrow.compute  # noqa: F401
    finally:
        if sys.modules.get(_DOCSCRAPE) is stand_in:
            del sys.modules[_DOCSCRAPE]


_DOCSCRAPE = "pyarrow.vendored.docscrape"


class _NoDoc:
    """`docscrape.NumpyDocString` while pyarrow.compute is imported: a docstring of no sections."""

    def __init__(self, *args, **kwargs):
        pass

    def __getitem__(self, key):
        return []


def _package_dir(package: str) -> Path | None:
    """The folder of an installed package (not imported), or None."""
    import importlib.util
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _metadata_version(package: str) -> str | None:
    """The Version field of the one `<package>-*.dist-info/METADATA` beside the installed package,
    or None."""
    where = _package_dir(package)
    if where is None:
        return None
    site = where.parent
    found = list(site.glob(f"{package}-*.dist-info/METADATA"))
    if len(found) != 1:
        return None
    with open(found[0], encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip() or None
            if not line.strip():
                break             # the headers end at the first empty line
    return None


class _StandIn(types.ModuleType):
    """`importlib.metadata` while DuckDB is imported: `version` of DuckDB answered from its METADATA,
    anything else from the real module."""

    def __init__(self, known: dict[str, str]):
        super().__init__("importlib.metadata")
        self._known = known
        self._module: types.ModuleType | None = None

    def version(self, name: str) -> str:
        if name in self._known:
            return self._known[name]
        return self._real().version(name)

    def _real(self) -> types.ModuleType:
        if self._module is None:      # imported once, this stand-in put back in its place after
            del sys.modules["importlib.metadata"]
            try:
                import importlib.metadata as real
            finally:
                sys.modules["importlib.metadata"] = self
            self._module = real
        return self._module

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._real(), name)


def duckdb() -> None:
    """DuckDB imported with its version given from its METADATA file and without its relational
    API until it is used (see the module's text)."""
    if "duckdb" in sys.modules or "importlib.metadata" in sys.modules:
        return
    version = _metadata_version("duckdb")
    if version is None:
        return
    import importlib
    had = getattr(importlib, "metadata", None)
    sys.modules["importlib.metadata"] = _StandIn({"duckdb": version})
    lazy = _LazyRelation.made(_package_dir("duckdb"))
    if lazy is not None and _RELATION not in sys.modules:
        sys.modules[_RELATION] = lazy
    try:
        try:
            import duckdb
        except Exception:  # noqa: BLE001 - not the package this was written for: imported as it is
            if sys.modules.get(_RELATION) is not lazy:
                raise
            del sys.modules[_RELATION]
            lazy = None
            import duckdb
        if lazy is not None and sys.modules.get(_RELATION) is lazy:
            duckdb._relation = lazy     # (the import system leaves a submodule found in sys.modules unset)
    finally:
        if isinstance(sys.modules.get("importlib.metadata"), _StandIn):
            del sys.modules["importlib.metadata"]
        if had is None and isinstance(getattr(importlib, "metadata", None), _StandIn):
            del importlib.metadata


_RELATION = "duckdb._relation"
# the table of connection methods in DuckDB 2's duckdb/_relation.py: `CONNECTION_METHODS: ... = {`,
# one `"name": function,` a line, and `}` at the start of a line
_METHODS_TABLE = re.compile(r"^CONNECTION_METHODS\b[^\n=]*=\s*\{\n(.*?)^\}", re.M | re.S)
_METHOD_ENTRY = re.compile(r'^[ \t]+"(\w+)":[ \t]*\w+,[ \t]*$', re.M)


def relation_methods(package_dir: Path | None) -> tuple[str, ...] | None:
    """The names of the methods DuckDB's relational module adds to its connection class as the
    package is imported (its CONNECTION_METHODS), read off the module's source beside the
    package; None where there is no such module, or a table that is not read whole so."""
    if package_dir is None:
        return None
    try:
        text = (package_dir / "_relation.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    m = _METHODS_TABLE.search(text)
    if m is None:
        return None
    body = m.group(1)
    names = tuple(_METHOD_ENTRY.findall(body))
    lines = [ln for ln in body.splitlines() if ln.strip()]
    return names if names and len(names) == len(lines) else None


class _LazyRelation(types.ModuleType):
    """`duckdb._relation` while the command has not used DuckDB's relational API: what
    `duckdb/__init__` takes from it as the package is imported, without the module. The
    connection's methods (`CONNECTION_METHODS`) and the module's functions (`module_*`) are
    forwarders that import the real module on their first call (`load`) and call its own;
    `DuckDBPyRelation` is a class of no instances until then. Any other name asked of it imports
    the real module and answers from it."""

    def __init__(self, methods: tuple[str, ...]):
        super().__init__(_RELATION)
        self._lock = threading.RLock()
        self._real: types.ModuleType | None = None
        self.DuckDBPyRelation = type("DuckDBPyRelation", (), {"__module__": _RELATION})
        self.CONNECTION_METHODS = {name: _method_forwarder(self, name) for name in methods}

    @classmethod
    def made(cls, package_dir: Path | None) -> _LazyRelation | None:
        """A stand-in for the DuckDB installed in `package_dir`; None where it has no such module."""
        methods = relation_methods(package_dir)
        return cls(methods) if methods is not None else None

    def load(self) -> types.ModuleType:
        """The real module, imported on the first call; it then takes the stand-in's places: in
        sys.modules, as `duckdb._relation` and `duckdb.DuckDBPyRelation`, as the package's functions
        the stand-in gave, and with its methods on the connection class, as a plain import leaves
        them."""
        with self._lock:
            if self._real is None:
                if sys.modules.get(_RELATION) is self:
                    del sys.modules[_RELATION]
                import importlib
                real = importlib.import_module(_RELATION)
                package: Any = sys.modules["duckdb"]
                package._relation = real
                package.DuckDBPyRelation = real.DuckDBPyRelation
                for name, value in list(vars(package).items()):
                    forwarded = getattr(value, "_forwards_to", None) if isinstance(value, types.FunctionType) else None
                    if isinstance(forwarded, str) and hasattr(real, forwarded):
                        setattr(package, name, getattr(real, forwarded))
                for name, method in real.CONNECTION_METHODS.items():
                    setattr(package.DuckDBPyConnection, name, method)
                self._real = real
            return self._real

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name.startswith("module_"):
            return _function_forwarder(self, name)
        return getattr(self.load(), name)


def _method_forwarder(lazy: _LazyRelation, name: str):
    def method(con, *args, **kwargs):
        lazy.load()                      # the real method now on the class
        return getattr(con, name)(*args, **kwargs)
    method.__name__ = method.__qualname__ = name
    return method


def _function_forwarder(lazy: _LazyRelation, name: str):
    def function(*args, **kwargs):
        return getattr(lazy.load(), name)(*args, **kwargs)
    function.__name__ = function.__qualname__ = name
    function._forwards_to = name  # type: ignore[attr-defined]
    return function
