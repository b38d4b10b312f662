"""A small trace's analysis on two cores (document/assemble.py, where Session.one_thread_each: every
step runs on one thread, so the second core takes work beside the main thread's): name_tags made on
the range tree's thread, the breakdown's segments and the steps beside the layers made on a thread
of their own while the layers are made here, and the document byte for byte the one of a session
that builds every step itself (one core)."""
import threading

from helpers import ROOT, SpySession

from traceview.document.assemble import BESIDE_BREAKDOWN, BESIDE_LAYERS, assemble
from traceview.engine.session import Reader
from traceview.load import load
from traceview.reports import json_report

FIXTURE = ROOT / "fixtures" / "h200_moe_overlap.json.gz"


def test_a_small_trace_builds_the_breakdown_beside_the_layers_and_gives_the_same_document(monkeypatch):
    profile = load([str(FIXTURE)])
    elsewhere: list[tuple[str, str]] = []
    create = Reader.create
    monkeypatch.setattr(Reader, "create", lambda self, name, *a: elsewhere.append(
        (name, threading.current_thread().name)) or create(self, name, *a))
    two = SpySession(profile, 2)
    assert two.one_thread_each()              # the fixture is small: its steps run on one thread each
    doc_two = json_report.render_bytes(assemble(profile, session=two))
    on = {}
    for name, thread in elsewhere:
        on.setdefault(thread, []).append(name)
    assert on.get("traceview-step-range_context_raw") == ["name_tags"]
    assert on.get("traceview-steps") == list(BESIDE_BREAKDOWN + BESIDE_LAYERS)
    assert not set(BESIDE_BREAKDOWN + BESIDE_LAYERS + ("name_tags",)) & set(two.made)   # taken, not rebuilt
    # the main thread made the attribution before it took the segments: they were made meanwhile
    assert two.order.index("activity_attribution") < two.order.index("taken segments")
    elsewhere.clear()
    one = SpySession(profile, 1)
    assert not one.one_thread_each()
    doc_one = json_report.render_bytes(assemble(profile, session=one))
    assert elsewhere == [] or all(t.startswith("traceview-flops") for _, t in elsewhere)
    assert {"segments", "breakdown", "name_tags"} <= set(one.made)
    assert doc_two == doc_one
