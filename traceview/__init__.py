"""traceview: performance-trace analysis for Mixture-of-Experts training on GPUs.

`traceview.open(paths, **options)` analyzes a job and returns a `traceview.Job` (see docs/API.md);
input problems raise `traceview.TraceError`. The API module is imported on first use, so importing
traceview (and starting the command line) stays light.
"""
from .errors import TraceError

__version__ = "0.1.0"
__all__ = ["open", "Job", "TraceError", "__version__"]


def __getattr__(name: str):
    if name in ("open", "Job"):
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'traceview' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"open", "Job"})
