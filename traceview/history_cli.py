"""`traceview history REPORTS...`: the nightly series of `analyze -f json` reports, ordered by the
capture time each records, with the nights where a metric left its noise band (see
`traceview.history` for the rule).

Exit codes: 0 (done; or no change where --fail-on-change looks), 1 (--fail-on-change: a metric
changed on one of the nights it looks at; --fail-on-regression: one got worse), 2 (an unreadable
file, a document of another schema, a report without a capture time, a bad option: one line on
stderr naming it, nothing written),
3 (internal error).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .cli_common import fail, guarded, write_output

HISTORY_FORMATS = ("text", "json", "markdown", "html")


def render_history(doc: dict, fmt: str) -> str:
    if fmt == "json":
        import json
        return json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n"
    if fmt == "html":
        from .reports import history_html
        return history_html.render(doc)
    from .reports import history_tables
    return history_tables.render_markdown(doc) if fmt == "markdown" else history_tables.render_text(doc)


def history_command(
    reports: List[Path] = typer.Argument(..., help="JSON reports of `traceview analyze -f json`, or folders of "
                                                  "them (searched recursively for *.json)"),
    fmt: str = typer.Option("text", "--format", "-f", help="text, json, markdown or html"),
    out: Optional[Path] = typer.Option(None, "-o", "--output", help="write to FILE"),
    fail_on_change: bool = typer.Option(False, "--fail-on-change", help="exit 1 when a metric changed "
                                        "(on any night, or on the newest --fail-last nights)"),
    fail_on_regression: bool = typer.Option(False, "--fail-on-regression", help="exit 1 when a metric got worse "
                                            "(like --fail-on-change, improvements pass)"),
    fail_last: Optional[int] = typer.Option(None, "--fail-last", metavar="N",
                                            help="--fail-on-change/--fail-on-regression look at the newest N "
                                                 "nights only"),
    window: int = typer.Option(28, "--window", help="previous nights in the baseline of a night"),
    k: float = typer.Option(4.5, "--k", help="band half-width in robust standard deviations (1.4826 × MAD)"),
    min_band: float = typer.Option(3.0, "--min-band", metavar="PCT", help="the band is at least PCT % of the "
                                                                          "baseline median"),
    min_nights: int = typer.Option(7, "--min-nights", help="nights of a regime needed before a night is judged"),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks"),
):
    """The nightly series of reports: a table and chart per metric, the nights where one changed."""
    if fmt not in HISTORY_FORMATS:
        fail(f"unknown --format {fmt!r} (choose from {', '.join(HISTORY_FORMATS)})")
    if fail_last is not None and fail_last < 1:
        fail("--fail-last must be at least 1")

    def run():
        from .history import Rule, build
        doc = build(list(reports), Rule(window=window, k=k, min_band_pct=min_band, min_nights=min_nights))
        write_output(render_history(doc, fmt), out)
        return doc

    doc = guarded(debug, run)
    if fail_on_change or fail_on_regression:
        from .history import failing
        if failing(doc, fail_last or len(doc["nights"]), regressions_only=not fail_on_change):
            raise typer.Exit(1)
