"""The engine: one DuckDB session per analysis, the named steps (traceview/sql/*.sql and the few
Python steps metrics register), and `build`, which materializes what its targets need, in
dependency order, each step once per session. See docs/ARCHITECTURE.md."""
