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
    from pathlib import Path
    from traceview.cli import write_output
    out_dir = Path(out_dir)
    for name, fmt in (("report.json", "json"), ("report.md", "markdown"), ("report.html", "html")):
        try:
            text = render(doc, fmt)
        except ImportError:
            continue
        write_output(text, out_dir / name)
