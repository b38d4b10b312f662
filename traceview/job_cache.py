"""The finished document of a whole job, kept in the store: a second `analyze` of the same traces
with the same options renders it again instead of analyzing. The key is the traceview version, the
options, the paths as given and the content hash of every trace (from the store's manifests: a trace
the store does not hold current means no key), and the content of every file the options name."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from .store import STORE_SCHEMA_VERSION, Store


def key(paths: list[str], fields: dict, store: Store) -> str | None:
    """The identity of one analysis: None when some trace is not current in the store."""
    from . import __version__
    from .load import expand
    from .parsers import bounded_read
    try:
        files = expand(list[str | Path](paths))
    except Exception:
        return None
    hashes = []
    for f in files:
        h = store.source_hash(f)
        if h is None:
            return None
        hashes.append(h)
    named = {}
    for name, value in fields.items():
        if isinstance(value, Path):
            try:
                named[name] = hashlib.sha256(value.read_bytes()).hexdigest()
            except OSError:
                return None
    ident = {"traceview": __version__, "store": STORE_SCHEMA_VERSION, "paths": [str(f) for f in files],
             "hashes": hashes, "options": {k: repr(v) for k, v in sorted(fields.items())}, "named_files": named,
             "max_input_size": bounded_read.max_input_size()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:40]


def analyze(paths: list[str], fields: dict, run: Callable[[list[str]], dict]) -> dict:
    """run(paths) -> document (the analysis with the options `fields`), or the stored document of
    this job when there is one."""
    from .executors import current
    state = current()
    if state is None or state.settings.store is None:
        return run(paths)
    root = state.settings.store
    store = Store(root)
    k = key(paths, fields, store)
    if k is not None:
        doc = store.get_document(k)
        if doc is not None:
            state.stats = {**state.stats, "document_from_store": True}
            return doc
    doc = run(paths)
    if state.skipped:
        return doc
    k = key(paths, fields, store)          # the traces are in the store now
    if k is not None:
        store.put_document(k, doc)
    return doc
