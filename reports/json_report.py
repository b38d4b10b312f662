"""JSON report: deterministic bytes for the same input (sorted keys, fixed float formatting).
DEL, C1 controls and U+2028/9 in names are written as \\u escapes (the parsed value is the same)."""
from __future__ import annotations

import json

from traceview.document.types import DiffDocument, ReportDocument

from .escape import json_controls


def render(doc: ReportDocument) -> str:
    return json_controls(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)) + "\n"


def render_diff(doc: DiffDocument) -> str:
    return json_controls(json.dumps(doc, indent=1, sort_keys=True, default=str)) + "\n"
