"""`traceview diff`: explain the change in step time between two runs.

families.py (kernel-family names), decompose.py (one side; the exact per-unit decomposition),
explain.py + texts.py (causes, ranked, in words), document.py (the `traceview.diff/1` document).
"""
from .document import DiffOptions, diff_sides  # noqa: F401
