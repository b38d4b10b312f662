"""Delivered vs peak FLOPs: model FLOPs per token, FLOPs from trace shapes, peaks, MFU.

See docs/FLOPS.md for the formulas and their assumptions.
"""
from .models import (ModelConfig, PRESETS, config_from_dict, forward_flops_per_token, load_config,
                     param_counts, preset, resolve, training_flops_per_token)
from .peaks import PEAKS, match_gpu, normalize_dtype, peak_tflops
from .trace_flops import kernel_flops, op_flops, shape_flops, step_windows, tokens_per_step
from .mfu import (flops_section, group_tflops, tflops_from_tokens, tokens_from_tflops, trace_flops)

__all__ = [
    "ModelConfig", "PRESETS", "config_from_dict", "forward_flops_per_token", "load_config", "param_counts",
    "preset", "resolve", "training_flops_per_token", "PEAKS", "match_gpu", "normalize_dtype", "peak_tflops",
    "kernel_flops", "op_flops", "shape_flops", "step_windows", "tokens_per_step", "flops_section",
    "group_tflops", "tflops_from_tokens", "tokens_from_tflops", "trace_flops",
]
