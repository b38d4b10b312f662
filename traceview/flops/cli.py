"""`traceview mfu`: TFLOP/s per GPU <-> tokens/s per GPU <-> MFU for a model, without a trace."""
from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import Optional, overload

import typer

from ..errors import TraceError, UsageError

# The model, peak and conversion modules load when `mfu` runs (not for `traceview --help`).


@overload
def _num(text: str, flag: str) -> Fraction: ...
@overload
def _num(text: None, flag: str) -> None: ...
@overload
def _num(text: str | None, flag: str) -> Fraction | None: ...
def _num(text: str | None, flag: str) -> Fraction | None:
    if text is None:
        return None
    clean = text.strip().replace("_", "")
    try:
        approx = float(clean)       # first, so that 1e999999 is refused before it is expanded
        v = Fraction(clean)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise UsageError(None, f"{flag}: not a number: {text!r}") from None
    if not math.isfinite(approx) or (approx == 0 and v != 0):
        raise UsageError(None, f"{flag}: {text!r} is out of range (a finite double is needed)")
    if v <= 0:
        raise UsageError(None, f"{flag} must be positive")
    return v


def _mfu(text: str | None) -> Fraction | None:
    """MFU is a fraction in (0, 1]; '50%' (with the percent sign) is accepted as 0.5. A bare
    number above 1 is refused with a hint: 50 is not 50 %."""
    if text is None:
        return None
    t = text.strip()
    if t.endswith("%"):
        v = _num(t[:-1], "--mfu")
        v = v / 100
    else:
        v = _num(t, "--mfu")
    if v > 1:
        from .convert import decimal_str
        raise UsageError(None, f"--mfu {text}: MFU is a fraction in (0, 1]" + (
            f"; for {t} % write --mfu {decimal_str(v / 100, 20)} or --mfu {t}%" if not t.endswith("%") else ""))
    return v


def _presets_help() -> str:
    from .models import PRESETS
    return "model preset: " + ", ".join(PRESETS)


def mfu_lines(model: Optional[str] = None, model_config: Optional[Path] = None, gpu: Optional[str] = None,
              dtype: Optional[str] = None, peak_tflops: Optional[str] = None, seq_len: Optional[int] = None,
              step_time: Optional[str] = None, tokens_per_step: Optional[int] = None,
              tokens_per_second_per_gpu: Optional[str] = None, tflops_per_gpu: Optional[str] = None,
              mfu: Optional[str] = None) -> list[str]:
    """The lines `traceview mfu` prints (raises UsageError on bad input)."""
    from .convert import decimal_str, roundtrip_str, tflops_from_tokens, tokens_from_tflops
    from .models import param_counts, resolve, training_flops_per_token
    from .peaks import normalize_dtype, peak_tflops as lookup_peak
    cfg = resolve(model, model_config, seq_len)
    if cfg is None:
        raise UsageError(None, "give --model NAME or --model-config FILE")
    if tokens_per_step is not None and tokens_per_step <= 0:
        raise UsageError(None, "--tokens-per-step must be positive")
    given = [n for n, v in (("--step-time/--tokens-per-step", step_time or tokens_per_step),
                            ("--tokens-per-second-per-gpu", tokens_per_second_per_gpu),
                            ("--tflops-per-gpu", tflops_per_gpu), ("--mfu", mfu)) if v]
    if len(given) != 1:
        raise UsageError(None, "give exactly one of --step-time S --tokens-per-step N, "
                               "--tokens-per-second-per-gpu X, --tflops-per-gpu Y, --mfu F")
    fpt = training_flops_per_token(cfg)
    peak = _num(peak_tflops, "--peak-tflops")
    dt = normalize_dtype(dtype)
    peak_note = "given (--peak-tflops)"
    if peak is None and gpu:
        p, key, dt = lookup_peak(gpu, dt)  # UsageError for an unknown GPU: never guessed
        peak, peak_note = Fraction(str(p)), f"{key} {dt} dense, peak table"
    if mfu and peak is None:
        raise UsageError(None, "--mfu needs --gpu NAME or --peak-tflops")

    # the primary quantity, exactly as given, and how to get back to it from the other two
    if given[0].startswith("--step-time"):
        if not (step_time and tokens_per_step):
            raise UsageError(None, "--step-time and --tokens-per-step go together")
        if tokens_per_step <= 0:
            raise UsageError(None, "--tokens-per-step must be positive")
        tok = Fraction(tokens_per_step) / _num(step_time, "--step-time")
        primary = ("tokens", tok)
    elif tokens_per_second_per_gpu:
        primary = ("tokens", _num(tokens_per_second_per_gpu, "--tokens-per-second-per-gpu"))
    elif tflops_per_gpu:
        primary = ("tflops", _num(tflops_per_gpu, "--tflops-per-gpu"))
    else:
        m = _mfu(mfu)
        if m is None:   # not reached: exactly one quantity was given above
            raise UsageError(None, "give --mfu F")
        primary = ("mfu", m)

    kind, x = primary
    to_tflops = {"tokens": lambda v: tflops_from_tokens(v, fpt), "tflops": lambda v: v, "mfu": lambda v: v * peak}[kind]
    from_tflops = {"tokens": lambda t: tokens_from_tflops(t, fpt), "tflops": lambda t: t,
                   "mfu": lambda t: t / peak}[kind]
    tfl = to_tflops(x)
    vals = {"tflops": tfl, "tokens": tokens_from_tflops(tfl, fpt), "mfu": tfl / peak if peak else None}
    backs = {"tflops": from_tflops, "tokens": lambda v: from_tflops(tflops_from_tokens(v, fpt)),
             "mfu": lambda v: from_tflops(v * peak)}

    def show(k):
        if vals[k] is None:
            return "unavailable (give --gpu NAME or --peak-tflops)"
        if k == kind:
            return decimal_str(x, 60) if _terminates(x) else repr(float(x))
        return roundtrip_str(vals[k], backs[k], x)

    pc = param_counts(cfg)
    warn = []
    if peak and tfl > peak:
        warn.append(f"warning: {float(tfl):,.1f} TFLOP/s per GPU is above the peak of {float(peak):,.1f} "
                    f"(MFU {float(tfl / peak):.2f} > 1): check the throughput, --gpu/--dtype or --peak-tflops")
    return [
        f"model: {cfg.name} (seq_len {cfg.seq_len}, {pc['total'] / 1e9:.2f}B params, "
        f"{pc['active'] / 1e9:.2f}B active, {pc['active_excl_embedding'] / 1e9:.2f}B without the embedding table)",
        f"flops_per_token: {decimal_str(fpt, 40)} (training = 3 x forward; "
        f"{float(fpt) / 1e9:.2f} GFLOP)",
        f"peak_tflops: {decimal_str(peak, 40) + ' (' + peak_note + ')' if peak else 'unknown'}",
        f"tflops_per_gpu: {show('tflops')}",
        f"tokens_per_second_per_gpu: {show('tokens')}",
        f"mfu: {show('mfu')}",
    ] + warn


