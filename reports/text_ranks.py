"""Terminal layout of the many-rank tables (reports/rank_tables.py): tables that fit 100 columns.
The two rank-list columns become one, "high ..." / "low ...", wrapped onto continuation lines."""
from __future__ import annotations

import textwrap

from traceview.document.types import ReportDocument

from . import rank_tables as rt
from .fmt import clip, table

LIST_WIDTH = 40
NAME_WIDTH = 24


def _merge_lists(t: rt.Table) -> tuple[list[str], list[list[str]], str]:
    """Headers, rows and aligns with the 'above' and 'below' columns merged into one."""
    h = t.headers
    if len(h) >= 2 and "above the median" in h[-2] and "below the median" in h[-1]:
        what = h[-2].split(" above")[0]
        heads = h[:-2] + [f"{what} far from the median (high/low)"]
        rows = []
        for r in t.rows:
            cell = "; ".join(x for x in ((f"high {r[-2]}" if r[-2] != "-" else ""),
                                         (f"low {r[-1]}" if r[-1] != "-" else "")) if x) or "-"
            rows.append(r[:-2] + [cell])
        return heads, rows, t.aligns[:-1]
    return list(h), [list(r) for r in t.rows], t.aligns


def lines(t: rt.Table | None) -> list[str]:
    if t is None:
        return []
    heads, rows, aligns = _merge_lists(t)
    out_rows = []
    for r in rows:
        cells = [clip(c, NAME_WIDTH) if i in t.names else c for i, c in enumerate(r)]
        last = textwrap.wrap(cells[-1], LIST_WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
        out_rows.append(cells[:-1] + [last[0]])
        out_rows += [[""] * (len(cells) - 1) + [more] for more in last[1:]]
    out = textwrap.wrap(t.title, 100)
    out += table(heads, out_rows, aligns) if out_rows else []
    for n in t.notes:
        out += textwrap.wrap(n, 100)
    return out + [""]


def breakdown_lines(doc: ReportDocument) -> list[str]:
    return lines(rt.breakdown(doc))


def cp_lines(doc: ReportDocument) -> list[str]:
    return lines(rt.critical_path(doc)) + lines(rt.stall_causes(doc))


def layer_lines(doc: ReportDocument) -> list[str]:
    return lines(rt.layer_compute(doc))


def collective_lines(doc: ReportDocument) -> list[str]:
    return lines(rt.collective_groups(doc))


def straggler_lines(doc: ReportDocument) -> list[str]:
    return lines(rt.stragglers(doc))
