"""Training-side markers: ranges named the way traceview attributes them, seen by both profilers.

Each marker opens an NVTX range (recorded by Nsight Systems) and, when PyTorch is already
imported, a `torch.profiler.record_function` range (recorded by the PyTorch profiler as a user
annotation). traceview's default attribution patterns read these names, so no configuration
is needed::

    from traceview import markers

    for n, batch in enumerate(loader):
        with markers.step(n):
            with markers.phase("forward"):
                for i, block in enumerate(model.blocks):
                    with markers.layer(i, "attention"):
                        x = block.attn(x)
                    with markers.layer(i, "router"):
                        weights, experts = block.router(x)
                    with markers.layer(i, "dispatch"):
                        recv = dispatch_all_to_all(x, experts)
                    with markers.layer(i, "shared_expert"):
                        shared = block.shared_expert(x)
                    with markers.layer(i, "experts"):
                        y = block.experts(recv)
                    with markers.layer(i, "combine"):
                        x = combine_all_to_all(y) + shared
            with markers.phase("backward"):
                loss.backward()       # backward work is attributed through autograd links
            with markers.phase("optimizer"):
                opt.step()

Names: `layer(3, "dispatch")` -> `layer_03/moe/dispatch` (MoE stages under `moe/`),
`layer(3, "attention")` -> `layer_03/attention`, `step(7)` -> `step_7`, `phase("forward")` ->
`forward`. The markers cost one NVTX push/pop (and one record_function under the profiler).
"""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator

import nvtx

STAGES = ("attention", "router", "dispatch", "shared_expert", "experts", "combine")
MOE_STAGES = ("router", "dispatch", "shared_expert", "experts", "combine")
PHASES = ("forward", "backward", "optimizer")


def layer_name(index: int, stage: str | None = None) -> str:
    if not isinstance(index, int) or index < 0:
        raise ValueError(f"layer index must be a non-negative int, got {index!r}")
    if stage is None:
        return f"layer_{index:02d}"
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (choose from {', '.join(STAGES)})")
    return f"layer_{index:02d}/moe/{stage}" if stage in MOE_STAGES else f"layer_{index:02d}/{stage}"


@contextlib.contextmanager
def range(name: str) -> Iterator[None]:  # noqa: A001 - the natural name for a marker range
    """An NVTX range that is also a PyTorch-profiler user annotation (when torch is in use)."""
    torch = sys.modules.get("torch")
    rf = torch.profiler.record_function(name) if torch is not None and hasattr(torch, "profiler") else None
    nvtx.push_range(name)
    try:
        if rf is not None:
            with rf:
                yield
        else:
            yield
    finally:
        nvtx.pop_range()


def layer(index: int, stage: str | None = None):
    """`with markers.layer(3, "dispatch"):` -> range `layer_03/moe/dispatch`."""
    return range(layer_name(index, stage))


def step(n: int):
    """`with markers.step(7):` -> range `step_7` (traceview's default step pattern)."""
    return range(f"step_{int(n)}")


def phase(name: str):
    """`with markers.phase("forward"):` (forward, backward or optimizer)."""
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r} (choose from {', '.join(PHASES)})")
    return range(name)
