"""The FLOPs steps that read only the profile's tables (the op shapes and their FLOPs, the counted
ops, their kernels and the kernels' families, the embedding tokens), built on a thread of their own
in a session of their own while the analysis session computes the layers and the critical paths;
the FLOPs section then takes their tables as built (`adopt`) instead of building them last, on one
core.

Where it runs: a job analyzed in its own process (no mapped workers) whose session was given a
second core (`step_threads` > 1) and whose CPU ranges are many (at least the session's
`parallel_min_rows`, as for a step declared `threads: all`): on a small trace a second database and
thread cost more than they give. The early session is single-threaded like every session, on its
own DuckDB database (the thread's: traceview/duck.py), so its tables are the ones the analysis
session would have built. Started once the layers are prepared: from the start of `assemble` it
competed with the breakdown's steps, which use both cores already, and once range_context_raw was
computed on a thread during the breakdown (engine/pipeline.start), started after the step rows it
ran beside activity_attribution, the largest query: overlap x34, 5 interleaved pairs, peak RSS
900 -> 803 MiB (the peak of the tree before the thread), wall 5.93 -> 5.86 s; nsys x100 unchanged.
The thread itself, measured on Kineto overlap x34 (1,017,654 CPU ranges) in one process, one loaded
profile, `assemble` with and without it, 15 interleaved pairs on 2 cores: median 4.69 -> 4.43 s,
paired -0.20 s (faster in 11 pairs); the early build takes 0.5-0.6 s on its thread and the FLOPs
section 1.0 -> 0.6 s; whole-process peak RSS
785 -> 801 MiB.
"""
from __future__ import annotations

import pyarrow as pa

from ..engine.pipeline import build
from ..engine.session import Session
from ..later import Later
from ..profile import Profile
from . import steps as _steps  # noqa: F401  (declares the FLOPs Python steps built here)

SHAPED = "flops_shaped_ops"
# The FLOPs section's steps that need nothing but the profile's tables: this one and the steps it
# requires (flops_shapes, flops_ops, flops_kernels, flops_kernel_info).
TARGETS = ("flops_op_kernels",)
TOKENS = "flops_embedding_tokens"    # only where the tokens per step are not given


class Early:
    """The early FLOPs steps of one profile, being built on a thread (`start`)."""

    def __init__(self, profile: Profile, tokens: bool):
        targets = TARGETS + ((TOKENS,) if tokens else ())
        self.later = Later(_build, profile, targets, name="traceview-flops-early")

    def adopt(self, session: Session) -> list[str]:
        """Wait for the early tables and give `session` those it has not built (built with no
        parameters, as these steps take none); returns their names. An error of the early build is
        raised here, where the FLOPs section would have met it."""
        tables = self.later.result()
        out = []
        for name, table in tables.items():
            if name not in session.built:
                session.adopt(name, table, {})
                out.append(name)
        return out


def start(session: Session, tokens: bool) -> Early | None:
    """Start building the early FLOPs steps of the session's profile on a thread, where it pays
    (see the module doc); None where it does not. `tokens`: the embedding tokens are wanted too."""
    profile = session.profile
    if profile is None or getattr(profile, "remote", None) is not None \
            or not session.worth_threads(("cpu_ranges",)):   # the test of a step declared `threads: all`
        return None
    return Early(profile, tokens)


def _build(profile: Profile, targets: tuple[str, ...]) -> dict[str, pa.Table]:
    """On the early thread: the tables of SHAPED and, where ops record their shapes, of `targets`
    and what they need, as Arrow tables."""
    from .mfu import SHAPED_SQL
    s = Session(profile)
    try:
        build(s, [SHAPED])
        shaped = s.rows(SHAPED_SQL)[0]
        if not (shaped["ops"] and shaped["shaped"] == 0):   # ops with shapes: as the FLOPs section decides
            build(s, list(targets))
        return {name: s.arrow(name) for name in s.built}
    finally:
        s.con.close()
