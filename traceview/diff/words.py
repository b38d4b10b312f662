"""Words shared by the explanation's cause detection and its sentences: durations, layer ranges,
where in the model a cause sits, and a stall's status (plain text; renderers escape it)."""
from __future__ import annotations

from typing import Iterable


def fmt_ns(ns: float, signed: bool = True) -> str:
    a = abs(ns)
    sign = ("+" if ns > 0 else "-" if ns < 0 else "±") if signed else ("-" if ns < 0 else "")
    if a >= 1e6:
        return f"{sign}{a / 1e6:.1f} ms"
    if a >= 1e3:
        return f"{sign}{a / 1e3:.1f} us"
    return f"{sign}{a:.0f} ns"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms" if abs(ns) >= 1e5 else f"{ns / 1e3:.1f} us"


def ranges(nums: Iterable[int | None]) -> str:
    nums = sorted({n for n in nums if n is not None})
    if not nums:
        return ""
    out, start, prev = [], nums[0], nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(out)


def where(layers: Iterable[int | None], phases: Iterable[str | None], stage: str | None,
          region: str | None = None) -> str:
    ls = [x for x in layers if x is not None]
    ph = sorted({p for p in phases if p}, key=lambda p: ("forward", "backward").index(p)
                if p in ("forward", "backward") else 2)
    bits = []
    if stage and stage != "other":
        bits.append(f"the {stage} stage")
    if ls:
        bits.append(("layer " if len(set(ls)) == 1 else "layers ") + ranges(ls))
    elif region == "outside":
        bits = ["work outside the layers"] + ([f"({stage})"] if stage and stage != "other" else [])
    elif region == "unattributed":
        bits.append("unattributed work")
    s = " of ".join(bits) if bits else "the step"
    if region == "outside" and len(bits) > 1:
        s = " ".join(bits)
    ph = [p for p in ph if p != "other"]
    if ph:
        s += ", " + " and ".join(ph)
    return s


def cont(loc: str) -> str:
    """`loc` followed by more words: a comma closes the phases ('layer 1, forward, now run...')."""
    return loc + "," if loc.endswith(("forward", "backward")) else loc


def stall_status(bv: float, nv: float) -> str:
    return "new" if bv == 0 and nv > 0 else "gone" if nv == 0 and bv > 0 else \
        "grown" if nv > bv else "shrunk" if nv < bv else "same"
