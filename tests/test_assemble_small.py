"""A small trace's analysis on two cores (document/assemble.py, where Session.one_thread_each: every
step runs on one thread, so the second core takes work beside the main thread's): name_tags made on
the range tree's thread, the attribution on a thread of its own while the activities are classed
here, comm_ops, the host syncs and the steps beside the layers on another while the segments are
made here, and the document byte for byte the one of a session that builds every step itself (one
core)."""
import threading

from helpers import ROOT, SpySession

from traceview.document.assemble import ATTRIBUTION, BESIDE_BREAKDOWN, BESIDE_LAYERS, assemble
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
    assert on.get("traceview-steps") == list(BESIDE_BREAKDOWN)
    assert on.get("traceview-beside-layers") == list(BESIDE_LAYERS)
    # (layer_blocks is a Python step: made there too, not by Reader.create)
    assert on.get("traceview-attribution") == [n for n in ATTRIBUTION if n != "layer_blocks"]
    taken = set(ATTRIBUTION + BESIDE_BREAKDOWN + BESIDE_LAYERS + ("name_tags",)) - {"layer_blocks"}
    assert not taken & set(two.made)                                        # taken, not rebuilt
    # (a Python step's table is registered here as it is taken: made on the thread, run once)
    assert {"activity_class", "segments", "breakdown"} <= set(two.made)    # made here meanwhile
    # the main thread classed the activities before it took the attribution: made meanwhile
    assert two.order.index("activity_class") < two.order.index("taken activity_attribution")
    elsewhere.clear()
    one = SpySession(profile, 1)
    assert not one.one_thread_each()
    doc_one = json_report.render_bytes(assemble(profile, session=one))
    assert elsewhere == [] or all(t.startswith("traceview-flops") for _, t in elsewhere)
    assert {"segments", "breakdown", "name_tags"} <= set(one.made)
    assert doc_two == doc_one
