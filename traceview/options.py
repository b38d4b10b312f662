"""Checks of command-line option values, made before any work: finite numbers only (NaN and the
infinities are refused: `--fail-if-slower nan` would turn a CI gate off), integers within range.
Each failure is a UsageError naming the option."""
from __future__ import annotations

import math

from .errors import UsageError

MAX_COUNT = 1_000_000            # rows in a top-N list, explanation items
MAX_TOKENS = 2 ** 53             # tokens per step: exact as a float, far above any real batch


def finite(value: float | None, flag: str, *, positive: bool = False, at_least: float | None = None) -> None:
    if value is None:
        return
    if not math.isfinite(value):
        raise UsageError(None, f"{flag} must be a finite number (got {value})")
    if positive and not value > 0:
        raise UsageError(None, f"{flag} must be positive")
    if at_least is not None and value < at_least:
        raise UsageError(None, f"{flag} must be at least {at_least:g}" if at_least else f"{flag} must not be negative")


def count(value: int | None, flag: str, lo: int, hi: int, too_small: str | None = None) -> None:
    if value is None:
        return
    if value < lo:
        raise UsageError(None, too_small or f"{flag} must be at least {lo}")
    if value > hi:
        raise UsageError(None, f"{flag} must be at most {hi} (got {value})")
