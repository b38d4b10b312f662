"""The report documents (`traceview.report/1`, `traceview.diff/1`): their typed sections
(types.py), the one set of options an analysis runs with (options.py), and `assemble()`, which
builds an analyze document from a loaded profile (assemble.py)."""
