import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `fixtures` is a top-level folder of the repository, not installed
    sys.path.insert(0, str(ROOT))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _every_report_matches_its_schema(monkeypatch):
    """Every JSON report rendered in-process by a test is validated against the shipped schema."""
    from reports_support import validate

    from traceview.reports import json_report
    original = json_report.render
    monkeypatch.setattr(json_report, "render", lambda doc: original(validate(doc)))
