"""`traceview diff`: explain the change in step time between two runs.

families.py (kernel-family names), decompose.py (one side; the exact per-unit decomposition),
explain.py + texts.py (causes, ranked, in words), document.py (the `traceview.diff/1` document).
"""
from __future__ import annotations

__all__ = ["DiffOptions", "diff_sides"]


def __getattr__(name: str):
    """DiffOptions and diff_sides, imported when asked for (PEP 562): `analyze` reads
    families.py (the FLOPs steps name kernel families) and needs none of the diff document."""
    if name in __all__:
        from . import document
        return getattr(document, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
