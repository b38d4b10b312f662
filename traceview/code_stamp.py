"""The identity of the code that computes: the stat (path, size, mtime) of every source file of the
package (.py, .sql, .json, .toml). The store's entries and the kept documents of jobs carry it, so
that a checkout whose code changed under the same version number never serves an answer the old
code gave (an installed release never changes its files)."""
from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

_PACKAGES = ("traceview", "traceview.parsers", "traceview.reports")
_SUFFIXES = (".py", ".sql", ".json", ".toml")


@cache
def code_stamp() -> str:
    import importlib.util
    h = hashlib.blake2b(digest_size=10)
    for name in _PACKAGES:
        spec = importlib.util.find_spec(name)
        for root in (spec.submodule_search_locations or []) if spec is not None else []:
            base = Path(root)
            for f in sorted(base.rglob("*")):
                if f.suffix in _SUFFIXES and "__pycache__" not in f.parts:
                    st = f.stat()
                    h.update(f"{name}/{f.relative_to(base)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()
