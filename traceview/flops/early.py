"""The FLOPs steps that read only the profile's tables (the op shapes and their FLOPs, the counted
ops, their kernels and the kernels' families, the embedding tokens), built on a thread of their own
in a session of their own while the analysis session computes the layers and the critical paths;
the FLOPs section then takes their tables as built (`adopt`) instead of building them last, on one
core.

Where it runs: a job analyzed in its own process (no mapped workers) whose session was given a
second core (`step_threads` > 1). On a large trace (`start`: CPU ranges at least the session's
`parallel_min_rows`, as for a step declared `threads: all`) in a session of its own on the thread's
own DuckDB database (traceview/duck.py), started once the layers are prepared. On a small trace
(`start_small`: no table of the profile that large) from the start of `assemble`, while the
breakdown's steps run on one thread, in a session shared with the analysis session's database (a
second connection: Session(share=...)), because a second database cost more than the thread gave
there. Either session is single-threaded like every session, so its tables are the ones the
analysis session would have built.

Measured (whole process, interleaved pairs, unless said):
- the thread itself, on Kineto overlap x34 (1,017,654 CPU ranges), in one process, one loaded
  profile, `assemble` with and without it, 15 pairs on 2 cores: median 4.69 -> 4.43 s, paired
  -0.20 s (faster in 11 pairs); the early build takes 0.5-0.6 s on its thread and the FLOPs section
  1.0 -> 0.6 s; whole-process peak RSS 785 -> 801 MiB. From the start of `assemble` it competed
  with the breakdown's steps, which use both cores there;
- started after the layers rather than after the step rows, once range_context_raw ran on a thread
  during the breakdown (engine/pipeline.start): after the step rows it ran beside
  activity_attribution, the largest query. Overlap x34, 5 pairs: peak RSS 900 -> 803 MiB, wall
  5.93 -> 5.86 s; nsys x100 unchanged;
- `start_small` against the tree without it: overlap x5 (12 pairs) A/B wall 1.028,
  hta_df_index_resolver (15) 1.008, the bundled fixture (15) 1.016, nsys h100_2gpu_train_a2a (15)
  0.995; peak RSS +0-12 MiB. With a second database instead (the previous stop): x5 -2.8 %, the
  resolver +0.8 %, the fixture +1.9 %.
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
    """The early FLOPs steps of one profile, being built on a thread (`start`, `start_small`)."""

    def __init__(self, profile: Profile, tokens: bool, share: Session | None = None):
        targets = TARGETS + ((TOKENS,) if tokens else ())
        self.later = Later(_build, profile, targets, share, name="traceview-flops-early")

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


def start_small(session: Session, tokens: bool) -> Early | None:
    """On a small trace (no table of the profile as large as a step declared `threads: all` needs to
    run on more than one: the session's steps all run on one thread, the second core idle), start
    the early FLOPs steps now, from the start of `assemble`, on a second connection onto the
    session's own database (a shared session: no second database to make, which cost more than it
    gave); None elsewhere (`start` decides there, later)."""
    if session.profile is None or not session.one_thread_each():
        return None
    return Early(session.profile, tokens, share=session)


def _build(profile: Profile, targets: tuple[str, ...], share: Session | None = None) -> dict[str, pa.Table]:
    """On the early thread: the tables of SHAPED and, where ops record their shapes, of `targets`
    and what they need, as Arrow tables (built in a session of the thread's own database, or a
    session `share`d with the analysis session's)."""
    from .mfu import SHAPED_SQL
    s = Session(profile, share=share)
    try:
        build(s, [SHAPED])
        shaped = s.rows(SHAPED_SQL)[0]
        if not (shaped["ops"] and shaped["shaped"] == 0):   # ops with shapes: as the FLOPs section decides
            build(s, list(targets))
        return {name: s.arrow(name) for name in s.built}
    finally:
        s.close()