def _terminates(x: Fraction) -> bool:
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def mfu_command(
    model: Optional[str] = typer.Option(None, "--model", help=_presets_help()),
    model_config: Optional[Path] = typer.Option(None, "--model-config", help="model config file (TOML or JSON)"),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU name (e.g. H200, 'NVIDIA GB300', MI300X)"),
    dtype: Optional[str] = typer.Option(None, "--dtype",
                                        help="data type of the peak: bf16 (default), fp8, fp4, tf32, fp32"),
    peak_tflops: Optional[str] = typer.Option(None, "--peak-tflops",
                                              help="dense peak TFLOP/s per GPU (overrides --gpu)"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="sequence length (attention FLOPs)"),
    step_time: Optional[str] = typer.Option(None, "--step-time", help="seconds per step (with --tokens-per-step)"),
    tokens_per_step: Optional[int] = typer.Option(None, "--tokens-per-step", help="tokens per step per GPU"),
    tokens_per_second_per_gpu: Optional[str] = typer.Option(None, "--tokens-per-second-per-gpu", help="throughput"),
    tflops_per_gpu: Optional[str] = typer.Option(None, "--tflops-per-gpu", help="delivered TFLOP/s per GPU"),
    mfu: Optional[str] = typer.Option(None, "--mfu", help="model FLOPs utilization: a fraction in (0, 1], "
                                      "or a percentage written with % (50% = 0.5)"),
):
    """Convert between TFLOP/s per GPU, tokens/s per GPU and MFU for a model (no trace needed)."""
    try:
        lines = mfu_lines(model, model_config, gpu, dtype, peak_tflops, seq_len, step_time, tokens_per_step,
                          tokens_per_second_per_gpu, tflops_per_gpu, mfu)
    except TraceError as e:
        from ..reports.escape import one_line_controls
        sys.stderr.write(f"traceview: {one_line_controls(e)}\n")
        raise typer.Exit(2) from None
    except (OverflowError, ZeroDivisionError):     # a result beyond a double's range
        sys.stderr.write("traceview: mfu: the numbers given overflow a double-precision result; "
                         "check their magnitudes\n")
        raise typer.Exit(2) from None
    typer.echo("\n".join(x for x in lines if not x.startswith("warning: ")))
    for x in lines:
        if x.startswith("warning: "):
            sys.stderr.write(f"traceview: {x}\n")


app = typer.Typer(add_completion=False)
app.command("mfu")(mfu_command)


@app.callback()
def _root() -> None:
    """(test harness: `mfu` as a subcommand, as in the main CLI)"""
