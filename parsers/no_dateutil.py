"""Where python-dateutil is not installed, mark it absent in sys.modules (one function for every
process that converts Python values with pyarrow: the command line's own, the pool's workers and the
Kineto parse helper's interpreter)."""
from __future__ import annotations


def no_dateutil_search() -> None:
    """pyarrow looks for dateutil on every conversion of a Python scalar (a compute call given an
    int), and a module that is not installed is searched for along the whole sys.path each time:
    19-29 searches a rank file, some 15-30 % of a small Kineto parse, 0.3 s of CPU on a 2.5M-event
    trace. Marked absent, the import fails the same way (ModuleNotFoundError), at once. The
    submodules pyarrow imports are marked too: a submodule of a module marked absent still takes
    the import lock, ~15 µs a conversion."""
    import importlib.util
    import sys
    if "dateutil" not in sys.modules and importlib.util.find_spec("dateutil") is None:
        for name in ("dateutil", "dateutil.relativedelta", "dateutil.tz"):
            sys.modules[name] = None  # type: ignore[assignment]
