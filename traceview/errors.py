"""User-facing input errors: one line naming the file and the problem, exit code 2."""
from __future__ import annotations


class TraceError(Exception):
    """Bad or unusable input. `str()` is the one-line message shown to the user."""

    def __init__(self, path, problem: str):
        self.path = str(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


class UsageError(TraceError):
    """Bad command-line usage or configuration (also exit code 2)."""
