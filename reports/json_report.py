"""JSON report: deterministic bytes for the same input (sorted keys, fixed float formatting)."""
from __future__ import annotations

import json


def render(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
