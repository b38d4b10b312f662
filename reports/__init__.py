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
    """report.json, report.md (linking the charts), report.html and charts/*.svg|png into out_dir."""
    from pathlib import Path
    from traceview.cli import write_output
    from . import charts, html, json_report, markdown
    out_dir = Path(out_dir)
    images = charts.write_images(doc, out_dir)
    write_output(json_report.render(doc), out_dir / "report.json")
    write_output(markdown.render(doc, images=images), out_dir / "report.md")
    write_output(html.render(doc), out_dir / "report.html")
