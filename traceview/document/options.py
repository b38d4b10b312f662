"""The options one analysis runs with: the same type for `analyze`, the API and each side of `diff`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config import check_pattern_options
from ..errors import UsageError


@dataclass
class AnalyzeOptions:
    step_regex: str | None = None
    comm_regex: list[str] = field(default_factory=list)
    config: Path | None = None
    top: int = 10
    model: str | None = None
    model_config: Path | None = None
    tokens_per_step: int | None = None
    peak_tflops: float | None = None
    dtype: str | None = None
    budget: Path | None = None
    nsys: str | None = None
    whole_trace: bool = False


@dataclass
class DiffOptions(AnalyzeOptions):
    """A diff analyzes each side with these options (no model FLOPs, no budget); `top` is the
    number of explanation items before the remainder line."""
    top: int = 8
    noise_floor_pct: float = 0.5    # changes below this % of the base step time are noise
    families: int = 12              # rows in the kernel-family lists


def check_options(opts: AnalyzeOptions, con=None) -> None:
    """Usage errors in the options, before any work."""
    if opts.top < 0:
        raise UsageError(None, "--top must be 0 or more")
    if opts.tokens_per_step is not None and opts.tokens_per_step <= 0:
        raise UsageError(None, "--tokens-per-step must be positive")
    if opts.peak_tflops is not None and not opts.peak_tflops > 0:
        raise UsageError(None, "--peak-tflops must be positive")
    check_pattern_options(opts.step_regex, opts.comm_regex, con)
