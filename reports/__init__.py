"""Report renderers: one module per output format, all fed the same report document.

Names in a document come from traces and file names: `render` and `render_diff` show their
control characters as escapes (`\\x1b`) in text, Markdown and HTML (reports/escape.py), keep them
as JSON escapes in JSON, and the charts of a bundle are drawn with them removed."""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import escape

if TYPE_CHECKING:   # (annotations only: not imported by a run that renders JSON)
    from traceview.document.types import DiffDocument, ReportDocument


def render(doc: ReportDocument, fmt: str, per_rank_rows: int | None = None) -> str:
    """The report in `fmt`. Text, Markdown and HTML list every rank in per-rank tables up to
    `per_rank_rows` ranks (default reports.ranks.PER_RANK_ROWS) and show distributions above."""
    if fmt == "json":
        from . import json_report
        return json_report.render(doc)
    from .ranks import per_rank_rows as rows_limit
    with rows_limit(per_rank_rows):
        return _render(escape.neutralize(doc), fmt)


def _render(doc: ReportDocument, fmt: str) -> str:
    if fmt == "text":
        from . import text
        return escape.controls(text.render(doc))
    if fmt == "markdown":
        from . import markdown
        return escape.controls(markdown.render(doc))
    if fmt == "html":
        from . import html
        return html.render(doc)
    raise ValueError(f"unknown format {fmt}")


def render_diff(doc: DiffDocument, fmt: str) -> str:
    """A traceview.diff/1 document in one of the formats of `render`."""
    if fmt == "json":
        from . import json_report
        return json_report.render_diff(doc)
    doc = escape.neutralize(doc)
    if fmt == "markdown":
        from . import diff_markdown
        return escape.controls(diff_markdown.render(doc))
    if fmt == "html":   # the reports' self-contained page (waterfall of the explanation)
        from . import html
        return html.render_diff_html(doc)
    if fmt == "text":
        from . import diff_text
        return escape.controls(diff_text.render(doc))
    raise ValueError(f"unknown format {fmt}")


def bundle_files(doc: ReportDocument, per_rank_rows: int | None = None) -> list[tuple[str, str | bytes]]:
    """(relative path, content) of the --out-dir bundle: report.json, report.md (linking the
    charts), report.html and charts/*.svg|png. Everything is rendered here, nothing written."""
    from .ranks import per_rank_rows as rows_limit
    with rows_limit(per_rank_rows):
        return _bundle_files(doc)


def _bundle_files(doc: ReportDocument) -> list[tuple[str, str | bytes]]:
    from . import charts, html, json_report, markdown
    images = charts.render_images(escape.neutralize(doc, escape.strip_controls))
    shown = escape.neutralize(doc)
    return images + [("report.json", json_report.render(doc)),
                     ("report.md", escape.controls(markdown.render(shown, images=[rel for rel, _ in images]))),
                     ("report.html", html.render(shown))]

