"""Delivered vs peak FLOPs: model FLOPs per token, FLOPs from trace shapes, peaks, MFU.

See docs/FLOPS.md for the formulas and their assumptions. The names below are loaded on first use
(PEP 562), so importing a light submodule (models, peaks, convert) does not import the table libraries.
"""
from __future__ import annotations

import importlib

_HOME = {
    **dict.fromkeys(("ModelConfig", "PRESETS", "config_from_dict", "forward_flops_per_token", "load_config",
                     "param_counts", "preset", "resolve", "training_flops_per_token"), "models"),
    **dict.fromkeys(("PEAKS", "match_gpu", "normalize_dtype", "peak_tflops"), "peaks"),
    **dict.fromkeys(("shape_flops",), "trace_flops"),
    **dict.fromkeys(("by_group", "flops_section"), "mfu"),
    **dict.fromkeys(("tflops_from_tokens", "tokens_from_tflops"), "convert"),
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
