"""duck.release_unused: the pages DuckDB's allocator (jemalloc, linked into DuckDB's Linux builds with
its symbols prefixed) keeps after a query frees them go back to the system when asked, which the
process's resident size shows (read from /proc/self/statm, not from the allocator); where there is
no such allocator to call, it asks nothing and says so. The analysis asks for it after a large
critical-path chunk is fetched and before the nsys parse's NVTX sweep: a report computed with it
asked at every chunk and every sweep is byte for byte the one computed with it never asked."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest
from helpers import TRACES, analyze_paths

from traceview import duck
from traceview.analysis import critical_path
from traceview.parsers import nsys
from traceview.reports import json_report

BUNDLED = os.path.join(os.path.dirname(__file__), "..", "fixtures", "h200_moe_overlap.json.gz")
NSYS = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"


def _jemalloc() -> bool:
    """Whether DuckDB's extension exports its allocator's control call (looked up here, not by duck)."""
    ext = sys.modules.get("_duckdb") or sys.modules.get("duckdb.duckdb")
    path = getattr(ext, "__file__", None)
    if not path or not sys.platform.startswith("linux"):
        return False
    try:
        return hasattr(ctypes.CDLL(path), "duckdb_je_mallctl")
    except OSError:
        return False


_FREED_THEN_PURGED = """
import json, os, duckdb
from traceview import duck
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
con = duckdb.connect()
# a hash aggregate of 3,000,000 groups: its table (hundreds of MiB) is freed when the query ends,
# and the allocator keeps the pages; the result is one row
assert con.execute("SELECT count(*) FROM (SELECT range % 3000000 AS g, count(*) AS n FROM range(6000000) "
                   "GROUP BY g)").fetchall() == [(3000000,)]
before = rss()
asked = duck.release_unused()
print(json.dumps([asked, before, rss()]))
"""


@pytest.mark.skipif(not _jemalloc(), reason="this DuckDB build allocates without jemalloc (or not on Linux)")
def test_the_pages_a_query_freed_go_back_to_the_system():
    """In a fresh interpreter: in this one, the DuckDB databases and sessions of earlier tests (their
    allocator settings, engine/session.ALLOCATOR_SETTINGS, and their threads) decide when freed
    pages go back, so the pages a query freed may be gone, or not yet freed, when they are counted
    (1 failure in a CI run of the whole suite: 10 MiB given back of a 1,045 MiB process)."""
    got = subprocess.run([sys.executable, "-c", _FREED_THEN_PURGED], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    asked, before, after = json.loads(got.stdout.strip().splitlines()[-1])
    assert asked is True
    assert before - after >= 100, (before, after)


def test_without_the_allocators_call_nothing_is_asked(monkeypatch):
    monkeypatch.setattr(duck, "_PURGE", [None])
    assert duck.release_unused() is False


def _report(monkeypatch, path, every: bool) -> tuple[bytes, int]:
    calls: list[bool] = []
    real = duck.release_unused

    def spy() -> bool:
        calls.append(True)
        return real() if every else False
    monkeypatch.setattr(duck, "release_unused", spy)
    monkeypatch.setattr(critical_path, "RELEASE_AFTER", 0 if every else 10**15)
    monkeypatch.setattr(nsys, "RELEASE_AFTER", 0 if every else 10**15)
    doc = analyze_paths([path])
    return json_report.render_bytes(doc), len(calls)


@pytest.mark.parametrize("path", [BUNDLED, NSYS], ids=["kineto", "nsys"])
def test_a_report_is_the_same_with_the_pages_given_back(monkeypatch, path):
    never, none_asked = _report(monkeypatch, path, every=False)
    every, asked = _report(monkeypatch, path, every=True)
    assert none_asked == 0
    # every chunk of the walk (one here), and for the export its NVTX sweep too
    assert asked >= (2 if path == NSYS else 1)
    assert every == never
