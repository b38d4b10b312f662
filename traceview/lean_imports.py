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

In a fresh interpreter (5 runs each, 2026-12-06): pyarrow and pyarrow.compute 75-86 ms -> 57-72 ms,
DuckDB 54-58 -> 46-62 ms.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path


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


def _metadata_version(package: str) -> str | None:
    """The Version field of the one `<package>-*.dist-info/METADATA` beside the installed package,
    or None."""
    import importlib.util
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    site = Path(next(iter(spec.submodule_search_locations))).parent
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
    """DuckDB imported with its version given from its METADATA file (see the module's text)."""
    if "duckdb" in sys.modules or "importlib.metadata" in sys.modules:
        return
    version = _metadata_version("duckdb")
    if version is None:
        return
    import importlib
    had = getattr(importlib, "metadata", None)
    sys.modules["importlib.metadata"] = _StandIn({"duckdb": version})
    try:
        import duckdb  # noqa: F401
    finally:
        if isinstance(sys.modules.get("importlib.metadata"), _StandIn):
            del sys.modules["importlib.metadata"]
        if had is None and isinstance(getattr(importlib, "metadata", None), _StandIn):
            del importlib.metadata
