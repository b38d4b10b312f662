"""Exact conversions between TFLOP/s and tokens/s (Fractions in, Fractions out), and their printing.

Pure Python: `traceview mfu` needs only these, the model presets and the peaks, so it starts without
importing the table libraries.
"""
from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

TERA = 10**12


def tflops_from_tokens(tokens_per_s: Fraction, flops_per_token: Fraction) -> Fraction:
    return Fraction(tokens_per_s) * Fraction(flops_per_token) / TERA


def tokens_from_tflops(tflops: Fraction, flops_per_token: Fraction) -> Fraction:
    return Fraction(tflops) * TERA / Fraction(flops_per_token)


def decimal_str(x: Fraction, digits: int) -> str:
    """x rounded to `digits` significant digits, plain notation, no trailing zeros."""
    with localcontext() as ctx:
        ctx.prec = digits
        d = Decimal(x.numerator) / Decimal(x.denominator)
    s = format(d.normalize(), "f")
    return s


def roundtrip_str(value: Fraction, back, target: Fraction) -> str:
    """Shortest decimal d of `value` that (1) reads as the same float as `value` and (2) converts
    back (`back(d)`) to the same float as `target`. A derived quantity printed this way can be fed
    back in and reproduces `target` exactly, and printing that reverse result by the same rule gives
    `target`'s shortest form: TFLOP/s -> tokens/s -> TFLOP/s round-trips to the same text."""
    fv, ft = float(value), float(target)
    shortest = format(Decimal(repr(fv)).normalize(), "f")   # the float's canonical (repr) digits
    if float(back(Fraction(shortest))) == ft:
        return shortest
    for digits in range(len(Decimal(repr(fv)).normalize().as_tuple().digits), 80):
        s = decimal_str(value, digits)
        d = Fraction(s)
        if float(d) == fv and float(back(d)) == ft:
            return s
    return decimal_str(value, 80)
