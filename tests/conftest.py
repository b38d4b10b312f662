import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `fixtures` is a top-level folder of the repository, not installed
    sys.path.insert(0, str(ROOT))


import pytest  # noqa: E402

# Before any fixture: module- and session-scoped fixtures run before the per-test store below is set,
# and must not write beside corpus inputs or into the per-user cache either.
if not os.environ.get("TRACEVIEW_CACHE_DIR", "").startswith(tempfile.gettempdir()):
    os.environ["TRACEVIEW_CACHE_DIR"] = tempfile.mkdtemp(prefix="traceview-tests-")
# Every SQL step built by a test, in-process or in a command a test runs, is checked for the columns its
# header declares (engine/pipeline.check_sql_columns; a run outside the tests skips that check).
os.environ["TRACEVIEW_CHECK_STEPS"] = "1"


@pytest.fixture(autouse=True)
def _every_report_matches_its_schema(monkeypatch):
    """Every JSON report rendered in-process by a test is validated against the shipped schema."""
    from reports_support import validate

    from traceview.reports import json_report
    original, original_bytes = json_report.render, json_report.render_bytes
    monkeypatch.setattr(json_report, "render", lambda doc: original(validate(doc)))
    monkeypatch.setattr(json_report, "render_bytes", lambda doc, *a, **k: original_bytes(validate(doc), *a, **k))


@pytest.fixture(autouse=True)
def _store_in_a_temporary_folder(monkeypatch, tmp_path_factory):
    """The default store lies beside the input: a test on a corpus trace would write into ../shared.
    Every test's store is a temporary folder unless the test says otherwise."""
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("store")))


@pytest.fixture(autouse=True)
def _default_input_ceiling():
    """A test that sets --max-input-size in-process leaves the next test the default ceiling."""
    yield
    from traceview.parsers import bounded_read
    bounded_read.set_max_input_size(None)
