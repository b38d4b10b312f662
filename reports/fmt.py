"""Number and word formats shared by every renderer: one `ms`, one `clip`, one plain-text table,
one budget headline, and the sentences several formats print the same way (what the inputs are,
the diff verdict, the latent-regression headline, the MFU denominators).

Plain text only: each renderer escapes what it prints for its format (reports/escape.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from traceview.document.types import Budget, DiffDocument, Flops, Input


def ms(ns: float | None, missing: str = "-") -> str:
    """Nanoseconds as milliseconds with three decimals ('1,234.567'); `missing` for None."""
    return missing if ns is None else f"{ns / 1e6:,.3f}"


def signed_ms(ns: float | None) -> str:
    """Like `ms` with a sign ('+0.250'); None reads as 0."""
    return f"{(ns or 0) / 1e6:+,.3f}"


def one_line(s: object) -> str:
    return " ".join(str(s).split())


def clip(s: object, n: int) -> str:
    """One line of at most n characters ('…' marks a cut)."""
    text = one_line(s)
    return text if len(text) <= n else text[: max(1, n - 1)] + "…"


def pc(x: float | None) -> str:
    """A fraction as a percentage ('12.5%'), 'n/a' for None."""
    return f"{100 * x:.1f}%" if x is not None else "n/a"


def tflops(x: float | None) -> str:
    return f"{x:,.1f}" if x is not None else "n/a"


def mb_per(nbytes: float | None, n: int) -> str:
    """Bytes as MB per step over n windows ('-' when none)."""
    return f"{nbytes / n / 1e6:,.1f}" if nbytes else "-"


def table(headers: Sequence[object], rows: Sequence[Sequence[object]], aligns: str | None = None) -> list[str]:
    """A plain-text table padded to column widths: 'l' or 'r' per column (default: first left)."""
    cols = [[str(h)] + [str(r[i]) for r in rows] for i, h in enumerate(headers)]
    widths = [max(len(c) for c in col) for col in cols]
    how = aligns or "l" + "r" * (len(headers) - 1)

    def line(vals: list[str]) -> str:
        cells = zip(vals, widths, how, strict=False)
        return "  ".join(v.ljust(w) if a == "l" else v.rjust(w) for v, w, a in cells).rstrip()

    out = [line([str(h) for h in headers]), line(["-" * w for w in widths])]
    out += [line([str(v) for v in r]) for r in rows]
    return out


def budget_headline(b: Budget, esc: Callable[[str], str] = str) -> tuple[bool, str, list[str]]:
    """(all met, 'Budget FILE: ...' headline, violation messages), names escaped by `esc`."""
    v = b.get("violations") or []
    n = len(b["checked"])
    if not v:
        return True, f"Budget {esc(b['file'])}: all {n} threshold(s) met", []
    return False, f"Budget {esc(b['file'])}: {len(v)} of {n} threshold(s) violated", [esc(c["message"]) for c in v]


def inputs_words(inputs: Sequence[Input]) -> str:
    """What the inputs are, in words: 'run.sqlite: 1 file, 2 processes (ranks by process order)',
    'overlap.json.gz', '8 files, 8 ranks'. One nsys file may hold several processes (ranks)."""
    files = list(dict.fromkeys(i["file"] for i in inputs))
    n = len(inputs)
    if len(files) == 1 and n > 1:
        how = {str(i.get("rank_source") or "") for i in inputs}
        src = how.pop() if len(how) == 1 else ""
        src = {"pid order": "process order"}.get(src, src)
        return f"{files[0]}: 1 file, {n} processes" + (f" (ranks by {src})" if src else "")
    if len(files) == 1:
        return files[0]
    return f"{len(files)} files" + (f", {n} ranks" if n != len(files) else "")


def mfu_denominators(f: Flops) -> str:
    """Dense-bf16 and precision-weighted MFU, each with its denominator (one sentence)."""
    pw = (f"precision-weighted MFU {pc(f['mfu_precision_weighted'])} against each op's own precision "
          f"(effective peak {tflops(f.get('peak_tflops_precision_weighted'))} TFLOP/s)"
          if f.get("mfu_precision_weighted") is not None else
          "precision-weighted MFU n/a (" + ("a precision has no peak for this GPU" if f.get("flops_by_precision")
                                            else "the precision split needs trace shapes") + ")")
    achievable = f.get("mfu_achievable")
    return (f"MFU {pc(f.get('mfu_dense_bf16'))} against the dense bf16 peak "
            f"({tflops(f.get('peak_tflops_dense_bf16'))} TFLOP/s); {pw}"
            + (f"; {pc(achievable)} of what this trace sustains" if achievable is not None else ""))


def latent_headline(doc: DiffDocument) -> str | None:
    """'latent regression: GPU work +0.500 ms per step (+19.8 %), hidden by idle time ...' when
    the document has a latent regression, else None."""
    delta = doc.get("delta")
    w = delta.get("gpu_work") if delta else None
    if not doc.get("latent") or not w or not w.get("latent"):
        return None
    share = w.get("pct")
    pct = f" ({share:+.1f} %)" if share is not None else ""
    return (f"latent regression: GPU work {w['delta_ns'] / 1e6:+,.3f} ms per step{pct}, "
            f"{w['hidden_ns'] / 1e6:,.3f} ms of it hidden by idle time; once the host-side bottleneck is "
            f"gone the step grows by up to that much, led by:")


def verdict_words(doc: DiffDocument) -> str:
    """The verdict as a reader sees it: 'noise', 'regression', ..., plus ' + latent regression'."""
    return str(doc.get("verdict")) + (" + latent regression" if latent_headline(doc) else "")
