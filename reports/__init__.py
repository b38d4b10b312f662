"""Report renderers: one module per output format, all fed the same report document."""
from __future__ import annotations


def render(doc: dict, fmt: str) -> str:
    if fmt == "json":
        from . import json_report
        return json_report.render(doc)
    if fmt == "text":
        from . import text
        return text.render(doc)
    if fmt == "markdown":
        from . import markdown
        return markdown.render(doc)
    if fmt == "html":
        from . import html
        return html.render(doc)
    raise ValueError(f"unknown format {fmt}")


def write_bundle(doc: dict, out_dir) -> None:
    """report.json, report.md (linking the charts), report.html and charts/*.svg|png into out_dir.
    Everything is rendered before anything is written; each file is written atomically, and a
    directory that cannot be written is a usage error naming it."""
    from pathlib import Path
    from traceview.cli import write_output
    from . import charts, html, json_report, markdown
    out_dir = Path(out_dir)
    images = charts.render_images(doc)
    files = images + [("report.json", json_report.render(doc)),
                      ("report.md", markdown.render(doc, images=[rel for rel, _ in images])),
                      ("report.html", html.render(doc))]
    for rel, data in files:
        write_output(data, out_dir / rel)
